// tcast_source.cuh - where the TensorCast cast kernels (tcast_cast_kernels.cuh) read their input: a
// source Src with
//   __device__ void load8(bool valid, size_t e0, uint32_t (&b)[8]) const
//       valid: the 8 values at flat row-major indices e0 .. e0 + 7 (e0 % 8 == 0) as float32 bit patterns
//       of BF16 values (bf16 bits << 16, what tcast_unpack8 gives for a stored packet); else 8 zeros
//       (nothing read or stored);
//   const floatX* stored() const   where the source's BF16 values are in memory after a launch that
//       read every element (NULL: nowhere; then only the fused paths can cast it);
//   bool vec_ok() const            16-byte packets may be read (pointers aligned);
//   static constexpr bool kInPlace  reading an element overwrites an input of the source (the value
//       may be read only once per launch).
// A source must be trivially copyable (it is a __grid_constant__ kernel parameter).
//
// TcastSrcStored is the stand-alone cast's source (a stored tensor); TcastSrcProducer<P> adapts the
// producer sources of the FP8 build (llmc/kernels/fp8/lowp_producers.cuh contract: packet(float* v, idx)
// computes the 8 BF16-rounded values the producing kernel stores, storing them itself when it has a
// store pointer) so that a producer and its cast run as one kernel; tcast_producers.cuh has the ones the
// TensorCast GEMM backend uses.
#pragma once

#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/tcast/tcast_cast_device.cuh"

// A stored row-major BF16 tensor.
struct TcastSrcStored {
    const floatX* x;
    static constexpr bool kInPlace = false;
    __device__ __forceinline__ void load8(bool valid, size_t e0, uint32_t (&b)[8]) const {
        tcast_unpack8(valid ? tcast_load16(x + e0) : make_uint4(0u, 0u, 0u, 0u), b);  // (a select: the plain cast's code)
    }
    const floatX* stored() const { return x; }
    bool vec_ok() const { return ((uintptr_t)x & 15) == 0; }
};

// A producer P (lowp_producers.cuh contract) whose BF16 output lives at `out` once P has run (NULL: P
// stores nothing); in_place: P overwrites an input of its own (kInPlace).
template <class P, bool IN_PLACE>
struct TcastSrcProducer {
    P p;
    const floatX* out;
    static constexpr bool kInPlace = IN_PLACE;
    __device__ __forceinline__ void load8(bool valid, size_t e0, uint32_t (&b)[8]) const {
        float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        if (valid) p.packet(v, e0);  // (the producer's stores happen only here)
        #pragma unroll
        for (int k = 0; k < 8; k++) b[k] = __float_as_uint(v[k]);  // a BF16 value: its low 16 bits are 0
    }
    const floatX* stored() const { return out; }
    bool vec_ok() const { return p.vec_ok(); }
};

// Runs the source over npk packets without casting (its stores happen; the values are dropped): the
// producer alone, for the casts that cannot be fused (tcast_cast_from's fallback).
template <class Src>
__global__ void __launch_bounds__(256) tcast_source_run_kernel(const __grid_constant__ Src src, size_t npk) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < npk; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t b[8];
        src.load8(true, i * 8, b);
    }
}
