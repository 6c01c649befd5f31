// encoder.cu - correctness and speed harness for llmc/kernels/encoder.cuh (wte + wpe embedding).
//
// Build and run (from the repository root):
//   nvcc -O3 --use_fast_math -std=c++17 -arch=sm_90 -I. -DENABLE_BF16 dev/cuda/encoder.cu -o /tmp/encoder && /tmp/encoder
//   (-DENABLE_FP16 / -DENABLE_FP32 for the other precisions; or `make cuda-dev PRECISION=BF16` -> build/bf16/dev/encoder)
// Flags: --check-only   correctness only, no timing
//
// Per case: fresh random wte (Vp x C), wpe (maxT x C), dout (B,T,C) and initial gradients (normal,
// rounded to floatX; the float64 CPU reference uses the same rounded values), token ids with many
// repeats (most positions from a small set of ids, so buckets are large and get split, plus ids 0 and
// V-1 and uniformly random ids for small buckets). Checks:
//   forward   out vs reference (out poisoned with NaN bytes first), run twice: bit-identical
//   backward  dwte rows that occur vs reference; all other dwte rows bit-identical to their initial
//             values; dwpe rows 0..T-1 vs reference, rows T..maxT-1 untouched; workspace poisoned first;
//             run twice from the same initial gradients: bit-identical (memcmp);
//             two calls back to back with different token ids and no synchronization in between
//             (exercises the reuse of the pinned plan buffer) vs the reference of both.
// Tolerances (norm-relative ||gpu - ref|| / ||ref||):
//   out: floatX_tolerance(): one fp32 add rounded once to floatX (error <= 1/2 ulp of floatX).
//   dwte, dwpe: floatX_tolerance() as well. Every element is init + (fp32 sum of its rows) rounded
//   once to floatX; in bf16/fp16 that final rounding (<= 2^-9 / 2^-12 relative) dominates. In fp32 the
//   summation error dominates: sums run sequentially over at most ~max(64, sqrt(n)) rows per segment
//   and then over the segments, so for n random-sign O(1) terms (result ~sqrt(n)) the expected relative
//   error is ~2^-24 * sqrt(segment length) < 1e-6 for the shapes here (n <= 8192), 10x under 1e-5.
// Exit status 1 if any check fails.

#include <chrono>
#include "llmc/kernels/encoder.cuh"
#include "dev/cuda/harness.cuh"

static const int V = 50257, Vp = 50304, MAXT = 1024;

struct Case {
    int B, T, C;
    int nfreq;         // size of the set of frequent ids (0: every position holds the same id)
    double frac_freq;  // fraction of positions drawn from the frequent set; the rest uniform in [0, V)
    const char* what;
};

static std::vector<int> make_tokens(const Case& cs, uint64_t seed) {
    HostRng r(seed);
    const int BT = cs.B * cs.T;
    std::vector<int> freq(std::max(cs.nfreq, 1));
    for (auto& f : freq) f = (int)(r.u32() % V);
    std::vector<int> inp(BT);
    for (int i = 0; i < BT; i++) {
        if (cs.nfreq == 0) inp[i] = freq[0];
        else if (r.uniform() < cs.frac_freq) inp[i] = freq[r.u32() % cs.nfreq];
        else inp[i] = (int)(r.u32() % V);
    }
    if (cs.nfreq > 0 && BT >= 3) {  // the first and last real rows of wte
        inp[1] = 0;
        inp[BT - 2] = V - 1;
    }
    return inp;
}

// Reference of the accumulated dwte, sparse over the rows that occur: row -> slot.
struct SparseRows {
    std::vector<int> slot;     // Vp, -1 = untouched
    std::vector<int> rows;     // touched rows, in first-touch order
    std::vector<double> vals;  // rows.size() x C
    int C;
    SparseRows(int C_) : slot(Vp, -1), C(C_) {}
    double* row(int r, const std::vector<float>& init) {
        if (slot[r] < 0) {
            slot[r] = (int)rows.size();
            rows.push_back(r);
            vals.resize(vals.size() + C);
            double* v = &vals[vals.size() - C];
            for (int c = 0; c < C; c++) v[c] = init[(size_t)r * C + c];
        }
        return &vals[(size_t)slot[r] * C];
    }
};

