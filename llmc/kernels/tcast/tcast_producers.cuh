// tcast_producers.cuh - the producers whose TensorCast casts run inside them (issue 26 item 2): sources for
// tcast_cast_from (tcast_cast.cuh, tcast_source.cuh) that compute the values the producing kernel stores,
// with the same device functions and roundings, so that producer + cast in one kernel gives the bits of
// the producer followed by the stand-alone cast (dev/cuda/tcast_producers.cu checks it):
//   tcast_src_gelu(pre, store)   GELU of the fc pre-activation, gemm.cuh's gemm_gelu_stored (the FP8
//                                build's LowpSrcGelu); store: where its BF16 output goes (NULL: nowhere)
//   tcast_src_dgelu(d, pre)      GELU' product d = d * gelu_tanh'(pre), gemm_dgelu_stored, written back
//                                into d (in place: tcast_cast_from reads each element once)
// Row-major (rows, cols) tensors, cols % 8 == 0, 16-byte aligned pointers.
#pragma once

#include "llmc/kernels/tcast/tcast_source.cuh"
#include "llmc/kernels/fp8/lowp_producers.cuh"  // LowpSrcGelu, gemm_dgelu_stored

// d = d * gelu_tanh'(pre) in place, as gemm_gelu_backward_kernel stores it (lowp_producers.cuh contract).
struct TcastDgeluInPlace {
    floatX* d;
    const floatX* pre;
    __device__ __forceinline__ void packet(float* v, size_t idx) const {
        const x128 g = load128cs(d + idx);
        const x128 p = load128cs(pre + idx);
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) {
            o[k] = gemm_dgelu_stored((float)g[k], (float)p[k]);
            v[k] = (float)o[k];
        }
        store128(d + idx, o);
    }
    bool vec_ok() const { return ((uintptr_t)d & 15) == 0 && ((uintptr_t)pre & 15) == 0; }
};

typedef TcastSrcProducer<LowpSrcGelu, false> TcastSrcGelu;
typedef TcastSrcProducer<TcastDgeluInPlace, true> TcastSrcDgelu;

// GELU of pre; its BF16 values also into store unless NULL (store must not alias pre).
static inline TcastSrcGelu tcast_src_gelu(const floatX* pre, floatX* store) { return TcastSrcGelu{LowpSrcGelu{pre, store}, store}; }
// GELU' product of d (holding dY W on entry, the fc layer's dY on exit) and pre.
static inline TcastSrcDgelu tcast_src_dgelu(floatX* d, const floatX* pre) { return TcastSrcDgelu{TcastDgeluInPlace{d, pre}, d}; }
