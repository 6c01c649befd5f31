#!/usr/bin/env bash
# Long-run rehearsal (issue 28, item 4), offline: GPT-2 d12, B=64, T=1024 for 2,000 steps on the
# Gutenberg shards, checkpoints every 250 steps with -nk 2, validation and HellaSwag every 250 steps,
# killed with SIGKILL at a random step after 1,000 and resumed with -y 1 to the end; then the same
# command uninterrupted into another folder. The two main.log files must agree bitwise from the
# resume step on (and the final checkpoints byte for byte); a table says so, exit status 0 if they do.
#
# usage: scripts/long_run_rehearsal.sh          (a GPU machine; about 2 x 4 min on an H100 at the defaults)
#        PREP_ONLY=1 scripts/long_run_rehearsal.sh   (only the data, on any machine: then carry data/ and
#                                                      OUT/hellaswag_sample.bin to the GPU machine)
#
# HellaSwag offline: the real validation set cannot be downloaded there, so the script makes a
# HellaSwag-FORMAT SAMPLE from Gutenberg validation sentences (context: a sentence; endings: the
# sentence that follows it and 3 sentences from elsewhere, the label at a random place), converts it
# with dev/data/hellaswag.py, and runs -h 1 with it. It checks the evaluation path and its
# determinism; its accuracy is not a HellaSwag result. HS_JSONL=file.jsonl uses a HellaSwag jsonl
# instead (the real hellaswag_val.jsonl if you have it), HS_BIN=file.bin an eval file as it is.
#
# Environment (defaults in brackets):
#   BIN          trainer [build/bf16/train_gpt2cu]         PYTHON   [.venv/bin/python, else python3]
#   OUT          folder: OUT/resumed, OUT/uninterrupted (both emptied first), logs, summary.md
#                [out/long_run_rehearsal]
#   STEPS [2000]  EVERY [250]: checkpoint, validation and HellaSwag interval   KEEP [2]: -nk
#   KILL_AFTER [1000]: the kill comes at a random step in KILL_AFTER+1 .. STEPS-1 (KILL_STEP: that step)
#   SEED [1337]: the random kill step and the sample       HS_EXAMPLES [512]: examples in the sample
#   MODEL [d12]  B [64]  T [1024]  LR [6e-4]  WARMUP [100]  VAL_BATCHES [10]
#   TRAIN, VAL   shard globs [data/gutenberg/gutenberg_{train,val}_*.bin: made by dev/data/gutenberg.py
#                when missing]       EXTRA_FLAGS  more trainer flags (word-split), e.g. "-r 1"
# A shorter run: STEPS=300 EVERY=50 KILL_AFTER=150 MODEL=d6 B=16 scripts/long_run_rehearsal.sh
#
# main.log (doc/FORMATS.md, logger.h): `# ...` at each start (a resume appends), `s:N trl:...`,
# `s:N tel:...`, `s:N eval:...`. The resumed process writes its lines after the last `#` line,
# beginning with the validation (and HellaSwag) of the resume step R; the uninterrupted run has the
# same lines after its `s:R trl:` line (step R's own training line comes before step R's evaluations).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-build/bf16/train_gpt2cu}
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
OUT=${OUT:-out/long_run_rehearsal}
STEPS=${STEPS:-2000}
EVERY=${EVERY:-250}
KEEP=${KEEP:-2}
KILL_AFTER=${KILL_AFTER:-1000}
SEED=${SEED:-1337}
HS_EXAMPLES=${HS_EXAMPLES:-512}
MODEL=${MODEL:-d12}
B=${B:-64}
T=${T:-1024}
LR=${LR:-6e-4}
WARMUP=${WARMUP:-100}
VAL_BATCHES=${VAL_BATCHES:-10}
TRAIN=${TRAIN:-data/gutenberg/gutenberg_train_*.bin}
VAL=${VAL:-data/gutenberg/gutenberg_val_*.bin}
read -ra EXTRA <<< "${EXTRA_FLAGS:-}"

die() { echo "error: $*" >&2; exit 1; }
is_int() { [[ "$1" =~ ^[0-9]+$ ]]; }
for v in STEPS EVERY KEEP KILL_AFTER SEED HS_EXAMPLES B T WARMUP VAL_BATCHES; do
    is_int "${!v}" || die "$v=${!v}: not a non-negative integer"
