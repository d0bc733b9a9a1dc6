"""The budget-suggestion policy of numcheck.calibrate (docs/budgets.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from numcheck.calibrate import _round_up, measure, suggest
from numcheck.cases import load_case_file

CASE = """
[tiny]
op = "indexer"
shape = { batch = 2, heads = 4, head_dim = 32, max_context = 256, index_topk = 32 }
variants = ["bf16"]
"""


@pytest.mark.parametrize(("x", "up"), [(0.0, 0.0), (3.81e-3, 3.9e-3), (2.2e-7, 2.2e-7),
                                       (1.01, 1.1), (9.96e-5, 1e-4)])
def test_round_up_two_significant_digits(x: float, up: float) -> None:
    assert _round_up(x) == pytest.approx(up)


def test_suggest_doubles_the_worst_device(tmp_path: Path) -> None:
    (tmp_path / "indexer.toml").write_text(CASE)
    (case,) = load_case_file(tmp_path / "indexer.toml")
    cpu = {"cases": {"indexer::tiny": {
        "bf16/logits": {"rel_fro": 1e-3, "calc_diff": 0.0, "frac_outside": 0.0},
        "bf16/topk": {"recall_min": 0.99, "band_rel_needed": 1e-3}}}}
    gpu = {"cases": {"indexer::tiny": {
        "bf16/logits": {"rel_fro": 2e-3, "calc_diff": 1e-6, "frac_outside": 0.0},
        "bf16/topk": {"recall_min": 0.995, "band_rel_needed": 2e-3}}}}
    text = suggest([cpu, gpu], [case])
    assert "[tiny.budget.bf16.logits]\nrel_fro = 0.004\ncalc_diff = 2e-06\nfrac_outside = 0\n" in text
    # recall floor: min(1 - 2 * 0.01, 1 - 2/32) = 0.9375 (room for two tie swaps of 32);
    # band: 2 x 2e-3.
    assert "[tiny.budget.bf16.topk]\nrecall_min = 0.9375\ntie_recall_min = 1\ntie_band_rel = 0.004" in text


def test_measure_reports_every_variant_output(tmp_path: Path) -> None:
    (tmp_path / "indexer.toml").write_text(CASE)
    (case,) = load_case_file(tmp_path / "indexer.toml")
    worst = measure(case, "cpu", extra_seeds=1)
    assert set(worst) == {"fp32/logits", "fp32/topk", "bf16/logits", "bf16/topk"}
    assert worst["fp32/logits"]["rel_fro"] == 0.0  # the reference against itself, same device
    assert 1e-4 < worst["bf16/logits"]["rel_fro"] < 1e-2



def test_fresh_seeds_start_where_asked(tmp_path: Path) -> None:
    import json

    from numcheck.calibrate import main

    (tmp_path / "indexer.toml").write_text(CASE)
    out = tmp_path / "cal.json"
    assert main(["--device", "cpu", "--seeds", "1", "--first-seed", "2000",
                 "--cases", str(tmp_path), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert (data["meta"]["first_seed"], data["meta"]["extra_seeds"]) == (2000, 1)
    # Seed 2000 differs from the default 1000, so the measured worst moves.
    default = measure(load_case_file(tmp_path / "indexer.toml")[0], "cpu", extra_seeds=1)
    assert data["cases"]["indexer::tiny"]["bf16/logits"] != default["bf16/logits"]
