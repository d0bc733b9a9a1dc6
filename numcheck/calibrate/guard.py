"""What calibration refuses to write, and why (docs/budgets.md, "What calibration refuses").

A calibrated budget passes whatever it was measured on. So a measurement that no honest
implementation of the precision class could produce must not become a budget, and a table
must not be re-set from less evidence than set it. Each rule gives :class:`Finding` lines;
the callers (``pytest --numcheck --numcheck-calibrate``, ``python -m numcheck.calibrate
--suggest``, the honest-family calibration) write nothing while one stands:

- **a selected variant looks like a bug** (:func:`suspects`): its worst element
  (``max_err_ratio``, against the class's honest rounding envelope on the same inputs) beyond
  the headroom rule's limit, a suggested ``rel_fro``, ``calc_diff`` or tie band past the
  class's default row, or (:func:`borrower_widens`) a ``budget_like`` borrower whose measurements would widen
  its lender's table. Overridden only by naming the variant (``accept``); the override is
  recorded in the case file;
- **a bit-exact floor** (:func:`floor_tightening`): every error measured 0 (``tf32`` on a CPU
  computes IEEE fp32) and a value tighter than the one in force: a run that cannot see the
  class's rounding cannot budget it. Never overridden;
- **less than the record** (:func:`record_gaps`): the table's calibration record names pool
  members or devices this run did not measure; **no record** (:func:`unrecorded_tightening`):
  a value the file sets would be tightened by a run that does not know what set it. Both are
  overridden by ``renew`` (set the tables from this run alone);
- **a mixed table** (:func:`mixed_keys`): a table keeping a key this run does not set, beside
  keys it does. Never overridden: measure the key, or remove it.

Pure: no torch, no pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from numcheck.calibrate.headroom import (
    BUG_FACTOR,
    ELEMENT_KEY,
    ROW_KEYS,
    budget_value,
    element_limit,
    honest_worst_of_row,
)
from numcheck.numerics.budgets import DEFAULT_BUDGETS
from numcheck.precision import coarser

#: Where the default rows live, as messages name it.
ROWS_SOURCE = "numcheck/numerics/budgets.py"
#: The measured metric behind a budget key, where the names differ.
_MEASURED = {"tie_band_rel": "band_rel_needed"}
#: Kinds of finding a named variant may override (the variant looks like a bug), and kinds a
#: run that sets the tables afresh overrides (the record, or its absence).
SUSPECT = frozenset({"element", "row", "borrower"})
RENEWABLE = frozenset({"record", "unrecorded"})


class WorstLike(Protocol):
    """A worst measurement with where it came from (numcheck.calibrate.Worst)."""

    @property
    def value(self) -> float: ...
    @property
    def seed(self) -> int: ...


#: One member's worst measurements: output -> metric -> a Worst, or a bare value.
MemberTable = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Finding:
    """One reason not to write. ``variant``: the variant it is about (the suspect member,
    or the variant whose tables would be written); ``table``: that variant's tables."""

    kind: str
    case: str
    variant: str
    table: str
    head: str
    details: tuple[str, ...] = ()
    #: The finding in a few words, as a calibration record keeps an overridden one.
    short: str = ""

    @property
    def text(self) -> str:
        return "\n".join([self.head, *self.details])

    def overridden(self, accepted: Iterable[str], renew: bool) -> bool:
        """Whether the run's override covers this finding."""
        if self.kind in SUSPECT:  # a label may name the device too: "y_off cuda"
            return self.variant.split()[0] in set(accepted)
        return renew and self.kind in RENEWABLE


def _value_seed(worst: Any) -> tuple[float, int | None]:
    if isinstance(worst, int | float):
        return float(worst), None
    return float(worst.value), int(worst.seed)


def _at(seed: int | None) -> str:
    return "" if seed is None or seed < 0 else f" (seed {seed})"


def row_class(precision: str, output: str, output_precision: Mapping[str, str]) -> str:
    """The class whose default row holds ``output`` (the coarser for a coarse output)."""
    storage = output_precision.get(output)
    return coarser(precision, storage) if storage else precision


def worst_element(table: MemberTable) -> tuple[str, float, int | None] | None:
    """A member's worst ``max_err_ratio`` over its outputs: (output, value, seed)."""
    best: tuple[str, float, int | None] | None = None
    for output, row in table.items():
        if ELEMENT_KEY in row:
            value, seed = _value_seed(row[ELEMENT_KEY])
            if best is None or value > best[1]:
                best = (output, value, seed)
    return best


