// adamw.cu - correctness and speed harness for llmc/kernels/adamw.cuh (AdamW with an fp32 master copy and
// stochastic rounding of the floatX parameters).
//
// Build and run (from the repository root):
//   nvcc -O3 --use_fast_math -std=c++17 -arch=sm_90 -I. dev/cuda/adamw.cu -o /tmp/adamw && /tmp/adamw
//   (add -DENABLE_FP16 or -DENABLE_FP32 for the other precisions; bf16 is the default)
// Flags: --check-only   correctness checks only, no timing
//
// Checking cases (about 1M parameters each): fresh random master weights (normal, std 0.02), gradients
// (normal, std 0.05, rounded to floatX), moments (zero at step 1, random otherwise), several
// hyper-parameter sets (weight decay on/off, grad_scale for clipping / loss-scale removal, step 1 and
// later), an odd n (vector tail) and misaligned pointers (scalar path). With a master copy the floatX
// parameters are poisoned (NaN) before the update: the kernel must not read them. Compared with a
// float64 CPU reference of the same formulas on the same inputs: master (or fp32 params), m and v per
// element and norm-relative (1e-6); the floatX parameters must be the master rounded as store_rounded
// promises (bf16: one of the two bf16 neighbours of the master, i.e. within one bf16 ulp; fp16: round to
// nearest). Stochastic rounding: 1M copies of 1 + 2^-10 (lr = 0 keeps the master fixed) must round to
// a mean within 3 sigma of 1 + 2^-10. Determinism: the update runs twice from identical state, all
// outputs bit-identical; a different seed must change the rounding.
// Timing: 124,475,904 parameters (GPT-2 d12), buffers initialized on the device.
// Exit status 1 if any check fails.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include "dev/cuda/harness.cuh"
#include "llmc/kernels/adamw.cuh"

#if defined(ENABLE_FP32)
static const bool kHasMaster = false;  // the FP32 build updates params directly (master_params = NULL)
#else
static const bool kHasMaster = true;
#endif

struct Hyper {
    float lr, beta1, beta2, eps, wd, grad_scale;
    int step;
    unsigned long long seed;
};

struct Case {
    const char* name;
    size_t n;
    size_t misalign;  // elements added to every pointer (0: aligned, vector path)
    Hyper h;
    bool zero_moments;
};

// Per-element bounds (fp32 kernel vs float64 reference):
//   m, v:    1e-6 (|beta m| + |(1 - beta) g^(1 or 2)|) (a few fp32 roundings of the two terms)
//   master:  1e-6 (|p_new| + |p_old|) + 4e-6 lr |update| + lr (m's bound / bc1) / (sqrt(vhat) + eps)
//            (fp32 rounding of p, also under cancellation p_old - lr*update ~ 0; m's error propagated;
//            ~1e-6 relative error of the update
//            term through sqrt / fast division, which enters multiplied by lr).
struct Err {
    double d2 = 0, r2 = 0, maxabs = 0;
    size_t outside = 0, nonfinite = 0;
    double worst_ratio = 0, worst_got = 0, worst_ref = 0, worst_bound = 0;  // the element closest to (or past) its bound
    size_t worst_i = 0, count = 0;
    void add(double got, double ref, double bound) {
        count++;
        if (!isfinite(got)) { nonfinite++; return; }
        const double e = fabs(got - ref);
        if (e > bound) outside++;
        if (e / bound > worst_ratio) {
            worst_ratio = e / bound; worst_got = got; worst_ref = ref; worst_bound = bound; worst_i = count - 1;
        }
        d2 += e * e;
        r2 += ref * ref;
        maxabs = std::max(maxabs, e);
    }
    double rel() const { return r2 > 0 ? sqrt(d2 / r2) : sqrt(d2); }
    bool report(const char* name, Tally& tally) const {
        printf("    %s: rel %.3e, maxabs %.3e, outside bound %zu, non-finite %zu (tol rel 1e-6)\n", name, rel(), maxabs,
               outside, nonfinite);
        if (outside)
            printf("    worst element %zu: got %.9e ref %.9e |diff| %.3e bound %.3e (%.1fx)\n", worst_i, worst_got,
                   worst_ref, fabs(worst_got - worst_ref), worst_bound, worst_ratio);
        return tally.check(name, outside == 0 && nonfinite == 0 && rel() <= 1e-6);
    }
};

// Is the floatX parameter p what store_rounded may produce from the fp32 master value x?
static bool rounding_ok(floatX p, float x) {
#if defined(ENABLE_BF16)
    uint16_t pb;
    uint32_t xb;
    memcpy(&pb, &p, 2);
    memcpy(&xb, &x, 4);
    const uint32_t t = xb >> 16;  // truncated toward zero; the other candidate is one ulp away from zero
    return pb == t || pb == t + 1;
#elif defined(ENABLE_FP16)
    const floatX rn = (floatX)x;
    return memcmp(&rn, &p, sizeof(floatX)) == 0;
#else
    return memcmp(&p, &x, sizeof(float)) == 0;
#endif
}

