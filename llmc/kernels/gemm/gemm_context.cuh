// gemm_context.cuh - the GEMM front's context (llmc/kernels/gemm/gemm.cuh): the cuBLASLt handle, its
// workspace and stream, the bounded cache of planned GEMMs (descriptors, layouts and the algorithm chosen
// once per shape), the compute type, and the low-precision backend a mode may attach (GemmLowpBackend).
// Planning and the one cuBLASLt call every floatX GEMM goes through (gemm_cublaslt) are here; the
// determinism rules they follow are in gemm.cuh's header comment.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <cublasLt.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/kernels/gemm/gemm_tune.cuh"

// ------------------------------------------------------------------------------------------------
// The base backend's name (the FP8 / TCFP-12 builds attach llmc/modes/lowp/gemm_lowp.cuh on top of it).
#define GEMM_BACKEND_NAME "cuBLASLt " PRECISION_MODE_NAME

// ------------------------------------------------------------------------------------------------
// Error checking

// Abort with file:line, the cuBLAS status name and its description when a cuBLAS/cuBLASLt call fails.
#ifndef cublasCheck
#define cublasCheck(call) gemm_cublas_check_impl((call), #call, __FILE__, __LINE__)
#endif
static inline void gemm_cublas_check_impl(cublasStatus_t status, const char* what, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: cuBLAS: %s failed at %s:%d: %s (%s)\n", what, file, line,
                cublasLtGetStatusName(status), cublasLtGetStatusString(status));
        exit(EXIT_FAILURE);
    }
}

// ------------------------------------------------------------------------------------------------
// Context: handle, workspace, stream, and a bounded cache of planned GEMMs

#define GEMM_WORKSPACE_BYTES (32u << 20)  // 32 MiB: Hopper kernels want >= 32 MiB
#define GEMM_PLAN_CACHE_SIZE 64           // the trainer uses ~15 distinct GEMMs; 64 leaves room for eval shapes

// Identity of one planned GEMM: problem size (column-major m, n, k), transposes, epilogue, whether
// C is read (beta != 0), and the alignment class of each pointer (cuBLASLt's choice depends on it).
struct GemmPlanKey {
    int64_t m, n, k;
    int32_t transa, transb;  // cublasOperation_t
    uint32_t epilogue;       // cublasLtEpilogue_t
    int32_t accumulate;      // beta = 1 (C = D is read) or beta = 0
    uint32_t align;          // 3 bits per pointer (A, B, D, bias, aux): log2(alignment) - 4, alignment capped at 256
};

struct GemmPlan {
    GemmPlanKey key;
    bool found;                          // false: cuBLASLt has no algorithm for this key (caller falls back or fails)
    cublasLtMatmulDesc_t desc;           // transposes, epilogue, aux ld; pointers are set per call
    cublasLtMatrixLayout_t a, b, d;      // d doubles as C's layout
    cublasLtMatmulAlgo_t algo;
    size_t workspace;                    // bytes the algorithm needs (<= the context's workspace)
    float waves;                         // heuristic's device-utilization estimate
    cublasComputeType_t compute_type;    // what the plan actually uses (after any fallback)
    uint32_t reduction_mask;             // split-K reduction schemes that were allowed when planning
    cublasStatus_t status;               // status of the last heuristic query (why found == false)
    unsigned long long uses;
    GemmTuneState tune;                  // the heuristic's candidates; algo is the first until the first call tunes
                                         // (context's autotune on), then the fastest bit-identical one (gemm_tune.cuh)
};

struct GemmContext;

