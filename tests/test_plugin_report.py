"""The merge gate through pytester: JSON report, markdown, junitxml, baseline drift, xdist."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from numcheck.report.records import SCHEMA_VERSION, load_report
from tests.caseproject import TINY_INDEXER, golden, make_project, project_ini, write_goldens

# A variant whose logits carry a controlled relative noise (NOISE) and whose top-k is the
# exact one: its calc_diff moves with NOISE (about NOISE**2 / 2) while recall stays 1.
NOISY_CONFTEST = """
import torch
from tests import planted
from numcheck.ops import indexer, registry

NOISE = {noise!r}

def noisy(inputs, p):
    out = indexer.fp32(inputs, p)
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(out["logits"].shape, generator=g)
    return {{"logits": out["logits"] * (1 + NOISE * noise), "topk": out["topk"]}}

planted.register_all()
# Set, not add: pytester runs in one process, so this conftest may run twice in one test
# (the test's registry.isolated() scope undoes it afterwards).
registry.set_variant("indexer", registry.Variant("noisy", noisy, "tf32"))
"""


#: The noise is up to ~4x a tf32 rounding on single elements, where the indexer's tf32
#: path is exact: the element-level budget would fail it; these tests are about drift.
NOISY_BUDGET = "[tiny.budget.noisy.logits]\nmax_err_ratio = inf\n"


def noisy_project(pytester: pytest.Pytester, noise: float, variants: str = '"noisy"') -> None:
    make_project(pytester, variants=variants, extra=NOISY_BUDGET if "noisy" in variants else "")
    pytester.makeconftest(NOISY_CONFTEST.format(noise=noise))


def records(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    return list(data["records"])


def verdict_fields(record: dict[str, Any]) -> dict[str, Any]:
    """A record without where it ran (xdist worker, GPU index) and how long its first call
    took (a time, not a verdict): what must not depend on -n."""
    return {k: v for k, v in record.items()
            if k not in ("worker", "device_index", "first_call_s")}


# -- JSON report -----------------------------------------------------------------------


def test_json_report_schema(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"bf16", "bf16_fp32out", "far_flips"', planted=True,
                 extra="[tiny.budget.far_flips.topk]\ntie_band_rel = 0.05\n")
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-report", "out/report.json")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["numcheck report written: *out/report.json"])
    data = json.loads((pytester.path / "out" / "report.json").read_text())
    assert data["schema"] == "numcheck-report"
    assert data["gate"] == "fail"
    assert data["counts"] == {"pass": 2, "fail": 1, "xfail": 0, "skip": 1, "error": 0, "total": 4}
    assert data["exitstatus"] == 1
    env = data["environment"]
    for key in ("numcheck", "python", "torch", "cuda", "device", "device_names", "driver",
                "git_commit", "workers"):
        assert key in env
    assert env["device"] == "cpu" and env["driver"] is None
    by_variant = {r["variant"]: r for r in data["records"]}
    assert list(by_variant) == ["fp32", "bf16", "bf16_fp32out", "far_flips"]  # collection order

    bf16 = by_variant["bf16"]
    assert bf16["status"] == "pass" and bf16["reason"] == ""
    assert bf16["id"] == "indexer::tiny::bf16[cpu]"
    assert bf16["nodeid"] == "cases/indexer.toml::tiny::bf16[cpu]"
    assert bf16["precision"] == "bf16" and bf16["seeds"] == [0]
    assert set(bf16["metrics"]["logits"]) >= {"max_abs", "rel_fro", "calc_diff", "ulp_p99"}
    assert bf16["budget"]["logits"]["rel_fro"] > 0
    assert bf16["budget"]["topk"]["tie_band_kind"] == "rel"
    assert bf16["topk"]["recall_min"] <= 1.0 and "n_unexplained" in bf16["topk"]
    assert bf16["per_seed"][0]["seed"] == 0 and "logits" in bf16["per_seed"][0]["metrics"]
    assert bf16["closest"]["output"] == "logits"
    assert bf16["timing"] is None  # not measured without --numcheck-perf
    assert bf16["casts"]["cast_bytes_ratio"] > 0  # the cast ledger runs by default

    bad = by_variant["far_flips"]
    assert bad["status"] == "fail"
    assert bad["reason"].startswith("topk.tie_recall_min = ")
    assert bad["closest"]["metric"] == "tie_recall_min"
    assert bad["reason"] in [v["text"] for v in bad["violations"]]
    assert bad["topk"]["n_unexplained"] >= 1 and bad["topk"]["unexplained"][0]["direction"]

    skip = by_variant["bf16_fp32out"]
    assert skip["status"] == "skip" and "runs on cuda only" in skip["reason"]


def test_the_environment_is_asked_only_for_a_report_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's environment starts git (and nvidia-smi on CUDA): a run that writes nothing
    never builds it, whatever its verdict (the gate's verdict reads records only), and a run
    that writes a report, a markdown summary and a saved copy builds it once for all three."""
    from numcheck.plugin import reporting

    calls: list[str] = []
    real = reporting.environment

    def counted(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs["device"])
        return real(**kwargs)

    monkeypatch.setattr(reporting, "environment", counted)
    make_project(pytester, variants='"bf16", "far_flips"', planted=True)
    write_goldens(pytester)
    pytester.runpytest("--numcheck").assert_outcomes(passed=2, failed=1)
    pytester.runpytest("--numcheck", "-k", "bf16").assert_outcomes(passed=1)
    assert calls == []
    pytester.runpytest("--numcheck", "--numcheck-report", "out/r.json",
                       "--numcheck-markdown", "out/r.md",
                       "--numcheck-save-dir", "runs").assert_outcomes(passed=2, failed=1)
    assert calls == ["cpu"]
    assert json.loads((pytester.path / "out" / "r.json").read_text())["environment"][
        "device"] == "cpu"


