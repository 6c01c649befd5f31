/*
 * watchdog.h - ends a multi-GPU run whose other ranks stopped making progress (host only, plain C).
 *
 * An NCCL collective waits for every rank. When a rank dies (kill -9, a lost node, a failed network)
 * the others wait forever, in a collective kernel or in a host wait behind one, and keep their GPUs
 * busy until someone notices. This file is the logic that notices, apart from CUDA and NCCL, so that
 * dev/test/test_watchdog.c can drive it with a fake clock and a collective that never completes;
 * llmc/dist/multi_gpu.cuh gives it its CUDA / NCCL hooks and runs watchdog_run on a thread.
 *
 * What it watches: every "op" of the training thread that waits on the other ranks (an NCCL
 * collective or group of them, the communicator's creation and finalization), announced with
 *   watchdog_begin     before the NCCL call (the call itself may wait: connection set-up), then
 *   watchdog_recorded  once the call has returned and a completion marker (a CUDA event) has been
 *                      recorded behind the op on its stream: the op is complete when the marker is, or
 *   watchdog_done      for an op that completes on the host (init, finalize).
 * Ops complete in the order they were issued (NCCL runs the operations of one communicator in
 * order), so a tick polls only the oldest outstanding one(s). Progress is an op completing; the clock
 * also restarts when an op is issued while none was outstanding, so time with nothing outstanding
 * (writing a checkpoint, sampling, evaluation) never counts, only time spent waiting on the others.
 *
 * When it fires: watchdog_check (one tick) fires when an op is outstanding and none has completed
 * for timeout_s seconds, or at once when the communicator reports an asynchronous error (a peer's
 * socket closed). It fires once: it names the newest complete checkpoint, stops the training thread
 * (halt: it must not go on with the partial sums an aborted collective leaves behind, e.g. into a
 * checkpoint or the log), reports one line
 *   error: rank R: no progress from the other ranks for N s (a rank died or the network failed); last complete checkpoint: <file>
 * ("error: rank R: NCCL failed: <why> (a rank died or the network failed); last complete checkpoint: <file>"
 * for an NCCL error) and aborts the communicator; the caller then ends the process (non-zero status).
 * watchdog_fail is the same report for an NCCL error the training thread got itself.
 * timeout_s 0 disables it: nothing is tracked and it never fires.
 *
 * Cost on the training thread: watchdog_begin / watchdog_recorded take an uncontended mutex (the
 * watchdog thread holds it for one cudaEventQuery per tick); nothing synchronizes with the GPU. The
 * ring holds WATCHDOG_SLOTS outstanding ops; a training thread that gets that far ahead of the GPU
 * retires completed ops itself, or waits for the oldest (it would wait at its next sync anyway).
 */
#ifndef LLMC_WATCHDOG_H
#define LLMC_WATCHDOG_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define WATCHDOG_SLOTS 64

// What the watchdog does through its owner (multi_gpu.cuh: CUDA events, NCCL; the tests: fakes).
// Only now is required; a NULL hook does nothing (poll NULL: a recorded op counts as complete).
typedef struct {
    double (*now)(void* ctx);                              // monotonic clock, seconds
    void (*sleep)(void* ctx, double seconds);              // watchdog_run's tick interval; a full ring's wait
    int (*poll)(void* ctx, int slot);                      // 1 when the marker recorded for the op in slot is complete
    int (*async_error)(void* ctx, char* msg, size_t n);    // 1 when the communicator reports an error (its text in msg)
    void (*last_checkpoint)(void* ctx, char* out, size_t n);  // the newest complete checkpoint's file, or "none"
    void (*halt)(void* ctx);                               // stop the training thread (never called on it)
    void (*report)(void* ctx, const char* line);           // print the error line (NULL: stderr)
    void (*abort)(void* ctx);                              // abort the communicator
    void* ctx;
} WatchdogHooks;

enum { WD_FREE = 0, WD_ISSUED = 1, WD_RECORDED = 2, WD_DONE = 3 };  // a slot's state

