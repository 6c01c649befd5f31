// test.cuh (plain module: BF16, FP16, FP32 storage) - test_gpt2cu's reference state, tolerances and
// checks for the plain builds (llmc/modes/mode_test_defaults.cuh).
//
// The BF16 build is compared with the state computed from bf16-rounded weights (the weights it actually
// holds), FP16 and FP32 with the fp32 state. Tolerances are 3-4x the errors measured on an H200
// (2026-11-21, reference state of dev/reference with its defaults: L=2 C=128 NH=4 B=4 T=64), which sit
// where the storage precision puts them: BF16 keeps 8 significant bits (unit roundoff 2^-9 = 2e-3;
// measured: logits 5.3e-3, gradients <= 5.0e-3, step losses <= 1.4e-4), FP16 11 bits (7.8e-4, 7.6e-4,
// 5.3e-5), FP32 is limited by summation order and --use_fast_math intrinsics (9.2e-7, 6.7e-7, 1.2e-7).
// FP16 also checks its dynamic loss scaling (llmc/model/model.cuh).
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/modes/mode_test_defaults.cuh"

// Dynamic loss scaling: with a loss scale that overflows fp16 the step must be skipped (parameters
// and optimizer state untouched) and the scale halved; after LOSS_SCALE_WINDOW good steps it doubles.
static void check_loss_scaling(const char* ckpt, const DebugState* ref, BuildModelFn build_model) {
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

struct ModeTest : ModeTestDefaults {
    static constexpr TestTolerances kTol = kStorageFP32 ? TestTolerances{4e-6, 1e-6, 3e-6, 1e-6}
                                         : kStorageFP16 ? TestTolerances{3e-3, 1e-4, 3e-3, 2e-4}
                                                        : TestTolerances{2e-2, 1e-4, 2e-2, 5e-4};
    static constexpr const char* kCheckpoint = kStorageBF16 ? "build/ref/gpt2_ref_bf16.bin" : "build/ref/gpt2_ref.bin";
    static constexpr const char* kState =
        kStorageBF16 ? "build/ref/gpt2_ref_debug_state_bf16.bin" : "build/ref/gpt2_ref_debug_state.bin";
    static constexpr int kStateMode = 0;  // debug-state header word 14: no boundary simulation

    void finish(const char* ckpt, const DebugState& ref, BuildModelFn build) {
        if constexpr (kStorageFP16) check_loss_scaling(ckpt, &ref, build);
    }
};
