// cutlass_tcast_gemm_pp_128x128_c2x1.cu - configuration pp_128x128_c2x1 of cutlass_tcast_gemm.h
// (CUTLASS_TCAST_GEMM_CONFIGS): ping-pong 128x128x64, cluster 2x1, epilogue tile 128x64: each consumer warp group
// computes its own tile, so the cast epilogue of one runs while the other's mainloop keeps the tensor cores busy (the
// cooperative configurations stop both warp groups' MMAs for it). Its two CUTLASS instantiations (the plain
// cast and the fc layer's GELU epilogue), one translation unit.
#include "llmc/kernels/gemm/cutlass_tcast_gemm_impl.cuh"

namespace {
struct Cfg : TcCfgBase {
    using Tile = Shape<_128, _128, _64>;
    using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
    static constexpr const char* kSchedule = "ping-pong";
};
}  // namespace

CUTLASS_TCAST_GEMM_DEFINE_OPS(pp_128x128_c2x1, Cfg)
