// cutlass_fp8_dgelu_ops.h - what each configuration's translation unit (cutlass_fp8_dgelu_<name>.cu) gives the
// dispatcher (cutlass_fp8_dgelu.cu): no CUTLASS types, so the dispatcher compiles in seconds and the configurations in
// parallel. Callers use cutlass_fp8_dgelu.h, not this header.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/kernels/gemm/cutlass_fp8_dgelu.h"

// One call's operands, already checked by the dispatcher (shape, alignment, NULLs, device): see cutlass_fp8_dgelu.h.
struct CutlassDgeluCall {
    uint8_t* d;
    uint8_t* dt;                 // NULL: no transposed codes
    int ldt;                     // dt's leading dimension (elements), when dt != NULL
    float* amax_d;               // NULL: no amax
    __nv_bfloat16* g;            // NULL: the BF16 GEMM output is not stored
    float* col_partials;         // NULL: no bias-gradient column sums
    const uint8_t* dy;
    const float* dy_dscale;      // NULL only for can_implement
    const uint8_t* wt;
    const float* wt_dscale;      // NULL only for can_implement
    const __nv_bfloat16* pre;
    const float* d_scale;        // NULL only for can_implement
    int N, C, OC;
    int device, sm_count;
};

struct CutlassDgeluOps {
    // NULL when CUTLASS's can_implement accepts the call, else CUTLASS's status string
    const char* (*can_implement)(const CutlassDgeluCall& call);
    // Enqueues the GEMM on stream (amax_d already zeroed); NULL on success, else what failed (a static string with
    // CUTLASS's status and the CUDA error)
    const char* (*run)(const CutlassDgeluCall& call, cudaStream_t stream);
    // One line: schedule, tiles, cluster, accumulation, stages, shared memory, epilogue
    const char* (*describe)(void);
    // Enqueues out[i] = the epilogue's GELU' product of (g[i], pre[i]), i < n (device pointers); NULL on success, else
    // what failed
    const char* (*eval)(const float* g, const float* pre, float* out, int n, cudaStream_t stream);
    void (*free_workspace)(void);
};

#define CUTLASS_FP8_DGELU_DECLARE_OPS(name, text) extern const CutlassDgeluOps cutlass_fp8_dgelu_ops_##name;
