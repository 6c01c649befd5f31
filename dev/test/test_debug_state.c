/*
 * test_debug_state.c - reading debug state files (v3 and v2) and rejecting bad ones.
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_debug_state.c -lm -o /tmp/test_debug_state && /tmp/test_debug_state
 */
#include <stdint.h>

#include "dev/test/test_harness.h"
#include "llmc/obs/debug_state.h"
#include "llmc/core/utils.h"

static GPT2Config tiny(void) {
    GPT2Config c;
    c.max_seq_len = 8;
    c.vocab_size = 10;
    c.padded_vocab_size = 16;
    c.num_layers = 1;
    c.num_heads = 2;
    c.channels = 8;
    return c;
}

static int32_t fbits(float f) {
    int32_t w;
    memcpy(&w, &f, sizeof(w));
    return w;
}

typedef struct {
    int version, B, T, V, Vp, S, bf16;
    int lowp;         // header word 15 (GEMM recipe)
    int bad_token;    // if 1, y[3] = V
    long size_delta;  // bytes added (> 0) or removed (< 0) at the end
    int32_t magic;
} Spec;

static Spec default_spec(void) {
    Spec s;
    s.version = 3;
    s.B = 2;
    s.T = 3;
    s.V = 10;
    s.Vp = 16;
    s.S = 4;
    s.bf16 = 1;
    s.lowp = 2;
    s.bad_token = 0;
    s.size_delta = 0;
    s.magic = 20240327;
    return s;
}

// value patterns the reader must reproduce
static int x_at(size_t i) { return (int)(i * 3 % 10); }
static int y_at(size_t i) { return (int)((i * 7 + 1) % 10); }
static float logit_at(size_t i) { return (float)i * 0.25f - 3.0f; }
static float grad_at(size_t i) { return 1.0f / (float)(i + 1); }
static float step_loss_at(size_t i) { return 2.5f - 0.125f * (float)i; }

static void write_state(const char* path, const Spec* s, const GPT2Config* cfg) {
    int32_t h[256];
    memset(h, 0, sizeof(h));
    h[0] = s->magic;
    h[1] = s->version;
    h[2] = s->B;
    h[3] = s->T;
    if (s->version == 3) {
        h[4] = s->V;
        h[5] = s->Vp;
        h[6] = s->S;
        h[7] = fbits(1e-3f);
        h[8] = fbits(0.9f);
        h[9] = fbits(0.95f);
        h[10] = fbits(1e-8f);
        h[11] = fbits(0.1f);
        h[12] = fbits(1.0f);
        h[13] = s->bf16;
        h[15] = s->lowp;
    }
    size_t BT = (size_t)s->B * s->T;
    size_t np = gpt2_num_parameters(cfg);
    int V = s->version == 3 ? s->V : cfg->vocab_size;
    int S = s->version == 3 ? s->S : 0;
    FILE* f = fopen_check(path, "wb");
    fwrite_check(h, sizeof(h), 1, f, path);
    for (size_t i = 0; i < BT; i++) {
        int32_t v = x_at(i);
        fwrite_check(&v, 4, 1, f, path);
    }
    for (size_t i = 0; i < BT; i++) {
        int32_t v = (s->bad_token && i == 3) ? V : y_at(i);
        fwrite_check(&v, 4, 1, f, path);
    }
    for (size_t i = 0; i < BT * (size_t)V; i++) {
        float v = logit_at(i);
        fwrite_check(&v, 4, 1, f, path);
    }
    float loss = 2.75f;
    fwrite_check(&loss, 4, 1, f, path);
    for (size_t i = 0; i < np; i++) {
        float v = grad_at(i);
        fwrite_check(&v, 4, 1, f, path);
    }
    for (int i = 0; i < S; i++) {
        float v = step_loss_at((size_t)i);
        fwrite_check(&v, 4, 1, f, path);
    }
    if (s->size_delta > 0) {
        for (long i = 0; i < s->size_delta; i++) fputc(0, f);
    }
    fclose_check(f, path);
    if (s->size_delta < 0) {
        size_t full = 1024 + 4 * (2 * BT + BT * (size_t)V + 1 + np + (size_t)S);
        if (truncate(path, (off_t)(full - (size_t)(-s->size_delta))) != 0) {
            perror("truncate");
            exit(2);
        }
    }
}