// A low-precision backend (llmc/modes/lowp/gemm_lowp.cuh): returns true when it computed the product itself.
//   forward:  y (N, OC) = inp (N, C) · weightᵀ + bias (overwrite). gelu_out != NULL: y is a pre-activation whose
//             GELU gelu_out = gelu_tanh(y) is the next forward call's inp, and the front will offer that GELU to
//             defer right after this call; the backend may already make the next call's operand from y in this GEMM
//             (its epilogue), and then takes the offer (defer returns true).
//   backward: dinp (N, C) = dout · weight (overwrite; skipped if NULL) and dweight (OC, C) += doutᵀ · inp
//             (skipped if NULL); may also do dbias (OC) += column sums of dout (then sets *dbias_done).
//             pre_gelu != NULL: dinp times gelu_tanh'(pre_gelu) is the next backward call's dout, and the front will
//             offer that GELU' to defer right after this call; the backend may already make the next call's operand
//             in this dgrad's epilogue, and then takes the offer.
//   amax_slot: a zeroed device slot into which the kernel about to produce `tensor` (n values) may
//             atomicMax the bit patterns of |value| (current scaling without an amax pass); valid for the
//             next forward/backward call only, whose input (forward) or dout (backward) it must be. NULL:
//             not wanted.
//   keeps_input: whether the backward of the layer of `weight` at N rows will not read `inp` (it kept
//             what it needs from the forward), so a caller may skip recomputing it.
//   defer:    offer the elementwise producer `kind` of out (rows, cols) to the backend (GemmDefer); true: the
//             backend computes it inside its next forward / backward call, which reads out as inp / dout,
//             writing out itself only with keep_activations (GELU) or when that call cannot take it (then
//             with the front's kernel, before anything reads out). false: the caller runs it now.
//   layernorm: offer the LayerNorm forward `ln` (GemmLayerNorm), whose out is the input of the next forward call
//             with weight `consumer`; true: the backend took it: either it ran it (every output of the LayerNorm
//             written, as layernorm.cuh's launchers write them) together with what that call needs of out (TensorCast),
//             or it wrote the residual and the row statistics now and computes out inside the next forward call's
//             quantization of its input, writing out itself only with keep_activations or when that call cannot
//             take it (FP8 / TCFP-12: GEMM_DEFER_LAYERNORM). false: the caller runs it. May be NULL (never taken).
// The elementwise producers a backend may take over (defer): GELU: out = gelu_tanh(pre);
// DGELU: out = out * gelu_tanh'(pre) (out holds dout · weight on entry); LAYERNORM: out = LayerNorm(pre) from the row
// statistics (offered through layernorm, not defer).
enum GemmDefer { GEMM_DEFER_NONE = 0, GEMM_DEFER_GELU = 1, GEMM_DEFER_DGELU = 2, GEMM_DEFER_LAYERNORM = 3 };

// A LayerNorm forward (llmc/kernels/layernorm.cuh): out = LayerNorm(inp1) if inp2 == NULL (residual unused),
// else residual = inp1 + inp2, out = LayerNorm(residual); mean, rstd: the row statistics; (N, C) row-major.
struct GemmLayerNorm {
    floatX* residual;
    floatX* out;
    float* mean;
    float* rstd;
    const floatX* inp1;
    const floatX* inp2;
    const floatX* weight;
    const floatX* bias;
    int N, C;
};

struct GemmLowpBackend {
    void* state;
    const char* name;
    bool (*forward)(GemmContext* ctx, floatX* y, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C, int OC,
                    floatX* gelu_out);
    bool (*backward)(GemmContext* ctx, floatX* dinp, floatX* dweight, floatX* dbias, bool* dbias_done, const floatX* dout,
                     const floatX* inp, const floatX* weight, int N, int C, int OC, const floatX* pre_gelu);
    unsigned int* (*amax_slot)(GemmContext* ctx, const void* tensor, size_t n);
    bool (*keeps_input)(GemmContext* ctx, const floatX* weight, int N);
    bool (*defer)(GemmContext* ctx, GemmDefer kind, floatX* out, const floatX* pre, int rows, int cols);
    bool (*layernorm)(GemmContext* ctx, const GemmLayerNorm& ln, const floatX* consumer);
    int keeps_inputs;                    // 1: keeps_input holds for every layer it runs (after its warm-up)
    void (*report)(GemmContext* ctx, FILE* f);  // end-of-run counts (may be NULL)
    void (*destroy)(GemmContext* ctx);   // frees the backend (gemm_context_free calls it)
};

// A mode's forward GEMM that applies the per-value MATMUL_OUT boundary (boundary_value<MATMUL_OUT>) in its epilogue
// (SF16: llmc/modes/sf16/sf16_cutlass.cuh, --q115-cutlass): the bits of the base backend's GEMM followed by the front's
// boundary pass, but for the GEMM's accumulation order. pre_gelu NULL: out (N, OC) = boundary(inp · weightᵀ + bias);
// else pre_gelu = that and out = gemm_gelu_stored(pre_gelu) (gemm_gelu_apply<true>'s values). Row-major floatX, shapes
// and pointers as matmul_forward checked them. Returns false, having done nothing, where it does not take the call (the
// front then runs its GEMM and the pass). Asynchronous on ctx->stream.
struct GemmBoundaryGemm {
    void* state;
    bool (*forward)(GemmContext* ctx, floatX* out, floatX* pre_gelu, const floatX* inp, const floatX* weight, const floatX* bias, int N,
                    int C, int OC);
    void (*destroy)(GemmContext* ctx);  // frees the hook's state (gemm_context_free calls it; may be NULL)
};

