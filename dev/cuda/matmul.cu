// matmul.cu - correctness and speed harness for llmc/kernels/gemm/gemm.cuh (matmul_forward / matmul_backward).
//
// Build and run (from the repository root):
//   nvcc -O3 --use_fast_math -std=c++17 -arch=sm_90 -I. dev/cuda/matmul.cu -lcublasLt -lcublas -o /tmp/matmul && /tmp/matmul
//   (add -DENABLE_FP16 or -DENABLE_FP32 for the other precisions; bf16 is the default), or
//   make cuda-dev PRECISION=BF16 && build/bf16/dev/matmul
// Flags:
//   --check-only   correctness checks only, no timing
//   --small        only the small shapes (quick smoke test)
//
// For every shape (N, C, OC) a fresh GemmContext and fresh random inputs (seeded per shape, rounded to
// floatX so the float64 CPU reference sees exactly the GPU's inputs); outputs are poisoned with 0xFF
// bytes (NaN in every float format) before each call, and any non-finite value anywhere in an output
// (counted on the GPU over the whole tensor) fails the check. The CPU reference covers all rows of
// the small shapes and 64 random rows (always including the first and last) x all columns of the
// large ones; dbias is checked in full. dweight and dbias start from random non-zero values of the
// same magnitude as the update, so a missing += fails clearly. Determinism: the same call twice
// (from the same state) must give bit-identical outputs; so must a context without algorithm tuning
// (ctx.autotune = 0: cuBLASLt's first answer) on the trainer's calls. The plan cache must serve repeated calls
// without new heuristic queries. Exit status 1 on any failure; the last line is `N passed, N failed`.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdint.h>
#include <algorithm>
#include <thread>
#include <type_traits>
#include <vector>
#include "dev/cuda/harness.cuh"
#include "llmc/kernels/gemm/gemm.cuh"

// ------------------------------------------------------------------------------------------------
// Tolerances (norm-relative error ||gpu - ref|| / ||ref|| over the checked elements)
//
// Every output is rounded to floatX once (twice on the unfused GELU paths: pre_gelu, then the GELU or
// GELU' product). Round-to-nearest to p significand bits has a relative RMS error of about
// 2^-p / sqrt(12) * 1.2: ~1.4e-3 for bf16 (p = 8), ~1.7e-4 for fp16 (p = 11), ~2e-8 for fp32. fp32
// accumulation in another order than the float64 reference adds about 2^-24 * sqrt(K) / 2 relative at
// most (~6e-6 for K = 65536). Tolerances are ~3x the worst expected value:
//   bf16 6e-3, fp16 1e-3, fp32 3e-5. In fp32 a TF32 GEMM would show ~4e-4, so 3e-5 also proves the
//   FP32 build runs true fp32 products.
// GELU / GELU' produced by the cuBLASLt epilogue: how cuBLASLt evaluates tanh is not documented; in
// fp32 we allow up to the error of a hardware tanh approximation (~2^-11 relative): 2e-4. The
// measured value is printed, together with a note whether the epilogue matches the tanh or the erf
// form of GELU better. The unfused GELU kernels of gemm.cuh use the sigmoid form with expf (~1e-6
// relative even under --use_fast_math), so their outputs keep the plain tolerance.
static double tolerance() {
#if defined(ENABLE_FP32)
    return 3e-5;
#elif defined(ENABLE_FP16)
    return 1e-3;
#else
    return 6e-3;
#endif
}
static double gelu_tolerance() { return std::max(tolerance(), 2e-4); }

// ------------------------------------------------------------------------------------------------
// Host helpers: parallel loops, random inputs, float64 references

template <typename F>
static void parallel_for(size_t count, F f) {
    const size_t nt = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), 64));
    std::vector<std::thread> pool;
    for (size_t t = 0; t < nt; t++) {
        const size_t lo = count * t / nt, hi = count * (t + 1) / nt;
        pool.emplace_back([=, &f] { for (size_t i = lo; i < hi; i++) f(i); });
    }
    for (auto& th : pool) th.join();
}

