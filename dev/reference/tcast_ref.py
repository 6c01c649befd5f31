#!/usr/bin/env python3
"""Independent numpy reference of the TensorCast virtual cast (doc/TCAST.md sections 1-4).

Written from doc/TCAST.md alone (not from llmc/numerics/tcast.h) so that the two implementations
can be compared bit for bit (dev/test/test_tcast_reference.py drives both).

Public API
----------
parse_number(code) -> NumberSpec        number codes, section 1.1 (ValueError naming the code)
parse_scale(code)  -> ScaleSpec         scale codes, section 2
parse_fixed(code)  -> int               the fixed scale pN of section 2: N
parse_dtype(text)  -> DataType          DTYPE text with @ modifiers, section 3
number_info(code)  -> dict              derived values of a number code (section 1.2)
describe_dtype(text) -> dict            the parsed pieces of a DTYPE text
vcast(x, dtype, dim=-1, seed=0) -> (float32 ndarray, stats dict)
                                        the virtual cast of a 2-D float32 tensor (section 4)
random_bits(seed, index) -> uint64 ndarray of 32-bit values, section 1.4
cast_float(v, spec, mode, u=None) -> (float64 ndarray, saturated mask): section 1.3 on exact reals

Exactness (section 1.3 says element rounding is exact real arithmetic): every float32 is
m * 2^k with |m| < 2^24 and -149 <= k <= 104. All the exponent-scale arithmetic multiplies such
values by powers of two 2^j with |j| <= 404 (scales of eXm0 codes with any bias that can be reached
from float32 data, see _scaled_exponent), so results stay inside float64's normal range
(2^-1022 .. 2^1024) and every product is exact. Element rounding works on t = |v| * 2^(Y - e),
a power-of-two multiple, t < 2^(Y+1) <= 2^24; floor(t) and t - floor(t) are exact (the fraction
bits of a double are a subset of its significand), f * 2^32 is exact, and the random word u < 2^32
is an exact double, so `u < f * 2^32` is the exact real comparison of section 1.4. n <= 2^24, so
n * 2^(e - Y) is exact unless it falls below 2^-1022 (only for biases above ~1000), in which case
the float32 result is +-0 from both the exact and the computed value. Each result is then rounded
once, float64 -> float32, with numpy's correctly rounded (RNE) conversion, as section 1.3 ends.
The float-scale paths (4b, 4c) are *defined* as float32 arithmetic with RNE at every operation;
numpy's float32 + - * / on float32 arrays are IEEE single operations (correctly rounded, no FMA
contraction, subnormals kept), which is exactly that.

Resolved ambiguities (where doc/TCAST.md leaves a choice; listed again in the test file):
* Codes, names and modifiers are matched case-insensitively; numbers in codes are decimal digit
  strings (leading zeros allowed), the bias Z any non-negative integer.
* `eXm0bZ` (ieee, any bias) is the exponent type; info of an exponent prints kind=exponent,
  infnan=ieee, bits=X, mbits=0; of an int: ebits=1, mbits=K-2, bias=1, infnan=fnuz (its float
  view); of a uint: ebits=0, mbits=0, bias=0, infnan=none.
* The predefined name is matched on the whole text before the first `@` (case-insensitively, no
  prefix removal); the printed name of a predefined type is its table name in lower case,
  otherwise the text as given (original case, prefixes kept) without the modifiers.
* Later modifiers override earlier ones of the same kind; M:N needs 1 <= M < N (M = N would not
  be sparse). (The C tool also limits N to 32; the reference does not, and tests stay below.)
* The tile token must be last; dY must be one of -2, -1, 0, 1 (2-D tensors only).
* A uintK data type needs a zero point (section 4c is defined only with one); so it takes no fixed
  scale pN. A fixed scale is a DataType with scale None and fixed = N: it derives no scale, so the
  statistics histogram stays empty, and it casts element by element (NaN stays NaN, Inf per 1.3).
  N may carry a '+' or '-' sign and leading zeros; N in -127..127 (section 2).
* The cast's tile/sparsity dimension d is the `dim` argument (section 4: d comes "from the scale
  spec, or chosen by the trainer"). A scale spec that spells dY explicitly (even d-1) fixes d: a
  `dim` naming the other dimension is a ValueError (-1 = 1 and 0 = -2 agree); without dY any dim
  is taken. dim=None takes the spec's dY (default -1). This is also what the C tool does.
* Unscaled types print tile=-1 and dim=-1.
* In 4b/4c n is an integer: a result n * scale with n = 0 is +0 (never -0).
* round_R of a negative float-path value v is sign(v) * round_R(|v|) (section 1.4 rounds |v|).
* Statistics: flushed counts non-zero finite inputs of the (pruned) tensor the cast sees, so
  pruned elements are not flushed; groups holding NaN/Inf have no scale and are not in the
  histogram; an exponent scale past the top (group NaN) counts in bin "over"; a float scale of 0
  counts in "under", an Inf/NaN float scale in "over"; every other group adds one to its exponent.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

ROUND_MODES = ("even", "nearest", "zero", "stochastic")
SCALE_MODES = ("max", "midmax")
M64 = (1 << 64) - 1

# ------------------------------------------------------------------ number specs (section 1)

_ALIASES = {"float32": "e8m23", "bfloat16": "e8m7", "float16": "e5m10",
            "e4m3fnuz": "e4m3b8fnuz", "e5m2fnuz": "e5m2b16fnuz"}
_FLOAT_RE = re.compile(r"e([0-9]+)m([0-9]+)(?:b([0-9]+))?(fn|fnuz)?")
_INT_RE = re.compile(r"(u?)int([0-9]+)")


@dataclass(frozen=True)
class NumberSpec:
    """A number format (section 1). kind: 'float' | 'int' | 'uint' | 'exponent'.

    Floats: ebits X, mbits Y, bias Z, infnan 'ieee' | 'fn' | 'fnuz'. Ints keep their float view
    e1m(K-2)b1fnuz in ebits/mbits/bias/infnan (section 1.2), bits = K. Uints: bits = K only.
    Exponents eXm0bZ: ebits X, bias Z, infnan 'ieee'.
    """
    kind: str
    bits: int
    ebits: int
    mbits: int
    bias: int
    infnan: str

    # -- derived values (section 1.2); exact in float64 for every valid code
    @property
    def emax(self) -> int:
        if self.kind == "exponent":
            return 2 ** self.ebits - 2 - self.bias
        return 2 ** self.ebits - 1 - self.bias - (1 if self.infnan == "ieee" else 0)

    @property
    def emin(self) -> int:
        if self.kind == "exponent":
            return -self.bias
        return 1 - self.bias

    @property
    def max(self) -> float:
        """Largest finite value (float/int view); for uint the largest code maxint."""
        if self.kind == "uint":
            return float(self.maxint)
        if self.kind == "exponent":
            return _ldexp(1.0, self.emax)
        lead = 2.0 - 2.0 ** (1 - self.mbits) if self.infnan == "fn" else 2.0 - 2.0 ** -self.mbits
        return _ldexp(lead, self.emax)

    @property
    def midmax(self) -> float:
        return (self.max + _ldexp(1.0, self.emax + 1)) / 2.0  # exact: both have <= 25 bits

    @property
    def smallest_normal(self) -> float:
        return _ldexp(1.0, self.emin)

    @property
    def eps(self) -> float:
        return 2.0 ** -self.mbits

    @property
    def maxint(self) -> int:
        if self.kind == "int":
            return 2 ** (self.bits - 1) - 1
        if self.kind == "uint":
            return 2 ** self.bits - 1
        raise ValueError(f"{self.code}: not an integer format")

    @property
    def minint(self) -> int:
        return -self.maxint if self.kind == "int" else 0

    @property
    def code(self) -> str:
        """Canonical code: e{X}m{Y}b{Z}[fn|fnuz], int{K}, uint{K}, e{X}m0b{Z}."""
        if self.kind == "int":
            return f"int{self.bits}"
        if self.kind == "uint":
            return f"uint{self.bits}"
        if self.kind == "exponent":
            return f"e{self.ebits}m0b{self.bias}"
        suffix = "" if self.infnan == "ieee" else self.infnan
        return f"e{self.ebits}m{self.mbits}b{self.bias}{suffix}"

    @property
    def zero_is_unsigned(self) -> bool:
        """Section 1.3 steps 3-4: zero results are +0 in fnuz mode and for ints."""
        return self.infnan == "fnuz" or self.kind == "int"


def _ldexp(m: float, e: int) -> float:
    """m * 2^e as a float (0.0 on underflow, inf on overflow); exact inside float64's range."""
    if e > 1100:
        return float("inf")
    if e < -1200:
        return 0.0
    return float(np.ldexp(m, e))


