// cuda_utils.cuh - device helpers shared by the kernel families: 16-byte vector access and
// warp/block reductions.
#pragma once

#include <cuda_runtime.h>
#include "llmc/core/cuda_common.cuh"

// ---- 16-byte packets ------------------------------------------------------------------------------
// A Packed128<T> holds 16 bytes of T (8 bf16/fp16 or 4 floats) so that one load or store instruction
// moves a whole packet (LDG.128 / STG.128). Pointers passed to load128/store128 must be 16-byte aligned.

template <class T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / sizeof(T);
    T payload[size];

    Packed128() = default;
    __device__ static Packed128 constant(T value) {
        Packed128 r;
        #pragma unroll
        for (int k = 0; k < size; k++) r.payload[k] = value;
        return r;
    }
    __device__ static Packed128 zeros() { return constant((T)0.0f); }
    __device__ T& operator[](int i) { return payload[i]; }
    __device__ const T& operator[](int i) const { return payload[i]; }
    __device__ int4 get_bits() const { int4 bits; memcpy(&bits, payload, sizeof(bits)); return bits; }
    __device__ static Packed128 from_bits(int4 bits) { Packed128 r; memcpy(r.payload, &bits, sizeof(bits)); return r; }
};

typedef Packed128<floatX> x128;
typedef Packed128<float> f128;

// Load 16 bytes through the normal (cached) path.
template <class T>
__device__ __forceinline__ Packed128<T> load128(const T* address) {
    return Packed128<T>::from_bits(*reinterpret_cast<const int4*>(address));
}

// Load 16 bytes with the streaming (evict-first) hint: for data read once.
template <class T>
__device__ __forceinline__ Packed128<T> load128cs(const T* address) {
    return Packed128<T>::from_bits(__ldcs(reinterpret_cast<const int4*>(address)));
}

template <class T>
__device__ __forceinline__ void store128(T* target, Packed128<T> value) {
    *reinterpret_cast<int4*>(target) = value.get_bits();
}

// Store 16 bytes with the streaming hint: for data not read again soon.
template <class T>
__device__ __forceinline__ void store128cs(T* target, Packed128<T> value) {
    __stcs(reinterpret_cast<int4*>(target), value.get_bits());
}

// ---- reductions -------------------------------------------------------------------------------------
// Butterfly reductions: every lane ends with the result, and the summation order is fixed, so the
// result is deterministic.

__device__ __forceinline__ float warp_reduce_sum(float v) {
    #pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_reduce_max(float v) {
    #pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    return v;
}

// Sum of v over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. Uses 32 floats of shared memory; safe to call repeatedly (synchronizes before reuse).
__device__ __forceinline__ float block_reduce_sum(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_reduce_sum(v);
    __syncthreads();  // protect partial[] from a previous call still being read
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < nwarps ? partial[lane] : 0.0f;
    return warp_reduce_sum(v);
}

