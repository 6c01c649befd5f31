// cutlass_q115_gemm.cu - cutlass_q115_gemm.h: the SF16 forward GEMM with the Q1.15 boundary in its epilogue, both
// CUTLASS instantiations (plain, GELU) and their host side. Compiled for sm_90a with -std=c++17
// --expt-relaxed-constexpr and WITHOUT --use_fast_math into $(BUILD)/cutlass/cutlass_q115_gemm.o (Makefile); the
// quantizers are llmc/numerics/q115.h's (integer code and explicitly rounded float intrinsics: the same bits with or
// without fast math), the GELU the explicit PTX of gelu_fastmath.cuh.
//
// The instantiation, in CUTLASS 4.x terms (as cutlass_tcast_gemm_impl.cuh's, which the harness there measured at
// cuBLASLt's speed without a cast: doc/TCAST.md 5.6):
//   mainloop  CollectiveBuilder<Sm90, TensorOp, bf16 RowMajor A (inp), bf16 ColumnMajor B (weight; both K-major), fp32
//             accumulator, tile 128x256x64, cluster 2x1, stages = what shared memory leaves after the epilogue,
//             KernelTmaWarpSpecializedCooperative>
//   epilogue  Sm90TmaBuilderImpl with C = void, D bf16 row-major, the visitor tree below as the callbacks, and
//             Sm90TmaWarpSpecialized<min(subtiles, 4), 2, epilogue tile 128x64 / 256 threads, no smem reuse, delayed
//             TMA store>
//   kernel    GemmUniversal<Shape<int,int,int,int>, mainloop, epilogue, PersistentScheduler>
// The visitor tree (leaves first; every node a CUTLASS built-in, the two functors below the only code of ours):
//   v   = acc + bias[o]         Sm90Compute<plus, float> of Sm90AccFetch and Sm90RowBroadcast (bf16 bias, NULL: 0)
//   q   = Q(bf16_rne(v))        Sm90Compute<Q115Bound, bf16>: the plain form's root (its BF16 fragments are stored as D)
// GELU form:
//   pre = q                     Sm90AuxStore (row-major bf16, the builder's swizzle and stmatrix copy): stored, passed on
//   out = G(gelu_tanh(pre))     Sm90Compute<Q115Gelu, bf16>: the root
// Determinism: every output element is written by the one CTA that owns its tile, from a whole-K accumulation in a
// fixed order.

#include "llmc/kernels/gemm/cutlass_q115_gemm.h"
#include "llmc/kernels/gemm/cutlass_fp8_common.cuh"    // CutlassRunner (host side of a GEMM type)
#include "llmc/kernels/gemm/cutlass_fp8_dispatch.h"   // cutlass_aligned16, cutlass_current_device, cutlass_why, cutlass_fail
#include "llmc/kernels/gemm/gelu_fastmath.cuh"        // gelu_tanh_fastmath
#include "llmc/numerics/q115.h"

#include <stdint.h>
#include <stdio.h>

#include <cutlass/version.h>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>

// ------------------------------------------------------------------------------------------------
// The epilogue's two elementwise functions (scalar; the functors below apply them to fragments). Device only: the
// collective never evaluates the tree on the host.

// Q(bf16_rne(v)) for mode m (CutlassQ115Mode): the MATMUL_OUT boundary of the BF16 value the pass would read.
// CUTLASS_Q115_Q131 computes simulate_q115(y) alone, which equals simulate_q115(simulate_q131(y)) for every BF16 value
// y: simulate_q131 changes a BF16 value only where |y| >= 1 (to +-1.0, which simulate_q115 clamps like y itself) or
// |y| < 2^-24 (below that a BF16 value leaves the 2^-31 grid; simulate_q115 flushes both to +0), and NaN stays NaN; the
// harness checks it on all 65536 BF16 values (check (e), SF16_TRUE_FORWARD build). The exact Q1.31 rounding costs
// branches and integer steps per element, which in this epilogue made the true-forward d12 step 20 ms slower
// (nvidia-h100-x1, 2026-11-27: 158.9 ms against 139.3 with the passes).
__device__ __forceinline__ float q115_epi_bound(float v, int m) {
    const float y = __bfloat162float(__float2bfloat16_rn(v));
    return m == CUTLASS_Q115_OFF ? y : simulate_q115(y);
}

