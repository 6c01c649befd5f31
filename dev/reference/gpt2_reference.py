#!/usr/bin/env python3
"""Functional PyTorch GPT-2 reference: writes the initial checkpoint (fp32 and bf16) and the debug
states (version 3) that the C and CUDA tests compare against. Formats: doc/FORMATS.md.

--sf16 q115 / q115_tf simulates the SF16 mode (llmc/kernels/boundary.cuh, llmc/numerics/q115.h): a Q1.15
quantize-dequantize at every forward storage boundary, straight-through in backward.

--tcast-states adds the TensorCast state gpt2_ref_debug_state_tcast.bin (header word 14 = 3), computed
from the bf16-rounded weights under the one fixed cast plan TCAST_PLAN (below; test_gpt2.cu's TCAST=1
build runs the same plan), and the states of the plans TCAST_CASES (attention sites; every site) on the
head-size-64 form of the model (gpt2_ref_bf16_hs64.bin, with its uncast gpt2_ref_debug_state_bf16_hs64.bin),
with the casts of doc/TCAST.md section 5 done by dev/reference/tcast_ref.py:
  * site casts (5.1) at the Boundaries hooks: encoder_out, layernorm_out (ln1, ln2, lnf), matmul_out
    (qkv, attproj, fc, fcproj and the LM head output), gelu_out, residual_out, logits, each along the
    channel dimension; attn_scores / attn_probs along the keys of each query row, future keys entering
    the groups as 0 and masked afterwards, P cast after normalization. Straight-through backward,
    except that with attn_probs cast the softmax backward is the trainer's dS = P^ (dP - rowsum(P^ dP))
    (llmc/kernels/attention/attention.cuh), i.e. the softmax derivative taken at P^;
  * operand casts (5.2) of every linear layer (TcastLinear): y = cast_x(x) cast_w(W)^T + b along Cin,
    dx = cast_dy(dy) cast_w(W) along OC, dW = cast_dy(dy)^T cast_x(x) along N, db = sum of the uncast dy;
    the LM head only with the plan's lm_head flag.
What it emulates of the GPU (doc/TCAST.md 5: "the cast acts on the stored BF16 values"): every cast
input is rounded to BF16 first (float64 -> float32 -> bf16, nearest even) and every cast output is
rounded to BF16 (the trainer stores it), except at the attention sites, whose casts act on the fp32
values in the kernels' registers (input rounded to float32 only; the cast scores stay unrounded, P^ is
rounded to BF16 as it enters the P.V product). Everything else is float64, as in the bf16 state: tensors
that are no cast's input (e.g. the attention output without an x cast, P in the uncast P.V product, the
stored activation gradients, the parameter gradients) are not rounded to BF16, and GEMM accumulation,
LayerNorm, GELU and softmax are exact float64 where the GPU uses fp32 (and fast-math intrinsics). A
fuller BF16 simulation (P, the stored gradients, every site) was tried and brought the reference no
closer to a CPU proxy of the GPU: BF16 rounding amplifies fp32-level differences to its own step like a
cast does (see TCAST_PLAN), so the unrounded value is the better reference. Stochastic rounding is
refused: the reference does not reproduce the trainer's per-call seeds (5.3). Cast statistics
(--cast-stats) are not produced. The fixed plan casts only the encoder output and the weights: why, at
TCAST_PLAN.

--lowp-states adds the FP8 and TCFP-12 states gpt2_ref_debug_state_fp8.bin and _tcfp12.bin (header word
14 = 0, word 15 = 1 FP8 / 2 TCFP-12), computed from the bf16-rounded weights with the linear layers of
the FP8 / TCFP-12 builds under test_gpt2.cu's options (per-tensor current scaling, FP8 wgrad, LM head in
BF16), done by dev/reference/lowp_ref.py (LowpBoundaries): every transformer-block linear layer quantizes
X and W to E4M3 (TCFP-12: W = W_hi + W_lo) and dY to E5M2 with power-of-two per-tensor scales, and the
state emulates the trainer's BF16 storage, because the quantizers read it: every stored activation and
every stored activation gradient is rounded to BF16 (lowp_ref.Bf16Store), the linear layers' outputs are
the BF16 roundings of the fp32 products (TCFP-12: two roundings, W_lo's product first), the forward reads
the parameters as BF16 values and the TCFP-12 split the fp32 master weights (both equal to the bf16
checkpoint at step 0), and the attention is the generic kernels' (lowp_ref.KernelAttention: BF16
probabilities in P.V, the stored output in the backward's rowsum). Everything else is float64: GEMM
accumulation, LayerNorm, the rest of the attention, GELU, the loss; the parameter gradients are not
rounded."""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tcast_ref  # noqa: E402  (dev/reference/tcast_ref.py: the independent numpy TensorCast casts)
import lowp_ref  # noqa: E402  (dev/reference/lowp_ref.py: the FP8 / TCFP-12 linear layers and BF16 storage)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARD_MAGIC, CKPT_MAGIC, STATE_MAGIC = 20240520, 20240326, 20240327
HEADER_BYTES = 1024
NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAY = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # the only tensors with weight decay
SF16_MODES = {"none": 0, "q115": 1, "q115_tf": 2}  # --sf16 value -> debug-state header word 14
STATE_MODES = {**SF16_MODES, "tcast": 3}  # header word 14 of every state: the SF16 modes and 3 = TensorCast
LOWP_MODES = {"fp8": 1, "tcfp12": 2}  # header word 15: the low-precision GEMM recipe (word 14 = 0 in these states)
LINEAR_WEIGHTS = ("qkvw", "attprojw", "fcw", "fcprojw")  # the weights of the layers the FP8 / TCFP-12 backends take

