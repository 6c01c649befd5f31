// test.cuh (FP8 / TCFP-12 module) - test_gpt2cu's reference states, tolerances and checks for the FP8=1
// and TCFP12=1 builds (llmc/modes/mode_test_defaults.cuh). The backend is attached with the knobs the references
// model (lowp_reference_options: per-tensor current scaling, FP8 wgrad, no warm-up; not the FP8 build's trainer
// defaults) but the producers at 2 (GELU, GELU' and the LayerNorm outputs quantized by their consumers: the same codes
// as the separate passes),
// and every activation is kept in BF16 (keep_activations) for the activation comparisons. In an FP8 build with the
// CUTLASS kernels, on a compute capability 9.0 GPU, everything is checked a second time with --fp8-cutlass 1 (more_states:
// the same states and tolerances; that the fused epilogues ran is checked too), see "--fp8-cutlass 1" below.
#pragma once

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/modes/mode_test_defaults.cuh"
#include "llmc/modes/lowp/mode.cuh"

// FP8 / TCFP-12 builds, two references.
// 1. The sanity bound: the BF16-weight reference (unquantized GEMMs). Every linear layer's
// product carries the E4M3 quantization of its input (SNR about 28.5 dB, i.e. 3.8% relative, per
// GEMM; llmc/kernels/gemm/gemm_fp8.cuh harness) and the gradients E5M2 (about 24 dB, 6%). The tolerances allow a few
// such errors in sequence; FP8_MIN_LOGIT_ERR checks that the FP8 GEMMs really ran (the BF16 build's
// logits error is 5.3e-3).
static constexpr double TOL_LOGITS = 0.15, TOL_LOSS = 1e-2, TOL_GRAD = 0.3, TOL_STEP = 2e-2, FP8_MIN_LOGIT_ERR = 1e-2;
static constexpr const char* DEFAULT_CKPT = "build/ref/gpt2_ref_bf16.bin";
static constexpr const char* DEFAULT_STATE = "build/ref/gpt2_ref_debug_state_bf16.bin";
// 2. The quantized references (check_lowp_refs): gpt2_reference.py --lowp-states computes the same model
// with each backend's recipe as build_model attaches it (lowp_reference_options: per-tensor current scaling with
// power-of-two scales, X and W E4M3, dY E5M2, FP8 wgrad, LM head in BF16; TCFP-12: W = W_hi + W_lo of the
// fp32 master weights, the W_lo GEMM first into the same BF16 output) and with this trainer's BF16
// storage of every activation and activation gradient and its attention kernel (dev/reference/lowp_ref.py).
// This build is compared with its own recipe's state (logits, loss, every gradient, step losses) at the
// LOWP_TOL_* tolerances, and must be closer to it than to the other recipe's state by a margin, for the
// logits and for all gradients together: (a) the L2 error against the other state over that against its
// own exceeds LOWP_MIN_RATIO, and (b) its position on the line from the other state (0) to its own (1),
// <a - other, own - other> / |own - other|^2, exceeds LOWP_MIN_POSITION. (b) is the robust one: the GPU's
// own differences from the reference (below) are mostly orthogonal to the line between the recipes, so
// they move the position little even where they shrink the ratio. A TCFP-12 build whose W_lo term were
// lost computes the FP8 recipe exactly (dev/test/test_lowp_reference.py): in the proxy below at position
// 0.03-0.22 with ratio 0.25-0.6, so it fails both, while it still passes the sanity bound above. (A build
// whose GEMMs ran in BF16 fails FP8_MIN_LOGIT_ERR instead: the unquantized state sits at position 0.72 /
// 0.70 (logits / gradients) towards TCFP-12 and 0.28 / 0.30 towards FP8.)
// Error model. Both sides quantize the same BF16 tensors with the same power-of-two scales, yet the states
// are not BF16-level references end to end: the GPU's fp32 summation orders and fast-math intrinsics
// (~1e-6 relative; more if the FP8 tensor cores accumulate more coarsely) flip a BF16 rounding in a small
// fraction of the stored values, every E4M3 / E5M2 quantization turns a one-ulp BF16 difference into a
// whole FP8 step in about 1/16 / 1/32 of those (16 / 32 BF16 values per FP8 step), and with 8 quantized
// GEMMs in series in the forward and 8 more (dgrad, E5M2 gradients) in the backward such differences grow
// layer by layer towards re-drawn quantization noise. A CPU proxy of the GPU (dev/reference/lowp_proxy.py:
// this reference's model in float32 with relative noise before every BF16 rounding but those of exact sums,
// stochastically rounded BF16 parameters after each step; it reproduces the measured BF16 build against
// its reference, logits 5.5e-3, and the FP8 / TCFP-12 builds against the unquantized one, 5.0e-2 / 3.55e-2
// against 5.1e-2 / 3.6e-2 measured) gives, FP8 and TCFP-12 proxies, against the state of their own recipe
// (`python3 dev/reference/lowp_proxy.py --noise N --recipes fp8,tcfp12`, 1-2 seeds per row):
//   noise  logits          loss    grads all  worst tensor  steps     position logits, grads  L2 ratio
//   0      1.6-1.8e-5      1e-7    1.2e-2     3.3-3.9e-2    5.9e-4    (float32 alone: the forward agrees)
//   1e-6   1.2-1.4e-2      3e-5    2.8-3.0e-2 5.3-6.0e-2    7.2e-4    0.97, 0.88-0.90       4.0, 2.1
//   1e-5   2.0-2.1e-2      6e-6    3.5e-2     6.2e-2        6.4e-4    0.93, 0.84            2.6, 1.75
//   1e-4   3.0-3.1e-2      1.6e-5  3.9-4.1e-2 6.7-7.0e-2    8.0e-4    0.84, 0.78-0.79       1.75, 1.5
//   1e-3   3.5e-2 (FP8)    2.6e-5  4.3e-2     6.9e-2        6.5e-4    0.80, 0.75            1.57, 1.41
// and against the other recipe's state logits 5.4e-2, gradients 6.1e-2, worst tensor 9.6e-2, steps 1.1e-3
// (the two states are 5.4e-2 / 6.1e-2 apart; FP8 5.0e-2 / 6.0e-2 and TCFP-12 3.55e-2 / 4.6e-2 from the
// unquantized state). The differences saturate: at 1e-3, far beyond fp32 arithmetic, every check still
// passes. The tolerances sit above the 1e-3 row and, for the logits, below the other recipe. The first H100
// run (2026-11-26, nvidia-h100-x1) sits at the 1e-4 row: against its own state FP8 / TCFP-12 logits
// 2.4e-2 / 3.1e-2, worst gradient tensor 6.6e-2 / 7.1e-2, steps 7.9e-4 / 8.9e-4; positions 0.91 / 0.84
// (logits) and 0.81 / 0.78 (gradients), ratios 2.26 / 1.75 and 1.62 / 1.52. So these are not BF16-level
// tolerances (the issue asked for them; the noise model above says why they cannot be) and their margins
// are 1.3-2.5x, not 3x: a wider LOWP_TOL_LOGITS would pass the other recipe's state; the recipe check
// (position, ratio) is what tells the recipes apart. The runs are bit-reproducible on one GPU and toolkit.
// Step losses do not tell the recipes apart (10 AdamW steps blur them): LOWP_TOL_STEP only bounds them.
// --fp8-cutlass 1 (llmc/modes/lowp/lowp_cutlass.cuh) changes two GEMMs per block: the fc forward and the fcproj dgrad run
// on CUTLASS with fast accumulation (no fp32 promotion inside the tensor cores' K loop) instead of cuBLASLt with it; the
// codes made of their BF16 outputs are today's producers' bit for bit (dev/cuda/cutlass_fp8*.cu). So the only new
// difference from the quantized reference is the accumulation of those two products, and the same tolerances apply
// (not widened): Hopper's FP8 tensor cores keep about 14 mantissa bits when they accumulate without promotion (DeepSeek-V3
// report, 2024, on H800), a relative error of about 2^-14 = 6e-5 per k-step of 32 products, K / 32 = 4 steps at this
// test's K = 128 (fc forward: C = 128; fcproj dgrad: OC = 128): at most about 2.4e-4 of Σ|x w| per output before its
// BF16 rounding, inside the proxy's 1e-4 - 1e-3 rows above, where every check passes with the margins shown (the kernels'
// harnesses bound the same error by 2^-10 Σ|x w| per element at K = 768 and 1024). The recipe check (position, ratio)
// still separates FP8 from TCFP-12 there (0.84 / 0.80 > 0.6 in the proxy).
// usage in these builds also: test_gpt2cu checkpoint debug_state fp8_state tcfp12_state.
static const int LOWP_WORD_FP8 = 1, LOWP_WORD_TCFP12 = 2;  // debug-state header word 15 of the quantized states
static const char* DEFAULT_FP8_STATE = "build/ref/gpt2_ref_debug_state_fp8.bin";
static const char* DEFAULT_TCFP12_STATE = "build/ref/gpt2_ref_debug_state_tcfp12.bin";
static const double LOWP_TOL_LOGITS = 4e-2, LOWP_TOL_LOSS = 1e-4, LOWP_TOL_GRAD = 0.1, LOWP_TOL_STEP = 2e-3;
static const double LOWP_MIN_RATIO = 1.25, LOWP_MIN_POSITION = 0.6;

