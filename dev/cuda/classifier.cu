// classifier.cu - correctness and speed harness for llmc/kernels/fused_classifier.cuh (softmax cross-entropy
// with the logits gradient written in place).
//
// Build and run (from the repository root):
//   nvcc -O3 --use_fast_math -std=c++17 -arch=sm_90 -I. dev/cuda/classifier.cu -o /tmp/classifier && /tmp/classifier
//   (add -DENABLE_FP16 or -DENABLE_FP32 for the other precisions; bf16 is the default), or
//   make cuda-dev PRECISION=BF16 && build/bf16/dev/classifier   (path per make info)
// Flags: --check-only   correctness checks only, no timing
//
// Per case: fresh logits generated on the device (normal, std 2; every 7th row std 50 for a large
// dynamic range; some rows constant; some rows with one spike of +60, often at the target; padding
// columns filled with 1e4 or NaN, which the kernel must ignore), random targets (row 0 -> 0, row 1 ->
// V - 1, the column in the partial last packet), dloss = 1 / rows. The rows to check are downloaded
// before the kernel overwrites them and compared with a float64 CPU reference: losses per element and
// norm-relative, dlogits per element and norm-relative, padding exactly 0. The big case runs the
// kernel on all 65536 rows and checks a subsample of rows on the CPU. Determinism: the case runs twice
// from identical inputs; all losses and the whole dlogits buffer must be bit-identical.
// Under ENABLE_Q115 (SF16) the reference reads every logit through simulate_q115, as the kernel does.
// Exit status 1 if any check fails.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include "dev/cuda/harness.cuh"
#include "llmc/kernels/fused_classifier.cuh"
#include "llmc/numerics/q115.h"  // simulate_q115: the SF16 reference boundary

// ------------------------------------------------------------------------------------------------
// Tolerances (per element: |gpu - ref| <= rtol |ref| + atol)
//
// losses: fp32 in every build, computed from the exact floatX inputs: the error is the fp32 sum of
//   ~50k exponentials (ex2.approx, ~2^-22 relative each) and the rounding of x*log2(e) - M*log2(e);
//   bound 2e-6 + 2^-20 (|M| + |x_target|) absolute (M the row max), norm-relative 1e-5.
// dlogits: computed in fp32 (relative error ~ 1e-6 for the probabilities that matter: see the header),
//   then rounded once to floatX (relative error <= unit roundoff u: bf16 2^-8, fp16 2^-11): rtol = 2u
//   (bf16 2^-7, fp16 2^-10; fp32 1e-5),
//   atol = 1e-6 dloss (p - 1 near p = 1, ex2 absolute error) + half the smallest floatX subnormal
//   (fp16 flushes p * dloss ~ 1e-10 to 0). Norm-relative: floatX_tolerance() from harness.cuh.
static double floatX_half_min_subnormal() {
#if defined(ENABLE_FP32)
    return ldexp(1.0, -127);  // fp32 results flush to zero below 2^-126 (ftz)
#elif defined(ENABLE_FP16)
    return ldexp(1.0, -25);
#else
    return ldexp(1.0, -134);
#endif
}

// ------------------------------------------------------------------------------------------------
// Device helpers of the harness

__device__ __forceinline__ float harness_uniform(unsigned long long seed, unsigned long long i) {
    return (random_u32(seed, i) + 0.5f) * 2.3283064365386963e-10f;  // (0, 1)
}

// Row kinds: the CPU side derives targets from the same rules.
static inline __host__ __device__ int spike_column(int row, int V) { return (int)(((long long)row * 7919 + 13) % V); }
static inline __host__ __device__ bool is_wide_row(int row) { return row % 7 == 3; }        // std 50
static inline __host__ __device__ bool is_constant_row(int row) { return row % 97 == 5; }   // all 3.0
static inline __host__ __device__ bool is_spike_row(int row) { return row % 97 == 11 || row % 97 == 12; }

