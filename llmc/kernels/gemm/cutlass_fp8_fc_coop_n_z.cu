// cutlass_fp8_fc_coop_n_z.cu - configuration coop_n_z of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): the base
// configuration's mainloop with a Z-only epilogue (bias, scales, BF16 store): what the mainloop costs in CUTLASS.
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n_z.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_n_z.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {
    static constexpr bool kZOnly = true;
    static constexpr bool kWarpAmax = false;
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n_z, Cfg)
