/*
 * fp8.h - scalar 8-bit floating point (FP8) formats: decode, round-to-nearest-even and stochastic
 * encode, a counter-based random-bit helper, and per-tensor / per-block scale helpers.
 *
 * Header-only; usable from C, C++ and CUDA (every scalar function is HOST_DEVICE, see bf16.h).
 * The block-amax reference at the end is host-only.
 *
 * Formats (1 sign bit, E exponent bits, M mantissa bits, E + M = 7). A code with exponent field
 * 0 is subnormal: (-1)^s * mant * 2^(1 - bias - M); otherwise (-1)^s * (1 + mant / 2^M) *
 * 2^(exp - bias). The formats differ only in bias and in which codes are special:
 *
 *   kind        bias  Inf          NaN                         -0    max finite (code)  min subnormal
 *   E4M3FN        7   none         S.1111.111 (0x7F, 0xFF)      yes   448    (0x7E)      2^-9
 *   E5M2         15   S.11111.00   S.11111.{01,10,11}           yes   57344  (0x7B)      2^-16
 *   E4M3FNUZ      8   none         0x80 only                    no    240    (0x7F)      2^-10
 *   E5M2FNUZ     16   none         0x80 only                    no    57344  (0x7F)      2^-17
 *
 * E4M3FN and E5M2 are the two OCP formats: "OCP 8-bit Floating Point Specification (OFP8)",
 * revision 1.0 (2023-06-20), section 5.1 (binary interchange formats: encodings, special values,
 * max normal) and section 5.2 (conversion from wider formats: round to nearest even, optional
 * saturation). E4M3 gives up Inf and all but one NaN mantissa pattern to gain the top binade.
 * The FNUZ formats ("finite, NaN, unsigned zero") are not part of OFP8: they follow the
 * definitions used by ml_dtypes (float8_e4m3fnuz, float8_e5m2fnuz) and AMD MI300 hardware: bias
 * one larger than the OCP sibling, no Inf, no negative zero, and the single NaN at the code that
 * would be -0 (0x80); every other code, including exponent field all ones, is finite.
 *
 * Conversions to FP8 (fp8_encode_rne, fp8_encode_sr) take a `saturate` flag:
 *   saturate != 0  finite values whose rounded magnitude exceeds the max finite value, and +-Inf,
 *                  become +-max (OFP8 saturation mode; the usual mode for training).
 *   saturate == 0  such values overflow as OFP8 section 5.2 describes for non-saturating mode:
 *                  E5M2 gives +-Inf; E4M3FN gives NaN (sign kept: 0x7F / 0xFF); the FNUZ formats
 *                  give their NaN 0x80. +-Inf inputs map the same way.
 * In both modes a NaN input gives the format's NaN (E4M3FN 0x7F | sign, E5M2 0x7E | sign, FNUZ
 * 0x80), zeros keep their sign where the format has -0, and in the FNUZ formats every zero
 * result (from +-0 or from a negative value that rounds to zero) is 0x00. Rounding to nearest
 * even uses the format's grid extended upward with the same spacing, as IEEE 754 does: a value
 * overflows exactly when it rounds to a magnitude above max finite (E4M3FN: |x| > 464 overflows,
 * 464 ties to 448; E5M2: |x| >= 61440; E4M3FNUZ: |x| >= 248; E5M2FNUZ: |x| >= 61440). Float32
 * subnormal inputs are handled exactly (they all round to zero under RNE). This matches ml_dtypes'
 * float32 -> float8 casts in non-saturating mode bit for bit (dev/test/test_fp8_reference.py).
 *
 * Scaling convention (per tensor or per block): x_fp8 = Q(x * scale), dequant(x_fp8) =
 * fp8_decode(x_fp8) / scale, with scale chosen from amax = max |x| so that amax * scale lands at
 * (or just below) the format's max finite value.
 */
#ifndef LLMC_NUMERICS_FP8_H
#define LLMC_NUMERICS_FP8_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef HOST_DEVICE
#ifdef __CUDACC__
#define HOST_DEVICE __host__ __device__
#else
#define HOST_DEVICE
#endif
#endif

// ----------------------------------------------------------------------------------------------
// Format descriptors

