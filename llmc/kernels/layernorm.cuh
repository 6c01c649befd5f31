// layernorm.cuh - LayerNorm over the channels of each row (Ba et al. 2016), eps 1e-5, biased variance,
// fp32 statistics; forward, forward fused with the residual add before it, and backward.
// Formulas: train_gpt2.c layernorm_forward / layernorm_backward / residual_forward.
//
//   forward   mean = sum(x)/C, var = sum((x-mean)^2)/C (two passes over registers), rstd = 1/sqrt(var+1e-5)
//             (the two divisions and the add rounded to nearest, whatever the fast-math flags)
//             out = (x - mean) * rstd * weight + bias
//   backward  xhat = (x - mean) * rstd, dxhat = dout * weight
//             dinp    += rstd * (dxhat - mean_c(dxhat) - xhat * mean_c(dxhat * xhat))
//             dweight += sum_rows(dout * xhat),  dbias += sum_rows(dout)
//
// All tensors are row-major: N rows of C channels (N = B*T). C must be a multiple of x128::size =
// 16 / sizeof(floatX) (8 for bf16/fp16, 4 for fp32) because rows are read and written as 16-byte
// vectors; the launchers check it and the 16-byte alignment of the floatX pointers.
//
// Layout of the work: a row is owned by one warp (the fast "warp path") when a lane holds at most 16
// packets of it in the forward (bf16/fp16 C <= 4096, fp32 C <= 2048) and at most 7 in the backward
// (bf16/fp16 C <= 1792, fp32 C <= 896); larger rows are owned by a whole block of 256 threads (the
// "block path": forward up to bf16/fp16 C = 32768, fp32 16384; backward up to 8192 / 4096; larger C
// is refused with a message). Either way the row stays in registers between the passes, so every
// element is read from memory once.
//
// Optional amax (FP8 current scaling): each launcher takes a last argument `unsigned int* amax_out`
// (default NULL). When non-NULL, the kernel also max-reduces into *amax_out the bits
// __float_as_uint(v) & 0x7FFFFFFF (= |v| as an IEEE pattern) of every value v of its main output as
// stored (forward: `out`; backward: `dinp`), so the FP8 GEMM that reads the tensor gets its amax without
// another pass over it. For non-negative floats the integer order of the patterns is the value order,
// and every NaN pattern (> 0x7F800000) beats +Inf, so a NaN anywhere gives a NaN amax. Within a block the
// patterns are reduced with __reduce_max_sync and shared memory, then one integer atomicMax per block:
// order-independent, hence deterministic. It ACCUMULATES (max with the old value): the caller sets
// *amax_out = 0 before the producer runs. The choice is a template parameter (AMAX) picked by the
// launcher, so with amax_out = NULL the kernels are the same code as without the feature.
//
// Optional sink (what a mode does with the rows as they pass, e.g. the TensorCast cast of `out` that the
// next GEMM reads, or the boundary-site casts of the tensors around the LayerNorm:
// llmc/kernels/tcast/tcast_producers.cuh): layernorm_forward_sink runs the same row kernel with a Sink that
// sees, and may change, every packet of inp2, of the residual and of `out` before the kernel goes on with it
// (see LnNoSink for the contract). The plain launchers pass LnNoSink, whose calls compile to nothing, so their
// kernels are the code they were without sinks.
//
// Determinism: forward is per row. Backward: dinp per row; dweight/dbias go through per-block fp32
// partial sums written to `scratch` (rows of each block in a fixed order) and a second kernel that adds
// the block partials in block order and adds the total once into dweight/dbias. The number of blocks
// depends on N only (layernorm_backward_blocks), so results are bit-identical from run to run and do
// not depend on the GPU model.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"

#define LAYERNORM_EPS 1e-5f
#define LN_THREADS 256  // threads per block of the row kernels
// The forward's warp path (a warp per row) holds at most this many packets per lane; wider rows take the
// block path. layernorm_forward_sink needs the warp path.
static constexpr int LN_WARP_PPL_MAX = 16;

// Sum over the threads that own one row: a warp (TPR = 32) or the whole block (TPR = LN_THREADS).
template <int TPR>
__device__ __forceinline__ float ln_row_sum(float v) {
    if constexpr (TPR == 32) return warp_reduce_sum(v);
    else return block_reduce_sum(v);
}

// ---------------------------------------------------------------------------------------------------
// Forward

// The sink of the plain kernels, and the contract of every Sink of layernorm_forward_sink. Each hook is
// called for every k < PPT at which some thread of the row holds a packet (k * TPR < C / 8), by all TPR
// threads of the row together (warp-uniform), lane l of a warp holding the row's packet 32 * j + l for some
// j, so a sink may combine the packets of consecutive lanes with warp shuffles. v: the 8 values at flat
// row-major indices e0 .. e0 + 7 of an (N, C) tensor; valid false: the thread holds no packet there (v
// undefined, and whatever the hook leaves in it unused). A hook may change v: the kernel goes on with v as
// the hook leaves it. Rows >= N: their warps never call (they return before the row's loads).
//   kInputs   false: in2 and res are never called (no code). Called by the FUSED kernels only:
//     in2(v, valid, e0)     v: the packet of inp2 as loaded, before the residual add reads it;
//     res(v, valid, e0)     v: the residual packet, round(boundary<RESIDUAL_OUT>(inp1 + inp2)), before it is
//                           stored and normalized (the row statistics and out come from v as left);
//   kOn       false: packet is never called (no code).
//     packet(v, valid, e0)  v: the packet of `out` (after the rounding to floatX and boundary_value) before
//                           it is stored: v as left is what is stored.
//   kMaxPPL   the widest row layernorm_forward_sink instantiates the sink's kernels for, in packets per lane
//             (8: C <= 2048 in BF16; LN_WARP_PPL_MAX: the whole warp path), so that a sink with much code
//             per packet need not compile the widest kernels (layernorm_forward_sink_fits).
//   kOut      false: out is neither computed nor stored (weight, bias and out are not read or written; kOn must be
//             false): the kernel writes the residual (FUSED) and the row statistics only (LnStatsOnly).
struct LnNoSink {
    static constexpr bool kInputs = false;
    static constexpr bool kOn = false;
    static constexpr bool kOut = true;
    static constexpr int kMaxPPL = LN_WARP_PPL_MAX;
    __device__ __forceinline__ void in2(x128&, bool, size_t) const {}
    __device__ __forceinline__ void res(x128&, bool, size_t) const {}
    __device__ __forceinline__ void packet(x128&, bool, size_t) const {}
};

