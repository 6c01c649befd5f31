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
//   2. The cast: unscaled and fixed-scale (pN) types element by element; tile-scaled types (tile X = 2..64, a power of
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
// values under stochastic rounding) calls tcast_quantize through a non-inlined function. The RNE
// family (attn_tc_rne_group / attn_tc_rne_elem, below) is the branch-free path the kernels take
// first for round-even MX and unscaled float types. dev/cuda/attention.cu checks both fast paths
// against tcast_quantize on the host before any kernel. For the OCP FP8 element formats (E4M3 fn,
// E5M2) the register casts round with the hardware conversions instead (attn_tc_hw_pair, chosen per
// site at configure time: AttnTcastSite::hw), bit-identical to attn_tc_rne_elem in every group the
// RNE family accepts; the harness checks that on the GPU (tc_hw_elem_check).
//
// Kept group scales (doc/TCAST.md 6, round 4): a tile-scaled RNE-family site (attention_tcast_keeps) finds each
// group's scale once, in the forward, and keeps its verdict (a byte: attn_tc_rne_byte, layout attn_tc_scale_at) in a
// buffer the caller keeps beside lse (attention_tcast_scales_bytes; the trainer: GPT2::att_scales); the backward
// reads it. The backward's s^ and P^ are the forward's bit for bit, so what it reads is what it would find.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/utils.h"
#include "llmc/kernels/boundary.cuh"
#include "llmc/numerics/tcast.h"
#include "llmc/kernels/tcast/tcast_fp8_hw.cuh"
#include "llmc/kernels/tcast/tcast_stats.cuh"

enum { ATTN_TC_SCORES = 0, ATTN_TC_PROBS = 1 };
// The element formats the hardware converts (cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32, sm_89+): attn_tc_hw_pair.
enum { ATTN_TC_HW_NONE = TCAST_FP8_NONE, ATTN_TC_HW_E4M3 = TCAST_FP8_E4M3, ATTN_TC_HW_E5M2 = TCAST_FP8_E5M2 };

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
    // The RNE family (attn_tc_rne_group / attn_tc_rne_elem), chosen once at configure time:
    int rne;             // 1: the datatype may take the RNE family (else only the general path)
    int frag;            // 1: ... also in the fragment layout (unscaled, or tiles of 32 or 64 keys)
    int32_t rne_c;       // ((23 - mbits) << 23) | 0x400000: bits of 1.5 * 2^(23 - mbits) relative to 2^0
    int32_t rne_emin;    // emin + 127: the exponent field below which the quantum stops shrinking (s = 0)
    uint32_t rne_sign;   // 0x80000000 if zeros keep their sign (signed_zero), else 0
    int32_t rne_kmax;    // bits of max_F 2^s = the group's mc + rne_kmax (attn_tc_rne_maxv)
    // The hardware FP8 element step (attn_tc_hw_pair), chosen once at configure time (attn_tc_hw_format):
    int hw;              // ATTN_TC_HW_E4M3 / _E5M2: the register casts round with cvt (frag sites only), else 0
    int32_t hw_up;       // bits of 2^s = the group's mc + hw_up (-rne_c - (emin << 23))
    int32_t rne_ethr_min;  // the least emin + s + 127 the group step accepts: mbits + 2 for hardware sites, else 0
                           // (attn_tc_hw_pair: what lets the kernels fold the scale and log2(e) into its multiplies)
};

__constant__ AttnTcastSite attn_tc_site[2];

