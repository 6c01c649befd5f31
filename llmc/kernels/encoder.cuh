// encoder.cuh - GPT-2 input embedding: token embedding wte plus position embedding wpe.
//
//   forward   out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]                       (train_gpt2.c encoder_forward)
//   backward  dwte[inp[b,t],:] += dout[b,t,:],  dwpe[t,:] += dout[b,t,:]    (train_gpt2.c encoder_backward)
//
// All tensors are row-major floatX; C (channels) must be a multiple of x128::size = 16 / sizeof(floatX)
// (8 for bf16/fp16, 4 for fp32) because every access is a 16-byte vector; the launchers check it, and
// that every floatX pointer is 16-byte aligned.
//
// Deterministic backward for repeated tokens. Positions that hold the same token add into the same
// row of dwte, so a parallel scatter-add with float atomics would depend on the order in which blocks
// run. Instead the host, which already has the batch's token ids, groups the B*T positions by token
// id ("buckets", positions in ascending order inside a bucket), and the GPU sums every bucket's
// dout rows in that fixed order in fp32 and adds the sum once into dwte (one round-to-nearest per
// element). Large buckets (more than ENCODER_BWD_SMALL_BUCKET rows) are split into segments of about
// max(64, sqrt(n)) rows for load balance; the segments' fp32 partial sums go to a device workspace and
// a second kernel adds them in segment order. The result depends only on (inp, dout, initial
// gradients), never on the GPU's scheduling or on the number of SMs.
//
// Host side of the backward (see EncoderBackwardWorkspace): counting sort of the token ids,
// O(B*T + Vp) time (0.6 ms measured on a slow build-machine core for B*T = 65536, Vp = 50304, Zipf-like
// ids), into pinned host memory, then one cudaMemcpyAsync of the bucket lists onto the stream, then the
// kernels. The call does not wait for the GPU, except that it first waits (cudaEventSynchronize) until
// the previous call's upload out of the same pinned buffer has finished. That upload was queued one call
// earlier, so the wait only bites if the host runs more than one encoder_backward call (in practice: one
// micro-step) ahead of the GPU.
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"

// Buckets with at most this many rows are summed by one block and added straight into dwte; larger
// ones are split into segments of max(64, ceil(sqrt(n))) rows (see encoder_bwd_segment_rows).
#define ENCODER_BWD_SMALL_BUCKET 64

static inline bool encoder_is_aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

static inline void encoder_check_C(const char* who, int C) {
    if (C <= 0 || C % x128::size != 0) {
        fprintf(stderr, "error: %s: C = %d must be a positive multiple of %d (16-byte vectors of %d-byte floatX)\n",
                who, C, x128::size, (int)sizeof(floatX));
        exit(EXIT_FAILURE);
    }
}

static inline void encoder_check_aligned(const char* who, const char* name, const void* p) {
    if (!encoder_is_aligned16(p)) {
        fprintf(stderr, "error: %s: %s = %p is not 16-byte aligned\n", who, name, p);
        exit(EXIT_FAILURE);
    }
}

// Threads per block for the row kernels: one thread per 16-byte packet of a row (P = C / x128::size
// packets), rounded up to whole warps, at most 256; more packets -> blockIdx.y covers the rest.
static inline int encoder_row_threads(int P) {
    int t = ceil_div(P, 32) * 32;
    return t < 256 ? t : 256;
}

// ---------------------------------------------------------------------------------------------------
// Forward

// One thread per 16-byte packet of out.
__global__ void encoder_forward_kernel(floatX* __restrict__ out, const int* __restrict__ inp,
                                       const floatX* __restrict__ wte, const floatX* __restrict__ wpe,
                                       int BT, int T, int C) {
    const int P = C / x128::size;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)BT * P) return;
    const int bt = (int)(idx / P);
    const int c = (int)(idx - (long long)bt * P) * x128::size;
    const int t = bt % T;
    const x128 we = load128(wte + (size_t)inp[bt] * C + c);
    const x128 pe = load128(wpe + (size_t)t * C + c);
    x128 o;
    #pragma unroll
    for (int k = 0; k < x128::size; k++)
        o[k] = (floatX)boundary_value<ENCODER_OUT>((float)we[k] + (float)pe[k]);
    store128(out + (size_t)bt * C + c, o);
}

