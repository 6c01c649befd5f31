// lowp_cutlass.cuh - the FP8 backend's fused-epilogue path (--fp8-cutlass 1, issue 27; doc/TCFP12.md "Fifth round"):
// the two GEMMs whose output feeds an elementwise producer become one CUTLASS Hopper FP8 GEMM each, whose epilogue makes
// the next GEMM's operand (llmc/kernels/gemm/cutlass_fp8_fc.h, cutlass_fp8_dgelu.h):
//   fc forward      Z = X8 W8ᵀ + b stored in BF16 (the pre-activation the backward keeps), and the E4M3 codes of
//                   GELU(Z), plain into g8 and transposed into the fcproj layer's xt, with the amax for their scale;
//                   today: cuBLASLt GEMM to BF16 Z, then the GELU producer at the fcproj forward (fp8_quantize_pair_from).
//   fcproj dgrad    the E5M2 codes of (dY8 W8) ∘ GELU'(Z), plain into a8 and transposed into gt8, with the amax and the
//                   fc layer's bias-gradient column sums (per 128-row tile, into colpart); today: cuBLASLt dgrad to BF16,
//                   then the dGELU producer with the column sums at the fc backward.
// Both use fast accumulation (the configurations that pay: doc/TCFP12.md, third and fourth rounds); their codes are bit
// for bit what today's producers make of the CUTLASS GEMM's own BF16 product (dev/cuda/cutlass_fp8*.cu check it), so only
// the GEMM's accumulation order differs from --fp8-cutlass 0. The producing GEMM does not know the consuming layer, so
// gemm_lowp_link_mlp tells the backend which layer each fused epilogue makes the operand of (the model's MLP pairs); the
// producing call then takes the consumer's scale step itself, exactly as the consumer's producer pass would:
//   delayed scaling (training passes): the consumer's history gives the scale (lowp_scale), the epilogue's amax goes
//     into its pending slot; one pass, nothing to redo.
//   current scaling: speculatively with the consumer's previous scale, the epilogue's amax into the speculative slot,
//     then lowp_speculative_finish: on a miss (the amax left the guessed power-of-two range) today's producer runs again
//     from the stored BF16 value with the right scale, into the same buffers: from Z for the GELU (kept anyway), from the
//     dgrad g for the GELU' (so under current scaling the dgrad kernel stores g too, into dinp). Exact: the producer
//     makes the epilogue's codes of the same value (the harnesses' bit-for-bit checks).
// The codes travel to the consumer as a made deferral (LowpDeferred::made, lowp_handover.h): the front offers the GELU /
// GELU' (defer) right after the producing call as always, the backend takes it, and the next call uses the codes instead
// of running the producer. A delayed-scaling bootstrap use of the consumer (its first, which takes an amax pass) and consumers that
// run in BF16 keep today's path. Where the path cannot apply at all, --fp8-cutlass 1 is refused at start-up
// (lowp_cutlass_refusal; a GPU that is not compute capability 9.0: gemm_lowp_attach); calls whose B*T is not a multiple
// of 16 never reach it (the backend runs those GEMMs in BF16, lowp_eligible). This file is the one place that reads
// ENABLE_CUTLASS (the Makefile sets it for the FP8 trainer and its test where CUTLASS is found and links the kernels).
#pragma once

#include <stdio.h>

#include "llmc/core/utils.h"
#include "llmc/kernels/gemm/cutlass_fp8_fc.h"
#include "llmc/kernels/gemm/cutlass_fp8_dgelu.h"
#include "llmc/modes/lowp/lowp_backend.cuh"

#if defined(ENABLE_CUTLASS)
static constexpr bool kLowpCutlassBuilt = true;   // the CUTLASS kernels are linked into this binary
#else
static constexpr bool kLowpCutlassBuilt = false;
#endif

// The configurations the trainer runs: the fastest of the measured ones (doc/TCFP12.md), both with fast accumulation.
static const CutlassFcConfig LOWP_CUTLASS_FC = CUTLASS_FC_coop_n_fa256_pgelu_e128x64_dt;
static const CutlassDgeluConfig LOWP_CUTLASS_DGRAD = CUTLASS_DGELU_coop_fa256_e128x32;

// Why --fp8-cutlass 1 cannot run with these knobs in this build, or NULL. No CUDA call (the GPU: gemm_lowp_attach).
static inline const char* lowp_cutlass_refusal(const LowpOptions* o) {
    if (lowp_is_tcfp())
        return "the fused epilogues make the operand of one FP8 GEMM; TCFP-12 runs two per product (and --tcfp-block scales "
               "per block): FP8=1 builds only";
    if (!kLowpCutlassBuilt)
        return "this binary has no CUTLASS kernels (the FP8=1 build links them where make finds CUTLASS: make info; NO_CUTLASS=1 "
               "leaves them out)";
    if (!o->producers) return "the fused epilogues take over the GELU / GELU' producers: needs --fp8-producers 1 or 2";
    if (o->hp_wgrad) return "the fused epilogues write the transposed codes the FP8 wgrad reads: needs --fp8-hp-wgrad 0";
    return NULL;
}

