// gemm_fp8.cuh - FP8 GEMMs through cuBLASLt: the GEMM layer of the FP8 and TCFP-12 backends.
//
// What it computes. Every GEMM here is cuBLASLt's "TN" FP8 matmul. In row-major terms, with both
// operands stored K-contiguous (each of their rows holds k consecutive codes):
//
//     D (n, m) = scale_A · scale_B · B (n, k) · A (m, k)ᵀ  [+ beta · D]  [+ bias (m) on every row]
//
// In cuBLASLt's column-major terms that is D (m x n, ld m) = op(A) · B with op(A) = Aᵀ (A stored k x m,
// ld k: "A transposed") and B stored k x n, ld k ("B not transposed"). The cuBLASLt documentation
// (section cublasLtMatmul, "To use tensor- or block-scaled FP8 kernels ...") requires exactly this "TN"
// form on Ada, Hopper and Blackwell GeForce, CUBLAS_COMPUTE_32F and scale type CUDA_R_32F.
//
// Our row-major linear layers (weight W (OC, C), N = B·T rows) map onto it as follows (no operand is
// ever "transposed by a flag": where the math needs a transpose, the caller provides a transposed copy,
// which the quantization kernels produce while they quantize):
//
//   forward  out (N, OC)  = X (N, C) · Wᵀ          A = W   (OC, C)  E4M3   B = X   (N, C)   E4M3   m=OC n=N  k=C
//   dgrad    dX  (N, C)   = dY (N, OC) · W         A = Wᵀ  (C, OC)  E4M3   B = dY  (N, OC)  E5M2   m=C  n=N  k=OC
//   wgrad    dW  (OC, C) += dYᵀ · X                A = Xᵀ  (C, N)   E4M3   B = dYᵀ (OC, N)  E5M2   m=C  n=OC k=N
//
// The forward is the natural layout; dgrad needs Wᵀ (C, OC) row-major; wgrad needs Xᵀ (C, N) and
// dYᵀ (OC, N) row-major. fp8_linear_forward / fp8_linear_dgrad / fp8_linear_wgrad below take the
// operands in exactly these layouts.
//
// cuBLASLt facts this file relies on (cuBLAS 12.9+ / 13.x documentation, "cuBLASLt API" chapter):
//   * Types (cublasLtMatmul, FP8 table): A x B in {E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3}; there is no
//     E5M2 x E5M2 row. For a BF16 D, C is BF16; for an FP32 D, C is FP32 (C type = D type for non-FP8
//     outputs), so beta = 1 accumulates in D's own type. The bias vector is BF16 for BF16 *and* FP32 D
//     (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, set explicitly here). FP16 D exists too (not used here).
//   * Scales (section "Narrow Precision Data Types Usage", "Tensorwide Scaling"): D = scale_A · scale_B ·
//     op(A) op(B) + beta · C (+ bias), i.e. the scales are multiplied in: pass DEQUANT scales
//     (1 / quantization scale). CUDA_R_32F scales are applied as given (sign included). A NULL scale
//     pointer means 1.
//   * Requirements: pointers 16-byte aligned and dimensions that make every leading dimension a multiple
//     of 16 bytes ("Tensor Core Usage"); here m % 16 == 0 and k % 16 == 0 are required (lda = ldb = k
//     bytes, ldd = m elements); n is free (a multiple of 4 in the block modes).
//   * CUBLASLT_MATMUL_DESC_FAST_ACCUM (int8): without it the kernels periodically promote the tensor-core
//     partial sums to fp32; with it they do not ("faster but at the cost of lower accuracy").
//   * Block scaling on Hopper (section "128-element 1D and 128x128 2D Block Scaling For FP8 Data Types",
//     cuBLAS 12.9+, compute capability 9.0 only; the Scaling Mode Support Overview lists tensorwide 8.9+,
//     outer-vector / VEC128 / BLK128x128 9.0, the 16/32-element MX modes 10.0+): per operand
//     CUBLASLT_MATMUL_DESC_{A,B}_SCALE_MODE = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F (one fp32 scale per
//     128 consecutive K elements of each row of op(A) / column of op(B)) or ..._BLK128x128_32F (one per
//     128 x 128 tile). Supported pairs (A, B): (VEC128, VEC128), (VEC128, BLK128x128), (BLK128x128,
//     VEC128); not (BLK, BLK). D must be FP16, BF16 or FP32. M and N multiples of 4; scale pointers
//     16-byte aligned. Layouts, with L = ceil(K / 128):
//       VEC128, operand A:  M x L, M-major:  scale of A-row i, K-block b at a_scale[b * M + i]
//       VEC128, operand B:  N x L, N-major:  scale of B-row j, K-block b at b_scale[b * N + j]
//       BLK128x128, A:      L4 x ceil(M/128), K-major with column stride L4 = L rounded up to a multiple
//                           of 4: scale of tile (i / 128, b) at a_scale[(i / 128) * L4 + b]
//     (same for B with N). Note the VEC128 layouts are "transposed" relative to a row-major (rows, L)
//     table: the block index is the slow one. The documentation does not say whether FAST_ACCUM, beta = 1
//     or the BIAS epilogue work with block scaling; the harness (dev/cuda/gemm_fp8.cu) reports it, and
//     fp8_linear_forward / tcfp12_linear_forward fall back to "D := broadcast bias, then beta = 1" when
//     the bias epilogue has no algorithm.
//   * Outer-vector scaling (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F on A and B, 9.0): scale_A is a
//     vector over the M rows, scale_B over the N columns. The FP8_SCALE_CHUNK* modes below use it for
//     block sizes 32 / 64 / 128 the hardware path does not offer: a loop over K-chunks, each chunk one
//     outer-vector-scaled GEMM accumulating with beta = 1 (slow fallback; see Fp8ScaleMode).
//
// Determinism: as in gemm.cuh, the algorithm for a given key is chosen once and cached (Fp8GemmContext),
// all work runs on the GemmContext's stream with its workspace, and split-K reductions are restricted to
// CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE (fp32 partials, ordered reduction) unless nothing else exists.
// The same inputs give bit-identical outputs on the same GPU model and library version.
//
// Rounding of two-GEMM sums (TCFP-12, out = X·W_hiᵀ + X·W_loᵀ). The second GEMM reads the first one's
// result through C, so with a BF16 D the first product is rounded to BF16 before the second is added:
// two roundings instead of one. Which product goes first matters: W_lo is ~2^-4 of W_hi (the E4M3
// residual), so rounding X·W_loᵀ first (TCFP12_ACC_BF16_LO_FIRST) costs ~2^-4 of a BF16 rounding, while
// rounding X·W_hiᵀ first (TCFP12_ACC_BF16_HI_FIRST) costs a full one. TCFP12_ACC_FP32 accumulates both
// in an fp32 scratch (FP32 D, C = D) and rounds once (one extra cast kernel and 4 bytes/element of
// traffic). The harness measures all three; LO_FIRST is the default (one GEMM pair, no scratch, and
// within ~0.1 dB of the fp32 path by the argument above).
#pragma once

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/numerics/fp8.h"

