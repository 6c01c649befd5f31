// cutlass_tcast_gemm.cu - the dispatcher of cutlass_tcast_gemm.h: argument, alignment, data-type and device checks, the
// cast's quantizer choice (the pass's: tcast_cast_path without statistics) and the call of the chosen configuration's
// instantiation (cutlass_tcast_gemm_<name>.cu, through cutlass_tcast_gemm_ops.h). Includes no CUTLASS header (seconds
// to compile); built like the configurations into $(BUILD)/cutlass/cutlass_tcast_gemm.o, and every harness that links
// it links all the configuration objects.

#include "llmc/kernels/gemm/cutlass_tcast_gemm.h"
#include "llmc/kernels/gemm/cutlass_tcast_gemm_ops.h"
#include "llmc/kernels/gemm/cutlass_fp8_dispatch.h"  // cutlass_aligned16, cutlass_current_device, cutlass_fail

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

CUTLASS_TCAST_GEMM_CONFIGS(CUTLASS_TCAST_GEMM_DECLARE_OPS)

namespace {

const CutlassTcastOps* const g_ops[CUTLASS_TCAST_NUM_CONFIGS] = {
#define CUTLASS_TCAST_GEMM_OPS_PTR(name, text) &cutlass_tcast_gemm_ops_##name,
    CUTLASS_TCAST_GEMM_CONFIGS(CUTLASS_TCAST_GEMM_OPS_PTR)
#undef CUTLASS_TCAST_GEMM_OPS_PTR
};

const char* const g_names[CUTLASS_TCAST_NUM_CONFIGS] = {
#define CUTLASS_TCAST_GEMM_NAME(name, text) #name,
    CUTLASS_TCAST_GEMM_CONFIGS(CUTLASS_TCAST_GEMM_NAME)
#undef CUTLASS_TCAST_GEMM_NAME
};

constexpr int kGroup = 32;  // the node's group length (cutlass_tcast_gemm_impl.cuh kTcastGemmTile)

char g_cast_why[384];

const char* cast_why(const TcastDataType* dt, const char* fmt, ...) {
    char what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(g_cast_why, sizeof(g_cast_why), "%s: %s (this cast keeps the pass)", dt->name, what);
    return g_cast_why;
}

[[noreturn]] void fail(const char* msg) { cutlass_fail("cutlass_tcast_gemm", msg); }

bool valid(CutlassTcastConfig cfg) { return (int)cfg >= 0 && (int)cfg < CUTLASS_TCAST_NUM_CONFIGS; }

// The node's quantizer for dt (a type cutlass_tcast_gemm_cast_unsupported accepts, so k.fast): the pass's choice
// without statistics, tcast_cast.cuh tcast_cast_path (k.rne ? RNE : exponent), which this file cannot include (its
// cast kernels have external linkage and the harnesses that link this object include it too); OFF for no cast.
int quant_of(const TcastDataType* dt) {
    if (!dt) return CUTLASS_TCAST_OFF;
    return tcast_kernel_args(*dt, 0).rne ? CUTLASS_TCAST_RNE : CUTLASS_TCAST_EXP;
}

}  // namespace

const char* cutlass_tcast_gemm_config_name(CutlassTcastConfig cfg) { return valid(cfg) ? g_names[cfg] : nullptr; }

int cutlass_tcast_gemm_config_parse(const char* name) {
    for (int i = 0; i < CUTLASS_TCAST_NUM_CONFIGS; i++)
        if (name && !strcmp(name, g_names[i])) return i;
    return -1;
}

const char* cutlass_tcast_gemm_describe(CutlassTcastConfig cfg) { return valid(cfg) ? g_ops[cfg]->describe() : "(no such configuration)"; }

