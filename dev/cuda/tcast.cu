// tcast.cu - correctness and speed harness for llmc/kernels/tcast/tcast_cast.cuh, the GPU virtual cast of a BF16
// tensor to a TensorCast data type (doc/TCAST.md section 4).
//
// Build and run (from the repository root, on a GPU machine):
//   make build/tcast/dev/tcast TCAST=1 && build/tcast/dev/tcast            (--check-only: no timing)
//   or: nvcc -O3 --use_fast_math -std=c++17 -lineinfo -gencode=arch=compute_90,code=[sm_90,compute_90] \
//         -DENABLE_BF16 -DENABLE_TCAST -I. dev/cuda/tcast.cu -lcublasLt -lcublas -o /tmp/tcast && /tmp/tcast
// In a build whose floatX is not BF16 the harness prints that it skips and exits 0.
//
// Correctness (every check bit-exact): the reference is tcast_cast_host (llmc/numerics/tcast.h) on the
// same BF16 inputs as float32, its float32 results rounded to BF16 with round-to-nearest-even; a NaN
// result accepts any NaN. For every predefined data type (tcast_predefined) and custom codes (tiles
// 2..1024, channel and per-tensor scales, float / int / uint zero points, other scale biases, M:N
// sparsity with N = 4, 8, 12, 32) x the 4 round modes x scale modes max / midmax (exponent scales) x
// dim 1 and dim 0 x in place and out of place, on fresh random tensors 64 x 256 (with NaN / Inf),
// 96 x 1024, 48 x 768 (row counts that are not a multiple of 32) and, for a subset, 4096 x 3072; plus
// 36 x 20 (cols % 8 != 0: the scalar fallback) and a misaligned input pointer. Fixed scales pN (q115 and
// custom ones) take the same matrix (no scale mode). Inputs mix normal
// values with per-block magnitudes from 2^-140 to 2^125, outliers, zeros and negative zeros, BF16
// subnormals, and values on coarse grids (exact ties). Each case runs twice, with statistics (all
// counters must equal tcast_cast_host's TcastStats) and without (the instantiation without counting
// code; for e4m3fn / e5m2 @even also the FP8 hardware path); outputs are poisoned before each launch
// and an out-of-place input must come back unchanged. Shapes a type does not suit must be refused by
// tcast_cast_shape_ok exactly when tcast_cast_host refuses them.
// The hardware FP8 element step (tcast_fp8x2_round, llmc/kernels/tcast/tcast_fp8_hw.cuh), which the RNE path
// takes for e4m3fn / e5m2 elements: the primitive on every finite float32 pattern (E4M3 and E5M2) against the
// device build of tcast_quantize_exp, on ~8M fresh random and planted values (the formats' grids, midpoints =
// ties, float32 neighbours, subnormals, the saturation edge, signed zeros; seed from the clock, printed) against
// the host build, and its host twin (fp8.h) on the same values; the RNE path's pair steps on the host (host twin and
// float32 step) against tcast_quantize for every finite BF16 pattern at every group scale; then the cast kernels on planted tensors with the
// hardware step and with the float32 step (tcast_fp8_hw_enable): e4m3fn, e5m2, fixed-scale, per-tensor and
// channel types on every BF16 pattern (in order, shuffled, finite-only), tile-scaled e4m3fn / e5m2 (tiles 2, 8,
// 32, 256; @max and @midmax; dim 1 and 0) on tiles whose amax fixes the scale s and whose other elements are
// y * 2^s for every BF16 y of the format's range (ties, subnormals, values under half the smallest subnormal,
// max .. 2^(emax+1)), at 15 scales from below E8M0's clamp to the largest finite one.
//
// Timing (skipped with --check-only): GB/s counting 2 bytes read + 2 written per element, out of
// place, for mxfp8e4, mxfp8e5, mxfp6e2, mxfp4e2, mxint8, bfp16 (tile 8), a per-tensor type and others (and
// mxfp8e4, mxfp8e5, e4m3fn again with the float32 element step: path rne-f32 against rne-hw),
// along dim 1 and dim 0, on 65536 x 768 and 65536 x 3072, next to a device-to-device cudaMemcpyAsync
// of the same bytes measured in the same run. The bars (informational, not failures): tile-32 MX
// types >= 80% of the copy along dim 1, >= 70% along dim 0.
//
// Last line: `N passed, N failed`; exit status 1 if any check failed.

#include <stdarg.h>
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
    printf("tcast: skipped: the TensorCast casts need BF16 storage (floatX = bf16); this build is %s (build with TCAST=1)\n",
           PRECISION_MODE_NAME);
    printf("\n0 passed, 0 failed\n");
    return 0;
}

#else

#include "llmc/kernels/tcast/tcast_cast.cuh"

// ------------------------------------------------------------------------------------------------
// Host BF16 helpers

