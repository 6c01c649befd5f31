// tcast_cast_kernels.cuh - the TensorCast cast kernels (doc/TCAST.md sections 4.2-4.4), each instantiated
// per element quantizer Q (tcast_cast_device.cuh) and with or without statistics:
//   tcast_rows_kernel    the row path: tiles along dim 1, channel scales per row, per-tensor and unscaled
//                        types (either dim); a thread owns 4 packets of 8 BF16 at warp stride;
//   tcast_cols_kernel    the column path: tiles along dim 0 and channel scales per column; a block owns a
//                        strip of 256 columns and 32-row chunks;
//   tcast_scalar_kernel  the scalar fallback for any shape and alignment (tcast_quantize per element).
// Channel and per-tensor scales come from the reduction pass (tcast_cast_prepass.cuh). The launcher and the
// design are in llmc/kernels/tcast/tcast_cast.cuh; the column path's common case (tiles of 32 rows without
// statistics: the MX wgrad casts, and a dY's casts along both dimensions) is tcast_cols32.cuh's kernel.
// The row and column kernels read the tensor through a source Src (tcast_source.cuh): TcastSrcStored reads
// a stored BF16 tensor (the stand-alone cast); a producer source computes the values of the kernel that
// would have stored them (GELU, GELU') and may store their BF16 values on the way, so the producer and
// its cast are one pass. Every element is read through the source exactly once per launch on the paths
// tcast_cast_from admits for a source that stores in place (rows; columns with tiles of up to 32 rows).
#pragma once

#include <stdint.h>
#include <type_traits>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/tcast/tcast_cast_device.cuh"
#include "llmc/kernels/tcast/tcast_source.cuh"

// ------------------------------------------------------------------------------------------------
// Row path (sections 4.2-4.4): groups of consecutive flat elements, or given group scales.
//   TILE:  tiles of `tile` elements along a row (tile | cols, so tiles never straddle rows).
//   !TILE: gs == NULL: unscaled; gs_rows: gs[row] (channel, dim 1); else gs[0] (per tensor).
// npk = rows * cols / 8 packets; x, y 16-byte aligned; y may equal x.

// Tiles of SG = 2 or 4 elements: 8 / SG groups inside one packet.
template <class Q, bool STATS, int SG>
__device__ __forceinline__ void tcast_packet_small_tiles(const TcastKernelArgs& k, uint32_t (&b)[8], uint64_t idx0, TcastCounts& cnt,
                                                         unsigned* s_hist) {
    #pragma unroll
    for (int g0 = 0; g0 < 8; g0 += SG) {
        typename Q::Acc acc = Q::init();
        #pragma unroll
        for (int e = 0; e < SG; e++) Q::add(acc, b[g0 + e]);
        const TcastGroupScale g = Q::scale(k, acc);
        const typename Q::Param p = Q::param(k, g);
        if (STATS) tcast_hist_add(s_hist, g.hist);
        #pragma unroll
        for (int e = 0; e < SG; e += 2) {
            unsigned f[2] = {0u, 0u};
            Q::cast2(k, p, b[g0 + e], b[g0 + e + 1], idx0 + g0 + e, idx0 + g0 + e + 1, STATS ? f : nullptr);
            if (STATS) {
                cnt.add(f[0], true);
                cnt.add(f[1], true);
            }
        }
    }
}

