/*
 * outlier_detector.h - loss and gradient-norm outlier detection for long runs (-sl, -sg), with
 * llm.c's window of 128 values: the z-score of a new value x against the window of the previous
 * values, z = (x - mean) / std (population standard deviation). Until the window holds 128 values
 * z is NaN (inactive); with zero spread it is 0. A step whose z exceeds the threshold skips its
 * optimizer update (the trainers; one-sided, as llm.c: only upward spikes).
 *
 * Differences from llm.c's llmc/train/outlier_detector.h: the statistics are those of the 128 values
 * before x (llm.c puts x into the window first, which bounds z by sqrt(127) = 11.3), they are
 * recomputed from the window in a fixed order each time (no running sums that drift, so a resumed
 * run decides exactly as the uninterrupted one), and non-finite values are not added (one Inf would
 * disable the detector for 128 steps). The window is saved in the training state file
 * (llmc/train/train_state.h, version 3) in chronological order.
 */
#ifndef LLMC_OUTLIER_DETECTOR_H
#define LLMC_OUTLIER_DETECTOR_H

#include <math.h>
#include <string.h>

#define OUTLIER_WINDOW 128  // llm.c's OUTLIER_DETECTOR_WINDOW_SIZE

typedef struct {
    double values[OUTLIER_WINDOW];  // ring buffer
    int count;                      // values held (<= OUTLIER_WINDOW)
    int next;                       // where the next value goes
} OutlierDetector;

static inline void outlier_init(OutlierDetector* d) { memset(d, 0, sizeof(*d)); }

// z-score of x against the window (NaN while the window is not full).
static inline double outlier_zscore(const OutlierDetector* d, double x) {
    if (d->count < OUTLIER_WINDOW) return NAN;
    double sum = 0.0;
    for (int i = 0; i < OUTLIER_WINDOW; i++) sum += d->values[(d->next + i) % OUTLIER_WINDOW];
    const double mean = sum / OUTLIER_WINDOW;
    double sq = 0.0;
    for (int i = 0; i < OUTLIER_WINDOW; i++) {
        const double dv = d->values[(d->next + i) % OUTLIER_WINDOW] - mean;
        sq += dv * dv;
    }
    const double std = sqrt(sq / OUTLIER_WINDOW);
    return std > 0.0 ? (x - mean) / std : 0.0;
}

// Add x to the window (dropping the oldest value when full); non-finite values are not added.
static inline void outlier_push(OutlierDetector* d, double x) {
    if (!isfinite(x)) return;
    d->values[d->next] = x;
    d->next = (d->next + 1) % OUTLIER_WINDOW;
    if (d->count < OUTLIER_WINDOW) d->count++;
}

// z-score of x against the previous values, then x joins the window (llm.c's update_detector).
static inline double outlier_update(OutlierDetector* d, double x) {
    const double z = outlier_zscore(d, x);
    outlier_push(d, x);
    return z;
}

// 1 when threshold > 0 (on) and z is a finite value above it.
static inline int outlier_exceeds(double z, float threshold) { return threshold > 0.0f && isfinite(z) && z > threshold; }

// The window oldest first into out[0 .. count) (rest 0); returns count.
static inline int outlier_get(const OutlierDetector* d, double out[OUTLIER_WINDOW]) {
    memset(out, 0, OUTLIER_WINDOW * sizeof(double));
    const int first = d->count < OUTLIER_WINDOW ? 0 : d->next;
    for (int i = 0; i < d->count; i++) out[i] = d->values[(first + i) % OUTLIER_WINDOW];
    return d->count;
}

// Restore a window saved by outlier_get (count values, oldest first).
static inline void outlier_set(OutlierDetector* d, const double* values, int count) {
    outlier_init(d);
    for (int i = 0; i < count && i < OUTLIER_WINDOW; i++) outlier_push(d, values[i]);
}

// What a run carries for -sl / -sg: both windows and the updates skipped so far (AdamW's step count
// is the number of updates applied: step + 1 - skipped_updates for the update after `step` steps).
typedef struct {
    OutlierDetector loss, grad;
    int skipped_updates;
} OutlierState;

static inline void outlier_state_init(OutlierState* s) {
    outlier_init(&s->loss);
    outlier_init(&s->grad);
    s->skipped_updates = 0;
}

// The decision of one step: updates both windows with loss and grad_norm; returns 0 (update),
// 1 (skip: loss z above sl) or 2 (skip: grad-norm z above sg), llm.c's order, with the z-scores.
static inline int outlier_step(OutlierState* s, float loss, float grad_norm, float sl, float sg, double* zloss, double* zgrad) {
    *zloss = outlier_update(&s->loss, loss);
    *zgrad = outlier_update(&s->grad, grad_norm);
    if (outlier_exceeds(*zloss, sl)) return 1;
    if (outlier_exceeds(*zgrad, sg)) return 2;
    return 0;
}

#endif // LLMC_OUTLIER_DETECTOR_H
