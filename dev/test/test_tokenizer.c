/*
 * test_tokenizer.c - tokenizer file reading (v1, v2), decoding, safe printing, bad files.
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_tokenizer.c -lm -o /tmp/test_tokenizer && /tmp/test_tokenizer
 * Also checks data/gpt2_tokenizer.bin (relative to the working directory) if it exists.
 */
#include <fcntl.h>
#include <stdint.h>

#include "dev/test/test_harness.h"
#include "llmc/data/tokenizer.h"
#include "llmc/core/utils.h"

static const char* const TOKENS[] = {"a", "bc", " world", "\xe2\x80", "\n", "\x01", "Hello", "<|endoftext|>"};
#define NTOK 8

// Writes a tokenizer file: header (magic, version, V, eot) then the table of `ntok` tokens of
// TOKENS (token `zero_at` gets length 0), then `cut` bytes removed from the end, `extra` added.
static void write_tokenizer(const char* path, int32_t magic, int32_t version, int32_t V, int32_t eot, int ntok,
                            int zero_at, size_t cut, size_t extra) {
    size_t cap = 1024 + 4096;
    unsigned char* b = (unsigned char*)calloc_check(cap, 1);
    int32_t h[4] = {magic, version, V, eot};
    memcpy(b, h, version == 1 ? 12 : 16);
    size_t n = 1024;
    for (int i = 0; i < ntok; i++) {
        size_t len = (i == zero_at) ? 0 : strlen(TOKENS[i % NTOK]);
        b[n++] = (unsigned char)len;
        memcpy(b + n, TOKENS[i % NTOK], len);
        n += len;
    }
    n -= cut;
    n += extra;
    FILE* f = fopen_check(path, "wb");
    fwrite_check(b, 1, n, f, path);
    fclose_check(f, path);
    free(b);
}

// captures what fn prints to stdout
static size_t capture_print(const char* piece, char* out, size_t cap) {
    const char* p = tmp_path("stdout.txt");
    fflush(stdout);
    int saved = dup(1);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    close(fd);
    safe_print_token(piece);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    FILE* f = fopen_check(p, "rb");
    size_t n = fread(out, 1, cap - 1, f);
    fclose_check(f, p);
    out[n] = '\0';
    return n;
}

static void test_good(void) {
    const char* p2 = tmp_path("tok_v2.bin");
    write_tokenizer(p2, 20240328, 2, NTOK, 7, NTOK, -1, 0, 0);
    Tokenizer t;
    tokenizer_init(&t, p2);
    CHECK(t.vocab_size == NTOK, "v2 vocab_size %u", t.vocab_size);
    CHECK(t.eot_token == 7, "v2 eot %d", t.eot_token);
    int ok = 1;
    for (uint32_t i = 0; i < NTOK; i++) {
        if (strcmp(tokenizer_decode(&t, i), TOKENS[i]) != 0) ok = 0;
    }
    CHECK(ok, "v2 decodes every token");
    CHECK(strcmp(tokenizer_decode(&t, 2), " world") == 0, "token 2 = ' world'");
    CHECK(strlen(tokenizer_decode(&t, 3)) == 2, "partial UTF-8 token kept as raw bytes");
    tokenizer_free(&t);
    CHECK(t.token_table == NULL && t.vocab_size == 0, "free zeroes the struct");

    const char* p1 = tmp_path("tok_v1.bin");
    write_tokenizer(p1, 20240328, 1, NTOK, 0, NTOK, -1, 0, 0);
    tokenizer_init(&t, p1);
    CHECK(t.vocab_size == NTOK && t.eot_token == NTOK - 1, "v1: V %u, eot %d (V-1)", t.vocab_size, t.eot_token);
    CHECK(strcmp(tokenizer_decode(&t, 6), "Hello") == 0 && strcmp(tokenizer_decode(&t, 7), "<|endoftext|>") == 0,
          "v1 decodes");
    tokenizer_free(&t);

    // a 255-byte token
    const char* pl = tmp_path("tok_long.bin");
    {
        unsigned char b[1024 + 1 + 255 + 2];
        memset(b, 0, sizeof(b));
        int32_t h[4] = {20240328, 2, 2, 1};
        memcpy(b, h, sizeof(h));
        b[1024] = 255;
        memset(b + 1025, 'x', 255);
        b[1280] = 1;
        b[1281] = 'y';
        FILE* f = fopen_check(pl, "wb");
        fwrite_check(b, 1, sizeof(b), f, pl);
        fclose_check(f, pl);
    }
    tokenizer_init(&t, pl);
    CHECK(strlen(tokenizer_decode(&t, 0)) == 255 && strcmp(tokenizer_decode(&t, 1), "y") == 0, "255-byte token");
    tokenizer_free(&t);

    char out[64];
    capture_print("Hello", out, sizeof(out));
    CHECK(strcmp(out, "Hello") == 0, "safe_print 'Hello' -> '%s'", out);
    capture_print("\n", out, sizeof(out));
    CHECK(strcmp(out, "\n") == 0, "safe_print newline kept");
    capture_print("\x01", out, sizeof(out));
    CHECK(out[0] == '\0', "safe_print skips a control byte");
    capture_print("\xe2", out, sizeof(out));
    CHECK(out[0] == '\0', "safe_print skips a lone high byte");
    capture_print("\xe2\x80\x99", out, sizeof(out));
    CHECK(strcmp(out, "\xe2\x80\x99") == 0, "safe_print keeps multi-byte tokens");
    capture_print("", out, sizeof(out));
    CHECK(out[0] == '\0', "safe_print of empty string");
    capture_print(NULL, out, sizeof(out));
    CHECK(out[0] == '\0', "safe_print of NULL");
}