// out (B,T,C) = wte[inp[b,t]] + wpe[t]   [formula: train_gpt2.c encoder_forward]
//   out  (B,T,C) floatX, overwritten; every value passes boundary_value<ENCODER_OUT> before the store.
//   inp  (B,T) int token ids on the device, each in [0, rows of wte) (not checked on the device).
//   wte  (Vp,C) floatX, wpe (maxT,C) floatX with T <= maxT.
// Requires C % x128::size == 0 (checked) and 16-byte aligned pointers (checked). No scratch.
// Deterministic (pure elementwise). Sum in fp32, one rounding to floatX.
static inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                   int B, int T, int C, cudaStream_t stream) {
    encoder_check_C("encoder_forward", C);
    encoder_check_aligned("encoder_forward", "out", out);
    encoder_check_aligned("encoder_forward", "wte", wte);
    encoder_check_aligned("encoder_forward", "wpe", wpe);
    if (B <= 0 || T <= 0) return;
    const long long packets = (long long)B * T * (C / x128::size);
    const int threads = 256;
    encoder_forward_kernel<<<(unsigned)((packets + threads - 1) / threads), threads, 0, stream>>>(out, inp, wte, wpe,
                                                                                                  B * T, T, C);
    cudaCheckLaunch();
}

// ---------------------------------------------------------------------------------------------------
// Backward: workspace and host-side grouping

// Workspace of encoder_backward. Create it once (encoder_backward_workspace_create) for the largest
// B*T, the model's C and the rows Vp of wte; reuse it for every call on ONE stream (calls on several
// streams need one workspace each, or the caller must order them). Memory:
//   host (pinned, cudaMallocHost):  encoder_backward_host_ints(max_BT, Vp) ints
//                                   = 3*max_BT + max_BT/64 + 2 (upload area) + 2*Vp (counting sort)
//   device ints:                    3*max_BT + max_BT/64 + 2   (positions and bucket lists)
//   device floats:                  ceil(max_BT/32) * C        (fp32 partial sums of split buckets)
// (B*T = 65536, C = 768, Vp = 50304: 1.2 MB pinned, 0.8 MB + 6.3 MB device.)
struct EncoderBackwardWorkspace {
    int max_BT = 0, C = 0, Vp = 0;   // capacity this workspace was created for
    int* host = nullptr;             // pinned host memory: plan is built here, then uploaded
    int* dev_ints = nullptr;         // device copy of the upload area
    float* dev_partial = nullptr;    // device fp32 partial sums, one row of C per segment of a split bucket
    cudaEvent_t uploaded = nullptr;  // recorded after each upload; waited on before `host` is rewritten
};

// Size of the upload area (ints): positions (BT) + seg_start (nseg+1) + seg_token (nseg) +
// big_seg_start (nbig+1), with nseg <= BT and nbig <= BT/65.
static inline size_t encoder_backward_upload_ints(int max_BT) { return 3 * (size_t)max_BT + max_BT / 64 + 2; }
// Partial-sum rows: a bucket of n > 64 rows has ceil(n / S) <= ceil(n / 64) < n / 32 segments, summed over
// buckets < BT / 32.
static inline size_t encoder_backward_partial_rows(int max_BT) { return (size_t)ceil_div(max_BT, 32); }
static inline size_t encoder_backward_host_ints(int max_BT, int Vp) {
    return encoder_backward_upload_ints(max_BT) + 2 * (size_t)Vp;
}
static inline size_t encoder_backward_device_bytes(int max_BT, int C) {
    return encoder_backward_partial_rows(max_BT) * C * sizeof(float) + encoder_backward_upload_ints(max_BT) * sizeof(int);
}

