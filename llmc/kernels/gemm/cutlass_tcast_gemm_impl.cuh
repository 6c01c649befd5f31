// cutlass_tcast_gemm_impl.cuh - the CUTLASS instantiation behind cutlass_tcast_gemm.h, as a template over a
// configuration (what it computes and the layouts: cutlass_tcast_gemm.h). Included ONLY by the configuration
// translation units llmc/kernels/gemm/cutlass_tcast_gemm_<name>.cu (one instantiation each: minutes and ~4 GB of
// compiler memory), compiled for sm_90a with -std=c++17 --expt-relaxed-constexpr and without --use_fast_math.
//
// The instantiation, in CUTLASS 4.x terms:
//   mainloop  CollectiveBuilder<Sm90, TensorOp, bf16 RowMajor A (inp), bf16 ColumnMajor B (weight; both K-major), fp32
//             accumulator, Cfg::Tile, Cfg::Cluster, stages = what shared memory leaves after the epilogue,
//             Cfg::KernelSchedule: KernelTmaWarpSpecializedCooperative (two consumer warp groups share each tile) or
//             KernelTmaWarpSpecializedPingpong (each warp group its own tile: one's epilogue overlaps the other's
//             mainloop)>
//   epilogue  Sm90TmaBuilderImpl with C = void, D bf16 row-major, the visitor tree below passed as the callbacks
//             themselves, and CUTLASS's automatic dispatch policy for a void C: Sm90TmaWarpSpecialized<min(subtiles, 4),
//             2, epilogue tile / epilogue threads (256 cooperative, 128 ping-pong), no smem reuse, delayed TMA store>
//   kernel    GemmUniversal<Shape<int,int,int,int>, mainloop, epilogue, PersistentScheduler>
// The visitor tree (leaves first):
//   v   = acc + bias[o]                       Sm90Compute<plus, float> of Sm90AccFetch and Sm90RowBroadcast (bf16 bias,
//                                             NULL: 0): fp32
//   out = TcastGroupCast<32>(v)               cutlass_tcast_common.cuh: bf16_rne(v), then (unless off) the 32-column
//                                             group cast in reduce(); the root, so its BF16 fragments are what is stored
// or, for the fc layer (kGelu), the root TcastGeluCast<32>(v) (cutlass_tcast_gelu_node.cuh): pre = cast(bf16_rne(v))
// through its aux store, out = cast'(GELU(pre)) as the root's fragments;
// and the collective stores the root's fragments through its TMA store. Determinism: every output element is written
// by the one CTA that owns its tile, from a whole-K accumulation in a fixed order.
#pragma once

#include "llmc/kernels/gemm/cutlass_fp8_common.cuh"  // CutlassRunner (host side of a GEMM type)
#include "llmc/kernels/gemm/cutlass_tcast_common.cuh"
#include "llmc/kernels/gemm/cutlass_tcast_gelu_node.cuh"
#include "llmc/kernels/gemm/cutlass_tcast_gemm_ops.h"

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

using namespace cute;
namespace cef = cutlass::epilogue::fusion;

constexpr int kTcastGemmTile = 32;  // the group length the node casts (the MX tile)

// The tree (header comment). op_0 .. op_k of each node's arguments are its children in order, then the node itself.
template <class Root, class CtaTile>
using TcastBiasTree =
    cef::Sm90EVT<Root,                                                                                        // the cast root
      cef::Sm90EVT<cef::Sm90Compute<cutlass::plus, float, float, cutlass::FloatRoundStyle::round_to_nearest>,  // v = acc + bias
        cef::Sm90AccFetch,
        cef::Sm90RowBroadcast<0, CtaTile, cutlass::bfloat16_t, float, Stride<_0, _1, int64_t>, 8>>>;

