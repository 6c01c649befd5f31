// cutlass_fp8_dgelu_impl.cuh - the CUTLASS instantiation behind cutlass_fp8_dgelu.h, as a template over a configuration
// (what it computes and the layouts: cutlass_fp8_dgelu.h). Included ONLY by the configuration translation units
// llmc/kernels/gemm/cutlass_fp8_dgelu_<name>.cu (one instantiation each: a minute or two and 4 GB of compiler memory),
// compiled for sm_90a with -std=c++17 --expt-relaxed-constexpr and without --use_fast_math (the GELU' is explicit PTX,
// gelu_fastmath.cuh).
//
// The instantiation, in CUTLASS 4.x terms:
//   mainloop  CollectiveBuilder<Sm90, TensorOp, e5m2 RowMajor A (dy), e4m3 ColumnMajor B (wt; both K-major), fp32
//             accumulator, Cfg::Tile, Cfg::Cluster, stages = what shared memory leaves after the epilogue,
//             Cfg::KernelSchedule>: promotion to fp32 every 4 k-blocks, or fast accumulation (FP8FastAccum schedules)
//   epilogue  Sm90TmaBuilderImpl (what CollectiveBuilder runs) with C = void, D e5m2 row-major, the fusion operation
//             DgeluOp below and a dispatch policy of our own: Sm90TmaWarpSpecialized<Cfg::kStagesC, 2, ...>, i.e.
//             CUTLASS's automatic one except for the number of pre buffers (StagesC: CUTLASS gives min(subtiles, 4),
//             64 KB of pre for a 128x256 tile and 128x64 subtiles; 2 keep the epilogue's shared memory small enough for
//             3-4 mainloop stages while the epilogue's load warp still fetches the next subtile's pre during this one)
//   kernel    GemmUniversal<Shape<int,int,int,int>, mainloop, epilogue, PersistentScheduler>
// The epilogue visitor tree (leaves first; each node's output feeds its parent):
//   g     = bf16_rne(scale_a · scale_b · acc)       Sm90Compute<multiplies, bf16> of Sm90ScalarBroadcast (2 pointers,
//                                                  multiplied) and Sm90AccFetch: cuBLASLt's BF16 D (RNE, no FTZ)
//   g     -> Sm90AuxStore (row-major, bf16)         the optional g output (NULL: no shared-memory or TMA stores)
//   pre   = Sm90AuxLoad (row-major, bf16)           TMA loads of the subtile's pre into shared memory by the epilogue's
//                                                  load warp (StagesC buffers), ldmatrix into the fragment
//   v     = DgStored(g, pre)                        gelu_fastmath.cuh dgelu_stored_fastmath: the producer's bits
//   v     -> Fp8ColSums (cutlass_fp8_common.cuh)    the bias gradient's column sums of v per 128-row tile (NULL: skipped)
//   amax  = Sm90ScalarReduction<amax, atomic_maximum, Fp8AmaxWarp> of v (before the scale; NaN propagates)
//   d     = e5m2(mul.rn.ftz(v, scale_d))           DgQuant, then Sm90Compute's cvt.rn.satfinite.e5m2x2.f32
//   d     -> Fp8StoreT (cutlass_fp8_common.cuh)    the transposed copy dt from the same registers (NULL: skipped)
// and the collective stores d (the root's fragment) through its own TMA store. Determinism: every output element is
// written by the one CTA that owns its tile, the column sums too (each partial in a fixed order); the amax is an
// order-independent max.
#pragma once

#include "llmc/kernels/gemm/cutlass_fp8_common.cuh"
#include "llmc/kernels/gemm/cutlass_fp8_dgelu_ops.h"
#include "llmc/kernels/gemm/gelu_fastmath.cuh"

#include <stdint.h>
#include <stdio.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <cutlass/version.h>
#include <cutlass/kernel_hardware_info.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

namespace {

// ------------------------------------------------------------------------------------------------
// The epilogue's elementwise functors. Sm90Compute applies ComputeFn<Array<float, FragmentSize>> to the fragments; the
// scalar specializations are what it inspects for an Arguments member (none: no parameters).

// (g, pre) -> bf16(g · gelu'(pre)) as a float: gemm_dgelu_stored's instructions (cutlass_fp8_dgelu.h).
template <class T> struct DgStored;

template <> struct DgStored<float> {
    CUTLASS_DEVICE float operator()(float g, float pre) const { return dgelu_stored_fastmath(g, pre); }
};

template <int N> struct DgStored<cutlass::Array<float, N>> {
    CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& g, cutlass::Array<float, N> const& pre) const {
        cutlass::Array<float, N> v;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) v[i] = dgelu_stored_fastmath(g[i], pre[i]);
        return v;
    }
};