// The two quantized reference states (--lowp-states): this build's recipe and the other one.
struct LowpRefs {
    const char *own_path, *other_path, *own_name, *other_name;
    DebugState own, other;
    int loaded;  // both read and checked; 0: a file is missing (reported as a failure, checks skipped)
};

// Read one quantized state into out; it must be recipe `word` (header word 15), from the bf16 weights with
// no SF16 / TensorCast mode, on the batch and step count of the main state ref. Returns 0 (after printing
// a FAIL row) when the file does not exist; dies on any other mismatch.
static int lowp_state_load(const char* path, int word, const char* name, const GPT2Config* cfg, const DebugState* ref,
                           DebugState* out) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        printf("  %s state %s: missing (python3 dev/reference/gpt2_reference.py --out-dir build/ref --lowp-states)  FAIL\n",
               name, path);
        record(0);
        return 0;
    }
    fclose(f);
    debug_state_read(path, cfg, out);
    const int got = out->lowp_mode;  // header word 15
    const size_t BT = (size_t)ref->B * ref->T;
    if (got != word || out->sf16_mode != 0 || !out->bf16_weights || out->B != ref->B || out->T != ref->T ||
        out->num_steps != ref->num_steps || memcmp(out->x, ref->x, BT * sizeof(int)) != 0 || memcmp(out->y, ref->y, BT * sizeof(int)) != 0)
        die("%s: expected the %s state (header word 15 = %d, mode 0, bf16 weights) of this batch and step count; found word 15 = %d, "
            "mode %d, bf16 %d, B=%d T=%d, %d steps (or other tokens)", path, name, word, got, out->sf16_mode, out->bf16_weights, out->B,
            out->T, out->num_steps);
    return 1;
}

