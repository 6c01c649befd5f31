// cutlass_fp8_dgelu_coop_fa256_e128x32.cu - configuration coop_fa256_e128x32 of cutlass_fp8_dgelu.h
// (CUTLASS_FP8_DGELU_CONFIGS): cooperative 128x256x128 with fast accumulation (the shape of the fc forward's fastest
// configuration, cutlass_fp8_fc coop_n_fa256_pgelu_e128x64_dt) and a 128x32 epilogue tile: with 128x64 the epilogue's
// pre, g, d and dt buffers (96 KB) would leave the mainloop 2 stages of 48 KB, with 128x32 (48 KB) it keeps 3.
// One explicit CUTLASS instantiation (cutlass_fp8_dgelu_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_dgelu_coop_fa256_e128x32.o; the dispatcher (cutlass_fp8_dgelu.cu) reaches it through
// cutlass_fp8_dgelu_ops_coop_fa256_e128x32.
#include "llmc/kernels/gemm/cutlass_fp8_dgelu_impl.cuh"

namespace {
struct Cfg : DgCfgBase {
    static constexpr bool kFastAccum = true;
    using Tile = Shape<_128, _256, _128>;
    using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum;
    using EpilogueTile = Shape<_128, _32>;
};
}  // namespace

CUTLASS_FP8_DGELU_DEFINE_OPS(coop_fa256_e128x32, Cfg)
