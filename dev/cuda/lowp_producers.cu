// lowp_producers.cu - correctness and speed harness for llmc/kernels/fp8/lowp_producers.cuh: the GELU, GELU' and
// LayerNorm producers that write FP8 codes in their own pass, with speculative current scaling (issues 17, 27).
//
// Build and run (from the repository root):
//   make cuda-dev HARNESSES=lowp_producers && build/bf16/dev/lowp_producers      [--check-only: no timing]
//
// What is checked, all bit-exact, against the separate passes the FP8 backend runs without the producers
// (gemm.cuh's gemm_gelu_forward_kernel / gemm_gelu_backward_kernel with an amax slot, fp8_scale_from_amax_bits,
// fp8_quantize_pair with column sums):
//   * GELU -> E4M3 and GELU' -> E5M2 (with the bias gradient's column sums): plain and transposed codes,
//     the scale triple (amax, QUANT, DEQUANT), column sums, and for GELU both paths: the training one (no
//     BF16 output: the poisoned buffer must stay untouched) and keep_activations' (the stored BF16 output);
//   * speculative scaling for every kind of guess: none (0: the first use), the right scale, 2x and 1/2
//     (both re-quantize); the re-quantization count must grow by exactly the wrong guesses;
//   * delayed scaling's path: a known scale, the amax accumulated into the pending slot;
//   * shapes: GPT-2-like (4096 x 3072: more tiles than the fallback's grid, so its blocks loop), an edge shape
//     (100 x 200: partial tiles), and unaligned sources (the element-wise path); outputs poisoned before
//     every run; inputs with a NaN-free spread over many binades.
//   * LayerNorm -> E4M3 (--fp8-producers 2), plain and fused with the residual add: layernorm_forward_stats writes
//     the residual, mean and rstd with the bits of layernorm.cuh's launchers (and no out: the poisoned out stays
//     untouched), the producer on those statistics makes the codes, scale triple and (keep_activations) BF16 out of
//     LayerNorm + current scaling + fp8_quantize_pair, for each guess; the unfused LayerNorm on the stored residual
//     gives the fused kernel's out (the backend's fallback when the consumer cannot fuse). Widths 768, 1024, 1600
//     (3, 4 and 7 packets per lane) and 64; rows 4096 and 100 (partial tiles: the producer's element-wise path).
// Timing: separate passes against the producer as training runs it (no BF16 output; right guess, and wrong
// guess: with the fallback) at the d12 B=64 (65536 x 3072) and d24 B=32 (32768 x 4096) shapes of the MLP
// activation, and for the fused residual + LayerNorm at (65536, 768) and (32768, 1024).
// Exit status 1 if any check fails.
#include <math.h>
#include <stdio.h>
#include <algorithm>
#include <string.h>
#include <vector>
#include "dev/cuda/harness.cuh"
#include "llmc/kernels/fp8/lowp_producers.cuh"

// The triple layout the backend uses (gemm_lowp.cuh LOWP_AMAX / LOWP_SCALE / LOWP_INV): amax, scale, inverse
// at float offsets 0, 4, 8.
enum { T_AMAX = 0, T_SCALE = 4, T_INV = 8, T_FLOATS = 12 };

struct Outputs {
    DeviceBuffer<uint8_t> codes, tcodes;
    DeviceBuffer<float> triple, colpart;
    DeviceBuffer<floatX> store;
    Outputs(int rows, int cols)
        : codes((size_t)rows * cols), tcodes((size_t)rows * cols), triple(T_FLOATS), colpart((size_t)fp8_col_partial_rows(rows) * cols),
          store((size_t)rows * cols) {}
    void poison() { poison_all(codes, tcodes, colpart, store); }
};