// One unit of the row path, cast in place: the TCAST_ROW_PACKETS packets b[j] that this lane holds at warp
// stride (8 values each as float32 bit patterns of BF16 values; flat packet index pk[j]; valid[j]: inside the
// tensor, else b[j] is all zero, the identity of every accumulation, and no tile is partly valid). Groups: tiles
// of `tile` elements along a row (TILE), else the uniform scale pu, or gs[row] (gs_rows). Each valid packet, once
// cast, is handed to emit(j) (the row kernel stores it). All 32 lanes of the warp call together (shuffles).
template <class Q, bool STATS, bool TILE, class Emit>
__device__ __forceinline__ void tcast_rows_unit(const TcastKernelArgs& k, int tile, const typename Q::Param& pu, const TcastGroupScale* gs,
                                                int gs_rows, int cols, bool small32, uint32_t (&b)[TCAST_ROW_PACKETS][8],
                                                const size_t (&pk)[TCAST_ROW_PACKETS], const bool (&valid)[TCAST_ROW_PACKETS],
                                                TcastCounts& cnt, unsigned* s_hist, Emit&& emit) {
    const int lane = threadIdx.x & 31;
    // tiles of 8 .. 1024: lanes per tile (shuffle span) and packets per tile inside one lane
    const int G = TILE ? min(max(tile / 8, 1), 32) : 1, JG = TILE ? max(tile / 256, 1) : 1;
    if (TILE && tile <= 4) {
        #pragma unroll
        for (int j = 0; j < TCAST_ROW_PACKETS; j++) {
            if (!valid[j]) continue;
            if (tile == 2) tcast_packet_small_tiles<Q, STATS, 2>(k, b[j], pk[j] * 8, cnt, s_hist);
            else tcast_packet_small_tiles<Q, STATS, 4>(k, b[j], pk[j] * 8, cnt, s_hist);
            emit(j);
        }
        return;
    }
    // tiles of 8 .. 1024: merge the accumulations over the tile's lanes and packets
    typename Q::Acc acc[TCAST_ROW_PACKETS];
    if (TILE) {
        #pragma unroll
        for (int j = 0; j < TCAST_ROW_PACKETS; j++) {
            acc[j] = Q::init();
            #pragma unroll
            for (int e = 0; e < 8; e++) Q::add(acc[j], b[j][e]);
        }
        for (int off = 1; off < G; off <<= 1) {  // G uniform: every lane shuffles
            #pragma unroll
            for (int j = 0; j < TCAST_ROW_PACKETS; j++) Q::merge(acc[j], Q::shfl_xor(acc[j], off));
        }
        if (JG >= 2) {  // tiles of 512 / 1024: packets (0,1), (2,3) / all four of a lane
            Q::merge(acc[0], acc[1]);
            Q::merge(acc[2], acc[3]);
            if (JG >= 4) Q::merge(acc[0], acc[2]);
            acc[1] = acc[0];
            if (JG >= 4) acc[2] = acc[0];
            acc[3] = acc[2];
        }
    }
    // then one packet at a time: its scale, its elements, its emit (short live ranges)
    #pragma unroll
    for (int j = 0; j < TCAST_ROW_PACKETS; j++) {
        typename Q::Param p = pu;
        if (TILE) {
            const TcastGroupScale g = Q::scale(k, acc[j]);
            p = Q::param(k, g);
            if (STATS && valid[j] && lane % G == 0 && j % JG == 0) tcast_hist_add(s_hist, g.hist);
        } else if (gs_rows && valid[j]) {
            const size_t e0 = pk[j] * 8;
            p = Q::param(k, gs[small32 ? (size_t)((uint32_t)e0 / (uint32_t)cols) : e0 / (size_t)cols]);
        }
        if (!valid[j]) continue;
        tcast_cast_packet<Q, STATS>(k, p, b[j], pk[j] * 8, cnt);
        emit(j);
    }
}

template <class Q, bool STATS, bool TILE, class Src>
__global__ void __launch_bounds__(TCAST_THREADS, Q::MIN_BLOCKS)
    tcast_rows_kernel(floatX* y, const __grid_constant__ Src x, size_t npk, int cols, int tile, const TcastGroupScale* gs, int gs_rows,
                      const __grid_constant__ TcastKernelArgs k, TcastDeviceStats* stats) {
    __shared__ unsigned s_hist[STATS ? TCAST_HIST_BINS : 1];
    if (STATS) tcast_hist_init(s_hist);
    TcastCounts cnt = {0u, 0u, 0u};
    const int lane = threadIdx.x & 31;
    const size_t nunits = (npk + TCAST_ROW_PACKETS * 32 - 1) / (TCAST_ROW_PACKETS * 32);
    const size_t nwarps = (size_t)gridDim.x * TCAST_WARPS;
    // the uniform scale (unscaled, per tensor); a placeholder for the other modes
    const typename Q::Param pu = Q::param(k, !TILE && !gs_rows && gs ? gs[0] : tcast_unscaled_group());
    const bool small32 = npk * 8 <= 0xFFFFFFFFull;  // 32-bit row division suffices

    for (size_t unit = (size_t)blockIdx.x * TCAST_WARPS + threadIdx.x / 32; unit < nunits; unit += nwarps) {
        uint32_t b[TCAST_ROW_PACKETS][8];
        size_t pk[TCAST_ROW_PACKETS];
        bool valid[TCAST_ROW_PACKETS];
        #pragma unroll
        for (int j = 0; j < TCAST_ROW_PACKETS; j++) {  // all loads first: 64 bytes in flight per thread
            pk[j] = unit * (TCAST_ROW_PACKETS * 32) + j * 32 + lane;
            valid[j] = pk[j] < npk;
            x.load8(valid[j], pk[j] * 8, b[j]);
        }
        tcast_rows_unit<Q, STATS, TILE>(k, tile, pu, gs, gs_rows, cols, small32, b, pk, valid, cnt, s_hist,
                                        [&](int j) { tcast_store16(y + pk[j] * 8, tcast_pack8(b[j])); });
    }
    if (STATS) {
        tcast_counts_flush(stats, cnt);
        tcast_hist_flush(s_hist, stats);
    }
}