# The fixed TensorCast plan of the `_tcast` state (--cast, --cast-gemm, --cast-lm-head of the trainer).
# MUST MATCH TCAST_TEST_CAST / TCAST_TEST_CAST_GEMM / TCAST_TEST_LM_HEAD in llmc/modes/tcast/test.cuh (a test in
# dev/test/test_reference.py compares them). MXFP8 E4M3 (32-element tiles, E8M0 scales, round to nearest
# even: deterministic) at the encoder output and on the weight operand of every linear layer (forward
# along Cin, dgrad along OC). Why only these: a cast turns any difference at its input into a whole step
# of its format wherever the difference straddles a rounding midpoint (a relative difference d before an
# E4M3 cast of step q becomes about sqrt(d q) after it), and casts in series compound that, so a cast
# whose input the GPU computes differently from float64 (fp32 GEMMs, fast-math, BF16 storage) soon makes
# the GPU as far from the cast reference as the casts move the result. Measured on the CPU with a proxy of
# the GPU (float32, BF16 storage of every stored activation and gradient, 1e-6 / 2e-3 relative noise;
# it reproduces the BF16 build's measured errors: logits 5.5e-3, gradients 5.1e-3), as (proxy vs this
# reference) / (proxy vs the uncast bf16 reference), logits and all gradients:
#   every site but the attention ones + x, w, dy       9.2e-2 / 1.06e-1 (1.2x), 5.5e-2 / 7.7e-2 (1.4x)
#   matmul_out + encoder_out + w                       5.3e-2 / 7.1e-2  (1.3x), 1.9e-2 / 5.2e-2 (2.7x)
#   gelu_out + encoder_out + w                         2.2e-2 / 5.7e-2  (2.5x), 1.3e-2 / 4.9e-2 (3.7x)
#   w + dy                                             5.5e-3 / 4.0e-2  (7x),   3.5e-2 / 5.9e-2 (1.7x)
#   encoder_out + w (this plan)                        1.0e-2 / 5.0e-2  (5x),   7.1e-3 / 4.6e-2 (6.5x)
#     the same without noise at the encoder            5.2e-3 / 5.0e-2  (9.6x), 5.0e-3 / 4.6e-2 (9.3x)
# The weight casts see the same BF16 weights on both sides and the encoder cast the same wte + wpe sums
# (exact in fp32, hence the second line): the only casts whose input is reproducible, so a test at
# BF16-level tolerance still tells a cast from none. The other sites
# and the x / dy operands are tested exactly on the GPU instead (test_gpt2cu, ModeTest::check_grid in llmc/modes/tcast/test.cuh: every
# stored site tensor of a forward under a full plan is a fixed point of its cast). Also left out: the
# attention sites (the attention kernels cast only in their tensor-core versions, head sizes 64 and 128;
# this model has 32) and the LM head operands (lm_head 0, the trainer's default).
TCAST_PLAN = {"cast": "encoder_out=mxfp8e4", "cast_gemm": "w=mxfp8e4", "lm_head": 0}
# The further TensorCast states (issue 26 item 3): name -> plan, each written as gpt2_ref_debug_state_tcast_<name>.bin
# from the bf16 weights of the head-size-64 form of the test model (TCAST_CASE_HS: the same weights with NH =
# C / 64, checkpoint gpt2_ref_bf16_hs64.bin, uncast state gpt2_ref_debug_state_bf16_hs64.bin), because the
# attention kernels cast their sites only at head sizes 64 and 128. "attn": both attention sites; "all": every
# boundary site. These plans cast tensors the GPU computes differently from float64, so their states are
# further from the GPU than the fixed plan's (TCAST_PLAN's table above): test_gpt2cu holds them to tolerances
# and cast-activity ratios of their own (TCAST_CASES in llmc/modes/tcast/test.cuh; MUST MATCH these texts).
TCAST_CASES = {"attn": {"cast": "attn_scores=mxfp8e4,attn_probs=mxfp8e4", "cast_gemm": "", "lm_head": 0},
               "all": {"cast": "all=mxfp8e4", "cast_gemm": "", "lm_head": 0}}