done
[ "$EVERY" -ge 1 ] || die "EVERY=$EVERY: must be at least 1"
[ "$KILL_AFTER" -lt $((STEPS - 1)) ] || die "KILL_AFTER=$KILL_AFTER: must be below STEPS-1=$((STEPS - 1))"
if [ -n "${KILL_STEP:-}" ]; then
    if ! is_int "$KILL_STEP" || [ "$KILL_STEP" -lt 1 ] || [ "$KILL_STEP" -ge "$STEPS" ]; then
        die "KILL_STEP=$KILL_STEP: not a step in 1..$((STEPS - 1))"
    fi
    KILL_HOW="KILL_STEP=$KILL_STEP"
else
    RANDOM=$SEED
    KILL_STEP=$((KILL_AFTER + 1 + RANDOM % (STEPS - KILL_AFTER - 1)))
    KILL_HOW="target $KILL_STEP, drawn from $((KILL_AFTER + 1))..$((STEPS - 1)) with SEED=$SEED"
fi
mkdir -p "$OUT"

# --- data ------------------------------------------------------------------------------------------
# shellcheck disable=SC2086  # the globs are meant to expand
if ! ls $TRAIN > /dev/null 2>&1 || ! ls $VAL > /dev/null 2>&1; then
    echo "== Gutenberg shards: $PYTHON dev/data/gutenberg.py"
    "$PYTHON" dev/data/gutenberg.py || die "dev/data/gutenberg.py failed (offline it needs the shared data folder)"
fi
# offline without the shared folder tiktoken still finds the BPE files the data scripts copied here
if [ -z "${TIKTOKEN_CACHE_DIR:-}" ] && [ -d data/tiktoken_cache ]; then
    export TIKTOKEN_CACHE_DIR=$PWD/data/tiktoken_cache
fi

if [ -n "${HS_BIN:-}" ]; then
    [ -f "$HS_BIN" ] || die "HS_BIN=$HS_BIN: no such file"
else
    HS_BIN=$OUT/hellaswag_sample.bin
    if [ -z "${HS_JSONL:-}" ]; then
        HS_JSONL=$OUT/hellaswag_format_sample.jsonl
        echo "== HellaSwag-format sample from Gutenberg sentences (a format sample, NOT the benchmark): $HS_JSONL"
        "$PYTHON" - "$VAL" "$HS_JSONL" "$HS_EXAMPLES" "$SEED" <<'EOF'
"""HellaSwag-format examples from the Gutenberg validation shards: a format sample, not HellaSwag."""
import glob, json, random, re, sys
import numpy as np
sys.path.insert(0, "dev/data")
from data_common import get_gpt2_encoding

val_glob, out, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
tokens = np.concatenate([np.fromfile(p, dtype="<u2", offset=1024) for p in sorted(glob.glob(val_glob))])
text = get_gpt2_encoding().decode(tokens[:2_000_000].tolist(), errors="replace")
pairs, pool = [], []
for doc in text.split("<|endoftext|>"):
    sentences = [" ".join(s.split()) for s in re.split(r"(?<=[.!?])\s+", doc)]
    good = [6 <= len(s.split()) <= 40 for s in sentences]
    pool += [s for s, g in zip(sentences, good) if g]
    pairs += [(sentences[i], sentences[i + 1]) for i in range(len(sentences) - 1) if good[i] and good[i + 1]]
rng = random.Random(seed)
if len(pairs) < n or len(pool) < 4:
    sys.exit(f"error: {val_glob}: only {len(pairs)} sentence pairs, {n} wanted (HS_EXAMPLES)")
with open(out, "w") as f:
    for i, (ctx, right) in enumerate(rng.sample(pairs, n)):
        endings = rng.sample([s for s in rng.sample(pool, 8) if s != right], 3)
        label = rng.randrange(4)
        endings.insert(label, right)
        f.write(json.dumps({"ind": i, "activity_label": "Gutenberg format sample (not HellaSwag)", "ctx": ctx,
                            "endings": endings, "label": label, "split": "val",
                            "source_id": "gutenberg_val"}) + "\n")
