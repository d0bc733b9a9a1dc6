"""The casts and kernels gates: case-file syntax, defaults, violations, and the plugin."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from test_plugin import CONFTEST, write_goldens

from numcheck.cases import CaseFileError, load_case_file
from numcheck.gates import GATES
from numcheck.ops.registry import get_op
from numcheck.overhead.casts import CastLedger
from numcheck.overhead.gate import (
    OverheadBudget,
    OverheadReport,
    audit_variant,
    default_gates,
    default_overhead,
    overhead_violations,
)
from numcheck.overhead.kernels import COPY, CUDA_CORE_GEMM, ELEMENTWISE, KernelAudit, KernelRecord

CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
variants = [{variants}]
{extra}
"""


def write(tmp_path: Path, extra: str, variants: str = '"bf16", "bf16_roundtrip"') -> Path:
    path = tmp_path / "mhc.toml"
    path.write_text(CASE.format(variants=variants, extra=extra))
    return path


# -- case files ------------------------------------------------------------------------


def test_gates_are_registered_for_expect_tables() -> None:
    assert GATES["casts"].metrics == ("round_trips", "no_op_casts", "cast_bytes_ratio",
                                      "input_copies")
    assert GATES["kernels"].metrics == ("cuda_core_gemm", "copy_share")
    assert default_gates("cpu") == {"casts"} and default_gates("cuda") == {"casts", "kernels"}


def test_defaults_by_precision(tmp_path: Path) -> None:
    (case,) = load_case_file(write(tmp_path, "", '"bf16", "tf32"'))
    assert case.overhead["fp32"] == default_overhead("fp32")
    assert case.overhead["bf16"] == default_overhead("bf16")
    assert case.overhead["fp32"].cuda_core_gemm is True
    assert case.overhead["bf16"].cuda_core_gemm is False
    assert case.overhead["tf32"].cuda_core_gemm is False
    assert case.overhead["bf16"].round_trips is False and case.overhead["fp32"].no_op_casts is False
    assert default_overhead("fp32").max_cast_bytes_ratio is not None
    assert default_overhead("bf16").max_input_copies == 1.0


def test_overhead_table_is_parsed(tmp_path: Path) -> None:
    extra = """
[tiny-mhc.overhead.bf16_roundtrip]
round_trips = true
max_cast_bytes_ratio = 6
[tiny-mhc.overhead.fp32]
cuda_core_gemm = false
max_copy_share = 0.25
"""
    (case,) = load_case_file(write(tmp_path, extra))
    assert case.overhead["bf16_roundtrip"] == replace(
        default_overhead("bf16"), round_trips=True, max_cast_bytes_ratio=6.0)
    assert case.overhead["fp32"] == replace(
        default_overhead("fp32"), cuda_core_gemm=False, max_copy_share=0.25)
    assert case.overhead["bf16"] == default_overhead("bf16")


@pytest.mark.parametrize(
    ("extra", "key", "message"),
    [
        ("overhead = 3", "overhead", "expected a table"),
        ("[tiny-mhc.overhead.tf32]\nround_trips = true", "overhead.tf32",
         "'tf32' is not a variant this case runs"),
        ("[tiny-mhc.overhead]\nbf16 = 1", "overhead.bf16", "expected a table"),
        ("[tiny-mhc.overhead.bf16]\nround_trip = true", "overhead.bf16.round_trip",
         "unknown overhead key 'round_trip'. Fix: use one of: round_trips, no_op_casts,"),
        ("[tiny-mhc.overhead.bf16]\nround_trips = 0", "overhead.bf16.round_trips",
         "expected true or false, got 0. Fix: write round_trips = false"),
        ('[tiny-mhc.overhead.bf16]\nmax_copy_share = "20%"', "overhead.bf16.max_copy_share",
         "expected a number"),
        ("[tiny-mhc.overhead.bf16]\nmax_copy_share = 1.5", "overhead.bf16.max_copy_share",
         "1.5 is out of range. Fix: use between 0 and 1"),
        ("[tiny-mhc.overhead.bf16]\nmax_cast_bytes_ratio = -1", "overhead.bf16.max_cast_bytes_ratio",
         "-1.0 is out of range. Fix: use a finite number >= 0"),
    ],
)
def test_bad_overhead_tables_name_file_case_key_and_fix(
    tmp_path: Path, extra: str, key: str, message: str
) -> None:
    with pytest.raises(CaseFileError) as info:
        load_case_file(write(tmp_path, extra))
    text = str(info.value)
    assert f"mhc.toml: case 'tiny-mhc': key '{key}':" in text
    assert message in text and "Fix:" in text


# -- violations ------------------------------------------------------------------------


def mhc_report(variant: str, kernels: KernelAudit | None = None) -> OverheadReport:
    op = get_op("mhc_pre")
    p = op.resolve_params(None, {"tokens": 8, "hidden": 64})
    report = audit_variant(op.variants[variant].fn, op.make_inputs(p, 0), p)
    report.kernels = kernels
    return report


