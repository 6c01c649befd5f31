/*
 * train_state.h - the optimizer/run state file that, with a model checkpoint, resumes training
 * bit-exactly (doc/FORMATS.md, "Training state"): magic 20240527, version 2 (this project's
 * layout; llm.c's version 1 state files are not read).
 *
 * Header (256 int32 words): magic, version, rank, nranks, step (completed optimizer steps),
 * has_master, sizeof(floatX), B, T, then 64-bit values as (low, high) word pairs: num_parameters
 * (words 10-11), data-loader shard (12-13), position (14-15), epoch (16-17), stochastic-rounding
 * seed (18-19); word 20: FP16 loss scale (float bits), word 21: good steps since the last change;
 * word 22: ZeRO stage; words 23-24: state_elems, the length of the arrays below (this rank's ZeRO-1
 * shard, llmc/dist/zero.h; 0 in files written before it existed means num_parameters);
 * words 64-127: the numeric configuration string (NUL-terminated). Then fp32 arrays of
 * state_elems each: AdamW m, AdamW v, and the master weights when has_master.
 * Version 3 adds the outlier detection of -sl / -sg (llmc/train/outlier_detector.h): word 25: updates
 * skipped so far, word 26: the window size W (128), words 27, 28: values held in the loss and the
 * grad-norm window; after the arrays, 2 x W float64: the loss window, then the grad-norm window,
 * each oldest first (unused entries 0). Version 2 files are read as "no update skipped, empty windows".
 */
#ifndef LLMC_TRAIN_STATE_H
#define LLMC_TRAIN_STATE_H

#include <stdint.h>
#include <string.h>
#include "llmc/core/utils.h"
#include "llmc/data/dataloader.h"
#include "llmc/train/outlier_detector.h"

#define TRAIN_STATE_MAGIC 20240527
#define TRAIN_STATE_VERSION 3         // written; versions 2 and 3 are read
#define TRAIN_STATE_OLDEST_VERSION 2

typedef struct {
    int rank, nranks, step, has_master, floatx_bytes, B, T;
    size_t num_parameters;
    DataLoaderState loader;
    unsigned long long seed;
    float loss_scale;
    int good_steps;
    int zero_stage;
    size_t state_elems;  // length of m, v, master (num_parameters unless ZeRO-1 shards them)
    char numeric_config[256];
    OutlierState outlier;  // -sl / -sg windows and skipped updates (version 3; empty when read from version 2)
} TrainState;

static inline void train_state_put64_(int32_t* h, int word, uint64_t v) {
    h[word] = (int32_t)(uint32_t)(v & 0xFFFFFFFFu);
    h[word + 1] = (int32_t)(uint32_t)(v >> 32);
}
static inline uint64_t train_state_get64_(const int32_t* h, int word) {
    return (uint64_t)(uint32_t)h[word] | ((uint64_t)(uint32_t)h[word + 1] << 32);
}

// Write the state atomically (path.tmp, then rename). m, v, master: state_elems fp32 values on the
// host (state_elems 0 means num_parameters; master may be NULL when has_master is 0).
static inline void train_state_write(const char* path, const TrainState* s, const float* m, const float* v, const float* master) {
    int32_t h[256];
    memset(h, 0, sizeof(h));
    h[0] = TRAIN_STATE_MAGIC;
    h[1] = TRAIN_STATE_VERSION;
    h[2] = s->rank; h[3] = s->nranks; h[4] = s->step; h[5] = s->has_master; h[6] = s->floatx_bytes;
    h[7] = s->B; h[8] = s->T;
    train_state_put64_(h, 10, s->num_parameters);
    train_state_put64_(h, 12, s->loader.shard);
    train_state_put64_(h, 14, s->loader.position);
    train_state_put64_(h, 16, s->loader.epoch);
    train_state_put64_(h, 18, s->seed);
    memcpy(&h[20], &s->loss_scale, sizeof(float));
    h[21] = s->good_steps;
    h[22] = s->zero_stage;
    const size_t elems = s->state_elems ? s->state_elems : s->num_parameters;
    train_state_put64_(h, 23, elems);
    snprintf((char*)&h[64], 256, "%s", s->numeric_config);
    double windows[2][OUTLIER_WINDOW];
    h[25] = s->outlier.skipped_updates;
    h[26] = OUTLIER_WINDOW;
    h[27] = outlier_get(&s->outlier.loss, windows[0]);
    h[28] = outlier_get(&s->outlier.grad, windows[1]);
    FILE* f = atomic_open(path);
    fwrite_check(h, sizeof(int32_t), 256, f, path);
    fwrite_check(m, sizeof(float), elems, f, path);
    fwrite_check(v, sizeof(float), elems, f, path);
    if (s->has_master) fwrite_check(master, sizeof(float), elems, f, path);
    fwrite_check(windows, sizeof(double), 2 * OUTLIER_WINDOW, f, path);
    atomic_commit(f, path);
}

