// cutlass_tcast_gemm_coop_128x256_c2x1.cu - configuration coop_128x256_c2x1 of cutlass_tcast_gemm.h
// (CUTLASS_TCAST_GEMM_CONFIGS): the base configuration of cutlass_tcast_gemm_impl.cuh (cooperative 128x256x64,
// cluster 2x1, epilogue tile 128x64). Its two CUTLASS instantiations (the plain cast and
// the fc layer's GELU epilogue), one translation unit; the dispatcher
// (cutlass_tcast_gemm.cu) reaches it through cutlass_tcast_gemm_ops_coop_128x256_c2x1.
#include "llmc/kernels/gemm/cutlass_tcast_gemm_impl.cuh"

namespace {
struct Cfg : TcCfgBase {};
}  // namespace

CUTLASS_TCAST_GEMM_DEFINE_OPS(coop_128x256_c2x1, Cfg)
