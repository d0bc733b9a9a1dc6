"""The honest implementations of each precision class, as users write them.

A precision class is not one implementation (TF32 rounded or truncated, a bf16 GEMM writing
bf16 or fp32, the sum over K in one pass, in K-blocks or split-K). This room lists them and
turns them into members of an op:

- :mod:`~numcheck.honest.gemm_impls`: the honest GEMMs of each class (emulated bit for bit
  from :mod:`numcheck.precision.operand_rounding`, and on CUDA cuBLAS and a Triton kernel);
- :mod:`~numcheck.honest.gemm_family`: an op's members and rounding envelope per class,
  derived from where its GEMM sits (``OpSpec.gemm_site``); ``add_gemm_members`` registers
  them as variants for calibration.

It sits above :mod:`numcheck.ops` (an op's spec, split-K, the Triton GEMM, the registry) and
below the case files, whose ``max_err_ratio`` needs an envelope to be measurable.
"""

from __future__ import annotations

#: Variant names of an op's derived members: ``gemm_<label>`` (``gemm_tf32_trunc``).
#: Defined here, without torch, for the pure readers of a calibration (its guard).
MEMBER_PREFIX = "gemm_"

