// cutlass_tcast_gelu_node.cuh - TcastGeluCast, the fc layer's epilogue root of the TensorCast GEMM (issue 26, s6 step 5):
// the BF16 pre-activation z = bf16(acc + bias) is cast (MATMUL_OUT data type) and stored as an aux output (pre: the
// tensor the backward reads), and out = cast'(gemm_gelu_stored(cast(z))) (GELU_OUT data type) is what the collective
// stores as D. Bit for bit the trainer's path with both sites on: GEMM into pre, then boundary_gelu (the GELU-sites
// kernel, llmc/kernels/tcast/tcast_gelu.cuh, BOUNDARY_GELU_FRONT form: pre' = cast_a(pre) stored in place,
// out = cast_b(gemm_gelu_stored(pre'))). The GELU is gelu_fastmath.cuh's gelu_stored_fastmath: gemm_gelu_stored's
// instructions under the trainer's --use_fast_math, written out for this translation unit compiled without it.
// Included ONLY by the CUTLASS translation units llmc/kernels/gemm/cutlass_tcast_gemm_*.cu; internal linkage.
//
// Both casts need whole groups, so both run in reduce() (cutlass_tcast_common.cuh says why a cast lives there and why
// the node is the root): the visited fragments hold z; they are cast in place and handed, as BF16, to a CUTLASS aux
// store (Sm90AuxStore, row-major BF16, its builder-chosen swizzle and stmatrix copy) through that store's own visit(),
// which copies them into its registers; then the GELU of the stored BF16 values is cast and written back into the
// fragments, which the collective converts (BF16 to BF16) and stores as D. postreduce() and tma_store() are forwarded
// to the aux store, which copies its registers to its shared-memory buffer and issues its TMA store. Either cast may be
// off (CUTLASS_TCAST_OFF): then that tensor is stored uncast, as the trainer does when the site is off; the GELU
// always runs. pre NULL: no aux store (the aux store's null check), only out.
#pragma once

#include "llmc/kernels/gemm/cutlass_tcast_common.cuh"
#include "llmc/kernels/gemm/gelu_fastmath.cuh"

namespace {

template <int StagesD, class CtaTileShapeMNK, class EpilogueTile, int kTile>
struct TcastGeluCast {
    static constexpr int kCtaM = cute::size<0>(CtaTileShapeMNK{});
    static constexpr int kCtaN = cute::size<1>(CtaTileShapeMNK{});
    static constexpr int kEpiN = cute::size<1>(EpilogueTile{});
    static_assert(kTile % 8 == 0 && kEpiN % kTile == 0, "TcastGeluCast: kTile a multiple of 8 that divides the epilogue tile's N");

    using StrideRow = cute::Stride<int64_t, cute::_1, int64_t>;  // row-major (M, N): element (m, n) at m * ld + n
    // the pre output: CUTLASS's aux store, row-major bf16, with the swizzle atom and register -> shared memory copy
    // (stmatrix) its builder picks for that layout
    using Aux = cutlass::epilogue::fusion::Sm90AuxStore<
        StagesD, EpilogueTile, cutlass::bfloat16_t, cutlass::FloatRoundStyle::round_to_nearest, StrideRow,
        decltype(cutlass::epilogue::collective::detail::sm90_get_epilogue_smem_swizzle_layout_atom<StrideRow, cutlass::bfloat16_t, EpilogueTile>()),
        decltype(cutlass::epilogue::collective::detail::sm90_get_smem_store_op_for_accumulator<StrideRow, cutlass::bfloat16_t, EpilogueTile>()),
        8>;

    struct SharedStorage {
        typename Aux::SharedStorage aux;
    };
    struct Arguments {
        int quant_pre = CUTLASS_TCAST_OFF;  // MATMUL_OUT cast of z (CutlassTcastQuant)
        TcastKernelArgs k_pre = {};
        int quant_out = CUTLASS_TCAST_OFF;  // GELU_OUT cast of the GELU
        TcastKernelArgs k_out = {};
        cutlass::bfloat16_t* pre_ptr = nullptr;  // (M, N) row-major, or NULL (not stored)
        StrideRow dPre = {};
    };
    struct Params {
        int quant_pre = CUTLASS_TCAST_OFF;
        TcastKernelArgs k_pre = {};
        int quant_out = CUTLASS_TCAST_OFF;
        TcastKernelArgs k_out = {};
        int64_t ld = 0;  // N
        typename Aux::Params aux;
    };

