/*
 * test_watchdog.c - host tests of llmc/dist/watchdog.h, the logic that ends a multi-GPU run whose
 * other ranks stopped making progress, with a fake clock (no real seconds pass) and fake collectives
 * (a flag per slot stands for the CUDA event recorded behind the collective):
 *   - progress (an op completing) restarts the timer; time with nothing outstanding never counts;
 *   - an op that never completes fires exactly once, after timeout_s, with the exact line, the
 *     newest complete checkpoint named, the training thread halted and the communicator aborted;
 *   - completed collectives, and a disabled watchdog (timeout 0), never fire;
 *   - an op still inside its NCCL call (the communicator's creation) counts as outstanding;
 *   - an asynchronous NCCL error fires at once; the training thread's own NCCL failure reports once;
 *   - a full ring makes the training thread wait for the oldest op;
 *   - watchdog_run on a real thread, with the training thread issuing ops concurrently.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dev/test/test_harness.h"
#include "llmc/dist/watchdog.h"

// The fake world: a clock in nanoseconds (atomic: the threaded test reads it from two threads),
// completion flags per slot, an optional async error, and counters of what the hooks were asked.
typedef struct {
    uint64_t now_ns;
    int complete[WATCHDOG_SLOTS];  // 1: the marker recorded in this slot is complete
    const char* async_error;       // non-NULL: the communicator reports it
    int polls, halts, reports, aborts, sleeps;
    int complete_oldest_on_sleep;  // the ring-full test: each sleep completes the GPU's oldest op
    int real_sleep_us;             // the threaded test: each sleep also sleeps this long for real (see there)
    Watchdog* w;
    char line[1024];
} Fake;

// The hooks (llmc/dist/watchdog.h's WatchdogHooks) over the fake world: the clock,
static double fake_now(void* ctx) {
    Fake* f = (Fake*)ctx;
    return __atomic_load_n(&f->now_ns, __ATOMIC_ACQUIRE) * 1e-9;
}
// moving it on (tests and sleeps),
static void fake_advance(Fake* f, double s) { __atomic_add_fetch(&f->now_ns, (uint64_t)(s * 1e9 + 0.5), __ATOMIC_ACQ_REL); }
// a sleep (the ring-full test also completes the oldest op: the GPU moved on meanwhile),
static void fake_sleep(void* ctx, double s) {
    Fake* f = (Fake*)ctx;
    __atomic_add_fetch(&f->sleeps, 1, __ATOMIC_ACQ_REL);
    if (f->complete_oldest_on_sleep) f->complete[f->w->tail % WATCHDOG_SLOTS] = 1;
    if (f->real_sleep_us) {
        struct timespec ts = {0, f->real_sleep_us * 1000L};
        nanosleep(&ts, NULL);
    }
    fake_advance(f, s);
}
// the event query,
static int fake_poll(void* ctx, int slot) {
    Fake* f = (Fake*)ctx;
    f->polls++;
    return __atomic_load_n(&f->complete[slot], __ATOMIC_ACQUIRE);
}
// NCCL's asynchronous error,
static int fake_async_error(void* ctx, char* msg, size_t n) {
    Fake* f = (Fake*)ctx;
    if (!f->async_error) return 0;
    snprintf(msg, n, "%s", f->async_error);
    return 1;
}
// the trainer's newest complete checkpoint,
static void fake_last_checkpoint(void* ctx, char* out, size_t n) {
    (void)ctx;
    snprintf(out, n, "log/model_00000020.bin");
}
// and halt / report / abort, counted (report keeps the line).
static void fake_halt(void* ctx) { ((Fake*)ctx)->halts++; }
static void fake_report(void* ctx, const char* line) {
    Fake* f = (Fake*)ctx;
    f->reports++;
    snprintf(f->line, sizeof(f->line), "%s", line);
}
static void fake_abort(void* ctx) { ((Fake*)ctx)->aborts++; }

// A watchdog for rank with timeout_s over a fresh fake world.
static void setup(Watchdog* w, Fake* f, int rank, int timeout_s) {
    memset(f, 0, sizeof(*f));
    f->w = w;
    WatchdogHooks h = {fake_now, fake_sleep, fake_poll, fake_async_error, fake_last_checkpoint, fake_halt, fake_report, fake_abort, f};
    watchdog_init(w, rank, timeout_s, &h);
}

// One collective of the training thread: begin, (the NCCL call), record its marker (not complete yet).
static int issue(Watchdog* w, Fake* f) {
    const int slot = watchdog_begin(w);
    if (slot >= 0) f->complete[slot] = 0;
    watchdog_recorded(w, slot);
    return slot;
}

// Ticks every dt seconds of fake time for `seconds`; returns the fake time of the first firing, or -1.
static double tick_for(Watchdog* w, Fake* f, double seconds, double dt) {
    const double end = fake_now(f) + seconds - 1e-9;
    double fired_at = -1;
    while (fake_now(f) < end) {
        fake_advance(f, dt);
        if (watchdog_check(w) && fired_at < 0) fired_at = fake_now(f);
    }
    return fired_at;
}

static const char* EXPECTED_TIMEOUT =
    "error: rank 1: no progress from the other ranks for 10 s (a rank died or the network failed); "
    "last complete checkpoint: log/model_00000020.bin";

// A collective that never completes: nothing before 10 s, one firing at 10 s, exactly the line.
static void test_fires_once(void) {
    static Watchdog w;
    Fake f;
    setup(&w, &f, 1, 10);
    issue(&w, &f);  // a collective the other rank never joins
    double at = tick_for(&w, &f, 9.9, 0.1);
    CHECK(at < 0 && f.reports == 0, "fired after %.1f s of a 10 s timeout", at);
    at = tick_for(&w, &f, 30.0, 0.1);
    CHECK(at >= 10.0 - 1e-6 && at <= 10.1 + 1e-6, "fired at %.2f s, expected 10.0 .. 10.1", at);
    CHECK(f.reports == 1 && f.halts == 1 && f.aborts == 1, "reports %d halts %d aborts %d: expected exactly once each", f.reports,
          f.halts, f.aborts);
    CHECK(strcmp(f.line, EXPECTED_TIMEOUT) == 0, "line: %s", f.line);
    CHECK(watchdog_fired(&w) && strcmp(w.line, EXPECTED_TIMEOUT) == 0, "the watchdog keeps its line");
    CHECK(watchdog_fail(&w, "late") == 0 && f.reports == 1, "a later NCCL failure does not report again");
    watchdog_destroy(&w);
}

// A completion at 8 s moves the firing to 18 s.
static void test_progress_resets(void) {
    static Watchdog w;
    Fake f;
    setup(&w, &f, 1, 10);
    const int a = issue(&w, &f);
    issue(&w, &f);  // two outstanding
    CHECK(tick_for(&w, &f, 8.0, 0.5) < 0, "no firing at 8 s");
    f.complete[a] = 1;  // the first completes at 8 s: progress
    CHECK(tick_for(&w, &f, 9.5, 0.5) < 0, "fired although the first op completed 9.5 s ago");
    const double at = tick_for(&w, &f, 5.0, 0.5);
    CHECK(at >= 18.0 - 1e-6 && at <= 18.5 + 1e-6, "fired at %.2f s; expected 10 s after the progress at 8 s", at);
    CHECK(f.reports == 1 && strcmp(f.line, EXPECTED_TIMEOUT) == 0, "%d reports, line %s", f.reports, f.line);
    CHECK(w.completed == 1, "%llu ops completed", (unsigned long long)w.completed);
    watchdog_destroy(&w);
}

// 13000 collectives that complete never fire; an idle gap does not count against the next op.
static void test_completed_never_fires(void) {
    static Watchdog w;
    Fake f;
    setup(&w, &f, 0, 10);
    for (int step = 0; step < 1000; step++) {  // 1000 steps of 13 reductions, each done 50 ms later
        int slots[13];
        for (int i = 0; i < 13; i++) slots[i] = issue(&w, &f);
        fake_advance(&f, 0.05);
        for (int i = 0; i < 13; i++) f.complete[slots[i]] = 1;
        watchdog_check(&w);
    }
    CHECK(tick_for(&w, &f, 1000.0, 1.0) < 0 && f.reports == 0, "fired with every op complete");
    CHECK(w.completed == 13000 && w.tail == w.head, "%llu of 13000 completed", (unsigned long long)w.completed);
    // long idle (a checkpoint write, sampling): the clock starts at the next op, not at the last progress
    fake_advance(&f, 500.0);
    issue(&w, &f);
    CHECK(tick_for(&w, &f, 9.0, 0.5) < 0, "the idle time counted against the next op");
    CHECK(tick_for(&w, &f, 2.0, 0.5) >= 0, "the next op never completes: fires 10 s after its issue");
    watchdog_destroy(&w);
}

// timeout 0: nothing tracked, never fires (not even on an NCCL error), no loop.
static void test_disabled_never_fires(void) {
    static Watchdog w;
    Fake f;
    setup(&w, &f, 0, 0);
    CHECK(!watchdog_enabled(&w), "timeout 0 is disabled");
    const int slot = watchdog_begin(&w);
    CHECK(slot == -1, "disabled: begin returns -1 (nothing tracked)");
    watchdog_recorded(&w, slot);
    watchdog_done(&w, slot);
    f.async_error = "remote process exited or there was a network error";
    CHECK(tick_for(&w, &f, 100000.0, 10.0) < 0 && f.reports == 0 && f.aborts == 0 && f.halts == 0, "disabled watchdog fired");
    int stop = 0;
    CHECK(watchdog_run(&w, &stop) == 0 && f.sleeps == 0, "disabled: watchdog_run returns at once");
    watchdog_destroy(&w);
}

// An op without a marker (the communicator's creation) counts until done.
static void test_host_op(void) {
    // the communicator's creation: outstanding while inside the call (no marker), done on the host
    static Watchdog w;
    Fake f;
    setup(&w, &f, 3, 10);
    int slot = watchdog_begin(&w);
    CHECK(tick_for(&w, &f, 5.0, 0.5) < 0, "fired during a 5 s init");
    watchdog_done(&w, slot);
    CHECK(tick_for(&w, &f, 100.0, 0.5) < 0 && f.polls == 0, "a done host op fired, or was polled");
    slot = watchdog_begin(&w);  // an init that never returns (a rank died after the rendezvous)
    const double at = tick_for(&w, &f, 20.0, 0.5);
    CHECK(at >= 115.0 - 1e-6 && at <= 115.5 + 1e-6 && f.reports == 1, "fired at %.2f (reports %d)", at, f.reports);
    CHECK(strstr(f.line, "error: rank 3: no progress from the other ranks for 10 s") == f.line, "line: %s", f.line);
    watchdog_destroy(&w);
}

// An NCCL asynchronous error fires at the next tick, with NCCL's text in the line.
static void test_async_error(void) {
    static Watchdog w;
    Fake f;
    setup(&w, &f, 1, 300);
    issue(&w, &f);
    CHECK(tick_for(&w, &f, 1.0, 0.1) < 0, "fired without an error");
    f.async_error = "remote process exited or there was a network error";
    const double at = tick_for(&w, &f, 1.0, 0.1);
    CHECK(at > 0 && at <= 1.1 + 1e-6 && f.reports == 1 && f.aborts == 1 && f.halts == 1, "async error: fired at %.2f", at);
    CHECK(strcmp(f.line, "error: rank 1: NCCL failed: remote process exited or there was a network error (a rank died or the "
                         "network failed); last complete checkpoint: log/model_00000020.bin") == 0, "line: %s", f.line);
    watchdog_destroy(&w);
}

// watchdog_fail: the training thread's own NCCL error.
static void test_fail(void) {
    // the training thread's own NCCL error: reported once, no halt (it is the caller), abort
    static Watchdog w;
    Fake f;
    setup(&w, &f, 0, 300);
    issue(&w, &f);
    CHECK(watchdog_fail(&w, "ncclGroupEnd(): unhandled system error") == 1, "first failure reports");
    CHECK(f.reports == 1 && f.halts == 0 && f.aborts == 1, "reports %d halts %d aborts %d", f.reports, f.halts, f.aborts);
    CHECK(strstr(f.line, "error: rank 0: NCCL failed: ncclGroupEnd(): unhandled system error (a rank died") == f.line, "line: %s", f.line);
    CHECK(tick_for(&w, &f, 1000.0, 1.0) < 0 && f.reports == 1, "the watchdog fired after the failure was reported");
    CHECK(watchdog_fail(&w, "again") == 0 && f.reports == 1, "second failure reported again");
    watchdog_destroy(&w);
}

// WATCHDOG_SLOTS outstanding ops: the next begin retires a completed one, else waits for the GPU.
static void test_ring_full(void) {
    static Watchdog w;
    Fake f;
    setup(&w, &f, 0, 60);
    int first = -1;
    for (int i = 0; i < WATCHDOG_SLOTS; i++) {
        const int s = issue(&w, &f);
        if (i == 0) first = s;
    }
    CHECK(w.head - w.tail == WATCHDOG_SLOTS, "ring holds %d ops", WATCHDOG_SLOTS);
    f.complete[first] = 1;  // the oldest completed: the next begin retires it instead of waiting
    int s = issue(&w, &f);
    CHECK(s == first && f.sleeps == 0, "slot %d reused without waiting (%d sleeps)", s, f.sleeps);
    f.complete_oldest_on_sleep = 1;  // nothing complete: begin waits until the GPU completes the oldest
    s = issue(&w, &f);
    CHECK(f.sleeps >= 1 && s == (first + 1) % WATCHDOG_SLOTS, "full ring: %d sleeps, slot %d", f.sleeps, s);
    CHECK(w.head - w.tail == WATCHDOG_SLOTS && w.completed == 2, "%llu completed", (unsigned long long)w.completed);
    watchdog_destroy(&w);
}

// The threaded test: watchdog_run on its own thread with the fake clock (its sleeps advance it).
// Thread bodies: watchdog_run until it fires (run_thread) or until stop_flag (run_until_stopped).
static void* run_thread(void* p) {
    static int stop_never = 0;
    Watchdog* w = (Watchdog*)p;
    return (void*)(intptr_t)watchdog_run(w, &stop_never);
}
static int stop_flag;  // run_until_stopped's stop
static void* run_until_stopped(void* p) { return (void*)(intptr_t)watchdog_run((Watchdog*)p, &stop_flag); }

static void test_threaded(void) {
    // Each tick of the thread advances the fake clock by 0.1 s and sleeps 100 us for real, so a
    // firing needs timeout / 0.1 ticks: with 3600 s, 36000 ticks = 3.6 s of real time, far more than
    // the training thread can be descheduled between the begin and the record of one op.
    static Watchdog w;
    Fake f;
    setup(&w, &f, 1, 3600);
    f.real_sleep_us = 100;
    pthread_t th;
    pthread_create(&th, NULL, run_until_stopped, &w);
    for (int i = 0; i < 20000; i++) {  // ops that complete right away, issued while the thread ticks
        const int slot = watchdog_begin(&w);
        __atomic_store_n(&f.complete[slot], 1, __ATOMIC_RELEASE);
        watchdog_recorded(&w, slot);
    }
    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELEASE);
    void* ret = NULL;
    pthread_join(th, &ret);
    CHECK((intptr_t)ret == 0 && f.reports == 0, "fired while every op completed (%d reports)", f.reports);
    // now an op that never completes: the thread fires on its own, after 10 s of fake time
    watchdog_destroy(&w);
    setup(&w, &f, 1, 10);
    f.real_sleep_us = 100;
    issue(&w, &f);
    const double t0 = fake_now(&f);
    pthread_create(&th, NULL, run_thread, &w);
    pthread_join(th, &ret);
    const double took = fake_now(&f) - t0;
    CHECK((intptr_t)ret == 1 && f.reports == 1 && f.aborts == 1 && f.halts == 1, "thread: ret %d reports %d", (int)(intptr_t)ret,
          f.reports);
    CHECK(took >= 10.0 - 1e-6 && took <= 10.0 + watchdog_interval(10) + 1e-6, "thread fired after %.3f s of fake time", took);
    CHECK(strcmp(f.line, EXPECTED_TIMEOUT) == 0, "line: %s", f.line);
    watchdog_destroy(&w);
}

// The tick interval: 0.1 s, timeout / 20 below 2 s.
static void test_interval(void) {
    CHECK(watchdog_interval(300) == 0.1 && watchdog_interval(1) == 0.05, "interval %g / %g", watchdog_interval(300), watchdog_interval(1));
}

int main(void) {
    test_fires_once();
    test_progress_resets();
    test_completed_never_fires();
    test_disabled_never_fires();
    test_host_op();
    test_async_error();
    test_fail();
    test_ring_full();
    test_threaded();
    test_interval();
    return test_summary();
}
