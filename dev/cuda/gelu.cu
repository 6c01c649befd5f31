// gelu.cu - correctness and speed harness for llmc/kernels/gelu.cuh (tanh-approximation GELU, forward and
// in-place backward).
//
// Build and run (from the repository root):
//   nvcc -O3 --use_fast_math -std=c++17 -arch=sm_90 -I. dev/cuda/gelu.cu -o /tmp/gelu && /tmp/gelu
//   (add -DENABLE_FP16 or -DENABLE_FP32 for the other precisions; bf16 is the default)
// Flags: --check-only   correctness checks only, no timing
//
// Per shape: fresh inputs uniform in [-6, 6] (plus, in the first shape, a few values far outside:
// +-10, +-30, +-1000, 0) and upstream gradients uniform in [-1, 1], rounded to floatX; the output is
// poisoned (NaN bytes) before the kernel; forward and backward are compared element by element with
// the float64 evaluation of the train_gpt2.c formulas (tanh form) on the same rounded inputs; running
// each kernel twice must give bit-identical results. Exit status 1 if any check fails.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include "dev/cuda/harness.cuh"
#include "llmc/kernels/gelu.cuh"

// Tolerance per element: |gpu - ref| <= rtol |ref| + atol.
// The kernels compute in fp32 (exp2.approx and a fast division: relative error ~1e-6 away from the
// zeros of the functions, absolute error ~1e-7 near them) and round once to floatX (round to nearest:
// relative error at most the unit roundoff u, bf16 2^-8 (8 significant bits), fp16 2^-11). rtol = 2u
// (bf16 2^-7, fp16 2^-10); fp32: 1e-5. atol = 1e-6 covers the fp32 absolute error near zeros of gelu' and fp16's underflow
// (results below 6e-8 round to 0 or the nearest subnormal).
// The norm-relative error must be below floatX_tolerance() (harness.cuh).
static const double elem_atol = 1e-6;

