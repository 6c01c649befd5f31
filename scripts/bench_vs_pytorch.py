#!/usr/bin/env python3
"""Benchmark train_gpt2cu against GPT-2 of the same shape trained in PyTorch, on the same GPU in one call.

    python3 scripts/bench_vs_pytorch.py [--models d12,d24] [--steps 50] [--val-steps 300]
        [--trainer build/bf16/train_gpt2cu] [--torch-float8 none|tensorwise|rowwise] [--no-compile]
        [--torch-speed-model nanogpt|exact]
        [--batch d12=64,d24=32] [--T 1024] [--train PATTERN --val PATTERN] [--out DIR] ...

Two parts per model (a model is a trainer descriptor: d12, d24, or e.g. d2,c64,h4,t64):
  speed  our trainer for --steps steps (-v 0 -s 0 -n -1), then PyTorch's nanoGPT-style model
         (--torch-speed-model, below) for as many steps: the median step time over the steps after
         --warmup-steps, tok/s = B*T / median, MFU and memory, and the ratio of tok/s ours / PyTorch.
  loss   (--val-steps N > 0) N steps from scratch on each side, then the mean loss over
         --val-batches validation batches: ours once, PyTorch's exact model (below) with two seeds
         (--seed, --seed + 1).
         The two PyTorch losses differ only by the seed; their difference is the measured run-to-run
         noise. Verdict "agree" when |ours - mean(PyTorch)| <= max(noise, --loss-floor), else "DIFFER".
         One pair of seeds is one sample of the noise: were the tolerance the noise alone, a side
         that differs by init noise only would read "DIFFER" 45% of the time (ours - mean has a
         spread of 1.22 sigma, seed 1 - seed 2 of 1.41 sigma). The floor (--loss-floor, default
         0.02: the spread of the 300-step Gutenberg d12 runs across builds in doc/benchmarks.md)
         makes that rare while sigma is well below it; a DIFFER close to the tolerance says "run
         again with other seeds" rather than "the models differ".
All our trainer's runs (every model) come first, then the PyTorch runs, so that the device-wide
memory our trainer reports never includes memory this process holds. Output in --out (default
bench_out/<date>-<time>): table.md (the table printed at the end), results.json (every number,
the settings and versions), and one log per run: ours_<model>_{speed,loss}.log (the trainer's
stdout and stderr), torch_<model>_speed.log and torch_<model>_loss_seed<S>.log (step lines in the
trainer's format). Exit status 0, or 1 after one `error: ...` line (missing shards, missing or
failing trainer, a NaN loss, torchao missing for --torch-float8, ...).

What is the same on both sides
  model    GPT-2 of the descriptor's shape (llmc/model/gpt2_config.h: L, C, NH, maxT; V = 50257 padded to
           Vp = 50304): learned position embeddings, pre-LayerNorm blocks (eps 1e-5), causal
           attention scaled by 1/sqrt(C/NH), tanh GELU, biases on every linear layer, final
           LayerNorm, LM head tied to wte computed over all Vp columns. The loss runs' PyTorch model,
           "exact (loss over V)", also takes the softmax and cross-entropy over the first V columns
           only, as our trainer does (the padded columns get no probability and no gradient); the
           speed runs' model differs there (below).
  init     the distribution of llmc/model/gpt2_init.h: N(0, 0.02) for wte (rows < V; padded rows 0),
           wpe, qkv and fc weights; N(0, 0.02 / sqrt(2L)) for the attention and MLP output
           projections; biases 0; LayerNorm gains 1. NOT the values: our trainer draws from its own
           xorshift stream (llmc/core/rand.h), PyTorch from torch.manual_seed; the two PyTorch seeds
           measure how much that moves the loss.
  data     identical batches in identical order: the shards matching the pattern in sorted order,
           consecutive windows of B*T+1 tokens (inputs = the first B*T, targets = the same shifted
           by one), a shard left when the next window no longer fits, wrapping after the last
           (llmc/data/dataloader.h, one process); validation = the first --val-batches windows of the
           validation shards, capped as the trainer caps -m (val tokens / (B*T+1)).
  schedule llmc/train/schedulers.h (warmup + cosine/linear/constant/wsd over the run's steps), computed
           here in double precision where the trainer uses float (relative difference ~1e-7).
  optim    AdamW, betas 0.9 / 0.95, eps 1e-8, bias-corrected, decoupled weight decay on the 2-D
           tensors only (wte, wpe and the four weight matrices of each layer); the gradient's global
           L2 norm clipped to --grad-clip with the factor clip / (norm + 1e-6); fp32 master weights
           (PyTorch's parameters are fp32; ours are BF16 with fp32 master copies).
  timing   one step = next batch, zero grads, forward + backward, loss read back to the host,
           gradient norm and clipping, AdamW, and a device synchronization before the clock is read,
           as our trainer times it. The median is the upper median (sorted[n // 2]) of the step
           times after --warmup-steps, taken by this script from both sides' step times (the
           trainer's own `median step` line, after exactly 3 warm-up steps, is kept in
           results.json as ours_reported_median_ms).
  MFU      6*N + 6*L*C*T model FLOPs per token (llmc/train/mfu.h; N counts wte over Vp and wpe over maxT)
           over the device's dense BF16 peak from llmc/train/mfu.h's table (or --peak-tflops), the same
           peak for both sides, FP8 runs included (their MFU is utilization of the BF16 peak).

What is not the same
  loss      the speed runs' PyTorch model is by default "nanoGPT-style (loss over Vp)": the softmax and
            cross-entropy over all Vp logit columns, with no slice and no mask, as in the plain
            nanoGPT model PyTorch users train (vocabulary padded to 50304 in its config, the tied head
            over every padded column, cross-entropy over all of them). It skips the copy of the
            (B*T, V) slice and the zero-padding of its gradient, and the issue tracker reports it
            ~8% faster at d12; a speed claim has to be against the PyTorch that users run. Its loss
            is not our trainer's (the padded ids, never a target, take some probability and get
            gradient), so the loss runs use "exact (loss over V)" whatever the flag.
            --torch-speed-model exact times the exact model instead. The table's last column, the
            torch_*.log headers and results.json (speed.pytorch.torch_model, loss.torch_models)
            name the model of each number.
  numerics  our hand-written kernels (flash attention, fused classifier, GELU recomputed in backward,
            BF16 activations) against PyTorch's (SDPA, or masked softmax where SDPA is missing;
            autocast's op-by-op precision; torch.compile's fusions). Summation orders differ.
  float8    --torch-float8 converts every nn.Linear of the blocks with torchao
            (Float8LinearConfig.from_recipe_name) before torch.compile; the LM head is a matmul with
            wte, not an nn.Linear, and stays BF16, as in our FP8 build. The recipes' scaling is
            torchao's, not our FP8 build's.
  memory    ours: device-wide use (cudaMemGetInfo, CUDA context included): the largest `-lg` sample
            when the trainer has -lg, else its use at the end. PyTorch: torch.cuda.max_memory_allocated
            and max_memory_reserved (the caching allocator only) and the device-wide use at the end
            of the run (torch.cuda.mem_get_info, context included): the figure to set against ours.
  device    --device cpu (for the tests) runs PyTorch in fp32 without autocast and reports no memory.
Torch features are used when the installed torch has them: torch.compile (unless --no-compile),
F.scaled_dot_product_attention, AdamW(fused=True) on CUDA. Which ones ran is in the table and JSON.
"""
import argparse
import contextlib
import datetime
import gc
import glob
import inspect
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:
    sys.exit(f"error: PyTorch is not importable ({e})")

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent
if str(SCRIPTS) not in sys.path:  # scripts/ is not a package: import the sweep runner as sweep.py imports its siblings
    sys.path.insert(0, str(SCRIPTS))
