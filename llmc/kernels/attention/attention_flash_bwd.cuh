// attention_flash_bwd.cuh - the tensor-core flash-attention backward kernels (bf16 / fp16, HS 64 or
// 128): part 1 over query tiles (D and dQ), part 2 over key tiles (dK and dV), each with its amax and
// TensorCast (TC) instantiations, and their launchers. Two kernels instead of atomics keep the
// gradients bit-deterministic (attention.cuh).
//
// Two schedules (attention_backward picks by whether the caller gives a dS workspace):
//   recompute  part 1 computes D and dQ, recomputing S, the hooks / casts, P^, dP and dS itself; then part 2.
//   dS handed  D alone (attn_bwd_d_kernel), then part 2, which also stores the dS it computes for dK (one 16 x 16
//              bf16 A fragment per 16 queries x 16 keys at or below the diagonal, transposed in registers by
//              movmatrix), then dQ = scale sum_j dS_j K_j from those fragments (attn_bwd_dq_ds_kernel): no S, no
//              exp, no casts, no dP in the dQ kernel.
// Both give the same dQ bit for bit: part 2's dS^T = P^T (dP^T - D) is part 1's dS = P^ (dP - D) element for
// element (the same fp32 dot products out of the same mma with the operands swapped, the same expressions; the
// probe and the TC checks of dev/cuda/attention.cu already rely on it for P^), rounded to floatX the same way, and
// the dS K products accumulate in the same key order (tile by tile, 16 keys per mma); dev/cuda/attention.cu
// compares the two schedules' dqkv on every shape and site configuration.
#pragma once

#include <stdint.h>
#include <math.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/attention/attention_tile.cuh"
#include "llmc/kernels/attention/attention_tcast_cast.cuh"

