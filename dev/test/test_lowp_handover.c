/*
 * test_lowp_handover.c - the FP8 backend's hand-over of GELU / GELU' from one GEMM call to the next
 * (llmc/modes/lowp/lowp_handover.h; --fp8-cutlass 1 makes the next call's codes in the producing GEMM's epilogue).
 * First each function on its own, then the GEMM call sequences of the GPT-2 model under the flags that change them:
 * current and delayed scaling, a BF16 warm-up, evaluation and sampling forwards between training steps, gradient
 * accumulation, the GELU not fused into the fc GEMM (-ge 0), the LM head in FP8. A small simulator issues the calls in
 * llmc/model/model.cuh's order (gpt2_forward, gpt2_forward_backward) and applies the hand-over as
 * llmc/modes/lowp/gemm_lowp.cuh and lowp_cutlass.cuh do (which call takes, fuses, makes; one delayed-scaling step per
 * use of a role). What must hold, with --fp8-cutlass 1 against 0 on the same sequence: no run stops, no offer is
 * refused, every made hand-over is taken by its consumer, the producers run in BF16 at exactly the same calls (the
 * delayed-scaling bootstraps and the calls that do not run FP8), and every layer's delayed-scaling use counts are the
 * same (the producing call takes its consumer's scale step instead of the consumer, never both, never neither).
 * With --fp8-producers 2 the LayerNorm before the qkv / fc forward (and the LM head's) is offered too
 * (lowp_backend.cuh lowp_layernorm): it must always find the slot empty and be taken by that very call, fused or not.
 * Recompute levels (-r 1, 2) and multi-GPU runs issue the same GEMM calls (a recompute is a LayerNorm or GELU kernel
 * before a call, which the FP8 backend skips anyway: keeps_input; each rank has its own backend), so they need no
 * sequence of their own here.
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_lowp_handover.c -o /tmp/t && /tmp/t
 */
#include <stdio.h>
#include <string.h>

#include "dev/test/test_harness.h"
#include "llmc/modes/lowp/lowp_handover.h"

enum { GELU = 1, DGELU = 2, LAYERNORM = 3 };  // GemmDefer's values (llmc/kernels/gemm/gemm_context.cuh)

// ------------------------------------------------------------------------------------------------
// The functions one by one.

static char tensor_a[4], tensor_b[4], layer_a, layer_b;

static int is_none(const LowpDeferred* d) {
    return d->kind == 0 && d->out == NULL && d->pre == NULL && d->n == 0 && !d->made && d->consumer == NULL && d->colpart_rows == 0 &&
           !d->advanced;
}

static void test_take_leaves_nothing(void) {
    for (int advanced = 0; advanced < 2; advanced++) {
        LowpDeferred slot = lowp_handover_none();
        lowp_handover_make(&slot, DGELU, tensor_a, tensor_b, 64, &layer_a, 3, advanced);
        const LowpDeferred d = lowp_handover_take(&slot);
        CHECK(d.kind == DGELU && d.out == tensor_a && d.pre == tensor_b && d.n == 64 && d.made && d.consumer == &layer_a &&
                  d.colpart_rows == 3 && d.advanced == advanced,
              "take returns the made hand-over as made (advanced %d)", advanced);
        CHECK(is_none(&slot), "take leaves the slot empty, made and advanced included (advanced %d)", advanced);
        // the call after the consumer: nothing handed over, not codes made for somebody else
        const LowpDeferred next = lowp_handover_take(&slot);
        CHECK(lowp_handover_use(&next, 1, &layer_b, tensor_b, 64) == LOWP_USE_NONE, "the call after the consumer gets nothing");
        // an offer after a taken made hand-over is a new deferral, not "another producer than the one made"
        CHECK(lowp_handover_offer(&slot, GELU, tensor_b, tensor_a, 32, 1) == LOWP_OFFER_DEFERRED, "an offer after it is deferred");
    }
    LowpDeferred slot = lowp_handover_none();
    CHECK(lowp_handover_offer(&slot, GELU, tensor_a, tensor_b, 8, 1) == LOWP_OFFER_DEFERRED, "offer into an empty slot");
    const LowpDeferred d = lowp_handover_take(&slot);
    CHECK(d.kind == GELU && !d.made && is_none(&slot), "a deferred producer is taken once");
}

