// cutlass_fp8_dgelu.cu - correctness and speed of llmc/kernels/gemm/cutlass_fp8_dgelu.h (issue 27): the fcproj layer's
// dgrad as one CUTLASS FP8 GEMM (E5M2 dY x E4M3 Wᵀ) whose epilogue applies GELU' to the BF16-rounded product with the
// stored pre-activation and writes the fc layer's dY as E5M2 codes, plain and transposed, with the amax and the fc
// layer's bias-gradient column sums (per 128-row tile).
//
// Build and run (from the repository root; CUTLASS from scripts/setup_env.sh's venv or CUTLASS_HOME):
//   make -j16 build/bf16/dev/cutlass_fp8_dgelu && build/bf16/dev/cutlass_fp8_dgelu
//       every configuration: the argument checks, the GELU' on all 2^32 BF16 pairs, the small cases, then the
//       GPT-2 d12 / d24 cases (checks) and one timing table last
//   --config NAME (repeatable)   only those configurations      --check-only   no timings
//   --quick                      the small cases only (no exhaustive GELU', no GPT-2 shapes, no timings)
//   --seed S                     the inputs of an earlier run (printed first)
// Needs a compute capability 9.0 GPU (the kernels are sm_90a code); elsewhere it says so and fails.
//
// Inputs (fresh every run; the seed is printed): dy E5M2 and wt E4M3 codes, either quantized Gaussians (power-of-two
// per-tensor scales from their amax, llmc/numerics/fp8.h, as the trainer does) or every finite code drawn uniformly
// (subnormals, the largest values, zeros of both signs) with fixed power-of-two dequant scales; pre BF16 Gaussians
// of the case's width. d's QUANT scale: the current-scaling power of two of a sampled estimate of amax |v|, x8 of it
// (saturating codes) or a value that is not a power of two.
//
// Checks (each case; every output poisoned with 0xFF bytes before each run):
//   g (the GEMM's BF16 output, stored on request) against the float64 product of the same quantized operands on
//      sampled rows (all rows of small problems, else 128 with the first and the last): per element |g - g64| <=
//      2^-8 |g64| (BF16 rounding) + 2^-10 S (S = scales · Σ|dy w|: the FP8 tensor cores' accumulation), norm error
//      <= 5e-3; every element finite.
//   d, dt, amax bit for bit against today's producer run on the kernel's own g (fp8_quantize_pair_from with
//      LowpSrcDgelu{g, pre}, E5M2, the same scale: what the FP8 build does after its cuBLASLt dgrad GEMM): every code of
//      d and of dt, and the amax's bits. Exact by construction (cutlass_fp8_dgelu.h), so any difference fails.
//   dt = d transposed bit for bit, its 16 padding columns (ldt = N + 16) and the guard bytes after it untouched; dt runs
//      where N % 16 == 0 (the dispatcher refuses it otherwise: TMA writes whole 16-byte chunks of a dt row).
//   amax and d: max over d of |code| == code(amax · d_scale) (rounding is monotonic); no NaN code (unwritten) in d.
//   column sums (the bias gradient of the fc layer): every partial against the float64 sum of the same v = the stored
//      GELU' product of the kernel's own g (gemm_dgelu_stored, bit-identical to the epilogue's: checked below) over its
//      128-row tile: |part - part64| <= 16 u Σ|v| with u = 2^-24 (each partial is a tree of at most 11 fp32 additions:
//      2 rows per thread, 3 butterfly steps, 8 warps; the recursive-summation bound is depth x u x Σ|v|); the bias
//      gradient finished from them in gemm_dbias_finish's order (fp32, emulated on the host) against the float64 column
//      sum: |dbias - dbias64| <= (16 + ceil(rows / 8) + 8) u Σ|v|; every partial written (the buffer is poisoned with
//      NaN bytes first) and the guard after it untouched. Printed: against today's producer's column sums (64-row tiles,
//      another order) finished the same way.
//   writes: the guard bytes after d and g untouched; a second run bitwise equal (d, dt, g, amax, column sums); a run with
//      g = NULL gives the same d, dt, amax, column sums and leaves g's buffer poisoned; one without column sums the same
//      d, dt, amax and leaves their buffer poisoned.
//   printed, not asserted: cuBLASLt's FP8 dgrad on the same operands (how many BF16 values differ from g: accumulation
//      order), and d against e5m2(v64 · d_scale) with v64 = g64 · gelu'(pre) in float64 (how many codes move, and by
//      how many steps, through the two BF16 roundings).
//   GELU' on all 2^32 pairs of BF16 bit patterns (g, pre), NaN and infinities included (not with --quick): the
//      configuration's epilogue functor (cutlass_fp8_dgelu_eval, compiled in its translation unit) against today's
//      gemm_dgelu_stored compiled here with the trainer's NVCC_FLAGS (--use_fast_math): the same fp32 bits on every pair.
//   arguments: cutlass_fp8_dgelu_unsupported refuses C or OC not a multiple of 16, misaligned pointers, NULL d / pre,
//      ldt < N or not a multiple of 16, N % 16 != 0 with dt, misaligned column sums (the dgrad would print
//      `error: cutlass_fp8_dgelu: ...` and exit 1); N = 0 zeroes the amax and writes nothing.
// Shapes (N tokens, C = fcproj input width, OC = model width): GPT-2 d12 B=64 (65536, 3072, 768) and d24 B=32 (32768,
// 4096, 1024); N = 1008 (partial last 128-row tile and 2-CTA cluster, dt with padding); 1040 x 784 <- 320 uniform codes
// (partial tiles in M, N and K); 4133 x 784 <- 320 (N % 16 != 0: no dt); 80 x 48 <- 1024 with wide pre (GELU' tails);
// 16 x 16 <- 16; 1 x 16 <- 16 (no dt).
// Timing (median of 20 after 3 warm-ups) at d12 and d24: today's cuBLASLt FP8 dgrad (BF16 out), that GEMM plus the
// dGELU producer pass (plain + transposed E5M2 codes, amax: what the fused kernel replaces), that pass with the bias
// gradient's column sums as well (what the FP8 build runs for the fc layer today), and each configuration without
// and with g, without and with the column sums ("+ cols"); speed-ups against GEMM alone, against GEMM + producer and
// against GEMM + producer with the column sums ("vs +cols": like for like for the "+ cols" rows). The trainer's rows
// (--fp8-cutlass 1): "+ cols" under delayed scaling, "+ g + cols" under current scaling (g for the speculative
// fallback).
// The last line is `N passed, N failed`; exit status 1 on any failure.

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <type_traits>
#include <vector>
#include "dev/cuda/harness.cuh"
#include "dev/cuda/fp8_gemm_host.cuh"
#include "llmc/kernels/gemm/gemm_fp8.cuh"
#include "llmc/kernels/fp8/lowp_producers.cuh"
#include "llmc/kernels/gemm/cutlass_fp8_dgelu.h"
#include "llmc/kernels/gemm/gemm_kernels.cuh"

