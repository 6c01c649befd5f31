// cutlass_fp8_fc.h - the fc layer's forward of the FP8 build as ONE Hopper FP8 GEMM whose epilogue writes the
// next GEMM's operand (issue 27): out = inp · weightᵀ + bias with the GELU and its FP8 quantization fused into
// the epilogue, on CUTLASS (one translation unit per configuration, cutlass_fp8_fc_<name>.cu, and a dispatcher,
// cutlass_fp8_fc.cu, compiled into $(BUILD)/cutlass/ for sm_90a; this header has no CUTLASS types). Callers: the FP8
// build's --fp8-cutlass 1 (llmc/modes/lowp/lowp_cutlass.cuh, configuration coop_n_fa256_pgelu_e128x64_dt) and
// dev/cuda/cutlass_fp8.cu (doc/TCFP12.md, "CUTLASS path: status").
//
// What it computes, per output element (n, o), n < N (tokens), o < OC:
//   acc(n, o) = Σ_c decode(inp[n, c]) · decode(weight[o, c])           fp32 accumulation (below)
//   Z(n, o)   = fp32(inp_dscale · weight_dscale · acc + bias[o])        the pre-activation, fp32
//   z[n, o]   = bf16_rne(Z)                                             stored: the pre-GELU kept for the backward
//   g(n, o)   = bf16_rne(gelu_tanh(z[n, o]))                            the value the fcproj layer's X is made of
//   d[n, o]   = e4m3_rne_satfinite(fp32(g · d_scale))                   stored: the fcproj GEMM's operand codes
//   dt[o, n]  = d[n, o]                                                 optional ("_dt" configurations): the same codes
//                                                                       transposed, the fcproj wgrad GEMM's operand
//   *amax_d   = max over all (n, o) of |g|                              a float, BEFORE d_scale (a BF16 value)
// gelu_tanh(x) = x · sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x³): the formula of gemm_kernels.cuh
// gemm_gelu_tanh, evaluated in fp32 by one of three instruction sequences (CutlassFcGelu below; the translation
// units are not built with --use_fast_math): with the producer's sequence (CUTLASS_FC_GELU_PRODUCER) g is bit for
// bit the value today's passes store (gemm_gelu_stored: GELU of the BF16 pre-activation, rounded to BF16) and d /
// amax are what fp8_quantize_pair_from(LowpSrcGelu) makes of it; with the others g differs where the GELU lies
// within a few fp32 ulps of a BF16 rounding midpoint (dev/cuda/cutlass_fp8.cu counts the codes that differ).
// e4m3_rne_satfinite is cvt.rn.satfinite.e4m3x2.f32: round to nearest even, beyond ±448 -> ±448, NaN -> 0x7F,
// i.e. llmc/numerics/fp8.h fp8_encode_rne(E4M3FN, v, 1) for every non-NaN v.
// Scales (the conventions of gemm_fp8.cuh): inp_dscale, weight_dscale are device fp32 DEQUANT scales (value
// = decode(code) · dscale), d_scale the device fp32 QUANT scale of D (code = Q(value · d_scale)). Powers of two
// make the scale product exact; any positive values work.
// Accumulation: Hopper FP8 tensor cores (wgmma) with CUTLASS's FP8 mainloop promoting the partial sums to fp32
// registers every 4 MMA k-blocks (128 values of C; mma_promotion_interval), i.e. not "fast accumulation": the
// trainer's default (--fp8-fast-accum 0); the "fast accumulation" configurations below do not promote.
//
// Tensors (row-major, the trainer's layout):
//   inp     (N, C)   E4M3 codes          the fc layer's input X, quantized
//   weight  (OC, C)  E4M3 codes          W as stored (no transposed copy needed)
//   bias    (OC)     BF16, or NULL       (no bias)
//   z       (N, OC)  BF16                overwritten
//   d       (N, OC)  E4M3 codes          overwritten
//   dt      (OC, ldt) E4M3 codes, or NULL overwritten in columns n < N (row-major, leading dimension ldt >= N, a
//                                        multiple of 16; N itself a multiple of 16: columns N..ldt-1 are not written).
//                                        Only the "_dt" configurations write it (cutlass_fp8_fc_config_writes_dt); NULL:
//                                        not wanted
//   amax_d  1 float, or NULL             overwritten (zeroed on `stream`, then the kernel's atomicMax)
// In CUTLASS's terms: the two problem forms of the configurations below (_t, _n), ElementC = void.
//
// Requirements: N >= 0, C >= 16 and OC >= 16, both multiples of 16 (TMA: 16-byte row strides of inp, weight and
// d); every tensor pointer 16-byte aligned; with dt: ldt >= N and a multiple of 16 (TMA: 16-byte row strides) and N a
// multiple of 16 (TMA writes whole 16-byte chunks along a dt row: with N % 16 != 0 the columns N .. round_up(N, 16) - 1
// would be overwritten; doc/TCFP12.md "The _dt padding writes"); a GPU
// of compute capability 9.0 (sm_90a code only); z, d, dt not overlapping the inputs or each other. N == 0 only zeroes
// *amax_d. Any N (with dt a multiple of 16): the last tile may be partial (TMA clips it by rows).
// Configurations (issue 27's tuning): the kernel exists in several explicit CUTLASS instantiations, each its own
// translation unit llmc/kernels/gemm/cutlass_fp8_fc_<name>.cu (all built on llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh),
// picked at run time by a CutlassFcConfig; the list and what each one tests is CUTLASS_FP8_FC_CONFIGS below.
// Every configuration uses the persistent data-parallel tile scheduler: each output tile is computed by exactly
// one CTA over the whole K (no split-K, no stream-K), so z and d are bitwise reproducible; amax is a max of |g|
// bit patterns through atomicMax (order-independent), so it is too. Two problem forms:
//   _t ("transposed", the first form): CUTLASS's column-major D (M x N) = A · B with M = OC, N = tokens: A = weight
//      (M x K row-major), B = inp (K x N column-major), D and Z column-major (M-major) = the row-major (N, OC)
//      output, bias per row of D (ScaledLinCombPerRowBiasEltActAmaxAux).
//   _n ("natural"): D (M x N) = A · B with M = tokens, N = OC: A = inp (M x K row-major), B = weight (K x N
//      column-major), D and Z row-major (N-major) = the same (N, OC) output, bias per column of D
//      (ScaledLinCombPerColBiasEltActAmaxAux). Both operands are K-major (the TN form FP8 wgmma needs) either way;
//      the difference is the epilogue's register -> shared memory stores: wgmma's accumulator fragments hold pairs
//      of neighbours along N, so an N-major tile gets vectorized stores, an M-major one single-byte stores of the
//      E4M3 codes (CUTLASS's auto-vectorizing copy; BF16 Z gets stmatrix either way).
// "_dt" configurations (natural form) also store the codes transposed from the epilogue: a second aux store of the
// same E4M3 fragment with the M-major stride (cutlass_fp8_fc_impl.cuh), bit-identical to d by construction; the
// transposed copy that today's GELU producer writes in the same pass (fp8_quantize_pair_from) and that the fused
// forward must also write to replace it (doc/TCFP12.md, "Third round").
// "z only" configurations store Z alone (ScaledLinComb...BiasEltAct with the identity, BF16 D; d and amax are not
// written): what the mainloop costs in CUTLASS, against the cuBLASLt GEMM that does the same work.
// "fast accumulation" configurations let the tensor cores accumulate all of K (no fp32 promotion): different
// numerics (the harness still checks z against float64 and counts the bits that differ from cuBLASLt).
// Errors: an unsupported shape or alignment, CUTLASS's can_implement refusing the problem, a failing
// initialization or launch print `error: cutlass_fp8_fc: <what> (N=.., C=.., OC=..)` with CUTLASS's status or
// the CUDA error, and exit with status 1. Asynchronous on `stream`; no host synchronization. A CUTLASS
// workspace, where a configuration needs one, is allocated once and kept (cutlass_fp8_fc_free frees it).
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

