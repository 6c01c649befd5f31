// tcast_stats.cuh - device counters of the TensorCast casts (--cast-stats, doc/TCAST.md 4.5 / 5.4):
// per site or operand, the values cast, the saturated and flushed ones, and the histogram of group
// scale exponents (llmc/numerics/tcast_quant.h: TCAST_HIST_BINS bins, tcast_hist_bin). Kernels count only
// in their statistics instantiation (a template flag), so training kernels carry no counting code.
#pragma once

#include "llmc/core/cuda_common.cuh"
#include "llmc/numerics/tcast.h"

// One site's or operand's counters (device memory, zeroed by the host before a recorded step).
struct TcastDeviceStats {
    unsigned long long values, saturated, flushed;
    unsigned int hist[TCAST_HIST_BINS];
};

// Add this warp's element counts: `flags` are the calling lane's TCAST_FLAG_* of one cast value
// (counted only where `valid`). One atomic per warp and counter. All lanes of the warp must call.
__device__ __forceinline__ void tcast_stats_count(TcastDeviceStats* st, bool valid, unsigned flags) {
    const unsigned v = __ballot_sync(0xffffffffu, valid);
    const unsigned s = __ballot_sync(0xffffffffu, valid && (flags & TCAST_FLAG_SATURATED));
    const unsigned f = __ballot_sync(0xffffffffu, valid && (flags & TCAST_FLAG_FLUSHED));
    if ((threadIdx.x & 31) == 0) {
        if (v) atomicAdd(&st->values, (unsigned long long)__popc(v));
        if (s) atomicAdd(&st->saturated, (unsigned long long)__popc(s));
        if (f) atomicAdd(&st->flushed, (unsigned long long)__popc(f));
    }
}

// Count one group's scale (bin from TcastGroupScale; negative: no bin, e.g. unscaled or NaN group).
// Called by one thread per group.
__device__ __forceinline__ void tcast_stats_group(TcastDeviceStats* st, int bin) {
    if (bin >= 0 && bin < TCAST_HIST_BINS) atomicAdd(&st->hist[bin], 1u);
}
