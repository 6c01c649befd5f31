// lowp_producers.cuh - producers that write FP8 codes (issue 17, doc/TCFP12.md "Producers that write the
// codes"): the FP8 / TCFP-12 backend (llmc/modes/lowp/gemm_lowp.cuh) computes two elementwise producers inside the
// quantize-transpose kernel that makes the next GEMM's operands (fp8_quantize_pair_from), instead of storing
// their BF16 output and reading it back in a quantization pass:
//   GELU   out = gelu_tanh(pre), pre the fc layer's output (N, 4C): the fcproj layer's X, E4M3
//          (per value: read pre 2 B, write 2 codes = 4 B, against 2 + 2 + 2 + 2 = 8 B for GELU + quantization)
//   dGELU  d = (dY W) * gelu_tanh'(pre), d the fcproj dgrad (N, 4C): the fc layer's dY, E5M2, with the
//          column sums of its bias gradient (read d and pre, write 2 codes = 6 B, against 10 B)
//   LayerNorm  out = LayerNorm(x) from the row statistics the LayerNorm kernel wrote without out
//          (layernorm.cuh layernorm_forward_stats): the qkv / fc layer's X (and the LM head's), E4M3
//          (read x 2 B, write 2 codes; the LayerNorm writes no BF16 out: 2 B a value less than LayerNorm + quantization)
// The values are computed and rounded to BF16 exactly as gemm.cuh's gemm_gelu_forward_kernel<false> and
// gemm_gelu_backward_kernel do (same device functions, same roundings), so the codes, amax and column sums
// equal those of the separate passes bit for bit (dev/cuda/lowp_producers.cu checks it); the LayerNorm's as
// layernorm.cuh's forward kernels do (ln_out_value).
//
// Scaling. With per-tensor current scaling the scale needs the amax of the whole tensor, which exists only
// once the tensor does. The producers therefore quantize speculatively: with the scale of the previous use
// of the same tensor (the layer's scale triple still holds it), taking the amax on the way; a one-thread
// kernel then computes the scale current scaling gives from that amax and, only where it differs (the amax
// crossed a power of two, or the first use), the producer runs again with it (a launch that exits at once
// otherwise). The codes are those of current scaling by construction. With delayed scaling the scale is
// known beforehand: one pass, the amax going into the history as before.
#pragma once

#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/fp8/fp8_quant.cuh"

// Source (fp8_quantize.cuh Fp8SrcMatrix) of the GELU output: gemm_gelu_stored, the value gemm_gelu_forward_kernel<false>
// stores. store != NULL: also writes those values there (when a
// caller reads the BF16 activation: tests, tensor statistics); store must not alias pre.
struct LowpSrcGelu {
    using Elem = floatX;
    const floatX* pre;
    floatX* store;
    __device__ __forceinline__ void packet(float* v, size_t idx, int, int) const {
        const x128 p = load128cs(pre + idx);
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) {
            o[k] = gemm_gelu_stored((float)p[k]);
            v[k] = (float)o[k];
        }
        if (store) store128(store + idx, o);
    }
    __device__ __forceinline__ float at(size_t idx, int, int) const {
        const floatX o = gemm_gelu_stored((float)pre[idx]);
        if (store) store[idx] = o;
        return (float)o;
    }
    bool vec_ok() const { return ((uintptr_t)pre & 15) == 0 && ((uintptr_t)store & 15) == 0; }
};

// Source of the fc layer's dY: gemm_dgelu_stored, the value gemm_gelu_backward_kernel stores (d holds
// the fcproj dgrad, dY W, and is only read: a speculative fallback evaluates the source again).
struct LowpSrcDgelu {
    using Elem = floatX;
    const floatX* d;
    const floatX* pre;
    __device__ __forceinline__ void packet(float* v, size_t idx, int, int) const {
        const x128 g = load128cs(d + idx);
        const x128 p = load128cs(pre + idx);
        #pragma unroll
        for (int k = 0; k < x128::size; k++) v[k] = (float)gemm_dgelu_stored((float)g[k], (float)p[k]);
    }
    __device__ __forceinline__ float at(size_t idx, int, int) const {
        return (float)gemm_dgelu_stored((float)d[idx], (float)pre[idx]);
    }
    bool vec_ok() const { return ((uintptr_t)d & 15) == 0 && ((uintptr_t)pre & 15) == 0; }
};

