// gemm_lowp.cuh - the FP8 and TCFP-12 linear-layer backends behind gemm.cuh's matmul_forward /
// matmul_backward (attached through GemmContext::lowp; callers never see which backend runs).
//
// FP8 build (ENABLE_FP8), per linear layer y = x Wᵀ + b (N rows, C in, OC out), Micikevicius et al.
// 2022, "FP8 Formats for Deep Learning":
//   forward  X -> E4M3 (scale from amax(X)), W -> E4M3 (from amax(W), once per optimizer step, plain
//            and transposed), Y = X8 · W8ᵀ · (1/sx)(1/sw) + b: one cuBLASLt FP8 GEMM, fp32 accumulation,
//            BF16 output (llmc/gemm_fp8.cuh);
//   dgrad    dY -> E5M2, dX = dY8 · W8 (the transposed W copy: cuBLASLt's FP8 GEMM is TN-only);
//   wgrad    dW += dY8ᵀ · X8ᵀ from transposed E5M2 / E4M3 copies (or in BF16 with hp_wgrad).
// TCFP-12 build (ENABLE_TCFP12), seed tcfp_readme.txt: W' = W (+ e_{t-1} with error feedback),
//   W_hi = E4M3(W' s_hi), R = W' - W_hi / s_hi, W_lo = E4M3(R s_lo) (stochastically rounded with SRR),
//   e_t = W' - deq(W_hi) - deq(W_lo); forward Y = X8 · W_hiᵀ + X8 · W_loᵀ, the second GEMM accumulating
//   onto the first in the same D with beta = 1 (W_lo first, then W_hi plus bias; llmc/gemm_fp8.cuh);
//   dgrad dX = dY8 · (W_hi + W_lo) likewise, or with W_hi only (ABD); wgrad as in the FP8 build. The split
//   reads the fp32 master weights when the run keeps them whole (-w 1 without ZeRO-1), else the BF16
//   parameters widened. Scales: per tensor, or (block 128) 128 x 128 tiles for the weights and 1 x 128
//   blocks along K for X and dY (cuBLASLt's Hopper block scaling), wgrad per tensor in both.
// Scales are powers of two from amax (exact dequantization), current scaling by default; with delayed
// scaling (history H) each tensor's scale comes from the largest amax of its previous H uses
// (llmc/fp8_quant.cuh fp8_delayed_scale_update). Knobs are run-time options (LowpOptions), so one
// build serves a sweep. The backend declines (the base BF16 backend runs instead) during the warm-up
// steps, for the LM head unless lm_head is set, and for shapes FP8 GEMMs cannot take (C, OC or N not a
// multiple of 16; reported once per layer).
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"
#include "cuda_utils.cuh"
#include "gemm.cuh"
#include "gemm_fp8.cuh"
#include "fp8_quant.cuh"

#define LOWP_MAX_LAYERS 256

// A scale triple in device memory: amax, quant scale s and dequant scale 1/s, each on its own 16-byte
// boundary (cuBLASLt reads the dequant scales through the A/B scale pointers; keep them 16-byte aligned).
#define LOWP_AMAX(p) ((p) + 0)
#define LOWP_SCALE(p) ((p) + 4)
#define LOWP_INV(p) ((p) + 8)
#define LOWP_TRIPLE 12

// Run-time knobs (train_gpt2cu flags; doc/TCFP12.md).
struct LowpOptions {
    int block;           // TCFP-12 scale blocks: 0 per tensor, 128 (128 x 128 weight tiles, 1 x 128 activation blocks)
    int error_feedback;  // TCFP-12: carry the two-term quantization error of W to the next step
    int srr;             // TCFP-12: stochastic rounding of the residual (instead of error feedback)
    int abd;             // TCFP-12: dgrad with W_hi only
    int hp_wgrad;        // weight gradient in BF16 (the base backend) instead of FP8
    int warmup;          // optimizer steps with plain BF16 GEMMs before the low-precision ones start
    int delayed;         // amax history length for delayed scaling; 0 = current scaling
    int fast_accum;      // CUBLASLT_MATMUL_DESC_FAST_ACCUM on the FP8 GEMMs
    int lm_head;         // the LM head (weight = wte) too
};

