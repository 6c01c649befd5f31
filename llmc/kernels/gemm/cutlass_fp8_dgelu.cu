// cutlass_fp8_dgelu.cu - the dispatcher of cutlass_fp8_dgelu.h: argument, alignment and device checks, amax zeroing,
// and the call of the chosen configuration's instantiation (cutlass_fp8_dgelu_<name>.cu, through
// cutlass_fp8_dgelu_ops.h). Includes no CUTLASS header (seconds to compile); built like the configurations into
// $(BUILD)/cutlass/cutlass_fp8_dgelu.o, and every harness that links it links all the configuration objects.

#include "llmc/kernels/gemm/cutlass_fp8_dgelu.h"
#include "llmc/kernels/gemm/cutlass_fp8_dgelu_ops.h"
#include "llmc/kernels/gemm/cutlass_fp8_dispatch.h"

#include <stdio.h>
#include <string.h>

CUTLASS_FP8_DGELU_CONFIGS(CUTLASS_FP8_DGELU_DECLARE_OPS)

namespace {

const CutlassDgeluOps* const g_ops[CUTLASS_DGELU_NUM_CONFIGS] = {
#define CUTLASS_FP8_DGELU_OPS_PTR(name, text) &cutlass_fp8_dgelu_ops_##name,
    CUTLASS_FP8_DGELU_CONFIGS(CUTLASS_FP8_DGELU_OPS_PTR)
#undef CUTLASS_FP8_DGELU_OPS_PTR
};

const char* const g_names[CUTLASS_DGELU_NUM_CONFIGS] = {
#define CUTLASS_FP8_DGELU_NAME(name, text) #name,
    CUTLASS_FP8_DGELU_CONFIGS(CUTLASS_FP8_DGELU_NAME)
#undef CUTLASS_FP8_DGELU_NAME
};

char g_why[512];

[[noreturn]] void fail(const char* msg) { cutlass_fail("cutlass_fp8_dgelu", msg); }

bool valid(CutlassDgeluConfig cfg) { return (int)cfg >= 0 && (int)cfg < CUTLASS_DGELU_NUM_CONFIGS; }

}  // namespace

const char* cutlass_fp8_dgelu_config_name(CutlassDgeluConfig cfg) { return valid(cfg) ? g_names[cfg] : nullptr; }

int cutlass_fp8_dgelu_config_parse(const char* name) {
    for (int i = 0; i < CUTLASS_DGELU_NUM_CONFIGS; i++)
        if (name && !strcmp(name, g_names[i])) return i;
    return -1;
}

const char* cutlass_fp8_dgelu_describe(CutlassDgeluConfig cfg) { return valid(cfg) ? g_ops[cfg]->describe() : "(no such configuration)"; }

void cutlass_fp8_dgelu_eval(CutlassDgeluConfig cfg, const float* g, const float* pre, float* out, int n, cudaStream_t stream) {
    if (!valid(cfg)) fail(cutlass_why(0, 0, 0, "eval: no configuration %d (there are %d)", (int)cfg, (int)CUTLASS_DGELU_NUM_CONFIGS));
    if (n < 0 || (n > 0 && (!g || !pre || !out))) fail(cutlass_why(0, 0, 0, "eval: needs n >= 0 (got %d) and device arrays g, pre, out", n));
    if (const char* msg = g_ops[cfg]->eval(g, pre, out, n, stream)) {
        snprintf(g_why, sizeof(g_why), "eval, configuration %s: %s", g_names[cfg], msg);
        fail(g_why);
    }
}

