// fp8_quant.cuh - FP8 quantization for the FP8 and TCFP-12 GEMM backends: per-tensor amax, scales computed
// on the device (current and delayed scaling), quantization of row-major matrices (plain or transposed,
// round-to-nearest-even or stochastic rounding), block scaling along K (including the scale layouts
// cuBLASLt's Hopper block-scaled FP8 GEMMs read), the TCFP-12 weight split W = W_hi + W_lo, code transposes
// and dequantization for diagnostics.
//
// Formats. Every conversion goes through llmc/numerics/fp8.h, the single definition of the four FP8 formats
// (fp8_encode_rne / fp8_encode_sr / fp8_decode, always with saturate = 1: values beyond the largest finite
// value and +-Inf become +-max, NaN stays NaN). One exception, made for speed: with kind E4M3FN or E5M2
// on sm_89+, the round-to-nearest-even path of the vectorized kernels converts two values at a time with
// the hardware conversion (cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 through __nv_cvt_float2_to_fp8x2). Both
// implement OFP8 round-to-nearest-even with saturation, so for every non-NaN float (+-Inf included) the
// code is fp8_encode_rne(.., 1)'s; dev/cuda/fp8_quant.cu checks this for all 2^32 float bit patterns. The
// NaN code is not pinned down by OFP8 (fp8.h: E4M3FN 0x7F | sign, E5M2 0x7E | sign; CUDA's own software
// path gives 0x7F for E4M3 whatever the sign), so NaN inputs are re-encoded with fp8_encode_rne. The
// kernels' codes are therefore bit-identical to fp8.h for every input.
//
// Scale conventions (fp8.h): the QUANT scale s multiplies before encoding, code = Q(x * s); the value of a
// code is decode(code) / s. The DEQUANT scale is inv_s = 1 / s (one float division, correctly rounded):
// that is what cuBLASLt takes as CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER (it computes
// D = inv_s_A * inv_s_B * sum(decode(a) decode(b))). With power-of-two scales (pow2 = 1, recommended) both
// are exact and decode(code) * inv_s == decode(code) / s. Launchers that compute scales write s and,
// where a pointer is given, inv_s.
//
// Arithmetic. x * s is one correctly rounded fp32 multiplication (__fmul_rn, never contracted into an
// FMA); decode(code) / s is __fdiv_rn; sums and differences are __fadd_rn / __fsub_rn. Under
// --use_fast_math (the Makefile's flags) these run with flush-to-zero: fp32 subnormal inputs and results
// become +-0 (sign kept). This matters only for |values| below 2^-126, which every FP8 format rounds to
// zero anyway, except in the TCFP-12 error-feedback buffer (a subnormal residual is stored as 0), and an
// fp32-subnormal amax, which the device treats as 0 (scale 1). Note: fp8_scale_from_amax (the
// non-power-of-two scale, fp8.h) contains a plain '/', which --use_fast_math compiles to an approximate
// division (div.approx.ftz.f32: up to 2 ulp, and 0 for divisors >= 2^126) in device code, so device non-pow2
// scales can differ from the host's by an ulp or two (and amax >= 2^126 gives the clamp 2^-126 instead of
// max / amax). The power-of-two scales are integer code and exact everywhere: prefer pow2 = 1.
//
// Layouts: every matrix is row-major. "rows x cols" input x; the transposed output is the row-major
// (cols, rows) matrix out[c * rows + r] = Q(x[r * cols + c]). Stochastic rounding draws its 32 random bits
// from fp8_random_bits(seed, i) with i = r * cols + c, the element's index in the SOURCE row-major order,
// so plain and transposed quantization give identical codes for the same seed.
//
// Determinism: no float atomics anywhere; reductions are max reductions of |x| compared as integer bit
// patterns (order independent) through per-block partials in a fixed order. NaN propagates: a NaN anywhere
// gives a NaN amax (canonical quiet NaN 0x7FC00000), and fp8_scale*_from_amax then return 1.
//
// Scratch: fp8_amax, fp8_amax_scale and tcfp12_split (per-tensor mode) need FP8_QUANT_SCRATCH_FLOATS
// floats (4 KiB) of device scratch, overwritten. Nothing here allocates memory.
//
// Vector paths: kernels use 16-byte global loads/stores when pointers are 16-byte aligned and the shapes
// allow it (stated per launcher); otherwise they fall back to element-wise code with identical results.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>
#include <cuda_fp8.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/numerics/fp8.h"

constexpr int FP8Q_THREADS = 256;            // every kernel below runs 256-thread blocks
constexpr int FP8Q_MAX_PARTIALS = 1024;      // max blocks of the first stage of an amax reduction
constexpr int FP8Q_TILE = 64;                // transposes work on 64 x 64 tiles
// Minimum resident blocks per SM of the quantize-transpose kernel (__launch_bounds__): 5 caps it at 48
// registers, which it fits without spilling since fp8q_encode_words. The kernel is issue-bound (ncu, H200),
// so resident warps matter: on an H200 (dev/cuda/lowp_producers.cu) the plain pass ran at 55% of the copy
// rate with nvcc 13.0's own choice (72-82 registers, 3 blocks), 64% with 4 blocks, and with
// fp8q_encode_words 71% with 4 blocks and 77% with 5 (6 spills registers).
#ifndef FP8Q_TRANSPOSE_MIN_BLOCKS
#define FP8Q_TRANSPOSE_MIN_BLOCKS 5
#endif
// Device scratch (floats) needed by fp8_amax, fp8_amax_scale and per-tensor tcfp12_split.
constexpr size_t FP8_QUANT_SCRATCH_FLOATS = FP8Q_MAX_PARTIALS;

// Rows of fp8_quantize_pair's column-sum partials for a matrix of `rows` rows (one per 64-row tile).
static inline int fp8_col_partial_rows(int rows) { return (rows + FP8Q_TILE - 1) / FP8Q_TILE; }

// ------------------------------------------------------------------------------------------------
// Host-side helpers

static inline void fp8q_require(bool ok, const char* fn, const char* what) {
    if (!ok) {
        fprintf(stderr, "error: %s: %s\n", fn, what);
        exit(EXIT_FAILURE);
    }
}

static inline bool fp8q_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// Calls f(std::integral_constant<FP8Kind, kind>()) so that kernels can be specialized per format.
template <class F>
static inline void fp8q_with_kind(FP8Kind kind, F&& f) {
    switch (kind) {
    case FP8_E4M3FN: f(std::integral_constant<FP8Kind, FP8_E4M3FN>()); break;
    case FP8_E5M2: f(std::integral_constant<FP8Kind, FP8_E5M2>()); break;
    case FP8_E4M3FNUZ: f(std::integral_constant<FP8Kind, FP8_E4M3FNUZ>()); break;
    case FP8_E5M2FNUZ: f(std::integral_constant<FP8Kind, FP8_E5M2FNUZ>()); break;
    default: fp8q_require(false, "fp8_quant", "unknown FP8Kind");
    }
}

template <class F>
static inline void fp8q_with_bool(bool b, F&& f) {
    if (b) f(std::true_type());
    else f(std::false_type());
}

// ------------------------------------------------------------------------------------------------
// Block-scale layouts
//
// A block-scaled row-major (rows, K) matrix has one scale per block of block_rows x block_k elements:
// block (rb, kb) covers rows [rb * block_rows, ...) and columns [kb * block_k, ...) (the last block in each
// direction may be partial). Its scale lives at scales[rb * stride_row + kb * stride_k]. The allocated grid
// alloc_rows x alloc_k may be larger than nb_rows x nb_k (padding); padded entries are set to 1.0f by the
// launchers that write scales. Use the constructors, never fill the struct by hand.
typedef struct {
    int rows, K;             // the data matrix: row-major (rows, K), K contiguous
    int block_rows;          // rows per block: 1 for 1 x block_k blocks along K; 128 for 128 x 128 tiles
    int block_k;             // columns (K elements) per block
    int nb_rows, nb_k;       // number of blocks: ceil(rows / block_rows), ceil(K / block_k)
    int alloc_rows, alloc_k; // allocated block grid (>= nb_rows, nb_k)
    int64_t stride_row;      // scale index step per block row
    int64_t stride_k;        // scale index step per K block
} FP8BlockLayout;

static inline FP8BlockLayout fp8q_layout_base_(int rows, int K, int block_rows, int block_k) {
    fp8q_require(rows > 0 && K > 0 && block_rows > 0 && block_k > 0, "FP8BlockLayout", "rows, K and block sizes must be positive");
    FP8BlockLayout L;
    L.rows = rows;
    L.K = K;
    L.block_rows = block_rows;
    L.block_k = block_k;
    L.nb_rows = (rows + block_rows - 1) / block_rows;
    L.nb_k = fp8_num_blocks(K, block_k);
    L.alloc_rows = L.nb_rows;
    L.alloc_k = L.nb_k;
    L.stride_row = L.nb_k;
    L.stride_k = 1;
    return L;
}

// 1 x block blocks along K, scales row-major (rows, nb_k): scale of (r, kb) at r * nb_k + kb. This is the
// layout of fp8.h's fp8_block_amax_rowmajor and of the TCFP-12 per-block scales.
static inline FP8BlockLayout fp8_block_layout_rowmajor(int rows, int K, int block) {
    return fp8q_layout_base_(rows, K, 1, block);
}

// 1 x block blocks along K, scales "row index fastest": scale of (r, kb) at kb * rows + r, i.e. a row-major
// (nb_k, rows) table. With block = 128 this is cuBLASLt's CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F layout for
// an operand stored K-contiguous (see fp8_block_layout_cublaslt_vec128); other block sizes give the layout
// of gemm_fp8.cuh's chunked outer-vector modes.
static inline FP8BlockLayout fp8_block_layout_colmajor(int rows, int K, int block) {
    FP8BlockLayout L = fp8q_layout_base_(rows, K, 1, block);
    L.stride_row = 1;
    L.stride_k = rows;
    return L;
}

// cuBLASLt CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F for an FP8 operand stored row-major (rows, K) with K
// contiguous (what the "TN" FP8 GEMM reads for both A and B): one fp32 dequant scale per 1 x 128 block along
// K, stored with the row index fastest: scale of row r, K-block kb at kb * rows + r (an "M x L, M-major"
// table in the cuBLAS documentation's words, L = ceil(K / 128)). Same index as gemm_fp8.cuh's
// fp8_scale_index(FP8_SCALE_VEC128, ...).
static inline FP8BlockLayout fp8_block_layout_cublaslt_vec128(int rows, int K) {
    return fp8_block_layout_colmajor(rows, K, 128);
}

// block x block tiles, scales row-major over the tile grid: scale of tile (rb, kb) at rb * nb_k + kb.
// The TCFP-12 weight tiles for block sizes without a cuBLASLt tile mode (32, 64): transposable, like 128 x 128.
static inline FP8BlockLayout fp8_block_layout_tiles(int rows, int K, int block) {
    return fp8q_layout_base_(rows, K, block, block);
}

// cuBLASLt CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F for an operand stored row-major (rows, K): one scale
// per 128 x 128 tile, K-block index fastest, the K-block count padded to a multiple of 4:
// scale of tile (rb, kb) at rb * L4 + kb with L4 = round_up(ceil(K / 128), 4). Padding entries (kb >= L)
// are written as 1.0f. Same index as gemm_fp8.cuh's fp8_scale_index(FP8_SCALE_BLK128_VEC128, operand A).
static inline FP8BlockLayout fp8_block_layout_cublaslt_blk128x128(int rows, int K) {
    FP8BlockLayout L = fp8q_layout_base_(rows, K, 128, 128);
    L.alloc_k = (L.nb_k + 3) / 4 * 4;
    L.stride_row = L.alloc_k;
    L.stride_k = 1;
    return L;
}