def test_report_names_errors_without_verdict(pytester: pytest.Pytester) -> None:
    make_project(pytester)  # no golden yet
    pytester.runpytest("--numcheck", "--numcheck-report", "r.json")
    recs = records(pytester.path / "r.json")
    assert {r["status"] for r in recs} == {"error"}
    assert {r["error_kind"] for r in recs} == {"GoldenMissing"}
    assert "--numcheck-regen" in recs[0]["reason"]


def test_report_options_need_numcheck(pytester: pytest.Pytester) -> None:
    for option in ("--numcheck-report", "--numcheck-markdown", "--numcheck-baseline"):
        result = pytester.runpytest(option, "x.json")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*{option} only works together with --numcheck*"])


# -- markdown, terminal, junitxml ------------------------------------------------------


def test_markdown_failing_first_and_step_summary(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(pytester, variants='"tf32", "mask_off_by_one"', planted=True, mhc=True)
    write_goldens(pytester)
    step = pytester.path / "step-summary.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result = pytester.runpytest("--numcheck", "--numcheck-markdown", "summary.md")
    result.assert_outcomes(passed=4, failed=1)
    text = (pytester.path / "summary.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "## numcheck: FAIL (1 failed, 4 passed)"
    assert "### Failing checks" in lines
    fail_line = next(x for x in lines if x.startswith("- **FAIL**"))
    assert "`indexer::tiny::mask_off_by_one[cpu]`: logits.inf_mask" in fail_line
    # One table per op, failing rows first.
    indexer_rows = [x for x in lines[lines.index("### indexer"):] if x.startswith("| indexer::")]
    assert [r.split(" | ")[1] for r in indexer_rows] == ["mask_off_by_one", "fp32", "tf32"]
    assert "### mhc_pre" in lines
    # Appended to the GitHub step summary, after what was there.
    assert step.read_text() == "earlier step\n" + text + "\n"


def test_terminal_summary_agrees_with_markdown(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"bf16", "far_flips"', planted=True,
                 extra="[tiny.budget.far_flips.topk]\ntie_band_rel = 0.05\n")
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-markdown", "s.md")
    md_rows = [
        [c.strip() for c in line.strip("|").split(" | ")]
        for line in (pytester.path / "s.md").read_text().splitlines()
        if line.startswith("| indexer::")
    ]
    out = result.stdout.lines
    start = next(i for i, x in enumerate(out) if x.startswith("case ")) + 2
    term_rows = [out[i] for i in range(start, start + len(md_rows))]
    assert len(md_rows) == 3
    for md, term in zip(md_rows, term_rows, strict=True):
        # Every markdown cell appears, in order, in the terminal row.
        pos = 0
        for cell in md:
            found = term.find(cell, pos)
            assert found >= 0, (cell, term)
            pos = found + len(cell)
    assert md_rows[0][-1] == "FAIL" and term_rows[0].endswith("FAIL")


def test_junitxml_carries_key_metrics(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"bf16"')
    write_goldens(pytester)
    pytester.runpytest("--numcheck", "--junitxml", "junit.xml")
    root = ET.parse(pytester.path / "junit.xml").getroot()
    cases = {tc.get("name"): tc for tc in root.iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["bf16[cpu]"].iter("property")}
    assert props["numcheck_verdict"] == "PASS"
    assert props["numcheck_closest"].startswith("logits.")
    for name in ("calc_diff", "rel_fro", "recall_min", "tie_recall_min"):
        float(props[f"numcheck_{name}"])
    # The whole record travels to the controller on the report, but junit stays readable.
    assert "numcheck_record" not in props and "numcheck_goldens" not in props


# -- baseline drift --------------------------------------------------------------------


def test_baseline_gate_pass_regression_improvement(pytester: pytest.Pytester) -> None:
    noisy_project(pytester, 1e-4)
    pytester.runpytest("--numcheck", "--numcheck-regen")
    base = pytester.runpytest("--numcheck", "--numcheck-report", "base.json")
    base.assert_outcomes(passed=2)

    # Same numbers: passes, and says so.
    result = pytester.runpytest("--numcheck", "--numcheck-baseline", "base.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*drift vs base.json: PASS (0 regression(s); 2 same*"])

    # 3x the noise: calc_diff grows ~9x: the items pass their budgets, the gate fails.
    noisy_project(pytester, 3e-4)
    result = pytester.runpytest("--numcheck", "--numcheck-baseline", "base.json",
                                "--numcheck-report", "new.json", "--numcheck-markdown", "new.md")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*drift vs base.json: FAIL (1 regression(s)*",
        ("*indexer::tiny::noisy[[]cpu[]]*regression*logits.calc_diff * -> * (grew *x, rule: > "
        "1.25x on same device)"),
    ])
    new = load_report(pytester.path / "new.json")
    assert not new.passed and new.drift is not None
    assert new.drift.regressions[0].startswith("indexer::tiny::noisy[cpu]: logits.calc_diff")
    md = (pytester.path / "new.md").read_text()
    assert md.startswith("## numcheck: FAIL (1 drift regression(s) vs baseline, 2 passed")
    assert "### Drift vs baseline base.json" in md

    # Less noise than the baseline: an improvement passes.
    noisy_project(pytester, 2e-5)
    result = pytester.runpytest("--numcheck", "--numcheck-baseline", "base.json")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*drift vs base.json: PASS*1 improved*",
                                 "*noisy*improved*logits.calc_diff*"])


