// cutlass_tcast_gemm.h - the TensorCast build's linear-layer forward as ONE Hopper BF16 GEMM whose epilogue adds the
// bias, rounds to BF16 and casts the output to its MATMUL_OUT TensorCast data type (issue 26): the bits of
// matmul_forward's cuBLASLt GEMM + bias followed by the in-place cast pass (boundary_tensor_cast -> tcast_cast along
// the rows), without the pass's read and write of the output; and the fc layer's GEMM with its GELU and both site
// casts in the epilogue (cutlass_tcast_gemm_forward_gelu, below). On CUTLASS (one translation unit per configuration,
// cutlass_tcast_gemm_<name>.cu on cutlass_tcast_gemm_impl.cuh, and this dispatcher, cutlass_tcast_gemm.cu, compiled
// into $(BUILD)/cutlass/ for sm_90a); this header has no CUTLASS types. Callers: the trainer's --cast-cutlass 1
// (llmc/modes/tcast/tcast_cutlass.cuh) and the harness dev/cuda/cutlass_tcast_gemm.cu.
//
// Per element (n, o), n < N (tokens), o < OC:
//   acc(n, o) = Σ_c inp[n, c] · weight[o, c]      fp32 accumulation on the tensor cores (wgmma), one CTA per tile over
//                                                  the whole K (no split-K: deterministic)
//   y[n, o]   = bf16_rne(acc + bias[o])            fp32 add (bias NULL: + 0), then round to nearest even
//   out[n, o] = cast(y)[n, o]                      tcast_cast(out, y, N, OC, 1, dt, seed) bit for bit: groups of 32
//                                                  consecutive columns of a row (the node TcastGroupCast,
//                                                  cutlass_tcast_common.cuh, with the pass's device quantizers);
//                                                  stochastic rounding draws tcast_random_bits(seed, n * OC + o)
// With dt == NULL: out = y (no cast; what the pass would read).
// Data types the epilogue takes (cutlass_tcast_gemm_cast_unsupported says why not for the rest, which keep the pass):
// exponent-scaled tiles of 32 along the row (the MX types: mxfp8e4, mxfp8e5, mxfp6e3, mxfp6e2, mxfp4e2, mxint8, and
// custom float / int numbers with an exponent scale _t32) and unscaled or fixed-scale (pN) float / int types, every round
// mode, no M:N sparsity; i.e. the casts tcast_cast runs on its exponent or RNE path along dim 1 with tile 32 or none.
// Not: other tiles, channel or per-tensor scales (need the whole row / tensor), float-scaled or uint types (the
// general path), sparsity, a scale spec that names dim 0.
//
// Tensors (row-major, matmul_forward's): inp (N, C), weight (OC, C), bias (OC) or NULL, out (N, OC) BF16, overwritten;
// out must not overlap the inputs. In CUTLASS's terms D (M x N) = A · Bᵀ with M = N tokens, N = OC, K = C, both
// operands K-major (cuBLASLt's "TN").
// Requirements: N >= 0; C, OC positive multiples of 8 (16-byte rows: TMA); with a cast OC % 32 == 0; every pointer
// 16-byte aligned; a GPU of compute capability 9.0. Any N (the last tile may be partial: TMA clips rows).
// Errors: `error: cutlass_tcast_gemm: <what> (N=.., C=.., OC=..)` and exit 1 (cutlass_tcast_gemm_unsupported gives the
// text without exiting). Asynchronous on `stream`. A CUTLASS workspace, where needed, is allocated once and kept.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/numerics/tcast.h"

// X(name, description): every configuration, in the order the harness runs them. All are persistent data-parallel
// tiles, epilogue tile 128x64, BF16 operands, fp32 accumulation, cooperative (two consumer warp groups on one tile).
// Measured and dropped (H100, 2026-11-27, doc/TCAST.md 5.6): cooperative 256x128 cluster 1x2 (slower than 128x256 in
// every row) and ping-pong 128x128 cluster 2x1 (its GEMM output was wrong in 7 of its float64 checks, cause not found,
// and it was the slowest with the cast); the template still takes the ping-pong schedule.
#define CUTLASS_TCAST_GEMM_CONFIGS(X)                                                         \
    X(coop_128x256_c2x1, "cooperative 128x256x64, cluster 2x1, epilogue tile 128x64")       \
    X(coop_128x128_c2x1, "cooperative 128x128x64, cluster 2x1, epilogue tile 128x64")

