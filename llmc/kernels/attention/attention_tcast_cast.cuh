// attention_tcast_cast.cuh - the device side of the TensorCast attention sites (attention_tcast.cuh
// holds the semantics, the configuration and the scalar pieces): the casts of a score / probability
// tile staged in shared memory. Only the TC = true instantiations of the flash kernels reach them,
// and those exist only in builds whose mode sets kModeAttentionCasts.
//
// Design (doc/TCAST.md 6). After the MMA that produces a tile of raw dot products, the warps write
// their fragments as v = raw * scale (future keys as 0) into a shared-memory tile (attn_tc_put_q /
// attn_tc_put_k), and after a barrier every thread casts the keys of one query row it owns, in one
// plain (not unrolled) loop, attn_tc_cast_tile: for each site in turn, M:N pruning, then per group
// the amax (and the min / max for uint data) over its keys, the group scale, and element by element
// the rounding (random bits from (seed, flat index)), the causal mask and the next step's transform
// (scores -> exp2(s^ log2(e) - lse log2(e)) when the probabilities follow). After a second barrier
// the fragments are read back (attn_tc_get_q / attn_tc_get_k) and the kernel goes on with its plain
// steps. So each kernel holds one inline copy of the cast per call site (forward: one per pass), the
// group reduction needs no shuffles but one for groups that span two threads, and the fragment
// layouts never meet the cast code. The tile layouts keep every shared-memory access of the loop and
// of the fragment writes / reads free of bank conflicts (AttnTcTile).
#pragma once

#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/attention/attention_tcast.cuh"
#include "llmc/kernels/attention/attention_tile.cuh"

// The general element cast (tcast_quantize), out of line: zeros aside it is the rare path of the
// MX formats and the only one of the float-scaled ones; inline it would double the cast loop's code.
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

// A group's scale from its accumulation: the inline exponent-scale path, else the general one.
__device__ __forceinline__ AttnGroupQ attn_tc_group(int site, uint32_t amax, int32_t lo, int32_t hi) {
    AttnGroupQ q;
    if (attn_tc_group_fast(&attn_tc_site[site], amax, &q)) return q;
    return attn_tc_group_slow(site, amax, lo, hi);
}

// The group of an unscaled site (every element alone).
__device__ __forceinline__ AttnGroupQ attn_tc_group_unscaled(int site) {
    AttnGroupQ q;
    q.g.mode = TCAST_GROUP_UNSCALED;
    q.g.s = 0;
    q.g.scale = 0.0f;
    q.g.zero = 0.0f;
    q.g.izero = 0;
    q.g.hist = -1;
    q.fast = attn_tc_maxb(&attn_tc_site[site], 0, &q.maxb);
    return q;
}

// Group accumulation on bit patterns: amax (NaN / Inf included: >= Inf marks a special group) and,
// for uint data (mm), the ordered keys of min(x, 0) and max(x, 0) (tcast_key_). Order-free, so the
// loop and the merge below give the bits of tcast_acc_add over the group.
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

// --cast-stats: this warp's element counts (each lane's own), one atomic per warp and counter. Every lane calls.
__device__ __forceinline__ void attn_tc_stats_add(TcastDeviceStats* st, unsigned values, unsigned sat, unsigned flushed) {
    values = __reduce_add_sync(0xffffffffu, values);
    sat = __reduce_add_sync(0xffffffffu, sat);
    flushed = __reduce_add_sync(0xffffffffu, flushed);
    if ((threadIdx.x & 31) == 0) {
        if (values) atomicAdd(&st->values, (unsigned long long)values);
        if (sat) atomicAdd(&st->saturated, (unsigned long long)sat);
        if (flushed) atomicAdd(&st->flushed, (unsigned long long)flushed);
    }
}