// Allocates the workspace (cudaMallocHost, cudaMalloc, cudaEventCreate): call at start-up, not per step.
static inline void encoder_backward_workspace_create(EncoderBackwardWorkspace* ws, int max_BT, int C, int Vp) {
    encoder_check_C("encoder_backward_workspace_create", C);
    if (max_BT <= 0 || Vp <= 0) {
        fprintf(stderr, "error: encoder_backward_workspace_create: max_BT = %d and Vp = %d must be positive\n", max_BT, Vp);
        exit(EXIT_FAILURE);
    }
    ws->max_BT = max_BT;
    ws->C = C;
    ws->Vp = Vp;
    cudaCheck(cudaMallocHost(&ws->host, encoder_backward_host_ints(max_BT, Vp) * sizeof(int)));
    void* dev = nullptr;
    cudaCheck(cudaMalloc(&dev, encoder_backward_device_bytes(max_BT, C)));
    ws->dev_partial = (float*)dev;  // floats first: 256-byte aligned base, rows of C floats stay 16-byte aligned
    ws->dev_ints = (int*)((char*)dev + encoder_backward_partial_rows(max_BT) * C * sizeof(float));
    cudaCheck(cudaEventCreateWithFlags(&ws->uploaded, cudaEventDisableTiming));
}

// Frees the workspace. Synchronizes with the last upload first (its pinned source must outlive it).
static inline void encoder_backward_workspace_destroy(EncoderBackwardWorkspace* ws) {
    if (ws->uploaded) {
        cudaCheck(cudaEventSynchronize(ws->uploaded));
        cudaCheck(cudaEventDestroy(ws->uploaded));
    }
    if (ws->host) cudaCheck(cudaFreeHost(ws->host));
    if (ws->dev_partial) cudaCheck(cudaFree(ws->dev_partial));
    *ws = EncoderBackwardWorkspace();
}

// Rows per segment of a bucket of n > ENCODER_BWD_SMALL_BUCKET rows: balances the first pass (one block
// per segment sums S rows) against the combine pass (one block per bucket sums n / S partial rows).
static inline int encoder_bwd_segment_rows(int n) {
    int s = (int)ceil(sqrt((double)n));
    return s > ENCODER_BWD_SMALL_BUCKET ? s : ENCODER_BWD_SMALL_BUCKET;
}

// Counts of one uploaded plan (host values, used for the launch configuration).
struct EncoderBackwardPlan {
    int BT = 0;       // positions
    int nseg = 0;     // segments (one block row each in the first kernel)
    int nbigseg = 0;  // segments 0..nbigseg-1 belong to split buckets and write partial row `s`
    int nbig = 0;     // split buckets (one block row each in the combine kernel)
};

