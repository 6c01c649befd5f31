// tcfp12_split.cuh - the TCFP-12 weight split W ~ W_hi + W_lo (two E4M3FN code matrices with their scales),
// with error feedback or stochastic residual rounding, per-tensor or per-block scales, and optional transposed
// copies: TCFP12Split and tcfp12_split (the recipe is stated below). Built on the amax reduction
// (fp8_amax.cuh), the block layouts and padding (fp8_block_scale.cuh) and the code transpose
// (fp8_quantize.cuh). Conventions: fp8_quant_common.cuh.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "llmc/kernels/fp8/fp8_quant_common.cuh"
#include "llmc/kernels/fp8/fp8_block_layout.cuh"
#include "llmc/kernels/fp8/fp8_amax.cuh"
#include "llmc/kernels/fp8/fp8_quantize.cuh"
#include "llmc/kernels/fp8/fp8_block_scale.cuh"

// ------------------------------------------------------------------------------------------------
// TCFP-12 weight split (seed: shared/seeds/tcfp_readme.txt): W ~ W_hi + W_lo, both E4M3FN.
//
// Per element of the fp32 master weight W (OC, C) row-major, with all arithmetic as in fp8_quant_common.cuh:
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