struct State {  // device state of one case
    DeviceBuffer<floatX> params, grads;
    DeviceBuffer<float> master, m, v;
    explicit State(size_t n) : params(n), grads(n), master(n), m(n), v(n) {}
};

static void run_update(State& s, size_t n, size_t off, const Hyper& h, unsigned long long seed) {
    adamw_update(s.params.ptr + off, kHasMaster ? s.master.ptr + off : NULL, s.grads.ptr + off, s.m.ptr + off,
                 s.v.ptr + off, n, h.lr, h.beta1, h.beta2, h.step, h.eps, h.wd, h.grad_scale, seed, 0);
}

struct Result {
    const Case* c;
    double master_rel;
    bool det, pass;
};

static Result run_case(const Case& c, uint64_t seed, Tally& tally) {
    const size_t n = c.n, off = c.misalign, tot = n + off;
    const Hyper& h = c.h;
    printf("\n== %s: n %zu, pointer offset %zu elements, lr %g, beta1 %g, beta2 %g, eps %g, wd %g, grad_scale %g, step %d ==\n",
           c.name, n, off, h.lr, h.beta1, h.beta2, h.eps, h.wd, h.grad_scale, h.step);
    const int failed_before = tally.failed;
    Result res{&c, 0, false, false};

    std::vector<float> p0 = random_normal(tot, seed, 0.02f), g = random_normal(tot, seed + 1, 0.05f);
    std::vector<float> m0(tot, 0.0f), v0(tot, 0.0f);
    if (!c.zero_moments) {
        m0 = random_normal(tot, seed + 2, 0.01f);
        v0 = random_uniform(tot, seed + 3, 1e-6f, 1e-3f);
    }
    round_to_floatX(g);
    if (!kHasMaster) round_to_floatX(p0);  // fp32 build: params are the state

    State s(tot);
    if (kHasMaster) { upload(s.master, p0); s.params.poison(); } else { upload(s.params, p0); }
    upload(s.grads, g);
    upload(s.m, m0);
    upload(s.v, v0);
    run_update(s, n, off, h, h.seed);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> p1 = kHasMaster ? download(s.master) : download(s.params);
    const std::vector<float> m1 = download(s.m), v1 = download(s.v);
    std::vector<floatX> px(tot);
    cudaCheck(cudaMemcpy(px.data(), s.params.ptr, tot * sizeof(floatX), cudaMemcpyDeviceToHost));

    // float64 reference with the same fp32 hyper-parameters
    const double b1 = h.beta1, b2 = h.beta2, bc1 = 1.0 - pow(b1, h.step), bc2 = 1.0 - pow(b2, h.step);
    Err em, ev, ep;
    size_t round_bad = 0;
    for (size_t i = off; i < tot; i++) {
        const double gi = (double)g[i] * (double)h.grad_scale;
        const double mi = b1 * m0[i] + (1.0 - b1) * gi, vi = b2 * v0[i] + (1.0 - b2) * gi * gi;
        const double mhat = mi / bc1, vhat = vi / bc2;
        const double adam = mhat / (sqrt(vhat) + (double)h.eps), decay = (double)h.wd * p0[i];
        const double pi = p0[i] - (double)h.lr * (adam + decay);
        em.add(m1[i], mi, 1e-6 * (fabs(b1 * m0[i]) + fabs((1.0 - b1) * gi)) + 1e-30);
        ev.add(v1[i], vi, 1e-6 * (fabs(b2 * v0[i]) + fabs((1.0 - b2) * gi * gi)) + 1e-30);
        // m's own rounding error (bounded above) reaches p through lr / bc1 / (sqrt(vhat) + eps): when
        // b1 m0 and (1 - b1) g nearly cancel, that dominates (seen on an H100: m = 3.2e-6 from terms of 8.7e-3)
        const double m_err = 1e-6 * (fabs(b1 * m0[i]) + fabs((1.0 - b1) * gi));
        ep.add(p1[i], pi, 1e-6 * (fabs(pi) + fabs(p0[i])) + 4e-6 * (double)h.lr * (fabs(adam) + fabs(decay)) +
                              (double)h.lr * (m_err / bc1) / (sqrt(vhat) + (double)h.eps) + 1e-30);
        if (kHasMaster && !rounding_ok(px[i], p1[i])) round_bad++;
    }
    // elements outside [off, off + n) must be untouched (poisoned params / original values)
    bool outside_untouched = true;
    for (size_t i = 0; i < off; i++)
        outside_untouched &= m1[i] == m0[i] && v1[i] == v0[i] && (kHasMaster ? p1[i] == p0[i] : true);
    em.report("m", tally);
    ev.report("v", tally);
    ep.report(kHasMaster ? "master (fp32)" : "params (fp32)", tally);
    if (ep.outside) {
        const size_t w = off + ep.worst_i;
        printf("    inputs of that element: p0 %.9e g %.9e m0 %.9e v0 %.9e -> m %.9e v %.9e\n", p0[w], (double)g[w],
               m0[w], v0[w], m1[w], v1[w]);
    }
    res.master_rel = ep.rel();
    if (kHasMaster) {
        printf("    params: %zu of %zu not a valid rounding of the master\n", round_bad, n);
        tally.check(
#if defined(ENABLE_BF16)
            "params = stochastic bf16 rounding of master",
#else
            "params = round-to-nearest of master",
#endif
            round_bad == 0);
    }
    if (off) tally.check("elements before the range untouched", outside_untouched);

    // determinism: identical state again -> identical outputs; another seed -> other rounding (bf16)
    {
        if (kHasMaster) { upload(s.master, p0); s.params.poison(); } else { upload(s.params, p0); }
        upload(s.m, m0);
        upload(s.v, v0);
        run_update(s, n, off, h, h.seed);
        cudaCheck(cudaDeviceSynchronize());
        const std::vector<float> p2 = kHasMaster ? download(s.master) : download(s.params);
        const std::vector<float> m2 = download(s.m), v2 = download(s.v);
        std::vector<floatX> px2(tot);
        cudaCheck(cudaMemcpy(px2.data(), s.params.ptr, tot * sizeof(floatX), cudaMemcpyDeviceToHost));
        res.det = memcmp(p1.data(), p2.data(), tot * 4) == 0 && memcmp(m1.data(), m2.data(), tot * 4) == 0 &&
                  memcmp(v1.data(), v2.data(), tot * 4) == 0 && memcmp(px.data(), px2.data(), tot * sizeof(floatX)) == 0;
        tally.check("deterministic (2 runs, all outputs)", res.det);
#if defined(ENABLE_BF16)
        upload(s.master, p0);
        upload(s.m, m0);
        upload(s.v, v0);
        run_update(s, n, off, h, h.seed + 1);
        cudaCheck(cudaDeviceSynchronize());
        cudaCheck(cudaMemcpy(px2.data(), s.params.ptr, tot * sizeof(floatX), cudaMemcpyDeviceToHost));
        size_t differ = 0;
        for (size_t i = off; i < tot; i++) differ += memcmp(&px[i], &px2[i], 2) != 0;
        printf("    seed + 1 changes %zu of %zu bf16 params\n", differ, n);
        if (n >= 1000) tally.check("another seed changes the rounding", differ > n / 100);
#endif
    }
    res.pass = tally.failed == failed_before;
    return res;
}

