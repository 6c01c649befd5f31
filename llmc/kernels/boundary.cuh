// boundary.cuh - what a forward kernel calls on a value it is about to store (or feed to the next stage)
// at a named tensor boundary (llmc/core/boundary_sites.h), and what the model calls on a stored tensor:
// the one place where a storage-boundary mode acts. Kernels never test which mode is built.
//
// Per value: boundary_value<Site>(v) is the mode's hook (ModeBoundary in llmc/modes/<mode>/traits.cuh,
// selected by llmc/core/precision.h): the identity in most modes (the kernel then casts to floatX),
// the Q1.15 quantize-dequantize in SF16 (doc/SF16.md). Backward kernels call it only to recompute a
// forward value exactly (the attention backward re-forms the quantized scores and P); gradients
// themselves are never quantized. Count = false compiles a mode's statistics out of the hook (the
// attention kernels' training instantiations; llmc/modes/sf16/traits.cuh says why).
//
// Per tensor: a TensorCast cast of a tile-scaled datatype needs the whole tile before any element can be
// quantized, so it cannot be a per-value hook inside the producing kernel: it is a pass over the stored
// tensor right after the kernel that wrote it (boundary_tensor_cast, called by llmc/model/model.cuh and
// the GEMM front), through the BoundaryCasts a mode attaches to the model at run time (doc/TCAST.md 5.1;
// llmc/modes/tcast/). Without one (NULL: every other build, and an empty --cast plan) the calls do nothing.
// Two exceptions, which a mode may run as one kernel each with the same bits (doc/TCAST.md 5.5): the fc layer's
// GELU, whose input's and output's casts and the GELU itself are one call (boundary_gelu); and the residual +
// LayerNorm after a projection GEMM touches three site tensors (the projection output x, the
// residual, the LayerNorm output); a mode may offer to run it with their casts in one kernel
// (BoundaryCasts::residual_layernorm, doc/TCAST.md 5.5): the model then tells the GEMM front that the
// projection's MATMUL_OUT cast is left to that kernel (GemmContext::out_cast_by_reader). And the training step's
// logits, which only the fused classifier reads: a mode may apply their two casts (the LM head's MATMUL_OUT, then
// LOGITS) to the rows the classifier stages (BoundaryCasts::classifier); the forward then leaves out those passes.
#pragma once

#include <stddef.h>
#include <type_traits>

#include "llmc/core/cuda_common.cuh"
#include "llmc/core/boundary_sites.h"

// True when boundary_value<Site> is the identity in this build (lets callers skip whole passes,
// e.g. the post-GEMM quantization kernel, or choose the single-pass attention forward).
template <BoundarySite Site>
__host__ __device__ constexpr bool boundary_is_identity() {
    return ModeBoundary::kIdentity;
}

// True while the mode's boundary statistics are being counted (SF16 --q115-stats; false elsewhere).
static inline bool boundary_stats_active() { return ModeBoundary::stats_active(); }

// Launch helper for kernels that read or write every element through a hook: calls f(std::true_type{}) while the
// statistics are being counted, else f(std::false_type{}), so that the caller instantiates its kernel with
// Count = decltype(arg)::value. A training kernel then carries no per-element counting branch: switched off, that
// branch still made the SF16 classifier 1.25x slower (doc/SF16.md). The counting form is compiled only where the
// boundary is not the identity.
template <class F>
static inline void boundary_with_count(F&& f) {
    if constexpr (!ModeBoundary::kIdentity) {
        if (boundary_stats_active()) {
            f(std::true_type{});
            return;
        }
    }
    f(std::false_type{});
}

// Value v (fp32 in registers) as it crosses boundary `Site`. Count = false compiles the statistics
// out entirely (see the header comment).
template <BoundarySite Site, bool Count = true>
__device__ __forceinline__ float boundary_value(float v) {
    return ModeBoundary::template value<Site, Count>(v);
}

