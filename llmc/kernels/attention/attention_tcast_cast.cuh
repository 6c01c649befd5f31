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
//     AttnTcastSite::frag): the cast in registers, attn_tc_frag_rne / attn_tc_frag_rne_k. Per group its
//     constants and a vote: tile-scaled types find them once, in the forward (the scores' in pass 1, the
//     probabilities' in pass 2: the amax by quad shuffles, one branch-free group step, attn_tc_rne_group), and
//     keep the verdict, a byte per group (attention_tcast.cuh, attn_tc_rne_byte), in a buffer beside lse; pass 2
//     (the scores) and the dQ and dK/dV kernels read it instead (attn_tc_kept_load_q, attn_tc_kept_load_k), so
//     neither the amax nor the group step nor, in dK/dV, the cross-warp reduction runs there again. Unscaled
//     types take one group step per lane in every visit (a known scale: the step only screens the values).
//     Per element seven branch-free instructions (attn_tc_rne_elem), or four with the hardware FP8 conversions
//     for E4M3 / E5M2 elements (attn_tc_hw_pair, attn_tc_frag_round). The probabilities
//     p = exp2(s^ log2(e) - lse log2(e)) follow in registers.
//   * otherwise, or when the vote finds a group the family refuses (NaN / Inf, tiny or huge groups):
//     from that site on, the staged path. The warps write their fragments into a shared-memory tile
//     (attn_tc_put_q / attn_tc_put_k), and after a barrier every thread casts the keys of one query
//     row it owns, in one plain (not unrolled) loop, attn_tc_cast_tile: for each site in turn, M:N
//     pruning, then per group the amax (and the min / max for uint data) over its keys, the group
//     scale (in the forward also kept, for a keeping site: so the groups of a staged tile and of the counting
//     instantiation are kept too), and element by element the rounding (random bits from (seed, flat index)) -
//     the RNE family here too where the group allows, else the general cast - the causal mask and the next
//     step's transform (scores -> probabilities when they follow). After a second barrier the
//     fragments are read back and the kernel goes on with its plain steps. The tile layouts keep
//     every shared-memory access of the loop and of the fragment writes / reads free of bank
//     conflicts (AttnTcTile).
// Both paths give the same bits (the RNE family is checked against tcast_quantize by the harness's
// host self-test, the hardware element step against both on the GPU), so the choice is free per tile; a kept
// verdict that refuses (0xFF) sends the tile to the staged path in the backward as its recomputation would. Each
// kernel holds one inline copy of the staged loop per call site and, per site and call site, one of the register
// cast's group step with three copies of its element step (E4M3, E5M2, attn_tc_rne_elem).
#pragma once

