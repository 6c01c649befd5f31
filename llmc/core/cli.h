// cli.h - table-driven command-line parsing shared by the trainers.
//
// Flags are llm.c-style: `-b 4 -t 256 -e d12 ...`, every flag takes exactly one value; `--help`
// prints the table. Unknown flags, missing values, unparsable numbers, NaN / Inf, numbers outside
// the flag's declared range and strings outside its declared choices are errors that name the flag
// (`error: <flag>: <problem>`, exit 1), so a typo never silently trains with a default.
//
// Every numeric flag declares its valid values in its table row: the closed range [min, max]
// (-INFINITY / INFINITY: unbounded on that side) plus, in `values`, the special values accepted
// outside it, e.g. {"-x", CLI_INT, &x, "steps (-1 = one epoch)", 1, INT_MAX, "-1"}. A string flag's
// `values` lists its choices ("cosine|linear|constant|wsd"), NULL for free text (paths: the trainers
// check those files before touching data or the GPU). A numeric row that declares nothing (min ==
// max == 0, values NULL) accepts any finite number; dev/test/test_flags.py fails on such a flag.
#pragma once

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/core/utils.h"

typedef enum { CLI_INT, CLI_FLOAT, CLI_STRING } CliType;

typedef struct {
    const char* name;    // e.g. "-b"
    CliType type;
    void* target;        // int*, float* or const char** holding the default on entry
    const char* help;
    double min, max;     // numeric flags: valid values are min <= v <= max (or one of `values`)
    const char* values;  // "|"-separated: numeric flags' special values outside [min, max] (e.g. "-1");
                         // string flags' accepted choices; NULL: none / free text
} CliFlag;

static inline const char* cli_type_name_(CliType t) {
    return t == CLI_INT ? "int" : (t == CLI_FLOAT ? "float" : "string");
}

// 1 when the numeric flag declares no range (see the top of the file).
static inline int cli_range_undeclared_(const CliFlag* f) {
    return f->type != CLI_STRING && f->min == 0.0 && f->max == 0.0 && f->values == NULL;
}

// The valid values of f as text: "1 .. 65536", ">= 0", "0 .. 0 or 32|64|128", "cosine|linear|...".
static inline void cli_describe_range(const CliFlag* f, char* out, size_t n) {
    if (f->type == CLI_STRING) {
        snprintf(out, n, "%s", f->values ? f->values : "");
        return;
    }
    if (cli_range_undeclared_(f)) {
        snprintf(out, n, "any");
        return;
    }
    char lo[32], hi[32], range[80];
    snprintf(lo, sizeof(lo), "%.10g", f->min);
    snprintf(hi, sizeof(hi), "%.10g", f->max);
    if (f->min == f->max) snprintf(range, sizeof(range), "%s", lo);
    else if (isinf(f->min) && isinf(f->max)) snprintf(range, sizeof(range), "any");
    else if (isinf(f->max)) snprintf(range, sizeof(range), ">= %s", lo);
    else if (isinf(f->min)) snprintf(range, sizeof(range), "<= %s", hi);
    else snprintf(range, sizeof(range), "%s .. %s", lo, hi);
    if (f->values) snprintf(out, n, "%s, or %s", range, f->values);
    else snprintf(out, n, "%s", range);
}

// 1 when text is one of the "|"-separated entries of list.
static inline int cli_in_list_(const char* list, const char* text) {
    size_t n = strlen(text);
    for (const char* p = list; p && *p;) {
        const char* bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, text, n) == 0) return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

// 1 when v equals one of the numbers of the "|"-separated list.
static inline int cli_in_number_list_(const char* list, double v) {
    for (const char* p = list; p && *p;) {
        char* end = NULL;
        double x = strtod(p, &end);
        if (end == p) return 0;
        if (x == v) return 1;
        p = *end == '|' ? end + 1 : NULL;
    }
    return 0;
}

