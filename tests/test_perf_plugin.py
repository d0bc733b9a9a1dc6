"""--numcheck-perf through pytester: the speedup gate, its messages, pytest-benchmark records."""

from __future__ import annotations

import json

import pytest

# In-process pytester runs drop the modules imported during a run; scipy's C extensions
# cannot be loaded twice, so the bootstrap's scipy is imported once, here, up front.
import scipy.stats  # noqa: F401
from test_plugin import CONFTEST

# Tiny shapes and few rounds: these tests check the plumbing and the messages, never speed.
# "slowed" (tests/planted.py) is the reference four times over plus a 30 ms stall.
CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
variants = [{variants}]
{extra}
[tiny-mhc.perf]
rounds = 6
warmup = 1
{perf}
"""


def project(pytester: pytest.Pytester, variants: str = '"slowed"', perf: str = "",
            extra: str = "", regen: bool = True) -> None:
    pytester.makeini("[pytest]\naddopts = --numcheck-device cpu -p no:cacheprovider\n")
    (pytester.path / "cases").mkdir(exist_ok=True)
    (pytester.path / "cases" / "mhc.toml").write_text(
        CASE.format(variants=variants, perf=perf, extra=extra)
    )
    pytester.makeconftest(CONFTEST)
    if regen:
        pytester.runpytest("--numcheck", "--numcheck-regen")


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest-benchmark disables itself in xdist workers (by this variable); the inner
    # pytester runs are not workers even when this suite runs under -n.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)


SLOWED_GATED = "[tiny-mhc.perf.slowed]\nspeedup_min = { cpu = 1.0 }"


def test_slowed_variant_fails_its_speedup_gate(pytester: pytest.Pytester) -> None:
    project(pytester, perf=SLOWED_GATED)
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "numcheck FAIL mhc_pre::tiny-mhc::slowed[[]cpu[]]",
            ("  worst: perf.speedup_min = * < budget 1: speedup 0.*x [[]0.*, 0.*[]] (95% CI, "
             "6 rounds): slower than required: even the upper bound 0.* is below 1; "
             "reference median * ms, variant median * ms (IQR *%), cpu time.perf_counter"),
            "",
            "  case:        cases/mhc.toml [[]tiny-mhc[]]",
            ("  reproduce:   pytest --numcheck --numcheck-device cpu "
             "'cases/mhc.toml::tiny-mhc::slowed[[]cpu[]]'"),
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*numcheck perf (median device time per call*",
            "case*variant*device*median*IQR*ref median*speedup [[]CI[]]*TFLOP/s*GB/s*% floor*gate",
            "mhc_pre::tiny-mhc*fp32*cpu*ms*not gated",
            "mhc_pre::tiny-mhc*slowed*cpu*ms*fail (min 1)",
        ]
    )


@pytest.mark.filterwarnings("ignore:Not saving anything")
def test_without_the_perf_flag_nothing_is_timed(pytester: pytest.Pytester) -> None:
    project(pytester, perf=SLOWED_GATED)
    result = pytester.runpytest("--numcheck", "--benchmark-json", "bench.json")
    result.assert_outcomes(passed=2)
    assert "numcheck perf" not in result.stdout.str()
    bench = pytester.path / "bench.json"  # pytest-benchmark: nothing was run
    # Depending on pytest-benchmark's version: no file, an empty file (seen on the H200's
    # pytest-benchmark), or a JSON document without benchmarks.
    text = bench.read_text() if bench.exists() else ""
    assert not text.strip() or json.loads(text)["benchmarks"] == []


def test_device_class_without_threshold_is_reported_not_gated(pytester: pytest.Pytester) -> None:
    project(pytester, perf="[tiny-mhc.perf.slowed]\nspeedup_min = { cuda = 1.1 }")
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["mhc_pre::tiny-mhc*slowed*cpu*not gated"])


def test_known_slow_variant_is_a_strict_xfail_of_the_perf_gate(pytester: pytest.Pytester) -> None:
    expect = 'expect.slowed = { fails = ["perf.speedup_min"], reason = "planted stall" }'
    project(pytester, perf=SLOWED_GATED, extra=expect)
    result = pytester.runpytest("--numcheck", "--numcheck-perf", "-rx")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*expected failure (perf.speedup_min): planted stall*"])
    # Without the flag the perf gate is inactive: an ordinary (passing) numerics check.
    pytester.runpytest("--numcheck").assert_outcomes(passed=2)


def test_benchmark_json_carries_device_times_and_extra_info(pytester: pytest.Pytester) -> None:
    project(pytester, variants='"tf32", "slowed"')
    result = pytester.runpytest("--numcheck", "--numcheck-perf", "--benchmark-json", "bench.json")
    result.assert_outcomes(passed=3)
    data = json.loads((pytester.path / "bench.json").read_text())
    by_name = {b["fullname"]: b for b in data["benchmarks"]}
    assert set(by_name) == {f"cases/mhc.toml::tiny-mhc::{v}[cpu]" for v in ("fp32", "tf32", "slowed")}
    slowed = by_name["cases/mhc.toml::tiny-mhc::slowed[cpu]"]
    assert slowed["group"] == "mhc_pre::tiny-mhc"
    assert slowed["stats"]["rounds"] == 6 and len(slowed["stats"]["data"]) == 6
    assert slowed["options"]["timer"] == "time.perf_counter"
    info = slowed["extra_info"]
    assert info["median_s"] == pytest.approx(slowed["stats"]["median"])
    assert info["speedup_low"] <= info["speedup"] <= info["speedup_high"] < 1
    for key in ("device", "torch", "flops", "min_bytes", "tflops", "gbps", "pct_of_floor",
                "confidence", "gate", "reference_median_s", "peaks"):
        assert key in info, key
    assert info["device"] == "cpu" and info["gate"] == "not gated"


def test_benchmark_autosave_and_compare(pytester: pytest.Pytester) -> None:
    project(pytester, variants='"tf32"')
    first = pytester.runpytest("--numcheck", "--numcheck-perf", "--benchmark-autosave")
    first.assert_outcomes(passed=2)
    saved = list((pytester.path / ".benchmarks").rglob("*.json"))
    assert len(saved) == 1
    second = pytester.runpytest("--numcheck", "--numcheck-perf", "--benchmark-compare")
    second.assert_outcomes(passed=2)
    out = second.stdout.str()  # rows of the saved run (0001_...) next to this one (NOW)
    assert "tf32[cpu] (NOW)" in out and "tf32[cpu] (0001_" in out


def test_perf_only_case_skips_without_the_flag_and_needs_no_golden(
    pytester: pytest.Pytester,
) -> None:
    project(pytester, variants='"tf32"', extra="perf_only = true", regen=False)
    result = pytester.runpytest("--numcheck", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*perf-only case 'tiny-mhc' (no golden): runs with --numcheck-perf"])
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=2)
    assert not (pytester.path / "goldens").exists()


def test_perf_flag_needs_numcheck(pytester: pytest.Pytester) -> None:
    project(pytester, regen=False)
    result = pytester.runpytest("--numcheck-perf")
    result.stderr.fnmatch_lines(["*--numcheck-perf only works together with --numcheck*"])



@pytest.mark.parametrize(
    ("device", "perf", "explain", "gates"),
    [
        ("cuda", False, False, {"casts", "kernels"}),
        ("cuda", True, False, {"casts", "perf"}),  # no profiler next to the timers
        ("cpu", True, False, {"casts", "perf"}),
        ("cuda", False, True, set()),
        ("cuda", True, True, {"perf"}),
    ],
)
def test_gates_a_run_measures(device: str, perf: bool, explain: bool, gates: set[str]) -> None:
    from numcheck.plugin.session import run_gates

    assert run_gates(device, perf=perf, explain=explain) == gates


def test_timed_checks_carry_their_speedup_into_the_report(pytester: pytest.Pytester) -> None:
    project(pytester, perf=SLOWED_GATED)
    pytester.runpytest("--numcheck", "--numcheck-perf", "--numcheck-report", "r.json")
    records = {r["variant"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    timing = records["slowed"]["timing"]
    assert timing["ci_low"] <= timing["speedup"] <= timing["ci_high"] < 1.0
    assert (timing["gate"], timing["speedup_min"]) == ("fail", 1.0)
    assert records["fp32"]["timing"]["gate"] == "not gated"
