# GPT-2 trainer for precision research: CPU reference, CUDA trainer, host tests.
#
#   make train_gpt2 test_gpt2      CPU fp32 reference trainer and its check against PyTorch
#   make test                      every host test (data, formats, reference, CPU trainer)
#   make info                      what the toolchain discovery found
#   make train_gpt2cu test_gpt2cu  CUDA trainer and its test for the variant the flags select
#   make cuda                      trainer, test and dev/cuda harnesses of that variant into build/<variant>/
#   make cuda-dev                  compile the dev/cuda kernel harnesses (needs nvcc, no GPU)
#   make kernel-gaps               CUPTI library measuring the idle gaps between kernels (dev/tools/kernel_gaps.cpp)
#
# Build variables (the only place they are mapped to macros is CUDA_MODE_FLAGS below; the macros are
# read only in llmc/core/mode_rules.h and llmc/core/precision.h, which select the mode module, and in
# that module, llmc/modes/<mode>/; the combination rules and their messages are in mode_rules.h):
#   PRECISION=BF16|FP16|FP32   storage type floatX of the CUDA build            [BF16]
#   ENABLE_Q115=1              SF16: Q1.15 boundary simulation (BF16 storage)
#   SF16_TRUE_FORWARD=1        with ENABLE_Q115: Q1.31 register simulation, FAST_16BF GEMMs
#   FP8=1 | TCFP12=1           linear layers as FP8 / TCFP-12 dual-FP8 GEMMs
#   TCAST=1                    TensorCast datatypes at run time (BF16 storage; not with ENABLE_Q115, FP8, TCFP12)
#   USE_CUDNN=1|0              attention on cuDNN's fused SDPA | the built-in flash kernels (build/<variant>_flash);
#                              default: cuDNN where found and the mode admits it (BF16 / FP16 storage, FP8, TCFP-12,
#                              TCAST=1 (runs that cast an attention site take the built-in kernels); not ENABLE_Q115,
#                              PRECISION=FP32); CUDNN_HOME=... / CUDNN_FRONTEND_PATH=...
#   CUTLASS_HOME=...           CUTLASS headers ($(CUTLASS_HOME)/include/cutlass/version.h) for the CUTLASS kernels of
#                              llmc/kernels/gemm/cutlass_*.cu (default: /usr/include, /usr/local/include, else the venv's
#                              nvidia-cutlass wheel, which scripts/setup_env.sh installs); FP8=1 trainers link them where
#                              found (--fp8-cutlass); NO_CUTLASS=1: not (make clean, or another BUILD=, when switching)
#   GPU_ARCH=90                compute capability to build for (90 = Hopper sm_90)  [90]
#   NO_MULTI_GPU=1 NO_USE_MPI=1  build without NCCL / without MPI
#   NVCC=... / CUDA_HOME=...   another CUDA toolkit (e.g. CUDA 12.4: make cuda $(scripts/cuda12_toolchain.sh))
#   HARNESSES="matmul gelu"    the dev/cuda harnesses that cuda / cuda-dev build     [all]
#   PYTHON=...                 interpreter with torch, numpy, tiktoken, pytest      [.venv/bin/python]

.DEFAULT_GOAL := all
BUILD ?= build
SHELL := /bin/bash

# ---------------------------------------------------------------------------------------------
# CPU reference build

CC ?= gcc
CPU_ARCH ?= -march=native
CFLAGS_CPU ?= -O3 $(CPU_ARCH) -std=gnu11 -Wall -Wextra -Wno-unused-parameter
HAVE_OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo 1)
ifeq ($(NO_OMP),1)
  HAVE_OPENMP :=
endif
OMP_FLAGS := $(if $(HAVE_OPENMP),-fopenmp,)
# every llmc header, whatever folder it is in (llmc/README.md): a change to one rebuilds what may include it
LLMC_HEADERS := $(shell find llmc -name '*.h' -o -name '*.cuh')
CPU_DEPS := $(LLMC_HEADERS) Makefile

# ---------------------------------------------------------------------------------------------
# Toolchain discovery: files on disk (headers and libraries), not package-manager queries.

# The toolkit, nvcc and its headers and libraries always as one: NVCC=path (CUDA_HOME = the folder above
# its bin/, unless CUDA_HOME=... is given too), else CUDA_HOME=path (command line or environment) with
# bin/nvcc, else nvcc on PATH, else /usr/local/cuda. A toolkit in a folder, e.g. the CUDA 12.4 one of
# scripts/cuda12_toolchain.sh: make cuda NVCC=<folder>/bin/nvcc BUILD=build/cuda12.4.
ifeq ($(origin NVCC),undefined)
  NVCC := $(or $(if $(CUDA_HOME),$(wildcard $(CUDA_HOME)/bin/nvcc)),$(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; }))
endif
ifneq ($(origin CUDA_HOME),command line)
  CUDA_HOME := $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(realpath $(firstword $(wildcard $(NVCC)) $(shell command -v $(NVCC) 2>/dev/null)))),/usr/local/cuda)
endif
CUDA_INC_DIRS := $(CUDA_HOME)/include $(wildcard $(CUDA_HOME)/targets/*/include)
CUDA_LIB_DIRS := $(CUDA_HOME)/lib64 $(wildcard $(CUDA_HOME)/lib $(CUDA_HOME)/targets/*/lib)
SYS_LIB_DIRS := /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib
# first file found: directories in order, in each the names in order
first_file = $(firstword $(wildcard $(foreach d,$(1),$(foreach f,$(2),$(d)/$(f)))))
# a library: the unversioned libX.so, else a versioned libX.so.N only (pip wheels ship libcublasLt.so.12)
find_so = $(call first_file,$(2),lib$(1).so lib$(1).so.[0-9]*)
# linker flags for a library file: -lX for libX.so, -l:libX.so.N for a versioned one
link_so = -L$(dir $(1)) $(if $(filter %.so,$(1)),-l$(patsubst lib%.so,%,$(notdir $(1))),-l:$(notdir $(1)))