// Per linear layer: the quantized weights of the current weight version, their scales, the error
// feedback buffer and the amax histories. Device floats in `f`: the scale triple of W (or W_hi from
// amax(W')), then that of W_lo (from amax(R)).
struct LowpLayer {
    const floatX* weight;
    int OC, C;
    unsigned long long version;  // GemmContext::weight_version the codes were made from (0: never)
    uint8_t *w_hi, *w_lo, *wt_hi, *wt_lo;  // (OC, C) and transposed (C, OC) E4M3 codes; w_lo / wt_lo TCFP only
    float* f;                    // 2 scale triples (above)
    float *blk_s_hi, *blk_inv_hi, *blk_s_lo, *blk_inv_lo, *blk_inv_hi_t, *blk_inv_lo_t;  // block 128 scales
    float* ef;                   // error feedback (OC, C) fp32 or NULL
    float* hist;                 // delayed scaling: 3 x H amaxes (X, W, dY), or NULL
    int* pos;                    // 3 ring positions
    int warned;
};

struct LowpState {
    LowpOptions opt;
    GemmLowpBackend backend;
    Fp8GemmContext fp8;
    LowpLayer layers[LOWP_MAX_LAYERS];
    int num_layers;
    unsigned long long seed;
    const floatX* params_base;   // where the model's parameters start (to find the master copy of a weight)
    const float* master_base;    // fp32 master weights of the same layout, or NULL
    const floatX* lm_head_weight;
    float* scalars;              // device: scale triples of X, dY, and X for the weight gradient
    __nv_bfloat16* bias;         // a 256-byte aligned copy of the current layer's bias (grow-only)
    size_t bias_cap;
    float* scratch;              // FP8_QUANT_SCRATCH_FLOATS
    uint8_t *a8, *at8, *g8, *gt8;  // activation / gradient codes, plain and transposed (grow-only)
    size_t codes_cap;
    float *xs, *xinv, *gs, *ginv;  // block-128 activation / gradient scales (grow-only)
    size_t blk_cap;
    float* w32;                  // widened weights when no master copy (grow-only)
    size_t w32_cap;
    unsigned long long declined_shape;
};

static inline LowpState* lowp_state(GemmContext* ctx) { return (LowpState*)ctx->lowp->state; }

template <typename T>
static inline void lowp_grow(T** p, size_t* cap, size_t n) {
    if (n <= *cap) return;
    if (*p) cudaCheck(cudaFree(*p));
    cudaCheck(cudaMalloc(p, n * sizeof(T)));
    *cap = n;
}

// Grow the four activation / gradient code buffers to n bytes each (the stream is idle-safe: cudaFree
// synchronizes the device).
static inline void lowp_grow_codes(LowpState* s, size_t n) {
    if (n <= s->codes_cap) return;
    uint8_t** bufs[4] = {&s->a8, &s->at8, &s->g8, &s->gt8};
    for (int i = 0; i < 4; i++) {
        size_t cap = s->codes_cap;
        lowp_grow(bufs[i], &cap, n);
    }
    s->codes_cap = n;
}

// Grow the four block-scale buffers to n floats each.
static inline void lowp_grow_blk(LowpState* s, size_t n) {
    if (n <= s->blk_cap) return;
    float** bufs[4] = {&s->xs, &s->xinv, &s->gs, &s->ginv};
    for (int i = 0; i < 4; i++) {
        size_t cap = s->blk_cap;
        lowp_grow(bufs[i], &cap, n);
    }
    s->blk_cap = n;
}

static inline bool lowp_is_tcfp() { return GEMM_LOWP_TCFP12; }