// The statistics-only sink (layernorm_forward_stats; stateless): the residual (FUSED) and mean / rstd, no out. For a
// consumer that computes out itself from them (ln_out_value), e.g. the FP8 backend's quantization of the next GEMM's
// input (llmc/kernels/fp8/lowp_producers.cuh LowpSrcLayernorm).
struct LnStatsOnly : LnNoSink {
    static constexpr bool kOut = false;
};

// One value of out before its rounding to floatX: boundary<LAYERNORM_OUT>((x - mean) * rstd * weight + bias), x the
// (rounded) value the row statistics were taken of. The one expression of it, so that a consumer computing out from
// the statistics (LnStatsOnly) gets the kernel's bits.
template <bool CNT = true>
__device__ __forceinline__ float ln_out_value(float x, float m, float s, float w, float b) {
    return boundary_value<LAYERNORM_OUT, CNT>((x - m) * s * w + b);
}

// inp2 of the fused residual add: a projection GEMM's output (attproj, fcproj), read through the MATMUL_OUT boundary
// (SF16: Q1.15; not counted, since a --q115-stats forward bounds it in the GEMM front, which counts), so that the GEMM
// may leave the boundary to this reader (GemmContext::out_cast_by_reader): idempotent on a value already bounded.
__device__ __forceinline__ float ln_projection_value(float v) {
    if constexpr (boundary_is_identity<MATMUL_OUT>()) return v;
    else return boundary_stored_value_units<false, MATMUL_OUT>(v) * boundary_unit();
}

// The work of one thread of layernorm_forward_kernel: row `row` is owned by TPR threads; thread t holds
// packets p = t + TPR*k (k < PPT, p < C/x128::size). Threads past the last row return at once.
// FUSED: x = round(boundary<RESIDUAL_OUT>(inp1 + Q(inp2))) is stored to `residual` and normalized (ln_projection_value).
// Returns the max of abs_bits over the out values this thread stored if AMAX, else 0.
// The packets of inp2, the residual and out pass the sink's hooks (LnNoSink contract; LnNoSink: no code).
// CNT: whether the boundary hooks may count (the --q115-stats instantiation, boundary_with_count).
template <int TPR, int PPT, bool FUSED, bool AMAX, class Sink, bool CNT = true>
__device__ __forceinline__ unsigned int
layernorm_forward_thread(floatX* __restrict__ residual, floatX* __restrict__ out, float* __restrict__ mean,
                         float* __restrict__ rstd, const floatX* __restrict__ inp1, const floatX* __restrict__ inp2,
                         const floatX* __restrict__ weight, const floatX* __restrict__ bias, int N, int C, const Sink& sink) {
    constexpr int X = x128::size;
    constexpr int ROWS = LN_THREADS / TPR;
    const int t = threadIdx.x % TPR;
    const int row = blockIdx.x * ROWS + threadIdx.x / TPR;
    if (row >= N) return 0u;  // whole warps (warp path); block path has exactly one row per block
    const int P = C / X;
    const size_t base = (size_t)row * C;

    static_assert(!(AMAX && Sink::kOn), "layernorm_forward_thread: amax of out with a sink that may change out");
    static_assert(Sink::kOut || !(AMAX || Sink::kOn), "layernorm_forward_thread: no out (kOut false) with amax or kOn");
    x128 xv[PPT];
    float sum = 0.0f;
    #pragma unroll
    for (int k = 0; k < PPT; k++) {
        const int p = t + k * TPR;
        if constexpr (FUSED && Sink::kInputs) {
            // the plain loop below with the sink's hooks on inp2 and the residual (outside the ifs: every thread)
            const bool valid = p < P;
            const size_t e0 = base + (size_t)p * X;
            x128 a, b;
            if (valid) {
                a = load128cs(inp1 + e0);
                b = load128cs(inp2 + e0);
            }
            const bool any = k * TPR < P;  // uniform: some thread of the row holds a packet at k
            if (any) sink.in2(b, valid, e0);
            if (valid) {
                #pragma unroll
                for (int i = 0; i < X; i++) xv[k][i] = (floatX)boundary_value<RESIDUAL_OUT, CNT>((float)a[i] + ln_projection_value((float)b[i]));
            }
            if (any) sink.res(xv[k], valid, e0);
            if (valid) {
                store128(residual + e0, xv[k]);
                #pragma unroll
                for (int i = 0; i < X; i++) sum += (float)xv[k][i];
            }
        } else if (p < P) {
            if constexpr (FUSED) {
                const x128 a = load128cs(inp1 + base + p * X);
                const x128 b = load128cs(inp2 + base + p * X);
                #pragma unroll
                for (int i = 0; i < X; i++)
                    xv[k][i] = (floatX)boundary_value<RESIDUAL_OUT, CNT>((float)a[i] + ln_projection_value((float)b[i]));
                store128(residual + base + p * X, xv[k]);
            } else {
                xv[k] = load128cs(inp1 + base + p * X);
            }
            #pragma unroll
            for (int i = 0; i < X; i++) sum += (float)xv[k][i];
        }
    }
    // The row's scalars with explicitly rounded division and add: under --use_fast_math `/` is an approximate reciprocal
    // and multiply, which ptxas may fuse with the neighbouring add or subtract into an FMA or not depending on the code
    // around it, so kernels with and without the output loop (layernorm_forward_stats) gave mean / rstd an ulp apart at
    // C = 768 and 1600 (measured; exact at powers of two). Once per row: no cost.
    const float m = __fdiv_rn(ln_row_sum<TPR>(sum), (float)C);
    float var = 0.0f;
    #pragma unroll
    for (int k = 0; k < PPT; k++) {
        if (t + k * TPR < P) {
            #pragma unroll
            for (int i = 0; i < X; i++) {
                const float d = (float)xv[k][i] - m;
                var += d * d;
            }
        }
    }
    const float s = rsqrtf(__fadd_rn(__fdiv_rn(ln_row_sum<TPR>(var), (float)C), LAYERNORM_EPS));
    unsigned int amax = 0u;
    #pragma unroll
    for (int k = 0; k < (Sink::kOut ? PPT : 0); k++) {
        const int p = t + k * TPR;
        x128 o;
        if (p < P) {
            const x128 w = load128(weight + p * X);
            const x128 b = load128(bias + p * X);
            #pragma unroll
            for (int i = 0; i < X; i++) {
                o[i] = (floatX)ln_out_value<CNT>((float)xv[k][i], m, s, (float)w[i], (float)b[i]);
                if constexpr (AMAX) amax = max(amax, abs_bits((float)o[i]));  // the value as stored
            }
            if constexpr (!Sink::kOn) store128(out + base + p * X, o);
        }
        if constexpr (Sink::kOn) {
            if (k * TPR < P) sink.packet(o, p < P, base + (size_t)p * X);  // outside the if: every thread of the row
            if (p < P) store128(out + base + p * X, o);
        }
    }
    if (t == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = s;
    }
    return amax;
}

