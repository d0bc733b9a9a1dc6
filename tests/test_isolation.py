"""Process isolation (numcheck/execute/isolated.py): a check that crashes, hangs or runs out
of memory fails alone, naming its phase; every other check gets the verdict it gets in a
run without it. The crashers are tests/isolation_variants.py, run on the CPU."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from numcheck import phase
from numcheck.execute.aborted import (
    CRASH,
    OOM,
    Aborted,
    bytes_asked,
    exit_error,
    kind_of,
    root_error,
)
from numcheck.execute.sanitizer import Sanitizer, parse_errors, parse_tools
from tests.caseproject import case_project, project_ini

TESTS = Path(__file__).parent
DATA = TESTS / "data"

CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
variants = [{variants}]

[tiny-mhc-after]
op = "mhc_pre"
shape = {{ tokens = 4, hidden = 64 }}
variants = ["honest"]
"""

CONFTEST = """
import numcheck
from tests import isolation_variants as v

def pytest_numcheck_register(registry):
    for name in v.NAMES:
        registry.add_variant("mhc_pre", numcheck.Variant(name, getattr(v, name), "bf16"))
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("NUMCHECK_ISOLATE", "process")
    case_project(pytester, conftest=CONFTEST)
    return pytester


def write_case(project: pytest.Pytester, *variants: str, goldens: bool = True) -> None:
    listed = ", ".join(f'"{v}"' for v in variants)
    (project.path / "cases" / "mhc.toml").write_text(CASE.format(variants=listed))
    # The goldens, made by the reference's checks alone (the variants would fail), in this
    # process: they are the tests' data, and a worker would cost each test ~2 s to boot.
    if goldens:
        assert project.runpytest("--numcheck", "--numcheck-regen", "-k", "fp32",
                                 "--numcheck-isolate=off").ret == 0


def records(path: Path) -> dict[str, dict[str, object]]:
    return {f"{r['case']}::{r['variant']}": r for r in json.loads(path.read_text())["records"]}


@pytest.mark.slow  # worker interpreters, one restarted after each of four crashes (seconds)
def test_checks_that_crash_or_run_out_of_memory_fail_alone(project: pytest.Pytester) -> None:
    write_case(project, "exits", "segfault", "oom", "context_lost", "raises", "honest")
    report = project.path / "r.json"
    result = project.runpytest("--numcheck", "--numcheck-report", str(report))
    result.assert_outcomes(passed=4, failed=5)
    got = records(report)
    kinds = {k: r["error_kind"] for k, r in got.items() if r["status"] == "error"}
    assert kinds == {"tiny-mhc::exits": CRASH, "tiny-mhc::segfault": CRASH,
                     "tiny-mhc::oom": OOM, "tiny-mhc::context_lost": CRASH,
                     "tiny-mhc::raises": "VariantError"}
    # Every check after a crash ran in a healthy worker and passed, as in a run without it.
    assert got["tiny-mhc::honest"]["status"] == "pass"
    assert got["tiny-mhc-after::honest"]["status"] == "pass"
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "numcheck CRASH mhc_pre::tiny-mhc::exits[[]cpu[]]",
        "  phase:       first call",
        "  error:       the worker process exited with status 3",
        "  means:       the check's process died*",
        "numcheck CRASH mhc_pre::tiny-mhc::segfault[[]cpu[]]",
        "  error:       the worker process was killed by SIGSEGV",
        "numcheck OOM mhc_pre::tiny-mhc::oom[[]cpu[]]",
        "  phase:       first call",
        "  asked:       4611686018.43 GB (4611686018427387904 bytes)",
        "  free:        * on cpu",
        "numcheck CRASH mhc_pre::tiny-mhc::context_lost[[]cpu[]]",
        "  error:       RuntimeError: CUDA error: an illegal memory access was encountered*",
    ])
    # The segfault's Python stack, from the worker's log, points at the variant.
    assert "isolation_variants.py" in out and "in segfault" in out
    assert "reproduce:   pytest --numcheck --numcheck-device cpu" in out


#: Timing of a fixed size, whatever the machine's speed: one look (the first, after 3 rounds),
#: one call per sample; the A/A noise of each worker's first timed check uses the same rule.
#: No speedup_min: every timed check is reported, never gated.
PERF = """
[tiny-mhc.perf]
rounds = 3
warmup = 1
max_looks = 1
target_sample_ms = 0

