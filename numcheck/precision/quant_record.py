"""The quantized operands a low-precision variant multiplied, handed to numcheck as it runs.

A variant that declares its quantization (``Variant(quant=GemmQuant(...))``,
numcheck.precision.quant_declare) is checked against a second reference: the op recomputed on
the very operands its own quantizer produced, dequantized exactly. The variant hands them
over with :func:`record_gemm`, once per GEMM, in the order the op's ``gemm_site`` makes its
GEMM calls::

    xq, xs = my_quantize(x)                       # the variant's own quantizer
    y = my_fp8_gemm(xq, xs, wq, ws)               # the variant's own kernel
    record_gemm(as_quantized(xq, xs, ACT), as_quantized(wq, ws, WEIGHT), y)  # numcheck.fp8

numcheck opens a :func:`recording` around each call it checks; anywhere else (timing, the
cast ledger, production) :func:`record_gemm` returns at once and keeps nothing, so the call
can stay in the variant. What is recorded is kept as given (no copy, no cast): the check reads
it after the call. Pure Python with a context variable; nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from numcheck.precision.quantize import Quantized

if TYPE_CHECKING:
    import torch

__all__ = ["GemmRecorder", "RecordedGemm", "is_recording", "record_gemm", "recording"]


@dataclass(frozen=True)
class RecordedGemm:
    """One GEMM ``y = a @ b^T`` a variant computed: its operands as quantized (one
    :class:`~numcheck.precision.quantize.Quantized` per matrix of the batch, ``a`` ``[M, K]``
    and ``b`` ``[N, K]``), and the GEMM's result as the kernel wrote it, before any epilogue
    (``[..., M, N]``, the batch flattened in the order of ``a`` and ``b``), or None."""

    a: tuple[Quantized, ...]
    b: tuple[Quantized, ...]
    y: torch.Tensor | None = None

    @property
    def batch(self) -> int:
        """Matrices in the batch."""
        return len(self.a)


@dataclass
class GemmRecorder:
    """What one checked call recorded, in call order."""

    calls: list[RecordedGemm] = field(default_factory=list)


_ACTIVE: ContextVar[GemmRecorder | None] = ContextVar("numcheck_gemm_recorder", default=None)


@contextmanager
def recording() -> Iterator[GemmRecorder]:
    """Record the GEMMs of the calls inside the block (numcheck opens it around a checked
    call; an inner block takes over from an outer one until it ends)."""
    recorder = GemmRecorder()
    token = _ACTIVE.set(recorder)
    try:
        yield recorder
    finally:
        _ACTIVE.reset(token)


def is_recording() -> bool:
    """True inside a :func:`recording`: a variant may skip wrapping its operands otherwise."""
    return _ACTIVE.get() is not None


def _operands(value: Any, which: str) -> tuple[Quantized, ...]:
    items = (value,) if isinstance(value, Quantized) else value
    if not isinstance(items, Sequence) or isinstance(items, str) or not items or not all(
            isinstance(q, Quantized) for q in items):
        raise TypeError(
            f"record_gemm: {which} must be a numcheck Quantized operand, or a non-empty list "
            f"of them (one per matrix of a batch), got {type(value).__name__}. Fix: wrap your "
            "quantizer's elements and scales with numcheck.fp8.as_quantized(values, scales, "
            "scheme)")
    return tuple(items)


def record_gemm(a: Quantized | Sequence[Quantized], b: Quantized | Sequence[Quantized],
                y: torch.Tensor | None = None) -> None:
    """Hand numcheck one GEMM ``y = a @ b^T`` of the variant being checked: the operands its
    own quantizer produced (``a`` ``[M, K]``, ``b`` ``[N, K]``: a weight as ``nn.Linear``
    holds it, or the second operand transposed; one of each per matrix of a batch) and,
    when the kernel's raw result is at hand, ``y`` (``[M, N]``, or ``[..., M, N]`` for a
    batch) before any epilogue. Call it once per GEMM, in the order the op's ``gemm_site``
    calls its GEMM. Outside a check it does nothing (module docstring)."""
    recorder = _ACTIVE.get()
    if recorder is None:
        return
    qa, qb = _operands(a, "a"), _operands(b, "b")
    if len(qa) != len(qb):
        raise ValueError(f"record_gemm: {len(qa)} a operands and {len(qb)} b operands: give "
                         "one of each per matrix of the batch")
    recorder.calls.append(RecordedGemm(qa, qb, y))
