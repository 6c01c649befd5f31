"""Tests of dev/reference/gpt2_reference.py on small shapes and a synthetic token shard."""
import math
import os
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

SMALL = dict(L=2, C=64, NH=4, T=16, maxT=16, B=2, V=300, Vp=384)
STEPS = 10


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
    r = run_script(*small_args(shard, str(d)))
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
    for name, bf16 in [("gpt2_ref_debug_state.bin", 0), ("gpt2_ref_debug_state_bf16.bin", 1)]:
        head, st = np_read_state(d / name)
        assert list(head[:7]) == [20240327, 3, SMALL["B"], SMALL["T"], SMALL["V"], SMALL["Vp"], STEPS]
        opt = np.array([1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0], dtype="<f4")
        assert np.array_equal(head[7:13], opt.view("<i4")) and head[13] == bf16 and not head[14:].any()
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


@pytest.mark.skipif(not os.path.exists(REAL_SHARD), reason="Tiny Shakespeare val shard not prepared")
def test_real_shard(tmp_path):
    """On the real shard with the full GPT-2 vocabulary the loss at init is near ln(50257)."""
    r = run_script(*small_args(REAL_SHARD, str(tmp_path), V=50257, Vp=50304, steps=2))
    assert r.returncode == 0, r.stderr
    _, st = np_read_state(tmp_path / "gpt2_ref_debug_state.bin")
    assert abs(st["loss"] - math.log(50257)) < 0.1
