#!/usr/bin/env bash
# tcast_producers_check.sh - the GPU check of the TensorCast casts fused into their producers (issue 26
# item 2, doc/TCAST.md 5.5): builds the TCAST=1 trainer and the harnesses tcast_producers and tcast, runs
# both (bit-exactness), then times d12 B=64 T=1024 on Gutenberg for 25 steps in three configurations:
# the empty plan, --cast-gemm x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5 (fused) and the same with --cast-fuse 0
# (every cast a separate pass). Prints a table last: mean step time over steps 6..25, ratio to the empty
# plan, and whether the fused run's loss / norm lines equal the unfused run's byte for byte (they must).
# usage: scripts/tcast_producers_check.sh   (from the repository root; data: dev/data/gutenberg.py)
set -euo pipefail
J=${J:-16}
make -j"$J" train_gpt2cu cuda-dev TCAST=1 HARNESSES="tcast tcast_producers" 2>&1 | tail -3
echo "== tcast_producers harness"
build/tcast/dev/tcast_producers | tail -45
echo "== tcast harness (--check-only)"
build/tcast/dev/tcast --check-only | tail -2
ls data/gutenberg/gutenberg_train_*.bin > /dev/null 2>&1 || python3 dev/data/gutenberg.py
OUT=$(mktemp -d)
GEMM="x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5"
run() {  # run NAME FLAGS...
    local name=$1; shift
    build/tcast/train_gpt2cu -e d12 -b 64 -t 1024 -x 25 -v 0 -s 0 -i "data/gutenberg/gutenberg_train_*.bin" "$@" > "$OUT/$name.log" 2>&1 \
        || { echo "error: $name failed:"; tail -20 "$OUT/$name.log"; exit 1; }
}
run empty
run fused --cast-gemm "$GEMM"
run unfused --cast-gemm "$GEMM" --cast-fuse 0
mean() { awk -F'|' '/^step +[0-9]+\/25 \| loss/ { split($1, a, /[ \/]+/); s = a[2] + 0; if (s >= 6) { sub(/ ms.*/, "", $5); t += $5; n++ } } END { printf "%.2f", n ? t / n : -1 }' "$OUT/$1.log"; }
losses() { grep -E '^step +[0-9]+/25 \| loss' "$OUT/$1.log" | sed -E 's/ \| lr .*//'; }
e=$(mean empty); f=$(mean fused); u=$(mean unfused)
same=$([ "$(losses fused)" = "$(losses unfused)" ] && [ -n "$(losses fused)" ] && echo yes || echo NO)
echo
echo "== d12 B=64 T=1024, build/tcast/train_gpt2cu, mean ms of steps 6..25 (logs in $OUT)"
printf '%-40s %10s %8s\n' config ms ratio
printf '%-40s %10s %8s\n' "empty plan" "$e" "1.000"
printf '%-40s %10s %8.3f\n' "--cast-gemm $GEMM (fused)" "$f" "$(awk -v a="$f" -v b="$e" 'BEGIN { print a / b }')"
printf '%-40s %10s %8.3f\n' "  same, --cast-fuse 0" "$u" "$(awk -v a="$u" -v b="$e" 'BEGIN { print a / b }')"
echo "fused losses and norms == --cast-fuse 0's, byte for byte: $same"
