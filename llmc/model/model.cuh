// model.cuh - GPT-2 on the GPU: parameters, activations, forward, backward, AdamW update.
//
// The math is train_gpt2.c's (the CPU fp32 specification); this file only decides where tensors
// live and which kernel computes what. Storage is floatX (precision.h) for parameters, gradients
// and activations; LayerNorm statistics, attention log-sum-exps, losses and the optimizer state
// (AdamW moments, master weights) are fp32. All work runs on one stream (model->stream); the host
// synchronizes only to read losses and the gradient norm.
//
// Layouts are row-major. Per-layer activations of all L layers are stored back to back
// (layer l of ln1 starts at ln1 + l*B*T*C). Recomputation (-r) trades these buffers for compute:
//   recompute >= 1: fch_gelu is one (B,T,4C) buffer, recomputed from fch in backward
//   recompute >= 2: ln1 and ln2 are one (B,T,C) buffer each, recomputed from the residual stream
#pragma once

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "llmc/core/precision.h"
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/model/gpt2_config.h"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/attention/attention.cuh"
#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/fused_classifier.cuh"
#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/obs/profiler.cuh"
#include "llmc/dist/multi_gpu.cuh"
#include "llmc/obs/tensor_stats.cuh"

// The 16 parameter tensors in checkpoint order (doc/FORMATS.md), pointers into one flat buffer.
struct ParameterTensors {
    floatX *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    floatX *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb, *lnfw, *lnfb;
};

