// attention_tcast.cuh - the TensorCast attention sites (doc/TCAST.md 5.1) for llmc/kernels/attention/attention.cuh:
// the run-time configuration (which datatype casts the scores, which the probabilities), the scalar
// pieces every attention kernel shares (group scale, element quantization, random bits) and the host
// API (attention_tcast_configure & co.); the casts of the shared-memory tiles the tensor-core
// kernels stage their scores in are in attention_tcast_cast.cuh. Included in every build, and the host API
// exists in every build, but only a build whose mode sets kModeAttentionCasts (TCAST=1) instantiates
// the kernels that use any of it (attention.cuh, attn_forward_tc_dispatch): elsewhere
// attention_tcast_active() is constant false and everything here is dead code.
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
#include "llmc/core/utils.h"
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
// Host API (every build; called only where the mode sets kModeAttentionCasts: llmc/modes/tcast/mode.cuh)

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

// True when some attention site is cast (the launchers then run the TC instantiations); constant
// false in the builds without them.
static inline bool attention_tcast_active() { return kModeAttentionCasts && (attn_tc_host[0].on || attn_tc_host[1].on); }
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
