/*
 * test_config.c - model descriptors, parameter sizes, config validation, LR schedulers, the
 * automatic recompute level (-r -1).
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_config.c -lm -o /tmp/test_config && /tmp/test_config
 */
#include <math.h>

#include "dev/test/test_harness.h"
#include "llmc/model/gpt2_config.h"
#include "llmc/train/schedulers.h"
#include "llmc/train/recompute_plan.h"

static int close_to(float a, float b) {
    return fabsf(a - b) <= 1e-6f * fmaxf(1.0f, fabsf(b));
}

static void check_desc(const char* desc, int L, int C, int NH, int maxT) {
    GPT2Config c;
    gpt2_config_from_descriptor(&c, desc);
    CHECK(c.num_layers == L && c.channels == C && c.num_heads == NH && c.max_seq_len == maxT &&
              c.vocab_size == 50257 && c.padded_vocab_size == 50304,
          "%s -> L=%d C=%d NH=%d maxT=%d V=%d Vp=%d", desc, c.num_layers, c.channels, c.num_heads,
          c.max_seq_len, c.vocab_size, c.padded_vocab_size);
}

static void die_desc(void* ctx) {
    GPT2Config c;
    gpt2_config_from_descriptor(&c, (const char*)ctx);
}

static void die_validate(void* ctx) {
    gpt2_config_validate((const GPT2Config*)ctx, "some/file.bin");
}

static void die_sched(void* ctx) {
    LearningRateScheduler s;
    lr_scheduler_init(&s, (const char*)ctx, 1e-3f, 10, 100, 0.0f);
}

static void test_descriptors(void) {
    check_desc("d12", 12, 768, 12, 1024);
    check_desc("d24", 24, 1024, 16, 1024);
    check_desc("d36", 36, 1280, 20, 1024);
    check_desc("d48", 48, 1600, 25, 1024);
    check_desc("d6", 6, 384, 6, 1024);
    check_desc("d4", 4, 256, 4, 1024);
    check_desc("d1", 1, 64, 1, 1024);
    check_desc("d2,c64,h4,t64", 2, 64, 4, 64);
    check_desc("d2,t64,h4,c64", 2, 64, 4, 64);
    check_desc("d12,t256", 12, 768, 12, 256);
    check_desc("d12,h6", 12, 768, 6, 1024);

    const char* bad[] = {"x12", "d0", "d12,q3", "d4,c100,h3", "", "d", "d-1", "d12,", "d12,,c64",
                         "d12,c", "d12,c0", "d12,c64,c64", "d1x", "12", "d12,h", "d9999999999",
                         "d12,c64x", " d12", "d12 "};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        EXPECT_DIES(die_desc, bad[i], "-e", "descriptor");
    }
    EXPECT_DIES(die_desc, "x12", "-e", "x12");
    EXPECT_DIES(die_desc, "d0", "-e", "d0");
    EXPECT_DIES(die_desc, "d12,q3", "-e", "q3");
    EXPECT_DIES(die_desc, "d4,c100,h3", "-e", "100", "3", "divisible");
}

static void test_sizes(void) {
    GPT2Config c;
    gpt2_config_from_descriptor(&c, "d12");
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_param_sizes(&c, sizes);
    size_t sum = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) sum += sizes[i];
    CHECK(sum == 124475904, "d12 sizes sum %zu", sum);
    CHECK(gpt2_num_parameters(&c) == 124475904, "d12 num_parameters %zu", gpt2_num_parameters(&c));
    CHECK(sizes[0] == (size_t)50304 * 768, "wte %zu", sizes[0]);
    CHECK(sizes[1] == (size_t)1024 * 768, "wpe %zu", sizes[1]);
    CHECK(sizes[4] == (size_t)12 * 3 * 768 * 768, "qkvw %zu", sizes[4]);
    CHECK(sizes[5] == (size_t)12 * 3 * 768, "qkvb %zu", sizes[5]);
    CHECK(sizes[10] == (size_t)12 * 4 * 768 * 768, "fcw %zu", sizes[10]);
    CHECK(sizes[11] == (size_t)12 * 4 * 768, "fcb %zu", sizes[11]);
    CHECK(sizes[12] == sizes[10], "fcprojw %zu", sizes[12]);
    CHECK(sizes[14] == 768 && sizes[15] == 768, "lnf %zu %zu", sizes[14], sizes[15]);
    // d2,c64,h4,t64 by hand: 50304*64 + 64*64 + 2*(12*64*64 + 13*64) + 2*64
    gpt2_config_from_descriptor(&c, "d2,c64,h4,t64");
    size_t expect = (size_t)50304 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64;
    CHECK(gpt2_num_parameters(&c) == expect, "tiny num_parameters %zu vs %zu", gpt2_num_parameters(&c), expect);
    // d48 (GPT-2 XL, Vp padded): 1,557,686,400 parameters
    gpt2_config_from_descriptor(&c, "d48");
    CHECK(gpt2_num_parameters(&c) == 1557686400u, "d48 num_parameters %zu", gpt2_num_parameters(&c));

    const char* names[NUM_PARAMETER_TENSORS] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                                                "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    int matrices = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        CHECK(strcmp(PARAM_TENSOR_NAMES[i], names[i]) == 0, "name %d = %s", i, PARAM_TENSOR_NAMES[i]);
        matrices += gpt2_param_is_matrix(i);
    }
    CHECK(matrices == 6, "matrix count %d", matrices);
    CHECK(gpt2_param_is_matrix(0) && gpt2_param_is_matrix(1) && gpt2_param_is_matrix(4) && gpt2_param_is_matrix(6) &&
              gpt2_param_is_matrix(10) && gpt2_param_is_matrix(12),
          "matrix set");
    CHECK(!gpt2_param_is_matrix(2) && !gpt2_param_is_matrix(5) && !gpt2_param_is_matrix(15), "non-matrix set");
}