const char* cutlass_fp8_dgelu_unsupported(int N, int C, int OC, const void* d, const void* dt, int ldt, const void* g, const void* col_partials,
                                          const void* dy, const void* wt, const void* pre, CutlassDgeluConfig cfg) {
    if (!valid(cfg)) return cutlass_why(N, C, OC, "no configuration %d (there are %d)", (int)cfg, (int)CUTLASS_DGELU_NUM_CONFIGS);
    if (N < 0 || C < 16 || OC < 16 || C % 16 != 0 || OC % 16 != 0)
        return cutlass_why(N, C, OC, "unsupported shape: needs N >= 0 and C, OC positive multiples of 16");
    if (!d || !dy || !wt || !pre) return cutlass_why(N, C, OC, "d, dy, wt and pre must not be NULL");
    if (!cutlass_aligned16(d) || !cutlass_aligned16(dt) || !cutlass_aligned16(g) || !cutlass_aligned16(col_partials) || !cutlass_aligned16(dy) ||
        !cutlass_aligned16(wt) || !cutlass_aligned16(pre))
        return cutlass_why(N, C, OC, "every tensor must be 16-byte aligned (d %p, dt %p, g %p, col_partials %p, dy %p, wt %p, pre %p)", d, dt, g,
                   col_partials, dy, wt, pre);
    if (dt) {
        if (ldt < N || ldt < 16 || ldt % 16 != 0)
            return cutlass_why(N, C, OC, "dt's leading dimension ldt = %d must be >= N and a positive multiple of 16", ldt);
        // TMA stores whole 16-byte chunks along n: with N % 16 != 0 it would overwrite dt's columns N .. round_up(N, 16) - 1
        // (cutlass_fp8_common.cuh)
        if (N % 16 != 0)
            return cutlass_why(N, C, OC, "the transposed codes dt need N a multiple of 16 (the TMA store writes whole 16-byte chunks of a dt row)");
    }
    CutlassDevice info;
    if (!cutlass_current_device(&info)) return cutlass_why(N, C, OC, "cannot query the current CUDA device");
    if (info.cc != 90)
        return cutlass_why(N, C, OC, "needs a compute capability 9.0 GPU (sm_90a code), device %d has %d.%d", info.dev, info.cc / 10, info.cc % 10);
    if (N == 0) return nullptr;
    // CUTLASS's own checks (TMA alignment of the strides, the fusion's); the scales play no part in them
    const CutlassDgeluCall call{(uint8_t*)d, (uint8_t*)dt, dt ? ldt : 0, nullptr, (__nv_bfloat16*)g, (float*)col_partials, (const uint8_t*)dy,
                                nullptr, (const uint8_t*)wt, nullptr, (const __nv_bfloat16*)pre, nullptr, N, C, OC, info.dev, info.sms};
    if (const char* st = g_ops[cfg]->can_implement(call))
        return cutlass_why(N, C, OC, "CUTLASS can_implement (configuration %s): %s", g_names[cfg], st);
    return nullptr;
}

void cutlass_fp8_dgelu_dgrad(uint8_t* d, uint8_t* dt, int ldt, float* amax_d, __nv_bfloat16* g, float* col_partials, const uint8_t* dy,
                             const float* dy_dscale, const uint8_t* wt, const float* wt_dscale, const __nv_bfloat16* pre, const float* d_scale,
                             int N, int C, int OC, cudaStream_t stream, CutlassDgeluConfig cfg) {
    if (const char* msg = cutlass_fp8_dgelu_unsupported(N, C, OC, d, dt, ldt, g, col_partials, dy, wt, pre, cfg)) fail(msg);
    if (!dy_dscale || !wt_dscale || !d_scale) fail(cutlass_why(N, C, OC, "dy_dscale, wt_dscale and d_scale must not be NULL"));
    cudaError_t ce;
    if (amax_d && (ce = cudaMemsetAsync(amax_d, 0, sizeof(float), stream)) != cudaSuccess)
        fail(cutlass_why(N, C, OC, "zeroing amax_d: %s", cudaGetErrorString(ce)));
    if (N == 0) return;
    CutlassDevice info;
    cutlass_current_device(&info);  // (cutlass_fp8_dgelu_unsupported asked successfully)
    const CutlassDgeluCall call{d, dt, dt ? ldt : 0, amax_d, g, col_partials, dy, dy_dscale, wt, wt_dscale, pre, d_scale, N, C, OC,
                                info.dev, info.sms};
    if (const char* msg = g_ops[cfg]->run(call, stream)) fail(cutlass_why(N, C, OC, "configuration %s: %s", g_names[cfg], msg));
}

void cutlass_fp8_dgelu_free(void) {
    for (int i = 0; i < CUTLASS_DGELU_NUM_CONFIGS; i++) g_ops[i]->free_workspace();
}
