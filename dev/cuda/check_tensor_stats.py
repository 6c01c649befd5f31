#!/usr/bin/env python3
"""check_tensor_stats.py - recompute the --tensor-stats statistics with numpy from a tensor dumped by
the CUDA harness (dev/cuda/tensor_stats.cu --dump DIR) and compare them with the GPU's.

    build/bf16/dev/tensor_stats --check-only --dump /tmp/ts_dump
    python3 dev/cuda/check_tensor_stats.py /tmp/ts_dump

DIR/tensor.bin holds the raw elements (bfloat16, float16 or float32, little-endian, as named in
DIR/tensor_stats_gpu.json), DIR/tensor_stats_gpu.json the GPU's statistics of them. numpy computes,
in float64 over the finite values: amax = max |x|, rms = sqrt(mean(x^2)); over all values the counts
of exact zeros, of 0 < |x| < 2^-126 / 2^-14 / 2^-6, of NaN and of +-Inf (llmc/obs/tensor_stats.cuh).
Tolerances: counts exact, amax exact (the same float32 value), RMS relative 1e-6 (float64 sums in a
different order agree to ~1e-15; 1e-6 is the bound the issue states), fractions exact up to the
printed digits (relative 1e-12). If DIR/tensor_stats.csv exists (the harness's trainer-cycle CSV),
its header, column count and column types are checked too. Prints one line per check and
`N passed, N failed`; exit status 1 on any failure.
"""
import json
import math
import os
import sys

import numpy as np

CSV_HEADER = "step,layer,tensor,kind,numel,amax,rms,zero_frac,below_bf16,below_fp16,below_e4m3,nan,inf"


def load_tensor(folder, meta):
    raw = open(os.path.join(folder, meta["file"]), "rb").read()
    dtype = meta["dtype"]
    if dtype == "bfloat16":  # no numpy dtype: widen the 16-bit patterns to float32 (exact)
        x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif dtype == "float16":
        x = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "float32":
        x = np.frombuffer(raw, dtype="<f4")
    else:
        raise SystemExit(f"error: {folder}/tensor_stats_gpu.json: dtype: unknown '{dtype}'")
    if x.size != meta["numel"]:
        raise SystemExit(f"error: {folder}/{meta['file']}: {x.size} values, the JSON says numel {meta['numel']}")
    return x


def numpy_stats(x):
    a = np.abs(x.astype(np.float64))
    finite = np.isfinite(a)
    fa = a[finite]
    nz = (a > 0) & finite
    return {
        "numel": int(x.size),
        "amax": float(fa.max()) if fa.size else 0.0,
        "rms": math.sqrt(float(np.mean(fa * fa))) if fa.size else float("nan"),
        "zero": int(np.count_nonzero(a == 0)),
        "below_bf16": int(np.count_nonzero(nz & (a < 2.0 ** -126))),
        "below_fp16": int(np.count_nonzero(nz & (a < 2.0 ** -14))),
        "below_e4m3": int(np.count_nonzero(nz & (a < 2.0 ** -6))),
        "nan": int(np.count_nonzero(np.isnan(x))),
        "inf": int(np.count_nonzero(np.isinf(x))),
        "finite": int(np.count_nonzero(finite)),
    }


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        print(f"  {name:<34} {'ok' if ok else 'FAIL'}{'  ' + detail if detail else ''}")
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def check_csv(path, tally):
    lines = open(path).read().splitlines()
    tally.check("CSV header", bool(lines) and lines[0] == CSV_HEADER, repr(lines[0]) if lines else "empty file")
    tally.check("CSV header appears once", sum(1 for l in lines if l == CSV_HEADER) == 1)
    bad = 0
    for line in lines[1:]:
        f = line.split(",")
        try:
            ok = len(f) == 13 and f[3] in ("act", "weight", "grad") and int(f[1]) >= -1 and int(f[4]) >= 0
            int(f[0]); int(f[11]); int(f[12])
            for v in f[5:11]:
                float(v)
        except ValueError:
            ok = False
        bad += 0 if ok else 1
    tally.check(f"CSV rows well formed ({len(lines) - 1})", bad == 0 and len(lines) > 1, f"{bad} malformed")


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: check_tensor_stats.py DIR   (DIR written by tensor_stats --dump DIR)")
    folder = sys.argv[1]
    meta = json.load(open(os.path.join(folder, "tensor_stats_gpu.json")))
    x = load_tensor(folder, meta)
    ref = numpy_stats(x)
    print(f"check_tensor_stats: {ref['numel']} {meta['dtype']} values from {folder}")
    t = Tally()
    for key in ("zero", "below_bf16", "below_fp16", "below_e4m3", "nan", "inf", "finite"):
        t.check(f"{key} count (exact)", meta[key] == ref[key], f"gpu {meta[key]} numpy {ref[key]}")
    t.check("amax (exact)", np.float32(meta["amax"]) == np.float32(ref["amax"]), f"gpu {meta['amax']!r} numpy {ref['amax']!r}")
    if math.isnan(ref["rms"]):
        t.check("rms (NaN: no finite value)", math.isnan(meta["rms"]))
    else:
        rel = abs(meta["rms"] - ref["rms"]) / ref["rms"] if ref["rms"] > 0 else abs(meta["rms"])
        t.check("rms (relative 1e-6)", rel <= 1e-6, f"gpu {meta['rms']!r} numpy {ref['rms']!r} rel {rel:.2e}")
    n = float(ref["numel"]) or 1.0
    for key in ("zero", "below_bf16", "below_fp16", "below_e4m3"):
        frac_key = key + "_frac" if key != "zero" else "zero_frac"
        want = ref[key] / n
        t.check(f"{frac_key} (= count / numel)", abs(meta[frac_key] - want) <= 1e-12 * max(want, 1e-300),
                f"gpu {meta[frac_key]!r} numpy {want!r}")
    csv = os.path.join(folder, "tensor_stats.csv")
    if os.path.exists(csv):
        check_csv(csv, t)
    print(f"\n{t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
