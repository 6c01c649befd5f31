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
// order) but from gemm_dbias_* (gemm_kernels.cuh): per-block fp32 partials, then a fixed-order finish.
//
// Boundaries. cuBLASLt stores `out` and `pre_gelu` itself, so boundary_value<MATMUL_OUT> (identity
// in the plain builds) cannot be applied on the fused path; the unfused GELU kernel applies
// boundary_value<GELU_OUT> to its output. So the SF16 MATMUL_OUT pass lives here (with GELU unfused),
// and so does the TensorCast build's MATMUL_OUT cast (boundary_tensor_cast on ctx->casts, attached at
// run time; or, without GELU, the attached casts' own GEMM with the cast in its epilogue: boundary_gemm_out,
// the same bits but for that GEMM's accumulation order), nowhere else, with two exceptions that keep the bits: with GELU, when the caller names the GELU
// output's cast id (gelu_id), the pre-activation's MATMUL_OUT cast, GELU and the output's GELU_OUT cast are the
// attached casts' one call (boundary_gelu: one kernel where the types allow, doc/TCAST.md 5.5), after a GEMM
// without the GELU epilogue; and where the caller says for one call that the output's only reader casts it
// (ctx->out_cast_by_reader: the model's residual + LayerNorm with its boundary casts in one kernel, which casts
// the projection output as it reads it). The TensorCast operand casts (--cast-gemm) are a backend
// (llmc/modes/tcast/gemm_tcast.cuh).
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cublasLt.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/kernels/gemm/gemm_context.cuh"
#include "llmc/kernels/gemm/gemm_kernels.cuh"

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
// gelu_id (with pre_gelu): the GELU output's id in the seeds of its GELU_OUT site cast, which this call then
// applies (BoundaryCasts; nothing without casts attached); BOUNDARY_NO_ID (the default): the caller casts out
// itself, if at all. When ctx->casts cast pre_gelu (MATMUL_OUT), GELU is never in the cuBLASLt epilogue:
// boundary_gelu computes it with both casts, in one kernel where it can (doc/TCAST.md 5.5); when they cast only
// out (GELU_OUT, gelu_id given), GELU stays in the epilogue and the cast is a pass (measured faster than a plain
// GEMM and GELU + cast in one kernel: 0.832 vs 0.906 ms at d12, H200).
// Requirements: every pointer 16-byte aligned, C and OC multiples of 16 / sizeof(floatX), out and
// pre_gelu not overlapping the inputs; violations end the program with "error: matmul_forward: ...".
// SF16 (a per-value MATMUL_OUT boundary): the boundary is a pass after the GEMM (with GELU: the GELU kernel quantizes
// pre_gelu first), unless the mode attached ctx->boundary_gemm and it takes the call (the boundary in its epilogue).
// ctx->out_cast_by_reader (reset here): 1 leaves the MATMUL_OUT cast (TensorCast) or boundary (SF16) of out to its
// reader (out is stored without it); an error with pre_gelu (the GELU reads out); 2: the cast or boundary is a pass
// here. With 1 or 2 the GEMM is the base backend's (or the low-precision one's), never the mode's own GEMM.
// No scratch. Deterministic (fixed cached algorithm per shape).
void matmul_forward(GemmContext* ctx, floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C,
                    int OC, floatX* pre_gelu, unsigned long long gelu_id = BOUNDARY_NO_ID) {
    char err[256];
    if (!matmul_forward_args_ok(err, sizeof(err), out, inp, weight, bias, N, C, OC, pre_gelu)) {
        fprintf(stderr, "error: %s\n", err);
        exit(EXIT_FAILURE);
    }
    const bool reader_casts = ctx->out_cast_by_reader == 1;  // for this call only
    const bool reader_may_cast = ctx->out_cast_by_reader == 2;  // (the GEMM must be the one runs that fuse use)
    ctx->out_cast_by_reader = 0;
    if (reader_casts && pre_gelu) {
        fprintf(stderr, "error: matmul_forward: out_cast_by_reader with pre_gelu (the GELU reads the output before any reader)\n");
        exit(EXIT_FAILURE);
    }
    // SF16: the GEMM output (after bias) is quantized as stored, before anything reads it; so GELU is
    // never fused into the cuBLASLt epilogue: it must read the quantized pre-activation (and quantizes its
    // own output). With GELU the quantization pass and the GELU are one kernel.
    // TensorCast (run time): the output is cast as stored (unless its reader casts it: reader_casts), so GELU is
    // not fused either; with GELU, the casts of pre_gelu and out and GELU itself are one call of the attached
    // casts (site_gelu). Only out cast: epilogue + pass.
    constexpr bool bound = !boundary_is_identity<MATMUL_OUT>();
    const bool cast = boundary_tensor_active(ctx->casts, MATMUL_OUT) && !reader_casts;
    const unsigned long long pre_id = cast ? boundary_weight_id(ctx->casts, weight) : BOUNDARY_NO_ID;
    const bool site_gelu = pre_gelu && boundary_gelu_active(ctx->casts, pre_id, gelu_id);
    floatX* y = pre_gelu ? pre_gelu : out;
    const size_t n = (size_t)N * OC;
    // the low-precision backend (if any and if it takes this layer) computes y without GELU (told of the GELU the
    // defer below will offer it: it may make the next call's operand in this GEMM)
    const bool done = ctx->lowp && ctx->lowp->forward(ctx, y, inp, weight, bias, N, C, OC, pre_gelu && !bound && !cast ? out : NULL);
    if (!done && !bound && !cast && pre_gelu && ctx->fuse_gelu && OC % 8 == 0 &&
        gemm_backend_forward(ctx, out, inp, weight, bias, N, C, OC, pre_gelu)) {
        // GELU fused into the cuBLASLt epilogue; a GELU_OUT cast of out (gelu_id) is then a pass of its own:
        // measured faster than a plain GEMM + GELU and the cast in one kernel (doc/TCAST.md 5.5)
        if (site_gelu) boundary_tensor_cast(ctx->casts, GELU_OUT, gelu_id, out, N, OC, ctx->stream);
        return;
    }
    // TensorCast: a GEMM whose output the MATMUL_OUT cast follows (then, with GELU, the GELU and its output's cast) may
    // be the mode's, with the casts in its epilogue
    if (!done && cast && !reader_may_cast &&
        boundary_gemm_out(ctx->casts, out, pre_gelu, inp, weight, bias, N, C, OC, pre_id, site_gelu ? gelu_id : BOUNDARY_NO_ID, ctx->stream))
        return;
    // a per-value boundary (SF16) may be applied in the epilogue of the mode's own GEMM (GemmBoundaryGemm): then the
    // GEMM and the pass below (with GELU: the GELU kernel that quantizes pre_gelu) are that one call
    if (!done && bound && !cast && !ctx->lowp && ctx->boundary_gemm && !reader_casts && !reader_may_cast &&
        ctx->boundary_gemm->forward(ctx, out, pre_gelu, inp, weight, bias, N, C, OC))
        return;
    if (!done) gemm_backend_forward(ctx, y, inp, weight, bias, N, C, OC, NULL);
    if (site_gelu) {
        boundary_gelu(ctx->casts, out, pre_gelu, N, OC, pre_id, gelu_id, BOUNDARY_GELU_FRONT, ctx->stream);
        return;
    }
    if (cast) boundary_tensor_cast(ctx->casts, MATMUL_OUT, pre_id, y, N, OC, ctx->stream);
    // the GELU output is the next layer's input (fcproj): the backend that ran this GEMM may compute it in its
    // quantization of that input (defer), else its amax comes with it when the backend wants it
    if (pre_gelu) {
        if (done && !bound && !cast && gemm_lowp_defer(ctx, GEMM_DEFER_GELU, out, pre_gelu, N, OC)) return;
        gemm_gelu_apply<bound>(out, pre_gelu, n, ctx->stream, gemm_amax_slot(ctx, out, n));
    } else if (bound && !reader_casts) gemm_boundary_apply(y, n, ctx->stream);
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
    ctx->out_cast_by_reader = 0;  // (meant for one matmul_forward call; this call casts nothing here anyway)
    if (ctx->lowp && ctx->lowp->forward(ctx, out, inp, weight, NULL, N, C, OC, NULL)) return;
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
    // The low-precision backend (if any and if it takes this layer) computes dinp without GELU' and dweight (told of the
    // GELU' the defer below will offer it).
    bool dbias_done = false;
    const bool lowp = ctx->lowp && ctx->lowp->backward(ctx, dinp, dweight, dbias, &dbias_done, dout, inp, weight, N, C, OC,
                                                       dinp ? pre_gelu : NULL);
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
