/*
 * tcast_quant.h - the TensorCast data type structs and the scalar virtual cast ("fake quantization":
 * quantize, then dequantize at once) of float32 values (doc/TCAST.md sections 1-4): the HOST_DEVICE
 * primitives that the host reference (tcast_cast_host, llmc/numerics/tcast.h) and the GPU kernels
 * (llmc/kernels/tcast/, llmc/kernels/attention/attention_tcast.cuh) both compose, so that host and
 * GPU share one source of truth.
 *
 * Plain C, usable from C, C++ and CUDA. Holds:
 *   - the plain-data specs TcastNumberSpec, TcastScaleSpec, TcastDataType (no pointers, so a data type
 *     can be passed by value to a CUDA kernel; built on the host by the parsers of tcast_spec.h);
 *   - float32 bit helpers and float32 arithmetic with RNE at every operation;
 *   - element casts (tcast_quantize_exp / _int / _uint / _uint_izero, tcast_cast_element, and
 *     tcast_cast_fixed for the fixed scales pN: 1.3, 4a-4c and 4d, with saturation /
 *     flush flags for 4.5);
 *   - group accumulation and scales (TcastGroupAcc, tcast_group_scale: 4a-4c, specials 4.3), the
 *     scale histogram bins (4.5), the per-group element cast tcast_quantize, per-element random bits
 *     (tcast_random_bits) and M:N pruning (tcast_sparse_*, 4.1).
 *
 * Exactness. Every exponent-scaled and unscaled cast is computed on float32 bit patterns with
 * integers: |x| = m * 2^p with a 24-bit m, the grid quantum of the target format at that
 * magnitude, the round mode applied to the integer remainder (stochastic rounding compares the
 * 32 random bits with the exact fraction, no truncation), saturation at max, then one final
 * round-to-nearest-even to float32 (also for results in or below the float32 subnormal range, and
 * to Inf past 2^128). No double, no libm, no float comparison in any HOST_DEVICE function.
 * Float-scale arithmetic (sections 4b, 4c) is float32 with RNE at every operation (tcast_add_rn,
 * tcast_sub_rn, tcast_mul_rn, tcast_div_rn): on the host (float)((double)a op (double)b), which
 * is correctly rounded for float operands (double has more than 2 * 24 + 2 bits) and cannot be
 * contracted into an FMA; on the device inline PTX `add/sub/mul/div.rn.f32` WITHOUT `.ftz`.
 * (__fadd_rn & co. are not usable: this project compiles device code with --use_fast_math, which
 * makes nvcc emit add.rn.ftz.f32 for them, flushing float32 subnormal inputs and results to zero;
 * for the same reason float compares such as `x > 0.0f` are avoided in device code: they become
 * setp.ftz.) Group amax / min / max are therefore accumulated on bit patterns too (TcastGroupAcc).
 *
 * Conventions. NaN outputs are the canonical quiet NaN 0x7FC00000 (the doc does not define NaN
 * bits). Flags: TCAST_FLAG_SATURATED, TCAST_FLAG_FLUSHED (section 4.5). Readings of the doc where
 * it leaves a choice are marked "Reading:" below.
 *
 * Sources: doc/TCAST.md (the contract), OCP Microscaling Formats (MX) v1.0 (E8M0 scale, element
 * formats, section 6.3 NaN handling), OCP 8-bit Floating Point (OFP8) rev 1.0 (E4M3 / E5M2).
 */
#ifndef LLMC_NUMERICS_TCAST_QUANT_H
#define LLMC_NUMERICS_TCAST_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "llmc/numerics/fp8.h"  // HOST_DEVICE, fp8_random_bits

// ----------------------------------------------------------------------------------------------
// Specifications (sections 1-3)

typedef enum { TCAST_KIND_FLOAT = 0, TCAST_KIND_INT = 1, TCAST_KIND_UINT = 2, TCAST_KIND_EXPONENT = 3 } TcastKind;

// Inf / NaN mode of a float (section 1.2). Ints count as fnuz (their float view below, no -0);
// uints are NONE; exponent types are IEEE (the mode their code `eXm0` spells; NaN = all ones).
typedef enum { TCAST_INFNAN_IEEE = 0, TCAST_INFNAN_FN = 1, TCAST_INFNAN_FNUZ = 2, TCAST_INFNAN_NONE = 3 } TcastInfNan;

// Round modes (section 1.4). Scales are always rounded with EVEN.
typedef enum { TCAST_ROUND_EVEN = 0, TCAST_ROUND_NEAREST = 1, TCAST_ROUND_ZERO = 2, TCAST_ROUND_STOCHASTIC = 3 } TcastRound;

// Exponent-scale selection (section 4a): MIDMAX bumps s by one when amax / 2^s > midmax.
typedef enum { TCAST_SCALE_MAX = 0, TCAST_SCALE_MIDMAX = 1 } TcastScaleMode;