// Uniform [lo, hi) values rounded to floatX; chunk-seeded so the parallel fill is reproducible.
static std::vector<float> random_floatX(size_t n, uint64_t seed, float lo, float hi) {
    std::vector<float> v(n);
    const size_t chunk = 1 << 20, chunks = ceil_div_sz(n, chunk);
    parallel_for(chunks, [&](size_t c) {
        HostRng r(seed * 1000003ull + c);
        for (size_t i = c * chunk; i < std::min(n, (c + 1) * chunk); i++) v[i] = from_floatX(to_floatX(r.uniform(lo, hi)));
    });
    return v;
}

template <typename T>
static void upload_fast(DeviceBuffer<T>& d, const std::vector<float>& h) {
    std::vector<T> tmp(h.size());
    parallel_for(ceil_div_sz(h.size(), 1 << 20), [&](size_t c) {
        for (size_t i = c << 20; i < std::min(h.size(), (c + 1) << 20); i++) tmp[i] = (T)h[i];
    });
    cudaCheck(cudaMemcpy(d.ptr, tmp.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}



static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double gelu_grad_ref(double x) {
    const double s = 0.7978845608028654, u = s * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

// dot[i, o] = inp[rows[i], :] . weight[o, :]   (no bias)
static std::vector<double> ref_forward(const std::vector<float>& inp, const std::vector<float>& w, const std::vector<int>& rows,
                                       int C, int OC) {
    std::vector<double> dot(rows.size() * (size_t)OC);
    parallel_for(rows.size() * (size_t)OC, [&](size_t idx) {
        const size_t i = idx / OC, o = idx % OC;
        const float* x = &inp[(size_t)rows[i] * C];
        const float* wr = &w[o * C];
        double s = 0;
        for (int c = 0; c < C; c++) s += (double)x[c] * wr[c];
        dot[idx] = s;
    });
    return dot;
}

// dinp[i, :] = dout[rows[i], :] . weight
static std::vector<double> ref_dinp(const std::vector<float>& dout, const std::vector<float>& w, const std::vector<int>& rows,
                                    int C, int OC) {
    std::vector<double> r(rows.size() * (size_t)C, 0.0);
    parallel_for(rows.size(), [&](size_t i) {
        double* acc = &r[i * C];
        const float* g = &dout[(size_t)rows[i] * OC];
        for (int o = 0; o < OC; o++) {
            const double a = g[o];
            const float* wr = &w[(size_t)o * C];
            for (int c = 0; c < C; c++) acc[c] += a * wr[c];
        }
    });
    return r;
}

// dW[j, :] = sum_n dout[n, orows[j]] * inp[n, :]; parallel over row chunks, combined in chunk order.
static std::vector<double> ref_dweight(const std::vector<float>& dout, const std::vector<float>& inp, const std::vector<int>& orows,
                                       int N, int C, int OC) {
    const size_t J = orows.size(), chunks = std::min<size_t>(64, (size_t)N);
    std::vector<std::vector<double>> part(chunks, std::vector<double>(J * C, 0.0));
    parallel_for(chunks, [&](size_t t) {
        const size_t lo = (size_t)N * t / chunks, hi = (size_t)N * (t + 1) / chunks;
        std::vector<double>& acc = part[t];
        for (size_t n = lo; n < hi; n++) {
            const float* x = &inp[n * C];
            for (size_t j = 0; j < J; j++) {
                const double a = dout[n * OC + orows[j]];
                double* row = &acc[j * C];
                for (int c = 0; c < C; c++) row[c] += a * x[c];
            }
        }
    });
    std::vector<double> r(J * C, 0.0);
    for (size_t t = 0; t < chunks; t++)
        for (size_t i = 0; i < r.size(); i++) r[i] += part[t][i];
    return r;
}

// colsum[o] = sum_n dout[n, o]
static std::vector<double> ref_colsum(const std::vector<float>& dout, int N, int OC) {
    std::vector<double> r(OC, 0.0);
    const size_t per = 64;
    parallel_for(ceil_div_sz(OC, per), [&](size_t b) {
        const size_t lo = b * per, hi = std::min((size_t)OC, lo + per);
        for (size_t n = 0; n < (size_t)N; n++)
            for (size_t o = lo; o < hi; o++) r[o] += dout[n * OC + o];
    });
    return r;
}


// ------------------------------------------------------------------------------------------------
// Checks

static Tally tally;

// Compare rows `rows` (all columns, ld = cols) of device tensor d (total elements n_total) with ref.
static bool check_rows(const char* name, const floatX* d, size_t n_total, size_t cols, const std::vector<int>& rows,
                       const std::vector<double>& ref, double tol) {
    const std::vector<float> got = download_rows(d, cols, rows);
    CompareResult r = compare(got.data(), ref.data(), got.size(), tol);
    const size_t bad = device_nonfinite(d, n_total);
    r.nonfinite += bad;
    r.ok = r.ok && bad == 0;
    return tally.check(name, r, tol);
}

// Which way the GELU of epilogue `epi` ran in this context.
static const char* gelu_path(const GemmContext& ctx, uint32_t epi) {
    for (int i = 0; i < ctx.num_plans; i++)
        if (ctx.plans[i].key.epilogue == epi) return ctx.plans[i].found ? "fused cuBLASLt epilogue" : "unfused (no cuBLASLt algorithm)";
    return "unfused (not attempted)";
}

struct Shape { int N, C, OC; const char* what; };

struct Timing { const char* shape_what; int N, C, OC; const char* op; float ms; double tflops, gbps; };
static std::vector<Timing> timings;

static void run_shape(const Shape& s, int index, bool do_timing, cudaStream_t stream) {
    const int N = s.N, C = s.C, OC = s.OC;
    const size_t nNC = (size_t)N * C, nNO = (size_t)N * OC, nOC = (size_t)OC * C;
    printf("\n=== (N, C, OC) = (%d, %d, %d)  %s ===\n", N, C, OC, s.what);
    const double tol = tolerance(), gtol = gelu_tolerance();
    const uint64_t seed = 1000 + 17 * index;

    // Inputs (floatX-rounded). Scales: weight ~ U(+-3/sqrt(C)) makes inp.W^T ~ unit variance (GELU
    // sees its curved region), pre_gelu_in ~ U(+-3); dweight0 / dbias0 have the magnitude of the update.
    const float wscale = 3.0f / sqrtf((float)C);
    std::vector<float> h_inp = random_floatX(nNC, seed + 1, -1.0f, 1.0f);
    std::vector<float> h_w = random_floatX(nOC, seed + 2, -wscale, wscale);
    std::vector<float> h_bias = random_floatX(OC, seed + 3, -1.0f, 1.0f);
    std::vector<float> h_dout = random_floatX(nNO, seed + 4, -1.0f, 1.0f);
    std::vector<float> h_pre_in = random_floatX(nNC, seed + 5, -3.0f, 3.0f);
    const float dw_scale = 0.6f * sqrtf((float)N), db_scale = sqrtf((float)N);
    std::vector<float> h_dw0 = random_floatX(nOC, seed + 6, -dw_scale, dw_scale);
    std::vector<float> h_db0 = random_floatX(OC, seed + 7, -db_scale, db_scale);

    DeviceBuffer<floatX> inp(nNC), w(nOC), bias(OC), dout(nNO), pre_in(nNC), dw0(nOC), db0(OC);
    DeviceBuffer<floatX> out(nNO), out2(nNO), pre(nNO), pre2(nNO), dinp(nNC), dinp2(nNC), dw(nOC), dw2(nOC), db(OC), db2(OC);
    const size_t scratch_floats = matmul_dbias_scratch_floats(N, OC);
    DeviceBuffer<float> scratch(scratch_floats);
    upload_fast(inp, h_inp); upload_fast(w, h_w); upload_fast(bias, h_bias); upload_fast(dout, h_dout);
    upload_fast(pre_in, h_pre_in); upload_fast(dw0, h_dw0); upload_fast(db0, h_db0);
    printf("  dbias scratch: %zu floats (%.1f KiB)\n", scratch_floats, scratch_floats * 4.0 / 1024);

    GemmContext ctx;
    gemm_context_init(&ctx, stream);
    auto restore_grads = [&] {
        cudaCheck(cudaMemcpyAsync(dw.ptr, dw0.ptr, nOC * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
        cudaCheck(cudaMemcpyAsync(db.ptr, db0.ptr, OC * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
    };

    // ---- float64 references on the sampled rows
    const std::vector<int> rows = pick_rows(N, (double)OC * C, seed + 8);    // rows of out / dinp
    const std::vector<int> orows = pick_rows(OC, (double)N * C, seed + 9);   // rows of dweight
    const std::vector<double> dot = ref_forward(h_inp, h_w, rows, C, OC);
    const std::vector<double> dx = ref_dinp(h_dout, h_w, rows, C, OC);
    const std::vector<double> gw = ref_dweight(h_dout, h_inp, orows, N, C, OC);
    const std::vector<double> colsum = ref_colsum(h_dout, N, OC);
    printf("  reference: %zu of %d rows (out, dinp), %zu of %d rows (dweight), all of dbias\n", rows.size(), N, orows.size(), OC);

    std::vector<double> r_bias(dot.size()), r_gelu_b(dot.size()), r_gelu(dot.size()), r_gelu_erf_b(dot.size());
    for (size_t i = 0; i < rows.size(); i++)
        for (int o = 0; o < OC; o++) {
            const size_t k = i * OC + o;
            r_bias[k] = dot[k] + h_bias[o];
            r_gelu_b[k] = gelu_ref(r_bias[k]);
            r_gelu_erf_b[k] = gelu_erf_ref(r_bias[k]);
            r_gelu[k] = gelu_ref(dot[k]);
        }
    std::vector<double> r_dgelu(dx.size());
    for (size_t i = 0; i < rows.size(); i++)
        for (int c = 0; c < C; c++) r_dgelu[i * C + c] = dx[i * C + c] * gelu_grad_ref(h_pre_in[(size_t)rows[i] * C + c]);
    std::vector<double> r_dw(gw.size()), r_db(OC);
    for (size_t j = 0; j < orows.size(); j++)
        for (int c = 0; c < C; c++) r_dw[j * C + c] = h_dw0[(size_t)orows[j] * C + c] + gw[j * C + c];
    for (int o = 0; o < OC; o++) r_db[o] = h_db0[o] + colsum[o];

    // ---- forward
    out.poison();
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, NULL);
    check_rows("fwd out (bias)", out.ptr, nNO, OC, rows, r_bias, tol);
    out.poison();
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, NULL, N, C, OC, NULL);
    check_rows("fwd out (no bias)", out.ptr, nNO, OC, rows, dot, tol);

    out.poison(); pre.poison();
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, pre.ptr);
    printf("  GELU+bias forward: %s\n", gelu_path(ctx, CUBLASLT_EPILOGUE_GELU_AUX_BIAS));
    check_rows("fwd gelu+bias: out", out.ptr, nNO, OC, rows, r_gelu_b, gtol);
    check_rows("fwd gelu+bias: pre_gelu", pre.ptr, nNO, OC, rows, r_bias, tol);
    {   // diagnostic: which GELU does the path compute?
        const std::vector<float> got = download_rows(out.ptr, OC, rows);
        const CompareResult a = compare(got.data(), r_gelu_b.data(), got.size(), 1.0);
        const CompareResult b = compare(got.data(), r_gelu_erf_b.data(), got.size(), 1.0);
        printf("  (info) GELU output vs tanh-GELU rel %.2e, vs erf-GELU rel %.2e: closer to %s\n", a.rel, b.rel,
               a.rel <= b.rel ? "tanh form (as train_gpt2.c)" : "erf form (MISMATCH with train_gpt2.c)");
    }
    out.poison(); pre.poison();
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, NULL, N, C, OC, pre.ptr);
    check_rows("fwd gelu (no bias): out", out.ptr, nNO, OC, rows, r_gelu, gtol);
    check_rows("fwd gelu (no bias): pre_gelu", pre.ptr, nNO, OC, rows, dot, tol);

    ctx.fuse_gelu = 0;
    out.poison(); pre.poison();
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, pre.ptr);
    check_rows("fwd gelu+bias unfused: out", out.ptr, nNO, OC, rows, r_gelu_b, tol);
    check_rows("fwd gelu+bias unfused: pre", pre.ptr, nNO, OC, rows, r_bias, tol);
    ctx.fuse_gelu = 1;

    // ---- backward, one output at a time
    dinp.poison();
    matmul_backward(&ctx, dinp.ptr, NULL, NULL, dout.ptr, NULL, w.ptr, NULL, N, C, OC, NULL);
    check_rows("bwd dinp", dinp.ptr, nNC, C, rows, dx, tol);
    dinp.poison();
    matmul_backward(&ctx, dinp.ptr, NULL, NULL, dout.ptr, NULL, w.ptr, NULL, N, C, OC, pre_in.ptr);
    printf("  DGELU backward: %s\n", gelu_path(ctx, CUBLASLT_EPILOGUE_DGELU));
    check_rows("bwd dinp with dgelu", dinp.ptr, nNC, C, rows, r_dgelu, gtol);
    ctx.fuse_gelu = 0;
    dinp.poison();
    matmul_backward(&ctx, dinp.ptr, NULL, NULL, dout.ptr, NULL, w.ptr, NULL, N, C, OC, pre_in.ptr);
    check_rows("bwd dinp with dgelu unfused", dinp.ptr, nNC, C, rows, r_dgelu, tol);
    ctx.fuse_gelu = 1;

    restore_grads();
    matmul_backward(&ctx, NULL, dw.ptr, NULL, dout.ptr, inp.ptr, NULL, NULL, N, C, OC, NULL);
    check_rows("bwd dweight += (from dweight0)", dw.ptr, nOC, C, orows, r_dw, tol);
    restore_grads();
    scratch.poison();
    matmul_backward(&ctx, NULL, NULL, db.ptr, dout.ptr, NULL, NULL, scratch.ptr, N, C, OC, NULL);
    check_rows("bwd dbias += (from dbias0)", db.ptr, OC, OC, std::vector<int>{0}, r_db, tol);

    // ---- the trainer's call: everything at once (fc-proj style, with the upstream GELU fused)
    restore_grads();
    dinp.poison();
    matmul_backward(&ctx, dinp.ptr, dw.ptr, db.ptr, dout.ptr, inp.ptr, w.ptr, scratch.ptr, N, C, OC, pre_in.ptr);
    check_rows("bwd all: dinp (dgelu)", dinp.ptr, nNC, C, rows, r_dgelu, gtol);
    check_rows("bwd all: dweight +=", dw.ptr, nOC, C, orows, r_dw, tol);
    check_rows("bwd all: dbias +=", db.ptr, OC, OC, std::vector<int>{0}, r_db, tol);

    // ---- determinism: same call, same state, bit-identical
    cudaCheck(cudaMemcpy(dinp2.ptr, dinp.ptr, nNC * sizeof(floatX), cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpy(dw2.ptr, dw.ptr, nOC * sizeof(floatX), cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpy(db2.ptr, db.ptr, OC * sizeof(floatX), cudaMemcpyDeviceToDevice));
    restore_grads();
    dinp.poison();
    matmul_backward(&ctx, dinp.ptr, dw.ptr, db.ptr, dout.ptr, inp.ptr, w.ptr, scratch.ptr, N, C, OC, pre_in.ptr);
    const size_t mb = device_mismatch(dinp.ptr, dinp2.ptr, nNC * sizeof(floatX)) + device_mismatch(dw.ptr, dw2.ptr, nOC * sizeof(floatX)) +
                      device_mismatch(db.ptr, db2.ptr, OC * sizeof(floatX));
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, pre.ptr);
    matmul_forward(&ctx, out2.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, pre2.ptr);
    const size_t mf = device_mismatch(out.ptr, out2.ptr, nNO * sizeof(floatX)) + device_mismatch(pre.ptr, pre2.ptr, nNO * sizeof(floatX));
    printf("  determinism: forward %zu, backward %zu differing words\n", mf, mb);
    tally.check("deterministic forward (gelu+bias)", mf == 0);
    tally.check("deterministic backward (all)", mb == 0);

    // ---- tuning (ctx.autotune, gemm_tune.cuh) keeps the bits of cuBLASLt's first answer: a context without it
    //      must give the same words for every call the tuned context planned above
    GemmContext first;
    gemm_context_init(&first, stream);
    first.autotune = 0;
    {
        size_t diff = 0;
        for (int gelu = 0; gelu < 2; gelu++) {  // forward with bias, and with bias + GELU (pre_gelu too)
            matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, gelu ? pre.ptr : NULL);
            matmul_forward(&first, out2.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, gelu ? pre2.ptr : NULL);
            diff += device_mismatch(out.ptr, out2.ptr, nNO * sizeof(floatX));
            if (gelu) diff += device_mismatch(pre.ptr, pre2.ptr, nNO * sizeof(floatX));
        }
        restore_grads();
        matmul_backward(&ctx, dinp.ptr, dw.ptr, db.ptr, dout.ptr, inp.ptr, w.ptr, scratch.ptr, N, C, OC, pre_in.ptr);
        cudaCheck(cudaMemcpyAsync(dw2.ptr, dw.ptr, nOC * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
        restore_grads();
        matmul_backward(&first, dinp2.ptr, dw.ptr, db.ptr, dout.ptr, inp.ptr, w.ptr, scratch.ptr, N, C, OC, pre_in.ptr);
        cudaCheck(cudaStreamSynchronize(stream));
        diff += device_mismatch(dinp.ptr, dinp2.ptr, nNC * sizeof(floatX)) + device_mismatch(dw.ptr, dw2.ptr, nOC * sizeof(floatX));
        int tuned = 0, switched = 0;
        for (int i = 0; i < ctx.num_plans; i++) {
            tuned += ctx.plans[i].tune.result.candidates > 0;
            switched += ctx.plans[i].tune.result.chosen != 0;
        }
        printf("  tuning: %d of %d plans tuned, %d switched algorithm; %zu words differ from the heuristic's first answer\n",
               tuned, ctx.num_plans, switched, diff);
        tally.check("tuned = heuristic's bits (fwd, gelu, bwd)", diff == 0);
    }

    // ---- plan cache: repeating every call above must not query the heuristic again
    const unsigned long long q0 = ctx.heuristic_queries;
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, NULL);
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, NULL, N, C, OC, NULL);
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, pre.ptr);
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, NULL, N, C, OC, pre.ptr);
    matmul_backward(&ctx, dinp.ptr, dw.ptr, db.ptr, dout.ptr, inp.ptr, w.ptr, scratch.ptr, N, C, OC, pre_in.ptr);
    matmul_backward(&ctx, dinp.ptr, NULL, NULL, dout.ptr, NULL, w.ptr, NULL, N, C, OC, NULL);
    cudaCheck(cudaStreamSynchronize(stream));
    printf("  plan cache: %d plans, %llu heuristic queries (%llu during the repeat)\n", ctx.num_plans, ctx.heuristic_queries,
           ctx.heuristic_queries - q0);
    tally.check("plan cache serves repeated calls", ctx.heuristic_queries == q0 && ctx.uncached_calls == 0);

    // ---- timing
    if (do_timing) {
        const double flops = 2.0 * N * C * OC;
        auto add = [&](const char* op, float ms, bool is_gemm) {
            Timing t{s.what, N, C, OC, op, ms, is_gemm ? flops / (ms * 1e-3) / 1e12 : 0.0,
                     is_gemm ? 0.0 : (double)nNO * sizeof(floatX) / (ms * 1e-3) / 1e9};
            timings.push_back(t);
        };
        auto T = [&](auto fn) { return time_median_ms(fn, 3, 20, stream); };
        add("fwd (bias)", T([&] { matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, NULL); }), true);
        add("fwd (bias), heuristic's first", T([&] { matmul_forward(&first, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, NULL); }), true);
        add("fwd gelu+bias", T([&] { matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, pre.ptr); }), true);
        ctx.fuse_gelu = 0;
        add("fwd gelu+bias unfused", T([&] { matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, pre.ptr); }), true);
        ctx.fuse_gelu = 1;
        add("bwd dinp", T([&] { matmul_backward(&ctx, dinp.ptr, NULL, NULL, dout.ptr, NULL, w.ptr, NULL, N, C, OC, NULL); }), true);
        add("bwd dinp, heuristic's first",
            T([&] { matmul_backward(&first, dinp.ptr, NULL, NULL, dout.ptr, NULL, w.ptr, NULL, N, C, OC, NULL); }), true);
        add("bwd dinp dgelu", T([&] { matmul_backward(&ctx, dinp.ptr, NULL, NULL, dout.ptr, NULL, w.ptr, NULL, N, C, OC, pre_in.ptr); }), true);
        ctx.fuse_gelu = 0;
        add("bwd dinp dgelu unfused",
            T([&] { matmul_backward(&ctx, dinp.ptr, NULL, NULL, dout.ptr, NULL, w.ptr, NULL, N, C, OC, pre_in.ptr); }), true);
        ctx.fuse_gelu = 1;
        add("bwd dweight +=", T([&] { matmul_backward(&ctx, NULL, dw.ptr, NULL, dout.ptr, inp.ptr, NULL, NULL, N, C, OC, NULL); }), true);
        add("bwd dbias += (GB/s of dout)",
            T([&] { matmul_backward(&ctx, NULL, NULL, db.ptr, dout.ptr, NULL, NULL, scratch.ptr, N, C, OC, NULL); }), false);
        const float all = T([&] {
            matmul_backward(&ctx, dinp.ptr, dw.ptr, db.ptr, dout.ptr, inp.ptr, w.ptr, scratch.ptr, N, C, OC, NULL);
        });
        timings.push_back(Timing{s.what, N, C, OC, "bwd all (2 GEMMs + dbias)", all, 2.0 * flops / (all * 1e-3) / 1e12, 0.0});
    }

    // ---- FP32 build: the TF32 switch (small shapes only) changes the products, and only by TF32 rounding
    if (std::is_same<floatX, float>::value && N <= 1024) {
        gemm_set_tf32(&ctx, 1);
        out.poison();
        matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, NULL);
        const std::vector<float> got = download_rows(out.ptr, OC, rows);
        const CompareResult r = compare(got.data(), r_bias.data(), got.size(), 5e-3);
        printf("  (info) %s: rel %.2e vs the float64 reference\n", gemm_backend_name(&ctx), r.rel);
        tally.check("tf32 switch: within 5e-3", r, 5e-3);
        gemm_set_tf32(&ctx, 0);
    }

    gemm_context_print_plans(&ctx, stdout);
    gemm_context_free(&first);
    gemm_context_free(&ctx);
}