def element_text(table: MemberTable, precision: str,
                 output_precision: Mapping[str, str]) -> str:
    """``worst element y.max_err_ratio = 10 (seed 0): 10x the worst element of bf16's
    honest rounding envelope on the same inputs; bf16's default row allows 2.9``."""
    found = worst_element(table)
    if found is None:
        return "worst element: not measured (the op has no rounding envelope for its class)"
    output, value, seed = found
    cls = row_class(precision, output, output_precision)
    row = DEFAULT_BUDGETS[cls]
    allowed = f"; {cls}'s default row allows {row[ELEMENT_KEY]:g}" if ELEMENT_KEY in row else ""
    return (f"worst element {output}.{ELEMENT_KEY} = {value:.3g}{_at(seed)}: {value:.3g}x the "
            f"worst element of {cls}'s honest rounding envelope on the same inputs{allowed}")


def suspects(
    case: str, table_variant: str, precision: str, output_precision: Mapping[str, str],
    members: Mapping[str, MemberTable], *, lender: Mapping[str, str] | None = None,
) -> list[Finding]:
    """The members whose own measurements no honest member of ``precision`` could produce.

    ``members``: variant -> its worst measurements (output -> metric -> Worst or value),
    every variant pooled into ``table_variant``'s tables. A member is suspect where its worst
    ``max_err_ratio`` exceeds :func:`numcheck.calibrate.headroom.element_limit` of the
    output's class row, or where the budget the headroom rule would give its worst
    ``rel_fro``, ``calc_diff`` or tie band lies past that row.
    """
    lender = lender or {}
    out: list[Finding] = []
    where = f"[{case}.budget.{table_variant}.*]"
    for member, table in members.items():
        lines: list[str] = []
        brief: list[str] = []
        for output, row in table.items():
            cls = row_class(precision, output, output_precision)
            defaults = DEFAULT_BUDGETS[cls]
            limit = element_limit(defaults)
            if ELEMENT_KEY in row and limit is not None:
                value, seed = _value_seed(row[ELEMENT_KEY])
                if value > limit:
                    honest = honest_worst_of_row(defaults, ELEMENT_KEY) or 0.0
                    brief.append(f"{output}.{ELEMENT_KEY} {value:.3g}{_at(seed)} against "
                                 f"{cls}'s envelope, beyond {limit:.3g}")
                    lines.append(
                        f"{output}.{ELEMENT_KEY} = {value:.3g}{_at(seed)} is beyond "
                        f"{limit:.3g}: {BUG_FACTOR:g}x the honest worst {honest:.3g} that "
                        f"{cls}'s default row ({ELEMENT_KEY} {defaults[ELEMENT_KEY]:g}) was "
                        "set from, the size the headroom rule calls a bug")
            for key in ROW_KEYS:
                measured = _MEASURED.get(key, key)
                if measured not in row or key not in defaults:
                    continue
                value, seed = _value_seed(row[measured])
                suggested = budget_value(key, value)
                if suggested > defaults[key]:
                    brief.append(f"{output}.{key} {suggested:.2g} past {cls}'s row "
                                 f"{defaults[key]:g}")
                    lines.append(
                        f"{output}.{key}: worst {value:.3g}{_at(seed)} would set {suggested:.2g},"
                        f" past {cls}'s default row {defaults[key]:g} ({ROWS_SOURCE}), which "
                        f"every honest {cls} implementation measured stays inside")
        if lines:
            took = (f", takes {lender[member]}'s budgets" if member in lender else "")
            head = (f"{member} ({precision}{took}) on {case}: "
                    + element_text(table, precision, output_precision))
            out.append(Finding("element" if any(ELEMENT_KEY in ln for ln in lines) else "row",
                               case, member, where, head, tuple(lines),
                               "; ".join(brief)))
    return out


def borrower_widens(
    case: str, borrower: str, lender: str, widened: Sequence[tuple[str, str, float, float]],
    table: MemberTable, precision: str, output_precision: Mapping[str, str],
) -> Finding:
    """A ``budget_like`` borrower whose measurements would widen its lender's table:
    ``widened`` holds (output, key, the lender's pool alone, with the borrower)."""
    parts = ", ".join(f"{o}.{k} {a:.4g} -> {b:.4g}" for o, k, a, b in widened)
    head = (f"{borrower} ({precision}, takes {lender}'s budgets) on {case}: "
            f"{element_text(table, precision, output_precision)}")
    detail = (f"it would widen {lender}'s table: {parts}. A variant that borrows a budget is "
              f"held to it and never sets it: pool it explicitly if it is an honest "
              f"{precision} implementation (--numcheck-calibrate-pool {lender}={lender},"
              f"{borrower}), or give it its own tables if it rounds elsewhere")
    short = f"widens {lender}'s table: {parts}"
    return Finding("borrower", case, borrower, f"[{case}.budget.{lender}.*]", head, (detail,),
                   short)


