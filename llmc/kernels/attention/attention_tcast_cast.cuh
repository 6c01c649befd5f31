// attention_tcast_cast.cuh - the device side of the TensorCast attention sites (attention_tcast.cuh
// holds the semantics, the configuration and the scalar pieces): the out-of-line element and group
// casts, the group accumulation on bit patterns, the --cast-stats counters, the group casts in the two
// fragment layouts of the tensor-core kernels (attn_tc_cast_rows for query-major tiles: forward, dQ;
// attn_tc_cast_cols for key-major tiles: dK/dV), the per-tile steps in their TensorCast form, and the
// steps a query-major kernel names once for both forms (attn_fwd_step, attn_fwd_p_step,
// attn_dq_step: the plain steps of attention_tile.cuh when TC = false). Only the TC = true
// instantiations of the flash kernels reach the casts, and those exist only in builds whose mode sets
// kModeAttentionCasts.
#pragma once

#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/attention/attention_tcast.cuh"
#include "llmc/kernels/attention/attention_tile.cuh"

// The general element cast (tcast_quantize), out of line: zeros aside it is the rare path of the
// MX formats and the only one of the float-scaled ones, and inlining it at every element of the
// unrolled tiles would multiply the kernels' code size.
struct AttnQR {
    float v;
    unsigned flags;
};
__device__ __noinline__ AttnQR attn_tc_quant_slow(int site, AttnGroupQ q, float x, uint32_t u) {
    AttnQR r;
    r.v = tcast_quantize(&attn_tc_site[site].dt, &q.g, x, u, &r.flags);
    return r;
}
__device__ __noinline__ AttnGroupQ attn_tc_group_slow(int site, uint32_t amax, int32_t lo, int32_t hi) {
    return attn_tc_group_general(&attn_tc_site[site], amax, lo, hi);
}

template <int SITE>
__device__ __noinline__ AttnGroupQ attn_tc_group(uint32_t amax, int32_t lo, int32_t hi) {
    AttnGroupQ q;
    if (attn_tc_group_fast(&attn_tc_site[SITE], amax, &q)) return q;
    return attn_tc_group_slow(SITE, amax, lo, hi);
}

// The group of an unscaled site (every element alone).
template <int SITE>
__device__ __forceinline__ AttnGroupQ attn_tc_group_unscaled() {
    AttnGroupQ q;
    q.g.mode = TCAST_GROUP_UNSCALED;
    q.g.s = 0;
    q.g.scale = 0.0f;
    q.g.zero = 0.0f;
    q.g.izero = 0;
    q.g.hist = -1;
    q.fast = attn_tc_maxb(&attn_tc_site[SITE], 0, &q.maxb);
    return q;
}

// One element's cast: its random bits (when the site rounds stochastically; index = the element's flat
// (b, h, query, key) position) and the quantization, fast path first. Out of line on purpose: the cast
// loops over the kernels' fully unrolled fragments would otherwise inline hundreds of copies of it per
// kernel, which took cicc and ptxas past 20 minutes per translation unit; a call per element is the
// price (measured in doc/benchmarks.md, TensorCast).
template <int SITE, bool FLAGS>
__device__ __noinline__ AttnQR attn_tc_quant(AttnGroupQ q, float x, bool sto, uint64_t state, uint64_t index) {
    const AttnTcastSite& S = attn_tc_site[SITE];
    const uint32_t u = sto ? attn_tc_rbits(state, index) : 0u;
    AttnQR r;
    r.flags = 0;
    if (q.fast && attn_tc_quant_fast(&S.dt.number, S.dt.round, q.g.s, q.maxb, x, u, &r.v, FLAGS ? &r.flags : nullptr)) return r;
    return attn_tc_quant_slow(SITE, q, x, u);
}

// Group accumulation on bit patterns: amax (NaN / Inf included: >= Inf marks a special group) and,
// for uint data, the ordered keys of min(x, 0) and max(x, 0) (tcast_key_).
__device__ __forceinline__ void attn_tc_acc(uint32_t& am, int32_t& lo, int32_t& hi, float x, bool mm) {
    const uint32_t b = __float_as_uint(x);
    am = max(am, b & 0x7FFFFFFFu);
    if (mm) {
        const int32_t k = tcast_key_(b);
        lo = min(lo, k);
        hi = max(hi, k);
    }
}
__device__ __forceinline__ void attn_tc_shfl_merge(uint32_t& am, int32_t& lo, int32_t& hi, int mask, bool mm) {
    am = max(am, __shfl_xor_sync(0xffffffffu, am, mask));
    if (mm) {
        lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, mask));
        hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, mask));
    }
}