static inline float bf16_bits_to_float(uint16_t h) {
    const uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

// float32 -> BF16 bits, round to nearest even; NaN -> 0x7FC0 (any NaN is accepted anyway).
static inline uint16_t float_to_bf16_rne(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    b += 0x7FFFu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

static inline bool bf16_isnan(uint16_t h) { return (h & 0x7FFF) > 0x7F80; }

// ------------------------------------------------------------------------------------------------
// Inputs: row-major (rows, cols) BF16 bit patterns

static std::vector<uint16_t> make_input(int rows, int cols, uint64_t seed, bool specials) {
    HostRng r(seed);
    // a magnitude exponent per 8 x 8 block, so that tiles along either dimension see scale changes
    const int brows = (rows + 7) / 8, bcols = (cols + 7) / 8;
    std::vector<int> bexp((size_t)brows * bcols);
    for (int& e : bexp) {
        const float u = r.uniform();
        if (u < 0.06f) e = -140 + (int)(r.u32() % 21);      // 2^-140 .. 2^-120: scale clamping, subnormal results
        else if (u < 0.10f) e = 100 + (int)(r.u32() % 24);  // 2^100 .. 2^123: scale overflow of narrow scales
        else e = -8 + (int)(r.u32() % 17);                 // 2^-8 .. 2^8
    }
    std::vector<uint16_t> x((size_t)rows * cols);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            const int e = bexp[(size_t)(i / 8) * bcols + j / 8];
            const float u = r.uniform();
            const uint16_t sign = (r.u32() & 1) ? 0x8000 : 0;
            uint16_t h;
            if (u < 0.03f) {
                h = sign;  // +-0
            } else if (u < 0.05f) {
                h = sign | (uint16_t)(1 + r.u32() % 127);  // BF16 subnormal (float32 subnormal too)
            } else if (u < 0.10f) {
                // a coarse grid value k * 2^(e - 6): exact ties of many formats and scales
                const int kq = 1 + (int)(r.u32() % 63);
                h = float_to_bf16_rne(ldexpf((float)kq, e - 6)) | sign;
            } else if (u < 0.105f) {
                h = float_to_bf16_rne(r.normal() * ldexpf(1.0f, e + 10 > 125 ? 125 : e + 10));  // outlier
            } else {
                h = float_to_bf16_rne(r.normal() * ldexpf(1.0f, e));
            }
            if ((h & 0x7F80) == 0x7F80) h = (h & 0x8000) | 0x7F7F;  // no accidental Inf / NaN
            x[(size_t)i * cols + j] = h;
        }
    if (specials) {
        const size_t n = x.size(), count = 1 + n / 3000;
        const uint16_t sp[4] = {0x7FC0, 0xFFC1, 0x7F80, 0xFF80};  // NaN, -NaN (other payload), +Inf, -Inf
        for (size_t k = 0; k < count; k++) x[r.u32() % n] = sp[k % 4];
    }
    return x;
}

// ------------------------------------------------------------------------------------------------
// One case: device vs tcast_cast_host

struct Buffers {
    DeviceBuffer<floatX> x, y;
    DeviceBuffer<TcastDeviceStats> stats;
    TcastCastContext ctx;
    explicit Buffers(size_t n) : x(n + 64), y(n + 64), stats(1) { tcast_cast_context_init(&ctx, 4096, 4096); }
    ~Buffers() { tcast_cast_context_free(&ctx); }
};

struct CaseSpec {
    std::string text;  // the data type with its modifiers
    int rows, cols, dim;
    bool inplace, specials;
    int xoff;          // element offset of x in its buffer (misaligned input)
    uint64_t seed;
    const std::vector<uint16_t>* input = nullptr;  // planted BF16 input (rows * cols), else make_input's
};

enum CaseStatus { CASE_OK, CASE_SKIPPED, CASE_FAILED };

// The RNE path's element step for dt in a launch now (tcast_kernel_args: the FP8 switch and the element format).
static const char* rne_step_name(const TcastDataType& dt) {
    switch (tcast_kernel_args(dt, 0).rne_fp8) {
    case TCAST_FP8_E4M3: return "rne, hw e4m3";
    case TCAST_FP8_E5M2: return "rne, hw e5m2";
    default: return "rne, float32";
    }
}

static int g_details = 0;  // failure details printed so far (bounded)

static void detail(const char* fmt, ...) {
    if (g_details++ >= 40) return;
    va_list a;
    va_start(a, fmt);
    printf("      ");
    vprintf(fmt, a);
    printf("\n");
    va_end(a);
}

static CaseStatus run_case(Buffers& B, const CaseSpec& c) {
    TcastDataType dt;
    char err[512], err2[512];
    if (tcast_parse_datatype(c.text.c_str(), &dt, err, sizeof(err)) != 0) {
        detail("%s: does not parse: %s", c.text.c_str(), err);
        return CASE_FAILED;
    }
    const size_t n = (size_t)c.rows * c.cols;
    const std::vector<uint16_t> xh = c.input ? *c.input : make_input(c.rows, c.cols, c.seed, c.specials);
    if (xh.size() != n) {
        detail("%s: planted input of %zu elements for %d x %d", c.text.c_str(), xh.size(), c.rows, c.cols);
        return CASE_FAILED;
    }
    std::vector<float> xf(n), ref(n);
    for (size_t i = 0; i < n; i++) xf[i] = bf16_bits_to_float(xh[i]);
    TcastStats hs;
    memset(&hs, 0, sizeof(hs));
    const int host_rc = tcast_cast_host(&dt, xf.data(), ref.data(), c.rows, c.cols, c.dim, c.seed * 31 + 7, &hs, err, sizeof(err));
    const int dev_rc = tcast_cast_shape_ok(dt, c.rows, c.cols, c.dim, err2, sizeof(err2));
    if (host_rc != dev_rc) {
        detail("%s %dx%d dim %d: tcast_cast_shape_ok %s but tcast_cast_host %s (%s / %s)", c.text.c_str(), c.rows, c.cols, c.dim,
               dev_rc ? "refuses" : "accepts", host_rc ? "refuses" : "accepts", err2, err);
        return CASE_FAILED;
    }
    if (host_rc != 0) return CASE_SKIPPED;  // the shape does not suit the type: refused by both
    std::vector<uint16_t> refh(n);
    for (size_t i = 0; i < n; i++) refh[i] = float_to_bf16_rne(ref[i]);

    floatX* dx = B.x.ptr + c.xoff;
    floatX* dy = c.inplace ? dx : B.y.ptr;
    bool ok = true;
    for (int pass = 0; pass < 2; pass++) {  // 0: with statistics, 1: without
        const bool with_stats = pass == 0;
        cudaCheck(cudaMemcpy(dx, xh.data(), n * 2, cudaMemcpyHostToDevice));
        if (!c.inplace) cudaCheck(cudaMemset(dy, 0x5A, n * 2));  // poison: BF16 0x5A5A
        cudaCheck(cudaMemset(B.stats.ptr, 0, sizeof(TcastDeviceStats)));
        tcast_cast(dy, dx, c.rows, c.cols, c.dim, dt, c.seed * 31 + 7, with_stats ? B.stats.ptr : NULL, &B.ctx, 0);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaDeviceSynchronize());
        std::vector<uint16_t> yh(n);
        cudaCheck(cudaMemcpy(yh.data(), dy, n * 2, cudaMemcpyDeviceToHost));
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n; i++) {
            const bool same = yh[i] == refh[i] || (bf16_isnan(yh[i]) && bf16_isnan(refh[i]));
            if (!same && bad++ == 0) first = i;
        }
        const TcastPath path = tcast_cast_path(dt, with_stats);
        const char* pname = path == TCAST_PATH_RNE ? rne_step_name(dt) : tcast_cast_path_name(path);
        if (bad) {
            const uint16_t xi = xh[first];
            detail("%s %dx%d dim %d %s%s (%s%s): %zu of %zu outputs differ; first at (%zu, %zu): x %04x (%.9g) host %.9g -> %04x, "
                   "device %04x",
                   c.text.c_str(), c.rows, c.cols, c.dim, c.inplace ? "in place" : "out of place", c.xoff ? " misaligned" : "", pname,
                   with_stats ? ", stats" : "", bad, n, first / c.cols, first % c.cols, xi, bf16_bits_to_float(xi), ref[first],
                   refh[first], yh[first]);
            ok = false;
        }
        if (!c.inplace) {
            std::vector<uint16_t> xback(n);
            cudaCheck(cudaMemcpy(xback.data(), dx, n * 2, cudaMemcpyDeviceToHost));
            if (memcmp(xback.data(), xh.data(), n * 2) != 0) {
                detail("%s %dx%d dim %d (%s): the out-of-place input was modified", c.text.c_str(), c.rows, c.cols, c.dim, pname);
                ok = false;
            }
        }
        if (with_stats) {
            TcastDeviceStats ds;
            cudaCheck(cudaMemcpy(&ds, B.stats.ptr, sizeof(ds), cudaMemcpyDeviceToHost));
            bool sok = ds.values == (unsigned long long)hs.values && ds.saturated == (unsigned long long)hs.saturated &&
                       ds.flushed == (unsigned long long)hs.flushed;
            int badbin = -1;
            for (int b = 0; b < TCAST_HIST_BINS; b++)
                if ((long long)ds.hist[b] != hs.hist[b]) {
                    if (badbin < 0) badbin = b;
                    sok = false;
                }
            if (!sok) {
                detail("%s %dx%d dim %d %s (%s): statistics differ: values %llu/%lld saturated %llu/%lld flushed %llu/%lld%s",
                       c.text.c_str(), c.rows, c.cols, c.dim, c.inplace ? "in place" : "out of place", pname, ds.values, hs.values,
                       ds.saturated, hs.saturated, ds.flushed, hs.flushed, badbin >= 0 ? " and the scale histogram" : "");
                if (badbin >= 0)
                    detail("  first histogram bin %d (exponent %d): device %u host %lld", badbin, tcast_hist_exp(badbin), ds.hist[badbin],
                           hs.hist[badbin]);
                ok = false;
            }
        }
    }
    return ok ? CASE_OK : CASE_FAILED;
}

