// attention_generic.cuh - the generic attention kernels: any head size up to 256, any floatX (the only
// path of fp32 builds), forward (single or two-pass, as the tensor-core forward), dQ and dK/dV, and
// their launchers. Correct and deterministic, not fast: attention.cuh sends bf16 / fp16 with HS 64 or
// 128 to the tensor-core kernels.
//
// One warp per row, keys (or queries) streamed through shared memory in chunks of 32, one per lane;
// each lane owns head dimensions lane, lane+32, ... (DPL of them). fp32 throughout; P is rounded to
// floatX before P.V exactly as in the tensor-core path. Row maxima and sums are the xor-butterfly
// warp_reduce_max / warp_reduce_sum of llmc/core/cuda_utils.cuh (every lane gets the result).
//
// The kernels keep their loops written out: moving the chunk loops, the P.V / dS.K accumulations or
// the output stores into shared helpers changed the generated code of these kernels (the fp32 builds'
// training kernels: the loops got unrolled and scheduled differently), so the similar-looking pieces
// below stay separate on purpose; the forward and dQ kernels share their row set-up (AttnGenRow).
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <type_traits>
#include <utility>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/kernels/attention/attention_common.cuh"

#define ATTN_GEN_ROWS 8   // warps (rows) per block
#define ATTN_GEN_CHUNK 32 // keys (queries) per shared-memory chunk: one per lane

__device__ __forceinline__ float attn_round_x(float v) { return (float)(floatX)v; }

// The generic path's hooked score and normalized probability (expf instead of the SFU exp2), one
// expression each, shared by the forward (both passes) and both backward kernels.
// The generic kernels (head sizes other than 64 / 128, never a hot path) keep the hooks' counting
// branch in all instantiations.
__device__ __forceinline__ float attn_gen_score(float dot, float scale) { return boundary_value<ATTN_SCORES>(dot * scale); }
__device__ __forceinline__ float attn_gen_prob_from_lse(float dot, float scale, float lse_r) {
    return boundary_value<ATTN_PROBS>(expf(attn_gen_score(dot, scale) - lse_r));
}

// Rows [r0, r0+CHUNK) of two HS-wide column blocks (at +off_a, +off_b of a row of stride ld) into
// float smem tiles of row stride HS+1 (odd stride: lanes reading different rows hit different banks).
// LOAD_B = false loads the first block only.
template <bool LOAD_B = true>
__device__ __forceinline__ void attn_gen_load2(float* sa, float* sb, const floatX* base, int ld, int off_a, int off_b,
                                               int r0, int T, int HS) {
    const int LDK = HS + 1;
    for (int idx = threadIdx.x; idx < ATTN_GEN_CHUNK * HS; idx += blockDim.x) {
        const int r = idx / HS, d = idx % HS, row = r0 + r;
        const bool valid = row < T;
        sa[r * LDK + d] = valid ? (float)base[(size_t)row * ld + off_a + d] : 0.f;
        if (LOAD_B) sb[r * LDK + d] = valid ? (float)base[(size_t)row * ld + off_b + d] : 0.f;
    }
}

// Store v rounded to floatX at p; returns the bit pattern of |stored value| (for the amax slot).
__device__ __forceinline__ unsigned int attn_gen_store(floatX* p, float v) {
    const floatX x = (floatX)v;
    *p = x;
    return abs_bits((float)x);
}

// Where a thread of the forward and dQ kernels stands: one warp per query row, ATTN_GEN_ROWS rows per
// block; blockIdx.y is the (b, h) pair and blockIdx.x walks the head's rows latest first (the longest
// rows start first); r0 is the block's first row. (Only these: computing more here, e.g. the row's
// `live` or its qkv pointer, changed the kernels' generated code.)
struct AttnGenRow {
    int bh, b, h, warp, lane, r0, row;
};
__device__ __forceinline__ AttnGenRow attn_gen_row(int NH) {
    AttnGenRow w;
    w.bh = blockIdx.y;
    w.b = w.bh / NH;
    w.h = w.bh % NH;
    w.warp = threadIdx.x / 32;
    w.lane = threadIdx.x % 32;
    w.r0 = (gridDim.x - 1 - blockIdx.x) * ATTN_GEN_ROWS;
    w.row = w.r0 + w.warp;
    return w;
}

