// cutlass_tcast_common.cuh - TcastGroupCast, a CUTLASS SM90 epilogue visitor (EVT) node that rounds its child's fp32
// values to BF16 and casts them to a TensorCast data type along the rows, in tiles of kTile consecutive columns (the
// MX / BFP groups: doc/TCAST.md 1.3, 4.2-4.4, 4a), with the very device quantizers of the stand-alone pass
// (llmc/kernels/tcast/tcast_cast_device.cuh: TcastQRne, TcastQExp), so that the stored BF16 values are bit for bit
// tcast_cast(y, y, M, N, 1, dt, seed) of the BF16 values the node rounds (doc/TCAST.md 5.3: element (r, c) draws its
// random bits at the flat row-major index r * N + c). Included ONLY by the CUTLASS translation units
// llmc/kernels/gemm/cutlass_tcast_*.cu (through their _impl.cuh); internal linkage.
//
// Why reduce(): the TMA warp-specialized epilogue (cutlass/epilogue/collective/sm90_epilogue_tma_warpspecialized.hpp,
// CUTLASS 4.2.0, store(): the loop over the subtiles) visits every value of a subtile into tRS_rCompute (the root
// node's output fragments: its element type RegisterElementD is the root's visit type when that is SmemElementD, here
// BF16, else ElementCompute), then calls every node's reduce(smem, sync, epi_m, epi_n, is_last, tRS_rCompute_frg),
// THEN converts tRS_rCompute to D's element type and copies it to shared memory for the TMA store. The fragment view
// tRS_rCompute_frg is a recast of the register tensor, a non-owning view (cute recast keeps the pointer), passed by
// value: a node that writes it in reduce() changes what is stored. A group cast needs the whole group's amax before
// any element is cast, i.e. all the values of the subtile, which visit() (one fragment at a time) never has; reduce()
// has them all, and every epilogue thread calls it (the consumer warp groups: two cooperative, one ping-pong), so its
// shuffles have every lane present. So this node must be
// the ROOT of the tree (its visit type is the stored type, BF16: the collective then converts BF16 to BF16, a copy).
//
// Where the values are: the accumulators (cooperative and ping-pong schedules) have wgmma's layout; in a row of a subtile, the 4
// lanes of a quad (lane bits 0..1) hold all its columns, 2 adjacent ones in each 8-column block (columns 8j + 2q,
// 8j + 2q + 1 for lane q of the quad). So for kTile a multiple of 8 dividing the subtile's width, a thread holds
// kTile / 4 values of each group in each of its rows, and the quad's xor-1 and xor-2 shuffles merge the group's
// accumulation, exactly as tcast_lanes_cast merges 8-element packets over lanes (tcast_row_sinks.cuh). The node does
// not assume the register order: it reads each value's (row, column) offset from the epilogue's own partition of the
// CTA tile at compile time (TcastFragMap: a static layout, so the grouping is resolved by the compiler) and
// static_asserts the structure above (columns 8j + {0, 1} from the thread's first, equal group sizes); the quad
// structure itself (the thread's first column 2q mod 8, same rows in the quad) is the wgmma layout, which
// dev/cuda/cutlass_tcast_gemm.cu checks through the bits against the pass.
//
// Residue: rows >= M are cast and not stored (TMA clips them); a group never straddles column N because the host
// requires N % kTile == 0 (tcast_cast_shape_ok's rule: a tile divides the row) and tiles start at multiples of kTile.
// Groups are whole rows' 32-column slices, so nothing outside the problem enters a stored group.
//
// Data types (the host's choice, cutlass_tcast_gemm.cu): exponent-scaled tiles of kTile along the row (mxfp8e4,
// mxfp8e5, mxfp6*, mxfp4e2, mxint8 at tile 32, any round mode), and unscaled / fixed-scale types of the fast paths
// (every element alone); quantizer TcastQRne (@even, CUTLASS_TCAST_RNE) or TcastQExp (CUTLASS_TCAST_EXP). No
// statistics (the counted cast is the pass's). OFF: the BF16 values are stored as they are (what the pass reads).
#pragma once

#include <stdint.h>
#include <utility>
#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>