    template <class ProblemShape>
    static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void* workspace) {
        auto mnkl = cute::append<4>(problem_shape, 1);
        Params p;
        p.quant_pre = args.quant_pre;
        p.k_pre = args.k_pre;
        p.quant_out = args.quant_out;
        p.k_out = args.k_out;
        p.ld = (int64_t)cute::get<1>(mnkl);
        p.aux = Aux::to_underlying_arguments(problem_shape, typename Aux::Arguments{args.pre_ptr, args.dPre}, workspace);
        return p;
    }
    template <class ProblemShape>
    static bool can_implement(ProblemShape const& problem_shape, Arguments const& args) {
        auto mnkl = cute::append<4>(problem_shape, 1);
        const bool cast = args.quant_pre != CUTLASS_TCAST_OFF || args.quant_out != CUTLASS_TCAST_OFF;
        return (!cast || (int)cute::get<1>(mnkl) % kTile == 0) &&
               Aux::can_implement(problem_shape, typename Aux::Arguments{args.pre_ptr, args.dPre});
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

    CUTLASS_HOST_DEVICE TcastGeluCast() {}
    // params referenced, not copied (TcastGroupCast says why); the aux store keeps a pointer to its part likewise
    CUTLASS_HOST_DEVICE TcastGeluCast(Params const& params, SharedStorage const& shared) : params_ptr(&params), aux(params.aux, shared.aux) {}

    Params const* params_ptr = nullptr;
    Aux aux;

    template <class... Args>
    CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::detail::ProducerLoadArgs<Args...> const&) {
        return cutlass::epilogue::fusion::detail::EmptyProducerLoadCallbacks{};
    }

    template <class CoordTensor, class Map, class AuxCallbacks>
    struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::detail::EmptyConsumerStoreCallbacks {
        CoordTensor tCc;
        Params const* params_ptr;
        int64_t row0, col0;
        AuxCallbacks aux_cb;

        CUTLASS_DEVICE ConsumerStoreCallbacks(CoordTensor c, Params const* p, int64_t r0, int64_t c0, AuxCallbacks&& a)
            : tCc(c), params_ptr(p), row0(r0), col0(c0), aux_cb(cute::forward<AuxCallbacks>(a)) {}

        // z = bf16(acc + bias), round to nearest even
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
            using Frg = typename VTensor::value_type;
            constexpr int FS = Frg::kElements;
            constexpr int NV = decltype(size(visit_results))::value;
            const auto index = tcast_epi_index(tCc(_, _, _, epi_m, epi_n), row0, col0, params.ld);
            uint32_t b[Map::kN];
            tcast_epi_load_bits<Map>(visit_results, b);
            // pre = cast(z), stored BF16: into the fragments, and through the aux store's visit into its registers
            tcast_epi_cast<Map>(params.quant_pre, params.k_pre, b, index);
            tcast_epi_store_bits<Map>(b, visit_results);  // b: the stored BF16 values' bits
            for_each(make_int_sequence<NV>{}, [&](auto v) {
                const int V = decltype(v)::value;
                aux_cb.visit(cutlass::Array<float, FS>{}, V, epi_m, epi_n, visit_results(V));
            });
            // out = cast'(GELU(pre)): gemm_gelu_stored of the stored pre, BF16, then its groups
            for_each(make_int_sequence<Map::kN>{}, [&](auto e) {
                constexpr int E = decltype(e)::value;
                b[E] = __float_as_uint(gelu_stored_fastmath(__uint_as_float(b[E])));  // a BF16 value: exact bits
            });
            tcast_epi_cast<Map>(params.quant_out, params.k_out, b, index);
            tcast_epi_store_bits<Map>(b, visit_results);
        }

        CUTLASS_DEVICE void postreduce(int epi_m, int epi_n, int store_iteration, bool issue_smem_store) {
            aux_cb.postreduce(epi_m, epi_n, store_iteration, issue_smem_store);
        }

        CUTLASS_DEVICE void tma_store(int epi_m, int epi_n, int store_iteration, bool issue_tma_store) {
            aux_cb.tma_store(epi_m, epi_n, store_iteration, issue_tma_store);
        }
    };

    template <bool ReferenceSrc, class... Args>
    CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::detail::ConsumerStoreArgs<Args...> const& args) {
        using Map = decltype(tcast_epi_map<ReferenceSrc, kTile>(args));
        auto tCc = tcast_epi_coords<ReferenceSrc>(args);
        auto aux_cb = aux.template get_consumer_store_callbacks<ReferenceSrc>(args);
        auto [m, n, k, l] = args.tile_coord_mnkl;
        return ConsumerStoreCallbacks<decltype(tCc), Map, decltype(aux_cb)>(tCc, params_ptr, (int64_t)m * kCtaM, (int64_t)n * kCtaN,
                                                                           cute::move(aux_cb));
    }
};

}  // namespace
