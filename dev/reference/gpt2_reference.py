#!/usr/bin/env python3
"""Functional PyTorch GPT-2 reference: writes the initial checkpoint (fp32 and bf16) and the debug
states (version 3) that the C and CUDA tests compare against. Formats: doc/FORMATS.md."""
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


def write_debug_state(path, args, cfg, x, y, logits, loss, grads, losses, bf16):
    """Write a version 3 debug state (header, x, y, logits, loss, gradients, step losses)."""
    f32 = lambda t: t.detach().cpu().to(torch.float32).numpy().astype("<f4").ravel()
    head = np.zeros(256, dtype="<i4")
    head[:7] = [STATE_MAGIC, 3, args.B, args.T, cfg["V"], cfg["Vp"], len(losses)]
    opt = [args.lr, args.beta1, args.beta2, args.eps, args.weight_decay, args.grad_clip]
    head[7:13] = np.array(opt, dtype="<f4").view("<i4")
    head[13] = int(bf16)
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


def layernorm(x, w, b, eps=1e-5):
    """LayerNorm over the last axis with biased variance."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def gelu_tanh(u):
    """GELU, tanh approximation."""
    return 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))


def attention(qkv, NH):
    """Causal multi-head self-attention of (B, T, 3C) q|k|v projections; returns (B, T, C)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (t.reshape(B, T, NH, C // NH).transpose(1, 2) for t in qkv.split(C, dim=-1))
    att = q @ k.transpose(-2, -1) / math.sqrt(C // NH)
    future = torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu(1)
    att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
    return (att @ v).transpose(1, 2).reshape(B, T, C)


def forward(params, idx, NH):
    """Logits (B, T, Vp) of the token ids idx (B, T) under the 16 parameter tensors."""
    wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, fcw, fcb, fpw, fpb, lnfw, lnfb = params
    x = wte[idx] + wpe[:idx.shape[1]]
    for l in range(ln1w.shape[0]):
        h = layernorm(x, ln1w[l], ln1b[l])
        x = x + attention(h @ qkvw[l].T + qkvb[l], NH) @ apw[l].T + apb[l]
        h = layernorm(x, ln2w[l], ln2b[l])
        x = x + gelu_tanh(h @ fcw[l].T + fcb[l]) @ fpw[l].T + fpb[l]
    return layernorm(x, lnfw, lnfb) @ wte.T


def loss_fn(logits, targets, V):
    """Mean cross-entropy over the unpadded vocabulary."""
    return torch.nn.functional.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def reference(weights, x, y, cfg, args):
    """Logits, loss, gradients and grad norm at weights, then the losses of args.steps AdamW steps."""
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    leaves = lambda: [w.to(device, dtype).clone().requires_grad_(True) for w in weights]
    p = leaves()
    logits = forward(p, x, cfg["NH"])
    loss = loss_fn(logits, y, cfg["V"])
    loss.backward()
    grads = [q.grad.detach() for q in p]
    norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()

    p = leaves()
    groups = [{"params": [q for n, q in zip(NAMES, p) if n in DECAY], "weight_decay": args.weight_decay},
              {"params": [q for n, q in zip(NAMES, p) if n not in DECAY], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, foreach=False)
    losses = []
    for _ in range(args.steps):
        opt.zero_grad()
        step_loss = loss_fn(forward(p, x, cfg["NH"]), y, cfg["V"])
        losses.append(step_loss.item())
        step_loss.backward()
        torch.nn.utils.clip_grad_norm_(p, args.grad_clip)
        opt.step()
    return logits.detach(), loss.detach(), grads, norm, losses


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
          f"B={args.B} T={args.T} init={source} device={args.device} dtype={args.dtype}")
    print(f"parameters: {num_params(cfg)}")
    for tag, w, bf16 in [("fp32", weights, False), ("bf16", weights_bf16, True)]:
        logits, loss, grads, norm, losses = reference(w, x, y, cfg, args)
        name = "gpt2_ref_debug_state_bf16.bin" if bf16 else "gpt2_ref_debug_state.bin"
        write_debug_state(out(name), args, cfg, x, y, logits, loss, grads, losses, bf16)
        print(f"{tag}: loss {loss.item():.6f} grad norm {norm:.6f}")
        print(f"{tag}: {len(losses)} step losses: " + " ".join(f"{v:.6f}" for v in losses))
    for name in ("gpt2_ref.bin", "gpt2_ref_bf16.bin", "gpt2_ref_debug_state.bin", "gpt2_ref_debug_state_bf16.bin"):
        print(f"wrote {out(name)} ({os.path.getsize(out(name))} bytes)")
    print(f"done in {time.time() - t0:.2f} s")


if __name__ == "__main__":
    try:
        main()
    except FormatError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
