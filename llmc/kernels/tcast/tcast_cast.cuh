// tcast_cast.cuh - the GPU virtual cast of a row-major BF16 tensor to any TensorCast data type:
// doc/TCAST.md section 4 (sparsity 4.1, groups 4.2, specials 4.3, scales and quantization 4a-4c,
// statistics 4.5) with the primitives of llmc/numerics/tcast.h (TcastGroupAcc, tcast_group_scale,
// tcast_quantize, tcast_random_bits, tcast_sparse_key / tcast_sparse_beats), the single source of
// truth that the host reference tcast_cast_host composes too. The device result is exactly
// tcast_cast_host's on the same (BF16 -> float32) inputs, rounded to BF16 with round-to-nearest-even
// (NaN: the canonical 0x7FC0), and --cast-stats counts exactly tcast_cast_host's TcastStats.
// dev/cuda/tcast.cu checks both bit for bit and times the kernels.
//
// API (host; every launch is asynchronous on `stream`):
//
//   tcast_cast(y, x, rows, cols, dim, dt, seed, stats, ctx, stream)
//       y = cast(x) for the row-major (rows, cols) floatX tensor x; y == x (in place) or a
//       separate (rows, cols) buffer (out of place; x is not written then). dim 1 or -1: the
//       sparsity groups, tiles and channels run along a row (contiguous elements); dim 0 or -2:
//       along a column (stride cols) - doc section 2's dY, chosen by the trainer (section 5: the
//       channel dimension at the boundary sites, the reduction dimension of each GEMM operand).
//       Tile tX: X consecutive elements along dim; channel (t0): a whole row (dim 1) or a whole
//       column (dim 0); no tile: one scale for the tensor; unscaled: every element alone.
//       Stochastic rounding: element (r, c) draws tcast_random_bits(seed, r * cols + c), the flat
//       row-major index, whatever dim is (section 1.4 / 5.3).
//       stats: NULL, or device counters (tcast_stats.cuh) that this cast ADDS to: values,
//       saturated, flushed and the group scale histogram (section 4.5). With NULL the kernels are
//       instantiated without any counting code.
//       ctx: scratch of the per-tensor and channel scales (see below); may be NULL for tile-scaled
//       and unscaled types.
//       Errors (message on stderr, exit(EXIT_FAILURE)): shape or dim unsuitable for dt (see
//       tcast_cast_shape_ok), ctx missing or too small for a channel / per-tensor type.
//
//   tcast_cast_shape_ok(dt, rows, cols, dim, err, n)
//       0 if the shape suits the type (rows, cols >= 1; dim in -2..1; the scale spec's explicit
//       dY, if any, names the same dimension; the tile X and the sparsity N divide the size along
//       dim), else -1 with a message in err - the same checks and words as tcast_cast_host.
//
//   tcast_cast_context_init(ctx, max_rows, max_cols) / tcast_cast_context_free(ctx)
//       Device scratch for casts of tensors up to max_rows x max_cols: capacity =
//       max(max_rows, max_cols) groups, each a TcastGroupAcc (16 bytes, the integer max / min
//       accumulation) and a TcastGroupScale (24 bytes): 40 * capacity bytes (ctx->bytes), e.g.
//       2.6 MB for 65536 rows. A channel-scaled cast along dim 1 needs rows <= capacity, along dim
//       0 cols <= capacity; a per-tensor cast needs 1. Casts sharing a context must be ordered
//       (one stream): the scratch is reused by every call.
//
// Kernel design (doc section 4 step by step; all reductions are integer max / min / or on float32
// bit patterns, so every result is deterministic and independent of the launch geometry):
//
//   4.1 sparsity: tcast_prune_kernel writes the pruned tensor to y first (one warp lane per element
//       of an M:N group, keys exchanged with shuffles); the cast then runs in place on y.
//   4.2-4.4, "row" path (tcast_rows_kernel; dim 1 tiles; per-tensor and unscaled types along either
//       dim, which are element-wise once the scale is known; channel scales along dim 1): every
//       thread owns 4 packets of 8 BF16 (16-byte loads / stores) at warp stride, so a warp moves
//       1024 contiguous elements per step. A tile of X elements is X / 8 consecutive lanes (X 8..256:
//       shuffle-xor merges of the group accumulation), X / 256 of a lane's packets (X 512, 1024), or a
//       part of one packet (X 2, 4). Every lane derives the group scale it needs itself.
//   4.2-4.4, "column" path (tcast_cols_kernel; dim 0 tiles and channel scales): a block owns a
//       strip of 256 columns (a lane: 8 adjacent columns, one 16-byte packet per row, so each warp
//       load is one contiguous 512-byte row segment) and 32-row chunks (a warp: 4 consecutive rows).
//       Tiles of 2 or 4 rows are inside a thread; tiles of 8..32 rows are merged across 2..8 warps
//       through shared memory, where one thread per column derives the group scales; tiles of 64..1024
//       rows accumulate over 2..32 chunks first and read them again (from L2) to cast.
//   Channel and per-tensor scales need the whole slice first: a reduction pass (tcast_reduce_*)
//       fills the TcastGroupScale of each group in ctx, which the cast pass reads.
//   Element casts: three exact implementations, chosen per data type by tcast_cast_path:
//     - general (TcastQGeneral): tcast_quantize itself (out of line), for every type (float-scaled
//       ints, uints with zero points, float32 elements, ...);
//     - exponent path (TcastQExp): exponent-scaled (or unscaled) float and int data with at most 22
//       mantissa bits, i.e. the MX / BFP types, every round mode, and the statistics of all these:
//       section 1.3's rounding done directly on x's float32 bit pattern with a per-group window
//       (tcast_exp_param, tcast_exp_elem; ~25 integer operations, the four round modes branch-free);
//     - round-to-nearest-even path (TcastQRne): the same types with @even and no statistics, the
//       common case: y = x * 2^-s, the float32 "magic add" (y + C) - C with C = 1.5 * 2^23 * q, whose
//       RNE rounds y to F's quantum q with ties to even, a clamp at max_F, times 2^s (tcast_rne_elem:
//       3 float32 + ~7 integer operations).
//     Both fast paths are exact only inside conditions stated at their functions; whatever lies
//     outside (zeros or float32 subnormals near the window's edge, NaN groups, Inf in unscaled casts,
//     groups near the ends of the float32 range) takes tcast_quantize out of line.
//     tcast_exp_elem and tcast_rne_elem are HOST_DEVICE (with the device's flush-to-zero emulated on
//     the host), so that host tests can compare them with tcast_quantize exhaustively.
//   Statistics (instantiation with STATS = true): per-thread counts, one warp reduction and three
//       64-bit atomics per warp; scale histogram bins in shared memory per block, flushed once.
//
// Requirements of the vector paths (else a scalar fallback, same results, slower): cols % 8 == 0,
// x and y 16-byte aligned. The trainer's tensors always qualify.
//
// Expected throughput on an H100 (memory bound; dev/cuda/tcast.cu prints the measurement next to the
// device copy rate): the @even MX / BFP types (mxfp8e4, mxfp8e5, mxfp6*, mxfp4e2, mxint8, bfp16)
// >= 80% of the copy rate along dim 1 and >= 70% along dim 0; other round modes and the statistics
// instantiation somewhat less (integer rounding; @stochastic also hashes 64-bit random bits per
// element); per-tensor and channel types read the tensor twice (<= 67%); float-scaled and uint types
// are bound by tcast_quantize's float32 divisions.
#pragma once

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <cuda_fp8.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/tcast/tcast_stats.cuh"
#include "llmc/numerics/tcast.h"

#if !defined(ENABLE_BF16)
#error "llmc/kernels/tcast/tcast_cast.cuh casts BF16 storage (floatX = __nv_bfloat16): build with PRECISION=BF16 (TCAST=1)"
#endif

constexpr int TCAST_THREADS = 256;        // every kernel: 8 warps
constexpr int TCAST_WARPS = TCAST_THREADS / 32;
constexpr int TCAST_ROW_PACKETS = 4;      // row path: 16-byte packets per thread per step (warp stride)
constexpr int TCAST_COL_RPT = 4;          // column path: rows per thread per chunk
constexpr int TCAST_CHUNK_ROWS = TCAST_WARPS * TCAST_COL_RPT;  // 32
constexpr int TCAST_STRIP_COLS = 32 * 8;  // columns per block of the column path (256)
#define TCAST_FULL_MASK 0xFFFFFFFFu
#define TCAST_CODE_NAN INT_MIN            // TcastExpParam::code of a NaN group

// ------------------------------------------------------------------------------------------------
// Scratch of the channel / per-tensor reductions

typedef struct {
    TcastGroupAcc* acc;        // device, `capacity` group accumulations
    TcastGroupScale* scales;   // device, `capacity` group scales
    int capacity;              // max(max_rows, max_cols): groups one cast may need
    size_t bytes;              // device bytes held (40 * capacity)
} TcastCastContext;

