// traits.cuh (FP8 / TCFP-12 module, FP8=1 or TCFP12=1; doc/TCFP12.md) - the compile-time side of the
// mode, included by llmc/core/precision.h. The storage boundaries are untouched (the identity, as in the
// plain module); what the mode changes are the linear layers' GEMMs, a backend the module attaches to
// the GEMM front at run time (llmc/modes/lowp/gemm_lowp.cuh).
#pragma once

#include "llmc/modes/boundary_identity.cuh"  // ModeBoundary: stored values unchanged

#define BOUNDARY_MODE_NAME "none"

#if defined(ENABLE_TCFP12)
#define GEMM_LOWP_MODE_NAME "TCFP-12 (W = W_hi + W_lo, two E4M3 GEMMs)"
static constexpr bool kLowpTCFP12 = true;   // TCFP-12: two FP8 GEMMs per product, its --tcfp-* knobs
#else
#define GEMM_LOWP_MODE_NAME "FP8 (E4M3 activations and weights, E5M2 gradients)"
static constexpr bool kLowpTCFP12 = false;  // FP8: one FP8 GEMM per product
#endif

static constexpr bool kModeAttentionCasts = false;  // no TensorCast attention kernels
static constexpr bool kModeGemmFast16BF = false;    // the BF16 GEMMs (LM head, warm-up) use CUBLAS_COMPUTE_32F
