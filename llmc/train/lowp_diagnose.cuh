// lowp_diagnose.cuh - `train_gpt2cu --diagnose 1`: how much precision FP8 and TCFP-12 would cost each linear
// layer of the model, measured on a real batch before any training.
//
// For every linear layer y = x Wᵀ + b (the four of each transformer block: qkv, attproj, fc, fcproj; and the
// LM head, weight wte, no bias) the diagnosis prints one table row with
//   * shape eligibility: FP8 GEMMs with per-tensor scales need N, C and OC multiples of 16; TCFP-12 with
//     block scaling 128 also needs C and OC multiples of 128 and a GPU of compute capability 9.x (cuBLASLt's
//     Hopper block scaling, llmc/kernels/gemm/gemm_fp8.cuh);
//   * the SNR of the quantized weight against the BF16 weight W the model holds:
//       FP8       deq(E4M3(W s)) with one power-of-two scale s from amax(W) (llmc/modes/lowp/gemm_lowp.cuh's forward)
//       TCFP-12   deq(W_hi) + deq(W_lo) from tcfp12_split of W (seed ../shared/seeds/tcfp_readme.txt, steps
//                 1-3: W_hi = E4M3(W), R = W - deq(W_hi), W_lo = E4M3(R)), per tensor, and with 128 x 128
//                 tiles where block scaling is eligible;
//   * the SNR of the layer output against the BF16 GEMM's output Y_ref = X · Wᵀ + b (cuBLASLt, fp32
//     accumulation, BF16 output; the model's base GEMM backend) for the same input X:
//       Y_fp8        X and W in E4M3, per tensor (fp8_linear_forward)
//       Y_tcfp       X in E4M3 per tensor, X · W_loᵀ then + X · W_hiᵀ + b into the same BF16 output
//                    (tcfp12_linear_forward, TCFP12_ACC_BF16_LO_FIRST: what the TCFP12=1 trainer runs)
//       Y_tcfp_b128  the same with 1 x 128 blocks of X along C and 128 x 128 tiles of W_hi / W_lo
//   * a flag LOW when any of the row's SNRs is below LOWP_DIAGNOSE_LOW_DB (30 dB), or NaN.
// SNR_dB(ref, x) = 10 log10( Σ ref² / Σ (ref - x)² ) over all elements, the sums in double (the usual signal
// to quantization-noise ratio; 6.02 dB per bit of a uniform quantizer). Zero noise prints "inf".
//
// What is NOT modelled, on purpose (the diagnosis measures the formats, not a training state): no error
// feedback and no stochastic residual rounding (W_lo is round-to-nearest-even; error feedback would need the
// training history), current scaling only (no delayed-scaling history), no fast accumulation, and the split
// reads the BF16 weights (the trainer splits the fp32 master weights when it keeps them), so that every
// column is measured against exactly the weight and output of the BF16 model. Scales are powers of two as in
// the trainer (exact dequantization). The LM head is measured although the trainer keeps it in BF16 unless
// --fp8-lm-head 1.
//
// How the inputs X are obtained. The BF16 forward runs once on the batch with the low-precision backend
// detached (GemmContext::lowp = NULL for the call), so every activation is the BF16 model's. The inputs of
// layer l are then read from the activation buffers, recomputing those that recompute mode -r discarded:
// ln1 / ln2 through gpt2_layernorm_input (-r 2; bit-identical to the forward's), fch_gelu from fch through
// gelu_forward (-r >= 1; with -ge 1 the forward's GELU ran in the cuBLASLt epilogue on the unrounded
// pre-activation, so the recomputed X can differ from it in the last BF16 bit: the one the backward uses).
// atty and lnf are always kept. Every column compares two GEMMs on the same X, so this does not bias them.
//
// Everything runs on the model's stream with the model's cuBLASLt handle and workspace; the buffers are
// allocated once for the largest layer and freed at the end. Outputs of the widest layers (the LM head) are
// computed in slices of output columns (multiples of 128 rows of W) so that the two BF16 output buffers stay
// below LOWP_DIAGNOSE_Y_MAX_ELEMS elements each; the sums of a layer are added slice by slice.
// Determinism: all reductions are per-block partial sums in double in a fixed order, then a host sum in
// block order (no atomics); the GEMMs are cached cuBLASLt algorithms. Two runs print the same table.
//
// The SNR arithmetic, the LOW threshold and the SNR text are plain C in llmc/train/lowp_diagnose_snr.h
// (dev/test/test_lowp_diagnose.c tests them on the host); this file needs nvcc.
//
// BF16 storage only (the FP8 GEMMs write BF16 outputs, and the sums read BF16 tensors): in FP16 / FP32
// builds lowp_diagnose_run is a stub that dies with a message saying so.
#pragma once

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/core/utils.h"
#include "llmc/train/lowp_diagnose_snr.h"
#include "llmc/train/train_config.h"
#include "llmc/data/dataloader.h"
#include "llmc/model/model.cuh"

#if defined(ENABLE_BF16)

#include "llmc/kernels/fp8/fp8_quant.cuh"
#include "llmc/kernels/gemm/gemm_fp8.cuh"

// The two BF16 output buffers (reference and quantized) hold at most this many elements each; wider layers
// are computed in slices of output columns.
#define LOWP_DIAGNOSE_Y_MAX_ELEMS ((size_t)1 << 28)

constexpr int LOWP_DIAG_THREADS = 256;
constexpr int LOWP_DIAG_MAX_PARTIALS = 1024;

