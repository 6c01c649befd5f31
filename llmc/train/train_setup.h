/*
 * train_setup.h - what both trainers open before the first step: the train and validation data
 * loaders, the tokenizer for samples (optional: absent file = token ids printed), and the learning
 * rate schedule. Resolves -x -1 (one epoch) and caps -m at the validation batches available.
 */
#ifndef LLMC_TRAIN_SETUP_H
#define LLMC_TRAIN_SETUP_H

#include <glob.h>
#include <stdio.h>
#include <sys/stat.h>
#include "llmc/train/train_config.h"
#include "llmc/model/gpt2_config.h"
#include "llmc/model/checkpoint.h"
#include "llmc/data/dataloader.h"
#include "llmc/data/tokenizer.h"
#include "llmc/train/schedulers.h"
#include "llmc/data/hellaswag.h"

typedef struct {
    DataLoader train, val;
    int have_val;           // validation enabled (-v > 0)
    Tokenizer tokenizer;
    int have_tokenizer;     // tokenizer file found
    LearningRateScheduler sched;
} TrainSetup;

// Internal: every shard matching pattern has a valid header and length (dies naming flag or file).
static inline void train_setup_check_shards_(const char* flag, const char* pattern) {
    glob_t g;
    memset(&g, 0, sizeof(g));
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        die("%s %s: no files match%s", flag, pattern, strpbrk(pattern, "*?[") ? " this pattern" : " (no such file)");
    }
    if (rc != 0) {
        globfree(&g);
        die("%s %s: glob failed (code %d)", flag, pattern, rc);
    }
    for (size_t i = 0; i < g.gl_pathc; i++) (void)dataloader_check_shard_(g.gl_pathv[i]);
    globfree(&g);
}

// Check every file and folder the flags name, before any data is read or the GPU is touched, so
// that a bad flag fails at once on any machine: the model (-e: descriptor, or checkpoint header),
// T <= maxT, the shards' headers (-i, and -j when -v > 0), the tokenizer when present (-tk), the
// output folder (-o: a folder, or creatable in an existing one) and, with -h 1, the whole eval file
// (-hf) against V and T. Fills *config with the model's shape and, with -h 1, *eval (the caller
// frees it with evalset_free). Dies naming the flag or the file.
static inline void train_config_check_files(const TrainConfig* tc, GPT2Config* config, EvalSet* eval) {
    struct stat st;
    if (train_config_spec_is_checkpoint(tc->model_spec)) {
        if (stat(tc->model_spec, &st) != 0) die("-e %s: no such checkpoint file", tc->model_spec);
        checkpoint_read_header(tc->model_spec, config);
    } else {
        gpt2_config_from_descriptor(config, tc->model_spec);
    }
    if (tc->T > config->max_seq_len) die("-t: T=%d exceeds the model's maxT=%d", tc->T, config->max_seq_len);
    train_setup_check_shards_("-i", tc->train_pattern);
    if (tc->val_every > 0) train_setup_check_shards_("-j", tc->val_pattern);
    if (stat(tc->tokenizer_path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) die("-tk %s: not a regular file", tc->tokenizer_path);
        Tokenizer tok;
        tokenizer_init(&tok, tc->tokenizer_path);
        tokenizer_free(&tok);
    }
    if (tc->out_dir) {
        if (!*tc->out_dir) die("-o: empty folder name");
        if (stat(tc->out_dir, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) die("-o %s: exists and is not a directory", tc->out_dir);
        } else {
            char parent[4096];
            snprintf(parent, sizeof(parent), "%s", tc->out_dir);
            size_t n = strlen(parent);
            while (n > 1 && parent[n - 1] == '/') parent[--n] = '\0';  // "dir/" names dir
            char* slash = strrchr(parent, '/');
            if (!slash) snprintf(parent, sizeof(parent), ".");
            else if (slash == parent) parent[1] = '\0';
            else *slash = '\0';
            if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
                die("-o %s: cannot be created: %s is not an existing folder", tc->out_dir, parent);
        }
    }
    if (tc->hellaswag) {
        if (stat(tc->hellaswag_path, &st) != 0 || !S_ISREG(st.st_mode))
            die("-hf %s: no such file (-h 1 needs llm.c's HellaSwag eval file: python dev/data/hellaswag.py in llm.c writes it)",
                tc->hellaswag_path);
        evalset_read(eval, tc->hellaswag_path, config->vocab_size, tc->T);
    }
}

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
