"""Compare llmc/numerics/fp8.h with ml_dtypes (an independent FP8 implementation).

A tiny C program (compiled here with cc) reads a fixed set of float32 values, and prints for each
of the four formats the decode table of all 256 codes and the encodings of every value in four
modes (RNE and stochastic rounding, saturating and non-saturating). The checks:

* decode: every non-NaN code decodes to the same float32 bits as ml_dtypes (sign of zero
  included), and the NaN codes are the same set;
* RNE, non-saturating: byte-identical to ml_dtypes' float32 -> float8 cast, which rounds to
  nearest even and does not saturate (overflow and +-Inf give Inf for e5m2 and NaN for the other
  three formats; NaN gives 0x7F|sign for e4m3fn, 0x7E|sign for e5m2, 0x80 for the FNUZ formats);
* RNE, saturating: byte-identical to ml_dtypes' cast of the values clipped to [-max, max]
  (ml_dtypes has no saturating mode; clipping first gives the saturating result, +-Inf included);
* stochastic rounding: every result is one of the two neighbours of the value on the format's
  grid (found from ml_dtypes' table), exact values stay, and the rounding-up frequency matches
  the distance fraction (a z-test over all inexact values).

Known difference: ml_dtypes decodes the FNUZ NaN code 0x80 to a negative float NaN, fp8.h to a
positive one (NaN signs carry no meaning there); NaN decodes are compared by NaN-ness only.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

ml_dtypes = pytest.importorskip(
    "ml_dtypes", reason="ml_dtypes is not installed (.venv/bin/python -m pip install 'ml_dtypes>=0.5,<0.6')")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KINDS = ["e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"]  # FP8Kind order in fp8.h
DTYPES = {k: getattr(ml_dtypes, "float8_" + k) for k in KINDS}
SEED = 20240611  # stochastic rounding seed passed to the C program

C_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include "llmc/numerics/fp8.h"

static void put_hex(const unsigned char* p, size_t n) {
    static const char* d = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) { putchar(d[p[i] >> 4]); putchar(d[p[i] & 15]); }
}

int main(int argc, char** argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s values.f32 seed\n", argv[0]); return 2; }
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f) / 4;
    fseek(f, 0, SEEK_SET);
    float* x = (float*)malloc(n * 4 + 4);
    unsigned char* out = (unsigned char*)malloc(n + 1);
    if (fread(x, 4, n, f) != n) { fprintf(stderr, "short read\n"); return 2; }
    fclose(f);
    unsigned long long seed = strtoull(argv[2], NULL, 10);
    for (int k = 0; k < FP8_NUM_KINDS; k++) {
        FP8Format fmt = fp8_format((FP8Kind)k);
        const char* name = fp8_kind_name((FP8Kind)k);
        float table[256];
        for (int c = 0; c < 256; c++) table[c] = fp8_decode(fmt, (uint8_t)c);
        printf("decode %s ", name); put_hex((const unsigned char*)table, sizeof(table)); putchar('\n');
        for (int mode = 0; mode < 4; mode++) {
            int sat = mode & 1, sr = mode >> 1;
            for (size_t i = 0; i < n; i++) {
                out[i] = sr ? fp8_encode_sr(fmt, x[i], fp8_random_bits(seed, i), sat) : fp8_encode_rne(fmt, x[i], sat);
            }
            printf("%s_%s %s ", sr ? "sr" : "rne", sat ? "sat" : "nosat", name); put_hex(out, n); putchar('\n');
        }
    }
    free(x);
    free(out);
    return 0;
}
"""


def grid(kind):
    """Sorted non-negative finite values of a format (from ml_dtypes) and the first point past max."""
    vals = np.arange(128, dtype=np.uint8).view(DTYPES[kind]).astype(np.float64)
    vals = np.unique(vals[np.isfinite(vals)])
    virt = vals[-1] + (vals[-1] - vals[-2])
    return vals, virt


