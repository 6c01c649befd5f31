#!/usr/bin/env python3
"""Functional PyTorch GPT-2 reference: writes the initial checkpoint (fp32 and bf16) and the debug
states (version 3) that the C and CUDA tests compare against. Formats: doc/FORMATS.md.

--sf16 q115 / q115_tf simulates the SF16 mode (llmc/boundary.cuh, llmc/numerics/q115.h): a Q1.15
quantize-dequantize at every forward storage boundary, straight-through in backward."""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARD_MAGIC, CKPT_MAGIC, STATE_MAGIC = 20240520, 20240326, 20240327
HEADER_BYTES = 1024
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # the only tensors with weight decay
SF16_MODES = {"none": 0, "q115": 1, "q115_tf": 2}  # --sf16 value -> debug-state header word 14


class FormatError(Exception):
    """A bad input file; the message reads 'path: field: problem'."""

    def __init__(self, path, field, problem):
        super().__init__(f"{path}: {field}: {problem}")


# ---------------------------------------------------------------- file formats

def shapes(cfg):
    """Shapes of the 16 parameter tensors in checkpoint order for cfg (keys L, C, maxT, Vp)."""
    L, C = cfg["L"], cfg["C"]
    return [(cfg["Vp"], C), (cfg["maxT"], C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C),
            (L, C, C), (L, C), (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C),
            (C,), (C,)]


def num_params(cfg):
    """Total number of parameters for cfg."""
    return sum(math.prod(s) for s in shapes(cfg))


def write_atomic(path, arrays):
    """Write the bytes of the numpy arrays to path.tmp, then rename it over path."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for a in arrays:
            f.write(np.ascontiguousarray(a).tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_header(path, magic, versions):
    """Return (256-word header, file size) of path after checking its magic and version."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = np.frombuffer(f.read(HEADER_BYTES), dtype="<i4")
    except OSError as e:
        raise FormatError(path, "file", e.strerror or str(e)) from None
    if head.size * 4 < HEADER_BYTES:
        raise FormatError(path, "header", f"file has {size} bytes, the header alone needs {HEADER_BYTES}")
    if head[0] != magic:
        raise FormatError(path, "magic", f"{head[0]}, expected {magic}")
    if head[1] not in versions:
        raise FormatError(path, "version", f"{head[1]}, expected one of {list(versions)}")
    return head, size


def read_shard(path):
    """Return the uint16 tokens of a token shard, checking header and length."""
    head, size = read_header(path, SHARD_MAGIC, (1,))
    n = int(head[2])
    if n <= 0:
        raise FormatError(path, "number of tokens", f"{n}, must be > 0")
    if size != HEADER_BYTES + 2 * n:
        raise FormatError(path, "file length", f"{size} bytes, expected {HEADER_BYTES + 2 * n} for {n} tokens")
    return np.fromfile(path, dtype="<u2", offset=HEADER_BYTES)


def bf16_bits(a):
    """Round float32 values to bf16 (nearest, ties to even) with integer arithmetic; return uint16 bits.

    Integer rounding on the bit patterns rather than torch's cast: the result is then defined by
    FORMATS.md alone (the same bits on any torch version, device or numpy, which has no bf16), and
    NaNs stay quiet NaNs. The tests check that it agrees with torch's cast on finite values."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    out[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def bf16_to_f32(bits):
    """Expand bf16 bit patterns (uint16) to float32 values."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def split_params(flat, cfg):
    """Cut a flat float32 array into the 16 parameter tensors (torch, CPU)."""
    out, pos = [], 0
    for s in shapes(cfg):
        n = math.prod(s)
        out.append(torch.from_numpy(flat[pos:pos + n].reshape(s).copy()))
        pos += n
    return out