// Which codes are NaN.
typedef enum {
    FP8_NAN_IEEE = 0,      // exponent field all ones and mantissa != 0 (exponent all ones, mantissa 0 is Inf)
    FP8_NAN_ALL_ONES = 1,  // only S.1111...1 (both signs): E4M3FN
    FP8_NAN_NEG_ZERO = 2   // only 0x80, the pattern of -0: FNUZ formats
} FP8NanEncoding;

// A format descriptor. Build one with fp8_format(kind); the fields are plain data so that a
// descriptor can be passed by value to device code.
typedef struct {
    int exp_bits;                // exponent field width E
    int man_bits;                // mantissa field width M (E + M = 7)
    int bias;                    // exponent bias: a normal value is (1 + mant / 2^M) * 2^(exp - bias)
    int has_inf;                 // 1 if S.1..1.0..0 is +-Inf (E5M2 only)
    FP8NanEncoding nan_encoding; // which codes are NaN
    int has_neg_zero;            // 1 if 0x80 is -0 (OCP formats); 0 if there is one zero (FNUZ)
    int max_code;                // the code (sign bit clear) of the largest finite value
    float max_finite;            // the largest finite value (decode of max_code)
} FP8Format;

// The four supported formats.
typedef enum { FP8_E4M3FN = 0, FP8_E5M2 = 1, FP8_E4M3FNUZ = 2, FP8_E5M2FNUZ = 3 } FP8Kind;
#define FP8_NUM_KINDS 4

// Descriptor of one of the four formats (table at the top of the file). An out-of-range kind
// gives the E4M3FN descriptor.
static inline HOST_DEVICE FP8Format fp8_format(FP8Kind kind) {
    FP8Format f;
    switch (kind) {
    case FP8_E5M2:
        f.exp_bits = 5; f.man_bits = 2; f.bias = 15; f.has_inf = 1; f.nan_encoding = FP8_NAN_IEEE;
        f.has_neg_zero = 1; f.max_code = 0x7B; f.max_finite = 57344.0f;
        break;
    case FP8_E4M3FNUZ:
        f.exp_bits = 4; f.man_bits = 3; f.bias = 8; f.has_inf = 0; f.nan_encoding = FP8_NAN_NEG_ZERO;
        f.has_neg_zero = 0; f.max_code = 0x7F; f.max_finite = 240.0f;
        break;
    case FP8_E5M2FNUZ:
        f.exp_bits = 5; f.man_bits = 2; f.bias = 16; f.has_inf = 0; f.nan_encoding = FP8_NAN_NEG_ZERO;
        f.has_neg_zero = 0; f.max_code = 0x7F; f.max_finite = 57344.0f;
        break;
    case FP8_E4M3FN:
    default:
        f.exp_bits = 4; f.man_bits = 3; f.bias = 7; f.has_inf = 0; f.nan_encoding = FP8_NAN_ALL_ONES;
        f.has_neg_zero = 1; f.max_code = 0x7E; f.max_finite = 448.0f;
        break;
    }
    return f;
}

// Lower-case name of a kind ("e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"; "?" if out of range),
// the spelling ml_dtypes uses after its "float8_" prefix.
static inline const char* fp8_kind_name(FP8Kind kind) {
    switch (kind) {
    case FP8_E4M3FN: return "e4m3fn";
    case FP8_E5M2: return "e5m2";
    case FP8_E4M3FNUZ: return "e4m3fnuz";
    case FP8_E5M2FNUZ: return "e5m2fnuz";
    default: return "?";
    }
}

// The kind named `name` (as fp8_kind_name spells it, exact match), or -1 if none. Host only.
static inline int fp8_kind_from_name(const char* name) {
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        if (name != NULL && strcmp(name, fp8_kind_name((FP8Kind)k)) == 0) return k;
    }
    return -1;
}

// Unbiased exponent of the smallest normal value: 1 - bias (E4M3FN -6, E5M2 -14, E4M3FNUZ -7,
// E5M2FNUZ -15). The smallest subnormal is 2^(fp8_min_normal_exp(f) - man_bits).
static inline HOST_DEVICE int fp8_min_normal_exp(FP8Format f) {
    return 1 - f.bias;
}

