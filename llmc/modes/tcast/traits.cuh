// traits.cuh (TensorCast module, TCAST=1; doc/TCAST.md) - the compile-time side of the mode, included by
// llmc/core/precision.h. The casts are chosen at run time (--cast, --cast-gemm) and act on whole tensors
// (a tile-scaled datatype needs the whole tile before any element is quantized), so the per-value hook
// is the identity; the module attaches its casts to the model at start-up (llmc/modes/tcast/mode.cuh).
// The attention sites are cast inside the attention kernels: kModeAttentionCasts makes the attention
// launchers instantiate their cast kernels (llmc/kernels/attention/), which no other build compiles.
#pragma once

#include "llmc/modes/boundary_identity.cuh"  // ModeBoundary: stored values unchanged

#define BOUNDARY_MODE_NAME "TensorCast (run time, --cast)"

static constexpr bool kModeAttentionCasts = true;   // the attention kernels' TensorCast instantiations
static constexpr bool kModeGemmFast16BF = false;    // cuBLASLt compute type CUBLAS_COMPUTE_32F
