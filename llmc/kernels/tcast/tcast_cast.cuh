// tcast_cast.cuh - the GPU virtual cast of a row-major BF16 tensor to any TensorCast data type:
// doc/TCAST.md section 4 (sparsity 4.1, groups 4.2, specials 4.3, scales and quantization 4a-4c,
// statistics 4.5) with the primitives of llmc/numerics/tcast_quant.h (TcastGroupAcc, tcast_group_scale,
// tcast_quantize, tcast_random_bits, tcast_sparse_key / tcast_sparse_beats), the single source of
// truth that the host reference tcast_cast_host composes too. The device result is exactly
// tcast_cast_host's on the same (BF16 -> float32) inputs, rounded to BF16 with round-to-nearest-even
// (NaN: the canonical 0x7FC0), and --cast-stats counts exactly tcast_cast_host's TcastStats.
// dev/cuda/tcast.cu checks both bit for bit and times the kernels.
//
// API (host; every launch is asynchronous on `stream`):
//
//   tcast_cast(y, x, rows, cols, dim, dt, seed, stats, ctx, stream)
//       y = cast(x) for the row-major (rows, cols) floatX tensor x; y == x (in place) or a
//       separate (rows, cols) buffer (out of place; x is not written then). dim 1 or -1: the
//       sparsity groups, tiles and channels run along a row (contiguous elements); dim 0 or -2:
//       along a column (stride cols) - doc section 2's dY, chosen by the trainer (section 5: the
//       channel dimension at the boundary sites, the reduction dimension of each GEMM operand).
//       Tile tX: X consecutive elements along dim; channel (t0): a whole row (dim 1) or a whole
//       column (dim 0); no tile: one scale for the tensor; unscaled: every element alone.
//       Stochastic rounding: element (r, c) draws tcast_random_bits(seed, r * cols + c), the flat
//       row-major index, whatever dim is (section 1.4 / 5.3).
//       stats: NULL, or device counters (tcast_stats.cuh) that this cast ADDS to: values,
//       saturated, flushed and the group scale histogram (section 4.5). With NULL the kernels are
//       instantiated without any counting code.
//       ctx: scratch of the per-tensor and channel scales (see below); may be NULL for tile-scaled
//       and unscaled types.
//       Errors (message on stderr, exit(EXIT_FAILURE)): shape or dim unsuitable for dt (see
//       tcast_cast_shape_ok), ctx missing or too small for a channel / per-tensor type.
//
//   tcast_cast_shape_ok(dt, rows, cols, dim, err, n)
//       0 if the shape suits the type (rows, cols >= 1; dim in -2..1; the scale spec's explicit
//       dY, if any, names the same dimension; the tile X and the sparsity N divide the size along
//       dim), else -1 with a message in err - the same checks and words as tcast_cast_host.
//
//   tcast_cast_context_init(ctx, max_rows, max_cols) / tcast_cast_context_free(ctx)
//       Device scratch for casts of tensors up to max_rows x max_cols: capacity =
//       max(max_rows, max_cols) groups, each a TcastGroupAcc (16 bytes, the integer max / min
//       accumulation) and a TcastGroupScale (24 bytes): 40 * capacity bytes (ctx->bytes), e.g.
//       2.6 MB for 65536 rows. A channel-scaled cast along dim 1 needs rows <= capacity, along dim
//       0 cols <= capacity; a per-tensor cast needs 1. Casts sharing a context must be ordered
//       (one stream): the scratch is reused by every call.
//
// Kernel design (doc section 4 step by step; all reductions are integer max / min / or on float32
// bit patterns, so every result is deterministic and independent of the launch geometry):
//
//   4.1 sparsity: tcast_prune_kernel writes the pruned tensor to y first (one warp lane per element
//       of an M:N group, keys exchanged with shuffles); the cast then runs in place on y.
//   4.2-4.4, "row" path (tcast_rows_kernel; dim 1 tiles; per-tensor and unscaled types along either
//       dim, which are element-wise once the scale is known; channel scales along dim 1): every
//       thread owns 4 packets of 8 BF16 (16-byte loads / stores) at warp stride, so a warp moves
//       1024 contiguous elements per step. A tile of X elements is X / 8 consecutive lanes (X 8..256:
//       shuffle-xor merges of the group accumulation), X / 256 of a lane's packets (X 512, 1024), or a
//       part of one packet (X 2, 4). Every lane derives the group scale it needs itself.
//   4.2-4.4, "column" path (tcast_cols_kernel; dim 0 tiles and channel scales): a block owns a
//       strip of 256 columns (a lane: 8 adjacent columns, one 16-byte packet per row, so each warp
//       load is one contiguous 512-byte row segment) and 32-row chunks (a warp: 4 consecutive rows).
//       Tiles of 2 or 4 rows are inside a thread; tiles of 8..32 rows are merged across 2..8 warps
//       through shared memory, where one thread per column derives the group scales; tiles of 64..1024
//       rows accumulate over 2..32 chunks first and read them again (from L2) to cast. Tiles of exactly 32
//       rows from a stored tensor without statistics (the MX wgrad casts) take tcast_cols32_kernel instead:
//       a thread owns 2 columns x 32 rows, so a group needs no cross-warp step (the same bits). A dY's casts
//       along both dimensions with its column sums: tcast_cast_dual (tcast_dual32_kernel), at the end of the file.
//   Channel and per-tensor scales need the whole slice first: a reduction pass (tcast_reduce_*)
//       fills the TcastGroupScale of each group in ctx, which the cast pass reads.
//   Element casts: three exact implementations, chosen per data type by tcast_cast_path:
//     - general (TcastQGeneral): tcast_quantize itself (out of line), for every type (float-scaled
//       ints, uints with zero points, float32 elements, ...);
//     - exponent path (TcastQExp): exponent-scaled (or unscaled) float and int data with at most 22
//       mantissa bits, i.e. the MX / BFP types, every round mode, and the statistics of all these:
//       section 1.3's rounding done directly on x's float32 bit pattern with a per-group window
//       (tcast_exp_param, tcast_exp_elem; ~25 integer operations, the four round modes branch-free);
//     - round-to-nearest-even path (TcastQRne): the same types with @even and no statistics, the
//       common case: y = x * 2^-s, the float32 "magic add" (y + C) - C with C = 1.5 * 2^23 * q, whose
//       RNE rounds y to F's quantum q with ties to even, a clamp at max_F, times 2^s (tcast_rne_elem:
//       3 float32 + ~7 integer operations); for exponent-scaled e4m3fn / e5m2 elements (mxfp8e4, mxfp8e5)
//       the rounding of whole packets is the hardware FP8 conversion instead (tcast_fp8x2_round,
//       tcast_fp8_hw.cuh: two elements per cvt, ~4 instructions per element with the scaling; chosen once
//       per launch and packet, tcast_cast_run), with the same bits.
//     Both fast paths are exact only inside conditions stated at their functions; whatever lies
//     outside (zeros or float32 subnormals near the window's edge, NaN groups, Inf in unscaled casts,
//     groups near the ends of the float32 range) takes tcast_quantize out of line.
//     tcast_exp_elem and tcast_rne_elem are HOST_DEVICE (with the device's flush-to-zero emulated on
//     the host), so that host tests can compare them with tcast_quantize exhaustively.
//   Statistics (instantiation with STATS = true): per-thread counts, one warp reduction and three
//       64-bit atomics per warp; scale histogram bins in shared memory per block, flushed once.
//
// Requirements of the vector paths (else a scalar fallback, same results, slower): cols % 8 == 0,
// x and y 16-byte aligned. The trainer's tensors always qualify.
//
// Expected throughput on an H100 (memory bound; dev/cuda/tcast.cu prints the measurement next to the
// device copy rate): the @even MX / BFP types (mxfp8e4, mxfp8e5, mxfp6*, mxfp4e2, mxint8, bfp16)
// >= 80% of the copy rate along dim 1 and >= 70% along dim 0; other round modes and the statistics
// instantiation somewhat less (integer rounding; @stochastic also hashes 64-bit random bits per
// element); per-tensor and channel types read the tensor twice (<= 67%); float-scaled and uint types
// are bound by tcast_quantize's float32 divisions.
//
// Files: this one holds the API (context, shape checks, path choice, launcher); the pieces it includes are
// tcast_cast_elem.cuh (TcastKernelArgs, the exponent and RNE fast paths; it includes tcast_fp8_hw.cuh, the
// hardware FP8 rounding primitive), tcast_cast_device.cuh (launch
// geometry, device helpers, the element quantizers; the BF16-only check), tcast_cast_kernels.cuh (row,
// column and scalar cast kernels) and tcast_cast_prepass.cuh (scale reductions, M:N pruning).
#pragma once

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <cuda_fp8.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/tcast/tcast_stats.cuh"
#include "llmc/numerics/tcast.h"
#include "llmc/kernels/tcast/tcast_cast_elem.cuh"     // TcastKernelArgs, the exponent and RNE element fast paths
#include "llmc/kernels/tcast/tcast_cast_device.cuh"   // launch geometry, device helpers, element quantizers (BF16 only)
#include "llmc/kernels/tcast/tcast_cast_kernels.cuh"  // row, column and scalar cast kernels
#include "llmc/kernels/tcast/tcast_cols32.cuh"        // the 32-row column kernel (and a dY's casts along both dims)
#include "llmc/kernels/tcast/tcast_cast_prepass.cuh"  // scale reductions and M:N pruning

