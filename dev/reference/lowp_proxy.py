#!/usr/bin/env python3
"""CPU proxy of the BF16, FP8 and TCFP-12 GPU builds on test_gpt2.cu's batch: what errors to expect of
test_gpt2cu against the float64 states of gpt2_reference.py (--lowp-states), to set its tolerances.

The proxy is the reference's own model under LowpBoundaries (dev/reference/lowp_ref.py: the same
quantization, the same BF16 storage), run the way the GPU runs it rather than exactly:
  * float32 arithmetic everywhere (GEMM accumulation, LayerNorm, attention, GELU, softmax, AdamW);
  * relative noise of --noise (default 1e-6: the GPU's other fp32 summation orders and fast-math
    intrinsics) on every value just before it is rounded to BF16, except the sums of two BF16 values
    (encoder, residual adds), which fp32 computes exactly;
  * after each AdamW step the BF16 parameters are the fp32 master weights rounded stochastically, as
    the trainer's store_rounded does (the FP8 build quantizes those, TCFP-12 splits the master copy).
It then prints, like test_gpt2cu, the relative L2 errors of its logits, loss, gradients (all, and the
worst tensor) and step losses against each state, and for the FP8 / TCFP-12 proxies the position of
their logits and gradients on the line from the other recipe's state (0) to their own (1). What it
shows (table in llmc/modes/lowp/test.cuh): how far a GPU that quantizes the same BF16 tensors
but computes them in another order lands from the matching quantized state, and from the other
recipe's and the unquantized one. About 1-2 minutes per proxy run on a CPU.

usage: lowp_proxy.py [--ref-dir build/ref] [--noise 1e-6] [--seeds 3] [--recipes bf16,fp8,tcfp12]
(reads gpt2_ref_bf16.bin and the states gpt2_ref_debug_state_{bf16,fp8,tcfp12}.bin of --ref-dir)."""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_reference as ref  # noqa: E402
import lowp_ref  # noqa: E402

STATES = {"bf16 (unquantized)": "gpt2_ref_debug_state_bf16.bin", "fp8": "gpt2_ref_debug_state_fp8.bin",
          "tcfp12": "gpt2_ref_debug_state_tcfp12.bin"}


def read_state(path, cfg):
    """A version 3 debug state of the model cfg: dict with x, y (B, T), logits (B, T, V), loss, grads
    (flat float64), losses (S), header words 13..15."""
    raw = open(path, "rb").read()
    head = np.frombuffer(raw[:1024], dtype="<i4")
    B, T, V, _, S = (int(w) for w in head[2:7])
    ints, body = np.frombuffer(raw[1024:], dtype="<i4"), np.frombuffer(raw[1024:], dtype="<f4")
    o = 2 * B * T
    return {"x": ints[:B * T].reshape(B, T).astype(np.int64), "y": ints[B * T:o].reshape(B, T).astype(np.int64),
            "logits": body[o:o + B * T * V].reshape(B, T, V).astype(np.float64), "loss": float(body[o + B * T * V]),
            "grads": body[o + B * T * V + 1:len(body) - S].astype(np.float64), "losses": body[len(body) - S:].astype(np.float64),
            "words": head[13:16].tolist(), "opt": np.frombuffer(head[7:13].tobytes(), dtype="<f4").tolist()}


def stochastic_bf16(t, gen):
    """t (float32) rounded to one of its two neighbouring BF16 values, up (away from zero) with
    probability equal to the distance fraction (unbiased), like the trainer's store_rounded."""
    u = t.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    low = u & 0xFFFF0000
    frac = (u & 0xFFFF).to(torch.float64) / 65536.0
    up = torch.rand(t.shape, generator=gen, dtype=torch.float64) < frac
    r = torch.where(up, low + 0x10000, low)
    r = torch.where(r >= 1 << 31, r - (1 << 32), r).to(torch.int32)
    return r.view(torch.float32)


class ExactSumStore(torch.autograd.Function):
    """A stored sum of two BF16 tensors (the encoder's wte + wpe, the residual adds): exact in fp32 on
    the GPU, so its BF16 rounding gets no noise (ties stay ties); the gradient is rounded with noise."""

    @staticmethod
    def forward(ctx, t):
        return lowp_ref._round_bits(t, 16)

    @staticmethod
    def backward(ctx, grad):
        return lowp_ref.round_bf16(grad)


class ProxyBoundaries(ref.LowpBoundaries):
    """LowpBoundaries whose parameters are the stochastically rounded BF16 copies of the fp32 master
    weights (sr: the list of BF16 tensors of the current step, set by run_proxy), straight-through, and
    whose stored sums of two BF16 tensors are rounded without noise (ExactSumStore)."""

    sr = None
    EXACT_SUMS = ("encoder", "residual1", "residual2")

    def __call__(self, t, site, matmul=False):
        if site in self.EXACT_SUMS:
            t = ExactSumStore.apply(t)
            if self.record is not None:
                self.record.append((site, t.detach()))
            return t
        return super().__call__(t, site, matmul)

    def weights(self, params):
        out = []
        for n, p, b in zip(ref.NAMES, params, self.sr):
            if n in ref.LINEAR_WEIGHTS and self.recipe == "tcfp12":
                out.append(p)  # the split reads the fp32 master copy
            else:
                out.append(ref.StraightThrough.apply(p, lambda v, b=b: b))
        return out