// Argument checks: messages instead of silent misbehaviour (tested on the check function, which
// matmul_forward / matmul_backward call before anything else).
static void check_argument_validation() {
    printf("\n=== argument checks ===\n");
    char err[256];
    floatX* base = nullptr;
    cudaCheck(cudaMalloc(&base, 1 << 20));
    floatX *out = base, *inp = base + 32768, *w = base + 65536, *b = base + 98304;
    bool ok = matmul_forward_args_ok(err, sizeof(err), out, inp, w, b, 64, 64, 64, NULL);
    tally.check("valid forward arguments accepted", ok);
    ok = matmul_forward_args_ok(err, sizeof(err), out, inp + 1, w, b, 64, 64, 64, NULL);
    printf("    -> %s\n", err);
    tally.check("misaligned inp rejected", !ok && strstr(err, "16-byte aligned") != NULL);
    ok = matmul_forward_args_ok(err, sizeof(err), out, inp, w, b, 64, 65, 64, NULL);
    printf("    -> %s\n", err);
    tally.check("C not a multiple of 16 bytes rejected", !ok);
    ok = matmul_forward_args_ok(err, sizeof(err), inp, inp, w, b, 64, 64, 64, NULL);
    printf("    -> %s\n", err);
    tally.check("out overlapping inp rejected", !ok);
    ok = matmul_backward_args_ok(err, sizeof(err), out, NULL, b, inp, NULL, w, NULL, 64, 64, 64, NULL);
    printf("    -> %s\n", err);
    tally.check("dbias without scratch rejected", !ok);
    cudaCheck(cudaFree(base));
}