static void test_read_v3(void) {
    GPT2Config cfg = tiny();
    Spec s = default_spec();
    const char* p = tmp_path("state_v3.bin");
    write_state(p, &s, &cfg);
    DebugState d;
    debug_state_read(p, &cfg, &d);
    CHECK(d.B == 2 && d.T == 3 && d.V == 10 && d.Vp == 16 && d.num_steps == 4, "v3 header B=%d T=%d V=%d Vp=%d S=%d",
          d.B, d.T, d.V, d.Vp, d.num_steps);
    CHECK(d.lr == 1e-3f && d.beta1 == 0.9f && d.beta2 == 0.95f && d.eps == 1e-8f && d.weight_decay == 0.1f &&
              d.grad_clip == 1.0f && d.bf16_weights == 1,
          "v3 optimizer settings");
    CHECK(d.lowp_mode == 2, "v3 GEMM recipe word 15: %d", d.lowp_mode);
    int ok = 1;
    for (size_t i = 0; i < 6; i++) {
        if (d.x[i] != x_at(i) || d.y[i] != y_at(i)) ok = 0;
    }
    CHECK(ok, "x and y");
    ok = 1;
    for (size_t i = 0; i < 60; i++) {
        if (d.logits[i] != logit_at(i)) ok = 0;
    }
    CHECK(ok, "logits");
    CHECK(d.loss == 2.75f, "loss %g", d.loss);
    size_t np = gpt2_num_parameters(&cfg);
    ok = 1;
    for (size_t i = 0; i < np; i++) {
        if (d.grads[i] != grad_at(i)) ok = 0;
    }
    CHECK(ok, "grads (%zu)", np);
    ok = 1;
    for (size_t i = 0; i < 4; i++) {
        if (d.step_losses[i] != step_loss_at(i)) ok = 0;
    }
    CHECK(ok, "step losses");
    debug_state_free(&d);
    CHECK(d.x == NULL && d.grads == NULL, "free zeroes the struct");

    s.S = 0;
    s.bf16 = 0;
    p = tmp_path("state_v3_nosteps.bin");
    write_state(p, &s, &cfg);
    debug_state_read(p, &cfg, &d);
    CHECK(d.num_steps == 0 && d.step_losses == NULL && d.bf16_weights == 0 && d.loss == 2.75f, "v3 with S = 0");
    debug_state_free(&d);
}

static void test_read_v2(void) {
    GPT2Config cfg = tiny();
    Spec s = default_spec();
    s.version = 2;
    const char* p = tmp_path("state_v2.bin");
    write_state(p, &s, &cfg);
    DebugState d;
    debug_state_read(p, &cfg, &d);
    CHECK(d.B == 2 && d.T == 3 && d.V == 10 && d.Vp == 16 && d.num_steps == 0 && d.step_losses == NULL,
          "v2: V/Vp from cfg, no steps");
    CHECK(d.lr == 0.0f && d.bf16_weights == 0, "v2: no optimizer settings");
    CHECK(d.logits[59] == logit_at(59) && d.loss == 2.75f && d.grads[0] == grad_at(0), "v2 data");
    debug_state_free(&d);
}

static void die_read(void* ctx) {
    GPT2Config cfg = tiny();
    DebugState d;
    debug_state_read((const char*)ctx, &cfg, &d);
    debug_state_free(&d);
}

static void bad_case(const char* name, Spec s, const char* sub1, const char* sub2) {
    GPT2Config cfg = tiny();
    const char* p = tmp_path(name);
    write_state(p, &s, &cfg);
    EXPECT_DIES(die_read, p, p, sub1, sub2);
}

static void test_bad(void) {
    Spec s = default_spec();
    s.magic = 20240326;
    bad_case("bad_magic.bin", s, "bad magic 20240326", "20240327");
    s = default_spec();
    s.version = 4;
    bad_case("bad_version.bin", s, "version", "4");
    s = default_spec();
    s.size_delta = -4;
    bad_case("short.bin", s, "file length", "truncated");
    s = default_spec();
    s.size_delta = 8;
    bad_case("long.bin", s, "file length", "trailing bytes");
    s = default_spec();
    s.S = 3;  // 3 step losses in the header, but 4 in the file
    s.size_delta = 4;
    bad_case("steps_mismatch.bin", s, "file length", "S=3");
    s = default_spec();
    s.V = 11;
    bad_case("bad_V.bin", s, "V", "11");
    s = default_spec();
    s.Vp = 32;
    bad_case("bad_Vp.bin", s, "Vp", "32");
    s = default_spec();
    s.B = 0;
    bad_case("bad_B.bin", s, "B", "> 0");
    s = default_spec();
    s.S = -1;
    bad_case("bad_S.bin", s, "steps", "-1");
    s = default_spec();
    s.bf16 = 7;
    bad_case("bad_flag.bin", s, "bf16", "7");
    s = default_spec();
    s.lowp = 3;
    bad_case("bad_lowp.bin", s, "header word 15", "3");
    s = default_spec();
    s.bad_token = 1;
    bad_case("bad_token.bin", s, "y[3]", "10");
    // absurd B*T*V in the header: must be rejected without size arithmetic overflowing
    const char* ph = tmp_path("huge_bt.bin");
    {
        int32_t h[256];
        memset(h, 0, sizeof(h));
        h[0] = 20240327;
        h[1] = 3;
        h[2] = 1 << 30;
        h[3] = 1 << 30;
        h[4] = 10;
        h[5] = 16;
        FILE* fh = fopen_check(ph, "wb");
        fwrite_check(h, sizeof(h), 1, fh, ph);
        fclose_check(fh, ph);
    }
    EXPECT_DIES(die_read, ph, ph, "file length", "truncated");
    const char* p = tmp_path("tiny.bin");
    FILE* f = fopen_check(p, "wb");
    fwrite_check("abc", 1, 3, f, p);
    fclose_check(f, p);
    EXPECT_DIES(die_read, p, p, "header", "truncated");
    p = tmp_path("missing.bin");
    EXPECT_DIES(die_read, p, p, "No such file");
}

int main(void) {
    test_read_v3();
    test_read_v2();
    test_bad();
    return test_summary();
}
