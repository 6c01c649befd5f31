// cutlass_fp8_fc.cu - the one CUTLASS instantiation behind cutlass_fp8_fc.h (what it computes, layouts, errors:
// there). Its own translation unit, compiled once into $(BUILD)/cutlass/cutlass_fp8_fc.o for sm_90a with
// -std=c++17 --expt-relaxed-constexpr and without --use_fast_math (the GELU below uses IEEE expf and division).
//
// The instantiation, in CUTLASS 3.x / 4.x terms (column-major D = A · B, M = OC, N = tokens, K = C):
//   mainloop  CollectiveBuilder<Sm90, TensorOp, e4m3 RowMajor A, e4m3 ColumnMajor B, fp32 accumulator,
//             tile 128x128x128, cluster 1x2x1, stages = what shared memory leaves after the epilogue,
//             KernelTmaWarpSpecializedCooperative>: the FP8 mainloop with fp32 promotion
//             (MainloopSm90TmaGmmaWarpSpecializedFP8, mma_promotion_interval 4)
//   epilogue  CollectiveBuilder<..., C = void, D = e4m3 ColumnMajor, TmaWarpSpecializedCooperative, fusion
//             ScaledLinCombPerRowBiasEltActAmaxAux<ColumnMajor aux, FcGeluBf16, D e4m3, compute fp32, aux bf16,
//             amax fp32, bias bf16, source void>>: Z = (alpha · scale_a · scale_b) · acc + bias (per row of D),
//             Z stored as BF16 through the aux store, D = act(Z) · scale_d as e4m3, amax_D = max |act(Z)|
//             (CUTLASS computes the amax on act(Z), before scale_d, for an FP8 D)
//   kernel    GemmUniversal<Shape<int,int,int,int>, mainloop, epilogue, PersistentScheduler>
// The reduction of amax_D is an atomicMax per thread and tile on the float's bit pattern (non-negative
// values: ordered like the values), order-independent. CUTLASS_SKIP_REDUCTION_INIT: CUTLASS would zero the amax
// with cuMemsetD32Async (a driver API call, -lcuda); cutlass_fp8_fc_forward zeroes it with cudaMemsetAsync.
#define CUTLASS_SKIP_REDUCTION_INIT 1

#include "llmc/kernels/gemm/cutlass_fp8_fc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/version.h>
#include <cutlass/numeric_types.h>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#if !defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)
#error "cutlass_fp8_fc.cu needs CUTLASS's SM90 MMA support: compile with nvcc >= 12.0 for sm_90a"
#endif

namespace {

// ------------------------------------------------------------------------------------------------
// The activation: GELU (tanh form) of the BF16-rounded pre-activation, rounded to BF16 (cutlass_fp8_fc.h)

CUTLASS_HOST_DEVICE float fc_bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// gemm_kernels.cuh gemm_gelu_tanh's formula: x * sigmoid(2u), sigmoid(2u) = 1 / (1 + exp(-2u)). exp overflow for
// very negative x gives x / inf = -0, the right limit.
CUTLASS_HOST_DEVICE float fc_gelu_stored(float z) {
    const float x = fc_bf16_round(z);
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    const float s = 1.0f / (1.0f + expf(-2.0f * u));
    return fc_bf16_round(x * s);
}

// The epilogue applies ActivationFn<Array<float, FragmentSize>> to fragments (Sm90Compute); the scalar
// specialization is what it inspects for an Arguments member (none: no parameters).
template <class T> struct FcGeluBf16;

template <> struct FcGeluBf16<float> {
    CUTLASS_HOST_DEVICE float operator()(float z) const { return fc_gelu_stored(z); }
};

template <int N> struct FcGeluBf16<cutlass::Array<float, N>> {
    CUTLASS_HOST_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& z) const {
        cutlass::Array<float, N> g;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) g[i] = fc_gelu_stored(z[i]);
        return g;
    }
};

// ------------------------------------------------------------------------------------------------
// The GEMM type

using namespace cute;

using ElementA = cutlass::float_e4m3_t;        // weight: M x K row-major (K contiguous)
using LayoutA = cutlass::layout::RowMajor;
using ElementB = cutlass::float_e4m3_t;        // inp: K x N column-major (K contiguous)
using LayoutB = cutlass::layout::ColumnMajor;
using ElementD = cutlass::float_e4m3_t;        // GELU codes: M x N column-major = (N, OC) row-major
using LayoutD = cutlass::layout::ColumnMajor;
using ElementAux = cutlass::bfloat16_t;        // Z: same layout as D
using LayoutAux = cutlass::layout::ColumnMajor;
using ElementBias = cutlass::bfloat16_t;
using ElementAccumulator = float;
using ElementCompute = float;
using ElementAmax = float;
constexpr int kAlignA = 16, kAlignB = 16, kAlignD = 16;  // elements: 16 bytes of e4m3 (TMA)

