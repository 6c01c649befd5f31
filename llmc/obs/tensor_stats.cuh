// tensor_stats.cuh - per-layer tensor statistics of a training step (--tensor-stats N): for each
// activation the forward stores, each parameter's weights and each parameter's gradient, per layer:
// numel, amax, RMS, the fraction of exact zeros, the fractions below the smallest normal of BF16 /
// FP16 / FP8 E4M3, and the NaN and Inf counts. Written to <out>/tensor_stats.csv (doc/FORMATS.md).
//
// Definitions (x: a value as stored, widened exactly to fp32; u = its bit pattern without the sign):
//   amax        max |x| over the finite values (0 when there are none)
//   rms         sqrt(sum x^2 / count) over the finite values (squares and sums in float64; NaN when
//               there are no finite values)
//   zero_frac   #(x == 0, either sign) / numel
//   below_bf16  #(0 < |x| < 2^-126) / numel   (fp32/BF16 subnormals)
//   below_fp16  #(0 < |x| < 2^-14)  / numel   (FP16 would store these as subnormals or 0)
//   below_e4m3  #(0 < |x| < 2^-6)   / numel   (E4M3 subnormals or 0, without scaling)
//   nan, inf    counts (+-Inf counted together)
// The fractions are of numel (NaN and Inf included); the three below_* ranges nest.
//
// Kernels. One statistics kernel, templated on the element type (floatX, and float for the fp32
// gradient sums of multi-GPU -gw fp32 runs), reads a list of segments (pointer, count): a tensor
// of n values gets a fixed number of blocks, tensor_stats_blocks(n, sizeof(T)) (depends on n only,
// never on the device), each block reads a fixed grid-stride share with 16-byte loads and writes
// its partial (float64 sum of squares, integer counts, integer max of |x| bit patterns) to its own
// slot; a second kernel reduces each segment's slots in a fixed order. No floating-point atomics:
// results are bit-identical run to run (and a tensor gives the same bits whether it is launched
// alone or in a batched table). The batched form (a device segment table, block -> segment by binary
// search) lets the 2 x (12 L + 4) weight and gradient slices go in one launch per element type.
//
// In the trainer (TensorStats below, llmc/model/model.cuh gpt2_stored / gpt2_grads_ready):
//   steps that do not record: no kernel, no synchronization (host-side branches only);
//   a recording step: one statistics launch per activation (each right after the forward produced
//   it: buffers are shared across layers with recompute, acts.output is overwritten by the next GEMM),
//   one batched launch for the weights + gradients (two with -gw fp32), one finishing launch for all
//   segments, one device-to-host copy of the results (the step's own synchronization covers it).
// Cost of a recording step, d12 (L=12, C=768, Vp=50304) at B=64, T=1024, BF16 (BT = 65536):
//   activations: (1 + 18 L + 1) B T C = 218 x 50.3M values + logits B T Vp = 3.30G values -> 28.5 GB
//   weights + gradients: 2 x 124.5M values -> 0.50 GB; partials/results written: < 10 MB
//   total about 29.0 GB read: 10 ms at 3 TB/s, on a ~125 ms step, every N steps; 126 + 3 launches.
//   The BF16 inner loop is ~25 SASS instructions per value (sm_90, CUDA 13: counters as compare +
//   predicated add), so the kernel is issue-bound near 2.3 TB/s by estimate (~13 ms per recording
//   step); fp32 tensors are memory-bound. dev/cuda/tensor_stats.cu measures the GB/s.
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/boundary.cuh"
#include "llmc/model/gpt2_config.h"
#include "llmc/core/utils.h"

// ------------------------------------------------------------------------------------------------
// Names

// Activation tensors, in forward order (per layer: TS_LN1 .. TS_RESIDUAL3). Ids of gpt2_stored.
enum TensorStatsAct {
    TS_ENCODED,    // (B,T,C)  wte + wpe                                    layer -1
    TS_LN1,        // (B,T,C)  LayerNorm 1 output                            per layer
    TS_QKV,        // (B,T,3C)
    TS_ATTY,       // (B,T,C)  attention output
    TS_ATTPROJ,    // (B,T,C)  attention projection (acts.output until the residual add)
    TS_RESIDUAL2,  // (B,T,C)
    TS_LN2,        // (B,T,C)
    TS_FCH,        // (B,T,4C) fc output before GELU
    TS_FCH_GELU,   // (B,T,4C)
    TS_FCPROJ,     // (B,T,C)  MLP projection (acts.output)
    TS_RESIDUAL3,  // (B,T,C)
    TS_LNF,        // (B,T,C)  final LayerNorm                               layer -1
    TS_LOGITS,     // (B,T,Vp) acts.output before the classifier overwrites it, layer -1
    TS_NUM_ACTS
};
static const char* const TS_ACT_NAMES[TS_NUM_ACTS] = {"encoded", "ln1", "qkv", "atty", "attproj", "residual2", "ln2",
                                                      "fch", "fch_gelu", "fcproj", "residual3", "lnf", "logits"};
