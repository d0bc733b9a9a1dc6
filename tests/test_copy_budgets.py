"""Copy and cast budgets: every shipped variant has a measured limit, one extra full copy of
the largest input fails it, and a user's variant gets its precision's default."""

from __future__ import annotations

import tomllib
from pathlib import Path

import planted
import pytest

from numcheck.cases import load_cases
from numcheck.ops.registry import get_op
from numcheck.overhead import (
    DEFAULT_CAST_BYTES_RATIO,
    DEFAULT_COPY_SHARE,
    audit_variant,
    default_overhead,
    overhead_violations,
)

ROOT = Path(__file__).resolve().parent.parent
CASES = [c for c in load_cases(ROOT / "cases") if not c.perf_only]
#: One extra full copy of each op's largest input (or of its largest operand), as planted.
COPY_BUGS = {"indexer": ("kv_cache_copy", "kt_contiguous"), "mhc_pre": ("x_copy",)}


def _raw_overhead(case_op: str, case_id: str) -> dict[str, dict[str, float]]:
    name = {"indexer": "indexer.toml", "mhc_pre": "mhc.toml"}[case_op]
    with (ROOT / "cases" / name).open("rb") as handle:
        return tomllib.load(handle)[case_id].get("overhead", {})


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.op}::{c.id}")
def test_every_shipped_variant_has_a_measured_cast_limit(case: object) -> None:
    op = get_op(case.op)  # type: ignore[attr-defined]
    raw = _raw_overhead(case.op, case.id)  # type: ignore[attr-defined]
    for variant in (op.reference, *case.variants):  # type: ignore[attr-defined]
        assert "max_cast_bytes_ratio" in raw.get(variant, {}), (case.id, variant)  # type: ignore[attr-defined]


def test_defaults_per_precision_class() -> None:
    for precision in ("fp32", "tf32", "bf16"):
        budget = default_overhead(precision)
        assert budget.max_cast_bytes_ratio == DEFAULT_CAST_BYTES_RATIO[precision]
        assert budget.max_copy_share == DEFAULT_COPY_SHARE[precision]  # CUDA only: kernels gate
    # A class without measurements keeps no limit rather than a made-up one.
    assert default_overhead("int4").max_cast_bytes_ratio is None


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.op}::{c.id}")
def test_one_extra_full_copy_of_the_largest_input_fails(case: object) -> None:
    planted.register_all()
    op = get_op(case.op)  # type: ignore[attr-defined]
    p = case.params  # type: ignore[attr-defined]
    inputs = op.make_inputs(p, case.seeds[0])  # type: ignore[attr-defined]
    declared = op.min_bytes(p) if op.min_bytes is not None else None
    budget = case.overhead["bf16"]  # type: ignore[attr-defined]
    good = audit_variant(op.variants["bf16"].fn, inputs, p, min_bytes=declared)
    assert overhead_violations(good, budget, {"casts"}) == []
    for bug in COPY_BUGS[case.op]:  # type: ignore[attr-defined]
        bad = audit_variant(op.variants[bug].fn, inputs, p, min_bytes=declared)
        found = overhead_violations(bad, budget, {"casts"})
        assert [v.key for v in found] == ["casts.cast_bytes_ratio"], (bug, bad.cast_bytes_ratio)
