// gemm.cuh - the GEMM front of the trainer: matmul_forward / matmul_backward for every linear layer.
//
// Math (train_gpt2.c matmul_forward / matmul_backward). All tensors row-major; a linear layer has
// weight (OC, C) and bias (OC); N = B*T rows:
//   forward    out (N, OC)     = inp (N, C) · weightᵀ + bias                 (overwrite)
//              with pre_gelu:    pre_gelu = inp·weightᵀ + bias,  out = gelu_tanh(pre_gelu)
//   backward   dinp (N, C)     = dout (N, OC) · weight                       (overwrite)
//              with pre_gelu:    dinp = (dout·weight) ∘ gelu_tanh'(pre_gelu)  (pre_gelu is the
//                                pre-activation of this layer's *input*: the upstream GELU is fused here)
//              dweight (OC, C) += doutᵀ · inp                                 (accumulate, beta = 1)
//              dbias (OC)      += Σ_n dout[n, :]                              (accumulate)
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))) as in train_gpt2.c gelu_forward.
// The CPU reference accumulates into dinp; the GPU trainer overwrites it (each activation gradient
// has exactly one producer there), which saves a read and a zeroing pass.
//
// Backends. Callers see only matmul_forward / matmul_backward and a GemmContext. The base backend is
// cuBLASLt in the build's floatX (BF16, FP16 or FP32 storage, fp32 accumulation). The FP8 and TCFP-12
// builds attach a low-precision backend (llmc/modes/lowp/gemm_lowp.cuh) through ctx->lowp: the front offers it
// every linear layer first, and it either computes the product (without GELU) or declines (warm-up
// steps, the LM head, shapes it cannot run), in which case the base backend does. The front keeps what
// is backend-independent: argument checks, GELU / GELU' and the SF16 boundary after the product, and
// the deterministic dbias.
//
// cuBLASLt mapping. cuBLASLt is column-major; a row-major (R, K) buffer is a column-major (K, R)
// matrix with leading dimension K, i.e. its transpose. So every product is computed transposed:
//   forward  outᵀ (OC, N)  = W (OC, C)        · inpᵀ (C, N)    A = weight (op T), B = inp (op N)
//   dinp     dinpᵀ (C, N)  = Wᵀ (C, OC)       · doutᵀ (OC, N)  A = weight (op N), B = dout (op N)
//   dweight  dWᵀ (C, OC)  += inpᵀ (C, N)      · dout (N, OC)   A = inp (op N),    B = dout (op T)
// The bias is a vector along D's rows (OC) as CUBLASLT_EPILOGUE_BIAS wants; GELU_AUX(_BIAS) stores
// the pre-activation into the aux matrix (same layout as D, ld = OC); DGELU reads it (ld = C).
//
// Determinism. cuBLAS documents bit-wise reproducible results for a fixed algorithm on the same GPU
// model and toolkit when one stream uses the workspace; the context owns its workspace and stream,
// and the algorithm for a given (shape, transposes, epilogue, beta, pointer alignments) is chosen
// once and cached, so repeated calls run the same kernel. Split-K reduction schemes are restricted
// to CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE (plus "no split"): partial products are kept in fp32 in
// the workspace and reduced in a separate, ordered step. INPLACE (reduces through the output buffer,
// serialized by counters) and OUTPUT_TYPE (partials stored in floatX) are documented as ordered too,
// but both round the partial sums to floatX, which breaks the promise of fp32 accumulation; they are
// allowed only if the heuristic finds nothing else (reported by gemm_context_print_plans). dbias is
// not taken from cuBLASLt's BGRADB epilogue (it overwrites, in floatX, with an undocumented reduction
// order) but from gemm_dbias_* below: per-block fp32 partials, then a fixed-order finish.
//
// Boundaries. cuBLASLt stores `out` and `pre_gelu` itself, so boundary_value<MATMUL_OUT> (identity
// in the plain builds) cannot be applied on the fused path; the unfused GELU kernel applies
// boundary_value<GELU_OUT> to its output. So the SF16 MATMUL_OUT pass lives here (with GELU unfused),
// and so does the TensorCast build's MATMUL_OUT cast (boundary_tensor_cast on ctx->tcast, chosen at run
// time), nowhere else. The TensorCast operand casts (--cast-gemm) are a backend (llmc/modes/tcast/gemm_tcast.cuh).
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <cublasLt.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"

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
};

struct GemmContext;

// A low-precision backend (llmc/modes/lowp/gemm_lowp.cuh): returns true when it computed the product itself.
//   forward:  y (N, OC) = inp (N, C) · weightᵀ + bias (overwrite)
//   backward: dinp (N, C) = dout · weight (overwrite; skipped if NULL) and dweight (OC, C) += doutᵀ · inp
//             (skipped if NULL); may also do dbias (OC) += column sums of dout (then sets *dbias_done)
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
// The elementwise producers a backend may take over (defer): GELU: out = gelu_tanh(pre);
// DGELU: out = out * gelu_tanh'(pre) (out holds dout · weight on entry).
enum GemmDefer { GEMM_DEFER_NONE = 0, GEMM_DEFER_GELU = 1, GEMM_DEFER_DGELU = 2 };

