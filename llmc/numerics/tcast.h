/*
 * tcast.h - the TensorCast datatype model (doc/TCAST.md sections 1-4): number, scale and data type
 * specifications parsed from text, and the virtual cast ("fake quantization": quantize, then
 * dequantize at once) of float32 values to any such data type. Include this file for all of it.
 *
 * Header-only; usable from C, C++ and CUDA. Three layers, one file each:
 *
 *   1. Plain-data specs (TcastNumberSpec, TcastScaleSpec, TcastDataType) and the HOST_DEVICE scalar
 *      primitives, the single source of truth for host and GPU (llmc/numerics/tcast_quant.h):
 *      accumulate a group (TcastGroupAcc), derive its scale (tcast_group_scale: sections 4a-4c,
 *      specials 4.3), quantize one element (tcast_quantize: 1.3 / 4a-4c, with saturation / flush
 *      flags for 4.5), per-element random bits (tcast_random_bits), M:N pruning (tcast_sparse_*).
 *      Its header comment states how the casts stay exact (integer arithmetic on float32 bits, RNE
 *      float32 operations immune to --use_fast_math) and the conventions (NaN, flags, "Reading:").
 *   2. The host parsers of the text grammar (tcast_parse_number / _scale / _datatype), which also
 *      precompute the integers the device path needs, and the canonical codes
 *      (llmc/numerics/tcast_spec.h).
 *   3. Here: the host-only whole-tensor cast tcast_cast_host (section 4 on a 2-D float32 tensor),
 *      which composes exactly the primitives a kernel would use.
 *
 * Sources: doc/TCAST.md (the contract), OCP Microscaling Formats (MX) v1.0 (E8M0 scale, element
 * formats, section 6.3 NaN handling), OCP 8-bit Floating Point (OFP8) rev 1.0 (E4M3 / E5M2).
 */
#ifndef LLMC_NUMERICS_TCAST_H
#define LLMC_NUMERICS_TCAST_H

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/numerics/tcast_quant.h"  // specs, scalar primitives (HOST_DEVICE)
#include "llmc/numerics/tcast_spec.h"   // parsers and canonical codes (host)

// ----------------------------------------------------------------------------------------------
// Whole-tensor cast (host reference of section 4)

// Statistics of section 4.5, accumulated over tcast_cast_host calls (zero it first).
typedef struct {
    long long values;     // elements cast
    long long saturated;  // finite inputs saturated (TCAST_FLAG_SATURATED)
    long long flushed;    // non-zero finite inputs (after pruning) cast to zero (TCAST_FLAG_FLUSHED)
    long long hist[TCAST_HIST_BINS];  // group scale exponents: see tcast_hist_bin
} TcastStats;