// Forward, one warp per query row. PL (kProbsFromLse): pass 1 = online max/sum only (K chunks only),
// pass 2 = P^ from lse and O = sum P^ V without rescaling (see the header comment of attention.cuh).
template <int DPL, bool PL = kAttnProbsFromLse>
__global__ void __launch_bounds__(ATTN_GEN_ROWS * 32)
attn_fwd_generic_kernel(floatX* out, float* lse, const floatX* qkv, int T, int NH, int HS, float scale, unsigned int* amax) {
    extern __shared__ float gsm[];
    const int LDK = HS + 1;
    float* sK = gsm;                               // CHUNK x LDK
    float* sV = sK + ATTN_GEN_CHUNK * LDK;         // CHUNK x LDK
    float* sq = sV + ATTN_GEN_CHUNK * LDK;         // ROWS x HS
    float* sp = sq + ATTN_GEN_ROWS * HS;           // ROWS x CHUNK
    const int C = NH * HS, C3 = 3 * C;
    const AttnGenRow w = attn_gen_row(NH);
    const bool live = w.row < T;
    const floatX* base = qkv + (size_t)w.b * T * C3 + w.h * HS;
    float* q = sq + w.warp * HS;
    float* pw = sp + w.warp * ATTN_GEN_CHUNK;
    if (live)
        for (int d = w.lane; d < HS; d += 32) q[d] = (float)base[(size_t)w.row * C3 + d];

    float o[DPL];
    #pragma unroll
    for (int i = 0; i < DPL; i++) o[i] = 0.f;
    float m = -INFINITY, l = 0.f;
    const int last = min(w.r0 + ATTN_GEN_ROWS, T) - 1;
    // The only pass (PL = false), or pass 1: row statistics (PL = true).
    for (int c0 = 0; c0 <= last; c0 += ATTN_GEN_CHUNK) {
        __syncthreads();  // previous chunk fully consumed
        attn_gen_load2<!PL>(sK, sV, base, C3, C, 2 * C, c0, T, HS);
        __syncthreads();
        if (!live || c0 > w.row) continue;
        const int key = c0 + w.lane;
        float s = -INFINITY;
        if (key <= w.row) {
            float dot = 0.f;
            for (int d = 0; d < HS; d++) dot = fmaf(q[d], sK[w.lane * LDK + d], dot);
            s = attn_gen_score(dot, scale);
        }
        const float m_new = fmaxf(m, warp_reduce_max(s));  // chunk 0 has key 0 <= row: finite
        const float alpha = expf(m - m_new);
        const float p = key <= w.row ? expf(s - m_new) : 0.f;
        l = l * alpha + warp_reduce_sum(p);
        m = m_new;
        if constexpr (!PL) {
            pw[w.lane] = attn_round_x(boundary_value<ATTN_PROBS>(p));
            __syncwarp();
            #pragma unroll
            for (int i = 0; i < DPL; i++) {
                const int d = w.lane + 32 * i;
                if (d < HS) {
                    float acc = 0.f;
                    for (int k = 0; k < ATTN_GEN_CHUNK; k++) acc = fmaf(pw[k], sV[k * LDK + d], acc);
                    o[i] = o[i] * alpha + acc;
                }
            }
            __syncwarp();
        }
    }
    if constexpr (PL) {
        // m and l are warp-uniform (butterfly reductions), so every lane holds the same lse, the value
        // stored and read back by the backward kernels.
        const float lse_r = m + logf(l);
        if (live && w.lane == 0) lse[(size_t)w.bh * T + w.row] = lse_r;
        // Pass 2.
        for (int c0 = 0; c0 <= last; c0 += ATTN_GEN_CHUNK) {
            __syncthreads();
            attn_gen_load2(sK, sV, base, C3, C, 2 * C, c0, T, HS);
            __syncthreads();
            if (!live || c0 > w.row) continue;
            const int key = c0 + w.lane;
            float p = 0.f;
            if (key <= w.row) {
                float dot = 0.f;
                for (int d = 0; d < HS; d++) dot = fmaf(q[d], sK[w.lane * LDK + d], dot);
                p = attn_gen_prob_from_lse(dot, scale, lse_r);
            }
            pw[w.lane] = attn_round_x(p);
            __syncwarp();
            #pragma unroll
            for (int i = 0; i < DPL; i++) {
                const int d = w.lane + 32 * i;
                if (d < HS) {
                    float acc = 0.f;
                    for (int k = 0; k < ATTN_GEN_CHUNK; k++) acc = fmaf(pw[k], sV[k * LDK + d], acc);
                    o[i] += acc;
                }
            }
            __syncwarp();
        }
        if (live) {
            floatX* orow = out + ((size_t)w.b * T + w.row) * C + w.h * HS;
            unsigned int am = 0;
            #pragma unroll
            for (int i = 0; i < DPL; i++)
                if (w.lane + 32 * i < HS) am = max(am, attn_gen_store(orow + w.lane + 32 * i, o[i]));
            if (amax) warp_amax_accumulate(amax, am);  // (live is warp-uniform: one warp per row)
        }
    } else {
        if (live) {
            floatX* orow = out + ((size_t)w.b * T + w.row) * C + w.h * HS;
            unsigned int am = 0;
            #pragma unroll
            for (int i = 0; i < DPL; i++)
                if (w.lane + 32 * i < HS) am = max(am, attn_gen_store(orow + w.lane + 32 * i, o[i] / l));
            if (amax) warp_amax_accumulate(amax, am);
            if (w.lane == 0) lse[(size_t)w.bh * T + w.row] = m + logf(l);
        }
    }
}

