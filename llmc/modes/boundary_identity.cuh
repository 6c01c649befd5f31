// boundary_identity.cuh - the per-value boundary hook of the modes that leave stored values alone (plain,
// FP8 / TCFP-12, TensorCast, whose casts act on whole tensors): ModeBoundary for their traits.cuh.
#pragma once

#include "llmc/core/boundary_sites.h"

// The per-value boundary hook (llmc/kernels/boundary.cuh): the identity.
struct ModeBoundary {
    static constexpr bool kIdentity = true;
    template <BoundarySite Site, bool Count>
    __device__ __forceinline__ static float value(float v) { return v; }
    template <BoundarySite... Sites>
    __device__ __forceinline__ static float stored_value(float v) { return v; }
    template <bool Count, BoundarySite... Sites>
    __device__ __forceinline__ static float stored_value_units(float v) { return v; }
    static constexpr float kUnit = 1.0f;
    static constexpr float kMaxUnits = __builtin_huge_valf();  // no bound on |value_units|
    template <BoundarySite Site, bool Count>
    __device__ __forceinline__ static float value_units(float v) { return v; }
    template <BoundarySite Site, bool Count, bool kPow2>
    __device__ __forceinline__ static float scaled_value_units(float raw, float scale) { return raw * scale; }
    static bool stats_active() { return false; }
};