// ------------------------------------------------------------------------------------------------
// cuBLASLt version guard
//
// CUBLAS_VERSION (cublas_api.h) = major * 10000 + minor * 100 + patch of the headers of this build. The
// scale-mode attributes CUBLASLT_MATMUL_DESC_{A,B}_SCALE_MODE with the OUTER_VEC_32F, VEC128_32F and
// BLK128x128_32F modes first appear in cuBLAS 12.9.0 (CUDA 12.9). With older headers (CUDA 12.4 - 12.8)
// everything else builds; every block-scaled mode (any Fp8ScaleMode but FP8_SCALE_TENSOR) is then refused
// by fp8_gemm_prepare, and the options that need one (--tcfp-block) stop the trainer at start-up
// (gemm_lowp_options_validate). A build with new headers can load an older libcublasLt.so.12 at run time,
// so fp8_block_scaling_unavailable() also checks the loaded library (cublasLtGetVersion, no CUDA call).
#define FP8_BLOCK_SCALING_MIN_CUBLAS 120900
#if defined(CUBLAS_VERSION) && CUBLAS_VERSION >= FP8_BLOCK_SCALING_MIN_CUBLAS
#define FP8_HAVE_BLOCK_SCALING 1
#else
#define FP8_HAVE_BLOCK_SCALING 0
#endif

// The cublasLtMatmulMatrixScale_t values used here (cuBLAS < 12.9 headers lack these modes, < 12.8 the enum).
enum : int32_t { FP8_LT_SCALE_SCALAR = 0, FP8_LT_SCALE_OUTER_VEC = 3, FP8_LT_SCALE_VEC128 = 4, FP8_LT_SCALE_BLK128x128 = 5 };
#if FP8_HAVE_BLOCK_SCALING
static_assert((int)FP8_LT_SCALE_SCALAR == (int)CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F &&
                  (int)FP8_LT_SCALE_OUTER_VEC == (int)CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F &&
                  (int)FP8_LT_SCALE_VEC128 == (int)CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F &&
                  (int)FP8_LT_SCALE_BLK128x128 == (int)CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
              "cublasLtMatmulMatrixScale_t values");
#endif

// NULL when block-scaled FP8 GEMMs can run with this build and the loaded cuBLASLt; else the reason, as
// the end of a sentence that starts with the option: "needs cuBLASLt >= 12.9 ..., this build has 12.4.5".
static inline const char* fp8_block_scaling_unavailable() {
    static char why[160];
#if !FP8_HAVE_BLOCK_SCALING
    snprintf(why, sizeof(why), "needs cuBLASLt >= %d.%d (block-scaled FP8 GEMMs), this build has cuBLASLt %d.%d.%d",
             FP8_BLOCK_SCALING_MIN_CUBLAS / 10000, FP8_BLOCK_SCALING_MIN_CUBLAS / 100 % 100, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR,
             CUBLAS_VER_PATCH);
    return why;
#else
    const size_t v = cublasLtGetVersion();
    if (v >= FP8_BLOCK_SCALING_MIN_CUBLAS) return NULL;
    snprintf(why, sizeof(why), "needs cuBLASLt >= %d.%d (block-scaled FP8 GEMMs), the loaded libcublasLt is %zu.%zu.%zu",
             FP8_BLOCK_SCALING_MIN_CUBLAS / 10000, FP8_BLOCK_SCALING_MIN_CUBLAS / 100 % 100, v / 10000, v / 100 % 100, v % 100);
    return why;
#endif
}

// ------------------------------------------------------------------------------------------------
// Scale modes

// How the fp32 dequant scales of A and B are given (layouts in the header comment).
enum Fp8ScaleMode {
    FP8_SCALE_TENSOR = 0,         // one scale per operand (CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F), any GPU with FP8
    FP8_SCALE_VEC128 = 1,         // A and B: VEC128_32F (1 x 128 blocks along K); Hopper only
    FP8_SCALE_BLK128_VEC128 = 2,  // A: BLK128x128_32F (128 x 128 tiles), B: VEC128_32F; Hopper only
    // Slow fallback for block sizes without a hardware path: ceil(K / block) GEMMs of depth `block`, each
    // with OUTER_VEC_32F scales (one per row of A, one per row of B, for that K-chunk), accumulating into D
    // with beta = 1. The scale layouts are the VEC128 ones with 128 replaced by the block size:
    // a_scale[c * m + i], b_scale[c * n + j] for chunk c. K % block == 0. With a BF16 D every chunk rounds
    // the running sum to BF16 (K / block roundings): use an FP32 D.
    FP8_SCALE_CHUNK32 = 3,
    FP8_SCALE_CHUNK64 = 4,
    FP8_SCALE_CHUNK128 = 5,
};

static inline const char* fp8_scale_mode_name(Fp8ScaleMode mode) {
    switch (mode) {
        case FP8_SCALE_TENSOR: return "tensor";
        case FP8_SCALE_VEC128: return "vec128";
        case FP8_SCALE_BLK128_VEC128: return "blk128x128/vec128";
        case FP8_SCALE_CHUNK32: return "chunk32 (outer-vec loop)";
        case FP8_SCALE_CHUNK64: return "chunk64 (outer-vec loop)";
        case FP8_SCALE_CHUNK128: return "chunk128 (outer-vec loop)";
        default: return "?";
    }
}

// K-chunk of the chunked modes (0 for the single-GEMM modes).
static inline HOST_DEVICE int fp8_scale_mode_chunk(Fp8ScaleMode mode) {
    return mode == FP8_SCALE_CHUNK32 ? 32 : mode == FP8_SCALE_CHUNK64 ? 64 : mode == FP8_SCALE_CHUNK128 ? 128 : 0;
}

// K-block length of an operand's scales under `mode` (0: one scale per tensor).
static inline HOST_DEVICE int fp8_scale_block(Fp8ScaleMode mode) {
    return mode == FP8_SCALE_TENSOR ? 0 : mode == FP8_SCALE_VEC128 || mode == FP8_SCALE_BLK128_VEC128 ? 128 : fp8_scale_mode_chunk(mode);
}

// Number of fp32 scales operand A (rows = m) or B (rows = n) needs under `mode` at depth k; the index
// helpers below say where each one goes. Producers (quantization kernels) size their buffers with these.
static inline HOST_DEVICE size_t fp8_scale_count(Fp8ScaleMode mode, bool operand_a, int rows, int k) {
    if (mode == FP8_SCALE_TENSOR) return 1;
    const int block = fp8_scale_block(mode);
    const size_t L = (size_t)((k + block - 1) / block);
    if (mode == FP8_SCALE_BLK128_VEC128 && operand_a) return ((L + 3) / 4 * 4) * (size_t)((rows + 127) / 128);
    return L * (size_t)rows;
}

// Index of the scale of element (row, kk) of an operand (row-major (rows, k) codes) under `mode`.
static inline HOST_DEVICE size_t fp8_scale_index(Fp8ScaleMode mode, bool operand_a, int rows, int k, int row, int kk) {
    if (mode == FP8_SCALE_TENSOR) return 0;
    const int block = fp8_scale_block(mode);
    const size_t b = (size_t)(kk / block);
    if (mode == FP8_SCALE_BLK128_VEC128 && operand_a) {
        const size_t L4 = ((size_t)((k + block - 1) / block) + 3) / 4 * 4;
        return (size_t)(row / 128) * L4 + b;
    }
    return b * (size_t)rows + (size_t)row;
}

// ------------------------------------------------------------------------------------------------
// Context: the GemmContext's handle / workspace / stream plus a cache of planned FP8 GEMMs

#define FP8_GEMM_PLAN_CACHE_SIZE 64

// Identity of one planned FP8 GEMM (one cublasLtMatmul call).
struct Fp8GemmPlanKey {
    int64_t m, n, k, ld;        // column-major problem; ld = leading dimension of A and B (= full K; k is the chunk)
    int32_t a_type, b_type, d_type;  // cudaDataType_t
    int32_t a_mode, b_mode;     // cublasLtMatmulMatrixScale_t
    int32_t fast_accum;         // CUBLASLT_MATMUL_DESC_FAST_ACCUM
    int32_t accumulate;         // beta = 1 (C = D read) or beta = 0
    int32_t bias;               // CUBLASLT_EPILOGUE_BIAS with a BF16 bias, else DEFAULT
    int32_t scales;             // bit 0: A scale pointer set, bit 1: B scale pointer set
    uint32_t align;             // 3 bits per pointer (A, B, D, bias, a_scale, b_scale): log2(alignment) - 4, capped at 256
};