const char* cutlass_tcast_gemm_cast_unsupported(const TcastDataType* dt, int N, int OC) {
    if (!dt) return nullptr;
    if (dt->sparse_n > 0) return cast_why(dt, "M:N sparsity (the pruning needs its group before the cast)");
    if (dt->has_scale) {
        if (dt->scale.tile != kGroup)
            return cast_why(dt, "%s scale; the epilogue casts tiles of %d along the row only",
                            dt->scale.tile > 0 ? "another tile's" : dt->scale.tile == 0 ? "a channel" : "a per-tensor", kGroup);
        if (dt->scale.dim_given && dt->scale.dim != 1 && dt->scale.dim != -1)
            return cast_why(dt, "the scale spec names dim %d; the epilogue casts along the rows (dim 1)", dt->scale.dim);
    }
    const TcastKernelArgs k = tcast_kernel_args(*dt, 0);
    if (!k.fast) return cast_why(dt, "the general quantizer (float scales, uint numbers, wide mantissas) has no epilogue form");
    // tcast_cast_shape_ok's rule along dim 1 (the tile divides the row); the node's grouping needs it of unscaled types too
    if (OC % kGroup != 0) return cast_why(dt, "the epilogue's %d-column groups do not divide the row length OC = %d", kGroup, OC);
    (void)N;
    return nullptr;
}

namespace {

// The call's operands (device from info); dt NULL: that cast off.
CutlassTcastCall make_call(const CutlassDevice& info, const void* out, const void* pre, const void* inp, const void* weight, const void* bias,
                           int N, int C, int OC, const TcastDataType* dt, uint64_t seed, const TcastDataType* dt_gelu, uint64_t seed_gelu) {
    CutlassTcastCall call{};
    call.out = (__nv_bfloat16*)out;
    call.pre = (__nv_bfloat16*)pre;
    call.inp = (const __nv_bfloat16*)inp;
    call.weight = (const __nv_bfloat16*)weight;
    call.bias = (const __nv_bfloat16*)bias;
    call.N = N;
    call.C = C;
    call.OC = OC;
    call.quant = quant_of(dt);
    if (dt) call.k = tcast_kernel_args(*dt, seed);
    call.quant_gelu = quant_of(dt_gelu);
    if (dt_gelu) call.k_gelu = tcast_kernel_args(*dt_gelu, seed_gelu);
    call.device = info.dev;
    call.sm_count = info.sms;
    return call;
}

// The checks both GEMMs share (shape, alignment of the given pointers, the casts, the device); NULL or why not.
const char* common_unsupported(int N, int C, int OC, const void* const* ptrs, int nptrs, const TcastDataType* dt, const TcastDataType* dt2,
                               CutlassTcastConfig cfg, CutlassDevice* info) {
    if (!valid(cfg)) return cutlass_why(N, C, OC, "no configuration %d (there are %d)", (int)cfg, (int)CUTLASS_TCAST_NUM_CONFIGS);
    if (N < 0 || C < 8 || OC < 8 || C % 8 != 0 || OC % 8 != 0)
        return cutlass_why(N, C, OC, "unsupported shape: needs N >= 0 and C, OC positive multiples of 8");
    for (int i = 0; i < nptrs; i++)
        if (!cutlass_aligned16(ptrs[i])) return cutlass_why(N, C, OC, "every tensor must be 16-byte aligned (pointer %d: %p)", i, ptrs[i]);
    if (const char* c = cutlass_tcast_gemm_cast_unsupported(dt, N, OC)) return cutlass_why(N, C, OC, "%s", c);
    if (const char* c = cutlass_tcast_gemm_cast_unsupported(dt2, N, OC)) return cutlass_why(N, C, OC, "%s", c);
    if (!cutlass_current_device(info)) return cutlass_why(N, C, OC, "cannot query the current CUDA device");
    if (info->cc != 90)
        return cutlass_why(N, C, OC, "needs a compute capability 9.0 GPU (sm_90a code), device %d has %d.%d", info->dev, info->cc / 10, info->cc % 10);
    return nullptr;
}

}  // namespace

