// attention_cudnn.cpp - the cuDNN attention backend (API and layouts: attention_cudnn.h). Two graphs of the
// cuDNN frontend (cudnn_frontend.h, header-only; the graph API of cuDNN 9):
//   forward:  [O, Stats] = sdpa(Q, K, V), causal mask, attn_scale = 1/sqrt(HS), generate_stats: Stats is
//             the natural-log log-sum-exp per score row, which the backward reads back
//   backward: [dQ, dK, dV] = sdpa_backward(Q, K, V, O, dO, Stats), same mask and scale, the deterministic
//             algorithm (no atomics in dQ; bitwise reruns)
// Q, K and V are logical (B, NH, T, HS) tensors over the one (B, T, 3, NH, HS) buffer: strides
// (3*T*C, HS, 3*C, 1) with K at +C and V at +2*C elements (C = NH*HS); O and dO are (B, NH, T, HS) with
// strides (T*C, HS, C, 1), i.e. the (B, T, C) row-major layout of the projection's input; dQ/dK/dV write
// into the dqkv buffer with the qkv strides. Building a graph (heuristics, plan compilation) takes tens
// to hundreds of milliseconds, so each (direction, B, T, NH, HS, dtype) is built once and cached.
#include "llmc/kernels/attention/attention_cudnn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>

#include <cudnn.h>
#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;

namespace {

// The tensors of both graphs, by uid (the variant pack of an execution maps uid -> device pointer).
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_DO, UID_DQ, UID_DK, UID_DV };

struct Shape {
    int B, T, NH, HS;
    bool fp16;
    bool backward;
    bool operator<(const Shape& o) const {
        return std::tie(B, T, NH, HS, fp16, backward) < std::tie(o.B, o.T, o.NH, o.HS, o.fp16, o.backward);
    }
};

struct State {
    cudnnHandle_t handle = nullptr;
    int device = -1;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    std::map<Shape, std::shared_ptr<fe::graph::Graph>> graphs;
    std::string version;
};
State g_state;

[[noreturn]] void fail(const Shape* s, const char* what, const std::string& why) {
    if (s)
        fprintf(stderr, "error: cuDNN attention %s, B=%d T=%d NH=%d HS=%d %s: %s: %s\n", s->backward ? "backward" : "forward",
                s->B, s->T, s->NH, s->HS, s->fp16 ? "fp16" : "bf16", what, why.c_str());
    else
        fprintf(stderr, "error: cuDNN attention: %s: %s\n", what, why.c_str());
    exit(EXIT_FAILURE);
}

void check_cuda(cudaError_t e, const Shape* s, const char* what) {
    if (e != cudaSuccess) fail(s, what, cudaGetErrorString(e));
}

void check_fe(fe::error_t e, const Shape& s, const char* what) {
    if (e.is_bad()) fail(&s, what, e.get_message());
}

// The handle of the current device, created on first use (one GPU per process: a device change is a bug).
cudnnHandle_t handle_for(cudaStream_t stream, const Shape* s) {
    int dev = 0;
    check_cuda(cudaGetDevice(&dev), s, "cudaGetDevice");
    if (!g_state.handle) {
        cudnnStatus_t st = cudnnCreate(&g_state.handle);
        if (st != CUDNN_STATUS_SUCCESS)
            fail(s, "cudnnCreate (is libcudnn.so.9 for this CUDA installed? make info names the one linked)",
                 cudnnGetErrorString(st));
        g_state.device = dev;
    } else if (dev != g_state.device) {
        fail(s, "device changed", "the cuDNN handle was created on device " + std::to_string(g_state.device) +
                                      ", now device " + std::to_string(dev));
    }
    cudnnStatus_t st = cudnnSetStream(g_state.handle, stream);
    if (st != CUDNN_STATUS_SUCCESS) fail(s, "cudnnSetStream", cudnnGetErrorString(st));
    return g_state.handle;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, int64_t uid,
                                                    const std::vector<int64_t>& dim, const std::vector<int64_t>& stride) {
    return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dim).set_stride(stride));
}

void output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, int64_t uid, const std::vector<int64_t>& dim,
            const std::vector<int64_t>& stride) {
    t->set_output(true).set_uid(uid).set_dim(dim).set_stride(stride);
}

