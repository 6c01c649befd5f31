// gemm_lowp.cuh - the FP8 and TCFP-12 linear-layer backends behind gemm.cuh's matmul_forward /
// matmul_backward (attached through GemmContext::lowp; callers never see which backend runs).
//
// FP8 build (ENABLE_FP8), per linear layer y = x Wᵀ + b (N rows, C in, OC out), Micikevicius et al.
// 2022, "FP8 Formats for Deep Learning":
//   forward  X -> E4M3 (scale from amax(X)), W -> E4M3 (from amax(W), once per optimizer step, plain
//            and transposed), Y = X8 · W8ᵀ · (1/sx)(1/sw) + b: one cuBLASLt FP8 GEMM, fp32 accumulation,
//            BF16 output (llmc/kernels/gemm/gemm_fp8.cuh);
//   dgrad    dY -> E5M2, dX = dY8 · W8 (the transposed W copy: cuBLASLt's FP8 GEMM is TN-only);
//   wgrad    dW += dY8ᵀ · X8ᵀ from transposed E5M2 / E4M3 copies (or in BF16 with hp_wgrad).
// TCFP-12 build (ENABLE_TCFP12), seed tcfp_readme.txt: W' = W (+ e_{t-1} with error feedback),
//   W_hi = E4M3(W' s_hi), R = W' - W_hi / s_hi, W_lo = E4M3(R s_lo) (stochastically rounded with SRR),
//   e_t = W' - deq(W_hi) - deq(W_lo); forward Y = X8 · W_hiᵀ + X8 · W_loᵀ, the second GEMM accumulating
//   onto the first in the same D with beta = 1 (W_lo first, then W_hi plus bias; llmc/kernels/gemm/gemm_fp8.cuh);
//   dgrad dX = dY8 · (W_hi + W_lo) likewise, or with W_hi only (ABD); wgrad as in the FP8 build. The split
//   reads the fp32 master weights when the run keeps them whole (-w 1 without ZeRO-1), else the BF16
//   parameters widened. Scales: per tensor, or (--tcfp-block b) b x b tiles for the weights and 1 x b
//   blocks along K for X and dY (b = 128: cuBLASLt's Hopper block scaling; 32, 64: chunked GEMMs
//   accumulated in fp32, slow), wgrad per tensor in all modes.
// Scales are powers of two from amax (exact dequantization), current scaling by default; with delayed
// scaling (history H) the scale of each X and dY comes from the largest amax of its previous H uses in
// training passes (weights always use current scaling)
// (llmc/kernels/fp8/fp8_amax.cuh fp8_delayed_scale_pending: the amax is taken while quantizing, no extra pass).
// Memory traffic, the lever at GPT-2 sizes (doc/TCFP12.md "Where the time goes"): the forward quantizes
// X once into the GEMM operand and the transposed wgrad operand (fp8_quantize_pair), kept per layer until
// its backward (so backward neither re-reads X nor needs the GELU recompute: keeps_input); dY is
// quantized once into both its operands; under current scaling the amax of X / dY comes from the kernel
// that produced it when that kernel asked for an amax slot (gemm_amax_slot: LayerNorm, GELU, dGELU,
// attention forward and backward), else from one amax pass. Knobs are run-time options (LowpOptions), so one
// build serves a sweep. The backend declines (the base BF16 backend runs instead) during the warm-up
// steps, for the LM head unless lm_head is set, and for shapes FP8 GEMMs cannot take (C, OC or N not a
// multiple of 16; reported once per layer).
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/core/utils.h"
#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/kernels/gemm/gemm_fp8.cuh"
#include "llmc/kernels/fp8/fp8_quant.cuh"
#include "llmc/kernels/fp8/lowp_producers.cuh"

#define LOWP_MAX_LAYERS 256

// A scale triple in device memory: amax, quant scale s and dequant scale 1/s, each on its own 16-byte
// boundary (cuBLASLt reads the dequant scales through the A/B scale pointers; keep them 16-byte aligned).
#define LOWP_AMAX(p) ((p) + 0)
#define LOWP_SCALE(p) ((p) + 4)
#define LOWP_INV(p) ((p) + 8)
#define LOWP_TRIPLE 12

// Run-time knobs (train_gpt2cu flags; doc/TCFP12.md).
struct LowpOptions {
    int block;           // TCFP-12 scale blocks: 0 per tensor, b = 32, 64, 128 (b x b weight tiles, 1 x b activation blocks)
    int error_feedback;  // TCFP-12: carry the two-term quantization error of W to the next step
    int srr;             // TCFP-12: stochastic rounding of the residual (instead of error feedback)
    int abd;             // TCFP-12: dgrad with W_hi only
    int hp_wgrad;        // weight gradient in BF16 (the base backend) instead of FP8
    int warmup;          // optimizer steps with plain BF16 GEMMs before the low-precision ones start
    int delayed;         // amax history length for delayed scaling; 0 = current scaling
    int fast_accum;      // CUBLASLT_MATMUL_DESC_FAST_ACCUM: 0 none, 1 every FP8 GEMM, 2 forward GEMMs only (LOWP_FAST_ACCUM_*)
    int lm_head;         // the LM head (weight = wte) too
    int producers;       // GELU / GELU' computed inside the quantization of the next GEMM's operands
                         // (llmc/kernels/fp8/lowp_producers.cuh; speculative current scaling); 0 = separate passes
};

// --fp8-fast-accum values. Without fast accumulation cuBLASLt's Hopper FP8 GEMMs promote the tensor
// cores' partial sums to fp32 at intervals along K; with it they do not (faster, a few bits less).
// LOWP_FAST_ACCUM_FORWARD is the recipe of Transformer Engine (fprop without the split accumulator,
// dgrad / wgrad with it) and of torchao's Float8LinearConfig (use_fast_accum for the output GEMM only).
enum { LOWP_FAST_ACCUM_NONE = 0, LOWP_FAST_ACCUM_ALL = 1, LOWP_FAST_ACCUM_FORWARD = 2 };

