// cutlass_fp8.cu - correctness and speed of llmc/kernels/gemm/cutlass_fp8_fc.h (issue 27): the fc layer's forward
// as one CUTLASS FP8 GEMM whose epilogue writes Z (BF16), the E4M3 codes of GELU(Z) and their amax, and in the
// "_dt" configurations the same codes transposed.
//
// Build and run (from the repository root; CUTLASS from scripts/setup_env.sh's venv or CUTLASS_HOME):
//   make -j16 build/bf16/dev/cutlass_fp8 && build/bf16/dev/cutlass_fp8    all checks, then the timings (coop_t)
//   build/bf16/dev/cutlass_fp8 --config NAME                            the same for configuration NAME
//   build/bf16/dev/cutlass_fp8 --config A --config B ...                several: the small cases (N = 4133 and
//   build/bf16/dev/cutlass_fp8 --all-configs                            smaller) each, then the timings of all
//                                                                       of them (one table, last); or every one
//   build/bf16/dev/cutlass_fp8 --check-only                             checks only
//   build/bf16/dev/cutlass_fp8 --quick                                  the small shapes only, no timings
//   build/bf16/dev/cutlass_fp8 --seed S                                 the inputs of an earlier run (printed first)
// Configurations: cutlass_fp8_fc.h CUTLASS_FP8_FC_CONFIGS ("z only" ones store Z alone: their d and amax checks
// are skipped, the rest runs).
// Needs a compute capability 9.0 GPU (the kernel is sm_90a code); elsewhere it says so and fails.
//
// Inputs: fresh random E4M3 codes every run (the seed is printed; --seed repeats a run): "gaussian" cases
// quantize N(0, 1) activations and N(0, wstd) weights on the host with power-of-two per-tensor scales from
// their amax (llmc/numerics/fp8.h, as the trainer does); "codes" cases draw every finite E4M3 code uniformly
// (subnormals, ±448, zeros of both signs) with fixed power-of-two dequant scales. Bias N(0, 0.05) in BF16, or
// none. D's QUANT scale: the current-scaling one (power of two from a sampled estimate of the amax), x8
// (values beyond 448: saturation), or a non-power-of-two value.
//
// Checks (each case; the float64 reference uses the same quantized operands, decoded exactly):
//   Z  sampled rows (all rows of small problems, else 128 random rows with the first and the last) x all
//      columns: per element |z - z64| <= 2^-8 |z64| (BF16 rounding: half an ulp is at most 2^-8 of the value)
//      + 2^-10 S (S = scale_inp scale_w Σ_c |x_c w_c|: the accumulation; Hopper's FP8 tensor cores add with
//      reduced precision between CUTLASS's fp32 promotions every 128 values of C), and the norm-relative error
//      <= 5e-3 (the gemm_fp8 harness's BF16-output tolerance). Printed: the norm error, max |err| / S, and
//      how many BF16 values differ from the rounding of z64. Every element of z finite (poisoned before).
//   D  ALL elements, bit-exact against the host chain on the kernel's own Z: g = bf16(gelu_tanh(z)) in float64,
//      code = fp8_encode_rne(E4M3, fp32(g · d_scale), saturate) (cvt.rn.satfinite's codes, fp8_quant_common.cuh).
//      Where gelu(z) lies within 2^-21 (4 + |2u| e/(1+e)) of itself of a BF16 rounding midpoint (the kernel's fp32
//      GELU, expf and division, is that close to exact; u = sqrt(2/pi)(z + 0.044715 z³), e = exp(-2u)), either
//      rounding is accepted: those elements are counted and reported ("near a midpoint", and how many of them
//      have two possible codes); below z = -10.06 fp32's exp overflows and the kernel's GELU is -0 (accepted).
//      (Checked on the host against the kernel's formula with glibc's expf for every BF16 z in [-12, 12]: 263
//      near a midpoint, none outside the candidates.)
//      No NaN code anywhere (poisoned with 0xFF before the run).
//   amax  between the max of |g| taking the smaller and the larger candidate at every element (equal unless the
//      largest element is near a midpoint), a BF16 value (low 16 bits zero), and the exact relation with D:
//      max over D of |code| == code of amax · d_scale (rounding is monotonic, so the largest code is the code
//      of the largest value).
//   dt ("_dt" configurations on the cases with N a multiple of 16; the others get dt = NULL): the transposed codes,
//      (OC, ldt) row-major with ldt = N + 16 (16 padding columns), poisoned with 0xFF before each run: dt[o, n] ==
//      d[n, o] bit for bit on every element, and the padding columns n = N..ldt-1 and the guard bytes after the buffer
//      untouched; against today's producer, its transposed output (OC, N) bit for bit. (With N % 16 != 0 the
//      dispatcher refuses dt: TMA writes whole 16-byte chunks of a dt row, doc/TCFP12.md "The _dt padding writes";
//      those cases run without dt.)
//   end to end (printed, not asserted): D against the codes of gelu(z64) · d_scale, float64 all the way:
//      how many codes differ and by how many steps (the BF16 roundings of Z and of GELU move a few by one).
//   today's producer on the same Z (BF16 build): fp8_quantize_pair_from(LowpSrcGelu) with the same scale
//      gives the codes and amax the FP8 build makes today from a BF16 pre-activation. Configurations with the
//      producer's GELU (CUTLASS_FC_GELU_PRODUCER, "_pgelu"): every code and the amax bit-exact. The others (the
//      same formula in other fp32 instructions): a few codes differ by one step where the two fp32 GELUs round
//      to different BF16 values: asserted <= 2e-3 of the codes, one step at most, amax within one BF16 ulp.
//   GELU, exhaustively (each configuration that writes d, BF16 build): the configuration's epilogue functor
//      (cutlass_fp8_fc_gelu_eval: the type its epilogue instantiates, compiled in its translation unit) against
//      today's producer's device function gemm_gelu_stored (compiled here with the trainer's NVCC_FLAGS, i.e.
//      --use_fast_math) on all 65536 BF16 inputs, NaN and infinities included: producer-GELU configurations
//      must give the same bits on every one; for the others the differing inputs are counted (printed).
//   cuBLASLt (printed): the project's FP8 GEMM (gemm_fp8.cuh fp8_linear_forward, bias, BF16 out) on the same
//      operands: how many BF16 values differ from z, and by how many ulps (accumulation order).
//   writes: guard bytes after z and d stay poisoned (the partial last tile is clipped); determinism: a
//      second run (outputs poisoned again) is bitwise equal in z, d, dt and amax.
//   arguments: cutlass_fp8_fc_unsupported refuses C or OC not a multiple of 16 and misaligned pointers, a dt with
//      a configuration that does not write it, and (where it does) a misaligned dt, ldt < N or not a multiple of 16,
//      N not a multiple of 16 (the forward would print `error: cutlass_fp8_fc: ...` and exit 1); N = 0 zeroes amax
//      and writes nothing.
// Shapes: the fc layers of GPT-2 d12 at B=64, T=1024 (N = 65536, C = 768, OC = 3072) and d24 at B=32
// (N = 32768, C = 1024, OC = 4096); N = 1000 (not a multiple of the 128-row tile, nor of the 2-CTA cluster);
// N = 4133 with C = 320 and OC = 784 (partial tiles in all three dimensions), 77 x 1024 -> 48, 1 x 16 -> 16,
// N = 1008 with C = 256 and OC = 784 (partial tiles in M and N with N a multiple of 16: dt with padding), 16 x 16 -> 16.
// Timing (median of 20, after 3 warm-ups) at the two GPT-2 shapes: the cuBLASLt FP8 GEMM the FP8 build runs
// today (bias, BF16 out), that GEMM plus the GELU producer pass it runs after it (plain + transposed E4M3 codes,
// amax), the byte transpose of D alone (fp8_transpose_codes: the transposed copy the fcproj wgrad needs, until
// the epilogue writes it too), and each configuration (the "_dt" ones writing dt with ldt = N); one table at the end:
// ms, TFLOP/s, speed-up against the cuBLASLt GEMM alone, against GEMM + producer, and like for like against GEMM +
// producer: the row's time plus fp8_transpose_codes where the configuration does not write dt itself (what replacing
// today's pass, transposed codes included, would cost).
// The last line is `N passed, N failed`; exit status 1 on any failure.

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <thread>
#include <type_traits>
#include <vector>
#include "dev/cuda/harness.cuh"
#include "dev/cuda/fp8_gemm_host.cuh"
#include "llmc/kernels/gemm/gemm_fp8.cuh"
#include "llmc/kernels/fp8/lowp_producers.cuh"
#include "llmc/kernels/gemm/cutlass_fp8_fc.h"
#include "llmc/kernels/gemm/gemm_kernels.cuh"