// Number of floats a scale buffer of layout L needs (padding included).
static inline size_t fp8_block_layout_count(const FP8BlockLayout& L) {
    return (size_t)L.alloc_rows * (size_t)L.alloc_k;
}

// Index of block (rb, kb)'s scale.
static inline HOST_DEVICE int64_t fp8_block_index(const FP8BlockLayout& L, int rb, int kb) {
    return (int64_t)rb * L.stride_row + (int64_t)kb * L.stride_k;
}

// Index of the scale that applies to element (r, c) of the data matrix.
static inline HOST_DEVICE int64_t fp8_block_index_of(const FP8BlockLayout& L, int r, int c) {
    return fp8_block_index(L, r / L.block_rows, c / L.block_k);
}

// ------------------------------------------------------------------------------------------------
// Device helpers

static inline HOST_DEVICE float fp8q_float_from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof(f));
    return f;
}

// max |x| reduced as bit patterns: |x| bits compare like the values for non-NaN x, and every NaN (bits
// above 0x7F800000) beats +Inf, so a NaN anywhere wins. This turns the winning pattern into the amax.
static inline HOST_DEVICE float fp8q_amax_from_bits(uint32_t b) {
    return fp8q_float_from_bits(b > 0x7F800000u ? 0x7FC00000u : b);
}

// The scale a launcher computes from amax: fp8_scale_pow2_from_amax (pow2 != 0) or fp8_scale_from_amax.
static inline HOST_DEVICE float fp8q_scale_from_amax(FP8Format f, float amax, int margin, int pow2) {
    return pow2 ? fp8_scale_pow2_from_amax(f, amax, margin) : fp8_scale_from_amax(f, amax, margin);
}

__device__ __forceinline__ bool fp8q_isnan(float v) { return abs_bits(v) > 0x7F800000u; }

// x * s as one correctly rounded multiplication (__fmul_rn is never contracted), except that a NaN x is
// passed on as it is: the device's multiply returns the canonical (positive) NaN, which would lose the
// sign that fp8.h encodes into the NaN code (E4M3FN 0x7F | sign).
__device__ __forceinline__ float fp8q_scaled(float x, float s) { return fp8q_isnan(x) ? x : __fmul_rn(x, s); }

// One code, RNE or SR (random bits of element `idx`), straight from fp8.h.
template <FP8Kind KIND, bool SR>
__device__ __forceinline__ uint8_t fp8q_encode1(float v, uint64_t seed, uint64_t idx) {
    const FP8Format f = fp8_format(KIND);
    if constexpr (SR) return fp8_encode_sr(f, v, fp8_random_bits(seed, idx), 1);
    else return fp8_encode_rne(f, v, 1);
}

// N codes (N even) of already-scaled values v[0..N) whose elements have indices idx0 .. idx0 + N - 1.
// RNE for E4M3FN / E5M2 on sm_89+: hardware conversion of pairs, then (rarely) fp8.h for NaN inputs, whose
// hardware code differs (see the header comment). Everything else: fp8.h.
template <FP8Kind KIND, bool SR, int N>
__device__ __forceinline__ void fp8q_encode_n(uint8_t* codes, const float* v, uint64_t seed, uint64_t idx0) {
    const FP8Format f = fp8_format(KIND);
    if constexpr (SR) {
        #pragma unroll
        for (int k = 0; k < N; k++) codes[k] = fp8_encode_sr(f, v[k], fp8_random_bits(seed, idx0 + k), 1);
    } else {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
        if constexpr (KIND == FP8_E4M3FN || KIND == FP8_E5M2) {
            constexpr __nv_fp8_interpretation_t interp = KIND == FP8_E4M3FN ? __NV_E4M3 : __NV_E5M2;
            uint32_t mx = 0;
            #pragma unroll
            for (int k = 0; k < N; k += 2) {
                const uint32_t p = (uint32_t)__nv_cvt_float2_to_fp8x2(make_float2(v[k], v[k + 1]), __NV_SATFINITE, interp);
                codes[k] = (uint8_t)(p & 0xFFu);
                codes[k + 1] = (uint8_t)(p >> 8);
                mx = max(mx, max(abs_bits(v[k]), abs_bits(v[k + 1])));
            }
            if (mx > 0x7F800000u) {  // a NaN among the N values
                #pragma unroll
                for (int k = 0; k < N; k++)
                    if (fp8q_isnan(v[k])) codes[k] = fp8_encode_rne(f, v[k], 1);
            }
        } else
#endif
        {
            #pragma unroll
            for (int k = 0; k < N; k++) codes[k] = fp8_encode_rne(f, v[k], 1);
        }
    }
    (void)seed;
    (void)idx0;
}

__device__ __forceinline__ uint32_t fp8q_pack4(const uint8_t* c) {
    return (uint32_t)c[0] | ((uint32_t)c[1] << 8) | ((uint32_t)c[2] << 16) | ((uint32_t)c[3] << 24);
}

__device__ __forceinline__ uint4 fp8q_pack16(const uint8_t* c) {
    return make_uint4(fp8q_pack4(c), fp8q_pack4(c + 4), fp8q_pack4(c + 8), fp8q_pack4(c + 12));
}

// The codes of V (a multiple of 4) unscaled values v times the QUANT scale s, packed little-endian into V / 4
// words (value j in byte j % 4 of word j / 4), elements idx0 .. idx0 + V - 1 (SR random bits). nan: whether a
// v[j] is NaN (the caller knows it from its amax bits). Codes identical to fp8q_scaled + fp8q_encode_n; the
// E4M3FN / E5M2 RNE path multiplies and converts pairs without a per-value NaN test and re-encodes NaN values
// (with their sign, as fp8q_scaled keeps it) only when nan is set: fewer instructions per value in the
// quantize-transpose kernel, which is issue-bound (ncu, H200: SM throughput 65%, DRAM 47%).
template <FP8Kind KIND, bool SR, int V>
__device__ __forceinline__ void fp8q_encode_words(uint32_t* w, const float* v, float s, uint64_t seed, uint64_t idx0, bool nan) {
    static_assert(V % 4 == 0, "fp8q_encode_words: V must be a multiple of 4");
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
    if constexpr (!SR && (KIND == FP8_E4M3FN || KIND == FP8_E5M2)) {
        constexpr __nv_fp8_interpretation_t interp = KIND == FP8_E4M3FN ? __NV_E4M3 : __NV_E5M2;
        #pragma unroll
        for (int q = 0; q < V / 4; q++) {
            const uint32_t lo = (uint32_t)__nv_cvt_float2_to_fp8x2(
                make_float2(__fmul_rn(v[4 * q], s), __fmul_rn(v[4 * q + 1], s)), __NV_SATFINITE, interp);
            const uint32_t hi = (uint32_t)__nv_cvt_float2_to_fp8x2(
                make_float2(__fmul_rn(v[4 * q + 2], s), __fmul_rn(v[4 * q + 3], s)), __NV_SATFINITE, interp);
            w[q] = __byte_perm(lo, hi, 0x5410);
        }
        if (nan) {
            const FP8Format f = fp8_format(KIND);
            #pragma unroll
            for (int j = 0; j < V; j++)
                if (fp8q_isnan(v[j])) {
                    const int sh = 8 * (j & 3);
                    w[j / 4] = (w[j / 4] & ~(0xFFu << sh)) | ((uint32_t)fp8_encode_rne(f, v[j], 1) << sh);
                }
        }
    } else
#endif
    {
        float sv[V];
        uint8_t c[V];
        #pragma unroll
        for (int j = 0; j < V; j++) sv[j] = fp8q_scaled(v[j], s);
        fp8q_encode_n<KIND, SR, V>(c, sv, seed, idx0);
        #pragma unroll
        for (int q = 0; q < V / 4; q++) w[q] = fp8q_pack4(c + 4 * q);
    }
    (void)nan;
}

// One 16-byte packet of T (16 / sizeof(T) elements) as floats; p 16-byte aligned.
template <class T>
__device__ __forceinline__ void fp8q_load_packet(float* v, const T* p) {
    const Packed128<T> pk = load128(p);
    #pragma unroll
    for (int k = 0; k < Packed128<T>::size; k++) v[k] = (float)pk[k];
}

// 16 consecutive elements as floats; p 16-byte aligned.
template <class T>
__device__ __forceinline__ void fp8q_load16(float* v, const T* p) {
    constexpr int V = Packed128<T>::size;
    #pragma unroll
    for (int q = 0; q < 16 / V; q++) fp8q_load_packet(v + q * V, p + q * V);
}

// Position of element (row rl, column cl) of a 64 x 64 tile in the transposing shared-memory buffer:
// tile row = source column cl (64 bytes), holding the 64 source rows in four 16-byte chunks, the chunk
// index XOR-swizzled with bits 3..4 of cl to spread the writes over the banks.
__device__ __forceinline__ int fp8q_tpos(int cl, int rl) {
    return cl * 64 + ((((rl >> 4) ^ (cl >> 3)) & 3) << 4) + (rl & 15);
}

