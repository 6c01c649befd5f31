// gemm_lowp.cuh - the FP8 and TCFP-12 linear-layer backends behind gemm.cuh's matmul_forward /
// matmul_backward (attached through GemmContext::lowp; callers never see which backend runs).
//
// FP8 build (ENABLE_FP8), per linear layer y = x Wᵀ + b (N rows, C in, OC out), Micikevicius et al.
// 2022, "FP8 Formats for Deep Learning":
//   forward  X -> E4M3 (scale from amax(X)), W -> E4M3 (from amax(W), once per optimizer step, plain
//            and transposed), Y = X8 · W8ᵀ · (1/sx)(1/sw) + b: one cuBLASLt FP8 GEMM, fp32 accumulation,
//            BF16 output (llmc/kernels/gemm/gemm_fp8.cuh);
//   dgrad    dY -> E5M2, dX = dY8 · W8 (the transposed W copy: cuBLASLt's FP8 GEMM is TN-only);
//   wgrad    dW += dY8ᵀ · X8ᵀ from transposed E5M2 / E4M3 copies (or in BF16 with hp_wgrad).
// TCFP-12 build (ENABLE_TCFP12), seed tcfp_readme.txt: W' = W (+ e_{t-1} with error feedback),
//   W_hi = E4M3(W' s_hi), R = W' - W_hi / s_hi, W_lo = E4M3(R s_lo) (stochastically rounded with SRR),
//   e_t = W' - deq(W_hi) - deq(W_lo); forward Y = X8 · W_hiᵀ + X8 · W_loᵀ, the second GEMM accumulating
//   onto the first in the same D with beta = 1 (W_lo first, then W_hi plus bias; llmc/kernels/gemm/gemm_fp8.cuh);
//   dgrad dX = dY8 · (W_hi + W_lo) likewise, or with W_hi only (ABD); wgrad as in the FP8 build. The split
//   reads the fp32 master weights when the run keeps them whole (-w 1 without ZeRO-1), else the BF16
//   parameters widened. Scales: per tensor, or (--tcfp-block b) b x b tiles for the weights and 1 x b
//   blocks along K for X and dY (b = 128: cuBLASLt's Hopper block scaling; 32, 64: chunked GEMMs
//   accumulated in fp32, slow), wgrad per tensor in all modes.
// Scales are powers of two from amax (exact dequantization), current scaling by default; with delayed
// scaling (history H) the scale of each X and dY comes from the largest amax of its previous H uses in
// training passes (weights always use current scaling)
// (llmc/kernels/fp8/fp8_amax.cuh fp8_delayed_scale_pending: the amax is taken while quantizing, no extra pass).
// Memory traffic, the lever at GPT-2 sizes (doc/TCFP12.md "Where the time goes"): the forward quantizes
// X once into the GEMM operand and the transposed wgrad operand (fp8_quantize_pair), kept per layer until
// its backward (so backward neither re-reads X nor needs the GELU recompute: keeps_input); dY is
// quantized once into both its operands; under current scaling the amax of X / dY comes from the kernel
// that produced it when that kernel asked for an amax slot (gemm_amax_slot: LayerNorm, GELU, dGELU,
// attention forward and backward), else from one amax pass. Knobs are run-time options (LowpOptions), so one
// build serves a sweep. The backend declines (the base BF16 backend runs instead) during the warm-up
// steps, for the LM head unless lm_head is set, and for shapes FP8 GEMMs cannot take (C, OC or N not a
// multiple of 16; reported once per layer). With --fp8-cutlass 1 (FP8 build) the fc forward and the fcproj dgrad make
// the next GEMM's codes of GELU / GELU' in their own CUTLASS epilogue (lowp_cutlass.cuh) instead of the producer pass.
// The state and the pieces these calls are made of: lowp_backend.cuh.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/modes/lowp/lowp_backend.cuh"
#include "llmc/modes/lowp/lowp_cutlass.cuh"