const char* cutlass_tcast_gemm_gelu_unsupported(int N, int C, int OC, const void* out, const void* pre, const void* inp, const void* weight,
                                                const void* bias, const TcastDataType* dt_pre, const TcastDataType* dt_out,
                                                CutlassTcastConfig cfg) {
    if (!out || !inp || !weight) return cutlass_why(N, C, OC, "out, inp and weight must not be NULL");
    if (pre && pre == out) return cutlass_why(N, C, OC, "pre and out must be different buffers");
    const void* ptrs[5] = {out, pre, inp, weight, bias};
    CutlassDevice info;
    if (const char* w = common_unsupported(N, C, OC, ptrs, 5, dt_pre, dt_out, cfg, &info)) return w;
    if (N == 0) return nullptr;
    const CutlassTcastCall call = make_call(info, out, pre, inp, weight, bias, N, C, OC, dt_pre, 0, dt_out, 0);
    if (const char* st = g_ops[cfg]->can_implement_gelu(call))
        return cutlass_why(N, C, OC, "CUTLASS can_implement (configuration %s, GELU epilogue): %s", g_names[cfg], st);
    return nullptr;
}

void cutlass_tcast_gemm_forward_gelu(__nv_bfloat16* out, __nv_bfloat16* pre, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                     const __nv_bfloat16* bias, int N, int C, int OC, const TcastDataType* dt_pre, uint64_t seed_pre,
                                     const TcastDataType* dt_out, uint64_t seed_out, cudaStream_t stream, CutlassTcastConfig cfg) {
    if (const char* msg = cutlass_tcast_gemm_gelu_unsupported(N, C, OC, out, pre, inp, weight, bias, dt_pre, dt_out, cfg)) fail(msg);
    if (N == 0) return;
    CutlassDevice info;
    cutlass_current_device(&info);  // (asked successfully above)
    const CutlassTcastCall call = make_call(info, out, pre, inp, weight, bias, N, C, OC, dt_pre, seed_pre, dt_out, seed_out);
    if (const char* msg = g_ops[cfg]->run_gelu(call, stream)) fail(cutlass_why(N, C, OC, "configuration %s (GELU epilogue): %s", g_names[cfg], msg));
}

const char* cutlass_tcast_gemm_unsupported(int N, int C, int OC, const void* out, const void* inp, const void* weight, const void* bias,
                                           const TcastDataType* dt, CutlassTcastConfig cfg) {
    if (!out || !inp || !weight) return cutlass_why(N, C, OC, "out, inp and weight must not be NULL");
    const void* ptrs[4] = {out, inp, weight, bias};
    CutlassDevice info;
    if (const char* w = common_unsupported(N, C, OC, ptrs, 4, dt, nullptr, cfg, &info)) return w;
    if (N == 0) return nullptr;
    const CutlassTcastCall call = make_call(info, out, nullptr, inp, weight, bias, N, C, OC, dt, 0, nullptr, 0);
    if (const char* st = g_ops[cfg]->can_implement(call)) return cutlass_why(N, C, OC, "CUTLASS can_implement (configuration %s): %s", g_names[cfg], st);
    return nullptr;
}

void cutlass_tcast_gemm_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                                int N, int C, int OC, const TcastDataType* dt, uint64_t seed, cudaStream_t stream, CutlassTcastConfig cfg) {
    if (const char* msg = cutlass_tcast_gemm_unsupported(N, C, OC, out, inp, weight, bias, dt, cfg)) fail(msg);
    if (N == 0) return;
    CutlassDevice info;
    cutlass_current_device(&info);  // (cutlass_tcast_gemm_unsupported asked successfully)
    const CutlassTcastCall call = make_call(info, out, nullptr, inp, weight, bias, N, C, OC, dt, seed, nullptr, 0);
    if (const char* msg = g_ops[cfg]->run(call, stream)) fail(cutlass_why(N, C, OC, "configuration %s: %s", g_names[cfg], msg));
}

void cutlass_tcast_gemm_free(void) {
    for (int i = 0; i < CUTLASS_TCAST_NUM_CONFIGS; i++) g_ops[i]->free_workspace();
}
