// tcast_cols32.cuh - the TensorCast casts of a tensor in units of 32 rows x 64 columns, lane l of a warp owning columns
// 2l, 2l + 1 of its unit: the MX casts along N of the wgrad operands (doc/TCAST.md 5.2, 5.5), and for a linear layer's
// dY everything its backward needs from one read (issue 26, the --cast-gemm bar). Outputs:
//   COL  y_col = cast(x) along dim 0, tiles of 32 rows (the wgrad operand): a column's group lives in one thread;
//   ROW  y_row = cast(x) along dim 1, tiles of 32 columns (the dgrad operand): the unit in shared memory, lane l casts
//        row l's two tiles whole there, and the warp stores the rows as they came in;
//   SUM  partial[chunk][col] = the fp32 sum of the chunk's rows of column col in row order (the bias gradient's first
//        stage; gemm_dbias_finish adds the chunks), chunks of tcast_cols32_upc(rows, true) units.
// Two kernels:
//   tcast_cols32_kernel<Q, OUT>  COL and / or SUM from a stored tensor, each thread loading its 32 rows into registers
//                                (32 independent 4-byte loads, one 128-byte line per warp instruction, no shared memory,
//                                no barrier: 95-98% of the copy rate for COL, H200; tcast_cols_kernel, which merged each
//                                column's amax across 8 warps in shared memory, moved the wgrad casts at 2.28 TB/s);
//   tcast_dual32_kernel<Q, Src>  COL, ROW and SUM from a tile source: stored, or the GELU' product of two stored tensors
//                                (tcast_producers.cuh); each warp streams its units through two shared-memory stages
//                                (cp.async 16-byte copies, the next unit in flight while this one is cast: with the
//                                units in registers, the first version of this kernel reached only 45-53% of the copy
//                                rate at 2 CTAs an SM, the loads waiting behind each unit's casts); a producer's values
//                                are computed into the stage first, so that every source then takes the same path.
// The casts take the same group amax (an order-free max: TcastQExp, TcastQRne), group scales, element steps
// (tcast_cast_run) and flat indices (the random bits of @stochastic) as tcast_rows_kernel / tcast_cols_kernel, and the
// same BF16 packing: the same bits as tcast_cast along dim 0 and dim 1 (dev/cuda/tcast.cu, dev/cuda/tcast_dy.cu).
// Requirements (the launchers in tcast_cast.cuh check them): rows % 32 == 0; tcast_cols32_kernel: cols even, 4-byte
// aligned x and y_col (y_col may equal x: a thread reads its elements before it writes them); tcast_dual32_kernel: cols
// % 32 == 0, 16-byte aligned sources and y_row, outputs apart from the sources.
#pragma once

#include <stdint.h>
#include <type_traits>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/tcast/tcast_cast_device.cuh"
#include "llmc/kernels/attention/attention_ptx.cuh"  // attn_cp_async16, attn_cp_async_commit / wait, attn_smem_addr

// The outputs of the kernels and where they go.
enum { TCAST_C32_COL = 1, TCAST_C32_ROW = 2, TCAST_C32_SUM = 4 };
struct TcastCols32Out {
    floatX* y_col;   // COL: (rows, cols)
    floatX* y_row;   // ROW: (rows, cols)
    float* partial;  // SUM: (gridDim.y, cols) fp32, row-major
};

// Units of 32 rows per chunk (blockIdx.y): 4 with the column sums (128-row chunks: enough blocks for the grid, few
// partial rows for the finish to add, and a run of units for the dual kernel's pipeline), else 1; more where the
// grid's y would pass 65535.
static inline int tcast_cols32_upc(int rows, bool sum) {
    const int nunits = rows / TCAST_CHUNK_ROWS, min_upc = sum ? 4 : 1;
    const int upc = (nunits + 65534) / 65535;
    return upc > min_upc ? upc : min_upc;
}

// Chunks (the grid's y) of a (rows, ...) launch: units of 32 rows, tcast_cols32_upc(rows, sum) a chunk.
static inline int tcast_cols32_chunks(int rows, bool sum) {
    return ceil_div(rows / TCAST_CHUNK_ROWS, tcast_cols32_upc(rows, sum));
}