// ------------------------------------------------------------------------------------------------
// Host: scratch of the channel / per-tensor reductions, shape checks, path choice, launcher

typedef struct {
    TcastGroupAcc* acc;        // device, `capacity` group accumulations
    TcastGroupScale* scales;   // device, `capacity` group scales
    int capacity;              // max(max_rows, max_cols): groups one cast may need
    size_t bytes;              // device bytes held (40 * capacity)
} TcastCastContext;

static inline void tcast_cast_context_init(TcastCastContext* ctx, int max_rows, int max_cols) {
    memset(ctx, 0, sizeof(*ctx));
    ctx->capacity = max_rows > max_cols ? max_rows : max_cols;
    if (ctx->capacity < 1) ctx->capacity = 1;
    cudaCheck(cudaMalloc(&ctx->acc, (size_t)ctx->capacity * sizeof(TcastGroupAcc)));
    cudaCheck(cudaMalloc(&ctx->scales, (size_t)ctx->capacity * sizeof(TcastGroupScale)));
    ctx->bytes = (size_t)ctx->capacity * (sizeof(TcastGroupAcc) + sizeof(TcastGroupScale));
}

static inline void tcast_cast_context_free(TcastCastContext* ctx) {
    if (ctx->acc) cudaCheck(cudaFree(ctx->acc));
    if (ctx->scales) cudaCheck(cudaFree(ctx->scales));
    memset(ctx, 0, sizeof(*ctx));
}

