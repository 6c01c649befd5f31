#!/usr/bin/env python3
"""Independent PyTorch reference of the FP8 and TCFP-12 linear layers (llmc/modes/lowp/gemm_lowp.cuh) with the
options test_gpt2cu uses (lowp_reference_options in llmc/modes/lowp/mode.cuh: per-tensor current scaling, FP8 wgrad, no warm-up,
no error feedback / SRR / ABD / block scaling, LM head in BF16), and of the BF16 storage around them.

Written from the formats' specification and the documented recipe (doc/TCFP12.md "What runs where",
"TCFP-12"; the formulas of llmc/kernels/fp8/fp8_quant.cuh and llmc/numerics/fp8.h), not from their code:

* Formats (OCP 8-bit Floating Point Specification, OFP8, rev. 1.0, section 5): E4M3 (bias 7, 3
  mantissa bits, no Inf, max 448, min subnormal 2^-9) and E5M2 (bias 15, 2 mantissa bits, max 57344,
  min subnormal 2^-16). Conversion: round to nearest, ties to even, in saturating mode: every value
  whose magnitude exceeds max (rounded or not, Inf included) becomes +-max; NaN stays NaN.
* Scales (per tensor, current scaling, margin 0): s = 2^k with k the largest integer such that
  amax * 2^k <= max (so amax * s lies in (max/2, max]); k clamped to [-126, 127]; an amax that is 0,
  NaN or Inf gives s = 1. amax = max |x| over the tensor as stored (BF16 activations and gradients,
  the BF16 weights, or the fp32 master weights of the TCFP-12 split). Codes are Q(x * s), values
  decode(code) / s: with a power-of-two s every step is exact, so a quantized tensor is fully
  described by its values fp8_round(x * s) / s, which is what this module computes (quantize()).
* FP8 build, per linear layer y = x W^T + b (x (N, C), W (OC, C)):
    forward  y  = bf16( X8 . W8^T + b )            X8 = Q_E4M3(X), W8 = Q_E4M3(W_bf16)
    dgrad    dx = bf16( dY8 . W8 )                  dY8 = Q_E5M2(dY), dY the BF16 stored gradient
    wgrad    dW = dY8^T . X8                         the forward's X8 (same codes, same scale)
    bias     db = sum over N of the BF16 dY (unquantized)
  The products accumulate in fp32 on the GPU (here: exactly, float64) and the bias is added to the
  fp32 product before the one rounding to BF16 (cuBLASLt BIAS epilogue).
* TCFP-12 build: the fp32 master weight W (the split reads the master copy when the run keeps it
  whole, as test_gpt2.cu's models do) is split once per weight version:
    W_hi = Q_E4M3(W) with s_hi from amax(W),  R = W - W_hi (exact in fp32),
    W_lo = Q_E4M3(R) with s_lo from amax(R)
  and both GEMMs write the same BF16 output, the W_lo product first (TCFP12_ACC_BF16_LO_FIRST):
    forward  y  = bf16( X8 . W_hi^T + b + bf16( X8 . W_lo^T ) )
    dgrad    dx = bf16( dY8 . W_hi + bf16( dY8 . W_lo ) )
    wgrad, bias as in the FP8 build.
* BF16 storage: every stored activation, and every stored activation gradient, is a BF16 value
  (round to nearest even from the fp32 value, Bf16Store). The quantizers read these stored tensors,
  so the reference must quantize the same BF16 values to land on the same codes (a difference
  that straddles a rounding midpoint moves a value by a whole FP8 step). For the same reason the
  attention is the kernels' (KernelAttention: BF16 probabilities in the P.V product, the stored
  output in the backward's D): a BF16-sized difference in the attention output would reach the next
  quantizer as whole E4M3 steps in a few percent of its elements.

Public API
----------
E4M3, E5M2                       format descriptors (Fp8Format)
fp8_round(v, fmt)                values on fmt's grid, RNE + saturation (v already scaled)
pow2_scale(amax, fmt)            the power-of-two quant scale of a tensor with that amax
quantize(t, fmt)                 (dequantized values, scale) of a per-tensor quantization
tcfp12_split(w)                  (W_hi, W_lo, s_hi, s_lo) of an fp32 weight
round_bf16(t), round_f32(t)      nearest BF16 / float32 values, as a tensor of t's dtype
Bf16Store                        autograd: BF16 value forward, BF16 gradient backward
KernelAttention                  autograd: causal attention as the trainer's generic kernels compute it
LowpLinear                       autograd: one linear layer of the FP8 / TCFP-12 / BF16 recipe
RECIPES                          recipe names: "fp8", "tcfp12" (and "bf16": BF16 GEMMs, for proxies)
"""
import math
from typing import NamedTuple

