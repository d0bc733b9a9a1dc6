"""FP8 variants a user writes, planted through the public API (tests/quant_planted.py),
checked by the gate against both references: every bug of issue 35 caught, the honest
alternatives passed, on the shipped case files' goldens. The failure message, the summary,
the JSON report and the HTML page show both references. Fresh seeds and the catch table:
the slow tier (test_quant_catch_slow.py) and benchmarks/reliability/fp8_catch.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from numcheck.cases import load_case_file
from numcheck.check import run_check
from numcheck.ops import registry
from numcheck.ops.registry import add_variant, get_op
from numcheck.selftest import held_to, shipped_golden
from tests import quant_planted
from tests.caseproject import case_project

ROOT = Path(__file__).resolve().parent.parent
LINEAR = {c.id: c for c in load_case_file(ROOT / "cases" / "linear.toml")}

#: The shipped variant whose budget each planted one is held to (its declared scheme's).
HEAD = {"bug_no_promotion": "fp8_row", "bug_ue8m0_round_down": "fp8_block_ue8m0"}
#: What catches each bug on the shipped goldens: the violations (``<output or gate>.<metric>``)
#: at least one of which must be among the failing check's.
CAUGHT_BY = {
    "bug_per_tensor_kernel": {"quant.sim_ratio", "y.rel_fro"},
    "bug_per_tensor_quantizer": {"quant.operands"},
    "bug_transposed_scales": {"quant.sim_ratio", "y.rel_fro"},
    "bug_shifted_scales": {"quant.sim_ratio", "y.rel_fro"},
    "bug_ue8m0_round_down": {"quant.operands"},
    "bug_no_clamp": {"quant.operands", "y.nan"},
    "bug_no_promotion": {"quant.sim_ratio"},
    "bug_no_promotion_block": {"quant.sim_ratio"},
    "bug_e5m2_for_e4m3": {"quant.operands"},
    "bug_stale_scale": {"quant.operands"},
}
#: The case each bug runs on: a skipped promotion matters over a long K (o_proj's 16384).
CASE_OF = {"bug_no_promotion": "v3-o-decode-t8"}


@pytest.fixture
def planted() -> dict:
    with registry.isolated():
        bugs = quant_planted.planted_bugs()
        alternatives = quant_planted.honest_alternatives()
        for v in bugs.values():
            add_variant("linear", v)
        for v, _ in alternatives.values():
            add_variant("linear", v)
        yield {"bugs": bugs, "alternatives": alternatives}


def _check(case_id: str, name: str, head: str) -> list:
    """``name`` held to ``head``'s budget on every seed of the shipped case, against its
    shipped golden: the numerics and the quant gate (the cast ledger judges how a variant
    moves data; the test kernels emulate hardware in torch, and their bf16 results are
    round trips there)."""
    golden, inputs = shipped_golden(LINEAR[case_id], ROOT / "goldens")
    case = LINEAR[case_id]
    result = run_check(get_op("linear"), held_to(case, name, head), name, "cpu", inputs, golden)
    return result.violations


@pytest.mark.parametrize("bug", sorted(CAUGHT_BY))
def test_every_planted_bug_is_caught_on_the_shipped_goldens(planted: dict, bug: str) -> None:
    # A stale scale exists once the weight changed: seed 0 fills the cache, seed 1 has it.
    violations = _check(CASE_OF.get(bug, "tiny-k384"), bug, HEAD.get(bug, "fp8_block"))
    keys = {v.key for v in violations}
    assert keys & CAUGHT_BY[bug], (bug, sorted(keys))


@pytest.mark.parametrize("name", sorted(quant_planted.honest_alternatives()))
def test_honest_alternatives_pass_both_references(planted: dict, name: str) -> None:
    _, head = planted["alternatives"][name]
    assert [v.describe() for v in _check("tiny-k384", name, head)] == []


PROJECT_CONFTEST = """

def pytest_numcheck_register(registry):
    from tests import quant_planted
    registry.add_variant("linear", quant_planted.planted_bugs()["bug_shifted_scales"])
"""

PROJECT_CASE = """
[small]
op = "linear"
shape = { tokens = 8, in_features = 384, out_features = 256 }
seeds = [0]
variants = ["fp8_block", "bug_shifted_scales"]

[small.budget.fp8_block.y]   # loosened until CI went green: the golden no longer sees the bug
rel_fro = 1.0
calc_diff = 1.0
frac_outside = 1.0
max_err_ratio = 1000
max_band_ratio = 1000
[small.budget.bug_shifted_scales]
budget_like = "fp8_block"
"""


def test_a_scale_bug_fails_the_second_reference_where_the_first_is_loose(
        pytester: pytest.Pytester) -> None:
    case_project(pytester, {"linear.toml": PROJECT_CASE}, conftest=PROJECT_CONFTEST)
    pytester.runpytest("--numcheck", "--numcheck-regen", "-p", "no:cacheprovider")
    assert (pytester.path / "goldens" / "linear" / "small.safetensors").exists()
    report, page = pytester.path / "r.json", pytester.path / "r.html"
    run = pytester.runpytest("--numcheck", "-p", "no:cacheprovider", "--numcheck-report",
                             str(report), "--numcheck-html", str(page))
    run.assert_outcomes(passed=2, failed=1)
    run.stdout.fnmatch_lines([
        "numcheck FAIL linear::small::bug_shifted_scales[cpu]",
        "  *  quant.sim_ratio = * > budget 1 (seed 0): at GEMM 0, element (*",
        "  references:  the variant declares a e4m3fn/1x128/fp32 x b e4m3fn/128x128/fp32, "
        "promoted128, bf16 out",
        "    golden (FP32, what the precision costs): y.rel_fro * (budget 1)",
        "    simulated (the op on the operands the variant's own quantizer produced, "
        "dequantized, exact, float64): y.sim_rel_fro *",
        "    GEMM results against their own operands: * of the bound an honest kernel stays "
        "within (at most 1; worst at seed 0, GEMM 0, element (*",
        "    operands against the declared scheme: they follow it",
        "*simulated (sim_rel_fro, bound)*",
    ])
    records = {r["variant"]: r for r in json.loads(report.read_text())["records"]}
    bug, honest = records["bug_shifted_scales"], records["fp8_block"]
    assert honest["status"] == "pass" and bug["status"] == "fail"
    # The loosened golden budget lets it through; only the second reference catches it: the
    # GEMM bound, and (no table sets them) the sim_* rows of its promoted sums.
    assert {v["output"] for v in bug["violations"]} == {"quant", "y"}
    assert {v["metric"] for v in bug["violations"] if v["output"] == "y"} <= {
        "sim_rel_fro", "sim_calc_diff"}
    assert honest["quant"]["sim_ratio"] <= 1 < bug["quant"]["sim_ratio"]
    assert bug["quant"]["operands"] == "recorded" and bug["quant"]["n_findings"] == 0
    assert honest["metrics"]["y"]["sim_rel_fro"] < bug["metrics"]["y"]["sim_rel_fro"]
    html = page.read_text()
    assert html.count("<h4>two references</h4>") == 2 and "sim_rel_fro" in html