// Per call, by value to the TC kernel instantiations (ignored by the others; attn_tc_args): the random-bit states
// of the two sites (fp8_mix64_(seed_site ^ 0x6A09E667F3BCC909), the `state` of tcast_random_bits),
// the --cast-stats counters of the forward's counting instantiation, and the group scales the forward
// keeps for the backward (attention_tcast_keeps; NULL for a site that keeps none): the forward writes
// them, the dQ and dK/dV kernels read them (the byte layout: attn_tc_scale_at, attn_tc_rne_byte).
// pcode, pflag: the probabilities' codes the forward keeps for the dK/dV kernel (attention_tcast_keeps_p; NULL: not
// kept, see "The probabilities the forward keeps" below).
struct AttnTcastArgs {
    uint64_t state[2];
    TcastDeviceStats* stats[2];
    uint8_t* scales[2];
    uint8_t* pcode;
    unsigned* pflag;
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
    TcastGroupScale g;  // g.s: the exponent attn_tc_quant_fast scales by: the group's (EXP) or the type's fixed
                        // exponent dt.fixed_exp (UNSCALED; 0 unless pN, and tcast_quantize reads dt's own)
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
    if (q.g.mode == TCAST_GROUP_UNSCALED) q.g.s = S->dt.fixed_exp;
    q.maxb = 0;
    q.fast = 0;
    if (q.g.mode == TCAST_GROUP_EXP || q.g.mode == TCAST_GROUP_UNSCALED) q.fast = attn_tc_maxb(S, q.g.s, &q.maxb);
    return q;
}

// The element fast path (see the header comment): x in a group with exponent s (unscaled types: the
// fixed exponent, 0 unless pN) and saturation bound maxb = bits of max_F * 2^s. Returns 1 with *out (and *flags, if
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

// ---- The RNE family: round-to-nearest-even casts of exponent-scaled (MX float / int), unscaled float
// and fixed-scaled (pN) float / int data, without per-element branches. For a group with exponent s and an element x (finite),
// tcast_quantize_exp rounds |x| to the quantum Q = 2^(max(e, emin + s) - mbits), e = floor(log2 |x|),
// RNE, saturates at max_F 2^s and rounds the result to float32 (a no-op when Q >= 2^-149). With
// M = 1.5 * 2^23 * Q (a normal float32 whose ulp is Q and M / Q even), x + M lands in M's binade
// whenever |x| < 2^22 Q (mbits <= 21), so the float32 RNE add rounds x to a multiple of Q with ties
// to even, and (x + M) - M is exact: y = RNE_Q(x) in two adds (no FTZ: tcast_add_rn / tcast_sub_rn),
// with the sign of x and +0 for zero results. Then y is clamped to +-max_F 2^s and the sign bit of x
// ORed in for signed-zero formats (nonzero y already carries it). M's bits come from x's exponent
// field: max(E(x), emin + s + 127) << 23, plus rne_c. The group step (attn_tc_rne_group) checks
// what makes this exact: amax finite, a normal amax (or 0), emin + s + 127 >= 0 (so float32
// subnormal x, E = 0, get the group's smallest quantum, which they have: e <= -127 <= emin + s),
// M below 2^128 for the group's largest element, max_F 2^s normal. Everything else (NaN / Inf,
// tiny or huge groups, other round modes, float-scaled types, M:N, @midmax) takes the general path.
// dev/cuda/attention.cu checks both functions against tcast_group_scale / tcast_quantize on the host.

// The constants of one group for attn_tc_rne_elem.
struct AttnTcRneQ {
    int32_t mc;  // bits of M for the group's smallest quantum: ((emin + s + 127) << 23) + rne_c
    float maxv;  // max_F * 2^s
};

// The group step: amax = bits of the group's max |x| (NaN / Inf patterns included), scaled = the
// type has an exponent scale (else s = the fixed exponent dt.fixed_exp, 0 unless pN: doc/TCAST.md 4d,
// a known s, and amax only screens out NaN / Inf / huge values). Returns 1 with *q set when every
// element of the group may take attn_tc_rne_elem, else 0.
static inline HOST_DEVICE int attn_tc_rne_group(const AttnTcastSite* S, uint32_t amax, int scaled, AttnTcRneQ* q) {
    // Branch-free (selects only): the kernels evaluate it for several groups per lane back to back.
    // An all-zero group keeps s = 0 (every element is +-0: any valid M and max do).
    const int ea = (int)(amax >> 23), live = scaled && amax != 0u;
    int s = ea - 127 - S->dt.number.emax;  // tcast_exp_scale, @max, normal amax
    s = s < S->dt.scale.scale.emin ? S->dt.scale.scale.emin : s;
    s = live ? s : scaled ? 0 : S->dt.fixed_exp;
    const int ethr = S->rne_emin + s, etop = ea > ethr ? ea : ethr, emaxf = (int)(S->maxb0 >> 23) + s;
    // refused: NaN / Inf in the group; a subnormal amax; the NaN group (s above the scale's range);
    // a quantum below emin + s = -127 (hardware sites: emin + s - mbits < -125, rne_ethr_min); M at 2^128 or
    // more; max_F 2^s not a normal float32
    const int ok = amax < TCAST_F32_INF && (!live || (ea != 0 && s <= S->dt.scale.scale.emax)) && ethr >= S->rne_ethr_min &&
                   etop + (S->rne_c >> 23) <= 254 && emaxf >= 1 && emaxf <= 254;
    q->mc = (int32_t)(((uint32_t)ethr << 23) + (uint32_t)S->rne_c);  // (unsigned: no signed overflow when refused)
    q->maxv = tcast_f32_from_bits(S->maxb0 + ((uint32_t)s << 23));
    return ok;
}

