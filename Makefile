# GPT-2 trainer for precision research: CPU reference, CUDA trainer, host tests.
#
#   make train_gpt2 test_gpt2      CPU fp32 reference trainer and its check against PyTorch
#   make test                      every host test (data, formats, reference, CPU trainer)
#   make info                      what the toolchain discovery found
#   make train_gpt2cu test_gpt2cu  CUDA trainer and its test for the variant the flags select
#   make cuda                      trainer, test and dev/cuda harnesses of that variant into build/<variant>/
#   make cuda-dev                  compile the dev/cuda kernel harnesses (needs nvcc, no GPU)
#
# Build variables (the only place they are mapped to macros is CUDA_MODE_FLAGS below; the macros
# are interpreted only in llmc/precision.h):
#   PRECISION=BF16|FP16|FP32   storage type floatX of the CUDA build            [BF16]
#   ENABLE_Q115=1              SF16: Q1.15 boundary simulation (BF16 storage)
#   SF16_TRUE_FORWARD=1        with ENABLE_Q115: Q1.31 register simulation, FAST_16BF GEMMs
#   FP8=1 | TCFP12=1           linear layers as FP8 / TCFP-12 dual-FP8 GEMMs
#   USE_CUDNN=1                cuDNN attention (not with ENABLE_Q115)
#   GPU_ARCH=90                compute capability to build for (90 = Hopper sm_90)  [90]
#   NO_MULTI_GPU=1 NO_USE_MPI=1  build without NCCL / without MPI
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
CPU_DEPS := $(wildcard llmc/*.h llmc/numerics/*.h) llmc/lowp_diagnose.cuh Makefile

# ---------------------------------------------------------------------------------------------
# Toolchain discovery: files on disk (headers and libraries), not package-manager queries.

NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/nvcc,%,$(realpath $(NVCC))),/usr/local/cuda)
CUDA_INC_DIRS := $(CUDA_HOME)/include $(wildcard $(CUDA_HOME)/targets/*/include)
CUDA_LIB_DIRS := $(CUDA_HOME)/lib64 $(wildcard $(CUDA_HOME)/targets/*/lib)
SYS_LIB_DIRS := /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib
first_file = $(firstword $(wildcard $(foreach d,$(1),$(d)/$(2))))

CUBLASLT_H := $(call first_file,$(CUDA_INC_DIRS),cublasLt.h)
CUBLASLT_SO := $(call first_file,$(CUDA_LIB_DIRS) $(SYS_LIB_DIRS),libcublasLt.so)
NCCL_H := $(call first_file,$(if $(NCCL_HOME),$(NCCL_HOME)/include) $(CUDA_INC_DIRS) /usr/include /usr/local/include,nccl.h)
NCCL_SO := $(call first_file,$(if $(NCCL_HOME),$(NCCL_HOME)/lib) $(CUDA_LIB_DIRS) $(SYS_LIB_DIRS),libnccl.so)
MPI_INC_GUESS := $(if $(MPI_HOME),$(MPI_HOME)/include) $(shell mpicc --showme:incdirs 2>/dev/null) \
  /usr/lib/x86_64-linux-gnu/openmpi/include /usr/lib/aarch64-linux-gnu/openmpi/include \
  /usr/include/openmpi /usr/local/include /opt/hpcx/ompi/include /usr/include
MPI_LIB_GUESS := $(if $(MPI_HOME),$(MPI_HOME)/lib) $(shell mpicc --showme:libdirs 2>/dev/null) \
  /usr/lib/x86_64-linux-gnu/openmpi/lib /opt/hpcx/ompi/lib $(SYS_LIB_DIRS)
MPI_H := $(call first_file,$(MPI_INC_GUESS),mpi.h)
MPI_SO := $(call first_file,$(MPI_LIB_GUESS),libmpi.so)

HAVE_CUDA := $(if $(and $(NVCC),$(CUBLASLT_H),$(CUBLASLT_SO)),1,)
HAVE_NCCL := $(if $(and $(NCCL_H),$(NCCL_SO)),$(if $(NO_MULTI_GPU),,1),)
HAVE_MPI := $(if $(and $(HAVE_NCCL),$(MPI_H),$(MPI_SO)),$(if $(NO_USE_MPI),,1),)

# ---------------------------------------------------------------------------------------------
# CUDA builds: the one place where make variables become compile flags.

PRECISION ?= BF16
GPU_ARCH ?= 90
ifeq ($(filter $(PRECISION),BF16 FP16 FP32),)
  $(error PRECISION=$(PRECISION): expected BF16, FP16 or FP32)
endif
ifeq ($(SF16_TRUE_FORWARD),1)
  ifneq ($(ENABLE_Q115),1)
    $(error SF16_TRUE_FORWARD=1 needs ENABLE_Q115=1)
  endif
endif
ifeq ($(ENABLE_Q115),1)
  ifneq ($(PRECISION),BF16)
    $(error ENABLE_Q115=1 stores BF16: it cannot be combined with PRECISION=$(PRECISION))
  endif
  ifeq ($(USE_CUDNN),1)
    $(error ENABLE_Q115=1 cannot be combined with USE_CUDNN=1 (cuDNN attention bypasses the SF16 boundaries))
  endif
endif
ifeq ($(FP8)$(TCFP12),11)
  $(error FP8=1 and TCFP12=1 are two GEMM backends: choose one)
endif
ifneq ($(filter 1,$(FP8) $(TCFP12)),)
  ifneq ($(PRECISION),BF16)
    $(error FP8=1 / TCFP12=1 need PRECISION=BF16: the FP8 GEMMs write BF16 outputs)
  endif
endif

CUDA_MODE_FLAGS := -DENABLE_$(PRECISION)
CUDA_MODE_FLAGS += $(if $(filter 1,$(ENABLE_Q115)),-DENABLE_Q115)
CUDA_MODE_FLAGS += $(if $(filter 1,$(SF16_TRUE_FORWARD)),-DSF16_TRUE_FORWARD=1)
CUDA_MODE_FLAGS += $(if $(filter 1,$(FP8)),-DENABLE_FP8)
CUDA_MODE_FLAGS += $(if $(filter 1,$(TCFP12)),-DENABLE_TCFP12)
CUDA_MODE_FLAGS += $(if $(filter 1,$(USE_CUDNN)),-DENABLE_CUDNN)
CUDA_MODE_FLAGS += $(if $(HAVE_NCCL),-DMULTI_GPU) $(if $(HAVE_MPI),-DUSE_MPI)

# Variant folder named after the flags: build/bf16, build/fp32, build/q115_tf, build/tcfp12, ...
lc = $(shell echo $(1) | tr A-Z a-z)
VARIANT_BASE := $(if $(filter 1,$(ENABLE_Q115)),q115$(if $(filter 1,$(SF16_TRUE_FORWARD)),_tf),$(call lc,$(PRECISION)))
VARIANT_GEMM := $(if $(filter 1,$(FP8)),fp8,$(if $(filter 1,$(TCFP12)),tcfp12,))
VARIANT := $(if $(VARIANT_GEMM),$(if $(filter bf16,$(VARIANT_BASE)),$(VARIANT_GEMM),$(VARIANT_BASE)_$(VARIANT_GEMM)),$(VARIANT_BASE))$(if $(filter 1,$(USE_CUDNN)),_cudnn)

NVCC_FLAGS ?= -O3 --use_fast_math -std=c++17 -lineinfo
NVCC_ARCH := -gencode=arch=compute_$(GPU_ARCH),code=[sm_$(GPU_ARCH),compute_$(GPU_ARCH)]
NVCC_INCLUDES := -I. $(if $(HAVE_NCCL),-I$(dir $(NCCL_H))) $(if $(HAVE_MPI),-I$(dir $(MPI_H)))
NVCC_LDFLAGS := -L$(dir $(CUBLASLT_SO)) -lcublasLt -lcublas $(if $(HAVE_NCCL),-L$(dir $(NCCL_SO)) -lnccl) \
  $(if $(HAVE_MPI),-L$(dir $(MPI_SO)) -lmpi)
CUDA_DEPS := $(CPU_DEPS) $(wildcard llmc/*.cuh)

# ---------------------------------------------------------------------------------------------
# Python side: data preparation, PyTorch reference, Python tests

VENV := .venv
PYTHON ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)
DATA := data
TS_VAL := $(DATA)/tinyshakespeare/tiny_shakespeare_val.bin
TS_TRAIN := $(DATA)/tinyshakespeare/tiny_shakespeare_train.bin
TOKENIZER := $(DATA)/gpt2_tokenizer.bin
REF_DIR := $(BUILD)/ref
REF_FILES := $(REF_DIR)/gpt2_ref.bin $(REF_DIR)/gpt2_ref_bf16.bin $(REF_DIR)/gpt2_ref_debug_state.bin $(REF_DIR)/gpt2_ref_debug_state_bf16.bin \
             $(REF_DIR)/gpt2_ref_debug_state_q115.bin $(REF_DIR)/gpt2_ref_debug_state_q115_tf.bin

# ---------------------------------------------------------------------------------------------
# Targets

.PHONY: all info test test-c test-py data reference cuda-dev venv clean

all: info train_gpt2 test_gpt2

info:
	@echo "toolchain discovery:"
	@echo "  C compiler   $(CC) (OpenMP: $(if $(HAVE_OPENMP),yes,no))"
	@echo "  nvcc         $(or $(NVCC),not found)"
	@echo "  cuBLASLt     $(or $(CUBLASLT_H),header not found) | $(or $(CUBLASLT_SO),library not found)"
	@echo "  NCCL         $(or $(NCCL_H),header not found) | $(or $(NCCL_SO),library not found)$(if $(NO_MULTI_GPU), (disabled: NO_MULTI_GPU=1))"
	@echo "  MPI          $(or $(MPI_H),header not found) | $(or $(MPI_SO),library not found)$(if $(NO_USE_MPI), (disabled: NO_USE_MPI=1))"
	@echo "  CUDA variant $(VARIANT): $(strip $(CUDA_MODE_FLAGS)), sm_$(GPU_ARCH)"
	@echo "  python       $(PYTHON)"

# CPU reference trainer and its test; built in $(BUILD)/cpu and copied to the root (llm.c habit).
$(BUILD)/cpu/%: %.c train_gpt2.c $(CPU_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CPU) $(OMP_FLAGS) -I. $< -lm -o $@

train_gpt2 test_gpt2: %: $(BUILD)/cpu/%
	cp $< $@

# Host unit tests: one binary per dev/test/test_*.c
HOST_TEST_SRCS := $(wildcard dev/test/test_*.c)
HOST_TEST_BINS := $(patsubst dev/test/%.c,$(BUILD)/tests/%,$(HOST_TEST_SRCS))
$(BUILD)/tests/%: dev/test/%.c dev/test/test_harness.h $(CPU_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_CPU) -I. $< -lm -o $@

# Python environment: a venv that sees the system's packages (Debian's python3-torch and numpy)
# plus tiktoken and pytest from PyPI. PyTorch is needed only for the reference state and its tests.
PY_BASE ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
venv: $(VENV)/bin/python
$(VENV)/bin/python:
	$(PY_BASE) -m venv --system-site-packages $(VENV) || \
	  { echo "error: cannot create $(VENV) (Debian: apt-get install python3-venv)"; exit 1; }
	$(VENV)/bin/python -m pip install -q 'tiktoken>=0.6' 'pytest>=7' numpy 'ml_dtypes>=0.5,<0.6'

# Tiny Shakespeare shards and the tokenizer (from ../shared/data offline, else downloaded).
data: $(TS_VAL)
$(TS_VAL) $(TS_TRAIN) $(TOKENIZER) &: dev/data/tinyshakespeare.py dev/data/data_common.py | $(if $(filter python3,$(PYTHON)),,$(VENV)/bin/python)
	$(PYTHON) dev/data/tinyshakespeare.py

# PyTorch reference state (float64 compute) for test_gpt2 / test_gpt2cu.
reference: $(REF_FILES)
$(REF_FILES) &: dev/reference/gpt2_reference.py $(TS_VAL)
	@$(PYTHON) -c 'import torch' 2>/dev/null || { echo "error: $(PYTHON) has no PyTorch (Debian: apt-get install python3-torch, then rm -rf $(VENV))"; exit 1; }
	$(PYTHON) dev/reference/gpt2_reference.py --data $(TS_VAL) --out-dir $(REF_DIR) --device cpu --sf16-states

# Every host test; the last line of output is `N passed, N failed`.
test: $(HOST_TEST_BINS) $(BUILD)/cpu/test_gpt2 $(BUILD)/cpu/train_gpt2 $(REF_FILES) $(TOKENIZER)
	@PYTHON=$(PYTHON) TRAIN_GPT2=$(BUILD)/cpu/train_gpt2 bash dev/test/run_tests.sh \
	  $(HOST_TEST_BINS) $(BUILD)/cpu/test_gpt2 -- $(wildcard dev/test/test_*.py)

# CUDA trainer and its test, one folder per variant; `make train_gpt2cu` also copies to the root.
CUDA_TARGETS := $(BUILD)/$(VARIANT)/train_gpt2cu $(BUILD)/$(VARIANT)/test_gpt2cu
$(BUILD)/$(VARIANT)/%cu: %.cu $(CUDA_DEPS)
	@test -n "$(HAVE_CUDA)" || { echo "error: nvcc and cuBLASLt are needed for $@ (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) $(CUDA_MODE_FLAGS) $(NVCC_INCLUDES) $< $(NVCC_LDFLAGS) -o $@

.PHONY: train_gpt2cu test_gpt2cu cuda
train_gpt2cu test_gpt2cu: %: $(BUILD)/$(VARIANT)/%
	cp $< $@
cuda: $(CUDA_TARGETS) cuda-dev

# Kernel harnesses in dev/cuda (compile only here; run them on a GPU).
CUDA_DEV_SRCS := $(wildcard dev/cuda/*.cu)
CUDA_DEV_BINS := $(patsubst dev/cuda/%.cu,$(BUILD)/$(VARIANT)/dev/%,$(CUDA_DEV_SRCS))
cuda-dev: $(CUDA_DEV_BINS)
$(BUILD)/$(VARIANT)/dev/%: dev/cuda/%.cu $(CUDA_DEPS)
	@test -n "$(HAVE_CUDA)" || { echo "error: nvcc and cuBLASLt are needed for $@ (see make info)"; exit 1; }
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) $(CUDA_MODE_FLAGS) $(NVCC_INCLUDES) $< $(NVCC_LDFLAGS) -o $@

# `make print-VAR` prints a variable (scripts ask e.g. HAVE_CUDA this way)
print-%:
	@echo '$($*)'

clean:
	rm -rf $(BUILD) train_gpt2 test_gpt2 train_gpt2cu test_gpt2cu
