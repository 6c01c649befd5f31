// attention_cudnn.h - the cuDNN attention backend (USE_CUDNN=1): causal self-attention on cuDNN's fused
// scaled-dot-product attention, built with the cuDNN frontend's graph API in its own translation unit
// (attention_cudnn.cpp: the frontend's headers take about a minute to compile, so they compile once per
// build folder, not with every trainer variant). attention_forward / attention_backward in attention.cuh
// call it in the builds that select it (kAttentionCudnn, llmc/core/precision.h); nothing else does, except
// the dev/cuda/attention harness, which compares it with the built-in kernels.
//
// Tensors (row-major, the trainer's layout, the same as attention.cuh):
//   qkv  (B, T, 3, NH, HS) 16-bit float: q, k, v read in place through strides
//   out  (B, T, NH, HS)    16-bit float: heads side by side, what the attention projection reads
//   lse  (B, NH, T)        float: natural-log log-sum-exp of each scaled, masked score row (cuDNN's
//                          softmax "Stats" output, the same quantity the built-in kernels keep)
//   dout (B, T, NH, HS), dqkv (B, T, 3, NH, HS): gradients, dqkv fully overwritten
// fp16: true for half, false for __nv_bfloat16. Scale 1/sqrt(HS), causal (query t sees keys 0..t).
// Errors: a shape or configuration cuDNN cannot plan, or any cuDNN / CUDA failure, prints `error: cuDNN
// attention ...` naming the shape and cuDNN's message, and exits with status 1.
#pragma once

#include <stddef.h>
#include <cuda_runtime.h>

// Forward: out and lse from qkv. The graph for (B, T, NH, HS, dtype) is built on first use and cached; its
// workspace is allocated then (cudaMalloc, growing as larger plans need). Asynchronous on `stream`.
void attention_cudnn_forward(void* out, float* lse, const void* qkv, int B, int T, int NH, int HS, bool fp16,
                             cudaStream_t stream);

// Backward with cuDNN's deterministic algorithm (bitwise-equal reruns, so resume stays bit-exact): dqkv
// from dout, qkv, out and lse of the forward. Cached like the forward. Asynchronous on `stream`.
void attention_cudnn_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                              int B, int T, int NH, int HS, bool fp16, cudaStream_t stream);

// "cuDNN 9.19.0 (frontend 1.32.0)": the library loaded at run time and the frontend compiled in. Creates
// the cuDNN handle if needed (so a missing or broken library is reported at start-up, not at step 1).
const char* attention_cudnn_version();

// Frees the workspace and the cached graphs and destroys the handle (at exit; safe to call twice).
void attention_cudnn_free();
