// tcast_cast_elem.cuh - the launch-wide constants of the TensorCast cast kernels (TcastKernelArgs, passed by
// value to every kernel) and the two exact element fast paths that read them, for the MX / BFP element
// formats (exponent-scaled, unscaled or fixed-scaled float and int data with at most 22 mantissa bits; a
// fixed scale pN is an unscaled cast whose exponent is N instead of 0, doc/TCAST.md 4d):
//   - the exponent path (tcast_exp_param, tcast_exp_elem): section 1.3's rounding done directly on x's
//     float32 bit pattern with a per-group window, every round mode, with flags for the statistics;
//   - the round-to-nearest-even path (tcast_rne_param, tcast_rne_elem, tcast_rne_pair_step): the float32
//     "magic add" for @even, or for exponent-scaled e4m3fn and e5m2 elements the hardware FP8 conversions
//     (tcast_fp8x2_round, tcast_fp8_hw.cuh), chosen once per launch (TcastKernelArgs::rne_fp8).
// Both are bit-identical to tcast_quantize (llmc/numerics/tcast_quant.h) inside the conditions stated at
// their functions; outside them they call tcast_quantize (out of line on the device). HOST_DEVICE, with the
// device's flush-to-zero emulated on the host, so that host tests can compare them with tcast_quantize.
// Part of the GPU cast, llmc/kernels/tcast/tcast_cast.cuh (whose header comment describes the design).
#pragma once

#include <limits.h>
#include <stdint.h>
#include <string.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/numerics/tcast.h"
#include "llmc/kernels/tcast/tcast_fp8_hw.cuh"  // tcast_fp8x2_round: the RNE path's element step for e4m3fn / e5m2

#define TCAST_CODE_NAN INT_MIN            // TcastExpParam::code of a NaN group

// ------------------------------------------------------------------------------------------------
// Launch-wide constants (plain data, passed by value to every cast kernel)

typedef struct {
    TcastDataType dt;  // the data type (the general path and every group scale use it directly)
    uint64_t seed;     // stochastic rounding seed
    int stochastic;    // dt.round == TCAST_ROUND_STOCHASTIC
    // The exponent fast path, for element format F (float, or an int's fixed-point view):
    int fast;          // 1 if F has at most 22 mantissa bits and an exponent scale, a fixed scale or none
    int d0;            // 23 - mbits: significand bits of x dropped in F's normal range
    int emin, emax, mbits;
    uint32_t max_frac; // float32 fraction bits of max_F
    uint32_t zsign;    // 0x80000000 if a zero result keeps the input's sign (ieee, fn), else 0
    // Round mode as constants of one formula (tcast_exp_elem): round up iff
    // (int)(rem + (lsb & ev) + nbias) > (int)(U >> (32 - d)), U = 0x7FFFFFFF or the random bits.
    uint32_t ev;
    int32_t nbias;
    // The RNE fast path (tcast_rne_elem), valid when rne = 1:
    int rne;           // @even, exponent path, mbits <= 21, emin - mbits >= -125, emax - mbits <= 103
    uint32_t rne_emin; // float32 bits of 2^emin: the binade of F's subnormal quantum
    uint32_t rne_c;    // bits(C) = bits(2^e) + rne_c for |y| in binade e: C = 1.5 * 2^(e - mbits + 23)
    uint32_t rne_max;  // float32 bits of max_F
    uint32_t rne_top;  // unscaled / fixed: float32 bits of 2^(emax + 1), |y| beyond it are clamped to it (they saturate);
                       // scaled: 0xFFFFFFFF (a group member's |y| is below 2^(emax + 1) already)
    int rne_fp8;       // TcastFp8: the RNE path rounds runs of an exponent-scaled group with tcast_fp8x2_round (rne = 1, an
                       // exponent scale, F exactly e4m3fn / e5m2), or TCAST_FP8_NONE: with tcast_rne_elem's float32
                       // arithmetic (same bits)
    int rne_group;     // 1: rne, and an exponent scale of mode @max: the group step may be tcast_rne_group_fast's
} TcastKernelArgs;

