// fp8_quant.cuh - FP8 quantization for the FP8 and TCFP-12 GEMM backends: per-tensor amax, scales computed
// on the device (current and delayed scaling), quantization of row-major matrices (plain or transposed,
// round-to-nearest-even or stochastic rounding), block scaling along K (including the scale layouts
// cuBLASLt's Hopper block-scaled FP8 GEMMs read), the TCFP-12 weight split W = W_hi + W_lo, code transposes
// and dequantization for diagnostics. Include this file for all of it.
//
// One file per kernel family, each with its kernels and then its launchers:
//   fp8_quant_common.cuh   the conventions (formats, scales, arithmetic, layouts, determinism, scratch, vector
//                          paths), launch constants, host and device helpers shared by all of them
//   fp8_block_layout.cuh   FP8BlockLayout: the block-scale layouts (incl. cuBLASLt's VEC128 / BLK128x128)
//   fp8_amax.cuh           per-tensor amax and scales: current, delayed, from producer amax bits, speculative
//   fp8_quantize.cuh       per-tensor quantization, plain / transposed / both, from memory or a producer;
//                          code transposes
//   fp8_block_scale.cuh    per-block scales, block-scaled quantization, scale relayout
//   fp8_dequant.cuh        dequantization (tests, diagnostics)
//   tcfp12_split.cuh       the TCFP-12 weight split W = W_hi + W_lo
#pragma once

#include "llmc/kernels/fp8/fp8_quant_common.cuh"
#include "llmc/kernels/fp8/fp8_block_layout.cuh"
#include "llmc/kernels/fp8/fp8_amax.cuh"
#include "llmc/kernels/fp8/fp8_quantize.cuh"
#include "llmc/kernels/fp8/fp8_block_scale.cuh"
#include "llmc/kernels/fp8/fp8_dequant.cuh"
#include "llmc/kernels/fp8/tcfp12_split.cuh"