struct GemmContext {
    GemmLowpBackend* lowp;               // NULL: every GEMM on the base backend
    GemmBoundaryGemm* boundary_gemm;     // NULL: the MATMUL_OUT boundary (where not the identity) is a pass after the GEMM
    BoundaryCasts* casts;                // whole-tensor MATMUL_OUT casts a mode attached (TensorCast); NULL: none
    int out_cast_by_reader;              // set by the caller for the next matmul_forward call only, which resets it:
                                         // 1 = the output's only reader applies its MATMUL_OUT cast as it reads it (the
                                         // model's fused residual + LayerNorm, BoundaryCasts::residual_layernorm), or
                                         // its per-value boundary (SF16: the same kernel, layernorm.cuh), so the front
                                         // does not; 0 = the front casts it (without casts: nothing);
                                         // 2 = the front casts it as a pass after its own GEMM, never inside
                                         // boundary_gemm_out's or boundary_gemm's (1 neither): a projection whose reader
                                         // casts it in fused runs (here
                                         // a --cast-fuse 0 or --cast-stats step), or the evaluation's LM head (the
                                         // training step's is matmul_forward_logits): which GEMM computes a layer must
                                         // not depend on those flags or on the step kind (the same bits)
    unsigned long long weight_version;   // bumped by gemm_weights_updated (backends cache quantized weights per version)
    int optimizer_steps;                 // optimizer steps so far (the low-precision backends' warm-up)
    int training;                        // 1 during a training forward + backward (delayed-scaling histories advance)
    int keep_activations;                // 1: activations a backend takes over (defer) are still written in BF16
                                         // (tests and tensor statistics read them)
    cublasLtHandle_t handle;
    void* workspace;                     // device, workspace_size bytes, used only on `stream`
    size_t workspace_size;
    cublasComputeType_t compute_type;    // requested compute type, from gemm_default_compute_type()
    cudaStream_t stream;                 // every GEMM and kernel of this front runs here
    int fuse_gelu;                       // 1: GELU / GELU' in the cuBLASLt epilogue when supported (GELU' only where
                                         // gemm_dgelu_fused_for says so); 0: separate kernels
    int autotune;                        // 1: each planned GEMM's first call times the heuristic's candidates and
                                         // keeps the fastest bit-identical one (gemm_tune.cuh); 0: its first answer
    GemmPlan plans[GEMM_PLAN_CACHE_SIZE];
    int num_plans;
    unsigned long long heuristic_queries; // cublasLtMatmulAlgoGetHeuristic calls so far (caching check)
    unsigned long long uncached_calls;    // GEMMs planned on the fly because the cache was full
};

// Compute type for this build: the one place that chooses it. CUBLAS_COMPUTE_32F for every storage
// type: fp32 accumulation for BF16/FP16, and true fp32 (no TF32) for FP32 builds. SF16_TRUE_FORWARD
// returns CUBLAS_COMPUTE_32F_FAST_16BF; planning then falls back to CUBLAS_COMPUTE_32F for any GEMM
// that has no algorithm with the requested type (see gemm_plan_build; gemm_compute_summary reports it).
static inline cublasComputeType_t gemm_default_compute_type() {
    // SF16_TRUE_FORWARD: the seed's true-forward compute mode (fp32 accumulation, BF16 products)
    return kModeGemmFast16BF ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
}

template <typename T> struct GemmDataType;
template <> struct GemmDataType<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };
template <> struct GemmDataType<half> { static constexpr cudaDataType_t value = CUDA_R_16F; };
template <> struct GemmDataType<__nv_bfloat16> { static constexpr cudaDataType_t value = CUDA_R_16BF; };

// Printable name of the GEMM path this context runs, e.g. "cuBLASLt BF16" (for logs and checkpoints).
const char* gemm_backend_name(const GemmContext* ctx) {
    if (ctx->lowp) return ctx->lowp->name;
    return ctx->compute_type == CUBLAS_COMPUTE_32F_FAST_TF32 ? GEMM_BACKEND_NAME " (TF32 tensor cores)" : GEMM_BACKEND_NAME;
}