#include "llmc/kernels/tcast/tcast_cast_device.cuh"  // TcastKernelArgs, TcastQRne, TcastQExp, tcast_cast_run, tcast_pack2
#include "llmc/kernels/gemm/cutlass_tcast_quant.h"

namespace {

// The compile-time map of one thread's values in one epilogue subtile: KL is the thread's (CPY, CPY_M, CPY_N) slice
// of the column-major (CTA_M, CTA_N) layout (m, n) -> m + CTA_M n as the epilogue partitions it, so KL(e) - the
// offset of value e relative to the thread's first value - is a compile-time integer r + CTA_M c. Values are grouped
// by (r, c / kTile); tab.mem lists each group's kPer members in order.
template <class KL, int kCtaM, int kTile>
struct TcastFragMap {
    static constexpr int kN = int(decltype(cute::size(KL{}))::value);
    struct Tab {
        int grp[kN];
        int mem[kN];
        int ngroups, per;
        int ok;  // 1, or the failed rule: 2 negative offset, 3 column not 8j + {0, 1}, 4 unequal or odd groups
    };
    template <int... E>
    static constexpr Tab build(std::integer_sequence<int, E...>) {
        const int off[kN] = {int(decltype(KL{}(cute::Int<E>{}))::value)...};
        Tab t{};
        int key[kN] = {}, count[kN] = {}, fill[kN] = {};
        t.ok = 1;
        for (int e = 0; e < kN; ++e) {
            if (off[e] < 0) t.ok = 2;
            const int r = off[e] % kCtaM, c = off[e] / kCtaM;
            if (c % 8 > 1) t.ok = 3;
            const int k = r * 65536 + c / kTile;
            int g = 0;
            while (g < t.ngroups && key[g] != k) ++g;
            if (g == t.ngroups) key[t.ngroups++] = k;
            t.grp[e] = g;
            ++count[g];
        }
        t.per = count[0];
        for (int g = 0; g < t.ngroups; ++g)
            if (count[g] != t.per || t.per % 2 != 0) t.ok = 4;
        if (t.ok == 1)
            for (int e = 0; e < kN; ++e) t.mem[t.grp[e] * t.per + fill[t.grp[e]]++] = e;
        return t;
    }
    static constexpr Tab tab = build(std::make_integer_sequence<int, kN>{});
    static_assert(tab.ok == 1, "TcastGroupCast: the epilogue's fragment is not wgmma's (columns 8j + {0,1}, equal groups)");
    static constexpr int kGroups = tab.ngroups;
    static constexpr int kPer = tab.per;
    static constexpr int member(int g, int j) { return tab.mem[g * tab.per + j]; }
};

// ------------------------------------------------------------------------------------------------
// The pieces the cast nodes share (TcastGroupCast here, TcastGeluCast in cutlass_tcast_gelu_node.cuh).

// The epilogue's coordinate tensor: (CPY, CPY_M, CPY_N, EPI_M, EPI_N) CTA-relative (row, column) of every value the
// thread visits (the flat indices of stochastic rounding).
template <bool ReferenceSrc, class... Args>
CUTLASS_DEVICE auto tcast_epi_coords(cutlass::epilogue::fusion::detail::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    auto tile_mn = take<0, 2>(args.tile_shape_mnk);
    return cutlass::epilogue::fusion::detail::sm90_partition_for_epilogue<ReferenceSrc>(make_identity_tensor(tile_mn), args.epi_tile,
                                                                                         args.tiled_copy, args.thread_idx);
}

// The TcastFragMap of the epilogue's partition (an empty object: its type carries the map).
template <bool ReferenceSrc, int kTile, class... Args>
CUTLASS_DEVICE auto tcast_epi_map(cutlass::epilogue::fusion::detail::ConsumerStoreArgs<Args...> const& args) {
    using namespace cute;
    auto tile_mn = take<0, 2>(args.tile_shape_mnk);
    // column-major integer offsets over the CTA tile, partitioned like the fragments: their static layout is the map's
    auto gKey = make_tensor(make_gmem_ptr<int>(nullptr), make_layout(tile_mn, LayoutLeft{}));
    auto tKey = cutlass::epilogue::fusion::detail::sm90_partition_for_epilogue<ReferenceSrc>(gKey, args.epi_tile, args.tiled_copy,
                                                                                             args.thread_idx);
    using KL = decltype(tKey(_, _, _, _0{}, _0{}).layout());
    return TcastFragMap<KL, int(size<0>(tile_mn)), kTile>{};
}

// The visited BF16 fragments (a (EPI_V) tensor of Array<bfloat16_t, FS>) as float32 bit patterns b[e], e = v * FS + i.
template <class Map, class VTensor>
CUTLASS_DEVICE void tcast_epi_load_bits(VTensor const& frg, uint32_t (&b)[Map::kN]) {
    using namespace cute;
    using Frg = typename VTensor::value_type;
    static_assert(cute::is_same_v<Frg, cutlass::Array<cutlass::bfloat16_t, Frg::kElements>>,
                  "the cast node must be the root: the visited fragments are its BF16 output");
    constexpr int FS = Frg::kElements;
    static_assert(FS % 2 == 0 && FS * decltype(size(frg))::value == Map::kN, "cast node: fragment size");
    for_each(make_int_sequence<Map::kN>{}, [&](auto e) {
        constexpr int E = decltype(e)::value;
        const cutlass::bfloat16_t v = frg(E / FS)[E % FS];
        b[E] = (uint32_t)v.raw() << 16;  // BF16 as float32 bits (exact)
    });
}

// b[e] back to BF16 into the fragments as the pass stores its packets (tcast_pack2: cvt.rn.bf16x2.f32, no
// flush-to-zero); b[e] becomes the stored value's float32 bits.
template <class Map, class VTensor>
CUTLASS_DEVICE void tcast_epi_store_bits(uint32_t (&b)[Map::kN], VTensor& frg) {
    using namespace cute;
    constexpr int FS = VTensor::value_type::kElements;
    for_each(make_int_sequence<Map::kN / 2>{}, [&](auto h) {
        constexpr int E = 2 * decltype(h)::value;
        const uint32_t w = tcast_pack2(b[E], b[E + 1]);
        frg(E / FS)[E % FS] = cutlass::bfloat16_t::bitcast((uint16_t)(w & 0xFFFFu));
        frg((E + 1) / FS)[(E + 1) % FS] = cutlass::bfloat16_t::bitcast((uint16_t)(w >> 16));
        b[E] = w << 16;
        b[E + 1] = w & 0xFFFF0000u;
    });
}

// Casts the groups of one subtile, bits b[] in place, with quantizer Q and launch constants k; index(e): value e's
// flat index row * N + col. Every lane of the warp calls it (shuffles).
template <class Map, class Q, class Index>
CUTLASS_DEVICE void tcast_epi_cast_groups(TcastKernelArgs const& k, uint32_t (&b)[Map::kN], Index&& index) {
    using namespace cute;
    constexpr int G = Map::kGroups, P = Map::kPer;
    const bool grouped = k.dt.has_scale != 0;  // else unscaled / fixed scale: every element alone
    typename Q::Param p[G];
    if (grouped) {
        typename Q::Acc acc[G];
        for_each(make_int_sequence<G>{}, [&](auto g) {
            acc[decltype(g)::value] = Q::init();
            for_each(make_int_sequence<P>{}, [&](auto j) {
                constexpr int E = Map::member(decltype(g)::value, decltype(j)::value);
                Q::add(acc[decltype(g)::value], b[E]);
            });
        });
        // the quad's lanes hold the rest of each group (header comment): tcast_lanes_cast's merge over lanes 1, 2
        for_each(make_int_sequence<G>{}, [&](auto g) { Q::merge(acc[decltype(g)::value], Q::shfl_xor(acc[decltype(g)::value], 1)); });
        for_each(make_int_sequence<G>{}, [&](auto g) { Q::merge(acc[decltype(g)::value], Q::shfl_xor(acc[decltype(g)::value], 2)); });
        if constexpr (Q::kFastRuns) {
            // The common case (an @max exponent scale, RNE, every group of the thread a fast group): the branch-free
            // group step and one run over all the thread's groups, so that the groups' dependent chains interleave
            // (per group, the general steps below branch on the scale and the run, which serialized them: the
            // epilogue runs on the tile's math warps alone, latency-bound).
            if (k.rne_group) {
                TcastRneParam pf[G];
                bool fast = true;
                for_each(make_int_sequence<G>{}, [&](auto g) {
                    pf[decltype(g)::value] = tcast_rne_group_fast(k, acc[decltype(g)::value]);
                    fast = fast && pf[decltype(g)::value].ok == 2;
                });
                if (fast) {
                    Q::with_step(k, [&](auto step) {
                        for_each(make_int_sequence<G>{}, [&](auto g) {
                            for_each(make_int_sequence<P / 2>{}, [&](auto j) {
                                constexpr int E0 = Map::member(decltype(g)::value, 2 * decltype(j)::value);
                                constexpr int E1 = Map::member(decltype(g)::value, 2 * decltype(j)::value + 1);
                                decltype(step)::fast2(k, pf[decltype(g)::value], b[E0], b[E1]);
                            });
                        });
                    });
                    return;
                }
            }
        }
        for_each(make_int_sequence<G>{}, [&](auto g) { p[decltype(g)::value] = Q::param(k, Q::scale(k, acc[decltype(g)::value])); });
    } else {
        const typename Q::Param pu = Q::param(k, tcast_unscaled_group());
        for_each(make_int_sequence<G>{}, [&](auto g) { p[decltype(g)::value] = pu; });
    }
    for_each(make_int_sequence<G>{}, [&](auto g) {
        uint32_t gb[P];
        uint64_t gi[P];
        for_each(make_int_sequence<P>{}, [&](auto j) {
            constexpr int E = Map::member(decltype(g)::value, decltype(j)::value);
            gb[decltype(j)::value] = b[E];
            gi[decltype(j)::value] = index(E);
        });
        TcastCounts cnt = {0u, 0u, 0u};
        tcast_cast_run<Q, false, P / 2>(k, p[decltype(g)::value], cnt, [&](int i) {
            return TcastPairRef{gb[2 * i], gb[2 * i + 1], gi[2 * i], gi[2 * i + 1], true, true};
        });
        for_each(make_int_sequence<P>{}, [&](auto j) {
            constexpr int E = Map::member(decltype(g)::value, decltype(j)::value);
            b[E] = gb[decltype(j)::value];
        });
    });
}

// tcast_epi_cast_groups with the launch's quantizer (CutlassTcastQuant; OFF: b unchanged). Uniform branch.
template <class Map, class Index>
CUTLASS_DEVICE void tcast_epi_cast(int quant, TcastKernelArgs const& k, uint32_t (&b)[Map::kN], Index&& index) {
    if (quant == CUTLASS_TCAST_RNE) tcast_epi_cast_groups<Map, TcastQRne>(k, b, index);
    else if (quant == CUTLASS_TCAST_EXP) tcast_epi_cast_groups<Map, TcastQExp>(k, b, index);
}

// value e's flat row-major index row * ld + col in the problem (tCc_mn: the subtile's coordinates; row0, col0: the
// CTA tile's origin)
template <class CoordTensor>
struct TcastEpiIndex {
    CoordTensor tCc_mn;
    int64_t row0, col0, ld;
    CUTLASS_DEVICE uint64_t operator()(int e) const {
        auto rc = tCc_mn(e);
        return (uint64_t)((row0 + cute::get<0>(rc)) * ld + col0 + cute::get<1>(rc));
    }
};
template <class CoordTensor>
CUTLASS_DEVICE auto tcast_epi_index(CoordTensor tCc_mn, int64_t row0, int64_t col0, int64_t ld) {
    return TcastEpiIndex<CoordTensor>{tCc_mn, row0, col0, ld};
}

// ------------------------------------------------------------------------------------------------
// The node (header comment). kTile: the group length along the row (a multiple of 8 dividing the epilogue tile's N).
template <class CtaTileShapeMNK, class EpilogueTile, int kTile>
struct TcastGroupCast {
    static constexpr int kCtaM = cute::size<0>(CtaTileShapeMNK{});
    static constexpr int kCtaN = cute::size<1>(CtaTileShapeMNK{});
    static constexpr int kEpiN = cute::size<1>(EpilogueTile{});
    static_assert(kTile % 8 == 0 && kEpiN % kTile == 0, "TcastGroupCast: kTile a multiple of 8 that divides the epilogue tile's N");

