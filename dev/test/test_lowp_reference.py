"""Tests of dev/reference/lowp_ref.py (the FP8 / TCFP-12 linear layers of the reference) and of
gpt2_reference.py --lowp-states.

* fp8_round against ml_dtypes (an independent FP8 implementation) over every E4M3 / E5M2 code, the
  midpoints between codes (ties), their neighbours, the subnormal range, saturation, float32 subnormals
  and specials; in float64 and float32 tensors.
* pow2_scale against its definition and against llmc/numerics/fp8.h's fp8_scale_pow2_from_amax (the
  scale the backend computes), through a small C program.
* round_bf16 against gpt2_reference.bf16_bits (integer rounding of the fp32 pattern).
* the TCFP-12 split: W_hi, W_lo on their E4M3 grids, the residual exact, W_hi + W_lo far closer to W
  than W_hi alone.
* LowpLinear against the formulas of its docstring written out with ml_dtypes casts.
* --lowp-states on the small model: loadable states with the header words test_gpt2.cu checks; values
  reproduced by a recomputation; the recipes apart by quantization-sized amounts; a TCFP-12 whose W_lo
  is lost gives exactly the FP8 state (the premise of test_gpt2.cu's check that tells them apart).
"""
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

ml_dtypes = pytest.importorskip(
    "ml_dtypes", reason="ml_dtypes is not installed (.venv/bin/python -m pip install 'ml_dtypes>=0.5,<0.6')")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REF_DIR = os.path.join(REPO, "dev", "reference")
SCRIPT = os.path.join(REF_DIR, "gpt2_reference.py")
sys.path.insert(0, REF_DIR)
import gpt2_reference as ref  # noqa: E402
import lowp_ref  # noqa: E402

FORMATS = {"e4m3": (lowp_ref.E4M3, ml_dtypes.float8_e4m3fn), "e5m2": (lowp_ref.E5M2, ml_dtypes.float8_e5m2)}
SMALL = dict(L=2, C=64, NH=4, T=16, maxT=16, B=2, V=300, Vp=384)  # N = B*T = 32, C, 3C, 4C: multiples of 16
STEPS = 4
LOWP_FILES = {"fp8": ("gpt2_ref_debug_state_fp8.bin", 1), "tcfp12": ("gpt2_ref_debug_state_tcfp12.bin", 2)}


# ---------------------------------------------------------------- the quantizer

def finite_grid(np_dtype):
    """Sorted non-negative finite values of an ml_dtypes FP8 type (all 128 non-negative codes)."""
    vals = np.arange(128, dtype=np.uint8).view(np_dtype).astype(np.float64)
    return np.unique(vals[np.isfinite(vals)])


def value_set(fmt, np_dtype):
    """float32 test values for one format: every code, the midpoints between neighbours (ties) and
    their float32 neighbours, the same scaled to the subnormal range, random values over the whole
    range and beyond max, float32 subnormals, specials; both signs."""
    rng = np.random.default_rng(17)
    vals = finite_grid(np_dtype)
    assert vals[-1] == fmt.max
    pts = np.append(vals, 2 * vals[-1] - vals[-2])  # one grid step past max: its midpoint is the overflow tie
    mids = (0.5 * (pts[:-1] + pts[1:])).astype(np.float32)
    parts = [vals.astype(np.float32), mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))]
    parts.append((rng.uniform(0, 1.5, 20000) * fmt.max).astype(np.float32))
    parts.append((rng.uniform(0, 4, 5000) * vals[1]).astype(np.float32))  # subnormals and below
    parts.append(np.exp2(rng.uniform(-30, 20, 20000)).astype(np.float32))
    parts.append(np.array([1e-45, 1.1754942e-38, 3.4028235e38, np.inf, 1e30, 0.0], dtype=np.float32))
    x = np.concatenate(parts)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fp8_round_matches_ml_dtypes(name, dtype):
    """fp8_round = ml_dtypes' cast (RNE) of the value clipped to [-max, max] (ml_dtypes does not
    saturate; clipping first is the saturating conversion), bit for bit including the sign of zero."""
    fmt, np_dtype = FORMATS[name]
    x = value_set(fmt, np_dtype)
    want = np.clip(x, -fmt.max, fmt.max).astype(np_dtype).astype(np.float64)
    got = lowp_ref.fp8_round(torch.from_numpy(x).to(dtype), fmt).double().numpy()
    bad = np.nonzero(got.view(np.uint64) != want.view(np.uint64))[0]
    assert bad.size == 0, f"{name}: {bad.size} of {x.size} differ, e.g. x={x[bad][:6]} got {got[bad][:6]} want {want[bad][:6]}"
    # the ties exist in the set and went to the even neighbour; saturation happened
    vals = finite_grid(np_dtype)
    tie = np.float32(0.5 * (vals[8] + vals[9]))
    assert lowp_ref.fp8_round(torch.tensor([tie], dtype=dtype), fmt).item() in (vals[8], vals[9])
    assert np.abs(got).max() == fmt.max and (np.abs(x) > fmt.max).sum() > 1000


