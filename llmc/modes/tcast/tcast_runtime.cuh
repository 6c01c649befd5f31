// tcast_runtime.cuh - the TensorCast build's run-time cast state (doc/TCAST.md section 5): the plan
// in force (llmc/modes/tcast/tcast_config.h), the cast kernels' workspace, the stochastic-rounding seeds
// and the --cast-stats counters. It is the model's BoundaryCasts (llmc/kernels/boundary.cuh), through which
// the model and the GEMM front cast the stored site tensors, and which runs two groups of site casts with the
// kernels around them, in one kernel where it can (doc/TCAST.md 5.5): the fc layer's GELU with the casts of its
// input and output (llmc/kernels/tcast/tcast_gelu.cuh), and the residual + LayerNorm with the casts of the
// projection output, the residual and the LayerNorm output (tcast_producers.cuh), and the training step's classifier
// with the casts of the logits (llmc/kernels/tcast/tcast_classifier.cuh); llmc/modes/tcast/gemm_tcast.cuh
// casts the linear-layer operands with it, and the attention kernels take their seeds from it.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/modes/tcast/tcast_config.h"
#include "llmc/kernels/tcast/tcast_stats.cuh"
#include "llmc/kernels/tcast/tcast_cast.cuh"
#include "llmc/kernels/tcast/tcast_gelu.cuh"
#include "llmc/kernels/tcast/tcast_producers.cuh"  // tcast_residual_layernorm_sites
#include "llmc/kernels/tcast/tcast_classifier.cuh"  // tcast_classifier_sites

// What the --cast-stats counters are kept for: the boundary sites, then the GEMM operands.
#define TCAST_STAT_SLOTS (NUM_BOUNDARY_SITES + TCAST_NUM_OPS)

// Roles in a seed: which cast of a layer (doc/TCAST.md 5.3).
enum { TCAST_ROLE_SITE = 0, TCAST_ROLE_FWD = 1, TCAST_ROLE_DGRAD = 2, TCAST_ROLE_WGRAD = 3, TCAST_ROLE_ATTN = 4 };

struct TcastRuntime {
    BoundaryCasts casts;          // first member: the model's BoundaryCasts pointer is this runtime
    TcastPlan plan;
    TcastCastContext cast_ctx;    // scratch of the per-tensor / channel reductions
    TcastDeviceStats* stats;      // device, TCAST_STAT_SLOTS counters (allocated when plan.stats > 0)
    int recording;                // 1 while the current step counts --cast-stats
    unsigned long long seed;      // the run's seed
    int step;                     // optimizer step of the casts being issued (seeds)
    unsigned long long cutlass_gemms, cutlass_casts;  // --cast-cutlass: GEMMs run on CUTLASS, of them with the cast inside
};

// The seed of one cast: the run's seed mixed with the step, a tensor id (a layer index, or a weight's
// offset in the parameters), the site or operand and the role. SplitMix64 finalizer (fp8.h).
static inline unsigned long long tcast_seed(const TcastRuntime* rt, unsigned long long id, int what, int role) {
    unsigned long long z = rt->seed ^ 0xD1B54A32D192ED03ull;
    z = fp8_mix64_(z + (unsigned long long)rt->step * 0x9E3779B97F4A7C15ull);
    z = fp8_mix64_(z + id * 0xBF58476D1CE4E5B9ull);
    return fp8_mix64_(z + (unsigned long long)(what * 8 + role) * 0x94D049BB133111EBull);
}

// The stats slot of a site or an operand while recording, else NULL (the kernels' non-counting form).
static inline TcastDeviceStats* tcast_stats_slot(const TcastRuntime* rt, int slot) {
    return rt->recording ? rt->stats + slot : NULL;
}

// Cast the stored (rows, cols) tensor x of `site` in place along its channel dimension (its rows).
static inline void tcast_site_cast(TcastRuntime* rt, BoundarySite site, unsigned long long id, floatX* x, size_t rows, size_t cols,
                                   cudaStream_t stream) {
    tcast_cast(x, x, (int)rows, (int)cols, 1, rt->plan.site[site], tcast_seed(rt, id, (int)site, TCAST_ROLE_SITE),
               tcast_stats_slot(rt, site), &rt->cast_ctx, stream);
}