// The boundary in units of the mode's grid, for kernels that keep a quantity scaled (the attention's scores and
// probabilities, attention_tile.cuh): boundary_value_units<Site>(v) * boundary_unit() == boundary_value<Site>(v)
// exactly (SF16: the Q1.15 code as a float and 2^-15, one instruction fewer; identity modes: v and 1).
// boundary_scaled_value_units<Site, Count, kPow2>(raw, scale) is boundary_value_units<Site, Count>(raw * scale), where
// the caller promises with kPow2 that scale is a power of two, which lets a mode fold it into its rounding.
__host__ __device__ constexpr float boundary_unit() { return ModeBoundary::kUnit; }
// A bound on |boundary_value_units<Site>(v)| for every non-NaN v (SF16: 2^15, the Q1.15 range in units), +inf where the
// mode's hook leaves values unbounded. The two-pass attention forward's statistics pass uses it as a fixed row max.
__host__ __device__ constexpr float boundary_max_units() { return ModeBoundary::kMaxUnits; }
template <BoundarySite Site, bool Count = true>
__device__ __forceinline__ float boundary_value_units(float v) {
    return ModeBoundary::template value_units<Site, Count>(v);
}
template <BoundarySite Site, bool Count, bool kPow2>
__device__ __forceinline__ float boundary_scaled_value_units(float raw, float scale) {
    return ModeBoundary::template scaled_value_units<Site, Count, kPow2>(raw, scale);
}

// A floatX value v read from storage as it crosses the boundaries Sites... in order (e.g. a logit the LM head stored,
// read by the classifier: MATMUL_OUT, then LOGITS), only the last one counted in the mode's statistics: the hooks one
// after the other, which a mode may compute in one step on stored values (SF16: one Q1.15 rounding). v must be a
// floatX value (SF16's argument for the shortcut: llmc/modes/sf16/traits.cuh).
template <BoundarySite... Sites>
__device__ __forceinline__ float boundary_stored_value(float v) {
    return ModeBoundary::template stored_value<Sites...>(v);
}
// boundary_stored_value<Sites...>(v) in units of the mode's grid (boundary_unit(); SF16: the Q1.15 code as a float, one
// product fewer): boundary_stored_value_units<Count, Sites...>(v) * boundary_unit() == boundary_stored_value<Sites...>(v)
// exactly. Count = false compiles the statistics out (a kernel that reads every element through it, the classifier,
// is instantiated twice, as the attention kernels are: see the header comment).
template <bool Count, BoundarySite... Sites>
__device__ __forceinline__ float boundary_stored_value_units(float v) {
    return ModeBoundary::template stored_value_units<Count, Sites...>(v);
}

// ------------------------------------------------------------------------------------------------
// Whole-tensor casts, attached at run time (struct filled by the mode that owns it).

// A tensor id (in the stochastic-rounding seeds of the casts) that names no tensor: "this call does not cast it".
#define BOUNDARY_NO_ID (~0ull)

// Which of the trainer's two GELU kernels computes a GELU output: the GEMM front's unfused GELU
// (gemm_kernels.cuh gemm_gelu_stored: the fc forward with -ge 1) or gelu.cuh's gelu_forward (the fc forward with
// -ge 0, and the -r 1 recomputation in the backward). They compute the same function by different formulas, so
// their stored values differ in the last bit now and then; a cast fused with GELU computes the one it replaces.
enum BoundaryGelu { BOUNDARY_GELU_FRONT = 0, BOUNDARY_GELU_KERNEL = 1 };
// One residual + LayerNorm of the forward with the boundary casts of the tensors around it
// (BoundaryCasts::residual_layernorm): residual = res_in + x and out = LayerNorm(residual) * weight + bias with
// its row statistics mean / rstd, as fused_residual_layernorm_forward (llmc/kernels/layernorm.cuh) computes
// them, where x is the MATMUL_OUT tensor of the linear layer whose weight has the seed id x_id
// (boundary_weight_id), the residual a RESIDUAL_OUT tensor (seed id res_id) and out a LAYERNORM_OUT tensor
// (ln_id). (N, C) floatX row-major, mean and rstd (N) fp32; weight, bias (C).
struct BoundaryResidualLn {
    floatX* residual;
    floatX* out;
    float* mean;
    float* rstd;
    const floatX* res_in;
    floatX* x;  // stored uncast by its GEMM (out_cast_by_reader); afterwards x or its cast (scratch)
    const floatX* weight;
    const floatX* bias;
    int N, C;
    unsigned long long x_id, res_id, ln_id;
};

// The training step's classifier (fused_classifier with write_dlogits, llmc/kernels/fused_classifier.cuh) on logits
// the LM head stored uncast (BoundaryCasts::classifier): logits (B*T, Vp) floatX row-major, overwritten with dlogits;
// losses (B*T) fp32; dloss, targets, V as fused_classifier takes them. Seed ids: matmul_id, the LM-head weight's
// (boundary_weight_id) for its MATMUL_OUT cast, and logits_id for the LOGITS cast.
struct BoundaryClassifier {
    floatX* logits;
    float* losses;
    float dloss;
    const int* targets;
    int B, T, V, Vp;
    unsigned long long matmul_id, logits_id;
};