// G(gelu_tanh(x)) of a BF16 pre-activation x: gemm_gelu_stored's value before its rounding to BF16.
__device__ __forceinline__ float q115_epi_gelu(float x, int m) {
    const float g = gelu_tanh_fastmath(x);
    return m == CUTLASS_Q115_OFF ? g : simulate_q115(g);
}

namespace {

using namespace cute;
namespace cef = cutlass::epilogue::fusion;

// Sm90Compute<Fn> applies Fn<Array<float, N>> to fragments. The mode is a template parameter, not a run-time argument:
// a functor with Fn<float>::Arguments gets them through a reference to the node's parameters, which the first build
// of this file read once per element (d12 qkv 0.65 ms against 0.34 without: dev/cuda/cutlass_q115_gemm.cu, 2026-11-27).
template <class T, bool kGelu, int kMode> struct Q115Epi;
template <bool kGelu, int kMode> struct Q115Epi<float, kGelu, kMode> {
    CUTLASS_DEVICE float operator()(float v) const { return kGelu ? q115_epi_gelu(v, kMode) : q115_epi_bound(v, kMode); }
};
template <int N, bool kGelu, int kMode> struct Q115Epi<cutlass::Array<float, N>, kGelu, kMode> {
    CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& v) const {
        cutlass::Array<float, N> r;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) r[i] = kGelu ? q115_epi_gelu(v[i], kMode) : q115_epi_bound(v[i], kMode);
        return r;
    }
};
// Sm90Compute takes a template of one type parameter
template <int kMode> struct Q115Fns {
    template <class T> using Bound = Q115Epi<T, false, kMode>;
    template <class T> using Gelu = Q115Epi<T, true, kMode>;
};

constexpr auto kRN = cutlass::FloatRoundStyle::round_to_nearest;
using QgTile = Shape<_128, _256, _64>;
using QgCluster = Shape<_2, _1, _1>;
using QgEpiTile = Shape<_128, _64>;
using QgSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
constexpr int kEpiThreads = 256;  // cooperative: two consumer warp groups
constexpr int kAlign = 8;         // elements: 16 bytes (TMA)
constexpr int kSubtiles = cute::size(cute::shape_div(cute::take<0, 2>(QgTile{}), QgEpiTile{}));
constexpr int kStagesD = kSubtiles < 2 ? kSubtiles : 2;  // CUTLASS's automatic D (and aux) buffers
using StrideRow = cute::Stride<int64_t, cute::Int<1>, int64_t>;
using Bf16 = cutlass::bfloat16_t;

// q = Q(bf16(acc + bias)) (the header comment's tree without the GELU form's two top nodes)
template <int kMode>
using QTree = cef::Sm90EVT<cef::Sm90Compute<Q115Fns<kMode>::template Bound, Bf16, float, kRN>,
                           cef::Sm90EVT<cef::Sm90Compute<cutlass::plus, float, float, kRN>, cef::Sm90AccFetch,
                                        cef::Sm90RowBroadcast<0, QgTile, Bf16, float, Stride<_0, _1, int64_t>, 8>>>;
using PreStore = cef::Sm90AuxStore<
    kStagesD, QgEpiTile, Bf16, kRN, StrideRow,
    decltype(cutlass::epilogue::collective::detail::sm90_get_epilogue_smem_swizzle_layout_atom<StrideRow, Bf16, QgEpiTile>()),
    decltype(cutlass::epilogue::collective::detail::sm90_get_smem_store_op_for_accumulator<StrideRow, Bf16, QgEpiTile>()), kAlign>;
