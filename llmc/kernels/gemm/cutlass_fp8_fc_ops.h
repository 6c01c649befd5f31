// cutlass_fp8_fc_ops.h - what each configuration's translation unit (cutlass_fp8_fc_<name>.cu) gives the dispatcher
// (cutlass_fp8_fc.cu): no CUTLASS types, so the dispatcher compiles in seconds and the configurations in parallel.
// Callers use cutlass_fp8_fc.h, not this header.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/kernels/gemm/cutlass_fp8_fc.h"

// One call's operands, already checked by the dispatcher (shape, alignment, NULLs, device): see cutlass_fp8_fc.h.
struct CutlassFcCall {
    __nv_bfloat16* z;
    uint8_t* d;
    uint8_t* dt;                  // NULL: no transposed codes
    int ldt;                      // dt's leading dimension (elements), when dt != NULL
    float* amax_d;                // NULL: no amax
    const uint8_t* inp;
    const float* inp_dscale;      // NULL only for can_implement
    const uint8_t* weight;
    const float* weight_dscale;   // NULL only for can_implement
    const __nv_bfloat16* bias;    // NULL: no bias
    const float* d_scale;         // NULL only for can_implement
    int N, C, OC;
    int device, sm_count;
};

struct CutlassFcOps {
    CutlassFcGelu gelu;  // the epilogue's GELU; CUTLASS_FC_GELU_NONE: the configuration stores Z only
    bool writes_dt;      // the configuration can also write the transposed codes (CutlassFcCall::dt)
    // NULL when CUTLASS's can_implement accepts the call, else CUTLASS's status string
    const char* (*can_implement)(const CutlassFcCall& call);
    // Enqueues the GEMM on stream (amax_d already zeroed); NULL on success, else what failed (a static string
    // with CUTLASS's status and the CUDA error)
    const char* (*run)(const CutlassFcCall& call, cudaStream_t stream);
    // One line: schedule, tiles, cluster, accumulation, stages, shared memory, epilogue
    const char* (*describe)(void);
    // Enqueues out[i] = the epilogue's activation of in[i], i < n (device pointers); NULL on success, else what
    // failed (Z-only configurations: always an error)
    const char* (*act_eval)(const float* in, float* out, int n, cudaStream_t stream);
    void (*free_workspace)(void);
};

#define CUTLASS_FP8_FC_DECLARE_OPS(name, text) extern const CutlassFcOps cutlass_fp8_fc_ops_##name;
