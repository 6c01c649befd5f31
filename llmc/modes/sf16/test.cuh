// test.cuh (SF16 module) - test_gpt2cu's reference state, tolerances and checks for the SF16 builds
// (llmc/modes/mode_test_defaults.cuh): compared with the reference that simulates the same Q1.15
// boundaries (dev/reference --sf16: gpt2_ref_debug_state_q115[_tf].bin, header word 14 = 1, or 2 with the
// true forward), on the bf16-rounded weights; then every stored boundary tensor must hold Q1.15 values only
// and the backward must quantize nothing. Models are built with --q115-cutlass 1 (the trainer's default: the boundary in
// the CUTLASS GEMM epilogue where the binary has it and the GPU is sm_90), so every check above covers that path; and
// check_sf16_cutlass compares it with --q115-cutlass 0 (cuBLASLt GEMM, then the passes): the qkv and fc GEMMs of every
// layer taken (not the projections, whose boundary the residual + LayerNorm kernel applies; none for a --q115-stats
// forward, which counts in the passes), qkv, fch, fch_gelu and the logits close
// (only the GEMM's accumulation order differs: a BF16 output that crosses a rounding midpoint moves a Q1.15 step or a
// BF16 step).
#pragma once

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmc/modes/mode_test_defaults.cuh"
#include "llmc/modes/sf16/mode.cuh"

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

// A --q115-stats forward counts in the kernels' counting instantiations (boundary_with_count), which the launchers must
// pick while the counters are on: every LayerNorm output (ln1, ln2 of each layer, lnf) and every residual add (two a
// layer, fused into the LayerNorms) counted once, and in the classifier (loss only) each row's packets holding
// columns < V (8 logits each) and the target logit.
static void check_sf16_stats(const char* ckpt, const DebugState* ref, BuildModelFn build_model) {
    GPT2 m;
    build_model(&m, ckpt, ref->B, ref->T);
    unsigned long long counts[NUM_BOUNDARY_SITES][3];
    sf16_boundary_stats(&m, ref->x, ref->y, ref->B, ref->T, counts);
    const GPT2Config& c = m.config;
    const unsigned long long N = (unsigned long long)ref->B * ref->T, C = c.channels, L = c.num_layers;
    const unsigned long long V8 = 8ull * (unsigned long long)ceil_div(c.vocab_size, 8);
    const struct { BoundarySite site; unsigned long long expected; } e[] = {
        {LAYERNORM_OUT, (2 * L + 1) * N * C}, {RESIDUAL_OUT, 2 * L * N * C}, {LOGITS, N * (V8 + 1)}};
    for (const auto& x : e) {
        const bool ok = counts[x.site][0] == x.expected;
        printf("  SF16 --q115-stats %-14s %12llu values counted (expected %llu)  %s\n", BOUNDARY_SITE_NAMES[x.site],
               counts[x.site][0], x.expected, ok ? "ok" : "FAIL");
        record(ok);
    }
    gpt2_free(&m);
}

// check_sf16_cutlass's tolerance: rel L2 distance of qkv, fch, fch_gelu and the logits from the cuBLASLt run.
static constexpr double SF16_CUTLASS_TOL = 1e-2;

// One forward of a model built with --q115-cutlass `on` (ModeTest::cutlass) on the reference batch: host copies of qkv,
// fch, the last layer's fch_gelu and the logits (t[0..3], the caller frees), and the GEMMs the CUTLASS hook ran
// (gemms), then in a further --q115-stats forward (stats_gemms: the hook must decline those).
struct Sf16CutlassRun {
    float* t[4];
    size_t n[4];
    unsigned long long gemms, stats_gemms;
    int layers;
};

struct ModeTest : ModeTestDefaults {
    int cutlass = 1;  // --q115-cutlass of the models attach builds
    static constexpr TestTolerances kTol = {2e-2, 1e-3, 3e-2, 2e-3};
    static constexpr const char* kCheckpoint = "build/ref/gpt2_ref_bf16.bin";
    static constexpr const char* kState =
        kSf16TrueForward ? "build/ref/gpt2_ref_debug_state_q115_tf.bin" : "build/ref/gpt2_ref_debug_state_q115.bin";
    static constexpr int kStateMode = kSf16TrueForward ? 2 : 1;  // header word 14: Q1.15 (+ Q1.31 true forward)

    void attach(GPT2* m, const GPT2Config& cfg, int B, int T) {
        (void)cfg, (void)B, (void)T;
        sf16_cutlass_attach(m, cutlass, false);
    }

    Sf16CutlassRun cutlass_run(const char* ckpt, const DebugState* ref, BuildModelFn build_model, int on) {
        GPT2 m;
        cutlass = on;
        build_model(&m, ckpt, ref->B, ref->T);
        cutlass = 1;
        gpt2_evaluate(&m, ref->x, ref->y, ref->B, ref->T);
        const GPT2Config& c = m.config;
        const size_t BT = (size_t)ref->B * ref->T, L = c.num_layers, C = c.channels;
        Sf16CutlassRun r;
        const floatX* src[4] = {m.acts.qkv, m.acts.fch, m.acts.fch_gelu, m.acts.output};
        const size_t n[4] = {L * BT * 3 * C, L * BT * 4 * C, BT * 4 * C, BT * (size_t)c.padded_vocab_size};
        for (int i = 0; i < 4; i++) {
            r.n[i] = n[i];
            r.t[i] = download_floatX(src[i], n[i]);
        }
        r.layers = (int)L;
        r.gemms = sf16_cutlass_gemms(&m);
        sf16_stats_set(1, m.stream);
        gpt2_evaluate(&m, ref->x, ref->y, ref->B, ref->T);
        sf16_stats_set(0, m.stream);
        r.stats_gemms = sf16_cutlass_gemms(&m) - r.gemms;
        gpt2_free(&m);
        return r;
    }

    void check_sf16_cutlass(const char* ckpt, const DebugState* ref, BuildModelFn build_model) {
        printf("  SF16 CUTLASS check (--q115-cutlass 1 against 0):\n");
        const char* why = NULL;
        if (!sf16_cutlass_available(&why)) {
            printf("    skipped: %s\n", why);
            return;
        }
        const Sf16CutlassRun on = cutlass_run(ckpt, ref, build_model, 1), off = cutlass_run(ckpt, ref, build_model, 0);
        const unsigned long long E = 2ull * (unsigned long long)on.layers;  // qkv and fc a layer
        const bool taken = on.gemms == E && on.stats_gemms == 0 && off.gemms == 0;
        printf("    CUTLASS GEMMs in a forward: %llu (expected %llu), in a --q115-stats forward %llu (expected 0), with --q115-cutlass 0 "
               "%llu  %s\n", on.gemms, E, on.stats_gemms, off.gemms, taken ? "ok" : "FAIL");
        record(taken);
        const char* names[4] = {"qkv", "fch", "fch_gelu", "logits"};
        for (int i = 0; i < 4; i++) {
            record_close(names[i], on.t[i], off.t[i], on.n[i], SF16_CUTLASS_TOL, "cuBLASLt + passes");
            free(on.t[i]);
            free(off.t[i]);
        }
    }

    void finish(const char* ckpt, const DebugState& ref, BuildModelFn build) {
        check_sf16_boundaries(ckpt, &ref, build);
        check_sf16_stats(ckpt, &ref, build);
        check_sf16_cutlass(ckpt, &ref, build);
    }
};