// One row per TPR threads: LN_THREADS / TPR rows per block (warp path 8, block path 1).
// AMAX: also atomicMax(amax_out, max abs_bits(out)) once per block (block_amax_accumulate); threads
// past the last row come back from layernorm_forward_thread with 0 and still take part in it. CNT: see
// layernorm_forward_thread.
// Sink: a stateless sink (LnNoSink; LnStatsOnly for layernorm_forward_stats), default-constructed.
template <int TPR, int PPT, bool FUSED, bool AMAX, bool CNT, class Sink = LnNoSink>
__global__ void __launch_bounds__(LN_THREADS)
layernorm_forward_kernel(floatX* __restrict__ residual, floatX* __restrict__ out, float* __restrict__ mean,
                         float* __restrict__ rstd, const floatX* __restrict__ inp1, const floatX* __restrict__ inp2,
                         const floatX* __restrict__ weight, const floatX* __restrict__ bias, int N, int C,
                         unsigned int* __restrict__ amax_out) {
    const unsigned int amax =
        layernorm_forward_thread<TPR, PPT, FUSED, AMAX, Sink, CNT>(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C, Sink());
    if constexpr (AMAX) block_amax_accumulate(amax_out, amax);
}

// The same rows with a sink (layernorm_forward_sink): no amax.
template <int TPR, int PPT, bool FUSED, class Sink>
__global__ void __launch_bounds__(LN_THREADS)
layernorm_forward_sink_kernel(floatX* __restrict__ residual, floatX* __restrict__ out, float* __restrict__ mean,
                              float* __restrict__ rstd, const floatX* __restrict__ inp1, const floatX* __restrict__ inp2,
                              const floatX* __restrict__ weight, const floatX* __restrict__ bias, int N, int C,
                              const __grid_constant__ Sink sink) {
    layernorm_forward_thread<TPR, PPT, FUSED, false>(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C, sink);
}

static inline void layernorm_check_args(const char* who, int N, int C, const void* const* ptrs, const char* const* names,
                                        int nptrs) {
    if (N < 0 || C <= 0 || C % x128::size != 0) {
        fprintf(stderr, "error: %s: N = %d, C = %d: C must be a positive multiple of %d (16-byte vectors of %d-byte floatX)\n",
                who, N, C, x128::size, (int)sizeof(floatX));
        exit(EXIT_FAILURE);
    }
    for (int i = 0; i < nptrs; i++)
        if (((uintptr_t)ptrs[i] & 15u) != 0) {
            fprintf(stderr, "error: %s: %s = %p is not 16-byte aligned\n", who, names[i], ptrs[i]);
            exit(EXIT_FAILURE);
        }
}

// Whether rows of C channels take the forward's warp path (at most LN_WARP_PPL_MAX packets per lane).
static inline bool layernorm_forward_warp_path(int C) { return ceil_div(C / x128::size, 32) <= LN_WARP_PPL_MAX; }

// Whether layernorm_forward_sink runs rows of C channels with Sink: the warp path, at most Sink::kMaxPPL packets per lane.
template <class Sink>
static inline bool layernorm_forward_sink_fits(int C) {
    static_assert(Sink::kMaxPPL == 8 || Sink::kMaxPPL == LN_WARP_PPL_MAX, "Sink::kMaxPPL: 8 or LN_WARP_PPL_MAX");
    return layernorm_forward_warp_path(C) && ceil_div(C / x128::size, 32) <= Sink::kMaxPPL;
}

