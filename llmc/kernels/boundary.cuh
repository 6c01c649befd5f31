// boundary.cuh - what a forward kernel calls on a value it is about to store (or feed to the next
// stage) at a named tensor boundary: the one place where the SF16 mode acts.
//
// Plain builds: boundary_value<Site>(v) is the identity (the kernel then casts to floatX).
// SF16 (ENABLE_Q115, doc/SF16.md): every site is a Q1.15 quantize-dequantize, simulate_q115(v)
// (llmc/numerics/q115.h: clamp to +-(1 - 2^-15), round to the 2^-15 grid, ties to even). Under
// SF16_TRUE_FORWARD the matmul outputs are first passed through simulate_q131 (the Q1.31 register
// the seed describes). Kernels never contain #ifdef ENABLE_Q115. Backward kernels call it only to
// recompute a forward value exactly (the attention backward re-forms the quantized scores and P);
// gradients themselves are never quantized.
//
// Diagnostics (--q115-stats in the trainer): while boundary_stats_set(1) is in force (only during one
// forward-only pass; the two-pass SF16 attention forward sees each score twice), every call with
// Count = true also counts, per site, the values seen, the values clipped at +-1 and the non-zero
// values flushed to 0 (warp-aggregated atomics). Off by default; then the cost is one uniform branch
// on a constant, which the memory-bound kernels do not notice. The attention kernels, whose hooks sit
// between tensor-core instructions, must not carry even that branch: a warp-collective call inside
// their unrolled loops made the SF16 attention forward 11x slower (H100, doc/benchmarks.md). They are
// instantiated twice, with Count = false (training) and Count = true (chosen by the launcher while
// boundary_stats_active()), and the backward kernels always use Count = false.
#pragma once

#include "llmc/core/precision.h"
#include "llmc/numerics/q115.h"
#include "llmc/core/cuda_common.cuh"

#include "llmc/core/boundary_sites.h"

// True when boundary_value<Site> is the identity in this build (lets callers skip whole passes,
// e.g. the post-GEMM quantization kernel, or choose the single-pass attention forward).
template <BoundarySite Site>
__host__ __device__ constexpr bool boundary_is_identity() {
#if defined(ENABLE_Q115)
    return false;
#else
    return true;
#endif
}

#if defined(ENABLE_Q115)
// Per-site counters [site][0 = values, 1 = clipped, 2 = flushed], and the switch that enables them.
__device__ unsigned long long boundary_counts[NUM_BOUNDARY_SITES][3];
// constant memory: kernels cannot write it, so the compiler may hoist the test out of hot loops
__constant__ int boundary_stats_enabled;

// Host mirror of boundary_stats_enabled (launchers read it to pick their counting instantiation).
static int boundary_stats_host_enabled = 0;

// Switch the counters on (1) or off (0) for the kernels enqueued after this call on `stream`.
static inline void boundary_stats_set(int on, cudaStream_t stream) {
    cudaCheck(cudaMemcpyToSymbolAsync(boundary_stats_enabled, &on, sizeof(int), 0, cudaMemcpyHostToDevice, stream));
    boundary_stats_host_enabled = on;
}

// Add this warp's counts for one site: one atomic per warp and counter.
__device__ __forceinline__ void boundary_count(int site, float v) {
    unsigned mask = __activemask();
    unsigned clipped = __ballot_sync(mask, q115_is_clipped(v));
    unsigned flushed = __ballot_sync(mask, q115_is_flushed(v));
    int lane = threadIdx.x % 32;
    if (lane == __ffs(mask) - 1) {
        atomicAdd(&boundary_counts[site][0], (unsigned long long)__popc(mask));
        if (clipped) atomicAdd(&boundary_counts[site][1], (unsigned long long)__popc(clipped));
        if (flushed) atomicAdd(&boundary_counts[site][2], (unsigned long long)__popc(flushed));
    }
}
#endif

// True while boundary_stats_set(1) is in force (always false in plain builds).
static inline bool boundary_stats_active() {
#if defined(ENABLE_Q115)
    return boundary_stats_host_enabled != 0;
#else
    return false;
#endif
}

// Value v (fp32 in registers) as it crosses boundary `Site`. Count = false compiles the statistics
// out entirely (see the header comment).
template <BoundarySite Site, bool Count = true>
__device__ __forceinline__ float boundary_value(float v) {
#if defined(ENABLE_Q115)
#if defined(SF16_TRUE_FORWARD)
    if (Site == MATMUL_OUT) v = simulate_q131(v);
#endif
    if (Count && boundary_stats_enabled) boundary_count(Site, v);
    return simulate_q115(v);
#else
    return v;
#endif
}

// ------------------------------------------------------------------------------------------------
// Whole-tensor boundary casts (the TensorCast build, doc/TCAST.md section 5.1). A TensorCast cast of
// a tile-scaled datatype needs the whole tile before any element can be quantized, so it cannot be a
// per-value hook inside the producing kernel: it is a pass over the stored tensor right after the
// kernel that wrote it (boundary_tensor_cast, called by llmc/model/model.cuh and the GEMM front), chosen at
// run time from the cast plan. boundary_value stays the identity in that build. In every other build
// the runtime pointer is NULL and boundary_tensor_active is constant false, so callers' branches vanish.
struct TcastRuntime;
#if defined(ENABLE_TCAST)
#include "llmc/modes/tcast/tcast_runtime.cuh"
static inline bool boundary_tensor_active(const TcastRuntime* rt, BoundarySite site) { return rt && rt->plan.site_on[site]; }
// Cast the stored (rows, cols) floatX tensor x of `site` in place along its rows (the channel
// dimension); id distinguishes the tensors of one step in the stochastic-rounding seed (a layer or a
// weight offset). Asynchronous on stream; a no-op when the plan does not cast the site.
static inline void boundary_tensor_cast(TcastRuntime* rt, BoundarySite site, unsigned long long id, floatX* x, size_t rows,
                                        size_t cols, cudaStream_t stream) {
    if (boundary_tensor_active(rt, site)) tcast_site_cast(rt, site, id, x, rows, cols, stream);
}
// The id of a linear layer's output in seeds: its weight's offset in the parameters.
static inline unsigned long long boundary_weight_id(const TcastRuntime* rt, const floatX* weight) {
    return rt ? (unsigned long long)(weight - rt->params) : 0ull;
}
// The seed of one attention call's score / probability casts (attention_tcast.cuh derives the two
// sites' random bits from it); the backward passes the forward's, so it recomputes the same casts.
static inline unsigned long long boundary_attention_seed(const TcastRuntime* rt, unsigned long long id) {
    return rt ? tcast_seed(rt, id, (int)ATTN_SCORES, TCAST_ROLE_ATTN) : 0ull;
}
#else
static constexpr inline bool boundary_tensor_active(const TcastRuntime*, BoundarySite) { return false; }
static inline void boundary_tensor_cast(TcastRuntime*, BoundarySite, unsigned long long, floatX*, size_t, size_t, cudaStream_t) {}
static inline unsigned long long boundary_weight_id(const TcastRuntime*, const floatX*) { return 0ull; }
static inline unsigned long long boundary_attention_seed(const TcastRuntime*, unsigned long long) { return 0ull; }
#endif
