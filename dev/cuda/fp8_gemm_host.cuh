// fp8_gemm_host.cuh - host side the CUTLASS FP8 GEMM harnesses share (dev/cuda/cutlass_fp8.cu, the fc forward;
// dev/cuda/cutlass_fp8_dgelu.cu, the fcproj dgrad with GELU'): a thread pool loop, bit helpers, random FP8 operands
// (quantized Gaussians or uniformly drawn finite codes) and the float64 reference of their product on sampled rows.
// Include after dev/cuda/harness.cuh.
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <thread>
#include <vector>
#include <cuda_bf16.h>
#include "llmc/numerics/fp8.h"

// f(i) for i < count on up to 64 host threads (disjoint contiguous ranges).
template <typename F>
static void parallel_for(size_t count, F f) {
    const size_t nt = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), 64));
    std::vector<std::thread> pool;
    for (size_t t = 0; t < nt; t++) {
        const size_t lo = count * t / nt, hi = count * (t + 1) / nt;
        if (lo < hi) pool.emplace_back([=, &f] { for (size_t i = lo; i < hi; i++) f(i); });
    }
    for (auto& th : pool) th.join();
}

static const size_t FP8H_CHUNK = 1 << 16;  // elements per parallel_for work item

static float f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bf16_value(__nv_bfloat16 v) { uint16_t b; memcpy(&b, &v, 2); return f32_from_bits((uint32_t)b << 16); }
static uint16_t bf16_bits(__nv_bfloat16 v) { uint16_t b; memcpy(&b, &v, 2); return b; }

// BF16 of x, round to nearest even (finite x)
static float bf16_rne(double x) { return __bfloat162float(__float2bfloat16_rn((float)x)); }

// Steps between two FP8 codes along the number line (sign-magnitude codes, no NaN): same sign: the distance of the
// magnitudes' codes; opposite signs: through zero.
static int code_steps(uint8_t a, uint8_t b) {
    const int ma = a & 0x7F, mb = b & 0x7F;
    if ((a & 0x80) == (b & 0x80)) return abs(ma - mb);
    return ma + mb;
}

// codes (n) = the format's RNE codes of N(0, std) samples scaled by the power of two current scaling takes from their
// amax (llmc/numerics/fp8.h, as the trainer does); *ds = the DEQUANT scale (1 / that power of two).
static void gaussian_codes(std::vector<uint8_t>& codes, float* ds, size_t n, uint64_t seed, float std, FP8Format fmt) {
    std::vector<float> v(n);
    const size_t chunks = ceil_div_sz(n, FP8H_CHUNK);
    std::vector<float> part(chunks, 0.0f);
    parallel_for(chunks, [&](size_t c) {
        HostRng r(seed * 1000003ull + c);
        float m = 0.0f;
        for (size_t i = c * FP8H_CHUNK; i < std::min(n, (c + 1) * FP8H_CHUNK); i++) {
            v[i] = std * r.normal();
            m = std::max(m, fabsf(v[i]));
        }
        part[c] = m;
    });
    float amax = 0.0f;
    for (float m : part) amax = std::max(amax, m);
    const float s = fp8_scale_pow2_from_amax(fmt, amax, 0);
    *ds = 1.0f / s;
    codes.resize(n);
    parallel_for(chunks, [&](size_t c) {
        for (size_t i = c * FP8H_CHUNK; i < std::min(n, (c + 1) * FP8H_CHUNK); i++) codes[i] = fp8_encode_rne(fmt, v[i] * s, 1);
    });
}

// codes (n) drawn uniformly from the format's finite codes (subnormals, the largest values and zeros of both signs;
// no NaN or infinity).
static void uniform_codes(std::vector<uint8_t>& codes, size_t n, uint64_t seed, FP8Format fmt) {
    codes.resize(n);
    parallel_for(ceil_div_sz(n, FP8H_CHUNK), [&](size_t c) {
        HostRng r(seed * 7919ull + c);
        for (size_t i = c * FP8H_CHUNK; i < std::min(n, (c + 1) * FP8H_CHUNK); i++) {
            uint8_t b;
            do b = (uint8_t)(r.u32() >> 24); while (!isfinite(fp8_decode(fmt, b)));
            codes[i] = b;
        }
    });
}

// The float64 reference of out (M, N) = a_ds b_ds A · Bᵀ (+ bias per column) on sampled rows, A (M, K) and B (N, K)
// row-major FP8 codes of formats fa / fb decoded exactly: z[i * N + j] for row rows[i], and S = a_ds b_ds Σ_k |a b| +
// |bias| (the scale of the accumulation error). Rows: pick_rows (all rows of small problems, else 128 random rows with
// the first and the last).
struct GemmRef {
    std::vector<int> rows;
    std::vector<double> z, S;  // rows.size() x N
};

static GemmRef gemm_reference(const std::vector<uint8_t>& a, FP8Format fa, float a_ds, const std::vector<uint8_t>& b, FP8Format fb,
                              float b_ds, const std::vector<float>& bias, int M, int K, int N, uint64_t seed) {
    GemmRef r;
    r.rows = pick_rows(M, (double)K * N, seed, 128, 2e8);
    double deca[256], decb[256];
    for (int c = 0; c < 256; c++) {
        const float va = fp8_decode(fa, (uint8_t)c), vb = fp8_decode(fb, (uint8_t)c);
        deca[c] = isfinite(va) ? (double)va : 0.0;
        decb[c] = isfinite(vb) ? (double)vb : 0.0;
    }
    std::vector<double> bd((size_t)N * K);
    parallel_for(N, [&](size_t j) { for (int k = 0; k < K; k++) bd[j * K + k] = decb[b[j * K + k]]; });
    const double sab = (double)a_ds * (double)b_ds;  // powers of two: the kernels' fp32 product is exact
    r.z.resize(r.rows.size() * N);
    r.S.resize(r.rows.size() * N);
    parallel_for(r.rows.size(), [&](size_t i) {
        std::vector<double> ad(K);
        for (int k = 0; k < K; k++) ad[k] = deca[a[(size_t)r.rows[i] * K + k]];
        for (int j = 0; j < N; j++) {
            const double* br = &bd[(size_t)j * K];
            double acc = 0, sabs = 0;
            for (int k = 0; k < K; k++) {
                const double p = ad[k] * br[k];
                acc += p;
                sabs += fabs(p);
            }
            const double bj = bias.empty() ? 0.0 : (double)bias[j];
            r.z[i * N + j] = sab * acc + bj;
            r.S[i * N + j] = sab * sabs + fabs(bj);
        }
    });
    return r;
}
