// adamw.cu - correctness and speed harness for llmc/kernels/adamw.cuh (AdamW with an fp32 master copy and
// stochastic rounding of the floatX parameters).
//
// Build and run (from the repository root):
//   nvcc -O3 --use_fast_math -std=c++17 -arch=sm_90 -I. dev/cuda/adamw.cu -o /tmp/adamw && /tmp/adamw
//   (add -DENABLE_FP16 or -DENABLE_FP32 for the other precisions; bf16 is the default)
// Flags: --check-only          correctness and bit-identity checks only, no timing
//        --variant NAME|all     the variants checked and timed (repeatable; default all; v0 always timed)
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
// Variants (kVariantNames): v0 = the kernel of commit 828a037 (dev/cuda/adamw_v0.cuh), the reference;
// the others are adamw_update_segments with other template knobs or launch shapes. Each must give every
// bit of params, master, m, v that v0 gives, from one fresh random device state, on: the GPT-2 d12
// layout, odd sizes laid end to end (misaligned segments: scalar path) with a nonzero index0,
// ZeRO-1-like offsets (state compact, one segment's state misaligned), 41 segments (several launches),
// fp32 gradients, and (bf16/fp16) without a master copy. Write-only buffers poisoned (NaN).
// Timing (per variant): the GPT-2 d12 and d24 layouts (16 tensors, as gpt2_apply_update issues them):
// the update alone, and the optimizer step (norm, its copy to the host and the wait, update), GB/s
// and % of a cudaMemcpy D2D measured in the same run; then one flat 124M tensor (v0, fused-u2) and
// init_master_from_params. The table of variants comes last.
// Exit status 1 if any check fails.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include "dev/cuda/harness.cuh"
#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/model/gpt2_config.h"
#include "dev/cuda/adamw_v0.cuh"

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

// ---- variants of the optimizer step: bit identity against the kernel of commit 828a037 (adamw_v0.cuh)
// and timing over the real GPT-2 segment layouts, as gpt2_apply_update issues them.

struct StepHyper {
    float lr, beta1, beta2, eps, grad_scale;
    int step;
};

enum VariantId { V0 = 0, PER_TENSOR, FUSED_U1, FUSED_U2, FUSED_U4, FUSED_U2_CS, FUSED_U2_HASH, NUM_VARIANTS };
static const char* const kVariantNames[NUM_VARIANTS] = {"v0", "per-tensor", "fused-u1", "fused-u2", "fused-u4",
                                                         "fused-u2-cs", "fused-u2-hash"};
static const char* const kVariantWhat[NUM_VARIANTS] = {
    "828a037 kernel: one launch per tensor, grid-stride over 8-element packets (the reference)",
    "new kernel (U=2, stepped hash), one launch per tensor",
    "new kernel, all segments in one launch, 1 chunk of 4 elements per thread",
    "new kernel, one launch, 2 chunks per thread: THE trainer's kernel (adamw_update_segments defaults)",
    "new kernel, one launch, 4 chunks per thread",
    "fused-u2 with streaming cache hints (.cs loads/stores)",
    "fused-u2 with random_u32 per element (3 64-bit multiplications) instead of the stepped state"};

