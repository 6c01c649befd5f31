// cutlass_tcast_gemm_coop_256x128_c1x2.cu - configuration coop_256x128_c1x2 of cutlass_tcast_gemm.h
// (CUTLASS_TCAST_GEMM_CONFIGS): cooperative 256x128x64, cluster 1x2 (two CTAs along OC share the inp tile),
// epilogue tile 128x64 (two subtiles along M per tile). Its two CUTLASS instantiations (the plain cast and
// the fc layer's GELU epilogue), one translation unit.
#include "llmc/kernels/gemm/cutlass_tcast_gemm_impl.cuh"

namespace {
struct Cfg : TcCfgBase {
    using Tile = Shape<_256, _128, _64>;
    using Cluster = Shape<_1, _2, _1>;
};
}  // namespace

CUTLASS_TCAST_GEMM_DEFINE_OPS(coop_256x128_c1x2, Cfg)
