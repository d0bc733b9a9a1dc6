"""Budget completion from the defaults table, and every budget error."""

from __future__ import annotations

import math
import pickle
from collections.abc import Mapping
from typing import Any

import pytest

from numcheck.numerics import budgets
from numcheck.numerics.budgets import (
    DEFAULT_BUDGETS,
    ERROR_METRICS,
    TOPK_LIMITS,
    BudgetError,
    OutputBudget,
    TopkBudget,
    VariantBudget,
    complete_budget,
)
from numcheck.ops.registry import PRECISIONS

OUTPUTS = ("scores", "idx")


def complete(
    given: Mapping[str, Mapping[str, Any]] | None = None,
    precision: str = "bf16",
    topk_output: str | None = "idx",
) -> VariantBudget:
    return complete_budget(precision, given or {}, outputs=OUTPUTS, topk_output=topk_output)


def budget_error(given: Mapping[str, Mapping[str, Any]], topk_output: str | None = "idx") -> str:
    with pytest.raises(BudgetError) as info:
        complete(given, topk_output=topk_output)
    message = str(info.value)
    assert message.startswith(f"key '{info.value.key}': ")
    assert ". Fix: " in message
    return message


# --- the defaults table -------------------------------------------------------------------


def test_table_has_one_row_per_precision_class() -> None:
    assert set(DEFAULT_BUDGETS) == set(PRECISIONS)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_row_has_the_keys_the_brief_names(precision: str) -> None:
    row = DEFAULT_BUDGETS[precision]
    for key in ("rel_fro", "calc_diff", "frac_outside", "atol", "rtol"):
        assert key in row
    for key in ("recall_min", "tie_recall_min", "tie_band_rel"):
        assert key in row


def test_lower_precision_never_gets_a_tighter_default() -> None:
    fp32, tf32, bf16 = (DEFAULT_BUDGETS[p] for p in ("fp32", "tf32", "bf16"))
    for key in fp32:
        if key in TOPK_LIMITS:  # lower bounds
            assert fp32[key] >= tf32[key] >= bf16[key], key
        else:
            assert fp32[key] <= tf32[key] <= bf16[key], key
    # The derived classes, coarsest last: fp16 (u = 2^-11) < bf16 < e4m3 < e5m2.
    order = [DEFAULT_BUDGETS[p] for p in ("fp16", "bf16", "e4m3", "e5m2")]
    for key in ("rel_fro", "calc_diff", "atol", "rtol", "tie_band_rel"):
        values = [row[key] for row in order]
        assert values == sorted(values), key
    recalls = [row["recall_min"] for row in order]
    assert recalls == sorted(recalls, reverse=True)


def test_fp16_and_fp8_rows_are_the_bf16_row_scaled_by_unit_roundoff() -> None:
    bf16 = DEFAULT_BUDGETS["bf16"]
    fp16, e4m3, e5m2 = (DEFAULT_BUDGETS[p] for p in ("fp16", "e4m3", "e5m2"))
    # u: bf16 2^-8, fp16 2^-11 (8x finer), e4m3 2^-4 (16x coarser), e5m2 2^-3 (32x).
    assert fp16["rel_fro"] == pytest.approx(bf16["rel_fro"] / 8, rel=0.05)
    assert fp16["calc_diff"] == pytest.approx(bf16["calc_diff"] / 64, rel=0.05)
    assert e4m3["atol"] == pytest.approx(bf16["atol"] * 16, rel=0.05)
    assert e4m3["calc_diff"] == pytest.approx(bf16["calc_diff"] * 256, rel=0.05)
    assert e5m2["rtol"] == pytest.approx(bf16["rtol"] * 32, rel=0.05)
    assert e4m3["recall_min"] == pytest.approx(1 - (1 - bf16["recall_min"]) * 16)
    assert e5m2["recall_min"] == 0.0  # a miss of 160% floors at 0: tie_recall_min still gates
    for row in (fp16, e4m3, e5m2):
        assert row["frac_outside"] == bf16["frac_outside"]
        assert row["max_err_ratio"] == bf16["max_err_ratio"]
        assert row["max_band_ratio"] == bf16["max_band_ratio"]
        assert row["tie_recall_min"] == 1.0


def test_scaled_row_by_hand() -> None:
    row = {"rel_fro": 1e-2, "calc_diff": 1e-4, "recall_min": 0.95, "frac_outside": 0.01,
           "max_band_ratio": 3.0}
    assert budgets.scaled_row(row, 1.0, 2.0) == {
        "rel_fro": 2e-2, "calc_diff": 4e-4, "recall_min": 0.9, "frac_outside": 0.01,
        "max_band_ratio": 3.0,
    }