@pytest.mark.parametrize("name", list(FORMATS))
def test_fp8_round_nan_and_fixed_points(name):
    """NaN stays NaN; every finite code value is a fixed point; the result is always on the grid."""
    fmt, np_dtype = FORMATS[name]
    assert torch.isnan(lowp_ref.fp8_round(torch.tensor([float("nan")], dtype=torch.float64), fmt)).all()
    vals = torch.from_numpy(finite_grid(np_dtype))
    assert torch.equal(lowp_ref.fp8_round(vals, fmt), vals) and torch.equal(lowp_ref.fp8_round(-vals, fmt), -vals)
    r = lowp_ref.fp8_round(torch.randn(10000, dtype=torch.float64) * fmt.max / 3, fmt)
    assert np.isin(np.abs(r.numpy()), finite_grid(np_dtype)).all()


def scale_by_definition(amax, fmt):
    """The largest 2^k, -126 <= k <= 127, with amax * 2^k <= max, by search (1.0 for amax 0 / NaN / Inf)."""
    if not (amax > 0 and math.isfinite(amax)):
        return 1.0
    best = -126
    for k in range(-126, 128):
        if amax * 2.0 ** k <= fmt.max:
            best = k
    return 2.0 ** best


def amax_values():
    """float32 amax values: powers of two, max / 2^k and their float32 neighbours, random magnitudes,
    the extremes (float32 subnormal, FLT_MAX) and invalid ones (0, Inf, NaN)."""
    rng = np.random.default_rng(5)
    edges = [2.0 ** k for k in range(-140, 128, 3)] + [fmt.max * 2.0 ** k for fmt in (lowp_ref.E4M3, lowp_ref.E5M2)
                                                        for k in range(-60, 60, 7)]
    e = np.array(edges, dtype=np.float32)
    parts = [e, np.nextafter(e, np.float32(0)), np.nextafter(e, np.float32(np.inf)),
             np.exp2(rng.uniform(-40, 40, 2000)).astype(np.float32),
             np.array([1e-45, 3.4028235e38, 0.0, np.inf, np.nan], dtype=np.float32)]
    a = np.concatenate(parts)
    return a[np.isnan(a) | (a >= 0)]


@pytest.mark.parametrize("name", list(FORMATS))
def test_pow2_scale_definition(name):
    """pow2_scale is the largest power of two that keeps amax * s <= max, so amax * s is in (max/2, max]
    unless the exponent clamp acts."""
    fmt, _ = FORMATS[name]
    for a in amax_values():
        a = float(a)
        s = lowp_ref.pow2_scale(a, fmt)
        assert s == scale_by_definition(a, fmt), (a, s)
        if a > 0 and math.isfinite(a) and 2.0 ** -126 < s < 2.0 ** 127:
            assert fmt.max / 2 < a * s <= fmt.max


