"""benchmarks/cost/suite_profile.py: what its plugin writes per test process, and its
summary (docs/testing.md, "Where the test command's time goes")."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.cost import suite_profile


def test_off_without_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(suite_profile.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    suite_profile.pytest_configure(SimpleNamespace())
    suite_profile.pytest_runtest_logstart("t.py::a", None)
    assert list(tmp_path.iterdir()) == []  # nothing written, here or anywhere it could


def test_each_process_writes_its_events_and_the_summary_reads_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(suite_profile.ENV, str(tmp_path))

    config = SimpleNamespace(workerinput={"workerid": "gw0"})
    suite_profile.pytest_configure(config)
    suite_profile.pytest_collection_finish(SimpleNamespace(items=["a", "b"]))
    for nodeid in ("tests/test_x.py::a", "tests/test_y.py::b"):
        suite_profile.pytest_runtest_logstart(nodeid, None)
        sum(i * i for i in range(20_000))  # some CPU inside the test
        suite_profile.pytest_runtest_logfinish(nodeid, None)
    suite_profile.pytest_unconfigure(config)
    (written,) = tmp_path.glob("*.jsonl")
    events = [json.loads(line) for line in written.read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "collected", "test", "done", "test",
                                            "done", "end"]
    assert events[0]["worker"] == "gw0" and events[1]["tests"] == 2
    assert all(b["cpu"] >= a["cpu"] and b["t"] >= a["t"] for a, b in itertools.pairwise(events))
    lines = suite_profile.summary(tmp_path, top=5)
    assert lines[0].startswith("gw0: ") and "collected 2 tests" in lines[0]
    assert lines[1].startswith("tests: 2, ")
    assert {line.split()[-1] for line in lines[2:4]} == {"tests/test_x.py", "tests/test_y.py"}
    assert lines[4] == "by test:" and len(lines) == 7
