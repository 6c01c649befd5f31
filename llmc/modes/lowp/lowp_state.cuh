// lowp_state.cuh - the FP8 / TCFP-12 backend's checkpoint file, lowp_<step>[_rank<r>].bin beside each
// state file (llmc/modes/lowp/gemm_lowp.cuh holds the state; doc/FORMATS.md "Low-precision GEMM state").
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/core/utils.h"
#include "llmc/modes/lowp/gemm_lowp.cuh"
#include "llmc/modes/lowp/lowp_state_header.h"

// ------------------------------------------------------------------------------------------------
// Checkpoint state (doc/FORMATS.md, "Low-precision GEMM state"): what a resumed FP8 / TCFP-12 run needs
// to continue bit-exactly: the weight version and optimizer-step count (warm-up, SRR seeds), and per
// linear layer its error-feedback buffer, delayed-scaling histories (ring position, pending amax, use
// count) and, when they match the current weights, the quantized weights and their scales (they were
// made from the error-feedback state before it advanced; remaking them would apply it twice).
// Layout, little-endian: int64 header[16] (llmc/modes/lowp/lowp_state_header.h: magic, version 2, mode, the knobs a
// resume must share, weight_version, optimizer_steps, num_layers; version 1 is still read); per layer int64
// rec[12] = {weight offset in parameters, OC, C, codes_current, uses[3], has_ef, has_delayed, 0...}, then
// f (3 x 12 floats), then if codes_current: w_hi, wt_hi (OC*C bytes each), TCFP-12 also w_lo, wt_lo and with
// block scaling the scale arrays (lowp_state_arrays); then ef (OC*C floats) if has_ef; then hist (3H floats), pos (3 int32),
// pending (3 uint32) if has_delayed. Written to path.tmp, then renamed.

// One device array <-> file, through a host buffer. write != 0: device -> file; else file -> device.
static inline void lowp_state_io(FILE* f, const char* path, void* dev, size_t bytes, int write, const char* what) {
    if (bytes == 0) return;
    void* h = malloc_check(bytes);
    if (write) {
        cudaCheck(cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost));
        fwrite_check(h, 1, bytes, f, path);
    } else {
        fread_check(h, 1, bytes, f, path, what);
        cudaCheck(cudaMemcpy(dev, h, bytes, cudaMemcpyHostToDevice));
    }
    free(h);
}

// The arrays of one layer, in file order (codes only when `codes`).
template <typename F>
static inline void lowp_state_arrays(const LowpState* s, LowpLayer* L, bool codes, F&& io) {
    const size_t n = (size_t)L->OC * L->C;
    io(L->f, 3 * LOWP_TRIPLE * sizeof(float), "scales");
    if (codes) {
        io(L->w_hi, n, "w_hi");
        io(L->wt_hi, n, "wt_hi");
        if (lowp_is_tcfp()) {
            io(L->w_lo, n, "w_lo");
            io(L->wt_lo, n, "wt_lo");
            if (s->opt.block) {
                const int b = s->opt.block;
                const size_t nt = fp8_block_layout_count(lowp_weight_tiles(b, L->OC, L->C)) * sizeof(float);
                const size_t na = fp8_block_layout_count(lowp_weight_a_layout(b, L->OC, L->C)) * sizeof(float);
                const size_t nat = fp8_block_layout_count(lowp_weight_a_layout(b, L->C, L->OC)) * sizeof(float);
                io(L->blk_s_hi, nt, "tile scales");
                io(L->blk_s_lo, nt, "tile scales");
                io(L->blk_inv_hi, na, "block scales");
                io(L->blk_inv_lo, na, "block scales");
                io(L->blk_inv_hi_t, nat, "block scales");
                io(L->blk_inv_lo_t, nat, "block scales");
                if (b != 128) {
                    io(L->tile_inv_hi, nt, "tile scales");
                    io(L->tile_inv_lo, nt, "tile scales");
                }
            }
        }
    }
    if (L->ef) io(L->ef, n * sizeof(float), "error feedback");
    if (L->hist) {
        io(L->hist, 3 * (size_t)s->opt.delayed * sizeof(float), "amax history");
        io(L->pos, 3 * sizeof(int), "history position");
        io(L->pending, 3 * sizeof(uint32_t), "pending amax");
    }
}

// The knobs the state file records (the resumed run must share them) and this build's mode.
static inline LowpStateKnobs lowp_state_knobs(const LowpState* s) {
    const LowpStateKnobs k = {lowp_is_tcfp() ? 2 : 1, s->opt.block, s->opt.error_feedback, s->opt.delayed, s->opt.fast_accum, s->opt.lm_head};
    return k;
}