C_SCALE = r"""
#include <stdio.h>
#include "llmc/numerics/fp8.h"
/* reads float32 amax values from argv[1]; prints the E4M3 and E5M2 scales of each as hex bit patterns */
int main(int argc, char** argv) {
    if (argc != 2) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    float a;
    while (fread(&a, 4, 1, f) == 1) {
        float s4 = fp8_scale_pow2_from_amax(fp8_format(FP8_E4M3FN), a, 0);
        float s5 = fp8_scale_pow2_from_amax(fp8_format(FP8_E5M2), a, 0);
        unsigned b4, b5;
        memcpy(&b4, &s4, 4);
        memcpy(&b5, &s5, 4);
        printf("%08x %08x\n", b4, b5);
    }
    fclose(f);
    return 0;
}
"""


def test_pow2_scale_matches_fp8_h(tmp_path):
    """The reference's scale is the backend's: fp8_scale_pow2_from_amax(.., margin 0) of llmc/numerics/fp8.h
    (what fp8_amax_scale / fp8_scale_from_amax_bits / tcfp12_split compute with pow2 = 1)."""
    cc = shutil.which(os.environ.get("CC_FP8_TEST", "cc"))
    if cc is None:
        pytest.skip("no C compiler: `cc` is not on PATH")
    src, exe, vals = tmp_path / "scale.c", tmp_path / "scale", tmp_path / "amax.f32"
    src.write_text(C_SCALE)
    build = subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-I", REPO, str(src), "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    a = amax_values()
    a.tofile(vals)
    run = subprocess.run([str(exe), str(vals)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rows = [line.split() for line in run.stdout.splitlines()]
    assert len(rows) == a.size
    for v, (h4, h5) in zip(a, rows):
        for fmt, h in ((lowp_ref.E4M3, h4), (lowp_ref.E5M2, h5)):
            c = float(np.array([int(h, 16)], dtype=np.uint32).view(np.float32)[0])
            assert lowp_ref.pow2_scale(float(v), fmt) == c, (fmt.name, float(v), c)


def test_quantize_per_tensor():
    """quantize(t) = ml_dtypes(t * s) / s with s from max |t|; the largest value lands in (max/2, max]."""
    g = torch.Generator().manual_seed(3)
    for fmt, np_dtype in FORMATS.values():
        t = torch.randn(64, 48, generator=g, dtype=torch.float64) * 0.37
        q, s = lowp_ref.quantize(t, fmt)
        amax = t.abs().max().item()
        assert s == lowp_ref.pow2_scale(amax, fmt) and fmt.max / 2 < amax * s <= fmt.max
        want = (t.numpy() * s).astype(np.float32).astype(np_dtype).astype(np.float64) / s
        assert np.array_equal(q.numpy(), want)
        assert 0 < (q - t).norm() / t.norm() < 2.0 ** -fmt.man_bits


# ---------------------------------------------------------------- BF16 rounding

def test_round_bf16_matches_bf16_bits():
    """round_bf16 (torch integer arithmetic) = gpt2_reference.bf16_bits (numpy) on float32 values with
    exact ties, Inf and NaN; float64 inputs round to float32 first (as the GPU's fp32 values do)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal(200000).astype(np.float32) * np.exp2(rng.integers(-60, 60, 200000)).astype(np.float32)
    x[:2000] = (x[:2000].view(np.uint32) & 0xFFFF0000 | 0x8000).view(np.float32)  # exact ties
    x[2000:2004] = [np.inf, -np.inf, 3.4028235e38, -0.0]
    want = ref.bf16_to_f32(ref.bf16_bits(x))
    got = lowp_ref.round_bf16(torch.from_numpy(x)).numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert torch.isnan(lowp_ref.round_bf16(torch.tensor([float("nan")]))).all()
    d = torch.from_numpy(rng.standard_normal(1000))
    assert torch.equal(lowp_ref.round_bf16(d), lowp_ref.round_bf16(d.float()).double())


def test_bf16_store_rounds_value_and_gradient():
    """Bf16Store rounds the forward value and the backward gradient to BF16."""
    x = torch.tensor([1 + 2 ** -8 + 2 ** -12, 3.0], dtype=torch.float64, requires_grad=True)  # BF16 ulp at 1: 2^-7
    y = lowp_ref.Bf16Store.apply(x)
    assert y.tolist() == [1 + 2 ** -7, 3.0]
    y.backward(torch.tensor([1 + 2 ** -10, -(1 + 3 * 2 ** -8)], dtype=torch.float64))  # the second: a tie, to even
    assert x.grad.tolist() == [1.0, -(1 + 2 ** -6)]


# ---------------------------------------------------------------- TCFP-12 split

def snr_db(ref_t, x):
    """10 log10(sum ref^2 / sum (ref - x)^2)."""
    return 10 * math.log10((ref_t ** 2).sum().item() / ((ref_t - x) ** 2).sum().item())


def test_tcfp12_split_reconstructs():
    """On Gaussian fp32 weights: W_hi and W_lo lie on the E4M3 grids of their scales (fixed points of
    fp8_round(. * s)), s_lo from amax(W - W_hi), the residual exact in float32; W_hi alone ~31 dB SNR
    (doc/TCFP12.md: 31.5 dB), W_hi + W_lo above 55 dB (doc: 64 dB), and never worse per element."""
    g = torch.Generator().manual_seed(11)
    w = (torch.randn(384, 128, generator=g) * 0.02).double()  # float32 values
    w_hi, w_lo, s_hi, s_lo = lowp_ref.tcfp12_split(w)
    E4M3 = lowp_ref.E4M3
    assert torch.equal(lowp_ref.fp8_round(w_hi * s_hi, E4M3), w_hi * s_hi)
    assert torch.equal(lowp_ref.fp8_round(w_lo * s_lo, E4M3), w_lo * s_lo)
    assert s_hi == lowp_ref.pow2_scale(w.abs().max().item(), E4M3)
    assert s_lo == lowp_ref.pow2_scale((w - w_hi).abs().max().item(), E4M3)
    r32 = w.float() - w_hi.float()
    assert torch.equal(r32.double(), w - w_hi)  # the GPU's fp32 subtraction is exact
    hi_db, both_db = snr_db(w, w_hi), snr_db(w, w_hi + w_lo)
    assert 29 < hi_db < 34 and both_db > 55 and both_db > hi_db + 20, (hi_db, both_db)
    assert ((w - w_hi - w_lo).abs() <= (w - w_hi).abs()).all()
    # on BF16 weights (the test model's) the two terms hold nearly every weight exactly
    wb = lowp_ref.round_bf16(w)
    hi, lo, _, _ = lowp_ref.tcfp12_split(wb)
    assert snr_db(wb, hi + lo) > 100


# ---------------------------------------------------------------- the linear layer

def ml_q(a, np_dtype, fmt):
    """Per-tensor quantization written with ml_dtypes: (values, scale)."""
    s = lowp_ref.pow2_scale(float(np.abs(a).max()), fmt)
    return (a * s).astype(np.float32).astype(np_dtype).astype(np.float64) / s, s


def bf16_np(a):
    """Nearest BF16 values of a float64 array (through float32)."""
    return ref.bf16_to_f32(ref.bf16_bits(a.astype(np.float32))).astype(np.float64)


@pytest.mark.parametrize("recipe", ["fp8", "tcfp12"])
def test_lowp_linear_matches_formulas(recipe):
    """LowpLinear's forward and backward equal the recipe of its docstring written out with ml_dtypes:
    X and W (TCFP-12: W_hi, W_lo) E4M3, dY E5M2, BF16 outputs (TCFP-12: the W_lo product rounded first),
    dW from the forward's X codes, db from the unquantized BF16 dY."""
    e4, e5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
    E4M3, E5M2 = lowp_ref.E4M3, lowp_ref.E5M2
    g = torch.Generator().manual_seed(21)
    x = lowp_ref.round_bf16(torch.randn(2, 16, 64, generator=g, dtype=torch.float64))
    w = lowp_ref.round_bf16(torch.randn(48, 64, generator=g, dtype=torch.float64) * 0.05)
    b = lowp_ref.round_bf16(torch.randn(48, generator=g, dtype=torch.float64) * 0.1)
    dy = torch.randn(2, 16, 48, generator=g, dtype=torch.float64) * 1e-3
    xt, wt, bt = (t.clone().requires_grad_(True) for t in (x, w, b))
    y = lowp_ref.LowpLinear.apply(xt, wt, bt, recipe)
    y.backward(dy)

    xn, wn, bn = x.numpy().reshape(-1, 64), w.numpy(), b.numpy()
    xq, _ = ml_q(xn, e4, E4M3)
    if recipe == "fp8":
        wq, _ = ml_q(wn, e4, E4M3)
        want_y = bf16_np(xq @ wq.T + bn)
        parts = [wq]
    else:
        hi, _ = ml_q(wn, e4, E4M3)
        lo, _ = ml_q(wn - hi, e4, E4M3)
        want_y = bf16_np(xq @ hi.T + bn + bf16_np(xq @ lo.T))
        parts = [lo, hi]
    assert np.array_equal(y.detach().numpy().reshape(-1, 48), want_y)
    g_bf = bf16_np(dy.numpy().reshape(-1, 48))
    gq, _ = ml_q(g_bf, e5, E5M2)
    want_dx = bf16_np(gq @ parts[0]) if recipe == "fp8" else bf16_np(gq @ parts[1] + bf16_np(gq @ parts[0]))
    assert np.array_equal(xt.grad.numpy().reshape(-1, 64), want_dx)
    assert np.allclose(wt.grad.numpy(), gq.T @ xq, rtol=1e-12, atol=1e-18)
    assert np.allclose(bt.grad.numpy(), g_bf.sum(0), rtol=1e-12, atol=1e-18)
    # quantized for real: the forward is off the BF16 GEMM by an E4M3-sized amount
    plain = bf16_np(xn @ wn.T + bn)
    rel = np.linalg.norm(want_y - plain) / np.linalg.norm(plain)
    assert 3e-3 < rel < 0.1, rel


# ---------------------------------------------------------------- the attention kernels

def kernel_attention_loops(qkv, NH):
    """The generic forward kernel's arithmetic written as its loops (one query row at a time, keys in
    chunks of 32, running max m, running sum l, output rescaled by alpha = exp(m_old - m_new), each
    unnormalized probability rounded to BF16 before it multiplies V), in float64: O (B, T, C)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    HS = C // NH
    out = torch.zeros(B, T, C, dtype=qkv.dtype)
    for b in range(B):
        for h in range(NH):
            q, k, v = (qkv[b, :, i * C + h * HS:i * C + (h + 1) * HS] for i in range(3))
            for row in range(T):
                m, l, o = -math.inf, 0.0, torch.zeros(HS, dtype=qkv.dtype)
                for c0 in range(0, row + 1, 32):
                    keys = range(c0, min(c0 + 32, row + 1))
                    s = torch.stack([q[row] @ k[j] / math.sqrt(HS) for j in keys])
                    m_new = max(m, s.max().item())
                    alpha = math.exp(m - m_new)
                    p = torch.exp(s - m_new)
                    l = l * alpha + p.sum().item()
                    o = o * alpha + lowp_ref.round_bf16(p) @ v[c0:c0 + len(keys)]
                    m = m_new
                out[b, row, h * HS:(h + 1) * HS] = o / l
    return out


def test_kernel_attention_forward_is_the_kernel_loop():
    """KernelAttention's closed form equals the kernel's online-softmax loop (T = 70: three key chunks,
    the last partial), and differs from exact attention by a BF16-sized amount."""
    g = torch.Generator().manual_seed(4)
    qkv = lowp_ref.round_bf16(torch.randn(2, 70, 3 * 32, generator=g, dtype=torch.float64))
    got = lowp_ref.KernelAttention.apply(qkv, 2)
    want = kernel_attention_loops(qkv, 2)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-14)
    exact = ref.attention(qkv, 2)
    assert 1e-5 < ((got - exact).norm() / exact.norm()).item() < 4e-3


def test_kernel_attention_gradients(monkeypatch):
    """Without its BF16 roundings KernelAttention is exact attention: forward and the flash-form backward
    equal autograd's; with them the gradient moves by a BF16-sized amount only."""
    g = torch.Generator().manual_seed(6)
    qkv = torch.randn(2, 40, 3 * 16, generator=g, dtype=torch.float64)
    up = torch.randn(2, 40, 16, generator=g, dtype=torch.float64)

    def grads(fn):
        x = qkv.clone().requires_grad_(True)
        out = fn(x)
        (out * up).sum().backward()
        return out.detach(), x.grad

    exact = grads(lambda x: ref.attention(x, 2))
    rounded = grads(lambda x: lowp_ref.KernelAttention.apply(x, 2))
    monkeypatch.setattr(lowp_ref, "round_bf16", lambda t: t)
    plain = grads(lambda x: lowp_ref.KernelAttention.apply(x, 2))
    assert torch.allclose(plain[0], exact[0], rtol=1e-12, atol=1e-13)
    assert torch.allclose(plain[1], exact[1], rtol=1e-10, atol=1e-12)
    d = ((rounded[1] - exact[1]).norm() / exact[1].norm()).item()
    assert 1e-5 < d < 4e-3, d


# ---------------------------------------------------------------- --lowp-states

def write_shard(path, tokens):
    """A token shard (magic 20240520, version 1)."""
    head = np.zeros(256, dtype="<i4")
    head[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(head.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def read_state(path):
    """A version 3 debug state of the SMALL model, its length checked: (header, dict of arrays)."""
    raw = open(path, "rb").read()
    head = np.frombuffer(raw[:1024], dtype="<i4")
    B, T, V, Vp, S = (int(w) for w in head[2:7])
    n_par = ref.num_params(SMALL)
    assert len(raw) == 1024 + 4 * (2 * B * T + B * T * V + 1 + n_par + S)
    body = np.frombuffer(raw[1024:], dtype="<f4")
    o = 2 * B * T
    return head, {"logits": body[o:o + B * T * V].reshape(B, T, V), "loss": body[o + B * T * V],
                  "grads": body[o + B * T * V + 1:len(body) - S].astype(np.float64), "losses": body[len(body) - S:]}


@pytest.fixture(scope="module")
def lowp_run(tmp_path_factory):
    """gpt2_reference.py --lowp-states on the small model and a synthetic shard: (folder, batch x, y)."""
    d = tmp_path_factory.mktemp("lowp")
    shard = str(d / "synthetic.bin")
    tokens = np.random.default_rng(0).integers(0, SMALL["V"], 1000)
    write_shard(shard, tokens)
    cfg = {**SMALL, "steps": STEPS}
    args = ["--data", shard, "--out-dir", str(d)] + [a for k, v in cfg.items() for a in (f"--{k}", v)]
    r = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", *map(str, args), "--lowp-states"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "lowp=yes" in r.stdout
    BT = SMALL["B"] * SMALL["T"]
    x = torch.from_numpy(tokens[:BT].astype(np.int64)).view(SMALL["B"], SMALL["T"])
    y = torch.from_numpy(tokens[1:BT + 1].astype(np.int64)).view(SMALL["B"], SMALL["T"])
    return d, x, y


def bf16_params(d):
    """The bf16 checkpoint's parameters as float64 tensors."""
    cfg, params = ref.read_checkpoint(str(d / "gpt2_ref_bf16.bin"))
    return [p.double() for p in params]


def rel(a, b):
    """||a - b|| / ||b|| in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def test_lowp_states_header_and_values(lowp_run):
    """Both states load (exact length), carry word 13 = 1 (bf16 weights), 14 = 0, 15 = 1 / 2 and the
    run's settings; logits and loss equal a recomputation under make_boundaries(recipe) from the bf16
    checkpoint; the losses fall."""
    d, x, y = lowp_run
    params = bf16_params(d)
    for mode, (name, word) in LOWP_FILES.items():
        head, st = read_state(d / name)
        assert list(head[:7]) == [20240327, 3, SMALL["B"], SMALL["T"], SMALL["V"], SMALL["Vp"], STEPS]
        assert list(head[13:16]) == [1, 0, word] and not head[16:].any()
        bnd = ref.make_boundaries(mode)
        logits = ref.forward(bnd.weights(params), x, SMALL["NH"], bnd)
        assert np.array_equal(logits[..., :SMALL["V"]].detach().numpy().astype(np.float32), st["logits"])
        assert abs(ref.loss_fn(logits, y, SMALL["V"], bnd).item() - st["loss"]) < 1e-6
        assert abs(st["losses"][0] - st["loss"]) < 1e-6 and st["losses"][-1] < st["losses"][0] - 0.1


def test_lowp_forward_stores_bf16(lowp_run):
    """Under LowpBoundaries every recorded stored tensor is made of BF16 values and the sites come in
    forward order, the attention output included (the scores and probabilities stay in KernelAttention)."""
    d, x, _ = lowp_run
    record = []
    bnd = ref.LowpBoundaries("tcfp12", record)
    ref.forward(bnd.weights(bf16_params(d)), x, SMALL["NH"], bnd)
    per_layer = ["ln1", "qkv", "attn_out", "attproj", "residual1", "ln2", "fc", "gelu", "fcproj", "residual2"]
    assert [n for n, _ in record] == ["encoder"] + per_layer * SMALL["L"] + ["lnf", "logits"]
    for name, t in record:
        assert torch.equal(lowp_ref.round_bf16(t), t), name


def test_lowp_states_apart(lowp_run):
    """The quantization shows: each quantized state is off the unquantized bf16 state by a few percent
    (E4M3 on X and W, E5M2 on dY), TCFP-12 (W_hi + W_lo) closer to it than FP8 in logits and gradients, and
    the two quantized states apart from each other by more than BF16 noise."""
    d, _, _ = lowp_run
    _, plain = read_state(d / "gpt2_ref_debug_state_bf16.bin")
    _, f8 = read_state(d / LOWP_FILES["fp8"][0])
    _, t12 = read_state(d / LOWP_FILES["tcfp12"][0])
    lf, lt = rel(f8["logits"], plain["logits"]), rel(t12["logits"], plain["logits"])
    gf, gt = rel(f8["grads"], plain["grads"]), rel(t12["grads"], plain["grads"])
    assert 5e-3 < lt < lf < 0.2 and 1e-2 < gt < gf < 0.5, (lf, lt, gf, gt)
    assert rel(f8["logits"], t12["logits"]) > 5e-3 and rel(f8["grads"], t12["grads"]) > 1e-2


def test_tcfp12_without_w_lo_is_fp8(lowp_run, monkeypatch):
    """The FP8 state is exactly what TCFP-12 gives with its W_lo term lost (at step 0 the master weights
    are the BF16 weights, so W_hi = the FP8 weight codes, and bf16(0) adds nothing): a build that drops
    W_lo lands on the FP8 state, which is why test_gpt2.cu compares each build with both."""
    d, x, y = lowp_run
    params = bf16_params(d)
    split = lowp_ref.tcfp12_split

    def hi_only(w):
        w_hi, w_lo, s_hi, s_lo = split(w)
        return w_hi, torch.zeros_like(w_lo), s_hi, s_lo

    def run(mode):
        p = [q.clone().requires_grad_(True) for q in params]
        bnd = ref.make_boundaries(mode)
        logits = ref.forward(bnd.weights(p), x, SMALL["NH"], bnd)
        ref.loss_fn(logits, y, SMALL["V"], bnd).backward()
        return logits.detach(), torch.cat([q.grad.flatten() for q in p])

    full = run("tcfp12")
    monkeypatch.setattr(lowp_ref, "tcfp12_split", hi_only)
    lost = run("tcfp12")
    monkeypatch.undo()
    f8 = run("fp8")
    assert torch.equal(lost[0], f8[0]) and torch.equal(lost[1], f8[1])
    assert not torch.equal(full[0], f8[0])


def test_test_gpt2cu_names_the_lowp_states():
    """test_gpt2cu's FP8 / TCFP-12 checks (llmc/modes/lowp/test.cuh) read the files this script writes and checks the header word 15
    values written here (LOWP_MODES)."""
    src = block = open(os.path.join(REPO, "llmc", "modes", "lowp", "test.cuh")).read()  # test_gpt2cu's FP8 / TCFP-12 checks
    for mode, (name, word) in LOWP_FILES.items():
        assert f"build/ref/{name}" in block, name
        assert ref.LOWP_MODES[mode] == word
    assert re.search(r"LOWP_WORD_FP8\s*=\s*1\b", src) and re.search(r"LOWP_WORD_TCFP12\s*=\s*2\b", src)