// ------------------------------------------------------------------------------------------------
// D_row = sum_d dO[row, d] O[row, d] in fp32 (0 for row >= T): 8 lanes per row (lanes 8i..8i+7 of the warp), each
// summing HS/64 chunks of 8 elements with fmaf, then a fixed xor tree over the 8; every one of them returns the sum.
// gdO, gO: the head's first element, row stride C. The one expression of D in both schedules.
template <int HS>
__device__ __forceinline__ float attn_row_d(const floatX* gdO, const floatX* gO, int C, int row, int T, int lane) {
    constexpr int CPR = HS / 8;
    float acc = 0.f;
    if (row < T) {
        #pragma unroll
        for (int i = 0; i < CPR / 8; i++) {
            const int col = ((lane & 7) + 8 * i) * 8;
            const uint4 dv = *reinterpret_cast<const uint4*>(gdO + (size_t)row * C + col);
            const uint4 ov = *reinterpret_cast<const uint4*>(gO + (size_t)row * C + col);
            const uint32_t du[4] = {dv.x, dv.y, dv.z, dv.w}, ou[4] = {ov.x, ov.y, ov.z, ov.w};
            #pragma unroll
            for (int k = 0; k < 4; k++) {
                const float2 a = attn_unpack<floatX>(du[k]), c = attn_unpack<floatX>(ou[k]);
                acc = fmaf(a.x, c.x, acc);
                acc = fmaf(a.y, c.y, acc);
            }
        }
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    return acc;
}

// The dS workspace of the dS-handed schedule: per (b, h), per 16-query block qi and 16-key block kj <= qi (above the
// diagonal dS is zero and nothing is stored), one 16 x 16 A fragment of dS (rows queries, columns keys, as
// mma.m16n8k16 takes its A operand): 32 lanes x 16 bytes, lane l's four registers; fragments in the order
// (b h, qi, kj). n16 = ceil(T / 16) blocks a head.
__host__ __device__ __forceinline__ size_t attn_ds_frags(int T) {
    const size_t n16 = ((size_t)T + 15) / 16;
    return n16 * (n16 + 1) / 2;
}
__host__ __device__ __forceinline__ size_t attn_ds_frag(int qi, int kj) { return (size_t)qi * (qi + 1) / 2 + kj; }
constexpr size_t kAttnDsFragBytes = 32 * sizeof(uint4);
// Bytes of a (B, T, NH) call's dS workspace: B NH attn_ds_frags(T) fragments.
static inline size_t attn_ds_workspace_bytes(int B, int T, int NH) { return (size_t)B * NH * attn_ds_frags(T) * kAttnDsFragBytes; }

// D only (the dS-handed schedule runs it before the dK/dV kernel, which reads D): Dbuf (B, NH, T) fp32 <- D of
// every row, as attn_row_d. Block = 8 warps, 4 rows a warp.
template <int HS>
__global__ void __launch_bounds__(256) attn_bwd_d_kernel(float* __restrict__ Dbuf, const floatX* __restrict__ dout,
                                                         const floatX* __restrict__ out, int T, int NH) {
    const int C = NH * HS, bh = blockIdx.y, b = bh / NH, h = bh % NH, lane = threadIdx.x % 32;
    const int row = blockIdx.x * 32 + (threadIdx.x / 32) * 4 + (lane >> 3);
    const float d = attn_row_d<HS>(dout + (size_t)b * T * C + h * HS, out + (size_t)b * T * C + h * HS, C, row, T, lane);
    if ((lane & 7) == 0 && row < T) Dbuf[(size_t)bh * T + row] = d;
}

// ------------------------------------------------------------------------------------------------
// Tensor-core backward, part 1: D and dQ. CTA = one (b, h) and BR = 16*WM*NW query rows; warp w owns
// 16*WM rows and keeps Q and dO fragments plus the dQ accumulator in registers while K/V tiles
// stream through double-buffered shared memory (same schedule as the forward). D = rowsum(dO * O)
// is computed here first and written to the scratch buffer for part 2.

template <int HS, int WM, int NW, int BC, int MINB = 1>
struct AttnBwdDqTC {
    static constexpr int NT = NW * 32, BR = 16 * WM * NW, LDS = HS + 8;
    static constexpr size_t smem_bytes = (size_t)(2 * BR + 4 * BC) * LDS * sizeof(floatX) + BR * sizeof(float);
    // TC instantiation: each warp's cast tile (AttnTcTileQ<WM>) after sDrow
    static constexpr size_t tc_smem_bytes = smem_bytes + (size_t)NW * AttnTcTileQ<WM>::words * sizeof(float);
};

// TC: the attention-site casts (P^ and s^ recomputed as in the forward, with the group scales the forward kept,
// tc.scales; AMAX ignored, run-time amax; each warp's cast tile, AttnTcTileQ, follows sDrow in the dynamic shared
// memory). STAGED (dev/cuda/attention.cu only): every tile through the staged path, which finds every group scale
// itself: the recomputing backward the kept scales are checked against.
template <int HS, int WM, int NW, int BC, int MINB, bool AMAX = false, bool TC = false, bool STAGED = false>
__global__ void __launch_bounds__(NW * 32, MINB)
attn_bwd_dq_tc_kernel(floatX* __restrict__ dqkv, float* __restrict__ Dbuf, const floatX* __restrict__ dout,
                      const floatX* __restrict__ qkv, const floatX* __restrict__ out,
                      const float* __restrict__ lse, int T, int NH, float scale, unsigned int* __restrict__ amax,
                      AttnTcastArgs tc) {
    constexpr int NT = NW * 32, BR = 16 * WM * NW, LDS = HS + 8;
    constexpr int KS = HS / 16, NS = BC / 8, NO = HS / 8;
    static_assert(HS % 64 == 0 && BC % 16 == 0, "HS must be a multiple of 64, BC of 16");
    static_assert(!TC || BC == 64, "TC: the cast tiles hold key tiles of 64 keys (no casting group crosses one)");

    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sQ = reinterpret_cast<floatX*>(attn_smem);  // BR rows; reused for dQ staging
    floatX* sdO = sQ + BR * LDS;                         // BR rows
    floatX* sK = sdO + BR * LDS;                         // 2 x BC rows
    floatX* sV = sK + 2 * BC * LDS;                      // 2 x BC rows
    float* sDrow = reinterpret_cast<float*>(sV + 2 * BC * LDS);  // BR values of D

    const int C = NH * HS, C3 = 3 * C;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;  // longest tiles first, as in the forward
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tq = lane & 3;
    const int wrow = warp * 16 * WM, wr0 = q0 + wrow, wr1 = wr0 + 16 * WM - 1;
    const bool live = wr0 < T;
    float* stage = TC ? sDrow + BR + warp * AttnTcTileQ<WM>::words : nullptr;  // TC: this warp's cast tile
    const uint64_t rbase = (uint64_t)bh * (uint64_t)T;

    const floatX* gQ = qkv + (size_t)b * T * C3 + h * HS;
    const floatX* gK = gQ + C;
    const floatX* gV = gQ + 2 * C;
    const floatX* gdO = dout + (size_t)b * T * C + h * HS;
    const floatX* gO = out + (size_t)b * T * C + h * HS;
    const int n_kv = (min(q0 + BR, T) + BC - 1) / BC;

    attn_load_tile<HS, BR, NT>(sQ, gQ, C3, q0, T);
    attn_load_tile<HS, BR, NT>(sdO, gdO, C, q0, T);
    attn_load_tile<HS, BC, NT>(sK, gK, C3, 0, T);
    attn_load_tile<HS, BC, NT>(sV, gV, C3, 0, T);
    attn_cp_async_commit();

    // D for this warp's rows, straight from global memory while the tiles are in flight: 8 lanes per
    // row, each summing CPR/8 chunks of 8 elements, then a fixed xor-tree over the 8 lanes.
    float Dr[WM][2], lse2[WM][2];  // D and lse*log2(e) of rows g and g+8 of each 16-row tile
    if (live) {
        #pragma unroll
        for (int pass = 0; pass < WM * 4; pass++) {
            const int r = pass * 4 + (lane >> 3), row = wr0 + r;
            const float acc = attn_row_d<HS>(gdO, gO, C, row, T, lane);
            if ((lane & 7) == 0) {
                sDrow[wrow + r] = acc;
                if (row < T) Dbuf[(size_t)bh * T + row] = acc;
            }
        }
        __syncwarp();
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int r = mi * 16 + g + 8 * hh, row = wr0 + r;
                Dr[mi][hh] = sDrow[wrow + r];
                lse2[mi][hh] = row < T ? lse[(size_t)bh * T + row] * ATTN_LOG2E : 0.f;
            }
    }

    uint32_t qf[WM][KS][4], dof[WM][KS][4];
    float dq[WM][NO][4];
    attn_frag_zero(dq);
    // TC: the lse * log2(e) of the query row this lane casts (attn_tc_cast_q).
    const float lse2v = TC ? attn_tc_row_value<WM>(lse2, lane % AttnTcTileQ<WM>::NI) : 0.f;

    for (int j = 0; j < n_kv; j++) {
        const int buf = attn_kv_next<HS, BC, NT, true>(sK, sV, gK, gV, C3, j, n_kv, T);
        const int k0 = j * BC;
        if (live && k0 <= wr1) {
            if (j == 0) {
                attn_load_a<WM, KS, LDS>(qf, attn_smem_addr(sQ + wrow * LDS), lane);
                attn_load_a<WM, KS, LDS>(dof, attn_smem_addr(sdO + wrow * LDS), lane);
            }
            uint32_t kb[WM] = {};  // TC: the group scales the forward kept, both sites (loaded ahead of the MMAs)
            if constexpr (TC && !STAGED) attn_tc_kept_load_q<true>(kb, tc, rbase, T, wr0, k0, lane);
            const uint32_t sKa = attn_smem_addr(sK + buf * BC * LDS);
            float s[WM][NS][4], dp[WM][NS][4];
            attn_frag_zero(s);
            attn_frag_zero(dp);
            attn_mma_abt<WM, NS, KS, LDS>(s, qf, sKa, lane);                                  // S  = Q K^T
            attn_mma_abt<WM, NS, KS, LDS>(dp, dof, attn_smem_addr(sV + buf * BC * LDS), lane); // dP = dO V^T

            if constexpr (TC) {  // s <- P^, then dS = P^ (dP - D)
                attn_tc_step_q<false, ATTN_TC_BWD, STAGED>(s, stage, scale, wr0, k0, T, lse2, lse2v, tc, rbase, lane, -1, kb);
                attn_tc_ds(s, dp, Dr);
            } else if (k0 + BC - 1 > wr0) {
                attn_dq_ds<true, attn_scale_pow2<HS>()>(s, dp, lse2, Dr, scale, k0 + 2 * tq, wr0 + g);
            } else {
                attn_dq_ds<false, attn_scale_pow2<HS>()>(s, dp, lse2, Dr, scale, k0 + 2 * tq, wr0 + g);
            }
            uint32_t dsa[WM][BC / 16][4];
            attn_c_to_a<WM, NS>(dsa, s);
            attn_mma_ab<WM, NO, BC / 16, LDS>(dq, dsa, sKa, lane);  // dQ += dS K
        }
        __syncthreads();  // everyone is done with buffer `buf` before it is refilled
    }

    // dq holds dQ / unit (attn_dq_ds; the TC kernels' unit is 1)
    if (live) attn_store_tile<WM, HS, AMAX, TC>(sQ + wrow * LDS, dq, scale * boundary_unit(), dqkv + (size_t)b * T * C3 + h * HS, C3, wr0, T, lane, amax);
}