// Both quantized states, this build's recipe first.
static void lowp_refs_load(LowpRefs* r, const char* fp8_path, const char* tcfp12_path, const GPT2Config* cfg, const DebugState* ref) {
    memset(r, 0, sizeof(*r));
    const bool tcfp = kLowpTCFP12;
    r->own_path = tcfp ? tcfp12_path : fp8_path;
    r->other_path = tcfp ? fp8_path : tcfp12_path;
    r->own_name = tcfp ? "TCFP-12" : "FP8";
    r->other_name = tcfp ? "FP8" : "TCFP-12";
    const int own_ok = lowp_state_load(r->own_path, tcfp ? LOWP_WORD_TCFP12 : LOWP_WORD_FP8, r->own_name, cfg, ref, &r->own);
    const int other_ok = lowp_state_load(r->other_path, tcfp ? LOWP_WORD_FP8 : LOWP_WORD_TCFP12, r->other_name, cfg, ref, &r->other);
    r->loaded = own_ok && other_ok;
    if (!r->loaded) {
        if (own_ok) debug_state_free(&r->own);
        if (other_ok) debug_state_free(&r->other);
    }
}

static void lowp_refs_free(LowpRefs* r) {
    if (!r->loaded) return;
    debug_state_free(&r->own);
    debug_state_free(&r->other);
    r->loaded = 0;
}