// 0 if a (rows, cols) tensor cast along dim suits dt, else -1 with a message in err (n bytes; may
// be NULL): the checks of tcast_cast_host, in its words.
static inline int tcast_cast_shape_ok(const TcastDataType& dt, int rows, int cols, int dim, char* err, size_t n) {
    if (rows < 1 || cols < 1) return tcast_fail_(err, n, "%s: bad shape %d x %d", dt.name, rows, cols);
    if (dim < -2 || dim > 1) return tcast_fail_(err, n, "%s: dim %d is not -1, 1 (rows) or 0, -2 (columns)", dt.name, dim);
    const bool along_rows = dim == -1 || dim == 1;
    if (dt.has_scale && dt.scale.dim_given && along_rows != (dt.scale.dim == -1 || dt.scale.dim == 1))
        return tcast_fail_(err, n, "%s: the scale spec's d%d conflicts with the cast dimension %d", dt.name, dt.scale.dim, dim);
    const int len = along_rows ? cols : rows;
    const int tile = dt.has_scale ? dt.scale.tile : -1;
    if (tile > 0 && len % tile != 0)
        return tcast_fail_(err, n, "%s: tile %d does not divide the size %d along dim %d", dt.name, tile, len, dim);
    if (dt.sparse_n > 0 && len % dt.sparse_n != 0)
        return tcast_fail_(err, n, "%s: sparsity group N=%d does not divide the size %d along dim %d", dt.name, dt.sparse_n, len, dim);
    if (dt.sparse_n > TCAST_SPARSE_N_MAX || (dt.sparse_n > 0 && (dt.sparse_m < 1 || dt.sparse_m >= dt.sparse_n)))
        return tcast_fail_(err, n, "%s: sparsity %d:%d needs 1 <= M < N <= %d", dt.name, dt.sparse_m, dt.sparse_n, TCAST_SPARSE_N_MAX);
    return 0;
}