// ------------------------------------------------------------------------------------------------
// Column path (sections 4.2-4.4 along dim 0): block = strip of 256 columns (blockIdx.x) x units of
// U rows (blockIdx.y, grid-stride), U = max(tile, 32) for tiles, 32 for given scales. Thread (warp
// w, lane): columns c .. c + 7 (c = strip + 8 lane) and rows w*4 .. w*4 + 3 of each 32-row chunk.
//   TILE:  tiles of `tile` rows (tile | rows).   !TILE: gs[c] per column (channel, dim 0).
// cols % 8 == 0; x, y 16-byte aligned; y may equal x.

// The thread's 4 x 8 block of chunk `r0c` (rows r0c + w*4 + kk): loads (zeros where invalid).
template <class Src>
__device__ __forceinline__ void tcast_cols_load(const Src x, int rows, int cols, int r0c, int c, bool cvalid,
                                                uint32_t (&b)[TCAST_COL_RPT][8], bool (&rv)[TCAST_COL_RPT]) {
    const int w = threadIdx.x >> 5;
    #pragma unroll
    for (int kk = 0; kk < TCAST_COL_RPT; kk++) {
        const int r = r0c + w * TCAST_COL_RPT + kk;
        rv[kk] = cvalid && r < rows;
        x.load8(rv[kk], (size_t)r * cols + c, b[kk]);
    }
}

// Casts column j's rows (kk, kk + 1) of the thread's block with scale p, then stores the rows.
template <class Q, bool STATS>
__device__ __forceinline__ void tcast_cols_cast_pair(const TcastKernelArgs& k, const typename Q::Param& p, uint32_t (&b)[TCAST_COL_RPT][8],
                                                     const bool (&rv)[TCAST_COL_RPT], int kk, int j, size_t idx_kk, int cols,
                                                     TcastCounts& cnt) {
    tcast_cast_pair<Q, STATS>(k, p, TcastPairRef{b[kk][j], b[kk + 1][j], idx_kk + j, idx_kk + (size_t)cols + j, rv[kk], rv[kk + 1]}, cnt);
}

__device__ __forceinline__ void tcast_cols_store(floatX* y, int cols, int r0c, int c, const uint32_t (&b)[TCAST_COL_RPT][8],
                                                 const bool (&rv)[TCAST_COL_RPT]) {
    const int w = threadIdx.x >> 5;
    #pragma unroll
    for (int kk = 0; kk < TCAST_COL_RPT; kk++)
        if (rv[kk]) tcast_store16(y + (size_t)(r0c + w * TCAST_COL_RPT + kk) * cols + c, tcast_pack8(b[kk]));
}