// --cast-stats: one group's scale, warp-aggregated (every lane calls; `valid` lanes count bin).
__device__ __forceinline__ void attn_tc_stats_group(TcastDeviceStats* st, bool valid, int bin) {
    valid = valid && bin >= 0 && bin < TCAST_HIST_BINS;
    const unsigned peers = __match_any_sync(0xffffffffu, valid ? bin : -1);
    if (valid && (int)(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&st->hist[bin], (unsigned)__popc(peers));
}

// The group partials of NC register chunks of 8 keys (query-major tiles: the thread's pair in each of
// the NC n-tiles of a row; key-major tiles: its value in each of the NC = 2*WM rows of 8 keys of a
// column, one per lane g), merged by a butterfly over the chunks: 2, 4 or 8 consecutive chunks for
// groups of X >= 16, 32, 64 keys, so that every chunk of a group ends with the group's partial (still
// to be merged across lanes, attn_tc_group_of).
template <int NC>
__device__ __forceinline__ void attn_tc_merge_chunks(uint32_t (&am)[NC], int32_t (&lo)[NC], int32_t (&hi)[NC], int X, bool mm) {
    #pragma unroll
    for (int lvl = 1; lvl < NC && lvl <= 4; lvl <<= 1) {
        if (X >= 16 * lvl) {
            #pragma unroll
            for (int c = 0; c < NC; c++) {
                am[c] = max(am[c], am[c ^ lvl]);
                if (mm) {
                    lo[c] = min(lo[c], lo[c ^ lvl]);
                    hi[c] = max(hi[c], hi[c ^ lvl]);
                }
            }
        }
    }
}

// The group of a chunk whose partial is (a, l, h): merged over the lanes that hold the group's other
// keys (lane xor L2 for every X >= 2 when L2 != 0, xor L4 for X >= 4, xor L8 for X >= 8), then its
// scale (attn_tc_group).
template <int SITE, int L2, int L4, int L8>
__device__ __forceinline__ AttnGroupQ attn_tc_group_of(uint32_t a, int32_t l, int32_t h, int X, bool mm) {
    if constexpr (L2 != 0) attn_tc_shfl_merge(a, l, h, L2, mm);
    if (X >= 4) attn_tc_shfl_merge(a, l, h, L4, mm);
    if (X >= 8) attn_tc_shfl_merge(a, l, h, L8, mm);
    return attn_tc_group<SITE>(a, l, h);
}

// ---- query-major tiles (forward, dQ) --------------------------------------------------------------
// s holds C fragments of a (16*WM) x (8*NS) tile: element r of n-tile n of 16-row tile mi is row
// row0 + 16 mi + 8 (r/2) and key col0 + 8 n + (r%2) (row0 = first row + g, col0 = first key + 2 tq).
// A row's keys lie in the 4 lanes of a quad: the 8 keys of n-tile n are (lane tq, element e) ->
// key 8n + 2tq + e. Groups of X keys: X = 2 is a thread's pair; 4 adds the lane xor 1; 8 (one
// n-tile) the xor 2; 16 / 32 / 64 merge 2 / 4 / 8 n-tiles inside the thread first (a butterfly over
// n, so that every n-tile of a group ends with the group's value). The key tile (8*NS keys) must be
// a multiple of 64, so that no group crosses it. stage: this warp's (16*WM) x ldst floats of shared
// memory (sparsity only).
// In place: s = cast(s) for site SITE, with masked entries already 0. CNT: count --cast-stats into st
// (valid entries: row < T and key <= row; one histogram entry per group holding such a key).
template <int SITE, bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_tc_cast_rows(float (&s)[WM][NS][4], float* stage, int ldst, int row0, int col0, int T,
                                                  uint64_t state, uint64_t rbase, TcastDeviceStats* st, int lane) {
    const AttnTcastSite& S = attn_tc_site[SITE];
    const int g = lane >> 2, tq = lane & 3;
    const bool cnt = CNT && st != nullptr;  // (uniform)
    // 1. M:N sparsity through shared memory (a group's N values are read back by every member)
    if (S.sparse_n > 0) {
        const int N = S.sparse_n, M = S.sparse_m;
        attn_frag_each<WM, NS>([&](int mi, int n, int r) {
            stage[(mi * 16 + g + 8 * (r >> 1)) * ldst + n * 8 + 2 * tq + (r & 1)] = s[mi][n][r];
        });
        __syncwarp();
        attn_frag_each<WM, NS>([&](int mi, int n, int r) {
            const int kl = n * 8 + 2 * tq + (r & 1), t = kl & (N - 1);
            const float* grp = stage + (mi * 16 + g + 8 * (r >> 1)) * ldst + (kl - t);
            const uint32_t ki = tcast_sparse_key(s[mi][n][r]);
            int rank = 0;
            for (int j = 0; j < N; j++) rank += tcast_sparse_beats(tcast_sparse_key(grp[j]), j, ki, t);
            if (rank >= M) s[mi][n][r] = 0.0f;
        });
        __syncwarp();
    }
    const bool sto = S.stochastic;
    // 2. the cast
    if (S.tile <= 1) {
        const AttnGroupQ q = attn_tc_group_unscaled<SITE>();
        // (written out, not attn_frag_each: a lambda around these calls changes the forward's code)
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int n = 0; n < NS; n++)
                #pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int row = row0 + mi * 16 + 8 * (r >> 1), key = col0 + n * 8 + (r & 1);
                    const AttnQR qr = attn_tc_quant<SITE, CNT>(q, s[mi][n][r], sto, state, (rbase + (uint64_t)row) * (uint64_t)T + (uint64_t)key);
                    const unsigned fl = qr.flags;
                    s[mi][n][r] = qr.v;
                    if constexpr (CNT) if (cnt) tcast_stats_count(st, row < T && key <= row, fl);
                }
        return;
    }
    const int X = S.tile;
    const bool mm = S.minmax;
    const int npg = (X >= 8 ? (X >> 3) : 1) - 1;  // n-tiles per group, minus one: group starts have (n & npg) == 0
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int row = row0 + mi * 16 + 8 * hh;
            uint32_t am[NS];
            int32_t lo[NS], hi[NS];
            #pragma unroll
            for (int n = 0; n < NS; n++) {
                am[n] = 0u;
                lo[n] = hi[n] = 0;
                attn_tc_acc(am[n], lo[n], hi[n], s[mi][n][2 * hh], mm);
                attn_tc_acc(am[n], lo[n], hi[n], s[mi][n][2 * hh + 1], mm);
            }
            attn_tc_merge_chunks(am, lo, hi, X, mm);
            AttnGroupQ q;
            #pragma unroll
            for (int n = 0; n < NS; n++) {
                if ((n & npg) == 0) {
                    q = attn_tc_group_of<SITE, 0, 1, 2>(am[n], lo[n], hi[n], X, mm);
                    if constexpr (CNT) {
                        const int k0 = col0 + n * 8;  // this thread's first key of the n-tile
                        if (cnt) attn_tc_stats_group(st, (k0 & (X - 1)) == 0 && row < T && k0 <= row, q.g.hist);
                    }
                }
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int key = col0 + n * 8 + e;
                    const AttnQR qr = attn_tc_quant<SITE, CNT>(q, s[mi][n][2 * hh + e], sto, state, (rbase + (uint64_t)row) * (uint64_t)T + (uint64_t)key);
                    const unsigned fl = qr.flags;
                    s[mi][n][2 * hh + e] = qr.v;
                    if constexpr (CNT) if (cnt) tcast_stats_count(st, row < T && key <= row, fl);
                }
            }
        }
}