def test_roundtrip_variant_violates_casts_round_trips_and_bf16_does_not() -> None:
    bad = mhc_report("bf16_roundtrip")
    (v,) = overhead_violations(bad, default_overhead("bf16"), {"casts"})
    assert (v.key, v.value, v.limit) == ("casts.round_trips", 1, 0)
    assert v.detail.startswith("bf16 -> fp32 -> bf16 of [8, 256] at numcheck/ops/mhc.py:")
    assert overhead_violations(bad, OverheadBudget(round_trips=True), {"casts"}) == []
    assert overhead_violations(bad, default_overhead("bf16"), {"kernels"}) == []
    assert overhead_violations(mhc_report("bf16"), default_overhead("bf16"), {"casts"}) == []
    assert overhead_violations(mhc_report("fp32"), default_overhead("fp32"), {"casts"}) == []


def test_cast_bytes_ratio_names_the_largest_conversion() -> None:
    bad = mhc_report("bf16_roundtrip")
    good = mhc_report("bf16")
    # Same op, same minimum bytes; the round trip moves its [T, n*C] tensor twice more.
    assert bad.min_bytes == good.min_bytes
    assert bad.ledger.bytes_moved - good.ledger.bytes_moved == 8 * 256 * (4 + 2)
    budget = OverheadBudget(round_trips=True, max_cast_bytes_ratio=good.cast_bytes_ratio * 1.1)
    assert overhead_violations(good, budget, {"casts"}) == []
    (v,) = overhead_violations(bad, budget, {"casts"})
    assert v.key == "casts.cast_bytes_ratio" and v.value == pytest.approx(bad.cast_bytes_ratio)
    assert "largest: fp32 -> bf16 of [24, 256] at numcheck/ops/mhc.py:" in v.detail
    assert f"vs the op's minimum {bad.min_bytes / 1e3:.1f} kB" in v.detail


def test_no_op_conversion_violates_by_default() -> None:
    with CastLedger() as ledger:
        torch.ones(4).to(torch.float32, copy=True)
    report = OverheadReport(ledger, min_bytes=16)
    (v,) = overhead_violations(report, default_overhead("fp32"), {"casts"})
    assert v.key == "casts.no_op_casts" and "fp32 copy of [4] at tests/test_overhead.py:" in v.detail
    assert overhead_violations(report, OverheadBudget(no_op_casts=True), {"casts"}) == []


def fake_audit() -> KernelAudit:
    return KernelAudit(5, [
        KernelRecord("ampere_sgemm_128x64_nn", CUDA_CORE_GEMM, 1, 50.0, "numcheck/ops/x.py:3"),
        KernelRecord("bfloat16_copy_kernel_cuda", COPY, 2, 40.0, "numcheck/ops/mhc.py:99"),
        KernelRecord("vectorized_elementwise_kernel", ELEMENTWISE, 4, 10.0),
    ])


def test_kernel_gate_cuda_core_gemm_and_copy_share() -> None:
    report = mhc_report("bf16_roundtrip", fake_audit())
    budget = OverheadBudget(round_trips=True, cuda_core_gemm=False, max_copy_share=0.2)
    found = {v.key: v for v in overhead_violations(report, budget, {"casts", "kernels"})}
    assert set(found) == {"kernels.cuda_core_gemm", "kernels.copy_share"}
    gemm = found["kernels.cuda_core_gemm"]
    assert gemm.describe() == (
        "kernels.cuda_core_gemm = 1 > budget 0: ampere_sgemm_128x64_nn runs on CUDA cores, "
        "50.0 us per call (50% of the op) at numcheck/ops/x.py:3"
    )
    share = found["kernels.copy_share"]
    assert share.value == pytest.approx(0.4) and share.limit == 0.2
    assert "40.0 of 100.0 us per call in cast/copy kernels; top: bfloat16_copy_kernel_cuda" in (
        share.detail)
    assert "largest conversion: fp32 -> bf16 of [24, 256] at numcheck/ops/mhc.py:" in share.detail
    # fp32 variants may use CUDA cores; no report from the profiler means no kernel verdict.
    assert overhead_violations(report, default_overhead("fp32"), {"kernels"}) == []
    assert overhead_violations(mhc_report("bf16"), budget, {"kernels"}) == []


def test_report_lines_show_ledger_and_kernels() -> None:
    report = mhc_report("bf16_roundtrip", fake_audit())
    text = "\n".join(report.lines())
    assert "cast ledger: 5 entries (5 casts, 0 copies)" in text
    assert "round trips 1, no-op conversions 0" in text
    assert "ROUND TRIP of #0" in text
    assert "kernels (5 calls profiled): GEMM (CUDA cores) 50.0 us (50%)" in text
    assert report.as_dict()["round_trips"][0].startswith("bf16 -> fp32 -> bf16 of [8, 256]")


# -- through pytest ----------------------------------------------------------------------


