/*
 * test_outlier.c - llmc/train/outlier_detector.h (the -sl / -sg z-scores) and its place in the training
 * state file (llmc/train/train_state.h version 3; version 2 files still read):
 *   - NaN (inactive) until the window holds 128 values, then the z-score of the new value against
 *     the 128 previous ones (checked against a direct two-pass computation), 0 with no spread;
 *   - the window slides (the oldest value leaves), non-finite values are not added;
 *   - the decision: loss before grad norm, threshold 0 = off, one-sided, NaN never skips;
 *   - save / restore in chronological order gives the same later z-scores (bit-exact resume);
 *   - state files: version 3 round trip with windows and skipped updates, a version 2 file reads as
 *     empty windows, damaged window fields are refused naming the file and the field.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev/test/test_harness.h"
#include "llmc/train/outlier_detector.h"
#include "llmc/train/train_state.h"

// z of x against values[0..n) (population std), computed directly.
static double direct_z(const double* values, int n, double x) {
    double mean = 0.0;
    for (int i = 0; i < n; i++) mean += values[i];
    mean /= n;
    double var = 0.0;
    for (int i = 0; i < n; i++) var += (values[i] - mean) * (values[i] - mean);
    double sd = sqrt(var / n);
    return sd > 0 ? (x - mean) / sd : 0.0;
}

static double seq_value(int i) { return 3.0 + 0.25 * sin(0.37 * i) + 0.001 * (i % 7); }

static void test_window(void) {
    OutlierDetector d;
    outlier_init(&d);
    int nan_count = 0;
    for (int i = 0; i < OUTLIER_WINDOW; i++) nan_count += isnan(outlier_update(&d, seq_value(i)));
    CHECK(nan_count == OUTLIER_WINDOW, "the first %d values give NaN (window filling), got %d", OUTLIER_WINDOW, nan_count);
    // from now on: z against exactly the previous 128 values
    double hist[1000];
    for (int i = 0; i < OUTLIER_WINDOW; i++) hist[i] = seq_value(i);
    int n = OUTLIER_WINDOW, ok = 1;
    for (int i = OUTLIER_WINDOW; i < 600; i++) {
        double x = seq_value(i) + (i == 400 ? 5.0 : 0.0);  // one spike
        double z = outlier_update(&d, x);
        double want = direct_z(hist + n - OUTLIER_WINDOW, OUTLIER_WINDOW, x);
        if (!(fabs(z - want) <= 1e-9 * (1.0 + fabs(want)))) { ok = 0; fprintf(stderr, "i=%d z=%.12g want=%.12g\n", i, z, want); break; }
        hist[n++] = x;
    }
    CHECK(ok, "z-scores match the direct computation over the previous %d values", OUTLIER_WINDOW);
    // the spike left the window 128 values later: z of a normal value is small again
    OutlierDetector e;
    outlier_init(&e);
    for (int i = 0; i < OUTLIER_WINDOW; i++) outlier_update(&e, 1.0);
    CHECK(outlier_zscore(&e, 1.0) == 0.0 && outlier_zscore(&e, 7.0) == 0.0, "no spread: z = 0");
    outlier_update(&e, 2.0);  // window now: 127 x 1.0, 1 x 2.0
    double w[OUTLIER_WINDOW];
    for (int i = 0; i < OUTLIER_WINDOW; i++) w[i] = i < OUTLIER_WINDOW - 1 ? 1.0 : 2.0;
    CHECK(fabs(outlier_zscore(&e, 2.0) - direct_z(w, OUTLIER_WINDOW, 2.0)) < 1e-12, "z with one outlier in the window");
    for (int i = 0; i < OUTLIER_WINDOW - 1; i++) outlier_update(&e, 1.0);
    CHECK(outlier_zscore(&e, 2.0) != 0.0, "the 2.0 is still in the window after 127 more values");
    outlier_update(&e, 1.0);
    CHECK(outlier_zscore(&e, 2.0) == 0.0, "after 128 more values the 2.0 has left the window");
    // non-finite values do not enter
    outlier_update(&e, 2.0);  // some spread
    int before = e.count, next = e.next;
    double zi = outlier_update(&e, INFINITY);
    double zn = outlier_update(&e, NAN);
    CHECK(e.count == before && e.next == next, "Inf / NaN are not added to the window");
    CHECK(isinf(zi) && isnan(zn), "z of Inf is Inf, of NaN NaN (neither skips): %g %g", zi, zn);
}

static void test_decision(void) {
    OutlierState s;
    outlier_state_init(&s);
    double zl, zg;
    for (int i = 0; i < OUTLIER_WINDOW; i++) outlier_step(&s, (float)seq_value(i), (float)(1.0 + 0.01 * (i % 5)), 0.01f, 0.01f, &zl, &zg);
    // the window is full; a loss spike with both detectors on: loss first
    OutlierState a = s, b = s, c = s, d = s;
    CHECK(outlier_step(&a, 100.0f, 100.0f, 3.0f, 3.0f, &zl, &zg) == 1 && zl > 3.0 && zg > 3.0, "loss and norm spike: code 1 (loss)");
    CHECK(outlier_step(&b, 100.0f, 100.0f, 0.0f, 3.0f, &zl, &zg) == 2, "-sl 0 is off: the norm decides (code 2)");
    CHECK(outlier_step(&c, 100.0f, 100.0f, 0.0f, 0.0f, &zl, &zg) == 0, "both off: never skip");
    CHECK(outlier_step(&d, -100.0f, 1.0f, 3.0f, 3.0f, &zl, &zg) == 0 && zl < -3.0, "one-sided: a downward spike does not skip");
    CHECK(!outlier_exceeds(NAN, 1.0f) && !outlier_exceeds(INFINITY, 1.0f) && outlier_exceeds(2.0, 1.0f) && !outlier_exceeds(1.0, 1.0f),
          "exceeds: finite and strictly above");
    // an inactive detector (window not full) never skips, whatever the value
    OutlierState e;
    outlier_state_init(&e);
    for (int i = 0; i < 10; i++) outlier_step(&e, 1.0f, 1.0f, 0.5f, 0.5f, &zl, &zg);
    CHECK(outlier_step(&e, 1e6f, 1e6f, 0.5f, 0.5f, &zl, &zg) == 0 && isnan(zl) && isnan(zg), "inactive until the window is full");
}

static void test_save_restore(void) {
    for (int filled = 0; filled <= 300; filled += 50) {  // partial, exactly full, wrapped windows
        OutlierDetector d, r;
        outlier_init(&d);
        for (int i = 0; i < filled; i++) outlier_update(&d, seq_value(i));
        double saved[OUTLIER_WINDOW];
        int count = outlier_get(&d, saved);
        outlier_set(&r, saved, count);
        int same = count == (filled < OUTLIER_WINDOW ? filled : OUTLIER_WINDOW);
        for (int i = 0; i < 200 && same; i++) {
            double x = seq_value(1000 + i) * (i == 150 ? 4.0 : 1.0);
            double z1 = outlier_update(&d, x), z2 = outlier_update(&r, x);
            same = (isnan(z1) && isnan(z2)) || memcmp(&z1, &z2, sizeof(double)) == 0;
        }
        CHECK(same, "restored window (after %d values) gives bit-identical z-scores", filled);
    }
}

static void write_raw(const char* path, const int32_t* h, size_t nfloat_arrays, size_t elems, size_t extra_bytes) {
    FILE* f = fopen(path, "wb");
    fwrite(h, sizeof(int32_t), 256, f);
    float zero = 0.0f;
    for (size_t i = 0; i < nfloat_arrays * elems; i++) fwrite(&zero, sizeof(float), 1, f);
    for (size_t i = 0; i < extra_bytes; i++) fputc(0, f);
    fclose(f);
}

static const char* g_path;
static void read_state(void* ctx) {
    TrainState r;
    float *a, *b, *c;
    train_state_read((const char*)ctx, 100, &r, &a, &b, &c);
}

static void test_state_file(void) {
    TrainState s;
    memset(&s, 0, sizeof(s));
    s.rank = 0; s.nranks = 1; s.step = 300; s.has_master = 0; s.floatx_bytes = 2; s.B = 4; s.T = 64;
    s.num_parameters = 100; s.loss_scale = 1.0f;
    outlier_state_init(&s.outlier);
    for (int i = 0; i < 200; i++) outlier_update(&s.outlier.loss, seq_value(i));
    for (int i = 0; i < 50; i++) outlier_update(&s.outlier.grad, 1.0 + 0.1 * i);
    s.outlier.skipped_updates = 3;
    float m[100], v[100];
    for (int i = 0; i < 100; i++) { m[i] = (float)i; v[i] = (float)(2 * i); }
    const char* path = tmp_path("state_v3.bin");
    train_state_write(path, &s, m, v, NULL);
    TrainState r;
    float *rm, *rv, *rw;
    train_state_read(path, 100, &r, &rm, &rv, &rw);
    CHECK(r.outlier.skipped_updates == 3, "skipped updates round trip");
    CHECK(r.outlier.loss.count == OUTLIER_WINDOW && r.outlier.grad.count == 50, "window counts round trip (%d, %d)",
          r.outlier.loss.count, r.outlier.grad.count);
    double z1 = outlier_zscore(&s.outlier.loss, 9.0), z2 = outlier_zscore(&r.outlier.loss, 9.0);
    CHECK(memcmp(&z1, &z2, sizeof(double)) == 0, "restored loss window: same z (%.17g vs %.17g)", z1, z2);
    double a1[OUTLIER_WINDOW], a2[OUTLIER_WINDOW];
    outlier_get(&s.outlier.grad, a1);
    outlier_get(&r.outlier.grad, a2);
    CHECK(memcmp(a1, a2, sizeof(a1)) == 0, "grad window values round trip");
    CHECK(memcmp(rm, m, sizeof(m)) == 0 && memcmp(rv, v, sizeof(v)) == 0, "moments round trip");
    free(rm); free(rv); free(rw);
    FILE* f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    CHECK(size == 1024 + 2 * 100 * 4 + 2 * OUTLIER_WINDOW * 8, "version 3 length: header + arrays + 2 x 128 float64 (%ld)", size);

    // a version 2 file (no outlier fields, no trailing windows) still reads: empty windows
    int32_t h[256];
    memset(h, 0, sizeof(h));
    h[0] = TRAIN_STATE_MAGIC; h[1] = 2; h[2] = 0; h[3] = 1; h[4] = 40; h[5] = 0; h[6] = 2; h[7] = 4; h[8] = 64;
    h[10] = 100;
    const char* v2 = tmp_path("state_v2.bin");
    write_raw(v2, h, 2, 100, 0);
    train_state_read(v2, 100, &r, &rm, &rv, &rw);
    CHECK(r.step == 40 && r.outlier.skipped_updates == 0 && r.outlier.loss.count == 0 && r.outlier.grad.count == 0,
          "version 2 reads as no skipped update and empty windows");
    free(rm); free(rv); free(rw);
    // a version 2 header with version 3's trailing windows: length mismatch
    const char* v2long = tmp_path("state_v2_long.bin");
    write_raw(v2long, h, 2, 100, 2 * OUTLIER_WINDOW * 8);
    EXPECT_DIES(read_state, v2long, "state_v2_long.bin", "header implies");
    // version 3 with damaged fields
    h[1] = 3; h[26] = OUTLIER_WINDOW; h[27] = 129;
    const char* bad_count = tmp_path("state_bad_count.bin");
    write_raw(bad_count, h, 2, 100, 2 * OUTLIER_WINDOW * 8);
    EXPECT_DIES(read_state, bad_count, "state_bad_count.bin", "loss window count", "129");
    h[27] = 0; h[26] = 64;
    const char* bad_window = tmp_path("state_bad_window.bin");
    write_raw(bad_window, h, 2, 100, 2 * OUTLIER_WINDOW * 8);
    EXPECT_DIES(read_state, bad_window, "state_bad_window.bin", "outlier window", "64");
    h[26] = OUTLIER_WINDOW; h[25] = 41;
    const char* bad_skip = tmp_path("state_bad_skip.bin");
    write_raw(bad_skip, h, 2, 100, 2 * OUTLIER_WINDOW * 8);
    EXPECT_DIES(read_state, bad_skip, "state_bad_skip.bin", "skipped_updates");
    h[25] = 0; h[1] = 4;
    const char* v4 = tmp_path("state_v4.bin");
    write_raw(v4, h, 2, 100, 2 * OUTLIER_WINDOW * 8);
    EXPECT_DIES(read_state, v4, "state_v4.bin", "version", "4");
    (void)g_path;
}

int main(void) {
    test_window();
    test_decision();
    test_save_restore();
    test_state_file();
    return test_summary();
}