// Build (or find) the graph of shape s, and make sure the workspace covers its plan.
fe::graph::Graph& graph_for(const Shape& s, cudnnHandle_t handle) {
    auto it = g_state.graphs.find(s);
    if (it != g_state.graphs.end()) return *it->second;

    const int64_t B = s.B, T = s.T, NH = s.NH, HS = s.HS, C = NH * HS;
    const std::vector<int64_t> dim = {B, NH, T, HS};
    const std::vector<int64_t> qkv_stride = {3 * T * C, HS, 3 * C, 1};
    const std::vector<int64_t> o_stride = {T * C, HS, C, 1};
    const std::vector<int64_t> stats_dim = {B, NH, T, 1}, stats_stride = {NH * T, T, 1, 1};
    const float scale = 1.0f / sqrtf((float)HS);

    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(s.fp16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto Q = input(*g, "Q", UID_Q, dim, qkv_stride);
    auto K = input(*g, "K", UID_K, dim, qkv_stride);
    auto V = input(*g, "V", UID_V, dim, qkv_stride);
    if (!s.backward) {
        auto opts = fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_causal_mask(true).set_attn_scale(scale);
        auto [O, stats] = g->sdpa(Q, K, V, opts);
        output(O, UID_O, dim, o_stride);
        output(stats, UID_STATS, stats_dim, stats_stride);
        stats->set_data_type(fe::DataType_t::FLOAT);
    } else {
        auto O = input(*g, "O", UID_O, dim, o_stride);
        auto dO = input(*g, "dO", UID_DO, dim, o_stride);
        auto stats = input(*g, "Stats", UID_STATS, stats_dim, stats_stride);
        stats->set_data_type(fe::DataType_t::FLOAT);
        auto opts = fe::graph::SDPA_backward_attributes()
                        .set_name("sdpa_backward")
                        .set_causal_mask(true)
                        .set_attn_scale(scale)
                        .set_deterministic_algorithm(true);
        auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
        output(dQ, UID_DQ, dim, qkv_stride);
        output(dK, UID_DK, dim, qkv_stride);
        output(dV, UID_DV, dim, qkv_stride);
    }
    check_fe(g->validate(), s, "graph validation");
    check_fe(g->build_operation_graph(handle), s, "building the operation graph");
    check_fe(g->create_execution_plans({fe::HeurMode_t::A}), s, "execution plans (heuristics)");
    check_fe(g->check_support(), s, "no engine supports this graph");
    check_fe(g->build_plans(), s, "building the plan");

    int64_t ws = 0;
    check_fe(g->get_workspace_size(ws), s, "workspace size");
    if ((size_t)ws > g_state.workspace_bytes) {
        // cudaFree waits for the device, so a workspace still in use by an earlier call is not reused
        if (g_state.workspace) check_cuda(cudaFree(g_state.workspace), &s, "cudaFree (workspace)");
        g_state.workspace = nullptr;
        check_cuda(cudaMalloc(&g_state.workspace, (size_t)ws), &s, "cudaMalloc (workspace)");
        g_state.workspace_bytes = (size_t)ws;
    }
    g_state.graphs.emplace(s, g);
    return *g;
}

void run(const Shape& s, std::unordered_map<int64_t, void*>& pack, cudaStream_t stream) {
    cudnnHandle_t handle = handle_for(stream, &s);
    fe::graph::Graph& g = graph_for(s, handle);
    check_fe(g.execute(handle, pack, g_state.workspace), s, "execute");
}

// Element offset `n` of a 16-bit tensor.
void* at(const void* p, int64_t n) { return (char*)p + 2 * n; }

}  // namespace

void attention_cudnn_forward(void* out, float* lse, const void* qkv, int B, int T, int NH, int HS, bool fp16,
                             cudaStream_t stream) {
    const Shape s = {B, T, NH, HS, fp16, false};
    const int64_t C = (int64_t)NH * HS;
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, at(qkv, 0)}, {UID_K, at(qkv, C)}, {UID_V, at(qkv, 2 * C)}, {UID_O, out}, {UID_STATS, lse}};
    run(s, pack, stream);
}

void attention_cudnn_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                              int B, int T, int NH, int HS, bool fp16, cudaStream_t stream) {
    const Shape s = {B, T, NH, HS, fp16, true};
    const int64_t C = (int64_t)NH * HS;
    std::unordered_map<int64_t, void*> pack = {
        {UID_Q, at(qkv, 0)},    {UID_K, at(qkv, C)},      {UID_V, at(qkv, 2 * C)},     {UID_O, at(out, 0)},
        {UID_DO, at(dout, 0)},  {UID_STATS, (void*)lse},  {UID_DQ, at(dqkv, 0)},       {UID_DK, at(dqkv, C)},
        {UID_DV, at(dqkv, 2 * C)}};
    run(s, pack, stream);
}

const char* attention_cudnn_version() {
    if (g_state.version.empty()) {
        handle_for(0, nullptr);
        const size_t v = cudnnGetVersion();  // e.g. 91900 = 9.19.0
        char buf[96];
        snprintf(buf, sizeof(buf), "cuDNN %zu.%zu.%zu (frontend %d.%d.%d)", v / 10000, (v / 100) % 100, v % 100,
                 CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
        g_state.version = buf;
    }
    return g_state.version.c_str();
}

void attention_cudnn_free() {
    g_state.graphs.clear();
    if (g_state.workspace) cudaFree(g_state.workspace);
    g_state.workspace = nullptr;
    g_state.workspace_bytes = 0;
    if (g_state.handle) cudnnDestroy(g_state.handle);
    g_state.handle = nullptr;
}