CUBLASLT_H := $(call first_file,$(CUDA_INC_DIRS),cublasLt.h)
CUBLASLT_SO := $(call find_so,cublasLt,$(CUDA_LIB_DIRS) $(SYS_LIB_DIRS))
CUBLAS_SO := $(call find_so,cublas,$(CUDA_LIB_DIRS) $(SYS_LIB_DIRS))
# no static runtime (pip wheels have only libcudart.so.12): link the shared one
CUDART_STATIC := $(call first_file,$(CUDA_LIB_DIRS),libcudart_static.a)
NCCL_H := $(call first_file,$(if $(NCCL_HOME),$(NCCL_HOME)/include) $(CUDA_INC_DIRS) /usr/include /usr/local/include,nccl.h)
NCCL_SO := $(call find_so,nccl,$(if $(NCCL_HOME),$(NCCL_HOME)/lib) $(CUDA_LIB_DIRS) $(SYS_LIB_DIRS))
MPI_INC_GUESS := $(if $(MPI_HOME),$(MPI_HOME)/include) $(shell mpicc --showme:incdirs 2>/dev/null) \
  /usr/lib/x86_64-linux-gnu/openmpi/include /usr/lib/aarch64-linux-gnu/openmpi/include \
  /usr/include/openmpi /usr/local/include /opt/hpcx/ompi/include /usr/include
MPI_LIB_GUESS := $(if $(MPI_HOME),$(MPI_HOME)/lib) $(shell mpicc --showme:libdirs 2>/dev/null) \
  /usr/lib/x86_64-linux-gnu/openmpi/lib /opt/hpcx/ompi/lib $(SYS_LIB_DIRS)
MPI_H := $(call first_file,$(MPI_INC_GUESS),mpi.h)
MPI_SO := $(call first_file,$(MPI_LIB_GUESS),libmpi.so)
# CUPTI (make kernel-gaps): in the toolkit's include/ and lib/, or extras/CUPTI/ in older layouts
CUPTI_H := $(call first_file,$(CUDA_INC_DIRS) $(CUDA_HOME)/extras/CUPTI/include,cupti.h)
CUPTI_SO := $(call find_so,cupti,$(CUDA_LIB_DIRS) $(CUDA_HOME)/extras/CUPTI/lib64 $(SYS_LIB_DIRS))

# cuDNN (USE_CUDNN=1 attention, llmc/kernels/attention/attention_cudnn.cpp): cudnn.h and libcudnn from
# CUDNN_HOME, the toolkit, the system, else the venv's nvidia-cudnn-cu13 / -cu12 wheel (site-packages/
# nvidia/cudnn: libcudnn.so.9 only, no unversioned name: find_so / link_so handle it); the header-only
# cuDNN frontend from CUDNN_FRONTEND_PATH, the system, else the venv's nvidia-cudnn-frontend (its headers
# go to site-packages/include). scripts/setup_env.sh (make venv) installs what the system lacks.
VENV := .venv
VENV_SITE := $(wildcard $(VENV)/lib/python3*/site-packages)
CUDNN_H := $(call first_file,$(if $(CUDNN_HOME),$(CUDNN_HOME)/include) $(CUDA_INC_DIRS) /usr/include /usr/local/include \
  $(addsuffix /nvidia/cudnn/include,$(VENV_SITE)),cudnn.h)
CUDNN_SO := $(call find_so,cudnn,$(if $(CUDNN_HOME),$(CUDNN_HOME)/lib $(CUDNN_HOME)/lib64) $(CUDA_LIB_DIRS) $(SYS_LIB_DIRS) \
  $(addsuffix /nvidia/cudnn/lib,$(VENV_SITE)))
CUDNN_FE_H := $(call first_file,$(if $(CUDNN_FRONTEND_PATH),$(CUDNN_FRONTEND_PATH)/include $(CUDNN_FRONTEND_PATH)) \
  /usr/include /usr/local/include $(addsuffix /include,$(VENV_SITE)),cudnn_frontend.h)
# frontends from 1.19 on compile an NVRTC-built engine into every program that includes them: link libnvrtc
# then (scripts/setup_env.sh pins 1.18.0, which needs nothing but cuDNN)
CUDNN_FE_NVRTC := $(if $(CUDNN_FE_H),$(wildcard $(dir $(CUDNN_FE_H))cudnn_frontend/experimental/nvrtc_shim.h))
NVRTC_SO := $(if $(CUDNN_FE_NVRTC),$(call find_so,nvrtc,$(CUDA_LIB_DIRS) $(SYS_LIB_DIRS)))
# last resort: a cuDNN wheel of the project's Python or python3 (nvidia-cudnn-cu13 of a PyTorch install, say)
ifeq ($(and $(CUDNN_H),$(CUDNN_SO)),)
  PY_CUDNN := $(shell for p in $(VENV)/bin/python python3; do $$p -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null && break; done)
  ifneq ($(PY_CUDNN),)
    CUDNN_H := $(call first_file,$(PY_CUDNN)/include,cudnn.h)
    CUDNN_SO := $(call find_so,cudnn,$(PY_CUDNN)/lib)
  endif
