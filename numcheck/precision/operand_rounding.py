"""Rounding fp32 values to the operand formats of tensor-core GEMMs, bit for bit.

A GEMM of a low precision class first turns each fp32 operand into its input format; how it
does so is part of the class as users run it. TF32 is read two ways on NVIDIA GPUs: cuBLAS
(``allow_tf32``) rounds each operand to nearest, ties to even, at 10 mantissa bits, while
Triton's ``tl.dot`` on fp32 inputs (its default ``input_precision``) keeps the top 10
mantissa bits and drops the rest: truncation toward zero (docs/budgets.md gives the one
element that tells them apart on a GPU).

These functions do the same on any device by bit manipulation of the fp32 pattern (sign,
8 exponent bits, 23 mantissa bits): ``bits`` mantissa bits are kept and the others rounded
away, to nearest even (``"rn"``) or toward zero (``"trunc"``). Subnormals round the same way
(their pattern is a plain fixed-point mantissa); a carry out of the mantissa goes into the
exponent, so the largest values round up to infinity exactly as a narrower IEEE format does.
Infinities and NaNs are kept as they are. bf16 shares fp32's exponent range, so its rounding
(``bits=7``, ``"rn"``) equals ``x.to(torch.bfloat16)`` value for value; fp16 does not, and
is rounded by torch's own cast. Pure torch; nothing here knows about ops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: How the dropped mantissa bits are rounded away.
MODES = ("rn", "trunc")
#: Mantissa bits of an fp32 pattern.
FP32_MANTISSA_BITS = 23


def round_mantissa(x: torch.Tensor, bits: int, mode: str = "rn") -> torch.Tensor:
    """``x`` (float32) with only ``bits`` explicit mantissa bits, rounded to nearest even
    (``mode="rn"``) or toward zero (``"trunc"``); a new float32 tensor of ``x``'s shape.

    Raises ValueError for a tensor that is not float32, ``bits`` outside 0..23, or an
    unknown mode.
    """
    import torch

    if x.dtype != torch.float32:
        raise ValueError(f"round_mantissa: needs a float32 tensor, got {x.dtype}")
    if not 0 <= bits <= FP32_MANTISSA_BITS:
        raise ValueError(f"round_mantissa: bits must be 0..{FP32_MANTISSA_BITS}, got {bits}")
    if mode not in MODES:
        raise ValueError(f"round_mantissa: mode must be one of {MODES}, got {mode!r}")
    drop = FP32_MANTISSA_BITS - bits
    if drop == 0:
        return x.clone()
    pattern = x.contiguous().view(torch.int32)
    keep = -(1 << drop)  # ...1110000: the int32 mask of the kept bits (sign and exponent too)
    if mode == "rn":
        # Adding half an ulp minus one, plus the kept lowest bit, rounds ties to even; a
        # carry moves into the exponent. int32 addition wraps like unsigned addition, and
        # only inf/NaN patterns (excluded below) could carry into the sign bit.
        lowest_kept = (pattern >> drop) & 1
        pattern = pattern + ((1 << (drop - 1)) - 1) + lowest_kept
    rounded = (pattern & keep).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


def to_tf32(x: torch.Tensor, mode: str = "rn") -> torch.Tensor:
    """The TF32 operand a tensor core reads for float32 ``x``: 10 mantissa bits, rounded to
    nearest even (cuBLAS) or truncated (Triton's ``tl.dot`` default), as float32 values."""
    return round_mantissa(x, 10, mode)


def to_bf16_values(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to bf16 (nearest even) and kept in float32: ``x.to(torch.bfloat16)``'s
    values, computed on the bit pattern."""
    return round_mantissa(x, 7, "rn")


def to_fp16_values(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to fp16 (IEEE, nearest even, fp16's own overflow and subnormals) and
    kept in float32."""
    import torch

    return x.to(torch.float16).to(torch.float32)


def _exact(x: torch.Tensor) -> torch.Tensor:
    return x


#: Operand and output formats by name: a function from float32 values to the float32 values
#: the format can hold. ``fp32`` leaves them alone.
FORMATS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "fp32": _exact,
    "tf32_rn": lambda x: to_tf32(x, "rn"),
    "tf32_trunc": lambda x: to_tf32(x, "trunc"),
    "bf16": to_bf16_values,
    "fp16": to_fp16_values,
}


#: Storage dtypes (by torch attribute name) whose every value a format holds exactly, so
#: rounding a tensor of that dtype to it changes nothing: bf16 and fp16 have at most 10
#: mantissa bits within TF32's exponent range; e4m3 and e5m2 fit bf16 and fp16 too.
EXACT_SOURCES: dict[str, frozenset[str]] = {
    "tf32_rn": frozenset({"bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"}),
    "tf32_trunc": frozenset({"bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"}),
    "bf16": frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"}),
    "fp16": frozenset({"float16", "float8_e4m3fn", "float8_e5m2"}),
}


def holds_exactly(fmt: str, dtype: torch.dtype) -> bool:
    """True when every value of ``dtype`` is exactly representable in the format ``fmt``
    (``fp32`` holds every dtype up to float32): rounding to it is then the identity."""
    if fmt == "fp32":
        return True
    return str(dtype).removeprefix("torch.") in EXACT_SOURCES.get(fmt, frozenset())


def to_format(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """``x`` (float32) in the format named ``fmt`` (one of :data:`FORMATS`), as float32
    values; KeyError names the known formats."""
    try:
        return FORMATS[fmt](x)
    except KeyError:
        raise KeyError(f"unknown operand format {fmt!r}; known: {', '.join(FORMATS)}") from None
