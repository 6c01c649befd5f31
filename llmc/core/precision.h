// precision.h - the numeric configuration of a CUDA build, read from the compile flags in one place:
// the combination rules and the mode selection (llmc/core/mode_rules.h), the storage type floatX, and
// the compile-time traits of the selected mode module (llmc/modes/<LLMC_MODE>/traits.cuh): the names
// printed at start-up and the boundary hook every forward kernel calls (llmc/kernels/boundary.cuh).
//
// Build variables (Makefile) -> macros -> what this header defines:
//   PRECISION=BF16 (default) -> ENABLE_BF16 -> floatX = __nv_bfloat16
//   PRECISION=FP16           -> ENABLE_FP16 -> floatX = half
//   PRECISION=FP32           -> ENABLE_FP32 -> floatX = float
// Code that depends on the storage type tests kStorageFP32 / kStorageFP16 / kStorageBF16 (if constexpr),
// never the macros; code that depends on the mode calls its module's hooks (llmc/modes/README.md).
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "llmc/core/mode_rules.h"

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

// The storage type, for if constexpr.
static constexpr bool kStorageFP32 = std::is_same<floatX, float>::value;
static constexpr bool kStorageFP16 = std::is_same<floatX, half>::value;
static constexpr bool kStorageBF16 = std::is_same<floatX, __nv_bfloat16>::value;

// The attention backend (USE_CUDNN=1 -> ENABLE_CUDNN): cuDNN's fused SDPA (llmc/kernels/attention/attention_cudnn.h)
// or the built-in flash kernels; attention_forward / attention_backward pick it with if constexpr.
#if defined(ENABLE_CUDNN)
static constexpr bool kAttentionCudnn = true;
#else
static constexpr bool kAttentionCudnn = false;
#endif

// The mode's compile-time traits: BOUNDARY_MODE_NAME, ModeBoundary (the per-value boundary hook) and the
// k* constants kernels read (llmc/modes/README.md lists them).
#include LLMC_MODE_FILE(traits.cuh)
