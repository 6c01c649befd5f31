// cutlass_fp8_fc_impl.cuh - the CUTLASS instantiation behind cutlass_fp8_fc.h, as a template over a configuration
// (what it computes, the two problem forms, layouts: cutlass_fp8_fc.h). Included ONLY by the configuration
// translation units llmc/kernels/gemm/cutlass_fp8_fc_<name>.cu (one instantiation each: about a minute and 4 GB of
// compiler memory), which are compiled for sm_90a with -std=c++17 --expt-relaxed-constexpr and without
// --use_fast_math (the IEEE GELU below needs IEEE expf and division; the producer's GELU is explicit PTX).
//
// The instantiation, in CUTLASS 3.x / 4.x terms:
//   mainloop  CollectiveBuilder<Sm90, TensorOp, e4m3 RowMajor A, e4m3 ColumnMajor B (both K-major), fp32
//             accumulator, Cfg::Tile, Cfg::Cluster, stages = what shared memory leaves after the epilogue,
//             Cfg::KernelSchedule>: with a non-FastAccum schedule the FP8 mainloop promoting to fp32 every
//             mma_promotion_interval = 4 k-blocks (MainloopSm90TmaGmmaWarpSpecializedFP8), with a FP8FastAccum
//             schedule the tensor cores accumulate all of K
//   epilogue  CollectiveBuilder<..., C = void, D, Cfg::EpilogueTile (EpilogueTileAuto: 128x32 cooperative, 64x64
//             pingpong; an override must have M = 128 cooperative, 64 pingpong), Cfg::EpilogueSchedule, fusion>:
//             full:   ScaledLinComb{PerRow (transposed) | PerCol (natural)}BiasEltActAmaxAux<aux layout = D's,
//                     FcGelu<Cfg::kGelu>, D e4m3, compute fp32, aux bf16, amax, bias bf16, source void>: Z = scale_a scale_b
//                     acc + bias stored as BF16 through the aux store, D = act(Z) · scale_d as e4m3,
//                     amax_D = max |act(Z)| (before scale_d, for an FP8 D)
//             z only: ScaledLinComb{PerRow | PerCol}BiasEltAct<Identity, D bf16>: Z stored as D
//   kernel    GemmUniversal<Shape<int,int,int,int>, mainloop, epilogue, PersistentScheduler>
// amax_D: CUTLASS's scalar reduction, one atomic per thread and tile; Cfg::kWarpAmax uses the element type
// Fp8AmaxWarp (cutlass_fp8_common.cuh): the warp's max first, one atomic per warp.
// Transposed codes (Cfg::kTransposedD, natural form only): the fusion operation is FcWithTransposedD<full>, whose
// callbacks (the FusionCallbacks specialization below) are CUTLASS's own callbacks of the full operation with one more
// EVT node on top: Fp8StoreT (cutlass_fp8_common.cuh, the M-major aux store) of the root's E4M3 fragment (the very
// registers D is stored from, so the codes are D's bit for bit) with the stride (1, ldt): dt[o * ldt + n] = d[n * OC + o].
// Its tile uses StagesD buffers (the store pipeline of D and Z), EpilogueTile bytes each; NULL dt skips its
// shared-memory and TMA stores (EnableNullptr). TMA writes whole 16-byte chunks along n: the dispatcher refuses a dt
// with N % 16 != 0 (cutlass_fp8_common.cuh).
#pragma once

#include "llmc/kernels/gemm/cutlass_fp8_common.cuh"
#include "llmc/kernels/gemm/cutlass_fp8_fc_ops.h"
#include "llmc/kernels/gemm/gelu_fastmath.cuh"

#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/version.h>
#include <cutlass/numeric_types.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/functional.h>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

