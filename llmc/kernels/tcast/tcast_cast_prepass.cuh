// tcast_cast_prepass.cuh - the TensorCast passes that run before the cast (doc/TCAST.md sections 4.1-4.2):
//   tcast_reduce_rows_kernel / tcast_reduce_cols_kernel / tcast_reduce_tensor_kernel, tcast_scales_kernel
//       channel (dim 1 or dim 0) and per-tensor scales, which need the whole slice before any element is
//       cast: integer max / min / or reductions of TcastGroupAcc, then tcast_group_scale per group;
//   tcast_prune_kernel
//       M:N pruning along dim (one warp lane per element of a group, keys exchanged with shuffles).
// The launcher is in llmc/kernels/tcast/tcast_cast.cuh.
#pragma once

#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/tcast/tcast_cast_device.cuh"

// ------------------------------------------------------------------------------------------------
// Reductions of the channel and per-tensor scales (the whole slice before any element is cast).
// vec: cols % 8 == 0 and x 16-byte aligned (packets), else element loads.

// Channel along dim 1: one warp per row; lane 0 writes the row's group scale (and its histogram bin).
template <bool STATS>
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_reduce_rows_kernel(TcastGroupScale* scales, const floatX* x, int rows, int cols, int vec, const __grid_constant__ TcastDataType dt,
                             TcastDeviceStats* stats) {
    __shared__ unsigned s_hist[STATS ? TCAST_HIST_BINS : 1];
    if (STATS) tcast_hist_init(s_hist);
    const int lane = threadIdx.x & 31;
    for (int r = blockIdx.x * TCAST_WARPS + threadIdx.x / 32; r < rows; r += gridDim.x * TCAST_WARPS) {
        const floatX* row = x + (size_t)r * cols;
        TcastGroupAcc acc = tcast_acc_init();
        if (vec) {
            for (int c = lane * 8; c < cols; c += 256) {
                uint32_t b[8];
                tcast_unpack8(tcast_load16(row + c), b);
                #pragma unroll
                for (int e = 0; e < 8; e++) tcast_acc_add(&acc, __uint_as_float(b[e]));
            }
        } else {
            for (int c = lane; c < cols; c += 32) tcast_acc_add(&acc, __uint_as_float(tcast_load1(row + c)));
        }
        #pragma unroll
        for (int off = 16; off > 0; off >>= 1) tcast_acc_merge(&acc, tcast_acc_shfl_xor(acc, off));
        if (lane == 0) {
            const TcastGroupScale g = tcast_group_scale(&dt, acc);
            scales[r] = g;
            if (STATS) tcast_hist_add(s_hist, g.hist);
        }
    }
    if (STATS) tcast_hist_flush(s_hist, stats);
}

// Channel along dim 0: block = 256 columns (lane: 8 adjacent columns) x `rows_per_block` rows (warp w:
// rows w, w + 8, ...); merged over the warps in shared memory, then into acc[c] with atomics (acc
// zeroed before the launch).
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_reduce_cols_kernel(TcastGroupAcc* acc_out, const floatX* x, int rows, int cols, int vec, int rows_per_block) {
    __shared__ TcastGroupAcc red[TCAST_WARPS][TCAST_STRIP_COLS];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int strip = blockIdx.x * TCAST_STRIP_COLS, c = strip + lane * 8;
    const int r0 = blockIdx.y * rows_per_block, r1 = min(rows, r0 + rows_per_block);
    TcastGroupAcc acc[8];
    #pragma unroll
    for (int j = 0; j < 8; j++) acc[j] = tcast_acc_init();
    for (int r = r0 + w; r < r1; r += TCAST_WARPS) {
        const floatX* row = x + (size_t)r * cols;
        uint32_t b[8];
        if (vec) {
            if (c < cols) tcast_unpack8(tcast_load16(row + c), b);
            else tcast_unpack8(make_uint4(0u, 0u, 0u, 0u), b);
        } else {
            #pragma unroll
            for (int j = 0; j < 8; j++) b[j] = c + j < cols ? tcast_load1(row + c + j) : 0u;
        }
        #pragma unroll
        for (int j = 0; j < 8; j++) tcast_acc_add(&acc[j], __uint_as_float(b[j]));
    }
    #pragma unroll
    for (int j = 0; j < 8; j++) red[w][lane * 8 + j] = acc[j];
    __syncthreads();
    const int t = threadIdx.x;
    if (strip + t < cols) {
        TcastGroupAcc m = red[0][t];
        for (int i = 1; i < TCAST_WARPS; i++) tcast_acc_merge(&m, red[i][t]);
        tcast_acc_atomic(&acc_out[strip + t], m);
    }
}

