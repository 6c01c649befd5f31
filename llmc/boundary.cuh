// boundary.cuh - what a forward kernel calls on a value it is about to store (or feed to the next
// stage) at a named tensor boundary.
//
// In the plain builds this is the identity on the float value (the kernel then casts to floatX).
// The SF16 mode (ENABLE_Q115) replaces boundary_value() with its quantize-dequantize policy here and
// nowhere else, so kernels never contain #ifdef ENABLE_Q115. Backward kernels never call it.
#pragma once

enum BoundarySite {
    MATMUL_OUT,     // output of a linear layer (after bias)
    ATTN_SCORES,    // scaled q·k scores as the softmax reads them
    ATTN_PROBS,     // softmax probabilities before they multiply V
    LOGITS,         // classifier logits as the softmax reads them
    LAYERNORM_OUT,  // normalized, affine-transformed LayerNorm output
    RESIDUAL_OUT,   // residual stream after an add
    GELU_OUT,       // GELU activation output
    ENCODER_OUT     // wte + wpe sum
};

// Value v (fp32 in registers) as it crosses boundary `Site`. Plain build: unchanged.
template <BoundarySite Site>
__device__ __forceinline__ float boundary_value(float v) { return v; }
