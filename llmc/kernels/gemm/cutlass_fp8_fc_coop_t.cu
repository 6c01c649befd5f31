// cutlass_fp8_fc_coop_t.cu - configuration coop_t of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): the configuration of
// the first GPU run (the reference): transposed problem (M-major D and Z), cluster 1x2, IEEE GELU, amax atomic per
// thread.
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_t.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_t.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {
    static constexpr bool kNatural = false;
    static constexpr bool kWarpAmax = false;
    static constexpr CutlassFcGelu kGelu = CUTLASS_FC_GELU_IEEE;
    using Cluster = Shape<_1, _2, _1>;
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_t, Cfg)
