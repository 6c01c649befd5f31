// attention_tcast_cast.cuh - the device side of the TensorCast attention sites (attention_tcast.cuh
// holds the semantics, the configuration and the scalar pieces): the casts of a score / probability
// tile, in registers for the RNE family and staged in shared memory for everything else. Only the
// TC = true instantiations of the flash kernels reach them, and those exist only in builds whose mode
// sets kModeAttentionCasts.
//
// Design (doc/TCAST.md 6). After the MMA that produces a tile of raw dot products the kernel's TC step
// (attn_tc_step_q: forward passes and dQ; attn_tc_step_k: dK/dV) forms v = raw * scale (future keys 0)
// in its C fragments and then, site by site:
//   * RNE family (round-even MX float / int, unscaled float and fixed-scale pN types, chosen at configure time,
//     AttnTcastSite::frag): the cast in registers, attn_tc_frag_rne / attn_tc_frag_rne_k. Per group
//     the amax (quad shuffles in the query-major kernels, shared memory across the dK/dV kernel's
//     warps), one branch-free group step (attn_tc_rne_group) and a vote; per element seven
//     branch-free instructions (attn_tc_rne_elem). The probabilities p = exp2(s^ log2(e) - lse log2(e))
//     follow in registers.
//   * otherwise, or when the vote finds a group the family refuses (NaN / Inf, tiny or huge groups):
//     from that site on, the staged path. The warps write their fragments into a shared-memory tile
//     (attn_tc_put_q / attn_tc_put_k), and after a barrier every thread casts the keys of one query
//     row it owns, in one plain (not unrolled) loop, attn_tc_cast_tile: for each site in turn, M:N
//     pruning, then per group the amax (and the min / max for uint data) over its keys, the group
//     scale, and element by element the rounding (random bits from (seed, flat index)) - the RNE
//     family here too where the group allows, else the general cast - the causal mask and the next
//     step's transform (scores -> probabilities when they follow). After a second barrier the
//     fragments are read back and the kernel goes on with its plain steps. The tile layouts keep
//     every shared-memory access of the loop and of the fragment writes / reads free of bank
//     conflicts (AttnTcTile).
// Both paths give the same bits (the RNE family is checked against tcast_quantize by the harness's
// host self-test), so the choice is free per tile. Each kernel holds one inline copy of the staged
// loop per call site and one of the register cast per site and call site.
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