// GemmLowpBackend::forward. gelu_out: the GELU the front will offer next (gemm_context.cuh); with --fp8-cutlass 1 an fc
// layer makes its consumer's codes of it in this GEMM (lowp_cutlass.cuh).
static bool lowp_forward(GemmContext* ctx, floatX* y, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C, int OC,
                         floatX* gelu_out) {
    LowpState* s = lowp_state(ctx);
    const LowpDeferred d = lowp_take_deferred(s);  // the GELU of inp (the fcproj layer), if the fc forward deferred (or made) it
    uint32_t* hint = lowp_take_hint(s, inp, (size_t)N * C);
    cudaStream_t st = ctx->stream;
    // (the LM head gets no state unless it runs here)
    LowpLayer* L = weight == s->lm_head_weight && !s->opt.lm_head ? NULL : lowp_layer(s, weight, OC, C);
    if (L) L->xt_rows = 0;
    const bool run = L && lowp_eligible(ctx, s, L, weight, N, C, OC);
    // X: the GEMM operand and, unless wgrad runs in BF16, the transposed wgrad operand kept for backward
    uint8_t* xt = NULL;
    if (run && !s->opt.hp_wgrad) {
        lowp_grow(&L->xt, &L->xt_cap, (size_t)N * C);
        xt = L->xt;
    }
    const LowpUse use = lowp_cutlass_use(s, d, run && xt != NULL, L, inp, (size_t)N * C, st);
    const bool made = use == LOWP_USE_MADE;
    const bool fused = use == LOWP_USE_OFFERED && run && (d.kind == GEMM_DEFER_GELU || d.kind == GEMM_DEFER_LAYERNORM) &&
                       lowp_fusable(s, L, d, (GemmDefer)d.kind, inp, (size_t)N * C, LOWP_ROLE_X, xt != NULL);
    if (use == LOWP_USE_OFFERED && !fused) lowp_materialize(s, d, st);
    if (!run) return false;
    lowp_grow_layer_codes(s, weight, N, C, OC, false);
    lowp_quantize_weights(s, L, ctx->weight_version, st);
    const bool blocked = lowp_is_tcfp() && s->opt.block;
    float* xsc = L->f + 2 * LOWP_TRIPLE;
    const uint8_t* xc = s->a8;  // X's codes
    if (made) {
        xc = s->g8;  // made by the fc forward's epilogue: transposed in xt, scale in xsc
    } else if (fused && d.kind == GEMM_DEFER_GELU) {
        const LowpSrcGelu src{(const floatX*)d.pre, ctx->keep_activations ? (floatX*)d.out : NULL};
        lowp_quantize_produced(s, L, LOWP_ROLE_X, src, N, C, FP8_E4M3FN, s->a8, xt, xsc, NULL, st);
    } else if (fused) {  // the LayerNorm before the qkv / fc layer (or the LM head)
        const LowpSrcLayernorm src = lowp_ln_source(s, d, ctx->keep_activations ? (floatX*)d.out : NULL);
        lowp_quantize_produced(s, L, LOWP_ROLE_X, src, N, C, FP8_E4M3FN, s->a8, xt, xsc, NULL, st);
        s->ln_taken++;
    } else {
        lowp_quantize_act(s, L, LOWP_ROLE_X, inp, N, C, FP8_E4M3FN, s->a8, xt, xsc, 0, blocked, hint, st);
    }
    if (xt) L->xt_rows = N;
    bias = lowp_bias(L, bias, ctx->weight_version, st);
    if (xc == s->a8 && lowp_cutlass_takes(s, L, GEMM_DEFER_GELU, gelu_out)) {  // (its codes go to g8: X's must not be there)
        lowp_cutlass_fc(s, L, y, gelu_out, bias, xsc, N, C, OC, st);
        return true;
    }
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    const int fast = lowp_fast_accum(s->opt, true);
    bool ok;
    float* lo = L->f + LOWP_TRIPLE;
    if (!lowp_is_tcfp()) {
        ok = fp8_linear_forward(&s->fp8, y, xc, LOWP_INV(xsc), L->w_hi, LOWP_INV(L->f), bias, N, C, OC, FP8_SCALE_TENSOR,
                                fast, 0.0f, &cs);
    } else if (blocked) {
        float* acc32 = lowp_acc32(s, (size_t)N * OC);
        ok = tcfp12_linear_forward(&s->fp8, y, s->a8, s->xinv, L->w_hi, L->blk_inv_hi, L->w_lo, L->blk_inv_lo, bias, N, C, OC,
                                   lowp_block_mode(s->opt.block), fast, acc32 ? TCFP12_ACC_FP32 : TCFP12_ACC_BF16_LO_FIRST,
                                   acc32, &cs);
    } else {
        ok = tcfp12_linear_forward(&s->fp8, y, s->a8, LOWP_INV(xsc), L->w_hi, LOWP_INV(L->f), L->w_lo, LOWP_INV(lo), bias, N, C,
                                   OC, FP8_SCALE_TENSOR, fast, TCFP12_ACC_BF16_LO_FIRST, NULL, &cs);
    }
    if (!ok) lowp_gemm_failed("forward", cs, &s->fp8);
    return true;
}

