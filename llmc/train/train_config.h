/*
 * train_config.h - the training options both trainers share (data, model, batch, schedule,
 * evaluation, checkpoints): one flag table, one validation, so the CPU and CUDA trainers accept
 * the same llm.c-style flags with the same meaning. Each trainer sets its own defaults in the
 * struct before parsing and appends its own flags (e.g. -threads, -r, -w, -y).
 */
#ifndef LLMC_TRAIN_CONFIG_H
#define LLMC_TRAIN_CONFIG_H

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include "llmc/core/cli.h"
#include "llmc/core/utils.h"

typedef struct {
    const char* train_pattern;   // -i
    const char* val_pattern;     // -j
    const char* out_dir;         // -o (NULL: no log, no checkpoints)
    const char* model_spec;      // -e descriptor or checkpoint
    const char* lr_schedule;     // -k
    const char* tokenizer_path;  // -tk
    int B, T;                    // -b, -t
    int total_batch_size;        // -d, tokens per optimizer step (-1 = B*T)
    int warmup, max_steps;       // -u, -x (-1 = one epoch)
    int val_every, val_max_batches, sample_every, gen_tokens;  // -v -m -s -g
    int checkpoint_every;        // -n
    int overfit_single_batch;    // -a
    int seed;                    // -seed
    float lr, final_lr_frac, weight_decay, grad_clip;          // -l -q -c -gc
    // long runs (llm.c's flags and meanings)
    int checkpoints_keep;        // -nk: keep the newest N checkpoints in -o (0 = all)
    int major_every;             // -nm: never delete checkpoints of steps that are multiples of M (0 = none)
    float skip_loss_z;           // -sl: skip the update when the loss z-score exceeds this (0 = off)
    float skip_grad_z;           // -sg: same for the gradient norm (0 = off)
    int hellaswag;               // -h: 1 = HellaSwag accuracy at every validation
    const char* hellaswag_path;  // -hf: llm.c's eval file (default: llm.c's location)
    int grad_accum_steps;        // derived: total_batch_size / (nranks*B*T)
    int total_batch_defaulted;   // derived: 1 if -d was -1 (then total_batch_size = nranks*B*T)
} TrainConfig;

#define TRAIN_CONFIG_NUM_FLAGS 28
// llm.c's location of the HellaSwag validation file (written by its dev/data/hellaswag.py)
#define TRAIN_CONFIG_HELLASWAG_DEFAULT "dev/data/hellaswag/hellaswag_val.bin"

// Write the shared flags into flags[0 .. TRAIN_CONFIG_NUM_FLAGS) (their targets are c's fields) with
// their valid values (llmc/core/cli.h); returns how many were written. A NULL -hf gets llm.c's default.
static inline int train_config_flags(TrainConfig* c, CliFlag* flags) {
    if (c->hellaswag_path == NULL) c->hellaswag_path = TRAIN_CONFIG_HELLASWAG_DEFAULT;
    const double inf = INFINITY;
    const CliFlag f[TRAIN_CONFIG_NUM_FLAGS] = {
        {"-i", CLI_STRING, &c->train_pattern, "train token shards (glob)", 0, 0, NULL},
        {"-j", CLI_STRING, &c->val_pattern, "validation token shards (glob)", 0, 0, NULL},
        {"-o", CLI_STRING, &c->out_dir, "output folder: main.log and checkpoints", 0, 0, NULL},
        {"-e", CLI_STRING, &c->model_spec, "model: descriptor dL[,cC][,hNH][,tMAXT] or checkpoint .bin", 0, 0, NULL},
        {"-b", CLI_INT, &c->B, "micro-batch size B", 1, 1 << 20, NULL},
        {"-t", CLI_INT, &c->T, "sequence length T (at most the model's maxT)", 1, 1 << 20, NULL},
        {"-d", CLI_INT, &c->total_batch_size, "tokens per optimizer step (multiple of B*T; -1 = B*T)", 1, INT_MAX, "-1"},
        {"-l", CLI_FLOAT, &c->lr, "peak learning rate", 0, inf, NULL},
        {"-u", CLI_INT, &c->warmup, "learning-rate warmup steps", 0, INT_MAX, NULL},
        {"-q", CLI_FLOAT, &c->final_lr_frac, "final learning rate as a fraction of the peak", 0, 1, NULL},
        {"-k", CLI_STRING, &c->lr_schedule, "learning-rate schedule", 0, 0, "cosine|linear|constant|wsd"},
        {"-c", CLI_FLOAT, &c->weight_decay, "AdamW weight decay (2-D tensors only)", 0, inf, NULL},
        {"-gc", CLI_FLOAT, &c->grad_clip, "clip the global gradient norm at this value (0 = off)", 0, inf, NULL},
        {"-x", CLI_INT, &c->max_steps, "optimizer steps (-1 = one epoch of the train shards)", 1, INT_MAX, "-1"},
        {"-v", CLI_INT, &c->val_every, "evaluate the validation loss every N steps (0 = never)", 0, INT_MAX, NULL},
        {"-m", CLI_INT, &c->val_max_batches, "validation batches per evaluation", 1, INT_MAX, NULL},
        {"-s", CLI_INT, &c->sample_every, "sample text every N steps (0 = never)", 0, INT_MAX, NULL},
        {"-g", CLI_INT, &c->gen_tokens, "tokens per sample", 1, 1 << 20, NULL},
        {"-n", CLI_INT, &c->checkpoint_every, "write checkpoints every N steps (0 = only at the end, -1 = never)", -1, INT_MAX, NULL},
        {"-a", CLI_INT, &c->overfit_single_batch, "1 = train on the first batch only (debugging)", 0, 1, NULL},
        {"-tk", CLI_STRING, &c->tokenizer_path, "tokenizer file for decoding samples (absent: token ids)", 0, 0, NULL},
        {"-seed", CLI_INT, &c->seed, "random seed (init, sampling, stochastic rounding)", 0, INT_MAX, NULL},
        {"-nk", CLI_INT, &c->checkpoints_keep, "keep only the newest N checkpoints in -o (0 = keep all)", 0, INT_MAX, NULL},
        {"-nm", CLI_INT, &c->major_every, "-nk never deletes checkpoints of steps that are multiples of M (0 = none)", 0, INT_MAX, NULL},
        {"-sl", CLI_FLOAT, &c->skip_loss_z, "skip the update when the loss z-score over the last 128 steps exceeds this (0 = off)", 0, inf, NULL},
        {"-sg", CLI_FLOAT, &c->skip_grad_z, "skip the update when the grad-norm z-score over the last 128 steps exceeds this (0 = off)", 0, inf, NULL},
        {"-h", CLI_INT, &c->hellaswag, "1 = HellaSwag accuracy (-hf) at every validation step > 0 and at the end", 0, 1, NULL},
        {"-hf", CLI_STRING, &c->hellaswag_path, "HellaSwag eval file in llm.c's format (dev/data/hellaswag.py)", 0, 0, NULL},
    };
    memcpy(flags, f, sizeof(f));
    return TRAIN_CONFIG_NUM_FLAGS;
}

