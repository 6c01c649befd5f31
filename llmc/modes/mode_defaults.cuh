// mode_defaults.cuh - the hooks through which the trainer (train_gpt2.cu, llmc/train/train_checkpoint.cuh)
// drives the mode module of the build, with what each does when a mode has nothing to do there. A mode's
// `struct Mode` (llmc/modes/<mode>/mode.cuh) derives from ModeDefaults and redefines the hooks it needs;
// the trainer calls them on its one Mode object and never asks which mode is built. Static dispatch: no
// virtual calls, a hook a mode does not redefine is an empty inline function. The order of the calls, and
// what may be done in each, is in llmc/modes/README.md.
#pragma once

#include <stddef.h>

#include "llmc/core/cli.h"
#include "llmc/model/model.cuh"
#include "llmc/obs/logger.h"
#include "llmc/data/dataloader.h"

struct ModeDefaults {
    // Most command-line flags one mode adds (the trainer's flag array reserves this many).
    static constexpr int kMaxFlags = 16;

    // Its flags with their defaults, written into flags (at most kMaxFlags); returns the count.
    int flags(CliFlag* flags) { (void)flags; return 0; }
    // The combinations of its flags: dies naming the flag (no CUDA call, no file read).
    void validate() const {}
    // What depends on the model's shape (C, Vp, NH) and the batch B x T: dies naming the flag (no CUDA call).
    void check_model(const GPT2Config& spec, int B, int T) { (void)spec, (void)B, (void)T; }
    // After gpt2_allocate_parameters and gpt2_attach_multi_gpu (before the recompute level is chosen).
    void attach_parameters(GPT2* m) { (void)m; }
    // After gpt2_allocate_activations.
    void attach_activations(GPT2* m) { (void)m; }
    // Text appended to the numeric configuration line (logs, state files): " key=value ...", or nothing.
    void describe(const GPT2* m, char* out, size_t n) const { (void)m; if (n) out[0] = '\0'; }
    // Lines printed at start-up after the numeric configuration.
    void print_config(const GPT2* m) const { (void)m; }
    // Before the step's evaluation (training = false) and before its training micro-batches (true);
    // step is 0-based, start_step the step the run started or resumed at.
    void step_begin(GPT2* m, int step, int start_step, bool training) { (void)m, (void)step, (void)start_step, (void)training; }
    // After the step's update and its log line (step 0-based); lg: rank 0's log (lg->f NULL elsewhere);
    // train: the loader whose batch the step consumed.
    void step_end(GPT2* m, int step, int start_step, Logger* lg, const DataLoader* train, int rank) {
        (void)m, (void)step, (void)start_step, (void)lg, (void)train, (void)rank;
    }
    // Checkpoint side file <state_kind>_<step>[_rank<r>].bin (doc/FORMATS.md): NULL = none. Written and read
    // only while state_active(m); state_read dies naming the file when it is missing or does not fit.
    static constexpr const char* state_kind = NULL;
    bool state_active(const GPT2* m) const { (void)m; return false; }
    void state_write(GPT2* m, const char* path) const { (void)m, (void)path; }
    void state_read(GPT2* m, const char* path) const { (void)m, (void)path; }
};
