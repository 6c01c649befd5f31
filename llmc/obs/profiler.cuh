// profiler.cuh - where the step time goes, by kernel family, measured inside real training steps.
//
// The model records a CUDA event on its stream before each kernel family's launches (prof_mark);
// the time between two consecutive events is charged to the family of the first. Events are
// asynchronous, so enabling this does not add synchronization inside a step; prof_collect reads
// the events back once per step. Disabled (the default), prof_mark is a branch and nothing else.
#pragma once

#include <stdio.h>
#include "llmc/core/cuda_common.cuh"

enum ProfFamily {
    PROF_ENCODER, PROF_LAYERNORM_FWD, PROF_MATMUL_FWD, PROF_ATTENTION_FWD, PROF_CLASSIFIER,
    PROF_MATMUL_BWD, PROF_ATTENTION_BWD, PROF_LAYERNORM_BWD, PROF_GELU, PROF_OPTIMIZER, PROF_OTHER,
    PROF_NUM_FAMILIES
};
static const char* const PROF_FAMILY_NAMES[PROF_NUM_FAMILIES] = {
    "encoder fwd+bwd", "layernorm (+residual) fwd", "matmul fwd (cuBLASLt)", "attention fwd",
    "classifier (softmax+CE)", "matmul bwd (cuBLASLt+dbias)", "attention bwd", "layernorm bwd",
    "gelu recompute", "grad norm + AdamW", "other (copies, memsets)"};

#define PROF_MAX_EVENTS 4096

struct KernelProfiler {
    int enabled;
    int n;                               // events recorded this step
    cudaEvent_t events[PROF_MAX_EVENTS];
    int family[PROF_MAX_EVENTS];         // family of the interval that starts at event i
    double ms[PROF_NUM_FAMILIES];        // accumulated over collected steps
    int steps;
};

static inline void prof_init(KernelProfiler* p, int enabled) {
    memset(p, 0, sizeof(*p));
    p->enabled = enabled;
    if (!enabled) return;
    for (int i = 0; i < PROF_MAX_EVENTS; i++) cudaCheck(cudaEventCreate(&p->events[i]));
}

// Start an interval of `family` on stream s (no-op when disabled or p is NULL).
static inline void prof_mark(KernelProfiler* p, int family, cudaStream_t s) {
    if (!p || !p->enabled || p->n >= PROF_MAX_EVENTS) return;
    cudaCheck(cudaEventRecord(p->events[p->n], s));
    p->family[p->n++] = family;
}

// Close the step: wait for the last event and charge each interval to its family.
static inline void prof_collect(KernelProfiler* p, cudaStream_t s) {
    if (!p || !p->enabled) return;
    prof_mark(p, PROF_OTHER, s);
    cudaCheck(cudaEventSynchronize(p->events[p->n - 1]));
    for (int i = 0; i + 1 < p->n; i++) {
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, p->events[i], p->events[i + 1]));
        p->ms[p->family[i]] += ms;
    }
    p->n = 0;
    p->steps++;
}

// Forget what was collected (e.g. after warm-up steps).
static inline void prof_reset(KernelProfiler* p) {
    for (int i = 0; i < PROF_NUM_FAMILIES; i++) p->ms[i] = 0.0;
    p->steps = 0;
}

// Print the per-step average time of each family and its share of the total.
static inline void prof_print(const KernelProfiler* p) {
    if (!p || !p->enabled || p->steps == 0) return;
    double total = 0.0;
    for (int i = 0; i < PROF_NUM_FAMILIES; i++) total += p->ms[i];
    printf("step time by kernel family (mean over %d steps, GPU time between markers):\n", p->steps);
    for (int i = 0; i < PROF_NUM_FAMILIES; i++)
        printf("  %-30s %9.2f ms  %5.1f%%\n", PROF_FAMILY_NAMES[i], p->ms[i] / p->steps, 100.0 * p->ms[i] / total);
    printf("  %-30s %9.2f ms\n", "total", total / p->steps);
}

static inline void prof_free(KernelProfiler* p) {
    if (!p->enabled) return;
    for (int i = 0; i < PROF_MAX_EVENTS; i++) cudaEventDestroy(p->events[i]);
}
