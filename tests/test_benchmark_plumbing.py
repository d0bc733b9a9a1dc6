"""Every script the GPU regression run lists (benchmarks/gpu_regression.py: its default steps
and its optional ones), run on the CPU at tiny shapes, and judged by the step's own judge where
it has one: an API change that breaks a script is red here before a GPU sees it (issue 45:
benchmarks/fused_h200.py raised a TypeError on the GPU after check() lost an argument).

The runs start processes and take seconds to a minute each: the slow tier
(``pytest -m slow``). The guard that every listed script has its test is fast."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from benchmarks import gpu_regression as reg
from tests.conftest import outside_xdist

ROOT = Path(__file__).resolve().parent.parent

#: Each module the regression run calls (``python -m``: ``benchmarks.<group>.<script>``), and
#: the test that runs it on the CPU (this file's, or another file's that already does).
PLUMBING = {
    "benchmarks.speed.speed_gate": "test_speed_gate_runs_its_tables_and_the_independent_timer",
    "benchmarks.numerics.honest_calibration": "test_honest_calibration_and_its_judge",
    "benchmarks.reliability.reliability_report":
        "test_reliability_report_false_failures_and_catch_and_their_judges",
    "benchmarks.reliability.determinism": "test_determinism",
    "benchmarks.reliability.invariance": "test_invariance_and_its_judge",
    "benchmarks.overhead.kernel_audit": "test_kernel_audit",
    "benchmarks.overhead.cast_ratios": "test_cast_ratios",
    "benchmarks.reliability.isolation_runs":
        "test_isolation_runs.py::test_the_crashing_examples_get_their_verdicts_on_the_cpu",
    "benchmarks.speed.perf_table": "test_perf_table_reads_a_benchmark_json",
    "benchmarks.speed.fidelity": "test_fidelity",
    "benchmarks.speed.fused_roofline": "test_fused_roofline",
    "benchmarks.numerics.folded_calibration": "test_folded_calibration_and_heldout",
    "benchmarks.speed.liger_mhc": "test_liger_mhc",
    "benchmarks.numerics.fp8_families": "test_fp8_families_and_its_judge",
    "benchmarks.reliability.fp8_catch": "test_fp8_catch_and_its_judge",
    "benchmarks.numerics.many_seeds":
        "test_many_seeds.py::test_the_gpu_regression_step_runs_it_and_judges_by_its_report",
    "benchmarks.numerics.fp8_accumulation":
        "test_quant_benchmark.py::test_the_cpu_path_writes_its_table_and_json",
    "numcheck.calibrate": "test_calibrate_and_heldout_modules",
    "numcheck.heldout": "test_calibrate_and_heldout_modules",
    "numcheck": "test_onboard.py (python -m numcheck onboard) and test_cli.py (the reports)",
}


def _listed() -> set[str]:
    """The modules every step of the regression run calls."""
    opts = reg.build_parser().parse_args([])
    found = set()
    for extra in (reg.ONBOARD, *reg.EXTRAS):
        cmd = extra.command(opts, Path("/tmp/w"))
        found |= {cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "-m"
                  and cmd[i + 1] not in ("pytest", "pip")}
    # The judges' own calls and the default independent step's.
    found |= {f"benchmarks.{m}" for m in
              re.findall(r'_bench\(\s*"([\w.]+)"', Path(reg.__file__).read_text())}
    return found


def test_every_script_the_regression_run_lists_has_a_cpu_plumbing_test() -> None:
    """A step added to gpu_regression.py without a test here is red at once."""
    listed = _listed()
    assert {"benchmarks.speed.fused_roofline", "benchmarks.overhead.kernel_audit",
            "benchmarks.numerics.fp8_families", "benchmarks.speed.speed_gate"} <= listed
    assert not [m for m in listed if m.startswith("benchmarks.") and find_spec(m) is None]
    missing = sorted(listed - set(PLUMBING))
    assert not missing, f"no CPU plumbing test for {missing}: add one to {__file__}"
    here = Path(__file__).read_text()
    for name, test in PLUMBING.items():
        file, _, func = test.partition("::")
        if func:
            assert f"def {func}(" in (ROOT / "tests" / file).read_text(), test
        elif not test.endswith(")"):
            assert f"def {test}(" in here, test


def _run(*argv: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """A script run from the repository root as the steps run it; its output on failure."""
    # A script's pytest is no xdist worker, even where this test runs in one (CI runs the
    # slow tier with -n 2).
    env = {**outside_xdist(os.environ),
           "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    env.pop("NUMCHECK_DEVICE_NAME", None)
    proc = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n" \
                                 f"{proc.stderr[-3000:]}"
    return proc


def _judged(tmp_path: Path, name: str, judge: reg.Judge, **opts: object) -> tuple[bool, str]:
    """The regression step's own judge, on what the script wrote into ``tmp_path``."""
    args = reg.build_parser().parse_args(["--device", "cpu"])
    for key, value in opts.items():
        setattr(args, key, value)
    run = reg.Run(tmp_path, tmp_path, 600)
    extra = next(e for e in (reg.ONBOARD, *reg.EXTRAS) if e.name == name)
    return judge(run, extra, args, 0, "")