// Print usage and every flag: name, type, help, default in brackets, valid values in braces.
static inline void cli_print_help(const char* program, const char* doc, const CliFlag* flags, int n) {
    printf("usage: %s [flags]\n%s\n\nflags (each takes one value; defaults in brackets, valid values in braces):\n", program, doc);
    for (int i = 0; i < n; i++) {
        const CliFlag* f = &flags[i];
        char def[256], valid[256];
        if (f->type == CLI_INT) snprintf(def, sizeof(def), "%d", *(int*)f->target);
        else if (f->type == CLI_FLOAT) snprintf(def, sizeof(def), "%g", *(float*)f->target);
        else snprintf(def, sizeof(def), "%s", *(const char**)f->target ? *(const char**)f->target : "none");
        cli_describe_range(f, valid, sizeof(valid));
        printf("  %-16s %-6s %s [%s]%s%s%s\n", f->name, cli_type_name_(f->type), f->help, def, *valid ? " {" : "", valid,
               *valid ? "}" : "");
    }
    printf("  --help   print this and exit\n");
}

// Parse one value for flag f from text; dies naming the flag when it is not a complete finite
// number of the flag's type, lies outside the flag's declared values, or is not one of its choices.
static inline void cli_set(const CliFlag* f, const char* text) {
    char* end = NULL;
    errno = 0;
    char valid[256];
    cli_describe_range(f, valid, sizeof(valid));
    if (f->type == CLI_INT) {
        long v = strtol(text, &end, 10);
        if (errno || end == text || *end != '\0' || v < INT_MIN || v > INT_MAX)
            die("%s: expected an integer, got '%s'", f->name, text);
        const double d = (double)v;
        if (!cli_range_undeclared_(f) && !(d >= f->min && d <= f->max) && !cli_in_number_list_(f->values, d))
            die("%s: %ld is out of range (valid: %s)", f->name, v, valid);
        *(int*)f->target = (int)v;
    } else if (f->type == CLI_FLOAT) {
        float v = strtof(text, &end);
        if (errno || end == text || *end != '\0') die("%s: expected a number, got '%s'", f->name, text);
        if (!isfinite(v)) die("%s: expected a finite number, got '%s'", f->name, text);
        const double d = (double)v;
        if (!cli_range_undeclared_(f) && !(d >= f->min && d <= f->max) && !cli_in_number_list_(f->values, d))
            die("%s: %g is out of range (valid: %s)", f->name, d, valid);
        *(float*)f->target = v;
    } else {
        if (f->values && !cli_in_list_(f->values, text)) die("%s: '%s' is not one of %s", f->name, text, f->values);
        *(const char**)f->target = text;
    }
}

// Parse argv against the flag table (values are written through the targets).
// `--help` prints usage and exits 0; anything not in the table is an error.
// The table itself is checked first (a programming error, not a user's): names are unique, ranges
// are ordered, and numeric defaults are valid values.
static inline void cli_parse(int argc, char** argv, const CliFlag* flags, int n, const char* doc) {
    for (int j = 0; j < n; j++) {
        const CliFlag* f = &flags[j];
        for (int k = 0; k < j; k++)
            if (strcmp(flags[k].name, f->name) == 0) die("%s: internal: the flag table declares it twice", f->name);
        if (f->type == CLI_STRING || cli_range_undeclared_(f)) continue;
        if (!(f->min <= f->max)) die("%s: internal: range %g .. %g is empty", f->name, f->min, f->max);
        const double d = f->type == CLI_INT ? (double)*(int*)f->target : (double)*(float*)f->target;
        if (!(d >= f->min && d <= f->max) && !cli_in_number_list_(f->values, d))
            die("%s: internal: the default %g is not a valid value", f->name, d);
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            cli_print_help(argv[0], doc, flags, n);
            exit(0);
        }
        const CliFlag* f = NULL;
        for (int j = 0; j < n && !f; j++) if (strcmp(argv[i], flags[j].name) == 0) f = &flags[j];
        if (!f) die("%s: unknown flag (see --help)", argv[i]);
        if (i + 1 >= argc) die("%s: missing value", argv[i]);
        cli_set(f, argv[++i]);
    }
}