// dwte/dwpe reference for one or more backward calls (each: token ids + dout), from the initial values.
static void reference_backward(SparseRows& dwte, std::vector<double>& dwpe, const std::vector<float>& dwte_init,
                               const std::vector<float>& dwpe_init, const std::vector<const std::vector<int>*>& inps,
                               const std::vector<float>& dout, int B, int T, int C) {
    dwpe.assign(dwpe_init.begin(), dwpe_init.end());
    for (const std::vector<int>* inp : inps)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float* d = &dout[((size_t)b * T + t) * C];
                double* we = dwte.row((*inp)[b * T + t], dwte_init);
                double* pe = &dwpe[(size_t)t * C];
                for (int c = 0; c < C; c++) {
                    we[c] += d[c];
                    pe[c] += d[c];
                }
            }
}

// Checks dwte (touched rows vs reference, others bit-identical to init) and dwpe.
static bool check_backward(Tally& tally, const char* label, const std::vector<floatX>& dwte_gpu,
                           const std::vector<floatX>& dwpe_gpu, const SparseRows& ref_wte,
                           const std::vector<double>& ref_wpe, const std::vector<floatX>& dwte_init_bits,
                           const std::vector<floatX>& dwpe_init_bits, int T, int C, double tol) {
    ErrAcc e_wte, e_wpe;
    size_t changed_untouched = 0;
    for (int r = 0; r < Vp; r++) {
        const size_t o = (size_t)r * C;
        if (ref_wte.slot[r] >= 0) {
            const double* ref = &ref_wte.vals[(size_t)ref_wte.slot[r] * C];
            for (int c = 0; c < C; c++) e_wte.add((float)dwte_gpu[o + c], ref[c]);
        } else if (memcmp(&dwte_gpu[o], &dwte_init_bits[o], C * sizeof(floatX)) != 0) {
            changed_untouched++;
        }
    }
    for (size_t i = 0; i < (size_t)T * C; i++) e_wpe.add((float)dwpe_gpu[i], ref_wpe[i]);
    const bool wpe_rest = memcmp(&dwpe_gpu[(size_t)T * C], &dwpe_init_bits[(size_t)T * C],
                                 ((size_t)MAXT - T) * C * sizeof(floatX)) == 0;
    char name[96];
    bool ok = true;
    snprintf(name, sizeof name, "%s dwte (%zu rows used)", label, ref_wte.rows.size());
    ok &= tally.check(name, e_wte.result(tol), tol);
    snprintf(name, sizeof name, "%s dwte other rows untouched", label);
    ok &= tally.check(name, changed_untouched == 0);
    if (changed_untouched) printf("    %zu untouched rows changed\n", changed_untouched);
    snprintf(name, sizeof name, "%s dwpe rows 0..T-1", label);
    ok &= tally.check(name, e_wpe.result(tol), tol);
    snprintf(name, sizeof name, "%s dwpe rows T.. untouched", label);
    ok &= tally.check(name, wpe_rest);
    return ok;
}

struct Row {
    Case cs;
    bool ok = true, det = true;
    double fwd_rel = 0, bwd_rel = 0;
    int buckets = 0, split = 0, segments = 0;
    float fwd_ms = -1, bwd_kernels_ms = -1, bwd_call_ms = -1;
    double fwd_bytes = 0, bwd_bytes = 0, plan_ms = -1;
};

