// cutlass_q115_gemm.cu - correctness and speed of llmc/kernels/gemm/cutlass_q115_gemm.h (issue 27, deliverable 2): the
// SF16 linear-layer forward as one CUTLASS BF16 GEMM whose epilogue adds the bias, rounds to BF16 and applies the
// MATMUL_OUT boundary (and for the fc layer stores the quantized pre-activation and applies GELU and the GELU_OUT
// boundary), instead of cuBLASLt + the boundary pass (gemm_boundary_apply) / the GELU kernel (gemm_gelu_apply<true>).
//
// Build and run (from the repository root, on an H100; CUTLASS from CUTLASS_HOME or scripts/setup_env.sh's venv):
//   make -j16 build/q115/dev/cutlass_q115_gemm ENABLE_Q115=1 CUTLASS_HOME=$CUTLASS_HOME && build/q115/dev/cutlass_q115_gemm
//   (ENABLE_Q115=1 SF16_TRUE_FORWARD=1: build/q115_tf/..., which checks the Q1.31 + Q1.15 chain)
//   --check-only: no timings; --quick: no GPT-2-sized checks
// In a build without SF16 it says it skips and exits 0: its references are that build's own boundary passes.
//
// The mode under test, M: this build's MATMUL_OUT chain (CUTLASS_Q115_Q115, or CUTLASS_Q115_Q131 under SF16_TRUE_FORWARD).
// Inputs (fresh every run; the seed is printed): inp (N, C), weight (OC, C), bias (OC) BF16, uniform in [-1, 1) times
// per-case scales: "plain" (outputs around +-1: the clamp and the 2^-15 grid both act), "small" (inp times 2^-6:
// outputs below 2^-8, where Q1.15 rounds BF16 values and Q1.31 differs from the identity), "special" (plain, bias +Inf
// at column 5 and NaN at column 40).
// Checks (outputs poisoned with 0xFF bytes before every run; 64 guard elements after each output must stay poisoned):
//   (a) mode OFF: out = bf16(acc + bias) against float64 on sampled rows (gemm_rows_vs_float64: per element 2^-8 |ref|
//       + 2^-16 S, rel 4e-3; Inf / NaN columns exact); a second run bitwise equal.
//   (b) mode M: out bit for bit the trainer's pass, gemm_boundary_apply (compiled here with the trainer's flags) on a copy
//       of (a)'s out; and it differs from (a)'s out (the boundary acts: control).
//   (g) GELU form, mode M: pre bit for bit the pass on (a)'s out and out bit for bit gemm_gelu_apply<true>'s (the fc
//       route: the pre-activation's boundary, gemm_gelu_stored) on a copy of it.
//   (e) the epilogue's functions alone (cutlass_q115_gemm_eval): Q of every BF16 value (all 65536 patterns) and of 2^20
//       random floats against boundary_value<MATMUL_OUT> of their BF16 rounding, and the GELU form on all 65536 BF16
//       values against gemm_gelu_stored: bit for bit (NaN against NaN).
//   (d) odd shapes (N, OC, K not multiples of the tile, N = 1), bias NULL.
//   refusals: misaligned pointer, C % 8 != 0, pre == out, mode 3, the GELU form without a boundary.
// Timing (not with --check-only; median of 25 after 3 warm-ups): the SF16 forward GEMMs of d12 B=64 and d24 B=32
// (qkv, attention projection, fc with GELU, fc projection): cuBLASLt GEMM + bias alone, today's route (matmul_forward
// in this build: cuBLASLt + the pass / the GELU kernel), CUTLASS with mode OFF and with mode M. The table is printed last.
// Prediction (before the first GPU run; cuBLASLt + pass rows from doc/TCAST.md 5.6 and the byte counts of the passes):
// CUTLASS without the boundary within 5% of cuBLASLt (0.344 vs 0.333 ms at d12 qkv), the boundary adds <= 0.02 ms (5
// instructions an element on a latency-bound cooperative epilogue), so d12 qkv ~0.36 ms against ~0.53, projections
// ~0.14 against ~0.19; the GELU form ~0.8 ms (the measured uncast GELU epilogue) against cuBLASLt 0.45 + the GELU
// kernel ~0.4: close. Sum over a d12 step: ~3-5 ms saved of 143 (SF16 1.12x -> ~1.09x of BF16).
//
// Last lines: the timing table, then `N passed, N failed`; exit status 1 if any check failed.

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <string>
#include <vector>
#include "dev/cuda/harness.cuh"