template <bool FUSED, bool AMAX, class Sink = LnNoSink>
static inline void layernorm_forward_dispatch(const char* who, floatX* residual, floatX* out, float* mean, float* rstd,
                                              const floatX* inp1, const floatX* inp2, const floatX* weight,
                                              const floatX* bias, int N, int C, unsigned int* amax_out,
                                              cudaStream_t stream) {
    if (N == 0) return;
    const int P = C / x128::size;
    const int ppl = ceil_div(P, 32);  // packets per lane on the warp path
    const int warp_blocks = ceil_div(N, LN_THREADS / 32);
    boundary_with_count([&](auto cnt) {  // the counting instantiation while --q115-stats counts
        constexpr bool CNT = decltype(cnt)::value;
#define LN_FWD(TPR, PPT, BLOCKS) \
        layernorm_forward_kernel<TPR, PPT, FUSED, AMAX, CNT, Sink><<<BLOCKS, LN_THREADS, 0, stream>>>(residual, out, mean, rstd, inp1, \
                                                                                                      inp2, weight, bias, N, C, amax_out)
        if (ppl <= 1) LN_FWD(32, 1, warp_blocks);
        else if (ppl <= 2) LN_FWD(32, 2, warp_blocks);
        else if (ppl <= 3) LN_FWD(32, 3, warp_blocks);
        else if (ppl <= 4) LN_FWD(32, 4, warp_blocks);
        else if (ppl <= 5) LN_FWD(32, 5, warp_blocks);
        else if (ppl <= 6) LN_FWD(32, 6, warp_blocks);
        else if (ppl <= 7) LN_FWD(32, 7, warp_blocks);
        else if (ppl <= 8) LN_FWD(32, 8, warp_blocks);
        else if (ppl <= 10) LN_FWD(32, 10, warp_blocks);
        else if (ppl <= 12) LN_FWD(32, 12, warp_blocks);
        else if (ppl <= LN_WARP_PPL_MAX) LN_FWD(32, LN_WARP_PPL_MAX, warp_blocks);
        else {
            const int ppt = ceil_div(P, LN_THREADS);  // packets per thread on the block path
            if (ppt <= 4) LN_FWD(LN_THREADS, 4, N);
            else if (ppt <= 8) LN_FWD(LN_THREADS, 8, N);
            else if (ppt <= 16) LN_FWD(LN_THREADS, 16, N);
            else {
                fprintf(stderr, "error: %s: C = %d too large (at most %d)\n", who, C, 16 * LN_THREADS * x128::size);
                exit(EXIT_FAILURE);
            }
        }
#undef LN_FWD
    });
    cudaCheckLaunch();
}

// out = LayerNorm(inp) * weight + bias   [formula: train_gpt2.c layernorm_forward]
//   out        (N,C) floatX, overwritten; each value passes boundary_value<LAYERNORM_OUT> before the store.
//   mean, rstd (N) fp32, overwritten with the row statistics the backward needs; either may be NULL.
//   inp        (N,C) floatX; weight, bias (C) floatX.
//   amax_out   optional (NULL: off) single unsigned int, ACCUMULATED: *amax_out = max(*amax_out, max over
//              all N*C stored out values v of __float_as_uint((float)v) & 0x7FFFFFFF), i.e. the bits of
//              max |out| after the rounding to floatX and boundary_value; a NaN in out gives a NaN
//              pattern (> 0x7F800000). It accumulates: the caller sets *amax_out = 0 before the producer
//              runs (e.g. cudaMemsetAsync on `stream`); N = 0 leaves it untouched. One integer atomicMax
//              per thread block: deterministic. NULL runs the same code as before the option existed.
// Statistics in fp32: two-pass mean/variance over the row held in registers; rstd = rsqrtf(var + 1e-5).
// Requires C % x128::size == 0, 16-byte aligned floatX pointers (checked); out must not overlap inp.
// No scratch. Deterministic (per row, fixed reduction tree).
static inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                                     const floatX* bias, int N, int C, cudaStream_t stream,
                                     unsigned int* amax_out = nullptr) {
    const void* ptrs[] = {out, inp, weight, bias};
    const char* names[] = {"out", "inp", "weight", "bias"};
    layernorm_check_args("layernorm_forward", N, C, ptrs, names, 4);
    if (amax_out)
        layernorm_forward_dispatch<false, true>("layernorm_forward", nullptr, out, mean, rstd, inp, nullptr, weight, bias,
                                                N, C, amax_out, stream);
    else
        layernorm_forward_dispatch<false, false>("layernorm_forward", nullptr, out, mean, rstd, inp, nullptr, weight,
                                                 bias, N, C, nullptr, stream);
}

