/*
 * bf16.h - scalar bfloat16 <-> float32 conversion on bit patterns, for host and device.
 *
 * A bf16 value is the upper 16 bits of an IEEE float32 pattern (1 sign, 8 exponent, 7 mantissa
 * bits), stored here as uint16_t. Usable from C, C++ and CUDA (host and device).
 */
#ifndef LLMC_NUMERICS_BF16_H
#define LLMC_NUMERICS_BF16_H

#include <stdint.h>
#include <string.h>

#ifndef HOST_DEVICE
#ifdef __CUDACC__
#define HOST_DEVICE __host__ __device__
#else
#define HOST_DEVICE
#endif
#endif

// float32 -> bf16 bit pattern, round to nearest, ties to even (on the bit pattern).
// NaN stays a quiet NaN with its sign (and upper payload bits); +-Inf stays +-Inf; finite values
// that round past the largest finite bf16 (0x7F7F, about 3.39e38) become +-Inf, as IEEE RNE does.
// Subnormals are rounded like any other value (no flush to zero).
static inline HOST_DEVICE uint16_t bf16_from_float(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
        return (uint16_t)((u >> 16) | 0x0040u);  // NaN: keep sign, force the quiet bit
    }
    // add 0x7FFF plus the lowest kept bit: ties (low half exactly 0x8000) go to the even result.
    // cannot overflow 32 bits: the largest non-NaN magnitude is 0x7F800000 (Inf), plus sign.
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// bf16 bit pattern -> float32 (exact: the low 16 mantissa bits become zero).
static inline HOST_DEVICE float bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

#endif // LLMC_NUMERICS_BF16_H
