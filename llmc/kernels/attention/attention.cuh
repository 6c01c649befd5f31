// attention.cuh - causal multi-head self-attention for the GPT-2 trainer: forward and backward.
//
// Layout (fixed by the rest of the trainer):
//   qkv  (B, T, 3C) floatX: for head h, q[b,t,d] = qkv[b,t,h*HS+d], k at +C, v at +2C; HS = C/NH.
//   out  (B, T, C)  floatX: head h in columns h*HS .. h*HS+HS-1.
//   lse  (B, NH, T) float : natural log of sum_j exp(s_tj) per query row t (forward -> backward).
//   dqkv (B, T, 3C) floatX: fully overwritten by the backward pass (never accumulated into).
// Scores s_tj = (q_t . k_j) / sqrt(HS), causal: query t attends keys 0..t.
//
// Algorithm. The forward is the tiled "flash" formulation: the T x T score matrix is never stored;
// each query tile streams over key tiles and keeps a running row max m, running denominator l and
// an unnormalized output accumulator, rescaling them when the max grows (online softmax, Milakov &
// Gimelshein 2018, "Online normalizer calculation for softmax"; tiling and loop order as in Dao
// 2023, "FlashAttention-2"). It saves lse = m + log(l) so the backward can recompute the exact
// probabilities P = exp(S - lse) tile by tile. With D_t = rowsum(dout_t * out_t) the backward is
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ = scale dS K,  dK = scale dS^T Q.
//
// Determinism. No floating-point atomics anywhere: every output element is produced by exactly one
// thread with a fixed summation order. The backward runs two kernels (the FlashAttention-2 backward
// accumulates dQ with atomic adds instead): first one parallel over query tiles that computes D and
// dQ, then one parallel over key tiles that computes dK and dV. S and P are recomputed in both, which costs 7
// instead of 5 tile matmuls, the price of bit-reproducible gradients.
//
// Two implementations, picked automatically by the launchers:
//   * tensor-core path (floatX = bf16 or fp16, HS = 64 or 128, 16-byte aligned pointers):
//     mma.sync.m16n8k16 with fp32 accumulation, operands fetched with ldmatrix from padded shared
//     memory tiles filled by cp.async double buffering; key tiles above the diagonal are skipped.
//   * generic path (any HS <= 256, any floatX including fp32): one warp per query (or key) row,
//     keys streamed through shared memory in chunks of 32; correct and deterministic, not fast.
//
// Boundary hooks (llmc/kernels/boundary.cuh; identity in the plain builds). Every score s = scale * q.k is
// read as s^ = boundary_value<ATTN_SCORES>(s * scale) (attn_score / attn_gen_score below), the same
// expression in every kernel and pass, before masking and before the softmax. The probabilities that
// multiply V are the normalized p_ij = exp(s^_ij - lse_i) passed through boundary_value<ATTN_PROBS>
// and then rounded to floatX: P^ = boundary(p). So
//   O_i = sum_j P^_ij v_j,   lse_i = log sum_{j <= i} exp(s^_ij).
// The forward has two modes, a compile-time template parameter PL (kProbsFromLse) of the forward
// kernels, chosen by kAttnProbsFromLse = !boundary_is_identity<ATTN_PROBS>():
//   * PL = false (plain builds, where the probability hook is the identity): the usual single pass.
//     P = exp(s^ - m_running) unnormalized, O rescaled by the online max and divided by the row sum
//     once at the end. Mathematically the same O; the generated code is that of the single-pass kernel.
//   * PL = true (SF16: the hook is a quantizer, which does not commute with the final division by the
//     row sum, so it must see the normalized value): pass 1 is the online max/sum over s^ only (no
//     P.V, V not loaded) and yields lse; pass 2 streams the key tiles again, recomputes s^ and
//     P^ = boundary_value<ATTN_PROBS>(exp(s^ - lse)) with exactly the expression the backward uses
//     (attn_prob_from_lse / attn_gen_prob_from_lse, lse read back as the stored fp32 value), and
//     accumulates O = sum P^ V in fp32: no running max, no rescaling, no final division. Costs one
//     more Q.K^T per tile (3 instead of 2 tile matmuls); deterministic like the single pass.
// The backward always recomputes P^ from lse the same way, so in PL mode forward and backward use
// bit-identical probabilities (the dK/dV kernel computes the transposed product K.Q^T, whose fp32
// dot products come out of the same mma).
//
// TensorCast (TCAST=1 build; llmc/kernels/attention/attention_tcast.cuh, doc/TCAST.md 5.1). There boundary_value is the
// identity and the attention sites are cast by a third template instantiation, TC = true, of the
// three tensor-core kernels, which the launchers pick at run time once attention_tcast_configure has
// set a datatype for attn_scores and/or attn_probs; with none (and in every other build) they launch
// TC = false, the kernels above unchanged. In TC kernels each query row's scaled scores v = raw*scale
// are cast in groups along the keys (keys j > i and j >= T enter as 0, so they never move a scale,
// and are masked to -inf after the cast), lse is taken over s^, and the normalized
// p = exp2(s^ log2(e) - lse log2(e)) is cast the same way (masked p = 0) before it multiplies V: a
// probability cast forces the two-pass forward (PL = true) at run time. Groups: in the forward and
// dQ kernels (query-major fragments, key tiles of 64 keys) a row's keys lie in one quad, and a group
// of X keys is a thread's register pair (X = 2), plus lanes xor 1 / xor 2 (X = 4 / 8), plus 2, 4 or 8
// n-tiles merged in registers (X = 16..64); in the dK/dV kernel (key-major: keys down the rows) a
// column's keys run over lanes g (xor 4, 8, 16), the thread's 8-key chunks and, for X > 16*WM,
// consecutive warps, whose partials merge in shared memory. M:N sparsity reads each group's N values
// back from shared memory. All three kernels evaluate the same expressions on the same fp32 dot
// products, so the backward recomputes the forward's s^ and P^ bit for bit; gradients pass straight
// through both casts (dS = P^ (dP - D)). The cast kernels exist for head size 64 only (attn_tc_require_tc).
// Where the cost goes: integer bit math per
// element and cast (an inline fast path for exponent-scaled and unscaled float formats; float-scaled
// ints / uints, NaN groups and rare edge values call tcast_quantize out of line), one group scale per
// group and lane, up to 3 shuffles per group (plus a barrier for cross-warp groups in dK/dV), no extra
// global memory traffic; the scores are cast twice in the two-pass forward (once per pass) and once in
// each backward kernel, the probabilities once per kernel.
#pragma once

#include <stdint.h>
#include <math.h>
#include <type_traits>
#include <utility>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/kernels/attention/attention_tcast.cuh"

// ------------------------------------------------------------------------------------------------
// PTX wrappers (sm_80+)

__device__ __forceinline__ uint32_t attn_smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy that bypasses L1 (each tile is read once per CTA). With valid = false
// no global byte is read and the 16 destination bytes are zero-filled: that is how rows past T enter
// the tiles as finite zeros.
__device__ __forceinline__ void attn_cp_async16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void attn_cp_async4(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void attn_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void attn_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it
// (thread l holds row l/4, columns 2(l%4), 2(l%4)+1; with .trans the transposed matrix instead).
__device__ __forceinline__ void attn_ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void attn_ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// d += a * b for one 16x8x16 tile, fp32 accumulators; T (bf16 or half) picks the operand type.
template <typename T>
__device__ __forceinline__ void attn_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same<T, half>::value) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        static_assert(std::is_same<T, __nv_bfloat16>::value, "tensor-core attention needs bf16 or fp16");
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// 2^x on the SFU. Accuracy ~2 ulp, plenty for probabilities rounded to 16 bits; ex2(-inf) = 0.
__device__ __forceinline__ float attn_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two floats rounded to a packed pair of T; `lo` lands in the low half (the lower column index).
template <typename T>
__device__ __forceinline__ uint32_t attn_pack(float lo, float hi) {
    uint32_t r;
    if constexpr (std::is_same<T, half>::value) {
        __half2 v = __floats2half2_rn(lo, hi);
        r = *reinterpret_cast<uint32_t*>(&v);
    } else {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        r = *reinterpret_cast<uint32_t*>(&v);
    }
    return r;
}
template <typename T>
__device__ __forceinline__ float2 attn_unpack(uint32_t u) {
    if constexpr (std::is_same<T, half>::value) {
        return __half22float2(*reinterpret_cast<__half2*>(&u));
    } else {
        return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
    }
}

#define ATTN_LOG2E 1.4426950408889634f

// Forward mode (see the header comment): true when the probability hook is not the identity, i.e.
// the forward must compute P from the final lse in a second pass.
static constexpr bool kAttnProbsFromLse = !boundary_is_identity<ATTN_PROBS>();

// The two hooked quantities, one expression each, shared by every kernel (tensor-core path: exp2 on
// the SFU with lse2 = lse * log2(e)). raw = the fp32 dot product q.k, shat = attn_score(raw, scale).
// CNT: whether the hooks may count --q115-stats (boundary.cuh): true only in the forward kernels'
// counting instantiation, never in the backward, so that training kernels carry no statistics code.
template <bool CNT>
__device__ __forceinline__ float attn_score(float raw, float scale) { return boundary_value<ATTN_SCORES, CNT>(raw * scale); }
template <bool CNT>
__device__ __forceinline__ float attn_prob(float shat, float lse2) {
    return boundary_value<ATTN_PROBS, CNT>(attn_exp2(fmaf(shat, ATTN_LOG2E, -lse2)));
}
template <bool CNT>
__device__ __forceinline__ float attn_prob_from_lse(float raw, float scale, float lse2) {
    return attn_prob<CNT>(attn_score<CNT>(raw, scale), lse2);
}