// The low-precision backend's amax slot for `tensor` (n values) about to be produced and then read by the
// next matmul_forward (as inp) or matmul_backward (as dout); NULL when no backend wants one. Pass it to the
// producing kernel (LayerNorm, GELU, ...), which atomicMax'es the bit patterns of |value| into it.
static inline unsigned int* gemm_amax_slot(GemmContext* ctx, const void* tensor, size_t n) {
    return ctx->lowp && ctx->lowp->amax_slot ? ctx->lowp->amax_slot(ctx, tensor, n) : NULL;
}

// False when matmul_backward of the layer of `weight` at N rows will not read its `inp` (the
// low-precision backend kept the quantized copy it needs from the forward): callers may then skip
// recomputing inp (the GELU recompute of the MLP).
static inline bool gemm_backward_reads_input(GemmContext* ctx, const floatX* weight, int N) {
    return !(ctx->lowp && ctx->lowp->keeps_input && ctx->lowp->keeps_input(ctx, weight, N));
}

// Offer the producer `kind` of out (rows x cols) to the low-precision backend (GemmLowpBackend::defer);
// false: the caller computes it now.
static inline bool gemm_lowp_defer(GemmContext* ctx, GemmDefer kind, floatX* out, const floatX* pre, int rows, int cols) {
    return ctx->lowp && ctx->lowp->defer && ctx->lowp->defer(ctx, kind, out, pre, rows, cols);
}

// Offer the LayerNorm forward ln, whose out the next matmul_forward with weight `consumer` reads as its input, to
// the low-precision backend (GemmLowpBackend::layernorm); false: the caller runs it now.
static inline bool gemm_lowp_layernorm(GemmContext* ctx, const GemmLayerNorm& ln, const floatX* consumer) {
    return ctx->lowp && ctx->lowp->layernorm && ctx->lowp->layernorm(ctx, ln, consumer);
}

// Whether the low-precision backend keeps every layer's weight-gradient input from the forward (then the
// backward never recomputes the GELU or LayerNorm outputs: recompute level 2 is free, llmc/train/recompute_plan.h).
static inline bool gemm_keeps_inputs(const GemmContext* ctx) { return ctx->lowp && ctx->lowp->keeps_inputs; }

// The low-precision backend's end-of-run counts (e.g. speculative scaling's re-quantizations), or nothing.
static inline void gemm_lowp_report(GemmContext* ctx, FILE* f) {
    if (ctx->lowp && ctx->lowp->report) ctx->lowp->report(ctx, f);
}

// After every optimizer step that changed the weights: cached quantized weights are stale.
static inline void gemm_weights_updated(GemmContext* ctx) {
    ctx->weight_version++;
    ctx->optimizer_steps++;
}

// Create the cuBLASLt handle and the 32 MiB workspace; all later work of this context runs on `stream`.
void gemm_context_init(GemmContext* ctx, cudaStream_t stream) {
    memset(ctx, 0, sizeof(*ctx));
    ctx->weight_version = 1;
    cublasCheck(cublasLtCreate(&ctx->handle));
    ctx->workspace_size = GEMM_WORKSPACE_BYTES;
    cudaCheck(cudaMalloc(&ctx->workspace, ctx->workspace_size));
    ctx->compute_type = gemm_default_compute_type();
    ctx->stream = stream;
    ctx->fuse_gelu = 1;
    ctx->autotune = 1;
}

// Destroy a plan's cuBLASLt descriptor and layouts (any plan type with desc, a, b, d; FP8 plans too).
template <typename Plan>
static inline void gemm_plan_destroy(Plan* p) {
    if (p->desc) cublasCheck(cublasLtMatmulDescDestroy(p->desc));
    if (p->a) cublasCheck(cublasLtMatrixLayoutDestroy(p->a));
    if (p->b) cublasCheck(cublasLtMatrixLayoutDestroy(p->b));
    if (p->d) cublasCheck(cublasLtMatrixLayoutDestroy(p->d));
    p->desc = NULL;
    p->a = p->b = p->d = NULL;
}

// Release the plans, the workspace (after the stream is idle) and the handle.
void gemm_context_free(GemmContext* ctx) {
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    if (ctx->lowp && ctx->lowp->destroy) ctx->lowp->destroy(ctx);
    ctx->lowp = NULL;
    if (ctx->boundary_gemm && ctx->boundary_gemm->destroy) ctx->boundary_gemm->destroy(ctx);
    ctx->boundary_gemm = NULL;
    for (int i = 0; i < ctx->num_plans; i++) gemm_plan_destroy(&ctx->plans[i]);
    ctx->num_plans = 0;
    cudaCheck(cudaFree(ctx->workspace));
    ctx->workspace = NULL;
    cublasCheck(cublasLtDestroy(ctx->handle));
    ctx->handle = NULL;
}