def _strip_prefixes(low: str) -> str:
    """Remove one leading `torch.` and then one leading `float8_` (section 1.1)."""
    if low.startswith("torch."):
        low = low[len("torch."):]
    if low.startswith("float8_"):
        low = low[len("float8_"):]
    return low


def parse_number(code: str) -> NumberSpec:
    """Parse a number code (section 1.1) into a NumberSpec; ValueError names the code and reason."""
    if not isinstance(code, str):
        raise ValueError(f"invalid number code {code!r}: not a string")
    low = _strip_prefixes(code.lower())
    low = _ALIASES.get(low, low)
    m = _FLOAT_RE.fullmatch(low)
    if m:
        x, y = int(m.group(1)), int(m.group(2))
        mode = m.group(4) or "ieee"
        if not 1 <= x <= 8:
            raise ValueError(f"invalid number code '{code}': exponent bits {x} outside 1..8")
        if not 0 <= y <= 23:
            raise ValueError(f"invalid number code '{code}': mantissa bits {y} outside 0..23")
        bias = int(m.group(3)) if m.group(3) is not None else 2 ** (x - 1) - 1
        if y == 0 and mode == "ieee":
            if not 4 <= x <= 8:
                raise ValueError(f"invalid number code '{code}': exponent type eXm0 needs X in 4..8, got {x}")
            return NumberSpec("exponent", x, x, 0, bias, "ieee")
        if y == 0 and mode == "fn":
            raise ValueError(f"invalid number code '{code}': fn with 0 mantissa bits (its only top-binade code is NaN)")
        spec = NumberSpec("float", 1 + x + y, x, y, bias, mode)
        if spec.emax < spec.emin:
            raise ValueError(f"invalid number code '{code}': emax {spec.emax} < emin {spec.emin} (no normal binade)")
        return spec
    m = _INT_RE.fullmatch(low)
    if m:
        k = int(m.group(2))
        if not 2 <= k <= 16:
            raise ValueError(f"invalid number code '{code}': integer bits {k} outside 2..16")
        if m.group(1):
            return NumberSpec("uint", k, 0, 0, 0, "none")
        return NumberSpec("int", k, 1, k - 2, 1, "fnuz")
    raise ValueError(f"invalid number code '{code}': not eXmY[bZ][fn|fnuz], intK, uintK or an alias")