// ------------------------------------------------------------------------------------------------
// The matrix of cases

struct TypeResult {
    int ok = 0, failed = 0, skipped = 0;
};

static const char* const ROUNDS[4] = {"even", "nearest", "zero", "stochastic"};

// Round and scale modifiers of one type: every round mode; midmax too for exponent scales.
static std::vector<std::string> modifiers_of(const char* text) {
    TcastDataType dt;
    char err[256];
    std::vector<std::string> mods;
    if (tcast_parse_datatype(text, &dt, err, sizeof(err)) != 0) return {""};
    const bool exp_scale = dt.has_scale && dt.scale.scale.kind == TCAST_KIND_EXPONENT;
    for (int r = 0; r < 4; r++) {
        mods.push_back(std::string("@") + ROUNDS[r]);
        if (exp_scale) mods.push_back(std::string("@") + ROUNDS[r] + "@midmax");
    }
    return mods;
}

static void print_type_line(const char* text, const TypeResult& t) {
    TcastDataType dt;
    char err[256], desc[160];
    const bool parsed = tcast_parse_datatype(text, &dt, err, sizeof(err)) == 0;
    if (parsed) tcast_datatype_describe(&dt, desc, sizeof(desc));
    printf("  %-22s %-40s %-18s %5d %5d  %s\n", text, parsed ? desc : "(does not parse)",
           parsed ? (std::string(tcast_cast_path_name(tcast_cast_path(dt, true))) + "/" + tcast_cast_path_name(tcast_cast_path(dt, false))).c_str()
                  : "-",
           t.ok + t.failed, t.skipped, t.failed ? "FAIL" : "ok");
}

// ------------------------------------------------------------------------------------------------
// The hardware FP8 element step (tcast_fp8x2_round, llmc/kernels/tcast/tcast_fp8_hw.cuh)

// The TensorCast number spec of a hardware FP8 format (e4m3fn, e5m2).
static TcastNumberSpec fp8_spec(int F) {
    TcastNumberSpec f;
    char err[256];
    if (tcast_parse_number(F == TCAST_FP8_E4M3 ? "e4m3fn" : "e5m2", &f, err, sizeof(err)) != 0 || tcast_fp8_of(f) != F) {
        printf("error: fp8_spec: %s\n", err);
        exit(1);
    }
    return f;
}

static const char* fp8_name(int F) { return F == TCAST_FP8_E4M3 ? "e4m3" : "e5m2"; }

struct Fp8Mismatch {
    uint32_t y, got, want;
};

// Records a mismatch: the count, and the first 8 (y, device result, reference) in `first`.
__device__ void fp8_record(unsigned long long* bad, Fp8Mismatch* first, uint32_t y, uint32_t got, uint32_t want) {
    const unsigned long long i = atomicAdd(bad, 1ull);
    if (i < 8) first[i] = {y, got, want};
}

// Every finite float32 pattern u, as y.x of a pair whose y.y is another finite pattern (a multiplicative
// scramble of u), through tcast_fp8x2_round<F>, against the device build of tcast_quantize_exp (f = F's spec,
// s = 0, round to nearest even: section 1.3), bit for bit. NaN and Inf are not the primitive's inputs.
template <int F>
__global__ void fp8_exhaustive_kernel(TcastNumberSpec f, unsigned long long* bad, Fp8Mismatch* first) {
    const uint64_t n = 1ull << 32, stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const uint32_t u = (uint32_t)i;
        if ((u & 0x7F800000u) == 0x7F800000u) continue;
        uint32_t v = u * 0x9E3779B1u;
        if ((v & 0x7F800000u) == 0x7F800000u) v &= 0xBFFFFFFFu;  // a finite partner
        const float2 r = tcast_fp8x2_round<F>(make_float2(__uint_as_float(u), __uint_as_float(v)));
        const uint32_t wu = tcast_f32_bits(tcast_quantize_exp(&f, __uint_as_float(u), 0, TCAST_ROUND_EVEN, 0u, nullptr));
        const uint32_t wv = tcast_f32_bits(tcast_quantize_exp(&f, __uint_as_float(v), 0, TCAST_ROUND_EVEN, 0u, nullptr));
        if (__float_as_uint(r.x) != wu) fp8_record(bad, first, u, __float_as_uint(r.x), wu);
        if (__float_as_uint(r.y) != wv) fp8_record(bad, first, v, __float_as_uint(r.y), wv);
    }
}

// out[i] = tcast_fp8x2_round<F>(in[i]) for n pairs.
template <int F>
__global__ void fp8_round_kernel(const float2* in, float2* out, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = tcast_fp8x2_round<F>(in[i]);
}

