"""benchmarks/numerics/many_seeds.py on the CPU: a run, its resumption, the budgets it would raise,
the report that judges it, and the GPU regression step that runs it (with --device cpu)."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import pytest

from benchmarks import gpu_regression as reg
from benchmarks.numerics import many_seeds

ROOT = Path(__file__).resolve().parent.parent


def _short_budget(path: Path, variant: str = "bf16") -> float:
    """indexer-short's rel_fro limit on its logits for ``variant``, as ``path`` holds it."""
    from numcheck.cases import load_case_file

    short = next(c for c in load_case_file(path) if c.table == "indexer-short")
    return float(short.budgets[variant].outputs["logits"].limits["rel_fro"])


def test_a_run_resumes_and_its_report_judges_every_point(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.jsonl"
    args = ["run", "--out", str(out), "-k", "indexer-short", "--seeds", "1", "--first-seed",
            "9100", "--runs", "2"]
    assert many_seeds.main(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["point"] for r in rows) == ["max_context1", "max_context2", "max_context3",
                                                 "max_context5"]
    cell = rows[0]["variants"]["bf16"]
    assert cell["claims"] == {"determinism": True, "batch_invariance": True}
    assert cell["determinism"]["of"] == 2 and "logits" in cell["rows"]
    # tf32 is off the case's batch_invariant list, and still measured (to show what holds).
    assert rows[0]["variants"]["tf32"]["claims"]["batch_invariance"] is False
    assert "batch_invariance" in rows[0]["variants"]["tf32"]
    assert many_seeds.main(args) == 0  # resumed: nothing measured twice
    assert len(out.read_text().splitlines()) == 4
    capsys.readouterr()
    assert many_seeds.main(["report", str(out)]) == 0
    report = capsys.readouterr().out
    assert "| indexer::indexer-short | bf16 | 4/4 |  |" in report
    # 4 points x the shipped variants that run here (the fused kernel needs triton)
    checks = 4 * sum(1 for v in rows[0]["variants"].values() if "rows" in v)
    assert f"# {checks}/{checks} honest checks pass; 0 invariance claims broken" in report
    assert many_seeds.main(["budgets", str(out), "--all"]) == 0
    table = capsys.readouterr().out
    shipped = _short_budget(ROOT / "cases" / "sweeps.toml")
    assert f"| indexer::indexer-short | bf16 | logits | rel_fro | {shipped:g} |" in table


def test_budgets_raise_a_key_past_its_rule_and_write_it_with_its_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A measurement whose worst needs more than the case file holds raises that key (never
    lowers one), in place, with a comment naming the worst, its point and seed."""
    pytest.importorskip("tomlkit")
    import shutil

    from numcheck.cases import load_case_file

    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(ROOT / "cases" / "sweeps.toml", cases / "sweeps.toml")
    out = tmp_path / "m.jsonl"
    assert many_seeds.main(["run", "--out", str(out), "--cases", str(cases), "-k",
                            "indexer-short", "--seeds", "1", "--first-seed", "9100",
                            "--runs", "2"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    shipped = _short_budget(cases / "sweeps.toml")
    worst = 0.75 * shipped  # 2x it passes the file's value
    rows[0]["variants"]["bf16"]["rows"]["logits"]["rel_fro"] = worst
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert many_seeds.main(["budgets", str(out), "--cases", str(cases), "--write"]) == 0
    printed = capsys.readouterr().out
    raised = 1.5 * shipped
    assert (f"| indexer::indexer-short | bf16 | logits | rel_fro | {shipped:g} | {worst:.3g} "
            f"(max_context1, 9100) | 4 | {raised:g} | {raised:g} (raise) |") in printed
    text = (cases / "sweeps.toml").read_text()
    assert (f"rel_fro = {raised:g}  # raised from {shipped:g}: the headroom rule on "
            f"{worst:.3g} (max_context1, seed 9100) of 4 checks, benchmarks/numerics/many_seeds.py"
            ) in text
    short = [c for c in load_case_file(cases / "sweeps.toml") if c.table == "indexer-short"]
    assert short[0].budgets["bf16"].outputs["logits"].limits["rel_fro"] == pytest.approx(raised)
    tf32 = short[0].budgets["tf32"].outputs["logits"].limits["rel_fro"]
    assert tf32 == _short_budget(ROOT / "cases" / "sweeps.toml", "tf32")  # untouched


def test_the_report_fails_a_broken_claim_and_a_failed_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.jsonl"
    assert many_seeds.main(["run", "--out", str(out), "-k", "indexer-short@max_context1,"
                            "indexer-short", "--seeds", "1", "--first-seed", "9100",
                            "--runs", "2"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows[0]["variants"]["bf16"]["violations"] = ["logits.rel_fro = 1 > budget 0.02"]
    rows[1]["variants"]["bf16"]["batch_invariance"]["differing"] = 1
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert many_seeds.main(["report", str(out)]) == 1
    report = capsys.readouterr().out
    assert "FAIL indexer::indexer-short@max_context1 seed 9100 bf16: logits.rel_fro" in report
    assert "KEY BROKEN indexer::indexer-short bf16 batch_invariance" in report


@pytest.mark.slow  # it starts the benchmark's process
def test_the_gpu_regression_step_runs_it_and_judges_by_its_report(tmp_path: Path) -> None:
    assert reg.main(["--out", str(tmp_path), "--steps", "many-seeds", "--device", "cpu",
                     "--many-seeds", "1", "--many-first-seed", "9100",
                     "--select", "indexer-short"]) == 0
    summary = (tmp_path / "summary.txt").read_text()
    checks = 20 if find_spec("triton") else 16  # 4 points x 5 variants, fused needs triton
    assert "many-seeds  ok" in summary and f"{checks}/{checks} honest checks pass" in summary
