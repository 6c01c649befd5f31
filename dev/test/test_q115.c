/*
 * test_q115.c - host tests for llmc/numerics/q115.h (Q1.15 / Q1.31 quantize-dequantize of SF16).
 *
 * build: cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_q115.c -lm   (make test builds it too)
 *
 * Compile checks of the header outside C (run by hand; not done by this binary):
 *   g++ -std=c++17 -Wall -Wextra -x c++ -fsyntax-only -I. llmc/numerics/q115.h
 *   nvcc -std=c++17 -arch=sm_90 [--use_fast_math] -I. -x cu -c k.cu, where k.cu includes the header
 *   and has a __global__ kernel that calls every API function on device.
 *
 * Device/host agreement (a later dev/cuda harness, not part of this file): the header is pure
 * integer arithmetic on float bit patterns, so host and device agree by construction. The GPU check
 * will run float_to_q115, simulate_q115, simulate_q131, q115_is_clipped and q115_is_flushed in a
 * kernel over all 2^32 float bit patterns (built with the project's --use_fast_math flags, so with
 * FTZ), reduce the mismatches against the same functions run on the host (and against a device
 * formulation with __float2int_rn(clamped x * 32768.0f)), and require zero mismatches; NaN results
 * are compared as "is NaN".
 *
 * What this file checks: constants; all 65,536 codes round-trip; the value set and monotonicity of
 * simulate_q115 over dense sweeps; the clamp; ties to even at every half-step; idempotence;
 * NaN/Inf; every BF16 value with 2^-8 <= |x| < 1 passes unchanged; the flush to zero around 2^-16;
 * simulate_q131 (grid, ties, clamp to +-1.0f); the diagnostics helpers; and agreement with two
 * independent references (double with floor(y + 0.5) plus a tie fix-up, and lrintf / llrint under
 * the default rounding mode) over 10^7 uniform floats in [-2, 2], 10^7 random bit patterns and
 * special values.
 */
#include <fenv.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dev/test/test_harness.h"
#include "llmc/numerics/bf16.h"
#include "llmc/numerics/q115.h"

// ---- helpers ---------------------------------------------------------------------------------

static float f_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

// Same float, bit for bit (so +0 != -0 and NaN == NaN with the same payload).
static int same_bits(float a, float b) { return bits_of(a) == bits_of(b); }

// The float at position k in the total order of non-NaN floats: k = 0 is +0, k < 0 negative.
static float f_from_ordered(int64_t k) {
    return k >= 0 ? f_from_bits((uint32_t)k) : f_from_bits(0x80000000u | (uint32_t)(-k));
}