static inline void tcast_cast_context_init(TcastCastContext* ctx, int max_rows, int max_cols) {
    memset(ctx, 0, sizeof(*ctx));
    ctx->capacity = max_rows > max_cols ? max_rows : max_cols;
    if (ctx->capacity < 1) ctx->capacity = 1;
    cudaCheck(cudaMalloc(&ctx->acc, (size_t)ctx->capacity * sizeof(TcastGroupAcc)));
    cudaCheck(cudaMalloc(&ctx->scales, (size_t)ctx->capacity * sizeof(TcastGroupScale)));
    ctx->bytes = (size_t)ctx->capacity * (sizeof(TcastGroupAcc) + sizeof(TcastGroupScale));
}

static inline void tcast_cast_context_free(TcastCastContext* ctx) {
    if (ctx->acc) cudaCheck(cudaFree(ctx->acc));
    if (ctx->scales) cudaCheck(cudaFree(ctx->scales));
    memset(ctx, 0, sizeof(*ctx));
}

// ------------------------------------------------------------------------------------------------
// Launch-wide constants (plain data, passed by value to every cast kernel)

typedef struct {
    TcastDataType dt;  // the data type (the general path and every group scale use it directly)
    uint64_t seed;     // stochastic rounding seed
    int stochastic;    // dt.round == TCAST_ROUND_STOCHASTIC
    // The exponent fast path, for element format F (float, or an int's fixed-point view):
    int fast;          // 1 if F has at most 22 mantissa bits and an exponent scale or none
    int d0;            // 23 - mbits: significand bits of x dropped in F's normal range
    int emin, emax, mbits;
    uint32_t max_frac; // float32 fraction bits of max_F
    uint32_t zsign;    // 0x80000000 if a zero result keeps the input's sign (ieee, fn), else 0
    // Round mode as constants of one formula (tcast_exp_elem): round up iff
    // (int)(rem + (lsb & ev) + nbias) > (int)(U >> (32 - d)), U = 0x7FFFFFFF or the random bits.
    uint32_t ev;
    int32_t nbias;
    // The RNE fast path (tcast_rne_elem), valid when rne = 1:
    int rne;           // @even, exponent path, mbits <= 21, emin - mbits >= -125, emax - mbits <= 103
    uint32_t rne_emin; // float32 bits of 2^emin: the binade of F's subnormal quantum
    uint32_t rne_c;    // bits(C) = bits(2^e) + rne_c for |y| in binade e: C = 1.5 * 2^(e - mbits + 23)
    uint32_t rne_max;  // float32 bits of max_F
    uint32_t rne_top;  // unscaled: float32 bits of 2^(emax + 1), |y| beyond it are clamped to it (they saturate);
                       // scaled: 0xFFFFFFFF (a group member's |y| is below 2^(emax + 1) already)
} TcastKernelArgs;

static inline TcastKernelArgs tcast_kernel_args(const TcastDataType& dt, uint64_t seed) {
    TcastKernelArgs k;
    memset(&k, 0, sizeof(k));
    k.dt = dt;
    k.seed = seed;
    k.stochastic = dt.round == TCAST_ROUND_STOCHASTIC;
    const TcastNumberSpec& f = dt.number;
    const bool exp_scale = dt.has_scale ? dt.scale.scale.kind == TCAST_KIND_EXPONENT : f.kind == TCAST_KIND_FLOAT;
    k.fast = (f.kind == TCAST_KIND_FLOAT || f.kind == TCAST_KIND_INT) && exp_scale && f.mbits <= 22;
    k.mbits = f.mbits;
    k.d0 = 23 - f.mbits;
    k.emin = f.emin;
    k.emax = f.emax;
    if (k.fast) k.max_frac = (f.max_mant - (1u << f.mbits)) << (23 - f.mbits);
    k.zsign = f.signed_zero ? 0x80000000u : 0u;
    switch (dt.round) {
    case TCAST_ROUND_EVEN: k.ev = 1u; k.nbias = -1; break;        // rem + lsb > half
    case TCAST_ROUND_NEAREST: k.ev = 0u; k.nbias = 0; break;      // rem >= half
    case TCAST_ROUND_ZERO: k.ev = 0u; k.nbias = INT_MIN; break;   // never
    default: k.ev = 0u; k.nbias = 0; break;                       // rem > floor(u / 2^(32-d))
    }
    k.rne = k.fast && dt.round == TCAST_ROUND_EVEN && f.mbits <= 21 && f.emin - f.mbits >= -125 && f.emax - f.mbits <= 103;
    if (k.rne) {
        k.rne_emin = (uint32_t)(f.emin + 127) << 23;
        k.rne_c = ((uint32_t)(23 - f.mbits) << 23) + 0x400000u;
        k.rne_max = ((uint32_t)(f.emax + 127) << 23) | k.max_frac;
        k.rne_top = dt.has_scale ? 0xFFFFFFFFu : (uint32_t)(f.emax + 128) << 23;
    }
    return k;
}

// ------------------------------------------------------------------------------------------------
// Exponent fast path (section 4a and the unscaled 1.3): x = m * 2^(E - 150), m the 24-bit significand
// of a normal float32 x (biased exponent E). For a group scale 2^s the quantum of F at |y| = |x| / 2^s
// is 2^(max(E - 127 - s, emin) - mbits), so rounding drops d = d0 + max(0, cd' - E) low bits of m
// (cd' = emin + s + 127) - tcast_quantize_exp's shift - and the result is x's pattern with those bits
// rounded away (d <= 23), or 0 / the smallest quantum (24 <= d <= 31, |y| below F's quantum).
// The window [lo, lo + span) of |x| patterns where this is exact: d <= 31, x normal and finite, and a
// group whose smallest quantum and max_F * 2^s are normal float32 numbers (so the final rounding to
// float32 of 1.3 / 4a changes nothing). span = 0: the whole group takes tcast_quantize.

typedef struct {
    uint32_t lo, span;  // the window of |x| bit patterns
    uint32_t maxbits;   // float32 bits of max_F * 2^s (saturation)
    int cd;             // emin + s + 127 + d0: d = max(d0, cd - E)
    int code;           // s (0 unscaled), or TCAST_CODE_NAN: the group scale for tcast_quantize
} TcastExpParam;

static inline HOST_DEVICE TcastExpParam tcast_exp_param(const TcastKernelArgs& k, const TcastGroupScale& g) {
    TcastExpParam p;
    const int s = g.mode == TCAST_GROUP_EXP ? g.s : 0;
    p.code = g.mode == TCAST_GROUP_NAN ? TCAST_CODE_NAN : s;
    const int c = k.emin + s + 127;   // biased float32 exponent of 2^(emin + s)
    const int eq = c - k.mbits;       // ... of F's smallest quantum 2^(emin - mbits + s)
    const int ex = k.emax + s + 127;  // ... of 2^(emax + s)
    const bool ok = k.fast && (g.mode == TCAST_GROUP_EXP || g.mode == TCAST_GROUP_UNSCALED) && eq >= 1 && ex <= 254;
    p.cd = c + k.d0;
    p.maxbits = ok ? ((uint32_t)ex << 23) | k.max_frac : 0u;
    p.lo = ok ? (uint32_t)(eq - 8 > 1 ? eq - 8 : 1) << 23 : 0u;  // d <= 31 <=> E >= eq - 8
    p.span = ok ? 0x7F800000u - p.lo : 0u;
    return p;
}

// The group scale a TcastExpParam stands for (the exact path's input).
static inline HOST_DEVICE TcastGroupScale tcast_exp_group(const TcastKernelArgs& k, const TcastExpParam& p) {
    TcastGroupScale g;
    g.mode = p.code == TCAST_CODE_NAN ? TCAST_GROUP_NAN : (k.dt.has_scale ? TCAST_GROUP_EXP : TCAST_GROUP_UNSCALED);
    g.s = p.code == TCAST_CODE_NAN ? 0 : p.code;
    g.scale = 0.0f;
    g.zero = 0.0f;
    g.izero = 0;
    g.hist = -1;
    return g;
}

#ifdef __CUDACC__
// tcast_quantize out of line: the exact path of rare elements (exponent path) and every element of the
// general path. A call keeps it from being inlined at each of a kernel's 32 element sites, which would
// cost registers (occupancy) on the hot path and minutes of compile time. dt: a __grid_constant__
// kernel parameter, addressed in place. Returns (float32 bits, TCAST_FLAG_* flags).
static __device__ __noinline__ uint2 tcast_quantize_slow_(const TcastDataType* dt, TcastGroupScale g, uint32_t b, uint32_t u) {
    unsigned f = 0u;
    const float r = tcast_quantize(dt, &g, tcast_f32_from_bits(b), u, &f);
    return make_uint2(tcast_f32_bits(r), f);
}
#endif

