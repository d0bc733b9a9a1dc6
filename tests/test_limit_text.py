"""A budget miss names where the budget is set and the next step for each cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from numcheck.check.result import CheckResult
from numcheck.numerics.budget_origin import (
    Default,
    FixtureArg,
    Given,
    Inherited,
    Lent,
    NotMeasured,
    Origin,
)
from numcheck.numerics.verdict import Violation
from numcheck.report.limit_text import origin_text
from numcheck.report.render import Commands, failure_message
from tests.caseproject import make_project, write_goldens
from tests.shipped import shipped_cases

ROOT = Path(__file__).resolve().parent.parent


def _text(origin: Origin, variant: str = "tf32", key: str = "rel_fro",
          value: float = 1e-6, output: str = "logits") -> str:
    return origin_text(origin, case="b", variant=variant, output=output, key=key,
                       value=value, source="cases/c.toml", case_line=6)


def test_a_given_key_names_its_line_and_a_default_its_row() -> None:
    assert _text(Given("b.budget.tf32.logits", 13)) == (
        "cases/c.toml:13 ([b.budget.tf32.logits] rel_fro = 1e-06)")
    assert _text(Default("bf16"), variant="bf16", key="frac_outside", value=0.01) == (
        "frac_outside = 0.01: default for bf16 from numcheck/numerics/budgets.py (no key in "
        "cases/c.toml:6 [b]; set [b.budget.bf16.logits] frac_outside to override)")


def test_a_borrowed_budget_points_at_the_lenders_key_and_the_budget_like_line() -> None:
    lent = Lent("bf16_folded", "bf16", 22, Given("b.budget.bf16.logits", 9))
    assert _text(lent, variant="bf16_folded", value=2e-3) == (
        "cases/c.toml:9 ([b.budget.bf16.logits] rel_fro = 0.002; bf16_folded takes bf16's "
        "budgets: budget_like at cases/c.toml:22)")
    lent_default = Lent("bf16_folded", "bf16", 22, Default("bf16"))
    assert _text(lent_default, variant="bf16_folded", key="frac_outside", value=0.01) == (
        "frac_outside = 0.01: default for bf16 from numcheck/numerics/budgets.py (bf16_folded "
        "takes bf16's budgets: budget_like at cases/c.toml:22; no key in cases/c.toml:6 [b]; "
        "set [b.budget.bf16.logits] frac_outside to override)")


def test_an_inherited_key_names_the_coarse_class_table_and_why() -> None:
    inherited = Inherited("bf16", "y", "bf16", Given("b.budget.bf16.y", 105))
    assert _text(inherited, output="y", value=0.0069) == (
        "cases/c.toml:105 ([b.budget.bf16.y] rel_fro = 0.0069; y is stored in bf16, so tf32 "
        "takes bf16's budget on it (a key in [b.budget.tf32.y] overrides it))")
    # ... and the default row of the storage class, for a key no table on y sets
    assert _text(Default("bf16", "bf16"), output="y", key="atol", value=0.01) == (
        "atol = 0.01: default for bf16 from numcheck/numerics/budgets.py (y is stored in bf16, "
        "coarser than tf32's class; no key in cases/c.toml:6 [b]; set [b.budget.tf32.y] atol "
        "to override)")


def test_lent_then_inherited_and_inherited_from_a_lent_table_name_every_link() -> None:
    # fused borrows tf32's tables; they leave y's rel_fro out, so fused takes bf16's
    chain = Lent("fused", "tf32", 30, Inherited("bf16", "y", "bf16",
                                                Given("b.budget.bf16.y", 105)))
    assert _text(chain, variant="fused", output="y", value=0.0069) == (
        "cases/c.toml:105 ([b.budget.bf16.y] rel_fro = 0.0069; fused takes tf32's budgets: "
        "budget_like at cases/c.toml:30; y is stored in bf16, so fused takes bf16's budget on "
        "it (a key in [b.budget.tf32.y] overrides it))")
    # tf32's y inherits from bf16, whose tables are bf16_roundtrip's
    chain = Inherited("bf16", "y", "bf16", Lent("bf16", "bf16_roundtrip", 40,
                                                Given("b.budget.bf16_roundtrip.y", 42)))
    assert _text(chain, output="y", value=0.0069) == (
        "cases/c.toml:42 ([b.budget.bf16_roundtrip.y] rel_fro = 0.0069; y is stored in bf16, "
        "so tf32 takes bf16's budget on it (a key in [b.budget.tf32.y] overrides it); bf16 "
        "takes bf16_roundtrip's budgets: budget_like at cases/c.toml:40)")


def test_a_fixture_key_and_an_unmeasured_key_say_so() -> None:
    assert _text(FixtureArg("tests/test_k.py:10"), value=1e-4) == (
        "tests/test_k.py:10 (budget= of this check: rel_fro = 0.0001)")
    assert _text(NotMeasured("no envelope"), key="max_err_ratio") == (
        "max_err_ratio: no limit, not measured (no envelope)")


def test_a_line_not_found_names_the_file_alone() -> None:
    assert _text(Given("b.budget.tf32.logits", None)) == (
        "cases/c.toml ([b.budget.tf32.logits] rel_fro = 1e-06)")


def test_the_mhc_tf32_y_miss_names_the_bf16_y_key_it_inherits() -> None:
    """Issue 34: cases/mhc.toml [v4flash-t64], tf32, y: rel_fro = 0.0069 is the case's bf16
    budget on y (y is stored in bf16), not the bf16 defaults row (0.01) the message used to
    name. The failure message of a real loaded case names the key's line."""
    (case,) = [c for c in shipped_cases() if c.id == "v4flash-t64"]
    lines = (ROOT / "cases/mhc.toml").read_text().splitlines()
    table = lines.index("[v4flash-t64.budget.bf16.y]")
    line = table + 1 + next(i for i, ln in enumerate(lines[table + 1:])
                            if ln.startswith("rel_fro ="))
    assert lines[line] == "rel_fro = 0.0069"
    miss = Violation("y", "rel_fro", 0.02, 0.0069, seed=0)
    result = CheckResult(case, "tf32", "cpu", seeds=[], violations=[miss])
    message = failure_message(result, Commands("reproduce", "regenerate"), "cases/mhc.toml")
    assert (f"  budget:      cases/mhc.toml:{line + 1} ([v4flash-t64.budget.bf16.y] rel_fro = 0.0069; "
            "y is stored in bf16, so tf32 takes bf16's budget on it (a key in "
            "[v4flash-t64.budget.tf32.y] overrides it))") in message.splitlines()
    assert "default" not in message


