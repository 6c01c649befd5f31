/*
 * q115.h - Q1.15 (and Q1.31) fixed-point quantize / dequantize for the SF16 mode, host and device.
 *
 * Source: the SF16 seed document (shared/seeds/sf16_implementation_details.txt, outside this
 * repo), section 2 "Core Numeric Format (Q1.15)"; section 4.1 for simulate_q131. What the seed
 * fixes: scale 2^15 = 32768, integer range [-32768, 32767], Q115_OVERFLOW_THRESHOLD =
 * 0.999969482421875, float_to_q115 clamps to [-threshold, +threshold], and
 * simulate_q115(x) = q115_to_float(float_to_q115(x)). The seed's code blocks were lost; everything
 * else below (tie rule, NaN/Inf, the Q1.31 details) is this project's decision, stated per function.
 *
 * Format. A Q1.15 code q is a signed 16-bit integer meaning the real value q / 2^15: 1 sign bit and
 * 15 fraction bits, range [-1.0, 1 - 2^-15], uniform step 2^-15 (about 3.05e-5). Q1.31 is the same
 * with 31 fraction bits (step 2^-31).
 *
 * Decisions (all functions):
 *   - Rounding: to nearest, ties to even (an exact half-step goes to the even code).
 *   - Clamp: symmetric, to +-Q115_OVERFLOW_THRESHOLD (= 32767/32768) as the seed says. So the code
 *     -32768 (-1.0) is a valid Q1.15 code that q115_to_float decodes, but float_to_q115 never
 *     produces it: -1.0 and below become -32767.
 *   - NaN: float_to_q115 maps NaN to code 0 (an int16 has no NaN); simulate_q115 and simulate_q131
 *     return the NaN unchanged, so a divergence stays visible after a storage boundary.
 *   - +-Inf: clamp like any other out-of-range value (+-32767 codes; simulate_q131 gives +-1.0f).
 *   - Zero sign: a value that flushes to code 0 (including -0.0f and tiny negatives) dequantizes to
 *     +0.0f; the int16 code has no negative zero.
 *
 * Implementation: pure integer arithmetic on the IEEE-754 bit pattern (no float rounding, no
 * rintf, no dependence on the rounding mode, on FTZ/DAZ, on --use_fast_math / -ffast-math, or on
 * FMA contraction), so host and device compute the same function by construction. Subnormal inputs
 * are handled exactly (they all round to 0 in both formats). The only float arithmetic is the
 * dequantization multiply by a power of two, which is exact for every result produced here.
 *
 * Note for callers: an SF16 boundary stores simulate_q115(v) into BF16 afterwards; a Q1.15 value
 * k/32768 is exact in BF16 only when k has at most 8 significant bits, so the stored value is
 * bf16(simulate_q115(v)). Conversely every BF16 value with 2^-8 <= |x| < 1 lies on the 2^-15 grid
 * and passes simulate_q115 unchanged (checked in dev/test/test_q115.c).
 *
 * Usable from C (C99 and later), C++ and CUDA (host and device functions).
 */
#ifndef LLMC_NUMERICS_Q115_H
#define LLMC_NUMERICS_Q115_H

#include <stdint.h>
#include <string.h>

#ifndef Q115_HD
#ifdef __CUDACC__
#define Q115_HD __host__ __device__ __forceinline__
#else
#define Q115_HD static inline
#endif
#endif

// Q1.15 scale, 2^15. A float constant so that `code / Q115_SCALE` is never an integer division.
#define Q115_SCALE 32768.0f
// Largest Q1.15 value, 1 - 2^-15 = 32767/32768 (exact in fp32: bit pattern 0x3F7FFE00).
#define Q115_OVERFLOW_THRESHOLD 0.999969482421875f

// ---- internal helpers (not part of the API) -------------------------------------------------