template <int kMode>
using GeluTree = cef::Sm90EVT<cef::Sm90Compute<Q115Fns<kMode>::template Gelu, Bf16, float, kRN>, cef::Sm90EVT<PreStore, QTree<kMode>>>;

// The GEMM type of one tree.
template <class Tree>
struct Q115Gemm {
    using EpiloguePolicy = cutlass::epilogue::Sm90TmaWarpSpecialized<(kSubtiles < 4 ? kSubtiles : 4), kStagesD,
                                                                     cute::size(QgEpiTile{}) / kEpiThreads, /*ReuseSmemC*/ false,
                                                                     /*DelayTmaStore*/ true>;
    using CollectiveEpilogue = typename cutlass::epilogue::collective::detail::Sm90TmaBuilderImpl<
        QgTile, QgEpiTile, float, float, /*ElementC*/ void, cutlass::layout::RowMajor, kAlign, Bf16, cutlass::layout::RowMajor, kAlign, Tree,
        EpiloguePolicy>::CollectiveOp;
    using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, cutlass::layout::RowMajor, kAlign, Bf16, cutlass::layout::ColumnMajor,
        kAlign, float, QgTile, QgCluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
        QgSchedule>::CollectiveOp;
    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                        cutlass::gemm::PersistentScheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
    static_assert(cute::is_same_v<typename Kernel::StrideA, StrideRow>, "A: K-major (M, K, L)");
    static_assert(cute::is_same_v<typename Kernel::StrideB, StrideRow>, "B: K-major (N, K, L)");
    static_assert(cute::is_same_v<typename Kernel::StrideD, StrideRow>, "D: row-major (M, N, L)");
    using Runner = CutlassRunner<Gemm, Q115Gemm>;

    // The arguments every tree shares (M = N tokens, N = OC, K = C); q: the QTree's arguments to fill.
    static typename Gemm::Arguments arguments(void* out, const void* inp, const void* weight, int N, int C, int OC,
                                              const CutlassDevice& info) {
        const int64_t M = N, Nn = OC, K = C;
        typename Gemm::Arguments args{};
        args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
        args.problem_shape = {(int)M, (int)Nn, (int)K, 1};
        args.mainloop.ptr_A = reinterpret_cast<Bf16 const*>(inp);
        args.mainloop.dA = cute::make_stride(K, cute::Int<1>{}, M * K);
        args.mainloop.ptr_B = reinterpret_cast<Bf16 const*>(weight);
        args.mainloop.dB = cute::make_stride(K, cute::Int<1>{}, Nn * K);
        args.epilogue.ptr_C = nullptr;
        args.epilogue.dC = typename Kernel::StrideC{};
        args.epilogue.ptr_D = reinterpret_cast<Bf16*>(out);
        args.epilogue.dD = cute::make_stride(Nn, cute::Int<1>{}, M * Nn);
        args.hw_info.device_id = info.dev;
        args.hw_info.sm_count = info.sms;
        return args;
    }
};

template <int kMode> using PlainGemm = Q115Gemm<QTree<kMode>>;
template <int kMode> using GeluGemm = Q115Gemm<GeluTree<kMode>>;

// QTree's arguments: {v = {acc, bias, plus}, Q}
template <int kMode>
void set_bias(typename QTree<kMode>::Arguments& q, const void* bias) {
    q.op_0.op_1 = {reinterpret_cast<Bf16 const*>(bias), Bf16(0.0f), {}};
}

template <int kMode>
typename PlainGemm<kMode>::Gemm::Arguments plain_args(void* out, const void* inp, const void* weight, const void* bias, int N, int C, int OC,
                                                     const CutlassDevice& info) {
    auto args = PlainGemm<kMode>::arguments(out, inp, weight, N, C, OC, info);
    set_bias<kMode>(args.epilogue.thread, bias);
    return args;
}

