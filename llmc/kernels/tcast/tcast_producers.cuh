// tcast_producers.cuh - the producers whose TensorCast casts run inside them (issue 26 item 2): sources for
// tcast_cast_from (tcast_cast.cuh, tcast_source.cuh) that compute the values the producing kernel stores,
// with the same device functions and roundings, so that producer + cast in one kernel gives the bits of
// the producer followed by the stand-alone cast (dev/cuda/tcast_producers.cu checks it):
//   tcast_src_gelu(pre, store, form)  GELU of the fc pre-activation as one of the trainer's two GELU kernels
//                                stores it (boundary.cuh BoundaryGelu: gemm_kernels.cuh's gemm_gelu_stored, the
//                                default, or gelu.cuh's gelu_stored); store: where its BF16 output goes (NULL: nowhere)
//   tcast_src_dgelu(d, pre)      GELU' product d = d * gelu_tanh'(pre), gemm_dgelu_stored, written back
//                                into d (in place: tcast_cast_from reads each element once)
//   TcastTileDgelu{d, pre}       the same product as a tile source of tcast_cast_dual (tcast_cast.cuh), stored nowhere
// Row-major (rows, cols) tensors, cols % 8 == 0, 16-byte aligned pointers.
// The LayerNorm forward is not elementwise (a row's statistics come first), so it is not a source: it casts
// its rows as it passes them, through the sink of its row kernel (layernorm.cuh; the sinks: tcast_row_sinks.cuh):
//   tcast_layernorm_cast(y, ...)        LayerNorm (or residual add + LayerNorm) and y = cast(out) along C
//   tcast_residual_layernorm_sites(...) residual add + LayerNorm with the boundary-site casts around it (the
//                                       projection output x, the residual, out), each in place along C
// Nor is the fc layer's GELU with the casts of both its input and its output (the input's group scales come
// before GELU): tcast_gelu.cuh has that row kernel, and uses tcast_src_gelu when only the output is cast.
#pragma once

#include "llmc/kernels/tcast/tcast_source.cuh"
#include "llmc/kernels/tcast/tcast_cast.cuh"       // tcast_cast, tcast_cast_path
#include "llmc/kernels/tcast/tcast_row_sinks.cuh"  // TcastRowSink, TcastSitesSink
#include "llmc/kernels/fp8/lowp_producers.cuh"     // gemm_gelu_stored, gemm_dgelu_stored
#include "llmc/kernels/gelu.cuh"                   // gelu_stored
#include "llmc/kernels/layernorm.cuh"           // layernorm_forward_sink
#include "llmc/kernels/boundary.cuh"            // BoundaryGelu

// out = GELU(pre) as the trainer's GELU kernel `form` stores it (BoundaryGelu; lowp_producers.cuh contract), also into
// store unless NULL. (The FP8 build's LowpSrcGelu is the BOUNDARY_GELU_FRONT form alone; TensorCast needs both,
// without doubling the cast kernels: the form is a launch-uniform branch, not a template argument.)
struct TcastGelu {
    const floatX* pre;
    floatX* store;
    int form;
    __device__ __forceinline__ void packet(float* v, size_t idx) const {
        const x128 p = load128cs(pre + idx);
        x128 o;
        if (form == BOUNDARY_GELU_KERNEL) {  // (one branch per packet, not a select per element of both formulas)
            #pragma unroll
            for (int k = 0; k < x128::size; k++) o[k] = gelu_stored((float)p[k]);
        } else {
            #pragma unroll
            for (int k = 0; k < x128::size; k++) o[k] = gemm_gelu_stored((float)p[k]);
        }
        #pragma unroll
        for (int k = 0; k < x128::size; k++) v[k] = (float)o[k];
        if (store) store128(store + idx, o);
    }
    bool vec_ok() const { return ((uintptr_t)pre & 15) == 0 && ((uintptr_t)store & 15) == 0; }
};