#include <stdint.h>
#include <type_traits>
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
// --cast-stats of site cnt_site (the forward's counting instantiation). KEEP (the forward): a site that keeps
// its group scales (tc.scales) writes each group's RNE verdict (attn_tc_rne_byte) for the backward, so that the
// groups of a tile that went this way, and every group of the counting instantiation, are kept as well.
template <int L, int LD, int PM, bool CNT, bool KEEP>
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
        // KEEP: where this site's verdicts go (set only for a keeping site: on, tile-scaled, of the RNE family)
        uint8_t* const kept = !KEEP ? nullptr : site == ATTN_TC_SCORES ? tc.scales[ATTN_TC_SCORES] : tc.scales[ATTN_TC_PROBS];
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
                const int rok = (rne || kept) && attn_tc_rne_group(&S, am, X > 1, &rq);
                if (kept) {  // this thread's 32-key halves of the group (one, or both of a 64-key group at L = 64)
                    const uint8_t byte = (uint8_t)attn_tc_rne_byte(&S, rok, rq);
                    #pragma unroll 1
                    for (int k = g0; k < g0 + XG; k += 32)
                        if (kb + k <= query && query < T) kept[attn_tc_scale_at(rbase, T, (kb + k) >> 5, query)] = byte;
                }
                if (rne && rok) {
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
template <bool CNT, bool KEEP, int WM, int NS>
__device__ __forceinline__ void attn_tc_cast_q(float (&s)[WM][NS][4], float* tile, int q0, int k0, int T, int site0, bool probs,
                                               float lse2v, const AttnTcastArgs& tc, uint64_t rbase, int lane, int cnt_site) {
    using Tile = AttnTcTileQ<WM>;
    const int i = lane % Tile::NI, part = lane / Tile::NI, g = lane >> 2, tq = lane & 3;
    __syncwarp();
    attn_tc_cast_tile<Tile::L, Tile::LD, Tile::PM, CNT, KEEP>(tile + Tile::at(i, part * Tile::L), k0 + part * Tile::L, q0 + i, T,
                                                              site0, probs, lse2v, tc, rbase, cnt_site);
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

// The last step of a register cast, FIN(v, f, mi, n, r): the element's value from v and the factor f (the hardware
// formats: v = r, the FP8 value, f = 2^s; the other RNE-family types: v = the cast, f = 1). AttnTcUp, the default,
// gives the cast, v f; the exp2 finisher of fold (f) (attention_tcast.cuh) gives p instead.
struct AttnTcUp {
    __device__ __forceinline__ float operator()(float v, float f, int, int, int) const { return tcast_mul_rn(v, f); }
};

// attn_tc_hw_pair over a lane's fragments x, on the pairs (r, r + 1) of each n-tile (in the dK/dV kernel the
// two belong to different groups); mc(mi, n, r) = the group constant of element r of n-tile n of 16-row tile mi;
// pre, fin: as attn_tc_frag_round.
// A finisher with a member codes(mi, n, r, q) (AttnTcPkStore) also gets each pair's two FP8 codes (q: r's in the lower
// byte, r + 1's in the next).
template <typename F, typename = void>
struct attn_tc_wants_codes : std::false_type {};
template <typename F>
struct attn_tc_wants_codes<F, std::void_t<decltype(&F::codes)>> : std::true_type {};

template <int HW, int WM, int NS, typename MC, typename FIN>
__device__ __forceinline__ void attn_tc_frag_hw(float (&x)[WM][NS][4], MC& mc, int32_t up, float pre, FIN& fin) {
    attn_frag_each<WM, NS>([&](int mi, int n, int r) {
        if (r & 1) return;
        const uint32_t q = attn_tc_hw_pair_r<HW>(x[mi][n][r], x[mi][n][r + 1], mc(mi, n, r), mc(mi, n, r + 1), up, pre);
        if constexpr (attn_tc_wants_codes<FIN>::value) fin.codes(mi, n, r, q);
        x[mi][n][r] = fin(x[mi][n][r], attn_tc_hw_up(mc(mi, n, r), up), mi, n, r);
        x[mi][n][r + 1] = fin(x[mi][n][r + 1], attn_tc_hw_up(mc(mi, n, r + 1), up), mi, n, r + 1);
    });
}

// The same on the key-major fragments of the dK/dV kernel (16 keys x 64 queries a warp) with each query column's
// factors decoded in t4 (attn_tc_frag_rne_k): entry n * 4 + tq = (pre 2^-s, 2^s) of columns n * 8 + 2 tq and + 1.
template <int HW, int NS, typename FIN>
__device__ __forceinline__ void attn_tc_frag_hw_tab(float (&x)[1][NS][4], const float4* t4, int tq, FIN& fin) {
    #pragma unroll
    for (int n = 0; n < NS; n++) {
        const float4 t = t4[n * 4 + tq];
        #pragma unroll
        for (int r = 0; r < 4; r += 2) {
            attn_tc_hw_pair_dn<HW>(x[0][n][r], x[0][n][r + 1], t.x, t.z);
            x[0][n][r] = fin(x[0][n][r], t.y, 0, n, r);
            x[0][n][r + 1] = fin(x[0][n][r + 1], t.w, 0, n, r + 1);
        }
    }
}

// The element step of the register casts over a lane's fragments x, once the group step accepted every
// group (mc as above, attn_tc_rne_q's constants). The site's hardware format (S.hw, chosen at configure
// time: one uniform branch per tile, none per element) rounds with attn_tc_frag_hw; every other RNE-family
// type takes attn_tc_rne_elem<NONNEG>. Same bits either way (attention_tcast.cuh, attn_tc_hw_pair). PRE: x holds
// raw values whose scale step (x * pre, pre a power of two) the cast takes over (fold (e)); FIN: the last step
// (AttnTcUp: x <- the cast).
template <bool NONNEG, bool PRE = false, int WM, int NS, typename MC, typename FIN = AttnTcUp>
__device__ __forceinline__ void attn_tc_frag_round(float (&x)[WM][NS][4], const AttnTcastSite& S, MC&& mc, float pre = 1.f, FIN fin = FIN()) {
    if (S.hw == ATTN_TC_HW_E4M3) {
        attn_tc_frag_hw<ATTN_TC_HW_E4M3>(x, mc, S.hw_up, PRE ? pre : 1.f, fin);
    } else if (S.hw == ATTN_TC_HW_E5M2) {
        attn_tc_frag_hw<ATTN_TC_HW_E5M2>(x, mc, S.hw_up, PRE ? pre : 1.f, fin);
    } else {
        const int32_t c = S.rne_c;
        const uint32_t sg = S.rne_sign;
        attn_frag_each<WM, NS>([&](int mi, int n, int r) {
            const float v = attn_tc_rne_elem<NONNEG>(PRE ? x[mi][n][r] * pre : x[mi][n][r], attn_tc_rne_q(&S, mc(mi, n, r)), c, sg);
            if constexpr (std::is_same<FIN, AttnTcUp>::value) x[mi][n][r] = v;
            else x[mi][n][r] = fin(v, 1.f, mi, n, r);
        });
    }
}

// Which visit of a tile a query-major TC step is, i.e. where each site's group scales come from (a site that
// keeps them, attention_tcast_keeps; the others find theirs in every visit, as before):
//   ATTN_TC_FWD_STATS  forward pass 1, the scores alone: found from the group amax, and kept (written)
//   ATTN_TC_FWD_OUT    forward pass 2, scores then probabilities: the scores' read back, the probabilities' found and kept
//   ATTN_TC_BWD        the dQ kernel (and, with attn_tc_step_k, dK/dV): both read
enum { ATTN_TC_FWD_STATS = 0, ATTN_TC_FWD_OUT = 1, ATTN_TC_BWD = 2 };

// Where a warp's query-major tile lies in the kept group scales (attn_tc_scale_at): the quad of lane (g = lane / 4,
// tq = lane % 4) holds rows wr0 + 16 mi + g + 8 hh of each 16-row tile mi, and lane tq stands for its quad's group
// (hh, h) = (tq / 2, tq % 2): keys k0 + 32 h .. k0 + 32 h + 31 of row wr0 + 16 mi + g + 8 hh. The byte index of that
// group, or -1 for a group the forward does not keep (row >= T, or every key after the row). attn_tc_scale_at in
// 32-bit arithmetic (attn_tc_args refuses a site's buffer of 4 GiB or more): fewer registers held in the key loop.
__device__ __forceinline__ long long attn_tc_kept_at_q(uint64_t rbase, int T, int wr0, int k0, int lane, int mi) {
    const int row = wr0 + 16 * mi + (lane >> 2) + 8 * ((lane & 3) >> 1), key = k0 + 32 * (lane & 1);
    const uint32_t at = (uint32_t)rbase * (uint32_t)((T + 31) >> 5) + (uint32_t)(key >> 5) * (uint32_t)T + (uint32_t)row;
    return row < T && key <= row ? (long long)at : -1;
}

// The bytes a backward visit (or pass 2, for the scores) reads, per 16-row tile mi the group attn_tc_kept_at_q names,
// both sites' in one word: kb[mi] = the scores' byte | the probabilities' byte << 8 (0, the filler, where the forward
// keeps none, and for a site that keeps nothing; PROBS = false: the scores' alone). Issued before the tile's Q.K^T
// MMA, so that the loads' latency hides behind it (one register per mi held across it).
template <bool PROBS, int WM>
__device__ __forceinline__ void attn_tc_kept_load_q(uint32_t (&kb)[WM], const AttnTcastArgs& tc, uint64_t rbase, int T, int wr0, int k0,
                                                    int lane) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++) {
        const long long at = attn_tc_kept_at_q(rbase, T, wr0, k0, lane, mi);
        const uint8_t* s0 = tc.scales[ATTN_TC_SCORES];
        const uint8_t* s1 = tc.scales[ATTN_TC_PROBS];
        kb[mi] = at >= 0 && s0 ? (uint32_t)s0[at] : 0u;
        if (PROBS) kb[mi] |= (at >= 0 && s1 ? (uint32_t)s1[at] : 0u) << 8;
    }
}