template <int kMode>
typename GeluGemm<kMode>::Gemm::Arguments gelu_args(void* out, void* pre, const void* inp, const void* weight, const void* bias, int N, int C,
                                                   int OC, const CutlassDevice& info) {
    auto args = GeluGemm<kMode>::arguments(out, inp, weight, N, C, OC, info);
    auto& root = args.epilogue.thread;  // {{q, pre store}, G}
    set_bias<kMode>(root.op_0.op_0, bias);
    root.op_0.op_1 = {reinterpret_cast<Bf16*>(pre), cute::make_stride((int64_t)OC, cute::Int<1>{}, (int64_t)N * OC)};
    return args;
}

// can_implement (run = false) or run of the form's instantiation for mode kMode; NULL or CUTLASS's message. The GELU
// form exists for the two boundary modes only (the fc layer always quantizes).
template <int kMode>
const char* dispatch(bool run, void* out, void* pre, const void* inp, const void* weight, const void* bias, int N, int C, int OC,
                     const CutlassDevice& info, cudaStream_t stream) {
    if (pre) {
        if constexpr (kMode == CUTLASS_Q115_OFF) return "the GELU form needs a boundary mode (1 or 2)";  // (refused before)
        else {
            using R = typename GeluGemm<kMode>::Runner;
            const auto args = gelu_args<kMode>(out, pre, inp, weight, bias, N, C, OC, info);
            return run ? R::run(args, stream) : R::can_implement(args);
        }
    }
    using R = typename PlainGemm<kMode>::Runner;
    const auto args = plain_args<kMode>(out, inp, weight, bias, N, C, OC, info);
    return run ? R::run(args, stream) : R::can_implement(args);
}

const char* dispatch_mode(int mode, bool run, void* out, void* pre, const void* inp, const void* weight, const void* bias, int N, int C, int OC,
                          const CutlassDevice& info, cudaStream_t stream) {
    switch (mode) {
    case CUTLASS_Q115_OFF: return dispatch<CUTLASS_Q115_OFF>(run, out, pre, inp, weight, bias, N, C, OC, info, stream);
    case CUTLASS_Q115_Q115: return dispatch<CUTLASS_Q115_Q115>(run, out, pre, inp, weight, bias, N, C, OC, info, stream);
    default: return dispatch<CUTLASS_Q115_Q131>(run, out, pre, inp, weight, bias, N, C, OC, info, stream);
    }
}

[[noreturn]] void fail(const char* msg) { cutlass_fail("cutlass_q115_gemm", msg); }

}  // namespace

namespace cutlass_q115_detail {
// out[i] = bf16_rne(the epilogue function of in[i]) (cutlass_q115_gemm_eval); one thread a value.
__global__ void q115_epi_eval_kernel(const float* __restrict__ in, float* __restrict__ out, int n, int gelu, int mode) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float r = gelu ? q115_epi_gelu(in[i], mode) : q115_epi_bound(in[i], mode);
    out[i] = __bfloat162float(__float2bfloat16_rn(r));
}
}  // namespace cutlass_q115_detail

const char* cutlass_q115_gemm_describe(void) {
    static char line[400];
    using G = PlainGemm<CUTLASS_Q115_Q115>;
    snprintf(line, sizeof(line),
             "CUTLASS %d.%d.%d sm_90a, cooperative, tile %dx%dx%d, cluster %dx%dx%d, %d stages, %d B shared memory (GELU form %d B), "
             "epilogue tile %dx%d; bf16 x bf16 -> fp32 + bias -> bf16 -> Q1.15",
             CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH, (int)cute::size<0>(QgTile{}), (int)cute::size<1>(QgTile{}), (int)cute::size<2>(QgTile{}),
             (int)cute::size<0>(QgCluster{}), (int)cute::size<1>(QgCluster{}), (int)cute::size<2>(QgCluster{}),
             (int)G::CollectiveMainloop::DispatchPolicy::Stages, (int)G::Kernel::SharedStorageSize, (int)GeluGemm<CUTLASS_Q115_Q115>::Kernel::SharedStorageSize,
             (int)cute::size<0>(QgEpiTile{}), (int)cute::size<1>(QgEpiTile{}));
    return line;
}