__global__ void fill_logits_kernel(floatX* logits, int rows, int V, int Vp, unsigned long long seed) {
    const size_t total = (size_t)rows * Vp, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += stride) {
        const int row = (int)(idx / Vp), col = (int)(idx % Vp);
        float value;
        if (col >= V) {
            value = (row & 1) ? NAN : 1.0e4f;  // padding: must not influence anything
        } else if (is_constant_row(row)) {
            value = 3.0f;
        } else {
            const float u1 = harness_uniform(seed, 2 * idx), u2 = harness_uniform(seed, 2 * idx + 1);
            const float z = sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
            if (is_spike_row(row)) value = col == spike_column(row, V) ? 60.0f : 0.01f * z;
            else value = (is_wide_row(row) ? 50.0f : 2.0f) * z;
        }
        logits[idx] = (floatX)value;
    }
}


static void fill_logits(DeviceBuffer<floatX>& logits, int rows, int V, int Vp, unsigned long long seed) {
    fill_logits_kernel<<<4096, 256>>>(logits.ptr, rows, V, Vp, seed);
    cudaCheckLaunch();
    cudaCheck(cudaDeviceSynchronize());
}

// ------------------------------------------------------------------------------------------------
// CPU float64 reference for one row

// Host mirror of the kernel's read boundary (classifier_logit): the identity in the plain builds, simulate_q115
// (llmc/numerics/q115.h) in SF16, where the stored logits cross the Q1.15 boundary before the softmax.
static float ref_logit(float x) {
    if constexpr (boundary_is_identity<LOGITS>()) return x;
    else return simulate_q115(x);
}

struct RowRef {
    double loss;           // NaN for an out-of-range target
    std::vector<double> d; // Vp dlogits
    double max_logit, x_target;
};

static RowRef reference_row(const float* x, int target, int V, int Vp, double dloss) {
    RowRef r;
    double M = -INFINITY;
    for (int i = 0; i < V; i++) M = std::max(M, (double)x[i]);
    double S = 0.0;
    for (int i = 0; i < V; i++) S += exp((double)x[i] - M);
    const bool ok = target >= 0 && target < V;
    r.max_logit = M;
    r.x_target = ok ? x[target] : 0.0;
    r.loss = ok ? log(S) + M - (double)x[target] : NAN;
    r.d.assign(Vp, 0.0);
    for (int i = 0; i < V; i++) r.d[i] = (exp((double)x[i] - M) / S - (i == target ? 1.0 : 0.0)) * dloss;
    return r;
}

// Compare the losses of the checked rows with the reference; rows with an out-of-range target must be NaN.
// Returns the norm-relative error over the valid rows.
static double check_losses(const char* name, const std::vector<float>& l, const std::vector<RowRef>& refs,
                           const std::vector<int>& check_rows, Tally& tally) {
    size_t bad = 0, nan_ok = 0, nan_expected = 0;
    double d2 = 0, r2 = 0, maxabs = 0;
    for (size_t k = 0; k < check_rows.size(); k++) {
        const double ref = refs[k].loss, got = l[check_rows[k]];
        if (isnan(ref)) { nan_expected++; nan_ok += isnan(got); continue; }
        const double err = fabs(got - ref);  // NaN fails the bound below
        if (!(err <= 2e-6 + ldexp(1.0, -20) * (fabs(refs[k].max_logit) + fabs(refs[k].x_target)))) bad++;
        if (isfinite(err)) { d2 += err * err; maxabs = std::max(maxabs, err); }
        r2 += ref * ref;
    }
    const double rel = sqrt(d2 / r2);
    printf("    %s: %zu rows, rel %.3e, maxabs %.3e, outside bound %zu (tol rel 1e-5, elem 2e-6 + 2^-20 (|max| + |x_t|))\n",
           name, check_rows.size() - nan_expected, rel, maxabs, bad);
    tally.check(name, bad == 0 && rel <= 1e-5);
    if (nan_expected) tally.check("  out-of-range targets: NaN loss", nan_ok == nan_expected);
    return rel;
}

// ------------------------------------------------------------------------------------------------

struct Case {
    const char* name;
    int B, T, V, Vp;
    int sample_every;  // check every k-th row on the CPU (1 = all rows)
    bool bad_targets;  // rows 2 and 3 get targets -1 and V
};

