// attention_tile.cuh - the tile pipeline of the tensor-core flash kernels (attention_flash_fwd.cuh,
// attention_flash_bwd.cuh): the hooked score and probability expressions every kernel shares, the
// cp.async tile loads and the double-buffered key-tile step, the fragment matmul loops (Q.K^T and
// P.V shapes, accumulators reused as the next A operand), the epilogue store, and the per-tile
// elementwise steps on the score fragments (iteration, causal mask, the forward's online softmax and
// its second pass, the backward's P^ and dS). The TensorCast forms of the steps are in
// attention_tcast_cast.cuh.
#pragma once

#include <stdint.h>
#include <math.h>
#include <type_traits>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/kernels/attention/attention_ptx.cuh"
#include "llmc/kernels/attention/attention_common.cuh"

// The two hooked quantities, one expression each, shared by every kernel (tensor-core path: exp2 on
// the SFU with lse2 = lse * log2(e)). raw = the fp32 dot product q.k.
// Scores are kept in units of the mode's boundary grid (boundary_unit(): 2^-15 in SF16, 1 elsewhere), which saves the
// quantizer's final product: su = attn_score(raw, scale) with su * unit == boundary_value<ATTN_SCORES>(raw * scale)
// exactly, and every exp2 argument takes ATTN_LOG2E_U = log2(e) * unit instead of log2(e), which gives the same fp32
// values (the FMA's product is exact, and a power-of-two factor commutes with the rounding). So s^ and P^ are those of
// the unscaled expressions bit for bit. POW2: scale is a power of two (1 / sqrt(HS) for HS = 4^k, attn_scale_pow2; the
// launchers pass exactly 1 / sqrtf(HS)), which the boundary folds into its clamp and rounding.
// CNT: whether the hooks may count --q115-stats (boundary.cuh): true only in the forward kernels'
// counting instantiation, never in the backward, so that training kernels carry no statistics code.
constexpr float ATTN_LOG2E_U = ATTN_LOG2E * boundary_unit();
template <int HS>
__host__ __device__ constexpr bool attn_scale_pow2() { return HS > 0 && (HS & (HS - 1)) == 0 && (HS & 0x55555555) != 0; }
// u * unit (a running max kept in units), without the product where the unit is 1. The product is exact and written
// __fmul_rn, so that --use_fast_math cannot contract it with an addition after it (lse = m + log(l): an FMA on m * unit
// would round log(l)'s product where the unscaled expression's FMA does not, and lse moved by an ulp now and then).
__device__ __forceinline__ float attn_from_units(float u) {
    if constexpr (boundary_unit() == 1.0f) return u;
    else return __fmul_rn(u, boundary_unit());
}
template <bool CNT, bool POW2>
__device__ __forceinline__ float attn_score(float raw, float scale) {
    return boundary_scaled_value_units<ATTN_SCORES, CNT, POW2>(raw, scale);
}
// P^ in units: P^ / unit. Every product that takes P^ (P.V in the forward's second pass, dV += P^T dO, dS = P^ (dP - D)
// and through dS dQ and dK) then accumulates its result / unit, and the kernel's store multiplies by unit once per
// output element instead of once per score: a power-of-two factor commutes with the BF16 conversion of the mma
// operands and with every fp32 product and sum, so the stored values are the same bits (doc/SF16.md, "in units").
template <bool CNT>
__device__ __forceinline__ float attn_prob_units(float su, float lse2) {
    return boundary_value_units<ATTN_PROBS, CNT>(attn_exp2(fmaf(su, ATTN_LOG2E_U, -lse2)));
}
// The backward's P^ / unit, recomputed from the dot product and the stored lse (lse2 = lse * log2(e)).
template <bool POW2>
__device__ __forceinline__ float attn_prob_units_from_lse(float raw, float scale, float lse2) {
    return attn_prob_units<false>(attn_score<false, POW2>(raw, scale), lse2);
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
// padded tile; rows >= T are zero-filled. When NT is a multiple of the 16-byte chunks per row (CPR), every
// thread copies the same chunk column of rows r0, r0 + NT/CPR, ...: its source pointer, shared-memory
// address and row are computed once per call and stepped by constants, instead of a division and a 64-bit
// multiply and a 64-bit select per chunk (ncu, H200, session 16: ~100 of the 907 instructions a warp spends per key
// tile of the TensorCast forward's output pass went to these addresses). Same copies either way.
template <int HS, int ROWS, int NT>
__device__ __forceinline__ void attn_load_tile(floatX* s, const floatX* g, int ld, int row0, int T) {
    constexpr int CPR = HS / 8, LDS = HS + 8, TOTAL = ROWS * CPR;
    if constexpr (NT % CPR == 0) {
        constexpr int RPI = NT / CPR;  // rows per round
        const unsigned tid = threadIdx.x;
        const int r0 = (int)(tid / CPR), col = (int)(tid % CPR) * 8;
        const floatX* src = g + (size_t)(row0 + r0) * ld + col;
        const size_t step = (size_t)RPI * ld;
        const uint32_t dst = attn_smem_addr(s + r0 * LDS + col);
        #pragma unroll
        for (int i = 0; i < (ROWS + RPI - 1) / RPI; i++) {
            if (ROWS % RPI == 0 || r0 + i * RPI < ROWS) {
                // a row >= T passes its (out-of-range) address with src-size 0: cp.async then reads no
                // bytes and zero-fills (PTX ISA, cp.async), so no select of a safe address per chunk
                const bool valid = row0 + r0 + i * RPI < T;
                attn_cp_async16(dst + (uint32_t)(i * RPI * LDS * sizeof(floatX)), src + i * step, valid);
            }
        }
    } else {
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

// Step j of the key-tile loop of the query-major kernels (forward, dQ), j = 0 .. n_kv-1 over tiles of
// BC keys double-buffered in sK / sV (2 x BC rows each): starts the cp.async copy of tile j+1 into
// the other buffer, waits for tile j (and what was committed with tile 0, which the kernel loads up
// front) and returns its buffer. The loop body ends with a barrier, so that every warp is done with a
// buffer before it is refilled. LOAD_V = false streams K only (pass 1 of the two-pass forward).
template <int HS, int BC, int NT, bool LOAD_V>
__device__ __forceinline__ int attn_kv_next(floatX* sK, floatX* sV, const floatX* gK, const floatX* gV, int ld, int j, int n_kv, int T) {
    constexpr int LDS = HS + 8;
    const int buf = j & 1;
    if (j + 1 < n_kv) {
        attn_load_tile<HS, BC, NT>(sK + (buf ^ 1) * BC * LDS, gK, ld, (j + 1) * BC, T);
        if (LOAD_V) attn_load_tile<HS, BC, NT>(sV + (buf ^ 1) * BC * LDS, gV, ld, (j + 1) * BC, T);
    }
    attn_cp_async_commit();  // possibly empty: keeps the group count uniform
    attn_cp_async_wait<1>();  // tile j (and what was committed with tile 0) have landed
    __syncthreads();
    return buf;
}

// acc[mi][n] += A[mi] . B for the B fragments of a tile in shared memory (smem byte address sX, row
// stride LDS elements), in both orientations: TRANS = false for X stored with rows = output columns n
// and columns = reduction index k (B = X^T), TRANS = true for rows = k and columns = n (B = X, the
// row-major 8x8 blocks turned k-major by ldmatrix.trans). One ldmatrix.x4 yields the B fragments of
// two n-tiles for one k-step.
template <int WM, int NTILE, int KS, int LDS, bool TRANS>
__device__ __forceinline__ void attn_mma_smem(float (&acc)[WM][NTILE][4], const uint32_t (&a)[WM][KS][4], uint32_t sX, int lane) {
    static_assert(NTILE % 2 == 0, "n-tiles come in pairs");
    uint32_t base;
    if constexpr (TRANS) base = sX + (((lane & 7) + (((lane >> 3) & 1) << 3)) * LDS + (lane >> 4) * 8) * 2;
    else base = sX + (((lane & 7) + ((lane >> 4) << 3)) * LDS + ((lane >> 3) & 1) * 8) * 2;
    #pragma unroll
    for (int ks = 0; ks < KS; ks++)
        #pragma unroll
        for (int np = 0; np < NTILE / 2; np++) {
            uint32_t b[4];
            if constexpr (TRANS) attn_ldsm_x4_trans(b, base + (ks * 16 * LDS + np * 16) * 2);
            else attn_ldsm_x4(b, base + (np * 16 * LDS + ks * 16) * 2);
            #pragma unroll
            for (int mi = 0; mi < WM; mi++) {
                attn_mma<floatX>(acc[mi][2 * np], a[mi][ks], b[0], b[1]);
                attn_mma<floatX>(acc[mi][2 * np + 1], a[mi][ks], b[2], b[3]);
            }
        }
}

// acc[mi][n] += A[mi] . X^T, with X an (8*NTILE) x (16*KS) tile stored row-major in shared memory
// (rows = output columns n, columns = reduction index k): the Q.K^T shape.
template <int WM, int NTILE, int KS, int LDS>
__device__ __forceinline__ void attn_mma_abt(float (&acc)[WM][NTILE][4], const uint32_t (&a)[WM][KS][4],
                                             uint32_t sX, int lane) {
    attn_mma_smem<WM, NTILE, KS, LDS, false>(acc, a, sX, lane);
}

// acc[mi][n] += A[mi] . X, with X a (16*KS) x (8*NTILE) tile stored row-major in shared memory
// (rows = reduction index k, columns = output columns n): the P.V shape.
template <int WM, int NTILE, int KS, int LDS>
__device__ __forceinline__ void attn_mma_ab(float (&acc)[WM][NTILE][4], const uint32_t (&a)[WM][KS][4],
                                            uint32_t sX, int lane) {
    attn_mma_smem<WM, NTILE, KS, LDS, true>(acc, a, sX, lane);
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

// The epilogue store of every tensor-core kernel: attn_store_rows with the amax output chosen at
// compile time (AMAX) or, in a TC kernel, at run time (TC kernels are not instantiated per AMAX;
// their cost is elsewhere).
template <int WM, int HS, bool AMAX, bool TC>
__device__ __forceinline__ void attn_store_tile(floatX* sRows, const float (&acc)[WM][HS / 8][4], float mul, floatX* g, int ld,
                                                int row0, int T, int lane, unsigned int* amax) {
    if constexpr (TC) {
        if (amax) attn_store_rows<WM, HS, true>(sRows, acc, mul, g, ld, row0, T, lane, amax);
        else attn_store_rows<WM, HS, false>(sRows, acc, mul, g, ld, row0, T, lane, amax);
    } else {
        attn_store_rows<WM, HS, AMAX>(sRows, acc, mul, g, ld, row0, T, lane, amax);
    }
}

// Per-tile elementwise steps. s holds C fragments of a score tile: for 16-row tile mi, element r of
// n-tile n sits at row row0 + 16*mi + 8*(r/2) and column col0 + 8*n + (r%2), where row0 and col0
// are this thread's first row and column (g and 2*tq offsets included). MASK is a template
// parameter so that tiles off the diagonal carry no masking code at all.

// Calls f(mi, n, r) for every element of this thread's C fragments of a (16*WM) x (8*NS) tile, in
// the order mi, n, r (fully unrolled): the loop every elementwise step below runs.
template <int WM, int NS, typename F>
__device__ __forceinline__ void attn_frag_each(F&& f) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NS; n++)
            #pragma unroll
            for (int r = 0; r < 4; r++) f(mi, n, r);
}

// The same over a key-major tile (dK/dV kernel: rows are keys, columns queries), n-tile by n-tile,
// with the value of element r's query column read from the per-query vector V (V[0] is query
// col0 - 2*tq): f(mi, n, r, v), v = V[query] (times log2(e) when LOG2, for lse).
template <int WM, int NS, bool LOG2, typename F>
__device__ __forceinline__ void attn_frag_each_col(const float* V, int tq, F&& f) {
    #pragma unroll
    for (int n = 0; n < NS; n++) {
        const float2 vq = *reinterpret_cast<const float2*>(V + n * 8 + 2 * tq);
        const float v2[2] = {LOG2 ? vq.x * ATTN_LOG2E : vq.x, LOG2 ? vq.y * ATTN_LOG2E : vq.y};
        #pragma unroll
        for (int mi = 0; mi < WM; mi++)
            #pragma unroll
            for (int r = 0; r < 4; r++) f(mi, n, r, v2[r & 1]);
    }
}

// Zero a tile of fp32 accumulators.
template <int WM, int NS>
__device__ __forceinline__ void attn_frag_zero(float (&x)[WM][NS][4]) {
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int n = 0; n < NS; n++) x[mi][n][0] = x[mi][n][1] = x[mi][n][2] = x[mi][n][3] = 0.f;
}

// The causal mask of element (mi, n, r): the key comes after the query. Query-major tiles (KMAJ =
// false: rows are queries, columns keys) or key-major ones (KMAJ = true: rows keys, columns queries).
template <bool KMAJ>
__device__ __forceinline__ bool attn_masked(int col0, int row0, int mi, int n, int r) {
    const int col = col0 + n * 8 + (r & 1), row = row0 + mi * 16 + 8 * (r >> 1);
    return KMAJ ? col < row : col > row;
}

// Sum over the 4 lanes of a quad (the lanes holding one row of a C fragment), in a fixed order.
__device__ __forceinline__ float attn_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

// Forward online-softmax step: scale, hook (and mask) the scores, raise the running row max m,
// rescale the running sum l and the output accumulator o by exp(m_old - m_new), and leave the hooked,
// not yet normalized probabilities exp(s - m_new) in s. Rows span the 4 lanes of a quad.
// STATS (pass 1 of the two-pass forward): only m and l are updated; o and s are left alone.
// PRE (TC kernels): s already holds the hooked scores s^, masked entries -inf (attn_tc_cast_q).
// m holds the running max in the scores' units (attn_score); lse = attn_from_units(m) + log(l).
// STATS with scores the mode bounds (boundary_max_units finite, SF16: |s^| <= 1): m is that bound from the first tile
// on, l = sum exp(s^ - bound) <= T cannot overflow, and the row max, its shuffles and the rescaling drop out; lse is
// the same quantity (its fp32 rounding may differ from the running-max form's in the last bit).
template <bool MASK, bool STATS, bool CNT, bool PRE = false, bool POW2 = false, int WM, int NS, int NO>
__device__ __forceinline__ void attn_fwd_softmax(float (&s)[WM][NS][4], float (&o)[WM][NO][4], float (&m)[WM][2],
                                                 float (&l)[WM][2], float scale, int col0, int row0) {
    static_assert(!PRE || boundary_unit() == 1.0f, "PRE: the TensorCast kernels' s^ is in natural units");
    constexpr float BOUND = boundary_max_units();
    #pragma unroll
    for (int mi = 0; mi < WM; mi++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int row = row0 + mi * 16 + 8 * hh;
            if constexpr (STATS && !PRE && BOUND < __builtin_huge_valf()) {  // fixed row max (above)
                constexpr float mb = BOUND * ATTN_LOG2E_U;
                float sum = 0.f;
                #pragma unroll
                for (int n = 0; n < NS; n++)
                    #pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float v = attn_score<CNT, POW2>(s[mi][n][2 * hh + e], scale);
                        if (MASK && col0 + n * 8 + e > row) v = -INFINITY;
                        sum += attn_exp2(fmaf(v, ATTN_LOG2E_U, -mb));
                    }
                m[mi][hh] = BOUND;
                l[mi][hh] += sum;
                continue;
            }
            float mx = -INFINITY;
            #pragma unroll
            for (int n = 0; n < NS; n++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    float v = PRE ? s[mi][n][2 * hh + e] : attn_score<CNT, POW2>(s[mi][n][2 * hh + e], scale);
                    if (!PRE && MASK && col0 + n * 8 + e > row) v = -INFINITY;
                    s[mi][n][2 * hh + e] = v;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // The first tile holds key 0 <= row for every row, so m_new is finite from the start
            // and exp2(-inf) = 0 cleanly discards the empty initial state.
            const float m_new = fmaxf(m[mi][hh], mx);
            const float alpha = attn_exp2((m[mi][hh] - m_new) * ATTN_LOG2E_U);
            m[mi][hh] = m_new;
            if constexpr (!STATS) {
                #pragma unroll
                for (int n = 0; n < NO; n++) {
                    o[mi][n][2 * hh] *= alpha;
                    o[mi][n][2 * hh + 1] *= alpha;
                }
            }
            const float mb = m_new * ATTN_LOG2E_U;
            float sum = 0.f;
            #pragma unroll
            for (int n = 0; n < NS; n++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float p = attn_exp2(fmaf(s[mi][n][2 * hh + e], ATTN_LOG2E_U, -mb));
                    sum += p;
                    if constexpr (!STATS) s[mi][n][2 * hh + e] = boundary_value<ATTN_PROBS, CNT>(p);
                }
            l[mi][hh] = l[mi][hh] * alpha + sum;
        }
}

// Forward pass 2 of the two-pass mode: s <- P^ / unit = boundary(exp(s^ - lse)) / unit, the normalized hooked
// probabilities in units (attn_prob_units; the caller stores O times boundary_unit()), computed with the backward's
// expression (attn_score, attn_prob_units); masked entries give 0. The mask is applied to s^ before the probability hook,
// like pass 1 does before the softmax, so that the hook (and its --q115-stats counters) never sees a future key's value.
template <bool MASK, bool CNT, bool POW2, int WM, int NS>
__device__ __forceinline__ void attn_fwd_p_lse(float (&s)[WM][NS][4], const float (&lse2)[WM][2], float scale,
                                               int col0, int row0) {
    attn_frag_each<WM, NS>([&](int mi, int n, int r) {
        const bool masked = MASK && attn_masked<false>(col0, row0, mi, n, r);
        float v = attn_score<CNT, POW2>(s[mi][n][r], scale);
        if (masked) v = -INFINITY;  // exp2(-inf) = 0
        float p = attn_prob_units<CNT>(v, lse2[mi][r >> 1]);
        if (masked) p = 0.f;  // whatever the hook makes of 0
        s[mi][n][r] = p;
    });
}

// Backward, query-major (dQ kernel): s <- dS / unit = P^ / unit * (dP - D) with P^ = boundary(exp(s^ - lse))
// recomputed by attn_prob_units_from_lse (the kernel stores dQ times unit); lse2 = lse*log2(e) and D per row, masked
// entries give 0.
template <bool MASK, bool POW2, int WM, int NS>
__device__ __forceinline__ void attn_dq_ds(float (&s)[WM][NS][4], const float (&dp)[WM][NS][4], const float (&lse2)[WM][2],
                                           const float (&D)[WM][2], float scale, int col0, int row0) {
    attn_frag_each<WM, NS>([&](int mi, int n, int r) {
        float p = attn_prob_units_from_lse<POW2>(s[mi][n][r], scale, lse2[mi][r >> 1]);
        if (MASK && attn_masked<false>(col0, row0, mi, n, r)) p = 0.f;
        s[mi][n][r] = p * (dp[mi][n][r] - D[mi][r >> 1]);
    });
}

// Backward, key-major (dK/dV kernel): s <- P^T / unit (attn_prob_units_from_lse with lse[query]; the kernel stores dK
// and dV times unit), rows are keys and columns queries; L points at the lse values of the query tile (L[0] is query
// col0 - 2*tq).
template <bool MASK, bool POW2, int WM, int NS>
__device__ __forceinline__ void attn_dkv_p(float (&s)[WM][NS][4], const float* L, float scale, int col0, int row0, int tq) {
    attn_frag_each_col<WM, NS, true>(L, tq, [&](int mi, int n, int r, float lq2) {
        float p = attn_prob_units_from_lse<POW2>(s[mi][n][r], scale, lq2);
        if (MASK && attn_masked<true>(col0, row0, mi, n, r)) p = 0.f;
        s[mi][n][r] = p;
    });
}