struct GemmLowpBackend {
    void* state;
    const char* name;
    bool (*forward)(GemmContext* ctx, floatX* y, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C, int OC);
    bool (*backward)(GemmContext* ctx, floatX* dinp, floatX* dweight, floatX* dbias, bool* dbias_done, const floatX* dout,
                     const floatX* inp, const floatX* weight, int N, int C, int OC);
    unsigned int* (*amax_slot)(GemmContext* ctx, const void* tensor, size_t n);
    bool (*keeps_input)(GemmContext* ctx, const floatX* weight, int N);
    bool (*defer)(GemmContext* ctx, GemmDefer kind, floatX* out, const floatX* pre, int rows, int cols);
    int keeps_inputs;                    // 1: keeps_input holds for every layer it runs (after its warm-up)
    void (*report)(GemmContext* ctx, FILE* f);  // end-of-run counts (may be NULL)
    void (*destroy)(GemmContext* ctx);   // frees the backend (gemm_context_free calls it)
};

struct GemmContext {
    GemmLowpBackend* lowp;               // NULL: every GEMM on the base backend
    TcastRuntime* tcast;                 // TensorCast build: the cast plan (MATMUL_OUT casts); NULL otherwise
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
#if defined(SF16_TRUE_FORWARD)
    return CUBLAS_COMPUTE_32F_FAST_16BF;  // the seed's true-forward compute mode (fp32 accumulation, BF16 products)
#else
    return CUBLAS_COMPUTE_32F;
#endif
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

// The best algorithm for D = op(A) op(B) (C = D) under the given workspace, split-K reduction schemes and
// minimum pointer alignments (bytes; A, B, and C = D): one cublasLtMatmulAlgoGetHeuristic query. Returns its
// status; *count is the number of results (0 or 1). Shared by the BF16 and the FP8 plan caches.
static inline cublasStatus_t gemm_heuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                            cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d, uint64_t workspace,
                                            uint32_t reduction_mask, uint32_t align_a, uint32_t align_b, uint32_t align_d,
                                            cublasLtMatmulHeuristicResult_t* result, int* count) {
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction_mask,
                                                     sizeof(reduction_mask)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
    memset(result, 0, sizeof(*result));
    *count = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, d, d, pref, 1, result, count);
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

    cublasLtMatmulHeuristicResult_t result;
    int count = 0;
    ctx->heuristic_queries++;
    cublasStatus_t st = gemm_heuristic(ctx->handle, plan->desc, plan->a, plan->b, plan->d, ctx->workspace_size, reduction_mask,
                                       gemm_align_bytes(key.align & 7), gemm_align_bytes((key.align >> 3) & 7),
                                       gemm_align_bytes((key.align >> 6) & 7), &result, &count);
    // "No algorithm" comes back as NOT_SUPPORTED, as SUCCESS with count 0, or (for some epilogue / type
    // combinations) as INVALID_VALUE: all three mean "plan without it"; the status is kept for messages.
    plan->status = st == CUBLAS_STATUS_SUCCESS && count > 0 ? result.state : st;
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
        (st == CUBLAS_STATUS_SUCCESS && (count == 0 || result.state != CUBLAS_STATUS_SUCCESS)))
        return false;
    cublasCheck(st);
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

// ------------------------------------------------------------------------------------------------
// Kernels of the front: unfused GELU / GELU' and the deterministic bias gradient