// More distinct GEMMs than the cache holds: the overflow is planned on the fly and still correct.
static void check_cache_overflow(cudaStream_t stream) {
    printf("\n=== plan cache overflow (%d + 6 distinct shapes) ===\n", GEMM_PLAN_CACHE_SIZE);
    const int C = 64, OC = 64, shapes = GEMM_PLAN_CACHE_SIZE + 6, Nmax = 8 * shapes;
    std::vector<float> h_inp = random_floatX((size_t)Nmax * C, 77, -1, 1), h_w = random_floatX((size_t)OC * C, 78, -0.3f, 0.3f);
    DeviceBuffer<floatX> inp((size_t)Nmax * C), w((size_t)OC * C), out((size_t)Nmax * OC);
    upload_fast(inp, h_inp);
    upload_fast(w, h_w);
    GemmContext ctx;
    gemm_context_init(&ctx, stream);
    for (int i = 1; i <= shapes; i++) matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, NULL, 8 * i, C, OC, NULL);
    out.poison();
    matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, NULL, Nmax, C, OC, NULL);  // uncached shape
    std::vector<int> rows;
    for (int i = 0; i < Nmax; i++) rows.push_back(i);
    printf("  %d cached, %llu uncached calls\n", ctx.num_plans, ctx.uncached_calls);
    check_rows("uncached plan result", out.ptr, (size_t)Nmax * OC, OC, rows, ref_forward(h_inp, h_w, rows, C, OC), tolerance());
    tally.check("cache bounded, overflow counted", ctx.num_plans == GEMM_PLAN_CACHE_SIZE && ctx.uncached_calls == 7);
    gemm_context_free(&ctx);
}