static Row run_case(const Case& cs, uint64_t seed, bool timing, Tally& tally) {
    Row row;
    row.cs = cs;
    const int B = cs.B, T = cs.T, C = cs.C, BT = B * T;
    const double tol = floatX_tolerance();
    printf("\n(B,T,C) = (%d,%d,%d), %s\n", B, T, C, cs.what);

    // inputs, rounded to floatX
    std::vector<float> wte = random_normal((size_t)Vp * C, seed + 1), wpe = random_normal((size_t)MAXT * C, seed + 2);
    std::vector<float> dout = random_normal((size_t)BT * C, seed + 3);
    std::vector<float> dwte_init = random_normal((size_t)Vp * C, seed + 4), dwpe_init = random_normal((size_t)MAXT * C, seed + 5);
    for (auto* v : {&wte, &wpe, &dout, &dwte_init, &dwpe_init}) round_to_floatX(*v);
    const std::vector<int> inp = make_tokens(cs, seed + 6);
    Case cs2 = cs;
    if (cs2.nfreq == 0) cs2.nfreq = 1;  // second token set for the back-to-back check
    const std::vector<int> inp2 = make_tokens(cs2, seed + 7);

    DeviceBuffer<floatX> d_wte((size_t)Vp * C), d_wpe((size_t)MAXT * C), d_out((size_t)BT * C), d_dout((size_t)BT * C);
    DeviceBuffer<floatX> d_dwte((size_t)Vp * C), d_dwpe((size_t)MAXT * C);
    DeviceBuffer<int> d_inp(BT);
    upload(d_wte, wte);
    upload(d_wpe, wpe);
    upload(d_dout, dout);
    cudaCheck(cudaMemcpy(d_inp.ptr, inp.data(), BT * sizeof(int), cudaMemcpyHostToDevice));
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));

    // ---- forward
    d_out.poison();
    encoder_forward(d_out.ptr, d_inp.ptr, d_wte.ptr, d_wpe.ptr, B, T, C, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    const std::vector<floatX> out1 = download_raw(d_out);
    ErrAcc e_out;
    for (int bt = 0; bt < BT; bt++) {
        const float* we = &wte[(size_t)inp[bt] * C];
        const float* pe = &wpe[(size_t)(bt % T) * C];
        for (int c = 0; c < C; c++) e_out.add((float)out1[(size_t)bt * C + c], (double)we[c] + (double)pe[c]);
    }
    const CompareResult r_out = e_out.result(tol);
    row.ok &= tally.check("forward out", r_out, tol);
    row.fwd_rel = r_out.rel;
    d_out.poison();
    encoder_forward(d_out.ptr, d_inp.ptr, d_wte.ptr, d_wpe.ptr, B, T, C, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    const bool fwd_det = same_bits(out1, download_raw(d_out));
    row.ok &= tally.check("forward deterministic (memcmp)", fwd_det);

    // ---- backward
    EncoderBackwardWorkspace ws;
    encoder_backward_workspace_create(&ws, BT, C, Vp);
    const size_t ws_bytes = encoder_backward_device_bytes(BT, C);
    auto reset_grads = [&]() {
        upload(d_dwte, dwte_init);
        upload(d_dwpe, dwpe_init);
        cudaCheck(cudaMemset(ws.dev_partial, 0xFF, ws_bytes));  // poison partial sums and plan area
    };
    const std::vector<floatX> dwte_init_bits = [&] { std::vector<floatX> v(dwte_init.size()); for (size_t i = 0; i < v.size(); i++) v[i] = (floatX)dwte_init[i]; return v; }();
    const std::vector<floatX> dwpe_init_bits = [&] { std::vector<floatX> v(dwpe_init.size()); for (size_t i = 0; i < v.size(); i++) v[i] = (floatX)dwpe_init[i]; return v; }();

    SparseRows ref_wte(C);
    std::vector<double> ref_wpe;
    reference_backward(ref_wte, ref_wpe, dwte_init, dwpe_init, {&inp}, dout, B, T, C);

    reset_grads();
    encoder_backward(d_dwte.ptr, d_dwpe.ptr, &ws, d_dout.ptr, inp.data(), B, T, C, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    const std::vector<floatX> dwte1 = download_raw(d_dwte), dwpe1 = download_raw(d_dwpe);
    {
        size_t n_ints = 0;
        const EncoderBackwardPlan plan = encoder_backward_plan(&ws, inp.data(), B, T, &n_ints);
        row.buckets = plan.nseg - plan.nbigseg + plan.nbig;
        row.split = plan.nbig;
        row.segments = plan.nseg;
        printf("  plan: %d buckets (%d split into %d segments), %d segments in all, %zu ints uploaded\n", row.buckets,
               plan.nbig, plan.nbigseg, plan.nseg, n_ints);
    }
    row.ok &= check_backward(tally, "backward", dwte1, dwpe1, ref_wte, ref_wpe, dwte_init_bits, dwpe_init_bits, T, C, tol);
    {  // error summary for the table: max of the two
        ErrAcc e;
        for (int r : ref_wte.rows)
            for (int c = 0; c < C; c++) e.add((float)dwte1[(size_t)r * C + c], ref_wte.vals[(size_t)ref_wte.slot[r] * C + c]);
        ErrAcc e2;
        for (size_t i = 0; i < (size_t)T * C; i++) e2.add((float)dwpe1[i], ref_wpe[i]);
        row.bwd_rel = std::max(e.result(tol).rel, e2.result(tol).rel);
    }

    // determinism: same initial gradients, same inputs
    reset_grads();
    encoder_backward(d_dwte.ptr, d_dwpe.ptr, &ws, d_dout.ptr, inp.data(), B, T, C, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    row.det = same_bits(dwte1, download_raw(d_dwte)) && same_bits(dwpe1, download_raw(d_dwpe)) && fwd_det;
    row.ok &= tally.check("backward deterministic (memcmp)", same_bits(dwte1, download_raw(d_dwte)) &&
                                                                 same_bits(dwpe1, download_raw(d_dwpe)));

    // back to back with different token ids, no synchronization in between; forward launches first so
    // that the first upload is still queued when the second call builds its plan
    reset_grads();
    for (int i = 0; i < 4; i++) encoder_forward(d_out.ptr, d_inp.ptr, d_wte.ptr, d_wpe.ptr, B, T, C, stream);
    encoder_backward(d_dwte.ptr, d_dwpe.ptr, &ws, d_dout.ptr, inp.data(), B, T, C, stream);
    encoder_backward(d_dwte.ptr, d_dwpe.ptr, &ws, d_dout.ptr, inp2.data(), B, T, C, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    {
        SparseRows ref2(C);
        std::vector<double> ref2_wpe;
        reference_backward(ref2, ref2_wpe, dwte_init, dwpe_init, {&inp, &inp2}, dout, B, T, C);
        row.ok &= check_backward(tally, "2 calls", download_raw(d_dwte), download_raw(d_dwpe), ref2, ref2_wpe,
                                 dwte_init_bits, dwpe_init_bits, T, C, tol);
    }

    if (timing) {
        const double s = sizeof(floatX);
        row.fwd_ms = time_median_ms([&] { encoder_forward(d_out.ptr, d_inp.ptr, d_wte.ptr, d_wpe.ptr, B, T, C, stream); },
                                    3, 20, stream);
        row.fwd_bytes = 2.0 * BT * C * s + (double)T * C * s + 4.0 * BT;
        size_t n_ints = 0;
        const EncoderBackwardPlan plan = encoder_backward_prepare(&ws, inp.data(), B, T, stream);
        row.bwd_kernels_ms = time_median_ms(
            [&] { encoder_backward_launch(d_dwte.ptr, d_dwpe.ptr, &ws, plan, d_dout.ptr, B, T, C, stream); }, 3, 20, stream);
        row.bwd_bytes = 2.0 * BT * C * s                      // dout, read by the dwpe and the dwte kernels
                        + 2.0 * row.buckets * C * s           // dwte rows that occur, read + written
                        + 2.0 * T * C * s                     // dwpe rows, read + written
                        + 2.0 * plan.nbigseg * C * 4.0        // fp32 partial rows, written + read
                        + 4.0 * (BT + 2.0 * plan.nseg);       // positions and segment lists
        row.bwd_call_ms = time_median_ms(
            [&] { encoder_backward(d_dwte.ptr, d_dwpe.ptr, &ws, d_dout.ptr, inp.data(), B, T, C, stream); }, 3, 20, stream);
        std::vector<double> ms;
        for (int i = 0; i < 11; i++) {
            const auto t0 = std::chrono::steady_clock::now();
            encoder_backward_plan(&ws, inp.data(), B, T, &n_ints);
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        row.plan_ms = ms[ms.size() / 2];
        cudaCheck(cudaStreamSynchronize(stream));
    }
    encoder_backward_workspace_destroy(&ws);
    cudaCheck(cudaStreamDestroy(stream));
    return row;
}

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("encoder harness | device: %s (sm_%d%d, %d SMs) | floatX = %s | V = %d, Vp = %d, maxT = %d\n", prop.name,
           prop.major, prop.minor, prop.multiProcessorCount, PRECISION_MODE_NAME, V, Vp, MAXT);
    printf("tolerance (norm-relative): %.0e for out, dwte, dwpe | timing: %s\n", floatX_tolerance(),
           timing ? "median of 20 after 3 warm-up (cudaEvents)" : "off (--check-only)");

    const Case cases[] = {
        {4, 64, 64, 3, 0.9, "3 frequent ids on 90% of positions (buckets of ~77: split)"},
        {2, 33, 320, 4, 0.7, "4 frequent ids on 70% of positions (small buckets only)"},
        {64, 1024, 768, 100, 0.9, "100 frequent ids on 90% of positions (buckets of ~590: split)"},
        {8, 1024, 768, 0, 0.0, "every position the same id (one bucket of 8192)"},
    };
    Tally tally;
    std::vector<Row> rows;
    uint64_t seed = 1000;
    for (const Case& cs : cases) rows.push_back(run_case(cs, seed += 100, timing, tally));

    printf("\n%-14s | %-9s | %-9s | %-3s | %-16s | %-17s | %-21s | %-11s | %-12s | %s\n", "(B,T,C)", "fwd err", "bwd err",
           "det", "buckets/split/seg", "fwd ms (GB/s)", "bwd kernels ms (GB/s)", "bwd call ms", "host plan ms", "");
    for (const Row& r : rows) {
        char shape[32], bk[32], fms[32], bms[40], cms[16], pms[16];
        snprintf(shape, sizeof shape, "(%d,%d,%d)", r.cs.B, r.cs.T, r.cs.C);
        snprintf(bk, sizeof bk, "%d/%d/%d", r.buckets, r.split, r.segments);
        if (r.fwd_ms >= 0) {
            snprintf(fms, sizeof fms, "%.4f (%.0f)", r.fwd_ms, r.fwd_bytes / (r.fwd_ms * 1e-3) / 1e9);
            snprintf(bms, sizeof bms, "%.4f (%.0f)", r.bwd_kernels_ms, r.bwd_bytes / (r.bwd_kernels_ms * 1e-3) / 1e9);
            snprintf(cms, sizeof cms, "%.4f", r.bwd_call_ms);
            snprintf(pms, sizeof pms, "%.3f", r.plan_ms);
        } else {
            snprintf(fms, sizeof fms, "-");
            snprintf(bms, sizeof bms, "-");
            snprintf(cms, sizeof cms, "-");
            snprintf(pms, sizeof pms, "-");
        }
        printf("%-14s | %.3e | %.3e | %-3s | %-16s | %-17s | %-21s | %-11s | %-12s | %s\n", shape, r.fwd_rel, r.bwd_rel,
               r.det ? "yes" : "NO", bk, fms, bms, cms, pms, r.ok ? "PASS" : "FAIL");
    }
    printf("(fwd ms (GB/s): bytes = out write + gathered wte rows + wpe rows + token ids; bwd kernels: kernels only,\n"
           " bytes = dout read twice + used dwte rows and dwpe rows read+written + fp32 partials + plan; bwd call: the\n"
           " whole encoder_backward on the GPU timeline, host plan + upload + kernels; host plan: CPU ms of the grouping.\n"
           " H100 SXM: HBM3 ~3.35 TB/s peak, ~3 TB/s achievable for a copy.)\n");
    return tally.finish();
}