// d = d * gelu_tanh'(pre) in place, as gemm_gelu_backward_kernel stores it (lowp_producers.cuh contract).
struct TcastDgeluInPlace {
    floatX* d;
    const floatX* pre;
    __device__ __forceinline__ void packet(float* v, size_t idx) const {
        const x128 g = load128cs(d + idx);
        const x128 p = load128cs(pre + idx);
        x128 o;
        #pragma unroll
        for (int k = 0; k < x128::size; k++) {
            o[k] = gemm_dgelu_stored((float)g[k], (float)p[k]);
            v[k] = (float)o[k];
        }
        store128(d + idx, o);
    }
    bool vec_ok() const { return ((uintptr_t)d & 15) == 0 && ((uintptr_t)pre & 15) == 0; }
};

// The same GELU' product as a tile source of tcast_cast_dual (tcast_cols32.cuh: the fc layer's dY cast along both
// dimensions and summed for the bias gradient in one pass): inputs d and pre, the two BF16 products of a word pair,
// stored nowhere (nothing else reads them then).
struct TcastTileDgelu {
    const floatX* d;
    const floatX* pre;
    static constexpr int kTiles = 2;
    __device__ __forceinline__ const floatX* tile(int t) const { return t ? pre : d; }
    __device__ __forceinline__ uint32_t pair(const uint32_t (&w)[2]) const {
        const floatX lo = gemm_dgelu_stored(__uint_as_float(w[0] << 16), __uint_as_float(w[1] << 16));
        const floatX hi = gemm_dgelu_stored(__uint_as_float(w[0] & 0xFFFF0000u), __uint_as_float(w[1] & 0xFFFF0000u));
        return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
    }
    bool aligned() const { return (((uintptr_t)d | (uintptr_t)pre) & 15) == 0; }
};

typedef TcastSrcProducer<TcastGelu, false> TcastSrcGelu;
typedef TcastSrcProducer<TcastDgeluInPlace, true> TcastSrcDgelu;

// GELU of pre by the kernel form (BoundaryGelu); its BF16 values also into store unless NULL (store must not alias pre).
static inline TcastSrcGelu tcast_src_gelu(const floatX* pre, floatX* store, BoundaryGelu form = BOUNDARY_GELU_FRONT) {
    return TcastSrcGelu{TcastGelu{pre, store, (int)form}, store};
}
// GELU' product of d (holding dY W on entry, the fc layer's dY on exit) and pre.
static inline TcastSrcDgelu tcast_src_dgelu(floatX* d, const floatX* pre) { return TcastSrcDgelu{TcastDgeluInPlace{d, pre}, d}; }

// ------------------------------------------------------------------------------------------------
// LayerNorm

// Whether a cast of dt along the rows can run in a row sink (tcast_row_sinks.cuh): the exponent or RNE quantizer
// (MX, BFP, unscaled floats and ints, fixed scales; not the general path), tiles of 2 .. 256 along the row or none
// (channel, per-tensor and M:N casts need the whole slice first), no statistics (a counted cast is the
// stand-alone kernel's).
static inline bool tcast_row_sink_castable(const TcastDataType& dt, bool with_stats) {
    if (with_stats || dt.sparse_n > 0 || tcast_cast_path(dt, false) == TCAST_PATH_GENERAL) return false;
    const int tile = dt.has_scale ? dt.scale.tile : -1;
    return !dt.has_scale || (tile > 0 && tile <= 256);
}

// Whether tcast_layernorm_cast casts inside the LayerNorm kernel: the residual + LayerNorm (residual: every
// LayerNorm of the trainer but layer 0's ln1, which is not worth 8 more kernels of compile time), a type
// tcast_row_sink_castable admits, the LayerNorm's warp path (C <= 4096), 16-byte aligned y.
static inline bool tcast_layernorm_fusable(const TcastDataType& dt, int C, bool residual, bool with_stats, const floatX* y) {
    if (!residual || !tcast_row_sink_castable(dt, with_stats)) return false;
    return layernorm_forward_warp_path(C) && ((uintptr_t)y & 15) == 0;
}

