// attention_tcast.cuh - the TensorCast attention sites (doc/TCAST.md 5.1) for llmc/kernels/attention/attention.cuh:
// the run-time configuration (which datatype casts the scores, which the probabilities), the scalar
// pieces every attention kernel shares (group scale, element quantization, random bits), and the
// group casts in the two fragment layouts of the tensor-core kernels (query-major rows: forward and
// dQ; key-major columns: dK/dV). Included by attention.cuh in every build; only the TCAST=1 build
// has the host API (attention_tcast_configure & co.) and ever launches a kernel that uses it, so in
// the other builds everything here is dead code.
//
// Semantics (identical in every kernel, so that the backward recomputes the forward's s^ and P^ bit
// for bit). For query i of head (b, h) and key j: the value v_ij (the scaled score q.k/sqrt(HS) as
// the fp32 product raw * scale, or the normalized probability exp2(s^ log2(e) - lse log2(e))) enters
// its row's groups; keys j > i and j >= T enter as +0. Along the row, in this order:
//   1. M:N sparsity (if any): groups of N keys aligned at key 0 (N a power of two <= 32); in each,
//      the M largest magnitudes survive (ties: lower key), the others become +0 (tcast_sparse_*).
//   2. The cast: unscaled types element by element; tile-scaled types (tile X = 2..64, a power of
//      two) in groups of X keys aligned at key 0: TcastGroupAcc over the group (integer max / min of
//      bit patterns: order-free, so a shuffle or shared-memory reduction gives the same bits as a
//      sequential one), tcast_group_scale, tcast_quantize per element. Random bits (@stochastic):
//      u = tcast_random_bits(seed_site, ((b*NH + h)*T + i)*T + j) with seed_scores = the call's seed
//      and seed_probs = seed ^ 0x9E3779B97F4A7C15.
//   3. Masked entries are then -inf (scores) or 0 (probabilities).
// Per-tensor and channel scales are refused (they would need the whole T x T matrix): see
// attention_tcast_supported.
//
// Element quantization has an inline fast path (attn_tc_quant_fast) for groups with an exponent
// scale (MX formats, mxint) and for unscaled float formats: the value is rounded on its own float32
// bit pattern (add a rounding increment below the group's quantum, clear the bits, saturate with one
// unsigned min against max_F * 2^s), which is exact whenever x and the result are normal float32s;
// everything else (zeros aside: subnormal inputs, float-scaled int / uint groups, NaN groups, tiny
// values under stochastic rounding) calls tcast_quantize through a non-inlined function.
// dev/cuda/attention.cu checks the fast path against tcast_quantize on the host before any kernel.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/numerics/tcast.h"
#include "llmc/kernels/tcast/tcast_stats.cuh"

enum { ATTN_TC_SCORES = 0, ATTN_TC_PROBS = 1 };

// One attention site's cast, as the kernels read it (constant memory). Plain data.
struct AttnTcastSite {
    TcastDataType dt;
    int on;              // 1: this site is cast
    int tile;            // keys per group: 1 = unscaled (every element alone), else X in 2..64
    int sparse_m, sparse_n;  // M:N pruning before the cast (0, 0 = dense)
    int minmax;          // uint data: groups need min / max as well as amax
    int stochastic;      // @stochastic: elements need random bits
    int expscale;        // the group scale is an exponent (section 4a): inline group path
    uint32_t maxb0;      // float32 bits of max_F (fast paths: max_F * 2^s = maxb0 + (s << 23))
    int maxb0_ok;        // 1 if max_F is a normal float32 (else no fast path)
};

__constant__ AttnTcastSite attn_tc_site[2];

// Per call, by value to the TC kernel instantiations (ignored by the others): the random-bit states
// of the two sites (fp8_mix64_(seed_site ^ 0x6A09E667F3BCC909), the `state` of tcast_random_bits)
// and the --cast-stats counters of the forward's counting instantiation.
struct AttnTcastArgs {
    uint64_t state[2];
    TcastDeviceStats* stats[2];
};

