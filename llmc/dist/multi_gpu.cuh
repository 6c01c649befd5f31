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
// A lost rank never hangs the run (llmc/dist/watchdog.h has the logic and its reasons). The
// communicator is non-blocking (ncclConfig_t blocking = 0): no NCCL call waits on the other ranks, so
// nothing can keep the process from calling ncclCommAbort; a call that answers ncclInProgress
// (creation, the connection set-up of a first collective, finalization) is waited out by polling
// ncclCommGetAsyncError. Every collective is announced to the watchdog and followed by a CUDA event
// recorded on its stream (cudaEventRecord: no synchronization, the hot path stays as it was); a
// watchdog thread polls the oldest outstanding event and ncclCommGetAsyncError every 0.1 s. After -pw
// seconds with a collective outstanding and none completing (or at once on an NCCL error) it parks
// the training thread (a signal whose handler never returns: whatever it was waiting for, it must not
// go on with the partial sums an aborted collective leaves, e.g. into a checkpoint), prints
//   error: rank R: no progress from the other ranks for N s (a rank died or the network failed); last complete checkpoint: <file>
// calls ncclCommAbort (on a helper thread, given at most MG_ABORT_WAIT_MS: with a dead peer it hangs in
// its proxy threads, NCCL 2.2x on two H100s every time) and _exit(1)s: the process ends at most 2 s after
// the -pw timeout. Thread rather than polling in the host waits: every wait of the trainer (stream syncs in
// the model, the modes, the checkpoint copies) is covered without touching it. Needs NCCL >= 2.14
// (ncclCommInitRankConfig, ncclCommFinalize, ncclInProgress; CI builds with 2.21).
//
// Builds without NCCL (NO_MULTI_GPU=1, or nccl.h missing) compile this file to a single-process
// stub: multi_gpu_init dies if more than one process is asked for.
#pragma once

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/core/precision.h"
#include "llmc/dist/rendezvous.h"
#include "llmc/dist/watchdog.h"
#include "llmc/dist/zero.h"

#ifdef MULTI_GPU
#include <nccl.h>
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "llmc/dist/multi_gpu.cuh needs NCCL >= 2.14 (non-blocking communicators); build with NO_MULTI_GPU=1 for one GPU"
#endif
// Abort with file:line and NCCL's message when an NCCL call that involves no communicator fails
// (the communicator's calls go through mgNccl, below).
#define ncclCheck(call)                                                                                     \
    do {                                                                                                    \
        ncclResult_t r_ = (call);                                                                           \
        if (r_ != ncclSuccess) {                                                                            \
            fprintf(stderr, "error: NCCL %s at %s:%d: %s\n", #call, __FILE__, __LINE__, ncclGetErrorString(r_)); \
            exit(EXIT_FAILURE);                                                                             \
        }                                                                                                   \
    } while (0)
#endif

// What the watchdog needs from the trainer (llmc/dist knows no flags and no files).
typedef void (*MultiGpuCheckpointFn)(void* ctx, char* out, size_t n);
struct MultiGpuWatch {
    int timeout_s;                          // -pw: seconds without progress of the other ranks before the run ends (0: never)
    MultiGpuCheckpointFn last_checkpoint;   // writes the newest complete checkpoint's file (or "none") into out; NULL: "none"
    void* ctx;
};

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
    int comm_ready;      // 1 while comm is a valid handle (created, not destroyed): the watchdog may query / abort it
    int device;          // this process's GPU (the watchdog thread's CUDA calls need it current)
    MultiGpuWatch watch;
    Watchdog wd;         // llmc/dist/watchdog.h (enabled only for several ranks and -pw > 0)
    cudaEvent_t wd_events[WATCHDOG_SLOTS];  // the completion marker of the op in each watchdog slot
    pthread_t wd_thread, trainer_thread;
    int wd_running, wd_stop, wd_aborted;
};

// Whether this run spans several processes.
static inline bool multi_gpu_active(const MultiGpu* mg) { return mg != NULL && mg->pg.nranks > 1; }

#ifdef MULTI_GPU
// ---- the watchdog's hooks (llmc/dist/watchdog.h) and the training thread's NCCL calls