// out = LayerNorm(inp1) (inp2 == NULL; residual unused) or residual = inp1 + inp2, out =
// LayerNorm(residual) (inp2 != NULL), with mean / rstd, exactly as layernorm_forward /
// fused_residual_layernorm_forward (layernorm.cuh; their shapes, requirements and errors), and y =
// cast(out) along C (dim 1) as tcast_cast(y, out, N, C, 1, dt, seed, stats, ctx) gives it after them, bit
// for bit (dev/cuda/tcast_producers.cu). One kernel where tcast_layernorm_fusable holds (out is still
// stored: the LayerNorm backward and the wgrad cast read it); else those two launches. y (N, C) must not
// alias the LayerNorm's tensors. Errors (exit): tcast_cast's shape checks.
static inline void tcast_layernorm_cast(floatX* y, floatX* residual, floatX* out, float* mean, float* rstd, const floatX* inp1,
                                        const floatX* inp2, const floatX* weight, const floatX* bias, int N, int C,
                                        const TcastDataType& dt, uint64_t seed, TcastDeviceStats* stats, TcastCastContext* ctx,
                                        cudaStream_t stream) {
    char err[256];
    if (tcast_cast_shape_ok(dt, N, C, 1, err, sizeof(err)) != 0) tcast_cast_die_(err);
    if (!tcast_layernorm_fusable(dt, C, inp2 != NULL, stats != NULL, y)) {
        if (inp2) fused_residual_layernorm_forward(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C, stream);
        else layernorm_forward(out, mean, rstd, inp1, weight, bias, N, C, stream);
        tcast_cast(y, out, N, C, 1, dt, seed, stats, ctx, stream);
        return;
    }
    const TcastKernelArgs k = tcast_kernel_args(dt, seed);
    const int tile = dt.has_scale ? dt.scale.tile : -1;
    if (tcast_cast_path(dt, false) == TCAST_PATH_RNE)
        layernorm_forward_sink<true>(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C, TcastRowSink<TcastQRne>{y, tile, k}, stream);
    else
        layernorm_forward_sink<true>(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C, TcastRowSink<TcastQExp>{y, tile, k}, stream);
}

// ------------------------------------------------------------------------------------------------
// The boundary-site casts around a residual + LayerNorm (doc/TCAST.md 5.5)

// One boundary-site cast (tcast_residual_layernorm_sites, tcast_gelu_cast): dt NULL = the site is off; the seed of
// its random bits (doc/TCAST.md 5.3); stats: NULL, or the site's --cast-stats counters (the cast then runs
// stand-alone).
struct TcastSiteCast {
    const TcastDataType* dt;
    uint64_t seed;
    TcastDeviceStats* stats;
};

// Whether tcast_residual_layernorm_sites runs as one kernel at C channels: every site that is on takes a type
// tcast_row_sink_castable admits, without statistics, and C <= 2048 (TcastSitesSink::kMaxPPL: every GPT-2 width;
// the warp path's 2049 .. 4096 are not compiled).
static inline bool tcast_residual_layernorm_sites_fusable(const TcastSiteCast& x, const TcastSiteCast& res, const TcastSiteCast& out,
                                                          int C) {
    const TcastSiteCast* c[3] = {&x, &res, &out};
    for (int i = 0; i < 3; i++)
        if (c[i]->dt && !tcast_row_sink_castable(*c[i]->dt, c[i]->stats != NULL)) return false;
    return layernorm_forward_sink_fits<TcastSitesSink<TcastQRne>>(C);
}