// The amax of this lane's part of each 32-key group of a (16*WM) x 64 query-major tile: a[mi][hh][h] over its 8
// values of row half hh (rows g, g + 8) in key half h (n-tiles 4 h .. 4 h + 3).
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_lane_amax_q(float (&a)[WM][2][2], const float (&x)[WM][NS][4]) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            a[mi][hh][0] = a[mi][hh][1] = 0.f;
            #pragma unroll
            for (int n = 0; n < NS; n++)
                a[mi][hh][n >> 2] = attn_tc_amax_(attn_tc_amax_(a[mi][hh][n >> 2], x[mi][n][2 * hh]), x[mi][n][2 * hh + 1]);
        }
}

// The RNE family in registers, on the C fragments of a (16*WM) x 64 query-major tile (site S with S.frag:
// unscaled, or tiles of 32 or 64 keys). A row's 64 keys are its 8 n-tiles x 2 columns in each of the 4
// lanes of its quad, so the 32-key group of n-tiles 0-3 (4-7) is 8 values per lane. Tile-scaled: each lane of a
// quad stands for one of its 4*WM groups (attn_tc_kept_at_q) and gets that group's constants either way:
//   READ = false (find): the group amax, merged over the quad by two xor shuffles (a 64-key group merges both
//     halves), then attn_tc_rne_group; the verdict (attn_tc_rne_byte) is written to kept, this site's kept scales
//     (NULL: none), at the group's place (attn_tc_kept_at_q of rbase, T, wr0 = the warp's first query and k0 =
//     the tile's first key);
//   READ = true: the verdict the forward kept, byte KSITE of kb[mi] (attn_tc_kept_load_q): no amax, no group step;
// then the quad broadcasts the constants back (one shuffle per group). An unscaled type needs one group step per
// lane (s = 0; the amax only screens for NaN / Inf / huge values), READ or not. If a group is refused anywhere the
// warp leaves x unchanged and returns false (the caller then takes the staged general path; PRE: after its scale
// step), else x <- fin of the cast (attn_tc_frag_round; PRE: x held raw values, the amax is taken of them and scaled
// by pre, fold (e)) and true. Every lane calls (warp-uniform). NONNEG: x holds
// probabilities (sign bits clear), cast by attn_tc_rne_elem<true>.
template <bool NONNEG = false, bool READ = false, int KSITE = 0, bool PRE = false, int WM, int NS, typename FIN = AttnTcUp>
__device__ __forceinline__ bool attn_tc_frag_rne(float (&x)[WM][NS][4], const AttnTcastSite& S, int lane, const uint32_t (&kb)[WM],
                                                 uint8_t* kept, uint64_t rbase, int T, int wr0, int k0, float pre = 1.f,
                                                 FIN fin = FIN()) {
    static_assert(NS == 8, "query-major TC tiles hold 64 keys");
    const int scaled = S.tile > 1, tq = lane & 3;
    float a[WM][2][2];  // [mi][row half hh][key half h]: the amax of the lane's part of each group
    int32_t mc[WM][2][2];  // the groups' constants (attn_tc_rne_q)
    int ok = 1;
    if (scaled) {
        if constexpr (!READ) attn_tc_lane_amax_q(a, x);
        #pragma unroll
        for (int mi = 0; mi < WM; mi++) {
            int32_t mine_mc;  // the constants of the lane's group
            if constexpr (READ) {
                const uint32_t byte = (kb[mi] >> (8 * KSITE)) & 0xFFu;
                ok &= byte != ATTN_TC_REFUSED;
                mine_mc = attn_tc_rne_mc_of(&S, byte);
            } else {
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
                const float am = S.tile == 64 ? attn_tc_amax_(mine, other) : mine;
                const int gok = attn_tc_rne_group(&S, __float_as_uint(PRE ? am * pre : am), 1, &q);
                ok &= gok;
                if (kept) {
                    const long long at = attn_tc_kept_at_q(rbase, T, wr0, k0, lane, mi);
                    if (at >= 0) kept[at] = (uint8_t)attn_tc_rne_byte(&S, gok, q);
                }
                mine_mc = q.mc;
            }
            #pragma unroll
            for (int hh = 0; hh < 2; hh++)
                #pragma unroll
                for (int h = 0; h < 2; h++) mc[mi][hh][h] = __shfl_sync(0xffffffffu, mine_mc, (lane & ~3) | (2 * hh + h));
        }
    } else {
        attn_tc_lane_amax_q(a, x);
        float m = 0.f;
        #pragma unroll
        for (int mi = 0; mi < WM; mi++) m = attn_tc_amax_(m, attn_tc_amax_(attn_tc_amax_(a[mi][0][0], a[mi][0][1]), attn_tc_amax_(a[mi][1][0], a[mi][1][1])));
        AttnTcRneQ q;
        ok = attn_tc_rne_group(&S, __float_as_uint(PRE ? m * pre : m), 0, &q);
        #pragma unroll
        for (int mi = 0; mi < WM; mi++) mc[mi][0][0] = mc[mi][0][1] = mc[mi][1][0] = mc[mi][1][1] = q.mc;
    }
    if (!__all_sync(0xffffffffu, ok)) return false;
    attn_tc_frag_round<NONNEG, PRE>(x, S, [&](int mi, int n, int r) { return mc[mi][r >> 1][n >> 2]; }, pre, fin);
    return true;
}