#define TS_FIRST_LAYER_ACT TS_LN1
#define TS_LAYER_ACTS (TS_RESIDUAL3 - TS_LN1 + 1)  // 10 per layer

enum TensorStatsKind { TS_KIND_ACT, TS_KIND_WEIGHT, TS_KIND_GRAD };
static const char* const TS_KIND_NAMES[3] = {"act", "weight", "grad"};

#define TENSOR_STATS_CSV_HEADER "step,layer,tensor,kind,numel,amax,rms,zero_frac,below_bf16,below_fp16,below_e4m3,nan,inf"

// ------------------------------------------------------------------------------------------------
// Device side

#define TS_THREADS 256
#define TS_MAX_BLOCKS 1024        // blocks per segment at most (one wave on an H100 at 256 threads)
#define TS_MIN_BYTES_PER_THREAD 128  // 8 packets of 16 bytes per thread before a segment gets another block

// Segment flag: pass each value through boundary_value<MATMUL_OUT> and round it to T before the
// statistics (the LM head's logits on the classifier-fused path, which skips that pass because the
// classifier applies it on read; idempotent on values that already crossed it; identity outside SF16).
#define TS_FLAG_MATMUL_BOUNDARY 1u

// One tensor (or slice) to take statistics of, and where its per-block partials go.
struct TsSegment {
    const void* ptr;        // first element (aligned to the element size)
    unsigned long long n;   // elements
    unsigned int slot;      // first partial slot (partials[slot .. slot + blocks))
    unsigned int blocks;    // = tensor_stats_blocks(n, element size)
    unsigned int block0;    // first block of this segment within its batched launch (table order)
    unsigned int flags;     // TS_FLAG_*
};

// Cumulative counters of TsCounts::count, by |x| bit pattern u.
enum { TS_C_ZERO, TS_C_BF16, TS_C_FP16, TS_C_E4M3, TS_C_FINITE, TS_C_NAN, TS_NUM_COUNTS };
//   ZERO: u == 0; BF16: u < 2^-126 (0x00800000); FP16: u < 2^-14 (0x38800000); E4M3: u < 2^-6 (0x3C800000)
//   (all three include the zeros); FINITE: u < 0x7F800000; NAN: u > 0x7F800000.

// A partial (one block) or a result (one segment): 64 bytes.
struct TsCounts {
    double sumsq;                                // sum of x^2 over the finite values (float64)
    unsigned long long count[TS_NUM_COUNTS];     // TS_C_* counts
    unsigned int amax_bits;                      // max u over the finite values (0 if none)
    unsigned int pad;
};

struct TsThreadAcc {
    double sumsq;
    unsigned int count[TS_NUM_COUNTS];
    unsigned int amax;
};