// dX (N, C) = dY · W from dY's plain codes dyc (N, OC; scale triple gsc) and the layer's transposed weight codes: one
// FP8 GEMM, or TCFP-12's pair (W_hi + W_lo; W_hi only with --tcfp-abd 1; block scales with --tcfp-block). Dies if
// cuBLASLt refuses it.
static void lowp_dgrad(LowpState* s, LowpLayer* L, floatX* dinp, const uint8_t* dyc, const float* gsc, int N, int C, int OC,
                       bool blocked, int fast, cudaStream_t st) {
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    bool ok;
    const float* lo = L->f + LOWP_TRIPLE;
    if (!lowp_is_tcfp()) {
        ok = fp8_linear_dgrad(&s->fp8, dinp, dyc, LOWP_INV(gsc), L->wt_hi, LOWP_INV(L->f), N, C, OC, FP8_SCALE_TENSOR, fast, 0.0f,
                              FP8_E5M2, &cs);
    } else {
        const uint8_t* wt_lo = s->opt.abd ? NULL : L->wt_lo;
        if (blocked) {
            float* acc32 = lowp_acc32(s, (size_t)N * C);
            ok = tcfp12_linear_dgrad(&s->fp8, dinp, dyc, s->ginv, L->wt_hi, L->blk_inv_hi_t, wt_lo, L->blk_inv_lo_t, N, C, OC,
                                     lowp_block_mode(s->opt.block), fast, acc32 ? TCFP12_ACC_FP32 : TCFP12_ACC_BF16_LO_FIRST, acc32,
                                     FP8_E5M2, &cs);
        } else
            ok = tcfp12_linear_dgrad(&s->fp8, dinp, dyc, LOWP_INV(gsc), L->wt_hi, LOWP_INV(L->f), wt_lo, LOWP_INV(lo), N, C, OC,
                                     FP8_SCALE_TENSOR, fast, TCFP12_ACC_BF16_LO_FIRST, NULL, FP8_E5M2, &cs);
    }
    if (!ok) lowp_gemm_failed("dgrad", cs, &s->fp8);
}

// Rows per chunk of this backward call: the LM head's with --fp8-lm-head-rows R (per-tensor scales) runs in chunks of R
// token rows when N > R; every other call, and the LM head otherwise, in one (N).
static inline int lowp_backward_rows(const LowpState* s, const floatX* weight, int N, bool blocked) {
    const int R = s->opt.lm_head_rows;
    return weight == s->lm_head_weight && R > 0 && R < N && !blocked ? R : N;
}

