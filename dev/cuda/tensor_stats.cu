// tensor_stats.cu - correctness and speed harness for llmc/obs/tensor_stats.cuh (the per-layer tensor
// statistics of --tensor-stats: amax, RMS, zero / below-normal fractions, NaN / Inf counts).
//
// Build and run (from the repository root):
//   make build/bf16/dev/tensor_stats && build/bf16/dev/tensor_stats --dump /tmp/ts_dump
//   python3 dev/cuda/check_tensor_stats.py /tmp/ts_dump      (the same statistics recomputed with numpy)
//   (PRECISION=FP16 / FP32 for the other storage types; or nvcc -O3 --use_fast_math -std=c++17
//    -arch=sm_90 -I. dev/cuda/tensor_stats.cu -o /tmp/tensor_stats)
// Flags: --check-only   correctness checks only, no timing
//        --dump DIR     also write one tensor and its GPU statistics (DIR/tensor.bin, DIR/tensor_stats_gpu.json)
//                       and the trainer-path CSV (DIR/tensor_stats.csv) for check_tensor_stats.py
//
// Reference: float64 on the CPU (sum of squares in long double) over exactly the values the GPU
// reads (fresh random values rounded to the element type). Checks, per tensor:
//   the 6 integer counters and amax (bit pattern): exact;
//   the sum of squares / RMS: relative 1e-9 (the GPU sums float64 squares of fp32-exact values in a
//     fixed tree: error ~1e-15; the long-double reference ~1e-18);
//   partials and results are poisoned (NaN bytes) before every run, and so are the elements
//   before a single tensor and 16 after it (a read outside it shows as NaN); a second run must give bit-identical
//   partials and results.
// Cases: sizes 1, 7, 8, 4097, 3 blocks + 1, 100003, 1000003 and a GPT-2 d12 activation (65536 x 768),
// at misaligned starts (scalar head and tail), for the storage type (floatX) and for fp32 (the -gw fp32
// gradient sums); values normal, log-uniform magnitudes 2^-149 .. 2^16 (every below-normal range,
// fp32 subnormals, zeros and Infs after rounding), special values (+-0, NaN, +-Inf, each threshold and
// the value just under it), all NaN, all zero, all Inf. Then: several tensors in one batched launch
// (segment table) must equal the one-at-a-time results bit for bit; the trainer's plan for d12 (the
// 2 x 148 weight and gradient slices, floatX and fp32 gradients) against the reference; and the
// trainer's whole recording cycle (TensorStats: record every activation, the parameters, write the CSV)
// for a small model, whose CSV is read back and checked (header, row count, values), including an
// append that must not repeat the header. Timing: GB/s of the statistics (partials + finish) on the
// d12 activation and on the d12 parameters + gradients, against the device copy bandwidth.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include <string>
#include <algorithm>
#include <type_traits>
#include "dev/cuda/harness.cuh"
#include "llmc/obs/tensor_stats.cuh"

static const double kRmsTol = 1e-9;

// ---- reference ----------------------------------------------------------------------------------

struct Ref {
    long double sumsq = 0;
    unsigned long long count[TS_NUM_COUNTS] = {};
    unsigned int amax_bits = 0;
};

static inline unsigned int abs_bits_host(float f) {
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    return u & 0x7FFFFFFFu;
}

template <typename T>
static Ref ref_stats(const T* v, size_t n) {
    Ref r;
    for (size_t i = 0; i < n; i++) {
        const float f = (float)v[i];
        const unsigned int u = abs_bits_host(f);
        const bool finite = u < 0x7F800000u;
        r.count[TS_C_ZERO] += u == 0u;
        r.count[TS_C_BF16] += u < 0x00800000u;
        r.count[TS_C_FP16] += u < 0x38800000u;
        r.count[TS_C_E4M3] += u < 0x3C800000u;
        r.count[TS_C_FINITE] += finite;
        r.count[TS_C_NAN] += u > 0x7F800000u;
        if (finite) {
            r.amax_bits = std::max(r.amax_bits, u);
            r.sumsq += (long double)f * (long double)f;
        }
    }
    return r;
}

