"""Where each key of a loaded budget comes from: recorded once, when the budget is completed.

Each kind of origin (given, inherited, lent, lent-then-inherited, inherited from a lent
table, a default row, the fixture's ``budget=``, not measured) is recorded by the loader or
by ``complete_budget``; for every shipped case the record points at the value the gate holds.
"""

from __future__ import annotations

import functools
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from numcheck.calibrate.payloads import NumericsPayload, payload_from_data
from numcheck.cases import Case, load_case_file
from numcheck.numerics.budget_origin import (
    Default,
    FixtureArg,
    Given,
    Inherited,
    Lent,
    NotMeasured,
    Origin,
    lender_of,
    origin_from_dict,
    origin_to_dict,
    origins_from_dict,
    origins_to_dict,
    root,
)
from numcheck.numerics.budgets import (
    DEFAULT_BUDGETS,
    VariantBudget,
    complete_budget,
    sim_default_row,
)
from numcheck.numerics.metric_names import SIM_METRICS
from numcheck.ops.registry import get_op
from tests.caseproject import NO_CACHE, case_project
from tests.shipped import shipped_cases
from tests.test_cases import PLAIN, lookup

MHC = """\
[t]
op = "mhc_pre"
preset = "v4pro"
shape = { tokens = 4 }
variants = ["bf16", "bf16_roundtrip", "tf32", "fused"]

[t.budget.bf16.y]
rel_fro = 0.004
frac_outside = 0.001
[t.budget.tf32]
mixes = { rel_fro = 1e-3 }
y.calc_diff = 1e-7
"""


def _mhc(tmp_path: Path, extra: str = "") -> Case:
    path = tmp_path / "mhc.toml"
    path.write_text(MHC + extra)
    (case,) = load_case_file(path)
    return case


def test_a_key_given_in_the_case_file_is_recorded_with_its_line(tmp_path: Path) -> None:
    case = _mhc(tmp_path)
    assert case.budgets["bf16"].origin("y", "rel_fro") == Given("t.budget.bf16.y", 8)
    assert case.budgets["tf32"].origin("mixes", "rel_fro") == Given("t.budget.tf32.mixes", 11)
    assert case.budgets["tf32"].origin("y", "calc_diff") == Given("t.budget.tf32.y", 12)


def test_a_coarse_output_inherits_from_the_storage_class_table(tmp_path: Path) -> None:
    """y is stored in bf16: tf32 takes bf16's keys on it, except those its own y sets."""
    budget = _mhc(tmp_path).budgets["tf32"]
    assert budget.origin("y", "rel_fro") == Inherited("bf16", "y", "bf16",
                                                       Given("t.budget.bf16.y", 8))
    assert budget.origin("y", "frac_outside") == Inherited("bf16", "y", "bf16",
                                                            Given("t.budget.bf16.y", 9))
    assert budget.outputs["y"].limits["rel_fro"] == 0.004
    # a key bf16's y does not set: the bf16 row, because y is stored in bf16
    assert budget.origin("y", "atol") == Default("bf16", "bf16")
    assert budget.outputs["y"].atol == DEFAULT_BUDGETS["bf16"]["atol"]
    # an output stored in fp32 takes the variant's own row
    assert budget.origin("pre", "rel_fro") == Default("tf32")


def test_a_borrowed_budget_is_lent_with_the_lenders_own_origin(tmp_path: Path) -> None:
    case = _mhc(tmp_path, '[t.budget.bf16_roundtrip]\nbudget_like = "bf16"\n')
    budget = case.budgets["bf16_roundtrip"]
    assert budget.origin("y", "rel_fro") == Lent("bf16_roundtrip", "bf16", 14,
                                                  Given("t.budget.bf16.y", 8))
    assert budget.origin("mixes", "rel_fro") == Lent("bf16_roundtrip", "bf16", 14,
                                                      Default("bf16"))
    assert lender_of(budget.origins) == "bf16"
    assert lender_of(case.budgets["bf16"].origins) is None


def test_lent_then_inherited(tmp_path: Path) -> None:
    """fused borrows tf32's tables; they leave y's rel_fro to bf16's y, and so for fused."""
    case = _mhc(tmp_path, '[t.budget.fused]\nbudget_like = "tf32"\n')
    budget = case.budgets["fused"]
    assert budget.origin("y", "rel_fro") == Lent(
        "fused", "tf32", 14, Inherited("bf16", "y", "bf16", Given("t.budget.bf16.y", 8)))
    assert budget.origin("y", "calc_diff") == Lent("fused", "tf32", 14,
                                                    Given("t.budget.tf32.y", 12))
    assert budget.outputs["y"].limits["rel_fro"] == 0.004