#define GEMM_GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x³). The sigmoid
// form has no cancellation for negative x and needs only expf: with --use_fast_math tanhf becomes
// tanh.approx.f32 (~2^-11 relative), expf stays within a few fp32 ulp. exp overflow gives the right
// limits (x / inf = -0).
__device__ __forceinline__ float gemm_gelu_sigmoid(float x) {  // sigmoid(2u)
    const float u = GEMM_GELU_SCALE * (x + 0.044715f * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

__device__ __forceinline__ float gemm_gelu_tanh(float x) { return x * gemm_gelu_sigmoid(x); }

// d/dx gelu_tanh(x) = s + 2 x s (1 - s) u'(x), s = sigmoid(2u): train_gpt2.c gelu_backward's
// 0.5 (1 + th) + 0.5 x (1 - th²) u' rewritten with th = 2s - 1.
__device__ __forceinline__ float gemm_gelu_tanh_grad(float x) {
    const float s = gemm_gelu_sigmoid(x);
    return s + 2.0f * x * s * (1.0f - s) * GEMM_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

// The stored GELU output of one pre-activation value (the GELU_OUT boundary, then rounded to floatX), and
// the stored GELU' product of one dgrad value g: the one definition of both values, shared by the kernels
// below and the FP8 producers (llmc/kernels/fp8/lowp_producers.cuh), whose codes must match these values bit for bit.
__device__ __forceinline__ floatX gemm_gelu_stored(float pre) { return (floatX)boundary_value<GELU_OUT>(gemm_gelu_tanh(pre)); }
__device__ __forceinline__ floatX gemm_dgelu_stored(float g, float pre) { return (floatX)(g * gemm_gelu_tanh_grad(pre)); }

// out[i] = gelu_tanh(pre[i]) for n_packets 16-byte packets; out passes the GELU_OUT boundary.
// BOUND_PRE (SF16): pre is the raw GEMM output; it first passes the MATMUL_OUT boundary and is stored
// back, so the one kernel is the pre-activation's q115_simulate_kernel and the GELU (one read of pre
// instead of two).
// amax != NULL (gemm_amax_slot): also max |stored value| of out / d as bits into *amax (block_amax_accumulate).
template <bool BOUND_PRE>
__global__ void __launch_bounds__(256) gemm_gelu_forward_kernel(floatX* __restrict__ out, floatX* __restrict__ pre,
                                                                size_t n_packets, unsigned int* __restrict__ amax) {
    unsigned int m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_packets; i += (size_t)gridDim.x * blockDim.x) {
        x128 p = load128(pre + i * x128::size);
        if constexpr (BOUND_PRE) {
            #pragma unroll
            for (int k = 0; k < x128::size; k++) p[k] = (floatX)boundary_value<MATMUL_OUT>((float)p[k]);
            store128(pre + i * x128::size, p);
        }
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) {
            o[k] = gemm_gelu_stored((float)p[k]);
            m = max(m, abs_bits((float)o[k]));
        }
        store128(out + i * x128::size, o);
    }
    if (amax) block_amax_accumulate(amax, m);
}

// d[i] = d[i] * gelu_tanh'(pre[i]) in place, for n_packets 16-byte packets.
__global__ void __launch_bounds__(256) gemm_gelu_backward_kernel(floatX* __restrict__ d, const floatX* __restrict__ pre,
                                                                 size_t n_packets, unsigned int* __restrict__ amax) {
    unsigned int m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_packets; i += (size_t)gridDim.x * blockDim.x) {
        const x128 g = load128cs(d + i * x128::size);
        const x128 p = load128cs(pre + i * x128::size);
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) {
            o[k] = gemm_dgelu_stored((float)g[k], (float)p[k]);
            m = max(m, abs_bits((float)o[k]));
        }
        store128(d + i * x128::size, o);
    }
    if (amax) block_amax_accumulate(amax, m);
}

static inline unsigned int gemm_elementwise_blocks(size_t n_packets) {
    const size_t blocks = ceil_div_sz(n_packets, 256);
    return (unsigned int)(blocks < 65536 ? blocks : 65536);  // grid-stride beyond that
}

// Bias gradient: column sums of dout (N, OC), in two deterministic kernels.
//   1. gemm_dbias_partial_kernel: block (32, GEMM_DBIAS_BLOCK_Y) owns 32 packets of columns
//      (32 * x128::size columns) and one chunk of rows; each thread sums every GEMM_DBIAS_BLOCK_Y-th row
//      of the chunk in row order (16-byte loads), the block adds its GEMM_DBIAS_BLOCK_Y partials in
//      fixed order and writes one fp32 row of partial[chunk][OC].
//   2. gemm_dbias_finish_kernel: per column, thread y sums chunks y, y+8, ... in order, the block adds
//      the 8 results in fixed order, and dbias[o] = floatX(float(dbias[o]) + sum).
// The chunking depends only on (N, OC, floatX): the result is bit-identical on every run and device.
#define GEMM_DBIAS_BLOCK_Y 8
#define GEMM_DBIAS_TARGET_BLOCKS 1024  // enough blocks for ~8 per SM on a 132-SM H100
#define GEMM_DBIAS_MIN_ROWS 64         // rows per chunk at least (GEMM_DBIAS_BLOCK_Y * 8 loads per thread)

__global__ void __launch_bounds__(32 * GEMM_DBIAS_BLOCK_Y)
gemm_dbias_partial_kernel(float* __restrict__ partial, const floatX* __restrict__ dout, int N, int OC, int rows_per_chunk) {
    constexpr int V = x128::size;
    __shared__ float sums[GEMM_DBIAS_BLOCK_Y][32 * V];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col0 = (blockIdx.x * 32 + tx) * V;
    const int row_begin = blockIdx.y * rows_per_chunk;
    const int row_end = min(N, row_begin + rows_per_chunk);
    float acc[V];
    #pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    if (col0 < OC) {
        const floatX* p = dout + (size_t)(row_begin + ty) * OC + col0;
        const size_t step = (size_t)GEMM_DBIAS_BLOCK_Y * OC;
        #pragma unroll 4
        for (int n = row_begin + ty; n < row_end; n += GEMM_DBIAS_BLOCK_Y, p += step) {
            const x128 v = load128cs(p);
            #pragma unroll
            for (int k = 0; k < V; k++) acc[k] += (float)v[k];
        }
    }
    #pragma unroll
    for (int k = 0; k < V; k++) sums[ty][tx * V + k] = acc[k];
    __syncthreads();
    const int t = ty * 32 + tx;
    if (t < 32 * V) {
        const int col = blockIdx.x * 32 * V + t;
        float s = 0.0f;
        #pragma unroll
        for (int y = 0; y < GEMM_DBIAS_BLOCK_Y; y++) s += sums[y][t];
        if (col < OC) partial[(size_t)blockIdx.y * OC + col] = s;
    }
}

