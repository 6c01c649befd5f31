// tcast_producers.cu - harness of the TensorCast casts fused into their producers (issue 26 item 2):
// tcast_cast_from (llmc/kernels/tcast/tcast_cast.cuh) with the sources of tcast_producers.cuh, against the
// producer kernel followed by today's stand-alone cast pass.
//
// Build and run (from the repository root, on a GPU machine):
//   make build/tcast/dev/tcast_producers TCAST=1 && build/tcast/dev/tcast_producers     (--check-only: no timing)
// In a build whose floatX is not BF16 the harness prints that it skips and exits 0.
//
// Correctness (every check bit-exact): for every producer
//   gelu       y = cast(GELU(pre)), the GELU output also stored (the fcproj layer's x: stored for wgrad)
//   gelu-site  y = cast(GELU(pre)), nothing else stored (a gelu_out site cast of the whole tensor)
//   dgelu      y = cast(d * GELU'(pre)), the product written back into d (the fc layer's dy)
// the reference is gemm.cuh's gemm_gelu_apply / gemm_dgelu_apply (the kernels training runs) and then
// tcast_cast on the stored result with the same seed. Outputs (y, the stored tensor) are poisoned before
// each run; inputs are fresh random tensors per case (normal values times per-row magnitudes from 2^-20 to
// 2^12, so that groups scale differently). Compared: y, the stored BF16 tensor, and the --cast-stats
// counters (values, saturated, flushed, scale histogram) of a second run with statistics. Data types: MX
// tile-32 float (mxfp8e4, mxfp8e5@stochastic, mxfp4e2) and int (mxint8), unscaled e4m3fn@stochastic, bfp16
// (tile 8), a tile-64 type (e4m3fn_e8m0_t64: along dim 0 the in-place GELU' cannot be fused and takes the
// producer-then-cast fallback), and a per-tensor scaled one (int8_e: always the fallback); along dim 1 and
// dim 0 (the wgrad layout); shapes 96 x 768, 256 x 3072 and 4096 x 3072. Each case also checks that
// tcast_cast_fusable answers as designed (a fused path that silently fell back would pass the bits but
// not the speed).
//
// LayerNorm producers (the x of the qkv, fc and LM-head layers, cast along C; tcast_layernorm_cast):
//   ln         y = cast(LayerNorm(x)), out, mean, rstd stored
//   res-ln     y = cast(LayerNorm(a + b)), residual, out, mean, rstd stored
// against layernorm_forward / fused_residual_layernorm_forward (layernorm.cuh, the trainer's kernels) and then
// tcast_cast of the stored out with the same seed; every output poisoned before each run and compared bit for
// bit (y, out, residual, mean, rstd, and the statistics of a run with them). Inputs: normal values with
// per-row scales 2^-8 .. 2^8 and offsets, LayerNorm weight and bias random (some weights large, so that
// tiles scale differently). The same data types, along dim 1 only (the LayerNorm's rows), C = 768, 1600
// (d48: lanes past the row's last packet), 3072 and 8192 (the LayerNorm's block path: no sink, the fallback).
// Expected fused: res-ln with every type but the per-tensor int8_e, without statistics, on the warp path
// (the plain ln, layer 0's ln1 only, takes the fallback by design).
//
// The fc layer's GELU with its site casts (tcast_gelu_cast, llmc/kernels/tcast/tcast_gelu.cuh): pre = cast_a(pre)
// (matmul_out), out = cast_b(GELU(pre)) (gelu_out), against the passes the trainer ran before (tcast_cast of pre,
// gemm_gelu_apply or gelu.cuh's gelu_forward, tcast_cast of out, the same seeds); pre' and out' bit for bit (out
// poisoned, pre fresh per run), without and with statistics (both sites' counters compared). Pairs: MX floats and
// ints, bfp16, unscaled e4m3fn, q115 (int16_p-1), equal and different tiles (2, 4, 8, 32, 64, 256, 512, 1024), round
// to nearest even, ties away and stochastic (exponent and RNE quantizers in all four combinations), one site off,
// gelu.cuh's GELU form, and what must take passes (per-tensor, general-path and M:N types); cols 3072, 4096 and 6400
// with odd row counts (6400: units of 1024 elements straddle rows and the last one is partial). Each case checks the
// route too (which casts ran inside the GELU kernel). Then 65536 x 3072 compared on the device (the grid-stride
// loop), --cast-fuse 0 (the passes), and the GEMM front's fc forward with a TcastRuntime attached (fuse 1 and 0)
// against a plain GEMM plus the passes with the trainer's seeds.
//
// Boundary-site casts around the residual + LayerNorm (tcast_residual_layernorm_sites; --cast matmul_out,
// residual_out, layernorm_out in the trainer):
//   sites      x' = cast_x(x), residual = res_in + x', r' = cast_res(residual), LayerNorm(r'), out' = cast_out(out)
// against the trainer's passes written out here (not the launcher's own fallback): tcast_cast of x in place,
// fused_residual_layernorm_forward, tcast_cast of the residual in place and layernorm_forward again from it,
// tcast_cast of out in place. Bit for bit on residual, out, mean, rstd, and x (stored: it must hold x'; not
// stored: x or x' entirely, x untouched where fused), every output poisoned before each run, with and without
// statistics (a counted step takes the passes: the three sites' counters compared too). Three casts of different
// types per case, RNE and exponent quantizers, tiles 2 .. 256 and none, fixed scales (q115), round to nearest and
// stochastic, one or two sites off; C = 768, 1024, 1600 at odd row counts, 4095 x 768; expected fallbacks: a
// per-tensor type (int8_e) at one site, C = 3072 (warp path, but wider than the sites' kernels), C = 8192 (block
// path), and every statistics run.
//
// The training step's classifier with the casts of the logits (tcast_classifier_sites, tcast_classifier.cuh; --cast
// matmul_out and logits in the trainer): the two casts on the classifier's staged rows, against the trainer's passes
// (tcast_cast of the logits in place for matmul_out, then for logits) followed by fused_classifier; losses (poisoned
// before each run) and the whole dlogits tensor bit for bit, with and without statistics (counted: the passes, their
// counters compared). Logits of per-row scales with large padding columns (they enter the last group's scale); row 0's
// target in the last group. Pairs: RNE and exponent quantizers, stochastic rounding, bfp16, unscaled and fixed-scale
// types, one site off, tiles 2 .. 256, and what must take the passes (tiles of 512, per-tensor, general-path and M:N
// types); (rows, V, Vp) = (37, 50257, 50304), (203, 999, 1024), (64, 768, 768). A sensitivity check (the casts change
// the losses, and so does zeroing the padding) keeps those comparisons from passing vacuously; then the trainer's two
// hooks through a TcastRuntime (--cast-fuse 1 and 0, several plans, never fused on a --cast-stats step) against the
// passes with the trainer's seeds.
//
// The references run their casts with the float32 element step and the kernels under test with the hardware FP8
// step where the element format is e4m3fn / e5m2 (TcastFp32StepScope, tcast_fp8_hw.cuh), so the fused kernels' FP8
// casts are checked against the float32 step too.
//
// Timing (skipped with --check-only): at the d12 B=64 MLP shape 65536 x 3072, mxfp8e4 along dim 1 (the
// GELU -> fcproj x cast) and mxfp8e5 along dim 1 (the GELU' -> fc dy cast): the producer + cast pass
// against the fused kernel, with the bytes each moves and the device copy rate of the same run; the
// LayerNorm (plain and with the residual add) with mxfp8e4 at 65536 x 768; the residual + LayerNorm with
// mxfp8e4 at all three sites at 65536 x 768: the trainer's passes against the fused kernel; the GELU with its
// site casts at 65536 x 3072 (mxfp8e4 both, each alone, mxfp6e2 both): passes against one kernel; and the fc
// forward (65536 x 768 -> 3072) with only gelu_out cast: cuBLASLt's GELU epilogue + a cast pass (matmul_forward
// takes it) against a plain GEMM + the GELU-and-cast kernel; the classifier with the logits' casts at 8192 x 50304 (an
// eighth of the d12 B=64 rows: 0.8 GB of logits; the times scale with the rows): the two passes + the classifier
// against the classifier with the casts, and the plain classifier alone. The mxfp8 rows run twice: with the hardware FP8 element
// step and with the float32 one (tcast_fp8_hw_enable(0)), same binary, same run.
// Exit status 1 if any check fails.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <string>
#include <vector>
#include "dev/cuda/harness.cuh"

#if !defined(ENABLE_BF16)

int main() {
    printf("tcast_producers: skipped: the TensorCast casts need BF16 storage (floatX = bf16); this build is %s (build with TCAST=1)\n",
           PRECISION_MODE_NAME);
    printf("\n0 passed, 0 failed\n");
    return 0;
}

#else

#include "llmc/kernels/tcast/tcast_cast.cuh"
#include "llmc/kernels/tcast/tcast_producers.cuh"
#include "llmc/kernels/tcast/tcast_gelu.cuh"
#include "llmc/kernels/tcast/tcast_classifier.cuh"
#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/modes/tcast/tcast_runtime.cuh"

// The references of the checks below run their casts with the float32 element step (tcast_fp8_hw_enable(0): the RNE
// path as it was before the hardware FP8 step, llmc/kernels/tcast/tcast_fp8_hw.cuh), the kernels under test with the
// default (the hardware step for e4m3fn / e5m2 elements): so every fused kernel's FP8 casts are also checked against
// the float32 step, which dev/cuda/tcast.cu checks against the host (TcastFp32StepScope, tcast_fp8_hw.cuh).

enum Producer { P_GELU = 0, P_GELU_SITE = 1, P_DGELU = 2 };
static const char* const PRODUCER_NAMES[3] = {"gelu", "gelu-site", "dgelu"};

