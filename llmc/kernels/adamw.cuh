// adamw.cuh - AdamW parameter update (Loshchilov & Hutter 2019, "Decoupled Weight Decay
// Regularization") with PyTorch's semantics, as gpt2_update in train_gpt2.c:
//   g    = grad * grad_scale                 (grad_scale carries clipping and loss-scale removal)
//   m    = beta1 m + (1 - beta1) g
//   v    = beta2 v + (1 - beta2) g^2
//   mhat = m / (1 - beta1^step),  vhat = v / (1 - beta2^step)      (step is 1-based)
//   p    = p - lr (mhat / (sqrt(vhat) + eps) + weight_decay p)
// all in fp32. With an fp32 master copy the master is read and updated and the floatX parameters are
// only written, as the master rounded by store_rounded (stochastic rounding for bf16).
//
// Speed: the update is a pure stream (28 bytes per parameter with a bf16 master build), so the kernel
// is shaped for DRAM: all tensors of a step in one launch (a segment table passed as a kernel
// parameter; no per-tensor launches and partial last waves), each thread owns U chunks of 4
// consecutive elements whose loads are all issued before the first use, a warp's loads are contiguous
// (16-byte fp32 and 8-byte bf16 accesses, every sector fully used), no grid-stride loop (one pass,
// blocks scheduled as SMs free up), default caching (streaming .cs hints measured 2-3% slower on the
// H100), and the stochastic-rounding state of consecutive elements stepped by one 64-bit addition (random_state in cuda_utils.cuh: the same bits).
// The results are bit-identical to the per-tensor kernel of commit 828a037 (dev/cuda/adamw.cu checks).
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <algorithm>
#include <type_traits>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"

constexpr int ADAMW_THREADS = 256;
constexpr int ADAMW_CHUNK = 4;          // consecutive elements a thread updates together
constexpr int ADAMW_UNROLL = 2;         // chunks per thread (their loads in flight together)
constexpr int ADAMW_MAX_SEGMENTS = 32;  // segments per launch (the table is a kernel parameter, < 4 KB)

// Hyper-parameters of one step, shared by every segment (fp32, exactly as the kernel uses them).
struct AdamWArgs {
    float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, inv_bc1, inv_bc2, eps, grad_scale;
};

// One tensor, or a piece of one (a ZeRO-1 shard), for adamw_update_segments. Element i of the segment
// is params[i], master[i], grads[i], m[i], v[i]; it draws its rounding bits from random_u32(seed,
// index0 + i). Any alignment (16-byte-aligned fp32 pointers and 8-byte-aligned bf16/fp16 ones take the
// vector path; others the scalar one, same results).
template <typename G>
struct AdamWSegment {
    floatX* params;      // n floatX: written (with master), or read and written (without)
    float* master;       // n fp32 or NULL (all segments of a call alike)
    const G* grads;      // n floatX or fp32
    float* m;            // n fp32
    float* v;            // n fp32
    size_t n;            // elements
    size_t index0;       // rounding stream position of element 0 (its position in its tensor)
    unsigned long long seed;
    float weight_decay;  // 0 for tensors without decay
};

// The kernel parameter of one launch: up to ADAMW_MAX_SEGMENTS non-empty segments laid end to end in
// a "chunk space" of 4-element chunks (segment s owns chunks [chunk0[s], chunk0[s + 1])).
template <typename G>
struct AdamWTable {
    AdamWSegment<G> seg[ADAMW_MAX_SEGMENTS];
    size_t chunk0[ADAMW_MAX_SEGMENTS + 1];
    unsigned int vec_mask;  // bit s: every pointer of segment s is aligned for the vector path
    int count;
};
static_assert(ADAMW_MAX_SEGMENTS <= 32, "AdamWTable::vec_mask has 32 bits");
static_assert(sizeof(AdamWTable<float>) + sizeof(AdamWArgs) <= 4096, "kernel parameters are limited to 4 KB");

// One element: updates m, v in place and returns the new parameter value.
__device__ __forceinline__ float adamw_element(float p, float grad, float& m, float& v, float weight_decay,
                                               const AdamWArgs& a) {
    const float g = grad * a.grad_scale;
    m = fmaf(a.beta1, m, a.one_minus_beta1 * g);
    v = fmaf(a.beta2, v, a.one_minus_beta2 * g * g);
    const float mhat = m * a.inv_bc1, vhat = v * a.inv_bc2;
    return p - a.lr * (mhat / (sqrtf(vhat) + a.eps) + weight_decay * p);
}

