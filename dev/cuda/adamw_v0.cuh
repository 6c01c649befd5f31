// adamw_v0.cuh - the AdamW kernel of llmc/kernels/adamw.cuh as it was at commit 828a037 (one launch per
// tensor, grid-stride over 8-element packets), kept verbatim (only adamw_aligned16 calls qualified, against
// argument-dependent lookup of the current one) inside namespace adamw_v0 as the reference
// dev/cuda/adamw.cu checks the current kernel against bit for bit (parameters, master, m, v), and as the
// baseline of its timing table. The trainer does not use it; change nothing here.
#pragma once

#include <math.h>
#include <stdint.h>
#include <algorithm>
#include <type_traits>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"

namespace adamw_v0 {

constexpr int ADAMW_THREADS = 256;

struct AdamWArgs {
    float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, inv_bc1, inv_bc2, eps, weight_decay, grad_scale;
    unsigned long long seed;
    unsigned long long index0;  // element index of this call's first element in its tensor (rounding stream)
};

// One element: updates m, v in place and returns the new parameter value.
__device__ __forceinline__ float adamw_element(float p, float grad, float& m, float& v, const AdamWArgs& a) {
    const float g = grad * a.grad_scale;
    m = fmaf(a.beta1, m, a.one_minus_beta1 * g);
    v = fmaf(a.beta2, v, a.one_minus_beta2 * g * g);
    const float mhat = m * a.inv_bc1, vhat = v * a.inv_bc2;
    return p - a.lr * (mhat / (sqrtf(vhat) + a.eps) + a.weight_decay * p);
}

// Scalar path for element i (tail of the vector path, or every element when pointers are misaligned).
template <bool MASTER, typename G>
__device__ __forceinline__ void adamw_scalar(floatX* params, float* master, const G* grads, float* m, float* v,
                                             size_t i, const AdamWArgs& a) {
    const float p_old = MASTER ? master[i] : (float)params[i];
    float mi = m[i], vi = v[i];
    const float p = adamw_element(p_old, (float)grads[i], mi, vi, a);
    m[i] = mi;
    v[i] = vi;
    if (MASTER) master[i] = p;
    store_rounded(&params[i], p, random_u32(a.seed, a.index0 + i));
}

// Vector path: packet j covers elements [j X, j X + X), X = x128::size (8 for bf16/fp16, 4 for fp32);
// elements [nvec X, n) are done by the first threads of the grid. All pointers 16-byte aligned.
template <bool MASTER, typename G>
__global__ void __launch_bounds__(ADAMW_THREADS)
adamw_kernel(floatX* params, float* master, const G* grads, float* m, float* v, size_t nvec, size_t n, AdamWArgs a) {
    constexpr int X = x128::size, F = X / f128::size;  // F float packets per floatX packet
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = tid; j < nvec; j += stride) {
        const size_t base = j * X;
        float g[X], p[X], mm[X], vv[X];
        if constexpr (std::is_same<G, floatX>::value) {
            const x128 gp = load128cs(grads + base);
            #pragma unroll
            for (int k = 0; k < X; k++) g[k] = (float)gp[k];
        } else {  // fp32 gradients (reduced in fp32 by the multi-GPU trainer)
            #pragma unroll
            for (int f = 0; f < F; f++) {
                const f128 gp = load128cs(grads + base + f * 4);
                #pragma unroll
                for (int k = 0; k < 4; k++) g[f * 4 + k] = gp[k];
            }
        }
        #pragma unroll
        for (int f = 0; f < F; f++) {
            const f128 mp = load128cs(m + base + f * 4), vp = load128cs(v + base + f * 4);
            #pragma unroll
            for (int k = 0; k < 4; k++) { mm[f * 4 + k] = mp[k]; vv[f * 4 + k] = vp[k]; }
        }
        if (MASTER) {
            #pragma unroll
            for (int f = 0; f < F; f++) {
                const f128 pp = load128cs(master + base + f * 4);
                #pragma unroll
                for (int k = 0; k < 4; k++) p[f * 4 + k] = pp[k];
            }
        } else {
            const x128 pp = load128(params + base);
            #pragma unroll
            for (int k = 0; k < X; k++) p[k] = (float)pp[k];
        }
        x128 out;
        #pragma unroll
        for (int k = 0; k < X; k++) {
            p[k] = adamw_element(p[k], g[k], mm[k], vv[k], a);
            store_rounded(&out.payload[k], p[k], random_u32(a.seed, a.index0 + base + k));
        }
        #pragma unroll
        for (int f = 0; f < F; f++) {
            f128 mp, vp;
            #pragma unroll
            for (int k = 0; k < 4; k++) { mp[k] = mm[f * 4 + k]; vp[k] = vv[f * 4 + k]; }
            store128cs(m + base + f * 4, mp);
            store128cs(v + base + f * 4, vp);
            if (MASTER) {
                f128 pp;
                #pragma unroll
                for (int k = 0; k < 4; k++) pp[k] = p[f * 4 + k];
                store128cs(master + base + f * 4, pp);
            }
        }
        store128(params + base, out);
    }
    const size_t tail = nvec * X + tid;
    if (tail < n) adamw_scalar<MASTER, G>(params, master, grads, m, v, tail, a);
}

