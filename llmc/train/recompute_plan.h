/*
 * recompute_plan.h - `-r -1` (the default): pick the recompute level from the memory the run needs
 * against the memory the GPU has free.
 *
 * Recompute trades time for memory: level 1 keeps one (B,T,4C) GELU output instead of L of them and
 * recomputes it in backward (a GELU pass per layer, ~2.6% of a d12 step on an H100); level 2 also
 * recomputes the LayerNorm outputs. When everything fits, level 0 is simply faster. The choice is
 * made once, before the activations are allocated, from cudaMemGetInfo's free bytes at that moment
 * (parameters, gradients and AdamW state are already allocated then):
 *
 *   level = the smallest r in 0..2 with activation_bytes(r) + reserve <= free,
 *   reserve = max(RECOMPUTE_RESERVE_FRACTION of the device's total memory, RECOMPUTE_RESERVE_MIN_BYTES)
 *
 * The reserve covers what is allocated after the activations or on the first step: the cuBLASLt
 * workspace, the FP8 / TCFP-12 backends' code buffers (6.4 GB at d24 B=32), TensorCast scratch and the
 * attention group scales it keeps (576 MiB at d12 B=64 with both attention sites cast; with MXFP8 probabilities also
 * their FP8 codes, 4.8 GiB more at d12 B=64 T=1024, B T^2 NH L / 2 bytes), the built-in attention
 * backward's dS workspace (780 MiB at d12 B=64, T=1024; it grows as B T^2, llmc/kernels/attention/attention.cuh),
 * NCCL buffers, and the allocator's granularity. If no level fits, 2 is chosen and the allocation itself
 * reports the shortage. Numerics: level 0 hands the fcproj GEMMs the GELU output of the forward pass
 * (with -ge 1 computed in the GEMM epilogue from the fp32 accumulator); level >= 1 recomputes it from
 * the stored BF16 pre-activation, which can differ in the last bit. The level is printed at start-up
 * and recorded in the numeric configuration line of the logs and state files; `-r 0|1|2` overrides.
 * With an FP8 / TCFP-12 backend that keeps the quantized inputs of its weight gradients (all but
 * --fp8-hp-wgrad 1), level 2 is chosen: its backward never reads the GELU or LayerNorm outputs (they are
 * only the GEMMs' inputs), so level 2 saves L - 1 of each of those buffers at no cost (only the BF16
 * warm-up steps of --fp8-warmup recompute them).
 */
#ifndef LLMC_RECOMPUTE_PLAN_H
#define LLMC_RECOMPUTE_PLAN_H

#include <stddef.h>

#define RECOMPUTE_AUTO (-1)
#define RECOMPUTE_LEVELS 3
#define RECOMPUTE_RESERVE_FRACTION 0.15
#define RECOMPUTE_RESERVE_MIN_BYTES ((size_t)4 << 30)

// Bytes kept free beyond the activations for a device of total_bytes (see the formula above).
static inline size_t recompute_reserve_bytes(size_t total_bytes) {
    size_t frac = (size_t)(RECOMPUTE_RESERVE_FRACTION * (double)total_bytes);
    return frac > RECOMPUTE_RESERVE_MIN_BYTES ? frac : RECOMPUTE_RESERVE_MIN_BYTES;
}

// The recompute level for -r -1. acts_bytes[r]: the activation bytes at level r (non-increasing in r);
// free_bytes / total_bytes: cudaMemGetInfo before the activations are allocated; min_level: the lowest
// level considered (2 when recomputation costs nothing: an FP8 / TCFP-12 backend that keeps its
// weight-gradient inputs never recomputes the GELU or LayerNorm outputs, gemm_keeps_inputs). Returns
// min_level .. 2.
static inline int recompute_auto_level(const size_t acts_bytes[RECOMPUTE_LEVELS], size_t free_bytes, size_t total_bytes,
                                       int min_level) {
    const size_t reserve = recompute_reserve_bytes(total_bytes);
    for (int r = min_level; r < RECOMPUTE_LEVELS; r++)
        if (acts_bytes[r] <= free_bytes && free_bytes - acts_bytes[r] >= reserve) return r;
    return RECOMPUTE_LEVELS - 1;
}

#endif  // LLMC_RECOMPUTE_PLAN_H