__global__ void __launch_bounds__(32 * GEMM_DBIAS_BLOCK_Y)
gemm_dbias_finish_kernel(floatX* __restrict__ dbias, const float* __restrict__ partial, int chunks, int OC) {
    __shared__ float sums[GEMM_DBIAS_BLOCK_Y][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * 32 + tx;
    float s = 0.0f;
    // Unrolled so that eight loads are in flight (the partials sit in L2; one at a time, the loop waited
    // out the L2 latency per chunk: 18 us a call at d12, 1024 chunks). The additions keep their order.
    if (col < OC) {
        #pragma unroll 8
        for (int r = ty; r < chunks; r += GEMM_DBIAS_BLOCK_Y) s += __ldg(partial + (size_t)r * OC + col);
    }
    sums[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && col < OC) {
        float total = 0.0f;
        #pragma unroll
        for (int y = 0; y < GEMM_DBIAS_BLOCK_Y; y++) total += sums[y][tx];
        dbias[col] = (floatX)((float)dbias[col] + total);
    }
}

// Row chunking of the dbias reduction (a pure function of N and OC).
static inline void gemm_dbias_chunks(int N, int OC, int* rows_per_chunk, int* chunks) {
    const int col_blocks = ceil_div(OC, 32 * x128::size);
    const int target = ceil_div(GEMM_DBIAS_TARGET_BLOCKS, col_blocks);
    int rows = ceil_div(N, target);
    rows = rows < GEMM_DBIAS_MIN_ROWS ? GEMM_DBIAS_MIN_ROWS : rows;
    *rows_per_chunk = rows;
    *chunks = ceil_div(N, rows);
}

// Floats of dbias_scratch that matmul_backward needs for (N, OC) when dbias != NULL. An upper bound
// that is monotone in N and in OC (so the value for the largest N and OC covers every smaller layer):
// min(ceil(N / 64), GEMM_DBIAS_TARGET_BLOCKS * 32 * x128::size / OC + 1) * OC <= 262144 + OC floats for
// BF16/FP16 (1 MiB + 4 * OC bytes), 131072 + OC for FP32.
size_t matmul_dbias_scratch_floats(int N, int OC) {
    const size_t by_rows = (size_t)ceil_div(N, GEMM_DBIAS_MIN_ROWS) * OC;
    const size_t by_blocks = (size_t)GEMM_DBIAS_TARGET_BLOCKS * 32 * x128::size + OC;
    return by_rows < by_blocks ? by_rows : by_blocks;
}

// dbias (OC) += Σ_n dout[n, :], deterministic. scratch: matmul_dbias_scratch_floats(N, OC) floats.
// dbias (OC) += the column sums of partial (chunks, OC) fp32, row-major, added in row order (stage 2 of
// the bias gradient; the FP8 backend's dY quantization makes the partials itself). Deterministic.
static inline void gemm_dbias_finish(floatX* dbias, const float* partial, int chunks, int OC, cudaStream_t stream) {
    gemm_dbias_finish_kernel<<<ceil_div(OC, 32), dim3(32, GEMM_DBIAS_BLOCK_Y), 0, stream>>>(dbias, partial, chunks, OC);
    cudaCheckLaunch();
}

static inline void gemm_dbias_accumulate(floatX* dbias, const floatX* dout, float* scratch, int N, int OC, cudaStream_t stream) {
    int rows, chunks;
    gemm_dbias_chunks(N, OC, &rows, &chunks);
    dim3 block(32, GEMM_DBIAS_BLOCK_Y);
    gemm_dbias_partial_kernel<<<dim3(ceil_div(OC, 32 * x128::size), chunks), block, 0, stream>>>(scratch, dout, N, OC, rows);
    cudaCheckLaunch();
    gemm_dbias_finish(dbias, scratch, chunks, OC, stream);
}

// ------------------------------------------------------------------------------------------------
// Argument checks (host only, no CUDA calls): cuBLASLt and the vector kernels need 16-byte aligned
// pointers and rows whose size in bytes is a multiple of 16; outputs must not overlap inputs.

static inline bool gemm_check_ptr(char* err, size_t err_size, const char* fn, const char* name, const void* p, bool required) {
    if (p == NULL) {
        if (required) snprintf(err, err_size, "%s: %s is NULL", fn, name);
        return !required;
    }
    if ((uintptr_t)p % 16 != 0) {
        snprintf(err, err_size, "%s: %s (%p) is not 16-byte aligned (cuBLASLt and the vector kernels need 16-byte alignment)",
                 fn, name, p);
        return false;
    }
    return true;
}

static inline bool gemm_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
    if (a == NULL || b == NULL) return false;
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + b_bytes && y < x + a_bytes;
}