// Register (or find) the layer of `weight`; allocates its state on first sight.
static inline LowpLayer* lowp_layer(LowpState* s, const floatX* weight, int OC, int C) {
    for (int i = 0; i < s->num_layers; i++)
        if (s->layers[i].weight == weight) return &s->layers[i];
    if (s->num_layers == LOWP_MAX_LAYERS) die("gemm_lowp: more than %d linear layers", LOWP_MAX_LAYERS);
    LowpLayer* L = &s->layers[s->num_layers++];
    memset(L, 0, sizeof(*L));
    L->weight = weight;
    L->OC = OC;
    L->C = C;
    const size_t n = (size_t)OC * C;
    cudaCheck(cudaMalloc(&L->w_hi, n));
    cudaCheck(cudaMalloc(&L->wt_hi, n));
    cudaCheck(cudaMalloc(&L->f, 2 * LOWP_TRIPLE * sizeof(float)));
    if (lowp_is_tcfp()) {
        cudaCheck(cudaMalloc(&L->w_lo, n));
        cudaCheck(cudaMalloc(&L->wt_lo, n));
        if (s->opt.error_feedback) {
            cudaCheck(cudaMalloc(&L->ef, n * sizeof(float)));
            cudaCheck(cudaMemset(L->ef, 0, n * sizeof(float)));
        }
        if (s->opt.block) {
            const size_t nb = fp8_block_layout_count(fp8_block_layout_cublaslt_blk128x128(OC, C));
            const size_t nbt = fp8_block_layout_count(fp8_block_layout_cublaslt_blk128x128(C, OC));
            float** bufs[4] = {&L->blk_s_hi, &L->blk_inv_hi, &L->blk_s_lo, &L->blk_inv_lo};
            for (int i = 0; i < 4; i++) cudaCheck(cudaMalloc(bufs[i], nb * sizeof(float)));
            cudaCheck(cudaMalloc(&L->blk_inv_hi_t, nbt * sizeof(float)));
            cudaCheck(cudaMalloc(&L->blk_inv_lo_t, nbt * sizeof(float)));
        }
    }
    if (s->opt.delayed > 0) {
        cudaCheck(cudaMalloc(&L->hist, 3 * (size_t)s->opt.delayed * sizeof(float)));
        cudaCheck(cudaMemset(L->hist, 0, 3 * (size_t)s->opt.delayed * sizeof(float)));
        cudaCheck(cudaMalloc(&L->pos, 3 * sizeof(int)));
        cudaCheck(cudaMemset(L->pos, 0, 3 * sizeof(int)));
    }
    return L;
}

// Per-tensor scale of x (n values of T) into s[0..2] = amax, quant scale, dequant scale: current
// scaling, or delayed (role 0 X, 1 W, 2 dY of layer L).
template <typename T>
static inline void lowp_scale(LowpState* st, LowpLayer* L, int role, float* s, const T* x, size_t n, FP8Kind kind, cudaStream_t stream) {
    if (st->opt.delayed > 0) {
        fp8_amax(s, x, n, st->scratch, stream);
        fp8_delayed_scale_update(L->hist + (size_t)role * st->opt.delayed, st->opt.delayed, L->pos + role, LOWP_AMAX(s), LOWP_SCALE(s),
                                 LOWP_INV(s), kind, 0, 1, stream);
    } else {
        fp8_amax_scale(LOWP_AMAX(s), LOWP_SCALE(s), LOWP_INV(s), x, n, kind, 0, 1, st->scratch, stream);
    }
}

// The fp32 weights the TCFP-12 split reads: the master copy when the run keeps it whole, else a widened copy.
static inline const float* lowp_weight_f32(LowpState* s, const LowpLayer* L, cudaStream_t stream) {
    if (s->master_base) return s->master_base + (L->weight - s->params_base);
    const size_t n = (size_t)L->OC * L->C;
    lowp_grow(&s->w32, &s->w32_cap, n);
    widen_to_float(s->w32, L->weight, n, stream);
    return s->w32;
}