// fp32 -> float64 without flush-to-zero (--use_fast_math may otherwise flush subnormal inputs).
__device__ __forceinline__ double ts_widen(float f) {
    double d;
    asm("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(f));
    return d;
}

__device__ __forceinline__ void ts_accumulate(TsThreadAcc& a, float f) {
    const unsigned int u = __float_as_uint(f) & 0x7FFFFFFFu;
    const bool finite = u < 0x7F800000u;
    a.count[TS_C_ZERO] += u == 0u;
    a.count[TS_C_BF16] += u < 0x00800000u;
    a.count[TS_C_FP16] += u < 0x38800000u;
    a.count[TS_C_E4M3] += u < 0x3C800000u;
    a.count[TS_C_FINITE] += finite;
    a.count[TS_C_NAN] += u > 0x7F800000u;
    a.amax = max(a.amax, finite ? u : 0u);
    const double d = ts_widen(finite ? f : 0.0f);
    a.sumsq = fma(d, d, a.sumsq);
}

template <typename T>
__device__ __forceinline__ float ts_value(T v, unsigned int flags) {
    float f = (float)v;
    if constexpr (!boundary_is_identity<MATMUL_OUT>()) {
        if (flags & TS_FLAG_MATMUL_BOUNDARY) f = (float)(T)boundary_value<MATMUL_OUT, false>(f);
    }
    return f;
}

// Statistics partials: block b of segment s writes partials[s.slot + b]. table == NULL: the single
// segment `one` (grid = one.blocks); else the nseg segments of the device table (grid = the sum of
// their blocks, segment s owning blocks [s.block0, s.block0 + s.blocks)).
template <typename T>
__global__ void __launch_bounds__(TS_THREADS)
tensor_stats_partials_kernel(const TsSegment* table, int nseg, TsSegment one, TsCounts* partials) {
    __shared__ int s_seg;
    TsSegment seg = one;
    if (table != nullptr) {
        if (threadIdx.x == 0) {  // the last segment whose block0 <= blockIdx.x
            int lo = 0, hi = nseg - 1;
            while (lo < hi) {
                const int mid = (lo + hi + 1) / 2;
                if (table[mid].block0 <= blockIdx.x) lo = mid;
                else hi = mid - 1;
            }
            s_seg = lo;
        }
        __syncthreads();
        seg = table[s_seg];
    }
    const unsigned int b = blockIdx.x - seg.block0;
    using P = Packed128<T>;
    constexpr int X = P::size;
    const T* values = (const T*)seg.ptr;
    const size_t n = seg.n;
    size_t head = ((16 - ((uintptr_t)values & 15)) & 15) / sizeof(T);  // elements before the first 16-byte boundary
    if (head > n) head = n;
    const size_t packs = (n - head) / X;
    const T* aligned = values + head;

    TsThreadAcc acc;
    acc.sumsq = 0.0;
    acc.amax = 0u;
    #pragma unroll
    for (int c = 0; c < TS_NUM_COUNTS; c++) acc.count[c] = 0u;
    const size_t stride = (size_t)seg.blocks * TS_THREADS;
    size_t i = (size_t)b * TS_THREADS + threadIdx.x;
    for (; i + 3 * stride < packs; i += 4 * stride) {  // 4 independent 16-byte loads in flight per thread
        P p[4];
        #pragma unroll
        for (int k = 0; k < 4; k++) p[k] = load128cs(aligned + (i + k * stride) * X);
        #pragma unroll
        for (int k = 0; k < 4; k++)
            #pragma unroll
            for (int e = 0; e < X; e++) ts_accumulate(acc, ts_value(p[k][e], seg.flags));
    }
    for (; i < packs; i += stride) {
        const P p = load128cs(aligned + i * X);
        #pragma unroll
        for (int e = 0; e < X; e++) ts_accumulate(acc, ts_value(p[e], seg.flags));
    }
    if (b == 0) {  // the < X scalars before the first packet and the < X after the last
        const size_t tail = head + packs * X;
        if (threadIdx.x < head) ts_accumulate(acc, ts_value(values[threadIdx.x], seg.flags));
        if (threadIdx.x < n - tail) ts_accumulate(acc, ts_value(values[tail + threadIdx.x], seg.flags));
    }

    // block reduction, fixed order: butterflies within warps, then warp 0..7 in order
    __shared__ double s_sum[TS_THREADS / 32];
    __shared__ unsigned int s_cnt[TS_THREADS / 32][TS_NUM_COUNTS + 1];
    double s = acc.sumsq;
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    unsigned int c[TS_NUM_COUNTS + 1];
    #pragma unroll
    for (int k = 0; k < TS_NUM_COUNTS; k++) c[k] = __reduce_add_sync(0xFFFFFFFFu, acc.count[k]);
    c[TS_NUM_COUNTS] = __reduce_max_sync(0xFFFFFFFFu, acc.amax);
    if (lane == 0) {
        s_sum[warp] = s;
        #pragma unroll
        for (int k = 0; k <= TS_NUM_COUNTS; k++) s_cnt[warp][k] = c[k];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        TsCounts out;
        out.sumsq = 0.0;
        out.amax_bits = 0u;
        out.pad = 0u;
        for (int k = 0; k < TS_NUM_COUNTS; k++) out.count[k] = 0ull;
        for (int w = 0; w < TS_THREADS / 32; w++) {
            out.sumsq += s_sum[w];
            for (int k = 0; k < TS_NUM_COUNTS; k++) out.count[k] += s_cnt[w][k];
            out.amax_bits = max(out.amax_bits, s_cnt[w][TS_NUM_COUNTS]);
        }
        partials[seg.slot + b] = out;
    }
}

#define TS_FINISH_THREADS 128

// results[s] = the fixed-order reduction of partials[segs[s].slot .. + segs[s].blocks); one block per segment.
__global__ void __launch_bounds__(TS_FINISH_THREADS)
tensor_stats_finish_kernel(const TsSegment* segs, const TsCounts* partials, TsCounts* results) {
    const TsSegment seg = segs[blockIdx.x];
    double s = 0.0;
    unsigned long long c[TS_NUM_COUNTS];
    #pragma unroll
    for (int k = 0; k < TS_NUM_COUNTS; k++) c[k] = 0ull;
    unsigned int m = 0u;
    for (unsigned int j = threadIdx.x; j < seg.blocks; j += TS_FINISH_THREADS) {
        const TsCounts& p = partials[seg.slot + j];
        s += p.sumsq;
        #pragma unroll
        for (int k = 0; k < TS_NUM_COUNTS; k++) c[k] += p.count[k];
        m = max(m, p.amax_bits);
    }
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
        #pragma unroll
        for (int k = 0; k < TS_NUM_COUNTS; k++) c[k] += __shfl_xor_sync(0xFFFFFFFFu, c[k], off);
    }
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    __shared__ TsCounts s_warp[TS_FINISH_THREADS / 32];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) {
        s_warp[warp].sumsq = s;
        for (int k = 0; k < TS_NUM_COUNTS; k++) s_warp[warp].count[k] = c[k];
        s_warp[warp].amax_bits = m;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        TsCounts out = s_warp[0];
        out.pad = 0u;
        for (int w = 1; w < TS_FINISH_THREADS / 32; w++) {
            out.sumsq += s_warp[w].sumsq;
            for (int k = 0; k < TS_NUM_COUNTS; k++) out.count[k] += s_warp[w].count[k];
            out.amax_bits = max(out.amax_bits, s_warp[w].amax_bits);
        }
        results[blockIdx.x] = out;
    }
}