// ------------------------------------------------------------------------------------------------
// Tensor-core building blocks. Fragment layouts are those of mma.m16n8k16 (PTX ISA, "Matrix
// fragments for mma.m16n8k16"): with g = lane/4 and c = lane%4,
//   A (16x16): a[0] = (g, 2c..2c+1), a[1] = (g+8, 2c..), a[2] = (g, 2c+8..), a[3] = (g+8, 2c+8..)
//   B (16x8) : b0 = (k 2c..2c+1, n g), b1 = (k 2c+8.., n g)
//   C (16x8) : c[0..1] = (g, 2c..2c+1), c[2..3] = (g+8, 2c..2c+1)
// Shared-memory tiles hold LDS = HS+8 elements per row: the 16-byte pad shifts consecutive rows by
// four banks, so the eight row addresses of each ldmatrix phase hit distinct banks (and cp.async
// destinations stay 16-byte aligned).

// Issue cp.async for rows [row0, row0+ROWS) of one head's HS columns (global row stride ld) into a
// padded tile; rows >= T are zero-filled.
template <int HS, int ROWS, int NT>
__device__ __forceinline__ void attn_load_tile(floatX* s, const floatX* g, int ld, int row0, int T) {
    constexpr int CPR = HS / 8, LDS = HS + 8, TOTAL = ROWS * CPR;
    #pragma unroll
    for (int i = 0; i < (TOTAL + NT - 1) / NT; i++) {
        const int c = i * NT + (int)threadIdx.x;
        if (TOTAL % NT == 0 || c < TOTAL) {
            const int r = c / CPR, col = (c % CPR) * 8;
            const bool valid = row0 + r < T;
            const floatX* src = g + (size_t)(valid ? row0 + r : 0) * ld + col;
            attn_cp_async16(attn_smem_addr(s + r * LDS + col), src, valid);
        }
    }
}

// One float per row for rows [row0, row0+ROWS) of a (T,) vector, zero past T.
template <int ROWS>
__device__ __forceinline__ void attn_load_vec(float* s, const float* g, int row0, int T) {
    for (int r = threadIdx.x; r < ROWS; r += blockDim.x) {
        const bool valid = row0 + r < T;
        attn_cp_async4(attn_smem_addr(s + r), g + (valid ? row0 + r : 0), valid);
    }
}

// A fragments of this warp's WM row tiles (16 rows each, starting at smem byte address sA) for
// KS k-steps of 16 columns.
template <int WM, int KS, int LDS>
__device__ __forceinline__ void attn_load_a(uint32_t (&a)[WM][KS][4], uint32_t sA, int lane) {
    const uint32_t base = sA + ((lane & 15) * LDS + (lane >> 4) * 8) * 2;
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int ks = 0; ks < KS; ks++) attn_ldsm_x4(a[mi][ks], base + (mi * 16 * LDS + ks * 16) * 2);
}

// acc[mi][n] += A[mi] . X^T, with X an (8*NTILE) x (16*KS) tile stored row-major in shared memory
// (rows = output columns n, columns = reduction index k): the Q.K^T shape. One ldmatrix.x4 yields
// the B fragments of two n-tiles for one k-step.
template <int WM, int NTILE, int KS, int LDS>
__device__ __forceinline__ void attn_mma_abt(float (&acc)[WM][NTILE][4], const uint32_t (&a)[WM][KS][4],
                                             uint32_t sX, int lane) {
    static_assert(NTILE % 2 == 0, "n-tiles come in pairs");
    const uint32_t base = sX + (((lane & 7) + ((lane >> 4) << 3)) * LDS + ((lane >> 3) & 1) * 8) * 2;
    #pragma unroll
    for (int ks = 0; ks < KS; ks++)
        #pragma unroll
        for (int np = 0; np < NTILE / 2; np++) {
            uint32_t b[4];
            attn_ldsm_x4(b, base + (np * 16 * LDS + ks * 16) * 2);
            #pragma unroll
            for (int mi = 0; mi < WM; mi++) {
                attn_mma<floatX>(acc[mi][2 * np], a[mi][ks], b[0], b[1]);
                attn_mma<floatX>(acc[mi][2 * np + 1], a[mi][ks], b[2], b[3]);
            }
        }
}

// acc[mi][n] += A[mi] . X, with X a (16*KS) x (8*NTILE) tile stored row-major in shared memory
// (rows = reduction index k, columns = output columns n): the P.V shape. ldmatrix.trans turns the
// row-major 8x8 blocks into the k-major B fragments.
template <int WM, int NTILE, int KS, int LDS>
__device__ __forceinline__ void attn_mma_ab(float (&acc)[WM][NTILE][4], const uint32_t (&a)[WM][KS][4],
                                            uint32_t sX, int lane) {
    static_assert(NTILE % 2 == 0, "n-tiles come in pairs");
    const uint32_t base = sX + (((lane & 7) + (((lane >> 3) & 1) << 3)) * LDS + (lane >> 4) * 8) * 2;
    #pragma unroll
    for (int ks = 0; ks < KS; ks++)
        #pragma unroll
        for (int np = 0; np < NTILE / 2; np++) {
            uint32_t b[4];
            attn_ldsm_x4_trans(b, base + (ks * 16 * LDS + np * 16) * 2);
            #pragma unroll
            for (int mi = 0; mi < WM; mi++) {
                attn_mma<floatX>(acc[mi][2 * np], a[mi][ks], b[0], b[1]);
                attn_mma<floatX>(acc[mi][2 * np + 1], a[mi][ks], b[2], b[3]);
            }
        }
}

// Reuse fp32 accumulators of a 16 x (8*NTILE) product as the A operand (16 x 16 per k-step) of the
// next product: C tiles 2k and 2k+1 side by side form A k-step k.
template <int WM, int NTILE>
__device__ __forceinline__ void attn_c_to_a(uint32_t (&a)[WM][NTILE / 2][4], const float (&c)[WM][NTILE][4]) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int kk = 0; kk < NTILE / 2; kk++) {
            a[mi][kk][0] = attn_pack<floatX>(c[mi][2 * kk][0], c[mi][2 * kk][1]);
            a[mi][kk][1] = attn_pack<floatX>(c[mi][2 * kk][2], c[mi][2 * kk][3]);
            a[mi][kk][2] = attn_pack<floatX>(c[mi][2 * kk + 1][0], c[mi][2 * kk + 1][1]);
            a[mi][kk][3] = attn_pack<floatX>(c[mi][2 * kk + 1][2], c[mi][2 * kk + 1][3]);
        }
}

// Bit pattern of max(|a|, |b|) (as fp32) of the two 16-bit floatX values packed in x.
__device__ __forceinline__ unsigned int attn_abs_bits2(uint32_t x) {
    if constexpr (std::is_same<floatX, __nv_bfloat16>::value) {
        return max((x << 16) & 0x7FFF0000u, x & 0x7FFF0000u);  // a bf16 is the upper half of the same fp32
    } else {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&x));
        return max(abs_bits(f.x), abs_bits(f.y));
    }
}

// Write this warp's WM x 16 rows of fp32 accumulators (times `mul`) as floatX into its own rows of a
// padded smem tile, then copy them out with 16-byte stores (rows >= T are not written). Each warp
// only touches its own rows, so a __syncwarp is the only barrier needed. AMAX: also atomicMax the
// bit pattern of max |stored value| into *amax (the FP8 backend's amax slot of the next GEMM's operand,
// gemm_amax_slot; warp_amax_accumulate). A template parameter, so that the kernels without it are
// unchanged: a run-time test in this epilogue made the backward kernels 10-20% slower (benchmarks.md).
template <int WM, int HS, bool AMAX = false>
__device__ __forceinline__ void attn_store_rows(floatX* sRows, const float (&acc)[WM][HS / 8][4], float mul,
                                                floatX* g, int ld, int row0, int T, int lane, unsigned int* amax = nullptr) {
    constexpr int LDS = HS + 8, CPR = HS / 8;
    const int gr = lane >> 2, tq = lane & 3;
    __syncwarp();  // earlier ldmatrix reads of these rows by other lanes must be done
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < HS / 8; n++)
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int r = mi * 16 + gr + 8 * hh;
                *reinterpret_cast<uint32_t*>(sRows + r * LDS + n * 8 + 2 * tq) =
                    attn_pack<floatX>(acc[mi][n][2 * hh] * mul, acc[mi][n][2 * hh + 1] * mul);
            }
    __syncwarp();
    unsigned int m = 0;
    #pragma unroll
    for (int i = 0; i < WM * 16 * CPR / 32; i++) {
        const int c = i * 32 + lane, r = c / CPR, col = (c % CPR) * 8;
        if (row0 + r < T) {
            const uint4 w = *reinterpret_cast<const uint4*>(sRows + r * LDS + col);
            *reinterpret_cast<uint4*>(g + (size_t)(row0 + r) * ld + col) = w;
            if constexpr (AMAX) m = max(m, max(max(attn_abs_bits2(w.x), attn_abs_bits2(w.y)), max(attn_abs_bits2(w.z), attn_abs_bits2(w.w))));
        }
    }
    if constexpr (AMAX) warp_amax_accumulate(amax, m);
}

// Per-tile elementwise steps. s holds C fragments of a score tile: for 16-row tile mi, element r of
// n-tile n sits at row row0 + 16*mi + 8*(r/2) and column col0 + 8*n + (r%2), where row0 and col0
// are this thread's first row and column (g and 2*tq offsets included). MASK is a template
// parameter so that tiles off the diagonal carry no masking code at all.