template <int DPL>
__global__ void __launch_bounds__(ATTN_GEN_ROWS * 32)
attn_bwd_dq_generic_kernel(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv, const floatX* out,
                           const float* lse, int T, int NH, int HS, float scale, unsigned int* amax) {
    extern __shared__ float gsm[];
    const int LDK = HS + 1;
    float* sK = gsm;
    float* sV = sK + ATTN_GEN_CHUNK * LDK;
    float* sq = sV + ATTN_GEN_CHUNK * LDK;   // ROWS x HS
    float* sdo = sq + ATTN_GEN_ROWS * HS;    // ROWS x HS
    float* sds = sdo + ATTN_GEN_ROWS * HS;   // ROWS x CHUNK
    const int C = NH * HS, C3 = 3 * C;
    const AttnGenRow w = attn_gen_row(NH);
    const bool live = w.row < T;
    const floatX* base = qkv + (size_t)w.b * T * C3 + w.h * HS;
    float* q = sq + w.warp * HS;
    float* dov = sdo + w.warp * HS;
    float* dsw = sds + w.warp * ATTN_GEN_CHUNK;

    float D = 0.f, lse_r = 0.f;
    if (live) {
        const floatX* dorow = dout + ((size_t)w.b * T + w.row) * C + w.h * HS;
        const floatX* orow = out + ((size_t)w.b * T + w.row) * C + w.h * HS;
        float part = 0.f;
        for (int d = w.lane; d < HS; d += 32) {
            q[d] = (float)base[(size_t)w.row * C3 + d];
            dov[d] = (float)dorow[d];
            part = fmaf(dov[d], (float)orow[d], part);
        }
        D = warp_reduce_sum(part);
        if (w.lane == 0) Dbuf[(size_t)w.bh * T + w.row] = D;
        lse_r = lse[(size_t)w.bh * T + w.row];
    }
    float dq[DPL];
    #pragma unroll
    for (int i = 0; i < DPL; i++) dq[i] = 0.f;
    const int last = min(w.r0 + ATTN_GEN_ROWS, T) - 1;
    for (int c0 = 0; c0 <= last; c0 += ATTN_GEN_CHUNK) {
        __syncthreads();
        attn_gen_load2(sK, sV, base, C3, C, 2 * C, c0, T, HS);
        __syncthreads();
        if (!live || c0 > w.row) continue;
        const int key = c0 + w.lane;
        float ds = 0.f;
        if (key <= w.row) {
            float dot = 0.f, dp = 0.f;
            for (int d = 0; d < HS; d++) {
                dot = fmaf(q[d], sK[w.lane * LDK + d], dot);
                dp = fmaf(dov[d], sV[w.lane * LDK + d], dp);
            }
            const float p = attn_gen_prob_from_lse(dot, scale, lse_r);
            ds = p * (dp - D);
        }
        dsw[w.lane] = ds;
        __syncwarp();
        #pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = w.lane + 32 * i;
            if (d < HS)
                for (int k = 0; k < ATTN_GEN_CHUNK; k++) dq[i] = fmaf(dsw[k], sK[k * LDK + d], dq[i]);
        }
        __syncwarp();
    }
    if (live) {
        floatX* dqrow = dqkv + ((size_t)w.b * T + w.row) * C3 + w.h * HS;
        unsigned int am = 0;
        #pragma unroll
        for (int i = 0; i < DPL; i++)
            if (w.lane + 32 * i < HS) am = max(am, attn_gen_store(dqrow + w.lane + 32 * i, dq[i] * scale));
        if (amax) warp_amax_accumulate(amax, am);
    }
}