static inline bool gemm_check_dims(char* err, size_t err_size, const char* fn, int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) {
        snprintf(err, err_size, "%s: N=%d C=%d OC=%d must be positive", fn, N, C, OC);
        return false;
    }
    if ((C * sizeof(floatX)) % 16 != 0 || (OC * sizeof(floatX)) % 16 != 0) {
        snprintf(err, err_size, "%s: C=%d and OC=%d must be multiples of %d (rows of 16-byte multiples for %s)", fn, C, OC,
                 (int)(16 / sizeof(floatX)), PRECISION_MODE_NAME);
        return false;
    }
    return true;
}

// true if matmul_forward can run with these arguments; otherwise a message "matmul_forward: ..." in err.
bool matmul_forward_args_ok(char* err, size_t err_size, const floatX* out, const floatX* inp, const floatX* weight,
                            const floatX* bias, int N, int C, int OC, const floatX* pre_gelu) {
    const char* fn = "matmul_forward";
    if (!gemm_check_dims(err, err_size, fn, N, C, OC)) return false;
    if (!gemm_check_ptr(err, err_size, fn, "out", out, true) || !gemm_check_ptr(err, err_size, fn, "inp", inp, true) ||
        !gemm_check_ptr(err, err_size, fn, "weight", weight, true) || !gemm_check_ptr(err, err_size, fn, "bias", bias, false) ||
        !gemm_check_ptr(err, err_size, fn, "pre_gelu", pre_gelu, false))
        return false;
    const size_t out_b = (size_t)N * OC * sizeof(floatX), inp_b = (size_t)N * C * sizeof(floatX),
                 w_b = (size_t)OC * C * sizeof(floatX), b_b = (size_t)OC * sizeof(floatX);
    if (gemm_overlap(out, out_b, inp, inp_b) || gemm_overlap(out, out_b, weight, w_b) || gemm_overlap(out, out_b, bias, b_b) ||
        gemm_overlap(out, out_b, pre_gelu, out_b) || gemm_overlap(pre_gelu, out_b, inp, inp_b) ||
        gemm_overlap(pre_gelu, out_b, weight, w_b) || gemm_overlap(pre_gelu, out_b, bias, b_b)) {
        snprintf(err, err_size, "%s: out / pre_gelu overlap an input or each other (in-place GEMMs are not supported)", fn);
        return false;
    }
    return true;
}

// true if matmul_backward can run with these arguments; otherwise a message "matmul_backward: ..." in err.
bool matmul_backward_args_ok(char* err, size_t err_size, const floatX* dinp, const floatX* dweight, const floatX* dbias,
                             const floatX* dout, const floatX* inp, const floatX* weight, const float* dbias_scratch, int N,
                             int C, int OC, const floatX* pre_gelu) {
    const char* fn = "matmul_backward";
    if (!gemm_check_dims(err, err_size, fn, N, C, OC)) return false;
    if (!gemm_check_ptr(err, err_size, fn, "dout", dout, true) || !gemm_check_ptr(err, err_size, fn, "dinp", dinp, false) ||
        !gemm_check_ptr(err, err_size, fn, "dweight", dweight, false) || !gemm_check_ptr(err, err_size, fn, "dbias", dbias, false) ||
        !gemm_check_ptr(err, err_size, fn, "weight", weight, dinp != NULL) ||
        !gemm_check_ptr(err, err_size, fn, "inp", inp, dweight != NULL) ||
        !gemm_check_ptr(err, err_size, fn, "dbias_scratch", dbias_scratch, dbias != NULL) ||
        !gemm_check_ptr(err, err_size, fn, "pre_gelu", pre_gelu, false))
        return false;
    if (pre_gelu != NULL && dinp == NULL) {
        snprintf(err, err_size, "%s: pre_gelu given without dinp", fn);
        return false;
    }
    const size_t dout_b = (size_t)N * OC * sizeof(floatX), inp_b = (size_t)N * C * sizeof(floatX),
                 w_b = (size_t)OC * C * sizeof(floatX), b_b = (size_t)OC * sizeof(floatX);
    const void* ins[4] = {dout, inp, weight, pre_gelu};
    const size_t in_b[4] = {dout_b, inp_b, w_b, inp_b};
    const void* outs[4] = {dinp, dweight, dbias, dbias ? dbias_scratch : NULL};
    const size_t out_b[4] = {inp_b, w_b, b_b, matmul_dbias_scratch_floats(N, OC) * sizeof(float)};
    for (int o = 0; o < 4; o++) {
        for (int i = 0; i < 4; i++)
            if (gemm_overlap(outs[o], out_b[o], ins[i], in_b[i])) {
                snprintf(err, err_size, "%s: an output (dinp / dweight / dbias / dbias_scratch) overlaps an input", fn);
                return false;
            }
        for (int p = o + 1; p < 4; p++)
            if (gemm_overlap(outs[o], out_b[o], outs[p], out_b[p])) {
                snprintf(err, err_size, "%s: dinp / dweight / dbias / dbias_scratch overlap each other", fn);
                return false;
            }
    }
    return true;
}