// The GEMM type of a configuration. Cfg: Tile, Cluster, KernelSchedule, EpilogueTile (Shape<_128, _N>), kSchedule (a name).
// kGelu: the fc layer's epilogue (TcastGeluCast) instead of the plain cast (TcastGroupCast).
template <class Cfg, bool kGelu>
struct TcGemm {
    using ElementAB = cutlass::bfloat16_t;
    using ElementD = cutlass::bfloat16_t;
    using LayoutA = cutlass::layout::RowMajor;
    using LayoutB = cutlass::layout::ColumnMajor;
    using LayoutD = cutlass::layout::RowMajor;
    static constexpr int kAlign = 8;  // elements: 16 bytes (TMA)

    using Tile = typename Cfg::Tile;
    using EpilogueTile = typename Cfg::EpilogueTile;
    static constexpr int kSubtiles = cute::size(cute::shape_div(cute::take<0, 2>(Tile{}), EpilogueTile{}));
    static constexpr int kStagesD = kSubtiles < 2 ? kSubtiles : 2;  // CUTLASS's automatic D (and aux) buffers
    using KernelSchedule = typename Cfg::KernelSchedule;
    static constexpr int kEpiThreads = cute::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative> ? 256 : 128;
    static_assert(cute::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperative> ||
                      cute::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedPingpong>,
                  "cooperative or ping-pong");
    using EpiloguePolicy = cutlass::epilogue::Sm90TmaWarpSpecialized<(kSubtiles < 4 ? kSubtiles : 4), kStagesD,
                                                                     cute::size(EpilogueTile{}) / kEpiThreads, /*ReuseSmemC*/ false,
                                                                     /*DelayTmaStore*/ true>;
    using Root = cute::conditional_t<kGelu, TcastGeluCast<kStagesD, Tile, EpilogueTile, kTcastGemmTile>,
                                     TcastGroupCast<Tile, EpilogueTile, kTcastGemmTile>>;
    using Tree = TcastBiasTree<Root, Tile>;
    using CollectiveEpilogue = typename cutlass::epilogue::collective::detail::Sm90TmaBuilderImpl<
        Tile, EpilogueTile, float, float, /*ElementC*/ void, LayoutD, kAlign, ElementD, LayoutD, kAlign, Tree, EpiloguePolicy>::CollectiveOp;

    using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, LayoutA, kAlign, ElementAB, LayoutB, kAlign, float, Tile,
        typename Cfg::Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
        KernelSchedule>::CollectiveOp;

    using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue,
                                                        cutlass::gemm::PersistentScheduler>;
    using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

    using StrideC = typename Kernel::StrideC;
    using StrideD = typename Kernel::StrideD;
    using StrideRow = cute::Stride<int64_t, cute::Int<1>, int64_t>;
    static_assert(cute::is_same_v<typename Kernel::StrideA, StrideRow>, "A: K-major (M, K, L)");
    static_assert(cute::is_same_v<typename Kernel::StrideB, StrideRow>, "B: K-major (N, K, L)");
    static_assert(cute::is_same_v<StrideD, StrideRow>, "D: row-major (M, N, L)");

    // The CUTLASS arguments of one call. M = N tokens, N = OC, K = C. kGelu: D = out (the cast GELU), the aux store = pre.
    static typename Gemm::Arguments arguments(const CutlassTcastCall& c) {
        const int64_t M = c.N, Nn = c.OC, K = c.C;
        typename Gemm::Arguments args{};
        args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
        args.problem_shape = {(int)M, (int)Nn, (int)K, 1};
        args.mainloop.ptr_A = reinterpret_cast<ElementAB const*>(c.inp);
        args.mainloop.dA = cute::make_stride(K, cute::Int<1>{}, M * K);
        args.mainloop.ptr_B = reinterpret_cast<ElementAB const*>(c.weight);
        args.mainloop.dB = cute::make_stride(K, cute::Int<1>{}, Nn * K);
        args.epilogue.ptr_C = nullptr;
        args.epilogue.dC = StrideC{};
        args.epilogue.ptr_D = reinterpret_cast<ElementD*>(c.out);
        args.epilogue.dD = cute::make_stride(Nn, cute::Int<1>{}, M * Nn);
        auto& root = args.epilogue.thread;  // {v subtree, cast}
        auto& v = root.op_0;                // {acc, bias, plus}
        v.op_1 = {reinterpret_cast<cutlass::bfloat16_t const*>(c.bias), cutlass::bfloat16_t(0.0f), {}};
        if constexpr (kGelu) {
            root.op_1.quant_pre = c.quant;
            root.op_1.k_pre = c.k;
            root.op_1.quant_out = c.quant_gelu;
            root.op_1.k_out = c.k_gelu;
            root.op_1.pre_ptr = reinterpret_cast<cutlass::bfloat16_t*>(c.pre);
            root.op_1.dPre = cute::make_stride(Nn, cute::Int<1>{}, M * Nn);
        } else {
            root.op_1.quant = c.quant;
            root.op_1.k = c.k;
        }
        args.hw_info.device_id = c.device;
        args.hw_info.sm_count = c.sm_count;
        return args;
    }
};