@pytest.mark.parametrize(
    ("table", "fragment"),
    [
        ({"bf16": {"atol": 1.0, "rtol": 1.0, "tie_band_rel": 1.0, "bogus": 1.0}}, "'bogus'"),
        ({"bf16": {"atol": 1.0, "rtol": 1.0}}, "tie_band_rel / tie_band_abs"),
        ({"bf16": {"atol": 1.0, "tie_band_rel": 1.0}}, "needs atol, rtol"),
    ],
)
def test_a_broken_defaults_table_fails_loudly(table: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        budgets._check_defaults(table)


def test_a_negative_default_fails_loudly() -> None:
    table = {"bf16": {"atol": -1.0, "rtol": 1.0, "tie_band_rel": 1.0}}
    with pytest.raises(BudgetError, match="DEFAULT_BUDGETS.bf16.atol"):
        budgets._check_defaults(table)


# --- completion ---------------------------------------------------------------------------


@pytest.mark.parametrize("precision", PRECISIONS)
def test_nothing_given_means_the_defaults_row(precision: str) -> None:
    row = DEFAULT_BUDGETS[precision]
    budget = complete(precision=precision)
    assert set(budget.outputs) == {"scores"}
    assert budget.outputs["scores"] == OutputBudget(
        limits={k: row[k] for k in ERROR_METRICS if k in row},
        atol=row["atol"],
        rtol=row["rtol"],
        allow_nan=False,
        max_outside=row["max_outside"],
    )
    assert budget.topk == TopkBudget(
        limits={"recall_min": row["recall_min"], "tie_recall_min": row["tie_recall_min"]},
        tie_band=row["tie_band_rel"],
        tie_band_kind="rel",
    )


def test_metrics_outside_the_table_are_not_gated_unless_given() -> None:
    limits = complete().outputs["scores"].limits
    for metric in ("max_abs", "max_rel", "ulp_p50", "ulp_p99", "ulp_max"):
        assert metric not in limits
    topk = complete().topk
    assert topk is not None
    assert "recall_mean" not in topk.limits
    assert "tie_recall_mean" not in topk.limits


def test_a_partial_budget_keeps_the_other_defaults() -> None:
    row = DEFAULT_BUDGETS["bf16"]
    budget = complete({"scores": {"calc_diff": 1e-5, "atol": 0.5}})
    scores = budget.outputs["scores"]
    assert scores.limits["calc_diff"] == 1e-5
    assert scores.limits["rel_fro"] == row["rel_fro"]
    assert scores.limits["frac_outside"] == row["frac_outside"]
    assert scores.atol == 0.5
    assert scores.rtol == row["rtol"]


def test_every_error_metric_can_be_given() -> None:
    given = {metric: 0.5 for metric in ERROR_METRICS}
    limits = complete({"scores": given}).outputs["scores"].limits
    assert dict(limits) == given


def test_integers_are_numbers_and_inf_is_allowed() -> None:
    scores = complete({"scores": {"max_abs": 0, "ulp_max": 4, "max_rel": math.inf}}).outputs[
        "scores"
    ]
    assert scores.limits["max_abs"] == 0.0
    assert isinstance(scores.limits["max_abs"], float)
    assert scores.limits["ulp_max"] == 4.0
    assert scores.limits["max_rel"] == math.inf


def test_allow_nan() -> None:
    assert complete({"scores": {"allow_nan": True}}).outputs["scores"].allow_nan is True


def test_partial_topk_budget_keeps_the_other_defaults() -> None:
    row = DEFAULT_BUDGETS["bf16"]
    topk = complete({"idx": {"recall_min": 0.98, "recall_mean": 0.999}}).topk
    assert topk == TopkBudget(
        limits={
            "recall_min": 0.98,
            "tie_recall_min": row["tie_recall_min"],
            "recall_mean": 0.999,
        },
        tie_band=row["tie_band_rel"],
        tie_band_kind="rel",
    )


@pytest.mark.parametrize(("key", "kind"), [("tie_band_rel", "rel"), ("tie_band_abs", "abs")])
def test_a_given_tie_band_replaces_the_default(key: str, kind: str) -> None:
    topk = complete({"idx": {key: 0.25}}).topk
    assert topk is not None
    assert (topk.tie_band, topk.tie_band_kind) == (0.25, kind)


def test_an_op_without_topk_gets_no_topk_budget() -> None:
    budget = complete(topk_output=None)
    assert budget.topk is None
    assert set(budget.outputs) == set(OUTPUTS)


# --- errors -------------------------------------------------------------------------------


def test_unknown_output() -> None:
    message = budget_error({"logits": {"rel_fro": 1e-3}})
    assert message.startswith("key 'logits': unknown output 'logits'")
    assert "scores, idx" in message


def test_output_that_is_not_a_table() -> None:
    assert "expected a table of budget keys, got float 0.1" in budget_error({"scores": 0.1})  # type: ignore[dict-item]


def test_unknown_metric_lists_the_allowed_names() -> None:
    message = budget_error({"scores": {"rel_frob": 1e-3}})
    assert message.startswith("key 'scores.rel_frob': unknown metric 'rel_frob'")
    assert "rel_fro, calc_diff" in message and "allow_nan" in message


def test_unknown_topk_key_lists_the_allowed_names() -> None:
    message = budget_error({"idx": {"recall": 0.9}})
    assert message.startswith("key 'idx.recall': unknown top-k key 'recall'")
    assert "recall_min, recall_mean, tie_recall_min, tie_recall_mean" in message


def test_topk_key_on_an_ordinary_output() -> None:
    message = budget_error({"scores": {"recall_min": 0.9}})
    assert "'recall_min' is a top-k key, but 'scores' is not a top-k output" in message
    assert "Fix: move it to the top-k output 'idx'" in message


def test_topk_key_on_an_op_without_topk() -> None:
    message = budget_error({"scores": {"tie_band_rel": 0.1}}, topk_output=None)
    assert "Fix: remove it: this op has no top-k output" in message


def test_error_metric_on_the_topk_output() -> None:
    message = budget_error({"idx": {"rel_fro": 1e-3}})
    assert message.startswith("key 'idx.rel_fro': 'rel_fro' is an error metric")
    assert "another output (scores)" in message


def test_both_tie_bands() -> None:
    message = budget_error({"idx": {"tie_band_rel": 0.1, "tie_band_abs": 0.1}})
    assert message.startswith("key 'idx': both tie_band_rel and tie_band_abs are given")


@pytest.mark.parametrize(
    ("given", "key", "fragment"),
    [
        ({"scores": {"calc_diff": "1e-3"}}, "scores.calc_diff", "got string '1e-3'"),
        ({"scores": {"calc_diff": True}}, "scores.calc_diff", "got boolean True"),
        ({"scores": {"atol": [1]}}, "scores.atol", "got array [1]"),
        ({"scores": {"rtol": -1e-3}}, "scores.rtol", "negative"),
        ({"scores": {"rel_fro": math.nan}}, "scores.rel_fro", "NaN"),
        ({"scores": {"frac_outside": 1.5}}, "scores.frac_outside", "outside [0, 1]"),
        ({"scores": {"allow_nan": 1}}, "scores.allow_nan", "expected true or false, got integer 1"),
        ({"idx": {"recall_min": 1.01}}, "idx.recall_min", "outside [0, 1]"),
        ({"idx": {"tie_recall_mean": -0.1}}, "idx.tie_recall_mean", "negative"),
        ({"idx": {"tie_band_abs": math.nan}}, "idx.tie_band_abs", "NaN"),
        ({"idx": {"tie_band_rel": "big"}}, "idx.tie_band_rel", "got string 'big'"),
    ],
)
def test_bad_values(given: Any, key: str, fragment: str) -> None:
    with pytest.raises(BudgetError) as info:
        complete(given)
    assert info.value.key == key
    assert fragment in info.value.problem


def test_a_quoted_number_gets_a_fix_without_quotes() -> None:
    message = budget_error({"scores": {"calc_diff": "1e-3"}})
    assert message.endswith("Fix: write a bare number: calc_diff = 1e-3")


def test_unknown_precision() -> None:
    with pytest.raises(ValueError, match=r"no default budget for precision 'fp8' \(known: fp32"):
        complete(precision="fp8")


def test_topk_output_must_be_an_output() -> None:
    with pytest.raises(ValueError, match="top-k output 'sel' is not one of"):
        complete(topk_output="sel")


def test_budget_error_pickles() -> None:
    error = BudgetError("scores.atol", "the budget is negative (-1)", "give a number >= 0")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.key, copy.problem, copy.fix, str(copy)) == (
        error.key,
        error.problem,
        error.fix,
        str(error),
    )