typedef __nv_bfloat16 bf16;

static const double G_NORM_TOL = 5e-3;       // ||g - g64|| / ||g64||
static const double G_ELEM_REL = 1.0 / 256;  // x |g64|: BF16 rounding
static const double G_ELEM_ACC = 1.0 / 1024; // x S: FP8 tensor-core accumulation
static const size_t GUARD = 4096;            // poisoned bytes after d, g and dt

static Tally tally;
static FP8Format kE4M3, kE5M2;

// ------------------------------------------------------------------------------------------------
// Host helpers

// gelu_tanh'(x) in float64 (gemm_kernels.cuh gemm_gelu_tanh_grad's formula)
static double dgelu64(double x) {
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    const double s = 1.0 / (1.0 + exp(-2.0 * u));
    return s + 2.0 * x * s * (1.0 - s) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

static uint8_t e5m2(float v) { return fp8_encode_rne(kE5M2, v, 1); }

// ldt of the transposed codes in the checks: N + 16 (N a multiple of 16: 16 padding columns that must stay poisoned)
static int ldt_for(int N) { return N + 16; }

// ------------------------------------------------------------------------------------------------
// Cases

struct Case {
    const char* name;
    int N, C, OC;
    bool codes;     // uniform random codes (else quantized Gaussians)
    float wstd;     // Gaussian weights' std
    float pre_std;  // std of pre
    int d_mode;     // 0: current-scaling power of two, 1: x8 (saturation), 2: not a power of two
};

struct HostCase {
    std::vector<uint8_t> dy, wt;  // (N, OC) E5M2, (C, OC) E4M3 codes
    float dy_ds = 1, wt_ds = 1;   // dequant scales (powers of two)
    std::vector<float> pre;       // (N, C) BF16 values
    float d_scale = 1;
};

// Device side of a case: operands, outputs (with guards), scales.
struct DevCase {
    int N, C, OC, ldt, prows;  // prows: rows of the column-sum partials (cutlass_fp8_dgelu_col_partial_rows)
    DeviceBuffer<uint8_t> dy, wt, d, dt;
    DeviceBuffer<bf16> pre, g;
    DeviceBuffer<float> cols;    // (prows, C) partials + a guard of GUARD / 4 floats
    DeviceBuffer<float> scales;  // [0] dy dequant, [4] wt dequant, [8] d quant, [12] amax (16-byte apart)
    DevCase(int N_, int C_, int OC_, int ldt_)
        : N(N_), C(C_), OC(OC_), ldt(ldt_), prows(cutlass_fp8_dgelu_col_partial_rows(N_)), dy((size_t)N_ * OC_ + 16), wt((size_t)C_ * OC_),
          d((size_t)N_ * C_ + GUARD), dt((size_t)C_ * ldt_ + GUARD), pre((size_t)N_ * C_), g((size_t)N_ * C_ + GUARD / 2),
          cols((size_t)prows * C_ + GUARD / 4), scales(16) {}
    float* dy_ds() { return scales.ptr + 0; }
    float* wt_ds() { return scales.ptr + 4; }
    float* d_scale() { return scales.ptr + 8; }
    float* amax() { return scales.ptr + 12; }
    void poison_outputs() {
        poison_all(d, dt, g, cols);
        cudaCheck(cudaMemset(amax(), 0xFF, sizeof(float)));
    }
    // dt where N allows it (a multiple of 16: cutlass_fp8_dgelu.h), else NULL
    uint8_t* dt_or_null() { return N % 16 == 0 ? dt.ptr : NULL; }
    void run(bool with_g, bool with_cols, cudaStream_t stream, CutlassDgeluConfig cfg) {
        cutlass_fp8_dgelu_dgrad(d.ptr, dt_or_null(), ldt, amax(), with_g ? g.ptr : NULL, with_cols ? cols.ptr : NULL, dy.ptr, dy_ds(), wt.ptr,
                                wt_ds(), pre.ptr, d_scale(), N, C, OC, stream, cfg);
    }
};

struct Outputs {
    std::vector<uint8_t> d, dt;
    std::vector<bf16> g;
    std::vector<float> cols;
    float amax;
};

static Outputs download_outputs(DevCase& dc) {
    Outputs o;
    o.d = download_raw(dc.d);
    o.dt = download_raw(dc.dt);
    o.g = download_raw(dc.g);
    o.cols = download_raw(dc.cols);
    cudaCheck(cudaMemcpy(&o.amax, dc.amax(), sizeof(float), cudaMemcpyDeviceToHost));
    return o;
}

// The column-sum buffer: *unwritten = partials (of prows x C) still holding the poison (0xFF bytes: NaN), *touched =
// guard floats after them that changed.
static void cols_written(const Outputs& o, size_t nparts, size_t* unwritten, size_t* touched) {
    *unwritten = *touched = 0;
    for (size_t i = 0; i < o.cols.size(); i++) {
        const bool poisoned = bits_of(o.cols[i]) == 0xFFFFFFFFu;
        if (i < nparts) *unwritten += poisoned;
        else *touched += !poisoned;
    }
}

// The float64 reference of the column sums: for every 128-row tile t and column c, part64[t, c] = Σ v(n, c) and
// abs64[t, c] = Σ |v(n, c)| over the tile's rows n < N, with v = gemm_dgelu_stored(g, pre) (today's producer's
// stored GELU' product, compiled with the trainer's flags: bit for bit the epilogue's, check_dgelu_exhaustive) of the
// kernel's own g. One thread per (tile, column), rows in order.
__global__ void colsum_ref_kernel(double* __restrict__ part64, double* __restrict__ abs64, const bf16* __restrict__ g,
                                  const bf16* __restrict__ pre, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= C) return;
    double s = 0.0, a = 0.0;
    for (int n = t * CUTLASS_FP8_DGELU_COL_TILE_M; n < min(N, (t + 1) * CUTLASS_FP8_DGELU_COL_TILE_M); n++) {
        const double v = (double)(float)gemm_dgelu_stored((float)g[(size_t)n * C + c], (float)pre[(size_t)n * C + c]);
        s += v;
        a += fabs(v);
    }
    part64[(size_t)t * C + c] = s;
    abs64[(size_t)t * C + c] = a;
}

