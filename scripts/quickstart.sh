#!/usr/bin/env bash
# Quick start on a fresh machine: install what is missing, prepare Tiny Shakespeare, train a GPT-2 on it.
#   - scripts/setup_env.sh first: system packages with apt-get (gcc, make, python3-venv, numpy; when
#     it cannot, it names the command and we stop) and the .venv with tiktoken from PyPI,
#   - with a working NVIDIA GPU and nvcc: the CUDA trainer on a d6 model (L=6, C=384), 150 steps,
#   - otherwise the CPU fp32 reference trainer on a small model (d4: L=4, C=256, NH=4; T=256),
#     one epoch (300 steps, a few minutes on 2 cores), printing validation loss and samples.
# Outputs go to log_quickstart/ (main.log, checkpoints). Extra arguments are passed to the trainer.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup_env.sh                                 # before any make: it may install make itself
make --no-print-directory data                       # tokenized shards + tokenizer in data/
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
   && [ "$(make -s --no-print-directory print-HAVE_CUDA)" = 1 ]; then
    make -j2 --no-print-directory train_gpt2cu   # -j2: the cuDNN attention object builds beside the trainer
    exec ./train_gpt2cu -e d6 -b 32 -t 256 -x 150 -l 1e-3 -u 20 -q 0.1 -c 0.1 -v 50 -m 8 -s 50 -o log_quickstart "$@"
fi
echo "no GPU trainer available here: training the CPU reference on a small model"
make --no-print-directory train_gpt2
exec ./train_gpt2 -e d4 -b 4 -t 256 -x 300 -v 50 -m 20 -s 100 -g 64 -o log_quickstart "$@"