// One optimizer update over segs with variant `id` (what gpt2_apply_update launches, per variant).
template <typename G>
static void launch_variant(int id, const std::vector<AdamWSegment<G>>& segs, const StepHyper& h, cudaStream_t s) {
    const int n = (int)segs.size();
    switch (id) {
    case V0:
        for (const AdamWSegment<G>& g : segs)
            adamw_v0::adamw_update(g.params, g.master, g.grads, g.m, g.v, g.n, h.lr, h.beta1, h.beta2, h.step, h.eps,
                                   g.weight_decay, h.grad_scale, g.seed, s, g.index0);
        break;
    case PER_TENSOR:
        for (const AdamWSegment<G>& g : segs) adamw_update_segments<G, 2, false, true>(&g, 1, h.lr, h.beta1, h.beta2, h.step, h.eps, h.grad_scale, s);
        break;
    case FUSED_U1: adamw_update_segments<G, 1, false, true>(segs.data(), n, h.lr, h.beta1, h.beta2, h.step, h.eps, h.grad_scale, s); break;
    case FUSED_U2: adamw_update_segments<G, 2, false, true>(segs.data(), n, h.lr, h.beta1, h.beta2, h.step, h.eps, h.grad_scale, s); break;
    case FUSED_U4: adamw_update_segments<G, 4, false, true>(segs.data(), n, h.lr, h.beta1, h.beta2, h.step, h.eps, h.grad_scale, s); break;
    case FUSED_U2_CS: adamw_update_segments<G, 2, true, true>(segs.data(), n, h.lr, h.beta1, h.beta2, h.step, h.eps, h.grad_scale, s); break;
    case FUSED_U2_HASH: adamw_update_segments<G, 2, false, false>(segs.data(), n, h.lr, h.beta1, h.beta2, h.step, h.eps, h.grad_scale, s); break;
    default: fprintf(stderr, "error: variant %d\n", id); exit(EXIT_FAILURE);
    }
}

// Fresh random state from `seed`: master/params ~ U(-0.02, 0.02), grads ~ U(-0.05, 0.05), m ~ U(-0.005, 0.005),
// v ~ U(0, 1e-4) (v >= 0 as after any step). params get the master rounded to nearest (without master).
template <typename G>
__global__ void random_state_kernel(floatX* params, float* master, G* grads, float* m, float* v, size_t n, unsigned long long seed) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float u1 = (random_u32(seed, i) >> 8) * (1.0f / 16777216.0f) - 0.5f;
        const float u2 = (random_u32(seed + 1, i) >> 8) * (1.0f / 16777216.0f) - 0.5f;
        const float u3 = (random_u32(seed + 2, i) >> 8) * (1.0f / 16777216.0f);
        if (master) master[i] = 0.04f * u1;
        else params[i] = (floatX)(0.04f * u1);
        grads[i] = (G)(0.1f * u2);
        m[i] = 0.01f * (u3 - 0.5f);
        v[i] = 1e-4f * u3;
    }
}

