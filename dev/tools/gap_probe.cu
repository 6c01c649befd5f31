// gap_probe.cu - a GPU timeline with known gaps, to check dev/tools/kernel_gaps.cpp.
//
// 50 steps on one stream, each: the marker kernel gap_probe_step_marker, then 20 kernels
// gap_probe_work; every kernel spins ~20 us on the GPU's global timer. After the 10th and the 20th
// work kernel the host synchronizes the stream and then busy-waits 200 us before the next launch,
// so each step holds exactly 2 gaps of at least 200 us (idle >= 400 us); every other gap is only
// the distance between two queued launches (a few us). The last line states what
// kernel_gaps should find (its gap report and, per step, its kernel table: 1 marker and 20 work
// launches of ~20 us), as key=value pairs that dev/tools/check_kernel_gaps.sh reads:
//
//   dev/tools/check_kernel_gaps.sh   (runs: CUDA_INJECTION64_PATH=$PWD/build/tools/libkernel_gaps.so
//                                     KERNEL_GAPS_STEP_KERNEL=gap_probe_step_marker KERNEL_GAPS_OUT=... build/tools/gap_probe)
//
// Exits 1 with a message on any CUDA error, or when a kernel did not spin.

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int kSteps = 50;
constexpr int kWorkPerStep = 20;             // work kernels after each marker
constexpr int kSyncEvery = 10;               // host sync + wait after every 10th work kernel
constexpr int kHostWaitUs = 200;             // host busy-wait after each sync, us
constexpr unsigned long long kSpinNs = 20000;  // each kernel's duration on the GPU, ns
constexpr unsigned long long kMaxPolls = 1ull << 26;  // spin bound if the timer were to stall
constexpr int kSkip = 3;                     // kernel_gaps' default KERNEL_GAPS_SKIP

// Exits with `gap_probe: error: <call> failed: <reason>` when e is not cudaSuccess.
static void check(cudaError_t e, const char* call, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "gap_probe: error: %s failed at line %d: %s (%s)\n", call, line, cudaGetErrorString(e), cudaGetErrorName(e));
    exit(1);
}
#define CHECK(call) check((call), #call, __LINE__)

// The GPU's global timer, ns.
static __device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spins until ns nanoseconds of the global timer have passed (or kMaxPolls reads), then stores
// the time it spun, ns, in *out (0 would mean the kernel did not run).
static __device__ void spin(unsigned long long ns, unsigned long long* out) {
    const unsigned long long t0 = global_ns();
    unsigned long long t = t0;
    for (unsigned long long polls = 0; t - t0 < ns && polls < kMaxPolls; polls++) t = global_ns();
    *out = t - t0 + 1;
}

// The kernel that starts a step (KERNEL_GAPS_STEP_KERNEL=gap_probe_step_marker); one thread.
__global__ void gap_probe_step_marker(unsigned long long ns, unsigned long long* out) { spin(ns, out); }

// A work kernel of a step; one thread.
__global__ void gap_probe_work(unsigned long long ns, unsigned long long* out) { spin(ns, out); }

// Busy-waits us microseconds on the host (no sleep: the wait must not be longer than asked by much).
static void host_busy_wait(int us) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(us)) {
    }
}

int main() {
    int dev = 0;
    CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    const int per_step = 1 + kWorkPerStep;
    const int n = kSteps * per_step;
    unsigned long long* d_out = nullptr;
    CHECK(cudaMalloc(&d_out, n * sizeof(unsigned long long)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    const auto t0 = std::chrono::steady_clock::now();
    int k = 0;
    for (int step = 0; step < kSteps; step++) {
        gap_probe_step_marker<<<1, 1, 0, s>>>(kSpinNs, d_out + k++);
        CHECK(cudaGetLastError());
        for (int i = 1; i <= kWorkPerStep; i++) {
            gap_probe_work<<<1, 1, 0, s>>>(kSpinNs, d_out + k++);
            CHECK(cudaGetLastError());
            if (i % kSyncEvery == 0) {  // the GPU runs dry: a gap of at least kHostWaitUs
                CHECK(cudaStreamSynchronize(s));
                host_busy_wait(kHostWaitUs);
            }
        }
    }
    CHECK(cudaStreamSynchronize(s));
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    std::vector<unsigned long long> spun(n);
    CHECK(cudaMemcpy(spun.data(), d_out, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d_out));
    for (int i = 0; i < n; i++)
        if (spun[i] == 0) {
            fprintf(stderr, "gap_probe: error: kernel %d of %d did not run\n", i, n);
            return 1;
        }
    std::sort(spun.begin(), spun.end());
    printf("gap_probe: %s: %d steps of 1 marker + %d work kernels, %.1f ms; kernel time (global timer) median %.1f us, max %.1f us\n",
           prop.name, kSteps, kWorkPerStep, wall_ms, spun[n / 2] * 1e-3, spun[n - 1] * 1e-3);
    printf("gap_probe: expected per step: %d gaps >= 20 us, each >= %d us (sync + host wait), idle >= %d us, other gaps < 20 us\n",
           kWorkPerStep / kSyncEvery, kHostWaitUs, kWorkPerStep / kSyncEvery * kHostWaitUs);
    printf("gap_probe: expect steps_found=%d steps_measured=%d activities_per_step=%d big_gaps_per_step=%d min_big_gap_us=%d "
           "min_idle_us=%d max_small_gap_us=20 work_per_step=%d kernel_us=%d\n",
           kSteps, kSteps - 1 - kSkip, per_step, kWorkPerStep / kSyncEvery, kHostWaitUs, kWorkPerStep / kSyncEvery * kHostWaitUs,
           kWorkPerStep, (int)(kSpinNs / 1000));
    return 0;
}
