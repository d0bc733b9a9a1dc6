"""The element formats of FP8 and FP4 GEMM operands, and rounding to them bit for bit.

A quantized operand holds each element in a narrow float format; this module knows the three
that serving uses (and AMD's two FNUZ variants) and rounds float32 values to them with exact float32 arithmetic, so the
result is the same on every device and every torch >= 2.4 (FP4 included: nothing here needs a
float4 dtype).

- ``e4m3fn``: 3 mantissa bits, smallest normal 2^-6, largest 448, no infinity (the one NaN
  pattern takes the place of 480). Rounded without saturation, every value past 464 (448 plus
  half a step) is NaN; a quantizer that clamps first gets 448 instead. torch's own
  ``x.to(torch.float8_e4m3fn)`` has done either, depending on the version and device (NaN in
  the CUDA builds numcheck's docs measured, 448 in torch 2.13's CPU cast), which is why
  saturation is a declared property of a scheme (``saturate``) and never torch's choice.
- ``e5m2``: 2 mantissa bits, smallest normal 2^-14, largest 57344, IEEE infinity (values from
  61440 up round to it).
- ``e2m1`` (FP4): 1 mantissa bit, smallest normal 1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
  their negatives; no infinity and no NaN, so a quantizer must saturate (OCP Microscaling
  Formats (MX) specification v1.0, section 5.3.3).
- ``e4m3fnuz`` and ``e5m2fnuz``: AMD's FP8 on MI300 (CDNA3; torch's ``float8_e4m3fnuz`` and
  ``float8_e5m2fnuz``): the same mantissa bits with the exponent bias one higher, so every
  value is half its e4m3fn / e5m2 counterpart's step for step: e4m3fnuz smallest normal
  2^-7, largest 240; e5m2fnuz smallest normal 2^-15, largest 57344. No infinity, and no
  negative zero: the one NaN is the bit pattern of -0, so a value that rounds to zero is +0.
  Unsaturated, e4m3fnuz's overflow (from 248 up) is NaN, as torch's CPU cast gives.

Rounding is to nearest, ties to even (the mode of every cast and quantizer these formats are
used with), subnormals included. Pure torch; nothing here knows about scales or ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["E2M1_VALUES", "ELEMENT_FORMATS", "ElementFormat", "decode_e2m1", "element_format",
           "encode_e2m1", "is_representable", "pow2", "round_to_element", "unpack_fp4x2"]


@dataclass(frozen=True)
class ElementFormat:
    """One narrow float format: its name, bits, range and the numcheck precision class its
    GEMMs belong to."""

    name: str
    #: Explicit mantissa bits (significant bits minus one).
    mantissa_bits: int
    #: Exponent of the smallest normal value (below it the spacing stays 2^(this - bits)).
    min_exponent: int
    #: The largest finite value.
    max_value: float
    #: True when overflow rounds to infinity (IEEE-like); False for formats without one.
    has_inf: bool
    #: True when the format has a NaN pattern (what an unclamped overflow becomes without inf).
    has_nan: bool
    #: The torch dtype holding it, by attribute name ("" where torch has none on every version).
    torch_dtype: str
    #: The numcheck precision class of a GEMM on these operands.
    precision: str
    #: False for a format without -0 (the FNUZ formats): zero always rounds to +0.
    negative_zero: bool = True

    @property
    def max_exponent(self) -> int:
        """Exponent of the largest power of two in the format (e4m3fn 8, e5m2 15, e2m1 2): the
        ``emax_elem`` of the OCP MX scale rule."""
        return math.frexp(self.max_value)[1] - 1

    @property
    def smallest_subnormal(self) -> float:
        """The spacing of the format below its smallest normal value."""
        return 2.0 ** (self.min_exponent - self.mantissa_bits)

    @property
    def unit_roundoff(self) -> float:
        """``2^-(bits + 1)``: the largest relative error of rounding a normal value."""
        return 2.0 ** -(self.mantissa_bits + 1)


#: The element formats by name.
ELEMENT_FORMATS: dict[str, ElementFormat] = {
    f.name: f
    for f in (
        ElementFormat("e4m3fn", 3, -6, 448.0, has_inf=False, has_nan=True,
                      torch_dtype="float8_e4m3fn", precision="e4m3"),
        ElementFormat("e5m2", 2, -14, 57344.0, has_inf=True, has_nan=True,
                      torch_dtype="float8_e5m2", precision="e5m2"),
        ElementFormat("e2m1", 1, 0, 6.0, has_inf=False, has_nan=False,
                      torch_dtype="", precision="e2m1"),
        ElementFormat("e4m3fnuz", 3, -7, 240.0, has_inf=False, has_nan=True,
                      torch_dtype="float8_e4m3fnuz", precision="e4m3", negative_zero=False),
        ElementFormat("e5m2fnuz", 2, -15, 57344.0, has_inf=False, has_nan=True,
                      torch_dtype="float8_e5m2fnuz", precision="e5m2", negative_zero=False),
    )
}

#: The 16 values of the 4-bit e2m1 codes: bit 3 is the sign, bits 0-2 the magnitude index.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def element_format(name: str) -> ElementFormat:
    """The element format ``name``; ValueError names the known ones."""
    try:
        return ELEMENT_FORMATS[name]
    except KeyError:
        known = ", ".join(ELEMENT_FORMATS)
        raise ValueError(f"unknown element format {name!r}; known: {known}") from None


def pow2(exponent: torch.Tensor) -> torch.Tensor:
    """``2.0 ** exponent`` (an integer tensor) as exact float32, built from the bit pattern
    of a float64 (a library ``pow`` or ``ldexp`` may go through ``exp2``, which need not be
    exact). Exponents from -149 (float32's smallest subnormal) to 127."""
    import torch

    e = exponent.to(torch.int64)
    if e.numel() and (int(e.min()) < -149 or int(e.max()) > 127):
        raise ValueError(f"pow2: exponents must lie in -149..127, got {int(e.min())}.."
                         f"{int(e.max())}")
    return ((e + 1023) << 52).view(torch.float64).to(torch.float32)


#: Formats whose saturating rounding is torch's own conversion to their dtype, clamped.
NATIVE_SATURATING = ("e4m3fn", "e5m2")


def round_to_element(x: torch.Tensor, fmt: ElementFormat | str, *,
                     saturate: bool, exact: bool = False) -> torch.Tensor:
    """float32 ``x`` rounded to the element format, to nearest with ties to even, as float32.

    A value whose rounded magnitude passes the format's largest becomes that largest (with
    its sign) when ``saturate`` is true; otherwise infinity where the format has one (e5m2)
    and NaN where it has not (e4m3fn), as ``x.to(float8 dtype)`` gives. A format without NaN
    (e2m1) must saturate. NaN stays NaN; infinities overflow like any large value.

    The rounding is exact float32 arithmetic: ``x`` divided by the power of two of its
    rounding step, rounded to an integer (ties to even), multiplied back. Saturating to a
    format torch has a dtype for (:data:`NATIVE_SATURATING`), the same bits come from
    torch's conversion of the clamped value, which is used unless ``exact`` asks for the
    arithmetic.
    """
    import torch

    f = element_format(fmt) if isinstance(fmt, str) else fmt
    if x.dtype != torch.float32:
        raise ValueError(f"round_to_element: needs a float32 tensor, got {x.dtype}")
    if not saturate and not (f.has_inf or f.has_nan):
        raise ValueError(f"round_to_element: {f.name} has no infinity and no NaN, so an "
                         "overflow cannot be represented: round with saturate=True")
    if saturate and not exact and f.name in NATIVE_SATURATING:
        # torch's own conversion rounds to nearest even too: clamped first, it gives these
        # bits exactly (tests/test_quant_formats.py compares the two), 8-20x faster.
        native = x.clamp(-f.max_value, f.max_value).to(getattr(torch, f.torch_dtype))
        return torch.where(torch.isnan(x), x, native.to(torch.float32))
    finite = torch.isfinite(x)
    xf = torch.where(finite, x, torch.zeros_like(x))
    _, e = torch.frexp(xf)  # xf = m * 2^e with 0.5 <= |m| < 1: floor(log2 |xf|) = e - 1
    step_exp = torch.clamp(e.to(torch.int64) - 1, min=f.min_exponent) - f.mantissa_bits
    step = pow2(step_exp)
    rounded = torch.round(xf / step) * step  # exact: scaling by powers of two, round to even
    too_big = (rounded.abs() > f.max_value) | torch.isinf(x)
    if saturate:
        over = torch.full_like(x, f.max_value).copysign(x)
    elif f.has_inf:
        over = torch.full_like(x, float("inf")).copysign(x)
    else:
        over = torch.full_like(x, float("nan"))
    out = torch.where(too_big, over, rounded)
    if not f.negative_zero:  # FNUZ: -0's bit pattern is the NaN, so zero is +0
        out = torch.where(out == 0, torch.zeros_like(out), out)
    return torch.where(torch.isnan(x), x, out)


def is_representable(values: torch.Tensor, fmt: ElementFormat | str) -> torch.Tensor:
    """Elementwise: the float32 value is a finite value of the format (its rounding leaves it
    unchanged and it does not pass the largest)."""
    import torch

    f = element_format(fmt) if isinstance(fmt, str) else fmt
    v = values.to(torch.float32)
    finite = torch.isfinite(v) & (v.abs() <= f.max_value)
    safe = torch.where(finite, v, torch.zeros_like(v))
    return finite & (round_to_element(safe, f, saturate=True) == safe)


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """The float32 values of 4-bit e2m1 codes (an integer tensor of values 0..15)."""
    import torch

    if codes.dtype.is_floating_point or codes.dtype == torch.bool:
        raise ValueError(f"decode_e2m1: needs integer codes 0..15, got {codes.dtype}")
    c = codes.to(torch.int64)
    if c.numel() and (int(c.min()) < 0 or int(c.max()) > 15):
        raise ValueError("decode_e2m1: codes must lie in 0..15")
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=codes.device)
    return table[c]