endif
HAVE_CUDNN := $(if $(and $(CUDNN_H),$(CUDNN_SO),$(CUDNN_FE_H),$(if $(CUDNN_FE_NVRTC),$(NVRTC_SO),1)),1,)
# CUTLASS (header-only; the Hopper FP8 GEMMs with fused epilogues, llmc/kernels/gemm/cutlass_*.cu): cutlass/version.h
# from CUTLASS_HOME/include, the system, else the venv's nvidia-cutlass wheel (its headers are in site-packages/
# cutlass_library/source/include; scripts/setup_env.sh installs it, --no-deps, where the system has none).
CUTLASS_H := $(call first_file,$(if $(CUTLASS_HOME),$(CUTLASS_HOME)/include) /usr/include /usr/local/include \
  $(addsuffix /cutlass_library/source/include,$(VENV_SITE)),cutlass/version.h)
CUTLASS_INC := $(patsubst %/cutlass/version.h,%,$(CUTLASS_H))
CUTLASS_VERSION = $(shell sed -n 's/^\#define CUTLASS_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' $(CUTLASS_H) 2>/dev/null | paste -sd.)
# where a file came from, for make info
under = $(and $(2),$(filter $(abspath $(2))/%,$(abspath $(1))))
origin_of = $(if $(call under,$(1),$(VENV)),venv (PyPI),$(if $(call under,$(1),$(PY_CUDNN)),Python package nvidia.cudnn,$(if $(call under,$(1),$(CUDNN_HOME)),CUDNN_HOME,$(if \
  $(call under,$(1),$(CUDNN_FRONTEND_PATH)),CUDNN_FRONTEND_PATH,$(if $(call under,$(1),$(CUTLASS_HOME)),CUTLASS_HOME,$(if \
  $(call under,$(1),$(CUDA_HOME)),CUDA toolkit,system))))))
CUDNN_VERSION = $(shell sed -n 's/^\#define CUDNN_\(MAJOR\|MINOR\|PATCHLEVEL\) *\([0-9]*\).*/\2/p' $(dir $(CUDNN_H))cudnn_version.h 2>/dev/null | paste -sd.)
CUDNN_FE_VERSION = $(shell sed -n 's/^\#define CUDNN_FRONTEND_\(MAJOR\|MINOR\|PATCH\)_VERSION *\([0-9]*\).*/\2/p' $(dir $(CUDNN_FE_H))cudnn_frontend_version.h 2>/dev/null | paste -sd.)

HAVE_CUDA := $(if $(and $(NVCC),$(CUBLASLT_H),$(CUBLASLT_SO)),1,)
# versions, for make info only (recursive: evaluated when printed)
NVCC_RELEASE = $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
CUBLAS_HDR_VERSION = $(shell sed -n 's/^\#define CUBLAS_VER_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' $(dir $(CUBLASLT_H))cublas_api.h 2>/dev/null | paste -sd.)
HAVE_NCCL := $(if $(and $(NCCL_H),$(NCCL_SO)),$(if $(NO_MULTI_GPU),,1),)
HAVE_MPI := $(if $(and $(HAVE_NCCL),$(MPI_H),$(MPI_SO)),$(if $(NO_USE_MPI),,1),)

# ---------------------------------------------------------------------------------------------
# CUDA builds: the one place where make variables become compile flags.

PRECISION ?= BF16
GPU_ARCH ?= 90
ifeq ($(filter $(PRECISION),BF16 FP16 FP32),)
  $(error PRECISION=$(PRECISION): expected BF16, FP16 or FP32)
endif
CUDA_MODE_FLAGS := -DENABLE_$(PRECISION)
CUDA_MODE_FLAGS += $(if $(filter 1,$(ENABLE_Q115)),-DENABLE_Q115)
CUDA_MODE_FLAGS += $(if $(filter 1,$(SF16_TRUE_FORWARD)),-DSF16_TRUE_FORWARD=1)
CUDA_MODE_FLAGS += $(if $(filter 1,$(FP8)),-DENABLE_FP8)
CUDA_MODE_FLAGS += $(if $(filter 1,$(TCFP12)),-DENABLE_TCFP12)
CUDA_MODE_FLAGS += $(if $(filter 1,$(TCAST)),-DENABLE_TCAST)

# Impossible combinations: llmc/core/mode_rules.h holds the rules and their messages (the compiler reads
# it through llmc/core/precision.h); make runs it through the C preprocessor with the same flags and stops
# with the #error text, before anything is built. mode_rules_error: that text for the flags $(1), or nothing.
HASH := \#
mode_rules_error = $(shell printf '$(HASH)include "llmc/core/mode_rules.h"\n' | $(CC) -E -x c -I. $(1) - 2>&1 >/dev/null | \
  sed -n 's/.*$(HASH)error "\(.*\)".*/\1/p' | head -n 1)

# The attention backend. USE_CUDNN unset: cuDNN's fused attention wherever make finds cuDNN and the build's
# mode admits it (mode_rules.h answers, asked with -DENABLE_CUDNN), as NCCL is used wherever it is found;
# else the built-in flash kernels. USE_CUDNN=1: cuDNN or an error; USE_CUDNN=0: the built-in kernels, into
# build/<variant>_flash/ (so that build/<variant>/ is always this machine's default).
ifeq ($(origin USE_CUDNN),undefined)
  USE_CUDNN := $(if $(and $(HAVE_CUDA),$(HAVE_CUDNN)),$(if $(call mode_rules_error,$(CUDA_MODE_FLAGS) -DENABLE_CUDNN),0,1),0)
else ifeq ($(filter 0 1,$(USE_CUDNN)),)
  $(error USE_CUDNN=$(USE_CUDNN): expected 1 (cuDNN attention) or 0 (the built-in flash kernels))
else ifeq ($(USE_CUDNN),0)
  ATTN_SUFFIX := _flash
endif
CUDA_MODE_FLAGS += $(if $(filter 1,$(USE_CUDNN)),-DENABLE_CUDNN)
MODE_RULES_ERROR := $(call mode_rules_error,$(CUDA_MODE_FLAGS))
ifneq ($(MODE_RULES_ERROR),)
  $(error $(MODE_RULES_ERROR))