struct Result {
    const Case* c;
    double loss_rel, dl_rel;
    bool det, pass;
    float ms_fwd_bwd = -1, ms_fwd = -1;
};

static Result run_case(const Case& c, uint64_t seed, bool timing, Tally& tally) {
    const int rows = c.B * c.T, V = c.V, Vp = c.Vp;
    const size_t total = (size_t)rows * Vp;
#if defined(ENABLE_FP16)
    // the FP16 trainer multiplies dloss by its loss scale (65536 at start, llmc/model/model.cuh): without it
    // p * dloss ~ 1e-10 is below fp16's subnormals, which is what loss scaling exists to prevent
    const double dloss = 65536.0 / rows;
#else
    const double dloss = 1.0 / rows;
#endif
    printf("\n== %s: rows %d (B %d, T %d), V %d, Vp %d, dloss %.3e ==\n", c.name, rows, c.B, c.T, V, Vp, dloss);
    Result res{&c, 0, 0, false, false};
    const int failed_before = tally.failed;

    // targets
    HostRng rng(seed);
    std::vector<int> targets(rows);
    for (int r = 0; r < rows; r++) {
        targets[r] = (int)(rng.u32() % (uint32_t)V);
        if (is_spike_row(r) && (r % 2 == 0)) targets[r] = spike_column(r, V);
    }
    targets[0] = 0;
    if (rows > 1) targets[1] = V - 1;
    if (c.bad_targets && rows > 3) { targets[2] = -1; targets[3] = V; }

    // rows checked on the CPU: every sample_every-th plus the special rows near the start and the last row
    std::vector<int> check_rows;
    for (int r = 0; r < rows; r++)
        if (r % c.sample_every == 0 || r < 16 || r == rows - 1 || (r % 97 >= 5 && r % 97 <= 12 && r < 2000))
            check_rows.push_back(r);

    DeviceBuffer<floatX> logits(total);
    DeviceBuffer<float> losses(rows);
    DeviceBuffer<int> d_targets(rows);
    cudaCheck(cudaMemcpy(d_targets.ptr, targets.data(), rows * sizeof(int), cudaMemcpyHostToDevice));

    // inputs of the checked rows, as the GPU sees them
    fill_logits(logits, rows, V, Vp, seed);
    std::vector<floatX> in_rows_x((size_t)check_rows.size() * Vp);
    for (size_t k = 0; k < check_rows.size(); k++)
        cudaCheck(cudaMemcpy(in_rows_x.data() + k * Vp, logits.ptr + (size_t)check_rows[k] * Vp, Vp * sizeof(floatX),
                             cudaMemcpyDeviceToHost));
    std::vector<RowRef> refs(check_rows.size());
    {
        std::vector<float> xrow(Vp);
        for (size_t k = 0; k < check_rows.size(); k++) {
            for (int i = 0; i < Vp; i++) xrow[i] = ref_logit((float)in_rows_x[k * Vp + i]);
            refs[k] = reference_row(xrow.data(), targets[check_rows[k]], V, Vp, dloss);
        }
    }

    // ---- forward only (write_dlogits = false): losses, logits untouched
    {
        DeviceBuffer<floatX> copy(total);
        cudaCheck(cudaMemcpy(copy.ptr, logits.ptr, total * sizeof(floatX), cudaMemcpyDeviceToDevice));
        losses.poison();
        fused_classifier(logits.ptr, losses.ptr, (float)dloss, d_targets.ptr, c.B, c.T, V, Vp, false, 0);
        cudaCheck(cudaDeviceSynchronize());
        check_losses("losses (write_dlogits = false)", download(losses), refs, check_rows, tally);
        tally.check("logits unchanged (write_dlogits = false)", device_mismatch(copy.ptr, logits.ptr, total * sizeof(floatX)) == 0);
    }

    // ---- forward + backward, run 1
    losses.poison();
    fused_classifier(logits.ptr, losses.ptr, (float)dloss, d_targets.ptr, c.B, c.T, V, Vp, true, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> l1 = download(losses);
    {
        res.loss_rel = check_losses("losses", l1, refs, check_rows, tally);

        // dlogits of the checked rows
        std::vector<floatX> out_x(Vp);
        const double rtol = floatX_elem_rtol(), atol = 1e-6 * dloss + floatX_half_min_subnormal();
        size_t outside = 0, pad_nonzero = 0, nonfinite = 0;
        double e2 = 0, q2 = 0, emax = 0;
        int worst_row = -1, worst_col = -1;
        double worst_excess = 0;
        for (size_t k = 0; k < check_rows.size(); k++) {
            cudaCheck(cudaMemcpy(out_x.data(), logits.ptr + (size_t)check_rows[k] * Vp, Vp * sizeof(floatX),
                                 cudaMemcpyDeviceToHost));
            for (int i = 0; i < Vp; i++) {
                const double got = (double)(float)out_x[i], ref = refs[k].d[i];
                if (i >= V) { pad_nonzero += got != 0.0 || signbit(got); continue; }
                if (!isfinite(got)) { nonfinite++; continue; }
                const double err = fabs(got - ref), bound = rtol * fabs(ref) + atol;
                if (err > bound) {
                    outside++;
                    if (err - bound > worst_excess) { worst_excess = err - bound; worst_row = check_rows[k]; worst_col = i; }
                }
                e2 += err * err; q2 += ref * ref; emax = std::max(emax, err);
            }
        }
        const double rel = sqrt(e2 / q2);
        res.dl_rel = rel;
        const bool ok = outside == 0 && nonfinite == 0 && rel <= floatX_tolerance();
        printf("    dlogits: rel %.3e, maxabs %.3e, outside bound %zu, non-finite %zu (tol rel %.1e, elem %.1e |ref| + %.1e)\n",
               rel, emax, outside, nonfinite, floatX_tolerance(), rtol, atol);
        if (worst_row >= 0) printf("    worst element: row %d col %d\n", worst_row, worst_col);
        tally.check("dlogits", ok);
        tally.check("dlogits padding exactly +0", pad_nonzero == 0);
    }

    // ---- determinism: same inputs again, everything bit-identical
    DeviceBuffer<floatX> first(total);
    cudaCheck(cudaMemcpy(first.ptr, logits.ptr, total * sizeof(floatX), cudaMemcpyDeviceToDevice));
    {
        fill_logits(logits, rows, V, Vp, seed);
        losses.poison();
        fused_classifier(logits.ptr, losses.ptr, (float)dloss, d_targets.ptr, c.B, c.T, V, Vp, true, 0);
        cudaCheck(cudaDeviceSynchronize());
        const std::vector<float> l2 = download(losses);
        const bool same_l = memcmp(l1.data(), l2.data(), rows * sizeof(float)) == 0;
        const unsigned long long mism = device_mismatch(first.ptr, logits.ptr, total * sizeof(floatX));
        res.det = same_l && mism == 0;
        printf("    determinism: losses %s, dlogits %llu differing words\n", same_l ? "identical" : "DIFFER", mism);
        tally.check("deterministic (losses + all dlogits)", res.det);
    }
    // ---- the global-memory path (used when a row does not fit in shared memory) gives the same bits
    {
        fill_logits(logits, rows, V, Vp, seed);
        losses.poison();
        fused_classifier_kernel<false><<<rows, CLASSIFIER_THREADS, 0>>>(logits.ptr, losses.ptr, (float)dloss, d_targets.ptr, V, Vp, true,
                                                                        ClassifierNoRowCast{});
        cudaCheckLaunch();
        cudaCheck(cudaDeviceSynchronize());
        const std::vector<float> l3 = download(losses);
        const bool same_l = memcmp(l1.data(), l3.data(), rows * sizeof(float)) == 0;
        const unsigned long long mism = device_mismatch(first.ptr, logits.ptr, total * sizeof(floatX));
        printf("    unstaged kernel: losses %s, dlogits %llu differing words\n", same_l ? "identical" : "DIFFER", mism);
        tally.check("unstaged (global-memory) path identical", same_l && mism == 0);
    }

    if (timing) {
        const double bytes_rw = 2.0 * total * sizeof(floatX) + rows * 8.0, bytes_r = 1.0 * total * sizeof(floatX) + rows * 8.0;
        res.ms_fwd_bwd = time_median_ms([&] { fused_classifier(logits.ptr, losses.ptr, (float)dloss, d_targets.ptr, c.B, c.T, V, Vp, true, 0); });
        res.ms_fwd = time_median_ms([&] { fused_classifier(logits.ptr, losses.ptr, (float)dloss, d_targets.ptr, c.B, c.T, V, Vp, false, 0); });
        const float ms_unstaged = time_median_ms([&] {
            fused_classifier_kernel<false><<<rows, CLASSIFIER_THREADS, 0>>>(logits.ptr, losses.ptr, (float)dloss, d_targets.ptr, V, Vp, true,
                                                                        ClassifierNoRowCast{});
            cudaCheckLaunch();
        });
        printf("    timing: loss+dlogits %.4f ms (%.0f GB/s, %.2f GB moved) | loss only %.4f ms (%.0f GB/s)\n", res.ms_fwd_bwd,
               bytes_rw / (res.ms_fwd_bwd * 1e-3) / 1e9, bytes_rw / 1e9, res.ms_fwd, bytes_r / (res.ms_fwd * 1e-3) / 1e9);
        printf("          loss+dlogits without shared-memory staging (row read twice): %.4f ms (%.0f GB/s effective)\n",
               ms_unstaged, bytes_rw / (ms_unstaged * 1e-3) / 1e9);
    }
    res.pass = tally.failed == failed_before;
    return res;
}

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("classifier harness | device: %s (sm_%d%d, %d SMs) | floatX = %s | timing %s\n", prop.name, prop.major,
           prop.minor, prop.multiProcessorCount, PRECISION_MODE_NAME, timing ? "median of 20 after 3 warm-up" : "off");

    const Case cases[] = {
        {"GPT-2 eval shape", 4, 64, 50257, 50304, 1, false},
        {"small V, bad targets", 10, 100, 300, 384, 1, true},
        {"V multiple of 8, no padding", 3, 37, 1024, 1024, 1, false},
        {"V < 8 (one partial packet)", 1, 29, 5, 8, 1, false},
        {"odd V, odd rows", 1, 333, 1001, 1008, 1, false},
        {"GPT-2 d12 training (B 64, T 1024)", 64, 1024, 50257, 50304, 1021, false},
    };
    Tally tally;
    std::vector<Result> results;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) results.push_back(run_case(cases[i], 1234 + 77 * i, timing, tally));

    float copy_gbs = timing ? copy_bandwidth_gbs() : 0.0f;
    printf("\n%-36s | %6s | %6s | %-9s | %-9s | %-4s | %-9s | %-7s | %-9s | %-7s | %s\n", "case", "V", "Vp", "loss rel",
           "dlog rel", "det", "ms l+d", "GB/s", "ms loss", "GB/s", "result");
    for (const Result& r : results) {
        const int rows = r.c->B * r.c->T;
        const double total = (double)rows * r.c->Vp * sizeof(floatX);
        char a[32] = "-", b[32] = "-", cc[32] = "-", d[32] = "-";
        if (r.ms_fwd_bwd >= 0) {
            snprintf(a, sizeof a, "%.4f", r.ms_fwd_bwd);
            snprintf(b, sizeof b, "%.0f", (2 * total + rows * 8.0) / (r.ms_fwd_bwd * 1e-3) / 1e9);
            snprintf(cc, sizeof cc, "%.4f", r.ms_fwd);
            snprintf(d, sizeof d, "%.0f", (total + rows * 8.0) / (r.ms_fwd * 1e-3) / 1e9);
        }
        printf("%-36s | %6d | %6d | %.3e | %.3e | %-4s | %9s | %7s | %9s | %7s | %s\n", r.c->name, r.c->V, r.c->Vp, r.loss_rel,
               r.dl_rel, r.det ? "yes" : "NO", a, b, cc, d, r.pass ? "PASS" : "FAIL");
    }
    if (timing) printf("(GB/s: logits read + dlogits written + targets/losses, over the median time; device copy "
                       "reference cudaMemcpy D2D: %.0f GB/s counted read + write)\n", copy_gbs);
    return tally.finish();
}
