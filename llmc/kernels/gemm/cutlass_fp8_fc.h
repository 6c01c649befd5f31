// cutlass_fp8_fc.h - the fc layer's forward of the FP8 build as ONE Hopper FP8 GEMM whose epilogue writes the
// next GEMM's operand (issue 27): out = inp · weightᵀ + bias with the GELU and its FP8 quantization fused into
// the epilogue, on CUTLASS (compiled in its own translation unit, cutlass_fp8_fc.cu, into
// $(BUILD)/cutlass/cutlass_fp8_fc.o for sm_90a; this header has no CUTLASS types). Not used by the trainer yet:
// dev/cuda/cutlass_fp8.cu is its only caller (doc/TCFP12.md, "CUTLASS path: status").
//
// What it computes, per output element (n, o), n < N (tokens), o < OC:
//   acc(n, o) = Σ_c decode(inp[n, c]) · decode(weight[o, c])           fp32 accumulation (below)
//   Z(n, o)   = fp32(inp_dscale · weight_dscale · acc + bias[o])        the pre-activation, fp32
//   z[n, o]   = bf16_rne(Z)                                             stored: the pre-GELU kept for the backward
//   g(n, o)   = bf16_rne(gelu_tanh(z[n, o]))                            the value the fcproj layer's X is made of
//   d[n, o]   = e4m3_rne_satfinite(fp32(g · d_scale))                   stored: the fcproj GEMM's operand codes
//   *amax_d   = max over all (n, o) of |g|                              a float, BEFORE d_scale (a BF16 value)
// gelu_tanh(x) = x · sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x³): the formula of gemm_kernels.cuh
// gemm_gelu_tanh, evaluated in fp32 with IEEE expf and division (this file's TU is not built with
// --use_fast_math). So g is, up to the last fp32 bits of the GELU, the value the separate passes store
// (gemm_gelu_stored: GELU of the BF16 pre-activation, rounded to BF16) and d / amax are what
// fp8_quantize_pair_from(LowpSrcGelu) makes of it; dev/cuda/cutlass_fp8.cu counts the codes that differ.
// e4m3_rne_satfinite is cvt.rn.satfinite.e4m3x2.f32: round to nearest even, beyond ±448 -> ±448, NaN -> 0x7F,
// i.e. llmc/numerics/fp8.h fp8_encode_rne(E4M3FN, v, 1) for every non-NaN v.
// Scales (the conventions of gemm_fp8.cuh): inp_dscale, weight_dscale are device fp32 DEQUANT scales (value
// = decode(code) · dscale), d_scale the device fp32 QUANT scale of D (code = Q(value · d_scale)). Powers of two
// make the scale product exact; any positive values work.
// Accumulation: Hopper FP8 tensor cores (wgmma) with CUTLASS's FP8 mainloop promoting the partial sums to fp32
// registers every 4 MMA k-blocks (128 values of C; mma_promotion_interval), i.e. not "fast accumulation": the
// trainer's default (--fp8-fast-accum 0).
//
// Tensors (row-major, the trainer's layout):
//   inp     (N, C)   E4M3 codes          the fc layer's input X, quantized
//   weight  (OC, C)  E4M3 codes          W as stored (no transposed copy needed)
//   bias    (OC)     BF16, or NULL       (no bias)
//   z       (N, OC)  BF16                overwritten
//   d       (N, OC)  E4M3 codes          overwritten
//   amax_d  1 float, or NULL             overwritten (zeroed on `stream`, then the kernel's atomicMax)
// In CUTLASS's column-major terms this is the transposed product: D (M x N) = A · B with M = OC, N = N, K = C;
// A = weight as an M x K row-major matrix ("T", K contiguous), B = inp as a K x N column-major matrix ("N", K
// contiguous): both operands K-major, the TN form Hopper's FP8 wgmma needs; D and the auxiliary Z output are
// M x N column-major with leading dimension OC, which is exactly the row-major (N, OC) output; the bias is
// per row of D (per M = per output feature): ScaledLinCombPerRowBiasEltActAmaxAux with ElementC = void.
//
// Requirements: N >= 0, C >= 16 and OC >= 16, both multiples of 16 (TMA: 16-byte row strides of inp, weight and
// d); every tensor pointer 16-byte aligned; a GPU of compute capability 9.0 (sm_90a code only); z, d not
// overlapping the inputs. N == 0 only zeroes *amax_d. Any N: the last tile may be partial (TMA clips it).
// Schedule: TMA warp-specialized cooperative kernel, tile 128 x 128 x 128 (M x N x K), cluster 1 x 2 x 1, the
// persistent data-parallel tile scheduler: each output tile is computed by exactly one CTA over the whole K
// (no split-K, no stream-K), so z and d are bitwise reproducible; amax is a max of |g| bit patterns through
// atomicMax (order-independent), so it is too.
// Errors: an unsupported shape or alignment, CUTLASS's can_implement refusing the problem, a failing
// initialization or launch print `error: cutlass_fp8_fc: <what> (N=.., C=.., OC=..)` with CUTLASS's status or
// the CUDA error, and exit with status 1. Asynchronous on `stream`; no host synchronization. The CUTLASS
// workspace (none for this schedule) would be allocated once and kept (cutlass_fp8_fc_free frees it).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// The forward described above.
void cutlass_fp8_fc_forward(__nv_bfloat16* z, uint8_t* d, float* amax_d, const uint8_t* inp, const float* inp_dscale,
                            const uint8_t* weight, const float* weight_dscale, const __nv_bfloat16* bias, const float* d_scale,
                            int N, int C, int OC, cudaStream_t stream);

// NULL when cutlass_fp8_fc_forward can run this shape with these pointers on the current device, else why not
// (the text its error line would print). Host-side checks only (shape, alignment, device, CUTLASS's
// can_implement); the pointers are not dereferenced.
const char* cutlass_fp8_fc_unsupported(int N, int C, int OC, const void* z, const void* d, const void* inp, const void* weight,
                                       const void* bias);

// One line on the kernel: CUTLASS version, schedule, tile, cluster, pipeline stages, shared memory.
const char* cutlass_fp8_fc_describe(void);

// Frees the workspace, if one was ever needed (at exit; safe to call twice).
void cutlass_fp8_fc_free(void);
