"""FP8 and FP4 (docs/fp8.md): ``from numcheck.fp8 import GemmQuant, DEEPSEEK_ACT, ...``.

- a variant's declared quantization, :class:`GemmQuant` of :class:`OperandScheme` (or
  :class:`AsStored`) operands and an :class:`Accumulation`; an operand's scale blocks
  (:class:`Granularity`, :func:`groups`, :func:`blocks`, :data:`PER_TENSOR`, :data:`PER_ROW`);
- the ready-made schemes and accumulation models, and the libraries' conventions as schemes
  (:data:`QUANT_PRESETS`);
- the operands a variant hands over, :func:`record_gemm` of :func:`as_quantized` ones
  (:class:`Quantized`); numcheck's bit-exact :func:`quantize`, :func:`dequantize` and
  :func:`emulated_gemm`; a quantizer checked by hand, :func:`validate`, a kernel,
  :func:`compare_to_simulated`.

numcheck's second facade, lazy like the first (``numcheck/__init__.py``, which still finds
these names as ``numcheck.<name>``): kept apart so that they do not crowd the top level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from numcheck._lazy import lazy_exports as _lazy_exports

#: Public name -> the module that defines it.
_EXPORTS = {
    "GemmQuant": "numcheck.precision.quant_declare",
    "AsStored": "numcheck.precision.quant_declare",
    "OperandScheme": "numcheck.precision.quant_scheme",
    "Granularity": "numcheck.precision.quant_scheme",
    "groups": "numcheck.precision.quant_scheme",
    "blocks": "numcheck.precision.quant_scheme",
    "PER_TENSOR": "numcheck.precision.quant_scheme",
    "PER_ROW": "numcheck.precision.quant_scheme",
    "DEEPSEEK_ACT": "numcheck.precision.quant_scheme",
    "DEEPSEEK_WEIGHT": "numcheck.precision.quant_scheme",
    "FP8_TENSOR": "numcheck.precision.quant_scheme",
    "FP8_ROW": "numcheck.precision.quant_scheme",
    "NVFP4": "numcheck.precision.quant_scheme",
    "MXFP4": "numcheck.precision.quant_scheme",
    "QUANT_PRESETS": "numcheck.precision.quant_scheme",
    "Accumulation": "numcheck.precision.quant_accumulate",
    "PROMOTED_128": "numcheck.precision.quant_accumulate",
    "FAST_ACCUMULATION": "numcheck.precision.quant_accumulate",
    "FP32_ACCUMULATION": "numcheck.precision.quant_accumulate",
    "emulated_gemm": "numcheck.precision.quant_accumulate",
    "Quantized": "numcheck.precision.quantize",
    "quantize": "numcheck.precision.quantize",
    "dequantize": "numcheck.precision.quantize",
    "as_quantized": "numcheck.precision.quantize",
    "validate": "numcheck.precision.quant_validate",
    "compare_to_simulated": "numcheck.precision.quant_bound",
    "record_gemm": "numcheck.precision.quant_record",
}

__all__ = [
    "DEEPSEEK_ACT", "DEEPSEEK_WEIGHT", "FAST_ACCUMULATION", "FP32_ACCUMULATION", "FP8_ROW",
    "FP8_TENSOR", "MXFP4", "NVFP4", "PER_ROW", "PER_TENSOR", "PROMOTED_128", "QUANT_PRESETS",
    "Accumulation", "AsStored", "GemmQuant", "Granularity", "OperandScheme", "Quantized",
    "as_quantized", "blocks", "compare_to_simulated", "dequantize", "emulated_gemm", "groups",
    "quantize", "record_gemm", "validate",
]  # the same names as _EXPORTS (a test keeps them in step)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads lazily
    from numcheck.precision.quant_accumulate import (
        FAST_ACCUMULATION, FP32_ACCUMULATION, PROMOTED_128, Accumulation, emulated_gemm,
    )
    from numcheck.precision.quant_bound import compare_to_simulated
    from numcheck.precision.quant_declare import AsStored, GemmQuant
    from numcheck.precision.quant_record import record_gemm
    from numcheck.precision.quant_scheme import (
        DEEPSEEK_ACT, DEEPSEEK_WEIGHT, FP8_ROW, FP8_TENSOR, MXFP4, NVFP4, PER_ROW, PER_TENSOR,
        QUANT_PRESETS, Granularity, OperandScheme, blocks, groups,
    )
    from numcheck.precision.quant_validate import validate
    from numcheck.precision.quantize import Quantized, as_quantized, dequantize, quantize


__getattr__, __dir__ = _lazy_exports(__name__, globals(), _EXPORTS)