// One element: float32 bits b of x -> float32 bits of the cast (tcast_quantize's result exactly).
// u: the element's random bits (read with @stochastic only); flags (may be NULL): section 4.5.
static inline HOST_DEVICE uint32_t tcast_exp_elem(const TcastKernelArgs& k, const TcastExpParam& p, uint32_t b, uint32_t u,
                                                  unsigned* flags) {
    const uint32_t a = b & 0x7FFFFFFFu, sign = b ^ a;
    if (a - p.lo < p.span) {
        const int E = (int)(a >> 23);
        const int d = k.d0 > p.cd - E ? k.d0 : p.cd - E;  // 1 .. 31
        const uint32_t mask = (1u << d) - 1u;
        const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
        const uint32_t rem = m & mask;
        // U >> (32 - d): 2^(d-1) - 1 for the deterministic modes; floor(u / 2^(32-d)) for stochastic,
        // and rem > floor(u / 2^(32-d)) <=> u < rem * 2^(32-d), section 1.4's exact comparison
        const uint32_t thr = (k.stochastic ? u : 0x7FFFFFFFu) >> (32 - d);
        const bool up = (int32_t)(rem + ((m >> d) & k.ev) + (uint32_t)k.nbias) > (int32_t)thr;
        uint32_t r;
        unsigned f = 0u;
        if (d <= 23) {  // the quantum lies inside x's significand: round the pattern itself
            r = (a & ~mask) + (up ? mask + 1u : 0u);  // a carry into the exponent is the next binade
            if (r > p.maxbits) {
                r = p.maxbits;
                f = TCAST_FLAG_SATURATED;
            }
        } else {  // |y| below F's quantum q: 0 or q
            r = up ? (uint32_t)(p.cd - 23) << 23 : 0u;
            if (!r) f = TCAST_FLAG_FLUSHED;
        }
        if (flags) *flags = f;
        return r ? r | sign : sign & k.zsign;
    }
#ifdef __CUDA_ARCH__
    const uint2 r = tcast_quantize_slow_(&k.dt, tcast_exp_group(k, p), b, u);
    if (flags) *flags = r.y;
    return r.x;
#else
    const TcastGroupScale g = tcast_exp_group(k, p);
    return tcast_f32_bits(tcast_quantize(&k.dt, &g, tcast_f32_from_bits(b), u, flags));
#endif
}

// Round-to-nearest-even fast path (TcastQRne: @even without statistics, k.rne types - the MX / BFP
// element formats fp8, fp6, fp4, int8, int4 and the like). A group qualifies (ok) when its exponent
// window is open (scale 2^s, or unscaled), -126 <= s <= 126 and F's smallest quantum times 2^s is at
// least 2^-125. Then for a finite member x (|x| < 2^(emax + s + 1); unscaled y are clamped to
// 2^(emax + 1), where everything saturates):
//   y = x * 2^-s      exact, except that the device's flush-to-zero (--use_fast_math) turns |y| < 2^-126
//                     and float32-subnormal x into signed zeros - values below half of F's smallest
//                     quantum (emin - mbits >= -125 and the 2^-125 condition), which round to zero anyway;
//   r = (y + C) - C   with C = 1.5 * 2^23 * q, q = 2^(max(e, emin) - mbits) the quantum of F at |y|'s
//                     binade e: |y| < 2^(mbits+1) q <= 2^22 q keeps y + C in C's binade, whose spacing is
//                     q, so the float32 add rounds y to a multiple of q, ties to the even multiple (C is
//                     an even multiple of q): section 1.3's `even` exactly; the subtraction is exact;
//   min(|r|, max_F), the sign of x back (a zero result: per F's signed-zero rule), times 2^s (exact: a
//                     non-zero result is >= 2^-125).
// Elements or groups outside these conditions (NaN groups, Inf in unscaled casts, groups near the ends
// of the float32 range) take tcast_quantize out of line. Three float32 operations and ~7 integer ones
// per element, against ~25 integer ones for tcast_exp_elem.
typedef struct {
    float down, up;  // 2^-s, 2^s (ok groups)
    int ok;          // 1: the float path
    int code;        // TcastExpParam::code: the group scale for tcast_quantize
} TcastRneParam;

static inline HOST_DEVICE TcastRneParam tcast_rne_param(const TcastKernelArgs& k, const TcastGroupScale& g) {
    const int s = g.mode == TCAST_GROUP_EXP ? g.s : 0;
    TcastRneParam p;
    p.code = g.mode == TCAST_GROUP_NAN ? TCAST_CODE_NAN : s;
    p.ok = k.rne && (g.mode == TCAST_GROUP_EXP || g.mode == TCAST_GROUP_UNSCALED) && s >= -126 && s <= 126 &&
           k.emin + s + 127 - k.mbits >= 2 && k.emax + s + 127 <= 254;
    p.down = tcast_f32_from_bits(p.ok ? (uint32_t)(127 - s) << 23 : 0u);
    p.up = tcast_f32_from_bits(p.ok ? (uint32_t)(127 + s) << 23 : 0u);
    return p;
}

// float32 operations as the device runs them under --use_fast_math (.rn.ftz, never contracted into an
// FMA); the host versions emulate the flush to zero, for host tests of tcast_rne_elem.
#ifndef __CUDA_ARCH__
static inline float tcast_ftz_(float v) {
    const uint32_t u = tcast_f32_bits(v);
    return (u & 0x7F800000u) == 0u ? tcast_f32_from_bits(u & 0x80000000u) : v;
}
#endif
static inline HOST_DEVICE float tcast_mul_ftz_(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    volatile float r = tcast_ftz_(a) * tcast_ftz_(b);
    return tcast_ftz_(r);
#endif
}
static inline HOST_DEVICE float tcast_add_ftz_(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    volatile float r = tcast_ftz_(a) + tcast_ftz_(b);
    return tcast_ftz_(r);
#endif
}
static inline HOST_DEVICE float tcast_sub_ftz_(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    volatile float r = tcast_ftz_(a) - tcast_ftz_(b);
    return tcast_ftz_(r);
#endif
}

// One finite element of an ok group: float32 bits b -> float32 bits of the cast.
static inline HOST_DEVICE uint32_t tcast_rne_elem(const TcastKernelArgs& k, const TcastRneParam& p, uint32_t b) {
    uint32_t ya = tcast_f32_bits(tcast_mul_ftz_(tcast_f32_from_bits(b), p.down)) & 0x7FFFFFFFu;  // |y|
    ya = ya < k.rne_top ? ya : k.rne_top;
    const uint32_t e = (ya & 0x7F800000u) > k.rne_emin ? (ya & 0x7F800000u) : k.rne_emin;
    const float c = tcast_f32_from_bits(e + k.rne_c);
    uint32_t ra = tcast_f32_bits(tcast_sub_ftz_(tcast_add_ftz_(tcast_f32_from_bits(ya), c), c));
    ra = ra < k.rne_max ? ra : k.rne_max;
    const uint32_t keep = ra ? 0x80000000u : k.zsign;  // x's sign; a zero result keeps it only in ieee / fn
    return tcast_f32_bits(tcast_mul_ftz_(tcast_f32_from_bits((b & keep) | ra), p.up));
}

// ------------------------------------------------------------------------------------------------
// Device helpers

// Per-thread statistics counts (section 4.5), flushed once per warp.
struct TcastCounts {
    unsigned values, saturated, flushed;
    __device__ void add(unsigned flags, bool valid) {
        values += valid;
        saturated += valid && (flags & TCAST_FLAG_SATURATED);
        flushed += valid && (flags & TCAST_FLAG_FLUSHED);
    }
};

// Warp sums of the counts into st. All 32 lanes must call.
__device__ __forceinline__ void tcast_counts_flush(TcastDeviceStats* st, const TcastCounts& c) {
    const unsigned v = __reduce_add_sync(TCAST_FULL_MASK, c.values);
    const unsigned s = __reduce_add_sync(TCAST_FULL_MASK, c.saturated);
    const unsigned f = __reduce_add_sync(TCAST_FULL_MASK, c.flushed);
    if ((threadIdx.x & 31) == 0) {
        if (v) atomicAdd(&st->values, (unsigned long long)v);
        if (s) atomicAdd(&st->saturated, (unsigned long long)s);
        if (f) atomicAdd(&st->flushed, (unsigned long long)f);
    }
}

// Block histogram of group scale bins in shared memory (thousands of groups per block would
// serialize on a few global bins). init / flush: every thread of the block.
__device__ __forceinline__ void tcast_hist_init(unsigned* h) {
    for (int i = threadIdx.x; i < TCAST_HIST_BINS; i += blockDim.x) h[i] = 0u;
    __syncthreads();
}
__device__ __forceinline__ void tcast_hist_add(unsigned* h, int bin) {
    if (bin >= 0 && bin < TCAST_HIST_BINS) atomicAdd(&h[bin], 1u);
}
__device__ __forceinline__ void tcast_hist_flush(unsigned* h, TcastDeviceStats* st) {
    __syncthreads();
    for (int i = threadIdx.x; i < TCAST_HIST_BINS; i += blockDim.x)
        if (h[i]) atomicAdd(&st->hist[i], h[i]);
}

