// attention_common.cuh - what the dispatch (attention.cuh) and both kernel families (the tensor-core
// flash kernels, attention_flash_*.cuh, and the generic kernels, attention_generic.cuh) share: the
// build's forward mode kAttnProbsFromLse and the launchers' opt-in to large dynamic shared memory.
#pragma once

#include <stddef.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/boundary.cuh"

// Forward mode (see the header comment of attention.cuh): true when the probability hook is not the identity, i.e.
// the forward must compute P from the final lse in a second pass.
static constexpr bool kAttnProbsFromLse = !boundary_is_identity<ATTN_PROBS>();

// Kernels that want more than 48 KiB of dynamic shared memory must say so first (per device, cheap).
template <typename Kernel>
static inline void attn_set_smem(Kernel kernel, size_t bytes) {
    if (bytes > 48 * 1024) cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}
