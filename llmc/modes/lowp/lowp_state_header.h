/*
 * lowp_state_header.h - the header of the FP8 / TCFP-12 backend's checkpoint file lowp_<step>[_rank<r>].bin
 * (llmc/modes/lowp/lowp_state.cuh writes and reads the rest; doc/FORMATS.md "Low-precision GEMM state"), in plain C so
 * that dev/test/test_lowp_state_header.c checks it on the host.
 *
 * Little-endian int64 words: {magic 0x4C4F5750 ("LOWP"), version 2, mode (1 FP8, 2 TCFP-12), --tcfp-block, --tcfp-ef,
 * --fp8-delayed, weight_version, optimizer_steps, num_layers, --fp8-fast-accum, --fp8-lm-head, 0 ...}. Version 1 (before
 * 2026-11-28, when the FP8 build's defaults became delayed scaling, forward fast accumulation and the LM head in FP8) had
 * 0 in words 9 and 10: they were not recorded, so they are not checked for it.
 */
#ifndef LLMC_LOWP_STATE_HEADER_H
#define LLMC_LOWP_STATE_HEADER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LOWP_STATE_MAGIC 0x4C4F5750LL
#define LOWP_STATE_VERSION 2LL  // 2: words 9, 10 (--fp8-fast-accum, --fp8-lm-head)
#define LOWP_STATE_HEADER_WORDS 16

// The knobs a resumed run must share with the run that wrote the file, and the build's mode (1 FP8, 2 TCFP-12).
typedef struct LowpStateKnobs {
    int mode;
    int block, error_feedback, delayed, fast_accum, lm_head;
} LowpStateKnobs;

static inline const char* lowp_state_mode_name(int64_t mode) { return mode == 2 ? "TCFP-12" : "FP8"; }

// The header of a file written now: h[LOWP_STATE_HEADER_WORDS] (unused words 0).
static inline void lowp_state_header_fill(int64_t* h, const LowpStateKnobs* k, int64_t weight_version, int64_t optimizer_steps,
                                          int64_t num_layers) {
    for (int i = 0; i < LOWP_STATE_HEADER_WORDS; i++) h[i] = 0;
    h[0] = LOWP_STATE_MAGIC;
    h[1] = LOWP_STATE_VERSION;
    h[2] = k->mode;
    h[3] = k->block;
    h[4] = k->error_feedback;
    h[5] = k->delayed;
    h[6] = weight_version;
    h[7] = optimizer_steps;
    h[8] = num_layers;
    h[9] = k->fast_accum;
    h[10] = k->lm_head;
}

// Whether header h (read from `path`) can be resumed by a run with knobs `run` and at most max_layers layers: 0, or 1
// with a one-line message in err (path first, then what differs and what to do; no "error: " prefix). Checks, in order:
// magic, version (1 or LOWP_STATE_VERSION), the build's mode, --tcfp-block, --tcfp-ef, --fp8-delayed, then (version 2)
// --fp8-fast-accum and --fp8-lm-head, then weight_version >= 1, optimizer_steps >= 0, 0 <= num_layers <= max_layers.
static inline int lowp_state_header_check(const int64_t* h, const LowpStateKnobs* run, int max_layers, const char* path, char* err,
                                          size_t n) {
    if (h[0] != LOWP_STATE_MAGIC) return snprintf(err, n, "%s: bad magic: not a low-precision GEMM state file", path), 1;
    if (h[1] != 1 && h[1] != LOWP_STATE_VERSION)
        return snprintf(err, n, "%s: unsupported version %lld (expected 1 or %lld)", path, (long long)h[1], LOWP_STATE_VERSION), 1;
    if (h[2] != run->mode)
        return snprintf(err, n, "%s: written by the %s build, this is %s", path, lowp_state_mode_name(h[2]), lowp_state_mode_name(run->mode)), 1;
    const int recorded = h[1] >= 2;
    const struct { const char* flag; int64_t file, run; int recorded; } opts[] = {
        {"--tcfp-block", h[3], run->block, 1},          {"--tcfp-ef", h[4], run->error_feedback, 1},
        {"--fp8-delayed", h[5], run->delayed, 1},        {"--fp8-fast-accum", h[9], run->fast_accum, recorded},
        {"--fp8-lm-head", h[10], run->lm_head, recorded}};
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
        if (opts[i].recorded && opts[i].file != opts[i].run)
            return snprintf(err, n, "%s: written with %s %lld, this run has %s %lld (resume with the same value)", path, opts[i].flag,
                            (long long)opts[i].file, opts[i].flag, (long long)opts[i].run), 1;
    if (h[6] < 1 || h[7] < 0 || h[8] < 0 || h[8] > max_layers) return snprintf(err, n, "%s: header fields out of range", path), 1;
    return 0;
}

#endif  // LLMC_LOWP_STATE_HEADER_H