endif
CUDA_MODE_FLAGS += $(if $(HAVE_NCCL),-DMULTI_GPU) $(if $(HAVE_MPI),-DUSE_MPI)

# Variant folder named after the flags: build/bf16, build/fp32, build/q115_tf, build/tcfp12, ...
lc = $(shell echo $(1) | tr A-Z a-z)
VARIANT_BASE := $(if $(filter 1,$(ENABLE_Q115)),q115$(if $(filter 1,$(SF16_TRUE_FORWARD)),_tf),$(if $(filter 1,$(TCAST)),tcast,$(call lc,$(PRECISION))))
VARIANT_GEMM := $(if $(filter 1,$(FP8)),fp8,$(if $(filter 1,$(TCFP12)),tcfp12,))
VARIANT := $(if $(VARIANT_GEMM),$(if $(filter bf16,$(VARIANT_BASE)),$(VARIANT_GEMM),$(VARIANT_BASE)_$(VARIANT_GEMM)),$(VARIANT_BASE))$(ATTN_SUFFIX)

NVCC_FLAGS ?= -O3 --use_fast_math -std=c++17 -lineinfo
NVCC_ARCH := -gencode=arch=compute_$(GPU_ARCH),code=[sm_$(GPU_ARCH),compute_$(GPU_ARCH)]
NVCC_INCLUDES := -I. $(if $(HAVE_NCCL),-I$(dir $(NCCL_H))) $(if $(HAVE_MPI),-I$(dir $(MPI_H)))
NVCC_LDFLAGS := $(call link_so,$(CUBLASLT_SO)) $(if $(CUBLAS_SO),$(call link_so,$(CUBLAS_SO))) \
  $(if $(HAVE_NCCL),$(call link_so,$(NCCL_SO))) $(if $(HAVE_MPI),-L$(dir $(MPI_SO)) -lmpi) \
  $(if $(CUDART_STATIC),,-cudart shared)
CUDA_DEPS := $(CPU_DEPS)

# The cuDNN attention backend: one object per build folder (host C++ only: the cuDNN frontend's headers take
# about a minute, so they are compiled once, not per variant), linked with libcudnn and an rpath to it (the
# binary runs without LD_LIBRARY_PATH; DT_RPATH, not RUNPATH, so that it also covers the engine libraries
# libcudnn.so.9 loads at run time where it has no $$ORIGIN of its own).
CUDNN_OBJ := $(BUILD)/cudnn/attention_cudnn.o
CUDNN_INCLUDES := $(addprefix -I,$(dir $(CUDNN_H)) $(dir $(CUDNN_FE_H)))
USE_CUDNN_OBJ := $(if $(filter 1,$(USE_CUDNN)),$(CUDNN_OBJ))
NVCC_LDFLAGS += $(if $(USE_CUDNN_OBJ),$(CUDNN_OBJ) $(call link_so,$(CUDNN_SO)) $(if $(NVRTC_SO),$(call link_so,$(NVRTC_SO))) \
  -Xlinker --disable-new-dtags -Xlinker -rpath=$(abspath $(dir $(CUDNN_SO))))
$(CUDNN_OBJ): llmc/kernels/attention/attention_cudnn.cpp llmc/kernels/attention/attention_cudnn.h Makefile
	@test -n "$(HAVE_CUDNN)" || { echo "error: USE_CUDNN=1: cuDNN not found (cudnn.h: $(or $(CUDNN_H),missing), libcudnn: $(or $(CUDNN_SO),missing), cudnn_frontend.h: $(or $(CUDNN_FE_H),missing)$(if $(CUDNN_FE_NVRTC),$(if $(NVRTC_SO),,; this frontend needs libnvrtc: missing))); run make venv (scripts/setup_env.sh installs nvidia-cudnn-frontend and, without a system cuDNN, nvidia-cudnn-cu13 / -cu12), or set CUDNN_HOME / CUDNN_FRONTEND_PATH"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) -std=c++17 -O2 -DCUDNN_FRONTEND_SKIP_JSON_LIB -I. $(CUDNN_INCLUDES) -c $< -o $@

