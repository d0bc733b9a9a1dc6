"""A GEMM of two quantized operands under a declared accumulation model, bit for bit.

``y = a @ b^T``: ``a`` is ``[M, K]``, ``b`` is ``[N, K]`` (a weight as ``nn.Linear`` stores it,
or the second operand transposed), both numcheck.precision.quantize.Quantized; ``y`` is
``[M, N]``. How the products are summed is the :class:`Accumulation` the variant declares:

- ``fp32``: products summed in IEEE float32, one after the other along K;
- ``promoted``: an FP8 tensor core's accumulation with its partial sums promoted into a
  float32 accumulator every ``promote_every`` elements of K (DeepSeek V3's recipe, N = 128,
  "4 WGMMAs"; cuBLAS's FP8 GEMM without fast accumulation);
- ``none``: "fast accumulation": the whole K in the tensor core's accumulator.

The tensor core's accumulator is modelled as the DeepSeek V3 technical report describes
Hopper's (section 3.5.2): the products of one MMA step (``fused`` of them, 32 for one FP8
WGMMA k-step) and the running sum are aligned to the largest exponent among them and keep
``mantissa_bits`` bits below its leading bit, the rest truncated ("around 14 bits" in the
report: 13 here, 14 significant); the aligned terms are then added exactly. The defaults are
those that reproduce the H200 measurements in docs/fp8.md; numcheck claims bit-exactness with
this model only, never with cuBLAS or a kernel library.

Where the scales change along K (1xG groups, GxG blocks), the running sum of each stretch of K
that shares one scale per operand (a **chunk**: between consecutive scale-block and promotion
boundaries) is multiplied by ``scale_a * scale_b`` in float32 and added to the float32
accumulator, as DeepGEMM's kernels do; a scale constant along K (per tensor, per row) and
NVFP4's global scales multiply the float32 accumulator once at the end, as cuBLAS's epilogue
does. The result is rounded once to the output dtype.

Every step is exact or one IEEE float32 operation in an order fixed here (the aligned terms'
sum is exact in float32, so no summation order can change it): the same bits on any CPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from numcheck.precision import PureCache, one_thread, tensor_digest
from numcheck.precision.quant_formats import pow2
from numcheck.precision.quantize import Quantized, dequantize

if TYPE_CHECKING:
    import torch

__all__ = ["ACCUMULATION_KINDS", "FAST_ACCUMULATION", "FP32_ACCUMULATION", "PROMOTED_128",
           "TC_ROUNDINGS", "Accumulation", "Chunk", "chunks", "emulated_gemm",
           "simulated_reference"]

#: The accumulation models by name.
ACCUMULATION_KINDS = ("fp32", "promoted", "none")
#: How the tensor core's aligned addends lose their low bits: toward zero, to nearest even,
#: or toward minus infinity (the report's "sign-fill right shifting" read literally; the H200
#: figures rule it out, docs/fp8.md).
TC_ROUNDINGS = ("trunc", "rn", "floor")
#: Elements of one row slab of the emulation's [rows, N, fused] products (memory bound).
_SLAB_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Accumulation:
    """How a GEMM sums its products over K (module docstring); every parameter is data.

    ``promote_every``: elements of K between promotions (``promoted`` only). The tensor-core
    accumulator (``promoted`` and ``none``): ``fused`` products per aligned step,
    ``mantissa_bits`` bits kept below the leading bit of the step's largest addend, the rest
    dropped by ``rounding`` (``trunc``: toward zero; ``rn``: to nearest even; ``floor``: toward
    minus infinity). Promotions fall
    at multiples of ``promote_every`` from the start of K (and at every scale block).
    """

    kind: str = "fp32"
    promote_every: int = 128
    mantissa_bits: int = 13
    fused: int = 32
    rounding: str = "trunc"
    #: The narrowest step an honest kernel of this model may take (a divisor of ``fused``):
    #: numcheck.precision.quant_bound holds for any step from ``fused_min`` to ``fused``.
    fused_min: int = 8

    def __post_init__(self) -> None:
        if self.kind not in ACCUMULATION_KINDS:
            raise ValueError(f"Accumulation: kind must be one of {ACCUMULATION_KINDS}, got "
                             f"{self.kind!r}")
        if self.rounding not in TC_ROUNDINGS:
            raise ValueError(f"Accumulation: rounding must be one of {TC_ROUNDINGS}, got "
                             f"{self.rounding!r}")
        for name in ("promote_every", "mantissa_bits", "fused", "fused_min"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"Accumulation: {name} must be a positive integer, got {v!r}")
        if self.fused % self.fused_min:
            raise ValueError(f"Accumulation: fused_min ({self.fused_min}) must divide fused "
                             f"({self.fused})")
        # The aligned terms of one step (fused products and the running sum), each below
        # 2^(bits + 1) steps, must add exactly in float32's 24 bits.
        if (self.fused + 1) << (self.mantissa_bits + 1) > 1 << 24:
            raise ValueError(f"Accumulation: {self.fused} products of {self.mantissa_bits} "
                             "kept bits do not add exactly in float32: lower fused or "
                             "mantissa_bits")

    @property
    def tensor_core(self) -> bool:
        """True for the models with a limited-precision tensor-core accumulator."""
        return self.kind != "fp32"

    @property
    def label(self) -> str:
        """``fp32``, ``promoted128``, ``fast`` (the tensor core's parameters appended when
        they are not the defaults)."""
        base = {"fp32": "fp32", "promoted": f"promoted{self.promote_every}",
                "none": "fast"}[self.kind]
        if self.tensor_core and (self.mantissa_bits, self.fused, self.rounding) != (
                13, 32, "trunc"):
            base += f"_m{self.mantissa_bits}f{self.fused}{self.rounding}"
        return base

    @property
    def unit_roundoff(self) -> float:
        """The relative error of one tensor-core alignment step at its largest addend
        (``2^-bits`` truncating, half that rounding to nearest); float32's for ``fp32``."""
        if not self.tensor_core:
            return 2.0**-24
        return 2.0 ** -self.mantissa_bits / (2 if self.rounding == "rn" else 1)