def read_checkpoint(path):
    """Return (cfg, float32 parameters) from a version 3 or 5 checkpoint, checking every field."""
    head, size = read_header(path, CKPT_MAGIC, (3, 5))
    cfg = dict(zip(["maxT", "V", "L", "NH", "C", "Vp"], (int(w) for w in head[2:8])))
    for k, v in cfg.items():
        if v <= 0:
            raise FormatError(path, k, f"{v}, must be > 0")
    if cfg["C"] % cfg["NH"]:
        raise FormatError(path, "C", f"{cfg['C']} is not a multiple of NH={cfg['NH']}")
    if cfg["Vp"] < cfg["V"] or cfg["Vp"] % 128:
        raise FormatError(path, "Vp", f"{cfg['Vp']}, must be a multiple of 128 and >= V={cfg['V']}")
    width = 4 if head[1] == 3 else 2
    want = HEADER_BYTES + num_params(cfg) * width
    if size != want:
        raise FormatError(path, "file length", f"{size} bytes, expected {want} for version {head[1]}")
    raw = np.fromfile(path, dtype="<f4" if width == 4 else "<u2", offset=HEADER_BYTES)
    return cfg, split_params(raw if width == 4 else bf16_to_f32(raw), cfg)


def write_checkpoint(path, cfg, params, bf16=False):
    """Write params as a version 3 (fp32) or version 5 (bf16) checkpoint."""
    head = np.zeros(256, dtype="<i4")
    head[:8] = [CKPT_MAGIC, 5 if bf16 else 3, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    flat = np.concatenate([p.detach().cpu().numpy().ravel() for p in params]).astype("<f4")
    write_atomic(path, [head, bf16_bits(flat).astype("<u2") if bf16 else flat])


def write_debug_state(path, args, cfg, x, y, logits, loss, grads, losses, bf16, sf16="none"):
    """Write a version 3 debug state (header, x, y, logits, loss, gradients, step losses); word 13 is the
    bf16-weights flag, word 14 the SF16 mode (SF16_MODES)."""
    f32 = lambda t: t.detach().cpu().to(torch.float32).numpy().astype("<f4").ravel()
    head = np.zeros(256, dtype="<i4")
    head[:7] = [STATE_MAGIC, 3, args.B, args.T, cfg["V"], cfg["Vp"], len(losses)]
    opt = [args.lr, args.beta1, args.beta2, args.eps, args.weight_decay, args.grad_clip]
    head[7:13] = np.array(opt, dtype="<f4").view("<i4")
    head[13] = int(bf16)
    head[14] = SF16_MODES[sf16]
    body = [x.cpu().numpy().astype("<i4"), y.cpu().numpy().astype("<i4"), f32(logits[..., :cfg["V"]]),
            f32(loss)] + [f32(g) for g in grads] + [np.array(losses, dtype="<f4")]
    write_atomic(path, [head] + body)


# ---------------------------------------------------------------- model

def init_params(cfg, seed):
    """GPT-2 initial weights as float32 tensors, drawn in checkpoint order from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    normal = lambda shape, std: torch.randn(shape, generator=g, dtype=torch.float32) * std
    proj_std = 0.02 / math.sqrt(2 * cfg["L"])
    params = []
    for name, shape in zip(NAMES, shapes(cfg)):
        if name == "wte":
            p = torch.cat([normal((cfg["V"], cfg["C"]), 0.02), torch.zeros(cfg["Vp"] - cfg["V"], cfg["C"])])
        elif name in ("wpe", "qkvw", "fcw"):
            p = normal(shape, 0.02)
        elif name in ("attprojw", "fcprojw"):
            p = normal(shape, proj_std)
        elif name in ("ln1w", "ln2w", "lnfw"):
            p = torch.ones(shape)
        else:
            p = torch.zeros(shape)
        params.append(p)
    return params


def quantize_fixed(x, frac_bits):
    """Fixed-point Q1.frac_bits quantize-dequantize of a float tensor, as a new tensor: clamp to
    +-(1 - 2^-frac_bits), round x * 2^frac_bits to the nearest integer with ties to even (torch.round
    rounds half to even), scale back. Every step is exact in float64 (power-of-two scalings of values
    below 1), so this is the real-number function of llmc/numerics/q115.h. NaN passes through (clamp
    and round keep it), +-Inf clamps, a value that rounds to 0 comes back as +0.0 like the C code.
    In float32 the Q1.31 clamp limit 1 - 2^-31 rounds to 1.0, so --dtype float32 gives simulate_q131's
    +-1.0f too."""
    lim = 1.0 - 2.0 ** -frac_bits
    scale = float(2 ** frac_bits)
    return torch.clamp(x, -lim, lim).mul_(scale).round_().div_(scale).add_(0.0)


def q115(x):
    """SF16 storage boundary, simulate_q115: Q1.15 quantize-dequantize (2^-15 grid, +-(1 - 2^-15))."""
    return quantize_fixed(x, 15)


def q131(x):
    """SF16_TRUE_FORWARD register simulation, simulate_q131: Q1.31 quantize-dequantize."""
    return quantize_fixed(x, 31)


def q115_q131(x):
    """A matmul output under SF16_TRUE_FORWARD: simulate_q115(simulate_q131(x))."""
    return q115(q131(x))


class StraightThrough(torch.autograd.Function):
    """fn(x) in forward, the identity in backward: the value of x + (fn(x) - x).detach(), but exactly
    fn(x) for every x (the detach form gives NaN for +-Inf and misses fn(x) for |x| above about 2^38,
    where q(x) - x rounds) and without temporaries."""

    @staticmethod
    def forward(ctx, x, fn):
        return fn(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class Boundaries:
    """The forward storage boundaries of one SF16 mode (SF16_MODES). bnd(t, site, matmul) returns t as
    stored at `site`: t itself for "none", q115(t) straight-through for "q115" and, for "q115_tf",
    q115(q131(t)) when t is a linear-layer output (matmul=True), else q115(t). When `record` is a list,
    every call appends (site, stored value detached) to it, in forward order (for the tests)."""

    def __init__(self, mode="none", record=None):
        if mode not in SF16_MODES:
            raise ValueError(f"unknown SF16 mode {mode!r}, expected one of {list(SF16_MODES)}")
        self.mode, self.record = mode, record

    def __call__(self, t, site, matmul=False):
        if self.mode != "none":
            t = StraightThrough.apply(t, q115_q131 if matmul and self.mode == "q115_tf" else q115)
        if self.record is not None:
            self.record.append((site, t.detach()))
        return t


NO_BOUNDARIES = Boundaries()


class LMHead(torch.autograd.Function):
    """h @ wte.T for h (..., C) and wte (Vp, C), the cost of this script on the CPU (three
    B*T x C x Vp products per step). The same products as autograd's, each summing over C, but with
    operand layouts that the reference (netlib) BLAS of a Debian torch runs about twice as fast as
    autograd's choice (logits as (wte @ h^T)^T; the wte gradient from a contiguous dlogits^T); with
    that BLAS the results are bit-identical to h @ wte.T (checked on the written states). Any BLAS
    gives the same values up to float64 rounding."""

    @staticmethod
    def forward(ctx, h, wte):
        ctx.save_for_backward(h, wte)
        h2 = h.reshape(-1, h.shape[-1])
        return (wte @ h2.T.contiguous()).T.contiguous().view(*h.shape[:-1], wte.shape[0])

    @staticmethod
    def backward(ctx, grad):
        h, wte = ctx.saved_tensors
        g2 = grad.reshape(-1, wte.shape[0])
        dh = (g2 @ wte).view(h.shape) if ctx.needs_input_grad[0] else None
        dw = g2.T.contiguous() @ h.reshape(-1, h.shape[-1]) if ctx.needs_input_grad[1] else None
        return dh, dw


def layernorm(x, w, b, eps=1e-5):
    """LayerNorm over the last axis with biased variance."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_tanh(u):
    """GELU, tanh approximation."""
    return 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))


