// tcast_gelu.cuh - the fc layer's GELU with the TensorCast site casts of its input and its output (issue 26,
// doc/TCAST.md 5.5), as few passes as the data types allow. The order of the separate passes, whose bits this
// reproduces exactly (the same BF16 values enter the same cast code with the same flat indices and seeds, 5.3):
//   1. pre = cast_a(pre) in place     the matmul_out site of the fc output pre (N, 4C), tiles along 4C (dim 1)
//   2. out = GELU(pre)                the GELU kernel `form` (boundary.cuh BoundaryGelu) on the cast pre
//   3. out = cast_b(out) in place     the gelu_out site, tiles along 4C
// Separate, that is 2 + 2 (cast a) + 2 + 2 (GELU) + 2 + 2 (cast b) = 12 bytes per element; one pass reads pre once
// and writes pre' (the backward's GELU' reads it) and out': 6 bytes.
//
// Cast b's group scales need the GELU values, which need cast a's group scales first, so the pass with both casts
// is not an elementwise source (tcast_source.cuh) but a row kernel with two cast stages on the same registers,
// tcast_gelu_rows_kernel: a lane holds its packets of a 1024-element unit at warp stride, as the row cast kernel
// does (tcast_rows_unit, tcast_cast_kernels.cuh, the code both run: groups merged by shuffles across lanes);
// stage a casts them and stores pre', GELU turns them into the BF16 values the GELU kernel stores, stage b casts
// those and stores out'. Without cast a (only gelu_out cast) the pass is tcast_cast_from with the GELU source of
// tcast_producers.cuh. Without cast b (only matmul_out cast) the row kernel stores the uncast GELU values.
//
// What runs where (tcast_gelu_route):
//   cast a in the kernel: the BOUNDARY_GELU_FRONT form (the two-stage kernel computes gemm_gelu_stored: the fc
//     forward with -ge 1, the only caller that casts pre), the RNE quantizer (round to nearest even: MX, BFP,
//     unscaled and fixed-scale floats and ints; the exponent quantizer's pair spilled and ran slower than the
//     passes, tcast_gelu_stage_fusable), tiles of 2 .. 1024 elements or none (channel, per-tensor and M:N casts
//     need the whole slice first), no statistics; else cast a is tcast_cast's pass;
//   cast b in the kernel: with cast a in it, the same conditions; else whatever tcast_cast_fusable admits for the
//     GELU source (statistics included); else tcast_cast's pass after the GELU kernel;
//   fuse = false (--cast-fuse 0): every cast a pass.
// Kernels added: one, tcast_gelu_rows_kernel<TcastQRne> (stage b off is a launch argument). Row-major floatX (BF16) tensors; cols % 8 == 0 and 16-byte aligned pointers.
#pragma once

#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/gemm/gemm_kernels.cuh"
#include "llmc/kernels/tcast/tcast_cast.cuh"
#include "llmc/kernels/tcast/tcast_producers.cuh"

// (TcastSiteCast, one site's cast: tcast_producers.cuh)

// Where tcast_gelu_cast casts pre (a) and out (b): inside the GELU kernel (true) or as a pass of its own.
struct TcastGeluRoute {
    bool pre_fused;  // the two-stage row kernel runs (cast a in it)
    bool out_fused;  // cast b in the GELU kernel: the two-stage kernel's stage b, or tcast_cast_from's GELU source
};

// Whether a site's cast can be a stage of tcast_gelu_rows_kernel (see the top of the file): the RNE quantizer only.
// Measured (H200, 65536 x 3072, both sites): mxfp8e4 (RNE pair) passes 0.781 ms, one kernel 0.626; mxfp6e2@stochastic
// (exponent pair, spilling under the 85-register bound) passes 2.958 ms, one kernel 3.429: slower, so those take the
// passes, and one kernel instantiation is left.
static inline bool tcast_gelu_stage_fusable(const TcastSiteCast& c) {
    if (!c.dt || c.stats || c.dt->sparse_n > 0 || tcast_cast_path(*c.dt, false) != TCAST_PATH_RNE) return false;
    return !c.dt->has_scale || c.dt->scale.tile > 0;
}