// Write the backend's state of ctx to path (atomically). No-op when no backend is attached.
static inline void gemm_lowp_state_write(GemmContext* ctx, const char* path) {
    if (!ctx->lowp) return;
    LowpState* s = lowp_state(ctx);
    cudaCheck(cudaStreamSynchronize(ctx->stream));
    const LowpStateKnobs k = lowp_state_knobs(s);
    int64_t h[LOWP_STATE_HEADER_WORDS];
    lowp_state_header_fill(h, &k, (int64_t)ctx->weight_version, ctx->optimizer_steps, s->num_layers);
    FILE* f = atomic_open(path);
    fwrite_check(h, sizeof(int64_t), LOWP_STATE_HEADER_WORDS, f, path);
    for (int i = 0; i < s->num_layers; i++) {
        LowpLayer* L = &s->layers[i];
        const bool codes = L->version == ctx->weight_version;
        int64_t rec[12] = {(int64_t)(L->weight - s->params_base), L->OC, L->C, codes, L->uses[0], L->uses[1], L->uses[2],
                           L->ef != NULL, L->hist != NULL};
        fwrite_check(rec, sizeof(int64_t), 12, f, path);
        lowp_state_arrays(s, L, codes, [&](void* dev, size_t bytes, const char* what) { lowp_state_io(f, path, dev, bytes, 1, what); });
    }
    atomic_commit(f, path);
}

// Restore what gemm_lowp_state_write wrote (before the first forward of the resumed run). Dies naming the
// file and the field on a header lowp_state_header_check refuses (magic, version, the build, a knob that differs from
// this run's), a layer that does not fit the model, or a short / long file. A version 1 file (written before the FP8
// build's defaults became delayed scaling, forward fast accumulation and the LM head in FP8) did not record
// --fp8-fast-accum and --fp8-lm-head: a note says which values this run uses.
static inline void gemm_lowp_state_read(GemmContext* ctx, const char* path, size_t num_parameters) {
    if (!ctx->lowp) return;
    LowpState* s = lowp_state(ctx);
    FILE* f = fopen_check(path, "rb");
    const size_t size = file_size_check(f, path);
    if (size < LOWP_STATE_HEADER_WORDS * sizeof(int64_t)) die("%s: truncated header (%zu bytes)", path, size);
    int64_t h[LOWP_STATE_HEADER_WORDS];
    fread_check(h, sizeof(int64_t), LOWP_STATE_HEADER_WORDS, f, path, "header");
    const LowpStateKnobs k = lowp_state_knobs(s);
    char err[512];
    if (lowp_state_header_check(h, &k, LOWP_MAX_LAYERS, path, err, sizeof(err))) die("%s", err);
    if (h[1] == 1)
        printf("note: %s: a version 1 state, which does not record --fp8-fast-accum and --fp8-lm-head; this run uses %d and %d "
               "(the FP8 build's defaults before 2026-11-28 were 0 and 0)\n", path, s->opt.fast_accum, s->opt.lm_head);
    ctx->weight_version = (unsigned long long)h[6];
    ctx->optimizer_steps = (int)h[7];
    for (int64_t i = 0; i < h[8]; i++) {
        int64_t rec[12];
        fread_check(rec, sizeof(int64_t), 12, f, path, "layer record");
        const int64_t off = rec[0], OC = rec[1], C = rec[2];
        if (off < 0 || OC < 1 || C < 1 || (size_t)(off + OC * C) > num_parameters)
            die("%s: layer %lld (offset %lld, %lld x %lld) does not fit the model's %zu parameters", path, (long long)i, (long long)off,
                (long long)OC, (long long)C, num_parameters);
        LowpLayer* L = lowp_layer(s, s->params_base + off, (int)OC, (int)C);
        if ((rec[7] != 0) != (L->ef != NULL) || (rec[8] != 0) != (L->hist != NULL)) die("%s: layer %lld: state arrays differ from this run's options", path, (long long)i);
        for (int r = 0; r < 3; r++) L->uses[r] = rec[4 + r];
        const bool codes = rec[3] != 0;
        L->version = codes ? ctx->weight_version : 0;
        lowp_state_arrays(s, L, codes, [&](void* dev, size_t bytes, const char* what) { lowp_state_io(f, path, dev, bytes, 0, what); });
    }
    const long pos = ftell(f);
    if (pos < 0 || (size_t)pos != size) die("%s: %zu bytes, but the layers end at byte %ld", path, size, pos);
    fclose_check(f, path);
}
