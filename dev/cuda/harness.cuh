// harness.cuh - shared pieces of the dev/cuda kernel harnesses: random inputs, poisoned outputs,
// comparison against a float64 CPU reference, event timing, and the PASS/FAIL tally.
//
// Every harness: draws fresh random inputs (seeded per case), poisons outputs with NaN bytes before
// the kernel writes them (so an unwritten element fails), compares with the norm-relative error
// ||a - ref||_2 / ||ref||_2 plus max abs error, times with cudaEvents (warm-up, median of repeats),
// and ends with `N passed, N failed` and a non-zero exit status on any failure.
#pragma once

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include "llmc/core/cuda_common.cuh"

// ---- random inputs (host), reproducible per seed --------------------------------------------

struct HostRng {
    uint64_t s;
    explicit HostRng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
    uint32_t u32() { s ^= s >> 12; s ^= s << 25; s ^= s >> 27; return (uint32_t)((s * 0x2545F4914F6CDD1Dull) >> 32); }
    float uniform() { return (u32() >> 8) / 16777216.0f; }                 // [0, 1)
    float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
    float normal() {                                                        // Box-Muller
        float u1 = (u32() + 1.0f) / 4294967297.0f, u2 = uniform();
        return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
    }
};

static inline std::vector<float> random_normal(size_t n, uint64_t seed, float std = 1.0f) {
    HostRng r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = std * r.normal();
    return v;
}

static inline std::vector<float> random_uniform(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
    HostRng r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = r.uniform(lo, hi);
    return v;
}

// ---- floatX conversion: the CPU reference must see exactly the rounded values the GPU sees ---

static inline floatX to_floatX(float x) { return (floatX)x; }
static inline float from_floatX(floatX x) { return (float)x; }

// Round every element to floatX and back, in place (the reference then uses the same inputs).
static inline void round_to_floatX(std::vector<float>& v) {
    for (auto& x : v) x = from_floatX(to_floatX(x));
}

// ---- device buffers ----------------------------------------------------------------------------