// Forward online-softmax step: scale, hook (and mask) the scores, raise the running row max m,
// rescale the running sum l and the output accumulator o by exp(m_old - m_new), and leave the hooked,
// not yet normalized probabilities exp(s - m_new) in s. Rows span the 4 lanes of a quad.
// STATS (pass 1 of the two-pass forward): only m and l are updated; o and s are left alone.
// PRE (TC kernels): s already holds the hooked scores s^, masked entries -inf (attn_tc_scores_q).
template <bool MASK, bool STATS, bool CNT, bool PRE = false, int WM, int NS, int NO>
__device__ __forceinline__ void attn_fwd_softmax(float (&s)[WM][NS][4], float (&o)[WM][NO][4], float (&m)[WM][2],
                                                 float (&l)[WM][2], float scale, int col0, int row0) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int row = row0 + mi * 16 + 8 * hh;
            float mx = -INFINITY;
            #pragma unroll
            for (int n = 0; n < NS; n++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    float v = PRE ? s[mi][n][2 * hh + e] : attn_score<CNT>(s[mi][n][2 * hh + e], scale);
                    if (!PRE && MASK && col0 + n * 8 + e > row) v = -INFINITY;
                    s[mi][n][2 * hh + e] = v;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // The first tile holds key 0 <= row for every row, so m_new is finite from the start
            // and exp2(-inf) = 0 cleanly discards the empty initial state.
            const float m_new = fmaxf(m[mi][hh], mx);
            const float alpha = attn_exp2((m[mi][hh] - m_new) * ATTN_LOG2E);
            m[mi][hh] = m_new;
            if constexpr (!STATS) {
                #pragma unroll
                for (int n = 0; n < NO; n++) {
                    o[mi][n][2 * hh] *= alpha;
                    o[mi][n][2 * hh + 1] *= alpha;
                }
            }
            const float mb = m_new * ATTN_LOG2E;
            float sum = 0.f;
            #pragma unroll
            for (int n = 0; n < NS; n++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float p = attn_exp2(fmaf(s[mi][n][2 * hh + e], ATTN_LOG2E, -mb));
                    sum += p;
                    if constexpr (!STATS) s[mi][n][2 * hh + e] = boundary_value<ATTN_PROBS, CNT>(p);
                }
            l[mi][hh] = l[mi][hh] * alpha + sum;
        }
}

// Forward pass 2 of the two-pass mode: s <- P^ = boundary(exp(s^ - lse)), the normalized hooked
// probabilities, computed with the backward's expression (attn_score, attn_prob); masked entries
// give 0. The mask is applied to s^ before the probability hook, like pass 1 does before the
// softmax, so that the hook (and its --q115-stats counters) never sees a future key's value.
template <bool MASK, bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_fwd_p_lse(float (&s)[WM][NS][4], const float (&lse2)[WM][2], float scale,
                                               int col0, int row0) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                const int hh = r >> 1;
                const bool masked = MASK && col0 + n * 8 + (r & 1) > row0 + mi * 16 + 8 * hh;
                float v = attn_score<CNT>(s[mi][n][r], scale);
                if (masked) v = -INFINITY;  // exp2(-inf) = 0
                float p = attn_prob<CNT>(v, lse2[mi][hh]);
                if (masked) p = 0.f;  // whatever the hook makes of 0
                s[mi][n][r] = p;
            }
}

// Backward, query-major (dQ kernel): s <- dS = P^ * (dP - D) with P^ = boundary(exp(s^ - lse))
// recomputed by attn_prob_from_lse; lse2 = lse*log2(e) and D per row, masked entries give 0.
template <bool MASK, int WM, int NS>
__device__ __forceinline__ void attn_dq_ds(float (&s)[WM][NS][4], const float (&dp)[WM][NS][4], const float (&lse2)[WM][2],
                                           const float (&D)[WM][2], float scale, int col0, int row0) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                const int hh = r >> 1;
                float p = attn_prob_from_lse<false>(s[mi][n][r], scale, lse2[mi][hh]);
                if (MASK && col0 + n * 8 + (r & 1) > row0 + mi * 16 + 8 * hh) p = 0.f;
                s[mi][n][r] = p * (dp[mi][n][r] - D[mi][hh]);
            }
}

// Backward, key-major (dK/dV kernel): s <- P^T (attn_prob_from_lse with lse[query]), rows are keys and
// columns queries; L points at the lse values of the query tile (L[0] is query col0 - 2*tq).
template <bool MASK, int WM, int NS>
__device__ __forceinline__ void attn_dkv_p(float (&s)[WM][NS][4], const float* L, float scale, int col0, int row0, int tq) {
    #pragma unroll
    for (int n = 0; n < NS; n++) {
        const float2 lq = *reinterpret_cast<const float2*>(L + n * 8 + 2 * tq);
        const float lq2[2] = {lq.x * ATTN_LOG2E, lq.y * ATTN_LOG2E};
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                float p = attn_prob_from_lse<false>(s[mi][n][r], scale, lq2[r & 1]);
                if (MASK && col0 + n * 8 + (r & 1) < row0 + mi * 16 + 8 * (r >> 1)) p = 0.f;
                s[mi][n][r] = p;
            }
    }
}

// TensorCast steps of the TC instantiations (see the header comment and attention_tcast.cuh), query-
// major tiles (forward, dQ): same fragment conventions as above (row0 / col0 include g and 2*tq).
// stage: this warp's shared-memory rows for M:N sparsity (ldst floats each), rbase = (b*NH + h) * T.
// Scores: raw dot products -> s^ = cast(raw * scale) (future keys enter as 0), masked entries -inf.
template <bool MASK, bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_tc_scores_q(float (&s)[WM][NS][4], float scale, float* stage, int ldst, int row0, int col0,
                                                 int T, const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                float v = s[mi][n][r] * scale;
                if (MASK && col0 + n * 8 + (r & 1) > row0 + mi * 16 + 8 * (r >> 1)) v = 0.f;
                s[mi][n][r] = v;
            }
    if (attn_tc_site[ATTN_TC_SCORES].on)
        attn_tc_cast_rows<ATTN_TC_SCORES, CNT>(s, stage, ldst, row0, col0, T, tc.state[ATTN_TC_SCORES], rbase,
                                               tc.stats[ATTN_TC_SCORES], lane);
    if (MASK) {
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int n = 0; n < NS; n++)
                #pragma unroll
                for (int r = 0; r < 4; r++)
                    if (col0 + n * 8 + (r & 1) > row0 + mi * 16 + 8 * (r >> 1)) s[mi][n][r] = -INFINITY;
    }
}

// Probabilities: s^ -> P^ = cast(exp2(s^ log2(e) - lse2)) with lse2 = lse * log2(e) per row (the
// expression of attn_prob), masked entries 0 before and after the cast.
template <bool MASK, bool CNT, int WM, int NS>
__device__ __forceinline__ void attn_tc_probs_q(float (&s)[WM][NS][4], const float (&lse2)[WM][2], float* stage, int ldst, int row0,
                                                int col0, int T, const AttnTcastArgs& tc, uint64_t rbase, int lane) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) {
                float p = attn_exp2(fmaf(s[mi][n][r], ATTN_LOG2E, -lse2[mi][r >> 1]));
                if (MASK && col0 + n * 8 + (r & 1) > row0 + mi * 16 + 8 * (r >> 1)) p = 0.f;
                s[mi][n][r] = p;
            }
    if (attn_tc_site[ATTN_TC_PROBS].on) {
        attn_tc_cast_rows<ATTN_TC_PROBS, CNT>(s, stage, ldst, row0, col0, T, tc.state[ATTN_TC_PROBS], rbase,
                                              tc.stats[ATTN_TC_PROBS], lane);
        if (MASK) {
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int n = 0; n < NS; n++)
                    #pragma unroll
                    for (int r = 0; r < 4; r++)
                        if (col0 + n * 8 + (r & 1) > row0 + mi * 16 + 8 * (r >> 1)) s[mi][n][r] = 0.f;
        }
    }
}

// The epilogue store of a TC kernel: the amax output is a run-time choice there (TC kernels are not
// instantiated per AMAX; their cost is elsewhere).
template <int WM, int HS>
__device__ __forceinline__ void attn_store_rows_tc(floatX* sRows, const float (&acc)[WM][HS / 8][4], float mul, floatX* g, int ld,
                                                   int row0, int T, int lane, unsigned int* amax) {
    if (amax) attn_store_rows<WM, HS, true>(sRows, acc, mul, g, ld, row0, T, lane, amax);
    else attn_store_rows<WM, HS, false>(sRows, acc, mul, g, ld, row0, T, lane, amax);
}

// ------------------------------------------------------------------------------------------------
// Tensor-core forward. CTA = one (b, h) and BR = 16*WM*NW query rows; warp w owns rows
// [16*WM*w, 16*WM*(w+1)) of the tile and keeps its Q fragments, the O accumulator and the softmax
// statistics in registers. K/V tiles of BC keys are double-buffered in shared memory: tile j+1 is
// in flight while tile j is used. Key tiles entirely above the diagonal are never loaded; within
// the loaded ones a warp skips tiles above its own rows, and only tiles crossing the diagonal pay
// for the mask. PL (kProbsFromLse, see the header comment): the key loop runs twice, first for the
// row statistics only (K tiles only), then for P^ = boundary(exp(s^ - lse)) and O = P^ V (K and V);
// the Q fragments stay in registers across both.

template <int HS, int WM, int NW, int BC, int MINB = 1>
struct AttnFwdTC {
    static constexpr int NT = NW * 32, BR = 16 * WM * NW, LDS = HS + 8;
    static constexpr size_t smem_bytes = (size_t)(BR + 4 * BC) * LDS * sizeof(floatX);
};

