"""The honest GEMMs of an FP8 or FP4 scheme: the emulated members, and the real ones on CUDA.

A budget of a low-precision variant belongs to its scheme (how each operand is quantized),
not to its dtype: one scale per tensor and DeepSeek's 1x128 / 128x128 blocks cost an op
errors several times apart. :func:`scheme_gemms` gives the honest implementations of the
operand schemes a variant declares (``Variant.quant``, numcheck.precision.quant_declare),
as :class:`~numcheck.honest.gemm_impls.GemmImpl` rows that plug into an op's family as the
tf32 and bf16 rows do (numcheck.honest.gemm_family):

- **emulated**, on any device, bit for bit (numcheck.precision.quant_declare.scheme_family):
  every accumulation and output an honest kernel of the scheme may use;
- **real**: the operands dequantized and multiplied by torch's float32 GEMM (on any device:
  how FP4 runs on Hopper, and what a CUDA-core kernel of any scheme computes); on CUDA,
  ``torch._scaled_mm`` (one scale per tensor or per row, e4m3 operands
  held as stored; ``use_fast_accum`` off and on, fp32 and bf16 results), Triton's
  ``tl.dot`` on e4m3 operands with the library's defaults (never promoted), DeepSeek's
  block-scaled kernel in Triton (numcheck.ops.triton_gemm.triton_block_fp8) and torchao's
  block-scaled FP8 GEMM with its own quantizers (``pip install 'numcheck[fp8]'``; skipped
  with the reason without it). FP4 has no tensor cores on Hopper: its members are emulated
  only.

Every member records the operands it multiplied, so the simulated reference and the
operand checks of numcheck.check.against_sim measure it like a variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

from numcheck.honest.gemm_impls import GemmImpl, _triton_placement
from numcheck.ops.fp8_gemm import fp8_values, quant_gemm, torchao_block, torchao_placement
from numcheck.precision.quant_accumulate import (
    FAST_ACCUMULATION,
    FP32_ACCUMULATION,
    PROMOTED_128,
)
from numcheck.precision.quant_declare import (
    AsStored,
    GemmQuant,
    operand_scheme,
    pair_tag,
    scheme_family,
)
from numcheck.precision.quant_members import quant_members
from numcheck.precision.quant_record import record_gemm
from numcheck.precision.quant_scheme import DEEPSEEK_ACT, DEEPSEEK_WEIGHT, PER_ROW, PER_TENSOR
from numcheck.precision.quantize import Quantized

__all__ = ["RealGemm", "quant_gemms", "real_gemms", "scheme_gemms", "shipped_schemes"]


@dataclass(frozen=True)
class RealGemm:
    """``gemm(a, b) = a @ b`` by a real kernel (``backend`` of numcheck.ops.fp8_gemm, or
    ``torchao``) on numcheck's quantization of the operands (torchao: its own), each matrix
    of a batch on its own, recorded; float32 holding the output dtype's values."""

    quant: GemmQuant
    backend: str

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if a.dim() < 2 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2]:
            raise ValueError(f"RealGemm: operands {list(a.shape)} and {list(b.shape)}: need "
                             "[..., M, K] and [..., K, N] with equal leading dimensions")
        lead = a.shape[:-2]
        qas: list[Quantized] = []
        qbs: list[Quantized] = []
        ys = []
        for x, w in zip(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]),
                        strict=True):
            if self.backend == "torchao":
                y, qa, qb = torchao_block(x, w.transpose(-1, -2), record=False)
            else:
                qa, qb = self.quant.operands(x, w.transpose(-1, -2))
                if self.backend != "dequantized":  # the kernel reads the float8 elements
                    qa = Quantized(fp8_values(qa), qa.scales, qa.scheme, qa.global_scale)
                    qb = Quantized(fp8_values(qb), qb.scales, qb.scheme, qb.global_scale)
                y = quant_gemm(qa, qb, self.quant, self.backend, record=False)
            qas.append(qa)
            qbs.append(qb)
            ys.append(y.to(torch.float32))
        out = torch.stack(ys).reshape(*lead, *ys[0].shape)
        record_gemm(qas, qbs, out)
        return out


