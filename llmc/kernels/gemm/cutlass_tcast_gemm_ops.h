// cutlass_tcast_gemm_ops.h - what each configuration's translation unit (cutlass_tcast_gemm_<name>.cu) gives the
// dispatcher (cutlass_tcast_gemm.cu): no CUTLASS types, so the dispatcher compiles in seconds and the configurations in
// parallel. Callers use cutlass_tcast_gemm.h, not this header.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include "llmc/kernels/gemm/cutlass_tcast_gemm.h"
#include "llmc/kernels/gemm/cutlass_tcast_quant.h"
#include "llmc/kernels/tcast/tcast_cast_elem.cuh"  // TcastKernelArgs

// One call's operands, already checked by the dispatcher (shape, alignment, data type, device).
struct CutlassTcastCall {
    __nv_bfloat16* out;         // D: the cast output (the fc layer: the cast GELU output)
    __nv_bfloat16* pre;         // the fc layer only: the cast pre-activation, or NULL (not stored)
    const __nv_bfloat16* inp;
    const __nv_bfloat16* weight;
    const __nv_bfloat16* bias;  // NULL: no bias
    int N, C, OC;
    int quant;                  // CutlassTcastQuant
    TcastKernelArgs k;          // tcast_kernel_args(dt, seed) (unused when quant == CUTLASS_TCAST_OFF)
    int quant_gelu;             // the fc layer only: the GELU output's cast (CutlassTcastQuant)
    TcastKernelArgs k_gelu;
    int device, sm_count;
};

struct CutlassTcastOps {
    // NULL when CUTLASS's can_implement accepts the call, else CUTLASS's status string
    const char* (*can_implement)(const CutlassTcastCall& call);
    // Enqueues the GEMM on stream; NULL on success, else what failed (CUTLASS's status and the CUDA error)
    const char* (*run)(const CutlassTcastCall& call, cudaStream_t stream);
    // The same two for the fc layer's GEMM (the GELU epilogue, TcastGeluCast)
    const char* (*can_implement_gelu)(const CutlassTcastCall& call);
    const char* (*run_gelu)(const CutlassTcastCall& call, cudaStream_t stream);
    // One line: schedule, tiles, cluster, stages, shared memory, epilogue
    const char* (*describe)(void);
    void (*free_workspace)(void);
};

#define CUTLASS_TCAST_GEMM_DECLARE_OPS(name, text) extern const CutlassTcastOps cutlass_tcast_gemm_ops_##name;