namespace {

// ------------------------------------------------------------------------------------------------
// The activation: GELU (tanh form) of the BF16-rounded pre-activation, rounded to BF16 (cutlass_fp8_fc.h)

CUTLASS_HOST_DEVICE float fc_bf16_round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// The three GELUs of the configurations (Cfg::kGelu), all of the BF16-rounded pre-activation x = bf16(z) and
// rounded to BF16 (cutlass_fp8_fc.h):
// - CUTLASS_FC_GELU_IEEE: gemm_kernels.cuh gemm_gelu_tanh's formula, x * sigmoid(2u), sigmoid(2u) = 1 / (1 +
//   exp(-2u)), with IEEE expf and division (a range reduction around MUFU.EX2, MUFU.RCP with Newton steps and a
//   slow-path call). exp overflow for very negative x gives x / inf = -0, the right limit.
// - CUTLASS_FC_GELU_FAST: __expf (MUFU.EX2 of x log2(e)) and __fdividef (MUFU.RCP): the fp32 sigmoid moves by
//   about 2^-22 plus |2u| 2^-24 of itself times e/(1+e), inside the harness's midpoint tolerance (2^-21 (4 + |2u|
//   e/(1+e))), so the BF16 g is the same except where the exact GELU lies that close to a BF16 rounding midpoint
//   (the harness counts those and accepts either rounding); __fdividef(1, y) is 0 for y > 2^126 (x below about
//   -9.9), where g is -0 instead of a value below 1e-37 (same E4M3 code at any sane d_scale).
// - CUTLASS_FC_GELU_PRODUCER: gelu_fastmath.cuh, the instructions today's GELU producer executes (gemm_gelu_stored
//   under --use_fast_math: ex2.approx.ftz, rcp.approx.ftz, FTZ multiplies), so g, d and amax are the producer's
//   bit for bit; the host branch (CUTLASS never evaluates the activation on the host) is the IEEE formula.
template <CutlassFcGelu Gelu>
CUTLASS_HOST_DEVICE float fc_gelu_stored(float z) {
#if defined(__CUDA_ARCH__)
    if constexpr (Gelu == CUTLASS_FC_GELU_PRODUCER) return gelu_stored_fastmath(z);
#endif
    const float x = fc_bf16_round(z);
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    float s;
#if defined(__CUDA_ARCH__)
    if constexpr (Gelu == CUTLASS_FC_GELU_FAST) s = __fdividef(1.0f, 1.0f + __expf(-2.0f * u));
    else s = 1.0f / (1.0f + expf(-2.0f * u));
#else
    s = 1.0f / (1.0f + expf(-2.0f * u));
#endif
    return fc_bf16_round(x * s);
}

// The epilogue applies ActivationFn<Array<float, FragmentSize>> to fragments (Sm90Compute); the scalar
// specialization is what it inspects for an Arguments member (none: no parameters).
template <class T, CutlassFcGelu Gelu> struct FcGeluImpl;

template <CutlassFcGelu Gelu> struct FcGeluImpl<float, Gelu> {
    CUTLASS_HOST_DEVICE float operator()(float z) const { return fc_gelu_stored<Gelu>(z); }
};

template <int N, CutlassFcGelu Gelu> struct FcGeluImpl<cutlass::Array<float, N>, Gelu> {
    CUTLASS_HOST_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& z) const {
        cutlass::Array<float, N> g;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) g[i] = fc_gelu_stored<Gelu>(z[i]);
        return g;
    }
};

template <class T> using FcGeluIeee = FcGeluImpl<T, CUTLASS_FC_GELU_IEEE>;
template <class T> using FcGeluFast = FcGeluImpl<T, CUTLASS_FC_GELU_FAST>;
template <class T> using FcGeluProducer = FcGeluImpl<T, CUTLASS_FC_GELU_PRODUCER>;

}  // namespace

// The activation's values on n inputs (cutlass_fp8_fc_gelu_eval): the functor type the epilogue of configuration
// Id instantiates (FcGeluImpl<Array<float, N>, Gelu>), on fragments of 4 (one thread per 4 values). Outside the
// anonymous namespaces and with no type from them in its signature: nvcc's host stub names such types through an
// unqualified anonymous-namespace name, which the using-directive for cute (whose headers have an anonymous
// namespace too) makes ambiguous. Id makes each configuration's translation unit a kernel of its own.
namespace cutlass_fp8_fc_detail {
template <CutlassFcGelu Gelu, CutlassFcConfig Id>
__global__ void fc_act_eval_kernel(const float* __restrict__ in, float* __restrict__ out, int n) {
    const int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    cutlass::Array<float, 4> z;
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < 4; ++k) z[k] = i + k < n ? in[i + k] : 0.0f;
    const cutlass::Array<float, 4> g = FcGeluImpl<cutlass::Array<float, 4>, Gelu>{}(z);
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < 4; ++k)
        if (i + k < n) out[i + k] = g[k];
}
}  // namespace cutlass_fp8_fc_detail