import sweep  # noqa: E402  (trainer stdout parsing: parse_stdout, LogStats)

V, VP = 50257, 50304  # llmc/model/gpt2_config.h
GPT2_SIZES = {6: (384, 6), 12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}  # L -> (C, NH)
DEFAULT_BATCH = {"d12": 64, "d24": 32}  # doc/benchmarks.md; any other model: FALLBACK_BATCH
FALLBACK_BATCH = 8
SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_BYTES = 20240520, 1, 1024
SCHEDULES = ("cosine", "linear", "constant", "wsd")
FLOAT8_RECIPES = ("none", "tensorwise", "rowwise")
# The PyTorch model's two loss variants (GPT2's variant): the label names them in the table, logs and JSON.
TORCH_MODELS = {"nanogpt": "nanoGPT-style (loss over Vp)", "exact": "exact (loss over V)"}
LOSS_TORCH_MODEL = "exact"  # the loss comparison's: our trainer's numerics must match it
MFU_HEADER = REPO / "llmc" / "train" / "mfu.h"
PEAK_RE = re.compile(r'\{\s*"([^"]+)"\s*,\s*([0-9.]+)f?\s*,')  # DEVICE_PEAKS rows: name part, BF16 TFLOP/s
VAL_RE = re.compile(r"^step\s+(\d+) \| val loss (\S+)$")  # the trainers' validation line (sweep.py reads main.log instead)
PARAMS_RE = re.compile(r"^\| parameters\s*\| (\d+)\s*\|$")  # the trainers' start-up table row
MIB = 1024.0 * 1024.0


class BenchError(Exception):
    """A problem that stops the benchmark; printed as `error: <message>`, exit status 1."""


def repo_path(path):
    """A path given on the command line: relative ones are relative to the repository root, where
    our trainer runs (as in scripts/sweep.py); --out alone is relative to the current folder."""
    return Path(path) if os.path.isabs(path) else REPO / path


# ------------------------------------------------------------------------------------------------
# Model shapes, FLOPs, peaks, schedule


@dataclass(frozen=True)
class Shape:
    """A GPT-2 shape as llmc/model/gpt2_config.h defines it."""
    L: int
    C: int
    NH: int
    maxT: int
    V: int = V
    Vp: int = VP


def parse_descriptor(desc):
    """Shape of a model descriptor dL[,cC][,hNH][,tMAXT] (the trainer's -e; same defaults)."""
    parts = desc.split(",")
    if not re.fullmatch(r"d[1-9][0-9]{0,8}", parts[0]):
        raise BenchError(f"model {desc!r}: must start with d<layers>, e.g. d12 or d2,c64,h4,t64")
    L = int(parts[0][1:])
    C, NH = GPT2_SIZES.get(L, (64 * L, L))
    values = {"c": C, "h": NH, "t": 1024}
    seen = set()
    for part in parts[1:]:
        if not re.fullmatch(r"[cht][1-9][0-9]{0,8}", part) or part[0] in seen:
            raise BenchError(f"model {desc!r}: bad or repeated part {part!r} (expected c<channels>, h<heads>, t<maxT>)")
        seen.add(part[0])
        values[part[0]] = int(part[1:])
    if values["c"] % values["h"]:
        raise BenchError(f"model {desc!r}: channels {values['c']} not divisible by heads {values['h']}")
    return Shape(L=L, C=values["c"], NH=values["h"], maxT=values["t"])


def num_parameters(s):
    """Parameter count of a shape (llmc/model/gpt2_config.h's gpt2_num_parameters)."""
    return (s.Vp + s.maxT) * s.C + s.L * (12 * s.C * s.C + 13 * s.C) + 2 * s.C


def flops_per_token(s, T):
    """Model FLOPs per trained token, 6*N + 6*L*C*T (llmc/train/mfu.h)."""
    return 6.0 * num_parameters(s) + 6.0 * s.L * s.C * T