__device__ __forceinline__ float block_reduce_max(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = warp_reduce_max(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < nwarps ? partial[lane] : -INFINITY;
    return warp_reduce_max(v);
}

// ---- amax as integer bit patterns (FP8 scaling) -------------------------------------------------------
// |v| as its IEEE bit pattern: for non-negative floats the unsigned order is the value order, and every
// NaN (any sign, any payload) gives a pattern above +Inf's 0x7F800000, so an integer max of these
// patterns is max |v| with NaN winning. Integer max is order independent: reductions are deterministic.
__device__ __forceinline__ unsigned int abs_bits(float v) { return __float_as_uint(v) & 0x7FFFFFFFu; }

// Max of v over the whole block (blockDim.x a multiple of 32, at most 1024); every thread must call it and
// gets the result. 32 words of shared memory; safe to call repeatedly.
__device__ __forceinline__ unsigned int block_reduce_max_u32(unsigned int v) {
    __shared__ unsigned int partial_u32[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    v = __reduce_max_sync(0xFFFFFFFFu, v);
    __syncthreads();  // protect partial_u32[] from a previous call still being read
    if (lane == 0) partial_u32[warp] = v;
    __syncthreads();
    v = lane < nwarps ? partial_u32[lane] : 0u;
    return __reduce_max_sync(0xFFFFFFFFu, v);
}

// *amax = max(*amax, the block's max of m): one integer atomicMax per block (none when the max is 0).
// The accumulation behind the FP8 amax slots (gemm_amax_slot, fp8_quantize_pair). Every thread of the
// block must call it.
__device__ __forceinline__ void block_amax_accumulate(unsigned int* amax, unsigned int m) {
    m = block_reduce_max_u32(m);
    if (threadIdx.x == 0 && m != 0u) atomicMax(amax, m);
}

// *amax = max(*amax, the warp's max of m), for kernels that store per warp (the attention epilogues).
// All 32 lanes of the warp must call it. Thousands of warps target one address, so lane 0 reads the
// current value first (from L2) and issues the atomicMax only when its max is larger: atomics to one
// address serialize, reads do not. A stale read only costs an atomic that changes nothing, so the
// result is the exact max.
__device__ __forceinline__ void warp_amax_accumulate(unsigned int* amax, unsigned int m) {
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if ((threadIdx.x & 31) == 0 && m > __ldcg(amax)) atomicMax(amax, m);
}

// ---- stochastic rounding ----------------------------------------------------------------------------

// Counter-based hash (SplitMix64 finalizer) of (seed, index) -> 32 random bits: reproducible, no state.
// random_u32(seed, index) = random_mix(random_state(seed, index)). The state is linear in the index
// (mod 2^64): random_state(seed, index + k) = random_state(seed, index) + k * RANDOM_STATE_STEP, so a
// thread drawing consecutive indices may step the state by that addition and get exactly the same bits
// (used by adamw.cuh; the multiplication it saves is one of three 64-bit ones per draw).
constexpr unsigned long long RANDOM_STATE_STEP = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio (SplitMix64)

__device__ __forceinline__ unsigned long long random_state(unsigned long long seed, unsigned long long index) {
    return seed + RANDOM_STATE_STEP * (index + 1);
}

// SplitMix64's finalizer (Steele, Lea, Flood 2014): a bijective 64-bit mix; also the fingerprint mix of
// llmc/kernels/gemm/gemm_tune.cuh.
__host__ __device__ __forceinline__ unsigned long long splitmix64_mix(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ unsigned int random_mix(unsigned long long z) {
    return (unsigned int)(splitmix64_mix(z) >> 32);
}

__device__ __forceinline__ unsigned int random_u32(unsigned long long seed, unsigned long long index) {
    return random_mix(random_state(seed, index));
}

// Round fp32 x to bf16 stochastically: up with probability equal to the distance to the lower
// neighbour in units of the bf16 spacing (unbiased: E[result] = x). `bits` are 32 random bits; only
// the low 16 are used. Inf/NaN pass through (NaN stays NaN).
__device__ __forceinline__ __nv_bfloat16 stochastic_round_bf16(float x, unsigned int bits) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7F800000u) == 0x7F800000u) return __float2bfloat16_rn(x);  // Inf / NaN
    unsigned int rounded = (u + (bits & 0xFFFFu)) & 0xFFFF0000u;           // add noise below the cut, truncate
    return __float2bfloat16_rz(__uint_as_float(rounded));
}

// Store fp32 x into floatX: stochastic rounding for bf16 (the AdamW master -> parameter copy),
// round-to-nearest for fp16 and plain copy for fp32.
__device__ __forceinline__ void store_rounded(floatX* dst, float x, unsigned int bits) {
#if defined(ENABLE_BF16)
    *dst = stochastic_round_bf16(x, bits);
#else
    (void)bits;
    *dst = (floatX)x;
#endif
}

// dst[i] = (float)src[i] for i < n (exact widening), grid-stride; any alignment. Internal linkage (static), like the
// launcher: translation units that include this header and are linked together (a harness and the CUTLASS objects of
// llmc/kernels/gemm/cutlass_tcast_*.cu) must not each export it.
static __global__ void widen_to_float_kernel(float* dst, const floatX* src, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = (float)src[i];
}

// Launch widen_to_float_kernel for n elements on `stream`.
static inline void widen_to_float(float* dst, const floatX* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    const size_t blocks = (n + 255) / 256;
    widen_to_float_kernel<<<(unsigned int)(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(dst, src, n);
    cudaCheckLaunch();
}