// (v, scale) -> v · scale as fp8q_scaled multiplies in the fast-math build (mul.rn.ftz; its NaN pass-through does not
// change the code a NaN gets from cvt.rn.satfinite here: 0x7F either way).
template <class T> struct DgQuant;

template <> struct DgQuant<float> {
    CUTLASS_DEVICE float operator()(float v, float s) const { return mul_ftz(v, s); }
};

template <int N> struct DgQuant<cutlass::Array<float, N>> {
    CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& v, cutlass::Array<float, N> const& s) const {
        cutlass::Array<float, N> r;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) r[i] = mul_ftz(v[i], s[i]);
        return r;
    }
};

// The fusion operation: a tag for the callbacks specialization below, with the metadata CUTLASS's builder reads
// (IsAuxInSupported, ElementAux, GmemLayoutTagAux: it then picks the shared-memory swizzle atom and the
// shared-memory -> register copy of the pre load, and hands them to the callbacks).
struct DgeluOp : cutlass::epilogue::fusion::FusionOperation {
    using ElementOutput = cutlass::float_e5m2_t;
    using ElementCompute = float;
    using ElementAux = cutlass::bfloat16_t;  // pre, loaded
    using GmemLayoutTagAux = cutlass::layout::RowMajor;
    static constexpr int AlignmentAux = 8;
    static constexpr bool IsAuxInSupported = true;
    static constexpr bool IsDeEltActSupported = true;
    static constexpr bool IsScaleFactorSupported = true;
    using ElementAmax = Fp8AmaxWarp;
    static constexpr bool IsAbsMaxSupported = true;
};

using DgStrideRow = cute::Stride<int64_t, cute::_1, int64_t>;  // row-major (M, N): element (m, n) at m * ld + n

namespace cef = cutlass::epilogue::fusion;
constexpr auto kRN = cutlass::FloatRoundStyle::round_to_nearest;

// The g output node: CUTLASS's aux store, row-major bf16, with the swizzle atom and register -> shared memory copy
// (stmatrix) its builder picks for that layout.
template <int StagesD, class EpilogueTile>
using DgStoreG = cef::Sm90AuxStore<
    StagesD, EpilogueTile, cutlass::bfloat16_t, kRN, DgStrideRow,
    decltype(cutlass::epilogue::collective::detail::sm90_get_epilogue_smem_swizzle_layout_atom<DgStrideRow, cutlass::bfloat16_t, EpilogueTile>()),
    decltype(cutlass::epilogue::collective::detail::sm90_get_smem_store_op_for_accumulator<DgStrideRow, cutlass::bfloat16_t, EpilogueTile>()),
    8>;

// The tree (header comment). op_0 .. op_k of each node's arguments are its children in order, then the node itself.
template <int StagesC, int StagesD, class CtaTile, class EpilogueTile, class SmemLayoutAtomPre, class CopyOpS2RPre>
using DgeluTree =
    cef::Sm90EVT<Fp8StoreT<StagesD, EpilogueTile, cutlass::float_e5m2_t>,                                    // dt
      cef::Sm90EVT<cef::Sm90Compute<DgQuant, cutlass::float_e5m2_t, float, kRN>,                            // d = e5m2(v · scale_d)
        cef::Sm90EVT<cef::Sm90ScalarReduction<cef::detail::amax, cutlass::atomic_maximum, Fp8AmaxWarp, float, kRN>,  // amax |v|
          cef::Sm90EVT<Fp8ColSums<CtaTile, EpilogueTile>,                                                      // column sums of v
            cef::Sm90EVT<cef::Sm90Compute<DgStored, float, float, kRN>,                                      // v
              cef::Sm90EVT<DgStoreG<StagesD, EpilogueTile>,                                                  // g -> memory
                cef::Sm90EVT<cef::Sm90Compute<cutlass::multiplies, cutlass::bfloat16_t, float, kRN>,        // g
                  cef::Sm90ScalarBroadcast<float, cute::Stride<cute::_0, cute::_0, cute::_0>, 2>,           //   scale_a · scale_b
                  cef::Sm90AccFetch>>,                                                                        //   acc
              cef::Sm90AuxLoad<StagesC, EpilogueTile, cutlass::bfloat16_t, DgStrideRow, SmemLayoutAtomPre, CopyOpS2RPre, 8>>>>,  // pre
        cef::Sm90ScalarBroadcast<float>>>;                                                                    // scale_d

}  // namespace

