// gelu_fastmath.cuh - the stored GELU of the FP8 build (gemm_kernels.cuh gemm_gelu_stored, as the trainer's
// --use_fast_math compiles it) written out as the PTX instructions that build executes, so that a translation
// unit compiled WITHOUT --use_fast_math (the CUTLASS epilogues, llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh)
// computes the same BF16 bits by construction (issue 27). dev/cuda/cutlass_fp8.cu checks it on the GPU against
// gemm_gelu_stored itself on all 65536 BF16 inputs.
//
// The sequence: what nvcc 13.0 (-O3 --use_fast_math, sm_90) makes of gemm_gelu_sigmoid / gemm_gelu_tanh, read off
// the PTX and the SASS of fp8q_quantize_transpose_kernel<LowpSrcGelu> (every one of its 32 GELUs per kernel):
//   FMUL.FTZ a = x * 0.044715                 x * x * x * 0.044715 + x, contracted: x * (x * (0.044715 x)) + x
//   FMUL.FTZ a = x * a
//   FFMA.FTZ a = x * a + x
//   FMUL.FTZ a = a * 0.7978845608             u = sqrt(2/pi) (x + 0.044715 x³)
//   FMUL.FTZ a = a * -2                       -2u
//   FMUL.FTZ a = a * 1.4426950409             expf under --use_fast_math: ex2.approx.ftz(v * log2(e))
//   MUFU.EX2 e = 2^a                          (ex2.approx.ftz.f32)
//   FADD.FTZ e = e + 1
//   MUFU.RCP r = 1 / e                        1.0f / y under --prec-div=false: rcp.approx.ftz.f32
//   FMUL.FTZ g = x * r                        x * sigmoid(2u)
// then F2F.BF16.F32 (cvt.rn.bf16.f32, no FTZ form) for the stored value. Every multiply and add here carries .rn
// explicitly, so ptxas cannot contract or reorder them (PTX's rule for .rn), and .ftz flushes subnormal inputs and
// results to sign-preserving zero as the fast-math build does (a subnormal BF16 x gives ±0, not x/2).
// If the trainer's flags or gemm_gelu_stored change, this must change with them: the harness's exhaustive check
// then fails.
#pragma once

#include <cuda_bf16.h>

// x * sigmoid(2u(x)) in fp32, instruction for instruction as the --use_fast_math build computes gemm_gelu_tanh(x)
// (header comment). Device only.
__device__ __forceinline__ float gelu_tanh_fastmath(float x) {
    float g;
    asm("{\n\t"
        ".reg .f32 a, e;\n\t"
        "mul.rn.ftz.f32 a, %1, 0f3D372713;\n\t"  // 0.044715
        "mul.rn.ftz.f32 a, %1, a;\n\t"
        "fma.rn.ftz.f32 a, %1, a, %1;\n\t"
        "mul.rn.ftz.f32 a, a, 0f3F4C422A;\n\t"   // sqrt(2/pi) = 0.7978845608 (GEMM_GELU_SCALE)
        "mul.rn.ftz.f32 a, a, 0fC0000000;\n\t"   // -2
        "mul.rn.ftz.f32 a, a, 0f3FB8AA3B;\n\t"   // log2(e)
        "ex2.approx.ftz.f32 e, a;\n\t"
        "add.rn.ftz.f32 e, e, 0f3F800000;\n\t"   // 1
        "rcp.approx.ftz.f32 e, e;\n\t"
        "mul.rn.ftz.f32 %0, %1, e;\n\t"
        "}"
        : "=f"(g)
        : "f"(x));
    return g;
}

// The stored GELU output of a pre-activation z (fp32): bf16(gelu(bf16(z))) as a float, i.e. what
// gemm_gelu_stored((float)bf16(z)) stores in a BF16 FP8 build. Device only.
__device__ __forceinline__ float gelu_stored_fastmath(float z) {
    const float x = __bfloat162float(__float2bfloat16_rn(z));
    return __bfloat162float(__float2bfloat16_rn(gelu_tanh_fastmath(x)));
}