struct Fp8GemmPlan {
    Fp8GemmPlanKey key;
    bool found;                 // false: cuBLASLt has no algorithm (status says why)
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;  // d doubles as C's layout
    cublasLtMatmulAlgo_t algo;
    size_t workspace;
    float waves;
    uint32_t reduction_mask;    // split-K schemes allowed when planning
    cublasStatus_t status;      // heuristic (or first launch) status when found == false
    unsigned long long uses;
    GemmTuneState tune;         // measured choice among the heuristic's candidates at the first launch (gemm_tune.cuh)
};

struct Fp8GemmContext {
    GemmContext* gemm;          // handle, workspace, stream: shared with the BF16 GEMMs (not owned)
    Fp8GemmPlan plans[FP8_GEMM_PLAN_CACHE_SIZE];
    int num_plans;
    unsigned long long heuristic_queries;  // cublasLtMatmulAlgoGetHeuristic calls so far
    unsigned long long uncached_calls;     // GEMMs planned on the fly because the cache was full
    unsigned long long bias_fallbacks;     // bias applied as "D := bias, beta = 1" (no BIAS epilogue algorithm)
    char last_error[256];       // why the last call returned false ("" if it did not)
};

// Attach an FP8 plan cache to `gemm` (which must outlive it). Allocates nothing on the device.
void fp8_gemm_context_init(Fp8GemmContext* ctx, GemmContext* gemm) {
    memset(ctx, 0, sizeof(*ctx));
    ctx->gemm = gemm;
}

static inline void fp8_plan_destroy(Fp8GemmPlan* p) { gemm_plan_destroy(p); }

// Release the plans (after the stream is idle). The GemmContext is untouched.
void fp8_gemm_context_free(Fp8GemmContext* ctx) {
    cudaCheck(cudaStreamSynchronize(ctx->gemm->stream));
    for (int i = 0; i < ctx->num_plans; i++) fp8_plan_destroy(&ctx->plans[i]);
    ctx->num_plans = 0;
}

// ------------------------------------------------------------------------------------------------
// Names (for messages and the plan table)

static inline const char* fp8_data_type_name(int32_t t) {
    switch (t) {
        case CUDA_R_8F_E4M3: return "e4m3";
        case CUDA_R_8F_E5M2: return "e5m2";
        case CUDA_R_16BF: return "bf16";
        case CUDA_R_16F: return "f16";
        case CUDA_R_32F: return "f32";
        default: return "?";
    }
}

static inline const char* fp8_matrix_scale_name(int32_t m) {
    switch (m) {
        case FP8_LT_SCALE_SCALAR: return "scalar";
        case FP8_LT_SCALE_OUTER_VEC: return "outer_vec";
        case FP8_LT_SCALE_VEC128: return "vec128";
        case FP8_LT_SCALE_BLK128x128: return "blk128x128";
        default: return "?";
    }
}

// cuBLASLt data type of an FP8 kind; -1 for the FNUZ kinds (no cuBLASLt type).
static inline int32_t fp8_cuda_type(FP8Kind kind) {
    return kind == FP8_E4M3FN ? (int32_t)CUDA_R_8F_E4M3 : kind == FP8_E5M2 ? (int32_t)CUDA_R_8F_E5M2 : -1;
}

// ------------------------------------------------------------------------------------------------
// Planning

static inline uint32_t fp8_align_class(uintptr_t a) {  // 0..4 for 16..256-byte alignment (0 counts as 256)
    uint32_t c = 0;
    while (c < 4 && a % ((uintptr_t)32 << c) == 0) c++;
    return c;
}

static inline bool fp8_key_equal(const Fp8GemmPlanKey& x, const Fp8GemmPlanKey& y) {
    return memcmp(&x, &y, sizeof(x)) == 0;  // keys are memset before filling: padding compares equal
}

// One heuristic query with `reduction_mask`; true if an algorithm was found. (Re)creates plan->desc.
static inline bool fp8_plan_try(Fp8GemmContext* ctx, Fp8GemmPlan* plan, uint32_t reduction_mask, const void* bias,
                                const float* a_scale, const float* b_scale) {
    const Fp8GemmPlanKey& key = plan->key;
    if (plan->desc) cublasCheck(cublasLtMatmulDescDestroy(plan->desc));
    cublasCheck(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
    const int8_t fast = key.fast_accum ? 1 : 0;
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
#if FP8_HAVE_BLOCK_SCALING  // else only scalar scales reach here (fp8_gemm_prepare)
    if (key.a_mode != FP8_LT_SCALE_SCALAR)
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &key.a_mode, sizeof(key.a_mode)));
    if (key.b_mode != FP8_LT_SCALE_SCALAR)
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &key.b_mode, sizeof(key.b_mode)));
#endif
    // the heuristic sees the scale / bias pointers (alignment, presence); they are re-set per call
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
    const uint32_t epilogue = key.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (key.bias) {
        const int32_t bias_type = CUDA_R_16BF;
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }

    cublasLtMatmulHeuristicResult_t results[GEMM_TUNE_MAX_ALGOS];
    int count = 0;
    ctx->heuristic_queries++;
    const cublasStatus_t st = gemm_heuristic(ctx->gemm->handle, plan->desc, plan->a, plan->b, plan->d, ctx->gemm->workspace_size,
                                             reduction_mask, 16u << (key.align & 7), 16u << ((key.align >> 3) & 7),
                                             16u << ((key.align >> 6) & 7), results, &count, GEMM_TUNE_MAX_ALGOS);
    const cublasLtMatmulHeuristicResult_t& result = results[0];
    plan->status = st == CUBLAS_STATUS_SUCCESS && count > 0 ? result.state : st;
    if (st == CUBLAS_STATUS_SUCCESS && count == 0) plan->status = CUBLAS_STATUS_NOT_SUPPORTED;
    // "No algorithm" comes back as NOT_SUPPORTED, INVALID_VALUE, ARCH_MISMATCH, or SUCCESS with no result:
    // all mean "this configuration cannot run"; the status is kept for the caller's message.
    if (st != CUBLAS_STATUS_SUCCESS || count == 0 || result.state != CUBLAS_STATUS_SUCCESS) return false;
    gemm_tune_collect(&plan->tune, results, count);
    plan->algo = result.algo;
    plan->workspace = result.workspaceSize;
    plan->waves = result.wavesCount;
    plan->reduction_mask = reduction_mask;
    return true;
}

static inline void fp8_plan_build(Fp8GemmContext* ctx, Fp8GemmPlan* plan, const void* bias, const float* a_scale,
                                  const float* b_scale) {
    const Fp8GemmPlanKey& key = plan->key;
    plan->desc = NULL;
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->a, (cudaDataType_t)key.a_type, key.k, key.m, key.ld));  // stored k x m, op T
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->b, (cudaDataType_t)key.b_type, key.k, key.n, key.ld));  // stored k x n, op N
    cublasCheck(cublasLtMatrixLayoutCreate(&plan->d, (cudaDataType_t)key.d_type, key.m, key.n, key.m));
    const uint32_t masks[2] = {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, CUBLASLT_REDUCTION_SCHEME_MASK};
    plan->found = false;
    for (int r = 0; r < 2 && !plan->found; r++) plan->found = fp8_plan_try(ctx, plan, masks[r], bias, a_scale, b_scale);
    plan->uses = 0;
}