// A number format (section 1). Float values are n * 2^(e - mbits) (e >= emin, n <= 2^(mbits+1)).
//   FLOAT     eXmY[bZ][fn|fnuz]: ebits X, mbits Y, bias Z; bits = 1 + X + Y.
//   INT       intK: the fixed-point view e1m(K-2)b1fnuz (ebits 1, mbits K-2, bias 1, emax = emin = 0)
//             plus maxint = 2^(K-1) - 1, minint = -maxint; bits = K.
//   UINT      uintK: maxint = 2^K - 1, minint = 0; bits = K; ebits = mbits = bias = 0 and the
//             float fields are 0 (Reading: fields that do not apply are 0).
//   EXPONENT  eXm0[bZ]: powers 2^(code - bias) for codes 0 .. 2^X - 2 (2^X - 1 is NaN):
//             emin = -bias, emax = 2^X - 2 - bias; bits = ebits = X, mbits = 0.
// max, smallest_normal, eps, midmax are exact reals as doubles (host information; they may lie
// outside the float32 range, e.g. e8m22b0). The device path uses the integer fields only.
typedef struct {
    TcastKind kind;
    int bits;                // storage width in bits
    int ebits, mbits, bias;  // exponent width X, mantissa width Y, bias Z
    TcastInfNan infnan;
    int emax, emin;          // largest / smallest normal binade (floats, ints); scale range (exponent)
    int maxint, minint;      // integer code range (ints, uints)
    double max;              // largest finite value (floats, ints)
    double smallest_normal;  // 2^emin
    double eps;              // 2^-mbits
    double midmax;           // (max + 2^(emax+1)) / 2
    uint32_t max_mant;       // max = max_mant * 2^(emax - mbits): 2^(Y+1) - 1, or 2^(Y+1) - 2 in fn mode
    uint32_t midmax_mant;    // midmax = midmax_mant * 2^(emax - mbits - 1) = max_mant + 2^(Y+1)
    int signed_zero;         // 1: a zero result keeps the sign (ieee, fn); 0: it is +0 (fnuz, ints)
} TcastNumberSpec;

// A scale specification (section 2): SCALE[_ZERO][_tX[dY]].
typedef struct {
    TcastNumberSpec scale;  // the scale factor's format: an exponent type or a float
    int has_zero;           // 1 if a zero point is given (uint data)
    TcastNumberSpec zero;   // the zero point's format: a float or an int (valid when has_zero)
    int tile;               // -1: one scale per tensor; 0: per channel (slice along dim); X: tiles of X
    int dim;                // tile dimension as given (-2, -1, 0, 1; default -1)
    int dim_given;          // 1 if the code spelled dY
} TcastScaleSpec;

// Largest sparsity group N: the GPU kernels hold a whole M:N group in registers (one warp lane
// per element), so N is limited to a warp's 32.
#define TCAST_SPARSE_N_MAX 32

// Range of N of a fixed scale pN (section 2): that of an E8M0 scale, 2^-127 .. 2^127.
#define TCAST_FIXED_MIN (-127)
#define TCAST_FIXED_MAX 127

// A data type (section 3): number, optional scale, modifiers, name.
// A fixed scale pN (section 2) is not a TcastScaleSpec: it derives nothing from the data, so the type
// casts like an unscaled one (has_scale = 0: every element alone, specials per element, no groups),
// with the element format's grid times 2^fixed_exp (section 4d).
typedef struct {
    TcastNumberSpec number;
    int has_scale;             // 1: a scale spec SCALE[_ZERO][_tX[dY]] (groups with derived scales)
    TcastScaleSpec scale;      // valid when has_scale
    int fixed;                 // 1: the scale code is a fixed scale pN (then has_scale = 0)
    int fixed_exp;             // N of pN, TCAST_FIXED_MIN..TCAST_FIXED_MAX; 0 when fixed = 0
    TcastRound round;          // element round mode (@even default)
    TcastScaleMode scale_mode; // @max default
    int sparse_m, sparse_n;    // keep M of every N (0, 0 = dense); 1 <= M < N <= TCAST_SPARSE_N_MAX
    char name[64];             // predefined name, or the text as given without modifiers
} TcastDataType;

// ----------------------------------------------------------------------------------------------
// float32 bit helpers (integer only, so that device code is immune to --use_fast_math's FTZ)

#define TCAST_F32_INF 0x7F800000u
#define TCAST_F32_QNAN 0x7FC00000u  // the canonical NaN every NaN output uses

static inline HOST_DEVICE uint32_t tcast_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static inline HOST_DEVICE float tcast_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

// 1 if x is NaN or +-Inf.
static inline HOST_DEVICE int tcast_is_special(float x) {
    return (tcast_f32_bits(x) & TCAST_F32_INF) == TCAST_F32_INF;
}

// Leading zeros of a non-zero 32-bit word.
static inline HOST_DEVICE int tcast_clz32_(uint32_t x) {
#ifdef __CUDA_ARCH__
    return __clz((int)x);
#else
    return __builtin_clz(x);
#endif
}

// A non-zero finite magnitude a (float32 bits, sign clear) as m * 2^p with m in [2^23, 2^24):
// returns p and sets m. float32 subnormals are normalized, so floor(log2 |x|) = p + 23 always.
static inline HOST_DEVICE int tcast_split_(uint32_t a, uint32_t* m) {
    uint32_t e = a >> 23;
    if (e == 0) {
        int sh = tcast_clz32_(a) - 8;
        *m = a << sh;
        return -149 - sh;
    }
    *m = (a & 0x7FFFFFu) | 0x800000u;
    return (int)e - 150;
}

