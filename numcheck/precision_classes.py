"""Precision classes: the names a variant declares, their unit roundoff and storage dtype.

A variant's precision class picks its default budgets (:data:`numcheck.budgets.DEFAULT_BUDGETS`)
and the rounding unit of the floor of its element-level error (``max_err_ratio``). The
unit roundoff ``u`` is half the gap between 1 and the next representable number: the largest
relative error of one round-to-nearest. TF32 keeps fp32's range with 10 explicit mantissa bits,
as fp16 does; the fp8 formats keep 3 (e4m3) and 2 (e5m2).

Nothing here imports torch: ``DTYPE_NAMES`` names the torch dtype of each class as a string.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Precision classes from finest to coarsest (ties broken by range: fp16 before tf32 would
#: be arbitrary, so the order is by unit roundoff, then this listing).
PRECISION_CLASSES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "e4m3", "e5m2")

#: Explicit mantissa bits of each class.
MANTISSA_BITS: Mapping[str, int] = {
    "fp32": 23,
    "tf32": 10,
    "fp16": 10,
    "bf16": 7,
    "e4m3": 3,
    "e5m2": 2,
}

#: Unit roundoff u = 2^-(mantissa bits + 1): the largest relative error of one rounding.
UNIT_ROUNDOFF: Mapping[str, float] = {p: 2.0 ** -(bits + 1) for p, bits in MANTISSA_BITS.items()}

#: The torch dtype (by attribute name) whose values the class rounds to. TF32 has no torch
#: dtype: its values live in float32.
DTYPE_NAMES: Mapping[str, str] = {
    "fp32": "float32",
    "tf32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
}


def coarser(a: str, b: str) -> str:
    """The coarser of two precision classes (``coarser("fp32", "bf16") == "bf16"``)."""
    return max(a, b, key=PRECISION_CLASSES.index)


def unit_roundoff(precision: str) -> float:
    """``u`` of a precision class; ValueError names the known classes."""
    try:
        return UNIT_ROUNDOFF[precision]
    except KeyError:
        known = ", ".join(PRECISION_CLASSES)
        raise ValueError(f"numcheck: unknown precision class {precision!r} (known: {known})") from None
