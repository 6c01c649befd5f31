// cutlass_fp8_fc_pp_n_fa.cu - configuration pp_n_fa of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): pingpong with fast accumulation (one accumulator: 128x128 tiles fit).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_pp_n_fa.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_pp_n_fa.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg {
    static constexpr bool kNatural = true;
    static constexpr bool kZOnly = false;
    static constexpr bool kFastAccum = true;
    static constexpr bool kWarpAmax = true;
    static constexpr bool kFastGelu = false;
    using Tile = Shape<_128, _128, _128>;
    using Cluster = Shape<_2, _1, _1>;
    using KernelSchedule = PingpongFastSchedule;
    using EpilogueSchedule = PingpongEpilogue;
    static constexpr const char* kSchedule = "pingpong";
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(pp_n_fa, Cfg)
