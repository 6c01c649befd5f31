/*
test_gpt2.cu - the CUDA trainer of this build against the PyTorch reference state.

Checks, for the build's precision (BF16 / FP16 / FP32):
  - forward on the reference batch: logits and loss,
  - backward: every parameter gradient,
  - the reference's training steps (clip + AdamW on the same batch): the loss before each step,
  - determinism: two forward+backward passes give bit-identical gradients, and a second model
    trained the same steps reaches bit-identical parameters.
The BF16 build is compared with the state computed from bf16-rounded weights (the weights it
actually holds), the others with the fp32 state. The reference is float64, so the errors printed
are this build's. Metric: ‖a − ref‖₂ / ‖ref‖₂ per tensor, plus the max absolute error.

Tolerances (per build, below) are 3-4x the errors measured on an H200 (2026-11-21, reference state
of dev/reference with its defaults: L=2 C=128 NH=4 B=4 T=64), which sit where the storage precision
puts them: BF16 keeps 8 significant bits (unit roundoff 2^-9 = 2e-3; measured: logits 5.3e-3,
gradients <= 5.0e-3, step losses <= 1.4e-4), FP16 11 bits (7.8e-4, 7.6e-4, 5.3e-5), FP32 is limited
by summation order and --use_fast_math intrinsics (9.2e-7, 6.7e-7, 1.2e-7).

usage: test_gpt2cu [checkpoint debug_state]     (defaults under build/ref/, see above; the TensorCast,
FP8 and TCFP-12 builds take more states, see their sections)
Ends with `N passed, N failed`; exit status 1 if anything failed.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/core/utils.h"
#include "llmc/model/gpt2_config.h"
#include "llmc/model/checkpoint.h"
#include "llmc/obs/debug_state.h"
#include "llmc/model/model.cuh"

#if defined(ENABLE_FP32)
static const double TOL_LOGITS = 4e-6, TOL_LOSS = 1e-6, TOL_GRAD = 3e-6, TOL_STEP = 1e-6;
static const char* DEFAULT_CKPT = "build/ref/gpt2_ref.bin";
static const char* DEFAULT_STATE = "build/ref/gpt2_ref_debug_state.bin";
#elif defined(ENABLE_FP16)
static const double TOL_LOGITS = 3e-3, TOL_LOSS = 1e-4, TOL_GRAD = 3e-3, TOL_STEP = 2e-4;
static const char* DEFAULT_CKPT = "build/ref/gpt2_ref.bin";
static const char* DEFAULT_STATE = "build/ref/gpt2_ref_debug_state.bin";
#elif defined(ENABLE_Q115)
// SF16 builds are compared with the reference that simulates the same Q1.15 boundaries
// (dev/reference --sf16), on the bf16-rounded weights.
static const double TOL_LOGITS = 2e-2, TOL_LOSS = 1e-3, TOL_GRAD = 3e-2, TOL_STEP = 2e-3;
static const char* DEFAULT_CKPT = "build/ref/gpt2_ref_bf16.bin";
#if defined(SF16_TRUE_FORWARD)
static const char* DEFAULT_STATE = "build/ref/gpt2_ref_debug_state_q115_tf.bin";
#else
static const char* DEFAULT_STATE = "build/ref/gpt2_ref_debug_state_q115.bin";
#endif
#elif defined(ENABLE_TCAST)
// TensorCast build (TCAST=1, doc/TCAST.md), two checks:
// 1. Under the fixed plan TCAST_TEST_*, against the reference that applies the same casts
//    (dev/reference/gpt2_reference.py --tcast-states: header word 14 = 3, bf16-rounded weights). The plan
//    MUST MATCH TCAST_PLAN in dev/reference/gpt2_reference.py (dev/test/test_reference.py compares the
//    three texts): MXFP8 E4M3 at the encoder output and on every linear layer's weight operand (forward
//    and dgrad), round to nearest even. Only these because they are the casts whose inputs the GPU and
//    the float64 reference share exactly (the BF16 weights, the wte + wpe sums): any other cast turns the
//    GPU's fp32 / BF16-level differences into whole MX steps wherever they straddle a rounding midpoint,
//    and a few such casts in series put the GPU as far from the cast reference as from the uncast one
//    (CPU proxy of this build, logits: all sites + x, w, dy 9.2e-2 vs 1.06e-1 from the uncast reference;
//    this plan 0.5-1e-2 vs 5e-2; TCAST_PLAN's comment has the table). check_tcast_active then asks for
//    errors against the uncast BF16 reference (gpt2_ref_debug_state_bf16.bin) clearly above those
//    against the cast one (as FP8_MIN_LOGIT_ERR below does for FP8).
// 2. check_tcast_grid: a forward under a full plan (every site the test model's trainer can cast, all
//    three operands); every stored site tensor must be a fixed point of its site's cast (exact: a cast
//    tensor is on its MX grid, an uncast BF16 tensor practically never).
// usage in this build also: test_gpt2cu checkpoint debug_state uncast_debug_state (the third for
// check_tcast_active; default DEFAULT_UNCAST_STATE).
#include "llmc/modes/tcast/tcast_config.h"
static const char* TCAST_TEST_CAST = "encoder_out=mxfp8e4";
static const char* TCAST_TEST_CAST_GEMM = "w=mxfp8e4";
static const int TCAST_TEST_LM_HEAD = 0;
// Tolerances: 3-4x the errors of the first H100 run (2026-11-26, nvidia-h100-x1, build from f5cfd57+):
// logits 5.2e-3, loss 2.5e-6, gradients 5.0e-3 per tensor at most (4.2e-3 dwte), step losses 8.2e-4 at
// most (step 3; the casts turn fp32-level differences near a rounding boundary into whole quanta, so the
// steps drift more than in the BF16 build's 1.4e-4). A CPU proxy (float32 arithmetic, BF16 storage of
// every stored activation and gradient) had predicted logits 5.2e-3 to 1.0e-2 and gradients <= 1.0e-2.
static const double TOL_LOGITS = 2e-2, TOL_LOSS = 1e-4, TOL_GRAD = 2e-2, TOL_STEP = 2.5e-3;
// check_tcast_active: errors against the uncast reference / errors against the cast reference must
// exceed this for the logits and for all gradients together (H100: 9.5 and 12.7; proxy: 5-9.6 and 6.5-9.3).
static const double TCAST_MIN_UNCAST_RATIO = 3.0;
// check_tcast_grid's full plan: every site the trainer casts after storing a tensor, in formats that
// differ between sites (a site cast to another site's format shows), the attention sites excepted (the
// attention kernels cast only for head sizes 64 and 128); all three GEMM operands.
static const char* TCAST_GRID_CAST =
    "encoder_out=mxfp8e4,layernorm_out=mxfp6e3,residual_out=mxfp8e5,matmul_out=mxfp8e4,gelu_out=mxfp6e2,logits=mxfp8e4";
static const char* TCAST_GRID_CAST_GEMM = "x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5";
static const char* DEFAULT_CKPT = "build/ref/gpt2_ref_bf16.bin";
static const char* DEFAULT_STATE = "build/ref/gpt2_ref_debug_state_tcast.bin";
static const char* DEFAULT_UNCAST_STATE = "build/ref/gpt2_ref_debug_state_bf16.bin";
// The two plans, parsed and checked as the trainer parses --cast / --cast-gemm / --cast-lm-head (static:
// they outlive every model of this test; gpt2_attach_tcast may keep the pointer), and the one build_model
// attaches.
static TcastPlan g_plan_fixed, g_plan_grid;
static const TcastPlan* g_tcast_plan = &g_plan_fixed;
static void tcast_test_plan(TcastPlan* plan, const char* cast, const char* cast_gemm, int lm_head, const GPT2Config* cfg, int B,
                            int T) {
    TcastOptions o = {cast, cast_gemm, lm_head, 0};
    tcast_plan_init(plan, &o);
    tcast_plan_check_shapes(plan, cfg->channels, cfg->padded_vocab_size, B, T);
}
#elif GEMM_LOWP
// FP8 / TCFP-12 builds, two references.
// 1. The sanity bound: the BF16-weight reference (unquantized GEMMs). Every linear layer's
// product carries the E4M3 quantization of its input (SNR about 28.5 dB, i.e. 3.8% relative, per
// GEMM; llmc/kernels/gemm/gemm_fp8.cuh harness) and the gradients E5M2 (about 24 dB, 6%). The tolerances allow a few
// such errors in sequence; FP8_MIN_LOGIT_ERR checks that the FP8 GEMMs really ran (the BF16 build's
// logits error is 5.3e-3).
static const double TOL_LOGITS = 0.15, TOL_LOSS = 1e-2, TOL_GRAD = 0.3, TOL_STEP = 2e-2, FP8_MIN_LOGIT_ERR = 1e-2;
static const char* DEFAULT_CKPT = "build/ref/gpt2_ref_bf16.bin";
static const char* DEFAULT_STATE = "build/ref/gpt2_ref_debug_state_bf16.bin";
// 2. The quantized references (check_lowp_refs): gpt2_reference.py --lowp-states computes the same model
// with each backend's recipe as build_model attaches it (LowpOptions{}: per-tensor current scaling with
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
// usage in these builds also: test_gpt2cu checkpoint debug_state fp8_state tcfp12_state.
static const int LOWP_WORD_FP8 = 1, LOWP_WORD_TCFP12 = 2;  // debug-state header word 15 of the quantized states
static const char* DEFAULT_FP8_STATE = "build/ref/gpt2_ref_debug_state_fp8.bin";
static const char* DEFAULT_TCFP12_STATE = "build/ref/gpt2_ref_debug_state_tcfp12.bin";
static const double LOWP_TOL_LOGITS = 4e-2, LOWP_TOL_LOSS = 1e-4, LOWP_TOL_GRAD = 0.1, LOWP_TOL_STEP = 2e-3;
static const double LOWP_MIN_RATIO = 1.25, LOWP_MIN_POSITION = 0.6;
#else
static const double TOL_LOGITS = 2e-2, TOL_LOSS = 1e-4, TOL_GRAD = 2e-2, TOL_STEP = 5e-4;
static const char* DEFAULT_CKPT = "build/ref/gpt2_ref_bf16.bin";
static const char* DEFAULT_STATE = "build/ref/gpt2_ref_debug_state_bf16.bin";
#endif

static int g_passed = 0, g_failed = 0;

static void record(int ok) { if (ok) g_passed++; else g_failed++; }

// One comparison row: n values of a (already on the host, fp32) against ref.
// Prints one row and records pass/fail; returns the relative (L2) error.
static double compare_row(const char* name, const float* a, const float* ref, size_t n, double tol) {
    double d2 = 0.0, r2 = 0.0, maxabs = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) { bad++; continue; }
        double d = (double)a[i] - (double)ref[i];
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
        if (fabs(d) > maxabs) maxabs = fabs(d);
    }
    double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    int ok = bad == 0 && rel <= tol;
    printf("  %-10s %10zu  %10.3e  %10.3e  %8.1e  %s%s\n", name, n, maxabs, rel, tol, ok ? "ok" : "FAIL",
           bad ? " (non-finite)" : "");
    record(ok);
    return rel;
}

// Device floatX array -> host floats.
static float* download_floatX(const floatX* d, size_t n) {
    floatX* tmp = (floatX*)malloc_check(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(tmp, d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    float* out = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) out[i] = (float)tmp[i];
    free(tmp);
    return out;
}

// Build a model from a checkpoint with activations for B x T.
static void build_model(GPT2* m, const char* ckpt, int B, int T) {
    GPT2Config cfg;
    float* params = checkpoint_read_model(ckpt, &cfg);
    gpt2_allocate_parameters(m, &cfg, 1);
    gpt2_set_parameters(m, params);
    free(params);
    gpt2_allocate_activations(m, B, T, 1, 1);
#if GEMM_LOWP
    LowpOptions opt = {};  // the defaults: per-tensor current scaling, FP8 wgrad, no warm-up, producers quantizing
    opt.producers = 1;
    gpt2_attach_lowp(m, &opt, 0);
    m->keep_activations = 1;  // the activation comparisons read the GELU output the producers would not store
#endif
#if defined(ENABLE_TCAST)
    static int plans_ready = 0;
    if (!plans_ready) {
        tcast_test_plan(&g_plan_fixed, TCAST_TEST_CAST, TCAST_TEST_CAST_GEMM, TCAST_TEST_LM_HEAD, &cfg, B, T);
        tcast_test_plan(&g_plan_grid, TCAST_GRID_CAST, TCAST_GRID_CAST_GEMM, 0, &cfg, B, T);
        plans_ready = 1;
    }
    gpt2_attach_tcast(m, g_tcast_plan);
#endif
}

#if defined(ENABLE_TCAST) || GEMM_LOWP
// ‖a − ref‖₂ / ‖ref‖₂ over n values (no pass/fail).
static double rel_l2(const float* a, const float* ref, size_t n) {
    double d2 = 0.0, r2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
    }
    return r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
}
#endif

#if GEMM_LOWP
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
    const bool tcfp = GEMM_LOWP_TCFP12;
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

// The step losses of this build's training run against both quantized states (pass / fail on its own).
static void check_lowp_steps(const LowpRefs* r, const float* losses) {
    if (!r->loaded) return;
    double worst = 0.0, worst_other = 0.0;
    for (int i = 0; i < r->own.num_steps; i++) {
        const double e = fabs((double)losses[i] - r->own.step_losses[i]) / fabs((double)r->own.step_losses[i]);
        const double x = fabs((double)losses[i] - r->other.step_losses[i]) / fabs((double)r->other.step_losses[i]);
        worst = e > worst || isnan(e) ? e : worst;  // (a NaN stays and fails)
        worst_other = x > worst_other || isnan(x) ? x : worst_other;
    }
    const int ok = worst <= LOWP_TOL_STEP;
    printf("  step losses vs the %s reference: max rel %.2e (vs %s: %.2e)  tol %.1e  %s\n", r->own_name, worst, r->other_name,
           worst_other, LOWP_TOL_STEP, ok ? "ok" : "FAIL");
    record(ok);
}
#endif

#if defined(ENABLE_TCAST)

// The casts act: this build's logits, loss and gradients are clearly further from the uncast BF16
// reference than from the cast one. Prints both errors (the numbers the constants above were set from).
static void check_tcast_active(const char* uncast_path, const GPT2Config* cfg, const DebugState* ref, const float* logits,
                               float loss, const float* grads, size_t nparams) {
    DebugState u;
    debug_state_read(uncast_path, cfg, &u);
    const size_t BT = (size_t)ref->B * ref->T;
    if (u.sf16_mode != 0 || !u.bf16_weights || u.B != ref->B || u.T != ref->T ||
        memcmp(u.x, ref->x, BT * sizeof(int)) != 0 || memcmp(u.y, ref->y, BT * sizeof(int)) != 0)
        die("%s: not the uncast bf16-weight state of the same batch (mode %d, bf16 %d, B=%d T=%d)", uncast_path, u.sf16_mode,
            u.bf16_weights, u.B, u.T);
    const size_t nl = BT * (size_t)u.V;
    const double lc = rel_l2(logits, ref->logits, nl), lu = rel_l2(logits, u.logits, nl);
    const double gc = rel_l2(grads, ref->grads, nparams), gu = rel_l2(grads, u.grads, nparams);
    const double refs = rel_l2(ref->logits, u.logits, nl), refs_g = rel_l2(ref->grads, u.grads, nparams);
    printf("  casts active (vs the uncast %s):\n", uncast_path);
    printf("    references apart: logits %.3e, gradients %.3e\n", refs, refs_g);
    printf("    loss: %.6f, cast ref %.6f, uncast ref %.6f\n", loss, ref->loss, u.loss);
    int ok_l = lu > TCAST_MIN_UNCAST_RATIO * lc, ok_g = gu > TCAST_MIN_UNCAST_RATIO * gc;
    printf("    logits    error vs uncast %.3e, vs cast %.3e: ratio %.2f > %.1f  %s\n", lu, lc, lu / lc, TCAST_MIN_UNCAST_RATIO,
           ok_l ? "ok" : "FAIL");
    printf("    gradients error vs uncast %.3e, vs cast %.3e: ratio %.2f > %.1f  %s\n", gu, gc, gu / gc, TCAST_MIN_UNCAST_RATIO,
           ok_g ? "ok" : "FAIL");
    record(ok_l);
    record(ok_g);
    debug_state_free(&u);
}

// Of the n floatX values at d, as rows of `cols`: how many a cast to dt along the rows changes.
static size_t count_off_grid(const floatX* d, size_t n, size_t cols, const TcastDataType* dt) {
    float* h = download_floatX(d, n);
    float* c = (float*)malloc_check(n * sizeof(float));
    char err[256];
    if (tcast_cast_host(dt, h, c, (int)(n / cols), (int)cols, -1, 0, NULL, err, sizeof(err)) != 0) die("tcast_cast_host: %s", err);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) off += c[i] != h[i];  // (-0 == +0: fnuz casts turn -0 into +0)
    free(h);
    free(c);
    return off;
}

// After a forward under the full plan every tensor stored at a cast site is a fixed point of that site's
// cast along its channel dimension (an MX cast with max scale mode is idempotent: the cast amax stays in
// its binade, so the scale does not move). The attention output, which no site casts, is the control:
// it must not be on the matmul_out grid.
static void check_tcast_grid(const char* ckpt, const DebugState* ref) {
    GPT2 m;
    g_tcast_plan = &g_plan_grid;
    build_model(&m, ckpt, ref->B, ref->T);
    g_tcast_plan = &g_plan_fixed;
    gpt2_evaluate(&m, ref->x, ref->y, ref->B, ref->T);
    const GPT2Config& c = m.config;
    const size_t BT = (size_t)ref->B * ref->T, C = c.channels, L = c.num_layers, Vp = c.padded_vocab_size;
    const ActivationTensors& a = m.acts;
    struct { const char* name; const floatX* p; size_t n, cols; BoundarySite site; } t[] = {
        {"encoded (wte+wpe)", a.encoded, BT * C, C, ENCODER_OUT},         {"ln1", a.ln1, L * BT * C, C, LAYERNORM_OUT},
        {"qkv (matmul out)", a.qkv, L * BT * 3 * C, 3 * C, MATMUL_OUT},  {"residual2", a.residual2, L * BT * C, C, RESIDUAL_OUT},
        {"ln2", a.ln2, L * BT * C, C, LAYERNORM_OUT},                     {"fch (matmul out)", a.fch, L * BT * 4 * C, 4 * C, MATMUL_OUT},
        {"fch_gelu (last layer)", a.fch_gelu, BT * 4 * C, 4 * C, GELU_OUT}, {"residual3", a.residual3, L * BT * C, C, RESIDUAL_OUT},
        {"lnf", a.lnf, BT * C, C, LAYERNORM_OUT},                         {"logits (matmul out)", a.output, BT * Vp, Vp, MATMUL_OUT},
        {"logits (logits)", a.output, BT * Vp, Vp, LOGITS},
    };
    printf("  TensorCast grid check (--cast %s --cast-gemm %s):\n", TCAST_GRID_CAST, TCAST_GRID_CAST_GEMM);
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        const TcastDataType* dt = &g_plan_grid.site[t[i].site];
        size_t off = count_off_grid(t[i].p, t[i].n, t[i].cols, dt);
        printf("    %-22s %10zu values, %zu not fixed by %s (%s)  %s\n", t[i].name, t[i].n, off, BOUNDARY_SITE_NAMES[t[i].site],
               dt->name, off ? "FAIL" : "ok");
        record(off == 0);
    }
    size_t off = count_off_grid(a.atty, L * BT * C, C, &g_plan_grid.site[MATMUL_OUT]);
    printf("    %-22s %10zu values, %zu not fixed by matmul_out (control: no site)  %s\n", "atty", L * BT * C, off,
           off > 0 ? "ok" : "FAIL");
    record(off > 0);
    gpt2_free(&m);
}
#endif

#if defined(ENABLE_FP16)
// Dynamic loss scaling: with a loss scale that overflows fp16 the step must be skipped (parameters
// and optimizer state untouched) and the scale halved; after LOSS_SCALE_WINDOW good steps it doubles.
static void check_loss_scaling(const char* ckpt, const DebugState* ref) {
    GPT2 m;
    build_model(&m, ckpt, ref->B, ref->T);
    float* before = download_floatX(m.params_memory, m.num_parameters);
    m.loss_scale = 1e30f;  // dloss = 1e30 / (B*T): every dlogit overflows fp16
    gpt2_zero_grad(&m);
    gpt2_forward_backward(&m, ref->x, ref->y, ref->B, ref->T, 1.0f);
    UpdateResult u = gpt2_update(&m, ref->lr, ref->beta1, ref->beta2, ref->eps, ref->weight_decay, ref->grad_clip, 1);
    float* after = download_floatX(m.params_memory, m.num_parameters);
    int unchanged = memcmp(before, after, m.num_parameters * sizeof(float)) == 0;
    int ok = u.skipped == 1 && m.loss_scale == 5e29f && unchanged && m.good_steps == 0;
    printf("  loss scaling: overflow -> step skipped %d, params unchanged %d, scale halved to %g  %s\n", u.skipped,
           unchanged, m.loss_scale, ok ? "ok" : "FAIL");
    record(ok);
    // growth: one good step short of the window, then a good step doubles the scale
    m.loss_scale = 1024.0f;
    m.good_steps = LOSS_SCALE_WINDOW - 1;
    gpt2_zero_grad(&m);
    gpt2_forward_backward(&m, ref->x, ref->y, ref->B, ref->T, 1.0f);
    u = gpt2_update(&m, ref->lr, ref->beta1, ref->beta2, ref->eps, ref->weight_decay, ref->grad_clip, 1);
    ok = u.skipped == 0 && m.loss_scale == 2048.0f && m.good_steps == 0;
    printf("  loss scaling: %d good steps -> scale doubled to %g  %s\n", LOSS_SCALE_WINDOW, m.loss_scale, ok ? "ok" : "FAIL");
    record(ok);
    free(before);
    free(after);
    gpt2_free(&m);
}
#endif

#if defined(ENABLE_Q115)
// Of the n floatX values at d: how many are neither a Q1.15 value nor +-1.0, and how many are +-1.0.
// (+-1.0 is what BF16 storage makes of saturated values: the Q1.15 maximum 1 - 2^-15 is not a BF16
// value and rounds to nearest 1.0; doc/SF16.md.)
static size_t count_not_q115(const floatX* d, size_t n, size_t* saturated) {
    float* h = download_floatX(d, n);
    size_t bad = 0, sat = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabsf(h[i]) == 1.0f) sat++;
        else bad += simulate_q115(h[i]) != h[i];
    }
    free(h);
    if (saturated) *saturated = sat;
    return bad;
}

// After a forward pass every tensor stored at a boundary holds only Q1.15 values; the backward
// pass quantizes nothing (its gradients include values off the 2^-15 grid).
static void check_sf16_boundaries(const char* ckpt, const DebugState* ref) {
    GPT2 m;
    build_model(&m, ckpt, ref->B, ref->T);
    gpt2_evaluate(&m, ref->x, ref->y, ref->B, ref->T);
    const GPT2Config& c = m.config;
    const size_t BTC = (size_t)ref->B * ref->T * c.channels, L = c.num_layers;
    const ActivationTensors& a = m.acts;
    struct { const char* name; const floatX* p; size_t n; } t[] = {
        {"encoded (wte+wpe)", a.encoded, BTC},          {"ln1", a.ln1, L * BTC},
        {"qkv (matmul out)", a.qkv, L * 3 * BTC},      {"residual2", a.residual2, L * BTC},
        {"ln2", a.ln2, L * BTC},                        {"fch (matmul out)", a.fch, L * 4 * BTC},
        {"fch_gelu (last layer)", a.fch_gelu, 4 * BTC}, {"residual3", a.residual3, L * BTC},
        {"lnf", a.lnf, BTC},                            {"logits", a.output, (size_t)ref->B * ref->T * c.padded_vocab_size},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        size_t sat = 0, bad = count_not_q115(t[i].p, t[i].n, &sat);
        printf("  SF16 boundary %-22s %10zu values, %zu saturated to +-1, %zu not Q1.15  %s\n", t[i].name, t[i].n, sat,
               bad, bad ? "FAIL" : "ok");
        record(bad == 0);
    }
    gpt2_zero_grad(&m);
    gpt2_forward_backward(&m, ref->x, ref->y, ref->B, ref->T, 1.0f);
    size_t off_grid = count_not_q115(m.grads_memory, m.num_parameters, NULL);
    printf("  SF16 backward untouched: %zu of %zu gradient values are off the Q1.15 grid  %s\n", off_grid,
           m.num_parameters, off_grid > 0 ? "ok" : "FAIL");
    record(off_grid > 0);
    gpt2_free(&m);
}
#endif

int main(int argc, char** argv) {
    const char* ckpt = DEFAULT_CKPT;
    const char* state_path = DEFAULT_STATE;
#if defined(ENABLE_TCAST)
    const char* uncast_path = DEFAULT_UNCAST_STATE;
    if (argc == 4) { ckpt = argv[1]; state_path = argv[2]; uncast_path = argv[3]; argc = 1; }
#endif
#if GEMM_LOWP
    const char *fp8_path = DEFAULT_FP8_STATE, *tcfp12_path = DEFAULT_TCFP12_STATE;
    if (argc == 5) { ckpt = argv[1]; state_path = argv[2]; fp8_path = argv[3]; tcfp12_path = argv[4]; argc = 1; }
#endif
    if (argc == 3) { ckpt = argv[1]; state_path = argv[2]; }
    else if (argc != 1) die("usage: %s [checkpoint debug_state]", argv[0]);

    GPT2 model;
    GPT2Config cfg;
    checkpoint_read_header(ckpt, &cfg);
    DebugState ref;
    debug_state_read(state_path, &cfg, &ref);
#if defined(ENABLE_Q115) && defined(SF16_TRUE_FORWARD)
    const int expected_sf16 = 2;
#elif defined(ENABLE_TCAST)
    const int expected_sf16 = 3;  // the TensorCast state (dev/reference --tcast-states)
#elif defined(ENABLE_Q115)
    const int expected_sf16 = 1;
#else
    const int expected_sf16 = 0;
#endif
    if (ref.sf16_mode != expected_sf16)
        die("%s: SF16 mode %d, but this build (%s) needs a state with mode %d (dev/reference --sf16)", state_path,
            ref.sf16_mode, BOUNDARY_MODE_NAME, expected_sf16);
    const int B = ref.B, T = ref.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    build_model(&model, ckpt, B, T);
    printf("%s build (boundaries: %s) vs %s (%s weights)\n", PRECISION_MODE_NAME, BOUNDARY_MODE_NAME, state_path,
           ref.bf16_weights ? "bf16-rounded" : "fp32");
    printf("  L=%d C=%d NH=%d B=%d T=%d params=%zu\n", cfg.num_layers, cfg.channels, cfg.num_heads, B, T, model.num_parameters);
    printf("  %-10s %10s  %10s  %10s  %8s\n", "tensor", "elements", "max abs", "rel (L2)", "tol");

    // forward: logits and loss
    float loss = gpt2_evaluate(&model, ref.x, ref.y, B, T);
    float* logits_p = download_floatX(model.acts.output, (size_t)B * T * Vp);
    float* logits = (float*)malloc_check((size_t)B * T * V * sizeof(float));
    for (size_t r = 0; r < (size_t)B * T; r++) memcpy(logits + r * V, logits_p + r * Vp, V * sizeof(float));
    const double logits_err = compare_row("logits", logits, ref.logits, (size_t)B * T * V, TOL_LOGITS);
#if GEMM_LOWP
    printf("  %s GEMMs active: logits error %.3e > %.0e (BF16 GEMMs give 5.3e-3)  %s\n", GEMM_LOWP_MODE_NAME, logits_err,
           FP8_MIN_LOGIT_ERR, logits_err > FP8_MIN_LOGIT_ERR ? "ok" : "FAIL");
    record(logits_err > FP8_MIN_LOGIT_ERR);
#else
    (void)logits_err;
#endif
    compare_row("loss", &loss, &ref.loss, 1, TOL_LOSS);
#if defined(ENABLE_TCAST)
    float* tcast_logits = logits;  // kept for check_tcast_active, after the gradients
    logits = NULL;
#endif
#if GEMM_LOWP
    float* lowp_logits = logits;  // kept for check_lowp_refs, after the gradients
    logits = NULL;
#endif
    free(logits_p);
    free(logits);

    // backward: every gradient
    gpt2_zero_grad(&model);
    gpt2_forward_backward(&model, ref.x, ref.y, B, T, 1.0f);
    float* grads = download_floatX(model.grads_memory, model.num_parameters);
#if defined(ENABLE_FP16)
    for (size_t i = 0; i < model.num_parameters; i++) grads[i] /= model.loss_scale;
#endif
    size_t off = 0;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        char name[32];
        snprintf(name, sizeof(name), "d%s", PARAM_TENSOR_NAMES[t]);
        compare_row(name, grads + off, ref.grads + off, model.param_sizes[t], TOL_GRAD);
        off += model.param_sizes[t];
    }
#if defined(ENABLE_TCAST)
    check_tcast_active(uncast_path, &cfg, &ref, tcast_logits, loss, grads, model.num_parameters);
    free(tcast_logits);
#endif
#if GEMM_LOWP
    LowpRefs lowp;
    lowp_refs_load(&lowp, fp8_path, tcfp12_path, &cfg, &ref);
    check_lowp_refs(&lowp, &ref, lowp_logits, loss, grads, model.param_sizes);
    free(lowp_logits);
    float* lowp_losses = (float*)malloc_check((size_t)(ref.num_steps > 0 ? ref.num_steps : 1) * sizeof(float));
#endif

    // determinism of one pass
    gpt2_zero_grad(&model);
    gpt2_forward_backward(&model, ref.x, ref.y, B, T, 1.0f);
    float* grads2 = download_floatX(model.grads_memory, model.num_parameters);
    int same = memcmp(grads, grads2, model.num_parameters * sizeof(float)) == 0;
#if defined(ENABLE_FP16)
    for (size_t i = 0; i < model.num_parameters; i++) grads2[i] /= model.loss_scale;
    same = memcmp(grads, grads2, model.num_parameters * sizeof(float)) == 0;
#endif
    printf("  determinism: two forward+backward passes %s\n", same ? "bit-identical" : "DIFFER");
    record(same);
    free(grads);
    free(grads2);

    // training steps, on a fresh model, twice (the second run must match the first bit for bit)
    float* final_params[2] = {NULL, NULL};
    for (int run = 0; run < 2; run++) {
        GPT2 m2;
        build_model(&m2, ckpt, B, T);
        int all_ok = 1;
        if (run == 0) printf("  %d training steps (lr %g, betas %g/%g, eps %g, wd %g, clip %g):\n", ref.num_steps, ref.lr,
                             ref.beta1, ref.beta2, ref.eps, ref.weight_decay, ref.grad_clip);
        for (int step = 0; step < ref.num_steps; step++) {
            gpt2_zero_grad(&m2);
            float l = gpt2_forward_backward(&m2, ref.x, ref.y, B, T, 1.0f);
            UpdateResult u = gpt2_update(&m2, ref.lr, ref.beta1, ref.beta2, ref.eps, ref.weight_decay, ref.grad_clip, step + 1);
            double rel = fabs((double)l - ref.step_losses[step]) / fabs((double)ref.step_losses[step]);
            int ok = isfinite(l) && rel <= TOL_STEP && !u.skipped;
            all_ok &= ok;
#if GEMM_LOWP
            if (run == 0) lowp_losses[step] = l;
#endif
            if (run == 0)
                printf("    step %2d  loss %.6f  ref %.6f  rel %.2e  norm %.4f  %s\n", step, l, ref.step_losses[step], rel,
                       u.grad_norm, ok ? "ok" : "FAIL");
        }
        if (run == 0) {
            printf("  %-32s tol %.1e  %s\n", "step losses", TOL_STEP, all_ok ? "ok" : "FAIL");
            record(all_ok);
        }
        final_params[run] = download_floatX(m2.params_memory, m2.num_parameters);
        gpt2_free(&m2);
    }
    int same_params = memcmp(final_params[0], final_params[1], model.num_parameters * sizeof(float)) == 0;
    printf("  determinism: two %d-step training runs end with %s parameters\n", ref.num_steps, same_params ? "bit-identical" : "DIFFERENT");
    record(same_params);
    free(final_params[0]);
    free(final_params[1]);
#if GEMM_LOWP
    check_lowp_steps(&lowp, lowp_losses);
    free(lowp_losses);
    lowp_refs_free(&lowp);
#endif

#if defined(ENABLE_FP16)
    check_loss_scaling(ckpt, &ref);
#endif
#if defined(ENABLE_Q115)
    check_sf16_boundaries(ckpt, &ref);
#endif
#if defined(ENABLE_TCAST)
    check_tcast_grid(ckpt, &ref);
#endif
    debug_state_free(&ref);
    gpt2_free(&model);
    printf("\n%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
