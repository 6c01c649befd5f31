/*
 * train_setup.h - what both trainers open before the first step: the train and validation data
 * loaders, the tokenizer for samples (optional: absent file = token ids printed), and the learning
 * rate schedule. Resolves -x -1 (one epoch) and caps -m at the validation batches available.
 */
#ifndef LLMC_TRAIN_SETUP_H
#define LLMC_TRAIN_SETUP_H

#include <stdio.h>
#include <sys/stat.h>
#include "train_config.h"
#include "dataloader.h"
#include "tokenizer.h"
#include "schedulers.h"

typedef struct {
    DataLoader train, val;
    int have_val;           // validation enabled (-v > 0)
    Tokenizer tokenizer;
    int have_tokenizer;     // tokenizer file found
    LearningRateScheduler sched;
} TrainSetup;

// Open everything for rank `rank` of `nranks`; updates tc->max_steps and tc->val_max_batches.
// Dies naming the flag or file on bad input (see dataloader_init, tokenizer_init, lr_scheduler_init).
static inline void train_setup_init(TrainSetup* s, TrainConfig* tc, int vocab_size, int rank, int nranks) {
    dataloader_init(&s->train, tc->train_pattern, tc->B, tc->T, rank, nranks, vocab_size);
    s->have_val = tc->val_every > 0;
    if (s->have_val) dataloader_init(&s->val, tc->val_pattern, tc->B, tc->T, rank, nranks, vocab_size);
    if (tc->max_steps < 0) tc->max_steps = (int)(s->train.num_tokens / tc->total_batch_size);
    if (tc->max_steps <= 0) die("-x: the train shards hold fewer tokens than one step (%d)", tc->total_batch_size);
    if (s->have_val) {
        int avail = (int)(s->val.num_tokens / ((size_t)nranks * tc->B * tc->T + 1));  // batches per rank
        if (tc->val_max_batches > avail) tc->val_max_batches = avail > 0 ? avail : 1;
    }
    struct stat st;
    s->have_tokenizer = stat(tc->tokenizer_path, &st) == 0;
    if (s->have_tokenizer) tokenizer_init(&s->tokenizer, tc->tokenizer_path);
    else printf("note: tokenizer %s not found: samples print token ids\n", tc->tokenizer_path);
    lr_scheduler_init(&s->sched, tc->lr_schedule, tc->lr, tc->warmup, tc->max_steps, tc->final_lr_frac);
}

static inline void train_setup_free(TrainSetup* s) {
    if (s->have_tokenizer) tokenizer_free(&s->tokenizer);
    dataloader_free(&s->train);
    if (s->have_val) dataloader_free(&s->val);
}

#endif
