/*
 * gpt2_config.h - GPT-2 model shape, parameter tensor layout, and model descriptors ("-e d12").
 *
 * Parameter tensors and their order/shapes are fixed by doc/FORMATS.md (model checkpoint).
 */
#ifndef LLMC_GPT2_CONFIG_H
#define LLMC_GPT2_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/core/utils.h"

#define NUM_PARAMETER_TENSORS 16

typedef struct {
    int max_seq_len;        // maxT: rows of wpe
    int vocab_size;         // V: real vocabulary (50257)
    int padded_vocab_size;  // Vp: rows of wte (50304)
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

// Tensor names in checkpoint order (index i matches gpt2_param_sizes' sizes[i]).
static const char* const PARAM_TENSOR_NAMES[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// Element counts of the 16 parameter tensors in checkpoint order (FORMATS.md):
// wte Vp*C, wpe maxT*C, ln1w/ln1b L*C, qkvw L*3C*C, qkvb L*3C, attprojw L*C*C, attprojb L*C,
// ln2w/ln2b L*C, fcw L*4C*C, fcb L*4C, fcprojw L*C*4C, fcprojb L*C, lnfw/lnfb C.
// The config must be valid (gpt2_config_validate); no checks here.
static inline void gpt2_param_sizes(const GPT2Config* c, size_t sizes[NUM_PARAMETER_TENSORS]) {
    size_t Vp = (size_t)c->padded_vocab_size, C = (size_t)c->channels;
    size_t T = (size_t)c->max_seq_len, L = (size_t)c->num_layers;
    sizes[0] = Vp * C;          // wte
    sizes[1] = T * C;           // wpe
    sizes[2] = L * C;           // ln1w
    sizes[3] = L * C;           // ln1b
    sizes[4] = L * 3 * C * C;   // qkvw
    sizes[5] = L * 3 * C;       // qkvb
    sizes[6] = L * C * C;       // attprojw
    sizes[7] = L * C;           // attprojb
    sizes[8] = L * C;           // ln2w
    sizes[9] = L * C;           // ln2b
    sizes[10] = L * 4 * C * C;  // fcw
    sizes[11] = L * 4 * C;      // fcb
    sizes[12] = L * C * 4 * C;  // fcprojw
    sizes[13] = L * C;          // fcprojb
    sizes[14] = C;              // lnfw
    sizes[15] = C;              // lnfb
}

// Total number of parameters (elements, not bytes) of a valid config; d12 = 124,475,904.
static inline size_t gpt2_num_parameters(const GPT2Config* c) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_param_sizes(c, sizes);
    size_t n = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) n += sizes[i];
    return n;
}

// 1 for the 2-D tensors that get weight decay (wte, wpe, qkvw, attprojw, fcw, fcprojw), else 0.
static inline int gpt2_param_is_matrix(int i) {
    return i == 0 || i == 1 || i == 4 || i == 6 || i == 10 || i == 12;
}

// Checks that all sizes are > 0, C % NH == 0, V <= Vp, and that the parameter count is
// plausible (< 2^40, so no size_t overflow anywhere). Dies with
// "error: <source>: <field>: <problem>"; source is a file path or "-e".
static inline void gpt2_config_validate(const GPT2Config* c, const char* source) {
    const int vals[6] = {c->max_seq_len, c->vocab_size, c->padded_vocab_size,
                         c->num_layers, c->num_heads, c->channels};
    const char* const names[6] = {"max_seq_len (maxT)", "vocab_size (V)", "padded_vocab_size (Vp)",
                                  "num_layers (L)", "num_heads (NH)", "channels (C)"};
    for (int i = 0; i < 6; i++) {
        if (vals[i] <= 0) die("%s: %s: must be > 0 (got %d)", source, names[i], vals[i]);
    }
    if (c->channels % c->num_heads != 0) {
        die("%s: channels (C): %d is not divisible by num_heads (NH) %d", source, c->channels, c->num_heads);
    }
    if (c->vocab_size > c->padded_vocab_size) {
        die("%s: padded_vocab_size (Vp): %d is smaller than vocab_size (V) %d", source,
            c->padded_vocab_size, c->vocab_size);
    }
    double C = c->channels, L = c->num_layers;
    double total = ((double)c->padded_vocab_size + c->max_seq_len) * C + L * (12.0 * C * C + 13.0 * C) + 2.0 * C;
    if (total >= 1099511627776.0) {  // 2^40
        die("%s: model too large: %.4g parameters (limit 2^40)", source, total);
    }
}

