#!/usr/bin/env bash
# A lost rank never hangs a run: kill one rank of a 2-GPU run at a random moment, under each launcher,
# and check that the survivor ends with a clear error within the timeout and that -y 1 resumes bit-exactly.
#
#   scripts/kill_rank_test.sh                                   every launcher x phase (2 GPUs, ~20 min at the defaults)
#   LAUNCHERS=tcp PHASES="step ckpt" MODEL=d6 T=256 STEPS=30 CKPT_EVERY=10 TIMEOUT=20 scripts/kill_rank_test.sh
#
# Launchers: mpi (scripts/multi_gpu.sh 2 ..., i.e. mpirun; skipped without mpirun), tcp (the two processes started
# here with -pi tcp -pn 2 -pr R, as scripts/multi_gpu.sh does with NO_MPIRUN=1, so that each rank's exit is seen)
# and fs (-pi fs -pf <a fresh folder>). Per launcher one uninterrupted run is the reference; then per phase the
# victim (rank 0 or 1 at random, or KILL_RANK) gets SIGKILL:
#   rdv     at a random moment of the rendezvous: tcp / fs start the victim RDV_DELAY s late and kill it at a random
#           time in [0, RDV_DELAY + 2] s, so before it arrives, while it joins, or while NCCL starts; mpi: within 2 s
#           of mpirun starting it
#   step    at a random moment of a step between the first two checkpoints
#   reduce  in the second half of such a step (backward and its gradient reductions), aimed from the step time the
#           previous step printed
#   ckpt    while the second checkpoint is written (at a random time in [0, CKPT_JITTER] s after the step line that
#           precedes it; the table says whether that checkpoint was complete after the kill)
# Checks: the survivor (tcp / fs: the other rank; mpi: mpirun) exits non-zero within TIMEOUT + MARGIN s of the kill
# with an error line naming a rank: the watchdog's "error: rank R: ... (a rank died or the network failed); last
# complete checkpoint: <file>", the rendezvous's "error: -pi tcp|fs: rank R: ...", or under mpirun its own report
# naming the killed rank; the checkpoint the watchdog names is the one -y 1 then resumes ("named ckpt"); the same
# command with -y 1 runs to the end and prints, from the step after the one it resumed on, the reference's losses
# byte for byte (scripts/compare_losses.py --exact). A table is printed last and written to $OUT/table.md.
# Environment: BIN (build/bf16/train_gpt2cu), MODEL (d12), B (8), T (1024), Z (1), STEPS (60), CKPT_EVERY (20),
#   TIMEOUT (30: -pw and -pt), MARGIN (20), RDV_DELAY (2), CKPT_JITTER (1.0), LAUNCHERS ("mpi tcp fs"),
#   PHASES ("rdv step reduce ckpt"), REPEAT (1), KILL_RANK (random), SEED, DATA (-i shards; default: the trainer's,
#   Tiny Shakespeare), EXTRA (more trainer flags), OUT (/tmp/kill_rank_test). NCCL_NVLS_ENABLE=0 as everywhere.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BIN=${BIN:-build/bf16/train_gpt2cu}
MODEL=${MODEL:-d12}; B=${B:-8}; T=${T:-1024}; Z=${Z:-1}
STEPS=${STEPS:-60}; CKPT_EVERY=${CKPT_EVERY:-20}
TIMEOUT=${TIMEOUT:-30}; MARGIN=${MARGIN:-20}; RDV_DELAY=${RDV_DELAY:-2}; CKPT_JITTER=${CKPT_JITTER:-1.0}
read -r -a LAUNCHER_LIST <<< "${LAUNCHERS:-mpi tcp fs}"
read -r -a PHASE_LIST <<< "${PHASES:-rdv step reduce ckpt}"
REPEAT=${REPEAT:-1}
OUT=${OUT:-/tmp/kill_rank_test}
[ -n "${SEED:-}" ] && RANDOM=$SEED
export NCCL_NVLS_ENABLE=0
[ -x "$BIN" ] || { echo "error: $BIN not found: build it first (make train_gpt2cu)" >&2; exit 1; }
[ "$STEPS" -gt $((2 * CKPT_EVERY)) ] || { echo "error: STEPS ($STEPS) must exceed 2 x CKPT_EVERY ($CKPT_EVERY)" >&2; exit 1; }
BIN_REAL=$(readlink -f "$BIN")
mkdir -p "$OUT"
ARGS=(-e "$MODEL" -b "$B" -t "$T" -z "$Z" -x "$STEPS" -l 6e-4 -u 5 -v 0 -s 0 -n "$CKPT_EVERY" -nk 2 -pw "$TIMEOUT" -pt "$TIMEOUT")
[ -n "${DATA:-}" ] && ARGS+=(-i "$DATA")
# shellcheck disable=SC2206
[ -n "${EXTRA:-}" ] && ARGS+=($EXTRA)
WATCHDOG_RE='^error: rank [0-9]+: .*\(a rank died or the network failed\); last complete checkpoint: '
RDV_RE='^error: -pi (tcp|fs): rank [0-9]+: '
MPIRUN_RE='(noticed that process rank [0-9]+|process rank [0-9]+ .*exited on signal)'

