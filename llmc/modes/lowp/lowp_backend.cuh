// lowp_backend.cuh - the state of the FP8 / TCFP-12 linear-layer backend (llmc/modes/lowp/gemm_lowp.cuh, whose header
// says what it computes) and the pieces its calls are made of: the run-time knobs (LowpOptions), the per-layer state
// (weight codes, scales, histories, kept input codes), the layer registry, amax slots and hints, the scales (current,
// delayed, speculative), the weight and activation quantization, the deferred producers (GELU / GELU' of the next call's
// operand) and the eligibility of a shape. The calls themselves: gemm_lowp.cuh; the CUTLASS fused-epilogue path:
// lowp_cutlass.cuh.
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
#include "llmc/modes/lowp/lowp_handover.h"

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
    int producers;       // 1: GELU / GELU' computed inside the quantization of the next GEMM's operands, 2: the LayerNorm
                         // outputs too (llmc/kernels/fp8/lowp_producers.cuh; speculative current scaling); 0 = separate passes
    int cutlass;         // FP8 build: the fc forward's GELU and the fcproj dgrad's GELU' made into the next GEMM's codes in
                         // the producing GEMM's epilogue (CUTLASS, llmc/modes/lowp/lowp_cutlass.cuh); 0 = cuBLASLt + producers
    int lm_head_rows;    // with lm_head: the LM head's backward in row chunks of at most this many token rows (a multiple of
                         // 16), so that its dY codes take 2 x lm_head_rows x Vp bytes instead of 2 x N x Vp; 0 = all N at once
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
    // The layer whose operand this layer's fused epilogue makes (lowp_cutlass.cuh; set by gemm_lowp_link_mlp, NULL
    // otherwise): gelu_next, of an fc layer: the fcproj layer whose X is GELU(this layer's output); dgelu_next, of an
    // fcproj layer: the fc layer whose dY is this layer's dgrad times GELU'.
    struct LowpLayer* gelu_next;
    struct LowpLayer* dgelu_next;
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
    LowpDeferred deferred;       // the producer taken over for the next GEMM call (lowp_handover.h; kind NONE: none)
    GemmLayerNorm ln_job;        // deferred.kind LAYERNORM: the LayerNorm whose statistics are written and whose out is not
    long long ln_taken;          // LayerNorm outputs computed inside their consumer's quantization (lowp_forward), for the tests
    LowpSpec spec;               // speculative scaling's device state and counts (llmc/kernels/fp8/lowp_producers.cuh)
    uint8_t *a8, *g8, *gt8;      // codes of X (plain), dY (plain, transposed) (grow-only, each its own capacity)
    size_t a8_cap, g8_cap, gt8_cap;
    long long lm_head_chunks;    // row chunks the LM head's backward ran in (--fp8-lm-head-rows), for the report and the tests
    float *xs, *xinv, *gs, *ginv;  // block-128 activation / gradient scales (grow-only)
    size_t blk_cap;
    float* w32;                  // widened weights when no master copy (grow-only)
    size_t w32_cap;
    float* acc32;                // fp32 accumulator of chunked GEMMs: block 32 / 64, the LM head's row chunks (grow-only)
    size_t acc32_cap;
    float* colpart;              // column sums of dY per 64-row tile (the bias gradient; grow-only)
    size_t colpart_cap;
    unsigned long long declined_shape;
    long long cutlass_fc, cutlass_dgrad;  // fused CUTLASS epilogue calls (lowp_cutlass.cuh), for the report and the tests:
    long long cutlass_advanced;           // of those, made under delayed scaling in training passes
    long long cutlass_taken, cutlass_unmade;  // made codes used by their consumer / computed in BF16 by another call
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