// ------------------------------------------------------------------------------------------------
// Tensor-core backward, dQ of the dS-handed schedule: dQ = scale sum_j dS_j K_j from the fragments the dK/dV kernel
// stored (attn_ds_frags). CTA = one (b, h) and BR = 16*WM*NW query rows as in part 1; K tiles of BC keys stream
// through double-buffered shared memory, each warp loads its dS fragments of a tile from global memory (16 bytes a
// lane, coalesced, issued before the tile's barrier) and blocks above the diagonal enter as zeros. No hooks or casts:
// dS holds them (and, in SF16, dS / unit: the store multiplies by scale * boundary_unit() as part 1's).
// PF: the loads of tile j+1's fragments are issued before tile j's barrier and product (a second register set), so
// that the dS stream, the kernel's only HBM traffic of size (0.8 GB at the d12 shape), keeps a tile in flight; the
// same loads and products, the same bits.

template <int HS, int WM, int NW, int BC, int MINB = 1, bool PF = false>
struct AttnBwdDqDs {
    static constexpr int NT = NW * 32, BR = 16 * WM * NW, LDS = HS + 8;
    static constexpr size_t smem_bytes = (size_t)(BR + 2 * BC) * LDS * sizeof(floatX);
};

template <int HS, int WM, int NW, int BC, int MINB, bool PF, bool AMAX>
__global__ void __launch_bounds__(NW * 32, MINB)
attn_bwd_dq_ds_kernel(floatX* __restrict__ dqkv, const uint4* __restrict__ ds, const floatX* __restrict__ qkv, int T, int NH,
                      float scale, unsigned int* __restrict__ amax) {
    constexpr int NT = NW * 32, BR = 16 * WM * NW, LDS = HS + 8, NO = HS / 8, KB = BC / 16;
    static_assert(HS % 64 == 0 && BC % 16 == 0, "HS must be a multiple of 64, BC of 16");

    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sO = reinterpret_cast<floatX*>(attn_smem);  // BR rows: the staging of the dQ store
    floatX* sK = sO + BR * LDS;                          // 2 x BC rows

    const int C = NH * HS, C3 = 3 * C;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;  // longest tiles first, as in part 1
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wrow = warp * 16 * WM, wr0 = q0 + wrow, wr1 = wr0 + 16 * WM - 1;
    const bool live = wr0 < T;
    const int n16 = (T + 15) / 16;
    const floatX* gK = qkv + (size_t)b * T * C3 + C + h * HS;
    const uint4* gds = ds + (size_t)bh * attn_ds_frags(T) * 32 + lane;
    const int n_kv = (min(q0 + BR, T) + BC - 1) / BC;

    attn_load_tile<HS, BC, NT>(sK, gK, C3, 0, T);
    attn_cp_async_commit();
    float dq[WM][NO][4];
    attn_frag_zero(dq);
    // this warp's dS fragments of key tile j (zeros above the diagonal and past the last row)
    auto load_ds = [&](uint32_t (&d)[WM][KB][4], int j) {
        const int k0 = j * BC;
        const bool work = live && k0 <= wr1;
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int kk = 0; kk < KB; kk++) {
                const int qi = wr0 / 16 + mi, kj = k0 / 16 + kk;
                uint4 f = make_uint4(0u, 0u, 0u, 0u);
                if (work && kj <= qi && qi < n16) f = __ldcs(gds + attn_ds_frag(qi, kj) * 32);
                d[mi][kk][0] = f.x, d[mi][kk][1] = f.y, d[mi][kk][2] = f.z, d[mi][kk][3] = f.w;
            }
    };
    uint32_t dsn[WM][KB][4];  // PF: the next tile's fragments, in flight
    if constexpr (PF) load_ds(dsn, 0);
    for (int j = 0; j < n_kv; j++) {
        const bool work = live && j * BC <= wr1;
        uint32_t dsa[WM][KB][4];
        if constexpr (PF) {
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int kk = 0; kk < KB; kk++)
                    #pragma unroll
                    for (int r = 0; r < 4; r++) dsa[mi][kk][r] = dsn[mi][kk][r];
            if (j + 1 < n_kv) load_ds(dsn, j + 1);
        } else {
            load_ds(dsa, j);
        }
        const int buf = attn_kv_next<HS, BC, NT, false>(sK, nullptr, gK, nullptr, C3, j, n_kv, T);
        if (work) attn_mma_ab<WM, NO, KB, LDS>(dq, dsa, attn_smem_addr(sK + buf * BC * LDS), lane);  // dQ += dS K
        __syncthreads();  // everyone is done with buffer `buf` before it is refilled
    }
    // dq holds dQ / unit, as part 1's
    if (live)
        attn_store_tile<WM, HS, AMAX, false>(sO + wrow * LDS, dq, scale * boundary_unit(), dqkv + (size_t)b * T * C3 + h * HS, C3, wr0,
                                             T, lane, amax);
}

