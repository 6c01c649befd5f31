// fused_classifier.cuh - softmax + cross-entropy loss + its logits gradient, fused, one pass over the
// row in HBM.
//
// Math (same as softmax_crossentropy_forward/backward in train_gpt2.c): for every row n of logits
// (N = B*T rows, Vp columns, row-major), over the first V columns only (padding ignored):
//   p_i       = exp(x_i - max_j x_j) / sum_j exp(x_j - max_j x_j)
//   losses[n] = -log p_target
//   dlogits_i = (p_i - [i == target]) * dloss   for i < V,   0 for V <= i < Vp.
//
// Algorithm: one block per row. (1) The whole row is copied HBM -> shared memory with cp.async
// (16-byte transfers, all in flight at once); (2) one pass over shared memory keeps a running
// (max, sum of exponentials) per thread and rescales the sum whenever the max grows ("online
// normalizer", Milakov & Gimelshein 2018, arXiv:1805.02867), then the per-thread pairs are merged
// across the block in a fixed order; (3) a second pass over shared memory writes the gradient over
// the logits with 16-byte stores. HBM traffic is therefore one read and one write of the row. When a
// row does not fit in shared memory (Vp * sizeof(floatX) above the device's opt-in limit), and when
// the gradient is not wanted (write_dlogits = false), the kernel reads global memory directly
// instead (two reads of the row when it also writes the gradient; the second read mostly hits L2).
//
// Numerics: exponentials are exp2 of a base-2 argument, arg = fma(x, log2 e, -M log2 e), with
// M log2 e rounded once and reused everywhere (rescaling, the cross-thread merge, the second pass and
// the loss), so the rounding of the max cancels out of p and of the loss. The loss is computed as
// (log2 S - arg_target) * ln 2, not as -log of a rounded probability, so small losses keep their
// relative accuracy. Everything is fp32; each logit is read through boundary_value<LOGITS>, in the boundary's
// units (boundary_stored_value_units; SF16: the Q1.15 code as a float, one product fewer per read): the logits,
// the max m and the target logit are kept in units, and every product with them takes CLASSIFIER_LOG2E_U =
// log2 e * unit, a power-of-two multiple of log2 e, so that every fp32 value is that of the expressions in
// natural units bit for bit (the products are the same reals, rounded once).
//
// Row transform (template parameter RowCast of the staged kernel): a run-time change of the row's
// stored values that the classifier applies to the staged row in shared memory, after the copy and
// before pass 1, so that a cast of the logits that would otherwise be a pass over the N x Vp tensor in
// HBM (read + write) costs no memory traffic (TensorCast: llmc/kernels/tcast/tcast_classifier.cuh).
// The default, ClassifierNoRowCast, compiles to the kernel without it. Contract of a RowCast:
//   static constexpr bool kOn                 true (the identity is the only kOn = false type)
//   int stage_packets                         16-byte packets [0, stage_packets) of the row it reads and
//                                             writes: at least the packets holding columns < V, at most
//                                             Vp / 8 (the staged copy then covers them)
//   __device__ void apply(floatX* srow, size_t row, int Vp) const
//                                             called by every thread of the block (it may use warp
//                                             shuffles; the kernel syncs before and after), srow the
//                                             staged row, row its index (flat element index row * Vp + c)
// It must be trivially copyable (a __grid_constant__ kernel parameter).
#pragma once

#include <math.h>
#include <stdint.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"

constexpr int CLASSIFIER_THREADS = 512;  // threads per row-block; 2 blocks per SM when the row is staged (bf16)

#define CLASSIFIER_LOG2E 1.4426950408889634f
#define CLASSIFIER_LN2 0.6931471805599453f
constexpr float CLASSIFIER_LOG2E_U = CLASSIFIER_LOG2E * boundary_unit();  // (above)

// ---- cp.async: 16-byte global -> shared copies that bypass the registers (sm_80+) ----------------

__device__ __forceinline__ void classifier_copy16_async(void* smem_dst, const void* gmem_src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned int dst = (unsigned int)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
#else
    *reinterpret_cast<int4*>(smem_dst) = *reinterpret_cast<const int4*>(gmem_src);
#endif
}

__device__ __forceinline__ void classifier_copy_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
#endif
}

// ---- online softmax normalizer ---------------------------------------------------------------------
// State: m = running max of the logits seen (in units, -inf before the first), mL = m * log2 e (natural units)
// rounded once (__fmul_rn: never contracted into an fma, so every thread derives the same mL from the
// same m), s = sum of exp2(fma(x, log2 e, -mL)) over the logits seen.