def make_values():
    """The fixed value set: ~1e5 float32 values covering every format's codes, ties, near-ties,
    subnormals, overflow, float32 subnormals and specials."""
    rng = np.random.default_rng(1234)
    parts = []
    for kind in KINDS:
        vals, virt = grid(kind)
        pts = np.append(vals, virt)
        mids = 0.5 * (pts[:-1] + pts[1:])
        assert np.all(mids.astype(np.float32).astype(np.float64) == mids)
        m32 = mids.astype(np.float32)
        v32 = vals.astype(np.float32)
        for a in (v32, m32, np.nextafter(m32, np.float32(0)), np.nextafter(m32, np.float32(np.inf))):
            parts += [a, -a]
        mx = vals[-1]
        parts.append((rng.uniform(-1.3, 1.3, 5000) * mx).astype(np.float32))
        parts.append((rng.uniform(-1, 1, 3000) * 4 * vals[1]).astype(np.float32))  # around the subnormals
    mag = np.exp2(rng.uniform(-24, 19, 50000))
    parts.append((mag * rng.choice([-1.0, 1.0], mag.size)).astype(np.float32))
    parts.append(rng.integers(0, 2**32, 15000, dtype=np.uint64).astype(np.uint32).view(np.float32))
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4028235e38, -3.4028235e38, 1.1754944e-38, 1e-45,
                -1e-45, 1e-30, -1e-30, 464.0, 465.0, 61440.0, 248.0]
    parts.append(np.array(specials, dtype=np.float32))
    parts.append(np.array([0x7F800001, 0xFF800001, 0x7FC00001, 0x7FBFFFFF, 0xFFFFFFFF, 0x00000001, 0x807FFFFF],
                          dtype=np.uint32).view(np.float32))
    x = np.concatenate(parts).astype(np.float32)
    assert 90000 <= x.size <= 130000
    return x