// ------------------------------------------------------------------------------------------------
// Launchers (host)

// Blocks the statistics kernel uses for a tensor of n elements of elem_bytes bytes: one per
// TS_THREADS x TS_MIN_BYTES_PER_THREAD bytes, at least 1, at most TS_MAX_BLOCKS. A function of (n,
// elem_bytes) only, so the reduction order (and the result bits) never depend on the device.
static inline unsigned int tensor_stats_blocks(size_t n, size_t elem_bytes) {
    const size_t per_block = (size_t)TS_THREADS * TS_MIN_BYTES_PER_THREAD;
    const size_t b = ceil_div_sz(n * elem_bytes, per_block);
    return (unsigned int)(b < 1 ? 1 : (b > TS_MAX_BLOCKS ? TS_MAX_BLOCKS : b));
}

// Fill blocks, block0 (running, from 0) and slot (running, from first_slot) of segs[0, nseg), whose
// ptr and n are set, for one batched launch of element size elem_bytes. Returns the total blocks
// (= the launch's grid, = the partial slots used). Dies if ptr is not aligned to the element size.
static inline unsigned int tensor_stats_assign(TsSegment* segs, int nseg, size_t elem_bytes, unsigned int first_slot) {
    unsigned int blocks = 0;
    for (int i = 0; i < nseg; i++) {
        if ((uintptr_t)segs[i].ptr % elem_bytes != 0) die("tensor_stats: segment %d at %p is not aligned to its %zu-byte elements", i, segs[i].ptr, elem_bytes);
        segs[i].blocks = tensor_stats_blocks(segs[i].n, elem_bytes);
        segs[i].block0 = blocks;
        segs[i].slot = first_slot + blocks;
        blocks += segs[i].blocks;
    }
    return blocks;
}

// Partials of one segment (seg.ptr -> n values of T, any alignment of T; seg.blocks, seg.slot set,
// e.g. by tensor_stats_assign): writes partials[seg.slot .. seg.slot + seg.blocks) (64 bytes each),
// on `stream`. n = 0 writes empty partials.
template <typename T>
static inline void tensor_stats_launch_segment(const TsSegment& seg, TsCounts* partials, cudaStream_t stream) {
    TsSegment s = seg;
    s.block0 = 0;
    tensor_stats_partials_kernel<T><<<s.blocks, TS_THREADS, 0, stream>>>(nullptr, 0, s, partials);
    cudaCheckLaunch();
}

