"""--numcheck-perf through pytester: the speedup gate, its messages, pytest-benchmark records."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from numcheck.perf import timing
from tests.caseproject import NO_CACHE, PLANTED, case_project, project_ini, write_goldens
from tests.faketimer import factory

#: Their runs record into pytest-benchmark and read its JSON and table back.
pytestmark = pytest.mark.pytester_keeps("benchmark")

# Tiny shapes, and a fake timer (tests/faketimer.py): these tests check the plumbing and the
# messages, never the machine's speed. Its speedups by variant name:
SPEEDUPS = {"slowed": 0.5, "tf32": 1.3, "bf16": 1.2}
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
    case_project(pytester, {"mhc.toml": CASE.format(variants=variants, perf=perf, extra=extra)},
                 conftest=PLANTED, addopts=NO_CACHE)
    if regen:
        write_goldens(pytester)


@pytest.fixture(autouse=True)
def fake_timer() -> Iterator[list[tuple[str, str, str]]]:
    """Every timer in this module's runs is the fake one; yields the (reference, variant,
    device) pairs it was asked to time."""
    log: list[tuple[str, str, str]] = []
    with timing.override(factory(SPEEDUPS, log=log)):
        yield log


SLOWED_GATED = "[tiny-mhc.perf.slowed]\nspeedup_min = { cpu = 1.0 }"


def test_slowed_variant_fails_its_speedup_gate(pytester: pytest.Pytester) -> None:
    project(pytester, perf=SLOWED_GATED)
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "numcheck FAIL mhc_pre::tiny-mhc::slowed[[]cpu[]]",
            ("  worst: perf.speedup_min = * < budget 1: speedup 0.[45]*x [[]0.4*, 0.5*[]] "
             "(99.38% CI, 9 pairs): slower than required: even the upper bound 0.5* is below "
             "1 (9 pairs in 0.03 s; 99.38% per look, 95% over <= 8 looks); "
             "reference median * ms, variant median * ms (IQR *%), cpu fake"),
            "",
            "  case:        cases/mhc.toml [[]tiny-mhc[]]",
            ("  reproduce:   pytest --numcheck --numcheck-device cpu "
             "'cases/mhc.toml::tiny-mhc::slowed[[]cpu[]]'"),
            "  regenerate:  *",
            # A speed miss: the next step is this GPU model's speed calibration, never the
            # numerics family's.
            ("  next step:   my change made it slower -> fix the variant, then run "
             "'reproduce' with --numcheck-perf"),
            ("               the threshold is not right for this GPU model (cpu) -> measure "
             "cpu's from several runs, never from this one: pytest --numcheck --numcheck-perf "
             "--numcheck-device cpu --numcheck-calibrate-speed=5 "
             "'cases/mhc.toml::tiny-mhc::slowed[[]cpu[]]' (review the proposal, then add "
             "--numcheck-calibrate-write); every perf case at once: python -m numcheck "
             "onboard --only speed (docs/speed.md, \"Setting thresholds\")"),
            "               the machine is noisy or shared -> *",
            "  obtained:*",
        ]
    )
    assert "--numcheck-calibrate-pool" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*numcheck perf (median device time per call*",
            ("case*variant*device*timer*median*IQR*ref median*speedup [[]CI[]]*pairs*timed*"
             "TFLOP/s*GB/s*% floor*gate"),
            "mhc_pre::tiny-mhc*fp32*cpu*fake*ms*x1*s*not gated*",
            "mhc_pre::tiny-mhc*slowed*cpu*fake*ms*0.[45]* [[]0.4*, 0.5*[]]*9x1*s*fail (min 1)",
            "machine noise cpu: A/A *x [[]*[]] (fake, * pairs, reference of mhc_pre::tiny-mhc)",
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
    project(pytester, perf="[tiny-mhc.perf.slowed]\nspeedup_min = { H200 = 1.1 }")
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["mhc_pre::tiny-mhc*slowed*cpu*not gated (no min for cpu)",
                                 "*numcheck perf: cpu has no speedup_min in 1 timed check(s) "
                                 "that have one for H200: reported, not gated.*"])


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
    info = slowed["extra_info"]
    assert slowed["stats"]["rounds"] == info["rounds"] == len(slowed["stats"]["data"]) >= 9
    assert slowed["options"]["timer"] == "fake"
    assert info["median_s"] == pytest.approx(slowed["stats"]["median"])
    assert info["speedup_low"] <= info["speedup"] <= info["speedup_high"] < 1
    for key in ("device", "torch", "flops", "min_bytes", "tflops", "gbps", "pct_of_floor",
                "confidence", "gate", "reference_median_s", "peaks", "looks", "stopped",
                "calls_per_sample", "lock_wait_s", "noise"):
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
    result.stdout.fnmatch_lines(["2 perf-only checks run only with --numcheck-perf (1 case; skipped)",
                                 ("*perf-only case 'tiny-mhc' runs only with --numcheck-perf "
                                 "(it only times the variants at a production shape; no golden)")])
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
    from numcheck.plugin.runconfig import run_gates

    # Determinism and batch invariance always: a case's keys decide what they hold.
    invariance = {"determinism", "batch_invariance"}
    assert run_gates(device, perf=perf, explain=explain) == gates | invariance


def test_timed_checks_carry_their_speedup_into_the_report(pytester: pytest.Pytester) -> None:
    project(pytester, perf=SLOWED_GATED)
    pytester.runpytest("--numcheck", "--numcheck-perf", "--numcheck-report", "r.json")
    records = {r["variant"]: r for r in json.loads((pytester.path / "r.json").read_text())["records"]}
    timing = records["slowed"]["timing"]
    assert timing["ci_low"] <= timing["speedup"] <= timing["ci_high"] < 1.0
    assert (timing["gate"], timing["speedup_min"]) == ("fail", 1.0)
    assert (timing["timer"], timing["stopped"], timing["looks"]) == ("fake", "decided", 1)
    assert timing["confidence"] == 0.95 and timing["look_confidence"] == pytest.approx(0.99375)
    assert timing["lock_wait_s"] >= 0 and timing["numerics_lock_wait_s"] >= 0
    assert timing["noise"]["aa_ci_low"] <= 1.0 <= timing["noise"]["aa_ci_high"]
    assert records["fp32"]["timing"]["gate"] == "not gated"
    env = json.loads((pytester.path / "r.json").read_text())["environment"]
    assert env["device_lock"] is True and env["gpu_sharing"] == {}
    assert env["lock_wait_s"] >= 0 and env["perf_noise"][0]["timer"] == "fake"


def test_undecided_at_the_cap_fails_and_says_what_to_change(pytester: pytest.Pytester) -> None:
    # bf16 at 1.2x against a threshold of 1.2 with 5% noise: no interval can leave it.
    project(pytester, variants='"bf16"',
            perf="max_time_s = 0.1\n[tiny-mhc.perf.bf16]\nspeedup_min = { cpu = 1.2 }")
    with timing.override(factory(SPEEDUPS, noise=0.05)):
        result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        ("  worst: perf.speedup_undecided = * < budget 1.2: speedup 1.[12]*x [[]1.1*, 1.2*[]] "
         "(99.38% CI, * pairs): undecided at the time cap (max_time_s = 0.1): the interval "
         "[[]1.1*, 1.2*[]] still contains the threshold 1.2 (* pairs in 0.* s; 99.38% per "
         "look, 95% over <= 8 looks). Fix: raise max_time_s (or max_looks) in the case's "
         "[[]perf[]] table, time with CUDA-graph replay (cuda_graph = true) and quiet the "
         "machine, or move speedup_min away from the measured 1.[12]*x*"),
    ])
    result.stdout.fnmatch_lines(["*bf16*cpu*fake*undecided (min 1.2)"])


def test_an_ungated_check_too_noisy_on_this_machine_says_so(pytester: pytest.Pytester) -> None:
    project(pytester, variants='"tf32"', perf="max_time_s = 0.05")
    with timing.override(factory(SPEEDUPS, noise=0.3)):
        result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        ("*tf32*cpu*fake*too noisy: [[]*, *[]]*not gated (too noisy on this machine)"),
    ])
    assert "1.3" not in result.stdout.str().split("numcheck perf")[1].split("tf32")[1][:60]
    result.stdout.fnmatch_lines(["mhc_pre::tiny-mhc*tf32*cpu*too noisy [[]*, *[]]*PASS (tf32 = fp32 bit for bit on cpu)"])


def test_the_header_names_the_timer_on_cpu(pytester: pytest.Pytester) -> None:
    project(pytester, variants='"tf32"')
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.stdout.fnmatch_lines([
        ("numcheck thresholds: cpu, perf_counter; device class cpu: gated where a case sets "
         "speedup_min.cpu, reported elsewhere"),
    ])


def test_cpu_timing_really_runs_and_is_reported_not_gated(pytester: pytest.Pytester) -> None:
    # The real perf_counter timer (no fake): only the plumbing is asserted, never a speed.
    project(pytester, variants='"tf32"', perf="max_time_s = 0.2\ntarget_sample_ms = 0.5")
    with timing.override(lambda request: timing._CpuPairTimer(
            request.reference, request.variant, request.config)):
        result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["mhc_pre::tiny-mhc*tf32*cpu*perf_counter*not gated*"])


XDIST_CONFTEST = PLANTED + '''
import json, os, time
from numcheck.perf import timing

class Recording:
    """Fake timer whose draws take real time and log (pid, start, end) to a file."""
    def __init__(self, request):
        self.timer, self.notes, self.calls_per_sample = "fake", [], 1
        self.spent = 0.0
    def draw(self, n):
        start = time.monotonic()
        time.sleep(0.02)
        end = time.monotonic()
        with open(os.environ["SECTIONS_LOG"], "a") as f:
            f.write(json.dumps([os.getpid(), start, end]) + "\\n")
        self.spent += 0.02
        return [1e-3] * n, [1e-3] * n
    def elapsed(self):
        return self.spent

timing._OVERRIDE.append(Recording)
'''


@pytest.mark.slow  # 2 xdist workers that each import torch; the lock alone: test_gpulock.py
def test_xdist_workers_never_time_at_the_same_time(pytester: pytest.Pytester,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("xdist")
    project(pytester, variants='"tf32", "bf16", "slowed"', regen=False,
            extra="perf_only = true")
    pytester.makeconftest(XDIST_CONFTEST)
    log = pytester.path / "sections.jsonl"
    monkeypatch.setenv("SECTIONS_LOG", str(log))
    monkeypatch.setenv("NUMCHECK_LOCK_DIR", str(pytester.path / "locks"))
    result = pytester.runpytest_subprocess("--numcheck", "--numcheck-perf", "-n", "2",
                                           "--numcheck-report", "r.json")
    result.assert_outcomes(passed=4)
    sections = [json.loads(line) for line in log.read_text().splitlines()]
    assert len({pid for pid, _, _ in sections}) == 2  # both workers timed
    overlapping = [(a, b) for a in sections for b in sections
                   if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]]
    assert overlapping == []
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["environment"]["workers"] == 2 and report["environment"]["device_lock"]
    assert {r["worker"] for r in report["records"]} == {"gw0", "gw1"}
    result.stdout.fnmatch_lines([("numcheck device lock: checks waited * s in total for their "
                                  "device (timed sections hold it alone)*")])


#: Thresholds measured on an H200 and an H100 (fake ones: the timer is tests/faketimer.py's).
PER_MODEL = ("[tiny-mhc.perf.slowed]\nspeedup_min = { H200 = 1.0, H100 = 0.45 }\n"
             "[tiny-mhc.perf.bf16]\nspeedup_min = { H200 = 1.1 }")


@pytest.mark.parametrize(("name", "slowed", "bf16"), [
    ("NVIDIA H200", "fail (min 1)", "pass (min 1.1)"),
    # The H100's own threshold for slowed; bf16 has none for the H100: reported only.
    ("NVIDIA H100 80GB HBM3", "pass (min 0.45)", "not gated (no min for H100)"),
])
def test_each_gpu_model_is_held_to_its_own_thresholds(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, slowed: str,
        bf16: str) -> None:
    """Through the device-name hook: the same case file on two GPU models, each gated by
    its own figures only."""
    monkeypatch.setenv("NUMCHECK_DEVICE_NAME", name)
    project(pytester, variants='"slowed", "bf16"', perf=PER_MODEL)
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=3 if "H100" in name else 2, failed=0 if "H100" in name else 1)
    result.stdout.fnmatch_lines([f"mhc_pre::tiny-mhc*slowed*cpu*fake*{slowed}"])
    result.stdout.fnmatch_lines([f"mhc_pre::tiny-mhc*bf16*cpu*fake*{bf16}"])


def test_an_unknown_gpu_model_reports_its_speedups_and_gates_none(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU model no case file has a threshold for (a B200 here, simulated on the CPU):
    the slowed variant, which fails on the H200, is timed and reported with its interval,
    never failed by another model's figure; one line says how to measure this model's."""
    monkeypatch.setenv("NUMCHECK_DEVICE_NAME", "NVIDIA B200")
    project(pytester, variants='"slowed", "bf16"', perf=PER_MODEL)
    result = pytester.runpytest("--numcheck", "--numcheck-perf", "--numcheck-report", "r.json")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "numcheck thresholds: cpu, perf_counter; device class B200 (named by "
        "NUMCHECK_DEVICE_NAME='NVIDIA B200'): gated where a case sets speedup_min.B200, "
        "reported elsewhere"])
    result.stdout.fnmatch_lines([
        "mhc_pre::tiny-mhc*bf16*cpu*fake*1.[12]* [[]*[]]*not gated (no min for B200)",
        "mhc_pre::tiny-mhc*slowed*cpu*fake*0.[45]* [[]0.4*, 0.5*[]]*not gated (no min for B200)",
        ("numcheck perf: B200 has no speedup_min in 2 timed check(s) that have one for H100, "
         "H200: reported, not gated. Measure B200's thresholds: python -m numcheck onboard "
         "--only speed (docs/speed.md, \"Your runner is not an H200\")"),
    ])
    records = {r["variant"]: r for r in json.loads((pytester.path / "r.json").read_text())[
        "records"]}
    slowed = records["slowed"]
    assert slowed["status"] == "pass" and slowed["device_name"] == "NVIDIA B200"
    timing = slowed["timing"]
    assert timing["gate"] == "not gated" and timing["speedup_min"] is None
    assert timing["ci_high"] < 1.0 and timing["device_class"] == "B200"
    assert timing["gate_reason"].startswith(
        "no speedup_min for B200 (this case has H100 0.45, H200 1): reported, not gated; "
        "measure B200's: python -m numcheck onboard --only speed; ")