static void test_validate(void) {
    static GPT2Config bad[7];
    GPT2Config good = {64, 100, 128, 2, 4, 64};
    gpt2_config_validate(&good, "ok");  // must not die
    CHECK(1, "valid config accepted");
    for (int i = 0; i < 7; i++) bad[i] = good;
    bad[0].max_seq_len = 0;
    bad[1].vocab_size = -5;
    bad[2].padded_vocab_size = 0;
    bad[3].num_layers = -1;
    bad[4].num_heads = 0;
    bad[5].channels = 63;   // not divisible by 4
    bad[6].vocab_size = 129;  // > Vp
    EXPECT_DIES(die_validate, &bad[0], "some/file.bin", "max_seq_len", "> 0");
    EXPECT_DIES(die_validate, &bad[1], "some/file.bin", "vocab_size", "-5");
    EXPECT_DIES(die_validate, &bad[2], "some/file.bin", "padded_vocab_size");
    EXPECT_DIES(die_validate, &bad[3], "some/file.bin", "num_layers");
    EXPECT_DIES(die_validate, &bad[4], "some/file.bin", "num_heads");
    EXPECT_DIES(die_validate, &bad[5], "some/file.bin", "divisible");
    EXPECT_DIES(die_validate, &bad[6], "some/file.bin", "padded_vocab_size", "129");
    static GPT2Config huge = {1024, 50257, 50304, 1000000, 8, 65536};
    EXPECT_DIES(die_validate, &huge, "some/file.bin", "too large");
}

