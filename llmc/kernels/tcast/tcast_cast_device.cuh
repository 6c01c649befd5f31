// tcast_cast_device.cuh - the device building blocks of the TensorCast cast kernels: the launch geometry,
// per-thread statistics counts and the block histogram of scale bins (section 4.5), BF16 packets as float32
// bit patterns (16-byte loads / stores, RNE packing without flush-to-zero), warp merges and global atomics
// of the group accumulation, and the three element quantizers the kernels are instantiated with
// (TcastQGeneral: tcast_quantize for every data type; TcastQExp and TcastQRne: the fast paths of
// tcast_cast_elem.cuh), which say how a group is accumulated, what its scale is stored as and how a pair of
// elements is cast. Part of the GPU cast, llmc/kernels/tcast/tcast_cast.cuh.
//
// BF16 storage only: the packets are BF16 (floatX = __nv_bfloat16, PRECISION=BF16; TCAST=1 builds are BF16).
#pragma once

#include <stdint.h>
#include <string.h>
#include <type_traits>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/tcast/tcast_stats.cuh"
#include "llmc/kernels/tcast/tcast_cast_elem.cuh"

static_assert(std::is_same<floatX, __nv_bfloat16>::value,
              "llmc/kernels/tcast/tcast_cast.cuh casts BF16 storage (floatX = __nv_bfloat16): build with PRECISION=BF16 (TCAST=1)");

constexpr int TCAST_THREADS = 256;        // every kernel: 8 warps
constexpr int TCAST_WARPS = TCAST_THREADS / 32;
constexpr int TCAST_ROW_PACKETS = 4;      // row path: 16-byte packets per thread per step (warp stride)
constexpr int TCAST_COL_RPT = 4;          // column path: rows per thread per chunk
constexpr int TCAST_CHUNK_ROWS = TCAST_WARPS * TCAST_COL_RPT;  // 32
constexpr int TCAST_STRIP_COLS = 32 * 8;  // columns per block of the column path (256)
#define TCAST_FULL_MASK 0xFFFFFFFFu

// ------------------------------------------------------------------------------------------------
// Device helpers

// Per-thread statistics counts (section 4.5), flushed once per warp.
struct TcastCounts {
    unsigned values, saturated, flushed;
    __device__ void add(unsigned flags, bool valid) {
        values += valid;
        saturated += valid && (flags & TCAST_FLAG_SATURATED);
        flushed += valid && (flags & TCAST_FLAG_FLUSHED);
    }
};

// Warp sums of the counts into st. All 32 lanes must call.
__device__ __forceinline__ void tcast_counts_flush(TcastDeviceStats* st, const TcastCounts& c) {
    const unsigned v = __reduce_add_sync(TCAST_FULL_MASK, c.values);
    const unsigned s = __reduce_add_sync(TCAST_FULL_MASK, c.saturated);
    const unsigned f = __reduce_add_sync(TCAST_FULL_MASK, c.flushed);
    if ((threadIdx.x & 31) == 0) {
        if (v) atomicAdd(&st->values, (unsigned long long)v);
        if (s) atomicAdd(&st->saturated, (unsigned long long)s);
        if (f) atomicAdd(&st->flushed, (unsigned long long)f);
    }
}

// Block histogram of group scale bins in shared memory (thousands of groups per block would
// serialize on a few global bins). init / flush: every thread of the block.
__device__ __forceinline__ void tcast_hist_init(unsigned* h) {
    for (int i = threadIdx.x; i < TCAST_HIST_BINS; i += blockDim.x) h[i] = 0u;
    __syncthreads();
}
__device__ __forceinline__ void tcast_hist_add(unsigned* h, int bin) {
    if (bin >= 0 && bin < TCAST_HIST_BINS) atomicAdd(&h[bin], 1u);
}
__device__ __forceinline__ void tcast_hist_flush(unsigned* h, TcastDeviceStats* st) {
    __syncthreads();
    for (int i = threadIdx.x; i < TCAST_HIST_BINS; i += blockDim.x)
        if (h[i]) atomicAdd(&st->hist[i], h[i]);
}