// Fresh inputs: pre (GELU's argument, spread around its bend) and d (the incoming gradient), with per-row
// magnitudes 2^-20 .. 2^12 in d and in pre's tails.
static void make_inputs(int rows, int cols, uint64_t seed, std::vector<float>& pre, std::vector<float>& d) {
    pre = random_normal((size_t)rows * cols, seed, 3.0f);
    d = random_normal((size_t)rows * cols, seed ^ 0x5bd1e995ull);
    HostRng rng(seed ^ 0x9e3779b97f4a7c15ull);
    for (int r = 0; r < rows; r++) {
        const float mag = ldexpf(1.0f, (int)(rng.u32() % 33) - 20);
        for (int c = 0; c < cols; c++) {
            d[(size_t)r * cols + c] *= mag;
            if (rng.u32() % 64 == 0) pre[(size_t)r * cols + c] *= 8.0f;  // tails: saturate GELU, larger groups
        }
    }
}

static bool same_stats(const DeviceBuffer<TcastDeviceStats>& a, const DeviceBuffer<TcastDeviceStats>& b) {
    const std::vector<TcastDeviceStats> ha = download_raw(a), hb = download_raw(b);
    return memcmp(ha.data(), hb.data(), sizeof(TcastDeviceStats)) == 0 && ha[0].values > 0;
}

// The data type of a case, parsed, and whether its tile fits a (rows, cols) cast along dim: false (the
// case does not run) for an unparsable text (a failed check) or a tile that does not divide the shape
// (skipped with its reason: tcast_cast would stop).
static bool case_datatype(Tally& t, const char* text, int rows, int cols, int dim, TcastDataType* dt) {
    char err[256];
    if (tcast_parse_datatype(text, dt, err, sizeof(err)) != 0) {
        printf("  bad data type %s: %s\n", text, err);
        t.check(text, false);
        return false;
    }
    if (tcast_cast_shape_ok(*dt, rows, cols, dim, err, sizeof(err)) != 0) {
        printf("  (skipped: %s)\n", err);
        return false;
    }
    return true;
}