// residual = inp1 + inp2; out = LayerNorm(residual) * weight + bias   [train_gpt2.c residual_forward + layernorm_forward]
//   residual   (N,C) floatX, overwritten with round(boundary_value<RESIDUAL_OUT>(inp1 + Q(inp2))) (sum in fp32), Q the
//              MATMUL_OUT boundary (ln_projection_value: inp2 is a projection's output; the identity outside SF16).
//   out        (N,C) floatX, overwritten; through boundary_value<LAYERNORM_OUT>.
//   mean, rstd (N) fp32, overwritten; either may be NULL.
//   inp1, inp2 (N,C) floatX; weight, bias (C) floatX.
//   amax_out   optional (NULL: off), ACCUMULATED max |out| bits exactly as in layernorm_forward (of `out`
//              only, not of `residual`); the caller sets *amax_out = 0 before the producer runs.
// The LayerNorm normalizes the stored (rounded) residual, so layernorm_backward(..., inp = residual, ...)
// sees exactly the tensor the forward normalized. residual and out must not overlap each other or the
// inputs. Requirements, scratch, determinism: as layernorm_forward.
static inline void fused_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                                    const floatX* inp1, const floatX* inp2, const floatX* weight,
                                                    const floatX* bias, int N, int C, cudaStream_t stream,
                                                    unsigned int* amax_out = nullptr) {
    const void* ptrs[] = {residual, out, inp1, inp2, weight, bias};
    const char* names[] = {"residual", "out", "inp1", "inp2", "weight", "bias"};
    layernorm_check_args("fused_residual_layernorm_forward", N, C, ptrs, names, 6);
    if (amax_out)
        layernorm_forward_dispatch<true, true>("fused_residual_layernorm_forward", residual, out, mean, rstd, inp1, inp2,
                                               weight, bias, N, C, amax_out, stream);
    else
        layernorm_forward_dispatch<true, false>("fused_residual_layernorm_forward", residual, out, mean, rstd, inp1,
                                                inp2, weight, bias, N, C, nullptr, stream);
}

// layernorm_forward (FUSED false; residual and inp2 unused, may be NULL) or fused_residual_layernorm_forward
// (FUSED true) whose packets of inp2 (FUSED), the residual (FUSED) and out also pass `sink` (contract:
// LnNoSink), e.g. a producer that writes a second output from them or changes them on the way: with a sink
// that changes nothing, the same outputs, bits, requirements and errors as those launchers, without amax;
// else those of the launchers run on the tensors as the sink changes them. Warp path only, and at most
// Sink::kMaxPPL packets per lane (layernorm_forward_sink_fits(C): C <= 4096 or 2048 in BF16); wider rows:
// error (exit). Packets per lane rounded up to 2, 4, 8 or 16 (the extra ones hold no packet: the same bits,
// some registers more), so that a (FUSED, Sink) is 4 kernels (3 with kMaxPPL 8), not 11 (compile time of the
// sinks' builds).
template <bool FUSED, class Sink>
static inline void layernorm_forward_sink(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                          const floatX* inp2, const floatX* weight, const floatX* bias, int N, int C,
                                          const Sink& sink, cudaStream_t stream) {
    const char* who = "layernorm_forward_sink";
    const void* ptrs[] = {out, inp1, weight, bias, FUSED ? residual : out, FUSED ? inp2 : inp1};
    const char* names[] = {"out", "inp1", "weight", "bias", "residual", "inp2"};
    layernorm_check_args(who, N, C, ptrs, names, 6);
    if (!layernorm_forward_sink_fits<Sink>(C)) {
        fprintf(stderr, "error: %s: C = %d is wider than this sink's kernels (%d packets per lane%s)\n", who, C, Sink::kMaxPPL,
                layernorm_forward_warp_path(C) ? "" : "; the block path has no sink");
        exit(EXIT_FAILURE);
    }
    if (N == 0) return;
    const int ppl = ceil_div(C / x128::size, 32), blocks = ceil_div(N, LN_THREADS / 32);
#define LN_SINK(PPT) \
    layernorm_forward_sink_kernel<32, PPT, FUSED, Sink><<<blocks, LN_THREADS, 0, stream>>>(residual, out, mean, rstd, inp1, inp2, \
                                                                                         weight, bias, N, C, sink)
    if (ppl <= 2) LN_SINK(2);
    else if (ppl <= 4) LN_SINK(4);
    else if (ppl <= 8) LN_SINK(8);
    else if constexpr (Sink::kMaxPPL > 8) LN_SINK(LN_WARP_PPL_MAX);
#undef LN_SINK
    cudaCheckLaunch();
}

// The row statistics of layernorm_forward (inp2 == NULL: of inp1) or of fused_residual_layernorm_forward (of residual =
// inp1 + inp2, stored as that launcher stores it), without out: mean, rstd (N) fp32 (either may be NULL) and, fused,
// residual (N, C) floatX, the same bits as those launchers write (the same row kernels, PPT included, without the
// output loop; dev/cuda/lowp_producers.cu checks it). For a consumer that computes out itself from the statistics
// (ln_out_value: the same bits as out): the LayerNorm then reads its input once and writes no (N, C) output.
// Requirements and errors as those launchers.
static inline void layernorm_forward_stats(floatX* residual, float* mean, float* rstd, const floatX* inp1, const floatX* inp2, int N,
                                           int C, cudaStream_t stream) {
    const char* who = "layernorm_forward_stats";
    const void* ptrs[] = {inp1, inp2 ? residual : inp1, inp2 ? inp2 : inp1};
    const char* names[] = {"inp1", "residual", "inp2"};
    layernorm_check_args(who, N, C, ptrs, names, 3);
    if (inp2)
        layernorm_forward_dispatch<true, false, LnStatsOnly>(who, residual, nullptr, mean, rstd, inp1, inp2, nullptr, nullptr, N, C, nullptr,
                                                             stream);
    else
        layernorm_forward_dispatch<false, false, LnStatsOnly>(who, nullptr, nullptr, mean, rstd, inp1, nullptr, nullptr, nullptr, N, C,
                                                              nullptr, stream);
}

// ---------------------------------------------------------------------------------------------------
// Backward

// Rows per block of the backward: 8 * clamp(N / 2048, 1, 32), so that there are about 256 blocks up to
// N = 65536 rows and 256 rows per block beyond. Depends on N only (determinism across GPUs).
static inline int layernorm_backward_rows_per_block(int N) {
    int rpw = N / (8 * 256);
    rpw = rpw < 1 ? 1 : (rpw > 32 ? 32 : rpw);
    return 8 * rpw;
}