// The cast of one query column (element e of n-tile n) of a key-major tile whose keys this warp holds
// are all in one group q (unscaled sites, and groups spanning warps); row0 = the warp's first key + g,
// ibase = the flat index of the column's key 0.
template <int SITE, int WM, int NS>
__device__ __forceinline__ void attn_tc_cast_column(float (&s)[WM][NS][4], int n, int e, AttnGroupQ q, int row0, bool sto,
                                                    uint64_t state, uint64_t ibase) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int key = row0 + mi * 16 + 8 * hh;
            s[mi][n][2 * hh + e] = attn_tc_quant<SITE, false>(q, s[mi][n][2 * hh + e], sto, state, ibase + (uint64_t)key).v;
        }
}

// ---- key-major tiles (dK/dV) -------------------------------------------------------------------------
// s holds C fragments of a (16*WM) x (8*NS) tile of S^T: element r of n-tile n of 16-row tile mi is
// key row0 + 16 mi + 8 (r/2) (row0 = the warp's first key + g) and query col0 + 8 n + (r%2)
// (col0 = the tile's first query + 2 tq). A query's keys run down the rows: chunk li = 2 mi + r/2
// holds 8 consecutive keys, one per lane g (lanes xor 4, 8, 16). Groups of X <= 16*WM keys stay in
// the warp (shuffles over g, a butterfly over the chunks); larger ones span X / (16 WM) consecutive
// warps of the CTA (CTA key tiles are multiples of 64 keys) and merge per-warp partials in shared
// memory `part` (3 x NW x 8NS words of this site). M:N sparsity goes through the CTA-wide `stage`
// (16 WM NW rows of ldst floats), since a group of N keys may span warps too.
// Every warp of the CTA must call this (it may hold __syncthreads); `active`: this warp computed s
// (masked entries 0); inactive warps contribute zeros, as their keys are all in the future.
template <int SITE, int WM, int NS, int NW>
__device__ __forceinline__ void attn_tc_cast_cols(float (&s)[WM][NS][4], bool active, float* stage, int ldst, uint32_t* part,
                                                  int warp, int row0, int col0, int T, uint64_t state, uint64_t rbase, int lane) {
    constexpr int BR = 8 * NS, KW = 16 * WM;
    const AttnTcastSite& S = attn_tc_site[SITE];
    if (!S.on) return;
    const int g = lane >> 2, tq = lane & 3;
    if (S.sparse_n > 0) {
        const int N = S.sparse_n, M = S.sparse_m;
        if (active) {
            attn_frag_each<WM, NS>([&](int mi, int n, int r) {
                stage[(warp * KW + mi * 16 + 8 * (r >> 1) + g) * ldst + n * 8 + 2 * tq + (r & 1)] = s[mi][n][r];
            });
        } else {
            for (int idx = lane; idx < KW * BR; idx += 32) stage[(warp * KW + idx / BR) * ldst + idx % BR] = 0.0f;
        }
        __syncthreads();
        if (active) {
            attn_frag_each<WM, NS>([&](int mi, int n, int r) {
                const int kl = warp * KW + mi * 16 + 8 * (r >> 1) + g, t = kl & (N - 1);
                const float* grp = stage + (kl - t) * ldst + n * 8 + 2 * tq + (r & 1);
                const uint32_t ki = tcast_sparse_key(s[mi][n][r]);
                int rank = 0;
                for (int j = 0; j < N; j++) rank += tcast_sparse_beats(tcast_sparse_key(grp[j * ldst]), j, ki, t);
                if (rank >= M) s[mi][n][r] = 0.0f;
            });
        }
        __syncthreads();  // the stage may be rewritten next (other site, next tile)
    }
    const int X = S.tile;
    const bool mm = S.minmax, cross = X > KW;
    if (cross) {  // partials of this warp's KW keys per query column, written by the lanes g == 0
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) {
                uint32_t a = 0u;
                int32_t l = 0, h = 0;
                if (active) {
                    #pragma unroll
                    for (int mi = 0; mi < WM; mi++)
                        #pragma unroll
                        for (int hh = 0; hh < 2; hh++) attn_tc_acc(a, l, h, s[mi][n][2 * hh + e], mm);
                }
                attn_tc_shfl_merge(a, l, h, 4, mm);
                attn_tc_shfl_merge(a, l, h, 8, mm);
                attn_tc_shfl_merge(a, l, h, 16, mm);
                if (g == 0) {
                    const int c = n * 8 + 2 * tq + e;
                    part[warp * BR + c] = a;
                    if (mm) {
                        part[(NW + warp) * BR + c] = (uint32_t)l;
                        part[(2 * NW + warp) * BR + c] = (uint32_t)h;
                    }
                }
            }
        __syncthreads();
    }
    if (!active) return;  // (no barrier below)
    const bool sto = S.stochastic;
    #pragma unroll
    for (int n = 0; n < NS; n++)
        #pragma unroll
        for (int e = 0; e < 2; e++) {
            const int query = col0 + n * 8 + e;
            const uint64_t ibase = (rbase + (uint64_t)query) * (uint64_t)T;
            if (X <= 1) {
                attn_tc_cast_column<SITE>(s, n, e, attn_tc_group_unscaled<SITE>(), row0, sto, state, ibase);
            } else if (cross) {
                const int G = X / KW, w0 = warp & ~(G - 1), c = n * 8 + 2 * tq + e;
                uint32_t a = 0u;
                int32_t l = 0, h = 0;
                for (int k = 0; k < G; k++) {
                    a = max(a, part[(w0 + k) * BR + c]);
                    if (mm) {
                        l = min(l, (int32_t)part[(NW + w0 + k) * BR + c]);
                        h = max(h, (int32_t)part[(2 * NW + w0 + k) * BR + c]);
                    }
                }
                attn_tc_cast_column<SITE>(s, n, e, attn_tc_group<SITE>(a, l, h), row0, sto, state, ibase);
            } else {
                constexpr int NC = 2 * WM;  // chunks of 8 keys
                uint32_t am[NC];
                int32_t lo[NC], hi[NC];
                #pragma unroll
                for (int li = 0; li < NC; li++) {
                    am[li] = 0u;
                    lo[li] = hi[li] = 0;
                    attn_tc_acc(am[li], lo[li], hi[li], s[li >> 1][n][2 * (li & 1) + e], mm);
                }
                attn_tc_merge_chunks(am, lo, hi, X, mm);
                const int npg = (X >= 8 ? (X >> 3) : 1) - 1;
                AttnGroupQ q;
                #pragma unroll
                for (int li = 0; li < NC; li++) {
                    if ((li & npg) == 0) q = attn_tc_group_of<SITE, 4, 8, 16>(am[li], lo[li], hi[li], X, mm);
                    const int key = row0 + (li >> 1) * 16 + 8 * (li & 1);
                    s[li >> 1][n][2 * (li & 1) + e] = attn_tc_quant<SITE, false>(q, s[li >> 1][n][2 * (li & 1) + e], sto, state, ibase + (uint64_t)key).v;
                }
            }
        }
}