template <int DPL>
__global__ void __launch_bounds__(ATTN_GEN_ROWS * 32)
attn_bwd_dkv_generic_kernel(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* Dbuf,
                            int T, int NH, int HS, float scale, unsigned int* amax) {
    extern __shared__ float gsm[];
    const int LDK = HS + 1;
    float* sQ = gsm;                               // CHUNK x LDK
    float* sdO = sQ + ATTN_GEN_CHUNK * LDK;        // CHUNK x LDK
    float* sl = sdO + ATTN_GEN_CHUNK * LDK;        // CHUNK
    float* sDD = sl + ATTN_GEN_CHUNK;              // CHUNK
    float* sk = sDD + ATTN_GEN_CHUNK;              // ROWS x HS
    float* sv = sk + ATTN_GEN_ROWS * HS;           // ROWS x HS
    float* sp = sv + ATTN_GEN_ROWS * HS;           // ROWS x CHUNK
    float* sds = sp + ATTN_GEN_ROWS * ATTN_GEN_CHUNK;  // ROWS x CHUNK
    const int C = NH * HS, C3 = 3 * C;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int k0 = blockIdx.x * ATTN_GEN_ROWS, key = k0 + warp;
    const bool live = key < T;
    const floatX* base = qkv + (size_t)b * T * C3 + h * HS;
    const floatX* dobase = dout + (size_t)b * T * C + h * HS;
    float* kk = sk + warp * HS;
    float* vv = sv + warp * HS;
    float* pw = sp + warp * ATTN_GEN_CHUNK;
    float* dsw = sds + warp * ATTN_GEN_CHUNK;
    if (live)
        for (int d = lane; d < HS; d += 32) {
            kk[d] = (float)base[(size_t)key * C3 + C + d];
            vv[d] = (float)base[(size_t)key * C3 + 2 * C + d];
        }
    float dk[DPL], dv[DPL];
    #pragma unroll
    for (int i = 0; i < DPL; i++) dk[i] = dv[i] = 0.f;
    for (int c0 = (k0 / ATTN_GEN_CHUNK) * ATTN_GEN_CHUNK; c0 < T; c0 += ATTN_GEN_CHUNK) {
        __syncthreads();
        // Q rows from qkv (stride 3C), dO rows from dout (stride C): two separate loads.
        for (int idx = threadIdx.x; idx < ATTN_GEN_CHUNK * HS; idx += blockDim.x) {
            const int r = idx / HS, d = idx % HS, q = c0 + r;
            sQ[r * LDK + d] = q < T ? (float)base[(size_t)q * C3 + d] : 0.f;
            sdO[r * LDK + d] = q < T ? (float)dobase[(size_t)q * C + d] : 0.f;
        }
        for (int r = threadIdx.x; r < ATTN_GEN_CHUNK; r += blockDim.x) {
            const int q = c0 + r;
            sl[r] = q < T ? lse[(size_t)bh * T + q] : 0.f;
            sDD[r] = q < T ? Dbuf[(size_t)bh * T + q] : 0.f;
        }
        __syncthreads();
        if (!live || c0 + ATTN_GEN_CHUNK - 1 < key) continue;
        const int q = c0 + lane;
        float p = 0.f, ds = 0.f;
        if (q >= key && q < T) {
            float dot = 0.f, dp = 0.f;
            for (int d = 0; d < HS; d++) {
                dot = fmaf(sQ[lane * LDK + d], kk[d], dot);
                dp = fmaf(sdO[lane * LDK + d], vv[d], dp);
            }
            p = attn_gen_prob_from_lse(dot, scale, sl[lane]);
            ds = p * (dp - sDD[lane]);
        }
        pw[lane] = attn_round_x(p);
        dsw[lane] = ds;
        __syncwarp();
        #pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + 32 * i;
            if (d < HS)
                for (int r = 0; r < ATTN_GEN_CHUNK; r++) {
                    dv[i] = fmaf(pw[r], sdO[r * LDK + d], dv[i]);
                    dk[i] = fmaf(dsw[r], sQ[r * LDK + d], dk[i]);
                }
        }
        __syncwarp();
    }
    if (live) {
        floatX* row = dqkv + ((size_t)b * T + key) * C3 + h * HS;
        unsigned int am = 0;
        #pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + 32 * i;
            if (d < HS) {
                am = max(am, attn_gen_store(row + C + d, dk[i] * scale));
                am = max(am, attn_gen_store(row + 2 * C + d, dv[i]));
            }
        }
        if (amax) warp_amax_accumulate(amax, am);
    }
}