typedef struct {
    WatchdogHooks hooks;
    int rank;                 // this process's rank (in the message)
    int timeout_s;            // seconds without progress before firing; 0: disabled
    pthread_mutex_t lock;     // guards everything below (training thread vs watchdog thread)
    uint64_t head, tail;      // ops [tail, head) are outstanding, in issue order; op k lives in slot k % WATCHDOG_SLOTS
    unsigned char state[WATCHDOG_SLOTS];
    double last_progress;     // clock of the last completion, or of an issue while nothing was outstanding
    uint64_t completed;       // ops seen complete (tests, statistics)
    int fired;                // 1 once fired (it fires once)
    char line[1024];          // the line it reported
} Watchdog;

// Seconds between two ticks of watchdog_run: 0.1 s, less for tiny timeouts (the check costs a
// mutex, one event query and one NCCL status read, so it can run often).
static inline double watchdog_interval(int timeout_s) {
    const double t = timeout_s / 20.0;
    return t < 0.1 ? t : 0.1;
}

// Set w up for rank with timeout_s (0: disabled) and hooks (copied).
static inline void watchdog_init(Watchdog* w, int rank, int timeout_s, const WatchdogHooks* hooks) {
    memset(w, 0, sizeof(*w));
    w->hooks = *hooks;
    w->rank = rank;
    w->timeout_s = timeout_s > 0 ? timeout_s : 0;
    pthread_mutex_init(&w->lock, NULL);
    w->last_progress = w->hooks.now(w->hooks.ctx);
}

// Release w's mutex (after the watchdog thread, if any, has stopped).
static inline void watchdog_destroy(Watchdog* w) { pthread_mutex_destroy(&w->lock); }

// 1 when w tracks ops and can fire (timeout_s > 0).
static inline int watchdog_enabled(const Watchdog* w) { return w->timeout_s > 0; }

// Retire the completed ops at the tail, in order (lock held); progress when any. Returns how many.
static inline int watchdog_retire_(Watchdog* w) {
    int n = 0;
    while (w->tail < w->head) {
        const int slot = (int)(w->tail % WATCHDOG_SLOTS);
        const int st = w->state[slot];
        if (st == WD_ISSUED) break;  // still inside its NCCL call
        if (st == WD_RECORDED && w->hooks.poll && !w->hooks.poll(w->hooks.ctx, slot)) break;
        w->state[slot] = WD_FREE;
        w->tail++;
        w->completed++;
        n++;
    }
    if (n > 0) w->last_progress = w->hooks.now(w->hooks.ctx);
    return n;
}

// Training thread, before an op's NCCL call: claim a slot and return it (-1 when disabled: then
// recorded / done ignore it). A full ring first retires what is complete, else waits for the oldest.
static inline int watchdog_begin(Watchdog* w) {
    if (w->timeout_s <= 0) return -1;
    pthread_mutex_lock(&w->lock);
    while (w->head - w->tail >= WATCHDOG_SLOTS && watchdog_retire_(w) == 0) {
        pthread_mutex_unlock(&w->lock);
        if (w->hooks.sleep) w->hooks.sleep(w->hooks.ctx, 1e-4);
        pthread_mutex_lock(&w->lock);
    }
    if (w->tail == w->head) w->last_progress = w->hooks.now(w->hooks.ctx);  // nothing was outstanding: the clock starts now
    const int slot = (int)(w->head % WATCHDOG_SLOTS);
    w->state[slot] = WD_ISSUED;
    w->head++;
    pthread_mutex_unlock(&w->lock);
    return slot;
}

// Set the state of a slot watchdog_begin returned (ignored for -1).
static inline void watchdog_set_(Watchdog* w, int slot, int state) {
    if (slot < 0 || slot >= WATCHDOG_SLOTS) return;
    pthread_mutex_lock(&w->lock);
    w->state[slot] = (unsigned char)state;
    pthread_mutex_unlock(&w->lock);
}

// Training thread: the op in slot is enqueued and its completion marker recorded (the poll hook
// may query it from now on).
static inline void watchdog_recorded(Watchdog* w, int slot) { watchdog_set_(w, slot, WD_RECORDED); }

