"""A check's first call of its variant: timed apart, announced when long, never timed by the
perf gate. Fake clocks and events: nothing here depends on how fast the machine is."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest

from numcheck.check.firstcall import FirstCallWatch, first_call_lines
from tests.caseproject import NO_CACHE, PLANTED, case_project, write_goldens


def clock(*values: float):  # type: ignore[no-untyped-def]
    it = iter(values)
    return lambda: next(it)


def test_a_long_first_call_is_reported_with_its_time() -> None:
    lines: list[str] = []
    with FirstCallWatch("op::case::v[cuda]", lines.append, note_after_s=5,
                        clock=clock(100.0, 131.4)) as watch:
        pass
    assert watch.seconds == pytest.approx(31.4)
    assert lines == ["numcheck: op::case::v[cuda]: first call took 31.4 s (compile and "
                     "warm-up; never timed)"]


def test_a_short_first_call_prints_nothing_and_keeps_its_figure() -> None:
    lines: list[str] = []
    with FirstCallWatch("op::case::v[cpu]", lines.append, note_after_s=5,
                        clock=clock(0.0, 0.25)) as watch:
        pass
    assert watch.seconds == 0.25 and lines == []


def test_a_first_call_still_running_is_announced_while_it_runs() -> None:
    """The line comes from a timer thread while the call is still inside: a run compiling
    kernels never looks hung. The 'call' here waits for the announcement itself."""
    lines: list[str] = []
    arrived = threading.Event()

    def progress(line: str) -> None:
        lines.append(line)
        arrived.set()

    with FirstCallWatch("op::case::v[cuda]", progress, note_after_s=0.0,
                        clock=clock(0.0, 0.5)):
        assert arrived.wait(timeout=60), "the still-running line never came"
        assert lines == ["numcheck: op::case::v[cuda]: first call still running after 0 s "
                         "(compiling kernels?)"]
    assert lines[-1] == ("numcheck: op::case::v[cuda]: first call took 0.5 s (compile and "
                         "warm-up; never timed)")


def test_on_the_cpu_a_long_first_call_says_nothing_compiles() -> None:
    lines: list[str] = []
    arrived = threading.Event()

    def progress(line: str) -> None:
        lines.append(line)
        arrived.set()

    with FirstCallWatch("op::case::v[cpu]", progress, note_after_s=0.0, clock=clock(0.0, 0.5),
                        device="cpu"):
        assert arrived.wait(timeout=60), "the still-running line never came"
    assert lines == [
        "numcheck: op::case::v[cpu]: first call still running after 0 s (on the CPU nothing "
        "compiles: the variant itself is slow here)",
        "numcheck: op::case::v[cpu]: first call took 0.5 s (warm-up; never timed)"]
    assert not any("compil" in ln for ln in first_call_lines(
        [SimpleNamespace(id="a::c::v[cpu]", first_call_s=9.0, device="cpu")], 5))


def test_the_device_is_waited_for_before_the_first_call_ends() -> None:
    events: list[str] = []
    with FirstCallWatch("x", None, clock=clock(0.0, 1.0),
                        sync=lambda: events.append("sync")) as watch:
        events.append("call")
    assert events == ["call", "sync"] and watch.seconds == 1.0


def test_a_first_call_that_raises_still_keeps_its_time_and_cancels_its_timer() -> None:
    lines: list[str] = []
    watch = FirstCallWatch("x", lines.append, note_after_s=3600, clock=clock(0.0, 2.0),
                           sync=lambda: pytest.fail("no sync after a raise"))
    with pytest.raises(RuntimeError), watch:
        raise RuntimeError("kernel failed")
    assert watch.seconds == 2.0 and lines == []
    assert watch._timer is not None and not watch._timer.is_alive()


def test_summary_lines_list_the_slowest_and_those_over_the_threshold() -> None:
    records = [SimpleNamespace(id="a::c::bf16[cuda]", first_call_s=0.012),
               SimpleNamespace(id="a::c::liger[cuda]", first_call_s=31.4),
               SimpleNamespace(id="a::c::fused[cuda]", first_call_s=6.0),
               SimpleNamespace(id="a::c::skipped[cuda]", first_call_s=None)]
    assert first_call_lines(records, 5) == [
        ("numcheck first calls (compile and warm-up; never timed): slowest a::c::liger[cuda] "
         "31.4 s; 2 over 5 s"),
        "  a::c::liger[cuda]  31.4 s",
        "  a::c::fused[cuda]  6.0 s",
    ]
    assert first_call_lines(records[:1], 5) == [
        "numcheck first calls (compile and warm-up; never timed): slowest a::c::bf16[cuda] "
        "12 ms; 0 over 5 s"]
    assert first_call_lines([records[3]]) == []


CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = { tokens = 8, hidden = 64 }
variants = ["bf16"]
"""