// Bring the layer's weight codes up to the current weight version.
static inline void lowp_quantize_weights(LowpState* s, LowpLayer* L, unsigned long long version, cudaStream_t stream) {
    if (L->version == version) return;
    L->version = version;
    const int OC = L->OC, C = L->C;
    if (!lowp_is_tcfp()) {
        lowp_scale(s, L, 1, L->f, L->weight, (size_t)OC * C, FP8_E4M3FN, stream);
        fp8_quantize(L->w_hi, L->weight, OC, C, FP8_E4M3FN, LOWP_SCALE(L->f), 0, 0, 0, stream);
        fp8_quantize(L->wt_hi, L->weight, OC, C, FP8_E4M3FN, LOWP_SCALE(L->f), 1, 0, 0, stream);
        return;
    }
    TCFP12Split a;
    memset(&a, 0, sizeof(a));
    a.w_hi = L->w_hi; a.w_lo = L->w_lo; a.w_hi_t = L->wt_hi; a.w_lo_t = L->wt_lo;
    a.w = lowp_weight_f32(s, L, stream);
    a.ef = L->ef;
    a.OC = OC; a.C = C;
    a.pow2 = 1;
    a.srr = s->opt.srr;
    a.seed = s->seed ^ (version * 0x9E3779B97F4A7C15ull) ^ (unsigned long long)(L - s->layers);
    a.scratch = s->scratch;
    if (s->opt.block) {
        a.blocked = 1;
        a.layout = fp8_block_layout_cublaslt_blk128x128(OC, C);
        a.scale_hi = L->blk_s_hi; a.inv_scale_hi = L->blk_inv_hi;
        a.scale_lo = L->blk_s_lo; a.inv_scale_lo = L->blk_inv_lo;
        tcfp12_split(a, stream);
        // the transposed codes' tiles: the same numbers on the transposed grid
        fp8_block_scales_relayout(L->blk_inv_hi_t, fp8_block_layout_cublaslt_blk128x128(C, OC), L->blk_inv_hi, a.layout, 1, stream);
        fp8_block_scales_relayout(L->blk_inv_lo_t, fp8_block_layout_cublaslt_blk128x128(C, OC), L->blk_inv_lo, a.layout, 1, stream);
    } else {
        float* lo = L->f + LOWP_TRIPLE;
        a.scale_hi = LOWP_SCALE(L->f); a.inv_scale_hi = LOWP_INV(L->f); a.amax_hi = LOWP_AMAX(L->f);
        a.scale_lo = LOWP_SCALE(lo); a.inv_scale_lo = LOWP_INV(lo); a.amax_lo = LOWP_AMAX(lo);
        tcfp12_split(a, stream);
    }
}

// Quantize an activation-like operand x (rows, K) of `kind` for use as the B operand of a GEMM along K:
// per tensor into codes + sc[0..2], or (block 128) with 1 x 128 scales into codes + the block-scale pair
// `pair` (0: xs / xinv, 1: gs / ginv). tcodes != NULL: also the (K, rows) per-tensor transposed copy
// (for the weight gradient), with its scale in sc.
static inline void lowp_quantize_act(LowpState* s, LowpLayer* L, int role, const floatX* x, int rows, int K, FP8Kind kind,
                                     uint8_t* codes, uint8_t* tcodes, float* sc, int pair, bool blocked, cudaStream_t stream) {
    if (blocked) {
        const FP8BlockLayout BL = fp8_block_layout_cublaslt_vec128(rows, K);
        lowp_grow_blk(s, fp8_block_layout_count(BL));  // before the buffers are read: it may reallocate them
        float* bs = pair ? s->gs : s->xs;
        float* binv = pair ? s->ginv : s->xinv;
        fp8_block_scales(bs, binv, x, BL, kind, 0, 1, stream);
        fp8_quantize_blocked(codes, x, BL, kind, bs, 0, 0, 0, stream);
    }
    if (!blocked || tcodes) {
        lowp_scale(s, L, role, sc, x, (size_t)rows * K, kind, stream);
        if (!blocked) fp8_quantize(codes, x, rows, K, kind, LOWP_SCALE(sc), 0, 0, 0, stream);
        if (tcodes) fp8_quantize(tcodes, x, rows, K, kind, LOWP_SCALE(sc), 1, 0, 0, stream);
    }
}

