"""numcheck: is the faster op still right? Precision validation against FP32 goldens.

Run ``pytest --numcheck``; see README.md. This module is the public API for users who bring
their own ops and variants (docs/extending.md):

- describe an op: :class:`OpSpec`, :class:`Variant`, :class:`ParamSpec`, :class:`TopkSpec`,
  and the type aliases :data:`Inputs`, :data:`Outputs`, :data:`Params`;
- say how its outputs are organised, so a failure names the request, page or token where the
  error sits: :class:`Structure`, :class:`Grouping` (``OpSpec(structure=...)``); and what a
  request of its batch is, for batch invariance: :class:`Batch`, :class:`BatchAxis`
  (``OpSpec(batch=...)``);
- register it: :func:`register`, :func:`add_variant`, :func:`get_op` (or, from a conftest.py,
  the ``pytest_numcheck_register(registry)`` hook with its :class:`Registrar`; from an
  installed package, a ``numcheck.ops`` entry point); mistakes raise
  :class:`RegistrationError`;
- measure by hand: :func:`compare` -> :class:`ErrorMetrics`, :func:`calc_diff`,
  :func:`select_topk`, :func:`topk_agreement` -> :class:`TopkReport`;
- seeded, device-independent inputs: :func:`rng`, :func:`normal`, :func:`quantize_e4m3`;
  a case's input distribution and its draws: :func:`input_distribution`,
  :func:`activations`, :data:`DISTRIBUTIONS` (``OpSpec(distributions=...)``); an op's
  inputs recorded from a running model: :func:`record_inputs`, :func:`capture`;
  an honest FP32 reference: :func:`matmul_precision` (``tf32=False``);
- the ``numcheck_golden`` fixture's type, :class:`GoldenCheck`, and its failures,
  :class:`GoldenCheckFailure` and :class:`GoldenError`;
- a failed check's outputs against its golden: :func:`unpack_pair` (docs/usage.md, "Debug a
  failure"); a variant with a one-time preparation called as one function:
  :func:`with_preparation`;
- FP8 and FP4 (docs/fp8.md): a variant's declared quantization, :class:`GemmQuant` of
  :class:`OperandScheme` (or :class:`AsStored`) operands and an :class:`Accumulation`, with
  the ready-made schemes and models, and the libraries' conventions as schemes
  (:data:`QUANT_PRESETS`); the operands it hands over, :func:`record_gemm` of
  :func:`as_quantized` ones; numcheck's bit-exact :func:`quantize`, :func:`dequantize` and
  :func:`emulated_gemm`; a quantizer checked by hand, :func:`validate`, a kernel,
  :func:`compare_to_simulated`.

This module is numcheck's one facade: the rooms below it define their names and re-export
none. Names load on first use: ``import numcheck`` (and so ``pytest --help``) never imports
torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from numcheck._lazy import lazy_exports as _lazy_exports

from numcheck._version import __version__

#: Public name -> the module that defines it.
_EXPORTS = {
    "OpSpec": "numcheck.ops.registry",
    "Variant": "numcheck.ops.registry",
    "ParamSpec": "numcheck.ops.registry",
    "TopkSpec": "numcheck.ops.registry",
    "Inputs": "numcheck.ops.registry",
    "Outputs": "numcheck.ops.registry",
    "Params": "numcheck.ops.registry",
    "Registrar": "numcheck.ops.registry",
    "Structure": "numcheck.ops.structure",
    "Grouping": "numcheck.ops.structure",
    "Batch": "numcheck.ops.batch",
    "BatchAxis": "numcheck.ops.batch",
    "RegistrationError": "numcheck.ops.registry",
    "register": "numcheck.ops.registry",
    "add_variant": "numcheck.ops.registry",
    "get_op": "numcheck.ops.registry",
    "compare": "numcheck.numerics.metrics",
    "calc_diff": "numcheck.numerics.metrics",
    "ErrorMetrics": "numcheck.numerics.metrics",
    "select_topk": "numcheck.numerics.topk",
    "topk_agreement": "numcheck.numerics.topk",
    "TopkReport": "numcheck.numerics.topk",
    "rng": "numcheck.inputs",
    "normal": "numcheck.inputs",
    "quantize_e4m3": "numcheck.inputs",
    "DISTRIBUTIONS": "numcheck.distributions",
    "activations": "numcheck.distributions",
    "input_distribution": "numcheck.distributions",
    "record_inputs": "numcheck.recorded.record",
    "capture": "numcheck.recorded.record",
    "matmul_precision": "numcheck.precision",
    "unpack_pair": "numcheck.goldens.packing",
    "with_preparation": "numcheck.prepare",
    "GoldenCheck": "numcheck.plugin.golden_fixture",
    "GoldenCheckFailure": "numcheck.plugin.golden_fixture",
    "GoldenError": "numcheck.goldens.files",
    "Gemm": "numcheck.ops.spec",
    "optional_library": "numcheck.ops.spec",
    "add_gemm_members": "numcheck.honest.gemm_family",
    # FP8 and FP4: declaring a variant's quantization, checking it (docs/fp8.md)
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
    "DISTRIBUTIONS",
    "Accumulation",
    "AsStored",
    "Batch",
    "BatchAxis",
    "DEEPSEEK_ACT",
    "DEEPSEEK_WEIGHT",
    "ErrorMetrics",
    "FAST_ACCUMULATION",
    "FP32_ACCUMULATION",
    "FP8_ROW",
    "FP8_TENSOR",
    "Gemm",
    "GemmQuant",
    "GoldenCheck",
    "GoldenCheckFailure",
    "GoldenError",
    "Granularity",
    "Grouping",
    "Inputs",
    "MXFP4",
    "NVFP4",
    "OpSpec",
    "OperandScheme",
    "Outputs",
    "PER_ROW",
    "PER_TENSOR",
    "PROMOTED_128",
    "ParamSpec",
    "QUANT_PRESETS",
    "Params",
    "Quantized",
    "Registrar",
    "RegistrationError",
    "Structure",
    "TopkReport",
    "TopkSpec",
    "Variant",
    "__version__",
    "activations",
    "add_gemm_members",
    "add_variant",
    "as_quantized",
    "blocks",
    "calc_diff",
    "capture",
    "compare",
    "compare_to_simulated",
    "dequantize",
    "emulated_gemm",
    "get_op",
    "input_distribution",
    "groups",
    "matmul_precision",
    "normal",
    "optional_library",
    "quantize",
    "quantize_e4m3",
    "record_inputs",
    "record_gemm",
    "register",
    "rng",
    "select_topk",
    "topk_agreement",
    "unpack_pair",
    "validate",
    "with_preparation",
]  # the same names as _EXPORTS (a test keeps them in step)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads lazily
    from numcheck.distributions import DISTRIBUTIONS, activations, input_distribution
    from numcheck.goldens.files import GoldenError
    from numcheck.goldens.packing import unpack_pair
    from numcheck.honest.gemm_family import add_gemm_members
    from numcheck.inputs import normal, quantize_e4m3, rng
    from numcheck.numerics.metrics import ErrorMetrics, calc_diff, compare
    from numcheck.numerics.topk import TopkReport, select_topk, topk_agreement
    from numcheck.ops.batch import Batch, BatchAxis
    from numcheck.ops.registry import (
        Inputs,
        OpSpec,
        Outputs,
        Params,
        ParamSpec,
        Registrar,
        RegistrationError,
        TopkSpec,
        Variant,
        add_variant,
        get_op,
        register,
    )
    from numcheck.ops.spec import Gemm, optional_library
    from numcheck.ops.structure import Grouping, Structure
    from numcheck.plugin.golden_fixture import GoldenCheck, GoldenCheckFailure
    from numcheck.precision import matmul_precision
    from numcheck.precision.quant_accumulate import (
        FAST_ACCUMULATION,
        FP32_ACCUMULATION,
        PROMOTED_128,
        Accumulation,
        emulated_gemm,
    )
    from numcheck.precision.quant_bound import compare_to_simulated
    from numcheck.precision.quant_declare import AsStored, GemmQuant
    from numcheck.precision.quant_record import record_gemm
    from numcheck.precision.quant_scheme import (
        DEEPSEEK_ACT,
        DEEPSEEK_WEIGHT,
        FP8_ROW,
        FP8_TENSOR,
        MXFP4,
        NVFP4,
        PER_ROW,
        PER_TENSOR,
        QUANT_PRESETS,
        Granularity,
        OperandScheme,
        blocks,
        groups,
    )
    from numcheck.precision.quant_validate import validate
    from numcheck.precision.quantize import Quantized, as_quantized, dequantize, quantize
    from numcheck.prepare import with_preparation
    from numcheck.recorded.record import capture, record_inputs


__getattr__, __dir__ = _lazy_exports(__name__, globals(), _EXPORTS)
