// gemm_tcast.cuh - the TensorCast build's linear-layer operand casts (--cast-gemm, doc/TCAST.md 5.2)
// as a backend of the GEMM front (llmc/kernels/gemm/gemm.cuh GemmLowpBackend): it casts the operands of each
// product along that product's reduction dimension, as MX hardware would see them (Rouhani et al.
// 2023, section 4), and runs the base backend's BF16 cuBLASLt GEMMs on the cast copies:
//   forward  y  = cast_x(x, along Cin) . cast_w(W, along Cin)^T + b
//   dgrad    dx = cast_dy(dy, along OC) . cast_w(W, along OC)          (W's columns: dim 0)
//   wgrad    dW += cast_dy(dy, along N)^T . cast_x(x, along N)           (dim 0 of both)
// Row-major x (N, Cin), W (OC, Cin), dy (N, OC), N = B*T. The front keeps what is not a product: bias
// in the forward epilogue, GELU / GELU' (unfused when this backend runs the product), the MATMUL_OUT
// boundary and the bias gradient (from the uncast dy). An operand the plan does not cast enters
// uncast; a layer with nothing to cast for a product is left to the base backend (so the forward keeps
// its fused GELU when only dy is cast). The LM head (weight = wte) only with --cast-lm-head 1.
//
// Producers (issue 26 item 2, as the FP8 backend's, llmc/modes/lowp/gemm_lowp.cuh): through the front's
// defer hook this backend takes over GELU (the fcproj layer's x) and GELU' (the fc layer's dy) and runs each
// inside the cast of the next call's operand along its forward / dgrad reduction dimension
// (tcast_cast_from with tcast_producers.cuh's sources): one pass writes the BF16 activation / gradient
// (still stored: the wgrad casts and the bias gradient read it) and the cast copy, instead of the producer
// and a cast pass reading it back. The bits are those of the separate passes (dev/cuda/tcast_producers.cu).
// It declines GELU when the gelu_out site is cast (the GELU output is then cast as stored, together with GELU by the
// front's boundary_gelu, tcast_gelu.cuh, which offers no defer; a caller that casts the stored output itself needs it
// written) and either when the next call does not cast that operand.
// Through the front's layernorm hook it also runs the residual + LayerNorm forwards (ln1 of layers 1..L-1,
// ln2, lnf) whose output is the next forward call's x, casting x along C as the rows are normalized
// (tcast_layernorm_cast; the BF16 output is still stored for the LayerNorm backward and the wgrad cast): the
// cast waits in the x scratch (`pending`) for that call. Declined when the layernorm_out or residual_out site
// is cast (the model then changes the stored output after the kernel), on --cast-stats steps, and for the
// types tcast_layernorm_fusable refuses (they keep the cast in the forward call: same bits either way). Not
// offered at all where the model runs the residual + LayerNorm with its boundary-site casts in one kernel
// (BoundaryCasts::residual_layernorm, tcast_runtime.cuh): x is then cast in the forward call, from the stored
// LayerNorm output.
//
// A dY is read once for all its backward needs (tcast_cast_dual, tcast_cols32.cuh): its dgrad cast (along OC) into
// scratch_dy, its wgrad cast (along N) into scratch_dyt and the bias gradient's column sums, from the stored dY or, for
// the fc layer, from the deferred GELU' product (which is then stored nowhere), where the type has tiles of 32 along
// both dimensions with the RNE quantizer and --cast-fuse is 1 (not on --cast-stats steps); else the two casts are passes
// as before. (A first one-read pair, tcast_cast_dual_from in the old column kernel, was slower than
// the two casts and was removed: doc/TCAST.md 5.5.) The backend computes the bias gradient of every layer whose dY it
// casts, in tcast_colsum's order (so that --cast-fuse 1 and 0 give the same bits); x's wgrad cast is a pass.
//
// Memory: three (N, max width) floatX scratch buffers (x, dy along OC, dy along N), the column sums
// (tcast_colsum_chunks(N) x 4C fp32) and, per weight, its two cast copies (along Cin and along OC) cached for the
// weight version (ctx->weight_version): 2 x the parameters.
#pragma once

#include <stdlib.h>

#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/modes/tcast/tcast_runtime.cuh"
#include "llmc/kernels/tcast/tcast_producers.cuh"

// One weight's cast copies for one weight version.
struct TcastWeight {
    const floatX* weight;
    int OC, C;
    unsigned long long version[2];  // weight version of the copy along Cin [0] / along OC [1] (0: none)
    floatX* cast[2];
};