// gemm_dbias_finish's fp32 order on the host (gemm_kernels.cuh): per column, 8 partial sums (chunks y, y + 8, ... in
// order), then added in order from zero. parts: (rows, C) row-major.
static float finish_like_dbias(const float* parts, int rows, int C, int c) {
    float sums[GEMM_DBIAS_BLOCK_Y];
    for (int y = 0; y < GEMM_DBIAS_BLOCK_Y; y++) {
        float s = 0.0f;
        for (int r = y; r < rows; r += GEMM_DBIAS_BLOCK_Y) s += parts[(size_t)r * C + c];
        sums[y] = s;
    }
    float total = 0.0f;
    for (int y = 0; y < GEMM_DBIAS_BLOCK_Y; y++) total += sums[y];
    return total;
}

static const double U32 = 1.0 / 16777216.0;  // fp32 unit roundoff 2^-24
static const int COLSUM_DEPTH = 16;          // bound on the fp32 additions behind one partial (11: header comment)

// Poisoned bytes after the first n elements of d and g, and anywhere in dt when it was not written (no_dt).
static bool guards_intact(const Outputs& o, size_t n, bool g_written) {
    for (size_t i = n; i < o.d.size(); i++)
        if (o.d[i] != 0xFF) return false;
    for (size_t i = g_written ? n : 0; i < o.g.size(); i++)
        if (bf16_bits(o.g[i]) != 0xFFFF) return false;
    return true;
}

// dt (C, ldt) against d (N, C): *differ = elements with dt[c, n] != d[n, c] (n < N), *touched = poisoned bytes that
// changed outside the written region (padding columns n = N..ldt-1 and the guard after C * ldt).
static void compare_dt(const Outputs& o, int N, int C, int ldt, size_t* differ, size_t* touched) {
    *differ = *touched = 0;
    for (int c = 0; c < C; c++) {
        const uint8_t* row = &o.dt[(size_t)c * ldt];
        for (int n = 0; n < N; n++) *differ += row[n] != o.d[(size_t)n * C + c];
        for (int n = N; n < ldt; n++) *touched += row[n] != 0xFF;
    }
    for (size_t i = (size_t)C * ldt; i < o.dt.size(); i++) *touched += o.dt[i] != 0xFF;
}

// ------------------------------------------------------------------------------------------------
// One case

