// cutlass_fp8_common.cuh - what the CUTLASS FP8 GEMM templates share (cutlass_fp8_fc_impl.cuh, the fc forward;
// cutlass_fp8_dgelu_impl.cuh, the fcproj dgrad with GELU'): the warp-reduced amax element, the M-major aux store that
// writes a second, transposed copy of the epilogue's FP8 codes, and the host side of one GEMM type (workspace,
// initialize, run, CUTLASS's status as text). Included ONLY by those templates, i.e. by the CUTLASS translation
// units llmc/kernels/gemm/cutlass_*.cu (dev/test/test_layering.py); everything here has internal linkage, one copy
// per translation unit.
//
// Fp8AmaxWarp: CUTLASS's scalar reduction (Sm90ScalarReduction) keeps a per-thread max over the thread's elements of
// a tile and ends each tile with GmemReduceFn = atomic_maximum<ElementAmax> on the pointer: one atomic per thread and
// tile (256 per 128-row tile on one address). With Fp8AmaxWarp as the element type the atomic first takes the max over
// the warp (__reduce_max_sync of the bit patterns) and lets lane 0 do it: 32x fewer atomics, same value (a max of
// |v| >= 0 or NaN, whose bit pattern is above every finite one's: the unsigned max of the patterns is the max of the
// values, NaN propagating). Order-independent, so deterministic.
//
// Fp8StoreT: CUTLASS's Sm90AuxStore with the M-major stride (1, ldt, ·): element (m, n) of the (M, N) problem at
// m + n * ldt, i.e. the row-major (N, ldt) transpose of a row-major (M, N) output. For an 8-bit element the node's
// shared-memory tile is M-major (the MN-major 128-byte swizzle atom, 128 rows x 8 columns per atom), its TMA store
// writes runs of 128 bytes along M (TMA needs the innermost dimension contiguous, a 16-byte aligned base and 16-byte
// multiples as the other strides: the dispatchers require the pointer 16-byte aligned and ldt a multiple of 16), and
// the register -> shared memory copy is CUTLASS's auto-vectorizing copy, which for wgmma's accumulator fragments
// (neighbours along N) issues one single-byte store per code. NULL skips its shared-memory and TMA stores.
// Clipping: the TMA descriptor holds the problem's M as the extent of the contiguous dimension (checked on the host
// with CUTLASS 4.2.0, 2026-11-27: globalDim = {M, N, 1}, box = {128, epilogue tile N}, strides {ldt, N ldt}), but
// Hopper's TMA unit writes whole 16-byte chunks along the contiguous dimension: a tile that ends inside a chunk writes
// the rest of that chunk too (doc/TCFP12.md, "The _dt padding writes"). So with M % 16 != 0 the columns M ..
// round_up(M, 16) - 1 of every row of the copy would be overwritten (with the tile's shared-memory contents there);
// the dispatchers refuse such an M rather than write outside [0, M).
//
// Fp8ColSums: an EVT node that passes its child's fragment through unchanged and writes, per CTA tile, the column
// sums of those values over the tile's rows: partial[m_tile][n] = Σ over the rows r of row tile m_tile (r < M) of
// value(r, n), fp32, into a compact row-major (ceil(M / CTA_M), N) buffer (n < N only). The bias gradient of a linear
// layer is the sum of these rows (gemm_kernels.cuh gemm_dbias_finish adds them in row order). Deterministic: every
// partial is written once by the CTA that owns the tile (no atomics), and each is summed in one fixed order:
//   1. per subtile, each thread adds its own values of a column (the wgmma fragment holds 2 rows of it, r and r + 8
//      of its warp's 16-row band; out-of-bounds rows are skipped) in fragment order;
//   2. the 8 lanes that hold the same columns (lane bits 2..4; bits 0..1 select the column pair) add their sums in a
//      butterfly of XOR shuffles over lane masks 16, 8, 4 that halves the values each lane keeps at every step, so
//      that after the three steps every lane holds the warp's sum of EPI_N / 32 columns (7 shuffles per lane for a
//      32-column subtile instead of 24); the order of every addition is fixed by the lane and slot indices;
//   3. at the end of the tile the warps' sums go through shared memory (the epilogue's current D buffer, which the
//      collective hands to reduce() as workspace; in rounds of as many columns as it holds) and one thread per column
//      adds the 8 warps' sums in warp order and stores the partial.
// Requirements (static_asserts): the cooperative layout (CTA_M / 16 warps, 32 threads each: CTA_M = 128 for 8 warps),
// the epilogue tile spanning the CTA tile in M, EPI_N a multiple of 32; the lane structure in 2. is wgmma's accumulator
// layout (checked only through the sizes here; dev/cuda/cutlass_fp8_dgelu.cu checks the partials against float64).
// NULL ptr: the node does nothing but pass the values on.
#pragma once

