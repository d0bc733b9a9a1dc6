"""The example CI workflows: valid YAML that runs the commands and options numcheck has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from numcheck import plugin

WORKFLOWS = Path(__file__).parent.parent / ".github" / "workflows"


def load(name: str) -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (the test extra brings it)")
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(data, dict)
    return data


def steps_text(name: str) -> str:
    return (WORKFLOWS / name).read_text()


def test_gpu_workflow_runs_the_gate_compares_and_uploads() -> None:
    text = steps_text("numcheck-gpu.yml")
    for needed in (plugin.OPTION, plugin.REPORT_OPTION, plugin.MARKDOWN_OPTION, "--junitxml",
                   "-n \"$gpus\"", "python -m numcheck compare baseline/numcheck-report.json",
                   "python -m numcheck merge", "python -m numcheck matrix",
                   "--splits \"$SHARDS\" --group", "actions/upload-artifact@v4",
                   "self-hosted"):
        assert needed in text, needed


def test_gpu_workflow_structure() -> None:
    data = load("numcheck-gpu.yml")
    on = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert set(on) >= {"pull_request", "push"}
    jobs = data["jobs"]
    gate, merge, matrix = jobs["gate"], jobs["merge"], jobs["matrix"]
    # A matrix of GPU types x shards; SHARDS says how many groups pytest-split makes.
    assert gate["runs-on"][0] == "self-hosted" and "${{ matrix.gpu }}" in gate["runs-on"]
    groups = gate["strategy"]["matrix"]["group"]
    assert int(data["env"]["SHARDS"]) == len(groups) and groups == list(range(1, len(groups) + 1))
    assert merge["strategy"]["matrix"]["gpu"] == gate["strategy"]["matrix"]["gpu"]
    assert merge["needs"] == "gate" and matrix["needs"] == "merge"
    names = [s.get("name") for s in merge["steps"]]
    assert names.index("Merge the shards (the run's gate)") < names.index(
        "Compare with main (baseline drift)") < names.index("Upload the merged report")
    # Shards run without a baseline: a shard's drift would list the other shards' checks
    # as removed (docs/report.md, "Sharding a suite across runners").
    gate_step = next(s for s in gate["steps"] if s.get("name", "").startswith("Gate"))
    assert plugin.BASELINE_OPTION not in gate_step["run"]
    # Reports are uploaded, merged and compared even when a shard's gate failed.
    assert "!cancelled()" in merge["if"] and "!cancelled()" in matrix["if"]
    for job in (gate, merge):
        for step in job["steps"]:
            if step.get("name", "").startswith(("Upload", "Compare")):
                assert "!cancelled()" in step["if"], step["name"]


def test_cpu_workflow_runs_the_ci_script() -> None:
    data = load("ci.yml")
    runs = [s.get("run") for s in data["jobs"]["tests"]["steps"]]
    assert ".ci/run" in runs
    assert (WORKFLOWS.parent.parent / ".ci" / "run").exists()


def test_the_ci_script_fails_on_a_failing_step_and_runs_the_tests_two_ways() -> None:
    """.ci/run (issue 33): any failing command ends it non-zero; the tests run as the README
    says, then once more after triton is uninstalled (the Triton tests must skip with the
    reason) and in another CPU summation order, the gate with them."""
    lines = [line.strip() for line in (WORKFLOWS.parent.parent / ".ci" / "run").read_text()
             .splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines[0] == "set -euo pipefail"  # before any command
    tests = [i for i, line in enumerate(lines) if 'pytest -q -n 2 -m "not slow"' in line]
    assert len(tests) == 2, tests
    uninstall = lines.index("pip uninstall -q -y triton")
    assert tests[1] > uninstall > max(i for i, line in enumerate(lines) if "liger" in line)
    order = lines.index("export ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE")
    assert tests[0] < order < tests[1]
    assert lines[-1].startswith("pytest --numcheck")  # the gate, last, in that order too
    assert any("triton not installed" in line for line in lines[tests[1]:])
