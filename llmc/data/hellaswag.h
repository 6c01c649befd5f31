/*
 * hellaswag.h - multiple-choice evaluation files in llm.c's format (magic 20240522, version 1,
 * written by llm.c's dev/data/hellaswag.py; doc/FORMATS.md) and HellaSwag accuracy as llm.c
 * computes it. Host-only C, shared by both trainers (-h 1 -hf PATH).
 *
 * File: 256 int32 header words {magic 20240522, version 1, number of examples N, bytes of the
 * longest example}, then N examples, each a stream of uint16:
 *   65535 (start), example bytes (this whole example, these 3 words included), example index (0..N-1),
 *   label (the correct completion), number of completions (4), context length n, n context tokens,
 *   then for each completion: its length m, m tokens.
 * evalset_read checks all of it against the file length, the vocabulary (ids < V) and the sequence
 * length (context + completion <= T), and dies naming the file, the example and the field.
 *
 * Batching (llm.c's EvalLoader): rank r of R takes examples [r*ceil(N/R), (r+1)*ceil(N/R)); a batch
 * holds B/4 examples, example j in rows 4j..4j+3 (one completion per row: context, then the
 * completion; the targets are the inputs shifted by one, and the mask marks the positions whose
 * targets are completion tokens). An example counts as correct when the completion with the lowest
 * mean loss over its masked positions (the first one on ties) is the label.
 */
#ifndef LLMC_HELLASWAG_H
#define LLMC_HELLASWAG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/core/utils.h"

#define EVALSET_MAGIC 20240522
#define EVALSET_VERSION 1
#define EVALSET_COMPLETIONS 4        // llm.c's ASSUMED_NUM_COMPLETIONS
#define EVALSET_START_DELIMITER 65535

typedef struct {
    int label;
    int ctx_len;
    size_t ctx_off;                          // offset of the context tokens in EvalSet.words
    int comp_len[EVALSET_COMPLETIONS];
    size_t comp_off[EVALSET_COMPLETIONS];
} EvalExample;

typedef struct {
    int num_examples;
    EvalExample* examples;
    uint16_t* words;  // the file after the header
} EvalSet;