TCAST_CASE_HS = 64
# boundary sites and GEMM operands, as llmc/core/boundary_sites.h and llmc/modes/tcast/tcast_config.h name them
TCAST_SITES = ("matmul_out", "attn_scores", "attn_probs", "logits", "layernorm_out", "residual_out", "gelu_out",
               "encoder_out")
TCAST_OPS = ("x", "w", "dy")
TCAST_ATTN_TILE_MAX = 64  # the attention kernels' key tile (tcast_config.h)


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
    bf16-weights flag, word 14 the mode (STATE_MODES: an SF16 mode, or 3 for "tcast"; 0 for the
    LOWP_MODES), word 15 the low-precision GEMM recipe (LOWP_MODES: 1 "fp8", 2 "tcfp12"; else 0)."""
    f32 = lambda t: t.detach().cpu().to(torch.float32).numpy().astype("<f4").ravel()
    head = np.zeros(256, dtype="<i4")
    head[:7] = [STATE_MAGIC, 3, args.B, args.T, cfg["V"], cfg["Vp"], len(losses)]
    opt = [args.lr, args.beta1, args.beta2, args.eps, args.weight_decay, args.grad_clip]
    head[7:13] = np.array(opt, dtype="<f4").view("<i4")
    head[13] = int(bf16)
    tcast_case = sf16.startswith("tcast_") and sf16[len("tcast_"):] in TCAST_CASES
    if sf16 not in STATE_MODES and sf16 not in LOWP_MODES and not tcast_case:
        raise ValueError(f"unknown state mode {sf16!r}")
    head[14] = STATE_MODES["tcast"] if tcast_case else STATE_MODES.get(sf16, 0)
    head[15] = LOWP_MODES.get(sf16, 0)
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

    def probs(self, scores):
        """The attention probabilities of the masked scores (B, NH, T, T), as stored at "attn_probs"."""
        return self(scores.softmax(dim=-1), "attn_probs")

    def linear(self, x, w, b):
        """A linear layer x @ w.T + b (TcastBoundaries casts its operands)."""
        return x @ w.T + b

    def lm_head(self, h, wte):
        """The LM head h @ wte.T (LMHead)."""
        return LMHead.apply(h, wte)

    def attention(self, qkv, NH):
        """Causal self-attention of qkv (B, T, 3C) (attention(), with these boundaries)."""
        return attention(qkv, NH, self)

    def weights(self, params):
        """The 16 parameter tensors as the forward reads them (the list itself: the float64 weights)."""
        return params


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


# ---------------------------------------------------------------- TensorCast casts (doc/TCAST.md 5)

class TcastPlan:
    """A cast plan from the trainer's flag texts (llmc/modes/tcast/tcast_config.h): cast = "SITE=DTYPE[,...]" (SITE a
    boundary site in any case or `all`; later entries win), cast_gemm = "OP=DTYPE[,...]" (OP x, w, dy),
    lm_head 0|1. site / op: dicts name -> DTYPE text. ValueError naming the flag for what the trainer
    refuses (unknown names, a scale spec with an explicit dY, per-tensor / channel scales or tiles above
    TCAST_ATTN_TILE_MAX at the attention sites, lm_head without operand casts) and for stochastic
    rounding, whose per-call seeds (doc/TCAST.md 5.3) the reference does not reproduce."""

    def __init__(self, cast="", cast_gemm="", lm_head=0):
        self.site, self.op = {}, {}
        for key, text in self._entries("--cast", cast):
            k = key.lower()
            if k != "all" and k not in TCAST_SITES:
                raise ValueError(f"--cast: unknown site '{key}' (sites: {', '.join(TCAST_SITES)}, all)")
            for site in TCAST_SITES if k == "all" else (k,):
                self.site[site] = self._dtype("--cast", key, text, site in ("attn_scores", "attn_probs"))
        for key, text in self._entries("--cast-gemm", cast_gemm):
            if key.lower() not in TCAST_OPS:
                raise ValueError(f"--cast-gemm: unknown operand '{key}' (operands: x, w, dy)")
            self.op[key.lower()] = self._dtype("--cast-gemm", key, text, False)
        if lm_head not in (0, 1):
            raise ValueError(f"--cast-lm-head: expected 0 or 1, got {lm_head}")
        if lm_head and not self.op:
            raise ValueError("--cast-lm-head 1: needs --cast-gemm (the LM head takes its operand casts)")
        self.lm_head = lm_head

    @staticmethod
    def _entries(flag, text):
        """(key, value) pairs of "k=v,k=v" (empty text: none)."""
        if not text:
            return []
        out = []
        for entry in text.split(","):
            key, eq, value = entry.partition("=")
            if not key or not eq or not value:
                raise ValueError(f"{flag}: '{entry}' is not KEY=DTYPE")
            out.append((key, value))
        return out

    @staticmethod
    def _dtype(flag, key, text, attention):
        """Check one DTYPE text as the trainer does; return it."""
        try:
            dt = tcast_ref.parse_dtype(text)
        except ValueError as e:
            raise ValueError(f"{flag} {key}={text}: {e}") from None
        if dt.scale is not None and dt.scale.dim_explicit:
            raise ValueError(f"{flag} {key}={text}: the trainer chooses the tile dimension; drop the dY of the scale spec")
        if dt.round == "stochastic":
            raise ValueError(f"{flag} {key}={text}: stochastic rounding is not reproducible here "
                             "(the reference does not derive the trainer's per-call seeds)")
        if attention and dt.scale is not None and not 0 < dt.scale.tile <= TCAST_ATTN_TILE_MAX:
            raise ValueError(f"{flag} {key}={text}: the attention sites take unscaled, fixed-scale (pN) or tile-scaled datatypes "
                             f"(tiles of up to {TCAST_ATTN_TILE_MAX} keys)")
        if attention and dt.sparse is not None and dt.sparse[1] > TCAST_ATTN_TILE_MAX:
            raise ValueError(f"{flag} {key}={text}: sparsity group larger than {TCAST_ATTN_TILE_MAX} keys")
        return text


def round_bf16(a):
    """float32 ndarray -> float32 ndarray of the nearest bf16 values (ties to even), same shape."""
    return bf16_to_f32(bf16_bits(a)).reshape(a.shape)


TCAST_CHUNK = 1 << 17  # elements per vcast call of a row-wise cast (a big cast in one call runs 4x slower)


def tcast(t, dtype, dim=-1, bf16_in=True, bf16_out=True):
    """The virtual cast tcast_ref.vcast of t (a torch tensor) to the DTYPE text dtype, as a new tensor of
    t's dtype and shape. dim=-1: along the last axis (t viewed as rows of its last axis); dim=0: along
    the columns of a 2-D t. The values are rounded to float32 first, then (bf16_in) to BF16: the stored
    tensor the trainer casts; the result is rounded to BF16 (bf16_out) as the trainer stores it. Casts
    along rows are cut into blocks of whole rows (exact: every group lies in one row, unless the scale
    is per tensor, which runs in one call)."""
    shape = t.shape
    a = t.detach().to(torch.float32).cpu().numpy()
    if dim == -1:
        a = a.reshape(-1, shape[-1])
    elif dim != 0 or a.ndim != 2:
        raise ValueError(f"tcast: dim {dim} of a {tuple(shape)} tensor (expected -1, or 0 of a 2-D tensor)")
    if bf16_in:
        a = round_bf16(a)
    dt = tcast_ref.parse_dtype(dtype)
    rows, cols = a.shape
    step = max(1, TCAST_CHUNK // max(cols, 1))
    separable = (dt.scale is None or dt.scale.tile >= 0) and dt.round != "stochastic"
    if dim == -1 and separable and rows > step:
        out = np.concatenate([tcast_ref.vcast(a[i:i + step], dt, -1)[0] for i in range(0, rows, step)])
    else:
        out = tcast_ref.vcast(a, dt, dim)[0]
    if bf16_out:
        out = round_bf16(out)
    return torch.from_numpy(out).to(t.device, t.dtype).view(shape)


def tcast_keys(t, dtype, bf16_out):
    """A cast of attention rows t (..., T, T) (query i, key j) along the keys, as the attention kernels
    do it: keys j > i enter their groups as 0 (no information from the future moves a scale), and so do
    the positions past T up to a whole number of groups; the input is the fp32 value (no BF16 rounding);
    entries j > i of the result are 0 (the caller masks them)."""
    T = t.shape[-1]
    future = torch.ones(T, T, dtype=torch.bool, device=t.device).triu(1)
    z = t.masked_fill(future, 0.0)
    dt = tcast_ref.parse_dtype(dtype)
    group = math.lcm(dt.scale.tile if dt.scale is not None and dt.scale.tile > 0 else 1,
                     dt.sparse[1] if dt.sparse is not None else 1)
    pad = -T % group
    if pad:
        z = torch.nn.functional.pad(z, (0, pad))
    out = tcast(z, dtype, -1, bf16_in=False, bf16_out=bf16_out)
    return out[..., :T] if pad else out


class AttnProbsCast(torch.autograd.Function):
    """P^ = cast(softmax(s)) of masked scores s along the keys, with the attention kernels' backward
    dS = P^ (dP - rowsum(P^ dP)) (llmc/kernels/attention/attention.cuh: the flash-style softmax derivative taken at the
    cast P^, which equals straight-through only for an uncast P)."""

    @staticmethod
    def forward(ctx, scores, dtype):
        p = tcast_keys(scores.softmax(dim=-1), dtype, bf16_out=True)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad):
        p, = ctx.saved_tensors
        return p * (grad - (p * grad).sum(-1, keepdim=True)), None


class TcastLinear(torch.autograd.Function):
    """A linear layer y = x W^T + b (x (..., Cin), W (OC, Cin), b (OC) or None) with the operand casts of
    doc/TCAST.md 5.2; cx, cw, cdy: DTYPE texts or None (that operand uncast, float64 as it is).
      forward  y  = cast_x(x along Cin) . cast_w(W along Cin)^T + b
      dgrad    dx = cast_dy(dy along OC) . cast_w(W along OC, i.e. dim 0 of W)
      wgrad    dW = cast_dy(dy along N)^T . cast_x(x along N)        (N = rows of x)
      bias     db = sum over N of the uncast dy
    Every cast input is the BF16-rounded value (the trainer's stored x, W and dy), every cast operand is
    BF16 (it feeds a BF16 GEMM); the products are float64."""

    @staticmethod
    def forward(ctx, x, w, b, cx, cw, cdy):
        ctx.save_for_backward(x, w)
        ctx.casts = (cx, cw, cdy)
        x2 = x.reshape(-1, x.shape[-1])
        y = (tcast(x2, cx) if cx else x2) @ (tcast(w, cw) if cw else w).T
        if b is not None:
            y = y + b
        return y.view(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        cx, cw, cdy = ctx.casts
        g2 = grad.reshape(-1, w.shape[0])
        x2 = x.reshape(-1, x.shape[-1])
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = ((tcast(g2, cdy) if cdy else g2) @ (tcast(w, cw, 0) if cw else w)).view(x.shape)
        if ctx.needs_input_grad[1]:
            dw = (tcast(g2, cdy, 0) if cdy else g2).T @ (tcast(x2, cx, 0) if cx else x2)
        if ctx.needs_input_grad[2]:
            db = g2.sum(0)
        return dx, dw, db, None, None, None


class TcastBoundaries(Boundaries):
    """The casts of a TcastPlan at the forward's hooks (mode "tcast"). Reference site names -> the
    trainer's sites: encoder -> encoder_out; ln1, ln2, lnf -> layernorm_out; qkv, attproj, fc, fcproj ->
    matmul_out; logits (the LM head output) -> matmul_out, then logits; gelu -> gelu_out; residual1,
    residual2 -> residual_out; attn_scores, attn_probs -> themselves; classifier -> none (the classifier
    reads the stored, already cast, logits). A site the plan does not cast is left as it is (float64).
    Straight-through backward; probs and linear as documented at AttnProbsCast and TcastLinear. With
    record (a list) every hook appends (site, value)."""

    SITES = {"encoder": ("encoder_out",), "ln1": ("layernorm_out",), "ln2": ("layernorm_out",),
             "lnf": ("layernorm_out",), "qkv": ("matmul_out",), "attproj": ("matmul_out",), "fc": ("matmul_out",),
             "fcproj": ("matmul_out",), "logits": ("matmul_out", "logits"), "gelu": ("gelu_out",),
             "residual1": ("residual_out",), "residual2": ("residual_out",), "attn_scores": ("attn_scores",),
             "attn_probs": ("attn_probs",), "classifier": ()}

    def __init__(self, plan, record=None):
        self.mode, self.record, self.plan = "tcast", record, plan

    def __call__(self, t, site, matmul=False):
        casts = [self.plan.site[s] for s in self.SITES[site] if s in self.plan.site]
        if casts and site == "attn_scores":  # fp32 registers: no BF16 on either side
            t = StraightThrough.apply(t, lambda v: tcast_keys(v, casts[0], bf16_out=False))
        elif casts and site == "attn_probs":
            raise ValueError("attn_probs is cast by probs() (the softmax and the cast have one backward)")
        elif casts:
            def fn(v):
                for dtype in casts:
                    v = tcast(v, dtype)
                return v
            t = StraightThrough.apply(t, fn)
        if self.record is not None:
            self.record.append((site, t.detach()))
        return t

    def probs(self, scores):
        if "attn_probs" not in self.plan.site:
            return super().probs(scores)
        p = AttnProbsCast.apply(scores, self.plan.site["attn_probs"])
        if self.record is not None:
            self.record.append(("attn_probs", p.detach()))
        return p

    def linear(self, x, w, b):
        if not self.plan.op:
            return super().linear(x, w, b)
        return TcastLinear.apply(x, w, b, *(self.plan.op.get(o) for o in TCAST_OPS))

    def lm_head(self, h, wte):
        if not (self.plan.lm_head and self.plan.op):
            return super().lm_head(h, wte)
        return TcastLinear.apply(h, wte, None, *(self.plan.op.get(o) for o in TCAST_OPS))


class LowpBoundaries(Boundaries):
    """The FP8 / TCFP-12 builds with test_gpt2.cu's options (recipe "fp8" / "tcfp12", LOWP_MODES; "bf16":
    the same BF16 storage with BF16 GEMMs, for proxies of the BF16 build).
      linear     lowp_ref.LowpLinear of the recipe (the transformer blocks' layers);
      lm_head    a BF16 GEMM, as in the trainer's default (Boundaries.lm_head);
      attention  lowp_ref.KernelAttention (the trainer's generic kernels), output stored at "attn_out";
      __call__   lowp_ref.Bf16Store (value rounded in forward, gradient in backward) at every site of
                 forward() but the classifier, which reads the stored logits;
      weights    the parameters as the forward reads them: BF16 values (straight-through), except the four
                 linear weights, which LowpLinear reads raw (FP8 rounds them to BF16, TCFP-12 to the fp32
                 master copy it splits).
    With record (a list) every hook appends (site, value)."""

    UNSTORED = ("classifier",)

    def __init__(self, recipe, record=None):
        if recipe not in lowp_ref.RECIPES:
            raise ValueError(f"unknown low-precision recipe {recipe!r}, expected one of {list(lowp_ref.RECIPES)}")
        self.mode, self.recipe, self.record = recipe, recipe, record

    def __call__(self, t, site, matmul=False):
        if site not in self.UNSTORED:
            t = lowp_ref.Bf16Store.apply(t)
        if self.record is not None:
            self.record.append((site, t.detach()))
        return t

    def attention(self, qkv, NH):
        return self(lowp_ref.KernelAttention.apply(qkv, NH), "attn_out")

    def linear(self, x, w, b):
        return lowp_ref.LowpLinear.apply(x, w, b, self.recipe)

    def weights(self, params):
        return [p if n in LINEAR_WEIGHTS else StraightThrough.apply(p, lowp_ref.round_bf16) for n, p in zip(NAMES, params)]


def make_boundaries(mode, record=None):
    """The hooks of a state mode (STATE_MODES, LOWP_MODES or "tcast_<case>"): Boundaries of an SF16 mode,
    TcastBoundaries of TCAST_PLAN ("tcast") or of TCAST_CASES[case], or LowpBoundaries of a low-precision recipe."""
    if mode in LOWP_MODES:
        return LowpBoundaries(mode, record)
    if mode == "tcast" or mode.startswith("tcast_"):
        return TcastBoundaries(TcastPlan(**(TCAST_PLAN if mode == "tcast" else TCAST_CASES[mode[len("tcast_"):]])), record)
    return Boundaries(mode, record)


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
    Boundaries: the scaled scores (before the causal mask) and the normalized probabilities (bnd.probs)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (t.reshape(B, T, NH, C // NH).transpose(1, 2) for t in qkv.split(C, dim=-1))
    att = bnd(q @ k.transpose(-2, -1) / math.sqrt(C // NH), "attn_scores")
    future = torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu(1)
    att = bnd.probs(att.masked_fill(future, float("-inf")))
    return (att @ v).transpose(1, 2).reshape(B, T, C)


def forward(params, idx, NH, bnd=NO_BOUNDARIES):
    """Logits (B, T, Vp) of the token ids idx (B, T) under the 16 parameter tensors, with the storage
    boundaries bnd (Boundaries or TcastBoundaries; default none): encoder sum, LayerNorm outputs,
    linear-layer outputs after the bias (matmul=True), attention scores and probabilities, GELU output,
    residual sums; the linear layers and the LM head run through bnd.linear and bnd.lm_head."""
    wte, wpe, ln1w, ln1b, qkvw, qkvb, apw, apb, ln2w, ln2b, fcw, fcb, fpw, fpb, lnfw, lnfb = params
    x = bnd(wte[idx] + wpe[:idx.shape[1]], "encoder")
    for l in range(ln1w.shape[0]):
        h = bnd(layernorm(x, ln1w[l], ln1b[l]), "ln1")
        a = bnd.attention(bnd(bnd.linear(h, qkvw[l], qkvb[l]), "qkv", matmul=True), NH)
        x = bnd(x + bnd(bnd.linear(a, apw[l], apb[l]), "attproj", matmul=True), "residual1")
        h = bnd(layernorm(x, ln2w[l], ln2b[l]), "ln2")
        u = bnd(gelu_tanh(bnd(bnd.linear(h, fcw[l], fcb[l]), "fc", matmul=True)), "gelu")
        x = bnd(x + bnd(bnd.linear(u, fpw[l], fpb[l]), "fcproj", matmul=True), "residual2")
    return bnd(bnd.lm_head(bnd(layernorm(x, lnfw, lnfb), "lnf"), wte), "logits", matmul=True)


def loss_fn(logits, targets, V, bnd=NO_BOUNDARIES):
    """Mean cross-entropy over the unpadded vocabulary; the classifier reads the logits through bnd
    (idempotent after the logits boundary of forward, kept explicit like the GPU classifier)."""
    logits = bnd(logits[..., :V], "classifier")
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))


def reference(weights, x, y, cfg, args, sf16="none"):
    """Logits, loss, gradients and grad norm at weights, then the losses of args.steps AdamW steps,
    under the mode sf16 (STATE_MODES: an SF16 mode, or "tcast" for TCAST_PLAN, "tcast_<case>" for TCAST_CASES; LOWP_MODES: "fp8",
    "tcfp12"). Step 0 starts from the same weights, so its forward and backward are the initial ones
    (computed once; the gradients are copied before clipping). The forward reads bnd.weights(p) of the
    float64 parameters p the optimizer updates."""
    dtype, device = getattr(torch, args.dtype), torch.device(args.device)
    bnd = make_boundaries(sf16)
    p = [w.to(device, dtype).clone().requires_grad_(True) for w in weights]
    groups = [{"params": [q for n, q in zip(NAMES, p) if n in DECAY], "weight_decay": args.weight_decay},
              {"params": [q for n, q in zip(NAMES, p) if n not in DECAY], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, foreach=False)
    losses = []
    for step in range(max(args.steps, 1)):
        opt.zero_grad()
        logits = forward(bnd.weights(p), x, cfg["NH"], bnd)
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
    ap.add_argument("--tcast-states", action="store_true",
                    help="also write the TensorCast state gpt2_ref_debug_state_tcast.bin (header word 14 = 3): "
                         "the bf16 weights under the fixed cast plan TCAST_PLAN (= test_gpt2.cu's), and the states "
                         "of TCAST_CASES on the head-size-64 model gpt2_ref_bf16_hs64.bin (_tcast_<case>.bin, _bf16_hs64.bin)")
    ap.add_argument("--lowp-states", action="store_true",
                    help="also write the FP8 and TCFP-12 states gpt2_ref_debug_state_fp8.bin / _tcfp12.bin (header "
                         "word 15 = 1 / 2): the bf16 weights with the linear layers quantized as the FP8 / TCFP-12 "
                         "builds do under test_gpt2.cu's options, BF16 storage emulated (dev/reference/lowp_ref.py)")
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
          f"sf16={'all' if args.sf16_states else args.sf16} tcast={'yes' if args.tcast_states else 'no'} "
          f"lowp={'yes' if args.lowp_states else 'no'}")
    if args.tcast_states:
        print(f"tcast plan: --cast {TCAST_PLAN['cast']} --cast-gemm {TCAST_PLAN['cast_gemm']} "
              f"--cast-lm-head {TCAST_PLAN['lm_head']}")
        for case, plan in TCAST_CASES.items():
            print(f"tcast case {case} (head size {TCAST_CASE_HS}): --cast {plan['cast']} --cast-gemm {plan['cast_gemm']}")
    print(f"parameters: {num_params(cfg)}")
    # (tag, weights, bf16 weights, mode, file); SF16, TCAST and the lowp modes store BF16, so their states
    # start from the bf16 weights
    runs = [("fp32", weights, False, "none", "gpt2_ref_debug_state.bin"),
            ("bf16", weights_bf16, True, "none", "gpt2_ref_debug_state_bf16.bin")]
    runs += [(m, weights_bf16, True, m, f"gpt2_ref_debug_state_{m}.bin") for m in STATE_MODES if m != "none"]
    runs = [r for r in runs if (args.tcast_states if r[3] == "tcast" else args.sf16_states or r[3] == args.sf16)]
    runs += [(m, weights_bf16, True, m, f"gpt2_ref_debug_state_{m}.bin") for m in LOWP_MODES if args.lowp_states]
    runs = [r + (cfg,) for r in runs]
    written = ["gpt2_ref.bin", "gpt2_ref_bf16.bin"]
    if args.tcast_states:  # the TCAST_CASES states, on the head-size-64 form of the model
        if cfg["C"] % TCAST_CASE_HS:
            sys.exit(f"error: --tcast-states needs C divisible by {TCAST_CASE_HS} (the TCAST_CASES states), got C={cfg['C']}")
        cfg_hs = {**cfg, "NH": cfg["C"] // TCAST_CASE_HS}
        write_checkpoint(out("gpt2_ref_bf16_hs64.bin"), cfg_hs, weights, bf16=True)
        written.append("gpt2_ref_bf16_hs64.bin")
        runs.append(("bf16_hs64", weights_bf16, True, "none", "gpt2_ref_debug_state_bf16_hs64.bin", cfg_hs))
        runs += [(f"tcast_{c}", weights_bf16, True, f"tcast_{c}", f"gpt2_ref_debug_state_tcast_{c}.bin", cfg_hs) for c in TCAST_CASES]
    for tag, w, bf16, sf16, name, run_cfg in runs:
        t1 = time.time()
        logits, loss, grads, norm, losses = reference(w, x, y, run_cfg, args, sf16)
        write_debug_state(out(name), args, run_cfg, x, y, logits, loss, grads, losses, bf16, sf16)
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