// The site seeds of one call (see the header comment).
static inline HOST_DEVICE uint64_t attn_tc_site_seed(uint64_t seed, int site) {
    return site == ATTN_TC_SCORES ? seed : seed ^ 0x9E3779B97F4A7C15ull;
}
static inline HOST_DEVICE uint64_t attn_tc_state(uint64_t site_seed) { return fp8_mix64_(site_seed ^ 0x6A09E667F3BCC909ull); }
// = tcast_random_bits(site_seed, index) with state = attn_tc_state(site_seed).
static inline HOST_DEVICE uint32_t attn_tc_rbits(uint64_t state, uint64_t index) {
    return (uint32_t)(fp8_mix64_(state + (index + 1u) * 0x9E3779B97F4A7C15ull) >> 32);
}

// A group's scale as the element casts use it.
struct AttnGroupQ {
    TcastGroupScale g;
    uint32_t maxb;  // fast: float32 bits of max_F * 2^s
    int fast;       // 1: elements may take attn_tc_quant_fast (EXP or UNSCALED groups, maxb normal)
};

// max_F * 2^s as float32 bits when both are normal floats (exact: only the exponent moves).
static inline HOST_DEVICE int attn_tc_maxb(const AttnTcastSite* S, int s, uint32_t* maxb) {
    const int E = (int)(S->maxb0 >> 23) + s;
    *maxb = S->maxb0 + ((uint32_t)s << 23);
    return S->maxb0_ok && E >= 1 && E <= 254;
}

// Inline group path for exponent scales (section 4a, as tcast_exp_scale): returns 0 when the group
// needs the general tcast_group_scale (a NaN / Inf in the group, or an exponent-scale overflow).
static inline HOST_DEVICE int attn_tc_group_fast(const AttnTcastSite* S, uint32_t amax, AttnGroupQ* q) {
    if (!S->expscale || amax >= TCAST_F32_INF) return 0;
    int overflow;
    const int s = tcast_exp_scale(&S->dt.number, &S->dt.scale.scale, S->dt.scale_mode, tcast_f32_from_bits(amax), &overflow);
    if (overflow) return 0;
    q->g.mode = TCAST_GROUP_EXP;
    q->g.s = s;
    q->g.scale = 0.0f;
    q->g.zero = 0.0f;
    q->g.izero = 0;
    q->g.hist = tcast_hist_bin(s);
    q->fast = attn_tc_maxb(S, s, &q->maxb);
    return 1;
}

// The general group path: tcast_group_scale of the accumulation (amax includes NaN / Inf bit
// patterns: amax >= Inf marks the group special, as tcast_acc_add would).
static inline HOST_DEVICE AttnGroupQ attn_tc_group_general(const AttnTcastSite* S, uint32_t amax, int32_t lo, int32_t hi) {
    TcastGroupAcc acc;
    acc.special = amax >= TCAST_F32_INF ? 1u : 0u;
    acc.amax = acc.special ? 0u : amax;
    acc.tmin = lo;
    acc.tmax = hi;
    AttnGroupQ q;
    q.g = tcast_group_scale(&S->dt, acc);
    q.maxb = 0;
    q.fast = 0;
    if (q.g.mode == TCAST_GROUP_EXP || q.g.mode == TCAST_GROUP_UNSCALED) q.fast = attn_tc_maxb(S, q.g.s, &q.maxb);
    return q;
}

