// traits.cuh (SF16 module, ENABLE_Q115; doc/SF16.md) - the compile-time side of the mode, included by
// llmc/core/precision.h: what a value becomes at every forward storage boundary, a Q1.15
// quantize-dequantize simulate_q115 (llmc/numerics/q115.h: clamp to +-(1 - 2^-15), round to the 2^-15
// grid, ties to even); under SF16_TRUE_FORWARD the matmul outputs pass simulate_q131 first (the Q1.31
// register the seed describes) and the GEMMs ask for CUBLAS_COMPUTE_32F_FAST_16BF.
//
// Diagnostics (--q115-stats, llmc/modes/sf16/mode.cuh): while the counters are switched on (one
// forward-only pass; the two-pass SF16 attention forward sees each score twice), every hook call with
// Count = true also counts, per site, the values seen, clipped at +-1 and the non-zero values flushed to
// 0 (warp-aggregated atomics). Off by default; then the cost is one uniform branch on a constant, which
// the memory-bound kernels do not notice. The attention kernels, whose hooks sit between tensor-core
// instructions, must not carry even that branch: a warp-collective call inside their unrolled loops made
// the SF16 attention forward 11x slower (H100, doc/benchmarks.md). They are instantiated twice, with
// Count = false (training) and Count = true (chosen by the launcher while ModeBoundary::stats_active()),
// and the backward kernels always use Count = false.
#pragma once

#include "llmc/core/boundary_sites.h"
#include "llmc/numerics/q115.h"

#if defined(SF16_TRUE_FORWARD)
#define BOUNDARY_MODE_NAME "SF16 true-forward (Q1.31 + Q1.15)"
static constexpr bool kSf16TrueForward = true;
#else
#define BOUNDARY_MODE_NAME "SF16 (Q1.15)"
static constexpr bool kSf16TrueForward = false;
#endif

// Per-site counters [site][0 = values, 1 = clipped, 2 = flushed], and the switch that enables them.
__device__ unsigned long long boundary_counts[NUM_BOUNDARY_SITES][3];
// constant memory: kernels cannot write it, so the compiler may hoist the test out of hot loops
__constant__ int boundary_stats_enabled;
// Host mirror of boundary_stats_enabled (launchers read it to pick their counting instantiation).
static int boundary_stats_host_enabled = 0;

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

// The per-value boundary hook (llmc/kernels/boundary.cuh). Count = false compiles the statistics out.
struct ModeBoundary {
    static constexpr bool kIdentity = false;
    template <BoundarySite Site, bool Count>
    __device__ __forceinline__ static float value(float v) {
        if constexpr (kSf16TrueForward && Site == MATMUL_OUT) v = simulate_q131(v);
        if (Count && boundary_stats_enabled) boundary_count(Site, v);
        return simulate_q115(v);
    }
    // A BF16 value read from storage through Sites... in order, the last one counted (boundary_stored_value): one
    // simulate_q115, which on a BF16 value is the chain in both builds (simulate_q131 then simulate_q115 is
    // simulate_q115 there, and simulate_q115 is idempotent: dev/test/test_q115.c checks all 65536 BF16 values); the
    // chain itself while the counters are on, so the statistics see each site's input as before.
    template <BoundarySite First, BoundarySite... Rest>
    __device__ __forceinline__ static float stored_value(float v) {
        if (boundary_stats_enabled) return stored_chain<First, Rest...>(v);
        return simulate_q115(v);
    }
    // stored_value in units of the grid (boundary_stored_value_units): the code as a float; while counting (Count), the
    // chain's value times 2^15 (exact: a power of two).
    template <bool Count, BoundarySite First, BoundarySite... Rest>
    __device__ __forceinline__ static float stored_value_units(float v) {
        if (Count && boundary_stats_enabled) return stored_chain<First, Rest...>(v) * Q115_SCALE;
        return simulate_q115_code(v);
    }
    template <BoundarySite First, BoundarySite... Rest>
    __device__ __forceinline__ static float stored_chain(float v) {
        if constexpr (sizeof...(Rest) == 0) return value<First, true>(v);
        else return stored_chain<Rest...>(value<First, false>(v));
    }
    // The hook in units of the Q1.15 grid (boundary_value_units): value<Site, Count>(v) / 2^-15, i.e. the code as a
    // float, without the final product (simulate_q115_code); and of raw * scale for a power-of-two scale with the scale
    // folded into the clamp and the rounding (simulate_q115_code_pow2), except while counting (the counters see
    // raw * scale as value would). The probabilities are exp outputs (>= +0 or NaN), whose lower clamp changes nothing:
    // simulate_q115_code_nonneg, one instruction fewer.
    static constexpr float kUnit = 1.0f / Q115_SCALE;
    // |value_units| <= 2^15 at every site: the Q1.15 code saturates to [-2^15, 2^15 - 1] (NaN aside).
    static constexpr float kMaxUnits = 32768.0f;
    template <BoundarySite Site, bool Count>
    __device__ __forceinline__ static float value_units(float v) {
        if constexpr (kSf16TrueForward && Site == MATMUL_OUT) v = simulate_q131(v);
        if (Count && boundary_stats_enabled) boundary_count(Site, v);
        if constexpr (Site == ATTN_PROBS) return simulate_q115_code_nonneg(v);
        else return simulate_q115_code(v);
    }
    template <BoundarySite Site, bool Count, bool kPow2>
    __device__ __forceinline__ static float scaled_value_units(float raw, float scale) {
        if constexpr (Count || !kPow2 || (kSf16TrueForward && Site == MATMUL_OUT)) return value_units<Site, Count>(raw * scale);
        else return simulate_q115_code_pow2(raw, scale);
    }
    // True while the counters are on (llmc/modes/sf16/mode.cuh sf16_stats_set).
    static bool stats_active() { return boundary_stats_host_enabled != 0; }
};

static constexpr bool kModeAttentionCasts = false;             // no TensorCast attention kernels
static constexpr bool kModeGemmFast16BF = kSf16TrueForward;    // the seed's true-forward compute mode