static void test_schedulers(void) {
    const float lr = 6e-4f;
    const int warmup = 10, N = 110;
    const float frac = 0.1f, lr_min = lr * frac;
    LearningRateScheduler s;

    lr_scheduler_init(&s, "cosine", lr, warmup, N, frac);
    CHECK(close_to(get_learning_rate(&s, 0), lr / warmup), "cosine step 0: %g", get_learning_rate(&s, 0));
    CHECK(close_to(get_learning_rate(&s, 4), lr * 5 / warmup), "cosine step 4: %g", get_learning_rate(&s, 4));
    CHECK(close_to(get_learning_rate(&s, warmup - 1), lr), "cosine step warmup-1: %g", get_learning_rate(&s, warmup - 1));
    CHECK(close_to(get_learning_rate(&s, warmup), lr), "cosine step warmup: %g", get_learning_rate(&s, warmup));
    CHECK(close_to(get_learning_rate(&s, 60), 0.5f * (lr + lr_min)), "cosine midpoint: %g", get_learning_rate(&s, 60));
    CHECK(close_to(get_learning_rate(&s, 35), lr_min + 0.5f * (1.0f + cosf(3.14159265f * 0.25f)) * (lr - lr_min)),
          "cosine quarter: %g", get_learning_rate(&s, 35));
    CHECK(close_to(get_learning_rate(&s, N), lr_min), "cosine end: %g", get_learning_rate(&s, N));
    CHECK(close_to(get_learning_rate(&s, N + 50), lr_min), "cosine past end clamps: %g", get_learning_rate(&s, N + 50));
    float prev = 1e9f;
    int mono = 1;
    for (int i = warmup; i <= N; i++) {
        float v = get_learning_rate(&s, i);
        if (v > prev + 1e-9f) mono = 0;
        prev = v;
    }
    CHECK(mono, "cosine decay is monotone");

    lr_scheduler_init(&s, "linear", lr, warmup, N, frac);
    CHECK(close_to(get_learning_rate(&s, 0), lr / warmup), "linear step 0: %g", get_learning_rate(&s, 0));
    CHECK(close_to(get_learning_rate(&s, warmup - 1), lr), "linear warmup-1: %g", get_learning_rate(&s, warmup - 1));
    CHECK(close_to(get_learning_rate(&s, 60), lr - 0.5f * (lr - lr_min)), "linear midpoint: %g", get_learning_rate(&s, 60));
    CHECK(close_to(get_learning_rate(&s, 85), lr - 0.75f * (lr - lr_min)), "linear 3/4: %g", get_learning_rate(&s, 85));
    CHECK(close_to(get_learning_rate(&s, N), lr_min), "linear end: %g", get_learning_rate(&s, N));

    lr_scheduler_init(&s, "constant", lr, warmup, N, frac);
    CHECK(get_learning_rate(&s, 0) == lr && get_learning_rate(&s, 5) == lr && get_learning_rate(&s, N) == lr &&
              get_learning_rate(&s, 1000) == lr,
          "constant");

    // wsd, N = 110: decay window is the last 22 steps, from step 88
    lr_scheduler_init(&s, "wsd", lr, warmup, N, frac);
    CHECK(close_to(get_learning_rate(&s, 0), lr / warmup), "wsd step 0: %g", get_learning_rate(&s, 0));
    CHECK(close_to(get_learning_rate(&s, warmup - 1), lr), "wsd warmup-1: %g", get_learning_rate(&s, warmup - 1));
    CHECK(close_to(get_learning_rate(&s, 50), lr), "wsd stable: %g", get_learning_rate(&s, 50));
    CHECK(close_to(get_learning_rate(&s, 87), lr), "wsd last stable: %g", get_learning_rate(&s, 87));
    CHECK(close_to(get_learning_rate(&s, 88), lr), "wsd decay start: %g", get_learning_rate(&s, 88));
    CHECK(close_to(get_learning_rate(&s, 99), lr_min + (1.0f - sqrtf(0.5f)) * (lr - lr_min)), "wsd decay midpoint: %g",
          get_learning_rate(&s, 99));
    CHECK(close_to(get_learning_rate(&s, N), lr_min), "wsd end: %g", get_learning_rate(&s, N));
    CHECK(get_learning_rate(&s, 89) < lr && get_learning_rate(&s, 109) > lr_min, "wsd decays inside the window");

    // degenerate: no warmup, warmup == N
    lr_scheduler_init(&s, "cosine", lr, 0, N, frac);
    CHECK(close_to(get_learning_rate(&s, 0), lr), "cosine no warmup step 0: %g", get_learning_rate(&s, 0));
    lr_scheduler_init(&s, "cosine", lr, N, N, frac);
    CHECK(close_to(get_learning_rate(&s, N - 1), lr), "cosine warmup==N last: %g", get_learning_rate(&s, N - 1));
    CHECK(isfinite(get_learning_rate(&s, N)), "cosine warmup==N after: finite");

    EXPECT_DIES(die_sched, "cosin", "-k", "cosin");
    EXPECT_DIES(die_sched, "", "-k");
}

// -r -1: the smallest level whose activations leave the reserve free; 2 when nothing fits.
static void test_recompute_auto(void) {
    const size_t GiB = (size_t)1 << 30;
    const size_t total = 80 * GiB;  // an H100: reserve = 15% = 12 GiB
    CHECK(recompute_reserve_bytes(total) == (size_t)(0.15 * (double)total), "reserve of 80 GiB is 15%%");
    CHECK(recompute_reserve_bytes(8 * GiB) == 4 * GiB, "reserve of 8 GiB is the 4 GiB minimum");
    // d12 B=64 T=1024 on an H100, roughly: 26.6 / 22.1 / 20.9 GiB at levels 0 / 1 / 2, ~77 GiB free
    const size_t d12[3] = {(size_t)(26.6 * GiB), (size_t)(22.1 * GiB), (size_t)(20.9 * GiB)};
    CHECK(recompute_auto_level(d12, 77 * GiB, total, 0) == 0, "d12 B=64 on 80 GiB: no recompute");
    CHECK(recompute_auto_level(d12, 77 * GiB, total, 2) == 2, "FP8 keeping its inputs: level 2 (free)");
    CHECK(recompute_auto_level(d12, 77 * GiB, total, 1) == 1, "a floor of 1");
    const size_t big[3] = {70 * GiB, 60 * GiB, 50 * GiB};
    CHECK(recompute_auto_level(big, 77 * GiB, total, 0) == 1, "77 free: 70+12 no, 60+12 yes -> 1");
    CHECK(recompute_auto_level(big, 72 * GiB, total, 0) == 1, "exactly 60+12 fits -> 1");
    CHECK(recompute_auto_level(big, 72 * GiB - 1, total, 0) == 2, "one byte less -> 2");
    CHECK(recompute_auto_level(big, 72 * GiB - 1, total, 1) == 2, "one byte less, floor 1 -> 2");
    CHECK(recompute_auto_level(big, 40 * GiB, total, 0) == 2, "nothing fits -> 2 (the allocation reports it)");
    CHECK(recompute_auto_level(big, 20 * GiB, total, 0) == 2, "free below the activations -> 2, no underflow");
}

int main(void) {
    test_recompute_auto();
    test_descriptors();
    test_sizes();
    test_validate();
    test_schedulers();
    return test_summary();
}
