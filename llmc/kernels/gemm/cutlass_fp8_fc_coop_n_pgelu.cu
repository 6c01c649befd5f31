// cutlass_fp8_fc_coop_n_pgelu.cu - configuration coop_n_pgelu of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): the base
// configuration as it is (cutlass_fp8_fc_impl.cuh FcCfgBase): cooperative 128x128, fp32 promotion, today's producer's
// GELU (bit-exact).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n_pgelu.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_n_pgelu.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n_pgelu, Cfg)
