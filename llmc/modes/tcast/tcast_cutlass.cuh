// tcast_cutlass.cuh - the TensorCast build's CUTLASS path for the MATMUL_OUT site (--cast-cutlass, doc/TCAST.md 5.6):
// a linear layer's forward whose output takes the MATMUL_OUT cast runs as ONE Hopper BF16 GEMM whose epilogue adds the
// bias, rounds to BF16 and casts (llmc/kernels/gemm/cutlass_tcast_gemm.h): the qkv layer (cast, stored), and the fc
// layer (cast, stored as the pre-activation, then GELU and the GELU_OUT cast), instead of cuBLASLt's GEMM and the cast
// pass / the GELU-sites kernel; attproj's and fcproj's casts stay with the residual + LayerNorm that reads them, the LM
// head's with the classifier. The same cast bits of the GEMM's own BF16 output (the harness dev/cuda/cutlass_tcast_gemm.cu
// checks it), so only the GEMM's accumulation order differs from --cast-cutlass 0.
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

// The configurations the trainer runs, the faster with the casts for each epilogue (dev/cuda/cutlass_tcast_gemm.cu times
// them all; doc/TCAST.md 5.6, session 8, H100: qkv d12 0.417 ms on 128x256 against 0.486 on 128x128, d24 0.365 against
// 0.401; fc with GELU and both casts d12 0.966 on 128x128 against 1.142 on 128x256). A GELU layer's fallback (its plain
// GEMM, then the GELU-sites kernel) takes the GELU configuration, whose mainloop gives the same y.
static const CutlassTcastConfig TCAST_CUTLASS_CONFIG = CUTLASS_TCAST_coop_128x256_c2x1;
static const CutlassTcastConfig TCAST_CUTLASS_CONFIG_GELU = CUTLASS_TCAST_coop_128x128_c2x1;

// The plan's cast of `site` for a tensor with seed id `id` (BOUNDARY_NO_ID or the site off: none, NULL).
static inline const TcastDataType* tcast_cutlass_site_dt(const TcastRuntime* rt, BoundarySite site, unsigned long long id) {
    return id != BOUNDARY_NO_ID && rt->plan.site_on[site] ? &rt->plan.site[site] : NULL;
}

// BoundaryCasts::gemm_out of a TcastRuntime (see the header comment): false, nothing done, where the CUTLASS GEMM
// cannot take the call. Without GELU (pre NULL): out = cast(y). With GELU: pre = cast(y), out = cast(GELU(pre)), the
// fallback being the plain CUTLASS GEMM into pre (the same mainloop as the GELU kernel of the configuration, so the same
// y: the harness's check (g)) and tcast_boundary_gelu after it, as the front would run it after its own GEMM.
static bool tcast_boundary_gemm_out(BoundaryCasts* bc, floatX* out, floatX* pre, const floatX* inp, const floatX* weight, const floatX* bias,
                                    int N, int C, int OC, unsigned long long w_id, unsigned long long gelu_id, cudaStream_t stream) {
    static_assert(std::is_same<floatX, __nv_bfloat16>::value, "the TensorCast build stores BF16");
#if !defined(ENABLE_CUTLASS)
    (void)bc, (void)out, (void)pre, (void)inp, (void)weight, (void)bias, (void)N, (void)C, (void)OC, (void)w_id, (void)gelu_id, (void)stream;
    return false;  // (not linked: never offered, tcast_cutlass_attach leaves --cast-cutlass 1 without effect first)
#else
    TcastRuntime* rt = (TcastRuntime*)bc;
    const CutlassTcastConfig cfg = pre ? TCAST_CUTLASS_CONFIG_GELU : TCAST_CUTLASS_CONFIG;
    floatX* y = pre ? pre : out;
    if (cutlass_tcast_gemm_unsupported(N, C, OC, y, inp, weight, bias, NULL, cfg)) return false;
    if (pre && cutlass_tcast_gemm_gelu_unsupported(N, C, OC, out, pre, inp, weight, bias, NULL, NULL, cfg)) return false;
    const TcastDataType* dt_y = tcast_cutlass_site_dt(rt, MATMUL_OUT, w_id);
    const TcastDataType* dt_out = pre ? tcast_cutlass_site_dt(rt, GELU_OUT, gelu_id) : NULL;
    const bool in_epilogue = rt->plan.fuse && !rt->recording && !cutlass_tcast_gemm_cast_unsupported(dt_y, N, OC) &&
                             !cutlass_tcast_gemm_cast_unsupported(dt_out, N, OC);
    const uint64_t seed_y = tcast_seed(rt, w_id, (int)MATMUL_OUT, TCAST_ROLE_SITE);
    if (in_epilogue && pre) {
        cutlass_tcast_gemm_forward_gelu(out, pre, inp, weight, bias, N, C, OC, dt_y, seed_y, dt_out,
                                        tcast_seed(rt, gelu_id, (int)GELU_OUT, TCAST_ROLE_SITE), stream, cfg);
    } else {
        cutlass_tcast_gemm_forward(y, inp, weight, bias, N, C, OC, in_epilogue ? dt_y : NULL, seed_y, stream, cfg);
        if (pre) tcast_boundary_gelu(bc, out, pre, (size_t)N, (size_t)OC, w_id, gelu_id, BOUNDARY_GELU_FRONT, stream);
        else if (!in_epilogue) tcast_site_cast(rt, MATMUL_OUT, w_id, out, (size_t)N, (size_t)OC, stream);
    }
    rt->cutlass_gemms++;
    rt->cutlass_casts += in_epilogue;
    return true;
#endif
}

// Resolves --cast-cutlass 1 (the default) for this binary and the current GPU and, where the plan casts MATMUL_OUT and
// the path can run, offers it to the GEMM front (rt->casts.gemm_out), with one line saying so; where it cannot (no
// kernels linked, not a compute capability 9.0 GPU), one line saying why, and the GEMMs stay on cuBLASLt with the casts
// as passes (the pattern of SF16's --q115-cutlass). Returns whether it is on. --cast-cutlass 0: nothing.
static inline bool tcast_cutlass_attach(TcastRuntime* rt) {
    if (!rt->plan.cutlass || !rt->plan.site_on[MATMUL_OUT]) return false;
    int dev = 0;
    const int cc = cuda_current_cc(&dev);
    if (!kTcastCutlassBuilt || cc != 90) {
        if (!kTcastCutlassBuilt)
            printf("TensorCast: --cast-cutlass 1 without effect: this binary has no CUTLASS kernels (the TCAST=1 build links them where "
                   "make finds CUTLASS: make info; NO_CUTLASS=1 leaves them out); the qkv and fc GEMMs stay on cuBLASLt\n");
        else
            printf("TensorCast: --cast-cutlass 1 without effect: the CUTLASS kernels are sm_90a code and device %d is compute capability "
                   "%d.%d; the qkv and fc GEMMs stay on cuBLASLt\n", dev, cc / 10, cc % 10);
        return false;
    }
    rt->casts.gemm_out = tcast_boundary_gemm_out;
#if defined(ENABLE_CUTLASS)
    const char* unsupported = cutlass_tcast_gemm_cast_unsupported(&rt->plan.site[MATMUL_OUT], 0, 32);
    printf("TensorCast: the qkv and fc GEMMs on CUTLASS (%s, fc %s), the matmul_out cast %s\n", cutlass_tcast_gemm_config_name(TCAST_CUTLASS_CONFIG),
           cutlass_tcast_gemm_config_name(TCAST_CUTLASS_CONFIG_GELU),
           unsupported ? "a pass after it (the epilogue does not take this datatype)" : "in the epilogue");
#endif
    return true;
}