// A group's constants from its mc alone (max_F 2^s = bits mc + rne_kmax): what register-tight callers keep.
static inline HOST_DEVICE AttnTcRneQ attn_tc_rne_q(const AttnTcastSite* S, int32_t mc) {
    AttnTcRneQ q;
    q.mc = mc;
    q.maxv = tcast_f32_from_bits((uint32_t)mc + (uint32_t)S->rne_kmax);
    return q;
}

// ---- The group scales the forward keeps for the backward (doc/TCAST.md 6, round 4). A tile-scaled site of the
// RNE family in the fragment layout (attention_tcast_keeps) keeps one byte per (b, h, 32-key half g, query i): the
// verdict of attn_tc_rne_group on the group holding keys 32 g .. 32 g + 31 of row i (a 64-key group: the same
// byte in both halves). Accepted: the exponent field of mc less rne_c's, e = emin + s + 127, in 0 .. 252
// (attn_tc_rne_group accepts only e + 23 - mbits <= 254, and mbits <= 21); refused: 0xFF, and the tile then
// takes the staged path in the backward as it does in the forward. The forward's pass 1 writes the scores'
// bytes, its pass 2 the probabilities', for every group at or below the diagonal (32 g <= i < T); the other
// bytes are never written: readers take the filler 0 (a valid verdict: finite constants) for them, as their
// values are +0 (keys after the query) or reach no output (rows past T, whose zero-filled dO and D multiply them).
// The backward's s^ and P^ are the forward's bit for bit, so the kept verdicts are those it would recompute.
#define ATTN_TC_REFUSED 0xFFu

// The byte of a group step's verdict (ok, q).
static inline HOST_DEVICE uint32_t attn_tc_rne_byte(const AttnTcastSite* S, int ok, AttnTcRneQ q) {
    return ok ? ((uint32_t)q.mc - (uint32_t)S->rne_c) >> 23 : ATTN_TC_REFUSED;
}
// The group's mc from an accepted byte (attn_tc_rne_q then gives its constants).
static inline HOST_DEVICE int32_t attn_tc_rne_mc_of(const AttnTcastSite* S, uint32_t byte) {
    return (int32_t)((byte << 23) + (uint32_t)S->rne_c);
}
// The index of the byte of half g of query i in a site's buffer of B*NH*ceil(T/32)*T bytes, layout (b, h, g, i):
// the queries of one half are consecutive (the dK/dV kernel reads 64 of them with 16-byte copies).
// rbase = (b*NH + h) * T.
static inline HOST_DEVICE size_t attn_tc_scale_at(uint64_t rbase, int T, int g, int i) {
    return (size_t)(rbase * (uint64_t)((T + 31) >> 5) + (uint64_t)g * (uint64_t)T + (uint64_t)i);
}