struct TcastGemmState {
    GemmLowpBackend backend;
    TcastRuntime* rt;
    const floatX* wte;              // the LM head's weight
    floatX* scratch_x;              // (N, Cin) cast x
    floatX* scratch_dy;             // (N, OC) cast dy (along OC: dgrad; along N when not cast with it)
    floatX* scratch_dyt;            // (N, OC) dy cast along N by tcast_cast_dual (wgrad)
    float* colpart;                 // (tcast_colsum_chunks(N), OC) the bias gradient's column sums
    size_t scratch_x_elems, scratch_dy_elems, scratch_dyt_elems, colpart_floats;
    unsigned long long dual_passes;  // tcast_cast_dual calls so far (harnesses check the route)
    TcastWeight* weights;
    int num_weights, cap_weights;
    // the producer taken over for the next call (kind GEMM_DEFER_NONE: none): out = GELU(pre) or
    // out = out * GELU'(pre), rows x cols
    GemmDefer deferred;
    floatX* def_out;
    const floatX* def_pre;
    int def_rows, def_cols;
    // the x cast a LayerNorm wrote into scratch_x for the next forward call (pend_x NULL: none): the
    // forward of weight pend_w reading pend_x (pend_rows x pend_cols)
    const floatX* pend_x;
    const floatX* pend_w;
    int pend_rows, pend_cols;
};

static inline TcastGemmState* tcast_gemm_state(GemmContext* ctx) { return (TcastGemmState*)ctx->lowp->state; }

// The layer's weight, cast along dim (1: Cin, the forward's reduction; 0: OC, the dgrad's), for the
// current weight version; made on first use and after each optimizer step.
static inline const floatX* tcast_gemm_weight(GemmContext* ctx, const floatX* weight, int OC, int C, int dim) {
    TcastGemmState* s = tcast_gemm_state(ctx);
    TcastWeight* w = NULL;
    for (int i = 0; i < s->num_weights && !w; i++)
        if (s->weights[i].weight == weight) w = &s->weights[i];
    if (!w) {
        if (s->num_weights == s->cap_weights) {
            s->cap_weights = s->cap_weights ? 2 * s->cap_weights : 64;
            s->weights = (TcastWeight*)realloc(s->weights, s->cap_weights * sizeof(TcastWeight));
            if (!s->weights) die("gemm_tcast: out of host memory");
        }
        w = &s->weights[s->num_weights++];
        memset(w, 0, sizeof(*w));
        w->weight = weight;
        w->OC = OC;
        w->C = C;
    }
    const int slot = dim == 1 ? 0 : 1;
    if (!w->cast[slot]) cudaCheck(cudaMalloc(&w->cast[slot], (size_t)OC * C * sizeof(floatX)));
    if (w->version[slot] != ctx->weight_version) {
        TcastRuntime* rt = s->rt;
        const int role = dim == 1 ? TCAST_ROLE_FWD : TCAST_ROLE_DGRAD;
        tcast_cast(w->cast[slot], weight, OC, C, dim, rt->plan.op[TCAST_OP_W], tcast_seed(rt, weight - rt->casts.params, TCAST_OP_W + 16, role),
                   tcast_stats_slot(rt, NUM_BOUNDARY_SITES + TCAST_OP_W), &rt->cast_ctx, ctx->stream);
        w->version[slot] = ctx->weight_version;
    }
    return w->cast[slot];
}

// An activation-shaped operand (x or dy: (N, cols)) cast along dim into scratch, or the operand
// itself when the plan does not cast it.
static inline const floatX* tcast_gemm_operand(GemmContext* ctx, int op, const floatX* t, floatX* scratch, int N, int cols,
                                               int dim, const floatX* weight, int role) {
    TcastRuntime* rt = tcast_gemm_state(ctx)->rt;
    if (!rt->plan.op_on[op]) return t;
    tcast_cast(scratch, t, N, cols, dim, rt->plan.op[op], tcast_seed(rt, weight - rt->casts.params, op + 16, role),
               tcast_stats_slot(rt, NUM_BOUNDARY_SITES + op), &rt->cast_ctx, ctx->stream);
    return scratch;
}