// SUM: sum[j] += the 32 rows of column c + j (v[i]: row i's two BF16, column c in the low half), in row order.
__device__ __forceinline__ void tcast_cols32_sum(float (&sum)[2], const uint32_t (&v)[TCAST_CHUNK_ROWS]) {
    #pragma unroll
    for (int i = 0; i < TCAST_CHUNK_ROWS; i++) {
        sum[0] += __uint_as_float(v[i] << 16);
        sum[1] += __uint_as_float(v[i] & 0xFFFF0000u);
    }
}

// COL: casts columns c, c + 1 of the unit at row r0 (v as above) along dim 0 and stores them into y (live: the
// columns lie inside the tensor). 8 rows at a time (fewer live registers), each column's 4 pairs a run of its group.
template <class Q>
__device__ __forceinline__ void tcast_cols32_col(const TcastKernelArgs& k, const uint32_t (&v)[TCAST_CHUNK_ROWS], floatX* y, int r0,
                                                 int cols, int c, bool live) {
    constexpr int R = TCAST_CHUNK_ROWS;
    TcastCounts cnt = {0u, 0u, 0u};  // (no statistics: unused)
    typename Q::Acc acc[2] = {Q::init(), Q::init()};
    #pragma unroll
    for (int i = 0; i < R; i++) {
        Q::add(acc[0], v[i] << 16);
        Q::add(acc[1], v[i] & 0xFFFF0000u);
    }
    const typename Q::Param p[2] = {Q::param(k, Q::scale(k, acc[0])), Q::param(k, Q::scale(k, acc[1]))};
    #pragma unroll
    for (int h = 0; h < R; h += 8) {
        uint32_t e[2][8];  // the 8 rows of columns c and c + 1 as float32 bit patterns, cast in place
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            e[0][i] = v[h + i] << 16;
            e[1][i] = v[h + i] & 0xFFFF0000u;
        }
        #pragma unroll
        for (int j = 0; j < 2; j++) {
            const uint64_t i0 = (uint64_t)(r0 + h) * (uint64_t)cols + (uint64_t)(c + j);
            tcast_cast_run<Q, false, 4>(k, p[j], cnt, [&](int i) {
                const uint64_t ik = i0 + (uint64_t)(2 * i) * (uint64_t)cols;
                return TcastPairRef{e[j][2 * i], e[j][2 * i + 1], ik, ik + (uint64_t)cols, true, true};
            });
        }
        if (live) {
            #pragma unroll
            for (int i = 0; i < 8; i++) *reinterpret_cast<uint32_t*>(y + (size_t)(r0 + h + i) * cols + c) = tcast_pack2(e[0][i], e[1][i]);
        }
    }
}

// Lane l of warp w owns columns c, c + 1 (c = (TCAST_WARPS blockIdx.x + w) 64 + 2 l) of the units of chunk blockIdx.y
// (units [blockIdx.y upc, + upc) of 32 rows). OUT: COL and / or SUM.
template <class Q, int OUT>
__global__ void __launch_bounds__(TCAST_THREADS, Q::MIN_BLOCKS)
    tcast_cols32_kernel(const floatX* x, TcastCols32Out o, int rows, int cols, int upc, const __grid_constant__ TcastKernelArgs k) {
    static_assert(std::is_base_of<TcastQExp, Q>::value, "a max group accumulation (the order of the rows does not matter)");
    static_assert((OUT & TCAST_C32_ROW) == 0, "the row cast is tcast_dual32_kernel's");
    constexpr int R = TCAST_CHUNK_ROWS;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c = (blockIdx.x * TCAST_WARPS + w) * 64 + 2 * lane;
    if (c >= cols) return;
    const int u_end = min(rows / R, (int)(blockIdx.y + 1) * upc);
    float sum[2] = {0.0f, 0.0f};
    for (int u = blockIdx.y * upc; u < u_end; u++) {
        const int r0 = u * R;
        uint32_t v[R];
        #pragma unroll
        for (int i = 0; i < R; i++) v[i] = *reinterpret_cast<const uint32_t*>(x + (size_t)(r0 + i) * cols + c);
        if constexpr ((OUT & TCAST_C32_SUM) != 0) tcast_cols32_sum(sum, v);
        if constexpr ((OUT & TCAST_C32_COL) != 0) tcast_cols32_col<Q>(k, v, o.y_col, r0, cols, c, true);
    }
    if constexpr ((OUT & TCAST_C32_SUM) != 0)
        *reinterpret_cast<float2*>(o.partial + (size_t)blockIdx.y * cols + c) = make_float2(sum[0], sum[1]);
}