// Calls f(std::integral_constant<int, DPL>) with DPL = ceil(HS/32) in 1..8 (HS <= 256).
template <typename F>
static inline void attn_dispatch_dpl(int HS, F&& f) {
    switch ((HS + 31) / 32) {
        case 1: f(std::integral_constant<int, 1>{}); break;
        case 2: f(std::integral_constant<int, 2>{}); break;
        case 3: f(std::integral_constant<int, 3>{}); break;
        case 4: f(std::integral_constant<int, 4>{}); break;
        case 5: f(std::integral_constant<int, 5>{}); break;
        case 6: f(std::integral_constant<int, 6>{}); break;
        case 7: f(std::integral_constant<int, 7>{}); break;
        case 8: f(std::integral_constant<int, 8>{}); break;
        default:
            fprintf(stderr, "error: attention: head size %d > 256 is not supported\n", HS);
            exit(EXIT_FAILURE);
    }
}

template <bool PL = kAttnProbsFromLse>
static inline void attention_forward_generic(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS,
                                             cudaStream_t stream, unsigned int* amax = nullptr) {
    const size_t smem = (size_t)(2 * ATTN_GEN_CHUNK * (HS + 1) + ATTN_GEN_ROWS * HS + ATTN_GEN_ROWS * ATTN_GEN_CHUNK) * sizeof(float);
    const dim3 grid(ceil_div(T, ATTN_GEN_ROWS), B * NH);
    attn_dispatch_dpl(HS, [&](auto dpl) {
        auto kernel = attn_fwd_generic_kernel<decltype(dpl)::value, PL>;
        attn_set_smem(kernel, smem);
        kernel<<<grid, ATTN_GEN_ROWS * 32, smem, stream>>>(out, lse, qkv, T, NH, HS, 1.0f / sqrtf((float)HS), amax);
        cudaCheckLaunch();
    });
}

static inline void attention_backward_generic(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv,
                                              const floatX* out, const float* lse, int B, int T, int NH, int HS,
                                              cudaStream_t stream, unsigned int* amax = nullptr) {
    const float scale = 1.0f / sqrtf((float)HS);
    const dim3 grid(ceil_div(T, ATTN_GEN_ROWS), B * NH);
    const size_t smem_dq = (size_t)(2 * ATTN_GEN_CHUNK * (HS + 1) + 2 * ATTN_GEN_ROWS * HS + ATTN_GEN_ROWS * ATTN_GEN_CHUNK) * sizeof(float);
    const size_t smem_dkv = (size_t)(2 * ATTN_GEN_CHUNK * (HS + 1) + 2 * ATTN_GEN_CHUNK + 2 * ATTN_GEN_ROWS * HS +
                                     2 * ATTN_GEN_ROWS * ATTN_GEN_CHUNK) * sizeof(float);
    attn_dispatch_dpl(HS, [&](auto dpl) {
        auto kdq = attn_bwd_dq_generic_kernel<decltype(dpl)::value>;
        attn_set_smem(kdq, smem_dq);
        kdq<<<grid, ATTN_GEN_ROWS * 32, smem_dq, stream>>>(dqkv, Dbuf, dout, qkv, out, lse, T, NH, HS, scale, amax);
        cudaCheckLaunch();
        auto kdkv = attn_bwd_dkv_generic_kernel<decltype(dpl)::value>;
        attn_set_smem(kdkv, smem_dkv);
        kdkv<<<grid, ATTN_GEN_ROWS * 32, smem_dkv, stream>>>(dqkv, dout, qkv, lse, Dbuf, T, NH, HS, scale, amax);
        cudaCheckLaunch();
    });
}