// ------------------------------------------------------------------------------------------------
// The staged tile. Element (query i, key j), 0 <= i < NI, 0 <= j < NK, of fp32 values sits at word
// at(i, j) = j*LD + i + SK*(j / L) of the stage (keys are the slow index). NTHR threads cast it; each
// owns the L = NI*NK/NTHR consecutive keys [part*L, part*L + L) of one query i (L >= 32, so that
// every M:N group and every group of up to 32 keys lies in one thread; groups of 64 keys with L = 32
// merge two threads, lanes xor PM). Bank-conflict free: the loop's lanes read 32 distinct banks at
// every step (consecutive i, or parts apart by the skew SK), and LD % 32 is 4 for the scalar fragment
// stores of query-major tiles and 8 for the float2 stores of key-major ones.
template <int NI_, int NK_, int NTHR_, int LD_, int SK_, int PM_>
struct AttnTcTile {
    static constexpr int NI = NI_, NK = NK_, NTHR = NTHR_, LD = LD_, SK = SK_, PM = PM_;
    static constexpr int L = NI * NK / NTHR, PARTS = NK / L;
    static constexpr int words = (NK - 1) * LD + NI + SK * (PARTS - 1);  // (a multiple of 4 below)
    static_assert(L >= 32 && L <= 64 && NK % L == 0, "a thread holds 32 or 64 keys of one query");
    static_assert(words % 4 == 0, "stages of consecutive warps stay 16-byte aligned");
    __device__ __forceinline__ static int at(int i, int j) { return j * LD + i + SK * (j / L); }
};
// Query-major (forward, dQ): one tile per warp, its 16*WM queries x the key tile's 64 keys; lane =
// i + NI * part. WM = 2: a lane holds a whole row (L = 64); WM = 1: half a row (L = 32), the halves
// 16 words apart (SK) so that lanes i and i + 16 read different banks.
template <int WM>
using AttnTcTileQ = AttnTcTile<16 * WM, 64, 32, 16 * WM + 4, WM == 1 ? 16 : 0, 16 * WM>;
// Key-major (dK/dV): one tile per CTA, the query tile's 64 queries x the CTA's 128 keys, 256 threads;
// thread t = 4 i + part (L = 32; parts 8 words apart, so the 8 queries x 4 parts of a warp hit 32 banks).
using AttnTcTileK = AttnTcTile<64, 128, 256, 72, 8, 1>;

// The cast of this thread's keys (one call casts the whole tile; no barrier inside, the caller puts
// one on each side). x: the thread's first element (key kb = the absolute key of its first one,
// element k at x[k * LD]), query: the absolute query, T, rbase = (b*NH + h) * T, tc: the call's
// random-bit states and counters. probs = false: scores only, s^ left in the tile (masked: -inf).
// probs = true: s^ (scores site, if cast) -> p = exp2(s^ log2(e) - lse2) (lse2 = lse * log2(e) of the
// query; masked: 0) -> P^ (probabilities site, if cast; masked: 0), P^ left in the tile. CNT: count
// --cast-stats of site cnt_site (the forward's counting instantiation).
template <int L, int LD, int PM, bool CNT>
__device__ __forceinline__ void attn_tc_cast_tile(float* x, int kb, int query, int T, bool probs, float lse2,
                                                  const AttnTcastArgs& tc, uint64_t rbase, int cnt_site) {
    const uint64_t ib = (rbase + (uint64_t)query) * (uint64_t)T + (uint64_t)kb;  // flat index of element 0
    #pragma unroll 1
    for (int site = 0; site <= (probs ? 1 : 0); site++) {
        const AttnTcastSite& S = attn_tc_site[site];
        const bool on = S.on;
        if (!on && site == ATTN_TC_PROBS) break;  // the scores step already zeroed the masked p
        // 1. M:N pruning, group by group (N <= 32 <= L, aligned at key 0): ranks first, then the zeros.
        if (on && S.sparse_n > 0) {
            const int N = S.sparse_n, M = S.sparse_m;
            #pragma unroll 1
            for (int g0 = 0; g0 < L; g0 += N) {
                uint32_t drop = 0;
                #pragma unroll 1
                for (int a = 0; a < N; a++) {
                    const uint32_t ka = tcast_sparse_key(x[(g0 + a) * LD]);
                    int rank = 0;
                    #pragma unroll 1
                    for (int c = 0; c < N; c++) rank += tcast_sparse_beats(tcast_sparse_key(x[(g0 + c) * LD]), c, ka, a);
                    if (rank >= M) drop |= 1u << a;
                }
                #pragma unroll 1
                for (int a = 0; a < N; a++)
                    if ((drop >> a) & 1u) x[(g0 + a) * LD] = 0.0f;
            }
        }
        // 2. the cast, group by group (unscaled sites, and the transform alone: one pass over all L keys)
        const int X = on ? S.tile : 1;
        const int XG = X > 1 ? min(X, L) : L;
        const bool mm = S.minmax, sto = on && S.stochastic;
        const uint64_t state = site == ATTN_TC_SCORES ? tc.state[ATTN_TC_SCORES] : tc.state[ATTN_TC_PROBS];
        TcastDeviceStats* st = nullptr;
        if constexpr (CNT) st = site != cnt_site ? nullptr : site == ATTN_TC_SCORES ? tc.stats[ATTN_TC_SCORES] : tc.stats[ATTN_TC_PROBS];
        unsigned n_val = 0, n_sat = 0, n_flush = 0;
        AttnGroupQ q = attn_tc_group_unscaled(site);
        #pragma unroll 1
        for (int g0 = 0; g0 < L; g0 += XG) {
            if (X > 1) {
                uint32_t am = 0u;
                int32_t lo = 0, hi = 0;
                #pragma unroll 4
                for (int k = g0; k < g0 + XG; k++) attn_tc_acc(am, lo, hi, x[k * LD], mm);
                if (X > L) attn_tc_shfl_merge(am, lo, hi, PM, mm);
                q = attn_tc_group(site, am, lo, hi);
                if constexpr (CNT)
                    if (st) attn_tc_stats_group(st, ((kb + g0) & (X - 1)) == 0 && query < T && kb + g0 <= query, q.g.hist);
            }
            #pragma unroll 1
            for (int k = g0; k < g0 + XG; k++) {
                float y = x[k * LD];
                const bool masked = kb + k > query;
                if (on) {
                    const uint32_t u = sto ? attn_tc_rbits(state, ib + (uint64_t)k) : 0u;
                    unsigned fl = 0;
                    if (!(q.fast && attn_tc_quant_fast(&S.dt.number, S.dt.round, q.g.s, q.maxb, y, u, &y, CNT ? &fl : nullptr))) {
                        const AttnQR r = attn_tc_quant_slow(site, q, y, u);
                        y = r.v;
                        fl = r.flags;
                    }
                    if constexpr (CNT) {
                        const bool valid = query < T && !masked;
                        n_val += valid;
                        n_sat += valid && (fl & TCAST_FLAG_SATURATED);
                        n_flush += valid && (fl & TCAST_FLAG_FLUSHED);
                    }
                }
                if (site == ATTN_TC_SCORES && probs) y = masked ? 0.f : attn_exp2(fmaf(y, ATTN_LOG2E, -lse2));
                else if (masked) y = site == ATTN_TC_SCORES ? -INFINITY : 0.f;
                x[k * LD] = y;
            }
        }
        if constexpr (CNT)
            if (st && on) attn_tc_stats_add(st, n_val, n_sat, n_flush);
    }
}

