// cutlass_fp8_fc_coop_n.cu - configuration coop_n of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): coop_t in the natural form (M = tokens, N-major D and Z: vectorized epilogue stores).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_n.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg {
    static constexpr bool kNatural = true;
    static constexpr bool kZOnly = false;
    static constexpr bool kFastAccum = false;
    static constexpr bool kWarpAmax = false;
    static constexpr bool kFastGelu = false;
    using Tile = Shape<_128, _128, _128>;
    using Cluster = Shape<_2, _1, _1>;
    using KernelSchedule = CoopSchedule;
    using EpilogueSchedule = CoopEpilogue;
    static constexpr const char* kSchedule = "cooperative";
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n, Cfg)