// 4 consecutive T (8 or 16 bytes, aligned to that) as floats; CS: streaming cache hint.
template <bool CS, typename T>
__device__ __forceinline__ void adamw_load4(float out[4], const T* p) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "adamw_load4: 2- or 4-byte elements");
    T t[4];
    if constexpr (sizeof(T) == 4) {
        const int4 b = CS ? __ldcs(reinterpret_cast<const int4*>(p)) : *reinterpret_cast<const int4*>(p);
        memcpy(t, &b, sizeof b);
    } else {
        const int2 b = CS ? __ldcs(reinterpret_cast<const int2*>(p)) : *reinterpret_cast<const int2*>(p);
        memcpy(t, &b, sizeof b);
    }
    #pragma unroll
    for (int k = 0; k < 4; k++) out[k] = (float)t[k];
}

// Store 4 consecutive T (8 or 16 bytes, aligned to that) given as raw T; CS: streaming cache hint.
template <bool CS, typename T>
__device__ __forceinline__ void adamw_store4(T* p, const T t[4]) {
    if constexpr (sizeof(T) == 4) {
        int4 b;
        memcpy(&b, t, sizeof b);
        if (CS) __stcs(reinterpret_cast<int4*>(p), b); else *reinterpret_cast<int4*>(p) = b;
    } else {
        int2 b;
        memcpy(&b, t, sizeof b);
        if (CS) __stcs(reinterpret_cast<int2*>(p), b); else *reinterpret_cast<int2*>(p) = b;
    }
}

// Scalar path for element i of segment sg (misaligned segments, the last chunk of a segment).
template <bool MASTER, typename G>
__device__ __forceinline__ void adamw_scalar(const AdamWSegment<G>& sg, size_t i, const AdamWArgs& a) {
    const float p_old = MASTER ? sg.master[i] : (float)sg.params[i];
    float mi = sg.m[i], vi = sg.v[i];
    const float p = adamw_element(p_old, (float)sg.grads[i], mi, vi, sg.weight_decay, a);
    sg.m[i] = mi;
    sg.v[i] = vi;
    if (MASTER) sg.master[i] = p;
    store_rounded(&sg.params[i], p, random_u32(sg.seed, sg.index0 + i));
}

// Block b covers chunks [b U T, (b + 1) U T), T = ADAMW_THREADS; thread t takes chunks b U T + u T + t
// (u < U), so a warp's accesses are contiguous. Template knobs (the defaults are the trainer's; the
// others are timed by dev/cuda/adamw.cu): U chunks per thread, CS streaming cache hints, STEP_HASH
// stepping the rounding state by addition (false: random_u32 per element; identical bits).
template <bool MASTER, typename G, int U, bool CS, bool STEP_HASH>
__global__ void __launch_bounds__(ADAMW_THREADS)
adamw_segments_kernel(const __grid_constant__ AdamWTable<G> t, const AdamWArgs a) {
    const size_t block0 = (size_t)blockIdx.x * (ADAMW_THREADS * U), total = t.chunk0[t.count];
    int lo = 0, hi = t.count - 1;  // segment of the block's first chunk (uniform): binary search
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (t.chunk0[mid] <= block0) lo = mid; else hi = mid - 1;
    }
    int s = lo;
    float g[U][4], p[U][4], mm[U][4], vv[U][4];
    int seg[U];
    size_t e[U];
    bool vec[U];
    #pragma unroll
    for (int u = 0; u < U; u++) {  // all loads first: U x (4 or 5) independent accesses in flight
        const size_t c = block0 + (size_t)u * ADAMW_THREADS + threadIdx.x;
        while (s + 1 < t.count && c >= t.chunk0[s + 1]) s++;  // chunks grow with u: the segment too
        const AdamWSegment<G>& sg = t.seg[s];
        seg[u] = s;
        e[u] = (c - t.chunk0[s]) * ADAMW_CHUNK;
        vec[u] = c < total && ((t.vec_mask >> s) & 1u) && e[u] + ADAMW_CHUNK <= sg.n;
        if (vec[u]) {
            adamw_load4<CS>(g[u], sg.grads + e[u]);
            adamw_load4<CS>(mm[u], sg.m + e[u]);
            adamw_load4<CS>(vv[u], sg.v + e[u]);
            if (MASTER) adamw_load4<CS>(p[u], sg.master + e[u]);
            else adamw_load4<false>(p[u], sg.params + e[u]);
        }
    }
    #pragma unroll
    for (int u = 0; u < U; u++) {
        const AdamWSegment<G>& sg = t.seg[seg[u]];
        if (vec[u]) {
            const unsigned long long z = random_state(sg.seed, sg.index0 + e[u]);
            floatX out[4];
            #pragma unroll
            for (int k = 0; k < 4; k++) {
                p[u][k] = adamw_element(p[u][k], g[u][k], mm[u][k], vv[u][k], sg.weight_decay, a);
                const unsigned int bits = STEP_HASH ? random_mix(z + (unsigned long long)k * RANDOM_STATE_STEP)
                                                    : random_u32(sg.seed, sg.index0 + e[u] + k);
                store_rounded(&out[k], p[u][k], bits);
            }
            adamw_store4<CS>(sg.m + e[u], mm[u]);
            adamw_store4<CS>(sg.v + e[u], vv[u]);
            if (MASTER) adamw_store4<CS>(sg.master + e[u], p[u]);
            adamw_store4<false>(sg.params + e[u], out);  // read by the next forward: default caching
        } else if (block0 + (size_t)u * ADAMW_THREADS + threadIdx.x < total) {
            const size_t end = e[u] + ADAMW_CHUNK < sg.n ? e[u] + ADAMW_CHUNK : sg.n;
            for (size_t i = e[u]; i < end; i++) adamw_scalar<MASTER, G>(sg, i, a);
        }
    }
}