// Host: group the B*T positions of inp_cpu by token id and write the plan into ws->host:
//   pos[BT]               positions b*T+t, grouped by bucket; ascending inside a bucket
//   seg_start[nseg+1]     segment s covers pos[seg_start[s] .. seg_start[s+1])
//   seg_token[nseg]       token id (row of dwte) of segment s
//   big_seg_start[nbig+1] split bucket j owns segments big_seg_start[j] .. big_seg_start[j+1]-1
// Split buckets come first (in token order), then the others (in token order). Returns the counts;
// *upload_ints receives the number of ints to upload. Exits with a message if a token id is outside
// [0, ws->Vp) or B*T exceeds the workspace. Does not touch the GPU and does not wait: call it directly
// only when no upload out of ws->host can be in flight (encoder_backward_prepare waits for that).
static inline EncoderBackwardPlan encoder_backward_plan(EncoderBackwardWorkspace* ws, const int* inp_cpu, int B, int T,
                                                        size_t* upload_ints) {
    const int BT = B * T, Vp = ws->Vp;
    if (B <= 0 || T <= 0 || (long long)B * T > ws->max_BT) {
        fprintf(stderr, "error: encoder_backward: B*T = %lld outside the workspace capacity (1..%d)\n",
                (long long)B * T, ws->max_BT);
        exit(EXIT_FAILURE);
    }
    int* count = ws->host + encoder_backward_upload_ints(ws->max_BT);  // Vp
    int* offset = count + Vp;                                            // Vp
    memset(count, 0, (size_t)Vp * sizeof(int));
    for (int i = 0; i < BT; i++) {
        const int tok = inp_cpu[i];
        if (tok < 0 || tok >= Vp) {
            fprintf(stderr, "error: encoder_backward: token id %d at position %d (b=%d, t=%d) outside [0, %d)\n", tok,
                    i, i / T, i % T, Vp);
            exit(EXIT_FAILURE);
        }
        count[tok]++;
    }
    // Bucket order and segment counts: split buckets first, then the others, each in token order.
    EncoderBackwardPlan plan;
    plan.BT = BT;
    int cursor = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int tok = 0; tok < Vp; tok++) {
            const int n = count[tok];
            if (n == 0 || (n > ENCODER_BWD_SMALL_BUCKET) != (pass == 0)) continue;
            offset[tok] = cursor;
            cursor += n;
            if (pass == 0) {
                const int k = ceil_div(n, encoder_bwd_segment_rows(n));
                plan.nbig++;
                plan.nbigseg += k;
                plan.nseg += k;
            } else {
                plan.nseg++;
            }
        }
    int* pos = ws->host;
    int* seg_start = pos + BT;
    int* seg_token = seg_start + plan.nseg + 1;
    int* big_seg_start = seg_token + plan.nseg;
    // Stable scatter: positions ascending inside each bucket. Afterwards offset[tok] = end of its bucket.
    for (int i = 0; i < BT; i++) pos[offset[inp_cpu[i]]++] = i;
    int s = 0, j = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int tok = 0; tok < Vp; tok++) {
            const int n = count[tok];
            if (n == 0 || (n > ENCODER_BWD_SMALL_BUCKET) != (pass == 0)) continue;
            const int begin = offset[tok] - n;
            if (pass == 0) {
                const int k = ceil_div(n, encoder_bwd_segment_rows(n));
                big_seg_start[j++] = s;
                for (int q = 0; q < k; q++) {  // k near-equal segments
                    seg_start[s] = begin + (int)((long long)n * q / k);
                    seg_token[s++] = tok;
                }
            } else {
                seg_start[s] = begin;
                seg_token[s++] = tok;
            }
        }
    seg_start[s] = BT;
    big_seg_start[j] = plan.nbigseg;  // end of the last split bucket's segments
    *upload_ints = (size_t)BT + 2 * (size_t)plan.nseg + plan.nbig + 2;
    return plan;
}

// ---------------------------------------------------------------------------------------------------
// Backward: kernels

// Block row s sums the dout rows of segment s in position order (fp32). Split-bucket segments
// (s < nbigseg) write their sum to partial row s; the others add it once into dwte[token].
// blockIdx.y * blockDim.x + threadIdx.x = packet of the row.
__global__ void encoder_backward_segments_kernel(floatX* __restrict__ dwte, float* __restrict__ partial,
                                                 const floatX* __restrict__ dout, const int* __restrict__ pos,
                                                 const int* __restrict__ seg_start, const int* __restrict__ seg_token,
                                                 int nbigseg, int C) {
    constexpr int X = x128::size;
    const int p = blockIdx.y * blockDim.x + threadIdx.x;
    if (p * X >= C) return;
    const int c = p * X;
    const int s = blockIdx.x;
    const int begin = seg_start[s], end = seg_start[s + 1];
    float acc[X];
    #pragma unroll
    for (int k = 0; k < X; k++) acc[k] = 0.0f;
    int i = begin;
    // Four rows in flight, added strictly in position order.
    for (; i + 4 <= end; i += 4) {
        x128 d[4];
        #pragma unroll
        for (int u = 0; u < 4; u++) d[u] = load128cs(dout + (size_t)pos[i + u] * C + c);
        #pragma unroll
        for (int u = 0; u < 4; u++)
            #pragma unroll
            for (int k = 0; k < X; k++) acc[k] += (float)d[u][k];
    }
    for (; i < end; i++) {
        const x128 d = load128cs(dout + (size_t)pos[i] * C + c);
        #pragma unroll
        for (int k = 0; k < X; k++) acc[k] += (float)d[k];
    }
    if (s < nbigseg) {
        float* dst = partial + (size_t)s * C + c;
        #pragma unroll
        for (int q = 0; q < X / f128::size; q++) {
            f128 v;
            #pragma unroll
            for (int k = 0; k < f128::size; k++) v[k] = acc[q * f128::size + k];
            store128(dst + q * f128::size, v);
        }
    } else {
        floatX* row = dwte + (size_t)seg_token[s] * C + c;
        x128 w = load128(row);
        #pragma unroll
        for (int k = 0; k < X; k++) w[k] = (floatX)((float)w[k] + acc[k]);
        store128(row, w);
    }
}