// Position of a on the line from x (0) to o (1), n values: <a - x, o - x> / |o - x|^2 (0 when x == o).
static double line_position(const float* a, const float* x, const float* o, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)o[i] - (double)x[i];
        num += ((double)a[i] - (double)x[i]) * d;
        den += d * d;
    }
    return den > 0 ? num / den : 0.0;
}

// One recipe-check row for `what` (logits or all gradients, n values of a): error against the own state o
// and the other state x, their ratio (> LOWP_MIN_RATIO) and a's position from x to o (> LOWP_MIN_POSITION).
static void lowp_recipe_row(const char* what, const LowpRefs* r, const float* a, const float* o, const float* x, size_t n) {
    const double eo = rel_l2(a, o, n), ex = rel_l2(a, x, n), pos = line_position(a, x, o, n);
    const int ok_r = ex > LOWP_MIN_RATIO * eo, ok_p = pos > LOWP_MIN_POSITION;
    printf("    %-9s error vs %s %.3e, vs %s %.3e: ratio %.2f > %.2f  %s; position %.3f > %.2f  %s\n", what, r->other_name, ex,
           r->own_name, eo, ex / eo, LOWP_MIN_RATIO, ok_r ? "ok" : "FAIL", pos, LOWP_MIN_POSITION, ok_p ? "ok" : "FAIL");
    record(ok_r);
    record(ok_p);
}

// This build's logits (B*T*V, unpadded), loss and gradients against the quantized state of its own recipe
// (LOWP_TOL_*), then the recipe check (lowp_recipe_row) for the logits and all gradients. Prints every
// error, the references' distances from each other and from the unquantized state `plain`.
static void check_lowp_refs(const LowpRefs* r, const DebugState* plain, const float* logits, float loss, const float* grads,
                            const size_t* param_sizes) {
    if (!r->loaded) return;
    const size_t nl = (size_t)plain->B * plain->T * plain->V;
    size_t np = 0;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) np += param_sizes[t];
    printf("  vs the %s reference %s (the same quantization):\n", r->own_name, r->own_path);
    compare_row("logits", logits, r->own.logits, nl, LOWP_TOL_LOGITS);
    compare_row("loss", &loss, &r->own.loss, 1, LOWP_TOL_LOSS);
    size_t off = 0;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        char name[32];
        snprintf(name, sizeof(name), "d%s", PARAM_TENSOR_NAMES[t]);
        compare_row(name, grads + off, r->own.grads + off, param_sizes[t], LOWP_TOL_GRAD);
        off += param_sizes[t];
    }
    printf("  recipe check (vs the %s reference %s; position: 0 at the %s state, 1 at the %s one):\n", r->other_name,
           r->other_path, r->other_name, r->own_name);
    printf("    references apart: %s vs %s logits %.3e, gradients %.3e; vs unquantized: %s %.3e / %.3e, %s %.3e / %.3e\n",
           r->own_name, r->other_name, rel_l2(r->own.logits, r->other.logits, nl), rel_l2(r->own.grads, r->other.grads, np),
           r->own_name, rel_l2(r->own.logits, plain->logits, nl), rel_l2(r->own.grads, plain->grads, np), r->other_name,
           rel_l2(r->other.logits, plain->logits, nl), rel_l2(r->other.grads, plain->grads, np));
    lowp_recipe_row("logits", r, logits, r->own.logits, r->other.logits, nl);
    lowp_recipe_row("gradients", r, grads, r->own.grads, r->other.grads, np);
}

