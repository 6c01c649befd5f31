// fp8_block_scale.cuh - FP8 block scaling along K: per-block scales from each block's amax
// (fp8_block_scales, for any FP8BlockLayout of fp8_block_layout.cuh, padding entries set to 1), quantization
// with those scales (fp8_quantize_blocked, plain or transposed) and copies of scales between layouts
// (fp8_block_scales_relayout: e.g. the BLK128x128 scales of transposed codes). Conventions: fp8_quant_common.cuh.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include "llmc/kernels/fp8/fp8_quant_common.cuh"
#include "llmc/kernels/fp8/fp8_block_layout.cuh"
#include "llmc/kernels/fp8/fp8_quantize.cuh"

// ------------------------------------------------------------------------------------------------
// Kernels: block scales

// 1 x block_k blocks. Lane groups of G threads (G a power of two <= 32) own one block (r, kb); each lane
// reads units of U elements (U = 16 / sizeof(T) with vec, else 1) at stride G * U. Threads are numbered
// r * (nb_k * G) + kb * G + lane, so a group never straddles a warp.
template <class T>
__global__ void __launch_bounds__(FP8Q_THREADS)
    fp8q_block_scales_1d_kernel(float* scales, float* inv_scales, const T* x, FP8BlockLayout L, FP8Kind kind, int margin,
                                int pow2, int G, int vec) {
    const size_t g = (size_t)blockIdx.x * FP8Q_THREADS + threadIdx.x;
    const size_t per_row = (size_t)L.nb_k * G;
    const size_t r = g / per_row;
    const int rem = (int)(g - r * per_row), kb = rem / G, lane = rem - kb * G;
    uint32_t m = 0;
    if (r < (size_t)L.rows) {
        const T* row = x + r * (size_t)L.K;
        const int cb = kb * L.block_k, ce = min(L.K, cb + L.block_k);
        if (vec) {
            constexpr int V = Packed128<T>::size;
            for (int c = cb + lane * V; c < ce; c += G * V) {
                float v[V];
                fp8q_load_packet(v, row + c);
                #pragma unroll
                for (int k = 0; k < V; k++) m = max(m, abs_bits(v[k]));
            }
        } else {
            for (int c = cb + lane; c < ce; c += G) m = max(m, abs_bits((float)row[c]));
        }
    }
    for (int off = G >> 1; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
    if (r < (size_t)L.rows && lane == 0) {
        const float s = fp8q_scale_from_amax(fp8_format(kind), fp8q_amax_from_bits(m), margin, pow2);
        const int64_t idx = fp8_block_index(L, (int)r, kb);
        scales[idx] = s;
        if (inv_scales) inv_scales[idx] = __frcp_rn(s);
    }
}

// 2-D blocks (block_rows > 1): one thread block per scale block, grid = (nb_k, nb_rows).
template <class T>
__global__ void __launch_bounds__(FP8Q_THREADS)
    fp8q_block_scales_2d_kernel(float* scales, float* inv_scales, const T* x, FP8BlockLayout L, FP8Kind kind, int margin,
                                int pow2) {
    const int kb = blockIdx.x, rb = blockIdx.y;
    const int r0 = rb * L.block_rows, r1 = min(L.rows, r0 + L.block_rows);
    const int c0 = kb * L.block_k, width = min(L.K, c0 + L.block_k) - c0;
    const int count = (r1 - r0) * width;
    uint32_t m = 0;
    for (int e = threadIdx.x; e < count; e += FP8Q_THREADS) {
        const int rr = e / width, cc = e - rr * width;
        m = max(m, abs_bits((float)x[(size_t)(r0 + rr) * L.K + c0 + cc]));
    }
    m = block_reduce_max_u32(m);
    if (threadIdx.x == 0) {
        const float s = fp8q_scale_from_amax(fp8_format(kind), fp8q_amax_from_bits(m), margin, pow2);
        const int64_t idx = fp8_block_index(L, rb, kb);
        scales[idx] = s;
        if (inv_scales) inv_scales[idx] = __frcp_rn(s);
    }
}

// Sets the padding entries of layout L (blocks outside nb_rows x nb_k) of up to two buffers to 1.0f.
__global__ void fp8q_block_pad_kernel(float* a, float* b, FP8BlockLayout L) {
    const size_t total = (size_t)L.alloc_rows * L.alloc_k;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const int rb = (int)(e / L.alloc_k), kb = (int)(e - (size_t)rb * L.alloc_k);
        if (rb >= L.nb_rows || kb >= L.nb_k) {
            const int64_t idx = fp8_block_index(L, rb, kb);
            if (a) a[idx] = 1.0f;
            if (b) b[idx] = 1.0f;
        }
    }
}

