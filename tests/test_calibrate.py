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


def test_pool_keeps_the_worst_of_every_variant_with_its_name() -> None:
    from numcheck.calibrate import Worst, fold, pool

    a: dict = {}
    b: dict = {}
    fold(a, {"y": {"rel_fro": 1e-3, "recall_min": 0.99}}, seed=0, variant="bf16")
    fold(a, {"y": {"rel_fro": 2e-3, "recall_min": 0.995}}, seed=7, variant="bf16")
    fold(b, {"y": {"rel_fro": 1.5e-3, "recall_min": 0.98}}, seed=3, variant="bf16_splitk")
    assert a["y"] == {"rel_fro": Worst(2e-3, 7, "bf16"), "recall_min": Worst(0.99, 0, "bf16")}
    assert pool([a, b])["y"] == {"rel_fro": Worst(2e-3, 7, "bf16"),
                                 "recall_min": Worst(0.98, 3, "bf16_splitk")}


def test_suggest_values_covers_what_the_case_gates() -> None:
    from numcheck.calibrate import suggest_values

    row = {"rel_fro": 1e-3, "calc_diff": 0.0, "frac_outside": 0.0, "max_abs": 0.031,
           "ulp_max": 0.0}
    # calc_diff measured 0 takes its floor; ulp_max measured 0 has none: left out.
    assert suggest_values(row, topk=False, gated=("rel_fro", "max_abs", "ulp_max")) == pytest.approx(
        {"rel_fro": 2e-3, "calc_diff": 1e-14, "frac_outside": 0.0, "max_abs": 0.062})


def test_measure_variant_keeps_the_worst_seed(tmp_path: Path) -> None:
    import torch

    from numcheck.calibrate import References, calibration_seeds, measure_variant
    from numcheck.numerics.metrics import compare
    from numcheck.ops.registry import get_op

    (tmp_path / "indexer.toml").write_text(CASE)
    (case,) = load_case_file(tmp_path / "indexer.toml")
    op = get_op("indexer")
    seeds = calibration_seeds(case, 2, first_seed=50)
    assert seeds == (0, 50, 51)
    table = measure_variant(op, case, "bf16", "cpu", seeds, References(op, case, "cpu"))
    by_seed = {}
    for seed in seeds:
        inputs = op.make_inputs(case.params, seed)
        ref = op.variants["fp32"].fn(inputs, case.params)["logits"]
        out = op.variants["bf16"].fn(inputs, case.params)["logits"]
        by_seed[seed] = compare(out, ref, ulp_dtype=torch.bfloat16, atol=1e-2, rtol=1.6e-2).rel_fro
    worst = max(by_seed, key=by_seed.__getitem__)
    assert table["logits"]["rel_fro"].seed == worst
    assert table["logits"]["rel_fro"].value == pytest.approx(by_seed[worst])


def test_cli_outside_a_cases_folder_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from numcheck.calibrate import main

    monkeypatch.chdir(tmp_path)
    assert main(["--suggest", "x.json"]) == 2
    err = capsys.readouterr().err
    assert err == ("python -m numcheck.calibrate: cases: the case folder does not exist. Fix: "
                   "run it from the folder that holds cases/, or pass --cases DIR; for a "
                   "project with its own ops and ini keys, run pytest --numcheck "
                   "--numcheck-calibrate there\n")
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "indexer.toml").write_text(CASE)
    assert main(["--suggest", "x.json"]) == 2
    assert "--suggest: cannot read a calibration file" in capsys.readouterr().err
