"""A declared FP8 or FP4 GEMM run where it runs: real kernels on CUDA, numcheck's emulation.

A low-precision variant quantizes its operands, multiplies them and records what it
multiplied (numcheck.precision.quant_record). :func:`quant_gemm` does the three for one
2-D product ``y = a @ b^T`` of :class:`~numcheck.precision.quantize.Quantized` operands, by one
of :data:`BACKENDS`:

- ``emulated``: numcheck's bit-exact model of the declared accumulation
  (numcheck.precision.quant_accumulate), on any device: what the shipped variants compute on
  a CPU;
- ``scaled_mm``: ``torch._scaled_mm`` (cuBLAS's FP8 GEMM, CUDA): one float32 scale per tensor
  or per row, ``use_fast_accum`` on for an accumulation that is never promoted, off for one
  promoted every 128;
- ``triton_block``: DeepSeek V3's block-scaled FP8 GEMM (1x128 activation groups, 128x128
  weight blocks) as a Triton kernel (numcheck.ops.triton_gemm.triton_block_fp8);
- ``triton``: Triton's ``tl.dot`` on e4m3 operands with the library's defaults (never
  promoted), scales applied after;
- ``dequantized``: the operands dequantized to float32 and multiplied by a float32 GEMM:
  FP4 on Hopper, which has no FP4 tensor cores (emulated, and labelled so).

:func:`torchao_block` runs torchao's block-scaled FP8 GEMM
(``torchao.kernel.blockwise_quantization``, DeepSeek V3's inference kernel, from PyPI:
``pip install 'numcheck[fp8]'``) with torchao's own quantizers, whose output numcheck then
checks. Only the emulation runs without CUDA.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from numcheck.ops.spec import optional_library
from numcheck.precision import matmul_precision
from numcheck.precision.quant_accumulate import emulated_gemm
from numcheck.precision.quant_declare import GemmQuant
from numcheck.precision.quant_record import record_gemm
from numcheck.precision.quant_scheme import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    PER_ROW,
    PER_TENSOR,
    OperandScheme,
)
from numcheck.precision.quantize import Quantized, dequantize

__all__ = ["BACKENDS", "FP8_DTYPES", "TORCHAO_HINT", "fp8_values", "quant_gemm",
           "quant_matmul", "quantize_fp8", "torchao_block", "torchao_placement"]

#: The torch dtype of each FP8 element format.
FP8_DTYPES = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
#: How to get torchao (the optional extra).
TORCHAO_HINT = "pip install 'numcheck[fp8]' (torchao >= 0.18)"


def quantize_fp8(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """``x`` (2-D ``[rows, K]``) quantized to an FP8 scheme (``fp32`` or ``ue8m0`` scales,
    any granularity) as a serving kernel does it, in a few torch ops and no host sync, so a
    variant that quantizes on every call can be captured in a CUDA graph: each block's amax
    (floored at the scheme's floor), its scale (``amax / fmax``; UE8M0: the smallest
    power of two above that, from the float's exponent), the elements ``x / scale`` clamped
    to the format's largest and cast by torch (round to nearest even). The same values as
    numcheck.precision.quantize.quantize, whose exactness checks sync with the host; the
    elements come in their float8 dtype."""
    import torch.nn.functional as F

    fmt = scheme.format
    if fmt.name not in FP8_DTYPES or scheme.scale not in ("fp32", "ue8m0"):
        raise ValueError(f"quantize_fp8: FP8 elements with fp32 or ue8m0 scales, not "
                         f"{scheme.label}")
    rows, k = x.shape
    br, bk = scheme.granularity.block_shape((rows, k))
    gr, gk = scheme.granularity.grid((rows, k))
    x32 = x.to(torch.float32)
    padded = F.pad(x32, (0, gk * bk - k, 0, gr * br - rows)) if (gk * bk, gr * br) != (
        k, rows) else x32
    amax = padded.abs().view(gr, br, gk, bk).amax(dim=(1, 3)).clamp(min=scheme.floor)
    scales = amax / fmt.max_value
    if scheme.scale == "ue8m0":
        mant, e = torch.frexp(scales)
        scales = torch.ldexp(torch.ones_like(scales), torch.where(mant == 0.5, e - 1, e))
    full = scales.repeat_interleave(br, 0)[:rows].repeat_interleave(bk, 1)[:, :k]
    values = (x32 / full).clamp(-fmt.max_value, fmt.max_value).to(FP8_DTYPES[fmt.name])
    return Quantized(values, scales, scheme)


def fp8_values(q: Quantized) -> torch.Tensor:
    """The elements of an FP8 operand in their torch float8 dtype (exact: they are values of
    the format)."""
    return q.values.to(FP8_DTYPES[q.scheme.element])


def _scale_of(q: Quantized, side: str) -> torch.Tensor:
    """``torch._scaled_mm``'s scale of an operand: 0-d per tensor, ``[M, 1]`` (``a``) or
    ``[1, N]`` (``b``) per row."""
    g = q.scheme.granularity
    if g == PER_TENSOR:
        return q.scales.reshape(()).to(torch.float32)
    if g == PER_ROW:
        s = q.scales.to(torch.float32)
        return s.reshape(-1, 1) if side == "a" else s.reshape(1, -1)
    raise ValueError(f"torch._scaled_mm takes one scale per tensor or per row, not "
                     f"{g.name} blocks ({q.scheme.label})")


def _scaled_mm(qa: Quantized, qb: Quantized, out: torch.dtype, fast: bool) -> torch.Tensor:
    n, k = qb.shape
    if k % 16:
        raise ValueError(f"torch._scaled_mm needs K divisible by 16, got {k}")
    b8 = fp8_values(qb)
    sb = _scale_of(qb, "b")
    pad = -n % 16  # cuBLAS's FP8 GEMM wants N divisible by 16: zero rows, sliced off after
    if pad:
        b8 = torch.cat([b8, b8.new_zeros(pad, k)])
        if sb.dim() == 2:
            sb = torch.cat([sb, sb.new_ones(1, pad)], dim=1)
    a8, sa = fp8_values(qa), _scale_of(qa, "a")
    m = a8.shape[0]
    pad_m = -m % 16  # and M, as cuBLASLt's FP8 kernels tile it: zero rows, dropped after
    if pad_m:
        a8 = torch.cat([a8, a8.new_zeros(pad_m, k)])
        if sa.dim() == 2:
            sa = torch.cat([sa, sa.new_ones(pad_m, 1)])
    y = torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=out,
                         use_fast_accum=fast)
    return y[:m, :n] if pad or pad_m else y


def _triton_block(qa: Quantized, qb: Quantized, out: torch.dtype) -> torch.Tensor:
    from numcheck.ops.triton_gemm import triton_block_fp8

    if (qa.scheme.granularity, qb.scheme.granularity) != (
            DEEPSEEK_ACT.granularity, DEEPSEEK_WEIGHT.granularity):
        raise ValueError(f"the Triton block-scaled kernel takes 1x128 and 128x128 scales, not "
                         f"{qa.scheme.label} x {qb.scheme.label}")
    return triton_block_fp8(fp8_values(qa), qa.scales, fp8_values(qb), qb.scales, out)


def _triton_dot(qa: Quantized, qb: Quantized, out: torch.dtype) -> torch.Tensor:
    from numcheck.ops.triton_gemm import triton_matmul

    # tl.dot on the e4m3 elements, its fp32 result scaled after (scales constant along K).
    y = triton_matmul(fp8_values(qa), fp8_values(qb).t(), "e4m3")
    return (y * (_scale_of(qa, "a") * _scale_of(qb, "b"))).to(out)


def _dequantized(qa: Quantized, qb: Quantized, out: torch.dtype) -> torch.Tensor:
    with matmul_precision(tf32=False):
        y = dequantize(qa, torch.float32) @ dequantize(qb, torch.float32).T
    return y.to(out)


#: The ways :func:`quant_gemm` computes (module docstring), each ``(qa, qb, quant) -> y``.
BACKENDS: dict[str, Callable[[Quantized, Quantized, GemmQuant], torch.Tensor]] = {
    "emulated": lambda qa, qb, q: emulated_gemm(qa, qb, q.accumulation, q.out).to(q.out),
    "scaled_mm": lambda qa, qb, q: _scaled_mm(qa, qb, q.out, q.accumulation.kind == "none"),
    "triton_block": lambda qa, qb, q: _triton_block(qa, qb, q.out),
    "triton": lambda qa, qb, q: _triton_dot(qa, qb, q.out),
    "dequantized": lambda qa, qb, q: _dequantized(qa, qb, q.out),
}


def quant_gemm(qa: Quantized, qb: Quantized, quant: GemmQuant, backend: str = "emulated",
               *, record: bool = True) -> torch.Tensor:
    """``y = a @ b^T`` of quantized operands by ``backend``, in ``quant.out_dtype``
    (``[M, N]``); recorded for numcheck's second reference unless ``record`` is False (a
    caller that records a whole batch itself)."""
    if backend not in BACKENDS:
        raise ValueError(f"quant_gemm: backend must be one of {', '.join(BACKENDS)}, got "
                         f"{backend!r}")
    y = BACKENDS[backend](qa, qb, quant)
    if record:
        record_gemm(qa, qb, y)
    return y


def quant_matmul(a: torch.Tensor, b: torch.Tensor, quant: GemmQuant,
                 backend: str = "emulated") -> torch.Tensor:
    """``a @ b`` (``[..., M, K]`` by ``[..., K, N]``, equal leading dimensions) with each
    matrix's operands quantized by numcheck's quantizer as ``quant`` declares (``b`` as
    ``b^T``), multiplied by ``backend`` and recorded as one GEMM: the result in
    ``quant.out_dtype``, ``[..., M, N]``."""
    if a.dim() < 2 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"quant_matmul: operands {list(a.shape)} and {list(b.shape)}: need "
                         "[..., M, K] and [..., K, N] with equal leading dimensions")
    lead = a.shape[:-2]
    qas, qbs, ys = [], [], []
    for x, w in zip(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]), strict=True):
        qa, qb = quant.operands(x, w.transpose(-1, -2))
        qas.append(qa)
        qbs.append(qb)
        ys.append(quant_gemm(qa, qb, quant, backend, record=False))
    y = torch.stack(ys).reshape(*lead, *ys[0].shape)
    record_gemm(qas, qbs, y)
    return y


def torchao_placement() -> tuple[tuple[str, ...], str]:
    """``(devices, unavailable)`` of torchao's block-scaled FP8 GEMM in this install: CUDA
    where torchao is installed; no device, with the install command, where it is not
    (:func:`numcheck.ops.spec.optional_library`)."""
    return optional_library("torchao", ("cuda",), TORCHAO_HINT)


#: The one config of torchao's block-scaled GEMM numcheck runs it with (one of its own 48).
TORCHAO_CONFIG = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "num_stages": 4, "num_warps": 8}


def _pin_torchao_configs() -> None:
    """Keep torchao's GEMM to one of its own autotuning configs (:data:`TORCHAO_CONFIG`).

    torchao 0.18 autotunes ``blockwise_fp8_gemm`` over 48 configs with N and K compile-time
    constants: every new shape compiles all 48 (docs/fp8.md), in every run. A
    tile's shape changes no sum (each 128-wide block of K is one ``tl.dot`` whatever the
    tile), so one config computes what any computes. Reached through the closure of torchao's
    op; where torchao is laid out otherwise, it autotunes as shipped."""
    try:
        import triton
        from torchao.kernel import blockwise_quantization as bq

        impls = bq._get_triton_impls()
        fn = getattr(impls.gemm, "_init_fn", None)
        for cell in getattr(fn, "__closure__", None) or ():
            tuner = cell.cell_contents
            if isinstance(tuner, triton.runtime.autotuner.Autotuner) and len(tuner.configs) > 1:
                kw = {k: v for k, v in TORCHAO_CONFIG.items() if k.startswith("BLOCK")}
                tuner.configs = [triton.Config(kw, num_stages=TORCHAO_CONFIG["num_stages"],
                                               num_warps=TORCHAO_CONFIG["num_warps"])]
    except Exception:  # noqa: BLE001 - an unknown layout autotunes as shipped
        return


def torchao_block(x: torch.Tensor, w: torch.Tensor, *, record: bool = True
                  ) -> tuple[torch.Tensor, Quantized, Quantized]:
    """``x @ w^T`` by torchao's block-scaled FP8 GEMM with torchao's own quantizers: ``x``
    ``[M, K]`` in 1x128 groups, ``w`` ``[N, K]`` in 128x128 blocks, each in its own dtype,
    float32 scales ``amax / 448``, bf16 result (CUDA; K and N padded with zeros to multiples
    of 128). Returns the
    result and the operands as torchao quantized them, which are recorded: numcheck checks
    them against DeepSeek's scheme like any variant's."""
    from torchao.kernel.blockwise_quantization import (
        blockwise_fp8_gemm,
        fp8_blockwise_act_quant,
        fp8_blockwise_weight_quant,
    )

    import torch.nn.functional as F

    _pin_torchao_configs()
    (m, k), n = x.shape, w.shape[0]
    # torchao's quantizers take K and N in whole blocks of 128 (an assertion otherwise, as
    # for mHC's 24-row projection): zeros fill the last blocks, which changes no block's
    # largest magnitude, so no scale, and adds nothing to any product; sliced off after.
    pk, pn = -k % 128, -n % 128
    # Padded only where a dimension needs it: a pad of nothing is still a copy of W. Quantized
    # as given: torchao's quantizers read any float dtype as float32, and a bf16 copy of an
    # fp32 operand (mHC's hc_fn) would move its scales off its own blocks' largest magnitude.
    xb = (F.pad(x, (0, pk)) if pk else x).contiguous()
    wb = (F.pad(w, (0, pk, 0, pn)) if pk or pn else w).contiguous()
    xq, xs = fp8_blockwise_act_quant(xb, 128)
    wq, ws = fp8_blockwise_weight_quant(wb, 128)
    y = blockwise_fp8_gemm(xq, xs, wq, ws, 128)
    if pk or pn:
        y, xq, wq = y[:, :n], xq[:, :k], wq[:n, :k]
    # Wrapped as they are (no float32 copy): their grids are DeepSeek's scheme's.
    qa = Quantized(xq, xs, DEEPSEEK_ACT)
    qb = Quantized(wq, ws, DEEPSEEK_WEIGHT)
    if record:
        record_gemm(qa, qb, y)
    return y, qa, qb