static inline void tcast_cast_die_(const char* msg) {
    fprintf(stderr, "error: tcast_cast: %s\n", msg);
    exit(EXIT_FAILURE);
}

// Which element quantizer a data type takes (see the top of the file).
typedef enum { TCAST_PATH_GENERAL = 0, TCAST_PATH_EXP = 1, TCAST_PATH_RNE = 2 } TcastPath;

static inline TcastPath tcast_cast_path(const TcastDataType& dt, bool with_stats) {
    const TcastKernelArgs k = tcast_kernel_args(dt, 0);
    if (!k.fast) return TCAST_PATH_GENERAL;
    return k.rne && !with_stats ? TCAST_PATH_RNE : TCAST_PATH_EXP;
}

static inline const char* tcast_cast_path_name(TcastPath p) {
    static const char* const names[] = {"general", "exp", "rne"};
    return (unsigned)p < 3u ? names[p] : "?";
}

// Calls f(Q(), std::integral_constant<bool, STATS>()) for the path's quantizer.
template <class F>
static inline void tcast_dispatch_(TcastPath path, bool stats, F&& f) {
    if (path == TCAST_PATH_GENERAL) {
        if (stats) f(TcastQGeneral(), std::true_type());
        else f(TcastQGeneral(), std::false_type());
    } else if (stats) {
        f(TcastQExp(), std::true_type());  // the statistics count through the exponent path
    } else if (path == TCAST_PATH_EXP) {
        f(TcastQExp(), std::false_type());
    } else {
        f(TcastQRne(), std::false_type());
    }
}

static inline int tcast_sm_count_(void) {
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        if (sms < 1) sms = 1;
    }
    return sms;
}

