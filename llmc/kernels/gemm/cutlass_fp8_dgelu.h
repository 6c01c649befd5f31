// cutlass_fp8_dgelu.h - the fcproj layer's data gradient of the FP8 build as ONE Hopper FP8 GEMM whose epilogue applies
// GELU' and writes the fc layer's dY operand (issue 27, doc/TCFP12.md "Fourth round"): dX = dY · W times GELU'(pre),
// quantized to E5M2 plain and transposed, with its amax and the fc layer's bias-gradient column sums, on CUTLASS (one
// translation unit per configuration, cutlass_fp8_dgelu_<name>.cu, and a dispatcher, cutlass_fp8_dgelu.cu, compiled into
// $(BUILD)/cutlass/ for sm_90a; this header has no CUTLASS types). Callers: the FP8 build's --fp8-cutlass 1
// (llmc/modes/lowp/lowp_cutlass.cuh, configuration coop_fa256_e128x32) and dev/cuda/cutlass_fp8_dgelu.cu.
//
// Today (llmc/modes/lowp/gemm_lowp.cuh) the FP8 build runs this as the cuBLASLt FP8 GEMM dx = dy8 · W8 to BF16
// (gemm_fp8.cuh fp8_linear_dgrad), then one producer pass (lowp_producers.cuh LowpSrcDgelu through
// fp8_quantize_pair_from) that applies gemm_dgelu_stored and writes the E5M2 codes plain and transposed with the amax.
// This GEMM computes the same values in its epilogue. Per element (n, c), n < N (tokens), c < C (the fcproj layer's
// input width, 4x the model width):
//   acc(n, c) = Σ_o decode(dy[n, o]) · decode(wt[c, o])              fp32 accumulation (configurations below)
//   g[n, c]   = bf16_rne(dy_dscale · wt_dscale · acc)                the BF16 dgrad cuBLASLt stores today (optional output)
//   v(n, c)   = bf16_rne(g · gelu_tanh'(pre[n, c]))                 gemm_dgelu_stored(g, pre): the fc layer's dY value
//   d[n, c]   = e5m2_rne_satfinite(fp32(v · d_scale))                the fc layer's dgrad operand codes
//   dt[c, n]  = d[n, c]                                              the same codes transposed: its wgrad operand
//   *amax_d   = max over all (n, c) of |v|                           a float, BEFORE d_scale (a BF16 value)
//   part[t, c] = Σ_{n in [128 t, 128 t + 128), n < N} v(n, c)          fp32: the fc layer's bias-gradient column sums per
//                                                                    128-row tile (dbias[c] = Σ_t part[t, c])
// gelu_tanh' and the product are gelu_fastmath.cuh's dgelu_stored_fastmath: the instructions the trainer's
// --use_fast_math build executes for gemm_dgelu_stored (FTZ multiplies, ex2.approx, rcp.approx), so v, d, dt and the
// amax are bit for bit what today's producer makes of the same g (dev/cuda/cutlass_fp8_dgelu.cu checks it on every
// element, and the functor on all 2^32 BF16 pairs). The quantizing multiply is mul.rn.ftz as fp8q_scaled's __fmul_rn
// under --use_fast_math, the conversion cvt.rn.satfinite.e5m2x2.f32 as fp8q_encode_n; the one difference: a NaN v gives
// 0x7F here, the producer's code keeps the NaN's sign (a NaN only comes from NaN or infinite inputs).
// Scales (the conventions of gemm_fp8.cuh): dy_dscale, wt_dscale are device fp32 DEQUANT scales, d_scale the device
// fp32 QUANT scale of d (code = Q(v · d_scale)); powers of two make the scale product exact.
//
// Tensors (row-major, the trainer's layouts; fp8_linear_dgrad's operands):
//   dy      (N, OC)   E5M2 codes         the fcproj layer's dY, quantized
//   wt      (C, OC)   E4M3 codes         Wᵀ: the transposed weight copy the FP8 build keeps for the dgrad
//   pre     (N, C)    BF16               the fc layer's pre-activation (the Z its forward kept)
//   d       (N, C)    E5M2 codes         overwritten
//   dt      (C, ldt)  E5M2 codes, or NULL overwritten in columns n < N (ldt >= N, a multiple of 16; N a multiple of 16:
//                                        columns N..ldt-1 are not written); NULL: not wanted
//   g       (N, C)    BF16, or NULL      overwritten: the GEMM's own BF16 output, for a caller that needs it (the
//                                        speculative-scaling fallback, tests); NULL: not stored
//   amax_d  1 float, or NULL             overwritten (zeroed on `stream`, then the kernel's atomicMax)
//   col_partials (cutlass_fp8_dgelu_col_partial_rows(N), C) fp32, or NULL   overwritten (row-major, row t = the column
//                                        sums of v over rows [128 t, 128 t + 128)); NULL: not wanted
// In CUTLASS's terms: D (M x N) = A · B with M = N tokens, N = C, K = OC; A = dy (row-major, K-major), B = wt (K-major),
// D, g and pre row-major, dt the M-major aux store of cutlass_fp8_common.cuh, C (the source) = void.
//
// Requirements: N >= 0; C >= 16 and OC >= 16, both multiples of 16 (TMA: 16-byte row strides); every tensor pointer
// (col_partials included) 16-byte aligned; with dt: ldt >= N, a multiple of 16, and N a multiple of 16 (TMA writes whole 16-byte chunks along a
// dt row: doc/TCFP12.md "The _dt padding writes"); a GPU of compute capability 9.0 (sm_90a code only); outputs not
// overlapping the inputs or each other. N == 0 only zeroes *amax_d. Any N (with dt a multiple of 16): the last tile
// may be partial (TMA clips it by rows).
// Every configuration uses the persistent data-parallel tile scheduler (each output tile computed by one CTA over the
// whole K, no split-K or stream-K), so g, d and dt are bitwise reproducible; the amax is a max of bit patterns through
// atomicMax (order-independent), so it is too. The column sums: each partial is written once by the CTA of its tile,
// summed in one fixed order (cutlass_fp8_common.cuh Fp8ColSums: per thread its 2 rows of a column, a butterfly over the
// 8 lanes sharing the column, then the 8 warps in order), so they are bitwise reproducible as well; the order differs
// from today's producer's (64-row tiles, fp8_quantize_pair), so the sums differ from its in the last bits.
// Errors: an unsupported shape or alignment, CUTLASS's can_implement refusing the problem, a failing initialization or
// launch print `error: cutlass_fp8_dgelu: <what> (N=.., C=.., OC=..)` with CUTLASS's status or the CUDA error, and
// exit with status 1. Asynchronous on `stream`; no host synchronization. A CUTLASS workspace, where a configuration
// needs one, is allocated once and kept (cutlass_fp8_dgelu_free frees it).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// X(name, description): every configuration, in the order the harness runs them; the first is the default. All are
// cooperative, natural form, with the producer's GELU', warp-reduced amax, dt and the optional g. "fa" = fast
// accumulation (no fp32 promotion in the mainloop: different accumulation order, checked against float64 like the
// others); "_eMxN" = the epilogue tile. Both keep the epilogue's shared memory at 64 KB or less (the pre load has 2
// stages, not CUTLASS's automatic 4) so the mainloop keeps 4 / 3 stages.
#define CUTLASS_FP8_DGELU_CONFIGS(X)                                                                                    \
    X(coop_e128x64, "cooperative 128x128x128, cluster 2x1, fp32 promotion every 4 k-blocks, epilogue tile 128x64")     \
    X(coop_fa256_e128x32, "cooperative 128x256x128, cluster 2x1, fast accumulation, epilogue tile 128x32")

