// gemm_kernels.cuh - the elementwise kernels of the GEMM front (llmc/kernels/gemm/gemm.cuh): GELU and
// GELU' where they are not fused into a cuBLASLt epilogue, the MATMUL_OUT boundary pass, and the
// deterministic bias gradient (per-block fp32 partials, then a fixed-order finish). Row-major floatX,
// 16-byte packets (x128); GELU is train_gpt2.c's tanh approximation.
#pragma once

#include <stddef.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"

// ------------------------------------------------------------------------------------------------
// Kernels of the front: unfused GELU / GELU' and the deterministic bias gradient

#define GEMM_GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x³). The sigmoid
// form has no cancellation for negative x and needs only expf: with --use_fast_math tanhf becomes
// tanh.approx.f32 (~2^-11 relative), expf stays within a few fp32 ulp. exp overflow gives the right
// limits (x / inf = -0).
__device__ __forceinline__ float gemm_gelu_sigmoid(float x) {  // sigmoid(2u)
    const float u = GEMM_GELU_SCALE * (x + 0.044715f * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

__device__ __forceinline__ float gemm_gelu_tanh(float x) { return x * gemm_gelu_sigmoid(x); }

// d/dx gelu_tanh(x) = s + 2 x s (1 - s) u'(x), s = sigmoid(2u): train_gpt2.c gelu_backward's
// 0.5 (1 + th) + 0.5 x (1 - th²) u' rewritten with th = 2s - 1.
__device__ __forceinline__ float gemm_gelu_tanh_grad(float x) {
    const float s = gemm_gelu_sigmoid(x);
    return s + 2.0f * x * s * (1.0f - s) * GEMM_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

// The stored GELU output of one pre-activation value (the GELU_OUT boundary, then rounded to floatX), and
// the stored GELU' product of one dgrad value g: the one definition of both values, shared by the kernels
// below and the FP8 producers (llmc/kernels/fp8/lowp_producers.cuh), whose codes must match these values bit for bit.
__device__ __forceinline__ floatX gemm_gelu_stored(float pre) { return (floatX)boundary_value<GELU_OUT>(gemm_gelu_tanh(pre)); }
__device__ __forceinline__ floatX gemm_dgelu_stored(float g, float pre) { return (floatX)(g * gemm_gelu_tanh_grad(pre)); }

// out[i] = gelu_tanh(pre[i]) for n_packets 16-byte packets; out passes the GELU_OUT boundary.
// BOUND_PRE (SF16): pre is the raw GEMM output; it first passes the MATMUL_OUT boundary and is stored
// back, so the one kernel is the pre-activation's q115_simulate_kernel and the GELU (one read of pre
// instead of two).
// amax != NULL (gemm_amax_slot): also max |stored value| of out / d as bits into *amax (block_amax_accumulate).
template <bool BOUND_PRE>
__global__ void __launch_bounds__(256) gemm_gelu_forward_kernel(floatX* __restrict__ out, floatX* __restrict__ pre,
                                                                size_t n_packets, unsigned int* __restrict__ amax) {
    unsigned int m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_packets; i += (size_t)gridDim.x * blockDim.x) {
        x128 p = load128(pre + i * x128::size);
        if constexpr (BOUND_PRE) {
            #pragma unroll
            for (int k = 0; k < x128::size; k++) p[k] = (floatX)boundary_stored_value<MATMUL_OUT>((float)p[k]);
            store128(pre + i * x128::size, p);
        }
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) {
            o[k] = gemm_gelu_stored((float)p[k]);
            m = max(m, abs_bits((float)o[k]));
        }
        store128(out + i * x128::size, o);
    }
    if (amax) block_amax_accumulate(amax, m);
}

// d[i] = d[i] * gelu_tanh'(pre[i]) in place, for n_packets 16-byte packets.
__global__ void __launch_bounds__(256) gemm_gelu_backward_kernel(floatX* __restrict__ d, const floatX* __restrict__ pre,
                                                                 size_t n_packets, unsigned int* __restrict__ amax) {
    unsigned int m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_packets; i += (size_t)gridDim.x * blockDim.x) {
        const x128 g = load128cs(d + i * x128::size);
        const x128 p = load128cs(pre + i * x128::size);
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) {
            o[k] = gemm_dgelu_stored((float)g[k], (float)p[k]);
            m = max(m, abs_bits((float)o[k]));
        }
        store128(d + i * x128::size, o);
    }
    if (amax) block_amax_accumulate(amax, m);
}