// Exact counters and amax, RMS within kRmsTol; prints one line.
static bool check_against(const char* name, const TsCounts& g, const Ref& r, size_t n, Tally& tally) {
    bool ok = g.amax_bits == r.amax_bits;
    for (int k = 0; k < TS_NUM_COUNTS; k++) ok = ok && g.count[k] == r.count[k];
    const unsigned long long fin = r.count[TS_C_FINITE];
    const double ref_rms = fin ? (double)sqrtl(r.sumsq / fin) : NAN;
    const TsValues v = tensor_stats_values(g, n);
    double rel = 0;
    if (fin == 0) ok = ok && isnan(v.rms);
    else {
        rel = ref_rms > 0 ? fabs(v.rms - ref_rms) / ref_rms : fabs(v.rms);
        ok = ok && rel <= kRmsTol;
    }
    char line[256];
    snprintf(line, sizeof line, "%-28s n %zu amax %.4g rms %.6g (rel %.1e) zero %llu <bf16 %llu <fp16 %llu <e4m3 %llu nan %llu inf %llu",
             name, n, v.amax, v.rms, rel, g.count[TS_C_ZERO], g.count[TS_C_BF16] - g.count[TS_C_ZERO],
             g.count[TS_C_FP16] - g.count[TS_C_ZERO], g.count[TS_C_E4M3] - g.count[TS_C_ZERO], v.nan, v.inf);
    if (!ok) {
        printf("    reference: amax bits %08x vs %08x, counts", r.amax_bits, g.amax_bits);
        for (int k = 0; k < TS_NUM_COUNTS; k++) printf(" %llu/%llu", r.count[k], g.count[k]);
        printf(", rms %.17g vs %.17g\n", ref_rms, v.rms);
    }
    return tally.check(line, ok);
}

// ---- inputs -------------------------------------------------------------------------------------

enum Fill { NORMAL, LOGUNIFORM, ALL_NAN, ALL_ZERO, ALL_INF, UNIFORM_SMALL };

// The special values, placed at the start, the end and spread over the tensor.
static std::vector<float> special_values() {
    return {0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 1e-40f, -1.4e-45f, ldexpf(1.0f, -126), nextafterf(ldexpf(1.0f, -126), 0.0f),
            ldexpf(1.0f, -14), -nextafterf(ldexpf(1.0f, -14), 0.0f), ldexpf(1.0f, -6), nextafterf(ldexpf(1.0f, -6), 0.0f),
            65504.0f, -3.0e38f, 1e-5f, 1e-3f};
}

// n values of T (rounded from fp32) filled as `fill`, with the special values when `specials`.
template <typename T>
static std::vector<T> make_values(size_t n, uint64_t seed, Fill fill, bool specials) {
    HostRng r(seed);
    std::vector<T> v(n);
    for (size_t i = 0; i < n; i++) {
        float x;
        switch (fill) {
            case NORMAL: x = r.normal(); break;
            case LOGUNIFORM: x = (r.u32() & 1 ? -1.0f : 1.0f) * ldexpf(1.0f + r.uniform(), (int)(r.u32() % 166) - 150); break;
            case ALL_NAN: x = NAN; break;
            case ALL_ZERO: x = i % 2 ? -0.0f : 0.0f; break;
            case ALL_INF: x = i % 2 ? -INFINITY : INFINITY; break;
            default: x = 0.02f * r.uniform(-1.0f, 1.0f); break;  // UNIFORM_SMALL: weight-like
        }
        v[i] = (T)x;
    }
    if (specials && n > 0) {
        const std::vector<float> s = special_values();
        for (size_t k = 0; k < s.size() && k < n; k++) {
            v[k] = (T)s[k];                                       // head
            v[n - 1 - k] = (T)s[k];                               // tail
            v[(size_t)((k + 1) * (double)n / (s.size() + 1))] = (T)s[k];  // spread
        }
    }
    return v;
}

template <typename T> static const char* type_name();
template <> const char* type_name<float>() { return "fp32"; }
#if !defined(ENABLE_FP32)
template <> const char* type_name<floatX>() { return PRECISION_MODE_NAME; }
#endif

static const char* numpy_dtype() {
#if defined(ENABLE_FP32)
    return "float32";
#elif defined(ENABLE_FP16)
    return "float16";
#else
    return "bfloat16";
#endif
}

// ---- GPU runs -----------------------------------------------------------------------------------