static inline Fp8GemmPlan* fp8_get_plan(Fp8GemmContext* ctx, const Fp8GemmPlanKey& key, const void* bias, const float* a_scale,
                                        const float* b_scale, Fp8GemmPlan* scratch) {
    bool fresh;
    Fp8GemmPlan* plan = gemm_plan_slot(ctx->plans, &ctx->num_plans, FP8_GEMM_PLAN_CACHE_SIZE, key, fp8_key_equal, scratch,
                                       &ctx->uncached_calls, &fresh);
    if (fresh) fp8_plan_build(ctx, plan, bias, a_scale, b_scale);
    return plan;
}

// ------------------------------------------------------------------------------------------------
// One FP8 GEMM call (possibly several cublasLtMatmul launches in the chunked modes): check, plan, launch

struct Fp8GemmCall {
    void* D;
    cudaDataType_t d_type;
    const uint8_t* A;
    FP8Kind a_kind;
    const float* a_scale;
    const uint8_t* B;
    FP8Kind b_kind;
    const float* b_scale;
    int m, n, k;
    float beta;
    const __nv_bfloat16* bias;
    int fast_accum;
    Fp8ScaleMode mode;
};

struct Fp8GemmPrepared {
    Fp8GemmCall call;
    int chunks, chunk;          // 1 and k, unless a chunked mode
    Fp8GemmPlan* first;         // chunk 0 (the call's beta and bias)
    Fp8GemmPlan* rest;          // chunks 1.. (beta = 1, no bias); NULL if chunks == 1
    Fp8GemmPlan scratch[2];     // plans built outside the cache (cache full); destroyed by fp8_gemm_release
};

static inline bool fp8_fail(Fp8GemmContext* ctx, cublasStatus_t* st, cublasStatus_t status, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline bool fp8_fail(Fp8GemmContext* ctx, cublasStatus_t* st, cublasStatus_t status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->last_error, sizeof(ctx->last_error), fmt, ap);
    va_end(ap);
    if (st) *st = status;
    return false;
}

static inline bool fp8_misaligned(const void* p, uintptr_t bytes) { return p != NULL && (uintptr_t)p % bytes != 0; }

// Argument checks and planning of every launch of `call`; nothing is launched. On false, *st and
// ctx->last_error say why (INVALID_VALUE: the arguments break a documented rule, checked here; anything
// else: cuBLASLt's heuristic status).
static inline bool fp8_gemm_prepare(Fp8GemmContext* ctx, const Fp8GemmCall& c, Fp8GemmPrepared* p, cublasStatus_t* st) {
    memset(p, 0, sizeof(*p));
    p->call = c;
    const cublasStatus_t bad = CUBLAS_STATUS_INVALID_VALUE;
    const int32_t at = fp8_cuda_type(c.a_kind), bt = fp8_cuda_type(c.b_kind);
    if (at < 0 || bt < 0)
        return fp8_fail(ctx, st, bad, "gemm_fp8: operand kinds %s x %s: cuBLASLt takes only e4m3fn and e5m2", fp8_kind_name(c.a_kind),
                        fp8_kind_name(c.b_kind));
    if (c.d_type != CUDA_R_16BF && c.d_type != CUDA_R_32F)
        return fp8_fail(ctx, st, bad, "gemm_fp8: D type %s: only bf16 and f32 outputs are supported here", fp8_data_type_name(c.d_type));
    if (!(c.beta == 0.0f || c.beta == 1.0f)) return fp8_fail(ctx, st, bad, "gemm_fp8: beta = %g: only 0 and 1", c.beta);
    if (c.D == NULL || c.A == NULL || c.B == NULL) return fp8_fail(ctx, st, bad, "gemm_fp8: D, A and B must not be NULL");
    if (c.m <= 0 || c.n <= 0 || c.k <= 0) return fp8_fail(ctx, st, bad, "gemm_fp8: m=%d n=%d k=%d must be positive", c.m, c.n, c.k);
    if (c.m % 16 != 0 || c.k % 16 != 0)
        return fp8_fail(ctx, st, bad, "gemm_fp8: m=%d and k=%d must be multiples of 16 (16-byte leading dimensions)", c.m, c.k);
    if ((int)c.mode < 0 || (int)c.mode > (int)FP8_SCALE_CHUNK128) return fp8_fail(ctx, st, bad, "gemm_fp8: unknown scale mode %d", (int)c.mode);
    const int chunk = fp8_scale_mode_chunk(c.mode);
    const bool blocked = c.mode != FP8_SCALE_TENSOR;
    if (blocked && fp8_block_scaling_unavailable())
        return fp8_fail(ctx, st, CUBLAS_STATUS_NOT_SUPPORTED, "gemm_fp8: scale mode %s %s", fp8_scale_mode_name(c.mode),
                        fp8_block_scaling_unavailable());
    if (blocked && c.n % 4 != 0) return fp8_fail(ctx, st, bad, "gemm_fp8: n=%d must be a multiple of 4 with block scales", c.n);
    if (chunk && c.k % chunk != 0) return fp8_fail(ctx, st, bad, "gemm_fp8: k=%d must be a multiple of the chunk %d", c.k, chunk);
    if (blocked && (c.a_scale == NULL || c.b_scale == NULL)) return fp8_fail(ctx, st, bad, "gemm_fp8: block scales must not be NULL");
    if (fp8_misaligned(c.A, 16) || fp8_misaligned(c.B, 16) || fp8_misaligned(c.D, 16) || fp8_misaligned(c.bias, 16))
        return fp8_fail(ctx, st, bad, "gemm_fp8: A (%p), B (%p), D (%p) and bias (%p) must be 16-byte aligned", (const void*)c.A,
                        (const void*)c.B, c.D, (const void*)c.bias);
    const uintptr_t scale_align = blocked ? 16 : 4;
    if (fp8_misaligned(c.a_scale, scale_align) || fp8_misaligned(c.b_scale, scale_align))
        return fp8_fail(ctx, st, bad, "gemm_fp8: scale pointers must be %d-byte aligned", (int)scale_align);
    const size_t d_bytes = (size_t)c.m * c.n * (c.d_type == CUDA_R_32F ? 4 : 2);
    if (gemm_overlap(c.D, d_bytes, c.A, (size_t)c.m * c.k) || gemm_overlap(c.D, d_bytes, c.B, (size_t)c.n * c.k))
        return fp8_fail(ctx, st, bad, "gemm_fp8: D overlaps A or B");

    int32_t a_mode = FP8_LT_SCALE_SCALAR, b_mode = FP8_LT_SCALE_SCALAR;
    if (c.mode == FP8_SCALE_VEC128) a_mode = b_mode = FP8_LT_SCALE_VEC128;
    if (c.mode == FP8_SCALE_BLK128_VEC128) {
        a_mode = FP8_LT_SCALE_BLK128x128;
        b_mode = FP8_LT_SCALE_VEC128;
    }
    if (chunk) a_mode = b_mode = FP8_LT_SCALE_OUTER_VEC;
    p->chunk = chunk ? chunk : c.k;
    p->chunks = c.k / p->chunk;

    // Key of chunk 0 (the call as given) and of the later chunks (beta = 1, no bias). In the chunked modes
    // the pointers of chunk i are offset by i * chunk bytes (A, B) and i * m / i * n floats (scales): the
    // alignment class is that of every chunk (pointer OR'ed with the step).
    const uintptr_t step_ab = chunk ? (uintptr_t)chunk : 0, step_as = chunk ? (uintptr_t)c.m * 4 : 0,
                    step_bs = chunk ? (uintptr_t)c.n * 4 : 0;
    Fp8GemmPlanKey key;
    memset(&key, 0, sizeof(key));
    key.m = c.m; key.n = c.n; key.k = p->chunk; key.ld = c.k;
    key.a_type = at; key.b_type = bt; key.d_type = c.d_type;
    key.a_mode = a_mode; key.b_mode = b_mode;
    key.fast_accum = c.fast_accum ? 1 : 0;
    key.accumulate = c.beta != 0.0f;
    key.bias = c.bias != NULL;
    key.scales = (c.a_scale != NULL ? 1 : 0) | (c.b_scale != NULL ? 2 : 0);
    key.align = fp8_align_class((uintptr_t)c.A | step_ab) | fp8_align_class((uintptr_t)c.B | step_ab) << 3 |
                fp8_align_class((uintptr_t)c.D) << 6 | fp8_align_class((uintptr_t)c.bias) << 9 |
                fp8_align_class((uintptr_t)c.a_scale | step_as) << 12 | fp8_align_class((uintptr_t)c.b_scale | step_bs) << 15;
    p->first = fp8_get_plan(ctx, key, c.bias, c.a_scale, c.b_scale, &p->scratch[0]);
    if (!p->first->found)
        return fp8_fail(ctx, st, p->first->status, "gemm_fp8: cuBLASLt has no algorithm for m=%d n=%d k=%d %s x %s -> %s, scales %s x %s%s%s%s (%s)",
                        c.m, c.n, c.k, fp8_data_type_name(at), fp8_data_type_name(bt), fp8_data_type_name(c.d_type),
                        fp8_matrix_scale_name(a_mode), fp8_matrix_scale_name(b_mode), key.accumulate ? ", beta=1" : "",
                        key.bias ? ", bias" : "", key.fast_accum ? ", fast-accum" : "", cublasLtGetStatusName(p->first->status));
    if (p->chunks > 1) {
        key.accumulate = 1;
        key.bias = 0;
        key.align &= ~(7u << 9);  // no bias pointer
        key.align |= fp8_align_class(0) << 9;
        p->rest = fp8_get_plan(ctx, key, NULL, c.a_scale, c.b_scale, &p->scratch[1]);
        if (!p->rest->found)
            return fp8_fail(ctx, st, p->rest->status, "gemm_fp8: cuBLASLt has no algorithm for the K-chunk GEMM (k=%d, beta=1, %s) (%s)",
                            p->chunk, fp8_matrix_scale_name(a_mode), cublasLtGetStatusName(p->rest->status));
    }
    if (st) *st = CUBLAS_STATUS_SUCCESS;
    return true;
}