// The element fast path (see the header comment): x in a group with exponent s (0 for unscaled
// types) and saturation bound maxb = bits of max_F * 2^s. Returns 1 with *out (and *flags, if
// non-NULL) set when it applies, bit-identical to tcast_quantize_exp / tcast_cast_element; 0 when
// the caller must use tcast_quantize (subnormal or huge x, quantum beyond the value, Inf / NaN).
// With |x| = m 2^(E-150), the group's quantum at |x| is 2^(E-150+shift) with
// shift = 23 - mbits + max(emin - e, 0), e = E - 127 - s = floor(log2 |x / 2^s|). For shift <= 23
// the quantum's bit lies inside the significand, so rounding is an integer add of an increment h
// (RNE: half - 1 + lsb; nearest: half; zero: 0; stochastic: (~u) >> (32 - shift), which carries
// iff u < rem 2^(32-shift)) and a mask; a carry out of the mantissa bumps the exponent, exactly as
// n = 2^(mbits+1) does in tcast_quantize_exp. The result is normal, and min(rb, maxb) is the
// saturation there (both exact). shift >= 25 (|y| below half the smallest quantum) rounds to zero
// in every mode but stochastic.
static inline HOST_DEVICE int attn_tc_quant_fast(const TcastNumberSpec* f, TcastRound r, int s, uint32_t maxb, float x, uint32_t u,
                                                 float* out, unsigned* flags) {
    const uint32_t xb = tcast_f32_bits(x), a = xb & 0x7FFFFFFFu, sign = xb & 0x80000000u;
    if (a == 0) {
        tcast_set_flags_(flags, 0u);
        *out = tcast_f32_from_bits(f->signed_zero ? sign : 0u);
        return 1;
    }
    const int E = (int)(a >> 23);
    if (E < 1 || E > 253) return 0;
    const int e = E - 127 - s, d = f->emin - e;
    const int shift = 23 - f->mbits + (d > 0 ? d : 0);
    if (shift <= 23) {
        uint32_t h = 0;
        if (shift > 0) {
            if (r == TCAST_ROUND_EVEN) h = (1u << (shift - 1)) - 1u + ((((a & 0x7FFFFFu) | 0x800000u) >> shift) & 1u);
            else if (r == TCAST_ROUND_NEAREST) h = 1u << (shift - 1);
            else if (r == TCAST_ROUND_STOCHASTIC) h = (~u) >> (32 - shift);
        }
        uint32_t rb = ((a + h) >> shift) << shift;
        const int sat = rb > maxb;
        rb = sat ? maxb : rb;
        tcast_set_flags_(flags, sat ? TCAST_FLAG_SATURATED : 0u);
        *out = tcast_f32_from_bits(rb | sign);
        return 1;
    }
    if (shift >= 25 && r != TCAST_ROUND_STOCHASTIC) {
        tcast_set_flags_(flags, TCAST_FLAG_FLUSHED);
        *out = tcast_f32_from_bits(f->signed_zero ? sign : 0u);
        return 1;
    }
    return 0;
}

// Host: the AttnTcastSite of a data type (after attention_tcast_supported accepted it).
static inline AttnTcastSite attn_tc_make_site(const TcastDataType* dt) {
    AttnTcastSite S;
    memset(&S, 0, sizeof(S));
    if (!dt) return S;
    S.dt = *dt;
    S.on = 1;
    S.tile = dt->has_scale ? dt->scale.tile : 1;
    S.sparse_m = dt->sparse_m;
    S.sparse_n = dt->sparse_n;
    S.minmax = dt->number.kind == TCAST_KIND_UINT;
    S.stochastic = dt->round == TCAST_ROUND_STOCHASTIC;
    S.expscale = dt->has_scale && dt->scale.scale.kind == TCAST_KIND_EXPONENT &&
                 (dt->number.kind == TCAST_KIND_FLOAT || dt->number.kind == TCAST_KIND_INT);
    if (dt->number.kind == TCAST_KIND_FLOAT || dt->number.kind == TCAST_KIND_INT) {
        S.maxb0 = tcast_f32_rne_bits_(dt->number.max_mant, dt->number.emax - dt->number.mbits);
        const uint32_t E = S.maxb0 >> 23;
        S.maxb0_ok = E >= 1 && E <= 254;
    }
    return S;
}

// 1 if the attention kernels can cast an attention site to dt for head size HS (HS <= 0: skip the
// head-size test); else 0 with the reason in why (n bytes).
static inline int attention_tcast_supported(int HS, const TcastDataType* dt, char* why, size_t n) {
    if (HS > 0 && HS != 64)
        return tcast_fail_(why, n, "the attention casts run in the tensor-core kernels, instantiated for head size 64 (head size %d)", HS) + 1;
    if (dt->has_scale && dt->scale.tile <= 0)
        return tcast_fail_(why, n, "per-tensor and channel scales would need the whole T x T matrix; use an unscaled or a tile-scaled datatype") + 1;
    if (dt->has_scale && (dt->scale.tile < 2 || dt->scale.tile > 64))
        return tcast_fail_(why, n, "tile %d: the attention kernels take tiles of 2..64 keys", dt->scale.tile) + 1;
    if (dt->has_scale && dt->scale.dim_given && dt->scale.dim != -1 && dt->scale.dim != 1)
        return tcast_fail_(why, n, "the attention casts run along the keys (the last dimension), not d%d", dt->scale.dim) + 1;
    if (dt->sparse_n > 0 && (dt->sparse_n > 32 || (dt->sparse_n & (dt->sparse_n - 1)) != 0))
        return tcast_fail_(why, n, "sparsity group N=%d: the attention kernels take N a power of two up to 32 (groups must not cross their 64-key tiles)",
                           dt->sparse_n) + 1;
    return 1;
}