def read_device_peaks(path=MFU_HEADER):
    """[(name part, dense BF16 TFLOP/s)] from llmc/train/mfu.h's DEVICE_PEAKS, in its matching order."""
    text = Path(path).read_text()
    table = text[text.index("DEVICE_PEAKS[]"):]
    table = table[:table.index("};")]
    return [(name, float(bf16)) for name, bf16 in PEAK_RE.findall(table)]


def device_peak_tflops(device_name, peaks):
    """The BF16 peak of the first table entry whose name part occurs in device_name, else None."""
    for part, tflops in peaks:
        if part in device_name:
            return tflops
    return None


def learning_rate(step, peak, warmup, total, final_frac, kind):
    """Learning rate of the 0-based step, as llmc/train/schedulers.h's get_learning_rate."""
    if kind == "constant":
        return peak
    if step < warmup:
        return peak * (step + 1) / warmup
    lr_min = peak * final_frac
    if kind in ("cosine", "linear"):
        r = _clamped_ratio(step - warmup, total - warmup)
        if kind == "cosine":
            return lr_min + 0.5 * (1.0 + math.cos(math.pi * r)) * (peak - lr_min)
        return peak - r * (peak - lr_min)
    decay_start = total - (total // 5 if total > 0 else 0)  # wsd: decay over the last floor(0.2 * total) steps
    if step < decay_start:
        return peak
    return lr_min + (1.0 - math.sqrt(_clamped_ratio(step - decay_start, total - decay_start))) * (peak - lr_min)


def _clamped_ratio(num, den):
    """num / den clamped to [0, 1]; 1 for an empty window (den <= 0), as the trainer's scheduler."""
    if den <= 0:
        return 1.0
    return min(1.0, max(0.0, num / den))


# ------------------------------------------------------------------------------------------------
# Data: llm.c token shards in the trainer's order


def shard_tokens(path):
    """The uint16 tokens of one shard (memory-mapped) after checking its header and length."""
    try:
        size = os.path.getsize(path)
        header = np.fromfile(path, dtype="<i4", count=256)
    except OSError as e:
        raise BenchError(f"{path}: cannot read: {e.strerror or e}") from None
    if header.size < 256:
        raise BenchError(f"{path}: truncated header ({size} bytes)")
    if header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        raise BenchError(f"{path}: not a token shard (magic {header[0]}, version {header[1]})")
    n = int(header[2])
    if n <= 0 or size != SHARD_HEADER_BYTES + 2 * n:
        raise BenchError(f"{path}: {size} bytes does not match its header's {n} tokens")
    return np.memmap(path, dtype="<u2", mode="r", offset=SHARD_HEADER_BYTES, shape=(n,))


class ShardStream:
    """Batches of B x T (inputs, targets) in llmc/data/dataloader.h's order for one process."""

    def __init__(self, pattern, B, T, what):
        """Open every shard matching pattern (sorted); what names the option in errors."""
        paths = sorted(glob.glob(pattern))
        if not paths:
            raise BenchError(f"{what} {pattern}: no files match")
        self.B, self.T = B, T
        self.paths = paths
        self.shards = [shard_tokens(p) for p in paths]
        for path, tokens in zip(paths, self.shards):
            if len(tokens) < B * T + 1:
                raise BenchError(f"{path}: {len(tokens)} tokens, a batch needs B*T+1 = {B * T + 1}")
        self.num_tokens = sum(len(t) for t in self.shards)
        self.reset()

    def reset(self):
        """Back to the first token of the first shard."""
        self.shard, self.position = 0, 0

    def next_batch(self):
        """(inputs, targets) as int64 arrays of shape (B, T); advances by B*T tokens."""
        n = self.B * self.T
        window = np.asarray(self.shards[self.shard][self.position:self.position + n + 1], dtype=np.int64)
        if window.max() >= V:
            raise BenchError(f"{self.paths[self.shard]}: a token id >= {V} near position {self.position}")
        self.position += n
        if len(self.shards[self.shard]) - self.position < n + 1:  # the next window does not fit: next shard
            self.shard = (self.shard + 1) % len(self.shards)
            self.position = 0
        return window[:n].reshape(self.B, self.T), window[1:].reshape(self.B, self.T)


def val_batch_count(stream, requested):
    """The validation batches the trainer really uses for -m requested (llmc/train/train_setup.h's cap)."""
    available = stream.num_tokens // (stream.B * stream.T + 1)
    return min(requested, max(1, available))


# ------------------------------------------------------------------------------------------------
# The PyTorch model


def has_sdpa():
    """Whether this torch has F.scaled_dot_product_attention (2.0 and later)."""
    return hasattr(F, "scaled_dot_product_attention")


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, C, NH):
        """Layers of one block; C channels, NH heads."""
        super().__init__()
        self.NH = NH
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def attention(self, x):
        """Causal multi-head self-attention of x (B, T, C), output before the projection."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if has_sdpa():
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.NH))
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v
        return y.transpose(1, 2).reshape(B, T, C)

    def forward(self, x):
        """The block's output for x (B, T, C)."""
        x = x + self.attproj(self.attention(self.ln1(x)))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2 with a tied LM head over Vp columns; the cross-entropy over the columns its variant names
    (TORCH_MODELS): "exact" over the first V, our trainer's math; "nanogpt" over all Vp, as the plain
    nanoGPT model computes it."""

    def __init__(self, shape, variant="exact"):
        """Every layer of the shape (Shape); variant is a key of TORCH_MODELS. The default is the model
        our trainer computes, which the loss comparison and the same-weights test need."""
        super().__init__()
        if variant not in TORCH_MODELS:
            raise BenchError(f"PyTorch model {variant!r}: expected one of {', '.join(TORCH_MODELS)}")
        self.shape, self.variant = shape, variant
        self.wte = nn.Embedding(shape.Vp, shape.C)
        self.wpe = nn.Embedding(shape.maxT, shape.C)
        self.blocks = nn.ModuleList(Block(shape.C, shape.NH) for _ in range(shape.L))
        self.lnf = nn.LayerNorm(shape.C, eps=1e-5)

    def forward(self, idx, targets):
        """Mean cross-entropy of the next-token predictions for idx, targets (B, T) int64."""
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.lnf(x).view(B * T, -1), self.wte.weight)  # (B*T, Vp), tied LM head
        if self.variant == "exact":  # the padded columns get no probability and no gradient, as in our trainer
            logits = logits[:, :self.shape.V]
        # "nanogpt": the softmax over every padded column too (no slice, no mask): the padded ids never
        # occur as targets, so they only take a little probability mass and get pushed down in training
        return F.cross_entropy(logits.float(), targets.reshape(-1))


def init_weights(model, seed):
    """Draw fresh weights in place from llmc/model/gpt2_init.h's distribution, seeded with seed."""
    s = model.shape
    gen = torch.Generator().manual_seed(seed)
    resid_std = 0.02 / math.sqrt(2 * s.L)

    def normal_(param, std, rows=None):
        """Fill param (or its first rows) with N(0, std^2) drawn on the CPU, the rest with 0."""
        values = torch.zeros(param.shape)
        values[:rows].normal_(0.0, std, generator=gen)
        param.copy_(values)

    with torch.no_grad():
        normal_(model.wte.weight, 0.02, rows=s.V)
        normal_(model.wpe.weight, 0.02)
        for block in model.blocks:
            for layer, std in ((block.qkv, 0.02), (block.attproj, resid_std), (block.fc, 0.02), (block.fcproj, resid_std)):
                normal_(layer.weight, std)
                layer.bias.zero_()
            for ln in (block.ln1, block.ln2):
                ln.weight.fill_(1.0)
                ln.bias.zero_()
        model.lnf.weight.fill_(1.0)
        model.lnf.bias.zero_()