import torch


class Fp8Format(NamedTuple):
    """An OFP8 binary format: exponent / mantissa bits, bias, largest finite value."""
    name: str
    exp_bits: int
    man_bits: int
    bias: int
    max: float

    @property
    def emin(self):
        """Unbiased exponent of the smallest normal value, 1 - bias (E4M3 -6, E5M2 -14)."""
        return 1 - self.bias


E4M3 = Fp8Format("e4m3", 4, 3, 7, 448.0)      # OFP8 5.1: S.1111.111 is NaN, so max = 1.75 * 2^8
E5M2 = Fp8Format("e5m2", 5, 2, 15, 57344.0)   # OFP8 5.1: exponent 11111 is Inf / NaN, max = 1.75 * 2^15
RECIPES = ("fp8", "tcfp12", "bf16")
SCALE_EXP_MIN, SCALE_EXP_MAX = -126, 127       # the scale stays a normal float32


def fp8_round(v, fmt):
    """The value of the nearest point of fmt's grid to each element of v (a float tensor, any shape,
    already multiplied by its scale), ties to even, saturating: |v| > fmt.max (Inf too) gives +-max.
    NaN stays NaN; the sign of zero is kept. Same dtype and shape as v.

    The grid spacing at |v| is 2^(max(e, emin) - M) with e = floor(log2 |v|) (OFP8 5.1: normal
    binades of 2^M points, subnormals below 2^emin with the spacing of the lowest binade). The
    division by the spacing and the multiplication back are exact (powers of two), torch.round rounds
    half to even, and a |v| <= max never rounds above max (max is a grid point), so clamping first
    is the saturating conversion."""
    a = v.abs().clamp(max=fmt.max)
    _, e = torch.frexp(a)  # a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1 (e = 0 for a = 0)
    step_exp = torch.clamp(e - 1, min=fmt.emin) - fmt.man_bits
    step = torch.ldexp(torch.ones_like(a), step_exp)
    return torch.copysign(torch.round(a / step) * step, v)


def pow2_scale(amax, fmt):
    """Quant scale 2^k of a tensor with maximum magnitude amax (a Python float) for fmt: k is the
    largest integer with amax * 2^k <= fmt.max, clamped to [-126, 127]; 1.0 for amax 0, NaN or Inf."""
    if not (amax > 0.0 and math.isfinite(amax)):
        return 1.0
    k = math.frexp(fmt.max)[1] - math.frexp(amax)[1]  # amax 2^k and max in the same binade
    if math.ldexp(amax, k) > fmt.max:
        k -= 1
    return math.ldexp(1.0, min(max(k, SCALE_EXP_MIN), SCALE_EXP_MAX))


def quantize(t, fmt):
    """Per-tensor current-scaling quantization of t: (fp8_round(t * s, fmt) / s, s) with
    s = pow2_scale(max |t|, fmt). Both products are exact (s a power of two), so the first result
    is the dequantized tensor the FP8 GEMM multiplies (decode(code) * (1 / s))."""
    s = pow2_scale(t.abs().max().item() if t.numel() else 0.0, fmt)
    return fp8_round(t * s, fmt) / s, s


def tcfp12_split(w):
    """TCFP-12 split of an fp32 weight w (a float tensor holding float32 values, (OC, C)), without
    error feedback: (W_hi, W_lo, s_hi, s_lo) with W_hi = quantize(w, E4M3), R = w - W_hi and
    W_lo = quantize(R, E4M3), s_lo from amax(R) (doc/TCFP12.md "TCFP-12"). R is computed in w's dtype;
    it is exact (the error of rounding a float32 to a coarser grid is itself a float32)."""
    w_hi, s_hi = quantize(w, E4M3)
    w_lo, s_lo = quantize(w - w_hi, E4M3)
    return w_hi, w_lo, s_hi, s_lo