// The BoundaryCasts functions of a TcastRuntime (bc is its first member).
static void tcast_boundary_cast(BoundaryCasts* bc, BoundarySite site, unsigned long long id, floatX* x, size_t rows, size_t cols,
                                cudaStream_t stream) {
    tcast_site_cast((TcastRuntime*)bc, site, id, x, rows, cols, stream);
}
// The cast of `site` in a residual + LayerNorm or a GELU (tcast_residual_layernorm_sites, tcast_gelu_cast): off
// unless the plan casts the site; the seed tcast_site_cast would use for tensor id; the site's counters on a
// --cast-stats step.
static inline TcastSiteCast tcast_site_of(const TcastRuntime* rt, BoundarySite site, unsigned long long id) {
    TcastSiteCast c;
    c.dt = rt->plan.site_on[site] ? &rt->plan.site[site] : NULL;
    c.seed = tcast_seed(rt, id, (int)site, TCAST_ROLE_SITE);
    c.stats = tcast_stats_slot(rt, site);
    return c;
}
// The fc layer's GELU with its site casts (BoundaryCasts::gelu): tcast_gelu_cast with the plan's matmul_out cast of
// pre (pre_id given and the site on) and gelu_out cast of out (out_id given and the site on); inside the GELU
// kernel where --cast-fuse and the types allow.
static void tcast_boundary_gelu(BoundaryCasts* bc, floatX* out, floatX* pre, size_t rows, size_t cols, unsigned long long pre_id,
                                unsigned long long out_id, int form, cudaStream_t stream) {
    TcastRuntime* rt = (TcastRuntime*)bc;
    const TcastSiteCast off = {NULL, 0, NULL};
    const TcastSiteCast a = pre_id != BOUNDARY_NO_ID ? tcast_site_of(rt, MATMUL_OUT, pre_id) : off;
    const TcastSiteCast b = out_id != BOUNDARY_NO_ID ? tcast_site_of(rt, GELU_OUT, out_id) : off;
    tcast_gelu_cast(out, pre, (int)rows, (int)cols, a, b, (BoundaryGelu)form, rt->plan.fuse != 0, &rt->cast_ctx, stream);
}
static bool tcast_boundary_residual_layernorm_fused(const BoundaryCasts* bc, int N, int C) {
    const TcastRuntime* rt = (const TcastRuntime*)bc;
    const TcastPlan* plan = &rt->plan;
    if (!plan->fuse || rt->recording || N < 1) return false;
    if (!plan->site_on[MATMUL_OUT] && !plan->site_on[RESIDUAL_OUT] && !plan->site_on[LAYERNORM_OUT]) return false;
    return tcast_residual_layernorm_sites_fusable(tcast_site_of(rt, MATMUL_OUT, 0), tcast_site_of(rt, RESIDUAL_OUT, 0),
                                                  tcast_site_of(rt, LAYERNORM_OUT, 0), C);
}
static void tcast_boundary_residual_layernorm(BoundaryCasts* bc, const BoundaryResidualLn& j, cudaStream_t stream) {
    TcastRuntime* rt = (TcastRuntime*)bc;
    tcast_residual_layernorm_sites(j.residual, j.out, j.mean, j.rstd, j.res_in, j.x, false, j.weight, j.bias, j.N, j.C,
                                   tcast_site_of(rt, MATMUL_OUT, j.x_id), tcast_site_of(rt, RESIDUAL_OUT, j.res_id),
                                   tcast_site_of(rt, LAYERNORM_OUT, j.ln_id), &rt->cast_ctx, stream);
}
// The training step's classifier with the logits' casts (BoundaryCasts::classifier_fused / classifier): the LM head's
// matmul_out cast (seed: the weight id, as tcast_site_cast would take it) and the logits cast on the classifier's staged
// rows, where --cast-fuse, the step (not a --cast-stats step) and the types allow (tcast_classifier_fusable).
static bool tcast_boundary_classifier_fused(const BoundaryCasts* bc, int N, int Vp) {
    const TcastRuntime* rt = (const TcastRuntime*)bc;
    const TcastPlan* plan = &rt->plan;
    if (!plan->fuse || rt->recording || N < 1) return false;
    return tcast_classifier_fusable(tcast_site_of(rt, MATMUL_OUT, 0), tcast_site_of(rt, LOGITS, 0), Vp);
}
static void tcast_boundary_classifier(BoundaryCasts* bc, const BoundaryClassifier& j, cudaStream_t stream) {
    TcastRuntime* rt = (TcastRuntime*)bc;
    tcast_classifier_sites(j.logits, j.losses, j.dloss, j.targets, j.B, j.T, j.V, j.Vp, tcast_site_of(rt, MATMUL_OUT, j.matmul_id),
                           tcast_site_of(rt, LOGITS, j.logits_id), &rt->cast_ctx, stream);
}
static unsigned long long tcast_boundary_attention_seed(const BoundaryCasts* bc, unsigned long long id) {
    return tcast_seed((const TcastRuntime*)bc, id, (int)ATTN_SCORES, TCAST_ROLE_ATTN);
}
static void tcast_boundary_destroy(BoundaryCasts* bc) {
    TcastRuntime* rt = (TcastRuntime*)bc;
    tcast_cast_context_free(&rt->cast_ctx);
    if (rt->stats) cudaCheck(cudaFree(rt->stats));
    free(rt);
}