def decayed(param):
    """Whether a parameter gets weight decay: the 2-D tensors (embeddings and weight matrices)."""
    return param.dim() == 2


# ------------------------------------------------------------------------------------------------
# The PyTorch side


@dataclass
class TorchSettings:
    """How the PyTorch side runs (fixed for the whole call)."""
    device: str
    compile: bool
    float8: str
    fused_adamw: bool
    sdpa: bool
    description: str


def torch_settings(device, no_compile, float8):
    """Check the device and torchao, and decide which torch features to use."""
    if float8 != "none":
        require_torchao()
        if device != "cuda":
            raise BenchError(f"--torch-float8 {float8}: needs --device cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise BenchError("--device cuda: torch.cuda.is_available() is False (use --device cpu for a CPU run)")
    use_compile = hasattr(torch, "compile") and not no_compile
    fused = device == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    sdpa = has_sdpa()
    parts = [f"torch {torch.__version__}", "bf16 autocast" if device == "cuda" else "fp32",
             "compile" if use_compile else "eager", "SDPA" if sdpa else "masked-softmax attention",
             "fused AdamW" if fused else "AdamW"]
    if float8 != "none":
        parts.append(f"torchao float8 {float8}")
    return TorchSettings(device, use_compile, float8, fused, sdpa, ", ".join(parts))


def require_torchao():
    """Import torchao.float8 or stop with an error naming the option."""
    try:
        import torchao.float8  # noqa: F401
    except Exception as e:  # ImportError, or a broken install raising something else on import
        raise BenchError(f"--torch-float8: torchao is not importable ({type(e).__name__}: {e}); "
                         "install torchao or use --torch-float8 none") from None


def apply_float8(model, recipe):
    """Swap the blocks' nn.Linear layers for torchao Float8Linear of the recipe (the LM head is no nn.Linear)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    config = Float8LinearConfig.from_recipe_name(recipe)
    return convert_to_float8_training(model, config=config, module_filter_fn=lambda mod, fqn: fqn.startswith("blocks."))


def make_optimizer(model, settings, weight_decay):
    """AdamW with weight decay on the 2-D tensors only, betas 0.9 / 0.95, eps 1e-8."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if decayed(p)], "weight_decay": weight_decay},
              {"params": [p for p in params if not decayed(p)], "weight_decay": 0.0}]
    extra = {"fused": True} if settings.fused_adamw else {}
    return torch.optim.AdamW(groups, lr=0.0, betas=(0.9, 0.95), eps=1e-8, **extra)


def synchronize(device):
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def autocast(device):
    """BF16 autocast on CUDA; fp32 (no autocast) on the CPU."""
    if device == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


class TorchModel:
    """One model shape and loss variant on the PyTorch side: built, converted and compiled once, trained many times."""

    def __init__(self, shape, settings, variant="exact"):
        """Build the module (GPT2 of the variant) on the device (float8 conversion before torch.compile)."""
        self.shape, self.settings, self.variant = shape, settings, variant
        self.module = GPT2(shape, variant).to(settings.device)
        if settings.float8 != "none":
            if shape.C % 16:
                raise BenchError(f"--torch-float8: torchao's float8 GEMMs need C divisible by 16 (model has C={shape.C})")
            self.module = apply_float8(self.module, settings.float8)
        self.forward = torch.compile(self.module) if settings.compile else self.module

    def loss(self, inputs, targets):
        """The mean loss of one batch (numpy int64 arrays), as a device tensor, under autocast."""
        x = torch.from_numpy(inputs).to(self.settings.device)
        y = torch.from_numpy(targets).to(self.settings.device)
        with autocast(self.settings.device):
            return self.forward(x, y)

    def evaluate(self, stream, batches):
        """Mean loss over the first `batches` batches of stream (reset first), as the trainer's -m."""
        stream.reset()
        total = 0.0
        with torch.no_grad():
            for _ in range(batches):
                total += self.loss(*stream.next_batch()).item()
        return total / batches


