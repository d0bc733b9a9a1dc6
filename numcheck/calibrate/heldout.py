"""The held-out check: measurements from other seeds against the budgets in the case files.

Budgets are set from calibration seeds (``python -m numcheck.calibrate``, the honest families
of ``benchmarks/numerics/honest_calibration.py``); whether they hold is a question for seeds
they were not set from. This module reads the JSON files either tool writes and lists every
worst value that exceeds (or, for the top-k floors, falls below) the budget the case gives
that variant; an empty list is the pass. A ``frac_outside`` over its fraction counts only when
the worst count of elements outside (``n_outside``, recorded since max_outside exists) is over
the budget's ``max_outside`` (with ``max_outside_rows``, the count beyond the worst row); a
file without counts is judged on the fraction alone. Pure of pytest::

    python -m numcheck.heldout docs/evidence/2026-12-01-h200-numerics/*heldout*.json [--cases cases]

Exits 1 when a value exceeds its budget, printing one line per excess.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numcheck.cases import Case
from numcheck.numerics.budgets import OutputBudget, VariantBudget

__all__ = ["Excess", "excesses", "main", "outside_as_judged", "rows_of"]

#: Top-k limits are floors (the value must not fall below them); every other limit a ceiling.
FLOORS = ("recall_min", "tie_recall_min")


@dataclass(frozen=True)
class Excess:
    """One measured worst value outside its budget."""

    case: str
    budget_of: str
    variant: str
    output: str
    metric: str
    value: float
    limit: float

    def describe(self) -> str:
        who = self.variant if self.variant == self.budget_of else \
            f"{self.variant} (held to {self.budget_of})"
        side = "<" if self.metric in FLOORS else ">"
        return (f"{self.case} {who} {self.output}.{self.metric} = {self.value:.4g} {side} "
                f"budget {self.limit:.4g}")


def rows_of(report: Mapping[str, Any]) -> Iterator[tuple[str, str, str, str, Mapping[str, float]]]:
    """``(case, budget_of, variant, output, worst values)`` of a calibration or honest-family
    JSON report (the two layouts: ``"variant/output"`` keys, or families by precision)."""
    for key, body in report["cases"].items():
        for name, value in body.items():
            if "/" in name:  # python -m numcheck.calibrate: "variant/output" -> metrics
                variant, output = name.split("/", 1)
                yield key, variant, variant, output, value
            else:  # honest family: precision -> {"by_variant": {member: {output: metrics}}}
                for member, outputs in value.get("by_variant", {}).items():
                    for output, metrics in outputs.items():
                        yield key, name, member, output, metrics


def excesses(cases: Mapping[str, Case], reports: Sequence[Mapping[str, Any]]) -> list[Excess]:
    """Every worst value in ``reports`` outside the budget its case gives (``cases`` keyed
    ``"<op>::<id>"``). Rows for a case or variant the case files do not have are skipped."""
    found = []
    for report in reports:
        for key, budget_of, variant, output, metrics in rows_of(report):
            case = cases.get(key)
            if case is None or budget_of not in case.budgets:
                continue
            found += _outside(key, budget_of, variant, output, metrics, case.budgets[budget_of])
    return found


def _outside(key: str, budget_of: str, variant: str, output: str,
             metrics: Mapping[str, float], budget: VariantBudget) -> list[Excess]:
    if output in budget.outputs:
        limits = budget.outputs[output].limits
    elif budget.topk is not None:
        limits = budget.topk.limits
    else:
        return []
    out = []
    for metric, limit in limits.items():
        value = metrics.get(metric)
        if value is None:
            continue
        if metric == "frac_outside":
            value = outside_as_judged(metrics, budget.outputs[output])
            if value is None:
                continue  # never more elements outside than max_outside allows
        if (value < limit) if metric in FLOORS else (value > limit):
            out.append(Excess(key, budget_of, variant, output, metric, value, limit))
    return out


def outside_as_judged(metrics: Mapping[str, float], budget: OutputBudget) -> float | None:
    """The recorded worst ``frac_outside`` as the budget judges it: None where the count is
    within ``max_outside``; with ``max_outside_rows`` the count beyond the worst row (a file
    records that one row; more rows set aside are judged as one, which is stricter)."""
    n = metrics.get("n_outside", math.inf)
    value = metrics["frac_outside"]
    if budget.max_outside_rows and "n_outside_beyond_row" in metrics:
        n = metrics["n_outside_beyond_row"]
        if metrics.get("n_compared"):
            value = n / metrics["n_compared"]
    return None if n <= budget.max_outside else value


def main(argv: list[str] | None = None) -> int:
    from numcheck.cases import load_cases

    ap = argparse.ArgumentParser(prog="python -m numcheck.heldout",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", type=Path, help="calibration or honest-family JSON")
    ap.add_argument("--cases", type=Path, default=Path("cases"))
    args = ap.parse_args(argv)
    cases = {f"{c.op}::{c.id}": c for c in load_cases(args.cases) if not c.perf_only}
    reports = [json.loads(p.read_text()) for p in args.reports]
    found = excesses(cases, reports)
    rows = sum(1 for r in reports for _ in rows_of(r))
    for e in found:
        print(e.describe())
    print(f"{len(found)} value(s) outside their budgets, {rows} (case, variant, output) rows "
          f"from {len(reports)} file(s)")
    return 1 if found else 0

