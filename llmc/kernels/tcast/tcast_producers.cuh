// tcast_producers.cuh - the producers whose TensorCast casts run inside them (issue 26 item 2): sources for
// tcast_cast_from (tcast_cast.cuh, tcast_source.cuh) that compute the values the producing kernel stores,
// with the same device functions and roundings, so that producer + cast in one kernel gives the bits of
// the producer followed by the stand-alone cast (dev/cuda/tcast_producers.cu checks it):
//   tcast_src_gelu(pre, store)   GELU of the fc pre-activation, gemm.cuh's gemm_gelu_stored (the FP8
//                                build's LowpSrcGelu); store: where its BF16 output goes (NULL: nowhere)
//   tcast_src_dgelu(d, pre)      GELU' product d = d * gelu_tanh'(pre), gemm_dgelu_stored, written back
//                                into d (in place: tcast_cast_from reads each element once)
// Row-major (rows, cols) tensors, cols % 8 == 0, 16-byte aligned pointers.
// The LayerNorm forward is not elementwise (a row's statistics come first), so it is not a source: it casts
// its own output row by row as it stores it, through the sink of its row kernel (layernorm.cuh):
//   tcast_layernorm_cast(y, ...)  LayerNorm (or residual add + LayerNorm) and y = cast(out) along C
#pragma once

#include "llmc/kernels/tcast/tcast_source.cuh"
#include "llmc/kernels/tcast/tcast_cast.cuh"    // tcast_cast, tcast_cast_path, tcast_lanes_cast_packet
#include "llmc/kernels/fp8/lowp_producers.cuh"  // LowpSrcGelu, gemm_dgelu_stored
#include "llmc/kernels/layernorm.cuh"           // layernorm_forward_sink

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

// ------------------------------------------------------------------------------------------------
// LayerNorm

// Whether tcast_layernorm_cast casts inside the LayerNorm kernel: the residual + LayerNorm (residual: every
// LayerNorm of the trainer but layer 0's ln1, which is not worth 8 more kernels of compile time), the
// exponent or RNE quantizer (MX, BFP, unscaled floats and ints; not the general path), tiles of 2 .. 256
// along C or none (channel, per-tensor and M:N casts need the whole slice first), no statistics (a counted
// cast is the stand-alone kernel's), the LayerNorm's warp path (C <= 4096), 16-byte aligned y.
static inline bool tcast_layernorm_fusable(const TcastDataType& dt, int C, bool residual, bool with_stats, const floatX* y) {
    if (!residual || with_stats || dt.sparse_n > 0 || tcast_cast_path(dt, false) == TCAST_PATH_GENERAL) return false;
    const int tile = dt.has_scale ? dt.scale.tile : -1;
    if (dt.has_scale && (tile <= 0 || tile > 256)) return false;
    return layernorm_forward_warp_path(C) && ((uintptr_t)y & 15) == 0;
}

// out = LayerNorm(inp1) (inp2 == NULL; residual unused) or residual = inp1 + inp2, out =
// LayerNorm(residual) (inp2 != NULL), with mean / rstd, exactly as layernorm_forward /
// fused_residual_layernorm_forward (layernorm.cuh; their shapes, requirements and errors), and y =
// cast(out) along C (dim 1) as tcast_cast(y, out, N, C, 1, dt, seed, stats, ctx) gives it after them, bit
// for bit (dev/cuda/tcast_producers.cu). One kernel where tcast_layernorm_fusable holds (out is still
// stored: the LayerNorm backward and the wgrad cast read it); else those two launches. y (N, C) must not
// alias the LayerNorm's tensors. Errors (exit): tcast_cast's shape checks.
static inline void tcast_layernorm_cast(floatX* y, floatX* residual, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                        const floatX* inp2, const floatX* weight, const floatX* bias, int N, int C,
                                        const TcastDataType& dt, uint64_t seed, TcastDeviceStats* stats, TcastCastContext* ctx,
                                        cudaStream_t stream) {
    char err[256];
    if (tcast_cast_shape_ok(dt, N, C, 1, err, sizeof(err)) != 0) tcast_cast_die_(err);
    if (!tcast_layernorm_fusable(dt, C, inp2 != NULL, stats != NULL, y)) {
        if (inp2) fused_residual_layernorm_forward(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C, stream);
        else layernorm_forward(out, mean, rstd, inp1, weight, bias, N, C, stream);
        tcast_cast(y, out, N, C, 1, dt, seed, stats, ctx, stream);
        return;
    }
    const TcastKernelArgs k = tcast_kernel_args(dt, seed);
    const int tile = dt.has_scale ? dt.scale.tile : -1;
    if (tcast_cast_path(dt, false) == TCAST_PATH_RNE)
        layernorm_forward_sink<true>(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C, TcastRowSink<TcastQRne>{y, tile, k}, stream);
    else
        layernorm_forward_sink<true>(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C, TcastRowSink<TcastQExp>{y, tile, k}, stream);
}