// ------------------------------------------------------------------------------------------------
// The dual kernel. A tile source Src has kTiles stored inputs (tile(t): a (rows, cols) row-major BF16 tensor) and
// `uint32_t pair(const uint32_t (&w)[kTiles]) const`: the two BF16 values (low half first) from the inputs' words at
// one position. TcastTileStored is a stored tensor itself.
struct TcastTileStored {
    const floatX* x;
    static constexpr int kTiles = 1;
    __device__ __forceinline__ const floatX* tile(int) const { return x; }
    __device__ __forceinline__ uint32_t pair(const uint32_t (&w)[1]) const { return w[0]; }
    bool aligned() const { return ((uintptr_t)x & 15) == 0; }
};

constexpr int TCAST_DUAL_WARPS = 4;  // a block: 4 warps, 256 columns
// Shared memory of a block: per warp, 2 stages of kTiles units of 32 rows x 32 words (4 KB each).
template <class Src>
constexpr size_t tcast_dual32_smem() { return (size_t)TCAST_DUAL_WARPS * 2 * Src::kTiles * TCAST_CHUNK_ROWS * 32 * sizeof(uint32_t); }

// Word index of column pair p (columns 2p, 2p + 1 of the unit) in row i of a stage: 16-byte chunks XOR-swizzled by the
// row (chunk q of row i at q ^ (i & 7)), so that the column-wise reads (a lane per column pair, a row at a time) and the
// row-wise ones (a lane per row, a chunk at a time) are both free of bank conflicts.
__device__ __forceinline__ int tcast_dual32_word(int i, int p) { return (((p >> 2) ^ (i & 7)) << 2) | (p & 3); }