// Per tensor: grid-stride over the flat tensor, one set of atomics per block into acc[0] (zeroed
// before the launch).
__global__ void __launch_bounds__(TCAST_THREADS) tcast_reduce_tensor_kernel(TcastGroupAcc* acc_out, const floatX* x, size_t n, int vec) {
    __shared__ TcastGroupAcc red[TCAST_WARPS];
    TcastGroupAcc acc = tcast_acc_init();
    const size_t tid = (size_t)blockIdx.x * TCAST_THREADS + threadIdx.x, nthr = (size_t)gridDim.x * TCAST_THREADS;
    if (vec) {
        for (size_t p = tid; p < n / 8; p += nthr) {
            uint32_t b[8];
            tcast_unpack8(tcast_load16(x + p * 8), b);
            #pragma unroll
            for (int e = 0; e < 8; e++) tcast_acc_add(&acc, __uint_as_float(b[e]));
        }
    } else {
        for (size_t i = tid; i < n; i += nthr) tcast_acc_add(&acc, __uint_as_float(tcast_load1(x + i)));
    }
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) tcast_acc_merge(&acc, tcast_acc_shfl_xor(acc, off));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < TCAST_WARPS; i++) tcast_acc_merge(&acc, red[i]);
        tcast_acc_atomic(acc_out, acc);
    }
}

// scales[i] = tcast_group_scale(dt, acc[i]) for i < n (and the histogram bins).
template <bool STATS>
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_scales_kernel(TcastGroupScale* scales, const TcastGroupAcc* acc, int n, const __grid_constant__ TcastDataType dt, TcastDeviceStats* stats) {
    __shared__ unsigned s_hist[STATS ? TCAST_HIST_BINS : 1];
    if (STATS) tcast_hist_init(s_hist);
    for (int i = blockIdx.x * TCAST_THREADS + threadIdx.x; i < n; i += gridDim.x * TCAST_THREADS) {
        const TcastGroupScale g = tcast_group_scale(&dt, acc[i]);
        scales[i] = g;
        if (STATS) tcast_hist_add(s_hist, g.hist);
    }
    if (STATS) tcast_hist_flush(s_hist, stats);
}

// ------------------------------------------------------------------------------------------------
// Section 4.1: M:N pruning along dim, y = prune(x) (y may equal x). A warp takes gpw = 32 / N groups,
// one lane per element; each lane ranks its element against the group's N keys (shuffles) and keeps
// it iff fewer than M beat it (tcast_sparse_beats: larger magnitude, NaN above all, ties to the lower
// index). Along rows lane = group * N + j (consecutive elements); along columns lane = j * gpw + group
// (a row of gpw adjacent columns per load).
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_prune_kernel(floatX* y, const floatX* x, int rows, int cols, int along_rows, int M, int N) {
    const int lane = threadIdx.x & 31, gpw = 32 / N;
    const int j = along_rows ? lane % N : lane / gpw, gl = along_rows ? lane / N : lane % gpw;
    const bool active = lane < gpw * N;
    const size_t ngroups = (size_t)rows * cols / N;
    const size_t nwarps = (size_t)gridDim.x * TCAST_WARPS;
    for (size_t task = (size_t)blockIdx.x * TCAST_WARPS + threadIdx.x / 32; task * gpw < ngroups; task += nwarps) {
        const size_t g = task * gpw + gl;
        const bool valid = active && g < ngroups;
        size_t idx = 0;
        if (valid) idx = along_rows ? g * N + j : ((g / cols) * N + j) * (size_t)cols + g % cols;
        const unsigned short raw = valid ? *reinterpret_cast<const unsigned short*>(x + idx) : (unsigned short)0;
        const uint32_t key = tcast_sparse_key(__uint_as_float((uint32_t)raw << 16));
        int rank = 0;
        for (int kk = 0; kk < N; kk++) {
            const uint32_t kk_key = __shfl_sync(TCAST_FULL_MASK, key, along_rows ? gl * N + kk : kk * gpw + gl);
            rank += tcast_sparse_beats(kk_key, kk, key, j);
        }
        if (valid) *reinterpret_cast<unsigned short*>(y + idx) = rank < M ? raw : (unsigned short)0;
    }
}