namespace {
// The fusion operation "Base (a ScaledLinComb{PerRow|PerCol}BiasEltActAmaxAux) and a second copy of D's codes in the
// transposed layout": a tag (no members of its own) whose callbacks are the specialization below.
template <class Base>
struct FcWithTransposedD : Base {};
}  // namespace

namespace cutlass::epilogue::fusion {

// Callbacks of FcWithTransposedD<BaseOp> on the sm90 TMA warp-specialized epilogue (header comment): the tree of
// CUTLASS's callbacks for BaseOp (Z aux store, GELU, amax, D = act(Z) · scale_d as e4m3) as the child of an Fp8StoreT
// node that stores the child's output fragment. That fragment is already Array<e4m3> (the root Sm90Compute converts
// to ElementOutput), so the node's conversion is e4m3 -> e4m3, the identity (NumericArrayConverter<T, T>), and it
// returns the fragment unchanged: D (stored by the collective from the same registers) is as without the node.
// Arguments: BaseOp's flat arguments plus dt_ptr / dDT.
template <int StagesC, int StagesD, int FragmentSize, bool ReuseSmemC, bool DelayTmaStore, class BaseOp, class CtaTileShapeMNK,
          class EpilogueTile, class SmemLayoutAtom, class CopyOpR2S>
struct FusionCallbacks<epilogue::Sm90TmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore>, FcWithTransposedD<BaseOp>,
                       CtaTileShapeMNK, EpilogueTile, SmemLayoutAtom, CopyOpR2S>
    : Sm90EVT<Fp8StoreT<StagesD, EpilogueTile, typename BaseOp::ElementOutput>,
              FusionCallbacks<epilogue::Sm90TmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore>, BaseOp,
                              CtaTileShapeMNK, EpilogueTile, SmemLayoutAtom, CopyOpR2S>> {
    using ElementDT = typename BaseOp::ElementOutput;
    static_assert(cute::sizeof_bits_v<ElementDT> == 8, "the transposed copy is of 8-bit codes");
    using BaseCallbacks = FusionCallbacks<epilogue::Sm90TmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore>,
                                          BaseOp, CtaTileShapeMNK, EpilogueTile, SmemLayoutAtom, CopyOpR2S>;
    using Impl = Sm90EVT<Fp8StoreT<StagesD, EpilogueTile, ElementDT>, BaseCallbacks>;
    using Operation = FcWithTransposedD<BaseOp>;

    struct Arguments : BaseCallbacks::Arguments {
        ElementDT* dt_ptr = nullptr;  // NULL: no transposed copy
        Fp8StrideT dDT = {};
        // The tree's arguments: the child's (CUTLASS's packing of BaseOp's flat arguments), then this node's
        operator typename Impl::Arguments() const {
            return {static_cast<typename BaseCallbacks::Arguments const&>(*this), {dt_ptr, dDT}};
        }
    };

    using Impl::Impl;
};

}  // namespace cutlass::epilogue::fusion