// Training thread: the host-side op in slot (communicator init, finalize) has completed.
static inline void watchdog_done(Watchdog* w, int slot) { watchdog_set_(w, slot, WD_DONE); }

// Build the line (nccl_error NULL: the timeout), halt the training thread when asked to, report and
// abort. Called once, by whoever set fired, without the lock (the hooks may take their time).
static inline void watchdog_fire_(Watchdog* w, const char* nccl_error, int halt_trainer) {
    char ckpt[512];
    snprintf(ckpt, sizeof(ckpt), "none");
    if (w->hooks.last_checkpoint) w->hooks.last_checkpoint(w->hooks.ctx, ckpt, sizeof(ckpt));
    if (nccl_error)
        snprintf(w->line, sizeof(w->line),
                 "error: rank %d: NCCL failed: %s (a rank died or the network failed); last complete checkpoint: %s", w->rank,
                 nccl_error, ckpt);
    else
        snprintf(w->line, sizeof(w->line),
                 "error: rank %d: no progress from the other ranks for %d s (a rank died or the network failed); "
                 "last complete checkpoint: %s", w->rank, w->timeout_s, ckpt);
    if (halt_trainer && w->hooks.halt) w->hooks.halt(w->hooks.ctx);
    if (w->hooks.report) w->hooks.report(w->hooks.ctx, w->line);
    else {
        fputs(w->line, stderr);
        fputc('\n', stderr);
        fflush(stderr);
    }
    if (w->hooks.abort) w->hooks.abort(w->hooks.ctx);
}

// One tick (the watchdog thread): retire completed ops, then fire on an asynchronous NCCL error, or
// when an op is outstanding and nothing has completed for timeout_s. Returns 1 when it fired now
// (the caller ends the process), 0 otherwise (also once it has fired, and always when disabled).
static inline int watchdog_check(Watchdog* w) {
    if (w->timeout_s <= 0) return 0;
    char err[512] = "";
    int why = 0;  // 1 timeout, 2 NCCL error
    pthread_mutex_lock(&w->lock);
    if (!w->fired) {
        watchdog_retire_(w);
        if (w->hooks.async_error && w->hooks.async_error(w->hooks.ctx, err, sizeof(err))) why = 2;
        else if (w->tail < w->head && w->hooks.now(w->hooks.ctx) - w->last_progress >= (double)w->timeout_s) why = 1;
        if (why) w->fired = 1;
    }
    pthread_mutex_unlock(&w->lock);
    if (!why) return 0;
    watchdog_fire_(w, why == 2 ? err : NULL, 1);
    return 1;
}

// Training thread: an NCCL call failed (what: the call and NCCL's message). Reports and aborts like
// a firing (without halting: the caller is the training thread; it ends the process next) and
// returns 1; returns 0 when the watchdog has fired already (its thread is ending the process).
// Works when disabled too (the report is the same).
static inline int watchdog_fail(Watchdog* w, const char* what) {
    pthread_mutex_lock(&w->lock);
    const int first = !w->fired;
    w->fired = 1;
    pthread_mutex_unlock(&w->lock);
    if (first) watchdog_fire_(w, what, 0);
    return first;
}

// 1 once the watchdog fired or watchdog_fail reported.
static inline int watchdog_fired(Watchdog* w) {
    pthread_mutex_lock(&w->lock);
    const int f = w->fired;
    pthread_mutex_unlock(&w->lock);
    return f;
}

// The watchdog thread's loop: a tick every watchdog_interval until *stop becomes nonzero (returns 0)
// or it fires (returns 1: the caller ends the process). Returns 0 at once when disabled.
static inline int watchdog_run(Watchdog* w, const int* stop) {
    if (w->timeout_s <= 0) return 0;
    const double dt = watchdog_interval(w->timeout_s);
    while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
        if (watchdog_check(w)) return 1;
        if (w->hooks.sleep) w->hooks.sleep(w->hooks.ctx, dt);
    }
    return 0;
}

#endif  // LLMC_WATCHDOG_H