namespace cutlass::epilogue::fusion {

// Callbacks of DgeluOp on the sm90 TMA warp-specialized epilogue: DgeluTree with flat arguments.
template <int StagesC, int StagesD, int FragmentSize, bool ReuseSmemC, bool DelayTmaStore, class CtaTileShapeMNK, class EpilogueTile,
          class SmemLayoutAtom, class CopyOpS2R>
struct FusionCallbacks<epilogue::Sm90TmaWarpSpecialized<StagesC, StagesD, FragmentSize, ReuseSmemC, DelayTmaStore>, DgeluOp, CtaTileShapeMNK,
                       EpilogueTile, SmemLayoutAtom, CopyOpS2R>
    : DgeluTree<StagesC, StagesD, CtaTileShapeMNK, EpilogueTile, SmemLayoutAtom, CopyOpS2R> {
    using Impl = DgeluTree<StagesC, StagesD, CtaTileShapeMNK, EpilogueTile, SmemLayoutAtom, CopyOpS2R>;
    using Operation = DgeluOp;

    struct Arguments {
        float const* scale_a_ptr = nullptr;     // dy's DEQUANT scale
        float const* scale_b_ptr = nullptr;     // wt's DEQUANT scale
        cutlass::bfloat16_t* g_ptr = nullptr;   // NULL: g not stored
        DgStrideRow dG = {};
        cutlass::bfloat16_t const* pre_ptr = nullptr;
        DgStrideRow dPre = {};
        float* colsum_ptr = nullptr;            // NULL: no column sums (Fp8ColSums)
        Fp8AmaxWarp* amax_ptr = nullptr;        // NULL: no amax
        float const* scale_d_ptr = nullptr;     // d's QUANT scale
        cutlass::float_e5m2_t* dt_ptr = nullptr;  // NULL: no transposed codes
        Fp8StrideT dDT = {};

        // The tree's nested arguments (DgeluTree, root first)
        operator typename Impl::Arguments() const {
            typename Impl::Arguments a{};
            auto& q = a.op_0;     // d = e5m2(v · scale_d): {amax subtree, scale_d, compute}
            auto& amax = q.op_0;  // {column-sums subtree, reduction}
            auto& cs = amax.op_0; // {v subtree, column sums}
            auto& v = cs.op_0;    // {g-store subtree, pre load, compute}
            auto& gs = v.op_0;    // {g subtree, store}
            auto& g = gs.op_0;    // {scales, acc, compute}
            g.op_0 = {{1.0f, 1.0f}, {scale_a_ptr, scale_b_ptr}, {}};
            gs.op_1 = {g_ptr, dG};
            v.op_1 = {pre_ptr, cutlass::bfloat16_t(0.0f), dPre};
            cs.op_1 = {colsum_ptr};
            amax.op_1 = {amax_ptr, 0.0f, {}};
            q.op_1 = {{1.0f}, {scale_d_ptr}, {}};
            a.op_1 = {dt_ptr, dDT};
            return a;
        }
    };

    using Impl::Impl;
};

}  // namespace cutlass::epilogue::fusion

// The GELU' product on n input pairs (cutlass_fp8_dgelu_eval): the functor type the epilogue of configuration Id
// instantiates (DgStored<Array<float, N>>), on fragments of 4 (one thread per 4 pairs). In a named namespace, with no
// anonymous-namespace type in its signature (cutlass_fp8_fc_impl.cuh fc_act_eval_kernel says why); Id makes each
// configuration's translation unit a kernel of its own.
namespace cutlass_fp8_dgelu_detail {
template <CutlassDgeluConfig Id>
__global__ void dgelu_eval_kernel(const float* __restrict__ g, const float* __restrict__ pre, float* __restrict__ out, int n) {
    const int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    cutlass::Array<float, 4> a, b;
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < 4; ++k) {
        a[k] = i + k < n ? g[i + k] : 0.0f;
        b[k] = i + k < n ? pre[i + k] : 0.0f;
    }
    const cutlass::Array<float, 4> v = DgStored<cutlass::Array<float, 4>>{}(a, b);
    CUTLASS_PRAGMA_UNROLL
    for (int k = 0; k < 4; ++k)
        if (i + k < n) out[i + k] = v[k];
}
}  // namespace cutlass_fp8_dgelu_detail

