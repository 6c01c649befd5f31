// rand.h - small reproducible host RNG (xorshift64* state update, Box-Muller normals).
//
// Used for weight init and sampling on the host. Not cryptographic. The same seed gives the same
// stream on every machine (integer arithmetic only until the final float conversion).
// Source: Marsaglia 2003, "Xorshift RNGs"; Vigna 2016 for the * output multiplier.
#pragma once

#include <stdint.h>
#include <math.h>

typedef struct { uint64_t state; } Rng;

// Seed the generator; seed 0 is remapped (xorshift has an all-zero fixed point).
static inline void rng_init(Rng* r, uint64_t seed) {
    r->state = seed ? seed : 0x9E3779B97F4A7C15ull;
}

// Next 32 random bits.
static inline uint32_t rng_u32(Rng* r) {
    r->state ^= r->state >> 12;
    r->state ^= r->state << 25;
    r->state ^= r->state >> 27;
    return (uint32_t)((r->state * 0x2545F4914F6CDD1Dull) >> 32);
}

// Uniform float in [0, 1) with 24 random bits.
static inline float rng_uniform(Rng* r) {
    return (float)(rng_u32(r) >> 8) / 16777216.0f;
}

// n normal draws N(mean, std^2) into out (Box-Muller, computed in double).
static inline void rng_normal(Rng* r, float* out, size_t n, float mean, float std) {
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)rng_u32(r) + 1.0) / 4294967297.0;  // (0, 1]: log is finite
        double u2 = (double)rng_u32(r) / 4294967296.0;
        double rad = sqrt(-2.0 * log(u1));
        out[i] = (float)(mean + std * rad * cos(two_pi * u2));
        if (i + 1 < n) out[i + 1] = (float)(mean + std * rad * sin(two_pi * u2));
    }
}

// Index drawn from a probability vector probs[0..n) (sums to ~1), given a uniform coin in [0,1).
static inline int sample_from_probs(const float* probs, int n, float coin) {
    float cdf = 0.0f;
    for (int i = 0; i < n; i++) {
        cdf += probs[i];
        if (coin < cdf) return i;
    }
    return n - 1;  // rounding left the cdf just below 1
}
