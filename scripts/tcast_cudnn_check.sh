#!/usr/bin/env bash
# tcast_cudnn_check.sh - the GPU check of the TCAST=1 build on cuDNN's attention (llmc/kernels/attention/
# attention.cuh, attention_uses_cudnn: a run whose plan casts neither attn_scores nor attn_probs takes cuDNN's
# fused attention, a run that casts either the built-in kernels with their casts). Builds
# build/bf16/train_gpt2cu and build/tcast/{train,test}_gpt2cu (both with cuDNN: make's default where it finds
# it) while the data and the reference state are prepared, then:
#   1. build/tcast/test_gpt2cu against the reference (its plan casts no attention site: cuDNN's attention);
#   2. d4 on Tiny Shakespeare, 10 steps, BF16 against the TCAST empty plan: the loss / norm of every step line
#      must be identical byte for byte (the empty plan attaches nothing, so the TCAST build then runs the
#      BF16 build's code paths, attention included); plus a TCAST run with --cast attn_scores=mxfp8e4, whose
#      start-up table and numeric config line must name the built-in kernels;
#   3. d12 B=64 T=1024 on Gutenberg, 20 steps: bf16, tcast (empty plan), tcast --cast attn_scores=mxfp8e4;
#      the median step lines and the ratios to bf16 (the issue's bar for the empty plan: <= 1.01x).
# Prints a table last. Exit status 1 when a build, the test or the loss comparison fails.
# usage: scripts/tcast_cudnn_check.sh   (from the repository root; CUDNN_FRONTEND_PATH where the frontend
#        headers are not in the system or the venv; LLMC_SHARED_DATA for the offline data scripts; J=16)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
J=${J:-16}
OUT=$(mktemp -d)
fail=0

# data (and the reference state, which reads the Tiny Shakespeare shard) while the trainers compile
( python3 dev/data/tinyshakespeare.py && python3 dev/reference/gpt2_reference.py --device cuda --out-dir build/ref --tcast-states ) \
    > "$OUT/prep_ref.log" 2>&1 &
prep_ref=$!
python3 dev/data/gutenberg.py > "$OUT/prep_gutenberg.log" 2>&1 &
prep_gut=$!
# the cuDNN object first (bf16 and tcast share build/cudnn/), then both variants at once
t0=$(date +%s)
make -j"$J" --no-print-directory build/cudnn/attention_cudnn.o TCAST=1 > "$OUT/make_cudnn.log" 2>&1 || { tail -20 "$OUT/make_cudnn.log"; exit 1; }
make -j"$J" --no-print-directory build/bf16/train_gpt2cu > "$OUT/make_bf16.log" 2>&1 &
mb=$!
make -j"$J" --no-print-directory build/tcast/train_gpt2cu build/tcast/test_gpt2cu TCAST=1 > "$OUT/make_tcast.log" 2>&1 &
mt=$!
wait $mb; rb=$?
wait $mt; rt=$?
build_s=$(( $(date +%s) - t0 ))
[ $rb = 0 ] || { echo "error: bf16 build failed:"; grep -m10 error "$OUT/make_bf16.log"; exit 1; }
[ $rt = 0 ] || { echo "error: tcast build failed:"; grep -m10 error "$OUT/make_tcast.log"; exit 1; }
wait $prep_ref || { echo "error: data / reference state failed:"; tail -20 "$OUT/prep_ref.log"; exit 1; }

# 1. the TCAST test against the reference
timeout 300 build/tcast/test_gpt2cu > "$OUT/test_tcast.log" 2>&1
rc_test=$?
[ $rc_test = 0 ] || fail=1

