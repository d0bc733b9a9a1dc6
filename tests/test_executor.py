"""Where a run executes its checks (numcheck.execute.executor) and what the checks of a case
share (numcheck.execute.case_cache): the seam the pytest items call, tested without pytest's
machinery. Everything an item reads back is on the CheckResult, the obtained file included."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from safetensors import safe_open

from numcheck.cases import Case, Expectation, load_case_file
from numcheck.execute.case_cache import CaseCache
from numcheck.execute.executor import CheckRequest, InProcess, failed_outside_expectation
from numcheck.goldens.files import GoldenMissing
from numcheck.ops.registry import get_op

TINY = """
[tiny-mhc]
op = "mhc_pre"
shape = { tokens = 8, hidden = 64 }
variants = ["bf16", "bf16_roundtrip"]
"""
REGEN = "pytest --numcheck --numcheck-regen cases/mhc.toml::tiny-mhc"


@pytest.fixture
def tiny(tmp_path: Path) -> Case:
    path = tmp_path / "cases" / "mhc.toml"
    path.parent.mkdir()
    path.write_text(TINY)
    (case,) = load_case_file(path)
    return case


def executor(root: Path, cache: CaseCache) -> InProcess:
    return InProcess(cache, gates={"casts"}, obtained_dir=root / "obtained", root=root)


def request(case: Case, variant: str) -> CheckRequest:
    return CheckRequest(case, variant, "cpu", regen_hint=REGEN)


def test_a_missing_golden_is_raised_for_every_check_of_the_case(tmp_path: Path,
                                                                 tiny: Case) -> None:
    run = executor(tmp_path, CaseCache(tmp_path / "goldens", "cpu"))
    with pytest.raises(GoldenMissing, match="--numcheck-regen") as first:
        run(request(tiny, "bf16"))
    with pytest.raises(GoldenMissing) as second:
        run(request(tiny, "bf16_roundtrip"))
    assert second.value is first.value  # read once for the case, refused once


def test_a_check_runs_against_the_golden_regenerated_once(tmp_path: Path, tiny: Case) -> None:
    cache = CaseCache(tmp_path / "goldens", "cpu", regen=True)
    run = executor(tmp_path, cache)
    result = run(request(tiny, "bf16"))
    op = get_op(tiny.op)
    path = cache.path(op, tiny)
    assert path.is_file() and cache.regenerated == {path: True}
    assert cache.regen_notes[path] == "created"
    assert result.passed and result.obtained is None
    assert result.plots is not None  # what the report keeps beyond the verdict
    assert cache.inputs(op, tiny) is cache.inputs(op, tiny)  # made once for the case
    # The next check of the case reads the same golden: no second regeneration.
    stamp = path.stat().st_mtime_ns
    assert run(request(tiny, "fp32")).passed and path.stat().st_mtime_ns == stamp


def test_a_failed_check_keeps_its_outputs_and_an_expected_one_does_not(tmp_path: Path,
                                                                      tiny: Case) -> None:
    cache = CaseCache(tmp_path / "goldens", "cpu", regen=True)
    run = executor(tmp_path, cache)
    failed = run(request(tiny, "bf16_roundtrip"))  # the cast ledger's round trip
    assert not failed.passed and failed_outside_expectation(failed)
    assert failed.obtained == (tmp_path / "obtained" / "mhc_pre" /
                               "tiny-mhc.bf16_roundtrip.obtained.safetensors")
    with safe_open(str(failed.obtained), "pt") as f:
        meta = f.metadata()
    assert (meta["variant"], meta["reason"]) == ("bf16_roundtrip", failed.worst().describe())
    assert meta["golden"] == "goldens/mhc_pre/tiny-mhc.safetensors"  # relative to the root
    # The same variant where its case expects the round trip: an xfail keeps nothing.
    expecting = replace(tiny, expect={"bf16_roundtrip": Expectation(("casts.round_trips",),
                                                                     "planted")})
    caught = run(request(expecting, "bf16_roundtrip"))
    assert caught.settled is not None and caught.settled.xfail
    assert not failed_outside_expectation(caught) and caught.obtained is None

