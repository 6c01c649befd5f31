/*
 * train_config.h - the training options both trainers share (data, model, batch, schedule,
 * evaluation, checkpoints): one flag table, one validation, so the CPU and CUDA trainers accept
 * the same llm.c-style flags with the same meaning. Each trainer sets its own defaults in the
 * struct before parsing and appends its own flags (e.g. -threads, -r, -w, -y).
 */
#ifndef LLMC_TRAIN_CONFIG_H
#define LLMC_TRAIN_CONFIG_H

#include <errno.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include "cli.h"
#include "utils.h"

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
    int grad_accum_steps;        // derived: total_batch_size / (nranks*B*T)
    int total_batch_defaulted;   // derived: 1 if -d was -1 (then total_batch_size = nranks*B*T)
} TrainConfig;

#define TRAIN_CONFIG_NUM_FLAGS 22

// Write the shared flags into flags[0 .. TRAIN_CONFIG_NUM_FLAGS) (their targets are c's fields);
// returns how many were written.
static inline int train_config_flags(TrainConfig* c, CliFlag* flags) {
    const CliFlag f[TRAIN_CONFIG_NUM_FLAGS] = {
        {"-i", CLI_STRING, &c->train_pattern, "train token shards (glob)"},
        {"-j", CLI_STRING, &c->val_pattern, "validation token shards (glob)"},
        {"-o", CLI_STRING, &c->out_dir, "output folder: main.log and checkpoints"},
        {"-e", CLI_STRING, &c->model_spec, "model: descriptor dL[,cC][,hNH][,tMAXT] or checkpoint .bin"},
        {"-b", CLI_INT, &c->B, "micro-batch size B"},
        {"-t", CLI_INT, &c->T, "sequence length T"},
        {"-d", CLI_INT, &c->total_batch_size, "tokens per optimizer step (multiple of B*T; -1 = B*T)"},
        {"-l", CLI_FLOAT, &c->lr, "peak learning rate"},
        {"-u", CLI_INT, &c->warmup, "learning-rate warmup steps"},
        {"-q", CLI_FLOAT, &c->final_lr_frac, "final learning rate as a fraction of the peak"},
        {"-k", CLI_STRING, &c->lr_schedule, "schedule: cosine | linear | constant | wsd"},
        {"-c", CLI_FLOAT, &c->weight_decay, "AdamW weight decay (2-D tensors only)"},
        {"-gc", CLI_FLOAT, &c->grad_clip, "clip the global gradient norm at this value (0 = off)"},
        {"-x", CLI_INT, &c->max_steps, "optimizer steps (-1 = one epoch of the train shards)"},
        {"-v", CLI_INT, &c->val_every, "evaluate the validation loss every N steps (0 = never)"},
        {"-m", CLI_INT, &c->val_max_batches, "validation batches per evaluation"},
        {"-s", CLI_INT, &c->sample_every, "sample text every N steps (0 = never)"},
        {"-g", CLI_INT, &c->gen_tokens, "tokens per sample"},
        {"-n", CLI_INT, &c->checkpoint_every, "write checkpoints every N steps (0 = only at the end)"},
        {"-a", CLI_INT, &c->overfit_single_batch, "1 = train on the first batch only (debugging)"},
        {"-tk", CLI_STRING, &c->tokenizer_path, "tokenizer file for decoding samples"},
        {"-seed", CLI_INT, &c->seed, "random seed (init, sampling, stochastic rounding)"},
    };
    memcpy(flags, f, sizeof(f));
    return TRAIN_CONFIG_NUM_FLAGS;
}

// Check the shared options (dies naming the flag) and derive grad_accum_steps.
static inline void train_config_validate(TrainConfig* c) {
    if (c->B <= 0) die("-b: must be positive, got %d", c->B);
    if (c->T <= 0) die("-t: must be positive, got %d", c->T);
    c->total_batch_defaulted = c->total_batch_size == -1;
    if (c->total_batch_size == -1) c->total_batch_size = c->B * c->T;
    if (c->total_batch_size <= 0 || c->total_batch_size % (c->B * c->T) != 0)
        die("-d: %d is not a positive multiple of B*T = %d", c->total_batch_size, c->B * c->T);
    if (!(c->lr > 0.0f)) die("-l: learning rate must be positive");
    if (c->val_max_batches <= 0) die("-m: must be positive");
    if (c->overfit_single_batch != 0 && c->overfit_single_batch != 1) die("-a: expected 0 or 1, got %d", c->overfit_single_batch);
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
