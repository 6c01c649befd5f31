#!/usr/bin/env bash
# Compile every supported CUDA build variant (each into build/<variant>/). Needs nvcc and the CUDA
# libraries, not a GPU. Used by CI and by scripts/device_check.sh.
#   usage: scripts/build_variants.sh [extra make arguments, e.g. GPU_ARCH=90]
set -euo pipefail
cd "$(dirname "$0")/.."
variants=(
    "PRECISION=BF16"
    "PRECISION=FP16"
    "PRECISION=FP32"
    "ENABLE_Q115=1"
    "ENABLE_Q115=1 SF16_TRUE_FORWARD=1"
    "FP8=1"
    "TCFP12=1"
)
jobs=$(nproc 2>/dev/null || echo 2)
for v in "${variants[@]}"; do
    echo "-- make cuda $v $*"
    # shellcheck disable=SC2086
    make -j"$jobs" --no-print-directory cuda $v "$@"
done
