/*
test_gpt2.c - the CPU reference trainer (train_gpt2.c) against the PyTorch reference state.

For each (checkpoint, debug state) pair written by dev/reference/gpt2_reference.py:
  - forward on the reference batch: logits and loss,
  - backward: every parameter gradient,
  - the reference's training steps (clip + AdamW on the same batch): the loss before each step,
and, once, determinism: two passes and two thread counts give bit-identical gradients.

The reference computes in float64 from the same float32 weights, so the differences printed are the
error of this fp32 implementation. Metric per tensor: relative error ‖a − ref‖₂ / ‖ref‖₂ (and the max
absolute error, printed for information). Tolerance 1e-5 for logits, loss and every gradient, and
1e-5 relative for each step loss: fp32 arithmetic with sums of at most a few thousand terms lands
near 5e-7 (measured), so the bound leaves a 20x margin without hiding a real bug (a wrong term is
off by far more).

usage: test_gpt2 [checkpoint debug_state]...   (default: the fp32 and bf16 pairs in build/ref/)
Ends with `N passed, N failed`; exit status 1 if anything failed.
*/
#define TESTING
#include "train_gpt2.c"
#include "llmc/obs/debug_state.h"

#define TOL_FORWARD 1e-5
#define TOL_GRAD 1e-5
#define TOL_STEP_LOSS 1e-5

static int g_passed = 0, g_failed = 0;

static void record(int ok) {
    if (ok) g_passed++;
    else g_failed++;
}

// Print one comparison row and count it. n elements of a against ref (a NaN anywhere fails).
static void compare_tensor(const char* name, const float* a, const float* ref, size_t n, double tol) {
    double diff2 = 0.0, ref2 = 0.0, maxabs = 0.0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        if (!isfinite(a[i])) finite = 0;
        diff2 += d * d;
        ref2 += (double)ref[i] * ref[i];
        if (fabs(d) > maxabs) maxabs = fabs(d);
    }
    double rel = ref2 > 0.0 ? sqrt(diff2 / ref2) : sqrt(diff2);
    int ok = finite && rel <= tol;
    printf("  %-10s %10zu  %10.3e  %10.3e  %8.1e  %s\n", name, n, maxabs, rel, tol, ok ? "ok" : "FAIL");
    record(ok);
}

// Check one checkpoint against one debug state; returns nothing, counts into the tally.
static void check_pair(const char* ckpt_path, const char* state_path) {
    GPT2 model;
    gpt2_load(&model, ckpt_path);
    const GPT2Config* cfg = &model.config;
    DebugState ref;
    debug_state_read(state_path, cfg, &ref);
    int B = ref.B, T = ref.T, V = cfg->vocab_size, Vp = cfg->padded_vocab_size, N = B * T;
    printf("\n%s vs %s\n", ckpt_path, state_path);
    printf("  L=%d C=%d NH=%d B=%d T=%d V=%d Vp=%d params=%zu, weights %s\n", cfg->num_layers,
           cfg->channels, cfg->num_heads, B, T, V, Vp, model.num_parameters,
           ref.bf16_weights ? "bf16-rounded" : "fp32");
    printf("  %-10s %10s  %10s  %10s  %8s\n", "tensor", "elements", "max abs", "rel (L2)", "tol");

    gpt2_forward(&model, ref.x, ref.y, B, T);
    float* logits = (float*)malloc_check((size_t)N * V * sizeof(float));
    for (int n = 0; n < N; n++) memcpy(logits + (size_t)n * V, model.acts.logits + (size_t)n * Vp, V * sizeof(float));
    compare_tensor("logits", logits, ref.logits, (size_t)N * V, TOL_FORWARD);
    free(logits);
    compare_tensor("loss", &model.mean_loss, &ref.loss, 1, TOL_FORWARD);

    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);
    size_t off = 0;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        char name[32];
        snprintf(name, sizeof(name), "d%s", PARAM_TENSOR_NAMES[t]);
        compare_tensor(name, model.grads_memory + off, ref.grads + off, model.param_sizes[t], TOL_GRAD);
        off += model.param_sizes[t];
    }

    if (ref.num_steps > 0) {
        printf("  %d training steps (lr %g, betas %g/%g, eps %g, wd %g, clip %g):\n", ref.num_steps, ref.lr,
               ref.beta1, ref.beta2, ref.eps, ref.weight_decay, ref.grad_clip);
        int all_ok = 1;
        for (int step = 0; step < ref.num_steps; step++) {
            gpt2_forward(&model, ref.x, ref.y, B, T);
            float loss = model.mean_loss;
            double rel = fabs((double)loss - ref.step_losses[step]) / fabs((double)ref.step_losses[step]);
            int ok = isfinite(loss) && rel <= TOL_STEP_LOSS;
            all_ok &= ok;
            printf("    step %2d  loss %.7f  ref %.7f  rel %.2e  %s\n", step, loss, ref.step_losses[step], rel, ok ? "ok" : "FAIL");
            gpt2_zero_grad(&model);
            gpt2_backward(&model, 1.0f);
            gpt2_clip_grad_norm(&model, ref.grad_clip);
            gpt2_update(&model, ref.lr, ref.beta1, ref.beta2, ref.eps, ref.weight_decay, step + 1);
        }
        record(all_ok);
    }
    debug_state_free(&ref);
    gpt2_free(&model);
}