struct BoundaryCasts {
    int site_on[NUM_BOUNDARY_SITES];  // 1: the site's stored tensors are cast
    const floatX* params;             // parameter base: a weight's offset is its layer's id in seeds
    // Cast the stored (rows, cols) floatX tensor x of `site` in place along its rows (the channel
    // dimension); id distinguishes the tensors of one step in the stochastic-rounding seed (a layer or a
    // weight offset). Asynchronous on stream.
    void (*cast)(BoundaryCasts* bc, BoundarySite site, unsigned long long id, floatX* x, size_t rows, size_t cols,
                 cudaStream_t stream);
    // The seed of one attention call's score / probability casts (the attention kernels derive the two
    // sites' random bits from it); the backward passes the forward's, so it recomputes the same casts.
    unsigned long long (*attention_seed)(const BoundaryCasts* bc, unsigned long long id);
    // The fc layer's GELU with the site casts around it (doc/TCAST.md 5.5): for the row-major (rows, cols) floatX
    // pre-activation pre, first pre = MATMUL_OUT cast of pre in place when pre_id != BOUNDARY_NO_ID (its id, the fc
    // weight's offset) and the site is on; then out = GELU(pre) by the kernel `form` (BoundaryGelu), cast by GELU_OUT
    // when out_id != BOUNDARY_NO_ID and that site is on. The same bits as those passes one after the other; one kernel
    // where the data types allow. Asynchronous on stream. Called through boundary_gelu only.
    void (*gelu)(BoundaryCasts* bc, floatX* out, floatX* pre, size_t rows, size_t cols, unsigned long long pre_id,
                 unsigned long long out_id, int form, cudaStream_t stream);
    // Optional (NULL: never offered). Whether residual_layernorm runs a residual + LayerNorm of (N, C) as one
    // kernel with the casts of the sites it touches that bc covers (matmul_out, residual_out, layernorm_out; at
    // least one of them), in the step now issued (not on a statistics step, say). Asked before the GEMM that
    // writes x, whose MATMUL_OUT cast the kernel then takes over.
    bool (*residual_layernorm_fused)(const BoundaryCasts* bc, int N, int C);
    // Runs job (BoundaryResidualLn) with those casts: x's MATMUL_OUT cast before the add reads it, the residual's
    // RESIDUAL_OUT cast before it is stored and normalized, out's LAYERNORM_OUT cast before it is stored: the bits
    // of the passes it replaces (x cast, the fused kernel, the residual cast, the LayerNorm again, out's cast),
    // mean and rstd included. Asynchronous on stream. Called only where residual_layernorm_fused said yes.
    void (*residual_layernorm)(BoundaryCasts* bc, const BoundaryResidualLn& job, cudaStream_t stream);
    // Optional (NULL: never offered). Whether classifier runs the training step's classifier on (N, Vp) logits with the
    // casts of the LM head's output that bc covers (MATMUL_OUT, then LOGITS; at least one of them) applied inside it, in
    // the step now issued (not on a statistics step, say). Asked by the forward, which then leaves out those passes.
    bool (*classifier_fused)(const BoundaryCasts* bc, int N, int Vp);
    // Runs job (BoundaryClassifier) with those casts: the losses and dlogits of the MATMUL_OUT pass, the LOGITS pass and
    // fused_classifier after them, bit for bit. Asynchronous on stream. Called only where classifier_fused said yes.
    void (*classifier)(BoundaryCasts* bc, const BoundaryClassifier& job, cudaStream_t stream);
    // Optional (NULL: never offered). A linear layer's forward whose output's MATMUL_OUT cast bc covers, run by the mode:
    // y = bf16(inp (N, C) . weight (OC, C)^T + bias (OC or NULL)), all row-major floatX; without GELU (pre NULL) out =
    // the MATMUL_OUT cast of y with the seed id w_id (boundary_weight_id), as boundary_tensor_cast would take it; with
    // GELU, pre = that cast of y and out = GELU(pre) with its GELU_OUT cast (gelu_id; BOUNDARY_NO_ID: none), as
    // boundary_gelu(..., BOUNDARY_GELU_FRONT) after a GEMM into pre. The mode may compute it as one GEMM whose epilogue
    // casts (doc/TCAST.md 5.6). Returns false, having done nothing, where the mode does not take this call (the GEMM
    // front then runs its GEMM and the passes). Asynchronous on stream. Called through boundary_gemm_out only.
    bool (*gemm_out)(BoundaryCasts* bc, floatX* out, floatX* pre, const floatX* inp, const floatX* weight, const floatX* bias, int N,
                     int C, int OC, unsigned long long w_id, unsigned long long gelu_id, cudaStream_t stream);
    void (*destroy)(BoundaryCasts* bc);  // frees what the mode allocated, bc included (gpt2_free calls it)
};