#define CUTLASS_SKIP_REDUCTION_INIT 1  // CUTLASS would zero a reduction with cuMemsetD32Async (-lcuda); the dispatchers
                                       // zero the amax with cudaMemsetAsync

#include <stdint.h>
#include <stdio.h>
#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/numeric_types.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/functional.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>

#if !defined(CUTLASS_ARCH_MMA_SM90_SUPPORTED)
#error "the CUTLASS FP8 GEMMs need CUTLASS's SM90 MMA support: compile with nvcc >= 12.0 for sm_90a"
#endif

namespace {

// The amax element type of the warp-reduced reductions: a float (same bytes, the pointer is the caller's float*)
// whose atomic_maximum reduces over the warp first (header comment).
struct Fp8AmaxWarp {
    float v;
    CUTLASS_HOST_DEVICE Fp8AmaxWarp() : v(0.0f) {}
    CUTLASS_HOST_DEVICE explicit Fp8AmaxWarp(float x) : v(x) {}
};
static_assert(sizeof(Fp8AmaxWarp) == sizeof(float), "Fp8AmaxWarp aliases the caller's float");

}  // namespace

namespace cutlass {

// float -> Fp8AmaxWarp: the value as it is (what the scalar reduction converts its per-thread max with)
template <FloatRoundStyle Round>
struct NumericConverter<Fp8AmaxWarp, float, Round> {
    using result_type = Fp8AmaxWarp;
    using source_type = float;
    static FloatRoundStyle const round_style = Round;
    CUTLASS_HOST_DEVICE static result_type convert(source_type const& s) { return Fp8AmaxWarp(s); }
    CUTLASS_HOST_DEVICE result_type operator()(source_type const& s) const { return convert(s); }
};

// The reduction's final atomic: called by all 32 lanes of every consumer warp at the end of each tile (the
// epilogue's end(), unconditional); values are maxima of |v| >= 0 (or NaN), so the unsigned max of the bit patterns
// is the max of the values.
template <>
struct atomic_maximum<Fp8AmaxWarp> {
    CUTLASS_DEVICE Fp8AmaxWarp operator()(Fp8AmaxWarp* ptr, Fp8AmaxWarp value) const {
#if defined(__CUDA_ARCH__)
        const unsigned bits = __reduce_max_sync(0xffffffffu, __float_as_uint(value.v));
        if ((threadIdx.x & 31u) == 0) atomicMax(reinterpret_cast<unsigned*>(ptr), bits);
#else
        CUTLASS_UNUSED(ptr);
        CUTLASS_NOT_IMPLEMENTED();
#endif
        return value;
    }
};

}  // namespace cutlass

namespace {

// The M-major stride (1, ldt, batch stride) of the transposed copy (header comment).
using Fp8StrideT = cute::Stride<cute::_1, int64_t, int64_t>;

// The node that stores the transposed codes (header comment): CUTLASS's aux store with the M-major stride, the
// shared-memory swizzle atom and register -> shared memory copy CUTLASS's builder picks for that stride and element,
// StagesD buffers, 16-byte TMA alignment.
template <int StagesD, class EpilogueTile, class Element>
using Fp8StoreT = cutlass::epilogue::fusion::Sm90AuxStore<
    StagesD, EpilogueTile, Element, cutlass::FloatRoundStyle::round_to_nearest, Fp8StrideT,
    decltype(cutlass::epilogue::collective::detail::sm90_get_epilogue_smem_swizzle_layout_atom<Fp8StrideT, Element, EpilogueTile>()),
    decltype(cutlass::epilogue::collective::detail::sm90_get_smem_store_op_for_accumulator<Fp8StrideT, Element, EpilogueTile>()),
    128 / cute::sizeof_bits_v<Element>>;

// ------------------------------------------------------------------------------------------------
// Fp8ColSums (header comment): per-tile column sums of the visited values.

// One butterfly step of Fp8ColSums: v[0 .. S) and their columns c[] -> v[0 .. S/2), the half this lane keeps (upper:
// v[S/2 ..), else v[0 .. S/2)) plus the same half of the partner lane (lane ^ mask), which keeps the other half.
// Every lane of the warp calls it (full-mask shuffles).
template <int S>
CUTLASS_DEVICE void fp8_colsum_halve(float* v, int* c, int mask, bool upper) {
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < S / 2; ++i) {
        const float lo = v[i], hi = v[i + S / 2];
        const float got = __shfl_xor_sync(0xffffffffu, upper ? lo : hi, mask);
        v[i] = (upper ? hi : lo) + got;
        c[i] = upper ? c[i + S / 2] : c[i];
    }
}