// Monotonic clock, seconds.
static double mg_wd_now_(void*) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Sleep for s seconds (resumed after a signal).
static void mg_wd_sleep_(void*, double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

// 1 when the op in slot is complete: the event recorded behind it has completed. Any answer of
// cudaEventQuery but success counts as not complete: "not ready", or an error that the training
// thread's own next CUDA call reports (cudaCheck).
static int mg_wd_poll_(void* ctx, int slot) {
    MultiGpu* mg = (MultiGpu*)ctx;
    return cudaEventQuery(mg->wd_events[slot]) == cudaSuccess;
}

// NCCL's description of the last error, or "" (it may be empty, or belong to another thread).
static const char* mg_nccl_last_error_(MultiGpu* mg) {
    const char* last = __atomic_load_n(&mg->comm_ready, __ATOMIC_ACQUIRE) ? ncclGetLastError(mg->comm) : NULL;
    return last ? last : "";
}

// 1 when the communicator reports an asynchronous error (a peer's connection closed, a network
// error); its text into msg. ncclInProgress (creation, connection set-up) is no error.
static int mg_wd_async_error_(void* ctx, char* msg, size_t n) {
    MultiGpu* mg = (MultiGpu*)ctx;
    if (!__atomic_load_n(&mg->comm_ready, __ATOMIC_ACQUIRE)) return 0;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(mg->comm, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess || state == ncclInProgress) return 0;
    const char* last = mg_nccl_last_error_(mg);
    snprintf(msg, n, "%s%s%s%s", ncclGetErrorString(state), *last ? " (" : "", last, *last ? ")" : "");
    return 1;
}

// The trainer's hook: the newest complete checkpoint (default "none").
static void mg_wd_last_checkpoint_(void* ctx, char* out, size_t n) {
    MultiGpu* mg = (MultiGpu*)ctx;
    if (mg->watch.last_checkpoint) mg->watch.last_checkpoint(mg->watch.ctx, out, n);
}

static volatile sig_atomic_t mg_parked_ = 0;
// The signal that parks the training thread (a real-time one: MPI and CUDA use none of them).
static int mg_park_signal_() { return SIGRTMIN + 3; }
// Its handler: never returns (the watchdog is ending the process), so whatever the training thread
// was waiting for, it never goes on with the data of an aborted collective.
static void mg_park_handler_(int) {
    mg_parked_ = 1;
    for (;;) pause();
}

// Park the training thread and wait (at most 2 s) until it is parked.
static void mg_wd_halt_(void* ctx) {
    MultiGpu* mg = (MultiGpu*)ctx;
    if (pthread_equal(pthread_self(), mg->trainer_thread)) return;
    if (pthread_kill(mg->trainer_thread, mg_park_signal_()) != 0) return;
    for (int i = 0; i < 2000 && !mg_parked_; i++) mg_wd_sleep_(NULL, 1e-3);
}

// Write a line to stderr with write(2) (the parked training thread may hold stdio's locks).
static void mg_wd_report_(void*, const char* line) {
    const char* parts[2] = {line, "\n"};
    for (int k = 0; k < 2; k++)
        for (size_t off = 0, len = strlen(parts[k]); off < len;) {
            const ssize_t w = write(2, parts[k] + off, len - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return;  // stderr is gone: nothing else to tell
            off += (size_t)w;
        }
}

// ncclCommAbort on a helper thread: it stops the NCCL kernels and proxy threads and closes the
// connections (the other ranks then see an error at once instead of their own timeout).
static void* mg_abort_main_(void* p) {
    MultiGpu* mg = (MultiGpu*)p;
    if (cudaSetDevice(mg->device) == cudaSuccess) {
        const ncclResult_t r = ncclCommAbort(mg->comm);
        if (r != ncclSuccess) {
            char note[256];
            snprintf(note, sizeof(note), "note: rank %d: ncclCommAbort: %s", mg->pg.rank, ncclGetErrorString(r));
            mg_wd_report_(NULL, note);
        }
    }
    __atomic_store_n(&mg->wd_aborted, 1, __ATOMIC_RELEASE);
    return NULL;
}

// Abort the communicator, waiting at most MG_ABORT_WAIT_MS for ncclCommAbort. It exists to stop the NCCL
// kernels and tell the other ranks at once; with a dead peer it hangs instead (measured: every kill of
// scripts/kill_rank_test.sh under tcp and fs, 10 s cut each time), and the process ends right after either
// way (the driver frees what it held), so a long wait only delays freeing the GPU.
#define MG_ABORT_WAIT_MS 2000
static void mg_wd_abort_(void* ctx) {
    MultiGpu* mg = (MultiGpu*)ctx;
    if (!__atomic_load_n(&mg->comm_ready, __ATOMIC_ACQUIRE)) return;
    pthread_t t;
    if (pthread_create(&t, NULL, mg_abort_main_, mg) != 0) return;
    pthread_detach(t);
    for (int i = 0; i < MG_ABORT_WAIT_MS && !__atomic_load_n(&mg->wd_aborted, __ATOMIC_ACQUIRE); i++) mg_wd_sleep_(NULL, 1e-3);
    if (!__atomic_load_n(&mg->wd_aborted, __ATOMIC_ACQUIRE)) {
        char note[128];
        snprintf(note, sizeof(note), "note: rank %d: ncclCommAbort did not return within %d ms; exiting without it", mg->pg.rank,
                 MG_ABORT_WAIT_MS);
        mg_wd_report_(NULL, note);
    }
}

// The watchdog thread: the training thread's GPU, then watchdog_run; a firing ends the process.
static void* mg_watchdog_main_(void* p) {
    MultiGpu* mg = (MultiGpu*)p;
    const cudaError_t e = cudaSetDevice(mg->device);
    if (e != cudaSuccess) {
        char line[256];
        snprintf(line, sizeof(line), "error: rank %d: the NCCL watchdog cannot use GPU %d: %s", mg->pg.rank, mg->device,
                 cudaGetErrorString(e));
        mg_wd_report_(NULL, line);
        _exit(EXIT_FAILURE);
    }
    if (watchdog_run(&mg->wd, &mg->wd_stop)) _exit(EXIT_FAILURE);  // not exit(): the training thread is parked
    return NULL;
}

// Set up the watchdog (before the communicator exists): hooks, one event per slot, and for -pw > 0
// the park handler and the thread. -pw 0 (or watch NULL): nothing is tracked, no thread; an NCCL
// error is still reported with the same line.
static inline void mg_watchdog_start_(MultiGpu* mg, const MultiGpuWatch* watch) {
    mg->watch = watch ? *watch : MultiGpuWatch{0, NULL, NULL};
    mg->trainer_thread = pthread_self();
    const WatchdogHooks hooks = {mg_wd_now_, mg_wd_sleep_, mg_wd_poll_, mg_wd_async_error_, mg_wd_last_checkpoint_,
                                 mg_wd_halt_, mg_wd_report_, mg_wd_abort_, mg};
    watchdog_init(&mg->wd, mg->pg.rank, mg->watch.timeout_s, &hooks);
    for (int i = 0; i < WATCHDOG_SLOTS; i++) cudaCheck(cudaEventCreateWithFlags(&mg->wd_events[i], cudaEventDisableTiming));
    if (!watchdog_enabled(&mg->wd)) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = mg_park_handler_;
    sigemptyset(&sa.sa_mask);
    if (sigaction(mg_park_signal_(), &sa, NULL) != 0) die("rank %d: NCCL watchdog: sigaction: %s", mg->pg.rank, strerror(errno));
    const int rc = pthread_create(&mg->wd_thread, NULL, mg_watchdog_main_, mg);
    if (rc != 0) die("rank %d: cannot start the NCCL watchdog thread: %s", mg->pg.rank, strerror(rc));
    mg->wd_running = 1;
}

// Stop the watchdog thread (end of the run, before the communicator is destroyed).
static inline void mg_watchdog_stop_(MultiGpu* mg) {
    if (!mg->wd_running) return;
    __atomic_store_n(&mg->wd_stop, 1, __ATOMIC_RELEASE);
    const int rc = pthread_join(mg->wd_thread, NULL);
    if (rc != 0) die("rank %d: cannot join the NCCL watchdog thread: %s", mg->pg.rank, strerror(rc));
    mg->wd_running = 0;
}

// The training thread's NCCL calls on the communicator: r is the call's result. ncclInProgress (the
// non-blocking communicator creating, connecting or finalizing) is waited out by polling
// ncclCommGetAsyncError (the watchdog counts that time: the op was begun); any error is reported
// with the watchdog's line (naming the call and NCCL's message), the communicator aborted and the
// process ended with status 1.
#define mgNccl(mg, call) mg_nccl_check_((mg), (call), #call, __FILE__, __LINE__)
static inline void mg_nccl_check_(MultiGpu* mg, ncclResult_t r, const char* what, const char* file, int line) {
    while (r == ncclInProgress) {
        mg_wd_sleep_(NULL, 5e-5);
        ncclResult_t state = ncclInProgress;
        const ncclResult_t q = ncclCommGetAsyncError(mg->comm, &state);
        r = q != ncclSuccess ? q : state;
    }
    if (r == ncclSuccess) return;
    char msg[512];
    const char* last = mg_nccl_last_error_(mg);
    snprintf(msg, sizeof(msg), "%s at %s:%d: %s%s%s%s", what, file, line, ncclGetErrorString(r), *last ? " (" : "", last,
             *last ? ")" : "");
    fflush(stdout);
    if (!watchdog_fail(&mg->wd, msg))
        for (;;) pause();  // the watchdog thread fired first and is ending the process
    _exit(EXIT_FAILURE);
}

// After an op's NCCL calls returned: record its completion marker on stream (no synchronization)
// and hand it to the watchdog. slot -1 (watchdog off): nothing.
static inline void mg_op_recorded_(MultiGpu* mg, int slot, cudaStream_t stream) {
    if (slot < 0) return;
    cudaCheck(cudaEventRecord(mg->wd_events[slot], stream));
    watchdog_recorded(&mg->wd, slot);
}
#endif

// Pick this process's GPU (local rank modulo the visible devices) and, for several processes, join
// the NCCL communicator (non-blocking) with its watchdog (watch: -pw and how to name the newest
// checkpoint). Must run before any other CUDA allocation, on the training thread. Dies with a message
// on failure; a creation the other ranks never complete ends the process through the watchdog.
static inline void multi_gpu_init(MultiGpu* mg, const ProcessGroup* pg, const GPT2Config* config, int zero_stage, int wire_fp32,
                                  const MultiGpuWatch* watch) {
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
    cudaCheck(cudaGetDevice(&mg->device));
    if (pg->nranks == 1) return;
#ifdef MULTI_GPU
    ncclUniqueId id;
    if (pg->rank == 0) ncclCheck(ncclGetUniqueId(&id));
    rendezvous_broadcast(pg, &id, sizeof(id));
    mg_watchdog_start_(mg, watch);  // before the communicator: its creation waits on the other ranks too
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // no call waits on the other ranks: ncclCommAbort stays possible at any time
    const int slot = watchdog_begin(&mg->wd);
    const ncclResult_t r = ncclCommInitRankConfig(&mg->comm, pg->nranks, id, pg->rank, &cfg);
    if (r == ncclSuccess || r == ncclInProgress) __atomic_store_n(&mg->comm_ready, 1, __ATOMIC_RELEASE);
    mg_nccl_check_(mg, r, "ncclCommInitRankConfig", __FILE__, __LINE__);
    watchdog_done(&mg->wd, slot);
#else
    (void)watch;
    die("%d processes: this binary was built without NCCL (make info; NO_MULTI_GPU=1 or nccl.h missing)", pg->nranks);
#endif
}

// fp32 gradient buffer for -gw fp32 (num_parameters floats); call after the model is allocated.
static inline void multi_gpu_alloc_wire(MultiGpu* mg, size_t num_parameters) {
    if (mg->wire_fp32 && multi_gpu_active(mg)) cudaCheck(cudaMalloc(&mg->grads_f32, num_parameters * sizeof(float)));
}

// End of the run: wait for the reductions, finalize the communicator (it may wait on the other ranks:
// watched), stop the watchdog, destroy the communicator, free the buffers.
static inline void multi_gpu_free(MultiGpu* mg) {
    cudaCheck(cudaStreamSynchronize(mg->stream));  // (a reduction that never completes: the watchdog ends the process)
#ifdef MULTI_GPU
    if (mg->pg.nranks > 1) {
        const int slot = watchdog_begin(&mg->wd);
        mgNccl(mg, ncclCommFinalize(mg->comm));
        watchdog_done(&mg->wd, slot);
        mg_watchdog_stop_(mg);
        __atomic_store_n(&mg->comm_ready, 0, __ATOMIC_RELEASE);
        ncclCheck(ncclCommDestroy(mg->comm));  // local once finalized
        for (int i = 0; i < WATCHDOG_SLOTS; i++) cudaCheck(cudaEventDestroy(mg->wd_events[i]));
        watchdog_destroy(&mg->wd);
    }
#endif
    cudaFree(mg->grads_f32);
    cudaFree(mg->scalars);
    cudaCheck(cudaEventDestroy(mg->event));
    cudaCheck(cudaStreamDestroy(mg->stream));
    free(mg->plan);
}

#ifdef MULTI_GPU
// NCCL's type for this build's storage type floatX.
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
    const int slot = watchdog_begin(&mg->wd);
    mgNccl(mg, ncclGroupStart());
    for (int i = first; i < first + count; i++) {
        const ZeroSlice* s = &p->slices[i];
        void* base = mg->wire_fp32 ? (void*)(mg->grads_f32 + s->offset) : (void*)(grads + s->offset);
        const ncclDataType_t type = mg->wire_fp32 ? ncclFloat : multi_gpu_nccl_type_floatX();
        const size_t esize = mg->wire_fp32 ? sizeof(float) : sizeof(floatX);
        if (mg->zero_stage == 0) {
            mgNccl(mg, ncclAllReduce(base, base, s->count, type, ncclSum, mg->comm, mg->stream));
        } else {
            const size_t part = s->count / N;
            mgNccl(mg, ncclReduceScatter(base, (char*)base + (size_t)r * part * esize, part, type, ncclSum, mg->comm, mg->stream));
        }
    }
    mgNccl(mg, ncclGroupEnd());
    mg_op_recorded_(mg, slot, mg->stream);
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
    const int slot = watchdog_begin(&mg->wd);
    mgNccl(mg, ncclGroupStart());
    for (int i = 0; i < p->num_slices; i++) {
        const ZeroSlice* s = &p->slices[i];
        const size_t part = s->count / N;
        mgNccl(mg, ncclAllGather(params + s->offset + (size_t)r * part, params + s->offset, part, multi_gpu_nccl_type_floatX(),
                                 mg->comm, compute));
    }
    mgNccl(mg, ncclGroupEnd());
    mg_op_recorded_(mg, slot, compute);
#else
    (void)params; (void)compute;
#endif
}

// Sum (op 0) or max (op 1) of n <= 64 host floats over all ranks, in place (synchronizes `stream`).
// Also the trainer's barrier; a rank that never arrives ends the process through the watchdog.
static inline void multi_gpu_allreduce_host(MultiGpu* mg, float* values, int n, int op, cudaStream_t stream) {
    if (!multi_gpu_active(mg)) return;
    if (n > 64) die("multi_gpu_allreduce_host: %d values > 64", n);
#ifdef MULTI_GPU
    cudaCheck(cudaMemcpyAsync(mg->scalars, values, n * sizeof(float), cudaMemcpyHostToDevice, stream));
    const int slot = watchdog_begin(&mg->wd);
    mgNccl(mg, ncclAllReduce(mg->scalars, mg->scalars, n, ncclFloat, op == 0 ? ncclSum : ncclMax, mg->comm, stream));
    mg_op_recorded_(mg, slot, stream);
    cudaCheck(cudaMemcpyAsync(values, mg->scalars, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));  // (a peer that never joins: the watchdog ends the process)
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
