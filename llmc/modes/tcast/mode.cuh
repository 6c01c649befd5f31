// mode.cuh (TensorCast module, TCAST=1; doc/TCAST.md) - the trainer's hooks (llmc/modes/mode_defaults.cuh):
// the flags --cast, --cast-gemm, --cast-lm-head, --cast-stats, --cast-fuse, --cast-cutlass (llmc/modes/tcast/tcast_config.h), the plan
// they resolve to checked against the model's shapes before the GPU is touched, and, once the
// activations exist, the plan attached to the model: the boundary-site casts (the model's BoundaryCasts,
// llmc/modes/tcast/tcast_runtime.cuh), the operand casts of the linear layers (a GEMM backend,
// llmc/modes/tcast/gemm_tcast.cuh; the MATMUL_OUT casts in CUTLASS epilogues, tcast_cutlass.cuh) and the attention-site casts (configured in the attention kernels). An
// empty plan attaches nothing: the build then runs exactly the BF16 code paths. Every step tells the
// casts its step number (the stochastic-rounding seeds, doc/TCAST.md 5.3, so that a resumed run casts what
// the uninterrupted one did) and whether it counts --cast-stats.
#pragma once

#include <stdio.h>

#include "llmc/modes/mode_defaults.cuh"
#include "llmc/modes/tcast/tcast_config.h"
#include "llmc/modes/tcast/tcast_runtime.cuh"
#include "llmc/modes/tcast/gemm_tcast.cuh"
#include "llmc/modes/tcast/tcast_cutlass.cuh"

// Start-up check of the plan's attention sites for head size HS: stops with `error: --cast attn_scores=NAME:
// why` when a site's datatype cannot run in the attention kernels. No CUDA call.
static inline void tcast_attention_check(const TcastPlan* plan, int HS) {
    const int sites[2] = {ATTN_SCORES, ATTN_PROBS};
    char why[256];
    for (int k = 0; k < 2; k++) {
        if (!plan->site_on[sites[k]]) continue;
        if (!attention_tcast_supported(HS, &plan->site[sites[k]], why, sizeof(why)))
            die("--cast %s=%s: %s", BOUNDARY_SITE_NAMES[sites[k]], plan->site[sites[k]].name, why);
    }
}

// Apply the plan (already checked against the shapes) to the model, after gpt2_allocate_activations: the
// site casts, the operand casts and the attention casts, with the buffer of the group scales the attention
// forward keeps for its backward (gpt2_allocate_attention_buffers; none for datatypes that keep none). An empty
// plan attaches nothing.
static inline void tcast_attach_model(GPT2* m, const TcastPlan* plan) {
    if (tcast_plan_empty(plan)) return;
    const GPT2Config* c = &m->config;
    const int rows = m->B * m->T, widest = c->padded_vocab_size > 4 * c->channels ? c->padded_vocab_size : 4 * c->channels;
    TcastRuntime* rt = tcast_runtime_create(plan, rows > widest ? rows : widest, widest, m->seed, m->params_memory);
    m->casts = &rt->casts;
    m->gemm.casts = &rt->casts;
    tcast_cutlass_attach(rt);
    gemm_tcast_attach(&m->gemm, rt, m->params.wte, rows, c->channels, c->padded_vocab_size);
    attention_tcast_configure(plan->site_on[ATTN_SCORES] ? &plan->site[ATTN_SCORES] : NULL,
                              plan->site_on[ATTN_PROBS] ? &plan->site[ATTN_PROBS] : NULL);
    gpt2_allocate_attention_buffers(m);
}

// The step whose casts are issued next, and whether they count --cast-stats (record). A no-op without casts.
static inline void tcast_model_step(GPT2* m, int step, bool record) {
    TcastRuntime* rt = (TcastRuntime*)m->casts;
    if (!rt) return;
    rt->step = step;
    TcastDeviceStats* st = record ? rt->stats : NULL;
    if (st) tcast_stats_begin(rt, m->stream);
    attention_tcast_stats(st ? st + ATTN_SCORES : NULL, st ? st + ATTN_PROBS : NULL);  // the forward's counting kernels
}

struct Mode : ModeDefaults {
    TcastOptions opt;         // the flags' texts
    TcastPlan plan;           // what they resolved to (check_model)
    bool recording = false;   // the current training step counts --cast-stats

    int flags(CliFlag* f) { return tcast_flags(&opt, f); }
    // The datatypes, then whether the model's shapes take them.
    void check_model(const GPT2Config& spec, int B, int T) {
        tcast_plan_init(&plan, &opt);
        tcast_plan_check_shapes(&plan, spec.channels, spec.padded_vocab_size, B, T);
        tcast_attention_check(&plan, spec.channels / spec.num_heads);
    }
    void attach_activations(GPT2* m) { tcast_attach_model(m, &plan); }
    // (cast_cutlass: whether the CUTLASS epilogue path is on in this run, tcast_cutlass_attach: 0 where the plan casts no
    // matmul_out or the binary / GPU cannot)
    void describe(const GPT2* m, char* out, size_t n) const {
        const TcastRuntime* rt = (const TcastRuntime*)m->casts;
        snprintf(out, n, " cast=%s cast_gemm=%s cast_lm_head=%d cast_cutlass=%d", *opt.cast ? opt.cast : "none",
                 *opt.cast_gemm ? opt.cast_gemm : "none", opt.lm_head, rt && rt->casts.gemm_out ? 1 : 0);
    }
    // --cast-stats N: steps N, 2N, ... and the first one count (training steps only).
    void step_begin(GPT2* m, int step, int start_step, bool training) {
        recording = training && opt.stats > 0 && ((step + 1) % opt.stats == 0 || step == start_step);
        tcast_model_step(m, step, recording);
    }
    void step_end(GPT2* m, int step, int start_step, Logger* lg, const DataLoader* train, int rank) {
        (void)start_step, (void)train, (void)rank;
        TcastRuntime* rt = (TcastRuntime*)m->casts;
        if (recording && rt && rt->stats) tcast_stats_end(rt, step + 1, lg->f, m->stream);
    }
};