#: A case with every kind of limit besides budgets: a shared speedup_min (its cuda value
#: for every GPU model), a variant's own, a cast limit, and a key that turns a gate on.
LIMITS = """[c]
op = "indexer"
devices = ["cpu", "cuda"]
variants = ["bf16", "tf32"]
deterministic = ["tf32"]
[c.perf]
speedup_min = { H200 = 1.2, cuda = 1.0, every_class = true }
[c.perf.tf32]
speedup_min = { H200 = 1.5 }
[c.overhead.bf16]
max_cast_bytes_ratio = 3.0
"""


@pytest.mark.parametrize(("variant", "miss", "cls", "line"), [
    ("bf16", Violation("perf", "speedup_min", 1.1, 1.2, upper=False), "H200",
     "cases/c.toml:7 ([c.perf] speedup_min.H200 = 1.2)"),
    ("bf16", Violation("perf", "speedup_undecided", 1.0, 1.0, upper=False), "H100",
     "cases/c.toml:7 ([c.perf] speedup_min.cuda = 1)"),
    ("tf32", Violation("perf", "speedup_min", 1.4, 1.5, upper=False), "H200",
     "cases/c.toml:9 ([c.perf.tf32] speedup_min.H200 = 1.5)"),
    ("bf16", Violation("casts", "cast_bytes_ratio", 4.0, 3.0), "cpu",
     "cases/c.toml:11 ([c.overhead.bf16] max_cast_bytes_ratio = 3)"),
    ("bf16", Violation("casts", "round_trips", 1, 0), "cpu",
     "round_trips: default of the casts gate (set [c.overhead.bf16] round_trips in "
     "cases/c.toml to override)"),
    ("tf32", Violation("determinism", "runs_differing", 2, 0), "cpu",
     "cases/c.toml:5 ([c] deterministic holds 'tf32' on cpu: bitwise equal, no tolerance)"),
    ("tf32", Violation("logits", "nan_mask", 3, 0), "cpu", None),  # a rule: no key sets it
])
def test_every_kind_of_limit_names_where_it_is_set(
        tmp_path: Path, variant: str, miss: Violation, cls: str, line: str | None) -> None:
    """Speed thresholds (by GPU model, shared or the variant's own), overhead limits (set,
    or the gate's default) and invariance keys: the budget: line comes from the limit's
    origin (numcheck.cases.limits.limit_origin), as a budget key's does."""
    from types import SimpleNamespace

    from numcheck.cases import load_case_file

    path = tmp_path / "c.toml"
    path.write_text(LIMITS)
    (case,) = load_case_file(path)
    result = CheckResult(case, variant, "cpu", seeds=[], violations=[miss])
    result.perf = SimpleNamespace(device_class=cls)  # type: ignore[assignment]
    message = failure_message(result, Commands("reproduce", "regenerate"), "cases/c.toml")
    budget = [ln for ln in message.splitlines() if ln.startswith("  budget:")]
    assert budget == ([] if line is None else [f"  budget:      {line}"])


