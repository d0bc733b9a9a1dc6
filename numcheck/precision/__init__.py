"""Precision classes, and matmul precision switches that always restore the process's own.

Every variant names the precision class it computes in (``fp32``, ``tf32``, ``fp16``,
``bf16``, ``e4m3``, ``e5m2``, ``e2m1``). The class decides four things, all read from
:data:`PRECISION_CLASSES`:

- which default budget row completes the variant's budget (``numcheck.numerics.budgets``),
- in which dtype ULP errors are counted (:func:`ulp_dtype`: the coarser of the class's
  compute dtype and the output's dtype),
- the unit roundoff of the floor of its element-level error (``max_err_ratio``),
- whether its GEMMs are meant for tensor cores, so that a CUDA-core GEMM is a failure of the
  kernel audit (``numcheck.overhead.limits``).

torch is imported inside the functions, so the names load without it.

This package is the room of precision classes, on the floor just above the ground: it
imports no other room. This module holds the classes themselves; beside it:

- :mod:`numcheck.precision.operand_rounding`: fp32 operands rounded to TF32 (to nearest, or
  truncated), bf16 and fp16, bit for bit;
- the scaled FP8 and FP4 classes, bit for bit: element formats
  (:mod:`numcheck.precision.quant_formats`), quantization schemes as data
  (:mod:`numcheck.precision.quant_scheme`), quantizing (:mod:`numcheck.precision.quantize`),
  checking another quantizer's output (:mod:`numcheck.precision.quant_validate`), the GEMM
  under an accumulation model (:mod:`numcheck.precision.quant_accumulate`), the bound of an
  honest kernel against its simulated reference (:mod:`numcheck.precision.quant_bound`) and
  the honest emulated members (:mod:`numcheck.precision.quant_members`).

How each class is implemented as users run it (the honest GEMMs, an op's members and
rounding envelope) needs ops and sits above them, in :mod:`numcheck.honest`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class PrecisionClass:
    """One precision class: its name, the torch dtype it computes in, its GEMM units."""

    name: str
    #: Name of the torch dtype the class's arithmetic rounds to (``torch.<compute>``).
    compute: str
    #: True when its GEMMs are meant for tensor cores (a CUDA-core GEMM is then a failure).
    tensor_core: bool
    #: Explicit mantissa bits of the values the class rounds to (its unit roundoff follows).
    mantissa_bits: int
    doc: str = ""

    @property
    def unit_roundoff(self) -> float:
        """``u = 2^-(mantissa bits + 1)``: the largest relative error of one rounding."""
        return 2.0 ** -(self.mantissa_bits + 1)


#: Every precision class by name, from finest to coarsest (:func:`coarser` relies on the
#: order: by unit roundoff, then this listing). A variant's ``precision`` must be one of these.
PRECISION_CLASSES: dict[str, PrecisionClass] = {
    c.name: c
    for c in (
        PrecisionClass("fp32", "float32", tensor_core=False, mantissa_bits=23,
                       doc="IEEE fp32 arithmetic (TF32 off): the references"),
        PrecisionClass("tf32", "float32", tensor_core=True, mantissa_bits=10,
                       doc="fp32 tensors, GEMMs on tensor cores with 10-bit mantissa operands"),
        PrecisionClass("fp16", "float16", tensor_core=True, mantissa_bits=10,
                       doc="fp16 GEMM operands (11 significant bits), fp32 accumulation"),
        PrecisionClass("bf16", "bfloat16", tensor_core=True, mantissa_bits=7,
                       doc="bf16 GEMM operands (8 significant bits), fp32 accumulation"),
        PrecisionClass("e4m3", "float8_e4m3fn", tensor_core=True, mantissa_bits=3,
                       doc="fp8 e4m3 operands (4 significant bits), scaled"),
        PrecisionClass("e5m2", "float8_e5m2", tensor_core=True, mantissa_bits=2,
                       doc="fp8 e5m2 operands (3 significant bits), scaled"),
        # One FP4 class, as one e4m3 class covers per-tensor, per-row and block scales: the
        # class is the element format, the scale rule (NVFP4, MXFP4) is the variant's
        # declared scheme (numcheck.precision.quant_scheme). torch >= 2.4 has no float4
        # dtype to compute in, so its values live in float32, as TF32's do.
        PrecisionClass("e2m1", "float32", tensor_core=True, mantissa_bits=1,
                       doc="fp4 e2m1 operands (2 significant bits) with block scales "
                           "(NVFP4, MXFP4); emulated where no FP4 tensor cores exist"),
    )
}
#: Names of the precision classes, in table order.
PRECISIONS = tuple(PRECISION_CLASSES)
#: Precision classes whose GEMMs are meant for tensor cores.
TENSOR_CORE_PRECISIONS = tuple(n for n, c in PRECISION_CLASSES.items() if c.tensor_core)
#: Unit roundoff of each class.
UNIT_ROUNDOFF = {n: c.unit_roundoff for n, c in PRECISION_CLASSES.items()}
#: The torch dtype (by attribute name) whose values each class rounds to. TF32 has no torch
#: dtype: its values live in float32.
DTYPE_NAMES = {n: c.compute for n, c in PRECISION_CLASSES.items()}


#: Short dtype names for messages (``bf16 -> fp32``); anything else keeps torch's name.
SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64",
                "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``: torch's name, as goldens' metadata stores it."""
    return str(dtype).removeprefix("torch.")


def short_dtype(dtype: torch.dtype) -> str:
    """``bf16``, ``fp32``, ``e4m3``... or torch's own name (``int32``), for messages."""
    return SHORT_DTYPES.get(dtype_name(dtype), dtype_name(dtype))


