"""The honest emulated FP8 and FP4 GEMMs, as rows of data: how users compute ``a @ b``.

Each row is a :class:`QuantMember`: a label, a :class:`QuantRecipe` (each operand's
numcheck.precision.quant_scheme.OperandScheme, the
numcheck.precision.quant_accumulate.Accumulation, the output dtype), what real implementation
it stands for, and whether it belongs to the class's rounding envelope (those that round the
most: fast accumulation and bf16 outputs). A row's :attr:`QuantMember.gemm` is a
:class:`QuantGemm`, a callable with the signature of numcheck.honest.gemm_impls's GEMMs
(``gemm(a, b)`` computes ``a @ b`` from float operands and returns float32), so a row turns
into a ``GemmImpl`` there as it is: ``GemmImpl(m.label, m.precision, m.gemm, m.doc,
envelope=m.envelope)``. Every row is an emulation, bit for bit on any device: on Hopper, FP4
has no tensor cores at all, and the FP8 rows stand for the kernels named in their ``doc``
(the real ones are measured on CUDA, docs/fp8.md).

The operands' layout: ``a`` is ``[M, K]`` and ``b`` ``[K, N]`` as in ``a @ b``; ``b`` is
quantized as ``b^T`` (``[N, K]``: its rows are the output columns, the layout of a weight
``W`` in ``x @ W^T``), so ``PER_ROW`` on ``b`` is one scale per output column, as
``torch._scaled_mm``'s ``scale_b`` ``[1, N]``. With leading (batch) dimensions, each matrix of
the batch is quantized on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
from numcheck.precision.quant_scheme import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    E5M2_TENSOR,
    FP8_ROW,
    FP8_TENSOR,
    MXFP4,
    NVFP4,
    OperandScheme,
)
from numcheck.precision.quantize import Quantized, quantize

if TYPE_CHECKING:
    import torch

__all__ = ["OUTPUTS", "QuantGemm", "QuantMember", "QuantProduct", "QuantRecipe",
           "quant_members", "quant_members_for"]

#: Output dtypes by name (the torch attribute each names).
OUTPUTS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class QuantRecipe:
    """How an emulated low-precision GEMM ``a @ b`` computes: each operand's scheme, the
    accumulation model and the dtype the result is written in."""

    a: OperandScheme
    b: OperandScheme
    accumulation: Accumulation = PROMOTED_128
    output: str = "fp32"

    def __post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise ValueError(f"QuantRecipe: output must be one of {tuple(OUTPUTS)}, got "
                             f"{self.output!r}")

    @property
    def out_dtype(self) -> torch.dtype:
        """The torch dtype of the result."""
        import torch

        return getattr(torch, OUTPUTS[self.output])

    @property
    def precision(self) -> str:
        """The precision class: the coarser of the operands' element formats' classes."""
        return coarser(self.a.format.precision, self.b.format.precision)


@dataclass(frozen=True)
class QuantProduct:
    """One emulated GEMM with the operands it read: ``y`` (float32 holding the output
    dtype's values, ``[M, N]``), ``a`` (``[M, K]``) and ``b`` (``b^T`` quantized, ``[N, K]``):
    what numcheck.precision.quant_bound.compare_to_simulated needs."""

    y: torch.Tensor
    a: Quantized
    b: Quantized


@dataclass(frozen=True)
class QuantGemm:
    """``gemm(a, b) = a @ b`` quantized and accumulated by its :class:`QuantRecipe`."""

    recipe: QuantRecipe

    def product(self, a: torch.Tensor, b: torch.Tensor) -> QuantProduct:
        """The 2-D product ``a @ b`` (``a`` ``[M, K]``, ``b`` ``[K, N]``) and its operands."""
        r = self.recipe
        qa = quantize(a, r.a)
        qb = quantize(b.transpose(-1, -2), r.b)
        return QuantProduct(emulated_gemm(qa, qb, r.accumulation, r.out_dtype), qa, qb)

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        import torch

        if a.dim() == 2 and b.dim() == 2:
            return self.product(a, b).y
        if a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2]:
            raise ValueError(f"QuantGemm: operands {list(a.shape)} and {list(b.shape)}: need "
                             "2-D operands or equal leading (batch) dimensions")
        lead = a.shape[:-2]
        fa, fb = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
        out = torch.stack([self.product(x, w).y for x, w in zip(fa, fb)])
        return out.reshape(*lead, *out.shape[-2:])


@dataclass(frozen=True)
class QuantMember:
    """One honest emulated low-precision GEMM: a row of :func:`quant_members`."""

    label: str
    recipe: QuantRecipe
    doc: str
    envelope: bool = False

    @property
    def precision(self) -> str:
        """The precision class (the coarser operand's)."""
        return self.recipe.precision

    @property
    def gemm(self) -> QuantGemm:
        """The callable ``gemm(a, b) = a @ b`` of this member."""
        return QuantGemm(self.recipe)


@cache
def quant_members() -> tuple[QuantMember, ...]:
    """Every honest emulated FP8 and FP4 GEMM (module docstring)."""
    fast, promoted, fp32 = FAST_ACCUMULATION, PROMOTED_128, FP32_ACCUMULATION
    ue8m0_act = replace(DEEPSEEK_ACT, scale="ue8m0")
    ue8m0_weight = replace(DEEPSEEK_WEIGHT, scale="ue8m0")
    rows: list[QuantMember] = []
    for scaling, a, b, who in (
        ("tensor", FP8_TENSOR, FP8_TENSOR, ("torch._scaled_mm with one float32 scale per "
                                            "operand (cuBLAS)")),
        ("row", FP8_ROW, FP8_ROW, ("torch._scaled_mm with row-wise scales, a per token "
                                   "and b per output column (cuBLAS)")),
    ):
        for acc, how in ((promoted, ("use_fast_accum=False: partial sums promoted to "
                                     "fp32 every 128 of K")),
                         (fast, ("use_fast_accum=True (and Triton's tl.dot on e4m3 with "
                                 "its defaults): no promotion"))):
            for out in ("fp32", "bf16"):
                tag = "promoted" if acc is promoted else "fast"
                rows.append(QuantMember(
                    f"e4m3_{scaling}_{tag}_{out}out", QuantRecipe(a, b, acc, out),
                    f"{who}, {how}, {out} result",
                    envelope=(acc is fast and out == "bf16")))
    for scale, act, weight in (("fp32", DEEPSEEK_ACT, DEEPSEEK_WEIGHT),
                               ("ue8m0", ue8m0_act, ue8m0_weight)):
        for out in ("bf16", "fp32"):
            rows.append(QuantMember(
                f"e4m3_block_{scale}_{out}out", QuantRecipe(act, weight, promoted, out),
                f"DeepSeek V3's block-scaled FP8 GEMM (DeepGEMM; torchao's "
                f"blockwise_fp8_gemm): x in 1x128 groups, W in 128x128 blocks, {scale} scales, "
                f"promoted to fp32 every 128 of K with the scales, {out} result",
                envelope=(out == "bf16")))
    rows.append(QuantMember(
        "e4m3_block_fp32_fp32acc", QuantRecipe(DEEPSEEK_ACT, DEEPSEEK_WEIGHT, fp32, "bf16"),
        "block-scaled FP8 operands with products summed in fp32 (a CUDA-core or CPU kernel), "
        "bf16 result"))
    e5m2_row = replace(FP8_ROW, element="e5m2")
    rows += [
        QuantMember("e5m2_tensor_promoted_fp32out",
                    QuantRecipe(E5M2_TENSOR, E5M2_TENSOR, promoted, "fp32"),
                    "e5m2 operands, one float32 scale each, promoted every 128, fp32 result"),
        QuantMember("e5m2_tensor_fast_bf16out",
                    QuantRecipe(E5M2_TENSOR, E5M2_TENSOR, fast, "bf16"),
                    "e5m2 operands, one float32 scale each, fast accumulation, bf16 result",
                    envelope=True),
        QuantMember("e5m2_row_promoted_fp32out",
                    QuantRecipe(e5m2_row, e5m2_row, promoted, "fp32"),
                    "e5m2 operands with row-wise scales, promoted every 128, fp32 result"),
    ]
    for name, scheme, what in (("nvfp4", NVFP4, ("NVFP4 (e2m1, e4m3 scale per 16 of K, fp32 "
                                                 "scale per tensor)")),
                               ("mxfp4", MXFP4, ("MXFP4 (e2m1, E8M0 scale per 32 of K, OCP "
                                                 "MX rule)"))):
        for out in ("bf16", "fp32"):
            rows.append(QuantMember(
                f"{name}_{out}out", QuantRecipe(scheme, scheme, fp32, out),
                f"{what} operands, emulated (no FP4 tensor cores on Hopper): products summed "
                f"in fp32 per scale block, {out} result", envelope=(out == "bf16")))
    return tuple(rows)


def quant_members_for(precision: str) -> list[QuantMember]:
    """The members of one precision class (``e4m3``, ``e5m2``, ``e2m1``)."""
    return [m for m in quant_members() if m.precision == precision]