static double gelu_ref(double x) {
    const double k = 0.7978845608028654 /* sqrt(2 / pi) */;
    return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
}
static double gelu_grad_ref(double x) {
    const double k = 0.7978845608028654 /* sqrt(2 / pi) */;
    const double th = tanh(k * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

struct Check {
    double rel = 0, maxabs = 0;
    size_t outside = 0, nonfinite = 0, worst = 0;
    double worst_excess = 0;
    double d2 = 0, r2 = 0;
    void add(size_t i, double got, double ref) {
        if (!isfinite(got)) { nonfinite++; return; }
        const double err = fabs(got - ref), bound = floatX_elem_rtol() * fabs(ref) + elem_atol;
        if (err > bound) {
            outside++;
            if (err - bound > worst_excess) { worst_excess = err - bound; worst = i; }
        }
        d2 += err * err;
        r2 += ref * ref;
        maxabs = std::max(maxabs, err);
    }
    bool finish(const char* name, Tally& tally) {
        rel = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
        const bool ok = outside == 0 && nonfinite == 0 && rel <= floatX_tolerance();
        printf("    %s: rel %.3e, maxabs %.3e, outside bound %zu, non-finite %zu (tol rel %.0e, elem %.1e |ref| + %.0e)\n",
               name, rel, maxabs, outside, nonfinite, floatX_tolerance(), floatX_elem_rtol(), elem_atol);
        if (outside) printf("    worst element %zu\n", worst);
        tally.check(name, ok);
        return ok;
    }
};

struct Result {
    size_t N;
    double fwd_rel, bwd_rel;
    bool det, pass;
    float fwd_ms = -1, bwd_ms = -1;
};

static Result run_shape(size_t N, uint64_t seed, bool extremes, bool timing, Tally& tally) {
    printf("\n== N = %zu ==\n", N);
    const int failed_before = tally.failed;
    Result res{N, 0, 0, false, false};
    std::vector<float> x = random_uniform(N, seed, -6.0f, 6.0f), dy = random_uniform(N, seed + 1, -1.0f, 1.0f);
    if (extremes && N >= 16) {
        const float special[] = {0.0f, -0.0f, 10.0f, -10.0f, 30.0f, -30.0f, 1000.0f, -1000.0f, -0.7518f, 1e-3f, -1e-3f, 6.0f, -6.0f};
        for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++) x[i] = special[i];
    }
    round_to_floatX(x);
    round_to_floatX(dy);

    DeviceBuffer<floatX> d_x(N), d_y(N), d_d(N);
    upload(d_x, x);

    // forward
    d_y.poison();
    gelu_forward(d_y.ptr, d_x.ptr, N, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> y = download(d_y);
    {
        Check c;
        for (size_t i = 0; i < N; i++) c.add(i, y[i], gelu_ref(x[i]));
        c.finish("forward", tally);
        res.fwd_rel = c.rel;
    }
    // backward (in place)
    upload(d_d, dy);
    gelu_backward_inplace(d_d.ptr, d_x.ptr, N, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> dx = download(d_d);
    {
        Check c;
        for (size_t i = 0; i < N; i++) c.add(i, dx[i], gelu_grad_ref(x[i]) * (double)dy[i]);
        c.finish("backward (in place)", tally);
        res.bwd_rel = c.rel;
    }
    // forward in place (out == inp) gives the same values
    {
        DeviceBuffer<floatX> d_io(N);
        cudaCheck(cudaMemcpy(d_io.ptr, d_x.ptr, N * sizeof(floatX), cudaMemcpyDeviceToDevice));
        gelu_forward(d_io.ptr, d_io.ptr, N, 0);
        cudaCheck(cudaDeviceSynchronize());
        const std::vector<float> y_io = download(d_io);
        tally.check("forward in place (out == inp) identical", memcmp(y.data(), y_io.data(), N * sizeof(float)) == 0);
    }
    // determinism
    {
        d_y.poison();
        gelu_forward(d_y.ptr, d_x.ptr, N, 0);
        upload(d_d, dy);
        gelu_backward_inplace(d_d.ptr, d_x.ptr, N, 0);
        cudaCheck(cudaDeviceSynchronize());
        const std::vector<float> y2 = download(d_y), dx2 = download(d_d);
        res.det = memcmp(y.data(), y2.data(), N * sizeof(float)) == 0 && memcmp(dx.data(), dx2.data(), N * sizeof(float)) == 0;
        tally.check("deterministic (forward + backward, 2 runs)", res.det);
    }
    if (timing) {
        res.fwd_ms = time_median_ms([&] { gelu_forward(d_y.ptr, d_x.ptr, N, 0); });
        res.bwd_ms = time_median_ms([&] { gelu_backward_inplace(d_d.ptr, d_x.ptr, N, 0); });
        const double fb = 2.0 * N * sizeof(floatX), bb = 3.0 * N * sizeof(floatX);
        printf("  timing: forward %.4f ms (%.0f GB/s) | backward %.4f ms (%.0f GB/s)\n", res.fwd_ms,
               fb / (res.fwd_ms * 1e-3) / 1e9, res.bwd_ms, bb / (res.bwd_ms * 1e-3) / 1e9);
    }
    res.pass = tally.failed == failed_before;
    return res;
}

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("gelu harness | device: %s (sm_%d%d, %d SMs) | floatX = %s | timing %s\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, PRECISION_MODE_NAME, timing ? "median of 20 after 3 warm-up" : "off");

    // 65536 * 3072: GPT-2 d12 MLP activation (B*T = 65536, 4C = 3072); 8 * 100003: not a multiple of the
    // block's packets; 8: a single packet; 1024 * 4 * 1600: d48 (C = 1600) for one sequence of 1024.
    const size_t shapes[] = {(size_t)8 * 100003, 8, (size_t)1024 * 4 * 1600, (size_t)65536 * 3072};
    Tally tally;
    std::vector<Result> results;
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) results.push_back(run_shape(shapes[i], 42 + 1000 * i, i == 0, timing, tally));

    const float copy_gbs = timing ? copy_bandwidth_gbs() : 0.0f;
    printf("\n%-12s | %-9s | %-9s | %-4s | %-9s | %-7s | %-9s | %-7s | %s\n", "N", "fwd rel", "bwd rel", "det", "fwd ms",
           "GB/s", "bwd ms", "GB/s", "result");
    for (const Result& r : results) {
        char a[32] = "-", b[32] = "-", c[32] = "-", d[32] = "-";
        if (r.fwd_ms >= 0) {
            snprintf(a, sizeof a, "%.4f", r.fwd_ms);
            snprintf(b, sizeof b, "%.0f", 2.0 * r.N * sizeof(floatX) / (r.fwd_ms * 1e-3) / 1e9);
            snprintf(c, sizeof c, "%.4f", r.bwd_ms);
            snprintf(d, sizeof d, "%.0f", 3.0 * r.N * sizeof(floatX) / (r.bwd_ms * 1e-3) / 1e9);
        }
        printf("%-12zu | %.3e | %.3e | %-4s | %9s | %7s | %9s | %7s | %s\n", r.N, r.fwd_rel, r.bwd_rel, r.det ? "yes" : "NO",
               a, b, c, d, r.pass ? "PASS" : "FAIL");
    }
    if (timing) printf("(GB/s: forward 2N, backward 3N floatX moved, over the median time; device copy reference "
                       "cudaMemcpy D2D: %.0f GB/s counted read + write)\n", copy_gbs);
    return tally.finish();
}