// Fresh random and planted finite float32 values for format f (an even count: consecutive values form the pairs):
// every value of f's grid (subnormals included) and of the binade above emax (past max), the midpoints of
// consecutive grid values (ties, including half the smallest subnormal and the midpoint above max), the float32
// neighbours of all those, both signs; +-0, float32 subnormals, FLT_MAX; random finite patterns and random values
// whose exponents span f's range with a margin (emin - mbits - 4 .. emax + 3), shuffled.
static std::vector<float> fp8_values(const TcastNumberSpec& f, uint64_t seed, size_t nrandom) {
    HostRng r(seed);
    std::vector<float> grid;  // magnitudes of the grid, ascending, with two points past max
    const int M = f.mbits;
    for (int m = 0; m < (1 << M); m++) grid.push_back(ldexpf((float)m, f.emin - M));  // 0 and the subnormals
    for (int e = f.emin; e <= f.emax + 1; e++)
        for (int m = 0; m < (1 << M); m++) grid.push_back(ldexpf((float)((1 << M) + m), e - M));
    std::vector<float> planted;
    for (size_t i = 0; i < grid.size(); i++) {
        float pts[2] = {grid[i], i + 1 < grid.size() ? (grid[i] + grid[i + 1]) / 2.0f : grid[i]};  // the value, the midpoint above
        for (float p : pts)
            for (int d = -2; d <= 2; d++) {
                uint32_t b = tcast_f32_bits(p);
                if (p == 0.0f && d < 0) continue;
                b = (uint32_t)((int64_t)b + d);  // float32 neighbours (d = 0: the point itself)
                planted.push_back(tcast_f32_from_bits(b));
                planted.push_back(-tcast_f32_from_bits(b));
            }
    }
    const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00400000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                                 0x00800000u, 0x80800000u, 0x3F800000u};
    for (uint32_t b : specials) planted.push_back(tcast_f32_from_bits(b));
    std::vector<float> v = planted;
    for (size_t i = 0; i < nrandom; i++) {
        uint32_t b;
        if (i & 1) {
            b = r.u32();
            if ((b & 0x7F800000u) == 0x7F800000u) b &= 0xBFFFFFFFu;
        } else {
            const int e = f.emin - M - 4 + (int)(r.u32() % (uint32_t)(f.emax + 3 - (f.emin - M - 4) + 1));
            b = ((uint32_t)(e + 127) << 23) | (r.u32() & 0x7FFFFFu) | (r.u32() & 0x80000000u);
        }
        v.push_back(tcast_f32_from_bits(b));
    }
    for (size_t i = v.size() - 1; i > 0; i--) std::swap(v[i], v[r.u32() % (i + 1)]);  // mix planted and random in pairs
    if (v.size() & 1) v.push_back(0.0f);
    return v;
}

