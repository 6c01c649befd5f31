// tcast_fp8_hw.cuh - one primitive: round a pair of float32 values to OCP FP8 E4M3 or E5M2 values (round to nearest
// even, saturating at +-max) with the hardware conversions of sm_89+, returned as float32. It is the element step of
// the TensorCast round-to-nearest-even quantizer (TcastQRne, tcast_cast_elem.cuh) for the exponent-scaled data types
// whose element format is exactly e4m3fn or e5m2 (tcast_fp8_of: mxfp8e4, mxfp8e5, their other tiles, per-tensor and
// channel scales), so the cast passes, the GELU-sites kernel and the residual + LayerNorm-sites kernel all take it;
// the attention-site casts can call it the same way.
//
//   tcast_fp8x2_round<F>(y)   F = TCAST_FP8_E4M3 or TCAST_FP8_E5M2; y: two finite float32 values (already divided by
//                             the group scale); returns the two values rounded to F's grid, as float32 (exact).
//   tcast_fp8x2_encode<F>(y), tcast_fp8x2_decode<F>(q)   its two halves: the two codes as 16 bits, and back.
//   tcast_fp8_of(f)           which of the two a TensorCast number format is exactly (TCAST_FP8_NONE: neither).
//
// Device, sm_89 and later (PTX ISA, "Data Movement and Conversion Instructions: cvt", PTX ISA 7.8+; the FP8 forms):
//   cvt.rn.satfinite.e4m3x2.f32 d, a, b   two f32 -> two E4M3 codes in the 16-bit d, a's in the upper byte, b's in
//                                          the lower; round to nearest even; .satfinite: a magnitude beyond MAX_NORM
//                                          (448; +-Inf included) gives +-MAX_NORM, NaN gives NaN
//   cvt.rn.f16x2.e4m3x2 d, a               two E4M3 codes -> two f16 (exact: every E4M3 and E5M2 value is an f16 value;
//                                          E5M2 is f16 with the low 8 bits dropped)
//   cvt.f32.f16 d, a                       f16 -> f32, exact (no .ftz here, and .ftz would touch f32 subnormals only:
//                                          every FP8 value is an f32 normal or zero)
// and the same with e5m2x2 (MAX_NORM 57344). SASS (sm_90, CUDA 13): F2FP.SATFINITE.E4M3.F32.PACK_AB,
// F2FP.F16.E4M3.UNPACK_B and two HADD2.F32: 4 instructions a pair, against ~11 an element for the float32 "magic
// add" rounding of tcast_rne_elem. Written as inline PTX (not cuda_fp8.h's __nv_cvt_* wrappers) so that the
// instructions are exactly these, whatever the wrappers' saturation and interpretation arguments compile to.
// Host, and device code for older GPUs: the twin fp8_decode(fp8_encode_rne(y, saturate = 1)) of
// llmc/numerics/fp8.h, OFP8 section 5.2's conversion with saturation, which the hardware implements (the FP8
// backend relies on that: dev/cuda/fp8_quant.cu checks the hardware against fp8_encode_rne on all 2^32 patterns).
//
// As a TensorCast element cast (doc/TCAST.md 1.3 with F and mode `even`; 4a's element step on y = x / 2^s) the
// result is tcast_quantize_exp(F, y, 0, TCAST_ROUND_EVEN)'s for every FINITE float32 y:
//   - rounding: nearest even on F's grid, subnormals included (E4M3 2^-9 .. 7 * 2^-9, E5M2 2^-16 .. 3 * 2^-16),
//     values at most half the smallest subnormal to zero (exactly half: a tie, to the even zero): the same;
//   - overflow: TensorCast saturates every finite y whose rounded magnitude exceeds max to +-max (1.3 step 4, e5m2
//     included, although e5m2 has Inf: only an Inf INPUT stays Inf there); .satfinite gives +-max for every |y|
//     beyond max, and a y between max and the midpoint above it rounds to max in both: the same for finite y. An
//     Inf input differs for E5M2 (TensorCast: Inf, here: max), so callers pass finite y only; the quantizer sends
//     Inf and NaN elements to tcast_quantize;
//   - zeros: a zero result keeps y's sign in both (F's signed-zero rule: fn and ieee keep it);
//   - float32 subnormal y: zero with y's sign in both (far below half of F's smallest subnormal). The quantizer's
//     y = x * 2^-s runs with --use_fast_math's flush to zero, which gives the same signed zero before the call.
// dev/cuda/tcast.cu checks this on the device for every finite float32 pattern, both formats, against the device
// build of tcast_quantize_exp (integer code, immune to --use_fast_math), on millions of fresh random and planted
// values against the host build, and the host twin against tcast_quantize_exp.
#pragma once