static inline bool lowp_eligible(const GemmContext* ctx, LowpState* s, LowpLayer* L, const floatX* weight, int N, int C, int OC) {
    if (ctx->optimizer_steps < s->opt.warmup) return false;
    if (weight == s->lm_head_weight && !s->opt.lm_head) return false;
    const bool ok = N % 16 == 0 && C % 16 == 0 && OC % 16 == 0 && (!s->opt.block || (C % 128 == 0 && OC % 128 == 0));
    if (!ok && !L->warned) {
        L->warned = 1;
        s->declined_shape++;
        printf("note: %s: a linear layer (N=%d C=%d OC=%d) runs in BF16: FP8 GEMMs need multiples of 16%s\n", s->backend.name, N, C,
               OC, s->opt.block ? " (128 with block scaling)" : "");
    }
    return ok;
}

static inline void lowp_gemm_failed(const char* what, cublasStatus_t st, const Fp8GemmContext* f) {
    fprintf(stderr, "error: gemm_lowp: %s: cuBLASLt FP8 GEMM failed (%s): %s\n", what, cublasLtGetStatusName(st), f->last_error);
    exit(EXIT_FAILURE);
}

static bool lowp_forward(GemmContext* ctx, floatX* y, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C, int OC) {
    LowpState* s = lowp_state(ctx);
    if (weight == s->lm_head_weight && !s->opt.lm_head) return false;  // before lowp_layer: no state for it
    LowpLayer* L = lowp_layer(s, weight, OC, C);
    if (!lowp_eligible(ctx, s, L, weight, N, C, OC)) return false;
    cudaStream_t st = ctx->stream;
    lowp_grow_codes(s, (size_t)N * (C > OC ? C : OC));
    lowp_quantize_weights(s, L, ctx->weight_version, st);
    const bool blocked = lowp_is_tcfp() && s->opt.block;
    lowp_quantize_act(s, L, 0, inp, N, C, FP8_E4M3FN, s->a8, NULL, s->scalars, 0, blocked, st);
    if (bias) {  // the epilogue's bias from a 256-byte aligned copy (a parameter slice is only 16-byte aligned)
        lowp_grow(&s->bias, &s->bias_cap, (size_t)OC);
        cudaCheck(cudaMemcpyAsync(s->bias, bias, (size_t)OC * sizeof(floatX), cudaMemcpyDeviceToDevice, st));
        bias = s->bias;
    }
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    bool ok;
    float* lo = L->f + LOWP_TRIPLE;
    if (!lowp_is_tcfp()) {
        ok = fp8_linear_forward(&s->fp8, y, s->a8, LOWP_INV(s->scalars), L->w_hi, LOWP_INV(L->f), bias, N, C, OC, FP8_SCALE_TENSOR,
                                s->opt.fast_accum, 0.0f, &cs);
    } else if (blocked) {
        ok = tcfp12_linear_forward(&s->fp8, y, s->a8, s->xinv, L->w_hi, L->blk_inv_hi, L->w_lo, L->blk_inv_lo, bias, N, C, OC,
                                   FP8_SCALE_BLK128_VEC128, s->opt.fast_accum, TCFP12_ACC_BF16_LO_FIRST, NULL, &cs);
    } else {
        ok = tcfp12_linear_forward(&s->fp8, y, s->a8, LOWP_INV(s->scalars), L->w_hi, LOWP_INV(L->f), L->w_lo, LOWP_INV(lo), bias, N, C,
                                   OC, FP8_SCALE_TENSOR, s->opt.fast_accum, TCFP12_ACC_BF16_LO_FIRST, NULL, &cs);
    }
    if (!ok) lowp_gemm_failed("forward", cs, &s->fp8);
    return true;
}