namespace {

using namespace cute;

// ------------------------------------------------------------------------------------------------
// The GEMM type of a configuration. Cfg: kNatural (problem form), kZOnly, kFastAccum (informational: the
// schedule decides), kWarpAmax, kGelu (ignored when kZOnly), kTransposedD (also the transposed codes dt; natural form
// only), Tile, Cluster, KernelSchedule, EpilogueSchedule, EpilogueTile, kSchedule (a name).

template <class Cfg>
struct FcGemm {
    using ElementOp = cutlass::float_e4m3_t;  // both operands: K-major e4m3 codes
    using LayoutA = cutlass::layout::RowMajor;
    using LayoutB = cutlass::layout::ColumnMajor;
    using LayoutD = cute::conditional_t<Cfg::kNatural, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
    using ElementD = cute::conditional_t<Cfg::kZOnly, cutlass::bfloat16_t, cutlass::float_e4m3_t>;
    using ElementAux = cutlass::bfloat16_t;   // Z
    using ElementBias = cutlass::bfloat16_t;
    using ElementAmax = cute::conditional_t<Cfg::kWarpAmax, Fp8AmaxWarp, float>;
    static constexpr int kAlignOp = 16;                                  // elements: 16 bytes of e4m3 (TMA)
    static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;

    template <template <class> class Act>
    using FullOp = cute::conditional_t<
        Cfg::kNatural,
        cutlass::epilogue::fusion::ScaledLinCombPerColBiasEltActAmaxAux<LayoutD, Act, ElementD, float, ElementAux, ElementAmax,
                                                                        ElementBias, void>,
        cutlass::epilogue::fusion::ScaledLinCombPerRowBiasEltActAmaxAux<LayoutD, Act, ElementD, float, ElementAux, ElementAmax,
                                                                        ElementBias, void>>;
    using ZOnlyOp = cute::conditional_t<
        Cfg::kNatural,
        cutlass::epilogue::fusion::ScaledLinCombPerColBiasEltAct<cutlass::epilogue::thread::Identity, ElementD, float, ElementBias, void>,
        cutlass::epilogue::fusion::ScaledLinCombPerRowBiasEltAct<cutlass::epilogue::thread::Identity, ElementD, float, ElementBias, void>>;
    using FullOpGelu = cute::conditional_t<Cfg::kGelu == CUTLASS_FC_GELU_PRODUCER, FullOp<FcGeluProducer>,
                                           cute::conditional_t<Cfg::kGelu == CUTLASS_FC_GELU_FAST, FullOp<FcGeluFast>, FullOp<FcGeluIeee>>>;
    static_assert(!Cfg::kTransposedD || (Cfg::kNatural && !Cfg::kZOnly), "transposed codes: natural form with d only");
    using FusionOp = cute::conditional_t<Cfg::kZOnly, ZOnlyOp,
                                         cute::conditional_t<Cfg::kTransposedD, FcWithTransposedD<FullOpGelu>, FullOpGelu>>;

    using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::Tile, typename Cfg::Cluster,
        typename Cfg::EpilogueTile, float, float, /*ElementC*/ void, LayoutD, kAlignD, ElementD, LayoutD, kAlignD,
        typename Cfg::EpilogueSchedule, FusionOp>::CollectiveOp;

    using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementOp, LayoutA, kAlignOp, ElementOp, LayoutB, kAlignOp, float,
        typename Cfg::Tile, typename Cfg::Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
        typename Cfg::KernelSchedule>::CollectiveOp;

    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                        cutlass::gemm::PersistentScheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    static_assert(cute::is_same_v<StrideA, cute::Stride<int64_t, cute::Int<1>, int64_t>>, "A: K-major (M, K, L) stride");
    static_assert(cute::is_same_v<StrideB, cute::Stride<int64_t, cute::Int<1>, int64_t>>, "B: K-major (N, K, L) stride");
    static_assert(Cfg::kNatural ? cute::is_same_v<StrideD, cute::Stride<int64_t, cute::Int<1>, int64_t>>
                                : cute::is_same_v<StrideD, cute::Stride<cute::Int<1>, int64_t, int64_t>>,
                  "D: N-major (natural) or M-major (transposed) (M, N, L) stride");