@pytest.fixture(scope="module")
def c_results(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC_FP8_TEST", "cc"))
    if cc is None:
        pytest.skip("no C compiler: `cc` is not on PATH (needed to build the fp8.h test program)")
    d = tmp_path_factory.mktemp("fp8")
    src, exe, vals = d / "fp8_dump.c", d / "fp8_dump", d / "values.f32"
    src.write_text(C_SOURCE)
    build = subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-I", REPO, str(src), "-lm", "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    assert build.stderr.strip() == "", "warnings building the dump program:\n" + build.stderr
    x = make_values()
    x.tofile(vals)
    run = subprocess.run([str(exe), str(vals), str(SEED)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    res = {}
    for line in run.stdout.splitlines():
        tag, kind, hexs = line.split(" ")
        raw = bytes.fromhex(hexs)
        res[(tag, kind)] = np.frombuffer(raw, dtype="<f4" if tag == "decode" else np.uint8)
    assert len(res) == 5 * len(KINDS)
    return x, res


def ml_encode(x, kind):
    """ml_dtypes' float32 -> float8 cast as code bytes (RNE, non-saturating)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(DTYPES[kind]).view(np.uint8)


def fmt_bytes(codes, idx):
    return ", ".join(f"0x{c:02X}" for c in codes[idx][:8])


@pytest.mark.parametrize("kind", KINDS)
def test_decode_table(c_results, kind):
    _, res = c_results
    got = res[("decode", kind)]
    want = np.arange(256, dtype=np.uint8).view(DTYPES[kind]).astype(np.float32)
    assert got.shape == (256,)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    bad = np.nonzero(got[fin].view(np.uint32) != want[fin].view(np.uint32))[0]
    assert bad.size == 0, f"{kind}: codes {np.nonzero(fin)[0][bad][:8]} decode differently"


@pytest.mark.parametrize("kind", KINDS)
def test_rne_nonsaturating_matches_ml_dtypes(c_results, kind):
    x, res = c_results
    got, want = res[("rne_nosat", kind)], ml_encode(x, kind)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (f"{kind}: {bad.size} of {x.size} differ, e.g. x={x[bad][:8]} "
                           f"got [{fmt_bytes(got, bad)}] want [{fmt_bytes(want, bad)}]")


@pytest.mark.parametrize("kind", KINDS)
def test_rne_saturating_matches_clipped_ml_dtypes(c_results, kind):
    x, res = c_results
    mx = np.float32(grid(kind)[0][-1])
    got, want = res[("rne_sat", kind)], ml_encode(np.clip(x, -mx, mx), kind)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (f"{kind}: {bad.size} of {x.size} differ, e.g. x={x[bad][:8]} "
                           f"got [{fmt_bytes(got, bad)}] want [{fmt_bytes(want, bad)}]")
    # saturating results are never NaN except for NaN inputs, never Inf
    dec = res[("decode", kind)][got]
    assert np.all(np.isnan(dec) == np.isnan(x)) and not np.any(np.isinf(dec))


@pytest.mark.parametrize("kind", KINDS)
def test_ml_dtypes_overflow_behaviour(kind):
    """Pin down the ml_dtypes behaviour the comparison relies on (non-saturating, OFP8 5.2 rules)."""
    big = np.array([1e6, -1e6, np.inf, -np.inf], dtype=np.float32)
    got = ml_encode(big, kind)
    want = {"e4m3fn": [0x7F, 0xFF, 0x7F, 0xFF], "e5m2": [0x7C, 0xFC, 0x7C, 0xFC],
            "e4m3fnuz": [0x80] * 4, "e5m2fnuz": [0x80] * 4}[kind]
    assert list(got) == want


@pytest.mark.parametrize("sat", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
def test_stochastic_rounding_neighbours_and_frequency(c_results, kind, sat):
    x, res = c_results
    got = res[("sr_sat" if sat else "sr_nosat", kind)]
    dec = res[("decode", kind)][got].astype(np.float64)
    vals, virt = grid(kind)
    mx = vals[-1]
    with np.errstate(invalid="ignore"):  # signalling-NaN patterns in the value set
        xd = x.astype(np.float64)
    fin = np.isfinite(xd)
    a = np.abs(np.where(fin, xd, 0.0))
    if sat:
        a = np.minimum(a, mx)
    pts = np.append(vals, virt)
    inside = fin & (a < virt)
    hi_i = np.searchsorted(pts, a, side="left").clip(0, len(pts) - 1)
    hi = pts[hi_i]
    lo = np.where(hi == a, hi, pts[np.maximum(hi_i - 1, 0)])
    sign = np.where(np.signbit(x), -1.0, 1.0)
    # expected values of the two choices (virt stands for overflow: Inf or NaN in non-saturating mode)
    def as_result(v):
        return np.where(v == virt, np.where(kind == "e5m2", np.inf, np.nan), v)
    r_lo, r_hi = as_result(lo), as_result(hi)
    is_nan = np.isnan(dec)
    mag = np.abs(dec)
    ok_lo = (np.isnan(r_lo) & is_nan) | (mag == r_lo)
    ok_hi = (np.isnan(r_hi) & is_nan) | (mag == r_hi)
    # sign: a zero result in FNUZ is +0, NaN results carry no checked sign
    sign_ok = is_nan | (dec == 0) | (np.sign(dec) == sign)
    bad = np.nonzero(inside & ~((ok_lo | ok_hi) & sign_ok))[0]
    assert bad.size == 0, f"{kind} sat={sat}: x={x[bad][:8]} gave {dec[bad][:8]} (lo {lo[bad][:8]}, hi {hi[bad][:8]})"
    # exact values are unchanged, and SR equals RNE wherever the value is representable
    exact = inside & (lo == hi)
    np.testing.assert_array_equal(got[exact], res[("rne_sat" if sat else "rne_nosat", kind)][exact])
    # beyond the last grid point (and for specials) SR gives what RNE gives
    rest = ~inside
    np.testing.assert_array_equal(got[rest], res[("rne_sat" if sat else "rne_nosat", kind)][rest])
    # rounding-up frequency: z-test of sum(up - p) over all inexact in-range values
    inexact = inside & (lo != hi)
    p = (a[inexact] - lo[inexact]) / (hi[inexact] - lo[inexact])
    up = ok_hi[inexact] & ~ok_lo[inexact]
    z = (up.sum() - p.sum()) / np.sqrt((p * (1 - p)).sum())
    assert inexact.sum() > 50000 and abs(z) < 5.0, f"{kind} sat={sat}: z = {z:.2f} over {inexact.sum()} values"