// ------------------------------------------------------------------------------------------------
// Tensor-core backward, part 2: dK and dV. CTA = one (b, h) and BK = 16*WM*NW keys; warp w owns
// 16*WM keys and computes everything in the transposed orientation (keys are the M dimension):
//   S^T = K Q^T, P^T = exp(S^T - lse), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q
// so dK and dV accumulate in registers with no cross-warp reduction. Query tiles of BR rows (with
// their lse and D) stream through double-buffered shared memory, starting at the diagonal. With
// KV_REGS the warp's K and V fragments stay in registers for the whole loop; otherwise they are
// re-read from shared memory each tile (fewer registers, more shared-memory traffic).

template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB = 1>
struct AttnBwdDkvTC {
    static constexpr int NT = NW * 32, BK = 16 * WM * NW, LDS = HS + 8;
    static constexpr size_t smem_bytes =
        (size_t)(2 * BK + 4 * BR) * LDS * sizeof(floatX) + 4 * BR * sizeof(float);
    // TC instantiation: the CTA's cast tile (AttnTcTileK) after sD, then 2 x the kept group scales of a query tile
    static constexpr size_t tc_smem_bytes = smem_bytes + (size_t)AttnTcTileK::words * sizeof(float) + 2 * ATTN_TC_KEPT_K;
};

// Stores the dS fragments of the workspace (attn_ds_frags) that a warp's dS^T A fragments pa hold: 16*WM keys from
// key block kj0 (rows) x the query tile from query block qi0 (BR / 16 k-steps). pa[mi][kk] holds the 8x8 blocks
// (keys 0-7 | 8-15) x (queries 0-7 | 8-15) as registers 0: (0-7, 0-7), 1: (8-15, 0-7), 2: (0-7, 8-15), 3: (8-15, 8-15);
// dS's A fragment of query block qi0 + kk and key block kj0 + mi is their transposes in the order 0, 2, 1, 3. Only
// blocks with kj <= qi < n16 are stored (warp-uniform test; movmatrix needs the whole warp). ds: the head's first
// fragment.
template <int WM, int BR>
__device__ __forceinline__ void attn_ds_store(uint4* __restrict__ ds, const uint32_t (&pa)[WM][BR / 16][4], int kj0, int qi0,
                                              int n16, int lane) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int kk = 0; kk < BR / 16; kk++) {
            const int kj = kj0 + mi, qi = qi0 + kk;
            if (kj <= qi && qi < n16) {
                const uint4 f = make_uint4(attn_movmatrix_trans(pa[mi][kk][0]), attn_movmatrix_trans(pa[mi][kk][2]),
                                           attn_movmatrix_trans(pa[mi][kk][1]), attn_movmatrix_trans(pa[mi][kk][3]));
                __stcs(ds + attn_ds_frag(qi, kj) * 32 + lane, f);  // (streaming: read once, by the dQ kernel)
            }
        }
}

// The dK/dV kernel's step once P^T (key-major, s) of a query tile is known: dV += P^T dO,
// dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q (s is overwritten with dS^T). vf: V's A fragments
// (reloaded from sVa unless KV_REGS); sQa, sdOa: the tile's Q and dO in shared memory; Dq: its D values.
// ds (NULL: not stored): the head's dS workspace, where the tile's dS fragments go (attn_ds_store; key block kj0,
// query block qi0, n16 blocks a head).
template <int WM, int NS, int NO, int KS, int BR, int LDS, bool KV_REGS>
__device__ __forceinline__ void attn_dkv_accumulate(float (&dv)[WM][NO][4], float (&dk)[WM][NO][4], float (&s)[WM][NS][4],
                                                    uint32_t (&vf)[WM][KS][4], uint32_t sVa, uint32_t sQa, uint32_t sdOa,
                                                    const float* Dq, int tq, int lane, uint4* ds, int kj0, int qi0, int n16) {
    uint32_t pa[WM][BR / 16][4];
    attn_c_to_a<WM, NS>(pa, s);
    attn_mma_ab<WM, NO, BR / 16, LDS>(dv, pa, sdOa, lane);  // dV += P^T dO
    float dp[WM][NS][4];
    attn_frag_zero(dp);
    if (!KV_REGS) attn_load_a<WM, KS, LDS>(vf, sVa, lane);
    attn_mma_abt<WM, NS, KS, LDS>(dp, vf, sdOa, lane);  // dP^T = V dO^T
    attn_frag_each_col<WM, NS, false>(Dq, tq, [&](int mi, int n, int r, float d) { s[mi][n][r] *= dp[mi][n][r] - d; });  // dS^T
    attn_c_to_a<WM, NS>(pa, s);
    if (ds) attn_ds_store<WM, BR>(ds, pa, kj0, qi0, n16, lane);
    attn_mma_ab<WM, NO, BR / 16, LDS>(dk, pa, sQa, lane);  // dK += dS^T Q
}

