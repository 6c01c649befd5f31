// gpu_monitor.cuh - -lg N: the GPU's memory, clocks and temperature every N steps, printed and logged.
//
// Memory comes from cudaMemGetInfo (used = total - free, on the whole device: other processes'
// allocations count too); the peak is the largest "used" seen at these samples (a cheap lower bound
// of the true peak). SM / memory clocks and the temperature come from NVML, loaded at run time with
// dlopen("libnvidia-ml.so.1"), so the binary has no link-time dependency on it; without NVML (no
// driver library, an init error) the trainer says so once and logs the memory only. The CUDA
// device is matched to its NVML handle by PCI bus id (CUDA_VISIBLE_DEVICES renumbers devices).
#pragma once

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/obs/logger.h"

// The NVML ABI pieces used here (nvml.h is not needed at build time).
typedef int GpuMonNvmlReturn;  // nvmlReturn_t: 0 = NVML_SUCCESS
typedef struct GpuMonNvmlDevice_* GpuMonNvmlDevice;
#define GPUMON_NVML_CLOCK_SM 1     // NVML_CLOCK_SM
#define GPUMON_NVML_CLOCK_MEM 2    // NVML_CLOCK_MEM
#define GPUMON_NVML_TEMPERATURE_GPU 0

struct GpuMonitor {
    int every;                // -lg N (0: off)
    int tried, have_nvml;     // NVML loaded and initialized
    void* lib;
    GpuMonNvmlDevice device;
    GpuMonNvmlReturn (*get_clock)(GpuMonNvmlDevice, int, unsigned int*);
    GpuMonNvmlReturn (*get_temperature)(GpuMonNvmlDevice, int, unsigned int*);
    GpuMonNvmlReturn (*shutdown)(void);
    double peak_used_mib;     // the largest sampled use
};

// Load NVML once (quietly; the first sample reports whether it worked).
static inline void gpu_monitor_load_nvml_(GpuMonitor* g) {
    g->tried = 1;
    g->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g->lib) return;
    typedef GpuMonNvmlReturn (*InitFn)(void);
    typedef GpuMonNvmlReturn (*ByPciFn)(const char*, GpuMonNvmlDevice*);
    InitFn init = (InitFn)dlsym(g->lib, "nvmlInit_v2");
    ByPciFn by_pci = (ByPciFn)dlsym(g->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    g->get_clock = (GpuMonNvmlReturn(*)(GpuMonNvmlDevice, int, unsigned int*))dlsym(g->lib, "nvmlDeviceGetClockInfo");
    g->get_temperature = (GpuMonNvmlReturn(*)(GpuMonNvmlDevice, int, unsigned int*))dlsym(g->lib, "nvmlDeviceGetTemperature");
    if (!init || !by_pci || !g->get_clock || !g->get_temperature || init() != 0) return;
    g->shutdown = (GpuMonNvmlReturn(*)(void))dlsym(g->lib, "nvmlShutdown");
    int dev = 0;
    char bus[64];
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) != cudaSuccess) return;
    if (by_pci(bus, &g->device) != 0) return;
    g->have_nvml = 1;
}

static inline void gpu_monitor_init(GpuMonitor* g, int every) {
    memset(g, 0, sizeof(*g));
    g->every = every;
}

// After optimizer step `step` (1-based): print and log a sample when step is a multiple of -lg.
static inline void gpu_monitor_step(GpuMonitor* g, int step, Logger* lg) {
    if (g->every <= 0 || step % g->every != 0) return;
    if (!g->tried) {
        gpu_monitor_load_nvml_(g);
        if (!g->have_nvml) printf("note: -lg: NVML (libnvidia-ml.so.1) unavailable: logging memory only\n");
    }
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const double mib = 1024.0 * 1024.0, used = (total_b - free_b) / mib, total = total_b / mib;
    if (used > g->peak_used_mib) g->peak_used_mib = used;
    char line[256], pairs[256];
    int n = snprintf(line, sizeof(line), "step %5d | gpu memory %.0f / %.0f MiB (peak seen %.0f)", step, used, total, g->peak_used_mib);
    int k = snprintf(pairs, sizeof(pairs), "gpu_mem_mib:%.0f gpu_mem_total_mib:%.0f gpu_mem_peak_mib:%.0f", used, total, g->peak_used_mib);
    unsigned int sm = 0, mem = 0, temp = 0;
    if (g->have_nvml && g->get_clock(g->device, GPUMON_NVML_CLOCK_SM, &sm) == 0 &&
        g->get_clock(g->device, GPUMON_NVML_CLOCK_MEM, &mem) == 0 &&
        g->get_temperature(g->device, GPUMON_NVML_TEMPERATURE_GPU, &temp) == 0) {
        snprintf(line + n, sizeof(line) - n, " | SM %u MHz | memory %u MHz | %u C", sm, mem, temp);
        snprintf(pairs + k, sizeof(pairs) - k, " sm_mhz:%u mem_mhz:%u temp_c:%u", sm, mem, temp);
    }
    printf("%s\n", line);
    logger_log_event(lg, step, pairs);
}

static inline void gpu_monitor_free(GpuMonitor* g) {
    if (g->shutdown) g->shutdown();
    if (g->lib) dlclose(g->lib);
    memset(g, 0, sizeof(*g));
}