static void test_offer(void) {
    LowpDeferred slot = lowp_handover_none();
    CHECK(lowp_handover_offer(&slot, GELU, tensor_a, tensor_b, 8, 0) == LOWP_OFFER_DECLINED && is_none(&slot),
          "the backend cannot take producers: declined, slot untouched");
    CHECK(lowp_handover_offer(&slot, GELU, tensor_a, tensor_b, 8, 1) == LOWP_OFFER_DEFERRED, "deferred");
    CHECK(slot.kind == GELU && slot.out == tensor_a && slot.pre == tensor_b && slot.n == 8 && !slot.made, "the slot holds the offer");
    CHECK(lowp_handover_offer(&slot, DGELU, tensor_b, tensor_a, 8, 1) == LOWP_OFFER_DECLINED && slot.kind == GELU,
          "a second offer before any call: declined, the first kept");
    for (int advanced = 0; advanced < 2; advanced++) {
        lowp_handover_make(&slot, GELU, tensor_a, tensor_b, 8, &layer_a, 0, advanced);
        CHECK(lowp_handover_offer(&slot, GELU, tensor_a, tensor_b, 8, 0) == LOWP_OFFER_MADE && slot.made,
              "the made producer offered: taken, whatever can_take says");
        const struct { int kind; void* out; const void* pre; size_t n; const char* what; } other[] = {
            {DGELU, tensor_a, tensor_b, 8, "kind"}, {GELU, tensor_b, tensor_b, 8, "out"}, {GELU, tensor_a, tensor_a, 8, "pre"},
            {GELU, tensor_a, tensor_b, 16, "n"}};
        for (int i = 0; i < 4; i++)
            CHECK(lowp_handover_offer(&slot, other[i].kind, other[i].out, other[i].pre, other[i].n, 1) == LOWP_OFFER_OTHER && slot.made,
                  "another %s than the made one: OTHER, the made one kept", other[i].what);
    }
}

static void test_use(void) {
    LowpDeferred d = lowp_handover_none();
    CHECK(lowp_handover_use(&d, 1, &layer_a, tensor_a, 8) == LOWP_USE_NONE, "nothing");
    d.kind = GELU, d.out = tensor_a, d.pre = tensor_b, d.n = 8;
    CHECK(lowp_handover_use(&d, 1, &layer_a, tensor_b, 4) == LOWP_USE_OFFERED, "a producer not made: offered (the call decides)");
    for (int advanced = 0; advanced < 2; advanced++) {
        lowp_handover_make(&d, GELU, tensor_a, tensor_b, 8, &layer_a, 0, advanced);
        const LowpUse miss = advanced ? LOWP_USE_STOP : LOWP_USE_UNMADE;
        CHECK(lowp_handover_use(&d, 1, &layer_a, tensor_a, 8) == LOWP_USE_MADE, "its consumer takes it (advanced %d)", advanced);
        CHECK(lowp_handover_use(&d, 0, &layer_a, tensor_a, 8) == miss, "its consumer not on FP8 GEMMs (advanced %d)", advanced);
        CHECK(lowp_handover_use(&d, 1, &layer_b, tensor_a, 8) == miss, "another layer (advanced %d)", advanced);
        CHECK(lowp_handover_use(&d, 1, &layer_a, tensor_b, 8) == miss, "another tensor (advanced %d)", advanced);
        CHECK(lowp_handover_use(&d, 1, &layer_a, tensor_a, 16) == miss, "another size (advanced %d)", advanced);
    }
}

static void test_makes(void) {
    for (int bits = 0; bits < 32; bits++) {
        const int cutlass = bits & 1, offered = (bits >> 1) & 1, ok = (bits >> 2) & 1, delayed_training = (bits >> 3) & 1;
        const long long uses = (bits >> 4) & 1;
        const int boot = delayed_training && uses == 0;
        CHECK(lowp_handover_bootstrap(delayed_training, uses) == boot, "bootstrap(%d, %lld)", delayed_training, uses);
        CHECK(lowp_handover_makes(cutlass, offered, ok, delayed_training, uses) == (cutlass && offered && ok && !boot),
              "makes(%d, %d, %d, %d, %lld)", cutlass, offered, ok, delayed_training, uses);
    }
}