// The LM head's backward in row chunks of `rows` (lowp_backward_rows < N): its dY (N, Vp) is the largest GEMM operand
// of the model (Vp = 50304), and both its FP8 copies at once (plain for dgrad, transposed for wgrad) would take 2 N Vp
// bytes, 6.3 GB at d12 B = 64: more than the whole FP8 model saves against BF16. Per chunk of rows [r0, r0 + n): the
// chunk's plain and transposed E5M2 codes (2 n Vp bytes), dX's rows r0.. from them, and the chunk's share of dW:
// dW += dY_chunkᵀ · X_chunk, where X_chunk's transposed codes (C, n) are columns r0.. of the kept xt (C, N), copied out
// (C n bytes). The scale is the whole dY's, taken first (lowp_scale: the classifier's amax slot, an amax pass, or
// delayed scaling's history; under delayed scaling every chunk adds its amax to the pending slot), so the codes are
// those of the one-call backward bit for bit, and so is dX (each row's dot products are the same; cuBLASLt may pick
// another algorithm for the smaller n). dW: the chunks' products accumulate in an fp32 copy of dweight (one FP32-output
// GEMM per chunk with beta = 1) rounded to BF16 once at the end, as the one-GEMM wgrad (beta = 1 onto dweight) rounds
// once; only the order of the fp32 sums differs. No bias (the LM head has none).
static void lowp_backward_chunked(GemmContext* ctx, LowpState* s, LowpLayer* L, floatX* dinp, floatX* dweight, const floatX* dout,
                                  int N, int C, int OC, int rows, uint32_t* hint) {
    if (!dinp && !dweight) return;
    cudaStream_t st = ctx->stream;
    lowp_grow_codes(s, (size_t)rows * C, (size_t)rows * OC, (size_t)rows * OC);  // (a8: X_chunk's transposed codes)
    float* gsc = L->f + 3 * LOWP_TRIPLE;
    const float* xsc = L->f + 2 * LOWP_TRIPLE;
    uint32_t* acc = lowp_scale(s, L, LOWP_ROLE_DY, gsc, dout, (size_t)N * OC, FP8_E5M2, hint, st);
    const int fast = lowp_fast_accum(s->opt, false);
    float* dw32 = NULL;
    if (dweight) {
        lowp_grow(&s->acc32, &s->acc32_cap, (size_t)OC * C);
        dw32 = s->acc32;
        widen_to_float(dw32, dweight, (size_t)OC * C, st);
    }
    for (int r0 = 0; r0 < N; r0 += rows) {
        const int n = rows < N - r0 ? rows : N - r0;
        fp8_quantize_pair(dinp ? s->g8 : NULL, dweight ? s->gt8 : NULL, dout + (size_t)r0 * OC, n, OC, FP8_E5M2, LOWP_SCALE(gsc), acc,
                          0, 0, st, (float*)NULL);
        if (dinp) lowp_dgrad(s, L, dinp + (size_t)r0 * C, s->g8, gsc, n, C, OC, false, fast, st);  // (per-tensor scales only)
        if (dweight) {
            cudaCheck(cudaMemcpy2DAsync(s->a8, (size_t)n, L->xt + r0, (size_t)N, (size_t)n, (size_t)C, cudaMemcpyDeviceToDevice, st));
            cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
            if (!fp8_linear_wgrad(&s->fp8, dw32, s->gt8, LOWP_INV(gsc), s->a8, LOWP_INV(xsc), n, C, OC, FP8_SCALE_TENSOR, fast, 1.0f,
                                  FP8_E5M2, &cs))
                lowp_gemm_failed("wgrad (LM head, row chunk)", cs, &s->fp8);
        }
        s->lm_head_chunks++;
    }
    if (dweight) fp8_gemm_cast_bf16(dweight, dw32, (size_t)OC * C, st);
}

