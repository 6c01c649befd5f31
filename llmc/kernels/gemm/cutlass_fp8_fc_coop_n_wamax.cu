// cutlass_fp8_fc_coop_n_wamax.cu - configuration coop_n_wamax of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): coop_n with the amax reduced over each warp before its atomic (32x fewer same-address atomics).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n_wamax.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_n_wamax.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg {
    static constexpr bool kNatural = true;
    static constexpr bool kZOnly = false;
    static constexpr bool kFastAccum = false;
    static constexpr bool kWarpAmax = true;
    static constexpr bool kFastGelu = false;
    using Tile = Shape<_128, _128, _128>;
    using Cluster = Shape<_2, _1, _1>;
    using KernelSchedule = CoopSchedule;
    using EpilogueSchedule = CoopEpilogue;
    static constexpr const char* kSchedule = "cooperative";
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n_wamax, Cfg)
