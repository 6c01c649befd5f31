#!/usr/bin/env bash
# tcast_sites_check.sh - the GPU check of the boundary-site casts run inside the kernels around them (issue 26,
# doc/TCAST.md 5.5): the fc layer's GELU with the casts of its input and output, the residual + LayerNorm with
# the casts of the projection output, the residual and the LayerNorm output, and the training step's classifier with
# the two casts of the logits (the LM head's matmul_out, then logits). Builds the TCAST=1 trainer and the
# tcast_producers harness, runs the harness (bit for bit: every fused producer against its passes, the site casts
# included; then its timing rows), trains d4 B=8 T=256 for 10 steps with --cast all=mxfp8e4, all=mxfp6e2@stochastic
# and all=mxfp8e4 with -r 1 (the GELU recomputation in the backward), each with --cast-fuse 1 and 0 (their loss and
# norm lines must be equal byte for byte), and times d12 B=64 T=1024 for 24 steps with --cast all=mxfp8e4, fused and
# not (loss lines compared too), and with the empty plan (the BF16 code paths) (the trainer's median step after 3
# warm-up steps). Prints a table last; exit status 1 if the harness fails or any pair of runs differs.
# usage: scripts/tcast_sites_check.sh   (from the repository root; data: the Tiny Shakespeare shards, made by
# dev/data/tinyshakespeare.py when missing)
set -euo pipefail
J=${J:-16}
make -j"$J" train_gpt2cu cuda-dev TCAST=1 HARNESSES="tcast_producers" 2>&1 | tail -3
OUT=$(mktemp -d)
ls data/tinyshakespeare/tiny_shakespeare_train.bin > /dev/null 2>&1 || python3 dev/data/tinyshakespeare.py
prc=0
build/tcast/dev/tcast_producers > "$OUT/producers.txt" 2>&1 || prc=$?
echo "== tcast_producers harness: failures, the GELU-site large / front lines, the classifier's runtime and sensitivity"
echo "   lines, then the timing rows (every line in $OUT/producers.txt)"
grep -E "FAIL|bad data|error" "$OUT/producers.txt" || true
grep -E "gelu-sites .*(large|fuse|65536)|front fc forward|classifier (runtime|sensitivity)" "$OUT/producers.txt" || true
sed -n '/^timing/,$p' "$OUT/producers.txt"
run() {  # run NAME FLAGS...
    local name=$1; shift
    build/tcast/train_gpt2cu "$@" > "$OUT/$name.log" 2>&1 || { echo "error: $name failed:"; tail -20 "$OUT/$name.log"; exit 1; }
}
D4=(-e d4 -b 8 -t 256 -x 10 -v 0 -s 0)
D12=(-e d12 -b 64 -t 1024 -x 24 -v 0 -s 0)
run d4_f "${D4[@]}" --cast all=mxfp8e4 --cast-fuse 1
run d4_u "${D4[@]}" --cast all=mxfp8e4 --cast-fuse 0
run d4_sr_f "${D4[@]}" --cast all=mxfp6e2@stochastic --cast-fuse 1
run d4_sr_u "${D4[@]}" --cast all=mxfp6e2@stochastic --cast-fuse 0
run d4_r1_f "${D4[@]}" -r 1 --cast all=mxfp8e4 --cast-fuse 1
run d4_r1_u "${D4[@]}" -r 1 --cast all=mxfp8e4 --cast-fuse 0
run d12_empty "${D12[@]}"
run d12_f "${D12[@]}" --cast all=mxfp8e4 --cast-fuse 1
run d12_u "${D12[@]}" --cast all=mxfp8e4 --cast-fuse 0
losses() { grep -E '^step +[0-9]+/[0-9]+ \| loss' "$OUT/$1.log" | sed -E 's/ \| lr .*//'; }
same() { [ -n "$(losses "$1")" ] && [ "$(losses "$1")" = "$(losses "$2")" ] && echo "yes ($(losses "$1" | wc -l) lines)" || echo NO; }
median() { sed -n 's/^median step \([0-9.]*\) ms.*/\1/p' "$OUT/$1.log"; }
e=$(median d12_empty); f=$(median d12_f); u=$(median d12_u)
ratio() { awk -v a="$1" -v b="$e" 'BEGIN { printf "%.3fx the empty plan", a / b }'; }
echo
echo "== summary (logs in $OUT)"
printf '%-62s %s\n' "tcast_producers harness" "$(tail -1 "$OUT/producers.txt") (exit $prc)"
bad=$prc
for pair in "d4 all=mxfp8e4:d4" "d4 all=mxfp6e2@stochastic:d4_sr" "d4 all=mxfp8e4 -r 1:d4_r1" "d12 B=64 all=mxfp8e4:d12"; do
    s=$(same "${pair##*:}_f" "${pair##*:}_u")
    case "$s" in yes*) ;; *) bad=1 ;; esac
    printf '%-62s %s\n' "${pair%:*}: --cast-fuse 1 loss/norm lines == --cast-fuse 0" "$s"
done
printf '%-62s %s\n' "d12 B=64 median step ms, empty plan" "$e"
printf '%-62s %s\n' "d12 B=64 all=mxfp8e4 median step ms, --cast-fuse 1" "$f ($(ratio "$f"))"
printf '%-62s %s\n' "d12 B=64 all=mxfp8e4 median step ms, --cast-fuse 0" "$u ($(ratio "$u"))"
printf '%-62s %s\n' "  saved ms (fuse 0 - fuse 1)" "$(awk -v a="$u" -v b="$f" 'BEGIN { printf "%.2f", a - b }')"
exit $((bad != 0))
