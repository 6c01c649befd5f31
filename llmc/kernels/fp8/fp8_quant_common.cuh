// fp8_quant_common.cuh - what every FP8 quantization kernel of llmc/kernels/fp8/ shares: the conventions
// below, the launch constants, host-side helpers (argument checks, alignment, dispatch on the FP8 format) and
// the device helpers (scaled multiply, encoders of one, N or packed codes, 16-byte loads as floats).
// The kernel families are in fp8_amax.cuh, fp8_quantize.cuh, fp8_block_layout.cuh / fp8_block_scale.cuh,
// fp8_dequant.cuh and tcfp12_split.cuh; llmc/kernels/fp8/fp8_quant.cuh includes them all.
//
// Formats. Every conversion goes through llmc/numerics/fp8.h, the single definition of the four FP8 formats
// (fp8_encode_rne / fp8_encode_sr / fp8_decode, always with saturate = 1: values beyond the largest finite
// value and +-Inf become +-max, NaN stays NaN). One exception, made for speed: with kind E4M3FN or E5M2
// on sm_89+, the round-to-nearest-even path of the vectorized kernels converts two values at a time with
// the hardware conversion (cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 through __nv_cvt_float2_to_fp8x2). Both
// implement OFP8 round-to-nearest-even with saturation, so for every non-NaN float (+-Inf included) the
// code is fp8_encode_rne(.., 1)'s; dev/cuda/fp8_quant.cu checks this for all 2^32 float bit patterns. The
// NaN code is not pinned down by OFP8 (fp8.h: E4M3FN 0x7F | sign, E5M2 0x7E | sign; CUDA's own software
// path gives 0x7F for E4M3 whatever the sign), so NaN inputs are re-encoded with fp8_encode_rne. The
// kernels' codes are therefore bit-identical to fp8.h for every input.
//
// Scale conventions (fp8.h): the QUANT scale s multiplies before encoding, code = Q(x * s); the value of a
// code is decode(code) / s. The DEQUANT scale is inv_s = 1 / s (one float division, correctly rounded):
// that is what cuBLASLt takes as CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER (it computes
// D = inv_s_A * inv_s_B * sum(decode(a) decode(b))). With power-of-two scales (pow2 = 1, recommended) both
// are exact and decode(code) * inv_s == decode(code) / s. Launchers that compute scales write s and,
// where a pointer is given, inv_s.
//
// Arithmetic. x * s is one correctly rounded fp32 multiplication (__fmul_rn, never contracted into an
// FMA); decode(code) / s is __fdiv_rn; sums and differences are __fadd_rn / __fsub_rn. Under
// --use_fast_math (the Makefile's flags) these run with flush-to-zero: fp32 subnormal inputs and results
// become +-0 (sign kept). This matters only for |values| below 2^-126, which every FP8 format rounds to
// zero anyway, except in the TCFP-12 error-feedback buffer (a subnormal residual is stored as 0), and an
// fp32-subnormal amax, which the device treats as 0 (scale 1). Note: fp8_scale_from_amax (the
// non-power-of-two scale, fp8.h) contains a plain '/', which --use_fast_math compiles to an approximate
// division (div.approx.ftz.f32: up to 2 ulp, and 0 for divisors >= 2^126) in device code, so device non-pow2
// scales can differ from the host's by an ulp or two (and amax >= 2^126 gives the clamp 2^-126 instead of
// max / amax). The power-of-two scales are integer code and exact everywhere: prefer pow2 = 1.
//
// Layouts: every matrix is row-major. "rows x cols" input x; the transposed output is the row-major
// (cols, rows) matrix out[c * rows + r] = Q(x[r * cols + c]). Stochastic rounding draws its 32 random bits
// from fp8_random_bits(seed, i) with i = r * cols + c, the element's index in the SOURCE row-major order,
// so plain and transposed quantization give identical codes for the same seed.
//
// Determinism: no float atomics anywhere; reductions are max reductions of |x| compared as integer bit
// patterns (order independent) through per-block partials in a fixed order. NaN propagates: a NaN anywhere
// gives a NaN amax (canonical quiet NaN 0x7FC00000), and fp8_scale*_from_amax then return 1.
//
// Scratch: fp8_amax, fp8_amax_scale and tcfp12_split (per-tensor mode) need FP8_QUANT_SCRATCH_FLOATS
// floats (4 KiB) of device scratch, overwritten. Nothing here allocates memory.
//
// Vector paths: kernels use 16-byte global loads/stores when pointers are 16-byte aligned and the shapes
// allow it (stated per launcher); otherwise they fall back to element-wise code with identical results.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <cuda_fp8.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/numerics/fp8.h"

