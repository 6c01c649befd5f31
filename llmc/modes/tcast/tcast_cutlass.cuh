// tcast_cutlass.cuh - the TensorCast build's CUTLASS path for the MATMUL_OUT site (--cast-cutlass, doc/TCAST.md 5.6):
// a linear layer's forward whose output takes only the MATMUL_OUT cast (the qkv layer: attproj's and fcproj's casts
// belong to the residual + LayerNorm that reads them, fc's to the GELU kernel, the LM head's to the classifier) runs as
// ONE Hopper BF16 GEMM whose epilogue adds the bias, rounds to BF16 and casts (llmc/kernels/gemm/cutlass_tcast_gemm.h),
// instead of cuBLASLt's GEMM and the in-place cast pass: the same cast bits of the GEMM's own BF16 output (the harness
// dev/cuda/cutlass_tcast_gemm.cu checks it), so only the GEMM's accumulation order differs from --cast-cutlass 0.
// Where the epilogue cannot cast the site's datatype (cutlass_tcast_gemm_cast_unsupported), on a --cast-stats step
// (the pass counts) and with --cast-fuse 0 (every cast a pass), the same CUTLASS GEMM runs without the cast and the
// pass follows: which GEMM computes a layer does not depend on those, so --cast-fuse 0 and 1 give the same bits. A
// call the CUTLASS GEMM cannot take at all (shape, alignment) keeps cuBLASLt and the pass. This file is the TensorCast
// mode's one reader of ENABLE_CUTLASS (the Makefile sets it for the TCAST=1 trainer and test where CUTLASS is found and
// links the kernels).
#pragma once

#include <stdio.h>
#include <type_traits>

#include "llmc/core/utils.h"
#include "llmc/kernels/gemm/cutlass_tcast_gemm.h"
#include "llmc/modes/tcast/tcast_runtime.cuh"

#if defined(ENABLE_CUTLASS)
static constexpr bool kTcastCutlassBuilt = true;  // the CUTLASS kernels are linked into this binary
#else
static constexpr bool kTcastCutlassBuilt = false;
#endif

// The configuration the trainer runs (dev/cuda/cutlass_tcast_gemm.cu times them all; doc/TCAST.md 5.6).
static const CutlassTcastConfig TCAST_CUTLASS_CONFIG = CUTLASS_TCAST_coop_128x256_c2x1;

// BoundaryCasts::gemm_out of a TcastRuntime (see the header comment): false, nothing done, where the CUTLASS GEMM
// cannot take the call.
static bool tcast_boundary_gemm_out(BoundaryCasts* bc, floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N,
                                    int C, int OC, unsigned long long w_id, cudaStream_t stream) {
    static_assert(std::is_same<floatX, __nv_bfloat16>::value, "the TensorCast build stores BF16");
    if (!kTcastCutlassBuilt) return false;
    TcastRuntime* rt = (TcastRuntime*)bc;
    if (cutlass_tcast_gemm_unsupported(N, C, OC, out, inp, weight, bias, NULL, TCAST_CUTLASS_CONFIG)) return false;
    const TcastDataType* dt = &rt->plan.site[MATMUL_OUT];
    const bool in_epilogue = rt->plan.fuse && !rt->recording && !cutlass_tcast_gemm_cast_unsupported(dt, N, OC);
    cutlass_tcast_gemm_forward(out, inp, weight, bias, N, C, OC, in_epilogue ? dt : NULL,
                               tcast_seed(rt, w_id, (int)MATMUL_OUT, TCAST_ROLE_SITE), stream, TCAST_CUTLASS_CONFIG);
    if (!in_epilogue) tcast_site_cast(rt, MATMUL_OUT, w_id, out, (size_t)N, (size_t)OC, stream);
    rt->cutlass_gemms++;
    rt->cutlass_casts += in_epilogue;
    return true;
}

// Resolves --cast-cutlass (plan->cutlass: -1 auto, 0, 1) for this binary and the current GPU and, where the path is
// on and the plan casts MATMUL_OUT, offers it to the GEMM front (rt->casts.gemm_out). `--cast-cutlass 1` where the path
// cannot run stops with an error naming the flag. Prints one line when it is on. Returns whether it is on.
static inline bool tcast_cutlass_attach(TcastRuntime* rt) {
    const int want = rt->plan.cutlass;
    if (want == 0 || !rt->plan.site_on[MATMUL_OUT]) return false;
    int dev = 0, major = 0, minor = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    const char* why = !kTcastCutlassBuilt ? "this binary has no CUTLASS kernels (the TCAST=1 build links them where make finds CUTLASS: "
                                            "make info; NO_CUTLASS=1 leaves them out)"
                      : (major != 9 || minor != 0) ? "the CUTLASS kernels are sm_90a code: needs a compute capability 9.0 GPU"
                                                   : NULL;
    if (why) {
        if (want == 1) die("--cast-cutlass 1: %s (device %d is %d.%d)", why, dev, major, minor);
        return false;
    }
    rt->casts.gemm_out = tcast_boundary_gemm_out;
    const char* unsupported = cutlass_tcast_gemm_cast_unsupported(&rt->plan.site[MATMUL_OUT], 0, 32);
    printf("TensorCast: matmul_out GEMMs without GELU on CUTLASS (%s), the cast %s\n", cutlass_tcast_gemm_config_name(TCAST_CUTLASS_CONFIG),
           unsupported ? "a pass after it (the epilogue does not take this datatype)" : "in the epilogue");
    return true;
}
