"""Quantizing a GEMM operand by its declared scheme, bit for bit, and reading it back.

:func:`quantize` turns a 2-D tensor ``[rows, K]`` into a :class:`Quantized`: its elements as
float32 values the element format holds exactly, and its scales in the scheme's grid
(numcheck.precision.quant_scheme). Every step is exact or one IEEE float32 operation, in an
order fixed here, so the result is the same on any CPU and GPU:

1. ``amax`` of each scale block (a maximum: exact), floored at the scheme's floor (its rule's
   own unless declared: DeepGEMM's 1e-4 for ``fp32`` and ``ue8m0``, none for ``mx`` and
   ``nvfp4``, numcheck.precision.quant_scheme.RULE_FLOORS);
2. the block's scale, by the scheme's rule:

   - ``fp32``: ``amax / fmax`` (one float32 division; DeepSeek-V3's fine-grained
     quantization, DeepGEMM's casts), rounded to the declared ``scale_dtype`` when it is not
     float32 (torchao divides a bf16 tensor's amax in bf16);
   - ``ue8m0``: the smallest power of two ``>= amax / fmax`` (DeepSeek V3.1/V4: rounded up,
     so ``|x| / scale <= fmax`` and nothing saturates);
   - ``mx``: ``2^(floor(log2 amax) - emax_elem)``, the rule of the OCP Microscaling Formats
     (MX) specification v1.0, section 6.3 (``emax_elem``: 2 for e2m1, 8 for e4m3fn). It is
     rounded DOWN from amax's own exponent, so ``amax / scale`` lies in ``[2^emax_elem,
     2^(emax_elem + 1))`` and may pass ``fmax`` (up to 8 against e2m1's 6): those elements
     saturate. The ``ue8m0`` rule rounds ``amax / fmax`` UP instead and never saturates.
     The exponent is clamped to E8M0's range, so a block of zeros (and any block under
     2^-125) takes the smallest E8M0 scale, 2^-127;
   - ``nvfp4``: NVIDIA's two-level NVFP4 recipe ("Pretraining Large Language Models with
     NVFP4", NVIDIA 2025, arXiv:2509.25149, the quantization appendix; Transformer Engine's
     reference quantizer): a float32 per-tensor encode scale
     ``s_enc = 448 * fmax / amax_tensor`` (at most float32's largest; 1 for a tensor of
     zeros) and decode scale ``g = amax_tensor / (448 * fmax)`` (1 for zeros); per block,
     the e4m3 decode scale ``d_b = e4m3(amax_b / fmax * s_enc)`` (to nearest, saturating at
     448; clamped from below at a declared ``block_scale_min`` first);

   a declared ``zero_scale`` replaces a scale the rule made 0;
3. each element ``x / scale`` (``nvfp4``: ``x * (s_enc / d_b)``, zero where ``d_b`` is 0;
   ``x * (s_enc / z)`` where the declared zero scale ``z`` stands in) in float32, rounded
   to the element format to nearest even, saturating if the scheme says so
   (numcheck.precision.quant_formats.round_to_element).

:func:`dequantize` gives ``element * scale`` (``* g`` for nvfp4) in float64, where every such
product is exact (at most 4 significant bits times a float32 or two). Pure torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from numcheck.precision import one_thread
from numcheck.precision.quant_formats import element_format, pow2, round_to_element
from numcheck.precision.quant_scheme import (
    PER_ROW,
    PER_TENSOR,
    SCALE_DTYPES,
    OperandScheme,
    _check_2d,
    block_amax,
    expand_to_elements,
)

if TYPE_CHECKING:
    import torch

__all__ = ["E4M3_MAX", "E8M0_EXPONENTS", "Quantized", "as_quantized", "dequantize",
           "quantize", "scales_for"]

#: The largest e4m3fn value: NVFP4's block scales are e4m3.
E4M3_MAX = 448.0
#: The exponents an unsigned E8M0 scale can hold (2^-127 .. 2^127; the 255 pattern is NaN).
E8M0_EXPONENTS = (-127, 127)


@dataclass(frozen=True)
class Quantized:
    """A quantized 2-D operand ``[rows, K]``.

    ``values``: each a value of the scheme's element format (the codes as numbers): float32
    from numcheck's quantizer, or any float dtype that holds them (a variant's float8 tensor,
    kept as it is by :func:`as_quantized`); ``scales``: in the scheme's grid
    (numcheck.precision.quant_scheme), the factor that dequantizes each block, float32 or any
    float dtype; ``global_scale``: NVFP4's per-tensor decode scale (a 0-d tensor), None for
    every other scale format. numcheck reads all three in float32 or float64 where it uses
    them. ``scheme`` is what it claims to follow: a
    value made by someone else's quantizer is wrapped with :func:`as_quantized` and checked
    with numcheck.precision.quant_validate.
    """

    values: torch.Tensor
    scales: torch.Tensor
    scheme: OperandScheme
    global_scale: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, K)``."""
        return (int(self.values.shape[0]), int(self.values.shape[1]))

    def element_scales(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The factor each element is multiplied by to dequantize it, ``[rows, K]`` (float64
        by default: scale times global scale, exact)."""
        import torch

        dt = dtype or torch.float64
        full = expand_to_elements(self.scales.to(torch.float64), self.shape,
                                  self.scheme.granularity)
        if self.global_scale is not None:
            full = full * self.global_scale.to(torch.float64)
        return full.to(dt)


def _floored_amax(x: torch.Tensor, scheme: OperandScheme) -> torch.Tensor:
    import torch

    return torch.clamp(block_amax(x, scheme.granularity), min=scheme.floor)


def _pow2_up(r: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= each positive float32 ``r`` (exact), within E8M0."""
    import torch

    mant, e = torch.frexp(r)  # r = mant * 2^e, 0.5 <= mant < 1
    exp = torch.where(mant == 0.5, e - 1, e).to(torch.int64)
    exp = torch.where(r > 0, exp, torch.full_like(exp, E8M0_EXPONENTS[0]))  # 0: the smallest
    return pow2(exp.clamp(*E8M0_EXPONENTS))


def _pow2_mx(amax: torch.Tensor, emax_elem: int) -> torch.Tensor:
    """``2^(floor(log2 amax) - emax_elem)`` (OCP MX v1.0, 6.3), within E8M0: a block of zeros
    (log2 0 = -inf) takes the smallest, 2^-127."""
    import torch

    _, e = torch.frexp(amax)
    exp = (e.to(torch.int64) - 1) - emax_elem
    exp = torch.where(amax > 0, exp, torch.full_like(exp, E8M0_EXPONENTS[0]))
    return pow2(exp.clamp(*E8M0_EXPONENTS))


def _in_scale_dtype(s: torch.Tensor, scheme: OperandScheme) -> torch.Tensor:
    """float32 scales rounded to the declared ``scale_dtype`` (to nearest even), as float32."""
    import torch

    if scheme.scale_dtype == "fp32":
        return s
    return s.to(getattr(torch, SCALE_DTYPES[scheme.scale_dtype])).to(torch.float32)


def _zero_scale(s: torch.Tensor, scheme: OperandScheme) -> torch.Tensor:
    """The declared ``zero_scale`` where the rule gave 0."""
    import torch

    if scheme.zero_scale is None:
        return s
    return torch.where(s == 0, torch.full_like(s, scheme.zero_scale), s)


def scales_for(x: torch.Tensor, scheme: OperandScheme
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The scales (grid, float32) and the global scale (0-d float32, nvfp4 only) that
    :func:`quantize` gives the 2-D ``x`` under ``scheme``."""
    import torch

    fmt = scheme.format
    x32 = x.to(torch.float32)
    amax = _floored_amax(x32, scheme)
    fmax = torch.tensor(fmt.max_value, dtype=torch.float32, device=x.device)
    if scheme.scale == "fp32":
        return _zero_scale(_in_scale_dtype(amax / fmax, scheme), scheme), None
    if scheme.scale == "ue8m0":
        return _pow2_up(amax / fmax), None
    if scheme.scale == "mx":
        return _pow2_mx(amax, fmt.max_exponent), None
    d, g, _ = _nvfp4_scales(x32, amax, scheme)
    return d, g


def _nvfp4_scales(x32: torch.Tensor, amax: torch.Tensor, scheme: OperandScheme
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """NVFP4's block decode scales ``d_b``, global decode scale ``g`` and global encode scale
    ``s_enc`` (module docstring), from the tensor and its floored block amax."""
    import torch

    fmax = scheme.format.max_value
    amax_t = torch.clamp(x32.abs().amax(), min=scheme.floor)
    top = torch.tensor(E4M3_MAX * fmax, dtype=torch.float32, device=x32.device)
    one = torch.ones((), dtype=torch.float32, device=x32.device)
    # A tensor of zeros: encode scale 1 (Transformer Engine's kernels); otherwise at most
    # float32's largest (its reference clamps there for an amax near float32's smallest).
    s_enc = torch.where(amax_t > 0, (top / amax_t).clamp(max=torch.finfo(torch.float32).max),
                        one)
    g = torch.where(amax_t > 0, amax_t / top, one)
    per_block = amax / torch.tensor(fmax, dtype=torch.float32, device=x32.device)
    v = per_block * s_enc
    if scheme.block_scale_min is not None:
        v = v.clamp(min=scheme.block_scale_min)
    d = _zero_scale(round_to_element(v, "e4m3fn", saturate=True), scheme)
    return d, g, s_enc


@one_thread()
def quantize(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """``x`` (2-D ``[rows, K]``, any float dtype, read as float32) quantized by ``scheme``
    (module docstring: the exact steps). ValueError for a tensor that is not 2-D or holds a
    NaN or an infinity (no scale can be made from it)."""
    import torch

    shape = _check_2d(x, "quantize")
    if not x.dtype.is_floating_point:
        raise ValueError(f"quantize: needs a floating-point tensor, got {x.dtype}")
    x32 = x.to(torch.float32)
    bad = int((~torch.isfinite(x32)).sum())
    if bad:
        raise ValueError(f"quantize: the operand has {bad} NaN or infinite value(s) of "
                         f"{x32.numel()}; a scale cannot be made from them")
    if scheme.scale == "nvfp4":
        scales, g_nv, s_enc = _nvfp4_scales(x32, _floored_amax(x32, scheme), scheme)
        g: torch.Tensor | None = g_nv
        full = expand_to_elements(scales, shape, scheme.granularity)
        # The recipe's per-block encode scale s_enc / d_b; a block whose d_b rounded to 0
        # (its amax under 2^-9 of the tensor's / 448) holds zeros.
        nonzero = full > 0
        enc = s_enc / torch.where(nonzero, full, torch.ones_like(full))
        t = torch.where(nonzero, x32 * enc, torch.zeros_like(x32))
    else:
        scales, g = scales_for(x32, scheme)
        t = x32 / expand_to_elements(scales, shape, scheme.granularity)
    values = round_to_element(t, scheme.format, saturate=scheme.saturate)
    return Quantized(values, scales, scheme, g)


@one_thread()
def dequantize(q: Quantized, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``element * scale`` (``* global scale`` for nvfp4) of every element, ``[rows, K]``:
    float64 by default, where it is exact; another dtype rounds the exact value once."""
    import torch

    if tuple(q.scales.shape) != q.scheme.scale_shape(q.shape):
        raise ValueError(f"dequantize: scales of shape {list(q.scales.shape)} for "
                         f"{q.scheme.label} on an operand {list(q.shape)}: expected "
                         f"{list(q.scheme.scale_shape(q.shape))}")
    exact = q.values.to(torch.float64) * q.element_scales(torch.float64)
    return exact if dtype in (None, torch.float64) else exact.to(dtype)


def as_quantized(values: torch.Tensor, scales: torch.Tensor, scheme: OperandScheme,
                 global_scale: torch.Tensor | float | None = None) -> Quantized:
    """Wrap another quantizer's output as a :class:`Quantized` to check or multiply.

    ``values``: the elements, ``[rows, K]``, in any dtype that holds them (float8, float32,
    bf16; FP4 packed two per byte goes through
    numcheck.precision.quant_formats.unpack_fp4x2 first). ``scales``: the dequantizing
    factors, in any float dtype (e4m3, e8m0, float32...): the scheme's grid, or, unambiguous
    only, a scalar for per-tensor scales and ``[rows]`` for per-row ones. Anything else is
    kept as given, for numcheck.precision.quant_validate to report. Scales stored as the
    reciprocal (quantizing multipliers) must be inverted by the caller: numcheck cannot tell
    them apart from small scales.

    Nothing is converted or copied: the tensors are kept as given (a float8 operand stays
    float8; a scalar or ``[rows]`` scale is only viewed in its grid's shape), and numcheck
    reads them in float32 or float64 where it uses them, after the variant's call. Wrapping
    an operand to record it (numcheck.fp8.record_gemm) therefore costs the variant nothing: no
    entry in its cast ledger (docs/extending.md, section 10).
    """
    import torch

    _check_2d(values, "as_quantized")
    element_format(scheme.element)  # a known format, or ValueError
    s = scales
    rows = int(values.shape[0])
    if scheme.granularity == PER_TENSOR and s.numel() == 1:
        s = s.reshape(1, 1)  # a view
    elif scheme.granularity == PER_ROW and s.dim() == 1 and s.numel() == rows:
        s = s.reshape(rows, 1)  # a view
    g = None
    if global_scale is not None:
        g = (global_scale.reshape(()) if isinstance(global_scale, torch.Tensor)
             else torch.tensor(float(global_scale), dtype=torch.float32, device=values.device))
    return Quantized(values, s, scheme, g)