// TC: the attention-site casts along the keys, i.e. down the rows of S^T, through one cast tile per CTA
// (AttnTcTileK, after sD in the dynamic shared memory): every warp runs every query tile (warps with no
// visible key contribute zeros to the groups). The group scales the forward kept (tc.scales) stream in with each
// query tile's lse and D (attn_tc_kept_load_k, double-buffered after the cast tile). AMAX ignored (run-time amax).
// STAGED (dev/cuda/attention.cu only): every tile through the staged path (see attn_bwd_dq_tc_kernel).
// TC with tc.pflag set (attention_backward_dkv_tc_cast with codes): where the flag says the probabilities' codes are
// valid (*tc.pflag == 0) every CTA returns at once: attn_bwd_dkv_pk_kernel, launched beside this one, does the work.
template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB, bool AMAX = false, bool TC = false, bool STAGED = false>
__global__ void __launch_bounds__(NW * 32, MINB)
attn_bwd_dkv_tc_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout, const floatX* __restrict__ qkv,
                       const float* __restrict__ lse, const float* __restrict__ Dbuf, int T, int NH, float scale,
                       unsigned int* __restrict__ amax, AttnTcastArgs tc, uint4* __restrict__ ds) {
    constexpr int NT = NW * 32, BK = 16 * WM * NW, LDS = HS + 8;
    constexpr int KS = HS / 16, NS = BR / 8, NO = HS / 8;
    static_assert(HS % 16 == 0 && BR % 16 == 0, "tile sizes must be multiples of 16");
    static_assert(!TC || (BK == AttnTcTileK::NK && BR == AttnTcTileK::NI && NT == AttnTcTileK::NTHR),
                  "TC: the cast tile holds 128 keys x 64 queries, cast by 256 threads");

    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sK = reinterpret_cast<floatX*>(attn_smem);  // BK rows; reused for dK staging
    floatX* sV = sK + BK * LDS;                          // BK rows; reused for dV staging
    floatX* sQ = sV + BK * LDS;                          // 2 x BR rows
    floatX* sdO = sQ + 2 * BR * LDS;                     // 2 x BR rows
    float* sL = reinterpret_cast<float*>(sdO + 2 * BR * LDS);  // 2 x BR lse values
    float* sD = sL + 2 * BR;                                   // 2 x BR D values
    float* tc_tile = TC ? sD + 2 * BR : nullptr;  // TC: the CTA's cast tile (AttnTcTileK)
    uint8_t* sKept = TC ? reinterpret_cast<uint8_t*>(tc_tile + AttnTcTileK::words) : nullptr;  // TC: 2 x ATTN_TC_KEPT_K bytes
    if constexpr (TC && !STAGED)
        if (tc.pflag && *tc.pflag == 0u) return;  // the codes are valid: the codes' kernel does the work (the same for the whole grid)

    const int C = NH * HS, C3 = 3 * C;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.x * BK;  // earliest keys see the most queries: issued first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tq = lane & 3;
    const int wrow = warp * 16 * WM, kw0 = k0 + wrow, kw1 = kw0 + 16 * WM - 1;
    const bool live = kw0 < T;

    const floatX* gQ = qkv + (size_t)b * T * C3 + h * HS;
    const floatX* gK = gQ + C;
    const floatX* gV = gQ + 2 * C;
    const floatX* gdO = dout + (size_t)b * T * C + h * HS;
    const float* gL = lse + (size_t)bh * T;
    const float* gD = Dbuf + (size_t)bh * T;
    const int i_begin = k0 / BR, i_end = (T + BR - 1) / BR;
    uint4* gds = ds ? ds + (size_t)bh * attn_ds_frags(T) * 32 : nullptr;  // this head's dS fragments, if handed on

    attn_load_tile<HS, BK, NT>(sK, gK, C3, k0, T);
    attn_load_tile<HS, BK, NT>(sV, gV, C3, k0, T);
    attn_load_tile<HS, BR, NT>(sQ, gQ, C3, i_begin * BR, T);
    attn_load_tile<HS, BR, NT>(sdO, gdO, C, i_begin * BR, T);
    attn_load_vec<BR>(sL, gL, i_begin * BR, T);
    attn_load_vec<BR>(sD, gD, i_begin * BR, T);
    if constexpr (TC) attn_tc_kept_load_k(sKept, tc, (uint64_t)bh * (uint64_t)T, T, k0, i_begin * BR);
    attn_cp_async_commit();

    uint32_t kf[WM][KS][4], vf[WM][KS][4];
    float dk[WM][NO][4], dv[WM][NO][4];
    attn_frag_zero(dk);
    attn_frag_zero(dv);
    const uint32_t sKa = attn_smem_addr(sK + wrow * LDS), sVa = attn_smem_addr(sV + wrow * LDS);

    for (int i = i_begin; i < i_end; i++) {
        const int buf = (i - i_begin) & 1, nb = buf ^ 1;
        if (i + 1 < i_end) {
            attn_load_tile<HS, BR, NT>(sQ + nb * BR * LDS, gQ, C3, (i + 1) * BR, T);
            attn_load_tile<HS, BR, NT>(sdO + nb * BR * LDS, gdO, C, (i + 1) * BR, T);
            attn_load_vec<BR>(sL + nb * BR, gL, (i + 1) * BR, T);
            attn_load_vec<BR>(sD + nb * BR, gD, (i + 1) * BR, T);
            if constexpr (TC) attn_tc_kept_load_k(sKept + nb * ATTN_TC_KEPT_K, tc, (uint64_t)bh * (uint64_t)T, T, k0, (i + 1) * BR);
        }
        attn_cp_async_commit();
        attn_cp_async_wait<1>();
        __syncthreads();

        if (KV_REGS && live && i == i_begin) {
            attn_load_a<WM, KS, LDS>(kf, sKa, lane);
            attn_load_a<WM, KS, LDS>(vf, sVa, lane);
        }
        const int qb = i * BR;
        const bool active = live && qb + BR - 1 >= kw0;  // some query of the tile sees some key of the warp
        if (TC || active) {  // TC: every warp takes part in the cast tile's barriers (inactive ones stage zeros)
            const uint32_t sQa = attn_smem_addr(sQ + buf * BR * LDS), sdOa = attn_smem_addr(sdO + buf * BR * LDS);
            const float* L = sL + buf * BR;
            const float* Dq = sD + buf * BR;

            float s[WM][NS][4];
            attn_frag_zero(s);
            if (active) {
                if (!KV_REGS) attn_load_a<WM, KS, LDS>(kf, sKa, lane);
                attn_mma_abt<WM, NS, KS, LDS>(s, kf, sQa, lane);  // S^T = K Q^T
            }
            if constexpr (TC) {  // s <- P^T
                attn_tc_step_k<STAGED>(s, tc_tile, active, scale, wrow, kw0, qb, k0, T, L, tc, (uint64_t)bh * (uint64_t)T, lane,
                                       sKept + buf * ATTN_TC_KEPT_K);
            } else if (qb < kw1) {  // mask only where some query of the tile precedes some key of the warp
                attn_dkv_p<true, attn_scale_pow2<HS>()>(s, L, scale, qb + 2 * tq, kw0 + g, tq);
            } else {
                attn_dkv_p<false, attn_scale_pow2<HS>()>(s, L, scale, qb + 2 * tq, kw0 + g, tq);
            }
            if (active)
                attn_dkv_accumulate<WM, NS, NO, KS, BR, LDS, KV_REGS>(dv, dk, s, vf, sVa, sQa, sdOa, Dq, tq, lane, gds, kw0 / 16, qb / 16,
                                                                       (T + 15) / 16);
        }
        __syncthreads();
    }

    if (live) {
        floatX* gdqkv = dqkv + (size_t)b * T * C3 + h * HS;
        // dk, dv hold dK / unit and dV / unit (attn_dkv_p; the TC kernels' unit is 1)
        attn_store_tile<WM, HS, AMAX, TC>(sK + wrow * LDS, dk, scale * boundary_unit(), gdqkv + C, C3, kw0, T, lane, amax);
        attn_store_tile<WM, HS, AMAX, TC>(sV + wrow * LDS, dv, boundary_unit(), gdqkv + 2 * C, C3, kw0, T, lane, amax);
    }
}