// ------------------------------------------------------------------------------------------------
// TensorCast steps of the TC instantiations (see the header comment of attention.cuh and
// attention_tcast.cuh): the same fragment conventions (row0 / col0 include g and 2*tq). A cast
// groups values along the keys, so each step is elementwise work, then the cast of the whole tile
// (attn_tc_cast_rows / attn_tc_cast_cols above), then the mask.

// Query-major tiles (forward, dQ; the key-major steps of the dK/dV kernel are written out in its
// body). stage: this warp's shared-memory rows for M:N sparsity (ldst floats each), rbase =
// (b*NH + h) * T.
// Scores: raw dot products -> s^ = cast(raw * scale) (future keys enter as 0), masked entries -inf.
template <bool MASK, bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_tc_scores_q(float (&s)[WM][NS][4], float scale, float* stage, int ldst, int row0, int col0,
                                                 int T, const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    attn_frag_each<WM, NS>([&](int mi, int n, int r) {
        float v = s[mi][n][r] * scale;
        if (MASK && attn_masked<false>(col0, row0, mi, n, r)) v = 0.f;
        s[mi][n][r] = v;
    });
    if (attn_tc_site[ATTN_TC_SCORES].on)
        attn_tc_cast_rows<ATTN_TC_SCORES, CNT>(s, stage, ldst, row0, col0, T, tc.state[ATTN_TC_SCORES], rbase,
                                               tc.stats[ATTN_TC_SCORES], lane);
    if (MASK) attn_frag_mask<false>(s, col0, row0, -INFINITY);
}