// Block row j adds the partial rows of split bucket j in segment order, then adds the total once into
// dwte[token].
__global__ void encoder_backward_combine_kernel(floatX* __restrict__ dwte, const float* __restrict__ partial,
                                                const int* __restrict__ big_seg_start,
                                                const int* __restrict__ seg_token, int C) {
    constexpr int X = x128::size;
    const int p = blockIdx.y * blockDim.x + threadIdx.x;
    if (p * X >= C) return;
    const int c = p * X;
    const int s0 = big_seg_start[blockIdx.x], s1 = big_seg_start[blockIdx.x + 1];
    float acc[X];
    #pragma unroll
    for (int k = 0; k < X; k++) acc[k] = 0.0f;
    #pragma unroll 4
    for (int s = s0; s < s1; s++) {
        const float* src = partial + (size_t)s * C + c;
        #pragma unroll
        for (int q = 0; q < X / f128::size; q++) {
            const f128 v = load128cs(src + q * f128::size);
            #pragma unroll
            for (int k = 0; k < f128::size; k++) acc[q * f128::size + k] += v[k];
        }
    }
    floatX* row = dwte + (size_t)seg_token[s0] * C + c;
    x128 w = load128(row);
    #pragma unroll
    for (int k = 0; k < X; k++) w[k] = (floatX)((float)w[k] + acc[k]);
    store128(row, w);
}

// dwpe[t] += sum over b = 0..B-1 (in this order, fp32) of dout[b,t]. One thread per packet of (t, :).
__global__ void encoder_backward_wpe_kernel(floatX* __restrict__ dwpe, const floatX* __restrict__ dout, int B, int T,
                                            int C) {
    constexpr int X = x128::size;
    const int P = C / X;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * P) return;
    const int t = idx / P, c = (idx - t * P) * X;
    float acc[X];
    #pragma unroll
    for (int k = 0; k < X; k++) acc[k] = 0.0f;
    const size_t stride = (size_t)T * C;
    const floatX* src = dout + (size_t)t * C + c;
    int b = 0;
    for (; b + 4 <= B; b += 4) {
        x128 d[4];
        #pragma unroll
        for (int u = 0; u < 4; u++) d[u] = load128cs(src + (b + u) * stride);
        #pragma unroll
        for (int u = 0; u < 4; u++)
            #pragma unroll
            for (int k = 0; k < X; k++) acc[k] += (float)d[u][k];
    }
    for (; b < B; b++) {
        const x128 d = load128cs(src + b * stride);
        #pragma unroll
        for (int k = 0; k < X; k++) acc[k] += (float)d[k];
    }
    floatX* row = dwpe + (size_t)t * C + c;
    x128 w = load128(row);
    #pragma unroll
    for (int k = 0; k < X; k++) w[k] = (floatX)((float)w[k] + acc[k]);
    store128(row, w);
}

// ---------------------------------------------------------------------------------------------------
// Backward: launchers