// Partials of the nseg segments of a device table (all of element type T, laid out by
// tensor_stats_assign, total_blocks its return value), in one launch on `stream`.
template <typename T>
static inline void tensor_stats_launch_table(const TsSegment* d_table, int nseg, unsigned int total_blocks, TsCounts* partials,
                                             cudaStream_t stream) {
    if (nseg <= 0) return;
    TsSegment none;
    memset(&none, 0, sizeof(none));
    tensor_stats_partials_kernel<T><<<total_blocks, TS_THREADS, 0, stream>>>(d_table, nseg, none, partials);
    cudaCheckLaunch();
}

// results[s] (s < nseg) = the reduction of segment s's partials; d_segs is a device table of the
// segments (only slot and blocks are read). One launch of nseg blocks; results OVERWRITTEN.
static inline void tensor_stats_finish(const TsSegment* d_segs, int nseg, const TsCounts* partials, TsCounts* results,
                                       cudaStream_t stream) {
    if (nseg <= 0) return;
    tensor_stats_finish_kernel<<<nseg, TS_FINISH_THREADS, 0, stream>>>(d_segs, partials, results);
    cudaCheckLaunch();
}

// The statistics of the CSV from a result and the tensor's element count.
struct TsValues {
    size_t numel;
    float amax;
    double rms;                                       // NaN when no value is finite
    double zero_frac, below_bf16, below_fp16, below_e4m3;
    unsigned long long nan, inf;
};

static inline TsValues tensor_stats_values(const TsCounts& c, size_t numel) {
    TsValues v;
    v.numel = numel;
    memcpy(&v.amax, &c.amax_bits, sizeof(float));
    const unsigned long long fin = c.count[TS_C_FINITE], z = c.count[TS_C_ZERO];
    v.rms = fin ? sqrt(c.sumsq / (double)fin) : NAN;
    const double d = numel ? (double)numel : 1.0;
    v.zero_frac = z / d;
    v.below_bf16 = (c.count[TS_C_BF16] - z) / d;
    v.below_fp16 = (c.count[TS_C_FP16] - z) / d;
    v.below_e4m3 = (c.count[TS_C_E4M3] - z) / d;
    v.nan = c.count[TS_C_NAN];
    v.inf = numel - fin - v.nan;
    return v;
}

// ------------------------------------------------------------------------------------------------
// The trainer's recording state

struct TsEntry {
    int kind, tensor, layer;  // TS_KIND_*, TensorStatsAct or parameter tensor index, layer or -1
};

struct TensorStats {
    int every;                 // record steps 1, N, 2N, ... (0: never)
    int recording;             // the current step records (tensor_stats_begin_step)
    int acts_on;               // gpt2_stored records now (the first micro-step of a recording step)
    int params_done;           // weights + gradients recorded and the step's results on their way to the host
    int step;                  // 1-based step being recorded
    int L;
    int num_segments, num_acts;      // segments: [0, num_acts) activations, then weights, then gradients
    TsSegment* segs;           // host: every segment (slot, blocks, n; ptr for weights and gradients)
    TsEntry* entries;          // host: what each segment is (CSV columns)
    int* act_index;            // [tensor * (L + 1) + layer + 1] -> segment, -1 if none
    int* act_seen;             // per activation segment: the step that last recorded it
    TsSegment* d_segs;         // device copy of segs (the finish kernel)
    TsSegment* d_table_x;      // device: floatX weights (and gradients), block0 per this launch
    int table_x_count;
    unsigned int table_x_blocks;
    TsSegment* d_table_f;      // device: fp32 gradients (-gw fp32), or NULL
    int table_f_count;
    unsigned int table_f_blocks;
    TsCounts* d_partials;
    size_t num_slots;
    TsCounts* d_results;
    TsCounts* h_results;       // pinned, num_segments
    cudaStream_t stream;       // where the step's statistics were enqueued
    FILE* csv;
    char csv_path[4096];
};

// Host-side state of --tensor-stats `every` (> 0), appending to <out_dir>/tensor_stats.csv when
// `append` (a resumed run; the header only if the file is empty), else starting it anew with the
// header. out_dir must exist. Dies naming the file on I/O errors. No CUDA call.
static inline void tensor_stats_init(TensorStats* ts, int every, const char* out_dir, int append) {
    memset(ts, 0, sizeof(*ts));
    ts->every = every;
    snprintf(ts->csv_path, sizeof(ts->csv_path), "%s/tensor_stats.csv", out_dir);
    ts->csv = fopen_check(ts->csv_path, append ? "a" : "w");
    struct stat st;
    if (fstat(fileno(ts->csv), &st) != 0) die("%s: cannot stat", ts->csv_path);
    if (st.st_size == 0) fprintf(ts->csv, "%s\n", TENSOR_STATS_CSV_HEADER);
    fflush(ts->csv);
}

