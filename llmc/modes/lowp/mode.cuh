// mode.cuh (FP8 / TCFP-12 module, FP8=1 or TCFP12=1; doc/TCFP12.md) - the trainer's hooks
// (llmc/modes/mode_defaults.cuh): the --fp8-* knobs (and in the TCFP12=1 build the --tcfp-* ones), the
// low-precision GEMM backend put behind every linear layer (llmc/modes/lowp/gemm_lowp.cuh) once the
// parameters exist, its knobs printed at start-up, and its state (error feedback, amax histories, current
// weight codes) in lowp_<step>[_rank<r>].bin beside every state file (llmc/modes/lowp/lowp_state.cuh).
#pragma once

#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

#include "llmc/modes/mode_defaults.cuh"
#include "llmc/modes/lowp/gemm_lowp.cuh"
#include "llmc/modes/lowp/lowp_state.cuh"

// The knobs the quantized reference states model (dev/reference/lowp_ref.py; test_gpt2cu attaches these): per-tensor
// current scaling, fp32-exact accumulation, FP8 wgrad, the LM head in BF16, no warm-up, cuBLASLt GEMMs, the GELU / GELU'
// producers on (the same codes as separate passes), the LM head's backward in row chunks (all 0 but producers,
// lm_head_rows). The TCFP-12 build's defaults.
static inline LowpOptions lowp_reference_options() {
    LowpOptions o = {};
    o.producers = 1;
    o.lm_head_rows = 8192;
    return o;
}

// The trainer's defaults. FP8: Transformer Engine's recipe (delayed scaling, here from the max amax of the last 16 uses;
// fast accumulation in the forward GEMMs only, as torchao's output GEMM too) with the LM head in FP8: 1.27-1.28x BF16 at
// d24 B=32 and 1.20x at d12 B=64 on an H200, a 300-step Gutenberg d12 val loss 0.012 above BF16's (0.002 below with
// --fp8-cutlass 1 --fp8-producers 2; doc/TCFP12.md "The FP8 recipe as the default"). cuBLASLt GEMMs: under this recipe the fused CUTLASS epilogues (--fp8-cutlass 1) measured
// the same step, and without them the numerics do not depend on whether make found CUTLASS. TCFP-12 keeps the reference
// knobs: its second weight term exists for the bits fast accumulation drops, and its 300-step loss moved from +0.016 to
// +0.021 over BF16 with the recipe (--tcfp-abd 1 with it: +0.035). The LayerNorm producers (--fp8-producers 2) gain
// within the run-to-run spread: off (doc/TCFP12.md "The LayerNorm outputs as producers").
static inline LowpOptions lowp_default_options() {
    LowpOptions o = lowp_reference_options();
    if (kLowpTCFP12) return o;
    o.delayed = 16;
    o.fast_accum = LOWP_FAST_ACCUM_FORWARD;
    o.lm_head = 1;
    return o;
}

// Put the backend with options opt behind the model's linear layers (after gpt2_allocate_parameters and
// gpt2_attach_multi_gpu): the TCFP-12 split reads the fp32 master weights when the run keeps them whole.
// allow_fallback: on a GPU without FP8 tensor cores run BF16 GEMMs instead of dying. With --fp8-cutlass 1 the backend
// also learns each block's MLP pair (gemm_lowp_link_mlp: the fc layer's fused epilogue makes the fcproj layer's X, the
// fcproj dgrad's the fc layer's dY), its layers registered in the order the forward uses them.
static inline void lowp_attach_model(GPT2* m, const LowpOptions* opt, int allow_fallback) {
    gemm_lowp_attach(&m->gemm, opt, allow_fallback, m->seed);
    gemm_lowp_set_model(&m->gemm, m->params_memory, m->state_elems == m->num_parameters ? m->master_weights : NULL, m->params.wte);
    if (!opt->cutlass || !m->gemm.lowp) return;
    const int L = m->config.num_layers;
    const size_t C = (size_t)m->config.channels;
    const ParameterTensors& p = m->params;
    const floatX** w = (const floatX**)malloc_check((size_t)4 * L * sizeof(const floatX*));
    for (int l = 0; l < L; l++) {
        w[4 * l + 0] = p.qkvw + (size_t)l * 3 * C * C;
        w[4 * l + 1] = p.attprojw + (size_t)l * C * C;
        w[4 * l + 2] = p.fcw + (size_t)l * 4 * C * C;
        w[4 * l + 3] = p.fcprojw + (size_t)l * 4 * C * C;
    }
    const int c = (int)C, ocs[4] = {3 * c, c, 4 * c, c}, cs[4] = {c, c, c, 4 * c};
    gemm_lowp_link_mlp(&m->gemm, w, L, ocs, cs);
    free(w);
}

