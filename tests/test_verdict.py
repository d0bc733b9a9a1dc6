"""Metrics held against budgets: violations, severity and their wording."""

from __future__ import annotations

import math

import pytest
import torch

from numcheck.numerics.budgets import OutputBudget, TopkBudget
from numcheck.numerics.metric_names import ERROR_METRICS, TOPK_LIMITS
from numcheck.numerics.metrics import ErrorMetrics, compare
from numcheck.numerics.topk import topk_agreement
from numcheck.numerics.verdict import Violation, output_violations, topk_violations, worst


def budget(*, max_outside: int = 0, max_outside_rows: int = 0, allow_nan: bool = False,
           **limits: float) -> OutputBudget:
    """A budget with a zero-width band (every error is outside it)."""
    return OutputBudget(limits=limits, atol=0.0, rtol=0.0, max_outside=max_outside,
                        max_outside_rows=max_outside_rows, allow_nan=allow_nan)


def test_within_budget_has_no_violation() -> None:
    m = compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]), ulp_dtype=torch.float32,
                atol=0, rtol=0)
    assert output_violations("y", m, budget(rel_fro=0.0, max_abs=0.0)) == []


def test_error_over_budget_is_named_with_index_and_seed() -> None:
    m = compare(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 4.0]),
                ulp_dtype=torch.float32, atol=0, rtol=0)
    (v,) = output_violations("y", m, budget(max_abs=0.5), seed=3)
    assert (v.key, v.value, v.limit, v.index) == ("y.max_abs", 1.0, 0.5, (2,))
    assert v.describe() == "y.max_abs = 1 > budget 0.5 at index (2,) (seed 3)"
    assert v.severity == 2.0


def test_nan_fails_unless_allowed_and_mask_always_must_match() -> None:
    nan, inf = float("nan"), float("-inf")
    m = compare(torch.tensor([nan, inf, 1.0]), torch.tensor([1.0, 0.0, 1.0]),
                ulp_dtype=torch.float32, atol=0, rtol=0)
    keys = {v.key for v in output_violations("y", m, budget())}
    assert keys == {"y.nan", "y.inf_mask"}
    allowed = OutputBudget(limits={}, atol=0, rtol=0, allow_nan=True)
    keys = {v.key for v in output_violations("y", m, allowed)}
    assert keys == {"y.inf_mask", "y.nan_mask"}


def test_recall_floor_and_severity() -> None:
    scores = torch.tensor([[4.0, 3.0, 2.0, -5.0]])
    report = topk_agreement(torch.tensor([[0, 1]]), torch.tensor([[0, 3]]), scores, band=0.0)
    tb = TopkBudget(limits={"recall_min": 0.9, "tie_recall_min": 1.0}, tie_band=0.0,
                    tie_band_kind="rel")
    found = topk_violations("topk", report, tb)
    assert [v.key for v in found] == ["topk.recall_min", "topk.tie_recall_min"]
    assert found[1].detail == "1 flip(s) outside the tie band"  # token 1 is the kth itself
    assert found[0].describe().startswith("topk.recall_min = 0.5 < budget 0.9")
    assert math.isclose(found[0].severity, 0.5 / 0.1)


def test_worst_is_furthest_outside() -> None:
    a = Violation("y", "rel_fro", 2e-3, 1e-3)
    b = Violation("y", "calc_diff", 1e-5, 1e-6)
    c = Violation("y", "inf_mask", 1, 0)
    assert worst([a, b]) is b
    assert worst([a, b, c]) is c
    assert worst([]) is None


def test_one_layout_caps_the_other_violations() -> None:
    from numcheck.report.render import Commands, verdict_message

    many = [Violation("y", f"m{i}", float(i + 2), 1.0) for i in range(12)]
    text = verdict_message("numcheck FAIL x", many, where=("golden:", "g.safetensors"),
                           commands=Commands("pytest a", "pytest b"))
    lines = text.splitlines()
    assert lines[:2] == ["numcheck FAIL x", "  worst: y.m11 = 13 > budget 1"]
    assert sum(line.startswith("  also:") for line in lines) == 8
    assert "  ... and 3 more violations" in lines
    assert lines[-3:] == ["  golden:      g.safetensors", "  reproduce:   pytest a",
                          "  regenerate:  pytest b  (only if the reference itself changed)"]


def _two_outside() -> object:
    # Two of four elements outside a zero-width band.
    return compare(torch.tensor([1.0, 2.5, 3.5, 4.0]), torch.tensor([1.0, 2.0, 3.0, 4.0]),
                   ulp_dtype=torch.float32, atol=0, rtol=0)


def test_max_outside_lets_a_few_elements_past_a_zero_fraction() -> None:
    m = _two_outside()
    strict = budget(frac_outside=0.0)
    assert [v.key for v in output_violations("y", m, strict)] == ["y.frac_outside"]
    allowing = budget(frac_outside=0.0, max_outside=2)
    assert output_violations("y", m, allowing) == []
    assert allowing.frac_outside_limit(4) == 0.5
    assert allowing.frac_outside_limit(0) == 0.0


def test_one_element_more_than_max_outside_fails_and_says_so() -> None:
    m = _two_outside()
    one = budget(frac_outside=0.0, max_outside=1)
    (v,) = output_violations("y", m, one)
    assert (v.value, v.limit) == (0.5, 0.25)
    assert "2 of 4 elements outside the band, more than the 1 max_outside allows" in v.describe()