// Step 1 of encoder_backward: waits until the previous upload out of ws->host has finished (see the top
// of this file), builds the plan for inp_cpu on the host (encoder_backward_plan) and queues its upload
// to ws->dev_ints on `stream` (cudaMemcpyAsync from pinned memory, then records ws->uploaded).
// inp_cpu may be reused or freed as soon as this returns.
static inline EncoderBackwardPlan encoder_backward_prepare(EncoderBackwardWorkspace* ws, const int* inp_cpu, int B,
                                                           int T, cudaStream_t stream) {
    cudaCheck(cudaEventSynchronize(ws->uploaded));  // the pinned buffer may still be the source of the last copy
    size_t n_ints = 0;
    const EncoderBackwardPlan plan = encoder_backward_plan(ws, inp_cpu, B, T, &n_ints);
    cudaCheck(cudaMemcpyAsync(ws->dev_ints, ws->host, n_ints * sizeof(int), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaEventRecord(ws->uploaded, stream));
    return plan;
}

// Step 2 of encoder_backward: the kernels, for a plan whose upload is queued earlier on the same
// stream (the most recent encoder_backward_prepare on this workspace). Can be re-run for the same plan.
static inline void encoder_backward_launch(floatX* dwte, floatX* dwpe, const EncoderBackwardWorkspace* ws,
                                           const EncoderBackwardPlan& plan, const floatX* dout, int B, int T, int C,
                                           cudaStream_t stream) {
    encoder_check_C("encoder_backward", C);
    encoder_check_aligned("encoder_backward", "dwte", dwte);
    encoder_check_aligned("encoder_backward", "dwpe", dwpe);
    encoder_check_aligned("encoder_backward", "dout", dout);
    if (C > ws->C) {
        fprintf(stderr, "error: encoder_backward: C = %d exceeds the workspace's C = %d\n", C, ws->C);
        exit(EXIT_FAILURE);
    }
    if (plan.BT != B * T) {
        fprintf(stderr, "error: encoder_backward: plan is for B*T = %d, called with B*T = %d\n", plan.BT, B * T);
        exit(EXIT_FAILURE);
    }
    const int P = C / x128::size;
    const int threads = encoder_row_threads(P);
    const int* pos = ws->dev_ints;
    const int* seg_start = pos + plan.BT;
    const int* seg_token = seg_start + plan.nseg + 1;
    const int* big_seg_start = seg_token + plan.nseg;
    // dwpe first: it reads dout in position order, independent of the plan.
    encoder_backward_wpe_kernel<<<ceil_div(T * P, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
    cudaCheckLaunch();
    if (plan.nseg > 0) {
        encoder_backward_segments_kernel<<<dim3(plan.nseg, ceil_div(P, threads)), threads, 0, stream>>>(
            dwte, ws->dev_partial, dout, pos, seg_start, seg_token, plan.nbigseg, C);
        cudaCheckLaunch();
    }
    if (plan.nbig > 0) {
        encoder_backward_combine_kernel<<<dim3(plan.nbig, ceil_div(P, threads)), threads, 0, stream>>>(
            dwte, ws->dev_partial, big_seg_start, seg_token, C);
        cudaCheckLaunch();
    }
}

// dwte[inp[b,t]] += dout[b,t] and dwpe[t] += dout[b,t]   [formula: train_gpt2.c encoder_backward]
//   dwte     (ws->Vp, C) floatX, accumulated (+=) in the rows of the tokens that occur; others untouched.
//   dwpe     (maxT, C) floatX, accumulated (+=) in rows 0..T-1.
//   dout     (B,T,C) floatX on the device, the gradient of encoder_forward's out.
//   inp_cpu  (B,T) token ids on the HOST (the same ids the forward used on the device); each in
//            [0, ws->Vp), checked (exits with a message naming the position).
//   ws       workspace created for max_BT >= B*T, C >= this C, Vp = rows of dwte; used on this stream only.
// Deterministic: every touched element gets exactly one round-to-nearest addition of an fp32 sum taken
// in a fixed order (positions ascending; split buckets: segments in order, each in position order).
// Stream-ordered: nothing to synchronize before or after; callable every micro-step. The host blocks
// only until the previous call's upload (queued one call earlier) has completed.
// Requires C % x128::size == 0 and 16-byte aligned dwte, dwpe, dout (checked).
static inline void encoder_backward(floatX* dwte, floatX* dwpe, EncoderBackwardWorkspace* ws, const floatX* dout,
                                    const int* inp_cpu, int B, int T, int C, cudaStream_t stream) {
    const EncoderBackwardPlan plan = encoder_backward_prepare(ws, inp_cpu, B, T, stream);
    encoder_backward_launch(dwte, dwpe, ws, plan, dout, B, T, C, stream);
}
