// precision.h - the only place that reads the numeric compile flags.
//
// Build variables (Makefile) -> macros -> what this header defines:
//   PRECISION=BF16 (default) -> ENABLE_BF16 -> floatX = __nv_bfloat16
//   PRECISION=FP16           -> ENABLE_FP16 -> floatX = half
//   PRECISION=FP32           -> ENABLE_FP32 -> floatX = float
// Later modes (ENABLE_Q115, SF16_TRUE_FORWARD, ENABLE_FP8, ENABLE_TCFP12) are validated here too,
// so that an impossible combination is a compile error with a message, never a silent mix.
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#if (defined(ENABLE_FP32) + defined(ENABLE_FP16) + defined(ENABLE_BF16)) > 1
#error "choose exactly one of ENABLE_FP32, ENABLE_FP16, ENABLE_BF16 (make PRECISION=FP32|FP16|BF16)"
#endif

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_MODE_NAME "FP32"
#elif defined(ENABLE_FP16)
typedef half floatX;
#define PRECISION_MODE_NAME "FP16"
#else
#ifndef ENABLE_BF16
#define ENABLE_BF16
#endif
typedef __nv_bfloat16 floatX;
#define PRECISION_MODE_NAME "BF16"
#endif

// GEMM backend of the linear layers (gemm.cuh dispatches on it; llmc/modes/lowp/gemm_lowp.cuh implements the
// FP8 and TCFP-12 ones). Their GEMMs write BF16, so they need the BF16 storage type.
#if defined(ENABLE_FP8) && defined(ENABLE_TCFP12)
#error "FP8=1 and TCFP12=1 are two GEMM backends: choose one"
#endif
#if (defined(ENABLE_FP8) || defined(ENABLE_TCFP12)) && !defined(ENABLE_BF16)
#error "FP8=1 / TCFP12=1 need BF16 storage (PRECISION=BF16): the FP8 GEMMs write BF16 outputs"
#endif
// GEMM_LOWP: 1 when a low-precision GEMM backend is built in (FP8 or TCFP-12), GEMM_LOWP_TCFP12: 1 for
// TCFP-12; every other file tests these, never ENABLE_FP8 / ENABLE_TCFP12.
#if defined(ENABLE_FP8)
#define GEMM_LOWP 1
#define GEMM_LOWP_TCFP12 0
#define GEMM_LOWP_MODE_NAME "FP8 (E4M3 activations and weights, E5M2 gradients)"
#elif defined(ENABLE_TCFP12)
#define GEMM_LOWP 1
#define GEMM_LOWP_TCFP12 1
#define GEMM_LOWP_MODE_NAME "TCFP-12 (W = W_hi + W_lo, two E4M3 GEMMs)"
#else
#define GEMM_LOWP 0
#define GEMM_LOWP_TCFP12 0
#endif

// SF16 (doc/SF16.md): BF16 storage with Q1.15 quantize-dequantize at every forward storage boundary
// (llmc/kernels/boundary.cuh). SF16_TRUE_FORWARD adds the Q1.31 register simulation on matmul outputs and
// the CUBLAS_COMPUTE_32F_FAST_16BF compute type (gemm.cuh).
#if defined(ENABLE_Q115) && defined(ENABLE_CUDNN)
#error "ENABLE_CUDNN is not supported with ENABLE_Q115. Disable USE_CUDNN for SF16 builds."
#endif
#if defined(SF16_TRUE_FORWARD) && !defined(ENABLE_Q115)
#error "SF16_TRUE_FORWARD=1 is only valid with ENABLE_Q115=1"
#endif
#if defined(ENABLE_Q115) && !defined(ENABLE_BF16)
#error "ENABLE_Q115 stores BF16: it cannot be combined with ENABLE_FP16 or ENABLE_FP32"
#endif
#if defined(ENABLE_CUDNN)
#error "USE_CUDNN=1: cuDNN attention is not implemented in this version (the flash-attention kernels are built in)"
#endif

// TensorCast (doc/TCAST.md): run-time virtual casts at the boundary sites and the linear-layer operands,
// on BF16 storage (llmc/modes/tcast/tcast_runtime.cuh); a storage-boundary mode of its own and a GEMM-operand
// policy of the BF16 GEMMs, so it excludes SF16 and the FP8 / TCFP-12 backends.
#if defined(ENABLE_TCAST) && !defined(ENABLE_BF16)
#error "TCAST=1 stores BF16: it cannot be combined with PRECISION=FP16 / FP32"
#endif
#if defined(ENABLE_TCAST) && defined(ENABLE_Q115)
#error "TCAST=1 and ENABLE_Q115=1 are two storage-boundary simulations: choose one"
#endif
#if defined(ENABLE_TCAST) && GEMM_LOWP
#error "TCAST=1 cannot be combined with FP8=1 / TCFP12=1 (--cast-gemm casts the BF16 GEMMs' operands instead)"
#endif

// Name of the storage-boundary mode, for the start-up table and logs.
#if defined(ENABLE_Q115) && defined(SF16_TRUE_FORWARD)
#define BOUNDARY_MODE_NAME "SF16 true-forward (Q1.31 + Q1.15)"
#elif defined(ENABLE_Q115)
#define BOUNDARY_MODE_NAME "SF16 (Q1.15)"
#elif defined(ENABLE_TCAST)
#define BOUNDARY_MODE_NAME "TensorCast (run time, --cast)"
#else
#define BOUNDARY_MODE_NAME "none"
#endif
