"""benchmarks/gpu_regression.py's plumbing on the CPU: its tables, and that anything off (or
not run) makes it exit 1. The GPU steps themselves run on the GPU machine only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import gpu_regression as reg  # noqa: E402


def test_the_independent_table_flags_a_difference_over_the_tolerance() -> None:
    rows = [{"id": "indexer::p::bf16[cuda]", "numcheck": 1.115, "ci": [1.101, 1.128],
             "independent": 1.12, "diff": 1.12 / 1.115 - 1},
            {"id": "mhc_pre::p::fused[cuda]", "numcheck": 6.8, "ci": [6.7, 6.9],
             "independent": 7.61, "diff": 7.61 / 6.8 - 1}]
    lines = reg.independent_table(rows, 0.03).splitlines()
    assert lines[1].endswith("+0.4%")
    assert lines[2].endswith("+11.9%  over 3%")


def test_the_summary_says_pass_only_when_every_step_is_ok() -> None:
    ok = [reg.Step("gate", True, 70, "93 checks"), reg.Step("unit", True, 90, "1047 passed")]
    assert reg.summary_table(ok, 160).splitlines()[-1] == "GPU regression run: PASS (160 s)"
    off = [*ok, reg.Step("perf-2", False, 41, "failed: x")]
    table = reg.summary_table(off, 201).splitlines()
    assert table[-2].startswith("perf-2") and "OFF" in table[-2]
    assert table[-1] == "GPU regression run: FAIL (201 s)"


def test_a_step_that_cannot_run_makes_the_run_fail(tmp_path: Path) -> None:
    assert reg.main(["--out", str(tmp_path), "--steps", "independent"]) == 1
    summary = (tmp_path / "summary.txt").read_text()
    assert "independent  OFF" in summary and "no perf report to re-time" in summary
    assert (tmp_path / "regression.tgz").exists()


def test_unknown_steps_are_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        reg.main(["--out", str(tmp_path), "--steps", "gate,coffee"])
    assert exc.value.code == 2
