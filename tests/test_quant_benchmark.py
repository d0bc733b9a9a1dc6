"""benchmarks/fp8_accumulation.py on the CPU: its model rows, its table and its JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import fp8_accumulation


@pytest.mark.slow  # a dozen emulated GEMMs of K = 1024 with their bounds (seconds)
def test_the_cpu_path_writes_its_table_and_json(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert fp8_accumulation.main(["--device", "cpu", "--quick", "--seeds", "1",
                                  "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].startswith("row")
    data = json.loads((tmp_path / "fp8_accumulation.json").read_text())
    rows = {(r["name"], r["data"]): r for r in data["rows"]}
    assert data["meta"]["device"] == "cpu" and len(rows) == 10
    for r in rows.values():
        assert 0 < r["ratio"] <= 1.0 and r["seeds"] == 1  # the model under its own bound
    fast = rows[("model/tensor/fast/float32", "positive")]["rel_fro"]
    promoted = rows[("model/tensor/promoted128/float32", "positive")]["rel_fro"]
    assert fast > 10 * promoted  # no promotion over a long positive K loses far more