static inline unsigned int gemm_elementwise_blocks(size_t n_packets) {
    const size_t blocks = ceil_div_sz(n_packets, 256);
    return (unsigned int)(blocks < 65536 ? blocks : 65536);  // grid-stride beyond that
}

// Bias gradient: column sums of dout (N, OC), in two deterministic kernels.
//   1. gemm_dbias_partial_kernel: block (32, GEMM_DBIAS_BLOCK_Y) owns 32 packets of columns
//      (32 * x128::size columns) and one chunk of rows; each thread sums every GEMM_DBIAS_BLOCK_Y-th row
//      of the chunk in row order (16-byte loads), the block adds its GEMM_DBIAS_BLOCK_Y partials in
//      fixed order and writes one fp32 row of partial[chunk][OC].
//   2. gemm_dbias_finish_kernel: per column, thread y sums chunks y, y+8, ... in order, the block adds
//      the 8 results in fixed order, and dbias[o] = floatX(float(dbias[o]) + sum).
// The chunking depends only on (N, OC, floatX): the result is bit-identical on every run and device.
#define GEMM_DBIAS_BLOCK_Y 8
#define GEMM_DBIAS_TARGET_BLOCKS 1024  // enough blocks for ~8 per SM on a 132-SM H100
#define GEMM_DBIAS_MIN_ROWS 64         // rows per chunk at least (GEMM_DBIAS_BLOCK_Y * 8 loads per thread)

__global__ void __launch_bounds__(32 * GEMM_DBIAS_BLOCK_Y)
gemm_dbias_partial_kernel(float* __restrict__ partial, const floatX* __restrict__ dout, int N, int OC, int rows_per_chunk) {
    constexpr int V = x128::size;
    __shared__ float sums[GEMM_DBIAS_BLOCK_Y][32 * V];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col0 = (blockIdx.x * 32 + tx) * V;
    const int row_begin = blockIdx.y * rows_per_chunk;
    const int row_end = min(N, row_begin + rows_per_chunk);
    float acc[V];
    #pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    if (col0 < OC) {
        const floatX* p = dout + (size_t)(row_begin + ty) * OC + col0;
        const size_t step = (size_t)GEMM_DBIAS_BLOCK_Y * OC;
        #pragma unroll 4
        for (int n = row_begin + ty; n < row_end; n += GEMM_DBIAS_BLOCK_Y, p += step) {
            const x128 v = load128cs(p);
            #pragma unroll
            for (int k = 0; k < V; k++) acc[k] += (float)v[k];
        }
    }
    #pragma unroll
    for (int k = 0; k < V; k++) sums[ty][tx * V + k] = acc[k];
    __syncthreads();
    const int t = ty * 32 + tx;
    if (t < 32 * V) {
        const int col = blockIdx.x * 32 * V + t;
        float s = 0.0f;
        #pragma unroll
        for (int y = 0; y < GEMM_DBIAS_BLOCK_Y; y++) s += sums[y][t];
        if (col < OC) partial[(size_t)blockIdx.y * OC + col] = s;
    }
}