// Section 4 on a row-major (rows, cols) float32 tensor x, into out (same shape; out may equal x).
// dim: -1 or 1 = groups of consecutive elements of a row; 0 or -2 = of a column. The data type's
// scale decides the groups (unscaled and fixed pN: each element; per tensor: all; t0: each row (dim -1) or
// column (dim 0); tX: X consecutive elements along dim); M:N pruning runs first, along dim.
// Element (r, c) draws its random bits from tcast_random_bits(seed, r * cols + c) whatever dim is.
// stats (may be NULL) is added to. Returns 0, or -1 with a message in err (out and stats untouched)
// when rows / cols < 1, dim is not one of -2..1, the scale spec's explicit dY names the other
// dimension than dim, or the tile / N does not divide the size along dim.
static inline int tcast_cast_host(const TcastDataType* dt, const float* x, float* out, int rows, int cols, int dim, uint64_t seed,
                                  TcastStats* stats, char* err, size_t n) {
    if (rows < 1 || cols < 1) return tcast_fail_(err, n, "%s: bad shape %d x %d", dt->name, rows, cols);
    if (dim < -2 || dim > 1) return tcast_fail_(err, n, "%s: dim %d is not -1, 1 (rows) or 0, -2 (columns)", dt->name, dim);
    int along_rows = dim == -1 || dim == 1;
    if (dt->has_scale && dt->scale.dim_given && along_rows != (dt->scale.dim == -1 || dt->scale.dim == 1))
        return tcast_fail_(err, n, "%s: the scale spec's d%d conflicts with the cast dimension %d", dt->name, dt->scale.dim, dim);
    const int len = along_rows ? cols : rows;    // size along dim
    const int lines = along_rows ? rows : cols;  // number of slices along dim
    // element j of line l is at flat index l * lstride + j * estride
    const size_t lstride = along_rows ? (size_t)cols : 1, estride = along_rows ? 1 : (size_t)cols;
    const size_t total = (size_t)rows * (size_t)cols;
    int tile = dt->has_scale ? dt->scale.tile : -1;
    if (tile > 0 && len % tile != 0)
        return tcast_fail_(err, n, "%s: tile %d does not divide the size %d along dim %d", dt->name, tile, len, dim);
    if (dt->sparse_n > 0 && len % dt->sparse_n != 0)
        return tcast_fail_(err, n, "%s: sparsity group N=%d does not divide the size %d along dim %d", dt->name, dt->sparse_n, len, dim);
    if (out != x) memcpy(out, x, total * sizeof(float));

    // 4.1 sparsity: prune groups of N along dim
    if (dt->sparse_n > 0) {
        float g[TCAST_SPARSE_N_MAX];
        for (int l = 0; l < lines; l++)
            for (int j0 = 0; j0 < len; j0 += dt->sparse_n) {
                for (int j = 0; j < dt->sparse_n; j++) g[j] = out[l * lstride + (size_t)(j0 + j) * estride];
                tcast_sparse_prune(g, dt->sparse_n, dt->sparse_m);
                for (int j = 0; j < dt->sparse_n; j++) out[l * lstride + (size_t)(j0 + j) * estride] = g[j];
            }
    }

    // 4.2 groups: a run of `glen` elements of one line, or the whole tensor (tile -1). Unscaled and
    // fixed-scale types take the whole tensor as one group too: tcast_group_scale returns UNSCALED for
    // them (every element alone, times 2^fixed_exp).
    const int whole = tile < 0;
    const int glen = whole ? 0 : (tile == 0 ? len : tile);
    const int ngroups = whole ? 1 : lines * (len / glen);
    const int stochastic = dt->round == TCAST_ROUND_STOCHASTIC;
    for (int gi = 0; gi < ngroups; gi++) {
        // group gi: elements k = 0 .. size-1 at flat index idx(k)
        const int l = whole ? 0 : gi / (len / glen), j0 = whole ? 0 : (gi % (len / glen)) * glen;
        const size_t size = whole ? total : (size_t)glen;
#define TCAST_IDX_(k) (whole ? (k) : l * lstride + (size_t)(j0 + (int)(k)) * estride)
        TcastGroupAcc acc = tcast_acc_init();
        if (dt->has_scale)
            for (size_t k = 0; k < size; k++) tcast_acc_add(&acc, out[TCAST_IDX_(k)]);
        TcastGroupScale g = tcast_group_scale(dt, acc);  // 4.3 specials, 4a-4c scales
        for (size_t k = 0; k < size; k++) {
            size_t i = TCAST_IDX_(k);
            unsigned flags;
            out[i] = tcast_quantize(dt, &g, out[i], stochastic ? tcast_random_bits(seed, i) : 0u, &flags);
            if (stats) {
                stats->saturated += (flags & TCAST_FLAG_SATURATED) != 0;
                stats->flushed += (flags & TCAST_FLAG_FLUSHED) != 0;
            }
        }
#undef TCAST_IDX_
        if (stats && g.hist >= 0) stats->hist[g.hist]++;
    }
    if (stats) stats->values += (long long)total;
    return 0;
}

#endif  // LLMC_NUMERICS_TCAST_H