// FP32 build only: enable = 1 lets cuBLASLt round the fp32 inputs to TF32 on the tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32: ~10-bit mantissa products, fp32 accumulation); 0 restores true fp32.
// Drops the planned GEMMs (they depend on the compute type). Other builds: enable = 1 is an error.
void gemm_set_tf32(GemmContext* ctx, int enable) {
    if (enable && !std::is_same<floatX, float>::value) {
        fprintf(stderr, "error: gemm_set_tf32: TF32 applies to FP32 storage only (this build is %s)\n", PRECISION_MODE_NAME);
        exit(EXIT_FAILURE);
    }
    const cublasComputeType_t t = enable ? CUBLAS_COMPUTE_32F_FAST_TF32 : gemm_default_compute_type();
    if (t == ctx->compute_type) return;
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    for (int i = 0; i < ctx->num_plans; i++) gemm_plan_destroy(&ctx->plans[i]);
    ctx->num_plans = 0;
    ctx->compute_type = t;
}

// ------------------------------------------------------------------------------------------------
// Planning: descriptors + heuristic, once per key

static inline uint32_t gemm_align_class(const void* p) {  // 0..4 for 16..256-byte alignment
    const uintptr_t a = (uintptr_t)p;  // callers have checked 16-byte alignment; NULL counts as 256
    uint32_t c = 0;
    while (c < 4 && a % ((uintptr_t)32 << c) == 0) c++;
    return c;
}
static inline uint32_t gemm_align_bytes(uint32_t cls) { return 16u << cls; }

static inline bool gemm_key_equal(const GemmPlanKey& x, const GemmPlanKey& y) {
    return x.m == y.m && x.n == y.n && x.k == y.k && x.transa == y.transa && x.transb == y.transb &&
           x.epilogue == y.epilogue && x.accumulate == y.accumulate && x.align == y.align;
}

static inline bool gemm_epilogue_has_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
static inline bool gemm_epilogue_has_aux(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

static inline const char* gemm_epilogue_name(uint32_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
        case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
        case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
        case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
        default: return "?";
    }
}

// Layout of the stored matrix behind op(X) of size rows x cols (column-major view).
static inline void gemm_layout(cublasLtMatrixLayout_t* layout, int32_t trans, int64_t rows, int64_t cols) {
    const cudaDataType_t t = GemmDataType<floatX>::value;
    if (trans == CUBLAS_OP_N) cublasCheck(cublasLtMatrixLayoutCreate(layout, t, rows, cols, rows));
    else cublasCheck(cublasLtMatrixLayoutCreate(layout, t, cols, rows, cols));
}

// The best `requested` algorithms (best first) for D = op(A) op(B) (C = D) under the given workspace, split-K
// reduction schemes and minimum pointer alignments (bytes; A, B, and C = D): one cublasLtMatmulAlgoGetHeuristic
// query into result[0 .. requested). Returns its status; *count is the number of results (0 .. requested).
// Shared by the BF16 and the FP8 plan caches.
static inline cublasStatus_t gemm_heuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                            cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d, uint64_t workspace,
                                            uint32_t reduction_mask, uint32_t align_a, uint32_t align_b, uint32_t align_d,
                                            cublasLtMatmulHeuristicResult_t* result, int* count, int requested = 1) {
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction_mask,
                                                     sizeof(reduction_mask)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
    memset(result, 0, sizeof(*result) * requested);
    *count = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, pref, requested, result, count);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    return st;
}

