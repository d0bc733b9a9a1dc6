"""The quantizers users really run, through their libraries' own code on the CPU, wrapped as
numcheck operands: torchao's (``Float8Tensor``, MX formats, ``NVFP4Tensor``) and
compressed-tensors' (NVFP4, FP8 per channel), and Transformer Engine's NVFP4 reference recipe
(TE needs CUDA to install: its steps are written anew in tests/quant_kernels.py,
``nvfp4_style``).

Each wrapper is ``(x, scheme) -> Quantized``: the library quantizes ``x`` (2-D ``[rows, K]``,
K a whole number of blocks) its own way, and the wrapper hands numcheck what it produced as a
user's variant would (``numcheck.fp8.as_quantized``), under the scheme the caller declares: the
library's preset (numcheck.precision.quant_scheme.QUANT_PRESETS) to pass, another to show
what an undeclared convention looks like. :data:`LIBRARIES` says which preset each one
follows; :func:`missing` why a library cannot run here (the ``numcheck[xcheck]`` extra
installs them). Imported by tests only; nothing here downloads anything.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch

from numcheck.fp8 import Quantized, as_quantized
from numcheck.precision.quant_formats import unpack_fp4x2
from numcheck.precision.quant_scheme import QUANT_PRESETS, OperandScheme
from tests import quant_kernels

Quantizer = Callable[[torch.Tensor, OperandScheme], Quantized]
#: How to get the libraries.
HINT = "pip install 'numcheck[xcheck]'"


def missing(package: str) -> str:
    """Why ``package`` cannot be imported here ("" when it can), without importing it."""
    try:
        found = importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        found = False
    return "" if found else f"{package} is not installed; fix: {HINT}"


def torchao_float8_row(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """torchao's ``Float8Tensor.from_hp`` per row (its torch path, the one a CPU or a GPU
    without its fused kernels takes): the scale ``amax / 448`` computed in ``x``'s dtype."""
    from torchao.quantization.granularity import PerRow
    from torchao.quantization.quantize_.workflows.float8.float8_tensor import Float8Tensor

    t = Float8Tensor.from_hp(x, granularity=PerRow())
    return as_quantized(t.qdata, t.scale, scheme)


def torchao_mx(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """torchao's ``to_mx`` (ScaleCalculationMode.FLOOR, the OCP rule) to MXFP4 or MXFP8."""
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    elem = torch.float4_e2m1fn_x2 if scheme.element == "e2m1" else torch.float8_e4m3fn
    scale, data = to_mx(x.contiguous(), elem, scheme.granularity.cols)
    values = unpack_fp4x2(data) if scheme.element == "e2m1" else data
    exponents = scale.view(torch.uint8).to(torch.int64) - 127
    return as_quantized(values, torch.ldexp(torch.ones(exponents.shape), exponents), scheme)


def torchao_nvfp4(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """torchao's ``NVFP4Tensor.to_nvfp4`` with the per-tensor scale its docs pair with it
    (``per_tensor_amax_to_scale``: amax / (448 * 6)), unswizzled scales."""
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor, per_tensor_amax_to_scale

    g = per_tensor_amax_to_scale(x.abs().amax())
    t = NVFP4Tensor.to_nvfp4(x.contiguous(), 16, per_tensor_scale=g)
    return as_quantized(unpack_fp4x2(t.qdata), t.scale.float(), scheme, g)


def compressed_tensors_nvfp4(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """compressed-tensors' NVFP4 preset (tensor_group, e4m3 scales per 16): its global scale
    (an encode scale, ``2688 / amax``: numcheck's decode scale is its reciprocal), its
    ``calculate_qparams`` and ``quantize``."""
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    args = preset_name_to_scheme("NVFP4", ["Linear"]).weights
    amax = x.abs().amax().reshape(1)
    gs = generate_gparam(-amax, amax)
    blocks = x.reshape(x.shape[0], -1, 16)
    scale, zp = calculate_qparams(blocks.amin(-1), blocks.amax(-1), args, global_scale=gs)
    q = quantize(x, scale, zp, args, global_scale=gs, dtype=torch.float32)
    return as_quantized(q, scale, scheme, 1.0 / gs)


def compressed_tensors_fp8_channel(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """compressed-tensors' FP8 weights per output channel (the FP8_DYNAMIC preset's)."""
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme
    from compressed_tensors.quantization.utils import calculate_qparams

    args = preset_name_to_scheme("FP8_DYNAMIC", ["Linear"]).weights
    scale, zp = calculate_qparams(x.amin(1, keepdim=True), x.amax(1, keepdim=True), args)
    q = quantize(x, scale, zp, args, dtype=torch.float32)
    return as_quantized(q, scale, scheme)


def te_nvfp4(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """Transformer Engine's NVFP4 reference recipe (tests/quant_kernels.py)."""
    return quant_kernels.nvfp4_style(x, scheme, x)


#: Each library quantizer: the package it needs ("" for the transcription), and the preset
#: of numcheck.precision.quant_scheme.QUANT_PRESETS it follows.
LIBRARIES: dict[str, tuple[Quantizer, str, str]] = {
    "torchao_float8_row": (torchao_float8_row, "torchao", "torchao.float8_row_bf16"),
    "torchao_mxfp4": (torchao_mx, "torchao", "torchao.mxfp4"),
    "torchao_mxfp8": (torchao_mx, "torchao", "torchao.mxfp8"),
    "torchao_nvfp4": (torchao_nvfp4, "torchao", "torchao.nvfp4"),
    "compressed_tensors_nvfp4": (compressed_tensors_nvfp4, "compressed_tensors",
                                 "compressed_tensors.nvfp4"),
    "compressed_tensors_fp8_channel": (compressed_tensors_fp8_channel, "compressed_tensors",
                                       "compressed_tensors.fp8_channel"),
    "te_nvfp4": (te_nvfp4, "", "nvidia.nvfp4"),
}


def preset(name: str) -> OperandScheme:
    """The preset library quantizer ``name`` follows."""
    return QUANT_PRESETS[LIBRARIES[name][2]]