// TC (TensorCast, see the header comment): the attention-site casts; CNT then counts --cast-stats
// (tc.stats), AMAX is ignored (the amax output is a run-time choice) and the dynamic shared memory
// holds the sparsity stage after the tiles when a site is M:N sparse.
template <int HS, int WM, int NW, int BC, int MINB, bool PL = kAttnProbsFromLse, bool CNT = false, bool AMAX = false, bool TC = false>
__global__ void __launch_bounds__(NW * 32, MINB)
attn_fwd_tc_kernel(floatX* __restrict__ out, float* __restrict__ lse, const floatX* __restrict__ qkv,
                   int T, int NH, float scale, unsigned int* __restrict__ amax, AttnTcastArgs tc) {
    constexpr int NT = NW * 32, BR = 16 * WM * NW, LDS = HS + 8;
    constexpr int KS = HS / 16;  // k-steps of Q.K^T
    constexpr int NS = BC / 8;   // n-tiles of S (keys)
    constexpr int NO = HS / 8;   // n-tiles of O (head dims)
    static_assert(HS % 16 == 0 && BC % 16 == 0, "tile sizes must be multiples of 16");
    static_assert(!TC || BC % 64 == 0, "TC: casting groups of up to 64 keys must not cross a key tile");

    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sQ = reinterpret_cast<floatX*>(attn_smem);  // BR rows; reused for output staging
    floatX* sK = sQ + BR * LDS;                          // 2 buffers x BC rows
    floatX* sV = sK + 2 * BC * LDS;                      // 2 buffers x BC rows
    constexpr int LDST = BC + 4;                         // TC sparsity stage: 16*WM rows of LDST floats per warp

    const int C = NH * HS, C3 = 3 * C;
    // blockIdx.x walks the tiles of one head, longest (latest queries) first, so that the tiles of
    // a head run together and share its K/V in L2; blockIdx.y is the (b, h) pair.
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tq = lane & 3;
    const int wrow = warp * 16 * WM;                  // first row of this warp inside the tile
    const int wr0 = q0 + wrow, wr1 = wr0 + 16 * WM - 1;
    const bool live = wr0 < T;
    float* stage = TC ? reinterpret_cast<float*>(sV + 2 * BC * LDS) + warp * 16 * WM * LDST : nullptr;
    const uint64_t rbase = (uint64_t)bh * (uint64_t)T;

    const floatX* gQ = qkv + (size_t)b * T * C3 + h * HS;
    const floatX* gK = gQ + C;
    const floatX* gV = gQ + 2 * C;
    const int n_kv = (min(q0 + BR, T) + BC - 1) / BC;  // key tiles touching keys <= last valid row

    attn_load_tile<HS, BR, NT>(sQ, gQ, C3, q0, T);
    attn_load_tile<HS, BC, NT>(sK, gK, C3, 0, T);
    if (!PL) attn_load_tile<HS, BC, NT>(sV, gV, C3, 0, T);  // pass 1 of PL needs no V
    attn_cp_async_commit();

    uint32_t qf[WM][KS][4];
    float o[WM][NO][4];
    float m[WM][2], l[WM][2];  // running max (natural units) and this thread's partial row sum
    #pragma unroll
    for (int mi = 0; mi < WM; mi++) {
        #pragma unroll
        for (int n = 0; n < NO; n++) o[mi][n][0] = o[mi][n][1] = o[mi][n][2] = o[mi][n][3] = 0.f;
        m[mi][0] = m[mi][1] = -INFINITY;
        l[mi][0] = l[mi][1] = 0.f;
    }

    // The only pass (PL = false), or pass 1: row statistics (PL = true).
    for (int j = 0; j < n_kv; j++) {
        const int buf = j & 1;
        if (j + 1 < n_kv) {
            attn_load_tile<HS, BC, NT>(sK + (buf ^ 1) * BC * LDS, gK, C3, (j + 1) * BC, T);
            if (!PL) attn_load_tile<HS, BC, NT>(sV + (buf ^ 1) * BC * LDS, gV, C3, (j + 1) * BC, T);
        }
        attn_cp_async_commit();  // possibly empty: keeps the group count uniform
        attn_cp_async_wait<1>();  // tile j (and Q) have landed
        __syncthreads();

        const int k0 = j * BC;
        if (live && k0 <= wr1) {  // tile 0 always qualifies, so qf is loaded before first use
            if (j == 0) attn_load_a<WM, KS, LDS>(qf, attn_smem_addr(sQ + wrow * LDS), lane);

            float s[WM][NS][4];
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int n = 0; n < NS; n++) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
            attn_mma_abt<WM, NS, KS, LDS>(s, qf, attn_smem_addr(sK + buf * BC * LDS), lane);

            // Only tiles crossing the diagonal (some key after some row of the warp) pay for the mask.
            if constexpr (TC) {  // s^ first (scores counted here, in the first pass), then the softmax step
                if (k0 + BC - 1 > wr0) {
                    attn_tc_scores_q<true, CNT>(s, scale, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                    attn_fwd_softmax<true, PL, CNT, true>(s, o, m, l, scale, k0 + 2 * tq, wr0 + g);
                } else {
                    attn_tc_scores_q<false, CNT>(s, scale, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                    attn_fwd_softmax<false, PL, CNT, true>(s, o, m, l, scale, k0 + 2 * tq, wr0 + g);
                }
            } else {
                if (k0 + BC - 1 > wr0) attn_fwd_softmax<true, PL, CNT>(s, o, m, l, scale, k0 + 2 * tq, wr0 + g);
                else attn_fwd_softmax<false, PL, CNT>(s, o, m, l, scale, k0 + 2 * tq, wr0 + g);
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
        // lse * log2(e) computed from the stored fp32 value exactly as the backward kernels do.
        float lse2[WM][2];
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                float sum = l[mi][hh];
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                const float L = m[mi][hh] + logf(sum);
                const int row = wr0 + mi * 16 + g + 8 * hh;
                if (live && tq == 0 && row < T) lse[(size_t)bh * T + row] = L;
                lse2[mi][hh] = L * ATTN_LOG2E;
            }

        // Pass 2: O = sum over key tiles of P^ V, same double-buffered schedule, K and V tiles.
        // The last pass-1 iteration ended with a barrier and left only an empty cp.async group.
        attn_load_tile<HS, BC, NT>(sK, gK, C3, 0, T);
        attn_load_tile<HS, BC, NT>(sV, gV, C3, 0, T);
        attn_cp_async_commit();
        for (int j = 0; j < n_kv; j++) {
            const int buf = j & 1;
            if (j + 1 < n_kv) {
                attn_load_tile<HS, BC, NT>(sK + (buf ^ 1) * BC * LDS, gK, C3, (j + 1) * BC, T);
                attn_load_tile<HS, BC, NT>(sV + (buf ^ 1) * BC * LDS, gV, C3, (j + 1) * BC, T);
            }
            attn_cp_async_commit();
            attn_cp_async_wait<1>();
            __syncthreads();

            const int k0 = j * BC;
            if (live && k0 <= wr1) {  // qf was loaded in pass 1 (tile 0)
                float s[WM][NS][4];
                #pragma unroll
                for (int mi = 0; mi < WM; mi++)
                    #pragma unroll
                    for (int n = 0; n < NS; n++) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
                attn_mma_abt<WM, NS, KS, LDS>(s, qf, attn_smem_addr(sK + buf * BC * LDS), lane);

                if constexpr (TC) {  // s^ again (not counted), then P^ (counted)
                    if (k0 + BC - 1 > wr0) {
                        attn_tc_scores_q<true, false>(s, scale, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                        attn_tc_probs_q<true, CNT>(s, lse2, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                    } else {
                        attn_tc_scores_q<false, false>(s, scale, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                        attn_tc_probs_q<false, CNT>(s, lse2, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                    }
                } else {
                    if (k0 + BC - 1 > wr0) attn_fwd_p_lse<true, CNT>(s, lse2, scale, k0 + 2 * tq, wr0 + g);
                    else attn_fwd_p_lse<false, CNT>(s, lse2, scale, k0 + 2 * tq, wr0 + g);
                }

                uint32_t pa[WM][BC / 16][4];
                attn_c_to_a<WM, NS>(pa, s);
                attn_mma_ab<WM, NO, BC / 16, LDS>(o, pa, attn_smem_addr(sV + buf * BC * LDS), lane);
            }
            __syncthreads();
        }
        if (live) {
            if constexpr (TC) attn_store_rows_tc<WM, HS>(sQ + wrow * LDS, o, 1.f, out + (size_t)b * T * C + h * HS, C, wr0, T, lane, amax);
            else attn_store_rows<WM, HS, AMAX>(sQ + wrow * LDS, o, 1.f, out + (size_t)b * T * C + h * HS, C, wr0, T, lane, amax);
        }
    } else {
        if (live) {
            float inv[WM][2];
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    float sum = l[mi][hh];
                    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                    inv[mi][hh] = 1.f / sum;
                    const int row = wr0 + mi * 16 + g + 8 * hh;
                    if (tq == 0 && row < T) lse[(size_t)bh * T + row] = m[mi][hh] + logf(sum);
                    #pragma unroll
                    for (int n = 0; n < NO; n++) {
                        o[mi][n][2 * hh] *= inv[mi][hh];
                        o[mi][n][2 * hh + 1] *= inv[mi][hh];
                    }
                }
            if constexpr (TC) attn_store_rows_tc<WM, HS>(sQ + wrow * LDS, o, 1.f, out + (size_t)b * T * C + h * HS, C, wr0, T, lane, amax);
            else attn_store_rows<WM, HS, AMAX>(sQ + wrow * LDS, o, 1.f, out + (size_t)b * T * C + h * HS, C, wr0, T, lane, amax);
        }
    }
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
};

// TC: the attention-site casts (P^ and s^ recomputed as in the forward; AMAX ignored, run-time amax;
// the sparsity stage follows sDrow in the dynamic shared memory).
template <int HS, int WM, int NW, int BC, int MINB, bool AMAX = false, bool TC = false>
__global__ void __launch_bounds__(NW * 32, MINB)
attn_bwd_dq_tc_kernel(floatX* __restrict__ dqkv, float* __restrict__ Dbuf, const floatX* __restrict__ dout,
                      const floatX* __restrict__ qkv, const floatX* __restrict__ out,
                      const float* __restrict__ lse, int T, int NH, float scale, unsigned int* __restrict__ amax,
                      AttnTcastArgs tc) {
    constexpr int NT = NW * 32, BR = 16 * WM * NW, LDS = HS + 8;
    constexpr int KS = HS / 16, NS = BC / 8, NO = HS / 8, CPR = HS / 8;
    static_assert(HS % 64 == 0 && BC % 16 == 0, "HS must be a multiple of 64, BC of 16");
    static_assert(!TC || BC % 64 == 0, "TC: casting groups of up to 64 keys must not cross a key tile");
    constexpr int LDST = BC + 4;  // TC sparsity stage row

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
    float* stage = TC ? sDrow + BR + warp * 16 * WM * LDST : nullptr;
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
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NO; n++) dq[mi][n][0] = dq[mi][n][1] = dq[mi][n][2] = dq[mi][n][3] = 0.f;

    for (int j = 0; j < n_kv; j++) {
        const int buf = j & 1;
        if (j + 1 < n_kv) {
            attn_load_tile<HS, BC, NT>(sK + (buf ^ 1) * BC * LDS, gK, C3, (j + 1) * BC, T);
            attn_load_tile<HS, BC, NT>(sV + (buf ^ 1) * BC * LDS, gV, C3, (j + 1) * BC, T);
        }
        attn_cp_async_commit();
        attn_cp_async_wait<1>();
        __syncthreads();

        const int k0 = j * BC;
        if (live && k0 <= wr1) {
            if (j == 0) {
                attn_load_a<WM, KS, LDS>(qf, attn_smem_addr(sQ + wrow * LDS), lane);
                attn_load_a<WM, KS, LDS>(dof, attn_smem_addr(sdO + wrow * LDS), lane);
            }
            const uint32_t sKa = attn_smem_addr(sK + buf * BC * LDS);
            float s[WM][NS][4], dp[WM][NS][4];
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int n = 0; n < NS; n++)
                    #pragma unroll
                    for (int r = 0; r < 4; r++) s[mi][n][r] = dp[mi][n][r] = 0.f;
            attn_mma_abt<WM, NS, KS, LDS>(s, qf, sKa, lane);                                  // S  = Q K^T
            attn_mma_abt<WM, NS, KS, LDS>(dp, dof, attn_smem_addr(sV + buf * BC * LDS), lane); // dP = dO V^T

            if constexpr (TC) {  // s^, P^ exactly as the forward computes them, then dS = P^ (dP - D)
                if (k0 + BC - 1 > wr0) {
                    attn_tc_scores_q<true, false>(s, scale, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                    attn_tc_probs_q<true, false>(s, lse2, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                } else {
                    attn_tc_scores_q<false, false>(s, scale, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                    attn_tc_probs_q<false, false>(s, lse2, stage, LDST, wr0 + g, k0 + 2 * tq, T, tc, rbase, lane);
                }
                #pragma unroll
                for (int mi = 0; mi < WM; mi++)
                    #pragma unroll
                    for (int n = 0; n < NS; n++)
                        #pragma unroll
                        for (int r = 0; r < 4; r++) s[mi][n][r] = s[mi][n][r] * (dp[mi][n][r] - Dr[mi][r >> 1]);
            } else {
                if (k0 + BC - 1 > wr0) attn_dq_ds<true>(s, dp, lse2, Dr, scale, k0 + 2 * tq, wr0 + g);
                else attn_dq_ds<false>(s, dp, lse2, Dr, scale, k0 + 2 * tq, wr0 + g);
            }
            uint32_t dsa[WM][BC / 16][4];
            attn_c_to_a<WM, NS>(dsa, s);
            attn_mma_ab<WM, NO, BC / 16, LDS>(dq, dsa, sKa, lane);  // dQ += dS K
        }
        __syncthreads();
    }

    if (live) {
        if constexpr (TC) attn_store_rows_tc<WM, HS>(sQ + wrow * LDS, dq, scale, dqkv + (size_t)b * T * C3 + h * HS, C3, wr0, T, lane, amax);
        else attn_store_rows<WM, HS, AMAX>(sQ + wrow * LDS, dq, scale, dqkv + (size_t)b * T * C3 + h * HS, C3, wr0, T, lane, amax);
    }
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
};

// The dK/dV kernel's step once P^T (key-major, s) of a query tile is known: dV += P^T dO,
// dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q (s is overwritten with dS^T). vf: V's A fragments
// (reloaded from sVa unless KV_REGS); sQa, sdOa: the tile's Q and dO in shared memory; Dq: its D values.
template <int WM, int NS, int NO, int KS, int BR, int LDS, bool KV_REGS>
__device__ __forceinline__ void attn_dkv_accumulate(float (&dv)[WM][NO][4], float (&dk)[WM][NO][4], float (&s)[WM][NS][4],
                                                    uint32_t (&vf)[WM][KS][4], uint32_t sVa, uint32_t sQa, uint32_t sdOa,
                                                    const float* Dq, int tq, int lane) {
    uint32_t pa[WM][BR / 16][4];
    attn_c_to_a<WM, NS>(pa, s);
    attn_mma_ab<WM, NO, BR / 16, LDS>(dv, pa, sdOa, lane);  // dV += P^T dO
    float dp[WM][NS][4];
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NS; n++) dp[mi][n][0] = dp[mi][n][1] = dp[mi][n][2] = dp[mi][n][3] = 0.f;
    if (!KV_REGS) attn_load_a<WM, KS, LDS>(vf, sVa, lane);
    attn_mma_abt<WM, NS, KS, LDS>(dp, vf, sdOa, lane);  // dP^T = V dO^T
    #pragma unroll
    for (int n = 0; n < NS; n++) {
        const float2 dq2 = *reinterpret_cast<const float2*>(Dq + 2 * tq + n * 8);
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int r = 0; r < 4; r++) s[mi][n][r] *= dp[mi][n][r] - ((r & 1) ? dq2.y : dq2.x);  // dS^T
    }
    attn_c_to_a<WM, NS>(pa, s);
    attn_mma_ab<WM, NO, BR / 16, LDS>(dk, pa, sQa, lane);  // dK += dS^T Q
}

// TC: the attention-site casts along the keys, i.e. down the rows of S^T: every warp runs every query
// tile (warps with no visible key contribute zeros to groups that span warps) and the dynamic shared
// memory holds, after sD, the cross-warp group partials (2 sites x 3 x NW x BR words) and, when a site
// is M:N sparse, the sparsity stage (BK rows of BR + 4 floats). AMAX ignored (run-time amax).
template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB, bool AMAX = false, bool TC = false>
__global__ void __launch_bounds__(NW * 32, MINB)
attn_bwd_dkv_tc_kernel(floatX* __restrict__ dqkv, const floatX* __restrict__ dout, const floatX* __restrict__ qkv,
                       const float* __restrict__ lse, const float* __restrict__ Dbuf, int T, int NH, float scale,
                       unsigned int* __restrict__ amax, AttnTcastArgs tc) {
    constexpr int NT = NW * 32, BK = 16 * WM * NW, LDS = HS + 8;
    constexpr int KS = HS / 16, NS = BR / 8, NO = HS / 8;
    static_assert(HS % 16 == 0 && BR % 16 == 0, "tile sizes must be multiples of 16");
    static_assert(!TC || BK % 64 == 0, "TC: casting groups of up to 64 keys must not cross a CTA's keys");

    extern __shared__ __align__(16) unsigned char attn_smem[];
    floatX* sK = reinterpret_cast<floatX*>(attn_smem);  // BK rows; reused for dK staging
    floatX* sV = sK + BK * LDS;                          // BK rows; reused for dV staging
    floatX* sQ = sV + BK * LDS;                          // 2 x BR rows
    floatX* sdO = sQ + 2 * BR * LDS;                     // 2 x BR rows
    float* sL = reinterpret_cast<float*>(sdO + 2 * BR * LDS);  // 2 x BR lse values
    float* sD = sL + 2 * BR;                                   // 2 x BR D values
    uint32_t* tc_part = TC ? reinterpret_cast<uint32_t*>(sD + 2 * BR) : nullptr;  // TC: [site][3][NW][BR]
    float* tc_stage = TC ? reinterpret_cast<float*>(tc_part + 2 * 3 * NW * BR) : nullptr;  // TC: BK x (BR + 4)

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

    attn_load_tile<HS, BK, NT>(sK, gK, C3, k0, T);
    attn_load_tile<HS, BK, NT>(sV, gV, C3, k0, T);
    attn_load_tile<HS, BR, NT>(sQ, gQ, C3, i_begin * BR, T);
    attn_load_tile<HS, BR, NT>(sdO, gdO, C, i_begin * BR, T);
    attn_load_vec<BR>(sL, gL, i_begin * BR, T);
    attn_load_vec<BR>(sD, gD, i_begin * BR, T);
    attn_cp_async_commit();

    uint32_t kf[WM][KS][4], vf[WM][KS][4];
    float dk[WM][NO][4], dv[WM][NO][4];
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NO; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) dk[mi][n][r] = dv[mi][n][r] = 0.f;
    const uint32_t sKa = attn_smem_addr(sK + wrow * LDS), sVa = attn_smem_addr(sV + wrow * LDS);

    for (int i = i_begin; i < i_end; i++) {
        const int buf = (i - i_begin) & 1, nb = buf ^ 1;
        if (i + 1 < i_end) {
            attn_load_tile<HS, BR, NT>(sQ + nb * BR * LDS, gQ, C3, (i + 1) * BR, T);
            attn_load_tile<HS, BR, NT>(sdO + nb * BR * LDS, gdO, C, (i + 1) * BR, T);
            attn_load_vec<BR>(sL + nb * BR, gL, (i + 1) * BR, T);
            attn_load_vec<BR>(sD + nb * BR, gD, (i + 1) * BR, T);
        }
        attn_cp_async_commit();
        attn_cp_async_wait<1>();
        __syncthreads();

        if (KV_REGS && live && i == i_begin) {
            attn_load_a<WM, KS, LDS>(kf, sKa, lane);
            attn_load_a<WM, KS, LDS>(vf, sVa, lane);
        }
        const int qb = i * BR;
        if constexpr (TC) {
            // The same steps in the TensorCast form: cast calls are made by every warp (barriers inside
            // for groups that span warps); `active` warps have keys visible to the tile's queries.
            const bool active = live && qb + BR - 1 >= kw0;
            const uint32_t sQa = attn_smem_addr(sQ + buf * BR * LDS), sdOa = attn_smem_addr(sdO + buf * BR * LDS);
            const float* L = sL + buf * BR;
            const float* Dq = sD + buf * BR;
            const int row0 = kw0 + g, col0 = qb + 2 * tq;
            const uint64_t rbase = (uint64_t)bh * (uint64_t)T;
            float s[WM][NS][4];
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int n = 0; n < NS; n++) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
            if (active) {
                if (!KV_REGS) attn_load_a<WM, KS, LDS>(kf, sKa, lane);
                attn_mma_abt<WM, NS, KS, LDS>(s, kf, sQa, lane);  // S^T = K Q^T
                #pragma unroll
                for (int mi = 0; mi < WM; mi++)
                    #pragma unroll
                    for (int n = 0; n < NS; n++)
                        #pragma unroll
                        for (int r = 0; r < 4; r++) {  // v = raw * scale; keys after the query enter the groups as 0
                            float v = s[mi][n][r] * scale;
                            if (col0 + n * 8 + (r & 1) < row0 + mi * 16 + 8 * (r >> 1)) v = 0.f;
                            s[mi][n][r] = v;
                        }
            }
            attn_tc_cast_cols<ATTN_TC_SCORES, WM, NS, NW>(s, active, tc_stage, BR + 4, tc_part, warp, row0, col0, T,
                                                          tc.state[ATTN_TC_SCORES], rbase, lane);
            if (active) {
                #pragma unroll
                for (int n = 0; n < NS; n++) {
                    const float2 lq = *reinterpret_cast<const float2*>(L + n * 8 + 2 * tq);
                    const float lq2[2] = {lq.x * ATTN_LOG2E, lq.y * ATTN_LOG2E};
                    #pragma unroll
                    for (int mi = 0; mi < WM; mi++)
                        #pragma unroll
                        for (int r = 0; r < 4; r++) {
                            const bool masked = col0 + n * 8 + (r & 1) < row0 + mi * 16 + 8 * (r >> 1);
                            float p = attn_exp2(fmaf(masked ? -INFINITY : s[mi][n][r], ATTN_LOG2E, -lq2[r & 1]));
                            if (masked) p = 0.f;
                            s[mi][n][r] = p;
                        }
                }
            }
            attn_tc_cast_cols<ATTN_TC_PROBS, WM, NS, NW>(s, active, tc_stage, BR + 4, tc_part + 3 * NW * BR, warp, row0, col0, T,
                                                         tc.state[ATTN_TC_PROBS], rbase, lane);
            if (active) {
                #pragma unroll
                for (int mi = 0; mi < WM; mi++)
                    #pragma unroll
                    for (int n = 0; n < NS; n++)
                        #pragma unroll
                        for (int r = 0; r < 4; r++)
                            if (col0 + n * 8 + (r & 1) < row0 + mi * 16 + 8 * (r >> 1)) s[mi][n][r] = 0.f;
                attn_dkv_accumulate<WM, NS, NO, KS, BR, LDS, KV_REGS>(dv, dk, s, vf, sVa, sQa, sdOa, Dq, tq, lane);
            }
        } else if (live && qb + BR - 1 >= kw0) {  // some query of the tile sees some key of the warp
            const uint32_t sQa = attn_smem_addr(sQ + buf * BR * LDS), sdOa = attn_smem_addr(sdO + buf * BR * LDS);
            const float* L = sL + buf * BR;
            const float* Dq = sD + buf * BR;

            float s[WM][NS][4];
            #pragma unroll
            for (int mi = 0; mi < WM; mi++)
                #pragma unroll
                for (int n = 0; n < NS; n++) s[mi][n][0] = s[mi][n][1] = s[mi][n][2] = s[mi][n][3] = 0.f;
            if (!KV_REGS) attn_load_a<WM, KS, LDS>(kf, sKa, lane);
            attn_mma_abt<WM, NS, KS, LDS>(s, kf, sQa, lane);  // S^T = K Q^T

            // Mask only where some query of the tile precedes some key of the warp.
            if (qb < kw1) attn_dkv_p<true>(s, L, scale, qb + 2 * tq, kw0 + g, tq);
            else attn_dkv_p<false>(s, L, scale, qb + 2 * tq, kw0 + g, tq);
            attn_dkv_accumulate<WM, NS, NO, KS, BR, LDS, KV_REGS>(dv, dk, s, vf, sVa, sQa, sdOa, Dq, tq, lane);
        }
        __syncthreads();
    }

    if (live) {
        floatX* gdqkv = dqkv + (size_t)b * T * C3 + h * HS;
        if constexpr (TC) {
            attn_store_rows_tc<WM, HS>(sK + wrow * LDS, dk, scale, gdqkv + C, C3, kw0, T, lane, amax);
            attn_store_rows_tc<WM, HS>(sV + wrow * LDS, dv, 1.f, gdqkv + 2 * C, C3, kw0, T, lane, amax);
        } else {
            attn_store_rows<WM, HS, AMAX>(sK + wrow * LDS, dk, scale, gdqkv + C, C3, kw0, T, lane, amax);
            attn_store_rows<WM, HS, AMAX>(sV + wrow * LDS, dv, 1.f, gdqkv + 2 * C, C3, kw0, T, lane, amax);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Tensor-core launchers, one per kernel and configuration. The default configurations are chosen in
// attention_forward / attention_backward; dev/cuda/attention.cu can time the others (--sweep).

// Kernels that want more than 48 KiB of dynamic shared memory must say so first (per device, cheap).
template <typename Kernel>
static inline void attn_set_smem(Kernel kernel, size_t bytes) {
    if (bytes > 48 * 1024) cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// CNT: the --q115-stats counting instantiation (boundary.cuh); the plain builds never need it.
template <int HS, int WM, int NW, int BC, int MINB = 1, bool PL = kAttnProbsFromLse>
void attention_forward_tc(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream,
                          unsigned int* amax = nullptr) {
    using Cfg = AttnFwdTC<HS, WM, NW, BC, MINB>;
    auto kernel = attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, PL, false, false>;
    if (amax) kernel = attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, PL, false, true>;
    if constexpr (!boundary_is_identity<ATTN_SCORES>())
        if (boundary_stats_active())
            kernel = amax ? attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, PL, true, true> : attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, PL, true, false>;
    attn_set_smem(kernel, Cfg::smem_bytes);
    const dim3 grid(ceil_div(T, Cfg::BR), B * NH);
    kernel<<<grid, Cfg::NT, Cfg::smem_bytes, stream>>>(out, lse, qkv, T, NH, 1.0f / sqrtf((float)HS), amax, AttnTcastArgs{});
    cudaCheckLaunch();
}

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

template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB = 1>
void attention_backward_dkv_tc(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse,
                               const float* Dbuf, int B, int T, int NH, cudaStream_t stream, unsigned int* amax = nullptr) {
    using Cfg = AttnBwdDkvTC<HS, WM, NW, BR, KV_REGS, MINB>;
    auto kernel = amax ? attn_bwd_dkv_tc_kernel<HS, WM, NW, BR, KV_REGS, MINB, true>
                       : attn_bwd_dkv_tc_kernel<HS, WM, NW, BR, KV_REGS, MINB, false>;
    attn_set_smem(kernel, Cfg::smem_bytes);
    const dim3 grid(ceil_div(T, Cfg::BK), B * NH);
    kernel<<<grid, Cfg::NT, Cfg::smem_bytes, stream>>>(dqkv, dout, qkv, lse, Dbuf, T, NH, 1.0f / sqrtf((float)HS), amax,
                                                       AttnTcastArgs{});
    cudaCheckLaunch();
}

#if defined(ENABLE_TCAST)
// TensorCast launchers: the TC instantiations (attention_tcast.cuh), with the per-call seed and, in
// the forward, the --cast-stats counting instantiation while attention_tcast_stats is set. The
// dynamic shared memory grows by the sparsity stage only when a site is M:N sparse.
template <int HS, int WM, int NW, int BC, int MINB, bool PL>
void attention_forward_tc_cast(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, cudaStream_t stream,
                               unsigned int* amax, uint64_t seed) {
    using Cfg = AttnFwdTC<HS, WM, NW, BC, MINB>;
    const bool count = attn_tc_counting();
    auto kernel = count ? attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, PL, true, false, true>
                        : attn_fwd_tc_kernel<HS, WM, NW, BC, MINB, PL, false, false, true>;
    const size_t smem = Cfg::smem_bytes + (attn_tc_sparse() ? (size_t)NW * 16 * WM * (BC + 4) * sizeof(float) : 0);
    attn_set_smem(kernel, smem);
    const dim3 grid(ceil_div(T, Cfg::BR), B * NH);
    kernel<<<grid, Cfg::NT, smem, stream>>>(out, lse, qkv, T, NH, 1.0f / sqrtf((float)HS), amax, attn_tc_args(seed, count));
    cudaCheckLaunch();
}

template <int HS, int WM, int NW, int BC, int MINB>
void attention_backward_dq_tc_cast(floatX* dqkv, float* Dbuf, const floatX* dout, const floatX* qkv, const floatX* out,
                                   const float* lse, int B, int T, int NH, cudaStream_t stream, unsigned int* amax, uint64_t seed) {
    using Cfg = AttnBwdDqTC<HS, WM, NW, BC, MINB>;
    auto kernel = attn_bwd_dq_tc_kernel<HS, WM, NW, BC, MINB, false, true>;
    const size_t smem = Cfg::smem_bytes + (attn_tc_sparse() ? (size_t)NW * 16 * WM * (BC + 4) * sizeof(float) : 0);
    attn_set_smem(kernel, smem);
    const dim3 grid(ceil_div(T, Cfg::BR), B * NH);
    kernel<<<grid, Cfg::NT, smem, stream>>>(dqkv, Dbuf, dout, qkv, out, lse, T, NH, 1.0f / sqrtf((float)HS), amax,
                                            attn_tc_args(seed, false));
    cudaCheckLaunch();
}

template <int HS, int WM, int NW, int BR, bool KV_REGS, int MINB>
void attention_backward_dkv_tc_cast(floatX* dqkv, const floatX* dout, const floatX* qkv, const float* lse, const float* Dbuf,
                                    int B, int T, int NH, cudaStream_t stream, unsigned int* amax, uint64_t seed) {
    using Cfg = AttnBwdDkvTC<HS, WM, NW, BR, KV_REGS, MINB>;
    auto kernel = attn_bwd_dkv_tc_kernel<HS, WM, NW, BR, KV_REGS, MINB, false, true>;
    const size_t smem = Cfg::smem_bytes + (size_t)2 * 3 * NW * BR * sizeof(uint32_t) +
                        (attn_tc_sparse() ? (size_t)Cfg::BK * (BR + 4) * sizeof(float) : 0);
    attn_set_smem(kernel, smem);
    const dim3 grid(ceil_div(T, Cfg::BK), B * NH);
    kernel<<<grid, Cfg::NT, smem, stream>>>(dqkv, dout, qkv, lse, Dbuf, T, NH, 1.0f / sqrtf((float)HS), amax,
                                            attn_tc_args(seed, false));
    cudaCheckLaunch();
}
#endif

// ------------------------------------------------------------------------------------------------
// Generic path: one warp per row, keys (or queries) streamed through shared memory in chunks of 32,
// one per lane; each lane owns head dimensions lane, lane+32, ... (DPL of them). fp32 throughout;
// P is rounded to floatX before P.V exactly as in the tensor-core path.

#define ATTN_GEN_ROWS 8   // warps (rows) per block
#define ATTN_GEN_CHUNK 32 // keys (queries) per shared-memory chunk: one per lane

__device__ __forceinline__ float attn_warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float attn_warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
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

// Forward, one warp per query row. PL (kProbsFromLse): pass 1 = online max/sum only (K chunks only),
// pass 2 = P^ from lse and O = sum P^ V without rescaling (see the header comment).
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
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r0 = (gridDim.x - 1 - blockIdx.x) * ATTN_GEN_ROWS, row = r0 + warp;
    const bool live = row < T;
    const floatX* base = qkv + (size_t)b * T * C3 + h * HS;
    float* q = sq + warp * HS;
    float* pw = sp + warp * ATTN_GEN_CHUNK;
    if (live)
        for (int d = lane; d < HS; d += 32) q[d] = (float)base[(size_t)row * C3 + d];

    float o[DPL];
    #pragma unroll
    for (int i = 0; i < DPL; i++) o[i] = 0.f;
    float m = -INFINITY, l = 0.f;
    const int last = min(r0 + ATTN_GEN_ROWS, T) - 1;
    // The only pass (PL = false), or pass 1: row statistics (PL = true).
    for (int c0 = 0; c0 <= last; c0 += ATTN_GEN_CHUNK) {
        __syncthreads();  // previous chunk fully consumed
        attn_gen_load2<!PL>(sK, sV, base, C3, C, 2 * C, c0, T, HS);
        __syncthreads();
        if (!live || c0 > row) continue;
        const int key = c0 + lane;
        float s = -INFINITY;
        if (key <= row) {
            float dot = 0.f;
            for (int d = 0; d < HS; d++) dot = fmaf(q[d], sK[lane * LDK + d], dot);
            s = attn_gen_score(dot, scale);
        }
        const float m_new = fmaxf(m, attn_warp_max(s));  // chunk 0 has key 0 <= row: finite
        const float alpha = expf(m - m_new);
        const float p = key <= row ? expf(s - m_new) : 0.f;
        l = l * alpha + attn_warp_sum(p);
        m = m_new;
        if constexpr (!PL) {
            pw[lane] = attn_round_x(boundary_value<ATTN_PROBS>(p));
            __syncwarp();
            #pragma unroll
            for (int i = 0; i < DPL; i++) {
                const int d = lane + 32 * i;
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
        if (live && lane == 0) lse[(size_t)bh * T + row] = lse_r;
        // Pass 2.
        for (int c0 = 0; c0 <= last; c0 += ATTN_GEN_CHUNK) {
            __syncthreads();
            attn_gen_load2(sK, sV, base, C3, C, 2 * C, c0, T, HS);
            __syncthreads();
            if (!live || c0 > row) continue;
            const int key = c0 + lane;
            float p = 0.f;
            if (key <= row) {
                float dot = 0.f;
                for (int d = 0; d < HS; d++) dot = fmaf(q[d], sK[lane * LDK + d], dot);
                p = attn_gen_prob_from_lse(dot, scale, lse_r);
            }
            pw[lane] = attn_round_x(p);
            __syncwarp();
            #pragma unroll
            for (int i = 0; i < DPL; i++) {
                const int d = lane + 32 * i;
                if (d < HS) {
                    float acc = 0.f;
                    for (int k = 0; k < ATTN_GEN_CHUNK; k++) acc = fmaf(pw[k], sV[k * LDK + d], acc);
                    o[i] += acc;
                }
            }
            __syncwarp();
        }
        if (live) {
            floatX* orow = out + ((size_t)b * T + row) * C + h * HS;
            unsigned int am = 0;
            #pragma unroll
            for (int i = 0; i < DPL; i++)
                if (lane + 32 * i < HS) am = max(am, attn_gen_store(orow + lane + 32 * i, o[i]));
            if (amax) warp_amax_accumulate(amax, am);  // (live is warp-uniform: one warp per row)
        }
    } else {
        if (live) {
            floatX* orow = out + ((size_t)b * T + row) * C + h * HS;
            unsigned int am = 0;
            #pragma unroll
            for (int i = 0; i < DPL; i++)
                if (lane + 32 * i < HS) am = max(am, attn_gen_store(orow + lane + 32 * i, o[i] / l));
            if (amax) warp_amax_accumulate(amax, am);
            if (lane == 0) lse[(size_t)bh * T + row] = m + logf(l);
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
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r0 = (gridDim.x - 1 - blockIdx.x) * ATTN_GEN_ROWS, row = r0 + warp;
    const bool live = row < T;
    const floatX* base = qkv + (size_t)b * T * C3 + h * HS;
    float* q = sq + warp * HS;
    float* dov = sdo + warp * HS;
    float* dsw = sds + warp * ATTN_GEN_CHUNK;

    float D = 0.f, lse_r = 0.f;
    if (live) {
        const floatX* dorow = dout + ((size_t)b * T + row) * C + h * HS;
        const floatX* orow = out + ((size_t)b * T + row) * C + h * HS;
        float part = 0.f;
        for (int d = lane; d < HS; d += 32) {
            q[d] = (float)base[(size_t)row * C3 + d];
            dov[d] = (float)dorow[d];
            part = fmaf(dov[d], (float)orow[d], part);
        }
        D = attn_warp_sum(part);
        if (lane == 0) Dbuf[(size_t)bh * T + row] = D;
        lse_r = lse[(size_t)bh * T + row];
    }
    float dq[DPL];
    #pragma unroll
    for (int i = 0; i < DPL; i++) dq[i] = 0.f;
    const int last = min(r0 + ATTN_GEN_ROWS, T) - 1;
    for (int c0 = 0; c0 <= last; c0 += ATTN_GEN_CHUNK) {
        __syncthreads();
        attn_gen_load2(sK, sV, base, C3, C, 2 * C, c0, T, HS);
        __syncthreads();
        if (!live || c0 > row) continue;
        const int key = c0 + lane;
        float ds = 0.f;
        if (key <= row) {
            float dot = 0.f, dp = 0.f;
            for (int d = 0; d < HS; d++) {
                dot = fmaf(q[d], sK[lane * LDK + d], dot);
                dp = fmaf(dov[d], sV[lane * LDK + d], dp);
            }
            const float p = attn_gen_prob_from_lse(dot, scale, lse_r);
            ds = p * (dp - D);
        }
        dsw[lane] = ds;
        __syncwarp();
        #pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + 32 * i;
            if (d < HS)
                for (int k = 0; k < ATTN_GEN_CHUNK; k++) dq[i] = fmaf(dsw[k], sK[k * LDK + d], dq[i]);
        }
        __syncwarp();
    }
    if (live) {
        floatX* dqrow = dqkv + ((size_t)b * T + row) * C3 + h * HS;
        unsigned int am = 0;
        #pragma unroll
        for (int i = 0; i < DPL; i++)
            if (lane + 32 * i < HS) am = max(am, attn_gen_store(dqrow + lane + 32 * i, dq[i] * scale));
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

// ------------------------------------------------------------------------------------------------
// Dispatch. The tensor-core path needs 16-bit floatX, HS in {64, 128} and 16-byte aligned tensors
// (it moves 8 elements per access; C = NH*HS is then a multiple of 8 as well).

static inline bool attn_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Default tile configurations: HS, WM (16-row tiles per warp), NW (warps), key tile (forward, dQ) or
// query tile (dK/dV)[, KV_REGS], MINB (min CTAs per SM for __launch_bounds__; 1 = no register cap).
// dev/cuda/attention.cu --sweep times alternatives on the GPT-2 124M shape.
#define ATTN_FWD_CFG_64 64, 2, 4, 64, 1
#define ATTN_FWD_CFG_128 128, 1, 4, 64, 1
#define ATTN_DQ_CFG_64 64, 1, 4, 64, 1
#define ATTN_DQ_CFG_128 128, 1, 4, 32, 1
#define ATTN_DKV_CFG_64 64, 1, 8, 64, true, 1
#define ATTN_DKV_CFG_128 128, 1, 4, 32, false, 1
// TC (TensorCast) instantiations: the HS = 64 configurations above (key tiles of 64: no casting group crosses one).

#if defined(ENABLE_TCAST)
// The attention casts run only in the tensor-core kernels: stop with `error:` otherwise.
// The cast instantiations exist for HS = 64 only (every GPT-2 size: d12 .. d48), and the forward only
// in its two-pass form (a scores-only cast runs it too): each is a large kernel for ptxas, and four of
// them (forward with and without --cast-stats counting, dQ, dK/dV) keep the TCAST=1 build's compile
// time bearable: with twelve (HS 64 and 128, one- and two-pass forward) ptxas alone ran for more than
// 20 minutes on train_gpt2.cu (7 GB resident) and the build did not finish in 9 minutes on the device.
static inline void attn_tc_require_tc(int HS, bool aligned) {
    if (HS == 64 && aligned) return;
    const int k = attn_tc_host[ATTN_TC_SCORES].on ? ATTN_TC_SCORES : ATTN_TC_PROBS;
    die("--cast %s=%s: the attention casts run in the tensor-core kernels, which need head size 64 and "
        "16-byte aligned tensors (head size %d%s)", BOUNDARY_SITE_NAMES[k == ATTN_TC_SCORES ? ATTN_SCORES : ATTN_PROBS],
        attn_tc_host[k].dt.name, HS, aligned ? "" : ", unaligned pointers");
}
#endif

// Templated on the element type only so that the tensor-core kernels are never instantiated in
// fp32 builds (if constexpr discards the dependent branch).
template <bool PL, typename T>
static inline bool attn_forward_tc_dispatch(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int HS,
                                            cudaStream_t stream, unsigned int* amax, uint64_t tcast_seed = 0) {
    if constexpr (sizeof(T) == 2) {
#if defined(ENABLE_TCAST)
        if (attention_tcast_active()) {  // TC instantiation, HS = 64, always the two-pass forward (see attn_tc_require_tc)
            attn_tc_require_tc(HS, attn_aligned16(out) && attn_aligned16(qkv));
            attention_forward_tc_cast<ATTN_FWD_CFG_64, true>(out, lse, qkv, B, Tn, NH, stream, amax, tcast_seed);
            return true;
        }
#endif
        (void)tcast_seed;
        if (!attn_aligned16(out) || !attn_aligned16(qkv)) return false;
        if (HS == 64) { attention_forward_tc<ATTN_FWD_CFG_64, PL>(out, lse, qkv, B, Tn, NH, stream, amax); return true; }
        if (HS == 128) { attention_forward_tc<ATTN_FWD_CFG_128, PL>(out, lse, qkv, B, Tn, NH, stream, amax); return true; }
    }
    return false;
}

template <typename T>
static inline bool attn_backward_tc_dispatch(T* dqkv, float* Dbuf, const T* dout, const T* qkv, const T* out,
                                             const float* lse, int B, int Tn, int NH, int HS, cudaStream_t stream,
                                             unsigned int* amax, uint64_t tcast_seed = 0) {
    if constexpr (sizeof(T) == 2) {
#if defined(ENABLE_TCAST)
        if (attention_tcast_active()) {
            attn_tc_require_tc(HS, attn_aligned16(dqkv) && attn_aligned16(dout) && attn_aligned16(qkv) && attn_aligned16(out));
            attention_backward_dq_tc_cast<ATTN_DQ_CFG_64>(dqkv, Dbuf, dout, qkv, out, lse, B, Tn, NH, stream, amax, tcast_seed);
            attention_backward_dkv_tc_cast<ATTN_DKV_CFG_64>(dqkv, dout, qkv, lse, Dbuf, B, Tn, NH, stream, amax, tcast_seed);
            return true;
        }
#endif
        (void)tcast_seed;
        if (!attn_aligned16(dqkv) || !attn_aligned16(dout) || !attn_aligned16(qkv) || !attn_aligned16(out)) return false;
        if (HS == 64) {
            attention_backward_dq_tc<ATTN_DQ_CFG_64>(dqkv, Dbuf, dout, qkv, out, lse, B, Tn, NH, stream, amax);
            attention_backward_dkv_tc<ATTN_DKV_CFG_64>(dqkv, dout, qkv, lse, Dbuf, B, Tn, NH, stream, amax);
            return true;
        }
        if (HS == 128) {
            attention_backward_dq_tc<ATTN_DQ_CFG_128>(dqkv, Dbuf, dout, qkv, out, lse, B, Tn, NH, stream, amax);
            attention_backward_dkv_tc<ATTN_DKV_CFG_128>(dqkv, dout, qkv, lse, Dbuf, B, Tn, NH, stream, amax);
            return true;
        }
    }
    return false;
}

static inline void attn_check_shape(int B, int T, int C, int NH) {
    if (NH <= 0 || C % NH != 0) {
        fprintf(stderr, "error: attention: C = %d is not a multiple of NH = %d\n", C, NH);
        exit(EXIT_FAILURE);
    }
    if (B <= 0 || T <= 0 || (long)B * NH > 65535) {  // (b, h) pairs index gridDim.y
        fprintf(stderr, "error: attention: unsupported B = %d, T = %d, NH = %d (need B*NH <= 65535)\n", B, T, NH);
        exit(EXIT_FAILURE);
    }
}

// Forward with an explicit mode: PL = false single pass, PL = true two passes (P from the final
// lse). attention_forward uses the build's kAttnProbsFromLse; dev/cuda/attention.cu also runs PL =
// true in the plain builds, where both modes compute the same attention, to test the second pass
// without a quantizer.
// TensorCast build with an attention cast configured: the TC instantiations (PL = true whenever the
// probabilities are cast, whatever PL says); tcast_seed: the stochastic-rounding seed of this call.
template <bool PL>
static inline void attention_forward_mode(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                          cudaStream_t stream, unsigned int* amax = nullptr, uint64_t tcast_seed = 0) {
    attn_check_shape(B, T, C, NH);
    const int HS = C / NH;
    if (attn_forward_tc_dispatch<PL>(out, lse, qkv, B, T, NH, HS, stream, amax, tcast_seed)) return;
    attention_forward_generic<PL>(out, lse, qkv, B, T, NH, HS, stream, amax);
}

// Causal self-attention forward.
//   out (B,T,C) floatX   <- softmax(Q K^T / sqrt(HS) + causal mask) V per head, heads side by side
//   lse (B,NH,T) float   <- natural-log log-sum-exp of each row of the scaled, masked scores
//   qkv (B,T,3C) floatX  :  [q | k | v], head h at columns h*HS.. of each third, HS = C/NH
// With boundary hooks (SF16): scores s^ = boundary(scaled score), lse over s^, and
// out_i = sum_j boundary(exp(s^_ij - lse_i)) v_j (normalized probabilities through the hook; two
// passes over the keys, see the header comment).
// No temporary memory: the T x T scores exist only tile by tile in registers (online softmax,
// Milakov & Gimelshein 2018; FlashAttention-2 tiling, Dao 2023). Softmax statistics and all
// accumulation in fp32. Deterministic. Uses the tensor-core kernel for bf16/fp16 with HS 64 or 128
// and 16-byte aligned pointers, the generic kernel otherwise (HS <= 256). Asynchronous on `stream`.
// amax: NULL, or a device uint32 that receives max(*amax, bit pattern of max |out|) over the stored
// (rounded) outputs (integer atomicMax per warp: the FP8 backend's amax slot of the attention
// projection's input, gemm_amax_slot, so that its quantization needs no amax pass).
// TensorCast build (attention_tcast_configure): the attn_scores / attn_probs casts of doc/TCAST.md 5.1;
// tcast_seed seeds their stochastic rounding and must be the same for a layer's forward and backward
// (ignored by every other build and by non-stochastic datatypes).
void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH, cudaStream_t stream,
                       unsigned int* amax = nullptr, uint64_t tcast_seed = 0) {
    attention_forward_mode<kAttnProbsFromLse>(out, lse, qkv, B, T, C, NH, stream, amax, tcast_seed);
}

// Causal self-attention backward (gradients of attention_forward).
//   dqkv    (B,T,3C) floatX <- [dq | dk | dv], every element overwritten (not accumulated)
//   scratch (B,NH,T) float  :  caller-provided workspace of B*NH*T floats, receives D = rowsum(dout*out)
//   dout    (B,T,C) floatX, qkv (B,T,3C) floatX, out (B,T,C) floatX and lse (B,NH,T) float as
//   produced by attention_forward for the same qkv.
// With boundary hooks the gradient passes straight through both quantizers (their derivative is
// taken as 1), with the forward's P^ and s^ in the softmax Jacobian: dV = P^T dO, dP = dO V^T,
// D = rowsum(dO * O) = sum_j P^_ij dP_ij, dS = P^ (dP - D), dQ = scale dS K, dK = scale dS^T Q.
// P is recomputed from lse (exact softmax, no T x T buffer); dS = P (dP - D) as in the
// FlashAttention-2 backward pass (Dao 2023). Two kernels instead of atomics make it bit-deterministic: one over query
// tiles (D, dQ), then one over key tiles (dK, dV). fp32 accumulation. Asynchronous on `stream`.
// amax: NULL, or a device uint32 that receives max(*amax, bit pattern of max |dqkv|) as in
// attention_forward (the amax slot of the qkv layer's dout).
// TensorCast build: recomputes the forward's cast s^ and P^ bit for bit (same tcast_seed as the forward)
// and passes the gradients straight through both casts.
void attention_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int C, int NH, cudaStream_t stream, unsigned int* amax = nullptr,
                        uint64_t tcast_seed = 0) {
    attn_check_shape(B, T, C, NH);
    const int HS = C / NH;
    if (attn_backward_tc_dispatch(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS, stream, amax, tcast_seed)) return;
    attention_backward_generic(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS, stream, amax);
}