// TC, the probabilities' codes kept (attention_tcast.cuh, "The probabilities the forward keeps") and valid
// (*tc.pflag == 0, else every CTA returns at once: the recomputing TC kernel, launched beside this one, does the work):
// the plain kernel's tiling (warps of 16 WM keys, query tiles of BR; no cast tile) with P^T formed from the codes
// (attn_tc_pk_p: the same r 2^s products as the recomputing kernel's register cast, so the same bits) instead of
// S^T = K Q^T, the two casts and the exp: neither K nor lse is read, no warp votes, and a warp whose keys no query of
// the tile sees skips it. Per query tile the CTA streams Q, dO, D, the probability groups' kept bytes (its BK / 32
// halves x BR queries, attn_tc_kept_load_k) and each warp's codes (attn_tc_pk_load), double-buffered; then
// attn_dkv_accumulate as every dK/dV kernel. A warp's keys lie in one 32-key half (WM <= 2), whose bytes it decodes
// into its 32 float2 of sTab once a tile. ds, amax (run time): as attn_bwd_dkv_tc_kernel.
template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB = 1>
struct AttnBwdDkvPk {
    static constexpr int NT = NW * 32, BK = 16 * WM * NW, LDS = HS + 8;
    static constexpr int KEPT = (BK / 32) * BR;                               // kept bytes of a query tile
    static constexpr int WCODES = WM * (BR / 16) * ATTN_PK_BLOCK_BYTES;       // a warp's codes of a query tile
    static constexpr size_t smem_bytes = (size_t)(2 * BK + 4 * BR) * LDS * sizeof(floatX) + 2 * BR * sizeof(float) +
                                         (size_t)NW * 32 * sizeof(float2) + 2 * (size_t)NW * WCODES + 2 * KEPT;
};