# -- outputs stored in a coarser dtype: the coarse class's budget -----------------------------

_COARSE = {"y": "bf16"}
_REFS = {"bf16": "bf16", "tf32": "tf32"}
_GIVEN = {"bf16": {"y": {"rel_fro": 4.5e-3, "frac_outside": 1.3e-3, "max_err_ratio": 5.0,
                         "atol": 1e-2}},
          "fp32": {"mixes": {"rel_fro": 1e-6}}}


def test_finer_variant_takes_the_coarse_class_budget_on_a_coarse_output() -> None:
    taken = budgets.coarse_inheritance("fp32", _GIVEN["fp32"], _GIVEN, _COARSE, _REFS)
    # max_err_ratio too: on y it is measured against the bf16 rounding envelope.
    assert taken == {"y": ("bf16", "bf16", ("rel_fro", "frac_outside", "max_err_ratio",
                                            "atol"))}
    assert _GIVEN["fp32"] == {"mixes": {"rel_fro": 1e-6}}  # the input is left alone


def test_a_key_the_variant_gives_itself_wins_over_the_inherited_one() -> None:
    own = {"y": {"rel_fro": 1e-4}}
    taken = budgets.coarse_inheritance("tf32", own, {**_GIVEN, "tf32": own}, _COARSE, _REFS)
    assert taken["y"] == ("bf16", "bf16", ("frac_outside", "max_err_ratio", "atol"))


