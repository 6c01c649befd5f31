// cutlass_tcast_gemm.cu - correctness and speed of llmc/kernels/gemm/cutlass_tcast_gemm.h (issue 26): the TensorCast
// build's linear-layer forward as one CUTLASS BF16 GEMM whose epilogue adds the bias, rounds to BF16 and casts the
// output to its MATMUL_OUT data type (32-column groups along the rows), instead of cuBLASLt + the in-place cast pass.
//
// Build and run (from the repository root, on an H100; CUTLASS from CUTLASS_HOME or scripts/setup_env.sh's venv):
//   make -j16 build/tcast/dev/cutlass_tcast_gemm TCAST=1 CUTLASS_HOME=$CUTLASS_HOME && build/tcast/dev/cutlass_tcast_gemm
//   --check-only: no timings; --quick: no GPT-2-sized check (the timings still run unless --check-only)
// In a build whose floatX is not BF16 it says it skips and exits 0 (the cast pass casts BF16 storage).
//
// Inputs (fresh every run; the seed is printed): inp (N, C), weight (OC, C), bias (OC) BF16, uniform in [-1, 1) times
// per-case scales: "plain"; "wide" (row n of inp times 2^a_n, a_n in [-30, 30], column o of the output through weight
// row o times 2^b_o, b_o in [-12, 12]: groups whose members span many binades, flushes and saturation); "tiny" (inp and
// weight times 2^-64, bias times 2^-128: outputs near and below the float32 normal range, BF16 subnormals, groups whose
// E8M0 scale clamps: the quantizers' exact out-of-line path); "special" (plain, plus bias +Inf at column 5 and NaN at
// column 40: NaN groups in every row).
// Checks (outputs poisoned with 0xFF bytes before every run; 64 guard elements after out must stay poisoned):
//   (a) cast off: out against the float64 product + bias on sampled rows (all rows of small problems, else 64 with the
//       first and the last): per element |out - ref| <= 2^-8 |ref| + 2^-16 S (S = Σ|inp · w| + |bias|: BF16 rounding
//       plus fp32 accumulation), every element finite (not for "special", whose Inf / NaN columns must be Inf / NaN
//       exactly where the reference is); a second run bitwise equal (deterministic). Not asserted for "tiny" (its
//       products lie below the float32 normal range, where the tensor cores' subnormal handling decides): printed.
//   (b) cast on, for every data type the epilogue takes (the list below, deterministic round modes): out bit for bit
//       equal to the trainer's own pass, tcast_cast(ref, y, N, OC, 1, dt, seed) of llmc/kernels/tcast/tcast_cast.cuh
//       (compiled here with the trainer's flags, --use_fast_math) on the kernel's uncast output y of (a).
//   (c) stochastic rounding (@stochastic types): likewise bit for bit, same seed; and a second seed gives other bits.
//   (d) odd shapes: N, OC not multiples of any tile, K not a multiple of 64, N = 1; OC % 32 != 0: every cast refused
//       by cutlass_tcast_gemm_unsupported (with its reason printed) and the uncast GEMM checked as in (a).
//   (e) controls that must differ (checked to differ): the pass with another seed (stochastic), with another data type
//       (mxfp8e5 for mxfp8e4) and with another tile (e4m3fn_e8m0_t16 for mxfp8e4) against the kernel's mxfp8e4 bits.
//   (g) the fc layer's GELU epilogue (cutlass_tcast_gemm_forward_gelu): pre and out bit for bit against the trainer's
//       route on the kernel's own uncast output (tcast_gelu_cast with fuse = false: the pre cast pass, gemm_gelu_stored
//       compiled here with --use_fast_math, the out cast pass), for pairs of site types (either off, RNE and exponent
//       quantizers, stochastic); out equal with pre = NULL; a control (pre cast to mxfp8e5) must change out.
//   refusals: the types the epilogue does not take (other tiles, per-tensor, float scales, M:N sparsity, dim 0,
//   float32 elements) are refused with a reason, never run.
// Timing (not with --check-only; median of 25 after 3 warm-ups, CUDA events, one stream): d12 qkv (65536 x 768 ->
// 2304), d12 attproj (65536 x 768 -> 768), d24 qkv (32768 x 1024 -> 3072): cuBLASLt GEMM + bias alone
// (matmul_forward, no casts attached), the mxfp8e4 pass alone, cuBLASLt + pass (today's TensorCast forward), and per
// configuration the CUTLASS GEMM without and with the mxfp8e4 epilogue cast; d12 fc (65536 x 768 -> 3072): cuBLASLt
// + the GELU-sites route (both sites mxfp8e4, fused as the trainer runs it) against each configuration's GELU epilogue
// without and with both casts. The table is printed last.
// Prediction (written before the first GPU run): at d12 qkv cuBLASLt ~0.40 ms + the pass 0.235 ms; the CUTLASS GEMM
// without cast within 10% of cuBLASLt, and the cast epilogue adds 0.03-0.08 ms (about 15 integer / float operations
// and 2 shuffles per element on 151M elements, ~0.08 ms of issue time if none of it overlaps the other CTA's
// mainloop), so CUTLASS + cast ~0.45 ms against ~0.63 ms: 0.15-0.2 ms saved per qkv layer. fc (both casts and the
// GELU in the epilogue, ~3x the qkv epilogue's work per element on 201M elements, and a second stored output): today
// ~0.52 ms GEMM + ~0.5 ms GELU-sites kernel; the epilogue version ~0.7-0.8 ms cooperative, less ping-pong.
// Measured (H100, 2026-11-27, doc/TCAST.md 5.6): qkv 0.594 ms at best, fc 1.75: the cast epilogue loses to the pass.
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