// Fallback for pointers that are not 16-byte aligned: grid-stride over single elements.
template <bool MASTER, typename G>
__global__ void __launch_bounds__(ADAMW_THREADS)
adamw_scalar_kernel(floatX* params, float* master, const G* grads, float* m, float* v, size_t n, AdamWArgs a) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        adamw_scalar<MASTER, G>(params, master, grads, m, v, i, a);
}

static inline bool adamw_aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// Grid for a memory-bound grid-stride kernel: enough blocks to fill the device, no more than the work.
static inline unsigned int adamw_grid(size_t work_items) {
    int dev = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const size_t full = (size_t)sms * (2048 / ADAMW_THREADS);
    const size_t need = ceil_div_sz(work_items, ADAMW_THREADS);
    return (unsigned int)std::max<size_t>(1, std::min(full, need));
}

// adamw_update - one AdamW step over n parameters (a flat range; any layout).
//   params         n floatX. With master_params: OVERWRITTEN (never read) with the updated master rounded
//                  by store_rounded (bf16: stochastic rounding with random_u32(seed, i), i = 0..n-1 the
//                  index within this call; fp16: round to nearest; fp32: copy). Without master_params:
//                  read, updated, and written back through store_rounded.
//   master_params  n fp32 or NULL. When non-NULL it is the authoritative copy: read, updated in place.
//   grads          n floatX or n fp32 (G), read; the gradient used is grads[i] * grad_scale.
//   m, v           n fp32 each, first and second moments, updated in place (zero before step 1).
//   lr, beta1, beta2, eps, weight_decay: as in torch.optim.AdamW; step: 1-based step count for the
//                  bias corrections, computed in double on the host.
//   seed           stochastic rounding seed. Element i draws random_u32(seed, index_offset + i), so a
//                  caller updating several tensors in separate calls must vary the seed per tensor (e.g.
//                  mix in the tensor index) to keep their rounding noise independent, and one updating
//                  a tensor in pieces (ZeRO-1 shards) passes each piece's position in its tensor as
//                  index_offset to draw exactly the bits a single call over the tensor would.
// Vector path when all five pointers are 16-byte aligned (the tail n % 8 handled in the same kernel),
// else a scalar path (same results, slower). No scratch. Deterministic: elementwise, and the rounding
// bits depend only on (seed, i).
// Bytes moved per element: 2 sizeof(floatX) + 24 (with master), 3 sizeof(floatX) + 16 (without).
template <typename G>
static inline void adamw_update(floatX* params, float* master_params, const G* grads, float* m, float* v, size_t n,
                                float lr, float beta1, float beta2, int step, float eps, float weight_decay,
                                float grad_scale, unsigned long long seed, cudaStream_t stream, size_t index_offset = 0) {
    if (n == 0) return;
    if (step < 1) {
        fprintf(stderr, "error: adamw_update: step must be >= 1 (got %d)\n", step);
        exit(EXIT_FAILURE);
    }
    AdamWArgs a;
    a.lr = lr;
    a.beta1 = beta1;
    a.beta2 = beta2;
    a.one_minus_beta1 = 1.0f - beta1;
    a.one_minus_beta2 = 1.0f - beta2;
    a.inv_bc1 = (float)(1.0 / (1.0 - pow((double)beta1, (double)step)));
    a.inv_bc2 = (float)(1.0 / (1.0 - pow((double)beta2, (double)step)));
    a.eps = eps;
    a.weight_decay = weight_decay;
    a.grad_scale = grad_scale;
    a.seed = seed;
    a.index0 = index_offset;
    const bool has_master = master_params != NULL;
    const bool aligned = adamw_v0::adamw_aligned16(params) && adamw_v0::adamw_aligned16(grads) && adamw_v0::adamw_aligned16(m) &&
                         adamw_v0::adamw_aligned16(v) && (!has_master || adamw_v0::adamw_aligned16(master_params));
    if (aligned) {
        const size_t nvec = n / x128::size;
        const unsigned int grid = adamw_grid(std::max<size_t>(nvec, 1));
        if (has_master) adamw_kernel<true, G><<<grid, ADAMW_THREADS, 0, stream>>>(params, master_params, grads, m, v, nvec, n, a);
        else adamw_kernel<false, G><<<grid, ADAMW_THREADS, 0, stream>>>(params, master_params, grads, m, v, nvec, n, a);
    } else {
        const unsigned int grid = adamw_grid(n);
        if (has_master) adamw_scalar_kernel<true, G><<<grid, ADAMW_THREADS, 0, stream>>>(params, master_params, grads, m, v, n, a);
        else adamw_scalar_kernel<false, G><<<grid, ADAMW_THREADS, 0, stream>>>(params, master_params, grads, m, v, n, a);
    }
    cudaCheckLaunch();
}

}  // namespace adamw_v0