typedef __nv_bfloat16 bf16;

static const double Z_NORM_TOL = 5e-3;            // ||z - z64|| / ||z64||
static const double Z_ELEM_REL = 1.0 / 256;       // x |z64|: BF16 rounding
static const double Z_ELEM_ACC = 1.0 / 1024;      // x S: FP8 tensor-core accumulation
static const double GELU_REL = 1.0 / (1 << 21);   // x (4 + |2u|): the kernel's fp32 GELU against float64
static const double AGREE_MAX = 2e-3;             // codes that may differ from today's producer on the same Z
static const size_t GUARD = 4096;                 // poisoned bytes after z and d

static Tally tally;
static FP8Format kE4M3;

// ------------------------------------------------------------------------------------------------
// Host helpers (the shared ones: dev/cuda/fp8_gemm_host.cuh)

static uint8_t e4m3(float v) { return fp8_encode_rne(kE4M3, v, 1); }

static double gelu_u(double x) { return 0.7978845608028654 * (x + 0.044715 * x * x * x); }
static double gelu64(double x) { return x / (1.0 + exp(-2.0 * gelu_u(x))); }

// The BF16 values the kernel's fp32 GELU of x can round to: lo == hi, or the two neighbours of a rounding
// midpoint that gelu(x) lies within the GELU tolerance of.
static void gelu_candidates(float x, float* lo, float* hi) {
    const double g = gelu64(x);
    // a few fp32 ulps, plus the rounding of 2u in fp32, which moves e = exp(-2u) by up to |2u| 2^-24 of itself and
    // s = 1 / (1 + e) by e / (1 + e) of that
    const double e = exp(-2.0 * gelu_u(x));
    const double tol = GELU_REL * (4.0 + fabs(2.0 * gelu_u(x)) * (e / (1.0 + e))) * fabs(g);
    const uint32_t t = bits_of((float)g) & 0xFFFF0000u;  // toward zero
    const float tz = f32_from_bits(t), az = f32_from_bits(t + 0x10000u);
    const double mid = 0.5 * ((double)tz + (double)az);
    if (-2.0 * gelu_u(x) > 88.0) {  // fp32 expf overflows near here (x < -10.06): the kernel's x / inf = -0
        *lo = -0.0f;
        *hi = fabs(g) < fabs(mid) ? tz : az;
        return;
    }
    if (fabs(g - mid) <= tol) {
        *lo = tz;
        *hi = az;
        return;
    }
    *lo = *hi = fabs(g) < fabs(mid) ? tz : az;
}

// ------------------------------------------------------------------------------------------------
// Inputs

struct Case {
    const char* name;
    int N, C, OC;
    bool codes;          // uniform random codes (else quantized Gaussians)
    float wstd;          // Gaussian weights' std
    bool bias;
    int d_mode;          // 0: current-scaling-like power of two, 1: x8 (saturation), 2: not a power of two
};

struct HostCase {
    std::vector<uint8_t> x, w;  // (N, C), (OC, C) codes
    float x_ds = 1, w_ds = 1;   // dequant scales (powers of two)
    std::vector<float> bias;    // BF16 values, or empty
    float d_scale = 1;
};

// ------------------------------------------------------------------------------------------------
// Device side of a case

// ldt of the transposed codes in the checks: N rounded up to a multiple of 16 (TMA's row-stride rule) plus 16, so that
// every checked dt has padding columns N .. ldt-1 that must stay poisoned (the timings use ldt = N, as the trainer would)
static int ldt_for(int N) { return (N + 15) / 16 * 16 + 16; }