static inline void point_parameter_tensors(ParameterTensors* p, floatX* memory, const size_t sizes[NUM_PARAMETER_TENSORS]) {
    floatX** ptrs[NUM_PARAMETER_TENSORS] = {
        &p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
        &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { *ptrs[i] = memory; memory += sizes[i]; }
}

// Forward activations kept for backward, plus the scratch buffers backward needs.
struct ActivationTensors {
    floatX* encoded;     // (B,T,C)       wte + wpe
    floatX* ln1;         // (L,B,T,C)     or (B,T,C) with recompute >= 2
    float* ln1_mean;     // (L,B,T)
    float* ln1_rstd;     // (L,B,T)
    floatX* qkv;         // (L,B,T,3C)
    floatX* atty;        // (L,B,T,C)     attention output
    float* att_lse;      // (L,B,NH,T)    softmax log-sum-exp per query (flash attention)
    floatX* residual2;   // (L,B,T,C)
    floatX* ln2;         // (L,B,T,C)     or (B,T,C) with recompute >= 2
    float* ln2_mean;     // (L,B,T)
    float* ln2_rstd;     // (L,B,T)
    floatX* fch;         // (L,B,T,4C)    fc output before GELU
    floatX* fch_gelu;    // (L,B,T,4C)    or (B,T,4C) with recompute >= 1
    floatX* residual3;   // (L,B,T,C)
    floatX* lnf;         // (B,T,C)
    float* lnf_mean;     // (B,T)
    float* lnf_rstd;     // (B,T)
    float* losses;       // (B,T)
    floatX* output;      // (B,T,max(3C,Vp))  logits, then dlogits in place; projection outputs
    // backward scratch
    floatX* dresidual;   // (B,T,C)       gradient of the residual stream
    floatX* dbtc;        // (B,T,C)       dln / datty
    floatX* dbt4c;       // (B,T,4C)      dfch, dqkv
};

// Element counts (in their own type) of the ActivationTensors fields, in declaration order.
#define NUM_ACTIVATION_TENSORS 22
static inline void activation_tensor_sizes(size_t s[NUM_ACTIVATION_TENSORS], const GPT2Config* c, size_t B, size_t T, int recompute) {
    size_t C = c->channels, L = c->num_layers, NH = c->num_heads, Vp = c->padded_vocab_size, BT = B * T;
    size_t out_cols = Vp > 3 * C ? Vp : 3 * C;
    size_t v[NUM_ACTIVATION_TENSORS] = {
        BT * C,                               // encoded
        (recompute >= 2 ? 1 : L) * BT * C,    // ln1
        L * BT, L * BT,                       // ln1 stats
        L * BT * 3 * C,                       // qkv
        L * BT * C,                           // atty
        L * B * NH * T,                       // att_lse
        L * BT * C,                           // residual2
        (recompute >= 2 ? 1 : L) * BT * C,    // ln2
        L * BT, L * BT,                       // ln2 stats
        L * BT * 4 * C,                       // fch
        (recompute >= 1 ? 1 : L) * BT * 4 * C,// fch_gelu
        L * BT * C,                           // residual3
        BT * C, BT, BT,                       // lnf, stats
        BT,                                   // losses
        BT * out_cols,                        // output
        BT * C, BT * C, BT * 4 * C};          // dresidual, dbtc, dbt4c
    memcpy(s, v, sizeof(v));
}
static const int ACTIVATION_IS_FLOAT[NUM_ACTIVATION_TENSORS] = {0, 0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0};

struct GPT2 {
    GPT2Config config;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;
    ParameterTensors params, grads;
    floatX* params_memory;
    floatX* grads_memory;
    float* master_weights;   // fp32 copy the optimizer updates (NULL in the FP32 build or with -w 0)
    float* m_memory;         // AdamW first moment
    float* v_memory;         // AdamW second moment
    ActivationTensors acts;
    void* acts_memory;
    size_t acts_bytes;
    int B, T, recompute, gelu_fusion;
    int* inputs;             // device (B,T)
    int* targets;            // device (B,T)
    int* inputs_host;        // pinned copies, so uploads are asynchronous and the encoder backward can group tokens
    int* targets_host;
    float* losses_host;      // pinned (B,T)
    float* scratch;          // fp32 scratch: LayerNorm/bias partials, gradient-norm partials
    size_t scratch_floats;
    uint8_t* att_scales;     // (L, attention_tcast_scales_bytes(B,T,NH)) the group scales each layer's attention forward
                             // keeps for its backward, beside att_lse (TensorCast attention casts); NULL: none kept
    size_t att_scales_layer; // bytes per layer (of the allocated B x T)
    void* att_ds;            // attention_backward's dS workspace (attention_backward_ds_bytes; NULL: none needed), all layers
    size_t att_ds_bytes;
    EncoderBackwardWorkspace encoder_ws;
    GemmContext gemm;
    cudaStream_t stream;
    // FP16 dynamic loss scaling (unused in other builds): loss is multiplied by loss_scale before
    // backward; gradients are divided by it in the update. Halved (and the step skipped) on a
    // non-finite gradient, doubled after LOSS_SCALE_WINDOW good steps.
    float loss_scale;
    int good_steps;
    unsigned long long seed; // stochastic rounding seed (each update derives its own from it and the step)
    KernelProfiler* prof;    // optional per-family timing (NULL: off)
    TensorStats* tstats;     // per-layer tensor statistics (--tensor-stats, llmc/obs/tensor_stats.cuh; NULL: off)
    BoundaryCasts* casts;    // whole-tensor boundary casts a mode attached (TensorCast, llmc/kernels/boundary.cuh); NULL: none
    int keep_activations;    // 1: every activation is written in BF16 even where only the FP8 backend reads it
                             // (tests comparing activations; tensor statistics set it on their steps)
    // Data parallelism (llmc/dist/multi_gpu.cuh); mg == NULL for a single-GPU run.
    MultiGpu* mg;
    int reduce_grads;        // 1 on the last micro-step: backward reduces each finished bucket across ranks
    OptimizerSegment* segments;  // what this rank's AdamW updates (16 tensors, or its ZeRO-1 shard)
    int num_segments;
    size_t state_elems;      // length of m, v and the master weights (num_parameters, or the ZeRO-1 shard)
};

#define LOSS_SCALE_INIT 65536.0f
#define LOSS_SCALE_WINDOW 2000

// Allocate parameters (and gradients, optimizer state) for config on the current device.
// use_master_weights: keep an fp32 copy for AdamW (always on in the FP32 build, where it is the params).
static inline void gpt2_allocate_parameters(GPT2* m, const GPT2Config* config, int use_master_weights) {
    memset(m, 0, sizeof(*m));
    m->config = *config;
    gpt2_param_sizes(config, m->param_sizes);
    m->num_parameters = gpt2_num_parameters(config);
    size_t n = m->num_parameters;
    cudaCheck(cudaMalloc(&m->params_memory, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&m->grads_memory, n * sizeof(floatX)));
    cudaCheck(cudaMemset(m->grads_memory, 0, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&m->m_memory, n * sizeof(float)));
    cudaCheck(cudaMalloc(&m->v_memory, n * sizeof(float)));
    cudaCheck(cudaMemset(m->m_memory, 0, n * sizeof(float)));
    cudaCheck(cudaMemset(m->v_memory, 0, n * sizeof(float)));
    if (!kStorageFP32 && use_master_weights) cudaCheck(cudaMalloc(&m->master_weights, n * sizeof(float)));
    point_parameter_tensors(&m->params, m->params_memory, m->param_sizes);
    point_parameter_tensors(&m->grads, m->grads_memory, m->param_sizes);
    cudaCheck(cudaStreamCreate(&m->stream));
    gemm_context_init(&m->gemm, m->stream);
    m->loss_scale = LOSS_SCALE_INIT;
    m->good_steps = 0;
    m->seed = 0x5EEDull;
    m->state_elems = n;
    m->segments = (OptimizerSegment*)malloc_check(NUM_PARAMETER_TENSORS * sizeof(OptimizerSegment));
    m->num_segments = multi_gpu_segments(NULL, m->param_sizes, m->segments, NUM_PARAMETER_TENSORS);
}

// Join a multi-GPU run (after gpt2_allocate_parameters, before gpt2_set_parameters): the optimizer
// then updates the segments multi_gpu_segments gives, and with ZeRO-1 m, v and the master weights
// shrink to this rank's shard.
static inline void gpt2_attach_multi_gpu(GPT2* m, MultiGpu* mg) {
    m->mg = mg;
    free(m->segments);
    const int max_seg = mg->plan->num_slices > NUM_PARAMETER_TENSORS ? mg->plan->num_slices : NUM_PARAMETER_TENSORS;
    m->segments = (OptimizerSegment*)malloc_check(max_seg * sizeof(OptimizerSegment));
    m->num_segments = multi_gpu_segments(mg, m->param_sizes, m->segments, max_seg);
    m->state_elems = multi_gpu_state_elems(mg, m->num_parameters);
    if (m->state_elems != m->num_parameters) {
        cudaCheck(cudaFree(m->m_memory));
        cudaCheck(cudaFree(m->v_memory));
        cudaCheck(cudaMalloc(&m->m_memory, m->state_elems * sizeof(float)));
        cudaCheck(cudaMalloc(&m->v_memory, m->state_elems * sizeof(float)));
        cudaCheck(cudaMemset(m->m_memory, 0, m->state_elems * sizeof(float)));
        cudaCheck(cudaMemset(m->v_memory, 0, m->state_elems * sizeof(float)));
        if (m->master_weights) {
            cudaCheck(cudaFree(m->master_weights));
            cudaCheck(cudaMalloc(&m->master_weights, m->state_elems * sizeof(float)));
        }
    }
    multi_gpu_alloc_wire(mg, m->num_parameters);
}

// Upload fp32 parameters (host, checkpoint order) into the floatX parameters (round to nearest)
// and the fp32 master weights.
static inline void gpt2_set_parameters(GPT2* m, const float* host_params) {
    size_t n = m->num_parameters;
    floatX* tmp = (floatX*)malloc_check(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) tmp[i] = (floatX)host_params[i];
    cudaCheck(cudaMemcpy(m->params_memory, tmp, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(tmp);
    if (!m->master_weights) return;
    for (int i = 0; i < m->num_segments; i++) {  // this rank's parts (all of it without ZeRO-1)
        const OptimizerSegment& sg = m->segments[i];
        cudaCheck(cudaMemcpy(m->master_weights + sg.state_offset, host_params + sg.param_offset, sg.count * sizeof(float),
                             cudaMemcpyHostToDevice));
    }
}

// fp32 copy of the parameters on the host (caller frees): the master weights when kept whole, else
// the floatX parameters widened.
static inline float* gpt2_get_parameters(const GPT2* m) {
    size_t n = m->num_parameters;
    float* out = (float*)malloc_check(n * sizeof(float));
    if (m->master_weights && m->state_elems == n) {
        cudaCheck(cudaMemcpy(out, m->master_weights, n * sizeof(float), cudaMemcpyDeviceToHost));
    } else {
        floatX* tmp = (floatX*)malloc_check(n * sizeof(floatX));
        cudaCheck(cudaMemcpy(tmp, m->params_memory, n * sizeof(floatX), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) out[i] = (float)tmp[i];
        free(tmp);
    }
    return out;
}

// Bytes tensor i of sizes[] takes in the activation block (rounded up to 256 for alignment).
static inline size_t activation_tensor_bytes(const size_t sizes[NUM_ACTIVATION_TENSORS], int i) {
    return ceil_div_sz(sizes[i] * (ACTIVATION_IS_FLOAT[i] ? sizeof(float) : sizeof(floatX)), 256) * 256;
}

// Bytes of the activation block for micro-batch B x T at recompute level 0..2 (one cudaMalloc).
static inline size_t gpt2_activation_bytes(const GPT2Config* c, int B, int T, int recompute) {
    size_t sizes[NUM_ACTIVATION_TENSORS], bytes = 0;
    activation_tensor_sizes(sizes, c, B, T, recompute);
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) bytes += activation_tensor_bytes(sizes, i);
    return bytes;
}

// The attention buffers for the configured casts and backend, one for every layer (call after the attention casts are
// configured, again after a reconfiguration; gpt2_allocate_activations calls it once before any mode configures casts):
// - the group scales the attention forward keeps for its backward (attention_tcast_scales_bytes: the TensorCast attention
//   casts of tile-scaled round-even datatypes, llmc/kernels/attention/attention_tcast.cuh; with E4M3 / E5M2 probabilities
//   also their FP8 codes, B T^2 NH / 2 bytes a layer, 409 MiB at d12 B=64 T=1024), one slice per layer as
//   att_lse: the attention forward is never recomputed (-r recomputes GELU and LayerNorm only), so each layer's backward
//   reads what its forward wrote. NULL when the configuration keeps no scales, which is every run but TensorCast's with
//   such a datatype at an attention site;
// - the backward's dS workspace (attention_backward_ds_bytes: where the built-in kernels run, not on cuDNN), one buffer
//   that every layer's backward reuses; reallocated only when its size changes.
// The probabilities' codes grow as B T^2 NH L / 2: they are kept only where they leave kAttnKeptSlackBytes of the device
// free beyond the dS workspace (for what is allocated after them and on the first step: llmc/train/recompute_plan.h's
// reserve); else a note, and the dK/dV kernel recomputes P^ as it does for other datatypes (the same bits, slower).
static const size_t kAttnKeptSlackBytes = (size_t)2 << 30;
static inline void gpt2_allocate_attention_buffers(GPT2* m) {
    if (m->att_scales) cudaCheck(cudaFree(m->att_scales));
    m->att_scales = NULL;
    const int B = m->B, T = m->T, NH = m->config.num_heads, L = m->config.num_layers;  // (the allocated B x T)
    m->att_scales_layer = attention_tcast_scales_bytes(B, T, NH);
    if (attention_tcast_keeps_p()) {
        size_t free_b = 0, total_b = 0;
        cudaCheck(cudaMemGetInfo(&free_b, &total_b));
        const size_t ds_new = m->att_ds ? 0 : attention_backward_ds_bytes(B, T, NH, m->config.channels / NH);
        const size_t need = m->att_scales_layer * L + ds_new + kAttnKeptSlackBytes;
        if (need > free_b) {
            printf("note: the attention probabilities' FP8 codes (%.0f MiB for %d layers at B=%d T=%d) would leave less than "
                   "%.0f MiB of the %.0f MiB free: not kept, the backward recomputes them (same results, slower)\n",
                   (double)attention_tcast_pcode_bytes(B, T, NH) * L / 1048576.0, L, B, T,
                   (double)kAttnKeptSlackBytes / 1048576.0, (double)free_b / 1048576.0);
            attention_tcast_set_keep_probs(false);
            m->att_scales_layer = attention_tcast_scales_bytes(B, T, NH);
        }
    }
    if (m->att_scales_layer) cudaCheck(cudaMalloc(&m->att_scales, m->att_scales_layer * L));
    const size_t ds_bytes = attention_backward_ds_bytes(m->B, m->T, m->config.num_heads, m->config.channels / m->config.num_heads);
    if (ds_bytes == m->att_ds_bytes) return;
    if (m->att_ds) cudaCheck(cudaFree(m->att_ds));
    m->att_ds = NULL;
    m->att_ds_bytes = ds_bytes;
    if (ds_bytes) cudaCheck(cudaMalloc(&m->att_ds, ds_bytes));
}

// Allocate activations for micro-batch B x T (once; later calls may use any B*T within it).
static inline void gpt2_allocate_activations(GPT2* m, int B, int T, int recompute, int gelu_fusion) {
    const GPT2Config* c = &m->config;
    if (T > c->max_seq_len) die("-t: T=%d exceeds the model's maxT=%d", T, c->max_seq_len);
    m->B = B;
    m->T = T;
    m->recompute = recompute;
    m->gelu_fusion = gelu_fusion;
    size_t sizes[NUM_ACTIVATION_TENSORS];
    activation_tensor_sizes(sizes, c, B, T, recompute);
    const size_t bytes = gpt2_activation_bytes(c, B, T, recompute);
    cudaCheck(cudaMalloc(&m->acts_memory, bytes));
    m->acts_bytes = bytes;
    void** ptrs = (void**)&m->acts;  // the struct is NUM_ACTIVATION_TENSORS pointers in order
    char* p = (char*)m->acts_memory;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        ptrs[i] = p;
        p += activation_tensor_bytes(sizes, i);
    }
    size_t BT = (size_t)B * T;
    cudaCheck(cudaMalloc(&m->inputs, BT * sizeof(int)));
    cudaCheck(cudaMalloc(&m->targets, BT * sizeof(int)));
    cudaCheck(cudaMallocHost(&m->inputs_host, BT * sizeof(int)));
    cudaCheck(cudaMallocHost(&m->targets_host, BT * sizeof(int)));
    cudaCheck(cudaMallocHost(&m->losses_host, BT * sizeof(float)));
    size_t C4 = 4 * (size_t)c->channels;
    m->scratch_floats = layernorm_backward_scratch_floats((int)BT, c->channels);
    size_t bias_floats = matmul_dbias_scratch_floats((int)BT, (int)(C4 > (size_t)c->padded_vocab_size ? C4 : c->padded_vocab_size));
    if (bias_floats > m->scratch_floats) m->scratch_floats = bias_floats;
    size_t att_floats = BT * (size_t)c->num_heads;  // attention backward: D = rowsum(dout * out)
    if (att_floats > m->scratch_floats) m->scratch_floats = att_floats;
    size_t norm_floats = global_norm_partials_floats();
    if (norm_floats > m->scratch_floats) m->scratch_floats = norm_floats;
    cudaCheck(cudaMalloc(&m->scratch, m->scratch_floats * sizeof(float)));
    encoder_backward_workspace_create(&m->encoder_ws, B * T, c->channels, c->padded_vocab_size);
    gpt2_allocate_attention_buffers(m);  // (the dS workspace; the scales once a mode configures attention casts)
}

// Layer l's slice of att_scales (NULL: none kept). A call's B x T (B*T <= the allocated, T <= its T) needs no more
// than the slice: attention_tcast_scales_bytes grows with B*T and with T.
static inline uint8_t* gpt2_attention_scales(GPT2* m, int l) {
    return m->att_scales ? m->att_scales + (size_t)l * m->att_scales_layer : NULL;
}

// Upload a batch (host token ids, validated < V) into the pinned and device buffers.
static inline void gpt2_upload_batch(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    size_t BT = (size_t)B * T;
    int V = m->config.vocab_size;
    for (size_t i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) die("input token %d at position %zu is outside [0, %d)", inputs[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V)) die("target token %d at position %zu is outside [0, %d)", targets[i], i, V);
    }
    // the previous step's asynchronous reads of the pinned buffers must be finished
    cudaCheck(cudaStreamSynchronize(m->stream));
    memcpy(m->inputs_host, inputs, BT * sizeof(int));
    cudaCheck(cudaMemcpyAsync(m->inputs, m->inputs_host, BT * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    if (targets) {
        memcpy(m->targets_host, targets, BT * sizeof(int));
        cudaCheck(cudaMemcpyAsync(m->targets, m->targets_host, BT * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    }
}

// The one place where a finished forward tensor is observed: gpt2_forward calls it right after each
// stored activation x (rows x cols floatX, row-major) is complete and before anything overwrites it
// (recompute shares ln1 / ln2 / fch_gelu across layers; acts.output holds attproj, fcproj and the
// logits only until the next GEMM or the classifier). site: the boundary site (llmc/core/boundary_sites.h)
// whose values x holds, NUM_BOUNDARY_SITES for the attention output (no site); tensor_id: a
// TensorStatsAct; layer: 0..L-1, or -1 for encoded, lnf and logits. The FP8 / TCFP-12 backends store
// BF16 outputs like the base one, so x is what every later reader sees. LOGITS on the training path
// (classifier_reads) is the raw LM-head output: the classifier applies the MATMUL_OUT boundary as it
// reads, so the statistics apply it too (idempotent on stored logits, identity outside SF16).
// Today: records statistics on --tensor-stats steps; otherwise returns at once (no kernel).
static inline void gpt2_stored(GPT2* m, BoundarySite site, int tensor_id, int layer, floatX* x, size_t rows, size_t cols) {
    if (!tensor_stats_acts_active(m->tstats)) return;
    prof_mark(m->prof, PROF_OTHER, m->stream);
    tensor_stats_record_act(m->tstats, tensor_id, layer, x, rows * cols, site == LOGITS, m->stream);
}

// The id of a site-cast tensor in the stochastic-rounding seeds (doc/TCAST.md 5.3): its layer (-1 for
// the model-level tensors) and which of the layer's tensors it is. The backward's recomputations use the
// forward's id, so they cast identically.
enum { CAST_ID_LN1, CAST_ID_LN2, CAST_ID_RESIDUAL2, CAST_ID_RESIDUAL3, CAST_ID_GELU, CAST_ID_ENCODER, CAST_ID_LOGITS, CAST_ID_ATTN };
static inline unsigned long long gpt2_cast_id(int layer, int which) { return (unsigned long long)(layer + 1) * 8 + which; }

// out = GELU(pre) of layer l's MLP with gelu.cuh's kernel (the -ge 0 forward; the -r 1 recomputation in the backward,
// with the forward's seed id) and the GELU_OUT site cast of out: where casts are attached, their boundary_gelu (one
// kernel where the type allows, doc/TCAST.md 5.5); else gelu_forward alone (no site cast applies). pre and out
// (rows, cols) row-major; pre is only read (its MATMUL_OUT cast, if any, was the forward GEMM's).
static inline void gpt2_gelu(GPT2* m, floatX* out, floatX* pre, size_t rows, size_t cols, int layer) {
    if (boundary_gelu(m->casts, out, pre, rows, cols, BOUNDARY_NO_ID, gpt2_cast_id(layer, CAST_ID_GELU), BOUNDARY_GELU_KERNEL, m->stream))
        return;
    gelu_forward(out, pre, rows * cols, m->stream);
}

// out = LayerNorm(inp1), or residual = inp1 + inp2 and out = LayerNorm(residual) when inp2 != NULL (one fused
// kernel), out being the input of the next matmul_forward, whose weight is `consumer`: that GEMM's backend may
// run the LayerNorm itself together with what it needs of out (the TensorCast backend: the x operand's cast,
// written as the rows are normalized), or write the statistics now and out's FP8 codes inside that GEMM call (FP8 /
// TCFP-12: out then exists in BF16 only with keep_activations, and only after that call); else the LayerNorm kernel,
// with the backend's amax slot for out.
static inline void gpt2_layernorm(GPT2* m, floatX* residual, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                  const floatX* inp2, const floatX* w, const floatX* b, int N, int C, const floatX* consumer) {
    GemmContext* g = &m->gemm;
    if (gemm_lowp_layernorm(g, GemmLayerNorm{residual, out, mean, rstd, inp1, inp2, w, b, N, C}, consumer)) return;
    unsigned int* amax = gemm_amax_slot(g, out, (size_t)N * C);
    if (inp2) fused_residual_layernorm_forward(residual, out, mean, rstd, inp1, inp2, w, b, N, C, m->stream, amax);
    else layernorm_forward(out, mean, rstd, inp1, w, b, N, C, m->stream, amax);
}

// Whether the residual + LayerNorm after the projection GEMM about to run (attproj or fcproj, output (N, C))
// runs with the boundary casts of its three tensors in one kernel (the attached casts' residual_layernorm:
// TensorCast, doc/TCAST.md 5.5); if so, tells the GEMM front that this GEMM's MATMUL_OUT cast is left to that
// kernel (out_cast_by_reader, for the next matmul_forward call only); if not, that the cast stays a pass after the
// GEMM that fused runs use (out_cast_by_reader 2). Not while tensor statistics record the projection output between
// the two (gpt2_stored must see it cast). False in every build without such casts.
// A per-value MATMUL_OUT boundary (SF16) is likewise left to the residual + LayerNorm kernel, which reads the projection
// through it (layernorm.cuh ln_projection_value): out_cast_by_reader 1, except while tensor statistics record the
// projection or --q115-stats counts (the front's pass counts it); either way the projection is the base backend's GEMM
// (cuBLASLt), never the mode's boundary GEMM (gemm.cuh), so that the flags do not change its bits.
static inline bool gpt2_projection_cast_by_layernorm(GPT2* m, int N, int C) {
    const bool stats = tensor_stats_acts_active(m->tstats);
    const bool fused = !stats && boundary_residual_layernorm_fused(m->casts, N, C);
    const bool reader_bounds = !boundary_is_identity<MATMUL_OUT>() && !stats && !boundary_stats_active();
    m->gemm.out_cast_by_reader = fused || reader_bounds ? 1 : 2;
    return fused;
}

// residual_out = residual + x and ln_out = LayerNorm(residual_out) (one fused kernel; consumer: the weight of
// the GEMM that reads ln_out, see gpt2_layernorm), then the storage boundaries of both. A TensorCast cast of the
// residual stream changes the LayerNorm's input, so the LayerNorm is then computed again from the cast residual
// (its statistics too); in the other builds the two casts are no-ops and this is the fused kernel alone.
// sites_fused (gpt2_projection_cast_by_layernorm said yes before the GEMM of x, whose weight is x_weight): one
// kernel does all of it together with x's MATMUL_OUT cast, which that GEMM left out (the same bits; x is then
// scratch: a.output).
static inline void gpt2_residual_layernorm(GPT2* m, floatX* res_out, floatX* ln_out, float* mean, float* rstd, const floatX* res_in,
                                           floatX* x, const floatX* w, const floatX* b, int N, int C, int layer, int ln_id,
                                           int res_id, const floatX* consumer, bool sites_fused, const floatX* x_weight) {
    cudaStream_t s = m->stream;
    if (sites_fused) {
        const BoundaryResidualLn job = {res_out, ln_out, mean, rstd, res_in, x, w, b, N, C, boundary_weight_id(m->casts, x_weight),
                                        gpt2_cast_id(layer, res_id), gpt2_cast_id(layer, ln_id)};
        boundary_residual_layernorm(m->casts, job, s);
        return;
    }
    gpt2_layernorm(m, res_out, ln_out, mean, rstd, res_in, x, w, b, N, C, consumer);
    if (boundary_tensor_active(m->casts, RESIDUAL_OUT)) {
        boundary_tensor_cast(m->casts, RESIDUAL_OUT, gpt2_cast_id(layer, res_id), res_out, N, C, s);
        layernorm_forward(ln_out, mean, rstd, res_out, w, b, N, C, s);
    }
    boundary_tensor_cast(m->casts, LAYERNORM_OUT, gpt2_cast_id(layer, ln_id), ln_out, N, C, s);
}

// Whether the training step's classifier applies the run-time casts of the logits (the LM head's MATMUL_OUT, then
// LOGITS) to the rows it stages, so that the forward leaves out their two passes over the (N, Vp) logits (the attached
// casts' classifier: TensorCast, doc/TCAST.md 5.5). Not while tensor statistics record the logits (gpt2_stored must see
// them cast). False in every build without such casts.
static inline bool gpt2_logits_cast_by_classifier(GPT2* m, int N, int Vp) {
    return !tensor_stats_acts_active(m->tstats) && boundary_classifier_fused(m->casts, N, Vp);
}

// Forward pass to the logits (in acts.output, (B,T,Vp)) on the batch uploaded last. classifier_reads:
// the fused classifier is the logits' only reader, so the LM head may leave the MATMUL_OUT boundary
// to it (matmul_forward_logits; identical values); false stores the logits through the boundary.
// Returns true when the logits are left uncast for the classifier to cast (classifier_reads and
// gpt2_logits_cast_by_classifier): the caller then runs it through boundary_classifier (gpt2_classifier).
static inline bool gpt2_forward(GPT2* m, int B, int T, bool classifier_reads = false) {
    if (B * T > m->B * m->T || T > m->T) die("forward: B=%d T=%d exceeds the allocated B=%d T=%d", B, T, m->B, m->T);
    const GPT2Config* c = &m->config;
    const int L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    const int N = B * T;
    const size_t BTC = (size_t)N * C;
    const ParameterTensors& p = m->params;
    ActivationTensors& a = m->acts;
    cudaStream_t s = m->stream;
    GemmContext* g = &m->gemm;
    // (an FP8 backend may otherwise compute the GELU output inside its quantization and never store it)
    g->keep_activations = m->keep_activations || tensor_stats_acts_active(m->tstats);

    prof_mark(m->prof, PROF_ENCODER, s);
    encoder_forward(a.encoded, m->inputs, p.wte, p.wpe, B, T, C, s);
    boundary_tensor_cast(m->casts, ENCODER_OUT, gpt2_cast_id(-1, CAST_ID_ENCODER), a.encoded, N, C, s);
    gpt2_stored(m, ENCODER_OUT, TS_ENCODED, -1, a.encoded, N, C);
    prof_mark(m->prof, PROF_LAYERNORM_FWD, s);
    // (gemm_amax_slot: the FP8 backend takes the amax of each LayerNorm output, the next GEMM's input,
    // from the LayerNorm kernel instead of an extra pass; NULL in other builds)
    gpt2_layernorm(m, NULL, a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, NULL, p.ln1w, p.ln1b, N, C, p.qkvw);
    boundary_tensor_cast(m->casts, LAYERNORM_OUT, gpt2_cast_id(0, CAST_ID_LN1), a.ln1, N, C, s);
    for (int l = 0; l < L; l++) {
        const floatX* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BTC;
        floatX* ln1 = a.ln1 + (m->recompute >= 2 ? 0 : l * BTC);
        floatX* qkv = a.qkv + l * 3 * BTC;
        floatX* atty = a.atty + l * BTC;
        float* lse = a.att_lse + (size_t)l * B * NH * T;
        floatX* residual2 = a.residual2 + l * BTC;
        floatX* ln2 = a.ln2 + (m->recompute >= 2 ? 0 : l * BTC);
        floatX* fch = a.fch + l * 4 * BTC;
        floatX* fch_gelu = a.fch_gelu + (m->recompute >= 1 ? 0 : l * 4 * BTC);
        floatX* residual3 = a.residual3 + l * BTC;
        prof_mark(m->prof, PROF_MATMUL_FWD, s);
        matmul_forward(g, qkv, ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, N, C, 3 * C, NULL);
        // (ln1: written by the previous layer's residual + LayerNorm, or inside the qkv GEMM's quantization, gpt2_layernorm)
        gpt2_stored(m, LAYERNORM_OUT, TS_LN1, l, ln1, N, C);
        gpt2_stored(m, MATMUL_OUT, TS_QKV, l, qkv, N, 3 * C);
        prof_mark(m->prof, PROF_ATTENTION_FWD, s);
        attention_forward(atty, lse, qkv, B, T, C, NH, s, gemm_amax_slot(g, atty, BTC),
                          boundary_attention_seed(m->casts, gpt2_cast_id(l, CAST_ID_ATTN)),  // (amax: the attproj input)
                          gpt2_attention_scales(m, l));
        gpt2_stored(m, NUM_BOUNDARY_SITES, TS_ATTY, l, atty, N, C);
        prof_mark(m->prof, PROF_MATMUL_FWD, s);
        const bool ln2_casts = gpt2_projection_cast_by_layernorm(m, N, C);
        matmul_forward(g, a.output, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, N, C, C, NULL);
        gpt2_stored(m, MATMUL_OUT, TS_ATTPROJ, l, a.output, N, C);
        prof_mark(m->prof, PROF_LAYERNORM_FWD, s);
        gpt2_residual_layernorm(m, residual2, ln2, a.ln2_mean + l * N, a.ln2_rstd + l * N, residual, a.output, p.ln2w + l * C,
                                p.ln2b + l * C, N, C, l, CAST_ID_LN2, CAST_ID_RESIDUAL2, p.fcw + (size_t)l * 4 * C * C, ln2_casts,
                                p.attprojw + (size_t)l * C * C);
        gpt2_stored(m, RESIDUAL_OUT, TS_RESIDUAL2, l, residual2, N, C);
        prof_mark(m->prof, PROF_MATMUL_FWD, s);
        if (m->gelu_fusion) {
            // (the front also applies the GELU output's GELU_OUT cast: with fch's MATMUL_OUT cast, one kernel)
            matmul_forward(g, fch_gelu, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, N, C, 4 * C, fch,
                           gpt2_cast_id(l, CAST_ID_GELU));
        } else {
            matmul_forward(g, fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, N, C, 4 * C, NULL);
            prof_mark(m->prof, PROF_GELU, s);
            gpt2_gelu(m, fch_gelu, fch, N, 4 * C, l);
        }
        gpt2_stored(m, LAYERNORM_OUT, TS_LN2, l, ln2, N, C);  // (after the fc GEMM: see ln1)
        gpt2_stored(m, MATMUL_OUT, TS_FCH, l, fch, N, 4 * C);
        prof_mark(m->prof, PROF_MATMUL_FWD, s);
        const bool ln_next_casts = gpt2_projection_cast_by_layernorm(m, N, C);
        matmul_forward(g, a.output, fch_gelu, p.fcprojw + (size_t)l * 4 * C * C, p.fcprojb + l * C, N, 4 * C, C, NULL);
        // (after fcproj: an FP8 backend may compute the GELU output inside it, storing it with keep_activations)
        gpt2_stored(m, GELU_OUT, TS_FCH_GELU, l, fch_gelu, N, 4 * C);
        gpt2_stored(m, MATMUL_OUT, TS_FCPROJ, l, a.output, N, C);
        // the residual add is fused with the next LayerNorm: ln1 of layer l+1, or the final one
        prof_mark(m->prof, PROF_LAYERNORM_FWD, s);
        if (l + 1 < L) {
            floatX* next_ln1 = a.ln1 + (m->recompute >= 2 ? 0 : (l + 1) * BTC);
            gpt2_residual_layernorm(m, residual3, next_ln1, a.ln1_mean + (l + 1) * N, a.ln1_rstd + (l + 1) * N, residual2, a.output,
                                    p.ln1w + (l + 1) * C, p.ln1b + (l + 1) * C, N, C, l + 1, CAST_ID_LN1, CAST_ID_RESIDUAL3,
                                    p.qkvw + (size_t)(l + 1) * 3 * C * C, ln_next_casts, p.fcprojw + (size_t)l * 4 * C * C);
        } else {
            gpt2_residual_layernorm(m, residual3, a.lnf, a.lnf_mean, a.lnf_rstd, residual2, a.output, p.lnfw, p.lnfb, N, C, l + 1,
                                    CAST_ID_LN2, CAST_ID_RESIDUAL3, p.wte, ln_next_casts, p.fcprojw + (size_t)l * 4 * C * C);
        }
        gpt2_stored(m, RESIDUAL_OUT, TS_RESIDUAL3, l, residual3, N, C);
    }
    prof_mark(m->prof, PROF_MATMUL_FWD, s);
    if (classifier_reads) {
        matmul_forward_logits(g, a.output, a.lnf, p.wte, N, C, Vp);
    } else {
        g->out_cast_by_reader = 2;  // (the LM head's GEMM is the training step's: a cast stays a pass after it)
        matmul_forward(g, a.output, a.lnf, p.wte, NULL, N, C, Vp, NULL);
    }
    gpt2_stored(m, LAYERNORM_OUT, TS_LNF, -1, a.lnf, N, C);  // (after the LM head's GEMM: see ln1)
    // TensorCast: matmul_forward_logits leaves the MATMUL_OUT boundary to the classifier, which applies
    // only the compile-time boundaries; the run-time casts of the logits are passes here, or the classifier's
    const bool casts_left = classifier_reads && gpt2_logits_cast_by_classifier(m, N, Vp);
    if (!casts_left) {
        if (classifier_reads) boundary_tensor_cast(g->casts, MATMUL_OUT, boundary_weight_id(g->casts, p.wte), a.output, N, Vp, s);
        boundary_tensor_cast(m->casts, LOGITS, gpt2_cast_id(-1, CAST_ID_LOGITS), a.output, N, Vp, s);
    }
    gpt2_stored(m, LOGITS, TS_LOGITS, -1, a.output, N, Vp);
    return casts_left;
}

// The training step's classifier on acts.output: losses, and dlogits over the logits (fused_classifier); with the
// logits' run-time casts inside it when the forward left them (casts_left, gpt2_forward's result), with the ids
// their passes would have used.
static inline void gpt2_classifier(GPT2* m, int B, int T, float dloss, bool casts_left) {
    const GPT2Config* c = &m->config;
    ActivationTensors& a = m->acts;
    if (casts_left) {
        const BoundaryClassifier job = {a.output, a.losses, dloss, m->targets, B, T, c->vocab_size, c->padded_vocab_size,
                                        boundary_weight_id(m->casts, m->params.wte), gpt2_cast_id(-1, CAST_ID_LOGITS)};
        boundary_classifier(m->casts, job, m->stream);
        return;
    }
    fused_classifier(a.output, a.losses, dloss, m->targets, B, T, c->vocab_size, c->padded_vocab_size, true, m->stream);
}

// Mean of the per-position losses in acts.losses (synchronizes the stream).
static inline float gpt2_mean_loss(GPT2* m, int B, int T) {
    size_t BT = (size_t)B * T;
    cudaCheck(cudaMemcpyAsync(m->losses_host, m->acts.losses, BT * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    double sum = 0.0;
    for (size_t i = 0; i < BT; i++) sum += m->losses_host[i];
    return (float)(sum / BT);
}

// Validation / evaluation: forward and losses for a batch, no gradients. Returns the mean loss.
static inline float gpt2_evaluate(GPT2* m, const int* inputs, const int* targets, int B, int T) {
    gpt2_upload_batch(m, inputs, targets, B, T);
    gpt2_forward(m, B, T);  // stores the logits through the boundary: the tests and statistics read them
    const GPT2Config* c = &m->config;
    fused_classifier(m->acts.output, m->acts.losses, 1.0f, m->targets, B, T, c->vocab_size, c->padded_vocab_size, false, m->stream);
    return gpt2_mean_loss(m, B, T);
}

// Recompute the LayerNorm output of layer l (ln1 if which == 1, else ln2) into its buffer when
// recompute >= 2 discarded it and the GEMM backend will read it (the FP8 backend keeps its own quantized
// copy; the row statistics the LayerNorm backward needs are the forward's either way). Deterministic
// kernels make it bit-identical to the forward's.
static inline floatX* gpt2_layernorm_input(GPT2* m, int l, int which, int B, int T) {
    const GPT2Config* c = &m->config;
    const int C = c->channels, N = B * T;
    const size_t BTC = (size_t)N * C;
    ActivationTensors& a = m->acts;
    const ParameterTensors& p = m->params;
    if (m->recompute < 2) return (which == 1 ? a.ln1 : a.ln2) + l * BTC;
    const floatX* consumer = which == 1 ? p.qkvw + (size_t)l * 3 * C * C : p.fcw + (size_t)l * 4 * C * C;
    if (!gemm_backward_reads_input(&m->gemm, consumer, N)) return which == 1 ? a.ln1 : a.ln2;
    prof_mark(m->prof, PROF_LAYERNORM_FWD, m->stream);
    if (which == 1) {
        const floatX* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BTC;
        layernorm_forward(a.ln1, a.ln1_mean + l * N, a.ln1_rstd + l * N, residual, p.ln1w + l * C, p.ln1b + l * C, N, C, m->stream);
        boundary_tensor_cast(m->casts, LAYERNORM_OUT, gpt2_cast_id(l, CAST_ID_LN1), a.ln1, N, C, m->stream);
        return a.ln1;
    }
    layernorm_forward(a.ln2, a.ln2_mean + l * N, a.ln2_rstd + l * N, a.residual2 + l * BTC, p.ln2w + l * C, p.ln2b + l * C, N, C, m->stream);
    boundary_tensor_cast(m->casts, LAYERNORM_OUT, gpt2_cast_id(l, CAST_ID_LN2), a.ln2, N, C, m->stream);
    return a.ln2;
}

// Zero the parameter gradients (before the first micro-batch of an optimizer step).
static inline void gpt2_zero_grad(GPT2* m) {
    cudaCheck(cudaMemsetAsync(m->grads_memory, 0, m->num_parameters * sizeof(floatX), m->stream));
}

// Forward + backward on one micro-batch, accumulating (+=) into the gradients the gradient of
// loss_weight * (mean loss) (times the loss scale in the FP16 build). Returns the mean loss.
static inline float gpt2_forward_backward(GPT2* m, const int* inputs, const int* targets, int B, int T, float loss_weight) {
    const GPT2Config* c = &m->config;
    const int L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    const int N = B * T;
    const size_t BTC = (size_t)N * C;
    prof_mark(m->prof, PROF_OTHER, m->stream);
    gpt2_upload_batch(m, inputs, targets, B, T);
    m->gemm.training = 1;  // (evaluation and sampling forwards leave the FP8 scaling state alone)
    const bool logits_casts_left = gpt2_forward(m, B, T, true);

    const ParameterTensors& p = m->params;
    ParameterTensors& gr = m->grads;
    ActivationTensors& a = m->acts;
    cudaStream_t s = m->stream;
    GemmContext* g = &m->gemm;
    float dloss;
    if constexpr (kStorageFP16) dloss = loss_weight * m->loss_scale / N;  // dynamic loss scaling
    else dloss = loss_weight / N;
    // classifier: losses, and dlogits written over the logits
    prof_mark(m->prof, PROF_CLASSIFIER, s);
    gpt2_classifier(m, B, T, dloss, logits_casts_left);
    prof_mark(m->prof, PROF_MATMUL_BWD, s);
    matmul_backward(g, a.dbtc, gr.wte, NULL, a.output, a.lnf, p.wte, m->scratch, N, C, Vp, NULL);
    prof_mark(m->prof, PROF_OTHER, s);
    cudaCheck(cudaMemsetAsync(a.dresidual, 0, BTC * sizeof(floatX), s));
    prof_mark(m->prof, PROF_LAYERNORM_BWD, s);
    // (each LayerNorm backward's dresidual is the next GEMM's dout: its amax comes with it, gemm_amax_slot)
    layernorm_backward(a.dresidual, gr.lnfw, gr.lnfb, m->scratch, a.dbtc, a.residual3 + (L - 1) * BTC, p.lnfw,
                       a.lnf_mean, a.lnf_rstd, N, C, s, gemm_amax_slot(g, a.dresidual, BTC));

    for (int l = L - 1; l >= 0; l--) {
        const floatX* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * BTC;
        floatX* qkv = a.qkv + l * 3 * BTC;
        floatX* atty = a.atty + l * BTC;
        float* lse = a.att_lse + (size_t)l * B * NH * T;
        floatX* fch = a.fch + l * 4 * BTC;
        floatX* fch_gelu = a.fch_gelu + (m->recompute >= 1 ? 0 : l * 4 * BTC);
        // (not needed when the FP8 backend kept its quantized copy of the fcproj input from the forward)
        if (m->recompute >= 1 && gemm_backward_reads_input(g, p.fcprojw + (size_t)l * 4 * C * C, N)) {
            prof_mark(m->prof, PROF_GELU, s);
            gpt2_gelu(m, fch_gelu, fch, N, 4 * C, l);
        }

        // MLP block: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        // dfch = (dresidual . fcprojw) * gelu'(fch), fused into the GEMM epilogue
        prof_mark(m->prof, PROF_MATMUL_BWD, s);
        matmul_backward(g, a.dbt4c, gr.fcprojw + (size_t)l * 4 * C * C, gr.fcprojb + l * C, a.dresidual, fch_gelu,
                        p.fcprojw + (size_t)l * 4 * C * C, m->scratch, N, 4 * C, C, fch);
        floatX* ln2 = gpt2_layernorm_input(m, l, 2, B, T);
        prof_mark(m->prof, PROF_MATMUL_BWD, s);
        matmul_backward(g, a.dbtc, gr.fcw + (size_t)l * 4 * C * C, gr.fcb + l * 4 * C, a.dbt4c, ln2,
                        p.fcw + (size_t)l * 4 * C * C, m->scratch, N, C, 4 * C, NULL);
        prof_mark(m->prof, PROF_LAYERNORM_BWD, s);
        layernorm_backward(a.dresidual, gr.ln2w + l * C, gr.ln2b + l * C, m->scratch, a.dbtc, a.residual2 + l * BTC,
                           p.ln2w + l * C, a.ln2_mean + l * N, a.ln2_rstd + l * N, N, C, s, gemm_amax_slot(g, a.dresidual, BTC));
        // attention block: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        prof_mark(m->prof, PROF_MATMUL_BWD, s);
        matmul_backward(g, a.dbtc, gr.attprojw + (size_t)l * C * C, gr.attprojb + l * C, a.dresidual, atty,
                        p.attprojw + (size_t)l * C * C, m->scratch, N, C, C, NULL);
        floatX* dqkv = a.dbt4c;  // (B,T,3C) fits in the (B,T,4C) scratch
        prof_mark(m->prof, PROF_ATTENTION_BWD, s);
        attention_backward(dqkv, m->scratch, a.dbtc, qkv, atty, lse, B, T, C, NH, s, gemm_amax_slot(g, dqkv, 3 * BTC),
                           boundary_attention_seed(m->casts, gpt2_cast_id(l, CAST_ID_ATTN)), gpt2_attention_scales(m, l), m->att_ds);
        floatX* ln1 = gpt2_layernorm_input(m, l, 1, B, T);
        prof_mark(m->prof, PROF_MATMUL_BWD, s);
        matmul_backward(g, a.dbtc, gr.qkvw + (size_t)l * 3 * C * C, gr.qkvb + l * 3 * C, dqkv, ln1,
                        p.qkvw + (size_t)l * 3 * C * C, m->scratch, N, C, 3 * C, NULL);
        prof_mark(m->prof, PROF_LAYERNORM_BWD, s);
        layernorm_backward(a.dresidual, gr.ln1w + l * C, gr.ln1b + l * C, m->scratch, a.dbtc, residual,
                           p.ln1w + l * C, a.ln1_mean + l * N, a.ln1_rstd + l * N, N, C, s, gemm_amax_slot(g, a.dresidual, BTC));
        // every gradient of layer l is final: reduce it across ranks while backward goes on
        if (m->reduce_grads) multi_gpu_reduce_bucket(m->mg, l, m->grads_memory, s);
    }
    prof_mark(m->prof, PROF_ENCODER, s);
    encoder_backward(gr.wte, gr.wpe, &m->encoder_ws, a.dresidual, m->inputs_host, B, T, C, s);
    if (m->reduce_grads) multi_gpu_reduce_bucket(m->mg, L, m->grads_memory, s);  // wte, wpe, lnfw, lnfb
    m->gemm.training = 0;
    prof_mark(m->prof, PROF_OTHER, s);
    return gpt2_mean_loss(m, B, T);
}

// Result of an optimizer step.
struct UpdateResult {
    float grad_norm;  // global L2 norm of the (unscaled) gradient before clipping
    int skipped;      // 1 if the step was skipped (FP16: non-finite gradient, loss scale halved)
};

// The gradients AdamW reads: the fp32 sums when a multi-GPU run reduces in fp32, else the floatX ones.
static inline const float* gpt2_grads_f32(const GPT2* m) { return m->mg ? m->mg->grads_f32 : NULL; }

// --tensor-stats (llmc/obs/tensor_stats.cuh): plan the recorded tensors of this model at its B x T and
// attach ts (after gpt2_attach_multi_gpu and gpt2_allocate_activations). The gradients recorded are
// those AdamW reads (the fp32 sums with -gw fp32 on several GPUs).
static inline void gpt2_attach_tensor_stats(GPT2* m, TensorStats* ts) {
    tensor_stats_plan_gpt2(ts, &m->config, m->B, m->T, m->params_memory, m->grads_memory, gpt2_grads_f32(m));
    m->tstats = ts;
}

// Between the last backward of an optimizer step and gpt2_update: on a --tensor-stats recording step,
// wait for the gradient reductions, record the gradients and the weights (unchanged since the
// forward), reduce the step's statistics and start their copy to the host. Otherwise nothing.
static inline void gpt2_grads_ready(GPT2* m) {
    if (!tensor_stats_recording(m->tstats)) return;
    if (m->mg) multi_gpu_wait(m->mg, m->stream);
    prof_mark(m->prof, PROF_OTHER, m->stream);
    tensor_stats_record_params(m->tstats, m->stream);
}

// Global gradient norm (of the gradient as accumulated: still loss-scaled in the FP16 build), over the
// reduced gradients: whole on every rank without ZeRO-1; with ZeRO-1 each rank sums the squares of
// its shard and the sums are added across ranks.
static inline float gpt2_grad_norm_raw(GPT2* m) {
    const float* g32 = gpt2_grads_f32(m);
    const bool sharded = m->mg && m->mg->zero_stage == 1;
    if (!sharded) {
        if (g32) global_norm_squared(m->scratch, g32, m->num_parameters, true, m->stream);
        else global_norm_squared(m->scratch, m->grads_memory, m->num_parameters, true, m->stream);
    } else {
        for (int i = 0; i < m->num_segments; i++) {
            const OptimizerSegment& sg = m->segments[i];
            if (g32) global_norm_squared(m->scratch, g32 + sg.param_offset, sg.count, i == 0, m->stream);
            else global_norm_squared(m->scratch, m->grads_memory + sg.param_offset, sg.count, i == 0, m->stream);
        }
    }
    global_norm_finish(m->scratch, m->scratch, m->stream);
    float norm;
    cudaCheck(cudaMemcpyAsync(&norm, m->scratch, sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    if (sharded && multi_gpu_active(m->mg)) {
        float sq = norm * norm;  // NaN and Inf stay NaN and Inf
        multi_gpu_allreduce_host(m->mg, &sq, 1, 0, m->stream);
        norm = sqrtf(sq);
    }
    return norm;
}

// The optimizer step in two phases, so that the trainer can decide between them whether to update
// (-sl / -sg outlier detection): gpt2_grad_norm, then gpt2_apply_update; gpt2_update does both.

// Phase 1: wait for the gradient reductions of the last backward and return the global L2 norm of the
// gradient (unscaled: divided by the loss scale in the FP16 build; non-finite there on an overflow).
static inline float gpt2_grad_norm(GPT2* m) {
    prof_mark(m->prof, PROF_OPTIMIZER, m->stream);
    if (m->mg) multi_gpu_wait(m->mg, m->stream);  // the gradient reductions of the last backward
    float raw = gpt2_grad_norm_raw(m);
    if constexpr (kStorageFP16) return raw / m->loss_scale;
    else return raw;
}

// The AdamW step over this rank's segments in one launch per ADAMW_MAX_SEGMENTS segments, reading the
// gradients grads (flat, floatX or the fp32 sums). Tensor t's rounding seed is m->seed ^ (step << 20) ^ t
// and a ZeRO-1 piece draws from its position in its tensor (sg.tensor_index), so the parameters are the
// same bits with and without ZeRO-1; weight decay on the 2-D tensors only.
template <typename G>
static inline void gpt2_adamw(GPT2* m, const G* grads, float lr, float beta1, float beta2, float eps, float weight_decay,
                              float grad_scale, int step) {
    std::vector<AdamWSegment<G>> segs(m->num_segments);
    for (int i = 0; i < m->num_segments; i++) {
        const OptimizerSegment& sg = m->segments[i];
        const int t = sg.tensor;
        AdamWSegment<G>& a = segs[i];
        a.params = m->params_memory + sg.param_offset;
        a.master = m->master_weights ? m->master_weights + sg.state_offset : NULL;
        a.grads = grads + sg.param_offset;
        a.m = m->m_memory + sg.state_offset;
        a.v = m->v_memory + sg.state_offset;
        a.n = sg.count;
        a.index0 = sg.tensor_index;
        a.seed = m->seed ^ ((unsigned long long)step << 20) ^ (unsigned long long)t;
        a.weight_decay = gpt2_param_is_matrix(t) ? weight_decay : 0.0f;
    }
    adamw_update_segments(segs.data(), m->num_segments, lr, beta1, beta2, step, eps, grad_scale, m->stream);
}

// Phase 2: AdamW step (PyTorch semantics, weight decay on the 2-D tensors only) after clipping the
// global gradient norm grad_norm (from gpt2_grad_norm) to grad_clip (factor grad_clip / (norm + 1e-6)
// when below 1; 0 disables). step is AdamW's 1-based step count (updates applied so far + 1).
// FP16: a non-finite norm skips the step and halves the loss scale. A trainer that skips an update
// calls neither this nor anything else: parameters, moments, step count and loss scale stay.
static inline UpdateResult gpt2_apply_update(GPT2* m, float grad_norm, float lr, float beta1, float beta2, float eps,
                                             float weight_decay, float grad_clip, int step) {
    UpdateResult r;
    r.grad_norm = grad_norm;
    float unscale = 1.0f;
    if constexpr (kStorageFP16) {
        if (!isfinite(grad_norm)) {
            m->loss_scale *= 0.5f;
            m->good_steps = 0;
            r.skipped = 1;
            return r;
        }
        unscale = 1.0f / m->loss_scale;
    }
    r.skipped = 0;
    float clip = 1.0f;
    if (grad_clip > 0.0f && grad_clip / (r.grad_norm + 1e-6f) < 1.0f) clip = grad_clip / (r.grad_norm + 1e-6f);
    const float* g32 = gpt2_grads_f32(m);
    if (g32) gpt2_adamw(m, g32, lr, beta1, beta2, eps, weight_decay, clip * unscale, step);
    else gpt2_adamw(m, (const floatX*)m->grads_memory, lr, beta1, beta2, eps, weight_decay, clip * unscale, step);
    if (m->mg) multi_gpu_gather_params(m->mg, m->params_memory, m->stream);
    gemm_weights_updated(&m->gemm);
    if constexpr (kStorageFP16) {
        if (++m->good_steps >= LOSS_SCALE_WINDOW) {
            m->loss_scale *= 2.0f;
            m->good_steps = 0;
        }
    }
    return r;
}

// Both phases: the norm, then the AdamW step (step is 1-based).
static inline UpdateResult gpt2_update(GPT2* m, float lr, float beta1, float beta2, float eps, float weight_decay,
                                       float grad_clip, int step) {
    return gpt2_apply_update(m, gpt2_grad_norm(m), lr, beta1, beta2, eps, weight_decay, grad_clip, step);
}

static inline void gpt2_free(GPT2* m) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    gemm_context_free(&m->gemm);
    attention_free();
    if (m->casts) {
        m->casts->destroy(m->casts);
        m->casts = NULL;
    }
    encoder_backward_workspace_destroy(&m->encoder_ws);
    cudaFree(m->params_memory);
    cudaFree(m->grads_memory);
    cudaFree(m->master_weights);
    cudaFree(m->m_memory);
    cudaFree(m->v_memory);
    free(m->segments);
    cudaFree(m->acts_memory);
    cudaFree(m->att_scales);
    cudaFree(m->att_ds);
    cudaFree(m->inputs);
    cudaFree(m->targets);
    cudaFree(m->scratch);
    cudaFreeHost(m->inputs_host);
    cudaFreeHost(m->targets_host);
    cudaFreeHost(m->losses_host);
    cudaCheck(cudaStreamDestroy(m->stream));
}