#if !defined(ENABLE_Q115)

int main() {
    printf("cutlass_q115_gemm: skipped: its references are the SF16 build's boundary passes; this build is %s (build with "
           "ENABLE_Q115=1)\n",
           PRECISION_MODE_NAME);
    return 0;
}

#else

#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/kernels/gemm/cutlass_q115_gemm.h"

namespace {

Tally tally;
cudaStream_t g_stream;
constexpr int kGuard = 64;  // poisoned elements after every output
const CutlassQ115Mode kMode = kSf16TrueForward ? CUTLASS_Q115_Q131 : CUTLASS_Q115_Q115;

enum Kind { PLAIN = 0, SMALL = 1, SPECIAL = 2 };
const char* const kKindName[] = {"plain", "small", "special"};

struct Case {
    const char* what;
    int N, C, OC;
    Kind kind;
    bool bias;
};

struct Inputs {
    std::vector<float> inp, w, bias;  // BF16 values as floats; bias empty: none
};

Inputs make_inputs(const Case& c, uint64_t seed) {
    Inputs in;
    in.inp = random_uniform((size_t)c.N * c.C, seed, -1.0f, 1.0f);
    in.w = random_uniform((size_t)c.OC * c.C, seed + 1, -0.08f, 0.08f);
    if (c.kind == SMALL)
        for (float& v : in.inp) v *= 0x1p-6f;
    if (c.bias) {
        in.bias = random_uniform(c.OC, seed + 2, c.kind == SMALL ? -0x1p-9f : -0.5f, c.kind == SMALL ? 0x1p-9f : 0.5f);
        if (c.kind == SPECIAL) {
            if (c.OC > 5) in.bias[5] = INFINITY;
            if (c.OC > 40) in.bias[40] = NAN;
        }
    }
    round_to_floatX(in.inp);
    round_to_floatX(in.w);
    round_to_floatX(in.bias);
    return in;
}

bool guard_ok(const floatX* out, size_t n) { return device_guard_poisoned(out, n, kGuard); }

void sync() {
    cudaCheck(cudaStreamSynchronize(g_stream));
    cudaCheck(cudaGetLastError());
}

void run_case(const Case& c, uint64_t seed, bool gelu) {
    printf("\n  -- %s: N=%d C=%d OC=%d, %s inputs%s\n", c.what, c.N, c.C, c.OC, kKindName[c.kind], c.bias ? "" : ", no bias");
    const Inputs in = make_inputs(c, seed);
    const size_t n = (size_t)c.N * c.OC;
    DeviceBuffer<floatX> inp(in.inp.size()), w(in.w.size()), bias(c.OC), y(n + kGuard), y2(n + kGuard), out(n + kGuard), pre(n + kGuard),
        ref(n + kGuard), pre_ref(n + kGuard);
    upload(inp, in.inp);
    upload(w, in.w);
    if (c.bias) upload(bias, in.bias);
    const floatX* b = c.bias ? bias.ptr : nullptr;
    // (a) mode OFF against float64, twice
    poison_all(y, y2);
    cutlass_q115_gemm_forward(y.ptr, nullptr, inp.ptr, w.ptr, b, c.N, c.C, c.OC, CUTLASS_Q115_OFF, g_stream);
    cutlass_q115_gemm_forward(y2.ptr, nullptr, inp.ptr, w.ptr, b, c.N, c.C, c.OC, CUTLASS_Q115_OFF, g_stream);
    sync();
    const GemmRowsResult g = gemm_rows_vs_float64(y.ptr, in.inp, in.w, in.bias, c.N, c.C, c.OC, 1234 + c.N, 4e-3);
    char label[200];
    snprintf(label, sizeof(label), "(a) mode off vs float64 (%zu rows)", g.rows);
    tally.check(label, g.r, 4e-3);
    if (g.bad || g.special_bad) printf("      %zu elements beyond the per-element bound, %zu wrong Inf / NaN\n", g.bad, g.special_bad);
    tally.check("(a) second run bitwise equal, guards", device_mismatch16(y.ptr, y2.ptr, n, c.OC, false) == 0 && guard_ok(y.ptr, n) && guard_ok(y2.ptr, n));
    // (b) mode M against the pass on y
    poison_all(out, ref);
    cutlass_q115_gemm_forward(out.ptr, nullptr, inp.ptr, w.ptr, b, c.N, c.C, c.OC, kMode, g_stream);
    cudaCheck(cudaMemcpyAsync(ref.ptr, y.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice, g_stream));
    gemm_boundary_apply(ref.ptr, n, g_stream);
    sync();
    const size_t bad = device_mismatch16(out.ptr, ref.ptr, n, c.OC, true);
    tally.check("(b) boundary = the pass, bit for bit", bad == 0 && guard_ok(out.ptr, n));
    if (n >= 1024) {
        const size_t moved = device_mismatch16(out.ptr, y.ptr, n, c.OC, false);
        printf("      control: the boundary changed %zu of %zu element pairs\n", moved, (n + 1) / 2);
        tally.check("(b) control: the boundary acts", moved > 0);
    }
    if (!gelu) return;
    // (g) the GELU form: mode M against the fc route on y; mode OFF: pre = y
    poison_all(out, pre, ref, pre_ref);
    cutlass_q115_gemm_forward(out.ptr, pre.ptr, inp.ptr, w.ptr, b, c.N, c.C, c.OC, kMode, g_stream);
    cudaCheck(cudaMemcpyAsync(pre_ref.ptr, y.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice, g_stream));
    gemm_gelu_apply<true>(ref.ptr, pre_ref.ptr, n, g_stream);
    sync();
    const size_t bad_pre = device_mismatch16(pre.ptr, pre_ref.ptr, n, c.OC, true), bad_out = device_mismatch16(out.ptr, ref.ptr, n, c.OC, true);
    if (bad_pre || bad_out) printf("      differing element pairs: pre %zu, out %zu\n", bad_pre, bad_out);
    tally.check("(g) GELU form = the fc route, bit for bit", bad_pre == 0 && bad_out == 0 && guard_ok(pre.ptr, n) && guard_ok(out.ptr, n));
}

// (e): the epilogue's functions on their own against this build's device code (compiled with the trainer's flags).
__global__ void bound_ref_kernel(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)(floatX)boundary_value<MATMUL_OUT>((float)(floatX)in[i]);
}
__global__ void gelu_ref_kernel(const float* in, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)gemm_gelu_stored(in[i]);
}

