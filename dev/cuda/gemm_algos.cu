// gemm_algos.cu - how much faster than cuBLASLt's first heuristic choice each GEMM of a GPT-2 training step
// can run, and whether the faster algorithms give the same bits (issue 25: the d12 step's GEMMs run at ~60% of
// the BF16 peak with the heuristic's first answer).
//
// Build and run (from the repository root, BF16 build):
//   make build/bf16/dev/gemm_algos && build/bf16/dev/gemm_algos [--check-only] [--small]
//
// For each GEMM the trainer issues per step (llmc/kernels/gemm/gemm.cuh: forward with BIAS or GELU_AUX_BIAS,
// dinp with or without DGELU, dweight accumulating with beta = 1; the LM head's three; d12 B=64 and d24 B=32,
// T = 1024) the harness asks cuBLASLt for up to 32 algorithms under the trainer's own preferences (32 MiB
// workspace, split-K only with fp32 partials: CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, compute type 32F), runs
// each one on the same random inputs (outputs poisoned with 0xFF before each run) and compares its output bits
// with the first algorithm's; then times the bit-identical ones (median of 20 after 3 warm-ups). The table gives
// per GEMM the heuristic's time, the fastest bit-identical algorithm's time and configuration, and the number
// of algorithms whose bits differ; the last table sums them over the step with each GEMM's count per step.
// Checks (the exit status): every algorithm's output is finite (poison overwritten), the first algorithm is
// deterministic (two runs, same bits), and the first algorithm's result agrees with a float64 reference on 16
// sampled output elements within the BF16 tolerance. Same GPU model and toolkit: cuBLAS documents bitwise
// reproducibility for a fixed algorithm there.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <algorithm>
#include <vector>
#include "dev/cuda/harness.cuh"
#include "llmc/kernels/gemm/gemm.cuh"

static const int kMaxAlgos = 32;

// One GEMM as the trainer issues it (column-major view, see gemm.cuh "cuBLASLt mapping"):
// D (m x n) = op(A) op(B) [+ D], A stored (transa == N ? m x k : k x m), B (transb == N ? k x n : n x k).
struct GemmCase {
    const char* name;
    int m, n, k;
    int32_t transa, transb;
    uint32_t epilogue;
    bool accumulate;
    int per_step;  // how many times a training step runs it
};

static std::vector<GemmCase> model_cases(int L, int C, int N, int Vp) {
    const int32_t T_ = CUBLAS_OP_T, N_ = CUBLAS_OP_N;
    const bool dgelu = gemm_dgelu_fused_for(4 * C);
    return {
        {"fwd qkv", 3 * C, N, C, T_, N_, CUBLASLT_EPILOGUE_BIAS, false, L},
        {"fwd attproj", C, N, C, T_, N_, CUBLASLT_EPILOGUE_BIAS, false, L},
        {"fwd fc+gelu", 4 * C, N, C, T_, N_, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false, L},
        {"fwd fcproj", C, N, 4 * C, T_, N_, CUBLASLT_EPILOGUE_BIAS, false, L},
        {"fwd lm head", Vp, N, C, T_, N_, CUBLASLT_EPILOGUE_DEFAULT, false, 1},
        {"dinp qkv", C, N, 3 * C, N_, N_, CUBLASLT_EPILOGUE_DEFAULT, false, L},
        {"dinp attproj", C, N, C, N_, N_, CUBLASLT_EPILOGUE_DEFAULT, false, L},
        {"dinp fc", C, N, 4 * C, N_, N_, CUBLASLT_EPILOGUE_DEFAULT, false, L},
        {dgelu ? "dinp fcproj+dgelu" : "dinp fcproj", 4 * C, N, C, N_, N_,
         dgelu ? (uint32_t)CUBLASLT_EPILOGUE_DGELU : (uint32_t)CUBLASLT_EPILOGUE_DEFAULT, false, L},
        {"dinp lm head", C, N, Vp, N_, N_, CUBLASLT_EPILOGUE_DEFAULT, false, 1},
        {"dW qkv", C, 3 * C, N, N_, T_, CUBLASLT_EPILOGUE_DEFAULT, true, L},
        {"dW attproj", C, C, N, N_, T_, CUBLASLT_EPILOGUE_DEFAULT, true, L},
        {"dW fc", C, 4 * C, N, N_, T_, CUBLASLT_EPILOGUE_DEFAULT, true, L},
        {"dW fcproj", 4 * C, C, N, N_, T_, CUBLASLT_EPILOGUE_DEFAULT, true, L},
        {"dW lm head", C, Vp, N, N_, T_, CUBLASLT_EPILOGUE_DEFAULT, true, 1},
    };
}

