"""Where a run executes its checks (numcheck.execute.executor) and what the checks of a case
share (numcheck.execute.case_cache): the seam the pytest items call, tested without pytest's
machinery. Everything an item reads back is on the CheckResult, the obtained file included;
a calibration's item sends a measure request through the same seam and reads back payloads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from safetensors import safe_open

from numcheck.calibrate.measuring import MeasureRequest, Measuring
from numcheck.calibrate.payloads import CheckRef, NumericsPayload
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



def measure_request(case: Case, variant: str, how: Measuring, **kwargs: frozenset[str]
                    ) -> MeasureRequest:
    check = CheckRef(op=case.op, case=case.id, source="cases/mhc.toml", path=str(case.source),
                     device="cpu", nodeid=f"cases/mhc.toml::{case.id}::{variant}[cpu]")
    return MeasureRequest(case, variant, check, how, **kwargs)


def test_a_measure_request_is_measured_on_references_made_once_for_the_case(
        tmp_path: Path, tiny: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calibration through the executor: no golden read or written (its references are made
    on the spot, once per seed for all the case's variants), payloads back, never a verdict."""
    from numcheck.check import make_golden

    made: list[tuple[int, ...]] = []
    real = make_golden.fresh_golden

    def counted(op: object, case: Case, device: str) -> object:
        made.append(case.seeds)
        return real(op, case, device)  # type: ignore[arg-type]

    monkeypatch.setattr(make_golden, "fresh_golden", counted)
    cache = CaseCache(tmp_path / "goldens", "cpu")
    run = executor(tmp_path, cache)
    how = Measuring(fresh=1, first_seed=1000)
    # bf16_roundtrip fails its gate (the cast ledger): measured all the same.
    answers = [run(measure_request(tiny, v, how)) for v in ("bf16", "bf16_roundtrip")]
    assert not (tmp_path / "goldens").exists()
    for variant, answer in zip(("bf16", "bf16_roundtrip"), answers, strict=True):
        assert isinstance(answer, list) and len(answer) == 1
        (payload,) = answer
        assert isinstance(payload, NumericsPayload) and payload.own_check
        assert (payload.variant, payload.seeds) == (variant, (*tiny.seeds, 1000))
        assert payload.table["y"]["rel_fro"].value > 0
    assert made == [(seed,) for seed in (*tiny.seeds, 1000)]  # once per seed, not per variant


def test_a_pool_member_with_a_check_of_its_own_is_measured_there(tmp_path: Path,
                                                                 tiny: Case) -> None:
    run = executor(tmp_path, CaseCache(tmp_path / "goldens", "cpu"))
    how = Measuring(fresh=0, first_seed=1000, pools={"bf16": ("bf16", "bf16_roundtrip")})
    alone = run(measure_request(tiny, "bf16", how))
    assert isinstance(alone, list)
    assert [(p.variant, p.own_check) for p in alone] == [("bf16", True),
                                                        ("bf16_roundtrip", False)]
    assert alone[0].pool == ("bf16", "bf16_roundtrip")  # type: ignore[union-attr]
    checked = run(measure_request(tiny, "bf16", how, checked=frozenset({"bf16_roundtrip"})))
    assert isinstance(checked, list)
    assert [p.variant for p in checked] == ["bf16"]
