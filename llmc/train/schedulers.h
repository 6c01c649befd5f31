/*
 * schedulers.h - learning-rate schedules: cosine, linear, constant, wsd (warmup-stable-decay).
 *
 * Steps are 0-based. All types except "constant" warm up linearly: lr * (step+1) / warmup for
 * step < warmup. After warmup, with lr_min = lr * final_learning_rate_frac and the progress
 * r = (step - warmup) / (train_num_batches - warmup) clamped to [0, 1]:
 *   cosine:   lr_min + 0.5 * (1 + cos(pi * r)) * (lr - lr_min)
 *   linear:   lr - r * (lr - lr_min)
 *   constant: lr (no warmup either)
 *   wsd:      lr until the last 20% of the steps (from step D = train_num_batches - floor(0.2 *
 *             train_num_batches)), then lr_min + (1 - sqrt(q)) * (lr - lr_min) with
 *             q = (step - D) / (train_num_batches - D) clamped to [0, 1].
 * A zero-length decay window (e.g. warmup >= train_num_batches) counts as finished (r = 1).
 */
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>
#include <string.h>

#include "llmc/core/utils.h"

#define LR_SCHEDULER_COSINE 0
#define LR_SCHEDULER_LINEAR 1
#define LR_SCHEDULER_CONSTANT 2
#define LR_SCHEDULER_WSD 3

typedef struct {
    int type;  // LR_SCHEDULER_*
    float learning_rate;
    int warmup_iterations;
    int train_num_batches;
    float final_learning_rate_frac;
} LearningRateScheduler;

// Sets up a schedule. type: "cosine" | "linear" | "constant" | "wsd"; anything else dies with
// "error: -k: unknown learning rate scheduler ...". lr: peak rate; warmup_iterations: steps of
// linear warmup (<= 0: none); train_num_batches: total steps; final_lr_frac: lr_min / lr.
static inline void lr_scheduler_init(LearningRateScheduler* s, const char* type, float lr, int warmup_iterations,
                                     int train_num_batches, float final_lr_frac) {
    if (type == NULL) type = "(null)";
    if (strcmp(type, "cosine") == 0) s->type = LR_SCHEDULER_COSINE;
    else if (strcmp(type, "linear") == 0) s->type = LR_SCHEDULER_LINEAR;
    else if (strcmp(type, "constant") == 0) s->type = LR_SCHEDULER_CONSTANT;
    else if (strcmp(type, "wsd") == 0) s->type = LR_SCHEDULER_WSD;
    else die("-k: unknown learning rate scheduler \"%s\" (expected cosine, linear, constant or wsd)", type);
    s->learning_rate = lr;
    s->warmup_iterations = warmup_iterations;
    s->train_num_batches = train_num_batches;
    s->final_learning_rate_frac = final_lr_frac;
}

// Internal: (num / den) clamped to [0, 1]; den <= 0 gives 1.
static inline float lr_scheduler_ratio_(int num, int den) {
    if (den <= 0) return 1.0f;
    float r = (float)num / (float)den;
    return r < 0.0f ? 0.0f : (r > 1.0f ? 1.0f : r);
}

// Learning rate for the 0-based step.
static inline float get_learning_rate(const LearningRateScheduler* s, int step) {
    float lr = s->learning_rate;
    if (s->type == LR_SCHEDULER_CONSTANT) return lr;
    int warmup = s->warmup_iterations;
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    float lr_min = lr * s->final_learning_rate_frac;
    int n = s->train_num_batches;
    if (s->type == LR_SCHEDULER_COSINE) {
        float r = lr_scheduler_ratio_(step - warmup, n - warmup);
        return lr_min + 0.5f * (1.0f + cosf(3.14159265358979323846f * r)) * (lr - lr_min);
    }
    if (s->type == LR_SCHEDULER_LINEAR) {
        float r = lr_scheduler_ratio_(step - warmup, n - warmup);
        return lr - r * (lr - lr_min);
    }
    // wsd
    int decay_steps = n > 0 ? n / 5 : 0;  // floor(0.2 * n)
    int decay_start = n - decay_steps;
    if (step < decay_start) return lr;
    float q = lr_scheduler_ratio_(step - decay_start, decay_steps);
    return lr_min + (1.0f - sqrtf(q)) * (lr - lr_min);
}

#endif // LLMC_SCHEDULERS_H