static uint64_t rng_state = 0x5F3759DF12345678ull;
static uint64_t rng_next(void) {  // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const double T = 32767.0 / 32768.0;        // Q1.15 threshold, exact in double
static const double T31 = 1.0 - 1.0 / 2147483648.0;  // Q1.31 clamp, exact in double (not in float)

// Reference 1 for float_to_q115: double arithmetic, floor(y + 0.5) with an explicit tie fix-up.
// y = x * 2^15 is exact in double; y + 0.5 is exact whenever it matters (y has 24 significant bits
// and |y| < 2^15; when y is so tiny that y + 0.5 rounds, floor gives 0, which is right).
static int ref_q115_double(float x) {
    if (isnan(x)) return 0;
    double d = (double)x;
    if (d > T) d = T;
    if (d < -T) d = -T;
    double y = d * 32768.0;
    double f = floor(y + 0.5);
    if (f - y == 0.5 && fmod(f, 2.0) != 0.0) f -= 1.0;  // exact tie rounded up to odd: go to even
    return (int)f;
}

// Reference 2 for float_to_q115: the C library's lrintf (round to nearest even in FE_TONEAREST).
static int ref_q115_lrintf(float x) {
    if (isnan(x)) return 0;
    float c = x > (float)T ? (float)T : (x < -(float)T ? -(float)T : x);
    return (int)lrintf(c * 32768.0f);
}

// Reference 1 for simulate_q131: double arithmetic as above, then the nearest float (cast).
static float ref_q131_double(float x) {
    if (isnan(x)) return x;
    double d = (double)x;
    if (d > T31) d = T31;
    if (d < -T31) d = -T31;
    double y = d * 2147483648.0;  // exact in double
    double f = floor(y + 0.5);
    if (f - y == 0.5 && fmod(f, 2.0) != 0.0) f -= 1.0;
    return (float)(f / 2147483648.0) + 0.0f;  // + 0.0f: a zero result is +0.0f, like the header
}

// Reference 2 for simulate_q131: llrint in double.
static float ref_q131_llrint(float x) {
    if (isnan(x)) return x;
    double d = (double)x;
    if (d > T31) d = T31;
    if (d < -T31) d = -T31;
    return (float)((double)llrint(d * 2147483648.0) / 2147483648.0) + 0.0f;
}

// Reference for simulate_q115 built on reference 1.
static float ref_sim_q115(float x) {
    if (isnan(x)) return x;
    return (float)((double)ref_q115_double(x) / 32768.0) + 0.0f;
}

// ---- tests -----------------------------------------------------------------------------------

static void test_constants(void) {
    CHECK(Q115_SCALE == 32768.0f, "Q115_SCALE = %g", (double)Q115_SCALE);
    CHECK((double)Q115_OVERFLOW_THRESHOLD == 32767.0 / 32768.0, "threshold = %.17g",
          (double)Q115_OVERFLOW_THRESHOLD);
    CHECK(bits_of(Q115_OVERFLOW_THRESHOLD) == 0x3F7FFE00u, "threshold bits 0x%08X",
          bits_of(Q115_OVERFLOW_THRESHOLD));
    CHECK(sizeof(float_to_q115(0.0f)) == 2, "float_to_q115 returns a 16-bit code");
    CHECK(fegetround() == FE_TONEAREST, "host rounding mode is round-to-nearest (references need it)");
}

static void test_all_codes(void) {
    int bad_value = 0, bad_trip = 0, first = 99999;
    for (int c = -32768; c <= 32767; c++) {
        float f = q115_to_float((int16_t)c);
        if ((double)f != (double)c / 32768.0) bad_value++;
        if (c == -32768) continue;
        if (float_to_q115(f) != c || !same_bits(simulate_q115(f), f + 0.0f)) {
            if (bad_trip++ == 0) first = c;
        }
    }
    CHECK(bad_value == 0, "%d codes decode to something other than c/32768", bad_value);
    CHECK(bad_trip == 0, "%d codes fail float_to_q115(q115_to_float(c)) == c, first %d", bad_trip, first);
    CHECK(q115_to_float((int16_t)-32768) == -1.0f, "code -32768 decodes to -1.0");
    CHECK(float_to_q115(q115_to_float((int16_t)-32768)) == -32767, "-1.0 clamps to code -32767");
    CHECK(q115_to_float(32767) == Q115_OVERFLOW_THRESHOLD, "code 32767 decodes to the threshold");
    CHECK(same_bits(q115_to_float(0), 0.0f), "code 0 decodes to +0.0");
}

// Records one simulate_q115 output into the code histogram; returns 0 if it is not a valid code.
static int record_code(float r, unsigned char* hit) {
    float c = r * 32768.0f;  // exact for every Q1.15 value
    if (!(c >= -32767.0f && c <= 32767.0f) || c != floorf(c)) return 0;
    if ((double)r != (double)c / 32768.0) return 0;
    hit[(int)c + 32768] = 1;
    return 1;
}

// Dense linear sweep of [-1.1, 1.1] (2^24 + 1 points, step ~1.3e-7, ~235 points per Q1.15 step):
// value set, monotonicity, idempotence, agreement with the reference.
static void test_linear_sweep(void) {
    static unsigned char hit[65536];
    memset(hit, 0, sizeof(hit));
    const int64_t n = (int64_t)1 << 24;
    int64_t bad_set = 0, bad_mono = 0, bad_idem = 0, bad_ref = 0;
    float prev = -INFINITY;
    float first_mono = 0.0f;
    for (int64_t i = 0; i <= n; i++) {
        float x = (float)(-1.1 + 2.2 * (double)i / (double)n);
        float r = simulate_q115(x);
        if (!record_code(r, hit)) bad_set++;
        if (r < prev && bad_mono++ == 0) first_mono = x;
        prev = r;
        if (!same_bits(simulate_q115(r), r)) bad_idem++;
        if (!same_bits(r, ref_sim_q115(x))) bad_ref++;
    }
    int missing = 0;
    for (int c = -32767; c <= 32767; c++) missing += !hit[c + 32768];
    CHECK(bad_set == 0, "%lld outputs are not code/32768 with code in [-32767, 32767]", (long long)bad_set);
    CHECK(missing == 0, "%d codes in [-32767, 32767] never produced by the sweep", missing);
    CHECK(!hit[0], "code -32768 (-1.0) is produced by simulate_q115");
    CHECK(bad_mono == 0, "%lld decreases, first at x = %.9g", (long long)bad_mono, (double)first_mono);
    CHECK(bad_idem == 0, "%lld points where simulate_q115 is not idempotent", (long long)bad_idem);
    CHECK(bad_ref == 0, "%lld points disagree with the double reference", (long long)bad_ref);
}

// Every non-NaN float in increasing order with a stride (all exponents, subnormals, Inf):
// monotone, idempotent, valid codes, and agreement with both references.
static void test_ordered_sweep(void) {
    static unsigned char hit[65536];
    const int64_t lo = -(int64_t)0x7F800000, hi = (int64_t)0x7F800000;  // -Inf .. +Inf
    const int64_t stride = 97;
    int64_t bad_set = 0, bad_mono = 0, bad_idem = 0, bad_ref = 0, bad_lrint = 0, count = 0;
    float prev = -INFINITY, prev131 = -INFINITY;
    int64_t bad_mono131 = 0, bad_idem131 = 0;
    for (int64_t k = lo;; k += stride) {
        if (k > hi) k = hi;
        float x = f_from_ordered(k);
        float r = simulate_q115(x);
        count++;
        if (!record_code(r, hit)) bad_set++;
        if (r < prev) bad_mono++;
        prev = r;
        if (!same_bits(simulate_q115(r), r)) bad_idem++;
        int q = float_to_q115(x);
        if (q != ref_q115_double(x)) bad_ref++;
        if (q != ref_q115_lrintf(x)) bad_lrint++;
        float r31 = simulate_q131(x);
        if (r31 < prev131) bad_mono131++;
        prev131 = r31;
        if (!same_bits(simulate_q131(r31), r31)) bad_idem131++;
        if (k == hi) break;
    }
    CHECK(count > 40000000, "ordered sweep covered %lld floats", (long long)count);
    CHECK(bad_set == 0, "%lld outputs are not valid codes", (long long)bad_set);
    CHECK(bad_mono == 0, "%lld decreases of simulate_q115 over ordered floats", (long long)bad_mono);
    CHECK(bad_idem == 0, "%lld non-idempotent simulate_q115 points", (long long)bad_idem);
    CHECK(bad_ref == 0, "%lld float_to_q115 disagreements with the double reference", (long long)bad_ref);
    CHECK(bad_lrint == 0, "%lld float_to_q115 disagreements with lrintf", (long long)bad_lrint);
    CHECK(bad_mono131 == 0, "%lld decreases of simulate_q131", (long long)bad_mono131);
    CHECK(bad_idem131 == 0, "%lld non-idempotent simulate_q131 points", (long long)bad_idem131);
}

static void test_clamp(void) {
    const float T32 = Q115_OVERFLOW_THRESHOLD;
    const float pos[] = {1.0f, 2.0f, 1e30f, FLT_MAX, 0.99999f, nextafterf(T32, 2.0f), 1.0000001f};
    const float neg[] = {-1.0f, -5.0f, -1e30f, -FLT_MAX, -0.99999f, -nextafterf(T32, 2.0f)};
    for (size_t i = 0; i < sizeof(pos) / sizeof(pos[0]); i++) {
        CHECK(float_to_q115(pos[i]) == 32767, "float_to_q115(%.9g) = %d", (double)pos[i], float_to_q115(pos[i]));
        CHECK(simulate_q115(pos[i]) == 0.999969482421875f, "simulate_q115(%.9g) = %.9g", (double)pos[i],
              (double)simulate_q115(pos[i]));
        CHECK(q115_is_clipped(pos[i]), "%.9g counts as clipped", (double)pos[i]);
    }
    for (size_t i = 0; i < sizeof(neg) / sizeof(neg[0]); i++) {
        CHECK(float_to_q115(neg[i]) == -32767, "float_to_q115(%.9g) = %d", (double)neg[i], float_to_q115(neg[i]));
        CHECK(simulate_q115(neg[i]) == -0.999969482421875f, "simulate_q115(%.9g) = %.9g", (double)neg[i],
              (double)simulate_q115(neg[i]));
        CHECK(q115_is_clipped(neg[i]), "%.9g counts as clipped", (double)neg[i]);
    }
    // the threshold itself and values just inside are not clipped
    CHECK(simulate_q115(T32) == T32 && !q115_is_clipped(T32), "threshold passes unclipped");
    CHECK(simulate_q115(-T32) == -T32 && !q115_is_clipped(-T32), "-threshold passes unclipped");
    float below = nextafterf(T32, 0.0f);  // rounds to the threshold, without clamping
    CHECK(simulate_q115(below) == T32 && !q115_is_clipped(below), "just below threshold: rounds, not clipped");
    CHECK(!q115_is_clipped(0.5f) && !q115_is_clipped(-0.5f) && !q115_is_clipped(0.0f), "in-range not clipped");
    // q115_is_clipped agrees with its definition over random values
    int bad = 0;
    for (int i = 0; i < 1000000; i++) {
        float x = f_from_bits((uint32_t)rng_next());
        if (isnan(x)) continue;
        if (q115_is_clipped(x) != (fabsf(x) > T32)) bad++;
    }
    CHECK(bad == 0, "q115_is_clipped disagrees with |x| > threshold on %d random floats", bad);
}

// Every half-step (k + 0.5) / 32768 for k in [-32767, 32766] (both signs): ties go to the even code;
// the neighbours just below / above go down / up.
static void test_ties(void) {
    int bad_tie = 0, bad_lo = 0, bad_hi = 0, first = 99999;
    for (int k = -32767; k <= 32766; k++) {
        float x = (float)(((double)k + 0.5) / 32768.0);  // exact: 17 significant bits at most
        int even = (k % 2 == 0) ? k : k + 1;
        if (float_to_q115(x) != even && bad_tie++ == 0) first = k;
        if (float_to_q115(nextafterf(x, -INFINITY)) != k) bad_lo++;
        if (float_to_q115(nextafterf(x, INFINITY)) != k + 1) bad_hi++;
    }
    CHECK(bad_tie == 0, "%d half-steps not rounded to even, first k = %d", bad_tie, first);
    CHECK(bad_lo == 0, "%d values just below a half-step not rounded down", bad_lo);
    CHECK(bad_hi == 0, "%d values just above a half-step not rounded up", bad_hi);
    // spot values, both signs
    CHECK(float_to_q115(0.5f / 32768.0f) == 0 && float_to_q115(-0.5f / 32768.0f) == 0, "+-0.5 step -> 0");
    CHECK(float_to_q115(1.5f / 32768.0f) == 2 && float_to_q115(-1.5f / 32768.0f) == -2, "+-1.5 steps -> +-2");
    CHECK(float_to_q115(2.5f / 32768.0f) == 2 && float_to_q115(-2.5f / 32768.0f) == -2, "+-2.5 steps -> +-2");
    CHECK(float_to_q115(32765.5f / 32768.0f) == 32766, "32765.5 steps -> 32766");
    CHECK(float_to_q115(32766.5f / 32768.0f) == 32766, "32766.5 steps -> 32766 (even, no clamp)");
    CHECK(float_to_q115(-32766.5f / 32768.0f) == -32766, "-32766.5 steps -> -32766");
    CHECK(float_to_q115(-32767.5f / 32768.0f) == -32767, "-32767.5 steps -> clamp -32767");
}

static void test_nan_inf(void) {
    const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7FA12345u};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        float n = f_from_bits(nans[i]);
        CHECK(float_to_q115(n) == 0, "float_to_q115(NaN 0x%08X) = %d", nans[i], float_to_q115(n));
        CHECK(same_bits(simulate_q115(n), n), "simulate_q115 keeps NaN 0x%08X", nans[i]);
        CHECK(same_bits(simulate_q131(n), n), "simulate_q131 keeps NaN 0x%08X", nans[i]);
        CHECK(!q115_is_clipped(n) && !q115_is_flushed(n), "NaN 0x%08X is neither clipped nor flushed", nans[i]);
    }
    CHECK(float_to_q115(INFINITY) == 32767, "+Inf -> 32767");
    CHECK(float_to_q115(-INFINITY) == -32767, "-Inf -> -32767");
    CHECK(simulate_q115(INFINITY) == Q115_OVERFLOW_THRESHOLD, "simulate_q115(+Inf) = threshold");
    CHECK(simulate_q115(-INFINITY) == -Q115_OVERFLOW_THRESHOLD, "simulate_q115(-Inf) = -threshold");
    CHECK(simulate_q131(INFINITY) == 1.0f && simulate_q131(-INFINITY) == -1.0f, "simulate_q131(+-Inf) = +-1");
    CHECK(q115_is_clipped(INFINITY) && q115_is_clipped(-INFINITY), "+-Inf count as clipped");
    CHECK(!q115_is_flushed(INFINITY) && !q115_is_flushed(-INFINITY), "+-Inf are not flushed");
}

