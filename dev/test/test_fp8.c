/*
 * test_fp8.c - FP8 formats (llmc/numerics/fp8.h): decode of all codes, RNE encode (ties,
 * subnormals, overflow in both modes, specials), stochastic rounding, random bits, scales and
 * block amax. References here are written independently of the header (ldexp in double, brute
 * force nearest-value search over the decoded code table, hard-coded values).
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_fp8.c -lm -o /tmp/test_fp8 && /tmp/test_fp8
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "dev/test/test_harness.h"
#include "llmc/numerics/fp8.h"

// ----------------------------------------------------------------------------------------------
// Independent reference: format parameters restated from the specification tables, decode by
// formula with ldexp.

typedef struct {
    FP8Kind kind;
    const char* name;
    int ebits, mbits, bias;
    int ieee_specials;  // exponent all ones: mantissa 0 = Inf, else NaN (E5M2)
    int nan_7f_only;    // only S.1111.111 is NaN (E4M3FN)
    int nan_80_only;    // only 0x80 is NaN, no -0, no Inf (FNUZ)
    double max;         // largest finite value
    double min_sub;     // smallest subnormal
} RefFmt;

static const RefFmt REF[FP8_NUM_KINDS] = {
    {FP8_E4M3FN, "e4m3fn", 4, 3, 7, 0, 1, 0, 448.0, 0x1p-9},
    {FP8_E5M2, "e5m2", 5, 2, 15, 1, 0, 0, 57344.0, 0x1p-16},
    {FP8_E4M3FNUZ, "e4m3fnuz", 4, 3, 8, 0, 0, 1, 240.0, 0x1p-10},
    {FP8_E5M2FNUZ, "e5m2fnuz", 5, 2, 16, 0, 0, 1, 57344.0, 0x1p-17},
};

// Reference decode: returns the value (NAN for NaN codes, +-INFINITY for Inf codes).
static double ref_decode(const RefFmt* r, int code) {
    int s = (code >> 7) & 1;
    int exp = (code >> r->mbits) & ((1 << r->ebits) - 1);
    int man = code & ((1 << r->mbits) - 1);
    if (r->nan_80_only && code == 0x80) return NAN;
    if (r->nan_7f_only && (code & 0x7F) == 0x7F) return NAN;
    if (r->ieee_specials && exp == (1 << r->ebits) - 1) return man == 0 ? (s ? -INFINITY : INFINITY) : NAN;
    double mag;
    if (exp == 0) {
        mag = ldexp((double)man, 1 - r->bias - r->mbits);
    } else {
        mag = ldexp(1.0 + (double)man / (double)(1 << r->mbits), exp - r->bias);
    }
    return s ? -mag : mag;
}

static uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// Test-local xorshift64* generator (independent of fp8_random_bits).
static uint64_t rng_state = 0x853C49E6748FEA9Bull;
static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static double rng_uniform(void) {
    return (double)(rng_next() >> 11) * 0x1p-53;
}

// ----------------------------------------------------------------------------------------------
// Reference grid: the non-negative finite values by code (codes 0..top), plus the "virtual"
// next grid point above max (same spacing) that marks overflow.

typedef struct {
    int ncodes;        // number of non-negative finite codes (0 .. ncodes-1, increasing value)
    double val[128];   // their values
    double virt;       // max + (max - previous): the first value past max on the extended grid
    int max_code;      // ncodes - 1
} RefGrid;

static void ref_grid(const RefFmt* r, RefGrid* g) {
    g->ncodes = 0;
    for (int c = 0; c < 128; c++) {
        double v = ref_decode(r, c);
        if (isnan(v) || isinf(v)) break;  // finite codes are a prefix of 0x00..0x7F in all four formats
        g->val[g->ncodes++] = v;
    }
    g->max_code = g->ncodes - 1;
    g->virt = g->val[g->max_code] + (g->val[g->max_code] - g->val[g->max_code - 1]);
}

// What an overflowing conversion gives (hard-coded from the spec rules).
static int ref_overflow_code(const RefFmt* r, int sign, int saturate, const RefGrid* g) {
    if (saturate) return (sign << 7) | g->max_code;
    if (r->ieee_specials) return (sign << 7) | 0x7C;  // +-Inf
    if (r->nan_7f_only) return (sign << 7) | 0x7F;
    return 0x80;
}

static int ref_zero_code(const RefFmt* r, int sign) {
    return r->nan_80_only ? 0x00 : (sign << 7);
}

// Brute-force RNE: nearest grid point (virtual point included) by exhaustive search in double;
// ties go to the even code (the virtual point has the parity of max_code + 1).
static int ref_rne(const RefFmt* r, const RefGrid* g, float xf, int saturate) {
    double x = (double)xf;
    int sign = signbit(xf) ? 1 : 0;
    double a = fabs(x);
    if (isnan(x)) return r->nan_80_only ? 0x80 : ((sign << 7) | (r->ieee_specials ? 0x7E : 0x7F));
    if (isinf(x) || a >= g->virt) return ref_overflow_code(r, sign, saturate, g);
    int best = 0;
    double bestd = INFINITY;
    for (int c = 0; c <= g->ncodes; c++) {  // c == ncodes is the virtual point
        double v = c < g->ncodes ? g->val[c] : g->virt;
        double d = fabs(v - a);
        if (d < bestd || (d == bestd && (c & 1) == 0)) {
            bestd = d;
            best = c;
        }
    }
    if (best == g->ncodes) return ref_overflow_code(r, sign, saturate, g);
    if (best == 0) return ref_zero_code(r, sign);
    return (sign << 7) | best;
}

// The two grid neighbours lo <= |x| <= hi as codes (hi may be ncodes = the virtual point); for
// |x| above the virtual point both are ncodes.
static void ref_neighbours(const RefGrid* g, double a, int* lo, int* hi) {
    if (a >= g->virt) {
        *lo = *hi = g->ncodes;
        return;
    }
    int l = 0;
    while (l + 1 <= g->ncodes && (l + 1 < g->ncodes ? g->val[l + 1] : g->virt) <= a) l++;
    *lo = l;
    double vl = g->val[l];
    *hi = (vl == a) ? l : l + 1;
}

// Code that grid point c (possibly virtual) becomes for sign `sign`.
static int ref_point_code(const RefFmt* r, const RefGrid* g, int c, int sign, int saturate) {
    if (c == g->ncodes) return ref_overflow_code(r, sign, saturate, g);
    if (c == 0) return ref_zero_code(r, sign);
    return (sign << 7) | c;
}

// A random float spanning the format's range and beyond (subnormals, normals, overflow).
static float rand_float_for(const RefFmt* r) {
    double lo_e = log2(r->min_sub) - 4.0, hi_e = log2(r->max) + 3.0;
    double e = lo_e + (hi_e - lo_e) * rng_uniform();
    float x = (float)exp2(e);
    if (rng_next() & 1) x = -x;
    return x;
}

// ----------------------------------------------------------------------------------------------
// Descriptors and decode

static void test_descriptors(void) {
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        const RefFmt* r = &REF[k];
        FP8Format f = fp8_format(r->kind);
        CHECK(f.exp_bits == r->ebits && f.man_bits == r->mbits && f.bias == r->bias, "%s bits/bias", r->name);
        CHECK(f.max_finite == (float)r->max, "%s max %g", r->name, (double)f.max_finite);
        CHECK(f.has_inf == r->ieee_specials, "%s has_inf", r->name);
        CHECK(f.has_neg_zero == !r->nan_80_only, "%s has_neg_zero", r->name);
        CHECK((double)fp8_decode(f, (uint8_t)f.max_code) == r->max, "%s decode(max_code)", r->name);
        CHECK(strcmp(fp8_kind_name(r->kind), r->name) == 0, "%s name", r->name);
        CHECK(fp8_kind_from_name(r->name) == (int)r->kind, "%s from name", r->name);
    }
    CHECK(fp8_kind_from_name("e4m3") == -1 && fp8_kind_from_name(NULL) == -1, "unknown names");
}

static void test_decode_all_codes(void) {
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        const RefFmt* r = &REF[k];
        FP8Format f = fp8_format(r->kind);
        int bad = 0, nans = 0, infs = 0;
        for (int c = 0; c < 256; c++) {
            double ref = ref_decode(r, c);
            float got = fp8_decode(f, (uint8_t)c);
            int ok;
            if (isnan(ref)) {
                ok = isnan(got) && fp8_is_nan(f, (uint8_t)c) && !fp8_is_inf(f, (uint8_t)c);
                nans++;
            } else {
                // bit-exact, including the sign of zero
                ok = f2u(got) == f2u((float)ref) && (double)got == ref && !fp8_is_nan(f, (uint8_t)c);
                ok = ok && (fp8_is_inf(f, (uint8_t)c) == (isinf(ref) ? 1 : 0));
                if (isinf(ref)) infs++;
            }
            if (!ok && bad++ < 5) CHECK(0, "%s decode(0x%02X) = %.9g, expected %.9g", r->name, c, (double)got, ref);
        }
        CHECK(bad == 0, "%s: %d of 256 codes decode wrongly", r->name, bad);
        int exp_nans = r->ieee_specials ? 6 : (r->nan_7f_only ? 2 : 1);
        CHECK(nans == exp_nans && infs == (r->ieee_specials ? 2 : 0), "%s: %d NaN codes, %d Inf codes", r->name,
              nans, infs);
    }
}

static void check_decode(FP8Kind kind, int code, double expected) {
    float got = fp8_decode(fp8_format(kind), (uint8_t)code);
    int ok = isnan(expected) ? isnan(got) : ((double)got == expected && !!signbit(got) == !!signbit(expected));
    CHECK(ok, "%s decode(0x%02X) = %.9g, expected %.9g", fp8_kind_name(kind), code, (double)got, expected);
}

static void test_decode_known_values(void) {
    // E4M3FN
    check_decode(FP8_E4M3FN, 0x7E, 448.0);
    check_decode(FP8_E4M3FN, 0xFE, -448.0);
    check_decode(FP8_E4M3FN, 0x01, 0x1p-9);
    check_decode(FP8_E4M3FN, 0x07, 7 * 0x1p-9);
    check_decode(FP8_E4M3FN, 0x08, 0x1p-6);
    check_decode(FP8_E4M3FN, 0x38, 1.0);
    check_decode(FP8_E4M3FN, 0x39, 1.125);
    check_decode(FP8_E4M3FN, 0x7F, NAN);
    check_decode(FP8_E4M3FN, 0xFF, NAN);
    check_decode(FP8_E4M3FN, 0x78, 256.0);
    check_decode(FP8_E4M3FN, 0x00, 0.0);
    check_decode(FP8_E4M3FN, 0x80, -0.0);
    // E5M2
    check_decode(FP8_E5M2, 0x7B, 57344.0);
    check_decode(FP8_E5M2, 0x01, 0x1p-16);
    check_decode(FP8_E5M2, 0x04, 0x1p-14);
    check_decode(FP8_E5M2, 0x3C, 1.0);
    check_decode(FP8_E5M2, 0x7C, INFINITY);
    check_decode(FP8_E5M2, 0xFC, -INFINITY);
    check_decode(FP8_E5M2, 0x7D, NAN);
    check_decode(FP8_E5M2, 0x7E, NAN);
    check_decode(FP8_E5M2, 0xFF, NAN);
    check_decode(FP8_E5M2, 0x80, -0.0);
    // E4M3FNUZ
    check_decode(FP8_E4M3FNUZ, 0x80, NAN);
    check_decode(FP8_E4M3FNUZ, 0x7F, 240.0);
    check_decode(FP8_E4M3FNUZ, 0xFF, -240.0);
    check_decode(FP8_E4M3FNUZ, 0x01, 0x1p-10);
    check_decode(FP8_E4M3FNUZ, 0x08, 0x1p-7);
    check_decode(FP8_E4M3FNUZ, 0x40, 1.0);
    check_decode(FP8_E4M3FNUZ, 0x78, 128.0);
    // E5M2FNUZ
    check_decode(FP8_E5M2FNUZ, 0x80, NAN);
    check_decode(FP8_E5M2FNUZ, 0x7F, 57344.0);
    check_decode(FP8_E5M2FNUZ, 0x7C, 32768.0);
    check_decode(FP8_E5M2FNUZ, 0x01, 0x1p-17);
    check_decode(FP8_E5M2FNUZ, 0x40, 1.0);
    check_decode(FP8_E5M2FNUZ, 0x81, -0x1p-17);
}

// ----------------------------------------------------------------------------------------------
// RNE encode

static void test_roundtrip(void) {
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        const RefFmt* r = &REF[k];
        FP8Format f = fp8_format(r->kind);
        int bad = 0;
        for (int c = 0; c < 256; c++) {
            double v = ref_decode(r, c);
            if (isnan(v)) continue;
            float x = fp8_decode(f, (uint8_t)c);
            for (int sat = 0; sat <= 1; sat++) {
                int want = c;
                if (isinf(v) && sat) want = (c & 0x80) | f.max_code;  // Inf saturates
                int got = fp8_encode_rne(f, x, sat);
                if (got != want && bad++ < 5) CHECK(0, "%s sat=%d encode(decode(0x%02X)) = 0x%02X", r->name, sat, c, got);
                // stochastic rounding leaves exact values alone, whatever the random bits
                uint32_t bits[3] = {0u, 0xFFFFFFFFu, (uint32_t)rng_next()};
                for (int i = 0; i < 3; i++) {
                    int gs = fp8_encode_sr(f, x, bits[i], sat);
                    if (gs != want && bad++ < 5) CHECK(0, "%s sat=%d sr(decode(0x%02X), %08X) = 0x%02X", r->name, sat, c, bits[i], gs);
                }
            }
        }
        CHECK(bad == 0, "%s: %d round-trip failures", r->name, bad);
    }
}

// Midpoints between adjacent codes go to the even code; one float32 ulp either side goes to the
// nearer code. Includes 0 / smallest subnormal and max / first point past max.
static void test_ties(void) {
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        const RefFmt* r = &REF[k];
        FP8Format f = fp8_format(r->kind);
        RefGrid g;
        ref_grid(r, &g);
        int bad = 0, pairs = 0;
        for (int c = 0; c < g.ncodes; c++) {  // pair (c, c+1); c+1 == ncodes is the virtual point
            double lo = g.val[c], hi = c + 1 < g.ncodes ? g.val[c + 1] : g.virt;
            double mid = 0.5 * (lo + hi);
            float m = (float)mid;
            if ((double)m != mid) {
                CHECK(0, "%s: midpoint %.17g not a float", r->name, mid);
                continue;
            }
            pairs++;
            int even = (c & 1) == 0 ? c : c + 1;
            float below = nextafterf(m, 0.0f), above = nextafterf(m, INFINITY);
            for (int sat = 0; sat <= 1; sat++) {
                for (int sign = 0; sign <= 1; sign++) {
                    float s = sign ? -1.0f : 1.0f;
                    int w_mid = ref_point_code(r, &g, even, sign, sat);
                    int w_below = ref_point_code(r, &g, c, sign, sat);
                    int w_above = ref_point_code(r, &g, c + 1, sign, sat);
                    int g_mid = fp8_encode_rne(f, s * m, sat);
                    int g_below = fp8_encode_rne(f, s * below, sat);
                    int g_above = fp8_encode_rne(f, s * above, sat);
                    if ((g_mid != w_mid || g_below != w_below || g_above != w_above) && bad++ < 5) {
                        CHECK(0, "%s sat=%d x=%c%.9g: mid 0x%02X (want 0x%02X), below 0x%02X (0x%02X), above 0x%02X (0x%02X)",
                              r->name, sat, sign ? '-' : '+', mid, g_mid, w_mid, g_below, w_below, g_above, w_above);
                    }
                }
            }
        }
        CHECK(bad == 0 && pairs == g.ncodes, "%s: %d tie failures over %d adjacent pairs", r->name, bad, pairs);
    }
}

// Explicit overflow / saturation table (hard-coded from the rules).
typedef struct {
    FP8Kind kind;
    float x;
    int sat_code, nosat_code;
} OvfCase;

static void test_overflow_and_saturation(void) {
    const OvfCase cases[] = {
        {FP8_E4M3FN, 448.0f, 0x7E, 0x7E},
        {FP8_E4M3FN, 464.0f, 0x7E, 0x7E},  // tie between 448 (even) and 480 (would be 0x7F)
        {FP8_E4M3FN, 464.00003f, 0x7E, 0x7F},
        {FP8_E4M3FN, -465.0f, 0xFE, 0xFF},
        {FP8_E4M3FN, 480.0f, 0x7E, 0x7F},
        {FP8_E4M3FN, 1e6f, 0x7E, 0x7F},
        {FP8_E4M3FN, FLT_MAX, 0x7E, 0x7F},
        {FP8_E4M3FN, -FLT_MAX, 0xFE, 0xFF},
        {FP8_E4M3FN, INFINITY, 0x7E, 0x7F},
        {FP8_E4M3FN, -INFINITY, 0xFE, 0xFF},
        {FP8_E5M2, 57344.0f, 0x7B, 0x7B},
        {FP8_E5M2, 61439.996f, 0x7B, 0x7B},
        {FP8_E5M2, 61440.0f, 0x7B, 0x7C},  // tie between 57344 (odd) and 65536 (even) -> Inf
        {FP8_E5M2, -61440.0f, 0xFB, 0xFC},
        {FP8_E5M2, 1e9f, 0x7B, 0x7C},
        {FP8_E5M2, INFINITY, 0x7B, 0x7C},
        {FP8_E5M2, -INFINITY, 0xFB, 0xFC},
        {FP8_E4M3FNUZ, 240.0f, 0x7F, 0x7F},
        {FP8_E4M3FNUZ, 247.99998f, 0x7F, 0x7F},
        {FP8_E4M3FNUZ, 248.0f, 0x7F, 0x80},  // tie between 240 (odd) and 256 (even) -> overflow
        {FP8_E4M3FNUZ, -248.0f, 0xFF, 0x80},
        {FP8_E4M3FNUZ, INFINITY, 0x7F, 0x80},
        {FP8_E4M3FNUZ, -INFINITY, 0xFF, 0x80},
        {FP8_E5M2FNUZ, 57344.0f, 0x7F, 0x7F},
        {FP8_E5M2FNUZ, 61440.0f, 0x7F, 0x80},
        {FP8_E5M2FNUZ, -1e9f, 0xFF, 0x80},
        {FP8_E5M2FNUZ, INFINITY, 0x7F, 0x80},
        {FP8_E5M2FNUZ, -INFINITY, 0xFF, 0x80},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const OvfCase* t = &cases[i];
        FP8Format f = fp8_format(t->kind);
        int s = fp8_encode_rne(f, t->x, 1), n = fp8_encode_rne(f, t->x, 0);
        CHECK(s == t->sat_code && n == t->nosat_code, "%s x=%.9g: sat 0x%02X (want 0x%02X), nosat 0x%02X (want 0x%02X)",
              fp8_kind_name(t->kind), (double)t->x, s, t->sat_code, n, t->nosat_code);
        // stochastic rounding of values at or beyond the virtual point overflows the same way
        if (fabsf(t->x) >= 2.0f * f.max_finite || isinf(t->x)) {
            int ss = fp8_encode_sr(f, t->x, 0x12345678u, 1), sn = fp8_encode_sr(f, t->x, 0x12345678u, 0);
            CHECK(ss == t->sat_code && sn == t->nosat_code, "%s sr x=%.9g: 0x%02X 0x%02X", fp8_kind_name(t->kind),
                  (double)t->x, ss, sn);
        }
    }
    // the overflow helpers agree with the table
    CHECK(fp8_overflow_code(fp8_format(FP8_E5M2), 1) == 0xFC && fp8_overflow_code(fp8_format(FP8_E4M3FN), 0) == 0x7F &&
              fp8_overflow_code(fp8_format(FP8_E4M3FNUZ), 1) == 0x80,
          "fp8_overflow_code");
}

static void test_specials(void) {
    const float qnan = u2f(0x7FC00000u), nqnan = u2f(0xFFC00000u), snan_payload = u2f(0x7F800001u);
    const int nan_pos[FP8_NUM_KINDS] = {0x7F, 0x7E, 0x80, 0x80};
    const int nan_neg[FP8_NUM_KINDS] = {0xFF, 0xFE, 0x80, 0x80};
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        const RefFmt* r = &REF[k];
        FP8Format f = fp8_format(r->kind);
        for (int sat = 0; sat <= 1; sat++) {
            CHECK(fp8_encode_rne(f, qnan, sat) == nan_pos[k] && fp8_encode_rne(f, snan_payload, sat) == nan_pos[k],
                  "%s sat=%d NaN", r->name, sat);
            CHECK(fp8_encode_rne(f, nqnan, sat) == nan_neg[k], "%s sat=%d -NaN", r->name, sat);
            CHECK(fp8_encode_sr(f, qnan, 0u, sat) == nan_pos[k] && fp8_encode_sr(f, nqnan, 0u, sat) == nan_neg[k],
                  "%s sat=%d sr NaN", r->name, sat);
            CHECK(fp8_is_nan(f, (uint8_t)nan_pos[k]) && fp8_is_nan(f, (uint8_t)nan_neg[k]), "%s NaN codes are NaN", r->name);
            int negz = r->nan_80_only ? 0x00 : 0x80;
            CHECK(fp8_encode_rne(f, 0.0f, sat) == 0x00, "%s +0", r->name);
            CHECK(fp8_encode_rne(f, -0.0f, sat) == negz, "%s -0 -> 0x%02X", r->name, fp8_encode_rne(f, -0.0f, sat));
            CHECK(fp8_encode_sr(f, -0.0f, 0u, sat) == negz, "%s sr -0", r->name);
            // negative values that round to zero: -0 where it exists, else +0
            CHECK(fp8_encode_rne(f, -1e-30f, sat) == negz && fp8_encode_rne(f, 1e-30f, sat) == 0x00, "%s +-tiny", r->name);
            CHECK(fp8_encode_sr(f, -1e-30f, 0xFFFFFFFFu, sat) == negz, "%s sr -tiny (down)", r->name);
            // float32 subnormals round to zero; the smallest float32 normal too
            CHECK(fp8_encode_rne(f, u2f(0x00000001u), sat) == 0x00 && fp8_encode_rne(f, u2f(0x807FFFFFu), sat) == negz &&
                      fp8_encode_rne(f, FLT_MIN, sat) == 0x00,
                  "%s float32 subnormals", r->name);
            // half the smallest subnormal ties to 0, just above it rounds to the smallest subnormal
            float half = (float)(0.5 * r->min_sub);
            CHECK(fp8_encode_rne(f, half, sat) == 0x00 && fp8_encode_rne(f, nextafterf(half, 1.0f), sat) == 0x01 &&
                      fp8_encode_rne(f, -nextafterf(half, 1.0f), sat) == 0x81,
                  "%s underflow threshold", r->name);
        }
    }
}

// Randomized comparison with the brute-force nearest-even reference (both modes).
static void test_rne_vs_bruteforce(void) {
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        const RefFmt* r = &REF[k];
        FP8Format f = fp8_format(r->kind);
        RefGrid g;
        ref_grid(r, &g);
        int bad = 0, n = 0;
        for (int i = 0; i < 200000; i++) {
            float x;
            if (i % 4 == 3) {
                x = u2f((uint32_t)rng_next());  // any float32 bit pattern (NaN, Inf, subnormal, huge)
            } else if (i % 4 == 2) {
                // random point between two adjacent grid values (fine-grained)
                int c = (int)(rng_next() % (uint64_t)g.ncodes);
                double lo = g.val[c], hi = c + 1 < g.ncodes ? g.val[c + 1] : g.virt;
                x = (float)(lo + (hi - lo) * rng_uniform());
                if (rng_next() & 1) x = -x;
            } else {
                x = rand_float_for(r);
            }
            for (int sat = 0; sat <= 1; sat++) {
                int want = ref_rne(r, &g, x, sat), got = fp8_encode_rne(f, x, sat);
                n++;
                if (got != want && bad++ < 5) CHECK(0, "%s sat=%d x=%.9g (0x%08X): got 0x%02X, want 0x%02X", r->name, sat,
                                                    (double)x, f2u(x), got, want);
            }
        }
        CHECK(bad == 0, "%s: %d of %d random encodes differ from the brute-force reference", r->name, bad, n);
    }
}

// Monotonicity over a dense sweep of float32 patterns: decode(encode_sat(x)) is non-decreasing in
// x; non-saturating mode agrees with saturating mode below the overflow threshold and overflows
// for every x above it; encode is odd-symmetric.
static void test_monotone_sweep(void) {
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        const RefFmt* r = &REF[k];
        FP8Format f = fp8_format(r->kind);
        RefGrid g;
        ref_grid(r, &g);
        double prev = 0.0;
        int bad_mono = 0, bad_sym = 0, bad_ovf = 0, seen_ovf = 0;
        uint32_t last = 0x7F800000u;  // +Inf
        for (uint64_t u = 0; u <= last; u += 193) {
            float x = u2f((uint32_t)u);
            int cs = fp8_encode_rne(f, x, 1);
            double v = (double)fp8_decode(f, (uint8_t)cs);
            if (v < prev && bad_mono++ < 3) CHECK(0, "%s: not monotone at x=%.9g", r->name, (double)x);
            prev = v;
            int cn = fp8_encode_rne(f, x, 0);
            int ovf = (cn == ref_overflow_code(r, 0, 0, &g));
            if (ovf) seen_ovf = 1;
            if ((seen_ovf && !ovf) || (!ovf && cn != cs)) {
                if (bad_ovf++ < 3) CHECK(0, "%s: nosat 0x%02X vs sat 0x%02X at x=%.9g", r->name, cn, cs, (double)x);
            }
            int neg = fp8_encode_rne(f, -x, 1);
            int want_neg = (cs == 0) ? (r->nan_80_only ? 0x00 : 0x80) : (cs | 0x80);
            if (neg != want_neg && bad_sym++ < 3) CHECK(0, "%s: encode(-x) 0x%02X vs 0x%02X", r->name, neg, want_neg);
        }
        CHECK(bad_mono == 0 && bad_sym == 0 && bad_ovf == 0 && seen_ovf, "%s: sweep mono %d sym %d ovf %d", r->name,
              bad_mono, bad_sym, bad_ovf);
    }
}

// ----------------------------------------------------------------------------------------------
// Stochastic rounding

// Results are always one of the two neighbours (random x, random bits, both modes); bits 0 round
// away from zero and bits 0xFFFFFFFF toward zero for inexact values.
static void test_sr_neighbours(void) {
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        const RefFmt* r = &REF[k];
        FP8Format f = fp8_format(r->kind);
        RefGrid g;
        ref_grid(r, &g);
        int bad = 0, bad_edge = 0;
        for (int i = 0; i < 100000; i++) {
            float x = (i & 1) ? rand_float_for(r) : (float)(g.val[rng_next() % (uint64_t)g.ncodes] * (1.0 + 0.2 * rng_uniform()));
            if ((i & 2) && x > 0) x = -x;
            int sign = signbit(x) ? 1 : 0;
            double a = fabs((double)x);
            int lo, hi;
            ref_neighbours(&g, a, &lo, &hi);
            for (int sat = 0; sat <= 1; sat++) {
                int clo = ref_point_code(r, &g, lo, sign, sat), chi = ref_point_code(r, &g, hi, sign, sat);
                int got = fp8_encode_sr(f, x, (uint32_t)rng_next(), sat);
                if (got != clo && got != chi && bad++ < 5)
                    CHECK(0, "%s sat=%d sr(%.9g) = 0x%02X not in {0x%02X, 0x%02X}", r->name, sat, (double)x, got, clo, chi);
                // the extreme random words select the far / near neighbour (fraction >= 2^-32 here:
                // every x drawn is >= min_sub / 16, so the fraction of a step is far above 2^-32)
                int up = fp8_encode_sr(f, x, 0u, sat), down = fp8_encode_sr(f, x, 0xFFFFFFFFu, sat);
                if ((up != chi || down != clo) && bad_edge++ < 5)
                    CHECK(0, "%s sat=%d sr(%.9g): bits 0 -> 0x%02X (want 0x%02X), bits ~0 -> 0x%02X (want 0x%02X)",
                          r->name, sat, (double)x, up, chi, down, clo);
            }
        }
        CHECK(bad == 0 && bad_edge == 0, "%s: %d SR results outside the neighbours, %d edge failures", r->name, bad, bad_edge);
    }
}

// Mean over 1e5 draws of a value 30% of the way between two grid points is within 4 sigma of the
// value (unbiased), for normal, subnormal, below-smallest-subnormal, near-max and negative values.
typedef struct {
    FP8Kind kind;
    int lo_code;  // the lower neighbour (non-negative code); the upper is lo_code + 1
    int negative;
    int sat;
} SrMeanCase;

static void test_sr_unbiased(void) {
    const SrMeanCase cases[] = {
        {FP8_E4M3FN, 0x38, 0, 1},  // 1.0 .. 1.125
        {FP8_E4M3FN, 0x01, 0, 1},  // subnormal 2^-9 .. 2^-8
        {FP8_E4M3FN, 0x00, 0, 1},  // 0 .. smallest subnormal
        {FP8_E4M3FN, 0x07, 1, 1},  // largest subnormal .. smallest normal, negative
        {FP8_E4M3FN, 0x7D, 0, 1},  // 416 .. 448
        {FP8_E5M2, 0x3C, 0, 1},
        {FP8_E5M2, 0x02, 1, 0},    // subnormal, negative
        {FP8_E5M2, 0x7A, 0, 0},    // 49152 .. 57344
        {FP8_E4M3FNUZ, 0x40, 0, 1},
        {FP8_E4M3FNUZ, 0x03, 0, 0},
        {FP8_E4M3FNUZ, 0x00, 1, 1},  // -(0 .. 2^-10): zero results are +0 (0x00)
        {FP8_E5M2FNUZ, 0x41, 1, 1},
        {FP8_E5M2FNUZ, 0x01, 0, 0},
    };
    const int N = 100000;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const SrMeanCase* t = &cases[i];
        const RefFmt* r = &REF[t->kind];
        FP8Format f = fp8_format(t->kind);
        double lo = ref_decode(r, t->lo_code), hi = ref_decode(r, t->lo_code + 1);
        float xm = (float)(lo + 0.3 * (hi - lo));
        double p = ((double)xm - lo) / (hi - lo);  // the exact fraction of the float actually used
        float x = t->negative ? -xm : xm;
        double sum = 0.0;
        int n_hi = 0, other = 0;
        for (int j = 0; j < N; j++) {
            uint8_t c = fp8_encode_sr(f, x, fp8_random_bits(1234u + i, (uint64_t)j), t->sat);
            double v = fabs((double)fp8_decode(f, c));
            if (v == hi) n_hi++;
            else if (v != lo) other++;
            sum += (double)fp8_decode(f, c);
        }
        double mean = sum / N;
        double sigma = (hi - lo) * sqrt(p * (1.0 - p) / N);
        CHECK(other == 0 && fabs(mean - (double)x) <= 4.0 * sigma,
              "%s lo=0x%02X neg=%d: mean %.9g vs x %.9g (4 sigma %.3g), P(hi) %.4f vs %.4f, %d other",
              fp8_kind_name(t->kind), t->lo_code, t->negative, mean, (double)x, 4.0 * sigma, (double)n_hi / N, p, other);
    }
}

static void test_random_bits(void) {
    // reproducible: a fixed (seed, index) gives fixed bits; different seeds / indices differ
    int same = 1, diff_seed = 0, diff_index = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        uint32_t a = fp8_random_bits(42u, i), b = fp8_random_bits(42u, i);
        same &= (a == b);
        diff_seed += (a != fp8_random_bits(43u, i));
        diff_index += (a != fp8_random_bits(42u, i + 1));
    }
    CHECK(same && diff_seed >= 990 && diff_index >= 990, "random bits: same %d, diff seed %d, diff index %d", same,
          diff_seed, diff_index);
    // stochastic encodes of a vector are identical for the same seed and change with the seed
    FP8Format f = fp8_format(FP8_E4M3FN);
    int eq = 1, ne = 0;
    for (uint64_t i = 0; i < 4096; i++) {
        float x = 1.0f + (float)(i % 97) * 0.0013f;
        uint8_t c1 = fp8_encode_sr(f, x, fp8_random_bits(7u, i), 1);
        uint8_t c2 = fp8_encode_sr(f, x, fp8_random_bits(7u, i), 1);
        uint8_t c3 = fp8_encode_sr(f, x, fp8_random_bits(8u, i), 1);
        eq &= (c1 == c2);
        ne += (c1 != c3);
    }
    CHECK(eq && ne > 100, "SR reproducible for a seed (%d), differs across seeds (%d of 4096)", eq, ne);
    // rough uniformity: mean of the 32-bit words and balance of every bit
    const int N = 200000;
    double mean = 0.0;
    int bitcount[32] = {0};
    for (int i = 0; i < N; i++) {
        uint32_t w = fp8_random_bits(99u, (uint64_t)i);
        mean += (double)w * 0x1p-32;
        for (int b = 0; b < 32; b++) bitcount[b] += (w >> b) & 1u;
    }
    mean /= N;
    int bits_ok = 1;
    for (int b = 0; b < 32; b++) {
        double fr = (double)bitcount[b] / N;
        if (fabs(fr - 0.5) > 4.0 * sqrt(0.25 / N)) bits_ok = 0;
    }
    CHECK(fabs(mean - 0.5) < 4.0 * sqrt(1.0 / 12.0 / N) && bits_ok, "random bits uniform: mean %.5f", mean);
}

// ----------------------------------------------------------------------------------------------
// Scales and block amax

static void test_scales(void) {
    FP8Format e4 = fp8_format(FP8_E4M3FN), e5 = fp8_format(FP8_E5M2), e4z = fp8_format(FP8_E4M3FNUZ);
    // degenerate amax -> 1
    const float bad_amax[] = {0.0f, -0.0f, -3.0f, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof(bad_amax) / sizeof(bad_amax[0]); i++) {
        CHECK(fp8_scale_from_amax(e4, bad_amax[i], 0) == 1.0f && fp8_scale_pow2_from_amax(e4, bad_amax[i], 0) == 1.0f,
              "amax %g -> scale 1", (double)bad_amax[i]);
    }
    CHECK(fp8_scale_from_amax(e4, 2.0f, 0) == 224.0f, "e4m3fn amax 2 -> 224 (%g)", (double)fp8_scale_from_amax(e4, 2.0f, 0));
    CHECK(fp8_scale_from_amax(e4, 2.0f, 1) == 112.0f && fp8_scale_from_amax(e4, 2.0f, -2) == 896.0f, "margin");
    CHECK(fp8_scale_from_amax(e5, 57344.0f, 0) == 1.0f && fp8_scale_from_amax(e4z, 0.5f, 0) == 480.0f, "e5m2 / e4m3fnuz");
    CHECK(fp8_scale_from_amax(e4, 1e-40f, 0) == FLT_MAX, "tiny amax clamps to FLT_MAX");
    // pow2: exact floor(log2(max / amax))
    struct {
        FP8Format f;
        float amax;
        int margin;
        float want;
    } p2[] = {
        {e4, 1.0f, 0, 256.0f},   {e4, 448.0f, 0, 1.0f},      {e4, 449.0f, 0, 0.5f},
        {e4, 3.5f, 0, 128.0f},   {e4, 3.5000002f, 0, 64.0f}, {e4, 3.4999998f, 0, 128.0f},
        {e4, 0.4375f, 0, 1024.0f}, {e4, 1.0f, 3, 32.0f},     {e5, 1.0f, 0, 32768.0f},
        {e5, 1.75f, 0, 32768.0f}, {e5, 1.7500001f, 0, 16384.0f}, {e4z, 240.0f, 0, 1.0f},
        {e4z, 1e-40f, 0, 0x1p127f}, {e4, FLT_MAX, 0, 0x1p-120f},
    };
    for (size_t i = 0; i < sizeof(p2) / sizeof(p2[0]); i++) {
        float s = fp8_scale_pow2_from_amax(p2[i].f, p2[i].amax, p2[i].margin);
        CHECK(s == p2[i].want, "pow2 scale max %g amax %.9g margin %d: %.9g, want %.9g", (double)p2[i].f.max_finite,
              (double)p2[i].amax, p2[i].margin, (double)s, (double)p2[i].want);
    }
    // random amax over a wide range: per-tensor scale maps amax onto max (no overflow even in the
    // non-saturating mode); pow2 scale is a power of two with amax * s in (max/2, max]
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        const RefFmt* r = &REF[i % FP8_NUM_KINDS];
        FP8Format f = fp8_format(r->kind);
        float amax = (float)exp2(-60.0 + 120.0 * rng_uniform());
        float s = fp8_scale_from_amax(f, amax, 0);
        uint8_t c = fp8_encode_rne(f, amax * s, 0);
        int ok = (c == f.max_code) && fabs((double)amax * s / r->max - 1.0) < 1e-6;
        float s2 = fp8_scale_pow2_from_amax(f, amax, 0);
        int ex;
        double frac = frexp((double)s2, &ex);
        double scaled = (double)amax * (double)s2;
        ok = ok && frac == 0.5 && scaled <= r->max && scaled > r->max / 2.0;
        // margin m lowers the pow2 scale by exactly 2^m
        ok = ok && fp8_scale_pow2_from_amax(f, amax, 2) == s2 / 4.0f;
        if (!ok && bad++ < 5) CHECK(0, "%s amax %.9g: scale %.9g code 0x%02X, pow2 %.9g", r->name, (double)amax, (double)s, c,
                                    (double)s2);
    }
    CHECK(bad == 0, "%d random scale failures", bad);
}

static void test_block_amax(void) {
    enum { M = 3, K = 200 };
    static float x[M * K];
    for (int i = 0; i < M * K; i++) x[i] = (float)((rng_uniform() - 0.5) * exp2(-8.0 + 16.0 * rng_uniform()));
    x[1 * K + 70] = -1000.0f;  // a large negative value in row 1, block 70/64 = 1 (block 64)
    const int blocks[] = {32, 64, 128};
    for (int bi = 0; bi < 3; bi++) {
        int B = blocks[bi];
        int nb_want = (K + B - 1) / B;
        static float got[M * K];
        int nb = fp8_block_amax_rowmajor(x, M, K, B, got);
        CHECK(nb == nb_want, "block %d: %d blocks, want %d", B, nb, nb_want);
        int bad = 0;
        for (int m = 0; m < M; m++) {
            for (int b = 0; b < nb_want; b++) {
                double want = 0.0;
                for (int k = b * B; k < K && k < (b + 1) * B; k++) {
                    if (fabs((double)x[m * K + k]) > want) want = fabs((double)x[m * K + k]);
                }
                if ((double)got[m * nb_want + b] != want) bad++;
            }
        }
        CHECK(bad == 0, "block %d: %d block amax values differ from the naive loop", B, bad);
        // block scaling: every scaled element fits, the block maximum lands in (max/2, max]
        FP8Format f = fp8_format(FP8_E4M3FN);
        int bad_q = 0;
        for (int m = 0; m < M; m++) {
            for (int b = 0; b < nb_want; b++) {
                float s = fp8_scale_pow2_from_amax(f, got[m * nb_want + b], 0);
                double top = (double)got[m * nb_want + b] * s;
                if (!(top <= 448.0 && top > 224.0)) bad_q++;
                for (int k = b * B; k < K && k < (b + 1) * B; k++) {
                    float y = x[m * K + k] * s;
                    uint8_t c = fp8_encode_rne(f, y, 0);
                    if (fp8_is_nan(f, c) || fabsf(y) > 448.0f) bad_q++;
                    // relative error of a normal result is at most 2^-4
                    double d = (double)fp8_decode(f, c) / s;
                    if (fabs(y) >= 0x1p-6 && fabs(d - x[m * K + k]) > 0x1p-4 * fabs((double)x[m * K + k])) bad_q++;
                }
            }
        }
        CHECK(bad_q == 0, "block %d: %d block-scaled quantization failures", B, bad_q);
    }
    CHECK(x[1 * K + 70] == -1000.0f, "input untouched");
    // NaN propagates to its block only
    static float y[2 * 64];
    for (int i = 0; i < 128; i++) y[i] = (float)(i % 7) - 3.0f;
    y[64 + 5] = NAN;
    float am[4];
    int nb = fp8_block_amax_rowmajor(y, 2, 64, 32, am);
    CHECK(nb == 2 && am[0] == 3.0f && am[1] == 3.0f && isnan(am[2]) && am[3] == 3.0f, "NaN block: %g %g %g %g",
          (double)am[0], (double)am[1], (double)am[2], (double)am[3]);
    // invalid arguments
    CHECK(fp8_block_amax_rowmajor(y, 2, 64, 0, am) == -1 && fp8_block_amax_rowmajor(y, -1, 64, 32, am) == -1 &&
              fp8_block_amax_rowmajor(NULL, 2, 64, 32, am) == -1 && fp8_block_amax_rowmajor(y, 0, 0, 32, NULL) == 0,
          "invalid arguments");
    CHECK(fp8_num_blocks(200, 64) == 4 && fp8_num_blocks(256, 128) == 2 && fp8_num_blocks(1, 32) == 1, "fp8_num_blocks");
}

int main(void) {
    test_descriptors();
    test_decode_all_codes();
    test_decode_known_values();
    test_roundtrip();
    test_ties();
    test_overflow_and_saturation();
    test_specials();
    test_rne_vs_bruteforce();
    test_monotone_sweep();
    test_sr_neighbours();
    test_sr_unbiased();
    test_random_bits();
    test_scales();
    test_block_amax();
    return test_summary();
}
