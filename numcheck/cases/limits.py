"""Where each limit of a loaded case is set: one function for every kind of limit.

A check fails on a budget key (``y.rel_fro``), a speed threshold (``perf.speedup_min``), an
overhead limit (``casts.cast_bytes_ratio``) or an invariance key (``determinism``).
:func:`limit_origin` names the key that sets it, its value and its origin: a budget key's as
recorded when the budget was completed, the others from the lines the loader read
(``Case.lines``) and the gate's case key. Every failure's ``budget:`` line words what it
returns (numcheck.report.limit_text), and nothing reads the file again.
"""

from __future__ import annotations

from dataclasses import dataclass

from numcheck.cases import Case
from numcheck.devices import class_kind
from numcheck.gates import GATES
from numcheck.numerics.budget_origin import GateDefault, Given, Origin
from numcheck.numerics.budgets import TIE_BAND_KEYS


@dataclass(frozen=True)
class Limit:
    """A limit: the key that sets it below its table (``rel_fro``, ``speedup_min.H200``), its
    value (in words for a key that turns a rule on; None for a table), and its origin."""

    key: str
    value: float | bool | str | None
    origin: Origin


def limit_origin(case: Case, variant: str, output: str, metric: str, *,
                 cls: str = "cpu") -> Limit | None:
    """The limit that ``<output>.<metric>`` of ``variant`` is held to in ``case`` on device
    class ``cls`` (``cpu``, ``H200``: which ``speedup_min`` holds) and where it is set; any
    key of a budget too (``atol``, ``tie_band_rel``, one not measured). None for a rule no
    key sets (a NaN, the -inf mask, the quant gate's bound) or a limit the case does not
    hold there."""
    budget = case.budgets.get(variant)
    gate = GATES.get(output)
    if gate is None:  # a budget key: its origin was decided when the budget was completed
        recorded = None if budget is None else budget.origin(output, metric)
        part = None if budget is None else budget.outputs.get(output, budget.topk)
        if recorded is None or part is None:
            return None
        value = part.limits[metric] if metric in part.limits else getattr(
            part, "tie_band" if metric in TIE_BAND_KEYS else metric, None)
        return Limit(metric, value, recorded)
    key, lines = gate.limit_key(metric), case.lines
    if gate.case_key == "perf":
        spec = case.perf.get(variant)
        held = cls if spec is None or cls in spec.speedup_min or not spec.every_class else (
            class_kind(cls))
        if spec is None or held not in spec.speedup_min:
            return None
        own = ("perf", variant, key) in lines
        path = ("perf", variant, key, held) if own else ("perf", key, held)
        table = f"{case.table}.perf" + (f".{variant}" if own else "")
        return Limit(f"{key}.{held}", spec.speedup_min[held], Given(table, lines.get(path)))
    if gate.case_key == "overhead":
        table = f"{case.table}.overhead.{variant}"
        line = lines.get(("overhead", variant, key))
        value = getattr(case.overhead.get(variant), key, None)
        origin: Origin = GateDefault(gate.name, table) if line is None else Given(table, line)
        per_input = any(k[:3] == ("overhead", variant, key) and k[3:] for k in lines)
        return Limit(key, None if per_input else value, origin)
    if gate.case_key:  # a key that turns the gate on
        return Limit(gate.case_key, f"holds '{variant}' on {cls}: bitwise equal, no tolerance",
                     Given(case.table, lines.get((gate.case_key,))))
    return None
