// fp8_epilogues.cu - can cuBLASLt's FP8 GEMMs carry the work the FP8 backend does in separate passes?
//
// Build and run (from the repository root):
//   make cuda-dev && build/bf16/dev/fp8_epilogues          (checks, then the timing table)
//   build/bf16/dev/fp8_epilogues --check-only               (checks only, small shapes)
//
// The FP8 backend (llmc/modes/lowp/gemm_lowp.cuh) runs GELU and dGELU as separate kernels and takes the amax of
// the attention output and its gradient in separate passes (doc/TCFP12.md "Where the time goes"). This
// harness asks cuBLASLt (cublasLtMatmul, E4M3 x E4M3 forward and E5M2 x E4M3 dgrad, fp32 compute, BF16
// D) for the epilogues that would remove those passes, and times them on the d24 MLP shape:
//   forward:  CUBLASLT_EPILOGUE_BIAS, GELU_AUX_BIAS (D = GELU(XWᵀ + b), aux = the pre-activation), GELU_BIAS,
//             each with and without CUBLASLT_MATMUL_DESC_AMAX_D_POINTER (max |D| of a BF16 D);
//   dgrad:    DEFAULT and DGELU (D = (dY W) * GELU'(aux)), with and without AMAX_D.
// The BF16 forward (BIAS, GELU_AUX_BIAS) and dgrad (DEFAULT, DGELU) are timed as the baseline.
// Status codes are results, not errors: SUCCESS or NOT_SUPPORTED / INVALID_VALUE (cuBLASLt's documented
// answer for an unsupported combination) are accepted, anything else fails the run. Where a combination
// runs, its output is checked against the plain GEMM of the same operands computed by cuBLASLt:
//   GELU_AUX_BIAS: aux against the BIAS output, D against GELU(aux) on the host (tanh form, fp64);
//   DGELU: D against (plain dgrad output) * GELU'(aux) on the host;
//   AMAX_D: against max |D| on the host, within one BF16 rounding.
// Norm-relative tolerance 1e-2 (a few BF16 roundings; a wrong epilogue gives O(1)).
// Layout (cuBLASLt column-major, "TN" as FP8 requires): A = weight codes (K x OC, transposed), B = the
// activation / gradient codes (K x N), D = (OC x N), i.e. row-major (N, OC) as the trainer stores it.

#include <cuda_fp8.h>
#include <cublasLt.h>
#include <string>
#include "dev/cuda/harness.cuh"

static cublasLtHandle_t g_lt;
static void* g_ws;
static const size_t WS_BYTES = 64u << 20;

static void lt_check(cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "error: fp8_epilogues: %s: %s\n", what, cublasLtGetStatusName(st));
        exit(EXIT_FAILURE);
    }
}

