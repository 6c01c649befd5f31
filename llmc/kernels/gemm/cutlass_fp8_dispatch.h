// cutlass_fp8_dispatch.h - host helpers the CUTLASS dispatchers share (cutlass_fp8_fc.cu, cutlass_fp8_dgelu.cu): the
// current device's compute capability and SM count (asked once per device), the alignment test, the refusal text and
// the error exit.
// No CUTLASS header: the dispatchers compile in seconds.
#pragma once

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

// p is 16-byte aligned (TMA's rule for every tensor base address; NULL counts as aligned).
static inline bool cutlass_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// The current CUDA device: its index, compute capability (major * 10 + minor) and SM count.
struct CutlassDevice {
    int dev = -1, cc = -1, sms = 0;
};

// Fills *out with the current device's properties (cached per device, up to 64 devices); false if they cannot be
// queried. Not thread-safe (the trainer and the harnesses call it from one host thread).
static inline bool cutlass_current_device(CutlassDevice* out) {
    static CutlassDevice cache[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
    CutlassDevice& d = cache[dev];
    if (d.cc < 0) {
        int major = 0, minor = 0, sms = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            return false;
        d.dev = dev;
        d.cc = major * 10 + minor;
        d.sms = sms;
    }
    *out = d;
    return true;
}

// Prints `error: <who>: <msg>` to stderr and exits with status 1 (the project's convention for bad input).
[[noreturn]] static inline void cutlass_fail(const char* who, const char* msg) {
    fprintf(stderr, "error: %s: %s\n", who, msg);
    exit(EXIT_FAILURE);
}

// A refusal's text: the printf-formatted message, then the GEMM's shape "(N=.., C=.., OC=..)". Returns a buffer of
// this translation unit, valid until the next call (the dispatchers hand it back as their `const char*` reason or
// pass it to cutlass_fail). Not thread-safe.
static inline const char* cutlass_why(int N, int C, int OC, const char* fmt, ...) {
    static char why[512];
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(why, sizeof(why), "%s (N=%d, C=%d, OC=%d)", what, N, C, OC);
    return why;
}