def number_info(code) -> dict:
    """Derived values of a number code (section 1.2) as a dict.

    Keys: kind, bits, ebits, mbits, bias, infnan, code (canonical); floats and ints add emax,
    emin, max, smallest_normal, eps, midmax (floats as Python floats, exact); ints and uints add
    maxint, minint; exponents add emax, emin, nan_code (2^X - 1).
    """
    s = code if isinstance(code, NumberSpec) else parse_number(code)
    d = dict(kind=s.kind, bits=s.bits, ebits=s.ebits, mbits=s.mbits, bias=s.bias, infnan=s.infnan)
    if s.kind in ("float", "int"):
        d.update(emax=s.emax, emin=s.emin, max=s.max, smallest_normal=s.smallest_normal, eps=s.eps,
                 midmax=s.midmax)
    if s.kind in ("int", "uint"):
        d.update(maxint=s.maxint, minint=s.minint)
    if s.kind == "exponent":
        d.update(emax=s.emax, emin=s.emin, nan_code=2 ** s.ebits - 1)
    d["code"] = s.code
    return d


# ------------------------------------------------------------------ scale specs (section 2)

_TILE_RE = re.compile(r"t([0-9]+)(?:d(-?[0-9]+))?")


@dataclass(frozen=True)
class ScaleSpec:
    """A scale spec (section 2): scale number, optional zero point, tile (-1 tensor, 0 channel,
    X tile size) and the tile dimension dim (-2, -1, 0 or 1)."""
    scale: NumberSpec
    zero: Optional[NumberSpec]
    tile: int
    dim: int
    dim_explicit: bool = False  # the code spelled dY

    @property
    def code(self) -> str:
        parts = [self.scale.code] + ([self.zero.code] if self.zero else [])
        if self.tile >= 0:
            parts.append(f"t{self.tile}" + (f"d{self.dim}" if self.dim != -1 else ""))
        return "_".join(parts)


def parse_scale(code: str) -> ScaleSpec:
    """Parse `SCALE[_ZERO][_tX[dY]]` (section 2). Does not check which data it fits (parse_dtype)."""
    low = code.lower()
    toks = low.split("_")
    if any(t == "" for t in toks):
        raise ValueError(f"invalid scale code '{code}': empty token")
    tile, dim, explicit = -1, -1, False
    m = _TILE_RE.fullmatch(toks[-1]) if len(toks) > 1 else None
    if m:
        toks = toks[:-1]
        tile = int(m.group(1))
        if tile != 0 and not (2 <= tile <= 1024 and tile & (tile - 1) == 0):
            raise ValueError(f"invalid scale code '{code}': tile size {tile} is not 0 or a power of two in 2..1024")
        if m.group(2) is not None:
            dim, explicit = int(m.group(2)), True
            if dim not in (-2, -1, 0, 1):
                raise ValueError(f"invalid scale code '{code}': tile dimension {dim} is not -2, -1, 0 or 1")
    if len(toks) > 2:
        raise ValueError(f"invalid scale code '{code}': expected SCALE[_ZERO][_tX[dY]]")
    for t in toks:
        if _TILE_RE.fullmatch(t):
            raise ValueError(f"invalid scale code '{code}': the tile token '{t}' must come last")
    scale = parse_number(toks[0])
    zero = parse_number(toks[1]) if len(toks) == 2 else None
    return ScaleSpec(scale, zero, tile, dim, explicit)