// Read a state file (version 2 or 3) written for a model of expected_params parameters. Checks magic,
// version, sizes against the file length; dies naming the file and the field. m, v, master are malloc'd
// (master NULL when the file has none); the caller frees them.
static inline void train_state_read(const char* path, size_t expected_params, TrainState* s, float** m, float** v, float** master) {
    FILE* f = fopen_check(path, "rb");
    size_t size = file_size_check(f, path);
    if (size < 1024) die("%s: truncated header (%zu bytes, expected at least 1024)", path, size);
    int32_t h[256];
    fread_check(h, sizeof(int32_t), 256, f, path, "header");
    if (h[0] != TRAIN_STATE_MAGIC) die("%s: bad magic %d (expected %d): not a training state file", path, h[0], TRAIN_STATE_MAGIC);
    if (h[1] < TRAIN_STATE_OLDEST_VERSION || h[1] > TRAIN_STATE_VERSION)
        die("%s: version: unsupported state version %d (expected %d..%d)", path, h[1], TRAIN_STATE_OLDEST_VERSION, TRAIN_STATE_VERSION);
    const int version = h[1];
    memset(s, 0, sizeof(*s));
    outlier_state_init(&s->outlier);
    s->rank = h[2]; s->nranks = h[3]; s->step = h[4]; s->has_master = h[5]; s->floatx_bytes = h[6];
    s->B = h[7]; s->T = h[8];
    s->num_parameters = (size_t)train_state_get64_(h, 10);
    s->loader.shard = (size_t)train_state_get64_(h, 12);
    s->loader.position = (size_t)train_state_get64_(h, 14);
    s->loader.epoch = (size_t)train_state_get64_(h, 16);
    s->seed = train_state_get64_(h, 18);
    memcpy(&s->loss_scale, &h[20], sizeof(float));
    s->good_steps = h[21];
    s->zero_stage = h[22];
    s->state_elems = (size_t)train_state_get64_(h, 23);
    if (s->state_elems == 0) s->state_elems = s->num_parameters;
    memcpy(s->numeric_config, &h[64], 255);
    s->numeric_config[255] = '\0';
    if (s->step < 0) die("%s: step: negative (%d)", path, s->step);
    if (s->has_master != 0 && s->has_master != 1) die("%s: has_master: %d is not 0 or 1", path, s->has_master);
    if (s->num_parameters != expected_params)
        die("%s: num_parameters: %zu does not match the model's %zu", path, s->num_parameters, expected_params);
    if (s->zero_stage != 0 && s->zero_stage != 1) die("%s: zero_stage: %d is not 0 or 1", path, s->zero_stage);
    if (s->state_elems > s->num_parameters)
        die("%s: state_elems: %zu exceeds num_parameters %zu", path, s->state_elems, s->num_parameters);
    if (s->nranks < 1 || s->rank < 0 || s->rank >= s->nranks) die("%s: rank %d of nranks %d is invalid", path, s->rank, s->nranks);
    int counts[2] = {0, 0};
    if (version >= 3) {
        s->outlier.skipped_updates = h[25];
        if (h[25] < 0 || h[25] > s->step) die("%s: skipped_updates: %d is not in 0..step (%d)", path, h[25], s->step);
        if (h[26] != OUTLIER_WINDOW) die("%s: outlier window: %d values (this build's window is %d)", path, h[26], OUTLIER_WINDOW);
        counts[0] = h[27];
        counts[1] = h[28];
        for (int i = 0; i < 2; i++)
            if (counts[i] < 0 || counts[i] > OUTLIER_WINDOW)
                die("%s: %s window count: %d is not in 0..%d", path, i == 0 ? "loss" : "grad-norm", counts[i], OUTLIER_WINDOW);
    }
    const size_t elems = s->state_elems;
    size_t arrays = 2 + (size_t)s->has_master;
    size_t expect = 1024 + arrays * elems * sizeof(float) + (version >= 3 ? 2 * OUTLIER_WINDOW * sizeof(double) : 0);
    if (size != expect) die("%s: file length: %zu bytes, header implies %zu (version %d)", path, size, expect, version);
    *m = (float*)malloc_check(elems * sizeof(float));
    *v = (float*)malloc_check(elems * sizeof(float));
    fread_check(*m, sizeof(float), elems, f, path, "AdamW m");
    fread_check(*v, sizeof(float), elems, f, path, "AdamW v");
    *master = NULL;
    if (s->has_master) {
        *master = (float*)malloc_check(elems * sizeof(float));
        fread_check(*master, sizeof(float), elems, f, path, "master weights");
    }
    if (version >= 3) {
        double windows[2][OUTLIER_WINDOW];
        fread_check(windows, sizeof(double), 2 * OUTLIER_WINDOW, f, path, "outlier windows");
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < counts[i]; k++)
                if (!isfinite(windows[i][k])) die("%s: %s window: value %d is not finite", path, i == 0 ? "loss" : "grad-norm", k);
        outlier_set(&s->outlier.loss, windows[0], counts[0]);
        outlier_set(&s->outlier.grad, windows[1], counts[1]);
    }
    fclose_check(f, path);
}

#endif
