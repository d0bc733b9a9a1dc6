"""benchmarks/honest_calibration.py --apply: the family budgets written into case files."""

from __future__ import annotations

import importlib.util
import shutil
import tomllib
from pathlib import Path

import pytest

from numcheck.cases import load_case_file

pytest.importorskip("tomlkit")
ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "honest_calibration", ROOT / "benchmarks" / "honest_calibration.py")
assert _spec is not None and _spec.loader is not None
calibration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calibration)


def test_apply_pools_max_err_ratio_raises_only_and_follows_bf16(tmp_path: Path) -> None:
    path = tmp_path / "mhc.toml"
    shutil.copy(ROOT / "cases" / "mhc.toml", path)
    cases = [c for c in load_case_file(path) if c.id in ("v4pro-t32", "v4flash-t64")]
    t32 = next(c for c in cases if c.id == "v4pro-t32")
    old = t32.budgets["bf16"].outputs["comb"].limits
    merged = {
        "mhc_pre::v4pro-t32": {"bf16": {"worst": {
            "comb": {"max_err_ratio": 1.2, "rel_fro": old["rel_fro"] / 10},
            "y": {"max_err_ratio": 3.0}}}},
        "mhc_pre::v4flash-t64": {"bf16": {"worst": {"comb": {"max_err_ratio": 2.0}}}},
    }
    changes = calibration.apply(merged, cases, "test seeds")
    doc = tomllib.loads(path.read_text())
    for case in ("v4pro-t32", "v4flash-t64"):
        for variant in ("bf16", "bf16_roundtrip"):  # the round trip is held to bf16's
            assert doc[case]["budget"][variant]["comb"]["max_err_ratio"] == 2.5  # 1.25 x 2.0
    assert doc["v4pro-t32"]["budget"]["bf16"]["comb"]["rel_fro"] == old["rel_fro"]  # not lowered
    assert doc["v4pro-t32"]["budget"]["bf16"]["y"]["max_err_ratio"] == 5  # bf16-stored: by hand
    assert "(docs/budgets.md); was" in path.read_text()
    assert len(changes) == 4 and all("comb.max_err_ratio: 2 -> 2.5" in c for c in changes), changes


def test_apply_sets_tf32_max_err_ratio_from_its_envelope(tmp_path: Path) -> None:
    """tf32 has a rounding envelope now (TF32 rounded and truncated, emulated on the CPU):
    its max_err_ratio is pooled over the op's cases like bf16's, raised or lowered, and
    never on the bf16-stored y."""
    path = tmp_path / "mhc.toml"
    shutil.copy(ROOT / "cases" / "mhc.toml", path)
    cases = [c for c in load_case_file(path) if c.id in ("v4pro-t32", "v4flash-t64")]
    merged = {
        "mhc_pre::v4pro-t32": {"tf32": {"worst": {"mixes": {"max_err_ratio": 2.0},
                                                  "y": {"max_err_ratio": 1.0}}}},
        "mhc_pre::v4flash-t64": {"tf32": {"worst": {"mixes": {"max_err_ratio": 0.9}}}},
    }
    changes = calibration.apply(merged, cases, "test seeds")
    doc = tomllib.loads(path.read_text())
    for case in ("v4pro-t32", "v4flash-t64"):
        assert doc[case]["budget"]["tf32"]["mixes"]["max_err_ratio"] == 2.5  # 1.25 x 2.0
        assert doc[case]["budget"]["tf32"]["y"]["max_err_ratio"] == 5
    assert len(changes) == 2 and all("mixes.max_err_ratio" in c for c in changes), changes
