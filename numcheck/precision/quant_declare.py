"""What a low-precision variant declares about its GEMM, and the honest family of that scheme.

A variant that multiplies in FP8 or FP4 says how, as data (``Variant(quant=GemmQuant(...))``):

- ``a`` and ``b``: how each operand of ``y = a @ b^T`` is quantized
  (numcheck.precision.quant_scheme.OperandScheme: element format, scale blocks, scale rule),
  or :class:`AsStored` for an operand the op already holds in a narrow format and the GEMM
  reads as it is (the indexer's e4m3 q and keys, whose scales the op applies outside the
  GEMM);
- ``accumulation``: how the products are summed
  (numcheck.precision.quant_accumulate.Accumulation: float32, Hopper's tensor core promoted
  every N of K, or not promoted);
- ``out_dtype``: the dtype the GEMM writes its result in (``fp32``, ``bf16``, ``fp16``).

numcheck reads the declaration to check the variant against two references
(numcheck.check.against_sim): the FP32 golden, with the budgets of the scheme's honest
family, and the simulated reference, the op recomputed on the exact operands the variant's
quantizer produced. A budget belongs to a scheme, not to a dtype: one scale per tensor and
1x128 groups differ several times in what they cost an op, so :func:`scheme_family` gives
the honest members of one pair of operand schemes (every accumulation and output an honest
kernel of it may use), and :class:`DeclaredGemm` computes one of them bit for bit on any
device (numcheck.precision.quant_accumulate) and records its operands
(numcheck.precision.quant_record), as a variant does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

from numcheck.precision import coarser
from numcheck.precision.quant_accumulate import (
    FAST_ACCUMULATION,
    FP32_ACCUMULATION,
    PROMOTED_128,
    Accumulation,
    emulated_gemm,
)
from numcheck.precision.quant_formats import ElementFormat, element_format
from numcheck.precision.quant_members import OUTPUTS, quant_members
from numcheck.precision.quant_record import record_gemm
from numcheck.precision.quant_scheme import PER_TENSOR, OperandScheme, declared_element
from numcheck.precision.quantize import Quantized, quantize

if TYPE_CHECKING:
    import torch

__all__ = ["AsStored", "DeclaredGemm", "GemmQuant", "Operand", "SchemeMember",
           "operand_scheme", "quantize_operand", "scheme_family", "stored"]


@dataclass(frozen=True)
class AsStored:
    """An operand the op hands its GEMM already in a narrow format (the indexer's e4m3 q and
    KV keys): the GEMM reads its elements as they are, one unit scale for the whole operand;
    any scale of the stored data is the op's to apply outside the GEMM. numcheck checks that
    the operand a variant multiplied is the op's own, element for element, and a value of
    ``element``."""

    element: str = "e4m3fn"

    def __post_init__(self) -> None:
        declared_element(self.element, "AsStored")  # a known format, or ValueError

    @property
    def format(self) -> ElementFormat:
        """The element format."""
        return element_format(self.element)

    @property
    def label(self) -> str:
        """``e4m3fn/stored``."""
        return f"{self.element}/stored"

    @property
    def scheme(self) -> OperandScheme:
        """The scheme the GEMM's arithmetic follows: one unit scale for the operand."""
        return OperandScheme(self.element, PER_TENSOR, "fp32")


#: How an operand of a declared GEMM is made: quantized by a scheme, or taken as stored.
Operand = OperandScheme | AsStored


def operand_scheme(operand: Operand) -> OperandScheme:
    """The scheme the GEMM's arithmetic follows for ``operand`` (an :class:`AsStored` one:
    one unit scale per operand)."""
    return operand.scheme if isinstance(operand, AsStored) else operand


def stored(x: torch.Tensor, operand: AsStored) -> Quantized:
    """A stored operand ``[rows, K]`` (any float dtype holding the elements) as the GEMM
    reads it: its elements in float32, one unit scale."""
    import torch

    values = x.to(torch.float32)
    ones = torch.ones((1, 1), dtype=torch.float32, device=x.device)
    return Quantized(values, ones, operand.scheme)


def quantize_operand(x: torch.Tensor, operand: Operand) -> Quantized:
    """numcheck's own quantization of a 2-D operand ``[rows, K]`` by its declaration
    (numcheck.precision.quantize; a stored operand is taken as it is)."""
    if isinstance(operand, AsStored):
        return stored(x, operand)
    return quantize(x, operand)