@pytest.mark.slow
def test_speed_gate_runs_its_tables_and_the_independent_timer(tmp_path: Path) -> None:
    _run("-m", "benchmarks.speed.speed_gate", "runs", str(tmp_path), "--tiny", "--runs", "1",
         "--device", "cpu")
    report = tmp_path / "run-1.json"
    assert report.exists()
    assert "run" in _run("-m", "benchmarks.speed.speed_gate", "table", str(tmp_path)).stdout
    _run("-m", "benchmarks.speed.speed_gate", "independent", str(report), "--json",
         str(tmp_path / "independent.json"), "--all")
    rows = json.loads((tmp_path / "independent.json").read_text())
    assert rows and {"id", "numcheck", "ci", "independent", "diff"} <= set(rows[0])
    # a variant whose weight is quantized at load time was called with it (once, on the CPU)
    assert "linear::tiny-linear-fp8::fp8_block[cpu]" in {r["id"] for r in rows}
    _run("-m", "benchmarks.speed.speed_gate", "independent", str(report), "--json",
         str(tmp_path / "linear.json"), "--all", "-k", "linear::")
    linear = {r["id"] for r in json.loads((tmp_path / "linear.json").read_text())}
    assert "linear::tiny-linear-fp8::fp8_block[cpu]" in linear
    assert all(i.startswith("linear::") for i in linear) and len(linear) < len(rows)
    assert "same verdict" in _run("-m", "benchmarks.speed.speed_gate", "xdist", str(report),
                                  str(report)).stdout


@pytest.mark.slow
def test_honest_calibration_and_its_judge(tmp_path: Path) -> None:
    out = tmp_path / "honest-calibration.json"
    _run("-m", "benchmarks.numerics.honest_calibration", "--device", "cpu", "--seeds", "1",
         "--ops", "mhc_pre", "-k", "v4flash-t32-two-eps", "--json", str(out))
    assert "| mhc_pre |" in reg.honest_table(json.loads(out.read_text()))
    ok, detail = _judged(tmp_path, "honest", reg._judge_honest)
    assert ok, detail


@pytest.mark.slow
def test_reliability_report_false_failures_and_catch_and_their_judges(tmp_path: Path) -> None:
    case = "mhc_pre::v4flash-t32-two-eps"
    _run("-m", "benchmarks.reliability.reliability_report", "--device", "cpu", "--seeds", "1",
         "--skip", "shipped", "fresh", "--only", case, "--json",
         str(tmp_path / "false-failures.json"))
    ok, detail = _judged(tmp_path, "false-fail", reg._judge_false_failures)
    assert ok, detail
    _run("-m", "benchmarks.reliability.reliability_report", "--device", "cpu", "--seeds", "1",
         "--catch-seeds", "1", "--skip", "false", "--shipped-cases", case, "--catch-cases",
         case, "--json", str(tmp_path / "catch.json"))
    ok, detail = _judged(tmp_path, "catch", reg._judge_catch)
    assert ok, detail


@pytest.mark.slow
def test_determinism(tmp_path: Path) -> None:
    _run("-m", "benchmarks.reliability.determinism", "--device", "cpu", "--runs", "2", "-k",
         "tiny-k384", "--json", str(tmp_path / "determinism.json"))
    rows = json.loads((tmp_path / "determinism.json").read_text())["rows"]
    assert {r["variant"] for r in rows} >= {"fp32", "fp8_block"}  # a prepared variant too


@pytest.mark.slow
def test_invariance_and_its_judge(tmp_path: Path) -> None:
    _run("-m", "benchmarks.reliability.invariance", "--device", "cpu", "--runs", "2", "-k",
         "tiny-k384", "--json", str(tmp_path / "invariance.json"))
    ok, detail = _judged(tmp_path, "invariance", reg._judge_invariance)
    assert ok and "checks" in detail, detail


@pytest.mark.slow
def test_kernel_audit(tmp_path: Path) -> None:
    _run("-m", "benchmarks.overhead.kernel_audit", "--device", "cpu", "--tiny", "--repeats", "2",
         "--iterations", "1", "--out", str(tmp_path / "audit"))
    data = json.loads((tmp_path / "audit" / "audit-cpu.json").read_text())
    assert data["meta"]["errors"] == [] and data["rows"]
    ok, detail = _judged(tmp_path, "audit", reg._judge_written("audit/audit-*.json"))
    assert ok, detail


