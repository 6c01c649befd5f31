/*
 * zero.h - the gradient buckets and the ZeRO-1 shard layout of the flat GPT-2 parameter buffer
 * (host only, plain C; llmc/dist/multi_gpu.cuh runs the collectives over this plan).
 *
 * The parameters live in one flat buffer in checkpoint order (16 tensors, doc/FORMATS.md); the 12
 * per-layer tensors (ln1w .. fcprojb) hold their L layers back to back. A *slice* is one tensor of
 * one layer, or one whole global tensor (wte, wpe, lnfw, lnfb): 12 L + 4 slices. A *bucket* is what
 * backward finishes at once: bucket l (0 <= l < L) = the 12 slices of layer l, complete when the
 * backward of layer l is done; bucket L = the 4 global slices, complete after the encoder backward
 * (wte also receives the classifier's gradient, at the start of backward). The multi-GPU trainer
 * reduces bucket L-1 first, while backward works on the layers below (overlap).
 *
 * ZeRO-1 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
 * Models", stage 1 = optimizer state partitioning): rank r of N owns, in every slice of length n,
 * the n/N elements [offset + r n/N, offset + (r+1) n/N). Its AdamW moments and master weights for
 * those elements are stored compactly, slice after slice in plan order (`shard_offset`), n_shard =
 * (total parameters) / N floats each. So a reduce-scatter of a slice leaves rank r's part of the
 * summed gradient in place (NCCL's in-place reduce-scatter: recvbuff = sendbuff + r * recvcount), and
 * an in-place all-gather of the slice after the update gives every rank the whole updated slice.
 * Every slice length must be a multiple of N (true for GPT-2 shapes when C % N == 0: every slice
 * is a multiple of C); zero_plan_init reports the first slice that is not.
 */
#ifndef LLMC_ZERO_H
#define LLMC_ZERO_H

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "llmc/model/gpt2_config.h"

#define ZERO_PER_LAYER_FIRST 2   // ln1w
#define ZERO_PER_LAYER_LAST 13   // fcprojb
#define ZERO_MAX_SLICES (12 * 1024 + 4)

typedef struct {
    int tensor;            // index into the 16 parameter tensors
    int layer;             // layer of a per-layer tensor, -1 for a global tensor
    size_t offset;         // first element in the flat buffer
    size_t count;          // elements
    size_t tensor_offset;  // offset - (start of the tensor): the element index within the tensor
    size_t shard_offset;   // ZeRO-1: where this slice's shard starts in the compact per-rank arrays
} ZeroSlice;

typedef struct {
    int nranks, num_layers, num_slices;
    size_t num_parameters, shard_size;  // shard_size = num_parameters / nranks
    ZeroSlice slices[ZERO_MAX_SLICES];  // buckets in order: layer 0 .. L-1 (12 each), then the globals
} ZeroPlan;

static inline int zero_tensor_is_per_layer(int t) { return t >= ZERO_PER_LAYER_FIRST && t <= ZERO_PER_LAYER_LAST; }

// First slice and number of slices of bucket b (0..L-1: layer b; L: the global tensors).
static inline void zero_bucket_range(const ZeroPlan* p, int b, int* first, int* count) {
    int per_layer = ZERO_PER_LAYER_LAST - ZERO_PER_LAYER_FIRST + 1;
    *first = b < p->num_layers ? b * per_layer : p->num_layers * per_layer;
    *count = b < p->num_layers ? per_layer : p->num_slices - p->num_layers * per_layer;
}

// Build the plan for config and nranks. Returns 0, or -1 with a message in err (e.g. a slice not
// divisible by nranks, or more layers than the plan holds).
static inline int zero_plan_init(ZeroPlan* p, const GPT2Config* c, int nranks, char* err, size_t err_n) {
    memset(p, 0, sizeof(*p));
    size_t sizes[NUM_PARAMETER_TENSORS], starts[NUM_PARAMETER_TENSORS], off = 0;
    gpt2_param_sizes(c, sizes);
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) { starts[t] = off; off += sizes[t]; }
    const int L = c->num_layers;
    if (nranks < 1 || L < 1 || 12 * (size_t)L + 4 > ZERO_MAX_SLICES) {
        snprintf(err, err_n, "zero plan: bad nranks %d or layer count %d", nranks, L);
        return -1;
    }
    p->nranks = nranks;
    p->num_layers = L;
    p->num_parameters = off;
    int k = 0;
    size_t shard = 0;
    for (int b = 0; b <= L; b++) {
        for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
            const int per_layer = zero_tensor_is_per_layer(t);
            if ((b < L) != per_layer) continue;
            ZeroSlice* s = &p->slices[k++];
            s->tensor = t;
            s->layer = per_layer ? b : -1;
            s->count = per_layer ? sizes[t] / L : sizes[t];
            s->tensor_offset = per_layer ? (size_t)b * s->count : 0;
            s->offset = starts[t] + s->tensor_offset;
            s->shard_offset = shard;
            if (s->count % (size_t)nranks != 0) {
                char where[32] = "";
                if (per_layer) snprintf(where, sizeof(where), " of layer %d", b);
                snprintf(err, err_n, "ZeRO-1 over %d ranks: %s%s has %zu elements, not a multiple of %d (use a model with C %% %d == 0)",
                         nranks, PARAM_TENSOR_NAMES[t], where, s->count, nranks, nranks);
                return -1;
            }
            shard += s->count / (size_t)nranks;
        }
    }
    p->num_slices = k;
    p->shard_size = shard;
    return 0;
}

#endif
