/*
 * tcast_cli.c - command-line access to llmc/numerics/tcast.h (doc/TCAST.md), for the cross-check
 * against the numpy reference (dev/test/test_tcast_reference.py drives it).
 *
 *   tcast_cli info CODE
 *       key=value lines of number code CODE: kind bits ebits mbits bias infnan, then emax emin
 *       (floats, ints, exponent types), max smallest_normal eps midmax (floats, ints), maxint
 *       minint (ints, uints), code (canonical). Reals printed with %.17g (exact round trip).
 *   tcast_cli dtype DTYPE
 *       key=value lines: name number scale zero tile dim round scalemode sparse (scale / zero:
 *       canonical number codes or none, scale pN for a fixed scale; tile -1 = per tensor (also
 *       for unscaled and fixed-scale types), 0 = channel, X; dim as given, default -1; sparse M:N
 *       or none).
 *   tcast_cli list
 *       the predefined data types of doc/TCAST.md section 3, one `NAME=CANONICAL` line each
 *       (CANONICAL: tcast_datatype_describe, e.g. q115=int16_p-1@even@max).
 *   tcast_cli cast DTYPE ROWS COLS DIM SEED IN OUT [STATS]
 *       reads ROWS * COLS little-endian float32 (row-major) from IN, casts along DIM (-1, 1, 0,
 *       -2) with random seed SEED (decimal uint64), writes OUT (via OUT.tmp and a rename, so OUT
 *       exists only after success) and optionally STATS: values=, saturated=, flushed= and
 *       scale_exp[E]=COUNT per non-empty histogram bin (E an exponent, or under / over).
 *
 * Errors: one line `error: <what>` on stderr and exit status 1.
 *   cc -O2 -Wall -Wextra -I. dev/test/tcast_cli.c -lm -o build/tests/tcast_cli
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llmc/numerics/tcast.h"

static void fail(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    exit(1);
}

static const char* const KIND_NAMES[] = {"float", "int", "uint", "exponent"};
static const char* const INFNAN_NAMES[] = {"ieee", "fn", "fnuz", "none"};

static int cmd_info(const char* code) {
    TcastNumberSpec s;
    char err[256], buf[64];
    if (tcast_parse_number(code, &s, err, sizeof(err)) != 0) fail("%s", err);
    printf("kind=%s\nbits=%d\nebits=%d\nmbits=%d\nbias=%d\ninfnan=%s\n", KIND_NAMES[s.kind], s.bits, s.ebits, s.mbits, s.bias,
           INFNAN_NAMES[s.infnan]);
    if (s.kind != TCAST_KIND_UINT) printf("emax=%d\nemin=%d\n", s.emax, s.emin);
    if (s.kind == TCAST_KIND_FLOAT || s.kind == TCAST_KIND_INT)
        printf("max=%.17g\nsmallest_normal=%.17g\neps=%.17g\nmidmax=%.17g\n", s.max, s.smallest_normal, s.eps, s.midmax);
    if (s.kind == TCAST_KIND_INT || s.kind == TCAST_KIND_UINT) printf("maxint=%d\nminint=%d\n", s.maxint, s.minint);
    printf("code=%s\n", tcast_number_code(&s, buf, sizeof(buf)));
    return 0;
}

static int cmd_dtype(const char* text) {
    TcastDataType dt;
    char err[256], num[64], sc[64] = "none", zero[64] = "none", sparse[16] = "none";
    if (tcast_parse_datatype(text, &dt, err, sizeof(err)) != 0) fail("%s", err);
    if (dt.has_scale) {
        tcast_number_code(&dt.scale.scale, sc, sizeof(sc));
        if (dt.scale.has_zero) tcast_number_code(&dt.scale.zero, zero, sizeof(zero));
    } else if (dt.fixed) {
        snprintf(sc, sizeof(sc), "p%d", dt.fixed_exp);
    }
    if (dt.sparse_n > 0) snprintf(sparse, sizeof(sparse), "%d:%d", dt.sparse_m, dt.sparse_n);
    printf("name=%s\nnumber=%s\nscale=%s\nzero=%s\ntile=%d\ndim=%d\nround=%s\nscalemode=%s\nsparse=%s\n", dt.name,
           tcast_number_code(&dt.number, num, sizeof(num)), sc, zero, dt.has_scale ? dt.scale.tile : -1,
           dt.has_scale ? dt.scale.dim : -1, tcast_round_name(dt.round), tcast_scale_mode_name(dt.scale_mode), sparse);
    return 0;
}

static int cmd_list(void) {
    const char *name, *num, *sc;
    for (int i = 0; tcast_predefined(i, &name, &num, &sc) == 0; i++) {
        TcastDataType dt;
        char err[256], desc[160];
        if (tcast_parse_datatype(name, &dt, err, sizeof(err)) != 0) fail("predefined %s: %s", name, err);
        printf("%s=%s\n", name, tcast_datatype_describe(&dt, desc, sizeof(desc)));
    }
    return 0;
}

// A whole decimal int argument in [lo, hi].
static int parse_int(const char* what, const char* s, long lo, long hi) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) fail("%s '%s': expected an integer in %ld..%ld", what, s, lo, hi);
    return (int)v;
}

static uint64_t parse_seed(const char* s) {
    char* end;
    errno = 0;
    if (s[0] < '0' || s[0] > '9') fail("SEED '%s': expected a decimal uint64", s);
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0') fail("SEED '%s': expected a decimal uint64", s);
    return (uint64_t)v;
}

// Writes len bytes to path via path.tmp and a rename (so that path appears only complete); fails on error.
static void write_file(const char* path, const void* data, size_t len) {
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) fail("%s: path too long", path);
    FILE* f = fopen(tmp, "wb");
    if (f == NULL) fail("%s: cannot open for writing: %s", tmp, strerror(errno));
    size_t w = fwrite(data, 1, len, f);
    if (fclose(f) != 0 || w != len) {
        remove(tmp);
        fail("%s: write failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        fail("%s: cannot rename %s: %s", path, tmp, strerror(errno));
    }
}

// The STATS file's text (see the top of the file).
static char* stats_text(const TcastStats* st, size_t* len) {
    size_t cap = 256 + 48 * (size_t)TCAST_HIST_BINS, n = 0;
    char* t = (char*)malloc(cap);
    if (t == NULL) fail("out of memory");
    n += (size_t)snprintf(t + n, cap - n, "values=%lld\nsaturated=%lld\nflushed=%lld\n", st->values, st->saturated, st->flushed);
    for (int b = 0; b < TCAST_HIST_BINS; b++) {
        if (st->hist[b] == 0) continue;
        if (b == TCAST_HIST_UNDER) n += (size_t)snprintf(t + n, cap - n, "scale_exp[under]=%lld\n", st->hist[b]);
        else if (b == TCAST_HIST_OVER) n += (size_t)snprintf(t + n, cap - n, "scale_exp[over]=%lld\n", st->hist[b]);
        else n += (size_t)snprintf(t + n, cap - n, "scale_exp[%d]=%lld\n", tcast_hist_exp(b), st->hist[b]);
    }
    *len = n;
    return t;
}

static int cmd_cast(int argc, char** argv) {
    if (argc != 9 && argc != 10) fail("usage: tcast_cli cast DTYPE ROWS COLS DIM SEED IN OUT [STATS]");
    TcastDataType dt;
    char err[256];
    if (tcast_parse_datatype(argv[2], &dt, err, sizeof(err)) != 0) fail("%s", err);
    int rows = parse_int("ROWS", argv[3], 1, 1 << 30), cols = parse_int("COLS", argv[4], 1, 1 << 30);
    int dim = parse_int("DIM", argv[5], -2, 1);
    uint64_t seed = parse_seed(argv[6]);
    const char *in = argv[7], *out = argv[8], *stats_path = argc == 10 ? argv[9] : NULL;
    size_t count = (size_t)rows * (size_t)cols, bytes = count * 4;

    FILE* f = fopen(in, "rb");
    if (f == NULL) fail("%s: cannot open: %s", in, strerror(errno));
    unsigned char* raw = (unsigned char*)malloc(bytes);
    float* x = (float*)malloc(count * sizeof(float));
    float* y = (float*)malloc(count * sizeof(float));
    if (raw == NULL || x == NULL || y == NULL) fail("out of memory for %d x %d", rows, cols);
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) fail("%s: cannot stat: %s", in, strerror(errno));
    if ((size_t)sb.st_size != bytes)
        fail("%s: %lld bytes, expected %zu (%d x %d float32)", in, (long long)sb.st_size, bytes, rows, cols);
    size_t got = fread(raw, 1, bytes, f);
    fclose(f);
    if (got != bytes) fail("%s: read error after %zu of %zu bytes", in, got, bytes);
    for (size_t i = 0; i < count; i++) {  // little-endian, whatever the host order
        uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        x[i] = tcast_f32_from_bits(u);
    }

    TcastStats* st = (TcastStats*)calloc(1, sizeof(TcastStats));
    if (st == NULL) fail("out of memory");
    if (tcast_cast_host(&dt, x, y, rows, cols, dim, seed, st, err, sizeof(err)) != 0) fail("%s", err);

    for (size_t i = 0; i < count; i++) {
        uint32_t u = tcast_f32_bits(y[i]);
        for (int k = 0; k < 4; k++) raw[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    if (stats_path != NULL) {
        size_t len;
        char* text = stats_text(st, &len);
        write_file(stats_path, text, len);
        free(text);
    }
    write_file(out, raw, bytes);  // last: OUT exists only when everything succeeded
    free(raw);
    free(x);
    free(y);
    free(st);
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "info") == 0) return cmd_info(argv[2]);
    if (argc == 3 && strcmp(argv[1], "dtype") == 0) return cmd_dtype(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "cast") == 0) return cmd_cast(argc, argv);
    if (argc == 2 && strcmp(argv[1], "list") == 0) return cmd_list();
    fail("usage: tcast_cli info CODE | dtype DTYPE | list | cast DTYPE ROWS COLS DIM SEED IN OUT [STATS]");
}