// Parses a positive decimal int of 1..9 digits at s[0..n); returns 0 if malformed.
static inline int gpt2_descriptor_number_(const char* s, size_t n) {
    if (n == 0 || n > 9) return 0;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

// Fills c from a model descriptor: "d<L>" optionally followed by comma-separated overrides
// "c<C>", "h<NH>", "t<maxT>" (each at most once), e.g. "d12", "d2,c64,h4,t64".
// Defaults: V = 50257, Vp = 50304, maxT = 1024; L in {6,12,24,36,48} takes GPT-2's (C, NH) =
// (384,6), (768,12), (1024,16), (1280,20), (1600,25); any other L gets C = 64*L, NH = L.
// Malformed input dies with "error: -e: model descriptor "<desc>": <the bad part and why>".
static inline void gpt2_config_from_descriptor(GPT2Config* c, const char* desc) {
    if (desc == NULL) desc = "";
    size_t len = strlen(desc);
    size_t first = strcspn(desc, ",");
    if (first == 0 || desc[0] != 'd') {
        die("-e: model descriptor \"%s\": \"%.*s\" must be d<layers>, e.g. d12 or d2,c64,h4,t64",
            desc, (int)first, desc);
    }
    int L = gpt2_descriptor_number_(desc + 1, first - 1);
    if (L <= 0) {
        die("-e: model descriptor \"%s\": \"%.*s\": layers must be an integer in 1..999999999",
            desc, (int)first, desc);
    }
    int C, NH;
    switch (L) {
        case 6: C = 384; NH = 6; break;
        case 12: C = 768; NH = 12; break;
        case 24: C = 1024; NH = 16; break;
        case 36: C = 1280; NH = 20; break;
        case 48: C = 1600; NH = 25; break;
        default:
            if (L > INT_MAX / 64) die("-e: model descriptor \"%s\": d%d: too many layers", desc, L);
            C = 64 * L; NH = L; break;
    }
    int maxT = 1024;
    int seen_c = 0, seen_h = 0, seen_t = 0;
    size_t pos = first;
    while (pos < len) {
        pos++;  // skip ','
        size_t n = strcspn(desc + pos, ",");
        const char* part = desc + pos;
        if (n == 0) die("-e: model descriptor \"%s\": empty part at offset %zu", desc, pos);
        int v = gpt2_descriptor_number_(part + 1, n - 1);
        int* seen = NULL;
        int* dst = NULL;
        switch (part[0]) {
            case 'c': seen = &seen_c; dst = &C; break;
            case 'h': seen = &seen_h; dst = &NH; break;
            case 't': seen = &seen_t; dst = &maxT; break;
            default:
                die("-e: model descriptor \"%s\": unknown part \"%.*s\" (expected c<channels>, h<heads> or t<max_seq_len>)",
                    desc, (int)n, part);
        }
        if (*seen) die("-e: model descriptor \"%s\": \"%.*s\": '%c' given twice", desc, (int)n, part, part[0]);
        if (v <= 0) {
            die("-e: model descriptor \"%s\": \"%.*s\": value must be an integer in 1..999999999", desc, (int)n, part);
        }
        *seen = 1;
        *dst = v;
        pos += n;
    }
    if (C % NH != 0) {
        die("-e: model descriptor \"%s\": channels %d not divisible by heads %d", desc, C, NH);
    }
    c->max_seq_len = maxT;
    c->vocab_size = 50257;
    c->padded_vocab_size = 50304;
    c->num_layers = L;
    c->num_heads = NH;
    c->channels = C;
    gpt2_config_validate(c, "-e");
}

#endif // LLMC_GPT2_CONFIG_H