// Destroy scratch plans of a prepared call (cached plans stay).
static inline void fp8_gemm_release(Fp8GemmPrepared* p) {
    fp8_plan_destroy(&p->scratch[0]);
    fp8_plan_destroy(&p->scratch[1]);
}

static inline cublasStatus_t fp8_plan_launch(Fp8GemmContext* ctx, Fp8GemmPlan* plan, void* D, const uint8_t* A, const uint8_t* B,
                                             const float* a_scale, const float* b_scale, const void* bias, float beta) {
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
    if (plan->key.bias)
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (!plan->tune.done) {  // first launch of a cached plan: the fastest candidate with the first answer's bits
        const bool cached = plan >= ctx->plans && plan < ctx->plans + FP8_GEMM_PLAN_CACHE_SIZE;
        const size_t d_bytes = (size_t)plan->key.m * plan->key.n * (plan->key.d_type == CUDA_R_32F ? 4 : 2);
        const GemmTuneLaunch L = {ctx->gemm->handle, plan->desc, plan->a, plan->b, plan->d, A, B, D, d_bytes, beta != 0.0f, NULL, 0,
                                  ctx->gemm->workspace, ctx->gemm->workspace_size, ctx->gemm->stream};
        gemm_tune_first_launch(&plan->tune, ctx->gemm->autotune && cached, L, &plan->algo, &plan->workspace);
    }
    const float alpha = 1.0f;
    const cublasStatus_t st = cublasLtMatmul(ctx->gemm->handle, plan->desc, &alpha, A, plan->a, B, plan->b, &beta, D, plan->d, D,
                                             plan->d, &plan->algo, ctx->gemm->workspace, ctx->gemm->workspace_size, ctx->gemm->stream);
    if (st == CUBLAS_STATUS_SUCCESS) plan->uses++;
    return st;
}

