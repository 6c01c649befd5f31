// cutlass_tcast_quant.h - which TensorCast element quantizer a CUTLASS epilogue cast runs (the TcastGroupCast node,
// cutlass_tcast_common.cuh), chosen per launch on the host as the stand-alone pass chooses it (tcast_cast.cuh
// tcast_cast_path without statistics): the round-to-nearest-even path (TcastQRne) for the @even MX / BFP types, the
// exponent path (TcastQExp) for their other round modes (@stochastic, @nearest, @zero). The general path (float-scaled
// and uint types) has no epilogue form: those casts keep the pass. No CUTLASS types (the dispatchers include it).
#pragma once

enum CutlassTcastQuant {
    CUTLASS_TCAST_OFF = 0,  // no cast: the epilogue stores the BF16 values as they are
    CUTLASS_TCAST_EXP = 1,  // TcastQExp
    CUTLASS_TCAST_RNE = 2,  // TcastQRne
};
