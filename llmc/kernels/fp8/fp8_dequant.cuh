// fp8_dequant.cuh - FP8 dequantization for tests and diagnostics: decode(code) / scale with one scale per
// tensor (fp8_dequantize) or per block of an FP8BlockLayout (fp8_dequantize_blocked), correctly rounded.
// Conventions: fp8_quant_common.cuh.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include "llmc/kernels/fp8/fp8_quant_common.cuh"
#include "llmc/kernels/fp8/fp8_block_layout.cuh"

// ------------------------------------------------------------------------------------------------
// Kernels: dequantization

__global__ void fp8q_dequantize_kernel(float* out, const uint8_t* q, size_t n, FP8Kind kind, const float* scale) {
    const FP8Format f = fp8_format(kind);
    const float s = __ldg(scale);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fdiv_rn(fp8_decode(f, q[i]), s);
}

__global__ void fp8q_dequantize_blocked_kernel(float* out, const uint8_t* q, FP8BlockLayout L, FP8Kind kind, const float* scales) {
    const FP8Format f = fp8_format(kind);
    const size_t n = (size_t)L.rows * L.K;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(i / (size_t)L.K), c = (int)(i - (size_t)r * L.K);
        out[i] = __fdiv_rn(fp8_decode(f, q[i]), scales[fp8_block_index_of(L, r, c)]);
    }
}

// ------------------------------------------------------------------------------------------------
// Public launchers: dequantization (tests, diagnostics)

// out[i] = fp8_decode(fmt, q[i]) / *scale for i < n (scale = the QUANT scale, fp8.h convention; correctly
// rounded division). NaN / Inf codes decode to NaN / Inf. Overwrites out (n floats).
static inline void fp8_dequantize(float* out, const uint8_t* q, size_t n, FP8Kind kind, const float* scale, cudaStream_t stream) {
    fp8q_require(out != NULL && q != NULL && scale != NULL, "fp8_dequantize", "NULL pointer");
    if (n == 0) return;
    fp8q_dequantize_kernel<<<fp8q_grid_stride_blocks(n), FP8Q_THREADS, 0, stream>>>(out, q, n, kind, scale);
    cudaCheckLaunch();
}

// Block-scaled version: out (rows, K) row-major, out[r, c] = fp8_decode(q[r, c]) / scales[fp8_block_index_of(L, r, c)].
static inline void fp8_dequantize_blocked(float* out, const uint8_t* q, const FP8BlockLayout& L, FP8Kind kind, const float* scales,
                                          cudaStream_t stream) {
    fp8q_require(out != NULL && q != NULL && scales != NULL, "fp8_dequantize_blocked", "NULL pointer");
    fp8q_dequantize_blocked_kernel<<<fp8q_grid_stride_blocks((size_t)L.rows * L.K), FP8Q_THREADS, 0, stream>>>(out, q, L, kind, scales);
    cudaCheckLaunch();
}
