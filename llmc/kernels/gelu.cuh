// gelu.cuh - GELU, tanh approximation (Hendrycks & Gimpel 2016), forward and in-place backward.
//
// Same function as gelu_forward / gelu_backward in train_gpt2.c:
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x sech^2(u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// evaluated through the exact identity 0.5 (1 + tanh(u)) = sigma(2u) = 1 / (1 + e), e = exp(-2u):
//   gelu(x)  = x / (1 + e)
//   gelu'(x) = sigma + 2 sqrt(2/pi) x (e sigma) sigma (1 + 3 * 0.044715 x^2)      [1 - sigma = e sigma]
// One exp2 and one fast division per element, no tanhf (whose --use_fast_math version is accurate only
// to about 2^-11), and no cancellation in 1 - sigma. -2u log2(e) is clamped at 100 so that e stays
// finite (the fast division needs a divisor below 2^126); this changes gelu(x) only for x < -9, where
// it is below 1e-30 in magnitude.
//
// These kernels are the fallback when the cuBLASLt GELU epilogue is not used.
#pragma once

#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"

constexpr int GELU_THREADS = 256;

// sqrt(2/pi) * 2 * log2(e), negated: z = x (GELU_A + GELU_B x^2) = -2u log2(e)
#define GELU_A (-2.0f * 0.7978845608028654f * 1.4426950408889634f)
#define GELU_B (GELU_A * 0.044715f)
#define GELU_Z_MAX 100.0f

// e = exp(-2u) for input x (clamped, see above).
__device__ __forceinline__ float gelu_exp_m2u(float x) {
    const float z = x * fmaf(GELU_B, x * x, GELU_A);
    return exp2f(fminf(z, GELU_Z_MAX));
}

__device__ __forceinline__ float gelu_value(float x) {
    return __fdividef(x, 1.0f + gelu_exp_m2u(x));
}

__device__ __forceinline__ float gelu_derivative(float x) {
    const float e = gelu_exp_m2u(x);
    const float sig = __fdividef(1.0f, 1.0f + e);
    const float du = 2.0f * 0.7978845608028654f * fmaf(3.0f * 0.044715f, x * x, 1.0f);  // 2 u'(x)
    return sig + x * (e * sig) * sig * du;
}

// The value gelu_forward stores for input x (the GELU_OUT boundary, then rounded to floatX): its one definition,
// shared with the TensorCast GELU source that casts it on the way (llmc/kernels/tcast/tcast_producers.cuh).
__device__ __forceinline__ floatX gelu_stored(float x) { return (floatX)boundary_value<GELU_OUT>(gelu_value(x)); }

__global__ void __launch_bounds__(GELU_THREADS) gelu_forward_kernel(floatX* out, const floatX* inp, size_t nvec) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) return;
    const x128 x = load128cs(inp + i * x128::size);
    x128 y;
    #pragma unroll
    for (int k = 0; k < x128::size; k++) y[k] = gelu_stored((float)x[k]);
    store128(out + i * x128::size, y);
}

__global__ void __launch_bounds__(GELU_THREADS) gelu_backward_inplace_kernel(floatX* d_in_out, const floatX* inp, size_t nvec) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nvec) return;
    const x128 x = load128cs(inp + i * x128::size);
    const x128 d = load128cs(d_in_out + i * x128::size);
    x128 r;
    #pragma unroll
    for (int k = 0; k < x128::size; k++) r[k] = (floatX)(gelu_derivative((float)x[k]) * (float)d[k]);
    store128(d_in_out + i * x128::size, r);
}

static inline void gelu_check_args(const char* who, const void* a, const void* b, size_t N) {
    if (N % 8 != 0 || ((uintptr_t)a & 15) != 0 || ((uintptr_t)b & 15) != 0) {
        fprintf(stderr, "error: %s: N must be a multiple of 8 and the pointers 16-byte aligned (N = %zu, %p, %p)\n",
                who, N, a, b);
        exit(EXIT_FAILURE);
    }
}

// gelu_forward - out[i] = gelu(inp[i]) for i < N, elementwise (layout irrelevant; in practice the MLP
// activation (B*T, 4C) row-major). OVERWRITES out; out may alias inp. Each value passes through
// boundary_value<GELU_OUT> before it is rounded to floatX.
// Requirements (checked, exit with a message): N % 8 == 0, out and inp 16-byte aligned.
// No scratch; deterministic (elementwise). Bytes moved: 2 N sizeof(floatX).
static inline void gelu_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t stream) {
    gelu_check_args("gelu_forward", out, inp, N);
    const size_t nvec = N / x128::size;
    if (nvec == 0) return;
    gelu_forward_kernel<<<(unsigned int)ceil_div_sz(nvec, GELU_THREADS), GELU_THREADS, 0, stream>>>(out, inp, nvec);
    cudaCheckLaunch();
}

// gelu_backward_inplace - d_in_out[i] = gelu'(inp[i]) * d_in_out[i] for i < N: on entry the gradient
// w.r.t. the GELU output, on exit the gradient w.r.t. its input (OVERWRITTEN, not accumulated).
// inp is the GELU input saved by the forward pass.
// Requirements (checked, exit with a message): N % 8 == 0, both pointers 16-byte aligned.
// No scratch; deterministic (elementwise). Bytes moved: 3 N sizeof(floatX).
static inline void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t N, cudaStream_t stream) {
    gelu_check_args("gelu_backward_inplace", d_in_out, inp, N);
    const size_t nvec = N / x128::size;
    if (nvec == 0) return;
    gelu_backward_inplace_kernel<<<(unsigned int)ceil_div_sz(nvec, GELU_THREADS), GELU_THREADS, 0, stream>>>(d_in_out, inp, nvec);
    cudaCheckLaunch();
}
