// cutlass_fp8_fc_coop_n_pgelu_e128x64.cu - configuration coop_n_pgelu_e128x64 of cutlass_fp8_fc.h
// (CUTLASS_FP8_FC_CONFIGS): coop_n_pgelu with epilogue tile 128x64 (CUTLASS's automatic one is 128x32): half the
// epilogue subtiles and their barriers, 32 values per thread and subtile instead of 16.
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n_pgelu_e128x64.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_n_pgelu_e128x64.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {
    using EpilogueTile = Shape<_128, _64>;
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n_pgelu_e128x64, Cfg)