// Whether the forward (forward = true) or the dgrad / wgrad GEMMs run with fast accumulation.
static inline int lowp_fast_accum(const LowpOptions& o, bool forward) {
    return o.fast_accum == LOWP_FAST_ACCUM_ALL || (forward && o.fast_accum == LOWP_FAST_ACCUM_FORWARD);
}

// Roles of a layer's tensors (delayed-scaling histories, amax slots).
enum { LOWP_ROLE_X = 0, LOWP_ROLE_W = 1, LOWP_ROLE_DY = 2 };

// Per linear layer: the quantized weights of the current weight version, their scales, the error
// feedback buffer, the amax histories and the transposed input codes the forward keeps for wgrad.
// Device floats in `f`: the scale triple of W (or W_hi from amax(W')), that of W_lo (from amax(R)), that
// of this layer's input X (forward; reused by wgrad with xt), and that of its dY (backward; not in
// checkpoints: it is recomputed from each dY, the previous value only serves as speculative scaling's guess).
struct LowpLayer {
    const floatX* weight;
    int OC, C;
    unsigned long long version;  // GemmContext::weight_version the codes were made from (0: never)
    uint8_t *w_hi, *w_lo, *wt_hi, *wt_lo;  // (OC, C) and transposed (C, OC) E4M3 codes; w_lo / wt_lo TCFP only
    float* f;                    // 4 scale triples (above)
    // block scaling (lowp_weight_tiles / lowp_weight_a_layout): QUANT scales of the tiles, the DEQUANT scales
    // as the forward's A operand reads them (OC, C) and as dgrad's reads them (C, OC); block 32 / 64 also
    // keep the tiles' DEQUANT scales, which the two A-operand layouts expand
    float *blk_s_hi, *blk_inv_hi, *blk_s_lo, *blk_inv_lo, *blk_inv_hi_t, *blk_inv_lo_t, *tile_inv_hi, *tile_inv_lo;
    float* ef;                   // error feedback (OC, C) fp32 or NULL
    float* hist;                 // delayed scaling: 3 x H amaxes (roles X, W, dY; the W slot is unused), or NULL
    int* pos;                    // 3 ring positions
    uint32_t* pending;           // delayed scaling: 3 amaxes (bits) taken while quantizing, not yet in the history
    long long uses[3];           // host: uses of each role under delayed scaling (0: the next one is the bootstrap)
    uint8_t* xt;                 // (C, N) E4M3 codes of the forward's input X, for wgrad (scale: third triple)
    size_t xt_cap;
    int xt_rows;                 // N of the forward that wrote xt; 0 = none
    __nv_bfloat16* bias;         // 256-byte aligned copy of the bias of weight version bias_version
    unsigned long long bias_version;
    int warned;
};

// An elementwise producer the backend took over (GemmLowpBackend::defer) for the next GEMM call.
struct LowpDeferred {
    GemmDefer kind;
    floatX* out;
    const floatX* pre;
    size_t n;
};

// A producer's amax for the next GEMM call (gemm_amax_slot): the tensor, its size and the device slot.
struct LowpAmaxHint {
    const void* tensor;
    size_t n;
    int slot;                    // index into LowpState::amax_bits; -1 = none
};
#define LOWP_AMAX_SLOTS 8

struct LowpState {
    LowpOptions opt;
    GemmContext* ctx;            // the context this backend is attached to
    GemmLowpBackend backend;
    Fp8GemmContext fp8;
    LowpLayer layers[LOWP_MAX_LAYERS];
    int num_layers;
    unsigned long long seed;
    const floatX* params_base;   // where the model's parameters start (to find the master copy of a weight)
    const float* master_base;    // fp32 master weights of the same layout, or NULL
    const floatX* lm_head_weight;
    float* scratch;              // FP8_QUANT_SCRATCH_FLOATS
    uint32_t* amax_bits;         // device: LOWP_AMAX_SLOTS producer amax slots (zero when free)
    int slot_dirty[LOWP_AMAX_SLOTS];  // host: slot handed out and not consumed (must be zeroed before reuse)
    int next_slot;
    LowpAmaxHint hint;           // the producer amax registered for the next GEMM call
    LowpDeferred deferred;       // the producer taken over for the next GEMM call (kind NONE: none)
    LowpSpec spec;               // speculative scaling's device state and counts (llmc/kernels/fp8/lowp_producers.cuh)
    uint8_t *a8, *g8, *gt8;      // codes of X (plain), dY (plain, transposed) (grow-only)
    size_t codes_cap;
    float *xs, *xinv, *gs, *ginv;  // block-128 activation / gradient scales (grow-only)
    size_t blk_cap;
    float* w32;                  // widened weights when no master copy (grow-only)
    size_t w32_cap;
    float* acc32;                // block 32 / 64: fp32 accumulator of the chunked GEMMs (grow-only)
    size_t acc32_cap;
    float* colpart;              // column sums of dY per 64-row tile (the bias gradient; grow-only)
    size_t colpart_cap;
    unsigned long long declined_shape;
    int warned_rows;             // the note about B*T not a multiple of 16 was printed
};

static inline LowpState* lowp_state(GemmContext* ctx) { return (LowpState*)ctx->lowp->state; }

template <typename T>
static inline void lowp_grow(T** p, size_t* cap, size_t n) {
    if (n <= *cap) return;
    if (*p) cudaCheck(cudaFree(*p));
    cudaCheck(cudaMalloc(p, n * sizeof(T)));
    *cap = n;
}

// Grow a set of buffers that share one capacity to n elements each (cudaFree synchronizes the device, so
// no queued kernel still reads the old ones).
template <typename T, int K>
static inline void lowp_grow_set(T** (&bufs)[K], size_t* cap, size_t n) {
    if (n <= *cap) return;
    for (int i = 0; i < K; i++) {
        size_t c = *cap;
        lowp_grow(bufs[i], &c, n);
    }
    *cap = n;
}