// ---- The probabilities the forward keeps for the backward (doc/TCAST.md 6, session 17). A probability site whose
// element format the hardware converts (E4M3, E5M2: AttnTcastSite::hw) and that keeps its group scales keeps its
// cast probabilities too: P^ = r 2^s with r an FP8 value and s its group's kept exponent, so one byte, r's code, holds
// P^ exactly. The forward's output pass stores the codes of every 16 x 16 block (query block qi, key block kj) at or
// below the diagonal, kj <= qi < n16 = ceil(T / 16), per (b, h) in the order (kj, qi) (attn_pk_block: the blocks of
// one key block are consecutive, so the dK/dV kernel, which walks the query blocks of its key blocks, reads 1 KB
// runs), 256 bytes a block in the dK/dV kernel's fragment order: lane l of the warp holding keys 16 kj .. 16 kj + 15
// (the M rows of its mma) finds its 8 probabilities at bytes 8 l .. 8 l + 7, as two words, one per 8-query half qh of
// the block: byte 0 key g, query 2 tq; byte 1 key g + 8, query 2 tq; byte 2 key g, query 2 tq + 1; byte 3 key g + 8,
// query 2 tq + 1 (g = l / 4, tq = l % 4, queries counted from 16 qi + 8 qh). Masked probabilities and rows >= T are
// code 0 (+0). The dK/dV kernel then reads P^T instead of recomputing S^T = K Q^T, both casts and the exp: the same
// values bit for bit (the same r and 2^s, the same product). Valid only if every probability group of the call took
// the register cast (its constants are then the kept byte's): a 32-bit flag beside the codes, pflag, which the
// statistics pass sets to 0 and the output pass to 1 in any tile that went the staged way (and the fused forward,
// which keeps no codes, to 1). The dispatch launches two dK/dV kernels that read it (session 18): the codes' kernel,
// attn_bwd_dkv_pk_kernel in the plain kernel's tiling, works where it is 0, the recomputing TC kernel where it is 1
// (each returns at once otherwise).
static inline HOST_DEVICE size_t attn_pk_blocks(int T) {
    const size_t n16 = (size_t)((T + 15) >> 4);
    return n16 * (n16 + 1) / 2;
}
static inline HOST_DEVICE size_t attn_pk_block(int kj, int qi, int n16) {
    return (size_t)kj * (size_t)n16 - (size_t)kj * (size_t)(kj - 1) / 2 + (size_t)(qi - kj);
}
constexpr int ATTN_PK_BLOCK_BYTES = 256;

