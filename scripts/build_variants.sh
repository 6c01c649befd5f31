#!/usr/bin/env bash
# Compile the CUDA build variants, each into build/<variant>/ (BUILD=... moves them): in every variant
# the trainer and test_gpt2cu, and each dev/cuda harness only in the variants where its code differs
# (HARNESS_TABLE below, the one place that says so). Needs nvcc and the CUDA libraries, not a GPU.
# Used by CI. `make cuda <flags>` still builds every harness of one variant (scripts/device_check.sh
# does that on the GPU machine, then runs whatever build/<variant>/dev/ holds).
#
#   usage: scripts/build_variants.sh [--variants bf16,fp8] [--no-harnesses] [--all-harnesses] [make arguments]
#   e.g.   scripts/build_variants.sh GPU_ARCH=80
#          scripts/build_variants.sh --variants bf16,fp8 --no-harnesses $(scripts/cuda12_toolchain.sh)
# Every selected variant is attempted; the exit status is 1 if any failed (listed at the end).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# variant (= its build/<variant> folder) and the make flags that select it, in build order. bf16, fp16, fp8,
# tcfp12 and tcast take cuDNN's attention where make finds it (their default), and compile the built-in kernels
# as well (tcast: with the TensorCast cast instantiations, which its runs with attention casts use);
# bf16_flash covers the builds without cuDNN (the attention code differs only by if constexpr (kAttentionCudnn)).
VARIANTS=(
    "bf16     PRECISION=BF16"
    "bf16_flash PRECISION=BF16 USE_CUDNN=0"
    "fp16     PRECISION=FP16"
    "fp32     PRECISION=FP32"
    "q115     ENABLE_Q115=1"
    "q115_tf  ENABLE_Q115=1 SF16_TRUE_FORWARD=1"
    "fp8      FP8=1"
    "tcfp12   TCFP12=1"
    "tcast    TCAST=1"
)

# harness (dev/cuda/<name>.cu) and the variants that compile it. Why there:
#   floatX-generic kernels: bf16, and fp16 / fp32 (device_check.sh runs those with --check-only);
#   attention also in tcast (its cast instantiations) and in q115, the one harness whose CPU reference simulates the SF16 boundaries (its
#     kernels are the same in q115_tf: SF16_TRUE_FORWARD changes only the GEMM outputs);
#   the FP8 layer (gemm_fp8, fp8_quant, fp8_epilogues, lowp_producers) in bf16 only: it takes BF16 / fp32 buffers
#     explicitly, whatever floatX is, and the FP8 / TCFP-12 builds do not change it;
#   tcast: the TensorCast cast kernels, in the TCAST=1 build;
#   cutlass_fp8, cutlass_fp8_dgelu: the CUTLASS FP8 GEMMs with fused epilogues (llmc/kernels/gemm/cutlass_*.cu, one
#     sm_90a object per kernel in build/cutlass/, shared by the variants), in bf16 only: explicit FP8 / BF16 buffers,
#     like the FP8 layer (cutlass_fp8_dgelu compares with today's producer, which reads floatX: BF16 builds only).
#   cutlass_tcast_gemm: the CUTLASS BF16 GEMM with the TensorCast MATMUL_OUT cast in its epilogue, in the TCAST=1 build
#     (it compares with that build's cast pass).
#   cutlass_q115_gemm: the CUTLASS BF16 GEMM with the Q1.15 boundary in its epilogue, in q115 and q115_tf (it compares with
#     that build's boundary passes; q115_tf's chain has the Q1.31 step).
#   tcast_producers and tcast_dy in bf16: the cast kernels and producers they check compile the same in any BF16 build (they
#     includes no mode's hooks: only the TensorCast runtime, llmc/modes/tcast/tcast_runtime.cuh, for its GEMM-front
#     check), so the TCAST build adds only its own compile time; gemm_algos (the cuBLASLt algorithm
#     survey) in bf16: it times BF16 GEMMs only.
# A dev/cuda harness missing here is compiled in bf16 (and named in the log); a name here without its
# .cu file is skipped.
HARNESS_TABLE="
adamw          bf16 fp16 fp32
attention      bf16 bf16_flash fp16 fp32 q115 tcast
classifier     bf16 fp16 fp32
encoder        bf16 fp16 fp32
gelu           bf16 fp16 fp32
global_norm    bf16 fp16 fp32
layernorm      bf16 fp16 fp32
matmul         bf16 fp16 fp32
tensor_stats   bf16 fp16 fp32
fp8_quant      bf16
gemm_fp8       bf16
fp8_epilogues  bf16
lowp_producers bf16
cutlass_fp8    bf16
cutlass_fp8_dgelu bf16
cutlass_tcast_gemm tcast
cutlass_q115_gemm q115 q115_tf
tcast          tcast
tcast_producers bf16
tcast_dy       bf16
gemm_algos     bf16
"

only="" harnesses=table
while [ $# -gt 0 ]; do
    case "$1" in
        --variants) only=",$2,"; shift 2 ;;
        --no-harnesses) harnesses=none; shift ;;
        --all-harnesses) harnesses=all; shift ;;
        *) break ;;
    esac
done

# harnesses of variant $1 under the table (plus unlisted harnesses in bf16)
harnesses_of() {
    local v=$1 name vs out=() f
    while read -r name vs; do
        [ -n "$name" ] || continue
        [ -f "dev/cuda/$name.cu" ] || continue
        [[ " $vs " == *" $v "* ]] && out+=("$name")
    done <<< "$HARNESS_TABLE"
    if [ "$v" = bf16 ]; then
        for f in dev/cuda/*.cu; do
            name=$(basename "$f" .cu)
            grep -qE "^$name( |$)" <<< "$HARNESS_TABLE" || { echo "note: dev/cuda/$name.cu is not in HARNESS_TABLE: compiled in bf16 only" >&2; out+=("$name"); }
        done
    fi
    echo "${out[*]}"
}

jobs=$(nproc 2>/dev/null || echo 2)
failed=()
t_all=$(date +%s)
for entry in "${VARIANTS[@]}"; do
    read -r v flags <<< "$entry"
    [ -z "$only" ] || [[ "$only" == *",$v,"* ]] || continue
    case $harnesses in
        none) h_arg=(HARNESSES=) ;;
        all) h_arg=() ;;
        *) h_arg=("HARNESSES=$(harnesses_of "$v")") ;;
    esac
    echo "-- make cuda $flags ${h_arg[*]} $*"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    if make -k -j"$jobs" --no-print-directory cuda $flags "${h_arg[@]}" "$@"; then
        echo "-- $v: ok ($(( $(date +%s) - t0 )) s)"
    else
        echo "-- $v: FAILED ($(( $(date +%s) - t0 )) s)"
        failed+=("$v")
    fi
done
echo "-- variants compiled in $(( ($(date +%s) - t_all) / 60 )) min $(( ($(date +%s) - t_all) % 60 )) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "error: build variants failed: ${failed[*]}"
    exit 1
fi
