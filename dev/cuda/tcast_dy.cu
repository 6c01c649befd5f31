// tcast_dy.cu - harness of a linear layer's dY in the TensorCast backward (--cast-gemm dy=...; doc/TCAST.md 5.5):
// tcast_cast_dual (llmc/kernels/tcast/tcast_cast.cuh, tcast_cols32.cuh), which reads dY once for its dgrad cast (along
// OC), its wgrad cast (along N) and the bias gradient's column sums, and the TensorCast GEMM backend that runs it
// (llmc/modes/tcast/gemm_tcast.cuh).
//
// Build and run (from the repository root, on a GPU machine):
//   make build/tcast/dev/tcast_dy TCAST=1 && build/tcast/dev/tcast_dy     (--check-only: no timing)
// In a build whose floatX is not BF16 the harness prints that it skips and exits 0.
//
// Correctness (every check bit for bit; outputs poisoned before each run; fresh random inputs per case: normal values
// times per-row magnitudes 2^-20 .. 2^12, some rows scaled into float32's subnormal range or holding a NaN, so that
// the general group steps run too):
//   dual     tcast_cast_dual from a stored dY against tcast_cast along dim 1 and dim 0 (the passes the backend ran
//            before) and the host's column sums (float32 with the device's flush to zero, row order per chunk of
//            tcast_cols32_upc units of 32 rows); also tcast_colsum alone against the same sums;
//   dgelu    tcast_cast_dual from the GELU' product (TcastTileDgelu: d and pre in) against gemm_dgelu_apply (the
//            trainer's kernel) followed by the same passes and sums;
//   ok       tcast_cast_dual_ok's answer per type (tile 32 along both dims, exponent or RNE quantizer, no sparsity);
//   backend  two linear layers' backward through matmul_backward with --cast-gemm attached (fcproj with GELU', then fc,
//            the defer between them as in training), --cast-fuse 1 (the dual passes) against 0 (the passes and
//            tcast_colsum): dinp, dweight and dbias of both layers bit for bit, and the route counted (the dual pass
//            ran, or did not: a type it refuses, or the exponent quantizer, which the backend leaves to the passes).
//            The backend's bias gradient against the host's float64 column sums of the stored dY (tolerance: BF16
//            rounding of the accumulated dbias).
// Types: mxfp8e4, mxfp8e5 (hardware FP8 element step), mxfp6e2, mxfp4e2, mxint8 (float32 step), mxfp8e4@stochastic and
// mxint8@nearest (exponent quantizer), e4m3fn_e8m0_t32@midmax (RNE without the fast group step); refused: bfp16 (tile
// 8), e4m3fn_e8m0_t64, a scale spec naming a dim, per-tensor int8_e, the general quantizer, M:N. Shapes: 64 x 64, 96 x
// 96 (a warp's upper half outside the tensor), 160 x 2304 (5 units: a short last chunk of 1 unit), 4096 x 768, 2048 x
// 3072.
// The references run the float32 element step (tcast_fp8_hw_enable(0)), the dual pass the hardware one.
//
// Timing (skipped with --check-only): the d12 B=64 dY shapes (65536 x 2304 qkv, 65536 x 768 attproj / fcproj, 65536 x
// 3072 fc from the GELU' product), mxfp8e5: what the backend ran before (the dgrad cast, the wgrad cast, the bias
// gradient's gemm_dbias_accumulate; for fc the GELU' producer with the dgrad cast) against tcast_cast_dual, with the
// bytes each moves and the device copy rate of the same run.
// Exit status 1 if any check fails.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <vector>
#include "dev/cuda/harness.cuh"

#if !defined(ENABLE_BF16)

int main() {
    printf("tcast_dy: skipped: the TensorCast casts need BF16 storage (floatX = bf16); this build is %s (build with TCAST=1)\n",
           PRECISION_MODE_NAME);
    printf("\n0 passed, 0 failed\n");
    return 0;
}

#else

#include "llmc/kernels/tcast/tcast_cast.cuh"
#include "llmc/kernels/tcast/tcast_producers.cuh"
#include "llmc/kernels/gemm/gemm.cuh"
#include "llmc/modes/tcast/tcast_runtime.cuh"
#include "llmc/modes/tcast/gemm_tcast.cuh"