// GemmLowpBackend::backward. pre_gelu: the GELU' the front will offer next (gemm_context.cuh); with --fp8-cutlass 1 an
// fcproj layer makes its consumer's codes of it in this dgrad (lowp_cutlass.cuh).
static bool lowp_backward(GemmContext* ctx, floatX* dinp, floatX* dweight, floatX* dbias, bool* dbias_done, const floatX* dout,
                          const floatX* inp, const floatX* weight, int N, int C, int OC, const floatX* pre_gelu) {
    LowpState* s = lowp_state(ctx);
    const LowpDeferred d = lowp_take_deferred(s);  // GELU' of dout (the fc layer), if the fcproj backward deferred (or made) it
    uint32_t* hint = lowp_take_hint(s, dout, (size_t)N * OC);
    cudaStream_t st = ctx->stream;
    LowpLayer* L = weight == NULL || (weight == s->lm_head_weight && !s->opt.lm_head) ? NULL : lowp_layer(s, weight, OC, C);
    const bool run = L && lowp_eligible(ctx, s, L, weight, N, C, OC);
    const bool fp8_wgrad = dweight && !s->opt.hp_wgrad;
    const LowpUse use = lowp_cutlass_use(s, d, run, L, dout, (size_t)N * OC, st);
    const bool made = use == LOWP_USE_MADE;
    const bool fused =
        use == LOWP_USE_OFFERED && run && lowp_fusable(s, L, d, GEMM_DEFER_DGELU, dout, (size_t)N * OC, LOWP_ROLE_DY, fp8_wgrad);
    if (use == LOWP_USE_OFFERED && !fused) lowp_materialize(s, d, st);
    if (!run) return false;
    lowp_quantize_weights(s, L, ctx->weight_version, st);  // no-op after this step's forward
    const bool blocked = lowp_is_tcfp() && s->opt.block;
    if (fp8_wgrad && L->xt_rows != N)
        die("gemm_lowp: the backward of a linear layer (N=%d C=%d OC=%d) without its forward at the same N", N, C, OC);
    const int rows = lowp_backward_rows(s, weight, N, blocked);
    if (rows < N) {  // (the LM head: no bias, nothing deferred or made)
        lowp_backward_chunked(ctx, s, L, dinp, fp8_wgrad ? dweight : NULL, dout, N, C, OC, rows, hint);
        if (dweight && !fp8_wgrad) gemm_backend_backward_dweight(ctx, dweight, dout, inp, N, C, OC);
        return true;
    }
    lowp_grow_layer_codes(s, weight, N, C, OC, true);
    float* gsc = L->f + 3 * LOWP_TRIPLE;
    // dY: E5M2, plain (dgrad, B operand along OC) and transposed (wgrad, B operand along N), one pass that
    // also makes the bias gradient's column sums
    float* colpart = NULL;
    if (dbias && fp8_wgrad && !made) {
        lowp_grow(&s->colpart, &s->colpart_cap, (size_t)fp8_col_partial_rows(N) * OC);
        colpart = s->colpart;
    }
    const uint8_t* dyc = s->g8;  // dY's plain codes
    if (made) {
        // made by the fcproj dgrad's epilogue: transposed in gt8, scale in gsc, the bias gradient's column sums in colpart
        dyc = s->a8;
        if (dbias) {
            gemm_dbias_finish(dbias, s->colpart, d.colpart_rows, OC, st);
            *dbias_done = true;
        }
    } else if (fused) {
        const LowpSrcDgelu src{(const floatX*)d.out, (const floatX*)d.pre};
        lowp_quantize_produced(s, L, LOWP_ROLE_DY, src, N, OC, FP8_E5M2, dinp ? s->g8 : NULL, s->gt8, gsc, colpart, st);
    } else {
        lowp_quantize_act(s, L, LOWP_ROLE_DY, dout, N, OC, FP8_E5M2, dinp ? s->g8 : NULL, fp8_wgrad ? s->gt8 : NULL, gsc, 1, blocked,
                          hint, st, colpart);
    }
    if (colpart) {
        gemm_dbias_finish(dbias, colpart, fp8_col_partial_rows(N), OC, st);
        *dbias_done = true;
    }
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    const int fast = lowp_fast_accum(s->opt, false);
    // the fused dgrad writes its consumer's codes into a8 / gt8: after this layer's wgrad read gt8, and not over its own dY
    const bool fuse_next = dinp && dyc == s->g8 && lowp_cutlass_takes(s, L, GEMM_DEFER_DGELU, pre_gelu);
    if (dinp && !fuse_next) lowp_dgrad(s, L, dinp, dyc, gsc, N, C, OC, blocked, fast, st);
    if (dweight) {
        if (!fp8_wgrad) {
            gemm_backend_backward_dweight(ctx, dweight, dout, inp, N, C, OC);
        } else {
            // dW += dY8ᵀ · X8ᵀ with the transposed X codes and scale the forward kept
            const float* xsc = L->f + 2 * LOWP_TRIPLE;
            if (!fp8_linear_wgrad(&s->fp8, dweight, s->gt8, LOWP_INV(gsc), L->xt, LOWP_INV(xsc), N, C, OC, FP8_SCALE_TENSOR,
                                  fast, 1.0f, FP8_E5M2, &cs))
                lowp_gemm_failed("wgrad", cs, &s->fp8);
        }
    }
    if (fuse_next) lowp_cutlass_dgrad(s, L, dinp, pre_gelu, gsc, N, C, OC, st);
    return true;
}

