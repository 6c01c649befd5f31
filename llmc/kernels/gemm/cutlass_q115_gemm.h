// cutlass_q115_gemm.h - the SF16 build's linear-layer forward as ONE Hopper BF16 GEMM whose epilogue applies the Q1.15
// storage boundary (issue 27, deliverable 2; doc/SF16.md "Speed"): the bits of matmul_forward's cuBLASLt GEMM + bias
// followed by its MATMUL_OUT pass (gemm_kernels.cuh gemm_boundary_kernel), and, for the fc layer, followed by the
// pass that quantizes the pre-activation and applies GELU (gemm_gelu_forward_kernel<true>), without those passes'
// reads and writes of the output. So only the GEMM's accumulation order can differ from cuBLASLt's.
// On CUTLASS 4.x (the translation unit cutlass_q115_gemm.cu, compiled into $(BUILD)/cutlass/ for sm_90a); this header
// has no CUTLASS types. Callers: the SF16 mode (llmc/modes/sf16/sf16_cutlass.cuh, --q115-cutlass) and
// dev/cuda/cutlass_q115_gemm.cu.
//
// Per element (n, o), n < N (tokens), o < OC, with Q = the MATMUL_OUT boundary of `mode`:
//   acc(n, o) = Σ_c inp[n, c] · weight[o, c]   fp32 accumulation on the tensor cores (wgmma), one CTA per output tile
//                                               over the whole K (no split-K: deterministic)
//   y         = bf16_rne(acc + bias[o])         fp32 add (bias NULL: + 0), then round to nearest even (what cuBLASLt
//                                               stores and the pass reads)
//   Q(y)      = CUTLASS_Q115_OFF: y;  CUTLASS_Q115_Q115: simulate_q115(y);  CUTLASS_Q115_Q131: simulate_q115(
//               simulate_q131(y)) (llmc/numerics/q115.h; SF16_TRUE_FORWARD's chain, llmc/modes/sf16/traits.cuh), which
//               on a BF16 y is simulate_q115(y): the epilogue computes that (cutlass_q115_gemm.cu says why)
//   plain form (pre == NULL):  out = bf16_rne(Q(y))
//   GELU form (pre != NULL; mode _Q115 or _Q131): pre = bf16_rne(Q(y)),  out = bf16_rne(G(gelu_tanh(pre)))
//               with G = simulate_q115 (the GELU_OUT boundary; no Q1.31 step there) and gelu_tanh the instructions the
//               --use_fast_math trainer executes for gemm_gelu_tanh (llmc/kernels/gemm/gelu_fastmath.cuh)
// The harness checks every formula bit for bit against the passes on the GEMM's own uncast output, and the GELU on all
// 65536 BF16 inputs (cutlass_q115_gemm_eval).
//
// Tensors (row-major, matmul_forward's): inp (N, C), weight (OC, C), bias (OC) or NULL, out and pre (N, OC) BF16,
// overwritten, not overlapping the inputs or each other. In CUTLASS's terms D (M x N) = A · Bᵀ with M = N tokens,
// N = OC, K = C, both operands K-major (cuBLASLt's "TN").
// Requirements: N >= 0; C, OC positive multiples of 8 (16-byte rows: TMA); every pointer 16-byte aligned; a GPU of
// compute capability 9.0. Any N (TMA clips the last tile's rows). Five instantiations: the plain form for each mode, the
// GELU form for the two boundary modes; each has its mode at compile time.
// Errors: `error: cutlass_q115_gemm: <what> (N=.., C=.., OC=..)` and exit 1 (cutlass_q115_gemm_unsupported gives the
// text without exiting). Asynchronous on `stream`. A CUTLASS workspace, where needed, is allocated once and kept.
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>

// The boundary the epilogue applies (Q above).
enum CutlassQ115Mode { CUTLASS_Q115_OFF = 0, CUTLASS_Q115_Q115 = 1, CUTLASS_Q115_Q131 = 2 };

// One line on the kernel: CUTLASS version, schedule, tile, cluster, stages, shared memory, epilogue tile.
const char* cutlass_q115_gemm_describe(void);

// NULL when cutlass_q115_gemm_forward can run this call on the current device, else why not (its error text). Host
// checks only (shape, alignment, mode, device, CUTLASS's can_implement); nothing is dereferenced. pre NULL: the plain form.
const char* cutlass_q115_gemm_unsupported(int N, int C, int OC, const void* out, const void* pre, const void* inp, const void* weight,
                                          const void* bias, int mode);

// The plain form (pre NULL) or the GELU form (pre given) as described above.
void cutlass_q115_gemm_forward(__nv_bfloat16* out, __nv_bfloat16* pre, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                               const __nv_bfloat16* bias, int N, int C, int OC, CutlassQ115Mode mode, cudaStream_t stream);

// The epilogue's elementwise functions on n device floats (in, out: n fp32 values, device memory), as the GEMM's
// epilogue instantiates them: gelu = 0: out[i] = Q(bf16_rne(in[i])) rounded to BF16; gelu = 1: out[i] =
// bf16_rne(G(gelu_tanh(in[i]))) (in[i] a BF16 value; G the identity for mode CUTLASS_Q115_OFF). For the harness's
// exhaustive checks. Synchronous; exits on a
// CUDA error.
void cutlass_q115_gemm_eval(const float* in, float* out, int n, int gelu, CutlassQ115Mode mode);

// Frees the workspaces, if one was ever needed (safe to call twice).
void cutlass_q115_gemm_free(void);
