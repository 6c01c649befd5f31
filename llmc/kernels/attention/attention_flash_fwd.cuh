// attention_flash_fwd.cuh - the tensor-core flash-attention forward kernel (bf16 / fp16, HS 64 or
// 128): single-pass online softmax or, when the probabilities are hooked or cast, two passes with P
// from the final lse (attention.cuh explains both), in its plain, --q115-stats counting, amax and
// TensorCast (TC) instantiations, and its launchers.
#pragma once

#include <stdint.h>
#include <math.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/kernels/attention/attention_tile.cuh"
#include "llmc/kernels/attention/attention_tcast_cast.cuh"

// ------------------------------------------------------------------------------------------------
// Tensor-core forward. CTA = one (b, h) and BR = 16*WM*NW query rows; warp w owns rows
// [16*WM*w, 16*WM*(w+1)) of the tile and keeps its Q fragments, the O accumulator and the softmax
// statistics in registers. K/V tiles of BC keys are double-buffered in shared memory: tile j+1 is
// in flight while tile j is used. Key tiles entirely above the diagonal are never loaded; within
// the loaded ones a warp skips tiles above its own rows, and only tiles crossing the diagonal pay
// for the mask. PL (kProbsFromLse, see the header comment of attention.cuh): the key loop runs twice, first for the
// row statistics only (K tiles only), then for P^ = boundary(exp(s^ - lse)) and O = P^ V (K and V);
// the Q fragments stay in registers across both. TC with a tile-scaled RNE-family site (attention_tcast_keeps): pass 1
// finds the score groups' scales and keeps them (tc.scales), pass 2 reads them back and finds and keeps the
// probability groups' (attention_tcast_cast.cuh, ATTN_TC_FWD_STATS / ATTN_TC_FWD_OUT): the backward reads both.
// PHASE (PL only): 0 = both passes in this kernel; 1 = pass 1 only (stores lse and returns); 2 = pass 2 only,
// from the lse a PHASE 1 launch stored (attention_forward_tc_split; TC: attention_forward_tc_cast_split). The split lets
// the statistics pass, which holds no O accumulator, no P fragments and no V tiles, run in a configuration of its own
// (fewer registers and, TC, less shared memory: more warps per SM); the values are the same: the same instructions on the
// same operands, and pass 2 reads back the fp32 lse that the fused kernel would have kept (lse2 = lse * log2(e) either
// way) and, TC, the score groups' verdicts pass 1 kept (which it reads back in the fused kernel too).

template <int HS_, int WM, int NW, int BC, int MINB = 1, int PHASE = 0>
struct AttnFwdTC {
    static constexpr int HS = HS_;
    static constexpr int NT = NW * 32, BR = 16 * WM * NW, LDS = HS + 8;
    static constexpr size_t smem_bytes = (size_t)(BR + 4 * BC) * LDS * sizeof(floatX);
    // TC instantiation: each warp's cast tile (AttnTcTileQ<WM>) after the tiles; in PHASE 1, which reads no V, in place
    // of the V buffers
    static constexpr size_t tc_smem_bytes = (size_t)(BR + (PHASE == 1 ? 2 : 4) * BC) * LDS * sizeof(floatX) +
                                            (size_t)NW * AttnTcTileQ<WM>::words * sizeof(float);
};

// TC (TensorCast, see the header comment of attention.cuh): the attention-site casts; CNT then counts --cast-stats
// (tc.stats), AMAX is ignored (the amax output is a run-time choice) and the dynamic shared memory
// holds, after the tiles, each warp's cast tile (AttnTcTileQ, attention_tcast_cast.cuh).
template <int HS, int WM, int NW, int BC, int MINB, int PHASE = 0, bool PL = kAttnProbsFromLse, bool CNT = false,
          bool AMAX = false, bool TC = false>