// Register the linear layers of the model in the order its forward first uses them (each transformer block: qkv,
// attproj, fc, fcproj; the order the layers would register in anyway) and link each block's MLP pair: fc (hidden x C)
// makes fcproj's X (GELU), fcproj (C x hidden) makes fc's dY (GELU'). weights[4 * l + i]: block l's weights in that
// order, with shapes ocs[i] x cs[i]. Called once at attach (lowp_attach_model) when --fp8-cutlass 1.
static inline void gemm_lowp_link_mlp(GemmContext* ctx, const floatX* const* weights, int blocks, const int ocs[4], const int cs[4]) {
    if (!ctx->lowp) return;
    LowpState* s = lowp_state(ctx);
    for (int l = 0; l < blocks; l++) {
        LowpLayer* L[4];
        for (int i = 0; i < 4; i++) L[i] = lowp_layer(s, weights[4 * l + i], ocs[i], cs[i]);
        LowpLayer *fc = L[2], *fcproj = L[3];
        if (fcproj->C != fc->OC || fcproj->OC != fc->C)
            die("gemm_lowp_link_mlp: fc (%d x %d) and fcproj (%d x %d) are not an MLP pair", fc->OC, fc->C, fcproj->OC, fcproj->C);
        fc->gelu_next = fcproj;
        fcproj->dgelu_next = fc;
    }
}

// Whether the producing layer L makes its consumer's operand now (kind GELU: in its forward, consumer L->gelu_next;
// DGELU: in its dgrad, consumer L->dgelu_next): the path is on, the front offers the producer, the consumer runs FP8
// GEMMs (same N: the MLP pair) and this use of its role is past its delayed-scaling bootstrap (lowp_handover_makes).
// The producing layer itself is eligible.
static inline bool lowp_cutlass_takes(const LowpState* s, const LowpLayer* L, GemmDefer kind, const void* offered) {
    const LowpLayer* c = kind == GEMM_DEFER_GELU ? L->gelu_next : L->dgelu_next;
    const int role = kind == GEMM_DEFER_GELU ? LOWP_ROLE_X : LOWP_ROLE_DY;
    const bool delayed_training = s->opt.delayed > 0 && s->ctx->training;
    return c && lowp_handover_makes(s->opt.cutlass, offered != NULL, lowp_shape_ok(s, c->C, c->OC), delayed_training, c->uses[role]);
}

// The consumer's scale for the codes the epilogue is about to make (triple sc of the consumer c, role): under delayed
// scaling in training passes its history's (lowp_scale: the step the consumer's own quantization would take), returning
// its pending amax slot; else the speculative guess already in sc, returning the speculative amax slot.
static inline uint32_t* lowp_cutlass_scale(LowpState* s, LowpLayer* c, int role, float* sc, size_t n, FP8Kind kind, cudaStream_t st,
                                           bool* advanced) {
    *advanced = s->opt.delayed > 0 && s->ctx->training;
    if (*advanced) return lowp_scale<floatX>(s, c, role, sc, NULL, n, kind, NULL, st);
    return lowp_spec_amax_bits(&s->spec);
}

// The fc forward with the fused epilogue (lowp_cutlass_takes said yes): y (N, OC) = the BF16 pre-activation Z, and the
// consumer's X codes (N, OC) in g8, transposed in its xt, with its scale; a8 / xsc: this layer's X codes and scale
// triple, already made; bias: the 256-byte aligned copy (lowp_bias) or NULL. gelu_out: the GELU output the front names,
// written in BF16 only with keep_activations. Leaves the made deferral for the consumer.
static inline void lowp_cutlass_fc(LowpState* s, LowpLayer* L, floatX* y, floatX* gelu_out, const floatX* bias, const float* xsc, int N, int C,
                                   int OC, cudaStream_t st) {
    LowpLayer* c = L->gelu_next;
    const size_t n = (size_t)N * OC;  // (g8 holds it: the codes buffers have N max(C, OC) bytes, what the consumer needs too)
    lowp_grow(&c->xt, &c->xt_cap, n);
    float* sc = c->f + 2 * LOWP_TRIPLE;  // the consumer's X triple
    bool advanced;
    uint32_t* amax = lowp_cutlass_scale(s, c, LOWP_ROLE_X, sc, n, FP8_E4M3FN, st, &advanced);
#if defined(ENABLE_CUTLASS)
    cutlass_fp8_fc_forward(y, s->g8, c->xt, N, (float*)amax, s->a8, LOWP_INV(xsc), L->w_hi, LOWP_INV(L->f), bias, LOWP_SCALE(sc), N, C, OC,
                           st, LOWP_CUTLASS_FC);
#else
    (void)amax, (void)xsc, (void)bias, (void)C;
    die("gemm_lowp: --fp8-cutlass 1 without CUTLASS kernels (lowp_cutlass_refusal lets no such run start)");
#endif
    if (!advanced)
        lowp_speculative_finish(&s->spec, LowpSrcGelu{y, NULL}, N, OC, FP8_E4M3FN, s->g8, c->xt, LOWP_AMAX(sc), LOWP_SCALE(sc), LOWP_INV(sc),
                                st);
    if (s->ctx->keep_activations) gemm_gelu_apply<false>(gelu_out, y, n, st, NULL);  // the same values the codes are made of
    lowp_handover_make(&s->deferred, GEMM_DEFER_GELU, gelu_out, y, n, c, 0, advanced);
    s->cutlass_fc++;
    s->cutlass_advanced += advanced;
}

