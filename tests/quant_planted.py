"""FP8 linear variants a user could write, planted through numcheck's public API: honest
alternatives that must pass, and the bugs of issue 35 that must be caught.

Each is a variant of the shipped ``linear`` op declaring a scheme (``numcheck.fp8.GemmQuant``),
quantizing its weight once (``prepare``) and its activation per call, multiplying with
``numcheck.fp8.emulated_gemm`` or another honest kernel (tests/quant_kernels.py), and handing
numcheck what it believes it multiplied (``numcheck.fp8.record_gemm``). A bug sits where such
bugs live:

- in the **kernel**, which multiplies correct operands wrongly: one scale for every weight
  block, the scale grid read transposed, read one block off along K, a promotion skipped;
- in the **quantizer**, whose operands do not follow the declared scheme: a per-tensor scale
  stored in every block, UE8M0 scales rounded down, e4m3fn overflow cast without clamping
  (NaN), e5m2 elements where e4m3 is declared, a weight scale kept from the weight before it
  changed (a cache across calls: the next seed's weight is quantized with the last one's
  scales).

Registered by tests and benchmarks only (inside ``numcheck.ops.registry.isolated()``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch

import numcheck
from numcheck import Variant
from numcheck.fp8 import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    FAST_ACCUMULATION,
    FP8_ROW,
    PROMOTED_128,
    GemmQuant,
    OperandScheme,
    Quantized,
)
from tests import quant_kernels

#: DeepSeek V3's recipe, and V3.1's UE8M0 form, and one scale per token and channel.
BLOCK = GemmQuant(DEEPSEEK_ACT, DEEPSEEK_WEIGHT, PROMOTED_128, "bf16")
BLOCK_UE8M0 = GemmQuant(replace(DEEPSEEK_ACT, scale="ue8m0"),
                        replace(DEEPSEEK_WEIGHT, scale="ue8m0"), PROMOTED_128, "bf16")
ROW = GemmQuant(FP8_ROW, FP8_ROW, PROMOTED_128, "bf16")

Quantizer = Callable[[torch.Tensor, OperandScheme], Quantized]
Kernel = Callable[[Quantized, Quantized, GemmQuant], torch.Tensor]


def honest_kernel(qa: Quantized, qb: Quantized, quant: GemmQuant) -> torch.Tensor:
    """numcheck's emulation of the declared model."""
    return numcheck.fp8.emulated_gemm(qa, qb, quant.accumulation, quant.out)


def quant_variant(name: str, quant: GemmQuant, *, weight: Quantizer = numcheck.fp8.quantize,
                  act: Quantizer = numcheck.fp8.quantize, kernel: Kernel = honest_kernel,
                  doc: str = "") -> Variant:
    """A linear variant of ``quant``: the weight quantized at load time by ``weight``, x per
    call by ``act``, multiplied by ``kernel``, recorded as multiplied."""

    def prepare(inputs: dict[str, torch.Tensor], p: object) -> dict[str, torch.Tensor]:
        q = weight(inputs["w"], quant.b)
        return {"w_q": q.values, "w_s": q.scales}

    def fn(inputs: dict[str, torch.Tensor], p: object) -> dict[str, torch.Tensor]:
        qa = act(inputs["x"], quant.a)
        qb = Quantized(inputs["w_q"], inputs["w_s"], quant.b)
        y = kernel(qa, qb, quant)
        numcheck.fp8.record_gemm(qa, qb, y)
        return {"y": y.to(torch.bfloat16)}

    fn.__name__ = fn.__qualname__ = name
    return Variant(name, fn, quant.precision, doc=doc or name, prepare=prepare, quant=quant)


# -- kernel bugs: correct operands, multiplied wrongly ----------------------------------------


def _reads_scales(fn: Callable[[torch.Tensor], torch.Tensor]) -> Kernel:
    """A kernel that reads the weight's scale grid through ``fn``."""

    def kernel(qa: Quantized, qb: Quantized, quant: GemmQuant) -> torch.Tensor:
        return honest_kernel(qa, replace(qb, scales=fn(qb.scales).contiguous()), quant)

    return kernel