def test_drift_rules_ini_loosens_the_gate(pytester: pytest.Pytester) -> None:
    noisy_project(pytester, 1e-4)
    pytester.runpytest("--numcheck", "--numcheck-regen")
    pytester.runpytest("--numcheck", "--numcheck-report", "base.json")
    noisy_project(pytester, 3e-4)
    project_ini(pytester, ini="numcheck_drift_rules = same_device_factor=20\n")
    result = pytester.runpytest("--numcheck", "--numcheck-baseline", "base.json")
    assert result.ret == pytest.ExitCode.OK


def test_bad_baseline_is_a_usage_error(pytester: pytest.Pytester) -> None:
    make_project(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-baseline", "nowhere.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([("*--numcheck-baseline *nowhere.json: no such report file. "
                                  "Fix: pass the path a run wrote with --numcheck-report*")])
    (pytester.path / "junk.json").write_text('{"records": []}')
    result = pytester.runpytest("--numcheck", "--numcheck-baseline", "junk.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*junk.json: not a numcheck report*"])
    pytester.makeini("[pytest]\nnumcheck_drift_rules = calc_diff_factr=3\n")
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*numcheck_drift_rules: drift rule 'calc_diff_factr=3'*"])


# -- pytest-xdist ----------------------------------------------------------------------


def xdist_project(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"bf16", "tf32", "bf16_fp32out", "far_flips"', mhc=True,
                 planted=True, extra="[tiny.budget.far_flips.topk]\ntie_band_rel = 0.05\n")
    (pytester.path / "cases" / "more.toml").write_text(
        TINY_INDEXER.replace("[tiny]", "[tiny2]").format(variants='"bf16"', next_n=2, extra="")
    )