// GemmLowpBackend::destroy: every device buffer of the backend, then the state itself.
static void lowp_destroy(GemmContext* ctx) {
    LowpState* s = lowp_state(ctx);
    for (int i = 0; i < s->num_layers; i++) {
        LowpLayer* L = &s->layers[i];
        void* bufs[] = {L->w_hi, L->w_lo, L->wt_hi, L->wt_lo, L->f, L->blk_s_hi, L->blk_inv_hi, L->blk_s_lo, L->blk_inv_lo,
                        L->blk_inv_hi_t, L->blk_inv_lo_t, L->tile_inv_hi, L->tile_inv_lo, L->ef, L->hist, L->pos, L->pending,
                        L->xt, L->bias};
        for (void* b : bufs) cudaCheck(cudaFree(b));
    }
    void* bufs[] = {s->spec.dev, s->scratch, s->amax_bits, s->a8, s->g8, s->gt8, s->xs, s->xinv, s->gs, s->ginv, s->w32, s->acc32, s->colpart};
    for (void* b : bufs) cudaCheck(cudaFree(b));
    lowp_cutlass_free();
    fp8_gemm_context_free(&s->fp8);
    free(s);
}

// GemmLowpBackend::keeps_input: the layer's last forward kept its transposed input codes for N rows and its
// backward will take it (so matmul_backward's inp is not read).
static bool lowp_keeps_input(GemmContext* ctx, const floatX* weight, int N) {
    LowpState* s = lowp_state(ctx);
    const LowpLayer* L = s->opt.hp_wgrad ? NULL : lowp_find_layer(s, weight);
    return L != NULL && L->xt_rows == N && ctx->optimizer_steps >= s->opt.warmup;
}

// GemmLowpBackend::report: the FP8 GEMM plans' algorithm tuning (fp8_gemm_tune_report), how many GEMMs made the next
// operand in their CUTLASS epilogue (--fp8-cutlass 1), in how many row chunks the LM head's backward ran, how many LayerNorm
// outputs the producers computed, then how many tensors speculative scaling quantized
// (lowp_producers.cuh) and how many of them it re-quantized because the amax had left the guessed power-of-two range
// (one line each; nothing if unused). Synchronizes the stream.
static void lowp_report(GemmContext* ctx, FILE* f) {
    const LowpState* s = lowp_state(ctx);
    fp8_gemm_tune_report(&s->fp8, f);
    if (s->opt.cutlass)
        fprintf(f, "%s: fused CUTLASS epilogues: %lld fc forwards (GELU codes), %lld fcproj dgrads (GELU' codes, bias column sums); "
                "%lld taken by their consumers, %lld computed in BF16 instead; %lld under delayed scaling\n",
                s->backend.name, s->cutlass_fc, s->cutlass_dgrad, s->cutlass_taken, s->cutlass_unmade, s->cutlass_advanced);
    if (s->lm_head_chunks > 0)
        fprintf(f, "%s: the LM head's backward ran in %lld row chunks of at most %d rows (--fp8-lm-head-rows)\n", s->backend.name,
                s->lm_head_chunks, s->opt.lm_head_rows);
    if (s->ln_taken > 0)
        fprintf(f, "%s: %lld LayerNorm outputs computed inside their consumer's quantization (--fp8-producers 2)\n", s->backend.name,
                s->ln_taken);
    const long long uses = s->spec.uses;
    if (uses <= 0) return;
    const unsigned long long misses = lowp_spec_misses_read(&s->spec, ctx->stream);
    fprintf(f, "%s: %lld tensors quantized by their producers with speculative scales, %llu re-quantized (%.2f%%)\n",
            s->backend.name, uses, misses, 100.0 * (double)misses / (double)uses);
}