// Plan the segments of a GPT-2 step (after tensor_stats_init, once the model is allocated):
// activations for micro-batches of B x T (in TS_ACT order: encoded, per layer ln1..residual3, lnf,
// logits), then the 16 parameters in checkpoint order, per-layer tensors sliced by layer (layer -1
// for wte, wpe, lnfw, lnfb), as weights (params, floatX) and as gradients (grads_f32 when non-NULL,
// else grads). Allocates the device tables, partials and results (and uploads the tables: no
// per-step host-to-device traffic).
static inline void tensor_stats_plan_gpt2(TensorStats* ts, const GPT2Config* c, int B, int T, const floatX* params,
                                          const floatX* grads, const float* grads_f32) {
    const int L = c->num_layers;
    const size_t BT = (size_t)B * T, C = (size_t)c->channels, Vp = (size_t)c->padded_vocab_size;
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_param_sizes(c, sizes);
    auto global = [](int t) { return t == 0 || t == 1 || t >= 14; };  // wte, wpe, lnfw, lnfb: not per layer
    int nparam = 0;
    for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) nparam += global(t) ? 1 : L;
    const int nact = 2 + TS_LAYER_ACTS * L + 1;
    ts->L = L;
    ts->num_acts = nact;
    ts->num_segments = nact + 2 * nparam;
    ts->segs = (TsSegment*)calloc_check(ts->num_segments, sizeof(TsSegment));
    ts->entries = (TsEntry*)calloc_check(ts->num_segments, sizeof(TsEntry));
    ts->act_index = (int*)malloc_check(sizeof(int) * TS_NUM_ACTS * (L + 1));
    ts->act_seen = (int*)calloc_check(nact, sizeof(int));
    for (int i = 0; i < TS_NUM_ACTS * (L + 1); i++) ts->act_index[i] = -1;
    int k = 0;
    auto add_act = [&](int tensor, int layer, size_t n) {
        ts->act_index[tensor * (L + 1) + layer + 1] = k;
        ts->entries[k] = TsEntry{TS_KIND_ACT, tensor, layer};
        ts->segs[k].n = n;
        k++;
    };
    add_act(TS_ENCODED, -1, BT * C);
    const size_t act_cols[TS_LAYER_ACTS] = {C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C};
    for (int l = 0; l < L; l++)
        for (int j = 0; j < TS_LAYER_ACTS; j++) add_act(TS_FIRST_LAYER_ACT + j, l, BT * act_cols[j]);
    add_act(TS_LNF, -1, BT * C);
    add_act(TS_LOGITS, -1, BT * Vp);
    // weights, then gradients: each tensor in checkpoint order, its layers in memory order
    for (int kind = TS_KIND_WEIGHT; kind <= TS_KIND_GRAD; kind++) {
        size_t off = 0;
        for (int t = 0; t < NUM_PARAMETER_TENSORS; t++) {
            const int layers = global(t) ? 1 : L;
            const size_t per = sizes[t] / layers;
            for (int l = 0; l < layers; l++) {
                const size_t o = off + (size_t)l * per;
                ts->entries[k] = TsEntry{kind, t, global(t) ? -1 : l};
                ts->segs[k].n = per;
                ts->segs[k].ptr = kind == TS_KIND_WEIGHT ? (const void*)(params + o)
                                                         : (grads_f32 ? (const void*)(grads_f32 + o) : (const void*)(grads + o));
                k++;
            }
            off += sizes[t];
        }
    }
    // slots: activations (one launch each), then the floatX table, then the fp32 table
    unsigned int slot = 0;
    for (int i = 0; i < nact; i++) {
        ts->segs[i].blocks = tensor_stats_blocks(ts->segs[i].n, sizeof(floatX));
        ts->segs[i].slot = slot;
        slot += ts->segs[i].blocks;
    }
    TsSegment* weights = ts->segs + nact;
    TsSegment* gradsegs = weights + nparam;
    ts->table_x_count = grads_f32 ? nparam : 2 * nparam;
    ts->table_x_blocks = tensor_stats_assign(weights, ts->table_x_count, sizeof(floatX), slot);
    slot += ts->table_x_blocks;
    ts->table_f_count = grads_f32 ? nparam : 0;
    ts->table_f_blocks = grads_f32 ? tensor_stats_assign(gradsegs, nparam, sizeof(float), slot) : 0;
    slot += ts->table_f_blocks;
    ts->num_slots = slot;
    const size_t seg_bytes = ts->num_segments * sizeof(TsSegment);
    cudaCheck(cudaMalloc(&ts->d_segs, seg_bytes));
    cudaCheck(cudaMemcpy(ts->d_segs, ts->segs, seg_bytes, cudaMemcpyHostToDevice));
    ts->d_table_x = ts->d_segs + nact;  // the parameter segments' block0 are relative to their own launch
    ts->d_table_f = grads_f32 ? ts->d_segs + nact + nparam : NULL;
    cudaCheck(cudaMalloc(&ts->d_partials, ts->num_slots * sizeof(TsCounts)));
    cudaCheck(cudaMalloc(&ts->d_results, ts->num_segments * sizeof(TsCounts)));
    cudaCheck(cudaMallocHost(&ts->h_results, ts->num_segments * sizeof(TsCounts)));
}