// A 16-byte packet of 8 BF16 as float32 bit patterns (exact), and back (RNE, two per conversion:
// cvt.rn.bf16x2.f32 has no flush-to-zero form, so float32 subnormal results round correctly).
__device__ __forceinline__ void tcast_unpack8(const uint4 raw, uint32_t (&b)[8]) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        b[2 * i] = w[i] << 16;
        b[2 * i + 1] = w[i] & 0xFFFF0000u;
    }
}
__device__ __forceinline__ uint32_t tcast_pack2(uint32_t lo, uint32_t hi) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(__uint_as_float(lo), __uint_as_float(hi));
    uint32_t w;
    memcpy(&w, &p, sizeof(w));
    return w;
}
__device__ __forceinline__ uint4 tcast_pack8(const uint32_t (&b)[8]) {
    return make_uint4(tcast_pack2(b[0], b[1]), tcast_pack2(b[2], b[3]), tcast_pack2(b[4], b[5]), tcast_pack2(b[6], b[7]));
}
// Plain (coherent) loads and stores: in place, y aliases x, so no read-only (.nc) path.
__device__ __forceinline__ uint4 tcast_load16(const floatX* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void tcast_store16(floatX* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }
__device__ __forceinline__ uint32_t tcast_load1(const floatX* p) {
    return (uint32_t)(*reinterpret_cast<const unsigned short*>(p)) << 16;
}
__device__ __forceinline__ void tcast_store1(floatX* p, uint32_t b) {
    *p = __float2bfloat16_rn(__uint_as_float(b));  // cvt.rn.bf16.f32: no flush-to-zero either
}

__device__ __forceinline__ TcastGroupAcc tcast_acc_shfl_xor(const TcastGroupAcc& a, int off) {
    TcastGroupAcc o;
    o.amax = __shfl_xor_sync(TCAST_FULL_MASK, a.amax, off);
    o.tmin = __shfl_xor_sync(TCAST_FULL_MASK, a.tmin, off);
    o.tmax = __shfl_xor_sync(TCAST_FULL_MASK, a.tmax, off);
    o.special = __shfl_xor_sync(TCAST_FULL_MASK, a.special, off);
    return o;
}

// Merges a into the global accumulation *dst (integer atomics: order independent).
__device__ __forceinline__ void tcast_acc_atomic(TcastGroupAcc* dst, const TcastGroupAcc& a) {
    if (a.amax) atomicMax(&dst->amax, a.amax);
    if (a.tmin < 0) atomicMin(&dst->tmin, a.tmin);
    if (a.tmax > 0) atomicMax(&dst->tmax, a.tmax);
    if (a.special) atomicOr(&dst->special, 1u);
}

// The unscaled "group" (every element alone, section 1.3).
static inline HOST_DEVICE TcastGroupScale tcast_unscaled_group(void) {
    TcastGroupScale g;
    g.mode = TCAST_GROUP_UNSCALED;
    g.s = 0;
    g.scale = 0.0f;
    g.zero = 0.0f;
    g.izero = 0;
    g.hist = -1;
    return g;
}

// ------------------------------------------------------------------------------------------------
// Element quantizers: how a group is accumulated, what a group's scale is stored as (Param), and
// how a pair of elements of one group is cast (float32 bits in, float32 bits out; f: flags or NULL).
// The pair shares a group in both layouts (adjacent columns along dim 1, adjacent rows along dim 0;
// every tile is at least 2 long).

static __device__ __noinline__ TcastGroupScale tcast_group_scale_slow_(const TcastDataType* dt, TcastGroupAcc acc) {
    return tcast_group_scale(dt, acc);
}

// General: the full TcastGroupAcc and tcast_quantize (out of line). Every data type.
struct TcastQGeneral {
    typedef TcastGroupAcc Acc;
    typedef TcastGroupScale Param;
    static constexpr int MIN_BLOCKS = 2;  // __launch_bounds__: <= 128 registers
    static __device__ Acc init() { return tcast_acc_init(); }
    static __device__ void add(Acc& acc, uint32_t b) { tcast_acc_add(&acc, __uint_as_float(b)); }
    static __device__ void merge(Acc& acc, const Acc& o) { tcast_acc_merge(&acc, o); }
    static __device__ Acc shfl_xor(const Acc& acc, int off) { return tcast_acc_shfl_xor(acc, off); }
    static __device__ TcastGroupScale scale(const TcastKernelArgs& k, const Acc& acc) { return tcast_group_scale_slow_(&k.dt, acc); }
    static __device__ Param param(const TcastKernelArgs&, const TcastGroupScale& g) { return g; }
    static __device__ void cast2(const TcastKernelArgs& k, const Param& p, uint32_t& b0, uint32_t& b1, uint64_t i0, uint64_t i1,
                                 unsigned* f) {
        const uint32_t u0 = k.stochastic ? tcast_random_bits(k.seed, i0) : 0u;
        const uint32_t u1 = k.stochastic ? tcast_random_bits(k.seed, i1) : 0u;
        const uint2 r0 = tcast_quantize_slow_(&k.dt, p, b0, u0), r1 = tcast_quantize_slow_(&k.dt, p, b1, u1);
        b0 = r0.x;
        b1 = r1.x;
        if (f) {
            f[0] = r0.y;
            f[1] = r1.y;
        }
    }
};

// Exponent fast path: the group accumulation is max |x| as bits (a pattern >= 0x7F800000 means a
// NaN or an Inf: the group is special), which is all sections 4a and 4.3 read.
struct TcastQExp {
    typedef uint32_t Acc;
    typedef TcastExpParam Param;
    static constexpr int MIN_BLOCKS = 3;  // __launch_bounds__: <= 85 registers, 24 warps per SM
    static __device__ Acc init() { return 0u; }
    static __device__ void add(Acc& acc, uint32_t b) { acc = max(acc, b & 0x7FFFFFFFu); }
    static __device__ void merge(Acc& acc, const Acc& o) { acc = max(acc, o); }
    static __device__ Acc shfl_xor(const Acc& acc, int off) { return __shfl_xor_sync(TCAST_FULL_MASK, acc, off); }
    // tcast_group_scale's steps for an exponent scale, the only kind this path takes (4.3 specials,
    // 4a via tcast_exp_scale): inlining all of tcast_group_scale at every group site would drag its
    // float-scale branches along (code size, registers)
    static __device__ TcastGroupScale scale(const TcastKernelArgs& k, const Acc& acc) {
        TcastGroupScale g = tcast_unscaled_group();
        if (!k.dt.has_scale) return g;
        if (acc >= TCAST_F32_INF) {
            g.mode = TCAST_GROUP_NAN;
            return g;
        }
        int overflow;
        g.s = tcast_exp_scale(&k.dt.number, &k.dt.scale.scale, k.dt.scale_mode, tcast_f32_from_bits(acc), &overflow);
        g.mode = overflow ? TCAST_GROUP_NAN : TCAST_GROUP_EXP;
        g.hist = overflow ? TCAST_HIST_OVER : tcast_hist_bin(g.s);
        return g;
    }
    static __device__ Param param(const TcastKernelArgs& k, const TcastGroupScale& g) { return tcast_exp_param(k, g); }
    static __device__ void cast2(const TcastKernelArgs& k, const Param& p, uint32_t& b0, uint32_t& b1, uint64_t i0, uint64_t i1,
                                 unsigned* f) {
        const uint32_t u0 = k.stochastic ? tcast_random_bits(k.seed, i0) : 0u;
        const uint32_t u1 = k.stochastic ? tcast_random_bits(k.seed, i1) : 0u;
        b0 = tcast_exp_elem(k, p, b0, u0, f ? f : NULL);
        b1 = tcast_exp_elem(k, p, b1, u1, f ? f + 1 : NULL);
    }
};

// Round-to-nearest-even path as an element quantizer (see tcast_rne_elem): ok groups and finite
// elements take the float path; the rest tcast_quantize out of line.
struct TcastQRne : TcastQExp {
    typedef TcastRneParam Param;
    static __device__ Param param(const TcastKernelArgs& k, const TcastGroupScale& g) { return tcast_rne_param(k, g); }
    static __device__ void cast2(const TcastKernelArgs& k, const Param& p, uint32_t& b0, uint32_t& b1, uint64_t i0, uint64_t i1,
                                 unsigned* f) {
        if (p.ok && max(b0 & 0x7FFFFFFFu, b1 & 0x7FFFFFFFu) < TCAST_F32_INF) {
            b0 = tcast_rne_elem(k, p, b0);
            b1 = tcast_rne_elem(k, p, b1);
            return;
        }
        TcastExpParam e;
        e.code = p.code;  // all tcast_exp_group reads
        const TcastGroupScale g = tcast_exp_group(k, e);
        b0 = tcast_quantize_slow_(&k.dt, g, b0, 0u).x;
        b1 = tcast_quantize_slow_(&k.dt, g, b1, 0u).x;
        (void)i0;
        (void)i1;
        (void)f;  // never instantiated with statistics (tcast_dispatch_)
    }
};

// Casts the 8 elements of a packet (flat indices idx0 .. idx0 + 7) with one group scale.
template <class Q, bool STATS>
__device__ __forceinline__ void tcast_cast_packet(const TcastKernelArgs& k, const typename Q::Param& p, uint32_t (&b)[8],
                                                  uint64_t idx0, TcastCounts& cnt) {
    #pragma unroll
    for (int e = 0; e < 8; e += 2) {
        unsigned f[2] = {0u, 0u};
        Q::cast2(k, p, b[e], b[e + 1], idx0 + e, idx0 + e + 1, STATS ? f : nullptr);
        if (STATS) {
            cnt.add(f[0], true);
            cnt.add(f[1], true);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Row path (sections 4.2-4.4): groups of consecutive flat elements, or given group scales.
//   TILE:  tiles of `tile` elements along a row (tile | cols, so tiles never straddle rows).
//   !TILE: gs == NULL: unscaled; gs_rows: gs[row] (channel, dim 1); else gs[0] (per tensor).
// npk = rows * cols / 8 packets; x, y 16-byte aligned; y may equal x.

// Tiles of SG = 2 or 4 elements: 8 / SG groups inside one packet.
template <class Q, bool STATS, int SG>
__device__ __forceinline__ void tcast_packet_small_tiles(const TcastKernelArgs& k, uint32_t (&b)[8], uint64_t idx0, TcastCounts& cnt,
                                                         unsigned* s_hist) {
    #pragma unroll
    for (int g0 = 0; g0 < 8; g0 += SG) {
        typename Q::Acc acc = Q::init();
        #pragma unroll
        for (int e = 0; e < SG; e++) Q::add(acc, b[g0 + e]);
        const TcastGroupScale g = Q::scale(k, acc);
        const typename Q::Param p = Q::param(k, g);
        if (STATS) tcast_hist_add(s_hist, g.hist);
        #pragma unroll
        for (int e = 0; e < SG; e += 2) {
            unsigned f[2] = {0u, 0u};
            Q::cast2(k, p, b[g0 + e], b[g0 + e + 1], idx0 + g0 + e, idx0 + g0 + e + 1, STATS ? f : nullptr);
            if (STATS) {
                cnt.add(f[0], true);
                cnt.add(f[1], true);
            }
        }
    }
}

template <class Q, bool STATS, bool TILE>
__global__ void __launch_bounds__(TCAST_THREADS, Q::MIN_BLOCKS)
    tcast_rows_kernel(floatX* y, const floatX* x, size_t npk, int cols, int tile, const TcastGroupScale* gs, int gs_rows,
                      const __grid_constant__ TcastKernelArgs k, TcastDeviceStats* stats) {
    __shared__ unsigned s_hist[STATS ? TCAST_HIST_BINS : 1];
    if (STATS) tcast_hist_init(s_hist);
    TcastCounts cnt = {0u, 0u, 0u};
    const int lane = threadIdx.x & 31;
    const size_t nunits = (npk + TCAST_ROW_PACKETS * 32 - 1) / (TCAST_ROW_PACKETS * 32);
    const size_t nwarps = (size_t)gridDim.x * TCAST_WARPS;
    // tiles of 8 .. 1024: lanes per tile (shuffle span) and packets per tile inside one lane
    const int G = TILE ? min(max(tile / 8, 1), 32) : 1, JG = TILE ? max(tile / 256, 1) : 1;
    // the uniform scale (unscaled, per tensor); a placeholder for the other modes
    const typename Q::Param pu = Q::param(k, !TILE && !gs_rows && gs ? gs[0] : tcast_unscaled_group());
    const bool small32 = npk * 8 <= 0xFFFFFFFFull;  // 32-bit row division suffices

    for (size_t unit = (size_t)blockIdx.x * TCAST_WARPS + threadIdx.x / 32; unit < nunits; unit += nwarps) {
        uint32_t b[TCAST_ROW_PACKETS][8];
        size_t pk[TCAST_ROW_PACKETS];
        bool valid[TCAST_ROW_PACKETS];
        #pragma unroll
        for (int j = 0; j < TCAST_ROW_PACKETS; j++) {  // all loads first: 64 bytes in flight per thread
            pk[j] = unit * (TCAST_ROW_PACKETS * 32) + j * 32 + lane;
            valid[j] = pk[j] < npk;
            tcast_unpack8(valid[j] ? tcast_load16(x + pk[j] * 8) : make_uint4(0u, 0u, 0u, 0u), b[j]);
        }
        if (TILE && tile <= 4) {
            #pragma unroll
            for (int j = 0; j < TCAST_ROW_PACKETS; j++) {
                if (!valid[j]) continue;
                if (tile == 2) tcast_packet_small_tiles<Q, STATS, 2>(k, b[j], pk[j] * 8, cnt, s_hist);
                else tcast_packet_small_tiles<Q, STATS, 4>(k, b[j], pk[j] * 8, cnt, s_hist);
                tcast_store16(y + pk[j] * 8, tcast_pack8(b[j]));
            }
            continue;
        }
        // tiles of 8 .. 1024: merge the accumulations over the tile's lanes and packets (invalid
        // packets hold zeros, the identity of every accumulation; no tile is partly valid)
        typename Q::Acc acc[TCAST_ROW_PACKETS];
        if (TILE) {
            #pragma unroll
            for (int j = 0; j < TCAST_ROW_PACKETS; j++) {
                acc[j] = Q::init();
                #pragma unroll
                for (int e = 0; e < 8; e++) Q::add(acc[j], b[j][e]);
            }
            for (int off = 1; off < G; off <<= 1) {  // G uniform: every lane shuffles
                #pragma unroll
                for (int j = 0; j < TCAST_ROW_PACKETS; j++) Q::merge(acc[j], Q::shfl_xor(acc[j], off));
            }
            if (JG >= 2) {  // tiles of 512 / 1024: packets (0,1), (2,3) / all four of a lane
                Q::merge(acc[0], acc[1]);
                Q::merge(acc[2], acc[3]);
                if (JG >= 4) Q::merge(acc[0], acc[2]);
                acc[1] = acc[0];
                if (JG >= 4) acc[2] = acc[0];
                acc[3] = acc[2];
            }
        }
        // then one packet at a time: its scale, its elements, its store (short live ranges)
        #pragma unroll
        for (int j = 0; j < TCAST_ROW_PACKETS; j++) {
            typename Q::Param p = pu;
            if (TILE) {
                const TcastGroupScale g = Q::scale(k, acc[j]);
                p = Q::param(k, g);
                if (STATS && valid[j] && lane % G == 0 && j % JG == 0) tcast_hist_add(s_hist, g.hist);
            } else if (gs_rows && valid[j]) {
                const size_t e0 = pk[j] * 8;
                p = Q::param(k, gs[small32 ? (size_t)((uint32_t)e0 / (uint32_t)cols) : e0 / (size_t)cols]);
            }
            if (!valid[j]) continue;
            tcast_cast_packet<Q, STATS>(k, p, b[j], pk[j] * 8, cnt);
            tcast_store16(y + pk[j] * 8, tcast_pack8(b[j]));
        }
    }
    if (STATS) {
        tcast_counts_flush(stats, cnt);
        tcast_hist_flush(s_hist, stats);
    }
}

// ------------------------------------------------------------------------------------------------
// Column path (sections 4.2-4.4 along dim 0): block = strip of 256 columns (blockIdx.x) x units of
// U rows (blockIdx.y, grid-stride), U = max(tile, 32) for tiles, 32 for given scales. Thread (warp
// w, lane): columns c .. c + 7 (c = strip + 8 lane) and rows w*4 .. w*4 + 3 of each 32-row chunk.
//   TILE:  tiles of `tile` rows (tile | rows).   !TILE: gs[c] per column (channel, dim 0).
// cols % 8 == 0; x, y 16-byte aligned; y may equal x.

// The thread's 4 x 8 block of chunk `r0c` (rows r0c + w*4 + kk): loads (zeros where invalid).
__device__ __forceinline__ void tcast_cols_load(const floatX* x, int rows, int cols, int r0c, int c, bool cvalid,
                                                uint32_t (&b)[TCAST_COL_RPT][8], bool (&rv)[TCAST_COL_RPT]) {
    const int w = threadIdx.x >> 5;
    #pragma unroll
    for (int kk = 0; kk < TCAST_COL_RPT; kk++) {
        const int r = r0c + w * TCAST_COL_RPT + kk;
        rv[kk] = cvalid && r < rows;
        tcast_unpack8(rv[kk] ? tcast_load16(x + (size_t)r * cols + c) : make_uint4(0u, 0u, 0u, 0u), b[kk]);
    }
}

// Casts column j's rows (kk, kk + 1) of the thread's block with scale p, then stores the rows.
template <class Q, bool STATS>
__device__ __forceinline__ void tcast_cols_cast_pair(const TcastKernelArgs& k, const typename Q::Param& p, uint32_t (&b)[TCAST_COL_RPT][8],
                                                     const bool (&rv)[TCAST_COL_RPT], int kk, int j, size_t idx_kk, int cols,
                                                     TcastCounts& cnt) {
    unsigned f[2] = {0u, 0u};
    Q::cast2(k, p, b[kk][j], b[kk + 1][j], idx_kk + j, idx_kk + (size_t)cols + j, STATS ? f : nullptr);
    if (STATS) {
        cnt.add(f[0], rv[kk]);
        cnt.add(f[1], rv[kk + 1]);
    }
}

__device__ __forceinline__ void tcast_cols_store(floatX* y, int cols, int r0c, int c, const uint32_t (&b)[TCAST_COL_RPT][8],
                                                 const bool (&rv)[TCAST_COL_RPT]) {
    const int w = threadIdx.x >> 5;
    #pragma unroll
    for (int kk = 0; kk < TCAST_COL_RPT; kk++)
        if (rv[kk]) tcast_store16(y + (size_t)(r0c + w * TCAST_COL_RPT + kk) * cols + c, tcast_pack8(b[kk]));
}

template <class Q, bool STATS, bool TILE>
__global__ void __launch_bounds__(TCAST_THREADS, Q::MIN_BLOCKS)
    tcast_cols_kernel(floatX* y, const floatX* x, int rows, int cols, int tile, const TcastGroupScale* gs,
                      const __grid_constant__ TcastKernelArgs k, TcastDeviceStats* stats) {
    typedef typename Q::Acc Acc;
    typedef typename Q::Param Param;
    // Shared bytes: tiles of 8 .. 1024 rows: per-warp partials Acc[8 warps][256 columns], then (same
    // bytes, after a barrier) the tiles' scales Param[up to 4 tiles per chunk][256 columns];
    // channel scales: Param[256 columns] for the whole kernel.
    constexpr size_t RED_BYTES = TCAST_WARPS * TCAST_STRIP_COLS * sizeof(Acc);
    constexpr size_t PAR_BYTES = 4 * TCAST_STRIP_COLS * sizeof(Param);
    constexpr size_t BUF_BYTES = TILE ? (RED_BYTES > PAR_BYTES ? RED_BYTES : PAR_BYTES) : TCAST_STRIP_COLS * sizeof(Param);
    __shared__ __align__(16) unsigned char s_buf[BUF_BYTES];
    __shared__ unsigned s_hist[STATS ? TCAST_HIST_BINS : 1];
    if (STATS) tcast_hist_init(s_hist);
    TcastCounts cnt = {0u, 0u, 0u};
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, t = threadIdx.x;
    const int strip = blockIdx.x * TCAST_STRIP_COLS, c = strip + lane * 8;
    const bool cvalid = c < cols;
    const int U = TILE ? max(tile, TCAST_CHUNK_ROWS) : TCAST_CHUNK_ROWS, nch = U / TCAST_CHUNK_ROWS;
    const int nunits = (rows + U - 1) / U;
    Param* par = reinterpret_cast<Param*>(s_buf);
    if (!TILE) {  // channel scales: thread t derives column strip + t's once
        par[t] = Q::param(k, strip + t < cols ? gs[strip + t] : tcast_unscaled_group());
        __syncthreads();
    }
    for (int unit = blockIdx.y; unit < nunits; unit += gridDim.y) {
        const int r0 = unit * U;
        uint32_t b[TCAST_COL_RPT][8];
        bool rv[TCAST_COL_RPT];
        if (!TILE || tile <= 4) {
            tcast_cols_load(x, rows, cols, r0, c, cvalid, b, rv);
            const size_t idx0 = (size_t)(r0 + w * TCAST_COL_RPT) * cols + c;  // flat index of (row kk = 0, column c)
            #pragma unroll
            for (int j = 0; j < 8; j++) {
                Param p;
                if (!TILE) p = par[lane * 8 + j];
                #pragma unroll
                for (int kk = 0; kk < TCAST_COL_RPT; kk += 2) {
                    if (TILE && (tile == 2 || kk == 0)) {  // a new tile: rows kk, kk + 1 (tile 2) or 0 .. 3 (tile 4)
                        Acc acc = Q::init();
                        Q::add(acc, b[kk][j]);
                        Q::add(acc, b[kk + 1][j]);
                        if (tile == 4) {
                            Q::add(acc, b[2][j]);
                            Q::add(acc, b[3][j]);
                        }
                        const TcastGroupScale g = Q::scale(k, acc);
                        p = Q::param(k, g);
                        if (STATS && rv[kk]) tcast_hist_add(s_hist, g.hist);  // rows % tile == 0: whole tiles
                    }
                    tcast_cols_cast_pair<Q, STATS>(k, p, b, rv, kk, j, idx0 + (size_t)kk * cols, cols, cnt);
                }
            }
            tcast_cols_store(y, cols, r0, c, b, rv);
        } else {
            // tiles of 8 .. 1024 rows. Phase A: this thread's share of every column's tile accumulation.
            Acc acc[8];
            #pragma unroll
            for (int j = 0; j < 8; j++) acc[j] = Q::init();
            for (int ch = 0; ch < nch; ch++) {
                tcast_cols_load(x, rows, cols, r0 + ch * TCAST_CHUNK_ROWS, c, cvalid, b, rv);
                #pragma unroll
                for (int kk = 0; kk < TCAST_COL_RPT; kk++) {
                    #pragma unroll
                    for (int j = 0; j < 8; j++) Q::add(acc[j], b[kk][j]);
                }
            }
            Acc* red = reinterpret_cast<Acc*>(s_buf);
            #pragma unroll
            for (int j = 0; j < 8; j++) red[w * TCAST_STRIP_COLS + lane * 8 + j] = acc[j];
            __syncthreads();
            // one thread per column t: merge the warps of each tile (WG warps = tile / 4 rows; NG tiles
            // per 32-row chunk), derive the tiles' scales
            const int WG = min(TCAST_WARPS, tile / TCAST_COL_RPT), NG = TCAST_WARPS / WG;
            Acc m[4];
            #pragma unroll
            for (int g = 0; g < 4; g++) {
                m[g] = Q::init();
                if (g < NG)
                    for (int i = 0; i < WG; i++) Q::merge(m[g], red[(g * WG + i) * TCAST_STRIP_COLS + t]);
            }
            __syncthreads();  // red is dead: its bytes become par
            #pragma unroll
            for (int g = 0; g < 4; g++) {
                if (g < NG) {
                    const TcastGroupScale gsc = Q::scale(k, m[g]);
                    par[g * TCAST_STRIP_COLS + t] = Q::param(k, gsc);
                    if (STATS && strip + t < cols && r0 + g * tile < rows) tcast_hist_add(s_hist, gsc.hist);
                }
            }
            __syncthreads();
            const Param* pw = par + (w / WG) * TCAST_STRIP_COLS + lane * 8;  // this warp's tile, this lane's columns
            // Phase B: cast (reading the chunks again when the tile spans several: from L2)
            for (int ch = 0; ch < nch; ch++) {
                const int r0c = r0 + ch * TCAST_CHUNK_ROWS;
                if (nch > 1) tcast_cols_load(x, rows, cols, r0c, c, cvalid, b, rv);
                const size_t idx0 = (size_t)(r0c + w * TCAST_COL_RPT) * cols + c;
                #pragma unroll
                for (int j = 0; j < 8; j++) {
                    const Param p = pw[j];
                    #pragma unroll
                    for (int kk = 0; kk < TCAST_COL_RPT; kk += 2)
                        tcast_cols_cast_pair<Q, STATS>(k, p, b, rv, kk, j, idx0 + (size_t)kk * cols, cols, cnt);
                }
                tcast_cols_store(y, cols, r0c, c, b, rv);
            }
            __syncthreads();  // s_buf is reused by the next unit
        }
    }
    if (STATS) {
        tcast_counts_flush(stats, cnt);
        tcast_hist_flush(s_hist, stats);
    }
}

// ------------------------------------------------------------------------------------------------
// Reductions of the channel and per-tensor scales (the whole slice before any element is cast).
// vec: cols % 8 == 0 and x 16-byte aligned (packets), else element loads.

// Channel along dim 1: one warp per row; lane 0 writes the row's group scale (and its histogram bin).
template <bool STATS>
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_reduce_rows_kernel(TcastGroupScale* scales, const floatX* x, int rows, int cols, int vec, const __grid_constant__ TcastDataType dt,
                             TcastDeviceStats* stats) {
    __shared__ unsigned s_hist[STATS ? TCAST_HIST_BINS : 1];
    if (STATS) tcast_hist_init(s_hist);
    const int lane = threadIdx.x & 31;
    for (int r = blockIdx.x * TCAST_WARPS + threadIdx.x / 32; r < rows; r += gridDim.x * TCAST_WARPS) {
        const floatX* row = x + (size_t)r * cols;
        TcastGroupAcc acc = tcast_acc_init();
        if (vec) {
            for (int c = lane * 8; c < cols; c += 256) {
                uint32_t b[8];
                tcast_unpack8(tcast_load16(row + c), b);
                #pragma unroll
                for (int e = 0; e < 8; e++) tcast_acc_add(&acc, __uint_as_float(b[e]));
            }
        } else {
            for (int c = lane; c < cols; c += 32) tcast_acc_add(&acc, __uint_as_float(tcast_load1(row + c)));
        }
        #pragma unroll
        for (int off = 16; off > 0; off >>= 1) tcast_acc_merge(&acc, tcast_acc_shfl_xor(acc, off));
        if (lane == 0) {
            const TcastGroupScale g = tcast_group_scale(&dt, acc);
            scales[r] = g;
            if (STATS) tcast_hist_add(s_hist, g.hist);
        }
    }
    if (STATS) tcast_hist_flush(s_hist, stats);
}

// Channel along dim 0: block = 256 columns (lane: 8 adjacent columns) x `rows_per_block` rows (warp w:
// rows w, w + 8, ...); merged over the warps in shared memory, then into acc[c] with atomics (acc
// zeroed before the launch).
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_reduce_cols_kernel(TcastGroupAcc* acc_out, const floatX* x, int rows, int cols, int vec, int rows_per_block) {
    __shared__ TcastGroupAcc red[TCAST_WARPS][TCAST_STRIP_COLS];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int strip = blockIdx.x * TCAST_STRIP_COLS, c = strip + lane * 8;
    const int r0 = blockIdx.y * rows_per_block, r1 = min(rows, r0 + rows_per_block);
    TcastGroupAcc acc[8];
    #pragma unroll
    for (int j = 0; j < 8; j++) acc[j] = tcast_acc_init();
    for (int r = r0 + w; r < r1; r += TCAST_WARPS) {
        const floatX* row = x + (size_t)r * cols;
        uint32_t b[8];
        if (vec) {
            if (c < cols) tcast_unpack8(tcast_load16(row + c), b);
            else tcast_unpack8(make_uint4(0u, 0u, 0u, 0u), b);
        } else {
            #pragma unroll
            for (int j = 0; j < 8; j++) b[j] = c + j < cols ? tcast_load1(row + c + j) : 0u;
        }
        #pragma unroll
        for (int j = 0; j < 8; j++) tcast_acc_add(&acc[j], __uint_as_float(b[j]));
    }
    #pragma unroll
    for (int j = 0; j < 8; j++) red[w][lane * 8 + j] = acc[j];
    __syncthreads();
    const int t = threadIdx.x;
    if (strip + t < cols) {
        TcastGroupAcc m = red[0][t];
        for (int i = 1; i < TCAST_WARPS; i++) tcast_acc_merge(&m, red[i][t]);
        tcast_acc_atomic(&acc_out[strip + t], m);
    }
}

// Per tensor: grid-stride over the flat tensor, one set of atomics per block into acc[0] (zeroed
// before the launch).
__global__ void __launch_bounds__(TCAST_THREADS) tcast_reduce_tensor_kernel(TcastGroupAcc* acc_out, const floatX* x, size_t n, int vec) {
    __shared__ TcastGroupAcc red[TCAST_WARPS];
    TcastGroupAcc acc = tcast_acc_init();
    const size_t tid = (size_t)blockIdx.x * TCAST_THREADS + threadIdx.x, nthr = (size_t)gridDim.x * TCAST_THREADS;
    if (vec) {
        for (size_t p = tid; p < n / 8; p += nthr) {
            uint32_t b[8];
            tcast_unpack8(tcast_load16(x + p * 8), b);
            #pragma unroll
            for (int e = 0; e < 8; e++) tcast_acc_add(&acc, __uint_as_float(b[e]));
        }
    } else {
        for (size_t i = tid; i < n; i += nthr) tcast_acc_add(&acc, __uint_as_float(tcast_load1(x + i)));
    }
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) tcast_acc_merge(&acc, tcast_acc_shfl_xor(acc, off));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < TCAST_WARPS; i++) tcast_acc_merge(&acc, red[i]);
        tcast_acc_atomic(acc_out, acc);
    }
}

// scales[i] = tcast_group_scale(dt, acc[i]) for i < n (and the histogram bins).
template <bool STATS>
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_scales_kernel(TcastGroupScale* scales, const TcastGroupAcc* acc, int n, const __grid_constant__ TcastDataType dt, TcastDeviceStats* stats) {
    __shared__ unsigned s_hist[STATS ? TCAST_HIST_BINS : 1];
    if (STATS) tcast_hist_init(s_hist);
    for (int i = blockIdx.x * TCAST_THREADS + threadIdx.x; i < n; i += gridDim.x * TCAST_THREADS) {
        const TcastGroupScale g = tcast_group_scale(&dt, acc[i]);
        scales[i] = g;
        if (STATS) tcast_hist_add(s_hist, g.hist);
    }
    if (STATS) tcast_hist_flush(s_hist, stats);
}

// ------------------------------------------------------------------------------------------------
// Section 4.1: M:N pruning along dim, y = prune(x) (y may equal x). A warp takes gpw = 32 / N groups,
// one lane per element; each lane ranks its element against the group's N keys (shuffles) and keeps
// it iff fewer than M beat it (tcast_sparse_beats: larger magnitude, NaN above all, ties to the lower
// index). Along rows lane = group * N + j (consecutive elements); along columns lane = j * gpw + group
// (a row of gpw adjacent columns per load).
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_prune_kernel(floatX* y, const floatX* x, int rows, int cols, int along_rows, int M, int N) {
    const int lane = threadIdx.x & 31, gpw = 32 / N;
    const int j = along_rows ? lane % N : lane / gpw, gl = along_rows ? lane / N : lane % gpw;
    const bool active = lane < gpw * N;
    const size_t ngroups = (size_t)rows * cols / N;
    const size_t nwarps = (size_t)gridDim.x * TCAST_WARPS;
    for (size_t task = (size_t)blockIdx.x * TCAST_WARPS + threadIdx.x / 32; task * gpw < ngroups; task += nwarps) {
        const size_t g = task * gpw + gl;
        const bool valid = active && g < ngroups;
        size_t idx = 0;
        if (valid) idx = along_rows ? g * N + j : ((g / cols) * N + j) * (size_t)cols + g % cols;
        const unsigned short raw = valid ? *reinterpret_cast<const unsigned short*>(x + idx) : (unsigned short)0;
        const uint32_t key = tcast_sparse_key(__uint_as_float((uint32_t)raw << 16));
        int rank = 0;
        for (int kk = 0; kk < N; kk++) {
            const uint32_t kk_key = __shfl_sync(TCAST_FULL_MASK, key, along_rows ? gl * N + kk : kk * gpw + gl);
            rank += tcast_sparse_beats(kk_key, kk, key, j);
        }
        if (valid) *reinterpret_cast<unsigned short*>(y + idx) = rank < M ? raw : (unsigned short)0;
    }
}

// ------------------------------------------------------------------------------------------------
// Scalar fallback (any cols, any alignment): tcast_quantize per element.
//   tile > 0: one thread per tile (dim 1: `tile` consecutive elements of a row; dim 0: of a column,
//             tiles numbered column-fastest so that a warp reads adjacent columns).
//   tile <= 0: one thread per element; gs == NULL: unscaled; gs_index 1: gs[row], 2: gs[col], 0: gs[0].
template <bool STATS>
__global__ void __launch_bounds__(TCAST_THREADS)
    tcast_scalar_kernel(floatX* y, const floatX* x, int rows, int cols, int along_rows, int tile, const TcastGroupScale* gs,
                        int gs_index, const __grid_constant__ TcastKernelArgs k, TcastDeviceStats* stats) {
    TcastCounts cnt = {0u, 0u, 0u};
    const size_t n = (size_t)rows * cols, tid = (size_t)blockIdx.x * TCAST_THREADS + threadIdx.x;
    const size_t nthr = (size_t)gridDim.x * TCAST_THREADS;
    if (tile > 0) {
        const size_t ngroups = n / tile;
        for (size_t gi = tid; gi < ngroups; gi += nthr) {
            size_t base, stride;
            if (along_rows) {
                base = gi * tile;  // tile | cols: the tiles of row r are consecutive
                stride = 1;
            } else {
                base = (gi / cols) * tile * (size_t)cols + gi % cols;
                stride = cols;
            }
            TcastGroupAcc acc = tcast_acc_init();
            for (int e = 0; e < tile; e++) tcast_acc_add(&acc, __uint_as_float(tcast_load1(x + base + e * stride)));
            const TcastGroupScale g = tcast_group_scale_slow_(&k.dt, acc);
            if (STATS && g.hist >= 0) tcast_stats_group(stats, g.hist);
            for (int e = 0; e < tile; e++) {
                const size_t i = base + e * stride;
                const uint32_t u = k.stochastic ? tcast_random_bits(k.seed, i) : 0u;
                const uint2 r = tcast_quantize_slow_(&k.dt, g, tcast_load1(x + i), u);
                tcast_store1(y + i, r.x);
                if (STATS) cnt.add(r.y, true);
            }
        }
    } else {
        for (size_t i = tid; i < n; i += nthr) {
            TcastGroupScale g = tcast_unscaled_group();
            if (gs) g = gs[gs_index == 1 ? i / cols : gs_index == 2 ? i % cols : 0];
            const uint32_t u = k.stochastic ? tcast_random_bits(k.seed, i) : 0u;
            const uint2 r = tcast_quantize_slow_(&k.dt, g, tcast_load1(x + i), u);
            tcast_store1(y + i, r.x);
            if (STATS) cnt.add(r.y, true);
        }
    }
    if (STATS) tcast_counts_flush(stats, cnt);
}

// ------------------------------------------------------------------------------------------------
// Host: shape checks, path choice, launcher

// 0 if a (rows, cols) tensor cast along dim suits dt, else -1 with a message in err (n bytes; may
// be NULL): the checks of tcast_cast_host, in its words.
static inline int tcast_cast_shape_ok(const TcastDataType& dt, int rows, int cols, int dim, char* err, size_t n) {
    if (rows < 1 || cols < 1) return tcast_fail_(err, n, "%s: bad shape %d x %d", dt.name, rows, cols);
    if (dim < -2 || dim > 1) return tcast_fail_(err, n, "%s: dim %d is not -1, 1 (rows) or 0, -2 (columns)", dt.name, dim);
    const bool along_rows = dim == -1 || dim == 1;
    if (dt.has_scale && dt.scale.dim_given && along_rows != (dt.scale.dim == -1 || dt.scale.dim == 1))
        return tcast_fail_(err, n, "%s: the scale spec's d%d conflicts with the cast dimension %d", dt.name, dt.scale.dim, dim);
    const int len = along_rows ? cols : rows;
    const int tile = dt.has_scale ? dt.scale.tile : -1;
    if (tile > 0 && len % tile != 0)
        return tcast_fail_(err, n, "%s: tile %d does not divide the size %d along dim %d", dt.name, tile, len, dim);
    if (dt.sparse_n > 0 && len % dt.sparse_n != 0)
        return tcast_fail_(err, n, "%s: sparsity group N=%d does not divide the size %d along dim %d", dt.name, dt.sparse_n, len, dim);
    if (dt.sparse_n > TCAST_SPARSE_N_MAX || (dt.sparse_n > 0 && (dt.sparse_m < 1 || dt.sparse_m >= dt.sparse_n)))
        return tcast_fail_(err, n, "%s: sparsity %d:%d needs 1 <= M < N <= %d", dt.name, dt.sparse_m, dt.sparse_n, TCAST_SPARSE_N_MAX);
    return 0;
}

static inline void tcast_cast_die_(const char* msg) {
    fprintf(stderr, "error: tcast_cast: %s\n", msg);
    exit(EXIT_FAILURE);
}

// Which element quantizer a data type takes (see the top of the file).
typedef enum { TCAST_PATH_GENERAL = 0, TCAST_PATH_EXP = 1, TCAST_PATH_RNE = 2 } TcastPath;

static inline TcastPath tcast_cast_path(const TcastDataType& dt, bool with_stats) {
    const TcastKernelArgs k = tcast_kernel_args(dt, 0);
    if (!k.fast) return TCAST_PATH_GENERAL;
    return k.rne && !with_stats ? TCAST_PATH_RNE : TCAST_PATH_EXP;
}

static inline const char* tcast_cast_path_name(TcastPath p) {
    static const char* const names[] = {"general", "exp", "rne"};
    return (unsigned)p < 3u ? names[p] : "?";
}

// Calls f(Q(), std::integral_constant<bool, STATS>()) for the path's quantizer.
template <class F>
static inline void tcast_dispatch_(TcastPath path, bool stats, F&& f) {
    if (path == TCAST_PATH_GENERAL) {
        if (stats) f(TcastQGeneral(), std::true_type());
        else f(TcastQGeneral(), std::false_type());
    } else if (stats) {
        f(TcastQExp(), std::true_type());  // the statistics count through the exponent path
    } else if (path == TCAST_PATH_EXP) {
        f(TcastQExp(), std::false_type());
    } else {
        f(TcastQRne(), std::false_type());
    }
}

static inline int tcast_sm_count_(void) {
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        if (sms < 1) sms = 1;
    }
    return sms;
}