static bool lowp_backward(GemmContext* ctx, floatX* dinp, floatX* dweight, const floatX* dout, const floatX* inp, const floatX* weight,
                          int N, int C, int OC) {
    LowpState* s = lowp_state(ctx);
    if (weight == NULL || (weight == s->lm_head_weight && !s->opt.lm_head)) return false;
    LowpLayer* L = lowp_layer(s, weight, OC, C);
    if (!lowp_eligible(ctx, s, L, weight, N, C, OC)) return false;
    cudaStream_t st = ctx->stream;
    lowp_grow_codes(s, (size_t)N * (C > OC ? C : OC));
    lowp_quantize_weights(s, L, ctx->weight_version, st);  // no-op after this step's forward
    const bool blocked = lowp_is_tcfp() && s->opt.block;
    const bool fp8_wgrad = dweight && !s->opt.hp_wgrad;
    float* gsc = s->scalars + LOWP_TRIPLE;
    float* lo = L->f + LOWP_TRIPLE;
    // dY: E5M2, plain (dgrad, B operand along OC) and transposed (wgrad, B operand along N)
    lowp_quantize_act(s, L, 2, dout, N, OC, FP8_E5M2, s->g8, fp8_wgrad ? s->gt8 : NULL, gsc, 1, blocked, st);
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    if (dinp) {
        bool ok;
        if (!lowp_is_tcfp()) {
            ok = fp8_linear_dgrad(&s->fp8, dinp, s->g8, LOWP_INV(gsc), L->wt_hi, LOWP_INV(L->f), N, C, OC, FP8_SCALE_TENSOR,
                                  s->opt.fast_accum, 0.0f, FP8_E5M2, &cs);
        } else {
            const uint8_t* wt_lo = s->opt.abd ? NULL : L->wt_lo;
            if (blocked)
                ok = tcfp12_linear_dgrad(&s->fp8, dinp, s->g8, s->ginv, L->wt_hi, L->blk_inv_hi_t, wt_lo, L->blk_inv_lo_t, N, C, OC,
                                         FP8_SCALE_BLK128_VEC128, s->opt.fast_accum, TCFP12_ACC_BF16_LO_FIRST, NULL, FP8_E5M2, &cs);
            else
                ok = tcfp12_linear_dgrad(&s->fp8, dinp, s->g8, LOWP_INV(gsc), L->wt_hi, LOWP_INV(L->f), wt_lo, LOWP_INV(lo), N, C, OC,
                                         FP8_SCALE_TENSOR, s->opt.fast_accum, TCFP12_ACC_BF16_LO_FIRST, NULL, FP8_E5M2, &cs);
        }
        if (!ok) lowp_gemm_failed("dgrad", cs, &s->fp8);
    }
    if (dweight) {
        if (!fp8_wgrad) {
            gemm_backend_backward_dweight(ctx, dweight, dout, inp, N, C, OC);
        } else {
            // Xᵀ (C, N), per tensor, current scaling: X is re-read here rather than kept from the forward (no
            // memory held across the step; its amax is not pushed into the delayed-scaling history twice)
            float* xsc = s->scalars + 2 * LOWP_TRIPLE;
            fp8_amax_scale(LOWP_AMAX(xsc), LOWP_SCALE(xsc), LOWP_INV(xsc), inp, (size_t)N * C, FP8_E4M3FN, 0, 1, s->scratch, st);
            fp8_quantize(s->at8, inp, N, C, FP8_E4M3FN, LOWP_SCALE(xsc), 1, 0, 0, st);
            if (!fp8_linear_wgrad(&s->fp8, dweight, s->gt8, LOWP_INV(gsc), s->at8, LOWP_INV(xsc), N, C, OC, FP8_SCALE_TENSOR, s->opt.fast_accum, 1.0f,
                                  FP8_E5M2, &cs))
                lowp_gemm_failed("wgrad", cs, &s->fp8);
        }
    }
    return true;
}