// The scale step of a TC step on the raw dot products s: s <- raw * scale, masked elements (attn_masked<KEY_MAJOR>, looked
// at only in a tile that crosses the diagonal, diag) 0; fold (the scores' register cast takes the scale over): s <- raw,
// masked elements 0.
template <bool KEY_MAJOR, int WM, int NS>
__device__ __forceinline__ void attn_tc_scale_step(float (&s)[WM][NS][4], bool fold, bool diag, float scale, int col0, int row0) {
    if (fold) {
        if (diag) attn_frag_each<WM, NS>([&](int mi, int n, int r) { if (attn_masked<KEY_MAJOR>(col0, row0, mi, n, r)) s[mi][n][r] = 0.f; });
    } else if (diag) {
        attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = attn_masked<KEY_MAJOR>(col0, row0, mi, n, r) ? 0.f : s[mi][n][r] * scale; });
    } else {
        attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] *= scale; });
    }
}

// 1 if x is a positive normal power of two (fold (e), attention_tcast.cuh: the scale 1 / sqrt(HS) for HS = 4^k).
__device__ __forceinline__ bool attn_tc_pow2(float x) {
    const uint32_t b = __float_as_uint(x);
    return (b & 0x807FFFFFu) == 0u && (b >> 23) - 1u < 254u;
}

// The TC step of a query-major kernel (forward passes, dQ) on the raw dot products s of the warp's
// (16*WM) x 64 tile: s <- s^ (VISIT = ATTN_TC_FWD_STATS, the scores alone; masked -inf) or P^ (the other visits;
// masked 0), the semantics of attn_tc_cast_tile. v = raw * scale (future keys 0) first (where the scores' register
// cast runs, inside it: fold (e) of attention_tcast.cuh); then, outside the counting instantiation (CNT) and the
// harness's all-staged one (STAGED), each site whose datatype is of the RNE family is cast in registers
// (attn_tc_frag_rne, its group scales found or read as VISIT says; kb: the bytes attn_tc_kept_load_q read for the
// sites that read, [site][mi]) and p = exp2(s^ log2(e) - lse2) computed in registers (lse2: the fragment rows'
// lse * log2(e); after a scores' register cast, as its finisher: fold (f)); from the first site that cannot (another datatype, or a
// group the family refuses) on, the tile goes through the staged general path (attn_tc_put_q, attn_tc_cast_q from
// that site, which in the forward also keeps the verdicts of the groups it casts; lse2v: the lane's staged row's
// lse * log2(e)). Same bits either way. wr0 = the warp's first query. pfin: the finisher of the probabilities' register
// cast (AttnTcUp; the forward's output pass AttnTcPkStore, which also stores their codes). Returns true when every
// site went the register way (no staged path).
template <bool CNT, int VISIT, bool STAGED, int WM, int NS, typename PFIN = AttnTcUp>
__device__ __forceinline__ bool attn_tc_step_q(float (&s)[WM][NS][4], float* tile, float scale, int wr0, int k0, int T,
                                               const float (&lse2)[WM][2], float lse2v, const AttnTcastArgs& tc, uint64_t rbase,
                                               int lane, int cnt_site, const uint32_t (&kb)[WM], PFIN pfin = PFIN()) {
    constexpr bool probs = VISIT != ATTN_TC_FWD_STATS, READ0 = VISIT != ATTN_TC_FWD_STATS, READ1 = VISIT == ATTN_TC_BWD;
    const int row0 = wr0 + (lane >> 2), col0 = k0 + 2 * (lane & 3);
    const bool diag = k0 + NS * 8 - 1 > wr0;  // some key of the tile after some query of the warp (else no masking code runs)
    const AttnTcastSite& S0 = attn_tc_site[ATTN_TC_SCORES];
    // the scores' register cast takes over the scale step (fold (e), attention_tcast.cuh; a power-of-two scale)
    const bool fold = !CNT && !STAGED && S0.on && S0.frag && attn_tc_pow2(scale);
    attn_tc_scale_step<false>(s, fold, diag, scale, col0, row0);
    int site0 = ATTN_TC_SCORES;  // the first site left to the staged path (2: none)
    if constexpr (!CNT && !STAGED) {
        const AttnTcastSite& S1 = attn_tc_site[ATTN_TC_PROBS];
        // the probability visits' finisher (fold (f)): p = exp2(s^ log2(e) - lse2) straight from the scores' cast
        const auto to_p = [&](float v, float f, int mi, int, int r) { return attn_exp2(fmaf(v, f * ATTN_LOG2E, -lse2[mi][r >> 1])); };
        // S0.on without fold (a datatype outside the fragment family, or a scale that is not a power of two, which the
        // TC kernels' HS = 64 never has): the staged path
        bool ok0 = !S0.on;
        if (fold) {
            if constexpr (probs) ok0 = attn_tc_frag_rne<false, READ0, ATTN_TC_SCORES, true>(s, S0, lane, kb, nullptr, rbase, T, wr0, k0, scale, to_p);
            else ok0 = attn_tc_frag_rne<false, READ0, ATTN_TC_SCORES, true>(s, S0, lane, kb, tc.scales[ATTN_TC_SCORES], rbase, T, wr0, k0, scale);
            if (!ok0) attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] *= scale; });  // the staged path's v = raw * scale
        }
        if (ok0) {
            site0 = probs ? ATTN_TC_PROBS : 2;
            if (probs) {
                if (!fold)  // (fold: the finisher made p already)
                    attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = attn_exp2(fmaf(s[mi][n][r], ATTN_LOG2E, -lse2[mi][r >> 1])); });
                if (diag) attn_frag_each<WM, NS>([&](int mi, int n, int r) { if (attn_masked<false>(col0, row0, mi, n, r)) s[mi][n][r] = 0.f; });
            } else if (diag)
                attn_frag_each<WM, NS>([&](int mi, int n, int r) { if (attn_masked<false>(col0, row0, mi, n, r)) s[mi][n][r] = -INFINITY; });
            if (probs && (!S1.on || (S1.frag && attn_tc_frag_rne<true, READ1, ATTN_TC_PROBS>(s, S1, lane, kb, READ1 ? nullptr : tc.scales[ATTN_TC_PROBS],
                                                                               rbase, T, wr0, k0, 1.f, pfin))))
                site0 = 2;
        }
    }
    if (site0 < 2) {
        attn_tc_put_q(tile, s, lane);
        attn_tc_cast_q<CNT, VISIT != ATTN_TC_BWD>(s, tile, wr0, k0, T, site0, probs, lse2v, tc, rbase, lane, cnt_site);
        return false;
    }
    return true;
}