// ------------------------------------------------------------------------------------------------
// The model's call sequences.

enum { QKV, ATTPROJ, FC, FCPROJ };
enum { ROLE_X, ROLE_W, ROLE_DY };
#define MAX_BLOCKS 4
#define NUM_LAYERS (4 * MAX_BLOCKS + 1)  // + the LM head

// The run's knobs.
typedef struct {
    int blocks, cutlass, delayed, warmup, lm_head, gelu_fusion, producers;
} Knobs;

// The backend's state as far as the hand-over reads it, and what happened.
typedef struct {
    Knobs k;
    LowpDeferred slot;
    long long uses[NUM_LAYERS][3];  // delayed scaling: uses of each role in training passes (lowp_scale)
    int training, optimizer_steps, rows_ok;
    long long made, made_advanced, taken, unmade, stops, others, fused, materialized, front_bf16;
    long long ln_offered, ln_fused, ln_materialized;  // --fp8-producers 2: LayerNorm outputs handed to their consumer
} Sim;

// Tensor identities: distinct addresses (never dereferenced). Per block the LayerNorm, attention, pre-GELU and GELU
// outputs; shared the residual-gradient and the (B,T,4C) scratch buffers, as in model.cuh.
static char t_ln1[MAX_BLOCKS], t_atty[MAX_BLOCKS], t_ln2[MAX_BLOCKS], t_fch[MAX_BLOCKS], t_fch_gelu[MAX_BLOCKS], t_lnf, t_logits,
    t_dresidual, t_dbtc, t_dbt4c, t_res1[MAX_BLOCKS], t_res2[MAX_BLOCKS], t_resf;
static char layer_ids[NUM_LAYERS];
static const size_t N = 64, C = 16;  // rows and width: only the value counts n compare

static int lm_head(const Sim* s) { return 4 * s->k.blocks; }
static int layer_index(int block, int which) { return 4 * block + which; }
static int delayed_training(const Sim* s) { return s->k.delayed > 0 && s->training; }

// lowp_eligible: past the warm-up, rows a multiple of 16, the LM head only with --fp8-lm-head 1.
static int runs(const Sim* s, int layer) { return s->optimizer_steps >= s->k.warmup && s->rows_ok && (layer != lm_head(s) || s->k.lm_head); }

// A layer's consumer of its fused epilogue (gemm_lowp_link_mlp): fc -> fcproj (GELU), fcproj -> fc (GELU'); -1: none.
static int consumer_of(const Sim* s, int layer, int kind) {
    if (s->k.cutlass == 0 || layer == lm_head(s)) return -1;
    if (kind == GELU && layer % 4 == FC) return layer + 1;
    if (kind == DGELU && layer % 4 == FCPROJ) return layer - 1;
    return -1;
}

// The taken hand-over d at the call of `layer` on x (n values): lowp_cutlass_use, then lowp_fusable / lowp_materialize
// (a forward call fuses GELU or a LayerNorm, a backward call GELU').
static LowpUse sim_take(Sim* s, int layer, int kind, int role, const void* x, size_t n, int run) {
    const LowpDeferred d = lowp_handover_take(&s->slot);
    const LowpUse u = lowp_handover_use(&d, run, &layer_ids[layer], x, n);
    if (u == LOWP_USE_MADE) s->taken++;
    if (u == LOWP_USE_STOP) s->stops++;
    if (u == LOWP_USE_UNMADE) s->unmade++;
    if (u == LOWP_USE_OFFERED) {
        const int kind_ok = d.kind == kind || (role == ROLE_X && d.kind == LAYERNORM);
        const int fusable = run && kind_ok && d.out == x && d.n == n && !lowp_handover_bootstrap(delayed_training(s), s->uses[layer][role]);
        if (fusable) s->fused++;
        else s->materialized++;
        if (d.kind == LAYERNORM && d.out == x) {  // (its own consumer: the LayerNorm's out is this call's x)
            if (fusable) s->ln_fused++;
            else s->ln_materialized++;
        }
    }
    return u;
}

