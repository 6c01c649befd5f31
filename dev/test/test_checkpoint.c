/*
 * test_checkpoint.c - model checkpoint round trips (v3 fp32, v5 bf16), atomic writes, bad files,
 * and the bf16 conversions.
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_checkpoint.c -lm -o /tmp/test_checkpoint && /tmp/test_checkpoint
 *   g++ -std=c++17 -O2 -Wall -Wextra -x c++ -I. dev/test/test_checkpoint.c -lm -o /tmp/test_checkpoint_cpp
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "dev/test/test_harness.h"
#include "llmc/model/checkpoint.h"
#include "llmc/numerics/bf16.h"
#include "llmc/core/utils.h"

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

// deterministic pseudo-random floats spanning many magnitudes and both signs
static float test_value(size_t i) {
    uint32_t x = (uint32_t)i * 2654435761u + 12345u;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    float mant = (float)(x & 0xFFFFFF) / (float)0x1000000;  // [0,1)
    int e = (int)((x >> 24) & 15) - 8;
    float v = ldexpf(mant + 0.5f, e);
    return (x & 0x80000000u) ? -v : v;
}

static void write_file(const char* path, const void* data, size_t n) {
    FILE* f = fopen_check(path, "wb");
    fwrite_check(data, 1, n, f, path);
    fclose_check(f, path);
}

static unsigned char* read_file(const char* path, size_t* n) {
    FILE* f = fopen_check(path, "rb");
    *n = file_size_check(f, path);
    unsigned char* b = (unsigned char*)malloc_check(*n);
    fread_check(b, 1, *n, f, path, "file");
    fclose_check(f, path);
    return b;
}

static GPT2Config tiny_config(void) {
    GPT2Config c;
    c.max_seq_len = 32;
    c.vocab_size = 250;
    c.padded_vocab_size = 256;
    c.num_layers = 2;
    c.num_heads = 4;
    c.channels = 64;
    return c;
}

static void test_bf16(void) {
    // exact values
    CHECK(bf16_from_float(1.0f) == 0x3F80, "1.0 -> %04x", bf16_from_float(1.0f));
    CHECK(bf16_from_float(-2.0f) == 0xC000, "-2.0 -> %04x", bf16_from_float(-2.0f));
    CHECK(bf16_from_float(0.0f) == 0x0000, "+0");
    CHECK(bf16_from_float(-0.0f) == 0x8000, "-0");
    // ties to even: 1 + 2^-8 is half way between 1 and 1 + 2^-7 -> 1 (even)
    CHECK(bf16_from_float(1.0f + ldexpf(1.0f, -8)) == 0x3F80, "1+2^-8 -> %04x", bf16_from_float(1.0f + ldexpf(1.0f, -8)));
    // 1 + 3*2^-8 is half way between 1+2^-7 (odd) and 1+2^-6 -> up to 1+2^-6
    CHECK(bf16_from_float(1.0f + 3.0f * ldexpf(1.0f, -8)) == 0x3F82, "1+3*2^-8 -> %04x",
          bf16_from_float(1.0f + 3.0f * ldexpf(1.0f, -8)));
    // just above / below a tie
    CHECK(bf16_from_float(u2f(0x3F808001)) == 0x3F81, "above tie rounds up");
    CHECK(bf16_from_float(u2f(0x3F807FFF)) == 0x3F80, "below tie rounds down");
    CHECK(bf16_from_float(u2f(0xBF808000)) == 0xBF80, "negative tie to even");
    CHECK(bf16_from_float(u2f(0xBF818000)) == 0xBF82, "negative tie up");
    // Inf and NaN
    CHECK(bf16_from_float(INFINITY) == 0x7F80, "+Inf -> %04x", bf16_from_float(INFINITY));
    CHECK(bf16_from_float(-INFINITY) == 0xFF80, "-Inf -> %04x", bf16_from_float(-INFINITY));
    uint16_t qn = bf16_from_float(NAN);
    CHECK((qn & 0x7F80) == 0x7F80 && (qn & 0x7F) != 0 && (qn & 0x40), "NaN stays quiet NaN: %04x", qn);
    uint16_t nn = bf16_from_float(-NAN);
    CHECK((nn & 0x8000) && (nn & 0x7F80) == 0x7F80 && (nn & 0x40), "-NaN keeps sign: %04x", nn);
    // a NaN whose payload lives only in the low 16 bits must not become Inf
    uint16_t lown = bf16_from_float(u2f(0x7F800001));
    CHECK((lown & 0x7F80) == 0x7F80 && (lown & 0x7F) != 0, "low-payload signaling NaN -> NaN: %04x", lown);
    uint16_t lown2 = bf16_from_float(u2f(0xFF80FFFF));
    CHECK(lown2 == 0xFFC0, "0xFF80FFFF -> %04x (quiet, sign kept)", lown2);
    // overflow: the largest finite float rounds past bf16's max finite -> Inf
    CHECK(bf16_from_float(FLT_MAX) == 0x7F80, "FLT_MAX -> %04x", bf16_from_float(FLT_MAX));
    CHECK(bf16_from_float(-FLT_MAX) == 0xFF80, "-FLT_MAX -> %04x", bf16_from_float(-FLT_MAX));
    CHECK(bf16_from_float(u2f(0x7F7F7FFF)) == 0x7F7F, "just below the overflow tie stays finite");
    CHECK(bf16_from_float(u2f(0x7F7F8000)) == 0x7F80, "overflow tie (odd max) -> Inf");
    // subnormals round like everything else (no flush to zero)
    CHECK(bf16_from_float(u2f(0x00000001)) == 0x0000, "tiny subnormal -> 0");
    CHECK(bf16_from_float(u2f(0x00008000)) == 0x0000, "subnormal tie to even 0");
    CHECK(bf16_from_float(u2f(0x00018000)) == 0x0002, "subnormal tie up to 2");
    CHECK(bf16_from_float(u2f(0x00010000)) == 0x0001, "smallest bf16 subnormal exact");
    CHECK(bf16_from_float(u2f(0x8000C000)) == 0x8001, "negative subnormal rounds up in magnitude");
    CHECK(bf16_from_float(u2f(0x007FFFFF)) == 0x0080, "largest float subnormal rounds to smallest normal");
    CHECK(bf16_to_float(0x0001) == ldexpf(1.0f, -133), "bf16 0x0001 = 2^-133");
    CHECK(bf16_to_float(0x3F80) == 1.0f && bf16_to_float(0xC049) == u2f(0xC0490000), "to_float");

    // all 65536 patterns: to_float then from_float is the identity for non-NaN; NaN stays NaN
    int bad_roundtrip = 0, bad_nan = 0, bad_widen = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = bf16_to_float((uint16_t)b);
        if (f2u(f) != (b << 16)) bad_widen++;
        uint16_t back = bf16_from_float(f);
        int is_nan = ((b & 0x7F80) == 0x7F80) && (b & 0x7F);
        if (is_nan) {
            if (!(((back & 0x7F80) == 0x7F80) && (back & 0x7F) && (back & 0x8000) == (b & 0x8000) &&
                  (back | 0x40) == (b | 0x40))) {
                bad_nan++;
            }
        } else if (back != b) {
            bad_roundtrip++;
        }
    }
    CHECK(bad_widen == 0, "%d patterns widen wrongly", bad_widen);
    CHECK(bad_roundtrip == 0, "%d non-NaN patterns do not round trip", bad_roundtrip);
    CHECK(bad_nan == 0, "%d NaN patterns lose NaN-ness/sign/payload", bad_nan);

    // random floats: the result is the nearest bf16 (compare against the two neighbours)
    int bad_nearest = 0;
    for (size_t i = 0; i < 200000; i++) {
        float x = test_value(i);
        uint16_t r = bf16_from_float(x);
        uint32_t u = f2u(x);
        float lo = u2f(u & 0xFFFF0000u), hi = u2f((u & 0xFFFF0000u) + 0x10000u);
        float got = bf16_to_float(r);
        double dlo = fabs((double)x - lo), dhi = fabs((double)x - hi), dg = fabs((double)x - got);
        if (dg > dlo || dg > dhi) bad_nearest++;
    }
    CHECK(bad_nearest == 0, "%d values not rounded to nearest", bad_nearest);
}

static void test_roundtrip(void) {
    GPT2Config c = tiny_config();
    size_t n = gpt2_num_parameters(&c);
    float* params = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) params[i] = test_value(i);
    params[3] = -0.0f;
    params[7] = u2f(0x00000003);  // a float subnormal

    const char* p3 = tmp_path("model_v3.bin");
    checkpoint_write_model(p3, &c, params, 3);
    char tmp3[600];
    snprintf(tmp3, sizeof(tmp3), "%s.tmp", p3);
    CHECK(!test_file_exists(tmp3), "no .tmp left after v3 write");
    size_t len;
    unsigned char* raw = read_file(p3, &len);
    CHECK(len == 1024 + 4 * n, "v3 file length %zu", len);
    int32_t h[8];
    memcpy(h, raw, sizeof(h));
    CHECK(h[0] == 20240326 && h[1] == 3 && h[2] == 32 && h[3] == 250 && h[4] == 2 && h[5] == 4 && h[6] == 64 && h[7] == 256,
          "v3 header words %d %d %d %d %d %d %d %d", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    int zeros = 1;
    for (int i = 8; i < 256; i++) {
        int32_t w;
        memcpy(&w, raw + 4 * i, 4);
        if (w != 0) zeros = 0;
    }
    CHECK(zeros, "unused header words are 0");
    free(raw);

    GPT2Config r;
    memset(&r, 0, sizeof(r));
    CHECK(checkpoint_read_header(p3, &r) == 3, "read_header returns version 3");
    CHECK(memcmp(&r, &c, sizeof(c)) == 0, "v3 header config matches");
    memset(&r, 0, sizeof(r));
    float* back = checkpoint_read_model(p3, &r);
    CHECK(memcmp(&r, &c, sizeof(c)) == 0, "v3 read config matches");
    CHECK(memcmp(back, params, n * sizeof(float)) == 0, "v3 round trip is bit-exact");
    free(back);

    const char* p5 = tmp_path("model_v5.bin");
    checkpoint_write_model(p5, &c, params, 5);
    char tmp5[600];
    snprintf(tmp5, sizeof(tmp5), "%s.tmp", p5);
    CHECK(!test_file_exists(tmp5), "no .tmp left after v5 write");
    raw = read_file(p5, &len);
    CHECK(len == 1024 + 2 * n, "v5 file length %zu", len);
    int32_t v;
    memcpy(&v, raw + 4, 4);
    CHECK(v == 5, "v5 version word %d", v);
    int bad_bits = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t b;
        memcpy(&b, raw + 1024 + 2 * i, 2);
        if (b != bf16_from_float(params[i])) bad_bits++;
    }
    CHECK(bad_bits == 0, "%d stored bf16 patterns differ from bf16_from_float", bad_bits);
    free(raw);
    CHECK(checkpoint_read_header(p5, &r) == 5, "read_header returns version 5");
    back = checkpoint_read_model(p5, &r);
    CHECK(memcmp(&r, &c, sizeof(c)) == 0, "v5 read config matches");
    int bad_vals = 0;
    for (size_t i = 0; i < n; i++) {
        if (f2u(back[i]) != f2u(bf16_to_float(bf16_from_float(params[i])))) bad_vals++;
    }
    CHECK(bad_vals == 0, "%d v5 values differ from bf16_from_float", bad_vals);
    free(back);

    // a bigger config exercises the chunked bf16 path (more than 2^20 parameters)
    GPT2Config big;
    gpt2_config_from_descriptor(&big, "d2,c128,h4,t64");
    size_t nb = gpt2_num_parameters(&big);
    CHECK(nb > ((size_t)1 << 20), "big config has %zu params", nb);
    float* pb = (float*)malloc_check(nb * sizeof(float));
    for (size_t i = 0; i < nb; i++) pb[i] = test_value(i + 7);
    const char* pbig = tmp_path("model_big_v5.bin");
    checkpoint_write_model(pbig, &big, pb, 5);
    back = checkpoint_read_model(pbig, &r);
    bad_vals = 0;
    for (size_t i = 0; i < nb; i++) {
        if (f2u(back[i]) != f2u(bf16_to_float(bf16_from_float(pb[i])))) bad_vals++;
    }
    CHECK(bad_vals == 0 && r.channels == 128, "big v5 round trip (%d bad)", bad_vals);
    free(back);
    free(pb);
    free(params);
}

static void test_atomic(void) {
    GPT2Config c = tiny_config();
    size_t n = gpt2_num_parameters(&c);
    float* params = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) params[i] = (float)i;
    const char* p = tmp_path("atomic.bin");
    checkpoint_write_model(p, &c, params, 3);

    // an interrupted writer: opens <path>.tmp, writes half a file, never commits
    FILE* f = atomic_open(p);
    const char junk[] = "half-written garbage";
    fwrite_check(junk, 1, sizeof(junk), f, p);
    fclose_check(f, p);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", p);
    CHECK(test_file_exists(tmp), "uncommitted write leaves only the .tmp");
    GPT2Config r;
    float* back = checkpoint_read_model(p, &r);
    CHECK(memcmp(back, params, n * sizeof(float)) == 0, "previous checkpoint survives an uncommitted write");
    free(back);

    // also a writer killed mid-write in a child process
    pid_t pid = fork();
    if (pid == 0) {
        FILE* g = atomic_open(p);
        fwrite_check(params, sizeof(float), n / 2, g, p);
        fflush(g);
        _exit(9);  // dies before atomic_commit
    }
    int status;
    waitpid(pid, &status, 0);
    back = checkpoint_read_model(p, &r);
    CHECK(memcmp(back, params, n * sizeof(float)) == 0, "previous checkpoint survives a killed writer");
    free(back);

    // the next successful write replaces the stale .tmp and removes it
    for (size_t i = 0; i < n; i++) params[i] = -(float)i;
    checkpoint_write_model(p, &c, params, 3);
    CHECK(!test_file_exists(tmp), "stale .tmp gone after a committed write");
    back = checkpoint_read_model(p, &r);
    CHECK(memcmp(back, params, n * sizeof(float)) == 0, "overwrite took effect");
    free(back);

    // generic atomic_open/atomic_commit on a file without a directory part
    char cwd[512];
    CHECK(getcwd(cwd, sizeof(cwd)) != NULL, "getcwd");
    CHECK(chdir(test_tmpdir()) == 0, "chdir");
    FILE* g = atomic_open("plain.txt");
    fwrite_check("hello\n", 1, 6, g, "plain.txt");
    atomic_commit(g, "plain.txt");
    CHECK(test_file_exists("plain.txt") && !test_file_exists("plain.txt.tmp"), "atomic write in cwd");
    CHECK(chdir(cwd) == 0, "chdir back");
    free(params);
}

// ---- bad input ----

typedef struct {
    const char* path;
    int write_version;
    GPT2Config cfg;
} BadCtx;

static void die_read(void* ctx) {
    GPT2Config c;
    float* p = checkpoint_read_model((const char*)ctx, &c);
    free(p);
}
static void die_read_header(void* ctx) {
    GPT2Config c;
    checkpoint_read_header((const char*)ctx, &c);
}
static void die_write(void* ctx) {
    BadCtx* b = (BadCtx*)ctx;
    float x[4] = {0, 0, 0, 0};
    checkpoint_write_model(b->path, &b->cfg, x, b->write_version);
}

// writes a checkpoint-like file: header words (first 8 given), then `body` bytes of zeros
static void write_fake(const char* path, const int32_t words[8], size_t body) {
    size_t n = 1024 + body;
    unsigned char* b = (unsigned char*)calloc_check(n, 1);
    memcpy(b, words, 8 * sizeof(int32_t));
    write_file(path, b, n);
    free(b);
}

static void test_bad_input(void) {
    GPT2Config c = tiny_config();
    size_t n = gpt2_num_parameters(&c);
    int32_t good[8] = {20240326, 3, 32, 250, 2, 4, 64, 256};
    int32_t w[8];

    const char* p_ok = tmp_path("fake_ok.bin");
    write_fake(p_ok, good, 4 * n);
    GPT2Config r;
    CHECK(checkpoint_read_header(p_ok, &r) == 3, "hand-made header accepted");

    const char* p = tmp_path("bad_magic.bin");
    memcpy(w, good, sizeof(w));
    w[0] = 20240520;
    write_fake(p, w, 4 * n);
    EXPECT_DIES(die_read, p, p, "magic", "20240520");

    p = tmp_path("bad_version.bin");
    memcpy(w, good, sizeof(w));
    w[1] = 4;
    write_fake(p, w, 4 * n);
    EXPECT_DIES(die_read, p, p, "version", "4");

    p = tmp_path("short.bin");
    write_fake(p, good, 4 * n - 3);
    EXPECT_DIES(die_read, p, p, "truncated");
    EXPECT_DIES(die_read_header, p, p, "file length");

    p = tmp_path("long.bin");
    write_fake(p, good, 4 * n + 5);
    EXPECT_DIES(die_read, p, p, "trailing bytes");

    p = tmp_path("v5_as_fp32_size.bin");  // says bf16 but has fp32-sized body
    memcpy(w, good, sizeof(w));
    w[1] = 5;
    write_fake(p, w, 4 * n);
    EXPECT_DIES(die_read, p, p, "file length");

    p = tmp_path("tiny_header.bin");
    write_file(p, good, sizeof(good));
    EXPECT_DIES(die_read, p, p, "header", "truncated");

    p = tmp_path("empty.bin");
    write_file(p, "", 0);
    EXPECT_DIES(die_read, p, p, "truncated");

    const char* fields[6] = {"max_seq_len", "vocab_size", "num_layers", "num_heads", "channels", "padded_vocab_size"};
    for (int i = 0; i < 6; i++) {
        static char names[6][64];
        snprintf(names[i], sizeof(names[i]), "bad_field_%d.bin", i);
        p = tmp_path(names[i]);
        memcpy(w, good, sizeof(w));
        w[2 + i] = (i % 2 == 0) ? -7 : 0;
        write_fake(p, w, 4 * n);
        EXPECT_DIES(die_read, p, p, fields[i], "> 0");
    }

    p = tmp_path("bad_heads.bin");
    memcpy(w, good, sizeof(w));
    w[5] = 3;  // 64 % 3 != 0
    write_fake(p, w, 4 * n);
    EXPECT_DIES(die_read, p, p, "divisible");

    p = tmp_path("bad_vp.bin");
    memcpy(w, good, sizeof(w));
    w[7] = 128;  // < V = 250
    write_fake(p, w, 4 * n);
    EXPECT_DIES(die_read, p, p, "padded_vocab_size");

    p = tmp_path("huge.bin");
    memcpy(w, good, sizeof(w));
    w[4] = 2000000000;  // absurd layer count must not overflow into a plausible size
    w[6] = 2000000000;
    w[5] = 1;
    write_fake(p, w, 4 * n);
    EXPECT_DIES(die_read, p, p, "too large");

    p = tmp_path("does_not_exist.bin");
    EXPECT_DIES(die_read, p, p, "cannot open");

    static BadCtx bv;
    bv.path = tmp_path("write_bad_version.bin");
    bv.write_version = 4;
    bv.cfg = c;
    EXPECT_DIES(die_write, &bv, bv.path, "version");
    static BadCtx bc;
    bc.path = tmp_path("write_bad_cfg.bin");
    bc.write_version = 3;
    bc.cfg = c;
    bc.cfg.num_heads = 0;
    EXPECT_DIES(die_write, &bc, bc.path, "num_heads");
    CHECK(!test_file_exists(bc.path), "no file written for a bad config");
    static BadCtx bd;
    bd.path = "/nonexistent_dir_llmc/x.bin";
    bd.write_version = 3;
    gpt2_config_from_descriptor(&bd.cfg, "d1,c4,h1,t1");
    EXPECT_DIES(die_write, &bd, "/nonexistent_dir_llmc/x.bin.tmp", "cannot open");
}

int main(void) {
    test_bf16();
    test_roundtrip();
    test_atomic();
    test_bad_input();
    return test_summary();
}