// Check the knobs and their combinations (dies naming the flag; no CUDA call, so the trainer checks
// them before it touches the GPU). The ranges of single flags are in the flag table (llmc/core/cli.h);
// these checks stay for callers that fill LowpOptions themselves.
static inline void gemm_lowp_options_validate(const LowpOptions* opt, int allow_fallback) {
    const struct { const char* flag; int value; } switches[] = {
        {"--fp8-hp-wgrad", opt->hp_wgrad}, {"--fp8-lm-head", opt->lm_head},
        {"--fp8-cutlass", opt->cutlass},
        {"--tcfp-ef", opt->error_feedback},    {"--tcfp-srr", opt->srr},           {"--tcfp-abd", opt->abd}};
    for (const auto& sw : switches)
        if (sw.value != 0 && sw.value != 1) die("%s: expected 0 or 1, got %d", sw.flag, sw.value);
    if (opt->producers < 0 || opt->producers > 2) die("--fp8-producers: expected 0, 1 or 2, got %d", opt->producers);
    if (opt->fast_accum < LOWP_FAST_ACCUM_NONE || opt->fast_accum > LOWP_FAST_ACCUM_FORWARD)
        die("--fp8-fast-accum: expected 0, 1 or 2, got %d", opt->fast_accum);
    if (allow_fallback != 0 && allow_fallback != 1) die("--fp8-fallback: expected 0 or 1, got %d", allow_fallback);
    if (opt->srr && opt->error_feedback) die("--tcfp-srr 1 replaces error feedback: it cannot be combined with --tcfp-ef 1");
    if (opt->block != 0 && opt->block != 32 && opt->block != 64 && opt->block != 128)
        die("--tcfp-block %d: supported are 0 (per tensor), 32, 64 (chunked GEMMs, slow) and 128 (cuBLASLt's Hopper block scaling)",
            opt->block);
    if (opt->block == 128 && opt->fast_accum != LOWP_FAST_ACCUM_NONE)  // measured: CUBLAS_STATUS_NOT_SUPPORTED
        die("--fp8-fast-accum %d cannot be combined with --tcfp-block 128: cuBLASLt's block-scaled FP8 GEMMs have no fast "
            "accumulation", opt->fast_accum);
    if (!lowp_is_tcfp() && (opt->block || opt->error_feedback || opt->srr || opt->abd))
        die("--tcfp-*: TCFP-12 options need the TCFP12=1 build (this is %s)", GEMM_LOWP_MODE_NAME);
    if (opt->block && fp8_block_scaling_unavailable())  // cuBLASLt version guard (gemm_fp8.cuh)
        die("--tcfp-block %d %s", opt->block, fp8_block_scaling_unavailable());
    if (opt->delayed < 0 || opt->warmup < 0) die("--fp8-delayed / --fp8-warmup: must be >= 0");
    if (opt->lm_head_rows < 0 || opt->lm_head_rows % 16 != 0)
        die("--fp8-lm-head-rows %d: expected 0 (all rows at once) or a positive multiple of 16 (FP8 GEMM operands)", opt->lm_head_rows);
    if (opt->cutlass)
        if (const char* why = lowp_cutlass_refusal(opt)) die("--fp8-cutlass 1: %s", why);
}