// gpt2_layernorm before the forward call of `consumer` on out (n values, normalized from pre): with --fp8-producers 2
// offered to the backend (lowp_layernorm) where that call runs FP8 GEMMs; the slot must be empty then.
static void sim_layernorm(Sim* s, int consumer, void* out, const void* pre, size_t n) {
    if (s->k.producers < 2 || !runs(s, consumer)) return;
    if (lowp_handover_offer(&s->slot, LAYERNORM, out, pre, n, 1) == LOWP_OFFER_DEFERRED) s->ln_offered++;
    else s->others++;  // the backend would decline and run the LayerNorm itself: a hand-over the call before left behind
}

// The consumer's quantization of its operand, unless it was made: one delayed-scaling step (lowp_scale).
static void sim_quantize(Sim* s, int layer, int role, LowpUse u) {
    if (u != LOWP_USE_MADE && delayed_training(s)) s->uses[layer][role]++;
}

// The producing call's fused epilogue (lowp_cutlass_takes, then lowp_cutlass_fc / _dgrad): returns whether it made.
static int sim_make(Sim* s, int layer, int kind, int role, void* out, const void* pre, size_t n, LowpUse u) {
    const int c = consumer_of(s, layer, kind);
    if (c < 0 || u == LOWP_USE_MADE) return 0;  // (the made codes sit in the buffer the epilogue would write)
    if (!lowp_handover_makes(s->k.cutlass, 1, 1, delayed_training(s), s->uses[c][role])) return 0;
    const int advanced = delayed_training(s);
    if (advanced) s->uses[c][role]++;  // the consumer's step, taken by the producer
    lowp_handover_make(&s->slot, kind, out, pre, n, &layer_ids[c], 0, advanced);
    s->made++;
    s->made_advanced += advanced;
    return 1;
}

// The front's offer right after a call that ran on the backend (lowp_defer).
static void sim_offer(Sim* s, int kind, void* out, const void* pre, size_t n, int made) {
    const LowpOffer r = lowp_handover_offer(&s->slot, kind, out, pre, n, s->k.producers);
    if (r == LOWP_OFFER_OTHER) s->others++;
    if (made && r != LOWP_OFFER_MADE) s->others++;
    if (r == LOWP_OFFER_DECLINED) s->front_bf16++;
}

// matmul_forward(out, inp, weight, pre_gelu): gelu_out / pre: the GELU output and pre-activation, or NULL.
static void sim_forward(Sim* s, int layer, const void* inp, size_t n_in, void* gelu_out, const void* pre, size_t n_out) {
    const int run = runs(s, layer);
    const LowpUse u = sim_take(s, layer, GELU, ROLE_X, inp, n_in, run);
    if (!run) {
        if (gelu_out) s->front_bf16++;  // BF16 GEMM with the GELU in its epilogue: no offer
        return;
    }
    sim_quantize(s, layer, ROLE_X, u);
    const int made = gelu_out && sim_make(s, layer, GELU, ROLE_X, gelu_out, pre, n_out, u);
    if (gelu_out) sim_offer(s, GELU, gelu_out, pre, n_out, made);
}

// matmul_backward(dinp, ..., dout, weight, pre_gelu).
static void sim_backward(Sim* s, int layer, const void* dout, size_t n_out, void* dinp, const void* pre, size_t n_in) {
    const int run = runs(s, layer);
    const LowpUse u = sim_take(s, layer, DGELU, ROLE_DY, dout, n_out, run);
    if (!run) {
        if (pre) s->front_bf16++;  // BF16 dgrad with GELU' in its epilogue: no offer
        return;
    }
    sim_quantize(s, layer, ROLE_DY, u);
    const int made = pre && sim_make(s, layer, DGELU, ROLE_DY, dinp, pre, n_in, u);
    if (pre) sim_offer(s, DGELU, dinp, pre, n_in, made);
}