// Flat device state (params, grads, master, m, v) for `n` elements; segments point into it.
template <typename G>
struct FlatState {
    size_t n;
    DeviceBuffer<floatX> params;
    DeviceBuffer<G> grads;
    DeviceBuffer<float> master, m, v;
    explicit FlatState(size_t count) : n(count), params(count), grads(count), master(count), m(count), v(count) {}
    // Every element random (gaps between segments too: the same values in both copies of a comparison,
    // so a write outside the segments shows as a mismatch); the write-only buffer poisoned (NaN): the
    // params with a master copy, else the unused master.
    void randomize(unsigned long long seed, bool with_master) {
        random_state_kernel<G><<<2048, 256>>>(params.ptr, with_master ? master.ptr : NULL, grads.ptr, m.ptr, v.ptr, n, seed);
        cudaCheckLaunch();
        if (with_master) params.poison(); else master.poison();
    }
    void copy_from(const FlatState& o) {
        cudaCheck(cudaMemcpy(params.ptr, o.params.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(grads.ptr, o.grads.ptr, n * sizeof(G), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(master.ptr, o.master.ptr, n * 4, cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(m.ptr, o.m.ptr, n * 4, cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(v.ptr, o.v.ptr, n * 4, cudaMemcpyDeviceToDevice));
    }
    // Differing 32-bit words against o over every buffer (n even, so bf16 buffers are whole words).
    size_t mismatch(const FlatState& o) const {
        return device_mismatch(params.ptr, o.params.ptr, n * sizeof(floatX)) + device_mismatch(master.ptr, o.master.ptr, n * 4) +
               device_mismatch(m.ptr, o.m.ptr, n * 4) + device_mismatch(v.ptr, o.v.ptr, n * 4);
    }
};

// A segment layout: per segment its element count, offset in the flat params/grads, offset in the flat
// state (m, v, master), rounding index0 and tensor id (seed and weight decay as gpt2_apply_update).
struct SegSpec {
    size_t n, param_off, state_off, index0;
    int tensor;
};

// The 16 tensors of GPT-2 (maxT 1024, Vp 50304) with L layers and C channels, laid end to end.
static std::vector<SegSpec> gpt2_layout(int L, int C) {
    GPT2Config c;
    memset(&c, 0, sizeof c);
    c.max_seq_len = 1024;
    c.vocab_size = 50257;
    c.padded_vocab_size = 50304;
    c.num_layers = L;
    c.num_heads = C / 64;
    c.channels = C;
    size_t sizes[NUM_PARAMETER_TENSORS], off = 0;
    gpt2_param_sizes(&c, sizes);
    std::vector<SegSpec> out;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        out.push_back({sizes[t], off, off, 0, t});
        off += sizes[t];
    }
    return out;
}

static size_t layout_elems(const std::vector<SegSpec>& l) {
    size_t e = 0;
    for (const SegSpec& s : l) e = std::max(e, std::max(s.param_off, s.state_off) + s.n);
    return (e + 8) & ~(size_t)7;  // even (whole 32-bit words), with slack after the last segment
}

template <typename G>
static std::vector<AdamWSegment<G>> make_segments(FlatState<G>& st, const std::vector<SegSpec>& l, bool with_master,
                                                 int step, float wd) {
    std::vector<AdamWSegment<G>> segs;
    for (const SegSpec& s : l) {
        AdamWSegment<G> a;
        a.params = st.params.ptr + s.param_off;
        a.master = with_master ? st.master.ptr + s.state_off : NULL;
        a.grads = st.grads.ptr + s.param_off;
        a.m = st.m.ptr + s.state_off;
        a.v = st.v.ptr + s.state_off;
        a.n = s.n;
        a.index0 = s.index0;
        a.seed = 0x5EEDull ^ ((unsigned long long)step << 20) ^ (unsigned long long)s.tensor;
        a.weight_decay = gpt2_param_is_matrix(s.tensor % NUM_PARAMETER_TENSORS) ? wd : 0.0f;
        segs.push_back(a);
    }
    return segs;
}

// Variant `id` vs v0 on layout l from one fresh random state: every bit of params, master, m, v equal.
template <typename G>
static bool check_identical(int id, const char* name, const std::vector<SegSpec>& l, bool with_master, unsigned long long seed,
                            Tally& tally) {
    const size_t n = layout_elems(l);
    FlatState<G> a(n), b(n);
    a.randomize(seed, with_master);
    b.copy_from(a);
    const StepHyper h{6e-4f, 0.9f, 0.95f, 1e-8f, 0.8f, 3};
    launch_variant(V0, make_segments(a, l, with_master, h.step, 0.1f), h, 0);
    launch_variant(id, make_segments(b, l, with_master, h.step, 0.1f), h, 0);
    cudaCheck(cudaDeviceSynchronize());
    const size_t bad = a.mismatch(b);
    char label[160];
    snprintf(label, sizeof label, "%s = v0 bits: %s (%zu words differ)", kVariantNames[id], name, bad);
    return tally.check(label, bad == 0);
}

// Small layouts that reach every path: odd sizes laid end to end (later segments misaligned: scalar path),
// a nonzero index0 (ZeRO-1 piece), state offsets unlike the parameter offsets (ZeRO-1's compact state,
// one of them misaligned), and more segments than one launch takes.
static std::vector<SegSpec> odd_layout() {
    const size_t sizes[] = {5, 1000003, 77, 8, 3, 4097, 1, 262147, 96, 100000};
    std::vector<SegSpec> l;
    size_t off = 0;
    int t = 0;
    for (size_t n : sizes) { l.push_back({n, off, off, t == 2 ? 12345u : 0u, t}); off += n; t++; }
    return l;
}
static std::vector<SegSpec> zero1_layout() {
    std::vector<SegSpec> l;
    // params at slice offsets of a 4-rank split, state compact; segment 3's state is misaligned by one
    const size_t n[] = {196608, 768, 589824, 2304, 65536};
    size_t p = 0, s = 0;
    for (int i = 0; i < 5; i++) {
        l.push_back({n[i], p + 3 * n[i], s + (i == 3 ? 1 : 0), 3 * n[i], i});
        p += 4 * n[i];
        s += n[i] + 8;
    }
    return l;
}
static std::vector<SegSpec> many_layout(uint64_t seed) {
    HostRng r(seed);
    std::vector<SegSpec> l;
    size_t off = 0;
    for (int i = 0; i < ADAMW_MAX_SEGMENTS + 9; i++) {
        const size_t n = 1 + r.u32() % 20000;
        l.push_back({n, off, off, 0, i});
        off += n + (r.u32() % 2) * 8;  // some gaps (aligned), some not
    }
    return l;
}

struct VariantResult {
    double ms[2] = {0, 0}, step_ms[2] = {0, 0}, gbs[2] = {0, 0};
    bool identical = true;
};

// Per-step optimizer time of variant id on layout l: the update alone (median of 20), and the whole
// sequence the trainer runs (gradient norm, its copy to the host and the wait, clip factor, update).
static void time_layout(int id, const std::vector<SegSpec>& l, FlatState<floatX>& st, float* partials, int slot, VariantResult& r) {
    const StepHyper h{6e-4f, 0.9f, 0.95f, 1e-8f, 1.0f, 10};
    const std::vector<AdamWSegment<floatX>> segs = make_segments(st, l, kHasMaster, h.step, 0.1f);
    size_t n = 0;
    for (const SegSpec& s : l) n += s.n;
    r.ms[slot] = time_median_ms([&] { launch_variant(id, segs, h, 0); });
    r.step_ms[slot] = time_median_ms([&] {
        global_norm_squared(partials, st.grads.ptr, n, true, 0);
        global_norm_finish(partials, partials, 0);
        float norm;
        cudaCheck(cudaMemcpyAsync(&norm, partials, sizeof norm, cudaMemcpyDeviceToHost, 0));
        cudaCheck(cudaStreamSynchronize(0));
        StepHyper hc = h;
        hc.grad_scale = norm > 1.0f ? 1.0f / (norm + 1e-6f) : 1.0f;  // clip to 1.0, as the trainer
        launch_variant(id, segs, hc, 0);
    });
    const double bytes = kHasMaster ? n * (2.0 * sizeof(floatX) + 24.0) : n * (3.0 * sizeof(floatX) + 16.0);
    r.gbs[slot] = bytes / (r.ms[slot] * 1e-3) / 1e9;
}

static void run_variants(const std::vector<int>& ids, bool timing, Tally& tally) {
    std::vector<VariantResult> res(NUM_VARIANTS);
    printf("\n== variants: bit identity against v0 (every bit of params, master, m, v; fresh random state) ==\n");
    for (int id : ids) {
        if (id == V0) continue;
        bool ok = true;
        ok &= check_identical<floatX>(id, "GPT-2 d12 layout", gpt2_layout(12, 768), kHasMaster, 1000 + id, tally);
        ok &= check_identical<floatX>(id, "odd sizes, misaligned", odd_layout(), kHasMaster, 2000 + id, tally);
        ok &= check_identical<floatX>(id, "ZeRO-1-like offsets", zero1_layout(), kHasMaster, 3000 + id, tally);
        ok &= check_identical<floatX>(id, "41 segments", many_layout(4000 + id), kHasMaster, 4000 + id, tally);
        ok &= check_identical<float>(id, "fp32 grads, odd sizes", odd_layout(), kHasMaster, 5000 + id, tally);
        ok &= check_identical<float>(id, "fp32 grads, 41 segments", many_layout(6000 + id), kHasMaster, 6000 + id, tally);
        if (kHasMaster) ok &= check_identical<floatX>(id, "no master copy, odd sizes", odd_layout(), false, 7000 + id, tally);
        res[id].identical = ok;
    }
    if (!timing) return;

    const float copy = copy_bandwidth_gbs();
    DeviceBuffer<float> partials(GLOBAL_NORM_PARTIALS);
    const int Ls[2] = {12, 24}, Cs[2] = {768, 1024};
    for (int k = 0; k < 2; k++) {
        const std::vector<SegSpec> l = gpt2_layout(Ls[k], Cs[k]);
        size_t total = 0;
        for (const SegSpec& s : l) total += s.n;
        FlatState<floatX> st(layout_elems(l));
        st.randomize(77 + k, kHasMaster);
        printf("\n== timing: GPT-2 d%d layout, %zu parameters in %zu tensors ==\n", Ls[k], total, l.size());
        for (int id : ids) {
            time_layout(id, l, st, partials.ptr, k, res[id]);
            printf("  %-16s update %.4f ms (%.0f GB/s), optimizer step %.4f ms\n", kVariantNames[id], res[id].ms[k],
                   res[id].gbs[k], res[id].step_ms[k]);
        }
    }
    // single flat tensor (the old harness's number)
    {
        const size_t n = 124475904;
        const std::vector<SegSpec> l = {{n, 0, 0, 0, 4}};
        FlatState<floatX> st(n + 8);
        st.randomize(99, kHasMaster);
        printf("\n== timing: one flat tensor of %zu parameters ==\n", n);
        const float ms_init = time_median_ms([&] { init_master_from_params(st.master.ptr, st.params.ptr, n, 0); });
        for (int id : {(int)V0, (int)FUSED_U2}) {
            VariantResult r;
            time_layout(id, l, st, partials.ptr, 0, r);
            printf("  %-16s %.4f ms, %.0f GB/s (%.0f%% of copy)\n", kVariantNames[id], r.ms[0], r.gbs[0], 100.0 * r.gbs[0] / copy);
        }
        printf("  %-16s %.4f ms, %.0f GB/s\n", "init_master", ms_init, n * (sizeof(floatX) + 4.0) / (ms_init * 1e-3) / 1e9);
    }

    printf("\nvariants (update = all tensors of a step as gpt2_apply_update issues them; step = + gradient norm, "
           "host wait, clip; GB/s counts %s bytes per parameter; copy = cudaMemcpy D2D %.0f GB/s read + write):\n",
           kHasMaster ? "2 sizeof(floatX) + 24" : "3 sizeof(floatX) + 16", copy);
    for (int id : ids) printf("  %-16s %s\n", kVariantNames[id], kVariantWhat[id]);
    printf("\n%-16s | %8s | %8s | %7s | %7s | %6s | %6s | %8s | %8s | %s\n", "variant", "d12 ms", "d24 ms", "d12 GB/s",
           "d24 GB/s", "d12 %", "d24 %", "step d12", "step d24", "bit-identical");
    for (int id : ids) {
        const VariantResult& r = res[id];
        printf("%-16s | %8.4f | %8.4f | %8.0f | %8.0f | %5.1f%% | %5.1f%% | %8.4f | %8.4f | %s\n", kVariantNames[id], r.ms[0],
               r.ms[1], r.gbs[0], r.gbs[1], 100.0 * r.gbs[0] / copy, 100.0 * r.gbs[1] / copy, r.step_ms[0], r.step_ms[1],
               id == V0 ? "(reference)" : (r.identical ? "yes" : "NO"));
    }
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
    bool timing = true;
    std::vector<int> ids;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check-only")) {
            timing = false;
        } else if (!strcmp(argv[i], "--variant") && i + 1 < argc) {
            const char* name = argv[++i];
            bool found = false;
            for (int id = 0; id < NUM_VARIANTS; id++)
                if (!strcmp(name, "all") || !strcmp(name, kVariantNames[id])) {
                    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
                    found = true;
                }
            if (!found) {
                fprintf(stderr, "error: --variant %s: unknown (have: all", name);
                for (int id = 0; id < NUM_VARIANTS; id++) fprintf(stderr, ", %s", kVariantNames[id]);
                fprintf(stderr, ")\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: %s [--check-only] [--variant NAME|all]... (default: all variants)\n", argv[0]);
            return 2;
        }
    }
    if (ids.empty())
        for (int id = 0; id < NUM_VARIANTS; id++) ids.push_back(id);
    if (std::find(ids.begin(), ids.end(), (int)V0) == ids.end()) ids.insert(ids.begin(), (int)V0);  // the baseline row
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

    run_variants(ids, timing, tally);
    return tally.finish();
}
