// global_norm.cu - correctness and speed harness for llmc/kernels/global_norm.cuh (deterministic global L2
// norm of the gradients).
//
// Build and run (from the repository root):
//   nvcc -O3 --use_fast_math -std=c++17 -arch=sm_90 -I. dev/cuda/global_norm.cu -o /tmp/global_norm && /tmp/global_norm
//   (add -DENABLE_FP16 or -DENABLE_FP32 for the other precisions; bf16 is the default)
// Flags: --check-only   correctness checks only, no timing
//
// Cases: the flat d12 gradient buffer (124,475,904 values, one call), small and odd counts at
// misaligned addresses (scalar head and tail), several tensors accumulated into one partials array
// (reset on the first call only), a count of 0. Values: uniform in [-1, 1] times a per-case scale,
// with a few outliers, rounded to floatX; the partials are poisoned before reset calls. The norm is
// compared with a float64 CPU sum of squares (relative 1e-5). Determinism: every case runs twice,
// norm and all partials bit-identical. Non-finite: one NaN gives a NaN norm, one +-Inf an Inf norm,
// both at the start, in the middle and in the scalar tail. Exit status 1 if any check fails.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include "dev/cuda/harness.cuh"
#include "llmc/kernels/global_norm.cuh"

// The norm is computed in fp32 per thread (fmaf of squares, ~250 terms per thread for 124M values) and
// per block (tree), then in float64 over the partials: relative error ~1e-7 typical, well below 1e-5.
static const double kNormTol = 1e-5;

struct Segment { size_t offset, count; };  // a tensor inside the buffer, in elements

struct Result {
    const char* name;
    size_t count;
    double rel;
    bool det, pass;
    float ms = -1, ms_finish = -1;
};

// Norm of the segments, accumulated into one partials array in order (reset on the first).
static float gpu_norm(const DeviceBuffer<floatX>& values, const std::vector<Segment>& segs, DeviceBuffer<float>& partials,
                      DeviceBuffer<float>& norm) {
    partials.poison();
    norm.poison();
    for (size_t i = 0; i < segs.size(); i++)
        global_norm_squared(partials.ptr, values.ptr + segs[i].offset, segs[i].count, i == 0, 0);
    global_norm_finish(norm.ptr, partials.ptr, GLOBAL_NORM_PARTIALS, 0);
    cudaCheck(cudaDeviceSynchronize());
    float h;
    cudaCheck(cudaMemcpy(&h, norm.ptr, sizeof h, cudaMemcpyDeviceToHost));
    return h;
}

static Result run_case(const char* name, size_t total, const std::vector<Segment>& segs, float scale, uint64_t seed,
                       bool timing, Tally& tally) {
    size_t count = 0;
    for (const Segment& s : segs) count += s.count;
    printf("\n== %s: %zu values in %zu segment(s) ==\n", name, count, segs.size());
    const int failed_before = tally.failed;
    Result res{name, count, 0, false, false};

    std::vector<float> h = random_uniform(total, seed, -scale, scale);
    HostRng rng(seed + 1);
    for (int k = 0; k < 16 && total > 0; k++) h[rng.u32() % total] = 30.0f * scale * (k % 2 ? 1 : -1);  // outliers
    round_to_floatX(h);
    double ss = 0;
    for (const Segment& s : segs)
        for (size_t i = s.offset; i < s.offset + s.count; i++) ss += (double)h[i] * h[i];
    const double ref = sqrt(ss);

    DeviceBuffer<floatX> values(total);
    DeviceBuffer<float> partials(GLOBAL_NORM_PARTIALS), norm(1);
    upload(values, h);

    const float n1 = gpu_norm(values, segs, partials, norm);
    const std::vector<float> p1 = download(partials);
    const float n2 = gpu_norm(values, segs, partials, norm);
    const std::vector<float> p2 = download(partials);

    res.rel = ref > 0 ? fabs(n1 - ref) / ref : fabs(n1);
    printf("    norm %.9g, float64 reference %.9g, rel %.3e (tol %.0e)\n", n1, ref, res.rel, kNormTol);
    tally.check("norm vs float64", isfinite(n1) && res.rel <= kNormTol);
    res.det = memcmp(&n1, &n2, 4) == 0 && memcmp(p1.data(), p2.data(), GLOBAL_NORM_PARTIALS * 4) == 0;
    tally.check("deterministic (norm + all partials, 2 runs)", res.det);
    {   // the 3-argument finish, writing the norm over partials[0] (as the model does with its scratch)
        global_norm_finish(partials.ptr, partials.ptr, 0);
        float n3;
        cudaCheck(cudaMemcpy(&n3, partials.ptr, sizeof n3, cudaMemcpyDeviceToHost));
        tally.check("finish in place (norm_out == partials)", memcmp(&n1, &n3, 4) == 0);
    }

    if (timing) {
        res.ms = time_median_ms([&] {
            for (size_t i = 0; i < segs.size(); i++)
                global_norm_squared(partials.ptr, values.ptr + segs[i].offset, segs[i].count, i == 0, 0);
        });
        res.ms_finish = time_median_ms([&] { global_norm_finish(norm.ptr, partials.ptr, GLOBAL_NORM_PARTIALS, 0); });
        printf("  timing: squared %.4f ms (%.0f GB/s) | finish %.4f ms\n", res.ms, count * sizeof(floatX) / (res.ms * 1e-3) / 1e9,
               res.ms_finish);
    }
    res.pass = tally.failed == failed_before;
    return res;
}

