// cutlass_fp8_fc_coop_t.cu - configuration coop_t of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): the configuration of the first GPU run (3x slower than cuBLASLt's GEMM): transposed problem, M-major D and Z.
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_t.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_t.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg {
    static constexpr bool kNatural = false;
    static constexpr bool kZOnly = false;
    static constexpr bool kFastAccum = false;
    static constexpr bool kWarpAmax = false;
    static constexpr bool kFastGelu = false;
    using Tile = Shape<_128, _128, _128>;
    using Cluster = Shape<_1, _2, _1>;
    using KernelSchedule = CoopSchedule;
    using EpilogueSchedule = CoopEpilogue;
    static constexpr const char* kSchedule = "cooperative";
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_t, Cfg)