static void run_case(const Case& cs, int index, uint64_t seed, Fp8GemmContext* fctx, cudaStream_t stream, CutlassDgeluConfig cfg) {
    const int N = cs.N, C = cs.C, OC = cs.OC;
    const bool with_dt = N % 16 == 0;
    const uint64_t s0 = seed * 1000 + (uint64_t)index * 10;
    printf("\n[%d] %s: N=%d C=%d OC=%d, %s, pre std %.2g, d_scale %s%s\n", index, cs.name, N, C, OC,
           cs.codes ? "uniform random codes" : "quantized Gaussians", cs.pre_std,
           cs.d_mode == 0 ? "current-scaling power of two" : cs.d_mode == 1 ? "x8 (saturating)" : "not a power of two",
           with_dt ? "" : ", no dt (N % 16 != 0)");
    HostCase h;
    if (cs.codes) {
        uniform_codes(h.dy, (size_t)N * OC, s0 + 1, kE5M2);
        uniform_codes(h.wt, (size_t)C * OC, s0 + 2, kE4M3);
        h.dy_ds = 1.0f / 4096;  // |dy| <= 14
        h.wt_ds = 1.0f / 4096;  // |w| <= 0.11
    } else {
        gaussian_codes(h.dy, &h.dy_ds, (size_t)N * OC, s0 + 1, 1.0f, kE5M2);
        gaussian_codes(h.wt, &h.wt_ds, (size_t)C * OC, s0 + 2, cs.wstd, kE4M3);
    }
    h.pre = random_normal((size_t)N * C, s0 + 3, cs.pre_std);
    for (float& p : h.pre) p = bf16_rne(p);
    const GemmRef ref = gemm_reference(h.dy, kE5M2, h.dy_ds, h.wt, kE4M3, h.wt_ds, std::vector<float>(), N, OC, C, s0 + 4);
    double amax_est = 0;
    for (size_t i = 0; i < ref.rows.size(); i++)
        for (int c = 0; c < C; c++)
            amax_est = std::max(amax_est, fabs(ref.z[i * C + c] * dgelu64(h.pre[(size_t)ref.rows[i] * C + c])));
    const float d_pow2 = fp8_scale_pow2_from_amax(kE5M2, (float)amax_est, 0);
    h.d_scale = cs.d_mode == 0 ? d_pow2 : cs.d_mode == 1 ? 8.0f * d_pow2 : (float)(0.9 * 57344.0 / amax_est);
    printf("  scales: dy dequant 2^%d, wt dequant 2^%d, d quant %.6g; sampled rows %zu; max |v| of them %.4g\n", (int)lrint(log2(h.dy_ds)),
           (int)lrint(log2(h.wt_ds)), h.d_scale, ref.rows.size(), amax_est);

    DevCase dc(N, C, OC, ldt_for(N));
    cudaCheck(cudaMemcpy(dc.dy.ptr, h.dy.data(), h.dy.size(), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dc.wt.ptr, h.wt.data(), h.wt.size(), cudaMemcpyHostToDevice));
    upload(dc.pre, h.pre);
    const float sc[16] = {h.dy_ds, 0, 0, 0, h.wt_ds, 0, 0, 0, h.d_scale, 0, 0, 0, 0, 0, 0, 0};
    cudaCheck(cudaMemcpy(dc.scales.ptr, sc, sizeof(sc), cudaMemcpyHostToDevice));

    dc.poison_outputs();
    dc.run(true, true, stream, cfg);
    cudaCheck(cudaStreamSynchronize(stream));
    const Outputs o = download_outputs(dc);
    const size_t n = (size_t)N * C;
    const size_t nparts = (size_t)dc.prows * C;

    // --- g against float64 on the sampled rows; finite everywhere
    {
        ErrAcc e;
        size_t bad = 0, differ = 0;
        double worst_over_S = 0;
        for (size_t i = 0; i < ref.rows.size(); i++)
            for (int c = 0; c < C; c++) {
                const float got = bf16_value(o.g[(size_t)ref.rows[i] * C + c]);
                const double want = ref.z[i * C + c], S = ref.S[i * C + c];
                e.add(got, want);
                const double err = fabs((double)got - want);
                if (!(err <= G_ELEM_REL * fabs(want) + G_ELEM_ACC * S + 1e-30)) {
                    if (bad < 3) printf("    g[%d, %d] = %.8g, float64 %.10g, S %.4g\n", ref.rows[i], c, got, want, S);
                    bad++;
                }
                if (S > 0) worst_over_S = std::max(worst_over_S, err / S);
                differ += got != bf16_rne(want);
            }
        size_t nonfinite = 0;
        for (size_t i = 0; i < n; i++) nonfinite += !isfinite(bf16_value(o.g[i]));
        printf("  g: %zu of %zu sampled values differ from bf16(g64) (accumulation order / precision); max |err| / S = %.3g\n", differ,
               ref.z.size(), worst_over_S);
        tally.check("g vs float64 (norm)", e.result(G_NORM_TOL), G_NORM_TOL);
        char name[96];
        snprintf(name, sizeof(name), "g per element (%zu outside)", bad);
        tally.check(name, bad == 0);
        snprintf(name, sizeof(name), "g all finite (%zu not)", nonfinite);
        tally.check(name, nonfinite == 0);
    }

    // --- d, dt, amax against today's producer on this g
    {
        DeviceBuffer<uint8_t> pc(n), pt(n);
        DeviceBuffer<uint32_t> bits(1);
        bits.zero();
        poison_all(pc, pt);
        fp8_quantize_pair_from(pc.ptr, pt.ptr, LowpSrcDgelu{dc.g.ptr, dc.pre.ptr}, N, C, FP8_E5M2, dc.d_scale(), bits.ptr, NULL, NULL, 0,
                               stream);
        cudaCheck(cudaStreamSynchronize(stream));
        const std::vector<uint8_t> p = download_raw(pc), t = download_raw(pt);
        uint32_t b = 0;
        cudaCheck(cudaMemcpy(&b, bits.ptr, 4, cudaMemcpyDeviceToHost));
        const float pamax = fp8q_amax_from_bits(b);
        size_t diff = 0, tdiff = 0, nan_codes = 0;
        int max_code = 0;
        for (size_t i = 0; i < n; i++) {
            diff += o.d[i] != p[i];
            if ((o.d[i] & 0x7F) > 0x7C) nan_codes++;
            else max_code = std::max(max_code, (int)(o.d[i] & 0x7F));
        }
        if (with_dt)
            for (int c = 0; c < C; c++)
                for (int m = 0; m < N; m++) tdiff += t[(size_t)c * N + m] != o.dt[(size_t)c * dc.ldt + m];
        printf("  today's dGELU producer on this g: %zu codes of d%s differ, amax %.8g vs the kernel's %.8g; largest |code| 0x%02X, "
               "code of amax * d_scale 0x%02X\n", diff, with_dt ? " (and of dt)" : "", pamax, o.amax, max_code,
               e5m2(o.amax * h.d_scale) & 0x7F);
        if (diff) {
            size_t i = 0;
            while (o.d[i] == p[i]) i++;
            printf("    first at (%zu, %zu): g %.8g, pre %.8g, kernel 0x%02X, producer 0x%02X\n", i / C, i % C, bf16_value(o.g[i]), h.pre[i],
                   o.d[i], p[i]);
        }
        char name[96];
        snprintf(name, sizeof(name), "d bit-exact = producer (%zu differ)", diff);
        tally.check(name, diff == 0);
        if (with_dt) {
            snprintf(name, sizeof(name), "dt bit-exact = producer's transposed (%zu differ)", tdiff);
            tally.check(name, tdiff == 0);
        }
        tally.check("amax bit-exact = producer", bits_of(pamax) == bits_of(o.amax));
        snprintf(name, sizeof(name), "d no NaN code / unwritten (%zu)", nan_codes);
        tally.check(name, nan_codes == 0);
        tally.check("amax and d: max |code| = code(amax * d_scale)", max_code == (e5m2(o.amax * h.d_scale) & 0x7F));
        if (cs.d_mode == 1) printf("  (x8 scale: %s saturated codes)\n", max_code == 0x7B ? "has" : "NO");
    }

    // --- the bias gradient's column sums against float64 (the kernel's own g: dc.g still holds it)
    {
        DeviceBuffer<double> p64(nparts), a64(nparts);
        colsum_ref_kernel<<<dim3(ceil_div(C, 128), dc.prows), 128, 0, stream>>>(p64.ptr, a64.ptr, dc.g.ptr, dc.pre.ptr, N, C);
        cudaCheck(cudaGetLastError());
        // today's producer's column sums (64-row tiles) of the same v, for the printed comparison
        const int qrows = fp8_col_partial_rows(N);
        DeviceBuffer<float> qp((size_t)qrows * C);
        DeviceBuffer<uint8_t> qc(n), qt(n);
        fp8_quantize_pair_from(qc.ptr, qt.ptr, LowpSrcDgelu{dc.g.ptr, dc.pre.ptr}, N, C, FP8_E5M2, dc.d_scale(), NULL, qp.ptr, NULL, 0, stream);
        cudaCheck(cudaStreamSynchronize(stream));
        const std::vector<double> part64 = download_raw(p64), abs64 = download_raw(a64);
        const std::vector<float> qparts = download_raw(qp);
        size_t unwritten = 0, touched = 0, bad_part = 0, bad_sum = 0, differ_prod = 0;
        double worst_part = 0, worst_sum = 0, worst_prod = 0;  // error / bound; |kernel - producer| / bound
        cols_written(o, nparts, &unwritten, &touched);
        for (size_t i = 0; i < nparts; i++) {
            const double bound = COLSUM_DEPTH * U32 * abs64[i], err = fabs((double)o.cols[i] - part64[i]);
            if (!(err <= bound)) {
                if (bad_part < 3) printf("    partial [%zu, %zu] = %.9g, float64 %.12g, bound %.3g\n", i / C, i % C, o.cols[i], part64[i], bound);
                bad_part++;
            }
            if (bound > 0) worst_part = std::max(worst_part, err / bound);
        }
        const int depth_sum = COLSUM_DEPTH + ceil_div(dc.prows, GEMM_DBIAS_BLOCK_Y) + GEMM_DBIAS_BLOCK_Y;
        for (int c = 0; c < C; c++) {
            double s64 = 0, a = 0;
            for (int t = 0; t < dc.prows; t++) {
                s64 += part64[(size_t)t * C + c];
                a += abs64[(size_t)t * C + c];
            }
            const float got = finish_like_dbias(o.cols.data(), dc.prows, C, c);
            const float prod = finish_like_dbias(qparts.data(), qrows, C, c);
            const double bound = depth_sum * U32 * a, err = fabs((double)got - s64);
            if (!(err <= bound)) {
                if (bad_sum < 3) printf("    dbias[%d] = %.9g, float64 %.12g, bound %.3g\n", c, got, s64, bound);
                bad_sum++;
            }
            if (bound > 0) {
                worst_sum = std::max(worst_sum, err / bound);
                worst_prod = std::max(worst_prod, fabs((double)got - (double)prod) / bound);
            }
            differ_prod += bits_of(got) != bits_of(prod);
        }
        printf("  column sums: %d partials per column; worst |err| / bound: partials %.3g, finished %.3g (bound %d u sum|v|); "
               "against today's producer's (64-row tiles) finished the same way: %zu of %d columns differ, at most %.3g of the bound\n",
               dc.prows, worst_part, worst_sum, depth_sum, differ_prod, C, worst_prod);
        char name[112];
        snprintf(name, sizeof(name), "column-sum partials vs float64, 16 u sum|v| (%zu outside)", bad_part);
        tally.check(name, bad_part == 0);
        snprintf(name, sizeof(name), "bias gradient (dbias order) vs float64, %d u sum|v| (%zu outside)", depth_sum, bad_sum);
        tally.check(name, bad_sum == 0);
        snprintf(name, sizeof(name), "column sums all written (%zu not), guard untouched (%zu)", unwritten, touched);
        tally.check(name, unwritten == 0 && touched == 0);
    }

    // --- dt: the transposed copy of d; padding columns and guard untouched
    if (with_dt) {
        size_t differ = 0, touched = 0;
        compare_dt(o, N, C, dc.ldt, &differ, &touched);
        char name[96];
        snprintf(name, sizeof(name), "dt = d transposed, bit for bit (%zu differ)", differ);
        tally.check(name, differ == 0);
        snprintf(name, sizeof(name), "dt padding columns and guard untouched (%zu)", touched);
        tally.check(name, touched == 0);
    } else {
        size_t touched = 0;
        for (uint8_t v : o.dt) touched += v != 0xFF;
        tally.check("dt (not requested) untouched", touched == 0);
    }

    // --- end to end (printed): d against float64 all the way on the sampled rows
    {
        size_t diff = 0;
        int worst = 0;
        for (size_t i = 0; i < ref.rows.size(); i++)
            for (int c = 0; c < C; c++) {
                const double v64 = ref.z[i * C + c] * dgelu64(h.pre[(size_t)ref.rows[i] * C + c]);
                const int st = code_steps(o.d[(size_t)ref.rows[i] * C + c], e5m2((float)(v64 * (double)h.d_scale)));
                diff += st != 0;
                worst = std::max(worst, st);
            }
        printf("  end to end: %zu of %zu sampled codes differ from e5m2(g64 gelu'(pre) d_scale) in float64 (at most %d step%s)\n", diff,
               ref.z.size(), worst, worst == 1 ? "" : "s");
    }

    // --- writes stay inside; a second run is bitwise equal; without g the same codes and g untouched; without the
    // column sums the same codes and their buffer untouched
    tally.check("guard bytes after d and g untouched", guards_intact(o, n, true));
    dc.poison_outputs();
    dc.run(true, true, stream, cfg);
    cudaCheck(cudaStreamSynchronize(stream));
    const Outputs o2 = download_outputs(dc);
    tally.check("two runs bitwise equal (d, dt, g, amax, column sums)", same_bits(o.d, o2.d) && same_bits(o.dt, o2.dt) &&
                                                                         same_bits(o.g, o2.g) && same_bits(o.cols, o2.cols) &&
                                                                         bits_of(o.amax) == bits_of(o2.amax));
    dc.poison_outputs();
    dc.run(false, true, stream, cfg);
    cudaCheck(cudaStreamSynchronize(stream));
    const Outputs o3 = download_outputs(dc);
    tally.check("g = NULL: same d, dt, amax, column sums; g untouched", same_bits(o.d, o3.d) && same_bits(o.dt, o3.dt) &&
                                                                          same_bits(o.cols, o3.cols) && bits_of(o.amax) == bits_of(o3.amax) &&
                                                                          guards_intact(o3, n, false));
    dc.poison_outputs();
    dc.run(true, false, stream, cfg);
    cudaCheck(cudaStreamSynchronize(stream));
    const Outputs o4 = download_outputs(dc);
    size_t cols_touched = 0;
    for (float v : o4.cols) cols_touched += bits_of(v) != 0xFFFFFFFFu;
    tally.check("no column sums: same d, dt, g, amax; their buffer untouched", same_bits(o.d, o4.d) && same_bits(o.dt, o4.dt) &&
                                                                                 same_bits(o.g, o4.g) && bits_of(o.amax) == bits_of(o4.amax) &&
                                                                                 cols_touched == 0);

    // --- cuBLASLt's dgrad on the same operands (printed)
    {
        DeviceBuffer<bf16> lt(n);
        if (fp8_linear_dgrad<bf16>(fctx, lt.ptr, dc.dy.ptr, dc.dy_ds(), dc.wt.ptr, dc.wt_ds(), N, C, OC, FP8_SCALE_TENSOR, 0)) {
            cudaCheck(cudaStreamSynchronize(stream));
            const std::vector<bf16> p = download_raw(lt);
            size_t diff = 0;
            int worst = 0;
            for (size_t i = 0; i < n; i++) {
                const int a = (int)bf16_bits(p[i]), b = (int)bf16_bits(o.g[i]);
                if (a != b) {
                    diff++;
                    worst = std::max(worst, ((a ^ b) & 0x8000) ? 1 << 15 : abs(a - b));
                }
            }
            printf("  cuBLASLt FP8 dgrad on the same operands: %zu of %zu BF16 values differ from g (at most %d ulp%s)\n", diff, n, worst,
                   worst == 1 ? "" : "s");
        } else {
            printf("  cuBLASLt FP8 dgrad: cannot run this shape (%s)\n", fctx->last_error);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// GELU' on every pair of BF16 inputs

// g[i] = the BF16 value with bits g0 + i / 65536, pre[i] = the one with bits i % 65536, i < 2^24 (one chunk of pairs).
__global__ void fill_pairs_kernel(float* __restrict__ g, float* __restrict__ pre, uint32_t g0) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (1u << 24)) return;
    g[i] = __uint_as_float((g0 + (i >> 16)) << 16);
    pre[i] = __uint_as_float((i & 0xFFFFu) << 16);
}

// Counts the pairs whose configuration output differs in bits from today's gemm_dgelu_stored (compiled here with this
// build's flags: the trainer's), and keeps the smallest differing global index ((g bits << 16) | pre bits).
__global__ void compare_pairs_kernel(const float* __restrict__ g, const float* __restrict__ pre, const float* __restrict__ got,
                                     uint32_t g0, unsigned long long* __restrict__ count, unsigned int* __restrict__ first) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (1u << 24)) return;
    const float want = (float)gemm_dgelu_stored(g[i], pre[i]);
    if (__float_as_uint(want) != __float_as_uint(got[i])) {
        atomicAdd(count, 1ull);
        atomicMin(first, (g0 << 16) + i);
    }
}

