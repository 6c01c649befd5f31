// mode_test_defaults.cuh - the hooks through which test_gpt2.cu checks the build's mode against the
// PyTorch reference state (dev/reference/gpt2_reference.py), with what each does when a mode adds nothing.
// A mode's `struct ModeTest` (llmc/modes/<mode>/test.cuh) derives from ModeTestDefaults, gives its
// reference files, the header word the state must carry and its tolerances, and redefines the checks it
// adds. test_gpt2.cu runs, in order: attach (every model it builds), the forward (logits row, then
// check_forward, then the loss row), the gradients (one row per tensor, then check_gradients), the
// training steps (step_loss per step of the first run), the determinism checks; then the same for every
// further state more_states hands it (each under the mode's own settings for it); then finish.
#pragma once

#include "llmc/model/model.cuh"
#include "llmc/obs/debug_state.h"
#include "llmc/obs/ref_check.cuh"

// Relative L2 tolerances of the comparisons with the reference state (llmc/obs/ref_check.cuh).
struct TestTolerances {
    double logits, loss, grad, step;  // logits, loss, each gradient tensor, each training step's loss
};

// Build a model from a checkpoint with activations for B x T and the mode attached (test_gpt2.cu's).
typedef void (*BuildModelFn)(GPT2* m, const char* ckpt, int B, int T);
// Run test_gpt2.cu's comparisons (forward, gradients, training steps, determinism) of this build against one
// more (checkpoint, debug state) pair at the given tolerances, with the hooks as they are set at the call.
typedef void (*CheckStateFn)(const char* ckpt, const char* state_path, const TestTolerances& tol);

struct ModeTestDefaults {
    // Reference files beyond the checkpoint and the state (command-line arguments after those two).
    static constexpr int kExtraArgs = 0;
    static constexpr const char* kExtraUsage = "";
    void take_args(char** extra) { (void)extra; }
    // Attach the mode to a model built for the test (after gpt2_allocate_activations).
    void attach(GPT2* m, const GPT2Config& cfg, int B, int T) { (void)m, (void)cfg, (void)B, (void)T; }
    // After the logits row: logits_err is their relative error against the state.
    void check_forward(double logits_err) { (void)logits_err; }
    // After the gradient rows: the logits (B*T*V, unpadded), loss and gradients (fp32, unscaled, checkpoint order).
    void check_gradients(const DebugState& ref, const GPT2Config& cfg, const float* logits, float loss, const float* grads,
                         const size_t* param_sizes) {
        (void)ref, (void)cfg, (void)logits, (void)loss, (void)grads, (void)param_sizes;
    }
    // The loss of each training step of the first run (0-based step).
    void step_loss(int step, float loss) { (void)step, (void)loss; }
    // Further reference states the mode is compared with (e.g. other cast plans): call check for each, after
    // setting what attach and the checks should use for it.
    void more_states(CheckStateFn check) { (void)check; }
    // The mode's own checks at the end; build makes fresh models of the checkpoint.
    void finish(const char* ckpt, const DebugState& ref, BuildModelFn build) { (void)ckpt, (void)ref, (void)build; }
};
