"""benchmarks/reliability/isolation_runs.py: examples/crashing_kernels' verdicts in each mode,
against the expected ones (crash isolation, end to end)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.reliability import isolation_runs as iso
from tests.sm90 import sm90_ptx

ROOT = Path(__file__).resolve().parent.parent

CPU = {"fp32": "PASS", "exits": "CRASH", "segfault": "CRASH", "hangs": "TIMEOUT",
       "oom": "OOM", "honest": "PASS", "device_assert": "SKIP", "illegal_address": "SKIP",
       "honest_triton": "SKIP", "oob_masked_read": "SKIP"}


def test_a_record_reads_as_its_verdict() -> None:
    assert iso.verdict({"status": "pass"}) == "PASS"
    assert iso.verdict({"status": "skip", "reason": "variant 'x' runs on cuda only"}) == "SKIP"
    assert iso.verdict({"status": "error", "error_kind": "TIMEOUT"}) == "TIMEOUT"
    assert iso.verdict({"status": "error", "error_kind": "CRASH"}) == "CRASH"
    # pytest-xdist's record of a worker that died: no isolated run's verdict
    assert iso.verdict({"status": "error", "error_kind": "crash"}) == "ERROR:crash"
    assert iso.verdict({"status": "error", "error_kind": "GoldenMissing"}) == "ERROR:GoldenMissing"


def test_the_cpu_plan_expects_every_check_and_says_why_memcheck_is_left_out() -> None:
    modes, notes = iso.plan("cpu", list(iso.MODES), shipped=True, sanitizer=None)
    assert [m.name for m in modes] == ["serial", "xdist"]
    assert "-n" in modes[1].args and "-n" not in modes[0].args
    for mode in modes:
        assert mode.expected == {iso.check_id(v, "cpu"): w for v, w in CPU.items()}
    assert notes == ["memcheck: not run: compute-sanitizer checks CUDA kernels only "
                     "(--device cpu)"]


def test_memcheck_on_cuda_selects_the_two_triton_checks_and_the_shipped_kernel() -> None:
    modes, notes = iso.plan("cuda", ["memcheck"], shipped=True, sanitizer="/x/compute-sanitizer")
    assert not notes
    sanitized, shipped = modes
    assert sanitized.expected == {"row_scale::r8-c64::honest_triton[cuda]": "PASS",
                                  "row_scale::r8-c64::oob_masked_read[cuda]": "SANITIZER"}
    assert "--numcheck-sanitize=memcheck" in sanitized.args
    assert "checks/cases/row_scale.toml::r8-c64::oob_masked_read[cuda]" in sanitized.args
    assert shipped.cwd == iso.ROOT
    assert shipped.expected == {"mhc_pre::v4flash-t64::fused[cuda]": "PASS"}
    _, notes = iso.plan("cuda", ["memcheck"], shipped=False, sanitizer=None)
    assert "compute-sanitizer is neither on PATH" in notes[0]


def test_the_table_marks_a_verdict_off_its_expectation() -> None:
    rows = [{"check": "c::a[cpu]", "mode": "serial", "verdict": "CRASH", "expected": "CRASH",
             "ok": True, "reason": "", "problem": ""},
            {"check": "c::b[cpu]", "mode": "serial", "verdict": "FAIL", "expected": "TIMEOUT",
             "ok": False, "reason": "y.rel_fro = 1 > budget 1e-05", "problem": ""}]
    text = iso.table([{"mode": "serial", "rc": 1, "wall_s": 3.0, "problem": "", "rows": rows}])
    lines = text.splitlines()
    assert lines[1].split() == ["c::a[cpu]", "CRASH", "CRASH", "ok"]
    assert lines[2].split() == ["c::b[cpu]", "FAIL", "TIMEOUT", "OFF"]
    assert "OFF serial c::b[cpu]: FAIL (want TIMEOUT): y.rel_fro = 1 > budget 1e-05" in lines


@pytest.mark.slow
def test_the_crashing_examples_get_their_verdicts_on_the_cpu(tmp_path: Path) -> None:
    """Serially and with -n 2: every crash, hang and OOM fails its own check alone."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.reliability.isolation_runs",
                           "--device", "cpu", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=500, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    data = json.loads((tmp_path / "isolation_runs.json").read_text())
    assert data["ok"] and data["complete"]
    got = {run["mode"]: {row["check"]: row["verdict"] for row in run["rows"]}
           for run in data["runs"]}
    want = {iso.check_id(v, "cpu"): w for v, w in CPU.items()}
    assert got == {"serial": want, "xdist": want}
    for run in data["runs"]:
        assert (tmp_path / f"{run['mode']}.json").is_file(), run["mode"]
        log = (tmp_path / f"{run['mode']}.log").read_text()
        assert "numcheck TIMEOUT row_scale::r8-c64::hangs[cpu]" in log


def test_the_cuda_variants_kernels_build_for_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The crashing example's Triton kernels compile for sm_90 here, without a GPU (its
    CUDA-only variants never run on the CPU): the spin loop keeps its volatile load, and the
    wild load adds 4 TiB to its pointer."""
    pytest.importorskip("triton")
    monkeypatch.syspath_prepend(iso.EXAMPLE)  # the example project's own package
    from crashing_kernels import triton_kernels as k
    kernels = {
        "row_scale_kernel": ({"x_ptr": "*fp32", "s_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32",
                              "cols": "i32", "EXTRA": "constexpr", "BLOCK": "constexpr"},
                             {"EXTRA": 1, "BLOCK": k.BLOCK}),
        "wild_load_kernel": ({"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32",
                              "WILD": "constexpr", "BLOCK": "constexpr"},
                             {"WILD": k.WILD, "BLOCK": k.BLOCK}),
        "spin_kernel": ({"flag_ptr": "*i32"}, {}),
    }
    try:
        # These kernels have no multiply-add for enable_fp_fusion to change.
        ptx = {name: sm90_ptx(getattr(k, name), signature, constants,
                              options={"enable_fp_fusion": True})
               for name, (signature, constants) in kernels.items()}
    except RuntimeError as exc:  # no ptxas in this triton install
        pytest.skip(f"triton cannot compile for sm_90 here: {exc}")
    assert "ld.volatile.global" in ptx["spin_kernel"]
    assert str(k.WILD * 4) in ptx["wild_load_kernel"]  # the byte offset, 4 TiB
    assert "ld.global" in ptx["row_scale_kernel"]