// Fold `count` values x[0..count) (count <= n, known at compile time for full vectors) into (m, mL, s).
template <int n>
__device__ __forceinline__ void classifier_online_update(float& m, float& mL, float& s, const float (&x)[n], int count) {
    float vmax = -INFINITY;
    #pragma unroll
    for (int k = 0; k < n; k++)
        if (k < count) vmax = fmaxf(vmax, x[k]);
    if (vmax > m) {  // the max grew: rescale the sum (exp2(-inf) = 0 covers the first update)
        const float mL_new = __fmul_rn(vmax, CLASSIFIER_LOG2E_U);
        s *= exp2f(__fsub_rn(mL, mL_new));
        m = vmax;
        mL = mL_new;
    }
    #pragma unroll
    for (int k = 0; k < n; k++)
        if (k < count) s += exp2f(fmaf(x[k], CLASSIFIER_LOG2E_U, -mL));
}

// Merge (m2, s2) into (m, s). Commutative bit for bit (no contraction), so a butterfly leaves every lane
// with the same value. The side that holds the max is not multiplied at all (scale exactly 1), so the
// dominant partial sum picks up no exp2 approximation error on its way through the ~20 merge levels.
__device__ __forceinline__ float classifier_rescale(float s, float m, float M, float ML) {
    return m == M ? s : __fmul_rn(s, exp2f(__fsub_rn(__fmul_rn(m, CLASSIFIER_LOG2E_U), ML)));
}

__device__ __forceinline__ void classifier_merge(float& m, float& s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) return;  // both empty
    const float ML = __fmul_rn(M, CLASSIFIER_LOG2E_U);
    s = __fadd_rn(classifier_rescale(s, m, M, ML), classifier_rescale(s2, m2, M, ML));
    m = M;
}

// A logit as the softmax reads it, in units: the LM head's MATMUL_OUT boundary, then the LOGITS read boundary.
// The first is idempotent on logits that matmul_forward already stored quantized, and supplies the
// boundary when the training step skipped that pass (matmul_forward_logits); it never counts toward
// --q115-stats, whose forward stores the logits through matmul_forward. x is a stored (floatX) logit, so the mode
// may take both boundaries in one step (boundary_stored_value; SF16: one Q1.15 rounding for the two or three).
// CNT: whether the read may count --q115-stats (the kernel's counting instantiation; boundary.cuh).
template <bool CNT>
__device__ __forceinline__ float classifier_logit(float x) { return boundary_stored_value_units<CNT, MATMUL_OUT, LOGITS>(x); }

// p = exp(x - M) / S of a logit x in units, from mL = M log2 e and log2_sum = log2 S.
__device__ __forceinline__ float classifier_prob(float x, float mL, float log2_sum) {
    return exp2f(fmaf(x, CLASSIFIER_LOG2E_U, -mL) - log2_sum);
}

// Read packet i of a row as floats in units through the boundaries (classifier_logit).
template <bool CNT>
__device__ __forceinline__ void classifier_load(float (&x)[x128::size], const floatX* row, int i) {
    const x128 packet = load128(row + (size_t)i * x128::size);
    #pragma unroll
    for (int k = 0; k < x128::size; k++) x[k] = classifier_logit<CNT>((float)packet[k]);
}

// The identity row transform (see the top of the file): the plain classifier.
struct ClassifierNoRowCast {
    static constexpr bool kOn = false;
};