// Whether the attached casts (NULL: none) cast the tensors of `site`.
static inline bool boundary_tensor_active(const BoundaryCasts* bc, BoundarySite site) { return bc && bc->site_on[site]; }

// Cast the stored (rows, cols) tensor x of `site` in place when the attached casts cover the site; else nothing.
static inline void boundary_tensor_cast(BoundaryCasts* bc, BoundarySite site, unsigned long long id, floatX* x, size_t rows,
                                        size_t cols, cudaStream_t stream) {
    if (boundary_tensor_active(bc, site)) bc->cast(bc, site, id, x, rows, cols, stream);
}

// Whether boundary_gelu would cast anything: casts attached with a GELU hook, and pre's MATMUL_OUT (pre_id given) or
// out's GELU_OUT (out_id given) site on.
static inline bool boundary_gelu_active(const BoundaryCasts* bc, unsigned long long pre_id, unsigned long long out_id) {
    return bc && bc->gelu && ((pre_id != BOUNDARY_NO_ID && bc->site_on[MATMUL_OUT]) || (out_id != BOUNDARY_NO_ID && bc->site_on[GELU_OUT]));
}

// out = GELU(pre) with the site casts of pre (pre_id) and out (out_id), BoundaryCasts::gelu, when boundary_gelu_active;
// else false and nothing done (the caller runs its GELU kernel: no site cast applies).
static inline bool boundary_gelu(BoundaryCasts* bc, floatX* out, floatX* pre, size_t rows, size_t cols, unsigned long long pre_id,
                                 unsigned long long out_id, BoundaryGelu form, cudaStream_t stream) {
    if (!boundary_gelu_active(bc, pre_id, out_id)) return false;
    bc->gelu(bc, out, pre, rows, cols, pre_id, out_id, (int)form, stream);
    return true;
}

// The id of a linear layer's output in seeds: its weight's offset in the parameters (0 without casts).
static inline unsigned long long boundary_weight_id(const BoundaryCasts* bc, const floatX* weight) {
    return bc ? (unsigned long long)(weight - bc->params) : 0ull;
}

// The seed of one attention call's casts (0 without casts; the attention kernels then cast nothing).
static inline unsigned long long boundary_attention_seed(const BoundaryCasts* bc, unsigned long long id) {
    return bc ? bc->attention_seed(bc, id) : 0ull;
}

// Whether the attached casts (NULL: none) run the residual + LayerNorm of (N, C) with its site casts in one kernel
// now (BoundaryCasts::residual_layernorm_fused); false without casts or without the hook.
static inline bool boundary_residual_layernorm_fused(const BoundaryCasts* bc, int N, int C) {
    return bc && bc->residual_layernorm_fused && bc->residual_layernorm_fused(bc, N, C);
}

// Run job through the attached casts (only where boundary_residual_layernorm_fused said yes).
static inline void boundary_residual_layernorm(BoundaryCasts* bc, const BoundaryResidualLn& job, cudaStream_t stream) {
    bc->residual_layernorm(bc, job, stream);
}

// Whether the attached casts (NULL: none) apply the logits' casts inside the training step's classifier for (N, Vp)
// logits now (BoundaryCasts::classifier_fused); false without casts or without the hook.
static inline bool boundary_classifier_fused(const BoundaryCasts* bc, int N, int Vp) {
    return bc && bc->classifier_fused && bc->classifier_fused(bc, N, Vp);
}

// Run job through the attached casts (only where boundary_classifier_fused said yes).
static inline void boundary_classifier(BoundaryCasts* bc, const BoundaryClassifier& job, cudaStream_t stream) {
    bc->classifier(bc, job, stream);
}

// The forward of a linear layer with its output's MATMUL_OUT cast (and, with pre, its GELU and the GELU output's cast)
// through the attached casts (BoundaryCasts::gemm_out); false without casts, without the hook or where the mode does
// not take the call (nothing done).
static inline bool boundary_gemm_out(BoundaryCasts* bc, floatX* out, floatX* pre, const floatX* inp, const floatX* weight,
                                     const floatX* bias, int N, int C, int OC, unsigned long long w_id, unsigned long long gelu_id,
                                     cudaStream_t stream) {
    return bc && bc->gemm_out && bc->gemm_out(bc, out, pre, inp, weight, bias, N, C, OC, w_id, gelu_id, stream);
}