// dY-like values: normal times per-row magnitudes 2^-20 .. 2^12; every 7th row at 2^-135 (float32 subnormals: zero or
// subnormal group amax, the general steps); one NaN in row 3 (a NaN group along the row, and one along the column).
static std::vector<float> make_dy(int rows, int cols, uint64_t seed) {
    std::vector<float> v = random_normal((size_t)rows * cols, seed);
    HostRng rng(seed ^ 0x5bd1e995ull);
    for (int r = 0; r < rows; r++) {
        const float mag = r % 7 == 6 ? ldexpf(1.0f, -135) : ldexpf(1.0f, (int)(rng.u32() % 33) - 20);
        for (int c = 0; c < cols; c++) v[(size_t)r * cols + c] *= mag;
    }
    if (rows > 3) v[(size_t)3 * cols + cols / 3] = NAN;
    return v;
}

static float ftz_add(float a, float b) { return tcast_add_ftz_(a, b); }

// The column sums as tcast_colsum makes them, from the BF16 tensor h (row-major rows x cols, as floats).
static std::vector<float> host_colsum(const std::vector<float>& h, int rows, int cols) {
    const int upc = tcast_cols32_upc(rows, true), chunks = tcast_colsum_chunks(rows), rpc = upc * TCAST_CHUNK_ROWS;
    std::vector<float> p((size_t)chunks * cols);
    for (int g = 0; g < chunks; g++)
        for (int c = 0; c < cols; c++) {
            float s = 0.0f;
            for (int r = g * rpc; r < rows && r < (g + 1) * rpc; r++) s = ftz_add(s, h[(size_t)r * cols + c]);
            p[(size_t)g * cols + c] = s;
        }
    return p;
}

// Same bits, where a NaN on both sides counts as equal (the host's NaN keeps its payload, the device's is canonical).
static bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); i++)
        if (memcmp(&a[i], &b[i], 4) != 0 && !(a[i] != a[i] && b[i] != b[i])) return false;
    return true;
}

static bool parse(Tally& t, const char* text, TcastDataType* dt) {
    char err[256];
    if (tcast_parse_datatype(text, dt, err, sizeof(err)) == 0) return true;
    printf("  bad data type %s: %s\n", text, err);
    t.check(text, false);
    return false;
}