// floor(log2 |x|) of a non-zero finite float32.
static inline HOST_DEVICE int tcast_ilog2_(uint32_t a) {
    uint32_t m;
    return tcast_split_(a, &m) + 23;
}

// n = round_R(m / 2^shift) for shift >= 0 (section 1.4 on the real t = m / 2^shift; m < 2^32).
// The remainder is exact, so ties and the stochastic threshold u < f * 2^32 are exact comparisons
// (f * 2^32 = rem * 2^(32 - shift); for shift > 32: u * 2^(shift - 32) < rem).
static inline HOST_DEVICE uint32_t tcast_round_shift_(uint32_t m, int shift, TcastRound r, uint32_t u) {
    if (shift <= 0) return m;
    uint32_t lo;
    uint64_t rem;
    if (shift >= 32) {
        lo = 0;
        rem = m;
    } else {
        lo = m >> shift;
        rem = m & ((1u << shift) - 1u);
    }
    if (rem == 0) return lo;
    int up;
    switch (r) {
    case TCAST_ROUND_ZERO:
        up = 0;
        break;
    case TCAST_ROUND_STOCHASTIC:
        if (shift <= 32) up = (uint64_t)u < (rem << (32 - shift));
        else if (shift < 64) up = ((uint64_t)u << (shift - 32)) < rem;
        else up = (u == 0);  // u >= 1 gives u * 2^(shift-32) >= 2^32 > rem
        break;
    default:  // EVEN, NEAREST: compare rem with half a quantum
        if (shift > 32) {
            up = 0;  // rem < 2^32 <= half
        } else {
            uint64_t half = 1ull << (shift - 1);
            up = rem > half || (rem == half && (r == TCAST_ROUND_NEAREST || (lo & 1u)));
        }
        break;
    }
    return lo + (uint32_t)up;
}

// float32 magnitude bits of RNE(n * 2^k) for n > 0: exact when representable, rounded to the
// subnormal grid (quantum 2^-149) below 2^-126 (possibly to 0), +Inf when it rounds to 2^128 or
// more. This is the "finally round to float32" of sections 1.3 and 4a.
static inline HOST_DEVICE uint32_t tcast_f32_rne_bits_(uint32_t n, int k) {
    int e = k + 31 - tcast_clz32_(n);        // floor(log2(n * 2^k))
    if (e > 127) return TCAST_F32_INF;
    int q = (e < -126 ? -126 : e) - 23;     // float32 quantum at that magnitude
    // k >= q: n * 2^(k-q) < 2^24 (no rounding); else round off q - k bits
    uint32_t mi = (k >= q) ? (n << (k - q)) : tcast_round_shift_(n, q - k, TCAST_ROUND_EVEN, 0u);
    if (e < -126) return mi;  // subnormal (mi = 2^23 after a carry is the smallest normal: right bits)
    // mi in [2^23, 2^24]: adding it to the exponent field one below lets a carry bump the binade
    // (2^24 at e = 127 gives exactly the Inf pattern)
    return ((uint32_t)(e + 126) << 23) + mi;
}

// The zero result of format f for an input of sign bit `sign` (0 or 0x80000000): section 1.3
// steps 3 and 4 (sign kept in ieee / fn mode, +0 in fnuz mode and for ints).
static inline HOST_DEVICE float tcast_zero_(const TcastNumberSpec* f, uint32_t sign) {
    return tcast_f32_from_bits(f->signed_zero ? sign : 0u);
}

// ----------------------------------------------------------------------------------------------
// float32 arithmetic with RNE at every operation (sections 4b, 4c)

#ifdef __CUDA_ARCH__
// Inline PTX without .ftz: subnormal operands and results are kept (see the top of the file).
#define TCAST_PTX_F32_OP_(op, a, b)                                            \
    float r_;                                                                  \
    asm(op ".rn.f32 %0, %1, %2;" : "=f"(r_) : "f"(a), "f"(b));                 \
    return r_
static inline __device__ float tcast_add_rn_dev_(float a, float b) { TCAST_PTX_F32_OP_("add", a, b); }
static inline __device__ float tcast_sub_rn_dev_(float a, float b) { TCAST_PTX_F32_OP_("sub", a, b); }
static inline __device__ float tcast_mul_rn_dev_(float a, float b) { TCAST_PTX_F32_OP_("mul", a, b); }
static inline __device__ float tcast_div_rn_dev_(float a, float b) { TCAST_PTX_F32_OP_("div", a, b); }
#undef TCAST_PTX_F32_OP_
#define TCAST_F32_OP_(name, op) return tcast_##name##_rn_dev_(a, b)
#else
// (float)(double op double) is correctly rounded for float operands (double rounding is innocuous
// with 53 >= 2 * 24 + 2 bits). The volatile store is what keeps it a separate operation: GCC (GNU C
// defaults to -ffp-contract=fast) otherwise sees a float multiply feeding a float subtract and fuses
// them into one FMA, which changed n * scale - zero of the uint path (dev/test/test_tcast_reference.py
// test_c_float_zero_point_not_fused).
#define TCAST_F32_OP_(name, op)                           \
    volatile float r_ = (float)((double)a op (double)b); \
    return r_