// ------------------------------------------------------------------------------------------------
// Device side

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
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int n = 0; n < NS; n++)
                #pragma unroll
                for (int r = 0; r < 4; r++) stage[(mi * 16 + g + 8 * (r >> 1)) * ldst + n * 8 + 2 * tq + (r & 1)] = s[mi][n][r];
        __syncwarp();
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int n = 0; n < NS; n++)
                #pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int kl = n * 8 + 2 * tq + (r & 1), t = kl & (N - 1);
                    const float* grp = stage + (mi * 16 + g + 8 * (r >> 1)) * ldst + (kl - t);
                    const uint32_t ki = tcast_sparse_key(s[mi][n][r]);
                    int rank = 0;
                    for (int j = 0; j < N; j++) rank += tcast_sparse_beats(tcast_sparse_key(grp[j]), j, ki, t);
                    if (rank >= M) s[mi][n][r] = 0.0f;
                }
        __syncwarp();
    }
    const bool sto = S.stochastic;
    // 2. the cast
    if (S.tile <= 1) {
        const AttnGroupQ q = attn_tc_group_unscaled<SITE>();
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
            #pragma unroll
            for (int lvl = 1; lvl < NS && lvl <= 4; lvl <<= 1) {
                if (X >= 16 * lvl) {
                    #pragma unroll
                    for (int n = 0; n < NS; n++) {
                        am[n] = max(am[n], am[n ^ lvl]);
                        if (mm) {
                            lo[n] = min(lo[n], lo[n ^ lvl]);
                            hi[n] = max(hi[n], hi[n ^ lvl]);
                        }
                    }
                }
            }
            AttnGroupQ q;
            #pragma unroll
            for (int n = 0; n < NS; n++) {
                if ((n & npg) == 0) {
                    uint32_t a = am[n];
                    int32_t l = lo[n], h = hi[n];
                    if (X >= 4) attn_tc_shfl_merge(a, l, h, 1, mm);
                    if (X >= 8) attn_tc_shfl_merge(a, l, h, 2, mm);
                    q = attn_tc_group<SITE>(a, l, h);
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
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int n = 0; n < NS; n++)
                    #pragma unroll
                    for (int r = 0; r < 4; r++)
                        stage[(warp * KW + mi * 16 + 8 * (r >> 1) + g) * ldst + n * 8 + 2 * tq + (r & 1)] = s[mi][n][r];
        } else {
            for (int idx = lane; idx < KW * BR; idx += 32) stage[(warp * KW + idx / BR) * ldst + idx % BR] = 0.0f;
        }
        __syncthreads();
        if (active) {
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int n = 0; n < NS; n++)
                    #pragma unroll
                    for (int r = 0; r < 4; r++) {
                        const int kl = warp * KW + mi * 16 + 8 * (r >> 1) + g, t = kl & (N - 1);
                        const float* grp = stage + (kl - t) * ldst + n * 8 + 2 * tq + (r & 1);
                        const uint32_t ki = tcast_sparse_key(s[mi][n][r]);
                        int rank = 0;
                        for (int j = 0; j < N; j++) rank += tcast_sparse_beats(tcast_sparse_key(grp[j * ldst]), j, ki, t);
                        if (rank >= M) s[mi][n][r] = 0.0f;
                    }
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
                const AttnGroupQ q = attn_tc_group_unscaled<SITE>();
                #pragma unroll
                for (int mi = 0; mi < WM; mi++)
                    #pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        const int key = row0 + mi * 16 + 8 * hh;
                        s[mi][n][2 * hh + e] = attn_tc_quant<SITE, false>(q, s[mi][n][2 * hh + e], sto, state, ibase + (uint64_t)key).v;
                    }
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
                const AttnGroupQ q = attn_tc_group<SITE>(a, l, h);
                #pragma unroll
                for (int mi = 0; mi < WM; mi++)
                    #pragma unroll
                    for (int hh = 0; hh < 2; hh++) {
                        const int key = row0 + mi * 16 + 8 * hh;
                        s[mi][n][2 * hh + e] = attn_tc_quant<SITE, false>(q, s[mi][n][2 * hh + e], sto, state, ibase + (uint64_t)key).v;
                    }
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
                #pragma unroll
                for (int lvl = 1; lvl < NC && lvl <= 4; lvl <<= 1) {
                    if (X >= 16 * lvl) {
                        #pragma unroll
                        for (int li = 0; li < NC; li++) {
                            am[li] = max(am[li], am[li ^ lvl]);
                            if (mm) {
                                lo[li] = min(lo[li], lo[li ^ lvl]);
                                hi[li] = max(hi[li], hi[li ^ lvl]);
                            }
                        }
                    }
                }
                const int npg = (X >= 8 ? (X >> 3) : 1) - 1;
                AttnGroupQ q;
                #pragma unroll
                for (int li = 0; li < NC; li++) {
                    if ((li & npg) == 0) {
                        uint32_t a = am[li];
                        int32_t l = lo[li], h = hi[li];
                        attn_tc_shfl_merge(a, l, h, 4, mm);
                        if (X >= 4) attn_tc_shfl_merge(a, l, h, 8, mm);
                        if (X >= 8) attn_tc_shfl_merge(a, l, h, 16, mm);
                        q = attn_tc_group<SITE>(a, l, h);
                    }
                    const int key = row0 + (li >> 1) * 16 + 8 * (li & 1);
                    s[li >> 1][n][2 * (li & 1) + e] = attn_tc_quant<SITE, false>(q, s[li >> 1][n][2 * (li & 1) + e], sto, state, ibase + (uint64_t)key).v;
                }
            }
        }
}