// Whether this step records at all (NULL: never).
static inline bool tensor_stats_recording(const TensorStats* ts) { return ts != NULL && ts->recording; }
// Whether gpt2_stored records activations now.
static inline bool tensor_stats_acts_active(const TensorStats* ts) { return ts != NULL && ts->acts_on; }

// Start optimizer step `step` (1-based): it records on steps 1, N, 2N, ... (host state only).
static inline void tensor_stats_begin_step(TensorStats* ts, int step) {
    if (ts == NULL) return;
    ts->step = step;
    ts->recording = ts->every > 0 && (step == 1 || step % ts->every == 0);
    ts->acts_on = 0;
    ts->params_done = 0;
}

// Record the activations of the micro-step about to run (on: the first micro-step of a recording step).
static inline void tensor_stats_set_acts(TensorStats* ts, bool on) {
    if (ts != NULL) ts->acts_on = ts->recording && on;
}

// Activation `tensor` (TensorStatsAct) of `layer` (-1 for encoded, lnf, logits): n floatX values at x,
// complete on `stream`. One statistics launch into the planned slots. matmul_boundary: apply the
// MATMUL_OUT boundary first (TS_FLAG_MATMUL_BOUNDARY). Dies if (tensor, layer) is not planned or n
// differs from the plan (a forward at another B x T while recording).
static inline void tensor_stats_record_act(TensorStats* ts, int tensor, int layer, const floatX* x, size_t n, bool matmul_boundary,
                                           cudaStream_t stream) {
    const int idx = (tensor >= 0 && tensor < TS_NUM_ACTS && layer >= -1 && layer < ts->L) ? ts->act_index[tensor * (ts->L + 1) + layer + 1] : -1;
    if (idx < 0) die("tensor_stats: activation %d of layer %d is not planned", tensor, layer);
    TsSegment s = ts->segs[idx];
    if (s.n != n) die("tensor_stats: %s of layer %d has %zu values, planned %llu", TS_ACT_NAMES[tensor], layer, n, s.n);
    s.ptr = x;
    s.flags = matmul_boundary ? TS_FLAG_MATMUL_BOUNDARY : 0u;
    tensor_stats_launch_segment<floatX>(s, ts->d_partials, stream);
    ts->act_seen[idx] = ts->step;
}

// After the step's last backward (gradients final, weights as the forward used them): record the
// weights and gradients (one launch per element type), reduce every segment of the step (one
// launch) and start the copy of the results to pinned host memory, all on `stream`. Dies naming the
// activation if a planned one was not recorded this step (a missing gpt2_stored call).
static inline void tensor_stats_record_params(TensorStats* ts, cudaStream_t stream) {
    for (int i = 0; i < ts->num_acts; i++)
        if (ts->act_seen[i] != ts->step)
            die("tensor_stats: step %d: %s of layer %d was not recorded (no gpt2_stored call for it)", ts->step,
                TS_ACT_NAMES[ts->entries[i].tensor], ts->entries[i].layer);
    ts->acts_on = 0;
    tensor_stats_launch_table<floatX>(ts->d_table_x, ts->table_x_count, ts->table_x_blocks, ts->d_partials, stream);
    tensor_stats_launch_table<float>(ts->d_table_f, ts->table_f_count, ts->table_f_blocks, ts->d_partials, stream);
    tensor_stats_finish(ts->d_segs, ts->num_segments, ts->d_partials, ts->d_results, stream);
    cudaCheck(cudaMemcpyAsync(ts->h_results, ts->d_results, ts->num_segments * sizeof(TsCounts), cudaMemcpyDeviceToHost, stream));
    ts->stream = stream;
    ts->params_done = 1;
}