// The three activation / gradient code buffers, n bytes each.
static inline void lowp_grow_codes(LowpState* s, size_t n) {
    uint8_t** bufs[3] = {&s->a8, &s->g8, &s->gt8};
    lowp_grow_set(bufs, &s->codes_cap, n);
}

// The four block-scale buffers, n floats each.
static inline void lowp_grow_blk(LowpState* s, size_t n) {
    float** bufs[4] = {&s->xs, &s->xinv, &s->gs, &s->ginv};
    lowp_grow_set(bufs, &s->blk_cap, n);
}

static inline bool lowp_is_tcfp() { return kLowpTCFP12; }

// Block scaling (TCFP-12 --tcfp-block b): the weights in b x b tiles (transposable, so dgrad's W^T codes share
// them), X and dY in 1 x b blocks along K. b = 128 is cuBLASLt's Hopper block scaling (BLK128x128 weights,
// VEC128 activations: one GEMM); b = 32, 64 run gemm_fp8.cuh's chunked outer-vector modes (K / b GEMMs of
// depth b per product, accumulated in fp32: a slow path for numerics studies).
static inline Fp8ScaleMode lowp_block_mode(int block) {
    return block == 128 ? FP8_SCALE_BLK128_VEC128 : block == 64 ? FP8_SCALE_CHUNK64 : block == 32 ? FP8_SCALE_CHUNK32 : FP8_SCALE_TENSOR;
}
static inline FP8BlockLayout lowp_weight_tiles(int block, int OC, int C) {
    return block == 128 ? fp8_block_layout_cublaslt_blk128x128(OC, C) : fp8_block_layout_tiles(OC, C, block);
}
// The DEQUANT scales of weight codes (rows, K) as a GEMM's A operand reads them.
static inline FP8BlockLayout lowp_weight_a_layout(int block, int rows, int K) {
    return block == 128 ? fp8_block_layout_cublaslt_blk128x128(rows, K) : fp8_block_layout_colmajor(rows, K, block);
}
// The scales of activation / gradient codes (rows, K) as a GEMM's B operand reads them.
static inline FP8BlockLayout lowp_act_layout(int block, int rows, int K) {
    return block == 128 ? fp8_block_layout_cublaslt_vec128(rows, K) : fp8_block_layout_colmajor(rows, K, block);
}

// The registered layer of `weight`, or NULL.
static inline LowpLayer* lowp_find_layer(LowpState* s, const floatX* weight) {
    for (int i = 0; i < s->num_layers; i++)
        if (s->layers[i].weight == weight) return &s->layers[i];
    return NULL;
}

// Register (or find) the layer of `weight`; allocates its state on first sight.
static inline LowpLayer* lowp_layer(LowpState* s, const floatX* weight, int OC, int C) {
    if (LowpLayer* found = lowp_find_layer(s, weight)) {
        if (found->OC != OC || found->C != C)
            die("gemm_lowp: the weight at %p is used as (%d x %d) and as (%d x %d)", (const void*)weight, found->OC, found->C, OC, C);
        return found;
    }
    if (s->num_layers == LOWP_MAX_LAYERS) die("gemm_lowp: more than %d linear layers", LOWP_MAX_LAYERS);
    LowpLayer* L = &s->layers[s->num_layers++];
    memset(L, 0, sizeof(*L));
    L->weight = weight;
    L->OC = OC;
    L->C = C;
    const size_t n = (size_t)OC * C;
    cudaCheck(cudaMalloc(&L->w_hi, n));
    cudaCheck(cudaMalloc(&L->wt_hi, n));
    cudaCheck(cudaMalloc(&L->f, 4 * LOWP_TRIPLE * sizeof(float)));
    cudaCheck(cudaMemset(L->f, 0, 4 * LOWP_TRIPLE * sizeof(float)));
    if (lowp_is_tcfp()) {
        cudaCheck(cudaMalloc(&L->w_lo, n));
        cudaCheck(cudaMalloc(&L->wt_lo, n));
        if (s->opt.error_feedback) {
            cudaCheck(cudaMalloc(&L->ef, n * sizeof(float)));
            cudaCheck(cudaMemset(L->ef, 0, n * sizeof(float)));
        }
        if (s->opt.block) {
            const int b = s->opt.block;
            const size_t nt = fp8_block_layout_count(lowp_weight_tiles(b, OC, C));
            const size_t na = fp8_block_layout_count(lowp_weight_a_layout(b, OC, C));
            const size_t nat = fp8_block_layout_count(lowp_weight_a_layout(b, C, OC));
            cudaCheck(cudaMalloc(&L->blk_s_hi, nt * sizeof(float)));
            cudaCheck(cudaMalloc(&L->blk_s_lo, nt * sizeof(float)));
            cudaCheck(cudaMalloc(&L->blk_inv_hi, na * sizeof(float)));
            cudaCheck(cudaMalloc(&L->blk_inv_lo, na * sizeof(float)));
            cudaCheck(cudaMalloc(&L->blk_inv_hi_t, nat * sizeof(float)));
            cudaCheck(cudaMalloc(&L->blk_inv_lo_t, nat * sizeof(float)));
            if (b != 128) {
                cudaCheck(cudaMalloc(&L->tile_inv_hi, nt * sizeof(float)));
                cudaCheck(cudaMalloc(&L->tile_inv_lo, nt * sizeof(float)));
            }
        }
    }
    if (s->opt.delayed > 0) {
        cudaCheck(cudaMalloc(&L->hist, 3 * (size_t)s->opt.delayed * sizeof(float)));
        cudaCheck(cudaMemset(L->hist, 0, 3 * (size_t)s->opt.delayed * sizeof(float)));
        cudaCheck(cudaMalloc(&L->pos, 3 * sizeof(int)));
        cudaCheck(cudaMemset(L->pos, 0, 3 * sizeof(int)));
        cudaCheck(cudaMalloc(&L->pending, 3 * sizeof(uint32_t)));
        cudaCheck(cudaMemset(L->pending, 0, 3 * sizeof(uint32_t)));
    }
    return L;
}