template <class Q, bool STATS, bool TILE, class Src>
__global__ void __launch_bounds__(TCAST_THREADS, Q::MIN_BLOCKS)
    tcast_cols_kernel(floatX* y, const __grid_constant__ Src x, int rows, int cols, int tile, const TcastGroupScale* gs,
                      const __grid_constant__ TcastKernelArgs k, TcastDeviceStats* stats) {
    typedef typename Q::Acc Acc;
    typedef typename Q::Param Param;
    // Shared bytes: tiles of 8 .. 1024 rows: per-warp partials Acc[8 warps][256 columns], then (same
    // bytes, after a barrier) the tiles' scales Param[up to 4 tiles per chunk][256 columns];
    // channel scales: Param[256 columns] for the whole kernel.
    constexpr size_t RED_BYTES = TCAST_WARPS * TCAST_STRIP_COLS * sizeof(Acc);
    constexpr size_t PAR_BYTES = 4 * TCAST_STRIP_COLS * sizeof(Param);
    constexpr size_t BUF_BYTES = TILE ? (RED_BYTES > PAR_BYTES ? RED_BYTES : PAR_BYTES) : TCAST_STRIP_COLS * sizeof(Param);
    __shared__ __align__(16) unsigned char s_buf[BUF_BYTES];
    __shared__ unsigned s_hist[STATS ? TCAST_HIST_BINS : 1];
    if (STATS) tcast_hist_init(s_hist);
    TcastCounts cnt = {0u, 0u, 0u};
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, t = threadIdx.x;
    const int strip = blockIdx.x * TCAST_STRIP_COLS, c = strip + lane * 8;
    const bool cvalid = c < cols;
    const int U = TILE ? max(tile, TCAST_CHUNK_ROWS) : TCAST_CHUNK_ROWS, nch = U / TCAST_CHUNK_ROWS;
    const int nunits = (rows + U - 1) / U;
    Param* par = reinterpret_cast<Param*>(s_buf);
    if (!TILE) {  // channel scales: thread t derives column strip + t's once
        par[t] = Q::param(k, strip + t < cols ? gs[strip + t] : tcast_unscaled_group());
        __syncthreads();
    }
    for (int unit = blockIdx.y; unit < nunits; unit += gridDim.y) {
        const int r0 = unit * U;
        uint32_t b[TCAST_COL_RPT][8];
        bool rv[TCAST_COL_RPT];
        if (!TILE || tile <= 4) {
            tcast_cols_load(x, rows, cols, r0, c, cvalid, b, rv);
            const size_t idx0 = (size_t)(r0 + w * TCAST_COL_RPT) * cols + c;  // flat index of (row kk = 0, column c)
            #pragma unroll
            for (int j = 0; j < 8; j++) {
                Param p;
                if (!TILE) p = par[lane * 8 + j];
                #pragma unroll
                for (int kk = 0; kk < TCAST_COL_RPT; kk += 2) {
                    if (TILE && (tile == 2 || kk == 0)) {  // a new tile: rows kk, kk + 1 (tile 2) or 0 .. 3 (tile 4)
                        Acc acc = Q::init();
                        Q::add(acc, b[kk][j]);
                        Q::add(acc, b[kk + 1][j]);
                        if (tile == 4) {
                            Q::add(acc, b[2][j]);
                            Q::add(acc, b[3][j]);
                        }
                        const TcastGroupScale g = Q::scale(k, acc);
                        p = Q::param(k, g);
                        if (STATS && rv[kk]) tcast_hist_add(s_hist, g.hist);  // rows % tile == 0: whole tiles
                    }
                    tcast_cols_cast_pair<Q, STATS>(k, p, b, rv, kk, j, idx0 + (size_t)kk * cols, cols, cnt);
                }
            }
            tcast_cols_store(y, cols, r0, c, b, rv);
        } else {
            // tiles of 8 .. 1024 rows. Phase A: this thread's share of every column's tile accumulation.
            Acc acc[8];
            #pragma unroll
            for (int j = 0; j < 8; j++) acc[j] = Q::init();
            for (int ch = 0; ch < nch; ch++) {
                tcast_cols_load(x, rows, cols, r0 + ch * TCAST_CHUNK_ROWS, c, cvalid, b, rv);
                #pragma unroll
                for (int kk = 0; kk < TCAST_COL_RPT; kk++) {
                    #pragma unroll
                    for (int j = 0; j < 8; j++) Q::add(acc[j], b[kk][j]);
                }
            }
            Acc* red = reinterpret_cast<Acc*>(s_buf);
            #pragma unroll
            for (int j = 0; j < 8; j++) red[w * TCAST_STRIP_COLS + lane * 8 + j] = acc[j];
            __syncthreads();
            // one thread per column t: merge the warps of each tile (WG warps = tile / 4 rows; NG tiles
            // per 32-row chunk), derive the tiles' scales
            const int WG = min(TCAST_WARPS, tile / TCAST_COL_RPT), NG = TCAST_WARPS / WG;
            Acc m[4];
            #pragma unroll
            for (int g = 0; g < 4; g++) {
                m[g] = Q::init();
                if (g < NG)
                    for (int i = 0; i < WG; i++) Q::merge(m[g], red[(g * WG + i) * TCAST_STRIP_COLS + t]);
            }
            __syncthreads();  // red is dead: its bytes become par
            #pragma unroll
            for (int g = 0; g < 4; g++) {
                if (g < NG) {
                    const TcastGroupScale gsc = Q::scale(k, m[g]);
                    par[g * TCAST_STRIP_COLS + t] = Q::param(k, gsc);
                    if (STATS && strip + t < cols && r0 + g * tile < rows) tcast_hist_add(s_hist, gsc.hist);
                }
            }
            __syncthreads();
            const Param* pw = par + (w / WG) * TCAST_STRIP_COLS + lane * 8;  // this warp's tile, this lane's columns
            // Phase B: cast (reading the chunks again when the tile spans several: from L2)
            for (int ch = 0; ch < nch; ch++) {
                const int r0c = r0 + ch * TCAST_CHUNK_ROWS;
                if (nch > 1) tcast_cols_load(x, rows, cols, r0c, c, cvalid, b, rv);
                const size_t idx0 = (size_t)(r0c + w * TCAST_COL_RPT) * cols + c;
                #pragma unroll
                for (int j = 0; j < 8; j++) {
                    const Param p = pw[j];
                    // column j's 4 rows: one group, a run of 2 pairs. Stored sources only: with a producer's registers
                    // on top, the runs' three inlined element steps took the GELU / GELU' column kernels from 8 / 4 to
                    // 24 / 16 bytes of spills at their 80-register bound (ptxas, CUDA 13.0)
                    if constexpr (Q::kFastRuns && !STATS && std::is_same<Src, TcastSrcStored>::value) {
                        tcast_cast_run<Q, STATS, TCAST_COL_RPT / 2>(k, p, cnt, [&](int i) {
                            const size_t ik = idx0 + (size_t)(2 * i) * cols + j;
                            return TcastPairRef{b[2 * i][j], b[2 * i + 1][j], ik, ik + (size_t)cols, rv[2 * i], rv[2 * i + 1]};
                        });
                    } else {
                        #pragma unroll
                        for (int kk = 0; kk < TCAST_COL_RPT; kk += 2)
                            tcast_cols_cast_pair<Q, STATS>(k, p, b, rv, kk, j, idx0 + (size_t)kk * cols, cols, cnt);
                    }
                }
                tcast_cols_store(y, cols, r0c, c, b, rv);
            }
            __syncthreads();  // s_buf is reused by the next unit
        }
    }
    if (STATS) {
        tcast_counts_flush(stats, cnt);
        tcast_hist_flush(s_hist, stats);
    }
}