namespace {

using namespace cute;

// ------------------------------------------------------------------------------------------------
// The GEMM type of a configuration. Cfg: kFastAccum (informational: the schedule decides), kStagesC, Tile, Cluster,
// KernelSchedule, EpilogueTile (an explicit Shape<_128, _N>), kSchedule (a name).

template <class Cfg>
struct DgGemm {
    using ElementA = cutlass::float_e5m2_t;  // dy
    using ElementB = cutlass::float_e4m3_t;  // wt
    using ElementD = cutlass::float_e5m2_t;
    using LayoutA = cutlass::layout::RowMajor;
    using LayoutB = cutlass::layout::ColumnMajor;
    using LayoutD = cutlass::layout::RowMajor;
    static constexpr int kAlignAB = 16;  // elements: 16 bytes (TMA)
    static constexpr int kAlignD = 16;

    using EpilogueTile = typename Cfg::EpilogueTile;
    static_assert(cute::size<0>(EpilogueTile{}) == 128, "cooperative epilogue subtiles are 128 rows");
    static_assert(cute::size<0>(typename Cfg::Tile{}) == CUTLASS_FP8_DGELU_COL_TILE_M, "the column-sum partials are per 128-row tile");
    static constexpr int kSubtiles = cute::size(cute::shape_div(cute::take<0, 2>(typename Cfg::Tile{}), EpilogueTile{}));
    static_assert(kSubtiles >= 2, "two or more subtiles per tile (StagesD = 2)");
    // CUTLASS's automatic policy for this tile and a void C (sm90_get_tma_dispatch_policy), except StagesC
    using EpiloguePolicy = cutlass::epilogue::Sm90TmaWarpSpecialized<Cfg::kStagesC, 2, cute::size(EpilogueTile{}) / 256,
                                                                     /*ReuseSmemC*/ false, /*DelayTmaStore*/ true>;
    using CollectiveEpilogue = typename cutlass::epilogue::collective::detail::Sm90TmaBuilderImpl<
        typename Cfg::Tile, EpilogueTile, float, float, /*ElementC*/ void, LayoutD, kAlignD, ElementD, LayoutD, kAlignD, DgeluOp,
        EpiloguePolicy>::CollectiveOp;

    using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, kAlignAB, ElementB, LayoutB, kAlignAB, float,
        typename Cfg::Tile, typename Cfg::Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
        typename Cfg::KernelSchedule>::CollectiveOp;

    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                        cutlass::gemm::PersistentScheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    static_assert(cute::is_same_v<typename Kernel::StrideA, cute::Stride<int64_t, cute::Int<1>, int64_t>>, "A: K-major (M, K, L)");
    static_assert(cute::is_same_v<typename Kernel::StrideB, cute::Stride<int64_t, cute::Int<1>, int64_t>>, "B: K-major (N, K, L)");
    static_assert(cute::is_same_v<StrideD, DgStrideRow>, "D: row-major (M, N, L)");

    // The CUTLASS arguments of one call (scales may be NULL for can_implement only). M = N tokens, N = C, K = OC.
    static typename Gemm::Arguments arguments(const CutlassDgeluCall& c) {
        const int64_t M = c.N, Nn = c.C, K = c.OC;
        const DgStrideRow row = cute::make_stride(Nn, cute::Int<1>{}, M * Nn);  // d, g, pre: (N, C) row-major
        typename Gemm::Arguments args{};
        args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
        args.problem_shape = {(int)M, (int)Nn, (int)K, 1};
        args.mainloop.ptr_A = reinterpret_cast<ElementA const*>(c.dy);
        args.mainloop.dA = cute::make_stride(K, cute::Int<1>{}, M * K);
        args.mainloop.ptr_B = reinterpret_cast<ElementB const*>(c.wt);
        args.mainloop.dB = cute::make_stride(K, cute::Int<1>{}, Nn * K);
        if constexpr (!Cfg::kFastAccum) args.mainloop.mma_promotion_interval = 4;
        args.epilogue.ptr_C = nullptr;
        args.epilogue.dC = StrideC{};
        args.epilogue.ptr_D = reinterpret_cast<ElementD*>(c.d);
        args.epilogue.dD = row;
        auto& f = args.epilogue.thread;
        f.scale_a_ptr = c.dy_dscale;
        f.scale_b_ptr = c.wt_dscale;
        f.g_ptr = reinterpret_cast<cutlass::bfloat16_t*>(c.g);
        f.dG = row;
        f.pre_ptr = reinterpret_cast<cutlass::bfloat16_t const*>(c.pre);
        f.dPre = row;
        f.colsum_ptr = c.col_partials;
        f.amax_ptr = reinterpret_cast<Fp8AmaxWarp*>(c.amax_d);
        f.scale_d_ptr = c.d_scale;
        // (M = tokens, N = C) element (n, c) at n + c * ldt: the row-major (C, ldt) copy
        f.dt_ptr = reinterpret_cast<ElementD*>(c.dt);
        f.dDT = cute::make_stride(cute::Int<1>{}, (int64_t)c.ldt, Nn * (int64_t)c.ldt);
        args.hw_info.device_id = c.device;
        args.hw_info.sm_count = c.sm_count;
        return args;
    }
};

// ------------------------------------------------------------------------------------------------
// Host side of a configuration: the CutlassDgeluOps functions

template <class Cfg, CutlassDgeluConfig Id>
struct DgHost {
    using G = DgGemm<Cfg>;
    using Runner = CutlassRunner<typename G::Gemm, DgHost>;
    static inline char msg[256];

