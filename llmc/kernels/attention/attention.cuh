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
// instead of 5 tile matmuls, the price of bit-reproducible gradients. Given a dS workspace (T^2 / 2 floatX a head),
// the key-tile kernel stores the dS it computes for dK and the query-tile kernel only multiplies it by K (5 + 1 tile
// matmuls, no second S, P, dP or cast): the same bits, one dS write and read more (attention_flash_bwd.cuh).
//
// Two implementations, picked automatically by the launchers:
//   * tensor-core path (floatX = bf16 or fp16, HS = 64 or 128, 16-byte aligned pointers):
//     mma.sync.m16n8k16 with fp32 accumulation, operands fetched with ldmatrix from padded shared
//     memory tiles filled by cp.async double buffering; key tiles above the diagonal are skipped.
//   * generic path (any HS <= 256, any floatX including fp32): one warp per query (or key) row,
//     keys streamed through shared memory in chunks of 32; correct and deterministic, not fast.
//
// Boundary hooks (llmc/kernels/boundary.cuh; identity in the plain builds). Every score s = scale * q.k is
// read as s^ = boundary_value<ATTN_SCORES>(s * scale) (attn_score in attention_tile.cuh, attn_gen_score in attention_generic.cuh), the same
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
//     (attn_prob_units / attn_gen_prob_from_lse, lse read back as the stored fp32 value), and
//     accumulates O = sum P^ V in fp32: no running max, no rescaling, no final division. Costs one
//     more Q.K^T per tile (3 instead of 2 tile matmuls); deterministic like the single pass.
// The backward always recomputes P^ from lse the same way, so in PL mode forward and backward use
// bit-identical probabilities (the dK/dV kernel computes the transposed product K.Q^T, whose fp32
// dot products come out of the same mma).
//
// TensorCast (TCAST=1 build; attention_tcast.cuh, attention_tcast_cast.cuh, doc/TCAST.md 5.1). There
// boundary_value is the identity and the attention sites are cast by a third template instantiation,
// TC = true, of the three tensor-core kernels, which the launchers pick at run time once
// attention_tcast_configure has set a datatype for attn_scores and/or attn_probs; with none they
// launch TC = false, the plain kernels unchanged (and a TCAST=1 build with cuDNN, USE_CUDNN=1, the default
// where make finds it, runs cuDNN's fused attention instead: attention_uses_cudnn). The TC = true kernels
// are instantiated only where the mode sets kModeAttentionCasts (the dispatch below), so no other build
// compiles them. In TC kernels each query row's scaled scores v = raw*scale are cast in groups along the
// keys (keys j > i and j >= T enter as 0, so they never move a scale, and are masked to -inf after the
// cast), lse is taken over s^, and the normalized
// p = exp2(s^ log2(e) - lse log2(e)) is cast the same way (masked p = 0) before it multiplies V: a
// probability cast forces the two-pass forward (PL = true) at run time. How (attention_tcast_cast.cuh):
// after the Q.K^T (K.Q^T) MMA the kernel's TC step casts its fragments in registers where the datatype
// is of the round-even family (MX float / int with E8M0-style exponent scales in tiles of 32 or 64 keys,
// unscaled floats): per group its constants and a warp / CTA vote, then seven instructions per element, and
// p = exp2(s^ log2(e) - lse log2(e)) in registers. The tile-scaled types find a group's constants once, in the
// forward (the group amax by quad shuffles, a branch-free group step: the scores' in pass 1, the probabilities' in
// pass 2), and keep them, a byte per (b, h, query, 32-key half), in the caller's buffer `tcast_scales` beside
// lse; pass 2 (the scores), dQ and dK/dV read them (dK/dV without the cross-warp amax and the CTA barrier vote
// that finding them there took). Other datatypes, and tiles where some group falls
// outside the family's exact range, go through a shared-memory tile (one per warp in the forward and
// dQ kernels, 16*WM queries x 64 keys; one per CTA in the dK/dV kernel, 64 queries x 128 keys) where
// each thread casts the 32 or 64 consecutive keys of one query it owns in one plain loop - M:N pruning,
// per group the amax, the group scale, per element the rounding, the mask and the probabilities with
// their own cast - read back for the plain steps (the online softmax on s^, dS = P^ (dP - D), the P.V /
// dS.K MMAs). Same bits either way.
// All three kernels evaluate the same expressions on the same fp32 dot products, so the backward
// recomputes the forward's s^ and P^ bit for bit; gradients pass straight through both casts
// (dS = P^ (dP - D)). The cast kernels exist for head size 64 only (attn_tc_require_tc). Where the cost
// goes (doc/TCAST.md 6): the register path adds about 8 instructions per element and cast (rounding 7, plus the
// amax and a share of the group step and shuffles where the scales are found: ~3 more) and the exp of the
// probabilities; the staged path a shared-memory write and read-back per element and about 60 instructions per
// element and cast; global memory: one byte per 32 scores or probabilities, written once and read by the later
// visits (the kept scales: the scores' three times, the probabilities' twice; the dQ kernel of the dS-handed schedule
// reads none); the scores are cast twice in the two-pass forward (once per pass) and once in each backward kernel that
// recomputes P^ (only the dK/dV kernel when dS is handed on), the probabilities once per such kernel. E4M3 / E5M2
// probabilities (MXFP8) are kept instead: the forward stores each P^ as its FP8 code (a byte per probability at or
// below the diagonal, in `tcast_scales` after the group scales) and a dK/dV kernel of their own reads P^T from them
// in the plain kernel's tiling, neither recomputing S^T nor casting (attention_tcast.cuh, "The probabilities the forward
// keeps"; same bits): with MXFP8 at both sites the backward then runs at 0.94x the plain kernels' (H200, session 18).
//
// Files (each a comment, its kernels or helpers, then its launchers):
//   attention.cuh             this API: attention_forward / attention_backward, shape checks, dispatch
//   attention_common.cuh      the forward mode kAttnProbsFromLse, the launchers' shared-memory opt-in
//   attention_ptx.cuh         PTX wrappers: cp.async, ldmatrix, mma.sync, exp2, bf16/fp16 pack/unpack
//   attention_tile.cuh        the tile pipeline: tile loads, fragment matmuls, epilogue store, the
//                             hooked score / probability expressions and the per-tile softmax steps
//   attention_flash_fwd.cuh   the tensor-core forward kernel and its launchers
//   attention_flash_bwd.cuh   the tensor-core dQ and dK/dV kernels and their launchers
//   attention_generic.cuh     the generic kernels (any HS <= 256, any floatX) and their launchers
//   attention_tcast.cuh       TensorCast sites: semantics, configuration, scalar casts, host API
//   attention_tcast_cast.cuh  TensorCast group casts in the fragment layouts, and the TC / plain steps
//   attention_cudnn.h / .cpp  the cuDNN backend (USE_CUDNN=1): cuDNN's fused SDPA, its own translation unit
#pragma once

