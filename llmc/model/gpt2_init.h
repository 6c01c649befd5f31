/*
 * gpt2_init.h - GPT-2 initialization from scratch (host, fp32), shared by the CPU and CUDA trainers.
 *
 * Weights N(0, 0.02); the residual projections attprojw and fcprojw N(0, 0.02/sqrt(2L)) (GPT-2
 * paper, section 2.3); biases 0; LayerNorm gains 1; the padded vocabulary rows of wte 0.
 * Reproducible from the seed (llmc/core/rand.h), independent of the machine.
 */
#ifndef LLMC_GPT2_INIT_H
#define LLMC_GPT2_INIT_H

#include <math.h>
#include <string.h>
#include "llmc/model/gpt2_config.h"
#include "llmc/core/rand.h"

// params: gpt2_num_parameters(c) floats in checkpoint order, fully overwritten.
static inline void gpt2_init_params(float* params, const GPT2Config* c, uint64_t seed) {
    size_t sizes[NUM_PARAMETER_TENSORS], offsets[NUM_PARAMETER_TENSORS], off = 0;
    gpt2_param_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { offsets[i] = off; off += sizes[i]; }
    memset(params, 0, off * sizeof(float));
    Rng rng;
    rng_init(&rng, seed);
    size_t C = (size_t)c->channels, L = (size_t)c->num_layers;
    float resid_std = 0.02f / sqrtf(2.0f * (float)L);
    rng_normal(&rng, params + offsets[0], (size_t)c->vocab_size * C, 0.0f, 0.02f);  // wte rows < V
    rng_normal(&rng, params + offsets[1], sizes[1], 0.0f, 0.02f);                   // wpe
    rng_normal(&rng, params + offsets[4], sizes[4], 0.0f, 0.02f);                   // qkvw
    rng_normal(&rng, params + offsets[6], sizes[6], 0.0f, resid_std);               // attprojw
    rng_normal(&rng, params + offsets[10], sizes[10], 0.0f, 0.02f);                 // fcw
    rng_normal(&rng, params + offsets[12], sizes[12], 0.0f, resid_std);             // fcprojw
    for (size_t i = 0; i < L * C; i++) { params[offsets[2] + i] = 1.0f; params[offsets[8] + i] = 1.0f; }  // ln1w, ln2w
    for (size_t i = 0; i < C; i++) params[offsets[14] + i] = 1.0f;                                         // lnfw
}

#endif
