// train_checkpoint.cuh - the CUDA trainer's checkpoints: write, find and restore them.
//
// A checkpoint of step S in folder dir is model_<S>.bin (rank 0: the parameters exactly as trained,
// llmc/model/checkpoint.h: bf16 version 5 in the BF16 build, fp32 version 3 otherwise), every rank's
// state_<S>[_rank<r>].bin (AdamW moments, master weights, data-loader position, loss scale,
// llmc/train/train_state.h) and the mode's side file where it has one (Mode::state_kind: lowp_<S>[_rank<r>].bin,
// the FP8 / TCFP-12 GEMM state).
// Every file is written to <name>.tmp and renamed, so a crash never leaves a truncated one; -y 1
// resumes from the newest complete checkpoint (the model file and every rank's state file, without
// a pending -nk deletion: llmc/train/checkpoint_retention.h). Each rank writes its state file last
// (after its side file), so a rank that dies mid-checkpoint leaves a set -y 1 does not take.
// Formats: doc/FORMATS.md.
#pragma once

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llmc/model/checkpoint.h"
#include "llmc/train/train_state.h"
#include "llmc/data/dataloader.h"
#include "llmc/train/outlier_detector.h"
#include "llmc/train/checkpoint_retention.h"
#include "llmc/model/model.cuh"
#include "llmc/modes/mode.cuh"

// The state file of `rank`: <kind>_<step>.bin for a single process, <kind>_<step>_rank<r>.bin otherwise
// (kind "state": optimizer and loader state; a mode's Mode::state_kind: its side file).
static inline void state_path(char* out, size_t n, const char* dir, int step, int rank, int nranks, const char* kind = "state") {
    if (nranks == 1) snprintf(out, n, "%s/%s_%08d.bin", dir, kind, step);
    else snprintf(out, n, "%s/%s_%08d_rank%d.bin", dir, kind, step, rank);
}


