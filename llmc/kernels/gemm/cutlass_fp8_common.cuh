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