[tiny-mhc-after.perf]
rounds = 3
warmup = 1
max_looks = 1
target_sample_ms = 0
"""


@pytest.mark.slow  # three pytester runs, each with its worker interpreter (seconds)
def test_a_check_killed_while_timed_fails_alone_in_the_timing_phase(
        project: pytest.Pytester) -> None:
    """--numcheck-perf: a variant whose numerics pass and whose process is killed while the
    perf gate times it fails as a CRASH in phase timing; every other check gets the verdict
    of a run without it, the later ones timed in a new worker."""
    write_case(project, "honest")
    cases = project.path / "cases" / "mhc.toml"
    cases.write_text(cases.read_text() + PERF)
    without = project.path / "without.json"
    project.runpytest("--numcheck", "--numcheck-perf", "--numcheck-report",
                      str(without)).assert_outcomes(passed=4)
    cases.write_text(CASE.format(variants='"honest", "killed_when_timed"') + PERF)
    report = project.path / "r.json"
    result = project.runpytest("--numcheck", "--numcheck-perf", "--numcheck-report",
                               str(report))
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines([
        "numcheck CRASH mhc_pre::tiny-mhc::killed_when_timed[[]cpu[]]",
        "  phase:       timing",
        "  error:       the worker process was killed by SIGKILL",
    ])
    got, before = records(report), records(without)
    assert got.pop("tiny-mhc::killed_when_timed")["error_kind"] == CRASH
    assert {k: r["status"] for k, r in got.items()} == {
        k: r["status"] for k, r in before.items()}
    assert set(got) == {"tiny-mhc::fp32", "tiny-mhc::honest", "tiny-mhc-after::fp32",
                        "tiny-mhc-after::honest"}
    # Every other check was timed; those after the crash in a new worker (it measured the
    # machine's noise again, at its first timed check).
    assert all(r["timing"] is not None for r in got.values())
    pid = {k: r["timing"]["noise"]["pid"] for k, r in got.items()}
    assert pid["tiny-mhc::fp32"] == pid["tiny-mhc::honest"]
    assert pid["tiny-mhc-after::fp32"] == pid["tiny-mhc-after::honest"] != pid["tiny-mhc::fp32"]


@pytest.mark.slow  # a worker interpreter, and the device held for 10 s
def test_a_check_that_waits_for_the_device_past_its_limit_does_not_time_out(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Another process holds the device (here a thread of this one, through the same lock
    files) for 10 s, longer than the checks' 3 s limit: the worker's checks wait for it and
    pass. Waiting is not hanging: on a GPU shared by xdist workers, a check held up behind
    a neighbour's hung kernel had timed out (an H100, 2026-12-06)."""
    from numcheck.perf.gpulock import LOCK_DIR_ENV, DeviceLock

    write_case(project, "honest")
    cases = project.path / "cases" / "mhc.toml"
    cases.write_text(cases.read_text() + PERF)
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    held = threading.Event()

    def hold_the_device() -> None:
        with DeviceLock("cpu", directory=tmp_path / "locks").exclusive():
            held.set()
            time.sleep(10.0)

    holder = threading.Thread(target=hold_the_device)
    holder.start()
    assert held.wait(timeout=60)
    report = project.path / "r.json"
    result = project.runpytest("--numcheck", "--numcheck-perf", "--numcheck-timeout=3",
                               "--numcheck-timeout-first-call=3", "--numcheck-report",
                               str(report))
    holder.join()
    result.assert_outcomes(passed=4)
    waits = [sum((r["timing"] or {}).get(k) or 0.0
                 for k in ("lock_wait_s", "numerics_lock_wait_s"))
             for r in records(report).values()]
    assert max(waits) > 3.0  # it did wait past the limit


@pytest.mark.slow
def test_a_check_that_never_returns_times_out_and_the_run_goes_on(
        project: pytest.Pytester) -> None:
    write_case(project, "hangs", "honest")
    report = project.path / "r.json"
    result = project.runpytest("--numcheck", "--numcheck-timeout=3",
                               "--numcheck-timeout-first-call=3", "--numcheck-report",
                               str(report))
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines([
        "numcheck TIMEOUT mhc_pre::tiny-mhc::hangs[[]cpu[]]",
        "  phase:       first call",
        "  error:       its first call ran past its time limit: * s of 3 s *",
    ])
    got = records(report)
    assert got["tiny-mhc::hangs"]["error_kind"] == "TIMEOUT"
    assert got["tiny-mhc-after::honest"]["status"] == "pass"
    # The summary and the report were written: the run reached its end.
    result.stdout.fnmatch_lines(["*numcheck summary*"])