// Every BF16 value with 2^-8 <= |x| < 1 lies on the 2^-15 grid and survives exactly (seed README).
static void test_bf16(void) {
    int n = 0, bad = 0, small_changed = 0, big_clipped = 0, big = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float x = bf16_to_float((uint16_t)b);
        if (isnan(x)) continue;
        float ax = fabsf(x);
        if (ax >= 0.00390625f && ax < 1.0f) {
            n++;
            if (!same_bits(simulate_q115(x), x) || q115_is_clipped(x) || q115_is_flushed(x)) bad++;
        } else if (ax > 0.0f && ax < 0.00390625f) {
            small_changed += simulate_q115(x) != x;
        } else if (ax >= 1.0f) {
            big++;
            big_clipped += q115_is_clipped(x);
        }
    }
    CHECK(n == 2 * 8 * 128, "%d BF16 values in 2^-8 <= |x| < 1 (expected 2048)", n);
    CHECK(bad == 0, "%d BF16 values in 2^-8 <= |x| < 1 changed by simulate_q115", bad);
    CHECK(small_changed > 0, "some BF16 values below 2^-8 are changed (the 2^-15 grid acts there)");
    CHECK(big_clipped == big, "every BF16 value with |x| >= 1 is clipped (%d of %d)", big_clipped, big);
    // below 2^-8 the 2^-15 grid bites: bf16 0x3B01 = 2^-9 * (1 + 2^-7) = 64.5 / 32768, a tie
    float x = bf16_to_float(0x3B01);
    CHECK((double)x * 32768.0 == 64.5, "bf16 0x3B01 = 64.5 / 32768");
    CHECK(float_to_q115(x) == 64 && float_to_q115(-x) == -64, "bf16 +-0x3B01 rounds to code +-64 (even)");
}