struct AlgoResult {
    float ms;
    bool same_bits;
    GemmAlgoConfig cfg;
    int cluster;
    size_t workspace;
};

// p[i] = scale * U(-1, 1) from random_u32(seed, i) (llmc/core/cuda_utils.cuh), rounded to floatX.
static __global__ void fill_kernel(floatX* p, size_t n, uint64_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (floatX)(scale * ((float)(random_u32(seed, i) >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f));
}
static void fill(floatX* p, size_t n, uint64_t seed, float scale) {
    fill_kernel<<<1024, 256>>>(p, n, seed, scale);
    cudaCheckLaunch();
}

// count elements starting at device p, `stride` elements apart, as floats on the host.
static std::vector<float> fetch_strided(const floatX* p, int count, size_t stride) {
    std::vector<floatX> raw(count);
    cudaCheck(cudaMemcpy2D(raw.data(), sizeof(floatX), p, stride * sizeof(floatX), sizeof(floatX), count, cudaMemcpyDeviceToHost));
    std::vector<float> v(count);
    for (int i = 0; i < count; i++) v[i] = (float)raw[i];
    return v;
}

// Runs one GEMM case: enumerate, compare, time. Returns the per-algorithm results (index 0 = heuristic's first).
static std::vector<AlgoResult> run_case(cublasLtHandle_t handle, void* workspace, size_t ws_size, const GemmCase& g,
                                        bool timing, Tally& tally, uint64_t seed) {
    const size_t a_n = (size_t)g.m * g.k, b_n = (size_t)g.k * g.n, d_n = (size_t)g.m * g.n;
    const bool has_aux = gemm_epilogue_has_aux(g.epilogue);
    DeviceBuffer<floatX> A(a_n), B(b_n), D(d_n), D0(d_n), Dinit(g.accumulate ? d_n : 1), bias(g.m), aux(has_aux ? d_n : 1);
    fill(A.ptr, a_n, seed, 1.0f);
    fill(B.ptr, b_n, seed + 1, 1.0f);
    fill(bias.ptr, g.m, seed + 2, 0.5f);
    fill(aux.ptr, aux.n, seed + 3, 2.0f);  // DGELU reads it as the pre-activation
    fill(Dinit.ptr, Dinit.n, seed + 4, 1.0f);

    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &g.transa, sizeof(g.transa)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &g.transb, sizeof(g.transb)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &g.epilogue, sizeof(g.epilogue)));
    if (gemm_epilogue_has_bias(g.epilogue)) {
        const void* bp = bias.ptr;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
    }
    if (has_aux) {
        const void* ap = aux.ptr;
        const int64_t ld = g.m;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap, sizeof(ap)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    cublasLtMatrixLayout_t la, lb, ld;
    gemm_layout(&la, g.transa, g.m, g.k);
    gemm_layout(&lb, g.transb, g.k, g.n);
    gemm_layout(&ld, CUBLAS_OP_N, g.m, g.n);

    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = ws_size;
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)));
    cublasLtMatmulHeuristicResult_t res[kMaxAlgos];
    int count = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld, ld, pref, kMaxAlgos, res, &count));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));

    const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
    auto matmul = [&](const cublasLtMatmulAlgo_t* algo, floatX* out) {
        cublasCheck(cublasLtMatmul(handle, desc, &alpha, A.ptr, la, B.ptr, lb, &beta, out, ld, out, ld, algo, workspace,
                                   ws_size, 0));
    };
    // checked runs: from the same start (dweight: Dinit; else poisoned with 0xFF, NaN in bf16)
    auto run = [&](const cublasLtMatmulAlgo_t* algo, floatX* out) {
        if (g.accumulate) cudaCheck(cudaMemcpyAsync(out, Dinit.ptr, d_n * sizeof(floatX), cudaMemcpyDeviceToDevice, 0));
        else cudaCheck(cudaMemsetAsync(out, 0xFF, d_n * sizeof(floatX), 0));
        matmul(algo, out);
    };
    std::vector<AlgoResult> out;
    for (int i = 0; i < count; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        AlgoResult r;
        r.cfg = gemm_algo_config(&res[i].algo);
        size_t w = 0;
        r.cluster = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &r.cluster, sizeof(r.cluster), &w);
        r.workspace = res[i].workspaceSize;
        floatX* dst = out.empty() ? D0.ptr : D.ptr;
        run(&res[i].algo, dst);
        cudaCheck(cudaDeviceSynchronize());
        const size_t bad = device_nonfinite(dst, d_n);
        if (bad) {
            char name[96];
            snprintf(name, sizeof(name), "%s algo %d finite", g.name, i);
            tally.check(name, false);
        }
        if (out.empty()) {
            run(&res[i].algo, D.ptr);
            cudaCheck(cudaDeviceSynchronize());
            char name[96];
            snprintf(name, sizeof(name), "%s heuristic deterministic", g.name);
            tally.check(name, device_mismatch(D.ptr, D0.ptr, d_n * sizeof(floatX)) == 0);
            r.same_bits = true;
        } else {
            r.same_bits = device_mismatch(D.ptr, D0.ptr, d_n * sizeof(floatX)) == 0;
        }
        // timed: the GEMM alone (dweight keeps accumulating into D: the values stay far from overflow)
        r.ms = (timing && r.same_bits) ? time_median_ms([&] { matmul(&res[i].algo, D.ptr); }) : 0.0f;
        out.push_back(r);
    }

    // float64 reference on 16 sampled output elements of the first algorithm (plain product, bias, GELU forms).
    if (!out.empty()) {
        const std::vector<float> hbias = download(bias);
        HostRng rng(seed + 5);
        double worst = 0.0;
        for (int s = 0; s < 16; s++) {
            const int i = (int)(rng.u32() % (uint32_t)g.m), j = (int)(rng.u32() % (uint32_t)g.n);
            // row i of op(A) and column j of op(B) (column-major storage: element (r, c) of an R-row matrix at c*R + r)
            const std::vector<float> arow = g.transa == CUBLAS_OP_N ? fetch_strided(A.ptr + i, g.k, g.m) : fetch_strided(A.ptr + (size_t)i * g.k, g.k, 1);
            const std::vector<float> bcol = g.transb == CUBLAS_OP_N ? fetch_strided(B.ptr + (size_t)j * g.k, g.k, 1) : fetch_strided(B.ptr + j, g.k, g.n);
            double acc = 0.0;
            for (int p = 0; p < g.k; p++) acc += (double)arow[p] * bcol[p];
            const size_t e = (size_t)j * g.m + i;
            if (g.accumulate) acc += fetch_strided(Dinit.ptr + e, 1, 1)[0];
            if (gemm_epilogue_has_bias(g.epilogue)) acc += hbias[i];
            if (g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
                acc = 0.5 * acc * (1.0 + tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
            if (g.epilogue == CUBLASLT_EPILOGUE_DGELU) {
                const double x = fetch_strided(aux.ptr + e, 1, 1)[0], u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
                acc *= 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
            }
            // error relative to the scale of the sum (sqrt(k) for unit inputs): a rounding of the output
            const double err = fabs(fetch_strided(D0.ptr + e, 1, 1)[0] - acc) / std::max(fabs(acc), sqrt((double)g.k) * 0.1);
            worst = std::max(worst, err);
        }
        char name[96];
        snprintf(name, sizeof(name), "%s vs float64 (16 samples)", g.name);
        CompareResult cr;
        memset(&cr, 0, sizeof(cr));
        cr.rel = worst;
        cr.ok = worst <= 2e-2;
        tally.check(name, cr, 2e-2);
    }
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(ld));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    return out;
}