# 2. d4: BF16 and the TCAST empty plan, byte for byte; an attention cast names the built-in kernels
D4=(-e d4 -b 8 -t 256 -x 10 -v 0 -s 0)
timeout 200 build/bf16/train_gpt2cu "${D4[@]}" > "$OUT/d4_bf16.log" 2>&1
timeout 200 build/tcast/train_gpt2cu "${D4[@]}" > "$OUT/d4_tcast.log" 2>&1
timeout 200 build/tcast/train_gpt2cu "${D4[@]}" --cast attn_scores=mxfp8e4 > "$OUT/d4_tcast_attn.log" 2>&1
losses() { grep -E '^step +[0-9]+/[0-9]+ \| loss' "$1" | sed -E 's/ \| lr .*//'; }
n_lines=$(losses "$OUT/d4_bf16.log" | grep -c .)
if [ "$n_lines" -eq 10 ] && [ "$(losses "$OUT/d4_bf16.log")" = "$(losses "$OUT/d4_tcast.log")" ]; then same="yes (10 loss / norm lines)"
else same="NO"; fail=1; diff <(losses "$OUT/d4_bf16.log") <(losses "$OUT/d4_tcast.log") | head -6; fi
attn() { echo "$(grep -m1 -E '^\| attention ' "$1" | sed -E 's/^\| attention +\| *//; s/ *\|$//') [$(grep -m1 -o 'attention=[a-z]*' "$1")]"; }
want() { grep -q "attention=$2" "$1" && echo ok || { fail=1; echo "WRONG (want attention=$2)"; }; }
w_bf16=$(want "$OUT/d4_bf16.log" cudnn); w_tc=$(want "$OUT/d4_tcast.log" cudnn); w_attn=$(want "$OUT/d4_tcast_attn.log" flash)

# 3. d12 B=64 T=1024 on Gutenberg, 20 steps
wait $prep_gut || { echo "error: Gutenberg data failed:"; tail -20 "$OUT/prep_gutenberg.log"; exit 1; }
D12=(-e d12 -b 64 -t 1024 -x 20 -v 0 -s 0 -i "data/gutenberg/gutenberg_train_*.bin")
timeout 200 build/bf16/train_gpt2cu "${D12[@]}" > "$OUT/d12_bf16.log" 2>&1
timeout 200 build/tcast/train_gpt2cu "${D12[@]}" > "$OUT/d12_tcast.log" 2>&1
timeout 200 build/tcast/train_gpt2cu "${D12[@]}" --cast attn_scores=mxfp8e4 > "$OUT/d12_tcast_attn.log" 2>&1
med() { grep -m1 -o 'median step.*' "$1" || echo "(no median line: $(grep -m1 '^error' "$1"))"; }
ms() { grep -m1 -o 'median step [0-9.]* ms' "$1" | awk '{print $3}'; }
ratio() { awk -v a="$(ms "$1")" -v b="$(ms "$OUT/d12_bf16.log")" 'BEGIN { if (a > 0 && b > 0) printf "%.3fx", a / b; else print "?" }'; }

echo
echo "==== TCAST on cuDNN attention (logs in $OUT)"
printf '%-34s %s\n' "device" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)"
printf '%-34s %s\n' "commit" "$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo +dirty)"
printf '%-34s %s\n' "make info TCAST=1: attention" "$(make -s --no-print-directory info TCAST=1 | grep -m1 '^  attention' | sed 's/^  attention *//')"
printf '%-34s %s\n' "builds (bf16, tcast)" "ok ($build_s s)"
printf '%-34s %s\n' "test_gpt2cu tcast" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/test_tcast.log" | tail -n1) rc=$rc_test"
printf '%-34s %s\n' "d4 attention bf16" "$(attn "$OUT/d4_bf16.log") $w_bf16"
printf '%-34s %s\n' "d4 attention tcast (empty plan)" "$(attn "$OUT/d4_tcast.log") $w_tc"
printf '%-34s %s\n' "d4 attention tcast attn_scores" "$(attn "$OUT/d4_tcast_attn.log") $w_attn"
printf '%-34s %s\n' "d4 tcast attn_scores last step" "$(losses "$OUT/d4_tcast_attn.log" | tail -n1)"
printf '%-34s %s\n' "d4 losses bf16 == tcast empty" "$same"
printf '%-34s %s\n' "d12 B=64 bf16" "$(med "$OUT/d12_bf16.log")"
printf '%-34s %s\n' "d12 B=64 tcast (empty plan)" "$(med "$OUT/d12_tcast.log") | $(ratio "$OUT/d12_tcast.log") bf16 [$(grep -m1 -o 'attention=[a-z]*' "$OUT/d12_tcast.log")]"
printf '%-34s %s\n' "d12 B=64 tcast attn_scores=mxfp8e4" "$(med "$OUT/d12_tcast_attn.log") | $(ratio "$OUT/d12_tcast_attn.log") bf16 [$(grep -m1 -o 'attention=[a-z]*' "$OUT/d12_tcast_attn.log")]"
exit $fail