#: Products summed in float32.
FP32_ACCUMULATION = Accumulation("fp32")
#: Hopper FP8 tensor cores, promoted every 128 elements of K (DeepSeek V3, DeepGEMM, cuBLAS).
PROMOTED_128 = Accumulation("promoted", 128)
#: Hopper FP8 tensor cores without promotion ("fast accumulation").
FAST_ACCUMULATION = Accumulation("none")


@dataclass(frozen=True)
class Chunk:
    """A stretch ``[start, stop)`` of K in which both operands' scales are constant and the
    tensor core is not promoted; ``a_block`` and ``b_block`` index the scale grids along K."""

    start: int
    stop: int
    a_block: int
    b_block: int


def _check_pair(a: Quantized, b: Quantized) -> int:
    if a.values.dim() != 2 or b.values.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"a GEMM a @ b^T needs a [M, K] and b [N, K] with the same K, got "
                         f"{list(a.values.shape)} and {list(b.values.shape)}")
    return a.shape[1]


def scales_vary_along_k(a: Quantized, b: Quantized) -> bool:
    """True when either operand's scale changes along K."""
    k = a.shape[1]
    return a.scheme.granularity.varies_along_k(k) or b.scheme.granularity.varies_along_k(k)


def chunks(a: Quantized, b: Quantized, accumulation: Accumulation) -> list[Chunk]:
    """The chunks of K of ``a @ b^T`` under ``accumulation`` (module docstring).

    ValueError for ``none`` (no promotion) where a scale changes along K: such a kernel must
    leave the tensor core at every scale block, which is a promotion."""
    k = _check_pair(a, b)
    ga, gb = a.scheme.granularity, b.scheme.granularity
    bounds = set(ga.k_boundaries(k)) | set(gb.k_boundaries(k)) | {0}
    if accumulation.kind == "none" and scales_vary_along_k(a, b):
        raise ValueError(f"accumulation 'none' (no promotion) cannot apply scales that change "
                         f"along K ({a.scheme.label} x {b.scheme.label}): declare 'promoted' "
                         "with promote_every dividing the scale blocks, or scales constant "
                         "along K")
    if accumulation.kind == "promoted":
        bounds |= set(range(0, k, accumulation.promote_every))
    edges = sorted(bounds) + [k]
    ka = ga.block_shape(a.shape)[1]
    kb = gb.block_shape(b.shape)[1]
    return [Chunk(s, e, s // ka, s // kb) for s, e in pairwise(edges) if e > s]


def _row_scales(q: Quantized) -> torch.Tensor:
    """The scale grid repeated along rows: ``[rows, blocks along K]`` (float32, whatever
    float dtype the operand holds its scales in)."""
    import torch

    br = q.scheme.granularity.block_shape(q.shape)[0]
    s = q.scales.to(q.values.device, torch.float32)
    return s.repeat_interleave(br, dim=0)[: q.shape[0]]


def _slabs(m: int, n: int, width: int) -> Iterator[slice]:
    rows = max(1, _SLAB_ELEMENTS // max(1, n * width))
    for r0 in range(0, m, rows):
        yield slice(r0, min(m, r0 + rows))


def _tc_chunk(a: torch.Tensor, b: torch.Tensor, acc: Accumulation) -> torch.Tensor:
    """The tensor core's running sum over one chunk of K (float32 ``[M, N]``) of float32
    element values ``a`` ``[M, k]`` and ``b`` ``[N, k]`` (module docstring)."""
    import torch

    c = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float32, device=a.device)
    cut = {"trunc": torch.trunc, "rn": torch.round, "floor": torch.floor}[acc.rounding]
    for s0 in range(0, a.shape[1], acc.fused):
        s1 = min(s0 + acc.fused, a.shape[1])
        p = a[:, None, s0:s1] * b[None, :, s0:s1]  # exact: at most 4 x 4 significant bits
        m = torch.maximum(c.abs(), p.abs().amax(-1))
        _, e = torch.frexp(m)  # the step's largest exponent is e - 1
        q = pow2(e.to(torch.int64) - 1 - acc.mantissa_bits)
        c = cut(c / q) * q + (cut(p / q[..., None]) * q[..., None]).sum(-1)
    return c


def _fp32_chunk(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Products of one chunk summed in float32 one after the other along K."""
    import torch

    c = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float32, device=a.device)
    for k in range(a.shape[1]):
        c = c + a[:, k, None] * b[None, :, k]  # the product is exact; one rounding per add
    return c


#: The float32 sums of the same operands under the same model.
_SUMS = PureCache(32)


@one_thread()
def emulated_gemm(a: Quantized, b: Quantized, accumulation: Accumulation,
                  out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a @ b^T`` computed under ``accumulation`` and rounded to ``out_dtype`` (float32 by
    default; bf16, fp16), returned as float32 holding those values (module docstring)."""
    import torch

    out_dtype = out_dtype or torch.float32
    # The sums depend on the operands and the model only: members that differ by their
    # output dtype (or variants multiplying numcheck's operands) share them (PureCache).
    key = tensor_digest(a.values, a.scales, a.global_scale, a.scheme, b.values, b.scales,
                        b.global_scale, b.scheme, accumulation)
    held = _SUMS.get(key)
    y = held if isinstance(held, torch.Tensor) else _sums(a, b, accumulation)
    _SUMS.put(key, y)
    out = y.to(out_dtype).to(torch.float32)
    return out.clone() if out is y else out  # never hand out the held tensor


def _sums(a: Quantized, b: Quantized, accumulation: Accumulation) -> torch.Tensor:
    """``a @ b^T`` under ``accumulation``, in float32, before the output's rounding."""
    import torch

    parts = chunks(a, b, accumulation)
    m, n = a.shape[0], b.shape[0]
    av = a.values.to(torch.float32)
    bv = b.values.to(torch.float32).to(av.device)
    sa, sb = _row_scales(a), _row_scales(b).to(av.device)
    vary = scales_vary_along_k(a, b)
    y = torch.empty(m, n, dtype=torch.float32, device=av.device)
    width = accumulation.fused if accumulation.tensor_core else 1
    for rows in _slabs(m, n, width):
        acc = torch.zeros(rows.stop - rows.start, n, dtype=torch.float32, device=av.device)
        for ch in parts:
            ak, bk = av[rows, ch.start:ch.stop], bv[:, ch.start:ch.stop]
            c = (_tc_chunk(ak, bk, accumulation) if accumulation.tensor_core
                 else _fp32_chunk(ak, bk))
            if vary:
                c = c * (sa[rows, ch.a_block, None] * sb[None, :, ch.b_block])
            acc = acc + c
        end = torch.ones_like(acc)
        if not vary:
            end = sa[rows, 0, None] * sb[None, :, 0]
        if a.global_scale is not None or b.global_scale is not None:
            one = torch.ones((), dtype=torch.float32, device=av.device)
            ga = (a.global_scale.to(av.device, torch.float32) if a.global_scale is not None
                  else one)
            gb = (b.global_scale.to(av.device, torch.float32) if b.global_scale is not None
                  else one)
            end = end * (ga * gb)
        y[rows] = acc * end
    return y


#: Simulated references of the same operands.
_EXACT = PureCache(32)


@one_thread()
def simulated_reference(a: Quantized, b: Quantized) -> torch.Tensor:
    """``a @ b^T`` of the exact dequantized operands, in float64: the reference a kernel on
    these very operands is held to (its only error the kernel's accumulation and output
    rounding). Pure: held for the same operands (a new tensor each call)."""
    import torch

    _check_pair(a, b)
    key = tensor_digest(a.values, a.scales, a.global_scale, a.scheme, b.values, b.scales,
                        b.global_scale, b.scheme)
    held = _EXACT.get(key)
    if not isinstance(held, torch.Tensor):
        held = dequantize(a) @ dequantize(b).to(a.values.device).T
        _EXACT.put(key, held)
    return held.clone()