static bool same_outputs(const Outputs& a, const Outputs& b, bool colpart, bool store) {
    bool ok = same_bits(download_raw(a.codes), download_raw(b.codes)) && same_bits(download_raw(a.tcodes), download_raw(b.tcodes));
    const std::vector<float> ta = download_raw(a.triple), tb = download_raw(b.triple);
    ok = ok && memcmp(&ta[T_AMAX], &tb[T_AMAX], 4) == 0 && memcmp(&ta[T_SCALE], &tb[T_SCALE], 4) == 0 &&
         memcmp(&ta[T_INV], &tb[T_INV], 4) == 0;
    if (colpart) ok = ok && same_bits(download_raw(a.colpart), download_raw(b.colpart));
    if (store) ok = ok && same_bits(download_raw(a.store), download_raw(b.store));
    return ok;
}

static unsigned long long misses_now(const LowpSpec& sp) {
    unsigned long long m = 0;
    cudaCheck(cudaMemcpy(&m, lowp_spec_misses(&sp), sizeof(m), cudaMemcpyDeviceToHost));
    return m;
}

// Inputs: pre-activations spread over [-8, 8] with a few wide values, GEMM products d of mixed magnitudes.
static std::vector<float> make_pre(size_t n, uint64_t seed) {
    std::vector<float> v = random_normal(n, seed, 2.0f);
    HostRng r(seed + 7);
    for (size_t i = 0; i < n; i += 97) v[i] *= 1.0f + 8.0f * r.uniform();
    return v;
}

static std::vector<float> make_d(size_t n, uint64_t seed, float scale) {
    std::vector<float> v = random_normal(n, seed, scale);
    HostRng r(seed + 11);
    for (size_t i = 0; i < n; i += 131) v[i] *= exp2f(r.uniform(-12.0f, 6.0f));
    return v;
}