// One heuristic query with the given compute type and reduction-scheme mask; true if an algorithm
// was found (plan->algo etc. filled). Creates plan->desc (destroying a previous one).
static inline bool gemm_plan_try(GemmContext* ctx, GemmPlan* plan, cublasComputeType_t compute_type,
                                 uint32_t reduction_mask, const void* bias, const void* aux, int64_t aux_ld) {
    const GemmPlanKey& key = plan->key;
    if (plan->desc) cublasCheck(cublasLtMatmulDescDestroy(plan->desc));
    cublasCheck(cublasLtMatmulDescCreate(&plan->desc, compute_type, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &key.transa, sizeof(key.transa)));
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &key.transb, sizeof(key.transb)));
    const uint32_t epilogue = key.epilogue;
    cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    // The heuristic looks at the bias / aux pointer values to learn their alignment (never dereferences).
    if (gemm_epilogue_has_bias(epilogue))
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (gemm_epilogue_has_aux(epilogue)) {
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }

    cublasLtMatmulHeuristicResult_t results[GEMM_TUNE_MAX_ALGOS];
    int count = 0;
    ctx->heuristic_queries++;
    cublasStatus_t st = gemm_heuristic(ctx->handle, plan->desc, plan->a, plan->b, plan->d, ctx->workspace_size, reduction_mask,
                                       gemm_align_bytes(key.align & 7), gemm_align_bytes((key.align >> 3) & 7),
                                       gemm_align_bytes((key.align >> 6) & 7), results, &count, GEMM_TUNE_MAX_ALGOS);
    const cublasLtMatmulHeuristicResult_t& result = results[0];
    // "No algorithm" comes back as NOT_SUPPORTED, as SUCCESS with count 0, or (for some epilogue / type
    // combinations) as INVALID_VALUE: all three mean "plan without it"; the status is kept for messages.
    plan->status = st == CUBLAS_STATUS_SUCCESS && count > 0 ? result.state : st;
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
        (st == CUBLAS_STATUS_SUCCESS && (count == 0 || result.state != CUBLAS_STATUS_SUCCESS)))
        return false;
    cublasCheck(st);
    gemm_tune_collect(&plan->tune, results, count);
    plan->algo = result.algo;
    plan->workspace = result.workspaceSize;
    plan->waves = result.wavesCount;
    plan->compute_type = compute_type;
    plan->reduction_mask = reduction_mask;
    return true;
}

// Build plan->{desc, layouts, algo} for plan->key. Preference order: the context's compute type, then
// CUBLAS_COMPUTE_32F if different; for each, split-K only with fp32 partials, then any reduction scheme.
static inline void gemm_plan_build(GemmContext* ctx, GemmPlan* plan, const void* bias, const void* aux, int64_t aux_ld) {
    const GemmPlanKey& key = plan->key;
    plan->desc = NULL;
    gemm_layout(&plan->a, key.transa, key.m, key.k);
    gemm_layout(&plan->b, key.transb, key.k, key.n);
    gemm_layout(&plan->d, CUBLAS_OP_N, key.m, key.n);
    const cublasComputeType_t types[2] = {ctx->compute_type, CUBLAS_COMPUTE_32F};
    const uint32_t masks[2] = {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, CUBLASLT_REDUCTION_SCHEME_MASK};
    plan->found = false;
    for (int t = 0; t < 2 && !plan->found; t++) {
        if (t == 1 && types[1] == types[0]) break;
        for (int r = 0; r < 2 && !plan->found; r++) plan->found = gemm_plan_try(ctx, plan, types[t], masks[r], bias, aux, aux_ld);
    }
    plan->uses = 0;
}

// The plan for `key`: from the cache, or built and cached. If the cache is full the plan is built into
// *scratch, which the caller destroys after use (correct, just slower; counted in uncached_calls).
// The cache lookup of both plan caches (BF16 and FP8): the cached plan whose key equals `key` (*fresh = false),
// or a zeroed slot with that key to build (*fresh = true): a new cache entry, or *scratch when the cache is full.
template <typename Plan, typename Key, typename Eq>
static inline Plan* gemm_plan_slot(Plan* plans, int* num_plans, int capacity, const Key& key, Eq equal, Plan* scratch,
                                   unsigned long long* uncached, bool* fresh) {
    *fresh = false;
    for (int i = 0; i < *num_plans; i++)
        if (equal(plans[i].key, key)) return &plans[i];
    *fresh = true;
    Plan* plan = scratch;
    if (*num_plans < capacity) plan = &plans[(*num_plans)++];
    else (*uncached)++;
    memset(plan, 0, sizeof(*plan));
    plan->key = key;
    return plan;
}

static inline GemmPlan* gemm_get_plan(GemmContext* ctx, const GemmPlanKey& key, const void* bias, const void* aux,
                                      int64_t aux_ld, GemmPlan* scratch) {
    bool fresh;
    GemmPlan* plan = gemm_plan_slot(ctx->plans, &ctx->num_plans, GEMM_PLAN_CACHE_SIZE, key, gemm_key_equal, scratch,
                                    &ctx->uncached_calls, &fresh);
    if (fresh) gemm_plan_build(ctx, plan, bias, aux, aux_ld);
    return plan;
}