// Phase 2 of every transpose: the tile (source rows r0.., columns c0..) goes to out (cols, rows), row-major.
// vec_full: a whole 64 x 64 tile with rows % 16 == 0 and out 16-byte aligned (one 16-byte store per thread).
__device__ __forceinline__ void fp8q_tile_store(uint8_t* out, const uint8_t* tile, int rows, int cols, int r0, int c0,
                                                bool vec_full) {
    if (vec_full) {
        const int cl = threadIdx.x >> 2, q = threadIdx.x & 3;
        const uint4 w = *reinterpret_cast<const uint4*>(tile + cl * 64 + (((q ^ (cl >> 3)) & 3) << 4));
        *reinterpret_cast<uint4*>(out + (size_t)(c0 + cl) * rows + r0 + q * 16) = w;
    } else {
        for (int e = threadIdx.x; e < FP8Q_TILE * FP8Q_TILE; e += FP8Q_THREADS) {
            const int cl = e >> 6, rl = e & 63;
            if (r0 + rl < rows && c0 + cl < cols) out[(size_t)(c0 + cl) * rows + r0 + rl] = tile[fp8q_tpos(cl, rl)];
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Kernels: amax and scales

// Stage 1 of amax: partials[blockIdx.x] = bit pattern of max |x| over this block's grid-stride share.
template <class T>
__global__ void __launch_bounds__(FP8Q_THREADS) fp8q_amax_partials_kernel(uint32_t* partials, const T* x, size_t n, int vec) {
    const size_t tid = (size_t)blockIdx.x * FP8Q_THREADS + threadIdx.x, nthr = (size_t)gridDim.x * FP8Q_THREADS;
    uint32_t m = 0;
    size_t done = 0;
    if (vec) {
        const size_t nc = n / 16;
        size_t p = tid;
        for (; p + nthr < nc; p += 2 * nthr) {  // two chunks in flight per thread
            float a[16], b[16];
            fp8q_load16(a, x + p * 16);
            fp8q_load16(b, x + (p + nthr) * 16);
            #pragma unroll
            for (int k = 0; k < 16; k++) m = max(m, max(abs_bits(a[k]), abs_bits(b[k])));
        }
        if (p < nc) {
            float a[16];
            fp8q_load16(a, x + p * 16);
            #pragma unroll
            for (int k = 0; k < 16; k++) m = max(m, abs_bits(a[k]));
        }
        done = nc * 16;
    }
    for (size_t i = done + tid; i < n; i += nthr) m = max(m, abs_bits((float)x[i]));
    m = block_reduce_max_u32(m);
    if (threadIdx.x == 0) partials[blockIdx.x] = m;
}

// Stage 2 (one block): amax = max of the partials; optionally the scale and dequant scale from it.
__global__ void fp8q_amax_finalize_kernel(const uint32_t* partials, int np, float* amax_out, float* scale, float* inv_scale,
                                          FP8Kind kind, int margin, int pow2) {
    uint32_t m = 0;
    for (int i = threadIdx.x; i < np; i += blockDim.x) m = max(m, partials[i]);
    m = block_reduce_max_u32(m);
    if (threadIdx.x == 0) {
        const float amax = fp8q_amax_from_bits(m);
        if (amax_out) *amax_out = amax;
        if (scale || inv_scale) {
            const float s = fp8q_scale_from_amax(fp8_format(kind), amax, margin, pow2);
            if (scale) *scale = s;
            if (inv_scale) *inv_scale = __frcp_rn(s);
        }
    }
}

__global__ void fp8q_scale_kernel(float* scale, float* inv_scale, const float* amax, FP8Kind kind, int margin, int pow2) {
    const float s = fp8q_scale_from_amax(fp8_format(kind), *amax, margin, pow2);
    if (scale) *scale = s;
    if (inv_scale) *inv_scale = __frcp_rn(s);
}

// One warp. Recipe in fp8_delayed_scale_update's comment.
__global__ void fp8q_delayed_scale_kernel(float* history, int H, int* pos, const float* amax_now, float* scale,
                                          float* inv_scale, FP8Kind kind, int margin, int pow2) {
    uint32_t m = 0;
    for (int j = threadIdx.x; j < H; j += 32) m = max(m, abs_bits(history[j]));
    m = __reduce_max_sync(0xFFFFFFFFu, m);  // all lanes have read history[] before lane 0 writes it
    if (threadIdx.x == 0) {
        const float now = *amax_now;
        const float amax = m == 0u ? now : fp8q_amax_from_bits(m);
        const float s = fp8q_scale_from_amax(fp8_format(kind), amax, margin, pow2);
        if (scale) *scale = s;
        if (inv_scale) *inv_scale = __frcp_rn(s);
        int p = *pos % H;
        if (p < 0) p += H;
        history[p] = now;
        *pos = (p + 1) % H;
    }
}

// One warp. Recipe in fp8_delayed_scale_pending's comment.
__global__ void fp8q_delayed_pending_kernel(float* history, int H, int* pos, uint32_t* pending, float* amax_out, float* scale,
                                            float* inv_scale, FP8Kind kind, int margin, int pow2) {
    if (threadIdx.x == 0) {  // 1. the previous use's amax enters the history
        int p = *pos % H;
        if (p < 0) p += H;
        const float prev = fp8q_amax_from_bits(*pending);
        history[p] = prev;
        *pos = (p + 1) % H;
        if (amax_out) *amax_out = prev;
        *pending = 0u;  // 3. ready for this use's quantization to accumulate into
    }
    __syncwarp();
    uint32_t m = 0;
    for (int j = threadIdx.x; j < H; j += 32) m = max(m, abs_bits(history[j]));
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if (threadIdx.x == 0) {  // 2. the scale from the history
        const float s = fp8q_scale_from_amax(fp8_format(kind), fp8q_amax_from_bits(m), margin, pow2);
        if (scale) *scale = s;
        if (inv_scale) *inv_scale = __frcp_rn(s);
    }
}

// One thread: amax, scale and dequant scale from an amax accumulated as bits; then the bits are zeroed.
__global__ void fp8q_scale_from_bits_kernel(uint32_t* bits, float* amax_out, float* scale, float* inv_scale, FP8Kind kind,
                                            int margin, int pow2) {
    const float amax = fp8q_amax_from_bits(*bits);
    *bits = 0u;
    if (amax_out) *amax_out = amax;
    const float s = fp8q_scale_from_amax(fp8_format(kind), amax, margin, pow2);
    if (scale) *scale = s;
    if (inv_scale) *inv_scale = __frcp_rn(s);
}

// Speculative current scaling (fp8_scale_speculative_check). One thread.
__global__ void fp8q_speculative_check_kernel(uint32_t* bits, float* amax_out, float* scale, float* inv_scale, uint32_t* redo,
                                              unsigned long long* misses, FP8Kind kind, int margin, int pow2) {
    const float amax = fp8q_amax_from_bits(*bits);
    *bits = 0u;
    const float s = fp8q_scale_from_amax(fp8_format(kind), amax, margin, pow2);
    const uint32_t miss = __float_as_uint(s) != __float_as_uint(*scale);
    *redo = miss;
    if (miss) *misses += 1ull;
    if (amax_out) *amax_out = amax;
    *scale = s;
    *inv_scale = __frcp_rn(s);
}

// ------------------------------------------------------------------------------------------------
// Kernels: quantization

// Plain quantization: thread i handles elements [16 i, 16 i + 16) of the flat row-major array.
// vec: x and out 16-byte aligned (and, if BLOCKED, cols % 16 == 0 and block_k % 16 == 0 so that the 16
// elements share one row and one scale block). amax_accum != NULL: also max |x| (bits) into it.
template <class T, FP8Kind KIND, bool SR, bool BLOCKED>
__global__ void __launch_bounds__(FP8Q_THREADS)
    fp8q_quantize_rowmajor_kernel(uint8_t* __restrict__ out, const T* __restrict__ x, int rows, int cols,
                                  const float* __restrict__ scale, FP8BlockLayout L, uint64_t seed, int vec,
                                  uint32_t* __restrict__ amax_accum) {
    const size_t n = (size_t)rows * (size_t)cols;
    const size_t i0 = ((size_t)blockIdx.x * FP8Q_THREADS + threadIdx.x) * 16;
    const bool small = n <= 0xFFFFFFFFull;  // 32-bit index arithmetic suffices
    uint32_t m = 0;
    float s = 0.0f;
    if constexpr (!BLOCKED) s = __ldg(scale);
    if (i0 >= n) {
        // nothing to do (only the amax reduction below needs every thread)
    } else if (vec && i0 + 16 <= n) {
        if constexpr (BLOCKED) {
            const int r = small ? (int)((uint32_t)i0 / (uint32_t)cols) : (int)(i0 / (size_t)cols);
            const int c = (int)(i0 - (size_t)r * cols);
            s = __ldg(scale + fp8_block_index_of(L, r, c));
        }
        float v[16];
        fp8q_load16(v, x + i0);
        #pragma unroll
        for (int k = 0; k < 16; k++) {
            m = max(m, abs_bits(v[k]));
            v[k] = fp8q_scaled(v[k], s);
        }
        uint8_t codes[16];
        fp8q_encode_n<KIND, SR, 16>(codes, v, seed, i0);
        *reinterpret_cast<uint4*>(out + i0) = fp8q_pack16(codes);
    } else {
        const size_t i1 = i0 + 16 < n ? i0 + 16 : n;
        for (size_t i = i0; i < i1; i++) {
            float si = s;
            if constexpr (BLOCKED) {
                const int r = small ? (int)((uint32_t)i / (uint32_t)cols) : (int)(i / (size_t)cols);
                si = __ldg(scale + fp8_block_index_of(L, r, (int)(i - (size_t)r * cols)));
            }
            const float xi = (float)x[i];
            m = max(m, abs_bits(xi));
            out[i] = fp8q_encode1<KIND, SR>(fp8q_scaled(xi, si), seed, i);
        }
    }
    if (amax_accum) block_amax_accumulate(amax_accum, m);
}

// Sources of fp8q_quantize_transpose_kernel: the values of a row-major (rows, cols) matrix as floats, read
// from memory (Fp8SrcMatrix) or computed by the kernel that quantizes them, so that a producer and its
// quantization are one pass (llmc/kernels/fp8/lowp_producers.cuh). A source has
//   Elem                 the storage type whose 16-byte packets set the vector width V = Packed128<Elem>::size
//   packet(v, idx)       the V values at flat indices idx .. idx + V - 1 (idx a multiple of V)
//   at(idx)              the value at flat index idx
//   vec_ok()             (host) whether packet() may use 16-byte accesses (its pointers are 16-byte aligned)
// Both device functions must give the same value for the same index (edge tiles use at()).
template <class T>
struct Fp8SrcMatrix {
    using Elem = T;
    const T* x;
    __device__ __forceinline__ void packet(float* v, size_t idx) const { fp8q_load_packet(v, x + idx); }
    __device__ __forceinline__ float at(size_t idx) const { return (float)x[idx]; }
    bool vec_ok() const { return fp8q_aligned16(x); }
};

// Transposed quantization through a 64 x 64 shared-memory tile. 1-D grid; block b handles tiles b,
// b + gridDim.x, ... of the ceil(rows / 64) x ceil(cols / 64) tile grid (row-major tile order), so any
// grid size gives the same result (the speculative-scaling fallback launches a small grid).
// vec_in: src.vec_ok(), cols % V == 0 (and, if BLOCKED, block_k % 16 == 0); vec_out: out 16-byte aligned and
// rows % 16 == 0. Edge tiles take the element-wise path.
// out_plain != NULL: the same codes also row-major (rows, cols) (one read of the source for both copies;
// needs out_plain 16-byte aligned when vec_in). amax_accum != NULL: also max |x| (bits) into it.
// run_if != NULL: the kernel does nothing unless *run_if != 0 (read once per block).
template <class Src, FP8Kind KIND, bool SR, bool BLOCKED>
__global__ void __launch_bounds__(FP8Q_THREADS, FP8Q_TRANSPOSE_MIN_BLOCKS)
    fp8q_quantize_transpose_kernel(uint8_t* __restrict__ out, const Src src, int rows, int cols,
                                   const float* __restrict__ scale, FP8BlockLayout L, uint64_t seed, int vec_in, int vec_out,
                                   uint8_t* __restrict__ out_plain, uint32_t* __restrict__ amax_accum,
                                   float* __restrict__ col_partials, const uint32_t* __restrict__ run_if) {
    using T = typename Src::Elem;
    __shared__ __align__(16) uint8_t tile[FP8Q_TILE * FP8Q_TILE];
    if (run_if && __ldg(run_if) == 0u) return;  // uniform over the block
    const int tiles_x = (cols + FP8Q_TILE - 1) / FP8Q_TILE;
    const int ntiles = tiles_x * ((rows + FP8Q_TILE - 1) / FP8Q_TILE);
    uint32_t m = 0;
    float s = 0.0f;
    if constexpr (!BLOCKED) s = __ldg(scale);
    for (int ti = blockIdx.x; ti < ntiles; ti += gridDim.x) {
        const int tr = ti / tiles_x;
        const int r0 = tr * FP8Q_TILE, c0 = (ti - tr * tiles_x) * FP8Q_TILE;
        const bool full = r0 + FP8Q_TILE <= rows && c0 + FP8Q_TILE <= cols;
        if (full && vec_in) {
            // thread = (column group cg of V columns, row group rg of RPT rows): RPT loads of one packet each
            constexpr int V = Packed128<T>::size, CG = FP8Q_TILE / V, RPT = 16 / V;
            const int cg = threadIdx.x % CG, rg = threadIdx.x / CG, cl = cg * V;
            uint32_t cw[RPT][V / 4];  // the codes of this thread's RPT rows, 4 per word (fp8q_encode_words)
            float csum[V];  // this thread's share of the column sums (col_partials)
            #pragma unroll
            for (int j = 0; j < V; j++) csum[j] = 0.0f;
            #pragma unroll
            for (int k = 0; k < RPT; k++) {
                const int r = r0 + rg * RPT + k, c = c0 + cl;
                float sk = s;
                if constexpr (BLOCKED) sk = __ldg(scale + fp8_block_index_of(L, r, c));
                const size_t idx = (size_t)r * cols + c;
                float v[V];
                src.packet(v, idx);
                uint32_t mr = 0;
                #pragma unroll
                for (int j = 0; j < V; j++) {
                    mr = max(mr, abs_bits(v[j]));
                    csum[j] += v[j];
                }
                m = max(m, mr);
                fp8q_encode_words<KIND, SR, V>(cw[k], v, sk, seed, idx, mr > 0x7F800000u);
                if (out_plain) {
                    if constexpr (V == 8) *reinterpret_cast<uint2*>(out_plain + idx) = make_uint2(cw[k][0], cw[k][1]);
                    else if constexpr (V == 4) *reinterpret_cast<uint32_t*>(out_plain + idx) = cw[k][0];
                    else {
                        #pragma unroll
                        for (int q = 0; q < V / 4; q++) *reinterpret_cast<uint32_t*>(out_plain + idx + 4 * q) = cw[k][q];
                    }
                }
            }
            // column cl + j of the source = tile row cl + j; this thread's RPT rows are RPT consecutive bytes
            // there. Byte permutes gather them: per word q, the columns 4q .. 4q + 3 of the RPT rows.
            #pragma unroll
            for (int q = 0; q < V / 4; q++) {
                uint32_t col[4];  // RPT == 2: two bytes used; RPT == 4: four
                if constexpr (RPT == 2) {
                    const uint32_t a = __byte_perm(cw[0][q], cw[1][q], 0x5140), b = __byte_perm(cw[0][q], cw[1][q], 0x7362);
                    col[0] = a & 0xFFFFu; col[1] = a >> 16; col[2] = b & 0xFFFFu; col[3] = b >> 16;
                } else if constexpr (RPT == 4) {
                    const uint32_t a = __byte_perm(cw[0][q], cw[1][q], 0x5140), b = __byte_perm(cw[2][q], cw[3][q], 0x5140);
                    const uint32_t c = __byte_perm(cw[0][q], cw[1][q], 0x7362), d = __byte_perm(cw[2][q], cw[3][q], 0x7362);
                    col[0] = __byte_perm(a, b, 0x5410); col[1] = __byte_perm(a, b, 0x7632);
                    col[2] = __byte_perm(c, d, 0x5410); col[3] = __byte_perm(c, d, 0x7632);
                }
                #pragma unroll
                for (int jj = 0; jj < 4; jj++) {
                    uint8_t* dst = tile + fp8q_tpos(cl + 4 * q + jj, rg * RPT);
                    if constexpr (RPT == 2) *reinterpret_cast<uint16_t*>(dst) = (uint16_t)col[jj];
                    else if constexpr (RPT == 4) *reinterpret_cast<uint32_t*>(dst) = col[jj];
                    else {
                        #pragma unroll
                        for (int k = 0; k < RPT; k++) dst[k] = (uint8_t)(cw[k][q] >> (8 * jj));
                    }
                }
            }
            if (col_partials) {  // the tile's column sums: row groups in order (uniform branch: every thread syncs)
                constexpr int NRG = FP8Q_THREADS / CG;
                __shared__ float red[NRG][FP8Q_TILE];
                #pragma unroll
                for (int j = 0; j < V; j++) red[rg][cl + j] = csum[j];
                __syncthreads();
                if (threadIdx.x < FP8Q_TILE) {
                    float t = 0.0f;
                    for (int g = 0; g < NRG; g++) t += red[g][threadIdx.x];
                    col_partials[(size_t)tr * cols + c0 + threadIdx.x] = t;
                }
            }
        } else {
            for (int e = threadIdx.x; e < FP8Q_TILE * FP8Q_TILE; e += FP8Q_THREADS) {
                const int rl = e >> 6, cl = e & 63, r = r0 + rl, c = c0 + cl;
                if (r < rows && c < cols) {
                    float sk = s;
                    if constexpr (BLOCKED) sk = __ldg(scale + fp8_block_index_of(L, r, c));
                    const size_t idx = (size_t)r * cols + c;
                    const float xv = src.at(idx);
                    m = max(m, abs_bits(xv));
                    const uint8_t code = fp8q_encode1<KIND, SR>(fp8q_scaled(xv, sk), seed, idx);
                    tile[fp8q_tpos(cl, rl)] = code;
                    if (out_plain) out_plain[idx] = code;
                }
            }
            if (col_partials && threadIdx.x < FP8Q_TILE && c0 + (int)threadIdx.x < cols) {  // edge tiles: rows in order
                const int c = c0 + threadIdx.x;
                float t = 0.0f;
                for (int r = r0; r < min(rows, r0 + FP8Q_TILE); r++) t += src.at((size_t)r * cols + c);
                col_partials[(size_t)tr * cols + c] = t;
            }
        }
        __syncthreads();
        fp8q_tile_store(out, tile, rows, cols, r0, c0, full && vec_out);
        __syncthreads();  // the next tile overwrites tile (and red)
    }
    if (amax_accum) block_amax_accumulate(amax_accum, m);
}

// Byte transpose of a (rows, cols) code matrix into (cols, rows). vec_in: in 16-byte aligned and
// cols % 16 == 0; vec_out: out 16-byte aligned and rows % 16 == 0.
__global__ void __launch_bounds__(FP8Q_THREADS)
    fp8q_transpose_codes_kernel(uint8_t* __restrict__ out, const uint8_t* __restrict__ in, int rows, int cols, int vec_in,
                                int vec_out) {
    __shared__ __align__(16) uint8_t tile[FP8Q_TILE * FP8Q_TILE];
    const int r0 = blockIdx.y * FP8Q_TILE, c0 = blockIdx.x * FP8Q_TILE;
    const bool full = r0 + FP8Q_TILE <= rows && c0 + FP8Q_TILE <= cols;
    if (full && vec_in) {
        const int rl = threadIdx.x >> 2, q = threadIdx.x & 3;
        const uint4 w = *reinterpret_cast<const uint4*>(in + (size_t)(r0 + rl) * cols + c0 + q * 16);
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
        #pragma unroll
        for (int j = 0; j < 16; j++) tile[fp8q_tpos(q * 16 + j, rl)] = (uint8_t)(words[j >> 2] >> (8 * (j & 3)));
    } else {
        for (int e = threadIdx.x; e < FP8Q_TILE * FP8Q_TILE; e += FP8Q_THREADS) {
            const int rl = e >> 6, cl = e & 63;
            if (r0 + rl < rows && c0 + cl < cols) tile[fp8q_tpos(cl, rl)] = in[(size_t)(r0 + rl) * cols + c0 + cl];
        }
    }
    __syncthreads();
    fp8q_tile_store(out, tile, rows, cols, r0, c0, full && vec_out);
}

// ------------------------------------------------------------------------------------------------
// Kernels: block scales

// 1 x block_k blocks. Lane groups of G threads (G a power of two <= 32) own one block (r, kb); each lane
// reads units of U elements (U = 16 / sizeof(T) with vec, else 1) at stride G * U. Threads are numbered
// r * (nb_k * G) + kb * G + lane, so a group never straddles a warp.
template <class T>
__global__ void __launch_bounds__(FP8Q_THREADS)
    fp8q_block_scales_1d_kernel(float* scales, float* inv_scales, const T* x, FP8BlockLayout L, FP8Kind kind, int margin,
                                int pow2, int G, int vec) {
    const size_t g = (size_t)blockIdx.x * FP8Q_THREADS + threadIdx.x;
    const size_t per_row = (size_t)L.nb_k * G;
    const size_t r = g / per_row;
    const int rem = (int)(g - r * per_row), kb = rem / G, lane = rem - kb * G;
    uint32_t m = 0;
    if (r < (size_t)L.rows) {
        const T* row = x + r * (size_t)L.K;
        const int cb = kb * L.block_k, ce = min(L.K, cb + L.block_k);
        if (vec) {
            constexpr int V = Packed128<T>::size;
            for (int c = cb + lane * V; c < ce; c += G * V) {
                float v[V];
                fp8q_load_packet(v, row + c);
                #pragma unroll
                for (int k = 0; k < V; k++) m = max(m, abs_bits(v[k]));
            }
        } else {
            for (int c = cb + lane; c < ce; c += G) m = max(m, abs_bits((float)row[c]));
        }
    }
    for (int off = G >> 1; off > 0; off >>= 1) m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
    if (r < (size_t)L.rows && lane == 0) {
        const float s = fp8q_scale_from_amax(fp8_format(kind), fp8q_amax_from_bits(m), margin, pow2);
        const int64_t idx = fp8_block_index(L, (int)r, kb);
        scales[idx] = s;
        if (inv_scales) inv_scales[idx] = __frcp_rn(s);
    }
}

// 2-D blocks (block_rows > 1): one thread block per scale block, grid = (nb_k, nb_rows).
template <class T>
__global__ void __launch_bounds__(FP8Q_THREADS)
    fp8q_block_scales_2d_kernel(float* scales, float* inv_scales, const T* x, FP8BlockLayout L, FP8Kind kind, int margin,
                                int pow2) {
    const int kb = blockIdx.x, rb = blockIdx.y;
    const int r0 = rb * L.block_rows, r1 = min(L.rows, r0 + L.block_rows);
    const int c0 = kb * L.block_k, width = min(L.K, c0 + L.block_k) - c0;
    const int count = (r1 - r0) * width;
    uint32_t m = 0;
    for (int e = threadIdx.x; e < count; e += FP8Q_THREADS) {
        const int rr = e / width, cc = e - rr * width;
        m = max(m, abs_bits((float)x[(size_t)(r0 + rr) * L.K + c0 + cc]));
    }
    m = block_reduce_max_u32(m);
    if (threadIdx.x == 0) {
        const float s = fp8q_scale_from_amax(fp8_format(kind), fp8q_amax_from_bits(m), margin, pow2);
        const int64_t idx = fp8_block_index(L, rb, kb);
        scales[idx] = s;
        if (inv_scales) inv_scales[idx] = __frcp_rn(s);
    }
}

// Sets the padding entries of layout L (blocks outside nb_rows x nb_k) of up to two buffers to 1.0f.
__global__ void fp8q_block_pad_kernel(float* a, float* b, FP8BlockLayout L) {
    const size_t total = (size_t)L.alloc_rows * L.alloc_k;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const int rb = (int)(e / L.alloc_k), kb = (int)(e - (size_t)rb * L.alloc_k);
        if (rb >= L.nb_rows || kb >= L.nb_k) {
            const int64_t idx = fp8_block_index(L, rb, kb);
            if (a) a[idx] = 1.0f;
            if (b) b[idx] = 1.0f;
        }
    }
}

__global__ void fp8q_block_relayout_kernel(float* dst, FP8BlockLayout Ld, const float* src, FP8BlockLayout Ls, int transpose_grid) {
    const size_t total = (size_t)Ld.alloc_rows * Ld.alloc_k;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const int rb = (int)(e / Ld.alloc_k), kb = (int)(e - (size_t)rb * Ld.alloc_k);
        float v = 1.0f;
        if (rb < Ld.nb_rows && kb < Ld.nb_k) {  // the src block holding the dst block's first element
            const int r = rb * Ld.block_rows, k = kb * Ld.block_k;
            v = transpose_grid ? src[fp8_block_index_of(Ls, k, r)] : src[fp8_block_index_of(Ls, r, k)];
        }
        dst[fp8_block_index(Ld, rb, kb)] = v;
    }
}

// ------------------------------------------------------------------------------------------------
// Kernels: dequantization

__global__ void fp8q_dequantize_kernel(float* out, const uint8_t* q, size_t n, FP8Kind kind, const float* scale) {
    const FP8Format f = fp8_format(kind);
    const float s = __ldg(scale);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fdiv_rn(fp8_decode(f, q[i]), s);
}

__global__ void fp8q_dequantize_blocked_kernel(float* out, const uint8_t* q, FP8BlockLayout L, FP8Kind kind, const float* scales) {
    const FP8Format f = fp8_format(kind);
    const size_t n = (size_t)L.rows * L.K;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(i / (size_t)L.K), c = (int)(i - (size_t)r * L.K);
        out[i] = __fdiv_rn(fp8_decode(f, q[i]), scales[fp8_block_index_of(L, r, c)]);
    }
}