static inline TcastKernelArgs tcast_kernel_args(const TcastDataType& dt, uint64_t seed) {
    TcastKernelArgs k;
    memset(&k, 0, sizeof(k));
    k.dt = dt;
    k.seed = seed;
    k.stochastic = dt.round == TCAST_ROUND_STOCHASTIC;
    const TcastNumberSpec& f = dt.number;
    const bool exp_scale = dt.has_scale ? dt.scale.scale.kind == TCAST_KIND_EXPONENT : (f.kind == TCAST_KIND_FLOAT || dt.fixed);
    k.fast = (f.kind == TCAST_KIND_FLOAT || f.kind == TCAST_KIND_INT) && exp_scale && f.mbits <= 22;
    k.mbits = f.mbits;
    k.d0 = 23 - f.mbits;
    k.emin = f.emin;
    k.emax = f.emax;
    if (k.fast) k.max_frac = (f.max_mant - (1u << f.mbits)) << (23 - f.mbits);
    k.zsign = f.signed_zero ? 0x80000000u : 0u;
    switch (dt.round) {
    case TCAST_ROUND_EVEN: k.ev = 1u; k.nbias = -1; break;        // rem + lsb > half
    case TCAST_ROUND_NEAREST: k.ev = 0u; k.nbias = 0; break;      // rem >= half
    case TCAST_ROUND_ZERO: k.ev = 0u; k.nbias = INT_MIN; break;   // never
    default: k.ev = 0u; k.nbias = 0; break;                       // rem > floor(u / 2^(32-d))
    }
    k.rne = k.fast && dt.round == TCAST_ROUND_EVEN && f.mbits <= 21 && f.emin - f.mbits >= -125 && f.emax - f.mbits <= 103;
    if (k.rne) {
        k.rne_emin = (uint32_t)(f.emin + 127) << 23;
        k.rne_c = ((uint32_t)(23 - f.mbits) << 23) + 0x400000u;
        k.rne_max = ((uint32_t)(f.emax + 127) << 23) | k.max_frac;
        k.rne_top = dt.has_scale ? 0xFFFFFFFFu : (uint32_t)(f.emax + 128) << 23;
        // only exponent-scaled groups can be finite as a whole (TcastRneParam::ok = 2), which the kernels' runs need
        k.rne_fp8 = dt.has_scale && tcast_fp8_hw_enabled() ? tcast_fp8_of(f) : TCAST_FP8_NONE;
        k.rne_group = dt.has_scale && dt.scale.scale.kind == TCAST_KIND_EXPONENT && dt.scale_mode == TCAST_SCALE_MAX;
    }
    return k;
}

// ------------------------------------------------------------------------------------------------
// Exponent fast path (section 4a and the unscaled 1.3): x = m * 2^(E - 150), m the 24-bit significand
// of a normal float32 x (biased exponent E). For a group scale 2^s the quantum of F at |y| = |x| / 2^s
// is 2^(max(E - 127 - s, emin) - mbits), so rounding drops d = d0 + max(0, cd' - E) low bits of m
// (cd' = emin + s + 127) - tcast_quantize_exp's shift - and the result is x's pattern with those bits
// rounded away (d <= 23), or 0 / the smallest quantum (24 <= d <= 31, |y| below F's quantum).
// The window [lo, lo + span) of |x| patterns where this is exact: d <= 31, x normal and finite, and a
// group whose smallest quantum and max_F * 2^s are normal float32 numbers (so the final rounding to
// float32 of 1.3 / 4a changes nothing). span = 0: the whole group takes tcast_quantize. Unscaled groups
// take s = the type's fixed scale exponent (0 unless pN): 4a's element step with a known s, no pre-pass.

typedef struct {
    uint32_t lo, span;  // the window of |x| bit patterns
    uint32_t maxbits;   // float32 bits of max_F * 2^s (saturation)
    int cd;             // emin + s + 127 + d0: d = max(d0, cd - E)
    int code;           // s (unscaled: the fixed exponent, 0 unless pN), or TCAST_CODE_NAN: the group scale for tcast_quantize
} TcastExpParam;

static inline HOST_DEVICE TcastExpParam tcast_exp_param(const TcastKernelArgs& k, const TcastGroupScale& g) {
    TcastExpParam p;
    const int s = g.mode == TCAST_GROUP_EXP ? g.s : g.mode == TCAST_GROUP_UNSCALED ? k.dt.fixed_exp : 0;
    p.code = g.mode == TCAST_GROUP_NAN ? TCAST_CODE_NAN : s;
    const int c = k.emin + s + 127;   // biased float32 exponent of 2^(emin + s)
    const int eq = c - k.mbits;       // ... of F's smallest quantum 2^(emin - mbits + s)
    const int ex = k.emax + s + 127;  // ... of 2^(emax + s)
    const bool ok = k.fast && (g.mode == TCAST_GROUP_EXP || g.mode == TCAST_GROUP_UNSCALED) && eq >= 1 && ex <= 254;
    p.cd = c + k.d0;
    p.maxbits = ok ? ((uint32_t)ex << 23) | k.max_frac : 0u;
    p.lo = ok ? (uint32_t)(eq - 8 > 1 ? eq - 8 : 1) << 23 : 0u;  // d <= 31 <=> E >= eq - 8
    p.span = ok ? 0x7F800000u - p.lo : 0u;
    return p;
}