def test_a_variant_as_coarse_as_the_storage_keeps_its_own_budget() -> None:
    assert budgets.coarse_inheritance("bf16", {}, _GIVEN, _COARSE, _REFS) == {}
    assert budgets.coarse_inheritance("e4m3", {}, _GIVEN, _COARSE, _REFS) == {}
    # fp16 keeps more bits than bf16: finer, so it takes the bf16 budget on y
    assert "y" in budgets.coarse_inheritance("fp16", {}, _GIVEN, _COARSE, _REFS)


def test_nothing_to_inherit_without_the_coarse_class_budget() -> None:
    assert budgets.coarse_inheritance("fp32", {}, {}, _COARSE, _REFS) == {}
    assert budgets.coarse_inheritance("fp32", {}, _GIVEN, _COARSE, {}) == {}


def test_max_outside_is_a_count_of_elements() -> None:
    assert complete(given={"scores": {"max_outside": 3}}).outputs["scores"].max_outside == 3
    assert complete(given={"scores": {"max_outside": 3.0}}).outputs["scores"].max_outside == 3
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(BudgetError, match="max_outside"):
            complete(given={"scores": {"max_outside": bad}})


def test_max_outside_defaults_to_zero_for_fp32_only() -> None:
    assert complete(precision="fp32").outputs["scores"].max_outside == 0
    for precision in ("tf32", "bf16", "fp16", "e4m3"):
        assert complete(precision=precision).outputs["scores"].max_outside == 2


def test_a_finer_variant_takes_max_outside_on_a_coarse_output_too() -> None:
    given = {"bf16": {"y": {"max_outside": 4}}}
    taken = budgets.coarse_inheritance("fp32", {}, given, {"y": "bf16"}, {"bf16": "bf16"})
    assert taken == {"y": ("bf16", "bf16", ("max_outside",))}


def test_max_outside_rows_is_a_small_count_of_rows() -> None:
    assert complete(given={"scores": {"max_outside_rows": 1}}).outputs["scores"]\
        .max_outside_rows == 1
    assert complete().outputs["scores"].max_outside_rows == 0
    for bad in (-1, 0.5, True, "1"):
        with pytest.raises(BudgetError, match="max_outside_rows.*count of rows"):
            complete(given={"scores": {"max_outside_rows": bad}})
    with pytest.raises(BudgetError, match="at most 8 rows") as info:
        complete(given={"scores": {"max_outside_rows": 9}})
    assert "raise frac_outside instead" in str(info.value)


def test_a_finer_variant_takes_max_outside_rows_on_a_coarse_output_too() -> None:
    given = {"bf16": {"y": {"max_outside_rows": 1, "frac_outside": 0.001}}}
    taken = budgets.coarse_inheritance("tf32", {}, given, {"y": "bf16"}, {"bf16": "bf16"})
    assert taken == {"y": ("bf16", "bf16", ("max_outside_rows", "frac_outside"))}