// Statistics of one device tensor through the single-segment path; partials and result poisoned
// first. Returns the result; *partials_out (if given) receives the segment's partials.
template <typename T>
static TsCounts gpu_one(const T* d, size_t n, DeviceBuffer<TsCounts>& partials, DeviceBuffer<TsCounts>& results,
                        DeviceBuffer<TsSegment>& dseg, std::vector<TsCounts>* partials_out = nullptr) {
    TsSegment s;
    memset(&s, 0, sizeof s);
    s.ptr = d;
    s.n = n;
    tensor_stats_assign(&s, 1, sizeof(T), 0);
    partials.poison();
    results.poison();
    cudaCheck(cudaMemcpy(dseg.ptr, &s, sizeof s, cudaMemcpyHostToDevice));
    tensor_stats_launch_segment<T>(s, partials.ptr, 0);
    tensor_stats_finish(dseg.ptr, 1, partials.ptr, results.ptr, 0);
    cudaCheck(cudaDeviceSynchronize());
    TsCounts out;
    cudaCheck(cudaMemcpy(&out, results.ptr, sizeof out, cudaMemcpyDeviceToHost));
    if (partials_out) {
        partials_out->resize(s.blocks);
        cudaCheck(cudaMemcpy(partials_out->data(), partials.ptr, s.blocks * sizeof(TsCounts), cudaMemcpyDeviceToHost));
    }
    return out;
}

struct Timing {
    std::string name;
    double bytes;
    float ms;
};

