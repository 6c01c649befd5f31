#!/usr/bin/env python3
"""Per-kernel GPU time of a command (usually one training step), measured with Nsight Compute.

    python3 scripts/kernel_times.py -- build/fp8/train_gpt2cu -e d24 -b 32 -t 1024 -x 1 -v 0 -s 0 \\
        -i data/tinyshakespeare/tiny_shakespeare_train.bin
    python3 scripts/kernel_times.py --csv ncu.csv            (summarize a csv written earlier)

Runs `ncu --metrics gpu__time_duration.sum --csv` on the command (clocks and caches left alone:
--clock-control none --cache-control none), then prints the total, the time by family (FP8 and BF16
GEMMs, attention, quantization, GELU, LayerNorm, ...) and the longest kernels. ncu serializes the
kernels, so the total is the sum of kernel durations: it leaves out launch gaps and overlap, which
the trainer's `-prof 1` and its step time include. With `-x 1` the count covers one optimizer step
plus start-up kernels (parameter initialization), which are small. Needs ncu on the PATH and a GPU
whose counters ncu can read (doc/benchmarks.md names the machines where it ran).
"""
import argparse
import collections
import csv
import io
import re
import sys

from ncu_run import ncu_csv

# (family, regex on the kernel name), first match wins. cuBLASLt's Hopper kernels are named nvjet_*;
# "qq" / "qr" in the name mark FP8 operand types (E4M3 x E4M3 / mixed), the rest are BF16.
FAMILIES = [
    ("FP8 GEMM (cuBLASLt)", r"^nvjet_\w*_q[qr]"),
    ("BF16 GEMM (cuBLASLt, CUTLASS)", r"^nvjet_|cutlass|gemm_.*bf16|splitKreduce"),
    ("attention", r"attn_"),
    ("FP8 quantization and amax", r"^(void )?fp8q_"),
    ("GELU / dGELU", r"gelu_(forward|backward)"),
    ("bias gradient", r"dbias"),
    ("LayerNorm", r"layernorm"),
    ("AdamW, grad norm", r"adamw|global_norm"),
    ("classifier", r"classifier"),
    ("encoder", r"encoder"),
]


def read_rows(text):
    """Yields (kernel name, milliseconds) from ncu's csv output (header line found by its columns)."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if '"Kernel Name"' in l and '"Metric Value"' in l), None)
    if start is None:
        sys.exit("error: kernel_times: no ncu csv table found (did ncu profile any kernel?)")
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        yield row["Kernel Name"], float(row["Metric Value"].replace(",", "")) / 1e6  # ns -> ms


def family_of(name):
    bare = re.sub(r"^void ", "", name)
    for fam, rx in FAMILIES:
        if re.search(rx, bare):
            return fam
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", help="summarize this ncu csv instead of running a command")
    ap.add_argument("--save", help="also write ncu's csv here")
    ap.add_argument("--top", type=int, default=25, help="longest kernels to list (default 25)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to profile")
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.csv and not cmd:
        ap.error("give --csv FILE or -- COMMAND")
    text = ncu_csv("kernel_times", ["--metrics", "gpu__time_duration.sum"], cmd, args.csv, args.save)
    by_name = collections.defaultdict(float)
    count = collections.Counter()
    for name, ms in read_rows(text):
        by_name[name] += ms
        count[name] += 1
    by_family = collections.defaultdict(float)
    for name, ms in by_name.items():
        by_family[family_of(name)] += ms
    total = sum(by_name.values())
    print(f"total {total:.2f} ms over {sum(count.values())} kernels")
    print("\n| family | ms | share |\n|---|---|---|")
    for fam, ms in sorted(by_family.items(), key=lambda x: -x[1]):
        print(f"| {fam} | {ms:.2f} | {100 * ms / total:.1f}% |")
    print(f"\n{'ms':>9} {'calls':>6}  kernel")
    for name, ms in sorted(by_name.items(), key=lambda x: -x[1])[: args.top]:
        print(f"{ms:9.3f} {count[name]:6d}  {name[:110]}")


if __name__ == "__main__":
    main()
