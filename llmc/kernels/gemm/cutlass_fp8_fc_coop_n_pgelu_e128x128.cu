// cutlass_fp8_fc_coop_n_pgelu_e128x128.cu - configuration coop_n_pgelu_e128x128 of cutlass_fp8_fc.h
// (CUTLASS_FP8_FC_CONFIGS): coop_n_pgelu with epilogue tile 128x128: the whole tile in one epilogue subtile (one
// pass, no subtile barriers between, fragments of 64 values per thread; more registers and shared memory).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n_pgelu_e128x128.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_n_pgelu_e128x128.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {
    using EpilogueTile = Shape<_128, _128>;
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n_pgelu_e128x128, Cfg)