// ----------------------------------------------------------------------------------------------
// Special codes and classification

// 1 if `code` is a NaN of format f (see FP8NanEncoding).
static inline HOST_DEVICE int fp8_is_nan(FP8Format f, uint8_t code) {
    unsigned mag = code & 0x7Fu;
    unsigned exp_ones = (1u << f.exp_bits) - 1u;
    unsigned man_mask = (1u << f.man_bits) - 1u;
    switch (f.nan_encoding) {
    case FP8_NAN_IEEE: return (mag >> f.man_bits) == exp_ones && (mag & man_mask) != 0;
    case FP8_NAN_ALL_ONES: return mag == 0x7Fu;
    case FP8_NAN_NEG_ZERO: return code == 0x80u;
    }
    return 0;
}

// 1 if `code` is +-Inf (only formats with has_inf have such codes).
static inline HOST_DEVICE int fp8_is_inf(FP8Format f, uint8_t code) {
    return f.has_inf && (code & 0x7Fu) == (((1u << f.exp_bits) - 1u) << f.man_bits);
}

// The NaN code produced by conversions: E4M3FN 0x7F | sign, IEEE-style (E5M2) 0x7E | sign (the
// quiet pattern S.11111.10), FNUZ 0x80 whatever the sign. `sign` is 0 or 1.
static inline HOST_DEVICE uint8_t fp8_nan_code(FP8Format f, unsigned sign) {
    switch (f.nan_encoding) {
    case FP8_NAN_IEEE:
        return (uint8_t)((sign << 7) | (((1u << f.exp_bits) - 1u) << f.man_bits) | (1u << (f.man_bits - 1)));
    case FP8_NAN_ALL_ONES: return (uint8_t)((sign << 7) | 0x7Fu);
    case FP8_NAN_NEG_ZERO: return 0x80u;
    }
    return 0x80u;
}

// The code of +-max finite. `sign` is 0 or 1.
static inline HOST_DEVICE uint8_t fp8_max_code(FP8Format f, unsigned sign) {
    return (uint8_t)((sign << 7) | (unsigned)f.max_code);
}

// What a non-saturating conversion gives on overflow and for +-Inf (OFP8 section 5.2): +-Inf for
// formats with Inf (E5M2), else the format's NaN (fp8_nan_code).
static inline HOST_DEVICE uint8_t fp8_overflow_code(FP8Format f, unsigned sign) {
    if (f.has_inf) return (uint8_t)((sign << 7) | (((1u << f.exp_bits) - 1u) << f.man_bits));
    return fp8_nan_code(f, sign);
}

// ----------------------------------------------------------------------------------------------
// Internal float32 bit helpers