def test_max_outside_does_not_lift_the_hard_band() -> None:
    """How far past the band the allowed elements may go is max_band_ratio's to bound."""
    b = OutputBudget(limits={"frac_outside": 0.0, "max_band_ratio": 8.0}, atol=0.1, rtol=0.0,
                     max_outside=2)
    m = compare(torch.tensor([1.0, 2.5, 3.0, 4.0]), torch.tensor([1.0, 2.0, 3.0, 4.0]),
                ulp_dtype=torch.float32, atol=0.1, rtol=0)
    assert [v.key for v in output_violations("y", m, b)] == []  # 5 bands out: within 8
    m = compare(torch.tensor([1.0, 3.0, 3.0, 4.0]), torch.tensor([1.0, 2.0, 3.0, 4.0]),
                ulp_dtype=torch.float32, atol=0.1, rtol=0)
    assert [v.key for v in output_violations("y", m, b)] == ["y.max_band_ratio"]  # 10 bands out


def _rows_outside(rows: list[int]) -> ErrorMetrics:
    """A 4 x 8 output with one element outside a zero-width band at (row, column) for each
    listed row, repeated rows meaning more elements in that row."""
    expected = torch.ones(4, 8)
    actual = expected.clone()
    seen: dict[int, int] = {}
    for r in rows:
        actual[r, seen.get(r, 0)] = 2.0
        seen[r] = seen.get(r, 0) + 1
    return compare(actual, expected, ulp_dtype=torch.float32, atol=0, rtol=0)


def test_max_outside_rows_sets_aside_a_cluster_in_one_row() -> None:
    m = _rows_outside([2, 2, 2, 2, 2])
    assert m.row_outside == (5,)
    one_row = budget(frac_outside=0.0, max_outside_rows=1)
    assert output_violations("y", m, one_row) == []
    strict = budget(frac_outside=0.0)
    assert [v.key for v in output_violations("y", m, strict)] == ["y.frac_outside"]


def test_max_outside_rows_does_not_hide_the_same_count_spread_over_rows() -> None:
    """Five elements in one row pass; five over four rows leave four outside: a failure."""
    m = _rows_outside([0, 1, 2, 3, 3])
    one_row = budget(frac_outside=0.0, max_outside_rows=1)
    (v,) = output_violations("y", m, one_row)
    assert (v.key, v.value, v.limit) == ("y.frac_outside", 3 / 32, 0.0)
    assert "2 more in the worst 1 row(s) set aside by max_outside_rows" in v.describe()


def test_max_outside_rows_and_max_outside_add_up() -> None:
    m = _rows_outside([1, 1, 1, 0, 3])  # 3 in row 1, then one each in rows 0 and 3
    both = budget(frac_outside=0.0, max_outside=2, max_outside_rows=1)
    assert output_violations("y", m, both) == []
    fewer = budget(frac_outside=0.0, max_outside=1, max_outside_rows=1)
    (v,) = output_violations("y", m, fewer)
    assert "2 of 32 elements outside the band, more than the 1 max_outside allows" in v.describe()


def test_max_outside_rows_keeps_an_undefined_fraction_undefined() -> None:
    m = compare(torch.tensor([[1.0, float("nan")]]), torch.tensor([[1.0, 2.0]]),
                ulp_dtype=torch.float32, atol=0, rtol=0)
    one_row = budget(frac_outside=0.0, max_outside_rows=1, allow_nan=True)
    found = {v.key: v for v in output_violations("y", m, one_row)}
    assert math.isnan(found["y.frac_outside"].value)


def _honest_and_scaled() -> tuple[ErrorMetrics, ErrorMetrics]:
    """bf16 rounding of a golden (an honest bf16 variant, also the rounding envelope) and the
    same output 2% off everywhere (a wrong scale): the metrics of each on one band."""
    golden = torch.linspace(1.0, 2.0, 256)
    honest = golden.bfloat16().float()
    band = {"ulp_dtype": torch.bfloat16, "atol": 0.0, "rtol": 2.0**-8, "rounding_ref": honest}
    return compare(honest, golden, **band), compare(honest * 1.02, golden, **band)


@pytest.mark.parametrize("metric", ERROR_METRICS)
def test_every_error_metric_budget_fails_a_wrong_scale_and_passes_the_honest_variant(
    metric: str,
) -> None:
    """Each key a case may budget is held: none is measured and then skipped. The limit is
    twice what the honest variant measures; a 2% scale error lies beyond it on every key."""
    honest, scaled = _honest_and_scaled()
    limit = 2 * honest.value(metric)
    assert output_violations("y", honest, budget(**{metric: limit})) == []
    (v,) = output_violations("y", scaled, budget(**{metric: limit}))
    assert (v.key, v.upper) == (f"y.{metric}", True)
    assert v.value == scaled.value(metric) and v.value > limit


@pytest.mark.parametrize("metric", TOPK_LIMITS)
def test_every_topk_floor_fails_a_flip_outside_the_band(metric: str) -> None:
    """Row 0 selects the golden tokens; row 1 swaps its kth (score 2) for a token far below
    it (score -5): every recall floor of 0.9 holds for the honest rows and fails for these."""
    scores = torch.tensor([[4.0, 3.0, 2.0, -5.0]] * 2)
    golden = torch.tensor([[0, 1, 2], [0, 1, 2]])
    floor = TopkBudget(limits={metric: 0.9}, tie_band=1e-3, tie_band_kind="rel")
    honest = topk_agreement(golden, golden, scores, band=1e-3)
    assert topk_violations("topk", honest, floor) == []
    flipped = topk_agreement(golden, torch.tensor([[0, 1, 2], [0, 1, 3]]), scores, band=1e-3)
    (v,) = topk_violations("topk", flipped, floor)
    assert (v.key, v.upper, v.limit) == (f"topk.{metric}", False, 0.9)
    assert v.value == flipped.value(metric) < 0.9
