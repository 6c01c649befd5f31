// cutlass_fp8_fc_pp_n_fa_pgelu.cu - configuration pp_n_fa_pgelu of cutlass_fp8_fc.h (CUTLASS_FP8_FC_CONFIGS):
// pingpong 128x128 with fast accumulation and today's producer's GELU: the one Hopper schedule of CUTLASS in which a
// tile's epilogue (one warp group's) overlaps another tile's mainloop (the other warp group's); automatic epilogue
// tile 64x64.
// One explicit CUTLASS instantiation (cutlass_fp8_fc_impl.cuh), its own translation unit compiled into
// $(BUILD)/cutlass/cutlass_fp8_fc_pp_n_fa_pgelu.o; the dispatcher (cutlass_fp8_fc.cu) reaches it through
// cutlass_fp8_fc_ops_pp_n_fa_pgelu.
#include "llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh"

namespace {
struct Cfg : FcCfgBase {
    static constexpr bool kFastAccum = true;
    using KernelSchedule = PingpongFastSchedule;
    using EpilogueSchedule = PingpongEpilogue;
    static constexpr const char* kSchedule = "pingpong";
};
}  // namespace

CUTLASS_FP8_FC_DEFINE_OPS(pp_n_fa_pgelu, Cfg)
