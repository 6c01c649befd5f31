#!/usr/bin/env bash
# tcast_gelu_check.sh - the GPU check of the fc layer's GELU with its site casts in one kernel (issue 26, doc/TCAST.md
# 5.5 "The site casts around GELU"): builds the TCAST=1 trainer and the tcast_producers harness, runs the harness
# (bit for bit against the passes; timing: the passes against one kernel, and the GELU epilogue choice of a
# gelu_out-only run), then trainer runs whose loss and norm lines must be identical with --cast-fuse 1 and 0: d4 B=8
# T=256, 10 steps, with --cast all=mxfp8e4, all=mxfp6e2@stochastic and all=mxfp8e4 with -r 1 (the GELU recomputation
# in the backward); and the d12 B=64 T=1024 median step of --cast all=mxfp8e4 fused and unfused (24 steps; their
# loss lines compared too). Prints a table last; exit status 1 if the harness fails or any pair of runs differs.
# usage: scripts/tcast_gelu_check.sh   (from the repository root; data: dev/data/tinyshakespeare.py, run if missing)
set -euo pipefail
J=${J:-16}
make -j"$J" build/tcast/train_gpt2cu build/tcast/dev/tcast_producers TCAST=1 2>&1 | tail -3
OUT=$(mktemp -d)
ls data/tinyshakespeare/tiny_shakespeare_train.bin data/gpt2_tokenizer.bin > /dev/null 2>&1 || python3 dev/data/tinyshakespeare.py
echo "== tcast_producers harness (failures, the GELU-site lines, timing; all lines in $OUT/producers.txt)"
prc=0
build/tcast/dev/tcast_producers > "$OUT/producers.txt" 2>&1 || prc=$?
grep -E "FAIL|bad data|error" "$OUT/producers.txt" || true
grep -E "gelu-sites .*(large|fuse|65536)|front fc forward" "$OUT/producers.txt" || true
sed -n '/^timing/,$p' "$OUT/producers.txt" | grep -v "passed, .* failed" || true
run() {  # run NAME FLAGS...
    local name=$1; shift
    build/tcast/train_gpt2cu -v 0 -s 0 "$@" > "$OUT/$name.log" 2>&1 || { echo "error: $name failed:"; tail -20 "$OUT/$name.log"; exit 1; }
}
D4=(-e d4 -b 8 -t 256 -x 10)
D12=(-e d12 -b 64 -t 1024 -x 24)
run d4_e4_fused "${D4[@]}" --cast all=mxfp8e4
run d4_e4_unfused "${D4[@]}" --cast all=mxfp8e4 --cast-fuse 0
run d4_sr_fused "${D4[@]}" --cast all=mxfp6e2@stochastic
run d4_sr_unfused "${D4[@]}" --cast all=mxfp6e2@stochastic --cast-fuse 0
run d4_r1_fused "${D4[@]}" -r 1 --cast all=mxfp8e4
run d4_r1_unfused "${D4[@]}" -r 1 --cast all=mxfp8e4 --cast-fuse 0
run d12_fused "${D12[@]}" --cast all=mxfp8e4
run d12_unfused "${D12[@]}" --cast all=mxfp8e4 --cast-fuse 0
losses() { grep -E '^step +[0-9]+/[0-9]+ \| loss' "$OUT/$1.log" | sed -E 's/ \| lr .*//'; }
same() { [ -n "$(losses "$1")" ] && [ "$(losses "$1")" = "$(losses "$2")" ] && echo yes || echo NO; }
median() { sed -nE 's/^median step ([0-9.]+) ms.*/\1/p' "$OUT/$1.log"; }
f=$(median d12_fused); u=$(median d12_unfused)
echo
echo "== summary (logs in $OUT)"
echo "tcast_producers harness: $(tail -1 "$OUT/producers.txt") (exit $prc)"
bad=$prc
for pair in d4_e4 d4_sr d4_r1 d12; do
    s=$(same "${pair}_fused" "${pair}_unfused")
    [ "$s" = yes ] || bad=1
    printf '%-58s %s\n' "loss/norm lines, --cast-fuse 1 == 0: $pair" "$s"
done
echo "  (d4_e4: all=mxfp8e4; d4_sr: all=mxfp6e2@stochastic; d4_r1: all=mxfp8e4 -r 1; d12: all=mxfp8e4 B=64)"
grep -E '^recompute|recompute=' "$OUT/d12_fused.log" | head -1 || true
printf '%-58s %s\n' "d12 B=64 all=mxfp8e4 median step, fused (ms)" "$f"
printf '%-58s %s\n' "d12 B=64 all=mxfp8e4 median step, --cast-fuse 0 (ms)" "$u"
printf '%-58s %s\n' "saved (ms)" "$(awk -v a="$u" -v b="$f" 'BEGIN { printf "%.2f", a - b }')"
exit $((bad != 0))
