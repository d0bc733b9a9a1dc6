"""One-time preparation through the plugin (pytester): the per-call ledger, the casts table,
explain output, the report, and timing that leaves the preparation out."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from numcheck.perf import timing
from numcheck.perf.timing import TimerRequest
from numcheck.report.htmlpage import render_html
from numcheck.report.records import load_report
from tests import prepared_variants
from tests.caseproject import NO_CACHE, case_project
from tests.faketimer import factory

CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
seeds = [{seeds}]
variants = [{variants}]
{extra}
"""

CONFTEST = """
from tests import prepared_variants

def pytest_numcheck_register(registry):
    for variant in prepared_variants.VARIANTS.values():
        registry.add_variant("mhc_pre", variant)
"""


def project(pytester: pytest.Pytester, variants: str, *, seeds: str = "0",
            extra: str = "") -> None:
    """A project whose case runs the test variants; its golden made as --numcheck-regen
    makes it (the reference on the CPU)."""
    from numcheck.cases import load_cases
    from numcheck.check.make_golden import write_golden
    from numcheck.check.run import CaseInputs
    from numcheck.goldens.files import golden_path
    from numcheck.ops import registry

    case_project(pytester, {"mhc.toml": CASE.format(variants=variants, seeds=seeds, extra=extra)},
                 conftest=CONFTEST, addopts=NO_CACHE)
    with registry.isolated():
        prepared_variants.register_all()
        (case,) = load_cases(pytester.path / "cases")
        op = registry.get_op("mhc_pre")
        assert write_golden(golden_path(pytester.path / "goldens", op.name, case.id), op,
                            case, "cpu", CaseInputs(op, case))
    prepared_variants.PREPARE_CALLS.clear()


def test_per_call_glue_fails_input_copies_and_the_same_work_prepared_passes(
    pytester: pytest.Pytester,
) -> None:
    project(pytester, '"glue_bf16", "prepared_bf16"')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "numcheck FAIL mhc_pre::tiny-mhc::glue_bf16[[]cpu[]]",
        ("  worst: casts.input_copies = 2 > budget 1: input 'hc_fn' was read 2.00 times over by "
        "casts/copies (fp32 copy of [[]256, 24[]] at *prepared_variants.py:*"),
    ])
    # The casts table gains a column for the check with a preparation; its per-call
    # columns hold no copy of hc_fn.
    result.stdout.fnmatch_lines([
        "*numcheck casts and copies*",
        ("case*variant*device*casts*copies*moved*x min bytes*round trips*GEMM kernels*"
        "copy share*prepared once"),
        "mhc_pre::tiny-mhc*glue_bf16*cpu*4*1*102.5 kB*3.28*0*-*-*-",
        "mhc_pre::tiny-mhc*prepared_bf16*cpu*3*0*16.5 kB*hc_fn: 1 cast, 1 copy, 86.0 kB",
    ])
    assert prepared_variants.PREPARE_CALLS == ["prepare"]  # once: one seed, one device


def test_a_per_call_copy_of_a_prepared_weight_is_a_copy_of_that_input(
    pytester: pytest.Pytester,
) -> None:
    project(pytester, '"copies_prepared"')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "numcheck FAIL mhc_pre::tiny-mhc::copies_prepared[[]cpu[]]",
        ("  worst: casts.input_copies = 2 > budget 1: input 'hc_fn' was read 2.00 times over by "
        "casts/copies (bf16 copy of [[]256, 24[]] at *prepared_variants.py:*"),
        ("  prepared once: hc_fn bf16 [[]256, 24[]] (was fp32 [[]24, 256[]]), 12.3 kB held; "
        "1 cast, 1 copy, 86.0 kB moved (fp32 copy of [[]256, 24[]] at *prepared_variants.py:*"),
        # The per-call ledger of the failure: the two copies, and no preparation in it.
        "  cast ledger: 5 entries (3 casts, 2 copies)*",
    ])