// The route tcast_gelu_cast takes for these arguments (the harness checks it against the design).
static inline TcastGeluRoute tcast_gelu_route(const floatX* out, const floatX* pre, int cols, const TcastSiteCast& a,
                                              const TcastSiteCast& b, BoundaryGelu form, bool fuse) {
    TcastGeluRoute r = {false, false};
    if (!fuse || cols % 8 != 0 || ((uintptr_t)out & 15) != 0 || ((uintptr_t)pre & 15) != 0) return r;
    r.pre_fused = form == BOUNDARY_GELU_FRONT && tcast_gelu_stage_fusable(a);
    if (r.pre_fused) r.out_fused = tcast_gelu_stage_fusable(b);
    else r.out_fused = b.dt && tcast_cast_fusable(tcast_src_gelu(pre, NULL, form), out, cols, 1, *b.dt);
    return r;
}

// The two-stage row kernel: pre' = cast_a(pre) stored in place, out' = cast_b(gemm_gelu_stored(pre')) stored in
// out (tile_b 0: stage b off, out = the uncast GELU values). tile_a, tile_b > 0: tiles of that many elements along
// a row (they divide cols, so no tile straddles rows); -1: unscaled or fixed scale. npk = rows * cols / 8 packets.
template <class Q>
__global__ void __launch_bounds__(TCAST_THREADS, Q::MIN_BLOCKS)
    tcast_gelu_rows_kernel(floatX* pre, floatX* out, size_t npk, int cols, int tile_a, int tile_b,
                           const __grid_constant__ TcastKernelArgs ka, const __grid_constant__ TcastKernelArgs kb) {
    TcastCounts cnt = {0u, 0u, 0u};  // (never counted: statistics steps take the passes)
    const int lane = threadIdx.x & 31;
    const size_t nunits = (npk + TCAST_ROW_PACKETS * 32 - 1) / (TCAST_ROW_PACKETS * 32);
    const size_t nwarps = (size_t)gridDim.x * TCAST_WARPS;
    const typename Q::Param pua = Q::param(ka, tcast_unscaled_group());  // the unscaled (or fixed) stages' scale
    const typename Q::Param pub = Q::param(kb, tcast_unscaled_group());
    for (size_t unit = (size_t)blockIdx.x * TCAST_WARPS + threadIdx.x / 32; unit < nunits; unit += nwarps) {
        uint32_t b[TCAST_ROW_PACKETS][8];
        size_t pk[TCAST_ROW_PACKETS];
        bool valid[TCAST_ROW_PACKETS];
        #pragma unroll
        for (int j = 0; j < TCAST_ROW_PACKETS; j++) {  // all loads first, as the row cast kernel
            pk[j] = unit * (TCAST_ROW_PACKETS * 32) + j * 32 + lane;
            valid[j] = pk[j] < npk;
            tcast_unpack8(valid[j] ? tcast_load16(pre + pk[j] * 8) : make_uint4(0u, 0u, 0u, 0u), b[j]);
        }
        // stage a: each cast packet is stored as pre' and replaced by the BF16 GELU values of the stored pre'
        // (what gemm_gelu_apply stores); an invalid packet keeps its zeros for stage b's accumulations
        auto gelu = [&](int j) {
            const uint4 w = tcast_pack8(b[j]);
            tcast_store16(pre + pk[j] * 8, w);
            tcast_unpack8(w, b[j]);
            #pragma unroll
            for (int e = 0; e < 8; e++) b[j][e] = (uint32_t)__bfloat16_as_ushort(gemm_gelu_stored(__uint_as_float(b[j][e]))) << 16;
        };
        if (tile_a > 0) tcast_rows_unit<Q, false, true>(ka, tile_a, pua, nullptr, 0, cols, true, b, pk, valid, cnt, nullptr, gelu);
        else tcast_rows_unit<Q, false, false>(ka, tile_a, pua, nullptr, 0, cols, true, b, pk, valid, cnt, nullptr, gelu);
        // stage b: out' = cast_b of the GELU values
        auto store = [&](int j) { tcast_store16(out + pk[j] * 8, tcast_pack8(b[j])); };
        if (tile_b > 0) {
            tcast_rows_unit<Q, false, true>(kb, tile_b, pub, nullptr, 0, cols, true, b, pk, valid, cnt, nullptr, store);
        } else if (tile_b < 0) {
            tcast_rows_unit<Q, false, false>(kb, tile_b, pub, nullptr, 0, cols, true, b, pk, valid, cnt, nullptr, store);
        } else {
            #pragma unroll
            for (int j = 0; j < TCAST_ROW_PACKETS; j++)
                if (valid[j]) store(j);
        }
    }
}