__global__ void fp8q_block_relayout_kernel(float* dst, FP8BlockLayout Ld, const float* src, FP8BlockLayout Ls, int transpose_grid) {
    const size_t total = (size_t)Ld.alloc_rows * Ld.alloc_k;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const int rb = (int)(e / Ld.alloc_k), kb = (int)(e - (size_t)rb * Ld.alloc_k);
        float v = 1.0f;
        if (rb < Ld.nb_rows && kb < Ld.nb_k) {  // the src block holding the dst block's first element
            const int r = rb * Ld.block_rows, k = kb * Ld.block_k;
            v = transpose_grid ? src[fp8_block_index_of(Ls, k, r)] : src[fp8_block_index_of(Ls, r, k)];
        }
        dst[fp8_block_index(Ld, rb, kb)] = v;
    }
}

// ------------------------------------------------------------------------------------------------
// Public launchers: block scaling

// Per-block scales of the row-major (L.rows, L.K) matrix x for layout L (fp8_block_layout_*): for each
// block, amax = max |x| over the block (NaN if the block holds a NaN), scale = fp8_scale_pow2_from_amax(fmt,
// amax, margin) if pow2 (recommended: exact dequantization; amax * scale lies in (max/2, max]) else
// fp8_scale_from_amax. Writes scales[idx] = scale (QUANT scale, for fp8_quantize_blocked) and, if inv_scales
// != NULL, inv_scales[idx] = 1 / scale (DEQUANT scale: the cuBLASLt block-scale tensor when L is a
// fp8_block_layout_cublaslt_* layout). Padding entries of L are set to 1.0f. Both buffers hold
// fp8_block_layout_count(L) floats, overwritten. T = floatX or float. Deterministic.
// 1-D blocks (block_rows == 1): lane groups of up to 32 threads per block, 16-byte loads when x is 16-byte
// aligned and K and block_k are multiples of 16 / sizeof(T). 2-D blocks: one thread block per tile.
template <class T>
void fp8_block_scales(float* scales, float* inv_scales, const T* x, const FP8BlockLayout& L, FP8Kind kind, int margin,
                      int pow2, cudaStream_t stream) {
    fp8q_require(scales != NULL && x != NULL, "fp8_block_scales", "NULL scales or input");
    if (L.block_rows == 1) {
        constexpr int V = Packed128<T>::size;
        const int vec = fp8q_aligned16(x) && L.K % V == 0 && L.block_k % V == 0;
        const int units = vec ? L.block_k / V : L.block_k;
        int G = 1;
        while (G < units && G < 32) G *= 2;
        const size_t threads = (size_t)L.rows * L.nb_k * G;
        const size_t grid = ceil_div_sz(threads, FP8Q_THREADS);
        fp8q_require(grid <= 0x7FFFFFFFu, "fp8_block_scales", "matrix too large");
        fp8q_block_scales_1d_kernel<T><<<(unsigned)grid, FP8Q_THREADS, 0, stream>>>(scales, inv_scales, x, L, kind, margin, pow2, G, vec);
    } else {
        fp8q_require(L.nb_rows <= 65535, "fp8_block_scales", "too many block rows");
        fp8q_block_scales_2d_kernel<T><<<dim3(L.nb_k, L.nb_rows), FP8Q_THREADS, 0, stream>>>(scales, inv_scales, x, L, kind, margin, pow2);
    }
    cudaCheckLaunch();
    if (fp8_block_layout_count(L) > (size_t)L.nb_rows * L.nb_k) {
        fp8q_block_pad_kernel<<<fp8q_grid_stride_blocks(fp8_block_layout_count(L)), FP8Q_THREADS, 0, stream>>>(scales, inv_scales, L);
        cudaCheckLaunch();
    }
}