enum CutlassTcastConfig {
#define CUTLASS_TCAST_GEMM_ENUM(name, text) CUTLASS_TCAST_##name,
    CUTLASS_TCAST_GEMM_CONFIGS(CUTLASS_TCAST_GEMM_ENUM)
#undef CUTLASS_TCAST_GEMM_ENUM
    CUTLASS_TCAST_NUM_CONFIGS
};

// The configuration's short name; NULL for a value outside the enum.
const char* cutlass_tcast_gemm_config_name(CutlassTcastConfig cfg);

// The configuration called `name`; -1 when there is none.
int cutlass_tcast_gemm_config_parse(const char* name);

// One line on the configuration's kernel: CUTLASS version, tile, cluster, stages, shared memory, epilogue tile.
const char* cutlass_tcast_gemm_describe(CutlassTcastConfig cfg);

// NULL when the epilogue can cast an (N, OC) output to dt (see the top of the file), else why not (then the caller
// keeps the pass). dt NULL: no cast, NULL.
const char* cutlass_tcast_gemm_cast_unsupported(const TcastDataType* dt, int N, int OC);

// NULL when cutlass_tcast_gemm_forward can run this call on the current device, else why not (its error text). Host
// checks only (shape, alignment, data type, device, CUTLASS's can_implement); nothing is dereferenced.
const char* cutlass_tcast_gemm_unsupported(int N, int C, int OC, const void* out, const void* inp, const void* weight, const void* bias,
                                           const TcastDataType* dt, CutlassTcastConfig cfg);

// out = cast(bf16(inp · weightᵀ + bias)) as described above, with configuration cfg; dt NULL: no cast; seed: the
// cast's stochastic-rounding seed (the pass's tcast_cast seed argument).
void cutlass_tcast_gemm_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* weight, const __nv_bfloat16* bias,
                                int N, int C, int OC, const TcastDataType* dt, uint64_t seed, cudaStream_t stream,
                                CutlassTcastConfig cfg = CUTLASS_TCAST_coop_128x256_c2x1);

// The fc layer (matmul_forward with pre_gelu, both boundary sites): one GEMM whose epilogue computes
//   z = bf16_rne(acc + bias),  pre = cast(z) with dt_pre / seed_pre (MATMUL_OUT),
//   out = cast(bf16(gemm_gelu_stored(pre))) with dt_out / seed_out (GELU_OUT),
// bit for bit the trainer's GEMM into pre followed by boundary_gelu (tcast_gelu.cuh, BOUNDARY_GELU_FRONT: the GELU is
// gemm_gelu_stored as the --use_fast_math trainer computes it, gelu_fastmath.cuh). dt_pre / dt_out NULL: that site is
// off (stored uncast); pre NULL: not stored. pre and out (N, OC) BF16, row-major, not overlapping each other or the
// inputs. The cast rules are cutlass_tcast_gemm_cast_unsupported's for each type.
const char* cutlass_tcast_gemm_gelu_unsupported(int N, int C, int OC, const void* out, const void* pre, const void* inp, const void* weight,
                                                const void* bias, const TcastDataType* dt_pre, const TcastDataType* dt_out,
                                                CutlassTcastConfig cfg);
void cutlass_tcast_gemm_forward_gelu(__nv_bfloat16* out, __nv_bfloat16* pre, const __nv_bfloat16* inp, const __nv_bfloat16* weight,
                                     const __nv_bfloat16* bias, int N, int C, int OC, const TcastDataType* dt_pre, uint64_t seed_pre,
                                     const TcastDataType* dt_out, uint64_t seed_out, cudaStream_t stream,
                                     CutlassTcastConfig cfg = CUTLASS_TCAST_coop_128x256_c2x1);

// Frees every configuration's workspace, if one was ever needed (safe to call twice).
void cutlass_tcast_gemm_free(void);