// Launches tcast_gelu_rows_kernel for cast a and (b != NULL) cast b, both tcast_gelu_stage_fusable: the RNE
// quantizer, the one tcast_cast chooses for them (tcast_cast_path), so the bits are its.
static inline void tcast_gelu_rows_launch_(floatX* out, floatX* pre, int rows, int cols, const TcastSiteCast& a, const TcastSiteCast* b,
                                           cudaStream_t stream) {
    const TcastKernelArgs ka = tcast_kernel_args(*a.dt, a.seed);
    const TcastKernelArgs kb = b ? tcast_kernel_args(*b->dt, b->seed) : ka;  // (stage b off: unused)
    const int tile_a = a.dt->has_scale ? a.dt->scale.tile : -1;
    const int tile_b = b ? (b->dt->has_scale ? b->dt->scale.tile : -1) : 0;
    const size_t npk = (size_t)rows * (size_t)cols / 8;
    const unsigned blocks = tcast_blocks_((npk + TCAST_ROW_PACKETS * 32 - 1) / (TCAST_ROW_PACKETS * 32), TCAST_WARPS);
    tcast_gelu_rows_kernel<TcastQRne><<<blocks, TCAST_THREADS, 0, stream>>>(pre, out, npk, cols, tile_a, tile_b, ka, kb);
    cudaCheckLaunch();
}

// out = GELU(pre) with the site casts around it, on stream (see the top of the file): pre (rows, cols) row-major
// floatX, cast in place by a when a.dt != NULL (else only read); out (rows, cols) = GELU by the kernel `form` of the
// cast pre, cast by b when b.dt != NULL. The same bits and statistics as tcast_cast(pre, pre, ..., 1, a), the GELU
// kernel (gemm_gelu_apply<false> or gelu_forward), tcast_cast(out, out, ..., 1, b); fuse = false runs exactly those.
// ctx: the reduction scratch of channel / per-tensor types (tcast_cast). out must not alias pre.
// Errors (exit): cols % 8 != 0 or unaligned pointers ("error: tcast_gelu_cast: ..."), and tcast_cast's shape checks.
static inline void tcast_gelu_cast(floatX* out, floatX* pre, int rows, int cols, const TcastSiteCast& a, const TcastSiteCast& b,
                                   BoundaryGelu form, bool fuse, TcastCastContext* ctx, cudaStream_t stream) {
    char err[256];
    if (cols % 8 != 0 || ((uintptr_t)out & 15) != 0 || ((uintptr_t)pre & 15) != 0) {
        fprintf(stderr, "error: tcast_gelu_cast: cols (%d) must be a multiple of 8 and pre, out 16-byte aligned\n", cols);
        exit(EXIT_FAILURE);
    }
    if (a.dt && tcast_cast_shape_ok(*a.dt, rows, cols, 1, err, sizeof(err)) != 0) tcast_cast_die_(err);
    if (b.dt && tcast_cast_shape_ok(*b.dt, rows, cols, 1, err, sizeof(err)) != 0) tcast_cast_die_(err);
    const TcastGeluRoute r = tcast_gelu_route(out, pre, cols, a, b, form, fuse);
    if (r.pre_fused) {
        tcast_gelu_rows_launch_(out, pre, rows, cols, a, r.out_fused ? &b : NULL, stream);
        if (b.dt && !r.out_fused) tcast_cast(out, out, rows, cols, 1, *b.dt, b.seed, b.stats, ctx, stream);
        return;
    }
    if (a.dt) tcast_cast(pre, pre, rows, cols, 1, *a.dt, a.seed, a.stats, ctx, stream);
    if (r.out_fused) {
        tcast_cast_from(out, tcast_src_gelu(pre, NULL, form), rows, cols, 1, *b.dt, b.seed, b.stats, ctx, stream);
        return;
    }
    const size_t n = (size_t)rows * (size_t)cols;
    if (form == BOUNDARY_GELU_KERNEL) gelu_forward(out, pre, n, stream);
    else gemm_gelu_apply<false>(out, pre, n, stream);
    if (b.dt) tcast_cast(out, out, rows, cols, 1, *b.dt, b.seed, b.stats, ctx, stream);
}