// Launch every chunk of a prepared call. `first_of_sequence`: nothing has been written yet, so a refusal
// by cublasLtMatmul on the first launch can still be reported as "nothing done" (returns its status and
// marks the plan unusable); any later refusal leaves D half-updated and ends the program.
static inline cublasStatus_t fp8_gemm_launch(Fp8GemmContext* ctx, Fp8GemmPrepared* p, bool first_of_sequence) {
    const Fp8GemmCall& c = p->call;
    for (int i = 0; i < p->chunks; i++) {
        Fp8GemmPlan* plan = i == 0 ? p->first : p->rest;
        const size_t off = (size_t)i * p->chunk;
        const bool chunked = p->chunks > 1;
        const float* as = chunked ? c.a_scale + (size_t)i * c.m : c.a_scale;
        const float* bs = chunked ? c.b_scale + (size_t)i * c.n : c.b_scale;
        const cublasStatus_t st = fp8_plan_launch(ctx, plan, c.D, c.A + off, c.B + off, as, bs, i == 0 ? c.bias : NULL,
                                                  i == 0 ? c.beta : 1.0f);
        if (st != CUBLAS_STATUS_SUCCESS) {
            if (first_of_sequence && i == 0) {
                plan->found = false;
                plan->status = st;
                return st;
            }
            fprintf(stderr, "error: gemm_fp8: cublasLtMatmul failed after part of the GEMM sequence ran (m=%d n=%d k=%d): %s (%s)\n",
                    c.m, c.n, c.k, cublasLtGetStatusName(st), cublasLtGetStatusString(st));
            exit(EXIT_FAILURE);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

// ------------------------------------------------------------------------------------------------
// Small kernels: bias broadcast (fallback for block modes without a BIAS epilogue) and fp32 -> bf16 cast

// D (n, m) row-major (= column-major m x n): every row := bias (m). m % (16 / sizeof(T)) == 0.
template <typename T>
__global__ void fp8_gemm_bias_broadcast_kernel(T* __restrict__ D, const __nv_bfloat16* __restrict__ bias, int m, size_t packets) {
    constexpr int V = Packed128<T>::size;
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < packets; p += (size_t)gridDim.x * blockDim.x) {
        const int i0 = (int)((p * V) % (size_t)m);
        Packed128<T> v;
        #pragma unroll
        for (int q = 0; q < V; q++) v[q] = (T)__bfloat162float(bias[i0 + q]);
        store128(D + p * V, v);
    }
}

// dst[i] = bf16(src[i]) (round to nearest even), n % 8 == 0, both 16-byte aligned.
__global__ void fp8_gemm_cast_bf16_kernel(__nv_bfloat16* __restrict__ dst, const float* __restrict__ src, size_t packets) {
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < packets; p += (size_t)gridDim.x * blockDim.x) {
        const f128 a = load128cs(src + p * 8), b = load128cs(src + p * 8 + 4);
        Packed128<__nv_bfloat16> o;
        #pragma unroll
        for (int q = 0; q < 4; q++) {
            o[q] = __float2bfloat16_rn(a[q]);
            o[q + 4] = __float2bfloat16_rn(b[q]);
        }
        store128cs(dst + p * 8, o);
    }
}

// dst (n) = bf16(src (n)) on `stream` (fp8_gemm_cast_bf16_kernel): where the fp32 accumulator of a sum of GEMMs is rounded
// once (the TCFP-12 fp32 sequence below; the LM head's row-chunked wgrad, llmc/modes/lowp/gemm_lowp.cuh). n % 8 == 0 and
// both pointers 16-byte aligned, else it stops with an error naming n.
static inline void fp8_gemm_cast_bf16(__nv_bfloat16* dst, const float* src, size_t n, cudaStream_t stream) {
    if (n % 8 != 0 || ((uintptr_t)dst & 15) != 0 || ((uintptr_t)src & 15) != 0) {
        fprintf(stderr, "error: fp8_gemm_cast_bf16: %zu values: needs a multiple of 8 and 16-byte aligned pointers\n", n);
        exit(EXIT_FAILURE);
    }
    if (n == 0) return;
    fp8_gemm_cast_bf16_kernel<<<gemm_elementwise_blocks(n / 8), 256, 0, stream>>>(dst, src, n / 8);
    cudaCheckLaunch();
}

static inline void fp8_gemm_bias_broadcast(void* D, cudaDataType_t d_type, const __nv_bfloat16* bias, int m, int n, cudaStream_t stream) {
    const size_t count = (size_t)m * n;
    if (d_type == CUDA_R_32F) {
        const size_t packets = count / 4;
        fp8_gemm_bias_broadcast_kernel<float><<<gemm_elementwise_blocks(packets), 256, 0, stream>>>((float*)D, bias, m, packets);
    } else {
        const size_t packets = count / 8;
        fp8_gemm_bias_broadcast_kernel<__nv_bfloat16><<<gemm_elementwise_blocks(packets), 256, 0, stream>>>((__nv_bfloat16*)D, bias, m, packets);
    }
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------------
// Sequences: up to two GEMM calls with an optional bias preload before and an fp32 -> bf16 cast after.
// Every GEMM is planned before anything is launched, so "false" means nothing was done.

struct Fp8GemmSequence {
    Fp8GemmCall calls[2];
    int count;
    const __nv_bfloat16* preload_bias;  // != NULL: calls[0].D := bias broadcast before the GEMMs (calls[0].beta == 1)
    const float* cast_src;              // != NULL: after the GEMMs cast_dst = bf16(cast_src), cast_count elements
    __nv_bfloat16* cast_dst;
    size_t cast_count;
};

static inline bool fp8_gemm_run_sequence(Fp8GemmContext* ctx, const Fp8GemmSequence& s, cublasStatus_t* st) {
    Fp8GemmPrepared prep[2];
    bool ok = true;
    int prepared = 0;
    for (int i = 0; i < s.count && ok; i++, prepared++) ok = fp8_gemm_prepare(ctx, s.calls[i], &prep[i], st);
    if (ok) {
        if (s.preload_bias) fp8_gemm_bias_broadcast(s.calls[0].D, s.calls[0].d_type, s.preload_bias, s.calls[0].m, s.calls[0].n, ctx->gemm->stream);
        for (int i = 0; i < s.count && ok; i++) {
            const cublasStatus_t ls = fp8_gemm_launch(ctx, &prep[i], i == 0 && s.preload_bias == NULL);
            if (ls != CUBLAS_STATUS_SUCCESS) ok = fp8_fail(ctx, st, ls, "gemm_fp8: cublasLtMatmul refused the planned GEMM (m=%d n=%d k=%d): %s",
                                                           s.calls[i].m, s.calls[i].n, s.calls[i].k, cublasLtGetStatusName(ls));
        }
        if (ok && s.cast_src) fp8_gemm_cast_bf16(s.cast_dst, s.cast_src, s.cast_count, ctx->gemm->stream);
    }
    for (int i = 0; i < prepared; i++) fp8_gemm_release(&prep[i]);
    if (ok) {
        ctx->last_error[0] = '\0';
        if (st) *st = CUBLAS_STATUS_SUCCESS;
    }
    return ok;
}

// Same sequence; if it cannot run and calls[0] carries a bias with beta = 0, retry with the bias
// preloaded into calls[0].D and calls[0] at beta = 1 without the BIAS epilogue (counted in
// ctx->bias_fallbacks). The bias-carrying call must be calls[0] (its D is where the bias goes).
static inline bool fp8_gemm_run_sequence_bias_fallback(Fp8GemmContext* ctx, Fp8GemmSequence s, cublasStatus_t* st) {
    if (fp8_gemm_run_sequence(ctx, s, st)) return true;
    if (s.calls[0].bias == NULL || s.calls[0].beta != 0.0f || s.preload_bias != NULL) return false;
    char first_error[sizeof(ctx->last_error)];
    memcpy(first_error, ctx->last_error, sizeof(first_error));
    const cublasStatus_t first_st = st ? *st : CUBLAS_STATUS_SUCCESS;
    s.preload_bias = s.calls[0].bias;
    s.calls[0].bias = NULL;
    s.calls[0].beta = 1.0f;
    if (fp8_gemm_run_sequence(ctx, s, st)) {
        ctx->bias_fallbacks++;
        return true;
    }
    memcpy(ctx->last_error, first_error, sizeof(first_error));  // report the original refusal
    if (st) *st = first_st;
    return false;
}

// ------------------------------------------------------------------------------------------------
// The general FP8 GEMM

// Column-major D (m x n, ld m) = a_scale · b_scale · Aᵀ · B + beta · D + bias, on ctx->gemm->stream.
// In row-major terms: D (n, m) = B (n, k) · A (m, k)ᵀ (+ beta D) (+ bias (m) on every row), with A and B
// K-contiguous FP8 codes (A row-major (m, k), B row-major (n, k)) of kinds a_kind / b_kind (E4M3FN or
// E5M2; E5M2 x E5M2 has no cuBLASLt kernel). d_type CUDA_R_16BF or CUDA_R_32F; beta 0 (overwrite) or 1
// (accumulate into D: C = D, same pointer, same type). bias: optional BF16 vector of m (NULL: none).
// a_scale / b_scale: device fp32 DEQUANT scales (value = code · scale) in the layout of `mode` (see
// Fp8ScaleMode and fp8_scale_index); NULL means 1 in FP8_SCALE_TENSOR mode. fast_accum: 1 allows
// cuBLASLt's FP8 fast accumulation (no periodic fp32 promotion).
// Requirements: m % 16 == 0, k % 16 == 0 (n % 4 == 0 with block scales, k % chunk == 0 in chunked modes);
// A, B, D, bias 16-byte aligned; scales 4-byte (tensor) / 16-byte (block) aligned; D not overlapping A/B.
// Returns false and does nothing when the arguments break a rule (status INVALID_VALUE) or cuBLASLt has
// no algorithm (its status); ctx->last_error has the explanation. Deterministic (fixed cached algorithm).
// No scratch (the GemmContext's workspace).
bool gemm_fp8(Fp8GemmContext* ctx, void* D, cudaDataType_t d_type, const uint8_t* A, FP8Kind a_kind, const float* a_scale,
              const uint8_t* B, FP8Kind b_kind, const float* b_scale, int m, int n, int k, float beta, const __nv_bfloat16* bias,
              int fast_accum, Fp8ScaleMode mode, cublasStatus_t* st) {
    Fp8GemmSequence s;
    memset(&s, 0, sizeof(s));
    s.calls[0] = Fp8GemmCall{D, d_type, A, a_kind, a_scale, B, b_kind, b_scale, m, n, k, beta, bias, fast_accum, mode};
    s.count = 1;
    return fp8_gemm_run_sequence(ctx, s, st);
}

// ------------------------------------------------------------------------------------------------
// Row-major linear-layer wrappers (operand layouts in the header comment). OutT is __nv_bfloat16 or float.

template <typename OutT> struct Fp8OutType;
template <> struct Fp8OutType<__nv_bfloat16> { static constexpr cudaDataType_t value = CUDA_R_16BF; };
template <> struct Fp8OutType<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };

// Forward: out (N, OC) = X (N, C) · Wᵀ + bias  (beta = 0: overwrite; beta = 1: out += ...).
//   x: E4M3 codes row-major (N, C), x_dscale its dequant scales (B operand: block layout b * N + row);
//   w: E4M3 codes row-major (OC, C), w_dscale (A operand: b * OC + row, or the BLK128x128 tiles);
//   bias: BF16 (OC) or NULL. With beta = 0 and no BIAS-epilogue algorithm for `mode`, out is first set to
//   the broadcast bias and the GEMM accumulates (counted in ctx->bias_fallbacks).
// Requirements: OC % 16 == 0, C % 16 == 0 (and N % 4 == 0 with block scales). Returns false (nothing done)
// if cuBLASLt cannot run it (see gemm_fp8). Deterministic.
template <typename OutT>
bool fp8_linear_forward(Fp8GemmContext* ctx, OutT* out, const uint8_t* x, const float* x_dscale, const uint8_t* w, const float* w_dscale,
                        const __nv_bfloat16* bias, int N, int C, int OC, Fp8ScaleMode mode, int fast_accum, float beta = 0.0f,
                        cublasStatus_t* st = NULL) {
    Fp8GemmSequence s;
    memset(&s, 0, sizeof(s));
    s.calls[0] = Fp8GemmCall{out, Fp8OutType<OutT>::value, w, FP8_E4M3FN, w_dscale, x, FP8_E4M3FN, x_dscale, OC, N, C, beta, bias,
                             fast_accum, mode};
    s.count = 1;
    return fp8_gemm_run_sequence_bias_fallback(ctx, s, st);
}

// Data gradient: dx (N, C) = dy (N, OC) · W  (beta = 0 overwrite, 1 accumulate).
//   wt: E4M3 codes of Wᵀ, row-major (C, OC), wt_dscale (A operand, blocks along OC);
//   dy: codes of kind grad_kind (E5M2 by default, E4M3FN allowed), row-major (N, OC), dy_dscale (B operand).
// Requirements: C % 16 == 0, OC % 16 == 0. Returns false (nothing done) if cuBLASLt cannot run it.
template <typename OutT>
bool fp8_linear_dgrad(Fp8GemmContext* ctx, OutT* dx, const uint8_t* dy, const float* dy_dscale, const uint8_t* wt, const float* wt_dscale,
                      int N, int C, int OC, Fp8ScaleMode mode, int fast_accum, float beta = 0.0f, FP8Kind grad_kind = FP8_E5M2,
                      cublasStatus_t* st = NULL) {
    return gemm_fp8(ctx, dx, Fp8OutType<OutT>::value, wt, FP8_E4M3FN, wt_dscale, dy, grad_kind, dy_dscale, C, N, OC, beta, NULL,
                    fast_accum, mode, st);
}

// Weight gradient: dw (OC, C) += dyᵀ · X  (beta = 1, the trainer's accumulation; beta = 0 overwrites).
//   xt: E4M3 codes of Xᵀ, row-major (C, N), xt_dscale (A operand, blocks along N);
//   dyt: codes of dYᵀ (grad_kind), row-major (OC, N), dyt_dscale (B operand, blocks along N).
//   dw: BF16 or fp32 (C = D: the accumulation happens in dw's type; an fp32 dw keeps fp32 sums).
// Requirements: C % 16 == 0, N % 16 == 0. Returns false (nothing done) if cuBLASLt cannot run it.
template <typename OutT>
bool fp8_linear_wgrad(Fp8GemmContext* ctx, OutT* dw, const uint8_t* dyt, const float* dyt_dscale, const uint8_t* xt, const float* xt_dscale,
                      int N, int C, int OC, Fp8ScaleMode mode, int fast_accum, float beta = 1.0f, FP8Kind grad_kind = FP8_E5M2,
                      cublasStatus_t* st = NULL) {
    return gemm_fp8(ctx, dw, Fp8OutType<OutT>::value, xt, FP8_E4M3FN, xt_dscale, dyt, grad_kind, dyt_dscale, C, OC, N, beta, NULL,
                    fast_accum, mode, st);
}

// ------------------------------------------------------------------------------------------------
// TCFP-12: W = W_hi + W_lo (two E4M3 tensors, each with its own scales), out = X·W_hiᵀ + X·W_loᵀ

// How the two products are summed (see the header comment, "Rounding of two-GEMM sums").
enum Tcfp12Accum {
    TCFP12_ACC_BF16_LO_FIRST = 0,  // out = X·W_loᵀ; out = X·W_hiᵀ + out + bias       (BF16 D; default)
    TCFP12_ACC_BF16_HI_FIRST = 1,  // out = X·W_hiᵀ + bias; out = X·W_loᵀ + out       (BF16 D)
    TCFP12_ACC_FP32 = 2,           // s = X·W_hiᵀ + bias; s += X·W_loᵀ; out = bf16(s)  (fp32 scratch s)
};

static inline const char* tcfp12_accum_name(Tcfp12Accum a) {
    return a == TCFP12_ACC_BF16_LO_FIRST ? "bf16 lo-first" : a == TCFP12_ACC_BF16_HI_FIRST ? "bf16 hi-first" : a == TCFP12_ACC_FP32 ? "fp32 scratch" : "?";
}

// The two-GEMM sequence out = P_hi + P_lo (+ bias) of a D of m x n for `acc`; hi/lo are the calls
// without D, beta and bias.
static inline Fp8GemmSequence tcfp12_sequence(Fp8GemmCall hi, Fp8GemmCall lo, __nv_bfloat16* out, float* scratch,
                                              const __nv_bfloat16* bias, Tcfp12Accum acc) {
    Fp8GemmSequence s;
    memset(&s, 0, sizeof(s));
    s.count = 2;
    if (acc == TCFP12_ACC_FP32) {
        hi.D = lo.D = scratch;
        hi.d_type = lo.d_type = CUDA_R_32F;
        hi.beta = 0.0f; hi.bias = bias;
        lo.beta = 1.0f; lo.bias = NULL;
        s.calls[0] = hi; s.calls[1] = lo;
        s.cast_src = scratch;
        s.cast_dst = out;
        s.cast_count = (size_t)hi.m * hi.n;
        return s;
    }
    hi.D = lo.D = out;
    hi.d_type = lo.d_type = CUDA_R_16BF;
    if (acc == TCFP12_ACC_BF16_HI_FIRST) {
        hi.beta = 0.0f; hi.bias = bias;
        lo.beta = 1.0f; lo.bias = NULL;
        s.calls[0] = hi; s.calls[1] = lo;
    } else {
        lo.beta = 0.0f; lo.bias = NULL;
        hi.beta = 1.0f; hi.bias = bias;
        s.calls[0] = lo; s.calls[1] = hi;
    }
    return s;
}

// Run a TCFP-12 sequence; if the BIAS epilogue has no algorithm, preload the bias into the first D
// and run both GEMMs with beta = 1 (ctx->bias_fallbacks).
static inline bool tcfp12_run(Fp8GemmContext* ctx, Fp8GemmSequence s, const __nv_bfloat16* bias, cublasStatus_t* st) {
    if (fp8_gemm_run_sequence(ctx, s, st)) return true;
    if (bias == NULL) return false;
    char first_error[sizeof(ctx->last_error)];
    memcpy(first_error, ctx->last_error, sizeof(first_error));
    const cublasStatus_t first_st = st ? *st : CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < s.count; i++) s.calls[i].bias = NULL;
    s.calls[0].beta = 1.0f;
    s.preload_bias = bias;
    if (fp8_gemm_run_sequence(ctx, s, st)) {
        ctx->bias_fallbacks++;
        return true;
    }
    memcpy(ctx->last_error, first_error, sizeof(first_error));
    if (st) *st = first_st;
    return false;
}

