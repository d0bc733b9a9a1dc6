"""How far an honest low-precision GEMM may lie from its simulated reference, per element.

A variant that quantizes its operands and multiplies them is held to two references. The
second, the **simulated reference** (numcheck.precision.quant_accumulate.simulated_reference),
multiplies the very operands the variant's own quantizer produced, dequantized exactly, in
float64: the quantization error is gone, and what remains of an honest kernel's difference is
its accumulation and its output rounding. :func:`sim_bound` bounds that per element, from the
operands, the declared accumulation model and the output dtype; :func:`sim_ratio` divides the
difference by it. An honest kernel stays at or under 1; a kernel that applies a wrong scale,
reads scales transposed or shifted, skips a promotion it declares, or decodes other elements
than the quantizer wrote goes far past it, however loose the golden's budget is.

The bound of element ``(m, n)`` is the sum of three terms:

1. **output rounding**: half a unit in the last place of the output dtype at
   ``|y_sim| + (the accumulation bound)``: exact for round-to-nearest;
2. **float32 roundings** (the ``fp32`` model's additions, every model's chunk scaling and
   promotion): ``sigmas * u32 * sqrt(n / 3) * sum_k |a_k b_k|`` for ``n`` roundings, each a
   relative error of at most ``u32 = 2^-24`` of a partial sum no larger than
   ``sum_k |a_k b_k|`` (uniform, so of standard deviation ``u32 / sqrt(3)`` of it); capped by
   the worst case ``n * u32 * sum_k |a_k b_k|``;
3. **the tensor core's alignment** (``promoted`` and ``none``): at each step of ``fused``
   products the model drops, from each addend (the products and the running sum), its bits
   below ``q = 2^(E - bits)``, ``E`` the exponent of the step's largest addend. Here ``E``
   is taken from the step's products and from the chunk's exact partial sums at every
   ``fused_min`` products within the step, widened by the bound so far, so it is never below
   that of a kernel whose step is anything from ``fused_min`` to ``fused`` products; the
   running sum is counted as an addend once per ``fused_min`` products. Truncation toward
   zero loses ``f * q`` of each addend with bits below ``q`` (a product is known exactly, so
   whether it has them is known; the running sum is assumed to), ``f`` in [0, 1) of mean at
   most 1/2: the expected error is ``-q/2`` times the signed count of those addends. An
   addend with ``d`` bits below ``q`` has ``f`` evenly spread over ``2^d`` values, so its
   loss's mean square about that mean is ``q^2 (1/12 + 4^-d / 6) <= q^2 / 8`` (rounding to
   nearest: mean 0, the same bound; toward minus infinity: ``-q/2`` whatever the sign). Over
   a chunk, then over chunks (each times its scales): ``|sum of means| + sigmas *
   sqrt(sum of mean squares)``, capped by the worst case (every addend losing a whole ``q``).

``sigmas`` (:data:`SIGMAS`) is how far the random part may reach. It is a sum of many small
independent errors, close to Gaussian, past 6 standard deviations with a probability near
2e-9 per element; where few addends make that picture wrong, the worst case is the smaller
and caps the bound.

The bound assumes what a kernel of the declared model does: its step from ``fused_min`` to
``fused`` products, its kept bits no fewer than declared, its promotions no rarer (at multiples
of ``promote_every`` from the start of K). A kernel that differs (cuBLAS's fast
accumulation splits K, which only makes its error smaller) is measured against it in
docs/fp8.md. Pure torch, float64; its cost is about twice the emulation's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from numcheck.precision import PureCache, dtype_name, one_thread, tensor_digest
from numcheck.precision.quant_accumulate import (
    Accumulation,
    _row_scales,
    _slabs,
    chunks,
    scales_vary_along_k,
    simulated_reference,
)
from numcheck.precision.quantize import Quantized, dequantize

if TYPE_CHECKING:
    import torch

__all__ = ["SIGMAS", "SimComparison", "compare_to_simulated", "half_ulp", "sim_bound",
           "sim_ratio"]

#: Standard deviations the random part of an honest accumulation error may reach.
SIGMAS = 6.0
_U32 = 2.0**-24
#: (explicit mantissa bits, exponent of the smallest normal) of the output dtypes.
_OUT_FORMATS = {"float32": (23, -126), "bfloat16": (7, -126), "float16": (10, -14),
                "float64": (52, -1022)}


def half_ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Half a unit in the last place of ``dtype`` at magnitude ``v`` (float64): the largest
    error of rounding a value no larger than ``v`` to ``dtype`` by round-to-nearest."""
    import torch

    name = dtype_name(dtype)
    if name not in _OUT_FORMATS:
        raise ValueError(f"half_ulp: output dtype {dtype} is not one of "
                         f"{', '.join(_OUT_FORMATS)}")
    bits, emin = _OUT_FORMATS[name]
    a = v.to(torch.float64).abs()
    _, e = torch.frexp(a)
    exp = torch.where(a > 0, torch.clamp(e - 1, min=emin), torch.full_like(e, emin))
    return torch.ldexp(torch.full_like(v, 0.5, dtype=torch.float64), exp - bits)