template <typename T>
struct DeviceBuffer {
    T* ptr = nullptr;
    size_t n = 0;
    explicit DeviceBuffer(size_t count) : n(count) { cudaCheck(cudaMalloc(&ptr, std::max<size_t>(count, 1) * sizeof(T))); }
    ~DeviceBuffer() { cudaFree(ptr); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void poison() { cudaCheck(cudaMemset(ptr, 0xFF, n * sizeof(T))); }  // all-ones bytes: NaN in fp32/bf16/fp16
    void zero() { cudaCheck(cudaMemset(ptr, 0, n * sizeof(T))); }
};

// Poison several buffers (of any element types) before a kernel writes them.
template <typename... Buffers>
static inline void poison_all(Buffers&... bufs) {
    (bufs.poison(), ...);
}

// Upload host floats to a device buffer of T (rounded to T).
template <typename T>
static inline void upload(DeviceBuffer<T>& d, const std::vector<float>& h) {
    std::vector<T> tmp(h.size());
    for (size_t i = 0; i < h.size(); i++) tmp[i] = (T)h[i];
    cudaCheck(cudaMemcpy(d.ptr, tmp.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// Download a device buffer of T as floats.
template <typename T>
static inline std::vector<float> download(const DeviceBuffer<T>& d) {
    std::vector<T> tmp(d.n);
    cudaCheck(cudaMemcpy(tmp.data(), d.ptr, d.n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> out(d.n);
    for (size_t i = 0; i < d.n; i++) out[i] = (float)tmp[i];
    return out;
}

// Raw device contents (no conversion), for bit-exact determinism checks.
template <typename T>
static inline std::vector<T> download_raw(const DeviceBuffer<T>& d) {
    std::vector<T> h(d.n);
    cudaCheck(cudaMemcpy(h.data(), d.ptr, d.n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// Host amax: max over v of bits((float)v) & 0x7FFFFFFF, what the kernels' amax outputs (FP8 amax slots,
// integer atomicMax of |value| bit patterns) accumulate.
template <typename T>
static inline unsigned int host_amax_bits(const std::vector<T>& v) {
    unsigned int m = 0;
    for (const T& x : v) {
        const float f = (float)x;
        unsigned int u;
        memcpy(&u, &f, sizeof u);
        m = std::max(m, u & 0x7FFFFFFFu);
    }
    return m;
}

// Bit-identical vectors (determinism: run twice, compare).
template <typename T>
static inline bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// ---- comparison --------------------------------------------------------------------------------

struct CompareResult {
    double rel;      // ||a - ref|| / ||ref||
    double max_abs;  // max |a - ref|
    size_t nonfinite;
    bool ok;
};

// Accumulates the norm-relative error of values against a float64 reference, one at a time (so
// callers need not store the reference); a NaN/Inf value fails the comparison.
struct ErrAcc {
    double d2 = 0, r2 = 0, maxabs = 0;
    size_t nonfinite = 0;
    void add(float a, double ref) {
        if (!isfinite(a)) { nonfinite++; return; }
        const double d = (double)a - ref;
        d2 += d * d;
        r2 += ref * ref;
        maxabs = std::max(maxabs, fabs(d));
    }
    CompareResult result(double tol) const {
        const double rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
        return {rel, maxabs, nonfinite, nonfinite == 0 && rel <= tol};
    }
};

// Compare n values of a (GPU result) with ref (float64 CPU reference); fails on any NaN/Inf.
static inline CompareResult compare(const float* a, const double* ref, size_t n, double tol) {
    ErrAcc e;
    for (size_t i = 0; i < n; i++) e.add(a[i], ref[i]);
    return e.result(tol);
}

static inline CompareResult compare(const std::vector<float>& a, const std::vector<double>& ref, double tol) {
    return compare(a.data(), ref.data(), std::min(a.size(), ref.size()), tol);
}

// ---- tally ---------------------------------------------------------------------------------------

struct Tally {
    int passed = 0, failed = 0;
    // Record one check and print it: name, relative error, max abs error, tolerance.
    bool check(const char* name, const CompareResult& r, double tol) {
        printf("  %-32s rel %.3e  maxabs %.3e  tol %.1e  %s%s\n", name, r.rel, r.max_abs, tol,
               r.ok ? "ok" : "FAIL", r.nonfinite ? " (non-finite values: unwritten or overflow)" : "");
        (r.ok ? passed : failed)++;
        return r.ok;
    }
    bool check(const char* name, bool ok) {
        printf("  %-32s %s\n", name, ok ? "ok" : "FAIL");
        (ok ? passed : failed)++;
        return ok;
    }
    int finish() const {
        printf("\n%d passed, %d failed\n", passed, failed);
        return failed ? 1 : 0;
    }
};

// Per-precision tolerance for a result computed from floatX inputs with fp32 accumulation and
// rounded once to floatX on output: a few units of floatX rounding, relative.
static inline double floatX_tolerance() {
#if defined(ENABLE_FP32)
    return 1e-5;
#elif defined(ENABLE_FP16)
    return 5e-3;
#else
    return 2e-2;
#endif
}

// ---- command line and device ----------------------------------------------------------------------

// Parse `--check-only` (returns false: no timing) and up to two optional switches `extra`, `extra2` (e.g.
// "--sweep", which sets *extra_set). Anything else prints the usage and exits with status 2.
static inline bool harness_parse_args(int argc, char** argv, const char* extra = nullptr, bool* extra_set = nullptr,
                                      const char* extra2 = nullptr, bool* extra2_set = nullptr) {
    bool timing = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check-only")) {
            timing = false;
        } else if (extra && !strcmp(argv[i], extra)) {
            *extra_set = true;
        } else if (extra2 && !strcmp(argv[i], extra2)) {
            *extra2_set = true;
        } else {
            fprintf(stderr, "usage: %s [--check-only]", argv[0]);
            for (const char* e : {extra, extra2})
                if (e) fprintf(stderr, " [%s]", e);
            fprintf(stderr, "\n");
            exit(2);
        }
    }
    return timing;
}

// Properties of the current device, for the harness banner.
static inline cudaDeviceProp harness_device() {
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    return prop;
}

// Per-element relative tolerance of a result computed in fp32 and rounded once to floatX: twice the
// unit roundoff u (bf16 2^-8 -> 2^-7, fp16 2^-11 -> 2^-10); fp32: 1e-5 (fast-math intrinsics).
static inline double floatX_elem_rtol() {
#if defined(ENABLE_FP32)
    return 1e-5;
#elif defined(ENABLE_FP16)
    return 1.0 / 1024;
#else
    return 1.0 / 128;
#endif
}

// ---- timing --------------------------------------------------------------------------------------

// Median milliseconds of `repeats` runs of fn() (after `warmup` runs), timed with cudaEvents on stream.
template <typename F>
static inline float time_median_ms(F fn, int warmup = 3, int repeats = 20, cudaStream_t stream = 0) {
    for (int i = 0; i < warmup; i++) fn();
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    std::vector<float> ms(repeats);
    for (int i = 0; i < repeats; i++) {
        cudaCheck(cudaEventRecord(start, stream));
        fn();
        cudaCheck(cudaEventRecord(stop, stream));
        cudaCheck(cudaEventSynchronize(stop));
        cudaCheck(cudaEventElapsedTime(&ms[i], start, stop));
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[repeats / 2];
}

// Device-to-device copy rate on 1 GiB in GB/s, counting bytes read plus written: the memory roof a
// memory-bound kernel is compared against.
static inline float copy_bandwidth_gbs() {
    const size_t bytes = (size_t)1 << 30;
    DeviceBuffer<char> a(bytes), b(bytes);
    a.zero();
    const float ms = time_median_ms([&] { cudaCheck(cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice, 0)); });
    return (float)(2.0 * bytes / (ms * 1e-3) / 1e9);
}

// ------------------------------------------------------------------------------------------------
// Device-side counts for the harnesses (integer atomics: exact, order-independent)

template <typename T>
__global__ void count_nonfinite_kernel(const T* p, size_t n, unsigned long long* count) {
    unsigned long long local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        local += isfinite((float)p[i]) ? 0 : 1;
    if (local) atomicAdd(count, local);
}

__global__ void count_mismatch_kernel(const uint32_t* a, const uint32_t* b, size_t n, unsigned long long* count) {
    unsigned long long local = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        local += a[i] != b[i];
    if (local) atomicAdd(count, local);
}

// Runs launch(counter) with a zeroed device counter and returns its final value.
template <typename F>
static inline size_t device_count(F launch) {
    unsigned long long* d = nullptr;
    cudaCheck(cudaMalloc(&d, sizeof(*d)));
    cudaCheck(cudaMemset(d, 0, sizeof(*d)));
    launch(d);
    cudaCheckLaunch();
    unsigned long long h = 0;
    cudaCheck(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(d));
    return (size_t)h;
}

// Non-finite values among n device values of T.
template <typename T>
static inline size_t device_nonfinite(const T* p, size_t n) {
    return device_count([&](unsigned long long* c) { count_nonfinite_kernel<T><<<1024, 256>>>(p, n, c); });
}

// Differing 32-bit words between two device buffers of `bytes` bytes (bytes % 4 == 0).
static inline size_t device_mismatch(const void* a, const void* b, size_t bytes) {
    return device_count([&](unsigned long long* c) {
        count_mismatch_kernel<<<1024, 256>>>((const uint32_t*)a, (const uint32_t*)b, bytes / 4, c);
    });
}

// Whether the `guard` elements after the first n of a device buffer of T still hold poison()'s all-ones bytes (an
// output written past its end shows here).
template <typename T>
static inline bool device_guard_poisoned(const T* p, size_t n, size_t guard) {
    std::vector<unsigned char> g(guard * sizeof(T));
    cudaCheck(cudaMemcpy(g.data(), p + n, g.size(), cudaMemcpyDeviceToHost));
    for (unsigned char b : g)
        if (b != 0xFFu) return false;
    return true;
}

// Differing 16-bit elements of two device buffers of n elements (BF16 / FP16 outputs), compared on the device in 32-bit
// words (so for odd n the element after the last must exist in both: a guard), counted in words; with print, the first
// four differing elements as "[row, column]" of a row-major (*, cols) matrix.
static inline size_t device_mismatch16(const void* a, const void* b, size_t n, size_t cols, bool print) {
    const size_t words = device_mismatch(a, b, (n + (n & 1)) * 2);
    if (!words || !print) return words;
    std::vector<uint16_t> ha(n), hb(n);
    cudaCheck(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0, shown = 0; i < n && shown < 4; i++)
        if (ha[i] != hb[i]) {
            printf("      [%zu, %zu]: 0x%04x, reference 0x%04x\n", i / cols, i % cols, (unsigned)ha[i], (unsigned)hb[i]);
            shown++;
        }
    return words;
}

// `count` distinct sorted row indices in [0, total), always with 0 and total - 1 (all rows when
// total * cost_per_row <= budget or total <= count): which rows a float64 reference checks.
static inline std::vector<int> pick_rows(int total, double cost_per_row, uint64_t seed, int count = 64, double budget = 2e8) {
    std::vector<int> rows;
    if ((double)total * cost_per_row <= budget || total <= count) {
        for (int i = 0; i < total; i++) rows.push_back(i);
        return rows;
    }
    HostRng r(seed);
    std::vector<char> taken(total, 0);
    rows.push_back(0);
    rows.push_back(total - 1);
    taken[0] = taken[total - 1] = 1;
    while ((int)rows.size() < count) {
        const int i = (int)(r.u32() % (uint32_t)total);
        if (!taken[i]) { taken[i] = 1; rows.push_back(i); }
    }
    std::sort(rows.begin(), rows.end());
    return rows;
}

// Rows `rows` of a row-major (*, ld) device matrix of T, as floats (rows.size() x ld).
template <typename T>
static inline std::vector<float> download_rows(const T* d, size_t ld, const std::vector<int>& rows) {
    std::vector<T> tmp(rows.size() * ld);
    for (size_t i = 0; i < rows.size(); i++)
        cudaCheck(cudaMemcpy(&tmp[i * ld], d + (size_t)rows[i] * ld, ld * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> out(tmp.size());
    for (size_t i = 0; i < tmp.size(); i++) out[i] = (float)tmp[i];
    return out;
}

// A BF16 linear layer's output y (N, OC) = inp (N, C) · w (OC, C)ᵀ + bias (OC; empty: none), all row-major, the inputs
// as host copies of their floatX values, against float64 on rows picked by pick_rows(N, C * OC, seed): per element
// |y - ref| <= 2^-8 |ref| + 2^-16 S (S = Σ|inp · w| + |bias|: one floatX rounding plus fp32 accumulation), and the
// norm-relative error (result(tol)); where the reference is not finite (Inf / NaN bias columns) y must be that value
// exactly (special_bad counts the others). Prints up to 4 elements beyond the bound.
struct GemmRowsResult {
    CompareResult r;
    size_t rows, bad, special_bad;
};
static inline GemmRowsResult gemm_rows_vs_float64(const floatX* y, const std::vector<float>& inp, const std::vector<float>& w,
                                                  const std::vector<float>& bias, int N, int C, int OC, uint64_t seed, double tol) {
    const std::vector<int> rows = pick_rows(N, (double)C * OC, seed);
    const std::vector<float> got = download_rows(y, OC, rows);
    ErrAcc acc;
    GemmRowsResult res = {};
    res.rows = rows.size();
    for (size_t ri = 0; ri < rows.size(); ri++) {
        const int n = rows[ri];
        for (int o = 0; o < OC; o++) {
            const double b = bias.empty() ? 0.0 : (double)bias[o];
            double s = 0, sa = fabs(b);
            for (int k = 0; k < C; k++) {
                const double p = (double)inp[(size_t)n * C + k] * w[(size_t)o * C + k];
                s += p;
                sa += fabs(p);
            }
            const double ref = s + b;
            const float v = got[ri * OC + o];
            if (!isfinite(ref)) {
                if (isnan(ref) ? !isnan(v) : v != (float)ref) res.special_bad++;
                continue;
            }
            acc.add(v, ref);
            if (!(fabs((double)v - ref) <= ldexp(fabs(ref), -8) + ldexp(sa, -16))) {
                if (res.bad < 4) printf("      [%d, %d]: %.9g, float64 %.9g (S %.3g)\n", n, o, v, ref, sa);
                res.bad++;
            }
        }
    }
    res.r = acc.result(tol);
    res.r.ok = res.r.ok && res.bad == 0 && res.special_bad == 0;
    return res;
}