// One block per row. STAGED: the row is copied to dynamic shared memory (Vp * sizeof(floatX) bytes)
// first and both passes read it there; RowCast (STAGED only) then transforms the staged row.
// Requires Vp % x128::size == 0 and 16-byte aligned rows. CNT: the --q115-stats counting instantiation
// (boundary_with_count: with the counting branch in the element loops, even switched off, the SF16 classifier ran
// 5.45 ms against BF16's 4.37 at d12 B=64 on an H100; without it 4.35).
template <bool STAGED, class RowCast = ClassifierNoRowCast, bool CNT = false>
__global__ void __launch_bounds__(CLASSIFIER_THREADS, 2)
fused_classifier_kernel(floatX* logits, float* losses, float dloss, const int* targets, int V, int Vp, bool write_dlogits,
                        const __grid_constant__ RowCast rc) {
    static_assert(STAGED || !RowCast::kOn, "a row transform acts on the staged row");
    constexpr int X = x128::size;
    extern __shared__ int4 classifier_smem[];
    __shared__ float warp_m[32], warp_s[32];

    const int row = blockIdx.x;
    floatX* grow = logits + (size_t)row * Vp;
    const int nvec = Vp / X;              // packets per row, padding included
    const int nfull = V / X;              // packets entirely inside [0, V)
    const int nvalid = (V + X - 1) / X;   // packets with at least one column < V
    const int target = targets[row];
    const bool target_ok = target >= 0 && target < V;

    const floatX* src = grow;
    if (STAGED) {
        floatX* srow = reinterpret_cast<floatX*>(classifier_smem);
        int nstage = nvalid;  // the packets holding columns < V, and those a row transform reads (padding included)
        if constexpr (RowCast::kOn) nstage = rc.stage_packets;
        for (int i = threadIdx.x; i < nstage; i += blockDim.x) classifier_copy16_async(srow + (size_t)i * X, grow + (size_t)i * X);
        classifier_copy_async_wait_all();
        __syncthreads();
        if constexpr (RowCast::kOn) {
            rc.apply(srow, (size_t)row, Vp);
            __syncthreads();
        }
        src = srow;
    }

    // pass 1: online max / sum of exponentials over the valid columns
    float m = -INFINITY, mL = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x; i < nfull; i += blockDim.x) {
        float x[X];
        classifier_load<CNT>(x, src, i);
        classifier_online_update(m, mL, s, x, X);
    }
    if (nfull < nvalid && threadIdx.x == nfull % blockDim.x) {  // the packet holding column V - 1
        float x[X];
        classifier_load<CNT>(x, src, nfull);
        classifier_online_update(m, mL, s, x, V - nfull * X);
    }
    // read the target logit now: the __syncthreads below orders this read before any dlogits store
    float x_target = 0.0f;
    if (threadIdx.x == 0 && target_ok) x_target = classifier_logit<CNT>((float)src[target]);

    // merge across the block in a fixed order: butterfly within warps, then warps 0, 1, 2, ... in sequence
    #pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, offset), s2 = __shfl_xor_sync(0xFFFFFFFFu, s, offset);
        classifier_merge(m, s, m2, s2);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) { warp_m[warp] = m; warp_s[warp] = s; }
    __syncthreads();
    m = warp_m[0];
    s = warp_s[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++) classifier_merge(m, s, warp_m[w], warp_s[w]);
    mL = __fmul_rn(m, CLASSIFIER_LOG2E_U);
    const float log2_sum = log2f(s);

    if (threadIdx.x == 0)
        losses[row] = target_ok ? (log2_sum - fmaf(x_target, CLASSIFIER_LOG2E_U, -mL)) * CLASSIFIER_LN2 : NAN;
    if (!write_dlogits) return;

    // pass 2: dlogits = (p - onehot) * dloss over the valid columns, 0 over the padding. The packets whose columns are
    // all valid store p * dloss (= (p - 0) * dloss), without the per-column target and V tests; the thread that stores
    // the target's packet then overwrites the target's value with (p - 1) * dloss (x_own, read before any store of
    // pass 2: in the unstaged kernel pass 2 overwrites the row it reads).
    const bool own_target = target_ok && target < nfull * X && (target / X) % (int)blockDim.x == (int)threadIdx.x;
    const float x_own = own_target ? classifier_logit<false>((float)src[target]) : 0.0f;  // (not counted again)
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
        const int col0 = i * X;
        x128 out;
        if (i < nfull) {
            float x[X];
            classifier_load<CNT>(x, src, i);
            #pragma unroll
            for (int k = 0; k < X; k++) out[k] = (floatX)(classifier_prob(x[k], mL, log2_sum) * dloss);
        } else if (i < nvalid) {
            float x[X];
            classifier_load<CNT>(x, src, i);
            #pragma unroll
            for (int k = 0; k < X; k++) {
                const float d = (classifier_prob(x[k], mL, log2_sum) - (col0 + k == target ? 1.0f : 0.0f)) * dloss;
                out[k] = (floatX)(col0 + k < V ? d : 0.0f);
            }
        } else {
            out = x128::zeros();
        }
        store128(grow + (size_t)col0, out);
    }
    if (own_target) grow[target] = (floatX)((classifier_prob(x_own, mL, log2_sum) - 1.0f) * dloss);
}

// Requirements of both launchers (exit with a message naming `who`): 1 <= V <= Vp, Vp % 8 == 0, 16-byte aligned logits.
static inline void fused_classifier_check_(const char* who, const floatX* logits, int V, int Vp) {
    if (V < 1 || V > Vp || Vp % 8 != 0 || ((uintptr_t)logits & 15) != 0) {
        fprintf(stderr, "error: %s: need 1 <= V <= Vp, Vp %% 8 == 0 and 16-byte aligned logits "
                        "(V = %d, Vp = %d, logits = %p)\n", who, V, Vp, (void*)logits);
        exit(EXIT_FAILURE);
    }
}

// Whether a row of Vp floatX fits the shared memory of one block on the current device: then fused_classifier
// stages each row when it writes the gradient (the kernel a row transform runs in).
static inline bool fused_classifier_staged(int Vp) {
    int dev = 0, smem_optin = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    const size_t static_smem = 2 * 32 * sizeof(float);
    return (size_t)Vp * sizeof(floatX) + static_smem <= (size_t)smem_optin;
}