// ---- The probabilities' codes (attention_tcast.cuh, "The probabilities the forward keeps") ---------------------

// The forward's output pass keeps the probabilities' codes through the finisher of their register cast, AttnTcPkStore:
// as AttnTcUp it returns P^ = r 2^s, and attn_tc_frag_hw hands it each pair's two codes as the hardware conversion made
// them (codes(): no second conversion). Per 16 x 16 block at or below the diagonal (kj <= qi < n16) and lane, the pairs
// of the two 8-key halves become one 16-bit element each (A | B << 8: key 2 tq and 8 + 2 tq, then 2 tq + 1 and
// 9 + 2 tq), one movmatrix per 8-query half transposes both halves at once, and one 8-byte store writes the lane's
// share of the block (a warp writes its 256 bytes together; streaming: the backward reads them once). Rows >= T: code 0.
// A tile that takes the staged path (no codes: a group refused, or a scores datatype outside the register family) sets
// the call's flag instead (attn_tc_pk_mark). head: the (b, h)'s codes; qi = the warp's query block (WM = 1), kj0 = the
// key tile's first key block.
struct AttnTcPkStore : AttnTcUp {  // (the value: AttnTcUp's)
    uint8_t* blk;   // the block (kj0, qi) of the head (NULL: not kept; qi < n16: the output pass runs rows < T only)
    int qi, kj0, n16, lane;
    bool row_ok[2];  // rows g and g + 8 of the warp's 16 are < T
    uint32_t pend[2], w0;
    // the codes of elements r and r + 1 (r even) of n-tile n, q: r's in the lower byte
    // Branch-free but for the store (n and r are constants of the unrolled loop): a branch per pair would cut the
    // cast's instruction stream into blocks that ptxas schedules apart.
    __device__ __forceinline__ void codes(int, int n, int r, uint32_t q) {  // (WM = 1: mi = 0)
        const int qh = r >> 1, c = n >> 1, kj = kj0 + c;
        q = row_ok[qh] ? q : 0u;
        if ((n & 1) == 0) {
            pend[qh] = q;
            return;
        }
        const uint32_t w = attn_movmatrix_trans(__byte_perm(pend[qh], q, 0x5140));  // (A0 | B0 << 8, A1 | B1 << 8), transposed
        if (qh == 0) {
            w0 = w;
            return;
        }
        // block (kj, qi) = block (kj0, qi) + the (n16 - k - 1) blocks of each key block k in kj0 .. kj - 1
        const int off = c * (n16 - kj0 - 1) - c * (c - 1) / 2;
        if (blk && kj <= qi) __stcs(reinterpret_cast<uint2*>(blk + (size_t)off * ATTN_PK_BLOCK_BYTES) + lane, make_uint2(w0, w));
    }
};
// The finisher of the output pass's tile at (wr0, k0) of head bh (WM = 1): stores the codes where tc.pcode is set.
__device__ __forceinline__ AttnTcPkStore attn_tc_pk_store(const AttnTcastArgs& tc, int bh, int wr0, int k0, int T, int lane) {
    AttnTcPkStore p;
    p.n16 = (T + 15) >> 4;
    p.qi = wr0 >> 4;
    p.kj0 = k0 >> 4;
    p.lane = lane;
    p.row_ok[0] = wr0 + (lane >> 2) < T;
    p.row_ok[1] = wr0 + (lane >> 2) + 8 < T;
    p.pend[0] = p.pend[1] = p.w0 = 0u;
    p.blk = tc.pcode && p.kj0 <= p.qi ? tc.pcode + ((size_t)bh * attn_pk_blocks(T) + attn_pk_block(p.kj0, p.qi, p.n16)) * ATTN_PK_BLOCK_BYTES
                                      : nullptr;
    return p;
}
// A tile of the output pass that went the staged way (regs false): the call's codes are not all kept.
__device__ __forceinline__ void attn_tc_pk_mark(const AttnTcastArgs& tc, bool regs, int lane) {
    if (tc.pflag && !regs && lane == 0) *tc.pflag = 1u;
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

// The kept group scales of one query tile of the dK/dV kernel, in shared memory (double-buffered beside the tile's
// lse and D): per site, the 4 32-key halves of the CTA's 128 keys x the tile's 64 queries, [site][half][query],
// ATTN_TC_KEPT_K bytes.
constexpr int ATTN_TC_KEPT_K_HALVES = AttnTcTileK::NK / 32;
constexpr int ATTN_TC_KEPT_K_SITE = ATTN_TC_KEPT_K_HALVES * AttnTcTileK::NI;
constexpr int ATTN_TC_KEPT_K = 2 * ATTN_TC_KEPT_K_SITE;

// Start copying the kept group scales of the query tile at qb for the CTA's keys k0 .. k0 + NK - 1 into dst, sites
// SITE0 .. 1 ([site - SITE0][half][query], (NK / 32) NQ bytes a site: ATTN_TC_KEPT_K for the TC kernel's default
// 128 x 64 tile of both sites; the codes' dK/dV kernel reads the probabilities' alone, attn_bwd_dkv_pk_kernel); a
// group the forward does not keep (attn_tc_kept_at_q's rule), and every group of a site that keeps none, reads as the
// filler 0. T % 16 == 0 (the trainer's shapes): thread t copies 16 queries of one half, for each site, with 16-byte
// cp.async, committed with the tile's other copies (a 16-query chunk lies wholly at or below the diagonal or wholly
// above it, and wholly below T: 32 h and qb are multiples of 16); else one byte at a time (plain loads and stores,
// ordered by the same barrier). Each index serves every site (the same place in each site's part), so that little of
// it stays live across the kernel's loop (32-bit: attn_tc_args refuses a site's part of 4 GiB or more). Every thread
// of the CTA calls.
template <int NK = AttnTcTileK::NK, int NQ = AttnTcTileK::NI, int SITE0 = ATTN_TC_SCORES>
__device__ __forceinline__ void attn_tc_kept_load_k(uint8_t* dst, const AttnTcastArgs& tc, uint64_t rbase, int T, int k0, int qb) {
    static_assert(NK % 32 == 0 && NQ % 16 == 0, "whole 32-key halves, whole 16-query chunks");
    constexpr int PART = (NK / 32) * NQ;  // a site's bytes
    const int chunk = (T & 15) == 0, step = chunk ? 16 : 1;
    for (int at = (int)threadIdx.x * step; at < PART; at += (int)blockDim.x * step) {  // the byte offset in a site's part
        const int half = (k0 >> 5) + at / NQ, q = qb + at % NQ;
        const bool valid = q < T && 32 * half <= q;
        const uint32_t idx = valid ? (uint32_t)rbase * (uint32_t)((T + 31) >> 5) + (uint32_t)half * (uint32_t)T + (uint32_t)q : 0u;
        #pragma unroll
        for (int site = SITE0; site < 2; site++) {
            const uint8_t* kept = site == ATTN_TC_SCORES ? tc.scales[ATTN_TC_SCORES] : tc.scales[ATTN_TC_PROBS];
            uint8_t* d = dst + (site - SITE0) * PART + at;
            if (!chunk) *d = kept && valid ? kept[idx] : (uint8_t)0;
            else if (kept) attn_cp_async16(attn_smem_addr(d), kept + idx, valid);
            else *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

// The RNE family in registers on the key-major fragments of the dK/dV kernel (site S with S.frag). Tile-scaled: a
// group of X = 32 or 64 keys of one query spans 2 or 4 warps; its verdict is the one the forward kept (kept: this
// site's ATTN_TC_KEPT_K_SITE bytes of the tile, attn_tc_kept_load_k), so no amax and no group step here. The CTA's
// vote: every warp reads all 256 bytes (8 a lane) and asks whether one is ATTN_TC_REFUSED (the same answer in every
// warp: no barrier); each lane then reads the bytes of its 16 query columns in its warp's half (the warp's 16 keys
// lie in one 32-key half). A hardware site (S.hw) decodes those bytes once per warp instead of per lane: lane l turns
// the bytes of queries 2 l and 2 l + 1 into their factors (pre 2^-s, 2^s) in tab (the warp's 128 floats of the cast
// tile, which the staged path only writes after a barrier: attn_tc_step_k), and each lane reads the four it needs
// per n-tile with one 16-byte load (8 lanes of a warp and 4 warps of a half share each byte: ~160 integer instructions
// a tile fewer, doc/TCAST.md 6, session 16). Unscaled types: one group step per lane and a __syncthreads_and vote. If
// a group fails anywhere the CTA leaves x unchanged and returns false; else x <- fin of the cast and true (PRE, fin:
// as attn_tc_frag_rne). Every thread of the CTA calls. NONNEG: x holds probabilities (sign bits
// clear), cast by attn_tc_rne_elem<true>. VOTE (a warp whose x is all zeros and stays so, attn_tc_step_k): only the
// vote, the same answer, x untouched.
template <bool NONNEG = false, bool PRE = false, bool VOTE = false, int WM, int NS, typename FIN = AttnTcUp>
__device__ __forceinline__ bool attn_tc_frag_rne_k(float (&x)[WM][NS][4], const AttnTcastSite& S, const uint8_t* kept, float* tab, int kw,
                                                   int lane, float pre = 1.f, FIN fin = FIN()) {
    static_assert(WM == 1 && NS == 8, "key-major register casts: 16 keys x 64 queries per warp");
    static_assert(ATTN_TC_KEPT_K_SITE == 32 * 8, "the vote reads a site's bytes as 8 per lane");
    const int tq = lane & 3;
    int32_t mc[NS][2];  // [n][column e]
    if (S.tile > 1) {
        const uint2 w = reinterpret_cast<const uint2*>(kept)[lane];
        if (__any_sync(0xffffffffu, (__vcmpeq4(w.x, 0xFFFFFFFFu) | __vcmpeq4(w.y, 0xFFFFFFFFu)) != 0u)) return false;
        const uint8_t* mine = kept + (kw / 32) * AttnTcTileK::NI;  // the warp's half, 64 queries
        if (!VOTE && S.hw != ATTN_TC_HW_NONE) {
            const uint32_t v = *reinterpret_cast<const uint16_t*>(mine + 2 * lane);
            const int32_t m0 = attn_tc_rne_mc_of(&S, v & 0xFFu), m1 = attn_tc_rne_mc_of(&S, v >> 8);
            float4* t4 = reinterpret_cast<float4*>(tab);
            t4[lane] = make_float4(attn_tc_hw_down(m0, S.hw_up) * (PRE ? pre : 1.f), attn_tc_hw_up(m0, S.hw_up),
                                   attn_tc_hw_down(m1, S.hw_up) * (PRE ? pre : 1.f), attn_tc_hw_up(m1, S.hw_up));
            __syncwarp();
            if (S.hw == ATTN_TC_HW_E4M3) attn_tc_frag_hw_tab<ATTN_TC_HW_E4M3>(x, t4, tq, fin);
            else attn_tc_frag_hw_tab<ATTN_TC_HW_E5M2>(x, t4, tq, fin);
            return true;
        }
        #pragma unroll
        for (int n = 0; n < NS && !VOTE; n++) {
            const uint32_t v = *reinterpret_cast<const uint16_t*>(mine + n * 8 + 2 * tq);
            mc[n][0] = attn_tc_rne_mc_of(&S, v & 0xFFu);
            mc[n][1] = attn_tc_rne_mc_of(&S, v >> 8);
        }
    } else {
        float m = 0.f;
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int e = 0; e < 2; e++) m = attn_tc_amax_(m, attn_tc_amax_(attn_tc_amax_(0.f, x[0][n][e]), x[0][n][2 + e]));
        AttnTcRneQ q;
        const int ok = attn_tc_rne_group(&S, __float_as_uint(PRE ? m * pre : m), 0, &q);
        if (!__syncthreads_and(ok)) return false;
        #pragma unroll
        for (int n = 0; n < NS && !VOTE; n++) mc[n][0] = mc[n][1] = q.mc;
    }
    if constexpr (!VOTE) attn_tc_frag_round<NONNEG, PRE>(x, S, [&](int mi, int n, int r) { return mc[n][r & 1]; }, pre, fin);
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
    attn_tc_cast_tile<Tile::L, Tile::LD, Tile::PM, false, false>(tile + Tile::at(i, part * Tile::L), k0 + part * Tile::L, qb + i, T,
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
// As attn_tc_step_q: v = raw * scale (queries before the key 0; folds (e) and (f) as there), then the RNE family in registers per
// site (attn_tc_frag_rne_k, with the group scales the forward kept: kept = the tile's ATTN_TC_KEPT_K bytes,
// attn_tc_kept_load_k) and p = exp2(s^ log2(e) - lse log2(e)) in registers, from the first site that cannot on
// the staged general path (attn_tc_put_k, attn_tc_cast_k; STAGED, the harness's all-staged instantiation: every
// tile). kw = the warp's first key inside the CTA's tile, kw0 = its absolute first key, qb = the tile's first
// query, k0 = the CTA's first key.
template <bool STAGED, int WM, int NS>
__device__ __forceinline__ void attn_tc_step_k(float (&s)[WM][NS][4], float* tile, bool active, float scale, int kw, int kw0, int qb,
                                               int k0, int T, const float* L, const AttnTcastArgs& tc, uint64_t rbase, int lane,
                                               const uint8_t* kept) {
    const int row0 = kw0 + (lane >> 2), col0 = qb + 2 * (lane & 3), tq = lane & 3;
    const bool diag = qb < kw0 + 16 * WM - 1;  // some query of the tile before some key of the warp
    const AttnTcastSite& S0 = attn_tc_site[ATTN_TC_SCORES];
    // as attn_tc_step_q: the scores' register cast takes over the scale step (fold (e)) and makes p (fold (f))
    const bool fold = !STAGED && S0.on && S0.frag && attn_tc_pow2(scale);
    int site0 = ATTN_TC_SCORES;  // the first site left to the staged path (2: none)
    if (!STAGED && !active) {
        // no key of the warp is visible to a query of the tile: s is 0 and its P^T is 0 whatever the casts (every
        // element masked), so the warp only takes part in the CTA's votes (the same answers: site0)
        const AttnTcastSite& S1 = attn_tc_site[ATTN_TC_PROBS];
        const bool ok0 = fold ? attn_tc_frag_rne_k<false, true, true>(s, S0, kept, nullptr, kw, lane) : !S0.on;
        if (ok0) site0 = !S1.on || (S1.frag && attn_tc_frag_rne_k<true, false, true>(s, S1, kept + ATTN_TC_KEPT_K_SITE, nullptr, kw, lane))
                             ? 2 : ATTN_TC_PROBS;
    } else if constexpr (!STAGED) {
        attn_tc_scale_step<true>(s, fold, diag, scale, col0, row0);
        const AttnTcastSite& S1 = attn_tc_site[ATTN_TC_PROBS];
        // p = exp2(s^ log2(e) - lse log2(e)), lse of element r's query column (attn_frag_each_col's value, LOG2)
        const auto to_p = [&](float v, float f, int, int n, int r) {
            return attn_exp2(fmaf(v, f * ATTN_LOG2E, -(L[n * 8 + 2 * tq + (r & 1)] * ATTN_LOG2E)));
        };
        static_assert(AttnTcTileK::words >= (AttnTcTileK::NK / 16) * 256, "the cast tile holds every warp's decoded factors");
        float* tab = tile + (kw / 16) * 256;  // this warp's decoded factors of the two sites (attn_tc_frag_rne_k)
        const bool ok0 = fold ? attn_tc_frag_rne_k<false, true>(s, S0, kept, tab, kw, lane, scale, to_p) : !S0.on;  // (else: staged, as step_q)
        if (fold && !ok0) attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] *= scale; });  // the staged path's v = raw * scale
        if (ok0) {
            site0 = ATTN_TC_PROBS;
            if (!fold)
                attn_frag_each_col<WM, NS, true>(L, tq, [&](int mi, int n, int r, float lq2) { s[mi][n][r] = attn_exp2(fmaf(s[mi][n][r], ATTN_LOG2E, -lq2)); });
            if (diag) attn_frag_each<WM, NS>([&](int mi, int n, int r) { if (attn_masked<true>(col0, row0, mi, n, r)) s[mi][n][r] = 0.f; });
            if (!S1.on || (S1.frag && attn_tc_frag_rne_k<true>(s, S1, kept + ATTN_TC_KEPT_K_SITE, tab + 128, kw, lane))) site0 = 2;
        }
    } else {
        attn_tc_scale_step<true>(s, fold, diag, scale, col0, row0);
    }
    if (site0 < 2) {  // (site0 is the CTA's: the votes are)
        __syncthreads();  // every warp is done with its decoded factors (attn_tc_frag_rne_k) in the cast tile
        attn_tc_put_k(tile, s, kw, lane);
        attn_tc_cast_k(s, tile, active, kw, qb, k0, T, site0, L, tc, rbase, lane);
    }
}

// The codes' dK/dV kernel (attn_bwd_dkv_pk_kernel): start copying the codes of the warp's WM key blocks from kj0 x
// the query tile at qb (BR / 16 blocks) into dst (WM (BR / 16) blocks of 256 bytes, [key block][query block]); blocks
// the forward does not store (above the diagonal, at or past n16) read as zeros. head: the (b, h)'s codes. Every lane
// calls (WM BR / 32 copies of 16 bytes each).
template <int WM, int BR>
__device__ __forceinline__ void attn_tc_pk_load(uint8_t* dst, const uint8_t* head, int kj0, int qb, int n16, int lane) {
    constexpr int QB = BR / 16, CH = WM * QB * 16;  // query blocks a tile, 16-byte chunks
    static_assert(CH % 32 == 0, "whole chunks per lane");
    #pragma unroll
    for (int h = 0; h < CH / 32; h++) {
        const int ch = lane + 32 * h, blk = ch >> 4, kj = kj0 + blk / QB, qi = (qb >> 4) + blk % QB;
        const bool valid = kj <= qi && qi < n16;
        const uint8_t* src = head + (valid ? attn_pk_block(kj, qi, n16) * ATTN_PK_BLOCK_BYTES : 0) + (ch & 15) * 16;
        attn_cp_async16(attn_smem_addr(dst + ch * 16), src, valid);
    }
}

// s <- P^T of the warp's 16 WM keys x 8 NS queries (key-major C fragments as attn_tc_step_k's: element r of n-tile n of
// row tile mi is key 16 mi + g + 8 (r / 2), query 8 n + 2 tq + r % 2) from the codes (attn_tc_pk_load's WM (NS / 2)
// blocks) and the probability groups' kept bytes of the 32-key half holding the warp's keys (kept_half: 8 NS queries):
// P^ = r 2^s, the products the recomputing kernel's register cast forms (AttnTcUp), so the same bits. Lanes
// 0 .. 4 NS - 1 decode 2^s of queries 2 l and 2 l + 1 into tab (the warp's 32 float2) once; then per n-tile one 8-byte
// read of tab and per block one of the codes. Every lane calls.
template <int HW, int WM, int NS>
__device__ __forceinline__ void attn_tc_pk_p_hw(float (&s)[WM][NS][4], const uint8_t* codes, const uint8_t* kept_half, float2* tab,
                                                const AttnTcastSite& S, int lane) {
    static_assert(NS % 2 == 0 && NS <= 8, "whole 16-query blocks, at most 64 queries (32 lanes x 2)");
    if (lane < 4 * NS) {
        const uint32_t v = *reinterpret_cast<const uint16_t*>(kept_half + 2 * lane);
        tab[lane] = make_float2(attn_tc_hw_up(attn_tc_rne_mc_of(&S, v & 0xFFu), S.hw_up), attn_tc_hw_up(attn_tc_rne_mc_of(&S, v >> 8), S.hw_up));
    }
    __syncwarp();
    const int tq = lane & 3;
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int c = 0; c < NS / 2; c++) {
            const uint2 w = reinterpret_cast<const uint2*>(codes + (mi * (NS / 2) + c) * ATTN_PK_BLOCK_BYTES)[lane];
            #pragma unroll
            for (int qh = 0; qh < 2; qh++) {
                const int n = 2 * c + qh;
                const uint32_t x = qh ? w.y : w.x;
                const float2 f = tab[n * 4 + tq];  // 2^s of queries 8 n + 2 tq and + 1
                const float2 k0 = tcast_fp8x2_decode<HW>((uint16_t)__byte_perm(x, 0u, 0x0020));  // key g: bytes 0, 2
                const float2 k8 = tcast_fp8x2_decode<HW>((uint16_t)__byte_perm(x, 0u, 0x0031));  // key g + 8: bytes 1, 3
                s[mi][n][0] = tcast_mul_rn(k0.x, f.x);
                s[mi][n][1] = tcast_mul_rn(k0.y, f.y);
                s[mi][n][2] = tcast_mul_rn(k8.x, f.x);
                s[mi][n][3] = tcast_mul_rn(k8.y, f.y);
            }
        }
}
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_pk_p(float (&s)[WM][NS][4], const uint8_t* codes, const uint8_t* kept_half, float2* tab, int lane) {
    const AttnTcastSite& S1 = attn_tc_site[ATTN_TC_PROBS];
    if (S1.hw == ATTN_TC_HW_E4M3) attn_tc_pk_p_hw<TCAST_FP8_E4M3>(s, codes, kept_half, tab, S1, lane);
    else attn_tc_pk_p_hw<TCAST_FP8_E5M2>(s, codes, kept_half, tab, S1, lane);
}

// dS = P^ (dP - D) of a query-major tile holding P^ (the dQ kernel's TC form).
template <int WM, int NS>
__device__ __forceinline__ void attn_tc_ds(float (&s)[WM][NS][4], const float (&dp)[WM][NS][4], const float (&D)[WM][2]) {
    attn_frag_each<WM, NS>([&](int mi, int n, int r) { s[mi][n][r] = s[mi][n][r] * (dp[mi][n][r] - D[mi][r >> 1]); });
}