print(f"{n} examples from {len(pairs)} sentence pairs")
EOF
    fi
    [ -f "$HS_JSONL" ] || die "HS_JSONL=$HS_JSONL: no such file"
    echo "== eval file: $PYTHON dev/data/hellaswag.py --input $HS_JSONL --out $HS_BIN"
    "$PYTHON" dev/data/hellaswag.py --input "$HS_JSONL" --out "$HS_BIN"
fi
if [ -n "${PREP_ONLY:-}" ]; then
    echo "data ready: $TRAIN, $VAL, $HS_BIN"
    exit 0
fi
[ -x "$BIN" ] || die "$BIN: not found or not executable (make train_gpt2cu, or BIN=...)"

# --- runs ------------------------------------------------------------------------------------------
FLAGS=(-e "$MODEL" -b "$B" -t "$T" -x "$STEPS" -l "$LR" -u "$WARMUP" -q 0.1 -c 0.1 -v "$EVERY" -m "$VAL_BATCHES"
       -h 1 -hf "$HS_BIN" -s 0 -n "$EVERY" -nk "$KEEP" -i "$TRAIN" -j "$VAL" "${EXTRA[@]}")
A=$OUT/resumed
U=$OUT/uninterrupted
rm -rf -- "$A" "$U"
mkdir -p "$A" "$U"