#include <stdint.h>
#include <math.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/utils.h"
#include "llmc/kernels/boundary.cuh"
#include "llmc/kernels/attention/attention_common.cuh"
#include "llmc/kernels/attention/attention_tcast.cuh"
#include "llmc/kernels/attention/attention_flash_fwd.cuh"
#include "llmc/kernels/attention/attention_flash_bwd.cuh"
#include "llmc/kernels/attention/attention_generic.cuh"
#include "llmc/kernels/attention/attention_cudnn.h"

// ------------------------------------------------------------------------------------------------
// Dispatch. The tensor-core path needs 16-bit floatX, HS in {64, 128} and 16-byte aligned tensors
// (it moves 8 elements per access; C = NH*HS is then a multiple of 8 as well).

static inline bool attn_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Default tile configurations: HS, WM (16-row tiles per warp), NW (warps), key tile (forward, dQ) or
// query tile (dK/dV)[, KV_REGS], MINB (min CTAs per SM for __launch_bounds__; 1 = no register cap)[, the forward's
// PHASE: 0, both passes in one kernel (attention_flash_fwd.cuh; attention_forward_tc_split runs them as two)].
// dev/cuda/attention.cu --sweep times alternatives on the GPT-2 124M shape.
// HS 64 dQ / dK/dV / dQ-from-dS: the fastest of the --sweep on an H100 (2026-11-28, (64,1024,12,64)), in the plain
// and the SF16 build alike: the dK/dV kernel storing dS 1.037 -> 0.831 ms plain, 1.122 -> 0.931 SF16; dQ from dS
// 0.394 -> 0.367 / 0.365 (doc/benchmarks.md, session 10). Outputs bit for bit those of the earlier defaults.
#define ATTN_FWD_CFG_64 64, 2, 4, 64, 1, 0  // forward: ..., MINB, PHASE (attention_flash_fwd.cuh)
#define ATTN_FWD_CFG_128 128, 1, 4, 64, 1, 0
// The two-pass forward as two kernels (attention_forward_tc_split: statistics pass 64, 2, 4, 64, MINB 3 | output pass
// 64, 2, 4, 64, 1): 0.7352 ms against the fused kernel's 0.7668 at (64, 1024, 12, 64) in the SF16 build (H100, --sweep,
// session 11; the statistics pass alone 0.2725), the same bits there. Checked against the fused kernel bit for bit on
// every HS = 64 shape of dev/cuda/attention (check_fwd_split, H200, session 12). The HS = 64 default of the two-pass
// (SF16) forward since session 12: attention fwd 10.62 -> 10.28 ms a d12 step (-prof 1, H200), same loss lines.
#define ATTN_FWD_SPLIT_CFG_64 64, 2, 4, 64, 3, 2, 4, 64, 1
#define ATTN_DQ_CFG_64 64, 1, 4, 32, 1
#define ATTN_DQ_CFG_128 128, 1, 4, 32, 1
#define ATTN_DKV_CFG_64 64, 2, 4, 32, false, 1
#define ATTN_DKV_CFG_128 128, 1, 4, 32, false, 1
// The dQ kernel of the dS-handed schedule (attn_bwd_dq_ds_kernel): HS, WM, NW, key tile, MINB, PF (prefetch: the next
// key tile's dS fragments in flight, same bits). PF at HS = 64 since session 12: with the split forward, attention
// fwd + bwd 28.41 -> 27.69 ms a d12 SF16 step (-prof 1, H200); the step's loss and norm lines unchanged.
#define ATTN_DQ_DS_CFG_64 64, 2, 4, 128, 1, true
#define ATTN_DQ_DS_CFG_128 128, 1, 4, 32, 1, false
// TC (TensorCast) instantiations, HS = 64 only: one configuration per kernel, set by measurement. Today's are
// the plain kernels' (ATTN_*_CFG_64 above); dev/cuda/attention --tc-sweep (TCAST build) times its candidates
// (TcSweepFwd / TcSweepDq / TcSweepDkv) against them on the d12 shape, checks that each gives the default's
// outputs bit for bit, and prints the ATTN_TC_*_CFG lines of the fastest: set these three to them. Free
// parameters: the forward and dQ kernels' WM (16-row tiles per warp: the cast tile AttnTcTileQ<WM>), NW and
// MINB; their key tile stays 64 (no casting group crosses one, and a query's tiles are then the same in every
// configuration, which is what makes them bit-identical); the dK/dV kernel's cast tile AttnTcTileK fixes
// WM = 1, NW = 8 and 64-query tiles, so only KV_REGS and MINB move. One instantiation each, whatever the
// candidates: the trainer's TCAST build compiles no more TC kernels than before (attn_tc_require_tc).
// Set from the sweep on an H200 (2026-11-27; (64,12,1024,64), mxfp8e4 both sites, every candidate bit-identical on
// 25 (sites, shape) pairs): forward 1.697 -> 1.347 ms (168 registers, no spill, 3 CTAs / SM instead of 255 with
// spills, 2), dQ 1.181 -> 1.020, dK/dV 1.998 -> 1.787 (MINB 2: 200 bytes of spills, still faster); fwd + bwd
// 4.88 -> 4.15 ms, 2.30x -> 1.96x the plain kernels (doc/TCAST.md 6, round 3).
#define ATTN_TC_FWD_CFG 64, 1, 4, 64, 3         // HS, WM, NW, BC, MINB
// The TC forward as two kernels (attention_forward_tc_cast_split, when kAttnTcFwdSplit): statistics pass HS, WM, NW, BC,
// MINB | output pass WM, NW, BC, MINB (the --cast-stats counting kernel is the fused one of ATTN_TC_FWD_CFG). The
// fused kernel is latency-bound (ncu, H200, session 15: 12 warps per SM, limited by registers and shared memory alike,
// 0.93 eligible warps per scheduler, issue slots 54% busy); the statistics pass alone fits 128 registers without
// spills and, without V buffers, 4 CTAs per SM (16 warps). Measured with the V buffers still allocated (3 CTAs per SM,
// H200, session 15): 1.2013 ms against the fused kernel's 1.1987, the same bits; without them (H200, session 16,
// --tc-sweep, 25/25 bit-identical pairs): 1.1518 ms against 1.1968, 3.8% faster, so the split is the default.
#define ATTN_TC_FWD_SPLIT_CFG 64, 1, 4, 64, 4, 1, 4, 64, 3
constexpr bool kAttnTcFwdSplit = true;
#define ATTN_TC_DQ_CFG 64, 1, 4, 64, 3          // HS, WM, NW, BC, MINB
#define ATTN_TC_DKV_CFG 64, 1, 8, 64, false, 2  // HS, WM, NW, BR, KV_REGS, MINB
// The dK/dV kernel on the probabilities' codes (attn_bwd_dkv_pk_kernel: MXFP8 probabilities, kept): no cast tile, so
// the plain kernel's tiling is free (WM <= 2, BR <= 64); --tc-sweep's `dkvc` rows time its candidates (TcSweepDkvPk).
#define ATTN_TC_DKV_PK_CFG 64, 2, 4, 32, false, 1  // HS, WM, NW, BR, KV_REGS, MINB

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

