#!/usr/bin/env python3
"""Heatmaps (layer x step) of the per-layer tensor statistics a training run recorded.

    .venv/bin/python scripts/plot_stats.py CSV [--column amax[,rms,...]] [--tensor NAME] [--kind act|weight|grad]
                                      [--out DIR] [--log] [--grid]

CSV is a `tensor_stats.csv` written by `train_gpt2cu --tensor-stats N` (doc/FORMATS.md): one header
line naming the columns

    step,layer,tensor,kind,numel,amax,rms,zero_frac,below_bf16,below_fp16,below_e4m3,nan,inf

then one row per tensor slice and recorded step: `layer` is 0..L-1, or -1 for a model-level tensor
(encoded, lnf, logits, wte, wpe, lnfw, lnfb); `kind` is act, weight or grad; `below_*` are the
fractions with 0 < |x| < 2^-126 / 2^-14 / 2^-6 (smallest normal of BF16 / FP16 / FP8 E4M3); `nan`
and `inf` are counts; `rms` may be `nan` (no finite value). Columns may come in any order and extra
columns are ignored, so a trainer that adds one does not break this tool. A resumed run appends rows
of steps it recorded before; the last row of a (step, layer, tensor, kind) wins.

Output, in --out (default: the CSV's folder), for each selected (kind, tensor) and column:
`<column>_<kind>_<tensor>.png`, one heatmap with layers as rows (layer 0 at the bottom, "model" for
layer -1) and the recorded steps as columns; with --grid instead one `<column>_<kind>_grid.png` per
kind holding every selected tensor of that kind. --log colours by log10 (zeros and negatives, e.g.
an all-zero fraction, are left blank, like missing cells). Prints the files written. A malformed CSV
stops with `error: <file>:<line>: <problem>` and exit status 1.
"""
import argparse
import csv
import math
import re
import sys
from collections import OrderedDict
from pathlib import Path

INT_COLUMNS = ("step", "layer", "numel", "nan", "inf")
FLOAT_COLUMNS = ("amax", "rms", "zero_frac", "below_bf16", "below_fp16", "below_e4m3")
TEXT_COLUMNS = ("tensor", "kind")
REQUIRED = ("step", "layer", "tensor", "kind", "numel") + FLOAT_COLUMNS + ("nan", "inf")
PLOTTABLE = ("numel",) + FLOAT_COLUMNS + ("nan", "inf")
KINDS = ("act", "weight", "grad")
GRID_COLUMNS = 4


class StatsError(Exception):
    """A malformed CSV or an impossible selection; the message names the file (and line)."""


def _parse_field(path, lineno, name, text):
    """One CSV field as int, float or str, by its column; StatsError naming the line otherwise."""
    try:
        if name in INT_COLUMNS:
            return int(text)
        if name in FLOAT_COLUMNS:
            return float(text)  # accepts nan / inf as the trainer prints them
    except ValueError:
        kind = "an integer" if name in INT_COLUMNS else "a number"
        raise StatsError(f"{path}:{lineno}: {name}: {text!r} is not {kind}") from None
    return text


def _parse_row(path, lineno, header, fields):
    """A data row as {column: value} for the required columns, checked."""
    if len(fields) != len(header):
        raise StatsError(f"{path}:{lineno}: {len(fields)} fields, the header has {len(header)}")
    row = {name: _parse_field(path, lineno, name, text.strip())
           for name, text in zip(header, fields) if name in REQUIRED}
    if row["kind"] not in KINDS:
        raise StatsError(f"{path}:{lineno}: kind: {row['kind']!r} is not one of {', '.join(KINDS)}")
    if row["layer"] < -1:
        raise StatsError(f"{path}:{lineno}: layer: {row['layer']} (expected -1 or a layer index >= 0)")
    if not row["tensor"]:
        raise StatsError(f"{path}:{lineno}: tensor: empty name")
    return row