// max_i |a_i - ref_i| / |ref_i| over n losses; a NaN stays (and fails every tolerance).
static double loss_max_rel(const float* a, const float* ref, int n) {
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - ref[i]) / fabs((double)ref[i]);
        worst = e > worst || isnan(e) ? e : worst;
    }
    return worst;
}

// The step losses of this build's training run against both quantized states (pass / fail on its own).
static void check_lowp_steps(const LowpRefs* r, const float* losses) {
    if (!r->loaded) return;
    const double worst = loss_max_rel(losses, r->own.step_losses, r->own.num_steps);
    const double worst_other = loss_max_rel(losses, r->other.step_losses, r->own.num_steps);
    const int ok = worst <= LOWP_TOL_STEP;
    printf("  step losses vs the %s reference: max rel %.2e (vs %s: %.2e)  tol %.1e  %s\n", r->own_name, worst, r->other_name,
           worst_other, LOWP_TOL_STEP, ok ? "ok" : "FAIL");
    record(ok);
}

struct ModeTest : ModeTestDefaults {
    static constexpr TestTolerances kTol = {TOL_LOGITS, TOL_LOSS, TOL_GRAD, TOL_STEP};
    static constexpr const char* kCheckpoint = DEFAULT_CKPT;
    static constexpr const char* kState = DEFAULT_STATE;
    static constexpr int kStateMode = 0;  // header word 14: the unquantized (no boundary simulation) state
    static constexpr int kExtraArgs = 2;
    static constexpr const char* kExtraUsage = " [fp8_state tcfp12_state]";

    const char *fp8_path = DEFAULT_FP8_STATE, *tcfp12_path = DEFAULT_TCFP12_STATE;
    LowpRefs lowp = {};
    float* losses = NULL;  // the first training run's step losses (check_lowp_steps)
    LowpOptions opt = lowp_reference_options();  // what attach uses (more_states: --fp8-cutlass 1)
    GPT2* attached = NULL;                      // the model attach saw last (check_gradients: the comparison's own model)