// The producer amax registered for `x` (n values) by gemm_amax_slot, or NULL. Every GEMM call takes the hint
// (it is valid for the next call only), so a stale one is never used.
static inline uint32_t* lowp_take_hint(LowpState* s, const void* x, size_t n) {
    const LowpAmaxHint h = s->hint;
    s->hint.slot = -1;
    if (h.slot < 0 || h.tensor != x || h.n != n) return NULL;
    return s->amax_bits + h.slot;
}

// GemmLowpBackend::amax_slot: a zeroed slot for the producer of `tensor` (current scaling only: delayed
// scaling takes its amaxes while quantizing).
static unsigned int* lowp_amax_slot(GemmContext* ctx, const void* tensor, size_t n) {
    LowpState* s = lowp_state(ctx);
    if (s->opt.delayed > 0) return NULL;
    const int i = s->next_slot;
    s->next_slot = (i + 1) % LOWP_AMAX_SLOTS;
    if (s->slot_dirty[i]) cudaCheck(cudaMemsetAsync(s->amax_bits + i, 0, sizeof(uint32_t), ctx->stream));
    s->slot_dirty[i] = 1;
    s->hint.tensor = tensor;
    s->hint.n = n;
    s->hint.slot = i;
    return s->amax_bits + i;
}

// Per-tensor scale of x (n values of T) into s[0..2] = amax, quant scale, dequant scale, before x is quantized.
// Returns the slot the quantization must accumulate amax(x) into (delayed scaling), or NULL.
//   delayed scaling (history H > 0): the scale from the history of role `role` of layer L; the first use
//     (bootstrap) by current scaling. The amax of this use enters the history at the next use
//     (fp8_delayed_scale_pending).
//   Outside training passes (evaluation, sampling) the history is left alone: current scaling.
//   current scaling: from the producer's amax (`hint`, from lowp_take_hint) when there is one, else an amax
//     pass over x.
template <typename T>
static inline uint32_t* lowp_scale(LowpState* st, LowpLayer* L, int role, float* s, const T* x, size_t n, FP8Kind kind,
                                   uint32_t* hint, cudaStream_t stream) {
    if (st->opt.delayed > 0 && st->ctx->training) {
        uint32_t* pending = L->pending + role;
        if (L->uses[role]++ == 0) {
            fp8_amax_scale(LOWP_AMAX(s), LOWP_SCALE(s), LOWP_INV(s), x, n, kind, 0, 1, st->scratch, stream);
            cudaCheck(cudaMemsetAsync(pending, 0, sizeof(uint32_t), stream));
        } else {
            fp8_delayed_scale_pending(L->hist + (size_t)role * st->opt.delayed, st->opt.delayed, L->pos + role, pending, LOWP_AMAX(s),
                                      LOWP_SCALE(s), LOWP_INV(s), kind, 0, 1, stream);
        }
        return pending;
    }
    if (hint) {
        fp8_scale_from_amax_bits(hint, LOWP_AMAX(s), LOWP_SCALE(s), LOWP_INV(s), kind, 0, 1, stream);  // (zeroes the slot)
        st->slot_dirty[hint - st->amax_bits] = 0;
    } else fp8_amax_scale(LOWP_AMAX(s), LOWP_SCALE(s), LOWP_INV(s), x, n, kind, 0, 1, st->scratch, stream);
    return NULL;
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
    if (!lowp_is_tcfp()) {  // current scaling (weights change little per step; their amax pass is cheap), both copies in one pass
        fp8_amax_scale(LOWP_AMAX(L->f), LOWP_SCALE(L->f), LOWP_INV(L->f), L->weight, (size_t)OC * C, FP8_E4M3FN, 0, 1, s->scratch, stream);
        fp8_quantize_pair(L->w_hi, L->wt_hi, L->weight, OC, C, FP8_E4M3FN, LOWP_SCALE(L->f), NULL, 0, 0, stream);
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
        const int b = s->opt.block;
        a.blocked = 1;
        a.layout = lowp_weight_tiles(b, OC, C);
        a.scale_hi = L->blk_s_hi; a.scale_lo = L->blk_s_lo;
        // block 128: the tiles' layout is the forward's A-operand layout; 32 / 64: expanded from the tiles below
        a.inv_scale_hi = b == 128 ? L->blk_inv_hi : L->tile_inv_hi;
        a.inv_scale_lo = b == 128 ? L->blk_inv_lo : L->tile_inv_lo;
        tcfp12_split(a, stream);
        if (b != 128) {
            fp8_block_scales_relayout(L->blk_inv_hi, lowp_weight_a_layout(b, OC, C), a.inv_scale_hi, a.layout, 0, stream);
            fp8_block_scales_relayout(L->blk_inv_lo, lowp_weight_a_layout(b, OC, C), a.inv_scale_lo, a.layout, 0, stream);
        }
        // the transposed codes: the same tiles on the transposed grid
        fp8_block_scales_relayout(L->blk_inv_hi_t, lowp_weight_a_layout(b, C, OC), a.inv_scale_hi, a.layout, 1, stream);
        fp8_block_scales_relayout(L->blk_inv_lo_t, lowp_weight_a_layout(b, C, OC), a.inv_scale_lo, a.layout, 1, stream);
    } else {
        float* lo = L->f + LOWP_TRIPLE;
        a.scale_hi = LOWP_SCALE(L->f); a.inv_scale_hi = LOWP_INV(L->f); a.amax_hi = LOWP_AMAX(L->f);
        a.scale_lo = LOWP_SCALE(lo); a.inv_scale_lo = LOWP_INV(lo); a.amax_lo = LOWP_AMAX(lo);
        tcfp12_split(a, stream);
    }
}