def test_inherited_from_a_lent_table(tmp_path: Path) -> None:
    """tf32's y inherits bf16's y, and bf16's tables are bf16_roundtrip's."""
    text = MHC.replace("[t.budget.bf16.y]", "[t.budget.bf16_roundtrip.y]") + (
        '[t.budget.bf16]\nbudget_like = "bf16_roundtrip"\n')
    path = tmp_path / "mhc.toml"
    path.write_text(text)
    (case,) = load_case_file(path)
    assert case.budgets["tf32"].origin("y", "rel_fro") == Inherited(
        "bf16", "y", "bf16", Lent("bf16", "bf16_roundtrip", 14,
                                  Given("t.budget.bf16_roundtrip.y", 8)))


def test_a_key_nobody_gave_comes_from_the_class_default_row(tmp_path: Path) -> None:
    path = tmp_path / "tiny.toml"
    path.write_text('[c1]\nop = "tiny"\n[c1.budget.bf16.idx]\nrecall_min = 0.98\n')
    (case,) = load_case_file(path, lookup=lookup)
    budget = case.budgets["bf16"]
    assert budget.origin("scores", "rel_fro") == Default("bf16")
    assert budget.origin("idx", "recall_min") == Given("c1.budget.bf16.idx", 4)
    assert budget.origin("idx", "tie_band_rel") == Default("bf16")
    assert budget.origin("scores", "no_such_key") is None
    assert case.lines[()] == 1 and case.lines[("budget", "bf16", "idx", "recall_min")] == 4


def test_a_metric_nothing_can_measure_is_recorded_as_not_measured(tmp_path: Path) -> None:
    """PLAIN has no rounding envelope: bf16's max_err_ratio default is left out, and the
    record says why rather than leaving the key unexplained."""
    assert PLAIN.rounding_reference == {}
    path = tmp_path / "plain.toml"
    path.write_text('[p]\nop = "plain"\n')
    (case,) = load_case_file(path, lookup=lookup)
    budget = case.budgets["bf16"]
    origin = budget.origin("y", "max_err_ratio")
    assert isinstance(origin, NotMeasured) and "cannot be measured" in origin.why
    assert "max_err_ratio" not in budget.outputs["y"].limits


def test_the_fixtures_budget_argument_is_its_origin() -> None:
    full = complete_budget("bf16", {"y": {"rel_fro": 1e-3}}, outputs=("y",), topk_output=None,
                           given_origins={"y": {"rel_fro": FixtureArg("tests/test_k.py:10")}})
    assert full.origin("y", "rel_fro") == FixtureArg("tests/test_k.py:10")
    assert full.origin("y", "calc_diff") == Default("bf16")


def test_origins_round_trip_through_json() -> None:
    kinds: list[Origin] = [
        Given("t.budget.bf16.y", 8), Given("t.budget.bf16.y", None), Default("bf16"),
        Default("bf16", "bf16"), FixtureArg("t.py:1"), NotMeasured("why"),
        Lent("a", "b", 3, Inherited("bf16", "y", "bf16", Lent("bf16", "c", 4, Given("x", 5)))),
    ]
    for origin in kinds:
        data = json.loads(json.dumps(origin_to_dict(origin)))
        assert origin_from_dict(data) == origin
    assert origin_to_dict(kinds[-1])["source"]["kind"] == "inherited"
    table = {"y": {"rel_fro": kinds[-1], "atol": kinds[2]}}
    assert origins_from_dict(json.loads(json.dumps(origins_to_dict(table)))) == table
    with pytest.raises(ValueError, match="unknown budget origin kind 'guessed'"):
        origin_from_dict({"kind": "guessed"})


def _value(budget: VariantBudget, output: str, key: str) -> Any:
    if budget.topk is not None and output not in budget.outputs:
        tb = budget.topk
        return tb.tie_band if key.startswith("tie_band_") else tb.limits[key]
    ob = budget.outputs[output]
    return ob.limits[key] if key in ob.limits else getattr(ob, key)


@functools.cache
def _parsed(path: Path) -> tuple[dict[str, Any], list[str]]:
    """A case file's TOML and its lines, read once for the walk's ~470 (case, variant) pairs
    (read-only here)."""
    text = path.read_text()
    return tomllib.loads(text), text.splitlines()