def coarser(a: str, b: str) -> str:
    """The coarser of two precision classes (``coarser("fp32", "bf16") == "bf16"``)."""
    return max(a, b, key=PRECISIONS.index)


def unit_roundoff(precision: str) -> float:
    """``u`` of a precision class; ValueError names the known classes."""
    try:
        return UNIT_ROUNDOFF[precision]
    except KeyError:
        known = ", ".join(PRECISIONS)
        raise ValueError(f"numcheck: unknown precision class {precision!r} (known: {known})") from None


def compute_dtype(precision: str) -> torch.dtype:
    """The torch dtype the precision class computes in (``KeyError`` for an unknown class)."""
    import torch

    return getattr(torch, PRECISION_CLASSES[precision].compute)


def ulp_dtype(precision: str, output_dtype: torch.dtype) -> torch.dtype:
    """The coarser of the precision class's compute dtype and the output's dtype.

    ULPs are counted in what the variant claims to compute in, unless its output is stored
    coarser still (a bf16 output of an fp32 computation is judged in bf16 ULPs).
    """
    import torch

    compute = compute_dtype(precision)
    if not output_dtype.is_floating_point:
        return compute
    return max(compute, output_dtype, key=lambda d: torch.finfo(d).eps)


def rounding_unit(precision: str, output_dtype: torch.dtype) -> float:
    """The unit roundoff ``max_err_ratio`` counts in: the coarser of the variant's
    precision class and the output's dtype (a bf16 output carries bf16 rounding whatever
    the variant computed in)."""
    import torch

    u = UNIT_ROUNDOFF[precision]
    if output_dtype.is_floating_point:
        u = max(u, torch.finfo(output_dtype).eps / 2)
    return u


def precision_of(dtype: torch.dtype) -> str:
    """The precision class an output of ``dtype`` can be held to when none is named.

    A half-precision output can only meet the bf16 row; anything finer is held to fp32.
    """
    import torch

    return "bf16" if dtype in (torch.bfloat16, torch.float16) else "fp32"


@contextmanager
def matmul_precision(*, tf32: bool) -> Iterator[None]:
    """Allow (``tf32=True``) or forbid TF32 for fp32 matmuls inside the block.

    The FP32 references run under ``tf32=False`` so a caller who enabled TF32 globally
    cannot leak it into a golden. Uses ``torch.set_float32_matmul_precision``, which
    drives cuBLAS (and oneDNN where it has TF32) on every torch >= 2.4, and restores the
    previous setting even when the body raises. On a CPU without TF32 hardware the
    matmul stays IEEE fp32.
    """
    import torch

    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block in one CPU thread (restored after, even when it raises); also a
    decorator.

    numcheck's bit-exact models of FP8 and FP4 arithmetic (the emulated GEMM, the GEMM
    bound, a quantizer and its check) are thousands of small elementwise steps. Each step
    split over torch's CPU threads costs more than it saves, and on a machine whose cores
    other processes also use, threads that wait for each other make them 3 to 10 times
    slower than one thread (docs/testing.md, "FP8 on the CPU"): the results are the same
    bits either way (every step is exact or a float32 operation in a fixed order). CUDA
    work is not affected.
    """
    import torch

    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def tensor_digest(*parts: object) -> bytes | None:
    """A digest of ``parts`` (a tensor by its dtype, shape and bytes, anything else by its
    ``repr``): the key of a cache of a pure function's results. None where a tensor is not
    on the CPU (hashing it would copy it; on a GPU the function is cheap anyway).

    Calibration measures every member of a family on the same seed's inputs, and numcheck's
    own quantizer gives each the same operands: checking them against their scheme, or
    bounding their GEMM, is then the same pure computation, made once (issue 44).
    """
    import hashlib

    import torch

    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        if isinstance(part, torch.Tensor):
            if part.device.type != "cpu":
                return None
            h.update(_tensor_digest(part))
        else:
            h.update(repr(part).encode())
    return h.digest()


#: Each tensor's digest while it lives (by id, with a weak reference that drops the entry
#: when the tensor goes), and the version it was taken at: an in-place change bumps the
#: version, and the digest is taken again.
_DIGESTS: dict[int, tuple[Any, int, bytes]] = {}


def _tensor_digest(t: torch.Tensor) -> bytes:
    import hashlib

    import torch

    held = _DIGESTS.get(id(t))
    if held is not None and held[0]() is t and held[1] == t._version:
        return bytes(held[2])
    flat = t.detach().contiguous().reshape(-1)
    h = hashlib.blake2b(f"{t.dtype}{tuple(t.shape)}".encode(), digest_size=16)
    h.update(flat.view(torch.uint8).numpy().data)
    key = id(t)

    def forget(_: object, k: int = key) -> None:
        _DIGESTS.pop(k, None)

    gone = weakref.ref(t, forget)
    _DIGESTS[key] = (gone, t._version, h.digest())
    return _DIGESTS[key][2]


class PureCache:
    """The last ``size`` results of a pure function by :func:`tensor_digest` key (least
    recently used dropped first): ``get`` returns None for a key not held."""

    def __init__(self, size: int) -> None:
        from collections import OrderedDict

        self.size = size
        self._held: OrderedDict[bytes, object] = OrderedDict()

    def get(self, key: bytes | None) -> object | None:
        if key is None or key not in self._held:
            return None
        self._held.move_to_end(key)
        return self._held[key]

    def put(self, key: bytes | None, value: object) -> None:
        if key is None:
            return
        self._held[key] = value
        self._held.move_to_end(key)
        while len(self._held) > self.size:
            self._held.popitem(last=False)