// A 16-byte packet of 8 BF16 as float32 bit patterns (exact), and back (RNE, two per conversion:
// cvt.rn.bf16x2.f32 has no flush-to-zero form, so float32 subnormal results round correctly).
__device__ __forceinline__ void tcast_unpack8(const uint4 raw, uint32_t (&b)[8]) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        b[2 * i] = w[i] << 16;
        b[2 * i + 1] = w[i] & 0xFFFF0000u;
    }
}
__device__ __forceinline__ uint32_t tcast_pack2(uint32_t lo, uint32_t hi) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(__uint_as_float(lo), __uint_as_float(hi));
    uint32_t w;
    memcpy(&w, &p, sizeof(w));
    return w;
}
__device__ __forceinline__ uint4 tcast_pack8(const uint32_t (&b)[8]) {
    return make_uint4(tcast_pack2(b[0], b[1]), tcast_pack2(b[2], b[3]), tcast_pack2(b[4], b[5]), tcast_pack2(b[6], b[7]));
}
// Plain (coherent) loads and stores: in place, y aliases x, so no read-only (.nc) path.
__device__ __forceinline__ uint4 tcast_load16(const floatX* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void tcast_store16(floatX* p, uint4 v) { *reinterpret_cast<uint4*>(p) = v; }
__device__ __forceinline__ uint32_t tcast_load1(const floatX* p) {
    return (uint32_t)(*reinterpret_cast<const unsigned short*>(p)) << 16;
}
__device__ __forceinline__ void tcast_store1(floatX* p, uint32_t b) {
    *p = __float2bfloat16_rn(__uint_as_float(b));  // cvt.rn.bf16.f32: no flush-to-zero either
}

__device__ __forceinline__ TcastGroupAcc tcast_acc_shfl_xor(const TcastGroupAcc& a, int off) {
    TcastGroupAcc o;
    o.amax = __shfl_xor_sync(TCAST_FULL_MASK, a.amax, off);
    o.tmin = __shfl_xor_sync(TCAST_FULL_MASK, a.tmin, off);
    o.tmax = __shfl_xor_sync(TCAST_FULL_MASK, a.tmax, off);
    o.special = __shfl_xor_sync(TCAST_FULL_MASK, a.special, off);
    return o;
}

// Merges a into the global accumulation *dst (integer atomics: order independent).
__device__ __forceinline__ void tcast_acc_atomic(TcastGroupAcc* dst, const TcastGroupAcc& a) {
    if (a.amax) atomicMax(&dst->amax, a.amax);
    if (a.tmin < 0) atomicMin(&dst->tmin, a.tmin);
    if (a.tmax > 0) atomicMax(&dst->tmax, a.tmax);
    if (a.special) atomicOr(&dst->special, 1u);
}

// The unscaled "group" (every element alone, section 1.3).
static inline HOST_DEVICE TcastGroupScale tcast_unscaled_group(void) {
    TcastGroupScale g;
    g.mode = TCAST_GROUP_UNSCALED;
    g.s = 0;
    g.scale = 0.0f;
    g.zero = 0.0f;
    g.izero = 0;
    g.hist = -1;
    return g;
}

// ------------------------------------------------------------------------------------------------
// Element quantizers: how a group is accumulated, what a group's scale is stored as (Param), and
// how a pair of elements of one group is cast (float32 bits in, float32 bits out; f: flags or NULL).
// The pair shares a group in both layouts (adjacent columns along dim 1, adjacent rows along dim 0;
// every tile is at least 2 long).
// A quantizer with kFastRuns (TcastQRne) also casts a run of pairs of one group (tcast_cast_run: a packet, a
// column's 4 rows in the column kernel) without per-element checks when all_fast(p) (every element of the
// group takes its fast path), with the element step it picks once per run (with_step: one uniform branch
// per run, not per pair).

static __device__ __noinline__ TcastGroupScale tcast_group_scale_slow_(const TcastDataType* dt, TcastGroupAcc acc) {
    return tcast_group_scale(dt, acc);
}

// General: the full TcastGroupAcc and tcast_quantize (out of line). Every data type.
struct TcastQGeneral {
    typedef TcastGroupAcc Acc;
    typedef TcastGroupScale Param;
    static constexpr int MIN_BLOCKS = 2;  // __launch_bounds__: <= 128 registers
    static constexpr bool kFastRuns = false;
    static __device__ Acc init() { return tcast_acc_init(); }
    static __device__ void add(Acc& acc, uint32_t b) { tcast_acc_add(&acc, __uint_as_float(b)); }
    static __device__ void merge(Acc& acc, const Acc& o) { tcast_acc_merge(&acc, o); }
    static __device__ Acc shfl_xor(const Acc& acc, int off) { return tcast_acc_shfl_xor(acc, off); }
    static __device__ TcastGroupScale scale(const TcastKernelArgs& k, const Acc& acc) { return tcast_group_scale_slow_(&k.dt, acc); }
    static __device__ Param param(const TcastKernelArgs&, const TcastGroupScale& g) { return g; }
    static __device__ void cast2(const TcastKernelArgs& k, const Param& p, uint32_t& b0, uint32_t& b1, uint64_t i0, uint64_t i1,
                                 unsigned* f) {
        const uint32_t u0 = k.stochastic ? tcast_random_bits(k.seed, i0) : 0u;
        const uint32_t u1 = k.stochastic ? tcast_random_bits(k.seed, i1) : 0u;
        const uint2 r0 = tcast_quantize_slow_(&k.dt, p, b0, u0), r1 = tcast_quantize_slow_(&k.dt, p, b1, u1);
        b0 = r0.x;
        b1 = r1.x;
        if (f) {
            f[0] = r0.y;
            f[1] = r1.y;
        }
    }
};

// Exponent fast path: the group accumulation is max |x| as bits (a pattern >= 0x7F800000 means a
// NaN or an Inf: the group is special), which is all sections 4a and 4.3 read.
struct TcastQExp {
    typedef uint32_t Acc;
    typedef TcastExpParam Param;
    static constexpr int MIN_BLOCKS = 3;  // __launch_bounds__: <= 85 registers, 24 warps per SM
    static constexpr bool kFastRuns = false;
    static __device__ Acc init() { return 0u; }
    static __device__ void add(Acc& acc, uint32_t b) { acc = max(acc, b & 0x7FFFFFFFu); }
    static __device__ void merge(Acc& acc, const Acc& o) { acc = max(acc, o); }
    static __device__ Acc shfl_xor(const Acc& acc, int off) { return __shfl_xor_sync(TCAST_FULL_MASK, acc, off); }
    // tcast_group_scale's steps for an exponent scale, the only kind this path takes (4.3 specials,
    // 4a via tcast_exp_scale): inlining all of tcast_group_scale at every group site would drag its
    // float-scale branches along (code size, registers)
    static __device__ TcastGroupScale scale(const TcastKernelArgs& k, const Acc& acc) {
        TcastGroupScale g = tcast_unscaled_group();
        if (!k.dt.has_scale) return g;
        if (acc >= TCAST_F32_INF) {
            g.mode = TCAST_GROUP_NAN;
            return g;
        }
        int overflow;
        g.s = tcast_exp_scale(&k.dt.number, &k.dt.scale.scale, k.dt.scale_mode, tcast_f32_from_bits(acc), &overflow);
        g.mode = overflow ? TCAST_GROUP_NAN : TCAST_GROUP_EXP;
        g.hist = overflow ? TCAST_HIST_OVER : tcast_hist_bin(g.s);
        return g;
    }
    static __device__ Param param(const TcastKernelArgs& k, const TcastGroupScale& g) { return tcast_exp_param(k, g); }
    static __device__ void cast2(const TcastKernelArgs& k, const Param& p, uint32_t& b0, uint32_t& b1, uint64_t i0, uint64_t i1,
                                 unsigned* f) {
        const uint32_t u0 = k.stochastic ? tcast_random_bits(k.seed, i0) : 0u;
        const uint32_t u1 = k.stochastic ? tcast_random_bits(k.seed, i1) : 0u;
        b0 = tcast_exp_elem(k, p, b0, u0, f ? f : NULL);
        b1 = tcast_exp_elem(k, p, b1, u1, f ? f + 1 : NULL);
    }
};

// Round-to-nearest-even path as an element quantizer (see tcast_rne_elem): ok groups and finite
// elements take the fast path; the rest tcast_quantize out of line. A pair (cast2: tiles of 2 and 4,
// unscaled and fixed-scale groups, whose elements may be NaN or Inf) takes the float32 rounding; a run of
// an exponent-scaled ok group (tcast_cast_run) takes the launch's element step: the same rounding, or the
// hardware FP8 conversion for e4m3fn / e5m2 elements (k.rne_fp8, tcast_rne_pair_step: same bits).
// (Tried: runs of unscaled groups with a finiteness check per packet, so that unscaled e4m3fn / e5m2 casts
// take the hardware step too: the GELU-sites kernel then spilled 16 / 24 bytes at its 80-register bound.)
struct TcastQRne : TcastQExp {
    typedef TcastRneParam Param;
    static constexpr bool kFastRuns = true;
    static __device__ Param param(const TcastKernelArgs& k, const TcastGroupScale& g) { return tcast_rne_param(k, g); }
    // every element of a group with scale p takes the fast path (an exponent-scaled ok group: ok = 2)
    static __device__ __forceinline__ bool all_fast(const Param& p) { return p.ok == 2; }
    // body(step) with step::fast2(k, p, b0, b1) = tcast_rne_pair_step<k.rne_fp8>: three inlined copies of the
    // caller's run, one executed (the branch is the same for every thread of the launch)
    template <int F>
    struct Step {
        static __device__ __forceinline__ void fast2(const TcastKernelArgs& k, const Param& p, uint32_t& b0, uint32_t& b1) {
            tcast_rne_pair_step<F>(k, p, b0, b1);
        }
    };
    template <class Body>
    static __device__ __forceinline__ void with_step(const TcastKernelArgs& k, Body&& body) {
        if (k.rne_fp8 == TCAST_FP8_E4M3) body(Step<TCAST_FP8_E4M3>());
        else if (k.rne_fp8 == TCAST_FP8_E5M2) body(Step<TCAST_FP8_E5M2>());
        else body(Step<TCAST_FP8_NONE>());
    }
    static __device__ void cast2(const TcastKernelArgs& k, const Param& p, uint32_t& b0, uint32_t& b1, uint64_t i0, uint64_t i1,
                                 unsigned* f) {
        if (p.ok && max(b0 & 0x7FFFFFFFu, b1 & 0x7FFFFFFFu) < TCAST_F32_INF) {
            tcast_rne_pair_step<TCAST_FP8_NONE>(k, p, b0, b1);
            return;
        }
        TcastExpParam e;
        e.code = p.code;  // all tcast_exp_group reads
        const TcastGroupScale g = tcast_exp_group(k, e);
        b0 = tcast_quantize_slow_(&k.dt, g, b0, 0u).x;
        b1 = tcast_quantize_slow_(&k.dt, g, b1, 0u).x;
        (void)i0;
        (void)i1;
        (void)f;  // never instantiated with statistics (tcast_dispatch_)
    }
};

// One pair of a run (tcast_cast_run): the two elements' float32 bits (cast in place), their flat indices (the
// random bits of @stochastic) and whether each lies inside the tensor (the statistics count only those).
struct TcastPairRef {
    uint32_t& x0;
    uint32_t& x1;
    uint64_t i0, i1;
    bool v0, v1;
};

// Casts one pair of a group (scale p) with Q's checked pair cast (cast2), counting its flags for the statistics.
template <class Q, bool STATS>
__device__ __forceinline__ void tcast_cast_pair(const TcastKernelArgs& k, const typename Q::Param& p, const TcastPairRef& e,
                                                TcastCounts& cnt) {
    unsigned f[2] = {0u, 0u};
    Q::cast2(k, p, e.x0, e.x1, e.i0, e.i1, STATS ? f : nullptr);
    if (STATS) {
        cnt.add(f[0], e.v0);
        cnt.add(f[1], e.v1);
    }
}

// Casts NP pairs of one group (scale p) in place; at(i) is pair i (a TcastPairRef). With a kFastRuns quantizer
// and no statistics, the run of a group whose every element takes the fast path (all_fast) is cast by the
// launch's element step without per-pair checks; otherwise pair by pair (tcast_cast_pair).
template <class Q, bool STATS, int NP, class At>
__device__ __forceinline__ void tcast_cast_run(const TcastKernelArgs& k, const typename Q::Param& p, TcastCounts& cnt, At&& at) {
    if constexpr (Q::kFastRuns && !STATS) {
        if (Q::all_fast(p)) {
            Q::with_step(k, [&](auto step) {
                #pragma unroll
                for (int i = 0; i < NP; i++) {
                    const TcastPairRef e = at(i);
                    decltype(step)::fast2(k, p, e.x0, e.x1);
                }
            });
            return;
        }
    }
    #pragma unroll
    for (int i = 0; i < NP; i++) tcast_cast_pair<Q, STATS>(k, p, at(i), cnt);
}

// Casts the 8 elements of a packet (flat indices idx0 .. idx0 + 7) with one group scale.
template <class Q, bool STATS>
__device__ __forceinline__ void tcast_cast_packet(const TcastKernelArgs& k, const typename Q::Param& p, uint32_t (&b)[8],
                                                  uint64_t idx0, TcastCounts& cnt) {
    tcast_cast_run<Q, STATS, 4>(k, p, cnt, [&](int i) {
        return TcastPairRef{b[2 * i], b[2 * i + 1], idx0 + 2 * i, idx0 + 2 * i + 1, true, true};
    });
}
