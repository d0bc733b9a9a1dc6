"""Test-only FP8/FP4 kernels and quantizers: honest alternatives, and planted bugs of each kind.

Issue 35's bug kinds, planted where each one lives:

- in a **quantizer** (:data:`QUANTIZER_BUGS`, ``(x, scheme, x_before) -> Quantized``): caught
  by numcheck.precision.quant_validate against the declared scheme and the tensor;
- in a **kernel** that multiplies correct operands wrongly (:data:`KERNEL_BUGS`,
  ``(a, b, accumulation, out_dtype) -> y``): caught by the simulated reference's bound
  (numcheck.precision.quant_bound), however loose the golden's budget.

:data:`HONEST_KERNELS` are other honest ways to compute the declared model (a narrower MMA
step, more kept bits, rounding to nearest, split K, more frequent promotion, dequantize and
multiply in float32): the bound must hold for all of them, not only for numcheck's emulation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise

import torch

from numcheck.precision.quant_accumulate import Accumulation, emulated_gemm, scales_vary_along_k
from numcheck.precision.quant_formats import round_to_element
from numcheck.precision.quant_scheme import PER_TENSOR, OperandScheme, block_amax
from numcheck.precision.quantize import Quantized, as_quantized, dequantize, quantize

Kernel = Callable[[Quantized, Quantized, Accumulation, torch.dtype], torch.Tensor]
Quantizer = Callable[[torch.Tensor, OperandScheme, torch.Tensor], Quantized]


# -- operands ------------------------------------------------------------------------------

#: Kinds of operand data: plain normal; magnitudes varying by 128-block (as trained weights'
#: do, so block scales differ); all positive (a long K's truncation adds up); rare outliers;
#: a block of zeros and a block of tiny values.
DATA = ("normal", "blocky", "positive", "outliers", "zeros_and_tiny")


def operand(kind: str, rows: int, k: int, seed: int) -> torch.Tensor:
    """A float32 operand ``[rows, k]`` of one of :data:`DATA`."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g)
    if kind == "blocky":
        r = torch.exp(torch.randn(-(-rows // 128), 1, generator=g)).repeat_interleave(128, 0)
        c = torch.exp(torch.randn(1, -(-k // 128), generator=g)).repeat_interleave(128, 1)
        x = x * r[:rows] * c[:, :k]
    elif kind == "positive":
        x = x.abs()
    elif kind == "outliers":
        x = x + 50 * (torch.rand(rows, k, generator=g) < 0.002) * torch.randn(rows, k, generator=g)
    elif kind == "zeros_and_tiny":
        x[:, : min(k, 32)] = 0
        x[: max(1, rows // 2), -min(k, 16):] *= 1e-6
    elif kind != "normal":
        raise ValueError(kind)
    return x


# -- honest kernels ------------------------------------------------------------------------


def model(a: Quantized, b: Quantized, acc: Accumulation, out: torch.dtype) -> torch.Tensor:
    """numcheck's emulation of the declared model itself."""
    return emulated_gemm(a, b, acc, out)


def _tc_variant(**changes: object) -> Kernel:
    def kernel(a: Quantized, b: Quantized, acc: Accumulation, out: torch.dtype) -> torch.Tensor:
        return emulated_gemm(a, b, replace(acc, **changes) if acc.tensor_core else acc, out)

    return kernel


def slice_k(q: Quantized, k0: int, k1: int) -> Quantized:
    """The operand's columns ``[k0, k1)`` (k0 on a scale block boundary) as a Quantized."""
    g = q.scheme.granularity
    if g.cols == 0:
        return replace(q, values=q.values[:, k0:k1])
    assert k0 % g.cols == 0
    return replace(q, values=q.values[:, k0:k1],
                   scales=q.scales[:, k0 // g.cols:-(-k1 // g.cols)])


def split_k(parts: int) -> Kernel:
    """K cut into ``parts`` slices on scale-block boundaries, each computed under the model
    (scales included), the float32 partials added: cuBLAS's split-K."""

    def kernel(a: Quantized, b: Quantized, acc: Accumulation, out: torch.dtype) -> torch.Tensor:
        k = a.shape[1]
        # Slices on tile boundaries: the scale blocks, promotions and MMA steps all align.
        step = max(a.scheme.granularity.cols, b.scheme.granularity.cols, acc.fused
                   if acc.tensor_core else 1, acc.promote_every if acc.kind == "promoted" else 1)
        cut = sorted({min(k, -(-k * i // parts // step) * step) for i in range(parts + 1)})
        y = torch.zeros(a.shape[0], b.shape[0], device=a.values.device)
        for k0, k1 in pairwise(cut):
            if k1 > k0:
                y = y + emulated_gemm(slice_k(a, k0, k1), slice_k(b, k0, k1), acc)
        return y.to(out).float()

    return kernel


def dequantized_fp32(a: Quantized, b: Quantized, acc: Accumulation,
                     out: torch.dtype) -> torch.Tensor:
    """Dequantize to float32 and multiply in float32 (any order torch's matmul takes)."""
    return (dequantize(a, torch.float32) @ dequantize(b, torch.float32).T).to(out).float()


#: Honest kernels, and the accumulation models each one is an honest member of.
HONEST_KERNELS: dict[str, tuple[Kernel, tuple[str, ...]]] = {
    "model": (model, ("fp32", "promoted", "none")),
    "fused16": (_tc_variant(fused=16), ("promoted", "none")),
    "bits14": (_tc_variant(mantissa_bits=14), ("promoted", "none")),
    "round_nearest": (_tc_variant(rounding="rn"), ("promoted", "none")),
    "promote64": (_tc_variant(promote_every=64), ("promoted",)),
    "split_k4": (split_k(4), ("fp32", "promoted", "none")),
    "dequantized_fp32": (dequantized_fp32, ("fp32",)),
}


# -- kernels with a planted bug ----------------------------------------------------------------


def _with_b_scales(fn: Callable[[torch.Tensor], torch.Tensor]) -> Kernel:
    def kernel(a: Quantized, b: Quantized, acc: Accumulation, out: torch.dtype) -> torch.Tensor:
        return emulated_gemm(a, replace(b, scales=fn(b.scales).contiguous()), acc, out)

    return kernel


def _pow2_down(s: torch.Tensor) -> torch.Tensor:
    _, e = torch.frexp(s)
    return torch.ldexp(torch.ones_like(s), e - 1)


def _unpromoted_snapshots(a: torch.Tensor, b: torch.Tensor, acc: Accumulation,
                         ends: list[int]) -> list[torch.Tensor]:
    """The tensor core's running sum over the whole K, never promoted (the model's alignment
    steps), read at each of ``ends``."""
    c = torch.zeros(a.shape[0], b.shape[0], device=a.device)
    cut = {"trunc": torch.trunc, "rn": torch.round, "floor": torch.floor}[acc.rounding]
    snaps, s0 = [], 0
    for end in ends:
        while s0 < end:
            s1 = min(s0 + acc.fused, end)
            p = a[:, None, s0:s1] * b[None, :, s0:s1]
            _, e = torch.frexp(torch.maximum(c.abs(), p.abs().amax(-1)))
            q = torch.ldexp(torch.ones_like(c), e - 1 - acc.mantissa_bits)
            c = cut(c / q) * q + (cut(p / q[..., None]) * q[..., None]).sum(-1)
            s0 = s1
        snaps.append(c.clone())
    return snaps


def no_promotion(a: Quantized, b: Quantized, acc: Accumulation,
                 out: torch.dtype) -> torch.Tensor:
    """Declares promotion every N and never promotes: the tensor core's accumulator runs
    over the whole K. With block scales the kernel reads it at each block's end and adds the
    block's increment, scaled, to float32 (the accumulator is never reset)."""
    fast = replace(acc, kind="none")
    if not scales_vary_along_k(a, b):
        return emulated_gemm(a, b, fast, out)
    k = a.shape[1]
    step = max(a.scheme.granularity.cols, b.scheme.granularity.cols)
    ends = [min(k, e) for e in range(step, k + step, step)]
    snaps = _unpromoted_snapshots(a.values, b.values, acc, ends)
    ra = a.scales.repeat_interleave(a.scheme.granularity.block_shape(a.shape)[0], 0)
    rb = b.scales.repeat_interleave(b.scheme.granularity.block_shape(b.shape)[0], 0)
    y = torch.zeros(a.shape[0], b.shape[0], device=a.values.device)
    before = torch.zeros_like(y)
    for j, snap in enumerate(snaps):
        y = y + (snap - before) * (ra[: a.shape[0], j, None] * rb[None, : b.shape[0], j])
        before = snap
    return y.to(out).float()


def e5m2_decode(a: Quantized, b: Quantized, acc: Accumulation,
                out: torch.dtype) -> torch.Tensor:
    """The kernel is instantiated for e5m2 where the operands are e4m3fn bytes: it reads each
    byte as an e5m2 value."""
    def reread(q: Quantized) -> Quantized:
        raw = q.values.to(torch.float8_e4m3fn).view(torch.uint8).view(torch.float8_e5m2)
        return replace(q, values=raw.float())

    return emulated_gemm(reread(a), reread(b), acc, out)


def stale_kernel_scales(stale: Quantized) -> Kernel:
    """The kernel keeps the weight scales it cached before the weight changed."""
    return _with_b_scales(lambda s: stale.scales)


#: Kernels with a planted bug, each a function of the stale weight's quantization (used by
#: the stale-scale kernel only).
KERNEL_BUGS: dict[str, Callable[[Quantized], Kernel]] = {
    "per_tensor_scale": lambda old: _with_b_scales(lambda s: s.max().expand_as(s)),
    "transposed_scales": lambda old: _with_b_scales(lambda s: s.T),
    "shifted_scales": lambda old: _with_b_scales(lambda s: torch.cat([s[:, 1:], s[:, -1:]], 1)),
    "scale_never_advanced": lambda old: _with_b_scales(lambda s: s[:, :1].expand_as(s)),
    "ue8m0_rounded_down": lambda old: _with_b_scales(_pow2_down),
    "no_promotion": lambda old: no_promotion,
    "e5m2_decode": lambda old: e5m2_decode,
    "stale_scale": stale_kernel_scales,
}


# -- honest quantizers written as other projects write them ----------------------------------


def _blocks_of(x: torch.Tensor, scheme: OperandScheme) -> torch.Tensor:
    return block_amax(x, scheme.granularity)


def _e2m1_nearest(t: torch.Tensor) -> torch.Tensor:
    """e2m1 rounding by bucketing against the midpoints (ties to the even mantissa)."""
    mags = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], device=t.device)
    mids = (mags[1:] + mags[:-1]) / 2
    a = t.abs().clamp(max=6.0)
    idx = torch.bucketize(a, mids)  # a tie lands on the lower value...
    tie_up = torch.tensor([False, True, False, True, False, True, False], device=t.device)  # ...0.75, 1.75, 3.5 go up
    at_mid = (a.unsqueeze(-1) == mids) & tie_up
    idx = idx + at_mid.any(-1).to(idx.dtype)
    return mags[idx].copysign(t)


def deepgemm_style(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    """DeepGEMM's casts: amax clamped at 1e-4, ``sf = amax / 448`` (ue8m0: ``2^ceil(log2 sf)``
    through float log2), elements ``x * (1 / sf)`` clamped and cast by torch."""
    from numcheck.precision.quant_scheme import expand_to_elements

    sf = _blocks_of(x, scheme).clamp(min=1e-4) / 448.0
    if scheme.scale == "ue8m0":
        sf = torch.pow(2.0, torch.ceil(torch.log2(sf)))
    full = expand_to_elements(sf, (x.shape[0], x.shape[1]), scheme.granularity)
    fp8 = (x * (1.0 / full)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return as_quantized(fp8, sf, scheme)


def torchao_style(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    """torchao's blockwise casts: ``s = amax / 448`` with a tiny floor, ``x / s`` cast."""
    from numcheck.precision.quant_scheme import expand_to_elements

    s = _blocks_of(x, scheme).clamp(min=1e-12) / 448.0
    full = expand_to_elements(s, (x.shape[0], x.shape[1]), scheme.granularity)
    return as_quantized((x / full).clamp(-448, 448).to(torch.float8_e4m3fn), s, scheme)


def mx_style(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    """An MXFP4 cast by the OCP rule through float log2 (log2 0 = -inf: a block of zeros
    takes E8M0's smallest exponent, -127), e2m1 by bucketing."""
    from numcheck.precision.quant_scheme import expand_to_elements

    amax = _blocks_of(x, scheme)
    s = torch.pow(2.0, (torch.floor(torch.log2(amax)) - 2).clamp(min=-127))
    full = expand_to_elements(s, (x.shape[0], x.shape[1]), scheme.granularity)
    return as_quantized(_e2m1_nearest(x / full), s, scheme)


def nvfp4_style(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    """The NVFP4 recipe as NVIDIA Transformer Engine's reference quantizer computes it
    (``NVFP4QuantizerRef``, transformer_engine/pytorch/custom_recipes/
    quantization_ref_nvfp4.py; TE needs CUDA to install, so its steps are written here
    anew): encode scale ``2688 / amax`` (at most float32's largest, 1 where it is 0), its
    reciprocal the decode global scale; block scale ``e4m3(amax_b / 6 * s_enc)`` by torch's
    cast; elements ``x * (1 / (d_b * g))`` (at most float32's largest) clamped to 6 and
    rounded to nearest even. Where numcheck computes ``x * (s_enc / d_b)`` the two may
    round an element near a tie apart (tests/test_xcheck.py counts them)."""
    from numcheck.precision.quant_scheme import expand_to_elements

    x = x.float()  # TE's amax and scales are float32 whatever the tensor's dtype
    big = torch.tensor(torch.finfo(torch.float32).max)
    s_enc = torch.minimum(448.0 * 6.0 / x.abs().max(), big)
    s_enc = torch.where(s_enc == 0, torch.ones_like(s_enc), s_enc)
    g = 1.0 / s_enc
    d = (_blocks_of(x, scheme) / 6.0 * s_enc).clamp(max=448).to(torch.float8_e4m3fn).float()
    full = expand_to_elements(d, (x.shape[0], x.shape[1]), scheme.granularity)
    enc = torch.minimum(1.0 / (full * g), big)
    return as_quantized(_e2m1_nearest((x.float() * enc).clamp(-6, 6)), d, scheme, g)


#: Honest quantizers of other projects, and the scale formats each one implements.
HONEST_QUANTIZERS: dict[str, tuple[Quantizer, tuple[str, ...]]] = {
    "numcheck": (lambda x, scheme, old: quantize(x, scheme), ("fp32", "ue8m0", "mx", "nvfp4")),
    "deepgemm": (deepgemm_style, ("fp32", "ue8m0")),
    "torchao": (torchao_style, ("fp32",)),
    "mx": (mx_style, ("mx",)),
    "nvfp4_te": (nvfp4_style, ("nvfp4",)),
}


# -- quantizers with a planted bug -------------------------------------------------------------


def _per_tensor_in_blocks(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor
                          ) -> Quantized:
    """One scale, by the declared rule from the whole tensor's amax, stored in every block."""
    q = quantize(x, scheme)
    whole = quantize(x, replace(scheme, granularity=PER_TENSOR))
    return replace(q, values=whole.values, scales=whole.scales.expand_as(q.scales).contiguous())


def _requantize_with(q: Quantized, x: torch.Tensor, scales: torch.Tensor,
                     saturate: bool = True) -> Quantized:
    from numcheck.precision.quant_scheme import expand_to_elements

    full = expand_to_elements(scales, q.shape, q.scheme.granularity)
    vals = round_to_element(x.float() / full, q.scheme.format, saturate=saturate)
    return replace(q, values=vals, scales=scales.contiguous())


def _transposed(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    q = quantize(x, scheme)
    return replace(q, scales=q.scales.T.contiguous())  # written transposed: same grid shape


def _shifted(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    q = quantize(x, scheme)
    s = q.scales
    return _requantize_with(q, x, torch.cat([s[:, 1:], s[:, -1:]], 1))


def _ue8m0_down(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    """Each block's power of two rounded down from amax / fmax, elements saturating."""
    q = quantize(x, scheme)
    amax = block_amax(x, scheme.granularity).clamp(min=scheme.floor)
    return _requantize_with(q, x, _pow2_down(amax / scheme.format.max_value))


def _no_clamp(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    """Scales a step too small (amax / 480 for fp32 scales; a power of two rounded down) and
    a cast without clamping: the largest elements overflow to NaN."""
    q = quantize(x, scheme)
    small = q.scales / 2 if scheme.scale in ("ue8m0", "mx") else q.scales * (448 / 480)
    return _requantize_with(q, x, small, saturate=False)


def _e5m2(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    q = quantize(x, replace(scheme, element="e5m2"))
    return replace(q, scheme=scheme)


def _stale(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    """Elements of the new tensor, scales of the old one."""
    q = quantize(x, scheme)
    return _requantize_with(q, x, quantize(old, scheme).scales)


def _stale_whole(x: torch.Tensor, scheme: OperandScheme, old: torch.Tensor) -> Quantized:
    """The old tensor's quantization kept whole after the tensor changed."""
    return quantize(old, scheme)


#: Quantizers with a planted bug: ``(x, scheme, x_before_the_change) -> Quantized``.
QUANTIZER_BUGS: dict[str, Quantizer] = {
    "per_tensor_scale": _per_tensor_in_blocks,
    "transposed_scales": _transposed,
    "shifted_scales": _shifted,
    "ue8m0_rounded_down": _ue8m0_down,
    "no_clamp_overflow": _no_clamp,
    "e5m2_for_e4m3": _e5m2,
    "stale_scale": _stale,
    "stale_quantization": _stale_whole,
}
#: The element formats a quantizer bug exists for (the others: every format).
QUANTIZER_BUG_ELEMENTS: dict[str, tuple[str, ...]] = {
    "no_clamp_overflow": ("e4m3fn",),  # e2m1 cannot hold an overflow; e5m2 overflows to inf
    "e5m2_for_e4m3": ("e4m3fn",),
}