template <class CtaTileShapeMNK, class EpilogueTile>
struct Fp8ColSums {
    static constexpr int kTileM = cute::size<0>(CtaTileShapeMNK{});
    static constexpr int kTileN = cute::size<1>(CtaTileShapeMNK{});
    static constexpr int kEpiN = cute::size<1>(EpilogueTile{});
    static constexpr int kSubtiles = kTileN / kEpiN;     // subtiles per tile (the epilogue tile spans the tile in M)
    static constexpr int kWarps = kTileM / 16;           // wgmma: a warp's accumulators cover 16 rows of the tile
    static constexpr int kSlots = kEpiN / 4;             // columns a thread holds per subtile: each column is held by
                                                         // 8 lanes in each of the kWarps warps, 2 rows each
    static constexpr int kPerLane = kSlots / 8;          // warp sums a lane keeps per subtile after the butterfly
    static_assert(cute::size<0>(EpilogueTile{}) == kTileM, "Fp8ColSums: the epilogue tile must span the CTA tile in M");
    static_assert(kTileN % kEpiN == 0 && kEpiN % 32 == 0, "Fp8ColSums: subtiles of a multiple of 32 columns");

    struct SharedStorage {};
    struct Arguments {
        float* ptr = nullptr;    // (ceil(M / CTA_M), N) fp32 row-major, or NULL (no column sums)
    };
    struct Params {
        float* ptr = nullptr;
        int64_t ld = 0;          // = N
    };