// The primitive on the device: every finite float32 pattern against the device's tcast_quantize_exp, and fresh
// random and planted values against the host's tcast_quantize_exp; the host twin (fp8.h) against it too.
template <int F>
static void check_fp8_primitive(Tally& tally, uint64_t seed) {
    const TcastNumberSpec f = fp8_spec(F);
    char name[96];
    {
        DeviceBuffer<unsigned long long> bad(1);
        DeviceBuffer<Fp8Mismatch> first(8);
        bad.zero();
        fp8_exhaustive_kernel<F><<<tcast_sm_count_() * 16, 256>>>(f, bad.ptr, first.ptr);
        cudaCheck(cudaGetLastError());
        cudaCheck(cudaDeviceSynchronize());
        unsigned long long nbad = 0;
        Fp8Mismatch fm[8];
        cudaCheck(cudaMemcpy(&nbad, bad.ptr, sizeof(nbad), cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(fm, first.ptr, sizeof(fm), cudaMemcpyDeviceToHost));
        snprintf(name, sizeof(name), "%s: all finite float32 (device ref)", fp8_name(F));
        tally.check(name, nbad == 0);
        for (unsigned long long i = 0; i < nbad && i < 8; i++)
            detail("%s y %08x (%.9g): hardware %08x (%.9g), tcast_quantize_exp %08x (%.9g)", fp8_name(F), fm[i].y, tcast_f32_from_bits(fm[i].y),
                   fm[i].got, tcast_f32_from_bits(fm[i].got), fm[i].want, tcast_f32_from_bits(fm[i].want));
        if (nbad) printf("      %llu mismatches\n", nbad);
    }
    const std::vector<float> v = fp8_values(f, seed, (size_t)4 << 20);
    const size_t npairs = v.size() / 2;
    DeviceBuffer<float2> din(npairs), dout(npairs);
    cudaCheck(cudaMemcpy(din.ptr, v.data(), npairs * sizeof(float2), cudaMemcpyHostToDevice));
    dout.poison();
    fp8_round_kernel<F><<<tcast_sm_count_() * 8, 256>>>(din.ptr, dout.ptr, npairs);
    cudaCheck(cudaGetLastError());
    std::vector<float> got(2 * npairs);
    cudaCheck(cudaMemcpy(got.data(), dout.ptr, npairs * sizeof(float2), cudaMemcpyDeviceToHost));
    size_t bad_dev = 0, bad_twin = 0;
    for (size_t i = 0; i < v.size(); i++) {
        const uint32_t want = tcast_f32_bits(tcast_quantize_exp(&f, v[i], 0, TCAST_ROUND_EVEN, 0u, NULL));
        const float2 t = tcast_fp8x2_round<F>(make_float2(v[i], 0.0f));  // the host twin
        if (tcast_f32_bits(got[i]) != want && bad_dev++ < 4)
            detail("%s y %08x (%.9g): device %08x (%.9g), host tcast_quantize_exp %08x (%.9g)", fp8_name(F), tcast_f32_bits(v[i]), v[i],
                   tcast_f32_bits(got[i]), got[i], want, tcast_f32_from_bits(want));
        if (tcast_f32_bits(t.x) != want && bad_twin++ < 4)
            detail("%s y %08x (%.9g): host twin %08x, tcast_quantize_exp %08x", fp8_name(F), tcast_f32_bits(v[i]), v[i], tcast_f32_bits(t.x), want);
    }
    snprintf(name, sizeof(name), "%s: %zu random+planted (host ref)", fp8_name(F), v.size());
    tally.check(name, bad_dev == 0);
    snprintf(name, sizeof(name), "%s: host twin, same values", fp8_name(F));
    tally.check(name, bad_twin == 0);
}

// Host: the RNE path's pair step with the hardware step's host twin (tcast_rne_pair_step<F>, F = e4m3 / e5m2) and
// with the float32 step (F = none) against tcast_quantize, for every finite BF16 pattern (paired with a scrambled
// partner) in every ok group scale s of the exponent-scaled types (mxfp8e4 / mxfp8e5, @max and @midmax: the same
// elements) and the unscaled / fixed-scale e4m3fn, e5m2, e4m3fn_p2; the device's flush to zero emulated (tcast_mul_ftz_).
static void check_fp8_host_pairs(Tally& tally) {
    for (const char* t : {"mxfp8e4", "mxfp8e5", "e4m3fn", "e5m2", "e4m3fn_p2"}) {
        TcastDataType dt;
        char err[256], name[96];
        if (tcast_parse_datatype(t, &dt, err, sizeof(err)) != 0) {
            tally.check(err, false);
            continue;
        }
        const TcastKernelArgs k = tcast_kernel_args(dt, 0);
        const int F = tcast_fp8_of(dt.number);
        size_t n = 0, bad = 0;
        for (int s = -130; s <= 130; s++) {
            TcastGroupScale g = tcast_unscaled_group();
            if (dt.has_scale) {
                g.mode = TCAST_GROUP_EXP;
                g.s = s;
            } else if (s != 0) {
                continue;
            }
            const TcastRneParam p = tcast_rne_param(k, g);
            if (!p.ok) continue;
            for (uint32_t h = 0; h < 65536; h++) {
                const uint32_t x0 = h << 16, x1 = ((h * 40503u) & 0xFFFFu) << 16;
                if ((x0 & 0x7F800000u) == 0x7F800000u || (x1 & 0x7F800000u) == 0x7F800000u) continue;
                const uint32_t w0 = tcast_f32_bits(tcast_quantize(&dt, &g, tcast_f32_from_bits(x0), 0u, NULL));
                const uint32_t w1 = tcast_f32_bits(tcast_quantize(&dt, &g, tcast_f32_from_bits(x1), 0u, NULL));
                uint32_t a0 = x0, a1 = x1, c0 = x0, c1 = x1;
                if (F == TCAST_FP8_E4M3) tcast_rne_pair_step<TCAST_FP8_E4M3>(k, p, a0, a1);
                else tcast_rne_pair_step<TCAST_FP8_E5M2>(k, p, a0, a1);
                tcast_rne_pair_step<TCAST_FP8_NONE>(k, p, c0, c1);
                n += 2;
                if ((a0 != w0 || a1 != w1 || c0 != w0 || c1 != w1) && bad++ < 4)
                    detail("%s s %d: x %08x %08x: host twin step %08x %08x, float32 step %08x %08x, tcast_quantize %08x %08x", t, s, x0, x1,
                           a0, a1, c0, c1, w0, w1);
            }
        }
        snprintf(name, sizeof(name), "%s: host pair steps, %zu elements", t, n);
        tally.check(name, bad == 0 && n > 0);
    }
}

// Host: the branch-free group step tcast_rne_group_fast (the CUTLASS epilogue's) against the general steps it stands
// for (tcast_exp_scale, then tcast_rne_param, as TcastQRne::scale / param do), on every type of the list with every
// round mode: for every amax whose bits are a BF16 magnitude pattern and every float32 exponent field with 64 random
// mantissas (zero, subnormals, Inf and NaN patterns included), a fast verdict (ok = 2) must be the general step's ok =
// 2 group with the same scale and constants; and where the general step is a fast group with a normal amax and the type
// has rne_group, the fast step must take it too (else the epilogue would fall back for nothing). A type without
// rne_group must get no fast verdict.
static void check_rne_group_fast(Tally& tally, const std::vector<std::string>& types) {
    HostRng r(12345);
    std::vector<uint32_t> amaxes;
    for (uint32_t h = 0; h < 32768; h++) amaxes.push_back(h << 16);
    for (uint32_t e = 0; e < 256; e++)
        for (int i = 0; i < 64; i++) amaxes.push_back((e << 23) | (r.u32() & 0x7FFFFFu));
    size_t fast_types = 0, taken = 0, bad = 0, missed = 0;
    for (const std::string& t : types)
        for (const char* mod : {"", "@stochastic", "@nearest", "@zero", "@midmax"}) {
            TcastDataType dt;
            char err[256];
            if (tcast_parse_datatype((t + mod).c_str(), &dt, err, sizeof(err)) != 0) continue;  // a modifier the type refuses
            const TcastKernelArgs k = tcast_kernel_args(dt, 0);
            fast_types += k.rne_group != 0;
            for (uint32_t a : amaxes) {
                const TcastRneParam f = tcast_rne_group_fast(k, a);
                TcastGroupScale g = tcast_unscaled_group();
                if (dt.has_scale) {
                    int overflow = 0;
                    g.s = a >= TCAST_F32_INF ? 0 : tcast_exp_scale(&dt.number, &dt.scale.scale, dt.scale_mode, tcast_f32_from_bits(a), &overflow);
                    g.mode = a >= TCAST_F32_INF || overflow ? TCAST_GROUP_NAN : TCAST_GROUP_EXP;
                }
                const TcastRneParam w = tcast_rne_param(k, g);
                const bool normal = (a >> 23) >= 1 && (a >> 23) <= 254;
                if (f.ok == 2) {
                    taken++;
                    if ((!k.rne_group || w.ok != 2 || w.code != f.code || tcast_f32_bits(w.down) != tcast_f32_bits(f.down) ||
                         tcast_f32_bits(w.up) != tcast_f32_bits(f.up)) && bad++ < 4)
                        detail("%s%s amax %08x: fast ok 2 s %d, general ok %d s %d", t.c_str(), mod, a, f.code, w.ok, w.code);
                } else if (f.ok != 0) {
                    if (bad++ < 4) detail("%s%s amax %08x: fast ok %d (0 or 2 only)", t.c_str(), mod, a, f.ok);
                } else if (k.rne_group && w.ok == 2 && normal && dt.has_scale && g.mode == TCAST_GROUP_EXP) {
                    if (missed++ < 4) detail("%s%s amax %08x: general step takes it (s %d), the fast step does not", t.c_str(), mod, a, w.code);
                }
            }
        }
    char name[160];
    snprintf(name, sizeof(name), "tcast_rne_group_fast: %zu types with rne_group, %zu fast groups, all the general step's", fast_types, taken);
    tally.check(name, bad == 0 && fast_types > 0 && taken > 0);
    snprintf(name, sizeof(name), "tcast_rne_group_fast: takes every fast group with a normal amax (%zu missed)", missed);
    tally.check(name, missed == 0);
}

// All 65536 BF16 patterns as a 256 x 256 tensor: in order (rows of consecutive patterns: whole packets of
// finite values, of NaN / Inf, and mixed ones), or shuffled; finite: NaN / Inf patterns turned into finite ones
// (top exponent bit cleared), so that per-tensor and channel groups are not all NaN.
static std::vector<uint16_t> all_bf16_patterns(bool shuffled, bool finite, uint64_t seed) {
    std::vector<uint16_t> x(65536);
    for (size_t i = 0; i < x.size(); i++) {
        x[i] = (uint16_t)i;
        if (finite && (x[i] & 0x7F80) == 0x7F80) x[i] &= 0xBFFF;
    }
    HostRng r(seed);
    if (shuffled)
        for (size_t i = x.size() - 1; i > 0; i--) std::swap(x[i], x[r.u32() % (i + 1)]);
    return x;
}

// Tiles with planted values for element format f, tiles of T along a row of 256 columns (T | 256): each tile is
// an amax setter +-2^(emax + s) * (1 + k / 128) followed by T - 1 planted values y * 2^s (rounded to BF16, which
// is exact unless y * 2^s < 2^-126), so that the tile's exponent scale (@max) is s. y: every BF16 magnitude in
// [2^(emin - mbits - 2), 2^(emax + 1)) (f's grid, its midpoints = ties and their BF16 neighbours, the subnormal
// range, values at most half the smallest subnormal, the saturation edge max .. 2^(emax + 1)) and zero, with
// random signs, shuffled, for each s in a list that crosses the scale clamp (s < -127), the RNE path's lower
// edge (the smallest quantum times 2^s below 2^-125: tcast_quantize instead), s near 0 and the largest s whose
// setter is a finite BF16 value. Rows: a multiple of 32 (padding tiles hold random values), so that the
// transpose (256 x rows) has the same tiles along dim 0.
static std::vector<uint16_t> planted_tiles(const TcastNumberSpec& f, int T, uint64_t seed, int* rows_out) {
    HostRng r(seed);
    std::vector<uint16_t> mags;
    for (int e = f.emin - f.mbits - 2; e <= f.emax; e++)
        for (int m = 0; m < 128; m++) mags.push_back((uint16_t)(((e + 127) << 7) | m));
    mags.push_back(0);
    const int s_fast = 2 - (f.emin + 127 - f.mbits);  // the smallest s the RNE path takes (tcast_rne_param)
    const int s_top = 127 - f.emax;                    // the largest s with a finite BF16 setter
    const int slist[] = {-130, -127, -126, s_fast - 1, s_fast, s_fast + 1, -60, -f.emax, -1, 0, 1, 7, 60, s_top - 1, s_top};
    std::vector<uint16_t> x;
    for (int s : slist) {
        std::vector<uint16_t> vals = mags;
        for (size_t i = vals.size() - 1; i > 0; i--) std::swap(vals[i], vals[r.u32() % (i + 1)]);
        for (size_t i = 0; i < vals.size(); i += (size_t)(T - 1)) {
            const float setter = ldexpf(1.0f + (float)(r.u32() % 128) / 128.0f, f.emax + s);
            x.push_back(float_to_bf16_rne(setter) | ((r.u32() & 1) ? 0x8000 : 0));
            for (int j = 0; j < T - 1; j++) {
                const size_t k = i + (size_t)j;
                const float y = k < vals.size() ? bf16_bits_to_float(vals[k]) : 0.0f;
                x.push_back(float_to_bf16_rne(ldexpf(y, s)) | ((r.u32() & 1) ? 0x8000 : 0));
            }
        }
    }
    const size_t row = 256, rows = ((x.size() + row - 1) / row + 31) / 32 * 32;
    while (x.size() < rows * row) x.push_back(float_to_bf16_rne(r.normal()));
    *rows_out = (int)rows;
    return x;
}

static std::vector<uint16_t> transpose_bf16(const std::vector<uint16_t>& x, int rows, int cols) {
    std::vector<uint16_t> t(x.size());
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) t[(size_t)j * rows + i] = x[(size_t)i * cols + j];
    return t;
}