using TileShape = Shape<_128, _128, _128>;
using ClusterShape = Shape<_1, _2, _1>;
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;

using FusionOp = cutlass::epilogue::fusion::ScaledLinCombPerRowBiasEltActAmaxAux<
    LayoutAux, FcGeluBf16, ElementD, ElementCompute, ElementAux, ElementAmax, ElementBias, /*ElementSource*/ void>;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto,
    ElementAccumulator, ElementCompute, /*ElementC*/ void, LayoutD, kAlignD, ElementD, LayoutD, kAlignD, EpilogueSchedule,
    FusionOp>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignA, ElementB, LayoutB, kAlignB, ElementAccumulator,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                        cutlass::gemm::PersistentScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

using StrideA = typename GemmKernel::StrideA;
using StrideB = typename GemmKernel::StrideB;
using StrideC = typename GemmKernel::StrideC;
using StrideD = typename GemmKernel::StrideD;
using StrideAux = cutlass::gemm::TagToStrideC_t<LayoutAux>;

static_assert(cute::is_same_v<StrideA, cute::Stride<int64_t, cute::Int<1>, int64_t>>, "A: K-major (M, K, L) stride");
static_assert(cute::is_same_v<StrideB, cute::Stride<int64_t, cute::Int<1>, int64_t>>, "B: K-major (N, K, L) stride");
static_assert(cute::is_same_v<StrideD, cute::Stride<cute::Int<1>, int64_t, int64_t>>, "D: M-major (M, N, L) stride");
static_assert(cute::is_same_v<StrideAux, StrideD>, "Z: the layout of D");

// ------------------------------------------------------------------------------------------------
// Host side

char g_why[512];

const char* why(int N, int C, int OC, const char* fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(g_why, sizeof(g_why), "%s (N=%d, C=%d, OC=%d)", what, N, C, OC);
    return g_why;
}

[[noreturn]] void fail(const char* msg) {
    fprintf(stderr, "error: cutlass_fp8_fc: %s\n", msg);
    exit(EXIT_FAILURE);
}

bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// Per device: compute capability and SM count, asked once.
struct DeviceInfo {
    int cc = -1;
    int sms = 0;
};
DeviceInfo g_devices[64];

const DeviceInfo* device_info(int* dev_out) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return nullptr;
    DeviceInfo& d = g_devices[dev];
    if (d.cc < 0) {
        int major = 0, minor = 0, sms = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            return nullptr;
        d.cc = major * 10 + minor;
        d.sms = sms;
    }
    *dev_out = dev;
    return &d;
}

typename Gemm::Arguments make_arguments(__nv_bfloat16* z, uint8_t* d, float* amax_d, const uint8_t* inp, const float* inp_dscale,
                                        const uint8_t* weight, const float* weight_dscale, const __nv_bfloat16* bias,
                                        const float* d_scale, int N, int C, int OC, int dev, int sms) {
    const int64_t M = OC, Nn = N, K = C;
    const StrideA stride_a = cute::make_stride(K, cute::Int<1>{}, M * K);        // weight (OC, C) row-major
    const StrideB stride_b = cute::make_stride(K, cute::Int<1>{}, Nn * K);       // inp (N, C) row-major
    const StrideD stride_d = cute::make_stride(cute::Int<1>{}, M, M * Nn);       // (N, OC) row-major
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {OC, N, C, 1};
    args.mainloop.ptr_A = reinterpret_cast<ElementA const*>(weight);
    args.mainloop.dA = stride_a;
    args.mainloop.ptr_B = reinterpret_cast<ElementB const*>(inp);
    args.mainloop.dB = stride_b;
    args.mainloop.mma_promotion_interval = 4;
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = StrideC{};
    args.epilogue.ptr_D = reinterpret_cast<ElementD*>(d);
    args.epilogue.dD = stride_d;
    auto& f = args.epilogue.thread;
    f.alpha = 1.0f;
    f.beta = 0.0f;
    f.scale_a = 1.0f;
    f.scale_b = 1.0f;
    f.scale_d = 1.0f;
    f.scale_a_ptr = weight_dscale;  // A = weight
    f.scale_b_ptr = inp_dscale;     // B = inp
    f.scale_d_ptr = d_scale;
    f.bias_ptr = reinterpret_cast<ElementBias const*>(bias);
    f.amax_D_ptr = amax_d;
    f.amax_aux_ptr = nullptr;       // Z is BF16: no amax, no scale
    f.aux_ptr = reinterpret_cast<ElementAux*>(z);
    f.dAux = stride_d;
    args.hw_info.device_id = dev;
    args.hw_info.sm_count = sms;
    return args;
}

void* g_workspace = nullptr;
size_t g_workspace_bytes = 0;

}  // namespace