@pytest.mark.slow
def test_cast_ratios(tmp_path: Path) -> None:
    _run("-m", "benchmarks.overhead.cast_ratios", "--device", "cpu", "--full-context", "--only",
         "tiny-k384", "--out", str(tmp_path / "casts"))
    ok, detail = _judged(tmp_path, "casts", reg._judge_written("casts/cast_ratios-*.json"))
    assert ok, detail


@pytest.mark.slow
def test_perf_table_reads_a_benchmark_json(tmp_path: Path) -> None:
    bench = tmp_path / "bench.json"
    _run("-m", "pytest", "-p", "no:cacheprovider", "-q", "--numcheck", "--numcheck-perf",
         "--numcheck-device", "cpu", "cases/mhc.toml::v4flash-t32-two-eps", "-k", "bf16 and not "
         "roundtrip", "--benchmark-json", str(bench))
    out = _run("-m", "benchmarks.speed.perf_table", str(bench)).stdout
    assert "v4flash-t32-two-eps" in out and "bf16" in out


@pytest.mark.slow
def test_fidelity(tmp_path: Path) -> None:
    _run("-m", "benchmarks.speed.fidelity", "--device", "cpu", "--tiny", "--repeats", "2",
         "--rounds", "6", "--json", str(tmp_path / "fidelity.json"))
    results = json.loads((tmp_path / "fidelity.json").read_text())["results"]
    assert len(results) == 2 and all(r["numcheck_speedup"] > 0 for r in results)
    ok, detail = _judged(tmp_path, "fidelity", reg._judge_written("fidelity.json"))
    assert ok, detail


@pytest.mark.slow
def test_fused_roofline(tmp_path: Path) -> None:
    """The script that raised TypeError (check() got an unexpected keyword argument
    'regen_hint') on the GPU: its shipped-check step now runs, and any step's error exits 1."""
    _run("-m", "benchmarks.speed.fused_roofline", "--device", "cpu", "--tiny", "--out",
         str(tmp_path))
    data = json.loads((tmp_path / "fused_roofline.json").read_text())
    assert data["errors"] == [] and data["checks"] and data["checks"][0]["passed"]
    assert data["indexer"] and data["mhc"]
    ok, detail = _judged(tmp_path, "fused", reg._judge_written("fused_roofline.json"))
    assert ok, detail


@pytest.mark.slow
def test_folded_calibration_and_heldout(tmp_path: Path) -> None:
    out = tmp_path / "bf16-folded-heldout.json"
    _run("-m", "benchmarks.numerics.folded_calibration", "11000", "1", str(out), "cpu")
    assert json.loads(out.read_text())["cases"]
    _run("-m", "numcheck.heldout", str(out))


@pytest.mark.slow
def test_liger_mhc(tmp_path: Path) -> None:
    pytest.importorskip("liger_kernel", reason="liger-kernel is the example's optional library")
    env_out = tmp_path / "out"
    os.environ["OUT"] = str(env_out)
    try:
        # From the example's folder, as the liger-times step runs it: its package, liger_mhc.
        _run("-m", "benchmarks.speed.liger_mhc", "--device", "cpu", "--repeats", "1", "--shapes",
             "t8-c512", cwd=ROOT / "examples" / "liger_mhc")
    finally:
        del os.environ["OUT"]
    assert (env_out / "liger_mhc.json").exists()


@pytest.mark.slow
def test_fp8_families_and_its_judge(tmp_path: Path) -> None:
    _run("-m", "benchmarks.numerics.fp8_families", "--device", "cpu", "--seeds", "1", "-k",
         "tiny-k384", "--json", str(tmp_path / "fp8-families.json"))
    ok, detail = _judged(tmp_path, "fp8-families", reg._judge_fp8_families)
    assert ok and "0 failed" in detail and "0 errors" in detail, detail


@pytest.mark.slow
def test_fp8_catch_and_its_judge(tmp_path: Path) -> None:
    _run("-m", "benchmarks.reliability.fp8_catch", "--device", "cpu", "--seeds", "1", "--cases",
         "tiny-k384", "--json", str(tmp_path / "fp8-catch.json"))
    ok, detail = _judged(tmp_path, "fp8-catch", reg._judge_fp8_catch)
    assert ok, detail


@pytest.mark.slow
def test_calibrate_and_heldout_modules(tmp_path: Path) -> None:
    out = tmp_path / "calibration-heldout.json"
    _run("-m", "numcheck.calibrate", "--device", "cpu", "--seeds", "1", "--first-seed", "11000",
         "-k", "v4flash-t32-two-eps", "--json", str(out))
    ok, detail = _judged(tmp_path, "calibrate-heldout", reg._heldout("calibration-heldout.json"))
    assert ok, detail