# Seconds since the epoch, with nanoseconds.
now() { date +%s.%N; }
# A random number in [$1, $2] (3 decimals), and a random integer in [$1, $2].
rand_float() { awk -v a="$1" -v b="$2" -v r="$RANDOM" 'BEGIN { printf "%.3f", a + (b - a) * r / 32767 }'; }
rand_int() { echo $(($1 + RANDOM % ($2 - $1 + 1))); }

# Every descendant of a process (children first found with pgrep -P: no matching by name).
descendants() { local c; for c in $(pgrep -P "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done; }

# The pid of rank $2 of the mpirun started as $1 (its descendant running $BIN with that rank in its environment).
mpi_rank_pid() {
    local p
    for p in $(descendants "$1"); do
        [ "$(readlink -f "/proc/$p/exe" 2>/dev/null)" = "$BIN_REAL" ] || continue
        if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qxE "(OMPI_COMM_WORLD_RANK|PMI_RANK)=$2"; then echo "$p"; return; fi
    done
}

# Start one run of launcher $1 into folder $2 with logs $3.*; $4: the rank to start RDV_DELAY s late (tcp / fs; -1:
# none); the rest: extra trainer flags. Sets PIDS (tcp / fs: rank 0, rank 1; mpi: mpirun) and MAINLOG (rank 0's stdout).
start_run() {
    local launcher=$1 dir=$2 log=$3 late=$4
    shift 4
    PIDS=()
    case "$launcher" in
        mpi)
            MAINLOG=$log.log
            BIN=$BIN scripts/multi_gpu.sh 2 "${ARGS[@]}" -o "$dir" "$@" > "$MAINLOG" 2>&1 &
            PIDS=($!)
            ;;
        tcp|fs)
            local rdv=() r
            if [ "$launcher" = tcp ]; then rdv=(-pi tcp -ps "127.0.0.1:$((29500 + RANDOM % 20000))")
            else local folder; folder=$(mktemp -d "$OUT/rdv.XXXXXX"); rdv=(-pi fs -pf "$folder"); fi
            MAINLOG=$log.r0.log
            for r in 0 1; do
                if [ "$r" = "$late" ]; then
                    bash -c 'sleep "$0"; exec "$@"' "$RDV_DELAY" "$BIN" "${ARGS[@]}" -o "$dir" "$@" "${rdv[@]}" -pn 2 -pr "$r" > "$log.r$r.log" 2>&1 &
                else
                    "$BIN" "${ARGS[@]}" -o "$dir" "$@" "${rdv[@]}" -pn 2 -pr "$r" > "$log.r$r.log" 2>&1 &
                fi
                PIDS+=($!)
            done
            ;;
    esac
}

# Wait until every pid in PIDS has exited (at most $1 s; then SIGKILL by pid). Sets RCS (exit statuses, 124: hung).
wait_all() {
    local deadline=$((SECONDS + $1)) p
    RCS=()
    for p in "${PIDS[@]}"; do
        while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
        if kill -0 "$p" 2>/dev/null; then kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; RCS+=(124); else wait "$p" 2>/dev/null; RCS+=($?); fi
    done
}