def test_explain_shows_the_preparation_apart_from_the_per_call_ledger(
    pytester: pytest.Pytester,
) -> None:
    project(pytester, '"prepared_bf16"')
    result = pytester.runpytest("--numcheck", "--numcheck-explain")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*numcheck explain: cast ledger and kernels (not gated)*",
        "mhc_pre::tiny-mhc::prepared_bf16[[]cpu[]]",
        "  cast ledger: 3 entries (3 casts, 0 copies)*",
        "*",
        ("  prepared once: hc_fn bf16 [[]256, 24[]] (was fp32 [[]24, 256[]]), 12.3 kB held; "
        "1 cast, 1 copy, 86.0 kB moved (*); not in the per-call ledger, not timed"),
        "*fp32 copy*[[]256, 24[]]*prepared_variants.py:*",
    ])


def test_report_and_html_carry_the_preparation(pytester: pytest.Pytester) -> None:
    project(pytester, '"prepared_bf16"')
    result = pytester.runpytest("--numcheck", "--numcheck-report", "out.json")
    result.assert_outcomes(passed=2)
    records = {r["variant"]: r for r in json.loads(
        (pytester.path / "out.json").read_text())["records"]}
    assert records["fp32"]["prepared"] is None
    prepared = records["prepared_bf16"]["prepared"]
    assert prepared["tensors"] == {"hc_fn": {
        "dtype": "bf16", "shape": [256, 24], "bytes": 12288,
        "replaces": {"dtype": "fp32", "shape": [24, 256]}}}
    assert (prepared["casts"], prepared["copies"]) == (1, 1)
    assert prepared["input_passes"] == {"hc_fn": 2.0}
    # The per-call section knows nothing of it.
    assert records["prepared_bf16"]["casts"]["input_passes"] == {"x": 1.0}
    # The page is drawn from the report alone (as `python -m numcheck html` draws it).
    page = render_html(load_report(pytester.path / "out.json"), plots=False)
    assert "prepared once (load time: not per call, not timed, not gated)" in page
    assert "replaces fp32 [24, 256]" in page


@pytest.fixture
def calls_the_timed_functions() -> Iterator[list[tuple[str, int]]]:
    """A fake timer (tests/faketimer.py) that first calls the two functions it is given
    to time, three times each, and logs how many preparations those calls made."""
    made: list[tuple[str, int]] = []
    fake = factory({"prepared_bf16": 1.2})

    def make(request: TimerRequest) -> object:
        for name, fn in ((request.reference_name, request.reference),
                         (request.variant_name, request.variant)):
            before = len(prepared_variants.PREPARE_CALLS)
            for _ in range(3):
                fn()
            made.append((name, len(prepared_variants.PREPARE_CALLS) - before))
        return fake(request)

    with timing.override(make):
        yield made


def test_timing_leaves_the_preparation_out(
    pytester: pytest.Pytester, calls_the_timed_functions: list[tuple[str, int]]
) -> None:
    project(pytester, '"prepared_bf16"', extra="[tiny-mhc.perf]\nrounds = 6\nwarmup = 1\n")
    result = pytester.runpytest("--numcheck", "--numcheck-perf")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["mhc_pre::tiny-mhc*prepared_bf16*cpu*fake*"])
    # The timed function of the variant ran (on prepared inputs: the kernel refuses the
    # op's own hc_fn) and prepared nothing; the one preparation came before.
    assert ("prepared_bf16", 0) in calls_the_timed_functions
    assert prepared_variants.PREPARE_CALLS == ["prepare"]


def test_speed_calibration_prepares_once_for_its_runs(
    pytester: pytest.Pytester, calls_the_timed_functions: list[tuple[str, int]]
) -> None:
    project(pytester, '"prepared_bf16"', extra="[tiny-mhc.perf]\nrounds = 6\nwarmup = 1\n")
    result = pytester.runpytest("--numcheck", "--numcheck-perf", "--numcheck-calibrate-speed=3")
    result.assert_outcomes(passed=2)
    # Three timing runs of the variant; one preparation for all of them, none while timed.
    assert calls_the_timed_functions.count(("prepared_bf16", 0)) == 3
    assert prepared_variants.PREPARE_CALLS == ["prepare"]
