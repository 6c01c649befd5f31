// cutlass_fp8_fc_pp_n.cu - configuration pp_n of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): pingpong (one warp group's epilogue overlaps the other's mainloop), 64x128 tiles (fp32 promotion keeps two accumulators: 128x128 would not fit the registers).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_pp_n.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_pp_n.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg {
    static constexpr bool kNatural = true;
    static constexpr bool kZOnly = false;
    static constexpr bool kFastAccum = false;
    static constexpr bool kWarpAmax = true;
    static constexpr bool kFastGelu = false;
    using Tile = Shape<_64, _128, _128>;
    using Cluster = Shape<_2, _1, _1>;
    using KernelSchedule = PingpongSchedule;
    using EpilogueSchedule = PingpongEpilogue;
    static constexpr const char* kSchedule = "pingpong";
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(pp_n, Cfg)