    template <class ProblemShape>
    static constexpr Params to_underlying_arguments(ProblemShape const& problem_shape, Arguments const& args, void*) {
        auto mnkl = cute::append<4>(problem_shape, 1);
        return Params{args.ptr, (int64_t)cute::get<1>(mnkl)};
    }
    template <class ProblemShape>
    static bool can_implement(ProblemShape const&, Arguments const&) {
        return true;
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

    CUTLASS_HOST_DEVICE Fp8ColSums() {}
    CUTLASS_HOST_DEVICE Fp8ColSums(Params const& params, SharedStorage const&) : params(params) {}

    Params params;

    template <class... Args>
    CUTLASS_DEVICE auto get_producer_load_callbacks(cutlass::epilogue::fusion::detail::ProducerLoadArgs<Args...> const&) {
        return cutlass::epilogue::fusion::detail::EmptyProducerLoadCallbacks{};
    }

    // RegTensor: (CPY, CPY_M, CPY_N) fp32 registers of one subtile, stride 0 along the rows (one register per column the
    // thread holds); CoordTensor: (CPY, CPY_M, CPY_N, EPI_M, EPI_N) CTA-relative (row, column) of every value the thread
    // visits; Residue: (rows, columns) of the problem from the tile's origin.
    template <class RegTensor, class CoordTensor, class Residue>
    struct ConsumerStoreCallbacks : cutlass::epilogue::fusion::detail::EmptyConsumerStoreCallbacks {
        RegTensor rSum;
        CoordTensor tCc;
        Residue residue;
        Params const& params;
        int tile_m, tile_n, thread_idx;
        float held[kSubtiles * kPerLane];  // this lane's warp sums, kPerLane per subtile
        int held_col[kPerLane];            // their columns within a subtile (the same in every subtile)

        CUTLASS_DEVICE ConsumerStoreCallbacks(RegTensor r, CoordTensor c, Residue res, Params const& p, int m, int n, int t)
            : rSum(r), tCc(c), residue(res), params(p), tile_m(m), tile_n(n), thread_idx(t) {}

        CUTLASS_DEVICE void begin_loop(int, int) { cute::fill(rSum, 0.0f); }

        template <typename ElementAccumulator, typename ElementInput, int FragmentSize>
        CUTLASS_DEVICE auto visit(cutlass::Array<ElementAccumulator, FragmentSize> const&, int epi_v, int epi_m, int epi_n,
                                  cutlass::Array<ElementInput, FragmentSize> const& frg_input) {
            if (params.ptr == nullptr) return frg_input;
            auto tCc_mn = tCc(cute::_, cute::_, cute::_, epi_m, epi_n);
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < FragmentSize; ++i) {
                const int e = epi_v * FragmentSize + i;
                if (cute::elem_less(tCc_mn(e), residue)) rSum(e) += static_cast<float>(frg_input[i]);
            }
            return frg_input;
        }

        template <class STensor, class SyncFn, class VTensor>
        CUTLASS_DEVICE void reduce(STensor&& smem_buffer, SyncFn const& sync_fn, int epi_m, int epi_n, bool is_last_iteration, VTensor) {
            using namespace cute;
            if (params.ptr == nullptr) return;
            // 1-2: this subtile's warp sums (header comment), kPerLane per lane
            auto sums = filter(rSum);
            CUTE_STATIC_ASSERT_V(size(sums) == Int<kSlots>{}, "Fp8ColSums: unexpected accumulator fragment (wgmma layout)");
            auto slot_of = make_tensor_like<int>(rSum);  // the column (within the subtile) of each register of rSum
            auto tCc_0 = tCc(_, _, _, 0, 0);
            CUTLASS_PRAGMA_UNROLL
            for (int e = 0; e < size(rSum); ++e) slot_of(e) = get<1>(tCc_0(e));
            auto cols = filter(slot_of);
            float v[kSlots];
            int c[kSlots];
            CUTLASS_PRAGMA_UNROLL
            for (int k = 0; k < kSlots; ++k) {
                v[k] = sums(k);
                c[k] = cols(k);
            }
            const int lane = thread_idx & 31;
            fp8_colsum_halve<kSlots>(v, c, 16, (lane & 16) != 0);
            fp8_colsum_halve<kSlots / 2>(v, c, 8, (lane & 8) != 0);
            fp8_colsum_halve<kSlots / 4>(v, c, 4, (lane & 4) != 0);
            CUTLASS_PRAGMA_UNROLL
            for (int j = 0; j < kPerLane; ++j) {
                held[epi_n * kPerLane + j] = v[j];
                held_col[j] = c[j];
            }
            (void)epi_m;
            if (!is_last_iteration) return;
            // 3: the tile's column sums through shared memory, kCols columns per round
            if (get<0>(residue) <= 0) return;  // a CTA entirely below M (uniform: no thread syncs)
            using SmemT = typename cute::remove_cvref_t<STensor>::value_type;
            constexpr int kBufFloats = int(decltype(cosize(smem_buffer.layout()))::value * sizeof(SmemT) / sizeof(float));
            constexpr int kColsFit = kBufFloats / kWarps / kEpiN * kEpiN;
            constexpr int kCols = kColsFit < kTileN ? kColsFit : kTileN;
            static_assert(kCols >= kEpiN && kTileN % kCols == 0, "Fp8ColSums: the reduction buffer holds too few columns");
            constexpr int kSubPerRound = kCols / kEpiN;
            float* buf = reinterpret_cast<float*>(raw_pointer_cast(smem_buffer.data()));
            const int warp = thread_idx / 32;
            const int n_left = get<1>(residue);
            float* out = params.ptr + (int64_t)tile_m * params.ld + (int64_t)tile_n * kTileN;
            sync_fn();
            CUTLASS_PRAGMA_UNROLL
            for (int r = 0; r < kTileN / kCols; ++r) {
                CUTLASS_PRAGMA_UNROLL
                for (int s = 0; s < kSubPerRound; ++s)
                    CUTLASS_PRAGMA_UNROLL
                    for (int j = 0; j < kPerLane; ++j) buf[warp * kCols + s * kEpiN + held_col[j]] = held[(r * kSubPerRound + s) * kPerLane + j];
                sync_fn();
                for (int t = thread_idx; t < kCols; t += 32 * kWarps) {
                    float total = buf[t];
                    CUTLASS_PRAGMA_UNROLL
                    for (int w = 1; w < kWarps; ++w) total += buf[w * kCols + t];
                    if (r * kCols + t < n_left) out[r * kCols + t] = total;
                }
                sync_fn();
            }
        }
    };