// The group scale a TcastExpParam stands for (the exact path's input).
static inline HOST_DEVICE TcastGroupScale tcast_exp_group(const TcastKernelArgs& k, const TcastExpParam& p) {
    TcastGroupScale g;
    g.mode = p.code == TCAST_CODE_NAN ? TCAST_GROUP_NAN : (k.dt.has_scale ? TCAST_GROUP_EXP : TCAST_GROUP_UNSCALED);
    g.s = p.code == TCAST_CODE_NAN ? 0 : p.code;
    g.scale = 0.0f;
    g.zero = 0.0f;
    g.izero = 0;
    g.hist = -1;
    return g;
}

#ifdef __CUDACC__
// tcast_quantize out of line: the exact path of rare elements (exponent path) and every element of the
// general path. A call keeps it from being inlined at each of a kernel's 32 element sites, which would
// cost registers (occupancy) on the hot path and minutes of compile time. dt: a __grid_constant__
// kernel parameter, addressed in place. Returns (float32 bits, TCAST_FLAG_* flags).
static __device__ __noinline__ uint2 tcast_quantize_slow_(const TcastDataType* dt, TcastGroupScale g, uint32_t b, uint32_t u) {
    unsigned f = 0u;
    const float r = tcast_quantize(dt, &g, tcast_f32_from_bits(b), u, &f);
    return make_uint2(tcast_f32_bits(r), f);
}
#endif

// One element: float32 bits b of x -> float32 bits of the cast (tcast_quantize's result exactly).
// u: the element's random bits (read with @stochastic only); flags (may be NULL): section 4.5.
static inline HOST_DEVICE uint32_t tcast_exp_elem(const TcastKernelArgs& k, const TcastExpParam& p, uint32_t b, uint32_t u,
                                                  unsigned* flags) {
    const uint32_t a = b & 0x7FFFFFFFu, sign = b ^ a;
    if (a - p.lo < p.span) {
        const int E = (int)(a >> 23);
        const int d = k.d0 > p.cd - E ? k.d0 : p.cd - E;  // 1 .. 31
        const uint32_t mask = (1u << d) - 1u;
        const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
        const uint32_t rem = m & mask;
        // U >> (32 - d): 2^(d-1) - 1 for the deterministic modes; floor(u / 2^(32-d)) for stochastic,
        // and rem > floor(u / 2^(32-d)) <=> u < rem * 2^(32-d), section 1.4's exact comparison
        const uint32_t thr = (k.stochastic ? u : 0x7FFFFFFFu) >> (32 - d);
        const bool up = (int32_t)(rem + ((m >> d) & k.ev) + (uint32_t)k.nbias) > (int32_t)thr;
        uint32_t r;
        unsigned f = 0u;
        if (d <= 23) {  // the quantum lies inside x's significand: round the pattern itself
            r = (a & ~mask) + (up ? mask + 1u : 0u);  // a carry into the exponent is the next binade
            if (r > p.maxbits) {
                r = p.maxbits;
                f = TCAST_FLAG_SATURATED;
            }
        } else {  // |y| below F's quantum q: 0 or q
            r = up ? (uint32_t)(p.cd - 23) << 23 : 0u;
            if (!r) f = TCAST_FLAG_FLUSHED;
        }
        if (flags) *flags = f;
        return r ? r | sign : sign & k.zsign;
    }
#ifdef __CUDA_ARCH__
    const uint2 r = tcast_quantize_slow_(&k.dt, tcast_exp_group(k, p), b, u);
    if (flags) *flags = r.y;
    return r.x;
#else
    const TcastGroupScale g = tcast_exp_group(k, p);
    return tcast_f32_bits(tcast_quantize(&k.dt, &g, tcast_f32_from_bits(b), u, flags));
#endif
}