// One case of the dual pass: source stored (dgelu false) or the GELU' product.
static void run_dual_case(Tally& t, const char* text, int rows, int cols, bool dgelu, uint64_t seed, TcastCastContext* ctx) {
    TcastDataType dt;
    if (!parse(t, text, &dt)) return;
    const size_t n = (size_t)rows * cols;
    const int chunks = tcast_colsum_chunks(rows);
    DeviceBuffer<floatX> d(n), pre(n), x(n), ref_row(n), ref_col(n), row(n), col(n);
    DeviceBuffer<float> part((size_t)chunks * cols), part2((size_t)chunks * cols);
    upload(d, make_dy(rows, cols, seed));
    upload(pre, random_normal(n, seed + 1, 3.0f));
    // the values the pass sees, stored: dY itself, or gemm_dgelu_apply's product
    cudaCheck(cudaMemcpy(x.ptr, d.ptr, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
    if (dgelu) gemm_dgelu_apply(x.ptr, pre.ptr, n, 0);
    const uint64_t sr = 0xABCull + seed, sc = 0xDEFull + seed;
    poison_all(ref_row, ref_col, row, col, part, part2);
    {
        TcastFp32StepScope f32;
        tcast_cast(ref_row.ptr, x.ptr, rows, cols, 1, dt, sr, NULL, ctx, 0);
        tcast_cast(ref_col.ptr, x.ptr, rows, cols, 0, dt, sc, NULL, ctx, 0);
    }
    if (dgelu) tcast_cast_dual(row.ptr, col.ptr, part.ptr, TcastTileDgelu{d.ptr, pre.ptr}, rows, cols, dt, sr, sc, 0);
    else tcast_cast_dual(row.ptr, col.ptr, part.ptr, TcastTileStored{x.ptr}, rows, cols, dt, sr, sc, 0);
    tcast_colsum(part2.ptr, x.ptr, rows, cols, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<float> hsum = host_colsum(download(x), rows, cols);
    const bool ok_row = same_bits(download_raw(ref_row), download_raw(row)), ok_col = same_bits(download_raw(ref_col), download_raw(col));
    const bool ok_sum = same_floats(hsum, download(part)), ok_sum2 = same_floats(hsum, download(part2));
    // the casts must act: some values off their input (a vacuous identity would pass an identity reference)
    const std::vector<float> hx = download(x), hr = download(row);
    size_t moved = 0;
    for (size_t i = 0; i < n; i++) moved += hr[i] != hx[i] && hx[i] == hx[i];
    char name[200];
    snprintf(name, sizeof(name), "dual %-5s %-24s %4d x %-4d row %s col %s sums %s colsum %s", dgelu ? "dgelu" : "dy", text, rows, cols,
             ok_row ? "ok" : "X", ok_col ? "ok" : "X", ok_sum ? "ok" : "X", ok_sum2 ? "ok" : "X");
    t.check(name, ok_row && ok_col && ok_sum && ok_sum2 && moved > 0);
}

// The backend: fcproj (dout (N, C), inp = GELU output (N, 4C), weight (C, 4C), with GELU' into the fc layer's dY) and
// then fc (inp (N, C), weight (4C, C)), as gpt2_backward calls them, under --cast-gemm gemm_text with --cast-fuse fuse.
struct BackendOut {
    std::vector<floatX> dinp2, dw1, db1, dw2, db2;
    std::vector<float> dy2;  // the fc layer's dY where the fuse-0 run stored it (the GELU' product)
    unsigned long long duals;
};
static BackendOut run_backend(const char* gemm_text, int fuse, int N, int C, uint64_t seed) {
    const int C4 = 4 * C;
    // parameters in one buffer, as the trainer's (the seeds' ids are offsets into it)
    DeviceBuffer<floatX> params((size_t)C * C4 * 2 + C + C4);
    floatX* w1 = params.ptr;                   // fcproj (C, 4C)
    floatX* w2 = params.ptr + (size_t)C * C4;  // fc (4C, C)
    upload(params, random_normal(params.n, seed, 0.05f));
    DeviceBuffer<floatX> dout((size_t)N * C), gelu((size_t)N * C4), pre((size_t)N * C4), ln((size_t)N * C), dinp1((size_t)N * C4),
        dinp2((size_t)N * C), dw1((size_t)C * C4), db1(C), dw2((size_t)C4 * C), db2(C4);
    upload(dout, make_dy(N, C, seed + 1));
    upload(gelu, random_normal((size_t)N * C4, seed + 2));
    upload(pre, random_normal((size_t)N * C4, seed + 3, 2.0f));
    upload(ln, random_normal((size_t)N * C, seed + 4));
    dw1.zero();
    db1.zero();
    dw2.zero();
    db2.zero();
    DeviceBuffer<float> dbias_scratch(matmul_dbias_scratch_floats(N, C4));
    TcastOptions opt;
    CliFlag flags[TCAST_NUM_FLAGS];
    tcast_flags(&opt, flags);
    opt.cast = "";
    opt.cast_gemm = gemm_text;
    opt.fuse = fuse;
    TcastPlan plan;
    tcast_plan_init(&plan, &opt);
    TcastRuntime* rt = tcast_runtime_create(&plan, N > C4 ? N : C4, C4, 0xC0FFEEull, params.ptr);
    rt->step = 5;
    GemmContext ctx;
    gemm_context_init(&ctx, 0);
    ctx.casts = &rt->casts;
    gemm_tcast_attach(&ctx, rt, NULL, N, C, C4);
    BackendOut r;
    matmul_backward(&ctx, dinp1.ptr, dw1.ptr, db1.ptr, dout.ptr, gelu.ptr, w1, dbias_scratch.ptr, N, C4, C, pre.ptr);
    matmul_backward(&ctx, dinp2.ptr, dw2.ptr, db2.ptr, dinp1.ptr, ln.ptr, w2, dbias_scratch.ptr, N, C, C4, NULL);
    cudaCheck(cudaDeviceSynchronize());
    r.dinp2 = download_raw(dinp2);
    r.dw1 = download_raw(dw1);
    r.db1 = download_raw(db1);
    r.dw2 = download_raw(dw2);
    r.db2 = download_raw(db2);
    if (!fuse) r.dy2 = download(dinp1);
    r.duals = tcast_gemm_state(&ctx)->dual_passes;  // the route: how many of the two calls took the dual pass
    gemm_context_free(&ctx);
    rt->casts.destroy(&rt->casts);
    return r;
}

// fuse 1 against fuse 0, and the bias gradients against float64 sums of the dY each layer saw.
static void run_backend_case(Tally& t, const char* gemm_text, int N, int C, bool expect_dual, uint64_t seed) {
    const BackendOut a = run_backend(gemm_text, 1, N, C, seed), b = run_backend(gemm_text, 0, N, C, seed);
    const bool same = same_bits(a.dinp2, b.dinp2) && same_bits(a.dw1, b.dw1) && same_bits(a.db1, b.db1) && same_bits(a.dw2, b.dw2) &&
                      same_bits(a.db2, b.db2);
    // db1 = column sums of fcproj's dout, db2 = of the GELU' product (fuse 0 stored it): float64 against BF16 results
    std::vector<float> hdout = make_dy(N, C, seed + 1);
    round_to_floatX(hdout);
    double err = 0.0;
    bool nan_cols_ok = true;
    for (int pass = 0; pass < 2; pass++) {
        const int cols = pass == 0 ? C : 4 * C;
        const std::vector<float>& h = pass == 0 ? hdout : b.dy2;
        const std::vector<floatX>& db = pass == 0 ? a.db1 : a.db2;
        for (int c = 0; c < cols; c++) {
            double s = 0.0;
            for (int r = 0; r < N; r++) s += h[(size_t)r * cols + c];
            const double g = (double)(float)db[c];
            if (s != s) nan_cols_ok = nan_cols_ok && g != g;  // (the NaN column stays NaN)
            else err = fmax(err, fabs(g - s) / (fabs(s) + 1e-30));
        }
    }
    char name[200];
    snprintf(name, sizeof(name), "backend --cast-gemm %-34s N=%d C=%d: fuse 1 == 0 %s, dual %llu (want %d), dbias rel %.1e", gemm_text, N,
             C, same ? "ok" : "X", a.duals, expect_dual ? 2 : 0, err);
    t.check(name, same && nan_cols_ok && a.duals == (expect_dual ? 2u : 0u) && b.duals == 0 && err < 1.0 / 64);
}

// ms of what the backend ran before against the dual pass at rows x cols.
static void time_case(const char* text, int rows, int cols, bool dgelu, float copy_gbs, TcastCastContext* ctx) {
    TcastDataType dt;
    char err[256];
    if (tcast_parse_datatype(text, &dt, err, sizeof(err)) != 0) return;
    const size_t n = (size_t)rows * cols;
    DeviceBuffer<floatX> d(n), pre(n), row(n), col(n), dbias(cols);
    DeviceBuffer<float> part((size_t)tcast_colsum_chunks(rows) * cols), scratch(matmul_dbias_scratch_floats(rows, cols));
    upload(d, random_normal(n, 11));
    upload(pre, random_normal(n, 12, 2.0f));
    dbias.zero();
    const float before = time_median_ms([&] {
        if (dgelu) tcast_cast_from(row.ptr, tcast_src_dgelu(d.ptr, pre.ptr), rows, cols, 1, dt, 1, NULL, ctx, 0);
        else tcast_cast(row.ptr, d.ptr, rows, cols, 1, dt, 1, NULL, ctx, 0);
        tcast_cast(col.ptr, d.ptr, rows, cols, 0, dt, 2, NULL, ctx, 0);
        gemm_dbias_accumulate(dbias.ptr, d.ptr, scratch.ptr, rows, cols, 0);
    });
    const float dual = time_median_ms([&] {
        if (dgelu) tcast_cast_dual(row.ptr, col.ptr, part.ptr, TcastTileDgelu{d.ptr, pre.ptr}, rows, cols, dt, 1, 2, 0);
        else tcast_cast_dual(row.ptr, col.ptr, part.ptr, TcastTileStored{d.ptr}, rows, cols, dt, 1, 2, 0);
        gemm_dbias_finish(dbias.ptr, part.ptr, tcast_colsum_chunks(rows), cols, 0);
    });
    // bytes per element: before (stored) 2+2 + 2+2 + 2, (GELU') 6+2 + 2+2 + 2; dual 2+2+2, (GELU') 4+2+2
    const double b_before = dgelu ? 14.0 : 10.0, b_dual = dgelu ? 8.0 : 6.0;
    printf("  %-5s %-9s %d x %-4d: before %.3f ms (%.0f%% of copy), dual %.3f ms (%.0f%% of copy), saved %.3f ms\n", dgelu ? "dgelu" : "dy",
           text, rows, cols, before, 100.0 * b_before * n / (before * 1e-3) / 1e9 / copy_gbs, dual,
           100.0 * b_dual * n / (dual * 1e-3) / 1e9 / copy_gbs, before - dual);
}

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("tcast_dy harness on %s (%d SMs), floatX = BF16\n", prop.name, prop.multiProcessorCount);
    TcastCastContext ctx;
    tcast_cast_context_init(&ctx, 4096, 4096);
    Tally t;
    const char* dual_types[] = {"mxfp8e4", "mxfp8e5", "mxfp6e2", "mxfp4e2", "mxint8", "mxfp8e4@stochastic", "mxint8@nearest",
                                "e4m3fn_e8m0_t32@midmax"};
    const int shapes[5][2] = {{64, 64}, {96, 96}, {160, 2304}, {4096, 768}, {2048, 3072}};
    uint64_t seed = 1;
    printf("\ntcast_cast_dual_ok:\n");
    struct { const char* text; bool ok; } oks[] = {
        {"mxfp8e4", true},  {"mxfp6e2@stochastic", true}, {"e4m3fn_e8m0_t32@midmax", true}, {"bfp16", false},
        {"e4m3fn_e8m0_t64", false}, {"e4m3fn_e8m0_t32d1", false}, {"int8_e", false}, {"uint8_ff32", false}, {"mxfp8e4@2:4", false},
    };
    for (const auto& o : oks) {
        TcastDataType dt;
        if (!parse(t, o.text, &dt)) continue;
        char name[96];
        snprintf(name, sizeof(name), "ok %-24s %s", o.text, o.ok ? "taken" : "refused");
        t.check(name, tcast_cast_dual_ok(dt, 4096, 768) == o.ok && !tcast_cast_dual_ok(dt, 4096 + 16, 768) && !tcast_cast_dual_ok(dt, 4096, 784));
    }
    for (int si = 0; si < 5; si++) {
        printf("\nshape %d x %d:\n", shapes[si][0], shapes[si][1]);
        for (const char* ty : dual_types) {
            if (si >= 3 && strcmp(ty, "mxfp8e5") != 0 && strcmp(ty, "mxfp8e4@stochastic") != 0) continue;  // big: a subset
            for (int g = 0; g < 2; g++) run_dual_case(t, ty, shapes[si][0], shapes[si][1], g == 1, seed++, &ctx);
        }
    }
    printf("\nthe GEMM backend's backward (fcproj with GELU', then fc), --cast-fuse 1 against 0:\n");
    run_backend_case(t, "x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5", 256, 64, true, 41);
    run_backend_case(t, "dy=mxfp6e2", 192, 96, true, 42);
    run_backend_case(t, "dy=mxfp6e2@stochastic", 192, 96, false, 45);  // the exponent quantizer: the passes (faster)
    run_backend_case(t, "x=mxfp8e4,dy=bfp16", 256, 64, false, 43);
    run_backend_case(t, "w=mxint8,dy=e4m3fn_e8m0_t64", 128, 64, false, 44);
    if (timing) {
        const float copy = copy_bandwidth_gbs();
        printf("\ntiming (device copy %.0f GB/s):\n", copy);
        TcastCastContext big;
        tcast_cast_context_init(&big, 65536, 3072);
        time_case("mxfp8e5", 65536, 2304, false, copy, &big);
        time_case("mxfp8e5", 65536, 768, false, copy, &big);
        time_case("mxfp8e5", 65536, 3072, true, copy, &big);
        time_case("mxfp8e4@stochastic", 65536, 768, false, copy, &big);
        tcast_cast_context_free(&big);
    }
    tcast_cast_context_free(&ctx);
    return t.finish();
}

#endif