// ------------------------------------------------------------------------------------------------
// Host side of a configuration: the CutlassTcastOps functions

template <class Cfg>
struct TcHost {
    using G = TcGemm<Cfg, false>;
    using GG = TcGemm<Cfg, true>;
    using Runner = CutlassRunner<typename G::Gemm, TcHost>;
    using RunnerG = CutlassRunner<typename GG::Gemm, TcHost>;

    static const char* can_implement(const CutlassTcastCall& c) { return Runner::can_implement(G::arguments(c)); }
    static const char* run(const CutlassTcastCall& c, cudaStream_t stream) { return Runner::run(G::arguments(c), stream); }
    static const char* can_implement_gelu(const CutlassTcastCall& c) { return RunnerG::can_implement(GG::arguments(c)); }
    static const char* run_gelu(const CutlassTcastCall& c, cudaStream_t stream) { return RunnerG::run(GG::arguments(c), stream); }
    static void free_workspaces() {
        Runner::free_workspace();
        RunnerG::free_workspace();
    }

    static const char* describe() {
        static char line[400];
        using Tile = typename Cfg::Tile;
        using Cl = typename Cfg::Cluster;
        using EpiTile = typename G::EpilogueTile;
        snprintf(line, sizeof(line),
                 "CUTLASS %d.%d.%d sm_90a, %s, tile %dx%dx%d, cluster %dx%dx%d, %d stages, %d B shared memory, epilogue tile %dx%d; "
                 "bf16 x bf16 -> fp32 + bias -> bf16 -> TensorCast cast of 32-column groups",
                 CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH, Cfg::kSchedule, (int)cute::size<0>(Tile{}), (int)cute::size<1>(Tile{}),
                 (int)cute::size<2>(Tile{}), (int)cute::size<0>(Cl{}), (int)cute::size<1>(Cl{}), (int)cute::size<2>(Cl{}),
                 (int)G::CollectiveMainloop::DispatchPolicy::Stages, (int)G::Kernel::SharedStorageSize, (int)cute::size<0>(EpiTile{}),
                 (int)cute::size<1>(EpiTile{}));
        return line;
    }

    static constexpr CutlassTcastOps ops() { return CutlassTcastOps{can_implement, run, can_implement_gelu, run_gelu, describe, free_workspaces}; }
};

// The configuration the others are variations of (each TU's Cfg derives from it and redefines what differs).
struct TcCfgBase {
    using Tile = Shape<_128, _256, _64>;
    using Cluster = Shape<_2, _1, _1>;
    using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
    using EpilogueTile = Shape<_128, _64>;
    static constexpr const char* kSchedule = "cooperative";
};

}  // namespace

// Defines the configuration's CutlassTcastOps (cutlass_tcast_gemm_ops.h) from its Cfg struct.
#define CUTLASS_TCAST_GEMM_DEFINE_OPS(name, Cfg) extern const CutlassTcastOps cutlass_tcast_gemm_ops_##name = TcHost<Cfg>::ops();