// gpt2_forward: per block qkv, attproj, fc (with its GELU when -ge 1; else a separate GELU kernel), fcproj; the LM head.
static void sim_gpt2_forward(Sim* s) {
    for (int l = 0; l < s->k.blocks; l++) {
        sim_layernorm(s, layer_index(l, QKV), &t_ln1[l], &t_res1[l], N * C);
        sim_forward(s, layer_index(l, QKV), &t_ln1[l], N * C, NULL, NULL, 0);
        sim_forward(s, layer_index(l, ATTPROJ), &t_atty[l], N * C, NULL, NULL, 0);
        sim_layernorm(s, layer_index(l, FC), &t_ln2[l], &t_res2[l], N * C);
        if (s->k.gelu_fusion) sim_forward(s, layer_index(l, FC), &t_ln2[l], N * C, &t_fch_gelu[l], &t_fch[l], 4 * N * C);
        else sim_forward(s, layer_index(l, FC), &t_ln2[l], N * C, NULL, NULL, 0);
        sim_forward(s, layer_index(l, FCPROJ), &t_fch_gelu[l], 4 * N * C, NULL, NULL, 0);
    }
    sim_layernorm(s, lm_head(s), &t_lnf, &t_resf, N * C);
    sim_forward(s, lm_head(s), &t_lnf, N * C, NULL, NULL, 0);
}

// gpt2_forward_backward: the forward in a training pass, then the LM head's backward and per block, last first, fcproj
// (GELU' of its dgrad offered), fc, attproj, qkv (dout: the (B,T,3C) part of the scratch).
static void sim_forward_backward(Sim* s) {
    s->training = 1;
    sim_gpt2_forward(s);
    sim_backward(s, lm_head(s), &t_logits, N * 64, &t_dbtc, NULL, 0);
    for (int l = s->k.blocks - 1; l >= 0; l--) {
        sim_backward(s, layer_index(l, FCPROJ), &t_dresidual, N * C, &t_dbt4c, &t_fch[l], 4 * N * C);
        sim_backward(s, layer_index(l, FC), &t_dbt4c, 4 * N * C, &t_dbtc, NULL, 0);
        sim_backward(s, layer_index(l, ATTPROJ), &t_dresidual, N * C, &t_dbtc, NULL, 0);
        sim_backward(s, layer_index(l, QKV), &t_dbt4c, 3 * N * C, &t_dbtc, NULL, 0);
    }
    s->training = 0;
}

// A training run of `steps` optimizer steps with `micro` micro-batches each; before each step an evaluation forward every
// `eval_every` steps (0: none) and a sampling forward every `sample_every` (rows a multiple of 16 or not: sample_rows_ok).
static void sim_run(Sim* s, int steps, int micro, int eval_every, int sample_every, int sample_rows_ok) {
    for (int step = 0; step < steps; step++) {
        s->rows_ok = 1;
        if (eval_every && step % eval_every == 0) sim_gpt2_forward(s);
        if (sample_every && step > 0 && step % sample_every == 0) {
            s->rows_ok = sample_rows_ok;
            sim_gpt2_forward(s);
            s->rows_ok = 1;
        }
        for (int m = 0; m < micro; m++) sim_forward_backward(s);
        s->optimizer_steps++;
    }
}

typedef struct {
    const char* name;
    Knobs k;
    int steps, micro, eval_every, sample_every, sample_rows_ok;
    long long min_advanced;  // made under delayed scaling at least this often (a fused training pass happened)
} Scenario;

