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
// Memory: two (N, max width) floatX scratch buffers (x, dy) and, per weight, its two cast copies
// (along Cin and along OC) cached for the weight version (ctx->weight_version): 2 x the parameters.
#pragma once

#include <stdlib.h>

#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/modes/tcast/tcast_runtime.cuh"

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
    floatX* scratch_dy;             // (N, OC) cast dy
    size_t scratch_x_elems, scratch_dy_elems;
    TcastWeight* weights;
    int num_weights, cap_weights;
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

// Whether this layer's products are cast (the LM head only with --cast-lm-head 1).
static inline bool tcast_gemm_takes(GemmContext* ctx, const floatX* weight) {
    const TcastGemmState* s = tcast_gemm_state(ctx);
    return weight != s->wte || s->rt->plan.lm_head;
}

static bool tcast_gemm_forward(GemmContext* ctx, floatX* y, const floatX* inp, const floatX* weight, const floatX* bias, int N,
                               int C, int OC) {
    TcastGemmState* s = tcast_gemm_state(ctx);
    const TcastPlan* plan = &s->rt->plan;
    if (!tcast_gemm_takes(ctx, weight) || (!plan->op_on[TCAST_OP_X] && !plan->op_on[TCAST_OP_W])) return false;
    const floatX* xc = tcast_gemm_operand(ctx, TCAST_OP_X, inp, s->scratch_x, N, C, 1, weight, TCAST_ROLE_FWD);
    const floatX* wc = plan->op_on[TCAST_OP_W] ? tcast_gemm_weight(ctx, weight, OC, C, 1) : weight;
    gemm_backend_forward(ctx, y, xc, wc, bias, N, C, OC, NULL);
    return true;
}

static bool tcast_gemm_backward(GemmContext* ctx, floatX* dinp, floatX* dweight, floatX* dbias, bool* dbias_done, const floatX* dout,
                                const floatX* inp, const floatX* weight, int N, int C, int OC) {
    (void)dbias;
    (void)dbias_done;  // the front sums the uncast dout
    TcastGemmState* s = tcast_gemm_state(ctx);
    const TcastPlan* plan = &s->rt->plan;
    if (!tcast_gemm_takes(ctx, weight) || (!plan->op_on[TCAST_OP_X] && !plan->op_on[TCAST_OP_W] && !plan->op_on[TCAST_OP_DY]))
        return false;
    if (dinp) {  // dgrad: reduction over OC
        const floatX* dyc = tcast_gemm_operand(ctx, TCAST_OP_DY, dout, s->scratch_dy, N, OC, 1, weight, TCAST_ROLE_DGRAD);
        const floatX* wc = plan->op_on[TCAST_OP_W] ? tcast_gemm_weight(ctx, weight, OC, C, 0) : weight;
        gemm_backend_backward_dinp(ctx, dinp, dyc, wc, N, C, OC, NULL);
    }
    if (dweight) {  // wgrad: reduction over N (the scratch of dgrad's dy is free again: same stream)
        const floatX* dyc = tcast_gemm_operand(ctx, TCAST_OP_DY, dout, s->scratch_dy, N, OC, 0, weight, TCAST_ROLE_WGRAD);
        const floatX* xc = tcast_gemm_operand(ctx, TCAST_OP_X, inp, s->scratch_x, N, C, 0, weight, TCAST_ROLE_WGRAD);
        gemm_backend_backward_dweight(ctx, dweight, dyc, xc, N, C, OC);
    }
    return true;
}

static unsigned int* tcast_gemm_amax_slot(GemmContext*, const void*, size_t) { return NULL; }
static bool tcast_gemm_keeps_input(GemmContext*, const floatX*, int) { return false; }

static void tcast_gemm_destroy(GemmContext* ctx) {
    TcastGemmState* s = tcast_gemm_state(ctx);
    cudaCheck(cudaFree(s->scratch_x));
    cudaCheck(cudaFree(s->scratch_dy));
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
    s->backend.state = s;
    s->backend.name = "cuBLASLt BF16 with TensorCast operand casts";
    s->backend.forward = tcast_gemm_forward;
    s->backend.backward = tcast_gemm_backward;
    s->backend.amax_slot = tcast_gemm_amax_slot;
    s->backend.keeps_input = tcast_gemm_keeps_input;
    s->backend.destroy = tcast_gemm_destroy;
    ctx->lowp = &s->backend;
}