def project(pytester: pytest.Pytester, extra: str = "", variants: str = '"bf16_roundtrip"') -> None:
    pytester.makeini("[pytest]\naddopts = --numcheck-device cpu\n")
    (pytester.path / "cases").mkdir(exist_ok=True)
    (pytester.path / "cases" / "mhc.toml").write_text(CASE.format(variants=variants, extra=extra))
    pytester.makeconftest(CONFTEST)
    write_goldens(pytester)


def test_round_trip_variant_fails_with_its_source_line(pytester: pytest.Pytester) -> None:
    project(pytester, variants='"bf16", "bf16_roundtrip"')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=2, failed=1)
    line = _line("numcheck/ops/mhc.py", "x_flat = xf.to(torch.bfloat16)")
    upcast = _line("numcheck/ops/mhc.py", 'xf = inputs["x"].flatten(1).float()', after=line - 5)
    result.stdout.fnmatch_lines([
        "numcheck FAIL mhc_pre::tiny-mhc::bf16_roundtrip[[]cpu[]]",
        (f"  worst: casts.round_trips = 1 > budget 0: bf16 -> fp32 -> bf16 of [[]8, 256[]] at "
        f"numcheck/ops/mhc.py:{line} (back; there at numcheck/ops/mhc.py:{upcast}), 12.3 kB moved "
        "while the bf16 original was still alive: use it (or a view of it)"),
        "  case:        cases/mhc.toml [[]tiny-mhc[]]",
        "  cast ledger: 5 entries (5 casts, 0 copies)*round trips 1*",
        (f"*fp32 -> bf16*[[]8, 256[]]*numcheck/ops/mhc.py:{line}  x_flat = xf.to(torch.bfloat16)"
        "  ROUND TRIP of #0"),
    ])
    result.stdout.fnmatch_lines([
        "*bf16_roundtrip*casts.round_trips 1/0*FAIL",
        "case*variant*device*casts*copies*moved*x min bytes*round trips*GEMM kernels*copy share",
        "*",
        "mhc_pre::tiny-mhc  fp32 * cpu * 2 * 0 * 15.4 kB * 0.49 * 0 * - * -",
        "mhc_pre::tiny-mhc  bf16 * cpu * 4 * 0 * 53.4 kB * 1.71 * 0 * - * -",
        "mhc_pre::tiny-mhc  bf16_roundtrip  cpu * 5 * 0 * 65.7 kB * 2.10 * 1 * - * -",
    ])


def _line(path: str, text: str, after: int = 0) -> int:
    root = Path(__file__).resolve().parent.parent
    for number, line in enumerate((root / path).read_text().splitlines(), 1):
        if number > after and text in line:
            return number
    raise AssertionError(text)


def test_shipped_style_expectation_is_a_strict_xfail(pytester: pytest.Pytester) -> None:
    project(pytester, 'expect.bf16_roundtrip = { fails = ["casts.round_trips"], reason = "seed" }')
    result = pytester.runpytest("--numcheck", "-rx")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*expected failure (casts.round_trips): seed*"])


def test_expectation_fails_when_the_gate_stops_catching_it(pytester: pytest.Pytester) -> None:
    extra = ('expect.bf16_roundtrip = { fails = ["casts.round_trips"], reason = "seed" }\n'
             "[tiny-mhc.overhead.bf16_roundtrip]\nround_trips = true")
    project(pytester, extra)
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["numcheck XPASS(strict) mhc_pre::tiny-mhc::bf16_roundtrip*"])


def test_explain_prints_the_ledger_without_gating(pytester: pytest.Pytester) -> None:
    project(pytester, variants='"bf16", "bf16_roundtrip"')
    result = pytester.runpytest("--numcheck", "--numcheck-explain", "-k", "roundtrip")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*numcheck explain: cast ledger and kernels (not gated)*",
        "mhc_pre::tiny-mhc::bf16_roundtrip[[]cpu[]]",
        "  cast ledger: 5 entries (5 casts, 0 copies)*round trips 1, no-op conversions 0",
        "*#  kind  conversion*where",
        "*ROUND TRIP of #0",
    ])
    assert "tiny-mhc::bf16[" not in result.stdout.str()  # only what -k selects


def test_explain_needs_numcheck(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--numcheck-explain")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--numcheck-explain only works together with --numcheck*"])


def test_value_check_compares_in_full_only_after_a_sampled_match() -> None:
    # The casts gate runs on every `pytest --numcheck`: the value check must stay a few
    # sampled elements per cast unless a round trip is there (timings: benchmarks/ledger_cost.py).
    op = get_op("mhc_pre")
    p = op.resolve_params("v4pro", {"tokens": 16})
    inputs = op.make_inputs(p, 0)
    for variant, full in (("bf16", 0), ("tf32", 0), ("fp32", 0)):
        with CastLedger() as ledger:
            op.variants[variant].fn(inputs, p)
        assert ledger.value_comparisons == full, variant
    x = inputs["x"]
    with CastLedger() as ledger:
        (x.float() * 1.0).to(torch.bfloat16)
    assert ledger.value_comparisons == 1 and len(ledger.round_trips) == 1
