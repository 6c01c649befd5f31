// tcast_row_sinks.cuh - TensorCast casts along a row, run by a producer on the row packets it holds: the
// LayerNorm forward's warp path (llmc/kernels/layernorm.cuh, its Sink contract: lane l of a warp holds the
// row's packets 32 j + l). The element quantizers and the tile logic are the row cast kernel's
// (tcast_cast_kernels.cuh): a tile of 2 or 4 elements lies inside a packet, a tile of 8 .. 256 elements spans
// tile / 8 consecutive lanes whose group accumulations are merged with shuffle-xor, as tcast_rows_kernel merges
// them; no tile: unscaled or a fixed scale pN. So a cast here gives the bits of
// tcast_cast(y, x, rows, cols, 1, dt, seed) on the same BF16 values at the same flat row-major indices
// (doc/TCAST.md 5.3, 5.5; dev/cuda/tcast_producers.cu checks it). No statistics (a counted cast is the
// stand-alone kernel's). Quantizer Q: TcastQExp or TcastQRne (tcast_cast_device.cuh), never the general path.
//   tcast_lanes_cast         one packet cast in registers
//   tcast_lanes_cast_packet  the same, stored to a second output
//   TcastRowSink<Q>          writes cast(out) to a second output (the next GEMM's x operand)
//   TcastSitesSink<Q>        casts inp2, the residual and out in place as the kernel passes them (the boundary
//                            sites matmul_out, residual_out and layernorm_out around a residual + LayerNorm)
#pragma once

#include <stdint.h>
#include <string.h>
#include "llmc/core/cuda_common.cuh"
#include "llmc/core/cuda_utils.cuh"
#include "llmc/kernels/layernorm.cuh"                // the Sink contract, LN_WARP_PPL_MAX
#include "llmc/kernels/tcast/tcast_cast_device.cuh"   // the quantizers, tcast_cast_packet, packets

// Casts one packet along a row in place: b holds the 8 BF16 values (float32 bit patterns) at flat row-major
// indices idx0 .. idx0 + 7; tile 2 or 4: tiles inside the packet; 8 .. 256: tile / 8 consecutive lanes; -1:
// unscaled (or a fixed scale). valid false: the lane holds no packet (b all zero, the identity of every
// accumulation; b is left as it is). All 32 lanes of the warp call with the same tile (shuffles).
// Tiles of 2 and 4 take one code path (pair j = elements 2j, 2j + 1: its own group, or the first pair's of its
// quad), not tcast_packet_small_tiles' two: every group's accumulation and scale are those of the row kernel, in
// a third less code per cast (compile time: a sink kernel holds a cast per packet of the row and per site) and
// fewer live registers: with tcast_packet_small_tiles here, TcastSitesSink<TcastQExp>'s 8-packet kernel went from
// 154 registers and no spills to 128 and 44 / 156 bytes of spill stores / loads (ptxas, CUDA 13.0, sm_90).
template <class Q>
__device__ __forceinline__ void tcast_lanes_cast(const TcastKernelArgs& k, int tile, uint32_t (&b)[8], bool valid, size_t idx0) {
    TcastCounts cnt = {0u, 0u, 0u};
    if (tile == 2 || tile == 4) {
        if (!valid) return;
        typename Q::Acc acc[4];
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            acc[j] = Q::init();
            Q::add(acc[j], b[2 * j]);
            Q::add(acc[j], b[2 * j + 1]);
        }
        if (tile == 4) {
            Q::merge(acc[0], acc[1]);
            Q::merge(acc[2], acc[3]);
        }
        typename Q::Param p;
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            if (tile == 2 || j % 2 == 0) p = Q::param(k, Q::scale(k, acc[j]));
            Q::cast2(k, p, b[2 * j], b[2 * j + 1], idx0 + 2 * j, idx0 + 2 * j + 1, nullptr);
        }
        return;
    }
    typename Q::Param p;
    if (tile > 0) {
        typename Q::Acc acc = Q::init();
        #pragma unroll
        for (int e = 0; e < 8; e++) Q::add(acc, b[e]);
        for (int off = 1; off < tile / 8; off <<= 1) Q::merge(acc, Q::shfl_xor(acc, off));  // uniform: every lane
        p = Q::param(k, Q::scale(k, acc));
    } else {
        p = Q::param(k, tcast_unscaled_group());
    }
    if (!valid) return;
    tcast_cast_packet<Q, false>(k, p, b, idx0, cnt);
}