static void check_dgelu_exhaustive(cudaStream_t stream, CutlassDgeluConfig cfg) {
    printf("\nGELU' on all 2^32 pairs of BF16 inputs (configuration %s):\n", cutlass_fp8_dgelu_config_name(cfg));
    const int n = 1 << 24;  // pairs per chunk: 256 values of g x all 65536 of pre
    DeviceBuffer<float> g(n), pre(n), got(n);
    DeviceBuffer<unsigned long long> count(1);
    DeviceBuffer<unsigned int> first(1);
    count.zero();
    first.poison();  // 0xFFFFFFFF: none yet
    for (uint32_t g0 = 0; g0 < 65536; g0 += 256) {
        fill_pairs_kernel<<<n / 256, 256, 0, stream>>>(g.ptr, pre.ptr, g0);
        cudaCheck(cudaGetLastError());
        got.poison();
        cutlass_fp8_dgelu_eval(cfg, g.ptr, pre.ptr, got.ptr, n, stream);
        compare_pairs_kernel<<<n / 256, 256, 0, stream>>>(g.ptr, pre.ptr, got.ptr, g0, count.ptr, first.ptr);
        cudaCheck(cudaGetLastError());
    }
    cudaCheck(cudaStreamSynchronize(stream));
    unsigned long long c = 0;
    unsigned int f = 0;
    cudaCheck(cudaMemcpy(&c, count.ptr, sizeof(c), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&f, first.ptr, sizeof(f), cudaMemcpyDeviceToHost));
    printf("  %llu of 2^32 pairs give other bits than today's producer; producer compiled %s --use_fast_math\n", c,
#if defined(__USE_FAST_MATH__)
           "with"
#else
           "WITHOUT"
#endif
    );
    if (c) printf("    first: g = %.8g (0x%04X), pre = %.8g (0x%04X)\n", f32_from_bits(f & 0xFFFF0000u), f >> 16, f32_from_bits(f << 16), f & 0xFFFFu);
    char name[96];
    snprintf(name, sizeof(name), "GELU' = producer, all pairs (%llu differ)", c);
    tally.check(name, c == 0);
}

