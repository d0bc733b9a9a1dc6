"""``python -m numcheck onboard`` end to end on the CPU, as on a GPU model numcheck has no
values for (a B200, named through the device-name hook): it writes the class's speed
thresholds (from a fake timer: no machine speed), names the class in the invariance keys
whose every variant held, leaves alone the one a planted nondeterministic variant breaks,
checks the FP8 families on held-out seeds, records the provenance, and refuses to loosen a
numerics budget an honest member fails."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.caseproject import ROOT_ON_PATH

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("tomlkit")

#: The project's conftest: the planted nondeterministic variant, and a fake timer for the
#: speed part's pytest process (the speedups by variant name; no machine speed).
CONFTEST = """
import numcheck
from tests.faketimer import factory
from numcheck.perf import timing

# Kept referenced: a dropped context manager's generator is closed, removing the override.
FAKE = timing.override(factory({"bf16": 1.3, "tf32": 1.02}))
FAKE.__enter__()


def pytest_numcheck_register(registry: numcheck.Registrar) -> None:
    from tests import planted_invariance

    fn, precision, _ = planted_invariance.PLANTED["indexer"]["atomic_heads"]
    registry.add_variant("indexer", numcheck.Variant("atomic_heads", fn, precision))
"""
PERF = """\
# Timed checks of the test project.

[tiny-perf]
op = "mhc_pre"
shape = { tokens = 8, hidden = 64 }
devices = ["cpu", "cuda"]
perf_only = true
variants = ["bf16", "tf32"]
[tiny-perf.perf]
rounds = 6
[tiny-perf.perf.bf16]
speedup_min = { H200 = 1.2 }    # runs: 1.26, 1.27, 1.26
"""
INDEXER = """\
# Invariance keys of the test project: measured on the CPU and an H200.

[tiny-idx]
op = "indexer"
shape = { batch = 4, max_context = 256, heads = 8, head_dim = 32, index_topk = 16, next_n = 2 }
variants = ["bf16"]
deterministic = { devices = ["cpu", "H200"] }
batch_invariant = { variants = ["bf16"], devices = ["cpu", "H200"] }

