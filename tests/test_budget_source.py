"""A budget miss names where the budget is set and the next step for each cause."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_plugin import make_project, write_goldens

from numcheck.report.budget_source import budget_location, locate_key

TOML = """\
# a comment
[a]
op = "indexer"
budget.bf16.logits.rel_fro = 1e-3

[b]
op = "indexer"
[b.budget.bf16]
logits = { calc_diff = 1e-5, rel_fro = 2e-3 }
topk.recall_min = 0.99

[b.budget.tf32.logits]
rel_fro = 1e-6   # trailing comment
"c.d" = 1

["v4.0"]
op = "indexer"
[ "v4.0".budget.bf16.logits ]
max_abs = 0.5
"""


@pytest.mark.parametrize(
    ("key", "line"),
    [
        (["a", "budget", "bf16", "logits", "rel_fro"], 4),
        (["b", "budget", "bf16", "logits", "calc_diff"], 9),
        (["b", "budget", "bf16", "logits", "rel_fro"], 9),
        (["b", "budget", "bf16", "topk", "recall_min"], 10),
        (["b", "budget", "tf32", "logits", "rel_fro"], 13),
        (["b", "budget", "tf32", "logits", "c.d"], 14),
        (["v4.0", "budget", "bf16", "logits", "max_abs"], 19),
        (["b", "budget", "bf16", "logits", "max_abs"], None),
        (["a", "budget", "tf32", "logits", "rel_fro"], None),
    ],
)
def test_locate_key(tmp_path: Path, key: list[str], line: int | None) -> None:
    path = tmp_path / "c.toml"
    path.write_text(TOML)
    assert locate_key(path, key) == line


def test_budget_location_from_the_file_or_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(TOML)
    assert budget_location(path, "cases/c.toml", "b", "tf32", "logits", "rel_fro",
                           precision="tf32", value=1e-6) == (
        "cases/c.toml:13 ([b.budget.tf32.logits] rel_fro = 1e-06)")
    assert budget_location(path, "cases/c.toml", "b", "bf16", "logits", "frac_outside",
                           precision="bf16", value=0.01) == (
        "frac_outside = 0.01: default for bf16 from numcheck/numerics/budgets.py (no key in "
        "cases/c.toml:6 [b]; set [b.budget.bf16.logits] frac_outside to override)")


def test_a_borrowed_budget_points_at_the_lenders_key_and_the_budget_like_line(
        tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(TOML + '\n[b.budget.bf16_folded]\nbudget_like = "bf16"\n')
    assert budget_location(path, "cases/c.toml", "b", "bf16_folded", "logits", "rel_fro",
                           precision="bf16", value=2e-3, lender="bf16") == (
        "cases/c.toml:9 ([b.budget.bf16.logits] rel_fro = 0.002; bf16_folded takes bf16's "
        "budgets: budget_like at cases/c.toml:22)")
    assert budget_location(path, "cases/c.toml", "b", "bf16_folded", "logits", "frac_outside",
                           precision="bf16", value=0.01, lender="bf16") == (
        "frac_outside = 0.01: default for bf16 from numcheck/numerics/budgets.py (bf16_folded takes "
        "bf16's budgets: budget_like at cases/c.toml:22; no key in cases/c.toml:6 [b]; set "
        "[b.budget.bf16.logits] frac_outside to override)")


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
        ("               my budget is too tight (a correct variant) -> calibrate the honest "
         "bf16 family, not this variant alone: pytest --numcheck --numcheck-calibrate "
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
