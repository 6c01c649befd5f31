// cutlass_fp8_fc_coop_n_fa256_pgelu.cu - configuration coop_n_fa256_pgelu of cutlass_fp8_fc.h
// (CUTLASS_FP8_FC_CONFIGS): cooperative 128x256 tiles with fast accumulation (128x256 with fp32 promotion needs
// two 128-register accumulators per thread: ptxas spills 840 bytes) and today's producer's GELU.
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n_fa256_pgelu.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_n_fa256_pgelu.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {
    static constexpr bool kFastAccum = true;
    using Tile = Shape<_128, _256, _128>;
    using KernelSchedule = CoopFastSchedule;
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n_fa256_pgelu, Cfg)