// GemmLowpBackend::defer: take over GELU when the next call (fcproj forward) casts its x and the gelu_out
// site is not cast, GELU' when the next call (fc backward) casts its dy.
static bool tcast_gemm_defer(GemmContext* ctx, GemmDefer kind, floatX* out, const floatX* pre, int rows, int cols) {
    TcastGemmState* s = tcast_gemm_state(ctx);
    const TcastPlan* plan = &s->rt->plan;
    if (s->deferred != GEMM_DEFER_NONE || !plan->fuse) return false;  // (the first: never, every call takes it)
    if (kind == GEMM_DEFER_GELU && (!plan->op_on[TCAST_OP_X] || plan->site_on[GELU_OUT])) return false;
    if (kind == GEMM_DEFER_DGELU && !plan->op_on[TCAST_OP_DY]) return false;
    if (kind != GEMM_DEFER_GELU && kind != GEMM_DEFER_DGELU) return false;
    s->deferred = kind;
    s->def_out = out;
    s->def_pre = pre;
    s->def_rows = rows;
    s->def_cols = cols;
    return true;
}

// The deferred producer of operand t (rows x cols), if any, which this call then runs: kind, or
// GEMM_DEFER_NONE after running a deferred producer of another tensor as the front would have.
static inline GemmDefer tcast_gemm_take_deferred(GemmContext* ctx, const floatX* t, int rows, int cols) {
    TcastGemmState* s = tcast_gemm_state(ctx);
    const GemmDefer kind = s->deferred;
    s->deferred = GEMM_DEFER_NONE;
    if (kind == GEMM_DEFER_NONE) return kind;
    if (t == s->def_out && rows == s->def_rows && cols == s->def_cols) return kind;
    const size_t n = (size_t)s->def_rows * s->def_cols;
    if (kind == GEMM_DEFER_GELU) gemm_gelu_apply<false>(s->def_out, (floatX*)s->def_pre, n, ctx->stream);
    else gemm_dgelu_apply(s->def_out, s->def_pre, n, ctx->stream);
    return GEMM_DEFER_NONE;
}

// Whether this layer's products are cast (the LM head only with --cast-lm-head 1).
static inline bool tcast_gemm_takes(GemmContext* ctx, const floatX* weight) {
    const TcastGemmState* s = tcast_gemm_state(ctx);
    return weight != s->wte || s->rt->plan.lm_head;
}

// Whether scratch_x holds the cast of this forward call's x (inp, N x C, weight), made by the LayerNorm that
// produced inp (tcast_gemm_layernorm); valid for the next call only, so every call takes it.
static inline bool tcast_gemm_take_pending(GemmContext* ctx, const floatX* inp, const floatX* weight, int N, int C) {
    TcastGemmState* s = tcast_gemm_state(ctx);
    const bool hit = s->pend_x != NULL && s->pend_x == inp && s->pend_w == weight && s->pend_rows == N && s->pend_cols == C;
    s->pend_x = NULL;
    return hit;
}

// GemmLowpBackend::layernorm: run the LayerNorm ln with the x cast of the consumer's forward fused into it
// (tcast_layernorm_cast into scratch_x), when that call casts x, the output is not changed afterwards by a
// site cast, no statistics are recorded and the type fuses; else false (the model runs the LayerNorm).
static bool tcast_gemm_layernorm(GemmContext* ctx, const GemmLayerNorm& ln, const floatX* consumer) {
    TcastGemmState* s = tcast_gemm_state(ctx);
    TcastRuntime* rt = s->rt;
    const TcastPlan* plan = &rt->plan;
    s->pend_x = NULL;
    if (!plan->fuse || !plan->op_on[TCAST_OP_X] || !tcast_gemm_takes(ctx, consumer) || rt->recording) return false;
    if (plan->site_on[LAYERNORM_OUT] || (ln.inp2 && plan->site_on[RESIDUAL_OUT])) return false;
    if ((size_t)ln.N * ln.C > s->scratch_x_elems || !tcast_layernorm_fusable(plan->op[TCAST_OP_X], ln.C, ln.inp2 != NULL, false, s->scratch_x))
        return false;
    tcast_layernorm_cast(s->scratch_x, ln.residual, ln.out, ln.mean, ln.rstd, ln.inp1, ln.inp2, ln.weight, ln.bias, ln.N, ln.C,
                         plan->op[TCAST_OP_X], tcast_seed(rt, consumer - rt->casts.params, TCAST_OP_X + 16, TCAST_ROLE_FWD), NULL,
                         &rt->cast_ctx, ctx->stream);
    s->pend_x = ln.out;
    s->pend_w = consumer;
    s->pend_rows = ln.N;
    s->pend_cols = ln.C;
    return true;
}