#endif

static inline HOST_DEVICE float tcast_add_rn(float a, float b) { TCAST_F32_OP_(add, +); }  // a + b, float32 RNE
static inline HOST_DEVICE float tcast_sub_rn(float a, float b) { TCAST_F32_OP_(sub, -); }  // a - b, float32 RNE
static inline HOST_DEVICE float tcast_mul_rn(float a, float b) { TCAST_F32_OP_(mul, *); }  // a * b, float32 RNE
static inline HOST_DEVICE float tcast_div_rn(float a, float b) { TCAST_F32_OP_(div, /); }  // a / b, float32 RNE
#undef TCAST_F32_OP_

// ----------------------------------------------------------------------------------------------
// Element casts

// Flags an element cast reports (section 4.5); a NULL flags pointer is allowed everywhere.
#define TCAST_FLAG_SATURATED 1u  // finite input whose rounded (scaled) magnitude exceeded max / n clamped
#define TCAST_FLAG_FLUSHED 2u    // non-zero finite input whose output is zero

static inline HOST_DEVICE void tcast_set_flags_(unsigned* flags, unsigned f) {
    if (flags) *flags = f;
}

// Flags of a finite input x with result bits rb and saturation sat.
static inline HOST_DEVICE unsigned tcast_flags_(uint32_t xbits, uint32_t rbits, int sat) {
    unsigned f = sat ? TCAST_FLAG_SATURATED : 0u;
    if ((xbits & 0x7FFFFFFFu) != 0 && (rbits & 0x7FFFFFFFu) == 0) f |= TCAST_FLAG_FLUSHED;
    return f;
}

// Section 4a element step (also the unscaled cast with s = 0): y = x / 2^s (exact), cast y to the
// float (or int fixed-point) format f with round mode r (1.3 step 4: quantum 2^(max(floor(log2
// |y|), emin) - mbits), saturation at max in every mode), multiply by 2^s (exact), and round to
// float32 once (RNE; below 2^-126 onto the subnormal grid, >= 2^128 to Inf). x must be finite (a
// NaN / Inf input gives NaN: groups holding them are NaN, section 4.3). u: the element's random
// bits (tcast_random_bits), used by TCAST_ROUND_STOCHASTIC only.
// Reading: the element cast inside 4a is not rounded to float32 before the multiplication by
// 2^s (y itself may lie outside the float32 range); only the final product is.
static inline HOST_DEVICE float tcast_quantize_exp(const TcastNumberSpec* f, float x, int s, TcastRound r, uint32_t u,
                                                   unsigned* flags) {
    uint32_t xb = tcast_f32_bits(x), sign = xb & 0x80000000u, a = xb & 0x7FFFFFFFu;
    tcast_set_flags_(flags, 0u);
    if (a >= TCAST_F32_INF) return tcast_f32_from_bits(TCAST_F32_QNAN);
    if (a == 0) return tcast_zero_(f, sign);
    uint32_t m;
    int p = tcast_split_(a, &m) - s;  // |y| = m * 2^p
    int e = p + 23;
    int eq = e > f->emin ? e : f->emin;
    int q = eq - f->mbits;            // the quantum of f at |y|: q - p >= 23 - mbits >= 0
    uint32_t n = tcast_round_shift_(m, q - p, r, u);
    int sat = eq > f->emax || (eq == f->emax && n > f->max_mant);
    if (sat) {
        n = f->max_mant;
        q = f->emax - f->mbits;
    }
    // n = 0: the format's zero (sign rule of 1.3); n > 0 rounding to 0 in float32 keeps the sign (IEEE)
    uint32_t rb = n ? (tcast_f32_rne_bits_(n, q + s) | sign) : tcast_f32_bits(tcast_zero_(f, sign));
    tcast_set_flags_(flags, tcast_flags_(xb, rb, sat));
    return tcast_f32_from_bits(rb);
}

// Sections 1.3 and 4d: the element-wise cast of x to the float format f (an int format
// works too, in its fixed-point view) times the fixed scale 2^s, s = N of pN (0: the unscaled cast of
// 1.3), with round mode r: NaN -> NaN; +-Inf -> +-Inf (ieee) or +-max * 2^s (fn, fnuz, ints; rounded
// to float32, so Inf again if it exceeds FLT_MAX); zeros keep their sign except in fnuz mode and for
// ints; everything else as tcast_quantize_exp with exponent s (y = x / 2^s exact, one rounding to
// f's grid, one to float32: no double rounding). Only finite inputs can set flags.
static inline HOST_DEVICE float tcast_cast_fixed(const TcastNumberSpec* f, float x, int s, TcastRound r, uint32_t u,
                                                 unsigned* flags) {
    uint32_t xb = tcast_f32_bits(x);
    if ((xb & 0x7FFFFFFFu) == TCAST_F32_INF) {
        tcast_set_flags_(flags, 0u);
        if (f->infnan == TCAST_INFNAN_IEEE) return x;
        return tcast_f32_from_bits(tcast_f32_rne_bits_(f->max_mant, f->emax - f->mbits + s) | (xb & 0x80000000u));
    }
    return tcast_quantize_exp(f, x, s, r, u, flags);  // NaN -> canonical NaN there
}