# CUTLASS kernels: each instantiation is its own translation unit llmc/kernels/gemm/cutlass_<name>.cu with a C++ API
# in cutlass_<name>.h (no CUTLASS types), compiled once per build folder (not per variant: about a minute and
# 4 GB each) into $(BUILD)/cutlass/cutlass_<name>.o, for sm_90a whatever GPU_ARCH is (wgmma and TMA are Hopper's
# "a" features), without --use_fast_math (the IEEE GELU needs IEEE expf and division; the GELU that matches today's
# producer is explicit PTX, llmc/kernels/gemm/gelu_fastmath.cuh). A dev/cuda harness that
# calls one links its object (HARNESS_OBJS below); so do the FP8=1 trainer and its test (TRAINER_CUTLASS below).
CUTLASS_NVCC_FLAGS := -O3 -std=c++17 --expt-relaxed-constexpr -DNDEBUG -lineinfo -gencode=arch=compute_90a,code=sm_90a
# The fc forward exists in several configurations (cutlass_fp8_fc.h CUTLASS_FP8_FC_CONFIGS), one translation unit
# each, cutlass_fp8_fc_<config>.cu on cutlass_fp8_fc_impl.cuh (make -j builds them in parallel), plus the dispatcher
# cutlass_fp8_fc.cu (no CUTLASS header): a harness links all of them. Likewise the fcproj dgrad with GELU'
# (cutlass_fp8_dgelu.h CUTLASS_FP8_DGELU_CONFIGS: cutlass_fp8_dgelu_<config>.cu on cutlass_fp8_dgelu_impl.cuh, and the
# dispatcher cutlass_fp8_dgelu.cu). Both templates share cutlass_fp8_common.cuh, both dispatchers cutlass_fp8_dispatch.h.
CUTLASS_FC_CONFIG_SRCS := $(wildcard llmc/kernels/gemm/cutlass_fp8_fc_*.cu)
CUTLASS_FC_OBJ := $(BUILD)/cutlass/cutlass_fp8_fc.o $(patsubst llmc/kernels/gemm/%.cu,$(BUILD)/cutlass/%.o,$(CUTLASS_FC_CONFIG_SRCS))
CUTLASS_DGELU_CONFIG_SRCS := $(wildcard llmc/kernels/gemm/cutlass_fp8_dgelu_*.cu)
CUTLASS_DGELU_OBJ := $(BUILD)/cutlass/cutlass_fp8_dgelu.o $(patsubst llmc/kernels/gemm/%.cu,$(BUILD)/cutlass/%.o,$(CUTLASS_DGELU_CONFIG_SRCS))
# The TensorCast build's forward GEMM with the MATMUL_OUT cast in its epilogue, and the fc layer's with both GELU
# sites (cutlass_tcast_gemm.h CUTLASS_TCAST_GEMM_CONFIGS: cutlass_tcast_gemm_<config>.cu on cutlass_tcast_gemm_impl.cuh,
# each configuration both GEMMs; the nodes in cutlass_tcast_common.cuh and cutlass_tcast_gelu_node.cuh; the dispatcher
# cutlass_tcast_gemm.cu).
CUTLASS_TCAST_CONFIG_SRCS := $(wildcard llmc/kernels/gemm/cutlass_tcast_gemm_*.cu)
CUTLASS_TCAST_OBJ := $(BUILD)/cutlass/cutlass_tcast_gemm.o $(patsubst llmc/kernels/gemm/%.cu,$(BUILD)/cutlass/%.o,$(CUTLASS_TCAST_CONFIG_SRCS))
# SF16's forward GEMM with the Q1.15 boundary in its epilogue (cutlass_q115_gemm.h: one translation unit, both its
# instantiations and their host side).
CUTLASS_Q115_OBJ := $(BUILD)/cutlass/cutlass_q115_gemm.o
TCAST_CAST_HDRS := $(wildcard llmc/kernels/tcast/tcast_cast*.cuh) llmc/kernels/tcast/tcast_fp8_hw.cuh llmc/kernels/tcast/tcast_stats.cuh \
  $(wildcard llmc/numerics/tcast*.h) llmc/core/cuda_common.cuh llmc/core/cuda_utils.cuh llmc/core/precision.h
