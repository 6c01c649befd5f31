#!/usr/bin/env bash
# tcast_fp8hw_check.sh - GPU check of the hardware FP8 element step of the TensorCast casts (doc/TCAST.md 5.5,
# llmc/kernels/tcast/tcast_fp8_hw.cuh). From the repository root of a checkout, on a GPU machine:
#   bash scripts/tcast_fp8hw_check.sh        (J=16 make jobs by default)
# Builds the cast harness, the producers harness and the TCAST trainer with the built-in attention (TCAST=1
# USE_CUDNN=0), runs both harnesses (bit-exact checks, then their timing tables: every mxfp8 row with the hardware
# step and with the float32 step, same binary), and times d12 B=64 T=1024 for 24 steps (Tiny Shakespeare, made if
# missing) with --cast all=mxfp8e4 (the trainer's median step after 3 warm-up steps); EMPTY=1 also times the empty
# plan (a same-lease reference; off by default to stay within 6 minutes).
# Full outputs stay in a temporary folder (printed). Prints a table last; exit status 1 if a harness fails.
set -u
J=${J:-16}
T0=$SECONDS
make -j"$J" build/tcast_flash/dev/tcast build/tcast_flash/dev/tcast_producers build/tcast_flash/train_gpt2cu TCAST=1 USE_CUDNN=0 2>&1 | tail -2
for b in build/tcast_flash/dev/tcast build/tcast_flash/dev/tcast_producers build/tcast_flash/train_gpt2cu; do
    [ -x "$b" ] || { echo "error: $b was not built"; exit 1; }
done
T_BUILD=$((SECONDS - T0))
ls data/tinyshakespeare/tiny_shakespeare_train.bin > /dev/null 2>&1 || python3 dev/data/tinyshakespeare.py > /dev/null
OUT=$(mktemp -d)
echo "outputs: $OUT"
T0=$SECONDS
build/tcast_flash/dev/tcast > "$OUT/tcast.txt" 2>&1
RC_T=$?
T_TCAST=$((SECONDS - T0))
T0=$SECONDS
build/tcast_flash/dev/tcast_producers > "$OUT/producers.txt" 2>&1
RC_P=$?
T_PROD=$((SECONDS - T0))
D12=(-e d12 -b 64 -t 1024 -x 24 -v 0 -s 0)
T0=$SECONDS
[ "${EMPTY:-0}" = 1 ] && build/tcast_flash/train_gpt2cu "${D12[@]}" > "$OUT/d12_empty.log" 2>&1
build/tcast_flash/train_gpt2cu "${D12[@]}" --cast all=mxfp8e4 > "$OUT/d12_all.log" 2>&1 || { echo "error: d12 run failed:"; tail -5 "$OUT/d12_all.log"; }
T_D12=$((SECONDS - T0))

echo "== tcast harness: failures, the FP8 sections, the mxfp8 / e4m3fn timing rows"
grep -E "FAIL|error" "$OUT/tcast.txt" | head -20
sed -n '/== FP8 hardware element step/,/== scalar fallback/p' "$OUT/tcast.txt" | grep -v "^== scalar"
sed -n '/== timing/,$p' "$OUT/tcast.txt" | grep -E "^type|D2D|mxfp8e4|mxfp8e5|e4m3fn "
echo "== tcast_producers harness: failures, then the timing rows"
grep -E "FAIL|error" "$OUT/producers.txt" | head -20
sed -n '/^timing/,$p' "$OUT/producers.txt"

median() { [ -f "$1" ] && sed -n 's/^median step \([0-9.]*\) ms.*/\1/p' "$1" | head -1; }
# the tcast timing row of TYPE at SHAPE along dim 1: "ms (ratio of copy)"
pass_row() { awk -v t="$1" -v s="$2" -F'|' 'index($0, t " ") == 1 && $1 ~ s && $1 ~ / 1 *$/ { gsub(/ /, "", $2); gsub(/ /, "", $5); print $2 " ms (" $5 " of copy)"; exit }' "$OUT/tcast.txt"; }
# the n-th (1: hardware step, 2: float32 step) producers timing line matching PATTERN: the fused / one-kernel ms
ptiming() { sed -n '/^timing/,$p' "$OUT/producers.txt" | grep -E "$1" | sed -n "${2}p"; }
fused_row() { ptiming "$1" "$2" | sed -E 's/.*(one kernel|fused) ([0-9.]+) ms \(([0-9]+%) of copy\).*/\2 ms (\3 of copy)/'; }
passes_row() { ptiming "$1" "$2" | sed -E 's/.*passes ([0-9.]+) ms.*/\1 ms/'; }
e=$(median "$OUT/d12_empty.log"); a=$(median "$OUT/d12_all.log")
echo
echo "== summary (build ${T_BUILD} s, tcast ${T_TCAST} s, tcast_producers ${T_PROD} s, d12 runs ${T_D12} s)"
printf '%-58s %s\n' "tcast harness" "$(tail -1 "$OUT/tcast.txt") (exit $RC_T)"
printf '%-58s %s\n' "tcast_producers harness" "$(tail -1 "$OUT/producers.txt") (exit $RC_P)"
printf '%-58s %s | %s\n' "pass mxfp8e4 65536x3072 dim 1: hw | float32 step" "$(pass_row mxfp8e4 65536x3072)" "$(pass_row 'mxfp8e4 (float32 step)' 65536x3072)"
printf '%-58s %s | %s\n' "pass mxfp8e5 65536x3072 dim 1: hw | float32 step" "$(pass_row mxfp8e5 65536x3072)" "$(pass_row 'mxfp8e5 (float32 step)' 65536x3072)"
printf '%-58s %s | %s   (predicted ~0.47 | H100 before 0.654)\n' "GELU sites mxfp8e4 both, one kernel: hw | float32 step" \
    "$(fused_row 'gelu-sites mxfp8e4 +mxfp8e4 ' 1)" "$(fused_row 'gelu-sites mxfp8e4 +mxfp8e4 ' 2)"
printf '%-58s %s | %s\n' "GELU sites mxfp8e4 both, passes: hw | float32 step" "$(passes_row 'gelu-sites mxfp8e4 +mxfp8e4 ' 1)" \
    "$(passes_row 'gelu-sites mxfp8e4 +mxfp8e4 ' 2)"
printf '%-58s %s | %s   (predicted ~0.27 | H100 before 0.374)\n' "res+LN sites mxfp8e4, fused: hw | float32 step" \
    "$(fused_row '^  sites ' 1)" "$(fused_row '^  sites ' 2)"
printf '%-58s %s | %s\n' "res+LN sites mxfp8e4, passes: hw | float32 step" "$(passes_row '^  sites ' 1)" "$(passes_row '^  sites ' 2)"
[ -n "$e" ] && printf '%-58s %s ms\n' "d12 B=64 median step, empty plan" "$e"
printf '%-58s %s ms%s\n' "d12 B=64 median step, --cast all=mxfp8e4" "${a:-?}" \
    "$(awk -v a="${a:-0}" -v b="${e:-0}" 'BEGIN { if (b > 0) printf " = %.3fx the empty plan (predicted ~1.42x, before 1.467x)", a / b }')"
printf '%-58s %s\n' "  (H100 before: 163.14 ms = 1.480x BF16 110.25 ms)" "predicted ~157.6 ms (156.6-159.6) = ~1.43x BF16"
[ "$RC_T" -eq 0 ] && [ "$RC_P" -eq 0 ] || exit 1