// TCFP-12 forward: out (N, OC) = X · (W_hi + W_lo)ᵀ + bias, as two FP8 GEMMs into the same D (OVERWRITES out).
//   x: E4M3 (N, C) with x_dscale (B operand); w_hi, w_lo: E4M3 (OC, C) with hi_dscale / lo_dscale (A operand,
//   same `mode` for both); bias: BF16 (OC) or NULL. acc chooses the summation (Tcfp12Accum);
//   TCFP12_ACC_FP32 needs `scratch`: N * OC floats (dead after the call), the others take NULL.
// Requirements as fp8_linear_forward. Returns false (nothing done) if cuBLASLt cannot run both GEMMs.
// Deterministic.
bool tcfp12_linear_forward(Fp8GemmContext* ctx, __nv_bfloat16* out, const uint8_t* x, const float* x_dscale, const uint8_t* w_hi,
                           const float* hi_dscale, const uint8_t* w_lo, const float* lo_dscale, const __nv_bfloat16* bias, int N,
                           int C, int OC, Fp8ScaleMode mode, int fast_accum, Tcfp12Accum acc = TCFP12_ACC_BF16_LO_FIRST,
                           float* scratch = NULL, cublasStatus_t* st = NULL) {
    if (acc == TCFP12_ACC_FP32 && scratch == NULL) return fp8_fail(ctx, st, CUBLAS_STATUS_INVALID_VALUE, "tcfp12_linear_forward: fp32 accumulation needs scratch");
    const Fp8GemmCall hi{NULL, CUDA_R_16BF, w_hi, FP8_E4M3FN, hi_dscale, x, FP8_E4M3FN, x_dscale, OC, N, C, 0.0f, NULL, fast_accum, mode};
    Fp8GemmCall lo = hi;
    lo.A = w_lo;
    lo.a_scale = lo_dscale;
    return tcfp12_run(ctx, tcfp12_sequence(hi, lo, out, scratch, bias, acc), bias, st);
}

