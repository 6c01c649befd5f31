// mode_rules.h - which numeric compile flags combine, and which mode module a build selects: the one
// place these rules are written. Plain preprocessor, no includes. The compiler reads it first thing
// through llmc/core/precision.h; the Makefile runs it through the C preprocessor with the same -D flags
// before it builds anything and stops with the #error text below (so make and nvcc say the same).
//
// Macros read here (set by the Makefile from its variables, CUDA_MODE_FLAGS):
//   ENABLE_BF16 | ENABLE_FP16 | ENABLE_FP32   PRECISION=...   storage type floatX (BF16 when none is given)
//   ENABLE_Q115, SF16_TRUE_FORWARD            ENABLE_Q115=1, SF16_TRUE_FORWARD=1   SF16 (modes/sf16)
//   ENABLE_FP8 | ENABLE_TCFP12                FP8=1 | TCFP12=1                      FP8 / TCFP-12 GEMMs (modes/lowp)
//   ENABLE_TCAST                              TCAST=1                               TensorCast (modes/tcast)
//   ENABLE_CUDNN                              USE_CUDNN=1                           cuDNN attention
#pragma once

#if (defined(ENABLE_FP32) + defined(ENABLE_FP16) + defined(ENABLE_BF16)) > 1
#error "choose exactly one of ENABLE_FP32, ENABLE_FP16, ENABLE_BF16 (make PRECISION=FP32|FP16|BF16)"
#endif

// SF16 (seed sf16_implementation_details.txt): BF16 storage, Q1.15 boundaries; no cuDNN (its attention
// would bypass the boundaries; the seed's message).
#if defined(SF16_TRUE_FORWARD) && !defined(ENABLE_Q115)
#error "SF16_TRUE_FORWARD=1 needs ENABLE_Q115=1"
#endif
#if defined(ENABLE_Q115) && defined(ENABLE_FP16)
#error "ENABLE_Q115=1 stores BF16: it cannot be combined with PRECISION=FP16"
#endif
#if defined(ENABLE_Q115) && defined(ENABLE_FP32)
#error "ENABLE_Q115=1 stores BF16: it cannot be combined with PRECISION=FP32"
#endif
#if defined(ENABLE_Q115) && defined(ENABLE_CUDNN)
#error "ENABLE_CUDNN is not supported with ENABLE_Q115. Disable USE_CUDNN for SF16 builds."
#endif

// FP8 / TCFP-12 GEMM backends: one at a time; their GEMMs write BF16.
#if defined(ENABLE_FP8) && defined(ENABLE_TCFP12)
#error "FP8=1 and TCFP12=1 are two GEMM backends: choose one"
#endif
#if (defined(ENABLE_FP8) || defined(ENABLE_TCFP12)) && (defined(ENABLE_FP16) || defined(ENABLE_FP32))
#error "FP8=1 / TCFP12=1 need PRECISION=BF16: the FP8 GEMMs write BF16 outputs"
#endif

// TensorCast: a storage-boundary simulation of its own on BF16 storage, and a GEMM-operand policy of the
// BF16 GEMMs, so it excludes SF16 and the FP8 / TCFP-12 backends.
#if defined(ENABLE_TCAST) && defined(ENABLE_FP16)
#error "TCAST=1 stores BF16: it cannot be combined with PRECISION=FP16"
#endif
#if defined(ENABLE_TCAST) && defined(ENABLE_FP32)
#error "TCAST=1 stores BF16: it cannot be combined with PRECISION=FP32"
#endif
#if defined(ENABLE_TCAST) && defined(ENABLE_Q115)
#error "TCAST=1 and ENABLE_Q115=1 are two storage-boundary simulations: choose one"
#endif
#if defined(ENABLE_TCAST) && (defined(ENABLE_FP8) || defined(ENABLE_TCFP12))
#error "TCAST=1 cannot be combined with FP8=1 / TCFP12=1: --cast-gemm casts the BF16 GEMMs' operands instead"
#endif

// cuDNN attention (llmc/kernels/attention/attention_cudnn.h): cuDNN's fused SDPA computes in 16-bit I/O with
// no hook inside, so it serves BF16 and FP16 storage (FP8 / TCFP-12 included: their attention is BF16) and
// no mode whose every run acts inside attention (SF16 above). TensorCast casts inside attention only where a
// run's plan names attn_scores / attn_probs: a TCAST=1 build with cuDNN runs cuDNN's attention when neither
// is cast and its built-in kernels, which host the casts, when either is (llmc/kernels/attention/attention.cuh,
// attention_uses_cudnn).
#if defined(ENABLE_CUDNN) && defined(ENABLE_FP32)
#error "USE_CUDNN=1 cannot be combined with PRECISION=FP32: cuDNN's fused attention reads and writes BF16 or FP16 only"
#endif

// The mode module of the build: the folder llmc/modes/<LLMC_MODE>/ (one line per mode; BF16, FP16 and
// FP32 storage without a mode are the plain module). Every mode folder has the same three entry files:
// traits.cuh (compile time, read by kernels through precision.h), mode.cuh (the trainer's hooks) and
// test.cuh (test_gpt2cu's reference state and checks); llmc/modes/README.md describes them.
#if defined(ENABLE_Q115)
#define LLMC_MODE sf16
#elif defined(ENABLE_FP8) || defined(ENABLE_TCFP12)
#define LLMC_MODE lowp
#elif defined(ENABLE_TCAST)
#define LLMC_MODE tcast
#else
#define LLMC_MODE plain
#endif

// #include LLMC_MODE_FILE(mode.cuh) includes llmc/modes/<LLMC_MODE>/mode.cuh (the path from the repository
// root, which every build passes with -I.).
#define LLMC_MODE_STR_(x) #x
#define LLMC_MODE_STR(x) LLMC_MODE_STR_(x)
#define LLMC_MODE_FILE(file) LLMC_MODE_STR(llmc/modes/LLMC_MODE/file)