// Attach the backend to ctx (after gemm_context_init). Dies on a GPU without FP8 tensor cores (below
// compute capability 8.9) unless allow_fallback, in which case nothing is attached and the base
// backend runs every GEMM (printed). Invalid option combinations end the program naming the flag, and so does
// --fp8-cutlass 1 on a GPU other than compute capability 9.0 (the CUTLASS kernels are sm_90a code).
static inline void gemm_lowp_attach(GemmContext* ctx, const LowpOptions* opt, int allow_fallback, unsigned long long seed) {
    gemm_lowp_options_validate(opt, allow_fallback);
    const int cc = cuda_current_cc(), major = cc / 10, minor = cc % 10;
    if (cc < 89 || (opt->block && major != 9)) {
        if (!allow_fallback)
            die("%s needs FP8 tensor cores (compute capability 8.9 or newer%s); this GPU is %d.%d. --fp8-fallback 1 runs BF16 GEMMs instead",
                GEMM_LOWP_MODE_NAME, opt->block ? ", block scaling: 9.0" : "", major, minor);
        printf("note: compute capability %d.%d: %s unavailable, every GEMM runs in BF16 (--fp8-fallback 1)\n", major, minor,
               GEMM_LOWP_MODE_NAME);
        return;
    }
    if (opt->cutlass && major * 10 + minor != 90)
        die("--fp8-cutlass 1: the CUTLASS kernels are sm_90a code and need a compute capability 9.0 GPU (H100, H200); this GPU is %d.%d",
            major, minor);
    LowpState* s = (LowpState*)calloc(1, sizeof(LowpState));
    if (!s) die("gemm_lowp: out of host memory");
    s->opt = *opt;
    s->ctx = ctx;
    s->seed = seed;
    fp8_gemm_context_init(&s->fp8, ctx);
    lowp_spec_init(&s->spec);
    cudaCheck(cudaMalloc(&s->scratch, FP8_QUANT_SCRATCH_FLOATS * sizeof(float)));
    cudaCheck(cudaMalloc(&s->amax_bits, LOWP_AMAX_SLOTS * sizeof(uint32_t)));
    cudaCheck(cudaMemset(s->amax_bits, 0, LOWP_AMAX_SLOTS * sizeof(uint32_t)));
    s->hint.slot = -1;
    s->backend.state = s;
    s->backend.name = GEMM_LOWP_MODE_NAME;
    s->backend.forward = lowp_forward;
    s->backend.backward = lowp_backward;
    s->backend.amax_slot = lowp_amax_slot;
    s->backend.keeps_input = lowp_keeps_input;
    s->backend.defer = lowp_defer;
    s->backend.layernorm = lowp_layernorm;
    s->backend.keeps_inputs = !opt->hp_wgrad;
    s->backend.report = lowp_report;
    s->backend.destroy = lowp_destroy;
    ctx->lowp = &s->backend;
}

// The model's parameter layout (to find a weight's fp32 master copy; master may be NULL) and its LM head.
static inline void gemm_lowp_set_model(GemmContext* ctx, const floatX* params, const float* master, const floatX* lm_head) {
    if (!ctx->lowp) return;
    LowpState* s = lowp_state(ctx);
    s->params_base = params;
    s->master_base = master;
    s->lm_head_weight = lm_head;
}

// One line for logs: the knobs in force.
static inline void gemm_lowp_describe(const GemmContext* ctx, char* out, size_t n) {
    if (!ctx->lowp) { snprintf(out, n, "none"); return; }
    const LowpOptions& o = ((const LowpState*)ctx->lowp->state)->opt;
    snprintf(out, n, "block=%d ef=%d srr=%d abd=%d hp_wgrad=%d warmup=%d delayed=%d fast_accum=%d lm_head=%d lm_head_rows=%d producers=%d "
             "cutlass=%d", o.block, o.error_feedback, o.srr, o.abd, o.hp_wgrad, o.warmup, o.delayed, o.fast_accum, o.lm_head, o.lm_head_rows,
             o.producers, o.cutlass);
}