// The group of an unscaled site (every element alone), with the type's fixed scale exponent (0 unless pN).
__device__ __forceinline__ AttnGroupQ attn_tc_group_unscaled(int site) {
    AttnGroupQ q;
    const int s = attn_tc_site[site].dt.fixed_exp;
    q.g.mode = TCAST_GROUP_UNSCALED;
    q.g.s = s;
    q.g.scale = 0.0f;
    q.g.zero = 0.0f;
    q.g.izero = 0;
    q.g.hist = -1;
    q.fast = attn_tc_maxb(&attn_tc_site[site], s, &q.maxb);
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
__device__ __forceinline__ void attn_tc_cast_tile(float* x, int kb, int query, int T, int site0, bool probs, float lse2,
                                                  const AttnTcastArgs& tc, uint64_t rbase, int cnt_site) {
    const uint64_t ib = (rbase + (uint64_t)query) * (uint64_t)T + (uint64_t)kb;  // flat index of element 0
    // The element's last step: the probabilities from s^ (site 0 when they follow), else the mask.
    auto finish = [&](int site, int k, float y) {
        const bool masked = kb + k > query;
        if (site == ATTN_TC_SCORES && probs) y = masked ? 0.f : attn_exp2(fmaf(y, ATTN_LOG2E, -lse2));
        else if (masked) y = site == ATTN_TC_SCORES ? -INFINITY : 0.f;
        x[k * LD] = y;
    };
    #pragma unroll 1
    for (int site = site0; site <= (probs ? 1 : 0); site++) {
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
        // The RNE family (attention_tcast.cuh): one branch per group, none per element. Not when counting
        // (it reports no flags); unscaled sites take it too (the amax pass then only screens for NaN / Inf).
        const bool rne = !CNT && on && S.rne;
        AttnGroupQ q = attn_tc_group_unscaled(site);
        #pragma unroll 1
        for (int g0 = 0; g0 < L; g0 += XG) {
            if (X > 1 || rne) {
                uint32_t am = 0u;
                int32_t lo = 0, hi = 0;
                #pragma unroll 4
                for (int k = g0; k < g0 + XG; k++) attn_tc_acc(am, lo, hi, x[k * LD], mm);
                if (X > L) attn_tc_shfl_merge(am, lo, hi, PM, mm);
                AttnTcRneQ rq;
                if (rne && attn_tc_rne_group(&S, am, X > 1, &rq)) {
                    const int32_t c = S.rne_c;
                    const uint32_t sg = S.rne_sign;
                    #pragma unroll 4
                    for (int k = g0; k < g0 + XG; k++) finish(site, k, attn_tc_rne_elem(x[k * LD], rq, c, sg));
                    continue;
                }
                if (X > 1) q = attn_tc_group(site, am, lo, hi);
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
                finish(site, k, y);
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

// The tile <- the fragments' values (v = raw * scale with future keys 0, or p: attn_tc_step_q).
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_put_q(float* tile, const float (&s)[WM][NS][4], int lane) {
    using Tile = AttnTcTileQ<WM>;
    static_assert(NS * 8 == Tile::NK, "query-major TC tiles hold 64 keys");
    const int g = lane >> 2, tq = lane & 3;
    attn_frag_each<WM, NS>([&](int mi, int n, int r) { tile[Tile::at(mi * 16 + g + 8 * (r >> 1), n * 8 + 2 * tq + (r & 1))] = s[mi][n][r]; });
}

// Cast the warp's staged tile from site site0 on (attn_tc_cast_tile: probs, lse2v = the lane's row lse *
// log2(e)) and read the result back into s. q0 = the warp's first query, k0 = the key tile's first key.
template <bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_tc_cast_q(float (&s)[WM][NS][4], float* tile, int q0, int k0, int T, int site0, bool probs,
                                               float lse2v, const AttnTcastArgs& tc, uint64_t rbase, int lane, int cnt_site) {
    using Tile = AttnTcTileQ<WM>;
    const int i = lane % Tile::NI, part = lane / Tile::NI, g = lane >> 2, tq = lane & 3;
    __syncwarp();
    attn_tc_cast_tile<Tile::L, Tile::LD, Tile::PM, CNT>(tile + Tile::at(i, part * Tile::L), k0 + part * Tile::L, q0 + i, T, site0,
                                                        probs, lse2v, tc, rbase, cnt_site);
    __syncwarp();
    attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = tile[Tile::at(mi * 16 + g + 8 * (r >> 1), n * 8 + 2 * tq + (r & 1))]; });
}

// max(a, |x|) with NaN propagated and float32 subnormals kept (the group amax of the RNE family: NaN
// and Inf make it >= Inf, which attn_tc_rne_group refuses).
__device__ __forceinline__ float attn_tc_amax_(float a, float x) {
    float r;
    asm("{\n\t.reg .f32 t;\n\tabs.f32 t, %2;\n\tmax.NaN.f32 %0, %1, t;\n\t}" : "=f"(r) : "f"(a), "f"(x));
    return r;
}

// The RNE family in registers, on the C fragments of a (16*WM) x 64 query-major tile (site S with S.frag:
// unscaled, or tiles of 32 or 64 keys). A row's 64 keys are its 8 n-tiles x 2 columns in each of the 4
// lanes of its quad, so the 32-key group of n-tiles 0-3 (4-7) is 8 values per lane, merged over the quad
// by two xor shuffles; a 64-key group merges both halves. The quad's 4 lanes then split its 4*WM groups
// (lane tq takes group (mi, hh, h) with 2 hh + h = tq) for attn_tc_rne_group and broadcast the constants
// back (one shuffle per group); an unscaled type needs one group step per lane (s = 0; the amax only
// screens for NaN / Inf / huge values). Every group of the warp is checked first; if one fails anywhere
// the warp leaves x unchanged and returns false (the caller then takes the staged general path), else
// x <- the cast and true. Every lane calls (warp-uniform).
template <int WM, int NS>
__device__ __forceinline__ bool attn_tc_frag_rne(float (&x)[WM][NS][4], const AttnTcastSite& S, int lane) {
    static_assert(NS == 8, "query-major TC tiles hold 64 keys");
    const int scaled = S.tile > 1, tq = lane & 3;
    float a[WM][2][2];  // [mi][row half hh][key half h]: the amax of the lane's part of each group
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            a[mi][hh][0] = a[mi][hh][1] = 0.f;
            #pragma unroll
            for (int n = 0; n < NS; n++)
                a[mi][hh][n >> 2] = attn_tc_amax_(attn_tc_amax_(a[mi][hh][n >> 2], x[mi][n][2 * hh]), x[mi][n][2 * hh + 1]);
        }
    int32_t mc[WM][2][2];  // the groups' constants (attn_tc_rne_q)
    int ok = 1;
    if (scaled) {
        #pragma unroll
        for (int mi = 0; mi < WM; mi++) {
            #pragma unroll
            for (int hh = 0; hh < 2; hh++)
                #pragma unroll
                for (int h = 0; h < 2; h++) {
                    a[mi][hh][h] = attn_tc_amax_(a[mi][hh][h], __shfl_xor_sync(0xffffffffu, a[mi][hh][h], 1));
                    a[mi][hh][h] = attn_tc_amax_(a[mi][hh][h], __shfl_xor_sync(0xffffffffu, a[mi][hh][h], 2));
                }
            const float mine = tq == 0 ? a[mi][0][0] : tq == 1 ? a[mi][0][1] : tq == 2 ? a[mi][1][0] : a[mi][1][1];
            const float other = tq == 0 ? a[mi][0][1] : tq == 1 ? a[mi][0][0] : tq == 2 ? a[mi][1][1] : a[mi][1][0];
            AttnTcRneQ q;  // tiles of 64: both key halves are one group
            ok &= attn_tc_rne_group(&S, __float_as_uint(S.tile == 64 ? attn_tc_amax_(mine, other) : mine), 1, &q);
            #pragma unroll
            for (int hh = 0; hh < 2; hh++)
                #pragma unroll
                for (int h = 0; h < 2; h++) mc[mi][hh][h] = __shfl_sync(0xffffffffu, q.mc, (lane & ~3) | (2 * hh + h));
        }
    } else {
        float m = 0.f;
        #pragma unroll
        for (int mi = 0; mi < WM; mi++) m = attn_tc_amax_(m, attn_tc_amax_(attn_tc_amax_(a[mi][0][0], a[mi][0][1]), attn_tc_amax_(a[mi][1][0], a[mi][1][1])));
        AttnTcRneQ q;
        ok = attn_tc_rne_group(&S, __float_as_uint(m), 0, &q);
        #pragma unroll
        for (int mi = 0; mi < WM; mi++) mc[mi][0][0] = mc[mi][0][1] = mc[mi][1][0] = mc[mi][1][1] = q.mc;
    }
    if (!__all_sync(0xffffffffu, ok)) return false;
    const int32_t c = S.rne_c;
    const uint32_t sg = S.rne_sign;
    attn_frag_each<WM, NS>([&](int mi, int n, int r) { x[mi][n][r] = attn_tc_rne_elem(x[mi][n][r], attn_tc_rne_q(&S, mc[mi][r >> 1][n >> 2]), c, sg); });
    return true;
}

// The TC step of a query-major kernel (forward passes, dQ) on the raw dot products s of the warp's
// (16*WM) x 64 tile: s <- s^ (probs = false; masked -inf) or P^ (probs = true; masked 0), the
// semantics of attn_tc_cast_tile. v = raw * scale (future keys 0) first; then, outside the counting
// instantiation, each site whose datatype is of the RNE family is cast in registers
// (attn_tc_frag_rne) and p = exp2(s^ log2(e) - lse2) computed in registers (lse2: the fragment rows'
// lse * log2(e)); from the first site that cannot (another datatype, or a group the family refuses)
// on, the tile goes through the staged general path (attn_tc_put_q, attn_tc_cast_q from that site;
// lse2v: the lane's staged row's lse * log2(e)). Same bits either way. wr0 = the warp's first query.
template <bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_tc_step_q(float (&s)[WM][NS][4], float* tile, float scale, int wr0, int k0, int T, bool probs,
                                               const float (&lse2)[WM][2], float lse2v, const AttnTcastArgs& tc, uint64_t rbase,
                                               int lane, int cnt_site) {
    const int row0 = wr0 + (lane >> 2), col0 = k0 + 2 * (lane & 3);
    const bool diag = k0 + NS * 8 - 1 > wr0;  // some key of the tile after some query of the warp (else no masking code runs)
    if (diag) attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = attn_masked<false>(col0, row0, mi, n, r) ? 0.f : s[mi][n][r] * scale; });
    else attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] *= scale; });
    int site0 = ATTN_TC_SCORES;  // the first site left to the staged path (2: none)
    if constexpr (!CNT) {
        const AttnTcastSite& S0 = attn_tc_site[ATTN_TC_SCORES];
        const AttnTcastSite& S1 = attn_tc_site[ATTN_TC_PROBS];
        if (!S0.on || (S0.frag && attn_tc_frag_rne(s, S0, lane))) {
            site0 = probs ? ATTN_TC_PROBS : 2;
            if (probs && diag)
                attn_frag_each<WM, NS>([&](int mi, int n, int r) {
                    const float p = attn_exp2(fmaf(s[mi][n][r], ATTN_LOG2E, -lse2[mi][r >> 1]));
                    s[mi][n][r] = attn_masked<false>(col0, row0, mi, n, r) ? 0.f : p;
                });
            else if (probs)
                attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = attn_exp2(fmaf(s[mi][n][r], ATTN_LOG2E, -lse2[mi][r >> 1])); });
            else if (diag)
                attn_frag_each<WM, NS>([&](int mi, int n, int r) { if (attn_masked<false>(col0, row0, mi, n, r)) s[mi][n][r] = -INFINITY; });
            if (probs && (!S1.on || (S1.frag && attn_tc_frag_rne(s, S1, lane)))) site0 = 2;
        }
    }
    if (site0 < 2) {
        attn_tc_put_q(tile, s, lane);
        attn_tc_cast_q<CNT>(s, tile, wr0, k0, T, site0, probs, lse2v, tc, rbase, lane, cnt_site);
    }
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