constexpr int FP8Q_THREADS = 256;            // every kernel below runs 256-thread blocks
constexpr int FP8Q_MAX_PARTIALS = 1024;      // max blocks of the first stage of an amax reduction
// Device scratch (floats) needed by fp8_amax, fp8_amax_scale and per-tensor tcfp12_split.
constexpr size_t FP8_QUANT_SCRATCH_FLOATS = FP8Q_MAX_PARTIALS;

// ------------------------------------------------------------------------------------------------
// Host-side helpers

static inline void fp8q_require(bool ok, const char* fn, const char* what) {
    if (!ok) {
        fprintf(stderr, "error: %s: %s\n", fn, what);
        exit(EXIT_FAILURE);
    }
}

static inline bool fp8q_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// Calls f(std::integral_constant<FP8Kind, kind>()) so that kernels can be specialized per format.
template <class F>
static inline void fp8q_with_kind(FP8Kind kind, F&& f) {
    switch (kind) {
    case FP8_E4M3FN: f(std::integral_constant<FP8Kind, FP8_E4M3FN>()); break;
    case FP8_E5M2: f(std::integral_constant<FP8Kind, FP8_E5M2>()); break;
    case FP8_E4M3FNUZ: f(std::integral_constant<FP8Kind, FP8_E4M3FNUZ>()); break;
    case FP8_E5M2FNUZ: f(std::integral_constant<FP8Kind, FP8_E5M2FNUZ>()); break;
    default: fp8q_require(false, "fp8_quant", "unknown FP8Kind");
    }
}

template <class F>
static inline void fp8q_with_bool(bool b, F&& f) {
    if (b) f(std::true_type());
    else f(std::false_type());
}

static inline int fp8q_grid_stride_blocks(size_t n) {
    const size_t b = ceil_div_sz(n > 0 ? n : 1, FP8Q_THREADS);
    return (int)(b < 4096 ? b : 4096);
}

// ------------------------------------------------------------------------------------------------
// Device helpers

static inline HOST_DEVICE float fp8q_float_from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof(f));
    return f;
}

// max |x| reduced as bit patterns: |x| bits compare like the values for non-NaN x, and every NaN (bits
// above 0x7F800000) beats +Inf, so a NaN anywhere wins. This turns the winning pattern into the amax.
static inline HOST_DEVICE float fp8q_amax_from_bits(uint32_t b) {
    return fp8q_float_from_bits(b > 0x7F800000u ? 0x7FC00000u : b);
}

// The scale a launcher computes from amax: fp8_scale_pow2_from_amax (pow2 != 0) or fp8_scale_from_amax.
static inline HOST_DEVICE float fp8q_scale_from_amax(FP8Format f, float amax, int margin, int pow2) {
    return pow2 ? fp8_scale_pow2_from_amax(f, amax, margin) : fp8_scale_from_amax(f, amax, margin);
}

__device__ __forceinline__ bool fp8q_isnan(float v) { return abs_bits(v) > 0x7F800000u; }

// x * s as one correctly rounded multiplication (__fmul_rn is never contracted), except that a NaN x is
// passed on as it is: the device's multiply returns the canonical (positive) NaN, which would lose the
// sign that fp8.h encodes into the NaN code (E4M3FN 0x7F | sign).
__device__ __forceinline__ float fp8q_scaled(float x, float s) { return fp8q_isnan(x) ? x : __fmul_rn(x, s); }

// One code, RNE or SR (random bits of element `idx`), straight from fp8.h.
template <FP8Kind KIND, bool SR>
__device__ __forceinline__ uint8_t fp8q_encode1(float v, uint64_t seed, uint64_t idx) {
    const FP8Format f = fp8_format(KIND);
    if constexpr (SR) return fp8_encode_sr(f, v, fp8_random_bits(seed, idx), 1);
    else return fp8_encode_rne(f, v, 1);
}

// N codes (N even) of already-scaled values v[0..N) whose elements have indices idx0 .. idx0 + N - 1.
// RNE for E4M3FN / E5M2 on sm_89+: hardware conversion of pairs, then (rarely) fp8.h for NaN inputs, whose
// hardware code differs (see the header comment). Everything else: fp8.h.
template <FP8Kind KIND, bool SR, int N>
__device__ __forceinline__ void fp8q_encode_n(uint8_t* codes, const float* v, uint64_t seed, uint64_t idx0) {
    const FP8Format f = fp8_format(KIND);
    if constexpr (SR) {
        #pragma unroll
        for (int k = 0; k < N; k++) codes[k] = fp8_encode_sr(f, v[k], fp8_random_bits(seed, idx0 + k), 1);
    } else {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
        if constexpr (KIND == FP8_E4M3FN || KIND == FP8_E5M2) {
            constexpr __nv_fp8_interpretation_t interp = KIND == FP8_E4M3FN ? __NV_E4M3 : __NV_E5M2;
            uint32_t mx = 0;
            #pragma unroll
            for (int k = 0; k < N; k += 2) {
                const uint32_t p = (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(v[k], v[k + 1]), __NV_SATFINITE, interp);
                codes[k] = (uint8_t)(p & 0xFFu);
                codes[k + 1] = (uint8_t)(p >> 8);
                mx = max(mx, max(abs_bits(v[k]), abs_bits(v[k + 1])));
            }
            if (mx > 0x7F800000u) {  // a NaN among the N values
                #pragma unroll
                for (int k = 0; k < N; k++)
                    if (fp8q_isnan(v[k])) codes[k] = fp8_encode_rne(f, v[k], 1);
            }
        } else
#endif
        {
            #pragma unroll
            for (int k = 0; k < N; k++) codes[k] = fp8_encode_rne(f, v[k], 1);
        }
    }
    (void)seed;
    (void)idx0;
}