// ------------------------------------------------------------------------------------------------
// Arguments

static void check_arguments(cudaStream_t stream, CutlassDgeluConfig cfg) {
    printf("\narguments (configuration %s):\n", cutlass_fp8_dgelu_config_name(cfg));
    DevCase dc(64, 64, 64, 64);
    const void *d = dc.d.ptr, *t = dc.dt.ptr, *g = dc.g.ptr, *cs = dc.cols.ptr, *dy = dc.dy.ptr, *wt = dc.wt.ptr, *p = dc.pre.ptr;
    struct Bad { const char* what; int N, C, OC; const void *d, *t; int ldt; const void *g, *cs, *dy, *wt, *p; };
    const std::vector<Bad> bad = {
        {"C = 24 (not a multiple of 16)", 64, 24, 64, d, t, 64, g, cs, dy, wt, p},
        {"OC = 8", 64, 64, 8, d, t, 64, g, cs, dy, wt, p},
        {"N = -1", -1, 64, 64, d, t, 64, g, cs, dy, wt, p},
        {"dy + 1 (misaligned)", 64, 64, 64, d, t, 64, g, cs, (const uint8_t*)dy + 1, wt, p},
        {"g + 1 element", 64, 64, 64, d, t, 64, (const bf16*)g + 1, cs, dy, wt, p},
        {"pre + 2 elements", 64, 64, 64, d, t, 64, g, cs, dy, wt, (const bf16*)p + 2},
        {"col_partials + 1 float", 64, 64, 64, d, t, 64, g, (const float*)cs + 1, dy, wt, p},
        {"d = NULL", 64, 64, 64, NULL, t, 64, g, cs, dy, wt, p},
        {"pre = NULL", 64, 64, 64, d, t, 64, g, cs, dy, wt, NULL},
        {"dt + 8 (misaligned)", 64, 64, 64, d, (const uint8_t*)t + 8, 64, g, cs, dy, wt, p},
        {"ldt = 48 (< N)", 64, 64, 64, d, t, 48, g, cs, dy, wt, p},
        {"ldt = 72 (not a multiple of 16)", 64, 64, 64, d, t, 72, g, cs, dy, wt, p},
        {"N = 63 with dt (not a multiple of 16)", 63, 64, 64, d, t, 64, g, cs, dy, wt, p},
    };
    for (const Bad& b : bad) {
        const char* why = cutlass_fp8_dgelu_unsupported(b.N, b.C, b.OC, b.d, b.t, b.ldt, b.g, b.cs, b.dy, b.wt, b.p, cfg);
        printf("  %-38s -> %s\n", b.what, why ? why : "(accepted)");
        char name[96];
        snprintf(name, sizeof(name), "refuses %s", b.what);
        tally.check(name, why != NULL);
    }
    const char* ok = cutlass_fp8_dgelu_unsupported(64, 64, 64, d, t, 64, g, cs, dy, wt, p, cfg);
    if (ok) printf("  64 x 64 <- 64 refused: %s\n", ok);
    tally.check("accepts 64 x 64 <- 64 with dt, g and column sums", ok == NULL);
    const char* ok63 = cutlass_fp8_dgelu_unsupported(63, 64, 64, d, NULL, 0, NULL, NULL, dy, wt, p, cfg);
    if (ok63) printf("  63 x 64 <- 64 without dt refused: %s\n", ok63);
    tally.check("accepts 63 x 64 <- 64 without dt and g", ok63 == NULL);
    // N = 0: amax zeroed, nothing written
    dc.poison_outputs();
    cudaCheck(cudaMemset(dc.scales.ptr, 0, 12 * sizeof(float)));
    cutlass_fp8_dgelu_dgrad(dc.d.ptr, dc.dt.ptr, 16, dc.amax(), dc.g.ptr, dc.cols.ptr, dc.dy.ptr, dc.dy_ds(), dc.wt.ptr, dc.wt_ds(), dc.pre.ptr,
                            dc.d_scale(), 0, 64, 64, stream, cfg);
    cudaCheck(cudaStreamSynchronize(stream));
    const Outputs o = download_outputs(dc);
    size_t dt_touched = 0, cols_touched = 0;
    for (uint8_t v : o.dt) dt_touched += v != 0xFF;
    for (float v : o.cols) cols_touched += bits_of(v) != 0xFFFFFFFFu;
    tally.check("N = 0: amax = 0, nothing written", bits_of(o.amax) == 0 && guards_intact(o, 0, false) && dt_touched == 0 && cols_touched == 0);
}

