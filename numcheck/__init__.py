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
- FP8 and FP4 (docs/fp8.md): a variant's declared quantization, its schemes, the operands
  it hands over and checks by hand, in :mod:`numcheck.fp8`.

This module is numcheck's facade, with :mod:`numcheck.fp8` beside it: the rooms below define
their names and re-export none. Names load on first use: ``import numcheck`` (and so
``pytest --help``) never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from numcheck._lazy import lazy_exports as _lazy_exports

from numcheck import fp8
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
}

__all__ = [
    "DISTRIBUTIONS",
    "Batch",
    "BatchAxis",
    "ErrorMetrics",
    "Gemm",
    "GoldenCheck",
    "GoldenCheckFailure",
    "GoldenError",
    "Grouping",
    "Inputs",
    "OpSpec",
    "Outputs",
    "ParamSpec",
    "Params",
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
    "calc_diff",
    "capture",
    "compare",
    "get_op",
    "input_distribution",
    "matmul_precision",
    "normal",
    "optional_library",
    "quantize_e4m3",
    "record_inputs",
    "register",
    "rng",
    "select_topk",
    "topk_agreement",
    "unpack_pair",
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
    from numcheck.prepare import with_preparation
    from numcheck.recorded.record import capture, record_inputs


# numcheck.fp8's names keep their old spelling, numcheck.<name> (docs/extending.md listed
# them here), unlisted: __all__ and dir() show numcheck.fp8.
__getattr__, __dir__ = _lazy_exports(__name__, globals(), _EXPORTS, also=fp8._EXPORTS)