#ifdef __CUDA_ARCH__
// min / max without .ftz (the build's --use_fast_math would flush subnormal results).
static inline __device__ float attn_tc_fmin_(float a, float b) {
    float r;
    asm("min.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
static inline __device__ float attn_tc_fmax_(float a, float b) {
    float r;
    asm("max.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
#else
static inline float attn_tc_fmin_(float a, float b) { return a < b ? a : b; }
static inline float attn_tc_fmax_(float a, float b) { return a > b ? a : b; }
#endif

// The element step: tcast_quantize of x in a group with constants q (attn_tc_rne_group said yes),
// round mode even; c = rne_c, sign = rne_sign of the site. Branch-free.
// NONNEG (the probabilities: exp2 results and masked +0, never -0): for x with its sign bit clear the
// result y = (x + M) - M is >= +0 (RN is monotone, and an exact zero difference is +0), so the clamp at
// -max_F 2^s and the sign restore (x has none) change nothing and are left out: the same bits, two
// instructions fewer per element. The host self-test checks both forms against tcast_quantize.
template <bool NONNEG = false>
static inline HOST_DEVICE float attn_tc_rne_elem(float x, AttnTcRneQ q, int32_t c, uint32_t sign) {
    const uint32_t xb = tcast_f32_bits(x);
    const int32_t me = (int32_t)((xb & 0x7F800000u) + (uint32_t)c);  // < 2^31 in an accepted group
    const float M = tcast_f32_from_bits((uint32_t)(me > q.mc ? me : q.mc));
    float y = tcast_sub_rn(tcast_add_rn(x, M), M);
    if constexpr (NONNEG) {
        (void)sign;
        return attn_tc_fmin_(y, q.maxv);
    } else {
        y = attn_tc_fmin_(attn_tc_fmax_(y, -q.maxv), q.maxv);
        return tcast_f32_from_bits(tcast_f32_bits(y) | (xb & sign));
    }
}

// ---- The hardware FP8 element step (doc/TCAST.md 6, round 4). For a site whose element format is exactly
// OCP E4M3 (e4m3fn: max 448, no Inf) or E5M2 (IEEE mode, max 57344) and that takes the RNE family in the
// fragment layout (AttnTcastSite::frag), the register casts round a group's elements with the sm_89+
// conversions instead of attn_tc_rne_elem: y = x 2^-s, the FP8 code cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32(y)
// (two values per instruction), back through cvt.rn.f16x2.{e4m3x2,e5m2x2} and cvt.f32.f16, times 2^s.
// 2^s comes from the group's mc alone (bits mc + hw_up; 2^-s = bits (254 << 23) - that), so the group
// step is the RNE family's, unchanged. Bit-identical to attn_tc_rne_elem (= tcast_quantize_exp with round
// mode even) for every finite x of every group attn_tc_rne_group accepts, because there:
//   (a) 2^s and 2^-s are normal float32s: acceptance needs emin + s + 127 >= 0 and max_F 2^s normal, i.e.
//       -121 <= s <= 119 (E4M3), -113 <= s <= 112 (E5M2).
//   (b) y = RN(x 2^-s) (mul.rn.f32, no FTZ) is exact unless |x 2^-s| < 2^-126 or it overflows. Below
//       2^-126 it keeps x's sign and stays below half the smallest FP8 subnormal (2^-10, 2^-17), so
//       both the exact value and y round to a zero of x's sign: tcast's result for the signed-zero formats
//       (E4M3 fn and E5M2 both keep the sign). Overflow to +-Inf only happens in unscaled / fixed-scale
//       groups (scaled groups have |x 2^-s| < 2^(emax+1)) and saturates like any |y| beyond the top.
//   (c) cvt.rn.satfinite rounds y to the format's grid with ties to even, subnormals included, and gives
//       +-max_F for every value that rounds beyond it and for +-Inf: tcast's saturation of section 1.3
//       step 4, which clamps every format at max in every mode (so also E5M2, which has an Inf: finite
//       inputs never become Inf in TensorCast, and the group step refuses NaN / Inf groups). The same
//       conversions are checked against fp8.h's encoder on all 2^32 float patterns in dev/cuda/fp8_quant.cu.
//   (d) The FP8 value widened to float16 and float32 is exact (E5M2 is float16's top byte; E4M3's values
//       2^-9 .. 448 are float16 values), and r 2^s is exact: r is a multiple of 2^(emin - mbits) with at
//       most mbits + 1 significant bits, so r 2^s is a multiple of 2^(emin + s - mbits) >= 2^-130 (accepted
//       groups have emin + s >= -127) with |r 2^s| <= max_F 2^s normal; +-0 stays +-0.
// The staged loop keeps attn_tc_rne_elem (its groups are the rare fallback). 4 instructions per element
// (FMUL, F2FP pack and unpack per pair, HADD2.F32, FMUL) instead of attn_tc_rne_elem's 7 (5 NONNEG).
// Two folds (session 16) take the first and last multiply's place of other instructions, same bits, because the
// group step accepts a hardware site's group only if emin + s + 127 >= mbits + 2 (AttnTcastSite::rne_ethr_min),
// i.e. s >= -125 - emin + mbits (E4M3: s >= -116, E5M2: s >= -109):
//   (e) the scale: the kernels form x = raw * scale (mul, flush-to-zero under --use_fast_math) before the cast. For
//       scale = pre a power of two (HS = 64: 1/8) the register casts instead round RN(raw * (pre 2^-s)) (pre 2^-s
//       normal, exact), whose group amax is RN(amax_raw * pre) (max commutes with a monotone rounding). Where
//       raw * pre is a normal float32 (or 0), x = raw * pre exactly and the two products are equal. Where it is
//       below 2^-126, both |x 2^-s| and |raw pre 2^-s| are at most 2^(-126 - s) <= half the format's smallest
//       subnormal 2^(emin - mbits) (the bound on s): both round to a zero of raw's sign, as (b).
//   (f) log2(e), when the cast scores feed p = exp2(s^ log2(e) - lse2) alone (forward pass 2, dK/dV): fma(r, 2^s
//       log2(e), -lse2) with r the FP8 value is fma(s^, log2(e), -lse2) bit for bit: 2^s log2(e) is exact (a
//       power of two times a float32, normal), fma rounds the exact product plus -lse2 once either way, and no
//       nonzero s^ is subnormal (the smallest, 2^(emin - mbits + s) >= 2^-125), so the flush-to-zero of the
//       fma's input (--use_fast_math) never applies to it. r 2^s is then never formed (attn_tc_frag_round's FIN).
// dev/cuda/attention.cu (tc_hw_elem_check) compares it with attn_tc_rne_elem and tcast_quantize on the GPU.

// Host / device: the hardware format of a site's datatype (ATTN_TC_HW_*: tcast_fp8_of's, for the RNE family in the
// fragment layout only).
static inline HOST_DEVICE int attn_tc_hw_format(const TcastDataType* dt, int frag) {
    return frag ? (int)tcast_fp8_of(dt->number) : ATTN_TC_HW_NONE;
}

// y0, y1 <- the float32 values of their FP8 codes (HW: E4M3 or E5M2, RNE with saturation), which it returns (y0's in
// the lower byte): the cast kernels' one primitive, tcast_fp8x2_round (llmc/kernels/tcast/tcast_fp8_hw.cuh) in its two
// halves.
template <int HW>
static inline __device__ uint32_t attn_tc_hw_cvt(float& y0, float& y1) {
    static_assert(HW == ATTN_TC_HW_E4M3 || HW == ATTN_TC_HW_E5M2, "E4M3 or E5M2");
    constexpr int F = HW == ATTN_TC_HW_E4M3 ? TCAST_FP8_E4M3 : TCAST_FP8_E5M2;
    const uint16_t q = tcast_fp8x2_encode<F>(make_float2(y0, y1));
    const float2 r = tcast_fp8x2_decode<F>(q);
    y0 = r.x;
    y1 = r.y;
    return q;
}

// 2^-s and 2^s of a group with constant mc (accepted by attn_tc_rne_group); up = the site's hw_up.
static inline HOST_DEVICE float attn_tc_hw_down(int32_t mc, int32_t up) { return tcast_f32_from_bits(0x7F000000u - ((uint32_t)mc + (uint32_t)up)); }
static inline HOST_DEVICE float attn_tc_hw_up(int32_t mc, int32_t up) { return tcast_f32_from_bits((uint32_t)mc + (uint32_t)up); }

// The first half of the element step of two elements x0, x1 (of groups with constants mc0, mc1: attn_tc_rne_group
// accepted them) with the hardware format HW; up = the site's hw_up: x <- r, the FP8 value of x pre 2^-s (pre: 1, or
// the power-of-two scale of fold (e) above); returns the two codes (x0's in the lower byte). Device only (sm_89+),
// branch-free. attn_tc_hw_pair_dn: the same with the factors pre 2^-s given (dn0, dn1).
template <int HW>
static inline __device__ uint32_t attn_tc_hw_pair_dn(float& x0, float& x1, float dn0, float dn1) {
    x0 = tcast_mul_rn(x0, dn0);  // y = x pre 2^-s
    x1 = tcast_mul_rn(x1, dn1);
    return attn_tc_hw_cvt<HW>(x0, x1);
}
template <int HW>
static inline __device__ uint32_t attn_tc_hw_pair_r(float& x0, float& x1, int32_t mc0, int32_t mc1, int32_t up, float pre) {
    return attn_tc_hw_pair_dn<HW>(x0, x1, attn_tc_hw_down(mc0, up) * pre, attn_tc_hw_down(mc1, up) * pre);
}
// The whole element step: x <- r 2^s.
template <int HW>
static inline __device__ void attn_tc_hw_pair(float& x0, float& x1, int32_t mc0, int32_t mc1, int32_t up) {
    attn_tc_hw_pair_r<HW>(x0, x1, mc0, mc1, up, 1.f);
    x0 = tcast_mul_rn(x0, attn_tc_hw_up(mc0, up));  // r 2^s
    x1 = tcast_mul_rn(x1, attn_tc_hw_up(mc1, up));
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
        const TcastNumberSpec* f = &dt->number;
        const bool scale_ok = !dt->has_scale || (S.expscale && dt->scale_mode == TCAST_SCALE_MAX);
        S.rne = dt->round == TCAST_ROUND_EVEN && dt->sparse_n == 0 && S.maxb0_ok && scale_ok && f->mbits >= 0 &&
                f->mbits <= 21 && f->emin >= -127;
        S.frag = S.rne && (S.tile == 1 || S.tile == 32 || S.tile == 64);
        S.rne_c = (int32_t)(((uint32_t)(23 - f->mbits) << 23) | 0x400000u);
        S.rne_emin = f->emin + 127;
        S.rne_sign = f->signed_zero ? 0x80000000u : 0u;
        S.rne_kmax = (int32_t)(S.maxb0 - (uint32_t)S.rne_c - ((uint32_t)S.rne_emin << 23));
        S.hw = attn_tc_hw_format(dt, S.frag);
        S.hw_up = (int32_t)(0u - (uint32_t)S.rne_c - ((uint32_t)f->emin << 23));  // mc = ((emin + s + 127) << 23) + rne_c
        S.rne_ethr_min = S.hw != ATTN_TC_HW_NONE ? f->mbits + 2 : 0;
    }
    return S;
}

// 1 if the attention kernels can cast an attention site to dt for head size HS (HS <= 0: skip the
// head-size test); else 0 with the reason in why (n bytes).
static inline int attention_tcast_supported(int HS, const TcastDataType* dt, char* why, size_t n) {
    if (HS > 0 && HS != 64)
        return tcast_fail_(why, n, "the attention casts run in the tensor-core kernels, instantiated for head size 64 (head size %d)", HS) + 1;
    if (dt->has_scale && dt->scale.tile <= 0)
        return tcast_fail_(why, n, "per-tensor and channel scales would need the whole T x T matrix; use an unscaled, fixed-scale (pN) or tile-scaled datatype") + 1;
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
// are the datatypes of the attn_scores / attn_probs sites, NULL = not cast (both NULL: plain attention,
// cuDNN's in a cuDNN build, else the plain BF16 kernels; attention.cuh attention_uses_cudnn). Stops with
// `error:` for a datatype the kernels cannot take (the head size is checked at the first launch;
// tcast_attention_check (llmc/modes/tcast/mode.cuh) checks everything before the GPU is touched).
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

// True when some attention site is cast (the launchers then run the TC instantiations, and a cuDNN build
// its built-in kernels instead of cuDNN); constant false in the builds without them.
static inline bool attention_tcast_active() { return kModeAttentionCasts && (attn_tc_host[0].on || attn_tc_host[1].on); }
// True when the probabilities are cast (the forward then runs its two-pass mode).
static inline bool attention_tcast_probs() { return attn_tc_host[1].on != 0; }

// True when site k (ATTN_TC_SCORES / ATTN_TC_PROBS) keeps its group scales from the forward for the backward:
// cast, tile-scaled (tiles of 32 or 64 keys) and of the RNE family in the fragment layout (AttnTcastSite::frag).
static inline bool attention_tcast_keeps(int k) { return attn_tc_host[k].on && attn_tc_host[k].frag && attn_tc_host[k].tile > 1; }

// Whether the probabilities' codes are kept as well (see "The probabilities the forward keeps"): on by default where
// the probability site keeps its scales and its elements are E4M3 or E5M2; attention_tcast_set_keep_probs(false)
// (dev/cuda/attention.cu, to check and time the recomputing dK/dV kernel) turns it off. Set it before sizing buffers.
static bool attn_tc_keep_probs = true;
static inline void attention_tcast_set_keep_probs(bool on) { attn_tc_keep_probs = on; }
static inline bool attention_tcast_keeps_p() {
    return attn_tc_keep_probs && attention_tcast_keeps(ATTN_TC_PROBS) && attn_tc_host[ATTN_TC_PROBS].hw != ATTN_TC_HW_NONE;
}

// Bytes of one site's group scales for a (B, NH, T) attention call: one byte per query and 32-key half.
static inline size_t attention_tcast_site_scale_bytes(int B, int T, int NH) {
    return (size_t)B * NH * (size_t)((T + 31) / 32) * (size_t)T;
}
// Bytes of the probabilities' codes (attention_tcast_keeps_p) of a (B, NH, T) call: 256 per block and head.
static inline size_t attention_tcast_pcode_bytes(int B, int T, int NH) {
    return (size_t)B * NH * attn_pk_blocks(T) * ATTN_PK_BLOCK_BYTES;
}
// Bytes of the group scales of the sites that keep theirs (the scores' part first).
static inline size_t attn_tc_sites_scale_bytes(int B, int T, int NH) {
    return ((size_t)attention_tcast_keeps(ATTN_TC_SCORES) + (size_t)attention_tcast_keeps(ATTN_TC_PROBS)) *
           attention_tcast_site_scale_bytes(B, T, NH);
}
// Where the flag and the codes start in `scales`: after the sites' group scales, 16-byte aligned.
static inline size_t attn_tc_pk_offset(int B, int T, int NH) { return (attn_tc_sites_scale_bytes(B, T, NH) + 15) & ~(size_t)15; }
// Bytes of the buffer `scales` of attention_forward / attention_backward for a (B, NH, T) call under the current
// configuration (attention_tcast_configure): one site's bytes per site that keeps its scales, then, where the
// probabilities' codes are kept (attention_tcast_keeps_p), 16 bytes (the flag) and the codes; 0 when nothing is kept
// (then scales may be NULL). The buffer is written by the forward and read by the backward of the same call. It grows
// with B*T and with T (the codes as B T^2 / 2: 409 MiB a layer at d12, B = 64, T = 1024).
static inline size_t attention_tcast_scales_bytes(int B, int T, int NH) {
    if (!attention_tcast_keeps_p()) return attn_tc_sites_scale_bytes(B, T, NH);
    return attn_tc_pk_offset(B, T, NH) + 16 + attention_tcast_pcode_bytes(B, T, NH);
}

// The kernels' per-call arguments: the random-bit states of the call's seed, the --cast-stats counters (count) and
// each keeping site's part of scales (attention_tcast_scales_bytes(B, T, NH) bytes: the scores' part first). Stops
// with `error:` when a site keeps its scales and scales is NULL, or one site's part would be 4 GiB or more.
static inline AttnTcastArgs attn_tc_args(uint64_t seed, bool count, uint8_t* scales, int B, int T, int NH) {
    AttnTcastArgs a;
    uint8_t* next = scales;
    for (int k = 0; k < 2; k++) {
        a.state[k] = attn_tc_state(attn_tc_site_seed(seed, k));
        a.stats[k] = count ? attn_tc_stats_dev[k] : NULL;
        a.scales[k] = NULL;
        if (!attention_tcast_keeps(k)) continue;
        const char* site = BOUNDARY_SITE_NAMES[k == ATTN_TC_SCORES ? ATTN_SCORES : ATTN_PROBS];
        if (!scales)
            die("attention: --cast %s=%s keeps its group scales from the forward for the backward, and the call passed no "
                "buffer for them (attention_tcast_scales_bytes)", site, attn_tc_host[k].dt.name);
        if (attention_tcast_site_scale_bytes(B, T, NH) > 0xFFFFFFFFull)  // (the query-major kernels index them in 32 bits)
            die("attention: --cast %s=%s: B=%d NH=%d T=%d needs %zu bytes of group scales per call, 4 GiB or more", site,
                attn_tc_host[k].dt.name, B, NH, T, attention_tcast_site_scale_bytes(B, T, NH));
        a.scales[k] = next;
        next += attention_tcast_site_scale_bytes(B, T, NH);
    }
    a.pcode = NULL;
    a.pflag = NULL;
    if (attention_tcast_keeps_p()) {  // (scales is not NULL: the probability site keeps its scales)
        uint8_t* p = scales + attn_tc_pk_offset(B, T, NH);
        a.pflag = reinterpret_cast<unsigned*>(p);
        a.pcode = p + 16;
    }
    return a;
}
static inline bool attn_tc_counting() { return attn_tc_stats_dev[0] != NULL || attn_tc_stats_dev[1] != NULL; }
