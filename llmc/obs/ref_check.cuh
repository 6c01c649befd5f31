// ref_check.cuh - comparing this build's tensors with a reference state (test_gpt2.cu and the modes' test
// hooks, llmc/modes/<mode>/test.cuh): device floatX arrays brought to the host as floats, one printed
// pass / fail row per tensor, and the run's pass / fail counts. Metric: ‖a − ref‖₂ / ‖ref‖₂ per tensor,
// plus the max absolute error; a non-finite value fails its row.
#pragma once

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/core/utils.h"

static int g_passed = 0, g_failed = 0;

// Count one check (ok != 0: passed).
static void record(int ok) { if (ok) g_passed++; else g_failed++; }

// ‖a − ref‖₂ / ‖ref‖₂ over n values (no pass/fail).
static double rel_l2(const float* a, const float* ref, size_t n) {
    double d2 = 0.0, r2 = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
    }
    return r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
}

// Two runs' copies of one tensor that may differ only where a value crossed a rounding midpoint (another GEMM's
// accumulation order, say): prints "name against <what>: rel L2 .. (k of n values differ); tolerance .." and records
// rel L2 < tol.
static void record_close(const char* name, const float* a, const float* ref, size_t n, double tol, const char* what) {
    const double d = rel_l2(a, ref, n);
    size_t differ = 0;
    for (size_t k = 0; k < n; k++) differ += a[k] != ref[k];
    printf("    %-8s against %s: rel L2 %.3e (%zu of %zu values differ); tolerance %.0e  %s\n", name, what, d, differ, n, tol,
           d < tol ? "ok" : "FAIL");
    record(d < tol);
}

// One comparison row: n values of a (already on the host, fp32) against ref.
// Prints one row and records pass/fail; returns the relative (L2) error.
static double compare_row(const char* name, const float* a, const float* ref, size_t n, double tol) {
    double d2 = 0.0, r2 = 0.0, maxabs = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) { bad++; continue; }
        double d = (double)a[i] - (double)ref[i];
        d2 += d * d;
        r2 += (double)ref[i] * ref[i];
        if (fabs(d) > maxabs) maxabs = fabs(d);
    }
    double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    int ok = bad == 0 && rel <= tol;
    printf("  %-10s %10zu  %10.3e  %10.3e  %8.1e  %s%s\n", name, n, maxabs, rel, tol, ok ? "ok" : "FAIL",
           bad ? " (non-finite)" : "");
    record(ok);
    return rel;
}

// Device floatX array -> host floats (caller frees).
static float* download_floatX(const floatX* d, size_t n) {
    floatX* tmp = (floatX*)malloc_check(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(tmp, d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    float* out = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) out[i] = (float)tmp[i];
    free(tmp);
    return out;
}