def real_gemms(quant: GemmQuant) -> list[GemmImpl]:
    """The real kernels of ``quant``'s operand schemes (module docstring): the operands
    dequantized and multiplied by torch's float32 GEMM (any device: how FP4 runs on Hopper,
    and a CUDA-core kernel of any scheme), and the CUDA kernels of e4m3 operands."""
    a, b = quant.a, quant.b
    tag = pair_tag(a, b)
    rows: list[GemmImpl] = []
    for out in ("fp32", "bf16"):
        q = GemmQuant(a, b, FP32_ACCUMULATION, out)
        rows.append(GemmImpl(
            f"dequantized_{tag}_{out}out", q.precision, RealGemm(q, "dequantized"),
            f"{a.label} x {b.label} dequantized to float32, torch's float32 GEMM (TF32 off, "
            f"its own order of sums), {out} result", envelope=out == "bf16", quant=q))
    if not all(o.format.name == "e4m3fn" for o in (quant.a, quant.b)):
        return rows  # e5m2 and FP4: emulated (FP4 has no tensor cores on Hopper)
    cuda = ("cuda",)
    if all(operand_scheme(o).granularity in (PER_TENSOR, PER_ROW) for o in (quant.a, quant.b)):
        for acc, how, fast in ((PROMOTED_128, "promoted", "False"),
                               (FAST_ACCUMULATION, "fast", "True")):
            for out in ("fp32", "bf16"):
                q = GemmQuant(a, b, acc, out)
                rows.append(GemmImpl(
                    f"scaled_mm_{tag}_{how}_{out}out", q.precision, RealGemm(q, "scaled_mm"),
                    f"torch._scaled_mm (cuBLAS) on {a.label} x {b.label}, "
                    f"use_fast_accum={fast}, {out} result", devices=cuda,
                    envelope=out == "bf16" or how == "fast", quant=q))
        devices, why = _triton_placement()
        q = GemmQuant(a, b, FAST_ACCUMULATION, "fp32")
        rows.append(GemmImpl(
            f"triton_{tag}_fast_fp32out", q.precision, RealGemm(q, "triton"),
            f"Triton tl.dot on e4m3 operands with the library's defaults (never promoted), "
            f"{a.label} x {b.label}, scales after, fp32 result", devices=devices,
            unavailable=why, envelope=True, quant=q))
    if operand_scheme(a).granularity == DEEPSEEK_ACT.granularity and operand_scheme(
            b).granularity == DEEPSEEK_WEIGHT.granularity and not isinstance(a, AsStored):
        devices, why = _triton_placement()
        for out in ("bf16", "fp32"):
            q = GemmQuant(a, b, PROMOTED_128, out)
            rows.append(GemmImpl(
                f"triton_{tag}_{out}out", q.precision, RealGemm(q, "triton_block"),
                f"DeepSeek V3's block-scaled FP8 GEMM in Triton ({a.label} x {b.label}, "
                f"promoted every 128 of K), {out} result", devices=devices,
                unavailable=why, envelope=out == "bf16", quant=q))
        if a == DEEPSEEK_ACT and b == DEEPSEEK_WEIGHT:
            q = GemmQuant(a, b, PROMOTED_128, "bf16")
            devices, why = torchao_placement()
            rows.append(GemmImpl(
                "torchao_block_fp32_bf16out", q.precision, RealGemm(q, "torchao"),
                "torchao 0.18's blockwise_fp8_gemm with its own 1x128 and 128x128 quantizers "
                "(DeepSeek V3's inference kernel), bf16 result", devices=devices,
                unavailable=why, envelope=True, quant=q))
    return rows


def scheme_gemms(quant: GemmQuant) -> list[GemmImpl]:
    """Every honest GEMM of ``quant``'s operand schemes: emulated, then real."""
    emulated = [GemmImpl(m.label, m.precision, m.gemm, m.doc, envelope=m.envelope,
                         quant=m.quant) for m in scheme_family(quant)]
    return emulated + real_gemms(quant)


@cache
def shipped_schemes() -> tuple[GemmQuant, ...]:
    """One declaration per pair of operand schemes numcheck's tables know: the emulated
    members' (numcheck.precision.quant_members) and e4m3 operands as stored."""
    seen: dict[tuple[object, object], GemmQuant] = {}
    for m in quant_members():
        seen.setdefault((m.recipe.a, m.recipe.b), GemmQuant(
            m.recipe.a, m.recipe.b, m.recipe.accumulation, m.recipe.output))
    stored = AsStored("e4m3fn")
    seen.setdefault((stored, stored), GemmQuant(stored, stored, PROMOTED_128, "fp32"))
    return tuple(seen.values())


@cache
def quant_gemms() -> tuple[GemmImpl, ...]:
    """The honest GEMMs of every shipped scheme (:func:`shipped_schemes`), each once: what
    ``numcheck.add_gemm_members`` registers for the FP8 and FP4 classes."""
    rows: dict[str, GemmImpl] = {}
    for quant in shipped_schemes():
        for impl in scheme_gemms(quant):
            rows.setdefault(impl.label, impl)
    return tuple(rows.values())