Q115_HD uint32_t q115_bits_(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

#define Q115_THRESHOLD_BITS_ 0x3F7FFE00u  // bit pattern of Q115_OVERFLOW_THRESHOLD
#define Q115_EXP_MASK_ 0x7F800000u
#define Q115_ABS_MASK_ 0x7FFFFFFFu

// round(|x| * 2^frac_bits), to nearest with ties to even, for a non-NaN x whose absolute bit
// pattern is `a`. Requires the shift s = 150 - frac_bits - exponent to be >= 1 (x not already a
// multiple of 2^-frac_bits by its exponent alone), which also keeps the result below 2^24; both
// callers guarantee it (F = 15 with |x| <= threshold: s >= 9; F = 31 with |x| < 2^-8: s >= 1).
// x = m * 2^(e - 150) with m the 24-bit significand, so |x| * 2^F = m / 2^s with s = 150 - F - e.
Q115_HD uint32_t q115_rne_scaled_(uint32_t a, int frac_bits) {
    uint32_t e = a >> 23;
    if (e == 0) return 0;  // zero or subnormal (< 2^-126): far below half a step for F <= 31
    uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
    int s = 150 - frac_bits - (int)e;
    if (s >= 25) return 0;  // m / 2^s < 2^24 / 2^25 = 1/2: rounds to 0 (never a tie)
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;  // ties to even
    return q;
}

// ---- API ------------------------------------------------------------------------------------

// float -> Q1.15 code (seed section 2).
//   1. NaN -> 0 (an int16 has no NaN; use simulate_q115 to keep NaN visible).
//   2. clamp x to [-Q115_OVERFLOW_THRESHOLD, +Q115_OVERFLOW_THRESHOLD];
//      +Inf -> 32767, -Inf -> -32767.
//   3. round x * 32768 to the nearest integer, ties to even.
// Result in [-32767, 32767]: -32768 is never produced (symmetric clamp of the seed).
Q115_HD int16_t float_to_q115(float x) {
    uint32_t u = q115_bits_(x);
    uint32_t a = u & Q115_ABS_MASK_;
    if (a > Q115_EXP_MASK_) return 0;  // NaN
    // |x| > threshold (Inf included): positive float order equals unsigned order of the bits
    int32_t q = (a > Q115_THRESHOLD_BITS_) ? 32767 : (int32_t)q115_rne_scaled_(a, 15);
    return (int16_t)((u >> 31) ? -q : q);
}

// Q1.15 code -> float: q / 32768, exact for every code in [-32768, 32767] (-32768 -> -1.0f).
// Code 0 -> +0.0f.
Q115_HD float q115_to_float(int16_t q) {
    return (float)q * (1.0f / Q115_SCALE);
}

// Q1.15 quantize-dequantize round trip, the SF16 storage boundary (seed section 2):
// q115_to_float(float_to_q115(x)) for every non-NaN x, so: clamp to +-Q115_OVERFLOW_THRESHOLD
// (+-Inf -> +-0.999969482421875f), round to the 2^-15 grid with ties to even, values that round to
// code 0 come back as +0.0f. NaN -> the same NaN, bit pattern unchanged (propagates, unlike
// float_to_q115, so a divergence stays visible).
Q115_HD float simulate_q115_fast(float x);

Q115_HD float simulate_q115(float x) {
#if defined(__CUDA_ARCH__)
    return simulate_q115_fast(x);  // the same function for every non-NaN x (see below)
#else
    if ((q115_bits_(x) & Q115_ABS_MASK_) > Q115_EXP_MASK_) return x;  // NaN propagates
    return q115_to_float(float_to_q115(x));
#endif
}

// 1.5 * 2^23: adding it to a float y with |y| <= 2^22 leaves y's integer part in the low mantissa bits,
// rounded to nearest, ties to even (the float addition's own rounding).
#define Q115_RINT_MAGIC_ 12582912.0f

// simulate_q115 in 5 full-rate float instructions (NaN-propagating min and max, FMA, add, multiply),
// the device path of simulate_q115; also compiled on the host (compare-selects instead of min/max),
// where dev/test/test_q115.c checks it bit for bit against the integer path over every float. Why it
// is the same function, for non-NaN x:
// the clamp keeps |c| <= 1 - 2^-15, so y = c * 2^15 (exact) has |y| < 2^15 and y + 1.5 * 2^23 rounds
// y to an integer with ties to even (the float grid there has spacing 1); subtracting the constant
// is exact, and so is the product by 2^-15. A result of zero is +0 (1.5 * 2^23 + (-0) = 1.5 * 2^23).
// Under the device's flush-to-zero a subnormal x reads as 0, the integer path's result for every
// |x| < 2^-16. NaN: the clamp lets NaN through (PTX min.NaN / max.NaN, sm_80 and later, return NaN
// if an operand is NaN, unlike fminf / fmaxf; on the host the comparisons fail), so a NaN comes out (on
// the device the canonical NaN, not the input's payload). The *_rn intrinsics keep nvcc from fusing or
// reordering the three operations; the host uses volatile for the same purpose.
// x clamped to +-lim, NaN passing through (PTX min.NaN / max.NaN on the device; compare-selects on the host, where
// the comparisons with NaN fail).
Q115_HD float q115_clamp_(float x, float lim) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float c;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(c) : "f"(x), "f"(-lim));
    asm("min.NaN.f32 %0, %0, %1;" : "+f"(c) : "f"(lim));
    return c;