// The separate passes (reference): out = producer(pre[, d]) in BF16 with its amax, current scaling from it,
// fp8_quantize_pair (with column sums for GELU'). unaligned != NULL: fp8_quantize_pair reads a copy of out at
// this 16-byte-misaligned address (its element-wise path, whose column sums add the rows in another order
// than the vector path's; the producer's source is misaligned in the same way).
static void reference(bool dgelu, const floatX* pre, const floatX* d, int rows, int cols, Outputs& o, DeviceBuffer<uint32_t>& slot,
                      floatX* unaligned = NULL) {
    const size_t n = (size_t)rows * cols;
    slot.zero();
    if (!dgelu) {
        gemm_gelu_apply<false>(o.store.ptr, const_cast<floatX*>(pre), n, 0, slot.ptr);
    } else {
        cudaCheck(cudaMemcpy(o.store.ptr, d, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        gemm_dgelu_apply(o.store.ptr, pre, n, 0, slot.ptr);
    }
    const FP8Kind kind = dgelu ? FP8_E5M2 : FP8_E4M3FN;
    float* t = o.triple.ptr;
    fp8_scale_from_amax_bits(slot.ptr, t + T_AMAX, t + T_SCALE, t + T_INV, kind, 0, 1, 0);
    const floatX* x = o.store.ptr;
    if (unaligned) {
        cudaCheck(cudaMemcpy(unaligned, x, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        x = unaligned;
    }
    fp8_quantize_pair(o.codes.ptr, o.tcodes.ptr, x, rows, cols, kind, t + T_SCALE, NULL, 0, 0, 0, dgelu ? o.colpart.ptr : NULL);
}

// The producer with speculative scaling, the guess already in o.triple's scale. keep (GELU): also store the
// BF16 output into o.store, as with GemmContext::keep_activations (tests, tensor statistics); training
// passes NULL, and the timing does too.
static void producer_speculative(bool dgelu, LowpSpec* sp, const floatX* pre, const floatX* d, int rows, int cols, Outputs& o,
                                 bool keep) {
    float* t = o.triple.ptr;
    if (!dgelu) {
        lowp_quantize_speculative(sp, LowpSrcGelu{pre, keep ? o.store.ptr : NULL}, rows, cols, FP8_E4M3FN, o.codes.ptr, o.tcodes.ptr, t + T_AMAX,
                                  t + T_SCALE, t + T_INV, NULL, 0);
    } else {
        lowp_quantize_speculative(sp, LowpSrcDgelu{d, pre}, rows, cols, FP8_E5M2, o.codes.ptr, o.tcodes.ptr, t + T_AMAX, t + T_SCALE,
                                  t + T_INV, o.colpart.ptr, 0);
    }
}

// Whether every byte of b still holds the poison (0xFF): nothing was written there.
static bool untouched(const DeviceBuffer<floatX>& b) {
    const std::vector<floatX> v = download_raw(b);
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(v.data());
    return std::all_of(bytes, bytes + v.size() * sizeof(floatX), [](unsigned char c) { return c == 0xFF; });
}

// A speculative producer, run(keep) into got (keep: it also stores the BF16 values into got.store), for each kind of guess
// of the scale already in ref (none: the first use, right, 2x, 1/2) against ref's outputs (column sums if colpart, the
// store where kept): exactly one re-quantization per wrong guess, and got.store untouched where not kept. stores: the
// producer has a store path (then the even guesses keep). label names the case.
template <class Run>
static void check_guesses(Tally& tally, LowpSpec* sp, const Outputs& ref, Outputs& got, bool colpart, bool stores, const char* label,
                          Run run) {
    const float right = download_raw(ref.triple)[T_SCALE];
    const float guesses[4] = {0.0f, right, 2.0f * right, 0.5f * right};
    const char* gname[4] = {"no guess", "right guess", "guess 2x", "guess 1/2"};
    for (int g = 0; g < 4; g++) {
        got.poison();
        std::vector<float> t(T_FLOATS, 0.0f);
        t[T_SCALE] = guesses[g];
        cudaCheck(cudaMemcpy(got.triple.ptr, t.data(), sizeof(float) * T_FLOATS, cudaMemcpyHostToDevice));
        const unsigned long long m0 = misses_now(*sp);
        const bool keep = stores && g % 2 == 0;  // the training path (no BF16 store) and the stored one
        run(keep);
        const unsigned long long m1 = misses_now(*sp);
        const bool ok = same_outputs(got, ref, colpart, keep) && m1 - m0 == (g == 1 ? 0ull : 1ull) && (!stores || keep || untouched(got.store));
        char name[200];
        snprintf(name, sizeof(name), "%s %s%s", label, gname[g], keep ? " (stored)" : "");
        tally.check(name, ok);
    }
}

static void check_case(Tally& tally, LowpSpec* sp, bool dgelu, int rows, int cols, bool unaligned, uint64_t seed) {
    const size_t n = (size_t)rows * cols;
    const int off = unaligned ? 1 : 0;  // one element: 2 bytes off the 16-byte alignment
    DeviceBuffer<floatX> pre(n + 8), d(n + 8);
    const std::vector<float> hp = make_pre(n, seed), hd = make_d(n, seed + 1, 0.02f);
    std::vector<float> hp_pad(n + 8, 0.0f), hd_pad(n + 8, 0.0f);
    std::copy(hp.begin(), hp.end(), hp_pad.begin() + off);
    std::copy(hd.begin(), hd.end(), hd_pad.begin() + off);
    upload(pre, hp_pad);
    upload(d, hd_pad);
    // the reference reads aligned copies (its kernels need 16-byte alignment); the codes do not depend on it
    DeviceBuffer<floatX> pre_a(n), d_a(n);
    upload(pre_a, hp);
    upload(d_a, hd);
    DeviceBuffer<uint32_t> slot(1);
    DeviceBuffer<floatX> x_u(n + 8);  // the reference's misaligned copy of its BF16 output
    floatX* xu = unaligned ? x_u.ptr + off : NULL;
    Outputs ref(rows, cols), got(rows, cols);
    ref.poison();
    reference(dgelu, pre_a.ptr, d_a.ptr, rows, cols, ref, slot, xu);
    const float right = download_raw(ref.triple)[T_SCALE];
    char name[160];
    const char* what = dgelu ? "GELU' -> E5M2" : "GELU -> E4M3";
    snprintf(name, sizeof(name), "%s %dx%d%s", what, rows, cols, unaligned ? " unaligned" : "");
    check_guesses(tally, sp, ref, got, dgelu, !dgelu, name,  // (GELU' has no store path)
                  [&](bool keep) { producer_speculative(dgelu, sp, pre.ptr + off, d.ptr + off, rows, cols, got, keep); });
    // delayed scaling: a known scale (here 2x the current one), the amax into a pending slot
    {
        Outputs dref(rows, cols), dgot(rows, cols);
        dref.poison();
        dgot.poison();
        std::vector<float> t(T_FLOATS, 0.0f);
        t[T_SCALE] = 2.0f * right;
        cudaCheck(cudaMemcpy(dref.triple.ptr, t.data(), sizeof(float) * T_FLOATS, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dgot.triple.ptr, t.data(), sizeof(float) * T_FLOATS, cudaMemcpyHostToDevice));
        const FP8Kind kind = dgelu ? FP8_E5M2 : FP8_E4M3FN;
        fp8_quantize_pair(dref.codes.ptr, dref.tcodes.ptr, xu ? xu : ref.store.ptr, rows, cols, kind, dref.triple.ptr + T_SCALE, NULL,
                          0, 0, 0, dgelu ? dref.colpart.ptr : NULL);
        DeviceBuffer<uint32_t> pending(1);
        pending.zero();
        if (!dgelu)
            fp8_quantize_pair_from(dgot.codes.ptr, dgot.tcodes.ptr, LowpSrcGelu{pre.ptr + off, NULL}, rows, cols, kind,
                                   dgot.triple.ptr + T_SCALE, pending.ptr, NULL, NULL, 0, 0);
        else
            fp8_quantize_pair_from(dgot.codes.ptr, dgot.tcodes.ptr, LowpSrcDgelu{d.ptr + off, pre.ptr + off}, rows, cols, kind,
                                   dgot.triple.ptr + T_SCALE, pending.ptr, dgot.colpart.ptr, NULL, 0, 0);
        const bool codes_ok = same_bits(download_raw(dgot.codes), download_raw(dref.codes)) &&
                              same_bits(download_raw(dgot.tcodes), download_raw(dref.tcodes)) &&
                              (!dgelu || same_bits(download_raw(dgot.colpart), download_raw(dref.colpart)));
        const uint32_t want = host_amax_bits(download_raw(ref.store));
        const bool amax_ok = download_raw(pending)[0] == want;
        snprintf(name, sizeof(name), "%s %dx%d%s delayed (known scale)", what, rows, cols, unaligned ? " unaligned" : "");
        tally.check(name, codes_ok && amax_ok);
    }
}

// The LayerNorm's inputs and outputs at (rows, C): residual-stream inputs with a few wide rows, the LayerNorm's
// weight around 1 and bias around 0.
struct LnCase {
    int rows, C;
    bool fused;
    DeviceBuffer<floatX> inp1, inp2, w, b, res, out;
    DeviceBuffer<float> mean, rstd;
    LnCase(int r, int c, bool f, uint64_t seed)
        : rows(r), C(c), fused(f), inp1((size_t)r * c), inp2((size_t)r * c), w(c), b(c), res((size_t)r * c), out((size_t)r * c), mean(r),
          rstd(r) {
        std::vector<float> x = random_normal((size_t)r * c, seed, 1.0f);
        HostRng g(seed + 3);
        for (int i = 0; i < r; i += 37) {  // rows of another magnitude (the residual stream grows along the model)
            const float f = exp2f(g.uniform(-4.0f, 6.0f));
            for (int j = 0; j < c; j++) x[(size_t)i * c + j] *= f;
        }
        upload(inp1, x);
        upload(inp2, make_d((size_t)r * c, seed + 5, 0.5f));
        std::vector<float> hw = random_normal(c, seed + 7, 0.2f), hb = random_normal(c, seed + 9, 0.1f);
        for (float& v : hw) v += 1.0f;
        upload(w, hw);
        upload(b, hb);
    }
    // what the LayerNorm normalizes, as stored (valid after a launcher ran)
    const floatX* x() const { return fused ? res.ptr : inp1.ptr; }
    // the launcher the backend runs without the producers, with the amax slot of current scaling
    void launcher(uint32_t* slot, cudaStream_t st = 0) {
        if (fused) fused_residual_layernorm_forward(res.ptr, out.ptr, mean.ptr, rstd.ptr, inp1.ptr, inp2.ptr, w.ptr, b.ptr, rows, C, st, slot);
        else layernorm_forward(out.ptr, mean.ptr, rstd.ptr, inp1.ptr, w.ptr, b.ptr, rows, C, st, slot);
    }
    void stats(cudaStream_t st = 0) { layernorm_forward_stats(res.ptr, mean.ptr, rstd.ptr, inp1.ptr, fused ? inp2.ptr : NULL, rows, C, st); }
    LowpSrcLayernorm source(floatX* store) const { return LowpSrcLayernorm{x(), mean.ptr, rstd.ptr, w.ptr, b.ptr, store}; }
};

static void check_ln_case(Tally& tally, LowpSpec* sp, int rows, int C, bool fused, uint64_t seed) {
    char name[160];
    const char* what = fused ? "residual + LayerNorm -> E4M3" : "LayerNorm -> E4M3";
    LnCase lc(rows, C, fused, seed);
    // reference: the launcher with its amax, current scaling, fp8_quantize_pair of out
    DeviceBuffer<uint32_t> slot(1);
    slot.zero();
    lc.launcher(slot.ptr);
    Outputs ref(rows, C), got(rows, C);
    ref.poison();
    float* t = ref.triple.ptr;
    fp8_scale_from_amax_bits(slot.ptr, t + T_AMAX, t + T_SCALE, t + T_INV, FP8_E4M3FN, 0, 1, 0);
    fp8_quantize_pair(ref.codes.ptr, ref.tcodes.ptr, lc.out.ptr, rows, C, FP8_E4M3FN, t + T_SCALE, NULL, 0, 0, 0, NULL);
    cudaCheck(cudaMemcpy(ref.store.ptr, lc.out.ptr, (size_t)rows * C * sizeof(floatX), cudaMemcpyDeviceToDevice));
    const std::vector<floatX> res_ref = download_raw(lc.res), out_ref = download_raw(lc.out);
    const std::vector<float> mean_ref = download_raw(lc.mean), rstd_ref = download_raw(lc.rstd);
    // the unfused LayerNorm on the stored input gives the same out (lowp_materialize)
    DeviceBuffer<floatX> out2((size_t)rows * C);
    out2.poison();
    layernorm_forward(out2.ptr, NULL, NULL, lc.x(), lc.w.ptr, lc.b.ptr, rows, C, 0);
    snprintf(name, sizeof(name), "%s %dx%d: unfused LayerNorm on the stored input = out", what, rows, C);
    tally.check(name, same_bits(download_raw(out2), out_ref));
    // the statistics alone: residual, mean, rstd as the launcher writes them, out untouched
    poison_all(lc.res, lc.out, lc.mean, lc.rstd);
    lc.stats();
    bool ok = (!fused || same_bits(download_raw(lc.res), res_ref)) && same_bits(download_raw(lc.mean), mean_ref) &&
              same_bits(download_raw(lc.rstd), rstd_ref);
    ok = ok && untouched(lc.out);
    snprintf(name, sizeof(name), "%s %dx%d: layernorm_forward_stats = the launcher's statistics%s, no out", what, rows, C,
             fused ? " and residual" : "");
    tally.check(name, ok);
    // the producer on them, for each kind of guess (speculative current scaling)
    snprintf(name, sizeof(name), "%s %dx%d", what, rows, C);
    check_guesses(tally, sp, ref, got, false, true, name, [&](bool keep) {
        lowp_quantize_speculative(sp, lc.source(keep ? got.store.ptr : NULL), rows, C, FP8_E4M3FN, got.codes.ptr, got.tcodes.ptr,
                                  got.triple.ptr + T_AMAX, got.triple.ptr + T_SCALE, got.triple.ptr + T_INV, NULL, 0);
    });
}

// Milliseconds of the LayerNorm (fused with the residual add) + quantization as the backend runs them without the
// LayerNorm producer (the launcher with its amax slot, the scale, fp8_quantize_pair), and with it (statistics, then the
// producer with the right guess; and with a wrong one: the fallback).
static void time_ln_shape(LowpSpec* sp, int rows, int C, const char* label, float copy_gbs) {
    LnCase lc(rows, C, true, 9);
    Outputs o(rows, C);
    DeviceBuffer<uint32_t> slot(1);
    float* t = o.triple.ptr;
    auto separate = [&] {
        cudaCheck(cudaMemsetAsync(slot.ptr, 0, sizeof(uint32_t), 0));
        lc.launcher(slot.ptr);
        fp8_scale_from_amax_bits(slot.ptr, t + T_AMAX, t + T_SCALE, t + T_INV, FP8_E4M3FN, 0, 1, 0);
        fp8_quantize_pair(o.codes.ptr, o.tcodes.ptr, lc.out.ptr, rows, C, FP8_E4M3FN, t + T_SCALE, NULL, 0, 0, 0, NULL);
    };
    const float t_sep = time_median_ms(separate);
    const float t_ln = time_median_ms([&] { lc.launcher(NULL); });
    const float t_stats = time_median_ms([&] { lc.stats(); });
    separate();  // the right scale in the triple
    const float right = download_raw(o.triple)[T_SCALE];
    auto producer = [&] {
        lc.stats();
        lowp_quantize_speculative(sp, lc.source(NULL), rows, C, FP8_E4M3FN, o.codes.ptr, o.tcodes.ptr, t + T_AMAX, t + T_SCALE, t + T_INV,
                                  NULL, 0);
    };
    const float t_hit = time_median_ms(producer);
    const float t_miss = time_median_ms([&] {
        const float guess = 2.0f * right;
        cudaCheck(cudaMemcpyAsync(t + T_SCALE, &guess, sizeof(float), cudaMemcpyHostToDevice, 0));
        producer();
    });
    // bytes at least: separate read 2 inputs, write residual and out, read out, write 2 codes = 14 B a value;
    // with the producer 2 + 2 + 2 (residual), read it again 2, write 2 codes = 10 B
    const double n = (double)rows * C;
    printf("  %-4s LayerNorm %5d x %4d  separate %6.3f ms (LayerNorm %6.3f, %3.0f%% of copy rate)  statistics %6.3f + producer = %6.3f ms "
           "(%3.0f%%)  with fallback %6.3f ms  %.2fx\n",
           label, rows, C, t_sep, t_ln, 100.0 * 8.0 * n / (t_ln * 1e-3) / 1e9 / copy_gbs, t_stats, t_hit,
           100.0 * 10.0 * n / (t_hit * 1e-3) / 1e9 / copy_gbs, t_miss, t_sep / t_hit);
}

// Milliseconds of the separate passes and of the producer (right and wrong guess) at one shape.
static void time_shape(LowpSpec* sp, bool dgelu, int rows, int cols, const char* label, float copy_gbs) {
    const size_t n = (size_t)rows * cols;
    DeviceBuffer<floatX> pre(n), d(n);
    upload(pre, make_pre(n, 5));
    upload(d, make_d(n, 6, 0.02f));
    Outputs o(rows, cols);
    DeviceBuffer<uint32_t> slot(1);
    const float t_sep = time_median_ms([&] { reference(dgelu, pre.ptr, d.ptr, rows, cols, o, slot); });
    // the quantization pass of the separate path alone (fp8_quantize_pair from BF16: read 2 B, write 2 B per value)
    const FP8Kind kind = dgelu ? FP8_E5M2 : FP8_E4M3FN;
    const float t_q = time_median_ms([&] {
        fp8_quantize_pair(o.codes.ptr, o.tcodes.ptr, o.store.ptr, rows, cols, kind, o.triple.ptr + T_SCALE, NULL, 0, 0, 0,
                          dgelu ? o.colpart.ptr : NULL);
    });
    reference(dgelu, pre.ptr, d.ptr, rows, cols, o, slot);
    const float right = download_raw(o.triple)[T_SCALE];
    auto run = [&](float guess) {
        cudaCheck(cudaMemcpyAsync(o.triple.ptr + T_SCALE, &guess, sizeof(float), cudaMemcpyHostToDevice, 0));
        producer_speculative(dgelu, sp, pre.ptr, d.ptr, rows, cols, o, false);
    };
    // (each run starts from the right scale: after a wrong guess the triple holds the right one again)
    const float t_hit = time_median_ms([&] { producer_speculative(dgelu, sp, pre.ptr, d.ptr, rows, cols, o, false); });
    const float t_miss = time_median_ms([&] { run(2.0f * right); });
    // bytes the producer must move at least: read pre (and d), write two codes
    const double min_bytes = (double)n * (dgelu ? 6 : 4);
    printf("  %-4s %-5s %5d x %4d  separate %6.3f ms (quantization pass %6.3f ms, %3.0f%% of copy rate)  producer %6.3f ms "
           "(%3.0f%%)  with fallback %6.3f ms  %.2fx\n",
           label, dgelu ? "GELU'" : "GELU", rows, cols, t_sep, t_q, 100.0 * 4.0 * n / (t_q * 1e-3) / 1e9 / copy_gbs, t_hit,
           100.0 * min_bytes / (t_hit * 1e-3) / 1e9 / copy_gbs, t_miss, t_sep / t_hit);
}

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("lowp_producers: %s\n", prop.name);
    LowpSpec sp;
    lowp_spec_init(&sp);
    Tally tally;
    for (int dgelu = 0; dgelu < 2; dgelu++) {
        check_case(tally, &sp, dgelu, 4096, 3072, false, 100 + dgelu);
        check_case(tally, &sp, dgelu, 100, 200, false, 200 + dgelu);
        check_case(tally, &sp, dgelu, 128, 256, true, 300 + dgelu);
    }
    for (int fused = 0; fused < 2; fused++) {
        check_ln_case(tally, &sp, 4096, 768, fused, 400 + fused);
        check_ln_case(tally, &sp, 4096, 1024, fused, 410 + fused);
        check_ln_case(tally, &sp, 100, 1600, fused, 420 + fused);
        check_ln_case(tally, &sp, 100, 64, fused, 430 + fused);
    }
    if (timing) {
        const float gbs = copy_bandwidth_gbs();
        printf("\ntiming (median of 20; copy rate %.0f GB/s read + write):\n", gbs);
        for (int dgelu = 0; dgelu < 2; dgelu++) {
            time_shape(&sp, dgelu, 65536, 3072, "d12", gbs);
            time_shape(&sp, dgelu, 32768, 4096, "d24", gbs);
        }
        time_ln_shape(&sp, 65536, 768, "d12", gbs);
        time_ln_shape(&sp, 32768, 1024, "d24", gbs);
    }
    cudaCheck(cudaFree(sp.dev));
    return tally.finish();
}