// Round-to-nearest-even fast path (TcastQRne: @even without statistics, k.rne types - the MX / BFP
// element formats fp8, fp6, fp4, int8, int4 and the like). A group qualifies (ok) when its exponent
// window is open (scale 2^s, or unscaled: s = the fixed exponent, 0 unless pN), -126 <= s <= 126 and F's
// smallest quantum times 2^s is at least 2^-125. Then for a finite member x (|x| < 2^(emax + s + 1);
// unscaled y, which may overflow to Inf, are clamped to 2^(emax + 1), where everything saturates):
//   y = x * 2^-s      exact, except that the device's flush-to-zero (--use_fast_math) turns |y| < 2^-126
//                     and float32-subnormal x into signed zeros - values below half of F's smallest
//                     quantum (emin - mbits >= -125 and the 2^-125 condition), which round to zero anyway;
//   r = (y + C) - C   with C = 1.5 * 2^23 * q, q = 2^(max(e, emin) - mbits) the quantum of F at |y|'s
//                     binade e: |y| < 2^(mbits+1) q <= 2^22 q keeps y + C in C's binade, whose spacing is
//                     q, so the float32 add rounds y to a multiple of q, ties to the even multiple (C is
//                     an even multiple of q): section 1.3's `even` exactly; the subtraction is exact;
//   min(|r|, max_F), the sign of x back (a zero result: per F's signed-zero rule), times 2^s (exact: a
//                     non-zero result is >= 2^-125).
// Elements or groups outside these conditions (NaN groups, Inf in unscaled casts, groups near the ends
// of the float32 range) take tcast_quantize out of line. Three float32 operations and ~7 integer ones
// per element, against ~25 integer ones for tcast_exp_elem.
// For F = e4m3fn or e5m2 with an exponent scale (k.rne_fp8) the middle steps can be the hardware
// conversion instead (tcast_rne_pair_step): y = x * 2^-s as above, r = tcast_fp8x2_round(y) for two
// elements at once (round to nearest even on F's grid, saturation at +-max, a zero keeps y's sign, which
// is x's: section 1.3 for every finite y, see tcast_fp8_hw.cuh), times 2^s: no clamp and no sign step,
// since the conversion does both. Same ok groups, same finite elements, same bits.
// An ok group with an exponent scale holds finite elements only (4.3 makes a group with a NaN or an Inf a
// NaN group, never ok): ok = 2 says so, and the kernels then cast its packets without per-element checks
// (TcastQRne, tcast_cast_run); ok = 1 (unscaled, fixed scale) still checks each element.
typedef struct {
    float down, up;  // 2^-s, 2^s (ok groups)
    int ok;          // 0: tcast_quantize; 1: the fast path for finite elements; 2: the same, every element finite
    int code;        // TcastExpParam::code: the group scale for tcast_quantize
} TcastRneParam;

static inline HOST_DEVICE TcastRneParam tcast_rne_param(const TcastKernelArgs& k, const TcastGroupScale& g) {
    const int s = g.mode == TCAST_GROUP_EXP ? g.s : g.mode == TCAST_GROUP_UNSCALED ? k.dt.fixed_exp : 0;
    TcastRneParam p;
    p.code = g.mode == TCAST_GROUP_NAN ? TCAST_CODE_NAN : s;
    p.ok = k.rne && (g.mode == TCAST_GROUP_EXP || g.mode == TCAST_GROUP_UNSCALED) && s >= -126 && s <= 126 &&
           k.emin + s + 127 - k.mbits >= 2 && k.emax + s + 127 <= 254;
    if (p.ok && g.mode == TCAST_GROUP_EXP) p.ok = 2;
    p.down = tcast_f32_from_bits(p.ok ? (uint32_t)(127 - s) << 23 : 0u);
    p.up = tcast_f32_from_bits(p.ok ? (uint32_t)(127 + s) << 23 : 0u);
    return p;
}