static void test_flush(void) {
    const float h = 1.0f / 65536.0f;  // 2^-16, half a Q1.15 step
    const float tiny[] = {nextafterf(h, 0.0f), h * 0.75f, 1e-6f, 1e-10f, 1e-30f, FLT_MIN, 1e-45f /* min subnormal */};
    for (size_t i = 0; i < sizeof(tiny) / sizeof(tiny[0]); i++) {
        float x = tiny[i];
        CHECK(same_bits(simulate_q115(x), 0.0f) && same_bits(simulate_q115(-x), 0.0f), "+-%.9g -> +0", (double)x);
        CHECK(q115_is_flushed(x) && q115_is_flushed(-x), "+-%.9g counts as flushed", (double)x);
    }
    CHECK(same_bits(simulate_q115(h), 0.0f) && same_bits(simulate_q115(-h), 0.0f), "+-2^-16 (tie) -> 0 (even)");
    CHECK(q115_is_flushed(h) && q115_is_flushed(-h), "+-2^-16 counts as flushed");
    float up = nextafterf(h, 1.0f);
    CHECK(simulate_q115(up) == 2.0f * h && simulate_q115(-up) == -2.0f * h, "just above 2^-16 -> +-2^-15");
    CHECK(!q115_is_flushed(up) && !q115_is_flushed(-up), "just above 2^-16 is not flushed");
    CHECK(simulate_q115(3.0f * h) == 4.0f * h, "3 * 2^-16 (tie) -> 2 * 2^-15 (even)");
    CHECK(same_bits(simulate_q115(0.0f), 0.0f) && same_bits(simulate_q115(-0.0f), 0.0f), "+-0 -> +0");
    CHECK(!q115_is_flushed(0.0f) && !q115_is_flushed(-0.0f), "zero is not counted as flushed");
    CHECK(!q115_is_flushed(0.5f) && !q115_is_flushed(1e30f), "normal and clipped values are not flushed");
    // q115_is_flushed agrees with its definition over random bit patterns concentrated near 2^-16
    int bad = 0;
    for (int i = 0; i < 1000000; i++) {
        float x = f_from_bits((uint32_t)rng_next() % 0x3A000000u) * ((i & 1) ? -1.0f : 1.0f);  // |x| < 2^-11
        int def = (x != 0.0f) && simulate_q115(x) == 0.0f;
        if (q115_is_flushed(x) != def) bad++;
    }
    CHECK(bad == 0, "q115_is_flushed disagrees with its definition on %d random floats", bad);
}