@dataclass(frozen=True)
class GemmQuant:
    """How a variant's GEMM ``y = a @ b^T`` quantizes and sums (module docstring).

    ``a`` is ``[M, K]`` (activations, one row per token) and ``b`` ``[N, K]`` (a weight as
    ``nn.Linear`` stores it, or the second operand of ``a @ b`` transposed); K, the dimension
    summed over, is last in both. Invalid combinations raise ValueError when declared: a
    scale that changes along K with an accumulation that is never promoted (the kernel must
    leave the tensor core at every scale block, which is a promotion), an unknown output.
    """

    a: Operand
    b: Operand
    accumulation: Accumulation = PROMOTED_128
    out_dtype: str = "fp32"

    def __post_init__(self) -> None:
        for name in ("a", "b"):
            if not isinstance(getattr(self, name), OperandScheme | AsStored):
                raise TypeError(f"GemmQuant: {name} must be an OperandScheme or AsStored, got "
                                f"{type(getattr(self, name)).__name__}")
        if not isinstance(self.accumulation, Accumulation):
            raise TypeError(f"GemmQuant: accumulation must be an Accumulation, got "
                            f"{type(self.accumulation).__name__}")
        if self.out_dtype not in OUTPUTS:
            raise ValueError(f"GemmQuant: out_dtype must be one of {tuple(OUTPUTS)}, got "
                             f"{self.out_dtype!r}")
        along_k = [o.label for o in (self.a, self.b)
                   if operand_scheme(o).granularity.cols != 0]
        if self.accumulation.kind == "none" and along_k:
            raise ValueError(
                f"GemmQuant: accumulation 'none' (never promoted) with scales that change "
                f"along K ({', '.join(along_k)}): a kernel must leave the tensor core at every "
                "scale block, which is a promotion. Fix: declare Accumulation('promoted', N) "
                "with N dividing the scale blocks, or scales constant along K")

    @property
    def precision(self) -> str:
        """The precision class: the coarser of the operands' element formats' classes."""
        return coarser(self.a.format.precision, self.b.format.precision)

    @property
    def out(self) -> torch.dtype:
        """The torch dtype the GEMM writes its result in."""
        import torch

        return getattr(torch, OUTPUTS[self.out_dtype])

    @property
    def schemes(self) -> tuple[OperandScheme, OperandScheme]:
        """The schemes the GEMM's arithmetic follows (stored operands: a unit scale)."""
        return operand_scheme(self.a), operand_scheme(self.b)

    @property
    def label(self) -> str:
        """``a e4m3fn/1x128/fp32 x b e4m3fn/128x128/fp32, promoted128, bf16 out``."""
        return (f"a {self.a.label} x b {self.b.label}, {self.accumulation.label}, "
                f"{self.out_dtype} out")

    def operands(self, a: torch.Tensor, b: torch.Tensor) -> tuple[Quantized, Quantized]:
        """numcheck's quantization of ``a`` ``[M, K]`` and ``b`` ``[N, K]``."""
        return quantize_operand(a, self.a), quantize_operand(b, self.b)


@dataclass(frozen=True)
class DeclaredGemm:
    """``gemm(a, b) = a @ b`` by a :class:`GemmQuant`, computed by numcheck's emulation (bit
    for bit on any device) and recorded as a variant records its GEMM: the signature of
    ``OpSpec.gemm_site``'s GEMMs (``a`` ``[..., M, K]``, ``b`` ``[..., K, N]``, equal leading
    dimensions, float32 result holding the output dtype's values). ``b`` is quantized as
    ``b^T`` (``[N, K]``); each matrix of a batch on its own."""

    quant: GemmQuant

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        import torch

        if a.dim() < 2 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2]:
            raise ValueError(f"DeclaredGemm: operands {list(a.shape)} and {list(b.shape)}: "
                             "need [..., M, K] and [..., K, N] with equal leading dimensions")
        lead = a.shape[:-2]
        fa, fb = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
        q = self.quant
        qas, qbs, ys = [], [], []
        for x, w in zip(fa, fb, strict=True):
            qa, qb = q.operands(x, w.transpose(-1, -2))
            qas.append(qa)
            qbs.append(qb)
            ys.append(emulated_gemm(qa, qb, q.accumulation, q.out))
        y = torch.stack(ys).reshape(*lead, *ys[0].shape)
        record_gemm(qas, qbs, y)
        return y


@dataclass(frozen=True)
class SchemeMember:
    """One honest emulated GEMM of a scheme: a label (a variant name once prefixed ``gemm_``),
    its declaration, what it stands for, and whether it is in the scheme's rounding
    envelope (the members that round the most: a bf16 result, no promotion)."""

    label: str
    quant: GemmQuant
    doc: str
    envelope: bool = False

    @property
    def precision(self) -> str:
        """The precision class."""
        return self.quant.precision

    @property
    def gemm(self) -> DeclaredGemm:
        """The callable ``gemm(a, b) = a @ b`` of this member."""
        return DeclaredGemm(self.quant)