template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB>
__global__ void __launch_bounds__(NW * 32, MINB)
attn_bwd_dkv_pk_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout, const floatX* __restrict__ qkv,
                       const float* __restrict__ Dbuf, int T, int NH, float scale, unsigned int* __restrict__ amax, AttnTcastArgs tc,
                       uint4* __restrict__ ds) {
    using Cfg = AttnBwdDkvPk<HS, WM, NW, BR, KV_REGS, MINB>;
    constexpr int NT = Cfg::NT, BK = Cfg::BK, LDS = Cfg::LDS, KS = HS / 16, NS = BR / 8, NO = HS / 8;
    static_assert(HS % 16 == 0 && BR % 16 == 0 && BR <= 64 && WM <= 2 && BK % 32 == 0,
                  "a warp's keys in one 32-key half, at most 64 queries a tile (attn_tc_pk_p_hw)");
    if (*tc.pflag != 0u) return;  // some probability group went the staged way: the recomputing kernel's call

    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sK = reinterpret_cast<floatX*>(attn_smem);  // BK rows: the dK staging only
    floatX* sV = sK + BK * LDS;                          // BK rows; reused for dV staging
    floatX* sQ = sV + BK * LDS;                          // 2 x BR rows
    floatX* sdO = sQ + 2 * BR * LDS;                     // 2 x BR rows
    float* sD = reinterpret_cast<float*>(sdO + 2 * BR * LDS);            // 2 x BR D values
    float2* sTab = reinterpret_cast<float2*>(sD + 2 * BR);               // NW x 32 decoded 2^s (attn_tc_pk_p)
    uint8_t* sPc = reinterpret_cast<uint8_t*>(sTab + NW * 32);           // 2 x NW x WCODES codes
    uint8_t* sKept = sPc + 2 * NW * Cfg::WCODES;                         // 2 x KEPT kept bytes

    const int C = NH * HS, C3 = 3 * C;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.x * BK;  // earliest keys see the most queries: issued first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, tq = lane & 3;
    const int wrow = warp * 16 * WM, kw0 = k0 + wrow;
    const bool live = kw0 < T;

    const floatX* gQ = qkv + (size_t)b * T * C3 + h * HS;
    const floatX* gV = gQ + 2 * C;
    const floatX* gdO = dout + (size_t)b * T * C + h * HS;
    const float* gD = Dbuf + (size_t)bh * T;
    const int i_begin = k0 / BR, i_end = (T + BR - 1) / BR, n16 = (T + 15) / 16;
    uint4* gds = ds ? ds + (size_t)bh * attn_ds_frags(T) * 32 : nullptr;  // this head's dS fragments, if handed on
    const uint8_t* gpc = tc.pcode + (size_t)bh * attn_pk_blocks(T) * ATTN_PK_BLOCK_BYTES;  // this head's codes
    uint8_t* wpc = sPc + warp * Cfg::WCODES;  // this warp's codes, buffer 0 (buffer 1: + NW WCODES)
    const uint64_t rbase = (uint64_t)bh * (uint64_t)T;

    // one query tile's inputs into buffer nb
    auto load = [&](int nb, int i) {
        attn_load_tile<HS, BR, NT>(sQ + nb * BR * LDS, gQ, C3, i * BR, T);
        attn_load_tile<HS, BR, NT>(sdO + nb * BR * LDS, gdO, C, i * BR, T);
        attn_load_vec<BR>(sD + nb * BR, gD, i * BR, T);
        attn_tc_kept_load_k<BK, BR, ATTN_TC_PROBS>(sKept + nb * Cfg::KEPT, tc, rbase, T, k0, i * BR);
        attn_tc_pk_load<WM, BR>(wpc + nb * NW * Cfg::WCODES, gpc, kw0 / 16, i * BR, n16, lane);
    };
    attn_load_tile<HS, BK, NT>(sV, gV, C3, k0, T);
    load(0, i_begin);
    attn_cp_async_commit();

    uint32_t vf[WM][KS][4];
    float dk[WM][NO][4], dv[WM][NO][4];
    attn_frag_zero(dk);
    attn_frag_zero(dv);
    const uint32_t sVa = attn_smem_addr(sV + wrow * LDS);

    for (int i = i_begin; i < i_end; i++) {
        const int buf = (i - i_begin) & 1;
        if (i + 1 < i_end) load(buf ^ 1, i + 1);
        attn_cp_async_commit();
        attn_cp_async_wait<1>();
        __syncthreads();

        if (KV_REGS && live && i == i_begin) attn_load_a<WM, KS, LDS>(vf, sVa, lane);
        const int qb = i * BR;
        if (live && qb + BR - 1 >= kw0) {  // some query of the tile sees some key of the warp
            float s[WM][NS][4];
            attn_tc_pk_p<WM, NS>(s, wpc + buf * NW * Cfg::WCODES, sKept + buf * Cfg::KEPT + (wrow / 32) * BR, sTab + warp * 32, lane);
            attn_dkv_accumulate<WM, NS, NO, KS, BR, LDS, KV_REGS>(dv, dk, s, vf, sVa, attn_smem_addr(sQ + buf * BR * LDS),
                                                                   attn_smem_addr(sdO + buf * BR * LDS), sD + buf * BR, tq, lane, gds,
                                                                   kw0 / 16, qb / 16, n16);
        }
        __syncthreads();
    }

    if (live) {
        floatX* gdqkv = dqkv + (size_t)b * T * C3 + h * HS;
        // as the TC kernel's store (boundary_unit() is 1 in the TCAST build)
        attn_store_tile<WM, HS, false, true>(sK + wrow * LDS, dk, scale * boundary_unit(), gdqkv + C, C3, kw0, T, lane, amax);
        attn_store_tile<WM, HS, false, true>(sV + wrow * LDS, dv, boundary_unit(), gdqkv + 2 * C, C3, kw0, T, lane, amax);
    }
}

// ------------------------------------------------------------------------------------------------
// Tensor-core launchers, one per kernel and configuration. The default configurations are chosen in
// attention_forward / attention_backward; dev/cuda/attention.cu can time the others (--sweep).

template <int HS, int WM, int NW, int BC, int MINB = 1>
void attention_backward_dq_tc(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv, const floatX* out,
                              const float* lse, int B, int T, int NH, cudaStream_t stream, unsigned int* amax = nullptr) {
    using Cfg = AttnBwdDqTC<HS, WM, NW, BC, MINB>;
    auto kernel = amax ? attn_bwd_dq_tc_kernel<HS, WM, NW, BC, MINB, true> : attn_bwd_dq_tc_kernel<HS, WM, NW, BC, MINB, false>;
    attn_set_smem(kernel, Cfg::smem_bytes);
    const dim3 grid(ceil_div(T, Cfg::BR), B * NH);
    kernel<<<grid, Cfg::NT, Cfg::smem_bytes, stream>>>(dqkv, Dbuf, dout, qkv, out, lse, T, NH, 1.0f / sqrtf((float)HS), amax,
                                                       AttnTcastArgs{});
    cudaCheckLaunch();
}

// ds: NULL, or the dS workspace (B * NH * attn_ds_frags(T) fragments of kAttnDsFragBytes, 16-byte aligned) that
// receives the dS fragments for attention_backward_dq_ds (the dS-handed schedule).
template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB = 1>
void attention_backward_dkv_tc(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                               const float* Dbuf, int B, int T, int NH, cudaStream_t stream, unsigned int* amax = nullptr,
                               uint4* ds = nullptr) {
    using Cfg = AttnBwdDkvTC<HS, WM, NW, BR, KV_REGS, MINB>;
    auto kernel = amax ? attn_bwd_dkv_tc_kernel<HS, WM, NW, BR, KV_REGS, MINB, true>
                       : attn_bwd_dkv_tc_kernel<HS, WM, NW, BR, KV_REGS, MINB, false>;
    attn_set_smem(kernel, Cfg::smem_bytes);
    const dim3 grid(ceil_div(T, Cfg::BK), B * NH);
    kernel<<<grid, Cfg::NT, Cfg::smem_bytes, stream>>>(dqkv, dout, qkv, lse, Dbuf, T, NH, 1.0f / sqrtf((float)HS), amax,
                                                       AttnTcastArgs{}, ds);
    cudaCheckLaunch();
}

