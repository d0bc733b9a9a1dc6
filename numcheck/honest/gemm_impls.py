"""Honest GEMM implementations per precision class: ``a @ b`` as users compute it.

A precision class is not one implementation. TF32 reaches an fp32 operand rounded to nearest
(cuBLAS under ``allow_tf32``) or truncated (Triton's ``tl.dot`` with its default
``input_precision``); a bf16 GEMM writes its result in bf16 or keeps fp32; the fp32
accumulation over K runs in one pass (a library GEMM), in K-blocks (a kernel's loop:
``acc += a_block @ b_block``) or split-K (partial GEMMs over slices of K, added after). A
budget set from one of them fails the others on some seed, and the user who wrote an honest
kernel learns to loosen budgets until bugs pass too.

:func:`honest_gemms` lists them. Each is a :class:`GemmImpl`: a label, its precision class,
a function ``gemm(a, b) -> float32`` and where it runs. Most are **emulated** from a
:class:`Recipe` (operand format, accumulation, partial and output format): the operands are
rounded to the class's format bit for bit (numcheck.precision.operand_rounding), the products then
summed in IEEE fp32 with TF32 off, so the emulation runs the same on a CPU and a GPU and CPU
CI calibrates the tf32 class for real. On CUDA the **real** ones run too: cuBLAS through
torch (TF32 allowed, bf16 in and out, bf16 in and fp32 out) and a small Triton ``tl.dot``
kernel with the library's defaults (numcheck.ops.triton_gemm). ``envelope`` marks the
members a check measures ``max_err_ratio`` against (the ones that round the most:
numcheck.honest.gemm_family).

An op declares where its GEMM sits (``OpSpec.gemm_site``); numcheck.honest.gemm_family turns each
row of this table into a member of the op's honest family.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import torch

from numcheck.ops.spec import Gemm
from numcheck.ops.splitk import split_k_matmul
from numcheck.precision import PRECISIONS, matmul_precision
from numcheck.precision.operand_rounding import FORMATS, holds_exactly, to_format

if TYPE_CHECKING:
    from numcheck.precision.quant_declare import GemmQuant

__all__ = ["ACCUMULATIONS", "EmulatedGemm", "GemmImpl", "Recipe", "canonical_operand",
           "gemms_for", "honest_gemms"]

#: How the products are summed over K (always in fp32).
ACCUMULATIONS = ("one_pass", "k_blocks", "split_k")
#: K-block width of the emulated kernel loop (a common Triton ``BLOCK_K``).
K_BLOCK = 64
#: Slices of K of the fp32-partial split-K members.
SPLIT_PARTS = 4


@dataclass(frozen=True)
class Recipe:
    """How an emulated GEMM rounds: the operand format, how K is summed (in fp32), the format
    each split-K partial is written in and the format of the result.

    Formats are names of :data:`numcheck.precision.operand_rounding.FORMATS`. ``width`` is the
    K-block of ``k_blocks``; ``parts`` and ``tree`` shape ``split_k`` (left to right, or a pairwise
    tree of the partials).
    """

    operands: str
    accumulation: str = "one_pass"
    width: int = K_BLOCK
    parts: int = SPLIT_PARTS
    tree: bool = False
    partial: str = "fp32"
    output: str = "fp32"

    def __post_init__(self) -> None:
        for fmt in (self.operands, self.partial, self.output):
            if fmt not in FORMATS:
                raise ValueError(f"Recipe: unknown format {fmt!r}; known: {', '.join(FORMATS)}")
        if self.accumulation not in ACCUMULATIONS:
            raise ValueError(f"Recipe: accumulation must be one of {ACCUMULATIONS}, "
                             f"got {self.accumulation!r}")


def canonical_operand(x: torch.Tensor) -> torch.Tensor:
    """A fresh contiguous float32 copy of ``x`` (exact for every float dtype up to fp32).

    Every emulated GEMM reads its operands through this, so two members whose rounding leaves
    the same values also hand the fp32 GEMM the same layout and alignment: they compute the
    same bits, which is what lets numcheck.honest.gemm_family run such members once."""
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    return out.copy_(x)


@dataclass(frozen=True)
class EmulatedGemm:
    """A GEMM computed from its :class:`Recipe`: operands rounded bit for bit, products
    summed in IEEE fp32 (TF32 off), partials and result rounded to their formats."""

    recipe: Recipe

    def operand(self, x: torch.Tensor) -> torch.Tensor:
        """The operand as this GEMM reads it: float32 values in the recipe's format (a
        bf16 or e4m3 operand is already in every format but fp16's: no rounding pass)."""
        c = canonical_operand(x)
        fmt = self.recipe.operands
        return c if holds_exactly(fmt, x.dtype) else to_format(c, fmt)

    def product(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The GEMM of operands already in the recipe's format."""
        r = self.recipe
        with matmul_precision(tf32=False):
            if r.accumulation == "one_pass":
                acc = torch.matmul(a, b)
            elif r.accumulation == "k_blocks":
                acc = a[..., :r.width] @ b[..., :r.width, :]
                for k0 in range(r.width, a.shape[-1], r.width):
                    acc = acc + a[..., k0:k0 + r.width] @ b[..., k0:k0 + r.width, :]
            else:
                acc = split_k_matmul(a, b, min(r.parts, a.shape[-1]), tree=r.tree,
                                     partial=lambda t: to_format(t, r.partial))
        return to_format(acc, r.output)

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.product(self.operand(a), self.operand(b))


@dataclass(frozen=True)
class GemmImpl:
    """One honest way to compute ``a @ b`` at a precision class.

    ``fn(a, b)`` returns float32; ``recipe`` is set for emulated GEMMs (None for a library or
    kernel whose rounding numcheck does not model: never run once for two members).
    ``devices`` says where it can run, ``unavailable`` why not where it cannot (triton
    missing...). ``envelope``: a member of the class's rounding envelope. ``quant``: for a
    member of an FP8 or FP4 scheme (numcheck.honest.quant_impls), how it quantizes and sums:
    its family and envelope are its scheme's, not its class's.
    """

    label: str
    precision: str
    fn: Gemm
    doc: str
    recipe: Recipe | None = None
    devices: tuple[str, ...] = ("cpu", "cuda")
    envelope: bool = False
    unavailable: str = ""
    quant: GemmQuant | None = None


def _emulated(label: str, precision: str, recipe: Recipe, doc: str, *,
              envelope: bool = False) -> GemmImpl:
    return GemmImpl(label, precision, EmulatedGemm(recipe), doc, recipe=recipe,
                    envelope=envelope)


def cublas_tf32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch's fp32 matmul with TF32 allowed: cuBLAS on tensor cores, operands rounded to
    nearest (``1 + 0.75 * 2^-10`` becomes ``1 + 2^-10``; docs/budgets.md, "Precision
    classes as users implement them", has the GPU run that shows it)."""
    with matmul_precision(tf32=True):
        return torch.matmul(a.float(), b.float())


def cublas_bf16(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch's bf16 matmul: cuBLAS, bf16 operands, fp32 accumulation, bf16 result."""
    return torch.matmul(a.to(torch.bfloat16), b.to(torch.bfloat16)).float()


def cublas_bf16_fp32out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """cuBLAS with bf16 operands writing its fp32 accumulator (``out_dtype``, CUDA only):
    ``mm`` for 2-D operands, ``bmm`` over flattened leading dims otherwise (equal ones)."""
    a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
    if a.dim() == 2 and b.dim() == 2:
        return torch.mm(a, b, out_dtype=torch.float32)
    if a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"GEMM operands {list(a.shape)} and {list(b.shape)}: need 2-D "
                         "operands or equal leading (batch) dimensions")
    lead = a.shape[:-2]
    out = torch.bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]),
                    out_dtype=torch.float32)
    return out.reshape(*lead, *out.shape[-2:])


