// tcast_classifier.cuh - the training step's fused classifier with the boundary-site casts of the LM head's output
// (issue 26, doc/TCAST.md 5.5): matmul_out (the LM head is a linear layer), then logits (the values the softmax
// reads), both along the rows of the (N, Vp) logits. As passes they read and write the whole tensor twice (N = 65536,
// Vp = 50304 at d12 B=64: 6.6 GB each way, ~11 ms a step at the cast kernels' rate) right before the classifier reads
// it once more; the classifier already copies each row into shared memory (fused_classifier.cuh, STAGED) and reads
// it there twice, so here both casts act on that staged copy (its RowCast), between the copy and the softmax's
// first pass: no bytes move for them.
//
// The bits are the passes' (doc/TCAST.md 5.3, 5.5): the same BF16 values enter the same cast code (the row sinks'
// tcast_lanes_cast, tcast_row_sinks.cuh: the row cast kernel's quantizers and groups) with the same flat indices
// r * Vp + c and seeds, the first cast's result is rounded to BF16 before the second reads it (the pass stores it),
// and the groups are the pass's: tiles along the row aligned at column 0, the padding columns [V, Vp) included as
// the LM head's GEMM wrote them. The classifier reads columns < V only, so the row transform stages and casts the
// groups that hold a column < V: columns [0, roundup(V, tile)) for the larger tile of the two (the packet, 8, for
// unscaled types), which lies inside [0, Vp) because every tile divides Vp (tcast_cast_shape_ok). The cast row is
// not written back: the classifier overwrites the logits with dlogits, which are then all the step reads.
//
// A warp casts 32 consecutive packets (256 columns) at a time, lane l holding packet 32 j + l: a tile of 8 .. 256
// elements is tile / 8 consecutive lanes (merged with shuffles), 2 or 4 lie inside a packet. What takes the passes
// instead (tcast_classifier_fusable): types the row sinks do not take (the general quantizer, channel and per-tensor
// scales, M:N sparsity, tiles of 512 and 1024), --cast-stats steps (a counted cast is the stand-alone kernel's), and
// rows too wide for shared memory (the classifier's unstaged kernel). Quantizer: TcastQRne when both casts that are
// on take the RNE path, else TcastQExp for both (exact for every fast type: tcast_cast_path's two non-general paths
// give the same bits); two classifier kernels in all.
#pragma once

#include <stdint.h>
#include <string.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/fused_classifier.cuh"
#include "llmc/kernels/tcast/tcast_cast.cuh"       // tcast_cast, tcast_cast_path, tcast_cast_shape_ok
#include "llmc/kernels/tcast/tcast_row_sinks.cuh"  // tcast_lanes_cast, TcastLaneCast
#include "llmc/kernels/tcast/tcast_producers.cuh"  // TcastSiteCast, tcast_row_sink_castable

// The classifier's row transform (fused_classifier.cuh, RowCast contract): cast a (matmul_out), then cast b
// (logits), each on or off, on packets [0, stage_packets) of the staged row, in place.
template <class Q>
struct TcastLogitsRowCast {
    static constexpr bool kOn = true;
    TcastLaneCast a, b;  // tile: 2 .. 256 along the row, or -1 (unscaled or a fixed scale)
    int stage_packets;   // roundup(V, the larger tile, at least 8) / 8
    __device__ __forceinline__ void apply(floatX* srow, size_t row, int Vp) const {
        const int lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
        const size_t row0 = row * (size_t)Vp;  // flat index of the row's column 0 (the seeds' element index)
        for (int p0 = (threadIdx.x >> 5) * 32; p0 < stage_packets; p0 += nwarps * 32) {  // warp-uniform: shuffles inside
            const int i = p0 + lane;
            const bool valid = i < stage_packets;  // else zeros: no group holds both (stage_packets ends on a tile)
            uint4* sp = reinterpret_cast<uint4*>(srow + (size_t)i * 8);
            uint32_t v[8];
            tcast_unpack8(valid ? *sp : make_uint4(0u, 0u, 0u, 0u), v);
            const size_t e0 = row0 + (size_t)i * 8;
            if (a.on) {
                tcast_lanes_cast<Q>(a.k, a.tile, v, valid, e0);
                if (b.on) tcast_unpack8(tcast_pack8(v), v);  // the BF16 values the matmul_out pass stores
            }
            if (b.on) tcast_lanes_cast<Q>(b.k, b.tile, v, valid, e0);
            if (valid) *sp = tcast_pack8(v);
        }
    }
};

