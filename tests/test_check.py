"""One definition of a check (numcheck.check): numerics, the active gates and expectations,
in one result; the same function the pytest item, the self-test and calibration call."""

from __future__ import annotations

from dataclasses import replace

import pytest

from numcheck.cases import Case, Expectation, load_case_file
from numcheck.check import cannot_run, run_check, settle_expected
from numcheck.check.against_golden import run_numerics
from numcheck.check.make_golden import fresh_golden
from numcheck.numerics.verdict import Violation
from numcheck.ops.registry import get_op

TINY = """
[tiny-mhc]
op = "mhc_pre"
shape = { tokens = 8, hidden = 64 }
variants = ["bf16", "bf16_roundtrip", "tf32"]
"""
OP = get_op("mhc_pre")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Case:
    path = tmp_path_factory.mktemp("cases") / "mhc.toml"
    path.write_text(TINY)
    (case,) = load_case_file(path)
    return case
ROUND_TRIP = "casts.round_trips"


def violation(key: str) -> Violation:
    output, metric = key.split(".")
    return Violation(output, metric, 1.0, 0.0)


def test_numerics_only_is_the_numerics_check(tiny: Case) -> None:
    golden, inputs = fresh_golden(OP, tiny)
    result = run_check(OP, tiny, "bf16", "cpu", inputs, golden)
    alone = run_numerics(OP, tiny, "bf16", "cpu", golden, inputs)
    assert result.passed and alone.passed
    assert [s.metrics for s in result.seeds] == [s.metrics for s in alone.seeds]
    assert result.overhead is None and result.perf is None
    assert result.settled is None


def test_the_cast_gate_catches_the_round_trip_in_the_same_result(tiny: Case) -> None:
    golden, inputs = fresh_golden(OP, tiny)
    result = run_check(OP, tiny, "bf16_roundtrip", "cpu", inputs, golden, gates={"casts"})
    assert [v.key for v in result.violations] == [ROUND_TRIP]
    assert result.overhead is not None and result.overhead.ledger.round_trips
    # Explain mode audits the same variant without gating on it.
    explained = run_check(OP, tiny, "bf16_roundtrip", "cpu", inputs, golden, explain=True)
    assert explained.passed and explained.overhead is not None


def test_an_expected_failure_is_settled_in_the_result(tiny: Case) -> None:
    expecting = replace(tiny, expect={"bf16_roundtrip": Expectation((ROUND_TRIP,), "seed")})
    golden, inputs = fresh_golden(OP, expecting)
    caught = run_check(OP, expecting, "bf16_roundtrip", "cpu", inputs, golden, gates={"casts"})
    assert caught.settled is not None and caught.settled.xfail
    assert caught.settled.caught == (ROUND_TRIP,)
    # With the cast gate off, the expectation is not live: an ordinary (passing) check.
    ordinary = run_check(OP, expecting, "bf16_roundtrip", "cpu", inputs, golden)
    assert ordinary.settled is None and ordinary.passed


def test_keep_outputs_keeps_each_seeds_outputs_on_the_cpu(tiny: Case) -> None:
    golden, inputs = fresh_golden(OP, tiny)
    result = run_check(OP, tiny, "tf32", "cpu", inputs, golden, keep_outputs=True)
    (seed,) = [s for s in result.seeds if s.seed == tiny.seeds[0]]
    assert seed.outputs is not None and set(seed.outputs) == set(OP.outputs)
    assert run_check(OP, tiny, "tf32", "cpu", inputs, golden).seeds[0].outputs is None


def test_a_check_with_numerics_needs_its_golden(tiny: Case) -> None:
    _, inputs = fresh_golden(OP, tiny)
    with pytest.raises(ValueError, match="needs its golden"):
        run_check(OP, tiny, "bf16", "cpu", inputs, None)


def always(gate: str) -> bool:
    return True


def test_settle_caught_missed_and_ordinary() -> None:
    expected = Expectation(("casts.round_trips", "perf.speedup_min"), "planted")
    both = settle_expected(expected, [violation("casts.round_trips"),
                                      violation("perf.speedup_min")], always)
    assert both is not None and both.xfail and both.missed == ()
    # The perf gate ran and did not catch it: strict, so the check fails (XPASS).
    half = settle_expected(expected, [violation("casts.round_trips")], always)
    assert half is not None and not half.xfail and half.missed == ("perf.speedup_min",)
    # The perf gate did not run: only the live expectations count.
    live = settle_expected(expected, [violation("casts.round_trips")], lambda g: g == "casts")
    assert live is not None and live.xfail
    # A violation the expectation does not name: a failure that says it fell outside.
    outside = settle_expected(expected, [violation("casts.round_trips"),
                                         violation("perf.speedup_min"),
                                         violation("y.rel_fro")], always)
    assert outside is not None and not outside.xfail and outside.missed == ()
    assert [v.key for v in outside.outside] == ["y.rel_fro"]
    assert outside.expected == "metrics casts.round_trips, perf.speedup_min"
    # No expected gate active and nothing failed: an ordinary check.
    assert settle_expected(expected, [], lambda g: False) is None


def test_cannot_run_says_why_a_check_is_skipped(tiny: Case) -> None:
    assert cannot_run(OP, tiny, "bf16", "cpu") is None
    cpu_only = replace(tiny, devices=("cpu",))
    assert cannot_run(OP, cpu_only, "bf16", "cuda") == (
        "case 'tiny-mhc' does not run on cuda (its devices: cpu)")
    gpu_only = replace(OP.variants["bf16"], devices=("cuda",))
    op = replace(OP, variants={**OP.variants, "bf16": gpu_only})
    assert cannot_run(op, tiny, "bf16", "cpu") == "variant 'bf16' runs on cuda only"
    missing = replace(gpu_only, unavailable="needs triton (pip install triton)")
    op = replace(OP, variants={**OP.variants, "bf16": missing})
    assert cannot_run(op, tiny, "bf16", "cpu") == "variant 'bf16': needs triton (pip install triton)"
    perf_only = replace(tiny, perf_only=True)
    assert cannot_run(OP, perf_only, "bf16", "cpu", perf_switch="--numcheck-perf") == (
        "perf-only case 'tiny-mhc' (no golden): runs with --numcheck-perf")
    assert cannot_run(OP, perf_only, "bf16", "cpu", gates=("perf",)) is None
