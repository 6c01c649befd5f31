// traits.cuh (plain module: BF16, FP16 and FP32 storage without a numeric experiment) - the compile-time
// side of the mode, included by llmc/core/precision.h: what a value becomes at a storage boundary
// (nothing) and the constants kernels read. llmc/modes/README.md lists what every traits.cuh defines.
#pragma once

#include "llmc/modes/boundary_identity.cuh"  // ModeBoundary: stored values unchanged

#define BOUNDARY_MODE_NAME "none"

static constexpr bool kModeAttentionCasts = false;  // no TensorCast attention kernels
static constexpr bool kModeGemmFast16BF = false;    // cuBLASLt compute type CUBLAS_COMPUTE_32F