def _fp32_part(absprod: torch.Tensor, n: int, sigmas: float) -> torch.Tensor:
    import torch

    stat = sigmas * _U32 * math.sqrt(n / 3) * absprod
    worst = n * _U32 / (1 - n * _U32) * absprod
    return torch.minimum(stat, worst)


#: The tensor core's part of the bound, of the same operands and model (members of a
#: family that differ by their output dtype, or multiply numcheck's operands, share it).
_TC_PARTS = PureCache(32)


def _tc_part(a: Quantized, b: Quantized, acc: Accumulation, sigmas: float) -> torch.Tensor:
    import torch

    key = tensor_digest(a.values, a.scales, a.global_scale, a.scheme, b.values, b.scales,
                        b.global_scale, b.scheme, acc, sigmas)
    held = _TC_PARTS.get(key)
    if not isinstance(held, torch.Tensor):
        held = _tc_part_of(a, b, acc, sigmas)
        _TC_PARTS.put(key, held)
    return held.clone()


def _tc_part_of(a: Quantized, b: Quantized, acc: Accumulation, sigmas: float
                ) -> torch.Tensor:
    import torch

    av = a.values.to(torch.float32)
    bv = b.values.to(torch.float32).to(av.device)
    a64, b64 = av.double(), bv.double()
    m, n = a.shape[0], b.shape[0]
    sa, sb = _row_scales(a).double(), _row_scales(b).double().to(av.device)
    vary = scales_vary_along_k(a, b)
    out = torch.empty(m, n, dtype=torch.float64, device=av.device)
    bits = acc.mantissa_bits
    for rows in _slabs(m, n, acc.fused):
        shape = (rows.stop - rows.start, n)
        mean_t = torch.zeros(shape, dtype=torch.float64, device=av.device)
        var_t, worst_t = torch.zeros_like(mean_t), torch.zeros_like(mean_t)
        for ch in chunks(a, b, acc):
            big_c = torch.zeros_like(mean_t)  # the exact partial sum of the chunk
            mean_c, var_c, worst_c = (torch.zeros_like(mean_t) for _ in range(3))
            for s0 in range(ch.start, ch.stop, acc.fused):
                s1 = min(s0 + acc.fused, ch.stop)
                p = av[rows, None, s0:s1] * bv[None, :, s0:s1]  # exact in float32
                # The running sum where a kernel of the narrowest declared step
                # (fused_min) would align it: at the start of each sub-step.
                subs = []
                for t0 in range(s0, s1, acc.fused_min):
                    subs.append(big_c.clone())
                    big_c += a64[rows, t0:min(t0 + acc.fused_min, s1)] @ b64[
                        :, t0:min(t0 + acc.fused_min, s1)].T
                so_far = torch.minimum(mean_c.abs() + sigmas * var_c.sqrt(), worst_c)
                widest = torch.stack(subs).abs().amax(0)
                top = torch.maximum(widest + so_far, p.abs().amax(-1).double())
                _, e = torch.frexp(top)
                q = torch.where(top > 0, torch.ldexp(torch.ones_like(top), e - 1 - bits),
                                torch.zeros_like(top))
                # Only addends with bits below q lose anything: products are known exactly
                # (q, a power of two, is never below the model's own); the running sum
                # is counted, once per sub-step, whenever it is nonzero.
                q32 = q.to(torch.float32).clamp(min=2.0**-126)[..., None]
                cut = torch.fmod(p, q32) != 0
                lossy = cut.sum(-1) + sum((c != 0).to(torch.int64) for c in subs)
                if acc.rounding == "trunc":  # toward zero: a loss of the addend's sign
                    signed = (p.sign() * cut).sum(-1) + sum(c.sign() for c in subs)
                    mean_c -= q / 2 * signed
                    worst_c += lossy * q
                elif acc.rounding == "floor":  # toward minus infinity: always a loss
                    mean_c -= q / 2 * lossy
                    worst_c += lossy * q
                else:
                    worst_c += lossy * q / 2
                var_c += lossy * q * q / 8
            f = (sa[rows, ch.a_block, None] * sb[None, :, ch.b_block]) if vary else 1.0
            mean_t += f * mean_c
            var_t += f * f * var_c
            worst_t += f * worst_c
        tc = torch.minimum(mean_t.abs() + sigmas * var_t.sqrt(), worst_t)
        if not vary:
            tc = tc * (sa[rows, 0, None] * sb[None, :, 0])
        out[rows] = tc
    for q_ in (a, b):
        if q_.global_scale is not None:
            out = out * float(q_.global_scale)
    return out