// D (m x n, column-major) = op(A) · op(B) [+ C if accumulate], with `epilogue`. Returns false (and does
// nothing) if cuBLASLt has no algorithm for it.
static inline bool gemm_cublaslt(GemmContext* ctx, void* D, const void* A, const void* B, int32_t transa, int32_t transb,
                                 int64_t m, int64_t n, int64_t k, bool accumulate, uint32_t epilogue, const void* bias,
                                 const void* aux, int64_t aux_ld, cublasStatus_t* status = NULL) {
    GemmPlanKey key;
    memset(&key, 0, sizeof(key));
    key.m = m; key.n = n; key.k = k;
    key.transa = transa; key.transb = transb;
    key.epilogue = epilogue;
    key.accumulate = accumulate ? 1 : 0;
    key.align = gemm_align_class(A) | gemm_align_class(B) << 3 | gemm_align_class(D) << 6 |
                gemm_align_class(gemm_epilogue_has_bias(epilogue) ? bias : NULL) << 9 |
                gemm_align_class(gemm_epilogue_has_aux(epilogue) ? aux : NULL) << 12;
    GemmPlan scratch;
    memset(&scratch, 0, sizeof(scratch));
    GemmPlan* plan = gemm_get_plan(ctx, key, bias, aux, aux_ld, &scratch);
    if (!plan->found) {
        if (status) *status = plan->status;
        gemm_plan_destroy(&scratch);
        return false;
    }
    if (gemm_epilogue_has_bias(epilogue))
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (gemm_epilogue_has_aux(epilogue))
        cublasCheck(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    if (!plan->tune.done) {  // first call of this plan: choose among the candidates on these operands (not the scratch plan)
        const size_t d_bytes = (size_t)m * n * sizeof(floatX);
        // GELU_AUX(_BIAS) also writes the pre-activation into aux (ld m): its bits must match too
        const bool aux_out = epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        const GemmTuneLaunch L = {ctx->handle, plan->desc, plan->a, plan->b, plan->d, A, B, D, d_bytes, accumulate,
                                  aux_out ? (void*)aux : NULL, aux_out ? d_bytes : 0, ctx->workspace, ctx->workspace_size,
                                  ctx->stream};
        gemm_tune_first_launch(&plan->tune, ctx->autotune && plan != &scratch, L, &plan->algo, &plan->workspace);
    }
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasCheck(cublasLtMatmul(ctx->handle, plan->desc, &alpha, A, plan->a, B, plan->b, &beta, D, plan->d, D, plan->d,
                               &plan->algo, ctx->workspace, ctx->workspace_size, ctx->stream));
    plan->uses++;
    gemm_plan_destroy(&scratch);
    return true;
}

static inline const char* gemm_compute_type_name(cublasComputeType_t t) {
    switch (t) {
        case CUBLAS_COMPUTE_32F: return "32F";
        case CUBLAS_COMPUTE_32F_FAST_16BF: return "32F_FAST_16BF";
        case CUBLAS_COMPUTE_32F_FAST_16F: return "32F_FAST_16F";
        case CUBLAS_COMPUTE_32F_FAST_TF32: return "32F_FAST_TF32";
        default: return "other";
    }
}

static inline void gemm_no_algorithm(const char* fn, const char* what, int N, int C, int OC, uint32_t epilogue,
                                     cublasStatus_t status) {
    fprintf(stderr, "error: %s: cuBLASLt (%s) has no algorithm for %s with N=%d C=%d OC=%d, epilogue %s (heuristic: %s)\n",
            fn, GEMM_BACKEND_NAME, what, N, C, OC, gemm_epilogue_name(epilogue), cublasLtGetStatusName(status));
    exit(EXIT_FAILURE);
}

// Print one line per cached plan: the GEMM (column-major m, n, k, ops, beta, epilogue, alignment code
// in octal with one digit per pointer in the order aux, bias, D, B, A, digit d meaning 16 << d bytes)
// and the algorithm cuBLASLt chose: algorithm id, tile id (cublasLtMatmulTile_t), stages id
// (cublasLtMatmulStages_t), split-K count and reduction scheme (cublasLtReductionScheme_t), cluster
// shape id, numerical implementation (MMA kind, accumulator and input types), workspace, waves, uses.
// The configuration of a cuBLASLt algorithm that the plan printouts show (best effort: fields cuBLASLt
// does not report stay 0).
struct GemmAlgoConfig {
    int32_t id, splitk;
    uint32_t tile, stages, red;
};
static inline GemmAlgoConfig gemm_algo_config(const cublasLtMatmulAlgo_t* algo) {
    GemmAlgoConfig a = {};
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &a.id, sizeof(a.id), &w);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &a.tile, sizeof(a.tile), &w);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &a.stages, sizeof(a.stages), &w);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &a.splitk, sizeof(a.splitk), &w);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &a.red, sizeof(a.red), &w);
    return a;
}