struct Mode : ModeDefaults {
    LowpOptions opt = lowp_default_options();
    int fallback = 0;  // --fp8-fallback

    // The FP8 knobs, then (TCFP12=1 build only) the TCFP-12 ones.
    int flags(CliFlag* out) {
        const CliFlag f[] = {
            {"--fp8-delayed", CLI_INT, &opt.delayed, "FP8 scales from the max amax of the last N uses (delayed scaling); 0 = current", 0, 4096, NULL},
            {"--fp8-fast-accum", CLI_INT, &opt.fast_accum, "cuBLASLt fast accumulation: 0 none, 1 every FP8 GEMM, 2 forward only (Transformer Engine's, torchao's recipe)", 0, 2, NULL},
            {"--fp8-hp-wgrad", CLI_INT, &opt.hp_wgrad, "1 = weight gradients in BF16 instead of FP8", 0, 1, NULL},
            {"--fp8-warmup", CLI_INT, &opt.warmup, "optimizer steps with BF16 GEMMs before FP8 starts", 0, INT_MAX, NULL},
            {"--fp8-lm-head", CLI_INT, &opt.lm_head, "1 = the LM head in FP8 too", 0, 1, NULL},
            {"--fp8-lm-head-rows", CLI_INT, &opt.lm_head_rows, "with --fp8-lm-head 1: its backward in chunks of this many token rows (a multiple of 16: its dY codes take 2 x rows x Vp bytes, not 2 x B*T x Vp); 0 = all rows at once", 0, INT_MAX, NULL},
            {"--fp8-producers", CLI_INT, &opt.producers, "1 = GELU / GELU' computed inside the next GEMM's quantization pass (speculative current scaling), 2 = the LayerNorm outputs too; 0 = separate passes", 0, 2, NULL},
            {"--fp8-cutlass", CLI_INT, &opt.cutlass, "1 = fc forward and fcproj dgrad as CUTLASS GEMMs whose epilogues write the next GEMM's codes (GELU / GELU', fast accumulation; FP8=1 build with CUTLASS, H100 / H200); 0 = cuBLASLt + producer passes", 0, 1, NULL},
            {"--fp8-fallback", CLI_INT, &fallback, "1 = on a GPU without FP8 tensor cores run BF16 GEMMs instead of failing", 0, 1, NULL},
            {"--tcfp-block", CLI_INT, &opt.block, "TCFP-12 scales: 0 per tensor; 32, 64, 128 = bxb weight tiles, 1xb activation blocks (32, 64: slow chunked GEMMs)", 0, 0, "32|64|128"},
            {"--tcfp-ef", CLI_INT, &opt.error_feedback, "1 = error feedback of the weight split across steps", 0, 1, NULL},
            {"--tcfp-srr", CLI_INT, &opt.srr, "1 = stochastic rounding of the residual W_lo (instead of error feedback)", 0, 1, NULL},
            {"--tcfp-abd", CLI_INT, &opt.abd, "1 = asymmetric backward: dgrad with W_hi only", 0, 1, NULL},
        };
        constexpr int kFP8Flags = 9, kAll = (int)(sizeof(f) / sizeof(f[0]));
        static_assert(kAll <= kMaxFlags, "kMaxFlags");
        const int n = kLowpTCFP12 ? kAll : kFP8Flags;
        for (int i = 0; i < n; i++) out[i] = f[i];
        return n;
    }
    void validate() const { gemm_lowp_options_validate(&opt, fallback); }
    void attach_parameters(GPT2* m) { lowp_attach_model(m, &opt, fallback); }
    void print_config(const GPT2* m) const {
        char desc[256];
        gemm_lowp_describe(&m->gemm, desc, sizeof(desc));
        printf("%s options: %s\n", GEMM_LOWP_MODE_NAME, desc);
    }

    static constexpr const char* state_kind = "lowp";
    bool state_active(const GPT2* m) const { return m->gemm.lowp != NULL; }
    void state_write(GPT2* m, const char* path) const { gemm_lowp_state_write(&m->gemm, path); }
    void state_read(GPT2* m, const char* path) const {
        struct stat st;
        if (stat(path, &st) != 0)
            die("%s: missing: resuming a %s run needs the low-precision GEMM state written with the checkpoint", path, GEMM_LOWP_MODE_NAME);
        gemm_lowp_state_read(&m->gemm, path, m->num_parameters);
    }
};
