"""Obtained files: a failed check's outputs, kept for diffing; docs/usage.md's "Debug a failure"."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from numcheck.goldens.obtained import write_obtained
from numcheck.report.records import load_report
from tests.caseproject import ROOT, golden, make_project, write_goldens

USAGE = ROOT / "docs" / "usage.md"
OBTAINED = Path(".numcheck") / "obtained" / "indexer" / "tiny.no_kv_scale.obtained.safetensors"


def usage_debug_snippet() -> str:
    """The Python block of docs/usage.md's "Debug a failure" section, exactly as written."""
    text = USAGE.read_text()
    section = text.split("## Debug a failure", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "docs/usage.md's 'Debug a failure' section has no python block"
    return match.group(1)


def test_failed_check_keeps_its_outputs_and_the_documented_lines_show_the_worst(
    pytester: pytest.Pytester,
) -> None:
    make_project(pytester, variants='"no_kv_scale", "tf32"', planted=True)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-report", "r.json")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([f"  obtained:    {OBTAINED}"])
    path = pytester.path / OBTAINED
    assert path.exists()
    # Only the failure: passing checks keep nothing.
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    # Git ignores the folder numcheck made.
    assert (pytester.path / ".numcheck" / "obtained" / ".gitignore").read_text().splitlines()[-1] \
        == "*"
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
        assert sorted(f.keys()) == ["s0/logits", "s0/topk"]
    with safe_open(str(golden(pytester)), "pt") as f:
        golden_meta = f.metadata()
    assert (meta["op"], meta["case"], meta["variant"], meta["device"]) == (
        "indexer", "tiny", "no_kv_scale", "cpu")
    assert json.loads(meta["seeds"]) == [0]
    assert golden_meta["fingerprint"].strip('"') == meta["fingerprint"]
    assert set(json.loads(meta["input_fingerprints"])) == {"0"}

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(usage_debug_snippet(), {})  # noqa: S102  (the doc's own lines, in the project)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5
    errors = [float(line.rsplit("|error| ", 1)[1]) for line in lines]
    assert errors == sorted(errors, reverse=True)
    record = next(r for r in load_report(pytester.path / "r.json").records
                  if r.variant == "no_kv_scale")
    assert errors[0] == pytest.approx(record.metrics["logits"]["max_abs"], rel=1e-2)


def test_obtained_folder_is_the_users_choice(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"no_kv_scale"', planted=True)
    pytester.runpytest("--numcheck", "--numcheck-regen")  # fails too: writes the default
    shutil.rmtree(pytester.path / ".numcheck")
    (pytester.path / "mine").mkdir()
    result = pytester.runpytest("--numcheck", "--numcheck-obtained", "mine/obtained")
    result.assert_outcomes(passed=1, failed=1)
    assert (pytester.path / "mine/obtained/indexer/tiny.no_kv_scale.obtained.safetensors").exists()
    assert not (pytester.path / ".numcheck").exists()
    assert not (pytester.path / "goldens" / "indexer" / "tiny.no_kv_scale.obtained.safetensors"
                ).exists()


def test_an_existing_folder_gets_no_gitignore(tmp_path: Path) -> None:
    path = write_obtained(
        tmp_path, op="op", case="c", variant="v", device="cpu",
        outputs=[(3, {"y": torch.ones(2)})], fingerprints={3: "ab"}, case_fingerprint="cd",
        golden="goldens/op/c.safetensors", reason="y.max_abs = 1 > budget 0 (seed 3)",
    )
    assert path == tmp_path / "op" / "c.v.obtained.safetensors"
    assert not (tmp_path / ".gitignore").exists()
    with safe_open(str(path), "pt") as f:
        assert f.metadata()["reason"].startswith("y.max_abs")
        assert torch.equal(f.get_tensor("s3/y"), torch.ones(2))
