/*
 * lowp_diagnose_snr.h - the host-side numbers of `train_gpt2cu --diagnose 1` (llmc/train/lowp_diagnose.cuh):
 * the SNR in dB from the two sums the device computes (lowp_snr_db), the LOW threshold
 * (LOWP_DIAGNOSE_LOW_DB, lowp_snr_is_low) and an SNR's text in the table (lowp_snr_format).
 *
 * Plain C (gcc -std=gnu11) and C++; no CUDA. dev/test/test_lowp_diagnose.c tests it.
 */
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdio.h>

// Rows with any SNR below this (in dB), or a NaN SNR, are flagged LOW.
#define LOWP_DIAGNOSE_LOW_DB 30.0

// SNR in dB from the two sums: 10 log10(signal / noise), signal = Σ ref², noise = Σ (ref - x)².
// noise == 0 (x equals ref exactly, including two all-zero tensors): +inf. signal == 0 < noise: -inf.
// A NaN or negative sum: NaN. Computed as a difference of logarithms (no overflow for extreme ratios).
static inline double lowp_snr_db(double signal, double noise) {
    if (isnan(signal) || isnan(noise) || signal < 0.0 || noise < 0.0) return NAN;
    if (noise == 0.0) return INFINITY;
    if (signal == 0.0) return -INFINITY;
    if (isinf(signal) && isinf(noise)) return NAN;
    return 10.0 * (log10(signal) - log10(noise));
}

// 1 when an SNR should be flagged: below LOWP_DIAGNOSE_LOW_DB, -inf or NaN.
static inline int lowp_snr_is_low(double db) { return !(db >= LOWP_DIAGNOSE_LOW_DB); }

// An SNR for the table: "inf", "-inf", "nan" or the value with 2 decimals.
static inline void lowp_snr_format(char* out, size_t n, double db) {
    if (isnan(db)) snprintf(out, n, "nan");
    else if (isinf(db)) snprintf(out, n, db > 0 ? "inf" : "-inf");
    else snprintf(out, n, "%.2f", db);
}