// Operand op (x or dy, (N, cols)) cast along dim 1 into scratch, produced on the way by the deferred
// producer `kind` (tcast_cast_from), which also stores the BF16 tensor t. GEMM_DEFER_NONE: t is stored.
static inline const floatX* tcast_gemm_operand_produced(GemmContext* ctx, int op, GemmDefer kind, const floatX* t, floatX* scratch,
                                                        int N, int cols, const floatX* weight, int role) {
    if (kind == GEMM_DEFER_NONE) return tcast_gemm_operand(ctx, op, t, scratch, N, cols, 1, weight, role);
    TcastGemmState* s = tcast_gemm_state(ctx);
    TcastRuntime* rt = s->rt;
    const uint64_t seed = tcast_seed(rt, weight - rt->casts.params, op + 16, role);
    TcastDeviceStats* st = tcast_stats_slot(rt, NUM_BOUNDARY_SITES + op);
    if (kind == GEMM_DEFER_GELU)
        tcast_cast_from(scratch, tcast_src_gelu(s->def_pre, s->def_out), N, cols, 1, rt->plan.op[op], seed, st, &rt->cast_ctx, ctx->stream);
    else
        tcast_cast_from(scratch, tcast_src_dgelu(s->def_out, s->def_pre), N, cols, 1, rt->plan.op[op], seed, st, &rt->cast_ctx, ctx->stream);
    return scratch;
}

static bool tcast_gemm_forward(GemmContext* ctx, floatX* y, const floatX* inp, const floatX* weight, const floatX* bias, int N,
                               int C, int OC, floatX* gelu_out) {
    (void)gelu_out;  // the GELU is taken, if at all, by the next call (defer)
    TcastGemmState* s = tcast_gemm_state(ctx);
    const TcastPlan* plan = &s->rt->plan;
    const bool takes = tcast_gemm_takes(ctx, weight) && (plan->op_on[TCAST_OP_X] || plan->op_on[TCAST_OP_W]);
    const bool pending = tcast_gemm_take_pending(ctx, inp, weight, N, C);  // x cast by its LayerNorm already
    // GELU of inp (the fcproj layer) if the fc forward deferred it: produced inside x's cast
    GemmDefer d = tcast_gemm_take_deferred(ctx, inp, N, C);
    if (d != GEMM_DEFER_NONE && !(takes && plan->op_on[TCAST_OP_X])) {
        gemm_gelu_apply<false>(s->def_out, (floatX*)s->def_pre, (size_t)N * C, ctx->stream);
        d = GEMM_DEFER_NONE;
    }
    if (!takes) return false;
    const floatX* xc =
        pending ? s->scratch_x : tcast_gemm_operand_produced(ctx, TCAST_OP_X, d, inp, s->scratch_x, N, C, weight, TCAST_ROLE_FWD);
    const floatX* wc = plan->op_on[TCAST_OP_W] ? tcast_gemm_weight(ctx, weight, OC, C, 1) : weight;
    gemm_backend_forward(ctx, y, xc, wc, bias, N, C, OC, NULL);
    return true;
}

// Whether this dgrad + wgrad call casts dY by tcast_cast_dual (one pass for both casts and the column sums): types of the
// RNE quantizer only. With the exponent quantizer (stochastic rounding, round modes other than @even) the dual pass ran
// slower than the passes (H200, 65536 x 768 mxfp8e4@stochastic: 0.749 against 0.496 ms): its casts are issue-bound, and
// the dual kernel has 16 warps an SM where the pass kernels have 24. The same bits either way.
// own_dbias: the backend makes this layer's bias gradient (its column sums fit s->colpart), which the dual pass's sums serve.
static inline bool tcast_gemm_dual(GemmContext* ctx, bool dinp, bool dweight, bool own_dbias, GemmDefer d, int N, int OC) {
    TcastGemmState* s = tcast_gemm_state(ctx);
    TcastRuntime* rt = s->rt;
    const TcastPlan* plan = &rt->plan;
    return dinp && dweight && own_dbias && plan->fuse && (d == GEMM_DEFER_NONE || d == GEMM_DEFER_DGELU) &&
           tcast_stats_slot(rt, NUM_BOUNDARY_SITES + TCAST_OP_DY) == NULL && (size_t)N * OC <= s->scratch_dy_elems &&
           (size_t)N * OC <= s->scratch_dyt_elems && tcast_cast_dual_ok(plan->op[TCAST_OP_DY], N, OC) &&
           tcast_cast_path(plan->op[TCAST_OP_DY], false) == TCAST_PATH_RNE;
}

