// tcast_cols32.cuh - the TensorCast casts of a tensor in 32-row units, a thread owning 2 columns x 32 rows: the MX
// casts along N of the wgrad operands (doc/TCAST.md 5.2, 5.5), and for a linear layer's dY everything its backward
// needs from one read (issue 26, the --cast-gemm bar):
//   COL  y_col = cast(x) along dim 0, tiles of 32 rows (the wgrad operand); a column's group lives in one thread;
//   ROW  y_row = cast(x) along dim 1, tiles of 32 columns (the dgrad operand): the warp's 32 x 64 unit goes through
//        shared memory (4 KB a warp, swizzled), where lane l takes row l's two tiles whole;
//   SUM  partial[chunk][col] = the fp32 sum of the chunk's rows of column col in row order (the bias gradient's first
//        stage; gemm_dbias_finish adds the chunks), chunks of tcast_cols32_upc(rows, true) units of 32 rows.
// The source is a pair source: `uint32_t load2(size_t e) const` gives the BF16 values at flat row-major indices e and
// e + 1 (e even; element e in the low half): TcastPairStored below (a stored tensor) or a producer computing them
// (tcast_producers.cuh: the GELU' product), which then stores nothing itself.
// The casts take the same group amax (an order-free max: TcastQExp, TcastQRne), group scales, element steps
// (tcast_cast_run) and flat indices (the random bits of @stochastic) as tcast_rows_kernel / tcast_cols_kernel, and the
// same BF16 packing: the same bits as tcast_cast along dim 1 and dim 0 (dev/cuda/tcast.cu, dev/cuda/tcast_dy.cu).
// Why one thread per column group: tcast_cols_kernel merged each column's amax across 8 warps in shared memory behind
// three barriers and moved the wgrad casts at 2.28 TB/s in the trainer (H200, ncu); here 32 independent 4-byte loads a
// thread (one 128-byte line per warp instruction), no shared memory, no barrier: 95-98% of the copy rate (dim 0,
// mxfp8e4, H200). Why the row cast too: a dY is cast along both dimensions and summed; one read instead of three.
// Requirements (the launchers in tcast_cast.cuh check them): rows % 32 == 0; cols even (COL, SUM) or a multiple of 32
// (ROW: a row tile is all inside or all outside the tensor; 16-byte aligned y_row); 4-byte aligned x and outputs; y_col / y_row
// may equal x only where the source is x and the other output is off (a thread reads its elements before it writes).
#pragma once

#include <stdint.h>
#include <type_traits>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/tcast/tcast_cast_device.cuh"

// A stored row-major BF16 tensor as a pair source.
struct TcastPairStored {
    const floatX* x;
    __device__ __forceinline__ uint32_t load2(size_t e) const { return *reinterpret_cast<const uint32_t*>(x + e); }
};

// The outputs of tcast_cols32_kernel (template flags OUT) and where they go.
enum { TCAST_C32_COL = 1, TCAST_C32_ROW = 2, TCAST_C32_SUM = 4 };
struct TcastCols32Out {
    floatX* y_col;   // COL: (rows, cols)
    floatX* y_row;   // ROW: (rows, cols)
    float* partial;  // SUM: (gridDim.y, cols) fp32, row-major
};

// Units of 32 rows per chunk (blockIdx.y): 2 with the column sums (64-row chunks: enough blocks for the grid, few
// partial rows for the finish to add), else 1; more where the grid's y would pass 65535.
static inline int tcast_cols32_upc(int rows, bool sum) {
    const int nunits = rows / TCAST_CHUNK_ROWS, min_upc = sum ? 2 : 1;
    const int upc = (nunits + 65534) / 65535;
    return upc > min_upc ? upc : min_upc;
}