static void test_q131(void) {
    const double g = 1.0 / 2147483648.0;  // 2^-31
    // values on the 2^-31 grid are unchanged: k * 2^-31 for |k| < 2^24 (exact floats) ...
    int bad_grid = 0, bad_big = 0, bad_tie = 0;
    for (int i = 0; i < 1000000; i++) {
        int32_t k = (int32_t)(rng_next() % (1u << 24)) * ((i & 1) ? -1 : 1);
        float x = (float)((double)k * g);
        if (!same_bits(simulate_q131(x), x + 0.0f)) bad_grid++;
        // ... and every float with 2^-8 <= |x| < 1
        float y = f_from_bits(0x3B800000u + (uint32_t)(rng_next() % (0x3F800000u - 0x3B800000u)));
        if (!same_bits(simulate_q131(y), y) || !same_bits(simulate_q131(-y), -y)) bad_big++;
    }
    CHECK(bad_grid == 0, "%d grid values k * 2^-31 changed by simulate_q131", bad_grid);
    CHECK(bad_big == 0, "%d floats with 2^-8 <= |x| < 1 changed by simulate_q131", bad_big);
    // ties below 2^-8: (k + 0.5) * 2^-31 -> even neighbour, both signs
    for (int i = 0; i < 1000000; i++) {
        int32_t k = (int32_t)(rng_next() % (1u << 23));
        float x = (float)(((double)k + 0.5) * g);  // exact: 2k + 1 < 2^24
        int32_t even = (k % 2 == 0) ? k : k + 1;
        float want = (float)((double)even * g);
        if (!same_bits(simulate_q131(x), want) || !same_bits(simulate_q131(-x), -want + 0.0f)) bad_tie++;
    }
    CHECK(bad_tie == 0, "%d Q1.31 half-steps not rounded to even", bad_tie);
    float t32 = (float)(0.5 * g);  // 2^-32
    CHECK(same_bits(simulate_q131(t32), 0.0f), "2^-32 (tie) -> 0");
    CHECK(simulate_q131(nextafterf(t32, 1.0f)) == (float)g, "just above 2^-32 -> 2^-31");
    CHECK(simulate_q131((float)(1.5 * g)) == (float)(2 * g), "1.5 * 2^-31 -> 2 * 2^-31");
    CHECK(simulate_q131((float)(2.5 * g)) == (float)(2 * g), "2.5 * 2^-31 -> 2 * 2^-31");
    CHECK(same_bits(simulate_q131(1e-40f), 0.0f) && same_bits(simulate_q131(-1e-40f), 0.0f), "subnormal -> +0");
    // the largest float below 2^-8 is 2^-8 - 2^-32 = (2^23 - 0.5) * 2^-31: a tie, to the even 2^23
    CHECK(simulate_q131(nextafterf(0.00390625f, 0.0f)) == 0.00390625f, "2^-8 - 2^-32 -> 2^-8 (even)");
    CHECK(simulate_q131(0.00390625f) == 0.00390625f, "2^-8 unchanged");
    // clamp: |x| >= 1 -> +-1.0f (1 - 2^-31 is not an fp32; its nearest fp32 is 1.0f)
    CHECK((float)T31 == 1.0f, "1 - 2^-31 rounds to 1.0f in fp32");
    CHECK(simulate_q131(1.0f) == 1.0f && simulate_q131(2.0f) == 1.0f && simulate_q131(1e30f) == 1.0f, "clamp +");
    CHECK(simulate_q131(-1.0f) == -1.0f && simulate_q131(-5.0f) == -1.0f, "clamp -");
    float below1 = nextafterf(1.0f, 0.0f);  // 1 - 2^-24, inside the Q1.31 range
    CHECK(simulate_q131(below1) == below1 && simulate_q131(-below1) == -below1, "1 - 2^-24 passes unchanged");
    // the SF16_TRUE_FORWARD chain clamps to the Q1.15 threshold in the end
    CHECK(simulate_q115(simulate_q131(3.0f)) == Q115_OVERFLOW_THRESHOLD, "q115(q131(3)) = threshold");
    CHECK(simulate_q115(simulate_q131(-3.0f)) == -Q115_OVERFLOW_THRESHOLD, "q115(q131(-3)) = -threshold");
    // double rounding of the chain: x within 2^-32 above the Q1.15 half-step 2^-16
    float x = nextafterf(1.0f / 65536.0f, 1.0f);  // 2^-16 + 2^-39
    CHECK(simulate_q115(x) == 1.0f / 32768.0f, "direct: 2^-16 + 2^-39 -> 2^-15");
    CHECK(simulate_q115(simulate_q131(x)) == 0.0f, "chained: q131 lands on the tie 2^-16, q115 -> 0 (even)");
}