def attention(qkv, NH, bnd=NO_BOUNDARIES):
    """Causal multi-head self-attention of (B, T, 3C) q|k|v projections; returns (B, T, C).
    Boundaries: the scaled scores (before the causal mask) and the normalized probabilities."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (t.reshape(B, T, NH, C // NH).transpose(1, 2) for t in qkv.split(C, dim=-1))
    att = bnd(q @ k.transpose(-2, -1) / math.sqrt(C // NH), "attn_scores")
    future = torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu(1)
    att = bnd(att.masked_fill(future, float("-inf")).softmax(dim=-1), "attn_probs")
    return (att @ v).transpose(1, 2).reshape(B, T, C)


def forward(params, idx, NH, bnd=NO_BOUNDARIES):
    """Logits (B, T, Vp) of the token ids idx (B, T) under the 16 parameter tensors, with the storage
    boundaries bnd (Boundaries; default none): encoder sum, LayerNorm outputs, linear-layer outputs
    after the bias (matmul=True), attention scores and probabilities, GELU output, residual sums."""
    wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, fcw, fcb, fpw, fpb, lnfw, lnfb = params
    x = bnd(wte[idx] + wpe[:idx.shape[1]], "encoder")
    for l in range(ln1w.shape[0]):
        h = bnd(layernorm(x, ln1w[l], ln1b[l]), "ln1")
        a = attention(bnd(h @ qkvw[l].T + qkvb[l], "qkv", matmul=True), NH, bnd)
        x = bnd(x + bnd(a @ apw[l].T + apb[l], "attproj", matmul=True), "residual1")
        h = bnd(layernorm(x, ln2w[l], ln2b[l]), "ln2")
        u = bnd(gelu_tanh(bnd(h @ fcw[l].T + fcb[l], "fc", matmul=True)), "gelu")
        x = bnd(x + bnd(u @ fpw[l].T + fpb[l], "fcproj", matmul=True), "residual2")
    return bnd(LMHead.apply(bnd(layernorm(x, lnfw, lnfb), "lnf"), wte), "logits", matmul=True)


def loss_fn(logits, targets, V, bnd=NO_BOUNDARIES):
    """Mean cross-entropy over the unpadded vocabulary; the classifier reads the logits through bnd
    (idempotent after the logits boundary of forward, kept explicit like the GPU classifier)."""
    logits = bnd(logits[..., :V], "classifier")
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def reference(weights, x, y, cfg, args, sf16="none"):
    """Logits, loss, gradients and grad norm at weights, then the losses of args.steps AdamW steps,
    under the SF16 mode sf16. Step 0 starts from the same weights, so its forward and backward are
    the initial ones (computed once; the gradients are copied before clipping)."""
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    bnd = Boundaries(sf16)
    p = [w.to(device, dtype).clone().requires_grad_(True) for w in weights]
    groups = [{"params": [q for n, q in zip(NAMES, p) if n in DECAY], "weight_decay": args.weight_decay},
              {"params": [q for n, q in zip(NAMES, p) if n not in DECAY], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, foreach=False)
    losses = []
    for step in range(max(args.steps, 1)):
        opt.zero_grad()
        logits = forward(p, x, cfg["NH"], bnd)
        step_loss = loss_fn(logits, y, cfg["V"], bnd)
        step_loss.backward()
        if step == 0:
            logits0, loss0 = logits.detach(), step_loss.detach()
            grads = [q.grad.detach().clone() for q in p]
            norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
        del logits
        if step < args.steps:
            losses.append(step_loss.item())
            torch.nn.utils.clip_grad_norm_(p, args.grad_clip)
            opt.step()
    return logits0, loss0, grads, norm, losses


# ---------------------------------------------------------------- command line

def parse_args(argv):
    """Command-line options."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", default=os.path.join(REPO, "data", "tinyshakespeare", "tiny_shakespeare_val.bin"))
    ap.add_argument("--out-dir", default=os.path.join(REPO, "build", "ref"))
    ap.add_argument("--init-from", help="start from this checkpoint (version 3 or 5) instead of a seed")
    ap.add_argument("--seed", type=int, default=1337)
    for name, default in [("L", 2), ("C", 128), ("NH", 4), ("T", 64), ("maxT", 64), ("B", 4),
                          ("V", 50257), ("Vp", 50304), ("steps", 10)]:
        ap.add_argument("--" + name, type=int, default=default)
    for name, default in [("lr", 1e-3), ("beta1", 0.9), ("beta2", 0.95), ("eps", 1e-8),
                          ("weight-decay", 0.1), ("grad-clip", 1.0)]:
        ap.add_argument("--" + name, type=float, default=default)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--sf16", choices=list(SF16_MODES), default="none",
                    help="SF16 boundary simulation: write only the state of this mode (from the bf16 weights) "
                         "instead of the fp32 and bf16 states")
    ap.add_argument("--sf16-states", action="store_true",
                    help="write every state: fp32, bf16, and the SF16 states q115 and q115_tf")
    args = ap.parse_args(argv)
    for name in ("L", "C", "NH", "T", "maxT", "B", "V", "Vp"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name} must be > 0")
    if args.steps < 0:
        ap.error("--steps must be >= 0")
    if args.C % args.NH:
        ap.error("--C must be a multiple of --NH")
    if args.Vp < args.V or args.Vp % 128:
        ap.error("--Vp must be a multiple of 128 and >= --V")
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device available")
    return args