// Lane l of warp w owns columns c, c + 1 (c = (TCAST_WARPS blockIdx.x + w) 64 + 2 l) of the units of chunk blockIdx.y
// (units [blockIdx.y upc, + upc) of 32 rows); kc: the column cast's launch constants (its seed), kr: the row cast's.
template <class Q, class Src, int OUT>
__global__ void __launch_bounds__(TCAST_THREADS, (OUT & TCAST_C32_ROW) ? 2 : Q::MIN_BLOCKS)
    tcast_cols32_kernel(const __grid_constant__ Src src, TcastCols32Out o, int rows, int cols, int upc,
                        const __grid_constant__ TcastKernelArgs kc, const __grid_constant__ TcastKernelArgs kr) {
    static_assert(std::is_base_of<TcastQExp, Q>::value, "a max group accumulation (the order of the rows does not matter)");
    constexpr bool COL = (OUT & TCAST_C32_COL) != 0, ROW = (OUT & TCAST_C32_ROW) != 0, SUM = (OUT & TCAST_C32_SUM) != 0;
    constexpr int R = TCAST_CHUNK_ROWS;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c0 = (blockIdx.x * TCAST_WARPS + w) * 64, c = c0 + 2 * lane;
    if (c0 >= cols) return;  // (whole warps only: the row cast's __syncwarp needs every lane of a live warp)
    const bool live = c < cols;
    __shared__ uint32_t s_tile[ROW ? TCAST_WARPS : 1][ROW ? R : 1][32];  // ROW: each warp's 32 x 64 BF16 unit
    const int nunits = rows / R;
    const int u_end = min(nunits, (int)(blockIdx.y + 1) * upc);
    float sum[2] = {0.0f, 0.0f};
    TcastCounts cnt = {0u, 0u, 0u};  // (no statistics: unused)
    for (int u = blockIdx.y * upc; u < u_end; u++) {
        const int r0 = u * R;
        uint32_t v[R];  // row i's two BF16 (column c in the low half)
        #pragma unroll
        for (int i = 0; i < R; i++) v[i] = live ? src.load2((size_t)(r0 + i) * cols + c) : 0u;
        if constexpr (SUM) {
            #pragma unroll
            for (int i = 0; i < R; i++) {
                sum[0] += __uint_as_float(v[i] << 16);
                sum[1] += __uint_as_float(v[i] & 0xFFFF0000u);
            }
        }
        if constexpr (COL) {
            typename Q::Acc acc[2] = {Q::init(), Q::init()};
            #pragma unroll
            for (int i = 0; i < R; i++) {
                Q::add(acc[0], v[i] << 16);
                Q::add(acc[1], v[i] & 0xFFFF0000u);
            }
            const typename Q::Param p[2] = {Q::param(kc, Q::scale(kc, acc[0])), Q::param(kc, Q::scale(kc, acc[1]))};
            // 8 rows at a time (fewer live registers: no spill under Q::MIN_BLOCKS), each column's 4 pairs as a run of its group
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
                    tcast_cast_run<Q, false, 4>(kc, p[j], cnt, [&](int i) {
                        const uint64_t ik = i0 + (uint64_t)(2 * i) * (uint64_t)cols;
                        return TcastPairRef{e[j][2 * i], e[j][2 * i + 1], ik, ik + (uint64_t)cols, true, true};
                    });
                }
                if (live) {
                    #pragma unroll
                    for (int i = 0; i < 8; i++)
                        *reinterpret_cast<uint32_t*>(o.y_col + (size_t)(r0 + h + i) * cols + c) = tcast_pack2(e[0][i], e[1][i]);
                }
            }
        }
        if constexpr (ROW) {
            // A row's tile of 32 columns spans 16 lanes here; through the warp's tile in shared memory, lane l instead
            // takes row r0 + l whole (its 64 columns: 2 tiles), so that each tile's amax and scale are one thread's.
            // The tile's 16-byte chunks are XOR-swizzled by row (chunk q of row i at q ^ (i & 7)): the row-wise
            // writes below and the lane-per-row reads are both free of bank conflicts.
            __syncwarp();  // (the previous unit's reads of the tile are done)
            #pragma unroll
            for (int i = 0; i < R; i++) s_tile[w][i][(((lane >> 2) ^ (i & 7)) << 2) | (lane & 3)] = v[i];
            __syncwarp();
            #pragma unroll
            for (int g = 0; g < 2; g++) {
                if (c0 + 32 * g >= cols) break;  // (uniform: the tensor ends at the warp's middle)
                uint32_t b[32];                  // row r0 + lane, columns c0 + 32 g .. + 31, as float32 bits
                typename Q::Acc acc = Q::init();
                #pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int q = 4 * g + j;
                    const uint4 w4 = *reinterpret_cast<const uint4*>(&s_tile[w][lane][(q ^ (lane & 7)) << 2]);
                    uint32_t pk[8];
                    tcast_unpack8(w4, pk);
                    #pragma unroll
                    for (int e = 0; e < 8; e++) {
                        b[8 * j + e] = pk[e];
                        Q::add(acc, pk[e]);
                    }
                }
                const typename Q::Param p = Q::param(kr, Q::scale(kr, acc));
                const uint64_t i0 = (uint64_t)(r0 + lane) * (uint64_t)cols + (uint64_t)(c0 + 32 * g);
                tcast_cast_run<Q, false, 16>(kr, p, cnt, [&](int i) {
                    return TcastPairRef{b[2 * i], b[2 * i + 1], i0 + 2 * i, i0 + 2 * i + 1, true, true};
                });
                floatX* yr = o.y_row + (size_t)(r0 + lane) * cols + c0 + 32 * g;
                #pragma unroll
                for (int j = 0; j < 4; j++)
                    *reinterpret_cast<uint4*>(yr + 8 * j) =
                        make_uint4(tcast_pack2(b[8 * j], b[8 * j + 1]), tcast_pack2(b[8 * j + 2], b[8 * j + 3]),
                                   tcast_pack2(b[8 * j + 4], b[8 * j + 5]), tcast_pack2(b[8 * j + 6], b[8 * j + 7]));
            }
        }
    }
    if constexpr (SUM) {
        if (live) *reinterpret_cast<float2*>(o.partial + (size_t)blockIdx.y * cols + c) = make_float2(sum[0], sum[1]);
    }
}
