/*
 * debug_state.h - reference activations/gradients for testing (magic 20240327, versions 2 and 3).
 *
 * Layout (doc/FORMATS.md): 256 int32 header words
 *   0 magic, 1 version, 2 B, 3 T, and for version 3: 4 V, 5 Vp, 6 S (reference steps),
 *   7..12 float32 bits of lr, beta1, beta2, eps, weight decay, grad clip, 13 bf16-weights flag;
 * then x (B*T int32), y (B*T int32), logits (B*T*V float32), loss (1 float32),
 * grads (nparams float32, checkpoint order), and for version 3 S float32 step losses.
 */
#ifndef LLMC_DEBUG_STATE_H
#define LLMC_DEBUG_STATE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "llmc/model/gpt2_config.h"
#include "llmc/core/utils.h"

#define DEBUG_STATE_MAGIC 20240327

typedef struct {
    int B, T, V, Vp, num_steps;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;  // version 3 only (0 for version 2)
    int bf16_weights;                                      // 1: reference used bf16-rounded weights
    int sf16_mode;                                         // word 14: 0 none, 1 Q1.15 boundaries, 2 + Q1.31 (true forward), 3 TensorCast (the test plan of gpt2_reference.py)
    int lowp_mode;                                         // word 15: 0 none, 1 FP8 GEMMs, 2 TCFP-12 GEMMs (gpt2_reference.py --lowp-states)
    int* x;              // B*T input tokens
    int* y;              // B*T target tokens
    float* logits;       // B*T*V (unpadded vocabulary)
    float loss;          // mean cross-entropy over B*T
    float* grads;        // gpt2_num_parameters(cfg), checkpoint order
    float* step_losses;  // num_steps losses (NULL when num_steps == 0)
} DebugState;

// Internal: float from its bit pattern stored in a header word.
static inline float debug_state_float_(int32_t w) {
    float f;
    memcpy(&f, &w, sizeof(f));
    return f;
}

