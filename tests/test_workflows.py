"""The example CI workflows: valid YAML that runs the commands and options numcheck has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from numcheck import plugin

WORKFLOWS = Path(__file__).parent.parent / ".github" / "workflows"


def load(name: str) -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (it is not a dependency)")
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    assert isinstance(data, dict)
    return data


def steps_text(name: str) -> str:
    return (WORKFLOWS / name).read_text()


def test_gpu_workflow_runs_the_gate_compares_and_uploads() -> None:
    text = steps_text("numcheck-gpu.yml")
    for needed in (plugin.OPTION, plugin.REPORT_OPTION, plugin.MARKDOWN_OPTION, "--junitxml",
                   "-n \"$gpus\"", "python -m numcheck compare baseline/numcheck-report.json",
                   "actions/upload-artifact@v4", "self-hosted"):
        assert needed in text, needed


def test_gpu_workflow_structure() -> None:
    data = load("numcheck-gpu.yml")
    on = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert set(on) >= {"pull_request", "push"}
    job = data["jobs"]["gate"]
    assert job["runs-on"][0] == "self-hosted"
    names = [s.get("name") for s in job["steps"]]
    assert names.index("Gate (one xdist worker per GPU)") < names.index(
        "Compare with main (baseline drift)") < names.index("Upload the report")
    # The report is uploaded and compared even when the gate step failed.
    for step in job["steps"]:
        if step.get("name") in ("Upload the report", "Compare with main (baseline drift)"):
            assert "!cancelled()" in step["if"]


def test_cpu_workflow_runs_the_ci_script() -> None:
    data = load("ci.yml")
    runs = [s.get("run") for s in data["jobs"]["tests"]["steps"]]
    assert ".ci/run" in runs
    assert (WORKFLOWS.parent.parent / ".ci" / "run").exists()