// X(name, description): every configuration, in the order the harness runs them. The first is the default
// (the one the first GPU run measured).
// Second round (2026-11-27): the dead ends of the first (coop_t_z, coop_n, coop_n_wamax, pp_n, pp_n_fa,
// coop_n_fa256: doc/TCFP12.md's table) are gone; "_pgelu" = today's producer's GELU (bit-exact), "_eMxN" = epilogue
// tile MxN instead of CUTLASS's automatic one (128x32 cooperative, 64x64 pingpong), "fa" = fast accumulation.
#define CUTLASS_FP8_FC_CONFIGS(X)                                                                                        \
    X(coop_t, "transposed, cooperative 128x128x128, cluster 1x2, fp32 promotion, IEEE GELU, amax atomic per thread")    \
    X(coop_n_z, "natural, cooperative 128x128x128, cluster 2x1, fp32 promotion, z only")                              \
    X(coop_n_fgelu, "natural, cooperative 128x128x128, cluster 2x1, fp32 promotion, GELU on __expf and __fdividef")   \
    X(coop_n_pgelu, "natural, cooperative 128x128x128, cluster 2x1, fp32 promotion, producer GELU")                   \
    X(coop_n_pgelu_e128x64, "coop_n_pgelu with epilogue tile 128x64")                                                  \
    X(coop_n_pgelu_e128x128, "coop_n_pgelu with epilogue tile 128x128 (one subtile per tile)")                         \
    X(coop_n_fa256_pgelu, "natural, cooperative 128x256x128, cluster 2x1, fast accumulation, producer GELU")          \
    X(coop_n_fa256_pgelu_e128x64, "coop_n_fa256_pgelu with epilogue tile 128x64")                                      \
    X(pp_n_fa_pgelu, "natural, pingpong 128x128x128, cluster 2x1, fast accumulation, producer GELU")                  \
    X(pp_n_fa_pgelu_e64x128, "pp_n_fa_pgelu with epilogue tile 64x128")                                                \
    X(coop_n_pgelu_e128x64_dt, "coop_n_pgelu_e128x64 plus the transposed codes dt")                                    \
    X(coop_n_fa256_pgelu_e128x64_dt, "coop_n_fa256_pgelu_e128x64 plus the transposed codes dt")