// ------------------------------------------------------------------------------------------------
// Timing

struct TimeRow {
    const char* shape;
    int config;      // >= 0: a configuration; -1: cuBLASLt dgrad; -2: + dGELU producer; -3: + producer with column sums
    bool with_g;     // configurations: g stored
    bool with_cols;  // configurations: the column sums
    float ms, ms_gemm, ms_both, ms_cols;
    double flop;
};

// Times, at one shape, today's chain and every configuration in cfgs (without and with g); appends the rows.
static void time_shape(int N, int C, int OC, const char* label, uint64_t seed, Fp8GemmContext* fctx, cudaStream_t stream,
                       const std::vector<int>& cfgs, std::vector<TimeRow>* rows) {
    HostCase h;
    gaussian_codes(h.dy, &h.dy_ds, (size_t)N * OC, seed + 1, 1.0f, kE5M2);
    gaussian_codes(h.wt, &h.wt_ds, (size_t)C * OC, seed + 2, 0.02f, kE4M3);
    DevCase dc(N, C, OC, N);  // ldt = N: the trainer's layout
    cudaCheck(cudaMemcpy(dc.dy.ptr, h.dy.data(), h.dy.size(), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dc.wt.ptr, h.wt.data(), h.wt.size(), cudaMemcpyHostToDevice));
    upload(dc.pre, random_normal((size_t)N * C, seed + 3, 1.0f));
    const float sc[16] = {h.dy_ds, 0, 0, 0, h.wt_ds, 0, 0, 0, 1024.0f, 0, 0, 0, 0, 0, 0, 0};
    cudaCheck(cudaMemcpy(dc.scales.ptr, sc, sizeof(sc), cudaMemcpyHostToDevice));
    const size_t n = (size_t)N * C;
    DeviceBuffer<bf16> gl(n);
    DeviceBuffer<uint8_t> codes(n), tcodes(n);
    DeviceBuffer<uint32_t> bits(1);
    DeviceBuffer<float> colpart((size_t)fp8_col_partial_rows(N) * C);
    bits.zero();
    const double flop = 2.0 * N * C * OC;
    auto lt = [&] {
        if (!fp8_linear_dgrad<bf16>(fctx, gl.ptr, dc.dy.ptr, dc.dy_ds(), dc.wt.ptr, dc.wt_ds(), N, C, OC, FP8_SCALE_TENSOR, 0)) {
            fprintf(stderr, "error: cuBLASLt FP8 dgrad refused %d x %d <- %d: %s\n", N, C, OC, fctx->last_error);
            exit(1);
        }
    };
    auto prod = [&](float* cp) {
        fp8_quantize_pair_from(codes.ptr, tcodes.ptr, LowpSrcDgelu{gl.ptr, dc.pre.ptr}, N, C, FP8_E5M2, dc.d_scale(), bits.ptr, cp, NULL, 0,
                               stream);
    };
    const float t_lt = time_median_ms(lt, 3, 20, stream);
    const float t_both = time_median_ms([&] { lt(); prod(NULL); }, 3, 20, stream);
    const float t_cols = time_median_ms([&] { lt(); prod(colpart.ptr); }, 3, 20, stream);
    rows->push_back({label, -1, false, false, t_lt, t_lt, t_both, t_cols, flop});
    rows->push_back({label, -2, false, false, t_both, t_lt, t_both, t_cols, flop});
    rows->push_back({label, -3, false, true, t_cols, t_lt, t_both, t_cols, flop});
    for (int c : cfgs)
        for (int variant = 0; variant < 4; variant++) {
            const bool with_g = variant & 1, with_cols = variant & 2;
            const float t = time_median_ms([&] { dc.run(with_g, with_cols, stream, (CutlassDgeluConfig)c); }, 3, 20, stream);
            rows->push_back({label, c, with_g, with_cols, t, t_lt, t_both, t_cols, flop});
        }
}

