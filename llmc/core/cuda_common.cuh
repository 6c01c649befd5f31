// cuda_common.cuh - error checking and small device helpers shared by every kernel family.
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include "llmc/core/precision.h"

// Abort with file:line and the CUDA error string when a runtime call fails.
#define cudaCheck(call) cuda_check_impl((call), #call, __FILE__, __LINE__)
static inline void cuda_check_impl(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) {
        fprintf(stderr, "error: CUDA: %s failed at %s:%d: %s\n", what, file, line, cudaGetErrorString(err));
        exit(EXIT_FAILURE);
    }
}

// Check the launch of the kernel just issued (configuration errors surface here, faults at the next sync).
#define cudaCheckLaunch() cudaCheck(cudaGetLastError())

// The current CUDA device's compute capability as major * 10 + minor (9.0 -> 90), and its index in *dev when dev is
// not NULL. CUDA errors end the program (cudaCheck).
static inline int cuda_current_cc(int* dev = NULL) {
    int d = 0, major = 0, minor = 0;
    cudaCheck(cudaGetDevice(&d));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d));
    if (dev) *dev = d;
    return major * 10 + minor;
}

static inline int ceil_div(int a, int b) { return (a + b - 1) / b; }
static inline size_t ceil_div_sz(size_t a, size_t b) { return (a + b - 1) / b; }