__device__ __forceinline__ uint32_t fp8q_pack4(const uint8_t* c) {
    return (uint32_t)c[0] | ((uint32_t)c[1] << 8) | ((uint32_t)c[2] << 16) | ((uint32_t)c[3] << 24);
}

__device__ __forceinline__ uint4 fp8q_pack16(const uint8_t* c) {
    return make_uint4(fp8q_pack4(c), fp8q_pack4(c + 4), fp8q_pack4(c + 8), fp8q_pack4(c + 12));
}

// The codes of V (a multiple of 4) unscaled values v times the QUANT scale s, packed little-endian into V / 4
// words (value j in byte j % 4 of word j / 4), elements idx0 .. idx0 + V - 1 (SR random bits). nan: whether a
// v[j] is NaN (the caller knows it from its amax bits). Codes identical to fp8q_scaled + fp8q_encode_n; the
// E4M3FN / E5M2 RNE path multiplies and converts pairs without a per-value NaN test and re-encodes NaN values
// (with their sign, as fp8q_scaled keeps it) only when nan is set: fewer instructions per value in the
// quantize-transpose kernel, which is issue-bound (ncu, H200: SM throughput 65%, DRAM 47%).
template <FP8Kind KIND, bool SR, int V>
__device__ __forceinline__ void fp8q_encode_words(uint32_t* w, const float* v, float s, uint64_t seed, uint64_t idx0, bool nan) {
    static_assert(V % 4 == 0, "fp8q_encode_words: V must be a multiple of 4");
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
    if constexpr (!SR && (KIND == FP8_E4M3FN || KIND == FP8_E5M2)) {
        constexpr __nv_fp8_interpretation_t interp = KIND == FP8_E4M3FN ? __NV_E4M3 : __NV_E5M2;
        #pragma unroll
        for (int q = 0; q < V / 4; q++) {
            const uint32_t lo = (uint32_t)__nv_cvt_float2_to_fp8x2(
                make_float2(__fmul_rn(v[4 * q], s), __fmul_rn(v[4 * q + 1], s)), __NV_SATFINITE, interp);
            const uint32_t hi = (uint32_t)__nv_cvt_float2_to_fp8x2(
                make_float2(__fmul_rn(v[4 * q + 2], s), __fmul_rn(v[4 * q + 3], s)), __NV_SATFINITE, interp);
            w[q] = __byte_perm(lo, hi, 0x5410);
        }
        if (nan) {
            const FP8Format f = fp8_format(KIND);
            #pragma unroll
            for (int j = 0; j < V; j++)
                if (fp8q_isnan(v[j])) {
                    const int sh = 8 * (j & 3);
                    w[j / 4] = (w[j / 4] & ~(0xFFu << sh)) | ((uint32_t)fp8_encode_rne(f, v[j], 1) << sh);
                }
        }
    } else
#endif
    {
        float sv[V];
        uint8_t c[V];
        #pragma unroll
        for (int j = 0; j < V; j++) sv[j] = fp8q_scaled(v[j], s);
        fp8q_encode_n<KIND, SR, V>(c, sv, seed, idx0);
        #pragma unroll
        for (int q = 0; q < V / 4; q++) w[q] = fp8q_pack4(c + 4 * q);
    }
    (void)nan;
}

// One 16-byte packet of T (16 / sizeof(T) elements) as floats; p 16-byte aligned.
template <class T>
__device__ __forceinline__ void fp8q_load_packet(float* v, const T* p) {
    const Packed128<T> pk = load128(p);
    #pragma unroll
    for (int k = 0; k < Packed128<T>::size; k++) v[k] = (float)pk[k];
}

// 16 consecutive elements as floats; p 16-byte aligned.
template <class T>
__device__ __forceinline__ void fp8q_load16(float* v, const T* p) {
    constexpr int V = Packed128<T>::size;
    #pragma unroll
    for (int q = 0; q < 16 / V; q++) fp8q_load_packet(v + q * V, p + q * V);
}
