#!/usr/bin/env bash
# tcast_attention_check.sh - the GPU check of the TensorCast attention kernels (issue 26, doc/TCAST.md 6): builds the
# TCAST=1 attention harness, trainer and test_gpt2cu with the built-in kernels (USE_CUDNN=0), makes the reference
# states when build/ref lacks them, then runs, one at a time on the GPU:
#   the harness (every check, bit for bit where it can be, then the timing table of the casts against plain
#   attention at (64,12,1024,64): its last lines, with the issue's 1.5x bar), as soon as it is built;
#   the harness's --tc-sweep (each launch configuration bit for bit against the defaults, then timed);
#   then (correctness only) d4 B=8 T=256 10 steps with --cast all=mxfp8e4 three ways: plain, -r 2 (LayerNorm recomputed in the backward:
#   the attention forward is not, its kept group scales live per layer) and --cast-stats 2 (the counting forward,
#   which keeps the group scales from its staged loop), together: their loss lines must be equal; the plain run's are
#   printed for comparison with other trees; then test_gpt2cu alone (the TCAST states, the attention-site and all=
#   cases, the probabilities' codes kept and dropped).
# Prints a table last; exit status 1 if a check fails or a pair of runs differs.
# usage: scripts/tcast_attention_check.sh   (from the repository root; data: the Tiny Shakespeare shards, made by
# dev/data/tinyshakespeare.py when missing)
set -uo pipefail
J=${J:-16}
V=(TCAST=1 USE_CUDNN=0)
B=build/tcast_flash
OUT=$(mktemp -d)
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
ls data/tinyshakespeare/tiny_shakespeare_train.bin > /dev/null 2>&1 || python3 dev/data/tinyshakespeare.py > "$OUT/data.log" 2>&1
if [ ! -f build/ref/gpt2_ref_debug_state_tcast_all.bin ]; then
    python3 dev/reference/gpt2_reference.py --device cuda --out-dir build/ref --sf16-states --tcast-states --lowp-states \
        > "$OUT/reference.log" 2>&1 &
    PREF=$!
else
    PREF=
fi
make -j"$J" "$B/train_gpt2cu" "$B/test_gpt2cu" "${V[@]}" > "$OUT/build_trainer.log" 2>&1 &
PTR=$!
make -j"$J" "$B/dev/attention" "${V[@]}" > "$OUT/build_harness.log" 2>&1 || { echo "error: harness build failed"; tail -20 "$OUT/build_harness.log"; exit 1; }
echo "harness built ($(el))"
hrc=0; timeout 240 "$B/dev/attention" > "$OUT/harness.txt" 2>&1 || hrc=$?
echo "harness done, exit $hrc ($(el))"
src=0; timeout 180 "$B/dev/attention" --tc-sweep > "$OUT/sweep.txt" 2>&1 || src=$?
echo "--tc-sweep done, exit $src ($(el))"
wait $PTR || { echo "error: trainer / test build failed"; tail -20 "$OUT/build_trainer.log"; exit 1; }
[ -n "$PREF" ] && { wait "$PREF" || { echo "error: reference states failed"; tail -20 "$OUT/reference.log"; exit 1; }; }
echo "trainer, test and reference states ready ($(el))"
# correctness only from here: the d4 trainings share the GPU, then test_gpt2cu alone (its check_kept_codes holds all but
# 1 GiB of the device for a moment)
run() {  # run NAME FLAGS...: the trainer, exit status 1 on failure
    timeout 180 "$B/train_gpt2cu" "${@:2}" > "$OUT/$1.log" 2>&1
}
D4=(-e d4 -b 8 -t 256 -x 10 -v 0 -s 0 --cast all=mxfp8e4)
run d4 "${D4[@]}" & P1=$!
run d4_r2 "${D4[@]}" -r 2 & P2=$!
run d4_stats "${D4[@]}" --cast-stats 2 & P3=$!
drc=0
for p in $P1 $P2 $P3; do wait "$p" || drc=1; done
[ $drc = 0 ] || { echo "error: a d4 training failed:"; tail -5 "$OUT"/d4*.log; }
trc=0; timeout 240 "$B/test_gpt2cu" > "$OUT/test.txt" 2>&1 || trc=$?
echo "the d4 trainings and test_gpt2cu (exit $trc) done ($(el))"
losses() { grep -E '^step +[0-9]+/[0-9]+ \| loss' "$OUT/$1.log" | sed -E 's/ \| lr .*//'; }
same() { [ -n "$(losses "$1")" ] && [ "$(losses "$1")" = "$(losses "$2")" ] && echo "yes ($(losses "$1" | wc -l) lines)" || echo NO; }

echo
echo "== failures in the harness, the sweep and test_gpt2cu (logs in $OUT)"
grep -E "FAIL|DIFFER|WRONG|error" "$OUT/harness.txt" "$OUT/sweep.txt" "$OUT/test.txt" | head -20 || true
echo "== kept group scales (tc_run_case k1-k3): the mxfp8e4 / 64-key-tile lines"
grep -E "^tcast case +(2|11) " "$OUT/harness.txt" | sed -E 's/.*(B=[0-9]+ T=[0-9]+).*(kept scales.*)/\1 | \2/' || true
echo "== --tc-sweep table"
sed -n '/^--tc-sweep on/,$p' "$OUT/sweep.txt"
echo "== d4 --cast all=mxfp8e4 loss lines"
losses d4
echo "== memory plan (d4)"
grep -E '^memory plan' "$OUT/d4.log" || true
echo "== TensorCast attention timing (harness, last lines)"
sed -n '/^TensorCast attention vs plain/,$p' "$OUT/harness.txt"
echo
echo "== summary ($(el))"
bad=0
st() { [ "$1" = 0 ] && echo ok || echo "FAIL (exit $1)"; }
for rc in $hrc $src $trc $drc; do [ "$rc" = 0 ] || bad=1; done
printf '%-58s %s\n' "attention harness (checks + timing table)" "$(st $hrc): $(grep -E '^[0-9]+ passed' "$OUT/harness.txt" | tail -1)"
printf '%-58s %s\n' "attention harness --tc-sweep" "$(st $src): $(grep -E '^[0-9]+ passed' "$OUT/sweep.txt" | tail -1)"
printf '%-58s %s\n' "test_gpt2cu (TCAST)" "$(st $trc): $(tail -1 "$OUT/test.txt")"
printf '%-58s %s\n' "d4 all=mxfp8e4 trainings ran" "$(st $drc)"
for pair in "-r 2:d4_r2" "--cast-stats 2:d4_stats"; do
    s=$(same d4 "${pair##*:}")
    case "$s" in yes*) ;; *) bad=1 ;; esac
    printf '%-58s %s\n' "d4 all=mxfp8e4 ${pair%%:*}: loss lines == plain run" "$s"
done
printf '%-58s %s\n' "bar (issue 26, harness timing)" "$(grep -E '^bar \(issue 26\)' "$OUT/harness.txt" | tail -1)"
exit $bad