// The tile <- the fragments' values (v, zeros for a warp whose keys no query of the tile sees, or p:
// attn_tc_step_k).
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_put_k(float* tile, const float (&s)[WM][NS][4], int kw, int lane) {
    static_assert(NS * 8 == AttnTcTileK::NI, "key-major TC tiles hold 64 queries");
    attn_tc_each_pair_k<WM, NS>(kw, lane, [&](int mi, int n, int hh, int w) {
        *reinterpret_cast<float2*>(tile + w) = make_float2(s[mi][n][2 * hh], s[mi][n][2 * hh + 1]);
    });
}

// The RNE family in registers on the key-major fragments of the dK/dV kernel (site S with S.frag): a
// group of X = 32 or 64 keys of one query spans 2 or 4 warps, so its amax goes through shared memory
// (buf, inside the CTA's cast tile): each lane writes the amax of its two keys per query column (keys
// g and g + 8 of its warp) to part[col * 68 + 8 * warp + g] (the 4 lanes of a g write 8 banks apart),
// then thread t < 64 * 128 / X takes group t / 64 of query column t % 64: reads its X / 2 partials
// (16-byte reads, conflict free), runs attn_tc_rne_group and writes mc[group * 64 + col]; a barrier
// that is also the CTA's vote; each lane reads the mc of its 16 columns (its warp's 16 keys lie in one
// group). Unscaled types: one group step per lane and the vote. If a group fails anywhere the CTA
// leaves x unchanged and returns false; else x <- the cast and true. Every thread of the CTA calls.
template <int WM, int NS>
__device__ __forceinline__ bool attn_tc_frag_rne_k(float (&x)[WM][NS][4], const AttnTcastSite& S, float* buf, int kw, int lane) {
    static_assert(WM == 1 && NS == 8, "key-major register casts: 16 keys x 64 queries per warp");
    constexpr int PLD = 68;  // partial row stride (words): 16-byte aligned rows, 4-bank shift per column
    static_assert(64 * PLD + 256 <= AttnTcTileK::words, "the partials and constants fit in the cast tile");
    const int g = lane >> 2, tq = lane & 3, warp = kw / 16, tid = (int)threadIdx.x;
    int32_t mc[NS][2];  // [n][column e]
    float a[NS][2];
    #pragma unroll
    for (int n = 0; n < NS; n++)
        #pragma unroll
        for (int e = 0; e < 2; e++) a[n][e] = attn_tc_amax_(attn_tc_amax_(0.f, x[0][n][e]), x[0][n][2 + e]);
    if (S.tile > 1) {
        float* part = buf;
        int32_t* mcs = reinterpret_cast<int32_t*>(buf + 64 * PLD);
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) part[(n * 8 + 2 * tq + e) * PLD + 8 * warp + g] = a[n][e];
        __syncthreads();
        int ok = 1;
        const int X = S.tile, col = tid & 63, grp = tid >> 6;
        if (grp < 128 / X) {
            float m = 0.f;
            const float4* p4 = reinterpret_cast<const float4*>(part + col * PLD + grp * (X / 2));
            for (int k = 0; k < X / 8; k++) {
                const float4 v = p4[k];
                m = attn_tc_amax_(m, attn_tc_amax_(attn_tc_amax_(v.x, v.y), attn_tc_amax_(v.z, v.w)));
            }
            AttnTcRneQ q;
            ok = attn_tc_rne_group(&S, __float_as_uint(m), 1, &q);
            mcs[grp * 64 + col] = q.mc;
        }
        if (!__syncthreads_and(ok)) return false;
        const int mygrp = kw / X;
        #pragma unroll
        for (int n = 0; n < NS; n++) {
            const int2 v = *reinterpret_cast<const int2*>(mcs + mygrp * 64 + n * 8 + 2 * tq);
            mc[n][0] = v.x;
            mc[n][1] = v.y;
        }
    } else {
        float m = 0.f;
        #pragma unroll
        for (int n = 0; n < NS; n++) m = attn_tc_amax_(m, attn_tc_amax_(a[n][0], a[n][1]));
        AttnTcRneQ q;
        const int ok = attn_tc_rne_group(&S, __float_as_uint(m), 0, &q);
        if (!__syncthreads_and(ok)) return false;
        #pragma unroll
        for (int n = 0; n < NS; n++) mc[n][0] = mc[n][1] = q.mc;
    }
    const int32_t c = S.rne_c;
    const uint32_t sg = S.rne_sign;
    attn_frag_each<WM, NS>([&](int mi, int n, int r) { x[mi][n][r] = attn_tc_rne_elem(x[mi][n][r], attn_tc_rne_q(&S, mc[n][r & 1]), c, sg); });
    return true;
}

