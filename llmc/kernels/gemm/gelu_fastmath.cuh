// gelu_fastmath.cuh - the stored GELU and GELU' of the FP8 build (gemm_kernels.cuh gemm_gelu_stored and
// gemm_dgelu_stored, as the trainer's --use_fast_math compiles them) written out as the PTX instructions that build
// executes, so that a translation unit compiled WITHOUT --use_fast_math (the CUTLASS epilogues,
// llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh and cutlass_fp8_dgelu_impl.cuh) computes the same BF16 bits by
// construction (issue 27). dev/cuda/cutlass_fp8.cu checks the GELU on the GPU against gemm_gelu_stored itself on all
// 65536 BF16 inputs, dev/cuda/cutlass_fp8_dgelu.cu the GELU' product against gemm_dgelu_stored on all 2^32 pairs of
// BF16 inputs.
//
// The sequences: what nvcc 13.0 (-O3 --use_fast_math, sm_90) makes of gemm_gelu_sigmoid / gemm_gelu_tanh /
// gemm_gelu_tanh_grad, read off the PTX of fp8q_quantize_transpose_kernel<LowpSrcGelu> (every one of its 32 GELUs
// per kernel; the SASS was checked for the GELU in the second round) and of
// fp8q_quantize_transpose_kernel<LowpSrcDgelu, E5M2> (every one of its GELU's; 2026-11-27). The sigmoid, shared:
//   FMUL.FTZ a = x * 0.044715                 x * x * x * 0.044715 + x, contracted: x * (x * (0.044715 x)) + x
//   FMUL.FTZ a = x * a
//   FFMA.FTZ a = x * a + x
//   FMUL.FTZ a = a * 0.7978845608             u = sqrt(2/pi) (x + 0.044715 x³)
//   FMUL.FTZ a = a * -2                       -2u
//   FMUL.FTZ a = a * 1.4426950409             expf under --use_fast_math: ex2.approx.ftz(v * log2(e))
//   MUFU.EX2 e = 2^a                          (ex2.approx.ftz.f32)
//   FADD.FTZ e = e + 1
//   MUFU.RCP s = 1 / e                        1.0f / y under --prec-div=false: rcp.approx.ftz.f32
// GELU:  FMUL.FTZ g = x * s, then F2F.BF16.F32 (cvt.rn.bf16.f32, no FTZ form) for the stored value.
// GELU': s + 2 x s (1 - s) u'(x), u'(x) = sqrt(2/pi) (1 + 3 · 0.044715 x²), evaluated left to right as written in
// gemm_gelu_tanh_grad and contracted once at the end:
//   FADD.FTZ p = x + x                        2.0f * x
//   FMUL.FTZ p = p * s
//   FADD.FTZ q = 1 - s
//   FMUL.FTZ p = p * q
//   FMUL.FTZ p = p * 0.7978845608
//   FMUL.FTZ c = x * 0.134145                 3.0f * 0.044715f folded (0x3E095D4E), then (0.134145 x) x + 1:
//   FFMA.FTZ c = x * c + 1
//   FFMA.FTZ r = c * p + s                    s + p (1 + 0.134145 x²), contracted
// and the stored product (gemm_dgelu_stored): FMUL.FTZ o = g * r, F2F.BF16.F32.
// Every multiply and add here carries .rn explicitly, so ptxas cannot contract or reorder them (PTX's rule for .rn),
// and .ftz flushes subnormal inputs and results to sign-preserving zero as the fast-math build does (a subnormal BF16 x
// gives ±0, not x/2). If the trainer's flags or gemm_kernels.cuh change, these must change with them: the harnesses'
// exhaustive checks then fail.
#pragma once

#include <cuda_bf16.h>

// a * b as the fast-math build multiplies (mul.rn.ftz.f32). Device only.
__device__ __forceinline__ float mul_ftz(float a, float b) {
    float r;
    asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// sigmoid(2u(x)) in fp32, instruction for instruction as the --use_fast_math build computes gemm_gelu_sigmoid(x)
// (header comment). Device only.
__device__ __forceinline__ float gelu_sigmoid_fastmath(float x) {
    float s;
    asm("{\n\t"
        ".reg .f32 a;\n\t"
        "mul.rn.ftz.f32 a, %1, 0f3D372713;\n\t"  // 0.044715
        "mul.rn.ftz.f32 a, %1, a;\n\t"
        "fma.rn.ftz.f32 a, %1, a, %1;\n\t"
        "mul.rn.ftz.f32 a, a, 0f3F4C422A;\n\t"   // sqrt(2/pi) = 0.7978845608 (GEMM_GELU_SCALE)
        "mul.rn.ftz.f32 a, a, 0fC0000000;\n\t"   // -2
        "mul.rn.ftz.f32 a, a, 0f3FB8AA3B;\n\t"   // log2(e)
        "ex2.approx.ftz.f32 a, a;\n\t"
        "add.rn.ftz.f32 a, a, 0f3F800000;\n\t"   // 1
        "rcp.approx.ftz.f32 %0, a;\n\t"
        "}"
        : "=f"(s)
        : "f"(x));
    return s;
}

// x * sigmoid(2u(x)) in fp32 as the --use_fast_math build computes gemm_gelu_tanh(x). Device only.
__device__ __forceinline__ float gelu_tanh_fastmath(float x) { return mul_ftz(x, gelu_sigmoid_fastmath(x)); }

// d/dx gelu_tanh(x) in fp32 as the --use_fast_math build computes gemm_gelu_tanh_grad(x) (header comment). Device only.
__device__ __forceinline__ float gelu_tanh_grad_fastmath(float x) {
    const float s = gelu_sigmoid_fastmath(x);
    float r;
    asm("{\n\t"
        ".reg .f32 p, q, c;\n\t"
        "add.rn.ftz.f32 p, %1, %1;\n\t"          // 2 x
        "mul.rn.ftz.f32 p, p, %2;\n\t"           // 2 x s
        "sub.rn.ftz.f32 q, 0f3F800000, %2;\n\t"  // 1 - s
        "mul.rn.ftz.f32 p, p, q;\n\t"
        "mul.rn.ftz.f32 p, p, 0f3F4C422A;\n\t"   // sqrt(2/pi)
        "mul.rn.ftz.f32 c, %1, 0f3E095D4E;\n\t"  // 3 * 0.044715 (fp32 product)
        "fma.rn.ftz.f32 c, %1, c, 0f3F800000;\n\t"
        "fma.rn.ftz.f32 %0, c, p, %2;\n\t"
        "}"
        : "=f"(r)
        : "f"(x), "f"(s));
    return r;
}

// The stored GELU output of a pre-activation z (fp32): bf16(gelu(bf16(z))) as a float, i.e. what
// gemm_gelu_stored((float)bf16(z)) stores in a BF16 FP8 build. Device only.
__device__ __forceinline__ float gelu_stored_fastmath(float z) {
    const float x = __bfloat162float(__float2bfloat16_rn(z));
    return __bfloat162float(__float2bfloat16_rn(gelu_tanh_fastmath(x)));
}

// The stored GELU' product of a dgrad value g and a pre-activation pre, both BF16 values held in fp32:
// bf16(g * gelu'(pre)) as a float, i.e. what gemm_dgelu_stored(g, pre) stores in a BF16 FP8 build (the fc layer's dY
// that the fcproj dgrad hands on). Device only.
__device__ __forceinline__ float dgelu_stored_fastmath(float g, float pre) {
    return __bfloat162float(__float2bfloat16_rn(mul_ftz(g, gelu_tanh_grad_fastmath(pre))));
}
