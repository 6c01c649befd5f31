// attention_ptx.cuh - the inline-PTX wrappers (sm_80+) the tensor-core attention kernels are built
// from: cp.async global->shared copies (zero-filling past the end), ldmatrix fragment loads, the
// mma.sync.m16n8k16 tile product with fp32 accumulation, exp2 on the SFU, and packing fp32 pairs to
// 16-bit floatX and back. One instruction each, so that the kernels in attention_flash_*.cuh read as
// the algorithm and the instruction choices sit in one place.
#pragma once

#include <stdint.h>
#include <type_traits>
#include "llmc/core/cuda_common.cuh"


__device__ __forceinline__ uint32_t attn_smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy that bypasses L1 (each tile is read once per CTA). With valid = false
// no global byte is read and the 16 destination bytes are zero-filled: that is how rows past T enter
// the tiles as finite zeros.
__device__ __forceinline__ void attn_cp_async16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void attn_cp_async4(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void attn_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void attn_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it
// (thread l holds row l/4, columns 2(l%4), 2(l%4)+1; with .trans the transposed matrix instead).
__device__ __forceinline__ void attn_ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void attn_ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// The transpose of one 8x8 b16 matrix held in that fragment layout (thread l: row l/4, columns 2(l%4), 2(l%4)+1), in
// the same layout: movmatrix.sync.aligned.m8n8.trans.b16 (PTX ISA, warp-level matrix instructions: movmatrix; sm_75 and later).
__device__ __forceinline__ uint32_t attn_movmatrix_trans(uint32_t a) {
    uint32_t d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
    return d;
}

// d += a * b for one 16x8x16 tile, fp32 accumulators; T (bf16 or half) picks the operand type.
template <typename T>
__device__ __forceinline__ void attn_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same<T, half>::value) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        static_assert(std::is_same<T, __nv_bfloat16>::value, "tensor-core attention needs bf16 or fp16");
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// 2^x on the SFU. Accuracy ~2 ulp, plenty for probabilities rounded to 16 bits; ex2(-inf) = 0.
__device__ __forceinline__ float attn_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two floats rounded to a packed pair of T; `lo` lands in the low half (the lower column index).
template <typename T>
__device__ __forceinline__ uint32_t attn_pack(float lo, float hi) {
    uint32_t r;
    if constexpr (std::is_same<T, half>::value) {
        __half2 v = __floats2half2_rn(lo, hi);
        r = *reinterpret_cast<uint32_t*>(&v);
    } else {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        r = *reinterpret_cast<uint32_t*>(&v);
    }
    return r;
}
template <typename T>
__device__ __forceinline__ float2 attn_unpack(uint32_t u) {
    if constexpr (std::is_same<T, half>::value) {
        return __half22float2(*reinterpret_cast<__half2*>(&u));
    } else {
        return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
    }
}

#define ATTN_LOG2E 1.4426950408889634f
