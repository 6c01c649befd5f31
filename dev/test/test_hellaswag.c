/*
 * test_hellaswag.c - llmc/data/hellaswag.h: llm.c's eval-file format (magic 20240522, version 1) and the
 * HellaSwag accuracy rule.
 *   - a file written as llm.c's data_common.write_evalfile writes it reads back field by field;
 *   - batches: 4 rows per example, context then completion, targets shifted by one, the mask on the
 *     completion tokens' targets, unused rows zero; llm.c's split of the examples over ranks;
 *   - accuracy: the completion of lowest mean masked loss (the first on ties) against the label;
 *   - every malformed field is refused with one error line naming the file, the example and the field.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev/test/test_harness.h"
#include "llmc/data/hellaswag.h"

// An example: label, context, 4 completions (lengths and tokens from a small generator).
typedef struct {
    int label, ctx_len, comp_len[4];
    uint16_t ctx[32], comp[4][32];
} Ex;

static Ex make_ex(int i) {
    Ex e;
    memset(&e, 0, sizeof(e));
    e.label = (i * 3) % 4;
    e.ctx_len = 3 + i % 5;
    for (int k = 0; k < e.ctx_len; k++) e.ctx[k] = (uint16_t)(100 + 7 * i + k);
    for (int c = 0; c < 4; c++) {
        e.comp_len[c] = 1 + (i + c) % 4;
        for (int k = 0; k < e.comp_len[c]; k++) e.comp[c][k] = (uint16_t)(1000 + 100 * c + 10 * i + k);
    }
    return e;
}

// Serialize examples as llm.c does; `patch` may damage the stream (word index, value) after layout.
static size_t encode(const Ex* ex, int n, uint16_t* out, int* longest) {
    size_t pos = 0;
    *longest = 0;
    for (int i = 0; i < n; i++) {
        size_t start = pos;
        out[pos++] = 65535;
        out[pos++] = 0;
        out[pos++] = (uint16_t)i;
        out[pos++] = (uint16_t)ex[i].label;
        out[pos++] = 4;
        out[pos++] = (uint16_t)ex[i].ctx_len;
        for (int k = 0; k < ex[i].ctx_len; k++) out[pos++] = ex[i].ctx[k];
        for (int c = 0; c < 4; c++) {
            out[pos++] = (uint16_t)ex[i].comp_len[c];
            for (int k = 0; k < ex[i].comp_len[c]; k++) out[pos++] = ex[i].comp[c][k];
        }
        out[start + 1] = (uint16_t)(2 * (pos - start));
        if ((int)(2 * (pos - start)) > *longest) *longest = (int)(2 * (pos - start));
    }
    return pos;
}

static void write_file(const char* path, const int32_t* header, const uint16_t* words, size_t nw, size_t extra_bytes) {
    FILE* f = fopen(path, "wb");
    fwrite(header, sizeof(int32_t), 256, f);
    fwrite(words, sizeof(uint16_t), nw, f);
    for (size_t i = 0; i < extra_bytes; i++) fputc(0, f);
    fclose(f);
}

#define NEX 7
static Ex g_ex[NEX];
static uint16_t g_words[4096];
static size_t g_nw;
static int g_longest;

static void header_for(int32_t* h, int n, int longest) {
    memset(h, 0, 256 * sizeof(int32_t));
    h[0] = EVALSET_MAGIC; h[1] = 1; h[2] = n; h[3] = longest;
}

static void test_read_and_batches(void) {
    for (int i = 0; i < NEX; i++) g_ex[i] = make_ex(i);
    g_nw = encode(g_ex, NEX, g_words, &g_longest);
    int32_t h[256];
    header_for(h, NEX, g_longest);
    const char* path = tmp_path("eval_ok.bin");
    write_file(path, h, g_words, g_nw, 0);
    EvalSet s;
    evalset_read(&s, path, 50257, 16);
    CHECK(s.num_examples == NEX, "num_examples %d", s.num_examples);
    int fields_ok = 1;
    for (int i = 0; i < NEX; i++) {
        const EvalExample* e = &s.examples[i];
        fields_ok &= e->label == g_ex[i].label && e->ctx_len == g_ex[i].ctx_len;
        for (int k = 0; k < e->ctx_len; k++) fields_ok &= s.words[e->ctx_off + k] == g_ex[i].ctx[k];
        for (int c = 0; c < 4; c++) {
            fields_ok &= e->comp_len[c] == g_ex[i].comp_len[c];
            for (int k = 0; k < e->comp_len[c]; k++) fields_ok &= s.words[e->comp_off[c] + k] == g_ex[i].comp[c][k];
        }
    }
    CHECK(fields_ok, "labels, contexts and completions read back");

    // batches of B = 9 (2 examples; the 9th row unused), T = 16
    const int B = 9, T = 16;
    int inputs[B * T], targets[B * T], labels[2];
    unsigned char mask[B * T];
    int n = evalset_fill_batch(&s, 5, 7, B, T, inputs, targets, mask, labels);
    CHECK(n == 2 && labels[0] == g_ex[5].label && labels[1] == g_ex[6].label, "two examples, their labels");
    int layout_ok = 1;
    for (int j = 0; j < 2; j++) {
        const Ex* e = &g_ex[5 + j];
        for (int c = 0; c < 4; c++) {
            const int* in = inputs + (4 * j + c) * T;
            const int* tg = targets + (4 * j + c) * T;
            const unsigned char* mk = mask + (4 * j + c) * T;
            int L = e->ctx_len + e->comp_len[c];
            for (int t = 0; t < T; t++) {
                int want_in = t < e->ctx_len ? e->ctx[t] : (t < L ? e->comp[c][t - e->ctx_len] : 0);
                int want_mask = t >= e->ctx_len - 1 && t < L - 1;
                layout_ok &= in[t] == want_in && mk[t] == want_mask;
                if (t < L - 1) layout_ok &= tg[t] == (t + 1 < e->ctx_len ? e->ctx[t + 1] : e->comp[c][t + 1 - e->ctx_len]);
                else layout_ok &= tg[t] == 0;
            }
        }
    }
    for (int t = 0; t < T; t++) layout_ok &= inputs[8 * T + t] == 0 && mask[8 * T + t] == 0;
    CHECK(layout_ok, "rows: context + completion, targets shifted by one, mask on the completion targets, rest 0");

    // accuracy rule: losses 1 everywhere except the chosen completion of each example
    float losses[B * T];
    for (int i = 0; i < B * T; i++) losses[i] = 1.0f;
    for (int t = 0; t < T; t++) losses[(4 * 0 + labels[0]) * T + t] = 0.5f;                    // example 5: right
    for (int t = 0; t < T; t++) losses[(4 * 1 + (labels[1] + 1) % 4) * T + t] = 0.5f;          // example 6: wrong
    CHECK(evalset_count_correct(mask, losses, labels, 2, T) == 1, "lowest mean loss vs label: 1 of 2");
    for (int i = 0; i < B * T; i++) losses[i] = 2.0f;  // all tied: completion 0 wins (llm.c)
    int lab0[2] = {0, 0}, lab1[2] = {1, 1};
    CHECK(evalset_count_correct(mask, losses, lab0, 2, T) == 2 && evalset_count_correct(mask, losses, lab1, 2, T) == 0,
          "ties go to the first completion");
    // the mean is over the masked positions only (unmasked losses do not count)
    for (int i = 0; i < B * T; i++) losses[i] = mask[i] ? 1.0f : 100.0f;
    for (int t = 0; t < T; t++)
        if (mask[(4 * 0 + 2) * T + t]) losses[(4 * 0 + 2) * T + t] = 0.9f;
    int lab2[1] = {2};
    CHECK(evalset_count_correct(mask, losses, lab2, 1, T) == 1, "mean over the masked positions only");

    // llm.c's split over ranks: ceil(7/3) = 3 per rank: [0,3) [3,6) [6,7); batches of B/4 = 2: 2 each
    int first, end, nb;
    evalset_rank_range(&s, 8, 0, 3, &first, &end, &nb);
    CHECK(first == 0 && end == 3 && nb == 2, "rank 0 of 3: [%d,%d) %d batches", first, end, nb);
    evalset_rank_range(&s, 8, 2, 3, &first, &end, &nb);
    CHECK(first == 6 && end == 7 && nb == 2, "rank 2 of 3: [%d,%d) %d batches", first, end, nb);
    evalset_rank_range(&s, 4, 0, 1, &first, &end, &nb);
    CHECK(first == 0 && end == 7 && nb == 7, "one rank, B=4: %d batches", nb);
    evalset_free(&s);
}

// ---- malformed files: each case damages a copy of the good stream / header

typedef struct { const char* path; int V, T; } ReadCtx;
static void do_read(void* ctx) {
    ReadCtx* c = (ReadCtx*)ctx;
    EvalSet s;
    evalset_read(&s, c->path, c->V, c->T);
}

static ReadCtx g_ctx[32];
static int g_nctx = 0;

// Write a damaged file: header word hw set to hv (hw < 0: none), stream word sw set to sv (sw < 0: none),
// the stream cut to nw words, extra trailing bytes.
static ReadCtx* damaged(const char* name, int hw, int32_t hv, long sw, uint16_t sv, size_t nw, size_t extra) {
    int32_t h[256];
    header_for(h, NEX, g_longest);
    if (hw >= 0) h[hw] = hv;
    uint16_t w[4096];
    memcpy(w, g_words, g_nw * sizeof(uint16_t));
    if (sw >= 0) w[sw] = sv;
    ReadCtx* c = &g_ctx[g_nctx++];
    c->path = tmp_path(name);
    c->V = 50257;
    c->T = 16;
    write_file(c->path, h, w, nw, extra);
    return c;
}

static void test_malformed(void) {
    const size_t ex1 = g_words[1] / 2;  // start of example 1
    EXPECT_DIES(do_read, damaged("e_magic.bin", 0, 20240520, -1, 0, g_nw, 0), "e_magic.bin", "magic", "20240520");
    EXPECT_DIES(do_read, damaged("e_version.bin", 1, 2, -1, 0, g_nw, 0), "e_version.bin", "version", "2");
    EXPECT_DIES(do_read, damaged("e_count0.bin", 2, 0, -1, 0, g_nw, 0), "e_count0.bin", "num_examples");
    EXPECT_DIES(do_read, damaged("e_count_more.bin", 2, NEX + 1, -1, 0, g_nw, 0), "e_count_more.bin", "example 7", "truncated");
    EXPECT_DIES(do_read, damaged("e_count_less.bin", 2, NEX - 1, -1, 0, g_nw, 0), "e_count_less.bin", "file length", "after the last");
    EXPECT_DIES(do_read, damaged("e_longest.bin", 3, g_longest + 2, -1, 0, g_nw, 0), "e_longest.bin", "longest_example_bytes");
    EXPECT_DIES(do_read, damaged("e_odd.bin", -1, 0, -1, 0, g_nw, 1), "e_odd.bin", "file length");
    EXPECT_DIES(do_read, damaged("e_delim.bin", -1, 0, (long)ex1, 65534, g_nw, 0), "e_delim.bin", "example 1", "start delimiter");
    EXPECT_DIES(do_read, damaged("e_bytes.bin", -1, 0, (long)ex1 + 1, 60000, g_nw, 0), "e_bytes.bin", "example 1", "example_bytes",
                "past the end");
    EXPECT_DIES(do_read, damaged("e_bytes_short.bin", -1, 0, (long)ex1 + 1, (uint16_t)(g_words[ex1 + 1] - 2), g_nw, 0),
                "e_bytes_short.bin", "example 1");
    EXPECT_DIES(do_read, damaged("e_index.bin", -1, 0, (long)ex1 + 2, 5, g_nw, 0), "e_index.bin", "example 1", "example_index");
    EXPECT_DIES(do_read, damaged("e_label.bin", -1, 0, (long)ex1 + 3, 4, g_nw, 0), "e_label.bin", "example 1", "label", "4");
    EXPECT_DIES(do_read, damaged("e_ncomp.bin", -1, 0, (long)ex1 + 4, 3, g_nw, 0), "e_ncomp.bin", "example 1", "num_completions", "3");
    EXPECT_DIES(do_read, damaged("e_ctx0.bin", -1, 0, (long)ex1 + 5, 0, g_nw, 0), "e_ctx0.bin", "example 1", "context length");
    EXPECT_DIES(do_read, damaged("e_token.bin", -1, 0, (long)ex1 + 6, 50257, g_nw, 0), "e_token.bin", "example 1", "context token 0",
                "50257", "vocabulary");
    const size_t comp0 = ex1 + 6 + g_ex[1].ctx_len;  // example 1, completion 0: length word
    EXPECT_DIES(do_read, damaged("e_ctoken.bin", -1, 0, (long)comp0 + 1, 60000, g_nw, 0), "e_ctoken.bin", "example 1", "completion 0",
                "60000");
    EXPECT_DIES(do_read, damaged("e_clen0.bin", -1, 0, (long)comp0, 0, g_nw, 0), "e_clen0.bin", "example 1", "completion 0", "length 0");
    EXPECT_DIES(do_read, damaged("e_trunc.bin", -1, 0, -1, 0, g_nw - 3, 0), "e_trunc.bin", "example 6");
    EXPECT_DIES(do_read, damaged("e_trailing.bin", -1, 0, -1, 0, g_nw, 4), "e_trailing.bin", "file length", "4 bytes");
    // lengths against T: example 4 has context 7 and completions of up to 4 tokens
    ReadCtx* c = damaged("e_longT.bin", -1, 0, -1, 0, g_nw, 0);
    c->T = 9;
    EXPECT_DIES(do_read, c, "e_longT.bin", "exceed the sequence length T=9");
    ReadCtx* v = damaged("e_smallV.bin", -1, 0, -1, 0, g_nw, 0);
    v->V = 1000;
    EXPECT_DIES(do_read, v, "e_smallV.bin", "not below the vocabulary size 1000");
    // a 100-byte file: the header is cut
    const char* tiny = tmp_path("e_tiny.bin");
    FILE* f = fopen(tiny, "wb");
    for (int i = 0; i < 100; i++) fputc(0, f);
    fclose(f);
    ReadCtx t = {tiny, 50257, 16};
    EXPECT_DIES(do_read, &t, "e_tiny.bin", "header", "truncated");
    ReadCtx missing = {tmp_path("e_missing.bin"), 50257, 16};
    EXPECT_DIES(do_read, &missing, "e_missing.bin", "cannot open");
}

int main(void) {
    test_read_and_batches();
    test_malformed();
    return test_summary();
}
