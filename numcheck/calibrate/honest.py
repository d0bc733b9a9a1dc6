"""Two-sided calibration: measure an honest family of variants, budget for all of them.

A budget has two jobs: pass every honest implementation of a precision (not only the one
variant it was measured on) and fail every bug bigger than that precision's own rounding.
This module measures the first side the way the gate measures: each member of a family (the
shipped variant of a precision class and test-only alternatives that sum, round or tile
differently) is checked by :func:`numcheck.check.against_golden.run_numerics` against a fresh CPU
reference on each seed, and the worst value of every metric over members and seeds is kept.
:func:`suggest` turns those worsts into budget tables with the project's headroom
(docs/budgets.md).

Pure of pytest; the family itself lives with the tests (tests/honest.py) and is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from numcheck.calibrate.headroom import budget_value
from numcheck.cases import Case
from numcheck.check.against_golden import run_numerics
from numcheck.check.result import CheckResult
from numcheck.numerics.budgets import ERROR_METRICS
from numcheck.numerics.metric_names import SIM_METRICS
from numcheck.ops.registry import get_op
from numcheck.ops.spec import VariantError
from numcheck.selftest import fresh_golden, held_to

#: Metrics :func:`suggest` writes into case files (the simulated reference's where measured).
GATED = ("rel_fro", "calc_diff", "frac_outside", "max_err_ratio", "max_band_ratio",
         *SIM_METRICS)


def measure_family(
    case: Case, precision: str, members: Sequence[str], seeds: Sequence[int], *,
    device: str = "cpu",
) -> dict[str, Any]:
    """Worst metrics of ``members`` (variants of ``precision``) over ``seeds``, each held to
    the case's budget of the shipped ``precision`` variant, against a fresh CPU reference.

    Returns ``{"worst": {output: {metric: value}}, "by_variant": {variant: {output:
    {metric: value}}}, "errors": [...]}``; a member that raises is listed in ``errors``.
    """
    op = get_op(case.op)
    worst: dict[str, dict[str, float]] = {}
    by_variant: dict[str, dict[str, dict[str, float]]] = {}
    errors: list[str] = []
    for seed in seeds:
        one = replace(case, seeds=(seed,))
        golden, inputs = fresh_golden(op, one, "cpu")
        for name in members:
            if device not in op.variants[name].devices:
                continue
            held = held_to(one, name, precision)
            try:
                result = run_numerics(op, held, name, device, golden, inputs,
                                      max_flips=10**9)
            except VariantError as exc:
                errors.append(f"{name} seed {seed}: {exc}")
                continue
            for output, row in _rows(result).items():
                for target in (worst.setdefault(output, {}),
                               by_variant.setdefault(name, {}).setdefault(output, {})):
                    merge_worst(target, row)
    return {"worst": worst, "by_variant": by_variant, "errors": errors}


def _rows(result: CheckResult) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    (sr,) = result.seeds
    for output, m in sr.metrics.items():
        rows[output] = {k: m.value(k) for k in (*ERROR_METRICS, *SIM_METRICS) if m.measured(k)}
        rows[output]["max_abs_honest"] = m.honest_max_abs if m.measured("max_err_ratio") else 0.0
        rows[output].update(m.outside_counts())
    if sr.topk is not None:
        op = get_op(result.case.op)
        assert op.topk is not None
        rows[op.topk.indices] = {"recall_min": sr.topk.recall_min,
                                 "tie_recall_min": sr.topk.tie_recall_min}
    return rows


def merge_worst(target: dict[str, float], row: Mapping[str, float]) -> None:
    """Fold ``row`` into ``target``, keeping the worst of each: the lowest recall, the
    largest of every other measurement."""
    for key, value in row.items():
        if key in ("recall_min", "tie_recall_min"):
            target[key] = min(target.get(key, 1.0), value)
        else:
            target[key] = max(target.get(key, 0.0), value)


def budget_from(worst: Mapping[str, float], metric: str) -> float:
    """The budget of ``metric`` given the honest family's worst: the headroom rule of
    :mod:`numcheck.calibrate.headroom` (1.25x for ``max_err_ratio``, 2x otherwise; floors;
    two significant digits rounded up)."""
    return budget_value(metric, worst.get(metric, 0.0))


def family_findings(calibration: Mapping[str, Any], cases: Sequence[Case]) -> list[Any]:
    """Members of a family whose measurements no honest implementation of its class
    produces (:func:`numcheck.calibrate.guard.suspects`), from :func:`measure_family`
    results keyed ``"<op>::<case>" -> precision -> result``: a family that holds a bug must
    not set a budget. Judged per member where the result keeps ``by_variant``, else on the
    family's worst."""
    from numcheck.calibrate import guard

    findings: list[guard.Finding] = []
    for case in cases:
        op = get_op(case.op)
        for precision, result in calibration.get(f"{case.op}::{case.id}", {}).items():
            members = result.get("by_variant") or {f"the {precision} family": result["worst"]}
            cls = op.variants[precision].precision if precision in op.variants else precision
            findings += guard.suspects(case.id, precision, cls, op.output_precision, members)
    return findings


def suggest(calibration: Mapping[str, Any], cases: Sequence[Case]) -> str:
    """TOML budget tables for the gated metrics of each case's family heads, from
    :func:`measure_family` results keyed ``"<op>::<case>" -> precision -> result``."""
    lines: list[str] = []
    for case in cases:
        key = f"{case.op}::{case.id}"
        for precision, result in calibration.get(key, {}).items():
            for output, worst in result["worst"].items():
                if "recall_min" in worst:
                    continue  # top-k budgets: numcheck.calibrate's policy (pooled band)
                cells = {m: budget_from(worst, m) for m in GATED if m in worst}
                lines.append(f"[{case.id}.budget.{precision}.{output}]")
                lines += [f"{m} = {v:.4g}" for m, v in cells.items()]
        lines.append("")
    return "\n".join(lines)
