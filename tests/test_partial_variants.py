"""Variants that compute part of an op (``Variant(produces=...)``): what they produce is
checked, the rest shown as not produced, an undeclared missing output still refused, and a
case file that holds them to an output they do not produce is an error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from numcheck.cases import Case, CaseFileError, load_case_file
from numcheck.check import cannot_run, run_check
from numcheck.check.make_golden import fresh_golden
from numcheck.check.run import run_variant
from numcheck.ops import indexer, mhc, registry
from numcheck.ops.registry import Inputs, Outputs, Params, RegistrationError, Variant
from numcheck.ops.spec import VariantError
from numcheck.report.records import record_from_result
from numcheck.report.render import summary_table
from tests import planted
from tests.caseproject import case_project


def post_comb_y(inputs: Inputs, p: Params) -> Outputs:
    """numcheck's bf16 path, returning post, comb and y only (a library kernel's subset)."""
    out = mhc.bf16(inputs, p)
    return {name: out[name] for name in ("post", "comb", "y")}


def post_comb_y_bad_y(inputs: Inputs, p: Params) -> Outputs:
    """The same, with y 3% too large."""
    out = post_comb_y(inputs, p)
    return {**out, "y": (out["y"].float() * 1.03).to(torch.bfloat16)}


def topk_only(inputs: Inputs, p: Params) -> Outputs:
    """A fused top-k kernel: the selection, never the logits."""
    return {"topk": indexer.fp32(inputs, p)["topk"]}


def topk_only_far_flips(inputs: Inputs, p: Params) -> Outputs:
    """The selection with each row's lowest-scoring token in place of its k-th."""
    return {"topk": planted.indexer_far_flips(inputs, p)["topk"]}


def logits_only(inputs: Inputs, p: Params) -> Outputs:
    """The logits; numcheck selects the top-k from them."""
    return {"logits": indexer.bf16(inputs, p)["logits"]}


VARIANTS = [
    ("mhc_pre", Variant("post_comb_y", post_comb_y, "bf16", produces=("post", "comb", "y"))),
    ("mhc_pre", Variant("post_comb_y_bad_y", post_comb_y_bad_y, "bf16",
                        produces=("post", "comb", "y"))),
    ("indexer", Variant("topk_only", topk_only, "fp32", produces=("topk",))),
    ("indexer", Variant("topk_only_far_flips", topk_only_far_flips, "fp32", produces=("topk",))),
    ("indexer", Variant("logits_only", logits_only, "bf16", produces=("logits",))),
]

MHC = """
[tiny-mhc]
op = "mhc_pre"
shape = {{ tokens = 8, hidden = 64 }}
variants = [{variants}]
{extra}
"""
INDEXER = """
[tiny]
op = "indexer"
shape = {{ batch = 2, heads = 4, head_dim = 32, max_context = 256, index_topk = 32 }}
variants = [{variants}]
{extra}
"""


@pytest.fixture(autouse=True)
def partial() -> Iterator[None]:
    with registry.isolated():
        for op, variant in VARIANTS:
            registry.add_variant(op, variant)
        yield


def load(tmp_path: Path, template: str, variants: str, extra: str = "") -> Case:
    path = tmp_path / "case.toml"
    path.write_text(template.format(variants=variants, extra=extra))
    (case,) = load_case_file(path)
    return case


def check(case: Case, variant: str, gates: set[str] | None = None):  # type: ignore[no-untyped-def]
    op = registry.get_op(case.op)
    golden, inputs = fresh_golden(op, case)
    return run_check(op, case, variant, "cpu", inputs, golden, gates=gates or set())


# --- registration and the outputs a call returns ----------------------------------------