// One case: n values of T at element offset `off` in a fresh buffer. Returns the GPU result.
template <typename T>
static TsCounts run_case(const char* name, size_t n, size_t off, Fill fill, bool specials, uint64_t seed, Tally& tally,
                         bool timing, std::vector<Timing>* times, std::vector<T>* keep = nullptr) {
    char label[96];
    snprintf(label, sizeof label, "%s [%s, off %zu]", name, type_name<T>(), off);
    const std::vector<T> h = make_values<T>(n, seed, fill, specials);
    DeviceBuffer<T> buf(off + n + 16);
    buf.poison();  // the elements before `off` and after the last must not be read (NaN would show)
    cudaCheck(cudaMemcpy(buf.ptr + off, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    DeviceBuffer<TsCounts> partials(TS_MAX_BLOCKS), results(1);
    DeviceBuffer<TsSegment> dseg(1);
    std::vector<TsCounts> p1, p2;
    const TsCounts r1 = gpu_one(buf.ptr + off, n, partials, results, dseg, &p1);
    const TsCounts r2 = gpu_one(buf.ptr + off, n, partials, results, dseg, &p2);
    check_against(label, r1, ref_stats(h.data(), n), n, tally);
    tally.check("  deterministic (result + partials, 2 runs)",
                memcmp(&r1, &r2, sizeof r1) == 0 && p1.size() == p2.size() && memcmp(p1.data(), p2.data(), p1.size() * sizeof(TsCounts)) == 0);
    if (timing && times) {
        TsSegment s;
        memset(&s, 0, sizeof s);
        s.ptr = buf.ptr + off;
        s.n = n;
        tensor_stats_assign(&s, 1, sizeof(T), 0);
        const float ms = time_median_ms([&] {
            tensor_stats_launch_segment<T>(s, partials.ptr, 0);
            tensor_stats_finish(dseg.ptr, 1, partials.ptr, results.ptr, 0);
        });
        times->push_back({label, (double)n * sizeof(T), ms});
    }
    if (keep) *keep = h;
    return r1;
}

// Several tensors in one batched launch must each match the reference and, bit for bit, the
// one-at-a-time path.
template <typename T>
static void run_batched(Tally& tally) {
    printf("\n== batched segment table [%s] ==\n", type_name<T>());
    const size_t counts[] = {1, 7, 4097, 100003, 1000003, 0, 3 * (TS_THREADS * TS_MIN_BYTES_PER_THREAD / sizeof(T)) + 1, 50257};
    const int nseg = sizeof(counts) / sizeof(counts[0]);
    std::vector<size_t> offs(nseg);
    size_t total = 0;
    for (int i = 0; i < nseg; i++) { offs[i] = total + (size_t)(i * 3 % 7); total = offs[i] + counts[i]; }
    std::vector<T> h = make_values<T>(total, 4242, LOGUNIFORM, true);
    DeviceBuffer<T> buf(total);
    cudaCheck(cudaMemcpy(buf.ptr, h.data(), total * sizeof(T), cudaMemcpyHostToDevice));
    std::vector<TsSegment> segs(nseg);
    for (int i = 0; i < nseg; i++) {
        memset(&segs[i], 0, sizeof(TsSegment));
        segs[i].ptr = buf.ptr + offs[i];
        segs[i].n = counts[i];
    }
    const unsigned int blocks = tensor_stats_assign(segs.data(), nseg, sizeof(T), 0);
    DeviceBuffer<TsSegment> dtable(nseg);
    cudaCheck(cudaMemcpy(dtable.ptr, segs.data(), nseg * sizeof(TsSegment), cudaMemcpyHostToDevice));
    DeviceBuffer<TsCounts> partials(blocks), results(nseg);
    partials.poison();
    results.poison();
    tensor_stats_launch_table<T>(dtable.ptr, nseg, blocks, partials.ptr, 0);
    tensor_stats_finish(dtable.ptr, nseg, partials.ptr, results.ptr, 0);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<TsCounts> got(nseg);
    cudaCheck(cudaMemcpy(got.data(), results.ptr, nseg * sizeof(TsCounts), cudaMemcpyDeviceToHost));
    DeviceBuffer<TsCounts> p1(TS_MAX_BLOCKS), r1(1);
    DeviceBuffer<TsSegment> d1(1);
    for (int i = 0; i < nseg; i++) {
        char name[64];
        snprintf(name, sizeof name, "segment %d (%zu values, off %zu)", i, counts[i], offs[i]);
        check_against(name, got[i], ref_stats(h.data() + offs[i], counts[i]), counts[i], tally);
        const TsCounts alone = gpu_one(buf.ptr + offs[i], counts[i], p1, r1, d1);
        tally.check("  = one-at-a-time result, bit for bit", memcmp(&alone, &got[i], sizeof alone) == 0);
    }
}

static GPT2Config make_config(int L, int C, int NH, int maxT) {
    GPT2Config c;
    c.max_seq_len = maxT;
    c.vocab_size = 50257;
    c.padded_vocab_size = 50304;
    c.num_layers = L;
    c.num_heads = NH;
    c.channels = C;
    return c;
}

// The trainer's plan for d12 weights + gradients (floatX gradients: one launch; fp32: two), checked
// segment by segment, run twice; timed.
static void run_param_plan(bool grads_fp32, bool timing, Tally& tally, std::vector<Timing>* times) {
    printf("\n== trainer plan: d12 weights + %s gradients ==\n", grads_fp32 ? "fp32" : PRECISION_MODE_NAME);
    const GPT2Config c = make_config(12, 768, 12, 1024);
    const size_t np = gpt2_num_parameters(&c);
    std::vector<floatX> hw = make_values<floatX>(np, 7, UNIFORM_SMALL, true);
    DeviceBuffer<floatX> w(np), gx(grads_fp32 ? 1 : np);
    DeviceBuffer<float> gf(grads_fp32 ? np : 1);
    cudaCheck(cudaMemcpy(w.ptr, hw.data(), np * sizeof(floatX), cudaMemcpyHostToDevice));
    std::vector<floatX> hgx;
    std::vector<float> hgf;
    if (grads_fp32) {
        hgf = make_values<float>(np, 8, LOGUNIFORM, true);
        cudaCheck(cudaMemcpy(gf.ptr, hgf.data(), np * sizeof(float), cudaMemcpyHostToDevice));
    } else {
        hgx = make_values<floatX>(np, 8, LOGUNIFORM, true);
        cudaCheck(cudaMemcpy(gx.ptr, hgx.data(), np * sizeof(floatX), cudaMemcpyHostToDevice));
    }
    TensorStats ts;
    memset(&ts, 0, sizeof ts);
    tensor_stats_plan_gpt2(&ts, &c, 1, 64, w.ptr, gx.ptr, grads_fp32 ? gf.ptr : NULL);
    auto run = [&] {
        tensor_stats_launch_table<floatX>(ts.d_table_x, ts.table_x_count, ts.table_x_blocks, ts.d_partials, 0);
        tensor_stats_launch_table<float>(ts.d_table_f, ts.table_f_count, ts.table_f_blocks, ts.d_partials, 0);
        tensor_stats_finish(ts.d_segs, ts.num_segments, ts.d_partials, ts.d_results, 0);
    };
    std::vector<TsCounts> res[2];
    for (int rep = 0; rep < 2; rep++) {
        cudaCheck(cudaMemset(ts.d_partials, 0xFF, ts.num_slots * sizeof(TsCounts)));
        cudaCheck(cudaMemset(ts.d_results, 0xFF, ts.num_segments * sizeof(TsCounts)));
        run();
        cudaCheck(cudaDeviceSynchronize());
        res[rep].resize(ts.num_segments);
        cudaCheck(cudaMemcpy(res[rep].data(), ts.d_results, ts.num_segments * sizeof(TsCounts), cudaMemcpyDeviceToHost));
    }
    int bad = 0, checked = 0;
    Tally quiet;  // per-segment lines only on failure
    for (int i = ts.num_acts; i < ts.num_segments; i++) {
        const TsEntry& e = ts.entries[i];
        const size_t off = (const char*)ts.segs[i].ptr - (e.kind == TS_KIND_WEIGHT ? (const char*)w.ptr
                                                          : (grads_fp32 ? (const char*)gf.ptr : (const char*)gx.ptr));
        Ref r;
        if (e.kind == TS_KIND_WEIGHT) r = ref_stats(hw.data() + off / sizeof(floatX), ts.segs[i].n);
        else if (grads_fp32) r = ref_stats(hgf.data() + off / sizeof(float), ts.segs[i].n);
        else r = ref_stats(hgx.data() + off / sizeof(floatX), ts.segs[i].n);
        bool ok = res[0][i].amax_bits == r.amax_bits;
        for (int k = 0; k < TS_NUM_COUNTS; k++) ok = ok && res[0][i].count[k] == r.count[k];
        const double fin = (double)r.count[TS_C_FINITE];
        const double ref_rms = (double)sqrtl(r.sumsq / fin), rms = tensor_stats_values(res[0][i], ts.segs[i].n).rms;
        ok = ok && fabs(rms - ref_rms) <= kRmsTol * ref_rms;
        if (!ok) {
            char name[64];
            snprintf(name, sizeof name, "%s %s L%d", TS_KIND_NAMES[e.kind], tensor_stats_name(e), e.layer);
            check_against(name, res[0][i], r, ts.segs[i].n, quiet);
            bad++;
        }
        checked++;
    }
    char line[128];
    snprintf(line, sizeof line, "%d weight + gradient segments vs reference (%d wrong)", checked, bad);
    tally.check(line, bad == 0);
    tally.check("deterministic (all results, 2 runs)",
                memcmp(res[0].data() + ts.num_acts, res[1].data() + ts.num_acts, (ts.num_segments - ts.num_acts) * sizeof(TsCounts)) == 0);
    if (timing) {
        const float ms = time_median_ms(run);
        times->push_back({std::string("d12 weights + ") + (grads_fp32 ? "fp32" : PRECISION_MODE_NAME) + " grads (batched)",
                          (double)np * (sizeof(floatX) + (grads_fp32 ? sizeof(float) : sizeof(floatX))), ms});
    }
    tensor_stats_free(&ts);
}

// The trainer's recording cycle on a small model (L=2, C=64, B=2, T=64): every activation recorded
// through tensor_stats_record_act, the parameters through tensor_stats_record_params, the CSV written by
// tensor_stats_end_step into dir; then the CSV is read back and checked against the reference.
static void run_csv_cycle(const char* dir, Tally& tally) {
    printf("\n== trainer recording cycle -> %s/tensor_stats.csv ==\n", dir);
    const GPT2Config c = make_config(2, 64, 4, 64);
    const int B = 2, T = 64;
    const size_t np = gpt2_num_parameters(&c);
    std::vector<floatX> hw = make_values<floatX>(np, 11, UNIFORM_SMALL, false), hg = make_values<floatX>(np, 12, LOGUNIFORM, true);
    DeviceBuffer<floatX> w(np), g(np);
    cudaCheck(cudaMemcpy(w.ptr, hw.data(), np * sizeof(floatX), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(g.ptr, hg.data(), np * sizeof(floatX), cudaMemcpyHostToDevice));
    TensorStats ts;
    tensor_stats_init(&ts, 10, dir, 0);
    tensor_stats_plan_gpt2(&ts, &c, B, T, w.ptr, g.ptr, NULL);
    // one buffer per activation, recorded as the forward would (step 20: a multiple of 10)
    std::vector<std::vector<floatX>> hacts(ts.num_acts);
    std::vector<DeviceBuffer<floatX>*> dacts(ts.num_acts);
    tensor_stats_begin_step(&ts, 20);
    tensor_stats_set_acts(&ts, true);
    const bool recording = tensor_stats_recording(&ts) && tensor_stats_acts_active(&ts);
    for (int i = 0; i < ts.num_acts; i++) {
        const TsEntry& e = ts.entries[i];
        hacts[i] = make_values<floatX>(ts.segs[i].n, 100 + i, i % 3 == 0 ? LOGUNIFORM : NORMAL, i % 5 == 0);
        dacts[i] = new DeviceBuffer<floatX>(ts.segs[i].n);
        cudaCheck(cudaMemcpy(dacts[i]->ptr, hacts[i].data(), ts.segs[i].n * sizeof(floatX), cudaMemcpyHostToDevice));
        tensor_stats_record_act(&ts, e.tensor, e.layer, dacts[i]->ptr, ts.segs[i].n, e.tensor == TS_LOGITS, 0);
    }
    tensor_stats_record_params(&ts, 0);
    tensor_stats_end_step(&ts);
    tensor_stats_begin_step(&ts, 21);  // not a recording step: nothing happens
    const bool quiet_step = !tensor_stats_recording(&ts);
    tensor_stats_end_step(&ts);
    const int nseg = ts.num_segments;
    std::vector<TsEntry> entries(ts.entries, ts.entries + nseg);
    std::vector<size_t> numel(nseg);
    std::vector<const void*> ptrs(nseg);
    for (int i = 0; i < nseg; i++) { numel[i] = ts.segs[i].n; ptrs[i] = ts.segs[i].ptr; }
    tensor_stats_free(&ts);
    tally.check("step 20 records, step 21 does not (every 10)", recording && quiet_step);
    // append (a resumed run): no second header
    tensor_stats_init(&ts, 10, dir, 1);
    tensor_stats_free(&ts);

    char path[4096];
    snprintf(path, sizeof path, "%s/tensor_stats.csv", dir);
    FILE* f = fopen_check(path, "r");
    char line[1024];
    int rows = 0, headers = 0, wrong = 0;
    bool header_first = false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (strcmp(line, TENSOR_STATS_CSV_HEADER) == 0) {
            header_first = header_first || (rows == 0 && headers == 0);
            headers++;
            continue;
        }
        if (rows >= nseg) { rows++; continue; }
        const int i = rows++;
        int step, layer, fields;
        char tensor[64], kind[16];
        size_t n;
        double amax, rms, zf, bb, bf, be;
        unsigned long long nan_c, inf_c;
        fields = sscanf(line, "%d,%d,%63[^,],%15[^,],%zu,%lf,%lf,%lf,%lf,%lf,%lf,%llu,%llu", &step, &layer, tensor, kind, &n, &amax, &rms,
                        &zf, &bb, &bf, &be, &nan_c, &inf_c);
        const TsEntry& e = entries[i];
        const floatX* hv = e.kind == TS_KIND_ACT ? hacts[i].data()
                                                 : (e.kind == TS_KIND_WEIGHT ? hw.data() + ((const floatX*)ptrs[i] - w.ptr)
                                                                             : hg.data() + ((const floatX*)ptrs[i] - g.ptr));
        const Ref r = ref_stats(hv, numel[i]);
        const double d = (double)numel[i], z = (double)r.count[TS_C_ZERO];
        float ref_amax;
        memcpy(&ref_amax, &r.amax_bits, sizeof ref_amax);
        const double fin = (double)r.count[TS_C_FINITE];
        const double ref_rms = fin > 0 ? (double)sqrtl(r.sumsq / fin) : NAN;
        auto close = [](double a, double b) { return (isnan(a) && isnan(b)) || fabs(a - b) <= 1e-8 * fabs(b) + 1e-300; };
        bool ok = fields == 13 && step == 20 && layer == e.layer && strcmp(tensor, tensor_stats_name(e)) == 0 &&
                  strcmp(kind, TS_KIND_NAMES[e.kind]) == 0 && n == numel[i] && close(amax, ref_amax) && close(rms, ref_rms) &&
                  close(zf, z / d) && close(bb, (r.count[TS_C_BF16] - z) / d) && close(bf, (r.count[TS_C_FP16] - z) / d) &&
                  close(be, (r.count[TS_C_E4M3] - z) / d) && nan_c == r.count[TS_C_NAN] &&
                  inf_c == numel[i] - r.count[TS_C_FINITE] - r.count[TS_C_NAN];
        if (e.tensor == TS_LOGITS && e.kind == TS_KIND_ACT && !boundary_is_identity<MATMUL_OUT>()) ok = fields == 13;  // SF16: boundary not simulated here
        if (!ok) {
            if (wrong < 5) printf("    row %d differs: %s\n", i, line);
            wrong++;
        }
    }
    fclose(f);
    tally.check("CSV: exactly one header, first line", headers == 1 && header_first);
    snprintf(line, sizeof line, "CSV: %d rows (expected %d), all values match the reference (%d wrong)", rows, nseg, wrong);
    tally.check(line, rows == nseg && wrong == 0);
    for (auto* p : dacts) delete p;
}

// Write the tensor (raw elements) and its GPU statistics for check_tensor_stats.py.
static void dump_tensor(const char* dir, const std::vector<floatX>& h, const TsCounts& g) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tensor.bin", dir);
    FILE* f = fopen_check(path, "wb");
    fwrite_check(h.data(), sizeof(floatX), h.size(), f, path);
    fclose_check(f, path);
    const TsValues v = tensor_stats_values(g, h.size());
    snprintf(path, sizeof path, "%s/tensor_stats_gpu.json", dir);
    f = fopen_check(path, "w");
    fprintf(f, "{\n  \"file\": \"tensor.bin\",\n  \"dtype\": \"%s\",\n  \"numel\": %zu,\n  \"amax\": %.9g,\n  \"amax_bits\": %u,\n",
            numpy_dtype(), h.size(), v.amax, g.amax_bits);
    if (isnan(v.rms)) fprintf(f, "  \"rms\": NaN,\n  \"sumsq\": %.17g,\n", g.sumsq);  // (Python's json reads NaN)
    else fprintf(f, "  \"rms\": %.17g,\n  \"sumsq\": %.17g,\n", v.rms, g.sumsq);
    fprintf(f, "  \"zero\": %llu,\n  \"below_bf16\": %llu,\n  \"below_fp16\": %llu,\n  \"below_e4m3\": %llu,\n", g.count[TS_C_ZERO],
            g.count[TS_C_BF16] - g.count[TS_C_ZERO], g.count[TS_C_FP16] - g.count[TS_C_ZERO], g.count[TS_C_E4M3] - g.count[TS_C_ZERO]);
    fprintf(f, "  \"finite\": %llu,\n  \"nan\": %llu,\n  \"inf\": %llu,\n", g.count[TS_C_FINITE], v.nan, v.inf);
    fprintf(f, "  \"zero_frac\": %.17g,\n  \"below_bf16_frac\": %.17g,\n  \"below_fp16_frac\": %.17g,\n  \"below_e4m3_frac\": %.17g\n}\n",
            v.zero_frac, v.below_bf16, v.below_fp16, v.below_e4m3);
    fclose_check(f, path);
    printf("  dumped %zu %s values and their GPU statistics to %s/ (check: python3 dev/cuda/check_tensor_stats.py %s)\n", h.size(),
           numpy_dtype(), dir, dir);
}

template <typename T>
static void run_cases(bool timing, Tally& tally, std::vector<Timing>& times, const char* dump_dir) {
    printf("\n== single tensors [%s] ==\n", type_name<T>());
    const size_t block_elems = TS_THREADS * TS_MIN_BYTES_PER_THREAD / sizeof(T);
    run_case<T>("1 value", 1, 0, NORMAL, false, 1, tally, false, nullptr);
    run_case<T>("7 values, specials", 7, 1, NORMAL, true, 2, tally, false, nullptr);
    run_case<T>("8 values", 8, 0, LOGUNIFORM, false, 3, tally, false, nullptr);
    run_case<T>("4097 log-uniform", 4097, 3, LOGUNIFORM, false, 4, tally, false, nullptr);
    run_case<T>("3 blocks + 1, specials", 3 * block_elems + 1, 0, NORMAL, true, 5, tally, false, nullptr);
    run_case<T>("100003 specials", 100003, 5, NORMAL, true, 6, tally, false, nullptr);
    run_case<T>("all NaN", 1000, 1, ALL_NAN, false, 7, tally, false, nullptr);
    run_case<T>("all zero (+0, -0)", 1001, 0, ALL_ZERO, false, 8, tally, false, nullptr);
    run_case<T>("all Inf (+Inf, -Inf)", 64, 2, ALL_INF, false, 9, tally, false, nullptr);
    run_case<T>("empty", 0, 0, NORMAL, false, 10, tally, false, nullptr);
    std::vector<T> kept;
    const TsCounts r = run_case<T>("1000003 log-uniform + specials", 1000003, 0, LOGUNIFORM, true, 11, tally, false, nullptr, &kept);
    if constexpr (std::is_same<T, floatX>::value) {
        if (dump_dir) dump_tensor(dump_dir, kept, r);
    }
    run_case<T>("d12 act 65536x768 + specials", (size_t)65536 * 768, 0, NORMAL, true, 12, tally, timing, &times);
    if (timing) run_case<T>("d12 fc 65536x3072", (size_t)65536 * 3072, 0, NORMAL, false, 13, tally, timing, &times);
}

int main(int argc, char** argv) {
    bool timing = true;
    const char* dump_dir = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--check-only")) timing = false;
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump_dir = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--check-only] [--dump DIR]\n", argv[0]);
            return 2;
        }
    }
    if (dump_dir) {
        struct stat st;
        if (stat(dump_dir, &st) != 0 && mkdir(dump_dir, 0755) != 0) die("--dump %s: cannot create the folder", dump_dir);
    }
    const cudaDeviceProp prop = harness_device();
    printf("tensor_stats harness | device: %s (sm_%d%d, %d SMs) | floatX = %s | %d threads, <= %d blocks per tensor | timing %s\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, PRECISION_MODE_NAME, TS_THREADS, TS_MAX_BLOCKS,
           timing ? "median of 20 after 3 warm-up" : "off");
    Tally tally;
    std::vector<Timing> times;
    run_cases<floatX>(timing, tally, times, dump_dir);
