/*
 * test_lowp_diagnose.c - the host-side helpers of `train_gpt2cu --diagnose 1` (llmc/train/lowp_diagnose_snr.h,
 * used by llmc/train/lowp_diagnose.cuh): the SNR in dB from the two sums, its edge cases (zero noise, zero
 * signal, NaN, extreme ratios), the LOW threshold and the table formatting.
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_lowp_diagnose.c -lm -o /tmp/t && /tmp/t
 */
#include <math.h>
#include <string.h>

#include "dev/test/test_harness.h"
#include "llmc/train/lowp_diagnose_snr.h"

static int near(double x, double y) { return fabs(x - y) <= 1e-12 * (fabs(y) > 1.0 ? fabs(y) : 1.0); }

static void test_snr_values(void) {
    CHECK(near(lowp_snr_db(1.0, 0.01), 20.0), "signal/noise = 100 is 20 dB, got %.17g", lowp_snr_db(1.0, 0.01));
    CHECK(near(lowp_snr_db(2.0, 2.0), 0.0), "equal sums are 0 dB, got %.17g", lowp_snr_db(2.0, 2.0));
    CHECK(near(lowp_snr_db(1.0, 10.0), -10.0), "noise 10x the signal is -10 dB, got %.17g", lowp_snr_db(1.0, 10.0));
    CHECK(near(lowp_snr_db(1000.0, 1.0), 30.0), "1000 is exactly the threshold, got %.17g", lowp_snr_db(1000.0, 1.0));
    // a uniform quantizer's step q: noise q^2/12 per element; 8 bits over [-1, 1): 6.02 dB per bit + 1.76 for a full-scale sine
    const double q = 2.0 / 256.0;
    const double db = lowp_snr_db(0.5, q * q / 12.0);
    CHECK(fabs(db - (6.0206 * 8 + 1.7609)) < 1e-3, "8-bit full-scale sine: %.4f dB", db);
    // ratios beyond the double range must not overflow or underflow
    CHECK(near(lowp_snr_db(1e300, 1e-300), 6000.0), "1e600 ratio: %.17g", lowp_snr_db(1e300, 1e-300));
    CHECK(near(lowp_snr_db(1e-300, 1e300), -6000.0), "1e-600 ratio: %.17g", lowp_snr_db(1e-300, 1e300));
}

static void test_snr_edges(void) {
    CHECK(isinf(lowp_snr_db(1.0, 0.0)) && lowp_snr_db(1.0, 0.0) > 0, "zero noise is +inf");
    CHECK(isinf(lowp_snr_db(0.0, 0.0)) && lowp_snr_db(0.0, 0.0) > 0, "two all-zero tensors are equal: +inf");
    CHECK(isinf(lowp_snr_db(0.0, 1.0)) && lowp_snr_db(0.0, 1.0) < 0, "zero signal with noise is -inf");
    CHECK(isnan(lowp_snr_db(NAN, 1.0)), "NaN signal gives NaN");
    CHECK(isnan(lowp_snr_db(1.0, NAN)), "NaN noise gives NaN");
    CHECK(isnan(lowp_snr_db(-1.0, 1.0)), "a negative sum is invalid: NaN");
    CHECK(isnan(lowp_snr_db(INFINITY, INFINITY)), "inf / inf is NaN");
    CHECK(isinf(lowp_snr_db(INFINITY, 1.0)) && lowp_snr_db(INFINITY, 1.0) > 0, "inf signal, finite noise: +inf");
    CHECK(isinf(lowp_snr_db(1.0, INFINITY)) && lowp_snr_db(1.0, INFINITY) < 0, "finite signal, inf noise: -inf");
}

static void test_threshold(void) {
    CHECK(LOWP_DIAGNOSE_LOW_DB == 30.0, "the issue's threshold is 30 dB");
    CHECK(lowp_snr_is_low(29.999), "29.999 dB is low");
    CHECK(!lowp_snr_is_low(30.0), "30 dB is not low");
    CHECK(!lowp_snr_is_low(64.0), "64 dB is not low");
    CHECK(!lowp_snr_is_low(INFINITY), "+inf is not low");
    CHECK(lowp_snr_is_low(-INFINITY), "-inf is low");
    CHECK(lowp_snr_is_low(NAN), "NaN is flagged");
}

static void expect_format(double db, const char* want) {
    char buf[32];
    lowp_snr_format(buf, sizeof(buf), db);
    CHECK(strcmp(buf, want) == 0, "format(%g) = \"%s\", expected \"%s\"", db, buf, want);
}

static void test_format(void) {
    expect_format(INFINITY, "inf");
    expect_format(-INFINITY, "-inf");
    expect_format(NAN, "nan");
    expect_format(31.456, "31.46");
    expect_format(-3.0, "-3.00");
    expect_format(lowp_snr_db(1.0, 0.0), "inf");
    char small[4];
    lowp_snr_format(small, sizeof(small), 123.456);  // truncated, still terminated
    CHECK(strlen(small) == 3, "a short buffer is truncated and terminated: \"%s\"", small);
}

int main(void) {
    test_snr_values();
    test_snr_edges();
    test_threshold();
    test_format();
    return test_summary();
}
