// sf16_cutlass.cuh - SF16's MATMUL_OUT boundary in the epilogue of a CUTLASS GEMM (--q115-cutlass, issue 27 deliverable
// 2; doc/SF16.md "Speed"): the qkv and fc forward GEMMs run as one Hopper BF16
// GEMM each whose epilogue adds the bias, rounds to BF16 and applies the Q1.15 boundary (under SF16_TRUE_FORWARD too:
// the Q1.31 step before it changes no BF16 value's Q1.15 result, so the epilogue computes simulate_q115 alone;
// cutlass_q115_gemm.cu says why), and for the fc layer also stores the quantized pre-activation and applies GELU and the GELU_OUT
// boundary (llmc/kernels/gemm/cutlass_q115_gemm.h), instead of cuBLASLt's GEMM followed by the boundary pass / the
// GELU kernel. The same boundary bits of the GEMM's own BF16 output (dev/cuda/cutlass_q115_gemm.cu checks them), so
// only the GEMM's accumulation order differs from --q115-cutlass 0.
// Not taken (the GEMM front's cuBLASLt GEMM and pass instead): the LM head (so an evaluation's logits come from the same
// GEMM as the training step's, matmul_forward_logits), the two projections (attention, fc: their reader, the residual +
// LayerNorm kernel, applies the boundary, so they run on cuBLASLt without a pass; model.cuh
// gpt2_projection_cast_by_layernorm), a --q115-stats forward (the passes count the boundary values),
// and a call the kernel cannot run (cutlass_q115_gemm_unsupported: shape, alignment). This file is the SF16 mode's one
// reader of ENABLE_CUTLASS (the Makefile sets it for the ENABLE_Q115=1 trainer and test where CUTLASS is found and
// links the kernel).
#pragma once

#include <stdio.h>
#include <stdlib.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/core/utils.h"
#include "llmc/kernels/gemm/cutlass_q115_gemm.h"
#include "llmc/kernels/gemm/gemm.cuh"

#if defined(ENABLE_CUTLASS)
static constexpr bool kSf16CutlassBuilt = true;  // the CUTLASS kernel is linked into this binary
#else
static constexpr bool kSf16CutlassBuilt = false;
#endif

struct Sf16Cutlass {
    GemmBoundaryGemm hook;     // hook.state points here
    const floatX* lm_head;     // the LM head's weight (wte): never taken
    unsigned long long gemms;  // GEMMs run with the boundary in the epilogue so far
};

// GemmBoundaryGemm::forward (see the header comment).
static bool sf16_cutlass_forward(GemmContext* ctx, floatX* out, floatX* pre, const floatX* inp, const floatX* weight, const floatX* bias,
                                 int N, int C, int OC) {
#if !defined(ENABLE_CUTLASS)
    (void)ctx, (void)out, (void)pre, (void)inp, (void)weight, (void)bias, (void)N, (void)C, (void)OC;
    return false;  // (not linked: never attached)
#else
    Sf16Cutlass* s = (Sf16Cutlass*)ctx->boundary_gemm->state;
    if (weight == s->lm_head || boundary_stats_active()) return false;
    const CutlassQ115Mode mode = kSf16TrueForward ? CUTLASS_Q115_Q131 : CUTLASS_Q115_Q115;  // traits.cuh's MATMUL_OUT chain
    if (cutlass_q115_gemm_unsupported(N, C, OC, out, pre, inp, weight, bias, mode)) return false;
    cutlass_q115_gemm_forward(out, pre, inp, weight, bias, N, C, OC, mode, ctx->stream);
    s->gemms++;
    return true;
#endif
}

static void sf16_cutlass_destroy(GemmContext* ctx) {
    free(ctx->boundary_gemm->state);
#if defined(ENABLE_CUTLASS)
    cutlass_q115_gemm_free();
#endif
}

// Whether this binary and the current GPU can run the kernel; when not, *why says so.
static inline bool sf16_cutlass_available(const char** why) {
    if (!kSf16CutlassBuilt) {
        *why = "this binary has no CUTLASS kernel (the ENABLE_Q115=1 build links it where make finds CUTLASS: make info; NO_CUTLASS=1 "
               "leaves it out)";
        return false;
    }
    if (cuda_current_cc() != 90) {
        *why = "the CUTLASS kernel is sm_90a code and this GPU is not compute capability 9.0";
        return false;
    }
    return true;
}

// --q115-cutlass on (1): attaches the hook to m's GEMM front where the kernel is available, else says in one line that
// the passes stay. Returns whether it is attached. Off (0): nothing.
static inline bool sf16_cutlass_attach(GPT2* m, int on, bool verbose) {
    if (!on) return false;
    const char* why = NULL;
    if (!sf16_cutlass_available(&why)) {
        if (verbose) printf("SF16: --q115-cutlass 1 without effect: %s; the matmul_out boundary stays a pass\n", why);
        return false;
    }
    Sf16Cutlass* s = (Sf16Cutlass*)calloc(1, sizeof(Sf16Cutlass));
    if (!s) die("out of host memory");
    s->hook = {s, sf16_cutlass_forward, sf16_cutlass_destroy};
    s->lm_head = m->params.wte;
    m->gemm.boundary_gemm = &s->hook;
    return true;
}

// The kernel's one-line description ("" in a binary without it).
static inline const char* sf16_cutlass_describe(void) {
#if defined(ENABLE_CUTLASS)
    return cutlass_q115_gemm_describe();
#else
    return "";
#endif
}

// GEMMs the hook ran with the boundary in the epilogue (0 when not attached).
static inline unsigned long long sf16_cutlass_gemms(const GPT2* m) {
    return m->gemm.boundary_gemm ? ((const Sf16Cutlass*)m->gemm.boundary_gemm->state)->gemms : 0ull;
}
