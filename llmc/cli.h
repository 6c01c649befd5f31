// cli.h - table-driven command-line parsing shared by the trainers.
//
// Flags are llm.c-style: `-b 4 -t 256 -e d12 ...`, every flag takes exactly one value; `--help`
// prints the table. Unknown flags, missing values and unparsable numbers are errors that name the
// flag (exit 1), so a typo never silently trains with a default.
#pragma once

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"

typedef enum { CLI_INT, CLI_FLOAT, CLI_STRING } CliType;

typedef struct {
    const char* name;  // e.g. "-b"
    CliType type;
    void* target;      // int*, float* or const char** holding the default on entry
    const char* help;
} CliFlag;

// Print usage and every flag with its current (default) value.
static inline void cli_print_help(const char* program, const char* doc, const CliFlag* flags, int n) {
    printf("usage: %s [flags]\n%s\n\nflags (each takes one value; defaults in brackets):\n", program, doc);
    for (int i = 0; i < n; i++) {
        const CliFlag* f = &flags[i];
        char def[256];
        if (f->type == CLI_INT) snprintf(def, sizeof(def), "%d", *(int*)f->target);
        else if (f->type == CLI_FLOAT) snprintf(def, sizeof(def), "%g", *(float*)f->target);
        else snprintf(def, sizeof(def), "%s", *(const char**)f->target ? *(const char**)f->target : "none");
        printf("  %-8s %s [%s]\n", f->name, f->help, def);
    }
    printf("  --help   print this and exit\n");
}

// Parse one value for flag f from text; dies naming the flag when it is not a complete number.
static inline void cli_set(const CliFlag* f, const char* text) {
    char* end = NULL;
    errno = 0;
    if (f->type == CLI_INT) {
        long v = strtol(text, &end, 10);
        if (errno || end == text || *end != '\0' || v < INT_MIN || v > INT_MAX)
            die("%s: expected an integer, got '%s'", f->name, text);
        *(int*)f->target = (int)v;
    } else if (f->type == CLI_FLOAT) {
        float v = strtof(text, &end);
        if (errno || end == text || *end != '\0') die("%s: expected a number, got '%s'", f->name, text);
        *(float*)f->target = v;
    } else {
        *(const char**)f->target = text;
    }
}

// Parse argv against the flag table (values are written through the targets).
// `--help` prints usage and exits 0; anything not in the table is an error.
static inline void cli_parse(int argc, char** argv, const CliFlag* flags, int n, const char* doc) {
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