#else
    return x > lim ? lim : (x < -lim ? -lim : x);
#endif
}

// round(c * k) to an integer, ties to even, for |c * k| < 2^22: the FMA with 1.5 * 2^23 and the exact subtraction.
Q115_HD float q115_rint_scaled_(float c, float k) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(__fmaf_rn(c, k, Q115_RINT_MAGIC_), -Q115_RINT_MAGIC_);
#else
    volatile float shifted = c * k + Q115_RINT_MAGIC_;
    return shifted - Q115_RINT_MAGIC_;
#endif
}

// The Q1.15 code of x as a float: float_to_q115(x) for every non-NaN x, NaN -> NaN; simulate_q115_fast without its
// final product by 2^-15 (4 instructions), for callers that keep values in units of 2^-15 (the SF16 attention scores
// and probabilities, llmc/modes/sf16/traits.cuh value_units). simulate_q115_fast(x) == simulate_q115_code(x) * 2^-15.
Q115_HD float simulate_q115_code(float x) { return q115_rint_scaled_(q115_clamp_(x, Q115_OVERFLOW_THRESHOLD), Q115_SCALE); }

// simulate_q115_code(x) for x >= -(1 - 2^-15) or NaN, one instruction fewer: only the upper clamp (min.NaN on the
// device), since the lower one changes nothing there. For the attention probabilities, exp2 outputs (>= +0 or NaN:
// the SF16 traits' ATTN_PROBS site); dev/test/test_q115.c checks it on every 7th such float and the domain's edges.
Q115_HD float simulate_q115_code_nonneg(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float c;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(c) : "f"(x), "f"(Q115_OVERFLOW_THRESHOLD));
#else
    const float c = x > Q115_OVERFLOW_THRESHOLD ? Q115_OVERFLOW_THRESHOLD : x;
#endif
    return q115_rint_scaled_(c, Q115_SCALE);
}

// simulate_q115_code(raw * s) for s a power of two with 2^-20 <= s <= 2^20, one instruction fewer: the clamp moves to
// raw (|raw * s| > t exactly when |raw| > t / s, both exact) and s joins the rounding FMA's factor (c * (s * 2^15) =
// (c * s) * 2^15 exactly). Another s gives wrong results: callers pass powers of two only (dev/test/test_q115.c).
Q115_HD float simulate_q115_code_pow2(float raw, float s) {
    return q115_rint_scaled_(q115_clamp_(raw, Q115_OVERFLOW_THRESHOLD / s), s * Q115_SCALE);
}

Q115_HD float simulate_q115_fast(float x) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(simulate_q115_code(x), 1.0f / Q115_SCALE);
#else
    return simulate_q115_code(x) * (1.0f / Q115_SCALE);
#endif
}