# Wait until file $1 has a line matching ERE $2 while pid $3 lives, at most $4 s. 0 when it came.
wait_line() {
    local deadline=$((SECONDS + $4))
    until grep -qE "$2" "$1" 2>/dev/null; do
        kill -0 "$3" 2>/dev/null || return 1
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.02
    done
}

# The step time (ms) printed on step $2's line of log $1.
step_ms() { grep -E "^step +$2/" "$1" | head -n1 | sed -nE 's/.*\| ([0-9.]+) ms \|.*/\1/p'; }

# One uninterrupted run per launcher: the losses every resumed run must reproduce.
declare -A REF
run_reference() {
    local launcher=$1 dir="$OUT/ref_$1"
    rm -rf "$dir"
    start_run "$launcher" "$dir" "$OUT/ref_$launcher" -1
    local main=$MAINLOG
    wait_all 1800
    if [ "${RCS[0]}" = 0 ] && grep -qE "^step +$STEPS/" "$main"; then REF[$launcher]=$main; else REF[$launcher]=""; fi
    rm -rf "$dir"
}

TABLE="$OUT/table.md"
{
    echo "| launcher | phase | killed | survivor exit | seconds | message ok | named ckpt | resumed from | resume bit-exact |"
    echo "|---|---|---|---|---|---|---|---|---|"
} > "$TABLE"
DETAILS="$OUT/details.txt"
: > "$DETAILS"