// Gradients of one forward+backward on the reference batch, copied out (caller frees).
static float* gradients_once(const char* ckpt_path, const DebugState* ref) {
    GPT2 model;
    gpt2_load(&model, ckpt_path);
    gpt2_forward(&model, ref->x, ref->y, ref->B, ref->T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);
    float* g = (float*)malloc_check(model.num_parameters * sizeof(float));
    memcpy(g, model.grads_memory, model.num_parameters * sizeof(float));
    gpt2_free(&model);
    return g;
}

// Bit-identical gradients across two runs and across 1 vs the default number of OpenMP threads.
static void check_determinism(const char* ckpt_path, const char* state_path) {
    GPT2Config cfg;
    checkpoint_read_header(ckpt_path, &cfg);
    DebugState ref;
    debug_state_read(state_path, &cfg, &ref);
    size_t n = gpt2_num_parameters(&cfg);
    float* a = gradients_once(ckpt_path, &ref);
    float* b = gradients_once(ckpt_path, &ref);
    int same_runs = memcmp(a, b, n * sizeof(float)) == 0;
    int same_threads = 1, threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
    omp_set_num_threads(1);
    float* c = gradients_once(ckpt_path, &ref);
    omp_set_num_threads(threads);
    same_threads = memcmp(a, c, n * sizeof(float)) == 0;
    free(c);
#endif
    printf("\ndeterminism: two runs %s; 1 thread vs %d threads %s\n", same_runs ? "identical" : "DIFFER",
           threads, same_threads ? "identical" : "DIFFER");
    record(same_runs);
    record(same_threads);
    free(a);
    free(b);
    debug_state_free(&ref);
}

int main(int argc, char** argv) {
    const char* defaults[] = {"build/ref/gpt2_ref.bin", "build/ref/gpt2_ref_debug_state.bin",
                              "build/ref/gpt2_ref_bf16.bin", "build/ref/gpt2_ref_debug_state_bf16.bin"};
    const char** pairs = (const char**)defaults;
    int npairs = 2;
    if (argc > 1) {
        if ((argc - 1) % 2 != 0) die("usage: %s [checkpoint debug_state]...", argv[0]);
        pairs = (const char**)(argv + 1);
        npairs = (argc - 1) / 2;
    }
    for (int i = 0; i < npairs; i++) check_pair(pairs[2 * i], pairs[2 * i + 1]);
    check_determinism(pairs[0], pairs[1]);
    printf("\n%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
