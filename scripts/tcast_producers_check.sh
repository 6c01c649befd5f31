#!/usr/bin/env bash
# tcast_producers_check.sh - the GPU check of the TensorCast casts fused into their producers (issue 26
# item 2, doc/TCAST.md 5.5): builds the TCAST=1 trainer and the harnesses tcast_producers, tcast_dy and tcast,
# runs them (bit-exactness: GELU, GELU', LayerNorm and residual + LayerNorm with their casts; a dY's two casts and
# column sums from one read, tcast_cast_dual, and the GEMM backend's backward with it), then times d12
# B=64 T=1024 on Gutenberg for 25 steps in three configurations: the empty plan, --cast-gemm
# x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5 (fused) and the same with --cast-fuse 0 (every cast a separate pass), and
# runs 8 steps of a stochastic-rounding plan fused and unfused. Prints a table last: mean step
# time over steps 6..25, ratio to the empty plan, and whether each fused run's loss / norm lines equal the
# unfused run's byte for byte (they must).
# usage: scripts/tcast_producers_check.sh   (from the repository root; data: dev/data/gutenberg.py)
set -euo pipefail
J=${J:-16}
make -j"$J" train_gpt2cu cuda-dev TCAST=1 HARNESSES="tcast tcast_producers tcast_dy" 2>&1 | tail -3
OUT=$(mktemp -d)
echo "== tcast_producers harness (failures, timing, summary; all lines in $OUT/producers.txt)"
prc=0
build/tcast/dev/tcast_producers > "$OUT/producers.txt" 2>&1 || prc=$?
grep -E "FAIL|bad data|error" "$OUT/producers.txt" || true
sed -n '/^timing/,$p' "$OUT/producers.txt"
echo "== tcast_dy harness (failures, timing; all lines in $OUT/dy.txt)"
drc=0
build/tcast/dev/tcast_dy > "$OUT/dy.txt" 2>&1 || drc=$?
grep -E "FAIL|bad data|error" "$OUT/dy.txt" || true
sed -n '/^timing/,$p' "$OUT/dy.txt"
echo "== tcast harness (--check-only)"
build/tcast/dev/tcast --check-only | tail -2 || true
ls data/gutenberg/gutenberg_train_*.bin > /dev/null 2>&1 || python3 dev/data/gutenberg.py
GEMM="x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5"
SR="x=mxfp8e4@stochastic,w=mxfp8e4,dy=mxfp8e5@stochastic"
run() {  # run NAME STEPS FLAGS...
    local name=$1 steps=$2; shift 2
    build/tcast/train_gpt2cu -e d12 -b 64 -t 1024 -x "$steps" -v 0 -s 0 -i "data/gutenberg/gutenberg_train_*.bin" "$@" > "$OUT/$name.log" 2>&1 \
        || { echo "error: $name failed:"; tail -20 "$OUT/$name.log"; exit 1; }
}
run empty 25
run fused 25 --cast-gemm "$GEMM"
run unfused 25 --cast-gemm "$GEMM" --cast-fuse 0
run sr_fused 8 --cast-gemm "$SR"
run sr_unfused 8 --cast-gemm "$SR" --cast-fuse 0
mean() { awk -F'|' '/^step +[0-9]+\/25 \| loss/ { split($1, a, /[ \/]+/); s = a[2] + 0; if (s >= 6) { sub(/ ms.*/, "", $5); t += $5; n++ } } END { printf "%.2f", n ? t / n : -1 }' "$OUT/$1.log"; }
losses() { grep -E '^step +[0-9]+/[0-9]+ \| loss' "$OUT/$1.log" | sed -E 's/ \| lr .*//'; }
same() { [ "$(losses "$1")" = "$(losses "$2")" ] && [ -n "$(losses "$1")" ] && echo yes || echo NO; }
e=$(mean empty); f=$(mean fused); u=$(mean unfused)
echo
echo "== d12 B=64 T=1024, build/tcast/train_gpt2cu, mean ms of steps 6..25 (logs in $OUT)"
printf '%-40s %10s %8s\n' config ms ratio
printf '%-40s %10s %8s\n' "empty plan" "$e" "1.000"
printf '%-40s %10s %8.3f\n' "--cast-gemm $GEMM (fused)" "$f" "$(awk -v a="$f" -v b="$e" 'BEGIN { print a / b }')"
printf '%-40s %10s %8.3f\n' "  same, --cast-fuse 0" "$u" "$(awk -v a="$u" -v b="$e" 'BEGIN { print a / b }')"
echo "tcast_producers harness: $(tail -1 "$OUT/producers.txt") (exit $prc)"
echo "tcast_dy harness: $(tail -1 "$OUT/dy.txt") (exit $drc)"
echo "fused losses and norms == --cast-fuse 0's, byte for byte: $(same fused unfused)"
echo "same with stochastic rounding ($SR, 8 steps): $(same sr_fused sr_unfused)"