// ------------------------------------------------------------------------------------------------
// cuBLASLt backend (floatX storage, fp32 accumulation). The FP8 / TCFP-12 backends will provide the
// same three functions; the front below calls only these.

// out (N, OC) = inp · weightᵀ + bias with optional fused GELU (pre_gelu != NULL). Returns false if the
// fused GELU epilogue is unavailable for this case (nothing done); plain and bias GEMMs never return false.
static inline bool gemm_backend_forward(GemmContext* ctx, floatX* out, const floatX* inp, const floatX* weight,
                                        const floatX* bias, int N, int C, int OC, floatX* pre_gelu) {
    uint32_t epilogue;
    if (pre_gelu) epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    else epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const bool ok = gemm_cublaslt(ctx, out, weight, inp, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, false, epilogue, bias, pre_gelu, OC, &st);
    if (!ok && !pre_gelu) gemm_no_algorithm("matmul_forward", "out = inp x weight^T", N, C, OC, epilogue, st);
    return ok;
}

// dinp (N, C) = dout · weight, optionally times gelu'(pre_gelu) in the epilogue. Returns false if the
// fused DGELU epilogue is unavailable (nothing done).
static inline bool gemm_backend_backward_dinp(GemmContext* ctx, floatX* dinp, const floatX* dout, const floatX* weight,
                                              int N, int C, int OC, const floatX* pre_gelu) {
    const uint32_t epilogue = pre_gelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const bool ok = gemm_cublaslt(ctx, dinp, weight, dout, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, false, epilogue, NULL, pre_gelu, C, &st);
    if (!ok && !pre_gelu) gemm_no_algorithm("matmul_backward", "dinp = dout x weight", N, C, OC, epilogue, st);
    return ok;
}

// dweight (OC, C) += doutᵀ · inp.
static inline void gemm_backend_backward_dweight(GemmContext* ctx, floatX* dweight, const floatX* dout, const floatX* inp,
                                                 int N, int C, int OC) {
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (!gemm_cublaslt(ctx, dweight, inp, dout, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, true, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, &st))
        gemm_no_algorithm("matmul_backward", "dweight += dout^T x inp", N, C, OC, CUBLASLT_EPILOGUE_DEFAULT, st);
}

// ------------------------------------------------------------------------------------------------
// The front

// The MATMUL_OUT storage boundary applied in place to n floatX values (n % 8 == 0, 16-byte aligned):
// the seed's q115_simulate_kernel (SF16), identity in plain builds where it is never launched.
__global__ void gemm_boundary_kernel(floatX* x, size_t packets) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < packets; i += (size_t)gridDim.x * blockDim.x) {
        x128 v = load128(x + i * x128::size);
        #pragma unroll
        for (int k = 0; k < x128::size; k++) v[k] = (floatX)boundary_value<MATMUL_OUT>((float)v[k]);
        store128(x + i * x128::size, v);
    }
}

static inline void gemm_boundary_apply(floatX* x, size_t n, cudaStream_t stream) {
    const size_t packets = n / x128::size;
    gemm_boundary_kernel<<<gemm_elementwise_blocks(packets), 256, 0, stream>>>(x, packets);
    cudaCheckLaunch();
}

// One line on the compute type: requested, and how many cached GEMM plans fell back to 32F
// (SF16_TRUE_FORWARD asks for CUBLAS_COMPUTE_32F_FAST_16BF; cuBLASLt may refuse it for some shapes).
static inline void gemm_compute_summary(const GemmContext* ctx, char* out, size_t n) {
    int fallback = 0;
    for (int i = 0; i < ctx->num_plans; i++) fallback += ctx->plans[i].compute_type != ctx->compute_type;
    snprintf(out, n, "GEMM compute type %s requested; %d of %d GEMM plans use it%s", gemm_compute_type_name(ctx->compute_type),
             ctx->num_plans - fallback, ctx->num_plans, fallback ? " (the others fell back to CUBLAS_COMPUTE_32F)" : "");
}


// out = GELU_OUT boundary of gelu_tanh(pre) over n values (n % 8 == 0); BOUND_PRE: pre is the raw GEMM
// output and first passes the MATMUL_OUT boundary, stored back (gemm_gelu_forward_kernel).
// amax: NULL or a gemm_amax_slot for out.
template <bool BOUND_PRE>
static inline void gemm_gelu_apply(floatX* out, floatX* pre, size_t n, cudaStream_t stream, unsigned int* amax = NULL) {
    const size_t packets = n / x128::size;
    gemm_gelu_forward_kernel<BOUND_PRE><<<gemm_elementwise_blocks(packets), 256, 0, stream>>>(out, pre, packets, amax);
    cudaCheckLaunch();
}

