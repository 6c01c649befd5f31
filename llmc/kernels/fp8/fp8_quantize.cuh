// fp8_quantize.cuh - FP8 quantization of row-major matrices with one scale per tensor: plain, transposed
// (through 64 x 64 shared-memory tiles) or both from one read (fp8_quantize, fp8_quantize_pair, with the amax
// and the column sums taken on the way), from memory or from a producer computing the values
// (fp8_quantize_pair_from with an Fp8SrcMatrix-like source), round-to-nearest-even or stochastic rounding;
// and byte transposes of code matrices (fp8_transpose_codes). The kernels also serve the block-scaled
// quantization of fp8_block_scale.cuh (BLOCKED = true). Conventions: fp8_quant_common.cuh.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include "llmc/kernels/fp8/fp8_quant_common.cuh"
#include "llmc/kernels/fp8/fp8_block_layout.cuh"

constexpr int FP8Q_TILE = 64;                // transposes work on 64 x 64 tiles
// Minimum resident blocks per SM of the quantize-transpose kernel (__launch_bounds__): 5 caps it at 48
// registers, which it fits without spilling since fp8q_encode_words. The kernel is issue-bound (ncu, H200),
// so resident warps matter: on an H200 (dev/cuda/lowp_producers.cu) the plain pass ran at 55% of the copy
// rate with nvcc 13.0's own choice (72-82 registers, 3 blocks), 64% with 4 blocks, and with
// fp8q_encode_words 71% with 4 blocks and 77% with 5 (6 spills registers).
#ifndef FP8Q_TRANSPOSE_MIN_BLOCKS
#define FP8Q_TRANSPOSE_MIN_BLOCKS 5
#endif

// Rows of fp8_quantize_pair's column-sum partials for a matrix of `rows` rows (one per 64-row tile).
static inline int fp8_col_partial_rows(int rows) { return (rows + FP8Q_TILE - 1) / FP8Q_TILE; }

// ------------------------------------------------------------------------------------------------
// Device helpers: transposing tiles

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
//   packet(v, idx, r, c) the V values at flat indices idx .. idx + V - 1 (idx a multiple of V), i.e. row r, columns
//                        c .. c + V - 1 (idx = r * cols + c: given so that a source need not divide)
//   at(idx, r, c)        the value at flat index idx, row r, column c
//   vec_ok()             (host) whether packet() may use 16-byte accesses (its pointers are 16-byte aligned)
// Both device functions must give the same value for the same index (edge tiles use at()).
template <class T>
struct Fp8SrcMatrix {
    using Elem = T;
    const T* x;
    __device__ __forceinline__ void packet(float* v, size_t idx, int, int) const { fp8q_load_packet(v, x + idx); }
    __device__ __forceinline__ float at(size_t idx, int, int) const { return (float)x[idx]; }
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
                src.packet(v, idx, r, c);
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
                    const float xv = src.at(idx, r, c);
                    m = max(m, abs_bits(xv));
                    const uint8_t code = fp8q_encode1<KIND, SR>(fp8q_scaled(xv, sk), seed, idx);
                    tile[fp8q_tpos(cl, rl)] = code;
                    if (out_plain) out_plain[idx] = code;
                }
            }
            if (col_partials && threadIdx.x < FP8Q_TILE && c0 + (int)threadIdx.x < cols) {  // edge tiles: rows in order
                const int c = c0 + threadIdx.x;
                float t = 0.0f;
                for (int r = r0; r < min(rows, r0 + FP8Q_TILE); r++) t += src.at((size_t)r * cols + c, r, c);
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