def _triton(mode: str) -> Gemm:
    def call(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        from numcheck.ops.triton_gemm import triton_matmul

        return triton_matmul(a, b, mode)

    call.__name__ = call.__qualname__ = f"triton_{mode}"
    return call


def _triton_placement() -> tuple[tuple[str, ...], str]:
    """Where the Triton members run: CUDA with compiled kernels only (Triton's interpreter
    computes ``tl.dot`` in IEEE fp32 whatever its input precision, so on a CPU it would be an
    fp32 GEMM wearing a TF32 label)."""
    from numcheck.ops import triton_support

    if triton_support.TRITON_MISSING:
        return (), triton_support.TRITON_MISSING
    if "cuda" in triton_support.DEVICES:
        return ("cuda",), ""
    return (), ("Triton runs under its interpreter in this process, whose tl.dot computes "
                "IEEE fp32 whatever its input precision: the Triton GEMM members run on CUDA "
                "only")


@cache
def honest_gemms() -> tuple[GemmImpl, ...]:
    """Every honest GEMM implementation, by precision class (built once: where the Triton
    members run depends on this process's Triton mode)."""
    rows = [
        _emulated("fp32", "fp32", Recipe("fp32"),
                  "IEEE fp32 operands and accumulation, one pass over K (TF32 off)"),
        _emulated("fp32_kblocks", "fp32", Recipe("fp32", "k_blocks"),
                  f"fp32, a kernel's loop over K blocks of {K_BLOCK}: acc += block product"),
        _emulated("fp32_split4", "fp32", Recipe("fp32", "split_k"),
                  f"fp32 split-K: {SPLIT_PARTS} partial GEMMs over slices of K, fp32 "
                  "partials added left to right"),
    ]
    for mode, who in (("rn", "rounded to nearest even (cuBLAS)"),
                      ("trunc", "truncated (Triton's tl.dot default)")):
        fmt = f"tf32_{mode}"
        rows += [
            _emulated(fmt, "tf32", Recipe(fmt),
                      f"TF32 operands {who}, fp32 accumulation in one pass", envelope=True),
            _emulated(f"{fmt}_kblocks", "tf32", Recipe(fmt, "k_blocks"),
                      f"TF32 operands {who}, fp32 accumulation over K blocks of {K_BLOCK}"),
            _emulated(f"{fmt}_split4", "tf32", Recipe(fmt, "split_k"),
                      f"TF32 operands {who}, split-K: {SPLIT_PARTS} fp32 partials"),
        ]
    for cls in ("bf16", "fp16"):
        rows += [
            _emulated(f"{cls}_out", cls, Recipe(cls, output=cls),
                      f"{cls} operands, fp32 accumulation in one pass, result written in {cls}",
                      envelope=True),
            _emulated(f"{cls}_out_kblocks", cls, Recipe(cls, "k_blocks", output=cls),
                      f"{cls} operands, fp32 accumulation over K blocks of {K_BLOCK}, result "
                      f"written in {cls}"),
            _emulated(f"{cls}_out_split2", cls,
                      Recipe(cls, "split_k", parts=2, partial=cls),
                      f"{cls} split-K: two GEMMs over the halves of K, each partial written in "
                      f"{cls}, added in fp32", envelope=True),
            _emulated(f"{cls}_out_split4_tree", cls,
                      Recipe(cls, "split_k", parts=4, tree=True, partial=cls),
                      f"{cls} split-K: four slices of K, {cls} partials added as a pairwise "
                      "tree", envelope=True),
            _emulated(f"{cls}_fp32out", cls, Recipe(cls),
                      f"{cls} operands, fp32 accumulation in one pass, fp32 result"),
            _emulated(f"{cls}_fp32out_kblocks", cls, Recipe(cls, "k_blocks"),
                      f"{cls} operands, fp32 accumulation over K blocks of {K_BLOCK}, fp32 "
                      "result"),
            _emulated(f"{cls}_fp32out_split4", cls, Recipe(cls, "split_k"),
                      f"{cls} operands, split-K: {SPLIT_PARTS} fp32 partials, fp32 result"),
        ]
    cuda = ("cuda",)
    rows += [
        GemmImpl("cublas_tf32", "tf32", cublas_tf32, cublas_tf32.__doc__ or "", devices=cuda),
        GemmImpl("cublas_bf16", "bf16", cublas_bf16, cublas_bf16.__doc__ or "", devices=cuda),
        GemmImpl("cublas_bf16_fp32out", "bf16", cublas_bf16_fp32out,
                 cublas_bf16_fp32out.__doc__ or "", devices=cuda),
    ]
    devices, why = _triton_placement()
    for label, precision, doc in (
        ("triton_tf32", "tf32", ("Triton tl.dot on fp32 operands with the library's default "
                                 "input precision (TF32, operands truncated), fp32 "
                                 "accumulator over K blocks")),
        ("triton_bf16", "bf16", ("Triton tl.dot on bf16 operands, fp32 accumulator over K "
                                 "blocks, fp32 result")),
        ("triton_fp32", "fp32", ("Triton tl.dot with input_precision='ieee': fp32 products, "
                                 "fp32 accumulator over K blocks")),
    ):
        rows.append(GemmImpl(label, precision, _triton(label.removeprefix("triton_")), doc,
                             devices=devices, unavailable=why))
    assert all(r.precision in PRECISIONS for r in rows)
    return tuple(rows)


def gemms_for(precision: str) -> list[GemmImpl]:
    """The honest GEMM implementations of one precision class (empty for a class without
    any: the scaled FP8 and FP4 classes, whose GEMMs need a declared scheme: their members
    are a scheme's, numcheck.honest.quant_impls)."""
    return [g for g in honest_gemms() if g.precision == precision]