@pytest.mark.parametrize(("produces", "fragment"), [
    (("mixes", "z"), "produces names ['z'], not outputs of the op"),
    ((), "must be a non-empty tuple of distinct output names"),
    (("y", "y"), "must be a non-empty tuple of distinct output names"),
    ("y", "must be a non-empty tuple of distinct output names"),
])
def test_a_bad_produces_is_refused_at_registration(produces: object, fragment: str) -> None:
    with pytest.raises(RegistrationError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        registry.add_variant("mhc_pre", Variant("bad", post_comb_y, "bf16",
                                                produces=produces))  # type: ignore[arg-type]


def test_the_reference_and_a_rounding_reference_must_compute_every_output() -> None:
    op = registry.get_op("mhc_pre")
    partial_ref = replace(op.variants["fp32"], produces=("y",))
    with pytest.raises(RegistrationError, match="the reference makes the golden of every output"):
        registry.register(replace(op, name="mhc_partial_ref",
                                  variants={**op.variants, "fp32": partial_ref}))
    partial_bf16 = replace(op.variants["bf16"], produces=("y",))
    with pytest.raises(RegistrationError, match="computes part of the op"):
        registry.register(replace(op, name="mhc_partial_rounding",
                                  variants={**op.variants, "bf16": partial_bf16}))


def test_an_undeclared_missing_output_is_still_refused_and_says_how_to_declare(
        tmp_path: Path) -> None:
    case = load(tmp_path, MHC, '"bf16"')
    op = registry.get_op("mhc_pre")
    inputs = op.make_inputs(case.params, 0)
    undeclared = Variant("subset", post_comb_y, "bf16")
    with pytest.raises(VariantError) as err:
        run_variant(undeclared, op, inputs, case, "cpu")
    assert str(err.value).startswith(
        "variant 'subset' returned outputs ['comb', 'post', 'y']; op 'mhc_pre' names "
        "['mixes', 'pre', 'post', 'comb', 'y']. Fix: return every output the op names, or, "
        "for a kernel that computes part of the op, declare what it returns: Variant(..., "
        "produces=('post', 'comb', 'y'))")
    declared_less = Variant("less", post_comb_y, "bf16", produces=("post", "comb"))
    with pytest.raises(VariantError, match=r"returned outputs \['comb', 'post', 'y'\]; it "
                       r"declares produces=\('post', 'comb'\)"):
        run_variant(declared_less, op, inputs, case, "cpu")


# --- the check: what is produced is checked, the rest shown as not produced ------------


def test_a_partial_variant_is_checked_on_what_it_produces(tmp_path: Path) -> None:
    case = load(tmp_path, MHC, '"bf16", "post_comb_y", "post_comb_y_bad_y"')
    good = check(case, "post_comb_y")
    assert good.passed and good.not_produced == ("mixes", "pre")
    assert set(good.seeds[0].metrics) == {"post", "comb", "y"}
    assert set(case.budgets["post_comb_y"].outputs) == {"post", "comb", "y"}
    record = record_from_result(good)
    assert record.not_produced == ["mixes", "pre"] and set(record.budget) == {"post", "comb", "y"}
    _, rows = summary_table([record])
    assert rows[0][-1] == "PASS (not produced: mixes, pre)"
    bad = check(case, "post_comb_y_bad_y")
    assert not bad.passed and {v.output for v in bad.violations} == {"y"}


def test_the_top_k_is_checked_wherever_it_or_its_logits_are_produced(tmp_path: Path) -> None:
    case = load(tmp_path, INDEXER, '"topk_only", "topk_only_far_flips", "logits_only"')
    selection = check(case, "topk_only")
    assert selection.passed and selection.not_produced == ("logits",)
    assert selection.seeds[0].metrics == {} and selection.topk_value("recall_min") == 1.0
    # Tie-aware against the golden's scores, which never came from the variant anyway.
    far = check(case, "topk_only_far_flips")
    assert "topk.tie_recall_min" in {v.key for v in far.violations}
    # Logits only: numcheck selects from them as the op does, and checks both.
    derived = check(case, "logits_only")
    assert derived.passed and derived.not_produced == ("topk",)
    assert set(derived.seeds[0].metrics) == {"logits"} and derived.seeds[0].topk is not None


def test_determinism_compares_what_a_partial_variant_produces(tmp_path: Path) -> None:
    case = load(tmp_path, MHC, '"post_comb_y"', "deterministic = true")
    result = check(case, "post_comb_y", {"determinism"})
    assert result.passed and result.invariance is not None
    assert result.invariance.compared == ("post", "comb", "y")


def test_a_partial_variant_is_never_timed_against_the_whole_reference(tmp_path: Path) -> None:
    case = load(tmp_path, MHC, '"post_comb_y"')
    result = check(case, "post_comb_y", {"perf"})
    assert result.perf is None
    assert result.note == "not timed: computes part of the op"
    perf_only = load(tmp_path, MHC, '"post_comb_y"', "perf_only = true")
    reason = cannot_run(registry.get_op("mhc_pre"), perf_only, "post_comb_y", "cpu",
                        gates={"perf"})
    assert reason is not None and "not like for like, so it is not timed" in reason


# --- the case file: nothing may hold a partial variant to what it does not produce -----


@pytest.mark.parametrize(("extra", "key", "fix"), [
    ("[tiny-mhc.budget.post_comb_y.mixes]\nrel_fro = 1e-3", "budget.post_comb_y.mixes",
     "name outputs it produces: post, comb, y"),
    ('expect.post_comb_y = { outputs = ["pre"], reason = "x" }', "expect.post_comb_y.outputs",
     "remove it"),
    ('expect.post_comb_y = { metrics = ["mixes.rel_fro"], reason = "x" }',
     "expect.post_comb_y.metrics", "name outputs it produces"),
])
def test_an_output_a_variant_does_not_produce_is_a_case_file_error(
        tmp_path: Path, extra: str, key: str, fix: str) -> None:
    with pytest.raises(CaseFileError) as err:
        load(tmp_path, MHC, '"post_comb_y"', extra)
    assert err.value.key == key
    assert ("variant 'post_comb_y' does not produce output" in err.value.problem
            and "so this would gate nothing" in err.value.problem)
    assert fix in err.value.fix


def test_speed_limits_for_a_partial_variant_are_errors_a_lender_s_tables_are_not(
        tmp_path: Path) -> None:
    with pytest.raises(CaseFileError, match="never times it against the whole reference"):
        load(tmp_path, MHC, '"post_comb_y"',
             "[tiny-mhc.perf.post_comb_y]\nspeedup_min = { H200 = 1.1 }")
    with pytest.raises(CaseFileError, match="expects the perf gate to fail, which never times"):
        load(tmp_path, MHC, '"post_comb_y"',
             'expect.post_comb_y = { gates = ["perf"], reason = "x" }')
    # A shared threshold gates the timed variants; the partial one is simply not timed.
    shared = load(tmp_path, MHC, '"bf16", "post_comb_y"', "perf.speedup_min = { H200 = 1.1 }")
    assert shared.perf["post_comb_y"].speedup_min == {}
    # Borrowing a whole variant's tables takes those of the outputs it produces.
    lent = load(tmp_path, MHC, '"bf16", "post_comb_y"',
                "[tiny-mhc.budget.bf16.mixes]\nrel_fro = 5e-3\n[tiny-mhc.budget.bf16.y]\n"
                "rel_fro = 8e-3\n[tiny-mhc.budget.post_comb_y]\nbudget_like = \"bf16\"")
    assert set(lent.budgets["post_comb_y"].outputs) == {"post", "comb", "y"}
    assert lent.budgets["post_comb_y"].outputs["y"].limits["rel_fro"] == 8e-3


def test_the_summary_and_the_report_show_what_is_not_produced(pytester: pytest.Pytester) -> None:
    case_project(pytester, {"mhc.toml": MHC.format(variants='"subset"', extra="")}, conftest="""
import numcheck
from tests import test_partial_variants as t

def pytest_numcheck_register(registry):
    registry.add_variant("mhc_pre", numcheck.Variant(
        "subset", t.post_comb_y, "bf16", produces=("post", "comb", "y")))
""")
    assert pytester.runpytest("--numcheck", "--numcheck-regen").ret == 0
    report = pytester.path / "r.json"
    result = pytester.runpytest("--numcheck", "--numcheck-report", str(report))
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["mhc_pre::tiny-mhc*subset*PASS (not produced: mixes, pre)"])
    records = {r["variant"]: r for r in json.loads(report.read_text())["records"]}
    assert records["subset"]["not_produced"] == ["mixes", "pre"]
    assert records["fp32"]["not_produced"] == []
