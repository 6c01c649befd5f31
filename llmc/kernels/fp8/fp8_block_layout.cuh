// fp8_block_layout.cuh - FP8BlockLayout: where the scale of each block of a block-scaled FP8 matrix lives,
// and the constructors of the layouts this project uses (row-major and "row index fastest" 1 x block scales,
// b x b tiles, and the scale layouts cuBLASLt's Hopper block-scaled FP8 GEMMs read: VEC128 and BLK128x128),
// with the index functions kernels use (fp8_block_index, fp8_block_index_of). Host and device; no kernels.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include "llmc/kernels/fp8/fp8_quant_common.cuh"

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