def test_the_gate_records_and_summarises_each_first_call(pytester: pytest.Pytester) -> None:
    """Through pytest: with the note threshold at 0 every first call is announced; the
    summary and the JSON report carry the figure."""
    case_project(pytester, {"mhc.toml": CASE}, conftest=PLANTED, addopts=NO_CACHE,
                 ini="numcheck_first_call_note_s = 0\n")
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-report", "out.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        # a CPU compiles nothing: no "compile" is said there (issue 44)
        "numcheck: mhc_pre::tiny-mhc::bf16[[]cpu[]]: first call took * (warm-up; never timed)",
        "numcheck first calls (warm-up; never timed): slowest * 2 over 0 s",
    ])
    records = json.loads((pytester.path / "out.json").read_text())["records"]
    assert {r["variant"]: r["first_call_s"] > 0 for r in records} == {"fp32": True, "bf16": True}


def test_a_bad_first_call_threshold_is_a_usage_error(pytester: pytest.Pytester) -> None:
    case_project(pytester, {"mhc.toml": CASE}, addopts="",
                 ini="numcheck_first_call_note_s = soon\n")
    result = pytester.runpytest("--numcheck", "--numcheck-device", "cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: numcheck_first_call_note_s = 'soon': expected a number "
                                 "of seconds >= 0 (e.g. numcheck_first_call_note_s = 5)"])


def test_a_perf_only_check_makes_its_first_call_before_any_timing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No numerics come first in a perf-only check: its first call is made, and timed apart,
    before the speed gate's timer exists, so compile time never reaches a timed sample."""
    from numcheck.cases import load_case_file
    from numcheck.check import run_check
    from numcheck.check.run import CaseInputs
    from numcheck.ops import mhc
    from numcheck.ops.registry import Variant, add_variant, get_op, isolated
    from numcheck.perf import timing
    from tests.faketimer import factory

    events: list[str] = []

    def counted(inputs, params):  # type: ignore[no-untyped-def]
        events.append("call")
        return mhc.bf16(inputs, params)

    def make(request):  # type: ignore[no-untyped-def]
        events.append("timer")
        return factory({"counted": 1.2})(request)

    path = tmp_path / "perf.toml"
    path.write_text('[p]\nop = "mhc_pre"\nshape = { tokens = 8, hidden = 64 }\n'
                    'devices = ["cpu"]\nperf_only = true\nvariants = ["counted"]\n'
                    '[p.perf]\nrounds = 4\nwarmup = 0\n')
    with isolated(), timing.override(make):
        add_variant("mhc_pre", Variant("counted", counted, "bf16"))
        (case,) = load_case_file(path)
        op = get_op("mhc_pre")
        result = run_check(op, case, "counted", "cpu", CaseInputs(op, case), None,
                           gates={"perf"})
    # The first call (timed apart), measure_perf's own check that the variant runs, then
    # the timer: every timed sample comes after both.
    assert events[:3] == ["call", "call", "timer"]
    assert result.first_call_s is not None and result.first_call_s > 0
    assert result.perf is not None