// tcast_lanes_cast, then the cast packet stored to y + idx0 (BF16, round to nearest even) where valid.
template <class Q>
__device__ __forceinline__ void tcast_lanes_cast_packet(floatX* y, const TcastKernelArgs& k, int tile, uint32_t (&b)[8], bool valid,
                                                        size_t idx0) {
    tcast_lanes_cast<Q>(k, tile, b, valid, idx0);
    if (valid) tcast_store16(y + idx0, tcast_pack8(b));
}

// The 8 BF16 values of v as float32 bit patterns (zeros where !valid: the identity of every accumulation).
__device__ __forceinline__ void tcast_x128_bits(const x128& v, bool valid, uint32_t (&b)[8]) {
    #pragma unroll
    for (int i = 0; i < 8; i++) b[i] = valid ? (uint32_t)__bfloat16_as_ushort(v[i]) << 16 : 0u;
}

// A second output cast along rows, written by the LayerNorm forward's row kernel as it stores its rows
// (layernorm.cuh Sink contract): each packet of out (valid or not, every lane of the warp together) is cast by
// tcast_lanes_cast_packet into y; out itself is not changed. Q: TcastQExp or TcastQRne.
template <class Q>
struct TcastRowSink {
    floatX* y;
    int tile;  // 2 .. 256 elements along the row, or -1 (unscaled)
    TcastKernelArgs k;
    static constexpr bool kInputs = false;
    static constexpr bool kOn = true;
    static constexpr bool kOut = true;
    static constexpr int kMaxPPL = LN_WARP_PPL_MAX;
    __device__ __forceinline__ void in2(x128&, bool, size_t) const {}
    __device__ __forceinline__ void res(x128&, bool, size_t) const {}
    __device__ __forceinline__ void packet(const x128& o, bool valid, size_t e0) const {
        uint32_t b[8];
        tcast_x128_bits(o, valid, b);
        tcast_lanes_cast_packet<Q>(y, k, tile, b, valid, e0);
    }
};

// One cast of TcastSitesSink: whether it runs (on: the same for every lane, so the branch is uniform), its
// tile along the row (2 .. 256, or -1: unscaled or a fixed scale) and its kernel constants (data type, seed).
struct TcastLaneCast {
    int on;
    int tile;
    TcastKernelArgs k;
};

// Casts v in place with c (tcast_lanes_cast on its bits, packed back to BF16 with round to nearest even, as
// the stand-alone cast stores them). Every lane of the warp together.
template <class Q>
__device__ __forceinline__ void tcast_lanes_cast_x128(const TcastLaneCast& c, x128& v, bool valid, size_t e0) {
    uint32_t b[8];
    tcast_x128_bits(v, valid, b);
    tcast_lanes_cast<Q>(c.k, c.tile, b, valid, e0);
    if (!valid) return;
    const uint4 w = tcast_pack8(b);
    int4 bits;
    memcpy(&bits, &w, sizeof(bits));
    v = x128::from_bits(bits);
}

// The boundary-site casts around a residual + LayerNorm (layernorm.cuh, FUSED, Sink contract), each on or off
// and each its own data type, tile and seed: inp2 (the matmul output x) is cast before the residual add reads it
// (and stored to x_store unless NULL; x_store may be inp2 itself: each lane stores the packet it loaded), the
// residual is cast before it is stored and normalized, out before it is stored. All three tensors are (N, C)
// with the same flat indices, cast along C. Q: TcastQRne when every cast that is on takes the RNE path, else
// TcastQExp (exact for every fast type: tcast_cast_path's two non-general paths give the same bits).
template <class Q>
struct TcastSitesSink {
    floatX* x_store;
    TcastLaneCast x_cast, res_cast, out_cast;
    static constexpr bool kInputs = true;
    static constexpr bool kOn = true;
    static constexpr bool kOut = true;
    static constexpr int kMaxPPL = 8;  // C <= 2048 (every GPT-2 width): the 16-packet kernels would double its compile time
    __device__ __forceinline__ void in2(x128& v, bool valid, size_t e0) const {
        if (!x_cast.on) return;
        tcast_lanes_cast_x128<Q>(x_cast, v, valid, e0);
        if (x_store && valid) store128(x_store + e0, v);
    }
    __device__ __forceinline__ void res(x128& v, bool valid, size_t e0) const {
        if (res_cast.on) tcast_lanes_cast_x128<Q>(res_cast, v, valid, e0);
    }
    __device__ __forceinline__ void packet(x128& v, bool valid, size_t e0) const {
        if (out_cast.on) tcast_lanes_cast_x128<Q>(out_cast, v, valid, e0);
    }
};