def read_stats(path):
    """Rows of a tensor_stats.csv as a list of dicts (last duplicate of a key wins)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise StatsError(f"{path}: cannot read ({e.strerror})") from None
    lines = list(csv.reader(text.splitlines()))
    if not lines or not any(f.strip() for f in lines[0]):
        raise StatsError(f"{path}:1: empty file, expected the header line {','.join(REQUIRED)}")
    header = [h.strip() for h in lines[0]]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise StatsError(f"{path}:1: header lacks column(s) {', '.join(missing)} "
                         f"(expected {','.join(REQUIRED)})")
    rows = OrderedDict()
    for lineno, fields in enumerate(lines[1:], 2):
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue  # a blank line, e.g. a trailing one
        row = _parse_row(path, lineno, header, fields)
        rows[(row["step"], row["layer"], row["tensor"], row["kind"])] = row
    if not rows:
        raise StatsError(f"{path}: no data rows after the header")
    return list(rows.values())


def series_keys(rows, kind=None, tensor=None, source="the CSV"):
    """(kind, tensor) pairs in the order the CSV has them, filtered; StatsError naming source if none match."""
    keys = list(OrderedDict.fromkeys((r["kind"], r["tensor"]) for r in rows))
    chosen = [k for k in keys if (kind is None or k[0] == kind) and (tensor is None or k[1] == tensor)]
    if not chosen:
        have = ", ".join(sorted({f"{k} {t}" for k, t in keys}))
        want = " ".join(x for x in (kind, tensor) if x)
        raise StatsError(f"{source}: no rows for {want!r}; it has: {have}")
    return chosen


def heatmap_matrix(rows, kind, tensor, column):
    """(layers, steps, matrix) of one (kind, tensor): matrix[i][j] = column at layers[i], steps[j],
    NaN where the CSV has no row (a step that did not record this tensor)."""
    cells = {(r["layer"], r["step"]): float(r[column]) for r in rows if r["kind"] == kind and r["tensor"] == tensor}
    layers = sorted({layer for layer, _ in cells})
    steps = sorted({step for _, step in cells})
    matrix = [[cells.get((layer, step), math.nan) for step in steps] for layer in layers]
    return layers, steps, matrix


def _norm_and_data(matrix, log):
    """Masked array and colour norm: with log, non-positive cells are blank (log10 undefined)."""
    import numpy as np
    from matplotlib.colors import LogNorm, Normalize

    data = np.array(matrix, dtype=float)
    bad = ~np.isfinite(data) | ((data <= 0) if log else False)
    masked = np.ma.masked_array(data, mask=bad)
    if masked.count() == 0:
        return masked, Normalize(vmin=0.0, vmax=1.0)  # nothing to colour: an empty, labelled panel
    lo, hi = float(masked.min()), float(masked.max())
    if log:
        return masked, LogNorm(vmin=lo, vmax=hi if hi > lo else lo * 10)
    return masked, Normalize(vmin=lo, vmax=hi if hi > lo else lo + 1)


def draw_heatmap(ax, fig, layers, steps, matrix, title, column, log):
    """One heatmap on ax: layers bottom-up, steps left to right (categorical: steps are 1, N, 2N...)."""
    import matplotlib

    data, norm = _norm_and_data(matrix, log)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")  # missing, NaN, (log) non-positive
    im = ax.imshow(data, aspect="auto", origin="lower", interpolation="nearest", cmap=cmap, norm=norm)
    if data.count() == 0:  # say so rather than show a colour bar that means nothing
        ax.text(0.5, 0.5, "no positive values" if log else "no finite values", transform=ax.transAxes,
                ha="center", va="center", fontsize=9)
    ax.set_yticks(range(len(layers)), ["model" if layer < 0 else str(layer) for layer in layers])
    every = max(1, math.ceil(len(steps) / 10))
    ax.set_xticks(range(0, len(steps), every), [str(s) for s in steps[::every]])
    ax.set_xlabel("step")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    if data.count():
        fig.colorbar(im, ax=ax, label=column + (" (log)" if log else ""))


def _safe(name):
    """A file-name-safe form of a tensor name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def plot_single(rows, keys, column, out_dir, log):
    """One PNG per (kind, tensor); returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for kind, tensor in keys:
        layers, steps, matrix = heatmap_matrix(rows, kind, tensor, column)
        fig, ax = plt.subplots(figsize=(max(5.0, 0.25 * len(steps) + 3), max(2.5, 0.3 * len(layers) + 1.5)))
        draw_heatmap(ax, fig, layers, steps, matrix, f"{column} of {kind} {tensor}", column, log)
        fig.tight_layout()
        path = Path(out_dir) / f"{column}_{kind}_{_safe(tensor)}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def plot_grid(rows, keys, column, out_dir, log):
    """One PNG per kind with a panel per tensor; returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for kind in KINDS:
        tensors = [t for k, t in keys if k == kind]
        if not tensors:
            continue
        ncols = min(GRID_COLUMNS, len(tensors))
        nrows = math.ceil(len(tensors) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.2 * nrows), squeeze=False)
        for ax, tensor in zip(axes.flat, tensors):
            layers, steps, matrix = heatmap_matrix(rows, kind, tensor, column)
            draw_heatmap(ax, fig, layers, steps, matrix, tensor, column, log)
        for ax in list(axes.flat)[len(tensors):]:
            ax.set_visible(False)
        fig.suptitle(f"{column} of {kind} tensors (layer x step)")
        fig.tight_layout()
        path = Path(out_dir) / f"{column}_{kind}_grid.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    return written


def plot_stats(csv_path, columns, out_dir=None, kind=None, tensor=None, log=False, grid=False):
    """Read csv_path and write the heatmaps of each column; returns the paths. Raises StatsError."""
    for column in columns:
        if column not in PLOTTABLE:
            raise StatsError(f"--column: {column!r} is not one of {', '.join(PLOTTABLE)}")
    if kind is not None and kind not in KINDS:
        raise StatsError(f"--kind: {kind!r} is not one of {', '.join(KINDS)}")
    rows = read_stats(csv_path)
    keys = series_keys(rows, kind, tensor, csv_path)
    out_dir = Path(out_dir) if out_dir else Path(csv_path).parent
    out_dir.mkdir(parents=True, exist_ok=True)
    plot = plot_grid if grid else plot_single
    return [path for column in columns for path in plot(rows, keys, column, out_dir, log)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="tensor_stats.csv")
    ap.add_argument("--column", default="amax", help=f"one or more of {','.join(PLOTTABLE)}, comma-separated [amax]")
    ap.add_argument("--tensor", help="only this tensor name (e.g. qkv, fcw, logits)")
    ap.add_argument("--kind", help="only act, weight or grad")
    ap.add_argument("--out", help="output folder [the CSV's folder]")
    ap.add_argument("--log", action="store_true", help="log colour scale")
    ap.add_argument("--grid", action="store_true", help="one PNG per kind with every tensor")
    args = ap.parse_args(argv)
    columns = [c.strip() for c in args.column.split(",") if c.strip()]
    try:
        written = plot_stats(args.csv, columns, args.out, args.kind, args.tensor, args.log, args.grid)
    except StatsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