// Attach the backend to ctx (after gemm_context_init). Dies on a GPU without FP8 tensor cores (below
// compute capability 8.9) unless allow_fallback, in which case nothing is attached and the base
// backend runs every GEMM (printed). Invalid option combinations end the program naming the flag.
static inline void gemm_lowp_attach(GemmContext* ctx, const LowpOptions* opt, int allow_fallback, unsigned long long seed) {
    const struct { const char* flag; int value; } switches[] = {
        {"--fp8-fast-accum", opt->fast_accum}, {"--fp8-hp-wgrad", opt->hp_wgrad}, {"--fp8-lm-head", opt->lm_head},
        {"--tcfp-ef", opt->error_feedback},    {"--tcfp-srr", opt->srr},           {"--tcfp-abd", opt->abd}};
    for (const auto& sw : switches)
        if (sw.value != 0 && sw.value != 1) die("%s: expected 0 or 1, got %d", sw.flag, sw.value);
    if (allow_fallback != 0 && allow_fallback != 1) die("--fp8-fallback: expected 0 or 1, got %d", allow_fallback);
    if (opt->srr && opt->error_feedback) die("--tcfp-srr 1 replaces error feedback: it cannot be combined with --tcfp-ef 1");
    if (opt->block != 0 && opt->block != 128)
        die("--tcfp-block %d: supported are 0 (per tensor) and 128 (cuBLASLt's Hopper block scaling); 32 and 64 have no fast path", opt->block);
    if (!lowp_is_tcfp() && (opt->block || opt->error_feedback || opt->srr || opt->abd))
        die("--tcfp-*: TCFP-12 options need the TCFP12=1 build (this is %s)", GEMM_LOWP_MODE_NAME);
    if (opt->delayed < 0 || opt->warmup < 0) die("--fp8-delayed / --fp8-warmup: must be >= 0");
    int dev = 0, major = 0, minor = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major * 10 + minor < 89 || (opt->block && major != 9)) {
        if (!allow_fallback)
            die("%s needs FP8 tensor cores (compute capability 8.9 or newer%s); this GPU is %d.%d. --fp8-fallback 1 runs BF16 GEMMs instead",
                GEMM_LOWP_MODE_NAME, opt->block ? ", block scaling: 9.0" : "", major, minor);
        printf("note: compute capability %d.%d: %s unavailable, every GEMM runs in BF16 (--fp8-fallback 1)\n", major, minor,
               GEMM_LOWP_MODE_NAME);
        return;
    }
    LowpState* s = (LowpState*)calloc(1, sizeof(LowpState));
    if (!s) die("gemm_lowp: out of host memory");
    s->opt = *opt;
    s->seed = seed;
    fp8_gemm_context_init(&s->fp8, ctx);
    cudaCheck(cudaMalloc(&s->scalars, 3 * LOWP_TRIPLE * sizeof(float)));
    cudaCheck(cudaMalloc(&s->scratch, FP8_QUANT_SCRATCH_FLOATS * sizeof(float)));
    s->backend.state = s;
    s->backend.name = GEMM_LOWP_MODE_NAME;
    s->backend.forward = lowp_forward;
    s->backend.backward = lowp_backward;
    ctx->lowp = &s->backend;
}

// The model's parameter layout (to find a weight's fp32 master copy; master may be NULL) and its LM head.
static inline void gemm_lowp_set_model(GemmContext* ctx, const floatX* params, const float* master, const floatX* lm_head) {
    if (!ctx->lowp) return;
    LowpState* s = lowp_state(ctx);
    s->params_base = params;
    s->master_base = master;
    s->lm_head_weight = lm_head;
}

// One line for logs: the knobs in force.
static inline void gemm_lowp_describe(const GemmContext* ctx, char* out, size_t n) {
    if (!ctx->lowp) { snprintf(out, n, "none"); return; }
    const LowpOptions& o = ((const LowpState*)ctx->lowp->state)->opt;
    snprintf(out, n, "block=%d ef=%d srr=%d abd=%d hp_wgrad=%d warmup=%d delayed=%d fast_accum=%d lm_head=%d", o.block,
             o.error_feedback, o.srr, o.abd, o.hp_wgrad, o.warmup, o.delayed, o.fast_accum, o.lm_head);
}