// Quantize an activation-like operand x (rows, K) of `kind` for use as the B operand of a GEMM along K:
// per tensor into `codes` with the scale triple sc, or (blocked) with 1 x block scales into codes
// + the block-scale pair `pair` (0: xs / xinv, 1: gs / ginv). tcodes != NULL: also the (K, rows) per-tensor
// transposed copy (the wgrad operand), with its scale in sc; per tensor both copies come from one pass
// (fp8_quantize_pair). hint: the producer's amax slot of x (lowp_take_hint) or NULL. col_partials: with
// tcodes, the column sums of x per 64-row tile (fp8_quantize_pair), or NULL.
static inline void lowp_quantize_act(LowpState* s, LowpLayer* L, int role, const floatX* x, int rows, int K, FP8Kind kind,
                                     uint8_t* codes, uint8_t* tcodes, float* sc, int pair, bool blocked, uint32_t* hint,
                                     cudaStream_t stream, float* col_partials = NULL) {
    if (blocked) {
        const FP8BlockLayout BL = lowp_act_layout(s->opt.block, rows, K);
        lowp_grow_blk(s, fp8_block_layout_count(BL));  // before the buffers are read: it may reallocate them
        float* bs = pair ? s->gs : s->xs;
        float* binv = pair ? s->ginv : s->xinv;
        fp8_block_scales(bs, binv, x, BL, kind, 0, 1, stream);
        fp8_quantize_blocked(codes, x, BL, kind, bs, 0, 0, 0, stream);
        codes = NULL;  // done; the per-tensor pass below makes only the transposed copy
    }
    if (codes || tcodes) {
        uint32_t* acc = lowp_scale(s, L, role, sc, x, (size_t)rows * K, kind, hint, stream);
        fp8_quantize_pair(codes, tcodes, x, rows, K, kind, LOWP_SCALE(sc), acc, 0, 0, stream, tcodes ? col_partials : NULL);
    }
}

// GemmLowpBackend::defer: take over GELU (the fcproj input) or GELU' (the fc dY) when the next call can
// quantize it in one pass with its producer: per-tensor scales (not TCFP-12 blocks) and FP8 wgrad (the
// transposed codes are the kernel's main output; with BF16 wgrad the BF16 tensor is read anyway).
static bool lowp_defer(GemmContext* ctx, GemmDefer kind, floatX* out, const floatX* pre, int rows, int cols) {
    LowpState* s = lowp_state(ctx);
    if (!s->opt.producers || s->opt.hp_wgrad || (lowp_is_tcfp() && s->opt.block)) return false;
    if (s->deferred.kind != GEMM_DEFER_NONE) return false;  // (never: every GEMM call takes it)
    s->deferred = LowpDeferred{kind, out, pre, (size_t)rows * cols};
    return true;
}

// The deferred producer, taken by every forward / backward call (valid for the next call only).
static inline LowpDeferred lowp_take_deferred(LowpState* s) {
    const LowpDeferred d = s->deferred;
    s->deferred.kind = GEMM_DEFER_NONE;
    return d;
}

// Run a deferred producer the call cannot fuse, as the front would have (no amax slot: the quantization
// then takes its own amax).
static inline void lowp_materialize(const LowpDeferred& d, cudaStream_t stream) {
    if (d.kind == GEMM_DEFER_GELU) {
        gemm_gelu_apply<false>(d.out, const_cast<floatX*>(d.pre), d.n, stream, NULL);
    } else if (d.kind == GEMM_DEFER_DGELU) {
        gemm_dgelu_apply(d.out, d.pre, d.n, stream, NULL);
    }
}

// Whether this call quantizes the deferred producer d of its operand x (n values, role of layer L) itself:
// the same tensor, transposed codes wanted, and a scale that does not need the tensor first (the bootstrap
// use of delayed scaling takes an amax pass over it).
static inline bool lowp_fusable(const LowpState* s, const LowpLayer* L, const LowpDeferred& d, GemmDefer kind, const floatX* x,
                                size_t n, int role, bool transposed) {
    return d.kind == kind && d.out == x && d.n == n && transposed &&
           !(s->opt.delayed > 0 && s->ctx->training && L->uses[role] == 0);
}

// lowp_quantize_act for an operand computed by the source src (lowp_producers.cuh) in the same pass: per-tensor
// scale triple sc, plain codes (or NULL) and transposed codes; delayed scaling in training passes with the
// history's scale (the amax goes into the pending slot), else speculative current scaling.
template <class Src>
static inline void lowp_quantize_produced(LowpState* s, LowpLayer* L, int role, const Src& src, int rows, int K, FP8Kind kind,
                                          uint8_t* codes, uint8_t* tcodes, float* sc, float* col_partials, cudaStream_t stream) {
    if (s->opt.delayed > 0 && s->ctx->training) {
        uint32_t* pending = lowp_scale<floatX>(s, L, role, sc, NULL, (size_t)rows * K, kind, NULL, stream);
        fp8_quantize_pair_from(codes, tcodes, src, rows, K, kind, LOWP_SCALE(sc), pending, col_partials, NULL, 0, stream);
    } else {
        lowp_quantize_speculative(&s->spec, src, rows, K, kind, codes, tcodes, LOWP_AMAX(sc), LOWP_SCALE(sc), LOWP_INV(sc),
                                  col_partials, stream);
    }
}

static inline bool lowp_eligible(const GemmContext* ctx, LowpState* s, LowpLayer* L, const floatX* weight, int N, int C, int OC) {
    if (ctx->optimizer_steps < s->opt.warmup) return false;
    if (weight == s->lm_head_weight && !s->opt.lm_head) return false;
    const int b = s->opt.block;
    const bool shape_ok = C % 16 == 0 && OC % 16 == 0 && (!b || (C % b == 0 && OC % b == 0));
    if (!shape_ok && !L->warned) {  // a property of the layer: once per layer
        L->warned = 1;
        s->declined_shape++;
        printf("note: %s: a linear layer (C=%d OC=%d) runs in BF16: FP8 GEMMs need multiples of 16%s\n", s->backend.name, C, OC,
               b ? " and C, OC multiples of the --tcfp-block size" : "");
    }
    if (shape_ok && N % 16 != 0 && !s->warned_rows) {  // a property of the batch (e.g. sampling's B*T): once per run
        s->warned_rows = 1;
        printf("note: %s: forward passes whose B*T is not a multiple of 16 (here %d, e.g. sampling) run their GEMMs in BF16\n",
               s->backend.name, N);
    }
    return shape_ok && N % 16 == 0;
}

