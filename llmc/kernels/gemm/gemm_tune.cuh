// gemm_tune.cuh - choosing among cuBLASLt's candidate algorithms of one GEMM by measurement, keeping the bits.
//
// cuBLASLt's heuristic ranks up to a few dozen algorithms for a GEMM; its first answer is what every caller
// of the plain API runs. On the H100 the fastest candidate is often another one: dev/cuda/gemm_algos measured
// 5.6 ms of a 116 ms GPT-2 d12 step (5.75 ms at d24) between the first answer and the fastest candidate
// (doc/benchmarks.md, issue 25). The trainer promises bitwise reruns and resume, so a candidate is eligible
// only if its output has exactly the bits of the heuristic's first answer on the call's own operands (that
// survey found every candidate without split-K bit-identical to the first, and split-K ones with another
// split count not: the k-order of the fp32 accumulation is what differs). The choice among eligible ones can
// then depend on timing noise without changing any result.
//
// gemm_tune_first_launch runs once per planned GEMM (the BF16 plans of llmc/kernels/gemm/gemm_context.cuh and
// the FP8 plans of gemm_fp8.cuh each hold a GemmTuneState), at its first launch, on that launch's real operands: the output D is about to be overwritten by the real call when beta = 0; with beta = 1
// (weight gradients accumulate) the candidates run on a scratch copy of D. It synchronizes the stream.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <algorithm>
#include <cublasLt.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"

#define GEMM_TUNE_MAX_ALGOS 16  // candidates asked from the heuristic (it returned 5-8 for the GPT-2 GEMMs)
#define GEMM_TUNE_RUNS 5        // timed runs per eligible candidate (median), after one warm-up

// One launch of a planned GEMM, D = alpha op(A) op(B) + beta D (alpha = 1, beta = 1 if accumulate else 0), with
// its cuBLASLt descriptor (pointers of bias / scales already set), layouts, workspace and stream.
//   D        d_bytes (a multiple of 16), 16-byte aligned.
//   aux_out  for GELU_AUX epilogues the pre-activation the GEMM also writes (aux_bytes), else NULL / 0.
struct GemmTuneLaunch {
    cublasLtHandle_t handle;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    const void* A;
    const void* B;
    void* D;
    size_t d_bytes;
    bool accumulate;
    void* aux_out;
    size_t aux_bytes;
    void* workspace;
    size_t ws_size;
    cudaStream_t stream;
};

struct GemmTuneResult {
    int chosen;          // index into the candidates (0 = the heuristic's first answer)
    int candidates;      // how many were offered
    int eligible;        // how many gave the first answer's bits (itself included; 0: the first answer did not launch)
    float heuristic_ms;  // median time of candidate 0
    float chosen_ms;     // median time of the chosen one
};

// Order-independent 64-bit fingerprint of n16 16-byte words: the sum (mod 2^64, so any order of the
// atomic additions gives the same value) of a SplitMix64 mix of each 8-byte half with its index. Equal buffers
// give equal sums; different ones collide with probability ~2^-64.
__global__ void gemm_tune_hash_kernel(const uint4* p, size_t n16, unsigned long long* out) {
    unsigned long long acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = p[i];
        acc += splitmix64_mix((((unsigned long long)v.x << 32) | v.y) + RANDOM_STATE_STEP * (2 * i + 1));
        acc += splitmix64_mix((((unsigned long long)v.z << 32) | v.w) + RANDOM_STATE_STEP * (2 * i + 2));
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}