// The FP8 element formats through the cast kernels on planted tensors, with the hardware step (the default) and
// with the float32 step (tcast_fp8_hw_enable(0)), each against tcast_cast_host: unscaled, fixed-scale, per-tensor
// and channel types on every BF16 pattern (in order, shuffled, shuffled and finite), tile-scaled types on planted_tiles along
// dim 1 and dim 0, @even and @even@midmax; every case also with statistics (the exponent path).
static void check_fp8_planted(Tally& tally, Buffers& B, uint64_t& seed) {
    printf("  %-34s %5s %5s  %s\n", "type (element step)", "cases", "skip", "result");
    auto run = [&](const std::string& text, int rows, int cols, int dim, const std::vector<uint16_t>& in, TypeResult& tr) {
        for (int inplace = 0; inplace < 2; inplace++) {
            CaseSpec c{text, rows, cols, dim, inplace == 1, false, 0, seed++};
            c.input = &in;
            const CaseStatus st = run_case(B, c);
            (st == CASE_OK ? tr.ok : st == CASE_FAILED ? tr.failed : tr.skipped)++;
        }
    };
    const std::vector<uint16_t> layouts[3] = {all_bf16_patterns(false, false, 0), all_bf16_patterns(true, false, seed),
                                              all_bf16_patterns(true, true, seed + 1)};
    seed += 2;
    const std::vector<uint16_t> layouts_t[3] = {transpose_bf16(layouts[0], 256, 256), transpose_bf16(layouts[1], 256, 256),
                                                transpose_bf16(layouts[2], 256, 256)};
    const char* elementwise[] = {"e4m3fn", "e5m2", "e4m3fn_p2", "e5m2_p-10", "e4m3fn_p-120", "e4m3_e", "e5m2_e", "e4m3fn_e8m0_t0"};
    for (int hw = 1; hw >= 0; hw--) {
        tcast_fp8_hw_enable(hw);
        for (const char* t : elementwise) {
            TypeResult tr;
            for (int dim = 1; dim >= 0; dim--)
                for (int l = 0; l < 3; l++) run(t, 256, 256, dim, dim == 1 ? layouts[l] : layouts_t[l], tr);
            TcastDataType dt;
            char err[256];
            tcast_parse_datatype(t, &dt, err, sizeof(err));
            printf("  %-34s %5d %5d  %s\n", (std::string(t) + " (" + rne_step_name(dt) + ")").c_str(), tr.ok + tr.failed, tr.skipped,
                   tr.failed ? "FAIL" : "ok");
            tally.passed += tr.ok;
            tally.failed += tr.failed;
        }
        for (int F = TCAST_FP8_E4M3; F <= TCAST_FP8_E5M2; F++) {
            const TcastNumberSpec f = fp8_spec(F);
            for (int T : {2, 8, 32, 256}) {
                int rows = 0;
                const std::vector<uint16_t> x = planted_tiles(f, T, seed++, &rows), xt = transpose_bf16(x, rows, 256);
                const std::string base = std::string(F == TCAST_FP8_E4M3 ? "e4m3fn" : "e5m2") + "_e8m0_t" + std::to_string(T);
                TypeResult tr;
                for (const char* mod : {"@even", "@even@midmax"}) {
                    run(base + mod, rows, 256, 1, x, tr);
                    run(base + mod, 256, rows, 0, xt, tr);
                }
                TcastDataType dt;
                char err[256];
                tcast_parse_datatype(base.c_str(), &dt, err, sizeof(err));
                printf("  %-34s %5d %5d  %s\n", (base + " (" + rne_step_name(dt) + ")").c_str(), tr.ok + tr.failed, tr.skipped,
                       tr.failed ? "FAIL" : "ok");
                tally.passed += tr.ok;
                tally.failed += tr.failed;
            }
        }
    }
    tcast_fp8_hw_enable(1);
}

// ------------------------------------------------------------------------------------------------
// Timing

__global__ void fill_random_kernel(floatX* p, size_t n, unsigned long long seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const unsigned int a = random_u32(seed, 2 * i), b = random_u32(seed, 2 * i + 1);
        // roughly normal: a sum of four 16-bit uniforms, centred
        const float v = ((float)(a & 0xFFFFu) + (float)(a >> 16) + (float)(b & 0xFFFFu) + (float)(b >> 16)) / 65536.0f - 2.0f;
        p[i] = __float2bfloat16_rn(v * 1.7f);
    }
}