def main(argv=None):
    """Build the reference outputs and print a summary."""
    t0 = time.time()
    args = parse_args(argv)
    if args.init_from:
        cfg, weights = read_checkpoint(args.init_from)
        source = args.init_from
    else:
        cfg = {k: getattr(args, k) for k in ("L", "C", "NH", "maxT", "V", "Vp")}
        weights, source = init_params(cfg, args.seed), f"seed {args.seed}"
    if args.T > cfg["maxT"]:
        sys.exit(f"error: T={args.T} exceeds maxT={cfg['maxT']} of the model")

    tokens = read_shard(args.data)
    BT = args.B * args.T
    if tokens.size < BT + 1:
        raise FormatError(args.data, "number of tokens", f"{tokens.size}, need B*T+1 = {BT + 1}")
    bad = np.flatnonzero(tokens[:BT + 1] >= cfg["V"])
    if bad.size:
        raise FormatError(args.data, f"token {bad[0]}", f"id {tokens[bad[0]]} >= V={cfg['V']}")
    batch = torch.from_numpy(tokens[:BT + 1].astype(np.int64)).to(args.device)
    x, y = batch[:BT].view(args.B, args.T), batch[1:].view(args.B, args.T)

    os.makedirs(args.out_dir, exist_ok=True)
    out = lambda name: os.path.join(args.out_dir, name)
    weights_bf16 = [torch.from_numpy(bf16_to_f32(bf16_bits(w.numpy())).reshape(w.shape)) for w in weights]
    write_checkpoint(out("gpt2_ref.bin"), cfg, weights)
    write_checkpoint(out("gpt2_ref_bf16.bin"), cfg, weights, bf16=True)
    print(f"config: L={cfg['L']} C={cfg['C']} NH={cfg['NH']} maxT={cfg['maxT']} V={cfg['V']} Vp={cfg['Vp']} "
          f"B={args.B} T={args.T} init={source} device={args.device} dtype={args.dtype} "
          f"sf16={'all' if args.sf16_states else args.sf16}")
    print(f"parameters: {num_params(cfg)}")
    # (tag, weights, bf16 weights, SF16 mode, file); SF16 stores BF16, so its states start from the bf16 weights
    runs = [("fp32", weights, False, "none", "gpt2_ref_debug_state.bin"),
            ("bf16", weights_bf16, True, "none", "gpt2_ref_debug_state_bf16.bin")]
    runs += [(m, weights_bf16, True, m, f"gpt2_ref_debug_state_{m}.bin") for m in SF16_MODES if m != "none"]
    if not args.sf16_states:
        runs = [r for r in runs if r[3] == args.sf16]
    written = ["gpt2_ref.bin", "gpt2_ref_bf16.bin"]
    for tag, w, bf16, sf16, name in runs:
        t1 = time.time()
        logits, loss, grads, norm, losses = reference(w, x, y, cfg, args, sf16)
        write_debug_state(out(name), args, cfg, x, y, logits, loss, grads, losses, bf16, sf16)
        written.append(name)
        print(f"{tag}: loss {loss.item():.6f} grad norm {norm:.6f} ({time.time() - t1:.1f} s)")
        print(f"{tag}: {len(losses)} step losses: " + " ".join(f"{v:.6f}" for v in losses))
    for name in written:
        print(f"wrote {out(name)} ({os.path.getsize(out(name))} bytes)")
    print(f"done in {time.time() - t0:.2f} s")


if __name__ == "__main__":
    try:
        main()
    except FormatError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