    void take_args(char** extra) {
        fp8_path = extra[0];
        tcfp12_path = extra[1];
    }
    void attach(GPT2* m, const GPT2Config& cfg, int B, int T) {
        (void)cfg, (void)B, (void)T;
        // the LayerNorm producers too (--fp8-producers 2, not the default): the same codes as 1 (dev/cuda/lowp_producers.cu),
        // so the same references, and every check below runs through them
        opt.producers = 2;
        lowp_attach_model(m, &opt, 0);
        m->keep_activations = 1;  // the activation comparisons read the GELU and LayerNorm outputs the producers would not store
        attached = m;
    }
    // The FP8 GEMMs really ran: the logits are further from the unquantized state than BF16 GEMMs put them.
    void check_forward(double logits_err) {
        printf("  %s GEMMs active: logits error %.3e > %.0e (BF16 GEMMs give 5.3e-3)  %s\n", GEMM_LOWP_MODE_NAME, logits_err,
               FP8_MIN_LOGIT_ERR, logits_err > FP8_MIN_LOGIT_ERR ? "ok" : "FAIL");
        record(logits_err > FP8_MIN_LOGIT_ERR);
    }
    void check_gradients(const DebugState& ref, const GPT2Config& cfg, const float* logits, float loss, const float* grads,
                         const size_t* param_sizes) {
        finish_steps();  // the step losses of the comparison before (more_states)
        {  // the LayerNorm outputs were computed inside their consumers' quantization (--fp8-producers 2, set by attach)
            const LowpState* s = lowp_state(&attached->gemm);
            const int ok = s->ln_taken > 0;
            printf("  LayerNorm producers ran: %lld LayerNorm outputs quantized by their consumers  %s\n", s->ln_taken, ok ? "ok" : "FAIL");
            record(ok);
        }
        if (opt.cutlass) {  // the fused epilogues really ran (the evaluation forward, then forward + backward)
            const LowpState* s = lowp_state(&attached->gemm);
            const int ok = s->cutlass_fc > 0 && s->cutlass_dgrad > 0;
            printf("  fused CUTLASS epilogues ran: %lld fc forwards, %lld fcproj dgrads  %s\n", s->cutlass_fc, s->cutlass_dgrad,
                   ok ? "ok" : "FAIL");
            record(ok);
        }
        lowp_refs_load(&lowp, fp8_path, tcfp12_path, &cfg, &ref);
        check_lowp_refs(&lowp, &ref, logits, loss, grads, param_sizes);
        losses = (float*)malloc_check((size_t)(ref.num_steps > 0 ? ref.num_steps : 1) * sizeof(float));
    }
    void step_loss(int step, float loss) { losses[step] = loss; }
    // The step losses of the last comparison against the quantized states, then its references freed (once).
    void finish_steps() {
        if (!losses) return;
        check_lowp_steps(&lowp, losses);
        free(losses);
        losses = NULL;
        lowp_refs_free(&lowp);
    }
    // Why --fp8-cutlass 1 is not checked here, or NULL: FP8 builds with the CUTLASS kernels on a compute capability 9.0 GPU.
    static const char* cutlass_skipped() {
        if (kLowpTCFP12) return "a TCFP-12 build";
        if (!kLowpCutlassBuilt) return "this build has no CUTLASS kernels: make info";
        return cuda_current_cc() != 90 ? "the CUTLASS kernels need a compute capability 9.0 GPU" : NULL;
    }
    // FP8 builds with the CUTLASS kernels: the whole comparison again with --fp8-cutlass 1 (same states, same tolerances:
    // the header says why), where the GPU runs them (compute capability 9.0); elsewhere a line says it was not run.
    void more_states(CheckStateFn check) {
        if (kLowpTCFP12) return;
        if (const char* why = cutlass_skipped()) {
            printf("\n  --fp8-cutlass 1: not checked (%s)\n", why);
            return;
        }
        printf("\n  --fp8-cutlass 1: fc forward and fcproj dgrad as CUTLASS GEMMs with fused epilogues (fast accumulation)\n");
        opt.cutlass = 1;
        check(kCheckpoint, kState, kTol);
        opt.cutlass = 0;
    }
    void finish(const char* ckpt, const DebugState& ref, BuildModelFn build) {
        finish_steps();
        if (!kLowpTCFP12 && !cutlass_skipped()) check_cutlass_delayed(ckpt, ref, build);
        check_lm_head_rows(ckpt, ref, build);
    }

