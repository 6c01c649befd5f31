// cutlass_fp8_fc.cu - the dispatcher of cutlass_fp8_fc.h: argument, alignment and device checks, amax zeroing, and
// the call of the chosen configuration's instantiation (cutlass_fp8_fc_<name>.cu, through cutlass_fp8_fc_ops.h).
// Includes no CUTLASS header (seconds to compile); built like the configurations into
// $(BUILD)/cutlass/cutlass_fp8_fc.o, and every harness that links it links all the configuration objects.

#include "llmc/kernels/gemm/cutlass_fp8_fc.h"
#include "llmc/kernels/gemm/cutlass_fp8_fc_ops.h"
#include "llmc/kernels/gemm/cutlass_fp8_dispatch.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

CUTLASS_FP8_FC_CONFIGS(CUTLASS_FP8_FC_DECLARE_OPS)

namespace {

const CutlassFcOps* const g_ops[CUTLASS_FC_NUM_CONFIGS] = {
#define CUTLASS_FP8_FC_OPS_PTR(name, text) &cutlass_fp8_fc_ops_##name,
    CUTLASS_FP8_FC_CONFIGS(CUTLASS_FP8_FC_OPS_PTR)
#undef CUTLASS_FP8_FC_OPS_PTR
};

const char* const g_names[CUTLASS_FC_NUM_CONFIGS] = {
#define CUTLASS_FP8_FC_NAME(name, text) #name,
    CUTLASS_FP8_FC_CONFIGS(CUTLASS_FP8_FC_NAME)
#undef CUTLASS_FP8_FC_NAME
};

char g_why[512];

[[noreturn]] void fail(const char* msg) { cutlass_fail("cutlass_fp8_fc", msg); }

[[noreturn]] void failf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_why, sizeof(g_why), fmt, ap);
    va_end(ap);
    fail(g_why);
}

bool aligned16(const void* p) { return cutlass_aligned16(p); }

bool valid(CutlassFcConfig cfg) { return (int)cfg >= 0 && (int)cfg < CUTLASS_FC_NUM_CONFIGS; }

}  // namespace

const char* cutlass_fp8_fc_config_name(CutlassFcConfig cfg) { return valid(cfg) ? g_names[cfg] : nullptr; }

int cutlass_fp8_fc_config_parse(const char* name) {
    for (int i = 0; i < CUTLASS_FC_NUM_CONFIGS; i++)
        if (name && !strcmp(name, g_names[i])) return i;
    return -1;
}

bool cutlass_fp8_fc_config_writes_d(CutlassFcConfig cfg) { return valid(cfg) && g_ops[cfg]->gelu != CUTLASS_FC_GELU_NONE; }

bool cutlass_fp8_fc_config_writes_dt(CutlassFcConfig cfg) { return valid(cfg) && g_ops[cfg]->writes_dt; }

CutlassFcGelu cutlass_fp8_fc_config_gelu(CutlassFcConfig cfg) { return valid(cfg) ? g_ops[cfg]->gelu : CUTLASS_FC_GELU_NONE; }

void cutlass_fp8_fc_gelu_eval(CutlassFcConfig cfg, const float* in, float* out, int n, cudaStream_t stream) {
    if (!valid(cfg)) failf("gelu_eval: no configuration %d (there are %d)", (int)cfg, (int)CUTLASS_FC_NUM_CONFIGS);
    if (n < 0 || (n > 0 && (!in || !out))) failf("gelu_eval: needs n >= 0 (got %d) and device arrays in, out", n);
    if (const char* msg = g_ops[cfg]->act_eval(in, out, n, stream)) failf("gelu_eval, configuration %s: %s", g_names[cfg], msg);
}

const char* cutlass_fp8_fc_unsupported(int N, int C, int OC, const void* z, const void* d, const void* dt, int ldt, const void* inp,
                                       const void* weight, const void* bias, CutlassFcConfig cfg) {
    if (!valid(cfg)) return cutlass_why(N, C, OC, "no configuration %d (there are %d)", (int)cfg, (int)CUTLASS_FC_NUM_CONFIGS);
    if (N < 0 || C < 16 || OC < 16 || C % 16 != 0 || OC % 16 != 0)
        return cutlass_why(N, C, OC, "unsupported shape: needs N >= 0 and C, OC positive multiples of 16");
    if (!z || !d || !inp || !weight) return cutlass_why(N, C, OC, "z, d, inp and weight must not be NULL");
    if (!aligned16(z) || !aligned16(d) || !aligned16(inp) || !aligned16(weight) || !aligned16(bias))
        return cutlass_why(N, C, OC, "every tensor must be 16-byte aligned (z %p, d %p, inp %p, weight %p, bias %p)", z, d, inp, weight, bias);
    if (dt) {
        if (!g_ops[cfg]->writes_dt)
            return cutlass_why(N, C, OC, "configuration %s does not write the transposed codes (dt must be NULL)", g_names[cfg]);
        if (!aligned16(dt)) return cutlass_why(N, C, OC, "dt must be 16-byte aligned (%p)", dt);
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
    const CutlassFcCall call{(__nv_bfloat16*)z, (uint8_t*)d, (uint8_t*)dt, dt ? ldt : 0, nullptr, (const uint8_t*)inp, nullptr,
                             (const uint8_t*)weight, nullptr, (const __nv_bfloat16*)bias, nullptr, N, C, OC, info.dev, info.sms};
    if (const char* st = g_ops[cfg]->can_implement(call))
        return cutlass_why(N, C, OC, "CUTLASS can_implement (configuration %s): %s", g_names[cfg], st);
    return nullptr;
}

void cutlass_fp8_fc_forward(__nv_bfloat16* z, uint8_t* d, uint8_t* dt, int ldt, float* amax_d, const uint8_t* inp, const float* inp_dscale,
                            const uint8_t* weight, const float* weight_dscale, const __nv_bfloat16* bias, const float* d_scale,
                            int N, int C, int OC, cudaStream_t stream, CutlassFcConfig cfg) {
    if (const char* msg = cutlass_fp8_fc_unsupported(N, C, OC, z, d, dt, ldt, inp, weight, bias, cfg)) fail(msg);
    if (!inp_dscale || !weight_dscale || !d_scale) fail(cutlass_why(N, C, OC, "inp_dscale, weight_dscale and d_scale must not be NULL"));
    cudaError_t ce;
    if (amax_d && cutlass_fp8_fc_config_writes_d(cfg) && (ce = cudaMemsetAsync(amax_d, 0, sizeof(float), stream)) != cudaSuccess)
        fail(cutlass_why(N, C, OC, "zeroing amax_d: %s", cudaGetErrorString(ce)));
    if (N == 0) return;
    CutlassDevice info;
    cutlass_current_device(&info);  // (cutlass_fp8_fc_unsupported asked successfully)
    const CutlassFcCall call{z, d, dt, dt ? ldt : 0, amax_d, inp, inp_dscale, weight, weight_dscale, bias, d_scale, N, C, OC, info.dev, info.sms};
    if (const char* msg = g_ops[cfg]->run(call, stream)) fail(cutlass_why(N, C, OC, "configuration %s: %s", g_names[cfg], msg));
}

const char* cutlass_fp8_fc_describe(CutlassFcConfig cfg) { return valid(cfg) ? g_ops[cfg]->describe() : "(no such configuration)"; }

void cutlass_fp8_fc_free(void) {
    for (int i = 0; i < CUTLASS_FC_NUM_CONFIGS; i++) g_ops[i]->free_workspace();
}
