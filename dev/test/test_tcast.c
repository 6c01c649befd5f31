/*
 * test_tcast.c - the TensorCast datatype model (llmc/numerics/tcast.h, doc/TCAST.md sections 1-4):
 * parsing (every predefined name, codes with prefixes and aliases, every error class), derived
 * values, hand-computed casts with exact bit patterns (MX tiles with saturation, midmax, zero,
 * NaN / Inf and subnormal tiles; round modes on exact ties; float scales with and without zero
 * points; channel / tensor scales; dims; M:N sparsity; stochastic rounding; unscaled casts), and
 * random comparisons against a reference written here from the doc in double arithmetic (frexp,
 * ldexp, floor) and plain float32 operations, independent of the header's integer code.
 * Fixed scales pN (section 2, 4d): parsing and refusals, casts against the same
 * reference with x / 2^N, and q115 (= int16_p-1) against the SF16 build's simulate_q115
 * (llmc/numerics/q115.h) on every float32 of the critical binades and a dense sweep of the rest.
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_tcast.c -lm -o /tmp/test_tcast && /tmp/test_tcast
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "dev/test/test_harness.h"
#include "llmc/numerics/bf16.h"
#include "llmc/numerics/q115.h"
#include "llmc/numerics/tcast.h"

// Bitwise equality, with any NaN equal to any NaN.
static int same(float a, float b) {
    return (isnan(a) && isnan(b)) || tcast_f32_bits(a) == tcast_f32_bits(b);
}

// A whole cast tensor y of x against the reference w, bit for bit: the first 3 differences printed,
// then one check of the count.
static void check_tensor_same(const char* text, int dim, const float* x, const float* y, const float* w, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++)
        if (!same(y[i], w[i]) && bad++ < 3) CHECK(0, "%s dim %d [%d]: %a -> %a, want %a", text, dim, i, x[i], y[i], w[i]);
    CHECK(bad == 0, "%s dim %d: %d differ", text, dim, bad);
}

// Test-local xorshift64* generator (independent of the header's random bits).
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

// Parses text or records a failure (returns 0 then).
static int get_dtype(const char* text, TcastDataType* dt) {
    char err[256];
    int ok = tcast_parse_datatype(text, dt, err, sizeof(err)) == 0;
    CHECK(ok, "parse '%s': %s", text, err);
    return ok;
}

// Casts a rows x cols tensor; returns 0 on success (stats optional).
static int cast(const char* text, const float* x, float* y, int rows, int cols, int dim, uint64_t seed, TcastStats* st) {
    TcastDataType dt;
    char err[256];
    if (!get_dtype(text, &dt)) return -1;
    int rc = tcast_cast_host(&dt, x, y, rows, cols, dim, seed, st, err, sizeof(err));
    CHECK(rc == 0, "cast '%s' %dx%d dim %d: %s", text, rows, cols, dim, err);
    return rc;
}

// Checks y[i] == want[i] bitwise (NaN: any NaN) for i < n.
static void check_bits(const char* what, const float* y, const float* want, int n) {
    for (int i = 0; i < n; i++)
        CHECK(same(y[i], want[i]), "%s [%d]: got %a (0x%08x), want %a (0x%08x)", what, i, y[i], tcast_f32_bits(y[i]), want[i], tcast_f32_bits(want[i]));
}

// ----------------------------------------------------------------------------------------------
// Independent reference (from doc/TCAST.md, in double precision)

// The random bits of section 1.4, restated from the doc's formula.
static uint64_t ref_mix(uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z;
}

static uint32_t ref_u(uint64_t seed, uint64_t index) {
    uint64_t state = ref_mix(seed ^ 0x6A09E667F3BCC909ull);
    return (uint32_t)(ref_mix(state + (index + 1) * 0x9E3779B97F4A7C15ull) >> 32);
}

// A float format (ints as their fixed-point view): section 1.2's definitions.
typedef struct {
    int emin, emax, mbits, mode;  // mode: 0 ieee, 1 fn, 2 fnuz
    double max;
} RefF;

static RefF ref_float(int x, int y, int bias, int mode) {
    RefF f;
    f.mbits = y;
    f.mode = mode;
    f.emin = 1 - bias;
    f.emax = (1 << x) - 1 - bias - (mode == 0 ? 1 : 0);
    f.max = ldexp(2.0 - ldexp(1.0, (mode == 1 ? 1 : 0) - y), f.emax);
    return f;
}

// round_R(t) for t >= 0 (section 1.4)
static double ref_round(double t, int mode, uint32_t u) {
    double lo = floor(t), fr = t - lo;
    switch (mode) {
    case TCAST_ROUND_EVEN: return fr < 0.5 ? lo : fr > 0.5 ? lo + 1 : (fmod(lo, 2.0) == 0.0 ? lo : lo + 1);
    case TCAST_ROUND_NEAREST: return fr < 0.5 ? lo : lo + 1;
    case TCAST_ROUND_ZERO: return lo;
    default: return (double)u < fr * 4294967296.0 ? lo + 1 : lo;
    }
}

// Section 1.3 step 4 on a real v (exact in double here), without the final float32 rounding.
static double ref_cast_real(double v, const RefF* f, int mode, uint32_t u, int* sat) {
    *sat = 0;
    double zero = f->mode == 2 ? 0.0 : copysign(0.0, v);
    if (v == 0) return zero;
    int ex;
    frexp(fabs(v), &ex);
    int e = ex - 1 > f->emin ? ex - 1 : f->emin;
    double q = ldexp(1.0, e - f->mbits);
    double r = ref_round(fabs(v) / q, mode, u) * q;
    if (r > f->max) {
        r = f->max;
        *sat = 1;
    }
    if (r == 0) return zero;
    return copysign(r, v);
}

// Section 1.3 complete, rounded to float32.
static float ref_cast(float x, const RefF* f, int mode, uint32_t u) {
    int sat;
    if (isnan(x)) return NAN;
    if (isinf(x)) return f->mode == 0 ? x : (float)copysign(f->max, x);
    return (float)ref_cast_real(x, f, mode, u, &sat);
}

// Section 4a on one group of n elements (exponent scale with bias sb and X sx bits); returns the
// scale exponent (or 9999 for a NaN group).
static int ref_exp_group(const float* x, float* y, int n, const RefF* f, int sx, int sb, int midmax, int mode, const uint32_t* u) {
    double amax = 0;
    int special = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(x[i])) special = 1;
        else if (fabs(x[i]) > amax) amax = fabs(x[i]);
    }
    int s = -sb;
    if (amax > 0) {
        int ex;
        frexp(amax, &ex);
        s = ex - 1 - f->emax;
        if (midmax && amax / ldexp(1.0, s) > (f->max + ldexp(1.0, f->emax + 1)) / 2) s++;
        if (s < -sb) s = -sb;
    }
    if (special || s > (1 << sx) - 2 - sb) {
        for (int i = 0; i < n; i++) y[i] = NAN;
        return 9999;
    }
    for (int i = 0; i < n; i++) {
        int sat;
        y[i] = (float)(ref_cast_real(ldexp((double)x[i], -s), f, mode, u ? u[i] : 0, &sat) * ldexp(1.0, s));
    }
    return s;
}

// round_R of a float32 y to a (signed) integer (+0 for 0: an integer has no sign)
static double ref_round_int(float y, int mode, uint32_t u) {
    double n = ref_round(fabs((double)y), mode, u);
    return (y < 0 ? -n : n) + 0.0;
}

static double ref_clamp(double n, double lo, double hi, int* sat) {
    if (n < lo) { *sat = 1; return lo; }
    if (n > hi) { *sat = 1; return hi; }
    return n;
}

// Section 4b on one group: int data with maxint m, float scale format S. float32 operations are
// written one per statement into volatiles, so that the compiler cannot contract them.
static void ref_int_group(const float* x, float* y, int n, int m, const RefF* S, int mode, const uint32_t* u) {
    float amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    volatile float d = amax / (float)m;
    float scale = ref_cast(d, S, TCAST_ROUND_EVEN, 0);
    for (int i = 0; i < n; i++) {
        if (scale == 0) {
            y[i] = 0.0f;
            continue;
        }
        volatile float q = x[i] / scale;
        int sat = 0;
        double k = ref_clamp(ref_round_int(q, mode, u ? u[i] : 0), -m, m, &sat);
        volatile float r = (float)k * scale;
        y[i] = r;
    }
}

// Section 4c on one group: uint data with maxint m, float scale S, zero point Z (a float format,
// or an int with maxint zm when zint).
static void ref_uint_group(const float* x, float* y, int n, int m, const RefF* S, const RefF* Z, int zint, int zm, int mode,
                           const uint32_t* u) {
    float tmin = 0, tmax = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] < tmin) tmin = x[i];
        if (x[i] > tmax) tmax = x[i];
    }
    volatile float range = tmax - tmin;
    volatile float d = range / (float)m;
    float scale = ref_cast(d, S, TCAST_ROUND_EVEN, 0);
    for (int i = 0; i < n; i++) {
        int sat = 0;
        if (scale == 0) {
            y[i] = 0.0f;
        } else if (zint) {
            volatile float zq = -tmin / scale;
            double zero = ref_clamp(ref_round_int(zq, TCAST_ROUND_EVEN, 0), -zm, zm, &sat);
            volatile float q = x[i] / scale;
            double k = ref_clamp(ref_round_int(q, mode, u ? u[i] : 0) + zero, 0, m, &sat);
            volatile float r = (float)(k - zero) * scale;
            y[i] = r;
        } else {
            float zero = ref_cast(-tmin, Z, TCAST_ROUND_EVEN, 0);
            volatile float sum = x[i] + zero;
            volatile float q = sum / scale;
            double k = ref_clamp(ref_round_int(q, mode, u ? u[i] : 0), 0, m, &sat);
            volatile float p = (float)k * scale;
            volatile float r = p - zero;
            y[i] = r;
        }
    }
}

// Random float32: mostly normal values with exponents in [elo, ehi], some with few significant
// bits (exact ties of many grids), some zeros and float32 subnormals.
static float rand_f32(int elo, int ehi) {
    uint64_t r = rng_next();
    uint32_t sign = (uint32_t)(r & 1) << 31;
    int kind = (int)((r >> 1) % 16);
    int e = elo + (int)((r >> 8) % (uint64_t)(ehi - elo + 1));
    if (kind == 0) return tcast_f32_from_bits(sign);
    if (kind == 1) return tcast_f32_from_bits(sign | (uint32_t)((r >> 20) & 0x7FFFFF) | 1u);  // subnormal
    if (kind < 6) {                                                          // few bits: (odd < 64) * 2^(e - 6)
        double v = ldexp((double)(((r >> 20) % 64) | 1), e - 6);
        return sign ? -(float)v : (float)v;
    }
    if (e < -126) e = -126;
    return tcast_f32_from_bits(sign | (uint32_t)(e + 127) << 23 | (uint32_t)((r >> 32) & 0x7FFFFF));
}

// ----------------------------------------------------------------------------------------------
// Parsing: predefined names

typedef struct {
    const char *name, *number, *scale, *zero;
    int tile;
} PredefCase;

// Section 3's table restated, with the canonical codes of section 1.1.
static const PredefCase PREDEF[] = {
    {"float32", "e8m23b127", "none", "none", -1},    {"bfloat16", "e8m7b127", "none", "none", -1},
    {"float16", "e5m10b15", "none", "none", -1},     {"e5m2", "e5m2b15", "none", "none", -1},
    {"e4m3fn", "e4m3b7fn", "none", "none", -1},      {"e5m2fnuz", "e5m2b16fnuz", "none", "none", -1},
    {"e4m3fnuz", "e4m3b8fnuz", "none", "none", -1},  {"e3m2fnuz", "e3m2b3fnuz", "none", "none", -1},
    {"e2m3fnuz", "e2m3b1fnuz", "none", "none", -1},  {"e2m1fnuz", "e2m1b1fnuz", "none", "none", -1},
    {"uint16_ff", "uint16", "e5m10b15", "e5m10b15", -1}, {"uint16_bb", "uint16", "e8m7b127", "e8m7b127", -1},
    {"int16_f", "int16", "e5m10b15", "none", -1},    {"int16_b", "int16", "e8m7b127", "none", -1},
    {"int16_e", "int16", "e8m0b127", "none", -1},    {"q115", "int16", "p-1", "none", -1},
    {"uint8_ff", "uint8", "e5m10b15", "e5m10b15", -1}, {"uint8_bb", "uint8", "e8m7b127", "e8m7b127", -1},
    {"uint8_fi", "uint8", "e5m10b15", "int8", -1},   {"uint8_bi", "uint8", "e8m7b127", "int8", -1},
    {"int8_f", "int8", "e5m10b15", "none", -1},      {"int8_b", "int8", "e8m7b127", "none", -1},
    {"int8_e", "int8", "e8m0b127", "none", -1},
    {"e5m2_e", "e5m2b15", "e8m0b127", "none", -1},   {"e5m2z_e", "e5m2b16fnuz", "e8m0b127", "none", -1},
    {"e4m3_e", "e4m3b7fn", "e8m0b127", "none", -1},  {"e4m3z_e", "e4m3b8fnuz", "e8m0b127", "none", -1},
    {"e3m2_e", "e3m2b3fnuz", "e8m0b127", "none", -1}, {"e2m3_e", "e2m3b1fnuz", "e8m0b127", "none", -1},
    {"mxfp8e5", "e5m2b15", "e8m0b127", "none", 32},  {"mxfp8e4", "e4m3b7fn", "e8m0b127", "none", 32},
    {"mxfp6e3", "e3m2b3fnuz", "e8m0b127", "none", 32}, {"mxfp6e2", "e2m3b1fnuz", "e8m0b127", "none", 32},
    {"mxfp4e2", "e2m1b1fnuz", "e8m0b127", "none", 32}, {"mxint8", "int8", "e8m0b127", "none", 32},
    {"mxint4", "int4", "e8m0b127", "none", 32},      {"bfp16", "int8", "e8m0b127", "none", 8},
    {"uint8_ff32", "uint8", "e5m10b15", "e5m10b15", 32}, {"uint8_bb32", "uint8", "e8m7b127", "e8m7b127", 32},
    {"uint8_fi32", "uint8", "e5m10b15", "int8", 32}, {"uint8_bi32", "uint8", "e8m7b127", "int8", 32},
    {"uint4_ff32", "uint4", "e5m10b15", "e5m10b15", 32}, {"uint4_bb32", "uint4", "e8m7b127", "e8m7b127", 32},
    {"uint4_fi32", "uint4", "e5m10b15", "int8", 32}, {"uint4_bi32", "uint4", "e8m7b127", "int8", 32},
    {"int8_f32", "int8", "e5m10b15", "none", 32},    {"int8_b32", "int8", "e8m7b127", "none", 32},
    {"int4_f32", "int4", "e5m10b15", "none", 32},    {"int4_b32", "int4", "e8m7b127", "none", 32},
};
#define NPREDEF ((int)(sizeof(PREDEF) / sizeof(PREDEF[0])))

static void check_dtype_parts(const char* text, const TcastDataType* dt, const PredefCase* c) {
    char num[64], sc[64] = "none", zero[64] = "none";
    tcast_number_code(&dt->number, num, sizeof(num));
    if (dt->has_scale) tcast_number_code(&dt->scale.scale, sc, sizeof(sc));
    if (dt->fixed) snprintf(sc, sizeof(sc), "p%d", dt->fixed_exp);  // a fixed scale pN
    CHECK(!(dt->fixed && dt->has_scale), "%s: a fixed scale and a scale spec", text);
    if (dt->has_scale && dt->scale.has_zero) tcast_number_code(&dt->scale.zero, zero, sizeof(zero));
    CHECK(strcmp(num, c->number) == 0, "%s: number %s, want %s", text, num, c->number);
    CHECK(strcmp(sc, c->scale) == 0, "%s: scale %s, want %s", text, sc, c->scale);
    CHECK(strcmp(zero, c->zero) == 0, "%s: zero %s, want %s", text, zero, c->zero);
    CHECK((dt->has_scale ? dt->scale.tile : -1) == c->tile, "%s: tile %d, want %d", text, dt->has_scale ? dt->scale.tile : -1, c->tile);
}

static void test_predefined(void) {
    const char *name, *num, *sc;
    int count = tcast_predefined(-1, &name, &num, &sc);
    CHECK(count == NPREDEF, "predefined count %d, want %d", count, NPREDEF);
    for (int i = 0; i < NPREDEF; i++) {
        TcastDataType dt;
        if (!get_dtype(PREDEF[i].name, &dt)) continue;
        check_dtype_parts(PREDEF[i].name, &dt, &PREDEF[i]);
        CHECK(strcmp(dt.name, PREDEF[i].name) == 0, "%s: name %s", PREDEF[i].name, dt.name);
        CHECK(dt.round == TCAST_ROUND_EVEN && dt.scale_mode == TCAST_SCALE_MAX && dt.sparse_n == 0, "%s: defaults", PREDEF[i].name);
        CHECK(!dt.has_scale || (dt.scale.dim == -1 && !dt.scale.dim_given), "%s: dim", PREDEF[i].name);
        // the canonical text re-parses to the same type
        char canon[160];
        TcastDataType dt2;
        tcast_datatype_describe(&dt, canon, sizeof(canon));
        if (get_dtype(canon, &dt2)) check_dtype_parts(canon, &dt2, &PREDEF[i]);
    }
    for (int i = 0; tcast_predefined(i, &name, &num, &sc) == 0; i++) {
        int listed = 0;
        for (int j = 0; j < NPREDEF; j++) listed |= strcmp(name, PREDEF[j].name) == 0;
        CHECK(listed, "header predefines %s, which section 3 does not list", name);
    }
    // names in any case, printed canonically; modifiers
    TcastDataType dt;
    if (get_dtype("MXFP4E2@Nearest@MIDMAX@2:4", &dt)) {
        CHECK(strcmp(dt.name, "mxfp4e2") == 0, "name %s", dt.name);
        CHECK(dt.round == TCAST_ROUND_NEAREST && dt.scale_mode == TCAST_SCALE_MIDMAX && dt.sparse_m == 2 && dt.sparse_n == 4,
              "modifiers of MXFP4E2@Nearest@MIDMAX@2:4");
    }
    if (get_dtype("e4m3fn_e8m0@zero@stochastic@even", &dt)) CHECK(dt.round == TCAST_ROUND_EVEN, "the last round modifier wins");
    char buf[160];
    if (get_dtype("mxfp8e4@stochastic@midmax@2:4", &dt)) {
        tcast_datatype_describe(&dt, buf, sizeof(buf));
        CHECK(strcmp(buf, "e4m3b7fn_e8m0b127_t32@stochastic@midmax@2:4") == 0, "describe: %s", buf);
    }
    if (get_dtype("uint4_fi32", &dt)) {
        tcast_datatype_describe(&dt, buf, sizeof(buf));
        CHECK(strcmp(buf, "uint4_e5m10b15_int8_t32@even@max") == 0, "describe: %s", buf);
    }
}

// Codes as numbers and data types: prefixes, aliases, custom scales and dims.
static void test_codes(void) {
    static const PredefCase cases[] = {
        {"torch.float8_e4m3fn", "e4m3b7fn", "none", "none", -1},
        {"float8_e5m2", "e5m2b15", "none", "none", -1},
        {"torch.bfloat16", "e8m7b127", "none", "none", -1},
        {"Float8_E5M2FNUZ", "e5m2b16fnuz", "none", "none", -1},
        {"e4m3b8fnuz", "e4m3b8fnuz", "none", "none", -1},
        {"e4m3b7fnuz", "e4m3b7fnuz", "none", "none", -1},
        {"e8m23", "e8m23b127", "none", "none", -1},
        {"e5m6b10fn_e6m0_t8", "e5m6b10fn", "e6m0b31", "none", 8},
        {"float8_e4m3fn_e8m0_t32", "e4m3b7fn", "e8m0b127", "none", 32},
        {"int6_bfloat16_t64", "int6", "e8m7b127", "none", 64},
        {"uint4_float16_int8_t0", "uint4", "e5m10b15", "int8", 0},
        {"uint8_e4m3fn_e4m3fn_t16", "uint8", "e4m3b7fn", "e4m3b7fn", 16},
        {"int8_e8m0_t1024", "int8", "e8m0b127", "none", 1024},
        {"int8_e8m0_t2", "int8", "e8m0b127", "none", 2},
        {"e2m1fnuz_e4m0b3_t32", "e2m1b1fnuz", "e4m0b3", "none", 32},
        {"e5m2_e8m0b120_t32", "e5m2b15", "e8m0b120", "none", 32},
        {"e2m0fnuz", "e2m0b1fnuz", "none", "none", -1},
        {"e1m2fn", "e1m2b0fn", "none", "none", -1},
        {"int16_p-1", "int16", "p-1", "none", -1},
        {"int8_p-3", "int8", "p-3", "none", -1},
        {"E4M3FN_P+2", "e4m3b7fn", "p2", "none", -1},
        {"float8_e5m2_p0", "e5m2b15", "p0", "none", -1},
        {"e2m1fnuz_p127", "e2m1b1fnuz", "p127", "none", -1},
        {"int4_p-127", "int4", "p-127", "none", -1},
        {"int2_p007", "int2", "p7", "none", -1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        TcastDataType dt;
        if (!get_dtype(cases[i].name, &dt)) continue;
        check_dtype_parts(cases[i].name, &dt, &cases[i]);
        CHECK(strcmp(dt.name, cases[i].name) == 0, "name '%s' of '%s'", dt.name, cases[i].name);
    }
    // aliases give identical specs
    static const char* const alias[][2] = {{"e4m3fnuz", "e4m3b8fnuz"}, {"e5m2fnuz", "e5m2b16fnuz"}, {"float32", "e8m23"},
                                           {"bfloat16", "e8m7"},       {"float16", "e5m10"},        {"torch.float8_e4m3fnuz", "E4M3B8FNUZ"},
                                           {"torch.int8", "int8"},     {"e4m3fn", "e4m3b7fn"},      {"e8m0", "e8m0b127"}};
    for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]); i++) {
        TcastNumberSpec a, b;
        char err[256];
        int ok = tcast_parse_number(alias[i][0], &a, err, sizeof(err)) == 0 && tcast_parse_number(alias[i][1], &b, err, sizeof(err)) == 0;
        CHECK(ok && memcmp(&a, &b, sizeof(a)) == 0, "%s == %s (%s)", alias[i][0], alias[i][1], ok ? "differ" : err);
    }
    TcastDataType dt;
    if (get_dtype("e4m3fn_e8m0_t0d-2", &dt)) CHECK(dt.scale.tile == 0 && dt.scale.dim == -2 && dt.scale.dim_given, "t0d-2");
    if (get_dtype("e4m3fn_e8m0_t8d1", &dt)) CHECK(dt.scale.tile == 8 && dt.scale.dim == 1 && dt.scale.dim_given, "t8d1");
    if (get_dtype("e4m3fn_e8m0", &dt)) CHECK(dt.scale.tile == -1 && dt.scale.dim == -1 && !dt.scale.dim_given, "tensor scale");
    if (get_dtype("e4m3fn_e8m0_t0", &dt)) CHECK(dt.scale.tile == 0, "channel scale");
}

// ----------------------------------------------------------------------------------------------
// Derived values (section 1.2)

typedef struct {
    const char* code;
    int kind, bits, emax, emin;
    double max, smallest_normal, eps, midmax;
    int maxint, minint;
    const char* canon;
} InfoCase;

static void test_derived(void) {
    static const InfoCase cases[] = {
        {"e4m3fn", TCAST_KIND_FLOAT, 8, 8, -6, 448, 0x1p-6, 0x1p-3, 480, 0, 0, "e4m3b7fn"},
        {"e5m2", TCAST_KIND_FLOAT, 8, 15, -14, 57344, 0x1p-14, 0x1p-2, 61440, 0, 0, "e5m2b15"},
        {"e4m3fnuz", TCAST_KIND_FLOAT, 8, 7, -7, 240, 0x1p-7, 0x1p-3, 248, 0, 0, "e4m3b8fnuz"},
        {"e5m2fnuz", TCAST_KIND_FLOAT, 8, 15, -15, 57344, 0x1p-15, 0x1p-2, 61440, 0, 0, "e5m2b16fnuz"},
        {"e2m1fnuz", TCAST_KIND_FLOAT, 4, 2, 0, 6, 1, 0.5, 7, 0, 0, "e2m1b1fnuz"},
        {"e2m3fnuz", TCAST_KIND_FLOAT, 6, 2, 0, 7.5, 1, 0.125, 7.75, 0, 0, "e2m3b1fnuz"},
        {"e3m2fnuz", TCAST_KIND_FLOAT, 6, 4, -2, 28, 0.25, 0.25, 30, 0, 0, "e3m2b3fnuz"},
        {"bfloat16", TCAST_KIND_FLOAT, 16, 127, -126, 0x1.FEp127, 0x1p-126, 0x1p-7, 0x1.FFp127, 0, 0, "e8m7b127"},
        {"float16", TCAST_KIND_FLOAT, 16, 15, -14, 65504, 0x1p-14, 0x1p-10, 65520, 0, 0, "e5m10b15"},
        {"float32", TCAST_KIND_FLOAT, 32, 127, -126, FLT_MAX, FLT_MIN, FLT_EPSILON, 0x1.FFFFFFp127, 0, 0, "e8m23b127"},
        {"e1m2fn", TCAST_KIND_FLOAT, 4, 1, 1, 3, 2, 0.25, 3.5, 0, 0, "e1m2b0fn"},
        {"e8m22b0", TCAST_KIND_FLOAT, 31, 254, 1, 0x1.FFFFFCp254, 2, 0x1p-22, 0x1.FFFFFEp254, 0, 0, "e8m22b0"},
        {"int8", TCAST_KIND_INT, 8, 0, 0, 127.0 / 64, 1, 0x1p-6, 2 - 0x1p-7, 127, -127, "int8"},
        {"int4", TCAST_KIND_INT, 4, 0, 0, 1.75, 1, 0.25, 1.875, 7, -7, "int4"},
        {"int2", TCAST_KIND_INT, 2, 0, 0, 1, 1, 1, 1.5, 1, -1, "int2"},
        {"uint8", TCAST_KIND_UINT, 8, 0, 0, 0, 0, 0, 0, 255, 0, "uint8"},
        {"uint16", TCAST_KIND_UINT, 16, 0, 0, 0, 0, 0, 0, 65535, 0, "uint16"},
        {"e8m0", TCAST_KIND_EXPONENT, 8, 127, -127, 0, 0, 0, 0, 0, 0, "e8m0b127"},
        {"e5m0b3", TCAST_KIND_EXPONENT, 5, 27, -3, 0, 0, 0, 0, 0, 0, "e5m0b3"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const InfoCase* c = &cases[i];
        TcastNumberSpec s;
        char err[256], code[64];
        if (!CHECK(tcast_parse_number(c->code, &s, err, sizeof(err)) == 0, "%s: %s", c->code, err)) continue;
        CHECK((int)s.kind == c->kind && s.bits == c->bits, "%s: kind %d bits %d", c->code, s.kind, s.bits);
        CHECK(strcmp(tcast_number_code(&s, code, sizeof(code)), c->canon) == 0, "%s: code %s, want %s", c->code, code, c->canon);
        if (c->kind != TCAST_KIND_UINT) CHECK(s.emax == c->emax && s.emin == c->emin, "%s: emax %d emin %d", c->code, s.emax, s.emin);
        if (c->kind == TCAST_KIND_FLOAT || c->kind == TCAST_KIND_INT)
            CHECK(s.max == c->max && s.smallest_normal == c->smallest_normal && s.eps == c->eps && s.midmax == c->midmax,
                  "%s: max %.17g sn %.17g eps %.17g midmax %.17g", c->code, s.max, s.smallest_normal, s.eps, s.midmax);
        if (c->kind == TCAST_KIND_INT || c->kind == TCAST_KIND_UINT)
            CHECK(s.maxint == c->maxint && s.minint == c->minint, "%s: maxint %d minint %d", c->code, s.maxint, s.minint);
    }
}

// ----------------------------------------------------------------------------------------------
// Errors: each class, with a message naming the offending code

typedef struct {
    int what;  // 0 number, 1 scale, 2 data type
    const char* text;
    const char* sub1;  // substrings the message must contain
    const char* sub2;
} ErrCase;

static void test_errors(void) {
    static const ErrCase cases[] = {
        {0, "foo", "'foo'", "unknown"},            {0, "e9m2", "'e9m2'", "X=9"},          {0, "e0m3", "'e0m3'", "X=0"},
        {0, "e4m24", "'e4m24'", "Y=24"},           {0, "e3m0", "'e3m0'", "4..8"},         {0, "e9m0", "'e9m0'", "1..8"},
        {0, "e4m0fn", "'e4m0fn'", "Y=0"},          {0, "e1m3", "'e1m3'", "emax"},         {0, "e1m7", "'e1m7'", "emax"},
        {0, "int1", "'int1'", "2..16"},            {0, "int17", "'int17'", "2..16"},      {0, "uint17", "'uint17'", "2..16"},
        {0, "int", "'int'", "width"},              {0, "e4m3b", "'e4m3b'", "bias"},       {0, "e4m3fnb7", "'e4m3fnb7'", "unexpected"},
        {0, "e4m3fnu", "'e4m3fnu'", "unexpected"}, {0, "e4m3b2000", "'e4m3b2000'", "bias"}, {0, "torch.torch.e4m3fn", "'torch.torch.e4m3fn'", "unknown"},
        {0, "float8_float8_e4m3fn", "float8_float8_e4m3fn", "unknown"},                 {0, "", "''", "unknown"},
        {0, "e4m3 ", "'e4m3 '", "unexpected"},     {0, "half", "'half'", "unknown"},
        {1, "e8m0_t3", "'e8m0_t3'", "power of two"},   {1, "e8m0_t1", "'e8m0_t1'", "power of two"},
        {1, "e8m0_t2048", "'e8m0_t2048'", "power of two"}, {1, "e8m0_t48", "'e8m0_t48'", "power of two"},
        {1, "e8m0_tx", "'tx'", "tX[dY]"},          {1, "e8m0_t32d", "'t32d'", "tX[dY]"},  {1, "e8m0_t32d2", "'e8m0_t32d2'", "dimension 2"},
        {1, "e8m0_t32_t32", "'e8m0_t32_t32'", "unexpected token"}, {1, "t32", "'t32'", "missing"},
        {1, "int8_t32", "'int8'", "exponent type"},    {1, "e8m0_int8", "'e8m0'", "float scale"},
        {1, "float16_uint8", "'uint8'", "zero point"}, {1, "e8m0_", "'e8m0_'", "empty"},
        {1, "float16_int8_int8_t32", "'int8'", "unexpected token"},
        {2, "int8", "'int8'", "unscaled"},             {2, "uint8", "'uint8'", "unscaled"},
        {2, "int4@stochastic", "'int4@stochastic'", "unscaled"},
        {2, "e8m0", "'e8m0'", "only a scale"},         {2, "e8m0_e8m0_t32", "'e8m0_e8m0_t32'", "only a scale"},
        {2, "e4m3fn_bfloat16", "'e4m3fn_bfloat16'", "exponent scale"},
        {2, "e2m1fnuz_e5m10_t32", "'e2m1fnuz_e5m10_t32'", "exponent scale"},
        {2, "e4m3fn_float16_int8", "'e4m3fn_float16_int8'", "exponent scale"},
        {2, "int8_float16_float16", "'int8_float16_float16'", "no zero point"},
        {2, "uint8_e8m0_t32", "'uint8_e8m0_t32'", "float scale"},
        {2, "uint8_float16_t32", "'uint8_float16_t32'", "needs a zero point"},
        {2, "uint8_float16_e8m0", "'e8m0'", "zero point"},
        {2, "e9m2_e8m0_t32", "'e9m2'", "X=9"},         {2, "e4m3fn_e9m0", "'e9m0'", "X=9"},
        {2, "e4m3fn_e8m0_t3", "'e4m3fn_e8m0_t3'", "power of two"},
        {2, "mxfp8e4@", "'mxfp8e4@'", "empty modifier"}, {2, "mxfp8e4@bogus", "'@bogus'", "unknown modifier"},
        {2, "mxfp8e4@2:", "'@2:'", "unknown modifier"}, {2, "mxfp8e4@3:2", "3:2", "M < N"},
        {2, "mxfp8e4@4:4", "4:4", "M < N"},           {2, "mxfp8e4@0:4", "0:4", "1 <= M"},
        {2, "mxfp8e4@2:64", "2:64", "<= 32"},         {2, "@even", "'@even'", "no number code"},
        {2, "", "''", "no number code"},              {2, "mxfp8e4_t32", "'mxfp8e4'", "unknown"},
        {2, "e4m3fn_", "'e4m3fn_'", "empty"},         {2, "_e8m0", "''", "unknown"},
        {2, "mxfp8e4 ", "'mxfp8e4 '", "unknown"},
        // fixed scales pN (section 2)
        {2, "int16_p-1_t32", "'p-1_t32'", "no tile token"},   {2, "q115_t32", "'q115_t32'", "unknown"},
        {2, "int16_p-1_t32d0", "'t32d0'", "no tile token"},   {2, "int16_px", "'px'", "pN"},
        {2, "int16_p", "'p'", "pN"},                          {2, "int16_p-", "'p-'", "pN"},
        {2, "int16_p1.5", "'p1.5'", "pN"},                    {2, "int16_p128", "N=128", "-127..127"},
        {2, "int16_p-128", "N=-128", "-127..127"},            {2, "int16_p99999", "N=99999", "-127..127"},
        {2, "int16_p-1_e8m0", "'e8m0'", "no zero point"},     {2, "uint8_p1", "'uint8_p1'", "zero point"},
        {2, "e8m0_p3", "'e8m0_p3'", "only a scale"},          {2, "int8", "'int8'", "int8_pN"},
        {2, "e4m3fn_e8m0_p3", "'p3'", "unknown"},             {2, "int16_p-1@bogus", "'@bogus'", "unknown modifier"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const ErrCase* c = &cases[i];
        char err[256] = "";
        int rc;
        if (c->what == 0) {
            TcastNumberSpec s;
            rc = tcast_parse_number(c->text, &s, err, sizeof(err));
        } else if (c->what == 1) {
            TcastScaleSpec s;
            rc = tcast_parse_scale(c->text, &s, err, sizeof(err));
        } else {
            TcastDataType d;
            rc = tcast_parse_datatype(c->text, &d, err, sizeof(err));
        }
        CHECK(rc == -1 && strstr(err, c->sub1) != NULL && strstr(err, c->sub2) != NULL, "'%s' (kind %d): rc %d, message '%s'",
              c->text, c->what, rc, err);
    }
    // a NULL error buffer is allowed
    TcastNumberSpec s;
    CHECK(tcast_parse_number("e9m9", &s, NULL, 0) == -1, "NULL err");

    // cast-time errors
    typedef struct {
        const char* dtype;
        int rows, cols, dim;
        const char* sub;
    } CastErr;
    static const CastErr ce[] = {
        {"mxfp8e4", 4, 48, -1, "tile 32"},        {"mxfp8e4", 48, 4, 0, "tile 32"},    {"bfp16", 12, 4, -2, "tile 8"},
        {"int8_f32", 2, 48, 1, "tile 32"},        {"e4m3fn@2:4", 3, 6, -1, "N=4"},     {"mxfp4e2@2:4", 6, 3, 0, "does not divide"},
        {"mxfp8e4", 4, 64, 2, "dim 2"},           {"mxfp8e4", 4, 64, -3, "dim -3"},    {"e4m3fn_e8m0_t0d0", 4, 64, -1, "d0"},
        {"e4m3fn_e8m0_t8d-1", 8, 8, 0, "d-1"},    {"mxfp8e4", 0, 32, -1, "shape"},
    };
    float* x = (float*)calloc(48 * 64, sizeof(float));
    float* y = (float*)calloc(48 * 64, sizeof(float));
    for (size_t i = 0; i < sizeof(ce) / sizeof(ce[0]); i++) {
        TcastDataType dt;
        char err[256] = "";
        if (!get_dtype(ce[i].dtype, &dt)) continue;
        int rc = tcast_cast_host(&dt, x, y, ce[i].rows, ce[i].cols, ce[i].dim, 0, NULL, err, sizeof(err));
        CHECK(rc == -1 && strstr(err, ce[i].sub) && strstr(err, dt.name), "cast %s %dx%d dim %d: rc %d '%s'", ce[i].dtype, ce[i].rows,
              ce[i].cols, ce[i].dim, rc, err);
    }
    // an explicit dY that agrees with dim is fine (1 = -1, -2 = 0)
    TcastDataType dt;
    char err[256] = "";
    if (get_dtype("e4m3fn_e8m0_t0d1", &dt)) CHECK(tcast_cast_host(&dt, x, y, 4, 8, -1, 0, NULL, err, sizeof(err)) == 0, "%s", err);
    if (get_dtype("e4m3fn_e8m0_t0d-2", &dt)) CHECK(tcast_cast_host(&dt, x, y, 4, 8, 0, 0, NULL, err, sizeof(err)) == 0, "%s", err);
    free(x);
    free(y);
}

// ----------------------------------------------------------------------------------------------
// Hand-computed casts

// mxfp8e4 (E4M3FN elements, E8M0 scale, tiles of 32): one tile per row of a 7 x 32 tensor.
static void test_mxfp8e4_tiles(void) {
    enum { R = 7, C = 32 };
    static float x[R * C], y[R * C], want[R * C];
    for (int i = 0; i < R * C; i++) x[i] = want[i] = 0.5f;  // filler; overwritten per row where needed
    // row 0: amax 3 -> s = 1 - 8 = -7, y = x * 128 on the E4M3 grid
    float r0[] = {3.0f, 2.9f, -0.01f, 1e-3f, 1e-5f, 3e-6f, -3e-6f, 0.0f, -0.0f};
    float w0[] = {3.0f, 3.0f, -0.009765625f, 0.0009765625f, 0x1p-16f, 0.0f, -0.0f, 0.0f, -0.0f};
    // 2.9 * 128 = 371.2 -> quantum 32 -> 384; -1.28 -> quantum 1/8 -> -1.25; 0.128 -> 1/8;
    // 1e-5 * 128 = 0.00128: subnormal quantum 2^-9, t = 0.655 -> 2^-9, times 2^-7; 3e-6 -> 0 (sign kept)
    memcpy(x, r0, sizeof(r0));
    memcpy(want, w0, sizeof(w0));
    // row 1: saturation: amax 500/128 -> s = -7; 500 -> 512 > 448: saturates to 448 (3.5);
    // 465 -> 480 > 448 saturates; 460 -> 448 (not saturated); 464 is a tie -> 448 (even)
    float r1[] = {500.0f / 128, -465.0f / 128, 460.0f / 128, 464.0f / 128};
    float w1[] = {3.5f, -3.5f, 3.5f, 3.5f};
    memcpy(x + C, r1, sizeof(r1));
    memcpy(want + C, w1, sizeof(w1));
    // row 2: all zeros (s = -127), signs kept by E4M3FN
    for (int c = 0; c < C; c++) x[2 * C + c] = want[2 * C + c] = (c & 1) ? -0.0f : 0.0f;
    // rows 3, 4: a NaN, an Inf in the tile -> every output NaN
    x[3 * C + 5] = NAN;
    x[4 * C + 31] = -INFINITY;
    for (int c = 0; c < C; c++) want[3 * C + c] = want[4 * C + c] = NAN;
    // row 5: float32 subnormal inputs: amax 2^-140 -> s = -148, raised to -127 -> y = x * 2^127 <
    // 2^-12: all flush to zero (E4M3FN subnormal quantum 2^-9), signs kept
    for (int c = 0; c < C; c++) {
        x[5 * C + c] = tcast_f32_from_bits((uint32_t)(c + 1) << 4 | ((c & 1) ? 0x80000000u : 0u));
        want[5 * C + c] = (c & 1) ? -0.0f : 0.0f;
    }
    x[5 * C] = tcast_f32_from_bits(0x200);  // 2^-140
    // row 6: FLT_MAX: s = 127 - 8 = 119, y = 511.99997 -> 512 > 448: saturates to 448 * 2^119
    x[6 * C] = FLT_MAX;
    want[6 * C] = 0x1.Cp127f;
    for (int c = 1; c < C; c++) want[6 * C + c] = 0.0f;  // 0.5 / 2^119 is far below 2^-9
    TcastStats st;
    memset(&st, 0, sizeof(st));
    if (cast("mxfp8e4", x, y, R, C, -1, 0, &st) == 0) check_bits("mxfp8e4 tiles", y, want, R * C);
    CHECK(st.values == R * C, "values %lld", st.values);
    CHECK(st.saturated == 3, "saturated %lld (500, -465, FLT_MAX)", st.saturated);
    // flushed: 3e-6, -3e-6 (row 0), the 32 subnormals (row 5), the 31 halves of row 6
    CHECK(st.flushed == 2 + 32 + 31, "flushed %lld", st.flushed);
    CHECK(st.hist[tcast_hist_bin(-7)] == 2 && st.hist[tcast_hist_bin(-127)] == 2 && st.hist[tcast_hist_bin(119)] == 1,
          "histogram -7: %lld, -127: %lld, 119: %lld", st.hist[tcast_hist_bin(-7)], st.hist[tcast_hist_bin(-127)],
          st.hist[tcast_hist_bin(119)]);
    long long total = 0;
    for (int b = 0; b < TCAST_HIST_BINS; b++) total += st.hist[b];
    CHECK(total == 5, "histogram entries %lld (NaN / Inf tiles add none)", total);

    // @midmax: amax 500/128 gives 500 > 480 = midmax -> s = -6: 250 -> 256 -> 4.0, not saturated;
    // amax 470/128: 470 <= 480 keeps s = -7 and saturates to 3.5
    float xm[2 * C], ym[2 * C];
    for (int i = 0; i < 2 * C; i++) xm[i] = 0.0f;
    xm[0] = 500.0f / 128;
    xm[C] = 470.0f / 128;
    memset(&st, 0, sizeof(st));
    if (cast("mxfp8e4@midmax", xm, ym, 2, C, -1, 0, &st) == 0) {
        CHECK(ym[0] == 4.0f && ym[C] == 3.5f, "midmax: %a %a", ym[0], ym[C]);
        CHECK(st.saturated == 1 && st.hist[tcast_hist_bin(-6)] == 1 && st.hist[tcast_hist_bin(-7)] == 1, "midmax stats");
    }
    // @midmax with FLT_MAX: s = 120, y = 255.99998 -> 256, times 2^120 = 2^128: Inf after the final
    // float32 rounding (section 4a)
    xm[0] = FLT_MAX;
    if (cast("mxfp8e4@midmax", xm, ym, 2, C, -1, 0, NULL) == 0) CHECK(tcast_f32_bits(ym[0]) == 0x7F800000u, "midmax FLT_MAX: %a", ym[0]);

    // E5M2 elements keep float32 subnormals: amax 2^-140 -> s = -127, y = x * 2^127 on the E5M2
    // subnormal grid 2^-16 = 64 * 2^-22: 2^-140 exact; 48 ulps -> t = 0.75 -> 64; 32 ulps: tie -> 0;
    // 96 ulps -> t = 1.5 -> 128 (even); in float32 subnormal bits
    float xs[C], ys[C], ws[C];
    for (int c = 0; c < C; c++) xs[c] = ws[c] = 0.0f;
    uint32_t in[] = {0x200, 48, 32, 96, 0x80000000u | 48};
    uint32_t out[] = {0x200, 64, 0, 128, 0x80000000u | 64};
    for (int i = 0; i < 5; i++) {
        xs[i] = tcast_f32_from_bits(in[i]);
        ws[i] = tcast_f32_from_bits(out[i]);
    }
    if (cast("mxfp8e5", xs, ys, 1, C, -1, 0, NULL) == 0) check_bits("mxfp8e5 subnormals", ys, ws, C);

    // exponent-scale overflow: e5m0 scale (bias 15, emax 15): amax 2^30 -> s = 22 > 15: NaN group
    float xo[8] = {0x1p30f, 1, 2, 3, 0, 0, 0, 0}, yo[8];
    memset(&st, 0, sizeof(st));
    if (cast("e4m3fn_e5m0_t8", xo, yo, 1, 8, -1, 0, &st) == 0) {
        for (int i = 0; i < 8; i++) CHECK(isnan(yo[i]), "e5m0 overflow [%d] = %a", i, yo[i]);
        CHECK(st.hist[TCAST_HIST_OVER] == 1 && st.saturated == 0 && st.flushed == 0, "overflow stats");
    }
}

// Round modes on exact ties (section 1.4), unscaled E2M1 (fnuz) and MXFP4 (s = 0 via amax 5).
static void test_round_modes(void) {
    // grid 0, .5, 1, 1.5, 2, 3, 4, 6: ties 0.25 (0 | .5), 0.75 (.5 | 1), 2.5 (2 | 3), 5 (4 | 6), 3.5 (3 | 4)
    float x[8] = {0.25f, -0.25f, 0.75f, 2.5f, -2.5f, 5.0f, 3.5f, 7.0f};
    float want[3][8] = {
        {0.0f, 0.0f, 1.0f, 2.0f, -2.0f, 4.0f, 4.0f, 6.0f},    // even (fnuz: -0.25 -> +0)
        {0.5f, -0.5f, 1.0f, 3.0f, -3.0f, 6.0f, 4.0f, 6.0f},   // nearest: away from zero
        {0.0f, 0.0f, 0.5f, 2.0f, -2.0f, 4.0f, 3.0f, 6.0f},    // zero: truncation (7 saturates to 6 anyway)
    };
    static const char* const mods[3] = {"even", "nearest", "zero"};
    for (int m = 0; m < 3; m++) {
        char text[64];
        float y[8];
        snprintf(text, sizeof(text), "e2m1fnuz@%s", mods[m]);
        if (cast(text, x, y, 1, 8, -1, 0, NULL) == 0) check_bits(text, y, want[m], 8);
    }
    // the same ties inside an MXFP4 tile whose amax (5) makes s = 2 - 2 = 0
    float xt[32], yt[32], wt[32];
    for (int m = 0; m < 3; m++) {
        char text[64];
        for (int i = 0; i < 32; i++) xt[i] = wt[i] = 0.0f;
        memcpy(xt, x, 7 * sizeof(float));
        memcpy(wt, want[m], 7 * sizeof(float));
        snprintf(text, sizeof(text), "mxfp4e2@%s", mods[m]);
        if (cast(text, xt, yt, 1, 32, -1, 0, NULL) == 0) check_bits(text, yt, wt, 32);
    }
    // stochastic: up exactly when u(seed, index) < f * 2^32 (f = 1/2 for the ties)
    const uint64_t seed = 12345678901234567890ull;
    float y[8];
    if (cast("e2m1fnuz@stochastic", x, y, 1, 8, -1, seed, NULL) == 0) {
        for (int i = 0; i < 7; i++) {
            float lo = want[2][i], hi = want[1][i];
            float w = ref_u(seed, (uint64_t)i) < 0x80000000u ? hi : lo;
            CHECK(same(y[i], w), "stochastic tie [%d]: %a, want %a", i, y[i], w);
        }
    }
    // the random bits are the doc's formula
    for (uint64_t i = 0; i < 1000; i += 37)
        CHECK(tcast_random_bits(seed ^ i, i * 1000003u) == ref_u(seed ^ i, i * 1000003u), "random bits %llu", (unsigned long long)i);

    // the stochastic threshold is exact below 2^-32 too: 2^-149 to E4M3FN has f = 2^-140, so only
    // u = 0 rounds up (to the smallest subnormal 2^-9)
    TcastNumberSpec f;
    tcast_parse_number("e4m3fn", &f, NULL, 0);
    unsigned fl;
    float a = tcast_cast_element(&f, tcast_f32_from_bits(1), TCAST_ROUND_STOCHASTIC, 0u, &fl);
    float b = tcast_cast_element(&f, tcast_f32_from_bits(1), TCAST_ROUND_STOCHASTIC, 1u, NULL);
    CHECK(a == 0x1p-9f && fl == 0 && tcast_f32_bits(b) == 0, "tiny stochastic: %a %a", a, b);
    b = tcast_cast_element(&f, -tcast_f32_from_bits(1), TCAST_ROUND_STOCHASTIC, 1u, &fl);
    CHECK(tcast_f32_bits(b) == 0x80000000u && fl == TCAST_FLAG_FLUSHED, "tiny stochastic flushed to -0: %a", b);
    // f = 3/4 exactly: up iff u < 3 * 2^30
    a = tcast_cast_element(&f, 1.09375f, TCAST_ROUND_STOCHASTIC, 3u << 30, NULL);       // 1 + 0.75 / 8
    b = tcast_cast_element(&f, 1.09375f, TCAST_ROUND_STOCHASTIC, (3u << 30) - 1, NULL);
    CHECK(a == 1.0f && b == 1.125f, "threshold 3/4: %a %a", a, b);
}

// int8 with float scales (section 4b).
static void test_int_float_scale(void) {
    // int8_b: amax 3 -> 3 / 127 = 0.0236220... -> bfloat16 0.023681640625 (97 * 2^-12)
    // 3 -> 126.68 -> 127 -> 127 * 97 / 4096; -1 -> -42.23 -> -42; 0.5 -> 21.11 -> 21; -0 -> +0
    float x[6] = {3.0f, -1.0f, 0.5f, -0.0f, 0.01f, 1e-30f};
    float w[6] = {12319.0f / 4096, -4074.0f / 4096, 2037.0f / 4096, 0.0f, 0.0f, 0.0f};
    float y[6];
    TcastStats st;
    memset(&st, 0, sizeof(st));
    if (cast("int8_b", x, y, 2, 3, -1, 0, &st) == 0) check_bits("int8_b", y, w, 6);
    // 0.01 -> 0.42 -> 0 and 1e-30 flush; the scale 97 * 2^-12 has exponent -6
    CHECK(st.flushed == 2 && st.saturated == 0 && st.hist[tcast_hist_bin(-6)] == 1, "int8_b stats");
    // int8_f32 (float16 scale): 3 / 127 -> 387 * 2^-14; 3 -> 127.008 -> 127
    float xt[32], yt[32], wt[32];
    for (int i = 0; i < 32; i++) xt[i] = wt[i] = 0.0f;
    xt[0] = 3.0f;
    wt[0] = 127.0f * 387 / 16384;
    xt[1] = -0.25f;  // -0.25 / (387 * 2^-14) = -10.58 -> -11
    wt[1] = -11.0f * 387 / 16384;
    if (cast("int8_f32", xt, yt, 1, 32, -1, 0, NULL) == 0) check_bits("int8_f32", yt, wt, 32);
    // a coarse E4M3FN scale rounds 4.2 / 127 = 0.03307 down to 0.03125 (8 * 2^-8): 4.2 / 0.03125 =
    // 134.4 -> clamped to 127 (saturated); 0.05 -> 1.6 -> 2
    xt[0] = 4.2f;
    wt[0] = 3.96875f;
    xt[1] = -4.2f;
    wt[1] = -3.96875f;
    xt[2] = 0.05f;
    wt[2] = 0.0625f;
    memset(&st, 0, sizeof(st));
    if (cast("int8_e4m3fn_t32", xt, yt, 1, 32, -1, 0, &st) == 0) check_bits("int8_e4m3fn_t32", yt, wt, 32);
    CHECK(st.saturated == 2, "int8_e4m3fn_t32 saturated %lld", st.saturated);
    // all zero: scale 0 -> all +0, histogram `under`
    for (int i = 0; i < 32; i++) xt[i] = (i & 1) ? -0.0f : 0.0f;
    memset(&st, 0, sizeof(st));
    if (cast("int8_f32", xt, yt, 1, 32, -1, 0, &st) == 0)
        for (int i = 0; i < 32; i++) CHECK(tcast_f32_bits(yt[i]) == 0, "zero scale [%d]: %a", i, yt[i]);
    CHECK(st.hist[TCAST_HIST_UNDER] == 1, "zero scale in under");
    // round modes on exact ties of the integer grid: scale 1 (amax 127), 2.5 and -0.5
    for (int i = 0; i < 32; i++) xt[i] = 0.0f;
    xt[0] = 127.0f;
    xt[1] = 2.5f;
    xt[2] = -0.5f;
    xt[3] = -3.5f;
    static const char* const mods[3] = {"even", "nearest", "zero"};
    static const float wr[3][3] = {{2.0f, 0.0f, -4.0f}, {3.0f, -1.0f, -4.0f}, {2.0f, 0.0f, -3.0f}};
    for (int m = 0; m < 3; m++) {
        char text[64];
        snprintf(text, sizeof(text), "int8_b32@%s", mods[m]);
        if (cast(text, xt, yt, 1, 32, -1, 0, NULL) == 0)
            CHECK(yt[0] == 127.0f && same(yt[1], wr[m][0]) && same(yt[2], wr[m][1]) && same(yt[3], wr[m][2]),
                  "%s: %a %a %a", text, yt[1], yt[2], yt[3]);
    }
}

// uint with zero points (section 4c).
static void test_uint_zero_points(void) {
    float x[32], y[32], w[32];
    // uint8_bi32, all-negative tile: tmin = -1, tmax = 0: 1/255 -> bfloat16 129 * 2^-15; zero =
    // round(1 / scale = 254.02) = 254, clamped to int8's 127. -1 -> -254 + 127 < 0: clamped to 0
    // (saturated) -> -127 * scale; -0.25 -> -63.5 -> -64 (even) + 127 = 63 -> -64 * scale; 0 -> 127 -> +0
    for (int i = 0; i < 32; i++) x[i] = w[i] = 0.0f;
    x[0] = -1.0f;
    w[0] = -127.0f * 129 / 32768;
    x[1] = -0.25f;
    w[1] = -64.0f * 129 / 32768;
    x[2] = -0.6f;
    w[2] = -127.0f * 129 / 32768;
    TcastStats st;
    memset(&st, 0, sizeof(st));
    if (cast("uint8_bi32", x, y, 1, 32, -1, 0, &st) == 0) check_bits("uint8_bi32 all negative", y, w, 32);
    CHECK(st.saturated == 2 && st.hist[tcast_hist_bin(-8)] == 1, "uint8_bi32 stats: saturated %lld", st.saturated);
    // uint8_ff32: tmin -1, tmax 3: 4/255 -> float16 257 * 2^-14; zero = 1.0.
    // 3 -> 4 / scale = 255.008 -> 255 -> 255 * scale - 1; -1 -> 0 -> -1; 0 -> 63.75 -> 64 -> 64 * scale - 1
    // 0.5 -> 95.63 -> 96
    for (int i = 0; i < 32; i++) x[i] = w[i] = 0.0f;
    x[0] = 3.0f;
    w[0] = 65535.0f / 16384 - 1;
    x[1] = -1.0f;
    w[1] = -1.0f;
    x[2] = 0.5f;
    w[2] = 24672.0f / 16384 - 1;
    for (int i = 3; i < 32; i++) w[i] = 16448.0f / 16384 - 1;  // the zeros
    if (cast("uint8_ff32", x, y, 1, 32, -1, 0, NULL) == 0) check_bits("uint8_ff32", y, w, 32);
    // the int zero point makes 0 exact: uint8_fi32 on the same tile: zero = round(1 / scale = 63.75) = 64
    // 3 -> 191.25 -> 191 + 64 = 255 -> 191 * scale; -1 -> -64 + 64 = 0 -> -64 * scale; 0 -> 0
    for (int i = 0; i < 32; i++) w[i] = 0.0f;
    w[0] = 191.0f * 257 / 16384;
    w[1] = -64.0f * 257 / 16384;
    w[2] = 32.0f * 257 / 16384;  // 0.5 -> 31.88 -> 32
    if (cast("uint8_fi32", x, y, 1, 32, -1, 0, NULL) == 0) check_bits("uint8_fi32", y, w, 32);
}

// Channel and per-tensor scales; dim 0 vs -1 through a transpose.
static void test_channel_tensor_dims(void) {
    // 2 x 4: row 0 amax 1 -> s = -8; row 1 amax 100 -> s = 6 - 8 = -2
    float x[8] = {1.0f, 0.01f, -0.3f, 0.0013f, 100.0f, 0.01f, -0.3f, 3.0f};
    float y[8], yt[8];
    // row 0: 0.01 * 256 = 2.56 -> quantum 1/4 -> 2.5 -> 0.009765625; -0.3 * 256 = -76.8 -> -80 -> -0.3125;
    // 0.0013 * 256 = 0.3328 -> quantum 2^-5 -> 11 * 2^-5 -> 11 * 2^-13
    // row 1: 0.01 * 4 = 0.04 -> quantum 2^-8: 10.24 -> 10 -> 0.009765625; -0.3 * 4 -> -1.25 -> -0.3125;
    // 100 * 4 = 400 -> quantum 32: 12.5 -> 12 (even) -> 96; 3 * 4 = 12 exact
    float want_chan[8] = {1.0f, 0.009765625f, -0.3125f, 11 * 0x1p-13f, 96.0f, 0.009765625f, -0.3125f, 3.0f};
    TcastStats st;
    memset(&st, 0, sizeof(st));
    if (cast("e4m3fn_e8m0_t0", x, y, 2, 4, -1, 0, &st) == 0) check_bits("channel", y, want_chan, 8);
    CHECK(st.hist[tcast_hist_bin(-8)] == 1 && st.hist[tcast_hist_bin(-2)] == 1, "channel histogram");
    // per tensor: s = -2 for everything: 1 * 4 = 4 exact; 0.0013 * 4 = 0.0052 is subnormal in E4M3FN:
    // quantum 2^-9: 2.66 -> 3 -> 3 * 2^-11
    float want_tensor[8] = {1.0f, 0.009765625f, -0.3125f, 3 * 0x1p-11f, 96.0f, 0.009765625f, -0.3125f, 3.0f};
    memset(&st, 0, sizeof(st));
    if (cast("e4m3fn_e8m0", x, y, 2, 4, -1, 0, &st) == 0) check_bits("tensor", y, want_tensor, 8);
    CHECK(st.hist[tcast_hist_bin(-2)] == 1, "tensor histogram");
    // channel along dim 0 on the transpose (4 x 2) gives the transpose
    float xt[8];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++) xt[c * 2 + r] = x[r * 4 + c];
    if (cast("e4m3fn_e8m0_t0", xt, yt, 4, 2, 0, 0, NULL) == 0)
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 4; c++) CHECK(same(yt[c * 2 + r], want_chan[r * 4 + c]), "channel dim 0 (%d, %d)", r, c);

    // random tensors: every tile type, dim -1 on A == transpose of dim 0 on A^T (non-stochastic)
    enum { R = 16, C = 64 };
    static float a[R * C], at[R * C], ya[R * C], yb[R * C];
    for (int i = 0; i < R * C; i++) a[i] = rand_f32(-20, 20);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) at[c * R + r] = a[r * C + c];
    static const char* const types[] = {"mxfp8e4", "mxint8@nearest", "int8_f32@zero", "uint4_bi32", "uint8_ff32@midmax",
                                        "e3m2fnuz_e8m0_t0", "bfp16@2:4", "e5m2_e8m0_t16@midmax", "e4m3fn@1:8"};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        TcastStats sa, sb;
        memset(&sa, 0, sizeof(sa));
        memset(&sb, 0, sizeof(sb));
        if (cast(types[t], a, ya, R, C, -1, 0, &sa) != 0 || cast(types[t], at, yb, C, R, 0, 0, &sb) != 0) continue;
        int bad = 0;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++) bad += !same(ya[r * C + c], yb[c * R + r]);
        CHECK(bad == 0 && memcmp(&sa, &sb, sizeof(sa)) == 0, "%s: dim -1 vs transposed dim 0: %d differ", types[t], bad);
        // DIM 1 is -1 and -2 is 0
        static float yc[R * C];
        if (cast(types[t], a, yc, R, C, 1, 0, NULL) == 0) CHECK(memcmp(ya, yc, sizeof(ya)) == 0, "%s: dim 1 == -1", types[t]);
        if (cast(types[t], at, yc, C, R, -2, 0, NULL) == 0) CHECK(memcmp(yb, yc, sizeof(yb)) == 0, "%s: dim -2 == 0", types[t]);
    }
    // in place (out == x)
    float z[8];
    memcpy(z, x, sizeof(z));
    if (cast("e4m3fn_e8m0_t0", z, z, 2, 4, -1, 0, NULL) == 0) check_bits("in place", z, want_chan, 8);
}

// 2:4 sparsity (section 4.1) before the cast.
static void test_sparsity(void) {
    float x[16] = {1, -3, 3, 2,       // keep -3 and 3
                   2, 2, 2, 1,        // ties: keep the two lowest indices
                   NAN, 5, 1, NAN,    // NaN above everything: keep both NaNs
                   -1, -2, -3, -4};   // pruned values become +0
    float w[16] = {0, -3, 3, 0, 2, 2, 0, 0, NAN, 0, 0, NAN, 0, 0, -3, -4};
    float y[16];
    if (cast("float32@2:4", x, y, 1, 16, -1, 0, NULL) == 0) check_bits("float32@2:4", y, w, 16);
    // Inf is a number: [Inf, NaN, 7, -Inf] keeps NaN and the first Inf
    float xi[4] = {INFINITY, NAN, 7, -INFINITY}, wi[4] = {INFINITY, NAN, 0, 0}, yi[4];
    if (cast("float32@2:4", xi, yi, 1, 4, -1, 0, NULL) == 0) check_bits("float32@2:4 Inf", yi, wi, 4);
    // along columns: 4 x 2, the groups are the columns
    float xc[8] = {1, 4, -5, 3, 2, 2, 0.5f, 1}, wc[8] = {0, 4, -5, 3, 2, 0, 0, 0}, yc[8];
    if (cast("float32@2:4", xc, yc, 4, 2, 0, 0, NULL) == 0) check_bits("float32@2:4 dim 0", yc, wc, 8);
    // pruning comes first, so the scale sees the survivors: uint data, 2:4 removes the positive 5
    // (tmax becomes 0): tmin -10 -> 10 / 255 -> float16 1285 * 2^-15; zero = 10. -10 -> 0 -> -10;
    // -9 -> 1 / scale = 25.5 -> 26 -> 26 * scale - 10; pruned and zero elements: 10 / scale = 255.006
    // -> 255 -> 255 * scale - 10 = -5 * 2^-15 (a float zero point does not keep 0 exact)
    float xu[8] = {-10, -9, 5, 0, -1, 0, 0, 0}, yu[8];
    float wz = -5 * 0x1p-15f;
    float wu[8] = {-10, 26 * 1285 * 0x1p-15f - 10, wz, wz, 0, wz, wz, wz};
    wu[4] = (float)(230 * 1285) * 0x1p-15f - 10;  // -1 -> 9 / scale = 229.5006 -> 230
    TcastStats st;
    memset(&st, 0, sizeof(st));
    if (cast("uint8_float16_float16_t8@2:4", xu, yu, 1, 8, -1, 0, &st) == 0) check_bits("prune then scale", yu, wu, 8);
    CHECK(st.flushed == 0 && st.hist[tcast_hist_bin(-5)] == 1, "prune then scale stats: flushed %lld", st.flushed);
    // 1:4 then a tensor scale: [1000, 900, -800, 1] keeps 1000: s = 9 - 8 = 1, 500 -> 512 > 448:
    // saturated to 448 * 2; the pruned values are +0 and count as neither flushed nor saturated
    float xp[4] = {1000, 900, -800, 1}, yp[4];
    memset(&st, 0, sizeof(st));
    if (cast("e4m3fn_e8m0@1:4", xp, yp, 1, 4, -1, 0, &st) == 0)
        CHECK(yp[0] == 896 && tcast_f32_bits(yp[1]) == 0 && tcast_f32_bits(yp[2]) == 0 && tcast_f32_bits(yp[3]) == 0, "1:4: %a %a", yp[0], yp[2]);
    CHECK(st.saturated == 1 && st.flushed == 0, "1:4 stats %lld %lld", st.saturated, st.flushed);
}

// Stochastic rounding: reproducible, seed-dependent, unbiased.
static void test_stochastic(void) {
    enum { N = 1024, SEEDS = 64 };
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (i & 1) ? -2.25f : 2.25f;  // between 2 and 3 of E2M1: f = 1/4
    double sum = 0;
    for (int s = 0; s < SEEDS; s++) {
        if (cast("e2m1fnuz@stochastic", x, y, 1, N, -1, (uint64_t)s * 7919u, NULL) != 0) return;
        for (int i = 0; i < N; i++) {
            float w = ref_u((uint64_t)s * 7919u, (uint64_t)i) < 0x40000000u ? 3.0f : 2.0f;  // u < 2^30
            if (!CHECK(fabsf(y[i]) == w, "seed %d [%d]: %a, want +-%a", s, i, y[i], w)) return;
            sum += fabs(y[i]);
        }
    }
    // mean of 65536 draws of 2 + Bernoulli(1/4): sd 0.433 / 256 = 0.0017; 6 sd tolerance
    double mean = sum / (N * SEEDS);
    CHECK(fabs(mean - 2.25) < 0.0102, "stochastic mean %.5f, want 2.25 +- 0.0102", mean);
    // reproducible, and another seed differs; MX tiles and float scales too
    static float m[4 * 64];
    for (int i = 0; i < 4 * 64; i++) m[i] = rand_f32(-6, 6);
    static const char* const types[] = {"mxfp6e2@stochastic", "int8_f32@stochastic", "uint4_ff32@stochastic", "e3m2fnuz@stochastic"};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        static float a[4 * 64], b[4 * 64], c[4 * 64];
        if (cast(types[t], m, a, 4, 64, -1, 1234, NULL) || cast(types[t], m, b, 4, 64, -1, 1234, NULL) ||
            cast(types[t], m, c, 4, 64, -1, 1235, NULL))
            continue;
        int differ = 0;
        for (int i = 0; i < 4 * 64; i++) differ += tcast_f32_bits(a[i]) != tcast_f32_bits(c[i]);
        CHECK(memcmp(a, b, sizeof(a)) == 0 && differ > 4 * 64 / 20, "%s: reproducible, %d differ for another seed", types[t], differ);
    }
    // the index is the row-major one whatever dim is: an E2M1 tensor cast along either dimension
    static float z0[8 * 32], z1[8 * 32];
    for (int i = 0; i < 8 * 32; i++) x[i] = 2.5f;
    if (cast("mxfp4e2@stochastic", x, z0, 8, 32, -1, 99, NULL) == 0 && cast("e2m1fnuz_e8m0_t8@stochastic", x, z1, 8, 32, 0, 99, NULL) == 0)
        for (int i = 0; i < 8 * 32; i++)
            CHECK(z0[i] == (ref_u(99, (uint64_t)i) < 0x80000000u ? 3.0f : 2.0f) && z1[i] == z0[i], "index %d", i);
}

// Unscaled casts (section 1.3).
static void test_unscaled(void) {
    TcastNumberSpec f32, bf, e4, e5, e4z, e8fn;
    tcast_parse_number("float32", &f32, NULL, 0);
    tcast_parse_number("bfloat16", &bf, NULL, 0);
    tcast_parse_number("e4m3fn", &e4, NULL, 0);
    tcast_parse_number("e5m2", &e5, NULL, 0);
    tcast_parse_number("e4m3fnuz", &e4z, NULL, 0);
    tcast_parse_number("e8m7fn", &e8fn, NULL, 0);
    // float32 is the identity on finite values in every mode (subnormals and -0 included)
    int bad = 0, badbf = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)rng_next();
        float x = tcast_f32_from_bits(u);
        if (!isfinite(x)) continue;
        for (int m = 0; m < 4; m++) bad += tcast_f32_bits(tcast_cast_element(&f32, x, (TcastRound)m, (uint32_t)rng_next(), NULL)) != u;
        // bfloat16 @even is RNE to bf16 (bf16.h) wherever that does not overflow
        uint16_t h = bf16_from_float(x);
        if ((h & 0x7FFF) < 0x7F80) badbf += tcast_f32_bits(tcast_cast_element(&bf, x, TCAST_ROUND_EVEN, 0, NULL)) != (uint32_t)h << 16;
    }
    CHECK(bad == 0, "float32 identity: %d differ", bad);
    CHECK(badbf == 0, "bfloat16 vs bf16_from_float: %d differ", badbf);
    // values past bfloat16's max saturate (section 1.3, every mode), Inf stays Inf (ieee)
    CHECK(tcast_f32_bits(tcast_cast_element(&bf, FLT_MAX, TCAST_ROUND_EVEN, 0, NULL)) == 0x7F7F0000u, "bf16 FLT_MAX saturates");
    unsigned fl;
    tcast_cast_element(&bf, -FLT_MAX, TCAST_ROUND_EVEN, 0, &fl);
    CHECK(fl == TCAST_FLAG_SATURATED, "bf16 FLT_MAX flag");
    // Inf: ieee keeps it, fn / fnuz give +-max; max beyond FLT_MAX becomes Inf in float32
    struct {
        const TcastNumberSpec* f;
        float x;
        uint32_t want;
    } inf[] = {{&f32, INFINITY, 0x7F800000u}, {&bf, -INFINITY, 0xFF800000u}, {&e5, INFINITY, 0x7F800000u},
               {&e4, INFINITY, tcast_f32_bits(448.0f)},  {&e4, -INFINITY, tcast_f32_bits(-448.0f)}, {&e4z, -INFINITY, tcast_f32_bits(-240.0f)},
               {&e8fn, INFINITY, 0x7F800000u}, {&e4, 1e6f, tcast_f32_bits(448.0f)},      {&e5, -1e6f, tcast_f32_bits(-57344.0f)},
               {&e4, -0.0f, 0x80000000u},     {&e4z, -0.0f, 0u},              {&e4z, -1e-9f, 0u},
               {&e4, -1e-9f, 0x80000000u},    {&e4, 464.0f, tcast_f32_bits(448.0f)},     {&e4, 0x1.3p-7f, tcast_f32_bits(0x1.4p-7f)}};
    for (size_t i = 0; i < sizeof(inf) / sizeof(inf[0]); i++) {
        uint32_t got = tcast_f32_bits(tcast_cast_element(inf[i].f, inf[i].x, TCAST_ROUND_EVEN, 0, &fl));
        CHECK(got == inf[i].want, "case %zu: %a -> 0x%08x, want 0x%08x", i, inf[i].x, got, inf[i].want);
        CHECK(fl == 0 || isfinite(inf[i].x), "case %zu: Inf sets no flags", i);
    }
    // the final float32 rounding (1.3, last paragraph) with max below 2^-149: e5m10b180 has max =
    // (2 - 2^-10) * 2^-150, which rounds to 2^-149 (RNE; truncation would give 0); e2m0b153fnuz has
    // max = 2^-150, a tie that rounds to even, 0 (flushed; the IEEE rounding keeps the sign)
    TcastNumberSpec tiny, tie;
    tcast_parse_number("e5m10b180", &tiny, NULL, 0);
    tcast_parse_number("e2m0b153fnuz", &tie, NULL, 0);
    CHECK(tcast_f32_bits(tcast_cast_element(&tiny, 1.0f, TCAST_ROUND_EVEN, 0, &fl)) == 1u && fl == TCAST_FLAG_SATURATED, "e5m10b180 max");
    CHECK(tcast_f32_bits(tcast_cast_element(&tiny, -3.0f, TCAST_ROUND_NEAREST, 0, NULL)) == 0x80000001u, "e5m10b180 -max");
    CHECK(tcast_f32_bits(tcast_cast_element(&tie, 1.0f, TCAST_ROUND_EVEN, 0, &fl)) == 0u && fl == (TCAST_FLAG_SATURATED | TCAST_FLAG_FLUSHED),
          "e2m0b153fnuz max ties to 0");
    CHECK(isnan(tcast_cast_element(&e4, NAN, TCAST_ROUND_EVEN, 0, NULL)) && tcast_f32_bits(tcast_cast_element(&e5, -NAN, TCAST_ROUND_ZERO, 0, NULL)) == 0x7FC00000u,
          "NaN -> canonical NaN");
    // through tcast_cast_host, with stats: Inf is not saturation, 1e6 is
    float x[6] = {INFINITY, -1e6f, 1e-9f, NAN, 0.0f, 300.0f}, y[6];
    float w[6] = {448.0f, -448.0f, 0.0f, NAN, 0.0f, 288.0f};
    TcastStats st;
    memset(&st, 0, sizeof(st));
    if (cast("e4m3fn", x, y, 2, 3, 0, 0, &st) == 0) check_bits("e4m3fn unscaled", y, w, 6);
    CHECK(st.values == 6 && st.saturated == 1 && st.flushed == 1, "unscaled stats %lld %lld", st.saturated, st.flushed);
}

// ----------------------------------------------------------------------------------------------
// Fixed scales pN (sections 2 and 4d)

// Section 4d on one element, from the doc: NaN -> NaN; +-Inf -> +-Inf (ieee) or
// +-max * 2^N; else the 1.3 cast of the exact real x / 2^N, times 2^N, rounded once to float32.
static float ref_fixed(float x, const RefF* f, int n, int mode, uint32_t u) {
    int sat;
    if (isnan(x)) return NAN;
    if (isinf(x)) return f->mode == 0 ? x : (float)copysign(ldexp(f->max, n), x);
    return (float)(ref_cast_real(ldexp((double)x, -n), f, mode, u, &sat) * ldexp(1.0, n));
}

static void test_fixed_scale(void) {
    // int8_p-3: int8's grid n 2^-6 times 2^-3 = n 2^-9, |n| <= 127, +0 for zero, saturating (Inf too)
    float x[8] = {0.1f, -0.3f, 1.0f, INFINITY, NAN, -0.0f, 0x1p-11f, 0x1.8p-10f}, y[8];
    float w[8] = {51 * 0x1p-9f, -127 * 0x1p-9f, 127 * 0x1p-9f, 127 * 0x1p-9f, NAN, 0.0f, 0.0f, 0x1p-9f};
    TcastStats st;
    memset(&st, 0, sizeof(st));
    if (cast("int8_p-3", x, y, 2, 4, -1, 0, &st) == 0) check_bits("int8_p-3", y, w, 8);
    long long hist = 0;
    for (int b = 0; b < TCAST_HIST_BINS; b++) hist += st.hist[b];
    CHECK(st.values == 8 && st.saturated == 2 && st.flushed == 1 && hist == 0, "int8_p-3 stats: sat %lld flush %lld hist %lld",
          st.saturated, st.flushed, hist);
    // e4m3fn_p2: e4m3fn's values times 4 (max 1792); the fn zero keeps its sign; Inf saturates
    float xe[8] = {1000.0f, -5000.0f, 0x1p-7f, -0x1.8p-10f, INFINITY, -INFINITY, -0.0f, 0x1.1p-6f}, ye[8];
    float we[8] = {1024.0f, -1792.0f, 0x1p-7f, -0.0f, 1792.0f, -1792.0f, -0.0f, 0x1p-6f};
    if (cast("e4m3fn_p2", xe, ye, 1, 8, 0, 0, NULL) == 0) check_bits("e4m3fn_p2", ye, we, 8);
    // unscaled and p0 are the same cast; the canonical code round-trips
    TcastDataType dt, dt2;
    char buf[160];
    if (get_dtype("Q115@stochastic", &dt)) {
        tcast_datatype_describe(&dt, buf, sizeof(buf));
        CHECK(strcmp(buf, "int16_p-1@stochastic@max") == 0 && dt.fixed && dt.fixed_exp == -1 && !dt.has_scale, "describe q115: %s", buf);
        CHECK(get_dtype(buf, &dt2) && dt2.fixed && dt2.fixed_exp == -1 && dt2.round == TCAST_ROUND_STOCHASTIC, "%s re-parses", buf);
    }

    // random elements of several pN types, every round mode, along either dimension (element-wise:
    // the same bits), through tcast_cast_host against ref_fixed
    static const struct {
        const char* code;
        int x, y, bias, mode, n;
    } fmts[] = {
        {"int16_p-1", 1, 14, 1, 2, -1},     {"int8_p-3", 1, 6, 1, 2, -3},       {"e4m3fn_p2", 4, 3, 7, 1, 2},
        {"e5m2_p-10", 5, 2, 15, 0, -10},    {"e2m1fnuz_p5", 2, 1, 1, 2, 5},     {"bfloat16_p-100", 8, 7, 127, 0, -100},
        {"int4_p-127", 1, 2, 1, 2, -127},   {"e4m3fn_p-127", 4, 3, 7, 1, -127}, {"e5m10b30fnuz_p-127", 5, 10, 30, 2, -127},
        {"float32_p3", 8, 23, 127, 0, 3},   {"e8m22b0_p-127", 8, 22, 0, 0, -127}, {"e3m2fnuz_p127", 3, 2, 3, 2, 127},
        {"int2_p0", 1, 0, 1, 2, 0},
    };
    enum { R = 40, C = 1000 };
    static float xr[R * C], yr[R * C], yc[R * C];
    for (size_t k = 0; k < sizeof(fmts) / sizeof(fmts[0]); k++) {
        const RefF r = ref_float(fmts[k].x, fmts[k].y, fmts[k].bias, fmts[k].mode);
        const int n = fmts[k].n;
        // magnitudes around the scaled grid: 2^(emin - mbits + n - 3) .. 2^(emax + n + 2), within float32
        int lo = r.emin - r.mbits + n - 3, hi = r.emax + n + 2;
        lo = lo < -149 ? -149 : lo > 120 ? 120 : lo;
        hi = hi > 127 ? 127 : hi < lo ? lo : hi;
        for (int i = 0; i < R * C; i++) xr[i] = (i % 50 == 0) ? tcast_f32_from_bits((uint32_t)rng_next()) : rand_f32(lo, hi);
        for (int m = 0; m < 4; m++) {
            char text[64];
            snprintf(text, sizeof(text), "%s@%s", fmts[k].code, tcast_round_name((TcastRound)m));
            const uint64_t seed = 0x5EED0000ull + k;
            if (cast(text, xr, yr, R, C, -1, seed, NULL) != 0 || cast(text, xr, yc, R, C, 0, seed, NULL) != 0) continue;
            int bad = 0;
            for (int i = 0; i < R * C; i++) {
                const float want = ref_fixed(xr[i], &r, n, m, ref_u(seed, (uint64_t)i));
                if ((!same(yr[i], want) || !same(yc[i], want)) && bad++ < 3)
                    CHECK(0, "%s: %a (0x%08x) -> %a / %a (dim -1 / 0), want %a", text, xr[i], tcast_f32_bits(xr[i]), yr[i], yc[i], want);
            }
            CHECK(bad == 0, "%s: %d of %d elements differ", text, bad, R * C);
        }
    }
}

// q115 = int16_p-1 against the SF16 build's Q1.15 round trip simulate_q115 (llmc/numerics/q115.h):
// the same bits for every non-NaN float32 (checked: every pattern of the binades around the flush
// threshold 2^-16 and around 1, every 257th pattern of the rest, and the special values), and the same
// set of flushed inputs (q115_is_flushed vs the cast's flushed count). NaN: both give NaN, but the cast
// gives the canonical 0x7FC00000 (section 1.3, tcast_quant.h) where simulate_q115 keeps the input's
// bits (payload and sign) on the host: the only difference (an all-2^32 sweep found no other).
static void test_q115_equivalence(void) {
    TcastDataType dt;
    if (!get_dtype("q115", &dt)) return;
    enum { CH = 1 << 16 };
    static float x[CH], y[CH];
    long long n = 0, bad = 0, nan_in = 0, nan_bad = 0, flush_bad = 0;
    uint32_t first = 0;
    // the chunks: 6 binades x 2 signs in full (exponent fields 111..113: |x| in [2^-16, 2^-13), 125..127:
    // [0.25, 2)), then every 257th pattern of all 2^32, then the specials
    const uint32_t fields[6] = {111, 112, 113, 125, 126, 127};
    const uint32_t specials[] = {0u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFBFFFFFu,
                                 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x3F800000u, 0xBF800000u, 0x3F7FFF00u, 0xBF7FFF00u,
                                 Q115_THRESHOLD_BITS_, 0x3F7FFE01u, 0x37800000u, 0xB7800000u, 0x37C00000u, 0x38000000u,
                                 0x477FFF00u, 0x7F7FFFFFu, 0xFF7FFFFFu};
    const uint64_t nspec = sizeof(specials) / sizeof(specials[0]);
    const uint64_t ndense = 12ull << 23, nstride = (0x100000000ull + 256) / 257;
    for (uint64_t base = 0; base < ndense + nstride + nspec; base += CH) {
        int len = 0;
        for (uint64_t i = base; i < ndense + nstride + nspec && len < CH; i++, len++) {
            uint32_t b;
            if (i < ndense) b = ((uint32_t)(i >> 24) << 31) | (fields[(i >> 23) & 0x7] << 23) | (uint32_t)(i & 0x7FFFFF);
            else if (i < ndense + nstride) b = (uint32_t)((i - ndense) * 257);
            else b = specials[i - ndense - nstride];
            x[len] = tcast_f32_from_bits(b);
        }
        TcastStats st;
        char err[256];
        memset(&st, 0, sizeof(st));
        if (!CHECK(tcast_cast_host(&dt, x, y, 1, len, -1, 0, &st, err, sizeof(err)) == 0, "q115 cast: %s", err)) return;
        long long flushed = 0;
        for (int i = 0; i < len; i++) {
            const float w = simulate_q115(x[i]);
            flushed += q115_is_flushed(x[i]);
            n++;
            if (isnan(x[i])) {
                nan_in++;
                nan_bad += tcast_f32_bits(y[i]) != TCAST_F32_QNAN || !isnan(w);
            } else if (tcast_f32_bits(y[i]) != tcast_f32_bits(w) && bad++ == 0) {
                first = tcast_f32_bits(x[i]);
            }
        }
        flush_bad += st.flushed != flushed;
    }
    CHECK(bad == 0, "q115 vs simulate_q115: %lld of %lld differ (first input 0x%08x)", bad, n, first);
    CHECK(nan_in > 1000 && nan_bad == 0, "q115 NaN inputs: %lld, %lld not the canonical NaN", nan_in, nan_bad);
    CHECK(flush_bad == 0, "q115 flushed counts differ from q115_is_flushed in %lld chunks", flush_bad);
    CHECK(n > 100000000ll, "q115 sweep: %lld values", n);
}

// ----------------------------------------------------------------------------------------------
// Random comparisons against the reference above

typedef struct {
    const char* code;
    int x, y, bias, mode;  // the reference's view (ints: ref_int)
} RandFmt;

static void test_random_elements(void) {
    static const RandFmt fmts[] = {
        {"e4m3fn", 4, 3, 7, 1},     {"e5m2", 5, 2, 15, 0},        {"e4m3fnuz", 4, 3, 8, 2},   {"e5m2fnuz", 5, 2, 16, 2},
        {"e2m1fnuz", 2, 1, 1, 2},   {"e2m3fnuz", 2, 3, 1, 2},     {"e3m2fnuz", 3, 2, 3, 2},   {"bfloat16", 8, 7, 127, 0},
        {"float16", 5, 10, 15, 0},  {"e1m2fn", 1, 2, 0, 1},       {"e2m0fnuz", 2, 0, 1, 2},   {"e1m0fnuz", 1, 0, 0, 2},
        {"e3m4b2", 3, 4, 2, 0},     {"e8m3b250", 8, 3, 250, 0},   {"e5m6b10fn", 5, 6, 10, 1}, {"e8m22b0", 8, 22, 0, 0},
        {"e8m7fn", 8, 7, 127, 1},   {"e6m9", 6, 9, 31, 0},        {"e2m1b0", 2, 1, 0, 0},     {"e5m10b180", 5, 10, 180, 0},
        {"e3m4b160fn", 3, 4, 160, 1}, {"e2m0b153fnuz", 2, 0, 153, 2},
    };
    for (size_t k = 0; k < sizeof(fmts) / sizeof(fmts[0]); k++) {
        TcastNumberSpec f;
        if (!CHECK(tcast_parse_number(fmts[k].code, &f, NULL, 0) == 0, "%s", fmts[k].code)) continue;
        RefF r = ref_float(fmts[k].x, fmts[k].y, fmts[k].bias, fmts[k].mode);
        CHECK(f.max == r.max && f.emax == r.emax && f.emin == r.emin, "%s: derived values", fmts[k].code);
        int bad = 0;
        for (int i = 0; i < 40000; i++) {
            int lo = f.emin - f.mbits - 3 < -149 ? -149 : f.emin - f.mbits - 3, hi = f.emax + 2 > 127 ? 127 : f.emax + 2;
            float x = (i % 50 == 0) ? tcast_f32_from_bits((uint32_t)rng_next()) : rand_f32(lo, hi);  // some arbitrary bit patterns
            int m = i % 4;
            uint32_t u = (uint32_t)rng_next();
            float got = tcast_cast_element(&f, x, (TcastRound)m, u, NULL), want = ref_cast(x, &r, m, u);
            if (!same(got, want) && bad++ < 5)
                CHECK(0, "%s mode %d: %a (0x%08x) -> %a, want %a", fmts[k].code, m, x, tcast_f32_bits(x), got, want);
        }
        CHECK(bad == 0, "%s: %d of 40000 elements differ", fmts[k].code, bad);
    }
}

// Whole tensors with exponent scales: tiles with wide per-tile ranges, channel, tensor, every mode.
static void test_random_exp_scaled(void) {
    typedef struct {
        const char* dtype;
        int x, y, bias, mode;  // element format (ref view)
        int sx, sb;            // scale: eXm0bZ
        int tile;              // 0 channel, -1 tensor
    } Case;
    static const Case cases[] = {
        {"mxfp8e4", 4, 3, 7, 1, 8, 127, 32},        {"mxfp8e5", 5, 2, 15, 0, 8, 127, 32},
        {"mxfp6e3", 3, 2, 3, 2, 8, 127, 32},        {"mxfp6e2", 2, 3, 1, 2, 8, 127, 32},
        {"mxfp4e2", 2, 1, 1, 2, 8, 127, 32},        {"mxint8", 1, 6, 1, 2, 8, 127, 32},
        {"mxint4", 1, 2, 1, 2, 8, 127, 32},         {"bfp16", 1, 6, 1, 2, 8, 127, 8},
        {"e8m3b250_e8m0_t32", 8, 3, 250, 0, 8, 127, 32}, {"e2m1fnuz_e4m0b3_t32", 2, 1, 1, 2, 4, 3, 32},
        {"int2_e8m0_t8", 1, 0, 1, 2, 8, 127, 8},    {"e4m3fn_e8m0b100_t16", 4, 3, 7, 1, 8, 100, 16},
        {"e5m2_e8m0_t0", 5, 2, 15, 0, 8, 127, 0},   {"e4m3fnuz_e8m0", 4, 3, 8, 2, 8, 127, -1},
        {"int16_e", 1, 14, 1, 2, 8, 127, -1},       {"e5m6b10fn_e6m0_t8", 5, 6, 10, 1, 6, 31, 8},
    };
    enum { R = 64, C = 64 };
    static float x[R * C], y[R * C], w[R * C], gx[R * C], gy[R * C];
    static uint32_t u[R * C], gu[R * C];
    static int idx[R * C];
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const Case* c = &cases[k];
        RefF f = ref_float(c->x, c->y, c->bias, c->mode);
        for (int trial = 0; trial < 24; trial++) {
            int mode = trial % 4, midmax = (trial / 4) % 2;
            // per row a different magnitude range; some rows tiny (s clamps), one trial with specials
            for (int r = 0; r < R; r++) {
                int center = (int)(rng_next() % 200) - 130;
                for (int i = 0; i < C; i++) x[r * C + i] = rand_f32(center - 12, center + 12 > 127 ? 127 : center + 12);
            }
            if (trial == 7) {
                x[3] = NAN;
                x[C + 40] = -INFINITY;
            }
            uint64_t seed = rng_next();
            for (int i = 0; i < R * C; i++) u[i] = ref_u(seed, (uint64_t)i);
            char text[96];
            snprintf(text, sizeof(text), "%s@%s@%s", c->dtype, tcast_round_name((TcastRound)mode), midmax ? "midmax" : "max");
            int dim = trial % 3 == 0 ? 0 : -1;
            if (cast(text, x, y, R, C, dim, seed, NULL) != 0) break;
            // reference: gather each group along dim, then 4a
            int len = dim == 0 ? R : C, lines = dim == 0 ? C : R;
            int g = c->tile > 0 ? c->tile : c->tile == 0 ? len : R * C;
            for (int l = 0; l < (c->tile < 0 ? 1 : lines); l++)
                for (int j0 = 0; j0 < (c->tile < 0 ? 1 : len); j0 += g) {
                    for (int j = 0; j < g; j++) {
                        idx[j] = c->tile < 0 ? j : dim == 0 ? (j0 + j) * C + l : l * C + j0 + j;
                        gx[j] = x[idx[j]];
                        gu[j] = u[idx[j]];
                    }
                    ref_exp_group(gx, gy, g, &f, c->sx, c->sb, midmax, mode, gu);
                    for (int j = 0; j < g; j++) w[idx[j]] = gy[j];
                }
            check_tensor_same(text, dim, x, y, w, R * C);
        }
    }
}

// Whole tensors with float scales (4b, 4c) against float32 reference arithmetic.
static void test_random_float_scaled(void) {
    typedef struct {
        const char* dtype;
        int uint, maxint;     // data
        int sx, sy, sbias, smode;  // scale format (ref view)
        int zint, zx, zy, zbias, zmode, zmax;  // zero point: int with maxint zmax, or float
        int tile;
    } Case;
    static const Case cases[] = {
        {"int8_f32", 0, 127, 5, 10, 15, 0, 0, 0, 0, 0, 0, 0, 32},
        {"int8_b32", 0, 127, 8, 7, 127, 0, 0, 0, 0, 0, 0, 0, 32},
        {"int4_f32", 0, 7, 5, 10, 15, 0, 0, 0, 0, 0, 0, 0, 32},
        {"int8_e4m3fn_t32", 0, 127, 4, 3, 7, 1, 0, 0, 0, 0, 0, 0, 32},
        {"int16_float32", 0, 32767, 8, 23, 127, 0, 0, 0, 0, 0, 0, 0, -1},
        {"int3_float16_t0", 0, 3, 5, 10, 15, 0, 0, 0, 0, 0, 0, 0, 0},
        {"uint8_ff32", 1, 255, 5, 10, 15, 0, 0, 5, 10, 15, 0, 0, 32},
        {"uint8_bb32", 1, 255, 8, 7, 127, 0, 0, 8, 7, 127, 0, 0, 32},
        {"uint8_fi32", 1, 255, 5, 10, 15, 0, 1, 0, 0, 0, 0, 127, 32},
        {"uint4_bi32", 1, 15, 8, 7, 127, 0, 1, 0, 0, 0, 0, 127, 32},
        {"uint8_e4m3fn_e4m3fn_t16", 1, 255, 4, 3, 7, 1, 0, 4, 3, 7, 1, 0, 16},
        {"uint2_bfloat16_int2_t8", 1, 3, 8, 7, 127, 0, 1, 0, 0, 0, 0, 1, 8},
        {"uint16_e5m2fnuz_int16_t64", 1, 65535, 5, 2, 16, 2, 1, 0, 0, 0, 0, 32767, 64},
        {"uint8_bb", 1, 255, 8, 7, 127, 0, 0, 8, 7, 127, 0, 0, -1},
    };
    enum { R = 64, C = 64 };
    static float x[R * C], y[R * C], w[R * C], gx[R * C], gy[R * C];
    static uint32_t u[R * C], gu[R * C];
    static int idx[R * C];
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const Case* c = &cases[k];
        RefF S = ref_float(c->sx, c->sy, c->sbias, c->smode), Z = ref_float(c->zx ? c->zx : 5, c->zy, c->zbias, c->zmode);
        for (int trial = 0; trial < 16; trial++) {
            int mode = trial % 4;
            for (int r = 0; r < R; r++) {
                int center = (int)(rng_next() % 60) - 30;
                int allneg = rng_next() % 4 == 0;
                for (int i = 0; i < C; i++) {
                    float v = rand_f32(center - 8, center + 8);
                    x[r * C + i] = allneg ? -fabsf(v) : v;
                }
            }
            if (trial == 5) for (int i = 0; i < 32; i++) x[2 * C + i] = 0.0f;  // a zero tile / channel
            uint64_t seed = rng_next();
            for (int i = 0; i < R * C; i++) u[i] = ref_u(seed, (uint64_t)i);
            char text[96];
            snprintf(text, sizeof(text), "%s@%s", c->dtype, tcast_round_name((TcastRound)mode));
            int dim = trial % 3 == 0 ? 0 : -1;
            if (cast(text, x, y, R, C, dim, seed, NULL) != 0) break;
            int len = dim == 0 ? R : C, lines = dim == 0 ? C : R;
            int g = c->tile > 0 ? c->tile : c->tile == 0 ? len : R * C;
            for (int l = 0; l < (c->tile < 0 ? 1 : lines); l++)
                for (int j0 = 0; j0 < (c->tile < 0 ? 1 : len); j0 += g) {
                    for (int j = 0; j < g; j++) {
                        idx[j] = c->tile < 0 ? j : dim == 0 ? (j0 + j) * C + l : l * C + j0 + j;
                        gx[j] = x[idx[j]];
                        gu[j] = u[idx[j]];
                    }
                    if (c->uint) ref_uint_group(gx, gy, g, c->maxint, &S, &Z, c->zint, c->zmax, mode, gu);
                    else ref_int_group(gx, gy, g, c->maxint, &S, mode, gu);
                    for (int j = 0; j < g; j++) w[idx[j]] = gy[j];
                }
            check_tensor_same(text, dim, x, y, w, R * C);
        }
    }
}

// The float32 helpers round once, also for subnormal results (compared with float arithmetic).
static void test_f32_ops(void) {
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        float a = rand_f32(-140, 100), b = rand_f32(-140, 100);
        if (b == 0) continue;
        volatile float s = a + b, d = a - b, p = a * b, q = a / b;
        bad += !same(tcast_add_rn(a, b), s) + !same(tcast_sub_rn(a, b), d) + !same(tcast_mul_rn(a, b), p) + !same(tcast_div_rn(a, b), q);
    }
    CHECK(bad == 0, "float32 RNE helpers: %d differ", bad);
}

int main(void) {
    test_predefined();
    test_codes();
    test_derived();
    test_errors();
    test_mxfp8e4_tiles();
    test_round_modes();
    test_int_float_scale();
    test_uint_zero_points();
    test_channel_tensor_dims();
    test_sparsity();
    test_stochastic();
    test_unscaled();
    test_fixed_scale();
    test_q115_equivalence();
    test_random_elements();
    test_random_exp_scaled();
    test_random_float_scaled();
    test_f32_ops();
    return test_summary();
}