// The chain q115(q131(x)) equals q115(x) except by double rounding at Q1.15 half-steps below 2^-8.
static void test_chain(void) {
    int64_t diff = 0, diff_unexplained = 0;
    for (int i = 0; i < 4000000; i++) {
        float x = f_from_bits((uint32_t)rng_next() % 0x40000000u) * ((i & 1) ? -1.0f : 1.0f);  // |x| < 2
        float a = simulate_q115(x), b = simulate_q115(simulate_q131(x));
        if (a == b) continue;
        diff++;
        double y = fabs((double)x) * 32768.0, fr = y - floor(y);  // position within a Q1.15 step
        // q131 moves x by at most 2^-32: only an x that close to a half-step can land on the tie
        if (!(fabsf(x) < 0.00390625f && fabs(fr - 0.5) / 32768.0 <= 1.0 / 4294967296.0 &&
              fabs((double)a - (double)b) == 1.0 / 32768.0))
            diff_unexplained++;
    }
    printf("chain q115(q131(x)) vs q115(x): %lld of 4000000 random |x| < 2 differ (double rounding)\n",
           (long long)diff);
    CHECK(diff_unexplained == 0, "%lld chain differences not explained by double rounding (of %lld)",
          (long long)diff_unexplained, (long long)diff);
}