// Q1.31 quantize-dequantize round trip in fp32, the "higher-precision register simulation" that
// SF16_TRUE_FORWARD applies before simulate_q115 (seed section 4.1; the seed gives no formula).
// Defined as: clamp x to +-(1 - 2^-31), round to the 2^-31 grid with ties to even (exactly), then
// return the fp32 nearest to that Q1.31 value (ties to even). What fp32 can represent:
//   - |x| >= 2^-8 (exponent >= -8): the fp32 spacing 2^(e-23) is >= 2^-31, so x already lies on the
//     2^-31 grid and is returned unchanged (when below 1).
//   - |x| < 2^-8: rounded to the 2^-31 grid, ties to even; the result k * 2^-31 has |k| <= 2^23 and
//     is exact in fp32. |x| < 2^-32 -> 0, |x| == 2^-32 (a tie) -> 0, subnormals -> 0.
//   - |x| >= 1: no fp32 lies strictly between 1 - 2^-24 and 1, so the clamp value 1 - 2^-31 is not
//     representable; its nearest fp32 is 1.0f, so the result is +-1.0f (+-Inf included). This is
//     outside Q1.31 proper; the following simulate_q115 clamps it to +-Q115_OVERFLOW_THRESHOLD.
//     The largest fp32 below 1 (1 - 2^-24) is inside the Q1.31 range and passes unchanged.
// So the only inexact step is the +-1.0f of the clamp; everything else is the exact Q1.31 value.
// NaN -> the same NaN (bit pattern unchanged). Zero results are +0.0f.
// Double rounding: simulate_q115(simulate_q131(x)) can differ from simulate_q115(x) by one code when
// |x| < 2^-8 and x lies within 2^-32 of a Q1.15 half-step: simulate_q131 first moves x onto the
// half-step, which simulate_q115 then sends to the even code (e.g. x = 2^-16 + 2^-39: direct -> 2^-15,
// chained -> 0). Above 2^-8 simulate_q131 is the identity, so the chain equals simulate_q115 there.
Q115_HD float simulate_q131(float x) {
    uint32_t u = q115_bits_(x);
    uint32_t a = u & Q115_ABS_MASK_;
    if (a > Q115_EXP_MASK_) return x;              // NaN propagates
    if (a >= 0x3F800000u) return (u >> 31) ? -1.0f : 1.0f;  // |x| >= 1 (Inf too): see above
    if ((a >> 23) >= 119u) return x;               // 2^-8 <= |x| < 1: already on the 2^-31 grid
    int32_t k = (int32_t)q115_rne_scaled_(a, 31);  // |x| < 2^-8: k <= 2^23, exact in fp32
    if (u >> 31) k = -k;                           // sign on the integer: k == 0 gives +0.0f
    return (float)k * (1.0f / 2147483648.0f);      // exact: power-of-two scale, result normal or 0
}

// 1 if the clamp of float_to_q115 changes x: |x| > Q115_OVERFLOW_THRESHOLD (+-Inf included,
// -1.0 included). NaN -> 0. For clipping statistics at SF16 boundaries.
Q115_HD int q115_is_clipped(float x) {
    uint32_t a = q115_bits_(x) & Q115_ABS_MASK_;
    return a > Q115_THRESHOLD_BITS_ && a <= Q115_EXP_MASK_;
}

// 1 if a non-zero x quantizes to code 0: x != 0 and simulate_q115(x) == 0, i.e. |x| < 2^-16, or
// |x| == 2^-16 exactly (a tie, goes to the even code 0). Subnormals count as flushed. NaN -> 0.
// Evaluated on the bits, so it also holds under FTZ/DAZ. For underflow statistics at SF16
// boundaries.
Q115_HD int q115_is_flushed(float x) {
    uint32_t a = q115_bits_(x) & Q115_ABS_MASK_;
    return a != 0 && a <= Q115_THRESHOLD_BITS_ && q115_rne_scaled_(a, 15) == 0;
}

#endif  // LLMC_NUMERICS_Q115_H
