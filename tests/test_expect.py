"""Known-bad variants in case files: ``expect.<variant> = { fails = [...], reason = ... }``."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_plugin import CONFTEST, write_goldens

from numcheck.cases import CaseFileError, load_case_file
from numcheck.gates import GATES, Gate, gate_registered, register_gate

CASE = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
variants = [{variants}]
{expect}
"""


def write(tmp_path: Path, variants: str, expect: str) -> Path:
    path = tmp_path / "mhc.toml"
    path.write_text(CASE.format(variants=variants, expect=expect))
    return path


def test_expectation_is_parsed(tmp_path: Path) -> None:
    path = write(tmp_path, '"bf16_roundtrip"',
                 'expect.bf16_roundtrip = { fails = ["y.rel_fro"], reason = "known" }')
    (case,) = load_case_file(path)
    assert case.expect["bf16_roundtrip"].fails == ("y.rel_fro",)
    assert case.expect["bf16_roundtrip"].reason == "known"


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ('expect.tf32 = { fails = ["y.rel_fro"], reason = "x" }',
         "key 'expect.tf32': 'tf32' is not a variant this case runs"),
        ('expect.bf16 = { fails = ["y.rel_fro"] }', "needs exactly the keys fails and reason"),
        ('expect.bf16 = { fails = [], reason = "x" }', "expected a non-empty list"),
        ('expect.bf16 = { fails = ["y.recall_min"], reason = "x" }',
         "unknown gate metric 'y.recall_min'"),
        ('expect.bf16 = { fails = ["speed.up"], reason = "x" }', "unknown gate metric 'speed.up'"),
        ('expect.bf16 = { fails = ["y.rel_fro"], reason = "" }', "expected a non-empty string"),
        ("expect = 3", "key 'expect': expected a table, got integer 3"),
        ("perf = 3", "key 'perf': expected a table, got integer 3"),
    ],
)
def test_bad_expectations_name_file_case_key(tmp_path: Path, expect: str, message: str) -> None:
    with pytest.raises(CaseFileError) as info:
        load_case_file(write(tmp_path, '"bf16"', expect))
    text = str(info.value)
    assert "mhc.toml: case 'tiny-mhc'" in text and message in text and "Fix:" in text


def test_registered_gates_are_accepted(tmp_path: Path) -> None:
    # A throwaway name: "casts" and "kernels" are built in (numcheck.gates).
    with gate_registered(Gate("planted", ("round_trips",))):
        path = write(tmp_path, '"bf16"',
                     'expect.bf16 = { fails = ["planted.round_trips"], reason = "x" }')
        (case,) = load_case_file(path)
        assert case.expect["bf16"].fails == ("planted.round_trips",)
        with pytest.raises(ValueError, match="different gate"):
            register_gate(Gate("planted", ("other",)))
    assert "planted" not in GATES
    with pytest.raises(CaseFileError, match="planted"):
        load_case_file(path)


def project(pytester: pytest.Pytester, variants: str, expect: str) -> None:
    pytester.makeini("[pytest]\naddopts = --numcheck-device cpu\n")
    (pytester.path / "cases").mkdir(exist_ok=True)
    (pytester.path / "cases" / "mhc.toml").write_text(
        CASE.format(variants=variants, expect=expect)
    )
    pytester.makeconftest(CONFTEST)
    write_goldens(pytester)


def test_caught_known_bad_variant_is_xfailed(pytester: pytest.Pytester) -> None:
    project(pytester, '"y_scaled"',
            'expect.y_scaled = { fails = ["y.rel_fro", "y.calc_diff"], reason = "planted" }')
    result = pytester.runpytest("--numcheck", "-rx")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*expected failure (y.rel_fro): planted*"])


def test_known_bad_variant_that_passes_fails_strictly(pytester: pytest.Pytester) -> None:
    project(pytester, '"tf32"', 'expect.tf32 = { fails = ["y.rel_fro"], reason = "should fail" }')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "numcheck XPASS(strict) mhc_pre::tiny-mhc::tf32[[]cpu[]]",
            "  expected y.rel_fro to fail (should fail),",
            "  but the variant passed it: the gate no longer catches this known-bad variant.",
        ]
    )


def test_failure_outside_the_expectation_is_an_ordinary_failure(
    pytester: pytest.Pytester,
) -> None:
    project(pytester, '"y_scaled"', 'expect.y_scaled = { fails = ["mixes.rel_fro"], reason = "x" }')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["numcheck FAIL mhc_pre::tiny-mhc::y_scaled[[]cpu[]]"])


def test_inactive_gate_leaves_the_check_ordinary(pytester: pytest.Pytester) -> None:
    # The perf gate (numcheck.perf.gate) is active only with --numcheck-perf.
    project(pytester, '"tf32"', 'expect.tf32 = { fails = ["perf.speedup_min"], reason = "slow" }')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=2)


def test_every_expected_gate_must_still_catch(pytester: pytest.Pytester) -> None:
    # Two gates expected; only the y numerics catch the planted bug, the mixes do not.
    project(pytester, '"y_scaled"',
            'expect.y_scaled = { fails = ["y.rel_fro", "mixes.rel_fro"], reason = "planted" }')
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "numcheck XPASS(strict) mhc_pre::tiny-mhc::y_scaled[[]cpu[]]",
            "  expected mixes.rel_fro to fail (planted),",
        ]
    )