struct TimeRow {
    std::string type, path, shape;
    int dim;
    float ms, gbs, copy_gbs;
    const char* target;
};

static void time_shape(std::vector<TimeRow>& out, int rows, int cols) {
    const size_t n = (size_t)rows * cols;
    DeviceBuffer<floatX> x(n), y(n);
    fill_random_kernel<<<2048, 256>>>(x.ptr, n, 1234);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaDeviceSynchronize());
    TcastCastContext ctx;
    tcast_cast_context_init(&ctx, rows, cols);
    const float copy_ms = time_median_ms([&] { cudaCheck(cudaMemcpyAsync(y.ptr, x.ptr, n * 2, cudaMemcpyDeviceToDevice, 0)); });
    const float copy_gbs = (float)(4.0 * n / (copy_ms * 1e-3) / 1e9);
    char shape[32];
    snprintf(shape, sizeof(shape), "%dx%d", rows, cols);
    out.push_back({"(cudaMemcpyAsync D2D)", "-", shape, -1, copy_ms, copy_gbs, copy_gbs, ""});
    const char* types[] = {"mxfp8e4", "mxfp8e5", "mxfp6e2", "mxfp4e2", "mxint8", "bfp16", "int8_e", "e4m3fn", "mxfp8e4@stochastic",
                           "uint8_bb32", "e4m3fn_e8m0_t0", "q115"};
    for (const char* t : types) {
        TcastDataType dt;
        char err[256];
        if (tcast_parse_datatype(t, &dt, err, sizeof(err)) != 0) {
            printf("error: %s\n", err);
            exit(1);
        }
        const bool mx32 = dt.has_scale && dt.scale.tile == 32 && dt.scale.scale.kind == TCAST_KIND_EXPONENT && dt.round == TCAST_ROUND_EVEN;
        for (int dim = 1; dim >= 0; dim--) {
            if (tcast_cast_shape_ok(dt, rows, cols, dim, err, sizeof(err)) != 0) continue;
            const float ms = time_median_ms([&] { tcast_cast(y.ptr, x.ptr, rows, cols, dim, dt, 99, NULL, &ctx, 0); });
            cudaCheck(cudaGetLastError());
            const float gbs = (float)(4.0 * n / (ms * 1e-3) / 1e9);
            const TcastPath path = tcast_cast_path(dt, false);
            out.push_back({t, path == TCAST_PATH_RNE ? (tcast_kernel_args(dt, 0).rne_fp8 ? "rne-hw" : "rne-f32") : tcast_cast_path_name(path),
                           shape, dim, ms, gbs, copy_gbs, mx32 ? (dim == 1 ? ">= 80%" : ">= 70%") : ""});
        }
    }
    // the FP8 element formats with the float32 step instead of the hardware one (tcast_fp8_hw_enable(0)): same bits
    for (const char* t : {"mxfp8e4", "mxfp8e5", "e4m3fn"}) {
        TcastDataType dt;
        char err[256];
        tcast_parse_datatype(t, &dt, err, sizeof(err));
        tcast_fp8_hw_enable(0);
        for (int dim = 1; dim >= 0; dim--) {
            const float ms = time_median_ms([&] { tcast_cast(y.ptr, x.ptr, rows, cols, dim, dt, 99, NULL, &ctx, 0); });
            cudaCheck(cudaGetLastError());
            out.push_back({std::string(t) + " (float32 step)", "rne-f32", shape, dim, ms, (float)(4.0 * n / (ms * 1e-3) / 1e9), copy_gbs, ""});
        }
        tcast_fp8_hw_enable(1);
    }
    // statistics and in place, for the common case
    {
        TcastDataType dt;
        char err[256];
        tcast_parse_datatype("mxfp8e4", &dt, err, sizeof(err));
        DeviceBuffer<TcastDeviceStats> st(1);
        st.zero();
        float ms = time_median_ms([&] { tcast_cast(y.ptr, x.ptr, rows, cols, 1, dt, 99, st.ptr, &ctx, 0); });
        out.push_back({"mxfp8e4 (with stats)", tcast_cast_path_name(tcast_cast_path(dt, true)), shape, 1, ms,
                       (float)(4.0 * n / (ms * 1e-3) / 1e9), copy_gbs, ""});
        ms = time_median_ms([&] { tcast_cast(y.ptr, y.ptr, rows, cols, 1, dt, 99, NULL, &ctx, 0); });
        out.push_back({"mxfp8e4 (in place)", tcast_cast_path_name(tcast_cast_path(dt, false)), shape, 1, ms,
                       (float)(4.0 * n / (ms * 1e-3) / 1e9), copy_gbs, ">= 80%"});
    }
    tcast_cast_context_free(&ctx);
}