// Templated on the element type so that the tensor-core kernels are never instantiated in fp32
// builds, and on CASTS (the mode's kModeAttentionCasts) so that their TensorCast instantiations (TC =
// true) exist only in the builds whose mode casts the attention sites: if constexpr on a template
// parameter discards the dependent branch, which is then never instantiated.
template <bool PL, bool CASTS = kModeAttentionCasts, typename T>
static inline bool attn_forward_tc_dispatch(T* out, float* lse, const T* qkv, int B, int Tn, int NH, int HS,
                                            cudaStream_t stream, unsigned int* amax, uint64_t tcast_seed = 0,
                                            uint8_t* tcast_scales = nullptr) {
    if constexpr (sizeof(T) == 2) {
        if constexpr (CASTS) {
            if (attention_tcast_active()) {  // TC instantiation, HS = 64, always the two-pass forward (see attn_tc_require_tc)
                attn_tc_require_tc(HS, attn_aligned16(out) && attn_aligned16(qkv));
                if constexpr (kAttnTcFwdSplit)
                    attention_forward_tc_cast_split<ATTN_TC_FWD_SPLIT_CFG, true>(out, lse, qkv, B, Tn, NH, stream, amax, tcast_seed, tcast_scales);
                else
                    attention_forward_tc_cast<ATTN_TC_FWD_CFG, true>(out, lse, qkv, B, Tn, NH, stream, amax, tcast_seed, tcast_scales);
                return true;
            }
        }
        (void)tcast_seed, (void)tcast_scales;
        if (!attn_aligned16(out) || !attn_aligned16(qkv)) return false;
        if (HS == 64) {
            if constexpr (PL) attention_forward_tc_split<ATTN_FWD_SPLIT_CFG_64>(out, lse, qkv, B, Tn, NH, stream, amax);
            else attention_forward_tc<ATTN_FWD_CFG_64, PL>(out, lse, qkv, B, Tn, NH, stream, amax);
            return true;
        }
        if (HS == 128) { attention_forward_tc<ATTN_FWD_CFG_128, PL>(out, lse, qkv, B, Tn, NH, stream, amax); return true; }
    }
    return false;
}