static bool tcast_gemm_backward(GemmContext* ctx, floatX* dinp, floatX* dweight, floatX* dbias, bool* dbias_done, const floatX* dout,
                                const floatX* inp, const floatX* weight, int N, int C, int OC, const floatX* pre_gelu) {
    (void)pre_gelu;  // the GELU' is taken, if at all, by the next call (defer)
    TcastGemmState* s = tcast_gemm_state(ctx);
    TcastRuntime* rt = s->rt;
    const TcastPlan* plan = &rt->plan;
    s->pend_x = NULL;  // (a LayerNorm's cast is for a forward call only)
    const bool takes =
        tcast_gemm_takes(ctx, weight) && (plan->op_on[TCAST_OP_X] || plan->op_on[TCAST_OP_W] || plan->op_on[TCAST_OP_DY]);
    // GELU' of dout (the fc layer) if the fcproj backward deferred it: produced inside dy's dgrad cast (which stores
    // dout on the way: the wgrad cast and the column sums read it afterwards), or inside the one dual pass
    GemmDefer d = tcast_gemm_take_deferred(ctx, dout, N, OC);
    if (d != GEMM_DEFER_NONE && !(takes && dinp && plan->op_on[TCAST_OP_DY])) {
        gemm_dgelu_apply(s->def_out, s->def_pre, (size_t)N * OC, ctx->stream);
        d = GEMM_DEFER_NONE;
    }
    if (!takes) return false;
    // the bias gradient of a layer whose dY is cast: tcast_colsum's order, whichever path casts dY (other shapes: the
    // front's gemm_dbias_accumulate)
    const bool own_dbias = dbias && plan->op_on[TCAST_OP_DY] && N % TCAST_CHUNK_ROWS == 0 && OC % 2 == 0 &&
                           (size_t)tcast_colsum_chunks(N) * OC <= s->colpart_floats;
    const floatX* wc = dinp && plan->op_on[TCAST_OP_W] ? tcast_gemm_weight(ctx, weight, OC, C, 0) : weight;
    const TcastTileStored stored_dy{dout};
    const TcastTileDgelu dgelu_dy{s->def_out, s->def_pre};
    const bool aligned = d == GEMM_DEFER_DGELU ? dgelu_dy.aligned() : stored_dy.aligned();
    if (aligned && tcast_gemm_dual(ctx, dinp != NULL, dweight != NULL, own_dbias, d, N, OC)) {
        const TcastDataType& dt = plan->op[TCAST_OP_DY];
        const uint64_t sr = tcast_seed(rt, weight - rt->casts.params, TCAST_OP_DY + 16, TCAST_ROLE_DGRAD);
        const uint64_t sc = tcast_seed(rt, weight - rt->casts.params, TCAST_OP_DY + 16, TCAST_ROLE_WGRAD);
        if (d == GEMM_DEFER_DGELU) tcast_cast_dual(s->scratch_dy, s->scratch_dyt, s->colpart, dgelu_dy, N, OC, dt, sr, sc, ctx->stream);
        else tcast_cast_dual(s->scratch_dy, s->scratch_dyt, s->colpart, stored_dy, N, OC, dt, sr, sc, ctx->stream);
        s->dual_passes++;
        gemm_backend_backward_dinp(ctx, dinp, s->scratch_dy, wc, N, C, OC, NULL);
        const floatX* xc = tcast_gemm_operand(ctx, TCAST_OP_X, inp, s->scratch_x, N, C, 0, weight, TCAST_ROLE_WGRAD);
        gemm_backend_backward_dweight(ctx, dweight, s->scratch_dyt, xc, N, C, OC);
    } else {
        if (dinp) {  // dgrad: reduction over OC
            const floatX* dyc = tcast_gemm_operand_produced(ctx, TCAST_OP_DY, d, dout, s->scratch_dy, N, OC, weight, TCAST_ROLE_DGRAD);
            gemm_backend_backward_dinp(ctx, dinp, dyc, wc, N, C, OC, NULL);
        }
        if (own_dbias) tcast_colsum(s->colpart, dout, N, OC, ctx->stream);  // (dout is stored by now)
        if (dweight) {  // wgrad: reduction over N (the scratch of dgrad's dy is free again: same stream)
            const floatX* dyc = tcast_gemm_operand(ctx, TCAST_OP_DY, dout, s->scratch_dy, N, OC, 0, weight, TCAST_ROLE_WGRAD);
            const floatX* xc = tcast_gemm_operand(ctx, TCAST_OP_X, inp, s->scratch_x, N, C, 0, weight, TCAST_ROLE_WGRAD);
            gemm_backend_backward_dweight(ctx, dweight, dyc, xc, N, C, OC);
        }
    }
    if (own_dbias) {
        gemm_dbias_finish(dbias, s->colpart, tcast_colsum_chunks(N), OC, ctx->stream);
        *dbias_done = true;
    }
    return true;
}

