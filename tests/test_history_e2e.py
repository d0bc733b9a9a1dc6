"""The fleet commands on real runs: a project in a scratch git repository, gated with
``--numcheck-save`` at each of four commits (the third changes a variant's rounding), one
commit's run split in two shards and merged, the GPU report in docs/ as a second device
class; matrixed, drawn, and the page rendered in headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from numcheck.__main__ import main
from numcheck.history.merge import result_fields
from numcheck.history.runs import load_runs
from numcheck.history.series import build_history
from numcheck.report.records import load_report
from tests.caseproject import case_project
from tests.fleet import GPU_REPORT
from tests.test_html_report import CHROMIUM, external_references, png_colours, render

CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = { tokens = 8, hidden = 256 }
seeds = [0]
variants = ["bf16", "mine"]
"""

#: Our variant: the bf16 GEMM with fp32 RMS statistics. ROUNDING is replaced at commit 3 by
#: an extra bf16 rounding of the mixes: calc_diff grows 1.7x, still inside the budget.
CONFTEST = """
import torch
import numcheck
from numcheck.ops import mhc


def mine(inputs, p):
    x = inputs["x"].flatten(1)
    xf = x.float()
    mm = x @ inputs["hc_fn"].to(torch.bfloat16).T
    m = ROUNDING
    return mhc._epilogue(m, xf, inputs, p)


def pytest_numcheck_register(registry):
    registry.add_variant("mhc_pre", numcheck.Variant("mine", mine, "bf16"))
"""
PLAIN = "mm.float() * mhc._rms_inv(xf, mhc.norm_eps(p))"
#: One expression: the fp32 product is gone when its bf16 copy comes back to fp32, so the
#: cast ledger sees a narrower result, not a round trip of a tensor still alive.
ROUNDED = f"({PLAIN}).to(torch.bfloat16).float()"


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    if date:
        env |= {"GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date}
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                         env=env, check=True)
    return out.stdout.strip()


@pytest.mark.slow  # eight pytest runs of a project, and a headless browser
def test_history_of_a_project_across_commits_and_devices(pytester: pytest.Pytester,
                                                         tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = pytester.path
    case_project(pytester, {"mhc.toml": CASE}, conftest=CONFTEST.replace("ROUNDING", PLAIN))
    (root / ".gitignore").write_text("__pycache__/\n")
    pytester.runpytest("--numcheck", "--numcheck-regen").assert_outcomes(passed=3)
    _git(root, "init", "-q")
    commits = []
    for i in range(4):
        date = f"2026-11-0{i + 1}T12:00:00+00:00"
        if i == 2:  # our variant's rounding changes
            (root / "conftest.py").write_text(CONFTEST.replace("ROUNDING", ROUNDED))
        (root / "NOTES").write_text(f"commit {i}\n")
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", f"commit {i}", date=date)
        commits.append(_git(root, "rev-parse", "HEAD"))
        result = pytester.runpytest("--numcheck", "--numcheck-save")
        result.assert_outcomes(passed=3)
        saved_line = f"numcheck run saved: .numcheck/history/cpu/{commits[-1][:12]}-*.json"
        result.stdout.fnmatch_lines([saved_line])
    assert _git(root, "status", "--porcelain") == ""  # the history folder is ignored
    history = root / ".numcheck" / "history"
    saved = sorted((history / "cpu").glob("*.json"))
    assert len(saved) == 4
    last = load_report(next(p for p in saved if p.name.startswith(commits[-1][:12])))
    assert last.environment["git_commit"] == commits[-1]
    assert last.environment["git_commit_date"] == "2026-11-04T12:00:00+00:00"

    # The last commit's run again, in two shards, merged: the single run's records and gate.
    ids = [r.nodeid for r in last.records]
    for name, part in (("1", ids[:2]), ("2", ids[2:])):
        pytester.runpytest("--numcheck", "--numcheck-report", f"shard{name}.json", *part)
    merged = tmp_path / "merged.json"
    assert main(["merge", str(root / "shard1.json"), str(root / "shard2.json"),
                 "-o", str(merged)]) == 0
    run = load_report(merged)
    assert [result_fields(r) for r in run.records] == [result_fields(r) for r in last.records]
    assert run.passed == last.passed and run.exitstatus == last.exitstatus

    # The device matrix: the newest CPU run beside the H200 report.
    assert main(["matrix", str(history), str(GPU_REPORT), "--jobs", "1",
                 "--html", str(tmp_path / "matrix.html")]) == 0
    matrix_page = (tmp_path / "matrix.html").read_text()
    assert external_references(matrix_page) == []
    assert "mhc_pre::tiny-mhc::mine" in matrix_page and "mhc_pre::v4pro-t32::fused" in matrix_page

    # The history: the rounding change is the first move, at commit 3.
    h = build_history(load_runs([history, GPU_REPORT], repo=root, jobs=1).runs)
    assert h.classes == ["cpu", "H200"]
    (moved,) = h.moved
    assert moved.label == "mhc_pre::tiny-mhc::mine"
    first = moved.first_moves()["cpu"]
    assert h.runs[first.run].commit == commits[2] and first.status == "regression"
    assert "calc_diff" in first.reasons[0] and "rule: > 1.25x on same device" in first.reasons[0]
    page = tmp_path / "history.html"
    # Commit 4 ran as commit 3 did: no regression of the newest run, exit 0...
    assert main(["history", str(history), str(GPU_REPORT), "--repo", str(root), "--jobs", "1",
                 "--html", str(page)]) == 0
    # ...but up to commit 3, the newest run is the one that regressed: exit 1.
    upto3 = [p for p in saved if not p.name.startswith(commits[-1][:12])]
    assert main(["history", *map(str, upto3), "--jobs", "1"]) == 1
    text = page.read_text()
    assert external_references(text) == [] and commits[2][:10] in text

    # The page in a browser: no console message (a blocked request would log one), drawn.
    if CHROMIUM is None:
        pytest.skip("the page was not rendered: headless Chromium is not installed (Debian: "
                    "apt-get install chromium)")
    shot, dom, console = render(page, tmp_path)
    assert console == [], console
    assert png_colours(shot) >= 8, "the screenshot is blank (one colour)"
    assert commits[2][:10] in dom and "numcheck history" in dom
    measured = [s for s in h.series if any(p.record.status != "skip"
                                           for points in s.lines.values() for p in points)]
    assert len(measured) == 43
    # A figure for the check that moved; every other one held still (the H200's ran once, the
    # project's other variants measured the same at each commit) or never ran: a table row.
    assert dom.count('src="data:image/svg+xml;base64,') == 1
    assert dom.count('<tr id="check-') == len(h.series) - 1