static void test_sequences(void) {
    const Scenario cases[] = {
        {"current scaling, eval and sampling (N % 16 != 0)", {3, 1, 0, 0, 0, 1, 1}, 4, 1, 1, 2, 0, 0},
        {"current scaling, sampling with N % 16 == 0", {3, 1, 0, 0, 0, 1, 1}, 4, 1, 0, 1, 1, 0},
        {"delayed 4, warm-up 3, eval every 5 (the resume row)", {4, 1, 4, 3, 0, 1, 1}, 20, 1, 5, 0, 0, 1},
        {"delayed 4, no warm-up, eval at step 0", {2, 1, 4, 0, 0, 1, 1}, 4, 1, 2, 0, 0, 1},
        {"delayed 2, eval before every step, sampling", {2, 1, 2, 1, 0, 1, 1}, 5, 1, 1, 2, 1, 1},
        {"delayed 4, grad accumulation 3", {2, 1, 4, 1, 0, 1, 1}, 4, 3, 2, 0, 0, 1},
        {"current scaling, grad accumulation 2", {2, 1, 0, 1, 0, 1, 1}, 3, 2, 1, 0, 0, 0},
        {"delayed 4, GELU not fused (-ge 0)", {2, 1, 4, 0, 0, 0, 1}, 4, 1, 2, 0, 0, 1},
        {"current scaling, -ge 0", {2, 1, 0, 0, 0, 0, 1}, 3, 1, 1, 0, 0, 0},
        {"delayed 4, LM head in FP8", {2, 1, 4, 2, 1, 1, 1}, 5, 1, 2, 0, 0, 1},
        {"current scaling, LM head in FP8", {2, 1, 0, 0, 1, 1, 1}, 3, 1, 1, 0, 0, 0},
        {"LayerNorm producers: current scaling, eval, sampling (N % 16 != 0)", {3, 1, 0, 0, 0, 1, 2}, 4, 1, 1, 2, 0, 0},
        {"LayerNorm producers: delayed 4, warm-up 3, eval every 5", {4, 1, 4, 3, 0, 1, 2}, 20, 1, 5, 0, 0, 1},
        {"LayerNorm producers: delayed 2, eval before every step, sampling", {2, 1, 2, 1, 0, 1, 2}, 5, 1, 1, 2, 1, 1},
        {"LayerNorm producers: delayed 4, grad accumulation 3, LM head in FP8", {2, 1, 4, 1, 1, 1, 2}, 4, 3, 2, 0, 0, 1},
        {"LayerNorm producers: delayed 4, -ge 0", {2, 1, 4, 0, 0, 0, 2}, 4, 1, 2, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const Scenario* c = &cases[i];
        Sim run[2];
        for (int cutlass = 0; cutlass < 2; cutlass++) {
            Sim* s = &run[cutlass];
            memset(s, 0, sizeof(*s));
            s->slot = lowp_handover_none();
            s->k = c->k;
            s->k.cutlass = cutlass;
            sim_run(s, c->steps, c->micro, c->eval_every, c->sample_every, c->sample_rows_ok);
        }
        const Sim *a = &run[0], *b = &run[1];
        CHECK(b->stops == 0 && b->others == 0 && b->unmade == 0, "%s: --fp8-cutlass 1: %lld stops, %lld refused offers, %lld codes made "
              "for another call", c->name, b->stops, b->others, b->unmade);
        CHECK(b->made > 0 && b->taken == b->made, "%s: every made hand-over taken by its consumer (%lld made, %lld taken)", c->name,
              b->made, b->taken);
        CHECK(b->made_advanced >= c->min_advanced && (c->k.delayed > 0 || b->made_advanced == 0),
              "%s: %lld made under delayed scaling (at least %lld)", c->name, b->made_advanced, c->min_advanced);
        CHECK(a->made == 0 && a->stops == 0 && a->others == 0, "%s: --fp8-cutlass 0 makes nothing", c->name);
        CHECK(a->materialized == b->materialized && a->front_bf16 == b->front_bf16,
              "%s: the producers run in BF16 at the same calls (materialized %lld / %lld, by the front %lld / %lld)", c->name,
              a->materialized, b->materialized, a->front_bf16, b->front_bf16);
        CHECK(a->fused == b->fused + b->made, "%s: what --fp8-cutlass 0 fuses into the consumer's quantization, 1 makes in the "
              "producer's epilogue or fuses (%lld = %lld + %lld)", c->name, a->fused, b->fused, b->made);
        int same_uses = memcmp(a->uses, b->uses, sizeof(a->uses)) == 0;
        CHECK(same_uses, "%s: every layer's delayed-scaling use counts equal with --fp8-cutlass 0 and 1", c->name);
        CHECK(is_none(&b->slot), "%s: nothing handed over after the run", c->name);
        if (c->k.producers >= 2)
            CHECK(b->ln_offered > 0 && b->ln_fused + b->ln_materialized == b->ln_offered && a->ln_offered == b->ln_offered &&
                      a->ln_fused == b->ln_fused && a->ln_fused > 0,
                  "%s: every LayerNorm offered is taken by its consumer (%lld offered: %lld fused, %lld materialized; --fp8-cutlass 0: "
                  "%lld / %lld)", c->name, b->ln_offered, b->ln_fused, b->ln_materialized, a->ln_offered, a->ln_fused);
    }
}

int main(void) {
    test_take_leaves_nothing();
    test_offer();
    test_use();
    test_makes();
    test_sequences();
    return test_summary();
}
