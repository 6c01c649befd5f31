// logger.h - the training log (main.log) of doc/FORMATS.md: one `key:value` line per event.
//
//   s:<step> trl:<train loss> lr:<lr> norm:<grad norm>[ skipped:<loss|grad>_z=<z>]   (-sl / -sg)
//   s:<step> tel:<val loss>
//   s:<step> eval:<HellaSwag accuracy>                                (-h 1, llm.c's key)
//   s:<step> <key>:<value> ...                                        (other events, e.g. -lg)
// Lines are flushed as written so a crash loses nothing and a plot can follow a live run.
#pragma once

#include <stdio.h>
#include "llmc/core/utils.h"

typedef struct { FILE* f; } Logger;

// Open <dir>/main.log for appending when dir is non-NULL (resume appends); otherwise log nothing.
static inline void logger_init(Logger* lg, const char* dir, int append) {
    lg->f = NULL;
    if (dir == NULL) return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/main.log", dir);
    lg->f = fopen_check(path, append ? "a" : "w");
}

// Free-form header line (starts with '#', so plotters skip it): configuration, numeric mode.
static inline void logger_comment(Logger* lg, const char* text) {
    if (!lg->f) return;
    fprintf(lg->f, "# %s\n", text);
    fflush(lg->f);
}

// The train line; note (NULL: none) is appended as more key:value pairs, e.g. "skipped:loss_z=5.31".
static inline void logger_log_train_note(Logger* lg, int step, float loss, float lr, float norm, const char* note) {
    if (!lg->f) return;
    fprintf(lg->f, "s:%d trl:%.6f lr:%.6e norm:%.6f%s%s\n", step, loss, lr, norm, note ? " " : "", note ? note : "");
    fflush(lg->f);
}

static inline void logger_log_train(Logger* lg, int step, float loss, float lr, float norm) {
    logger_log_train_note(lg, step, loss, lr, norm, NULL);
}

// HellaSwag accuracy (llm.c's `s:<step> eval:<acc>`).
static inline void logger_log_eval(Logger* lg, int step, float acc) {
    if (!lg->f) return;
    fprintf(lg->f, "s:%d eval:%.4f\n", step, acc);
    fflush(lg->f);
}

// Any other event: `s:<step> <pairs>` (pairs: space-separated key:value).
static inline void logger_log_event(Logger* lg, int step, const char* pairs) {
    if (!lg->f) return;
    fprintf(lg->f, "s:%d %s\n", step, pairs);
    fflush(lg->f);
}

static inline void logger_log_val(Logger* lg, int step, float loss) {
    if (!lg->f) return;
    fprintf(lg->f, "s:%d tel:%.6f\n", step, loss);
    fflush(lg->f);
}

static inline void logger_free(Logger* lg) {
    if (lg->f) fclose(lg->f);
    lg->f = NULL;
}
