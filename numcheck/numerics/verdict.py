"""Hold measured metrics against a budget: the violations decide the verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass

from numcheck.numerics.budgets import OutputBudget, TopkBudget
from numcheck.numerics.metrics import ErrorMetrics
from numcheck.numerics.topk import TopkReport


@dataclass(frozen=True)
class Violation:
    """One metric outside its budget.

    ``upper`` is True for error metrics (value must stay <= limit) and False for
    recalls (value must stay >= limit). ``severity`` orders violations: how many times
    over budget an error is, or how far below its floor a recall falls. ``kind`` is
    ``"speedup"`` for floors on unbounded ratios (severity = floor / value), else empty.
    """

    output: str
    metric: str
    value: float
    limit: float
    upper: bool = True
    seed: int | None = None
    index: tuple[int, ...] | None = None
    detail: str = ""
    kind: str = ""

    @property
    def key(self) -> str:
        """``<output or gate>.<metric>``, as named in a case's ``expect`` table."""
        return f"{self.output}.{self.metric}"

    @property
    def severity(self) -> float:
        if math.isnan(self.value):
            return math.inf
        if self.upper:
            if self.limit == 0:
                return math.inf if self.value > 0 else 0.0
            return self.value / self.limit
        if self.kind == "speedup":
            return math.inf if self.value <= 0 else self.limit / self.value
        # recall: 1 - value is the miss; compare with the allowed miss.
        allowed = 1.0 - self.limit
        miss = 1.0 - self.value
        return math.inf if allowed <= 0 else miss / allowed

    def describe(self) -> str:
        """``logits.calc_diff = 3.2e-05 > budget 1e-05`` with index and seed when known."""
        op = ">" if self.upper else "<"
        text = f"{self.output}.{self.metric} = {_fmt(self.value)} {op} budget {_fmt(self.limit)}"
        if self.index is not None:
            text += f" at index {self.index}"
        if self.seed is not None:
            text += f" (seed {self.seed})"
        if self.detail:
            text += f": {self.detail}"
        return text


def _fmt(x: float) -> str:
    if isinstance(x, int) or (math.isfinite(x) and float(x).is_integer() and abs(x) < 1e6):
        return str(int(x))
    return f"{x:.4g}"


def output_violations(
    name: str, metrics: ErrorMetrics, budget: OutputBudget, *, seed: int | None = None
) -> list[Violation]:
    """Violations of one elementwise output: non-finite accounting first, then each limit."""
    found: list[Violation] = []
    nf = metrics.nonfinite
    if nf.mask_mismatch:
        found.append(
            Violation(
                name, "inf_mask", nf.mask_mismatch, 0, seed=seed,
                detail="the +/-inf pattern (the context mask) must match the golden exactly",
            )
        )
    if not budget.allow_nan and (nf.nan_a or nf.nan_e):
        found.append(
            Violation(
                name, "nan", nf.nan_a + nf.nan_e, 0, seed=seed,
                detail=f"{nf.nan_a} NaN in the output, {nf.nan_e} in the golden "
                "(set allow_nan = true in the budget only if NaN is expected)",
            )
        )
    elif budget.allow_nan and nf.nan_mismatch:
        found.append(
            Violation(name, "nan_mask", nf.nan_mismatch, 0, seed=seed,
                      detail="NaN positions differ from the golden")
        )
    for metric, limit in budget.limits.items():
        if not metrics.measured(metric):
            continue
        value = metrics.value(metric)
        detail = ""
        if metric == "frac_outside":
            value, limit, detail = _outside_in_force(metrics, budget, limit)
        if math.isnan(value) or value > limit:
            found.append(
                Violation(name, metric, value, limit, seed=seed, index=metrics.index_of(metric),
                          detail=detail)
            )
    return found


def _outside_in_force(metrics: ErrorMetrics, budget: OutputBudget,
                      limit: float) -> tuple[float, float, str]:
    """``frac_outside`` as the budget judges it: the fraction once ``max_outside_rows`` worst
    rows are set aside, against the fraction or ``max_outside`` elements, whichever allows
    more; with the detail a failure shows."""
    n = metrics.n_outside_beyond(budget.max_outside_rows)
    value = metrics.frac_outside  # NaN where the NaN patterns differ: stays NaN
    if metrics.n_compared and not math.isnan(value):
        value = n / metrics.n_compared
    notes = []
    in_force = budget.frac_outside_limit(metrics.n_compared)
    if in_force > limit:  # max_outside allows more than the fraction
        limit = in_force
        notes.append(f"{n} of {metrics.n_compared} elements outside the band, more than the "
                     f"{budget.max_outside} max_outside allows")
    excused = metrics.n_outside - n
    if budget.max_outside_rows:
        rows = min(budget.max_outside_rows, len(metrics.row_outside))
        notes.append(f"{excused} more in the worst {rows} row(s) set aside by max_outside_rows"
                     if excused else "no row to set aside")
    return value, limit, "; ".join(notes)


def topk_violations(
    name: str, report: TopkReport, budget: TopkBudget, *, seed: int | None = None
) -> list[Violation]:
    """Violations of a top-k selection: each recall floor in the budget."""
    found: list[Violation] = []
    for metric, floor in budget.limits.items():
        value = report.value(metric)
        if math.isnan(value) or value < floor:
            detail = ""
            if metric.startswith("tie_"):
                detail = f"{report.n_unexplained} flip(s) outside the tie band"
            else:
                detail = f"worst row {report.worst_row}"
            found.append(
                Violation(name, metric, value, floor, upper=False, seed=seed, detail=detail)
            )
    return found


def worst(violations: list[Violation]) -> Violation | None:
    """The violation furthest outside its budget."""
    return max(violations, key=lambda v: v.severity, default=None)