// Section 1.3: the unscaled cast of x to f (tcast_cast_fixed with s = 0); also how scales and zero
// points are cast to their formats (4b, 4c).
static inline HOST_DEVICE float tcast_cast_element(const TcastNumberSpec* f, float x, TcastRound r, uint32_t u,
                                                   unsigned* flags) {
    return tcast_cast_fixed(f, x, 0, r, u, flags);
}

// |y| rounded to an integer with mode r, for float32 y; magnitudes of 2^24 and more (beyond every
// int / uint range, whose maxint is at most 65535) give 2^24, so that clamping still sees them.
static inline HOST_DEVICE uint32_t tcast_round_int_mag_(uint32_t ybits, TcastRound r, uint32_t u) {
    uint32_t a = ybits & 0x7FFFFFFFu;
    if (a == 0) return 0;
    if (a >= 0x4B800000u) return 1u << 24;  // |y| >= 2^24 (Inf included)
    uint32_t m;
    int p = tcast_split_(a, &m);  // p <= 0 here
    return tcast_round_shift_(m, -p, r, u);
}

// Signed round_R(y) (the mode acts on |y|, as section 1.4 defines it; the sign is put back).
static inline HOST_DEVICE int32_t tcast_round_int_(float y, TcastRound r, uint32_t u) {
    uint32_t yb = tcast_f32_bits(y);
    int32_t n = (int32_t)tcast_round_int_mag_(yb, r, u);
    return (yb & 0x80000000u) ? -n : n;
}

// Clamp n to [lo, hi]; *clamped = 1 if it moved.
static inline HOST_DEVICE int32_t tcast_clamp_(int32_t n, int32_t lo, int32_t hi, int* clamped) {
    if (n < lo) { *clamped = 1; return lo; }
    if (n > hi) { *clamped = 1; return hi; }
    return n;
}

// Shared tail of 4b / 4c: a NaN intermediate (possible only with an infinite scale or zero point,
// from formats whose max exceeds FLT_MAX) gives the canonical NaN; flags as usual.
static inline HOST_DEVICE float tcast_int_result_(uint32_t xb, float res, int sat, unsigned* flags) {
    uint32_t rb = tcast_f32_bits(res);
    if ((rb & 0x7FFFFFFFu) > TCAST_F32_INF) rb = TCAST_F32_QNAN;
    tcast_set_flags_(flags, tcast_flags_(xb, rb, sat));
    return tcast_f32_from_bits(rb);
}

// Section 4b element: intK data f with a float scale (non-zero; the caller handles scale = 0):
// y = x / scale; n = clamp(round_R(y), -maxint, maxint); result = n * scale (float32 RNE each).
// n = 0 gives +0 (n is an integer). x must be finite.
static inline HOST_DEVICE float tcast_quantize_int(const TcastNumberSpec* f, float x, float scale, TcastRound r, uint32_t u,
                                                   unsigned* flags) {
    uint32_t xb = tcast_f32_bits(x);
    float y = tcast_div_rn(x, scale);
    if ((tcast_f32_bits(y) & 0x7FFFFFFFu) > TCAST_F32_INF) return tcast_int_result_(xb, y, 0, flags);
    int sat = 0;
    int32_t n = tcast_clamp_(tcast_round_int_(y, r, u), -f->maxint, f->maxint, &sat);
    return tcast_int_result_(xb, tcast_mul_rn((float)n, scale), sat, flags);
}

// Section 4c element, float zero point: n = clamp(round_R((x + zero) / scale), 0, maxint);
// result = n * scale - zero (float32 RNE each). Clamping at either end counts as saturation.
static inline HOST_DEVICE float tcast_quantize_uint(const TcastNumberSpec* f, float x, float scale, float zero, TcastRound r,
                                                    uint32_t u, unsigned* flags) {
    uint32_t xb = tcast_f32_bits(x);
    float y = tcast_div_rn(tcast_add_rn(x, zero), scale);
    if ((tcast_f32_bits(y) & 0x7FFFFFFFu) > TCAST_F32_INF) return tcast_int_result_(xb, y, 0, flags);
    int sat = 0;
    int32_t n = tcast_clamp_(tcast_round_int_(y, r, u), 0, f->maxint, &sat);
    return tcast_int_result_(xb, tcast_sub_rn(tcast_mul_rn((float)n, scale), zero), sat, flags);
}

// Section 4c element, int zero point (an integer from tcast_uint_zero_int):
// n = clamp(round_R(x / scale) + zero, 0, maxint); result = (n - zero) * scale (float32 RNE).
static inline HOST_DEVICE float tcast_quantize_uint_izero(const TcastNumberSpec* f, float x, float scale, int32_t zero,
                                                          TcastRound r, uint32_t u, unsigned* flags) {
    uint32_t xb = tcast_f32_bits(x);
    float y = tcast_div_rn(x, scale);
    if ((tcast_f32_bits(y) & 0x7FFFFFFFu) > TCAST_F32_INF) return tcast_int_result_(xb, y, 0, flags);
    int sat = 0;
    int32_t n = tcast_clamp_(tcast_round_int_(y, r, u) + zero, 0, f->maxint, &sat);
    return tcast_int_result_(xb, tcast_mul_rn((float)(n - zero), scale), sat, flags);
}