PID=""
# shellcheck disable=SC2317  # called by the trap
cleanup() { if [ -n "$PID" ]; then kill -KILL "$PID" 2> /dev/null || true; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM

alive() {   # the process exists and is not a zombie
    local state
    state=$(cut -d' ' -f3 "/proc/$1/stat" 2> /dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}
last_train_step() {   # the step of the last `s:N trl:` line of a main.log (0 if none)
    local s
    s=$(sed -n 's/^s:\([0-9][0-9]*\) trl:.*/\1/p' "$1" 2> /dev/null | tail -n 1)
    echo "${s:-0}"
}

echo "== run 1: $BIN ${FLAGS[*]} -o $A   (SIGKILL once step $KILL_STEP is logged)"
t0=$(date +%s)
"$BIN" "${FLAGS[@]}" -o "$A" > "$A/stdout_1.log" 2>&1 &
PID=$!
while [ "$(last_train_step "$A/main.log")" -lt "$KILL_STEP" ]; do
    if ! alive "$PID"; then
        wait "$PID" || true
        PID=""
        tail -n 5 "$A/stdout_1.log" >&2
        die "run 1 ended before step $KILL_STEP (see $A/stdout_1.log)"
    fi
    sleep 0.1
done
{ kill -KILL "$PID" && wait "$PID"; } 2> /dev/null || true   # (no "Killed" job message)
PID=""
KILLED_AT=$(last_train_step "$A/main.log")
echo "   killed after step $KILLED_AT; checkpoints left: $(cd "$A" && echo model_*.bin)"

echo "== run 1, resumed: $BIN ... -o $A -y 1"
if ! "$BIN" "${FLAGS[@]}" -o "$A" -y 1 > "$A/stdout_2.log" 2>&1; then
    tail -n 5 "$A/stdout_2.log" >&2
    die "the resumed run failed (see $A/stdout_2.log)"
fi
t1=$(date +%s)
R=$(sed -n 's/^resumed from .* (step \([0-9][0-9]*\)).*/\1/p;T;q' "$A/stdout_2.log")
R=${R:-0}

echo "== run 2, uninterrupted: $BIN ... -o $U"
if ! "$BIN" "${FLAGS[@]}" -o "$U" > "$U/stdout.log" 2>&1; then
    tail -n 5 "$U/stdout.log" >&2
    die "the uninterrupted run failed (see $U/stdout.log)"
fi
t2=$(date +%s)

# --- comparison ------------------------------------------------------------------------------------
# what the resumed process logged: the lines after the last `#` line of its main.log
awk 'FNR == NR { if (/^#/) last = FNR; next } FNR > last' "$A/main.log" "$A/main.log" > "$OUT/resumed_tail.log"
# the uninterrupted run from the same point: after its `s:R trl:` line (R = 0: after its `#` line)
awk -v r="$R" 'found { print } (r == 0 && /^#/) || (r > 0 && $0 ~ ("^s:" r " trl:")) { found = 1 }' \
    "$U/main.log" > "$OUT/uninterrupted_tail.log"
# before the kill: run 1's first lines against the same number of the uninterrupted run's
awk '/^#/ { n++; next } n == 1' "$A/main.log" > "$OUT/killed_part.log"
awk -v n="$(wc -l < "$OUT/killed_part.log")" '!/^#/ { if (++k > n) exit; print }' "$U/main.log" \
    > "$OUT/uninterrupted_head.log"

TAIL_LINES=$(wc -l < "$OUT/resumed_tail.log")
ok=1
if [ "$TAIL_LINES" -gt 0 ] && cmp -s "$OUT/resumed_tail.log" "$OUT/uninterrupted_tail.log"; then
    TAIL="identical ($TAIL_LINES lines, steps $R..$STEPS)"
else
    ok=0
    n=$({ cmp "$OUT/resumed_tail.log" "$OUT/uninterrupted_tail.log" 2>&1 || true; } |
        sed -n 's/.*line \([0-9][0-9]*\).*/\1/p')
    n=${n:-1}
    TAIL="DIFFERENT from line $n: \`$(sed -n "${n}p" "$OUT/resumed_tail.log")\` (resumed)"
    TAIL="$TAIL vs \`$(sed -n "${n}p" "$OUT/uninterrupted_tail.log")\` (uninterrupted)"
fi
if cmp -s "$OUT/killed_part.log" "$OUT/uninterrupted_head.log"; then
    HEAD="identical ($(wc -l < "$OUT/killed_part.log") lines, steps 0..$KILLED_AT)"
else
    ok=0
    HEAD="DIFFERENT"
fi
FINAL=$(printf 'model_%08d.bin' "$STEPS")
STATE=$(printf 'state_%08d.bin' "$STEPS")
if cmp -s "$A/$FINAL" "$U/$FINAL" && cmp -s "$A/$STATE" "$U/$STATE"; then
    MODEL_CMP="identical ($FINAL, $STATE)"
else
    ok=0
    MODEL_CMP="DIFFERENT or missing ($FINAL, $STATE)"
fi
hs_line() {   # `step acc` pairs of a log's eval lines, comma-separated
    sed -n 's/^s:\([0-9][0-9]*\) eval:\(.*\)$/\1: \2/p' "$1" | paste -sd ',' - | sed 's/,/, /g'
}
HS_U=$(hs_line "$U/main.log")
HS_A=$(hs_line "$OUT/resumed_tail.log")
HS_N=$(sed -n 's/.*hellaswag acc [0-9]*\/\([0-9]*\) =.*/\1/p;T;q' "$U/stdout.log")

{
    echo "| long-run rehearsal | |"
    echo "|---|---|"
    echo "| trainer, flags | \`$BIN ${FLAGS[*]}\` |"
    echo "| steps | $STEPS (checkpoint, validation and HellaSwag every $EVERY, -nk $KEEP) |"
    echo "| kill step (SIGKILL) | $KILLED_AT: the last step logged before the kill ($KILL_HOW) |"
    echo "| resume step (-y 1) | $R |"
    echo "| main.log before the kill vs uninterrupted | $HEAD |"
    echo "| main.log from the resume step on vs uninterrupted | $TAIL |"
    echo "| final checkpoint | $MODEL_CMP |"
    echo "| checkpoints left, resumed / uninterrupted | $(cd "$A" && echo model_*.bin) / $(cd "$U" && echo model_*.bin) |"
    echo "| HellaSwag-format sample ($HS_N examples), uninterrupted | $HS_U |"
    echo "| the same, resumed process (from step $R) | $HS_A |"
    echo "| wall time: killed + resumed / uninterrupted | $((t1 - t0)) s / $((t2 - t1)) s |"
} | tee "$OUT/summary.md"
if "$PYTHON" scripts/plot_loss.py "$U/main.log:uninterrupted" "$OUT/resumed_tail.log:resumed from step $R" \
    -o "$OUT/loss.png" --title "long-run rehearsal: $MODEL, $STEPS steps, killed at $KILLED_AT" > /dev/null 2>&1; then
    echo "loss plot: $OUT/loss.png"
fi
if [ "$ok" = 1 ]; then
    echo "PASS: the resumed run agrees bitwise with the uninterrupted one"
    exit 0
fi
echo "FAIL: the runs disagree (logs in $OUT)" >&2
exit 1