// Whether tcast_classifier_sites runs the casts inside the classifier: at least one of a (matmul_out) and b (logits)
// on, every one that is on a type the row sinks take without statistics (tcast_row_sink_castable: the exponent or RNE
// quantizer, tiles of 2 .. 256 or none), and a row of Vp that the classifier stages (fused_classifier_staged).
static inline bool tcast_classifier_fusable(const TcastSiteCast& a, const TcastSiteCast& b, int Vp) {
    if (!a.dt && !b.dt) return false;
    const TcastSiteCast* c[2] = {&a, &b};
    for (int i = 0; i < 2; i++)
        if (c[i]->dt && !tcast_row_sink_castable(*c[i]->dt, c[i]->stats != NULL)) return false;
    return fused_classifier_staged(Vp);
}

// A cast of the row transform: off, or dt's tile (-1: none) and kernel constants with seed.
static inline TcastLaneCast tcast_classifier_lane_cast_(const TcastSiteCast& c) {
    TcastLaneCast l;
    memset(&l, 0, sizeof(l));
    l.tile = -1;
    if (!c.dt) return l;
    l.on = 1;
    l.tile = c.dt->has_scale ? c.dt->scale.tile : -1;
    l.k = tcast_kernel_args(*c.dt, c.seed);
    return l;
}

// The packets of a row the transform stages and casts: the groups of both casts that hold a column < V (see the top).
static inline int tcast_classifier_stage_packets(const TcastSiteCast& a, const TcastSiteCast& b, int V) {
    int span = 8;
    const TcastSiteCast* c[2] = {&a, &b};
    for (int i = 0; i < 2; i++)
        if (c[i]->dt && c[i]->dt->has_scale && c[i]->dt->scale.tile > span) span = c[i]->dt->scale.tile;
    return (V + span - 1) / span * (span / 8);
}

// fused_classifier(logits, losses, dloss, targets, B, T, V, Vp, write_dlogits = true) on the logits after the boundary
// casts a (matmul_out) and b (logits) of the (B*T, Vp) tensor along its rows, each on (dt) or off, with its seed and
// statistics: the losses and dlogits (in place over logits) of
//   tcast_cast(logits, logits, B*T, Vp, 1, *a.dt, a.seed, a.stats, ctx)    (a on)
//   tcast_cast(logits, logits, B*T, Vp, 1, *b.dt, b.seed, b.stats, ctx)    (b on)
//   fused_classifier(logits, ..., true)
// bit for bit; those three launches run instead where tcast_classifier_fusable says no, else one kernel (the casts on
// the staged rows; the logits are never stored cast). Requirements and errors (exit): those of fused_classifier and
// tcast_cast's shape checks for every cast that is on. ctx: tcast_cast's scratch (channel / per-tensor types).
static inline void tcast_classifier_sites(floatX* logits, float* losses, float dloss, const int* targets, int B, int T, int V, int Vp,
                                          const TcastSiteCast& a, const TcastSiteCast& b, TcastCastContext* ctx, cudaStream_t stream) {
    const int N = B * T;
    char err[256];
    const TcastSiteCast* c[2] = {&a, &b};
    for (int i = 0; i < 2; i++)
        if (c[i]->dt && tcast_cast_shape_ok(*c[i]->dt, N, Vp, 1, err, sizeof(err)) != 0) tcast_cast_die_(err);
    if (!tcast_classifier_fusable(a, b, Vp)) {
        for (int i = 0; i < 2; i++)
            if (c[i]->dt) tcast_cast(logits, logits, N, Vp, 1, *c[i]->dt, c[i]->seed, c[i]->stats, ctx, stream);
        fused_classifier(logits, losses, dloss, targets, B, T, V, Vp, true, stream);
        return;
    }
    const TcastLaneCast la = tcast_classifier_lane_cast_(a), lb = tcast_classifier_lane_cast_(b);
    const int stage = tcast_classifier_stage_packets(a, b, V);
    const bool rne = (!a.dt || tcast_cast_path(*a.dt, false) == TCAST_PATH_RNE) && (!b.dt || tcast_cast_path(*b.dt, false) == TCAST_PATH_RNE);
    if (rne) fused_classifier_row_cast(TcastLogitsRowCast<TcastQRne>{la, lb, stage}, logits, losses, dloss, targets, B, T, V, Vp, stream);
    else fused_classifier_row_cast(TcastLogitsRowCast<TcastQExp>{la, lb, stage}, logits, losses, dloss, targets, B, T, V, Vp, stream);
}
