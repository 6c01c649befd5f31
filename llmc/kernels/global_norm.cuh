// global_norm.cuh - deterministic global L2 norm of the gradients (for gradient clipping and FP16
// loss-scale overflow detection), as gpt2_grad_norm in train_gpt2.c.
//
// Two stages, both with a fixed reduction order that does not depend on the device:
//   1. global_norm_squared: a grid of exactly GLOBAL_NORM_PARTIALS blocks reads the values with
//      16-byte loads (grid-stride, fp32 accumulation of squares per thread, fixed-order tree within
//      the block) and block b writes (or adds to) partials[b]. Several tensors can be accumulated
//      into the same partials array by successive calls (reset on the first only): each slot is
//      owned by one block, so the += is ordered by the stream, never by atomics.
//   2. global_norm_finish: one warp sums the partials in float64 in a fixed order and writes sqrt.
//
// Non-finite values: the norm is NaN if any element is NaN, and +Inf if any element is +-Inf (and none
// is NaN). It is also +Inf if the sum of squares overflows fp32 (some |value| >= 1.8e19 in bf16/fp32
// builds; impossible in fp16, whose largest value squared is 4.3e9, unless ~1e29 of them add up).
// The caller uses a non-finite norm as the FP16 loss-scale overflow signal: no separate check needed.
#pragma once

#include <math.h>
#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"

constexpr int GLOBAL_NORM_PARTIALS = 1024;  // length (floats) of the partials array; = blocks of stage 1
constexpr int GLOBAL_NORM_THREADS = 512;

// Scratch floats the caller provides for the partials (= GLOBAL_NORM_PARTIALS).
static inline size_t global_norm_partials_floats() { return GLOBAL_NORM_PARTIALS; }

template <typename T>
__global__ void __launch_bounds__(GLOBAL_NORM_THREADS)
global_norm_squared_kernel(float* partials, const T* values, size_t head, size_t nvec, size_t count, bool reset) {
    using P = Packed128<T>;
    constexpr int X = P::size;
    float acc = 0.0f;
    const T* aligned = values + head;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < nvec; i += 4 * stride) {  // 4 independent 16-byte loads in flight per thread
        P p[4];
        #pragma unroll
        for (int u = 0; u < 4; u++) p[u] = load128cs(aligned + (i + u * stride) * X);
        #pragma unroll
        for (int u = 0; u < 4; u++)
            #pragma unroll
            for (int k = 0; k < X; k++) {
                const float f = (float)p[u][k];
                acc = fmaf(f, f, acc);
            }
    }
    for (; i < nvec; i += stride) {
        const P p = load128cs(aligned + i * X);
        #pragma unroll
        for (int k = 0; k < X; k++) {
            const float f = (float)p[k];
            acc = fmaf(f, f, acc);
        }
    }
    if (blockIdx.x == 0) {  // the < X elements before the first aligned packet and the < X after the last
        const size_t tail_start = head + nvec * X;
        if (threadIdx.x < head) { const float f = (float)values[threadIdx.x]; acc = fmaf(f, f, acc); }
        if (threadIdx.x < count - tail_start) { const float f = (float)values[tail_start + threadIdx.x]; acc = fmaf(f, f, acc); }
    }
    const float block_sum = block_reduce_sum(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = reset ? block_sum : partials[blockIdx.x] + block_sum;
}

// global_norm_squared - sum of squares of values[0, count), split into GLOBAL_NORM_PARTIALS fp32
// partial sums: partials[b] = (reset ? 0 : partials[b]) + sum over the elements block b reads.
//   partials  GLOBAL_NORM_PARTIALS floats (scratch owned by the caller): OVERWRITTEN when reset, else
//             ACCUMULATED (+=). For gradients spread over several tensors call once per tensor, reset on
//             the first; for the flat gradient buffer one call covers everything.
//   values    count floatX or fp32 (T), any alignment (16-byte loads from the first 16-byte boundary on).
// The grid is always GLOBAL_NORM_PARTIALS blocks (count = 0 included), so every slot is written on reset.
// Deterministic: fixed work split and summation order, independent of the device.
// (No "number of slices" parameter: the split is fixed so that results do not depend on it.)
template <typename T>
static inline void global_norm_squared(float* partials, const T* values, size_t count, bool reset, cudaStream_t stream) {
    constexpr size_t X = Packed128<T>::size;
    size_t head = (((16 - ((uintptr_t)values & 15)) & 15) / sizeof(T));  // elements before a 16-byte boundary
    if (((uintptr_t)values % sizeof(T)) != 0) {
        fprintf(stderr, "error: global_norm_squared: values %p not aligned to its element size\n", (const void*)values);
        exit(EXIT_FAILURE);
    }
    if (head > count) head = count;
    const size_t nvec = (count - head) / X;
    global_norm_squared_kernel<<<GLOBAL_NORM_PARTIALS, GLOBAL_NORM_THREADS, 0, stream>>>(partials, values, head, nvec, count, reset);
    cudaCheckLaunch();
}

__global__ void global_norm_finish_kernel(float* norm_out, const float* partials, int n) {
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += 32) s += (double)partials[i];
    #pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, offset);
    if (threadIdx.x == 0) norm_out[0] = (float)sqrt(s);
}

// global_norm_finish - norm_out[0] = sqrt(sum of partials[0, n)) (OVERWRITTEN), summed in float64 in a
// fixed order by one warp. n = GLOBAL_NORM_PARTIALS after global_norm_squared (or any count of partial
// sums of squares, e.g. after an all-reduce of the partials across GPUs). norm_out may alias partials
// (every partial is read before the single store). Deterministic.
static inline void global_norm_finish(float* norm_out, const float* partials, int n, cudaStream_t stream) {
    global_norm_finish_kernel<<<1, 32, 0, stream>>>(norm_out, partials, n);
    cudaCheckLaunch();
}

// Same with n = GLOBAL_NORM_PARTIALS (the partials of global_norm_squared).
static inline void global_norm_finish(float* norm_out, const float* partials, cudaStream_t stream) {
    global_norm_finish(norm_out, partials, GLOBAL_NORM_PARTIALS, stream);
}