int main(int argc, char** argv) {
    bool small_only = false;
    const bool check_only = !harness_parse_args(argc, argv, "--small", &small_only);
    const cudaDeviceProp prop = harness_device();
    printf("matmul harness: %s, %s storage, backend %s, %d SMs, tolerance %.0e (GELU epilogue outputs %.0e)\n", prop.name,
           PRECISION_MODE_NAME, GEMM_BACKEND_NAME, prop.multiProcessorCount, tolerance(), gelu_tolerance());
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));

    const Shape shapes[] = {
        {64, 64, 192, "tiny"},
        {256, 128, 512, "small"},
        {999, 136, 264, "odd N, OC not a multiple of the dbias block"},
        {65536, 768, 2304, "d12 qkv (B*T = 65536)"},
        {65536, 768, 3072, "d12 fc (GELU)"},
        {65536, 3072, 768, "d12 fc-proj (dinp gets the DGELU)"},
        {65536, 768, 768, "d12 attn-proj"},
        {8192, 768, 50304, "d12 lm head, padded V (B*T = 8192)"},
        {32768, 1024, 3072, "d24 qkv (B*T = 32768)"},
        {32768, 1024, 4096, "d24 fc (GELU)"},
        {32768, 4096, 1024, "d24 fc-proj (dinp gets the DGELU)"},
        {32768, 1024, 1024, "d24 attn-proj"},
    };
    check_argument_validation();
    int index = 0;
    for (const Shape& s : shapes) {
        if (small_only && s.N > 1024) continue;
        run_shape(s, index++, !check_only, stream);
    }
    check_cache_overflow(stream);

    if (!check_only && !timings.empty()) {
        printf("\n%-36s | %-28s | %9s | %9s\n", "shape (N, C, OC)", "op", "ms", "TFLOP/s");
        for (const Timing& t : timings) {
            char shape[64];
            snprintf(shape, sizeof(shape), "(%d, %d, %d)", t.N, t.C, t.OC);
            if (t.gbps > 0) printf("%-36s | %-28s | %9.4f | %6.0f GB/s\n", shape, t.op, t.ms, t.gbps);
            else printf("%-36s | %-28s | %9.4f | %9.1f\n", shape, t.op, t.ms, t.tflops);
        }
    }
    cudaCheck(cudaStreamDestroy(stream));
    return tally.finish();
}