// Number of blocks G of the backward = rows of partial sums in scratch.
static inline int layernorm_backward_blocks(int N) {
    return N > 0 ? ceil_div(N, layernorm_backward_rows_per_block(N)) : 0;
}

// Scratch floats of layernorm_backward: 2 * C * G, G = layernorm_backward_blocks(N)
// <= 2 * C * max(512, ceil(N / 256)). (N = 65536, C = 768: G = 256, 393216 floats = 1.5 MB.)
static inline size_t layernorm_backward_scratch_floats(int N, int C) {
    return 2 * (size_t)C * layernorm_backward_blocks(N);
}

// Block b owns rows [b*rpb, min(N, (b+1)*rpb)); the row groups of TPR threads take rows round-robin.
// Each thread keeps fp32 sums of dout*xhat and dout for its channels over its rows; the groups of a
// block are added in group order in shared memory (2*C floats) and written to scratch row b:
// scratch[b*2C + c] = dweight partial, scratch[b*2C + C + c] = dbias partial.
// AMAX: each thread also keeps the max abs_bits of the dinp values it stored, and the block commits
// it with one atomicMax into *amax_out after its rows (block_amax_accumulate).
// Where the sums live (LN_BWD_SMEM_ACC): in registers they take 16 * PPT per thread, which at PPT = 4
// (bf16 C = 1024, d24) made 181 registers, one block (8 warps) per SM and 58% of the copy rate; with
// TPR = 32 and PPT = 4..6 (C = 1024 .. 1536 in bf16) each row group keeps its 2*C sums in its own slice of
// shared memory instead (its lanes touch only their own channels: no barrier until the end), the same fp32
// additions in the same order, so the same bits, and two blocks per SM fit (118 registers at PPT = 4). Not at
// PPT = 3 (d12: two blocks per SM with the registers already, and the shared-memory round trips cost) nor 7
// (it spills at two blocks).
template <int TPR, int PPT>
struct LnBwdSmemAcc { static constexpr bool value = TPR == 32 && PPT >= 4 && PPT <= 6; };
template <int TPR, int PPT, bool AMAX>
__global__ void __launch_bounds__(LN_THREADS, ((PPT <= 3 || LnBwdSmemAcc<TPR, PPT>::value) ? 2 : 1))
layernorm_backward_kernel(floatX* __restrict__ dinp, float* __restrict__ scratch, const floatX* __restrict__ dout,
                          const floatX* __restrict__ inp, const floatX* __restrict__ weight,
                          const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C,
                          int rows_per_block, unsigned int* __restrict__ amax_out) {
    constexpr int X = x128::size;
    constexpr int GROUPS = LN_THREADS / TPR;
    // Load dinp together with dout/inp (more bytes in flight) only where it still fits 2 blocks per SM
    // (<= 128 registers, see __launch_bounds__); PPT = 3 (bf16 C = 768) spills with it, so it loads dinp
    // after the row reductions.
    constexpr bool PREFETCH_DINP = PPT <= 2;
    constexpr bool SMEM_ACC = LnBwdSmemAcc<TPR, PPT>::value;
    constexpr int R = SMEM_ACC ? 1 : PPT;  // register accumulators
    // shared: 2*C floats when GROUPS > 1 (the groups' sums added in order); SMEM_ACC: 2*C per group
    extern __shared__ __align__(16) float ln_bwd_smem[];
    const int t = threadIdx.x % TPR, g = threadIdx.x / TPR;
    const int P = C / X;
    float* acc = ln_bwd_smem + (size_t)g * 2 * C;  // SMEM_ACC: this group's dweight sums, then its dbias sums

    float dw[R][X], db[R][X];
    #pragma unroll
    for (int k = 0; k < R; k++)
        #pragma unroll
        for (int i = 0; i < X; i++) dw[k][i] = db[k][i] = 0.0f;
    if constexpr (SMEM_ACC) {
        for (int p = t; p < P; p += TPR)
            #pragma unroll
            for (int q = 0; q < X / f128::size; q++) {
                store128(acc + p * X + q * f128::size, f128::zeros());
                store128(acc + C + p * X + q * f128::size, f128::zeros());
            }
    }
    unsigned int amax = 0u;  // AMAX only

    const int row0 = blockIdx.x * rows_per_block;
    const int row1 = min(N, row0 + rows_per_block);
    for (int row = row0 + g; row < row1; row += GROUPS) {  // block path: the same trip count for all threads
        const size_t base = (size_t)row * C;
        x128 d[PPT], x[PPT], di[PPT];
        #pragma unroll
        for (int k = 0; k < PPT; k++) {
            const int p = t + k * TPR;
            if (p < P) {
                d[k] = load128cs(dout + base + p * X);
                x[k] = load128cs(inp + base + p * X);
                if constexpr (PREFETCH_DINP) di[k] = load128(dinp + base + p * X);
            }
        }
        const float m = mean[row], s = rstd[row];
        float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
        #pragma unroll
        for (int k = 0; k < PPT; k++) {
            const int p = t + k * TPR;
            if (p < P) {
                const x128 w = load128(weight + p * X);
                float* aw = acc + p * X;  // SMEM_ACC only
                #pragma unroll
                for (int q = 0; q < X / f128::size; q++) {
                    f128 vw, vb;
                    if constexpr (SMEM_ACC) {
                        vw = load128(aw + q * f128::size);
                        vb = load128(aw + C + q * f128::size);
                    }
                    #pragma unroll
                    for (int j = 0; j < f128::size; j++) {
                        const int i = q * f128::size + j;
                        const float dy = (float)d[k][i];
                        const float xhat = ((float)x[k][i] - m) * s;
                        const float dxhat = dy * (float)w[i];
                        sum_dxhat += dxhat;
                        sum_dxhat_xhat += dxhat * xhat;
                        if constexpr (SMEM_ACC) {
                            vw[j] += dy * xhat;
                            vb[j] += dy;
                        } else {
                            dw[k][i] += dy * xhat;
                            db[k][i] += dy;
                        }
                    }
                    if constexpr (SMEM_ACC) {
                        store128(aw + q * f128::size, vw);
                        store128(aw + C + q * f128::size, vb);
                    }
                }
            }
        }
        const float mean_dxhat = ln_row_sum<TPR>(sum_dxhat) / C;
        const float mean_dxhat_xhat = ln_row_sum<TPR>(sum_dxhat_xhat) / C;
        #pragma unroll
        for (int k = 0; k < PPT; k++) {
            const int p = t + k * TPR;
            if (p < P) {
                if constexpr (!PREFETCH_DINP) di[k] = load128(dinp + base + p * X);
                const x128 w = load128(weight + p * X);
                #pragma unroll
                for (int i = 0; i < X; i++) {
                    const float xhat = ((float)x[k][i] - m) * s;
                    const float dxhat = (float)d[k][i] * (float)w[i];
                    di[k][i] = (floatX)((float)di[k][i] + s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
                    if constexpr (AMAX) amax = max(amax, abs_bits((float)di[k][i]));  // the sum as stored
                }
                store128(dinp + base + p * X, di[k]);
            }
        }
    }
    if constexpr (AMAX) block_amax_accumulate(amax_out, amax);  // all threads get here (no early exit)

    float* dst = scratch + (size_t)blockIdx.x * 2 * C;
    if constexpr (SMEM_ACC) {
        // ((0 + g0) + g1) + ... per channel, as the register path below adds the groups
        __syncthreads();
        for (int i = threadIdx.x; i < 2 * C; i += LN_THREADS) {
            float v = 0.0f;
            for (int gg = 0; gg < GROUPS; gg++) v += ln_bwd_smem[(size_t)gg * 2 * C + i];
            dst[i] = v;
        }
    } else if constexpr (GROUPS == 1) {
        #pragma unroll
        for (int k = 0; k < PPT; k++) {
            const int p = t + k * TPR;
            if (p < P) {
                #pragma unroll
                for (int q = 0; q < X / f128::size; q++) {
                    f128 vw, vb;
                    #pragma unroll
                    for (int i = 0; i < f128::size; i++) {
                        vw[i] = dw[k][q * f128::size + i];
                        vb[i] = db[k][q * f128::size + i];
                    }
                    store128(dst + p * X + q * f128::size, vw);
                    store128(dst + C + p * X + q * f128::size, vb);
                }
            }
        }
    } else {
        // Groups add into shared memory one after the other: ((g0 + g1) + g2) + ... fixed order.
        for (int gg = 0; gg < GROUPS; gg++) {
            if (g == gg) {
                #pragma unroll
                for (int k = 0; k < PPT; k++) {
                    const int p = t + k * TPR;
                    if (p < P) {
                        #pragma unroll
                        for (int q = 0; q < X / f128::size; q++) {
                            float* sw = ln_bwd_smem + p * X + q * f128::size;
                            float* sb = sw + C;
                            f128 vw, vb;
                            if (gg == 0) {
                                vw = f128::zeros();
                                vb = f128::zeros();
                            } else {
                                vw = load128(sw);
                                vb = load128(sb);
                            }
                            #pragma unroll
                            for (int i = 0; i < f128::size; i++) {
                                vw[i] += dw[k][q * f128::size + i];
                                vb[i] += db[k][q * f128::size + i];
                            }
                            store128(sw, vw);
                            store128(sb, vb);
                        }
                    }
                }
            }
            __syncthreads();
        }
        for (int i = threadIdx.x * f128::size; i < 2 * C; i += LN_THREADS * f128::size)
            store128(dst + i, load128(ln_bwd_smem + i));
    }
}

// dweight[c] += sum_b scratch[b][c], dbias[c] += sum_b scratch[b][C + c] over the G block partials.
// Block (32 columns x 8 slices): slice y adds rows y, y+8, y+16, ... in order; the 8 slice sums are then
// added in slice order. One rounding to floatX per element.
__global__ void __launch_bounds__(256)
layernorm_backward_finalize_kernel(floatX* __restrict__ dweight, floatX* __restrict__ dbias,
                                   const float* __restrict__ scratch, int G, int C) {
    __shared__ float part[8][33];
    const int col = blockIdx.x * 32 + threadIdx.x;  // column of the 2*C partial row
    float acc = 0.0f;
    if (col < 2 * C) {
        const float* src = scratch + col;
        const size_t stride = 2 * (size_t)C;
        int g = threadIdx.y;
        for (; g + 24 < G; g += 32) {  // 4 loads in flight, added in order
            const float a = src[g * stride], b = src[(g + 8) * stride], c = src[(g + 16) * stride],
                        d = src[(g + 24) * stride];
            acc += a;
            acc += b;
            acc += c;
            acc += d;
        }
        for (; g < G; g += 8) acc += src[g * stride];
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < 2 * C) {
        float total = part[0][threadIdx.x];
        #pragma unroll
        for (int y = 1; y < 8; y++) total += part[y][threadIdx.x];
        if (col < C) dweight[col] = (floatX)((float)dweight[col] + total);
        else dbias[col - C] = (floatX)((float)dbias[col - C] + total);
    }
}

// Raises the dynamic shared memory limit of layernorm_backward_kernel<TPR, PPT, AMAX> to `bytes` where that is
// above the 48 KB default (once per instantiation and size: the static is per instantiation; errors: cudaCheck).
template <int TPR, int PPT, bool AMAX>
static inline void ln_bwd_smem_optin(size_t bytes) {
    static size_t done = 48 * 1024;
    if (bytes <= done) return;
    cudaCheck(cudaFuncSetAttribute(layernorm_backward_kernel<TPR, PPT, AMAX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)bytes));
    done = bytes;
}