FIXED_RANGE = (-127, 127)  # N of a fixed scale pN: the exponents an E8M0 scale can hold (section 2)
_FIXED_RE = re.compile(r"p([+-]?[0-9]+)")


def parse_fixed(code: str) -> int:
    """Parse a fixed scale code `pN` (section 2): a power of two 2^N known in advance, one for the whole
    tensor, no zero point; so nothing may follow it. Returns N; ValueError otherwise."""
    low = code.lower()
    head, _, rest = low.partition("_")
    if rest:
        what = "tile token" if _TILE_RE.fullmatch(rest) else "token"
        raise ValueError(f"invalid scale code '{code}': the fixed scale {head} is per tensor with no zero point; "
                         f"unexpected {what} '{rest}'")
    m = _FIXED_RE.fullmatch(low)
    if not m:
        raise ValueError(f"invalid scale code '{code}': a fixed scale is pN with N a decimal integer")
    n = int(m.group(1))
    if not FIXED_RANGE[0] <= n <= FIXED_RANGE[1]:
        raise ValueError(f"invalid scale code '{code}': fixed scale exponent {n} outside {FIXED_RANGE[0]}..{FIXED_RANGE[1]}")
    return n


# ------------------------------------------------------------------ data types (section 3)

@dataclass(frozen=True)
class DataType:
    """A data type (section 3): name, number, optional scale, round mode, scale mode, M:N sparsity;
    fixed = N for a fixed scale pN (then scale is None: no scale is derived from the data)."""
    name: str
    number: NumberSpec
    scale: Optional[ScaleSpec]
    round: str = "even"
    scalemode: str = "max"
    sparse: Optional[tuple] = None
    fixed: Optional[int] = None


def _predefined() -> dict:
    """name -> (number code, scale code or None), section 3's table."""
    p = {}
    for n in ("float32", "bfloat16", "float16", "e5m2", "e4m3fn", "e5m2fnuz", "e4m3fnuz", "e3m2fnuz",
              "e2m3fnuz", "e2m1fnuz"):
        p[n] = (n, None)
    fl = {"f": "float16", "b": "bfloat16", "e": "e8m0", "i": "int8"}
    for k in ("ff", "bb"):
        p[f"uint16_{k}"] = ("uint16", f"{fl[k[0]]}_{fl[k[1]]}")
    for k in ("f", "b", "e"):
        p[f"int16_{k}"] = ("int16", fl[k])
        p[f"int8_{k}"] = ("int8", fl[k])
    p["q115"] = ("int16", "p-1")  # Q1.15 of the SF16 build: n / 2^15, |n| <= 32767
    for k in ("ff", "bb", "fi", "bi"):
        p[f"uint8_{k}"] = ("uint8", f"{fl[k[0]]}_{fl[k[1]]}")
        p[f"uint8_{k}32"] = ("uint8", f"{fl[k[0]]}_{fl[k[1]]}_t32")
        p[f"uint4_{k}32"] = ("uint4", f"{fl[k[0]]}_{fl[k[1]]}_t32")
    for n, num in (("e5m2_e", "e5m2"), ("e5m2z_e", "e5m2fnuz"), ("e4m3_e", "e4m3fn"), ("e4m3z_e", "e4m3fnuz"),
                   ("e3m2_e", "e3m2fnuz"), ("e2m3_e", "e2m3fnuz")):
        p[n] = (num, "e8m0")
    for n, num in (("mxfp8e5", "e5m2"), ("mxfp8e4", "e4m3fn"), ("mxfp6e3", "e3m2fnuz"), ("mxfp6e2", "e2m3fnuz"),
                   ("mxfp4e2", "e2m1fnuz"), ("mxint8", "int8"), ("mxint4", "int4")):
        p[n] = (num, "e8m0_t32")
    p["bfp16"] = ("int8", "e8m0_t8")
    for n in ("int8", "int4"):
        for k in ("f", "b"):
            p[f"{n}_{k}32"] = (n, f"{fl[k]}_t32")
    return p


PREDEFINED = _predefined()


def _check_combination(text: str, number: NumberSpec, scale: Optional[ScaleSpec], fixed: Optional[int]) -> None:
    """Which scales each data kind takes (section 2's table); ValueError naming both specs."""
    if number.kind == "exponent":
        raise ValueError(f"invalid data type '{text}': exponent type {number.code} is not a data type")
    if fixed is not None:
        if number.kind == "uint":
            raise ValueError(f"invalid data type '{text}': uint data {number.code} needs a zero point, "
                             f"which the fixed scale p{fixed} does not have")
        return
    if scale is None:
        if number.kind in ("int", "uint"):
            raise ValueError(f"invalid data type '{text}': unscaled integer type {number.code} is unsupported")
        return
    sk = scale.scale.kind
    zk = scale.zero.kind if scale.zero else None
    what = f"data {number.code} with scale {scale.code}"
    if number.kind == "float":
        if sk != "exponent":
            raise ValueError(f"invalid data type '{text}': {what}: float data takes only an exponent scale")
        if zk:
            raise ValueError(f"invalid data type '{text}': {what}: float data takes no zero point")
    elif number.kind == "int":
        if sk not in ("exponent", "float"):
            raise ValueError(f"invalid data type '{text}': {what}: int data takes an exponent or float scale")
        if zk:
            raise ValueError(f"invalid data type '{text}': {what}: int data takes no zero point")
    elif number.kind == "uint":
        if sk != "float":
            raise ValueError(f"invalid data type '{text}': {what}: uint data takes a float scale")
        if zk is None:
            raise ValueError(f"invalid data type '{text}': {what}: uint data needs a zero point")
        if zk not in ("float", "int"):
            raise ValueError(f"invalid data type '{text}': {what}: a uint zero point is a float or an intK")