// The residual + LayerNorm of the forward with the casts of the three boundary sites around it, each on (dt) or
// off, each its own data type, seed and statistics, all along C (dim 1) with flat indices r * C + c:
//   x' = cast_x(x)                                 the matmul_out cast of the projection output
//   residual = round(res_in + x'), r' = cast_res(residual)   stored to `residual`
//   mean, rstd, out = LayerNorm(r') * weight + bias   as layernorm_forward computes them from a stored r'
//   out' = cast_out(out)                           stored to `out`
// The bits of today's passes, which run instead where tcast_residual_layernorm_sites_fusable says no:
// tcast_cast(x, x) (x on), fused_residual_layernorm_forward, tcast_cast(residual,
// residual) and layernorm_forward from it (res on), tcast_cast(out, out) (out on) (dev/cuda/tcast_producers.cu).
// x (N, C): store_x true: holds x' afterwards (in place, as the pass leaves it); false: afterwards x or x' (the
// fused kernel does not write it, the fallback casts it in place), for a caller to whom x is scratch.
// residual, out (N, C) and mean, rstd (N): overwritten; they must not alias each other, res_in or x.
// Requirements and errors (exit): those of fused_residual_layernorm_forward (C % 8 == 0, 16-byte aligned
// pointers) and tcast_cast's shape checks for every site that is on. One kernel when fused (6 instantiations:
// the RNE or the exponent quantizer for all three casts, times 3 row widths); ctx: tcast_cast's scratch.
static inline void tcast_residual_layernorm_sites(floatX* residual, floatX* out, float* mean, float* rstd, const floatX* res_in,
                                                  floatX* x, bool store_x, const floatX* weight, const floatX* bias, int N, int C,
                                                  const TcastSiteCast& cx, const TcastSiteCast& cr, const TcastSiteCast& co,
                                                  TcastCastContext* ctx, cudaStream_t stream) {
    char err[256];
    const TcastSiteCast* c[3] = {&cx, &cr, &co};
    for (int i = 0; i < 3; i++)
        if (c[i]->dt && tcast_cast_shape_ok(*c[i]->dt, N, C, 1, err, sizeof(err)) != 0) tcast_cast_die_(err);
    if (!tcast_residual_layernorm_sites_fusable(cx, cr, co, C)) {
        if (cx.dt) tcast_cast(x, x, N, C, 1, *cx.dt, cx.seed, cx.stats, ctx, stream);
        fused_residual_layernorm_forward(residual, out, mean, rstd, res_in, x, weight, bias, N, C, stream);
        if (cr.dt) {
            tcast_cast(residual, residual, N, C, 1, *cr.dt, cr.seed, cr.stats, ctx, stream);
            layernorm_forward(out, mean, rstd, residual, weight, bias, N, C, stream);
        }
        if (co.dt) tcast_cast(out, out, N, C, 1, *co.dt, co.seed, co.stats, ctx, stream);
        return;
    }
    TcastLaneCast lc[3];
    bool rne = true;  // every cast that is on takes the RNE path: TcastQRne, else the exponent path for all
    for (int i = 0; i < 3; i++) {
        memset(&lc[i], 0, sizeof(lc[i]));
        lc[i].tile = -1;
        if (!c[i]->dt) continue;
        const TcastDataType& dt = *c[i]->dt;
        lc[i].on = 1;
        lc[i].tile = dt.has_scale ? dt.scale.tile : -1;
        lc[i].k = tcast_kernel_args(dt, c[i]->seed);
        rne = rne && tcast_cast_path(dt, false) == TCAST_PATH_RNE;
    }
    floatX* xs = store_x ? x : NULL;
    if (rne)
        layernorm_forward_sink<true>(residual, out, mean, rstd, res_in, x, weight, bias, N, C, TcastSitesSink<TcastQRne>{xs, lc[0], lc[1], lc[2]},
                                     stream);
    else
        layernorm_forward_sink<true>(residual, out, mean, rstd, res_in, x, weight, bias, N, C, TcastSitesSink<TcastQExp>{xs, lc[0], lc[1], lc[2]},
                                     stream);
}
