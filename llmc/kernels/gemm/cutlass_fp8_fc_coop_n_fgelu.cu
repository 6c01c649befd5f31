// cutlass_fp8_fc_coop_n_fgelu.cu - configuration coop_n_fgelu of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS): the base
// configuration with the GELU on __expf and __fdividef (the first round's fastest; not the producer's bits).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n_fgelu.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_coop_n_fgelu.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {
    static constexpr CutlassFcGelu kGelu = CUTLASS_FC_GELU_FAST;
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n_fgelu, Cfg)