    template <bool ReferenceSrc, class... Args>
    CUTLASS_DEVICE auto get_consumer_store_callbacks(cutlass::epilogue::fusion::detail::ConsumerStoreArgs<Args...> const& args) {
        using namespace cute;
        static_assert(decltype(size(args.tiled_copy))::value == 32 * kWarps, "Fp8ColSums: the cooperative epilogue's 2 warp groups");
        auto tile_mn = take<0, 2>(args.tile_shape_mnk);
        // a (CTA_M, CTA_N) layout whose value at (m, n) is n: partitioned like the epilogue's fragments, its stride-0 modes
        // are the rows, so make_tensor_like gives one register per column a thread holds
        auto gCol = make_tensor(make_gmem_ptr<float>(nullptr), make_layout(tile_mn, make_stride(_0{}, _1{})));
        auto tCgCol = cutlass::epilogue::fusion::detail::sm90_partition_for_epilogue<ReferenceSrc>(gCol, args.epi_tile, args.tiled_copy,
                                                                                                   args.thread_idx);
        auto rSum = make_tensor_like<float>(tCgCol(_, _, _, _0{}, _0{}));
        auto tCc = cutlass::epilogue::fusion::detail::sm90_partition_for_epilogue<ReferenceSrc>(make_identity_tensor(tile_mn), args.epi_tile,
                                                                                                args.tiled_copy, args.thread_idx);
        auto [m, n, k, l] = args.tile_coord_mnkl;
        return ConsumerStoreCallbacks<decltype(rSum), decltype(tCc), decltype(args.residue_cD)>(rSum, tCc, args.residue_cD, params, int(m),
                                                                                                 int(n), args.thread_idx);
    }
};

// Host side of one GEMM type (a GemmUniversalAdapter): Tag makes the statics one set per configuration. Every function
// returns NULL on success, else a static string with CUTLASS's status and the CUDA error.
template <class Gemm, class Tag>
struct CutlassRunner {
    static inline void* workspace = nullptr;
    static inline size_t workspace_bytes = 0;
    static inline char msg[256];

    static const char* can_implement(typename Gemm::Arguments const& args) {
        const cutlass::Status st = Gemm::can_implement(args);
        return st == cutlass::Status::kSuccess ? nullptr : cutlass::cutlassGetStatusString(st);
    }

    // Enqueues the GEMM on stream; the workspace (if the kernel needs one) is allocated once and grows as needed.
    static const char* run(typename Gemm::Arguments const& args, cudaStream_t stream) {
        cudaError_t ce;
        const size_t ws = Gemm::get_workspace_size(args);
        if (ws > workspace_bytes) {
            free_workspace();
            if ((ce = cudaMalloc(&workspace, ws)) != cudaSuccess) {
                workspace = nullptr;
                snprintf(msg, sizeof(msg), "workspace of %zu bytes: %s", ws, cudaGetErrorString(ce));
                return msg;
            }
            workspace_bytes = ws;
        }
        Gemm gemm;
        cutlass::Status st = gemm.initialize(args, workspace, stream);
        if (st != cutlass::Status::kSuccess) {
            snprintf(msg, sizeof(msg), "CUTLASS initialize: %s (CUDA: %s)", cutlass::cutlassGetStatusString(st),
                     cudaGetErrorString(cudaGetLastError()));
            return msg;
        }
        st = gemm.run(stream);
        ce = cudaGetLastError();
        if (st != cutlass::Status::kSuccess || ce != cudaSuccess) {
            snprintf(msg, sizeof(msg), "CUTLASS run: %s (CUDA: %s)", cutlass::cutlassGetStatusString(st), cudaGetErrorString(ce));
            return msg;
        }
        return nullptr;
    }

    static void free_workspace() {
        if (workspace) cudaFree(workspace);
        workspace = nullptr;
        workspace_bytes = 0;
    }
};

}  // namespace