int main(int argc, char** argv) {
    bool small = false;
    const bool timing = harness_parse_args(argc, argv, "--small", &small);
    const cudaDeviceProp prop = harness_device();
    printf("gemm_algos: %s, cuBLASLt %zu, %s\n", prop.name, cublasLtGetVersion(), PRECISION_MODE_NAME);
    cublasLtHandle_t handle;
    cublasCheck(cublasLtCreate(&handle));
    DeviceBuffer<char> workspace(GEMM_WORKSPACE_BYTES);
    Tally tally;

    struct Model { const char* name; int L, C, B; };
    std::vector<Model> models = {{"d12 B=64", 12, 768, 64}, {"d24 B=32", 24, 1024, 32}};
    if (small) models = {{"d2 B=4", 2, 256, 4}};
    const int T = small ? 256 : 1024, Vp = 50304;
    struct Sum { double heur = 0, best = 0; };
    std::vector<Sum> sums(models.size());
    for (size_t mi = 0; mi < models.size(); mi++) {
        const Model& md = models[mi];
        printf("\n== %s (N = %d) ==\n", md.name, md.B * T);
        printf("%-20s %6s %6s %9s %9s %6s %5s  %s\n", "GEMM", "algos", "diff", "heur ms", "best ms", "gain", "idx",
               "best: id tile stages splitK cluster (heuristic's)");
        for (const GemmCase& g : model_cases(md.L, md.C, md.B * T, Vp)) {
            std::vector<AlgoResult> r = run_case(handle, workspace.ptr, GEMM_WORKSPACE_BYTES, g, timing, tally, 1000 + mi * 100);
            if (r.empty()) {
                printf("%-20s no algorithm\n", g.name);
                tally.check(g.name, false);
                continue;
            }
            int diff = 0, best = 0;
            for (size_t i = 0; i < r.size(); i++) {
                if (!r[i].same_bits) diff++;
                else if (r[i].ms > 0 && r[i].ms < r[best].ms) best = (int)i;
            }
            const AlgoResult &h = r[0], &b = r[best];
            printf("%-20s %6zu %6d %9.4f %9.4f %5.1f%% %5d  %d %d %d %d %d (%d %d %d %d %d)\n", g.name, r.size(), diff, h.ms, b.ms,
                   h.ms > 0 ? 100.0 * (h.ms - b.ms) / h.ms : 0.0, best, b.cfg.id, b.cfg.tile, b.cfg.stages, b.cfg.splitk, b.cluster,
                   h.cfg.id, h.cfg.tile, h.cfg.stages, h.cfg.splitk, h.cluster);
            sums[mi].heur += h.ms * g.per_step;
            sums[mi].best += b.ms * g.per_step;
        }
    }
    if (timing) {
        printf("\nper training step (each GEMM x its count per step), bit-identical algorithms only:\n");
        printf("%-10s %12s %12s %8s\n", "model", "heuristic ms", "best ms", "saved");
        for (size_t mi = 0; mi < models.size(); mi++)
            printf("%-10s %12.2f %12.2f %7.2f\n", models[mi].name, sums[mi].heur, sums[mi].best, sums[mi].heur - sums[mi].best);
    }
    cublasCheck(cublasLtDestroy(handle));
    return tally.finish();
}