// TCFP-12 data gradient: dx (N, C) = dy · (W_hi + W_lo), two GEMMs into the same D (OVERWRITES dx).
//   dy: (N, OC) of grad_kind with dy_dscale (B operand); wt_hi, wt_lo: E4M3 codes of W_hiᵀ, W_loᵀ, row-major
//   (C, OC), with their dequant scales (A operand). wt_lo == NULL: ABD (asymmetric backward, W_hi only:
//   one GEMM; with TCFP12_ACC_FP32 into the scratch, then cast). acc / scratch (N * C floats for TCFP12_ACC_FP32) as in tcfp12_linear_forward.
// Requirements as fp8_linear_dgrad. Returns false (nothing done) if cuBLASLt cannot run it.
bool tcfp12_linear_dgrad(Fp8GemmContext* ctx, __nv_bfloat16* dx, const uint8_t* dy, const float* dy_dscale, const uint8_t* wt_hi,
                         const float* hi_dscale, const uint8_t* wt_lo, const float* lo_dscale, int N, int C, int OC, Fp8ScaleMode mode,
                         int fast_accum, Tcfp12Accum acc = TCFP12_ACC_BF16_LO_FIRST, float* scratch = NULL,
                         FP8Kind grad_kind = FP8_E5M2, cublasStatus_t* st = NULL) {
    if (wt_lo == NULL && acc != TCFP12_ACC_FP32)
        return fp8_linear_dgrad(ctx, dx, dy, dy_dscale, wt_hi, hi_dscale, N, C, OC, mode, fast_accum, 0.0f, grad_kind, st);
    if (acc == TCFP12_ACC_FP32 && scratch == NULL) return fp8_fail(ctx, st, CUBLAS_STATUS_INVALID_VALUE, "tcfp12_linear_dgrad: fp32 accumulation needs scratch");
    const Fp8GemmCall hi{NULL, CUDA_R_16BF, wt_hi, FP8_E4M3FN, hi_dscale, dy, grad_kind, dy_dscale, C, N, OC, 0.0f, NULL, fast_accum, mode};
    Fp8GemmCall lo = hi;
    lo.A = wt_lo;
    lo.a_scale = lo_dscale;
    Fp8GemmSequence seq = tcfp12_sequence(hi, lo, dx, scratch, NULL, acc);
    if (wt_lo == NULL) seq.count = 1;  // ABD with fp32 accumulation: the W_hi GEMM (calls[0]), then the cast
    return fp8_gemm_run_sequence(ctx, seq, st);
}

// ------------------------------------------------------------------------------------------------
// Diagnostics

// The end-of-run line of the FP8 plans' algorithm tuning (nothing when none was tuned).
static inline void fp8_gemm_tune_report(const Fp8GemmContext* ctx, FILE* f) {
    GemmTuneTotals t;
    for (int i = 0; i < ctx->num_plans; i++) t.add(ctx->plans[i].tune, ctx->plans[i].uses);
    t.print(f, "cuBLASLt FP8");
}

// One line per cached plan: the GEMM (m, n, k, ld, types, scale modes, fast-accum, beta, bias) and the
// algorithm cuBLASLt chose (id, tile, stages, split-K, reduction scheme, workspace, waves, uses), or why
// there is none.
void fp8_gemm_context_print_plans(const Fp8GemmContext* ctx, FILE* f) {
    fprintf(f, "FP8 GEMM plans (%d cached, %llu heuristic queries, %llu uncached calls, %llu bias fallbacks):\n", ctx->num_plans,
            ctx->heuristic_queries, ctx->uncached_calls, ctx->bias_fallbacks);
    for (int i = 0; i < ctx->num_plans; i++) {
        const Fp8GemmPlan& p = ctx->plans[i];
        fprintf(f, "  m=%-6lld n=%-6lld k=%-6lld ld=%-6lld %s x %s -> %s scales %s x %s%s%s%s: ", (long long)p.key.m, (long long)p.key.n,
                (long long)p.key.k, (long long)p.key.ld, fp8_data_type_name(p.key.a_type), fp8_data_type_name(p.key.b_type),
                fp8_data_type_name(p.key.d_type), fp8_matrix_scale_name(p.key.a_mode), fp8_matrix_scale_name(p.key.b_mode),
                p.key.fast_accum ? " fast" : "", p.key.accumulate ? " beta=1" : "", p.key.bias ? " bias" : "");
        if (!p.found) {
            fprintf(f, "no algorithm (%s)\n", cublasLtGetStatusName(p.status));
            continue;
        }
        const GemmAlgoConfig a = gemm_algo_config(&p.algo);
        gemm_tune_describe(p.tune, f);
        fprintf(f, "algo %d tile %u stages %u splitK %d red %u%s ws %zu KiB waves %.2f uses %llu\n", a.id, a.tile, a.stages, a.splitk, a.red,
                p.reduction_mask == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE ? "" : " (any reduction scheme allowed)", p.workspace >> 10,
                p.waves, p.uses);
    }
}
