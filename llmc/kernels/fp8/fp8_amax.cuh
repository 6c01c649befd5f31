// fp8_amax.cuh - per-tensor amax and FP8 scales computed on the device: fp8_amax / fp8_amax_scale (current
// scaling: a deterministic two-stage max of |x| bit patterns), fp8_compute_scale, delayed scaling over an amax
// history (fp8_delayed_scale_update, and fp8_delayed_scale_pending with the amax taken while quantizing),
// scales from an amax accumulated as bits by a producer (fp8_scale_from_amax_bits) and speculative current
// scaling (fp8_scale_speculative_check). Conventions: fp8_quant_common.cuh.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include "llmc/kernels/fp8/fp8_quant_common.cuh"

// ------------------------------------------------------------------------------------------------
// Kernels: amax and scales

// Stage 1 of amax: partials[blockIdx.x] = bit pattern of max |x| over this block's grid-stride share.
template <class T>
__global__ void __launch_bounds__(FP8Q_THREADS) fp8q_amax_partials_kernel(uint32_t* partials, const T* x, size_t n, int vec) {
    const size_t tid = (size_t)blockIdx.x * FP8Q_THREADS + threadIdx.x, nthr = (size_t)gridDim.x * FP8Q_THREADS;
    uint32_t m = 0;
    size_t done = 0;
    if (vec) {
        const size_t nc = n / 16;
        size_t p = tid;
        for (; p + nthr < nc; p += 2 * nthr) {  // two chunks in flight per thread
            float a[16], b[16];
            fp8q_load16(a, x + p * 16);
            fp8q_load16(b, x + (p + nthr) * 16);
            #pragma unroll
            for (int k = 0; k < 16; k++) m = max(m, max(abs_bits(a[k]), abs_bits(b[k])));
        }
        if (p < nc) {
            float a[16];
            fp8q_load16(a, x + p * 16);
            #pragma unroll
            for (int k = 0; k < 16; k++) m = max(m, abs_bits(a[k]));
        }
        done = nc * 16;
    }
    for (size_t i = done + tid; i < n; i += nthr) m = max(m, abs_bits((float)x[i]));
    m = block_reduce_max_u32(m);
    if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

// Stage 2 (one block): amax = max of the partials; optionally the scale and dequant scale from it.
__global__ void fp8q_amax_finalize_kernel(const uint32_t* partials, int np, float* amax_out, float* scale, float* inv_scale,
                                          FP8Kind kind, int margin, int pow2) {
    uint32_t m = 0;
    for (int i = threadIdx.x; i < np; i += blockDim.x) m = max(m, partials[i]);
    m = block_reduce_max_u32(m);
    if (threadIdx.x == 0) {
        const float amax = fp8q_amax_from_bits(m);
        if (amax_out) *amax_out = amax;
        if (scale || inv_scale) {
            const float s = fp8q_scale_from_amax(fp8_format(kind), amax, margin, pow2);
            if (scale) *scale = s;
            if (inv_scale) *inv_scale = __frcp_rn(s);
        }
    }
}

__global__ void fp8q_scale_kernel(float* scale, float* inv_scale, const float* amax, FP8Kind kind, int margin, int pow2) {
    const float s = fp8q_scale_from_amax(fp8_format(kind), *amax, margin, pow2);
    if (scale) *scale = s;
    if (inv_scale) *inv_scale = __frcp_rn(s);
}

// One warp. Recipe in fp8_delayed_scale_update's comment.
__global__ void fp8q_delayed_scale_kernel(float* history, int H, int* pos, const float* amax_now, float* scale,
                                          float* inv_scale, FP8Kind kind, int margin, int pow2) {
    uint32_t m = 0;
    for (int j = threadIdx.x; j < H; j += 32) m = max(m, abs_bits(history[j]));
    m = __reduce_max_sync(0xFFFFFFFFu, m);  // all lanes have read history[] before lane 0 writes it
    if (threadIdx.x == 0) {
        const float now = *amax_now;
        const float amax = m == 0u ? now : fp8q_amax_from_bits(m);
        const float s = fp8q_scale_from_amax(fp8_format(kind), amax, margin, pow2);
        if (scale) *scale = s;
        if (inv_scale) *inv_scale = __frcp_rn(s);
        int p = *pos % H;
        if (p < 0) p += H;
        history[p] = now;
        *pos = (p + 1) % H;
    }
}

// One warp. Recipe in fp8_delayed_scale_pending's comment.
__global__ void fp8q_delayed_pending_kernel(float* history, int H, int* pos, uint32_t* pending, float* amax_out, float* scale,
                                            float* inv_scale, FP8Kind kind, int margin, int pow2) {
    if (threadIdx.x == 0) {  // 1. the previous use's amax enters the history
        int p = *pos % H;
        if (p < 0) p += H;
        const float prev = fp8q_amax_from_bits(*pending);
        history[p] = prev;
        *pos = (p + 1) % H;
        if (amax_out) *amax_out = prev;
        *pending = 0u;  // 3. ready for this use's quantization to accumulate into
    }
    __syncwarp();
    uint32_t m = 0;
    for (int j = threadIdx.x; j < H; j += 32) m = max(m, abs_bits(history[j]));
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if (threadIdx.x == 0) {  // 2. the scale from the history
        const float s = fp8q_scale_from_amax(fp8_format(kind), fp8q_amax_from_bits(m), margin, pow2);
        if (scale) *scale = s;
        if (inv_scale) *inv_scale = __frcp_rn(s);
    }
}

// One thread: amax, scale and dequant scale from an amax accumulated as bits; then the bits are zeroed.
__global__ void fp8q_scale_from_bits_kernel(uint32_t* bits, float* amax_out, float* scale, float* inv_scale, FP8Kind kind,
                                            int margin, int pow2) {
    const float amax = fp8q_amax_from_bits(*bits);
    *bits = 0u;
    if (amax_out) *amax_out = amax;
    const float s = fp8q_scale_from_amax(fp8_format(kind), amax, margin, pow2);
    if (scale) *scale = s;
    if (inv_scale) *inv_scale = __frcp_rn(s);
}

// Speculative current scaling (fp8_scale_speculative_check). One thread.
__global__ void fp8q_speculative_check_kernel(uint32_t* bits, float* amax_out, float* scale, float* inv_scale, uint32_t* redo,
                                              unsigned long long* misses, FP8Kind kind, int margin, int pow2) {
    const float amax = fp8q_amax_from_bits(*bits);
    *bits = 0u;
    const float s = fp8q_scale_from_amax(fp8_format(kind), amax, margin, pow2);
    const uint32_t miss = __float_as_uint(s) != __float_as_uint(*scale);
    *redo = miss;
    if (miss) *misses += 1ull;
    if (amax_out) *amax_out = amax;
    *scale = s;
    *inv_scale = __frcp_rn(s);
}

// ------------------------------------------------------------------------------------------------
// Public launchers: amax and scales

// Per-tensor amax = max |x[i]| over the n elements of x (device, any layout), written to *amax_out (device,
// 1 float; overwritten). T = floatX (activations, gradients) or float (fp32 master weights); half and bf16
// both work. A NaN anywhere gives NaN (0x7FC00000); +-Inf gives +Inf; n = 0 gives 0. Deterministic
// (max of |x| bit patterns, two stages: <= 1024 block partials in `scratch`, then one block).
// scratch: FP8_QUANT_SCRATCH_FLOATS floats of device memory, overwritten. 16-byte loads when x is 16-byte
// aligned. Stream-ordered, no synchronization.
template <class T>
void fp8_amax(float* amax_out, const T* x, size_t n, float* scratch, cudaStream_t stream);

// fp8_amax plus the scale computed from it in the same launch pair: *scale = fp8_scale_pow2_from_amax
// (pow2 != 0) or fp8_scale_from_amax (pow2 == 0) for format `kind` and `margin`, *inv_scale = 1 / *scale.
// Any of amax_out / scale / inv_scale may be NULL. Scratch and determinism as fp8_amax ("current scaling").
template <class T>
void fp8_amax_scale(float* amax_out, float* scale, float* inv_scale, const T* x, size_t n, FP8Kind kind, int margin,
                    int pow2, float* scratch, cudaStream_t stream) {
    fp8q_require(scratch != NULL && (x != NULL || n == 0), "fp8_amax", "NULL scratch or input");
    const int vec = fp8q_aligned16(x);
    const size_t chunks = ceil_div_sz(n > 0 ? n : 1, (size_t)16 * FP8Q_THREADS);
    const int grid = (int)(chunks < (size_t)FP8Q_MAX_PARTIALS ? chunks : (size_t)FP8Q_MAX_PARTIALS);
    fp8q_amax_partials_kernel<T><<<grid, FP8Q_THREADS, 0, stream>>>(reinterpret_cast<uint32_t*>(scratch), x, n, vec);
    cudaCheckLaunch();
    fp8q_amax_finalize_kernel<<<1, 1024, 0, stream>>>(reinterpret_cast<const uint32_t*>(scratch), grid, amax_out, scale,
                                                       inv_scale, kind, margin, pow2);
    cudaCheckLaunch();
}

template <class T>
void fp8_amax(float* amax_out, const T* x, size_t n, float* scratch, cudaStream_t stream) {
    fp8_amax_scale(amax_out, (float*)NULL, (float*)NULL, x, n, FP8_E4M3FN, 0, 0, scratch, stream);
}

// Scale from a device amax (one thread): *scale = fp8_scale_pow2_from_amax(fmt, *amax, margin) if pow2,
// else fp8_scale_from_amax(fmt, *amax, margin) (fp8.h: amax * scale lands at max_finite / 2^margin; NaN,
// Inf or amax <= 0 give 1); *inv_scale = 1 / *scale (the dequant scale for cuBLASLt). Either output may be
// NULL. Both overwritten.
static inline void fp8_compute_scale(float* scale, float* inv_scale, const float* amax, FP8Kind kind, int margin, int pow2,
                                     cudaStream_t stream) {
    fp8q_require(amax != NULL, "fp8_compute_scale", "NULL amax");
    fp8q_scale_kernel<<<1, 1, 0, stream>>>(scale, inv_scale, amax, kind, margin, pow2);
    cudaCheckLaunch();
}

// Delayed scaling ("max over an amax history"; our own recipe in the style of Transformer Engine's delayed
// scaling). State, all on the device: amax_history[H] (a ring buffer of past amaxes) and *pos (the slot the
// next amax goes to); initialize both to zero (cudaMemsetAsync) before the first step. Call once per step t,
// after amax_t = amax of the tensor at step t is known (*amax_now, e.g. from fp8_amax). The call:
//   1. m = max(amax_history[0..H))         the largest of the previous H amaxes (slots never written are 0;
//                                           a NaN in the history makes m NaN)
//   2. if m == 0 (no history yet, or H all-zero tensors): m = amax_t   (bootstrap: the first step uses
//      current scaling instead of scale 1)
//   3. *scale = fp8_scale[_pow2]_from_amax(fmt, m, margin)  (1 if m is NaN / Inf / 0); *inv_scale = 1/*scale
//   4. amax_history[*pos] = amax_t; *pos = (*pos + 1) % H   (amax_t enters the history after use)
// So the scale used at step t depends only on amax_{t-H} .. amax_{t-1} (except the bootstrap step). With
// margin >= 1 a tensor whose amax grows by up to 2^margin between steps still does not saturate.
// scale / inv_scale may be NULL. One warp, deterministic.
static inline void fp8_delayed_scale_update(float* amax_history, int H, int* pos, const float* amax_now, float* scale,
                                            float* inv_scale, FP8Kind kind, int margin, int pow2, cudaStream_t stream) {
    fp8q_require(amax_history != NULL && pos != NULL && amax_now != NULL && H >= 1, "fp8_delayed_scale_update",
                 "needs a history of H >= 1 floats, a position and the current amax");
    fp8q_delayed_scale_kernel<<<1, 32, 0, stream>>>(amax_history, H, pos, amax_now, scale, inv_scale, kind, margin, pow2);
    cudaCheckLaunch();
}

// Delayed scaling with the amax taken while quantizing (fp8_quantize_pair's amax_accum) instead of by a
// separate fp8_amax pass: the same recipe as fp8_delayed_scale_update, with the push of amax_t moved from
// the end of use t to the start of use t + 1. Call before quantizing use t >= 1 of the tensor; *pending
// holds amax_{t-1} as bits (accumulated by the previous use's quantization). The call
//   1. amax_history[*pos] = amax_{t-1}; *pos = (*pos + 1) % H; *amax_out = amax_{t-1} (if amax_out)
//   2. *scale = fp8_scale[_pow2]_from_amax(fmt, max(amax_history), margin), *inv_scale = 1 / *scale
//   3. *pending = 0 (this use's quantization accumulates amax_t into it)
// so the scale of use t depends on amax_{t-H} .. amax_{t-1}, as with fp8_delayed_scale_update. Use 0 (the
// bootstrap) has no previous amax: take its scale by current scaling (fp8_amax_scale) and zero *pending.
// One warp, deterministic.
static inline void fp8_delayed_scale_pending(float* amax_history, int H, int* pos, uint32_t* pending, float* amax_out, float* scale,
                                             float* inv_scale, FP8Kind kind, int margin, int pow2, cudaStream_t stream) {
    fp8q_require(amax_history != NULL && pos != NULL && pending != NULL && H >= 1, "fp8_delayed_scale_pending",
                 "needs a history of H >= 1 floats, a position and the pending amax");
    fp8q_delayed_pending_kernel<<<1, 32, 0, stream>>>(amax_history, H, pos, pending, amax_out, scale, inv_scale, kind, margin, pow2);
    cudaCheckLaunch();
}

// Current scaling from an amax accumulated as bits by the kernel that produced the tensor (an "amax slot":
// integer atomicMax of |x| bit patterns, see fp8_quantize_pair): *amax_out = the amax (NaN for a NaN
// pattern), *scale / *inv_scale from it as fp8_amax_scale, then *bits = 0 (ready for the next producer).
// Any output may be NULL. One thread.
static inline void fp8_scale_from_amax_bits(uint32_t* bits, float* amax_out, float* scale, float* inv_scale, FP8Kind kind, int margin,
                                            int pow2, cudaStream_t stream) {
    fp8q_require(bits != NULL, "fp8_scale_from_amax_bits", "NULL amax bits");
    fp8q_scale_from_bits_kernel<<<1, 1, 0, stream>>>(bits, amax_out, scale, inv_scale, kind, margin, pow2);
    cudaCheckLaunch();
}

// Speculative current scaling (issue 17): a producer quantized its output with a guessed QUANT scale *scale
// (the previous use's) while accumulating the amax of the output into *bits (as fp8_quantize_pair's
// amax_accum). This sets *scale / *inv_scale (and *amax_out, may be NULL) to what current scaling computes
// from that amax (fp8_amax_scale), zeroes *bits, and sets *redo = 1 (and *misses += 1) when the guess was not
// that scale, else *redo = 0. The caller then re-quantizes with run_if = redo (fp8_quantize_pair_from), so
// the final codes are those of current scaling whatever the guess: with pow2 scales the guess is right
// whenever the amax stayed within the same power-of-two range. One thread, no host synchronization.
static inline void fp8_scale_speculative_check(uint32_t* bits, float* amax_out, float* scale, float* inv_scale, uint32_t* redo,
                                               unsigned long long* misses, FP8Kind kind, int margin, int pow2, cudaStream_t stream) {
    fp8q_require(bits != NULL && scale != NULL && inv_scale != NULL && redo != NULL && misses != NULL, "fp8_scale_speculative_check",
                 "NULL argument");
    fp8q_speculative_check_kernel<<<1, 1, 0, stream>>>(bits, amax_out, scale, inv_scale, redo, misses, kind, margin, pow2);
    cudaCheckLaunch();
}
