#!/usr/bin/env python3
"""Where the warps of chosen kernels wait, measured with Nsight Compute: one row per kernel name.

    python3 scripts/kernel_stalls.py --kernels 'attn_' --count 48 -- \\
        build/q115/train_gpt2cu -e d12 -b 64 -t 1024 -x 1 -v 0 -s 0 -i data/gutenberg/gutenberg_train_000000.bin
    python3 scripts/kernel_stalls.py --csv ncu_raw.csv        (summarize a csv written earlier with --save)

Runs `ncu --page raw --csv` with the SpeedOfLight, Occupancy, LaunchStats, SchedulerStats, WarpStateStats and
ComputeWorkloadAnalysis sections on the kernels whose function name matches --kernels (a regex; the first --count
launches after --skip), clocks and caches left alone. For each kernel name (launches averaged) it prints: calls, ms
per call, registers per thread, active warps per scheduler, issue slots used, cycles between two instructions of a
warp (smsp__average_warp_latency_per_inst_issued), the stall reasons that make up those cycles (the WarpStateStats
metrics smsp__average_warps_issue_stalled_<reason>_per_issue_active, largest first) and the busiest pipes
(ComputeWorkloadAnalysis: % of peak of each pipe's issue rate or active cycles). Nsight Compute's Kernel Profiling
Guide, "Warp Scheduler States", defines the reasons. ncu serializes the kernels and replays each one per pass; the
times are those of the replays. Needs ncu on the PATH and hardware counters it can read (doc/benchmarks.md names the
machines where it ran); exits 1 with a message when ncu fails or profiles no kernel.
"""
import argparse
import collections
import csv
import io
import re
import sys

from ncu_run import ncu_csv

SECTIONS = ["SpeedOfLight", "Occupancy", "LaunchStats", "SchedulerStats", "WarpStateStats", "ComputeWorkloadAnalysis"]
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
PIPE = re.compile(r"^sm__(?:inst_executed_pipe_(\w+?)|pipe_(\w+?)_cycles_active)\.avg\.pct_of_peak_sustained_active$")
SCALARS = {  # column -> (label, format)
    "gpu__time_duration.sum": ("ms", lambda v: f"{v / 1e6:.4f}"),
    "launch__registers_per_thread": ("regs", lambda v: f"{v:.0f}"),
    "smsp__warps_active.avg.per_cycle_active": ("warps/sched", lambda v: f"{v:.2f}"),
    "smsp__issue_active.avg.pct_of_peak_sustained_active": ("issue %", lambda v: f"{v:.1f}"),
    "smsp__average_warp_latency_per_inst_issued.ratio": ("cycles/inst", lambda v: f"{v:.2f}"),
}


def number(text):
    """ncu's csv value as a float (thousands separators dropped), None where it is not a number."""
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def read_kernels(text):
    """Yields (kernel name, {metric: value}) for each profiled launch in ncu's raw-page csv."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"') and '"Kernel Name"' in l), None)
    if start is None:
        sys.exit("error: kernel_stalls: no ncu raw csv table found (did ncu profile any kernel?)")
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if number(row.get("ID")) is None:  # the units row under the header
            continue
        values = {k: number(v) for k, v in row.items() if k and number(v) is not None}
        yield row["Kernel Name"], values


def short_name(name):
    """The function name with its template arguments, without return type and parameter list."""
    bare = re.sub(r"^void ", "", name)
    depth, out = 0, []
    for ch in bare:  # cut at the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        out.append(ch)
    return "".join(out)


def summarize(text, top_stalls, top_pipes):
    launches = collections.defaultdict(list)
    for name, values in read_kernels(text):
        launches[short_name(name)].append(values)
    if not launches:
        sys.exit("error: kernel_stalls: the csv holds no kernel rows")
    for name, rows in sorted(launches.items(), key=lambda kv: -sum(r.get("gpu__time_duration.sum", 0) for r in kv[1])):
        mean = {k: sum(r[k] for r in rows if k in r) / sum(1 for r in rows if k in r) for k in set().union(*rows)}
        print(f"{name}  ({len(rows)} calls)")
        print("   " + " | ".join(f"{label} {fmt(mean[col])}" for col, (label, fmt) in SCALARS.items() if col in mean))
        stalls = sorted(((m.group(1), v) for k, v in mean.items() if (m := STALL.match(k))), key=lambda x: -x[1])
        total = sum(v for _, v in stalls)
        print("   stalls (cycles per issued instruction): " +
              ", ".join(f"{r} {v:.2f} ({100 * v / total:.0f}%)" for r, v in stalls[:top_stalls] if total > 0))
        pipes = sorted(((m.group(1) or m.group(2), v) for k, v in mean.items() if (m := PIPE.match(k))), key=lambda x: -x[1])
        seen, busiest = set(), []
        for p, v in pipes:  # a pipe may appear as both issue rate and active cycles: keep the larger
            if p not in seen:
                seen.add(p)
                busiest.append(f"{p} {v:.1f}%")
        print("   pipes (% of peak): " + ", ".join(busiest[:top_pipes]))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", help="summarize this ncu raw csv instead of running a command")
    ap.add_argument("--save", help="also write ncu's csv here")
    ap.add_argument("--kernels", default=".", help="regex on the kernel function name (default: every kernel)")
    ap.add_argument("--skip", type=int, default=0, help="matching launches to skip first (default 0)")
    ap.add_argument("--count", type=int, default=20, help="matching launches to profile (default 20)")
    ap.add_argument("--stalls", type=int, default=6, help="stall reasons to list per kernel (default 6)")
    ap.add_argument("--pipes", type=int, default=5, help="pipes to list per kernel (default 5)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to profile")
    args = ap.parse_args()
    if args.skip < 0 or args.count < 1:
        ap.error("--skip must be >= 0 and --count >= 1")
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.csv and not cmd:
        ap.error("give --csv FILE or -- COMMAND")
    flags = ["--kernel-name-base", "function", "--kernel-name", f"regex:{args.kernels}", "--launch-skip", str(args.skip),
             "--launch-count", str(args.count), "--page", "raw"]
    for s in SECTIONS:
        flags += ["--section", s]
    text = ncu_csv("kernel_stalls", flags, cmd, args.csv, args.save)
    summarize(text, args.stalls, args.pipes)


if __name__ == "__main__":
    main()