@pytest.mark.slow
def test_a_first_call_has_its_own_time_allowance(project: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOW_FIRST_CALL_S", "6")
    write_case(project, "slow_first_call")
    # 6 s of compile against a check limit of 4 s: within the first call's 60 s.
    ok = project.runpytest("--numcheck", "--numcheck-timeout=4",
                           "--numcheck-timeout-first-call=60")
    ok.assert_outcomes(passed=4)
    # The same first call against an allowance of 2 s.
    late = project.runpytest("--numcheck", "--numcheck-timeout=60",
                             "--numcheck-timeout-first-call=2")
    late.assert_outcomes(passed=3, failed=1)
    late.stdout.fnmatch_lines(["numcheck TIMEOUT mhc_pre::tiny-mhc::slow_first_call[[]cpu[]]",
                               "  phase:       first call"])


@pytest.mark.slow
def test_checks_run_in_a_worker_process_unless_isolation_is_off(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    where = project.path / "pid"
    monkeypatch.setenv("WHERE_FILE", str(where))
    write_case(project, "where")
    project.runpytest("--numcheck").assert_outcomes(passed=4)
    assert int(where.read_text()) != os.getpid()
    project.runpytest("--numcheck", "--numcheck-isolate=off").assert_outcomes(passed=4)
    assert int(where.read_text()) == os.getpid()
    # The ini key, then the environment, set the default.
    project_ini(project, ini="numcheck_isolate = off\n")
    project.runpytest("--numcheck").assert_outcomes(passed=4)
    assert int(where.read_text()) == os.getpid()


@pytest.mark.slow
def test_under_xdist_each_bad_check_fails_alone(project: pytest.Pytester) -> None:
    write_case(project, "exits", "oom", "context_lost", "honest")
    report = project.path / "r.json"
    result = project.runpytest_subprocess("--numcheck", "-n", "2", "-p", "xdist",
                                          "--numcheck-report", str(report))
    result.assert_outcomes(passed=4, failed=3)
    kinds = {k: r.get("error_kind") for k, r in records(report).items()}
    assert kinds["tiny-mhc::exits"] == CRASH and kinds["tiny-mhc::oom"] == OOM
    assert records(report)["tiny-mhc-after::honest"]["status"] == "pass"


@pytest.mark.slow
def test_calibration_runs_in_the_worker_and_a_crash_fails_alone(
        project: pytest.Pytester) -> None:
    write_case(project, "honest", "exits")
    result = project.runpytest("--numcheck", "--numcheck-calibrate=2", "-k", "tiny-mhc and not after")
    result.stdout.fnmatch_lines(["numcheck CRASH mhc_pre::tiny-mhc::exits[[]cpu[]]"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed", 0) >= 2


@pytest.mark.parametrize(("args", "message"), [
    (["--numcheck-timeout=-1"], "--numcheck-timeout: expected seconds >= 0"),
    (["--numcheck-isolate=off", "--numcheck-timeout=5"],
     "--numcheck-timeout ends a check that runs too long by ending its worker process"),
    (["--numcheck-sanitize=bogus"], "unknown tool(s) ['bogus']"),
    (["--numcheck-isolate=off", "--numcheck-sanitize"], "--numcheck-sanitize runs each check"),
])
def test_bad_isolation_options_are_usage_errors(project: pytest.Pytester, args: list[str],
                                                message: str) -> None:
    write_case(project, "honest", goldens=False)
    result = project.runpytest("--numcheck", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_bad_isolate_value_in_the_environment_names_it(project: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    write_case(project, "honest", goldens=False)
    monkeypatch.setenv("NUMCHECK_ISOLATE", "threads")
    result = project.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "$NUMCHECK_ISOLATE = 'threads': not a place to run checks" in result.stderr.str()


def test_sanitize_on_the_cpu_skips_with_its_reason(project: pytest.Pytester) -> None:
    write_case(project, "honest")
    result = project.runpytest("--numcheck", "--numcheck-sanitize=memcheck", "-rs")
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(["*compute-sanitizer checks CUDA kernels*on the CPU*"])


# -- the pure parts ------------------------------------------------------------------------


def test_the_kind_of_an_exception_reads_its_whole_chain() -> None:
    try:
        try:
            raise RuntimeError("CUDA error: device-side assert triggered")
        except RuntimeError as inner:
            raise ValueError("variant 'x' raised") from inner
    except ValueError as exc:
        assert kind_of(exc) == CRASH
        assert root_error(exc) == "RuntimeError: CUDA error: device-side assert triggered"
    assert kind_of(MemoryError("DefaultCPUAllocator: can't allocate memory")) == OOM
    assert kind_of(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")) == OOM
    assert kind_of(ValueError("shape mismatch")) is None


def test_bytes_asked_and_exit_statuses_read_as_the_failure_shows_them() -> None:
    assert bytes_asked("Tried to allocate 2.00 GiB. GPU 0 has a total capacity") == 2 * 2**30
    assert bytes_asked("you tried to allocate 4611686018427387904 bytes") == 2**62
    assert bytes_asked("no figure here") is None
    assert exit_error(-11) == "the worker process was killed by SIGSEGV"
    assert exit_error(3) == "the worker process exited with status 3"


def test_phases_nest_and_a_listener_hears_each() -> None:
    heard: list[str] = []
    with phase.listening(heard.append):
        with phase.span("numerics seed 0"):
            with phase.span("first call"):
                assert phase.current() == "first call"
            assert phase.current() == "numerics seed 0"
    # The way out is heard too, to the end: the run counts the phase it is back in.
    assert heard == ["numerics seed 0", "first call", "numerics seed 0", ""]
    assert phase.current() == ""


def test_a_wait_for_the_device_is_a_phase_of_its_own(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's section that waits for the device lock (held here by another lock object, as
    by another process) is heard in phase DEVICE_WAIT until it holds it; its body runs in
    the phase before. The holder lets go when the waiter is heard waiting: no clock."""
    from numcheck.perf.gpulock import LOCK_DIR_ENV, DeviceLock
    from numcheck.perf.sections import DeviceSections

    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path))
    other = DeviceLock("cpu", directory=tmp_path)
    heard: list[str] = []
    held, waiting = threading.Event(), threading.Event()

    def hold_until_waited_for() -> None:
        with other.exclusive():
            held.set()
            waiting.wait(timeout=60)

    def listen(name: str) -> None:
        heard.append(name)
        if name == phase.DEVICE_WAIT:
            waiting.set()

    holder = threading.Thread(target=hold_until_waited_for)
    holder.start()
    assert held.wait(timeout=60)
    sections = DeviceSections("cpu", enabled=True)
    with phase.listening(listen), phase.span("ledger"):
        with sections.hold(exclusive=False) as waited:
            assert phase.current() == "ledger"
            assert waiting.is_set() and waited > 0
        with sections.hold(exclusive=True):  # free now: the phase is heard all the same
            pass
    holder.join()
    assert heard == ["ledger", phase.DEVICE_WAIT, "ledger", phase.DEVICE_WAIT, "ledger", ""]


def test_aborted_lines_name_kind_check_phase_error_and_meaning() -> None:
    lines = Aborted(CRASH, "op::case::v[cuda]", "timing", "boom", ["x: y"]).lines()
    assert lines[0] == "numcheck CRASH op::case::v[cuda]"
    assert lines[1:3] == ["  phase:       timing", "  error:       boom"]
    assert lines[3].startswith("  means:       the check's process died or its CUDA context")
    assert lines[4] == "  x: y"


def test_a_memcheck_report_gives_each_error_with_its_kernel_and_access() -> None:
    errors = parse_errors((DATA / "memcheck_oob_read.log").read_text())
    assert errors == [
        "Invalid __global__ read of size 4 bytes at oob_read_kernel+0x1b0 by thread "
        "(127,0,0) in block (7,0,0): Address 0x7f6510c00400 is out of bounds",
        'Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" '
        "on CUDA API call to cudaDeviceSynchronize",
    ]
    assert parse_errors("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == []
    # A summary that counts errors this parser has no record of never reads as clean.
    assert parse_errors("========= ERROR SUMMARY: 3 errors\n") == [
        "3 error(s) in the report (see the log)"]


def test_sanitizer_tools_and_command() -> None:
    assert parse_tools(None) == ("memcheck",)
    assert parse_tools("memcheck,racecheck") == ("memcheck", "racecheck")
    with pytest.raises(ValueError, match="known: memcheck, racecheck, initcheck, synccheck"):
        parse_tools("memchek")
    s = Sanitizer("/nonexistent/compute-sanitizer", ("memcheck",))
    cmd = s.command("memcheck", Path("/tmp/l.log"))
    assert cmd[:3] == ["/nonexistent/compute-sanitizer", "--tool", "memcheck"]
    assert "--padding" not in cmd  # only where the tool's --help lists it
    assert "--log-file" in cmd and s.env == {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    assert s.errors("memcheck", Path("/nonexistent/x.log")) == [
        "memcheck: no report was written (/nonexistent/x.log)"]


def test_a_closed_cast_ledger_travels_without_its_tensors_and_still_reads() -> None:
    import torch

    from numcheck.execute.worker import receive, send
    from numcheck.overhead.casts import CastLedger

    x = torch.randn(64, 32)
    with CastLedger(inputs={"x": x}) as ledger:
        x.to(torch.bfloat16)
    assert ledger.entries
    r, w = __import__("multiprocessing").Pipe(duplex=False)
    send(w, ledger)
    back = receive(r)
    assert back.input_passes() == ledger.input_passes() and back.input_passes()["x"] > 0
    assert back.input_bytes("x") == 64 * 32 * 4
    assert back.inputs["x"].device.type == "meta"  # no data travelled


def test_memcheck_pads_allocations_where_the_tool_can(tmp_path: Path) -> None:
    """A read one element past a tensor's end lands in the next allocation unless each has
    padding after it: where compute-sanitizer lists --padding, memcheck runs with it."""
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\necho '  --padding arg   Size of the padding buffer'\n")
    fake.chmod(0o755)
    cmd = Sanitizer(str(fake), ("memcheck",)).command("memcheck", tmp_path / "l.log")
    assert cmd[cmd.index("--padding") + 1] == "512"
    assert "--padding" not in Sanitizer(str(fake)).command("racecheck", tmp_path / "l.log")


FAKE_SANITIZER = """#!/bin/sh
# A stand-in for compute-sanitizer: writes REPORT to --log-file, then runs the command.
log=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --log-file) log="$2"; shift 2 ;;
    --*) shift 2 ;;
    *) break ;;
  esac
done
cp "{report}" "$log"
exec "$@"
"""


@pytest.mark.slow  # a worker interpreter under a stand-in compute-sanitizer per case
@pytest.mark.parametrize(("variant", "report", "verdict"), [
    ("honest", "memcheck_oob_read.log", "SANITIZER"),
    ("context_lost", "memcheck_oob_read.log", "SANITIZER"),  # memcheck stopped the kernel
    ("context_lost", "memcheck_clean.log", "CRASH"),
    ("honest", "memcheck_clean.log", None),
])
def test_a_sanitized_check_fails_on_the_tool_s_errors_even_when_its_kernel_then_crashed(
        tmp_path: Path, variant: str, report: str, verdict: str | None) -> None:
    import sys

    from numcheck.cases import load_case_file
    from numcheck.execute.aborted import CheckAborted
    from numcheck.execute.case_cache import CaseCache
    from numcheck.execute.executor import CheckRequest
    from numcheck.execute.isolated import Isolated
    from numcheck.execute.worker import WorkerSetup

    fake = tmp_path / "compute-sanitizer"
    fake.write_text(FAKE_SANITIZER.format(report=DATA / report))
    fake.chmod(0o755)
    hook = tmp_path / "register_crashers.py"
    hook.write_text(CONFTEST)
    (tmp_path / "mhc.toml").write_text(CASE.format(variants=f'"{variant}"'))
    import numcheck
    from numcheck.ops import registry
    from tests import isolation_variants as v

    with registry.isolated():  # the worker registers them from the hook's module
        for name in {variant, "honest"}:
            registry.Registrar("test").add_variant(
                "mhc_pre", numcheck.Variant(name, getattr(v, name), "bf16"))
        case = load_case_file(tmp_path / "mhc.toml")[0]

    def setup() -> WorkerSetup:
        return WorkerSetup(list(sys.path), [("register_crashers", str(hook))], "cpu", None,
                           tmp_path / "goldens", True, frozenset(), False, False, 5.0,
                           tmp_path / "obtained", tmp_path)

    iso = Isolated(setup, cases=CaseCache(tmp_path / "goldens", "cpu"),
                   sanitizer=Sanitizer(str(fake), ("memcheck",)))
    try:
        request = CheckRequest(case, variant, "cpu", regen_hint="regen")
        if verdict is None:
            assert iso(request).passed
            return
        with pytest.raises(CheckAborted) as err:
            iso(request)
    finally:
        iso.close()
    assert err.value.aborted.kind == verdict
    assert err.value.aborted.check == f"mhc_pre::tiny-mhc::{variant}[cpu]"
    if verdict == "SANITIZER":
        assert "Invalid __global__ read of size 4 bytes at oob_read_kernel" in str(err.value)


@pytest.mark.slow  # a worker interpreter (seconds)
def test_a_calibration_measures_the_same_in_the_worker_as_in_this_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calibration goes through the executor seam the checks use: a measure request in, its
    payloads out. The worker process answers it with the payloads this process's own
    executor gives, its pool member measured there (``where`` writes the process id)."""
    import sys

    from numcheck.calibrate.measuring import MeasureRequest, Measuring
    from numcheck.calibrate.payloads import CheckRef
    from numcheck.cases import load_case_file
    from numcheck.execute.case_cache import CaseCache
    from numcheck.execute.executor import InProcess
    from numcheck.execute.isolated import Isolated
    from numcheck.execute.worker import WorkerSetup

    where = tmp_path / "where.txt"
    monkeypatch.setenv("WHERE_FILE", str(where))
    hook = tmp_path / "register_crashers.py"
    hook.write_text(CONFTEST)
    (tmp_path / "mhc.toml").write_text(CASE.format(variants='"honest", "where"'))
    from tests import isolation_variants as v

    import numcheck
    from numcheck.ops import registry

    how = Measuring(fresh=1, first_seed=1000, pools={"honest": ("honest", "where")})
    check = CheckRef(op="mhc_pre", case="tiny-mhc", source="mhc.toml",
                     path=str(tmp_path / "mhc.toml"), device="cpu", nodeid="tiny-mhc::honest")
    with registry.isolated():  # the worker registers them from the hook's module
        for name in ("honest", "where"):
            registry.Registrar("test").add_variant(
                "mhc_pre", numcheck.Variant(name, getattr(v, name), "bf16"))
        case = load_case_file(tmp_path / "mhc.toml")[0]
        request = MeasureRequest(case, "honest", check, how)
        here = InProcess(CaseCache(tmp_path / "goldens", "cpu"), gates=frozenset(),
                         obtained_dir=tmp_path / "obtained", root=tmp_path)(request)
    assert where.read_text() == str(os.getpid())

    def setup() -> WorkerSetup:
        return WorkerSetup(list(sys.path), [("register_crashers", str(hook))], "cpu", None,
                           tmp_path / "goldens", False, frozenset(), False, False, 5.0,
                           tmp_path / "obtained", tmp_path)

    iso = Isolated(setup, cases=CaseCache(tmp_path / "goldens", "cpu"))
    try:
        there = iso(request)
    finally:
        iso.close()
    assert where.read_text() != str(os.getpid())  # the member ran in the worker
    assert isinstance(here, list) and [p.variant for p in here] == ["honest", "where"]
    assert there == here


def test_the_first_call_has_its_own_allowance_and_the_rest_count_together() -> None:
    """The time limits on a fake clock: the check's limit counts every phase outside the
    first call together; the first call counts against its own."""
    from numcheck.execute.isolated import Limits, TimeUsed

    used = TimeUsed(Limits(check_s=10, first_call_s=100), now=0.0)
    used.enter("prepare", 2.0)  # 2 s of golden and inputs
    used.enter("first call", 5.0)  # 3 s of preparing: 5 s of the check's 10 used
    assert used.remaining(50.0) == 55.0  # 45 s compiling, of 100
    used.enter("numerics seed 0", 60.0)
    assert used.remaining(60.0) == 5.0  # the first call's 55 s count nowhere else
    assert used.remaining(66.0) == -1.0
    assert used.overrun(66.0) == ("the check ran past its time limit: 11.0 s of 10 s "
                                  "(limits: 10 s (first call: 100 s))")
    first = TimeUsed(Limits(check_s=10, first_call_s=3), now=0.0)
    first.enter("first call", 1.0)
    assert first.remaining(4.5) == -0.5
    assert first.overrun(4.5).startswith("its first call ran past its time limit: 3.5 s of 3 s")
    assert TimeUsed(Limits(), now=0.0).remaining(1e9) is None  # no limits: wait forever


def test_a_wait_for_the_device_counts_against_no_limit() -> None:
    """On a fake clock: the seconds a check waits for the device (another check holds it,
    perhaps hung there until its own limit ends it) count nowhere; the check's limit goes on
    counting from where it was once the check holds the device."""
    from numcheck.phase import DEVICE_WAIT
    from numcheck.execute.isolated import Limits, TimeUsed

    used = TimeUsed(Limits(check_s=10, first_call_s=5), now=0.0)
    used.enter("numerics seed 0", 1.0)
    used.enter(DEVICE_WAIT, 4.0)  # 4 s of the check's 10 used
    assert used.remaining(500.0) is None  # no limit while it waits
    assert used.used(500.0) == 4.0
    used.enter("ledger", 500.0)
    assert used.remaining(503.0) == 3.0
    assert used.remaining(507.0) == -1.0
    assert used.overrun(507.0).startswith("the check ran past its time limit: 11.0 s of 10 s")
    # Before a first call too: the first call's allowance starts when it does.
    first = TimeUsed(Limits(check_s=10, first_call_s=5), now=0.0)
    first.enter(DEVICE_WAIT, 0.0)
    first.enter("", 100.0)
    first.enter("first call", 101.0)
    assert first.remaining(104.0) == 2.0


# -- several workers -----------------------------------------------------------------------

#: Counts each golden a worker loads: a line "<pid> <case>" in $LOADS_FILE per load (in
#: the worker processes only: pytester runs pytest in this one).
POOL_CONFTEST = CONFTEST + """
import os, sys
from numcheck.execute import case_cache

_load = case_cache.load_for_case

def _counted(path, op, case, **kw):
    with open(os.environ["LOADS_FILE"], "a") as log:
        log.write(f"{os.getpid()} {case.id}\\n")
    return _load(path, op, case, **kw)

if getattr(sys.modules["__main__"].__spec__, "name", "") == "numcheck.execute.worker":
    case_cache.load_for_case = _counted
"""

TOKENS = {"tiny-mhc": 8, "tiny-mhc-after": 4}


@pytest.fixture
def pool(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
         tmp_path: Path) -> pytest.Pytester:
    monkeypatch.setenv("NUMCHECK_ISOLATE", "process")
    for name in ("WHERE_FILE", "LOADS_FILE", "HANG_FILE"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    case_project(pytester, conftest=POOL_CONFTEST)
    return pytester


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def ran(result: pytest.RunResult) -> list[str]:
    """The node ids pytest reported, in the order it reported them (-v)."""
    return [line.split()[0] for line in result.outlines
            if line.startswith("cases/") and line.split()[1:2] in (["PASSED"], ["FAILED"])]


@pytest.mark.slow  # three pytester runs, with one and two worker interpreters (seconds)
def test_two_workers_run_whole_cases_and_report_in_collection_order(
        pool: pytest.Pytester, tmp_path: Path) -> None:
    """Each case runs whole in one worker (its golden loaded once, there), the two cases
    in two workers at once, with cores // 2 torch threads each; pytest reports in
    collection order and every record reads as with one worker."""
    (pool.path / "cases" / "mhc.toml").write_text(
        CASE.replace('"honest"]', '"logs_where"]').format(variants='"logs_where", "honest"'))
    assert pool.runpytest("--numcheck", "--numcheck-regen", "-k", "fp32").ret == 0
    where, loads = tmp_path / "where_file", tmp_path / "loads_file"
    loads.unlink(missing_ok=True)  # (the goldens' regeneration loaded them)
    collected = [line for line in pool.runpytest("--numcheck", "--co", "-q").outlines
                 if "::" in line]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    result = pool.runpytest("--numcheck", "-v", "--numcheck-workers=1",
                            "--numcheck-report", str(one))
    result.assert_outcomes(passed=5)
    assert len({pid for pid, _, _ in lines(where)}) == 1
    # One worker keeps torch's own thread count, as before there were several.
    assert {threads for _, threads, _ in lines(where)} == {_torch_threads()}
    where.unlink()
    loads.unlink(missing_ok=True)
    result = pool.runpytest("--numcheck", "-v", "--numcheck-workers=2",
                            "--numcheck-report", str(two))
    result.assert_outcomes(passed=5)
    assert ran(result) == collected
    pids = {tokens: {pid for pid, _, t in lines(where) if t == str(tokens)}
            for tokens in TOKENS.values()}
    assert all(len(p) == 1 for p in pids.values()), pids  # a case stays in its worker
    assert pids[8] != pids[4]  # and the two cases ran in two
    # each case's seconds kept for the next run's order (longest first)
    kept = json.loads((pool.path / ".pytest_cache" / "v" / "numcheck" / "case-seconds" /
                       "cpu").read_text())
    assert sorted(kept) == sorted(f"cases/mhc.toml::{case}" for case in TOKENS)
    assert all(v > 0 for v in kept.values())
    assert {threads for _, threads, _ in lines(where)} == {
        str(max(1, len(os.sched_getaffinity(0)) // 2))}
    got = lines(loads)
    assert sorted(case for _, case in got) == sorted(TOKENS)  # each golden loaded once
    assert {pid for pid, case in got if case == "tiny-mhc"} == pids[8]
    # The records read as with one worker (their figures may move in the last bits with
    # the thread count; their verdicts may not).
    assert {k: r["status"] for k, r in records(two).items()} == {
        k: r["status"] for k, r in records(one).items()}


def _torch_threads() -> str:
    """torch's thread count in a new process (this one's may have been set)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.slow  # worker interpreters, one restarted after the crash (seconds)
def test_a_crash_in_one_worker_fails_its_check_alone_and_names_the_worker(
        pool: pytest.Pytester, tmp_path: Path) -> None:
    write_case(pool, "exits", "logs_where")
    report = tmp_path / "r.json"
    # (without pytest's cache: the cases go in collection order, not by the last run's
    # seconds, so the worker each one lands in is known)
    result = pool.runpytest("--numcheck", "--numcheck-workers=2", "--numcheck-report",
                            str(report), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines([
        "numcheck CRASH mhc_pre::tiny-mhc::exits[[]cpu[]]",
        "  phase:       first call",
        "  worker:      1 of 2 (pid *)",
        "  error:       the worker process exited with status 3",
    ])
    got = records(report)
    assert got.pop("tiny-mhc::exits")["error_kind"] == CRASH
    assert {r["status"] for r in got.values()} == {"pass"}
    # The rest of the crashed case ran after it, in a healthy worker.
    assert {t for _, _, t in lines(tmp_path / "where_file")} == {"8"}


@pytest.mark.slow  # two worker interpreters and a 10 s time limit
def test_a_hang_in_one_worker_is_caught_while_the_run_waits_on_the_other(
        pool: pytest.Pytester) -> None:
    """The first case's check waits (in worker 1) until the second case's hang (in worker
    2) has been ended: the run watches every worker while an item waits for one."""
    (pool.path / "cases" / "mhc.toml").write_text(
        CASE.replace('"honest"]', '"hangs_later"]').format(variants='"waits_for_hang_end"'))
    assert pool.runpytest("--numcheck", "--numcheck-regen", "-k", "fp32").ret == 0
    result = pool.runpytest("--numcheck", "--numcheck-workers=2", "--numcheck-timeout=10",
                            "--numcheck-timeout-first-call=0", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([
        "numcheck TIMEOUT mhc_pre::tiny-mhc-after::hangs_later[[]cpu[]]",
        "  phase:       *",
        "  worker:      2 of 2 (pid *)",
        "  error:       the check ran past its time limit: * s of 10 s *",
    ])


@pytest.mark.slow  # a worker interpreter (seconds)
def test_only_the_selected_checks_are_dispatched(pool: pytest.Pytester,
                                                  tmp_path: Path) -> None:
    write_case(pool, "exits", "logs_where")
    loads = tmp_path / "loads_file"
    loads.unlink(missing_ok=True)
    result = pool.runpytest("--numcheck", "--numcheck-workers=2", "-k", "tiny-mhc-after")
    result.assert_outcomes(passed=2)
    # The other case's golden was never loaded, and its crasher never ran.
    assert [case for _, case in lines(loads)] == ["tiny-mhc-after"]


@pytest.mark.parametrize(("args", "env", "message"), [
    (["--numcheck-workers=0"], None,
     "--numcheck-workers = '0': not a number of check workers. Fix: set it to a whole number "
     ">= 1, or auto"),
    (["--numcheck-workers=two"], None, "--numcheck-workers = 'two': not a number"),
    ([], "-1", "$NUMCHECK_WORKERS = '-1': not a number of check workers. Fix:"),
    (["--numcheck-isolate=off", "--numcheck-workers=2"], None,
     "--numcheck-workers sets how many worker processes run the checks, but "
     "--numcheck-isolate = off. Fix: drop --numcheck-workers, or run with "
     "--numcheck-isolate=process"),
])
def test_a_bad_worker_count_is_a_usage_error_naming_it(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str],
        env: str | None, message: str) -> None:
    write_case(project, "honest", goldens=False)
    if env is not None:
        monkeypatch.setenv("NUMCHECK_WORKERS", env)
    result = project.runpytest("--numcheck", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_bad_worker_count_in_the_ini_names_the_key(project: pytest.Pytester) -> None:
    write_case(project, "honest", goldens=False)
    project_ini(project, ini="numcheck_workers = many\n")
    result = project.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini key numcheck_workers in " in result.stderr.str()
    assert "= 'many': not a number of check workers" in result.stderr.str()


def test_how_many_workers_and_threads() -> None:
    """One per core on the CPU, each with an equal share of the cores' threads; one (with
    torch's own threads) on a GPU, in a timing run and in an xdist worker; a count asked
    for wins."""
    from numcheck.plugin.isolation import pool_size

    cpu = {"device": "cpu", "timed": False, "xdist": False}
    assert pool_size(None, cores=2, **cpu) == (2, 1)
    assert pool_size(None, cores=8, **cpu) == (8, 1)
    assert pool_size(None, cores=1, **cpu) == (1, None)
    assert pool_size(4, cores=8, **cpu) == (4, 2)
    assert pool_size(3, cores=2, **cpu) == (3, 1)
    assert pool_size(1, cores=8, **cpu) == (1, None)
    assert pool_size(None, cores=8, device="cuda", timed=False, xdist=False) == (1, None)
    assert pool_size(None, cores=8, device="cpu", timed=True, xdist=False) == (1, None)
    assert pool_size(None, cores=8, device="cpu", timed=False, xdist=True) == (1, None)
    assert pool_size(2, cores=8, device="cuda", timed=True, xdist=True) == (2, 4)


def test_a_worker_keeps_freed_memory_unless_the_environment_says_otherwise(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from numcheck.execute import isolated

    envs: list[dict[str, str]] = []
    monkeypatch.setattr(isolated.subprocess, "Popen",
                        lambda *a, env, **k: envs.append(env))
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setenv("MALLOC_TOP_PAD_", "0")  # the user's word wins
    isolated.WorkerProcess(tmp_path).listener.close()
    assert envs[0]["MALLOC_TRIM_THRESHOLD_"] == isolated.MALLOC_ENV["MALLOC_TRIM_THRESHOLD_"]
    assert envs[0]["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)
    assert envs[0]["MALLOC_TOP_PAD_"] == "0"


def test_cases_the_last_run_timed_go_longest_first_after_the_new_ones() -> None:
    from numcheck.execute.isolated import longest_first

    keys = ["a::quick", "a::new", "b::slow", "b::also-quick", "c::newer"]
    cost = {"a::quick": 0.2, "b::slow": 5.0, "b::also-quick": 0.2}
    assert longest_first(keys, cost) == ["a::new", "c::newer", "b::slow", "a::quick",
                                         "b::also-quick"]
    assert longest_first(keys, {}) == keys  # a first run: the order given


def test_the_cache_s_case_seconds_are_read_relative_to_the_rootdir() -> None:
    from numcheck.plugin.isolation import _seconds

    kept = {"cases/a.toml::x": 1.5, "/elsewhere/b.toml::y": 2, "bad": "1", "neg": -1.0,
            "flag": True}
    assert _seconds(kept, "/root/") == {"/root/cases/a.toml::x": 1.5,
                                        "/elsewhere/b.toml::y": 2.0}
    assert _seconds(["not", "a", "table"], "/root/") == {}


def test_the_pool_dispatches_by_cost_and_counts_each_case_s_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without starting a worker: the queue's order, then the seconds an answer adds."""
    from types import SimpleNamespace

    from numcheck.execute.isolated import Isolated, case_key

    def request(case: str, variant: str) -> SimpleNamespace:
        return SimpleNamespace(case=SimpleNamespace(source=Path("cases/x.toml"), id=case,
                                                    op="op"), variant=variant, device="cpu")

    started: list[object] = []
    monkeypatch.setattr(Isolated, "_spawn", lambda self, slot: started.append(slot) or setattr(
        slot, "proc", SimpleNamespace(ready=False)))
    clock = iter([10.0, 10.0, 12.5, 12.5])
    pool = Isolated(setup=lambda: None, cases=None, workers=2,  # type: ignore[arg-type]
                    cost={"cases/x.toml::long": 9.0, "cases/x.toml::short": 1.0},
                    clock=lambda: next(clock))
    requests = [request(c, v) for c in ("short", "long", "new") for v in ("fp32", "bf16")]
    pool.dispatch(requests)  # type: ignore[arg-type]
    slots = pool._slots
    assert [[t.request.case.id for t in s.todo] for s in slots] == [["new", "new"],
                                                                   ["long", "long"]]
    assert [[t.request.case.id for t in q] for q in pool._queue] == [["short", "short"]]
    assert len(started) == 2
    # an answer counts the seconds since the worker began the check
    slot = slots[1]
    slot.proc = SimpleNamespace(ready=True, connection=None)
    monkeypatch.setattr("numcheck.execute.isolated.send", lambda *a, **k: None)
    pool._feed([slot], pool._queue)
    monkeypatch.setattr("numcheck.execute.isolated.receive", lambda conn: ("done", None, {}))
    pool._hear(slot)
    assert pool.seconds == {case_key(requests[2]): 2.5}


@pytest.mark.slow  # a worker interpreter (seconds)
def test_a_worker_that_cannot_register_the_variants_says_why(
        project: pytest.Pytester) -> None:
    """A hook on a plugin object cannot be made again in a worker: the checks fail with the
    worker's own words and the fix, not with a hang or a crash."""
    write_case(project, "honest", goldens=False)
    project.makeconftest(CONFTEST.replace("def pytest_numcheck_register(registry):", """
class Hooks:
    def pytest_numcheck_register(self, registry):
        register(registry)

def pytest_configure(config):
    config.pluginmanager.register(Hooks())

def register(registry):"""))
    result = project.runpytest("--numcheck", "-k", "tiny-mhc-after")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*IsolationError: numcheck: the check worker process could not start; it said:",
        "*plugin object Hooks*",
        "*Fix: register your ops from a conftest.py hook or an entry point*",
    ])