// The staged kernel with row transform rc, one block per row of `rows` (fused_classifier_staged(Vp) holds).
template <class RowCast>
static inline void fused_classifier_staged_launch_(const RowCast& rc, floatX* logits, float* losses, float dloss, const int* targets,
                                                   int rows, int V, int Vp, cudaStream_t stream) {
    const size_t smem = (size_t)Vp * sizeof(floatX);
    boundary_with_count([&](auto cnt) {  // the counting instantiation while --q115-stats counts
        const auto kernel = fused_classifier_kernel<true, RowCast, decltype(cnt)::value>;
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        kernel<<<rows, CLASSIFIER_THREADS, smem, stream>>>(logits, losses, dloss, targets, V, Vp, true, rc);
    });
    cudaCheckLaunch();
}

// fused_classifier - softmax cross-entropy over the vocabulary, per row, with its gradient in place.
//   logits   (B*T, Vp) floatX, row-major; only columns [0, V) are read as logits, the padding columns
//            [V, Vp) are ignored (any value, NaN included). If write_dlogits, OVERWRITTEN in place with
//            dlogits = (softmax(logits) - onehot(target)) * dloss for columns < V and exactly 0 for the
//            padding; otherwise left unchanged.
//   losses   (B*T) fp32, OVERWRITTEN with -log softmax(logits)[target] (natural log).
//   dloss    the gradient of the total loss w.r.t. each row's loss (e.g. 1/(B*T), times the loss scale).
//   targets  (B*T) int32 token ids. Out-of-range targets (< 0 or >= V) do not fault: that row's loss is
//            NaN (a loud signal in the mean loss) and its dlogits are p * dloss without the one-hot term.
//            The host validates tokens before they get here (dataloader).
// Requirements (checked, exit with a message): 1 <= V <= Vp, Vp % 8 == 0, logits 16-byte aligned.
// Non-finite logits in [0, V) make that row's loss and dlogits NaN.
// No scratch; grid = B*T blocks of CLASSIFIER_THREADS threads; dynamic shared memory Vp * sizeof(floatX)
// when write_dlogits and it fits (bf16/fp16: 100.6 KB for Vp = 50304, two blocks per SM).
// Deterministic: every row is reduced by one block in a fixed order.
static inline void fused_classifier(floatX* logits, float* losses, float dloss, const int* targets, int B, int T, int V,
                                    int Vp, bool write_dlogits, cudaStream_t stream) {
    const int rows = B * T;
    fused_classifier_check_("fused_classifier", logits, V, Vp);
    if (rows <= 0) return;
    if (write_dlogits && fused_classifier_staged(Vp)) {
        fused_classifier_staged_launch_(ClassifierNoRowCast{}, logits, losses, dloss, targets, rows, V, Vp, stream);
    } else {
        boundary_with_count([&](auto cnt) {
            fused_classifier_kernel<false, ClassifierNoRowCast, decltype(cnt)::value><<<rows, CLASSIFIER_THREADS, 0, stream>>>(
                logits, losses, dloss, targets, V, Vp, write_dlogits, ClassifierNoRowCast{});
        });
        cudaCheckLaunch();
    }
}

// fused_classifier (write_dlogits = true) with the row transform rc (see the top of the file) applied to each
// staged row before the softmax reads it: the losses and dlogits fused_classifier gives on logits whose rows were
// transformed in HBM first, without that pass. Same arguments, results and requirements as fused_classifier, and
// the staged kernel (fused_classifier_staged(Vp), else exit with "error: fused_classifier_row_cast: ..."), and
// ceil(V / 8) <= rc.stage_packets <= Vp / 8.
template <class RowCast>
static inline void fused_classifier_row_cast(const RowCast& rc, floatX* logits, float* losses, float dloss, const int* targets, int B,
                                             int T, int V, int Vp, cudaStream_t stream) {
    static_assert(RowCast::kOn, "fused_classifier_row_cast takes a row transform (the identity is fused_classifier)");
    const int rows = B * T;
    fused_classifier_check_("fused_classifier_row_cast", logits, V, Vp);
    if (!fused_classifier_staged(Vp) || rc.stage_packets < (V + 7) / 8 || rc.stage_packets > Vp / 8) {
        fprintf(stderr, "error: fused_classifier_row_cast: needs a row of Vp = %d in shared memory and %d <= stage_packets (%d) <= %d\n",
                Vp, (V + 7) / 8, rc.stage_packets, Vp / 8);
        exit(EXIT_FAILURE);
    }
    if (rows <= 0) return;
    fused_classifier_staged_launch_(rc, logits, losses, dloss, targets, rows, V, Vp, stream);
}