#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/numerics/fp8.h"
#include "llmc/numerics/tcast.h"

// The FP8 element formats with a hardware conversion. Values are part of TcastKernelArgs::rne_fp8.
enum TcastFp8 { TCAST_FP8_NONE = 0, TCAST_FP8_E4M3 = 1, TCAST_FP8_E5M2 = 2 };

// Which hardware FP8 format the TensorCast number format f is exactly: e4m3fn (4 exponent bits, 3 mantissa bits,
// bias 7, fn: no Inf, max 448) or e5m2 (5, 2, bias 15, ieee: max 57344); anything else (fnuz variants, other
// biases, ints) TCAST_FP8_NONE. Whether a cast may use it also depends on its round mode and scale (the RNE
// quantizer's conditions, tcast_kernel_args).
static inline HOST_DEVICE TcastFp8 tcast_fp8_of(const TcastNumberSpec& f) {
    if (f.kind != TCAST_KIND_FLOAT) return TCAST_FP8_NONE;
    if (f.ebits == 4 && f.mbits == 3 && f.bias == 7 && f.infnan == TCAST_INFNAN_FN) return TCAST_FP8_E4M3;
    if (f.ebits == 5 && f.mbits == 2 && f.bias == 15 && f.infnan == TCAST_INFNAN_IEEE) return TCAST_FP8_E5M2;
    return TCAST_FP8_NONE;
}

// The two FP8 codes of y.x (lower byte) and y.y (upper byte): RNE with saturation (see the top of the file), finite
// inputs only. The codes of a value tcast_fp8x2_round returns are exact (it is on F's grid).
template <int F>
static inline HOST_DEVICE uint16_t tcast_fp8x2_encode(float2 y) {
    static_assert(F == TCAST_FP8_E4M3 || F == TCAST_FP8_E5M2, "tcast_fp8x2_encode: F is TCAST_FP8_E4M3 or TCAST_FP8_E5M2");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short q;
    if (F == TCAST_FP8_E4M3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(q) : "f"(y.y), "f"(y.x));
    else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(q) : "f"(y.y), "f"(y.x));
    return q;
#else
    const FP8Format f = fp8_format(F == TCAST_FP8_E4M3 ? FP8_E4M3FN : FP8_E5M2);
    return (uint16_t)(fp8_encode_rne(f, y.x, 1) | (fp8_encode_rne(f, y.y, 1) << 8));
#endif
}

// The float32 values of two FP8 codes (lower byte -> .x, upper -> .y), exact.
template <int F>
static inline HOST_DEVICE float2 tcast_fp8x2_decode(uint16_t q) {
    static_assert(F == TCAST_FP8_E4M3 || F == TCAST_FP8_E5M2, "tcast_fp8x2_decode: F is TCAST_FP8_E4M3 or TCAST_FP8_E5M2");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned int h;  // f16x2: the upper code's value in the upper half, the lower's in the lower
    if (F == TCAST_FP8_E4M3) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(q));
    else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h) : "h"(q));
    float2 r;
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.f32.f16 %0, lo;\n\tcvt.f32.f16 %1, hi;\n\t}" : "=f"(r.x), "=f"(r.y) : "r"(h));
    return r;
#else
    const FP8Format f = fp8_format(F == TCAST_FP8_E4M3 ? FP8_E4M3FN : FP8_E5M2);
    return make_float2(fp8_decode(f, (uint8_t)(q & 0xFFu)), fp8_decode(f, (uint8_t)(q >> 8)));
#endif
}

// y.x, y.y rounded to F's values (see the top of the file): finite inputs only.
template <int F>
static inline HOST_DEVICE float2 tcast_fp8x2_round(float2 y) {
    return tcast_fp8x2_decode<F>(tcast_fp8x2_encode<F>(y));
}

// Harness switch (host, per translation unit): 0 makes tcast_kernel_args take the float32 rounding of
// tcast_rne_elem for every type, so that a harness can check and time both element steps in one run. Default 1;
// the trainer never changes it.
static inline int* tcast_fp8_hw_switch_(void) {
    static int on = 1;
    return &on;
}
static inline void tcast_fp8_hw_enable(int on) { *tcast_fp8_hw_switch_() = on != 0; }
static inline int tcast_fp8_hw_enabled(void) { return *tcast_fp8_hw_switch_(); }
// Harnesses: the float32 element step for the scope's lifetime (a reference's casts), the hardware step (the default)
// after it.
struct TcastFp32StepScope {
    TcastFp32StepScope() { tcast_fp8_hw_enable(0); }
    ~TcastFp32StepScope() { tcast_fp8_hw_enable(1); }
};
