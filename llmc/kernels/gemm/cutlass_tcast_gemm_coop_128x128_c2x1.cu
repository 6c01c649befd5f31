// cutlass_tcast_gemm_coop_128x128_c2x1.cu - configuration coop_128x128_c2x1 of cutlass_tcast_gemm.h
// (CUTLASS_TCAST_GEMM_CONFIGS): cooperative 128x128x64, cluster 2x1, epilogue tile 128x64 (more tiles, so more
// epilogue overlap across CTAs on an SM's smaller tiles). Its two CUTLASS instantiations (the plain cast and
// the fc layer's GELU epilogue), one translation unit.
#include "llmc/kernels/gemm/cutlass_tcast_gemm_impl.cuh"

namespace {
struct Cfg : TcCfgBase {
    using Tile = Shape<_128, _128, _64>;
};
}  // namespace

CUTLASS_TCAST_GEMM_DEFINE_OPS(coop_128x128_c2x1, Cfg)