struct DevCase {
    int N, C, OC, ldt;
    DeviceBuffer<uint8_t> x, w, d, dt;
    DeviceBuffer<bf16> z, bias;
    DeviceBuffer<float> scales;  // [0] x dequant, [4] w dequant, [8] d quant, [12] amax (16-byte apart)
    DevCase(int N_, int C_, int OC_, int ldt_)
        : N(N_), C(C_), OC(OC_), ldt(ldt_), x((size_t)N_ * C_ + 16), w((size_t)OC_ * C_), d((size_t)N_ * OC_ + GUARD),
          dt((size_t)OC_ * ldt_ + GUARD), z((size_t)N_ * OC_ + GUARD / 2), bias(OC_), scales(16) {}
    float* x_ds() { return scales.ptr + 0; }
    float* w_ds() { return scales.ptr + 4; }
    float* d_scale() { return scales.ptr + 8; }
    float* amax() { return scales.ptr + 12; }
    void poison_outputs() {
        z.poison();
        d.poison();
        dt.poison();
        cudaCheck(cudaMemset(amax(), 0xFF, sizeof(float)));
    }
    // dt where the configuration writes it and N allows it (a multiple of 16: cutlass_fp8_fc.h), else NULL
    uint8_t* dt_for(CutlassFcConfig cfg) { return cutlass_fp8_fc_config_writes_dt(cfg) && N % 16 == 0 ? dt.ptr : NULL; }
    void run(const bf16* b, cudaStream_t stream, CutlassFcConfig cfg) {
        cutlass_fp8_fc_forward(z.ptr, d.ptr, dt_for(cfg), ldt, amax(), x.ptr, x_ds(), w.ptr, w_ds(), b, d_scale(), N, C, OC, stream, cfg);
    }
};

struct Outputs {
    std::vector<bf16> z;
    std::vector<uint8_t> d, dt;
    float amax;
};

static Outputs download_outputs(DevCase& dc) {
    Outputs o;
    o.z = download_raw(dc.z);
    o.d = download_raw(dc.d);
    o.dt = download_raw(dc.dt);
    cudaCheck(cudaMemcpy(&o.amax, dc.amax(), sizeof(float), cudaMemcpyDeviceToHost));
    return o;
}

// Bytes after the first n elements of z and d still poisoned.
static bool guards_intact(const Outputs& o, size_t n) {
    for (size_t i = n; i < o.d.size(); i++)
        if (o.d[i] != 0xFF) return false;
    for (size_t i = n; i < o.z.size(); i++)
        if (bf16_bits(o.z[i]) != 0xFFFF) return false;
    return true;
}

// dt (OC, ldt) against d (N, OC): *differ = elements with dt[o, n] != d[n, o] (n < N), *touched = poisoned bytes
// that changed outside the written region (padding columns n = N..ldt-1 and the guard after OC * ldt);
// *first = the first differing element's index into d (or (size_t)-1).
static void compare_dt(const Outputs& o, int N, int OC, int ldt, size_t* differ, size_t* touched, size_t* first) {
    *differ = *touched = 0;
    *first = (size_t)-1;
    for (int c = 0; c < OC; c++) {
        const uint8_t* row = &o.dt[(size_t)c * ldt];
        for (int n = 0; n < N; n++)
            if (row[n] != o.d[(size_t)n * OC + c]) {
                if (*first == (size_t)-1) *first = (size_t)n * OC + c;
                (*differ)++;
            }
        for (int n = N; n < ldt; n++) *touched += row[n] != 0xFF;
    }
    for (size_t i = (size_t)OC * ldt; i < o.dt.size(); i++) *touched += o.dt[i] != 0xFF;
}

// Today's producer on the kernel's Z (BF16 builds: LowpSrcGelu reads floatX): codes and amax bits.
// *tcodes: its transposed codes (OC, N) row-major.
template <typename X>
static bool producer_on_z(const X* z, int N, int OC, const float* d_scale, std::vector<uint8_t>* codes, std::vector<uint8_t>* tcodes,
                          float* amax, cudaStream_t stream) {
    if constexpr (std::is_same<X, floatX>::value) {
        DeviceBuffer<uint8_t> pc((size_t)N * OC), pt((size_t)N * OC);
        DeviceBuffer<uint32_t> bits(1);
        bits.zero();
        poison_all(pc, pt);
        fp8_quantize_pair_from(pc.ptr, pt.ptr, LowpSrcGelu{z, NULL}, N, OC, FP8_E4M3FN, d_scale, bits.ptr, NULL, NULL, 0, stream);
        cudaCheck(cudaStreamSynchronize(stream));
        *codes = download_raw(pc);
        *tcodes = download_raw(pt);
        uint32_t b = 0;
        cudaCheck(cudaMemcpy(&b, bits.ptr, 4, cudaMemcpyDeviceToHost));
        *amax = fp8q_amax_from_bits(b);
        return true;
    } else {
        return false;
    }
}

// Median times of today's GELU producer pass on pre, alone (*t_prod) and after gemm() (*t_both); -1 where
// the build cannot run it (LowpSrcGelu reads floatX: BF16 builds only).
template <typename X, typename F>
static void time_producer(F gemm, const X* pre, int N, int OC, uint8_t* codes, uint8_t* tcodes, const float* d_scale, uint32_t* bits,
                          cudaStream_t stream, float* t_prod, float* t_both) {
    *t_prod = *t_both = -1.0f;
    if constexpr (std::is_same<X, floatX>::value) {
        auto prod = [&] {
            fp8_quantize_pair_from(codes, tcodes, LowpSrcGelu{pre, NULL}, N, OC, FP8_E4M3FN, d_scale, bits, NULL, NULL, 0, stream);
        };
        *t_prod = time_median_ms(prod, 3, 20, stream);
        *t_both = time_median_ms([&] { gemm(); prod(); }, 3, 20, stream);
    }
}

// ------------------------------------------------------------------------------------------------
// One case