// Read and validate path for a model of vocabulary V trained with sequence length T.
static inline void evalset_read(EvalSet* s, const char* path, int V, int T) {
    memset(s, 0, sizeof(*s));
    FILE* f = fopen_check(path, "rb");
    size_t size = file_size_check(f, path);
    if (size < 1024) die("%s: header: truncated (file is %zu bytes, the header alone is 1024)", path, size);
    int32_t h[256];
    fread_check(h, sizeof(int32_t), 256, f, path, "eval header");
    if (h[0] != EVALSET_MAGIC) die("%s: magic: %d (expected %d): not an llm.c eval file", path, h[0], EVALSET_MAGIC);
    if (h[1] != EVALSET_VERSION) die("%s: version: %d is not supported (expected %d)", path, h[1], EVALSET_VERSION);
    if (h[2] < 1 || h[2] > 65536) die("%s: num_examples: %d is not in 1..65536", path, h[2]);
    if (h[3] <= 0 || h[3] % 2 != 0) die("%s: longest_example_bytes: %d is not a positive even number", path, h[3]);
    const size_t body = size - 1024;
    if (body % 2 != 0) die("%s: file length: %zu bytes is not the 1024-byte header plus uint16 words", path, size);
    const size_t nw = body / 2;
    s->num_examples = h[2];
    s->words = (uint16_t*)malloc_check(body);
    fread_check(s->words, 1, body, f, path, "examples");
    fclose_check(f, path);
    s->examples = (EvalExample*)calloc_check((size_t)s->num_examples, sizeof(EvalExample));
    const uint16_t* w = s->words;
    size_t pos = 0;
    int longest = 0;
    for (int i = 0; i < s->num_examples; i++) {
        EvalExample* e = &s->examples[i];
        if (nw - pos < 6) die("%s: example %d: truncated (the file ends %zu bytes into its header)", path, i, 2 * (nw - pos));
        if (w[pos] != EVALSET_START_DELIMITER) die("%s: example %d: start delimiter: %u (expected 65535)", path, i, w[pos]);
        const size_t bytes = w[pos + 1];
        if (bytes % 2 != 0 || bytes < 12) die("%s: example %d: example_bytes: %zu is not an even number >= 12", path, i, bytes);
        if (bytes / 2 > nw - pos)
            die("%s: example %d: example_bytes: %zu runs past the end of the file (%zu bytes left)", path, i, bytes, 2 * (nw - pos));
        if (w[pos + 2] != (uint16_t)i) die("%s: example %d: example_index: %u (expected %d)", path, i, w[pos + 2], i & 0xFFFF);
        const size_t end = pos + bytes / 2;
        e->label = w[pos + 3];
        const int nc = w[pos + 4];
        if (nc != EVALSET_COMPLETIONS)
            die("%s: example %d: num_completions: %d (llm.c's evaluation, and this one, need %d)", path, i, nc, EVALSET_COMPLETIONS);
        if (e->label >= nc) die("%s: example %d: label: %d is not below num_completions %d", path, i, e->label, nc);
        size_t p = pos + 5;
        e->ctx_len = w[p++];
        if (e->ctx_len < 1) die("%s: example %d: context length: 0 (must be >= 1)", path, i);
        if ((size_t)e->ctx_len > end - p)
            die("%s: example %d: context length: %d tokens run past example_bytes %zu", path, i, e->ctx_len, bytes);
        e->ctx_off = p;
        for (int k = 0; k < e->ctx_len; k++)
            if (w[p + k] >= V) die("%s: example %d: context token %d: id %u is not below the vocabulary size %d", path, i, k, w[p + k], V);
        p += e->ctx_len;
        for (int c = 0; c < nc; c++) {
            if (p >= end) die("%s: example %d: completion %d: missing (example_bytes %zu ends before it)", path, i, c, bytes);
            const int len = w[p++];
            if (len < 1) die("%s: example %d: completion %d: length 0 (must be >= 1)", path, i, c);
            if ((size_t)len > end - p) die("%s: example %d: completion %d: %d tokens run past example_bytes %zu", path, i, c, len, bytes);
            if (e->ctx_len + len > T)
                die("%s: example %d: completion %d: context %d + completion %d tokens exceed the sequence length T=%d (-t)", path, i, c,
                    e->ctx_len, len, T);
            for (int k = 0; k < len; k++)
                if (w[p + k] >= V)
                    die("%s: example %d: completion %d token %d: id %u is not below the vocabulary size %d", path, i, c, k, w[p + k], V);
            e->comp_len[c] = len;
            e->comp_off[c] = p;
            p += len;
        }
        if (p != end) die("%s: example %d: example_bytes: %zu, but its fields take %zu", path, i, bytes, 2 * (p - pos));
        if ((int)bytes > longest) longest = (int)bytes;
        pos = end;
    }
    if (pos != nw) die("%s: file length: %zu bytes after the last of %d examples", path, 2 * (nw - pos), s->num_examples);
    if (longest != h[3]) die("%s: longest_example_bytes: header says %d, the longest example has %d", path, h[3], longest);
}

static inline void evalset_free(EvalSet* s) {
    free(s->examples);
    free(s->words);
    memset(s, 0, sizeof(*s));
}

// llm.c's split: rank's examples [*first, *end) and the number of batches of B/4 examples that every
// rank runs (the same on all ranks).
static inline void evalset_rank_range(const EvalSet* s, int B, int rank, int nranks, int* first, int* end, int* num_batches) {
    const int per_rank = (s->num_examples + nranks - 1) / nranks;
    const int per_batch = B / EVALSET_COMPLETIONS;
    if (per_batch < 1) die("-h 1: needs -b >= %d (the %d completions of an example go in %d rows)", EVALSET_COMPLETIONS,
                           EVALSET_COMPLETIONS, EVALSET_COMPLETIONS);
    long lo = (long)rank * per_rank, hi = lo + per_rank;
    if (lo > s->num_examples) lo = s->num_examples;
    if (hi > s->num_examples) hi = s->num_examples;
    *first = (int)lo;
    *end = (int)hi;
    *num_batches = (per_rank + per_batch - 1) / per_batch;
}

