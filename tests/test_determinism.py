"""Determinism of the FP32 references on the CPU.

Run to run, in one process and at one thread count, every reference is bit-identical: the
goldens can be compared with exact tools. Across thread counts MKL may split the mHC GEMM's
long reduction differently; that difference must stay inside the case's fp32 budget, which is
what the reference-drift check holds it to. benchmarks/reliability/determinism.py checks CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from numcheck.cases import Case
from numcheck.numerics.metrics import compare
from numcheck.ops.registry import get_op
from tests.shipped import shipped_cases

# Perf-only cases run at production shape on CUDA only: far too large for a CPU unit test.
CASES = {f"{c.op}::{c.id}": c for c in shipped_cases() if not c.perf_only}


#: Cases whose inputs alone are hundreds of MB (linear's CUDA case at o_proj's real weight,
#: 7168 x 16384): generating them costs seconds on a CPU, so their parameters of the per-case
#: tests below run in the slow tier.
LARGE_BYTES = 100e6


def _keys(cases: dict[str, Case]) -> list[object]:
    """Case keys as test parameters, the large ones in the slow tier."""
    def large(c: Case) -> bool:
        min_bytes = get_op(c.op).min_bytes
        return min_bytes is not None and min_bytes(c.params) > LARGE_BYTES

    return [pytest.param(k, marks=pytest.mark.slow) if large(c) else k
            for k, c in sorted(cases.items())]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bytes, so NaN, -inf and -0.0 compare exactly."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


@pytest.fixture
def threads() -> Iterator[None]:
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


@pytest.mark.parametrize("key", _keys(CASES))
def test_reference_is_bit_identical_run_to_run(key: str) -> None:
    case = CASES[key]
    op = get_op(case.op)
    ref = op.variants[op.reference]
    inputs = op.make_inputs(case.params, case.seeds[0])
    first = ref.fn(inputs, case.params)
    second = ref.fn({k: v.clone() for k, v in inputs.items()}, case.params)
    for name in op.outputs:
        assert first[name].dtype == second[name].dtype
        assert torch.equal(_bits(first[name]), _bits(second[name])), f"{key}: {name} differs"


@pytest.mark.parametrize("key", ["mhc_pre::v4pro-t32", "indexer::v4flash-b2-l1k-contiguous"])
def test_thread_count_changes_stay_inside_the_fp32_budget(key: str, threads: None) -> None:
    case = CASES[key]
    op = get_op(case.op)
    ref = op.variants[op.reference]
    inputs = op.make_inputs(case.params, case.seeds[0])
    torch.set_num_threads(1)
    one = ref.fn(inputs, case.params)
    torch.set_num_threads(2)
    two = ref.fn(inputs, case.params)
    budget = case.budgets[op.reference]
    for name in op.outputs:
        if op.topk is not None and name == op.topk.indices:
            continue
        ob = budget.outputs[name]
        m = compare(two[name], one[name], ulp_dtype=torch.float32, atol=ob.atol, rtol=ob.rtol)
        for metric, limit in ob.limits.items():
            if not m.measured(metric):  # max_err_ratio: no rounding reference here
                continue
            assert m.value(metric) <= limit, f"{key}: {name}.{metric} {m.value(metric)} > {limit}"