// ---- query-major tiles (forward, dQ): the warp's own tile, __syncwarp barriers ----------------------
// s holds C fragments of a (16*WM) x 64 tile: element r of n-tile n of 16-row tile mi is query
// row0 + 16 mi + 8 (r/2) and key col0 + 8 n + (r%2), row0 = the warp's first query + g, col0 = the key
// tile's first key + 2 tq (the conventions of attention_tile.cuh).

// The tile <- v = raw * scale of the fragments, keys after the query as 0 (they enter the groups as 0).
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_put_q(float* tile, const float (&s)[WM][NS][4], float scale, int row0, int col0, int lane) {
    using Tile = AttnTcTileQ<WM>;
    static_assert(NS * 8 == Tile::NK, "query-major TC tiles hold 64 keys");
    const int g = lane >> 2, tq = lane & 3;
    attn_frag_each<WM, NS>([&](int mi, int n, int r) {
        float v = s[mi][n][r] * scale;
        if (attn_masked<false>(col0, row0, mi, n, r)) v = 0.f;
        tile[Tile::at(mi * 16 + g + 8 * (r >> 1), n * 8 + 2 * tq + (r & 1))] = v;
    });
}

// Cast the warp's staged tile (attn_tc_cast_tile: probs, lse2v = the lane's row lse * log2(e)) and read
// the result back into s. q0 = the warp's first query, k0 = the key tile's first key.
template <bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_tc_cast_q(float (&s)[WM][NS][4], float* tile, int q0, int k0, int T, bool probs, float lse2v,
                                               const AttnTcastArgs& tc, uint64_t rbase, int lane, int cnt_site) {
    using Tile = AttnTcTileQ<WM>;
    const int i = lane % Tile::NI, part = lane / Tile::NI, g = lane >> 2, tq = lane & 3;
    __syncwarp();
    attn_tc_cast_tile<Tile::L, Tile::LD, Tile::PM, CNT>(tile + Tile::at(i, part * Tile::L), k0 + part * Tile::L, q0 + i, T, probs,
                                                        lse2v, tc, rbase, cnt_site);
    __syncwarp();
    attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = tile[Tile::at(mi * 16 + g + 8 * (r >> 1), n * 8 + 2 * tq + (r & 1))]; });
}