// Stochastic rounding is unbiased: 1M copies of 1 + 2^-10 (an eighth of the way from 1 to the next bf16,
// 1 + 2^-7) must round up with probability 1/8, so that the mean stays 1 + 2^-10.
static bool check_sr_unbiased(Tally& tally) {
#if defined(ENABLE_BF16)
    const size_t n = 1 << 20;
    const double x = 1.0 + ldexp(1.0, -10), ulp = ldexp(1.0, -7), q = (x - 1.0) / ulp;
    printf("\n== stochastic rounding bias: %zu copies of 1 + 2^-10, lr = 0 ==\n", n);
    State s(n);
    upload(s.master, std::vector<float>(n, (float)x));
    upload(s.grads, random_normal(n, 99, 0.05f));
    s.m.zero();
    s.v.zero();
    s.params.poison();
    adamw_update(s.params.ptr, s.master.ptr, s.grads.ptr, s.m.ptr, s.v.ptr, n, 0.0f, 0.9f, 0.95f, 1, 1e-8f, 0.1f, 1.0f,
                 0x5EEDull, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> p = download(s.params), master = download(s.master);
    size_t up = 0, other = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == 1.0f + (float)ulp) up++;
        else if (p[i] != 1.0f) other++;
        sum += p[i];
    }
    const double mean = sum / n, sigma = ulp * sqrt(q * (1 - q) / n), z = (mean - x) / sigma;
    const bool master_fixed = std::all_of(master.begin(), master.end(), [&](float v) { return v == (float)x; });
    printf("    rounded up %zu of %zu (expected %.0f), other values %zu, mean - x = %.3e = %.2f sigma\n", up, n, q * n,
           other, mean - x, z);
    tally.check("master unchanged at lr = 0", master_fixed);
    return tally.check("SR mean within 3 sigma, only the two neighbours", fabs(z) <= 3.0 && other == 0);
#else
    (void)tally;
    printf("\n== stochastic rounding bias: skipped (%s build rounds to nearest / copies) ==\n", PRECISION_MODE_NAME);
    return true;
