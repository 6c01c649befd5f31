// multi_gpu.cuh - data-parallel training over N GPUs with NCCL: gradient reduction overlapped with
// the backward pass, ZeRO-1 (sharded optimizer state), and small collectives for losses and norms.
//
// One process per GPU. The processes find each other through llmc/dist/rendezvous.h (mpirun, TCP or a
// shared folder); rank 0's NCCL unique id is broadcast that way and every rank joins one NCCL
// communicator. Each rank runs forward/backward on its own B x T micro-batches (the data loader
// interleaves the ranks' rows, llmc/data/dataloader.h), and the gradients are summed over ranks:
//   - the loss of every rank is weighted 1/N (gpt2_forward_backward's loss_weight), so a sum over
//     ranks is the gradient of the global mean loss;
//   - on the last micro-step, bucket b (llmc/dist/zero.h: the 12 tensors of layer b, then the 4 global
//     tensors) is reduced as soon as backward has finished it, on this file's own stream, while the
//     compute stream goes on with the layers below (overlap); gpt2_update waits for the stream;
//   - ZeRO stage 0: every slice is all-reduced in place, and every rank runs the same full AdamW
//     step (bit-identical parameters on every rank);
//   - ZeRO stage 1 (Rajbhandari et al. 2020): every slice is reduce-scattered in place, each rank
//     updates its 1/N of every slice with its own shard of the AdamW moments and master weights,
//     then an in-place all-gather gives every rank the whole updated parameters.
// Wire precision (-gw): gradients are reduced in the storage type floatX (BF16 in the default build:
// half the bytes; NCCL rounds every partial sum to BF16) or in fp32 (each bucket is widened into an
// fp32 buffer first; AdamW then reads the fp32 sums). reduced_precision_training.md in the seeds
// discusses the trade-off; doc/benchmarks.md has the measured cost.
//
// Builds without NCCL (NO_MULTI_GPU=1, or nccl.h missing) compile this file to a single-process
// stub: multi_gpu_init dies if more than one process is asked for.
#pragma once

#include <stdio.h>
#include <stdlib.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/core/precision.h"
#include "llmc/dist/rendezvous.h"
#include "llmc/dist/zero.h"