const char* cutlass_q115_gemm_unsupported(int N, int C, int OC, const void* out, const void* pre, const void* inp, const void* weight,
                                          const void* bias, int mode) {
    if (!out || !inp || !weight) return cutlass_why(N, C, OC, "out, inp and weight must not be NULL");
    if (pre && pre == out) return cutlass_why(N, C, OC, "pre and out must be different buffers");
    if (mode < CUTLASS_Q115_OFF || mode > CUTLASS_Q115_Q131) return cutlass_why(N, C, OC, "no boundary mode %d (0, 1 or 2)", mode);
    if (pre && mode == CUTLASS_Q115_OFF) return cutlass_why(N, C, OC, "the GELU form needs a boundary mode (1 or 2)");
    if (N < 0 || C < 8 || OC < 8 || C % 8 != 0 || OC % 8 != 0)
        return cutlass_why(N, C, OC, "unsupported shape: needs N >= 0 and C, OC positive multiples of 8");
    const void* ptrs[5] = {out, pre, inp, weight, bias};
    for (int i = 0; i < 5; i++)
        if (!cutlass_aligned16(ptrs[i])) return cutlass_why(N, C, OC, "every tensor must be 16-byte aligned (pointer %d: %p)", i, ptrs[i]);
    CutlassDevice info;
    if (!cutlass_current_device(&info)) return cutlass_why(N, C, OC, "cannot query the current CUDA device");
    if (info.cc != 90)
        return cutlass_why(N, C, OC, "needs a compute capability 9.0 GPU (sm_90a code), device %d has %d.%d", info.dev, info.cc / 10, info.cc % 10);
    if (N == 0) return nullptr;
    const char* st = dispatch_mode(mode, false, (void*)out, (void*)pre, inp, weight, bias, N, C, OC, info, nullptr);
    return st ? cutlass_why(N, C, OC, "CUTLASS can_implement (%s form, mode %d): %s", pre ? "GELU" : "plain", mode, st) : nullptr;
}

void cutlass_q115_gemm_forward(__nv_bfloat16* out, __nv_bfloat16* pre, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                               const __nv_bfloat16* bias, int N, int C, int OC, CutlassQ115Mode mode, cudaStream_t stream) {
    if (const char* msg = cutlass_q115_gemm_unsupported(N, C, OC, out, pre, inp, weight, bias, (int)mode)) fail(msg);
    if (N == 0) return;
    CutlassDevice info;
    cutlass_current_device(&info);  // (asked successfully above)
    if (const char* msg = dispatch_mode((int)mode, true, out, pre, inp, weight, bias, N, C, OC, info, stream))
        fail(cutlass_why(N, C, OC, "%s form, mode %d: %s", pre ? "GELU" : "plain", (int)mode, msg));
}

void cutlass_q115_gemm_eval(const float* in, float* out, int n, int gelu, CutlassQ115Mode mode) {
    if (n <= 0) return;
    cutlass_q115_detail::q115_epi_eval_kernel<<<(n + 255) / 256, 256>>>(in, out, n, gelu, (int)mode);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        char msg[256];
        snprintf(msg, sizeof(msg), "eval kernel: %s", cudaGetErrorString(e));
        fail(msg);
    }
}

void cutlass_q115_gemm_free(void) {
    PlainGemm<CUTLASS_Q115_OFF>::Runner::free_workspace();
    PlainGemm<CUTLASS_Q115_Q115>::Runner::free_workspace();
    PlainGemm<CUTLASS_Q115_Q131>::Runner::free_workspace();
    GeluGemm<CUTLASS_Q115_Q115>::Runner::free_workspace();
    GeluGemm<CUTLASS_Q115_Q131>::Runner::free_workspace();
}