// Reads a debug state written for the model cfg (a valid config, e.g. from the checkpoint).
// Validates magic, version (2 or 3), B, T > 0, (v3) V == cfg->vocab_size, Vp ==
// cfg->padded_vocab_size, S >= 0, bf16 flag 0/1, mode words 14 (0..3) and 15 (0..2), the exact file length, and that every x/y
// token is in [0, V). Version 2 files get num_steps = 0, V/Vp from cfg and zero optimizer
// settings. Dies naming path and field. Free with debug_state_free.
static inline void debug_state_read(const char* path, const GPT2Config* cfg, DebugState* s) {
    memset(s, 0, sizeof(*s));
    FILE* f = fopen_check(path, "rb");
    size_t size = file_size_check(f, path);
    if (size < 1024) die("%s: header: truncated (file is %zu bytes, the header alone is 1024)", path, size);
    int32_t h[256];
    fread_check(h, sizeof(int32_t), 256, f, path, "debug state header");
    if (h[0] != DEBUG_STATE_MAGIC) {
        die("%s: bad magic %d (expected %d): not a debug state file", path, h[0], DEBUG_STATE_MAGIC);
    }
    int version = h[1];
    if (version != 2 && version != 3) die("%s: version: unsupported debug state version %d (expected 2 or 3)", path, version);
    if (h[2] <= 0) die("%s: B: must be > 0 (got %d)", path, h[2]);
    if (h[3] <= 0) die("%s: T: must be > 0 (got %d)", path, h[3]);
    s->B = h[2];
    s->T = h[3];
    if (version == 3) {
        if (h[4] != cfg->vocab_size) die("%s: V: %d does not match the model's vocab_size %d", path, h[4], cfg->vocab_size);
        if (h[5] != cfg->padded_vocab_size) {
            die("%s: Vp: %d does not match the model's padded_vocab_size %d", path, h[5], cfg->padded_vocab_size);
        }
        if (h[6] < 0) die("%s: number of steps: must be >= 0 (got %d)", path, h[6]);
        if (h[13] != 0 && h[13] != 1) die("%s: bf16 flag: must be 0 or 1 (got %d)", path, h[13]);
        if (h[14] < 0 || h[14] > 3) die("%s: mode (header word 14): must be 0, 1, 2 (SF16) or 3 (TensorCast) (got %d)", path, h[14]);
        if (h[15] < 0 || h[15] > 2) die("%s: GEMM recipe (header word 15): must be 0, 1 (FP8) or 2 (TCFP-12) (got %d)", path, h[15]);
        s->V = h[4];
        s->Vp = h[5];
        s->num_steps = h[6];
        s->lr = debug_state_float_(h[7]);
        s->beta1 = debug_state_float_(h[8]);
        s->beta2 = debug_state_float_(h[9]);
        s->eps = debug_state_float_(h[10]);
        s->weight_decay = debug_state_float_(h[11]);
        s->grad_clip = debug_state_float_(h[12]);
        s->bf16_weights = h[13];
        s->sf16_mode = h[14];
        s->lowp_mode = h[15];
    } else {
        s->V = cfg->vocab_size;
        s->Vp = cfg->padded_vocab_size;
    }
    size_t BT = (size_t)s->B * (size_t)s->T;
    size_t nparams = gpt2_num_parameters(cfg);
    double approx = 1024.0 + 4.0 * ((double)BT * (2.0 + s->V) + 1.0 + (double)nparams + s->num_steps);
    if (approx > (double)size + 1e6) {  // also keeps the exact size_t arithmetic below from overflowing
        die("%s: file length: %zu bytes, but the header (B=%d T=%d V=%d S=%d) needs about %.4g: truncated",
            path, size, s->B, s->T, s->V, s->num_steps, approx);
    }
    size_t words = 2 * BT + BT * (size_t)s->V + 1 + nparams + (size_t)s->num_steps;
    size_t expected = 1024 + 4 * words;
    if (size != expected) {
        die("%s: file length: %zu bytes, but the header (B=%d T=%d V=%d S=%d, %zu parameters) says %zu: %s",
            path, size, s->B, s->T, s->V, s->num_steps, nparams, expected,
            size < expected ? "truncated" : "trailing bytes");
    }
    s->x = (int*)malloc_check(BT * sizeof(int));
    s->y = (int*)malloc_check(BT * sizeof(int));
    s->logits = (float*)malloc_check(BT * (size_t)s->V * sizeof(float));
    s->grads = (float*)malloc_check(nparams * sizeof(float));
    fread_check(s->x, sizeof(int), BT, f, path, "inputs x");
    fread_check(s->y, sizeof(int), BT, f, path, "targets y");
    fread_check(s->logits, sizeof(float), BT * (size_t)s->V, f, path, "logits");
    fread_check(&s->loss, sizeof(float), 1, f, path, "loss");
    fread_check(s->grads, sizeof(float), nparams, f, path, "gradients");
    if (s->num_steps > 0) {
        s->step_losses = (float*)malloc_check((size_t)s->num_steps * sizeof(float));
        fread_check(s->step_losses, sizeof(float), (size_t)s->num_steps, f, path, "step losses");
    }
    fclose_check(f, path);
    for (size_t i = 0; i < BT; i++) {
        if (s->x[i] < 0 || s->x[i] >= s->V) die("%s: x[%zu]: token %d outside [0, %d)", path, i, s->x[i], s->V);
        if (s->y[i] < 0 || s->y[i] >= s->V) die("%s: y[%zu]: token %d outside [0, %d)", path, i, s->y[i], s->V);
    }
}

// Frees the arrays of a debug state; the struct is zeroed.
static inline void debug_state_free(DebugState* s) {
    free(s->x);
    free(s->y);
    free(s->logits);
    free(s->grads);
    free(s->step_losses);
    memset(s, 0, sizeof(*s));
}

#endif // LLMC_DEBUG_STATE_H
