"""The determinism and batch-invariance gates under ``pytest --numcheck`` (pytester): a
project that registers the planted counter-examples through the public API, its failures'
messages, the summary table, the JSON report, the markdown and HTML, and expectations."""

from __future__ import annotations

import json

import pytest

from tests.caseproject import case_project

#: The project's conftest: numcheck's hook, numcheck's public API, the planted variants.
CONFTEST = """
import numcheck


def pytest_numcheck_register(registry: numcheck.Registrar) -> None:
    from tests import planted_invariance

    for op, variants in planted_invariance.PLANTED.items():
        for name, (fn, precision, _) in variants.items():
            registry.add_variant(op, numcheck.Variant(name, fn, precision))
"""

CASE = """
[tiny-idx]
op = "indexer"
shape = {{ batch = 4, max_context = 256, heads = 8, head_dim = 32, index_topk = 16, next_n = 2 }}
variants = ["bf16", "atomic_heads", "splitk_by_batch"]
{keys}
"""


def project(pytester: pytest.Pytester, keys: str) -> None:
    from numcheck.cases import load_cases
    from numcheck.check.make_golden import write_golden
    from numcheck.check.run import CaseInputs
    from numcheck.goldens.files import golden_path
    from numcheck.ops import registry
    from tests import planted_invariance

    case_project(pytester, {"indexer.toml": CASE.format(keys=keys)}, conftest=CONFTEST)
    with registry.isolated():  # the case names planted variants: load it with them
        for op, variants in planted_invariance.PLANTED.items():
            for name, (fn, precision, _) in variants.items():
                registry.add_variant(op, registry.Variant(name, fn, precision))
        (case,) = load_cases(pytester.path / "cases")
        op = registry.get_op(case.op)
        path = golden_path(pytester.path / "goldens", op.name, case.id)
        assert write_golden(path, op, case, "cpu", CaseInputs(op, case))


def test_each_gate_fails_its_planted_variant_and_passes_the_others(
        pytester: pytest.Pytester) -> None:
    project(pytester, "deterministic = true\nbatch_invariant = true")
    report, markdown, html = (pytester.path / n for n in ("r.json", "s.md", "r.html"))
    result = pytester.runpytest("--numcheck", "--numcheck-report", str(report),
                                "--numcheck-markdown", str(markdown), "--numcheck-html", str(html))
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny-idx::atomic_heads[[]cpu[]]",
        "  worst: determinism.runs_differing = * > budget 0 (seed 0): run * of 6 differs from "
        "run 1: logits: * of 2048 elements differ (max |diff| *, first at *)*The variant is not "
        "deterministic*",
    ])
    result.stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny-idx::splitk_by_batch[[]cpu[]]",
        "  worst: batch_invariance.requests_differing = * > budget 0 (seed 0): request * alone "
        "differs from its rows in the batch of 4: logits: *The variant is not batch-invariant*",
        "  case:        cases/indexer.toml [[]tiny-idx[]]",
        "  budget:      cases/indexer.toml:7 ([[]tiny-idx[]] batch_invariant holds "
        "'splitk_by_batch' on cpu: bitwise equal, no tolerance)",
        "  reproduce:   pytest --numcheck --numcheck-device cpu "
        "'cases/indexer.toml::tiny-idx::splitk_by_batch[[]cpu[]]'",
        "  regenerate:  *",
        "  next step:   the kernel is meant to be batch-invariant -> fix it (a split, tile and "
        "kernel that depend on the shape of a request, not on the batch), then run 'reproduce'",
        "               it is not meant to be -> drop 'splitk_by_batch' from batch_invariant in "
        "cases/indexer.toml [[]tiny-idx[]] (docs/cases.md, \"Determinism and batch "
        "invariance\")",
        "  obtained:    *",
    ])
    result.stdout.fnmatch_lines([
        "*numcheck determinism and batch invariance*",
        "case*variant*device*outputs compared*runs*deterministic*requests alone (batch)*"
        "batch-invariant",
        "*",
        "indexer::tiny-idx*bf16 *cpu*logits, topk*6*yes*0, 2, 3 (4)*yes",
    ])
    result.stdout.fnmatch_lines(["indexer::tiny-idx*atomic_heads*cpu*logits, topk*6*NO: * of 5 "
                                 "later runs differ; logits: *"])
    records = {r["variant"]: r for r in json.loads(report.read_text())["records"]}
    det = records["atomic_heads"]["invariance"]["determinism"]
    # two random orders of 8 partials can give the same bits: most later runs differ
    assert det["runs"] == 6 and 1 <= det["runs_differing"] <= 5
    assert det["differences"][0]["outputs"][0]["output"] == "logits"
    bat = records["splitk_by_batch"]["invariance"]["batch_invariance"]
    assert bat["batch"] == 4 and bat["requests"] == [0, 2, 3] and bat["requests_differing"] >= 1
    assert records["bf16"]["invariance"]["batch_invariance"]["requests_differing"] == 0
    assert records["bf16"]["not_produced"] == []
    assert "### Determinism and batch invariance" in markdown.read_text()
    page = html.read_text()
    assert "<h2>Determinism and batch invariance</h2>" in page
    assert "determinism and batch invariance (seed 0" in page


def test_off_by_default_and_an_expectation_names_the_gate(pytester: pytest.Pytester) -> None:
    project(pytester, 'deterministic = ["atomic_heads"]\n'
            'expect.atomic_heads = { gates = ["determinism"], reason = "planted atomics" }')
    result = pytester.runpytest("--numcheck", "-rx")
    # splitk_by_batch passes: batch invariance is off for it (off by default).
    result.assert_outcomes(passed=3, xfailed=1)
    result.stdout.fnmatch_lines(["*expected failure (determinism.runs_differing): planted "
                                 "atomics*"])


