// test.cuh (SF16 module) - test_gpt2cu's reference state, tolerances and checks for the SF16 builds
// (llmc/modes/mode_test_defaults.cuh): compared with the reference that simulates the same Q1.15
// boundaries (dev/reference --sf16: gpt2_ref_debug_state_q115[_tf].bin, header word 14 = 1, or 2 with the
// true forward), on the bf16-rounded weights; then every stored boundary tensor must hold Q1.15 values only
// and the backward must quantize nothing.
#pragma once

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmc/modes/mode_test_defaults.cuh"

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
static void check_sf16_boundaries(const char* ckpt, const DebugState* ref, BuildModelFn build_model) {
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

struct ModeTest : ModeTestDefaults {
    static constexpr TestTolerances kTol = {2e-2, 1e-3, 3e-2, 2e-3};
    static constexpr const char* kCheckpoint = "build/ref/gpt2_ref_bf16.bin";
    static constexpr const char* kState =
        kSf16TrueForward ? "build/ref/gpt2_ref_debug_state_q115_tf.bin" : "build/ref/gpt2_ref_debug_state_q115.bin";
    static constexpr int kStateMode = kSf16TrueForward ? 2 : 1;  // header word 14: Q1.15 (+ Q1.31 true forward)

    void finish(const char* ckpt, const DebugState& ref, BuildModelFn build) { check_sf16_boundaries(ckpt, &ref, build); }
};