#if !defined(ENABLE_BF16)

int main() {
    printf("cutlass_tcast_gemm: skipped: the TensorCast cast pass casts BF16 storage; this build is %s (build with TCAST=1)\n",
           PRECISION_MODE_NAME);
    return 0;
}

#else

#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/kernels/tcast/tcast_cast.cuh"
#include "llmc/kernels/tcast/tcast_gelu.cuh"
#include "llmc/kernels/gemm/cutlass_tcast_gemm.h"

namespace {

Tally tally;
cudaStream_t g_stream;

constexpr int kGuard = 64;  // poisoned elements after every output

TcastDataType parse_dt(const char* text) {
    TcastDataType dt;
    char err[256];
    if (tcast_parse_datatype(text, &dt, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: harness data type '%s': %s\n", text, err);
        exit(EXIT_FAILURE);
    }
    return dt;
}

// The types the epilogue must take (b, c) and those it must refuse.
const char* const kTaken[] = {"mxfp8e4",        "mxfp8e5",        "mxfp6e3",         "mxfp6e2",   "mxfp4e2",
                              "mxint8",         "mxint4",         "mxfp8e4@nearest", "mxfp8e4@zero", "mxfp8e4@midmax",
                              "e4m3fn",         "e5m2",           "bfloat16",        "q115",      "mxfp8e4@stochastic",
                              "mxint8@stochastic", "e4m3fn@stochastic"};
const char* const kRefused[] = {"bfp16", "e4m3fn_e8m0_t16", "e4m3_e", "int8_b32", "uint8_bb32", "mxfp8e4@2:4", "e4m3fn_e8m0_t32d0", "float32"};

enum Kind { PLAIN = 0, WIDE = 1, TINY = 2, SPECIAL = 3 };
const char* const kKindName[] = {"plain", "wide", "tiny", "special"};

struct Case {
    const char* what;
    int N, C, OC;
    Kind kind;
};

struct Inputs {
    std::vector<float> inp, w, bias;  // BF16 values as floats
};

float pow2f(int e) { return ldexpf(1.0f, e); }

Inputs make_inputs(const Case& c, uint64_t seed) {
    Inputs in;
    HostRng r(seed);
    in.inp.resize((size_t)c.N * c.C);
    in.w.resize((size_t)c.OC * c.C);
    in.bias.resize(c.OC);
    const float si = c.kind == TINY ? pow2f(-64) : 1.0f, sw = c.kind == TINY ? pow2f(-64) * 0.05f : 0.05f;
    for (int n = 0; n < c.N; n++) {
        const float rs = c.kind == WIDE ? pow2f((int)(r.u32() % 61) - 30) : 1.0f;
        for (int k = 0; k < c.C; k++) in.inp[(size_t)n * c.C + k] = r.uniform(-1.0f, 1.0f) * si * rs;
    }
    for (int o = 0; o < c.OC; o++) {
        const float cs = c.kind == WIDE ? pow2f((int)(r.u32() % 25) - 12) : 1.0f;
        for (int k = 0; k < c.C; k++) in.w[(size_t)o * c.C + k] = r.uniform(-1.0f, 1.0f) * sw * cs;
        in.bias[o] = r.uniform(-1.0f, 1.0f) * (c.kind == TINY ? pow2f(-128) : 0.5f);
    }
    if (c.kind == SPECIAL) {
        if (c.OC > 5) in.bias[5] = INFINITY;
        if (c.OC > 40) in.bias[40] = NAN;
    }
    round_to_floatX(in.inp);
    round_to_floatX(in.w);
    round_to_floatX(in.bias);
    return in;
}

// Guard elements after out still poisoned?
bool guard_ok(const floatX* out, size_t n) { return device_guard_poisoned(out, n, kGuard); }

// Differing element pairs between two device (N, OC) outputs; with print, the first few differing elements.
size_t mismatches(const floatX* a, const floatX* b, int N, int OC, bool print) { return device_mismatch16(a, b, (size_t)N * OC, OC, print); }

void cutlass_run(CutlassTcastConfig cfg, floatX* out, const floatX* inp, const floatX* w, const floatX* bias, const Case& c,
                 const TcastDataType* dt, uint64_t seed) {
    cutlass_tcast_gemm_forward(out, inp, w, bias, c.N, c.C, c.OC, dt, seed, g_stream, cfg);
    cudaCheck(cudaStreamSynchronize(g_stream));
    cudaCheck(cudaGetLastError());
}

// (a): y against float64 on sampled rows.
void check_plain(const Case& c, const Inputs& in, const floatX* y, const char* label) {
    const GemmRowsResult g = gemm_rows_vs_float64(y, in.inp, in.w, in.bias, c.N, c.C, c.OC, 1234 + c.N, 4e-3);
    if (c.kind == TINY) {  // products below 2^-126: whether wgmma keeps fp32 subnormals is not this kernel's choice
        printf("      (a) not asserted for tiny inputs: rel %.3e, %zu elements beyond the normal-range bound\n", g.r.rel, g.bad);
        return;
    }
    char name[160];
    snprintf(name, sizeof(name), "(a) %s vs float64 (%zu rows)", label, g.rows);
    tally.check(name, g.r, 4e-3);
    if (g.bad || g.special_bad) printf("      %zu elements beyond the per-element bound, %zu wrong Inf / NaN\n", g.bad, g.special_bad);
}

void run_case(const Case& c, CutlassTcastConfig cfg, uint64_t seed) {
    printf("\n  -- %s: N=%d C=%d OC=%d, %s inputs, configuration %s\n", c.what, c.N, c.C, c.OC, kKindName[c.kind],
           cutlass_tcast_gemm_config_name(cfg));
    const Inputs in = make_inputs(c, seed);
    const size_t n = (size_t)c.N * c.OC;
    DeviceBuffer<floatX> inp(in.inp.size()), w(in.w.size()), bias(c.OC), y(n + kGuard), y2(n + kGuard), out(n + kGuard), ref(n + kGuard);
    upload(inp, in.inp);
    upload(w, in.w);
    upload(bias, in.bias);
    // (a) cast off
    poison_all(y, y2);
    cutlass_run(cfg, y.ptr, inp.ptr, w.ptr, bias.ptr, c, nullptr, 0);
    check_plain(c, in, y.ptr, "no cast");
    cutlass_run(cfg, y2.ptr, inp.ptr, w.ptr, bias.ptr, c, nullptr, 0);
    tally.check("(a) second run bitwise equal, guards", device_mismatch(y.ptr, y2.ptr, n * 2 + (n % 2 ? 2 : 0)) == 0 && guard_ok(y.ptr, n) &&
                                                          guard_ok(y2.ptr, n));
    if (c.OC % 32 != 0) {  // (d): the cast refused
        const TcastDataType dt = parse_dt("mxfp8e4");
        const char* why = cutlass_tcast_gemm_unsupported(c.N, c.C, c.OC, out.ptr, inp.ptr, w.ptr, bias.ptr, &dt, cfg);
        printf("      mxfp8e4 refused: %s\n", why ? why : "(not refused)");
        tally.check("(d) cast refused for OC % 32 != 0", why != nullptr);
        return;
    }
    // (b), (c): each type against the pass on y
    for (const char* name : kTaken) {
        const TcastDataType dt = parse_dt(name);
        const uint64_t cseed = seed * 31 + 7;
        if (const char* why = cutlass_tcast_gemm_unsupported(c.N, c.C, c.OC, out.ptr, inp.ptr, w.ptr, bias.ptr, &dt, cfg)) {
            printf("      %s: refused: %s\n", name, why);
            tally.check("(b) a type the epilogue should take", false);
            continue;
        }
        poison_all(out, ref);
        cutlass_run(cfg, out.ptr, inp.ptr, w.ptr, bias.ptr, c, &dt, cseed);
        tcast_cast(ref.ptr, y.ptr, c.N, c.OC, 1, dt, cseed, nullptr, nullptr, g_stream);
        cudaCheck(cudaStreamSynchronize(g_stream));
        const size_t bad = mismatches(out.ptr, ref.ptr, c.N, c.OC, true);
        char label[160];
        snprintf(label, sizeof(label), "(%c) %s (%s path) = pass, bit for bit", dt.round == TCAST_ROUND_STOCHASTIC ? 'c' : 'b', name,
                 tcast_cast_path_name(tcast_cast_path(dt, false)));
        if (bad) printf("      %zu of %zu element pairs differ\n", bad, n / 2);
        tally.check(label, bad == 0 && guard_ok(out.ptr, n));
        if (dt.round == TCAST_ROUND_STOCHASTIC && n >= 1024 && c.kind != TINY) {  // (c) and (e): another seed must differ
            tcast_cast(ref.ptr, y.ptr, c.N, c.OC, 1, dt, cseed + 1, nullptr, nullptr, g_stream);
            cudaCheck(cudaStreamSynchronize(g_stream));
            const size_t other = mismatches(out.ptr, ref.ptr, c.N, c.OC, false);
            printf("      control: the pass with seed + 1 differs in %zu element pairs\n", other);
            tally.check("(e) control: another seed differs", other > 0);
        }
        if (!strcmp(name, "mxfp8e4") && n >= 1024 && c.kind != TINY) {  // (e): another type, another tile must differ
            const char* const others[] = {"mxfp8e5", "e4m3fn_e8m0_t16"};
            for (const char* o : others) {
                const TcastDataType odt = parse_dt(o);
                tcast_cast(ref.ptr, y.ptr, c.N, c.OC, 1, odt, cseed, nullptr, nullptr, g_stream);
                cudaCheck(cudaStreamSynchronize(g_stream));
                const size_t other = mismatches(out.ptr, ref.ptr, c.N, c.OC, false);
                printf("      control: the pass with %s differs in %zu element pairs\n", o, other);
                snprintf(label, sizeof(label), "(e) control: %s differs", o);
                tally.check(label, other > 0);
            }
        }
    }
}

// ---- the fc layer: the GELU epilogue (cutlass_tcast_gemm_forward_gelu)

// (g): pre and out of the GELU GEMM bit for bit against the trainer's route on the kernel's own uncast output y:
// tcast_gelu_cast(out, pre = y, ..., BOUNDARY_GELU_FRONT, fuse = false), i.e. the pre cast pass, gemm_gelu_apply
// (gemm_gelu_stored, compiled here with the trainer's --use_fast_math) and the out cast pass; for each pair of site
// types (NULL: the site off), and pre = NULL (not stored) gives the same out.
void run_gelu_case(const Case& c, CutlassTcastConfig cfg, uint64_t seed, bool all_pairs) {
    printf("\n  -- GELU epilogue, %s: N=%d C=%d OC=%d, %s inputs, configuration %s\n", c.what, c.N, c.C, c.OC, kKindName[c.kind],
           cutlass_tcast_gemm_config_name(cfg));
    const Inputs in = make_inputs(c, seed);
    const size_t n = (size_t)c.N * c.OC;
    DeviceBuffer<floatX> inp(in.inp.size()), w(in.w.size()), bias(c.OC), y(n + kGuard), pre(n + kGuard), out(n + kGuard), pre_ref(n + kGuard),
        out_ref(n + kGuard), out2(n + kGuard);
    upload(inp, in.inp);
    upload(w, in.w);
    upload(bias, in.bias);
    poison_all(y);
    cutlass_run(cfg, y.ptr, inp.ptr, w.ptr, bias.ptr, c, nullptr, 0);
    struct Pair {
        const char *a, *b;
    };
    const Pair pairs[] = {{nullptr, nullptr}, {"mxfp8e4", "mxfp8e4"}, {"mxfp8e4@stochastic", "mxfp8e5@stochastic"}, {nullptr, "mxfp8e4"},
                          {"mxfp8e4", nullptr}, {"mxint8", "e4m3fn"}, {"mxfp6e2", "mxfp4e2@nearest"}};
    const int npairs = all_pairs ? (int)(sizeof(pairs) / sizeof(pairs[0])) : 3;
    for (int i = 0; i < npairs; i++) {
        TcastDataType da, db;
        if (pairs[i].a) da = parse_dt(pairs[i].a);
        if (pairs[i].b) db = parse_dt(pairs[i].b);
        const TcastDataType* pa = pairs[i].a ? &da : nullptr;
        const TcastDataType* pb = pairs[i].b ? &db : nullptr;
        const uint64_t sa = seed * 13 + 1, sb = seed * 17 + 2;
        poison_all(pre, out, pre_ref, out_ref, out2);
        cutlass_tcast_gemm_forward_gelu(out.ptr, pre.ptr, inp.ptr, w.ptr, bias.ptr, c.N, c.C, c.OC, pa, sa, pb, sb, g_stream, cfg);
        cutlass_tcast_gemm_forward_gelu(out2.ptr, nullptr, inp.ptr, w.ptr, bias.ptr, c.N, c.C, c.OC, pa, sa, pb, sb, g_stream, cfg);
        cudaCheck(cudaMemcpyAsync(pre_ref.ptr, y.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice, g_stream));
        const TcastSiteCast ca = {pa, sa, nullptr}, cb = {pb, sb, nullptr};
        tcast_gelu_cast(out_ref.ptr, pre_ref.ptr, c.N, c.OC, ca, cb, BOUNDARY_GELU_FRONT, false, nullptr, g_stream);
        cudaCheck(cudaStreamSynchronize(g_stream));
        cudaCheck(cudaGetLastError());
        const size_t bad_pre = mismatches(pre.ptr, pre_ref.ptr, c.N, c.OC, true);
        const size_t bad_out = mismatches(out.ptr, out_ref.ptr, c.N, c.OC, true);
        const size_t bad_nopre = mismatches(out2.ptr, out.ptr, c.N, c.OC, false);
        char label[200];
        snprintf(label, sizeof(label), "(g) pre %s, out %s = the trainer's passes", pairs[i].a ? pairs[i].a : "uncast",
                 pairs[i].b ? pairs[i].b : "uncast");
        if (bad_pre || bad_out || bad_nopre)
            printf("      differing element pairs: pre %zu, out %zu, out without pre %zu (of %zu)\n", bad_pre, bad_out, bad_nopre, n / 2);
        tally.check(label, bad_pre == 0 && bad_out == 0 && bad_nopre == 0 && guard_ok(pre.ptr, n) && guard_ok(out.ptr, n) &&
                               guard_ok(out2.ptr, n));
        if (i == 1 && n >= 1024 && c.kind != TINY) {  // (e) control: the route with pre cast to mxfp8e5 gives another out
            const TcastSiteCast cb2 = {&db, sb, nullptr};
            const TcastDataType d5 = parse_dt("mxfp8e5");
            const TcastSiteCast ca2 = {&d5, sa, nullptr};
            cudaCheck(cudaMemcpyAsync(pre_ref.ptr, y.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice, g_stream));
            tcast_gelu_cast(out_ref.ptr, pre_ref.ptr, c.N, c.OC, ca2, cb2, BOUNDARY_GELU_FRONT, false, nullptr, g_stream);
            cudaCheck(cudaStreamSynchronize(g_stream));
            const size_t other = mismatches(out.ptr, out_ref.ptr, c.N, c.OC, false);
            printf("      control: pre cast to mxfp8e5 instead changes %zu element pairs of out\n", other);
            tally.check("(e) control: another pre type changes out", other > 0);
        }
    }
}

void check_refusals(CutlassTcastConfig cfg) {
    printf("\n  -- refusals (configuration %s)\n", cutlass_tcast_gemm_config_name(cfg));
    DeviceBuffer<floatX> a(1024 * 64), b(64 * 64), o(1024 * 64);
    for (const char* name : kRefused) {
        const TcastDataType dt = parse_dt(name);
        const char* why = cutlass_tcast_gemm_unsupported(1024, 64, 64, o.ptr, a.ptr, b.ptr, nullptr, &dt, cfg);
        printf("      %-20s %s\n", name, why ? why : "(accepted)");
        char label[96];
        snprintf(label, sizeof(label), "refused: %s", name);
        tally.check(label, why != nullptr);
    }
    const char* why = cutlass_tcast_gemm_unsupported(1024, 64, 64, o.ptr + 1, a.ptr, b.ptr, nullptr, nullptr, cfg);
    printf("      misaligned out: %s\n", why ? why : "(accepted)");
    tally.check("refused: misaligned out", why != nullptr);
    why = cutlass_tcast_gemm_unsupported(1024, 60, 64, o.ptr, a.ptr, b.ptr, nullptr, nullptr, cfg);
    tally.check("refused: C % 8 != 0", why != nullptr);
}

// ---- timing

struct TimeRow {
    std::string shape, what;
    float ms;
    double tflops;
};

void time_shape(const char* label, int N, int C, int OC, uint64_t seed, GemmContext* gctx, std::vector<TimeRow>* rows) {
    const size_t n = (size_t)N * OC;
    std::vector<float> hi = random_uniform((size_t)N * C, seed, -1.0f, 1.0f), hw = random_uniform((size_t)OC * C, seed + 1, -0.05f, 0.05f),
                       hb = random_uniform(OC, seed + 2, -0.5f, 0.5f);
    DeviceBuffer<floatX> inp(hi.size()), w(hw.size()), bias(OC), out(n);
    upload(inp, hi);
    upload(w, hw);
    upload(bias, hb);
    const TcastDataType dt = parse_dt("mxfp8e4");
    const double flop = 2.0 * N * C * OC;
    auto add = [&](const char* what, float ms) {
        rows->push_back({label, what, ms, flop / (ms * 1e-3) / 1e12});
    };
    auto t = [&](auto fn) { return time_median_ms(fn, 3, 25, g_stream); };
    add("cuBLASLt GEMM + bias", t([&] { matmul_forward(gctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, nullptr); }));
    add("mxfp8e4 pass alone", t([&] { tcast_cast(out.ptr, out.ptr, N, OC, 1, dt, 5, nullptr, nullptr, g_stream); }));
    add("cuBLASLt + mxfp8e4 pass", t([&] {
            matmul_forward(gctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, nullptr);
            tcast_cast(out.ptr, out.ptr, N, OC, 1, dt, 5, nullptr, nullptr, g_stream);
        }));
    for (int i = 0; i < CUTLASS_TCAST_NUM_CONFIGS; i++) {
        const CutlassTcastConfig cfg = (CutlassTcastConfig)i;
        std::string nm = std::string("CUTLASS ") + cutlass_tcast_gemm_config_name(cfg);
        add((nm + " no cast").c_str(), t([&] {
                cutlass_tcast_gemm_forward(out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, nullptr, 0, g_stream, cfg);
            }));
        add((nm + " + mxfp8e4").c_str(), t([&] {
                cutlass_tcast_gemm_forward(out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, &dt, 5, g_stream, cfg);
            }));
    }
    cudaCheck(cudaGetLastError());
}

// The fc layer with both sites mxfp8e4: today's cuBLASLt GEMM into pre + the GELU-sites route (tcast_gelu_cast, fused
// as the trainer runs it) against each configuration's GELU epilogue.
void time_gelu_shape(const char* label, int N, int C, int OC, uint64_t seed, GemmContext* gctx, std::vector<TimeRow>* rows) {
    const size_t n = (size_t)N * OC;
    std::vector<float> hi = random_uniform((size_t)N * C, seed, -1.0f, 1.0f), hw = random_uniform((size_t)OC * C, seed + 1, -0.05f, 0.05f),
                       hb = random_uniform(OC, seed + 2, -0.5f, 0.5f);
    DeviceBuffer<floatX> inp(hi.size()), w(hw.size()), bias(OC), pre(n), out(n);
    upload(inp, hi);
    upload(w, hw);
    upload(bias, hb);
    const TcastDataType dt = parse_dt("mxfp8e4");
    const TcastSiteCast a = {&dt, 5, nullptr}, b = {&dt, 6, nullptr};
    const double flop = 2.0 * N * C * OC;
    auto add = [&](const char* what, float ms) { rows->push_back({label, what, ms, flop / (ms * 1e-3) / 1e12}); };
    auto t = [&](auto fn) { return time_median_ms(fn, 3, 25, g_stream); };
    add("cuBLASLt GEMM + bias", t([&] { matmul_forward(gctx, pre.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, nullptr); }));
    add("cuBLASLt + GELU sites 2x mxfp8e4", t([&] {  // the baseline row of this shape: today's GEMM + GELU-sites route
            matmul_forward(gctx, pre.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, nullptr);
            tcast_gelu_cast(out.ptr, pre.ptr, N, OC, a, b, BOUNDARY_GELU_FRONT, true, nullptr, g_stream);
        }));
    for (int i = 0; i < CUTLASS_TCAST_NUM_CONFIGS; i++) {
        const CutlassTcastConfig cfg = (CutlassTcastConfig)i;
        std::string nm = std::string("CUTLASS ") + cutlass_tcast_gemm_config_name(cfg) + " GELU";
        add((nm + " no casts").c_str(), t([&] {
                cutlass_tcast_gemm_forward_gelu(out.ptr, pre.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, nullptr, 0, nullptr, 0, g_stream, cfg);
            }));
        add((nm + " + 2x mxfp8e4").c_str(), t([&] {
                cutlass_tcast_gemm_forward_gelu(out.ptr, pre.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, &dt, 5, &dt, 6, g_stream, cfg);
            }));
    }
    cudaCheck(cudaGetLastError());
}

void print_table(const std::vector<TimeRow>& rows) {
    printf("\n==== timing (median of 25, ms; vs = the shape's cuBLASLt + casts time / this time)\n");
    printf("%-22s %-44s %9s %8s %7s\n", "shape", "kernel(s)", "ms", "TFLOP/s", "vs");
    float base = 0;
    std::string cur;
    for (const TimeRow& r : rows) {
        if (r.shape != cur) {
            cur = r.shape;
            base = 0;
            for (const TimeRow& q : rows)
                if (q.shape == cur && q.what.rfind("cuBLASLt + ", 0) == 0) base = q.ms;  // today's GEMM + casts
        }
        printf("%-22s %-44s %9.4f %8.1f %6.2fx\n", r.shape.c_str(), r.what.c_str(), r.ms, r.tflops, base > 0 ? base / r.ms : 0.0);
    }
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    const bool timing = harness_parse_args(argc, argv, "--quick", &quick);
    const cudaDeviceProp prop = harness_device();
    printf("cutlass_tcast_gemm: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    if (prop.major != 9 || prop.minor != 0) {
        printf("the kernels are sm_90a code: this harness needs a compute capability 9.0 GPU\n");
        tally.failed++;
        return tally.finish();
    }
    const uint64_t seed = (uint64_t)time(nullptr);
    printf("seed %llu\n", (unsigned long long)seed);
    cudaCheck(cudaStreamCreate(&g_stream));
    for (int i = 0; i < CUTLASS_TCAST_NUM_CONFIGS; i++)
        printf("  %s: %s\n", cutlass_tcast_gemm_config_name((CutlassTcastConfig)i), cutlass_tcast_gemm_describe((CutlassTcastConfig)i));

    const Case cases[] = {
        {"odd shape: partial tiles in M, N and K", 1000, 72, 96, PLAIN},
        {"odd shape: N = 77, OC = 288", 77, 136, 288, PLAIN},
        {"one row", 1, 8, 32, PLAIN},
        {"wide magnitudes", 1024, 256, 512, WIDE},
        {"tiny values (BF16 subnormals, clamped scales)", 512, 64, 256, TINY},
        {"Inf / NaN bias columns", 300, 64, 128, SPECIAL},
        {"OC % 32 != 0 (cast refused)", 500, 64, 40, PLAIN},
        {"GPT-2 d12 qkv, B=64 T=1024", 65536, 768, 2304, PLAIN},
    };
    const int ncases = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int i = 0; i < CUTLASS_TCAST_NUM_CONFIGS; i++) {
        const CutlassTcastConfig cfg = (CutlassTcastConfig)i;
        printf("\n==== configuration %s\n", cutlass_tcast_gemm_config_name(cfg));
        const int p0 = tally.passed, f0 = tally.failed;
        check_refusals(cfg);
        for (int k = 0; k < ncases; k++) {
            if (quick && cases[k].N > 4096) continue;
            run_case(cases[k], cfg, seed + 101 * k + 7 * i);
        }
        const Case gelu_cases[] = {
            {"fc, odd shape", 1000, 72, 96, PLAIN},
            {"fc, wide magnitudes", 1024, 256, 512, WIDE},
            {"fc, Inf / NaN bias columns", 300, 64, 128, SPECIAL},
            {"fc, tiny values", 512, 64, 256, TINY},
            {"GPT-2 d12 fc, B=64 T=1024", 65536, 768, 3072, PLAIN},
        };
        for (int k = 0; k < (int)(sizeof(gelu_cases) / sizeof(gelu_cases[0])); k++) {
            if (quick && gelu_cases[k].N > 4096) continue;
            run_gelu_case(gelu_cases[k], cfg, seed + 303 * k + 11 * i, gelu_cases[k].N <= 4096);
        }
        printf("==== configuration %s: %d passed, %d failed\n", cutlass_tcast_gemm_config_name(cfg), tally.passed - p0, tally.failed - f0);
    }
    if (timing) {
        GemmContext gctx;
        gemm_context_init(&gctx, g_stream);
        std::vector<TimeRow> rows;
        time_shape("d12 qkv 65536x768>2304", 65536, 768, 2304, seed + 11, &gctx, &rows);
        time_shape("d12 proj 65536x768>768", 65536, 768, 768, seed + 12, &gctx, &rows);
        time_shape("d24 qkv 32768x1024>3072", 32768, 1024, 3072, seed + 13, &gctx, &rows);
        time_gelu_shape("d12 fc 65536x768>3072", 65536, 768, 3072, seed + 14, &gctx, &rows);
        time_gelu_shape("d24 fc 32768x1024>4096", 32768, 1024, 4096, seed + 15, &gctx, &rows);
        print_table(rows);
        gemm_context_free(&gctx);
    }
    cutlass_tcast_gemm_free();
    cudaCheck(cudaStreamDestroy(g_stream));
    return tally.finish();
}

#endif