#if !defined(ENABLE_FP32)
    run_cases<float>(timing, tally, times, nullptr);
#endif
    run_batched<floatX>(tally);
#if !defined(ENABLE_FP32)
    run_batched<float>(tally);
#endif
    run_param_plan(false, timing, tally, &times);
    run_param_plan(true, timing, tally, &times);
    char tmp[] = "/tmp/tensor_stats_harness_XXXXXX";
    const char* csv_dir = dump_dir ? dump_dir : mkdtemp(tmp);
    if (!csv_dir) die("mkdtemp: cannot create a folder for the CSV check");
    run_csv_cycle(csv_dir, tally);
    if (!dump_dir) {  // the temporary folder
        char path[4096];
        snprintf(path, sizeof path, "%s/tensor_stats.csv", csv_dir);
        unlink(path);
        rmdir(csv_dir);
    }

    if (timing) {
        const float copy_gbs = copy_bandwidth_gbs();
        printf("\n%-52s | %10s | %9s | %8s\n", "statistics of (partials + finish)", "MB read", "ms", "GB/s");
        for (const Timing& t : times)
            printf("%-52s | %10.1f | %9.4f | %8.0f\n", t.name.c_str(), t.bytes / 1e6, t.ms, t.bytes / (t.ms * 1e-3) / 1e9);
        printf("(GB/s: bytes of the tensor(s) read once, over the median time; device copy reference cudaMemcpy D2D: %.0f GB/s "
               "counted read + write)\n", copy_gbs);
    }
    return tally.finish();
}