const char* cutlass_fp8_fc_unsupported(int N, int C, int OC, const void* z, const void* d, const void* inp, const void* weight,
                                       const void* bias) {
    if (N < 0 || C < 16 || OC < 16 || C % 16 != 0 || OC % 16 != 0)
        return why(N, C, OC, "unsupported shape: needs N >= 0 and C, OC positive multiples of 16");
    if (!z || !d || !inp || !weight) return why(N, C, OC, "z, d, inp and weight must not be NULL");
    if (!aligned16(z) || !aligned16(d) || !aligned16(inp) || !aligned16(weight) || !aligned16(bias))
        return why(N, C, OC, "every tensor must be 16-byte aligned (z %p, d %p, inp %p, weight %p, bias %p)", z, d, inp, weight, bias);
    int dev = 0;
    const DeviceInfo* info = device_info(&dev);
    if (!info) return why(N, C, OC, "cannot query the current CUDA device");
    if (info->cc != 90)
        return why(N, C, OC, "needs a compute capability 9.0 GPU (sm_90a code), device %d has %d.%d", dev, info->cc / 10, info->cc % 10);
    if (N == 0) return nullptr;
    // CUTLASS's own checks (TMA alignment of the strides, the fusion's); the scales play no part in them
    typename Gemm::Arguments args = make_arguments((__nv_bfloat16*)z, (uint8_t*)d, nullptr, (const uint8_t*)inp, nullptr,
                                                   (const uint8_t*)weight, nullptr, (const __nv_bfloat16*)bias, nullptr, N, C, OC, dev,
                                                   info->sms);
    const cutlass::Status st = Gemm::can_implement(args);
    if (st != cutlass::Status::kSuccess) return why(N, C, OC, "CUTLASS can_implement: %s", cutlass::cutlassGetStatusString(st));
    return nullptr;
}

void cutlass_fp8_fc_forward(__nv_bfloat16* z, uint8_t* d, float* amax_d, const uint8_t* inp, const float* inp_dscale,
                            const uint8_t* weight, const float* weight_dscale, const __nv_bfloat16* bias, const float* d_scale,
                            int N, int C, int OC, cudaStream_t stream) {
    if (const char* msg = cutlass_fp8_fc_unsupported(N, C, OC, z, d, inp, weight, bias)) fail(msg);
    if (!inp_dscale || !weight_dscale || !d_scale) fail(why(N, C, OC, "inp_dscale, weight_dscale and d_scale must not be NULL"));
    cudaError_t ce;
    if (amax_d && (ce = cudaMemsetAsync(amax_d, 0, sizeof(float), stream)) != cudaSuccess)
        fail(why(N, C, OC, "zeroing amax_d: %s", cudaGetErrorString(ce)));
    if (N == 0) return;
    int dev = 0;
    const DeviceInfo* info = device_info(&dev);
    typename Gemm::Arguments args = make_arguments(z, d, amax_d, inp, inp_dscale, weight, weight_dscale, bias, d_scale, N, C, OC, dev,
                                                   info->sms);
    const size_t ws = Gemm::get_workspace_size(args);
    if (ws > g_workspace_bytes) {
        if (g_workspace) cudaFree(g_workspace);
        g_workspace = nullptr;
        g_workspace_bytes = 0;
        if ((ce = cudaMalloc(&g_workspace, ws)) != cudaSuccess)
            fail(why(N, C, OC, "workspace of %zu bytes: %s", ws, cudaGetErrorString(ce)));
        g_workspace_bytes = ws;
    }
    Gemm gemm;
    cutlass::Status st = gemm.initialize(args, g_workspace, stream);
    if (st != cutlass::Status::kSuccess)
        fail(why(N, C, OC, "CUTLASS initialize: %s (CUDA: %s)", cutlass::cutlassGetStatusString(st), cudaGetErrorString(cudaGetLastError())));
    st = gemm.run(stream);
    ce = cudaGetLastError();
    if (st != cutlass::Status::kSuccess || ce != cudaSuccess)
        fail(why(N, C, OC, "CUTLASS run: %s (CUDA: %s)", cutlass::cutlassGetStatusString(st), cudaGetErrorString(ce)));
}

const char* cutlass_fp8_fc_describe(void) {
    static char line[320];
    snprintf(line, sizeof(line),
             "CUTLASS %d.%d.%d: sm_90a TMA warp-specialized cooperative FP8 GEMM (fp32 promotion every 4 k-blocks), tile 128x128x128, "
             "cluster 1x2x1, persistent data-parallel scheduler, %d stages, %d B shared memory; epilogue Z bf16 + GELU e4m3 + amax",
             CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH, (int)CollectiveMainloop::DispatchPolicy::Stages, (int)GemmKernel::SharedStorageSize);
    return line;
}

void cutlass_fp8_fc_free(void) {
    if (g_workspace) cudaFree(g_workspace);
    g_workspace = nullptr;
    g_workspace_bytes = 0;
}