// ------------------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("tcast harness on %s (%d SMs), floatX = BF16\n", prop.name, prop.multiProcessorCount);
    Tally tally;

    // every predefined type, then custom codes
    std::vector<std::string> types;
    {
        const char *name, *num, *sc;
        for (int i = 0; tcast_predefined(i, &name, &num, &sc) == 0; i++) types.push_back(name);
    }
    const char* custom[] = {
        "e3m4_e8m0_t16", "int6_bfloat16_t64", "uint4_float16_int8_t0", "mxfp8e4@2:4", "mxfp8e4@4:8", "e4m3fn@2:4", "e4m3fn@4:8",
        "mxint8@1:2", "mxfp4e2@5:32", "e4m3fn@5:12", "uint8_bb32@2:4", "int8_e@3:8",
        "e2m1fnuz_e8m0_t2", "int8_e8m0_t4", "e5m2_e8m0_t64", "e2m3fnuz_e8m0_t128", "e4m3fnuz_e8m0_t256", "int4_e8m0_t512",
        "e4m3fn_e8m0_t1024", "e4m3fn_e5m0_t32", "e5m2_e4m0b3_t8", "e8m22_e8m0_t32", "float32_e8m0_t32", "e4m3fn_e8m0_t0",
        "int8_float16_t0", "uint8_bfloat16_bfloat16_t0", "uint8_float16_int8_t2", "int8_e4m3fn_t8", "uint16_float32_float32_t32",
        "e4m3fn_e8m0", "int4_bfloat16", "e3m2fnuz_e8m0_t32d1", "e3m2fnuz_e8m0_t32d0",
        // fixed scales pN (doc/TCAST.md 2, 4d; q115 = int16_p-1 is predefined): the RNE / exponent
        // paths with an offset exponent, their edges (|N| = 126, 127: the RNE path refuses, the exponent window
        // closes for tiny grids), mbits 23 (general path), sparsity
        "int8_p-3", "e4m3fn_p2", "e5m2_p-10", "e2m1fnuz_p5", "int16_p126", "e4m3fn_p-127", "int4_p-126", "bfloat16_p-100",
        "float32_p3", "e8m22b0_p-127", "int4_p-5@2:4",
    };
    for (const char* t : custom) types.push_back(t);

    const size_t max_n = (size_t)4096 * 3072;
    Buffers B(max_n);
    struct Shape { int rows, cols; bool specials; };
    const Shape shapes[] = {{64, 256, true}, {96, 1024, false}, {48, 768, false}};

    printf("\n== bit-exact vs tcast_cast_host: type x round x scale mode x dim x in/out of place; 64x256 (NaN/Inf), 96x1024, 48x768 ==\n");
    printf("  %-22s %-40s %-18s %5s %5s  %s\n", "type", "canonical code", "path (stats/plain)", "cases", "skip", "result");
    uint64_t seed = 1;
    for (const std::string& t : types) {
        TypeResult tr;
        for (const std::string& mod : modifiers_of(t.c_str())) {
            for (const Shape& s : shapes)
                for (int dim = 1; dim >= 0; dim--)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        const CaseStatus st = run_case(B, {t + mod, s.rows, s.cols, dim, inplace == 1, s.specials, 0, seed++});
                        if (st == CASE_OK) tr.ok++;
                        else if (st == CASE_FAILED) tr.failed++;
                        else tr.skipped++;
                    }
        }
        print_type_line(t.c_str(), tr);
        tally.passed += tr.ok;
        tally.failed += tr.failed;
    }

    const uint64_t fp8_seed = (uint64_t)time(NULL);
    printf("\n== FP8 hardware element step (tcast_fp8x2_round) against tcast_quantize_exp: every finite float32 on the device; "
           "fresh random and planted values on the host (seed %llu) ==\n", (unsigned long long)fp8_seed);
    check_fp8_primitive<TCAST_FP8_E4M3>(tally, fp8_seed);
    check_fp8_primitive<TCAST_FP8_E5M2>(tally, fp8_seed + 1);
    check_fp8_host_pairs(tally);
    printf("\n== the branch-free RNE group step (tcast_rne_group_fast, the CUTLASS epilogue cast) against the general steps ==\n");
    check_rne_group_fast(tally, types);

    printf("\n== FP8 element formats on planted tensors (every BF16 pattern; tiles with ties, subnormals, saturation edges "
           "at 15 scales), dim 1 and 0, hardware step then float32 step ==\n");
    check_fp8_planted(tally, B, seed);

    printf("\n== scalar fallback (36 x 20: cols %% 8 != 0) and a misaligned input (64 x 256, x + 1 element) ==\n");
    printf("  %-22s %-40s %-18s %5s %5s  %s\n", "type", "canonical code", "path (stats/plain)", "cases", "skip", "result");
    for (const std::string& t : types) {
        TypeResult tr;
        for (int r = 0; r < 4; r += 3)  // even, stochastic
            for (int dim = 1; dim >= 0; dim--)
                for (int inplace = 0; inplace < 2; inplace++) {
                    const std::string text = t + "@" + ROUNDS[r];
                    CaseStatus st = run_case(B, {text, 36, 20, dim, inplace == 1, true, 0, seed++});
                    (st == CASE_OK ? tr.ok : st == CASE_FAILED ? tr.failed : tr.skipped)++;
                    if (!inplace) {
                        st = run_case(B, {text, 64, 256, dim, false, false, 1, seed++});
                        (st == CASE_OK ? tr.ok : st == CASE_FAILED ? tr.failed : tr.skipped)++;
                    }
                }
        if (tr.failed || t.find('@') != std::string::npos || t.find("_t0") != std::string::npos || t == "mxfp8e4" || t == "int8_e" ||
            t == "uint8_fi32" || t == "e2m1fnuz_e8m0_t2" || t == "q115")
            print_type_line(t.c_str(), tr);
        tally.passed += tr.ok;
        tally.failed += tr.failed;
    }
    printf("  (types not listed: all ok)\n");

    printf("\n== large tensors: 4096 x 3072, even and stochastic, dim 1 and 0 ==\n");
    printf("  %-22s %-40s %-18s %5s %5s  %s\n", "type", "canonical code", "path (stats/plain)", "cases", "skip", "result");
    const char* large[] = {"mxfp8e4", "mxfp8e5", "mxfp6e3", "mxfp6e2", "mxfp4e2", "mxint8", "mxint4", "bfp16", "int8_e", "uint8_ff",
                           "uint4_float16_int8_t0", "e4m3fn", "mxfp8e4@2:4", "int6_bfloat16_t64", "e4m3fn_e8m0_t1024", "uint4_bi32",
                           "q115", "int8_p-3"};
    for (const char* t : large) {
        TypeResult tr;
        for (int r = 0; r < 4; r += 3)
            for (int dim = 1; dim >= 0; dim--) {
                const CaseStatus st =
                    run_case(B, {std::string(t) + "@" + ROUNDS[r], 4096, 3072, dim, (seed & 1) == 1, (seed & 2) == 2, 0, seed});
                seed++;
                (st == CASE_OK ? tr.ok : st == CASE_FAILED ? tr.failed : tr.skipped)++;
            }
        print_type_line(t, tr);
        tally.passed += tr.ok;
        tally.failed += tr.failed;
    }
    if (g_details > 40) printf("  (%d more failure details not shown)\n", g_details - 40);

    if (timing) {
        std::vector<TimeRow> rows;
        time_shape(rows, 65536, 768);
        time_shape(rows, 65536, 3072);
        printf("\n== timing: out of place, GB/s = 4 bytes per element (2 read + 2 written) / time; copy = cudaMemcpyAsync D2D "
               "of the same tensor, same run ==\n");
        printf("%-24s %-9s %-12s %3s | %9s | %7s | %7s | %6s | %s\n", "type", "path", "shape", "dim", "ms", "GB/s", "copy", "ratio",
               "bar");
        for (const TimeRow& t : rows) {
            if (t.dim < 0) {
                printf("%-24s %-9s %-12s %3s | %9.4f | %7.0f | %7.0f | %5.1f%% |\n", t.type.c_str(), t.path.c_str(), t.shape.c_str(), "-",
                       t.ms, t.gbs, t.copy_gbs, 100.0f);
                continue;
            }
            const float ratio = t.gbs / t.copy_gbs;
            const bool below = t.target[0] && ratio < (t.dim == 1 ? 0.80f : 0.70f);
            printf("%-24s %-9s %-12s %3d | %9.4f | %7.0f | %7.0f | %5.1f%% | %s%s\n", t.type.c_str(), t.path.c_str(), t.shape.c_str(),
                   t.dim, t.ms, t.gbs, t.copy_gbs, 100.0f * ratio, t.target, below ? "  BELOW" : "");
        }
        printf("(per-tensor and channel types (int8_e, e4m3fn_e8m0_t0) read the tensor twice: a reduction pass, then the cast;\n"
               " the bars are informational: a BELOW mark is not a failed check)\n");
    }
    return tally.finish();
}

#endif  // ENABLE_BF16