// The fcproj dgrad with the fused epilogue (lowp_cutlass_takes said yes): from this layer's dY codes (g8, scale triple
// gsc) and its transposed weight codes, the consumer's dY codes (N, C) in a8, transposed in gt8 (this layer's wgrad must
// have read gt8 already), with their scale, and the consumer's bias-gradient column sums in colpart; under current
// scaling also the BF16 dgrad into dinp (the speculative fallback's source). Leaves the made deferral for the consumer.
static inline void lowp_cutlass_dgrad(LowpState* s, LowpLayer* L, floatX* dinp, const floatX* pre, const float* gsc, int N, int C, int OC,
                                      cudaStream_t st) {
    LowpLayer* c = L->dgelu_next;
    const size_t n = (size_t)N * C;
    float* sc = c->f + 3 * LOWP_TRIPLE;  // the consumer's dY triple
    bool advanced;
    uint32_t* amax = lowp_cutlass_scale(s, c, LOWP_ROLE_DY, sc, n, FP8_E5M2, st, &advanced);
    const int prows = cutlass_fp8_dgelu_col_partial_rows(N);
    lowp_grow(&s->colpart, &s->colpart_cap, (size_t)prows * C);
#if defined(ENABLE_CUTLASS)
    cutlass_fp8_dgelu_dgrad(s->a8, s->gt8, N, (float*)amax, advanced ? NULL : dinp, s->colpart, s->g8, LOWP_INV(gsc), L->wt_hi,
                            LOWP_INV(L->f), pre, LOWP_SCALE(sc), N, C, OC, st, LOWP_CUTLASS_DGRAD);
#else
    (void)amax, (void)gsc, (void)OC;
    die("gemm_lowp: --fp8-cutlass 1 without CUTLASS kernels (lowp_cutlass_refusal lets no such run start)");
#endif
    if (!advanced)
        lowp_speculative_finish(&s->spec, LowpSrcDgelu{dinp, pre}, N, C, FP8_E5M2, s->a8, s->gt8, LOWP_AMAX(sc), LOWP_SCALE(sc), LOWP_INV(sc),
                                st);
    lowp_handover_make(&s->deferred, GEMM_DEFER_DGELU, dinp, pre, n, c, prows, advanced);
    s->cutlass_dgrad++;
    s->cutlass_advanced += advanced;
}

// What the call of layer L on operand x (n values; takes_codes: it runs FP8 GEMMs) does with the hand-over d it took
// (lowp_handover_use), counted for the report and the tests: made codes for this call are used (MADE); codes made for another
// call (a call sequence the model does not make) are computed in BF16 by the front's kernel (lowp_materialize: from Z,
// or from the stored dgrad) under current scaling (UNMADE), and stop the run under delayed scaling, where the producer
// already moved the consumer's scale history (STOP). NONE / OFFERED: nothing made; the caller goes on as without the path.
static inline LowpUse lowp_cutlass_use(LowpState* s, const LowpDeferred& d, bool takes_codes, const LowpLayer* L, const floatX* x,
                                       size_t n, cudaStream_t st) {
    const LowpUse u = lowp_handover_use(&d, takes_codes, L, x, n);
    if (u == LOWP_USE_MADE) s->cutlass_taken++;
    if (u == LOWP_USE_STOP)
        die("gemm_lowp: --fp8-cutlass 1: the %s codes made for the next call were not taken by it (the call after an fc forward "
            "must be its fcproj forward, after an fcproj backward its fc backward); run with --fp8-cutlass 0",
            d.kind == GEMM_DEFER_GELU ? "GELU" : "GELU'");
    if (u == LOWP_USE_UNMADE) {
        s->cutlass_unmade++;
        lowp_materialize(s, d, st);
    }
    return u;
}

// Frees the CUTLASS kernels' workspaces (the backend's destroy).
static inline void lowp_cutlass_free() {
#if defined(ENABLE_CUTLASS)
    cutlass_fp8_fc_free();
    cutlass_fp8_dgelu_free();
#endif
}