// Blocks for `work` items of `per_block` each, at most 64 per SM (the kernels loop grid-stride beyond).
static inline unsigned tcast_blocks_(size_t work, size_t per_block) {
    const size_t cap = (size_t)tcast_sm_count_() * 64;
    size_t b = (work + per_block - 1) / per_block;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

// tcast_cols32_kernel where it applies (a stored source, a quantizer of the exponent family; the caller checked the
// tile of 32 rows along dim 0 and no statistics): launches it and returns true; else false (tcast_cols_kernel's case).
template <class Q, class Src>
static inline bool tcast_cols32_launch_(floatX*, const Src&, int, int, const TcastKernelArgs&, cudaStream_t) { return false; }
template <class Q>
static inline bool tcast_cols32_launch_(floatX* y, const TcastSrcStored& src, int rows, int cols, const TcastKernelArgs& k,
                                        cudaStream_t stream) {
    if constexpr (std::is_base_of<TcastQExp, Q>::value) {
        const dim3 grid((unsigned)ceil_div(cols, 64 * TCAST_WARPS), (unsigned)tcast_cols32_chunks(rows, false));
        const TcastCols32Out o = {y, NULL, NULL};
        tcast_cols32_kernel<Q, TCAST_C32_COL><<<grid, TCAST_THREADS, 0, stream>>>(src.x, o, rows, cols, tcast_cols32_upc(rows, false), k);
        return true;
    }
    return false;
}

// The vector row / column kernels on source x (tcast_source.cuh): cols % 8 == 0, y and x's pointers
// 16-byte aligned; gs: the channel / per-tensor scales of the reduction pass (or NULL).
template <class Src>
static inline void tcast_launch_vec_(floatX* y, const Src& src, int rows, int cols, bool along_rows, int tile, const TcastGroupScale* gs,
                                     const TcastDataType& dt, const TcastKernelArgs& k, TcastDeviceStats* stats, cudaStream_t stream) {
    const size_t n = (size_t)rows * (size_t)cols;
    tcast_dispatch_(tcast_cast_path(dt, stats != NULL), stats != NULL, [&](auto q, auto st) {
        using Q = decltype(q);
        constexpr bool S = decltype(st)::value;
        if constexpr (!S)  // MX along dim 0 from a stored tensor: tcast_cols32_kernel
            if (tile == TCAST_CHUNK_ROWS && !along_rows && tcast_cols32_launch_<Q>(y, src, rows, cols, k, stream)) return;
        if (tile >= 0 && !along_rows) {
            // column path: tiles along dim 0, or channel scales per column
            const int U = tile > 0 ? (tile > TCAST_CHUNK_ROWS ? tile : TCAST_CHUNK_ROWS) : TCAST_CHUNK_ROWS;
            const int nunits = ceil_div(rows, U);
            const dim3 grid((unsigned)ceil_div(cols, TCAST_STRIP_COLS), (unsigned)(nunits < 65535 ? nunits : 65535));
            if (tile > 0) tcast_cols_kernel<Q, S, true><<<grid, TCAST_THREADS, 0, stream>>>(y, src, rows, cols, tile, gs, k, stats);
            else tcast_cols_kernel<Q, S, false><<<grid, TCAST_THREADS, 0, stream>>>(y, src, rows, cols, tile, gs, k, stats);
        } else {
            // row path: tiles along dim 1, channel scales per row, per-tensor and unscaled (either dim)
            const size_t npk = n / 8;
            const unsigned blocks = tcast_blocks_((npk + TCAST_ROW_PACKETS * 32 - 1) / (TCAST_ROW_PACKETS * 32), TCAST_WARPS);
            if (tile > 0) tcast_rows_kernel<Q, S, true><<<blocks, TCAST_THREADS, 0, stream>>>(y, src, npk, cols, tile, gs, 0, k, stats);
            else tcast_rows_kernel<Q, S, false><<<blocks, TCAST_THREADS, 0, stream>>>(y, src, npk, cols, tile, gs, tile == 0, k, stats);
        }
    });
    cudaCheckLaunch();
}

// y = cast(x), doc/TCAST.md section 4 (see the top of the file).
static inline void tcast_cast(floatX* y, const floatX* x, int rows, int cols, int dim, const TcastDataType& dt, uint64_t seed,
                              TcastDeviceStats* stats, TcastCastContext* ctx, cudaStream_t stream) {
    char err[256];
    if (tcast_cast_shape_ok(dt, rows, cols, dim, err, sizeof(err)) != 0) tcast_cast_die_(err);
    const bool along_rows = dim == 1 || dim == -1;
    const size_t n = (size_t)rows * (size_t)cols;
    const int tile = dt.has_scale ? dt.scale.tile : -1;  // > 0 tile, 0 channel, -1 per tensor (or unscaled)
    const int groups = tile == 0 ? (along_rows ? rows : cols) : (tile < 0 && dt.has_scale ? 1 : 0);
    if (groups > 0 && (ctx == NULL || ctx->capacity < groups)) {
        snprintf(err, sizeof(err), "%s: a %s scale of a %d x %d tensor needs a TcastCastContext of capacity %d (have %d)", dt.name,
                 tile == 0 ? "channel" : "per-tensor", rows, cols, groups, ctx ? ctx->capacity : 0);
        tcast_cast_die_(err);
    }
    // 4.1: prune into y, then cast y in place
    const floatX* src = x;
    if (dt.sparse_n > 0) {
        const size_t tasks = (n / dt.sparse_n + (32 / dt.sparse_n) - 1) / (32 / dt.sparse_n);
        tcast_prune_kernel<<<tcast_blocks_(tasks, TCAST_WARPS), TCAST_THREADS, 0, stream>>>(y, x, rows, cols, along_rows, dt.sparse_m,
                                                                                          dt.sparse_n);
        cudaCheckLaunch();
        src = y;
    }
    const TcastKernelArgs k = tcast_kernel_args(dt, seed);
    const bool vec = ((uintptr_t)src % 16 == 0) && ((uintptr_t)y % 16 == 0) && cols % 8 == 0;
    // channel and per-tensor scales: reduction pass into ctx->scales
    const TcastGroupScale* gs = NULL;
    if (groups > 0) {
        gs = ctx->scales;
        if (tile == 0 && along_rows) {
            const unsigned blocks = tcast_blocks_((size_t)rows, TCAST_WARPS);
            if (stats) tcast_reduce_rows_kernel<true><<<blocks, TCAST_THREADS, 0, stream>>>(ctx->scales, src, rows, cols, vec, dt, stats);
            else tcast_reduce_rows_kernel<false><<<blocks, TCAST_THREADS, 0, stream>>>(ctx->scales, src, rows, cols, vec, dt, stats);
        } else {
            cudaCheck(cudaMemsetAsync(ctx->acc, 0, (size_t)groups * sizeof(TcastGroupAcc), stream));  // = tcast_acc_init()
            if (tile == 0) {
                const int rpb = 256;
                const dim3 grid((unsigned)ceil_div(cols, TCAST_STRIP_COLS), (unsigned)ceil_div(rows, rpb));
                tcast_reduce_cols_kernel<<<grid, TCAST_THREADS, 0, stream>>>(ctx->acc, src, rows, cols, vec, rpb);
            } else {
                tcast_reduce_tensor_kernel<<<tcast_blocks_(n, 8 * TCAST_THREADS), TCAST_THREADS, 0, stream>>>(ctx->acc, src, n, vec);
            }
            cudaCheckLaunch();
            const unsigned blocks = tcast_blocks_((size_t)groups, TCAST_THREADS);
            if (stats) tcast_scales_kernel<true><<<blocks, TCAST_THREADS, 0, stream>>>(ctx->scales, ctx->acc, groups, dt, stats);
            else tcast_scales_kernel<false><<<blocks, TCAST_THREADS, 0, stream>>>(ctx->scales, ctx->acc, groups, dt, stats);
        }
        cudaCheckLaunch();
    }
    if (!vec) {
        const int gs_index = tile == 0 ? (along_rows ? 1 : 2) : 0;
        const size_t work = tile > 0 ? n / tile : n;
        const unsigned blocks = tcast_blocks_(work, TCAST_THREADS);
        if (stats) tcast_scalar_kernel<true><<<blocks, TCAST_THREADS, 0, stream>>>(y, src, rows, cols, along_rows, tile, gs, gs_index, k, stats);
        else tcast_scalar_kernel<false><<<blocks, TCAST_THREADS, 0, stream>>>(y, src, rows, cols, along_rows, tile, gs, gs_index, k, stats);
        cudaCheckLaunch();
        return;
    }
    tcast_launch_vec_(y, TcastSrcStored{src}, rows, cols, along_rows, tile, gs, dt, k, stats, stream);
}

// Whether tcast_cast_from casts the source's values as they are produced (one kernel) rather than
// after a producer-only pass: tile-scaled or unscaled types without sparsity (channel, per-tensor and
// M:N need the whole slice / group before the first element is cast), vector shapes, and for a source
// that overwrites its input (kInPlace) only the paths that read each element once (rows; columns with
// tiles of at most 32 rows).
template <class Src>
static inline bool tcast_cast_fusable(const Src& src, const floatX* y, int cols, int dim, const TcastDataType& dt) {
    const bool along_rows = dim == 1 || dim == -1;
    const int tile = dt.has_scale ? dt.scale.tile : -1;
    if (dt.sparse_n > 0 || (dt.has_scale && tile <= 0)) return false;
    if (!src.vec_ok() || ((uintptr_t)y % 16) != 0 || cols % 8 != 0) return false;
    return !Src::kInPlace || along_rows || tile <= TCAST_CHUNK_ROWS;
}

// y = cast(the values of source src) for a row-major (rows, cols) tensor (tcast_source.cuh): the same
// cast, bits and statistics as running the producer, then tcast_cast(y, src.stored(), ...) (doc/TCAST.md
// 5.3: element (r, c) draws its random bits at index r * cols + c). Where tcast_cast_fusable holds, one
// kernel produces and casts (the producer's own stores, if any, happen on the way); else the producer
// runs alone (tcast_source_run_kernel) and the stored result is cast. y must not alias the source's
// inputs or its store. Errors (exit): those of tcast_cast; a source that is not vector-readable; a
// fallback for a source that stores nothing (src.stored() == NULL).
template <class Src>
static inline void tcast_cast_from(floatX* y, const Src& src, int rows, int cols, int dim, const TcastDataType& dt, uint64_t seed,
                                   TcastDeviceStats* stats, TcastCastContext* ctx, cudaStream_t stream) {
    char err[256];
    if (tcast_cast_shape_ok(dt, rows, cols, dim, err, sizeof(err)) != 0) tcast_cast_die_(err);
    if (!src.vec_ok() || cols % 8 != 0) {
        snprintf(err, sizeof(err), "%s: a producer source needs cols %% 8 == 0 and 16-byte aligned pointers (cols %d)", dt.name, cols);
        tcast_cast_die_(err);
    }
    if (tcast_cast_fusable(src, y, cols, dim, dt)) {
        const bool along_rows = dim == 1 || dim == -1;
        const int tile = dt.has_scale ? dt.scale.tile : -1;
        tcast_launch_vec_(y, src, rows, cols, along_rows, tile, NULL, dt, tcast_kernel_args(dt, seed), stats, stream);
        return;
    }
    if (src.stored() == NULL) {
        snprintf(err, sizeof(err), "%s: this cast cannot be fused into its producer, which stores nothing", dt.name);
        tcast_cast_die_(err);
    }
    const size_t npk = (size_t)rows * (size_t)cols / 8;
    tcast_source_run_kernel<Src><<<tcast_blocks_(npk, 256), 256, 0, stream>>>(src, npk);
    cudaCheckLaunch();
    tcast_cast(y, src.stored(), rows, cols, dim, dt, seed, stats, ctx, stream);
}

// ------------------------------------------------------------------------------------------------
// A linear layer's dY, everything its backward reads from it in one pass (doc/TCAST.md 5.5; tcast_cols32.cuh):
//
//   tcast_cast_dual_ok(dt, rows, cols)
//       Whether tcast_cast_dual takes dt for a (rows, cols) tensor: tiles of 32 along dim 1 and along dim 0 (a tile-32
//       scale whose spec names no dimension: mxfp8e4, mxfp6e2, mxint8, ...), the exponent or RNE quantizer, no
//       sparsity; rows and cols multiples of 32. Statistics steps never take it (the caller's test: it counts nothing).
//   tcast_cast_dual(y_row, y_col, partial, src, rows, cols, dt, seed_row, seed_col, stream)
//       From one read of the tile source src (TcastTileStored, or the GELU' product: tcast_producers.cuh), the same bits as
//       tcast_cast(y_row, x, rows, cols, 1, dt, seed_row, NULL, ...), tcast_cast(y_col, x, rows, cols, 0, dt, seed_col,
//       NULL, ...) and tcast_colsum(partial, x, rows, cols) on the values x the source gives. y_row, y_col (rows, cols)
//       and partial (tcast_colsum_chunks(rows), cols) fp32 must not alias the source's inputs or each other.
//       Errors (exit): a type or shape tcast_cast_dual_ok refuses; misaligned inputs or outputs (the source's and y_row 16
//       bytes, y_col 4, partial 8).
//   tcast_colsum(partial, x, rows, cols, stream), tcast_colsum_chunks(rows)
//       partial[g][c] = the fp32 sum of column c over chunk g's rows (tcast_cols32_upc(rows, true) units of 32 rows,
//       chunk g from row 128 g up to 8.4M rows) in row order, added by gemm_dbias_finish (gemm_kernels.cuh) in
//       chunk order: the bias gradient in the order tcast_cast_dual makes it, for the layers whose dY is not cast there
//       (so both give the same bits). rows % 32 == 0, cols even, x 4-byte aligned.

static inline int tcast_colsum_chunks(int rows) { return tcast_cols32_chunks(rows, true); }

static inline bool tcast_cast_dual_ok(const TcastDataType& dt, int rows, int cols) {
    const TcastPath path = tcast_cast_path(dt, false);
    return path != TCAST_PATH_GENERAL && dt.has_scale && dt.scale.tile == TCAST_CHUNK_ROWS && !dt.scale.dim_given && dt.sparse_n == 0 &&
           rows > 0 && cols > 0 && rows % TCAST_CHUNK_ROWS == 0 && cols % 32 == 0;
}

template <class Q, class Src>
static inline void tcast_dual32_run_(const Src& src, const TcastCols32Out& o, int rows, int cols, const TcastKernelArgs& kc,
                                     const TcastKernelArgs& kr, cudaStream_t stream) {
    constexpr size_t smem = tcast_dual32_smem<Src>();
    static bool attr_set = false;  // (per instantiation: more than 48 KB of dynamic shared memory needs the opt-in)
    if (!attr_set) {
        cudaCheck(cudaFuncSetAttribute(tcast_dual32_kernel<Q, Src>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set = true;
    }
    const dim3 grid((unsigned)ceil_div(cols, 64 * TCAST_DUAL_WARPS), (unsigned)tcast_colsum_chunks(rows));
    tcast_dual32_kernel<Q, Src><<<grid, TCAST_DUAL_WARPS * 32, smem, stream>>>(src, o, rows, cols, tcast_cols32_upc(rows, true), kc, kr);
    cudaCheckLaunch();
}

template <class Src>
static inline void tcast_cast_dual(floatX* y_row, floatX* y_col, float* partial, const Src& src, int rows, int cols,
                                   const TcastDataType& dt, uint64_t seed_row, uint64_t seed_col, cudaStream_t stream) {
    if (!tcast_cast_dual_ok(dt, rows, cols)) {
        char err[256];
        snprintf(err, sizeof(err), "%s: tcast_cast_dual needs tiles of 32 along both dims, the exponent or RNE quantizer and a %d x %d "
                 "shape of multiples of 32", dt.name, rows, cols);
        tcast_cast_die_(err);
    }
    if (!src.aligned() || (uintptr_t)y_row % 16 != 0 || (uintptr_t)y_col % 4 != 0 || (uintptr_t)partial % 8 != 0)
        tcast_cast_die_("tcast_cast_dual: misaligned source or output");
    const TcastCols32Out o = {y_col, y_row, partial};
    const TcastKernelArgs kc = tcast_kernel_args(dt, seed_col), kr = tcast_kernel_args(dt, seed_row);
    if (tcast_cast_path(dt, false) == TCAST_PATH_RNE) tcast_dual32_run_<TcastQRne>(src, o, rows, cols, kc, kr, stream);
    else tcast_dual32_run_<TcastQExp>(src, o, rows, cols, kc, kr, stream);
}

static inline void tcast_colsum(float* partial, const floatX* x, int rows, int cols, cudaStream_t stream) {
    if (rows % TCAST_CHUNK_ROWS != 0 || cols % 2 != 0 || (uintptr_t)x % 4 != 0 || (uintptr_t)partial % 8 != 0) {
        char err[160];
        snprintf(err, sizeof(err), "tcast_colsum: a %d x %d tensor (rows %% 32, cols %% 2 must be 0; 4-byte aligned)", rows, cols);
        tcast_cast_die_(err);
    }
    const TcastCols32Out o = {NULL, NULL, partial};
    const TcastKernelArgs k = {};  // (no cast)
    const dim3 grid((unsigned)ceil_div(cols, 64 * TCAST_WARPS), (unsigned)tcast_colsum_chunks(rows));
    tcast_cols32_kernel<TcastQExp, TCAST_C32_SUM><<<grid, TCAST_THREADS, 0, stream>>>(x, o, rows, cols, tcast_cols32_upc(rows, true), k);
    cudaCheckLaunch();
}