// On the values SF16 stores (BF16) the chains collapse to one rounding, which boundary_stored_value relies on
// (llmc/modes/sf16/traits.cuh, stored_value): for every BF16 x (NaN: NaN), simulate_q115(simulate_q131(x)) ==
// simulate_q115(x) (the Q1.31 step moves a BF16 value only at |x| >= 1 or |x| < 2^-24, where the Q1.15 clamp and
// flush agree) and simulate_q115 is idempotent, so MATMUL_OUT then LOGITS is one simulate_q115 in both SF16 builds.
static void test_stored_chains(void) {
    int bad_chain = 0, bad_idem = 0, bad_three = 0, nan_bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        const float x = bf16_to_float((uint16_t)b);
        const float one = simulate_q115(x);
        if (isnan(x)) {
            nan_bad += !isnan(one) || !isnan(simulate_q115(simulate_q131(x)));
            continue;
        }
        bad_chain += !same_bits(simulate_q115(simulate_q131(x)), one);
        bad_idem += !same_bits(simulate_q115(one), one);
        bad_three += !same_bits(simulate_q115(simulate_q115(simulate_q131(x))), one);
    }
    CHECK(bad_chain == 0, "%d BF16 values where simulate_q115(simulate_q131(x)) != simulate_q115(x)", bad_chain);
    CHECK(bad_idem == 0, "%d BF16 values where simulate_q115 is not idempotent", bad_idem);
    CHECK(bad_three == 0, "%d BF16 values where the true-forward logit chain is not one simulate_q115", bad_three);
    CHECK(nan_bad == 0, "%d BF16 NaNs not kept NaN by the chains", nan_bad);
}

// simulate_q115_code (the code as a float, no final product) is float_to_q115 for every non-NaN float of
// 2^-18 <= |x| < 4 and every 97th bit pattern elsewhere, NaN -> NaN; and simulate_q115_code_pow2(raw, s) is
// simulate_q115_code(raw * s) for the powers of two s = 2^-10 .. 2^4 (the attention's 1/sqrt(HS) for HS = 4^k is one)
// on 4M random raw values across binades, the threshold / s boundary and ties; simulate_q115_code_nonneg is
// simulate_q115_code on its domain (floats >= -(1 - 2^-15), NaN), and not below it.
static void test_code_paths(void) {
    long long bad = 0, bad_pow2 = 0, checked = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 97) {
        const float x = f_from_bits((uint32_t)u);
        const float c = simulate_q115_code(x);
        if (isnan(x)) { bad += !isnan(c); continue; }
        bad += c != (float)float_to_q115(x);
        checked++;
    }
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t u = 0x36800000u; u < 0x40800000u; u += 13) {
            const float x = f_from_bits(u | (sign << 31));
            bad += simulate_q115_code(x) != (float)float_to_q115(x);
            checked++;
        }
    for (int e = -10; e <= 4; e++) {
        const float sc = ldexpf(1.0f, e);
        for (int i = 0; i < 4000000 / 15; i++) {
            const uint64_t r = rng_next();
            float raw;
            if (i % 4 == 0) raw = (Q115_OVERFLOW_THRESHOLD / sc) * (1.0f + ((int)(r % 7) - 3) * ldexpf(1.0f, -23));  // the clamp edge
            else if (i % 4 == 1) raw = ((float)(int)(r % 65536) - 32768.0f + 0.5f) / 32768.0f / sc;  // ties
            else raw = ldexpf((float)(r >> 40) / 16777216.0f, (int)(r % 48) - 30 - e);
            if (r & (1ull << 20)) raw = -raw;
            bad_pow2 += !same_bits(simulate_q115_code_pow2(raw, sc), simulate_q115_code(raw * sc));
        }
    }
    // the probabilities' form, on floats >= -(1 - 2^-15) and NaN: every 7th bit pattern of both signs down to the clamp
    // edge, and every pattern within 4096 of each end of the negative range (the edge itself, -0)
    long long bad_nonneg = 0;
    const uint32_t neg_edge = bits_of(-Q115_OVERFLOW_THRESHOLD);
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 7) {
        const uint32_t b = (uint32_t)u;
        if (b > neg_edge) continue;  // below -(1 - 2^-15): outside the precondition
        const float x = f_from_bits(b);
        if (isnan(x)) bad_nonneg += !isnan(simulate_q115_code_nonneg(x));
        else bad_nonneg += !same_bits(simulate_q115_code_nonneg(x), simulate_q115_code(x));
    }
    for (uint32_t d = 0; d < 4096; d++) {
        const float a = f_from_bits(neg_edge - d), z = f_from_bits(0x80000000u + d);
        bad_nonneg += !same_bits(simulate_q115_code_nonneg(a), simulate_q115_code(a));
        bad_nonneg += !same_bits(simulate_q115_code_nonneg(z), simulate_q115_code(z));
    }
    CHECK(bad_nonneg == 0, "simulate_q115_code_nonneg differs from simulate_q115_code at %lld floats >= -(1 - 2^-15)", bad_nonneg);
    CHECK(!same_bits(simulate_q115_code_nonneg(-2.0f), simulate_q115_code(-2.0f)), "control: below the clamp the forms differ");
    CHECK(bad == 0, "simulate_q115_code differs from float_to_q115 at %lld of %lld floats", bad, checked);
    CHECK(bad_pow2 == 0, "simulate_q115_code_pow2(raw, s) differs from simulate_q115_code(raw * s) %lld times", bad_pow2);
}