// The value v[mi][hh] of the fragment row that holds the warp's local query i (16 mi + g + 8 hh, held by
// lane 4 g): the lse of the row a lane casts in attn_tc_cast_q. Every lane calls.
template <int WM>
__device__ __forceinline__ float attn_tc_row_value(const float (&v)[WM][2], int i) {
    float r = 0.f;
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const float t = __shfl_sync(0xffffffffu, v[mi][hh], (i & 7) * 4);
            if ((i >> 3) == 2 * mi + hh) r = t;
        }
    return r;
}

// ---- the key-major tile (dK/dV): one per CTA, __syncthreads barriers ---------------------------------
// s holds C fragments of the warp's (16*WM) x (8*NS) tile of S^T: element r of n-tile n of 16-row tile
// mi is key row0 + 16 mi + 8 (r/2) (row0 = the warp's first key + g) and query col0 + 8 n + (r%2)
// (col0 = the query tile's first query + 2 tq). kw = the warp's first key inside the CTA's tile.

// Calls f(mi, n, hh, w) for each pair of this lane's fragment elements (2 hh and 2 hh + 1 of n-tile n of
// 16-row tile mi: two consecutive queries of one key), w = the tile word of the first (the pair is the
// float2 at w). kw = the warp's first key inside the CTA's tile.
template <int WM, int NS, typename F>
__device__ __forceinline__ void attn_tc_each_pair_k(int kw, int lane, F&& f) {
    const int g = lane >> 2, tq = lane & 3;
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) f(mi, n, hh, AttnTcTileK::at(n * 8 + 2 * tq, kw + mi * 16 + g + 8 * hh));
}

// The tile <- v = raw * scale of the fragments, keys after the query as 0; a warp whose keys no query
// of the tile sees (active = false) writes zeros.
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_put_k(float* tile, const float (&s)[WM][NS][4], bool active, float scale, int kw, int row0,
                                              int col0, int lane) {
    static_assert(NS * 8 == AttnTcTileK::NI, "key-major TC tiles hold 64 queries");
    attn_tc_each_pair_k<WM, NS>(kw, lane, [&](int mi, int n, int hh, int w) {
        float2 v = make_float2(0.f, 0.f);
        if (active) {
            v.x = attn_masked<true>(col0, row0, mi, n, 2 * hh) ? 0.f : s[mi][n][2 * hh] * scale;
            v.y = attn_masked<true>(col0, row0, mi, n, 2 * hh + 1) ? 0.f : s[mi][n][2 * hh + 1] * scale;
        }
        *reinterpret_cast<float2*>(tile + w) = v;
    });
}

// Cast the CTA's staged tile (every thread of the CTA calls; attn_tc_cast_tile with probs: L holds the
// tile's lse values) and read the warp's part back into s (active warps). qb = the tile's first
// query, k0 = the CTA's first key.
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_cast_k(float (&s)[WM][NS][4], float* tile, bool active, int kw, int qb, int k0, int T,
                                               const float* L, const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    using Tile = AttnTcTileK;
    const int i = (int)threadIdx.x / Tile::PARTS, part = (int)threadIdx.x % Tile::PARTS;
    __syncthreads();
    attn_tc_cast_tile<Tile::L, Tile::LD, Tile::PM, false>(tile + Tile::at(i, part * Tile::L), k0 + part * Tile::L, qb + i, T, true,
                                                          L[i] * ATTN_LOG2E, tc, rbase, -1);
    __syncthreads();
    if (!active) return;
    attn_tc_each_pair_k<WM, NS>(kw, lane, [&](int mi, int n, int hh, int w) {
        const float2 v = *reinterpret_cast<const float2*>(tile + w);
        s[mi][n][2 * hh] = v.x;
        s[mi][n][2 * hh + 1] = v.y;
    });
}

// dS = P^ (dP - D) of a query-major tile holding P^ (the dQ kernel's TC form).
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_ds(float (&s)[WM][NS][4], const float (&dp)[WM][NS][4], const float (&D)[WM][2]) {
    attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = s[mi][n][r] * (dp[mi][n][r] - D[mi][r >> 1]); });
}