void gemm_context_print_plans(const GemmContext* ctx, FILE* f) {
    fprintf(f, "GEMM plans (%s, compute type %s, %d cached, %llu heuristic queries, %llu uncached calls):\n", GEMM_BACKEND_NAME,
            gemm_compute_type_name(ctx->compute_type), ctx->num_plans, ctx->heuristic_queries, ctx->uncached_calls);
    for (int i = 0; i < ctx->num_plans; i++) {
        const GemmPlan& p = ctx->plans[i];
        fprintf(f, "  m=%-6lld n=%-6lld k=%-6lld op=%c%c beta=%d %-13s align=%05o ", (long long)p.key.m, (long long)p.key.n,
                (long long)p.key.k, p.key.transa == CUBLAS_OP_T ? 'T' : 'N', p.key.transb == CUBLAS_OP_T ? 'T' : 'N',
                p.key.accumulate, gemm_epilogue_name(p.key.epilogue), p.key.align);
        if (!p.found) {
            fprintf(f, "no algorithm (heuristic: %s; unfused fallback)\n", cublasLtGetStatusName(p.status));
            continue;
        }
        const GemmAlgoConfig a = gemm_algo_config(&p.algo);
        uint16_t cluster = 0;
        uint64_t impl = 0;
        size_t w = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster), &w);
        cublasLtMatmulAlgoCapGetAttribute(&p.algo, CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS, &impl, sizeof(impl), &w);
        const uint64_t op = impl & CUBLASLT_NUMERICAL_IMPL_FLAGS_OP_TYPE_MASK;
        const uint64_t acc = impl & CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_TYPE_MASK;
        const uint64_t in = impl & CUBLASLT_NUMERICAL_IMPL_FLAGS_OP_INPUT_TYPE_MASK;
        gemm_tune_describe(p.tune, f);
        fprintf(f, "algo %d tile %u stages %u splitK %d red %u cluster %u %s acc %s in %s%s%s%s ws %zu KiB waves %.2f uses %llu\n",
                a.id, a.tile, a.stages, a.splitk, a.red, (unsigned)cluster,
                op == CUBLASLT_NUMERICAL_IMPL_FLAGS_HMMA ? "HMMA" : op == CUBLASLT_NUMERICAL_IMPL_FLAGS_FMA ? "FMA" : "other",
                acc == CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_32F ? "32F" : acc == CUBLASLT_NUMERICAL_IMPL_FLAGS_ACCUMULATOR_16F ? "16F" : "other",
                in == CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16BF ? "16BF" : in == CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_16F ? "16F"
                : in == CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_32F ? "32F" : in == CUBLASLT_NUMERICAL_IMPL_FLAGS_INPUT_TF32 ? "TF32" : "other",
                p.reduction_mask == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE ? "" : " (any reduction scheme allowed)",
                p.compute_type == ctx->compute_type ? "" : " compute ", p.compute_type == ctx->compute_type ? "" : gemm_compute_type_name(p.compute_type),
                p.workspace >> 10, p.waves, p.uses);
    }
}


// One line on what GEMM tuning did this run (nothing when no plan was tuned): plans tuned, how many run
// another algorithm than cuBLASLt's first answer, and the time their calls saved at the tuning's measured
// medians (each plan's (first answer - chosen) x its calls).
static inline void gemm_tune_report(const GemmContext* ctx, FILE* f) {
    GemmTuneTotals t;
    for (int i = 0; i < ctx->num_plans; i++) t.add(ctx->plans[i].tune, ctx->plans[i].uses);
    t.print(f, GEMM_BACKEND_NAME);
}

// One line on the compute type: requested, and how many cached GEMM plans fell back to 32F
// (SF16_TRUE_FORWARD asks for CUBLAS_COMPUTE_32F_FAST_16BF; cuBLASLt may refuse it for some shapes).
static inline void gemm_compute_summary(const GemmContext* ctx, char* out, size_t n) {
    int fallback = 0;
    for (int i = 0; i < ctx->num_plans; i++) fallback += ctx->plans[i].compute_type != ctx->compute_type;
    snprintf(out, n, "GEMM compute type %s requested; %d of %d GEMM plans use it%s", gemm_compute_type_name(ctx->compute_type),
             ctx->num_plans - fallback, ctx->num_plans, fallback ? " (the others fell back to CUBLAS_COMPUTE_32F)" : "");
}