struct Operands {
    int N, K, OC;  // D (OC x N col-major) = A (K x OC)ᵀ · B (K x N)
    DeviceBuffer<uint8_t> a8, b8;
    DeviceBuffer<__nv_bfloat16> a16, b16, bias, aux, d, d0;
    DeviceBuffer<float> scale;  // 1.0, the dequantization scale of both operands (codes hold the values)
    DeviceBuffer<float> amax;
    Operands(int n, int k, int oc, uint64_t seed)
        : N(n), K(k), OC(oc), a8((size_t)k * oc), b8((size_t)k * n), a16((size_t)k * oc), b16((size_t)k * n), bias(oc),
          aux((size_t)oc * n), d((size_t)oc * n), d0((size_t)oc * n), scale(1), amax(1) {
        // A ~ N(0, 0.5^2) in E4M3; B ~ N(0, 1) in E4M3 (forward) or E5M2 (dgrad): B's kind is chosen per call,
        // so both code sets come from the same floats and the BF16 copies hold exactly the E4M3 values.
        std::vector<float> a = random_normal((size_t)k * oc, seed, 0.5f), b = random_normal((size_t)k * n, seed + 1);
        std::vector<uint8_t> ha(a.size()), hb(b.size());
        for (size_t i = 0; i < a.size(); i++) { __nv_fp8_e4m3 q(a[i]); ha[i] = q.__x; a[i] = (float)q; }
        for (size_t i = 0; i < b.size(); i++) { __nv_fp8_e4m3 q(b[i]); hb[i] = q.__x; b[i] = (float)q; }
        cudaCheck(cudaMemcpy(a8.ptr, ha.data(), ha.size(), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(b8.ptr, hb.data(), hb.size(), cudaMemcpyHostToDevice));
        upload(a16, a);
        upload(b16, b);
        upload(bias, random_normal(oc, seed + 2, 0.5f));
        upload(aux, random_normal((size_t)oc * n, seed + 3));  // the dgrad's pre-activation input
        const float one = 1.0f;
        cudaCheck(cudaMemcpy(scale.ptr, &one, sizeof(one), cudaMemcpyHostToDevice));
    }
};

struct Case {
    const char* name;
    bool fp8, dgrad;
    cublasLtEpilogue_t epi;
    bool amax;
};

// One cublasLtMatmul of case c into o.d (aux: written by GELU_AUX_BIAS, read by DGELU). Returns the status of
// the first failing call (heuristic or matmul); SUCCESS when it ran. time_ms >= 0: also the median time.
static cublasStatus_t run_case(const Case& c, Operands& o, float* time_ms) {
    cublasLtMatmulDesc_t desc;
    lt_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)), "TRANSA");
    lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)), "TRANSB");
    lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epi, sizeof(c.epi)), "EPILOGUE");
    if (c.fp8) {
        // (one 16-byte aligned 1.0 for both: cuBLASLt refuses FP8 GEMMs whose scale pointers are not)
        const float* sa = o.scale.ptr;
        const float* sb = o.scale.ptr;
        lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa)), "A_SCALE");
        lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb)), "B_SCALE");
    }
    const bool has_bias = c.epi == CUBLASLT_EPILOGUE_BIAS || c.epi == CUBLASLT_EPILOGUE_GELU_BIAS || c.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool has_aux = c.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || c.epi == CUBLASLT_EPILOGUE_DGELU;
    if (has_bias) {
        const void* b = o.bias.ptr;
        const cudaDataType_t bt = CUDA_R_16BF;
        lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof(b)), "BIAS_POINTER");
        lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)), "BIAS_DATA_TYPE");
    }
    if (has_aux) {
        void* aux = o.aux.ptr;
        const int64_t ld = o.OC;
        lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)), "AUX_POINTER");
        lt_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)), "AUX_LD");
    }
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (c.amax) {
        void* p = o.amax.ptr;
        st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &p, sizeof(p));
    }
    const cudaDataType_t at = c.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const cudaDataType_t bt = c.fp8 ? (c.dgrad ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3) : CUDA_R_16BF;
    const void* A = c.fp8 ? (const void*)o.a8.ptr : (const void*)o.a16.ptr;
    const void* B = c.fp8 ? (const void*)o.b8.ptr : (const void*)o.b16.ptr;
    cublasLtMatrixLayout_t la, lb, ld;
    lt_check(cublasLtMatrixLayoutCreate(&la, at, o.K, o.OC, o.K), "layout A");
    lt_check(cublasLtMatrixLayoutCreate(&lb, bt, o.K, o.N, o.K), "layout B");
    lt_check(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, o.OC, o.N, o.OC), "layout D");
    cublasLtMatmulPreference_t pref;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS_BYTES, sizeof(WS_BYTES)), "workspace");
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulAlgoGetHeuristic(g_lt, desc, la, lb, ld, ld, pref, 1, &res, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;
    const float alpha = 1.0f, beta = 0.0f;
    auto launch = [&] { return cublasLtMatmul(g_lt, desc, &alpha, A, la, B, lb, &beta, o.d.ptr, ld, o.d.ptr, ld, &res.algo, g_ws, WS_BYTES, 0); };
    if (st == CUBLAS_STATUS_SUCCESS) {
        o.d.poison();
        cudaCheck(cudaMemset(o.amax.ptr, 0, sizeof(float)));
        st = launch();
        cudaCheck(cudaDeviceSynchronize());
    }
    if (st == CUBLAS_STATUS_SUCCESS && time_ms) *time_ms = time_median_ms([&] { lt_check(launch(), "cublasLtMatmul"); }, 3, 20);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return st;
}

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
static double gelu_grad_ref(double x) {
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

// Checks of one case that ran (see the header); o.d holds its output.
static void check_case(Tally& tally, const Case& c, Operands& o) {
    const std::vector<float> d = download(o.d);
    std::string name = std::string(c.name);
    if (c.amax) {
        float host = 0.0f, dev = 0.0f;
        for (float v : d) host = std::max(host, fabsf(v));
        cudaCheck(cudaMemcpy(&dev, o.amax.ptr, sizeof(float), cudaMemcpyDeviceToHost));
        // (cuBLASLt may take the max before D is rounded to BF16: within one BF16 rounding of the host's)
        tally.check((name + ": amax(D)").c_str(), fabsf(dev - host) <= 0x1p-8f * host);
    }
    if (c.epi == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || c.epi == CUBLASLT_EPILOGUE_DGELU) {
        const Case plain = {"plain", c.fp8, c.dgrad, c.dgrad ? CUBLASLT_EPILOGUE_DEFAULT : CUBLASLT_EPILOGUE_BIAS, false};
        const std::vector<float> aux = download(o.aux);
        std::swap(o.d.ptr, o.d0.ptr);  // the plain product into d0
        lt_check(run_case(plain, o, nullptr), "the plain GEMM");
        std::swap(o.d.ptr, o.d0.ptr);
        const std::vector<float> d0 = download(o.d0);
        std::vector<double> ref(d.size());
        if (c.dgrad) {
            for (size_t i = 0; i < d.size(); i++) ref[i] = (double)d0[i] * gelu_grad_ref(aux[i]);
        } else {
            std::vector<double> aux_ref(d0.begin(), d0.end());
            tally.check((name + ": aux = pre-activation").c_str(), compare(aux, aux_ref, 1e-2), 1e-2);
            for (size_t i = 0; i < d.size(); i++) ref[i] = gelu_ref(aux[i]);
        }
        tally.check((name + ": D").c_str(), compare(d, ref, 1e-2), 1e-2);
    }
}

int main(int argc, char** argv) {
    const bool timing = harness_parse_args(argc, argv);
    const cudaDeviceProp prop = harness_device();
    printf("fp8_epilogues on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    Tally tally;
    if (prop.major * 10 + prop.minor < 89) {
        printf("FP8 GEMMs need compute capability 8.9 or newer: nothing to probe\n");
        return tally.finish();
    }
    lt_check(cublasLtCreate(&g_lt), "cublasLtCreate");
    cudaCheck(cudaMalloc(&g_ws, WS_BYTES));
    const Case cases[] = {
        {"bf16 fwd bias", false, false, CUBLASLT_EPILOGUE_BIAS, false},
        {"bf16 fwd gelu_aux_bias", false, false, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false},
        {"fp8 fwd bias", true, false, CUBLASLT_EPILOGUE_BIAS, false},
        {"fp8 fwd bias + amax_d", true, false, CUBLASLT_EPILOGUE_BIAS, true},
        {"fp8 fwd gelu_aux_bias", true, false, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, false},
        {"fp8 fwd gelu_aux_bias + amax_d", true, false, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true},
        {"fp8 fwd gelu_bias + amax_d", true, false, CUBLASLT_EPILOGUE_GELU_BIAS, true},
        {"bf16 dgrad", false, true, CUBLASLT_EPILOGUE_DEFAULT, false},
        {"bf16 dgrad dgelu", false, true, CUBLASLT_EPILOGUE_DGELU, false},
        {"fp8 dgrad", true, true, CUBLASLT_EPILOGUE_DEFAULT, false},
        {"fp8 dgrad + amax_d", true, true, CUBLASLT_EPILOGUE_DEFAULT, true},
        {"fp8 dgrad dgelu", true, true, CUBLASLT_EPILOGUE_DGELU, false},
        {"fp8 dgrad dgelu + amax_d", true, true, CUBLASLT_EPILOGUE_DGELU, true},
    };
    // checks on a small shape; the timing shape is the d24 MLP at B*T = 32768: N = 32768, K = C = 1024, OC = 4C
    {
        printf("\n== checks (N=256, K=256, OC=512) ==\n");
        Operands o(256, 256, 512, 1234);
        for (const Case& c : cases) {
            const cublasStatus_t st = run_case(c, o, nullptr);
            const bool known = st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE;
            printf("  %-34s %s\n", c.name, st == CUBLAS_STATUS_SUCCESS ? "runs" : cublasLtGetStatusName(st));
            tally.check((std::string(c.name) + ": status is run / unsupported").c_str(), known);
            if (st == CUBLAS_STATUS_SUCCESS) check_case(tally, c, o);
        }
    }
    if (timing) {
        Operands o(32768, 1024, 4096, 99);
        const double flops = 2.0 * o.N * o.K * o.OC;
        printf("\n%-34s | %-20s | %9s | %8s\n", "GEMM (N=32768, K=1024, OC=4096)", "status", "ms", "TFLOP/s");
        for (const Case& c : cases) {
            float ms = -1.0f;
            const cublasStatus_t st = run_case(c, o, &ms);
            if (st == CUBLAS_STATUS_SUCCESS) printf("%-34s | %-20s | %9.4f | %8.0f\n", c.name, "runs", ms, flops / (ms * 1e-3) / 1e12);
            else printf("%-34s | %-20s | %9s | %8s\n", c.name, cublasLtGetStatusName(st), "-", "-");
        }
        const double copy = copy_bandwidth_gbs();
        printf("(separate passes on the same output, for comparison: GELU reads 2 and writes 2 bytes per element, dGELU\n"
               " reads 4 and writes 2: %.3f / %.3f ms at the device copy rate of %.0f GB/s)\n",
               4.0 * o.N * o.OC / (copy * 1e6), 6.0 * o.N * o.OC / (copy * 1e6), copy);
    }
    cudaCheck(cudaFree(g_ws));
    cublasLtDestroy(g_lt);
    return tally.finish();
}