enum CutlassDgeluConfig {
#define CUTLASS_FP8_DGELU_ENUM(name, text) CUTLASS_DGELU_##name,
    CUTLASS_FP8_DGELU_CONFIGS(CUTLASS_FP8_DGELU_ENUM)
#undef CUTLASS_FP8_DGELU_ENUM
    CUTLASS_DGELU_NUM_CONFIGS
};

// The configuration's short name ("coop_e128x64", ...); NULL for a value outside the enum.
const char* cutlass_fp8_dgelu_config_name(CutlassDgeluConfig cfg);

// The configuration called `name`; -1 when there is none.
int cutlass_fp8_dgelu_config_parse(const char* name);

// One line on the configuration's kernel: CUTLASS version, schedule, tile, cluster, accumulation, pipeline stages,
// shared memory, epilogue tile.
const char* cutlass_fp8_dgelu_describe(CutlassDgeluConfig cfg = CUTLASS_DGELU_coop_e128x64);

// out[i] = the configuration's stored GELU' product of (g[i], pre[i]) (bf16(g · gelu'(pre)) as a float; g, pre BF16
// values held in fp32), i < n: the very functor its epilogue instantiates, compiled in its translation unit (for the
// harness's exhaustive comparison with today's producer). g, pre, out: device fp32 arrays of n >= 0 values.
// Asynchronous on stream. A value outside the enum or a launch failure: `error: cutlass_fp8_dgelu: ...`, exit 1.
void cutlass_fp8_dgelu_eval(CutlassDgeluConfig cfg, const float* g, const float* pre, float* out, int n, cudaStream_t stream);

// The dgrad described above with configuration cfg (a value outside the enum: the error line, exit 1).
void cutlass_fp8_dgelu_dgrad(uint8_t* d, uint8_t* dt, int ldt, float* amax_d, __nv_bfloat16* g, float* col_partials, const uint8_t* dy,
                             const float* dy_dscale,
                             const uint8_t* wt, const float* wt_dscale, const __nv_bfloat16* pre, const float* d_scale, int N, int C,
                             int OC, cudaStream_t stream, CutlassDgeluConfig cfg = CUTLASS_DGELU_coop_e128x64);

// NULL when cutlass_fp8_dgelu_dgrad can run this shape with these pointers on the current device, else why not (the
// text its error line would print). Host-side checks only (shape, alignment, device, CUTLASS's can_implement); the
// pointers are not dereferenced.
const char* cutlass_fp8_dgelu_unsupported(int N, int C, int OC, const void* d, const void* dt, int ldt, const void* g, const void* col_partials,
                                          const void* dy, const void* wt, const void* pre, CutlassDgeluConfig cfg = CUTLASS_DGELU_coop_e128x64);

// Rows of the column-sum partials for N tokens: one per 128-row tile of every configuration (ceil(N / 128)).
#define CUTLASS_FP8_DGELU_COL_TILE_M 128
static inline int cutlass_fp8_dgelu_col_partial_rows(int N) { return (N + CUTLASS_FP8_DGELU_COL_TILE_M - 1) / CUTLASS_FP8_DGELU_COL_TILE_M; }

// Frees every configuration's workspace, if one was ever needed (at exit; safe to call twice).
void cutlass_fp8_dgelu_free(void);