    // The CUTLASS arguments of one call (scales may be NULL for can_implement only).
    static typename Gemm::Arguments arguments(const CutlassFcCall& c) {
        const int64_t N = c.N, K = c.C, OC = c.OC;
        // natural: M = N (A = inp), N = OC (B = weight); transposed: M = OC (A = weight), N = N (B = inp)
        const int64_t M = Cfg::kNatural ? N : OC, Nn = Cfg::kNatural ? OC : N;
        const uint8_t* a = Cfg::kNatural ? c.inp : c.weight;
        const uint8_t* b = Cfg::kNatural ? c.weight : c.inp;
        const float* a_ds = Cfg::kNatural ? c.inp_dscale : c.weight_dscale;
        const float* b_ds = Cfg::kNatural ? c.weight_dscale : c.inp_dscale;
        StrideD stride_d;  // the row-major (N, OC) output either way: leading dimension OC
        if constexpr (Cfg::kNatural) stride_d = cute::make_stride(OC, cute::Int<1>{}, M * Nn);
        else stride_d = cute::make_stride(cute::Int<1>{}, OC, M * Nn);
        typename Gemm::Arguments args{};
        args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
        args.problem_shape = {(int)M, (int)Nn, (int)K, 1};
        args.mainloop.ptr_A = reinterpret_cast<ElementOp const*>(a);
        args.mainloop.dA = cute::make_stride(K, cute::Int<1>{}, M * K);
        args.mainloop.ptr_B = reinterpret_cast<ElementOp const*>(b);
        args.mainloop.dB = cute::make_stride(K, cute::Int<1>{}, Nn * K);
        if constexpr (!Cfg::kFastAccum) args.mainloop.mma_promotion_interval = 4;
        args.epilogue.ptr_C = nullptr;
        args.epilogue.dC = StrideC{};
        args.epilogue.dD = stride_d;
        auto& f = args.epilogue.thread;
        f.alpha = 1.0f;
        f.beta = 0.0f;
        f.scale_a = 1.0f;
        f.scale_b = 1.0f;
        f.scale_d = 1.0f;
        f.scale_a_ptr = a_ds;
        f.scale_b_ptr = b_ds;
        f.bias_ptr = reinterpret_cast<ElementBias const*>(c.bias);
        if constexpr (Cfg::kZOnly) {
            args.epilogue.ptr_D = reinterpret_cast<ElementD*>(c.z);
        } else {
            args.epilogue.ptr_D = reinterpret_cast<ElementD*>(c.d);
            f.scale_d_ptr = c.d_scale;
            f.amax_D_ptr = reinterpret_cast<ElementAmax*>(c.amax_d);
            f.amax_aux_ptr = nullptr;  // Z is BF16: no amax, no scale
            f.aux_ptr = reinterpret_cast<ElementAux*>(c.z);
            f.dAux = stride_d;
            if constexpr (Cfg::kTransposedD) {
                // (M = tokens, N = OC) element (n, o) at n + o * ldt: the row-major (OC, ldt) copy
                f.dt_ptr = reinterpret_cast<ElementD*>(c.dt);
                f.dDT = cute::make_stride(cute::Int<1>{}, (int64_t)c.ldt, OC * (int64_t)c.ldt);
            }
        }
        args.hw_info.device_id = c.device;
        args.hw_info.sm_count = c.sm_count;
        return args;
    }
};

// ------------------------------------------------------------------------------------------------
// Host side of a configuration: the CutlassFcOps functions

template <class Cfg, CutlassFcConfig Id>
struct FcHost {
    using G = FcGemm<Cfg>;
    using Runner = CutlassRunner<typename G::Gemm, FcHost>;

    static const char* can_implement(const CutlassFcCall& c) { return Runner::can_implement(G::arguments(c)); }
    static const char* run(const CutlassFcCall& c, cudaStream_t stream) { return Runner::run(G::arguments(c), stream); }
    static inline char msg[256];