// Probabilities: s^ -> P^ = cast(exp2(s^ log2(e) - lse2)) with lse2 = lse * log2(e) per row (the
// expression of attn_prob), masked entries 0 before and after the cast.
template <bool MASK, bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_tc_probs_q(float (&s)[WM][NS][4], const float (&lse2)[WM][2], float* stage, int ldst, int row0,
                                                int col0, int T, const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    attn_frag_each<WM, NS>([&](int mi, int n, int r) {
        float p = attn_exp2(fmaf(s[mi][n][r], ATTN_LOG2E, -lse2[mi][r >> 1]));
        if (MASK && attn_masked<false>(col0, row0, mi, n, r)) p = 0.f;
        s[mi][n][r] = p;
    });
    if (attn_tc_site[ATTN_TC_PROBS].on) {
        attn_tc_cast_rows<ATTN_TC_PROBS, CNT>(s, stage, ldst, row0, col0, T, tc.state[ATTN_TC_PROBS], rbase,
                                              tc.stats[ATTN_TC_PROBS], lane);
        if (MASK) attn_frag_mask<false>(s, col0, row0, 0.f);
    }
}

// dS = P^ (dP - D) of a query-major tile holding P^ (the dQ kernel's TC form, after attn_tc_p_q).
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_ds(float (&s)[WM][NS][4], const float (&dp)[WM][NS][4], const float (&D)[WM][2]) {
    attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = s[mi][n][r] * (dp[mi][n][r] - D[mi][r >> 1]); });
}