// Put examples [first, end) (at most B/4) into a B x T batch; returns how many. Rows and positions
// that no example fills are 0 (the causal model never lets them affect the masked losses).
static inline int evalset_fill_batch(const EvalSet* s, int first, int end, int B, int T, int* inputs, int* targets,
                                     unsigned char* mask, int* labels) {
    memset(inputs, 0, (size_t)B * T * sizeof(int));
    memset(targets, 0, (size_t)B * T * sizeof(int));
    memset(mask, 0, (size_t)B * T);
    int n = 0;
    for (int ex = first; ex < end && n < B / EVALSET_COMPLETIONS; ex++, n++) {
        const EvalExample* e = &s->examples[ex];
        labels[n] = e->label;
        for (int c = 0; c < EVALSET_COMPLETIONS; c++) {
            const size_t row = (size_t)(n * EVALSET_COMPLETIONS + c) * T;
            for (int k = 0; k < e->ctx_len; k++) inputs[row + k] = s->words[e->ctx_off + k];
            for (int k = 0; k < e->comp_len[c]; k++) {
                const int tok = s->words[e->comp_off[c] + k];
                const int at = e->ctx_len + k;  // < T: evalset_read checked context + completion <= T
                inputs[row + at] = tok;
                targets[row + at - 1] = tok;
                mask[row + at - 1] = 1;
            }
            for (int k = 0; k + 1 < e->ctx_len; k++) targets[row + k] = s->words[e->ctx_off + k + 1];
        }
    }
    return n;
}

// Of the n examples of a batch filled by evalset_fill_batch, how many have the label as the
// completion of the lowest mean loss over its masked positions (losses: B x T per-position losses).
static inline int evalset_count_correct(const unsigned char* mask, const float* losses, const int* labels, int n, int T) {
    int correct = 0;
    for (int j = 0; j < n; j++) {
        int best = -1;
        float best_loss = 0.0f;
        for (int c = 0; c < EVALSET_COMPLETIONS; c++) {
            const size_t row = (size_t)(j * EVALSET_COMPLETIONS + c) * T;
            float sum = 0.0f;
            int count = 0;
            for (int t = 0; t < T; t++)
                if (mask[row + t]) { sum += losses[row + t]; count++; }
            const float mean = count > 0 ? sum / count : 0.0f;
            if (c == 0 || mean < best_loss) { best_loss = mean; best = c; }
        }
        if (best == labels[j]) correct++;
    }
    return correct;
}

// The forward a trainer runs for evalset_correct: per-position losses (B x T) of the batch.
typedef const float* (*EvalForwardFn)(void* ctx, const int* inputs, const int* targets);

// Correct examples of this rank over all of its batches (every rank runs num_batches forwards).
static inline int evalset_correct(const EvalSet* s, int B, int T, int rank, int nranks, EvalForwardFn forward, void* ctx) {
    int first, end, num_batches;
    evalset_rank_range(s, B, rank, nranks, &first, &end, &num_batches);
    int* inputs = (int*)malloc_check((size_t)B * T * sizeof(int));
    int* targets = (int*)malloc_check((size_t)B * T * sizeof(int));
    unsigned char* mask = (unsigned char*)malloc_check((size_t)B * T);
    int* labels = (int*)malloc_check((size_t)(B / EVALSET_COMPLETIONS) * sizeof(int));
    int correct = 0;
    for (int b = 0; b < num_batches; b++) {
        int lo = first + b * (B / EVALSET_COMPLETIONS);
        if (lo > end) lo = end;
        const int n = evalset_fill_batch(s, lo, end, B, T, inputs, targets, mask, labels);
        const float* losses = forward(ctx, inputs, targets);
        correct += evalset_count_correct(mask, losses, labels, n, T);
    }
    free(inputs); free(targets); free(mask); free(labels);
    return correct;
}

#endif // LLMC_HELLASWAG_H