static inline int fp8q_grid_stride_blocks(size_t n) {
    const size_t b = ceil_div_sz(n > 0 ? n : 1, FP8Q_THREADS);
    return (int)(b < 4096 ? b : 4096);
}

// ------------------------------------------------------------------------------------------------
// Public launchers: amax and scales

// Per-tensor amax = max |x[i]| over the n elements of x (device, any layout), written to *amax_out (device,
// 1 float; overwritten). T = floatX (activations, gradients) or float (fp32 master weights); half and bf16
// both work. A NaN anywhere gives NaN (0x7FC00000); +-Inf gives +Inf; n = 0 gives 0. Deterministic
// (max of |x| bit patterns, two stages: <= 1024 block partials in `scratch`, then one block).
// scratch: FP8_QUANT_SCRATCH_FLOATS floats of device memory, overwritten. 16-byte loads when x is 16-byte
// aligned. Stream-ordered, no synchronization.
template <class T>
void fp8_amax(float* amax_out, const T* x, size_t n, float* scratch, cudaStream_t stream);

// fp8_amax plus the scale computed from it in the same launch pair: *scale = fp8_scale_pow2_from_amax
// (pow2 != 0) or fp8_scale_from_amax (pow2 == 0) for format `kind` and `margin`, *inv_scale = 1 / *scale.
// Any of amax_out / scale / inv_scale may be NULL. Scratch and determinism as fp8_amax ("current scaling").
template <class T>
void fp8_amax_scale(float* amax_out, float* scale, float* inv_scale, const T* x, size_t n, FP8Kind kind, int margin,
                    int pow2, float* scratch, cudaStream_t stream) {
    fp8q_require(scratch != NULL && (x != NULL || n == 0), "fp8_amax", "NULL scratch or input");
    const int vec = fp8q_aligned16(x);
    const size_t chunks = ceil_div_sz(n > 0 ? n : 1, (size_t)16 * FP8Q_THREADS);
    const int grid = (int)(chunks < (size_t)FP8Q_MAX_PARTIALS ? chunks : (size_t)FP8Q_MAX_PARTIALS);
    fp8q_amax_partials_kernel<T><<<grid, FP8Q_THREADS, 0, stream>>>(reinterpret_cast<uint32_t*>(scratch), x, n, vec);
    cudaCheckLaunch();
    fp8q_amax_finalize_kernel<<<1, 1024, 0, stream>>>(reinterpret_cast<const uint32_t*>(scratch), grid, amax_out, scale,
                                                       inv_scale, kind, margin, pow2);
    cudaCheckLaunch();
}