def encode_e2m1(values: torch.Tensor) -> torch.Tensor:
    """The 4-bit codes (uint8, 0..15) of float32 values that e2m1 holds exactly (sign bit 3;
    -0.0 is code 8). ValueError for a value e2m1 cannot hold."""
    import torch

    v = values.to(torch.float32)
    if not bool(is_representable(v, "e2m1").all()):
        raise ValueError("encode_e2m1: a value is not an e2m1 value (round_to_element first)")
    magnitudes = torch.tensor(E2M1_VALUES[:8], dtype=torch.float32, device=v.device)
    index = (v.abs().unsqueeze(-1) == magnitudes).to(torch.int64).argmax(-1)
    return (index + 8 * torch.signbit(v).to(torch.int64)).to(torch.uint8)


def unpack_fp4x2(packed: torch.Tensor) -> torch.Tensor:
    """float32 values of FP4 data packed two codes per byte along the last dimension, the
    element of even index in the low nibble (the layout of NVFP4 and MXFP4 checkpoints and of
    torch's ``float4_e2m1fn_x2``): ``[..., n]`` bytes give ``[..., 2 n]`` values."""
    import torch

    if packed.dtype != torch.uint8:
        packed = packed.view(torch.uint8)
    low = (packed & 0x0F).to(torch.int64)
    high = (packed >> 4).to(torch.int64)
    codes = torch.stack((low, high), dim=-1).flatten(-2)
    return decode_e2m1(codes)