static inline bool adamw_aligned(const void* p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }
static inline bool adamw_aligned16(const void* p) { return adamw_aligned(p, 16); }

// Grid for a memory-bound grid-stride kernel: enough blocks to fill the device, no more than the work.
static inline unsigned int adamw_grid(size_t work_items) {
    int dev = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const size_t full = (size_t)sms * (2048 / ADAMW_THREADS);
    const size_t need = ceil_div_sz(work_items, ADAMW_THREADS);
    return (unsigned int)std::max<size_t>(1, std::min(full, need));
}

// adamw_update_segments - one AdamW step over `count` segments (tensors or pieces of tensors), in
// ceil(non-empty segments / ADAMW_MAX_SEGMENTS) launches on `stream`.
//   segs[i]        see AdamWSegment. With master != NULL the params are OVERWRITTEN (never read) with
//                  the updated master rounded by store_rounded (bf16: stochastic rounding with
//                  random_u32(seed, index0 + j) for element j; fp16: round to nearest; fp32: copy);
//                  master, m, v updated in place. Without master (every segment NULL) the params are
//                  read, updated and written back through store_rounded. Segments must not overlap.
//                  A caller updating several tensors should give each its own seed (independent noise);
//                  one updating a tensor in pieces gives each piece its position in the tensor as
//                  index0, and so draws exactly the bits of one call over the whole tensor.
//   lr, beta1, beta2, eps: as in torch.optim.AdamW; step: 1-based step count for the bias corrections,
//                  computed in double on the host; grad_scale multiplies every gradient.
// Errors: step < 1, or master NULL for some segments and not for others -> message, exit.
// No scratch; deterministic (elementwise; the rounding bits depend only on (seed, index0 + j)).
// Bytes moved per element: 2 sizeof(floatX) + 24 (with master, floatX gradients), 3 sizeof(floatX) + 16
// (without). U, CS, STEP_HASH: kernel knobs (see adamw_segments_kernel); the defaults are the fast ones.
template <typename G, int U = ADAMW_UNROLL, bool CS = false, bool STEP_HASH = true>
static inline void adamw_update_segments(const AdamWSegment<G>* segs, int count, float lr, float beta1, float beta2,
                                         int step, float eps, float grad_scale, cudaStream_t stream) {
    if (step < 1) {
        fprintf(stderr, "error: adamw_update: step must be >= 1 (got %d)\n", step);
        exit(EXIT_FAILURE);
    }
    if (count <= 0) return;
    const bool has_master = segs[0].master != NULL;
    for (int i = 1; i < count; i++) {
        if ((segs[i].master != NULL) != has_master) {
            fprintf(stderr, "error: adamw_update_segments: segment %d %s a master copy, segment 0 %s\n", i,
                    segs[i].master ? "has" : "lacks", has_master ? "has" : "lacks");
            exit(EXIT_FAILURE);
        }
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
    a.grad_scale = grad_scale;
    AdamWTable<G> t;
    int i = 0;
    while (i < count) {
        t.count = 0;
        t.vec_mask = 0;
        t.chunk0[0] = 0;
        for (; i < count && t.count < ADAMW_MAX_SEGMENTS; i++) {
            const AdamWSegment<G>& sg = segs[i];
            if (sg.n == 0) continue;
            const bool vec = adamw_aligned(sg.params, ADAMW_CHUNK * sizeof(floatX)) &&
                             adamw_aligned(sg.grads, ADAMW_CHUNK * sizeof(G)) && adamw_aligned16(sg.m) &&
                             adamw_aligned16(sg.v) && (!has_master || adamw_aligned16(sg.master));
            t.seg[t.count] = sg;
            t.vec_mask |= (vec ? 1u : 0u) << t.count;
            t.chunk0[t.count + 1] = t.chunk0[t.count] + ceil_div_sz(sg.n, ADAMW_CHUNK);
            t.count++;
        }
        if (t.count == 0) break;
        const size_t blocks = ceil_div_sz(t.chunk0[t.count], (size_t)ADAMW_THREADS * U);
        if (blocks > 0x7FFFFFFFull) {
            fprintf(stderr, "error: adamw_update_segments: %zu elements exceed one launch\n", t.chunk0[t.count] * ADAMW_CHUNK);
            exit(EXIT_FAILURE);
        }
        if (has_master) adamw_segments_kernel<true, G, U, CS, STEP_HASH><<<(unsigned int)blocks, ADAMW_THREADS, 0, stream>>>(t, a);
        else adamw_segments_kernel<false, G, U, CS, STEP_HASH><<<(unsigned int)blocks, ADAMW_THREADS, 0, stream>>>(t, a);
        cudaCheckLaunch();
    }
}

// adamw_update - one AdamW step over one flat range of n parameters (one segment of
// adamw_update_segments: params, master_params (or NULL), grads, m, v with n elements each; element i
// draws random_u32(seed, index_offset + i); weight_decay applies to all of it). Errors: step < 1.
template <typename G>
static inline void adamw_update(floatX* params, float* master_params, const G* grads, float* m, float* v, size_t n,
                                float lr, float beta1, float beta2, int step, float eps, float weight_decay,
                                float grad_scale, unsigned long long seed, cudaStream_t stream, size_t index_offset = 0) {
    const AdamWSegment<G> sg{params, master_params, grads, m, v, n, index_offset, seed, weight_decay};
    adamw_update_segments(&sg, 1, lr, beta1, beta2, step, eps, grad_scale, stream);
}

__global__ void __launch_bounds__(ADAMW_THREADS) init_master_kernel(float* master, const floatX* params, size_t nvec, size_t n) {
    constexpr int X = x128::size, F = X / f128::size;
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t j = tid; j < nvec; j += stride) {
        const x128 p = load128cs(params + j * X);
        #pragma unroll
        for (int f = 0; f < F; f++) {
            f128 out;
            #pragma unroll
            for (int k = 0; k < 4; k++) out[k] = (float)p[f * 4 + k];
            store128(master + j * X + f * 4, out);
        }
    }
    const size_t tail = nvec * X + tid;
    if (tail < n) master[tail] = (float)params[tail];
}

// init_master_from_params - master[i] = (float)params[i] for i < n (exact widening). OVERWRITES master.
// Any alignment (vector path when both pointers are 16-byte aligned). No scratch; deterministic.
static inline void init_master_from_params(float* master, const floatX* params, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const bool aligned = adamw_aligned16(master) && adamw_aligned16(params);
    const size_t nvec = aligned ? n / x128::size : 0;  // misaligned: everything through the "tail" path below
    if (aligned) {
        init_master_kernel<<<adamw_grid(std::max<size_t>(nvec, 1)), ADAMW_THREADS, 0, stream>>>(master, params, nvec, n);
    } else {
        // one thread per element (nvec = 0 makes every element a tail element)
        init_master_kernel<<<(unsigned int)ceil_div_sz(n, ADAMW_THREADS), ADAMW_THREADS, 0, stream>>>(master, params, 0, n);
    }
    cudaCheckLaunch();
}