// simulate_q115_fast (the device path, compiled here for the host) equals the integer path bit for bit:
// every float with 2^-18 <= |x| < 4 (all ties, the clamp boundary and the grid, 2 x 20 binades, each
// value once), and every 97th bit pattern elsewhere (subnormals, large values, Inf). NaN in, NaN out.
static void test_fast_path(void) {
    long long bad = 0, checked = 0;
    uint32_t first_bad = 0;
    const uint32_t lo = 0x36800000u /* 2^-18 */, hi = 0x40800000u /* 4 */;
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t u = lo; u < hi; u++) {
            const float x = f_from_bits(u | (sign << 31));
            if (!same_bits(simulate_q115_fast(x), simulate_q115(x)) && bad++ == 0) first_bad = u | (sign << 31);
            checked++;
        }
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 97) {
        const float x = f_from_bits((uint32_t)u);
        if (isnan(x)) {
            if (!isnan(simulate_q115_fast(x)) && bad++ == 0) first_bad = (uint32_t)u;
        } else if (!same_bits(simulate_q115_fast(x), simulate_q115(x)) && bad++ == 0) {
            first_bad = (uint32_t)u;
        }
        checked++;
    }
    CHECK(bad == 0, "simulate_q115_fast differs from the integer path at %lld of %lld floats (first 0x%08X)", bad,
          checked, first_bad);
}

// Independent references over >= 10^7 random floats in [-2, 2], random bit patterns, specials.
static void test_references(void) {
    int64_t bad1 = 0, bad2 = 0, bad_sim = 0, bad31a = 0, bad31b = 0;
    float first = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 10000000; i++) {
            float x;
            if (pass == 0) {  // uniform in value over [-2, 2]
                x = (float)(-2.0 + 4.0 * (double)(rng_next() >> 11) / 9007199254740992.0);
            } else {  // uniform bit patterns with |x| <= 2 (all exponents, subnormals)
                x = f_from_bits((uint32_t)(rng_next() % 0x40000001u) | ((i & 1) ? 0x80000000u : 0u));
            }
            int q = float_to_q115(x);
            if (q != ref_q115_double(x) && bad1++ == 0) first = x;
            if (q != ref_q115_lrintf(x)) bad2++;
            if (!same_bits(simulate_q115(x), ref_sim_q115(x))) bad_sim++;
            float r31 = simulate_q131(x);
            if (!same_bits(r31, ref_q131_double(x))) bad31a++;
            if (!same_bits(r31, ref_q131_llrint(x))) bad31b++;
        }
    }
    CHECK(bad1 == 0, "%lld float_to_q115 disagreements with the double reference, first x = %.9g",
          (long long)bad1, (double)first);
    CHECK(bad2 == 0, "%lld float_to_q115 disagreements with lrintf", (long long)bad2);
    CHECK(bad_sim == 0, "%lld simulate_q115 disagreements with the reference", (long long)bad_sim);
    CHECK(bad31a == 0, "%lld simulate_q131 disagreements with the double reference", (long long)bad31a);
    CHECK(bad31b == 0, "%lld simulate_q131 disagreements with llrint", (long long)bad31b);

    // special values, both signs
    const float specials[] = {0.0f, 1e-45f, 1e-40f, FLT_MIN, 1e-20f, 2.3283064e-10f, 4.656613e-10f,
                              1.0f / 65536.0f, 1.0f / 32768.0f, 0.00390625f, 0.0039062f, 0.1f, 0.5f,
                              0.7f, 0.99996f, 0.999969482421875f, 0.99998f, 0.9999999f, 1.0f, 1.5f,
                              2.0f, 65504.0f, 1e30f, FLT_MAX, INFINITY};
    int bad_sp = 0;
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++) {
        for (int s = 0; s < 2; s++) {
            float x = s ? -specials[i] : specials[i];
            if (float_to_q115(x) != ref_q115_double(x) || float_to_q115(x) != ref_q115_lrintf(x) ||
                !same_bits(simulate_q115(x), ref_sim_q115(x)) || !same_bits(simulate_q131(x), ref_q131_double(x)) ||
                !same_bits(simulate_q131(x), ref_q131_llrint(x))) {
                bad_sp++;
                fprintf(stderr, "special %.9g: q115 %d ref %d/%d, q131 %.9g ref %.9g\n", (double)x, float_to_q115(x),
                        ref_q115_double(x), ref_q115_lrintf(x), (double)simulate_q131(x), (double)ref_q131_double(x));
            }
        }
    }
    CHECK(bad_sp == 0, "%d special values disagree with the references", bad_sp);
}

int main(void) {
    test_constants();
    test_all_codes();
    test_clamp();
    test_ties();
    test_nan_inf();
    test_bf16();
    test_flush();
    test_q131();
    test_linear_sweep();
    test_ordered_sweep();
    test_chain();
    test_stored_chains();
    test_code_paths();
    test_references();
    test_fast_path();
    return test_summary();
}