// Blocks for `work` items of `per_block` each, at most 64 per SM (the kernels loop grid-stride beyond).
static inline unsigned tcast_blocks_(size_t work, size_t per_block) {
    const size_t cap = (size_t)tcast_sm_count_() * 64;
    size_t b = (work + per_block - 1) / per_block;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

// y = cast(x), doc/TCAST.md section 4 (see the top of the file).
static inline void tcast_cast(floatX* y, const floatX* x, int rows, int cols, int dim, const TcastDataType& dt, uint64_t seed,
                              TcastDeviceStats* stats, TcastCastContext* ctx, cudaStream_t stream) {
    char err[256];
    if (tcast_cast_shape_ok(dt, rows, cols, dim, err, sizeof(err)) != 0) tcast_cast_die_(err);
    const bool along_rows = dim == 1 || dim == -1;
    const size_t n = (size_t)rows * (size_t)cols;
    const int tile = dt.has_scale ? dt.scale.tile : -1;  // > 0 tile, 0 channel, -1 per tensor (or unscaled)
    const int groups = tile == 0 ? (along_rows ? rows : cols) : (tile < 0 && dt.has_scale ? 1 : 0);
    if (groups > 0 && (ctx == NULL || ctx->capacity < groups)) {
        snprintf(err, sizeof(err), "%s: a %s scale of a %d x %d tensor needs a TcastCastContext of capacity %d (have %d)", dt.name,
                 tile == 0 ? "channel" : "per-tensor", rows, cols, groups, ctx ? ctx->capacity : 0);
        tcast_cast_die_(err);
    }
    // 4.1: prune into y, then cast y in place
    const floatX* src = x;
    if (dt.sparse_n > 0) {
        const size_t tasks = (n / dt.sparse_n + (32 / dt.sparse_n) - 1) / (32 / dt.sparse_n);
        tcast_prune_kernel<<<tcast_blocks_(tasks, TCAST_WARPS), TCAST_THREADS, 0, stream>>>(y, x, rows, cols, along_rows, dt.sparse_m,
                                                                                          dt.sparse_n);
        cudaCheckLaunch();
        src = y;
    }
    const TcastKernelArgs k = tcast_kernel_args(dt, seed);
    const bool vec = ((uintptr_t)src % 16 == 0) && ((uintptr_t)y % 16 == 0) && cols % 8 == 0;
    // channel and per-tensor scales: reduction pass into ctx->scales
    const TcastGroupScale* gs = NULL;
    if (groups > 0) {
        gs = ctx->scales;
        if (tile == 0 && along_rows) {
            const unsigned blocks = tcast_blocks_((size_t)rows, TCAST_WARPS);
            if (stats) tcast_reduce_rows_kernel<true><<<blocks, TCAST_THREADS, 0, stream>>>(ctx->scales, src, rows, cols, vec, dt, stats);
            else tcast_reduce_rows_kernel<false><<<blocks, TCAST_THREADS, 0, stream>>>(ctx->scales, src, rows, cols, vec, dt, stats);
        } else {
            cudaCheck(cudaMemsetAsync(ctx->acc, 0, (size_t)groups * sizeof(TcastGroupAcc), stream));  // = tcast_acc_init()
            if (tile == 0) {
                const int rpb = 256;
                const dim3 grid((unsigned)ceil_div(cols, TCAST_STRIP_COLS), (unsigned)ceil_div(rows, rpb));
                tcast_reduce_cols_kernel<<<grid, TCAST_THREADS, 0, stream>>>(ctx->acc, src, rows, cols, vec, rpb);
            } else {
                tcast_reduce_tensor_kernel<<<tcast_blocks_(n, 8 * TCAST_THREADS), TCAST_THREADS, 0, stream>>>(ctx->acc, src, n, vec);
            }
            cudaCheckLaunch();
            const unsigned blocks = tcast_blocks_((size_t)groups, TCAST_THREADS);
            if (stats) tcast_scales_kernel<true><<<blocks, TCAST_THREADS, 0, stream>>>(ctx->scales, ctx->acc, groups, dt, stats);
            else tcast_scales_kernel<false><<<blocks, TCAST_THREADS, 0, stream>>>(ctx->scales, ctx->acc, groups, dt, stats);
        }
        cudaCheckLaunch();
    }
    if (!vec) {
        const int gs_index = tile == 0 ? (along_rows ? 1 : 2) : 0;
        const size_t work = tile > 0 ? n / tile : n;
        const unsigned blocks = tcast_blocks_(work, TCAST_THREADS);
        if (stats) tcast_scalar_kernel<true><<<blocks, TCAST_THREADS, 0, stream>>>(y, src, rows, cols, along_rows, tile, gs, gs_index, k, stats);
        else tcast_scalar_kernel<false><<<blocks, TCAST_THREADS, 0, stream>>>(y, src, rows, cols, along_rows, tile, gs, gs_index, k, stats);
        cudaCheckLaunch();
        return;
    }
    tcast_dispatch_(tcast_cast_path(dt, stats != NULL), stats != NULL, [&](auto q, auto st) {
        using Q = decltype(q);
        constexpr bool S = decltype(st)::value;
        if (tile >= 0 && !along_rows) {
            // column path: tiles along dim 0, or channel scales per column
            const int U = tile > 0 ? (tile > TCAST_CHUNK_ROWS ? tile : TCAST_CHUNK_ROWS) : TCAST_CHUNK_ROWS;
            const int nunits = ceil_div(rows, U);
            const dim3 grid((unsigned)ceil_div(cols, TCAST_STRIP_COLS), (unsigned)(nunits < 65535 ? nunits : 65535));
            if (tile > 0) tcast_cols_kernel<Q, S, true><<<grid, TCAST_THREADS, 0, stream>>>(y, src, rows, cols, tile, gs, k, stats);
            else tcast_cols_kernel<Q, S, false><<<grid, TCAST_THREADS, 0, stream>>>(y, src, rows, cols, tile, gs, k, stats);
        } else {
            // row path: tiles along dim 1, channel scales per row, per-tensor and unscaled (either dim)
            const size_t npk = n / 8;
            const unsigned blocks = tcast_blocks_((npk + TCAST_ROW_PACKETS * 32 - 1) / (TCAST_ROW_PACKETS * 32), TCAST_WARPS);
            if (tile > 0) tcast_rows_kernel<Q, S, true><<<blocks, TCAST_THREADS, 0, stream>>>(y, src, npk, cols, tile, gs, 0, k, stats);
            else tcast_rows_kernel<Q, S, false><<<blocks, TCAST_THREADS, 0, stream>>>(y, src, npk, cols, tile, gs, tile == 0, k, stats);
        }
    });
    cudaCheckLaunch();
}
