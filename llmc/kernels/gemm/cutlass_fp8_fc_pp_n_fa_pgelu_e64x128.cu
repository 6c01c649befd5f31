// cutlass_fp8_fc_pp_n_fa_pgelu_e64x128.cu - configuration pp_n_fa_pgelu_e64x128 of cutlass_fp8_fc.h
// (CUTLASS_FP8_FC_CONFIGS): pp_n_fa_pgelu with epilogue tile 64x128 (automatic: 64x64): 2 epilogue subtiles per
// 128x128 tile instead of 4, fragments of 64 values per thread instead of 32 (ptxas, CUDA 13.0: 64 bytes of spills).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_pp_n_fa_pgelu_e64x128.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_pp_n_fa_pgelu_e64x128.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {
    static constexpr bool kFastAccum = true;
    using KernelSchedule = PingpongFastSchedule;
    using EpilogueSchedule = PingpongEpilogue;
    using EpilogueTile = Shape<_64, _128>;
    static constexpr const char* kSchedule = "pingpong";
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(pp_n_fa_pgelu_e64x128, Cfg)