// ----------------------------------------------------------------------------------------------
// Group scales (section 4a-4c)

// 32 random bits of element `index` (the flat row-major index in the tensor) under `seed`
// (section 1.4; the same function as fp8_random_bits).
static inline HOST_DEVICE uint32_t tcast_random_bits(uint64_t seed, uint64_t index) {
    return fp8_random_bits(seed, index);
}

// Section 4a: the exponent s of the group scale 2^s for float or int data f and exponent scale
// sc, from the group's amax = max |x| (finite; float32 subnormals exact): amax = 0 gives -bias
// (sc->emin); else floor(log2 amax) - emax_f, plus 1 in MIDMAX mode when amax / 2^s > midmax_f
// (compared exactly on mantissa integers), then raised to sc->emin. *overflow = 1 when s exceeds
// sc->emax (the group is NaN, the scale's NaN code) or when amax is not finite.
static inline HOST_DEVICE int tcast_exp_scale(const TcastNumberSpec* f, const TcastNumberSpec* sc, TcastScaleMode mode,
                                              float amax, int* overflow) {
    uint32_t a = tcast_f32_bits(amax) & 0x7FFFFFFFu;
    *overflow = a >= TCAST_F32_INF;
    if (a == 0 || *overflow) return sc->emin;
    uint32_t m;
    int s = tcast_split_(a, &m) + 23 - f->emax;
    // amax / 2^s = m * 2^(emax - 23) > midmax = midmax_mant * 2^(emax - mbits - 1)
    if (mode == TCAST_SCALE_MIDMAX && ((uint64_t)m << (f->mbits + 1)) > ((uint64_t)f->midmax_mant << 23)) s++;
    if (s < sc->emin) s = sc->emin;
    if (s > sc->emax) *overflow = 1;
    return s;
}

// Section 4b: the float scale of a group of intK data f, cast_even(amax / maxint, sc) with the
// division in float32 RNE and the cast of section 1.3 (mode even, saturating). May be 0.
static inline HOST_DEVICE float tcast_int_scale(const TcastNumberSpec* f, const TcastNumberSpec* sc, float amax) {
    return tcast_cast_element(sc, tcast_div_rn(amax, (float)f->maxint), TCAST_ROUND_EVEN, 0u, NULL);
}

// Section 4c: the float scale of a group of uintK data f, cast_even((tmax - tmin) / maxint, sc)
// (float32 RNE subtract and divide), with tmin = min(min x, 0), tmax = max(max x, 0). May be 0.
static inline HOST_DEVICE float tcast_uint_scale(const TcastNumberSpec* f, const TcastNumberSpec* sc, float tmin, float tmax) {
    return tcast_cast_element(sc, tcast_div_rn(tcast_sub_rn(tmax, tmin), (float)f->maxint), TCAST_ROUND_EVEN, 0u, NULL);
}

// -tmin for tmin <= 0, with -0 for a zero tmin avoided (a real 0 has no sign).
static inline HOST_DEVICE float tcast_neg_tmin_(float tmin) {
    uint32_t b = tcast_f32_bits(tmin);
    return tcast_f32_from_bits((b & 0x7FFFFFFFu) ? (b ^ 0x80000000u) : 0u);
}

// Section 4c, float zero point of format z: cast_even(-tmin, z).
static inline HOST_DEVICE float tcast_uint_zero_float(const TcastNumberSpec* z, float tmin) {
    return tcast_cast_element(z, tcast_neg_tmin_(tmin), TCAST_ROUND_EVEN, 0u, NULL);
}

// Section 4c, int zero point of format z (intK): clamp(round_even(-tmin / scale), -maxint_z,
// maxint_z), the division in float32 RNE; scale must be non-zero.
static inline HOST_DEVICE int32_t tcast_uint_zero_int(const TcastNumberSpec* z, float tmin, float scale) {
    int clamped = 0;
    return tcast_clamp_(tcast_round_int_(tcast_div_rn(tcast_neg_tmin_(tmin), scale), TCAST_ROUND_EVEN, 0u), -z->maxint,
                        z->maxint, &clamped);
}

// Accumulated facts of a group, all on bit patterns (exact, FTZ-proof, and mergeable in any
// order, e.g. across warp lanes: every field is a max / min / or of 32-bit integers).
typedef struct {
    uint32_t amax;     // max |x| over the finite elements, float32 bits (sign clear)
    int32_t tmin;      // min(min x, 0) over the finite elements, as an ordered key (tcast_key_)
    int32_t tmax;      // max(max x, 0), ordered key
    uint32_t special;  // 1 if the group holds a NaN or an Inf
} TcastGroupAcc;

// Ordered key of a finite float32: compares like the value (both zeros give 0).
static inline HOST_DEVICE int32_t tcast_key_(uint32_t b) {
    int32_t a = (int32_t)(b & 0x7FFFFFFFu);
    return (b & 0x80000000u) ? -a : a;
}