// The TC form of attn_fwd_p_lse: raw dot products -> s^ (not counted) -> P^ (CNT: counted).
template <bool MASK, bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_tc_p_q(float (&s)[WM][NS][4], const float (&lse2)[WM][2], float scale, float* stage, int ldst,
                                            int row0, int col0, int T, const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    attn_tc_scores_q<MASK, false>(s, scale, stage, ldst, row0, col0, T, tc, rbase, lane);
    attn_tc_probs_q<MASK, CNT>(s, lse2, stage, ldst, row0, col0, T, tc, rbase, lane);
}

// ------------------------------------------------------------------------------------------------
// The masked steps of the query-major kernels (forward, dQ) in their plain (TC = false: the steps of
// attention_tile.cuh) and TensorCast (TC = true) forms, so that a kernel body names each step once.
// row0 / col0: this thread's first row and key (g and 2*tq included); stage, ldst, T, tc, rbase and
// lane serve the TC form only (attn_tc_scores_q). Kernel-level lambdas would do the same, but they
// change the plain kernels' generated code (captured locals), so these are functions.

// Forward, the only pass or pass 1: the online-softmax step (TC: on s^ = cast(raw * scale), the
// scores counted here when CNT).
template <bool MASK, bool PL, bool CNT, bool TC, int WM, int NS, int NO>
__device__ __forceinline__ void attn_fwd_step(float (&s)[WM][NS][4], float (&o)[WM][NO][4], float (&m)[WM][2], float (&l)[WM][2],
                                              float scale, int row0, int col0, int T, float* stage, int ldst,
                                              const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    if constexpr (TC) {
        attn_tc_scores_q<MASK, CNT>(s, scale, stage, ldst, row0, col0, T, tc, rbase, lane);
        attn_fwd_softmax<MASK, PL, CNT, true>(s, o, m, l, scale, col0, row0);
    } else {
        attn_fwd_softmax<MASK, PL, CNT>(s, o, m, l, scale, col0, row0);
    }
}

// Forward pass 2: raw dot products -> P^ (TC: the probabilities counted when CNT).
template <bool MASK, bool CNT, bool TC, int WM, int NS>
__device__ __forceinline__ void attn_fwd_p_step(float (&s)[WM][NS][4], const float (&lse2)[WM][2], float scale, int row0, int col0,
                                                int T, float* stage, int ldst, const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    if constexpr (TC) attn_tc_p_q<MASK, CNT>(s, lse2, scale, stage, ldst, row0, col0, T, tc, rbase, lane);
    else attn_fwd_p_lse<MASK, CNT>(s, lse2, scale, col0, row0);
}

// dQ: raw dot products -> dS = P^ (dP - D) (plain), or -> P^ (TC; attn_tc_ds follows, outside the
// masked instantiations), with s^ and P^ exactly as the forward computes them.
template <bool MASK, bool TC, int WM, int NS>
__device__ __forceinline__ void attn_dq_step(float (&s)[WM][NS][4], const float (&dp)[WM][NS][4], const float (&lse2)[WM][2],
                                             const float (&D)[WM][2], float scale, int row0, int col0, int T, float* stage, int ldst,
                                             const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    if constexpr (TC) attn_tc_p_q<MASK, false>(s, lse2, scale, stage, ldst, row0, col0, T, tc, rbase, lane);
    else attn_dq_ds<MASK>(s, dp, lse2, D, scale, col0, row0);
}