static inline HOST_DEVICE uint32_t fp8_f32_bits_(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static inline HOST_DEVICE float fp8_f32_from_bits_(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

// 2^e as a float for -126 <= e <= 127 (normal range), built from bits (no libm).
static inline HOST_DEVICE float fp8_pow2f_(int e) {
    return fp8_f32_from_bits_((uint32_t)(e + 127) << 23);
}

// ----------------------------------------------------------------------------------------------
// Decode

// FP8 code -> float32, exact for every code (each finite FP8 value is a float32 normal or zero).
// Subnormal codes (exponent field 0, mantissa != 0) decode to mant * 2^(1 - bias - M); 0x80
// decodes to -0.0f where the format has -0. NaN codes give a quiet float NaN (with the code's
// sign in E4M3FN / E5M2, positive for the FNUZ NaN 0x80); E5M2 Inf codes give +-INFINITY.
// Format definitions: OFP8 section 5.1 (E4M3FN, E5M2); FNUZ as described at the top of the file.
static inline HOST_DEVICE float fp8_decode(FP8Format f, uint8_t code) {
    uint32_t sign = (uint32_t)(code >> 7) << 31;
    if (fp8_is_nan(f, code)) {
        return fp8_f32_from_bits_((f.nan_encoding == FP8_NAN_NEG_ZERO ? 0u : sign) | 0x7FC00000u);
    }
    if (fp8_is_inf(f, code)) return fp8_f32_from_bits_(sign | 0x7F800000u);
    unsigned mag = code & 0x7Fu;
    unsigned exp = mag >> f.man_bits;
    unsigned man = mag & ((1u << f.man_bits) - 1u);
    uint32_t bits;
    if (exp == 0) {
        // subnormal or zero: man * 2^(emin - M), exact in float32 (man < 2^M)
        bits = fp8_f32_bits_((float)man * fp8_pow2f_(fp8_min_normal_exp(f) - f.man_bits));
    } else {
        bits = ((uint32_t)((int)exp - f.bias + 127) << 23) | ((uint32_t)man << (23 - f.man_bits));
    }
    return fp8_f32_from_bits_(bits | sign);
}

// ----------------------------------------------------------------------------------------------
// Encode

// Shared implementation of fp8_encode_rne (stochastic == 0) and fp8_encode_sr (stochastic != 0).
//
// |x| = m * 2^(e - 23) with a 24-bit integer m (hidden bit included for float32 normals). The
// FP8 spacing at |x| is 2^q with q = max(e, emin) - M (emin = 1 - bias), and n = floor(|x| / 2^q)
// = m >> shift with shift = q - e + 23 >= 23 - M >= 20. The magnitude code is then
// ((max(e, emin) - emin) << M) + n: for normal binades n in [2^M, 2^(M+1)] (n = 2^(M+1) after a
// carry is the next binade's first code), for the subnormal range n in [0, 2^M] (n = 2^M is the
// smallest normal). Codes above max_code (including would-be NaN / Inf patterns) are overflow.
static inline HOST_DEVICE uint8_t fp8_encode_impl_(FP8Format f, float x, int stochastic, uint32_t random_bits,
                                                   int saturate) {
    uint32_t u = fp8_f32_bits_(x);
    unsigned sign = u >> 31;
    uint32_t fexp = (u >> 23) & 0xFFu;
    uint32_t fman = u & 0x7FFFFFu;
    uint8_t zero = (uint8_t)(f.has_neg_zero ? (sign << 7) : 0u);
    if (fexp == 0xFFu) {
        if (fman != 0) return fp8_nan_code(f, sign);                  // NaN
        return saturate ? fp8_max_code(f, sign) : fp8_overflow_code(f, sign);  // +-Inf
    }
    if (fexp == 0 && fman == 0) return zero;
    int e;
    uint64_t m;
    if (fexp == 0) {  // float32 subnormal: m * 2^(-126 - 23)
        e = -126;
        m = fman;
    } else {
        e = (int)fexp - 127;
        m = fman | 0x800000u;
    }
    int emin = fp8_min_normal_exp(f);
    int eq = e > emin ? e : emin;
    int shift = eq - f.man_bits - e + 23;
    uint64_t n, rem;
    if (shift >= 64) {
        n = 0;
        rem = m;  // fraction m / 2^shift < 2^-40: RNE gives 0, SR threshold below is 0
    } else {
        n = m >> shift;
        rem = m & ((1ull << shift) - 1ull);
    }
    if (stochastic) {
        // round away from zero with probability rem / 2^shift: compare the 32 random bits with
        // that fraction scaled to 2^32 (exact for shift <= 32, truncated below 2^-32 otherwise)
        uint64_t threshold = (shift >= 64) ? 0 : ((rem << 32) >> shift);
        if ((uint64_t)random_bits < threshold) n++;
    } else if (shift < 64) {
        uint64_t half = 1ull << (shift - 1);
        if (rem > half || (rem == half && (n & 1u))) n++;
    }
    int code = ((eq - emin) << f.man_bits) + (int)n;
    if (code > f.max_code) return saturate ? fp8_max_code(f, sign) : fp8_overflow_code(f, sign);
    if (code == 0) return zero;
    return (uint8_t)((sign << 7) | (unsigned)code);
}

// float32 -> FP8 with round to nearest, ties to even (OFP8 section 5.2), including subnormal
// results. Overflow, +-Inf and NaN as described at the top of the file: with saturate != 0 every
// finite or infinite value maps to a finite code (+-max on overflow); with saturate == 0 overflow
// gives Inf (E5M2) or NaN (E4M3FN, FNUZ). Zeros keep their sign except in FNUZ (always 0x00).
static inline HOST_DEVICE uint8_t fp8_encode_rne(FP8Format f, float x, int saturate) {
    return fp8_encode_impl_(f, x, 0, 0u, saturate);
}

// float32 -> FP8 with stochastic rounding (not part of OFP8). Let lo <= |x| <= hi be the two
// adjacent points of the format's grid (hi may lie one step beyond max finite, on the grid
// extended with the same spacing). The result is |x| exactly when it is representable; otherwise
// hi (away from zero) when random_bits < (|x| - lo) / (hi - lo) * 2^32, else lo. With
// random_bits uniform over 32 bits, P(hi) = (|x| - lo) / (hi - lo) (exact to 2^-32; below the
// smallest subnormal the fraction is truncated to 32 bits), so E[decode(result)] = x: unbiased.
// A result beyond max finite is overflow, handled like fp8_encode_rne (saturate -> +-max, else
// Inf / NaN); specials (NaN, +-Inf, +-0) are handled exactly as in fp8_encode_rne. Use a fresh
// random word per element, e.g. fp8_random_bits(seed, element_index).
static inline HOST_DEVICE uint8_t fp8_encode_sr(FP8Format f, float x, uint32_t random_bits, int saturate) {
    return fp8_encode_impl_(f, x, 1, random_bits, saturate);
}

// ----------------------------------------------------------------------------------------------
// Counter-based random bits for stochastic rounding

// The SplitMix64 output function (a bijective 64-bit mixer).
static inline HOST_DEVICE uint64_t fp8_mix64_(uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z;
}

// 32 pseudo-random bits for element `index` under `seed`: the upper half of the index-th output
// of a SplitMix64 sequence whose starting state is a hash of the seed. Counter-based (no state to
// carry), so any thread can draw the bits of any element and a fixed (seed, index) always gives
// the same bits on host and device: runs are reproducible. Not cryptographic.
static inline HOST_DEVICE uint32_t fp8_random_bits(uint64_t seed, uint64_t index) {
    uint64_t state = fp8_mix64_(seed ^ 0x6A09E667F3BCC909ull);
    return (uint32_t)(fp8_mix64_(state + (index + 1u) * 0x9E3779B97F4A7C15ull) >> 32);
}

// ----------------------------------------------------------------------------------------------
// Scaling

// Splits a positive finite float into m * 2^(e - 23) with m in [2^23, 2^24) (float32 subnormals
// normalized), so that two such values compare by (e, m).
static inline HOST_DEVICE void fp8_split_f32_(float x, uint32_t* m, int* e) {
    uint32_t u = fp8_f32_bits_(x);
    uint32_t fexp = (u >> 23) & 0xFFu;
    uint32_t fman = u & 0x7FFFFFu;
    if (fexp == 0) {
        int ee = -126;
        while ((fman & 0x800000u) == 0) {
            fman <<= 1;
            ee--;
        }
        *m = fman;
        *e = ee;
    } else {
        *m = fman | 0x800000u;
        *e = (int)fexp - 127;
    }
}

// 1 if amax is usable for a scale: positive and finite.
static inline HOST_DEVICE int fp8_amax_valid_(float amax) {
    return amax > 0.0f && amax <= 3.40282346638528859812e+38f;
}

// Per-tensor scale: scale = max_finite / amax / 2^margin, so that amax * scale maps to the
// format's max finite value (margin = 0) or `margin` binades below it (margin > 0 leaves
// headroom for values that grow before the next amax update; negative margins are allowed).
// Quantize as x_fp8 = Q(x * scale), dequantize as fp8_decode(x_fp8) / scale. amax <= 0 (an
// all-zero tensor), NaN or Inf gives 1. The division rounds, so amax * scale may exceed
// max_finite by an ulp of float32; that still rounds to max in both RNE modes. The result is
// clamped to the finite float32 range [2^-126, FLT_MAX] (relevant only for extreme amax / margin).
static inline HOST_DEVICE float fp8_scale_from_amax(FP8Format f, float amax, int margin) {
    if (!fp8_amax_valid_(amax)) return 1.0f;
#if defined(__CUDA_ARCH__)
    float s = __fdiv_rn(f.max_finite, amax);  // IEEE division also under --use_fast_math (host == device)
#else
    float s = f.max_finite / amax;
#endif
    // apply 2^-margin in steps that stay within the normal float range
    while (margin > 0) {
        int k = margin > 100 ? 100 : margin;
        s *= fp8_pow2f_(-k);
        margin -= k;
    }
    while (margin < 0) {
        int k = -margin > 100 ? 100 : -margin;
        s *= fp8_pow2f_(k);
        margin += k;
    }
    if (!(s <= 3.40282346638528859812e+38f)) s = 3.40282346638528859812e+38f;
    if (s < fp8_pow2f_(-126)) s = fp8_pow2f_(-126);
    return s;
}

// Power-of-two scale for block (or per-tensor) scaling: 2^(k - margin) with
// k = floor(log2(max_finite / amax)), computed exactly (no libm): the largest k such that
// amax * 2^k <= max_finite. Multiplying and dividing by it is exact (barring float32 range
// limits), so dequantization adds no rounding; amax * scale lies in (max/2, max] for margin = 0.
// amax <= 0, NaN or Inf gives 1. The exponent is clamped to [-126, 127] (a normal float).
// Typical use: one scale per block of 32, 64 or 128 consecutive elements along K, from
// fp8_block_amax_rowmajor.
static inline HOST_DEVICE float fp8_scale_pow2_from_amax(FP8Format f, float amax, int margin) {
    if (!fp8_amax_valid_(amax)) return 1.0f;
    uint32_t ma, mm;
    int ea, em;
    fp8_split_f32_(amax, &ma, &ea);
    fp8_split_f32_(f.max_finite, &mm, &em);
    // max / amax = (mm / ma) * 2^(em - ea) with mm / ma in (1/2, 2)
    long k = (long)em - (long)ea - (mm < ma ? 1 : 0) - (long)margin;
    if (k > 127) k = 127;
    if (k < -126) k = -126;
    return fp8_pow2f_((int)k);
}

// ----------------------------------------------------------------------------------------------
// Block amax (host reference)

// Number of blocks of `block` elements covering K elements (the last one may be partial).
static inline HOST_DEVICE int fp8_num_blocks(int K, int block) {
    return (K + block - 1) / block;
}

// Host reference for per-block amax along K. x is a row-major (M, K) float matrix; blocks are
// `block` consecutive elements of a row (typically 32, 64 or 128; any block >= 1 works, and a
// last partial block covers columns [(nb - 1) * block, K)). Writes amax_out[m * nb + b] =
// max |x[m, b * block .. min(K, (b + 1) * block) - 1]| for nb = fp8_num_blocks(K, block), i.e.
// an (M, nb) row-major matrix. A NaN anywhere in a block makes that block's amax NaN (so that it
// is noticed; fp8_scale*_from_amax then return 1). Returns nb, or -1 (writing nothing) if M < 0,
// K < 0, block < 1, or a pointer is NULL while M * K > 0.
static inline int fp8_block_amax_rowmajor(const float* x, int M, int K, int block, float* amax_out) {
    if (M < 0 || K < 0 || block < 1) return -1;
    if ((size_t)M * (size_t)K > 0 && (x == NULL || amax_out == NULL)) return -1;
    int nb = fp8_num_blocks(K, block);
    for (int m = 0; m < M; m++) {
        const float* row = x + (size_t)m * (size_t)K;
        for (int b = 0; b < nb; b++) {
            int k0 = b * block;
            int k1 = k0 + block < K ? k0 + block : K;
            uint32_t amax_bits = 0;  // |x| compared as bit patterns: monotone for non-NaN values
            int has_nan = 0;
            for (int k = k0; k < k1; k++) {
                uint32_t a = fp8_f32_bits_(row[k]) & 0x7FFFFFFFu;
                if (a > 0x7F800000u) has_nan = 1;
                else if (a > amax_bits) amax_bits = a;
            }
            amax_out[(size_t)m * (size_t)nb + (size_t)b] =
                has_nan ? fp8_f32_from_bits_(0x7FC00000u) : fp8_f32_from_bits_(amax_bits);
        }
    }
    return nb;
}

#endif // LLMC_NUMERICS_FP8_H