def _tag(operand: Operand) -> str:
    """``e4m3_stored``, ``e4m3_1x128_fp32``, ``e2m1_1x16_nvfp4``: a name-safe scheme tag."""
    if isinstance(operand, AsStored):
        return f"{operand.format.precision}_stored"
    sat = "" if operand.saturate else "_nosat"
    return re.sub(r"[^A-Za-z0-9_]", "_", f"{operand.format.precision}_"
                  f"{operand.granularity.name}_{operand.scale}{sat}")


def pair_tag(a: Operand, b: Operand) -> str:
    """A name-safe tag of a pair of operand schemes: one scheme's tag when both are the same,
    ``e4m3_block_ue8m0`` for DeepSeek's 1x128 activation groups and 128x128 weight blocks."""
    if a == b:
        return _tag(a)
    sa, sb = operand_scheme(a), operand_scheme(b)
    if (not isinstance(a, AsStored) and not isinstance(b, AsStored)
            and (sa.granularity.rows, sa.granularity.cols) == (1, 128)
            and (sb.granularity.rows, sb.granularity.cols) == (128, 128)
            and (sa.element, sa.scale, sa.saturate) == (sb.element, sb.scale, sb.saturate)):
        return f"{sa.format.precision}_block_{sa.scale}" + ("" if sa.saturate else "_nosat")
    return f"{_tag(a)}_{_tag(b)}"


@cache
def _table() -> tuple[SchemeMember, ...]:
    """The shipped members (numcheck.precision.quant_members) as declarations."""
    return tuple(SchemeMember(m.label, GemmQuant(m.recipe.a, m.recipe.b,
                                                 m.recipe.accumulation, m.recipe.output),
                              m.doc, m.envelope) for m in quant_members())


def _generated(a: Operand, b: Operand, declared: GemmQuant | None) -> list[SchemeMember]:
    """Every honest accumulation and output of one pair of operand schemes: the declared
    model, Hopper's tensor core promoted every 128 and (where no scale changes along K) not
    promoted, for FP8 elements; float32 sums for every format (CUDA-core and CPU kernels,
    FP4 emulated); each written in fp32 and in bf16."""
    tensor_core = all(o.format.precision in ("e4m3", "e5m2") for o in (a, b))
    varies = any(operand_scheme(o).granularity.cols != 0 for o in (a, b))
    models: list[Accumulation] = [declared.accumulation] if declared is not None else []
    if tensor_core:
        models += [PROMOTED_128] + ([] if varies else [FAST_ACCUMULATION])
    models.append(FP32_ACCUMULATION)
    tag = pair_tag(a, b)
    out: list[SchemeMember] = []
    seen: set[tuple[Accumulation, str]] = set()
    for acc in models:
        for dtype in ("fp32", "bf16"):
            if (acc, dtype) in seen:
                continue
            seen.add((acc, dtype))
            kind = {"fp32": "fp32acc", "promoted": "promoted", "none": "fast"}[acc.kind]
            if acc.tensor_core and acc.label not in ("promoted128", "fast"):
                kind = acc.label
            q = GemmQuant(a, b, acc, dtype)
            # The envelope: the members that round the most, a bf16 result of the declared
            # sums or of unpromoted ones (few: each is computed for every checked seed).
            envelope = dtype == "bf16" and (declared is None or acc == declared.accumulation
                                            or acc.kind == "none")
            out.append(SchemeMember(
                f"{tag}_{kind}_{dtype}out", q,
                f"a {a.label} x b {b.label}, {acc.label} sums, {dtype} result (emulated)",
                envelope=envelope))
    return out


def scheme_family(quant: GemmQuant) -> tuple[SchemeMember, ...]:
    """The honest emulated members of ``quant``'s operand schemes: the shipped ones
    (numcheck.precision.quant_members) where the schemes are among theirs, else every
    honest accumulation and output of the schemes (their declared model included)."""
    shipped = [m for m in _table() if (m.quant.a, m.quant.b) == (quant.a, quant.b)]
    if shipped:
        declared = [m for m in shipped if m.quant == quant]
        extra = [] if declared else [
            m for m in _generated(quant.a, quant.b, quant)
            if m.quant == quant and m.label not in {s.label for s in shipped}]
        return tuple(shipped + extra)
    return tuple(_generated(quant.a, quant.b, quant))