// Write model_<step>.bin: the parameters as trained (floatX), widened, which is exact in every build.
static inline void save_model_file(const char* dir, int step, const GPT2* m) {
    char path[4096];
    const size_t n = m->num_parameters;
    floatX* px = (floatX*)malloc_check(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(px, m->params_memory, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    float* params = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) params[i] = (float)px[i];
    free(px);
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
    // BF16: the bf16 bits exactly; fp16 and fp32 values are exact in fp32
    const int version = kStorageBF16 ? CHECKPOINT_VERSION_BF16 : CHECKPOINT_VERSION_FP32;
    checkpoint_write_model(path, &m->config, params, version);
    free(params);
}

// Write model_<step>.bin (rank 0), this rank's state file and the mode's side file into dir; outlier: the
// -sl / -sg windows and skipped updates (NULL: none).
static inline void save_checkpoint(const char* dir, int step, GPT2* m, const Mode& mode, const DataLoader* loader,
                                   const char* numeric_config, const OutlierState* outlier = NULL) {
    char path[4096];
    cudaCheck(cudaStreamSynchronize(m->stream));
    const int rank = m->mg ? m->mg->pg.rank : 0, nranks = m->mg ? m->mg->pg.nranks : 1;
    const size_t n = m->num_parameters;
    if (rank == 0) save_model_file(dir, step, m);

    TrainState s;
    memset(&s, 0, sizeof(s));
    s.rank = rank; s.nranks = nranks; s.step = step; s.has_master = m->master_weights != NULL;
    s.floatx_bytes = (int)sizeof(floatX); s.B = m->B; s.T = m->T;
    s.num_parameters = n;
    s.zero_stage = m->mg ? m->mg->zero_stage : 0;
    s.state_elems = m->state_elems;
    s.loader = dataloader_get_state(loader);
    s.seed = m->seed;
    s.loss_scale = m->loss_scale;
    s.good_steps = m->good_steps;
    if (outlier) s.outlier = *outlier;
    else outlier_state_init(&s.outlier);
    snprintf(s.numeric_config, sizeof(s.numeric_config), "%s", numeric_config);
    const size_t ns = m->state_elems;
    float* mh = (float*)malloc_check(ns * sizeof(float));
    float* vh = (float*)malloc_check(ns * sizeof(float));
    float* wh = s.has_master ? (float*)malloc_check(ns * sizeof(float)) : NULL;
    cudaCheck(cudaMemcpy(mh, m->m_memory, ns * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(vh, m->v_memory, ns * sizeof(float), cudaMemcpyDeviceToHost));
    if (wh) cudaCheck(cudaMemcpy(wh, m->master_weights, ns * sizeof(float), cudaMemcpyDeviceToHost));
    // The state file is this rank's last file: a checkpoint is complete (-y 1 resumes it) when the model
    // file and every rank's state file exist, so the mode's side file goes first, and a rank that dies
    // (or is stopped by the NCCL watchdog) between the two leaves a set -y 1 skips, never one it takes.
    char side[4096] = "";
    if (Mode::state_kind && mode.state_active(m)) {  // e.g. FP8 / TCFP-12: error feedback, amax histories, weight codes
        state_path(side, sizeof(side), dir, step, rank, nranks, Mode::state_kind);
        mode.state_write(m, side);
    }
    state_path(path, sizeof(path), dir, step, rank, nranks);
    train_state_write(path, &s, mh, vh, wh);
    free(mh); free(vh); free(wh);
    printf("wrote %s/model_%08d.bin and %s\n", dir, step, path);
    if (*side) printf("wrote %s\n", side);
}

// Newest complete checkpoint in dir (model_<step>.bin and the state file of every one of nranks ranks,
// no pending deletion), or -1. (rank: unused; every rank gets the same answer.)
static inline int find_latest_checkpoint(const char* dir, int rank, int nranks) {
    (void)rank;
    return ckpt_find_latest(dir, nranks, 1);
}

// Restore optimizer state, master weights, loader position and loss scale from state_<step>.bin, the
// mode's side file, and into *outlier (when not NULL) the -sl / -sg windows (empty from a version 2 file).
static inline void load_state(const char* dir, int step, GPT2* m, const Mode& mode, DataLoader* loader, OutlierState* outlier = NULL) {
    char path[4096];
    const int rank = m->mg ? m->mg->pg.rank : 0, nranks = m->mg ? m->mg->pg.nranks : 1;
    const int zero = m->mg ? m->mg->zero_stage : 0;
    state_path(path, sizeof(path), dir, step, rank, nranks);
    TrainState s;
    float *mh, *vh, *wh;
    train_state_read(path, m->num_parameters, &s, &mh, &vh, &wh);
    if (s.floatx_bytes != (int)sizeof(floatX)) die("%s: written by a build with %d-byte floatX, this build has %d", path, s.floatx_bytes, (int)sizeof(floatX));
    if (s.B != m->B || s.T != m->T) die("%s: written with B=%d T=%d; resume with the same -b and -t for an exact continuation", path, s.B, s.T);
    if (s.nranks != nranks || s.rank != rank)
        die("%s: written by rank %d of %d; this run is rank %d of %d (resume with the same number of processes)", path, s.rank,
            s.nranks, rank, nranks);
    if (s.zero_stage != zero || s.state_elems != m->state_elems)
        die("%s: written with ZeRO stage %d (%zu state elements); this run has -z %d (%zu)", path, s.zero_stage, s.state_elems,
            zero, m->state_elems);
    size_t n = m->state_elems;
    cudaCheck(cudaMemcpy(m->m_memory, mh, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->v_memory, vh, n * sizeof(float), cudaMemcpyHostToDevice));
    if (m->master_weights) {
        if (!wh) die("%s: has no master weights but this run keeps them (-w 1); resume with -w 0", path);
        cudaCheck(cudaMemcpy(m->master_weights, wh, n * sizeof(float), cudaMemcpyHostToDevice));
    }
    dataloader_set_state(loader, s.loader);
    m->seed = s.seed;
    m->loss_scale = s.loss_scale;
    m->good_steps = s.good_steps;
    m->gemm.optimizer_steps = step;  // (the FP8 / TCFP-12 GEMM state file restores the same count; TensorCast seeds use it)
    if (outlier) *outlier = s.outlier;
    free(mh); free(vh); free(wh);
    printf("resumed from %s (step %d): %s\n", path, step, s.numeric_config);
    if (Mode::state_kind && mode.state_active(m)) {
        state_path(path, sizeof(path), dir, step, rank, nranks, Mode::state_kind);
        mode.state_read(m, path);  // (dies naming the file when it is missing)
        printf("resumed %s\n", path);
    }
}