def test_a_gpu_model_numcheck_does_not_list_is_added_by_the_ini(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A class key numcheck does not know is an error naming the file, case, key and fix
    (a typo must not become a threshold that never applies); the project's ini adds one."""
    from numcheck import devices

    monkeypatch.setenv("NUMCHECK_DEVICE_NAME", "NVIDIA X900 96GB")
    project(pytester, regen=False)  # the goldens, from a case file that names no X900
    write_goldens(pytester)
    (pytester.path / "cases" / "mhc.toml").write_text(CASE.format(
        variants='"slowed"', extra="",
        perf="[tiny-mhc.perf.slowed]\nspeedup_min = { X900 = 1.0 }"))
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.stdout.fnmatch_lines([
        ("*cases/mhc.toml: case 'tiny-mhc': key 'perf.slowed.speedup_min.X900': 'X900' is not "
         "a device class numcheck knows (cpu, or a GPU model of numcheck.devices.GPU_MODELS: "
         "H100, H200, B200, MI300X...). Fix: write the class of a GPU model (python -m "
         "numcheck onboard --class prints this machine's); a model numcheck does not list "
         "yet: add it to the ini key numcheck_gpu_models"),
    ])
    assert result.ret != 0
    project_ini(pytester, NO_CACHE, "numcheck_gpu_models = X900\n")
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=1, failed=1)  # X900's own threshold gates slowed
    result.stdout.fnmatch_lines(["mhc_pre::tiny-mhc*slowed*cpu*fake*fail (min 1)"])
    devices.set_gpu_models([])  # this process's later runs: as a run without the ini
