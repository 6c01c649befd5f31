// boundary_sites.h - the named forward storage boundaries (plain C, so host code and tests can name
// them): llmc/kernels/boundary.cuh applies the build's boundary policy at each, and the TensorCast build's
// --cast flag (llmc/modes/tcast/tcast_config.h) chooses a datatype per site by these names.
#pragma once

typedef enum {
    MATMUL_OUT,     // output of a linear layer (after bias)
    ATTN_SCORES,    // scaled q·k scores as the softmax reads them
    ATTN_PROBS,     // softmax probabilities before they multiply V (exp outputs: >= +0 or NaN, which a mode may rely on)
    LOGITS,         // classifier logits as the softmax reads them
    LAYERNORM_OUT,  // normalized, affine-transformed LayerNorm output
    RESIDUAL_OUT,   // residual stream after an add
    GELU_OUT,       // GELU activation output
    ENCODER_OUT,    // wte + wpe sum
    NUM_BOUNDARY_SITES
} BoundarySite;

static const char* const BOUNDARY_SITE_NAMES[NUM_BOUNDARY_SITES] = {
    "matmul_out", "attn_scores", "attn_probs", "logits", "layernorm_out", "residual_out", "gelu_out", "encoder_out"};
