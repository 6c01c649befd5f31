// mode.cuh (SF16 module, ENABLE_Q115; doc/SF16.md) - the trainer's hooks (llmc/modes/mode_defaults.cuh).
// The boundaries themselves need no run-time state: every forward kernel quantizes through the hook of
// llmc/modes/sf16/traits.cuh. What the module adds at run time is the diagnostic --q115-stats N: every N
// steps (and on the first), one extra forward on the step's batch with the boundary counters on, and per
// site the fraction of values clipped at +-1 and of non-zero values flushed to 0 (printed, and logged as
// `s:<step> q115:<site> clip:... flush:...`). And --q115-cutlass (default 1): the forward GEMMs apply the MATMUL_OUT
// boundary in a CUTLASS epilogue instead of a pass after cuBLASLt (llmc/modes/sf16/sf16_cutlass.cuh).
#pragma once

#include <limits.h>
#include <stdio.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/modes/mode_defaults.cuh"
#include "llmc/modes/sf16/sf16_cutlass.cuh"

// Switch the boundary counters on (1) or off (0) for the kernels enqueued after this call on `stream`.
static inline void sf16_stats_set(int on, cudaStream_t stream) {
    cudaCheck(cudaMemcpyToSymbolAsync(boundary_stats_enabled, &on, sizeof(int), 0, cudaMemcpyHostToDevice, stream));
    boundary_stats_host_enabled = on;
}

// One forward pass on the batch with the boundary counters on. counts[site][0..2] = values seen, clipped
// at +-1, non-zero values flushed to 0 (llmc/modes/sf16/traits.cuh). Synchronizes the stream.
static inline void sf16_boundary_stats(GPT2* m, const int* inputs, const int* targets, int B, int T,
                                       unsigned long long counts[NUM_BOUNDARY_SITES][3]) {
    unsigned long long zeros[NUM_BOUNDARY_SITES][3] = {};
    cudaCheck(cudaMemcpyToSymbolAsync(boundary_counts, zeros, sizeof(zeros), 0, cudaMemcpyHostToDevice, m->stream));
    sf16_stats_set(1, m->stream);
    gpt2_evaluate(m, inputs, targets, B, T);
    sf16_stats_set(0, m->stream);
    cudaCheck(cudaMemcpyFromSymbolAsync(counts, boundary_counts, sizeof(zeros), 0, cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
}

struct Mode : ModeDefaults {
    int q115_stats = 0;    // --q115-stats N (0 = off)
    int q115_cutlass = 1;  // --q115-cutlass 0|1
    bool cutlass_on = false;

    int flags(CliFlag* f) {
        f[0] = {"--q115-stats", CLI_INT, &q115_stats,
                "every N steps print per boundary the fraction clipped at +-1 / flushed to 0 (0 = off)", 0, INT_MAX, NULL};
        f[1] = {"--q115-cutlass", CLI_INT, &q115_cutlass,
                "1: the matmul_out boundary in the epilogue of a CUTLASS GEMM (sm_90, binaries built with CUTLASS; else the pass), "
                "0: cuBLASLt GEMM and a pass",
                0, 1, NULL};
        return 2;
    }

    void attach_parameters(GPT2* m) { cutlass_on = sf16_cutlass_attach(m, q115_cutlass, true); }

    void print_config(const GPT2* m) const {
        (void)m;
        if (cutlass_on) printf("SF16: the matmul_out boundary in the epilogue of a CUTLASS GEMM (%s)\n", sf16_cutlass_describe());
    }
    void describe(const GPT2* m, char* out, size_t n) const {
        (void)m;
        snprintf(out, n, " q115_cutlass=%d", cutlass_on ? 1 : 0);
    }

    // --q115-stats on the current train batch (rank 0): the statistics of the step just taken (1-based step + 1).
    void step_end(GPT2* m, int step, int start_step, Logger* lg, const DataLoader* train, int rank) {
        if (rank != 0 || q115_stats <= 0 || ((step + 1) % q115_stats != 0 && step != start_step)) return;
        unsigned long long counts[NUM_BOUNDARY_SITES][3];
        sf16_boundary_stats(m, train->inputs, train->targets, m->B, m->T, counts);
        printf("q115 stats at step %d (one forward on the current batch):\n", step + 1);
        for (int i = 0; i < NUM_BOUNDARY_SITES; i++) {
            if (counts[i][0] == 0) continue;
            double clip = (double)counts[i][1] / counts[i][0], flush = (double)counts[i][2] / counts[i][0];
            printf("  %-14s %12llu values  clipped %.4e  flushed %.4e\n", BOUNDARY_SITE_NAMES[i], counts[i][0], clip, flush);
            if (lg->f) fprintf(lg->f, "s:%d q115:%s clip:%.6e flush:%.6e\n", step + 1, BOUNDARY_SITE_NAMES[i], clip, flush);
        }
        if (lg->f) fflush(lg->f);
    }
};