#endif
}

// ---- timing at GPT-2 d12 size, state initialized on the device

__global__ void init_state_kernel(floatX* params, float* master, floatX* grads, float* m, float* v, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float u1 = (random_u32(1, i) >> 8) * (1.0f / 16777216.0f) - 0.5f, u2 = (random_u32(2, i) >> 8) * (1.0f / 16777216.0f) - 0.5f;
        if (master) master[i] = 0.04f * u1;
        params[i] = (floatX)(0.04f * u1);
        grads[i] = (floatX)(0.1f * u2);
        m[i] = 0.01f * u2;
        v[i] = 1e-4f * (u1 + 0.5f);
    }
}

static void time_d12(float copy_gbs) {
    const size_t n = 124475904;
    printf("\n== timing: n = %zu (GPT-2 d12 parameters) ==\n", n);
    State s(n);
    init_state_kernel<<<4096, 256>>>(s.params.ptr, kHasMaster ? s.master.ptr : NULL, s.grads.ptr, s.m.ptr, s.v.ptr, n);
    cudaCheckLaunch();
    cudaCheck(cudaDeviceSynchronize());
    const Hyper h{6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.8f, 10, 7};
    const float ms = time_median_ms([&] { run_update(s, n, 0, h, h.seed); });
    const double bytes = kHasMaster ? n * (2.0 * sizeof(floatX) + 24.0) : n * (3.0 * sizeof(floatX) + 16.0);
    const float ms_init = time_median_ms([&] { init_master_from_params(s.master.ptr, s.params.ptr, n, 0); });
    const double bytes_init = n * (sizeof(floatX) + 4.0);
    printf("\n%-32s | %-9s | %-8s | %-7s\n", "kernel", "ms", "GB", "GB/s");
    printf("%-32s | %9.4f | %8.3f | %7.0f\n", "adamw_update", ms, bytes / 1e9, bytes / (ms * 1e-3) / 1e9);
    printf("%-32s | %9.4f | %8.3f | %7.0f\n", "init_master_from_params", ms_init, bytes_init / 1e9, bytes_init / (ms_init * 1e-3) / 1e9);
    printf("(median of 20 after 3 warm-up; device copy reference cudaMemcpy D2D: %.0f GB/s counted read + write)\n", copy_gbs);
}

static void check_init_master(Tally& tally) {
    printf("\n== init_master_from_params ==\n");
    for (size_t off : {(size_t)0, (size_t)3}) {
        const size_t n = 100003, tot = n + off;
        std::vector<float> p = random_normal(tot, 5 + off, 0.02f);
        round_to_floatX(p);
        DeviceBuffer<floatX> d_p(tot);
        DeviceBuffer<float> d_m(tot);
        upload(d_p, p);
        d_m.poison();
        init_master_from_params(d_m.ptr + off, d_p.ptr + off, n, 0);
        cudaCheck(cudaDeviceSynchronize());
        const std::vector<float> m = download(d_m);
        const bool ok = memcmp(m.data() + off, p.data() + off, n * 4) == 0;
        char name[64];
        snprintf(name, sizeof name, "widening exact (offset %zu)", off);
        tally.check(name, ok);
    }
}

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("adamw harness | device: %s (sm_%d%d, %d SMs) | floatX = %s, master copy %s | timing %s\n", prop.name,
           prop.major, prop.minor, prop.multiProcessorCount, PRECISION_MODE_NAME, kHasMaster ? "fp32" : "none (params fp32)",
           timing ? "on" : "off");

    const Case cases[] = {
        {"step 1, wd 0.1, clip 0.5", (size_t)1 << 20, 0, {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 1, 11}, true},
        {"step 7, no wd, fp16 loss scale 1/1024", ((size_t)1 << 20) + 3, 0, {3e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f / 1024, 7, 12}, false},
        {"step 1000, wd 0.1, large eps", 999999, 0, {1e-3f, 0.85f, 0.95f, 1e-3f, 0.1f, 1.0f, 1000, 13}, false},
        {"misaligned pointers (scalar path)", 100001, 1, {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 3, 14}, false},
        {"tiny n = 5", 5, 0, {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 2, 15}, false},
    };
    Tally tally;
    std::vector<Result> results;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) results.push_back(run_case(cases[i], 300 + 10 * i, tally));
    check_sr_unbiased(tally);
    check_init_master(tally);

    printf("\n%-40s | %-9s | %-9s | %-4s | %s\n", "case", "n", "p rel", "det", "result");
    for (const Result& r : results)
        printf("%-40s | %9zu | %.3e | %-4s | %s\n", r.c->name, r.c->n, r.master_rel, r.det ? "yes" : "NO", r.pass ? "PASS" : "FAIL");

    if (timing) time_d12(copy_bandwidth_gbs());
    return tally.finish();
}