// One backward of the tensor-core kernels in the schedule ds picks: NULL, the recomputing one (dq(): the dQ kernel,
// which also writes D; then dkv(NULL): the dK/dV kernel); a dS workspace of attention_backward_ds_bytes, the dS-handed
// one (D alone, dkv(ds): the dK/dV kernel storing dS, then dQ from it; attention_flash_bwd.cuh). The same dqkv bit for
// bit either way.
template <int HS, typename T, typename Dq, typename Dkv>
static inline void attn_backward_tc_schedule(T* dqkv, float* Dbuf, const T* dout, const T* qkv, const T* out, int B, int Tn, int NH,
                                             cudaStream_t stream, unsigned int* amax, uint4* ds, Dq dq, Dkv dkv) {
    if (!ds) {
        dq();
        dkv(nullptr);
        return;
    }
    attention_backward_d<HS>(Dbuf, dout, out, B, Tn, NH, stream);
    dkv(ds);
    if constexpr (HS == 64) attention_backward_dq_ds<ATTN_DQ_DS_CFG_64>(dqkv, ds, qkv, B, Tn, NH, stream, amax);
    else attention_backward_dq_ds<ATTN_DQ_DS_CFG_128>(dqkv, ds, qkv, B, Tn, NH, stream, amax);
}

