/*
 * mfu.h - model FLOPs utilization: achieved model FLOP/s over the device's dense peak.
 *
 * Model FLOPs per token of a GPT-2 training step: 6·N + 6·L·C·T (N = all parameters; the second
 * term is the causal attention matmuls, half of PaLM's 12·L·C·T, Chowdhery et al. 2022, app. B).
 * Peaks are the vendor's dense (no sparsity) tensor-core figures for the storage precision; an
 * unknown device gives -1 and the trainer prints "n/a".
 */
#ifndef LLMC_MFU_H
#define LLMC_MFU_H

#include <string.h>

typedef struct { const char* name_part; float bf16_tflops; float tf32_tflops; float fp32_tflops; } DevicePeak;

// Matched in order against the device name: the first entry whose part occurs in it wins.
static const DevicePeak DEVICE_PEAKS[] = {
    {"H100 PCIe", 756.0f, 378.0f, 51.0f},
    {"H100 NVL", 835.0f, 418.0f, 60.0f},
    {"H100", 989.4f, 494.7f, 66.9f},       // SXM5
    {"H200", 989.4f, 494.7f, 66.9f},
    {"H800", 989.4f, 494.7f, 66.9f},
    {"A100", 312.0f, 156.0f, 19.5f},
    {"L40S", 362.0f, 183.0f, 91.6f},
    {"RTX 4090", 165.2f, 82.6f, 82.6f},
};

// Peak TFLOP/s for device_name at storage precision "BF16"/"FP16" (tensor cores), "TF32" or "FP32"
// (CUDA cores); -1 if unknown.
static inline float device_peak_tflops(const char* device_name, const char* precision) {
    for (size_t i = 0; i < sizeof(DEVICE_PEAKS) / sizeof(DEVICE_PEAKS[0]); i++) {
        if (strstr(device_name, DEVICE_PEAKS[i].name_part) == NULL) continue;
        if (strcmp(precision, "FP32") == 0) return DEVICE_PEAKS[i].fp32_tflops;
        if (strcmp(precision, "TF32") == 0) return DEVICE_PEAKS[i].tf32_tflops;
        return DEVICE_PEAKS[i].bf16_tflops;
    }
    return -1.0f;
}

// Model FLOPs per token (see above).
static inline double gpt2_flops_per_token(size_t num_parameters, int L, int C, int T) {
    return 6.0 * (double)num_parameters + 6.0 * L * (double)C * T;
}

#endif
