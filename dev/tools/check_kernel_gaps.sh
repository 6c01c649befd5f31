#!/usr/bin/env bash
# Check dev/tools/kernel_gaps.cpp on a GPU against the known timeline of dev/tools/gap_probe.cu:
# builds both (make kernel-gaps), runs the probe once plain (it must run without the library) and
# once under CUDA_INJECTION64_PATH with KERNEL_GAPS_TOP=5, then checks the JSON: the number of steps
# and, in every measured step, its activities, exactly 2 gaps >= 20 us, each >= 200 us, idle >= 400 us,
# and every other gap < 20 us; the kernel table (stderr and JSON): exactly the two probe kernels, work
# before marker, their launches per step exact (20 and 1), 0.9x..3x the probe's 20 us per launch, the
# columns consistent with each other, all kernels' time = the busy time (one stream: no overlap), no
# memcpy/memset time. Two more runs with KERNEL_GAPS_TOP=-1 and =abc: an error line, the gap report
# without a table, the probe unharmed. Prints PASS or FAIL (with the reasons) last; exit status 0 only on PASS.
#
#   usage: dev/tools/check_kernel_gaps.sh [make arguments, e.g. BUILD=... NVCC=...]
#   output: build/tools/check_kernel_gaps/ (or $BUILD/tools/...): the probe's logs and gaps.json
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

fail() { echo "check_kernel_gaps: FAIL: $*"; exit 1; }