void check_eval(uint64_t seed) {
    printf("\n  -- (e) the epilogue's functions alone\n");
    std::vector<float> all(65536);
    for (uint32_t u = 0; u < 65536; u++) {
        const uint32_t bits = u << 16;
        memcpy(&all[u], &bits, 4);
    }
    std::vector<float> rnd = random_uniform(1 << 20, seed, -1.0f, 1.0f);
    HostRng r(seed + 5);
    for (float& v : rnd) v = ldexpf(v, (int)(r.u32() % 48) - 40);  // 2^-40 .. 2^8 in magnitude
    struct Set {
        const char* name;
        const std::vector<float>* in;
        int gelu;
    } sets[] = {{"Q of all BF16 values", &all, 0}, {"Q of 2^20 random floats", &rnd, 0}, {"GELU form of all BF16 values", &all, 1}};
    for (const Set& s : sets) {
        const int n = (int)s.in->size();
        DeviceBuffer<float> in(n), got(n), want(n);
        upload(in, *s.in);
        poison_all(got, want);
        cutlass_q115_gemm_eval(in.ptr, got.ptr, n, s.gelu, kMode);
        if (s.gelu) gelu_ref_kernel<<<(n + 255) / 256, 256>>>(in.ptr, want.ptr, n);
        else bound_ref_kernel<<<(n + 255) / 256, 256>>>(in.ptr, want.ptr, n);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<float> hg(n), hw(n);
        cudaCheck(cudaMemcpy(hg.data(), got.ptr, n * 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(hw.data(), want.ptr, n * 4, cudaMemcpyDeviceToHost));
        size_t bad = 0;
        for (int i = 0; i < n; i++) {
            const bool same = isnan(hw[i]) ? isnan(hg[i]) : memcmp(&hg[i], &hw[i], 4) == 0;
            if (!same && bad++ < 4) printf("      input %.9g: epilogue %.9g, trainer %.9g\n", (*s.in)[i], hg[i], hw[i]);
        }
        char label[160];
        snprintf(label, sizeof(label), "(e) %s (%d) bit for bit", s.name, n);
        if (bad) printf("      %zu of %d differ\n", bad, n);
        tally.check(label, bad == 0);
    }
}

void check_refusals() {
    printf("\n  -- refusals\n");
    DeviceBuffer<floatX> a(1024 * 64), b(64 * 64), o(1024 * 64), p(1024 * 64);
    struct R {
        const char* what;
        const char* why;
    } rs[] = {
        {"misaligned out", cutlass_q115_gemm_unsupported(1024, 64, 64, o.ptr + 1, nullptr, a.ptr, b.ptr, nullptr, kMode)},
        {"misaligned pre", cutlass_q115_gemm_unsupported(1024, 64, 64, o.ptr, p.ptr + 4, a.ptr, b.ptr, nullptr, kMode)},
        {"C % 8 != 0", cutlass_q115_gemm_unsupported(1024, 60, 64, o.ptr, nullptr, a.ptr, b.ptr, nullptr, kMode)},
        {"OC % 8 != 0", cutlass_q115_gemm_unsupported(1024, 64, 60, o.ptr, nullptr, a.ptr, b.ptr, nullptr, kMode)},
        {"pre == out", cutlass_q115_gemm_unsupported(1024, 64, 64, o.ptr, o.ptr, a.ptr, b.ptr, nullptr, kMode)},
        {"mode 3", cutlass_q115_gemm_unsupported(1024, 64, 64, o.ptr, nullptr, a.ptr, b.ptr, nullptr, 3)},
        {"GELU form, mode 0", cutlass_q115_gemm_unsupported(1024, 64, 64, o.ptr, p.ptr, a.ptr, b.ptr, nullptr, CUTLASS_Q115_OFF)},
        {"weight NULL", cutlass_q115_gemm_unsupported(1024, 64, 64, o.ptr, nullptr, a.ptr, nullptr, nullptr, kMode)},
    };
    for (const R& x : rs) {
        printf("      %-16s %s\n", x.what, x.why ? x.why : "(accepted)");
        char label[96];
        snprintf(label, sizeof(label), "refused: %s", x.what);
        tally.check(label, x.why != nullptr);
    }
    tally.check("accepted: a valid call", cutlass_q115_gemm_unsupported(1024, 64, 64, o.ptr, p.ptr, a.ptr, b.ptr, nullptr, kMode) == nullptr);
}

// ---- timing

struct TimeRow {
    std::string shape, what;
    float ms;
    double tflops;
};

void time_shape(const char* label, int N, int C, int OC, bool gelu, uint64_t seed, GemmContext* gctx, std::vector<TimeRow>* rows) {
    const size_t n = (size_t)N * OC;
    std::vector<float> hi = random_uniform((size_t)N * C, seed, -1.0f, 1.0f), hw = random_uniform((size_t)OC * C, seed + 1, -0.05f, 0.05f),
                       hb = random_uniform(OC, seed + 2, -0.5f, 0.5f);
    DeviceBuffer<floatX> inp(hi.size()), w(hw.size()), bias(OC), out(n), pre(n);
    upload(inp, hi);
    upload(w, hw);
    upload(bias, hb);
    floatX* p = gelu ? pre.ptr : nullptr;
    const double flop = 2.0 * N * C * OC;
    auto add = [&](const char* what, float ms) { rows->push_back({label, what, ms, flop / (ms * 1e-3) / 1e12}); };
    auto t = [&](auto fn) { return time_median_ms(fn, 3, 25, g_stream); };
    add("cuBLASLt GEMM + bias alone", t([&] { gemm_backend_forward(gctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, nullptr); }));
    add(gelu ? "today: cuBLASLt + GELU kernel" : "today: cuBLASLt + boundary pass",
        t([&] { matmul_forward(gctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, p); }));
    if (!gelu)
        add("CUTLASS, mode off", t([&] { cutlass_q115_gemm_forward(out.ptr, p, inp.ptr, w.ptr, bias.ptr, N, C, OC, CUTLASS_Q115_OFF, g_stream); }));
    add("CUTLASS + boundary", t([&] { cutlass_q115_gemm_forward(out.ptr, p, inp.ptr, w.ptr, bias.ptr, N, C, OC, kMode, g_stream); }));
    cudaCheck(cudaGetLastError());
}

void print_table(const std::vector<TimeRow>& rows) {
    printf("\n==== timing (median of 25, ms; vs = the shape's today time / this time)\n");
    printf("%-26s %-34s %9s %8s %7s\n", "shape", "kernel(s)", "ms", "TFLOP/s", "vs");
    for (const TimeRow& r : rows) {
        float base = 0;
        for (const TimeRow& q : rows)
            if (q.shape == r.shape && q.what.rfind("today", 0) == 0) base = q.ms;
        printf("%-26s %-34s %9.4f %8.1f %6.2fx\n", r.shape.c_str(), r.what.c_str(), r.ms, r.tflops, base > 0 ? base / r.ms : 0.0);
    }
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    const bool timing = harness_parse_args(argc, argv, "--quick", &quick);
    const cudaDeviceProp prop = harness_device();
    printf("cutlass_q115_gemm: %s (sm_%d%d, %d SMs), mode %s\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           kMode == CUTLASS_Q115_Q131 ? "Q1.31 + Q1.15 (true forward)" : "Q1.15");
    if (prop.major != 9 || prop.minor != 0) {
        printf("the kernel is sm_90a code: this harness needs a compute capability 9.0 GPU\n");
        tally.failed++;
        return tally.finish();
    }
    const uint64_t seed = (uint64_t)time(nullptr);
    printf("seed %llu\n  %s\n", (unsigned long long)seed, cutlass_q115_gemm_describe());
    cudaCheck(cudaStreamCreate(&g_stream));
    check_refusals();
    check_eval(seed);
    const Case cases[] = {
        {"odd shape: partial tiles in M, N and K", 1000, 72, 96, PLAIN, true},
        {"odd shape: N = 77, OC = 280", 77, 136, 280, PLAIN, true},
        {"one row, no bias", 1, 8, 32, PLAIN, false},
        {"small outputs (below 2^-8)", 1024, 256, 512, SMALL, true},
        {"Inf / NaN bias columns", 300, 64, 128, SPECIAL, true},
        {"GPT-2 d12 qkv, B=64 T=1024", 65536, 768, 2304, PLAIN, true},
        {"GPT-2 d12 fc, B=64 T=1024", 65536, 768, 3072, PLAIN, true},
    };
    for (int k = 0; k < (int)(sizeof(cases) / sizeof(cases[0])); k++) {
        if (quick && cases[k].N > 4096) continue;
        run_case(cases[k], seed + 101 * k, true);
    }
    if (timing) {
        GemmContext gctx;
        gemm_context_init(&gctx, g_stream);
        std::vector<TimeRow> rows;
        time_shape("d12 qkv 65536x768>2304", 65536, 768, 2304, false, seed + 11, &gctx, &rows);
        time_shape("d12 attproj 65536x768>768", 65536, 768, 768, false, seed + 12, &gctx, &rows);
        time_shape("d12 fc+GELU 65536x768>3072", 65536, 768, 3072, true, seed + 13, &gctx, &rows);
        time_shape("d12 fcproj 65536x3072>768", 65536, 3072, 768, false, seed + 14, &gctx, &rows);
        time_shape("d24 qkv 32768x1024>3072", 32768, 1024, 3072, false, seed + 15, &gctx, &rows);
        time_shape("d24 fc+GELU 32768x1024>4096", 32768, 1024, 4096, true, seed + 16, &gctx, &rows);
        time_shape("d24 fcproj 32768x4096>1024", 32768, 4096, 1024, false, seed + 17, &gctx, &rows);
        print_table(rows);
        gemm_context_free(&gctx);
    }
    cutlass_q115_gemm_free();
    cudaCheck(cudaStreamDestroy(g_stream));
    return tally.finish();
}

#endif
