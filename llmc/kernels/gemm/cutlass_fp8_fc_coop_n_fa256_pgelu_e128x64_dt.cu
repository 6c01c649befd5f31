// cutlass_fp8_fc_coop_n_fa256_pgelu_e128x64_dt.cu - configuration coop_n_fa256_pgelu_e128x64_dt of cutlass_fp8_fc.h
// (CUTLASS_FP8_FC_CONFIGS): coop_n_fa256_pgelu_e128x64 (the second round's fastest) whose epilogue also writes the
// transposed codes dt (OC, ldt) through a second, M-major aux store (cutlass_fp8_fc_impl.cuh, FcWithTransposedD).
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_coop_n_fa256_pgelu_e128x64_dt.o; the dispatcher (cutlass_fp8_fc.cu) reaches it
// through cutlass_fp8_fc_ops_coop_n_fa256_pgelu_e128x64_dt.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {
    static constexpr bool kFastAccum = true;
    static constexpr bool kTransposedD = true;
    using Tile = Shape<_128, _256, _128>;
    using KernelSchedule = CoopFastSchedule;
    using EpilogueTile = Shape<_128, _64>;
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(coop_n_fa256_pgelu_e128x64_dt, Cfg)