// Quantize the row-major (L.rows, L.K) matrix x with per-block QUANT scales `scales` in layout L (from
// fp8_block_scales): code(r, c) = Q(x[r, c] * scales[fp8_block_index_of(L, r, c)]), Q as in fp8_quantize
// (RNE, or SR with fp8_random_bits(seed, r * K + c)). transpose == 0: out row-major (rows, K); transpose != 0:
// out row-major (K, rows), bit-identical to the transposed plain output. Note the transposed codes keep
// their per-block scales, which are blocks of the transposed matrix's ROWS for 1-D layouts (cuBLASLt cannot
// use those as VEC128 scales; 128 x 128 tiles transpose into 128 x 128 tiles: see fp8_block_scales_relayout).
// Overwrites out. Fast paths as fp8_quantize, plus K % 16 == 0 and block_k % 16 == 0.
template <class T>
void fp8_quantize_blocked(uint8_t* out, const T* x, const FP8BlockLayout& L, FP8Kind kind, const float* scales,
                          int transpose, int stochastic, uint64_t seed, cudaStream_t stream) {
    fp8q_require(out != NULL && x != NULL && scales != NULL, "fp8_quantize_blocked", "NULL pointer");
    fp8q_quantize_launch<T, true>("fp8_quantize_blocked", transpose ? (uint8_t*)NULL : out, transpose ? out : (uint8_t*)NULL, x,
                                  L.rows, L.K, kind, scales, L, (uint32_t*)NULL, (float*)NULL, stochastic, seed, stream);
}

// Copies block scales from layout Ls to layout Ld of the same matrix (transpose_grid == 0) or of its
// transpose (transpose_grid != 0): each dst block takes the scale of the src block that contains it, so
// src blocks may be larger than dst blocks (a multiple in each direction). Uses: the BLK128x128 scales of
// transposed codes (src = fp8_block_layout_cublaslt_blk128x128(rows, K), dst = ..._blk128x128(K, rows),
// transposed); the per-row K-chunk scales (fp8_block_layout_colmajor(rows, K, b)) that gemm_fp8.cuh's
// chunked modes read, expanded from b x b tiles, for the matrix and (transposed) for its transpose.
// Padding of dst is set to 1.0f. dst and src must not overlap. Overwrites dst.
static inline void fp8_block_scales_relayout(float* dst, const FP8BlockLayout& Ld, const float* src, const FP8BlockLayout& Ls,
                                             int transpose_grid, cudaStream_t stream) {
    const bool ok = transpose_grid ? (Ld.rows == Ls.K && Ld.K == Ls.rows && Ls.block_k % Ld.block_rows == 0 &&
                                      Ls.block_rows % Ld.block_k == 0)
                                   : (Ld.rows == Ls.rows && Ld.K == Ls.K && Ls.block_rows % Ld.block_rows == 0 &&
                                      Ls.block_k % Ld.block_k == 0);
    fp8q_require(dst != NULL && src != NULL && ok, "fp8_block_scales_relayout", "block grids do not match");
    fp8q_block_relayout_kernel<<<fp8q_grid_stride_blocks(fp8_block_layout_count(Ld)), FP8Q_THREADS, 0, stream>>>(dst, Ld, src, Ls,
                                                                                                              transpose_grid);
    cudaCheckLaunch();
}