// Source of a LayerNorm output (rows, C) from the statistics layernorm_forward_stats wrote: out = ln_out_value(x, mean,
// rstd, weight, bias) rounded to floatX, the value layernorm.cuh's forward kernels store (x: the LayerNorm's input as
// it normalized it, i.e. the stored residual of the fused kernel). store != NULL: also writes those values there (tests,
// tensor statistics: GemmContext::keep_activations); store must not alias x.
struct LowpSrcLayernorm {
    using Elem = floatX;
    const floatX* x;
    const float* mean;
    const float* rstd;
    const floatX* weight;
    const floatX* bias;
    floatX* store;
    __device__ __forceinline__ void packet(float* v, size_t idx, int r, int c) const {
        const float m = __ldg(mean + r), s = __ldg(rstd + r);
        const x128 xv = load128cs(x + idx);
        const x128 w = load128(weight + c);
        const x128 b = load128(bias + c);
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) {
            o[k] = (floatX)ln_out_value((float)xv[k], m, s, (float)w[k], (float)b[k]);
            v[k] = (float)o[k];
        }
        if (store) store128(store + idx, o);
    }
    __device__ __forceinline__ float at(size_t idx, int r, int c) const {
        const floatX o = (floatX)ln_out_value((float)x[idx], mean[r], rstd[r], (float)weight[c], (float)bias[c]);
        if (store) store[idx] = o;
        return (float)o;
    }
    bool vec_ok() const {
        return ((uintptr_t)x & 15) == 0 && ((uintptr_t)weight & 15) == 0 && ((uintptr_t)bias & 15) == 0 && ((uintptr_t)store & 15) == 0;
    }
};

// Device state of speculative scaling: the amax (bits) of the tensor being produced, the re-quantize flag
// and the number of re-quantizations so far; on the host the number of speculative quantizations.
struct LowpSpec {
    uint32_t* dev;               // [0] amax bits (zero between uses), [1] redo flag, [2..3] misses (unsigned long long)
    long long uses;
};
// Grid of the fallback launch: it usually exits at once, so far fewer blocks than tiles (blocks loop).
#define LOWP_SPEC_FALLBACK_BLOCKS 1024

static inline void lowp_spec_init(LowpSpec* sp) {
    cudaCheck(cudaMalloc(&sp->dev, 4 * sizeof(uint32_t)));
    cudaCheck(cudaMemset(sp->dev, 0, 4 * sizeof(uint32_t)));
    sp->uses = 0;
}

static inline unsigned long long* lowp_spec_misses(const LowpSpec* sp) { return (unsigned long long*)(sp->dev + 2); }

// The amax slot (bits, zero between uses) the speculative first pass accumulates into: lowp_quantize_speculative's own
// pass, or another kernel that made the codes with the guessed scale (the CUTLASS epilogues, llmc/modes/lowp/lowp_cutlass.cuh,
// which write the amax as a float: the same bits for a max of |v| >= 0).
static inline uint32_t* lowp_spec_amax_bits(const LowpSpec* sp) { return sp->dev; }

// The end of a speculative quantization whose first pass (the codes of src with the guessed QUANT scale *sc_scale, its
// amax accumulated into lowp_spec_amax_bits) has been enqueued: the check (fp8_scale_speculative_check: the triple
// becomes current scaling's, a miss is counted), then the producer again with the right scale if the guess was wrong (a
// launch that exits at once otherwise), into the same codes / tcodes. Column sums do not depend on the scale: the first
// pass's stand.
template <class Src>
static inline void lowp_speculative_finish(LowpSpec* sp, const Src& src, int rows, int cols, FP8Kind kind, uint8_t* codes, uint8_t* tcodes,
                                           float* sc_amax, float* sc_scale, float* sc_inv, cudaStream_t stream) {
    uint32_t* redo = sp->dev + 1;
    fp8_scale_speculative_check(lowp_spec_amax_bits(sp), sc_amax, sc_scale, sc_inv, redo, lowp_spec_misses(sp), kind, 0, 1, stream);
    fp8_quantize_pair_from(codes, tcodes, src, rows, cols, kind, sc_scale, NULL, NULL, redo, LOWP_SPEC_FALLBACK_BLOCKS, stream);
    sp->uses++;
}

// Codes of the produced tensor src (rows, cols) under per-tensor current scaling, speculatively: plain
// codes into `codes` (or NULL), transposed into `tcodes` (required), the scale triple amax / QUANT / DEQUANT
// in sc_amax / sc_scale / sc_inv (sc_scale holds the guess on entry, the current-scaling scale on exit);
// col_partials as fp8_quantize_pair (or NULL). Three launches: producer + quantization with the guess, the
// check (fp8_scale_speculative_check), the producer again with the right scale if the guess was wrong.
template <class Src>
static inline void lowp_quantize_speculative(LowpSpec* sp, const Src& src, int rows, int cols, FP8Kind kind, uint8_t* codes,
                                             uint8_t* tcodes, float* sc_amax, float* sc_scale, float* sc_inv, float* col_partials,
                                             cudaStream_t stream) {
    fp8_quantize_pair_from(codes, tcodes, src, rows, cols, kind, sc_scale, lowp_spec_amax_bits(sp), col_partials, NULL, 0, stream);
    lowp_speculative_finish(sp, src, rows, cols, kind, codes, tcodes, sc_amax, sc_scale, sc_inv, stream);
}

// Re-quantizations so far (synchronizes the stream).
static inline unsigned long long lowp_spec_misses_read(const LowpSpec* sp, cudaStream_t stream) {
    unsigned long long m = 0;
    cudaCheck(cudaMemcpyAsync(&m, lowp_spec_misses(sp), sizeof(m), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    return m;
}