// Lane l of warp w (warp of the block's TCAST_DUAL_WARPS) owns columns c0 + 2l, + 1 (c0 = (TCAST_DUAL_WARPS blockIdx.x
// + w) 64) of the units of chunk blockIdx.y, and row l of each unit for the row cast; kc / kr: the column / row cast's
// launch constants (their seeds differ).
template <class Q, class Src>
__global__ void __launch_bounds__(TCAST_DUAL_WARPS * 32, 4)
    tcast_dual32_kernel(const __grid_constant__ Src src, TcastCols32Out o, int rows, int cols, int upc,
                        const __grid_constant__ TcastKernelArgs kc, const __grid_constant__ TcastKernelArgs kr) {
    static_assert(std::is_base_of<TcastQExp, Q>::value, "a max group accumulation (the order of the rows does not matter)");
    constexpr int R = TCAST_CHUNK_ROWS, NT = Src::kTiles, UNIT = R * 32;  // words of one unit of one input
    extern __shared__ uint4 tcast_dual_smem[];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c0 = (blockIdx.x * TCAST_DUAL_WARPS + w) * 64, c = c0 + 2 * lane;
    if (c0 >= cols) return;  // (whole warps only: __syncwarp below needs every lane of a live warp)
    const bool live = c < cols;
    uint32_t* stage = reinterpret_cast<uint32_t*>(tcast_dual_smem) + (size_t)w * 2 * NT * UNIT;  // [2][NT][R][32]
    const int u_begin = blockIdx.y * upc, u_end = min(rows / R, u_begin + upc);
    // unit u's inputs into stage s: lane l copies 16-byte chunk l & 7 of rows (l >> 3) + 4 m (chunks past the tensor's
    // last column are left alone: only lanes and tiles that store nothing read them)
    auto issue = [&](int u, int s) {
        const int q = lane & 7;
        if (c0 + 8 * q < cols) {
            #pragma unroll
            for (int m = 0; m < 8; m++) {
                const int i = (lane >> 3) + 4 * m;
                #pragma unroll
                for (int t = 0; t < NT; t++)
                    attn_cp_async16(attn_smem_addr(stage + (s * NT + t) * UNIT + i * 32 + ((q ^ (i & 7)) << 2)),
                                    src.tile(t) + (size_t)(u * R + i) * cols + c0 + 8 * q, true);
            }
        }
        attn_cp_async_commit();
    };
    float sum[2] = {0.0f, 0.0f};
    if (u_begin < u_end) issue(u_begin, 0);
    for (int u = u_begin; u < u_end; u++) {
        const int s = (u - u_begin) & 1, r0 = u * R;
        if (u + 1 < u_end) {
            issue(u + 1, s ^ 1);
            attn_cp_async_wait<1>();
        } else {
            attn_cp_async_wait<0>();
        }
        __syncwarp();  // every lane's copies of unit u have landed
        uint32_t* in = stage + s * NT * UNIT;  // input 0 of the stage: the values from here on
        if constexpr (NT > 1) {  // the source's values into input 0, in place (a lane its column pair)
            #pragma unroll 8
            for (int i = 0; i < R; i++) {
                uint32_t wd[NT];
                #pragma unroll
                for (int t = 0; t < NT; t++) wd[t] = in[t * UNIT + i * 32 + tcast_dual32_word(i, lane)];
                in[i * 32 + tcast_dual32_word(i, lane)] = src.pair(wd);
            }
        }
        uint32_t v[R];  // row i's two values at columns c, c + 1
        #pragma unroll
        for (int i = 0; i < R; i++) v[i] = in[i * 32 + tcast_dual32_word(i, lane)];
        tcast_cols32_sum(sum, v);
        tcast_cols32_col<Q>(kc, v, o.y_col, r0, cols, c, live);
        __syncwarp();  // every lane has read its column pair (a producer's values are written) before rows are cast in place
        #pragma unroll
        for (int g = 0; g < 2; g++) {  // row r0 + lane, columns c0 + 32 g .. + 31: one tile, cast in place in the stage
            if (c0 + 32 * g >= cols) break;  // (uniform: the tensor ends at the warp's middle)
            uint32_t b[32];
            typename Q::Acc acc = Q::init();
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                uint32_t pk[8];
                tcast_unpack8(*reinterpret_cast<const uint4*>(in + lane * 32 + (((4 * g + j) ^ (lane & 7)) << 2)), pk);
                #pragma unroll
                for (int e = 0; e < 8; e++) {
                    b[8 * j + e] = pk[e];
                    Q::add(acc, pk[e]);
                }
            }
            const typename Q::Param p = Q::param(kr, Q::scale(kr, acc));
            const uint64_t i0 = (uint64_t)(r0 + lane) * (uint64_t)cols + (uint64_t)(c0 + 32 * g);
            TcastCounts cnt = {0u, 0u, 0u};  // (no statistics: unused)
            tcast_cast_run<Q, false, 16>(kr, p, cnt, [&](int i) {
                return TcastPairRef{b[2 * i], b[2 * i + 1], i0 + 2 * i, i0 + 2 * i + 1, true, true};
            });
            #pragma unroll
            for (int j = 0; j < 4; j++)
                *reinterpret_cast<uint4*>(in + lane * 32 + (((4 * g + j) ^ (lane & 7)) << 2)) =
                    make_uint4(tcast_pack2(b[8 * j], b[8 * j + 1]), tcast_pack2(b[8 * j + 2], b[8 * j + 3]),
                               tcast_pack2(b[8 * j + 4], b[8 * j + 5]), tcast_pack2(b[8 * j + 6], b[8 * j + 7]));
        }
        __syncwarp();
        // the cast rows out as the inputs came in: 4 rows of 128 bytes a warp instruction (a lane per row's 16-byte
        // stores would touch 32 lines an instruction: the first version of this kernel was bound by L2 at 74%)
        {
            const int q = lane & 7;
            if (c0 + 8 * q < cols) {
                #pragma unroll
                for (int m = 0; m < 8; m++) {
                    const int i = (lane >> 3) + 4 * m;
                    *reinterpret_cast<uint4*>(o.y_row + (size_t)(r0 + i) * cols + c0 + 8 * q) =
                        *reinterpret_cast<const uint4*>(in + i * 32 + ((q ^ (i & 7)) << 2));
                }
            }
        }
        __syncwarp();  // stage s is free for unit u + 2
    }
    if (live) *reinterpret_cast<float2*>(o.partial + (size_t)blockIdx.y * cols + c) = make_float2(sum[0], sum[1]);
}
