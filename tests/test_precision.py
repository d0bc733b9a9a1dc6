"""Precision classes: the dtype ULPs are counted in, and the class an output can be held to."""

from __future__ import annotations

import pytest
import torch

from numcheck.precision import PRECISIONS, compute_dtype, precision_of, ulp_dtype


def test_ulps_are_counted_in_the_coarser_of_compute_and_output() -> None:
    assert ulp_dtype("fp32", torch.float32) is torch.float32
    assert ulp_dtype("tf32", torch.float32) is torch.float32  # TF32 has no torch dtype
    assert ulp_dtype("bf16", torch.float32) is torch.bfloat16
    assert ulp_dtype("fp32", torch.bfloat16) is torch.bfloat16  # stored coarser than computed
    assert ulp_dtype("bf16", torch.int64) is torch.bfloat16  # indices: the compute dtype


def test_an_unnamed_precision_follows_the_output_dtype() -> None:
    assert precision_of(torch.bfloat16) == "bf16"
    assert precision_of(torch.float16) == "bf16"
    assert precision_of(torch.float32) == "fp32"
    assert precision_of(torch.float64) == "fp32"


def test_unknown_class_is_a_key_error() -> None:
    assert "fp64" not in PRECISIONS
    with pytest.raises(KeyError):
        compute_dtype("fp64")


def test_every_precision_class_has_a_default_budget_row_and_gemm_units() -> None:
    from numcheck.numerics.budgets import DEFAULT_BUDGETS
    from numcheck.ops.registry import PRECISIONS as registry_precisions
    from numcheck.overhead.limits import default_overhead
    from numcheck.precision import PRECISION_CLASSES

    assert registry_precisions == PRECISIONS
    assert set(PRECISION_CLASSES) <= set(DEFAULT_BUDGETS)
    for name, cls in PRECISION_CLASSES.items():
        assert compute_dtype(name).is_floating_point
        assert default_overhead(name).cuda_core_gemm is not cls.tensor_core
    assert default_overhead("fp32").cuda_core_gemm
    assert not default_overhead("bf16").cuda_core_gemm