static inline HOST_DEVICE float tcast_from_key_(int32_t k) {
    return tcast_f32_from_bits(k < 0 ? ((uint32_t)(-k) | 0x80000000u) : (uint32_t)k);
}

// An empty group (amax 0, tmin = tmax = 0).
static inline HOST_DEVICE TcastGroupAcc tcast_acc_init(void) {
    TcastGroupAcc acc;
    acc.amax = 0u;
    acc.tmin = 0;
    acc.tmax = 0;
    acc.special = 0u;
    return acc;
}

// Adds one element.
static inline HOST_DEVICE void tcast_acc_add(TcastGroupAcc* acc, float x) {
    uint32_t b = tcast_f32_bits(x), a = b & 0x7FFFFFFFu;
    if (a >= TCAST_F32_INF) {
        acc->special = 1u;
        return;
    }
    int32_t k = tcast_key_(b);
    if (a > acc->amax) acc->amax = a;
    if (k < acc->tmin) acc->tmin = k;
    if (k > acc->tmax) acc->tmax = k;
}

// Merges another partial accumulation into acc.
static inline HOST_DEVICE void tcast_acc_merge(TcastGroupAcc* acc, TcastGroupAcc other) {
    if (other.amax > acc->amax) acc->amax = other.amax;
    if (other.tmin < acc->tmin) acc->tmin = other.tmin;
    if (other.tmax > acc->tmax) acc->tmax = other.tmax;
    acc->special |= other.special;
}

// Scale exponent histogram (section 4.5): bin 0 = under, bins 1 .. = exponents TCAST_HIST_MIN ..
// TCAST_HIST_MAX, last bin = over. The range covers every exponent a valid scale can have: exponent
// scales s in [-bias, 2^X - 2 - bias] with bias <= TCAST_BIAS_MAX and X <= 8, float scales
// floor(log2 scale) in [-149, 127]. So `under` counts groups whose float scale is 0 (their outputs
// are +0), and `over` counts exponent-scale overflow (s > emax of the scale: the group is NaN) and
// infinite float scales. Groups holding NaN / Inf (4.3), unscaled casts and fixed scales (pN: no
// scale is derived; --cast-stats prints N from the type) add nothing.
#define TCAST_BIAS_MAX 1024
#define TCAST_HIST_MIN (-TCAST_BIAS_MAX)
#define TCAST_HIST_MAX 255
#define TCAST_HIST_UNDER 0
#define TCAST_HIST_OVER (TCAST_HIST_MAX - TCAST_HIST_MIN + 2)
#define TCAST_HIST_BINS (TCAST_HIST_MAX - TCAST_HIST_MIN + 3)

// Histogram bin of scale exponent e.
static inline HOST_DEVICE int tcast_hist_bin(int e) {
    if (e < TCAST_HIST_MIN) return TCAST_HIST_UNDER;
    if (e > TCAST_HIST_MAX) return TCAST_HIST_OVER;
    return e - TCAST_HIST_MIN + 1;
}

// The exponent of histogram bin b (meaningless for under / over).
static inline HOST_DEVICE int tcast_hist_exp(int b) {
    return b - 1 + TCAST_HIST_MIN;
}

// Histogram bin of a float scale: floor(log2 scale); 0 -> under, Inf -> over.
static inline HOST_DEVICE int tcast_hist_bin_float_(float scale) {
    uint32_t a = tcast_f32_bits(scale) & 0x7FFFFFFFu;
    if (a == 0) return TCAST_HIST_UNDER;
    if (a >= TCAST_F32_INF) return TCAST_HIST_OVER;
    return tcast_hist_bin(tcast_ilog2_(a));
}

// How the elements of a group are cast.
typedef enum {
    TCAST_GROUP_UNSCALED = 0,  // no group scale: every element alone (1.3), times the type's fixed scale 2^fixed_exp (pN)
    TCAST_GROUP_NAN = 1,       // NaN / Inf in the group (4.3) or exponent-scale overflow (4a): all NaN
    TCAST_GROUP_ZERO = 2,      // float scale 0 (4b, 4c): all +0
    TCAST_GROUP_EXP = 3,       // exponent scale 2^s (4a)
    TCAST_GROUP_INT = 4,       // intK data, float scale (4b)
    TCAST_GROUP_UINT_F = 5,    // uintK data, float scale, float zero point (4c)
    TCAST_GROUP_UINT_I = 6     // uintK data, float scale, int zero point (4c)
} TcastGroupMode;

// A group's scale: what tcast_quantize needs for every element of the group.
typedef struct {
    TcastGroupMode mode;
    int s;          // EXP: the scale exponent (UNSCALED groups read dt->fixed_exp instead)
    float scale;    // INT, UINT_*: the float scale (non-zero)
    float zero;     // UINT_F: the float zero point
    int32_t izero;  // UINT_I: the int zero point
    int hist;       // histogram bin of this group's scale (tcast_hist_bin), or -1 for none
} TcastGroupScale;