__global__ void __launch_bounds__(32 * GEMM_DBIAS_BLOCK_Y)
gemm_dbias_finish_kernel(floatX* __restrict__ dbias, const float* __restrict__ partial, int chunks, int OC) {
    __shared__ float sums[GEMM_DBIAS_BLOCK_Y][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * 32 + tx;
    float s = 0.0f;
    // Unrolled so that eight loads are in flight (the partials sit in L2; one at a time, the loop waited
    // out the L2 latency per chunk: 18 us a call at d12, 1024 chunks). The additions keep their order.
    if (col < OC) {
        #pragma unroll 8
        for (int r = ty; r < chunks; r += GEMM_DBIAS_BLOCK_Y) s += __ldg(partial + (size_t)r * OC + col);
    }
    sums[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && col < OC) {
        float total = 0.0f;
        #pragma unroll
        for (int y = 0; y < GEMM_DBIAS_BLOCK_Y; y++) total += sums[y][tx];
        dbias[col] = (floatX)((float)dbias[col] + total);
    }
}

// Row chunking of the dbias reduction (a pure function of N and OC).
static inline void gemm_dbias_chunks(int N, int OC, int* rows_per_chunk, int* chunks) {
    const int col_blocks = ceil_div(OC, 32 * x128::size);
    const int target = ceil_div(GEMM_DBIAS_TARGET_BLOCKS, col_blocks);
    int rows = ceil_div(N, target);
    rows = rows < GEMM_DBIAS_MIN_ROWS ? GEMM_DBIAS_MIN_ROWS : rows;
    *rows_per_chunk = rows;
    *chunks = ceil_div(N, rows);
}

// Floats of dbias_scratch that matmul_backward needs for (N, OC) when dbias != NULL. An upper bound
// that is monotone in N and in OC (so the value for the largest N and OC covers every smaller layer):
// min(ceil(N / 64), GEMM_DBIAS_TARGET_BLOCKS * 32 * x128::size / OC + 1) * OC <= 262144 + OC floats for
// BF16/FP16 (1 MiB + 4 * OC bytes), 131072 + OC for FP32.
size_t matmul_dbias_scratch_floats(int N, int OC) {
    const size_t by_rows = (size_t)ceil_div(N, GEMM_DBIAS_MIN_ROWS) * OC;
    const size_t by_blocks = (size_t)GEMM_DBIAS_TARGET_BLOCKS * 32 * x128::size + OC;
    return by_rows < by_blocks ? by_rows : by_blocks;
}

// dbias (OC) += Σ_n dout[n, :], deterministic. scratch: matmul_dbias_scratch_floats(N, OC) floats.
// dbias (OC) += the column sums of partial (chunks, OC) fp32, row-major, added in row order (stage 2 of
// the bias gradient; the FP8 backend's dY quantization makes the partials itself). Deterministic.
static inline void gemm_dbias_finish(floatX* dbias, const float* partial, int chunks, int OC, cudaStream_t stream) {
    gemm_dbias_finish_kernel<<<ceil_div(OC, 32), dim3(32, GEMM_DBIAS_BLOCK_Y), 0, stream>>>(dbias, partial, chunks, OC);
    cudaCheckLaunch();
}

static inline void gemm_dbias_accumulate(floatX* dbias, const floatX* dout, float* scratch, int N, int OC, cudaStream_t stream) {
    int rows, chunks;
    gemm_dbias_chunks(N, OC, &rows, &chunks);
    dim3 block(32, GEMM_DBIAS_BLOCK_Y);
    gemm_dbias_partial_kernel<<<dim3(ceil_div(OC, 32 * x128::size), chunks), block, 0, stream>>>(scratch, dout, N, OC, rows);
    cudaCheckLaunch();
    gemm_dbias_finish(dbias, scratch, chunks, OC, stream);
}

// The MATMUL_OUT storage boundary applied in place to n floatX values (n % 8 == 0, 16-byte aligned):
// the seed's q115_simulate_kernel (SF16), identity in plain builds where it is never launched.
__global__ void gemm_boundary_kernel(floatX* x, size_t packets) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < packets; i += (size_t)gridDim.x * blockDim.x) {
        x128 v = load128(x + i * x128::size);
        #pragma unroll
        for (int k = 0; k < x128::size; k++) v[k] = (floatX)boundary_stored_value<MATMUL_OUT>((float)v[k]);
        store128(x + i * x128::size, v);
    }
}

static inline void gemm_boundary_apply(floatX* x, size_t n, cudaStream_t stream) {
    const size_t packets = n / x128::size;
    gemm_boundary_kernel<<<gemm_elementwise_blocks(packets), 256, 0, stream>>>(x, packets);
    cudaCheckLaunch();
}

// out = GELU_OUT boundary of gelu_tanh(pre) over n values (n % 8 == 0); BOUND_PRE: pre is the raw GEMM
// output and first passes the MATMUL_OUT boundary, stored back (gemm_gelu_forward_kernel).
// amax: NULL or a gemm_amax_slot for out.
template <bool BOUND_PRE>
static inline void gemm_gelu_apply(floatX* out, floatX* pre, size_t n, cudaStream_t stream, unsigned int* amax = NULL) {
    const size_t packets = n / x128::size;
    gemm_gelu_forward_kernel<BOUND_PRE><<<gemm_elementwise_blocks(packets), 256, 0, stream>>>(out, pre, packets, amax);
    cudaCheckLaunch();
}

// d = d * gelu_tanh'(pre) in place over n values (n % 8 == 0; gemm_gelu_backward_kernel).
// amax: NULL or a gemm_amax_slot for d.
static inline void gemm_dgelu_apply(floatX* d, const floatX* pre, size_t n, cudaStream_t stream, unsigned int* amax = NULL) {
    const size_t packets = n / x128::size;
    gemm_gelu_backward_kernel<<<gemm_elementwise_blocks(packets), 256, 0, stream>>>(d, pre, packets, amax);
    cudaCheckLaunch();
}