def noisy_round(noise, gen):
    """A replacement for lowp_ref.round_bf16 that multiplies by (1 + noise * N(0, 1)) first."""
    exact = lowp_ref._round_bits

    def fn(t):
        if noise:
            t = t * (1 + noise * torch.randn(t.shape, generator=gen, dtype=t.dtype))
        return exact(t, 16)
    return fn


def run_proxy(recipe, weights, x, y, cfg, opt, steps, noise, seed):
    """Logits, loss, flat gradients and step losses of the proxy of `recipe` (float32)."""
    gen = torch.Generator().manual_seed(seed)
    exact_round = lowp_ref.round_bf16
    lowp_ref.round_bf16 = noisy_round(noise, gen)
    try:
        bnd = ProxyBoundaries(recipe)
        p = [w.to(torch.float32).clone().requires_grad_(True) for w in weights]
        lr, b1, b2, eps, wd, clip = opt
        groups = [{"params": [q for n, q in zip(ref.NAMES, p) if n in ref.DECAY], "weight_decay": wd},
                  {"params": [q for n, q in zip(ref.NAMES, p) if n not in ref.DECAY], "weight_decay": 0.0}]
        adam = torch.optim.AdamW(groups, lr=lr, betas=(b1, b2), eps=eps, foreach=False)
        losses = []
        for step in range(max(steps, 1)):
            bnd.sr = [q.detach() if step == 0 else stochastic_bf16(q.detach(), gen) for q in p]  # step 0: bf16 exactly
            adam.zero_grad()
            logits = ref.forward(bnd.weights(p), x, cfg["NH"], bnd)
            loss = ref.loss_fn(logits, y, cfg["V"], bnd)
            loss.backward()
            if step == 0:
                out = (logits.detach()[..., :cfg["V"]].double().numpy(), loss.item(),
                       np.concatenate([q.grad.detach().double().numpy().ravel() for q in p]))
            losses.append(loss.item())
            torch.nn.utils.clip_grad_norm_(p, clip)
            adam.step()
        return out + (np.array(losses[:steps]),)
    finally:
        lowp_ref.round_bf16 = exact_round


def rel(a, b):
    """||a - b|| / ||b||."""
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def position(a, x, o):
    """Where a lies along the line from x (0) to o (1): <a - x, o - x> / ||o - x||^2."""
    d = (o - x).ravel()
    return float(np.dot((a - x).ravel(), d) / np.dot(d, d))


def main(argv=None):
    """Run the proxies and print their errors against every state."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref-dir", default=os.path.join(ref.REPO, "build", "ref"))
    ap.add_argument("--noise", type=float, default=1e-6)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--recipes", default="bf16,fp8,tcfp12")
    args = ap.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    cfg, weights = ref.read_checkpoint(os.path.join(args.ref_dir, "gpt2_ref_bf16.bin"))
    states = {k: read_state(os.path.join(args.ref_dir, f), cfg) for k, f in STATES.items()}
    st0 = states["fp8"]
    assert st0["words"] == [1, 0, 1] and states["tcfp12"]["words"] == [1, 0, 2], "not the --lowp-states states"
    x, y = torch.from_numpy(st0["x"]), torch.from_numpy(st0["y"])
    sizes = [w.numel() for w in weights]
    print(f"proxy: float32, noise {args.noise:g}, {args.seeds} seeds; states of {args.ref_dir}")
    for recipe in args.recipes.split(","):
        for seed in range(args.seeds):
            logits, loss, grads, losses = run_proxy(recipe, weights, x, y, cfg, st0["opt"], len(st0["losses"]), args.noise,
                                                    1000 + seed)
            if recipe in ("fp8", "tcfp12"):
                own, other = states[recipe], states["tcfp12" if recipe == "fp8" else "fp8"]
                print(f"{recipe:6s} seed {seed} position from the other recipe's state to its own: logits "
                      f"{position(logits, other['logits'], own['logits']):.3f}  grads "
                      f"{position(grads, other['grads'], own['grads']):.3f}")
            for name, st in states.items():
                per = [rel(g, r) for g, r in zip(np.split(grads, np.cumsum(sizes)[:-1]),
                                                   np.split(st["grads"], np.cumsum(sizes)[:-1]))]
                worst = int(np.argmax(per))
                print(f"{recipe:6s} seed {seed} vs {name:18s} logits {rel(logits, st['logits']):.2e}  "
                      f"loss {abs(loss - st['loss']) / st['loss']:.1e}  grads {rel(grads, st['grads']):.2e}  "
                      f"worst d{ref.NAMES[worst]} {per[worst]:.2e}  steps {np.max(np.abs(losses - st['losses']) / st['losses']):.1e}")


if __name__ == "__main__":
    main()