CUTLASS_CHECK = @test -n "$(CUTLASS_INC)" || { echo "error: CUTLASS not found (no cutlass/version.h in CUTLASS_HOME/include, /usr/include, /usr/local/include or the venv's nvidia-cutlass wheel); run scripts/setup_env.sh (it installs nvidia-cutlass==4.2.0.0 into the venv), or set CUTLASS_HOME"; exit 1; }
$(BUILD)/cutlass/cutlass_fp8_fc_%.o: llmc/kernels/gemm/cutlass_fp8_fc_%.cu llmc/kernels/gemm/cutlass_fp8_fc_impl.cuh llmc/kernels/gemm/cutlass_fp8_fc_ops.h \
  llmc/kernels/gemm/cutlass_fp8_fc.h llmc/kernels/gemm/cutlass_fp8_common.cuh llmc/kernels/gemm/gelu_fastmath.cuh Makefile
	$(CUTLASS_CHECK)
	@test -n "$(NVCC)" || { echo "error: nvcc is needed for $@ (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(CUTLASS_NVCC_FLAGS) -I. -I$(CUTLASS_INC) -c $< -o $@
$(BUILD)/cutlass/cutlass_fp8_dgelu_%.o: llmc/kernels/gemm/cutlass_fp8_dgelu_%.cu llmc/kernels/gemm/cutlass_fp8_dgelu_impl.cuh \
  llmc/kernels/gemm/cutlass_fp8_dgelu_ops.h llmc/kernels/gemm/cutlass_fp8_dgelu.h llmc/kernels/gemm/cutlass_fp8_common.cuh \
  llmc/kernels/gemm/gelu_fastmath.cuh Makefile
	$(CUTLASS_CHECK)
	@test -n "$(NVCC)" || { echo "error: nvcc is needed for $@ (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(CUTLASS_NVCC_FLAGS) -I. -I$(CUTLASS_INC) -c $< -o $@
$(BUILD)/cutlass/cutlass_tcast_gemm_%.o: llmc/kernels/gemm/cutlass_tcast_gemm_%.cu llmc/kernels/gemm/cutlass_tcast_gemm_impl.cuh \
  llmc/kernels/gemm/cutlass_tcast_gemm_ops.h llmc/kernels/gemm/cutlass_tcast_gemm.h llmc/kernels/gemm/cutlass_tcast_common.cuh \
  llmc/kernels/gemm/cutlass_tcast_quant.h llmc/kernels/gemm/cutlass_tcast_gelu_node.cuh llmc/kernels/gemm/gelu_fastmath.cuh \
  llmc/kernels/gemm/cutlass_fp8_common.cuh $(TCAST_CAST_HDRS) Makefile
	$(CUTLASS_CHECK)
	@test -n "$(NVCC)" || { echo "error: nvcc is needed for $@ (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(CUTLASS_NVCC_FLAGS) -I. -I$(CUTLASS_INC) -c $< -o $@
$(BUILD)/cutlass/cutlass_tcast_gemm.o: llmc/kernels/gemm/cutlass_tcast_gemm_ops.h llmc/kernels/gemm/cutlass_tcast_quant.h \
  llmc/kernels/gemm/cutlass_fp8_dispatch.h $(TCAST_CAST_HDRS)
$(BUILD)/cutlass/cutlass_fp8_fc.o: llmc/kernels/gemm/cutlass_fp8_fc_ops.h llmc/kernels/gemm/cutlass_fp8_dispatch.h
$(BUILD)/cutlass/cutlass_q115_gemm.o: llmc/kernels/gemm/cutlass_fp8_common.cuh llmc/kernels/gemm/cutlass_fp8_dispatch.h \
  llmc/kernels/gemm/gelu_fastmath.cuh llmc/numerics/q115.h
$(BUILD)/cutlass/cutlass_fp8_dgelu.o: llmc/kernels/gemm/cutlass_fp8_dgelu_ops.h llmc/kernels/gemm/cutlass_fp8_dispatch.h
$(BUILD)/cutlass/cutlass_%.o: llmc/kernels/gemm/cutlass_%.cu llmc/kernels/gemm/cutlass_%.h Makefile
	$(CUTLASS_CHECK)
	@test -n "$(NVCC)" || { echo "error: nvcc is needed for $@ (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(CUTLASS_NVCC_FLAGS) -I. -I$(CUTLASS_INC) -c $< -o $@

# ---------------------------------------------------------------------------------------------
# Python side: data preparation, PyTorch reference, Python tests

PYTHON ?= $(VENV)/bin/python
# what the Python rules wait for: the venv, when PYTHON is ours (another PYTHON=...: nothing)
PY_ENV := $(if $(filter $(VENV)/bin/python,$(PYTHON)),$(VENV)/.complete)
DATA := data
TS_VAL := $(DATA)/tinyshakespeare/tiny_shakespeare_val.bin
TS_TRAIN := $(DATA)/tinyshakespeare/tiny_shakespeare_train.bin
TOKENIZER := $(DATA)/gpt2_tokenizer.bin
REF_DIR := $(BUILD)/ref
REF_FILES := $(REF_DIR)/gpt2_ref.bin $(REF_DIR)/gpt2_ref_bf16.bin $(REF_DIR)/gpt2_ref_debug_state.bin $(REF_DIR)/gpt2_ref_debug_state_bf16.bin \
             $(REF_DIR)/gpt2_ref_debug_state_q115.bin $(REF_DIR)/gpt2_ref_debug_state_q115_tf.bin \
             $(REF_DIR)/gpt2_ref_debug_state_tcast.bin $(REF_DIR)/gpt2_ref_debug_state_fp8.bin $(REF_DIR)/gpt2_ref_debug_state_tcfp12.bin \
             $(REF_DIR)/gpt2_ref_bf16_hs64.bin $(REF_DIR)/gpt2_ref_debug_state_bf16_hs64.bin \
             $(REF_DIR)/gpt2_ref_debug_state_tcast_attn.bin $(REF_DIR)/gpt2_ref_debug_state_tcast_all.bin

# ---------------------------------------------------------------------------------------------
# Targets

.PHONY: all info test test-c test-py data reference cuda-dev venv env-torch clean

all: info train_gpt2 test_gpt2

info:
	@echo "toolchain discovery:"
	@echo "  C compiler   $(CC) (OpenMP: $(if $(HAVE_OPENMP),yes,no))"
	@echo "  nvcc         $(or $(NVCC),not found)$(if $(NVCC), (CUDA $(NVCC_RELEASE); cudart $(if $(CUDART_STATIC),static,shared: no libcudart_static.a)))"
	@echo "  cuBLASLt     $(or $(CUBLASLT_H),header not found) | $(or $(CUBLASLT_SO),library not found)$(if $(CUBLASLT_H), (headers $(CUBLAS_HDR_VERSION)))"
	@echo "  NCCL         $(or $(NCCL_H),header not found) | $(or $(NCCL_SO),library not found)$(if $(NO_MULTI_GPU), (disabled: NO_MULTI_GPU=1))"
	@echo "  MPI          $(or $(MPI_H),header not found) | $(or $(MPI_SO),library not found)$(if $(NO_USE_MPI), (disabled: NO_USE_MPI=1))"
	@echo "  CUPTI        $(or $(CUPTI_H),header not found) | $(or $(CUPTI_SO),library not found)"
	@echo "  cuDNN        $(or $(CUDNN_H),header not found) | $(or $(CUDNN_SO),library not found)$(if $(CUDNN_H), ($(CUDNN_VERSION), $(call origin_of,$(CUDNN_H))))"
	@echo "  cuDNN front  $(or $(CUDNN_FE_H),cudnn_frontend.h not found)$(if $(CUDNN_FE_H), ($(CUDNN_FE_VERSION), $(call origin_of,$(CUDNN_FE_H))))"
	@echo "  CUTLASS      $(or $(CUTLASS_INC),cutlass/version.h not found)$(if $(CUTLASS_H), ($(CUTLASS_VERSION), $(call origin_of,$(CUTLASS_H))))$(if $(filter 1,$(FP8)),; FP8 trainer: $(if $(TRAINER_CUTLASS),links the fused-epilogue kernels (--fp8-cutlass),without them (--fp8-cutlass refused)$(if $(filter 1,$(NO_CUTLASS)),: NO_CUTLASS=1)))$(if $(filter 1,$(TCAST)),; TCAST trainer: $(if $(TRAINER_CUTLASS),links the matmul_out cast GEMM (--cast-cutlass),without it (--cast-cutlass 1 refused)$(if $(filter 1,$(NO_CUTLASS)),: NO_CUTLASS=1)))$(if $(filter 1,$(ENABLE_Q115)),; SF16 trainer: $(if $(TRAINER_CUTLASS),links the Q1.15 epilogue GEMM (--q115-cutlass),without it (--q115-cutlass: the passes)$(if $(filter 1,$(NO_CUTLASS)),: NO_CUTLASS=1)))"
	@echo "  attention    $(if $(filter 1,$(USE_CUDNN)),cuDNN fused SDPA,built-in flash kernels)$(if $(filter command line environment,$(origin USE_CUDNN)), (USE_CUDNN=$(USE_CUDNN)), (default for this mode$(if $(HAVE_CUDNN),, and no cuDNN found)))"
	@echo "  CUDA variant $(VARIANT): $(strip $(CUDA_MODE_FLAGS))$(if $(TRAINER_CUTLASS_FLAGS), (trainer and test also $(TRAINER_CUTLASS_FLAGS))), sm_$(GPU_ARCH)"
	@echo "  python       $(PYTHON)"

# CPU reference trainer and its test; built in $(BUILD)/cpu and copied to the root (llm.c habit).
$(BUILD)/cpu/%: %.c train_gpt2.c $(CPU_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CPU) $(OMP_FLAGS) -I. $< -lm -o $@

train_gpt2 test_gpt2: %: $(BUILD)/cpu/%
	cp $< $@

# Host unit tests: one binary per dev/test/test_*.c (-pthread: test_watchdog runs the watchdog on a thread)
HOST_TEST_SRCS := $(wildcard dev/test/test_*.c)
HOST_TEST_BINS := $(patsubst dev/test/%.c,$(BUILD)/tests/%,$(HOST_TEST_SRCS))
$(BUILD)/tests/%: dev/test/%.c dev/test/test_harness.h $(CPU_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CPU) -pthread -I. $< -lm -o $@

# Host-side TensorCast cast tool (llmc/numerics/tcast.h on float32 files), which the Python reference
# tests (dev/test/test_tcast_reference.py) drive to compare the C casts with dev/reference/tcast_ref.py.
TCAST_CLI := $(BUILD)/tests/tcast_cli
$(TCAST_CLI): dev/test/tcast_cli.c $(CPU_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CPU) -I. $< -lm -o $@

# Python environment, by scripts/setup_env.sh: the system packages (apt-get when root or with
# passwordless sudo, else one message naming the command) and a venv that sees them (Debian's
# python3-torch and numpy) plus tiktoken, pytest, ml_dtypes and matplotlib from PyPI; $(VENV)/.complete
# marks a finished one. PyTorch is needed only for the reference state and the tests (env-torch).
venv: $(VENV)/.complete
$(VENV)/.complete:
	@VENV=$(VENV) scripts/setup_env.sh
env-torch:
	@$(if $(PY_ENV),VENV=$(VENV) scripts/setup_env.sh --torch,true)

# Tiny Shakespeare shards and the tokenizer (from ../shared/data offline, else downloaded).
data: $(TS_VAL)
$(TS_VAL) $(TS_TRAIN) $(TOKENIZER) &: dev/data/tinyshakespeare.py dev/data/data_common.py | $(PY_ENV)
	$(PYTHON) dev/data/tinyshakespeare.py

# PyTorch reference state (float64 compute) for test_gpt2 / test_gpt2cu.
reference: $(REF_FILES)
$(REF_FILES) &: dev/reference/gpt2_reference.py dev/reference/lowp_ref.py $(TS_VAL) | env-torch
	@$(PYTHON) -c 'import torch' 2>/dev/null || { echo "error: $(PYTHON) has no PyTorch"; exit 1; }
	$(PYTHON) dev/reference/gpt2_reference.py --data $(TS_VAL) --out-dir $(REF_DIR) --device cpu --sf16-states --tcast-states --lowp-states

# Every host test; the last line of output is `N passed, N failed`.
test: env-torch $(HOST_TEST_BINS) $(TCAST_CLI) $(BUILD)/cpu/test_gpt2 $(BUILD)/cpu/train_gpt2 $(REF_FILES) $(TOKENIZER)
	@PYTHON=$(PYTHON) TRAIN_GPT2=$(BUILD)/cpu/train_gpt2 TCAST_CLI=$(TCAST_CLI) bash dev/test/run_tests.sh \
	  $(HOST_TEST_BINS) $(BUILD)/cpu/test_gpt2 -- $(wildcard dev/test/test_*.py)

# CUDA trainer and its test, one folder per variant; `make train_gpt2cu` also copies to the root.
# The FP8=1 trainer and test link the CUTLASS fc / fcproj-dgrad kernels where CUTLASS is found (unless NO_CUTLASS=1):
# -DENABLE_CUTLASS, read only by llmc/modes/lowp/lowp_cutlass.cuh (--fp8-cutlass 1; refused in a build without them).
# Likewise the TCAST=1 trainer and test link the BF16 GEMM with the MATMUL_OUT cast in its epilogue: -DENABLE_CUTLASS,
# read only by llmc/modes/tcast/tcast_cutlass.cuh (--cast-cutlass); and the ENABLE_Q115=1 trainer and test the BF16
# GEMM with the Q1.15 boundary in its epilogue, read only by llmc/modes/sf16/sf16_cutlass.cuh (--q115-cutlass).
TRAINER_CUTLASS := $(if $(and $(filter 1,$(FP8) $(TCAST) $(ENABLE_Q115)),$(CUTLASS_INC)),$(if $(filter 1,$(NO_CUTLASS)),,1))
TRAINER_CUTLASS_OBJ := $(if $(TRAINER_CUTLASS),$(if $(filter 1,$(TCAST)),$(CUTLASS_TCAST_OBJ),$(if $(filter 1,$(FP8)),$(CUTLASS_FC_OBJ) \
  $(CUTLASS_DGELU_OBJ))) $(if $(filter 1,$(ENABLE_Q115)),$(CUTLASS_Q115_OBJ)))
TRAINER_CUTLASS_FLAGS := $(if $(TRAINER_CUTLASS),-DENABLE_CUTLASS)
CUDA_TARGETS := $(BUILD)/$(VARIANT)/train_gpt2cu $(BUILD)/$(VARIANT)/test_gpt2cu
$(BUILD)/$(VARIANT)/%cu: %.cu $(CUDA_DEPS) $(USE_CUDNN_OBJ) $(TRAINER_CUTLASS_OBJ)
	@test -n "$(HAVE_CUDA)" || { echo "error: nvcc and cuBLASLt are needed for $@ (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) $(CUDA_MODE_FLAGS) $(TRAINER_CUTLASS_FLAGS) $(NVCC_INCLUDES) $< $(TRAINER_CUTLASS_OBJ) $(NVCC_LDFLAGS) -o $@

.PHONY: train_gpt2cu test_gpt2cu cuda
train_gpt2cu test_gpt2cu: %: $(BUILD)/$(VARIANT)/%
	cp $< $@
cuda: $(CUDA_TARGETS) cuda-dev

# Kernel harnesses in dev/cuda (compile only here; run them on a GPU). HARNESSES="matmul gelu" builds
# only those (CI's per-variant table is in scripts/build_variants.sh); default: every dev/cuda/*.cu.
CUDA_DEV_ALL := $(patsubst dev/cuda/%.cu,%,$(wildcard dev/cuda/*.cu))
# harnesses of CUTLASS kernels: in the default list only where CUTLASS is found (make build/<variant>/dev/<name>
# without it stops with the CUTLASS error)
CUTLASS_HARNESSES := cutlass_fp8 cutlass_fp8_dgelu cutlass_tcast_gemm cutlass_q115_gemm
HARNESSES ?= $(if $(CUTLASS_INC),$(CUDA_DEV_ALL),$(filter-out $(CUTLASS_HARNESSES),$(CUDA_DEV_ALL)))
ifneq ($(filter-out $(CUDA_DEV_ALL),$(HARNESSES)),)
  $(error HARNESSES: no dev/cuda/<name>.cu for $(filter-out $(CUDA_DEV_ALL),$(HARNESSES)) (have: $(CUDA_DEV_ALL)))
endif
CUDA_DEV_BINS := $(patsubst %,$(BUILD)/$(VARIANT)/dev/%,$(HARNESSES))
cuda-dev: $(CUDA_DEV_BINS)
$(BUILD)/$(VARIANT)/dev/%: dev/cuda/%.cu $(CUDA_DEPS) $(USE_CUDNN_OBJ)
	@test -n "$(HAVE_CUDA)" || { echo "error: nvcc and cuBLASLt are needed for $@ (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) $(CUDA_MODE_FLAGS) $(NVCC_INCLUDES) $< $(HARNESS_OBJS) $(NVCC_LDFLAGS) -o $@
# the objects a harness links besides its own translation unit
$(BUILD)/$(VARIANT)/dev/cutlass_fp8: $(CUTLASS_FC_OBJ) dev/cuda/fp8_gemm_host.cuh
$(BUILD)/$(VARIANT)/dev/cutlass_fp8: HARNESS_OBJS := $(CUTLASS_FC_OBJ)
$(BUILD)/$(VARIANT)/dev/cutlass_fp8_dgelu: $(CUTLASS_DGELU_OBJ) dev/cuda/fp8_gemm_host.cuh
$(BUILD)/$(VARIANT)/dev/cutlass_fp8_dgelu: HARNESS_OBJS := $(CUTLASS_DGELU_OBJ)
$(BUILD)/$(VARIANT)/dev/cutlass_tcast_gemm: $(CUTLASS_TCAST_OBJ)
$(BUILD)/$(VARIANT)/dev/cutlass_tcast_gemm: HARNESS_OBJS := $(CUTLASS_TCAST_OBJ)
$(BUILD)/$(VARIANT)/dev/cutlass_q115_gemm: $(CUTLASS_Q115_OBJ)
$(BUILD)/$(VARIANT)/dev/cutlass_q115_gemm: HARNESS_OBJS := $(CUTLASS_Q115_OBJ)

# Idle gaps between the kernels of a step: a CUPTI library loaded through CUDA_INJECTION64_PATH (usage
# in dev/tools/kernel_gaps.cpp; rpath to the CUPTI it was built against) and the probe with a known
# timeline that dev/tools/check_kernel_gaps.sh runs it on (on a GPU).
.PHONY: kernel-gaps
kernel-gaps: $(BUILD)/tools/libkernel_gaps.so $(BUILD)/tools/gap_probe
$(BUILD)/tools/libkernel_gaps.so: dev/tools/kernel_gaps.cpp Makefile
	@test -n "$(CUPTI_H)" -a -n "$(CUPTI_SO)" || { echo "error: CUPTI (cupti.h, libcupti.so) not found for $(CUDA_HOME) (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(CXX) -O2 -std=c++17 -Wall -Wextra -fPIC -shared -fvisibility=hidden -pthread $(addprefix -I,$(dir $(CUPTI_H)) $(CUDA_INC_DIRS)) \
	  $< $(call link_so,$(CUPTI_SO)) -Wl,-rpath,$(dir $(CUPTI_SO)) -o $@
$(BUILD)/tools/gap_probe: dev/tools/gap_probe.cu Makefile
	@test -n "$(NVCC)" || { echo "error: nvcc is needed for $@ (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) -Xcompiler -Wall,-Wextra $< -o $@

# `make print-VAR` prints a variable (scripts ask e.g. HAVE_CUDA this way)
print-%:
	@echo '$($*)'

clean:
	rm -rf $(BUILD) train_gpt2 test_gpt2 train_gpt2cu test_gpt2cu
