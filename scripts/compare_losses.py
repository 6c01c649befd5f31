#!/usr/bin/env python3
"""Compare the per-step train losses printed by two train_gpt2cu runs.

    scripts/compare_losses.py A.log B.log [--rtol R] [--steps FIRST-LAST] [--exact]

Reads the `step N/M | loss X` lines of both logs, pairs them by step, and prints the number of
steps compared and the largest absolute and relative difference. Exit status 0 when every pair is
within --rtol (relative to A's loss) or, with --exact, when the printed losses are identical;
1 otherwise, 2 when a log has none of the requested steps.
"""
import argparse
import re
import sys

STEP = re.compile(r"^step\s+(\d+)/\d+ \| loss ([-+0-9.eEinfa]+)")


def losses(path):
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = STEP.match(line)
            if m:
                out[int(m.group(1))] = m.group(2)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rtol", type=float, default=0.0)
    p.add_argument("--steps", default="", help="FIRST-LAST, inclusive")
    p.add_argument("--exact", action="store_true")
    args = p.parse_args()
    la, lb = losses(args.a), losses(args.b)
    steps = sorted(set(la) & set(lb))
    if args.steps:
        lo, hi = (int(x) for x in args.steps.split("-"))
        steps = [s for s in steps if lo <= s <= hi]
    if not steps:
        print(f"no common steps in {args.a} and {args.b}")
        return 2
    max_abs = max_rel = 0.0
    same = True
    for s in steps:
        x, y = float(la[s]), float(lb[s])
        same &= la[s] == lb[s]
        d = abs(x - y)
        max_abs = max(max_abs, d)
        max_rel = max(max_rel, d / abs(x) if x else d)
    ok = same if args.exact else max_rel <= args.rtol
    print(f"{len(steps)} steps ({steps[0]}..{steps[-1]}): max |diff| {max_abs:.3e}, max rel {max_rel:.3e}, "
          f"{'identical' if same else 'not identical'} -> {'ok' if ok else 'FAIL'}"
          f"{'' if args.exact else f' (rtol {args.rtol:g})'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
