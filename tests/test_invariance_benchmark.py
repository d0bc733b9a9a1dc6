"""benchmarks/reliability/invariance.py on the CPU (the H200 run is the lead's), and the
gpu_regression step that runs it: what it measures, the keys it supports, and that a key on
that fails turns the step off."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import gpu_regression as reg
from benchmarks.reliability import invariance as bench
from numcheck.ops import registry
from numcheck.ops.registry import Variant
from tests import planted_invariance

CASES = """
[tiny-idx]
op = "indexer"
shape = { batch = 3, max_context = 128, heads = 4, head_dim = 32, index_topk = 8, next_n = 2 }
variants = ["bf16"]
deterministic = true
batch_invariant = true

[tiny-mhc]
op = "mhc_pre"
shape = { tokens = 8, hidden = 64 }
variants = ["bf16"]
deterministic = true
"""


def test_it_measures_every_variant_and_says_which_keys_hold(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "tiny.toml").write_text(CASES)
    out = tmp_path / "inv.json"
    rc = bench.main(["--device", "cpu", "--runs", "2", "--requests", "all", "--cases",
                     str(tmp_path / "cases"), "--json", str(out)])
    data = json.loads(out.read_text())
    rows = {(r["case"], r["variant"]): r for r in data["rows"]}
    assert set(rows) == {(c, v) for c in ("indexer::tiny-idx", "mhc_pre::tiny-mhc")
                         for v in ("fp32", "bf16")}
    idx = rows[("indexer::tiny-idx", "bf16")]
    assert idx["runs_differing"] == 0 and idx["requests"] == [0, 1, 2]
    assert idx["requests_differing"] == 0 and idx["deterministic_key"] == "on"
    # mHC's requests are its 8 tokens, all measured though the case turns nothing on.
    mhc = rows[("mhc_pre::tiny-mhc", "fp32")]
    assert mhc["requests"] == list(range(8)) and mhc["batch_invariant_key"] == "off"
    # The indexer holds both on the CPU; the keys it supports are printed to paste.
    text = capsys.readouterr().out
    assert ('indexer::tiny-idx: deterministic = { variants = ["fp32", "bf16"], devices = '
            '["cpu"] }') in text
    assert rc == (1 if any(r["broken"] for r in data["rows"]) else 0)
    assert not any(r["broken"] for r in data["rows"] if r["case"] == "indexer::tiny-idx")


def test_a_key_on_that_fails_makes_it_exit_1(tmp_path: Path) -> None:
    # The planted split-K chosen by the batch size (tests/planted_invariance.py), held to
    # batch invariance by its case: the measurement finds it and the run exits 1.
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "tiny.toml").write_text(
        '[tiny-mhc]\nop = "mhc_pre"\nshape = { tokens = 8, hidden = 64 }\n'
        'variants = ["splitk_by_batch"]\nbatch_invariant = ["splitk_by_batch"]\n')
    out = tmp_path / "inv.json"
    with registry.isolated():
        fn, precision, _ = planted_invariance.PLANTED["mhc_pre"]["splitk_by_batch"]
        registry.add_variant("mhc_pre", Variant("splitk_by_batch", fn, precision))
        rc = bench.main(["--device", "cpu", "--runs", "2", "--cases", str(tmp_path / "cases"),
                         "--json", str(out)])
    rows = {r["variant"]: r for r in json.loads(out.read_text())["rows"]}
    assert rc == 1 and rows["splitk_by_batch"]["broken"]
    assert rows["splitk_by_batch"]["requests_differing"] == 3
    assert rows["splitk_by_batch"]["runs_differing"] == 0
    assert not rows["fp32"]["broken"]  # measured, but its keys are off


def test_the_regression_step_prints_the_table_and_is_off_when_a_key_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"case": "indexer::c", "variant": "bf16", "device": "cuda", "runs": 10,
             "runs_differing": 0, "requests": [0, 1], "requests_differing": 1,
             "deterministic_key": "on", "batch_invariant_key": "on", "broken": True}]
    data = {"env": {"seconds": 3.0}, "rows": rows}
    spec = next(e for e in reg.EXTRAS if e.name == "invariance")
    fake = replace(spec, command=lambda o, w: [
        sys.executable, "-c", f"import json, pathlib, sys; pathlib.Path({str(w)!r}, "
        f"'invariance.json').write_text(json.dumps({data!r})); sys.exit(1)"])
    monkeypatch.setattr(reg, "EXTRAS", tuple(fake if e.name == "invariance" else e
                                             for e in reg.EXTRAS))
    assert reg.main(["--out", str(tmp_path), "--steps", "invariance", "--device", "cpu"]) == 1
    line = " ".join((tmp_path / "summary.txt").read_text().splitlines()[1].split())
    assert line == ("invariance OFF 0s rc 1: 1 checks, 1 deterministic, 0 batch-invariant "
                    "(3.0 s); keys on that fail here: indexer::c::bf16")
    assert reg.invariance_table(data).splitlines()[1].split() == [
        "indexer::c", "bf16", "0/9", "1/2", "on,", "on"]