// The three activation / gradient code buffers, at least na, ng, ngt bytes. They trade roles (a fused CUTLASS epilogue
// writes its consumer's codes into the buffer the consumer reads them from, lowp_cutlass.cuh), so a linear layer's call
// grows all three to N x max(C, OC); only the LM head, whose dY codes (N x Vp) would otherwise size all three, asks for
// less (gemm_lowp.cuh). A buffer is never reallocated while it holds codes made for the next call: the consumer of made
// codes needs no more than their producer ensured.
static inline void lowp_grow_codes(LowpState* s, size_t na, size_t ng, size_t ngt) {
    lowp_grow(&s->a8, &s->a8_cap, na);
    lowp_grow(&s->g8, &s->g8_cap, ng);
    lowp_grow(&s->gt8, &s->gt8_cap, ngt);
}

// The code buffers a call of the layer of `weight` (N rows, C in, OC out) needs: N x max(C, OC) each, but for the LM head
// (weight lm_head) only its X codes (N x C) in the forward and its dY codes (N x OC, plain and transposed) in the backward
// (no epilogue makes codes around it).
static inline void lowp_grow_layer_codes(LowpState* s, const floatX* weight, int N, int C, int OC, bool backward) {
    const size_t n = (size_t)N * (C > OC ? C : OC);
    if (weight != s->lm_head_weight) lowp_grow_codes(s, n, n, n);
    else lowp_grow_codes(s, (size_t)N * C, backward ? (size_t)N * OC : 0, backward ? (size_t)N * OC : 0);
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

// Whether the next call can quantize a producer of --fp8-producers level `level` (1: GELU / GELU', 2: the LayerNorm
// outputs) in one pass with it: that level on, per-tensor scales (not TCFP-12 blocks) and FP8 wgrad (the transposed
// codes are the pass's main output; with BF16 wgrad the BF16 tensor is read anyway).
static inline bool lowp_producers_take(const LowpState* s, int level) {
    return s->opt.producers >= level && !s->opt.hp_wgrad && !(lowp_is_tcfp() && s->opt.block);
}

// GemmLowpBackend::defer: take over GELU (the fcproj input) or GELU' (the fc dY) when the next call can
// quantize it in one pass with its producer (lowp_producers_take).
// A deferral the producing call already made (lowp_cutlass.cuh) is this very offer: taken (lowp_handover_offer).
static bool lowp_defer(GemmContext* ctx, GemmDefer kind, floatX* out, const floatX* pre, int rows, int cols) {
    LowpState* s = lowp_state(ctx);
    const bool can_take = lowp_producers_take(s, 1);
    const LowpDeferred held = s->deferred;  // (for the message)
    const LowpOffer r = lowp_handover_offer(&s->deferred, kind, out, pre, (size_t)rows * cols, can_take);
    if (r == LOWP_OFFER_OTHER)
        die("gemm_lowp: --fp8-cutlass 1: the front offers another %s than the one the GEMM before made (%p, %zu values)",
            kind == GEMM_DEFER_GELU ? "GELU" : "GELU'", held.out, held.n);
    return r != LOWP_OFFER_DECLINED;
}

// GemmLowpBackend::layernorm (--fp8-producers 2): take over the LayerNorm whose out is the next forward call's X (weight
// `consumer`): write only the residual (fused) and the row statistics now (layernorm_forward_stats) and leave out to that
// call, which computes it inside its quantization of X (LowpSrcLayernorm, lowp_forward): the BF16 out is neither written
// nor read back (it is written as well with keep_activations). Taken where such a pass can make it (lowp_producers_take)
// and the consumer will run FP8 GEMMs (after the warm-up; the LM head only with --fp8-lm-head 1), B*T and C multiples of
// 16. A call that then cannot fuse it computes out first (lowp_materialize).
static bool lowp_layernorm(GemmContext* ctx, const GemmLayerNorm& ln, const floatX* consumer) {
    LowpState* s = lowp_state(ctx);
    const bool can_take = lowp_producers_take(s, 2) && ctx->optimizer_steps >= s->opt.warmup && (consumer != s->lm_head_weight || s->opt.lm_head) &&
                          ln.N % 16 == 0 && ln.C % 16 == 0;
    if (!can_take) return false;
    const floatX* x = ln.inp2 ? ln.residual : ln.inp1;  // what the LayerNorm normalizes, as stored
    if (lowp_handover_offer(&s->deferred, GEMM_DEFER_LAYERNORM, ln.out, x, (size_t)ln.N * ln.C, 1) != LOWP_OFFER_DEFERRED) return false;
    layernorm_forward_stats(ln.residual, ln.mean, ln.rstd, ln.inp1, ln.inp2, ln.N, ln.C, ctx->stream);
    s->ln_job = ln;
    return true;
}

// The source of the deferred LayerNorm d (the job lowp_layernorm took); store: where the producer also writes the BF16
// out, or NULL.
static inline LowpSrcLayernorm lowp_ln_source(const LowpState* s, const LowpDeferred& d, floatX* store) {
    const GemmLayerNorm& j = s->ln_job;
    return LowpSrcLayernorm{(const floatX*)d.pre, j.mean, j.rstd, j.weight, j.bias, store};
}

// The deferred producer, taken by every forward / backward call (valid for the next call only; the slot is left empty).
static inline LowpDeferred lowp_take_deferred(LowpState* s) { return lowp_handover_take(&s->deferred); }

// Run a deferred producer the call cannot fuse, as the front would have (no amax slot: the quantization
// then takes its own amax). GELU: out = gelu(pre); GELU': out *= gelu'(pre), out holding the BF16 dgrad; LayerNorm:
// out = LayerNorm(pre) by the unfused kernel on the stored input (the same bits as the fused kernel's out; mean and
// rstd are written again, the same values).
static inline void lowp_materialize(const LowpState* s, const LowpDeferred& d, cudaStream_t stream) {
    floatX* out = (floatX*)d.out;
    floatX* pre = (floatX*)d.pre;  // (gemm_gelu_apply's signature; not written)
    if (d.kind == GEMM_DEFER_GELU) {
        gemm_gelu_apply<false>(out, pre, d.n, stream, NULL);
    } else if (d.kind == GEMM_DEFER_DGELU) {
        gemm_dgelu_apply(out, pre, d.n, stream, NULL);
    } else if (d.kind == GEMM_DEFER_LAYERNORM) {
        const GemmLayerNorm& j = s->ln_job;
        layernorm_forward(out, j.mean, j.rstd, pre, j.weight, j.bias, j.N, j.C, stream);
    }
}

// Whether this call quantizes the deferred producer d of its operand x (n values, role of layer L) itself:
// the same tensor, transposed codes wanted, and a scale that does not need the tensor first (the bootstrap
// use of delayed scaling takes an amax pass over it).
static inline bool lowp_fusable(const LowpState* s, const LowpLayer* L, const LowpDeferred& d, GemmDefer kind, const floatX* x,
                                size_t n, int role, bool transposed) {
    return d.kind == kind && d.out == x && d.n == n && transposed &&
           !lowp_handover_bootstrap(s->opt.delayed > 0 && s->ctx->training, L->uses[role]);
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

// Whether FP8 GEMMs take a layer of this shape: C and OC multiples of 16 (and of the --tcfp-block size).
static inline bool lowp_shape_ok(const LowpState* s, int C, int OC) {
    const int b = s->opt.block;
    return C % 16 == 0 && OC % 16 == 0 && (!b || (C % b == 0 && OC % b == 0));
}

static inline bool lowp_eligible(const GemmContext* ctx, LowpState* s, LowpLayer* L, const floatX* weight, int N, int C, int OC) {
    if (ctx->optimizer_steps < s->opt.warmup) return false;
    if (weight == s->lm_head_weight && !s->opt.lm_head) return false;
    const bool shape_ok = lowp_shape_ok(s, C, OC);
    if (!shape_ok && !L->warned) {  // a property of the layer: once per layer
        L->warned = 1;
        s->declined_shape++;
        printf("note: %s: a linear layer (C=%d OC=%d) runs in BF16: FP8 GEMMs need multiples of 16%s\n", s->backend.name, C, OC,
               s->opt.block ? " and C, OC multiples of the --tcfp-block size" : "");
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