// One non-finite value at position `where` of a buffer of n finite values -> the norm must be NaN / Inf.
static void check_nonfinite(Tally& tally) {
    printf("\n== non-finite values ==\n");
    const size_t n = 1000003, off = 1;  // misaligned start: scalar head and tail both exist
    std::vector<float> h = random_uniform(n + off, 77, -1.0f, 1.0f);
    round_to_floatX(h);
    DeviceBuffer<floatX> values(n + off);
    DeviceBuffer<float> partials(GLOBAL_NORM_PARTIALS), norm(1);
    const size_t where[] = {0, n / 2 + 5, n - 1};
    const char* where_name[] = {"first (head)", "middle", "last (tail)"};
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const char* bad_name[] = {"NaN", "+Inf", "-Inf"};
    for (int b = 0; b < 3; b++)
        for (int w = 0; w < 3; w++) {
            std::vector<float> x = h;
            x[off + where[w]] = bad[b];
            upload(values, x);
            const float r = gpu_norm(values, {{off, n}}, partials, norm);
            const bool ok = b == 0 ? isnan(r) : (isinf(r) && r > 0);
            char name[96];
            snprintf(name, sizeof name, "%s %s -> norm %s (got %g)", bad_name[b], where_name[w], b == 0 ? "NaN" : "+Inf", r);
            tally.check(name, ok);
        }
    // a NaN in one tensor and an Inf in another, accumulated: NaN
    std::vector<float> x = h;
    x[off + 10] = INFINITY;
    x[off + n - 3] = NAN;
    upload(values, x);
    const float r = gpu_norm(values, {{off, n / 2}, {off + n / 2, n - n / 2}}, partials, norm);
    tally.check("Inf in tensor 1 + NaN in tensor 2 -> NaN", isnan(r));
}

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("global_norm harness | device: %s (sm_%d%d, %d SMs) | floatX = %s | %d partials | timing %s\n", prop.name,
           prop.major, prop.minor, prop.multiProcessorCount, PRECISION_MODE_NAME, GLOBAL_NORM_PARTIALS, timing ? "on" : "off");

    Tally tally;
    std::vector<Result> results;
    results.push_back(run_case("one value", 8, {{3, 1}}, 1.0f, 1, false, tally));
    results.push_back(run_case("7 values, misaligned", 16, {{1, 7}}, 1.0f, 2, false, tally));
    results.push_back(run_case("1000 values, misaligned", 1010, {{5, 1000}}, 1e-3f, 3, false, tally));
    results.push_back(run_case("12345 values", 12345, {{0, 12345}}, 1.0f, 4, false, tally));
    results.push_back(run_case("empty (count 0)", 8, {{0, 0}}, 1.0f, 5, false, tally));
    // GPT-2 d12 layer-like tensors at odd offsets in one buffer: wte, a bias, qkvw + 5, ln
    const size_t C = 768;
    const std::vector<Segment> tensors = {{0, 50304 * C}, {50304 * C + 3, C}, {50304 * C + C + 8, 3 * C * C + 5},
                                          {50304 * C + C + 8 + 3 * C * C + 5, C}};
    const size_t tensors_total = 50304 * C + C + 8 + 3 * C * C + 5 + C;
    results.push_back(run_case("4 tensors accumulated", tensors_total, tensors, 1e-2f, 6, timing, tally));
    const size_t d12 = 124475904;
    results.push_back(run_case("GPT-2 d12 flat gradient buffer", d12, {{0, d12}}, 1e-3f, 7, timing, tally));
    check_nonfinite(tally);

    const float copy_gbs = timing ? copy_bandwidth_gbs() : 0.0f;
    printf("\n%-34s | %-10s | %-9s | %-4s | %-9s | %-7s | %-9s | %s\n", "case", "count", "rel", "det", "ms sq", "GB/s",
           "ms finish", "result");
    for (const Result& r : results) {
        char a[32] = "-", b[32] = "-", c[32] = "-";
        if (r.ms >= 0) {
            snprintf(a, sizeof a, "%.4f", r.ms);
            snprintf(b, sizeof b, "%.0f", r.count * sizeof(floatX) / (r.ms * 1e-3) / 1e9);
            snprintf(c, sizeof c, "%.4f", r.ms_finish);
        }
        printf("%-34s | %10zu | %.3e | %-4s | %9s | %7s | %9s | %s\n", r.name, r.count, r.rel, r.det ? "yes" : "NO", a, b, c,
               r.pass ? "PASS" : "FAIL");
    }
    if (timing) printf("(GB/s: values read once, over the median time; device copy reference cudaMemcpy D2D: %.0f GB/s "
                       "counted read + write)\n", copy_gbs);
    return tally.finish();
}
