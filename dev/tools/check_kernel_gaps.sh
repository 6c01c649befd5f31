#!/usr/bin/env bash
# Check dev/tools/kernel_gaps.cpp on a GPU against the known timeline of dev/tools/gap_probe.cu:
# builds both (make kernel-gaps), runs the probe once plain (it must run without the library) and
# once under CUDA_INJECTION64_PATH, then checks the JSON: the number of steps and, in every measured
# step, its activities, exactly 2 gaps >= 20 us, each >= 200 us, idle >= 400 us, and every other
# gap < 20 us. Prints PASS or FAIL (with the reasons) last; exit status 0 only on PASS.
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
CUDA_INJECTION64_PATH=$lib KERNEL_GAPS_STEP_KERNEL=gap_probe_step_marker KERNEL_GAPS_SKIP=3 \
    KERNEL_GAPS_OUT="$dir/gaps.json" "$probe" > "$dir/traced.log" 2>&1
rc=$?
cat "$dir/traced.log"
[ $rc -eq 0 ] || fail "$probe exited $rc under the library"
grep -q '^kernel_gaps: recording' "$dir/traced.log" || fail "the library was not loaded (no 'kernel_gaps: recording' line)"
grep -q '^kernel_gaps: error' "$dir/traced.log" && fail "kernel_gaps reported an error (above)"
expect=$(grep '^gap_probe: expect ' "$dir/traced.log" | sed 's/^gap_probe: expect //')
[ -n "$expect" ] || fail "no 'gap_probe: expect' line"
[ -s "$dir/gaps.json" ] || fail "no $dir/gaps.json"

# shellcheck disable=SC2086  # $expect: one argument per key=value pair
python3 - "$dir/gaps.json" $expect <<'EOF'
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
print(f"check_kernel_gaps: {d['steps_measured']} steps, median span {d['median_span_us']:.1f} us, "
      f"median idle {d['median_idle_us']:.1f} us ({d['idle_pct']:.2f}%), largest gap {d['largest_gaps'][0]['us']:.1f} us")
if bad:
    print("check_kernel_gaps: FAIL:\n  " + "\n  ".join(bad[:20]) + (f"\n  ... {len(bad) - 20} more" if len(bad) > 20 else ""))
    sys.exit(3)
print("check_kernel_gaps: PASS")
EOF
rc=$?
[ $rc -eq 3 ] && exit 1   # FAIL, the reasons printed above
[ $rc -eq 0 ] || fail "the JSON check stopped with status $rc (above)"
