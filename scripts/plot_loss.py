"""Plot training and validation loss from one or more main.log files (doc/FORMATS.md).

usage: plot_loss.py LOG[:LABEL] [LOG[:LABEL] ...] -o out.png [--title T]
Each log contributes a train-loss line (thin) and validation-loss points (markers) in one colour.
"""
import argparse
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def parse_log(path):
    """Return (train, val): lists of (step, loss) from a main.log file; exits naming a bad line."""
    train, val = [], []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                kv = dict(item.split(":", 1) for item in line.split())
                step = int(kv["s"])
                if "trl" in kv:
                    train.append((step, float(kv["trl"])))
                if "tel" in kv:
                    val.append((step, float(kv["tel"])))
            except (ValueError, KeyError) as e:
                sys.exit(f"error: {path}:{lineno}: not a main.log line ({e}): {line[:80]}")
    return train, val


def main():
    """Parse arguments, read the logs, write the PNG."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", help="main.log files, optionally LOG:LABEL")
    ap.add_argument("-o", "--out", required=True, help="output PNG")
    ap.add_argument("--title", default="GPT-2 training loss")
    args = ap.parse_args()
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, spec in enumerate(args.logs):
        path, _, label = spec.partition(":")
        train, val = parse_log(path)
        color = f"C{i}"
        label = label or path
        if train:
            ax.plot(*zip(*train), color=color, lw=0.8, alpha=0.6, label=f"{label} train")
        if val:
            ax.plot(*zip(*val), color=color, marker="o", ms=4, lw=1.5, label=f"{label} val")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss (nats)")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
