/*
 * lowp_handover.h - the FP8 / TCFP-12 backend's hand-over of an elementwise producer from one GEMM call to the next
 * (llmc/modes/lowp/gemm_lowp.cuh), in plain C so that dev/test/test_lowp_handover.c drives it on the host.
 *
 * The GEMM front offers the producer of the next call's operand right after a call (GemmLowpBackend::defer): the GELU
 * of the fc output, the fcproj forward's input; the GELU' of the fcproj dgrad, the fc backward's dout (and, offered through
 * the backend's layernorm hook with --fp8-producers 2, a LayerNorm output, the qkv / fc forward's input). Taken over, it is
 * either computed by the next call inside its quantization of that operand (--fp8-producers 1), or, with --fp8-cutlass 1,
 * already *made*: the producing GEMM's epilogue wrote the consumer's codes itself (llmc/modes/lowp/lowp_cutlass.cuh) and
 * the offer only confirms it. The hand-over is valid for the next GEMM call only: every forward / backward call takes
 * it, and taking leaves nothing behind (lowp_handover_take). It is not a checkpoint item: no hand-over spans two calls,
 * so none spans a step.
 *
 * What is compared is identity (the tensor's and the consumer layer's addresses, the value count, the kind); the
 * pointers are never dereferenced here. kind: a GemmDefer (llmc/kernels/gemm/gemm_context.cuh), 0 = nothing.
 */
#ifndef LLMC_LOWP_HANDOVER_H
#define LLMC_LOWP_HANDOVER_H

#include <stddef.h>

// A producer taken over for the next GEMM call. made: the producing GEMM's epilogue already wrote the codes of `out`
// for layer `consumer` (GELU: plain codes in g8, transposed in the consumer's xt, scale in its X triple; GELU': plain in
// a8, transposed in gt8, scale in its dY triple, the bias gradient's column sums in colpart, colpart_rows rows).
// advanced: made under delayed scaling in a training pass, so the producer took the consumer's scale step (its amax
// history moved on, and for GELU' the BF16 product was not stored); otherwise made under current scaling, where the
// BF16 value can still be computed (from Z for GELU, from the stored dgrad for GELU').
typedef struct LowpDeferred {
    int kind;              // GemmDefer; 0 (GEMM_DEFER_NONE): nothing handed over
    void* out;             // the producer's output tensor (floatX), the next call's operand
    const void* pre;       // the pre-activation Z it is computed from (floatX)
    size_t n;              // values of out
    int made;
    const void* consumer;  // made: the consuming layer (LowpLayer)
    int colpart_rows;      // made GELU': rows of the column-sum partials
    int advanced;
} LowpDeferred;

// The empty hand-over.
static inline LowpDeferred lowp_handover_none(void) {
    const LowpDeferred d = {0, NULL, NULL, 0, 0, NULL, 0, 0};
    return d;
}

// The hand-over for this call: returned, and the slot left empty, all of it. (Clearing the kind alone left `made` and
// `advanced` behind, so the call after the consumer saw codes made for somebody else: harmless under current scaling,
// where it fell back to computing nothing; under delayed scaling the run stopped at its first fused training pass, and
// an offer after an evaluation forward's made hand-over was refused as "another" producer.)
static inline LowpDeferred lowp_handover_take(LowpDeferred* slot) {
    const LowpDeferred d = *slot;
    *slot = lowp_handover_none();
    return d;
}

// The producing call made the codes of out (n values of producer kind, from pre) for layer consumer in its epilogue;
// the front's offer right after it confirms the hand-over (lowp_handover_offer: LOWP_OFFER_MADE).
static inline void lowp_handover_make(LowpDeferred* slot, int kind, void* out, const void* pre, size_t n, const void* consumer,
                                      int colpart_rows, int advanced) {
    const LowpDeferred d = {kind, out, pre, n, 1, consumer, colpart_rows, advanced};
    *slot = d;
}

// What the backend answers the front's offer of producer kind of out (n values, from pre), made right after a call.
typedef enum {
    LOWP_OFFER_DECLINED = 0,  // not taken: the front runs the producer now
    LOWP_OFFER_DEFERRED,      // taken: the next call computes it (inside its quantization, or first with the front's kernel)
    LOWP_OFFER_MADE,          // the call before already made it: taken
    LOWP_OFFER_OTHER          // the call before made another producer's codes: the caller stops the run (a front bug)
} LowpOffer;

// The offer: if the slot holds a made hand-over, the offer must be that very producer (MADE, else OTHER); otherwise it is
// recorded when the backend can take producers (can_take) and the slot is empty (DEFERRED), else DECLINED.
static inline LowpOffer lowp_handover_offer(LowpDeferred* slot, int kind, void* out, const void* pre, size_t n, int can_take) {
    if (slot->made)
        return slot->kind == kind && slot->out == out && slot->pre == pre && slot->n == n ? LOWP_OFFER_MADE : LOWP_OFFER_OTHER;
    if (!can_take || slot->kind != 0) return LOWP_OFFER_DECLINED;  // (a full slot: never, every call takes it)
    const LowpDeferred d = {kind, out, pre, n, 0, NULL, 0, 0};
    *slot = d;
    return LOWP_OFFER_DEFERRED;
}

// What a call does with the hand-over d it took.
typedef enum {
    LOWP_USE_NONE = 0,  // nothing handed over
    LOWP_USE_MADE,      // the codes were made for this call: it uses them instead of quantizing its operand
    LOWP_USE_OFFERED,   // a producer to compute: inside this call's quantization when it can (lowp_fusable), else first
    LOWP_USE_UNMADE,    // codes made for another call under current scaling: the BF16 value is computed (lowp_materialize)
    LOWP_USE_STOP       // codes made for another call under delayed scaling: the consumer's history already moved; stop
} LowpUse;

// The call of layer `layer` on operand x (n values) with the hand-over d; takes_codes: the call runs FP8 GEMMs on this
// backend and can use codes in the made layout (a forward: one that keeps the transposed copy for its FP8 wgrad).
static inline LowpUse lowp_handover_use(const LowpDeferred* d, int takes_codes, const void* layer, const void* x, size_t n) {
    if (!d->made) return d->kind != 0 ? LOWP_USE_OFFERED : LOWP_USE_NONE;
    if (takes_codes && layer == d->consumer && x == d->out && n == d->n) return LOWP_USE_MADE;
    return d->advanced ? LOWP_USE_STOP : LOWP_USE_UNMADE;
}

// Whether a use of a consumer's role (X or dY) is its delayed-scaling bootstrap: delayed scaling (delayed_training: in
// a training pass) and no use of that role yet. The bootstrap takes an amax pass over the finished BF16 tensor, so
// neither a producer's epilogue nor the consumer's fused quantization can make those codes.
static inline int lowp_handover_bootstrap(int delayed_training, long long consumer_uses) {
    return delayed_training && consumer_uses == 0;
}

// Whether a producing call makes its consumer's codes in its epilogue (--fp8-cutlass 1): the path is on (cutlass), the
// front will offer the producer (offered), the consumer is linked and runs FP8 GEMMs of that shape (consumer_ok), and
// this use of its role is not the delayed-scaling bootstrap.
static inline int lowp_handover_makes(int cutlass, int offered, int consumer_ok, int delayed_training, long long consumer_uses) {
    return cutlass && offered && consumer_ok && !lowp_handover_bootstrap(delayed_training, consumer_uses);
}

#endif  // LLMC_LOWP_HANDOVER_H