// One case: producer p, data type text, shape, dim; with and without statistics.
static void run_case(Tally& t, Producer p, const char* text, int rows, int cols, int dim, uint64_t seed, TcastCastContext* ctx,
                     bool expect_fused) {
    TcastDataType dt;
    if (!case_datatype(t, text, rows, cols, dim, &dt)) return;
    const size_t n = (size_t)rows * cols;
    std::vector<float> hpre, hd;
    make_inputs(rows, cols, seed, hpre, hd);
    DeviceBuffer<floatX> pre(n), d_in(n), ref_store(n), ref_y(n), store(n), y(n);
    DeviceBuffer<TcastDeviceStats> st_ref(1), st(1);
    upload(pre, hpre);
    upload(d_in, hd);
    const uint64_t cast_seed = 0x1234567ull + seed;
    bool ok = true;
    bool fusable = false;
    for (int with_stats = 0; with_stats < 2; with_stats++) {
        poison_all(ref_store, ref_y, store, y);
        st_ref.zero();
        st.zero();
        TcastDeviceStats* sr = with_stats ? st_ref.ptr : NULL;
        TcastDeviceStats* sf = with_stats ? st.ptr : NULL;
        // reference: the producer kernel, then the stand-alone cast of its stored output
        if (p == P_DGELU) {
            cudaCheck(cudaMemcpy(ref_store.ptr, d_in.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
            gemm_dgelu_apply(ref_store.ptr, pre.ptr, n, 0);
        } else {
            gemm_gelu_apply<false>(ref_store.ptr, pre.ptr, n, 0);
        }
        {
            TcastFp32StepScope f32;
            tcast_cast(ref_y.ptr, ref_store.ptr, rows, cols, dim, dt, cast_seed, sr, ctx, 0);
        }
        // fused
        if (p == P_DGELU) {
            cudaCheck(cudaMemcpy(store.ptr, d_in.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
            const TcastSrcDgelu src = tcast_src_dgelu(store.ptr, pre.ptr);
            fusable = tcast_cast_fusable(src, y.ptr, cols, dim, dt);
            tcast_cast_from(y.ptr, src, rows, cols, dim, dt, cast_seed, sf, ctx, 0);
        } else {
            const TcastSrcGelu src = tcast_src_gelu(pre.ptr, p == P_GELU ? store.ptr : NULL);
            fusable = tcast_cast_fusable(src, y.ptr, cols, dim, dt);
            tcast_cast_from(y.ptr, src, rows, cols, dim, dt, cast_seed, sf, ctx, 0);
        }
        cudaCheck(cudaDeviceSynchronize());
        ok = ok && same_bits(download_raw(ref_y), download_raw(y));
        if (p != P_GELU_SITE) ok = ok && same_bits(download_raw(ref_store), download_raw(store));
        else {  // nothing may be stored: the poison stays
            const std::vector<floatX> hs = download_raw(store);
            for (const floatX& v : hs) ok = ok && *reinterpret_cast<const uint16_t*>(&v) == 0xFFFFu;
        }
        if (with_stats) ok = ok && same_stats(st_ref, st);
    }
    // the output must hold cast values, not the poison: the reference itself is NaN-free
    const std::vector<float> hy = download(y);
    size_t nan = 0;
    for (float v : hy) nan += v != v;
    ok = ok && nan == 0;
    char name[160];
    snprintf(name, sizeof(name), "%-9s %-22s %4d x %-4d dim %d %s", PRODUCER_NAMES[p], text, rows, cols, dim,
             fusable ? "fused" : "fallback");
    t.check(name, ok && fusable == expect_fused);
}

// Inputs of a LayerNorm case (rows, C): a (the residual stream, or the LayerNorm's only input) normal with per-row
// scales 2^-8 .. 2^8 and offsets -4 .. 4; b (the added term) normal, with per-row scales of its own when scale_b
// (so that either term may dominate the sum); the LayerNorm weight with a few large channels (their tiles get
// larger scales) and a bias. Uploaded to the four buffers.
static void upload_ln_inputs(DeviceBuffer<floatX>& a, DeviceBuffer<floatX>& b, DeviceBuffer<floatX>& w, DeviceBuffer<floatX>& bias,
                             int rows, int C, uint64_t seed, bool scale_b) {
    const size_t n = (size_t)rows * C;
    std::vector<float> ha = random_normal(n, seed), hb = random_normal(n, seed ^ 0x5bd1e995ull);
    std::vector<float> hw = random_normal(C, seed ^ 0x1234ull, 0.5f), hbias = random_normal(C, seed ^ 0x4321ull, 0.2f);
    HostRng rng(seed ^ 0x9e3779b97f4a7c15ull);
    for (int r = 0; r < rows; r++) {
        const float mag = ldexpf(1.0f, (int)(rng.u32() % 17) - 8), off = (float)((int)(rng.u32() % 9) - 4);
        const float mb = scale_b ? ldexpf(1.0f, (int)(rng.u32() % 17) - 8) : 1.0f;
        for (int c = 0; c < C; c++) {
            ha[(size_t)r * C + c] = ha[(size_t)r * C + c] * mag + off;
            hb[(size_t)r * C + c] *= mb;
        }
    }
    for (int c = 0; c < C; c++)
        if (rng.u32() % 16 == 0) hw[c] *= 64.0f;
    upload(a, ha);
    upload(b, hb);
    upload(w, hw);
    upload(bias, hbias);
}

// One LayerNorm case: residual = a + b first when `residual`, data type text, (rows, C), with and without
// statistics; expect_fused: whether tcast_layernorm_fusable should admit the type without statistics.
static void run_ln_case(Tally& t, bool residual, const char* text, int rows, int C, uint64_t seed, TcastCastContext* ctx,
                        bool expect_fused) {
    TcastDataType dt;
    if (!case_datatype(t, text, rows, C, 1, &dt)) return;
    const size_t n = (size_t)rows * C;
    DeviceBuffer<floatX> a(n), b(n), w(C), bias(C), ref_res(n), ref_out(n), ref_y(n), res(n), out(n), y(n);
    DeviceBuffer<float> ref_mean(rows), ref_rstd(rows), mean(rows), rstd(rows);
    DeviceBuffer<TcastDeviceStats> st_ref(1), st(1);
    upload_ln_inputs(a, b, w, bias, rows, C, seed, false);
    const uint64_t cast_seed = 0x7654321ull + seed;
    bool ok = true, fused_as_designed = true;
    for (int with_stats = 0; with_stats < 2; with_stats++) {
        poison_all(ref_res, ref_out, ref_y, res, out, y, ref_mean, ref_rstd, mean, rstd);
        st_ref.zero();
        st.zero();
        TcastDeviceStats* sr = with_stats ? st_ref.ptr : NULL;
        TcastDeviceStats* sf = with_stats ? st.ptr : NULL;
        if (residual)
            fused_residual_layernorm_forward(ref_res.ptr, ref_out.ptr, ref_mean.ptr, ref_rstd.ptr, a.ptr, b.ptr, w.ptr, bias.ptr, rows, C, 0);
        else
            layernorm_forward(ref_out.ptr, ref_mean.ptr, ref_rstd.ptr, a.ptr, w.ptr, bias.ptr, rows, C, 0);
        {
            TcastFp32StepScope f32;
            tcast_cast(ref_y.ptr, ref_out.ptr, rows, C, 1, dt, cast_seed, sr, ctx, 0);
        }
        fused_as_designed = fused_as_designed && tcast_layernorm_fusable(dt, C, residual, with_stats, y.ptr) == (expect_fused && !with_stats);
        tcast_layernorm_cast(y.ptr, residual ? res.ptr : NULL, out.ptr, mean.ptr, rstd.ptr, a.ptr, residual ? b.ptr : NULL, w.ptr,
                             bias.ptr, rows, C, dt, cast_seed, sf, ctx, 0);
        cudaCheck(cudaDeviceSynchronize());
        ok = ok && same_bits(download_raw(ref_y), download_raw(y)) && same_bits(download_raw(ref_out), download_raw(out));
        ok = ok && same_bits(download_raw(ref_mean), download_raw(mean)) && same_bits(download_raw(ref_rstd), download_raw(rstd));
        if (residual) ok = ok && same_bits(download_raw(ref_res), download_raw(res));
        if (with_stats) ok = ok && same_stats(st_ref, st);
    }
    const std::vector<float> hy = download(y);
    size_t nan = 0;
    for (float v : hy) nan += v != v;
    ok = ok && nan == 0;  // cast values, not the poison (the inputs are finite)
    char name[160];
    snprintf(name, sizeof(name), "%-9s %-22s %4d x %-4d dim 1 %s", residual ? "res-ln" : "ln", text, rows, C,
             expect_fused ? "fused" : "fallback");
    t.check(name, ok && fused_as_designed);
}

// ------------------------------------------------------------------------------------------------
// The fc layer's GELU with its site casts (tcast_gelu_cast, tcast_gelu.cuh)

static const char* gelu_form_name(BoundaryGelu form) { return form == BOUNDARY_GELU_KERNEL ? "gelu.cuh" : "front"; }

// The pre-activation of a GELU case: normal values (std 3, around GELU's bend) times per-row magnitudes 2^-10 .. 2^4,
// with a tail of 1 in 64 values 8x larger (groups with different scales, GELU saturated at both ends).
static std::vector<float> make_pre(int rows, int cols, uint64_t seed) {
    std::vector<float> pre = random_normal((size_t)rows * cols, seed, 3.0f);
    HostRng rng(seed ^ 0x9e3779b97f4a7c15ull);
    for (int r = 0; r < rows; r++) {
        const float mag = ldexpf(1.0f, (int)(rng.u32() % 15) - 10);
        for (int c = 0; c < cols; c++) pre[(size_t)r * cols + c] *= mag * (rng.u32() % 64 == 0 ? 8.0f : 1.0f);
    }
    return pre;
}

// The separate passes tcast_gelu_cast replaces (today's order, doc/TCAST.md 5.5): pre = cast_a(pre) in place, out =
// GELU(pre) by the trainer's kernel `form`, out = cast_b(out) in place; a.dt / b.dt NULL: that site is not cast.
static void gelu_sites_reference(floatX* out, floatX* pre, int rows, int cols, const TcastSiteCast& a, const TcastSiteCast& b,
                                 BoundaryGelu form, TcastCastContext* ctx) {
    const size_t n = (size_t)rows * cols;
    if (a.dt) tcast_cast(pre, pre, rows, cols, 1, *a.dt, a.seed, a.stats, ctx, 0);
    if (form == BOUNDARY_GELU_KERNEL) gelu_forward(out, pre, n, 0);
    else gemm_gelu_apply<false>(out, pre, n, 0);
    if (b.dt) tcast_cast(out, out, rows, cols, 1, *b.dt, b.seed, b.stats, ctx, 0);
}

// A data type text of a GELU case, parsed into dt (NULL text: the site is off, *on = false). False: the case does not
// run (a bad text fails it; a tile that does not divide cols skips it).
static bool gelu_case_type(Tally& t, const char* text, int rows, int cols, TcastDataType* dt, bool* on) {
    *on = text != NULL;
    return !text || case_datatype(t, text, rows, cols, 1, dt);
}

// One GELU case: pre's cast ta (matmul_out; NULL: off), out's cast tb (gelu_out; NULL: off), the GELU kernel form,
// (rows, cols); tcast_gelu_cast against the passes, bit for bit on pre' and out' (outputs poisoned, pre fresh each
// run), without and with statistics (then also the counters of both sites); expect: the route without statistics
// (with them, cast a is never in the kernel; cast b may still run inside the GELU source, which counts).
static void run_gelu_sites_case(Tally& t, const char* ta, const char* tb, BoundaryGelu form, int rows, int cols, uint64_t seed,
                                TcastCastContext* ctx, TcastGeluRoute expect) {
    TcastDataType dta, dtb;
    bool on_a, on_b;
    if (!gelu_case_type(t, ta, rows, cols, &dta, &on_a) || !gelu_case_type(t, tb, rows, cols, &dtb, &on_b)) return;
    const size_t n = (size_t)rows * cols;
    DeviceBuffer<floatX> pre0(n), ref_pre(n), ref_out(n), pre(n), out(n);
    DeviceBuffer<TcastDeviceStats> st_ref_a(1), st_ref_b(1), st_a(1), st_b(1);
    upload(pre0, make_pre(rows, cols, seed));
    const uint64_t seed_a = 0xA5A5ull + seed, seed_b = 0x5A5Aull + 3 * seed;
    bool ok = true, route_ok = true;
    TcastGeluRoute route = {false, false};
    for (int with_stats = 0; with_stats < 2; with_stats++) {
        poison_all(ref_out, out);
        st_ref_a.zero();
        st_ref_b.zero();
        st_a.zero();
        st_b.zero();
        cudaCheck(cudaMemcpy(ref_pre.ptr, pre0.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(pre.ptr, pre0.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        const TcastSiteCast ra = {on_a ? &dta : NULL, seed_a, with_stats ? st_ref_a.ptr : NULL};
        const TcastSiteCast rb = {on_b ? &dtb : NULL, seed_b, with_stats ? st_ref_b.ptr : NULL};
        const TcastSiteCast fa = {ra.dt, seed_a, with_stats ? st_a.ptr : NULL}, fb = {rb.dt, seed_b, with_stats ? st_b.ptr : NULL};
        {
            TcastFp32StepScope f32;
            gelu_sites_reference(ref_out.ptr, ref_pre.ptr, rows, cols, ra, rb, form, ctx);
        }
        const TcastGeluRoute r = tcast_gelu_route(out.ptr, pre.ptr, cols, fa, fb, form, true);
        if (!with_stats) {
            route = r;
            route_ok = route_ok && r.pre_fused == expect.pre_fused && r.out_fused == expect.out_fused;
        } else {
            route_ok = route_ok && !r.pre_fused && (on_b || !r.out_fused);  // (b may still run in the GELU source, counted)
        }
        tcast_gelu_cast(out.ptr, pre.ptr, rows, cols, fa, fb, form, true, ctx, 0);
        cudaCheck(cudaDeviceSynchronize());
        ok = ok && same_bits(download_raw(ref_pre), download_raw(pre)) && same_bits(download_raw(ref_out), download_raw(out));
        if (with_stats && on_a) ok = ok && same_stats(st_ref_a, st_a);
        if (with_stats && on_b) ok = ok && same_stats(st_ref_b, st_b);
    }
    const std::vector<float> ho = download(out);  // cast values, not the poison (the inputs are finite)
    size_t nan = 0;
    for (float v : ho) nan += v != v;
    ok = ok && nan == 0;
    char name[200];
    snprintf(name, sizeof(name), "gelu-sites %-18s %-18s %-8s %3d x %-4d %s", ta ? ta : "-", tb ? tb : "-", gelu_form_name(form), rows,
             cols, route.pre_fused ? (route.out_fused ? "one kernel" : "kernel a, pass b") : (route.out_fused ? "pass a, kernel b" : "passes"));
    t.check(name, ok && route_ok);
}

// tcast_gelu_cast with fuse = false (--cast-fuse 0) runs the passes, and a large tensor (the grid-stride loop: more
// units than warps) fused, compared on the device.
static void run_gelu_sites_big(Tally& t, const char* ta, const char* tb, int rows, int cols, bool fuse, TcastCastContext* ctx) {
    TcastDataType dta, dtb;
    bool on_a, on_b;
    if (!gelu_case_type(t, ta, rows, cols, &dta, &on_a) || !gelu_case_type(t, tb, rows, cols, &dtb, &on_b)) return;
    const size_t n = (size_t)rows * cols;
    DeviceBuffer<floatX> ref_pre(n), ref_out(n), pre(n), out(n);
    upload(ref_pre, make_pre(rows, cols, 77));
    cudaCheck(cudaMemcpy(pre.ptr, ref_pre.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
    poison_all(ref_out, out);
    const TcastSiteCast a = {on_a ? &dta : NULL, 11, NULL}, b = {on_b ? &dtb : NULL, 12, NULL};
    gelu_sites_reference(ref_out.ptr, ref_pre.ptr, rows, cols, a, b, BOUNDARY_GELU_FRONT, ctx);
    const TcastGeluRoute r = tcast_gelu_route(out.ptr, pre.ptr, cols, a, b, BOUNDARY_GELU_FRONT, fuse);
    tcast_gelu_cast(out.ptr, pre.ptr, rows, cols, a, b, BOUNDARY_GELU_FRONT, fuse, ctx, 0);
    cudaCheck(cudaDeviceSynchronize());
    const size_t bad = device_mismatch(ref_pre.ptr, pre.ptr, n * sizeof(floatX)) + device_mismatch(ref_out.ptr, out.ptr, n * sizeof(floatX));
    const size_t nan = device_nonfinite(out.ptr, n);
    const bool route_ok = fuse ? (r.pre_fused && r.out_fused) : (!r.pre_fused && !r.out_fused);
    char name[200];
    snprintf(name, sizeof(name), "gelu-sites %-18s %-18s fuse %d %d x %d (%zu words differ)", ta, tb, fuse ? 1 : 0, rows, cols, bad);
    t.check(name, bad == 0 && nan == 0 && route_ok);
}

// The runtime the trainer would make for `--cast cast_text --cast-fuse fuse` (its plan in *plan) over a rows x cols
// activation, with params as the parameter base (the seeds' ids are offsets into it) and the harness's run seed.
static TcastRuntime* harness_runtime(TcastPlan* plan, const char* cast_text, int fuse, int rows, int cols, const floatX* params) {
    TcastOptions opt;
    CliFlag flags[TCAST_NUM_FLAGS];
    tcast_flags(&opt, flags);
    opt.cast = cast_text;
    opt.fuse = fuse;
    tcast_plan_init(plan, &opt);
    return tcast_runtime_create(plan, rows, cols, 0xC0FFEEull, params);
}

// The GEMM front with TensorCast site casts attached (a TcastRuntime as the trainer's, no --cast-gemm): the fc forward
// matmul_forward(out, inp, w, bias, pre, gelu_id) with --cast-fuse 1 and 0 against a plain GEMM into pre followed by
// the passes with the trainer's seeds (tcast_seed of the weight id for matmul_out, of gelu_id for gelu_out); with only
// gelu_out cast, against the GEMM with cuBLASLt's GELU epilogue followed by out's cast pass (matmul_forward's choice).
static void run_front_case(Tally& t, const char* cast_text, int N, int C, int OC, uint64_t seed) {
    const size_t n = (size_t)N * OC;
    DeviceBuffer<floatX> inp((size_t)N * C), w((size_t)OC * C), bias(OC), ref_pre(n), ref_out(n), pre(n), out(n);
    upload(inp, random_normal((size_t)N * C, seed));
    upload(w, random_normal((size_t)OC * C, seed + 1, 0.1f));
    upload(bias, random_normal(OC, seed + 2, 0.5f));
    const unsigned long long gelu_id = 8 * 3 + 4;  // (a layer's GELU id, as gpt2_cast_id makes them)
    GemmContext plain;
    gemm_context_init(&plain, 0);
    bool ok = true;
    for (int fuse = 1; fuse >= 0; fuse--) {
        TcastPlan plan;
        TcastRuntime* rt = harness_runtime(&plan, cast_text, fuse, N, OC, w.ptr);
        rt->step = 7;
        GemmContext ctx;
        gemm_context_init(&ctx, 0);
        ctx.casts = &rt->casts;
        poison_all(ref_pre, ref_out, pre, out);
        const TcastSiteCast a = {plan.site_on[MATMUL_OUT] ? &plan.site[MATMUL_OUT] : NULL, tcast_seed(rt, 0, (int)MATMUL_OUT, TCAST_ROLE_SITE), NULL};
        const TcastSiteCast b = {plan.site_on[GELU_OUT] ? &plan.site[GELU_OUT] : NULL, tcast_seed(rt, gelu_id, (int)GELU_OUT, TCAST_ROLE_SITE), NULL};
        if (a.dt) {  // pre cast: a plain GEMM, then the passes
            matmul_forward(&plain, ref_pre.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, NULL);
            gelu_sites_reference(ref_out.ptr, ref_pre.ptr, N, OC, a, b, BOUNDARY_GELU_FRONT, &rt->cast_ctx);
        } else {  // only out cast: the GEMM with cuBLASLt's GELU epilogue (no casts attached), then out's cast pass
            matmul_forward(&plain, ref_out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, ref_pre.ptr);
            if (b.dt) tcast_cast(ref_out.ptr, ref_out.ptr, N, OC, 1, *b.dt, b.seed, NULL, &rt->cast_ctx, 0);
        }
        matmul_forward(&ctx, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, pre.ptr, gelu_id);
        cudaCheck(cudaDeviceSynchronize());
        ok = ok && same_bits(download_raw(ref_pre), download_raw(pre)) && same_bits(download_raw(ref_out), download_raw(out));
        gemm_context_free(&ctx);
        rt->casts.destroy(&rt->casts);
    }
    gemm_context_free(&plain);
    char name[200];
    snprintf(name, sizeof(name), "front fc forward --cast %-26s %d x %d -> %d, fuse 1 and 0", cast_text, N, C, OC);
    t.check(name, ok);
}

// ms of the GELU with its casts at rows x cols: the passes against tcast_gelu_cast (a, b: the two sites' types, NULL:
// off), with the bytes each moves per element.
static void time_gelu_sites(const char* ta, const char* tb, int rows, int cols, float copy_gbs, TcastCastContext* ctx) {
    TcastDataType dta, dtb;
    char err[256];
    if ((ta && tcast_parse_datatype(ta, &dta, err, sizeof(err)) != 0) || (tb && tcast_parse_datatype(tb, &dtb, err, sizeof(err)) != 0)) return;
    const size_t n = (size_t)rows * cols;
    DeviceBuffer<floatX> pre(n), out(n);
    upload(pre, random_uniform(n, 5, -8.0f, 8.0f));  // (cheaper to draw than make_pre's; the rates do not depend on it)
    const TcastSiteCast a = {ta ? &dta : NULL, 1, NULL}, b = {tb ? &dtb : NULL, 2, NULL};
    const float sep = time_median_ms([&] { tcast_gelu_cast(out.ptr, pre.ptr, rows, cols, a, b, BOUNDARY_GELU_FRONT, false, ctx, 0); });
    const float fused = time_median_ms([&] { tcast_gelu_cast(out.ptr, pre.ptr, rows, cols, a, b, BOUNDARY_GELU_FRONT, true, ctx, 0); });
    // bytes per element: each cast pass 2 + 2, GELU 2 + 2; one kernel: pre 2 (+ 2 written back when cast) + out 2
    const double b_sep = 4.0 * (1 + (ta != NULL) + (tb != NULL)), b_fused = ta ? 6.0 : 4.0;
    printf("  gelu-sites %-9s %-9s %d x %d: passes %.3f ms (%.0f%% of copy), one kernel %.3f ms (%.0f%% of copy), saved %.3f ms\n",
           ta ? ta : "-", tb ? tb : "-", rows, cols, sep, 100.0 * b_sep * n / (sep * 1e-3) / 1e9 / copy_gbs, fused,
           100.0 * b_fused * n / (fused * 1e-3) / 1e9 / copy_gbs, sep - fused);
}

// The fc forward with only gelu_out cast (tb), d12 B=64 shape: cuBLASLt's GELU_AUX_BIAS epilogue then the cast pass of
// the GELU output (the trainer's choice, matmul_forward: measured faster on an H200), against a plain GEMM (bias
// epilogue) then GELU + cast in one kernel; and, for scale, the plain GEMM alone.
static void time_gelu_epilogue_choice(const char* tb, int N, int C, int OC, TcastCastContext* ctx) {
    TcastDataType dtb;
    char err[256];
    if (tcast_parse_datatype(tb, &dtb, err, sizeof(err)) != 0) return;
    const size_t n = (size_t)N * OC;
    DeviceBuffer<floatX> inp((size_t)N * C), w((size_t)OC * C), bias(OC), pre(n), out(n);
    upload(inp, random_normal((size_t)N * C, 21));
    upload(w, random_normal((size_t)OC * C, 22, 0.05f));
    upload(bias, random_normal(OC, 23, 0.5f));
    GemmContext g;
    gemm_context_init(&g, 0);
    const TcastSiteCast none = {NULL, 0, NULL}, b = {&dtb, 3, NULL};
    const float epi = time_median_ms([&] {
        matmul_forward(&g, out.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, pre.ptr);  // no casts attached: the epilogue
        tcast_cast(out.ptr, out.ptr, N, OC, 1, dtb, 3, NULL, ctx, 0);
    });
    const float plain = time_median_ms([&] { matmul_forward(&g, pre.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, NULL); });
    const float fused = time_median_ms([&] {
        matmul_forward(&g, pre.ptr, inp.ptr, w.ptr, bias.ptr, N, C, OC, NULL);
        tcast_gelu_cast(out.ptr, pre.ptr, N, OC, none, b, BOUNDARY_GELU_FRONT, true, ctx, 0);
    });
    gemm_context_free(&g);
    printf("  fc forward %d x %d -> %d, gelu_out=%s only: GELU epilogue + cast pass %.3f ms, plain GEMM + one kernel %.3f ms "
           "(plain GEMM alone %.3f ms): %s\n", N, C, OC, tb, epi, fused, plain,
           epi <= fused ? "the trainer's choice (epilogue + pass) is the faster" : "THE PLAIN GEMM + ONE KERNEL IS FASTER: revisit matmul_forward's choice");
}

// ms of the LayerNorm (residual: with the add) followed by the cast, and of the fused kernel, at rows x C.
static void time_ln_case(bool residual, const char* text, int rows, int C, float copy_gbs, TcastCastContext* ctx) {
    TcastDataType dt;
    char err[256];
    if (tcast_parse_datatype(text, &dt, err, sizeof(err)) != 0) return;
    const size_t n = (size_t)rows * C;
    DeviceBuffer<floatX> a(n), b(n), w(C), bias(C), res(n), out(n), y(n);
    DeviceBuffer<float> mean(rows), rstd(rows);
    upload(a, random_normal(n, 9));
    upload(b, random_normal(n, 10));
    upload(w, random_normal(C, 11));
    upload(bias, random_normal(C, 12));
    const float sep = time_median_ms([&] {
        if (residual) fused_residual_layernorm_forward(res.ptr, out.ptr, mean.ptr, rstd.ptr, a.ptr, b.ptr, w.ptr, bias.ptr, rows, C, 0);
        else layernorm_forward(out.ptr, mean.ptr, rstd.ptr, a.ptr, w.ptr, bias.ptr, rows, C, 0);
        tcast_cast(y.ptr, out.ptr, rows, C, 1, dt, 1, NULL, ctx, 0);
    });
    const float fused = time_median_ms([&] {
        tcast_layernorm_cast(y.ptr, residual ? res.ptr : NULL, out.ptr, mean.ptr, rstd.ptr, a.ptr, residual ? b.ptr : NULL, w.ptr,
                             bias.ptr, rows, C, dt, 1, NULL, ctx, 0);
    });
    // bytes per element: LayerNorm 2 + 2 (residual: 2 + 2 + 2 + 2), cast 2 + 2; fused: the LayerNorm's + 2
    const double b_sep = residual ? 12.0 : 8.0, b_fused = residual ? 10.0 : 6.0;
    printf("  %-6s %-10s %d x %d: producer + cast %.3f ms (%.0f%% of copy), fused %.3f ms (%.0f%% of copy), saved %.3f ms\n",
           residual ? "res-ln" : "ln", text, rows, C, sep, 100.0 * b_sep * n / (sep * 1e-3) / 1e9 / copy_gbs, fused,
           100.0 * b_fused * n / (fused * 1e-3) / 1e9 / copy_gbs, sep - fused);
}

// ------------------------------------------------------------------------------------------------
// The boundary-site casts around the residual + LayerNorm

// The widest rows tcast_residual_layernorm_sites fuses (TcastSitesSink::kMaxPPL = 8 packets of 8 per lane).
#define SITES_MAX_C 2048

// The three site casts of a case (text NULL: the site is off) and whether tcast_residual_layernorm_sites
// should fuse them (without statistics, C <= SITES_MAX_C).
struct SitesCase {
    const char* x;
    const char* res;
    const char* out;
    bool fused;
};

// The trainer's passes for the site casts around a residual + LayerNorm (model.cuh gpt2_residual_layernorm with
// matmul_forward's MATMUL_OUT cast before it): x cast in place, the fused residual + LayerNorm, the residual cast
// in place and the LayerNorm again from it, out cast in place.
static void sites_passes(floatX* res, floatX* out, float* mean, float* rstd, const floatX* res_in, floatX* x, const floatX* w,
                         const floatX* bias, int rows, int C, const TcastSiteCast (&c)[3], TcastCastContext* ctx) {
    if (c[0].dt) tcast_cast(x, x, rows, C, 1, *c[0].dt, c[0].seed, c[0].stats, ctx, 0);
    fused_residual_layernorm_forward(res, out, mean, rstd, res_in, x, w, bias, rows, C, 0);
    if (c[1].dt) {
        tcast_cast(res, res, rows, C, 1, *c[1].dt, c[1].seed, c[1].stats, ctx, 0);
        layernorm_forward(out, mean, rstd, res, w, bias, rows, C, 0);
    }
    if (c[2].dt) tcast_cast(out, out, rows, C, 1, *c[2].dt, c[2].seed, c[2].stats, ctx, 0);
}

// One case of the site casts at (rows, C): store_x both ways, with and without statistics.
static void run_sites_case(Tally& t, const SitesCase& sc, int rows, int C, uint64_t seed, TcastCastContext* ctx) {
    const char* texts[3] = {sc.x, sc.res, sc.out};
    TcastDataType dt[3];
    for (int i = 0; i < 3; i++)
        if (texts[i] && !case_datatype(t, texts[i], rows, C, 1, &dt[i])) return;
    const size_t n = (size_t)rows * C;
    DeviceBuffer<floatX> res_in(n), x_in(n), w(C), bias(C), ref_x(n), ref_res(n), ref_out(n), x(n), res(n), out(n);
    DeviceBuffer<float> ref_mean(rows), ref_rstd(rows), mean(rows), rstd(rows);
    DeviceBuffer<TcastDeviceStats> st_ref(3), st(3);
    upload_ln_inputs(res_in, x_in, w, bias, rows, C, seed, true);  // x (the projection output): per-row scales of its own
    const std::vector<floatX> hx_in = download_raw(x_in);
    bool ok = true, fused_as_designed = true;
    for (int store_x = 0; store_x < 2; store_x++) {
        for (int with_stats = 0; with_stats < 2; with_stats++) {
            poison_all(ref_res, ref_out, res, out, ref_mean, ref_rstd, mean, rstd);
            cudaCheck(cudaMemcpy(ref_x.ptr, x_in.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
            cudaCheck(cudaMemcpy(x.ptr, x_in.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
            st_ref.zero();
            st.zero();
            TcastSiteCast cr[3], cf[3];
            for (int i = 0; i < 3; i++) {
                const uint64_t cs = 0x51735173ull * (i + 1) + seed;
                cr[i] = TcastSiteCast{texts[i] ? &dt[i] : NULL, cs, with_stats ? st_ref.ptr + i : NULL};
                cf[i] = TcastSiteCast{texts[i] ? &dt[i] : NULL, cs, with_stats ? st.ptr + i : NULL};
            }
            {
                TcastFp32StepScope f32;
                sites_passes(ref_res.ptr, ref_out.ptr, ref_mean.ptr, ref_rstd.ptr, res_in.ptr, ref_x.ptr, w.ptr, bias.ptr, rows, C, cr, ctx);
            }
            const bool fusable = tcast_residual_layernorm_sites_fusable(cf[0], cf[1], cf[2], C);
            fused_as_designed = fused_as_designed && fusable == (sc.fused && !with_stats && C <= SITES_MAX_C);
            tcast_residual_layernorm_sites(res.ptr, out.ptr, mean.ptr, rstd.ptr, res_in.ptr, x.ptr, store_x != 0, w.ptr, bias.ptr, rows,
                                           C, cf[0], cf[1], cf[2], ctx, 0);
            cudaCheck(cudaDeviceSynchronize());
            ok = ok && same_bits(download_raw(ref_res), download_raw(res)) && same_bits(download_raw(ref_out), download_raw(out));
            ok = ok && same_bits(download_raw(ref_mean), download_raw(mean)) && same_bits(download_raw(ref_rstd), download_raw(rstd));
            const std::vector<floatX> hxr = download_raw(ref_x), hxf = download_raw(x);
            if (store_x) ok = ok && same_bits(hxr, hxf);
            else if (fusable) ok = ok && same_bits(hx_in, hxf);  // the fused kernel does not write x
            else ok = ok && (same_bits(hx_in, hxf) || same_bits(hxr, hxf));
            if (with_stats) {
                const std::vector<TcastDeviceStats> a = download_raw(st_ref), b = download_raw(st);
                ok = ok && memcmp(a.data(), b.data(), 3 * sizeof(TcastDeviceStats)) == 0;
                for (int i = 0; i < 3; i++) ok = ok && (a[i].values > 0) == (texts[i] != NULL);
            }
        }
    }
    // cast values, not the poison (every input finite; no case here makes a NaN group)
    const std::vector<float> ho = download(out), hres = download(res);
    size_t nan = 0;
    for (float v : ho) nan += v != v;
    for (float v : hres) nan += v != v;
    ok = ok && nan == 0;
    char name[200];
    snprintf(name, sizeof(name), "sites x=%-16s res=%-18s out=%-18s %4d x %-4d %s", sc.x ? sc.x : "-", sc.res ? sc.res : "-",
             sc.out ? sc.out : "-", rows, C, sc.fused && C <= SITES_MAX_C ? "fused" : "fallback");
    t.check(name, ok && fused_as_designed);
}

// ms of the trainer's passes and of the fused kernel for the site casts around the residual + LayerNorm,
// every site cast to `text`, at rows x C.
static void time_sites_case(const char* text, int rows, int C, float copy_gbs, TcastCastContext* ctx) {
    TcastDataType dt;
    char err[256];
    if (tcast_parse_datatype(text, &dt, err, sizeof(err)) != 0) return;
    const size_t n = (size_t)rows * C;
    DeviceBuffer<floatX> res_in(n), x(n), w(C), bias(C), res(n), out(n);
    DeviceBuffer<float> mean(rows), rstd(rows);
    upload(res_in, random_normal(n, 13));
    upload(x, random_normal(n, 14));
    upload(w, random_normal(C, 15));
    upload(bias, random_normal(C, 16));
    const TcastSiteCast c[3] = {{&dt, 1, NULL}, {&dt, 2, NULL}, {&dt, 3, NULL}};
    const float sep = time_median_ms([&] { sites_passes(res.ptr, out.ptr, mean.ptr, rstd.ptr, res_in.ptr, x.ptr, w.ptr, bias.ptr, rows, C, c, ctx); });
    const float fused = time_median_ms([&] {
        tcast_residual_layernorm_sites(res.ptr, out.ptr, mean.ptr, rstd.ptr, res_in.ptr, x.ptr, false, w.ptr, bias.ptr, rows, C, c[0], c[1],
                                       c[2], ctx, 0);
    });
    // bytes per element: x cast 2+2, residual + LayerNorm 2+2+2+2, residual cast 2+2, LayerNorm 2+2, out cast 2+2 (24);
    // fused: res_in and x read, residual and out written (8)
    const double b_sep = 24.0, b_fused = 8.0;
    printf("  %-6s %-10s %d x %d: passes %.3f ms (%.0f%% of copy), fused %.3f ms (%.0f%% of copy), saved %.3f ms\n", "sites", text, rows, C,
           sep, 100.0 * b_sep * n / (sep * 1e-3) / 1e9 / copy_gbs, fused, 100.0 * b_fused * n / (fused * 1e-3) / 1e9 / copy_gbs, sep - fused);
}

// ms of the producer + cast pass and of the fused kernel at rows x cols, along dim 1.
static void time_case(Producer p, const char* text, int rows, int cols, float copy_gbs, TcastCastContext* ctx) {
    TcastDataType dt;
    char err[256];
    if (tcast_parse_datatype(text, &dt, err, sizeof(err)) != 0) return;
    const size_t n = (size_t)rows * cols;
    DeviceBuffer<floatX> pre(n), d(n), store(n), y(n);
    upload(pre, random_normal(n, 7, 3.0f));
    upload(d, random_normal(n, 8));
    const float sep = time_median_ms([&] {
        if (p == P_DGELU) gemm_dgelu_apply(d.ptr, pre.ptr, n, 0);
        else gemm_gelu_apply<false>(store.ptr, pre.ptr, n, 0);
        tcast_cast(y.ptr, p == P_DGELU ? d.ptr : store.ptr, rows, cols, 1, dt, 1, NULL, ctx, 0);
    });
    const float fused = time_median_ms([&] {
        if (p == P_DGELU) tcast_cast_from(y.ptr, tcast_src_dgelu(d.ptr, pre.ptr), rows, cols, 1, dt, 1, NULL, ctx, 0);
        else tcast_cast_from(y.ptr, tcast_src_gelu(pre.ptr, store.ptr), rows, cols, 1, dt, 1, NULL, ctx, 0);
    });
    // bytes per element: GELU 2+2 (producer) + 2+2 (cast) vs 2 + 2 + 2; GELU' 6 + 4 vs 2+2 +2 +2
    const double b_sep = p == P_DGELU ? 10.0 : 8.0, b_fused = p == P_DGELU ? 8.0 : 6.0;
    printf("  %-6s %-10s %d x %d: producer + cast %.3f ms (%.0f%% of copy), fused %.3f ms (%.0f%% of copy), saved %.3f ms\n",
           PRODUCER_NAMES[p], text, rows, cols, sep, 100.0 * b_sep * n / (sep * 1e-3) / 1e9 / copy_gbs, fused,
           100.0 * b_fused * n / (fused * 1e-3) / 1e9 / copy_gbs, sep - fused);
}

// ------------------------------------------------------------------------------------------------
// The training step's classifier with the logits' site casts (tcast_classifier_sites, tcast_classifier.cuh)

// Inputs of a classifier case: logits (rows, Vp) normal (std 2) times per-row magnitudes 2^-6 .. 2^4 with a tail of 1 in
// 50 values 16x larger (groups of different scales); the padding columns [V, Vp) random with magnitudes up to 2^12 (a
// GEMM writes them; they enter the scale of the last group that holds columns < V, so the cast of those columns depends
// on them; row 0's column V is 3e4); targets random in [0, V), row 0's V - 1 (the last group) and row 1's 0.
static void make_classifier_inputs(int rows, int V, int Vp, uint64_t seed, std::vector<float>& logits, std::vector<int>& targets) {
    logits = random_normal((size_t)rows * Vp, seed, 2.0f);
    HostRng rng(seed ^ 0x9e3779b97f4a7c15ull);
    targets.resize(rows);
    for (int r = 0; r < rows; r++) {
        const float mag = ldexpf(1.0f, (int)(rng.u32() % 11) - 6);
        for (int c = 0; c < Vp; c++) {
            float& x = logits[(size_t)r * Vp + c];
            if (c >= V) x *= ldexpf(1.0f, (int)(rng.u32() % 13));
            else x *= mag * (rng.u32() % 50 == 0 ? 16.0f : 1.0f);
        }
        if (r == 0 && V < Vp) logits[V] = 3.0e4f;  // row 0: column V (odd V: in column V - 1's group for every tile) sets its scale
        targets[r] = r == 0 ? V - 1 : r == 1 ? 0 : (int)(rng.u32() % (unsigned)V);
    }
}

// The passes tcast_classifier_sites replaces (the trainer's order, model.cuh gpt2_forward then gpt2_classifier):
// logits = cast_a(logits) in place (matmul_out), logits = cast_b(logits) in place (logits), fused_classifier.
static void classifier_sites_reference(floatX* logits, float* losses, float dloss, const int* targets, int rows, int V, int Vp,
                                       const TcastSiteCast& a, const TcastSiteCast& b, TcastCastContext* ctx) {
    if (a.dt) tcast_cast(logits, logits, rows, Vp, 1, *a.dt, a.seed, a.stats, ctx, 0);
    if (b.dt) tcast_cast(logits, logits, rows, Vp, 1, *b.dt, b.seed, b.stats, ctx, 0);
    fused_classifier(logits, losses, dloss, targets, rows, 1, V, Vp, true, 0);
}

// One classifier case: cast ta (matmul_out; NULL: off) and tb (logits; NULL: off) at rows x Vp with V valid columns;
// tcast_classifier_sites against the passes + fused_classifier, bit for bit on the losses (poisoned before each run) and
// on the whole dlogits tensor (over the same logits), without and with statistics (then the passes on both sides, the
// counters compared); expect_fused: whether it should run inside the classifier without statistics.
static void run_classifier_case(Tally& t, const char* ta, const char* tb, int rows, int V, int Vp, uint64_t seed, TcastCastContext* ctx,
                                bool expect_fused) {
    TcastDataType dta, dtb;
    bool on_a, on_b;
    if (!gelu_case_type(t, ta, rows, Vp, &dta, &on_a) || !gelu_case_type(t, tb, rows, Vp, &dtb, &on_b)) return;
    const size_t n = (size_t)rows * Vp;
    std::vector<float> hl;
    std::vector<int> ht;
    make_classifier_inputs(rows, V, Vp, seed, hl, ht);
    DeviceBuffer<floatX> logits0(n), ref(n), got(n);
    DeviceBuffer<float> ref_losses(rows), losses(rows);
    DeviceBuffer<int> targets(rows);
    DeviceBuffer<TcastDeviceStats> st_ref(2), st(2);
    upload(logits0, hl);
    cudaCheck(cudaMemcpy(targets.ptr, ht.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
    const uint64_t seed_a = 0xC1A5ull + seed, seed_b = 0x5A1Cull + 7 * seed;
    const float dloss = 1.0f / rows;
    bool ok = true, route_ok = true, fused = false;
    for (int with_stats = 0; with_stats < 2; with_stats++) {
        poison_all(ref_losses, losses);
        st_ref.zero();
        st.zero();
        cudaCheck(cudaMemcpy(ref.ptr, logits0.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        cudaCheck(cudaMemcpy(got.ptr, logits0.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        const TcastSiteCast ra = {on_a ? &dta : NULL, seed_a, with_stats ? st_ref.ptr : NULL};
        const TcastSiteCast rb = {on_b ? &dtb : NULL, seed_b, with_stats ? st_ref.ptr + 1 : NULL};
        const TcastSiteCast fa = {ra.dt, seed_a, with_stats ? st.ptr : NULL}, fb = {rb.dt, seed_b, with_stats ? st.ptr + 1 : NULL};
        classifier_sites_reference(ref.ptr, ref_losses.ptr, dloss, targets.ptr, rows, V, Vp, ra, rb, ctx);
        const bool f = tcast_classifier_fusable(fa, fb, Vp);
        if (!with_stats) fused = f;
        route_ok = route_ok && f == (expect_fused && !with_stats);
        tcast_classifier_sites(got.ptr, losses.ptr, dloss, targets.ptr, rows, 1, V, Vp, fa, fb, ctx, 0);
        cudaCheck(cudaDeviceSynchronize());
        ok = ok && same_bits(download_raw(ref_losses), download_raw(losses)) && same_bits(download_raw(ref), download_raw(got));
        if (with_stats) {
            const std::vector<TcastDeviceStats> sa = download_raw(st_ref), sb = download_raw(st);
            ok = ok && memcmp(sa.data(), sb.data(), 2 * sizeof(TcastDeviceStats)) == 0;
            ok = ok && (sa[0].values > 0) == on_a && (sa[1].values > 0) == on_b;
        }
    }
    // losses and dlogits written, not the poison (finite inputs, valid targets: every output finite)
    ok = ok && device_nonfinite(losses.ptr, rows) == 0 && device_nonfinite(got.ptr, n) == 0;
    char name[200];
    snprintf(name, sizeof(name), "classifier %-22s %-20s %4d x %-5d V %-5d %s", ta ? ta : "-", tb ? tb : "-", rows, Vp, V,
             fused ? "in the classifier" : "passes");
    t.check(name, ok && route_ok);
}

// The checks above could pass vacuously if the casts changed nothing the classifier reads, or if the padding columns
// never entered a group: at (rows, V, Vp) with mxfp8e4 at both sites, the passes' losses must differ from the uncast
// classifier's, and from the passes' on the same logits with the padding zeroed (row 0, whose target is in the last
// group, at least).
static void run_classifier_sensitivity(Tally& t, int rows, int V, int Vp, TcastCastContext* ctx) {
    TcastDataType dt;
    if (!case_datatype(t, "mxfp8e4", rows, Vp, 1, &dt)) return;
    const size_t n = (size_t)rows * Vp;
    std::vector<float> hl;
    std::vector<int> ht;
    make_classifier_inputs(rows, V, Vp, 99, hl, ht);
    std::vector<float> hz = hl;
    for (int r = 0; r < rows; r++)
        for (int c = V; c < Vp; c++) hz[(size_t)r * Vp + c] = 0.0f;
    DeviceBuffer<floatX> x(n);
    DeviceBuffer<float> l_cast(rows), l_plain(rows), l_zero(rows);
    DeviceBuffer<int> targets(rows);
    cudaCheck(cudaMemcpy(targets.ptr, ht.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
    const TcastSiteCast a = {&dt, 1, NULL}, b = {&dt, 2, NULL}, off = {NULL, 0, NULL};
    upload(x, hl);
    classifier_sites_reference(x.ptr, l_cast.ptr, 1.0f, targets.ptr, rows, V, Vp, a, b, ctx);
    upload(x, hl);
    classifier_sites_reference(x.ptr, l_plain.ptr, 1.0f, targets.ptr, rows, V, Vp, off, off, ctx);
    upload(x, hz);
    classifier_sites_reference(x.ptr, l_zero.ptr, 1.0f, targets.ptr, rows, V, Vp, a, b, ctx);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> hc = download_raw(l_cast), hp = download_raw(l_plain), h0 = download_raw(l_zero);
    size_t d_plain = 0, d_zero = 0;
    for (int r = 0; r < rows; r++) {
        d_plain += memcmp(&hc[r], &hp[r], sizeof(float)) != 0;
        d_zero += memcmp(&hc[r], &h0[r], sizeof(float)) != 0;
    }
    char name[200];
    snprintf(name, sizeof(name), "classifier sensitivity %d x %d V %d: losses differ from uncast in %zu rows, with zero padding in %zu",
             rows, Vp, V, d_plain, d_zero);
    t.check(name, d_plain > 0 && d_zero > 0 && memcmp(&hc[0], &h0[0], sizeof(float)) != 0);
}

// Through a TcastRuntime as the trainer attaches it (--cast cast_text, --cast-fuse fuse): the model's two calls
// (model.cuh: boundary_classifier_fused asked by the forward, then boundary_classifier; else the two passes through
// bc->cast and fused_classifier), against the passes with the trainer's seeds (tcast_seed of the LM-head weight's id,
// 0: wte is the first parameter, for matmul_out; of the logits' id 6 = gpt2_cast_id(-1, CAST_ID_LOGITS) for logits).
// Also: a --cast-stats step (recording) is never fused.
static void run_classifier_runtime_case(Tally& t, const char* cast_text, int rows, int V, int Vp, int fuse, bool expect_fused) {
    const size_t n = (size_t)rows * Vp;
    std::vector<float> hl;
    std::vector<int> ht;
    make_classifier_inputs(rows, V, Vp, 4242 + fuse, hl, ht);
    DeviceBuffer<floatX> ref(n), got(n), params(16);
    DeviceBuffer<float> ref_losses(rows), losses(rows);
    DeviceBuffer<int> targets(rows);
    cudaCheck(cudaMemcpy(targets.ptr, ht.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
    TcastPlan plan;
    TcastRuntime* rt = harness_runtime(&plan, cast_text, fuse, rows, Vp, params.ptr);
    rt->step = 5;
    BoundaryCasts* bc = &rt->casts;
    const unsigned long long matmul_id = 0, logits_id = 6;
    const TcastSiteCast a = {plan.site_on[MATMUL_OUT] ? &plan.site[MATMUL_OUT] : NULL, tcast_seed(rt, matmul_id, (int)MATMUL_OUT, TCAST_ROLE_SITE), NULL};
    const TcastSiteCast b = {plan.site_on[LOGITS] ? &plan.site[LOGITS] : NULL, tcast_seed(rt, logits_id, (int)LOGITS, TCAST_ROLE_SITE), NULL};
    poison_all(ref_losses, losses);
    upload(ref, hl);
    upload(got, hl);
    classifier_sites_reference(ref.ptr, ref_losses.ptr, 1.0f / rows, targets.ptr, rows, V, Vp, a, b, &rt->cast_ctx);
    const bool fused = boundary_classifier_fused(bc, rows, Vp);
    if (fused) {
        const BoundaryClassifier job = {got.ptr, losses.ptr, 1.0f / rows, targets.ptr, rows, 1, V, Vp, matmul_id, logits_id};
        boundary_classifier(bc, job, 0);
    } else {
        boundary_tensor_cast(bc, MATMUL_OUT, matmul_id, got.ptr, rows, Vp, 0);
        boundary_tensor_cast(bc, LOGITS, logits_id, got.ptr, rows, Vp, 0);
        fused_classifier(got.ptr, losses.ptr, 1.0f / rows, targets.ptr, rows, 1, V, Vp, true, 0);
    }
    cudaCheck(cudaDeviceSynchronize());
    const bool ok = same_bits(download_raw(ref_losses), download_raw(losses)) && same_bits(download_raw(ref), download_raw(got)) &&
                    device_nonfinite(losses.ptr, rows) == 0;
    rt->recording = 1;
    const bool fused_recording = boundary_classifier_fused(bc, rows, Vp);
    rt->casts.destroy(&rt->casts);
    char name[200];
    snprintf(name, sizeof(name), "classifier runtime --cast %-32s --cast-fuse %d %d x %d: %s", cast_text, fuse, rows, Vp,
             fused ? "in the classifier" : "passes");
    t.check(name, ok && fused == expect_fused && !fused_recording);
}

// ms of the two logits passes + fused_classifier and of tcast_classifier_sites (casts ta, tb: NULL off) at rows x Vp, and
// of the plain classifier alone, with the bytes each moves per element (passes 4 + 4, classifier 2 + 2; fused 2 + 2).
static void time_classifier_sites(const char* ta, const char* tb, int rows, int V, int Vp, float copy_gbs, TcastCastContext* ctx) {
    TcastDataType dta, dtb;
    char err[256];
    if ((ta && tcast_parse_datatype(ta, &dta, err, sizeof(err)) != 0) || (tb && tcast_parse_datatype(tb, &dtb, err, sizeof(err)) != 0)) return;
    const size_t n = (size_t)rows * Vp;
    DeviceBuffer<floatX> logits(n);
    DeviceBuffer<float> losses(rows);
    DeviceBuffer<int> targets(rows);
    std::vector<int> ht(rows);
    for (int r = 0; r < rows; r++) ht[r] = (int)((r * 7919u + 13u) % (unsigned)V);
    cudaCheck(cudaMemcpy(targets.ptr, ht.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
    // (dlogits overwrite the logits; re-filling them each run would time the fill: the rates hardly depend on the values,
    // and dlogits of a row of normal logits are themselves finite values of varied groups)
    upload(logits, random_normal(n, 17, 2.0f));
    const TcastSiteCast a = {ta ? &dta : NULL, 1, NULL}, b = {tb ? &dtb : NULL, 2, NULL};
    const float plain = time_median_ms([&] { fused_classifier(logits.ptr, losses.ptr, 1.0f, targets.ptr, rows, 1, V, Vp, true, 0); });
    const float sep = time_median_ms([&] { classifier_sites_reference(logits.ptr, losses.ptr, 1.0f, targets.ptr, rows, V, Vp, a, b, ctx); });
    const float fused = time_median_ms([&] { tcast_classifier_sites(logits.ptr, losses.ptr, 1.0f, targets.ptr, rows, 1, V, Vp, a, b, ctx, 0); });
    const double b_sep = 4.0 * ((ta != NULL) + (tb != NULL)) + 4.0, b_fused = 4.0;
    printf("  classifier %-9s %-9s %d x %d: passes + classifier %.3f ms (%.0f%% of copy), in the classifier %.3f ms (%.0f%% of copy), "
           "saved %.3f ms; plain classifier %.3f ms (the casts add %.3f ms to it)\n",
           ta ? ta : "-", tb ? tb : "-", rows, Vp, sep, 100.0 * b_sep * n / (sep * 1e-3) / 1e9 / copy_gbs, fused,
           100.0 * b_fused * n / (fused * 1e-3) / 1e9 / copy_gbs, sep - fused, plain, fused - plain);
}

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("tcast_producers harness on %s (%d SMs), floatX = BF16\n", prop.name, prop.multiProcessorCount);
    TcastCastContext ctx;
    tcast_cast_context_init(&ctx, 4096, 4096);
    Tally t;
    struct { const char* text; bool fused_dim0_inplace; bool fused; } types[] = {
        {"mxfp8e4", true, true},          {"mxfp8e5@stochastic", true, true}, {"mxfp4e2", true, true},
        {"mxint8", true, true},           {"e4m3fn@stochastic", true, true},  {"bfp16", true, true},
        {"e4m3fn_e8m0_t64", false, true}, {"int8_e", false, false},
    };
    const int shapes[3][2] = {{96, 768}, {256, 3072}, {4096, 3072}};
    uint64_t seed = 1;
    for (int si = 0; si < 3; si++) {
        printf("\nshape %d x %d:\n", shapes[si][0], shapes[si][1]);
        for (const auto& ty : types) {
            if (si == 2 && strcmp(ty.text, "mxfp8e4") != 0 && strcmp(ty.text, "e4m3fn@stochastic") != 0) continue;  // big: a subset
            for (int dim = 1; dim >= 0; dim--) {
                for (int p = 0; p < 3; p++) {
                    if (p == P_GELU_SITE && !ty.fused) continue;  // a fallback needs the stored output (refused by design)
                    const bool expect = ty.fused && (dim == 1 || p != P_DGELU || ty.fused_dim0_inplace);
                    run_case(t, (Producer)p, ty.text, shapes[si][0], shapes[si][1], dim, seed++, &ctx, expect);
                }
            }
        }
    }
    const int ln_shapes[5][2] = {{96, 768}, {64, 1600}, {256, 3072}, {4096, 768}, {32, 8192}};
    for (int si = 0; si < 5; si++) {
        const int rows = ln_shapes[si][0], C = ln_shapes[si][1];
        const bool warp_path = layernorm_forward_warp_path(C);
        printf("\nLayerNorm, shape %d x %d%s:\n", rows, C, warp_path ? "" : " (block path: no sink)");
        for (const auto& ty : types) {
            if (si >= 3 && strcmp(ty.text, "mxfp8e4") != 0 && strcmp(ty.text, "e4m3fn@stochastic") != 0) continue;  // big: a subset
            for (int residual = 0; residual < 2; residual++)
                run_ln_case(t, residual != 0, ty.text, rows, C, seed++, &ctx, residual && ty.fused && warp_path);
        }
    }
    // the fc layer's GELU with its site casts (pre: matmul_out, out: gelu_out), tcast_gelu_cast
    const BoundaryGelu FRONT = BOUNDARY_GELU_FRONT, KERNEL = BOUNDARY_GELU_KERNEL;
    struct { const char* a; const char* b; BoundaryGelu form; bool pre_fused, out_fused; } gcases[] = {
        {"mxfp8e4", "mxfp8e4", FRONT, true, true},                           // --cast all=mxfp8e4: RNE, RNE
        {"mxfp6e2", "mxfp4e2", FRONT, true, true},                           // two types, tiles 32
        {"mxint8", "bfp16", FRONT, true, true},                              // tiles 32 and 8
        {"bfp16", "mxfp6e2", FRONT, true, true},                             // tiles 8 and 32
        {"e4m3fn", "q115", FRONT, true, true},                               // unscaled float, fixed scale int16_p-1
        {"q115", "mxfp8e4", FRONT, true, true},
        {"mxfp8e4@stochastic", "mxfp6e2@stochastic", FRONT, false, true},    // exponent quantizer both: a pass, then the GELU source
        {"mxfp6e2@stochastic", "mxfp8e4", FRONT, false, true},               // exponent, RNE: a pass, then the GELU source
        {"mxfp8e4", "mxint8@nearest", FRONT, true, false},                   // RNE, exponent (ties away): kernel a, pass b
        {"e4m3fn_e8m0_t2", "e4m3fn_e8m0_t4", FRONT, true, true},             // tiles inside a packet
        {"e4m3fn_e8m0_t512", "e5m2_e8m0_t1024", FRONT, true, true},          // tiles over a lane's packets
        {"e5m2_e8m0_t256@stochastic", "e2m1fnuz_e8m0_t64", FRONT, false, true},
        {"mxfp8e4", NULL, FRONT, true, false},                               // gelu_out off
        {"mxfp6e2@stochastic", NULL, FRONT, false, false},                   // the exponent quantizer: passes
        {NULL, "mxfp8e4", FRONT, false, true},                               // matmul_out off: the GELU source
        {NULL, "q115", FRONT, false, true},
        {NULL, "mxfp8e4", KERNEL, false, true},                              // gelu.cuh's GELU (-ge 0, -r 1)
        {NULL, "mxfp6e2@stochastic", KERNEL, false, true},
        {"mxfp8e4", "mxfp8e4", KERNEL, false, true},                         // the two-stage kernel is the front's GELU only
        {"int8_e", "mxfp8e4", FRONT, false, true},                           // per-tensor pre: a pass
        {"mxfp8e4", "int8_e", FRONT, true, false},                           // per-tensor out: a pass
        {"uint8_ff32", "bfp16", FRONT, false, true},                         // general path pre
        {"mxfp8e4", "int8_f32", FRONT, true, false},                         // general path out
        {"mxfp8e4@2:4", "mxfp8e4", FRONT, false, true},                      // M:N pre
    };
    const int gshapes[3][2] = {{97, 3072}, {33, 4096}, {45, 6400}};
    for (int si = 0; si < 3; si++) {
        printf("\nGELU with its site casts, shape %d x %d:\n", gshapes[si][0], gshapes[si][1]);
        for (const auto& gc : gcases)
            run_gelu_sites_case(t, gc.a, gc.b, gc.form, gshapes[si][0], gshapes[si][1], seed++, &ctx, TcastGeluRoute{gc.pre_fused, gc.out_fused});
    }
    {
        printf("\nGELU with its site casts, large tensors and --cast-fuse 0:\n");
        TcastCastContext big;
        tcast_cast_context_init(&big, 65536, 3072);
        run_gelu_sites_big(t, "mxfp8e4", "mxfp8e4", 65536, 3072, true, &big);
        run_gelu_sites_big(t, "bfp16", "mxfp6e2", 65536, 3072, true, &big);
        run_gelu_sites_big(t, "mxfp8e4", "mxfp8e4", 4096, 3072, false, &big);
        tcast_cast_context_free(&big);
        printf("\nthe GEMM front's fc forward with the site casts attached:\n");
        run_front_case(t, "matmul_out=mxfp8e4,gelu_out=mxfp8e4", 256, 768, 3072, 31);
        run_front_case(t, "gelu_out=mxfp8e4", 256, 768, 3072, 32);
        run_front_case(t, "matmul_out=mxfp6e2@stochastic", 256, 768, 3072, 33);
        run_front_case(t, "all=bfp16", 96, 1024, 4096, 34);
    }
    // the boundary-site casts around the residual + LayerNorm, tcast_residual_layernorm_sites
    const SitesCase sites[] = {
        {"mxfp8e4", "mxfp8e4", "mxfp8e4", true},                                  // the RNE quantizer for all three
        {"mxfp6e2@stochastic", "mxfp6e2@stochastic", "mxfp6e2@stochastic", true}, // the exponent quantizer
        {"mxint8", "bfp16", "e4m3fn", true},                                      // RNE: tiles 32, 8, none
        {"q115", "mxfp8e4@stochastic", "mxfp6e2", true},                          // fixed scale; exponent quantizer
        {"e5m2_e8m0_t64", "e4m3fn_e8m0_t4", "e2m1fnuz_e8m0_t2@stochastic", true}, // tiles of 64, 4 and 2
        {"e4m3fn_e8m0_t256@stochastic", "mxfp8e5", "bfloat16", true},              // a 256 tile: 32 lanes (not C = 1600)
        {NULL, "mxfp8e4", "mxfp8e4", true},
        {"mxfp8e4", NULL, "mxfp8e4@stochastic", true},
        {"mxint8", "mxfp8e4", NULL, true},
        {NULL, NULL, "mxint8@stochastic", true},
        {"bfp16@stochastic", NULL, NULL, true},
        {NULL, "q115", NULL, true},
        {"mxfp8e4", "int8_e", "mxfp8e4", false},                                  // per-tensor scale: the passes
    };
    const int sites_shapes[6][2] = {{97, 768}, {33, 1024}, {45, 1600}, {4095, 768}, {17, 3072}, {9, 8192}};
    for (int si = 0; si < 6; si++) {
        const int rows = sites_shapes[si][0], C = sites_shapes[si][1];
        printf("\nresidual + LayerNorm with site casts, shape %d x %d%s:\n", rows, C,
               C <= SITES_MAX_C ? "" : layernorm_forward_warp_path(C) ? " (warp path, not compiled for the sites: the passes)"
                                                                       : " (block path: the passes)");
        for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
            if (si >= 3 && i >= 2) continue;  // big or block path: the RNE and the exponent case
            run_sites_case(t, sites[i], rows, C, seed++, &ctx);
        }
    }
    // the training step's classifier with the logits' site casts (matmul_out, logits), tcast_classifier_sites
    struct { const char* a; const char* b; bool fused; } ccases[] = {
        {"mxfp8e4", "mxfp8e4", true},                                // --cast all=mxfp8e4: the RNE quantizer for both
        {"mxfp6e2@stochastic", "mxfp6e2@stochastic", true},          // the exponent quantizer, stochastic rounding
        {"bfp16", "bfp16", true},                                    // tiles of 8
        {"e4m3fn", "e4m3fn@stochastic", true},                       // unscaled
        {"q115", "mxint8@nearest", true},                            // fixed scale; RNE and exponent: the exponent for both
        {"mxfp8e4", NULL, true},                                     // one site only
        {NULL, "mxfp6e2", true},
        {NULL, "bfp16@stochastic", true},
        {"e4m3fn_e8m0_t2", "e5m2_e8m0_t4@stochastic", true},         // tiles inside a packet
        {"e4m3fn_e8m0_t128", "bfp16", true},                         // a 128 tile: 16 lanes, the staged span
        {"e4m3fn_e8m0_t256@stochastic", "mxfp8e5", true},            // a 256 tile (Vp 1024 and 768 only: it divides them)
        {"e4m3fn_e8m0_t512", "mxfp8e4", false},                      // tiles of 512: the passes (Vp 1024 only)
        {"int8_e", "mxfp8e4", false},                                // per-tensor scale: the passes
        {"mxfp8e4", "uint8_ff32", false},                            // the general quantizer: the passes
        {"mxfp8e4@2:4", NULL, false},                                // M:N: the passes
    };
    const int cshapes[3][3] = {{37, 50257, 50304}, {203, 999, 1024}, {64, 768, 768}};  // rows, V, Vp
    for (int si = 0; si < 3; si++) {
        const int rows = cshapes[si][0], V = cshapes[si][1], Vp = cshapes[si][2];
        printf("\nclassifier with the logits' site casts, %d x %d, V = %d:\n", rows, Vp, V);
        TcastCastContext cctx;
        tcast_cast_context_init(&cctx, rows, Vp);
        for (const auto& cc : ccases) run_classifier_case(t, cc.a, cc.b, rows, V, Vp, seed++, &cctx, cc.fused);
        if (V < Vp) run_classifier_sensitivity(t, rows, V, Vp, &cctx);
        tcast_cast_context_free(&cctx);
    }
    printf("\nclassifier with the logits' site casts through a TcastRuntime (the trainer's hooks and seeds):\n");
    run_classifier_runtime_case(t, "all=mxfp8e4", 29, 50257, 50304, 1, true);
    run_classifier_runtime_case(t, "all=mxfp8e4", 29, 50257, 50304, 0, false);
    run_classifier_runtime_case(t, "all=mxfp6e2@stochastic", 29, 50257, 50304, 1, true);
    run_classifier_runtime_case(t, "logits=bfp16", 29, 50257, 50304, 1, true);
    run_classifier_runtime_case(t, "matmul_out=e4m3fn", 29, 50257, 50304, 1, true);
    run_classifier_runtime_case(t, "all=mxfp8e4,logits=int8_e", 29, 50257, 50304, 1, false);
    run_classifier_runtime_case(t, "layernorm_out=mxfp8e4", 29, 50257, 50304, 1, false);  // no logits cast: nothing to fuse
    if (timing) {
        const float copy = copy_bandwidth_gbs();
        printf("\ntiming (device copy %.0f GB/s):\n", copy);
        TcastCastContext big;
        tcast_cast_context_init(&big, 65536, 3072);
        // the FP8 rows twice: the hardware element step (the default), then the float32 one (the code before it)
        for (int hw = 1; hw >= 0; hw--) {
            tcast_fp8_hw_enable(hw);
            printf(" element step of e4m3fn / e5m2: %s\n", hw ? "hardware FP8 conversion (tcast_fp8x2_round)" : "float32 rounding (tcast_fp8_hw_enable(0))");
            time_case(P_GELU, "mxfp8e4", 65536, 3072, copy, &big);
            time_case(P_DGELU, "mxfp8e5", 65536, 3072, copy, &big);
            time_ln_case(false, "mxfp8e4", 65536, 768, copy, &big);
            time_ln_case(true, "mxfp8e4", 65536, 768, copy, &big);
            time_gelu_sites("mxfp8e4", "mxfp8e4", 65536, 3072, copy, &big);
            time_gelu_sites("mxfp8e4", NULL, 65536, 3072, copy, &big);
            time_gelu_sites(NULL, "mxfp8e4", 65536, 3072, copy, &big);
            time_sites_case("mxfp8e4", 65536, 768, copy, &big);
        }
        tcast_fp8_hw_enable(1);
        printf(" other:\n");
        time_gelu_sites("mxfp6e2", "mxfp6e2", 65536, 3072, copy, &big);
        time_gelu_epilogue_choice("mxfp8e4", 65536, 768, 3072, &big);
        tcast_cast_context_free(&big);
        // the logits at 8192 rows (an eighth of d12 B=64's 65536: 0.8 GB instead of 6.6; ms scale with the rows)
        TcastCastContext cls;
        tcast_cast_context_init(&cls, 8192, 50304);
        time_classifier_sites("mxfp8e4", "mxfp8e4", 8192, 50257, 50304, copy, &cls);
        time_classifier_sites("mxfp6e2@stochastic", "mxfp6e2@stochastic", 8192, 50257, 50304, copy, &cls);
        time_classifier_sites("mxfp8e4", NULL, 8192, 50257, 50304, copy, &cls);
        tcast_cast_context_free(&cls);
    }
    tcast_cast_context_free(&ctx);
    return t.finish();
}

#endif