// ------------------------------------------------------------------------------------------------
// Scalar fallback (any cols, any alignment): tcast_quantize per element.
//   tile > 0: one thread per tile (dim 1: `tile` consecutive elements of a row; dim 0: of a column,
//             tiles numbered column-fastest so that a warp reads adjacent columns).
//   tile <= 0: one thread per element; gs == NULL: unscaled; gs_index 1: gs[row], 2: gs[col], 0: gs[0].
template <bool STATS>
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_scalar_kernel(floatX* y, const floatX* x, int rows, int cols, int along_rows, int tile, const TcastGroupScale* gs,
                        int gs_index, const __grid_constant__ TcastKernelArgs k, TcastDeviceStats* stats) {
    TcastCounts cnt = {0u, 0u, 0u};
    const size_t n = (size_t)rows * cols, tid = (size_t)blockIdx.x * TCAST_THREADS + threadIdx.x;
    const size_t nthr = (size_t)gridDim.x * TCAST_THREADS;
    if (tile > 0) {
        const size_t ngroups = n / tile;
        for (size_t gi = tid; gi < ngroups; gi += nthr) {
            size_t base, stride;
            if (along_rows) {
                base = gi * tile;  // tile | cols: the tiles of row r are consecutive
                stride = 1;
            } else {
                base = (gi / cols) * tile * (size_t)cols + gi % cols;
                stride = cols;
            }
            TcastGroupAcc acc = tcast_acc_init();
            for (int e = 0; e < tile; e++) tcast_acc_add(&acc, __uint_as_float(tcast_load1(x + base + e * stride)));
            const TcastGroupScale g = tcast_group_scale_slow_(&k.dt, acc);
            if (STATS && g.hist >= 0) tcast_stats_group(stats, g.hist);
            for (int e = 0; e < tile; e++) {
                const size_t i = base + e * stride;
                const uint32_t u = k.stochastic ? tcast_random_bits(k.seed, i) : 0u;
                const uint2 r = tcast_quantize_slow_(&k.dt, g, tcast_load1(x + i), u);
                tcast_store1(y + i, r.x);
                if (STATS) cnt.add(r.y, true);
            }
        }
    } else {
        for (size_t i = tid; i < n; i += nthr) {
            TcastGroupScale g = tcast_unscaled_group();
            if (gs) g = gs[gs_index == 1 ? i / cols : gs_index == 2 ? i % cols : 0];
            const uint32_t u = k.stochastic ? tcast_random_bits(k.seed, i) : 0u;
            const uint2 r = tcast_quantize_slow_(&k.dt, g, tcast_load1(x + i), u);
            tcast_store1(y + i, r.x);
            if (STATS) cnt.add(r.y, true);
        }
    }
    if (STATS) tcast_counts_flush(stats, cnt);
}