template <class T>
void fp8_amax(float* amax_out, const T* x, size_t n, float* scratch, cudaStream_t stream) {
    fp8_amax_scale(amax_out, (float*)NULL, (float*)NULL, x, n, FP8_E4M3FN, 0, 0, scratch, stream);
}

// Scale from a device amax (one thread): *scale = fp8_scale_pow2_from_amax(fmt, *amax, margin) if pow2,
// else fp8_scale_from_amax(fmt, *amax, margin) (fp8.h: amax * scale lands at max_finite / 2^margin; NaN,
// Inf or amax <= 0 give 1); *inv_scale = 1 / *scale (the dequant scale for cuBLASLt). Either output may be
// NULL. Both overwritten.
static inline void fp8_compute_scale(float* scale, float* inv_scale, const float* amax, FP8Kind kind, int margin, int pow2,
                                     cudaStream_t stream) {
    fp8q_require(amax != NULL, "fp8_compute_scale", "NULL amax");
    fp8q_scale_kernel<<<1, 1, 0, stream>>>(scale, inv_scale, amax, kind, margin, pow2);
    cudaCheckLaunch();
}

// Delayed scaling ("max over an amax history"; our own recipe in the style of Transformer Engine's delayed
// scaling). State, all on the device: amax_history[H] (a ring buffer of past amaxes) and *pos (the slot the
// next amax goes to); initialize both to zero (cudaMemsetAsync) before the first step. Call once per step t,
// after amax_t = amax of the tensor at step t is known (*amax_now, e.g. from fp8_amax). The call:
//   1. m = max(amax_history[0..H))         the largest of the previous H amaxes (slots never written are 0;
//                                           a NaN in the history makes m NaN)
//   2. if m == 0 (no history yet, or H all-zero tensors): m = amax_t   (bootstrap: the first step uses
//      current scaling instead of scale 1)
//   3. *scale = fp8_scale[_pow2]_from_amax(fmt, m, margin)  (1 if m is NaN / Inf / 0); *inv_scale = 1/*scale
//   4. amax_history[*pos] = amax_t; *pos = (*pos + 1) % H   (amax_t enters the history after use)
// So the scale used at step t depends only on amax_{t-H} .. amax_{t-1} (except the bootstrap step). With
// margin >= 1 a tensor whose amax grows by up to 2^margin between steps still does not saturate.
// scale / inv_scale may be NULL. One warp, deterministic.
static inline void fp8_delayed_scale_update(float* amax_history, int H, int* pos, const float* amax_now, float* scale,
                                            float* inv_scale, FP8Kind kind, int margin, int pow2, cudaStream_t stream) {
    fp8q_require(amax_history != NULL && pos != NULL && amax_now != NULL && H >= 1, "fp8_delayed_scale_update",
                 "needs a history of H >= 1 floats, a position and the current amax");
    fp8q_delayed_scale_kernel<<<1, 32, 0, stream>>>(amax_history, H, pos, amax_now, scale, inv_scale, kind, margin, pow2);
    cudaCheckLaunch();
}

// Delayed scaling with the amax taken while quantizing (fp8_quantize_pair's amax_accum) instead of by a
// separate fp8_amax pass: the same recipe as fp8_delayed_scale_update, with the push of amax_t moved from
// the end of use t to the start of use t + 1. Call before quantizing use t >= 1 of the tensor; *pending
// holds amax_{t-1} as bits (accumulated by the previous use's quantization). The call
//   1. amax_history[*pos] = amax_{t-1}; *pos = (*pos + 1) % H; *amax_out = amax_{t-1} (if amax_out)
//   2. *scale = fp8_scale[_pow2]_from_amax(fmt, max(amax_history), margin), *inv_scale = 1 / *scale
//   3. *pending = 0 (this use's quantization accumulates amax_t into it)
// so the scale of use t depends on amax_{t-H} .. amax_{t-1}, as with fp8_delayed_scale_update. Use 0 (the
// bootstrap) has no previous amax: take its scale by current scaling (fp8_amax_scale) and zero *pending.
// One warp, deterministic.
static inline void fp8_delayed_scale_pending(float* amax_history, int H, int* pos, uint32_t* pending, float* amax_out, float* scale,
                                             float* inv_scale, FP8Kind kind, int margin, int pow2, cudaStream_t stream) {
    fp8q_require(amax_history != NULL && pos != NULL && pending != NULL && H >= 1, "fp8_delayed_scale_pending",
                 "needs a history of H >= 1 floats, a position and the pending amax");
    fp8q_delayed_pending_kernel<<<1, 32, 0, stream>>>(amax_history, H, pos, pending, amax_out, scale, inv_scale, kind, margin, pow2);
    cudaCheckLaunch();
}

// Current scaling from an amax accumulated as bits by the kernel that produced the tensor (an "amax slot":
// integer atomicMax of |x| bit patterns, see fp8_quantize_pair): *amax_out = the amax (NaN for a NaN
// pattern), *scale / *inv_scale from it as fp8_amax_scale, then *bits = 0 (ready for the next producer).
// Any output may be NULL. One thread.
static inline void fp8_scale_from_amax_bits(uint32_t* bits, float* amax_out, float* scale, float* inv_scale, FP8Kind kind, int margin,
                                            int pow2, cudaStream_t stream) {
    fp8q_require(bits != NULL, "fp8_scale_from_amax_bits", "NULL amax bits");
    fp8q_scale_from_bits_kernel<<<1, 1, 0, stream>>>(bits, amax_out, scale, inv_scale, kind, margin, pow2);
    cudaCheckLaunch();
}