__global__ void __launch_bounds__(NW * 32, MINB)
attn_fwd_tc_kernel(floatX* __restrict__ out, float* __restrict__ lse, const floatX* __restrict__ qkv,
                   int T, int NH, float scale, unsigned int* __restrict__ amax, AttnTcastArgs tc) {
    constexpr int NT = NW * 32, BR = 16 * WM * NW, LDS = HS + 8;
    constexpr int KS = HS / 16;  // k-steps of Q.K^T
    constexpr int NS = BC / 8;   // n-tiles of S (keys)
    constexpr int NO = HS / 8;   // n-tiles of O (head dims)
    constexpr bool POW2 = attn_scale_pow2<HS>();  // scale = 1 / sqrt(HS) is a power of two (attention_tile.cuh)
    static_assert(HS % 16 == 0 && BC % 16 == 0, "tile sizes must be multiples of 16");
    static_assert(!TC || BC == 64, "TC: the cast tiles hold key tiles of 64 keys (no casting group crosses one)");
    static_assert(PHASE == 0 || PL, "PHASE 1 / 2: the two passes of the two-pass forward");

    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sQ = reinterpret_cast<floatX*>(attn_smem);  // BR rows; reused for output staging
    floatX* sK = sQ + BR * LDS;                          // 2 buffers x BC rows
    floatX* sV = sK + 2 * BC * LDS;                      // 2 buffers x BC rows (TC PHASE 1: none, never read there)

    const int C = NH * HS, C3 = 3 * C;
    // blockIdx.x walks the tiles of one head, longest (latest queries) first, so that the tiles of
    // a head run together and share its K/V in L2; blockIdx.y is the (b, h) pair.
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tq = lane & 3;
    const int wrow = warp * 16 * WM;                  // first row of this warp inside the tile
    const int wr0 = q0 + wrow, wr1 = wr0 + 16 * WM - 1;
    const bool live = wr0 < T;
    float* stage = TC ? reinterpret_cast<float*>(sV + (PHASE == 1 ? 0 : 2 * BC * LDS)) + warp * AttnTcTileQ<WM>::words : nullptr;  // TC: this warp's cast tile
    const uint64_t rbase = (uint64_t)bh * (uint64_t)T;

    const floatX* gQ = qkv + (size_t)b * T * C3 + h * HS;
    const floatX* gK = gQ + C;
    const floatX* gV = gQ + 2 * C;
    const int n_kv = (min(q0 + BR, T) + BC - 1) / BC;  // key tiles touching keys <= last valid row

    // TC, the probabilities' codes kept (attention_tcast.cuh): the statistics pass marks them valid, the output pass
    // invalid where a tile goes the staged way, the fused kernel (which keeps none) invalid
    if constexpr (TC && PHASE != 2)
        if (tc.pflag && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *tc.pflag = PHASE == 1 ? 0u : 1u;
    attn_load_tile<HS, BR, NT>(sQ, gQ, C3, q0, T);
    if (PHASE != 2) attn_load_tile<HS, BC, NT>(sK, gK, C3, 0, T);  // (PHASE 2: pass 2 loads its first tiles)
    if (!PL) attn_load_tile<HS, BC, NT>(sV, gV, C3, 0, T);  // pass 1 of PL needs no V
    attn_cp_async_commit();

    uint32_t qf[WM][KS][4];
    float o[WM][NO][4];
    float m[WM][2], l[WM][2];  // running max (in the scores' units, attn_score) and this thread's partial row sum
    #pragma unroll
    for (int mi = 0; mi < WM; mi++) {
        #pragma unroll
        for (int n = 0; n < NO; n++) o[mi][n][0] = o[mi][n][1] = o[mi][n][2] = o[mi][n][3] = 0.f;
        m[mi][0] = m[mi][1] = -INFINITY;
        l[mi][0] = l[mi][1] = 0.f;
    }

    // The only pass (PL = false), or pass 1: row statistics (PL = true); none in PHASE 2.
    for (int j = 0; PHASE != 2 && j < n_kv; j++) {
        const int buf = attn_kv_next<HS, BC, NT, !PL>(sK, sV, gK, gV, C3, j, n_kv, T);
        const int k0 = j * BC;
        if (live && k0 <= wr1) {  // tile 0 always qualifies, so qf is loaded before first use
            if (j == 0) attn_load_a<WM, KS, LDS>(qf, attn_smem_addr(sQ + wrow * LDS), lane);

            float s[WM][NS][4];
            attn_frag_zero(s);
            attn_mma_abt<WM, NS, KS, LDS>(s, qf, attn_smem_addr(sK + buf * BC * LDS), lane);

            if constexpr (TC) {  // s <- s^ (masked: -inf; the score groups' scales found and kept), then the softmax step on s^
                const float no_lse[WM][2] = {};     // (read only when the probabilities follow)
                const uint32_t no_kb[WM] = {};      // (read only by the later visits)
                attn_tc_step_q<CNT, ATTN_TC_FWD_STATS, false>(s, stage, scale, wr0, k0, T, no_lse, 0.f, tc, rbase, lane, ATTN_TC_SCORES, no_kb);
                attn_fwd_softmax<false, PL, false, true>(s, o, m, l, scale, k0 + 2 * tq, wr0 + g);
            } else if (k0 + BC - 1 > wr0) {  // only tiles crossing the diagonal (some key after some row of the warp) pay for the mask
                attn_fwd_softmax<true, PL, CNT, false, POW2>(s, o, m, l, scale, k0 + 2 * tq, wr0 + g);
            } else {
                attn_fwd_softmax<false, PL, CNT, false, POW2>(s, o, m, l, scale, k0 + 2 * tq, wr0 + g);
            }

            if constexpr (!PL) {
                uint32_t pa[WM][BC / 16][4];
                attn_c_to_a<WM, NS>(pa, s);
                attn_mma_ab<WM, NO, BC / 16, LDS>(o, pa, attn_smem_addr(sV + buf * BC * LDS), lane);
            }
        }
        __syncthreads();  // everyone is done with buffer `buf` before it is refilled
    }

    if constexpr (PL) {
        // lse per row (every lane of the quad ends with the same sum), stored, and kept as lse2 =
        // lse * log2(e) computed from the stored fp32 value exactly as the backward kernels do (PHASE 2: read back).
        float lse2[WM][2];
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int row = wr0 + mi * 16 + g + 8 * hh;
                float L;
                if constexpr (PHASE == 2) {
                    L = live && row < T ? lse[(size_t)bh * T + row] : 0.f;
                } else {
                    L = attn_from_units(m[mi][hh]) + logf(attn_quad_sum(l[mi][hh]));
                    if (live && tq == 0 && row < T) lse[(size_t)bh * T + row] = L;
                }
                lse2[mi][hh] = L * ATTN_LOG2E;
            }
        if constexpr (PHASE == 1) return;

        // TC: the lse * log2(e) of the query row this lane casts (attn_tc_cast_q).
        const float lse2v = TC ? attn_tc_row_value<WM>(lse2, lane % AttnTcTileQ<WM>::NI) : 0.f;
        // Pass 2: O = sum over key tiles of P^ V, same double-buffered schedule, K and V tiles.
        // The last pass-1 iteration ended with a barrier and left only an empty cp.async group (PHASE 2: the Q tile's
        // group, complete at the first wait below).
        attn_load_tile<HS, BC, NT>(sK, gK, C3, 0, T);
        attn_load_tile<HS, BC, NT>(sV, gV, C3, 0, T);
        attn_cp_async_commit();
        for (int j = 0; j < n_kv; j++) {
            const int buf = attn_kv_next<HS, BC, NT, true>(sK, sV, gK, gV, C3, j, n_kv, T);
            const int k0 = j * BC;
            if (live && k0 <= wr1) {  // qf was loaded in pass 1 (tile 0; PHASE 2: here)
                if constexpr (PHASE == 2)
                    if (j == 0) attn_load_a<WM, KS, LDS>(qf, attn_smem_addr(sQ + wrow * LDS), lane);
                uint32_t kb[WM] = {};  // TC: the score groups' scales pass 1 kept (loaded ahead of the MMA)
                if constexpr (TC && !CNT) attn_tc_kept_load_q<false>(kb, tc, rbase, T, wr0, k0, lane);
                float s[WM][NS][4];
                attn_frag_zero(s);
                attn_mma_abt<WM, NS, KS, LDS>(s, qf, attn_smem_addr(sK + buf * BC * LDS), lane);

                if constexpr (TC) {  // s <- P^ (the score groups' scales read, the probability groups' found and kept)
                    if constexpr (PHASE == 2 && WM == 1) {  // and their codes (attention_tcast.cuh: tc.pcode)
                        const bool regs = attn_tc_step_q<CNT, ATTN_TC_FWD_OUT, false>(s, stage, scale, wr0, k0, T, lse2, lse2v, tc, rbase, lane,
                                                                                     ATTN_TC_PROBS, kb, attn_tc_pk_store(tc, bh, wr0, k0, T, lane));
                        attn_tc_pk_mark(tc, regs, lane);
                    } else {  // (PHASE 2 with WM > 1, a --tc-sweep candidate shape: keeps no codes)
                        attn_tc_step_q<CNT, ATTN_TC_FWD_OUT, false>(s, stage, scale, wr0, k0, T, lse2, lse2v, tc, rbase, lane, ATTN_TC_PROBS, kb);
                        if constexpr (PHASE == 2) attn_tc_pk_mark(tc, false, lane);
                    }
                } else if (k0 + BC - 1 > wr0) {
                    attn_fwd_p_lse<true, CNT, POW2>(s, lse2, scale, k0 + 2 * tq, wr0 + g);
                } else {
                    attn_fwd_p_lse<false, CNT, POW2>(s, lse2, scale, k0 + 2 * tq, wr0 + g);
                }

                uint32_t pa[WM][BC / 16][4];
                attn_c_to_a<WM, NS>(pa, s);
                attn_mma_ab<WM, NO, BC / 16, LDS>(o, pa, attn_smem_addr(sV + buf * BC * LDS), lane);
            }
            __syncthreads();  // everyone is done with buffer `buf` before it is refilled
        }
        // o holds O / unit (attn_fwd_p_lse)
        if (live) attn_store_tile<WM, HS, AMAX, TC>(sQ + wrow * LDS, o, boundary_unit(), out + (size_t)b * T * C + h * HS, C, wr0, T, lane, amax);
    } else {
        if (live) {
            float inv[WM][2];
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const float sum = attn_quad_sum(l[mi][hh]);
                    inv[mi][hh] = 1.f / sum;
                    const int row = wr0 + mi * 16 + g + 8 * hh;
                    if (tq == 0 && row < T) lse[(size_t)bh * T + row] = attn_from_units(m[mi][hh]) + logf(sum);
                    #pragma unroll
                    for (int n = 0; n < NO; n++) {
                        o[mi][n][2 * hh] *= inv[mi][hh];
                        o[mi][n][2 * hh + 1] *= inv[mi][hh];
                    }
                }
            attn_store_tile<WM, HS, AMAX, TC>(sQ + wrow * LDS, o, 1.f, out + (size_t)b * T * C + h * HS, C, wr0, T, lane, amax);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Tensor-core launchers, one per kernel and configuration. The default configurations are chosen in
// attention_forward / attention_backward; dev/cuda/attention.cu can time the others (--sweep).

// CNT: the --q115-stats counting instantiation (boundary_with_count); the plain builds never compile it.
// PHASE (see the kernel): 0 for the whole forward; 1 and 2 are the halves attention_forward_tc_split launches.
template <int HS, int WM, int NW, int BC, int MINB = 1, int PHASE = 0, bool PL = kAttnProbsFromLse>
void attention_forward_tc(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream,
                          unsigned int* amax = nullptr) {
    using Cfg = AttnFwdTC<HS, WM, NW, BC, MINB, PHASE>;
    boundary_with_count([&](auto cnt) {
        constexpr bool CNT = decltype(cnt)::value;
        const auto kernel = amax ? attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, PHASE, PL, CNT, true>
                                 : attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, PHASE, PL, CNT, false>;
        attn_set_smem(kernel, Cfg::smem_bytes);
        const dim3 grid(ceil_div(T, Cfg::BR), B * NH);
        kernel<<<grid, Cfg::NT, Cfg::smem_bytes, stream>>>(out, lse, qkv, T, NH, 1.0f / sqrtf((float)HS), amax, AttnTcastArgs{});
    });
    cudaCheckLaunch();
}

// The two-pass forward (in any 16-bit build: the plain ones' forced two-pass form too) as two launches on `stream`: the
// statistics pass (writes lse, (B, NH, T) fp32) in configuration (HS, WS, NWS, BCS, MINBS), then the output pass (reads
// lse, writes out and the amax) in (HS, WO, NWO, BCO, MINBO). Same arguments and results as attention_forward_tc with
// PL = true, bit for bit.
template <int HS, int WS, int NWS, int BCS, int MINBS, int WO, int NWO, int BCO, int MINBO>
void attention_forward_tc_split(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream,
                                unsigned int* amax = nullptr) {
    attention_forward_tc<HS, WS, NWS, BCS, MINBS, 1, true>(out, lse, qkv, B, T, NH, stream);
    attention_forward_tc<HS, WO, NWO, BCO, MINBO, 2, true>(out, lse, qkv, B, T, NH, stream, amax);
}

// One launch of a TC forward instantiation `kernel` of configuration Cfg (AttnFwdTC: grid, block, dynamic shared memory
// with the cast tiles) on the (B, T, NH) call; scale 1 / sqrt(HS) from Cfg's head size.
template <typename Cfg, typename K>
static inline void attn_fwd_tc_launch(K kernel, floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream,
                                      unsigned int* amax, const AttnTcastArgs& args) {
    attn_set_smem(kernel, Cfg::tc_smem_bytes);
    kernel<<<dim3(ceil_div(T, Cfg::BR), B * NH), Cfg::NT, Cfg::tc_smem_bytes, stream>>>(out, lse, qkv, T, NH, 1.0f / sqrtf((float)Cfg::HS),
                                                                                        amax, args);
    cudaCheckLaunch();
}
// A --tc-sweep candidate (STATS = false) called while --cast-stats counts.
static inline void attn_tc_no_counting_kernel() {
    die("--cast-stats: this attention forward configuration (a dev/cuda/attention --tc-sweep candidate) has no counting kernel");
}

// TensorCast launchers: the TC instantiations (attention_tcast.cuh), with the per-call seed and, in
// the forward, the --cast-stats counting instantiation while attention_tcast_stats is set. The
// dynamic shared memory grows by the cast tiles (attention_tcast_cast.cuh). Only the dispatch of a
// build whose mode sets kModeAttentionCasts instantiates them (attention.cuh).
// STATS = false (dev/cuda/attention --tc-sweep candidates): the counting instantiation is not compiled, and
// a call while --cast-stats counting is on stops with `error:`.
// scales: the group scales the forward keeps for the backward (attention_tcast_scales_bytes(B, T, NH) bytes, written;
// NULL only where no site keeps them: attn_tc_args stops with `error:` otherwise).
template <int HS, int WM, int NW, int BC, int MINB, bool PL, bool STATS = true>
void attention_forward_tc_cast(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream,
                               unsigned int* amax, uint64_t seed, uint8_t* scales) {
    using Cfg = AttnFwdTC<HS, WM, NW, BC, MINB>;
    const bool count = attn_tc_counting();
    auto kernel = attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, 0, PL, false, false, true>;
    if constexpr (STATS) {
        if (count) kernel = attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, 0, PL, true, false, true>;
    } else if (count) {
        attn_tc_no_counting_kernel();
    }
    attn_fwd_tc_launch<Cfg>(kernel, out, lse, qkv, B, T, NH, stream, amax, attn_tc_args(seed, count, scales, B, T, NH));
}

// The TC forward as two kernels on `stream`: the statistics pass (PHASE 1: the scores cast, their groups' verdicts
// kept in `scales`, lse written) in configuration (HS, WS, NWS, BCS, MINBS), then the output pass (PHASE 2: lse and the
// score verdicts read back, the probabilities cast and their verdicts kept, out and the amax written) in (HS, WO, NWO,
// BCO, MINBO). Same arguments and bits as attention_forward_tc_cast (PL = true). While --cast-stats counts, the fused
// counting kernel of the output pass's configuration runs instead (STATS = false: stops with `error:`, as there); the
// fused non-counting kernel is not compiled for it.
template <int HS, int WS, int NWS, int BCS, int MINBS, int WO, int NWO, int BCO, int MINBO, bool STATS = true>
void attention_forward_tc_cast_split(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream,
                                     unsigned int* amax, uint64_t seed, uint8_t* scales) {
    if (attn_tc_counting()) {
        if constexpr (STATS)
            attn_fwd_tc_launch<AttnFwdTC<HS, WO, NWO, BCO, MINBO>>(attn_fwd_tc_kernel<HS, WO, NWO, BCO, MINBO, 0, true, true, false, true>,
                                                                   out, lse, qkv, B, T, NH, stream, amax, attn_tc_args(seed, true, scales, B, T, NH));
        else
            attn_tc_no_counting_kernel();
        return;
    }
    const AttnTcastArgs args = attn_tc_args(seed, false, scales, B, T, NH);
    attn_fwd_tc_launch<AttnFwdTC<HS, WS, NWS, BCS, MINBS, 1>>(attn_fwd_tc_kernel<HS, WS, NWS, BCS, MINBS, 1, true, false, false, true>,
                                                              out, lse, qkv, B, T, NH, stream, nullptr, args);
    attn_fwd_tc_launch<AttnFwdTC<HS, WO, NWO, BCO, MINBO, 2>>(attn_fwd_tc_kernel<HS, WO, NWO, BCO, MINBO, 2, true, false, false, true>,
                                                              out, lse, qkv, B, T, NH, stream, amax, args);
}