static inline void lowp_gemm_failed(const char* what, cublasStatus_t st, const Fp8GemmContext* f) {
    fprintf(stderr, "error: gemm_lowp: %s: cuBLASLt FP8 GEMM failed (%s): %s\n", what, cublasLtGetStatusName(st), f->last_error);
    exit(EXIT_FAILURE);
}

// The fp32 accumulator of the chunked block modes (32, 64) for n outputs, or NULL for the single-GEMM modes
// (their sum stays in the GEMM's fp32 accumulators; the chunked modes would round to BF16 after every chunk).
static inline float* lowp_acc32(LowpState* s, size_t n) {
    if (s->opt.block == 0 || s->opt.block == 128) return NULL;
    lowp_grow(&s->acc32, &s->acc32_cap, n);
    return s->acc32;
}

// The layer's bias in a 256-byte aligned buffer (the FP8 GEMMs' bias epilogue refuses the 16-byte aligned
// parameter slices), copied once per weight version.
static inline const floatX* lowp_bias(LowpLayer* L, const floatX* bias, unsigned long long version, cudaStream_t stream) {
    if (!bias) return NULL;
    if (!L->bias) cudaCheck(cudaMalloc(&L->bias, (size_t)L->OC * sizeof(floatX)));
    if (L->bias_version != version) {
        cudaCheck(cudaMemcpyAsync(L->bias, bias, (size_t)L->OC * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
        L->bias_version = version;
    }
    return L->bias;
}

static bool lowp_forward(GemmContext* ctx, floatX* y, const floatX* inp, const floatX* weight, const floatX* bias, int N, int C, int OC) {
    LowpState* s = lowp_state(ctx);
    const LowpDeferred d = lowp_take_deferred(s);  // the GELU of inp (the fcproj layer), if the fc forward deferred it
    uint32_t* hint = lowp_take_hint(s, inp, (size_t)N * C);
    cudaStream_t st = ctx->stream;
    // (the LM head gets no state unless it runs here)
    LowpLayer* L = weight == s->lm_head_weight && !s->opt.lm_head ? NULL : lowp_layer(s, weight, OC, C);
    if (L) L->xt_rows = 0;
    const bool run = L && lowp_eligible(ctx, s, L, weight, N, C, OC);
    // X: the GEMM operand and, unless wgrad runs in BF16, the transposed wgrad operand kept for backward
    uint8_t* xt = NULL;
    if (run && !s->opt.hp_wgrad) {
        lowp_grow(&L->xt, &L->xt_cap, (size_t)N * C);
        xt = L->xt;
    }
    const bool fused = run && lowp_fusable(s, L, d, GEMM_DEFER_GELU, inp, (size_t)N * C, LOWP_ROLE_X, xt != NULL);
    if (!fused) lowp_materialize(d, st);
    if (!run) return false;
    lowp_grow_codes(s, (size_t)N * (C > OC ? C : OC));
    lowp_quantize_weights(s, L, ctx->weight_version, st);
    const bool blocked = lowp_is_tcfp() && s->opt.block;
    float* xsc = L->f + 2 * LOWP_TRIPLE;
    if (fused) {
        const LowpSrcGelu src{d.pre, ctx->keep_activations ? d.out : NULL};
        lowp_quantize_produced(s, L, LOWP_ROLE_X, src, N, C, FP8_E4M3FN, s->a8, xt, xsc, NULL, st);
    } else {
        lowp_quantize_act(s, L, LOWP_ROLE_X, inp, N, C, FP8_E4M3FN, s->a8, xt, xsc, 0, blocked, hint, st);
    }
    if (xt) L->xt_rows = N;
    bias = lowp_bias(L, bias, ctx->weight_version, st);
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    const int fast = lowp_fast_accum(s->opt, true);
    bool ok;
    float* lo = L->f + LOWP_TRIPLE;
    if (!lowp_is_tcfp()) {
        ok = fp8_linear_forward(&s->fp8, y, s->a8, LOWP_INV(xsc), L->w_hi, LOWP_INV(L->f), bias, N, C, OC, FP8_SCALE_TENSOR,
                                fast, 0.0f, &cs);
    } else if (blocked) {
        float* acc32 = lowp_acc32(s, (size_t)N * OC);
        ok = tcfp12_linear_forward(&s->fp8, y, s->a8, s->xinv, L->w_hi, L->blk_inv_hi, L->w_lo, L->blk_inv_lo, bias, N, C, OC,
                                   lowp_block_mode(s->opt.block), fast, acc32 ? TCFP12_ACC_FP32 : TCFP12_ACC_BF16_LO_FIRST,
                                   acc32, &cs);
    } else {
        ok = tcfp12_linear_forward(&s->fp8, y, s->a8, LOWP_INV(xsc), L->w_hi, LOWP_INV(L->f), L->w_lo, LOWP_INV(lo), bias, N, C,
                                   OC, FP8_SCALE_TENSOR, fast, TCFP12_ACC_BF16_LO_FIRST, NULL, &cs);
    }
    if (!ok) lowp_gemm_failed("forward", cs, &s->fp8);
    return true;
}

static bool lowp_backward(GemmContext* ctx, floatX* dinp, floatX* dweight, floatX* dbias, bool* dbias_done, const floatX* dout,
                          const floatX* inp, const floatX* weight, int N, int C, int OC) {
    LowpState* s = lowp_state(ctx);
    const LowpDeferred d = lowp_take_deferred(s);  // GELU' of dout (the fc layer), if the fcproj backward deferred it
    uint32_t* hint = lowp_take_hint(s, dout, (size_t)N * OC);
    cudaStream_t st = ctx->stream;
    LowpLayer* L = weight == NULL || (weight == s->lm_head_weight && !s->opt.lm_head) ? NULL : lowp_layer(s, weight, OC, C);
    const bool run = L && lowp_eligible(ctx, s, L, weight, N, C, OC);
    const bool fp8_wgrad = dweight && !s->opt.hp_wgrad;
    const bool fused = run && lowp_fusable(s, L, d, GEMM_DEFER_DGELU, dout, (size_t)N * OC, LOWP_ROLE_DY, fp8_wgrad);
    if (!fused) lowp_materialize(d, st);
    if (!run) return false;
    lowp_grow_codes(s, (size_t)N * (C > OC ? C : OC));
    lowp_quantize_weights(s, L, ctx->weight_version, st);  // no-op after this step's forward
    const bool blocked = lowp_is_tcfp() && s->opt.block;
    if (fp8_wgrad && L->xt_rows != N)
        die("gemm_lowp: the backward of a linear layer (N=%d C=%d OC=%d) without its forward at the same N", N, C, OC);
    float* gsc = L->f + 3 * LOWP_TRIPLE;
    float* lo = L->f + LOWP_TRIPLE;
    // dY: E5M2, plain (dgrad, B operand along OC) and transposed (wgrad, B operand along N), one pass that
    // also makes the bias gradient's column sums
    float* colpart = NULL;
    if (dbias && fp8_wgrad) {
        lowp_grow(&s->colpart, &s->colpart_cap, (size_t)fp8_col_partial_rows(N) * OC);
        colpart = s->colpart;
    }
    if (fused) {
        lowp_quantize_produced(s, L, LOWP_ROLE_DY, LowpSrcDgelu{d.out, d.pre}, N, OC, FP8_E5M2, dinp ? s->g8 : NULL, s->gt8, gsc,
                               colpart, st);
    } else {
        lowp_quantize_act(s, L, LOWP_ROLE_DY, dout, N, OC, FP8_E5M2, dinp ? s->g8 : NULL, fp8_wgrad ? s->gt8 : NULL, gsc, 1, blocked,
                          hint, st, colpart);
    }
    if (colpart) {
        gemm_dbias_finish(dbias, colpart, fp8_col_partial_rows(N), OC, st);
        *dbias_done = true;
    }
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    const int fast = lowp_fast_accum(s->opt, false);
    if (dinp) {
        bool ok;
        if (!lowp_is_tcfp()) {
            ok = fp8_linear_dgrad(&s->fp8, dinp, s->g8, LOWP_INV(gsc), L->wt_hi, LOWP_INV(L->f), N, C, OC, FP8_SCALE_TENSOR,
                                  fast, 0.0f, FP8_E5M2, &cs);
        } else {
            const uint8_t* wt_lo = s->opt.abd ? NULL : L->wt_lo;
            if (blocked) {
                float* acc32 = lowp_acc32(s, (size_t)N * C);
                ok = tcfp12_linear_dgrad(&s->fp8, dinp, s->g8, s->ginv, L->wt_hi, L->blk_inv_hi_t, wt_lo, L->blk_inv_lo_t, N, C, OC,
                                         lowp_block_mode(s->opt.block), fast,
                                         acc32 ? TCFP12_ACC_FP32 : TCFP12_ACC_BF16_LO_FIRST, acc32, FP8_E5M2, &cs);
            } else
                ok = tcfp12_linear_dgrad(&s->fp8, dinp, s->g8, LOWP_INV(gsc), L->wt_hi, LOWP_INV(L->f), wt_lo, LOWP_INV(lo), N, C, OC,
                                         FP8_SCALE_TENSOR, fast, TCFP12_ACC_BF16_LO_FIRST, NULL, FP8_E5M2, &cs);
        }
        if (!ok) lowp_gemm_failed("dgrad", cs, &s->fp8);
    }
    if (dweight) {
        if (!fp8_wgrad) {
            gemm_backend_backward_dweight(ctx, dweight, dout, inp, N, C, OC);
        } else {
            // dW += dY8ᵀ · X8ᵀ with the transposed X codes and scale the forward kept
            const float* xsc = L->f + 2 * LOWP_TRIPLE;
            if (!fp8_linear_wgrad(&s->fp8, dweight, s->gt8, LOWP_INV(gsc), L->xt, LOWP_INV(xsc), N, C, OC, FP8_SCALE_TENSOR,
                                  fast, 1.0f, FP8_E5M2, &cs))
                lowp_gemm_failed("wgrad", cs, &s->fp8);
        }
    }
    return true;
}

// GemmLowpBackend::destroy: every device buffer of the backend, then the state itself.
static void lowp_destroy(GemmContext* ctx) {
    LowpState* s = lowp_state(ctx);
    for (int i = 0; i < s->num_layers; i++) {
        LowpLayer* L = &s->layers[i];
        void* bufs[] = {L->w_hi, L->w_lo, L->wt_hi, L->wt_lo, L->f, L->blk_s_hi, L->blk_inv_hi, L->blk_s_lo, L->blk_inv_lo,
                        L->blk_inv_hi_t, L->blk_inv_lo_t, L->tile_inv_hi, L->tile_inv_lo, L->ef, L->hist, L->pos, L->pending,
                        L->xt, L->bias};
        for (void* b : bufs) cudaCheck(cudaFree(b));
    }
    void* bufs[] = {s->spec.dev, s->scratch, s->amax_bits, s->a8, s->g8, s->gt8, s->xs, s->xinv, s->gs, s->ginv, s->w32, s->acc32, s->colpart};
    for (void* b : bufs) cudaCheck(cudaFree(b));
    fp8_gemm_context_free(&s->fp8);
    free(s);
}

// GemmLowpBackend::keeps_input: the layer's last forward kept its transposed input codes for N rows and its
// backward will take it (so matmul_backward's inp is not read).
static bool lowp_keeps_input(GemmContext* ctx, const floatX* weight, int N) {
    LowpState* s = lowp_state(ctx);
    const LowpLayer* L = s->opt.hp_wgrad ? NULL : lowp_find_layer(s, weight);
    return L != NULL && L->xt_rows == N && ctx->optimizer_steps >= s->opt.warmup;
}

// GemmLowpBackend::report: the FP8 GEMM plans' algorithm tuning (fp8_gemm_tune_report), then how many tensors
// speculative scaling quantized (lowp_producers.cuh) and how many of them it re-quantized because the amax had
// left the guessed power-of-two range (one line each; nothing if unused). Synchronizes the stream.
static void lowp_report(GemmContext* ctx, FILE* f) {
    const LowpState* s = lowp_state(ctx);
    fp8_gemm_tune_report(&s->fp8, f);
    const long long uses = s->spec.uses;
    if (uses <= 0) return;
    const unsigned long long misses = lowp_spec_misses_read(&s->spec, ctx->stream);
    fprintf(f, "%s: %lld tensors quantized by their producers with speculative scales, %llu re-quantized (%.2f%%)\n",
            s->backend.name, uses, misses, 100.0 * (double)misses / (double)uses);
}

// Check the knobs and their combinations (dies naming the flag; no CUDA call, so the trainer checks
// them before it touches the GPU). The ranges of single flags are in the flag table (llmc/core/cli.h);
// these checks stay for callers that fill LowpOptions themselves.
static inline void gemm_lowp_options_validate(const LowpOptions* opt, int allow_fallback) {
    const struct { const char* flag; int value; } switches[] = {
        {"--fp8-hp-wgrad", opt->hp_wgrad}, {"--fp8-lm-head", opt->lm_head},
        {"--fp8-producers", opt->producers},
        {"--tcfp-ef", opt->error_feedback},    {"--tcfp-srr", opt->srr},           {"--tcfp-abd", opt->abd}};
    for (const auto& sw : switches)
        if (sw.value != 0 && sw.value != 1) die("%s: expected 0 or 1, got %d", sw.flag, sw.value);
    if (opt->fast_accum < LOWP_FAST_ACCUM_NONE || opt->fast_accum > LOWP_FAST_ACCUM_FORWARD)
        die("--fp8-fast-accum: expected 0, 1 or 2, got %d", opt->fast_accum);
    if (allow_fallback != 0 && allow_fallback != 1) die("--fp8-fallback: expected 0 or 1, got %d", allow_fallback);
    if (opt->srr && opt->error_feedback) die("--tcfp-srr 1 replaces error feedback: it cannot be combined with --tcfp-ef 1");
    if (opt->block != 0 && opt->block != 32 && opt->block != 64 && opt->block != 128)
        die("--tcfp-block %d: supported are 0 (per tensor), 32, 64 (chunked GEMMs, slow) and 128 (cuBLASLt's Hopper block scaling)",
            opt->block);
    if (opt->block == 128 && opt->fast_accum != LOWP_FAST_ACCUM_NONE)  // measured: CUBLAS_STATUS_NOT_SUPPORTED
        die("--fp8-fast-accum %d cannot be combined with --tcfp-block 128: cuBLASLt's block-scaled FP8 GEMMs have no fast "
            "accumulation", opt->fast_accum);
    if (!lowp_is_tcfp() && (opt->block || opt->error_feedback || opt->srr || opt->abd))
        die("--tcfp-*: TCFP-12 options need the TCFP12=1 build (this is %s)", GEMM_LOWP_MODE_NAME);
    if (opt->block && fp8_block_scaling_unavailable())  // cuBLASLt version guard (gemm_fp8.cuh)
        die("--tcfp-block %d %s", opt->block, fp8_block_scaling_unavailable());
    if (opt->delayed < 0 || opt->warmup < 0) die("--fp8-delayed / --fp8-warmup: must be >= 0");
}

// Attach the backend to ctx (after gemm_context_init). Dies on a GPU without FP8 tensor cores (below
// compute capability 8.9) unless allow_fallback, in which case nothing is attached and the base
// backend runs every GEMM (printed). Invalid option combinations end the program naming the flag.
static inline void gemm_lowp_attach(GemmContext* ctx, const LowpOptions* opt, int allow_fallback, unsigned long long seed) {
    gemm_lowp_options_validate(opt, allow_fallback);
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
    s->ctx = ctx;
    s->seed = seed;
    fp8_gemm_context_init(&s->fp8, ctx);
    lowp_spec_init(&s->spec);
    cudaCheck(cudaMalloc(&s->scratch, FP8_QUANT_SCRATCH_FLOATS * sizeof(float)));
    cudaCheck(cudaMalloc(&s->amax_bits, LOWP_AMAX_SLOTS * sizeof(uint32_t)));
    cudaCheck(cudaMemset(s->amax_bits, 0, LOWP_AMAX_SLOTS * sizeof(uint32_t)));
    s->hint.slot = -1;
    s->backend.state = s;
    s->backend.name = GEMM_LOWP_MODE_NAME;
    s->backend.forward = lowp_forward;
    s->backend.backward = lowp_backward;
    s->backend.amax_slot = lowp_amax_slot;
    s->backend.keeps_input = lowp_keeps_input;
    s->backend.defer = lowp_defer;
    s->backend.keeps_inputs = !opt->hp_wgrad;
    s->backend.report = lowp_report;
    s->backend.destroy = lowp_destroy;
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
    snprintf(out, n, "block=%d ef=%d srr=%d abd=%d hp_wgrad=%d warmup=%d delayed=%d fast_accum=%d lm_head=%d producers=%d", o.block,
             o.error_feedback, o.srr, o.abd, o.hp_wgrad, o.warmup, o.delayed, o.fast_accum, o.lm_head, o.producers);
}