def _shipped() -> list[tuple[Case, str]]:
    return [(case, variant) for case in shipped_cases() for variant in case.budgets]


@pytest.mark.parametrize(("case", "variant"), _shipped(),
                         ids=lambda x: x.id if isinstance(x, Case) else x)
def test_every_recorded_origin_of_the_shipped_cases_holds_the_value_the_gate_uses(
        case: Case, variant: str) -> None:
    """Follow each key's record to its root: the case file's key on the recorded line holds
    the value the budget gates (the row's default for a default), for every shipped case."""
    data, rows = _parsed(case.source)
    budget = case.budgets[variant]
    assert budget.origins
    for output, keys in budget.origins.items():
        for key, origin in keys.items():
            value = _value(budget, output, key) if not isinstance(origin, NotMeasured) else None
            at = root(origin)
            if isinstance(at, Given):
                # a sweep's points are held to the sweep case's tables (Case.table)
                owner, out = at.table.removeprefix(f"{case.table}.budget.").split(".")
                assert data[case.table]["budget"][owner][out][key] == value, (output, key)
                assert at.line is not None and key in rows[at.line - 1], (output, key)
            elif isinstance(at, Default) and at.sums is not None:
                # the simulated reference's row of the variant's declared sums (issue 44)
                quant = get_op(case.op).variants[variant].quant
                assert quant is not None and key in SIM_METRICS, (output, key)
                row = sim_default_row(quant.accumulation)
                assert row is not None and row[0] == at.sums and row[1][key] == value
            elif isinstance(at, Default):
                assert DEFAULT_BUDGETS[at.precision][key] == value, (output, key)
            else:
                assert isinstance(at, NotMeasured), (output, key, origin)


# -- calibration reads the record: which table a suggestion belongs to ------------------------


def _tf32_payload(case: Case, table: dict[str, Any]) -> NumericsPayload:
    budget = case.budgets["tf32"]
    return payload_from_data({"op": "mhc_pre", "kind": "numerics", "source": "cases/mhc.toml", "path": "/x/cases/mhc.toml",
            "case": case.id, "variant": "tf32", "device": "cpu", "nodeid": "n", "runs": True,
            "expect": [], "seeds": [0, 1000], "fresh": 1, "first_seed": 1000, "k": 0,
            "topk_output": None,
            "gated": {o: sorted(ob.limits) for o, ob in budget.outputs.items()},
            "reference": "fp32", "reference_device": "cpu", "budget_like": None,
            "precision": "tf32", "output_precision": {"y": "bf16"}, "pool": ["tf32"],
            "limits": {o: dict(ob.limits) for o, ob in budget.outputs.items()},
            "record": None, "origins": origins_to_dict(budget.origins), "table": table})


def test_calibration_never_writes_an_inherited_key_into_the_finer_variants_table(
        tmp_path: Path) -> None:
    """tf32's y takes rel_fro and frac_outside from bf16's y: a tf32 calibration suggests
    and writes the keys of its own y table (calc_diff), those a default fills, and its
    fp32-stored outputs, but says, and never writes, what belongs to bf16's table; with the
    bf16 table's values where its own measurements would need more."""
    from numcheck.calibrate.plan import RunInfo, plan_numerics

    case = _mhc(tmp_path)
    table = {"mixes": {"rel_fro": [4e-4, 0, "tf32"], "calc_diff": [8e-8, 0, "tf32"]},
             "y": {"rel_fro": [3e-3, 1000, "tf32"], "calc_diff": [2e-6, 0, "tf32"],
                   "frac_outside": [0.0, 0, "tf32"], "max_err_ratio": [1.2, 0, "tf32"]}}
    plan = plan_numerics([_tf32_payload(case, table)], RunInfo(fresh=1, first_seed=1000))
    written = {(e.table[-1], e.key): e for e in plan.edits["/x/cases/mhc.toml"]}
    assert ("y", "rel_fro") not in written and ("y", "frac_outside") not in written
    assert ("y", "calc_diff") in written  # tf32's own y table sets it (MHC)
    assert ("mixes", "rel_fro") in written and ("mixes", "calc_diff") in written
    assert written["mixes", "rel_fro"].origin == Given("t.budget.tf32.mixes", 11)
    assert written["mixes", "calc_diff"].origin == Default("tf32")
    assert ("# t: tf32's y takes rel_fro, frac_outside from [t.budget.bf16.y] (y is stored "
            "in bf16): not written here; calibrate bf16's family to change them. This run "
            "alone would suggest more: rel_fro 0.006 (the table: 0.004)") in plan.lines
    assert "rel_fro = 0.006" not in "\n".join(plan.lines)