    // --fp8-lm-head 1 with --fp8-lm-head-rows R < B*T (the LM head's backward in row chunks, gemm_lowp.cuh
    // lowp_backward_chunked) against R = 0 (one call), under current and under delayed scaling (history 4): on a fresh
    // model each, one forward + backward, then LM_HEAD_STEPS training steps on the reference batch. The chunks ran
    // (ceil(B*T / R) per backward). The codes are the one-call backward's bit for bit (the scale of the whole dY, the same
    // rounding), dX is the same dot products (cuBLASLt may pick another algorithm for the chunk's rows) and dW the same
    // products summed in another fp32 order, so the two differ only where a value crosses a BF16 rounding midpoint (and
    // what the E5M2 codes downstream make of that): dwte and all gradients within LM_HEAD_TOL relative L2, a hundredth of
    // what a lost chunk, a wrong row offset or a wrong X column block gives (rel L2 of order 1 in dwte); the step losses
    // within LOWP_TOL_STEP.
    static constexpr int LM_HEAD_STEPS = 3;
    static constexpr double LM_HEAD_TOL = 1e-2;
    void check_lm_head_rows(const char* ckpt, const DebugState& ref, BuildModelFn build) {
        const int B = ref.B, T = ref.T, N = B * T;
        const int R = 16 * (N / 80 > 0 ? N / 80 : 1);  // five chunks or more, the last one partial unless R divides N
        if (N % 16 != 0 || R >= N) {
            printf("\n  --fp8-lm-head-rows: not checked (B*T = %d: no multiple of 16 below it to chunk by)\n", N);
            return;
        }
        const long long chunks = (N + R - 1) / R;
        const LowpOptions saved = opt;
        for (int delayed = 0; delayed <= 4; delayed += 4) {
            printf("\n  --fp8-lm-head 1 --fp8-lm-head-rows %d (%lld chunks of B*T = %d) against 0%s:\n", R, chunks, N,
                   delayed ? ", --fp8-delayed 4" : "");
            float* grads[2];
            float loss[2][LM_HEAD_STEPS];
            long long ran[2];
            size_t nparams = 0, nwte = 0;
            for (int c = 0; c < 2; c++) {
                opt = lowp_reference_options();
                opt.lm_head = 1;
                opt.delayed = delayed;
                opt.lm_head_rows = c ? R : 0;
                GPT2 m;
                build(&m, ckpt, B, T);
                gpt2_zero_grad(&m);
                gpt2_forward_backward(&m, ref.x, ref.y, B, T, 1.0f);
                nparams = m.num_parameters;
                nwte = m.param_sizes[0];
                grads[c] = download_floatX(m.grads_memory, nparams);
                for (int step = 0; step < LM_HEAD_STEPS; step++) {
                    gpt2_zero_grad(&m);
                    loss[c][step] = gpt2_forward_backward(&m, ref.x, ref.y, B, T, 1.0f);
                    gpt2_update(&m, ref.lr, ref.beta1, ref.beta2, ref.eps, ref.weight_decay, ref.grad_clip, step + 1);
                }
                ran[c] = lowp_state(&m.gemm)->lm_head_chunks;
                gpt2_free(&m);
            }
            const long long want = chunks * (1 + LM_HEAD_STEPS);
            printf("    row chunks run: %lld (expected %lld), %lld with rows 0 (expected 0)  %s\n", ran[1], want, ran[0],
                   ran[1] == want && ran[0] == 0 ? "ok" : "FAIL");
            record(ran[1] == want && ran[0] == 0);
            record_close("dwte", grads[1], grads[0], nwte, LM_HEAD_TOL, "one call");
            record_close("grads", grads[1], grads[0], nparams, LM_HEAD_TOL, "one call");
            const double worst = loss_max_rel(loss[1], loss[0], LM_HEAD_STEPS);
            printf("    %d step losses against one call: max rel %.2e  tol %.1e  %s\n", LM_HEAD_STEPS, worst, LOWP_TOL_STEP,
                   worst <= LOWP_TOL_STEP ? "ok" : "FAIL");
            record(worst <= LOWP_TOL_STEP);
            free(grads[0]);
            free(grads[1]);
        }
        opt = saved;
    }