// Launches layernorm_backward_kernel<TPR, PPT, AMAX> for (N, C) (N > 0, arguments checked) on `stream`.
template <bool AMAX>
static inline void layernorm_backward_dispatch(floatX* dinp, float* scratch, const floatX* dout, const floatX* inp,
                                               const floatX* weight, const float* mean, const float* rstd, int N,
                                               int C, unsigned int* amax_out, cudaStream_t stream) {
    const int P = C / x128::size;
    const int rpb = layernorm_backward_rows_per_block(N);
    const int G = layernorm_backward_blocks(N);
    const int ppl = ceil_div(P, 32);
    const size_t smem = 2 * (size_t)C * sizeof(float);  // warp path only
    // SMEM_ACC instantiations: one 2*C slice per row group (64 KB at C = 1024: above the 48 KB default)
#define LN_BWD(TPR, PPT, SMEM)                                                                                     \
    do {                                                                                                           \
        const size_t sm = LnBwdSmemAcc<TPR, PPT>::value ? (LN_THREADS / TPR) * smem : (size_t)(SMEM);             \
        ln_bwd_smem_optin<TPR, PPT, AMAX>(sm);                                                                     \
        layernorm_backward_kernel<TPR, PPT, AMAX><<<G, LN_THREADS, sm, stream>>>(dinp, scratch, dout, inp, weight, \
                                                                                 mean, rstd, N, C, rpb, amax_out); \
    } while (0)
    if (ppl <= 1) LN_BWD(32, 1, smem);
    else if (ppl <= 2) LN_BWD(32, 2, smem);
    else if (ppl <= 3) LN_BWD(32, 3, smem);
    else if (ppl <= 4) LN_BWD(32, 4, smem);
    else if (ppl <= 5) LN_BWD(32, 5, smem);
    else if (ppl <= 6) LN_BWD(32, 6, smem);
    else if (ppl <= 7) LN_BWD(32, 7, smem);  // 8 would spill in bf16: the block path takes over
    else {
        const int ppt = ceil_div(P, LN_THREADS);
        if (ppt <= 2) LN_BWD(LN_THREADS, 2, 0);
        else if (ppt <= 4) LN_BWD(LN_THREADS, 4, 0);
        else {
            fprintf(stderr, "error: layernorm_backward: C = %d too large (at most %d)\n", C, 4 * LN_THREADS * x128::size);
            exit(EXIT_FAILURE);
        }
    }
#undef LN_BWD
    cudaCheckLaunch();
}