// Fingerprint of `bytes` (a multiple of 16) at 16-byte aligned device pointer p, on stream s (synchronizes).
static inline unsigned long long gemm_tune_hash(const void* p, size_t bytes, unsigned long long* slot, cudaStream_t s) {
    unsigned long long h = 0;
    cudaCheck(cudaMemsetAsync(slot, 0, sizeof(*slot), s));
    gemm_tune_hash_kernel<<<1024, 256, 0, s>>>((const uint4*)p, bytes / 16, slot);
    cudaCheckLaunch();
    cudaCheck(cudaMemcpyAsync(&h, slot, sizeof(h), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    return h;
}

// gemm_tune - the fastest of `n` candidate algorithms (algos[0] = the heuristic's first answer) for the GEMM
// launch L, among those whose D (and aux_out) has exactly the bits of algos[0]'s on these operands.
// beta = 0: D is overwritten by the candidates (the caller runs the real GEMM afterwards); beta = 1: D is
// untouched (the candidates run on a cudaMalloc'ed copy). Every candidate's workspace need must fit L.ws_size
// (the heuristic was asked with that limit). Candidates that cuBLASLt refuses at launch are skipped; if the
// first answer itself is refused nothing is chosen (chosen 0, eligible 0) and the caller's launch reports it.
// CUDA failures exit with a message (cudaCheck). Synchronizes L.stream.
static inline GemmTuneResult gemm_tune(const GemmTuneLaunch& L, const cublasLtMatmulAlgo_t* algos, int n) {
    GemmTuneResult r = {0, n, 1, 0.0f, 0.0f};
    if (n <= 1) return r;
    const cudaStream_t s = L.stream;
    const size_t d_bytes = L.d_bytes;
    void* target = L.D;
    if (L.accumulate) cudaCheck(cudaMalloc(&target, d_bytes));
    unsigned long long* slot = NULL;
    cudaCheck(cudaMalloc(&slot, sizeof(*slot)));
    cudaEvent_t ev[GEMM_TUNE_RUNS + 1];
    for (auto& e : ev) cudaCheck(cudaEventCreate(&e));
    const float alpha = 1.0f, beta = L.accumulate ? 1.0f : 0.0f;
    // a candidate that cuBLASLt refuses at launch is skipped (the caller's own launch reports the first answer's refusal)
    auto matmul = [&](int i) {
        return cublasLtMatmul(L.handle, L.desc, &alpha, L.A, L.la, L.B, L.lb, &beta, target, L.ld, target, L.ld, &algos[i],
                              L.workspace, L.ws_size, s) == CUBLAS_STATUS_SUCCESS;
    };
    // fingerprint of candidate i's outputs from the call's starting state; false if it did not run
    auto fingerprint = [&](int i, unsigned long long* h) {
        if (L.accumulate) cudaCheck(cudaMemcpyAsync(target, L.D, d_bytes, cudaMemcpyDeviceToDevice, s));
        if (!matmul(i)) return false;
        *h = gemm_tune_hash(target, d_bytes, slot, s);
        if (L.aux_out) *h ^= splitmix64_mix(gemm_tune_hash(L.aux_out, L.aux_bytes, slot, s));
        return true;
    };
    auto median_ms = [&](int i) {  // (candidate i ran once already: it launches)
        matmul(i);  // warm-up
        for (int k = 0; k < GEMM_TUNE_RUNS; k++) {
            cudaCheck(cudaEventRecord(ev[k], s));
            matmul(i);
        }
        cudaCheck(cudaEventRecord(ev[GEMM_TUNE_RUNS], s));
        cudaCheck(cudaEventSynchronize(ev[GEMM_TUNE_RUNS]));
        float ms[GEMM_TUNE_RUNS];
        for (int k = 0; k < GEMM_TUNE_RUNS; k++) cudaCheck(cudaEventElapsedTime(&ms[k], ev[k], ev[k + 1]));
        std::sort(ms, ms + GEMM_TUNE_RUNS);
        return ms[GEMM_TUNE_RUNS / 2];
    };
    unsigned long long h0 = 0, h = 0;
    if (fingerprint(0, &h0)) {
        r.heuristic_ms = r.chosen_ms = median_ms(0);
    } else {
        r.eligible = 0;
        n = 0;  // the first answer cannot run: nothing to compare with
    }
    for (int i = 1; i < n; i++) {
        if (!fingerprint(i, &h) || h != h0) continue;
        r.eligible++;
        const float ms = median_ms(i);
        if (ms < r.chosen_ms) {
            r.chosen = i;
            r.chosen_ms = ms;
        }
    }
    for (auto& e : ev) cudaCheck(cudaEventDestroy(e));
    cudaCheck(cudaFree(slot));
    if (L.accumulate) cudaCheck(cudaFree(target));
    return r;
}

// What one plan keeps for tuning: the heuristic's candidates in its order (candidate 0 = its first answer),
// whether the first launch has happened, and what tuning found there (result.candidates == 0: not tuned).
struct GemmTuneState {
    cublasLtMatmulAlgo_t candidates[GEMM_TUNE_MAX_ALGOS];
    size_t workspace[GEMM_TUNE_MAX_ALGOS];
    int count;
    bool done;
    GemmTuneResult result;
};

// Keep the successful ones of `count` heuristic results (a planning query asked for GEMM_TUNE_MAX_ALGOS).
static inline void gemm_tune_collect(GemmTuneState* t, const cublasLtMatmulHeuristicResult_t* results, int count) {
    t->count = 0;
    for (int i = 0; i < count; i++)
        if (results[i].state == CUBLAS_STATUS_SUCCESS) {
            t->workspace[t->count] = results[i].workspaceSize;
            t->candidates[t->count++] = results[i].algo;
        }
}

// At a plan's first launch (later launches: nothing): when `wanted` (tuning on, a cached plan) and there is a
// choice, gemm_tune on launch L and set the plan's *algo and *algo_workspace to the chosen candidate.
static inline void gemm_tune_first_launch(GemmTuneState* t, bool wanted, const GemmTuneLaunch& L, cublasLtMatmulAlgo_t* algo,
                                          size_t* algo_workspace) {
    if (t->done) return;
    t->done = true;
    if (!wanted || t->count <= 1) return;
    t->result = gemm_tune(L, t->candidates, t->count);
    *algo = t->candidates[t->result.chosen];
    *algo_workspace = t->workspace[t->result.chosen];
}

// The plan printouts' prefix "tuned: #chosen of candidates (eligible bit-identical) ms, heuristic's first ms; "
// (nothing when the plan was not tuned).
static inline void gemm_tune_describe(const GemmTuneState& t, FILE* f) {
    const GemmTuneResult& r = t.result;
    if (r.eligible > 0)
        fprintf(f, "tuned: #%d of %d (%d bit-identical) %.3f ms, heuristic's first %.3f ms; ", r.chosen, r.candidates, r.eligible,
                r.chosen_ms, r.heuristic_ms);
}

// Totals over a plan cache for the end-of-run line: plans tuned, how many run another algorithm than the first
// answer, and the time their calls saved at the tuning's medians (each plan's (first - chosen) x its calls).
struct GemmTuneTotals {
    int tuned = 0, switched = 0;
    unsigned long long calls = 0;
    double first_ms = 0.0, saved_ms = 0.0;
    void add(const GemmTuneState& state, unsigned long long uses) {
        const GemmTuneResult& t = state.result;
        if (t.candidates == 0 || t.eligible == 0) return;
        tuned++;
        switched += t.chosen != 0;
        calls += uses;
        first_ms += (double)t.heuristic_ms * uses;
        saved_ms += (double)(t.heuristic_ms - t.chosen_ms) * uses;
    }
    // One line (nothing when no plan was tuned), e.g. "GEMM tuning (-gt 1, cuBLASLt BF16): 15 GEMM plans tuned, ..."
    void print(FILE* f, const char* what) const {
        if (tuned == 0) return;
        fprintf(f, "GEMM tuning (-gt 1, %s): %d GEMM plans tuned, %d run another algorithm than cuBLASLt's first answer "
                "(same bits); their %llu-call total is %.1f ms (%.1f%%) shorter at the measured medians\n", what, tuned, switched,
                calls, saved_ms, first_ms > 0 ? 100.0 * saved_ms / first_ms : 0.0);
    }
};