static void run_case(const Case& cs, int index, uint64_t seed, Fp8GemmContext* fctx, cudaStream_t stream, CutlassFcConfig cfg) {
    const bool writes_d = cutlass_fp8_fc_config_writes_d(cfg);
    const int N = cs.N, C = cs.C, OC = cs.OC;
    // dt where the configuration writes it and N is a multiple of 16 (cutlass_fp8_fc.h; else it runs without dt, whose
    // refusal check_arguments checks)
    const bool writes_dt = cutlass_fp8_fc_config_writes_dt(cfg) && N % 16 == 0;
    const uint64_t s0 = seed * 1000 + (uint64_t)index * 10;
    printf("\n[%d] %s: N=%d C=%d OC=%d, %s, %s, d_scale %s\n", index, cs.name, N, C, OC,
           cs.codes ? "uniform random E4M3 codes" : "quantized Gaussians", cs.bias ? "bias" : "no bias",
           cs.d_mode == 0 ? "current-scaling power of two" : cs.d_mode == 1 ? "x8 (saturating)" : "not a power of two");
    HostCase h;
    if (cs.codes) {
        uniform_codes(h.x, (size_t)N * C, s0 + 1, kE4M3);
        uniform_codes(h.w, (size_t)OC * C, s0 + 2, kE4M3);
        h.x_ds = 1.0f / 256;   // |x| <= 1.75
        h.w_ds = 1.0f / 4096;  // |w| <= 0.11
    } else {
        gaussian_codes(h.x, &h.x_ds, (size_t)N * C, s0 + 1, 1.0f, kE4M3);
        gaussian_codes(h.w, &h.w_ds, (size_t)OC * C, s0 + 2, cs.wstd, kE4M3);
    }
    if (cs.bias) {
        h.bias = random_normal(OC, s0 + 3, 0.05f);
        for (float& b : h.bias) b = bf16_rne(b);
    }
    const GemmRef ref = gemm_reference(h.x, kE4M3, h.x_ds, h.w, kE4M3, h.w_ds, h.bias, N, C, OC, s0 + 4);
    double amax_est = 0;
    for (double z : ref.z) amax_est = std::max(amax_est, fabs(gelu64(z)));
    const float d_pow2 = fp8_scale_pow2_from_amax(kE4M3, (float)amax_est, 0);
    h.d_scale = cs.d_mode == 0 ? d_pow2 : cs.d_mode == 1 ? 8.0f * d_pow2 : (float)(0.9 * 448.0 / amax_est);
    printf("  scales: inp dequant 2^%d, weight dequant 2^%d, d quant %.6g; sampled rows %zu; max |gelu| of them %.4g\n",
           (int)lrint(log2(h.x_ds)), (int)lrint(log2(h.w_ds)), h.d_scale, ref.rows.size(), amax_est);

    DevCase dc(N, C, OC, ldt_for(N));
    if (cutlass_fp8_fc_config_writes_dt(cfg) && !writes_dt) printf("  (N %% 16 != 0: run without dt, which the configuration refuses here)\n");
    cudaCheck(cudaMemcpy(dc.x.ptr, h.x.data(), h.x.size(), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dc.w.ptr, h.w.data(), h.w.size(), cudaMemcpyHostToDevice));
    if (cs.bias) upload(dc.bias, h.bias);
    const float sc[16] = {h.x_ds, 0, 0, 0, h.w_ds, 0, 0, 0, h.d_scale, 0, 0, 0, 0, 0, 0, 0};
    cudaCheck(cudaMemcpy(dc.scales.ptr, sc, sizeof(sc), cudaMemcpyHostToDevice));
    const bf16* bias = cs.bias ? dc.bias.ptr : NULL;

    dc.poison_outputs();
    dc.run(bias, stream, cfg);
    cudaCheck(cudaStreamSynchronize(stream));
    const Outputs o = download_outputs(dc);
    const size_t n = (size_t)N * OC;

    // --- Z against float64 on the sampled rows; finite everywhere
    {
        ErrAcc e;
        size_t bad = 0, differ = 0;
        double worst_over_S = 0;
        for (size_t i = 0; i < ref.rows.size(); i++)
            for (int c = 0; c < OC; c++) {
                const float got = bf16_value(o.z[(size_t)ref.rows[i] * OC + c]);
                const double want = ref.z[i * OC + c], S = ref.S[i * OC + c];
                e.add(got, want);
                const double err = fabs((double)got - want);
                if (!(err <= Z_ELEM_REL * fabs(want) + Z_ELEM_ACC * S + 1e-30)) {
                    if (bad < 3) printf("    z[%d, %d] = %.8g, float64 %.10g, S %.4g\n", ref.rows[i], c, got, want, S);
                    bad++;
                }
                if (S > 0) worst_over_S = std::max(worst_over_S, err / S);
                differ += got != bf16_rne(want);
            }
        size_t nonfinite = 0;
        for (size_t i = 0; i < n; i++) nonfinite += !isfinite(bf16_value(o.z[i]));
        const CompareResult r = e.result(Z_NORM_TOL);
        printf("  z: %zu of %zu sampled values differ from bf16(z64) (accumulation order / precision); max |err| / S = %.3g\n",
               differ, ref.z.size(), worst_over_S);
        tally.check("z vs float64 (norm)", r, Z_NORM_TOL);
        char name[96];
        snprintf(name, sizeof(name), "z per element (%zu outside)", bad);
        tally.check(name, bad == 0);
        snprintf(name, sizeof(name), "z all finite (%zu not)", nonfinite);
        tally.check(name, nonfinite == 0);
    }

    // --- D and amax against the host chain on the kernel's own Z, every element
    if (!writes_d) {
        printf("  (configuration %s stores Z only: no d, no amax)\n", cutlass_fp8_fc_config_name(cfg));
    } else {
        struct Part {
            size_t near = 0, ambiguous = 0, mismatch = 0, nan_codes = 0;
            float amax_lo = 0, amax_hi = 0;
            int max_code = 0;
            size_t first_bad = (size_t)-1;
        };
        const size_t chunks = ceil_div_sz(n, FP8H_CHUNK);
        std::vector<Part> parts(chunks);
        parallel_for(chunks, [&](size_t ch) {
            Part& p = parts[ch];
            for (size_t i = ch * FP8H_CHUNK; i < std::min(n, (ch + 1) * FP8H_CHUNK); i++) {
                float lo, hi;
                gelu_candidates(bf16_value(o.z[i]), &lo, &hi);
                const uint8_t c_lo = e4m3(lo * h.d_scale), c_hi = e4m3(hi * h.d_scale);
                const uint8_t got = o.d[i];
                if (lo != hi) p.near++;
                if (c_lo != c_hi) p.ambiguous++;
                if ((got & 0x7F) == 0x7F) p.nan_codes++;
                else p.max_code = std::max(p.max_code, (int)(got & 0x7F));
                if (got != c_lo && got != c_hi) {
                    if (p.first_bad == (size_t)-1) p.first_bad = i;
                    p.mismatch++;
                }
                p.amax_lo = std::max(p.amax_lo, std::min(fabsf(lo), fabsf(hi)));
                p.amax_hi = std::max(p.amax_hi, std::max(fabsf(lo), fabsf(hi)));
            }
        });
        Part t;
        for (const Part& p : parts) {
            t.near += p.near; t.ambiguous += p.ambiguous; t.mismatch += p.mismatch; t.nan_codes += p.nan_codes;
            t.amax_lo = std::max(t.amax_lo, p.amax_lo); t.amax_hi = std::max(t.amax_hi, p.amax_hi);
            t.max_code = std::max(t.max_code, p.max_code);
            if (t.first_bad == (size_t)-1) t.first_bad = p.first_bad;
        }
        printf("  d: %zu of %zu values have gelu(z) near a BF16 rounding midpoint (either rounding accepted), %zu of them with two "
               "possible codes\n", t.near, n, t.ambiguous);
        if (t.mismatch) {
            const size_t i = t.first_bad;
            float lo, hi;
            gelu_candidates(bf16_value(o.z[i]), &lo, &hi);
            printf("    first mismatch at (%zu, %zu): z %.8g, gelu %.10g, code 0x%02X, expected 0x%02X / 0x%02X\n", i / OC, i % OC,
                   bf16_value(o.z[i]), gelu64(bf16_value(o.z[i])), o.d[i], e4m3(lo * h.d_scale), e4m3(hi * h.d_scale));
        }
        char name[96];
        snprintf(name, sizeof(name), "d codes bit-exact (%zu differ)", t.mismatch);
        tally.check(name, t.mismatch == 0);
        snprintf(name, sizeof(name), "d no NaN code / unwritten (%zu)", t.nan_codes);
        tally.check(name, t.nan_codes == 0);
        const bool bf16_valued = (bits_of(o.amax) & 0xFFFFu) == 0;
        printf("  amax %.8g (host %.8g .. %.8g); largest |code| 0x%02X, code of amax * d_scale 0x%02X\n", o.amax, t.amax_lo, t.amax_hi,
               t.max_code, e4m3(o.amax * h.d_scale) & 0x7F);
        tally.check("amax = max |bf16(gelu(z))|", isfinite(o.amax) && o.amax >= t.amax_lo && o.amax <= t.amax_hi && bf16_valued);
        tally.check("amax and d: max |code| = code(amax * d_scale)", t.max_code == (e4m3(o.amax * h.d_scale) & 0x7F));
        if (cs.d_mode == 1) printf("  (x8 scale: %s saturated codes)\n", t.max_code == 0x7E ? "has" : "NO");
    }

    // --- dt: the transposed copy of d, bit for bit; padding columns and guard untouched
    if (writes_dt) {
        size_t differ = 0, touched = 0, first = 0;
        compare_dt(o, N, OC, dc.ldt, &differ, &touched, &first);
        printf("  dt (%d x %d, ldt %d): %zu of %zu codes differ from d transposed; %zu poisoned bytes outside it changed\n", OC, N, dc.ldt,
               differ, n, touched);
        if (differ)
            printf("    first at d (%zu, %zu): d 0x%02X, dt 0x%02X\n", first / OC, first % OC, o.d[first],
                   o.dt[(first % OC) * dc.ldt + first / OC]);
        char name[96];
        snprintf(name, sizeof(name), "dt = d transposed, bit for bit (%zu differ)", differ);
        tally.check(name, differ == 0);
        snprintf(name, sizeof(name), "dt padding columns and guard untouched (%zu)", touched);
        tally.check(name, touched == 0);
    }

    // --- end to end (printed): d against float64 all the way on the sampled rows
    if (writes_d) {
        size_t diff = 0;
        int worst = 0;
        for (size_t i = 0; i < ref.rows.size(); i++)
            for (int c = 0; c < OC; c++) {
                const uint8_t want = e4m3((float)(gelu64(ref.z[i * OC + c]) * (double)h.d_scale));
                const int st = code_steps(o.d[(size_t)ref.rows[i] * OC + c], want);
                diff += st != 0;
                worst = std::max(worst, st);
            }
        printf("  end to end: %zu of %zu sampled codes differ from e4m3(gelu(z64) * d_scale) in float64 (at most %d step%s)\n", diff,
               ref.z.size(), worst, worst == 1 ? "" : "s");
    }

    // --- writes stay inside, and a second run is bitwise equal
    tally.check("guard bytes after z and d untouched", guards_intact(o, n));
    dc.poison_outputs();
    dc.run(bias, stream, cfg);
    cudaCheck(cudaStreamSynchronize(stream));
    const Outputs o2 = download_outputs(dc);
    tally.check(writes_dt ? "two runs bitwise equal (z, d, dt, amax)" : "two runs bitwise equal (z, d, amax)",
                same_bits(o.z, o2.z) && same_bits(o.d, o2.d) && same_bits(o.dt, o2.dt) && bits_of(o.amax) == bits_of(o2.amax));

    // --- today's producer on the same Z
    std::vector<uint8_t> pc, pt;
    float pamax = 0;
    if (!writes_d) {
        // nothing to compare
    } else if (producer_on_z(dc.z.ptr, N, OC, dc.d_scale(), &pc, &pt, &pamax, stream)) {
        size_t diff = 0;
        int worst = 0;
        for (size_t i = 0; i < n; i++) {
            const int st = code_steps(o.d[i], pc[i]);
            diff += st != 0;
            worst = std::max(worst, st);
        }
        const double frac = (double)diff / (double)n;
        printf("  today's GELU producer on this z: %zu codes differ (%.2e, at most %d step%s), amax %.8g vs %.8g\n", diff, frac, worst,
               worst == 1 ? "" : "s", pamax, o.amax);
        if (cutlass_fp8_fc_config_gelu(cfg) == CUTLASS_FC_GELU_PRODUCER)
            tally.check("d, amax bit-exact = today's producer", diff == 0 && bits_of(pamax) == bits_of(o.amax));
        else
            tally.check("agrees with today's producer on z", frac <= AGREE_MAX && worst <= 1 && fabsf(pamax - o.amax) <= o.amax / 128);
        if (writes_dt) {
            // the producer's transposed output (OC, N) against dt (OC, ldt)
            size_t tdiff = 0;
            for (int c = 0; c < OC; c++)
                for (int m = 0; m < N; m++) tdiff += pt[(size_t)c * N + m] != o.dt[(size_t)c * dc.ldt + m];
            printf("  today's GELU producer's transposed codes: %zu differ from dt\n", tdiff);
            if (cutlass_fp8_fc_config_gelu(cfg) == CUTLASS_FC_GELU_PRODUCER) {
                char name[96];
                snprintf(name, sizeof(name), "dt bit-exact = producer's transposed (%zu differ)", tdiff);
                tally.check(name, tdiff == 0);
            }
        }
    } else {
        printf("  (today's producer comparison: BF16 builds only)\n");
    }

    // --- cuBLASLt's Z (printed)
    {
        DeviceBuffer<bf16> pre(n);
        if (fp8_linear_forward<bf16>(fctx, pre.ptr, dc.x.ptr, dc.x_ds(), dc.w.ptr, dc.w_ds(), bias, N, C, OC, FP8_SCALE_TENSOR, 0)) {
            cudaCheck(cudaStreamSynchronize(stream));
            const std::vector<bf16> p = download_raw(pre);
            size_t diff = 0;
            int worst = 0;
            for (size_t i = 0; i < n; i++) {
                const int a = (int)bf16_bits(p[i]), b = (int)bf16_bits(o.z[i]);
                if (a != b) {
                    diff++;
                    // ulps between two BF16 values of the same sign (else count it as large)
                    worst = std::max(worst, ((a ^ b) & 0x8000) ? 1 << 15 : abs(a - b));
                }
            }
            printf("  cuBLASLt FP8 GEMM on the same operands: %zu of %zu BF16 values differ from z (at most %d ulp%s)\n", diff, n, worst,
                   worst == 1 ? "" : "s");
        } else {
            printf("  cuBLASLt FP8 GEMM: cannot run this shape (%s)\n", fctx->last_error);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// The GELU on every BF16 input

// out[i] = today's producer's stored GELU of in[i] (gemm_gelu_stored, compiled with this build's flags: the
// trainer's), as a float.
__global__ void producer_gelu_kernel(const float* __restrict__ in, float* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)gemm_gelu_stored(in[i]);
}

// The configuration's epilogue GELU against today's producer on all 65536 BF16 bit patterns (outputs compared as
// fp32 bit patterns; both outputs poisoned first). Strict for producer-GELU configurations, counted for the others.
static void check_gelu_exhaustive(cudaStream_t stream, CutlassFcConfig cfg) {
    const CutlassFcGelu gelu = cutlass_fp8_fc_config_gelu(cfg);
    if (gelu == CUTLASS_FC_GELU_NONE) return;
    printf("\nGELU on all 65536 BF16 inputs (configuration %s):\n", cutlass_fp8_fc_config_name(cfg));
    if (!std::is_same<floatX, bf16>::value) {
        printf("  (BF16 builds only: today's producer stores floatX)\n");
        return;
    }
    const int n = 1 << 16;
    std::vector<float> in(n);
    for (int i = 0; i < n; i++) in[i] = f32_from_bits((uint32_t)i << 16);
    DeviceBuffer<float> din(n), dprod(n), dcfg(n);
    cudaCheck(cudaMemcpy(din.ptr, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    poison_all(dprod, dcfg);
    producer_gelu_kernel<<<n / 256, 256, 0, stream>>>(din.ptr, dprod.ptr, n);
    cudaCheck(cudaGetLastError());
    cutlass_fp8_fc_gelu_eval(cfg, din.ptr, dcfg.ptr, n, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    const std::vector<float> prod = download_raw(dprod), got = download_raw(dcfg);
    int differ = 0, differ_finite = 0, shown = 0, worst_ulp = 0;
    for (int i = 0; i < n; i++) {
        const uint32_t a = bits_of(prod[i]), b = bits_of(got[i]);
        if (a == b) continue;
        differ++;
        if (!isfinite(in[i])) continue;
        differ_finite++;
        // BF16 ulps between the two outputs (both BF16 values; opposite signs or a NaN: counted as large)
        const int ulp = ((a ^ b) & 0x80000000u) || isnan(prod[i]) || isnan(got[i]) ? 1 << 15 : abs((int)(a >> 16) - (int)(b >> 16));
        worst_ulp = std::max(worst_ulp, ulp);
        if (shown++ < 3)
            printf("    x = %.8g (0x%04X): producer %.8g (0x%08X), configuration %.8g (0x%08X)\n", in[i], i, prod[i], a, got[i], b);
    }
    printf("  %d of %d inputs give other bits than today's producer (%d of them finite, at most %d BF16 ulp%s apart); "
           "producer compiled %s --use_fast_math\n", differ, n, differ_finite, worst_ulp, worst_ulp == 1 ? "" : "s",
#if defined(__USE_FAST_MATH__)
           "with"
#else
           "WITHOUT"
#endif
    );
    if (gelu == CUTLASS_FC_GELU_PRODUCER) {
        char name[96];
        snprintf(name, sizeof(name), "GELU = producer, all inputs (%d differ)", differ);
        tally.check(name, differ == 0);
    }
}

// ------------------------------------------------------------------------------------------------
// Arguments

static void check_arguments(cudaStream_t stream, CutlassFcConfig cfg) {
    printf("\narguments (configuration %s):\n", cutlass_fp8_fc_config_name(cfg));
    DevCase dc(64, 64, 64, 64);
    const void* z = dc.z.ptr;
    const void* d = dc.d.ptr;
    const void* x = dc.x.ptr;
    const void* w = dc.w.ptr;
    const void* t = dc.dt_for(cfg);  // this configuration's dt: NULL where it does not write one
    const bool writes_dt = t != NULL;
    struct Bad { const char* what; int N, C, OC; const void *z, *d, *t; int ldt; const void *x, *w, *b; };
    std::vector<Bad> bad = {
        {"C = 24 (not a multiple of 16)", 64, 24, 64, z, d, t, 64, x, w, NULL},
        {"OC = 8", 64, 64, 8, z, d, t, 64, x, w, NULL},
        {"N = -1", -1, 64, 64, z, d, t, 64, x, w, NULL},
        {"inp + 1 (misaligned)", 64, 64, 64, z, d, t, 64, (const uint8_t*)x + 1, w, NULL},
        {"z + 1 element", 64, 64, 64, (const bf16*)z + 1, d, t, 64, x, w, NULL},
        {"bias + 2 elements", 64, 64, 64, z, d, t, 64, x, w, dc.bias.ptr + 2},
    };
    if (writes_dt) {
        bad.push_back({"dt + 8 (misaligned)", 64, 64, 64, z, d, (const uint8_t*)t + 8, 64, x, w, NULL});
        bad.push_back({"ldt = 48 (< N)", 64, 64, 64, z, d, t, 48, x, w, NULL});
        bad.push_back({"ldt = 72 (not a multiple of 16)", 64, 64, 64, z, d, t, 72, x, w, NULL});
        // TMA would write dt's columns 63 .. 63 + 15 - 1 = the padding up to the next 16-byte boundary
        bad.push_back({"N = 63 with dt (not a multiple of 16)", 63, 64, 64, z, d, t, 64, x, w, NULL});
    } else {
        bad.push_back({"dt (configuration without it)", 64, 64, 64, z, d, dc.dt.ptr, 64, x, w, NULL});
    }
    for (const Bad& b : bad) {
        const char* why = cutlass_fp8_fc_unsupported(b.N, b.C, b.OC, b.z, b.d, b.t, b.ldt, b.x, b.w, b.b, cfg);
        printf("  %-32s -> %s\n", b.what, why ? why : "(accepted)");
        char name[96];
        snprintf(name, sizeof(name), "refuses %s", b.what);
        tally.check(name, why != NULL);
    }
    const char* ok = cutlass_fp8_fc_unsupported(64, 64, 64, z, d, t, 64, x, w, dc.bias.ptr, cfg);
    if (ok) printf("  64 x 64 -> 64 refused: %s\n", ok);
    tally.check(writes_dt ? "accepts 64 x 64 -> 64 with dt" : "accepts 64 x 64 -> 64", ok == NULL);
    // N = 0: amax zeroed (configurations that write it), nothing written (dt included)
    const bool writes_d = cutlass_fp8_fc_config_writes_d(cfg);
    dc.poison_outputs();
    cudaCheck(cudaMemset(dc.scales.ptr, 0, 12 * sizeof(float)));
    cutlass_fp8_fc_forward(dc.z.ptr, dc.d.ptr, dc.dt_for(cfg), 16, dc.amax(), dc.x.ptr, dc.x_ds(), dc.w.ptr, dc.w_ds(), NULL, dc.d_scale(),
                           0, 64, 64, stream, cfg);
    cudaCheck(cudaStreamSynchronize(stream));
    const Outputs o = download_outputs(dc);
    size_t dt_touched = 0;
    for (uint8_t v : o.dt) dt_touched += v != 0xFF;
    tally.check(writes_d ? "N = 0: amax = 0, nothing written" : "N = 0: nothing written (amax untouched)",
                (writes_d ? bits_of(o.amax) == 0 : bits_of(o.amax) == 0xFFFFFFFFu) && guards_intact(o, 0) && dt_touched == 0);
}

// ------------------------------------------------------------------------------------------------
// Timing

// One row of the timing table: a configuration (or a baseline: config < 0) on a shape.
struct TimeRow {
    const char* shape;
    int config;  // -1: cuBLASLt GEMM, -2: cuBLASLt GEMM + GELU producer, -3: fp8_transpose_codes of D alone
    float ms, ms_gemm, ms_both;
    float ms_tr;  // fp8_transpose_codes at this shape: added to the rows that do not write the transposed codes
    double flop;
};

// Times, at one shape, today's chain (cuBLASLt FP8 GEMM with bias and BF16 out, then the GELU producer pass with
// plain and transposed codes and the amax), the byte transpose the fcproj wgrad would still need, and every
// configuration in `cfgs`; appends the rows.
static void time_shape(int N, int C, int OC, const char* label, uint64_t seed, Fp8GemmContext* fctx, cudaStream_t stream,
                       const std::vector<int>& cfgs, std::vector<TimeRow>* rows) {
    HostCase h;
    gaussian_codes(h.x, &h.x_ds, (size_t)N * C, seed + 1, 1.0f, kE4M3);
    gaussian_codes(h.w, &h.w_ds, (size_t)OC * C, seed + 2, 0.02f, kE4M3);
    h.bias = random_normal(OC, seed + 3, 0.05f);
    DevCase dc(N, C, OC, N);  // ldt = N: the trainer's layout
    cudaCheck(cudaMemcpy(dc.x.ptr, h.x.data(), h.x.size(), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dc.w.ptr, h.w.data(), h.w.size(), cudaMemcpyHostToDevice));
    upload(dc.bias, h.bias);
    const float sc[16] = {h.x_ds, 0, 0, 0, h.w_ds, 0, 0, 0, 16.0f, 0, 0, 0, 0, 0, 0, 0};
    cudaCheck(cudaMemcpy(dc.scales.ptr, sc, sizeof(sc), cudaMemcpyHostToDevice));
    const size_t n = (size_t)N * OC;
    DeviceBuffer<bf16> pre(n);
    DeviceBuffer<uint8_t> codes(n), tcodes(n);
    DeviceBuffer<uint32_t> bits(1);
    bits.zero();
    const double flop = 2.0 * N * C * OC;
    auto lt = [&] {
        if (!fp8_linear_forward<bf16>(fctx, pre.ptr, dc.x.ptr, dc.x_ds(), dc.w.ptr, dc.w_ds(), dc.bias.ptr, N, C, OC, FP8_SCALE_TENSOR, 0)) {
            fprintf(stderr, "error: cuBLASLt FP8 GEMM refused %d x %d -> %d: %s\n", N, C, OC, fctx->last_error);
            exit(1);
        }
    };
    const float t_lt = time_median_ms(lt, 3, 20, stream);
    float t_prod, t_both;
    time_producer(lt, pre.ptr, N, OC, codes.ptr, tcodes.ptr, dc.d_scale(), bits.ptr, stream, &t_prod, &t_both);
    const float t_tr = time_median_ms([&] { fp8_transpose_codes(tcodes.ptr, dc.d.ptr, N, OC, stream); }, 3, 20, stream);
    rows->push_back({label, -1, t_lt, t_lt, t_both, t_tr, flop});
    rows->push_back({label, -2, t_both, t_lt, t_both, t_tr, flop});
    rows->push_back({label, -3, t_tr, t_lt, t_both, t_tr, 0.0});
    for (int c : cfgs) {
        // the "_dt" configurations write dt (ldt = N here) as the trainer would use them
        const float t = time_median_ms([&] { dc.run(dc.bias.ptr, stream, (CutlassFcConfig)c); }, 3, 20, stream);
        rows->push_back({label, c, t, t_lt, t_both, t_tr, flop});
    }
}

static void print_time_table(const std::vector<TimeRow>& rows) {
    printf("\ntiming table (median of 20 after 3 warm-ups; today's fc forward = cuBLASLt FP8 GEMM (bias, BF16 out) + GELU producer "
           "pass (plain and transposed codes, amax); speed-ups: that time / the row's; 'incl. dt': today's fc forward / (the row + "
           "fp8_transpose_codes unless the row writes the transposed codes itself), the like-for-like comparison):\n");
    printf("  %-6s %-30s %9s %9s %12s %14s %14s\n", "shape", "configuration", "ms", "TFLOP/s", "vs GEMM", "vs GEMM+prod", "incl. dt");
    for (const TimeRow& r : rows) {
        const char* name = r.config == -1 ? "cuBLASLt GEMM (today)" : r.config == -2 ? "cuBLASLt GEMM + GELU producer"
                         : r.config == -3 ? "fp8_transpose_codes (d)" : cutlass_fp8_fc_config_name((CutlassFcConfig)r.config);
        char tf[16] = "-";
        if (r.flop > 0) snprintf(tf, sizeof(tf), "%.0f", r.flop / (r.ms * 1e-3) / 1e12);
        char both[24] = "-";
        if (r.ms_both > 0 && r.config != -3) snprintf(both, sizeof(both), "%.2fx", r.ms_both / r.ms);
        char gemm[24] = "-";
        if (r.config != -3) snprintf(gemm, sizeof(gemm), "%.2fx", r.ms_gemm / r.ms);
        // like for like: rows that write d but not dt pay the separate transpose; cuBLASLt alone and z-only rows: no d at all
        char incl[24] = "-";
        const bool has_d = r.config == -2 || (r.config >= 0 && cutlass_fp8_fc_config_writes_d((CutlassFcConfig)r.config));
        const bool has_dt = r.config == -2 || (r.config >= 0 && cutlass_fp8_fc_config_writes_dt((CutlassFcConfig)r.config));
        if (r.ms_both > 0 && has_d) snprintf(incl, sizeof(incl), "%.2fx", r.ms_both / (r.ms + (has_dt ? 0.0f : r.ms_tr)));
        printf("  %-6s %-30s %9.3f %9s %12s %14s %14s%s\n", r.shape, name, r.ms, tf, gemm, both, incl,
               r.config >= 0 && !cutlass_fp8_fc_config_writes_d((CutlassFcConfig)r.config) ? "   (z only)" : "");
    }
}

// ------------------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    bool timing = true, quick = false, all_configs = false;
    std::vector<int> cfgs;  // --config NAME, each time it is given
    uint64_t seed = ((uint64_t)time(NULL) << 16) ^ (uint64_t)getpid();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check-only")) timing = false;
        else if (!strcmp(argv[i], "--quick")) quick = true, timing = false;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--all-configs")) all_configs = true;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            const int config = cutlass_fp8_fc_config_parse(argv[++i]);
            cfgs.push_back(config);
            if (config < 0) {
                fprintf(stderr, "error: no configuration '%s'; there are:", argv[i]);
                for (int c = 0; c < CUTLASS_FC_NUM_CONFIGS; c++) fprintf(stderr, " %s", cutlass_fp8_fc_config_name((CutlassFcConfig)c));
                fprintf(stderr, "\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: %s [--check-only] [--quick] [--seed S] [--config NAME ... | --all-configs]\n", argv[0]);
            return 2;
        }
    }
    if (all_configs) {
        cfgs.clear();
        for (int c = 0; c < CUTLASS_FC_NUM_CONFIGS; c++) cfgs.push_back(c);
    } else if (cfgs.empty()) {
        cfgs.push_back(CUTLASS_FC_coop_t);
    }
    kE4M3 = fp8_format(FP8_E4M3FN);
    const cudaDeviceProp prop = harness_device();
    printf("cutlass_fp8: %s (sm_%d%d, %d SMs), %s build\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           PRECISION_MODE_NAME);
    for (int c : cfgs) printf("  %-22s %s\n", cutlass_fp8_fc_config_name((CutlassFcConfig)c), cutlass_fp8_fc_describe((CutlassFcConfig)c));
    printf("seed %llu (rerun with --seed %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    printf("tolerances: z per element 2^-8 |z64| + 2^-10 S, norm %.0e; d bit-exact except gelu within 2^-21 (4 + |2u| e/(1+e)) of a "
           "BF16 midpoint; today's producer: bit-exact (producer GELU), else <= %.0e of the codes, one step\n", Z_NORM_TOL, AGREE_MAX);
    if (prop.major != 9 || prop.minor != 0) {
        printf("the CUTLASS kernel is sm_90a code: it needs a compute capability 9.0 GPU; nothing can be checked here.\n");
        tally.failed++;
        return tally.finish();
    }
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    GemmContext gctx;
    gemm_context_init(&gctx, stream);
    Fp8GemmContext* fctx = new Fp8GemmContext;  // large (plan array): heap
    fp8_gemm_context_init(fctx, &gctx);

    const Case cases[] = {
        {"GPT-2 d12 fc, B=64 T=1024", 65536, 768, 3072, false, 0.02f, true, 0},
        {"GPT-2 d24 fc, B=32 T=1024", 32768, 1024, 4096, false, 0.02f, true, 0},
        {"N = 1000: partial last tile", 1000, 768, 3072, false, 0.05f, true, 1},
        {"partial tiles in M, N and K", 4133, 320, 784, true, 0, false, 2},
        {"wide pre-activations (GELU tails)", 77, 1024, 48, false, 0.2f, true, 2},
        {"smallest", 1, 16, 16, false, 0.1f, true, 0},
        {"N = 1008: partial last tiles, N a multiple of 16 (dt with padding columns)", 1008, 256, 784, false, 0.05f, true, 0},
        {"smallest with dt", 16, 16, 16, false, 0.1f, true, 2},
    };
    const int ncases = (int)(sizeof(cases) / sizeof(cases[0]));
    // one configuration: every case (the GPT-2 shapes too, unless --quick); several: the small cases each
    for (int c : cfgs) {
        printf("\n==== configuration %s: %s\n", cutlass_fp8_fc_config_name((CutlassFcConfig)c), cutlass_fp8_fc_describe((CutlassFcConfig)c));
        const int passed0 = tally.passed, failed0 = tally.failed;
        check_arguments(stream, (CutlassFcConfig)c);
        check_gelu_exhaustive(stream, (CutlassFcConfig)c);
        for (int i = (quick || cfgs.size() > 1) ? 2 : 0; i < ncases; i++) run_case(cases[i], i, seed, fctx, stream, (CutlassFcConfig)c);
        printf("==== configuration %s: %d passed, %d failed\n", cutlass_fp8_fc_config_name((CutlassFcConfig)c), tally.passed - passed0,
               tally.failed - failed0);
    }

    if (timing) {
        std::vector<TimeRow> rows;
        time_shape(65536, 768, 3072, "d12", seed + 77, fctx, stream, cfgs, &rows);
        time_shape(32768, 1024, 4096, "d24", seed + 78, fctx, stream, cfgs, &rows);
        fp8_gemm_context_print_plans(fctx, stdout);
        print_time_table(rows);
    } else {
        fp8_gemm_context_print_plans(fctx, stdout);
    }
    cutlass_fp8_fc_free();
    fp8_gemm_context_free(fctx);
    delete fctx;
    gemm_context_free(&gctx);
    cudaCheck(cudaStreamDestroy(stream));
    return tally.finish();
}