// LayerNorm backward   [formula: train_gpt2.c layernorm_backward]
//   dinp    (N,C) floatX, ACCUMULATED: dinp += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),
//           xhat = (inp - mean) * rstd, dxhat = dout * weight, means over the C channels of the row.
//   dweight (C) floatX, accumulated: += sum over rows of dout * xhat.
//   dbias   (C) floatX, accumulated: += sum over rows of dout.
//   scratch fp32, layernorm_backward_scratch_floats(N, C) floats = 2*C*layernorm_backward_blocks(N)
//           (<= 2*C*max(512, ceil(N/256))); overwritten, contents meaningless afterwards.
//   dout    (N,C) floatX; inp (N,C) floatX, the tensor the forward normalized (for the fused forward:
//           its `residual` output); weight (C) floatX; mean, rstd (N) fp32 from the forward.
//   amax_out optional (NULL: off) single unsigned int, ACCUMULATED: *amax_out = max(*amax_out, max over
//           all N*C dinp values v as finally stored (the accumulated sum after its rounding to floatX)
//           of __float_as_uint((float)v) & 0x7FFFFFFF); a NaN in dinp gives a NaN pattern (> 0x7F800000).
//           It accumulates: the caller sets *amax_out = 0 before the producer runs; N = 0 leaves it
//           untouched. One integer atomicMax per block of the first kernel (order-independent).
//           NULL runs the same code as before the option existed.
// All sums in fp32; every output element gets one round-to-nearest. Deterministic (fixed row-to-block
// assignment depending on N only, fixed-order reductions, no float atomics). Two kernels on `stream`.
// Requires C % x128::size == 0 and 16-byte aligned floatX pointers and scratch (checked); dinp must not
// overlap dout or inp.
static inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch,
                                      const floatX* dout, const floatX* inp, const floatX* weight, const float* mean,
                                      const float* rstd, int N, int C, cudaStream_t stream,
                                      unsigned int* amax_out = nullptr) {
    const void* ptrs[] = {dinp, dout, inp, weight, scratch};
    const char* names[] = {"dinp", "dout", "inp", "weight", "scratch"};
    layernorm_check_args("layernorm_backward", N, C, ptrs, names, 5);
    if (N == 0) return;
    if (amax_out) layernorm_backward_dispatch<true>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, amax_out, stream);
    else layernorm_backward_dispatch<false>(dinp, scratch, dout, inp, weight, mean, rstd, N, C, nullptr, stream);
    const int G = layernorm_backward_blocks(N);
    layernorm_backward_finalize_kernel<<<ceil_div(2 * C, 32), dim3(32, 8), 0, stream>>>(dweight, dbias, scratch, G, C);
    cudaCheckLaunch();
}