// The group step of the RNE path for an exponent scale of mode @max (k.rne_group), branch-free (selects only, so that
// a caller with several groups per thread can interleave them): tcast_rne_param(k, g) with g the group scale of
// 4.3 / 4a (tcast_exp_scale: s = floor(log2 amax) - emax, at least the scale's emin; a NaN group above its emax)
// wherever that is a fast group (ok = 2) and amax is a normal float32; else ok = 0 (down, up 0): a zero, subnormal,
// Inf or NaN amax, the NaN group, or a scale the RNE path refuses, for which the caller takes the general steps
// (TcastQRne::scale and param). amax: the bits of the group's largest |x| (sign clear: TcastQExp's accumulator).
// dev/cuda/tcast.cu (check_rne_group_fast, host side) checks it against the general steps.
static inline HOST_DEVICE TcastRneParam tcast_rne_group_fast(const TcastKernelArgs& k, uint32_t amax) {
    const int ea = (int)(amax >> 23);
    int s = ea - 127 - k.emax;
    s = s < k.dt.scale.scale.emin ? k.dt.scale.scale.emin : s;
    const bool ok = k.rne_group && ea >= 1 && ea <= 254 && s <= k.dt.scale.scale.emax && s >= -126 && s <= 126 &&
                    k.emin + s + 127 - k.mbits >= 2 && k.emax + s + 127 <= 254;
    TcastRneParam p;
    p.code = s;
    p.ok = ok ? 2 : 0;
    p.down = tcast_f32_from_bits(ok ? (uint32_t)(127 - s) << 23 : 0u);
    p.up = tcast_f32_from_bits(ok ? (uint32_t)(127 + s) << 23 : 0u);
    return p;
}

// float32 operations as the device runs them under --use_fast_math (.rn.ftz, never contracted into an
// FMA); the host versions emulate the flush to zero, for host tests of tcast_rne_elem.
#ifndef __CUDA_ARCH__
static inline float tcast_ftz_(float v) {
    const uint32_t u = tcast_f32_bits(v);
    return (u & 0x7F800000u) == 0u ? tcast_f32_from_bits(u & 0x80000000u) : v;
}
#endif
static inline HOST_DEVICE float tcast_mul_ftz_(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    volatile float r = tcast_ftz_(a) * tcast_ftz_(b);
    return tcast_ftz_(r);
#endif
}
static inline HOST_DEVICE float tcast_add_ftz_(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    volatile float r = tcast_ftz_(a) + tcast_ftz_(b);
    return tcast_ftz_(r);
#endif
}
static inline HOST_DEVICE float tcast_sub_ftz_(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    volatile float r = tcast_ftz_(a) - tcast_ftz_(b);
    return tcast_ftz_(r);
#endif
}

// One finite element of an ok group: float32 bits b -> float32 bits of the cast.
static inline HOST_DEVICE uint32_t tcast_rne_elem(const TcastKernelArgs& k, const TcastRneParam& p, uint32_t b) {
    uint32_t ya = tcast_f32_bits(tcast_mul_ftz_(tcast_f32_from_bits(b), p.down)) & 0x7FFFFFFFu;  // |y|
    ya = ya < k.rne_top ? ya : k.rne_top;
    const uint32_t e = (ya & 0x7F800000u) > k.rne_emin ? (ya & 0x7F800000u) : k.rne_emin;
    const float c = tcast_f32_from_bits(e + k.rne_c);
    uint32_t ra = tcast_f32_bits(tcast_sub_ftz_(tcast_add_ftz_(tcast_f32_from_bits(ya), c), c));
    ra = ra < k.rne_max ? ra : k.rne_max;
    const uint32_t keep = ra ? 0x80000000u : k.zsign;  // x's sign; a zero result keeps it only in ieee / fn
    return tcast_f32_bits(tcast_mul_ftz_(tcast_f32_from_bits((b & keep) | ra), p.up));
}

// Two finite elements of an ok group (tcast_rne_param): float32 bits b0, b1 -> float32 bits of their casts
// (tcast_quantize's results exactly), with the element step F: TCAST_FP8_NONE the float32 rounding of
// tcast_rne_elem (every k.rne type), TCAST_FP8_E4M3 / _E5M2 the hardware conversion (valid when F is the element
// format, tcast_fp8_of(k.dt.number); the kernels take it where k.rne_fp8 == F).
// The kernels choose F once per run of pairs (TcastQRne::with_step, tcast_cast_device.cuh).
template <int F>
static inline HOST_DEVICE void tcast_rne_pair_step(const TcastKernelArgs& k, const TcastRneParam& p, uint32_t& b0, uint32_t& b1) {
    if constexpr (F == TCAST_FP8_NONE) {
        b0 = tcast_rne_elem(k, p, b0);
        b1 = tcast_rne_elem(k, p, b1);
    } else {
        const float2 y = make_float2(tcast_mul_ftz_(tcast_f32_from_bits(b0), p.down), tcast_mul_ftz_(tcast_f32_from_bits(b1), p.down));
        const float2 r = tcast_fp8x2_round<F>(y);
        b0 = tcast_f32_bits(tcast_mul_ftz_(r.x, p.up));
        b1 = tcast_f32_bits(tcast_mul_ftz_(r.y, p.up));
    }
}