static void print_time_table(const std::vector<TimeRow>& rows) {
    printf("\ntiming table (median of 20 after 3 warm-ups; today's dgrad = cuBLASLt FP8 dgrad (BF16 out) + dGELU producer pass (plain and "
           "transposed E5M2 codes, amax); speed-ups: that time / the row's):\n");
    printf("  %-6s %-44s %9s %9s %12s %14s %10s\n", "shape", "configuration", "ms", "TFLOP/s", "vs GEMM", "vs GEMM+prod", "vs +cols");
    for (const TimeRow& r : rows) {
        char name[80];
        if (r.config == -1) snprintf(name, sizeof(name), "cuBLASLt dgrad (today)");
        else if (r.config == -2) snprintf(name, sizeof(name), "cuBLASLt dgrad + dGELU producer");
        else if (r.config == -3) snprintf(name, sizeof(name), "  ... producer with bias column sums");
        else
            snprintf(name, sizeof(name), "%s%s%s", cutlass_fp8_dgelu_config_name((CutlassDgeluConfig)r.config), r.with_g ? " + g" : "",
                     r.with_cols ? " + cols" : "");
        printf("  %-6s %-44s %9.3f %9.0f %11.2fx %13.2fx %9.2fx\n", r.shape, name, r.ms, r.flop / (r.ms * 1e-3) / 1e12, r.ms_gemm / r.ms,
               r.ms_both / r.ms, r.ms_cols / r.ms);
    }
}

// ------------------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    bool timing = true, quick = false;
    std::vector<int> cfgs;
    uint64_t seed = ((uint64_t)time(NULL) << 16) ^ (uint64_t)getpid();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check-only")) timing = false;
        else if (!strcmp(argv[i], "--quick")) quick = true, timing = false;
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            const int c = cutlass_fp8_dgelu_config_parse(argv[++i]);
            if (c < 0) {
                fprintf(stderr, "error: no configuration '%s'; there are:", argv[i]);
                for (int k = 0; k < CUTLASS_DGELU_NUM_CONFIGS; k++) fprintf(stderr, " %s", cutlass_fp8_dgelu_config_name((CutlassDgeluConfig)k));
                fprintf(stderr, "\n");
                return 2;
            }
            cfgs.push_back(c);
        } else {
            fprintf(stderr, "usage: %s [--check-only] [--quick] [--seed S] [--config NAME ...]\n", argv[0]);
            return 2;
        }
    }
    if (cfgs.empty())
        for (int c = 0; c < CUTLASS_DGELU_NUM_CONFIGS; c++) cfgs.push_back(c);
    kE4M3 = fp8_format(FP8_E4M3FN);
    kE5M2 = fp8_format(FP8_E5M2);
    const cudaDeviceProp prop = harness_device();
    printf("cutlass_fp8_dgelu: %s (sm_%d%d, %d SMs), %s build\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           PRECISION_MODE_NAME);
    for (int c : cfgs)
        printf("  %-20s %s\n", cutlass_fp8_dgelu_config_name((CutlassDgeluConfig)c), cutlass_fp8_dgelu_describe((CutlassDgeluConfig)c));
    printf("seed %llu (rerun with --seed %llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    printf("tolerances: g per element 2^-8 |g64| + 2^-10 S, norm %.0e; d, dt, amax bit-exact against today's producer on the kernel's g; "
           "column-sum partials %d u sum|v| (u = 2^-24)\n", G_NORM_TOL, COLSUM_DEPTH);
    if (prop.major != 9 || prop.minor != 0) {
        printf("the CUTLASS kernels are sm_90a code: they need a compute capability 9.0 GPU; nothing can be checked here.\n");
        tally.failed++;
        return tally.finish();
    }
    if (!std::is_same<floatX, bf16>::value) {
        printf("today's producer (LowpSrcDgelu) reads floatX: the checks need a BF16 build.\n");
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
        {"GPT-2 d12 fcproj dgrad, B=64 T=1024", 65536, 3072, 768, false, 0.02f, 1.0f, 0},
        {"GPT-2 d24 fcproj dgrad, B=32 T=1024", 32768, 4096, 1024, false, 0.02f, 1.0f, 0},
        {"N = 1008: partial last tile (dt with padding)", 1008, 3072, 768, false, 0.05f, 1.0f, 1},
        {"partial tiles in M, N and K", 1040, 784, 320, true, 0, 1.0f, 2},
        {"N % 16 != 0 (no dt)", 4133, 784, 320, false, 0.05f, 1.0f, 0},
        {"wide pre-activations (GELU' tails)", 80, 48, 1024, false, 0.2f, 4.0f, 2},
        {"smallest with dt", 16, 16, 16, false, 0.1f, 1.0f, 0},
        {"smallest", 1, 16, 16, false, 0.1f, 1.0f, 0},
    };
    const int ncases = (int)(sizeof(cases) / sizeof(cases[0]));
    for (int c : cfgs) {
        const CutlassDgeluConfig cfg = (CutlassDgeluConfig)c;
        printf("\n==== configuration %s: %s\n", cutlass_fp8_dgelu_config_name(cfg), cutlass_fp8_dgelu_describe(cfg));
        const int passed0 = tally.passed, failed0 = tally.failed;
        check_arguments(stream, cfg);
        if (!quick) check_dgelu_exhaustive(stream, cfg);
        for (int i = quick ? 2 : 0; i < ncases; i++) run_case(cases[i], i, seed, fctx, stream, cfg);
        printf("==== configuration %s: %d passed, %d failed\n", cutlass_fp8_dgelu_config_name(cfg), tally.passed - passed0,
               tally.failed - failed0);
    }
    if (timing) {
        std::vector<TimeRow> rows;
        time_shape(65536, 3072, 768, "d12", seed + 77, fctx, stream, cfgs, &rows);
        time_shape(32768, 4096, 1024, "d24", seed + 78, fctx, stream, cfgs, &rows);
        fp8_gemm_context_print_plans(fctx, stdout);
        print_time_table(rows);
    }
    cutlass_fp8_dgelu_free();
    fp8_gemm_context_free(fctx);
    delete fctx;
    gemm_context_free(&gctx);
    cudaCheck(cudaStreamDestroy(stream));
    return tally.finish();
}