# One case: launcher $1, phase $2, case number $3.
run_case() {
    local launcher=$1 phase=$2 k=$3
    local tag="${launcher}_${phase}_$k" dir="$OUT/case_${launcher}_${phase}_$k"
    local victim=${KILL_RANK:-$((RANDOM % 2))} survivor late=-1
    survivor=$((1 - victim))
    rm -rf "$dir"
    [ "$phase" = rdv ] && [ "$launcher" != mpi ] && late=$victim
    start_run "$launcher" "$dir" "$OUT/$tag" "$late"
    local main=$MAINLOG runpid=${PIDS[0]} vpid="" spid note=""
    # aim
    local target first=$((CKPT_EVERY + 1)) last=$((2 * CKPT_EVERY - 1))
    case "$phase" in
        rdv)
            if [ "$launcher" = mpi ]; then
                local until=$((SECONDS + 60))
                while [ -z "$vpid" ] && [ $SECONDS -lt $until ] && kill -0 "$runpid" 2>/dev/null; do vpid=$(mpi_rank_pid "$runpid" "$victim"); sleep 0.05; done
                sleep "$(rand_float 0 2)"
            else
                vpid=${PIDS[$victim]}
                sleep "$(rand_float 0 $((RDV_DELAY + 2)))"
            fi
            ;;
        step|reduce)
            target=$(rand_int "$first" "$last")
            [ $((target % CKPT_EVERY)) = 0 ] && target=$((target + 1))
            if wait_line "$main" "^step +$target/" "$runpid" 900; then
                local ms; ms=$(step_ms "$main" "$target")
                if [ "$phase" = step ]; then sleep "$(awk -v m="${ms:-50}" -v r="$RANDOM" 'BEGIN { printf "%.4f", m / 1000 * r / 32767 }')"
                else sleep "$(awk -v m="${ms:-50}" -v r="$RANDOM" 'BEGIN { printf "%.4f", m / 1000 * (0.45 + 0.5 * r / 32767) }')"; fi
                note="after step $target (${ms:-?} ms)"
            else note="step $target never printed"; fi
            ;;
        ckpt)
            target=$((2 * CKPT_EVERY))
            if wait_line "$main" "^step +$target/" "$runpid" 900; then sleep "$(rand_float 0 "$CKPT_JITTER")"; note="checkpoint $target"
            else note="step $target never printed"; fi
            ;;
    esac
    if [ "$launcher" = mpi ]; then [ -z "$vpid" ] && vpid=$(mpi_rank_pid "$runpid" "$victim"); spid=$runpid
    else vpid=${PIDS[$victim]}; spid=${PIDS[$survivor]}; fi
    local t_kill killed="rank $victim"
    t_kill=$(now)
    if [ -z "$vpid" ] || ! kill -9 "$vpid" 2>/dev/null; then killed="rank $victim (gone)"; fi
    # the survivor: exit status and time
    local deadline=$((SECONDS + TIMEOUT + MARGIN)) rc secs
    while kill -0 "$spid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    if kill -0 "$spid" 2>/dev/null; then
        secs="> $((TIMEOUT + MARGIN)) (hung)"
        kill -9 "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
        rc="hung"
    else
        secs=$(awk -v a="$t_kill" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
        wait "$spid" 2>/dev/null
        rc=$?
    fi
    # reap the rest (tcp / fs: the victim; mpi: nothing left)
    wait_all 30
    if [ "$phase" = ckpt ]; then
        local complete=no
        [ -f "$dir/model_$(printf %08d "$target").bin" ] && [ -f "$dir/state_$(printf %08d "$target")_rank0.bin" ] && \
            [ -f "$dir/state_$(printf %08d "$target")_rank1.bin" ] && complete=yes
        note="$note (complete after the kill: $complete)"
    fi
    # the message
    local slog msg="" ok=no named="-"
    if [ "$launcher" = mpi ]; then slog=$main; else slog="$OUT/$tag.r$survivor.log"; fi
    msg=$(grep -m1 -E "$WATCHDOG_RE|$RDV_RE" "$slog")
    [ -z "$msg" ] && [ "$launcher" = mpi ] && msg=$(grep -m1 -E "$MPIRUN_RE" "$slog")
    [ -n "$msg" ] && [ "$rc" != 0 ] && [ "$rc" != hung ] && ok=yes
    # resume to the end, then compare with the reference from the resumed step on
    start_run "$launcher" "$dir" "$OUT/${tag}_resume" -1 -y 1
    local rmain=$MAINLOG
    wait_all 1800
    local rrc=${RCS[0]} from exact="no" cmp
    from=$(sed -nE 's/^resumed from .*\(step ([0-9]+)\).*/\1/p' "$rmain" | head -n1)
    grep -q "^-y 1: no checkpoint" "$rmain" && from=0
    if [[ "$msg" =~ last\ complete\ checkpoint:\ (.*)$ ]]; then
        local file=${BASH_REMATCH[1]} nstep=0
        [ "$file" != none ] && nstep=$((10#$(basename "$file" .bin | sed 's/model_//')))
        if [ -n "$from" ] && [ "$nstep" = "$from" ]; then named="ok ($file)"; else named="differs ($file)"; fi
    fi
    if [ -z "${REF[$launcher]}" ]; then exact="no reference"
    elif [ "$rrc" != 0 ] || [ -z "$from" ]; then exact="resume failed (rc $rrc)"
    elif cmp=$(python3 scripts/compare_losses.py "${REF[$launcher]}" "$rmain" --steps "$((from + 1))-$STEPS" --exact 2>&1); then exact="yes ($cmp)"
    else exact="NO ($cmp)"; fi
    echo "| $launcher | $phase | $killed | $rc | $secs | $ok | $named | ${from:-?} | $exact |" | tee -a "$TABLE"
    { echo "[$tag] $note; survivor log $slog"; echo "    ${msg:-no error line}"; } >> "$DETAILS"
    rm -rf "$dir"
}

echo "kill_rank_test: $BIN, ${ARGS[*]}; launchers ${LAUNCHER_LIST[*]}, phases ${PHASE_LIST[*]}; logs in $OUT"
for launcher in "${LAUNCHER_LIST[@]}"; do
    if [ "$launcher" = mpi ] && ! command -v mpirun > /dev/null; then
        echo "| mpi | - | - | - | - | - | - | - | skipped: no mpirun |" | tee -a "$TABLE"
        continue
    fi
    run_reference "$launcher"
    [ -z "${REF[$launcher]}" ] && echo "warning: the uninterrupted $launcher run failed (see $OUT/ref_$launcher*.log)" >&2
    for phase in "${PHASE_LIST[@]}"; do
        for ((k = 1; k <= REPEAT; k++)); do run_case "$launcher" "$phase" "$k"; done
    done
done
echo
cat "$TABLE"
echo
cat "$DETAILS"