def _failing_run(pytester: pytest.Pytester, budget: str) -> pytest.RunResult:
    make_project(pytester, variants='"bf16"', extra=budget)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "-k", "bf16")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    return result


def test_a_budget_miss_names_the_key_line_and_the_next_steps(pytester: pytest.Pytester) -> None:
    result = _failing_run(pytester, "[tiny.budget.bf16.logits]\nrel_fro = 1e-9\n")
    result.stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny::bf16[[]cpu[]]",
        "  worst: logits.rel_fro = * > budget 1e-09*",
        "  case:        cases/indexer.toml [[]tiny[]]",
        "  budget:      cases/indexer.toml:8 ([[]tiny.budget.bf16.logits[]] rel_fro = 1e-09)",
        ("  reproduce:   pytest --numcheck --numcheck-device cpu "
        "'cases/indexer.toml::tiny::bf16[[]cpu[]]'"),
        ("  regenerate:  pytest --numcheck --numcheck-regen cases/indexer.toml::tiny  (only if "
        "the reference itself changed)"),
        "  next step:   my change is wrong -> fix the variant, then run 'reproduce'",
        # The honest bf16 family (the op's rounding reference, bf16, with the op's honest
        # GEMMs), never the failing variant alone; and what to do when it is the suspect.
        # The members are not registered here: the step says to register them first, so
        # that the command runs as printed (issue 44).
        ("               my budget is too tight (a correct variant) -> calibrate the honest "
         "bf16 family, not this variant alone: after numcheck.add_gemm_members('indexer', "
         "[[]'bf16'[]]) in your hook: pytest --numcheck --numcheck-calibrate "
         "--numcheck-device cpu 'cases/indexer.toml::tiny::bf16[[]cpu[]]' "
         "--numcheck-calibrate-pool bf16=bf16,gemm_bf16_out,gemm_bf16_out_kblocks,"
         "gemm_bf16_out_split2,gemm_bf16_out_split4_tree,gemm_bf16_fp32out,"
         "gemm_bf16_fp32out_kblocks,gemm_bf16_fp32out_split4"),
        ("               (the family: the op's reference implementation of the class, your "
         "other honest ones, the GEMMs numcheck.add_gemm_members registers; "
         "--numcheck-calibrate-write sets its tables, a variant outside it takes them with "
         "budget_like; docs/budgets.md, \"A budget for a new kernel\")"),
        ("               not sure it is correct -> this variant is the suspect: change no "
         "budget; 'reproduce' with --numcheck-explain shows where it strays, and a calibration "
         "that pools it refuses to write past its class's honest limits"),
        ("               the reference changed -> pytest --numcheck --numcheck-regen "
        "cases/indexer.toml::tiny"),
    ])


def test_a_default_budget_miss_names_the_defaults_row(pytester: pytest.Pytester) -> None:
    # No budget for the planted variant in the case file: its limits come from the fp32 row.
    make_project(pytester, variants='"no_kv_scale"', planted=True)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "-k", "no_kv_scale")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny::no_kv_scale[[]cpu[]]",
        ("  budget:      frac_outside = 0: default for fp32 from numcheck/numerics/budgets.py "
        "(no key in cases/indexer.toml:2 [[]tiny[]]; set [[]tiny.budget.no_kv_scale.logits[]] "
        "frac_outside to override)"),
        "  next step:   my change is wrong -> fix the variant, then run 'reproduce'",
    ])


def test_a_borrowed_budget_miss_names_the_lender_in_the_message(
        pytester: pytest.Pytester) -> None:
    make_project(pytester, variants='"bf16", "bf16_folded"',
                 extra=('[tiny.budget.bf16.logits]\nrel_fro = 1e-9\n'
                        '[tiny.budget.bf16_folded]\nbudget_like = "bf16"\n'))
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "-k", "bf16_folded")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny::bf16_folded[[]cpu[]]",
        "  worst: logits.rel_fro = * > budget 1e-09*",
        ("  budget:      cases/indexer.toml:8 ([[]tiny.budget.bf16.logits[]] rel_fro = 1e-09; "
         "bf16_folded takes bf16's budgets: budget_like at cases/indexer.toml:10)"),
    ])