#ifdef MULTI_GPU
#include <nccl.h>
// Abort with file:line and NCCL's message when an NCCL call fails.
#define ncclCheck(call)                                                                                     \
    do {                                                                                                    \
        ncclResult_t r_ = (call);                                                                           \
        if (r_ != ncclSuccess) {                                                                            \
            fprintf(stderr, "error: NCCL %s at %s:%d: %s\n", #call, __FILE__, __LINE__, ncclGetErrorString(r_)); \
            exit(EXIT_FAILURE);                                                                             \
        }                                                                                                   \
    } while (0)
#endif

struct MultiGpu {
    ProcessGroup pg;
    int zero_stage;      // 0: all-reduce, replicated optimizer; 1: reduce-scatter, sharded optimizer, all-gather
    int wire_fp32;       // 1: gradients reduced in fp32, 0: in floatX
    ZeroPlan* plan;      // slices and buckets (always built, also for one rank)
    cudaStream_t stream; // the reductions' stream
    cudaEvent_t event;
    float* grads_f32;    // wire_fp32: num_parameters floats, the fp32 gradients (reduced in place); else NULL
    float* scalars;      // device scratch for collectives of a few values
#ifdef MULTI_GPU
    ncclComm_t comm;
#endif
};

// Whether this run spans several processes.
static inline bool multi_gpu_active(const MultiGpu* mg) { return mg != NULL && mg->pg.nranks > 1; }

// Pick this process's GPU (local rank modulo the visible devices) and, for several processes, join
// the NCCL communicator. Must run before any other CUDA allocation. Dies with a message on failure.
static inline void multi_gpu_init(MultiGpu* mg, const ProcessGroup* pg, const GPT2Config* config, int zero_stage, int wire_fp32) {
    memset(mg, 0, sizeof(*mg));
    mg->pg = *pg;
    mg->zero_stage = zero_stage;
    mg->wire_fp32 = wire_fp32;
    int ndev = 0;
    cudaCheck(cudaGetDeviceCount(&ndev));
    if (ndev < 1) die("no CUDA device");
    if (pg->nranks > 1 && pg->local_rank >= ndev)
        printf("note: rank %d: local rank %d but %d visible GPUs; sharing GPU %d\n", pg->rank, pg->local_rank, ndev, pg->local_rank % ndev);
    cudaCheck(cudaSetDevice(pg->local_rank % ndev));
    mg->plan = (ZeroPlan*)malloc_check(sizeof(ZeroPlan));
    char err[256];
    if (zero_plan_init(mg->plan, config, pg->nranks, err, sizeof(err)) != 0) {
        if (zero_stage == 1) die("-z 1: %s", err);
        zero_plan_init(mg->plan, config, 1, err, sizeof(err));  // stage 0 needs no divisibility
    }
    cudaCheck(cudaStreamCreateWithFlags(&mg->stream, cudaStreamNonBlocking));
    cudaCheck(cudaEventCreateWithFlags(&mg->event, cudaEventDisableTiming));
    cudaCheck(cudaMalloc(&mg->scalars, 64 * sizeof(float)));
    if (pg->nranks == 1) return;
#ifdef MULTI_GPU
    ncclUniqueId id;
    if (pg->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    rendezvous_broadcast(pg, &id, sizeof(id));
    ncclCheck(ncclCommInitRank(&mg->comm, pg->nranks, id, pg->rank));
#else
    die("%d processes: this binary was built without NCCL (make info; NO_MULTI_GPU=1 or nccl.h missing)", pg->nranks);
#endif
}

// fp32 gradient buffer for -gw fp32 (num_parameters floats); call after the model is allocated.
static inline void multi_gpu_alloc_wire(MultiGpu* mg, size_t num_parameters) {
    if (mg->wire_fp32 && multi_gpu_active(mg)) cudaCheck(cudaMalloc(&mg->grads_f32, num_parameters * sizeof(float)));
}

static inline void multi_gpu_free(MultiGpu* mg) {
    cudaCheck(cudaStreamSynchronize(mg->stream));
#ifdef MULTI_GPU
    if (mg->pg.nranks > 1) ncclCheck(ncclCommDestroy(mg->comm));
#endif
    cudaFree(mg->grads_f32);
    cudaFree(mg->scalars);
    cudaCheck(cudaEventDestroy(mg->event));
    cudaCheck(cudaStreamDestroy(mg->stream));
    free(mg->plan);
}

#ifdef MULTI_GPU
static inline ncclDataType_t multi_gpu_nccl_type_floatX() {
    return kStorageFP32 ? ncclFloat : kStorageFP16 ? ncclHalf : ncclBfloat16;
}
#endif

// Reduce bucket b of the gradients (llmc/dist/zero.h) across ranks, asynchronously: the reduction waits
// for the work enqueued so far on `compute` (the backward that produced the bucket) and runs on
// mg->stream. Stage 0: in-place all-reduce (sum); stage 1: in-place reduce-scatter (rank r's part of
// each slice receives the sum). With -gw fp32 the bucket is widened into mg->grads_f32 first and
// reduced there. No-op for one rank.
static inline void multi_gpu_reduce_bucket(MultiGpu* mg, int b, floatX* grads, cudaStream_t compute) {
    if (!multi_gpu_active(mg)) return;
#ifdef MULTI_GPU
    const ZeroPlan* p = mg->plan;
    int first, count;
    zero_bucket_range(p, b, &first, &count);
    cudaCheck(cudaEventRecord(mg->event, compute));
    cudaCheck(cudaStreamWaitEvent(mg->stream, mg->event, 0));
    if (mg->wire_fp32) {
        for (int i = first; i < first + count; i++) {
            const ZeroSlice* s = &p->slices[i];
            widen_to_float(mg->grads_f32 + s->offset, grads + s->offset, s->count, mg->stream);
        }
    }
    const int N = mg->pg.nranks, r = mg->pg.rank;
    ncclCheck(ncclGroupStart());
    for (int i = first; i < first + count; i++) {
        const ZeroSlice* s = &p->slices[i];
        void* base = mg->wire_fp32 ? (void*)(mg->grads_f32 + s->offset) : (void*)(grads + s->offset);
        const ncclDataType_t type = mg->wire_fp32 ? ncclFloat : multi_gpu_nccl_type_floatX();
        const size_t esize = mg->wire_fp32 ? sizeof(float) : sizeof(floatX);
        if (mg->zero_stage == 0) {
            ncclCheck(ncclAllReduce(base, base, s->count, type, ncclSum, mg->comm, mg->stream));
        } else {
            const size_t part = s->count / N;
            ncclCheck(ncclReduceScatter(base, (char*)base + (size_t)r * part * esize, part, type, ncclSum, mg->comm, mg->stream));
        }
    }
    ncclCheck(ncclGroupEnd());
#else
    (void)b; (void)grads; (void)compute;
#endif
}

// Make `compute` wait for every reduction enqueued so far.
static inline void multi_gpu_wait(MultiGpu* mg, cudaStream_t compute) {
    if (!multi_gpu_active(mg)) return;
    cudaCheck(cudaEventRecord(mg->event, mg->stream));
    cudaCheck(cudaStreamWaitEvent(compute, mg->event, 0));
}

// ZeRO-1: after each rank updated its part of every slice, gather the parameters (in place, on
// `compute`). No-op for stage 0 or one rank.
static inline void multi_gpu_gather_params(MultiGpu* mg, floatX* params, cudaStream_t compute) {
    if (!multi_gpu_active(mg) || mg->zero_stage != 1) return;
#ifdef MULTI_GPU
    const ZeroPlan* p = mg->plan;
    const int N = mg->pg.nranks, r = mg->pg.rank;
    ncclCheck(ncclGroupStart());
    for (int i = 0; i < p->num_slices; i++) {
        const ZeroSlice* s = &p->slices[i];
        const size_t part = s->count / N;
        ncclCheck(ncclAllGather(params + s->offset + (size_t)r * part, params + s->offset, part, multi_gpu_nccl_type_floatX(),
                                mg->comm, compute));
    }
    ncclCheck(ncclGroupEnd());
#else
    (void)params; (void)compute;
#endif
}

// Sum (op 0) or max (op 1) of n <= 64 host floats over all ranks, in place (synchronizes `stream`).
static inline void multi_gpu_allreduce_host(MultiGpu* mg, float* values, int n, int op, cudaStream_t stream) {
    if (!multi_gpu_active(mg)) return;
    if (n > 64) die("multi_gpu_allreduce_host: %d values > 64", n);
#ifdef MULTI_GPU
    cudaCheck(cudaMemcpyAsync(mg->scalars, values, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    ncclCheck(ncclAllReduce(mg->scalars, mg->scalars, n, ncclFloat, op == 0 ? ncclSum : ncclMax, mg->comm, stream));
    cudaCheck(cudaMemcpyAsync(values, mg->scalars, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
#else
    (void)values; (void)op; (void)stream;
#endif
}

// The parts of the flat parameter buffer this rank's optimizer updates, with where their state
// lives: stage 0 (or one rank) -> the 16 whole tensors, state at the same offsets; stage 1 -> rank
// r's part of every slice, state compact (ZeroSlice::shard_offset). Returns the number of segments.
struct OptimizerSegment {
    size_t param_offset;   // first element in the flat parameter / gradient buffers
    size_t state_offset;   // first element in m, v and the master weights
    size_t count;
    size_t tensor_index;   // position of the first element within its tensor (rounding stream)
    int tensor;
};

static inline int multi_gpu_segments(const MultiGpu* mg, const size_t param_sizes[NUM_PARAMETER_TENSORS], OptimizerSegment* out,
                                     int max_out) {
    int k = 0;
    if (mg == NULL || mg->zero_stage == 0) {
        size_t off = 0;
        for (int t = 0; t < NUM_PARAMETER_TENSORS && k < max_out; t++) {
            out[k++] = OptimizerSegment{off, off, param_sizes[t], 0, t};
            off += param_sizes[t];
        }
        return k;
    }
    const ZeroPlan* p = mg->plan;
    const int N = mg->pg.nranks, r = mg->pg.rank;
    for (int i = 0; i < p->num_slices && k < max_out; i++) {
        const ZeroSlice* s = &p->slices[i];
        const size_t part = s->count / N;
        out[k++] = OptimizerSegment{s->offset + (size_t)r * part, s->shard_offset, part, s->tensor_offset + (size_t)r * part, s->tensor};
    }
    return k;
}

// Elements of m, v and the master weights this rank keeps.
static inline size_t multi_gpu_state_elems(const MultiGpu* mg, size_t num_parameters) {
    return (mg != NULL && mg->zero_stage == 1) ? mg->plan->shard_size : num_parameters;
}