// Speculative current scaling (issue 17): a producer quantized its output with a guessed QUANT scale *scale
// (the previous use's) while accumulating the amax of the output into *bits (as fp8_quantize_pair's
// amax_accum). This sets *scale / *inv_scale (and *amax_out, may be NULL) to what current scaling computes
// from that amax (fp8_amax_scale), zeroes *bits, and sets *redo = 1 (and *misses += 1) when the guess was not
// that scale, else *redo = 0. The caller then re-quantizes with run_if = redo (fp8_quantize_pair_from), so
// the final codes are those of current scaling whatever the guess: with pow2 scales the guess is right
// whenever the amax stayed within the same power-of-two range. One thread, no host synchronization.
static inline void fp8_scale_speculative_check(uint32_t* bits, float* amax_out, float* scale, float* inv_scale, uint32_t* redo,
                                               unsigned long long* misses, FP8Kind kind, int margin, int pow2, cudaStream_t stream) {
    fp8q_require(bits != NULL && scale != NULL && inv_scale != NULL && redo != NULL && misses != NULL, "fp8_scale_speculative_check",
                 "NULL argument");
    fp8q_speculative_check_kernel<<<1, 1, 0, stream>>>(bits, amax_out, scale, inv_scale, redo, misses, kind, margin, pow2);
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------------
// Public launchers: quantization with one scale per tensor

// The transposed launch behind fp8q_quantize_launch and fp8_quantize_pair_from: transposed codes into out_t
// and (out != NULL) plain codes into out from one evaluation of the source; max_blocks > 0 caps the grid
// (blocks loop over the tiles), 0 gives one block per tile.
template <class Src, bool BLOCKED>
static inline void fp8q_quantize_transpose_launch(const char* fn, uint8_t* out, uint8_t* out_t, const Src& src, int rows, int cols,
                                                  FP8Kind kind, const float* scale, const FP8BlockLayout& L, uint32_t* amax_accum,
                                                  float* col_partials, int stochastic, uint64_t seed, const uint32_t* run_if,
                                                  int max_blocks, cudaStream_t stream) {
    using T = typename Src::Elem;
    const bool blk16 = !BLOCKED || L.block_k % 16 == 0;  // a 16-byte vector of x stays inside one scale block
    const long long ntiles = (long long)ceil_div(rows, FP8Q_TILE) * ceil_div(cols, FP8Q_TILE);
    fp8q_require(ntiles < (1LL << 31), fn, "too many 64 x 64 tiles for the transposed form");
    const int vec_in = blk16 && src.vec_ok() && cols % Packed128<T>::size == 0 && (out == NULL || fp8q_aligned16(out));
    const int vec_out = fp8q_aligned16(out_t) && rows % 16 == 0;
    const int grid = max_blocks > 0 && ntiles > max_blocks ? max_blocks : (int)ntiles;
    fp8q_with_kind(kind, [&](auto K) {
        fp8q_with_bool(stochastic != 0, [&](auto S) {
            constexpr FP8Kind KIND = decltype(K)::value;
            constexpr bool SR = decltype(S)::value;
            fp8q_quantize_transpose_kernel<Src, KIND, SR, BLOCKED><<<grid, FP8Q_THREADS, 0, stream>>>(
                out_t, src, rows, cols, scale, L, seed, vec_in, vec_out, out, amax_accum, col_partials, run_if);
            cudaCheckLaunch();
        });
    });
}

// The launch behind fp8_quantize_pair and fp8_quantize_blocked: plain codes into out and / or transposed
// codes into out_t (at least one) from one read of x (rows, cols); BLOCKED: the QUANT scales of layout L,
// else the per-tensor *scale. The fast paths' conditions are stated at the public launchers.
template <class T, bool BLOCKED>
static inline void fp8q_quantize_launch(const char* fn, uint8_t* out, uint8_t* out_t, const T* x, int rows, int cols, FP8Kind kind,
                                        const float* scale, const FP8BlockLayout& L, uint32_t* amax_accum, float* col_partials,
                                        int stochastic, uint64_t seed, cudaStream_t stream) {
    if (out_t) {
        fp8q_quantize_transpose_launch<Fp8SrcMatrix<T>, BLOCKED>(fn, out, out_t, Fp8SrcMatrix<T>{x}, rows, cols, kind, scale, L,
                                                                 amax_accum, col_partials, stochastic, seed, NULL, 0, stream);
        return;
    }
    const bool blk16 = !BLOCKED || L.block_k % 16 == 0;
    fp8q_with_kind(kind, [&](auto K) {
        fp8q_with_bool(stochastic != 0, [&](auto S) {
            constexpr FP8Kind KIND = decltype(K)::value;
            constexpr bool SR = decltype(S)::value;
            const size_t n = (size_t)rows * cols;
            const int vec = blk16 && (!BLOCKED || cols % 16 == 0) && fp8q_aligned16(x) && fp8q_aligned16(out);
            const int grid = (int)ceil_div_sz(n, (size_t)16 * FP8Q_THREADS);
            fp8q_quantize_rowmajor_kernel<T, KIND, SR, BLOCKED>
                <<<grid, FP8Q_THREADS, 0, stream>>>(out, x, rows, cols, scale, L, seed, vec, amax_accum);
            cudaCheckLaunch();
        });
    });
}

template <class T>
void fp8_quantize_pair(uint8_t* out, uint8_t* out_t, const T* x, int rows, int cols, FP8Kind kind, const float* scale,
                       uint32_t* amax_accum, int stochastic, uint64_t seed, cudaStream_t stream, float* col_partials = nullptr);

// Quantize the row-major (rows, cols) matrix x with the device QUANT scale *scale:
//   code(r, c) = fp8_encode_rne(fmt, x[r, c] * s, 1)                                     (stochastic == 0)
//   code(r, c) = fp8_encode_sr(fmt, x[r, c] * s, fp8_random_bits(seed, r * cols + c), 1) (stochastic != 0)
// transpose == 0: out is row-major (rows, cols), out[r * cols + c] = code(r, c).
// transpose != 0: out is row-major (cols, rows), out[c * rows + r] = code(r, c) (the transposed operand
//   cuBLASLt's TN-only FP8 GEMMs need for dgrad / wgrad), bit-identical to transposing the plain output.
// T = floatX or float. Overwrites out (rows * cols bytes). Deterministic (SR: a function of seed and
// element index only). Fast paths: plain: x and out 16-byte aligned; transposed: 64 x 64 shared-memory tiles,
// 16-byte loads when x is 16-byte aligned and cols % (16 / sizeof(T)) == 0, 16-byte stores when out is
// 16-byte aligned and rows % 16 == 0. Any rows for the transposed form (rows * cols / 4096 tiles < 2^31).
template <class T>
void fp8_quantize(uint8_t* out, const T* x, int rows, int cols, FP8Kind kind, const float* scale, int transpose,
                  int stochastic, uint64_t seed, cudaStream_t stream) {
    fp8q_require(out != NULL, "fp8_quantize", "NULL output");
    fp8_quantize_pair(transpose ? (uint8_t*)NULL : out, transpose ? out : (uint8_t*)NULL, x, rows, cols, kind, scale, NULL,
                      stochastic, seed, stream);
}

// fp8_quantize's plain and transposed outputs from one read of x, plus (optionally) the amax of x:
//   out   (rows, cols) row-major codes, or NULL;  out_t (cols, rows) row-major codes, or NULL (not both NULL)
//   amax_accum: NULL, or a device uint32 that receives max(*amax_accum, bits of max |x|) (integer atomicMax
//     of |x| bit patterns, one per thread block: deterministic; a NaN gives a NaN pattern, read it with
//     fp8_scale_from_amax_bits). The caller zeroes it before the first accumulation.
//   col_partials: NULL, or (needs out_t) fp8_col_partial_rows(rows) x cols fp32 (row-major, overwritten):
//     row t holds the column sums of x over rows [64 t, 64 t + 64), summed in a fixed order (the bias
//     gradient of a linear layer whose dY this is: gemm.cuh gemm_dbias_finish adds the rows in order).
// Codes, scale, rounding, seed and fast paths exactly as fp8_quantize (the two outputs are bit-identical to
// two fp8_quantize calls). Used by the FP8 GEMM backend to make an activation's GEMM operand and its
// transposed wgrad operand in one pass, and (delayed scaling) to take the amax for the history while
// quantizing instead of in a separate pass.
template <class T>
void fp8_quantize_pair(uint8_t* out, uint8_t* out_t, const T* x, int rows, int cols, FP8Kind kind, const float* scale,
                       uint32_t* amax_accum, int stochastic, uint64_t seed, cudaStream_t stream, float* col_partials) {
    fp8q_require((out != NULL || out_t != NULL) && x != NULL && scale != NULL && rows >= 0 && cols >= 0 && out != out_t,
                 "fp8_quantize", "bad arguments");
    fp8q_require(col_partials == NULL || out_t != NULL, "fp8_quantize_pair", "column sums come with the transposed output");
    if (rows == 0 || cols == 0) return;
    const FP8BlockLayout none = {};
    fp8q_quantize_launch<T, false>("fp8_quantize", out, out_t, x, rows, cols, kind, scale, none, amax_accum, col_partials, stochastic,
                                   seed, stream);
}

// fp8_quantize_pair for a computed source (see Fp8SrcMatrix: a producer whose output is quantized as it is
// computed, llmc/kernels/fp8/lowp_producers.cuh): transposed codes into out_t (required) and plain codes into out (or
// NULL), RNE, per-tensor QUANT scale *scale; amax_accum / col_partials as fp8_quantize_pair. run_if != NULL:
// the launch does nothing unless *run_if != 0 on the device (the fallback of speculative scaling, no host
// synchronization); max_blocks > 0 caps the grid (a fallback that usually exits should not launch one block
// per tile). Codes bit-identical to fp8_quantize_pair on a tensor holding the source's values.
template <class Src>
void fp8_quantize_pair_from(uint8_t* out, uint8_t* out_t, const Src& src, int rows, int cols, FP8Kind kind, const float* scale,
                            uint32_t* amax_accum, float* col_partials, const uint32_t* run_if, int max_blocks, cudaStream_t stream) {
    fp8q_require(out_t != NULL && out != out_t && scale != NULL && rows >= 0 && cols >= 0, "fp8_quantize_pair_from", "bad arguments");
    if (rows == 0 || cols == 0) return;
    const FP8BlockLayout none = {};
    fp8q_quantize_transpose_launch<Src, false>("fp8_quantize_pair_from", out, out_t, src, rows, cols, kind, scale, none, amax_accum,
                                               col_partials, 0, 0, run_if, max_blocks, stream);
}

// Byte transpose of a row-major (rows, cols) code matrix: out (cols, rows), out[c * rows + r] = in[r * cols + c].
// Used for the transposed TCFP-12 weight copies (bit-identical by construction). 64 x 64 tiles, 16-byte
// accesses when in / out are 16-byte aligned and cols / rows are multiples of 16. Overwrites out.
static inline void fp8_transpose_codes(uint8_t* out, const uint8_t* in, int rows, int cols, cudaStream_t stream) {
    fp8q_require(out != NULL && in != NULL && out != in && rows >= 0 && cols >= 0, "fp8_transpose_codes", "bad arguments");
    if (rows == 0 || cols == 0) return;
    fp8q_require(ceil_div(rows, FP8Q_TILE) <= 65535, "fp8_transpose_codes", "too many rows");
    const int vec_in = fp8q_aligned16(in) && cols % 16 == 0;
    const int vec_out = fp8q_aligned16(out) && rows % 16 == 0;
    const dim3 grid(ceil_div(cols, FP8Q_TILE), ceil_div(rows, FP8Q_TILE));
    fp8q_transpose_codes_kernel<<<grid, FP8Q_THREADS, 0, stream>>>(out, in, rows, cols, vec_in, vec_out);
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------------
// Public launchers: block scaling

// Per-block scales of the row-major (L.rows, L.K) matrix x for layout L (fp8_block_layout_*): for each
// block, amax = max |x| over the block (NaN if the block holds a NaN), scale = fp8_scale_pow2_from_amax(fmt,
// amax, margin) if pow2 (recommended: exact dequantization; amax * scale lies in (max/2, max]) else
// fp8_scale_from_amax. Writes scales[idx] = scale (QUANT scale, for fp8_quantize_blocked) and, if inv_scales
// != NULL, inv_scales[idx] = 1 / scale (DEQUANT scale: the cuBLASLt block-scale tensor when L is a
// fp8_block_layout_cublaslt_* layout). Padding entries of L are set to 1.0f. Both buffers hold
// fp8_block_layout_count(L) floats, overwritten. T = floatX or float. Deterministic.
// 1-D blocks (block_rows == 1): lane groups of up to 32 threads per block, 16-byte loads when x is 16-byte
// aligned and K and block_k are multiples of 16 / sizeof(T). 2-D blocks: one thread block per tile.
template <class T>
void fp8_block_scales(float* scales, float* inv_scales, const T* x, const FP8BlockLayout& L, FP8Kind kind, int margin,
                      int pow2, cudaStream_t stream) {
    fp8q_require(scales != NULL && x != NULL, "fp8_block_scales", "NULL scales or input");
    if (L.block_rows == 1) {
        constexpr int V = Packed128<T>::size;
        const int vec = fp8q_aligned16(x) && L.K % V == 0 && L.block_k % V == 0;
        const int units = vec ? L.block_k / V : L.block_k;
        int G = 1;
        while (G < units && G < 32) G *= 2;
        const size_t threads = (size_t)L.rows * L.nb_k * G;
        const size_t grid = ceil_div_sz(threads, FP8Q_THREADS);
        fp8q_require(grid <= 0x7FFFFFFFu, "fp8_block_scales", "matrix too large");
        fp8q_block_scales_1d_kernel<T><<<(unsigned)grid, FP8Q_THREADS, 0, stream>>>(scales, inv_scales, x, L, kind, margin, pow2, G, vec);
    } else {
        fp8q_require(L.nb_rows <= 65535, "fp8_block_scales", "too many block rows");
        fp8q_block_scales_2d_kernel<T><<<dim3(L.nb_k, L.nb_rows), FP8Q_THREADS, 0, stream>>>(scales, inv_scales, x, L, kind, margin, pow2);
    }
    cudaCheckLaunch();
    if (fp8_block_layout_count(L) > (size_t)L.nb_rows * L.nb_k) {
        fp8q_block_pad_kernel<<<fp8q_grid_stride_blocks(fp8_block_layout_count(L)), FP8Q_THREADS, 0, stream>>>(scales, inv_scales, L);
        cudaCheckLaunch();
    }
}

// Quantize the row-major (L.rows, L.K) matrix x with per-block QUANT scales `scales` in layout L (from
// fp8_block_scales): code(r, c) = Q(x[r, c] * scales[fp8_block_index_of(L, r, c)]), Q as in fp8_quantize
// (RNE, or SR with fp8_random_bits(seed, r * K + c)). transpose == 0: out row-major (rows, K); transpose != 0:
// out row-major (K, rows), bit-identical to the transposed plain output. Note the transposed codes keep
// their per-block scales, which are blocks of the transposed matrix's ROWS for 1-D layouts (cuBLASLt cannot
// use those as VEC128 scales; 128 x 128 tiles transpose into 128 x 128 tiles: see fp8_block_scales_relayout).
// Overwrites out. Fast paths as fp8_quantize, plus K % 16 == 0 and block_k % 16 == 0.
template <class T>
void fp8_quantize_blocked(uint8_t* out, const T* x, const FP8BlockLayout& L, FP8Kind kind, const float* scales,
                          int transpose, int stochastic, uint64_t seed, cudaStream_t stream) {
    fp8q_require(out != NULL && x != NULL && scales != NULL, "fp8_quantize_blocked", "NULL pointer");
    fp8q_quantize_launch<T, true>("fp8_quantize_blocked", transpose ? (uint8_t*)NULL : out, transpose ? out : (uint8_t*)NULL, x,
                                  L.rows, L.K, kind, scales, L, (uint32_t*)NULL, (float*)NULL, stochastic, seed, stream);
}

// Copies block scales from layout Ls to layout Ld of the same matrix (transpose_grid == 0) or of its
// transpose (transpose_grid != 0): each dst block takes the scale of the src block that contains it, so
// src blocks may be larger than dst blocks (a multiple in each direction). Uses: the BLK128x128 scales of
// transposed codes (src = fp8_block_layout_cublaslt_blk128x128(rows, K), dst = ..._blk128x128(K, rows),
// transposed); the per-row K-chunk scales (fp8_block_layout_colmajor(rows, K, b)) that gemm_fp8.cuh's
// chunked modes read, expanded from b x b tiles, for the matrix and (transposed) for its transpose.
// Padding of dst is set to 1.0f. dst and src must not overlap. Overwrites dst.
static inline void fp8_block_scales_relayout(float* dst, const FP8BlockLayout& Ld, const float* src, const FP8BlockLayout& Ls,
                                             int transpose_grid, cudaStream_t stream) {
    const bool ok = transpose_grid ? (Ld.rows == Ls.K && Ld.K == Ls.rows && Ls.block_k % Ld.block_rows == 0 &&
                                      Ls.block_rows % Ld.block_k == 0)
                                   : (Ld.rows == Ls.rows && Ld.K == Ls.K && Ls.block_rows % Ld.block_rows == 0 &&
                                      Ls.block_k % Ld.block_k == 0);
    fp8q_require(dst != NULL && src != NULL && ok, "fp8_block_scales_relayout", "block grids do not match");
    fp8q_block_relayout_kernel<<<fp8q_grid_stride_blocks(fp8_block_layout_count(Ld)), FP8Q_THREADS, 0, stream>>>(dst, Ld, src, Ls,
                                                                                                              transpose_grid);
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------------
// Public launchers: dequantization (tests, diagnostics)

// out[i] = fp8_decode(fmt, q[i]) / *scale for i < n (scale = the QUANT scale, fp8.h convention; correctly
// rounded division). NaN / Inf codes decode to NaN / Inf. Overwrites out (n floats).
static inline void fp8_dequantize(float* out, const uint8_t* q, size_t n, FP8Kind kind, const float* scale, cudaStream_t stream) {
    fp8q_require(out != NULL && q != NULL && scale != NULL, "fp8_dequantize", "NULL pointer");
    if (n == 0) return;
    fp8q_dequantize_kernel<<<fp8q_grid_stride_blocks(n), FP8Q_THREADS, 0, stream>>>(out, q, n, kind, scale);
    cudaCheckLaunch();
}

// Block-scaled version: out (rows, K) row-major, out[r, c] = fp8_decode(q[r, c]) / scales[fp8_block_index_of(L, r, c)].
static inline void fp8_dequantize_blocked(float* out, const uint8_t* q, const FP8BlockLayout& L, FP8Kind kind, const float* scales,
                                          cudaStream_t stream) {
    fp8q_require(out != NULL && q != NULL && scales != NULL, "fp8_dequantize_blocked", "NULL pointer");
    fp8q_dequantize_blocked_kernel<<<fp8q_grid_stride_blocks((size_t)L.rows * L.K), FP8Q_THREADS, 0, stream>>>(out, q, L, kind, scales);
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------------
// TCFP-12 weight split (seed: shared/seeds/tcfp_readme.txt): W ~ W_hi + W_lo, both E4M3FN.
//
// Per element of the fp32 master weight W (OC, C) row-major, with all arithmetic as in the header comment:
//   W' = W + e          (e = the error-feedback buffer ef, when ef != NULL; else W' = W)
//   h  = fp8_encode_rne(E4M3FN, W' * s_hi, 1)                       -> w_hi
//   R  = W' - decode(h) / s_hi                                      (the residual)
//   l  = fp8_encode_rne(E4M3FN, R * s_lo, 1), or with srr != 0
//        fp8_encode_sr(E4M3FN, R * s_lo, fp8_random_bits(seed, r * C + c), 1)   -> w_lo
//   e' = R - decode(l) / s_lo  -> ef (when ef != NULL)
// i.e. e_t = (W + e_{t-1}) - deq(Q(W + e_{t-1})) with Q the two-term quantizer (sigma-delta error feedback):
// the part of W' that W_hi + W_lo misses is carried into the next step. SRR (stochastic residual rounding)
// makes W_lo unbiased instead; it replaces error feedback, so srr != 0 together with ef != NULL is an error.
// Pass a fresh seed every step.
// Scales (QUANT scales; dequant = 1 / scale):
//   per tensor (blocked == 0): s_hi from amax(W') and s_lo from amax(R), each fp8_scale_pow2_from_amax(E4M3FN,
//     amax, margin) if pow2 else fp8_scale_from_amax; 1 float each. Three passes over W (and ef): amax(W');
//     W_hi + amax(R); W_lo + ef. amax_hi / amax_lo (optional) receive the two amaxes (NaN if W' has a NaN).
//   per block (blocked != 0): the same per block of `layout` (rows = OC, K = C; e.g.
//     fp8_block_layout_rowmajor(OC, C, 32 | 64 | 128) or fp8_block_layout_cublaslt_blk128x128(OC, C)); s_hi
//     from the block's amax(W'), s_lo from the block's amax(R); one pass (a warp per 1-D block, a thread block
//     per 2-D tile), scale buffers of fp8_block_layout_count(layout) floats (padding = 1).
// Transposed copies: when w_hi_t / w_lo_t are non-NULL they receive the (C, OC) row-major transposes of w_hi /
// w_lo (fp8_transpose_codes after the split; bit-identical). Their scales are the same numbers: per tensor the
// same scalar; for 128 x 128 tiles the transposed grid (fp8_block_scales_relayout with transpose_grid = 1);
// 1-D blocks along C become blocks along the transposed matrix's rows, which cuBLASLt cannot express.
// Outputs are overwritten; ef is read and rewritten in place. Needs scratch (FP8_QUANT_SCRATCH_FLOATS) in
// per-tensor mode. Deterministic. Requirements: OC, C >= 1; 16-byte vector paths when w, ef, w_hi, w_lo are
// 16-byte aligned (per tensor) — otherwise element-wise code with identical results.
typedef struct {
    // outputs (device)
    uint8_t* w_hi;         // (OC, C) E4M3FN codes, required
    uint8_t* w_lo;         // (OC, C) E4M3FN codes, required
    uint8_t* w_hi_t;       // (C, OC) transposed copy of w_hi, or NULL
    uint8_t* w_lo_t;       // (C, OC) transposed copy of w_lo, or NULL
    float* scale_hi;       // QUANT scales of W_hi: 1 float (per tensor) or fp8_block_layout_count(layout), required
    float* scale_lo;       // QUANT scales of W_lo, same shape, required
    float* inv_scale_hi;   // DEQUANT scales (cuBLASLt A/B scale) of W_hi, same shape, or NULL
    float* inv_scale_lo;   // DEQUANT scales of W_lo, or NULL
    float* amax_hi;        // per tensor only: amax(W'), 1 float, or NULL
    float* amax_lo;        // per tensor only: amax(R), 1 float, or NULL
    // inputs (device)
    const float* w;        // fp32 master weights (OC, C) row-major, required
    float* ef;             // error-feedback buffer (OC, C) fp32, read and rewritten; NULL = no error feedback
    int OC, C;
    int blocked;           // 0: per-tensor scales; 1: per-block scales in `layout`
    FP8BlockLayout layout; // blocked only: layout.rows == OC, layout.K == C
    int margin;            // fp8_scale*_from_amax margin (binades of headroom), usually 0
    int pow2;              // 1: power-of-two scales (exact dequantization), 0: max_finite / amax
    int srr;               // 1: stochastic rounding of W_lo (SRR); needs ef == NULL
    uint64_t seed;         // SRR random stream
    float* scratch;        // per tensor: FP8_QUANT_SCRATCH_FLOATS floats of device scratch
} TCFP12Split;

__device__ __forceinline__ float tcfp12_deq(uint8_t q, float s) {
    return __fdiv_rn(fp8_decode(fp8_format(FP8_E4M3FN), q), s);
}

// Per-element body shared by the kernels. PASS 1: returns |W'| bits. PASS 2: writes w_hi, returns |R| bits.
// PASS 3: writes w_lo and ef.
template <int PASS, bool SRR>
__device__ __forceinline__ uint32_t tcfp12_element(const TCFP12Split& a, size_t i, float s_hi, float s_lo) {
    float wp = a.w[i];
    if (a.ef) wp = __fadd_rn(wp, a.ef[i]);
    if constexpr (PASS == 1) {
        return abs_bits(wp);
    } else {
        const uint8_t h = fp8q_encode1<FP8_E4M3FN, false>(fp8q_scaled(wp, s_hi), 0, 0);
        const float R = __fsub_rn(wp, tcfp12_deq(h, s_hi));
        if constexpr (PASS == 2) {
            a.w_hi[i] = h;
            return abs_bits(R);
        } else {
            const uint8_t l = fp8q_encode1<FP8_E4M3FN, SRR>(fp8q_scaled(R, s_lo), a.seed, i);
            a.w_lo[i] = l;
            if (a.ef) a.ef[i] = __fsub_rn(R, tcfp12_deq(l, s_lo));
            return 0u;
        }
    }
}

// Per-tensor pass over all elements (grid-stride, 16 elements per step on the vector path, handled as four
// float4 groups to keep register use low). PASS 1 and 2 write a block partial of the max to partials[].
template <int PASS, bool SRR>
__global__ void __launch_bounds__(FP8Q_THREADS) tcfp12_tensor_pass_kernel(TCFP12Split a, uint32_t* partials, int vec) {
    const size_t n = (size_t)a.OC * a.C;
    const size_t tid = (size_t)blockIdx.x * FP8Q_THREADS + threadIdx.x, nthr = (size_t)gridDim.x * FP8Q_THREADS;
    float s_hi = 0.0f, s_lo = 0.0f;
    if constexpr (PASS >= 2) s_hi = __ldg(a.scale_hi);
    if constexpr (PASS == 3) s_lo = __ldg(a.scale_lo);
    uint32_t m = 0;
    size_t done = 0;
    if (vec) {
        const size_t nc = n / 16;
        for (size_t p = tid; p < nc; p += nthr) {
            const size_t i0 = p * 16;
            uint32_t hw[4], lw[4];
            #pragma unroll
            for (int q = 0; q < 4; q++) {
                const size_t iq = i0 + 4 * q;
                float wp[4];
                fp8q_load_packet(wp, a.w + iq);
                if (a.ef) {
                    float e[4];
                    fp8q_load_packet(e, a.ef + iq);
                    #pragma unroll
                    for (int k = 0; k < 4; k++) wp[k] = __fadd_rn(wp[k], e[k]);
                }
                if constexpr (PASS == 1) {
                    #pragma unroll
                    for (int k = 0; k < 4; k++) m = max(m, abs_bits(wp[k]));
                } else {
                    float v[4], R[4];
                    uint8_t h[4];
                    #pragma unroll
                    for (int k = 0; k < 4; k++) v[k] = fp8q_scaled(wp[k], s_hi);
                    fp8q_encode_n<FP8_E4M3FN, false, 4>(h, v, 0, 0);
                    #pragma unroll
                    for (int k = 0; k < 4; k++) R[k] = __fsub_rn(wp[k], tcfp12_deq(h[k], s_hi));
                    if constexpr (PASS == 2) {
                        hw[q] = fp8q_pack4(h);
                        #pragma unroll
                        for (int k = 0; k < 4; k++) m = max(m, abs_bits(R[k]));
                    } else {
                        uint8_t l[4];
                        #pragma unroll
                        for (int k = 0; k < 4; k++) v[k] = fp8q_scaled(R[k], s_lo);
                        fp8q_encode_n<FP8_E4M3FN, SRR, 4>(l, v, a.seed, iq);
                        lw[q] = fp8q_pack4(l);
                        if (a.ef) {
                            f128 e;
                            #pragma unroll
                            for (int k = 0; k < 4; k++) e[k] = __fsub_rn(R[k], tcfp12_deq(l[k], s_lo));
                            store128(a.ef + iq, e);
                        }
                    }
                }
            }
            if constexpr (PASS == 2) *reinterpret_cast<uint4*>(a.w_hi + i0) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
            if constexpr (PASS == 3) *reinterpret_cast<uint4*>(a.w_lo + i0) = make_uint4(lw[0], lw[1], lw[2], lw[3]);
        }
        done = nc * 16;
    }
    for (size_t i = done + tid; i < n; i += nthr) m = max(m, tcfp12_element<PASS, SRR>(a, i, s_hi, s_lo));
    if constexpr (PASS <= 2) {
        m = block_reduce_max_u32(m);
        if (threadIdx.x == 0) partials[blockIdx.x] = m;
    }
}

// Max over a group of GROUP threads: a warp (32) or the whole thread block (256).
template <int GROUP>
__device__ __forceinline__ uint32_t tcfp12_group_max(uint32_t v) {
    if constexpr (GROUP == 32) return __reduce_max_sync(0xFFFFFFFFu, v);
    else return block_reduce_max_u32(v);
}

// Per-block split: one group (a warp for 1-D blocks, 8 per thread block; a whole thread block for 2-D
// tiles) per scale block, three loops over the block's elements (reads hit L1/L2 after the first).
template <int GROUP, bool SRR>
__global__ void __launch_bounds__(FP8Q_THREADS) tcfp12_blocked_kernel(TCFP12Split a) {
    const FP8BlockLayout& L = a.layout;
    const int lane = GROUP == 32 ? (threadIdx.x & 31) : threadIdx.x;
    const int b = GROUP == 32 ? blockIdx.x * (FP8Q_THREADS / 32) + (threadIdx.x >> 5) : blockIdx.x;
    if (b >= L.nb_rows * L.nb_k) return;  // uniform per group
    const int rb = b / L.nb_k, kb = b - rb * L.nb_k;
    const int r0 = rb * L.block_rows, r1 = min(L.rows, r0 + L.block_rows);
    const int c0 = kb * L.block_k, width = min(L.K, c0 + L.block_k) - c0;
    const int count = (r1 - r0) * width;
    const FP8Format f = fp8_format(FP8_E4M3FN);
    // element e of the block -> flat index
    auto index_of = [&](int e) -> size_t {
        const int rr = L.block_rows == 1 ? 0 : e / width;
        return (size_t)(r0 + rr) * a.C + c0 + (e - rr * width);
    };
    auto wprime = [&](size_t i) -> float {
        const float w = a.w[i];
        return a.ef ? __fadd_rn(w, a.ef[i]) : w;
    };
    uint32_t m = 0;
    for (int e = lane; e < count; e += GROUP) m = max(m, abs_bits(wprime(index_of(e))));
    const float s_hi = fp8q_scale_from_amax(f, fp8q_amax_from_bits(tcfp12_group_max<GROUP>(m)), a.margin, a.pow2);
    m = 0;
    for (int e = lane; e < count; e += GROUP) {
        const size_t i = index_of(e);
        const float wp = wprime(i);
        const uint8_t h = fp8q_encode1<FP8_E4M3FN, false>(fp8q_scaled(wp, s_hi), 0, 0);
        a.w_hi[i] = h;
        m = max(m, abs_bits(__fsub_rn(wp, tcfp12_deq(h, s_hi))));
    }
    const float s_lo = fp8q_scale_from_amax(f, fp8q_amax_from_bits(tcfp12_group_max<GROUP>(m)), a.margin, a.pow2);
    for (int e = lane; e < count; e += GROUP) {
        const size_t i = index_of(e);
        const float wp = wprime(i);  // the same thread rewrote nothing that wprime reads yet (ef is written below)
        const uint8_t h = fp8q_encode1<FP8_E4M3FN, false>(fp8q_scaled(wp, s_hi), 0, 0);
        const float R = __fsub_rn(wp, tcfp12_deq(h, s_hi));
        const uint8_t l = fp8q_encode1<FP8_E4M3FN, SRR>(fp8q_scaled(R, s_lo), a.seed, i);
        a.w_lo[i] = l;
        if (a.ef) a.ef[i] = __fsub_rn(R, tcfp12_deq(l, s_lo));
    }
    if (lane == 0) {
        const int64_t idx = fp8_block_index(L, rb, kb);
        a.scale_hi[idx] = s_hi;
        a.scale_lo[idx] = s_lo;
        if (a.inv_scale_hi) a.inv_scale_hi[idx] = __frcp_rn(s_hi);
        if (a.inv_scale_lo) a.inv_scale_lo[idx] = __frcp_rn(s_lo);
    }
}

// The TCFP-12 split described above, on `stream`.
static inline void tcfp12_split(const TCFP12Split& a, cudaStream_t stream) {
    const char* fn = "tcfp12_split";
    fp8q_require(a.w != NULL && a.w_hi != NULL && a.w_lo != NULL && a.scale_hi != NULL && a.scale_lo != NULL, fn,
                 "w, w_hi, w_lo, scale_hi and scale_lo are required");
    fp8q_require(a.OC >= 1 && a.C >= 1, fn, "OC and C must be positive");
    fp8q_require(!(a.srr && a.ef != NULL), fn, "srr (stochastic residual rounding) replaces error feedback: pass ef = NULL");
    const size_t n = (size_t)a.OC * a.C;
    fp8q_with_bool(a.srr != 0, [&](auto S) {
        constexpr bool SRR = decltype(S)::value;
        if (!a.blocked) {
            fp8q_require(a.scratch != NULL, fn, "per-tensor mode needs scratch (FP8_QUANT_SCRATCH_FLOATS floats)");
            uint32_t* partials = reinterpret_cast<uint32_t*>(a.scratch);
            const int vec = fp8q_aligned16(a.w) && (a.ef == NULL || fp8q_aligned16(a.ef)) && fp8q_aligned16(a.w_hi) &&
                            fp8q_aligned16(a.w_lo);
            const size_t chunks = ceil_div_sz(n, (size_t)16 * FP8Q_THREADS);
            const int grid = (int)(chunks < (size_t)FP8Q_MAX_PARTIALS ? chunks : (size_t)FP8Q_MAX_PARTIALS);
            tcfp12_tensor_pass_kernel<1, SRR><<<grid, FP8Q_THREADS, 0, stream>>>(a, partials, vec);
            cudaCheckLaunch();
            fp8q_amax_finalize_kernel<<<1, 1024, 0, stream>>>(partials, grid, a.amax_hi, a.scale_hi, a.inv_scale_hi, FP8_E4M3FN,
                                                               a.margin, a.pow2);
            cudaCheckLaunch();
            tcfp12_tensor_pass_kernel<2, SRR><<<grid, FP8Q_THREADS, 0, stream>>>(a, partials, vec);
            cudaCheckLaunch();
            fp8q_amax_finalize_kernel<<<1, 1024, 0, stream>>>(partials, grid, a.amax_lo, a.scale_lo, a.inv_scale_lo, FP8_E4M3FN,
                                                               a.margin, a.pow2);
            cudaCheckLaunch();
            tcfp12_tensor_pass_kernel<3, SRR><<<grid, FP8Q_THREADS, 0, stream>>>(a, partials, vec);
            cudaCheckLaunch();
        } else {
            const FP8BlockLayout& L = a.layout;
            fp8q_require(L.rows == a.OC && L.K == a.C, fn, "layout must describe the (OC, C) weight");
            const int nblocks = L.nb_rows * L.nb_k;
            if (L.block_rows == 1) {
                tcfp12_blocked_kernel<32, SRR><<<ceil_div(nblocks, FP8Q_THREADS / 32), FP8Q_THREADS, 0, stream>>>(a);
            } else {
                tcfp12_blocked_kernel<FP8Q_THREADS, SRR><<<nblocks, FP8Q_THREADS, 0, stream>>>(a);
            }
            cudaCheckLaunch();
            if (fp8_block_layout_count(L) > (size_t)nblocks) {
                const int g = fp8q_grid_stride_blocks(fp8_block_layout_count(L));
                fp8q_block_pad_kernel<<<g, FP8Q_THREADS, 0, stream>>>(a.scale_hi, a.inv_scale_hi, L);
                cudaCheckLaunch();
                fp8q_block_pad_kernel<<<g, FP8Q_THREADS, 0, stream>>>(a.scale_lo, a.inv_scale_lo, L);
                cudaCheckLaunch();
            }
        }
    });
    if (a.w_hi_t) fp8_transpose_codes(a.w_hi_t, a.w_hi, a.OC, a.C, stream);
    if (a.w_lo_t) fp8_transpose_codes(a.w_lo_t, a.w_lo, a.OC, a.C, stream);
}