def train_torch(tm, run, train, val, log_path):
    """Train tm from scratch with run's settings (RunSpec); returns a dict of step times, losses, memory."""
    device = tm.settings.device
    tm.module.zero_grad(set_to_none=True)  # the previous run's gradients
    init_weights(tm.module, run.seed)
    opt = make_optimizer(tm.module, tm.settings, run.weight_decay)
    train.reset()
    if device == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    result = {"seed": run.seed, "torch_model": tm.variant, "step_ms": [], "loss": [], "val": {}}
    with open(log_path, "w") as log:
        log.write(f"# PyTorch {TORCH_MODELS[tm.variant]} ({tm.settings.description}) seed {run.seed}: "
                  f"{run.steps} steps, B={run.B} T={run.T}\n")
        if run.val_batches:
            record_val(tm, val, run, 0, result, log)
        for step in range(run.steps):
            ms, loss, norm, lr = torch_step(tm, opt, train, run, step)
            result["step_ms"].append(ms)
            result["loss"].append(loss)
            log.write(f"step {step + 1:5d}/{run.steps} | loss {loss:.6f} | norm {norm:.4f} | lr {lr:.2e} | "
                      f"{ms:.2f} ms | {run.B * run.T / ms * 1e3:.0f} tok/s\n")
        if run.val_batches:
            record_val(tm, val, run, run.steps, result, log)
        result.update(torch_memory(device))
    del opt
    return result


def torch_step(tm, opt, train, run, step):
    """One timed optimizer step; returns (ms, loss, grad norm, lr). Stops on a non-finite loss."""
    t0 = time.perf_counter()
    lr = learning_rate(step, run.lr, run.warmup, run.steps, run.final_frac, run.schedule)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss = tm.loss(*train.next_batch())
    loss.backward()
    loss_value = loss.item()  # read back before the update, as our trainer does
    if not math.isfinite(loss_value):
        raise BenchError(f"PyTorch {run.label} seed {run.seed}: step {step + 1}: train loss is {loss_value}")
    max_norm = run.grad_clip if run.grad_clip > 0 else math.inf  # -gc 0: the norm only (a factor of 1)
    norm = torch.nn.utils.clip_grad_norm_(tm.module.parameters(), max_norm)
    opt.step()
    synchronize(tm.settings.device)
    ms = (time.perf_counter() - t0) * 1e3
    return ms, loss_value, float(norm), lr


def record_val(tm, val, run, step, result, log):
    """Evaluate, store under result['val'][step] and log the trainer's val line."""
    loss = tm.evaluate(val, run.val_batches)
    if not math.isfinite(loss):
        raise BenchError(f"PyTorch {run.label} seed {run.seed}: step {step}: val loss is {loss}")
    result["val"][step] = loss
    log.write(f"step {step:5d} | val loss {loss:.6f}\n")


def torch_memory(device):
    """Peak allocated / reserved MiB of the caching allocator and device-wide MiB in use now (CUDA)."""
    if device != "cuda":
        return {"mem_allocated_mib": None, "mem_reserved_mib": None, "mem_device_mib": None}
    free, total = torch.cuda.mem_get_info()
    return {"mem_allocated_mib": torch.cuda.max_memory_allocated() / MIB,
            "mem_reserved_mib": torch.cuda.max_memory_reserved() / MIB,
            "mem_device_mib": (total - free) / MIB}


def release_torch_model(tm):
    """Free a finished model's device memory and compiled graphs before the next shape."""
    del tm.forward, tm.module
    gc.collect()
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------
# Our trainer


@dataclass
class RunSpec:
    """One training run: what both sides are given."""
    label: str         # the model descriptor
    B: int
    T: int
    steps: int
    val_batches: int   # 0: no validation
    seed: int
    lr: float
    warmup: int
    final_frac: float
    schedule: str
    weight_decay: float
    grad_clip: float