// Sections 4.3 and 4a-4c: the scale of a group of data type dt from its accumulation.
static inline HOST_DEVICE TcastGroupScale tcast_group_scale(const TcastDataType* dt, TcastGroupAcc acc) {
    TcastGroupScale g;
    g.mode = TCAST_GROUP_UNSCALED;
    g.s = 0;
    g.scale = 0.0f;
    g.zero = 0.0f;
    g.izero = 0;
    g.hist = -1;
    if (!dt->has_scale) return g;
    if (acc.special) {
        g.mode = TCAST_GROUP_NAN;
        return g;
    }
    const TcastNumberSpec* f = &dt->number;
    const TcastNumberSpec* sc = &dt->scale.scale;
    float amax = tcast_f32_from_bits(acc.amax);
    if (sc->kind == TCAST_KIND_EXPONENT) {
        int overflow;
        g.s = tcast_exp_scale(f, sc, dt->scale_mode, amax, &overflow);
        g.mode = overflow ? TCAST_GROUP_NAN : TCAST_GROUP_EXP;
        g.hist = overflow ? TCAST_HIST_OVER : tcast_hist_bin(g.s);
        return g;
    }
    float tmin = tcast_from_key_(acc.tmin);
    if (f->kind == TCAST_KIND_UINT) {
        g.scale = tcast_uint_scale(f, sc, tmin, tcast_from_key_(acc.tmax));
    } else {
        g.scale = tcast_int_scale(f, sc, amax);
    }
    g.hist = tcast_hist_bin_float_(g.scale);
    if ((tcast_f32_bits(g.scale) & 0x7FFFFFFFu) == 0) {
        g.mode = TCAST_GROUP_ZERO;
    } else if (f->kind != TCAST_KIND_UINT) {
        g.mode = TCAST_GROUP_INT;
    } else if (dt->scale.zero.kind == TCAST_KIND_INT) {
        g.mode = TCAST_GROUP_UINT_I;
        g.izero = tcast_uint_zero_int(&dt->scale.zero, tmin, g.scale);
    } else {
        g.mode = TCAST_GROUP_UINT_F;
        g.zero = tcast_uint_zero_float(&dt->scale.zero, tmin);
    }
    return g;
}

// The virtual cast of one element x of a group with scale g (from tcast_group_scale) to data
// type dt; u = tcast_random_bits(seed, flat index) (read only by @stochastic). *flags (may be
// NULL) gets TCAST_FLAG_SATURATED / TCAST_FLAG_FLUSHED for section 4.5.
static inline HOST_DEVICE float tcast_quantize(const TcastDataType* dt, const TcastGroupScale* g, float x, uint32_t u,
                                               unsigned* flags) {
    switch (g->mode) {
    case TCAST_GROUP_UNSCALED: return tcast_cast_fixed(&dt->number, x, dt->fixed_exp, dt->round, u, flags);
    case TCAST_GROUP_EXP: return tcast_quantize_exp(&dt->number, x, g->s, dt->round, u, flags);
    case TCAST_GROUP_INT: return tcast_quantize_int(&dt->number, x, g->scale, dt->round, u, flags);
    case TCAST_GROUP_UINT_F: return tcast_quantize_uint(&dt->number, x, g->scale, g->zero, dt->round, u, flags);
    case TCAST_GROUP_UINT_I: return tcast_quantize_uint_izero(&dt->number, x, g->scale, g->izero, dt->round, u, flags);
    case TCAST_GROUP_ZERO:
        tcast_set_flags_(flags, tcast_flags_(tcast_f32_bits(x), 0u, 0));
        return 0.0f;
    case TCAST_GROUP_NAN:
    default:
        tcast_set_flags_(flags, 0u);
        return tcast_f32_from_bits(TCAST_F32_QNAN);
    }
}

// ----------------------------------------------------------------------------------------------
// M:N sparsity (section 4.1)

// Magnitude key for pruning: orders like |x|, with every NaN equal and above +Inf.
static inline HOST_DEVICE uint32_t tcast_sparse_key(float x) {
    uint32_t a = tcast_f32_bits(x) & 0x7FFFFFFFu;
    return a > TCAST_F32_INF ? TCAST_F32_INF + 1u : a;
}

// 1 if element j (key kj) ranks before element i (key ki) of the same group: larger magnitude,
// or equal magnitude and lower index. Element i survives M:N iff fewer than M elements beat it.
static inline HOST_DEVICE int tcast_sparse_beats(uint32_t kj, int j, uint32_t ki, int i) {
    return kj > ki || (kj == ki && j < i);
}

// Prunes one group g[0..n) in place (n <= TCAST_SPARSE_N_MAX): keeps the m largest magnitudes
// (ties: lower index first, NaN above everything) and sets the others to +0.
static inline HOST_DEVICE void tcast_sparse_prune(float* g, int n, int m) {
    uint32_t key[TCAST_SPARSE_N_MAX];
    for (int i = 0; i < n; i++) key[i] = tcast_sparse_key(g[i]);
    for (int i = 0; i < n; i++) {
        int rank = 0;
        for (int j = 0; j < n; j++) rank += tcast_sparse_beats(key[j], j, key[i], i);
        if (rank >= m) g[i] = 0.0f;
    }
}

#endif  // LLMC_NUMERICS_TCAST_QUANT_H