// Cast the CTA's staged tile from site site0 on (every thread of the CTA calls; attn_tc_cast_tile with
// probs: L holds the tile's lse values) and read the warp's part back into s (active warps). qb = the tile's first
// query, k0 = the CTA's first key.
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_cast_k(float (&s)[WM][NS][4], float* tile, bool active, int kw, int qb, int k0, int T,
                                               int site0, const float* L, const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    using Tile = AttnTcTileK;
    const int i = (int)threadIdx.x / Tile::PARTS, part = (int)threadIdx.x % Tile::PARTS;
    __syncthreads();
    attn_tc_cast_tile<Tile::L, Tile::LD, Tile::PM, false>(tile + Tile::at(i, part * Tile::L), k0 + part * Tile::L, qb + i, T,
                                                          site0, true, L[i] * ATTN_LOG2E, tc, rbase, -1);
    __syncthreads();
    if (!active) return;
    attn_tc_each_pair_k<WM, NS>(kw, lane, [&](int mi, int n, int hh, int w) {
        const float2 v = *reinterpret_cast<const float2*>(tile + w);
        s[mi][n][2 * hh] = v.x;
        s[mi][n][2 * hh + 1] = v.y;
    });
}

// The TC step of the dK/dV kernel on the raw dot products s of the warp's 16 keys x 64 queries of S^T
// (zeros for an inactive warp): s <- P^T (masked 0), the semantics of attn_tc_cast_tile along the keys.
// As attn_tc_step_q: v = raw * scale (queries before the key 0), then the RNE family in registers per
// site (attn_tc_frag_rne_k) and p = exp2(s^ log2(e) - lse log2(e)) in registers, from the first site
// that cannot on the staged general path (attn_tc_put_k, attn_tc_cast_k). kw = the warp's first key
// inside the CTA's tile, kw0 = its absolute first key, qb = the tile's first query, k0 = the CTA's first key.
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_step_k(float (&s)[WM][NS][4], float* tile, bool active, float scale, int kw, int kw0, int qb,
                                               int k0, int T, const float* L, const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    const int row0 = kw0 + (lane >> 2), col0 = qb + 2 * (lane & 3);
    const bool diag = qb < kw0 + 16 * WM - 1;  // some query of the tile before some key of the warp
    if (diag) attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = attn_masked<true>(col0, row0, mi, n, r) ? 0.f : s[mi][n][r] * scale; });
    else attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] *= scale; });
    int site0 = ATTN_TC_SCORES;  // the first site left to the staged path (2: none)
    const AttnTcastSite& S0 = attn_tc_site[ATTN_TC_SCORES];
    const AttnTcastSite& S1 = attn_tc_site[ATTN_TC_PROBS];
    if (!S0.on || (S0.frag && attn_tc_frag_rne_k(s, S0, tile, kw, lane))) {
        site0 = ATTN_TC_PROBS;
        const int tq = lane & 3;
        if (diag)
            attn_frag_each_col<WM, NS, true>(L, tq, [&](int mi, int n, int r, float lq2) {
                const float p = attn_exp2(fmaf(s[mi][n][r], ATTN_LOG2E, -lq2));
                s[mi][n][r] = attn_masked<true>(col0, row0, mi, n, r) ? 0.f : p;
            });
        else
            attn_frag_each_col<WM, NS, true>(L, tq, [&](int mi, int n, int r, float lq2) { s[mi][n][r] = attn_exp2(fmaf(s[mi][n][r], ATTN_LOG2E, -lq2)); });
        if (!S1.on || (S1.frag && attn_tc_frag_rne_k(s, S1, tile, kw, lane))) site0 = 2;
    }
    if (site0 < 2) {
        __syncthreads();  // the register casts' reads of the tile (partials, constants) are done
        attn_tc_put_k(tile, s, kw, lane);
        attn_tc_cast_k(s, tile, active, kw, qb, k0, T, site0, L, tc, rbase, lane);
    }
}

// dS = P^ (dP - D) of a query-major tile holding P^ (the dQ kernel's TC form).
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_ds(float (&s)[WM][NS][4], const float (&dp)[WM][NS][4], const float (&D)[WM][2]) {
    attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = s[mi][n][r] * (dp[mi][n][r] - D[mi][r >> 1]); });
}
