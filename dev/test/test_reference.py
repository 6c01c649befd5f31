"""Tests of dev/reference/gpt2_reference.py on small shapes and a synthetic token shard."""
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "dev", "reference", "gpt2_reference.py")
REAL_SHARD = os.path.join(REPO, "data", "tinyshakespeare", "tiny_shakespeare_val.bin")
sys.path.insert(0, os.path.dirname(SCRIPT))
import gpt2_reference as ref  # noqa: E402
import tcast_ref  # noqa: E402

SMALL = dict(L=2, C=64, NH=4, T=16, maxT=16, B=2, V=300, Vp=384)
STEPS = 10
# (debug state file, header word 13 = bf16 weights, word 14 = mode 0 none / 1 q115 / 2 q115_tf / 3 tcast)
STATES = [("gpt2_ref_debug_state.bin", 0, 0), ("gpt2_ref_debug_state_bf16.bin", 1, 0),
          ("gpt2_ref_debug_state_q115.bin", 1, 1), ("gpt2_ref_debug_state_q115_tf.bin", 1, 2),
          ("gpt2_ref_debug_state_tcast.bin", 1, 3)]
Q115_MAX = 1 - 2 ** -15


def write_shard(path, tokens, magic=20240520):
    """Write a token shard with the given magic."""
    head = np.zeros(256, dtype="<i4")
    head[:3] = [magic, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(head.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def run_script(*args):
    """Run the reference script in a subprocess on the CPU."""
    cmd = [sys.executable, SCRIPT, "--device", "cpu", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def small_args(shard, out_dir, **over):
    """Command-line arguments for the small configuration."""
    cfg = {**SMALL, "steps": STEPS, **over}
    return ["--data", shard, "--out-dir", out_dir] + [a for k, v in cfg.items() for a in (f"--{k}", v)]


def np_sizes(maxT, L, C, Vp):
    """Element counts of the 16 checkpoint tensors, written out by hand from FORMATS.md."""
    return [Vp * C, maxT * C, L * C, L * C, 3 * L * C * C, 3 * L * C, L * C * C, L * C,
            L * C, L * C, 4 * L * C * C, 4 * L * C, 4 * L * C * C, L * C, C, C]


def np_read_checkpoint(path):
    """Independent numpy reader: (header, list of 16 flat arrays, fp32 or raw uint16 bf16)."""
    raw = open(path, "rb").read()
    head = np.frombuffer(raw[:1024], dtype="<i4")
    maxT, V, L, NH, C, Vp = (int(w) for w in head[2:8])
    sizes = np_sizes(maxT, L, C, Vp)
    body = np.frombuffer(raw[1024:], dtype="<f4" if head[1] == 3 else "<u2")
    assert len(raw) == 1024 + body.nbytes and body.size == sum(sizes)
    return head, np.split(body, np.cumsum(sizes)[:-1])


def first_batch_bf16_params(shard, d):
    """The shard's first batch as (x, y), (B, T) int64 tensors with the targets shifted by one token, and
    the parameters of d's bf16 checkpoint (gpt2_ref_bf16.bin) as float64 tensors of the model's shapes."""
    tokens = np.fromfile(shard, dtype="<u2", offset=1024).astype(np.int64)
    BT = SMALL["B"] * SMALL["T"]
    x = torch.from_numpy(tokens[:BT]).view(SMALL["B"], SMALL["T"])
    y = torch.from_numpy(tokens[1:BT + 1]).view(SMALL["B"], SMALL["T"])
    _, t16 = np_read_checkpoint(d / "gpt2_ref_bf16.bin")
    return x, y, [torch.from_numpy(ref.bf16_to_f32(t).astype(np.float64)).reshape(s) for t, s in zip(t16, ref.shapes(SMALL))]


def np_read_state(path):
    """Independent numpy reader of a version 3 debug state: (header, dict of arrays)."""
    raw = open(path, "rb").read()
    head = np.frombuffer(raw[:1024], dtype="<i4")
    B, T, V, Vp, S = (int(w) for w in head[2:7])
    body = np.frombuffer(raw[1024:], dtype="<f4")
    ints = np.frombuffer(raw[1024:], dtype="<i4")
    sizes = np_sizes(SMALL["maxT"], SMALL["L"], SMALL["C"], Vp)
    n_par = sum(sizes)
    assert len(raw) == 1024 + 4 * (2 * B * T + B * T * V + 1 + n_par + S)
    o = 2 * B * T
    st = {"x": ints[:B * T], "y": ints[B * T:o], "logits": body[o:o + B * T * V].reshape(B, T, V),
          "loss": body[o + B * T * V], "losses": body[len(body) - S:]}
    st["grads"] = np.split(body[o + B * T * V + 1:len(body) - S], np.cumsum(sizes)[:-1])
    return head, st


def rne_bf16(x32):
    """Nearest bf16 (ties to even) by comparing float64 distances to the two neighbouring bf16 values."""
    lo = x32.view(np.uint32) >> 16
    hi = lo + 1
    val = lambda b: (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    x = x32.astype(np.float64)
    d_lo, d_hi = np.abs(x - val(lo)), np.abs(val(hi) - x)
    return np.where((d_hi < d_lo) | ((d_hi == d_lo) & (lo % 2 == 1)), hi, lo).astype(np.uint16)


class Block(nn.Module):
    """Transformer block from torch.nn modules, attention head by head."""

    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attend(self, h):
        """Causal attention with an explicit loop over heads."""
        T, C = h.shape[1], h.shape[2]
        hs = C // self.NH
        q, k, v = self.qkv(h).split(C, dim=-1)
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
        out = []
        for i in range(self.NH):
            s = slice(i * hs, (i + 1) * hs)
            scores = q[..., s] @ k[..., s].transpose(1, 2) / math.sqrt(hs)
            out.append(torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v[..., s])
        return torch.cat(out, dim=-1)

    def forward(self, x):
        """Pre-norm residual block."""
        x = x + self.proj(self.attend(self.ln1(x)))
        return x + self.fcproj(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class NNGPT(nn.Module):
    """GPT-2 from torch.nn modules with tied embedding and output weights."""

    def __init__(self, cfg):
        super().__init__()
        C = cfg["C"]
        self.wte, self.wpe = nn.Embedding(cfg["Vp"], C), nn.Embedding(cfg["maxT"], C)
        self.blocks = nn.ModuleList(Block(C, cfg["NH"]) for _ in range(cfg["L"]))
        self.lnf = nn.LayerNorm(C)

    def load(self, params):
        """Copy the 16 checkpoint-order tensors into the modules."""
        p = dict(zip(ref.NAMES, params))
        with torch.no_grad():
            self.wte.weight.copy_(p["wte"])
            self.wpe.weight.copy_(p["wpe"])
            for l, b in enumerate(self.blocks):
                for mod, w, bias in [(b.ln1, "ln1w", "ln1b"), (b.qkv, "qkvw", "qkvb"), (b.proj, "attprojw", "attprojb"),
                                     (b.ln2, "ln2w", "ln2b"), (b.fc, "fcw", "fcb"), (b.fcproj, "fcprojw", "fcprojb")]:
                    mod.weight.copy_(p[w][l])
                    mod.bias.copy_(p[bias][l])
            self.lnf.weight.copy_(p["lnfw"])
            self.lnf.bias.copy_(p["lnfb"])
        return self

    def forward(self, idx):
        """Logits over the padded vocabulary."""
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.lnf(x) @ self.wte.weight.T


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Run the script once on a synthetic shard; return (output folder, shard path, stdout)."""
    d = tmp_path_factory.mktemp("ref")
    shard = str(d / "synthetic.bin")
    write_shard(shard, np.random.default_rng(0).integers(0, SMALL["V"], 1000))
    r = run_script(*small_args(shard, str(d)), "--sf16-states", "--tcast-states")
    assert r.returncode == 0, r.stderr
    return d, shard, r.stdout


def test_forward_matches_nn_modules():
    """The functional forward equals the torch.nn version in float64 on random non-trivial weights."""
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(s, generator=g, dtype=torch.float64) * 0.3 for s in ref.shapes(SMALL)]
    for i in (2, 8, 14):  # LayerNorm weights around 1
        params[i] += 1
    idx = torch.randint(0, SMALL["V"], (SMALL["B"], SMALL["T"]), generator=g)
    ours = ref.forward(params, idx, SMALL["NH"])
    theirs = NNGPT(SMALL).double().load(params)(idx)
    assert ours.shape == (SMALL["B"], SMALL["T"], SMALL["Vp"])
    assert (ours - theirs).abs().max().item() < 1e-10


def test_lm_head_matches_matmul():
    """The LM head's autograd function (BLAS-friendly layouts) gives the values and gradients of h @ wte.T."""
    g = torch.Generator().manual_seed(8)
    h = torch.randn(2, 5, 16, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(384, 16, generator=g, dtype=torch.float64, requires_grad=True)
    up = torch.randn(2, 5, 384, generator=g, dtype=torch.float64)
    out = ref.LMHead.apply(h, w)
    (out * up).sum().backward()
    grads = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    plain = h @ w.T
    (plain * up).sum().backward()
    assert out.shape == plain.shape and torch.allclose(out, plain, rtol=1e-13, atol=1e-13)
    assert torch.allclose(grads[0], h.grad, rtol=1e-13, atol=1e-13)
    assert torch.allclose(grads[1], w.grad, rtol=1e-13, atol=1e-13)


def test_init_loss_and_checkpoint_round_trip(run, tmp_path):
    """Loss at init is near ln(V); the written checkpoint holds exactly the seeded weights."""
    d, _, _ = run
    _, st = np_read_state(d / "gpt2_ref_debug_state.bin")
    assert abs(st["loss"] - math.log(SMALL["V"])) < 0.1
    head, tensors = np_read_checkpoint(d / "gpt2_ref.bin")
    assert list(head[:8]) == [20240326, 3, SMALL["maxT"], SMALL["V"], SMALL["L"], SMALL["NH"], SMALL["C"], SMALL["Vp"]]
    assert not head[8:].any()
    expected = ref.init_params(SMALL, 1337)
    for t, e, s in zip(tensors, expected, ref.shapes(SMALL)):
        assert np.array_equal(t.view(np.uint32), e.numpy().ravel().view(np.uint32)) and e.shape == s
    assert not tensors[0].reshape(SMALL["Vp"], -1)[SMALL["V"]:].any()
    # write -> read with the script's own functions as well
    path = str(tmp_path / "again.bin")
    ref.write_checkpoint(path, SMALL, expected)
    cfg, back = ref.read_checkpoint(path)
    assert cfg == {k: SMALL[k] for k in cfg}
    assert all(torch.equal(a, b) for a, b in zip(back, expected))


def test_bf16_checkpoint(run):
    """Every bf16 value is the fp32 value rounded to nearest even; ties and torch's cast agree."""
    d, _, _ = run
    head, t32 = np_read_checkpoint(d / "gpt2_ref.bin")
    head16, t16 = np_read_checkpoint(d / "gpt2_ref_bf16.bin")
    assert head16[1] == 5 and list(head16[2:8]) == list(head[2:8])
    flat32, flat16 = np.concatenate(t32), np.concatenate(t16)
    assert np.array_equal(flat16, rne_bf16(flat32))
    cases = {1 + 2 ** -8: 0x3F80, 1 + 3 * 2 ** -8: 0x3F82, -(1 + 2 ** -8): 0xBF80,
             1 + 2 ** -8 + 2 ** -23: 0x3F81, 1 + 2 ** -7: 0x3F81, 0.0: 0, float("inf"): 0x7F80}
    got = ref.bf16_bits(np.array(list(cases), dtype=np.float32))
    assert [int(v) for v in got] == list(cases.values())
    assert np.isnan(ref.bf16_to_f32(ref.bf16_bits(np.array([np.nan], np.float32))))[0]
    rnd = np.random.default_rng(2).standard_normal(100000).astype(np.float32)
    rnd[:1000] = (rnd[:1000].view(np.uint32) & 0xFFFF0000 | 0x8000).view(np.float32)  # exact ties
    via_torch = torch.from_numpy(rnd).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ref.bf16_bits(rnd), via_torch)
    assert np.array_equal(ref.bf16_bits(rnd), rne_bf16(rnd))


def test_debug_state(run):
    """Header words and sizes; the losses fall; a stored gradient matches a finite difference."""
    d, shard, _ = run
    tokens = np.fromfile(shard, dtype="<u2", offset=1024).astype(np.int64)
    BT = SMALL["B"] * SMALL["T"]
    for name, bf16, sf16 in STATES:
        head, st = np_read_state(d / name)
        assert list(head[:7]) == [20240327, 3, SMALL["B"], SMALL["T"], SMALL["V"], SMALL["Vp"], STEPS]
        opt = np.array([1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0], dtype="<f4")
        assert np.array_equal(head[7:13], opt.view("<i4")) and head[13] == bf16
        assert head[14] == sf16 and not head[15:].any()
        assert np.array_equal(st["x"], tokens[:BT]) and np.array_equal(st["y"], tokens[1:BT + 1])
        losses = st["losses"]
        assert abs(losses[0] - st["loss"]) < 1e-6 and losses[-1] < losses[0] - 0.05
        assert (np.diff(losses) < 0).sum() >= STEPS - 2
        assert not st["grads"][0].reshape(SMALL["Vp"], -1)[SMALL["V"]:].any()

    _, st = np_read_state(d / "gpt2_ref_debug_state.bin")
    _, tensors = np_read_checkpoint(d / "gpt2_ref.bin")
    params = [torch.from_numpy(t.astype(np.float64)).reshape(s) for t, s in zip(tensors, ref.shapes(SMALL))]
    x = torch.from_numpy(tokens[:BT]).view(SMALL["B"], SMALL["T"])
    y = torch.from_numpy(tokens[1:BT + 1]).view(SMALL["B"], SMALL["T"])
    loss = lambda: ref.loss_fn(ref.forward(params, x, SMALL["NH"]), y, SMALL["V"]).item()
    logits = ref.forward(params, x, SMALL["NH"])[..., :SMALL["V"]].numpy()
    assert np.abs(logits - st["logits"]).max() < 1e-6
    k, h = ref.NAMES.index("ln1b"), 1e-5
    flat, fd = params[k].view(-1), np.zeros(params[k].numel())
    for i in range(flat.numel()):
        old = flat[i].item()
        flat[i] = old + h
        up = loss()
        flat[i] = old - h
        fd[i] = (up - loss()) / (2 * h)
        flat[i] = old
    g = st["grads"][k].astype(np.float64)
    assert np.linalg.norm(fd - g) / np.linalg.norm(g) < 1e-6


def test_bad_shard_magic(run, tmp_path):
    """A shard with the wrong magic fails with the file name in stderr."""
    bad = str(tmp_path / "bad_magic.bin")
    write_shard(bad, np.arange(100) % 50, magic=12345)
    r = run_script(*small_args(bad, str(tmp_path), steps=1))
    assert r.returncode != 0 and bad in r.stderr and "magic" in r.stderr


def test_truncated_checkpoint(run, tmp_path):
    """A truncated checkpoint given to --init-from fails with the file name in stderr."""
    d, shard, _ = run
    bad = str(tmp_path / "truncated.bin")
    with open(d / "gpt2_ref.bin", "rb") as f, open(bad, "wb") as g:
        g.write(f.read()[:-100])
    r = run_script(*small_args(shard, str(tmp_path), steps=1), "--init-from", bad)
    assert r.returncode != 0 and bad in r.stderr
    assert not os.path.exists(tmp_path / "gpt2_ref.bin")


# ---------------------------------------------------------------- SF16 simulation

def np_quantize(x, frac_bits):
    """Independent Q1.F quantize-dequantize in numpy: clamp, then floor plus an explicit tie rule."""
    x = np.asarray(x, dtype=np.float64)
    out = np.full(x.shape, np.nan)
    ok = ~np.isnan(x)
    lim = 1 - 2.0 ** -frac_bits
    s = np.minimum(np.maximum(x[ok], -lim), lim) * 2.0 ** frac_bits  # exact: power-of-two scale
    fl = np.floor(s)
    frac = s - fl  # exact: s and fl share the exponent range
    up = (frac > 0.5) | ((frac == 0.5) & (np.fmod(fl, 2) != 0))  # ties go to the even integer
    out[ok] = (fl + up) / 2.0 ** frac_bits + 0.0  # + 0.0: zero results are +0.0
    return out


def same_bits(a, b):
    """Equal float64 arrays bit for bit (so +0.0 differs from -0.0), NaN compared as NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nan = np.isnan(a)
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.int64), b[~nan].view(np.int64))


def q_cases():
    """Inputs for the quantizer tests: every Q1.15 half-step (exact ties), their float64 neighbours,
    clamp cases, Inf, NaN, signed zeros, values that flush, and random values over many scales."""
    k = np.arange(-32768, 32768, dtype=np.float64)
    ties = (k + 0.5) / 32768
    rng = np.random.default_rng(5)
    return np.concatenate([ties, np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf), k / 32768,
                           [1.0, -1.0, Q115_MAX, -Q115_MAX, 1 - 2 ** -16, -(1 - 2 ** -16), 1.5, -7.0, 1e300,
                            -1e300, np.inf, -np.inf, np.nan, 0.0, -0.0, 2 ** -16, -2 ** -16, 1e-9, -1e-9,
                            5e-324, 2 ** -16 + 2 ** -39, 2 ** -31, 2 ** -32, 3 * 2 ** -32, -(2 ** -32)],
                           rng.standard_normal(20000) * np.repeat(10.0 ** np.arange(-10, 2), 20000 // 12 + 1)[:20000]])


def test_q115_matches_numpy():
    """q115 and q131 equal the independent numpy quantizer bit for bit (ties to even, clamp, NaN, zeros);
    hand-checked values; the Q1.31-then-Q1.15 double rounding and float32's Q1.31 clamp to 1.0."""
    x = q_cases()
    t = torch.from_numpy(x)
    assert same_bits(ref.q115(t).numpy(), np_quantize(x, 15))
    assert same_bits(ref.q131(t).numpy(), np_quantize(x, 31))
    assert same_bits(ref.q115_q131(t).numpy(), np_quantize(np_quantize(x, 31), 15))
    s = 2.0 ** -15
    cases = {0.5 * s: 0.0, 1.5 * s: 2 * s, 2.5 * s: 2 * s, 3.5 * s: 4 * s, -0.5 * s: 0.0, -1.5 * s: -2 * s,
             -2.5 * s: -2 * s, 0.7 * s: s, 1.0: Q115_MAX, -1.0: -Q115_MAX, np.inf: Q115_MAX, -np.inf: -Q115_MAX,
             (32767.5) * s: Q115_MAX, -(32766.5) * s: -32766 * s, -1e-9: 0.0, 0.25: 0.25}
    got = ref.q115(torch.tensor(list(cases), dtype=torch.float64)).numpy()
    assert same_bits(got, list(cases.values()))  # includes +0.0 for the negative values that flush
    assert torch.isnan(ref.q115(torch.tensor([np.nan]))).all() and torch.isnan(ref.q131(torch.tensor([np.nan]))).all()
    # the double rounding example of q115.h: direct 2^-15, through Q1.31 0
    x = torch.tensor([2 ** -16 + 2 ** -39], dtype=torch.float64)
    assert ref.q115(x).item() == 2 ** -15 and ref.q131(x).item() == 2 ** -16 and ref.q115_q131(x).item() == 0.0
    assert ref.q131(torch.tensor([1.0], dtype=torch.float64)).item() == 1 - 2 ** -31
    # which function each mode applies: Q1.31 first only on linear-layer outputs under q115_tf
    assert ref.Boundaries("q115_tf")(x, "fc", matmul=True).item() == 0.0
    assert ref.Boundaries("q115_tf")(x, "gelu").item() == 2 ** -15
    assert ref.Boundaries("q115")(x, "fc", matmul=True).item() == 2 ** -15
    assert ref.Boundaries("none")(x, "fc", matmul=True) is x
    # float32 (--dtype float32): the clamp limit 1 - 2^-31 is 1.0f, as simulate_q131 documents
    f = ref.q131(torch.tensor([1.5, -3.0, 1 - 2 ** -24, 2 ** -33 * 3], dtype=torch.float32)).tolist()
    assert f == [1.0, -1.0, 1 - 2 ** -24, 2 ** -31]


def test_q115_idempotent():
    """Quantizing twice equals quantizing once, for every mode's boundary function."""
    t = torch.from_numpy(q_cases())
    for fn in (ref.q115, ref.q131, ref.q115_q131):
        once = fn(t)
        assert same_bits(fn(once).numpy(), once.numpy())
    tf = ref.q115_q131(t)
    assert same_bits(ref.q115(tf).numpy(), tf.numpy())  # the classifier's q115 after a q115_tf logits boundary


SITES_PER_LAYER = ["ln1", "qkv", "attn_scores", "attn_probs", "attproj", "residual1",
                   "ln2", "fc", "gelu", "fcproj", "residual2"]


def small_batch(seed):
    """Random token ids (B, T) and targets for SMALL."""
    g = torch.Generator().manual_seed(seed)
    shape = (SMALL["B"], SMALL["T"])
    return torch.randint(0, SMALL["V"], shape, generator=g), torch.randint(0, SMALL["V"], shape, generator=g)


def recorded_forward(params, mode, idx, y):
    """One forward and loss under the SF16 mode with every boundary recorded: (record, logits, loss)."""
    record = []
    bnd = ref.Boundaries(mode, record)
    logits = ref.forward(params, idx, SMALL["NH"], bnd)
    loss = ref.loss_fn(logits, y, SMALL["V"], bnd)
    return record, logits, loss


@pytest.mark.parametrize("mode", ["q115", "q115_tf"])
def test_boundaries_on_q115_grid(mode):
    """Under --sf16 every stored boundary tensor of a forward pass lies on the 2^-15 grid within
    [-1 + 2^-15, 1 - 2^-15]; the sites come in forward order; the clamp is exercised (LayerNorm with
    unit weights), and so are values far below 1."""
    idx, y = small_batch(3)
    g = torch.Generator().manual_seed(4)
    for params in (ref.init_params(SMALL, 1337),
                   [torch.randn(s, generator=g, dtype=torch.float32) * 0.3 for s in ref.shapes(SMALL)]):
        params = [torch.from_numpy(ref.bf16_to_f32(ref.bf16_bits(p.numpy())).reshape(p.shape)).double() for p in params]
        record, logits, _ = recorded_forward(params, mode, idx, y)
        names = [n for n, _ in record]
        assert names == ["encoder"] + SITES_PER_LAYER * SMALL["L"] + ["lnf", "logits", "classifier"]
        assert record[-2][1] is not None and torch.equal(record[-2][1], logits.detach())
        clamped = 0
        for name, t in record:
            assert t.dtype == torch.float64 and not torch.isnan(t).any(), name
            assert t.abs().max().item() <= Q115_MAX, name
            assert torch.equal(t * 32768, torch.round(t * 32768)), name
            clamped += int((t.abs() == Q115_MAX).sum())
        assert clamped > 0
        assert any(((t != 0) & (t.abs() < 2 ** -8)).any() for _, t in record)


def small_model_inside(seed):
    """Random float64 parameters for SMALL whose activations all stay well inside (-1, 1)."""
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=g, dtype=torch.float64) * 0.05 for s in ref.shapes(SMALL)]
    for i in (2, 8, 14):  # LayerNorm weights: normalized values up to ~4, so scale them down
        params[i] = params[i] * 0.2 + 0.15
    return params


def grads_of(params, mode, idx, y, bnd_class=None):
    """Loss and gradients of the mean loss under the SF16 mode."""
    p = [t.clone().requires_grad_(True) for t in params]
    bnd = (bnd_class or ref.Boundaries)(mode)
    loss = ref.loss_fn(ref.forward(p, idx, SMALL["NH"], bnd), y, SMALL["V"], bnd)
    loss.backward()
    return loss.detach(), [t.grad for t in p]


class DetachBoundaries(ref.Boundaries):
    """The same boundaries written as x + (q(x) - x).detach()."""

    def __call__(self, t, site, matmul=False):
        if self.mode == "none":
            return t
        fn = ref.q115_q131 if matmul and self.mode == "q115_tf" else ref.q115
        return t + (fn(t) - t).detach()


def test_straight_through_gradients():
    """Backward is straight-through: on a model with activations well inside (-1, 1) the gradients
    under q115 differ from the unquantized ones only by the quantization noise; the custom autograd
    function gives bit-identical values and gradients to the x + (q(x) - x).detach() form; a single
    boundary passes the gradient unchanged even where it clamps."""
    params = small_model_inside(6)
    idx, y = small_batch(7)
    record, _, _ = recorded_forward(params, "none", idx, y)
    for name, t in record:  # the premise: inside (-1, 1), except softmax rows with one visible token (1.0)
        assert t.abs().max().item() < (1.0 + 1e-12 if name == "attn_probs" else 0.9), name
    loss0, g0 = grads_of(params, "none", idx, y)
    for mode in ("q115", "q115_tf"):
        loss, g = grads_of(params, mode, idx, y)
        assert 0 < abs(loss.item() - loss0.item()) < 1e-5
        for name, a, b in zip(ref.NAMES, g, g0):
            rel = ((a - b).norm() / b.norm()).item()
            assert rel < 2e-3, (mode, name, rel)
        assert any(not torch.equal(a, b) for a, b in zip(g, g0))
        loss_d, g_d = grads_of(params, mode, idx, y, DetachBoundaries)
        assert torch.equal(loss, loss_d) and all(torch.equal(a, b) for a, b in zip(g, g_d))
    x = torch.tensor([-3.0, -1.0, -0.3, 1e-7, 0.2, 0.99999, 2.0, np.inf], dtype=torch.float64, requires_grad=True)
    w = torch.arange(1.0, 9.0, dtype=torch.float64)
    for mode, matmul in [("q115", False), ("q115_tf", True)]:
        x.grad = None
        (ref.Boundaries(mode)(x, "site", matmul) * w).sum().backward()
        assert torch.equal(x.grad, w)


def test_sf16_states(run, tmp_path):
    """The SF16 states: logits on the grid, losses fall, logits and loss equal a recomputation from the
    bf16 checkpoint; --sf16 q115_tf alone writes the checkpoints and that state only, the same bytes."""
    d, shard, _ = run
    x, y, params = first_batch_bf16_params(shard, d)
    for name, mode in [("gpt2_ref_debug_state_q115.bin", "q115"), ("gpt2_ref_debug_state_q115_tf.bin", "q115_tf")]:
        _, st = np_read_state(d / name)
        lg = st["logits"].astype(np.float64)
        assert np.abs(lg).max() <= Q115_MAX and np.array_equal(lg * 32768, np.round(lg * 32768))
        assert st["losses"][-1] < st["losses"][0] - 0.05
        bnd = ref.Boundaries(mode)
        logits = ref.forward(params, x, SMALL["NH"], bnd)
        assert np.array_equal(logits[..., :SMALL["V"]].numpy().astype(np.float32), st["logits"])
        assert abs(ref.loss_fn(logits, y, SMALL["V"], bnd).item() - st["loss"]) < 1e-6
    r = run_script(*small_args(shard, str(tmp_path)), "--sf16", "q115_tf")
    assert r.returncode == 0, r.stderr
    names = sorted(os.listdir(tmp_path))
    assert names == ["gpt2_ref.bin", "gpt2_ref_bf16.bin", "gpt2_ref_debug_state_q115_tf.bin"]
    for n in names:
        assert (tmp_path / n).read_bytes() == (d / n).read_bytes(), n


@pytest.mark.skipif(not os.path.exists(REAL_SHARD), reason="Tiny Shakespeare val shard not prepared")
def test_real_shard(tmp_path):
    """On the real shard with the full GPT-2 vocabulary the loss at init is near ln(50257)."""
    r = run_script(*small_args(REAL_SHARD, str(tmp_path), V=50257, Vp=50304, steps=2))
    assert r.returncode == 0, r.stderr
    _, st = np_read_state(tmp_path / "gpt2_ref_debug_state.bin")
    assert abs(st["loss"] - math.log(50257)) < 0.1


# ---------------------------------------------------------------- TensorCast casts (--tcast-states)

def bf16_np(a):
    """Nearest bf16 values (ties to even) of a float array, as float32 (this file's rne_bf16)."""
    return (rne_bf16(np.asarray(a, dtype=np.float32)).astype(np.uint32) << 16).view(np.float32)


def cast_np(a, dtype, dim=-1, bf16_in=True, bf16_out=True):
    """The trainer's cast of a stored tensor, written out with tcast_ref.vcast directly: float64 2-D array
    -> float32 -> BF16 (bf16_in) -> vcast along dim -> BF16 (bf16_out) -> float64."""
    a = np.asarray(a, dtype=np.float64).astype(np.float32)
    out, _ = tcast_ref.vcast(bf16_np(a) if bf16_in else a, dtype, dim)
    return (bf16_np(out) if bf16_out else out).astype(np.float64)


def test_tcast_linear_matches_explicit():
    """The operand-cast Function: forward, dgrad, wgrad and bias gradient equal explicit vcast + matmul
    with each operand cast along the reduction dimension of its product (three different formats, so a
    swapped operand or dimension shows); an operand without a cast enters unrounded."""
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(2, 32, 64, generator=g, dtype=torch.float64) * 0.7).requires_grad_(True)
    w = (torch.randn(96, 64, generator=g, dtype=torch.float64) * 0.05).requires_grad_(True)
    b = (torch.randn(96, generator=g, dtype=torch.float64) * 0.1).requires_grad_(True)
    up = torch.randn(2, 32, 96, generator=g, dtype=torch.float64)
    cx, cw, cdy = "mxfp8e4", "mxfp6e2", "mxfp8e5"
    y = ref.TcastLinear.apply(x, w, b, cx, cw, cdy)
    (y * up).sum().backward()
    X, W, DY = x.detach().numpy().reshape(64, 64), w.detach().numpy(), up.numpy().reshape(64, 96)
    want_y = cast_np(X, cx) @ cast_np(W, cw).T + b.detach().numpy()
    want_dx = cast_np(DY, cdy) @ cast_np(W, cw, 0)
    want_dw = cast_np(DY, cdy, 0).T @ cast_np(X, cx, 0)
    close = lambda a, e: np.allclose(a, e, rtol=1e-12, atol=1e-14)
    assert y.shape == (2, 32, 96) and close(y.detach().numpy().reshape(64, 96), want_y)
    assert close(x.grad.numpy().reshape(64, 64), want_dx)
    assert close(w.grad.numpy(), want_dw)
    assert close(b.grad.numpy(), DY.sum(0))  # the uncast dy
    # the casts act, and differ by dimension
    plain = X @ W.T + b.detach().numpy()
    assert np.abs(want_y - plain).max() > 1e-3 * np.abs(plain).max()
    assert not np.array_equal(cast_np(X, cx, 0), cast_np(X, cx, -1))
    assert not np.array_equal(cast_np(W, cw, 0), cast_np(W, cw, -1))
    # uncast operands: plain float64 values (no BF16 rounding)
    y2 = ref.TcastLinear.apply(x.detach(), w.detach(), b.detach(), None, cw, None)
    assert close(y2.numpy().reshape(64, 96), X @ cast_np(W, cw).T + b.detach().numpy())


def attn_case(T, seed):
    """(qkv (1, T, 3C) float64, NH, HS) for the attention tests: C = 64, two heads."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, T, 192, generator=g, dtype=torch.float64) * 1.5, 2, 32


@pytest.mark.parametrize("T", [64, 48])
def test_tcast_attention_sites(T):
    """attn_scores / attn_probs: each query row cast along the keys with the future keys (and, for T = 48,
    the positions up to the 64 of two 32-key groups) entering as 0: the recorded values equal that
    explicit computation; the future entries are 0; making a future key huge changes neither the cast
    scores, nor the probabilities, nor the output of any earlier query (without the zeroing it would
    move the group scale of queries 32..39); the probabilities' backward is dS = P^ (dP - rowsum(P^ dP))."""
    plan = ref.TcastPlan("attn_scores=mxfp8e4,attn_probs=mxfp6e2")
    qkv, NH, HS = attn_case(T, 12)

    def run(qkv):
        record = []
        out = ref.attention(qkv, NH, ref.TcastBoundaries(plan, record))
        assert [n for n, _ in record] == ["attn_scores", "attn_probs"]
        return out, record[0][1], record[1][1]

    out, s_hat, p_hat = run(qkv)
    q, k = qkv[..., :64].view(1, T, NH, HS).transpose(1, 2), qkv[..., 64:128].view(1, T, NH, HS).transpose(1, 2)
    raw = (q @ k.transpose(-2, -1) / math.sqrt(HS)).numpy().reshape(-1, T)
    future = np.triu(np.ones((T, T), dtype=bool), 1)
    pad = lambda a: np.pad(np.where(np.tile(future, (NH, 1)), 0.0, a), ((0, 0), (0, -T % 32)))
    want_s = cast_np(pad(raw), "mxfp8e4", bf16_in=False, bf16_out=False)[:, :T]
    assert np.array_equal(s_hat.numpy().reshape(-1, T), want_s)
    masked = torch.from_numpy(want_s).view(1, NH, T, T).masked_fill(torch.from_numpy(future), float("-inf"))
    want_p = cast_np(pad(masked.softmax(-1).numpy().reshape(-1, T)), "mxfp6e2", bf16_in=False)[:, :T]
    assert np.array_equal(p_hat.numpy().reshape(-1, T), want_p)
    fut = torch.from_numpy(future).expand_as(s_hat)
    assert not s_hat[fut].any() and not p_hat[fut].any()
    assert not np.array_equal(want_s, np.where(np.tile(future, (NH, 1)), 0.0, raw))  # the cast acts
    # causality: key 40 made huge
    j = 40
    qkv2 = qkv.clone()
    qkv2[0, j, 64:128] *= 200
    out2, s2, p2 = run(qkv2)
    assert torch.equal(s2[..., :j, :], s_hat[..., :j, :]) and torch.equal(p2[..., :j, :], p_hat[..., :j, :])
    assert torch.equal(out2[:, :j], out[:, :j]) and not torch.equal(out2[:, j:], out[:, j:])
    raw2 = (q @ (qkv2[..., 64:128].view(1, T, NH, HS).transpose(1, 2)).transpose(-2, -1) / math.sqrt(HS)).numpy()
    leak = lambda r: cast_np(np.pad(r.reshape(-1, T), ((0, 0), (0, -T % 32))), "mxfp8e4", bf16_in=False)
    rows = [h * T + i for h in range(NH) for i in range(32, j)]
    assert not np.array_equal(leak(raw2)[rows, 32:64], leak(raw)[rows, 32:64])  # the test can see a leak
    # the probabilities' backward
    s = masked.clone().requires_grad_(True)
    up = torch.randn(1, NH, T, T, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    p = ref.AttnProbsCast.apply(s, "mxfp6e2")
    (p * up).sum().backward()
    assert torch.allclose(s.grad, p.detach() * (up - (p.detach() * up).sum(-1, keepdim=True)), rtol=1e-13, atol=1e-15)


def test_tcast_site_straight_through():
    """A site cast is the BF16-stored value cast and stored again in BF16, with the gradient passing
    straight through (the identity); the LM head output takes matmul_out then logits; a site the plan
    does not cast, and the classifier, leave the tensor alone; an attn_scores cast passes every entry's
    gradient straight through as well."""
    plan = ref.TcastPlan("all=mxfp8e4,logits=mxfp6e3,gelu_out=e4m3_e")
    g = torch.Generator().manual_seed(14)
    x = (torch.randn(2, 8, 64, generator=g, dtype=torch.float64) * 3).requires_grad_(True)
    w = torch.randn(2, 8, 64, generator=g, dtype=torch.float64)
    bnd = ref.TcastBoundaries(plan)
    for site, chain in [("gelu", ["e4m3_e"]), ("ln2", ["mxfp8e4"]), ("logits", ["mxfp8e4", "mxfp6e3"])]:
        x.grad = None
        y = bnd(x, site, matmul=site == "logits")
        (y * w).sum().backward()
        assert torch.equal(x.grad, w), site
        want = x.detach().numpy().reshape(16, 64)
        for dtype in chain:
            want = cast_np(want, dtype)
        assert np.array_equal(y.detach().numpy().reshape(16, 64), want), site
        assert not np.array_equal(want, x.detach().numpy().reshape(16, 64))
    assert bnd(x, "classifier") is x
    assert ref.TcastBoundaries(ref.TcastPlan("gelu_out=mxfp8e4"))(x, "residual1") is x
    s = torch.randn(1, 2, 32, 32, generator=g, dtype=torch.float64).requires_grad_(True)
    up = torch.randn(1, 2, 32, 32, generator=g, dtype=torch.float64)
    (bnd(s, "attn_scores") * up).sum().backward()
    assert torch.equal(s.grad, up)


def test_tcast_plan():
    """Plan texts as the trainer parses them: `all`, later entries win, any case; what it refuses; and the
    fixed plan is the one test_gpt2cu builds (llmc/modes/tcast/test.cuh; the texts compared)."""
    p = ref.TcastPlan(**ref.TCAST_PLAN)
    assert p.site == {"encoder_out": "mxfp8e4"} and p.op == {"w": "mxfp8e4"} and p.lm_head == 0
    p = ref.TcastPlan("all=mxfp8e4,LOGITS=bfloat16", "DY=e5m2")
    assert sorted(p.site) == sorted(ref.TCAST_SITES) and p.site["logits"] == "bfloat16" and p.op == {"dy": "e5m2"}
    for kw, what in [(dict(cast="nosuch=mxfp8e4"), "unknown site"), (dict(cast_gemm="z=mxfp8e4"), "unknown operand"),
                     (dict(cast="matmul_out"), "KEY=DTYPE"), (dict(cast="matmul_out=e4m3fn_e8m0_t32d-1"), "dY"),
                     (dict(cast="gelu_out=mxfp8e4@stochastic"), "stochastic"), (dict(cast="attn_scores=e4m3_e"), "attention"),
                     (dict(cast="attn_probs=e4m3fn_e8m0_t128"), "attention"), (dict(cast="all=nosuch"), "nosuch"),
                     (dict(lm_head=1), "--cast-lm-head")]:
        with pytest.raises(ValueError, match=what):
            ref.TcastPlan(**kw)
    tcast_block = open(os.path.join(REPO, "llmc", "modes", "tcast", "test.cuh")).read()  # test_gpt2cu's TensorCast checks
    text = lambda name: "".join(re.findall(r'"([^"]*)"', re.search(name + r"\s*=\s*([^;]*);", tcast_block).group(1)))
    assert text("TCAST_TEST_CAST") == ref.TCAST_PLAN["cast"]
    assert text("TCAST_TEST_CAST_GEMM") == ref.TCAST_PLAN["cast_gemm"]
    assert int(re.search(r"TCAST_TEST_LM_HEAD\s*=\s*(\d+);", tcast_block).group(1)) == ref.TCAST_PLAN["lm_head"]
    # the further cases: test.cuh's TCAST_CASES rows {"name", "cast", "cast_gemm", "build/ref/<state>", ...}
    rows = re.findall(r'\{"(\w+)", "([^"]*)", "([^"]*)", "build/ref/([^"]*)"', tcast_block)
    assert {n: (c, g, f) for n, c, g, f in rows} == {n: (p["cast"], p["cast_gemm"], f"gpt2_ref_debug_state_tcast_{n}.bin")
                                                     for n, p in ref.TCAST_CASES.items()}
    assert all(p["lm_head"] == 0 for p in ref.TCAST_CASES.values())
    assert '"build/ref/gpt2_ref_bf16_hs64.bin"' in tcast_block and '"build/ref/gpt2_ref_debug_state_bf16_hs64.bin"' in tcast_block


@pytest.mark.parametrize("case", sorted(ref.TCAST_CASES))
def test_tcast_case_state(run, case):
    """The states of TCAST_CASES: the head-size-64 checkpoint holds the bf16 weights with NH = C / 64; each case's
    state (mode 3) has the logits and loss of a recomputation under its plan on that model, its recorded attention
    probabilities (and, for `all`, every recorded site) on their MXFP8 grids, and is apart from the uncast
    head-size-64 state by a cast-sized amount."""
    d, shard, _ = run
    x, y, params = first_batch_bf16_params(shard, d)
    head, t16 = np_read_checkpoint(d / "gpt2_ref_bf16_hs64.bin")
    _, t16_base = np_read_checkpoint(d / "gpt2_ref_bf16.bin")
    NH = SMALL["C"] // ref.TCAST_CASE_HS
    assert head[5] == NH and all(np.array_equal(a, b) for a, b in zip(t16, t16_base))
    h, st = np_read_state(d / f"gpt2_ref_debug_state_tcast_{case}.bin")
    assert h[13] == 1 and h[14] == 3 and h[15] == 0
    record = []
    bnd = ref.make_boundaries(f"tcast_{case}")
    bnd.record = record
    logits = ref.forward(params, x, NH, bnd)
    assert np.array_equal(logits[..., :SMALL["V"]].numpy().astype(np.float32), st["logits"])
    assert abs(ref.loss_fn(logits, y, SMALL["V"], bnd).item() - st["loss"]) < 1e-6
    sites = {n for n, _ in record}
    want = {"attn_scores", "attn_probs"} if case == "attn" else {"attn_scores", "attn_probs", "encoder", "ln1", "qkv", "residual2"}
    assert want <= sites
    probs = [t for n, t in record if n == "attn_probs"]
    T = SMALL["T"]
    pad = -T % 32  # rows of T keys in 32-key tiles: zeros (future keys, as the kernels see them) fill the last one
    for p in probs:
        a = np.pad(p.numpy().reshape(-1, T), ((0, 0), (0, pad))).astype(np.float32)
        assert np.array_equal(cast_np(a, "mxfp8e4", bf16_in=False), a)
    hu, plain = np_read_state(d / "gpt2_ref_debug_state_bf16_hs64.bin")
    assert hu[13] == 1 and hu[14] == 0
    rel = lambda a, b: np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b)
    assert 1e-3 < rel(st["logits"], plain["logits"]) < 0.5
    assert abs(st["loss"] - plain["loss"]) < 0.1 and st["losses"][-1] < plain["losses"][0] - 0.5


def test_tcast_state(run):
    """The TensorCast state: mode 3 on the bf16 weights (test_debug_state); its logits and loss equal a
    recomputation under the fixed plan from the bf16 checkpoint, whose recorded encoder output is on the
    MXFP8 grid; it is apart from the uncast bf16 state by a cast-sized amount (neither BF16 noise nor a
    broken model)."""
    d, shard, _ = run
    x, y, params = first_batch_bf16_params(shard, d)
    head, st = np_read_state(d / "gpt2_ref_debug_state_tcast.bin")
    assert head[13] == 1 and head[14] == 3
    record = []
    bnd = ref.make_boundaries("tcast")
    bnd.record = record
    logits = ref.forward(params, x, SMALL["NH"], bnd)
    assert np.array_equal(logits[..., :SMALL["V"]].numpy().astype(np.float32), st["logits"])
    assert abs(ref.loss_fn(logits, y, SMALL["V"], bnd).item() - st["loss"]) < 1e-6
    BT = x.numel()
    enc = record[0][1].numpy().reshape(BT, SMALL["C"])
    assert record[0][0] == "encoder" and np.array_equal(cast_np(enc, "mxfp8e4"), enc)
    plain_enc = (params[0][x] + params[1][:SMALL["T"]]).numpy().reshape(BT, SMALL["C"])
    assert not np.array_equal(enc, plain_enc)
    _, plain = np_read_state(d / "gpt2_ref_debug_state_bf16.bin")
    rel = lambda a, b: np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b)
    assert 1e-2 < rel(st["logits"], plain["logits"]) < 0.3
    g_rel = rel(np.concatenate(st["grads"]), np.concatenate(plain["grads"]).astype(np.float64))
    assert 1e-2 < g_rel < 0.5
    assert abs(st["loss"] - plain["loss"]) < 0.05 and st["losses"][-1] < plain["losses"][0] - 0.5