@one_thread()
def sim_bound(a: Quantized, b: Quantized, accumulation: Accumulation,
              out_dtype: torch.dtype | None = None, *, sigmas: float = SIGMAS,
              y_sim: torch.Tensor | None = None) -> torch.Tensor:
    """The per-element bound (float64 ``[M, N]``) of ``|y - y_sim|`` for an honest kernel
    computing ``a @ b^T`` under ``accumulation`` with its result in ``out_dtype`` (float32
    by default): module docstring. ``y_sim`` may be passed when already computed."""
    import torch

    out_dtype = out_dtype or torch.float32
    parts = chunks(a, b, accumulation)
    k = a.shape[1]
    da, db = dequantize(a), dequantize(b).to(a.values.device)
    absprod = da.abs() @ db.abs().T
    if y_sim is None:
        y_sim = simulated_reference(a, b)
    # float32 roundings: the fp32 model's additions along K, then per chunk a scale product,
    # a multiplication and an addition, and at the end three more (scales, global scales).
    n = (k if not accumulation.tensor_core else 0) + 3 * len(parts) + 3
    bound = _fp32_part(absprod, n, sigmas)
    if accumulation.tensor_core:
        bound = bound + _tc_part(a, b, accumulation, sigmas)
    return bound + half_ulp(y_sim.abs() + bound, out_dtype)


def sim_ratio(y: torch.Tensor, y_sim: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """``|y - y_sim| / bound`` per element (float64): 0 where they are equal, infinity where
    ``y`` is not finite (or the bound is 0 and they differ), NaN where ``y_sim`` is not."""
    import torch

    yd = y.to(torch.float64)
    err = (yd - y_sim).abs()
    ratio = torch.where(err == 0, torch.zeros_like(err),
                        err / torch.where(bound > 0, bound, torch.zeros_like(bound)))
    ratio = torch.where(torch.isfinite(yd), ratio, torch.full_like(ratio, math.inf))
    return torch.where(torch.isfinite(y_sim), ratio, torch.full_like(ratio, math.nan))


@dataclass(frozen=True)
class SimComparison:
    """A kernel's output against its simulated reference: the worst ratio, where, and the
    pieces (each float64 ``[M, N]``)."""

    worst: float
    index: tuple[int, int]
    ratio: torch.Tensor
    y_sim: torch.Tensor
    bound: torch.Tensor

    @property
    def passed(self) -> bool:
        """True when no element passes its bound."""
        return self.worst <= 1.0


def compare_to_simulated(y: torch.Tensor, a: Quantized, b: Quantized,
                         accumulation: Accumulation, out_dtype: torch.dtype | None = None,
                         *, sigmas: float = SIGMAS) -> SimComparison:
    """A kernel's ``y`` (``[M, N]``, any float dtype) for ``a @ b^T`` against the simulated
    reference and the bound of the declared ``accumulation`` and ``out_dtype``."""
    import torch

    y_sim = simulated_reference(a, b)
    bound = sim_bound(a, b, accumulation, out_dtype, sigmas=sigmas, y_sim=y_sim)
    ratio = sim_ratio(y.to(y_sim.device), y_sim, bound)
    flat = torch.where(torch.isnan(ratio), math.inf, ratio).reshape(-1)
    i = int(flat.argmax()) if flat.numel() else 0
    worst = float(flat[i]) if flat.numel() else 0.0
    return SimComparison(worst, (i // max(1, ratio.shape[1]), i % max(1, ratio.shape[1])),
                         ratio, y_sim, bound)