def _transposed(s: torch.Tensor) -> torch.Tensor:
    """The grid's memory read with rows and columns swapped (a square grid: its transpose)."""
    return s.t().reshape(s.shape)


def _shifted(s: torch.Tensor) -> torch.Tensor:
    """Block j of K reads block j+1's scale (the last keeps its own)."""
    return torch.cat([s[:, 1:], s[:, -1:]], 1)


def _skips_promotion(qa: Quantized, qb: Quantized, quant: GemmQuant) -> torch.Tensor:
    """Declares promotion every 128 and keeps the whole K in the tensor core's accumulator."""
    if qa.scheme.granularity.varies_along_k(qa.shape[1]):
        return quant_kernels.no_promotion(qa, qb, quant.accumulation, quant.out)
    return numcheck.fp8.emulated_gemm(qa, qb, FAST_ACCUMULATION, quant.out)


# -- quantizer bugs: operands that do not follow the declared scheme ------------------------


def _per_tensor(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """One scale by the declared rule from the whole tensor's amax, stored in every block."""
    right = numcheck.fp8.quantize(x, scheme)
    whole = numcheck.fp8.quantize(x, replace(scheme, granularity=numcheck.fp8.PER_TENSOR))
    return Quantized(whole.values, whole.scales.expand_as(right.scales).contiguous(), scheme)


def _cast_e4m3(t: torch.Tensor, *, clamp: bool) -> torch.Tensor:
    """``t`` cast to e4m3fn as a CUDA kernel casts: past 464 (448 and half a step) NaN
    unless clamped first."""
    over = t.abs() > 464
    v = t.clamp(-448, 448).to(torch.float8_e4m3fn).float()
    return v if clamp else torch.where(over, torch.full_like(v, math.nan), v)


def _ue8m0_down(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """Power-of-two scales rounded down from amax / 448 (floor of log2), elements clamped."""
    right = numcheck.fp8.quantize(x, scheme)
    from numcheck.precision.quant_scheme import block_amax, expand_to_elements

    amax = block_amax(x, scheme.granularity).clamp(min=scheme.floor)
    s = torch.pow(2.0, torch.floor(torch.log2(amax / 448.0)))
    full = expand_to_elements(s, right.shape, scheme.granularity)
    return Quantized(_cast_e4m3(x.float() / full, clamp=True), s, scheme)


def _no_clamp(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """Scales made for e4m3's 480 (the NaN pattern's value, not its largest) and a cast
    without clamping: the largest elements of each block become NaN."""
    from numcheck.precision.quant_scheme import block_amax, expand_to_elements

    amax = block_amax(x, scheme.granularity).clamp(min=scheme.floor)
    s = amax / 480.0
    full = expand_to_elements(s, (x.shape[0], x.shape[1]), scheme.granularity)
    return Quantized(_cast_e4m3(x.float() / full, clamp=False), s, scheme)


def _e5m2(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """e5m2 elements (and scales for e5m2's range) where e4m3fn is declared."""
    q = numcheck.fp8.quantize(x, replace(scheme, element="e5m2"))
    return Quantized(q.values, q.scales, scheme)


class StaleScales:
    """A quantizer that caches each weight shape's scales on first use and keeps them after
    the weight changed (the next seed's weight): its elements are the new weight's, divided
    by the old scales, clamped."""

    def __init__(self) -> None:
        self.cache: dict[tuple[int, ...], torch.Tensor] = {}

    def __call__(self, x: torch.Tensor, scheme: OperandScheme) -> Quantized:
        from numcheck.precision.quant_scheme import expand_to_elements

        right = numcheck.fp8.quantize(x, scheme)
        s = self.cache.setdefault((*x.shape, id(scheme)), right.scales)
        full = expand_to_elements(s, right.shape, scheme.granularity)
        return Quantized(_cast_e4m3(x.float() / full, clamp=True), s, scheme)


def planted_bugs() -> dict[str, Variant]:
    """Every planted bug, a fresh variant each (the stale cache starts empty)."""
    return {
        "bug_per_tensor_kernel": quant_variant(
            "bug_per_tensor_kernel", BLOCK, kernel=_reads_scales(lambda s: s.max().expand_as(s)),
            doc="kernel bug: one scale (the largest) for every weight block"),
        "bug_per_tensor_quantizer": quant_variant(
            "bug_per_tensor_quantizer", BLOCK, weight=_per_tensor,
            doc="quantizer bug: a per-tensor scale stored in every 128x128 block"),
        "bug_transposed_scales": quant_variant(
            "bug_transposed_scales", BLOCK, kernel=_reads_scales(_transposed),
            doc="kernel bug: the weight's scale grid read transposed"),
        "bug_shifted_scales": quant_variant(
            "bug_shifted_scales", BLOCK, kernel=_reads_scales(_shifted),
            doc="kernel bug: each block of K reads the next block's scale"),
        "bug_ue8m0_round_down": quant_variant(
            "bug_ue8m0_round_down", BLOCK_UE8M0, weight=_ue8m0_down, act=_ue8m0_down,
            doc="quantizer bug: UE8M0 scales rounded down, elements saturating"),
        "bug_no_clamp": quant_variant(
            "bug_no_clamp", BLOCK, act=_no_clamp,
            doc="quantizer bug: e4m3fn overflow cast without clamping (NaN)"),
        "bug_no_promotion": quant_variant(
            "bug_no_promotion", ROW, kernel=_skips_promotion,
            doc="kernel bug: promotion every 128 declared, the whole K kept in the tensor core"),
        "bug_no_promotion_block": quant_variant(
            "bug_no_promotion_block", BLOCK, kernel=_skips_promotion,
            doc="kernel bug: block scales applied, the tensor core never reset"),
        "bug_e5m2_for_e4m3": quant_variant(
            "bug_e5m2_for_e4m3", BLOCK, weight=_e5m2, act=_e5m2,
            doc="quantizer bug: e5m2 elements where e4m3fn is declared"),
        "bug_stale_scale": quant_variant(
            "bug_stale_scale", BLOCK, weight=StaleScales(),
            doc="quantizer bug: weight scales cached before the weight changed"),
    }


def _honest_quantizer(name: str) -> Quantizer:
    fn, _ = quant_kernels.HONEST_QUANTIZERS[name]
    return lambda x, scheme: fn(x, scheme, x)


def _honest_kernel(name: str) -> Kernel:
    fn, _ = quant_kernels.HONEST_KERNELS[name]
    return lambda qa, qb, quant: fn(qa, qb, quant.accumulation, quant.out)


def honest_alternatives() -> dict[str, tuple[Variant, str]]:
    """Honest FP8 variants written as other projects write them, each with the shipped
    variant whose budget it is held to: other kernels of the declared model (an MMA of 16,
    14 kept bits, rounding to nearest, promotion every 64, split-K, dequantized float32) and
    other quantizers (DeepGEMM's, torchao's)."""
    out: dict[str, tuple[Variant, str]] = {}
    for kernel in ("fused16", "bits14", "round_nearest", "promote64", "split_k4"):
        for quant, head in ((BLOCK, "fp8_block"), (ROW, "fp8_row")):
            name = f"honest_{head}_{kernel}"
            out[name] = (quant_variant(name, quant, kernel=_honest_kernel(kernel)), head)
    for quantizer, quant, head in (("deepgemm", BLOCK, "fp8_block"),
                                   ("torchao", BLOCK, "fp8_block"),
                                   ("deepgemm", BLOCK_UE8M0, "fp8_block_ue8m0")):
        name = f"honest_{head}_{quantizer}_quantizer"
        q = _honest_quantizer(quantizer)
        out[name] = (quant_variant(name, quant, weight=q, act=q), head)
    return out