def floor_tightening(case: str, variant: str, device: str, precision: str,
                     tighter: Sequence[tuple[str, float, float]]) -> Finding:
    """Every error measured 0 on ``device`` and values below those in force: ``tighter``
    holds (output.key, in force, would write)."""
    parts = ", ".join(f"{w} {old:.4g} -> {new:.4g}" for w, old, new in tighter[:4])
    more = f" (and {len(tighter) - 4} more)" if len(tighter) > 4 else ""
    text = (f"{variant} on {case}: equals the reference bit for bit on {device} (every error "
            f"measured 0), so this run cannot see {precision}'s rounding; writing would "
            f"tighten {parts}{more} to the floors. Kept as they are. Measure the class: pool "
            f"its honest members (numcheck.add_gemm_members, then --numcheck-calibrate-pool "
            f"{variant}={variant},gemm_<member>,...) or the devices it is gated on "
            f"(--numcheck-calibrate-with)")
    return Finding("floor", case, variant, f"[{case}.budget.{variant}.*]", text)


def record_gaps(case: str, variant: str, record: Any, pool: Iterable[str],
                devices: Iterable[str], missing_members: Iterable[str] = ()) -> Finding | None:
    """The table's record (numcheck.numerics.budget_provenance) names pool members or
    devices this run did not measure: ``pool`` and ``devices`` are what it did."""
    absent = [m for m in record.pool if m not in set(pool)]
    unregistered = [m for m in missing_members if m in absent]
    gone = [d for d in record.devices if d not in set(devices)]
    if not absent and not gone:
        return None
    parts = []
    if absent:
        why = (f" ({', '.join(unregistered)} not registered: numcheck.add_gemm_members or "
               "your pytest_numcheck_register hook)" if unregistered else " (deselected?)")
        parts.append(f"pool members {', '.join(absent)} were not measured{why}")
    if gone:
        parts.append(f"devices {', '.join(gone)} were not measured (pool their measurements "
                     "in: --numcheck-calibrate-with FILE from --numcheck-calibrate-json there)")
    text = (f"{variant} on {case}: its tables were set by `{record.command}` ({record.date}: "
            f"pool {', '.join(record.pool)}; devices {', '.join(record.devices)}; "
            f"{record.seed_text()}); in this run {'; '.join(parts)}. Measure what set them, "
            "or set them from this run alone with --numcheck-calibrate-renew")
    return Finding("record", case, variant, f"[{case}.budget.{variant}.*]", text)


def unrecorded_tightening(case: str, variant: str,
                          tighter: Sequence[tuple[str, float, float]]) -> Finding:
    """No record of what set the tables, and values the file sets would be tightened:
    ``tighter`` holds (output.key, the file's value, would write)."""
    parts = ", ".join(f"{w} {old:.4g} -> {new:.4g}" for w, old, new in tighter[:4])
    more = f" (and {len(tighter) - 4} more)" if len(tighter) > 4 else ""
    text = (f"{variant} on {case}: its tables carry no calibration record (set by hand, or by "
            f"a tool the file's header names), and this run would tighten {parts}{more}. A "
            "budget pooled from more members, seeds or devices than this run measured would "
            "fail them. Re-measure what set them (the header names it), or set the tables "
            "from this run alone with --numcheck-calibrate-renew")
    return Finding("unrecorded", case, variant, f"[{case}.budget.{variant}.*]", text)


def mixed_keys(case: str, variant: str, kept: Mapping[str, Sequence[str]]) -> Finding:
    """Tables that would keep keys this run does not set (output -> keys) beside keys it
    sets: a table mixing two calibrations' evidence."""
    parts = "; ".join(f"[{case}.budget.{variant}.{o}] {', '.join(keys)}"
                      for o, keys in kept.items())
    text = (f"{variant} on {case}: this run re-sets its tables but not {parts}, which another "
            "calibration (or a hand) set: a table mixing two pools' evidence fails where "
            "neither would. Measure those keys in this run, or remove them from the table "
            "if they should not be gated")
    return Finding("mixed", case, variant, f"[{case}.budget.{variant}.*]", text)


def blocking(findings: Iterable[Finding], accepted: Iterable[str], renew: bool) -> list[Finding]:
    """The findings no override of the run covers."""
    accepted = tuple(accepted)
    return [f for f in findings if not f.overridden(accepted, renew)]


def accepted_notes(findings: Iterable[Finding], accepted: Iterable[str],
                   option: str) -> dict[tuple[str, str], list[str]]:
    """(case, table variant) -> the overridden suspect findings as the record keeps them."""
    accepted = tuple(accepted)
    notes: dict[tuple[str, str], list[str]] = {}
    for f in findings:
        if f.kind in SUSPECT and f.overridden(accepted, False):
            table_variant = f.table.split(".budget.")[1].split(".")[0]
            notes.setdefault((f.case, table_variant), []).append(
                f"{f.variant.split()[0]} ({option}): {f.short or f.head}")
    return notes