def trainer_flags(trainer):
    """The flags the trainer's --help lists (checks that it runs at all)."""
    try:
        p = subprocess.run([str(trainer), "--help"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise BenchError(f"--trainer {trainer}: cannot run: {e.strerror or e}") from None
    if p.returncode != 0:
        raise BenchError(f"--trainer {trainer}: --help exited with status {p.returncode}: {(p.stderr or p.stdout).strip()[:200]}")
    return set(re.findall(r"^\s+(-\S+)", p.stdout, re.M))


def ours_command(trainer, run, train, val, extra, has_lg):
    """Our trainer's argv for run (validation only at step 0 and the end when val_batches > 0)."""
    argv = [str(trainer), "-e", run.label, "-b", run.B, "-t", run.T, "-x", run.steps, "-l", run.lr,
            "-u", run.warmup, "-q", run.final_frac, "-k", run.schedule, "-c", run.weight_decay,
            "-gc", run.grad_clip, "-seed", run.seed, "-s", 0, "-n", -1, "-i", train, "-j", val]
    argv += ["-v", run.steps, "-m", run.val_batches] if run.val_batches else ["-v", 0]
    if has_lg:
        argv += ["-lg", max(1, run.steps // 5)]  # device memory samples: the peak column
    return [str(a) for a in argv] + list(extra)


def run_ours(argv, log_path, run, shape):
    """Run our trainer to log_path; returns its numbers (step times, val losses, memory) or stops."""
    with open(log_path, "w") as log:
        log.write(f"# {shlex.join(argv)}\n")
        log.flush()
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=REPO).returncode
    stats = sweep.parse_stdout(log_path)
    where = f"ours {run.label} (log {log_path})"
    if stats.nonfinite:
        raise BenchError(f"{where}: train loss is {stats.nonfinite} at step {stats.diverged_step}")
    if code != 0:
        raise BenchError(f"{where}: trainer exited with status {code}" + (f": {stats.error}" if stats.error else ""))
    text = Path(log_path).read_text(errors="replace").splitlines()
    params = [int(m.group(1)) for line in text if (m := PARAMS_RE.match(line))]
    if params and params[0] != num_parameters(shape):
        raise BenchError(f"{where}: the trainer's model has {params[0]} parameters, this script's {num_parameters(shape)}")
    if len(stats.step_ms) != run.steps:
        raise BenchError(f"{where}: {len(stats.step_ms)} step lines, expected {run.steps}")
    val = {int(m.group(1)): float(m.group(2)) for line in text if (m := VAL_RE.match(line))}
    if run.val_batches and run.steps not in val:
        raise BenchError(f"{where}: no val loss at step {run.steps}")
    if any(not math.isfinite(v) for v in val.values()):
        raise BenchError(f"{where}: a val loss is not finite: {val}")
    return {"step_ms": stats.step_ms, "val": val, "reported_median_ms": stats.median_ms,
            "mem_peak_mib": stats.mem_peak, "mem_end_mib": stats.mem_end}


# ------------------------------------------------------------------------------------------------
# Numbers and the table


def median_ms(step_ms, warmup):
    """Upper median (as the trainer takes it) of the step times after the first `warmup` steps."""
    timed = sorted(step_ms[warmup:])
    if not timed:
        raise BenchError(f"no step after the {warmup} warm-up steps")
    return timed[len(timed) // 2]


def speed_numbers(step_ms, warmup, B, T, flops_token, peak_tflops):
    """{median_ms, tok_s, mfu_pct} of one side (mfu_pct None without a peak)."""
    ms = median_ms(step_ms, warmup)
    tok_s = B * T / (ms * 1e-3)
    mfu = flops_token * tok_s / (peak_tflops * 1e12) * 100.0 if peak_tflops else None
    return {"median_ms": ms, "tok_s": tok_s, "mfu_pct": mfu}


def loss_verdict(ours, torch_losses, floor):
    """Compare our val loss with the PyTorch seeds': noise = their spread; agree within max(noise, floor)."""
    noise = max(torch_losses) - min(torch_losses)
    mean = sum(torch_losses) / len(torch_losses)
    diff = abs(ours - mean)
    tolerance = max(noise, floor)
    return {"ours": ours, "pytorch": torch_losses, "pytorch_mean": mean, "noise": noise, "floor": floor,
            "diff": diff, "tolerance": tolerance, "verdict": "agree" if diff <= tolerance else "DIFFER"}


def fmt(value, spec, none="–"):
    """value formatted with spec, or `none` for None."""
    return none if value is None else format(value, spec)


def memory_cell(side):
    """The table's memory text of one side's speed numbers."""
    if "mem_device_mib" in side:  # PyTorch
        if side["mem_device_mib"] is None:
            return "–"
        return (f"{side['mem_device_mib']:.0f} device (alloc {side['mem_allocated_mib']:.0f}, "
                f"reserved {side['mem_reserved_mib']:.0f})")
    value = side.get("mem_peak_mib") or side.get("mem_end_mib")
    return "–" if value is None else f"{value:.0f} device"


def render_table(results, settings, trainer):
    """The markdown table (and the loss verdict lines) of all models."""
    lines = ["| model | side | B | median ms | tok/s | MFU | memory MiB | × PyTorch tok/s | val loss | PyTorch model |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        loss = r.get("loss")
        for side, name in (("ours", f"ours ({trainer})"), ("pytorch", f"PyTorch ({settings.description})")):
            s = r["speed"][side]
            ratio = fmt(r["speed"]["ratio"], ".3f") if side == "ours" else "1.000"
            val = "–"
            if loss:
                val = f"{loss['ours']:.4f}" if side == "ours" else " / ".join(f"{v:.4f}" for v in loss["pytorch"])
            lines.append(f"| {r['model']} | {name} | {r['B']} | {s['median_ms']:.2f} | {s['tok_s']:,.0f} | "
                         f"{fmt(s['mfu_pct'], '.1f')}{'%' if s['mfu_pct'] is not None else ''} | {memory_cell(s)} | "
                         f"{ratio} | {val} | {torch_model_cell(r) if side == 'pytorch' else '–'} |")
    verdicts = [verdict_line(r) for r in results if r.get("loss")]
    return "\n".join(lines + ([""] + verdicts if verdicts else [])) + "\n"


def torch_model_cell(r):
    """Which PyTorch model gave the PyTorch row's numbers: the speed columns' and, when it differs, the val loss's."""
    speed = TORCH_MODELS[r["speed"]["pytorch"]["torch_model"]]
    if not r.get("loss"):
        return speed
    losses = sorted({TORCH_MODELS[v] for v in r["loss"]["torch_models"]})
    return speed if losses == [speed] else f"speed: {speed}; val loss: {' / '.join(losses)}"


def verdict_line(r):
    """One line: the loss comparison of a model."""
    v = r["loss"]
    return (f"{r['model']}: val loss after {r['loss_steps']} steps ({r['val_batches']} batches): ours {v['ours']:.4f}, "
            f"PyTorch {' / '.join(sorted({TORCH_MODELS[m] for m in v['torch_models']}))} "
            f"{' / '.join(f'{x:.4f}' for x in v['pytorch'])} (seeds {', '.join(map(str, r['loss_seeds']))}), "
            f"noise {v['noise']:.4f}, |ours - mean| {v['diff']:.4f} vs max(noise, floor {v['floor']}) = "
            f"{v['tolerance']:.4f}: **{v['verdict']}**")


# ------------------------------------------------------------------------------------------------
# Command line and the whole run


def split_models(text):
    """Model descriptors of --models: a comma starts a new model unless the next part is c/h/t (d2,c64,h4,d12)."""
    models = []
    for part in text.split(","):
        part = part.strip()
        if part[:1] in ("c", "h", "t") and models:
            models[-1] += "," + part
        elif part:
            models.append(part)
    return models


def batch_sizes(text, models):
    """{model: B} from --batch (one number for all, or model=B pairs), else the defaults."""
    sizes = {m: DEFAULT_BATCH.get(m, FALLBACK_BATCH) for m in models}
    if not text:
        return sizes
    if re.fullmatch(r"[0-9]+", text):
        return {m: int(text) for m in models}
    for item in split_models(text):
        model, _, value = item.rpartition("=")
        if model not in sizes or not re.fullmatch(r"[1-9][0-9]*", value):
            raise BenchError(f"--batch {text}: {item!r} is not <model>=<B> for one of --models {','.join(models)}")
        sizes[model] = int(value)
    return sizes


def parse_args(argv):
    """The command line (defaults: the doc/benchmarks.md Gutenberg d12 runs)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="d12,d24", help="model descriptors, e.g. d12,d24 or d2,c64,h4,t64 [d12,d24]")
    ap.add_argument("--batch", help="B: one number, or model=B pairs [d12=64,d24=32, others 8]")
    ap.add_argument("--T", type=int, default=1024, help="sequence length [1024]")
    ap.add_argument("--steps", type=int, default=50, help="steps of the speed runs [50]")
    ap.add_argument("--warmup-steps", type=int, default=3, help="first steps left out of the median [3]")
    ap.add_argument("--val-steps", type=int, default=300, help="steps of the loss runs, 0 = no loss runs [300]")
    ap.add_argument("--val-batches", type=int, default=10, help="validation batches (-m) [10]")
    ap.add_argument("--loss-floor", type=float, default=0.02,
                    help="smallest tolerance of the loss verdict, in nats [0.02: the spread of the 300-step "
                         "d12 Gutenberg runs across builds and trees in doc/benchmarks.md]")
    ap.add_argument("--train", default="data/gutenberg/gutenberg_train_*.bin",
                    help="train shards (glob; relative paths here and in --trainer: to the repository root)")
    ap.add_argument("--val", default="data/gutenberg/gutenberg_val_*.bin", help="validation shards (glob)")
    ap.add_argument("--lr", type=float, default=6e-4, help="peak learning rate (-l) [6e-4]")
    ap.add_argument("--warmup-iters", type=int, default=30, help="learning-rate warmup steps (-u) [30]")
    ap.add_argument("--final-lr-frac", type=float, default=0.1, help="final lr / peak (-q) [0.1]")
    ap.add_argument("--schedule", choices=SCHEDULES, default="cosine", help="lr schedule (-k) [cosine]")
    ap.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay (-c) [0.1]")
    ap.add_argument("--grad-clip", type=float, default=1.0, help="global gradient-norm clip (-gc) [1.0]")
    ap.add_argument("--seed", type=int, default=1337, help="our -seed and the first PyTorch seed (the second is +1) [1337]")
    ap.add_argument("--trainer", default="build/bf16/train_gpt2cu", help="our trainer binary [build/bf16/train_gpt2cu]")
    ap.add_argument("--trainer-flags", default="", help="extra flags for our trainer, e.g. \"--fp8-delayed 4\"")
    ap.add_argument("--torch-float8", choices=FLOAT8_RECIPES, default="none", help="torchao float8 recipe [none]")
    ap.add_argument("--torch-speed-model", choices=tuple(TORCH_MODELS), default="nanogpt",
                    help="PyTorch model of the speed runs: nanogpt = cross-entropy over all Vp columns, as the "
                         "plain nanoGPT model; exact = over the first V, as our trainer and the loss runs [nanogpt]")
    ap.add_argument("--no-compile", action="store_true", help="PyTorch eager (no torch.compile)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="PyTorch device (cpu: tests only) [cuda]")
    ap.add_argument("--peak-tflops", type=float, help="peak TFLOP/s for MFU [llmc/train/mfu.h's BF16 figure of the GPU]")
    ap.add_argument("--out", help="output folder [bench_out/<date>-<time>]")
    return ap.parse_args(argv)


def check_args(args):
    """Stop on values that cannot work, before anything runs."""
    if args.steps <= args.warmup_steps:
        raise BenchError(f"--steps {args.steps}: must exceed --warmup-steps {args.warmup_steps}")
    for name in ("T", "val_batches"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')}: must be >= 1")
    if args.warmup_steps < 0 or args.val_steps < 0 or args.warmup_iters < 0:
        raise BenchError("--warmup-steps, --val-steps and --warmup-iters must be >= 0")
    trainer = repo_path(args.trainer)
    if not trainer.is_file() or not os.access(trainer, os.X_OK):
        raise BenchError(f"--trainer {args.trainer}: no such executable (build it: make cuda, or see README.md)")


def run_spec(args, model, B, steps, val_batches, seed):
    """The RunSpec of one run from the command line."""
    return RunSpec(label=model, B=B, T=args.T, steps=steps, val_batches=val_batches, seed=seed, lr=args.lr,
                   warmup=args.warmup_iters, final_frac=args.final_lr_frac, schedule=args.schedule,
                   weight_decay=args.weight_decay, grad_clip=args.grad_clip)


def prepare_models(args):
    """[(model, shape, B, val batches, train stream, val stream)] after checking shapes and shards."""
    models = split_models(args.models)
    if not models:
        raise BenchError("--models: no model given")
    sizes = batch_sizes(args.batch, models)
    prepared = []
    for model in models:
        shape = parse_descriptor(model)
        if args.T > shape.maxT:
            raise BenchError(f"--T {args.T}: exceeds model {model}'s maxT {shape.maxT}")
        B = sizes[model]
        train = ShardStream(str(repo_path(args.train)), B, args.T, "--train")
        val = ShardStream(str(repo_path(args.val)), B, args.T, "--val")
        prepared.append((model, shape, B, val_batch_count(val, args.val_batches), train, val))
    return prepared


def ours_phase(args, prepared, out, say):
    """Every run of our trainer: {model: {"speed": ..., "loss": ...}}."""
    trainer = repo_path(args.trainer)
    has_lg = "-lg" in trainer_flags(trainer)
    extra = shlex.split(args.trainer_flags)
    results = {}
    for model, shape, B, val_batches, _, _ in prepared:
        tag = model.replace(",", "-")
        runs = [("speed", run_spec(args, model, B, args.steps, 0, args.seed))]
        if args.val_steps:
            runs.append(("loss", run_spec(args, model, B, args.val_steps, val_batches, args.seed)))
        results[model] = {}
        for kind, run in runs:
            argv = ours_command(trainer, run, args.train, args.val, extra, has_lg)
            say(f"ours {model} {kind}: {shlex.join(argv)}")
            results[model][kind] = run_ours(argv, out / f"ours_{tag}_{kind}.log", run, shape)
    return results


def torch_phase(args, prepared, settings, out, say):
    """Every PyTorch run: {model: {"speed": result, "loss": [result per seed]}}."""
    results = {}
    for model, shape, B, val_batches, train, val in prepared:
        tag = model.replace(",", "-")
        tm = build_torch_model(model, shape, settings, args.torch_speed_model, say)
        results[model] = {}
        run = run_spec(args, model, B, args.steps, 0, args.seed)
        say(f"PyTorch {model} speed: {run.steps} steps, B={B}, T={args.T}")
        results[model]["speed"] = train_torch(tm, run, train, val, out / f"torch_{tag}_speed.log")
        if args.val_steps:
            if tm.variant != LOSS_TORCH_MODEL:  # one compiled model at a time on the device
                release_torch_model(tm)
                tm = build_torch_model(model, shape, settings, LOSS_TORCH_MODEL, say)
            results[model]["loss"] = []
            for seed in (args.seed, args.seed + 1):
                run = run_spec(args, model, B, args.val_steps, val_batches, seed)
                say(f"PyTorch {model} loss: {run.steps} steps, seed {seed}")
                results[model]["loss"].append(train_torch(tm, run, train, val, out / f"torch_{tag}_loss_seed{seed}.log"))
        release_torch_model(tm)
    return results


def build_torch_model(model, shape, settings, variant, say):
    """The TorchModel of a model descriptor's shape and a loss variant, announced on stdout."""
    say(f"PyTorch {model}: building {TORCH_MODELS[variant]} ({settings.description})")
    return TorchModel(shape, settings, variant)


def combine(args, prepared, ours, torch_runs, peak):
    """Per model: the speed numbers of both sides, their ratio and the loss verdict."""
    combined = []
    for model, shape, B, val_batches, _, _ in prepared:
        flops = flops_per_token(shape, args.T)
        o, t = ours[model]["speed"], torch_runs[model]["speed"]
        ours_speed = {**speed_numbers(o["step_ms"], args.warmup_steps, B, args.T, flops, peak),
                      "mem_peak_mib": o["mem_peak_mib"], "mem_end_mib": o["mem_end_mib"],
                      "reported_median_ms": o["reported_median_ms"], "step_ms": o["step_ms"]}
        torch_speed = {**speed_numbers(t["step_ms"], args.warmup_steps, B, args.T, flops, peak),
                       **{k: t[k] for k in ("mem_allocated_mib", "mem_reserved_mib", "mem_device_mib")},
                       "torch_model": t["torch_model"], "step_ms": t["step_ms"]}
        entry = {"model": model, "shape": vars(shape), "parameters": num_parameters(shape), "B": B, "T": args.T,
                 "flops_per_token": flops,
                 "speed": {"ours": ours_speed, "pytorch": torch_speed, "ratio": ours_speed["tok_s"] / torch_speed["tok_s"]}}
        if args.val_steps:
            o_loss, t_loss = ours[model]["loss"], torch_runs[model]["loss"]
            entry.update(loss_steps=args.val_steps, val_batches=val_batches, loss_seeds=[r["seed"] for r in t_loss],
                         val_step0={"ours": o_loss["val"].get(0), "pytorch": [r["val"][0] for r in t_loss]},
                         loss={**loss_verdict(o_loss["val"][args.val_steps], [r["val"][args.val_steps] for r in t_loss],
                                              args.loss_floor),
                               "torch_models": [r["torch_model"] for r in t_loss]})
        combined.append(entry)
    return combined


def device_description(settings):
    """(device name, peak TFLOP/s from llmc/train/mfu.h or None) of the PyTorch device."""
    if settings.device != "cuda":
        return "cpu", None
    name = torch.cuda.get_device_name()
    return name, device_peak_tflops(name, read_device_peaks())


def git_revision():
    """The repository's short commit, '+dirty' when the tree has changes; None without git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    except OSError:
        return None
    return (rev + ("+dirty" if dirty else "")) if rev else None


def versions():
    """torch and (when importable) torchao versions."""
    info = {"torch": torch.__version__, "torchao": None}
    with contextlib.suppress(Exception):
        import torchao
        info["torchao"] = torchao.__version__
    return info


def write_outputs(out, table, report):
    """table.md and results.json into out."""
    (out / "table.md").write_text(table)
    (out / "results.json").write_text(json.dumps(report, indent=1) + "\n")


def main(argv=None):
    """Run the benchmark; 0 on success, 1 after an `error:` line."""
    args = parse_args(argv)
    say = lambda text: print(text, flush=True)  # noqa: E731
    try:
        check_args(args)
        settings = torch_settings(args.device, args.no_compile, args.torch_float8)
        prepared = prepare_models(args)
        out = Path(args.out or REPO / "bench_out" / datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
        out.mkdir(parents=True, exist_ok=True)
        ours = ours_phase(args, prepared, out, say)
        torch_runs = torch_phase(args, prepared, settings, out, say)
        device, table_peak = device_description(settings)
        peak = args.peak_tflops or table_peak
        results = combine(args, prepared, ours, torch_runs, peak)
        table = render_table(results, settings, args.trainer)
        report = {"settings": {k: v for k, v in vars(args).items()}, "device": device, "peak_tflops": peak,
                  "pytorch": vars(settings), "torch_models": TORCH_MODELS, "versions": versions(), "commit": git_revision(),
                  "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "models": results}
        write_outputs(out, table, report)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    print(f"device {device}, peak {fmt(peak, '.1f')} TFLOP/s (MFU), warm-up {args.warmup_steps} steps, "
          f"speed runs {args.steps} steps")
    print(table)
    print(f"wrote {out / 'table.md'} and {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
