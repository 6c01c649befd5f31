/*
 * test_cli.c - llmc/core/cli.h: the ranges, special values and choices a flag table declares.
 *   - in range, at both ends and the special values are accepted; one past the ends, NaN, Inf,
 *     text and trailing characters are refused naming the flag;
 *   - string choices; free strings;
 *   - the table itself: a name declared twice, an empty range and an invalid default are internal
 *     errors found before any argument is looked at.
 * (dev/test/test_flags.py checks every flag of the real trainers.)
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dev/test/test_harness.h"
#include "llmc/core/cli.h"

static int g_i = 5;
static float g_f = 0.5f;
static const char* g_s = "cosine";
static const char* g_free = "x";

static void table(CliFlag* f) {
    const CliFlag t[4] = {
        {"-n", CLI_INT, &g_i, "an int", 1, 10, "-1"},
        {"-q", CLI_FLOAT, &g_f, "a fraction", 0, 1, NULL},
        {"-k", CLI_STRING, &g_s, "a choice", 0, 0, "cosine|linear"},
        {"-o", CLI_STRING, &g_free, "free text", 0, 0, NULL},
    };
    memcpy(f, t, sizeof(t));
}

static int parse(const char* a, const char* b) {
    CliFlag f[4];
    table(f);
    char* argv[] = {(char*)"prog", (char*)a, (char*)b, NULL};
    cli_parse(3, argv, f, 4, "doc");
    return 1;
}

typedef struct { const char* a; const char* b; } Args;
static void die_parse(void* ctx) {
    Args* x = (Args*)ctx;
    parse(x->a, x->b);
}

static void test_accepts(void) {
    CHECK(parse("-n", "1") && g_i == 1, "low end");
    CHECK(parse("-n", "10") && g_i == 10, "high end");
    CHECK(parse("-n", "-1") && g_i == -1, "special value -1");
    CHECK(parse("-q", "0") && g_f == 0.0f && parse("-q", "1") && g_f == 1.0f && parse("-q", "2.5e-1") && g_f == 0.25f, "float range");
    CHECK(parse("-k", "linear") && strcmp(g_s, "linear") == 0, "a choice");
    CHECK(parse("-o", "anything at all") && strcmp(g_free, "anything at all") == 0, "free text");
}

static void test_refuses(void) {
    static Args cases[] = {{"-n", "0"}, {"-n", "11"}, {"-n", "-2"}, {"-n", "abc"}, {"-n", "5x"}, {"-n", "1.5"}, {"-n", ""},
                           {"-n", "99999999999"}, {"-q", "nan"}, {"-q", "inf"}, {"-q", "-inf"}, {"-q", "1.0001"}, {"-q", "-0.01"},
                           {"-q", "1e999"}, {"-q", "0.5 "}, {"-k", "Cosine"}, {"-k", "cos"}, {"-k", ""}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) EXPECT_DIES(die_parse, &cases[i], cases[i].a);
    static Args unknown = {"-z", "1"};
    EXPECT_DIES(die_parse, &unknown, "-z: unknown flag");
}

static void die_table(void* ctx) {
    int which = *(int*)ctx;
    static int a = 3;
    CliFlag f[2] = {{"-a", CLI_INT, &a, "a", 0, 5, NULL}, {"-b", CLI_INT, &a, "b", 0, 5, NULL}};
    if (which == 0) f[1].name = "-a";                      // declared twice
    if (which == 1) { f[1].min = 5; f[1].max = 1; }         // empty range
    if (which == 2) { f[1].min = 4; f[1].max = 9; }         // default 3 outside
    char* argv[] = {(char*)"prog", NULL};
    cli_parse(1, argv, f, 2, "doc");
}

static void test_table(void) {
    static int w[3] = {0, 1, 2};
    EXPECT_DIES(die_table, &w[0], "-a", "declares it twice");
    EXPECT_DIES(die_table, &w[1], "-b", "range", "empty");
    EXPECT_DIES(die_table, &w[2], "-b", "default 3");
    char buf[128];
    CliFlag u = {"-u", CLI_INT, &g_i, "undeclared", 0, 0, NULL};
    cli_describe_range(&u, buf, sizeof(buf));
    CHECK(strcmp(buf, "any") == 0, "an undeclared range reads 'any' (test_flags.py fails on such a flag): %s", buf);
    CliFlag h = {"-h", CLI_FLOAT, &g_f, "half-open", 0, INFINITY, NULL};
    cli_describe_range(&h, buf, sizeof(buf));
    CHECK(strcmp(buf, ">= 0") == 0, "unbounded above: %s", buf);
}

int main(void) {
    test_accepts();
    test_refuses();
    test_table();
    return test_summary();
}