    struct SharedStorage {};
    struct Arguments {
        int quant = CUTLASS_TCAST_OFF;  // CutlassTcastQuant
        TcastKernelArgs k = {};         // tcast_kernel_args(dt, seed) (read unless OFF)
    };
    struct Params {
        int quant = CUTLASS_TCAST_OFF;
        TcastKernelArgs k = {};
        int64_t ld = 0;  // N: the row length of the flat index r * N + c
    };

    template <class ProblemShape>
    static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
        auto mnkl = cute::append<4>(problem_shape, 1);
        Params p;
        p.quant = args.quant;
        p.k = args.k;
        p.ld = (int64_t)cute::get<1>(mnkl);
        return p;
    }
    template <class ProblemShape>
    static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
        auto mnkl = cute::append<4>(problem_shape, 1);
        return args.quant == CUTLASS_TCAST_OFF || (int)cute::get<1>(mnkl) % kTile == 0;
    }
    template <class ProblemShape>
    static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
        return 0;
    }
    template <class ProblemShape>
    static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                                cutlass::CudaHostAdapter* = nullptr) {
        return cutlass::Status::kSuccess;
    }

    CUTLASS_DEVICE bool is_producer_load_needed() const { return false; }
    CUTLASS_DEVICE bool is_C_load_needed() const { return false; }

    CUTLASS_HOST_DEVICE TcastGroupCast() {}
    // params: the kernel's (grid-constant) parameters, referenced rather than copied: the quantizers take the address of
    // the data type (the out-of-line exact path), which in a copy would force it into local memory
    CUTLASS_HOST_DEVICE TcastGroupCast(Params const& params, SharedStorage const&) : params_ptr(&params) {}

    Params const* params_ptr = nullptr;

    template <class... Args>
    CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::detail::ProducerLoadArgs<Args...> const&) {
        return cutlass::epilogue::fusion::detail::EmptyProducerLoadCallbacks{};
    }

    // CoordTensor: tcast_epi_coords; Map: TcastFragMap of the thread's subtile fragment.
    template <class CoordTensor, class Map>
    struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::detail::EmptyConsumerStoreCallbacks {
        CoordTensor tCc;
        Params const* params_ptr;
        int64_t row0, col0;  // the CTA tile's origin in the problem

        CUTLASS_DEVICE ConsumerStoreCallbacks(CoordTensor c, Params const* p, int64_t r0, int64_t c0)
            : tCc(c), params_ptr(p), row0(r0), col0(c0) {}

        // acc-derived fp32 values -> BF16 (round to nearest even): the value the trainer stores before its cast
        template <typename ElementAccumulator, typename ElementInput, int FragmentSize>
        CUTLASS_DEVICE auto visit(cutlass::Array<ElementAccumulator, FragmentSize> const&, int, int, int,
                                  cutlass::Array<ElementInput, FragmentSize> const& frg_input) {
            return cutlass::NumericArrayConverter<cutlass::bfloat16_t, ElementInput, FragmentSize, cutlass::FloatRoundStyle::round_to_nearest>{}(
                frg_input);
        }

        template <class STensor, class SyncFn, class VTensor>
        CUTLASS_DEVICE void reduce(STensor&&, SyncFn const&, int epi_m, int epi_n, bool, VTensor visit_results) {
            using namespace cute;
            Params const& params = *params_ptr;
            if (params.quant == CUTLASS_TCAST_OFF) return;
            uint32_t b[Map::kN];
            tcast_epi_load_bits<Map>(visit_results, b);
            tcast_epi_cast<Map>(params.quant, params.k, b, tcast_epi_index(tCc(_, _, _, epi_m, epi_n), row0, col0, params.ld));
            tcast_epi_store_bits<Map>(b, visit_results);
        }
    };

    template <bool ReferenceSrc, class... Args>
    CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::detail::ConsumerStoreArgs<Args...> const& args) {
        using Map = decltype(tcast_epi_map<ReferenceSrc, kTile>(args));
        auto tCc = tcast_epi_coords<ReferenceSrc>(args);
        auto [m, n, k, l] = args.tile_coord_mnkl;
        return ConsumerStoreCallbacks<decltype(tCc), Map>(tCc, params_ptr, (int64_t)m * kCtaM, (int64_t)n * kCtaN);
    }
};

}  // namespace