    static const char* describe() {
        static char line[480];
        using Tile = typename Cfg::Tile;
        using Cl = typename Cfg::Cluster;
        using EpiTile = typename G::CollectiveEpilogue::EpilogueTile;
        snprintf(line, sizeof(line),
                 "CUTLASS %d.%d.%d sm_90a, %s problem, %s, tile %dx%dx%d, cluster %dx%dx%d, %s, %d stages, %d B shared memory, "
                 "epilogue tile %dx%d, %s%s%s",
                 CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH, Cfg::kNatural ? "natural (M = tokens)" : "transposed (M = OC)",
                 Cfg::kSchedule, (int)cute::size<0>(Tile{}), (int)cute::size<1>(Tile{}), (int)cute::size<2>(Tile{}),
                 (int)cute::size<0>(Cl{}), (int)cute::size<1>(Cl{}), (int)cute::size<2>(Cl{}),
                 Cfg::kFastAccum ? "fast accumulation" : "fp32 promotion every 4 k-blocks",
                 (int)G::CollectiveMainloop::DispatchPolicy::Stages, (int)G::Kernel::SharedStorageSize,
                 (int)cute::size<0>(EpiTile{}), (int)cute::size<1>(EpiTile{}),
                 Cfg::kZOnly                               ? "Z bf16 only"
                 : Cfg::kGelu == CUTLASS_FC_GELU_PRODUCER ? "Z bf16 + GELU (today's producer's instructions) e4m3 + amax"
                 : Cfg::kGelu == CUTLASS_FC_GELU_FAST     ? "Z bf16 + GELU (__expf, __fdividef) e4m3 + amax"
                                                           : "Z bf16 + GELU (IEEE expf, division) e4m3 + amax",
                 Cfg::kZOnly ? "" : Cfg::kWarpAmax ? " (warp max, 1 atomic per warp)" : " (atomic per thread)",
                 Cfg::kTransposedD ? " + transposed e4m3 codes (M-major aux store)" : "");
        return line;
    }

    // The epilogue's activation on n values (cutlass_fp8_fc_gelu_eval); NULL on success, else what failed.
    static const char* act_eval(const float* in, float* out, int n, cudaStream_t stream) {
        if constexpr (Cfg::kZOnly) {
            return "the configuration stores Z only (no activation)";
        } else {
            if (n > 0) cutlass_fp8_fc_detail::fc_act_eval_kernel<Cfg::kGelu, Id><<<(n + 1023) / 1024, 256, 0, stream>>>(in, out, n);
            const cudaError_t ce = cudaGetLastError();
            if (ce == cudaSuccess) return nullptr;
            snprintf(msg, sizeof(msg), "activation kernel: %s", cudaGetErrorString(ce));
            return msg;
        }
    }

    static constexpr CutlassFcOps ops() {
        return CutlassFcOps{Cfg::kZOnly ? CUTLASS_FC_GELU_NONE : Cfg::kGelu, Cfg::kTransposedD, can_implement, run, describe, act_eval,
                            Runner::free_workspace};
    }
};

// Configuration building blocks
using CoopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using CoopFastSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum;
using PingpongSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using PingpongFastSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum;
using CoopEpilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
using PingpongEpilogue = cutlass::epilogue::TmaWarpSpecialized;

// The configuration the others are variations of (each TU's Cfg derives from it and redefines what differs):
// natural form, cooperative 128x128x128, cluster 2x1, fp32 promotion, today's producer's GELU, warp-reduced
// amax, no transposed codes, CUTLASS's automatic epilogue tile (128x32 cooperative).
struct FcCfgBase {
    static constexpr bool kNatural = true;
    static constexpr bool kZOnly = false;
    static constexpr bool kFastAccum = false;
    static constexpr bool kWarpAmax = true;
    static constexpr bool kTransposedD = false;
    static constexpr CutlassFcGelu kGelu = CUTLASS_FC_GELU_PRODUCER;
    using Tile = Shape<_128, _128, _128>;
    using Cluster = Shape<_2, _1, _1>;
    using KernelSchedule = CoopSchedule;
    using EpilogueSchedule = CoopEpilogue;
    using EpilogueTile = cutlass::epilogue::collective::EpilogueTileAuto;
    static constexpr const char* kSchedule = "cooperative";
};

}  // namespace

// Defines the configuration's CutlassFcOps (cutlass_fp8_fc_ops.h) from its Cfg struct.
#define CUTLASS_FP8_FC_DEFINE_OPS(name, Cfg) extern const CutlassFcOps cutlass_fp8_fc_ops_##name = FcHost<Cfg, CUTLASS_FC_##name>::ops();