    static const char* can_implement(const CutlassDgeluCall& c) { return Runner::can_implement(G::arguments(c)); }
    static const char* run(const CutlassDgeluCall& c, cudaStream_t stream) { return Runner::run(G::arguments(c), stream); }

    static const char* describe() {
        static char line[400];
        using Tile = typename Cfg::Tile;
        using Cl = typename Cfg::Cluster;
        using EpiTile = typename G::EpilogueTile;
        snprintf(line, sizeof(line),
                 "CUTLASS %d.%d.%d sm_90a, %s, tile %dx%dx%d, cluster %dx%dx%d, %s, %d stages, %d B shared memory, epilogue tile %dx%d, "
                 "%d pre buffers; e5m2 x e4m3 -> g bf16 (optional) -> GELU' (today's producer's instructions) -> column sums, e5m2 d + dt + amax",
                 CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH, Cfg::kSchedule, (int)cute::size<0>(Tile{}), (int)cute::size<1>(Tile{}),
                 (int)cute::size<2>(Tile{}), (int)cute::size<0>(Cl{}), (int)cute::size<1>(Cl{}), (int)cute::size<2>(Cl{}),
                 Cfg::kFastAccum ? "fast accumulation" : "fp32 promotion every 4 k-blocks", (int)G::CollectiveMainloop::DispatchPolicy::Stages,
                 (int)G::Kernel::SharedStorageSize, (int)cute::size<0>(EpiTile{}), (int)cute::size<1>(EpiTile{}), Cfg::kStagesC);
        return line;
    }

    // The epilogue's GELU' product on n pairs (cutlass_fp8_dgelu_eval); NULL on success, else what failed.
    static const char* eval(const float* g, const float* pre, float* out, int n, cudaStream_t stream) {
        if (n > 0) cutlass_fp8_dgelu_detail::dgelu_eval_kernel<Id><<<(n + 1023) / 1024, 256, 0, stream>>>(g, pre, out, n);
        const cudaError_t ce = cudaGetLastError();
        if (ce == cudaSuccess) return nullptr;
        snprintf(msg, sizeof(msg), "GELU' kernel: %s", cudaGetErrorString(ce));
        return msg;
    }

    static constexpr CutlassDgeluOps ops() { return CutlassDgeluOps{can_implement, run, describe, eval, Runner::free_workspace}; }
};

// The configuration the others are variations of (each TU's Cfg derives from it and redefines what differs):
// cooperative 128x128x128, cluster 2x1, fp32 promotion, epilogue tile 128x64, 2 pre buffers.
struct DgCfgBase {
    static constexpr bool kFastAccum = false;
    static constexpr int kStagesC = 2;
    using Tile = Shape<_128, _128, _128>;
    using Cluster = Shape<_2, _1, _1>;
    using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
    using EpilogueTile = Shape<_128, _64>;
    static constexpr const char* kSchedule = "cooperative";
};

}  // namespace

// Defines the configuration's CutlassDgeluOps (cutlass_fp8_dgelu_ops.h) from its Cfg struct.
#define CUTLASS_FP8_DGELU_DEFINE_OPS(name, Cfg) \
    extern const CutlassDgeluOps cutlass_fp8_dgelu_ops_##name = DgHost<Cfg, CUTLASS_DGELU_##name>::ops();