static inline const char* tensor_stats_name(const TsEntry& e) {
    return e.kind == TS_KIND_ACT ? TS_ACT_NAMES[e.tensor] : PARAM_TENSOR_NAMES[e.tensor];
}

// "act fch_gelu L5", "grad wte" (for the summary line).
static inline void tensor_stats_label(char* out, size_t n, const TsEntry& e) {
    if (e.layer >= 0) snprintf(out, n, "%s %s L%d", TS_KIND_NAMES[e.kind], tensor_stats_name(e), e.layer);
    else snprintf(out, n, "%s %s", TS_KIND_NAMES[e.kind], tensor_stats_name(e));
}

// End of a recording step (no-op otherwise): wait for the results (the step has synchronized
// already, so this costs nothing), append one CSV row per segment (activations in forward order,
// then weights, then gradients, each parameter in checkpoint order and its layers in order) and
// print one summary line: the largest amax, the largest below_e4m3 fraction among activations, and
// the tensors with NaN/Inf (the first 4, and how many more). Dies naming the CSV on a write error.
static inline void tensor_stats_end_step(TensorStats* ts) {
    if (!tensor_stats_recording(ts)) return;
    ts->recording = 0;
    ts->acts_on = 0;
    if (!ts->params_done) return;  // stopped before the gradients were final: nothing complete to write
    cudaCheck(cudaStreamSynchronize(ts->stream));
    int imax = 0, ie4m3 = 0, nbad = 0;
    float best_amax = -1.0f;
    double best_e4m3 = -1.0;
    char bad[640] = "", label[96];
    size_t blen = 0;
    for (int i = 0; i < ts->num_segments; i++) {
        const TsEntry& e = ts->entries[i];
        const TsValues v = tensor_stats_values(ts->h_results[i], ts->segs[i].n);
        fprintf(ts->csv, "%d,%d,%s,%s,%zu,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%llu,%llu\n", ts->step, e.layer, tensor_stats_name(e),
                TS_KIND_NAMES[e.kind], v.numel, v.amax, v.rms, v.zero_frac, v.below_bf16, v.below_fp16, v.below_e4m3, v.nan, v.inf);
        if (v.amax > best_amax) { best_amax = v.amax; imax = i; }
        if (e.kind == TS_KIND_ACT && v.below_e4m3 > best_e4m3) { best_e4m3 = v.below_e4m3; ie4m3 = i; }
        if (v.nan || v.inf) {
            if (nbad < 4) {
                tensor_stats_label(label, sizeof(label), e);
                blen += snprintf(bad + blen, sizeof(bad) - blen, "%s%s (nan %llu, inf %llu)", nbad ? ", " : "", label, v.nan, v.inf);
            }
            nbad++;
        }
    }
    if (fflush(ts->csv) != 0 || ferror(ts->csv)) die("%s: write failed", ts->csv_path);
    if (nbad > 4) snprintf(bad + blen, sizeof(bad) - blen, " and %d more", nbad - 4);
    char amax_label[96], e4m3_label[96];
    tensor_stats_label(amax_label, sizeof(amax_label), ts->entries[imax]);
    tensor_stats_label(e4m3_label, sizeof(e4m3_label), ts->entries[ie4m3]);
    printf("tensor stats step %d (%d tensors -> %s): max amax %.3e %s | max below_e4m3 %.3e %s | NaN/Inf: %s\n", ts->step,
           ts->num_segments, ts->csv_path, best_amax, amax_label, best_e4m3, e4m3_label, nbad ? bad : "none");
}

// Free everything tensor_stats_init / tensor_stats_plan_gpt2 allocated (closes the CSV).
static inline void tensor_stats_free(TensorStats* ts) {
    if (ts->csv) fclose(ts->csv);
    cudaFree(ts->d_segs);
    cudaFree(ts->d_partials);
    cudaFree(ts->d_results);
    if (ts->h_results) cudaFreeHost(ts->h_results);
    free(ts->segs);
    free(ts->entries);
    free(ts->act_index);
    free(ts->act_seen);
    memset(ts, 0, sizeof(*ts));
}