// ds: NULL or a dS workspace, the schedule (attn_backward_tc_schedule).
template <bool CASTS = kModeAttentionCasts, typename T>
static inline bool attn_backward_tc_dispatch(T* dqkv, float* Dbuf, const T* dout, const T* qkv, const T* out,
                                             const float* lse, int B, int Tn, int NH, int HS, cudaStream_t stream,
                                             unsigned int* amax, uint64_t tcast_seed = 0, uint8_t* tcast_scales = nullptr,
                                             void* ds = nullptr) {
    if constexpr (sizeof(T) == 2) {
        uint4* dsf = static_cast<uint4*>(ds);
        if (dsf && !attn_aligned16(dsf)) die("attention_backward: the dS workspace must be 16-byte aligned");
        if constexpr (CASTS) {
            if (attention_tcast_active()) {
                attn_tc_require_tc(HS, attn_aligned16(dqkv) && attn_aligned16(dout) && attn_aligned16(qkv) && attn_aligned16(out));
                attn_backward_tc_schedule<64>(
                    dqkv, Dbuf, dout, qkv, out, B, Tn, NH, stream, amax, dsf,
                    [&] {
                        attention_backward_dq_tc_cast<ATTN_TC_DQ_CFG>(dqkv, Dbuf, dout, qkv, out, lse, B, Tn, NH, stream, amax, tcast_seed,
                                                                      tcast_scales);
                    },
                    [&](uint4* d) {  // with the probabilities' codes kept, two launches: the flag picks which one works
                        const bool codes = attention_tcast_keeps_p();
                        attention_backward_dkv_tc_cast<ATTN_TC_DKV_CFG>(dqkv, dout, qkv, lse, Dbuf, B, Tn, NH, stream, amax, tcast_seed,
                                                                        tcast_scales, d, codes);
                        if (codes) attention_backward_dkv_tc_codes<ATTN_TC_DKV_PK_CFG>(dqkv, dout, qkv, Dbuf, B, Tn, NH, stream, amax, tcast_scales, d);
                    });
                return true;
            }
        }
        (void)tcast_seed, (void)tcast_scales;
        if (!attn_aligned16(dqkv) || !attn_aligned16(dout) || !attn_aligned16(qkv) || !attn_aligned16(out)) return false;
        if (HS == 64) {
            attn_backward_tc_schedule<64>(
                dqkv, Dbuf, dout, qkv, out, B, Tn, NH, stream, amax, dsf,
                [&] { attention_backward_dq_tc<ATTN_DQ_CFG_64>(dqkv, Dbuf, dout, qkv, out, lse, B, Tn, NH, stream, amax); },
                [&](uint4* d) { attention_backward_dkv_tc<ATTN_DKV_CFG_64>(dqkv, dout, qkv, lse, Dbuf, B, Tn, NH, stream, amax, d); });
            return true;
        }
        if (HS == 128) {
            attn_backward_tc_schedule<128>(
                dqkv, Dbuf, dout, qkv, out, B, Tn, NH, stream, amax, dsf,
                [&] { attention_backward_dq_tc<ATTN_DQ_CFG_128>(dqkv, Dbuf, dout, qkv, out, lse, B, Tn, NH, stream, amax); },
                [&](uint4* d) { attention_backward_dkv_tc<ATTN_DKV_CFG_128>(dqkv, dout, qkv, lse, Dbuf, B, Tn, NH, stream, amax, d); });
            return true;
        }
    }
    (void)ds;
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

// ------------------------------------------------------------------------------------------------
// The cuDNN backend (USE_CUDNN=1, kAttentionCudnn): cuDNN's fused SDPA in place of the kernels above, for the
// whole call, in every call of a run that casts no attention site (attention_uses_cudnn). Its kernels keep
// no amax, so where the FP8 backend asks for one (the amax slot of the next GEMM's operand) one pass over the
// stored output provides it: attn_amax_bits_kernel, the same bit-pattern max the built-in kernels fold into
// their epilogue.
static_assert(!kAttentionCudnn || !kAttnProbsFromLse, "cuDNN attention has no hook for the probability boundary");

// amax (device uint32) <- max(*amax, bit pattern of max |x|) over x (n floatX values). Grid-stride, one
// integer atomicMax per block (order-independent, so deterministic).
__global__ void attn_amax_bits_kernel(unsigned int* amax, const floatX* x, size_t n) {
    unsigned int m = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        m = max(m, abs_bits((float)x[i]));
    block_amax_accumulate(amax, m);
}
static inline void attn_amax_bits(unsigned int* amax, const floatX* x, size_t n, cudaStream_t stream) {
    if (!amax) return;
    int sms = 0, dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    attn_amax_bits_kernel<<<sms * 4, 512, 0, stream>>>(amax, x, n);
    cudaCheck(cudaGetLastError());
}

// Whether attention_forward / attention_backward run on cuDNN: in the cuDNN builds unless an attention site is
// cast (TCAST=1 with --cast attn_scores / attn_probs: the casts live in the built-in kernels). One decision per
// run: attention_tcast_configure sets the casts once at start-up, so a layer's forward and backward always take
// the same backend (the backward reads the forward's out and lse). Constant (kAttentionCudnn) in the builds
// without the TensorCast casts, where attention_tcast_active() is constant false.
static inline bool attention_uses_cudnn() { return kAttentionCudnn && !attention_tcast_active(); }

// The attention backend of this run: its name for the start-up table, "cuDNN 9.19.0 (frontend 1.32.0)",
// "flash kernels (built-in)" or, in a cuDNN build whose run casts an attention site, "flash kernels (built-in;
// attention sites cast)"; its tag for the numeric configuration line, "cudnn" or "flash".
// Call them after the mode has configured its casts (the trainer: after attach_activations).
static inline const char* attention_backend_name() {
    if constexpr (kAttentionCudnn) {
        if (attention_uses_cudnn()) return attention_cudnn_version();
        return "flash kernels (built-in; attention sites cast)";
    }
    return "flash kernels (built-in)";
}
static inline const char* attention_backend_tag() { return attention_uses_cudnn() ? "cudnn" : "flash"; }
// Releases what the backend holds (cuDNN: graphs, workspace, handle); nothing for the built-in kernels.
static inline void attention_free() {
    if constexpr (kAttentionCudnn) attention_cudnn_free();
}

// Forward with an explicit mode: PL = false single pass, PL = true two passes (P from the final
// lse). attention_forward uses the build's kAttnProbsFromLse; dev/cuda/attention.cu also runs PL =
// true in the plain builds, where both modes compute the same attention, to test the second pass
// without a quantizer.
// TensorCast build with an attention cast configured: the TC instantiations (PL = true whenever the
// probabilities are cast, whatever PL says); tcast_seed: the stochastic-rounding seed of this call, tcast_scales:
// the group scales it keeps for the backward (attention_forward).
template <bool PL>
static inline void attention_forward_mode(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                          cudaStream_t stream, unsigned int* amax = nullptr, uint64_t tcast_seed = 0,
                                          uint8_t* tcast_scales = nullptr) {
    attn_check_shape(B, T, C, NH);
    const int HS = C / NH;
    if (attn_forward_tc_dispatch<PL>(out, lse, qkv, B, T, NH, HS, stream, amax, tcast_seed, tcast_scales)) return;
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
// (ignored by every other build and by non-stochastic datatypes); tcast_scales (device, written): the group
// scales of the casts the backward reads instead of finding them again, attention_tcast_scales_bytes(B, T, NH)
// bytes, kept with lse until the layer's backward (NULL where that is 0: no tile-scaled RNE-family site; else
// the call stops with `error:`).
// USE_CUDNN=1 (kAttentionCudnn): the whole call runs on cuDNN's fused SDPA (attention_cudnn.h), same
// contract (lse is cuDNN's softmax statistics, the same natural-log log-sum-exp); amax by one extra pass;
// except where an attention site is cast (attention_uses_cudnn): then the built-in kernels with the casts.
void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH, cudaStream_t stream,
                       unsigned int* amax = nullptr, uint64_t tcast_seed = 0, uint8_t* tcast_scales = nullptr) {
    if constexpr (kAttentionCudnn) {  // (if constexpr: the builds without cuDNN do not link attention_cudnn_*)
        if (attention_uses_cudnn()) {
            attn_check_shape(B, T, C, NH);
            attention_cudnn_forward(out, lse, qkv, B, T, NH, C / NH, kStorageFP16, stream);
            attn_amax_bits(amax, out, (size_t)B * T * C, stream);
            return;
        }
    }
    attention_forward_mode<kAttnProbsFromLse>(out, lse, qkv, B, T, C, NH, stream, amax, tcast_seed, tcast_scales);
}

// The built-in kernels' backward (attention_backward without the cuDNN backend; dev/cuda/attention.cu also
// times it in cuDNN builds). Same arguments and contract as attention_backward below.
static inline void attention_backward_builtin(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv,
                                              const floatX* out, const float* lse, int B, int T, int C, int NH,
                                              cudaStream_t stream, unsigned int* amax, uint64_t tcast_seed,
                                              uint8_t* tcast_scales = nullptr, void* ds = nullptr) {
    attn_check_shape(B, T, C, NH);
    const int HS = C / NH;
    if (attn_backward_tc_dispatch(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS, stream, amax, tcast_seed, tcast_scales, ds)) return;
    attention_backward_generic(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS, stream, amax);
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
// TensorCast build: recomputes the forward's cast s^ and P^ bit for bit (same tcast_seed as the forward, and
// tcast_scales as the forward left it: the group scales are read, not found again) and passes the gradients
// straight through both casts.
// ds: NULL, or a workspace of attention_backward_ds_bytes(B, T, NH, C / NH) bytes (16-byte aligned; contents
// overwritten) in which the tensor-core kernels hand dS from the dK/dV kernel to the dQ kernel instead of computing it
// twice (attention_flash_bwd.cuh): the same dqkv bit for bit, less time (doc/benchmarks.md). Ignored by the generic
// kernels and cuDNN (their size there is 0).
// USE_CUDNN=1: cuDNN's fused SDPA backward with its deterministic algorithm, scratch not used; where an
// attention site is cast, the built-in kernels, as the forward (attention_uses_cudnn).
void attention_backward(floatX* dqkv, float* scratch, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int C, int NH, cudaStream_t stream, unsigned int* amax = nullptr,
                        uint64_t tcast_seed = 0, uint8_t* tcast_scales = nullptr, void* ds = nullptr) {
    if constexpr (kAttentionCudnn) {
        if (attention_uses_cudnn()) {
            attn_check_shape(B, T, C, NH);
            attention_cudnn_backward(dqkv, dout, qkv, out, lse, B, T, NH, C / NH, kStorageFP16, stream);
            attn_amax_bits(amax, dqkv, (size_t)B * T * 3 * C, stream);
            return;
        }
    }
    attention_backward_builtin(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, stream, amax, tcast_seed, tcast_scales, ds);
}

// Bytes of attention_backward's dS workspace for a (B, T, NH, HS) call of this run: B NH ceil(T/16) (ceil(T/16) + 1) / 2
// fragments of 512 bytes (d12, B = 64, T = 1024: 818 MiB; one buffer serves every layer) where the tensor-core kernels
// run (16-bit storage, HS 64 or 128, not on cuDNN: attention_uses_cudnn, so call it after the mode configured its
// casts), else 0 (no workspace needed). Grows as T^2.
static inline size_t attention_backward_ds_bytes(int B, int T, int NH, int HS) {
    if (sizeof(floatX) != 2 || (HS != 64 && HS != 128) || attention_uses_cudnn() || B <= 0 || T <= 0 || NH <= 0) return 0;
    return attn_ds_workspace_bytes(B, T, NH);
}
