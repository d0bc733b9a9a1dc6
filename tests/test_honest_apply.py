"""benchmarks/numerics/honest_calibration.py --apply: the family budgets written into case files."""

from __future__ import annotations

import datetime
import shutil
import tomllib
from pathlib import Path

import pytest

from benchmarks.numerics import honest_calibration as calibration
from numcheck.cases import load_case_file

pytest.importorskip("tomlkit")
ROOT = Path(__file__).resolve().parent.parent


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
    changes = calibration.apply(merged, cases, "test seeds", command="honest --apply x.json")
    text = path.read_text()
    doc = tomllib.loads(text)
    for case in ("v4pro-t32", "v4flash-t64"):
        assert doc[case]["budget"]["bf16"]["comb"]["max_err_ratio"] == 2.5  # 1.25 x 2.0
        # the round trip is held to bf16's through budget_like, not through copies
        assert doc[case]["budget"]["bf16_roundtrip"] == {"budget_like": "bf16"}
    held = {c.id: c for c in load_case_file(path)}
    assert held["v4pro-t32"].budgets["bf16_roundtrip"] == held["v4pro-t32"].budgets["bf16"]
    assert doc["v4pro-t32"]["budget"]["bf16"]["comb"]["rel_fro"] == old["rel_fro"]  # not lowered
    assert doc["v4pro-t32"]["budget"]["bf16"]["y"]["max_err_ratio"] == 5  # bf16-stored: by hand
    # Where the values come from: once, in the header; no changed line carries a comment.
    assert f"# set by: honest --apply x.json ({datetime.date.today().isoformat()})\n" in text
    assert "max_err_ratio = 2.5\n" in text and "was 2" not in text
    why = ("comb.max_err_ratio: 2 -> 2.5: 1.25x the family's worst against the rounding "
           "envelope, pooled over the mhc_pre cases, test seeds (docs/budgets.md)")
    assert len(changes) == 2 and all(why in c for c in changes), changes


def test_apply_keeps_copies_in_step_where_a_file_still_has_them(tmp_path: Path) -> None:
    """A case file written before budget_like (bf16_roundtrip's tables copied from bf16's)
    has both written alike."""
    path = tmp_path / "mhc.toml"
    path.write_text(OLD_LAYOUT)
    (case,) = load_case_file(path)
    merged = {"mhc_pre::t": {"bf16": {"worst": {"comb": {"max_err_ratio": 2.0}}}}}
    calibration.apply(merged, [case], "test seeds")
    doc = tomllib.loads(path.read_text())["t"]["budget"]
    assert doc["bf16"]["comb"]["max_err_ratio"] == doc["bf16_roundtrip"]["comb"][
        "max_err_ratio"] == 2.5


OLD_LAYOUT = """\
[t]
op = "mhc_pre"
preset = "v4pro"
shape = { tokens = 4 }
variants = ["bf16", "bf16_roundtrip"]
[t.budget.bf16.comb]
max_err_ratio = 2
[t.budget.bf16_roundtrip.comb]
max_err_ratio = 2
"""


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
