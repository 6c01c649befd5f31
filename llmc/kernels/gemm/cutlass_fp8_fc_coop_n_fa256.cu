// cutlass_fp8_fc_coop_n_fa256.cu - configuration coop_n_fa256 of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): cooperative 128x256 tiles with fast accumulation (half the operand loads per output of 128x128).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n_fa256.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_n_fa256.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg {
    static constexpr bool kNatural = true;
    static constexpr bool kZOnly = false;
    static constexpr bool kFastAccum = true;
    static constexpr bool kWarpAmax = true;
    static constexpr bool kFastGelu = false;
    using Tile = Shape<_128, _256, _128>;
    using Cluster = Shape<_2, _1, _1>;
    using KernelSchedule = CoopFastSchedule;
    using EpilogueSchedule = CoopEpilogue;
    static constexpr const char* kSchedule = "cooperative";
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n_fa256, Cfg)
