#!/usr/bin/env bash
# Multi-GPU training on one machine, any number of GPUs: one process per GPU.
#   scripts/multi_gpu.sh N [train_gpt2cu flags...]
# Example (GPT-2 124M on 4 GPUs, ZeRO-1, 64 sequences of 1024 tokens per GPU):
#   scripts/multi_gpu.sh 4 -e d12 -b 64 -t 1024 -z 1 -i "data/gutenberg/gutenberg_train_*.bin" \
#       -j "data/gutenberg/gutenberg_val_*.bin" -o log_d12
# BIN picks the build (default build/bf16/train_gpt2cu, e.g. BIN=build/q115/train_gpt2cu).
# With mpirun on the PATH the processes are started by it (the rendezvous is MPI when the binary has
# MPI, see `make info`, else TCP from mpirun's rank variables); without it (or with NO_MPIRUN=1) they
# are started here with -pi tcp -pn N -pr R. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
set -euo pipefail
if [ $# -lt 1 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 N [train_gpt2cu flags...]   (N = number of GPUs)" >&2
    exit 2
fi
N=$1
shift
BIN=${BIN:-build/bf16/train_gpt2cu}
[ -x "$BIN" ] || { echo "error: $BIN not found: build it first (make train_gpt2cu)" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0
if [ "$N" -eq 1 ]; then exec "$BIN" "$@"; fi
if command -v mpirun > /dev/null && [ -z "${NO_MPIRUN:-}" ]; then
    extra=()
    [ "$(id -u)" -eq 0 ] && extra+=(--allow-run-as-root)
    exec mpirun -np "$N" "${extra[@]}" --bind-to none -x NCCL_NVLS_ENABLE "$BIN" "$@"
fi
port=$((29500 + RANDOM % 2000))
pids=()
for ((r = 0; r < N; r++)); do
    "$BIN" "$@" -pi tcp -pn "$N" -pr "$r" -ps "127.0.0.1:$port" &
    pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