// ------------------------------------------------------------------------------------------------
// SNR sums on the device

// Sum of v over the block (blockDim.x == LOWP_DIAG_THREADS), fixed order; every thread gets it. Safe to
// call repeatedly.
__device__ __forceinline__ double lowp_diag_block_sum(double v) {
    __shared__ double part[LOWP_DIAG_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    __syncthreads();  // a previous call may still read part[]
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < LOWP_DIAG_THREADS / 32 ? part[lane] : 0.0;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

// 8 consecutive elements as floats (p 16-byte aligned).
__device__ __forceinline__ void lowp_diag_load8(float* v, const __nv_bfloat16* p) {
    const Packed128<__nv_bfloat16> q = load128(p);
    #pragma unroll
    for (int k = 0; k < 8; k++) v[k] = __bfloat162float(q[k]);
}
__device__ __forceinline__ void lowp_diag_load8(float* v, const float* p) {
    const f128 a = load128(p), b = load128(p + 4);
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        v[k] = a[k];
        v[k + 4] = b[k];
    }
}
__device__ __forceinline__ float lowp_diag_load1(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float lowp_diag_load1(const float* p) { return *p; }

// partials[2 b] = Σ ref², partials[2 b + 1] = Σ (ref - (a + b))² over block b's grid-stride share (b == NULL:
// x = a), in double. vec: ref, a, b 16-byte aligned (8 elements per step), else element by element.
template <class TR, class TA>
__global__ void __launch_bounds__(LOWP_DIAG_THREADS)
    lowp_diag_snr_partials_kernel(double* partials, const TR* __restrict__ ref, const TA* __restrict__ a, const TA* __restrict__ b,
                                  size_t n, int vec) {
    double sig = 0.0, err = 0.0;
    const size_t tid = (size_t)blockIdx.x * LOWP_DIAG_THREADS + threadIdx.x, nthr = (size_t)gridDim.x * LOWP_DIAG_THREADS;
    size_t done = 0;
    if (vec) {
        const size_t n8 = n / 8;
        for (size_t p = tid; p < n8; p += nthr) {
            float r[8], x[8], y[8];
            lowp_diag_load8(r, ref + p * 8);
            lowp_diag_load8(x, a + p * 8);
            if (b) {
                lowp_diag_load8(y, b + p * 8);
            } else {
                #pragma unroll
                for (int k = 0; k < 8; k++) y[k] = 0.0f;
            }
            #pragma unroll
            for (int k = 0; k < 8; k++) {
                const double rk = (double)r[k], e = rk - ((double)x[k] + (double)y[k]);
                sig += rk * rk;
                err += e * e;
            }
        }
        done = n8 * 8;
    }
    for (size_t i = done + tid; i < n; i += nthr) {
        const double rk = (double)lowp_diag_load1(ref + i);
        const double e = rk - ((double)lowp_diag_load1(a + i) + (b ? (double)lowp_diag_load1(b + i) : 0.0));
        sig += rk * rk;
        err += e * e;
    }
    sig = lowp_diag_block_sum(sig);
    err = lowp_diag_block_sum(err);
    if (threadIdx.x == 0) {
        partials[2 * blockIdx.x] = sig;
        partials[2 * blockIdx.x + 1] = err;
    }
}

// ------------------------------------------------------------------------------------------------
// Host side

enum { LOWP_DIAG_NA = 0, LOWP_DIAG_OK = 1, LOWP_DIAG_FAILED = 2 };
enum {
    LOWP_DIAG_W_FP8 = 0, LOWP_DIAG_W_TCFP, LOWP_DIAG_W_TCFP_B128,  // weight SNR columns
    LOWP_DIAG_Y_FP8, LOWP_DIAG_Y_TCFP, LOWP_DIAG_Y_TCFP_B128,      // output SNR columns
    LOWP_DIAG_COLS
};
static const char* const LOWP_DIAG_COL_NAMES[LOWP_DIAG_COLS] = {"W_fp8_dB", "W_tcfp_dB", "W_tcfp_b128_dB",
                                                                "Y_fp8_dB", "Y_tcfp_dB", "Y_tcfp_b128_dB"};

struct LowpDiagCell {
    int state;  // LOWP_DIAG_NA (not eligible), LOWP_DIAG_OK (db valid), LOWP_DIAG_FAILED (cuBLASLt refused the GEMM)
    double db;
};

struct LowpDiagRow {
    int layer;         // transformer block, -1 for the LM head
    const char* name;  // qkv, attproj, fc, fcproj, lm_head
    int N, C, OC;
    int tensor_ok;     // FP8 / TCFP-12 per-tensor GEMMs can take the shape
    int b128_ok;       // block-128 TCFP-12 GEMMs can take it (and the GPU has them)
    char eligible[48]; // "yes", "no (C%16)", "yes; b128 no (cc 8.9)", ...
    LowpDiagCell cell[LOWP_DIAG_COLS];
};

// Device scale triples (amax, QUANT scale, DEQUANT scale), each float on its own 16-byte boundary (cuBLASLt
// reads the dequant scales through its A/B scale pointers): X, W (FP8), W_hi, W_lo (TCFP-12 per tensor).
enum { LOWP_DIAG_SC_X = 0, LOWP_DIAG_SC_W, LOWP_DIAG_SC_HI, LOWP_DIAG_SC_LO, LOWP_DIAG_SC_COUNT };
#define LOWP_DIAG_AMAX(d, t) ((d)->sc + 12 * (t) + 0)
#define LOWP_DIAG_SCALE(d, t) ((d)->sc + 12 * (t) + 4)
#define LOWP_DIAG_INV(d, t) ((d)->sc + 12 * (t) + 8)

// Buffers and state of one diagnosis (sizes for the largest layer).
struct LowpDiagnosis {
    GPT2* m;
    cudaStream_t s;
    Fp8GemmContext f8;           // FP8 plan cache on the model's GemmContext (handle, workspace, stream)
    int cc_major, cc_minor;
    int oc_chunk;                // output columns per GEMM slice (a multiple of 128, or the whole layer)
    floatX *yref, *yq;           // (N, oc_chunk) BF16 outputs: reference, quantized
    float *w32, *deq_a, *deq_b;  // (OC, C) fp32: the weight widened (split input), dequantized codes
    uint8_t *w8, *whi, *wlo, *whi_b, *wlo_b;  // (OC, C) E4M3 codes: FP8 W, TCFP-12 per tensor, TCFP-12 block 128
    uint8_t *x8, *x8_b;          // (N, C) E4M3 codes of X: per tensor, 1 x 128 blocks
    float *blk_s_hi, *blk_inv_hi, *blk_s_lo, *blk_inv_lo;  // 128 x 128 tile scales of W_hi / W_lo
    float *xs, *xinv;            // 1 x 128 block scales of X (VEC128 layout)
    float* sc;                   // LOWP_DIAG_SC_COUNT scale triples
    float* scratch;              // FP8_QUANT_SCRATCH_FLOATS
    __nv_bfloat16* bias;         // 256-byte aligned copy of the layer's bias (the FP8 epilogue's bias pointer)
    double* partials;            // device, 2 * LOWP_DIAG_MAX_PARTIALS
    double* host_partials;       // host, same
    size_t device_bytes;         // what the buffers above take
};

static inline bool lowp_diag_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// signal += Σ ref², noise += Σ (ref - (a + b))² over n elements (b may be NULL), on the device in double,
// then the block partials summed on the host in block order. Synchronizes the stream.
template <class TR, class TA>
static inline void lowp_diag_sums(LowpDiagnosis* d, const TR* ref, const TA* a, const TA* b, size_t n, double* signal, double* noise) {
    const size_t chunks = ceil_div_sz(n, (size_t)LOWP_DIAG_THREADS * 8);
    const int grid = (int)(chunks < 1 ? 1 : chunks < (size_t)LOWP_DIAG_MAX_PARTIALS ? chunks : (size_t)LOWP_DIAG_MAX_PARTIALS);
    const int vec = lowp_diag_aligned16(ref) && lowp_diag_aligned16(a) && (b == NULL || lowp_diag_aligned16(b));
    lowp_diag_snr_partials_kernel<TR, TA><<<grid, LOWP_DIAG_THREADS, 0, d->s>>>(d->partials, ref, a, b, n, vec);
    cudaCheckLaunch();
    cudaCheck(cudaMemcpyAsync(d->host_partials, d->partials, 2 * (size_t)grid * sizeof(double), cudaMemcpyDeviceToHost, d->s));
    cudaCheck(cudaStreamSynchronize(d->s));
    for (int i = 0; i < grid; i++) {
        *signal += d->host_partials[2 * i];
        *noise += d->host_partials[2 * i + 1];
    }
}

static inline LowpDiagCell lowp_diag_cell(double signal, double noise) {
    LowpDiagCell c;
    c.state = LOWP_DIAG_OK;
    c.db = lowp_snr_db(signal, noise);
    return c;
}

template <class T>
static inline void lowp_diag_alloc(LowpDiagnosis* d, T** p, size_t n) {
    const size_t bytes = (n > 0 ? n : 1) * sizeof(T);
    cudaCheck(cudaMalloc(p, bytes));
    d->device_bytes += bytes;
}

// The linear layers' shapes (C in, OC out) in model order within a block, then the LM head.
static inline void lowp_diag_shapes(const GPT2Config* c, int cin[5], int cout[5]) {
    const int C = c->channels;
    const int ci[5] = {C, C, C, 4 * C, C};
    const int co[5] = {3 * C, C, 4 * C, C, c->padded_vocab_size};
    memcpy(cin, ci, sizeof(ci));
    memcpy(cout, co, sizeof(co));
}

static inline void lowp_diag_init(LowpDiagnosis* d, GPT2* m, int N) {
    d->m = m;
    d->s = m->stream;
    fp8_gemm_context_init(&d->f8, &m->gemm);
    int cin[5], cout[5];
    lowp_diag_shapes(&m->config, cin, cout);
    size_t max_wn = 0, max_xc = 0, max_wblk = 0, max_xblk = 0;
    int max_oc = 0;
    for (int i = 0; i < 5; i++) {
        const size_t wn = (size_t)cout[i] * cin[i];
        if (wn > max_wn) max_wn = wn;
        if ((size_t)cin[i] > max_xc) max_xc = (size_t)cin[i];
        if (cout[i] > max_oc) max_oc = cout[i];
        const size_t wb = fp8_block_layout_count(fp8_block_layout_cublaslt_blk128x128(cout[i], cin[i]));
        const size_t xb = fp8_block_layout_count(fp8_block_layout_cublaslt_vec128(N, cin[i]));
        if (wb > max_wblk) max_wblk = wb;
        if (xb > max_xblk) max_xblk = xb;
    }
    size_t chunk = LOWP_DIAGNOSE_Y_MAX_ELEMS / (size_t)N / 128 * 128;
    if (chunk < 128) chunk = 128;
    d->oc_chunk = (size_t)max_oc <= chunk ? max_oc : (int)chunk;
    const size_t y_elems = (size_t)N * d->oc_chunk;
    lowp_diag_alloc(d, &d->yref, y_elems);
    lowp_diag_alloc(d, &d->yq, y_elems);
    lowp_diag_alloc(d, &d->w32, max_wn);
    lowp_diag_alloc(d, &d->deq_a, max_wn);
    lowp_diag_alloc(d, &d->deq_b, max_wn);
    uint8_t** codes[5] = {&d->w8, &d->whi, &d->wlo, &d->whi_b, &d->wlo_b};
    for (int i = 0; i < 5; i++) lowp_diag_alloc(d, codes[i], max_wn);
    lowp_diag_alloc(d, &d->x8, (size_t)N * max_xc);
    lowp_diag_alloc(d, &d->x8_b, (size_t)N * max_xc);
    float** blk[4] = {&d->blk_s_hi, &d->blk_inv_hi, &d->blk_s_lo, &d->blk_inv_lo};
    for (int i = 0; i < 4; i++) lowp_diag_alloc(d, blk[i], max_wblk);
    lowp_diag_alloc(d, &d->xs, max_xblk);
    lowp_diag_alloc(d, &d->xinv, max_xblk);
    lowp_diag_alloc(d, &d->sc, (size_t)12 * LOWP_DIAG_SC_COUNT);
    lowp_diag_alloc(d, &d->scratch, FP8_QUANT_SCRATCH_FLOATS);
    lowp_diag_alloc(d, &d->bias, (size_t)max_oc);
    lowp_diag_alloc(d, &d->partials, 2 * (size_t)LOWP_DIAG_MAX_PARTIALS);
    cudaCheck(cudaMemset(d->sc, 0, (size_t)12 * LOWP_DIAG_SC_COUNT * sizeof(float)));
    d->host_partials = (double*)malloc_check(2 * (size_t)LOWP_DIAG_MAX_PARTIALS * sizeof(double));
}

static inline void lowp_diag_free(LowpDiagnosis* d) {
    cudaCheck(cudaStreamSynchronize(d->s));
    fp8_gemm_context_free(&d->f8);
    void* bufs[] = {d->yref, d->yq, d->w32, d->deq_a, d->deq_b, d->w8, d->whi, d->wlo, d->whi_b, d->wlo_b, d->x8, d->x8_b,
                    d->blk_s_hi, d->blk_inv_hi, d->blk_s_lo, d->blk_inv_lo, d->xs, d->xinv, d->sc, d->scratch, d->bias, d->partials};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) cudaCheck(cudaFree(bufs[i]));
    free(d->host_partials);
}

// One FP8 GEMM's outcome for a slice: on success adds its sums; on failure marks the column (once) and says why.
static inline void lowp_diag_gemm_done(LowpDiagnosis* d, LowpDiagRow* row, int col, bool ok, cublasStatus_t cs, double* sig,
                                       double* noi, size_t n, int* failed) {
    if (ok) {
        lowp_diag_sums(d, d->yref, d->yq, (const floatX*)NULL, n, sig, noi);
        return;
    }
    *failed = 1;
    char where[32];
    if (row->layer >= 0) snprintf(where, sizeof(where), "layer %d %s", row->layer, row->name);
    else snprintf(where, sizeof(where), "%s", row->name);
    printf("note: --diagnose: %s (N=%d C=%d OC=%d): %s: cuBLASLt FP8 GEMM failed (%s): %s\n", where, row->N, row->C, row->OC,
           LOWP_DIAG_COL_NAMES[col], cublasLtGetStatusName(cs), d->f8.last_error);
}

// Fill `row` for the linear layer out (N, OC) = X (N, C) · W (OC, C)ᵀ + bias (bias (OC) or NULL), all BF16
// row-major device tensors of the model. Overwrites every diagnosis buffer; X, W and bias are only read.
static inline void lowp_diag_layer(LowpDiagnosis* d, LowpDiagRow* row, const floatX* X, const floatX* W, const floatX* bias,
                                   int N, int C, int OC) {
    cudaStream_t s = d->s;
    row->N = N;
    row->C = C;
    row->OC = OC;
    for (int k = 0; k < LOWP_DIAG_COLS; k++) {
        row->cell[k].state = LOWP_DIAG_NA;
        row->cell[k].db = NAN;
    }
    const char* bad16 = N % 16 ? "N%16" : C % 16 ? "C%16" : OC % 16 ? "OC%16" : NULL;
    row->tensor_ok = bad16 == NULL;
    char why128[32] = "";
    if (row->tensor_ok) {
        if (d->cc_major != 9) snprintf(why128, sizeof(why128), "cc %d.%d", d->cc_major, d->cc_minor);
        else if (C % 128) snprintf(why128, sizeof(why128), "C%%128");
        else if (OC % 128) snprintf(why128, sizeof(why128), "OC%%128");
    }
    row->b128_ok = row->tensor_ok && why128[0] == '\0';
    if (!row->tensor_ok) snprintf(row->eligible, sizeof(row->eligible), "no (%s)", bad16);
    else if (!row->b128_ok) snprintf(row->eligible, sizeof(row->eligible), "yes; b128 no (%s)", why128);
    else snprintf(row->eligible, sizeof(row->eligible), "yes");

    const size_t wn = (size_t)OC * C;
    const FP8BlockLayout WL = fp8_block_layout_cublaslt_blk128x128(OC, C);
    double sig, noi;
    // ---- weights: FP8 per tensor
    fp8_amax_scale(LOWP_DIAG_AMAX(d, LOWP_DIAG_SC_W), LOWP_DIAG_SCALE(d, LOWP_DIAG_SC_W), LOWP_DIAG_INV(d, LOWP_DIAG_SC_W), W, wn,
                   FP8_E4M3FN, 0, 1, d->scratch, s);
    fp8_quantize(d->w8, W, OC, C, FP8_E4M3FN, LOWP_DIAG_SCALE(d, LOWP_DIAG_SC_W), 0, 0, 0, s);
    fp8_dequantize(d->deq_a, d->w8, wn, FP8_E4M3FN, LOWP_DIAG_SCALE(d, LOWP_DIAG_SC_W), s);
    sig = noi = 0.0;
    lowp_diag_sums(d, W, d->deq_a, (const float*)NULL, wn, &sig, &noi);
    row->cell[LOWP_DIAG_W_FP8] = lowp_diag_cell(sig, noi);
    // ---- weights: TCFP-12 per tensor (no error feedback, no SRR)
    widen_to_float(d->w32, W, wn, s);
    TCFP12Split sp;
    memset(&sp, 0, sizeof(sp));
    sp.w_hi = d->whi;
    sp.w_lo = d->wlo;
    sp.scale_hi = LOWP_DIAG_SCALE(d, LOWP_DIAG_SC_HI);
    sp.inv_scale_hi = LOWP_DIAG_INV(d, LOWP_DIAG_SC_HI);
    sp.amax_hi = LOWP_DIAG_AMAX(d, LOWP_DIAG_SC_HI);
    sp.scale_lo = LOWP_DIAG_SCALE(d, LOWP_DIAG_SC_LO);
    sp.inv_scale_lo = LOWP_DIAG_INV(d, LOWP_DIAG_SC_LO);
    sp.amax_lo = LOWP_DIAG_AMAX(d, LOWP_DIAG_SC_LO);
    sp.w = d->w32;
    sp.ef = NULL;
    sp.OC = OC;
    sp.C = C;
    sp.blocked = 0;
    sp.margin = 0;
    sp.pow2 = 1;
    sp.srr = 0;
    sp.scratch = d->scratch;
    tcfp12_split(sp, s);
    fp8_dequantize(d->deq_a, d->whi, wn, FP8_E4M3FN, sp.scale_hi, s);
    fp8_dequantize(d->deq_b, d->wlo, wn, FP8_E4M3FN, sp.scale_lo, s);
    sig = noi = 0.0;
    lowp_diag_sums(d, W, (const float*)d->deq_a, (const float*)d->deq_b, wn, &sig, &noi);
    row->cell[LOWP_DIAG_W_TCFP] = lowp_diag_cell(sig, noi);
    // ---- weights: TCFP-12 with 128 x 128 tiles
    if (row->b128_ok) {
        TCFP12Split sb = sp;
        sb.w_hi = d->whi_b;
        sb.w_lo = d->wlo_b;
        sb.blocked = 1;
        sb.layout = WL;
        sb.scale_hi = d->blk_s_hi;
        sb.inv_scale_hi = d->blk_inv_hi;
        sb.scale_lo = d->blk_s_lo;
        sb.inv_scale_lo = d->blk_inv_lo;
        sb.amax_hi = sb.amax_lo = NULL;
        tcfp12_split(sb, s);
        fp8_dequantize_blocked(d->deq_a, d->whi_b, WL, FP8_E4M3FN, d->blk_s_hi, s);
        fp8_dequantize_blocked(d->deq_b, d->wlo_b, WL, FP8_E4M3FN, d->blk_s_lo, s);
        sig = noi = 0.0;
        lowp_diag_sums(d, W, (const float*)d->deq_a, (const float*)d->deq_b, wn, &sig, &noi);
        row->cell[LOWP_DIAG_W_TCFP_B128] = lowp_diag_cell(sig, noi);
    }
    // ---- the input X: E4M3 per tensor (current scaling), and with 1 x 128 blocks along C
    if (row->tensor_ok) {
        fp8_amax_scale(LOWP_DIAG_AMAX(d, LOWP_DIAG_SC_X), LOWP_DIAG_SCALE(d, LOWP_DIAG_SC_X), LOWP_DIAG_INV(d, LOWP_DIAG_SC_X), X,
                       (size_t)N * C, FP8_E4M3FN, 0, 1, d->scratch, s);
        fp8_quantize(d->x8, X, N, C, FP8_E4M3FN, LOWP_DIAG_SCALE(d, LOWP_DIAG_SC_X), 0, 0, 0, s);
    }
    if (row->b128_ok) {
        const FP8BlockLayout XL = fp8_block_layout_cublaslt_vec128(N, C);
        fp8_block_scales(d->xs, d->xinv, X, XL, FP8_E4M3FN, 0, 1, s);
        fp8_quantize_blocked(d->x8_b, X, XL, FP8_E4M3FN, d->xs, 0, 0, 0, s);
    }
    const __nv_bfloat16* b8 = NULL;  // the FP8 epilogue's bias from a 256-byte aligned copy, as the trainer does
    if (bias && row->tensor_ok) {
        cudaCheck(cudaMemcpyAsync(d->bias, bias, (size_t)OC * sizeof(floatX), cudaMemcpyDeviceToDevice, s));
        b8 = d->bias;
    }
    // ---- outputs, slice by slice of output columns: the reference, then each quantized GEMM against it
    double ys[3] = {0.0, 0.0, 0.0}, yn[3] = {0.0, 0.0, 0.0};
    int failed[3] = {0, 0, 0};
    if (row->tensor_ok) {
        for (int o0 = 0; o0 < OC; o0 += d->oc_chunk) {
            const int oc = OC - o0 < d->oc_chunk ? OC - o0 : d->oc_chunk;
            const size_t n = (size_t)N * oc, woff = (size_t)o0 * C;
            gemm_backend_forward(&d->m->gemm, d->yref, X, W + woff, bias ? bias + o0 : NULL, N, C, oc, NULL);
            cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
            bool ok;
            if (!failed[0]) {
                ok = fp8_linear_forward(&d->f8, d->yq, d->x8, LOWP_DIAG_INV(d, LOWP_DIAG_SC_X), d->w8 + woff,
                                        LOWP_DIAG_INV(d, LOWP_DIAG_SC_W), b8 ? b8 + o0 : NULL, N, C, oc, FP8_SCALE_TENSOR, 0, 0.0f,
                                        &cs);
                lowp_diag_gemm_done(d, row, LOWP_DIAG_Y_FP8, ok, cs, &ys[0], &yn[0], n, &failed[0]);
            }
            if (!failed[1]) {
                ok = tcfp12_linear_forward(&d->f8, d->yq, d->x8, LOWP_DIAG_INV(d, LOWP_DIAG_SC_X), d->whi + woff,
                                           LOWP_DIAG_INV(d, LOWP_DIAG_SC_HI), d->wlo + woff, LOWP_DIAG_INV(d, LOWP_DIAG_SC_LO),
                                           b8 ? b8 + o0 : NULL, N, C, oc, FP8_SCALE_TENSOR, 0, TCFP12_ACC_BF16_LO_FIRST, NULL, &cs);
                lowp_diag_gemm_done(d, row, LOWP_DIAG_Y_TCFP, ok, cs, &ys[1], &yn[1], n, &failed[1]);
            }
            if (row->b128_ok && !failed[2]) {
                // tile rows of this slice: o0 is a multiple of 128, the tile grid's row stride does not depend on OC
                const size_t toff = (size_t)(o0 / 128) * (size_t)WL.stride_row;
                ok = tcfp12_linear_forward(&d->f8, d->yq, d->x8_b, d->xinv, d->whi_b + woff, d->blk_inv_hi + toff, d->wlo_b + woff,
                                           d->blk_inv_lo + toff, b8 ? b8 + o0 : NULL, N, C, oc, FP8_SCALE_BLK128_VEC128, 0,
                                           TCFP12_ACC_BF16_LO_FIRST, NULL, &cs);
                lowp_diag_gemm_done(d, row, LOWP_DIAG_Y_TCFP_B128, ok, cs, &ys[2], &yn[2], n, &failed[2]);
            }
        }
    }
    const int ycol[3] = {LOWP_DIAG_Y_FP8, LOWP_DIAG_Y_TCFP, LOWP_DIAG_Y_TCFP_B128};
    const int yelig[3] = {row->tensor_ok, row->tensor_ok, row->b128_ok};
    for (int k = 0; k < 3; k++) {
        if (!yelig[k]) continue;
        if (failed[k]) row->cell[ycol[k]].state = LOWP_DIAG_FAILED;
        else row->cell[ycol[k]] = lowp_diag_cell(ys[k], yn[k]);
    }
}

static inline int lowp_diag_row_low(const LowpDiagRow* r) {
    for (int k = 0; k < LOWP_DIAG_COLS; k++)
        if (r->cell[k].state == LOWP_DIAG_OK && lowp_snr_is_low(r->cell[k].db)) return 1;
    return 0;
}

static inline int lowp_diag_row_failed(const LowpDiagRow* r) {
    for (int k = 0; k < LOWP_DIAG_COLS; k++)
        if (r->cell[k].state == LOWP_DIAG_FAILED) return 1;
    return 0;
}

// "LOW", "FAIL", "LOW FAIL" or "".
static inline void lowp_diag_flag(char* out, size_t n, const LowpDiagRow* r) {
    const int low = lowp_diag_row_low(r), fail = lowp_diag_row_failed(r);
    snprintf(out, n, "%s%s%s", low ? "LOW" : "", low && fail ? " " : "", fail ? "FAIL" : "");
}

static inline void lowp_diag_cell_text(char* out, size_t n, const LowpDiagCell& c) {
    if (c.state == LOWP_DIAG_NA) snprintf(out, n, "n/a");
    else if (c.state == LOWP_DIAG_FAILED) snprintf(out, n, "fail");
    else lowp_snr_format(out, n, c.db);
}

static inline void lowp_diag_layer_text(char* out, size_t n, const LowpDiagRow* r) {
    if (r->layer >= 0) snprintf(out, n, "%d", r->layer);
    else snprintf(out, n, "head");
}

static inline void lowp_diag_print_table(const LowpDiagRow* rows, int nrows) {
    static const int width[LOWP_DIAG_COLS] = {9, 10, 15, 9, 10, 15};
    printf("%-5s %-8s %7s %6s %6s %-24s", "layer", "name", "N", "C", "OC", "eligible");
    for (int k = 0; k < LOWP_DIAG_COLS; k++) printf(" %*s", width[k], LOWP_DIAG_COL_NAMES[k]);
    printf("  flag\n");
    for (int i = 0; i < nrows; i++) {
        const LowpDiagRow* r = &rows[i];
        char layer[16], flag[16];
        lowp_diag_layer_text(layer, sizeof(layer), r);
        lowp_diag_flag(flag, sizeof(flag), r);
        printf("%-5s %-8s %7d %6d %6d %-24s", layer, r->name, r->N, r->C, r->OC, r->eligible);
        for (int k = 0; k < LOWP_DIAG_COLS; k++) {
            char v[32];
            lowp_diag_cell_text(v, sizeof(v), r->cell[k]);
            printf(" %*s", width[k], v);
        }
        printf("  %s\n", flag);
    }
    // summary: flagged rows, and per column the minimum (and where) and how many are below the threshold
    int flagged = 0, failed = 0;
    for (int i = 0; i < nrows; i++) {
        flagged += lowp_diag_row_low(&rows[i]);
        failed += lowp_diag_row_failed(&rows[i]);
    }
    printf("summary: %d of %d linear layers flagged LOW (an SNR < %.0f dB)", flagged, nrows, LOWP_DIAGNOSE_LOW_DB);
    if (failed) printf(", %d with a failed FP8 GEMM", failed);
    printf("; per column: min dB (layer) / layers < %.0f dB:\n", LOWP_DIAGNOSE_LOW_DB);
    for (int k = 0; k < LOWP_DIAG_COLS; k++) {
        int best = -1, low = 0, have = 0;
        for (int i = 0; i < nrows; i++) {
            const LowpDiagCell& c = rows[i].cell[k];
            if (c.state != LOWP_DIAG_OK) continue;
            have++;
            low += lowp_snr_is_low(c.db);
            // NaN is the worst value; otherwise the smallest
            if (best < 0 || (!isnan(rows[best].cell[k].db) && (isnan(c.db) || c.db < rows[best].cell[k].db))) best = i;
        }
        if (!have) {
            printf("  %-15s n/a\n", LOWP_DIAG_COL_NAMES[k]);
            continue;
        }
        char v[32], layer[16];
        lowp_snr_format(v, sizeof(v), rows[best].cell[k].db);
        lowp_diag_layer_text(layer, sizeof(layer), &rows[best]);
        printf("  %-15s min %8s (layer %s %s)  %d of %d < %.0f dB\n", LOWP_DIAG_COL_NAMES[k], v, layer, rows[best].name, low, have,
               LOWP_DIAGNOSE_LOW_DB);
    }
}

// <out_dir>/diagnose.csv, written to diagnose.csv.tmp and renamed. Empty SNR fields: not eligible; "fail":
// cuBLASLt refused the GEMM.
static inline void lowp_diag_write_csv(const char* out_dir, const LowpDiagRow* rows, int nrows) {
    ensure_output_dir(out_dir);
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/diagnose.csv", out_dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopen_check(tmp, "w");
    fprintf(f, "layer,name,N,C,OC,eligible");
    for (int k = 0; k < LOWP_DIAG_COLS; k++) fprintf(f, ",%s", LOWP_DIAG_COL_NAMES[k]);
    fprintf(f, ",flag\n");
    for (int i = 0; i < nrows; i++) {
        const LowpDiagRow* r = &rows[i];
        char layer[16], flag[16];
        lowp_diag_layer_text(layer, sizeof(layer), r);
        lowp_diag_flag(flag, sizeof(flag), r);
        fprintf(f, "%s,%s,%d,%d,%d,\"%s\"", layer, r->name, r->N, r->C, r->OC, r->eligible);
        for (int k = 0; k < LOWP_DIAG_COLS; k++) {
            const LowpDiagCell& c = r->cell[k];
            if (c.state == LOWP_DIAG_NA) fprintf(f, ",");
            else if (c.state == LOWP_DIAG_FAILED) fprintf(f, ",fail");
            else if (isnan(c.db) || isinf(c.db)) fprintf(f, ",%s", isnan(c.db) ? "nan" : c.db > 0 ? "inf" : "-inf");
            else fprintf(f, ",%.4f", c.db);
        }
        fprintf(f, ",%s\n", flag);
    }
    if (ferror(f)) die("%s: write failed", tmp);
    fclose_check(f, tmp);
    if (rename(tmp, path) != 0) die("%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    printf("wrote %s\n", path);
}

// `--diagnose 1`: per linear layer, shape eligibility and the SNR in dB (see the top of this file) of the
// FP8 and TCFP-12 weights and layer outputs against the BF16 model's, on the NEXT batch of `train` (its first
// batch, or the one after the resumed position): loads it with dataloader_next_batch, uploads it with
// gpt2_upload_batch and runs the BF16 forward with model->gemm.lowp detached (restored before returning).
// Rows: for each block l = 0..L-1: qkv (X = ln1, W = qkvw[l], (3C, C)), attproj (X = atty, (C, C)),
// fc (X = ln2, (4C, C)), fcproj (X = fch_gelu, (C, 4C)); then lm_head (X = lnf, W = wte, (Vp, C), no bias);
// N = B*T rows each. Prints the table and a summary to stdout; if out_dir != NULL and write_csv, also
// <out_dir>/diagnose.csv (same columns; SNRs with 4 decimals, empty = not eligible), atomically.
// Overwrites the model's activations (and LayerNorm statistics); leaves parameters and optimizer state alone.
// Errors (die with "error: --diagnose 1: ..."): a GPU below compute capability 8.9 (no FP8 tensor cores).
// Block-128 columns are n/a below or above compute capability 9.x. A cuBLASLt refusal of an FP8 GEMM is
// reported ("note: ...", cell "fail", flag FAIL) and the diagnosis goes on. Device memory: allocated once for
// the largest layer (printed), freed before returning. CUDA and cuBLAS errors end the program as everywhere.
static inline void lowp_diagnose_run(GPT2* model, DataLoader* train, const char* out_dir, int write_csv) {
    const int cc = cuda_current_cc(), major = cc / 10, minor = cc % 10;
    if (cc < 89) die("--diagnose 1: needs FP8 tensor cores (compute capability 8.9 or newer); this GPU is %d.%d", major, minor);
    const double t0 = wall_seconds();
    const GPT2Config* c = &model->config;
    const int B = model->B, T = model->T, N = B * T, L = c->num_layers, C = c->channels, Vp = c->padded_vocab_size;
    const size_t BTC = (size_t)N * C;

    LowpDiagnosis* d = (LowpDiagnosis*)calloc_check(1, sizeof(LowpDiagnosis));
    d->cc_major = major;
    d->cc_minor = minor;
    lowp_diag_init(d, model, N);

    // the BF16 forward on the batch, with no low-precision backend
    dataloader_next_batch(train);
    gpt2_upload_batch(model, train->inputs, train->targets, B, T);
    // detached until every row is done: gpt2_layernorm_input asks the backend whether it kept its own copy of
    // the input (then it does not recompute ln1 / ln2); without a backend it always recomputes them
    GemmLowpBackend* saved = model->gemm.lowp;
    model->gemm.lowp = NULL;
    gpt2_forward(model, B, T);

    printf("--diagnose: FP8 / TCFP-12 vs BF16, per linear layer, on one train batch (B=%d T=%d: N=%d rows); "
           "%.0f MiB of device buffers\n", B, T, N, d->device_bytes / (1024.0 * 1024.0));
    printf("  SNR_dB = 10 log10(sum ref^2 / sum (ref - x)^2) (double sums); W_*: x = dequantized weight, ref = the BF16 weight;\n"
           "  Y_*: x = the FP8 GEMM's BF16 output, ref = the BF16 GEMM's output X.W^T + b on the same X.\n"
           "  fp8: E4M3 X and W, per-tensor power-of-two scales from amax; tcfp: W = W_hi + W_lo (E4M3 each, split of the\n"
           "  BF16 weight), X E4M3, two GEMMs (W_lo first) into one BF16 output; b128: 128x128 tiles of W, 1x128 blocks of X.\n"
           "  Not modelled: error feedback, SRR, delayed scaling, fast accumulation. LOW: an SNR < %.0f dB. n/a: not eligible.\n"
           "  The LM head runs in FP8 in training with --fp8-lm-head 1 (the FP8 build's default), else in BF16.\n",
           LOWP_DIAGNOSE_LOW_DB);

    const int nrows = 4 * L + 1;
    LowpDiagRow* rows = (LowpDiagRow*)calloc_check((size_t)nrows, sizeof(LowpDiagRow));
    const ParameterTensors& p = model->params;
    ActivationTensors& a = model->acts;
    for (int l = 0; l < L; l++) {
        LowpDiagRow* r = &rows[4 * l];
        for (int k = 0; k < 4; k++) r[k].layer = l;
        r[0].name = "qkv";
        r[1].name = "attproj";
        r[2].name = "fc";
        r[3].name = "fcproj";
        const floatX* ln1 = gpt2_layernorm_input(model, l, 1, B, T);  // recomputed with -r 2
        lowp_diag_layer(d, &r[0], ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + (size_t)l * 3 * C, N, C, 3 * C);
        lowp_diag_layer(d, &r[1], a.atty + l * BTC, p.attprojw + (size_t)l * C * C, p.attprojb + (size_t)l * C, N, C, C);
        const floatX* ln2 = gpt2_layernorm_input(model, l, 2, B, T);
        lowp_diag_layer(d, &r[2], ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + (size_t)l * 4 * C, N, C, 4 * C);
        floatX* fch_gelu = a.fch_gelu;  // one (B,T,4C) buffer with -r >= 1: recompute layer l's from fch
        if (model->recompute >= 1) gelu_forward(fch_gelu, a.fch + l * 4 * BTC, 4 * BTC, model->stream);
        else fch_gelu += l * 4 * BTC;
        lowp_diag_layer(d, &r[3], fch_gelu, p.fcprojw + (size_t)l * 4 * C * C, p.fcprojb + (size_t)l * C, N, 4 * C, C);
    }
    rows[4 * L].layer = -1;
    rows[4 * L].name = "lm_head";
    lowp_diag_layer(d, &rows[4 * L], a.lnf, p.wte, NULL, N, C, Vp);
    model->gemm.lowp = saved;

    lowp_diag_print_table(rows, nrows);
    if (out_dir && write_csv) lowp_diag_write_csv(out_dir, rows, nrows);
    lowp_diag_free(d);
    printf("--diagnose: done in %.1f s\n", wall_seconds() - t0);
    free(rows);
    free(d);
}

#else  // FP16 / FP32 storage

// The diagnosis compares FP8 GEMMs (BF16 outputs) with the BF16 model: not available in this build.
static inline void lowp_diagnose_run(GPT2* model, DataLoader* train, const char* out_dir, int write_csv) {
    (void)model; (void)train; (void)out_dir; (void)write_csv;
    die("--diagnose 1: needs BF16 storage (the default build, FP8=1, TCFP12=1 or the SF16 builds); this build is %s",
        PRECISION_MODE_NAME);
}

#endif  // ENABLE_BF16