// d = d * gelu_tanh'(pre) in place over n values (n % 8 == 0; gemm_gelu_backward_kernel).
// amax: NULL or a gemm_amax_slot for d.
static inline void gemm_dgelu_apply(floatX* d, const floatX* pre, size_t n, cudaStream_t stream, unsigned int* amax = NULL) {
    const size_t packets = n / x128::size;
    gemm_gelu_backward_kernel<<<gemm_elementwise_blocks(packets), 256, 0, stream>>>(d, pre, packets, amax);
    cudaCheckLaunch();
}

// Per-shape choice of the GELU' epilogue (with ctx->fuse_gelu): whether the dinp GEMM of width C (the
// fc-proj layer's input width, 4 x channels) takes the cuBLASLt DGELU epilogue, or is a plain GEMM
// followed by gemm_gelu_backward_kernel. Measured with dev/cuda/matmul.cu on an H100 (cuBLASLt 13.0,
// doc/benchmarks.md "GELU epilogues per shape"): fused wins at C = 3072 (d12, N = 65536: 0.676 vs
// 0.909 ms) and loses at C = 4096 (d24, N = 32768: 0.713 vs 0.661 ms, the heuristic's DGELU kernel
// runs at 386 TFLOP/s against 709 for the plain GEMM). The forward GELU epilogue wins at both (0.616
// vs 0.726, 0.473 vs 0.571 ms), so it stays fused. Numerics: fused, GELU' multiplies the fp32 product,
// one rounding; separate, the product is rounded to floatX first, then multiplied and rounded again.
#define GEMM_DGELU_FUSED_MAX_C 3072
static inline bool gemm_dgelu_fused_for(int C) { return C <= GEMM_DGELU_FUSED_MAX_C; }