// The epilogue's GELU (header comment; cutlass_fp8_fc_impl.cuh has the details):
enum CutlassFcGelu {
    CUTLASS_FC_GELU_NONE,      // z only: no GELU, no d
    CUTLASS_FC_GELU_IEEE,      // IEEE expf and division
    CUTLASS_FC_GELU_FAST,      // __expf and __fdividef
    CUTLASS_FC_GELU_PRODUCER,  // today's producer's instructions (gelu_fastmath.cuh): its bits on every input
};

enum CutlassFcConfig {
#define CUTLASS_FP8_FC_ENUM(name, text) CUTLASS_FC_##name,
    CUTLASS_FP8_FC_CONFIGS(CUTLASS_FP8_FC_ENUM)
#undef CUTLASS_FP8_FC_ENUM
    CUTLASS_FC_NUM_CONFIGS
};

// The configuration's short name ("coop_t", ...); NULL for a value outside the enum.
const char* cutlass_fp8_fc_config_name(CutlassFcConfig cfg);

// The configuration called `name`; -1 when there is none.
int cutlass_fp8_fc_config_parse(const char* name);

// Whether the configuration writes d and amax_d (false: "z only", d and *amax_d are left as they were).
bool cutlass_fp8_fc_config_writes_d(CutlassFcConfig cfg);

// Whether the configuration can write the transposed codes dt (the "_dt" ones; the others refuse a non-NULL dt).
bool cutlass_fp8_fc_config_writes_dt(CutlassFcConfig cfg);

// The configuration's GELU (CUTLASS_FC_GELU_NONE for z only and for a value outside the enum).
CutlassFcGelu cutlass_fp8_fc_config_gelu(CutlassFcConfig cfg);

// out[i] = the configuration's stored GELU of in[i] (bf16(gelu(bf16(in[i]))) as a float), i < n: the very functor
// its epilogue instantiates, compiled in its translation unit (for the harness's exhaustive comparison with today's
// producer). in, out: device fp32 arrays of n >= 0 values. Asynchronous on stream. A z-only configuration, a value
// outside the enum or a launch failure: `error: cutlass_fp8_fc: ...`, exit 1.
void cutlass_fp8_fc_gelu_eval(CutlassFcConfig cfg, const float* in, float* out, int n, cudaStream_t stream);

// The forward described above, with configuration cfg (a value outside the enum: the error line, exit 1). dt: the
// transposed codes (OC, ldt), or NULL (ldt is then ignored); a non-NULL dt with a configuration that cannot write it is
// an error.
void cutlass_fp8_fc_forward(__nv_bfloat16* z, uint8_t* d, uint8_t* dt, int ldt, float* amax_d, const uint8_t* inp, const float* inp_dscale,
                            const uint8_t* weight, const float* weight_dscale, const __nv_bfloat16* bias, const float* d_scale,
                            int N, int C, int OC, cudaStream_t stream, CutlassFcConfig cfg = CUTLASS_FC_coop_t);

// NULL when cutlass_fp8_fc_forward can run this shape with these pointers on the current device, else why not
// (the text its error line would print). Host-side checks only (shape, alignment, device, CUTLASS's
// can_implement); the pointers are not dereferenced.
const char* cutlass_fp8_fc_unsupported(int N, int C, int OC, const void* z, const void* d, const void* dt, int ldt, const void* inp,
                                       const void* weight, const void* bias, CutlassFcConfig cfg = CUTLASS_FC_coop_t);

// One line on the configuration's kernel: CUTLASS version, schedule, tile, cluster, accumulation, pipeline
// stages, shared memory, epilogue tile, epilogue.
const char* cutlass_fp8_fc_describe(CutlassFcConfig cfg = CUTLASS_FC_coop_t);

// Frees every configuration's workspace, if one was ever needed (at exit; safe to call twice).
void cutlass_fp8_fc_free(void);