[tiny-idx-atomic]
op = "indexer"
shape = { batch = 4, max_context = 256, heads = 8, head_dim = 32, index_topk = 16, next_n = 2 }
variants = ["atomic_heads"]
deterministic = { devices = ["cpu", "H200"] }
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project with the shipped cases/linear.toml (its tiny-k384 case is the FP8 family
    checked), a perf file and an indexer file; the device named a B200."""
    from numcheck.ops import registry
    from tests import planted_invariance

    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(ROOT / "cases" / "linear.toml", cases / "linear.toml")
    (cases / "perf.toml").write_text(PERF)
    (cases / "indexer.toml").write_text(INDEXER)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "tox.ini").write_text(f"[pytest]\n{ROOT_ON_PATH}")  # the speed part's pytest
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NUMCHECK_DEVICE_NAME", "NVIDIA B200")
    with registry.isolated():
        fn, precision, _ = planted_invariance.PLANTED["indexer"]["atomic_heads"]
        registry.add_variant("indexer", registry.Variant("atomic_heads", fn, precision))
        yield tmp_path


def _onboard(*args: str) -> int:
    from numcheck.__main__ import main

    return main(["onboard", "--device", "cpu", "--out", "out", "-k", "tiny", "--seeds", "1",
                 "--speed-runs", "2", *args])


@pytest.mark.slow  # its speed part starts a pytest process (seconds)
def test_onboarding_writes_the_classs_values_with_their_provenance(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: p.read_text() for p in (project / "cases").glob("*.toml")}
    assert _onboard() == 0
    printed = capsys.readouterr().out
    assert "onboarding NVIDIA B200 (named by NUMCHECK_DEVICE_NAME): class B200, device cpu" in (
        printed)
    perf = (project / "cases" / "perf.toml").read_text()
    # speed: bf16's threshold for B200 beside the H200's, from its runs (fake timer: 1.3x);
    # tf32 (1.02x) is within 5% of 1: not gated, nothing written.
    data = tomllib.loads(perf)["tiny-perf"]["perf"]
    assert data["bf16"]["speedup_min"]["H200"] == 1.2
    assert 1.1 <= data["bf16"]["speedup_min"]["B200"] < 1.3
    assert "speedup_min" not in data.get("tf32", {})
    line = next(ln for ln in perf.splitlines() if ln.startswith("speedup_min"))
    # The H200's runs kept, this class's added (the fake timer's 1.3x, its noise aside).
    assert re.search(r"\}    # runs: 1.26, 1.27, 1.26; B200 \(onboard \d{4}-\d\d-\d\d\): "
                     r"runs 1\.2\d\d 1\.2\d\d$", line), line
    # provenance: the command, the date, the device's name, torch, once per class.
    assert "# set by: numcheck onboard B200: python -m numcheck onboard --device cpu" in perf
    assert "NVIDIA B200 (class B200), cpu, torch " in perf
    # invariance: tiny-idx's keys name B200; tiny-idx-atomic's does not (atomic_heads is not
    # deterministic here), and the run said so.
    cases = tomllib.loads((project / "cases" / "indexer.toml").read_text())
    assert cases["tiny-idx"]["deterministic"]["devices"] == ["cpu", "H200", "B200"]
    assert cases["tiny-idx"]["batch_invariant"]["devices"] == ["cpu", "H200", "B200"]
    assert cases["tiny-idx-atomic"]["deterministic"]["devices"] == ["cpu", "H200"]
    assert "tiny-idx-atomic::atomic_heads: deterministic does not hold on B200" in printed
    # The linear case's keys name B200 too, and its budgets are untouched (the numerics part
    # changed no budget: its families passed).
    linear = tomllib.loads((project / "cases" / "linear.toml").read_text())
    assert "B200" in linear["tiny-k384"]["deterministic"]["devices"]
    assert linear["tiny-k384"]["budget"] == tomllib.loads(before["linear.toml"])[
        "tiny-k384"]["budget"]
    # What comes back: the patch applies to the files as they were, the JSON says it all.
    out = project / "out"
    found = json.loads((out / "onboard-B200.json").read_text())
    assert found["class"] == "B200" and found["device_name"] == "NVIDIA B200"
    assert found["numerics"]["checks"] > 0 and found["numerics"]["failed"] == []
    assert found["numerics"]["budgets_changed"] == 0
    patch = (out / "onboard-B200.patch").read_text()
    assert "+++ b/cases/perf.toml" in patch and "+++ b/cases/indexer.toml" in patch
    for name, text in before.items():
        (project / "cases" / name).write_text(text)
    applied = subprocess.run(["git", "apply", "--check", "-v", str(out / "onboard-B200.patch")],
                             cwd=project, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    # The values it wrote load, and gate the B200 from now on.
    from numcheck.cases import load_case_file

    subprocess.run(["git", "apply", str(out / "onboard-B200.patch")], cwd=project, check=True)
    (tiny,) = load_case_file(project / "cases" / "perf.toml")
    assert tiny.perf["bf16"].threshold("B200", "cuda") == data["bf16"]["speedup_min"]["B200"]


def test_a_dry_run_leaves_the_case_files_and_writes_the_patch(project: Path) -> None:
    before = {p: p.read_text() for p in (project / "cases").glob("*.toml")}
    assert _onboard("--dry-run", "--only", "invariance") == 0
    assert {p: p.read_text() for p in before} == before
    assert "B200" in (project / "out" / "onboard-B200.patch").read_text()


def test_onboarding_refuses_to_loosen_a_numerics_budget_an_honest_member_fails(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A budget too tight for this GPU model's honest family (planted: fp8_block's rel_fro
    on tiny-k384 cut to 1e-6): onboarding changes no budget, names each failing member and
    the governed calibration of the family, and exits 1."""
    path = project / "cases" / "linear.toml"
    text = path.read_text()
    found_line = re.search(r"\[tiny-k384\.budget\.fp8_block\.y\]\nrel_fro = [^\n]*\n", text)
    assert found_line is not None
    line = found_line.group(0)
    tight = text.replace(line, "[tiny-k384.budget.fp8_block.y]\nrel_fro = 1e-6\n", 1)
    assert tomllib.loads(tight)["tiny-k384"]["budget"]["fp8_block"]["y"]["rel_fro"] == 1e-6
    path.write_text(tight)
    assert _onboard("--only", "numerics") == 1
    printed = capsys.readouterr().out
    assert path.read_text() == tight  # no budget changed
    assert "numerics: REFUSED:" in printed and "onboard changes no numerics budget" in printed
    assert "linear::tiny-k384 fp8_block (held to fp8_block's budget) seed 9500: " in printed
    assert ("measure the family: pytest --numcheck --numcheck-calibrate --numcheck-device cpu "
            "linear.toml::tiny-k384") in printed
    found = json.loads((project / "out" / "onboard-B200.json").read_text())
    assert found["numerics"]["failed"] and found["numerics"]["budgets_changed"] == 0
    assert (project / "out" / "onboard-B200.patch").read_text() == ""


def test_the_class_is_printed_and_an_unknown_gpu_model_refused(
        project: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from numcheck.__main__ import main

    assert main(["onboard", "--device", "cpu", "--class"]) == 0
    assert capsys.readouterr().out == "B200\n"
    monkeypatch.setenv("NUMCHECK_DEVICE_NAME", "NVIDIA X900")
    with pytest.raises(SystemExit) as exit_:
        main(["onboard", "--device", "cpu"])
    assert exit_.value.code == 2
    assert "no GPU model numcheck knows" in capsys.readouterr().err
