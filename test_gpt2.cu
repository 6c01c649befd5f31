/*
test_gpt2.cu - the CUDA trainer of this build against the PyTorch reference state.

Checks, for the build's storage precision and mode:
  - forward on the reference batch: logits and loss,
  - backward: every parameter gradient,
  - the reference's training steps (clip + AdamW on the same batch): the loss before each step,
  - determinism: two forward+backward passes give bit-identical gradients, and a second model
    trained the same steps reaches bit-identical parameters,
  - and what the mode adds (llmc/modes/<mode>/test.cuh, through the hooks of
    llmc/modes/mode_test_defaults.cuh), including the same comparisons against further reference
    states the mode names (more_states; the TensorCast build's attention-site and every-site plans).
Which reference state a build is compared with, and at which tolerances, is its mode's: the plain
builds' in llmc/modes/plain/test.cuh (BF16 against the state of the bf16-rounded weights it actually
holds, FP16 and FP32 against the fp32 state), SF16, FP8 / TCFP-12 and TensorCast in theirs. The
reference is float64, so the errors printed are this build's. Metric: ‖a − ref‖₂ / ‖ref‖₂ per tensor,
plus the max absolute error (llmc/obs/ref_check.cuh).

usage: test_gpt2cu [checkpoint debug_state [mode states]]   (defaults under build/ref/; the TensorCast,
FP8 and TCFP-12 builds take more states: their test.cuh)
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
#include "llmc/obs/ref_check.cuh"
#include "llmc/model/model.cuh"
#include "llmc/modes/mode_test.cuh"

static ModeTest g_mode;  // the mode's reference files, tolerances and checks

// Build a model from a checkpoint with activations for B x T, the mode attached as its test wants it.
static void build_model(GPT2* m, const char* ckpt, int B, int T) {
    GPT2Config cfg;
    float* params = checkpoint_read_model(ckpt, &cfg);
    gpt2_allocate_parameters(m, &cfg, 1);
    gpt2_set_parameters(m, params);
    free(params);
    gpt2_allocate_activations(m, B, T, 1, 1);
    g_mode.attach(m, cfg, B, T);
}

// The gradients as accumulated, unscaled in place (FP16 divides out its loss scale).
static void unscale_grads(float* grads, const GPT2& m) {
    if constexpr (kStorageFP16)
        for (size_t i = 0; i < m.num_parameters; i++) grads[i] /= m.loss_scale;
}

// Read a reference state for the checkpoint's model and check it is one this build compares with.
static void read_state(const char* ckpt, const char* state_path, DebugState* ref) {
    GPT2Config cfg;
    checkpoint_read_header(ckpt, &cfg);
    debug_state_read(state_path, &cfg, ref);
    if (ref->sf16_mode != ModeTest::kStateMode)
        die("%s: SF16 mode %d, but this build (%s) needs a state with mode %d (dev/reference --sf16)", state_path,
            ref->sf16_mode, BOUNDARY_MODE_NAME, ModeTest::kStateMode);
}

// This build against one reference state ref (dev/reference/gpt2_reference.py, read from state_path) of the
// checkpoint ckpt: the forward (logits, loss), every gradient, the state's training steps, and determinism; a
// row per check, each recorded (ref_check.cuh).
static void check_against(const char* ckpt, const DebugState& ref, const char* state_path, const TestTolerances& tol) {
    GPT2 model;
    GPT2Config cfg;
    checkpoint_read_header(ckpt, &cfg);
    const int B = ref.B, T = ref.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    build_model(&model, ckpt, B, T);
    printf("%s build (boundaries: %s) vs %s (%s weights, checkpoint %s)\n", PRECISION_MODE_NAME, BOUNDARY_MODE_NAME, state_path,
           ref.bf16_weights ? "bf16-rounded" : "fp32", ckpt);
    printf("  L=%d C=%d NH=%d B=%d T=%d params=%zu\n", cfg.num_layers, cfg.channels, cfg.num_heads, B, T, model.num_parameters);
    printf("  %-10s %10s  %10s  %10s  %8s\n", "tensor", "elements", "max abs", "rel (L2)", "tol");

    // forward: logits and loss
    float loss = gpt2_evaluate(&model, ref.x, ref.y, B, T);
    float* logits_p = download_floatX(model.acts.output, (size_t)B * T * Vp);
    float* logits = (float*)malloc_check((size_t)B * T * V * sizeof(float));
    for (size_t r = 0; r < (size_t)B * T; r++) memcpy(logits + r * V, logits_p + r * Vp, V * sizeof(float));
    free(logits_p);
    const double logits_err = compare_row("logits", logits, ref.logits, (size_t)B * T * V, tol.logits);
    g_mode.check_forward(logits_err);
    compare_row("loss", &loss, &ref.loss, 1, tol.loss);

    // backward: every gradient
    gpt2_zero_grad(&model);
    gpt2_forward_backward(&model, ref.x, ref.y, B, T, 1.0f);
    float* grads = download_floatX(model.grads_memory, model.num_parameters);
    unscale_grads(grads, model);
    size_t off = 0;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        char name[32];
        snprintf(name, sizeof(name), "d%s", PARAM_TENSOR_NAMES[t]);
        compare_row(name, grads + off, ref.grads + off, model.param_sizes[t], tol.grad);
        off += model.param_sizes[t];
    }
    g_mode.check_gradients(ref, cfg, logits, loss, grads, model.param_sizes);
    free(logits);

    // determinism of one pass
    gpt2_zero_grad(&model);
    gpt2_forward_backward(&model, ref.x, ref.y, B, T, 1.0f);
    float* grads2 = download_floatX(model.grads_memory, model.num_parameters);
    unscale_grads(grads2, model);
    int same = memcmp(grads, grads2, model.num_parameters * sizeof(float)) == 0;
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
            int ok = isfinite(l) && rel <= tol.step && !u.skipped;
            all_ok &= ok;
            if (run == 0) {
                g_mode.step_loss(step, l);
                printf("    step %2d  loss %.6f  ref %.6f  rel %.2e  norm %.4f  %s\n", step, l, ref.step_losses[step], rel,
                       u.grad_norm, ok ? "ok" : "FAIL");
            }
        }
        if (run == 0) {
            printf("  %-32s tol %.1e  %s\n", "step losses", tol.step, all_ok ? "ok" : "FAIL");
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
    gpt2_free(&model);
}

// The CheckStateFn the mode's more_states calls: check_against the state at state_path.
static void check_state(const char* ckpt, const char* state_path, const TestTolerances& tol) {
    DebugState ref;
    read_state(ckpt, state_path, &ref);
    check_against(ckpt, ref, state_path, tol);
    debug_state_free(&ref);
}

int main(int argc, char** argv) {
    const TestTolerances tol = ModeTest::kTol;
    const char* ckpt = ModeTest::kCheckpoint;
    const char* state_path = ModeTest::kState;
    if (argc == 3 || (ModeTest::kExtraArgs > 0 && argc == 3 + ModeTest::kExtraArgs)) {
        ckpt = argv[1];
        state_path = argv[2];
        if (argc > 3) g_mode.take_args(argv + 3);
    } else if (argc != 1) {
        die("usage: %s [checkpoint debug_state%s]", argv[0], ModeTest::kExtraUsage);
    }

    DebugState ref;
    read_state(ckpt, state_path, &ref);
    check_against(ckpt, ref, state_path, tol);
    g_mode.more_states(check_state);
    g_mode.finish(ckpt, ref, build_model);
    debug_state_free(&ref);
    printf("\n%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
