"""numcheck.calibrate.heldout: measured worst values against the case files' budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numcheck.calibrate.heldout import excesses, main, rows_of
from numcheck.cases import load_cases

CASE = ('[t]\nop = "indexer"\npreset = "v4flash"\nshape = { batch = 1, max_context = 256, '
        'min_context = 256, index_topk = 16 }\nvariants = ["bf16"]\n'
        '[t.budget.bf16.logits]\nrel_fro = 0.004\n[t.budget.bf16.topk]\nrecall_min = 0.9\n')


@pytest.fixture()
def cases(tmp_path: Path) -> dict:
    (tmp_path / "c.toml").write_text(CASE)
    return {f"{c.op}::{c.id}": c for c in load_cases(tmp_path)}


def _calibration(rel_fro: float, recall: float) -> dict:
    return {"cases": {"indexer::t": {"bf16/logits": {"rel_fro": rel_fro, "max_abs": 9.0},
                                     "bf16/topk": {"recall_min": recall}}}}


def _family(rel_fro: float) -> dict:
    return {"cases": {"indexer::t": {"bf16": {"worst": {}, "by_variant": {
        "honest_x": {"logits": {"rel_fro": rel_fro}}}}}}}


def test_values_inside_their_budgets_pass(cases: dict) -> None:
    assert excesses(cases, [_calibration(0.003, 0.95), _family(0.0039)]) == []


def test_a_ceiling_exceeded_and_a_floor_undershot_are_both_found(cases: dict) -> None:
    found = excesses(cases, [_calibration(0.005, 0.85)])
    assert {(e.output, e.metric, e.value, e.limit) for e in found} == {
        ("logits", "rel_fro", 0.005, 0.004), ("topk", "recall_min", 0.85, 0.9)}
    assert "recall_min = 0.85 < budget 0.9" in next(
        e.describe() for e in found if e.metric == "recall_min")


def test_a_family_member_is_held_to_its_class_budget(cases: dict) -> None:
    (e,) = excesses(cases, [_family(0.0041)])
    assert (e.budget_of, e.variant) == ("bf16", "honest_x")
    assert e.describe().startswith("indexer::t honest_x (held to bf16) logits.rel_fro")


def test_rows_for_unknown_cases_or_variants_are_skipped(cases: dict) -> None:
    other = {"cases": {"indexer::gone": {"bf16/logits": {"rel_fro": 1.0}},
                       "indexer::t": {"fused/logits": {"rel_fro": 1.0}}}}
    assert len(list(rows_of(other))) == 2
    assert excesses(cases, [other]) == []


def test_cli_exits_1_on_an_excess_and_0_without(tmp_path: Path, cases: dict,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text(json.dumps(_calibration(0.005, 0.95)))
    good.write_text(json.dumps(_calibration(0.001, 0.95)))
    assert main([str(good), "--cases", str(tmp_path)]) == 0
    assert main([str(bad), "--cases", str(tmp_path)]) == 1
    assert "logits.rel_fro = 0.005 > budget 0.004" in capsys.readouterr().out


def test_frac_outside_within_max_outside_elements_is_no_excess(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CASE.replace("rel_fro = 0.004\n",
                                                  "frac_outside = 0\nmax_outside = 2\n"))
    cases = {f"{c.op}::{c.id}": c for c in load_cases(tmp_path)}
    row = {"cases": {"indexer::t": {"bf16/logits": {"frac_outside": 0.001, "n_outside": 2.0}}}}
    assert excesses(cases, [row]) == []
    row["cases"]["indexer::t"]["bf16/logits"]["n_outside"] = 3.0
    assert [e.metric for e in excesses(cases, [row])] == ["frac_outside"]
    del row["cases"]["indexer::t"]["bf16/logits"]["n_outside"]  # no count: the fraction decides
    assert [e.metric for e in excesses(cases, [row])] == ["frac_outside"]


def test_frac_outside_with_max_outside_rows_is_judged_beyond_the_worst_row(
        tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(CASE.replace(
        "rel_fro = 0.004\n", "frac_outside = 0.001\nmax_outside = 2\nmax_outside_rows = 1\n"))
    cases = {f"{c.op}::{c.id}": c for c in load_cases(tmp_path)}
    clustered = {"frac_outside": 0.01, "n_outside": 100.0, "n_outside_beyond_row": 5.0,
                 "n_compared": 10000.0}
    row = {"cases": {"indexer::t": {"bf16/logits": clustered}}}
    assert excesses(cases, [row]) == []  # 5 of 10000 beyond the row: 0.0005 <= 0.001
    clustered["n_outside_beyond_row"] = 20.0
    (e,) = excesses(cases, [row])
    assert (e.metric, e.value, e.limit) == ("frac_outside", 0.002, 0.001)
    del clustered["n_outside_beyond_row"]  # an older file: the whole count decides
    assert [e.metric for e in excesses(cases, [row])] == ["frac_outside"]