def parse_dtype(text) -> DataType:
    """Parse `(NAME | NUMBER[_SCALE]) {@MOD}` (section 3) into a DataType; ValueError otherwise."""
    if isinstance(text, DataType):
        return text
    if not isinstance(text, str) or text == "":
        raise ValueError(f"invalid data type {text!r}: empty")
    base, *mods = text.split("@")
    if base == "":
        raise ValueError(f"invalid data type '{text}': no number code before '@'")
    rnd, smode, sparse = "even", "max", None
    for mod in mods:
        ml = mod.lower()
        if ml in ROUND_MODES:
            rnd = ml
        elif ml in SCALE_MODES:
            smode = ml
        elif re.fullmatch(r"[0-9]+:[0-9]+", ml):
            mm, nn = (int(v) for v in ml.split(":"))
            if not 1 <= mm < nn:
                raise ValueError(f"invalid data type '{text}': sparsity {mod} needs 1 <= M < N")
            sparse = (mm, nn)
        else:
            raise ValueError(f"invalid data type '{text}': unknown modifier '@{mod}'")
    low = base.lower()
    if low in PREDEFINED:
        name = low
        ncode, scode = PREDEFINED[low]
    else:
        name = base
        rest = _strip_prefixes(low)
        ncode, _, scode = rest.partition("_")
        if "_" not in rest:
            scode = None
    fixed = None
    try:
        number = parse_number(ncode)
        if scode is not None and scode.startswith("p"):  # no number code starts with p
            fixed, scale = parse_fixed(scode), None
        else:
            scale = parse_scale(scode) if scode is not None else None
    except ValueError as e:
        raise ValueError(f"invalid data type '{text}': {e}") from None
    _check_combination(text, number, scale, fixed)
    return DataType(name, number, scale, rnd, smode, sparse, fixed)


def describe_dtype(text) -> dict:
    """The pieces of a DTYPE text: name, number, scale, zero (canonical codes, 'pN' for a fixed scale,
    or 'none'), tile (-1 tensor, fixed or unscaled, 0 channel, X tile), dim, round, scalemode, sparse
    ('M:N' or 'none')."""
    dt = parse_dtype(text)
    sc = dt.scale
    scode = sc.scale.code if sc else (f"p{dt.fixed}" if dt.fixed is not None else "none")
    return dict(name=dt.name, number=dt.number.code, scale=scode,
                zero=sc.zero.code if sc and sc.zero else "none", tile=sc.tile if sc else -1,
                dim=sc.dim if sc else -1, round=dt.round, scalemode=dt.scalemode,
                sparse=f"{dt.sparse[0]}:{dt.sparse[1]}" if dt.sparse else "none")


# ------------------------------------------------------------------ rounding (sections 1.3, 1.4)

def _mix64(z: int) -> int:
    z &= M64
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return z