// ------------------------------------------------------------------------------------------------
// Host API (TCAST=1 build)

#if defined(ENABLE_TCAST)
static AttnTcastSite attn_tc_host[2];                     // mirror of attn_tc_site
static TcastDeviceStats* attn_tc_stats_dev[2] = {NULL, NULL};

// Set the attention casts for every later attention_forward / attention_backward: scores and probs
// are the datatypes of the attn_scores / attn_probs sites, NULL = not cast (both NULL: the plain
// BF16 kernels run). Stops with `error:` for a datatype the kernels cannot take (the head size is
// checked at the first launch; tcast_attention_check (llmc/modes/tcast/mode.cuh) checks everything before the GPU is touched).
// Synchronous (cudaMemcpyToSymbol): call once at start-up, not between kernels in flight.
static inline void attention_tcast_configure(const TcastDataType* scores, const TcastDataType* probs) {
    const TcastDataType* dts[2] = {scores, probs};
    char why[256];
    for (int k = 0; k < 2; k++) {
        if (dts[k] && !attention_tcast_supported(0, dts[k], why, sizeof(why)))
            die("--cast %s=%s: %s", BOUNDARY_SITE_NAMES[k == 0 ? ATTN_SCORES : ATTN_PROBS], dts[k]->name, why);
        attn_tc_host[k] = attn_tc_make_site(dts[k]);
    }
    cudaCheck(cudaMemcpyToSymbol(attn_tc_site, attn_tc_host, sizeof(attn_tc_host)));
}

// --cast-stats: the counters the next forwards add to (device memory, zeroed by the caller), NULL =
// no counting. Counted by the forward's counting instantiation only: the values of the scores (first
// pass) and of the probabilities (second pass) at the causal positions (key <= query < T), and one
// histogram entry per group holding such a position.
static inline void attention_tcast_stats(TcastDeviceStats* scores, TcastDeviceStats* probs) {
    attn_tc_stats_dev[0] = scores;
    attn_tc_stats_dev[1] = probs;
}

// True when some attention site is cast (the launchers then run the TC instantiations).
static inline bool attention_tcast_active() { return attn_tc_host[0].on || attn_tc_host[1].on; }
// True when the probabilities are cast (the forward then runs its two-pass mode).
static inline bool attention_tcast_probs() { return attn_tc_host[1].on != 0; }

static inline AttnTcastArgs attn_tc_args(uint64_t seed, bool count) {
    AttnTcastArgs a;
    for (int k = 0; k < 2; k++) {
        a.state[k] = attn_tc_state(attn_tc_site_seed(seed, k));
        a.stats[k] = count ? attn_tc_stats_dev[k] : NULL;
    }
    return a;
}
static inline bool attn_tc_counting() { return attn_tc_stats_dev[0] != NULL || attn_tc_stats_dev[1] != NULL; }
static inline bool attn_tc_sparse() { return attn_tc_host[0].sparse_n > 0 || attn_tc_host[1].sparse_n > 0; }
#else
static constexpr inline bool attention_tcast_active() { return false; }
#endif