// A runtime (heap; its casts.destroy frees it) for a model whose largest cast tensor is max_rows x max_cols
// (the workspace of the reductions), the run's seed and the parameter base (weight ids in seeds).
static inline TcastRuntime* tcast_runtime_create(const TcastPlan* plan, int max_rows, int max_cols, unsigned long long seed,
                                                 const floatX* params) {
    TcastRuntime* rt = (TcastRuntime*)malloc_check(sizeof(TcastRuntime));
    memset(rt, 0, sizeof(*rt));
    rt->plan = *plan;
    rt->seed = seed;
    for (int i = 0; i < NUM_BOUNDARY_SITES; i++) rt->casts.site_on[i] = plan->site_on[i];
    rt->casts.params = params;
    rt->casts.cast = tcast_boundary_cast;
    rt->casts.attention_seed = tcast_boundary_attention_seed;
    rt->casts.gelu = tcast_boundary_gelu;
    rt->casts.residual_layernorm_fused = tcast_boundary_residual_layernorm_fused;
    rt->casts.residual_layernorm = tcast_boundary_residual_layernorm;
    rt->casts.classifier_fused = tcast_boundary_classifier_fused;
    rt->casts.classifier = tcast_boundary_classifier;
    rt->casts.destroy = tcast_boundary_destroy;
    tcast_cast_context_init(&rt->cast_ctx, max_rows, max_cols);
    if (plan->stats > 0) cudaCheck(cudaMalloc(&rt->stats, TCAST_STAT_SLOTS * sizeof(TcastDeviceStats)));
    return rt;
}

// --cast-stats: zero the counters before a recorded step (stream-ordered).
static inline void tcast_stats_begin(TcastRuntime* rt, cudaStream_t stream) {
    cudaCheck(cudaMemsetAsync(rt->stats, 0, TCAST_STAT_SLOTS * sizeof(TcastDeviceStats), stream));
    rt->recording = 1;
}

// --cast-stats: after a recorded step, one line per site / operand that cast something: the
// fractions saturated and flushed and the range of group scale exponents; also to the log file.
static inline void tcast_stats_end(TcastRuntime* rt, int step, FILE* log, cudaStream_t stream) {
    rt->recording = 0;
    TcastDeviceStats* h = (TcastDeviceStats*)malloc_check(TCAST_STAT_SLOTS * sizeof(TcastDeviceStats));
    cudaCheck(cudaMemcpyAsync(h, rt->stats, TCAST_STAT_SLOTS * sizeof(TcastDeviceStats), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    printf("cast stats at step %d:\n", step);
    for (int i = 0; i < TCAST_STAT_SLOTS; i++) {
        const TcastDeviceStats* st = &h[i];
        if (st->values == 0) continue;
        const char* name = i < NUM_BOUNDARY_SITES ? BOUNDARY_SITE_NAMES[i] : TCAST_OP_NAMES[i - NUM_BOUNDARY_SITES];
        const double sat = (double)st->saturated / st->values, flush = (double)st->flushed / st->values;
        int lo = 1 << 30, hi = -(1 << 30);
        unsigned long long groups = 0, under = st->hist[TCAST_HIST_UNDER], over = st->hist[TCAST_HIST_OVER];
        for (int b = 0; b < TCAST_HIST_BINS; b++) {
            if (!st->hist[b]) continue;
            groups += st->hist[b];
            if (b == TCAST_HIST_UNDER || b == TCAST_HIST_OVER) continue;
            const int e = tcast_hist_exp(b);
            lo = e < lo ? e : lo;
            hi = e > hi ? e : hi;
        }
        char range[64] = "none";
        if (lo <= hi) snprintf(range, sizeof(range), "%d..%d", lo, hi);
        // a fixed scale pN derives no group scale (no histogram entries, doc/TCAST.md 4.5): its one exponent is N
        const TcastDataType* dt = i < NUM_BOUNDARY_SITES ? &rt->plan.site[i] : &rt->plan.op[i - NUM_BOUNDARY_SITES];
        if (dt->fixed && lo > hi) snprintf(range, sizeof(range), "%d..%d", dt->fixed_exp, dt->fixed_exp);
        printf("  %-4s %-14s %14llu values  saturated %.4e  flushed %.4e  scale exponents %s (%llu groups, %llu zero, %llu overflow)\n",
               i < NUM_BOUNDARY_SITES ? "site" : "gemm", name, st->values, sat, flush, range, groups, under, over);
        if (log) fprintf(log, "s:%d cast:%s sat:%.6e flush:%.6e scale:%s\n", step, name, sat, flush, range);
    }
    if (log) fflush(log);
    free(h);
}