def _round_bits(t, keep_bits):
    """t rounded to float32, then to the nearest value with the top keep_bits bits of the float32
    pattern (ties to even; 16 = BF16) by integer arithmetic on the bit pattern; NaN, Inf kept."""
    f = t.to(torch.float32)
    u = f.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    drop = 32 - keep_bits
    half = (1 << (drop - 1)) - 1
    r = ((u + half + ((u >> drop) & 1)) >> drop) << drop
    r = torch.where(torch.isfinite(f), r, u)  # Inf stays, NaN keeps its pattern
    r = torch.where(r >= 1 << 31, r - (1 << 32), r).to(torch.int32)
    return r.view(torch.float32).to(t.dtype)


def round_f32(t):
    """Nearest float32 values of t (round to nearest even), as a tensor of t's dtype."""
    return t.to(torch.float32).to(t.dtype)


def round_bf16(t):
    """Nearest BF16 values of t, as the GPU stores an fp32 value: t -> float32 (nearest even), then
    to the upper 16 bits of the pattern (nearest even); a tensor of t's dtype and shape."""
    return _round_bits(t, 16)


ATTN_KEY_CHUNK = 32  # keys per step of the trainer's generic attention kernels (ATTN_GEN_CHUNK)


class KernelAttention(torch.autograd.Function):
    """Causal self-attention of a stored (BF16) qkv (B, T, 3C) with NH heads, as the trainer's generic
    attention kernels compute it (llmc/kernels/attention/attention.cuh, head sizes other than 64 and 128, e.g. the test
    model's 32): returns the unrounded output O (B, T, C) (the caller stores it in BF16).
    Forward (online softmax over chunks of ATTN_KEY_CHUNK keys, m_c the running row max after chunk c):
      O_i = sum_c sum_{j in c} bf16(exp(s_ij - m_c)) exp(m_c - m) v_j / l_i,  l_i = sum_j exp(s_ij - m)
    i.e. the probabilities multiply V as BF16 values of the unnormalized exponentials, the denominator
    is unrounded. Backward (flash form, P = exp(S - lse) unrounded, O_st the stored BF16 output):
      D = rowsum(dO * O_st), dS = P * (dO V^T - D), dQ = dS K / sqrt(HS), dK = dS^T Q / sqrt(HS),
      dV = bf16(P)^T dO.
    Scores s = q.k / sqrt(HS), keys after the query masked."""

    @staticmethod
    def forward(ctx, qkv, NH):
        B, T, C3 = qkv.shape
        C = C3 // 3
        q, k, v = (t.reshape(B, T, NH, C // NH).transpose(1, 2) for t in qkv.split(C, dim=-1))
        scale = 1.0 / math.sqrt(C // NH)
        future = torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu(1)
        s = (q @ k.transpose(-2, -1) * scale).masked_fill(future, float("-inf"))
        starts = range(0, T, ATTN_KEY_CHUNK)
        m_c = torch.stack([s[..., c0:c0 + ATTN_KEY_CHUNK].amax(-1) for c0 in starts], -1).cummax(-1).values
        m = m_c[..., -1:]
        p = torch.exp(s - m)
        l = p.sum(-1, keepdim=True)
        o = sum((round_bf16(torch.exp(s[..., c0:c0 + ATTN_KEY_CHUNK] - m_c[..., c:c + 1])) @ v[..., c0:c0 + ATTN_KEY_CHUNK, :])
                * torch.exp(m_c[..., c:c + 1] - m) for c, c0 in enumerate(starts)) / l
        ctx.save_for_backward(q, k, v, p / l, o)
        ctx.scale = scale
        return o.transpose(1, 2).reshape(B, T, C)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, p, o = ctx.saved_tensors
        B, NH, T, HS = q.shape
        do = grad.reshape(B, T, NH, HS).transpose(1, 2)
        d = (do * round_bf16(o)).sum(-1, keepdim=True)
        ds = p * (do @ v.transpose(-2, -1) - d)
        dq, dk = ds @ k * ctx.scale, ds.transpose(-2, -1) @ q * ctx.scale
        dv = round_bf16(p).transpose(-2, -1) @ do
        return torch.cat([t.transpose(1, 2).reshape(B, T, NH * HS) for t in (dq, dk, dv)], -1), None


class Bf16Store(torch.autograd.Function):
    """A tensor the trainer stores in BF16 (floatX): round_bf16 of the value in forward, and of the
    gradient in backward (the trainer keeps the gradient of every stored activation in BF16 too:
    dlogits, dlnf, the residual-stream gradient, each linear layer's dinp, dGELU, dqkv)."""

    @staticmethod
    def forward(ctx, t):
        return round_bf16(t)

    @staticmethod
    def backward(ctx, grad):
        return round_bf16(grad)


def _as_stored_weights(w, recipe):
    """The weight tensors a recipe multiplies, from the reference's weight w (OC, C): FP8 the E4M3
    values of the BF16 parameters; TCFP-12 (W_hi, W_lo) of the fp32 master weights; BF16 the BF16
    parameters. Returns a tuple of 1 or 2 tensors (the W_lo product first: it is summed first)."""
    if recipe == "fp8":
        return (quantize(round_bf16(w), E4M3)[0],)
    if recipe == "tcfp12":
        w_hi, w_lo, _, _ = tcfp12_split(round_f32(w))
        return (w_lo, w_hi)
    if recipe == "bf16":
        return (round_bf16(w),)
    raise ValueError(f"unknown recipe {recipe!r}, expected one of {RECIPES}")


def _gemm_bf16(products, extra=None):
    """The BF16 output of GEMMs that accumulate into one D: products is a list of float tensors (each
    an exact-arithmetic GEMM result), extra an optional bias row added to the last product; each
    GEMM rounds D to BF16 (beta = 1 reads the previous BF16 D): bf16(p_k + [b] + bf16(... bf16(p_0)))."""
    out = None
    for i, p in enumerate(products):
        acc = p if out is None else p + out
        if extra is not None and i == len(products) - 1:
            acc = acc + extra
        out = round_bf16(acc)
    return out


class LowpLinear(torch.autograd.Function):
    """y = x W^T + b of one linear layer under `recipe` (RECIPES), as the backend computes it with
    test_gpt2.cu's options (module docstring). x (..., C) (the stored BF16 input; rounded here again,
    a no-op then), w (OC, C) the reference's weight, b (OC) or None (rounded to BF16, the trainer's
    parameter). Forward: y (..., OC) in BF16 values. Backward: the incoming gradient rounded to BF16
    (the stored dY), then
      dx = bf16(dY8 . W [+ bf16(dY8 . W_lo)]),  dW = dY8^T . X8,  db = sum_N dY
    with the E4M3 X8 of the forward (same scale). Gradients to w and b are the straight-through
    gradients of the fp32 master weights; dW is not rounded (no quantizer reads it). "bf16": plain
    BF16 GEMMs (unquantized operands, bf16 outputs), for proxies of the BF16 build."""

    @staticmethod
    def forward(ctx, x, w, b, recipe):
        x2 = round_bf16(x.reshape(-1, x.shape[-1]))
        xq = quantize(x2, E4M3)[0] if recipe != "bf16" else x2
        ws = _as_stored_weights(w, recipe)
        bias = round_bf16(b) if b is not None else None
        y = _gemm_bf16([xq @ wk.T for wk in ws], bias)
        ctx.save_for_backward(xq, *ws)
        ctx.recipe, ctx.x_shape, ctx.has_bias = recipe, x.shape, b is not None
        return y.view(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, grad):
        xq, *ws = ctx.saved_tensors
        g = round_bf16(grad.reshape(-1, grad.shape[-1]))
        gq = quantize(g, E5M2)[0] if ctx.recipe != "bf16" else g
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _gemm_bf16([gq @ wk for wk in ws]).view(ctx.x_shape)
        if ctx.needs_input_grad[1]:
            dw = gq.T @ xq
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g.sum(0)
        return dx, dw, db, None
