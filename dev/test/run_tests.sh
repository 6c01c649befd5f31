#!/usr/bin/env bash
# Run every host test and print one total: `N passed, N failed` as the last line.
#
# usage: run_tests.sh TEST_BINARY... -- PYTEST_FILE...
# Each C test binary prints its own `N passed, N failed` line; a binary that prints none, or exits
# non-zero without reporting a failure, counts as one failure. Python tests run under pytest with
# $PYTHON (default python3). Exit status 0 only when nothing failed.
set -u
PYTHON=${PYTHON:-python3}
passed=0
failed=0
bins=()
pys=()
seen_sep=0
for arg in "$@"; do
    if [ "$arg" = "--" ]; then seen_sep=1; continue; fi
    if [ $seen_sep -eq 0 ]; then bins+=("$arg"); else pys+=("$arg"); fi
done

tally() {  # tally NAME EXIT_CODE PASSED FAILED
    local name=$1 rc=$2 p=$3 f=$4
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p))
    failed=$((failed + f))
    printf '== %-40s %5d passed, %d failed%s\n' "$name" "$p" "$f" "$([ "$rc" -ne 0 ] && echo " (exit $rc)")"
}

for bin in "${bins[@]}"; do
    echo "== running $bin"
    out=$("$bin" 2>&1)
    rc=$?
    echo "$out"
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    else
        p=0; f=1
    fi
    tally "$(basename "$bin")" "$rc" "$p" "$f"
done

if [ ${#pys[@]} -gt 0 ]; then
    echo "== running pytest ${pys[*]}"
    out=$("$PYTHON" -m pytest -q -p no:cacheprovider "${pys[@]}" 2>&1)
    rc=$?
    echo "$out"
    summary=$(echo "$out" | tail -n 1)
    p=$(echo "$summary" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
    f=$(echo "$summary" | grep -oE '[0-9]+ (failed|errors?)' | awk '{s+=$1} END {print s+0}')
    tally "pytest" "$rc" "$p" "$f"
fi

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