// TensorCast launchers: the TC instantiations (see attention_forward_tc_cast). scales: what the forward of the same
// call kept (attention_tcast_scales_bytes(B, T, NH) bytes, read; NULL only where no site keeps them). STAGED: the
// harness's recomputing instantiation (attn_bwd_dq_tc_kernel), which reads no scales.
template <int HS, int WM, int NW, int BC, int MINB, bool STAGED = false>
void attention_backward_dq_tc_cast(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv, const floatX* out,
                                   const float* lse, int B, int T, int NH, cudaStream_t stream, unsigned int* amax, uint64_t seed,
                                   uint8_t* scales) {
    using Cfg = AttnBwdDqTC<HS, WM, NW, BC, MINB>;
    auto kernel = attn_bwd_dq_tc_kernel<HS, WM, NW, BC, MINB, false, true, STAGED>;
    attn_set_smem(kernel, Cfg::tc_smem_bytes);
    const dim3 grid(ceil_div(T, Cfg::BR), B * NH);
    kernel<<<grid, Cfg::NT, Cfg::tc_smem_bytes, stream>>>(dqkv, Dbuf, dout, qkv, out, lse, T, NH, 1.0f / sqrtf((float)HS), amax,
                                                          attn_tc_args(seed, false, scales, B, T, NH));
    cudaCheckLaunch();
}

// codes: where the probabilities' codes are kept (attention_tcast_keeps_p), leave the call to
// attention_backward_dkv_tc_codes when the forward's flag says they are valid (the dispatch launches both); false:
// always recompute P^ (the harness's comparisons and --tc-sweep candidates).
template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB, bool STAGED = false>
void attention_backward_dkv_tc_cast(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* Dbuf,
                                    int B, int T, int NH, cudaStream_t stream, unsigned int* amax, uint64_t seed, uint8_t* scales,
                                    uint4* ds = nullptr, bool codes = false) {
    using Cfg = AttnBwdDkvTC<HS, WM, NW, BR, KV_REGS, MINB>;
    auto kernel = attn_bwd_dkv_tc_kernel<HS, WM, NW, BR, KV_REGS, MINB, false, true, STAGED>;
    attn_set_smem(kernel, Cfg::tc_smem_bytes);
    const dim3 grid(ceil_div(T, Cfg::BK), B * NH);
    AttnTcastArgs a = attn_tc_args(seed, false, scales, B, T, NH);
    if (!codes) a.pflag = nullptr, a.pcode = nullptr;
    kernel<<<grid, Cfg::NT, Cfg::tc_smem_bytes, stream>>>(dqkv, dout, qkv, lse, Dbuf, T, NH, 1.0f / sqrtf((float)HS), amax, a, ds);
    cudaCheckLaunch();
}

// The codes' dK/dV kernel (attn_bwd_dkv_pk_kernel): dK, dV of dqkv (B, T, 3C) from the probabilities' codes and kept
// group scales in scales (what the forward of the same call wrote: attention_tcast_scales_bytes(B, T, NH) bytes), Dbuf
// (B, NH, T) fp32, dout, qkv; ds as attention_backward_dkv_tc. Does nothing where the forward's flag says the codes are
// not valid (then attention_backward_dkv_tc_cast with codes recomputes): the dispatch launches both, in either order.
// Stops with `error:` where the configuration keeps no codes.
template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB>
void attention_backward_dkv_tc_codes(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* Dbuf, int B, int T, int NH,
                                     cudaStream_t stream, unsigned int* amax, uint8_t* scales, uint4* ds = nullptr) {
    using Cfg = AttnBwdDkvPk<HS, WM, NW, BR, KV_REGS, MINB>;
    if (!attention_tcast_keeps_p()) die("attention_backward_dkv_tc_codes: the configuration keeps no probabilities' codes");
    auto kernel = attn_bwd_dkv_pk_kernel<HS, WM, NW, BR, KV_REGS, MINB>;
    attn_set_smem(kernel, Cfg::smem_bytes);
    const dim3 grid(ceil_div(T, Cfg::BK), B * NH);
    kernel<<<grid, Cfg::NT, Cfg::smem_bytes, stream>>>(dqkv, dout, qkv, Dbuf, T, NH, 1.0f / sqrtf((float)HS), amax,
                                                       attn_tc_args(0, false, scales, B, T, NH), ds);
    cudaCheckLaunch();
}

// The dS-handed schedule's other two launchers. attention_backward_d: Dbuf (B, NH, T) fp32 <- rowsum(dO * O)
// (attn_bwd_d_kernel), for the dK/dV kernel that follows. attention_backward_dq_ds: dQ of dqkv (B, T, 3C) <- scale
// dS K from ds as the dK/dV kernel of the same call left it; amax as attention_backward_dq_tc (the dK/dV kernel adds
// dK's and dV's to the same slot).
template <int HS>
void attention_backward_d(float* Dbuf, const floatX* dout, const floatX* out, int B, int T, int NH, cudaStream_t stream) {
    const dim3 grid(ceil_div(T, 32), B * NH);
    attn_bwd_d_kernel<HS><<<grid, 256, 0, stream>>>(Dbuf, dout, out, T, NH);
    cudaCheckLaunch();
}

template <int HS, int WM, int NW, int BC, int MINB = 1, bool PF = false>
void attention_backward_dq_ds(floatX* dqkv, const uint4* ds, const floatX* qkv, int B, int T, int NH, cudaStream_t stream,
                              unsigned int* amax = nullptr) {
    using Cfg = AttnBwdDqDs<HS, WM, NW, BC, MINB, PF>;
    auto kernel = amax ? attn_bwd_dq_ds_kernel<HS, WM, NW, BC, MINB, PF, true> : attn_bwd_dq_ds_kernel<HS, WM, NW, BC, MINB, PF, false>;
    attn_set_smem(kernel, Cfg::smem_bytes);
    const dim3 grid(ceil_div(T, Cfg::BR), B * NH);
    kernel<<<grid, Cfg::NT, Cfg::smem_bytes, stream>>>(dqkv, ds, qkv, T, NH, 1.0f / sqrtf((float)HS), amax);
    cudaCheckLaunch();
}