    // --fp8-cutlass 1 under delayed scaling (history 4) after a one-step BF16 warm-up, with an evaluation forward before
    // every step and two micro-batches per step: the call sequence that stopped the trainer at its second FP8 step while
    // taking the hand-over left its `made` flag behind (lowp_handover_take; the host model of every such sequence:
    // dev/test/test_lowp_handover.c). The same CUTLASS_DELAYED_STEPS steps on the reference batch with --fp8-cutlass 0 and
    // 1: the run finishes; the step and evaluation losses agree within LOWP_TOL_STEP (the recipe is the same, only the two
    // fused GEMMs' accumulation differs, as in the comparison above); the fused epilogues ran as often as the sequence has
    // fc forwards and fcproj dgrads past the delayed-scaling bootstrap (per block: each evaluation forward from the first FP8
    // step on makes its GELU codes under current scaling; the first FP8 training pass makes none, it is the bootstrap; every
    // later one makes both under delayed scaling), every made hand-over was taken by its consumer, and every layer's
    // delayed-scaling use counts are those of --fp8-cutlass 0 (the producer took each consumer's step once).
    static constexpr int CUTLASS_DELAYED_STEPS = 4, CUTLASS_DELAYED_MICRO = 2;
    void check_cutlass_delayed(const char* ckpt, const DebugState& ref, BuildModelFn build) {
        const int B = ref.B, T = ref.T, S = CUTLASS_DELAYED_STEPS, M = CUTLASS_DELAYED_MICRO;
        printf("\n  --fp8-cutlass 1 with --fp8-delayed 4 --fp8-warmup 1, an evaluation forward before each step, %d micro-batches:\n", M);
        const LowpOptions saved = opt;
        float loss[2][2 * CUTLASS_DELAYED_STEPS];  // per run: the evaluation and the training loss of each step
        long long uses[2][LOWP_MAX_LAYERS][3];
        ptrdiff_t where[2][LOWP_MAX_LAYERS];  // each layer's weight offset in the parameters (the layers' order may differ)
        int layers[2] = {0, 0}, blocks = 0;
        long long fc = 0, dgrad = 0, advanced = 0, taken = 0, unmade = 0;
        for (int c = 0; c < 2; c++) {
            opt = lowp_reference_options();
            opt.delayed = 4;
            opt.warmup = 1;
            opt.cutlass = c;
            GPT2 m;
            build(&m, ckpt, B, T);
            blocks = m.config.num_layers;
            for (int step = 0; step < S; step++) {
                loss[c][2 * step] = gpt2_evaluate(&m, ref.x, ref.y, B, T);
                gpt2_zero_grad(&m);
                double sum = 0.0;
                for (int micro = 0; micro < M; micro++) sum += gpt2_forward_backward(&m, ref.x, ref.y, B, T, 1.0f / M);
                loss[c][2 * step + 1] = (float)(sum / M);
                gpt2_update(&m, ref.lr, ref.beta1, ref.beta2, ref.eps, ref.weight_decay, ref.grad_clip, step + 1);
            }
            const LowpState* s = lowp_state(&m.gemm);
            layers[c] = s->num_layers;
            for (int i = 0; i < s->num_layers; i++) {
                memcpy(uses[c][i], s->layers[i].uses, sizeof(uses[c][i]));
                where[c][i] = s->layers[i].weight - s->params_base;
            }
            if (c == 1) fc = s->cutlass_fc, dgrad = s->cutlass_dgrad, advanced = s->cutlass_advanced, taken = s->cutlass_taken,
                        unmade = s->cutlass_unmade;
            gpt2_free(&m);
        }
        opt = saved;
        const double worst = loss_max_rel(loss[1], loss[0], 2 * S);
        const int ok_loss = worst <= LOWP_TOL_STEP;
        printf("    losses (%d evaluations, %d steps) against --fp8-cutlass 0: max rel %.2e  tol %.1e  %s\n", S, S, worst, LOWP_TOL_STEP,
               ok_loss ? "ok" : "FAIL");
        record(ok_loss);
        const long long training = (long long)blocks * (M * (S - 1) - 1);  // fused training passes' fc forwards (= fcproj dgrads)
        const long long want_fc = (long long)blocks * (S - 1) + training;
        const int ok_counts = fc == want_fc && dgrad == training && advanced == 2 * training && taken == fc + dgrad && unmade == 0;
        printf("    fused epilogues: %lld fc forwards (expected %lld), %lld fcproj dgrads (%lld), %lld under delayed scaling (%lld); %lld "
               "taken by their consumers, %lld not  %s\n", fc, want_fc, dgrad, training, advanced, 2 * training, taken, unmade,
               ok_counts ? "ok" : "FAIL");
        record(ok_counts);
        int same = layers[0] == layers[1];
        for (int i = 0; same && i < layers[1]; i++) {
            int j = 0;
            while (j < layers[0] && where[0][j] != where[1][i]) j++;
            same = j < layers[0] && memcmp(uses[0][j], uses[1][i], sizeof(uses[1][i])) == 0;
        }
        printf("    delayed-scaling use counts of all %d layers equal to --fp8-cutlass 0's  %s\n", layers[1], same ? "ok" : "FAIL");
        record(same);
    }
};