def test_a_gpu_model_the_keys_do_not_name_is_measured_and_reported_never_failed(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The keys name the classes they were measured on. A run on a GPU model they do not
    name (a B200, simulated on the CPU through the device-name hook) measures both gates and
    reports the planted variants' differences, and fails none of them: cuBLAS picks its
    kernels per GPU model, so another model's measurement is no verdict here. On a named
    class the same keys fail them."""
    keys = ('deterministic = { devices = ["cpu", "H200"] }\n'
            'batch_invariant = { devices = ["cpu", "H200"] }')
    project(pytester, keys)
    monkeypatch.setenv("NUMCHECK_DEVICE_NAME", "NVIDIA H200")
    pytester.runpytest("--numcheck").assert_outcomes(passed=2, failed=2)
    monkeypatch.setenv("NUMCHECK_DEVICE_NAME", "NVIDIA B200")
    result = pytester.runpytest("--numcheck", "--numcheck-report", "r.json")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([
        "indexer::tiny-idx*atomic_heads*cpu*NO: * of 5 later runs differ*(not gated on this "
        "GPU model)*",
        ("numcheck invariance: the deterministic / batch_invariant keys of 4 check(s) name no "
         "B200: measured and reported, not gated. Measure B200's and name it: python -m "
         "numcheck onboard --only invariance"),
    ])
    records = {r["variant"]: r for r in json.loads((pytester.path / "r.json").read_text())[
        "records"]}
    det = records["atomic_heads"]["invariance"]["determinism"]
    assert 1 <= det["runs_differing"] <= 5 and det["gated"] is False
    assert det["why"].startswith("deterministic names no B200 (cpu, H200 only)")


SWEEP_CASE = """
[tiny-idx]
op = "indexer"
shape = {{ max_context = 256, heads = 8, head_dim = 32, index_topk = 16, next_n = 2 }}
sweep.batch = [1, 4]
variants = ["splitk_by_batch"]
batch_invariant = ["splitk_by_batch"]
expect.splitk_by_batch = {{ gates = ["batch_invariance"], reason = "planted"{points} }}
"""


@pytest.mark.parametrize("points", ["", ', points = ["batch4"]'])
def test_an_expectation_scoped_to_sweep_points(pytester: pytest.Pytester, points: str) -> None:
    """A kernel that picks its split by the batch is batch-invariant with one request: an
    expectation of the whole sweep XPASSes there, one scoped to the points it fails at holds,
    and the other points are ordinary checks (they pass)."""
    from tests import planted_invariance

    from numcheck.cases import load_cases
    from numcheck.check.make_golden import write_golden
    from numcheck.check.run import CaseInputs
    from numcheck.goldens.files import golden_path
    from numcheck.ops import registry

    pytester.makeini("[pytest]\naddopts = --numcheck-device cpu\n")
    (pytester.path / "cases").mkdir()
    (pytester.path / "cases" / "indexer.toml").write_text(SWEEP_CASE.format(points=points))
    pytester.makeconftest(CONFTEST)
    with registry.isolated():
        for op, variants in planted_invariance.PLANTED.items():
            for name, (fn, precision, _) in variants.items():
                registry.add_variant(op, registry.Variant(name, fn, precision))
        cases = load_cases(pytester.path / "cases")
        assert [c.id for c in cases] == ["tiny-idx@batch1", "tiny-idx@batch4"]
        assert [bool(c.expect) for c in cases] == [not points, True]
        for case in cases:
            op = registry.get_op(case.op)
            assert write_golden(golden_path(pytester.path / "goldens", op.name, case.id), op,
                                case, "cpu", CaseInputs(op, case))
    result = pytester.runpytest("--numcheck", "-rxX", "-k", "splitk_by_batch")
    if points:
        result.assert_outcomes(passed=1, xfailed=1)
    else:  # at one request the planted split cannot show: the whole-sweep expectation fails
        result.assert_outcomes(failed=1, xfailed=1)
        result.stdout.fnmatch_lines(["*tiny-idx@batch1::splitk_by_batch*"])


def test_points_must_name_points_of_the_sweep(tmp_path: Path) -> None:
    from numcheck.cases import CaseFileError, load_case_file

    path = tmp_path / "c.toml"
    path.write_text(SWEEP_CASE.format(points=', points = ["batch7"]').replace(
        "splitk_by_batch", "bf16"))
    with pytest.raises(CaseFileError) as info:
        load_case_file(path)
    assert info.value.key == "expect.bf16.points"
    assert "'batch7' is not a point of the case's sweep" in str(info.value)
    assert "name points among: batch1, batch4" in str(info.value)
    path.write_text(path.read_text().replace("sweep.batch = [1, 4]\n", "")
                    .replace("shape = { ", "shape = { batch = 4, "))
    with pytest.raises(CaseFileError, match="the case sweeps nothing"):
        load_case_file(path)


def test_a_reference_failing_batch_invariance_is_told_to_list_the_variants() -> None:
    """``batch_invariant = true`` holds the reference too; where it fails, the next step says
    so (on a CPU torch's GEMMs are not batch-invariant for every op)."""
    from numcheck.report.render import invariance_steps

    steps = invariance_steps("batch_invariance", "fp32", "cases/m.toml", "m", reference=True)
    assert "'fp32' is the op's reference, which 'batch_invariant = true' holds too" in steps[-1]
    assert "list the variants meant to have it instead" in steps[-1]
    assert len(invariance_steps("batch_invariance", "bf16", "cases/m.toml", "m")) == 2