// Linear layer forward (train_gpt2.c matmul_forward), on ctx->stream.
//   inp (N, C), weight (OC, C), bias (OC) or NULL; row-major floatX.
//   pre_gelu == NULL: out (N, OC) = inp · weightᵀ + bias                          (overwrites out)
//   pre_gelu != NULL: pre_gelu (N, OC) = inp · weightᵀ + bias, out = gelu_tanh(pre_gelu)  (overwrites both)
// fp32 accumulation, one rounding to floatX per stored value. GELU: fused in the cuBLASLt epilogue
// (GELU_AUX_BIAS / GELU_AUX) when ctx->fuse_gelu, OC % 8 == 0 and cuBLASLt has an algorithm, else a
// GEMM into pre_gelu followed by gemm_gelu_forward_kernel (out = gelu of the rounded pre_gelu).
// Requirements: every pointer 16-byte aligned, C and OC multiples of 16 / sizeof(floatX), out and
// pre_gelu not overlapping the inputs; violations end the program with "error: matmul_forward: ...".
// No scratch. Deterministic (fixed cached algorithm per shape).
void matmul_forward(GemmContext* ctx, floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C,
                    int OC, floatX* pre_gelu) {
    char err[256];
    if (!matmul_forward_args_ok(err, sizeof(err), out, inp, weight, bias, N, C, OC, pre_gelu)) {
        fprintf(stderr, "error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    // SF16: the GEMM output (after bias) is quantized as stored, before anything reads it; so GELU is
    // never fused into the cuBLASLt epilogue: it must read the quantized pre-activation (and quantizes its
    // own output). With GELU the quantization pass and the GELU are one kernel.
    // TensorCast (run time): the output is cast as stored, a pass of its own, so GELU is not fused either.
    constexpr bool bound = !boundary_is_identity<MATMUL_OUT>();
    const bool cast = boundary_tensor_active(ctx->tcast, MATMUL_OUT);
    floatX* y = pre_gelu ? pre_gelu : out;
    const size_t n = (size_t)N * OC;
    // the low-precision backend (if any and if it takes this layer) computes y without GELU
    const bool done = ctx->lowp && ctx->lowp->forward(ctx, y, inp, weight, bias, N, C, OC);
    if (!done && !bound && !cast && pre_gelu && ctx->fuse_gelu && OC % 8 == 0 &&
        gemm_backend_forward(ctx, out, inp, weight, bias, N, C, OC, pre_gelu))
        return;  // GELU fused into the cuBLASLt epilogue
    if (!done) gemm_backend_forward(ctx, y, inp, weight, bias, N, C, OC, NULL);
    if (cast) boundary_tensor_cast(ctx->tcast, MATMUL_OUT, boundary_weight_id(ctx->tcast, weight), y, N, OC, ctx->stream);
    // the GELU output is the next layer's input (fcproj): the backend that ran this GEMM may compute it in its
    // quantization of that input (defer), else its amax comes with it when the backend wants it
    if (pre_gelu) {
        if (done && !bound && !cast && gemm_lowp_defer(ctx, GEMM_DEFER_GELU, out, pre_gelu, N, OC)) return;
        gemm_gelu_apply<bound>(out, pre_gelu, n, ctx->stream, gemm_amax_slot(ctx, out, n));
    } else if (bound) gemm_boundary_apply(y, n, ctx->stream);
}

// The LM head as the training step's fused classifier consumes it: out (N, OC) = inp · weightᵀ with
// no MATMUL_OUT pass, because that consumer reads every logit through boundary_value<MATMUL_OUT> and
// boundary_value<LOGITS> (llmc/kernels/fused_classifier.cuh) and then overwrites the logits: the values it uses
// are those a stored boundary would give, without a pass over the N x Vp logits (4.5 ms of a d12 SF16
// step on an H100). Forward-only callers that read the logits themselves (sampling, the tests) use
// matmul_forward. Same requirements and errors as matmul_forward (no bias, no GELU).
void matmul_forward_logits(GemmContext* ctx, floatX* out, const floatX* inp, const floatX* weight, int N, int C, int OC) {
    char err[256];
    if (!matmul_forward_args_ok(err, sizeof(err), out, inp, weight, NULL, N, C, OC, NULL)) {
        fprintf(stderr, "error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    if (ctx->lowp && ctx->lowp->forward(ctx, out, inp, weight, NULL, N, C, OC)) return;
    gemm_backend_forward(ctx, out, inp, weight, NULL, N, C, OC, NULL);
}

// Linear layer backward (train_gpt2.c matmul_backward), on ctx->stream. Row-major floatX:
// dout (N, OC), inp (N, C), weight (OC, C); pre_gelu (N, C) or NULL.
//   dinp (N, C)     = dout · weight                   (OVERWRITES; skipped if dinp == NULL)
//                     with pre_gelu: dinp = (dout · weight) ∘ gelu_tanh'(pre_gelu), where pre_gelu is the
//                     pre-activation whose GELU produced `inp` (fused DGELU epilogue when ctx->fuse_gelu,
//                     gemm_dgelu_fused_for(C),
//                     C % 8 == 0 and available; else the rounded product is multiplied by a separate kernel)
//   dweight (OC, C) += doutᵀ · inp                    (ACCUMULATES, beta = 1; skipped if NULL)
//   dbias (OC)      += Σ_n dout[n, :]                 (ACCUMULATES; skipped if NULL)
// Scratch: dbias_scratch needs matmul_dbias_scratch_floats(N, OC) floats when dbias != NULL (at most
// 1 MiB + 4 * OC bytes; may be NULL otherwise); its contents are dead after the call.
// fp32 accumulation everywhere; dweight and dbias are rounded to floatX once per call (after the +=).
// Same requirements as matmul_forward ("error: matmul_backward: ..."). Deterministic: fixed cached
// cuBLASLt algorithms, and the dbias reduction uses a fixed chunking and summation order.
void matmul_backward(GemmContext* ctx, floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                     const floatX* weight, float* dbias_scratch, int N, int C, int OC, const floatX* pre_gelu) {
    char err[256];
    if (!matmul_backward_args_ok(err, sizeof(err), dinp, dweight, dbias, dout, inp, weight, dbias_scratch, N, C, OC, pre_gelu)) {
        fprintf(stderr, "error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    // The low-precision backend (if any and if it takes this layer) computes dinp without GELU' and dweight.
    bool dbias_done = false;
    const bool lowp = ctx->lowp && ctx->lowp->backward(ctx, dinp, dweight, dbias, &dbias_done, dout, inp, weight, N, C, OC);
    if (dinp) {
        const bool fused = !lowp && pre_gelu != NULL && ctx->fuse_gelu && gemm_dgelu_fused_for(C) && C % 8 == 0 &&
                           gemm_backend_backward_dinp(ctx, dinp, dout, weight, N, C, OC, pre_gelu);
        if (!fused) {
            if (!lowp) gemm_backend_backward_dinp(ctx, dinp, dout, weight, N, C, OC, NULL);
            // dinp is the fc layer's dout next: the backend may compute the GELU' product in its quantization
            if (pre_gelu && !(lowp && gemm_lowp_defer(ctx, GEMM_DEFER_DGELU, dinp, pre_gelu, N, C))) {
                const size_t n = (size_t)N * C;
                gemm_dgelu_apply(dinp, pre_gelu, n, ctx->stream, gemm_amax_slot(ctx, dinp, n));  // dinp: the fc layer's dout next
            }
        }
    }
    if (dweight && !lowp) gemm_backend_backward_dweight(ctx, dweight, dout, inp, N, C, OC);
    if (dbias && !dbias_done) gemm_dbias_accumulate(dbias, dout, dbias_scratch, N, OC, ctx->stream);
}
