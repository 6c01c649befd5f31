// cutlass_fp8_dgelu_coop_e128x64.cu - configuration coop_e128x64 of cutlass_fp8_dgelu.h (CUTLASS_FP8_DGELU_CONFIGS): the
// base configuration of cutlass_fp8_dgelu_impl.cuh (cooperative 128x128x128, cluster 2x1, fp32 promotion every 4
// k-blocks, the trainer's default accumulation; epilogue tile 128x64, 2 pre buffers).
// One explicit CUTLASS instantiation, its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_dgelu_coop_e128x64.o; the dispatcher (cutlass_fp8_dgelu.cu) reaches it through
// cutlass_fp8_dgelu_ops_coop_e128x64.
#include "llmc/kernels/gemm/cutlass_fp8_dgelu_impl.cuh"

namespace {
struct Cfg : DgCfgBase {};
}  // namespace

CUTLASS_FP8_DGELU_DEFINE_OPS(coop_e128x64, Cfg)
