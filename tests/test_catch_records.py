"""The planted bugs' recorded catches stay caught: benchmarks/reliability/fp8_catch.py
--recheck holds every catch recorded in the evidence folders (fp8-catch*.json, on the CPU and
the H200) to the limits the case files ship now, so a limit raised later (new seeds, another device)
cannot quietly let a recorded bug through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.reliability import fp8_catch
from tests.shipped import shipped_cases

ROOT = Path(__file__).resolve().parent.parent

RECORDS = sorted((ROOT / "docs" / "evidence").rglob("fp8-catch*.json"))
CASES = {c.id: c for c in shipped_cases()}


def test_the_evidence_holds_catch_records_of_both_devices() -> None:
    devices = {json.loads(p.read_text())["meta"]["device"] for p in RECORDS}
    assert devices == {"cpu", "cuda"}


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_every_recorded_catch_still_fails_the_shipped_limits(path: Path) -> None:
    data = json.loads(path.read_text())
    assert sum(r["caught"] for r in data["bugs"]) > 0
    assert fp8_catch.recheck(data, CASES) == []


def _record(violations: list[str], rel_fro: float, sim_rel_fro: float | None) -> dict:
    return {"bugs": [{"bug": "bug_x", "case": "tiny-k384", "head": "fp8_block", "seed": 1,
                      "caught": True, "violations": violations, "rel_fro": rel_fro,
                      "sim_rel_fro": sim_rel_fro}], "honest": []}


def test_a_catch_on_a_limit_since_raised_is_listed() -> None:
    limits = CASES["tiny-k384"].budgets["fp8_block"].outputs["y"].limits
    within = 0.9 * limits["rel_fro"]  # the limit was raised past the recorded error
    lost = fp8_catch.recheck(_record(["y.rel_fro"], within, None), CASES)
    assert len(lost) == 1 and "bug_x on tiny-k384 (fp8_block) seed 1" in lost[0]
    # Past today's limit it still holds; so does a catch by a limit-free rule, and one that
    # was not a catch at all is not judged.
    assert fp8_catch.recheck(_record(["y.rel_fro"], 2 * limits["rel_fro"], None), CASES) == []
    assert fp8_catch.recheck(_record(["y.rel_fro"], float("nan"), None), CASES) == []
    assert fp8_catch.recheck(_record(["quant.sim_ratio"], within, None), CASES) == []
    assert fp8_catch.recheck(_record(["error"], within, None), CASES) == []
    passed = _record([], within, None)
    passed["bugs"][0]["caught"] = False
    assert fp8_catch.recheck(passed, CASES) == []


def test_a_catch_the_record_cannot_rejudge_is_listed() -> None:
    """A catch by keys whose values the record does not keep (here max_err_ratio alone) is
    listed: holding it needs a new run, not the record."""
    limits = CASES["tiny-k384"].budgets["fp8_block"].outputs["y"].limits
    lost = fp8_catch.recheck(_record(["y.max_err_ratio"], 0.5 * limits["rel_fro"],
                                     0.5 * limits["sim_rel_fro"]), CASES)
    assert len(lost) == 1 and "caught by y.max_err_ratio" in lost[0]


def test_the_command_exits_1_on_a_lost_catch(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    limits = CASES["tiny-k384"].budgets["fp8_block"].outputs["y"].limits
    path = tmp_path / "fp8-catch.json"
    path.write_text(json.dumps(_record(["y.rel_fro"], 0.5 * limits["rel_fro"], None)))
    assert fp8_catch.main(["--recheck", str(path)]) == 1
    assert "1 recorded catches, 1 no longer held" in capsys.readouterr().out
    assert fp8_catch.main(["--recheck", *map(str, RECORDS)]) == 0