def random_bits(seed: int, index) -> np.ndarray:
    """u(seed, index) of section 1.4 for an array of flat element indices: uint64 values < 2^32.

    numpy uint64 array arithmetic wraps modulo 2^64, which is the definition's arithmetic.
    """
    state = _mix64((int(seed) & M64) ^ 0x6A09E667F3BCC909)
    z = np.asarray(index, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(state) + (z + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z >> np.uint64(32)


def random_bits_scalar(seed: int, index: int) -> int:
    """Pure-Python u(seed, index) (section 1.4), the check of random_bits."""
    state = _mix64((seed & M64) ^ 0x6A09E667F3BCC909)
    return _mix64(state + ((index + 1) * 0x9E3779B97F4A7C15 & M64)) >> 32


def _round_up(lo, f, mode, u):
    """Whether round_R(t) = lo + 1 for t = lo + f, f in [0, 1) exact doubles (section 1.4)."""
    if mode == "even":
        return (f > 0.5) | ((f == 0.5) & (np.fmod(lo, 2.0) == 1.0))
    if mode == "nearest":
        return f >= 0.5
    if mode == "zero":
        return np.zeros(np.shape(f), dtype=bool)
    if mode == "stochastic":
        return u.astype(np.float64) < f * 4294967296.0  # exact: see the module docstring
    raise ValueError(f"unknown round mode {mode}")


def round_int(v, mode: str, u=None, cap: float = 2.0 ** 26):
    """round_R of real values v (float64 array, exact) to integers, as sign(v) * round_R(|v|).

    |v| is first capped at `cap` (callers clamp the result to a range far below it). NaN stays NaN.
    Returns float64 integers, zero as +0.
    """
    v = np.asarray(v, dtype=np.float64)
    t = np.minimum(np.abs(v), cap)
    lo = np.floor(t)
    n = lo + _round_up(lo, t - lo, mode, u)
    return np.where(v < 0, -n, n) + 0.0  # + 0.0 turns -0 into +0


def cast_float(v, spec: NumberSpec, mode: str, u=None):
    """Unscaled cast (section 1.3) of exact real values v (float64 array) to a float or int spec.

    u: the elements' random words (uint64 array, same shape) for mode 'stochastic'.
    Returns (r, saturated): r float64 holding the exact result (round to float32 afterwards),
    saturated a bool mask of finite values whose rounded magnitude exceeded max.
    """
    v = np.asarray(v, dtype=np.float64)
    out = v.copy()
    sat = np.zeros(v.shape, dtype=bool)
    a = np.abs(v)
    inf = np.isinf(v)
    if spec.infnan != "ieee":
        out[inf] = np.copysign(spec.max, v[inf])  # step 2: saturation in fn / fnuz (and ints)
    fin = np.isfinite(v)
    if spec.zero_is_unsigned:
        out[fin & (a == 0)] = 0.0  # step 3: +0 in fnuz mode and for ints
    nz = fin & (a > 0)
    if not nz.any():
        return out, sat
    av, vs = a[nz], v[nz]
    ex = np.frexp(av)[1].astype(np.int64) - 1  # floor(log2 |v|), exact
    e = np.maximum(ex, spec.emin)
    sh = spec.mbits - e  # t = |v| * 2^sh
    tiny = ex + sh < -1000  # t < 2^-1000: keep it symbolic (0 < f < 2^-1000) to avoid underflow
    t = np.where(tiny, 0.0, np.ldexp(av, np.where(tiny, 0, sh)))
    lo = np.floor(t)
    f = t - lo
    if mode == "stochastic":
        uu = u[nz]
        up = np.where(tiny, uu == 0, _round_up(lo, f, mode, uu))
    else:
        up = _round_up(lo, f, mode, None)
    n = lo + up
    r = np.ldexp(n, e - spec.mbits)
    s = r > spec.max
    r = np.where(s, spec.max, r)
    sat[nz] = s
    res = np.copysign(r, vs)
    zero = n == 0
    res[zero] = 0.0 if spec.zero_is_unsigned else np.copysign(0.0, vs[zero])
    out[nz] = res
    return out, sat


def cast_even_f32(a32, spec: NumberSpec) -> np.ndarray:
    """cast_even(a, S) of sections 4b/4c: 1.3 with mode even, then float32 (RNE)."""
    r, _ = cast_float(np.asarray(a32, dtype=np.float64), spec, "even")
    with np.errstate(over="ignore"):
        return r.astype(np.float32)


# ------------------------------------------------------------------ the cast (section 4)

def _prune(g: np.ndarray, m: int, n: int) -> np.ndarray:
    """M:N sparsity (4.1) along the last axis of g (float32 2-D): keep M of each N, others +0."""
    rows, cols = g.shape
    if cols % n:
        raise ValueError(f"sparsity {m}:{n}: N={n} does not divide the size {cols} along the dimension")
    grp = g.reshape(-1, n)
    key = np.abs(grp).astype(np.float64)
    key[np.isinf(grp)] = 1e300  # above every finite float32 magnitude
    key[np.isnan(grp)] = np.inf  # NaN counts as larger than every number
    order = np.argsort(-key, axis=1, kind="stable")  # stable: equal magnitudes keep the lower index
    keep = np.zeros(grp.shape, dtype=bool)
    np.put_along_axis(keep, order[:, :m], True, axis=1)
    return np.where(keep, grp, np.float32(0.0)).astype(np.float32).reshape(rows, cols)


def _hist_add(hist: dict, keys) -> None:
    for k in keys:
        k = k if isinstance(k, str) else int(k)
        hist[k] = hist.get(k, 0) + 1


def _scaled_exponent(g, u, dt: DataType):
    """4a: float or int data, exponent scale. g float32 (G, T) groups, finite. Returns
    (result float32, saturated mask, group NaN mask, per-group s, overflow mask)."""
    F, S = dt.number, dt.scale.scale
    b, top = S.bias, 2 ** S.ebits - 2 - S.bias
    g64 = g.astype(np.float64)
    amax = np.abs(g64).max(axis=1)
    s = np.frexp(amax)[1].astype(np.int64) - 1 - F.emax  # floor(log2 amax) - emax_F
    if dt.scalemode == "midmax":
        with np.errstate(over="ignore"):
            s = s + (np.ldexp(amax, -s) > F.midmax)  # exact: power-of-two scaling, exact midmax
    s = np.where(amax == 0, -b, s)
    s = np.maximum(s, -b)
    over = s > top
    s = np.where(over, 0, s)  # those groups become NaN below
    # |s| <= 404 for float32 data: s >= -149 - 255 (amax >= 2^-149, emax_F <= 255) unless clamped
    # to -b (then x * 2^b with b < 404, or all zeros); s <= top <= 254. So y is exact.
    y = np.ldexp(g64, -s[:, None])
    r, sat = cast_float(y, F, dt.round, u)
    with np.errstate(over="ignore", under="ignore"):
        res = np.ldexp(r, s[:, None]).astype(np.float32)  # exact product, then RNE to float32
    res[over] = np.nan
    sat[over] = False
    return res, sat, s, over


def _scaled_int_float(g, u, dt: DataType):
    """4b: intK data with a float scale; float32 arithmetic with RNE (numpy float32 ops)."""
    F, S = dt.number, dt.scale.scale
    maxint = F.maxint
    amax = np.abs(g).max(axis=1)  # float32, exact
    with np.errstate(all="ignore"):
        scale = cast_even_f32(amax / np.float32(maxint), S)  # float32 divide (RNE), then cast_even
        y = g / scale[:, None]  # float32 divide (RNE)
    n = round_int(y.astype(np.float64), dt.round, u)
    sat = np.abs(n) > maxint
    n = np.clip(n, -maxint, maxint)
    with np.errstate(all="ignore"):
        res = n.astype(np.float32) * scale[:, None]  # n exact in float32 (|n| < 2^16); float32 mul
    res = np.where((scale == 0)[:, None], np.float32(0.0), res)
    sat &= (scale != 0)[:, None]
    return res.astype(np.float32), sat, scale


def _scaled_uint(g, u, dt: DataType):
    """4c: uintK data, float scale, float or intK zero point; float32 arithmetic with RNE."""
    F, S, Z = dt.number, dt.scale.scale, dt.scale.zero
    maxint = F.maxint
    f0 = np.float32(0.0)
    tmin = np.minimum(g.min(axis=1), f0)
    tmax = np.maximum(g.max(axis=1), f0)
    with np.errstate(all="ignore"):
        scale = cast_even_f32((tmax - tmin) / np.float32(maxint), S)  # float32 sub, div; cast_even
        sc = scale[:, None]
        if Z.kind == "float":
            zero = cast_even_f32(-tmin, Z)[:, None]
            n = round_int(((g + zero) / sc).astype(np.float64), dt.round, u)  # float32 add, div
            sat = (n < 0) | (n > maxint)
            n = np.clip(n, 0, maxint)
            res = n.astype(np.float32) * sc - zero  # float32 mul, sub
        else:
            mz = Z.maxint
            zero = np.clip(round_int(((-tmin) / scale).astype(np.float64), "even"), -mz, mz)[:, None]
            n = round_int((g / sc).astype(np.float64), dt.round, u) + zero
            sat = (n < 0) | (n > maxint)
            n = np.clip(n, 0, maxint)
            res = (n - zero).astype(np.float32) * sc  # n - zero exact integer; float32 mul
    res = np.where((scale == 0)[:, None], f0, res)
    sat &= (scale != 0)[:, None]
    return res.astype(np.float32), sat, scale


def vcast(x, dtype, dim: Optional[int] = -1, seed: int = 0):
    """The virtual cast of section 4.

    x: float32 array of shape (rows, cols), row-major. dtype: DTYPE text or DataType.
    dim: the tile / sparsity dimension d (-1 or 1: along a row, 0 or -2: along a column);
    None takes the scale spec's dY; an explicit dY that names the other dimension is an error. seed: 64-bit seed of the stochastic rounding (section 1.4).
    Returns (y, stats): y float32 (rows, cols); stats = {'values', 'saturated', 'flushed',
    'scale_exp': {exponent (int) or 'under' / 'over': number of groups}} (section 4.5).
    ValueError for bad types, dims, or sizes that the tile / sparsity N does not divide.
    """
    dt = parse_dtype(dtype)
    x = np.asarray(x)
    if x.dtype != np.float32 or x.ndim != 2:
        raise ValueError(f"vcast: x must be a 2-D float32 array, got {x.dtype} {x.shape}")
    if dim is None:
        dim = dt.scale.dim if dt.scale else -1
    if dim not in (-2, -1, 0, 1):
        raise ValueError(f"vcast: dimension {dim} is not -2, -1, 0 or 1")
    if dt.scale and dt.scale.dim_explicit and (dim in (0, -2)) != (dt.scale.dim in (0, -2)):
        raise ValueError(f"vcast: {dt.name}: the scale spec's d{dt.scale.dim} conflicts with the cast dimension {dim}")
    rows, cols = x.shape
    trans = dim in (0, -2)
    idx = np.arange(rows * cols, dtype=np.uint64).reshape(rows, cols)  # flat row-major index
    xt = np.ascontiguousarray(x.T if trans else x)
    it = np.ascontiguousarray(idx.T if trans else idx)
    R, C = xt.shape  # C: size along d
    if dt.sparse:
        xt = _prune(xt, *dt.sparse)
    u = random_bits(seed, it) if dt.round == "stochastic" else None
    hist: dict = {}
    sc = dt.scale
    if sc is None:
        # unscaled (1.3), or a fixed scale 2^N (section 4d): every element alone,
        # v = x / 2^N (exact in float64: |N| <= 127 keeps every float32 in range), cast by 1.3,
        # times 2^N (exact), then one rounding to float32; no scale is derived, no histogram entry
        n = dt.fixed or 0
        r, sat = cast_float(np.ldexp(xt.astype(np.float64), -n), dt.number, dt.round, u)
        with np.errstate(over="ignore", under="ignore"):
            out = np.ldexp(r, n).astype(np.float32)
    else:
        if sc.tile > 0:
            if C % sc.tile:
                raise ValueError(f"vcast: tile size {sc.tile} does not divide the size {C} along dimension {dim}")
            shape = (R * C // sc.tile, sc.tile)
        elif sc.tile == 0:
            shape = (R, C)
        else:
            shape = (1, R * C)
        g = xt.reshape(shape)
        ug = u.reshape(shape) if u is not None else None
        special = ~np.isfinite(g).all(axis=1)
        gf = np.where(special[:, None], np.float32(0.0), g)  # specials' groups: computed, then NaN
        if sc.scale.kind == "exponent":
            res, sat, s, over = _scaled_exponent(gf, ug, dt)
            _hist_add(hist, s[~special & ~over])
            _hist_add(hist, ["over"] * int((over & ~special).sum()))
        else:
            if dt.number.kind == "int":
                res, sat, scale = _scaled_int_float(gf, ug, dt)
            else:
                res, sat, scale = _scaled_uint(gf, ug, dt)
            sc_ok = scale[~special]
            pos = np.isfinite(sc_ok) & (sc_ok > 0)
            _hist_add(hist, np.frexp(sc_ok[pos].astype(np.float64))[1] - 1)
            _hist_add(hist, ["under"] * int((sc_ok == 0).sum()))
            _hist_add(hist, ["over"] * int((~np.isfinite(sc_ok)).sum()))
        res = np.where(special[:, None], np.float32(np.nan), res)
        sat = sat & ~special[:, None]
        out = res.reshape(R, C)
        sat = sat.reshape(R, C)
    flushed = np.isfinite(xt) & (xt != 0) & (out == 0)
    stats = dict(values=int(x.size), saturated=int(sat.sum()), flushed=int(flushed.sum()),
                 scale_exp=dict(sorted(hist.items(), key=lambda kv: (isinstance(kv[0], str), kv[0]))))
    out = np.ascontiguousarray(out.T if trans else out).astype(np.float32)
    return out, stats


# ------------------------------------------------------------------ a CLI like dev/test/tcast_cli.c

def _fmt(v) -> str:
    return "%.17g" % v if isinstance(v, float) else str(v)


def main(argv) -> int:
    """`tcast_ref.py info CODE | dtype DTYPE | cast DTYPE ROWS COLS DIM SEED IN OUT [STATS]`,
    the same interface as build/tests/tcast_cli (for hand comparisons)."""
    try:
        if len(argv) == 2 and argv[0] == "info":
            for k, v in number_info(argv[1]).items():
                if k != "nan_code":
                    print(f"{k}={_fmt(v)}")
        elif len(argv) == 2 and argv[0] == "dtype":
            for k, v in describe_dtype(argv[1]).items():
                print(f"{k}={v}")
        elif len(argv) in (8, 9) and argv[0] == "cast":
            rows, cols, dim, seed = int(argv[2]), int(argv[3]), int(argv[4]), int(argv[5])
            x = np.fromfile(argv[6], dtype="<f4")
            if x.size != rows * cols:
                raise ValueError(f"{argv[6]}: {x.size} values, expected {rows * cols}")
            y, st = vcast(x.astype(np.float32).reshape(rows, cols), argv[1], dim, seed)
            y.astype("<f4").tofile(argv[7])
            if len(argv) == 9:
                with open(argv[8], "w") as f:
                    f.write(f"values={st['values']}\nsaturated={st['saturated']}\nflushed={st['flushed']}\n")
                    for k, v in st["scale_exp"].items():
                        f.write(f"scale_exp[{k}]={v}\n")
        else:
            print(main.__doc__, file=sys.stderr)
            return 2
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