make --no-print-directory kernel-gaps "$@" || fail "make kernel-gaps failed"
build=$(make -s --no-print-directory print-BUILD "$@")
lib=$(realpath "$build/tools/libkernel_gaps.so") probe=$build/tools/gap_probe
dir=$build/tools/check_kernel_gaps
mkdir -p "$dir" && rm -f "$dir"/*

echo "== $probe (no injection)"
"$probe" > "$dir/plain.log" 2>&1
rc=$?
cat "$dir/plain.log"
[ $rc -eq 0 ] || fail "$probe exited $rc without the library"
grep -q '^kernel_gaps:' "$dir/plain.log" && fail "kernel_gaps output without CUDA_INJECTION64_PATH"

echo "== CUDA_INJECTION64_PATH=$lib $probe"
top=5   # more than the probe's 2 kernels: the table must list just those
CUDA_INJECTION64_PATH=$lib KERNEL_GAPS_STEP_KERNEL=gap_probe_step_marker KERNEL_GAPS_SKIP=3 KERNEL_GAPS_TOP=$top \
    KERNEL_GAPS_OUT="$dir/gaps.json" "$probe" > "$dir/traced.log" 2>&1
rc=$?
cat "$dir/traced.log"
[ $rc -eq 0 ] || fail "$probe exited $rc under the library"
grep -q '^kernel_gaps: recording' "$dir/traced.log" || fail "the library was not loaded (no 'kernel_gaps: recording' line)"
grep -q '^kernel_gaps: error' "$dir/traced.log" && fail "kernel_gaps reported an error (above)"
expect=$(grep '^gap_probe: expect ' "$dir/traced.log" | sed 's/^gap_probe: expect //')
[ -n "$expect" ] || fail "no 'gap_probe: expect' line"
[ -s "$dir/gaps.json" ] || fail "no $dir/gaps.json"
work=$(tr ' ' '\n' <<< "$expect" | sed -n 's/^work_per_step=//p')
[ -n "$work" ] || fail "no work_per_step in the 'gap_probe: expect' line"
# the table as printed: its title, one row per probe kernel (exact launches per step, the name last),
# the totals line (the probe copies only after its last step kernel: no memcpy time in a step)
grep -Eq '^kernel_gaps: device [0-9]+: top 2 of 2 kernels by device time in steps ' "$dir/traced.log" ||
    fail "no 'top 2 of 2 kernels' table title"
grep -Eq "^ +[0-9]+\.[0-9]{3} +$work\.00 +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]%  gap_probe_work\$" "$dir/traced.log" ||
    fail "no table row 'gap_probe_work' with $work.00 launches per step"
grep -Eq '^ +[0-9]+\.[0-9]{3} +1\.00 +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]%  gap_probe_step_marker$' "$dir/traced.log" ||
    fail "no table row 'gap_probe_step_marker' with 1.00 launches per step"
grep -Eq '^  all kernels: [0-9]+\.[0-9]{3} ms per step, memcpy/memset: 0\.000 ms per step$' "$dir/traced.log" ||
    fail "no line 'all kernels: ... ms per step, memcpy/memset: 0.000 ms per step'"

# a bad KERNEL_GAPS_TOP: an error line, then the library goes on as with 0 (report, no table)
for bad in -1 abc; do
    log=$dir/bad_top_$bad.log
    echo "== KERNEL_GAPS_TOP=$bad CUDA_INJECTION64_PATH=$lib $probe"
    CUDA_INJECTION64_PATH=$lib KERNEL_GAPS_STEP_KERNEL=gap_probe_step_marker KERNEL_GAPS_TOP=$bad "$probe" > "$log" 2>&1
    rc=$?
    cat "$log"
    [ $rc -eq 0 ] || fail "$probe exited $rc with KERNEL_GAPS_TOP=$bad"
    grep -qF "kernel_gaps: error: KERNEL_GAPS_TOP=$bad is not a count" "$log" || fail "no error line for KERNEL_GAPS_TOP=$bad"
    grep -Eq '^kernel_gaps: device [0-9]+: [0-9]+ steps measured' "$log" || fail "no gap report with KERNEL_GAPS_TOP=$bad"
    grep -q 'all kernels:' "$log" && fail "a kernel table with KERNEL_GAPS_TOP=$bad"
done

# shellcheck disable=SC2086  # $expect: one argument per key=value pair
python3 - "$dir/gaps.json" $expect top=$top <<'EOF'
import json, sys
path, expect = sys.argv[1], dict(kv.split("=") for kv in sys.argv[2:])
e = {k: int(v) for k, v in expect.items()}
with open(path) as f:
    doc = json.load(f)
bad = []
if doc["dropped_records"] or doc["cupti_errors"]:
    bad.append(f"dropped records {doc['dropped_records']}, CUPTI errors {doc['cupti_errors']}")
devs = doc["devices"]
if len(devs) != 1:
    print(f"check_kernel_gaps: FAIL: expected one device in {path}, got {len(devs)}")
    sys.exit(3)
d = devs[0]
if d["step_kernels_found"] != e["steps_found"]:
    bad.append(f"step kernels found {d['step_kernels_found']}, expected {e['steps_found']}")
if d["steps_measured"] != e["steps_measured"] or len(d["steps"]) != e["steps_measured"]:
    bad.append(f"steps measured {d['steps_measured']}, expected {e['steps_measured']}")
for s in d["steps"]:
    why = []
    top = s["top_gaps_us"]
    if s["activities"] != e["activities_per_step"]:
        why.append(f"{s['activities']} activities (expected {e['activities_per_step']})")
    if s["gaps_ge_20us"] != e["big_gaps_per_step"]:
        why.append(f"{s['gaps_ge_20us']} gaps >= 20 us (expected {e['big_gaps_per_step']})")
    if min(top[:e["big_gaps_per_step"]]) < e["min_big_gap_us"]:
        why.append(f"largest gaps {top} us: the sync gaps should be >= {e['min_big_gap_us']} us")
    if top[e["big_gaps_per_step"]] >= e["max_small_gap_us"]:
        why.append(f"a gap without a sync of {top[e['big_gaps_per_step']]:.1f} us (expected < {e['max_small_gap_us']})")
    if s["idle_us"] < e["min_idle_us"]:
        why.append(f"idle {s['idle_us']:.1f} us < {e['min_idle_us']}")
    if abs(s["busy_us"] + s["idle_us"] - s["span_us"]) > 0.01:
        why.append("busy + idle != span")
    if why:
        bad.append(f"step {s['step']}: " + "; ".join(why))
# the kernel table: the probe's two kernels, launches exact, times plausible and consistent
n = e["steps_measured"]
ks = [k for k in doc["kernels"] if k["device"] == d["device"]]
names = [k["name"].split("(")[0] for k in ks]  # JSON names are demangled with their parameter list
if doc["kernels_top"] != e["top"]:
    bad.append(f"kernels_top {doc['kernels_top']}, expected {e['top']}")
if names != ["gap_probe_work", "gap_probe_step_marker"] or d["kernel_names"] != 2:
    bad.append(f"kernel table {names} of {d['kernel_names']} kernels, expected gap_probe_work, gap_probe_step_marker of 2")
else:
    for k, per_step in zip(ks, (e["work_per_step"], 1)):
        why = []
        if k["launches"] != per_step * n or k["launches_per_step"] != per_step:
            why.append(f"{k['launches']} launches, {k['launches_per_step']} per step (expected {per_step * n}, {per_step})")
        if not 0.9 * e["kernel_us"] <= k["us_per_launch"] <= 3 * e["kernel_us"]:
            why.append(f"{k['us_per_launch']:.2f} us per launch (expected {e['kernel_us']} us, 0.9x..3x)")
        if abs(k["ms_per_step"] * 1e3 - k["launches_per_step"] * k["us_per_launch"]) > 1e-3 * k["ms_per_step"] * 1e3 + 0.01:
            why.append(f"ms_per_step {k['ms_per_step']} != launches_per_step x us_per_launch")
        if abs(k["pct"] - 100 * k["ms_per_step"] / d["kernel_ms_per_step"]) > 0.01:
            why.append(f"pct {k['pct']} != 100 x its ms_per_step / kernel_ms_per_step")
        if why:
            bad.append(f"kernel {k['name']}: " + "; ".join(why))
    if abs(sum(k["ms_per_step"] for k in ks) - d["kernel_ms_per_step"]) > 1e-3 * d["kernel_ms_per_step"]:
        bad.append(f"kernel_ms_per_step {d['kernel_ms_per_step']} != the sum of the two kernels' ms_per_step")
# one stream: the kernels never overlap, so their summed time is the steps' busy time
busy_ms = sum(s["busy_us"] for s in d["steps"]) / max(len(d["steps"]), 1) * 1e-3
if abs(d["kernel_ms_per_step"] - busy_ms) > 0.01 * busy_ms:
    bad.append(f"kernel_ms_per_step {d['kernel_ms_per_step']:.4f} != mean busy time {busy_ms:.4f} ms (1%)")
if d["memcpy_memset_ms_per_step"] != 0:
    bad.append(f"memcpy_memset_ms_per_step {d['memcpy_memset_ms_per_step']}, expected 0 (the probe copies after its steps)")
print(f"check_kernel_gaps: {d['steps_measured']} steps, median span {d['median_span_us']:.1f} us, "
      f"median idle {d['median_idle_us']:.1f} us ({d['idle_pct']:.2f}%), largest gap {d['largest_gaps'][0]['us']:.1f} us, "
      f"kernels {d['kernel_ms_per_step']:.3f} ms per step")
if bad:
    print("check_kernel_gaps: FAIL:\n  " + "\n  ".join(bad[:20]) + (f"\n  ... {len(bad) - 20} more" if len(bad) > 20 else ""))
    sys.exit(3)
print("check_kernel_gaps: PASS")
EOF
rc=$?
[ $rc -eq 3 ] && exit 1   # FAIL, the reasons printed above
[ $rc -eq 0 ] || fail "the JSON check stopped with status $rc (above)"
