/*
train_gpt2.c - the readable fp32 CPU reference trainer: the specification of the model.

GPT-2 (Radford et al. 2019) as trained here:
  x      = wte[token] + wpe[position]                                  (B,T,C)
  L x    { x += attproj(causal_self_attention(LN1(x)))                 pre-LayerNorm blocks
           x += fcproj(gelu_tanh(fc(LN2(x)))) }
  logits = LNf(x) · wteᵀ                                               (B,T,Vp), tied LM head
  loss   = mean cross-entropy of softmax over the first V logits       padded columns ignored
Backward is written out by hand, the optimizer is AdamW (Loshchilov & Hutter 2019) with weight decay
on the 2-D tensors only, the global gradient norm is clipped at 1.0 and the learning rate follows
warmup + cosine (llmc/train/schedulers.h). Every tensor is row-major; weights are (out, in): y = x·Wᵀ + b.

Everything is fp32. Matrix products accumulate in a fixed order, so results do not depend on the
number of OpenMP threads. test_gpt2.c includes this file with TESTING defined (no main) and checks it
against the PyTorch reference of dev/reference/.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "llmc/core/utils.h"
#include "llmc/model/gpt2_config.h"
#include "llmc/model/checkpoint.h"
#include "llmc/data/dataloader.h"
#include "llmc/data/tokenizer.h"
#include "llmc/train/schedulers.h"
#include "llmc/obs/logger.h"
#include "llmc/core/rand.h"
#include "llmc/model/gpt2_init.h"
#include "llmc/core/cli.h"
#include "llmc/train/train_config.h"
#include "llmc/train/train_setup.h"
#include "llmc/data/hellaswag.h"
#include "llmc/train/outlier_detector.h"
#include "llmc/train/checkpoint_retention.h"

// ----------------------------------------------------------------------------------------------
// Matrix products. One cache-tiled routine serves the forward product and both backward products.

// Register tile: MR rows x NV vectors of output columns stay in vector registers while k runs.
// GCC/Clang vector extensions keep this portable (AVX-512, AVX2, NEON) without intrinsics.
#if defined(__AVX512F__)
#define GEMM_VEC_BYTES 64
#elif defined(__AVX__)
#define GEMM_VEC_BYTES 32
#else
#define GEMM_VEC_BYTES 16   // SSE / NEON: what every x86-64 and arm64 has
#endif
typedef float vecf __attribute__((vector_size(GEMM_VEC_BYTES)));
#define GEMM_VL (GEMM_VEC_BYTES / 4)    // floats per vector
#define GEMM_MR 6                       // 6 x 2 accumulators + 2 B vectors + 1 broadcast fit 16 registers
#define GEMM_NV 2
#define GEMM_NR (GEMM_NV * GEMM_VL)
#define GEMM_PANEL (8 * GEMM_NR)  // output columns per panel
#define GEMM_KC 256               // k values per chunk: a KC x PANEL block of B stays in L2

static inline vecf vec_load(const float* p) { vecf v; memcpy(&v, p, sizeof(v)); return v; }
static inline void vec_store(float* p, vecf v) { memcpy(p, &v, sizeof(v)); }

// Full tile: out[i0..i0+MR, j0..j0+NR) += sum_k A(i, k) * Bm[k, j0..j0+NR).
static inline void gemm_tile_full(float* out, size_t ldo, const float* A, size_t ai, size_t ak,
                                  const float* Bm, size_t ldb, int i0, int j0, int K) {
    vecf acc[GEMM_MR][GEMM_NV];
    #pragma GCC unroll 8
    for (int r = 0; r < GEMM_MR; r++)
        for (int v = 0; v < GEMM_NV; v++) acc[r][v] = (vecf){0};
    const float* arow = A + (size_t)i0 * ai;
    for (int k = 0; k < K; k++) {
        const float* b = Bm + (size_t)k * ldb + j0;
        vecf b0 = vec_load(b), b1 = vec_load(b + GEMM_VL);
        #pragma GCC unroll 8
        for (int r = 0; r < GEMM_MR; r++) {
            float a = arow[(size_t)r * ai + (size_t)k * ak];
            acc[r][0] += a * b0;
            acc[r][1] += a * b1;
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < GEMM_MR; r++)
        for (int v = 0; v < GEMM_NV; v++) {
            float* o = out + (size_t)(i0 + r) * ldo + j0 + v * GEMM_VL;
            vec_store(o, vec_load(o) + acc[r][v]);
        }
}

// Edge tile (mr <= MR rows, nr <= NR columns): the same sum, scalar.
static void gemm_tile_edge(float* out, size_t ldo, const float* A, size_t ai, size_t ak,
                           const float* Bm, size_t ldb, int i0, int j0, int mr, int nr, int K) {
    for (int r = 0; r < mr; r++)
        for (int c = 0; c < nr; c++) {
            float sum = 0.0f;
            for (int k = 0; k < K; k++) sum += A[(size_t)(i0 + r) * ai + (size_t)k * ak] * Bm[(size_t)k * ldb + j0 + c];
            out[(size_t)(i0 + r) * ldo + j0 + c] += sum;
        }
}

// out (M x N, row stride ldo) += A (M x K, element (i,k) at A[i*ai + k*ak]) · Bm (K x N, row stride ldb).
// The strides of A let the same routine read dout transposed for the weight gradient.
// Loop order: column panel, then a chunk of GEMM_KC values of k, then row blocks in parallel, so
// the GEMM_KC x GEMM_PANEL block of Bm stays in cache while every row block passes over it.
// Each output tile is owned by one thread and sums the k chunks in order: deterministic, and
// independent of the number of threads.
static void gemm_accumulate(float* out, size_t ldo, const float* A, size_t ai, size_t ak,
                            const float* Bm, size_t ldb, int M, int N, int K) {
    int mblocks = (M + GEMM_MR - 1) / GEMM_MR;
    #pragma omp parallel
    for (int p0 = 0; p0 < N; p0 += GEMM_PANEL) {
        int pend = p0 + GEMM_PANEL < N ? p0 + GEMM_PANEL : N;
        for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
            int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
            const float* Ak = A + (size_t)k0 * ak;
            const float* Bk = Bm + (size_t)k0 * ldb;
            #pragma omp for schedule(static)
            for (int ib = 0; ib < mblocks; ib++) {
                int i0 = ib * GEMM_MR, mr = M - i0 < GEMM_MR ? M - i0 : GEMM_MR;
                for (int j0 = p0; j0 < pend; j0 += GEMM_NR) {
                    int nr = pend - j0 < GEMM_NR ? pend - j0 : GEMM_NR;
                    if (mr == GEMM_MR && nr == GEMM_NR)
                        gemm_tile_full(out, ldo, Ak, ai, ak, Bk, ldb, i0, j0, kc);
                    else
                        gemm_tile_edge(out, ldo, Ak, ai, ak, Bk, ldb, i0, j0, mr, nr, kc);
                }
            }
        }
    }
}

// dst (cols x rows) = transpose of src (rows x cols), both row-major.
static void transpose(float* dst, const float* src, int rows, int cols) {
    const int tile = 32;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int r0 = 0; r0 < rows; r0 += tile)
        for (int c0 = 0; c0 < cols; c0 += tile)
            for (int r = r0; r < r0 + tile && r < rows; r++)
                for (int c = c0; c < c0 + tile && c < cols; c++)
                    dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

// Linear layer forward: out (N x OC) = inp (N x C) · Wᵀ + bias, W is (OC x C), bias (OC) or NULL.
// wt_scratch holds C*OC floats (W transposed so the inner loop runs along contiguous output columns).
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                           float* wt_scratch, int N, int C, int OC) {
    transpose(wt_scratch, weight, OC, C);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = bias ? bias[o] : 0.0f;
    gemm_accumulate(out, OC, inp, C, 1, wt_scratch, OC, N, OC, C);
}

// Linear layer backward, accumulating (+=) into dinp (N x C), dweight (OC x C), dbias (OC, may be NULL).
// dinp = dout · W ; dW = doutᵀ · inp ; dbias = column sums of dout.
static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC) {
    gemm_accumulate(dinp, C, dout, OC, 1, weight, C, N, C, OC);
    gemm_accumulate(dweight, C, dout, 1, OC, inp, C, OC, C, N);
    if (dbias) {
        #pragma omp parallel for schedule(static)
        for (int o = 0; o < OC; o++) {
            float sum = 0.0f;
            for (int n = 0; n < N; n++) sum += dout[(size_t)n * OC + o];
            dbias[o] += sum;
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Layers. N = B*T rows of C channels unless stated otherwise.

// out (B,T,C) = wte[inp[b,t]] + wpe[t].
static void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe,
                            int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* we = wte + (size_t)inp[b * T + t] * C;
            const float* pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        }
}

// Scatter-add dout (B,T,C) into the rows of dwte and dwpe that the forward read. Serial on purpose:
// repeated tokens hit the same row, and a fixed order keeps it deterministic.
static void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp,
                             int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float* d = dout + ((size_t)b * T + t) * C;
            float* dwe = dwte + (size_t)inp[b * T + t] * C;
            float* dpe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) { dwe[c] += d[c]; dpe[c] += d[c]; }
        }
}

// LayerNorm (Ba et al. 2016) over C with eps 1e-5 and biased variance; saves mean and 1/std per row.
static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C) {
    const float eps = 1e-5f;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float m = 0.0f;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        float s = 1.0f / sqrtf(v + eps);
        float* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// LayerNorm backward, accumulating into dinp (N,C), dweight (C), dbias (C).
// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dout * weight.
static void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float dsum = 0.0f, dxsum = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s, dxhat = d[c] * weight[c];
            dsum += dxhat;
            dxsum += dxhat * xhat;
        }
        dsum /= C;
        dxsum /= C;
        float* di = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - m) * s, dxhat = d[c] * weight[c];
            di[c] += s * (dxhat - dsum - xhat * dxsum);
        }
    }
    // parameter gradients: column sums over rows, one thread per column (no races)
    #pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        float dw = 0.0f, db = 0.0f;
        for (int n = 0; n < N; n++) {
            float d = dout[(size_t)n * C + c];
            dw += d * (inp[(size_t)n * C + c] - mean[n]) * rstd[n];
            db += d;
        }
        dweight[c] += dw;
        dbias[c] += db;
    }
}

// Causal multi-head self-attention (Vaswani et al. 2017) on qkv (B,T,3C) = [q | k | v] per row,
// NH heads of HS = C/NH channels. preatt and att (B,NH,T,T) hold scaled scores and softmax
// probabilities (entries above the diagonal are 0); out (B,T,C) holds heads side by side.
static void attention_forward(float* out, float* preatt, float* att, const float* qkv,
                              int B, int T, int C, int NH) {
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * HS;
                float* pre = preatt + (((size_t)b * NH + h) * T + t) * T;
                float* p = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                    float s = 0.0f;
                    for (int i = 0; i < HS; i++) s += q[i] * k[i];
                    s *= scale;
                    pre[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) { p[t2] = expf(pre[t2] - maxv); sum += p[t2]; }
                for (int t2 = 0; t2 <= t; t2++) p[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) { p[t2] = 0.0f; pre[t2] = 0.0f; }
                float* o = out + ((size_t)b * T + t) * C + h * HS;
                for (int i = 0; i < HS; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                    for (int i = 0; i < HS; i++) o[i] += p[t2] * v[i];
                }
            }
}

// Attention backward, accumulating into dqkv (B,T,3C); datt/dpreatt (B,NH,T,T) are scratch.
// dP = dout·vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP)), dq = dS·k·scale, dk = dSᵀ·q·scale, dv = Pᵀ·dout.
// Parallel over (b, h): each task owns its head's slice of dqkv, so there are no races.
static void attention_backward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                               const float* qkv, const float* att, int B, int T, int C, int NH) {
    int HS = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float* p = att + (((size_t)b * NH + h) * T + t) * T;
                float* dp = datt + (((size_t)b * NH + h) * T + t) * T;
                float* ds = dpreatt + (((size_t)b * NH + h) * T + t) * T;
                const float* d = dout + ((size_t)b * T + t) * C + h * HS;
                const float* q = qkv + ((size_t)b * T + t) * C3 + h * HS;
                float* dq = dqkv + ((size_t)b * T + t) * C3 + h * HS;
                float pdp = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                    float* dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                    float s = 0.0f;
                    for (int i = 0; i < HS; i++) { s += d[i] * v[i]; dv[i] += p[t2] * d[i]; }
                    dp[t2] = s;
                    pdp += p[t2] * s;
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    ds[t2] = p[t2] * (dp[t2] - pdp);
                    const float* k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                    float* dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                    float g = ds[t2] * scale;
                    for (int i = 0; i < HS; i++) { dq[i] += g * k[i]; dk[i] += g * q[i]; }
                }
            }
}

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

// GELU, tanh approximation (Hendrycks & Gimpel 2016): 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))).
static void gelu_forward(float* out, const float* inp, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}

// dinp += gelu'(inp) * dout.
static void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] += grad * dout[i];
    }
}

static void residual_forward(float* out, const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// Both inputs of a residual add receive the output gradient.
static void residual_backward(float* da, float* db, const float* dout, size_t n) {
    for (size_t i = 0; i < n; i++) { da[i] += dout[i]; db[i] += dout[i]; }
}

// probs (N,Vp) = softmax over the first V logits (padded columns get probability 0) and
// losses[n] = -log probs[n, targets[n]] when targets is non-NULL.
static void softmax_crossentropy_forward(float* probs, float* losses, const float* logits,
                                         const int* targets, int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * Vp;
        float* p = probs + (size_t)n * Vp;
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++) if (l[i] > maxv) maxv = l[i];
        double sum = 0.0;  // 50k terms: a double sum keeps the normalizer exact to fp32
        for (int i = 0; i < V; i++) { p[i] = expf(l[i] - maxv); sum += p[i]; }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < V; i++) p[i] *= inv;
        for (int i = V; i < Vp; i++) p[i] = 0.0f;
        if (targets) losses[n] = -logf(p[targets[n]]);
    }
}

// dlogits (N,Vp) = (probs - onehot(target)) * dloss for the first V columns, 0 for the padding.
// Overwrites dlogits (the classifier is the start of the backward pass).
static void softmax_crossentropy_backward(float* dlogits, const float* probs, const int* targets,
                                          float dloss, int N, int V, int Vp) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* d = dlogits + (size_t)n * Vp;
        const float* p = probs + (size_t)n * Vp;
        for (int i = 0; i < V; i++) d[i] = p[i] * dloss;
        for (int i = V; i < Vp; i++) d[i] = 0.0f;
        d[targets[n]] -= dloss;
    }
}

// ----------------------------------------------------------------------------------------------
// The model

// Parameters (and, with the same layout, their gradients and AdamW moments): 16 tensors in
// checkpoint order, pointers into one flat array.
typedef struct {
    float *wte, *wpe, *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb, *lnfw, *lnfb;
} ParameterTensors;

// Point the 16 tensors of p into memory (laid out back to back as in the checkpoint).
static void point_parameters(ParameterTensors* p, float* memory, const size_t sizes[NUM_PARAMETER_TENSORS]) {
    float** ptrs[NUM_PARAMETER_TENSORS] = {
        &p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
        &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { *ptrs[i] = memory; memory += sizes[i]; }
}

#define NUM_ACTIVATION_TENSORS 23
// Forward activations saved for backward (and, same layout, their gradients). Per-layer tensors
// hold all L layers back to back: layer l of ln1 is ln1 + l*B*T*C.
typedef struct {
    float* encoded;    // (B,T,C)
    float* ln1;        // (L,B,T,C)
    float* ln1_mean;   // (L,B,T)
    float* ln1_rstd;   // (L,B,T)
    float* qkv;        // (L,B,T,3C)
    float* atty;       // (L,B,T,C)   attention output, heads side by side
    float* preatt;     // (L,B,NH,T,T)
    float* att;        // (L,B,NH,T,T)
    float* attproj;    // (L,B,T,C)
    float* residual2;  // (L,B,T,C)   x after the attention residual add
    float* ln2;        // (L,B,T,C)
    float* ln2_mean;   // (L,B,T)
    float* ln2_rstd;   // (L,B,T)
    float* fch;        // (L,B,T,4C)
    float* fch_gelu;   // (L,B,T,4C)
    float* fcproj;     // (L,B,T,C)
    float* residual3;  // (L,B,T,C)   x after the MLP residual add
    float* lnf;        // (B,T,C)
    float* lnf_mean;   // (B,T)
    float* lnf_rstd;   // (B,T)
    float* logits;     // (B,T,Vp)
    float* probs;      // (B,T,Vp)
    float* losses;     // (B,T)
} ActivationTensors;

static void activation_sizes(size_t s[NUM_ACTIVATION_TENSORS], const GPT2Config* cfg, size_t B, size_t T) {
    size_t C = cfg->channels, L = cfg->num_layers, NH = cfg->num_heads, Vp = cfg->padded_vocab_size;
    size_t BT = B * T;
    size_t v[NUM_ACTIVATION_TENSORS] = {
        BT * C, L * BT * C, L * BT, L * BT, L * BT * 3 * C, L * BT * C, L * B * NH * T * T,
        L * B * NH * T * T, L * BT * C, L * BT * C, L * BT * C, L * BT, L * BT, L * BT * 4 * C,
        L * BT * 4 * C, L * BT * C, L * BT * C, BT * C, BT, BT, BT * Vp, BT * Vp, BT};
    memcpy(s, v, sizeof(v));
}

// Allocate one zeroed block for all activation tensors and point a at it.
static float* alloc_activations(ActivationTensors* a, const size_t s[NUM_ACTIVATION_TENSORS]) {
    size_t total = 0;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) total += s[i];
    float* mem = (float*)calloc_check(total, sizeof(float));
    float** ptrs = (float**)a;  // the struct is exactly NUM_ACTIVATION_TENSORS float pointers
    float* p = mem;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) { ptrs[i] = p; p += s[i]; }
    return mem;
}

typedef struct {
    GPT2Config config;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;
    ParameterTensors params, grads;
    float *params_memory, *grads_memory, *m_memory, *v_memory;  // v, m: AdamW moments (lazy)
    ActivationTensors acts, grads_acts;
    float *acts_memory, *grads_acts_memory;
    float* wt_scratch;   // transposed weight for matmul_forward, Vp*C floats (the largest weight)
    size_t B, T;         // activation capacity fixed at the first forward
    const int* inputs;   // the batch of the last forward (borrowed), for backward
    const int* targets;
    size_t cur_B, cur_T;
    float mean_loss;     // mean loss of the last forward, -1 when it had no targets
} GPT2;

// Allocate parameter memory for config (zeroed) and point the tensors at it.
void gpt2_alloc(GPT2* m, const GPT2Config* config) {
    memset(m, 0, sizeof(*m));
    m->config = *config;
    gpt2_param_sizes(config, m->param_sizes);
    m->num_parameters = gpt2_num_parameters(config);
    m->params_memory = (float*)calloc_check(m->num_parameters, sizeof(float));
    point_parameters(&m->params, m->params_memory, m->param_sizes);
    m->wt_scratch = (float*)malloc_check((size_t)config->padded_vocab_size * config->channels * sizeof(float));
    m->mean_loss = -1.0f;
}

// GPT-2 init from scratch (llmc/model/gpt2_init.h).
void gpt2_init_random(GPT2* m, const GPT2Config* config, uint64_t seed) {
    gpt2_alloc(m, config);
    gpt2_init_params(m->params_memory, config, seed);
}

// Load a model checkpoint (version 3 fp32 or 5 bf16, doc/FORMATS.md).
void gpt2_load(GPT2* m, const char* path) {
    GPT2Config config;
    float* params = checkpoint_read_model(path, &config);
    gpt2_alloc(m, &config);
    memcpy(m->params_memory, params, m->num_parameters * sizeof(float));
    free(params);
}

// Forward pass on inputs (B,T) token ids; with targets (B,T) also the per-position losses and
// their mean (m->mean_loss). The first call fixes the activation capacity; later calls may use any
// B*T within it (e.g. B=1 for sampling). Token ids >= V and T > maxT are errors.
void gpt2_forward(GPT2* m, const int* inputs, const int* targets, size_t B, size_t T) {
    const GPT2Config* cfg = &m->config;
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size, L = cfg->num_layers;
    int NH = cfg->num_heads, C = cfg->channels;
    if (T > (size_t)cfg->max_seq_len) die("sequence length T=%zu exceeds the model's maxT=%d", T, cfg->max_seq_len);
    for (size_t i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) die("input token %d at position %zu is outside [0, %d)", inputs[i], i, V);
        if (targets && (targets[i] < 0 || targets[i] >= V)) die("target token %d at position %zu is outside [0, %d)", targets[i], i, V);
    }
    if (m->acts_memory == NULL) {
        size_t s[NUM_ACTIVATION_TENSORS];
        activation_sizes(s, cfg, B, T);
        m->acts_memory = alloc_activations(&m->acts, s);
        m->B = B;
        m->T = T;
    } else if (B * T > m->B * m->T || B * T * T > m->B * m->T * m->T) {
        die("batch B=%zu T=%zu exceeds the activation capacity B=%zu T=%zu", B, T, m->B, m->T);
    }
    m->inputs = inputs;
    m->targets = targets;
    m->cur_B = B;
    m->cur_T = T;

    const ParameterTensors* p = &m->params;
    ActivationTensors* a = &m->acts;
    int N = (int)(B * T);
    size_t BTC = (size_t)N * C, BHTT = B * NH * T * T;
    encoder_forward(a->encoded, inputs, p->wte, p->wpe, (int)B, (int)T, C);
    for (int l = 0; l < L; l++) {
        const float* x = l == 0 ? a->encoded : a->residual3 + (l - 1) * BTC;
        float* ln1 = a->ln1 + l * BTC;
        float* qkv = a->qkv + l * 3 * BTC;
        float* atty = a->atty + l * BTC;
        float* attproj = a->attproj + l * BTC;
        float* res2 = a->residual2 + l * BTC;
        float* ln2 = a->ln2 + l * BTC;
        float* fch = a->fch + l * 4 * BTC;
        float* fch_gelu = a->fch_gelu + l * 4 * BTC;
        float* fcproj = a->fcproj + l * BTC;
        layernorm_forward(ln1, a->ln1_mean + l * N, a->ln1_rstd + l * N, x, p->ln1w + l * C, p->ln1b + l * C, N, C);
        matmul_forward(qkv, ln1, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + l * 3 * C, m->wt_scratch, N, C, 3 * C);
        attention_forward(atty, a->preatt + l * BHTT, a->att + l * BHTT, qkv, (int)B, (int)T, C, NH);
        matmul_forward(attproj, atty, p->attprojw + (size_t)l * C * C, p->attprojb + l * C, m->wt_scratch, N, C, C);
        residual_forward(res2, x, attproj, BTC);
        layernorm_forward(ln2, a->ln2_mean + l * N, a->ln2_rstd + l * N, res2, p->ln2w + l * C, p->ln2b + l * C, N, C);
        matmul_forward(fch, ln2, p->fcw + (size_t)l * 4 * C * C, p->fcb + l * 4 * C, m->wt_scratch, N, C, 4 * C);
        gelu_forward(fch_gelu, fch, 4 * BTC);
        matmul_forward(fcproj, fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + l * C, m->wt_scratch, N, 4 * C, C);
        residual_forward(a->residual3 + l * BTC, res2, fcproj, BTC);
    }
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (L - 1) * BTC, p->lnfw, p->lnfb, N, C);
    matmul_forward(a->logits, a->lnf, p->wte, NULL, m->wt_scratch, N, C, Vp);
    softmax_crossentropy_forward(a->probs, a->losses, a->logits, targets, N, V, Vp);
    if (targets) {
        double sum = 0.0;
        for (int i = 0; i < N; i++) sum += a->losses[i];
        m->mean_loss = (float)(sum / N);
    } else {
        m->mean_loss = -1.0f;
    }
}

// Zero the parameter gradients (call once per optimizer step, before the first micro-batch).
void gpt2_zero_grad(GPT2* m) {
    if (m->grads_memory) memset(m->grads_memory, 0, m->num_parameters * sizeof(float));
}

// Backward pass of the last forward (which must have had targets), accumulating into the
// parameter gradients: d(loss_scale * mean loss)/dθ. loss_scale = 1/grad_accum_steps makes the
// accumulated gradient that of the mean over all micro-batches.
void gpt2_backward(GPT2* m, float loss_scale) {
    if (m->mean_loss < 0.0f) die("gpt2_backward: the last forward pass had no targets");
    const GPT2Config* cfg = &m->config;
    int V = cfg->vocab_size, Vp = cfg->padded_vocab_size, L = cfg->num_layers;
    int NH = cfg->num_heads, C = cfg->channels;
    int B = (int)m->cur_B, T = (int)m->cur_T, N = B * T;
    if (m->grads_memory == NULL) {
        m->grads_memory = (float*)calloc_check(m->num_parameters, sizeof(float));
        point_parameters(&m->grads, m->grads_memory, m->param_sizes);
        size_t s[NUM_ACTIVATION_TENSORS];
        activation_sizes(s, cfg, m->B, m->T);
        m->grads_acts_memory = alloc_activations(&m->grads_acts, s);
    }
    // activation gradients are accumulated with +=, so they start from zero every pass
    size_t s[NUM_ACTIVATION_TENSORS], total = 0;
    activation_sizes(s, cfg, m->B, m->T);
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) total += s[i];
    memset(m->grads_acts_memory, 0, total * sizeof(float));

    const ParameterTensors* p = &m->params;
    ParameterTensors* g = &m->grads;
    const ActivationTensors* a = &m->acts;
    ActivationTensors* ga = &m->grads_acts;
    size_t BTC = (size_t)N * C, BHTT = (size_t)B * NH * T * T;

    softmax_crossentropy_backward(ga->logits, a->probs, m->targets, loss_scale / N, N, V, Vp);
    matmul_backward(ga->lnf, g->wte, NULL, ga->logits, a->lnf, p->wte, N, C, Vp);
    float* dresidual = ga->residual3 + (L - 1) * BTC;
    layernorm_backward(dresidual, g->lnfw, g->lnfb, ga->lnf, a->residual3 + (L - 1) * BTC, p->lnfw,
                       a->lnf_mean, a->lnf_rstd, N, C);
    for (int l = L - 1; l >= 0; l--) {
        const float* x = l == 0 ? a->encoded : a->residual3 + (l - 1) * BTC;
        float* dx = l == 0 ? ga->encoded : ga->residual3 + (l - 1) * BTC;
        float* dres3 = ga->residual3 + l * BTC;
        float* dres2 = ga->residual2 + l * BTC;
        // MLP block: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        residual_backward(dres2, ga->fcproj + l * BTC, dres3, BTC);
        matmul_backward(ga->fch_gelu + l * 4 * BTC, g->fcprojw + (size_t)l * 4 * C * C, g->fcprojb + l * C,
                        ga->fcproj + l * BTC, a->fch_gelu + l * 4 * BTC, p->fcprojw + (size_t)l * 4 * C * C, N, 4 * C, C);
        gelu_backward(ga->fch + l * 4 * BTC, a->fch + l * 4 * BTC, ga->fch_gelu + l * 4 * BTC, 4 * BTC);
        matmul_backward(ga->ln2 + l * BTC, g->fcw + (size_t)l * 4 * C * C, g->fcb + l * 4 * C,
                        ga->fch + l * 4 * BTC, a->ln2 + l * BTC, p->fcw + (size_t)l * 4 * C * C, N, C, 4 * C);
        layernorm_backward(dres2, g->ln2w + l * C, g->ln2b + l * C, ga->ln2 + l * BTC, a->residual2 + l * BTC,
                           p->ln2w + l * C, a->ln2_mean + l * N, a->ln2_rstd + l * N, N, C);
        // attention block: residual2 = x + attproj(attention(qkv(ln1(x))))
        residual_backward(dx, ga->attproj + l * BTC, dres2, BTC);
        matmul_backward(ga->atty + l * BTC, g->attprojw + (size_t)l * C * C, g->attprojb + l * C,
                        ga->attproj + l * BTC, a->atty + l * BTC, p->attprojw + (size_t)l * C * C, N, C, C);
        attention_backward(ga->qkv + l * 3 * BTC, ga->preatt + l * BHTT, ga->att + l * BHTT, ga->atty + l * BTC,
                           a->qkv + l * 3 * BTC, a->att + l * BHTT, B, T, C, NH);
        matmul_backward(ga->ln1 + l * BTC, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + l * 3 * C,
                        ga->qkv + l * 3 * BTC, a->ln1 + l * BTC, p->qkvw + (size_t)l * 3 * C * C, N, C, 3 * C);
        layernorm_backward(dx, g->ln1w + l * C, g->ln1b + l * C, ga->ln1 + l * BTC, x, p->ln1w + l * C,
                           a->ln1_mean + l * N, a->ln1_rstd + l * N, N, C);
    }
    encoder_backward(g->wte, g->wpe, ga->encoded, m->inputs, B, T, C);
}

// Global L2 norm of all gradients (accumulated in double).
float gpt2_grad_norm(const GPT2* m) {
    double sum = 0.0;
    #pragma omp parallel for reduction(+:sum) schedule(static)
    for (size_t i = 0; i < m->num_parameters; i++) sum += (double)m->grads_memory[i] * m->grads_memory[i];
    return (float)sqrt(sum);
}

// Scale the gradients, of global norm `norm`, so that their norm is at most max_norm (PyTorch
// clip_grad_norm_ semantics: factor max_norm / (norm + 1e-6), applied when below 1; 0 = off).
void gpt2_clip_grads(GPT2* m, float norm, float max_norm) {
    float coef = max_norm / (norm + 1e-6f);
    if (max_norm > 0.0f && coef < 1.0f)
        for (size_t i = 0; i < m->num_parameters; i++) m->grads_memory[i] *= coef;
}

// gpt2_grad_norm, then gpt2_clip_grads. Returns the norm before clipping.
float gpt2_clip_grad_norm(GPT2* m, float max_norm) {
    float norm = gpt2_grad_norm(m);
    gpt2_clip_grads(m, norm, max_norm);
    return norm;
}

// One AdamW step (Loshchilov & Hutter 2019, PyTorch semantics): bias-corrected moments, decoupled
// weight decay on the 2-D tensors only. step is 1-based.
void gpt2_update(GPT2* m, float lr, float beta1, float beta2, float eps, float weight_decay, int step) {
    if (m->m_memory == NULL) {
        m->m_memory = (float*)calloc_check(m->num_parameters, sizeof(float));
        m->v_memory = (float*)calloc_check(m->num_parameters, sizeof(float));
    }
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    size_t offset = 0;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
        float wd = gpt2_param_is_matrix(t) ? weight_decay : 0.0f;
        size_t n = m->param_sizes[t];
        float *p = m->params_memory + offset, *g = m->grads_memory + offset;
        float *mm = m->m_memory + offset, *vv = m->v_memory + offset;
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            mm[i] = beta1 * mm[i] + (1.0f - beta1) * g[i];
            vv[i] = beta2 * vv[i] + (1.0f - beta2) * g[i] * g[i];
            float mhat = mm[i] / bc1, vhat = vv[i] / bc2;
            p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
        }
        offset += n;
    }
}

void gpt2_free(GPT2* m) {
    free(m->params_memory);
    free(m->grads_memory);
    free(m->m_memory);
    free(m->v_memory);
    free(m->acts_memory);
    free(m->grads_acts_memory);
    free(m->wt_scratch);
}

#ifndef TESTING
// ----------------------------------------------------------------------------------------------
// Training program

// Mean loss over up to max_batches batches of the validation loader.
static float evaluate(GPT2* model, DataLoader* val, int max_batches) {
    dataloader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < max_batches; i++) {
        dataloader_next_batch(val);
        gpt2_forward(model, val->inputs, val->targets, val->B, val->T);
        sum += model->mean_loss;
    }
    return (float)(sum / max_batches);
}

// Generate gen_tokens tokens after <|endoftext|> by sampling the softmax (temperature 1) and print
// them through the tokenizer (token ids when there is none). Runs the forward on the growing
// prefix with B=1, so it costs O(gen_tokens^2) positions: meant for short samples.
static void sample_and_print(GPT2* model, const Tokenizer* tok, int have_tok, Rng* rng, int gen_tokens) {
    int eot = have_tok ? tok->eot_token : 50256;
    int n = gen_tokens + 1;
    if (n > (int)model->T) n = (int)model->T;
    int* seq = (int*)malloc_check(n * sizeof(int));
    seq[0] = eot;
    printf("generating:\n---\n");
    for (int t = 1; t < n; t++) {
        gpt2_forward(model, seq, NULL, 1, t);
        const float* probs = model->acts.probs + (size_t)(t - 1) * model->config.padded_vocab_size;
        seq[t] = sample_from_probs(probs, model->config.vocab_size, rng_uniform(rng));
        if (have_tok) safe_print_token(tokenizer_decode(tok, seq[t]));
        else printf("%d ", seq[t]);
        fflush(stdout);
    }
    printf("\n---\n");
    free(seq);
}

// The forward of the HellaSwag evaluation (llmc/data/hellaswag.h): per-position losses of a B x T batch.
typedef struct { GPT2* model; int B, T; } EvalContext;
static const float* eval_forward(void* ctx, const int* inputs, const int* targets) {
    EvalContext* e = (EvalContext*)ctx;
    gpt2_forward(e->model, inputs, targets, e->B, e->T);
    return e->model->acts.losses;
}

static const char* TRAIN_DOC =
    "CPU fp32 reference GPT-2 trainer. Trains from scratch (-e dN[,cC][,hNH][,tMAXT]) or from a\n"
    "checkpoint (-e file.bin) on llm.c token shards, evaluates, samples and writes checkpoints.";

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // progress lines appear as they happen, also in a log file
    TrainConfig tc = {
        .train_pattern = "data/tinyshakespeare/tiny_shakespeare_train.bin",
        .val_pattern = "data/tinyshakespeare/tiny_shakespeare_val.bin",
        .out_dir = NULL, .model_spec = "d4", .lr_schedule = "cosine",
        .tokenizer_path = "data/gpt2_tokenizer.bin",
        .B = 4, .T = 256, .total_batch_size = -1, .warmup = 20, .max_steps = -1,
        .val_every = 50, .val_max_batches = 20, .sample_every = 100, .gen_tokens = 64,
        .checkpoint_every = 0, .overfit_single_batch = 0, .seed = 1337,
        .lr = 1e-3f, .final_lr_frac = 0.1f, .weight_decay = 0.1f, .grad_clip = 1.0f,
    };
    int threads = 0;
    CliFlag flags[TRAIN_CONFIG_NUM_FLAGS + 1];
    int nflags = train_config_flags(&tc, flags);
    flags[nflags++] = (CliFlag){"-threads", CLI_INT, &threads, "OpenMP threads (0 = OpenMP default)", 0, 4096, NULL};
    cli_parse(argc, argv, flags, nflags, TRAIN_DOC);
    train_config_validate(&tc);
    GPT2Config spec_config;
    EvalSet evalset = {0};  // -h 1
    train_config_check_files(&tc, &spec_config, &evalset);  // every named file, before the model and the data
    const int B = tc.B, T = tc.T, total_batch_size = tc.total_batch_size, grad_accum_steps = tc.grad_accum_steps;
    const char* out_dir = tc.out_dir;
#ifdef _OPENMP
    if (threads > 0) omp_set_num_threads(threads);
#endif

    GPT2 model;
    if (train_config_spec_is_checkpoint(tc.model_spec)) {
        gpt2_load(&model, tc.model_spec);
    } else {
        GPT2Config config;
        gpt2_config_from_descriptor(&config, tc.model_spec);
        gpt2_init_random(&model, &config, (uint64_t)tc.seed);
    }
    const GPT2Config* cfg = &model.config;
    if (T > cfg->max_seq_len) die("-t: T=%d exceeds the model's maxT=%d", T, cfg->max_seq_len);

    TrainSetup setup;
    train_setup_init(&setup, &tc, cfg->vocab_size, 0, 1);
    const int have_val = setup.have_val, have_tok = setup.have_tokenizer;

    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    print_config_rule();
    print_config_row("model", "%s", tc.model_spec);
    print_config_row("L, C, NH, maxT", "%d, %d, %d, %d", cfg->num_layers, cfg->channels, cfg->num_heads, cfg->max_seq_len);
    print_config_row("V, Vp", "%d, %d", cfg->vocab_size, cfg->padded_vocab_size);
    print_config_row("parameters", "%zu", model.num_parameters);
    print_config_row("train / val tokens", "%zu / %zu", setup.train.num_tokens, have_val ? setup.val.num_tokens : 0);
    print_config_row("B, T, grad accum", "%d, %d, %d", B, T, grad_accum_steps);
    print_config_row("steps, lr, schedule", "%d, %g, %s", tc.max_steps, tc.lr, tc.lr_schedule);
    print_config_row("warmup, final lr frac", "%d, %g", tc.warmup, tc.final_lr_frac);
    print_config_row("weight decay, grad clip", "%g, %g", tc.weight_decay, tc.grad_clip);
    print_config_row("precision, threads", "fp32 (CPU), %d", nthreads);
    print_config_rule();

    Logger logger;
    if (out_dir) {
        ensure_output_dir(out_dir);
        ckpt_recover(out_dir);  // finish a checkpoint deletion (-nk) a crash interrupted
    }
    logger_init(&logger, out_dir, 0);
    char line[512];
    snprintf(line, sizeof(line), "train_gpt2 (CPU fp32) model=%s L=%d C=%d NH=%d B=%d T=%d accum=%d lr=%g",
             tc.model_spec, cfg->num_layers, cfg->channels, cfg->num_heads, B, T, grad_accum_steps, tc.lr);
    logger_comment(&logger, line);

    Rng sample_rng;
    rng_init(&sample_rng, (uint64_t)tc.seed + 1);
    OutlierState outlier;  // -sl / -sg
    outlier_state_init(&outlier);
    EvalContext eval_ctx = {&model, B, T};
    double total_time = 0.0;
    for (int step = 0; step <= tc.max_steps; step++) {
        int last = step == tc.max_steps;
        if (have_val && (step % tc.val_every == 0 || last)) {
            float val_loss = evaluate(&model, &setup.val, tc.val_max_batches);
            printf("step %5d | val loss %.6f\n", step, val_loss);
            logger_log_val(&logger, step, val_loss);
        }
        if (tc.hellaswag && ((tc.val_every > 0 && step > 0 && step % tc.val_every == 0) || last)) {
            int correct = evalset_correct(&evalset, B, T, 0, 1, eval_forward, &eval_ctx);
            float acc = (float)correct / evalset.num_examples;
            printf("step %5d | hellaswag acc %d/%d = %.4f\n", step, correct, evalset.num_examples, acc);
            logger_log_eval(&logger, step, acc);
        }
        if (tc.sample_every > 0 && step > 0 && (step % tc.sample_every == 0 || last))
            sample_and_print(&model, &setup.tokenizer, have_tok, &sample_rng, tc.gen_tokens);
        if (out_dir && ((tc.checkpoint_every > 0 && step > 0 && step % tc.checkpoint_every == 0) || (last && tc.checkpoint_every >= 0))) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/model_%08d.bin", out_dir, step);
            checkpoint_write_model(path, cfg, model.params_memory, 3);
            printf("wrote %s\n", path);
            ckpt_apply_retention(out_dir, step, tc.checkpoints_keep, tc.major_every, 0, 1, 0);  // -nk / -nm
        }
        if (last) break;

        double t0 = wall_seconds();
        gpt2_zero_grad(&model);
        double loss_sum = 0.0;
        for (int micro = 0; micro < grad_accum_steps; micro++) {
            if (!tc.overfit_single_batch || (step == 0 && micro == 0)) dataloader_next_batch(&setup.train);
            gpt2_forward(&model, setup.train.inputs, setup.train.targets, B, T);
            gpt2_backward(&model, 1.0f / grad_accum_steps);
            loss_sum += model.mean_loss;
        }
        float loss = (float)(loss_sum / grad_accum_steps);
        if (!isfinite(loss))
            die("step %d: train loss is %f; stopping before the update (checkpoints written so far are intact)", step + 1, loss);
        float norm = gpt2_grad_norm(&model);
        float step_lr = get_learning_rate(&setup.sched, step);
        // -sl / -sg: a loss or gradient-norm spike skips the update (parameters, moments and AdamW's
        // step count stay as they are; the batch is consumed)
        double zloss, zgrad;
        const int skip = outlier_step(&outlier, loss, norm, tc.skip_loss_z, tc.skip_grad_z, &zloss, &zgrad);
        char note[64] = "", log_note[64] = "";
        if (skip) {
            outlier.skipped_updates++;
            snprintf(note, sizeof(note), " | skipped (%s z=%.2f)", skip == 1 ? "loss" : "grad", skip == 1 ? zloss : zgrad);
            snprintf(log_note, sizeof(log_note), "skipped:%s_z=%.2f", skip == 1 ? "loss" : "grad", skip == 1 ? zloss : zgrad);
        } else {
            gpt2_clip_grads(&model, norm, tc.grad_clip);
            gpt2_update(&model, step_lr, 0.9f, 0.95f, 1e-8f, tc.weight_decay, step + 1 - outlier.skipped_updates);
        }
        double dt = wall_seconds() - t0;
        if (step > 0) total_time += dt;  // the first step includes allocation
        printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.1f ms | %.0f tok/s%s\n", step + 1, tc.max_steps,
               loss, norm, step_lr, dt * 1e3, total_batch_size / dt, note);
        logger_log_train_note(&logger, step + 1, loss, step_lr, norm, skip ? log_note : NULL);
    }
    if (tc.max_steps > 1) printf("average step time %.1f ms\n", total_time / (tc.max_steps - 1) * 1e3);

    if (outlier.skipped_updates > 0) printf("%d updates skipped (-sl %g, -sg %g)\n", outlier.skipped_updates, tc.skip_loss_z, tc.skip_grad_z);
    if (tc.hellaswag) evalset_free(&evalset);
    logger_free(&logger);
    train_setup_free(&setup);
    gpt2_free(&model);
    return 0;
}
#endif
