"""The one headroom rule (numcheck.calibrate.headroom): the same numbers in every calibrator
and in docs/budgets.md, and a bug at twice the honest family's worst fails a budget
calibrated from that family."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from numcheck.calibrate import (
    References,
    calibration_seeds,
    measure_variant,
    pool,
    suggest_values,
)
from numcheck.calibrate.headroom import (
    BUG_FACTOR,
    DEFAULT_HEADROOM,
    ELEMENT_KEY,
    HEADROOM,
    budget_value,
    element_limit,
    round_up,
)
from numcheck.calibrate.honest import budget_from
from numcheck.cases import load_case_file
from numcheck.check import run_check
from numcheck.numerics.budgets import DEFAULT_BUDGETS, complete_budget
from numcheck.ops.registry import Variant, add_variant, get_op
from tests import honest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("metric", "worst"), [
    ("max_err_ratio", 1.72), ("max_err_ratio", 0.0063), ("rel_fro", 2.3e-3),
    ("calc_diff", 3.1e-6), ("rel_fro", 0.0), ("calc_diff", 0.0)])
def test_every_calibrator_takes_its_numbers_from_the_rule(metric: str, worst: float) -> None:
    """pytest --numcheck-calibrate (suggest_values) and the honest-family calibration
    (budget_from) give one budget for one worst measurement."""
    pytest_mode = suggest_values({metric: worst}, topk=False, gated=(metric,))[metric]
    assert pytest_mode == budget_from({metric: worst}, metric) == budget_value(metric, worst)


def test_the_rule_itself() -> None:
    assert budget_value("max_err_ratio", 2.0) == pytest.approx(2.5)  # 1.25x
    assert budget_value("max_err_ratio", 0.4) == 1.0  # the floor: the envelope's own worst
    assert budget_value("rel_fro", 2.1e-3) == pytest.approx(4.2e-3)  # 2x
    assert budget_value("calc_diff", 0.0) == pytest.approx(1e-14)  # never bit-exactness across machines
    # The element ratio's headroom is below the factor the rule promises to catch, or a bug
    # of that size passes the very seed that set the honest worst.
    assert HEADROOM[ELEMENT_KEY] < BUG_FACTOR == 2.0
    # bf16 and tf32 rows: max_err_ratio 2.9 = 1.25 x 2.32; twice that is a bug's size.
    assert element_limit(DEFAULT_BUDGETS["bf16"]) == pytest.approx(2 * 2.9 / 1.25)
    assert element_limit(DEFAULT_BUDGETS["fp32"]) is None  # fp32 gates no element ratio
    assert round_up(3.81e-3) == pytest.approx(3.9e-3)


def test_docs_state_the_rule_the_code_applies() -> None:
    """docs/budgets.md's "The headroom rule" names the numbers headroom.py holds."""
    text = (ROOT / "docs" / "budgets.md").read_text()
    section = text.split("\n## The headroom rule\n", 1)[1].split("\n## ", 1)[0]
    assert f"| `max_err_ratio` | {HEADROOM[ELEMENT_KEY]:g}x" in section
    assert f"| `rel_fro`, `calc_diff`, `frac_outside`, `max_band_ratio`, tie band | " \
           f"{DEFAULT_HEADROOM:g}x" in section
    assert "numcheck/calibrate/headroom.py" in section
    assert f"{BUG_FACTOR:g}x the honest" in section
    # and nowhere does a page say the calibrator's max_err_ratio takes 2x the worst
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        assert not re.search(r"max_err_ratio[^.\n]{0,40}\b2x the (worst|family)",
                             page.read_text()), page


CASE = """\
[small]
op = "mhc_pre"
preset = "v4flash"
shape = { tokens = 16 }
seeds = [0]
variants = ["bf16", "honest_split_k3", "honest_split_k8_tree"]
"""
#: The family calibrated here: the shipped bf16 and two honest split-K members outside the
#: rounding envelope (their worst elements are the ones above 1).
FAMILY = ("bf16", "honest_split_k3", "honest_split_k8_tree")
#: The outputs stored in fp32, where doubling an error doubles the element ratio exactly.
FP32_OUTPUTS = ("mixes", "pre", "post", "comb")


def _doubled(member: str):
    """A bug whose own error is twice ``member``'s on every fp32 output: golden + 2 x
    (member - golden); y as the member computes it."""
    op = get_op("mhc_pre")

    def fn(inputs: dict, params: dict) -> dict:
        exact = op.variants["fp32"].fn(inputs, params)
        honest_out = op.variants[member].fn(inputs, params)
        out = dict(honest_out)
        for name in FP32_OUTPUTS:
            e, h = exact[name].float(), honest_out[name].float()
            out[name] = e + BUG_FACTOR * (h - e)
        return out

    return fn


def test_a_bug_at_twice_the_honest_worst_fails_a_calibrated_budget(tmp_path: Path) -> None:
    """Calibrate the bf16 family of a small mHC case as pytest --numcheck-calibrate does
    (measure_variant over the case's seed and fresh ones, pooled, suggest_values), hold a
    synthetic bug to the result: the member that set the family's worst element, its error
    scaled by 2. It fails max_err_ratio on the seed that set that worst, where the member
    itself passes; under a 2x element headroom it would have passed every calibration seed."""
    honest.register_all()
    (tmp_path / "mhc.toml").write_text(CASE)
    (case,) = load_case_file(tmp_path / "mhc.toml")
    op = get_op("mhc_pre")
    seeds = calibration_seeds(case, 3, first_seed=1000)
    refs = References(op, case, "cpu")
    table = pool(measure_variant(op, case, v, "cpu", seeds, refs) for v in FAMILY)
    gated = {name: sorted(ob.limits) for name, ob in case.budgets["bf16"].outputs.items()}
    cells = {o: suggest_values({m: w.value for m, w in row.items()}, topk=False,
                               gated=gated[o]) for o, row in table.items()}
    output = max(FP32_OUTPUTS, key=lambda o: table[o][ELEMENT_KEY].value)
    worst = table[output][ELEMENT_KEY]
    assert worst.value > 1  # set by a member outside the envelope, as the docs say
    budget = complete_budget("bf16", cells, outputs=op.outputs, topk_output=None,
                             output_precision=op.output_precision)
    assert budget.outputs[output].limits[ELEMENT_KEY] == pytest.approx(
        round_up(HEADROOM[ELEMENT_KEY] * worst.value))
    add_variant("mhc_pre", Variant("doubled", _doubled(worst.variant), "bf16"))
    op = get_op("mhc_pre")  # with the bug registered
    held = replace(case, variants=(worst.variant, "doubled"),
                   budgets={**case.budgets, worst.variant: budget, "doubled": budget})
    one = replace(held, seeds=(worst.seed,))
    golden, inputs = refs.get(worst.seed)
    member = run_check(op, one, worst.variant, "cpu", inputs, golden)
    bug = run_check(op, one, "doubled", "cpu", inputs, golden)
    assert member.passed, [v.describe() for v in member.violations]
    assert not bug.passed
    failed = {(v.output, v.metric) for v in bug.violations}
    assert (output, ELEMENT_KEY) in failed, failed
    bug_ratio = bug.metric(output, ELEMENT_KEY)
    assert bug_ratio == pytest.approx(BUG_FACTOR * worst.value, rel=1e-3)
    # The calibrator's former 2x: the doubled member's ratio never exceeds 2x the pooled
    # worst on a calibration seed, so max_err_ratio could not have failed it.
    assert bug_ratio <= round_up(2.0 * worst.value) * (1 + 1e-3)
    assert torch.isfinite(torch.tensor(bug_ratio))