def test_a_tf32_calibration_says_y_belongs_to_bf16s_table(pytester: pytest.Pytester) -> None:
    """End to end on the shipped op: the suggestion for tf32's y names bf16's table for the
    keys it inherits, and sets none of them under tf32's y."""
    case_project(pytester, {"mhc.toml": MHC}, addopts=NO_CACHE)
    result = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "tf32")
    result.stdout.fnmatch_lines([
        "[[]t.budget.tf32.y[]]",
        "calc_diff = *",
        ("# t: tf32's y takes rel_fro, frac_outside from [[]t.budget.bf16.y[]] (y is stored "
         "in bf16): not written here; calibrate bf16's family to change them"),
    ])
    y = result.stdout.str().split("[t.budget.tf32.y]")[1].split("# t: tf32's y")[0]
    assert "rel_fro" not in y and "frac_outside" not in y


def test_python_m_calibrate_suggest_leaves_inherited_keys_to_their_table(
        tmp_path: Path) -> None:
    """``python -m numcheck.calibrate --suggest`` prints tf32's y without the keys bf16's y
    table holds for it, and a borrower's table not at all, as the budget record says."""
    from numcheck.calibrate import suggest

    case = _mhc(tmp_path, '[t.budget.bf16_roundtrip]\nbudget_like = "bf16"\n')
    row = {"rel_fro": 1e-4, "calc_diff": 1e-8, "frac_outside": 0.0}
    run = {"cases": {"mhc_pre::t": {"tf32/y": row, "tf32/mixes": row,
                                    "bf16_roundtrip/y": row}}}
    text = suggest([run], [case])
    assert ("[t.budget.tf32.y]\ncalc_diff = 2e-08\n"
            "# rel_fro, frac_outside: bf16's table on y (y is stored in bf16)\n") in text
    assert "[t.budget.tf32.mixes]\nrel_fro = 0.0002\ncalc_diff = 2e-08\nfrac_outside = 0\n" \
        in text
    assert "# t: bf16_roundtrip takes bf16's budgets" in text
    assert "bf16_roundtrip.y" not in text


def test_the_report_record_carries_each_limits_origin_and_what_was_not_measured(
        tmp_path: Path) -> None:
    """The JSON record's ``budget_origin`` mirrors ``budget``: each limit's origin, and a
    limit nothing measured on this device as ``unmeasured`` (left out of ``budget``)."""
    from numcheck.check.result import CheckResult, SeedResult
    from numcheck.report.records import record_from_dict, record_from_result, record_to_dict

    case = _mhc(tmp_path)
    seed = SeedResult(0, ungated={"y.max_err_ratio": "no bf16 envelope on this device"})
    record = record_from_result(CheckResult(case, "tf32", "cpu", seeds=[seed], violations=[]))
    assert record.budget_origin["y"]["rel_fro"] == origin_to_dict(
        Inherited("bf16", "y", "bf16", Given("t.budget.bf16.y", 8)))
    assert record.budget_origin["y"]["max_err_ratio"] == {
        "kind": "unmeasured", "why": "no bf16 envelope on this device"}
    assert "max_err_ratio" not in record.budget["y"]
    assert set(record.budget["y"]) <= set(record.budget_origin["y"]) | {"allow_nan"}
    assert record.budget_origin["mixes"]["rel_fro"] == {
        "kind": "given", "table": "t.budget.tf32.mixes", "line": 11}
    assert record_from_dict(json.loads(json.dumps(record_to_dict(record)))) == record


def test_the_report_records_the_topk_budgets_origins_under_topk(tmp_path: Path) -> None:
    from numcheck.check.result import CheckResult
    from numcheck.report.records import record_from_result

    path = tmp_path / "tiny.toml"
    path.write_text('[c1]\nop = "tiny"\n[c1.budget.bf16.idx]\nrecall_min = 0.98\n')
    (case,) = load_case_file(path, lookup=lookup)
    record = record_from_result(CheckResult(case, "bf16", "cpu", seeds=[], violations=[]))
    assert record.budget_origin["topk"] == {
        "recall_min": {"kind": "given", "table": "c1.budget.bf16.idx", "line": 4},
        "tie_recall_min": {"kind": "default", "precision": "bf16", "storage": None},
        "tie_band": {"kind": "default", "precision": "bf16", "storage": None}}