@pytest.mark.slow
def test_xdist_regenerates_safely_and_merges_the_records_of_a_serial_run(
    pytester: pytest.Pytester,
) -> None:
    """One xdist run (each worker spends seconds importing torch), two questions.

    Concurrent regeneration: two workers regenerate the same golden at once (tiny's checks
    go to both): one whole file each, no temporary or lock file left, equal to what one more
    regeneration writes; a golden no case uses is reported by the controller, which
    collects nothing. Merging: the controller's records, summary and markdown are those of
    the same run made serially. Marked slow (two workers that each import torch): the
    README's test command leaves it out, .ci/run runs it (`pytest -m slow`), with the worker
    crash below."""
    from numcheck.cases import load_cases
    from numcheck.goldens.files import load_golden

    xdist_project(pytester)
    orphan = golden(pytester, "gone")
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"not even a golden")
    parallel = pytester.runpytest("-p", "xdist", "-n", "2", "--numcheck", "--numcheck-regen",
                                  "--numcheck-report", "parallel.json",
                                  "--numcheck-markdown", "parallel.md")
    parallel.assert_outcomes(passed=7, failed=1, skipped=1)
    created = [f"golden created: goldens/{g}.safetensors"
               for g in ("indexer/tiny", "indexer/tiny2", "mhc_pre/tiny-mhc")]
    parallel.stdout.fnmatch_lines(created)
    parallel.stdout.fnmatch_lines(["*1 stale golden(s)*", "  goldens/indexer/gone.safetensors"])
    assert load_report(pytester.path / "parallel.json").goldens_regenerated == {
        g.removeprefix("golden created: "): True for g in created
    }
    b = records(pytester.path / "parallel.json")
    tiny = [r for r in b if r["case"] == "tiny"]
    assert {r["worker"] for r in tiny} == {"gw0", "gw1"}  # both workers regenerated it
    orphan.unlink()
    goldens = pytester.path / "goldens"
    files = sorted(str(p.relative_to(goldens)) for p in goldens.rglob("*") if p.is_file())
    assert files == sorted(g.split("goldens/")[1] for g in created)  # no temporary or lock file
    for case in load_cases(pytester.path / "cases"):
        load_golden(golden(pytester, case.id, case.op), case=case.id,
                    regen_hint="")  # whole: the content hash holds
    first = {g: (pytester.path / g.split(": ")[1]).read_bytes() for g in created}

    # The same run, serially: the same records, only where they ran differs. Its checks
    # ran against the goldens the workers wrote, each equal to what one more regeneration
    # writes: nothing rewritten, byte for byte.
    serial = pytester.runpytest("--numcheck", "--numcheck-regen", "--numcheck-report",
                                "serial.json")
    serial.assert_outcomes(passed=7, failed=1, skipped=1)
    serial.stdout.fnmatch_lines([g.replace("created", "unchanged") for g in created],
                                consecutive=False)
    assert {g: (pytester.path / g.split(": ")[1]).read_bytes() for g in created} == first
    a = records(pytester.path / "serial.json")
    assert len(a) == 9
    assert [verdict_fields(r) for r in a] == [verdict_fields(r) for r in b]
    assert {r["worker"] for r in a} == {None}
    assert {r["worker"] for r in b} == {"gw0", "gw1"}
    assert json.loads((pytester.path / "parallel.json").read_text())["environment"]["workers"] == 2
    # The controller prints the merged summary, the same rows as the serial run's.
    parallel.stdout.fnmatch_lines(["*numcheck summary (cpu*", "*far_flips*FAIL",
                                   "numcheck report written: *parallel.json"])
    assert "## numcheck: FAIL (1 failed, 7 passed, 1 skipped)" in (
        pytester.path / "parallel.md").read_text()


CRASH_CONFTEST = """
import os
from numcheck.ops.registry import Variant, add_variant, get_op

def dies(inputs, p):
    os._exit(3)

if "dies" not in get_op("indexer").variants:
    add_variant("indexer", Variant("dies", dies, "fp32"))
"""


@pytest.mark.slow  # starts a pytest-xdist worker, which imports torch
def test_xdist_worker_crash_is_an_error_record(pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"dies"')
    pytester.makeconftest(CRASH_CONFTEST)
    pytester.runpytest("--numcheck", "--numcheck-regen", "-k", "fp32")
    # One worker, not replaced when it dies: it runs fp32, then dies (each started worker
    # costs seconds of importing torch).
    result = pytester.runpytest("-p", "xdist", "-n", "1", "--max-worker-restart", "0",
                                "--numcheck", "--numcheck-report", "r.json")
    result.assert_outcomes(passed=1, failed=1)
    report = load_report(pytester.path / "r.json")
    crashed = next(r for r in report.records if r.variant == "dies")
    assert (crashed.status, crashed.error_kind, crashed.case) == ("error", "crash", "tiny")
    assert "crashed while running 'cases/indexer.toml::tiny::dies[cpu]'" in crashed.reason
    assert crashed.worker is not None and crashed.worker.startswith("gw")
    assert not report.passed
    result.stdout.fnmatch_lines(["tiny*dies*cpu*worker 'gw*' crashed*CRASH"])


def test_xdist_pins_each_worker_to_its_gpu(pytester: pytest.Pytester) -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices: worker -> GPU pinning is tested on CPU in "
                    "test_workers.py")
    make_project(pytester, variants='"bf16", "tf32", "bf16_fp32out"', mhc=True)
    pytester.makeini("[pytest]\n")  # no --numcheck-device cpu: auto picks cuda
    pytester.runpytest("--numcheck", "--numcheck-regen")
    result = pytester.runpytest("-p", "xdist", "-n", "2", "--numcheck",
                                "--numcheck-report", "gpu.json")
    result.assert_outcomes(passed=6)
    recs = records(pytester.path / "gpu.json")
    assert {r["device"] for r in recs} == {"cuda"}
    assert {(r["worker"], r["device_index"]) for r in recs} == {("gw0", 0), ("gw1", 1)}