// Check what the flag table cannot (values are in range after cli_parse): combinations of flags.
// Dies naming the flag; derives grad_accum_steps.
static inline void train_config_validate(TrainConfig* c) {
    if ((long)c->B * c->T > INT_MAX) die("-t: B*T = %ld does not fit a 32-bit int", (long)c->B * c->T);
    c->total_batch_defaulted = c->total_batch_size == -1;
    if (c->total_batch_size == -1) c->total_batch_size = c->B * c->T;
    if (c->total_batch_size % (c->B * c->T) != 0)
        die("-d: %d is not a positive multiple of B*T = %d", c->total_batch_size, c->B * c->T);
    if (c->checkpoints_keep > 0 && !c->out_dir) die("-nk %d: needs -o, the folder the checkpoints are written to", c->checkpoints_keep);
    if (c->hellaswag && c->B < 4)
        die("-h 1: HellaSwag puts the 4 completions of an example in 4 rows of a batch: needs -b >= 4, got %d", c->B);
    c->grad_accum_steps = c->total_batch_size / (c->B * c->T);
}

// Data parallelism over nranks processes: -d counts the tokens of one optimizer step over all ranks
// (default nranks*B*T), so it must be a multiple of nranks*B*T; re-derives grad_accum_steps.
static inline void train_config_set_ranks(TrainConfig* c, int nranks) {
    const long step_tokens = (long)nranks * c->B * c->T;
    if (c->total_batch_defaulted) c->total_batch_size = (int)step_tokens;
    if (c->total_batch_size % step_tokens != 0)
        die("-d: %d is not a multiple of nranks*B*T = %d*%d*%d = %ld", c->total_batch_size, nranks, c->B, c->T, step_tokens);
    c->grad_accum_steps = (int)(c->total_batch_size / step_tokens);
}

// True when spec names a checkpoint file (ends in .bin) rather than a model descriptor.
static inline int train_config_spec_is_checkpoint(const char* spec) {
    size_t n = strlen(spec);
    return n > 4 && strcmp(spec + n - 4, ".bin") == 0;
}

// Create the output folder (one level) if it does not exist; dies naming -o otherwise.
static inline void ensure_output_dir(const char* dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) die("-o %s: exists and is not a directory", dir);
        return;
    }
    if (mkdir(dir, 0755) != 0) die("-o %s: cannot create directory: %s", dir, strerror(errno));
}

// One row of the start-up table: `| key                   | value ... |`, value printf-formatted.
static inline LLMC_PRINTF(2, 3) void print_config_row(const char* key, const char* fmt, ...) {
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    printf("| %-24s | %-50s |\n", key, value);
}

static inline void print_config_rule(void) {
    printf("+--------------------------+----------------------------------------------------+\n");
}

// Monotonic wall clock in seconds.
static inline double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