static unsigned int* tcast_gemm_amax_slot(GemmContext*, const void*, size_t) { return NULL; }
static bool tcast_gemm_keeps_input(GemmContext*, const floatX*, int) { return false; }

static void tcast_gemm_destroy(GemmContext* ctx) {
    TcastGemmState* s = tcast_gemm_state(ctx);
    cudaCheck(cudaFree(s->scratch_x));
    cudaCheck(cudaFree(s->scratch_dy));
    cudaCheck(cudaFree(s->scratch_dyt));
    cudaCheck(cudaFree(s->colpart));
    for (int i = 0; i < s->num_weights; i++)
        for (int k = 0; k < 2; k++)
            if (s->weights[i].cast[k]) cudaCheck(cudaFree(s->weights[i].cast[k]));
    free(s->weights);
    free(s);
    ctx->lowp = NULL;
}

// Attach the operand casts of rt's plan to ctx for a model of C channels, padded vocabulary Vp and at
// most max_rows = B*T rows, LM head weight wte. Nothing is attached when the plan casts no operand.
static inline void gemm_tcast_attach(GemmContext* ctx, TcastRuntime* rt, const floatX* wte, int max_rows, int C, int Vp) {
    const TcastPlan* plan = &rt->plan;
    if (!plan->op_on[TCAST_OP_X] && !plan->op_on[TCAST_OP_W] && !plan->op_on[TCAST_OP_DY]) return;
    TcastGemmState* s = (TcastGemmState*)calloc(1, sizeof(TcastGemmState));
    if (!s) die("gemm_tcast: out of host memory");
    s->rt = rt;
    s->wte = wte;
    // widest x: 4C (fcproj); widest dy: 4C (fc), or Vp for the LM head's dlogits
    s->scratch_x_elems = plan->op_on[TCAST_OP_X] ? (size_t)max_rows * 4 * C : 0;
    s->scratch_dy_elems = plan->op_on[TCAST_OP_DY] ? (size_t)max_rows * (plan->lm_head && Vp > 4 * C ? Vp : 4 * C) : 0;
    if (s->scratch_x_elems) cudaCheck(cudaMalloc(&s->scratch_x, s->scratch_x_elems * sizeof(floatX)));
    if (s->scratch_dy_elems) cudaCheck(cudaMalloc(&s->scratch_dy, s->scratch_dy_elems * sizeof(floatX)));
    // the dual pass's dy along N and the column sums: the widest layer with a bias (fc, 4C); the LM head has none
    if (plan->op_on[TCAST_OP_DY]) {
        s->scratch_dyt_elems = plan->fuse ? (size_t)max_rows * 4 * C : 0;
        s->colpart_floats = (size_t)tcast_colsum_chunks(max_rows) * 4 * C;
        if (s->scratch_dyt_elems) cudaCheck(cudaMalloc(&s->scratch_dyt, s->scratch_dyt_elems * sizeof(floatX)));
        cudaCheck(cudaMalloc(&s->colpart, s->colpart_floats * sizeof(float)));
    }
    s->backend.state = s;
    s->backend.name = "cuBLASLt BF16 with TensorCast operand casts";
    s->backend.forward = tcast_gemm_forward;
    s->backend.backward = tcast_gemm_backward;
    s->backend.amax_slot = tcast_gemm_amax_slot;
    s->backend.keeps_input = tcast_gemm_keeps_input;
    s->backend.destroy = tcast_gemm_destroy;
    s->backend.defer = tcast_gemm_defer;
    s->backend.layernorm = tcast_gemm_layernorm;
    ctx->lowp = &s->backend;
}