static void test_real_file(void) {
    const char* p = "data/gpt2_tokenizer.bin";
    if (!test_file_exists(p)) {
        printf("skipped: %s not found (real tokenizer checks)\n", p);
        return;
    }
    Tokenizer t;
    tokenizer_init(&t, p);
    CHECK(t.vocab_size == 50257, "real V %u", t.vocab_size);
    CHECK(t.eot_token == 50256, "real eot %d", t.eot_token);
    CHECK(strcmp(tokenizer_decode(&t, 15496), "Hello") == 0, "15496 -> '%s'", tokenizer_decode(&t, 15496));
    CHECK(strcmp(tokenizer_decode(&t, 995), " world") == 0, "995 -> '%s'", tokenizer_decode(&t, 995));
    CHECK(strcmp(tokenizer_decode(&t, 50256), "<|endoftext|>") == 0, "50256 -> '%s'", tokenizer_decode(&t, 50256));
    tokenizer_free(&t);
}

static void die_init(void* ctx) {
    Tokenizer t;
    tokenizer_init(&t, (const char*)ctx);
    tokenizer_free(&t);
}

static void die_decode(void* ctx) {
    Tokenizer t;
    tokenizer_init(&t, (const char*)ctx);
    tokenizer_decode(&t, NTOK);
}

static void test_bad(void) {
    const char* p = tmp_path("bad_magic.bin");
    write_tokenizer(p, 20240520, 2, NTOK, 7, NTOK, -1, 0, 0);
    EXPECT_DIES(die_init, p, p, "bad magic 20240520", "20240328");

    p = tmp_path("bad_version.bin");
    write_tokenizer(p, 20240328, 3, NTOK, 7, NTOK, -1, 0, 0);
    EXPECT_DIES(die_init, p, p, "version", "3");

    p = tmp_path("short_header.bin");
    {
        int32_t h[4] = {20240328, 2, NTOK, 7};
        FILE* f = fopen_check(p, "wb");
        fwrite_check(h, sizeof(h), 1, f, p);
        fclose_check(f, p);
    }
    EXPECT_DIES(die_init, p, p, "header", "truncated");

    p = tmp_path("cut_token.bin");  // last token's bytes cut short
    write_tokenizer(p, 20240328, 2, NTOK, 7, NTOK, -1, 3, 0);
    EXPECT_DIES(die_init, p, p, "truncated", "token 7");

    p = tmp_path("missing_tokens.bin");  // table has fewer tokens than V
    write_tokenizer(p, 20240328, 2, NTOK + 5, 7, NTOK, -1, 0, 0);
    EXPECT_DIES(die_init, p, p, "truncated", "token 8");

    p = tmp_path("zero_len.bin");
    write_tokenizer(p, 20240328, 2, NTOK, 7, NTOK, 4, 0, 0);
    EXPECT_DIES(die_init, p, p, "token 4", "zero length");

    p = tmp_path("trailing.bin");
    write_tokenizer(p, 20240328, 2, NTOK, 7, NTOK, -1, 0, 2);
    EXPECT_DIES(die_init, p, p, "trailing bytes");

    p = tmp_path("bad_eot.bin");
    write_tokenizer(p, 20240328, 2, NTOK, NTOK, NTOK, -1, 0, 0);
    EXPECT_DIES(die_init, p, p, "end-of-text", "8");

    p = tmp_path("zero_vocab.bin");
    write_tokenizer(p, 20240328, 2, 0, 0, 0, -1, 0, 0);
    EXPECT_DIES(die_init, p, p, "vocab size");

    p = tmp_path("nope.bin");
    EXPECT_DIES(die_init, p, p, "No such file");

    p = tmp_path("ok_for_decode.bin");
    write_tokenizer(p, 20240328, 2, NTOK, 7, NTOK, -1, 0, 0);
    EXPECT_DIES(die_decode, p, "token id 8", "out of range");
}

int main(void) {
    test_good();
    test_real_file();
    test_bad();
    return test_summary();
}
