"""What calibration refuses to write, and why (docs/budgets.md, "What calibration refuses").

A calibrated budget passes whatever it was measured on. So a measurement that no honest
implementation of the precision class could produce must not become a budget, and a table
must not be re-set from less evidence than set it. Each rule gives :class:`Finding` lines;
the callers (``pytest --numcheck --numcheck-calibrate``, ``python -m numcheck.calibrate
--suggest``, the honest-family calibration) write nothing while one stands:

- **a selected variant looks like a bug** (:func:`suspects`): its worst element
  (``max_err_ratio``, against the class's honest rounding envelope on the same inputs) beyond
  the headroom rule's limit, a suggested ``rel_fro``, ``calc_diff`` or tie band past the
  class's default row; for a declared quantization, a worst ``sim_rel_fro`` or
  ``sim_calc_diff`` past the simulated reference's row of its sums or past twice its
  scheme's honest members in the same run, or a rule of its scheme broken (the GEMM bound,
  its operands); or (:func:`borrower_widens`) a ``budget_like`` borrower whose measurements
  would widen its lender's table, whatever pool names it. Overridden only by naming the
  variant (``accept``); the override is recorded in the case file;
- **a bit-exact floor** (:func:`floor_tightening`): every error measured 0 (``tf32`` on a CPU
  computes IEEE fp32) and a value tighter than the one in force: a run that cannot see the
  class's rounding cannot budget it. Never overridden;
- **less than the record** (:func:`record_gaps`): the table's calibration record names pool
  members or devices this run did not measure; **no record** (:func:`unrecorded_tightening`):
  a value the file sets would be tightened by a run that does not know what set it. Both are
  overridden by ``renew`` (set the tables from this run alone);
- **a mixed table** (:func:`mixed_keys`): a table keeping a key this run does not set, beside
  keys it does. Never overridden: measure the key, or remove it;
- **a dropped member** (:func:`dropped_members`): a pool given on the command line that
  leaves out members of the table's recorded pool without naming them removed (``-member``);
- **a non-finite measurement** (:func:`nonfinite`): no budget can be written from NaN or
  infinity (the reference or the variant overflowed). Never overridden.

Pure: no torch, no pytest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from numcheck.calibrate.headroom import (
    BUG_FACTOR,
    ELEMENT_KEY,
    ROW_KEYS,
    budget_value,
    element_limit,
    honest_worst_of_row,
)
from numcheck.honest import MEMBER_PREFIX
from numcheck.numerics.budgets import DEFAULT_BUDGETS
from numcheck.numerics.metric_names import SIM_METRICS
from numcheck.precision import coarser

#: Where the default rows live, as messages name it.
ROWS_SOURCE = "numcheck/numerics/budgets.py"
#: The measured metric behind a budget key, where the names differ.
_MEASURED = {"tie_band_rel": "band_rel_needed"}
#: Kinds of finding a named variant may override (the variant looks like a bug), and kinds a
#: run that sets the tables afresh overrides (the record, or its absence).
SUSPECT = frozenset({"element", "row", "rule", "borrower"})
#: A simulated-reference row: its name ("promoted sums") and its limits (sim_* -> value).
SimRow = tuple[str, Mapping[str, float]]
RENEWABLE = frozenset({"record", "unrecorded"})


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


def element_text(table: MemberTable, precision: str,
                 output_precision: Mapping[str, str]) -> str:
    """``worst element y.max_err_ratio = 10 (seed 0): 10x the worst element of bf16's
    honest rounding envelope on the same inputs; bf16's default row allows 2.9``."""
    # The member's worst max_err_ratio over its outputs: (output, value, seed).
    found = max([(output, *_value_seed(row[ELEMENT_KEY])) for output, row in table.items()
                 if ELEMENT_KEY in row], key=lambda f: f[1], default=None)
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
    sims: Mapping[str, SimRow | None] | None = None,
    honest: MemberTable | None = None,
) -> list[Finding]:
    """The members whose own measurements no honest member of ``precision`` could produce.

    ``members``: variant -> its worst measurements (output -> metric -> Worst or value),
    every variant pooled into ``table_variant``'s tables. A member is suspect where its worst
    ``max_err_ratio`` exceeds :func:`numcheck.calibrate.headroom.element_limit` of the
    output's class row, or where the budget the headroom rule would give its worst
    ``rel_fro``, ``calc_diff`` or tie band lies past that row. A member with a declared
    quantization (``sims``: member -> the simulated reference's default row of its sums) is
    suspect too where its worst ``sim_rel_fro`` or ``sim_calc_diff`` lies past that row (a
    limit no honest member of any scheme reaches), or, beside ``honest`` (the worst of
    numcheck's own honest members of the scheme measured in the same run, output -> metric),
    past :data:`BUG_FACTOR` times theirs (its square for the quadratic ``sim_calc_diff``);
    or where it breaks a rule of its scheme: its GEMM results past the bound an honest
    kernel stays within (``quant.sim_ratio`` > 1), its operands off its scheme
    (``quant.operands``).
    """
    lender = lender or {}
    sims = sims or {}
    honest_members = {m for m in members if m.startswith(MEMBER_PREFIX)}
    family_worst = honest or {}
    out: list[Finding] = []
    where = f"[{case}.budget.{table_variant}.*]"
    for member, table in members.items():
        lines: list[str] = []
        brief: list[str] = []
        rules: list[str] = []
        sim = sims.get(member)
        for output, row in table.items():
            if sim is not None:
                family = None if member in honest_members else family_worst.get(output)
                _sim_lines(output, row, sim, family, lines, brief)
            rules += _rule_lines(output, row, rules)
            cls = row_class(precision, output, output_precision)
            defaults = DEFAULT_BUDGETS[cls]
            limit = element_limit(defaults)
            if ELEMENT_KEY in row and limit is not None:
                value, seed = _value_seed(row[ELEMENT_KEY])
                if value > limit:
                    worst = honest_worst_of_row(defaults, ELEMENT_KEY) or 0.0
                    brief.append(f"{output}.{ELEMENT_KEY} {value:.3g}{_at(seed)} against "
                                 f"{cls}'s envelope, beyond {limit:.3g}")
                    lines.append(
                        f"{output}.{ELEMENT_KEY} = {value:.3g}{_at(seed)} is beyond "
                        f"{limit:.3g}: {BUG_FACTOR:g}x the honest worst {worst:.3g} that "
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
        lines += rules
        brief += [r.split(":")[0] for r in rules]
        if lines:
            took = (f", takes {lender[member]}'s budgets" if member in lender else "")
            element = any(ELEMENT_KEY in ln for ln in lines)
            # The headline cites the first reason: the worst element only where it is one
            # (a value inside its limit first would read as the reason).
            head = (f"{member} ({precision}{took}) on {case}: "
                    + (element_text(table, precision, output_precision) if element
                       else brief[0]))
            kind = "element" if element else "rule" if rules else "row"
            out.append(Finding(kind, case, member, where, head, tuple(lines),
                               "; ".join(brief)))
    return out


def _sim_lines(output: str, row: Mapping[str, Any], sim: SimRow,
               family: Mapping[str, Any] | None, lines: list[str], brief: list[str]) -> None:
    """The ``sim_*`` measurements past the simulated reference's row of the member's
    declared sums, or past twice what the scheme's honest members measured in this run."""
    name, limits = sim
    for key in SIM_METRICS:
        if key not in row:
            continue
        value, seed = _value_seed(row[key])
        if key in limits and value > limits[key]:
            brief.append(f"{output}.{key} {value:.3g} past the {name} row {limits[key]:g}")
            lines.append(
                f"{output}.{key} = {value:.3g}{_at(seed)} is past the simulated reference's "
                f"default row for {name}, {limits[key]:g} ({ROWS_SOURCE}), a limit no honest "
                "member of any scheme reaches")
            continue
        if family is None or key not in family:
            continue
        theirs, _ = _value_seed(family[key])
        factor = BUG_FACTOR ** (2 if key == "sim_calc_diff" else 1)
        if theirs > 0 and value > factor * theirs:
            brief.append(f"{output}.{key} {value:.3g}, {value / theirs:.3g}x its scheme's "
                         "honest members")
            lines.append(
                f"{output}.{key} = {value:.3g}{_at(seed)} is {value / theirs:.3g}x the worst of "
                f"its scheme's honest members on the same seeds ({theirs:.3g}), past the "
                f"{factor:g}x the headroom rule calls a bug")


def _rule_lines(output: str, row: Mapping[str, Any], said: Sequence[str]) -> list[str]:
    """The rules of a declared quantization a member breaks (said once, not per output)."""
    found = []
    if "sim_ratio" in row:
        value, seed = _value_seed(row["sim_ratio"])
        text = (f"quant.sim_ratio {value:.3g}{_at(seed)}: its GEMM results lie {value:.3g}x the "
                "bound an honest kernel of its declared sums and output stays within (a rule: "
                "at most 1)")
        if not value <= 1.0 and not any(t.startswith("quant.sim_ratio") for t in said):
            found.append(text)
    if "operand_findings" in row:
        value, seed = _value_seed(row["operand_findings"])
        if value > 0 and not any(t.startswith("quant.operands") for t in said):
            found.append(f"quant.operands {value:g} finding(s){_at(seed)}: its operands do not "
                         "follow the scheme it declares (a rule: none)")
    return found


def borrower_widens(
    case: str, borrower: str, lender: str, widened: Sequence[tuple[str, str, float, float]],
    precision: str,
) -> Finding:
    """A ``budget_like`` borrower whose measurements would widen its lender's table:
    ``widened`` holds (output, key, the lender's pool alone, with the borrower)."""
    parts = ", ".join(f"{o}.{k} {a:.4g} -> {b:.4g}" for o, k, a, b in widened)
    head = (f"{borrower} ({precision}, takes {lender}'s budgets) on {case}: it would widen "
            f"{lender}'s table ({parts})")
    # Never "pool it": a borrower named in its lender's pool is still held to the table,
    # so a pool cannot talk a bug into it (issue 44).
    detail = (f"it would widen {lender}'s table: {parts}. A variant that borrows a budget is "
              f"held to it and never sets it, whatever pool names it: fix it; if it is an "
              f"honest {precision} implementation that rounds elsewhere, give it tables of its "
              f"own (remove budget_like) and calibrate them on its class's honest family")
    short = f"widens {lender}'s table: {parts}"
    return Finding("borrower", case, borrower, f"[{case}.budget.{lender}.*]", head, (detail,),
                   short)


def dropped_members(case: str, variant: str, record: Any, pool: Iterable[str],
                    removed: Iterable[str]) -> Finding | None:
    """A pool given on the command line that leaves out members of the table's recorded
    pool without naming them as removed (``-member``): the table would be re-set from less
    than set it, and a pool of the variant and a bug would replace a family, silently."""
    pool = list(pool)
    kept, gone = set(pool), set(removed)
    dropped = [m for m in record.pool if m not in kept and m not in gone]
    if not dropped:
        return None
    listed = ",".join([*pool, *(f"-{m}" for m in dropped)])
    text = (f"{variant} on {case}: its tables were set by the pool {', '.join(record.pool)} "
            f"(`{record.command}`, {record.date}); this run's pool leaves out "
            f"{', '.join(dropped)} without a word. Measure them too (add them to the pool), or "
            f"name each one left out on purpose: --numcheck-calibrate-pool {variant}={listed} "
            "(the case file's header keeps the command)")
    return Finding("dropped", case, variant, f"[{case}.budget.{variant}.*]", text)


def nonfinite(case: str, variant: str, source: str,
              bad: Sequence[tuple[str, str, float, int | None]]) -> Finding:
    """Measurements that are not finite (``bad``: (output, key, value, seed)): no budget
    can be written from them (the loader refuses a NaN budget). Never overridden."""
    output, key, value, seed = bad[0]
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    text = (f"{source}: [{case}.budget.{variant}.{output}] {key}: measured {value}{_at(seed)}"
            f"{more}, so no budget can be written (a case file refuses a NaN or infinite "
            "budget). The reference or the variant overflowed on these inputs: fix the case's "
            "inputs (a distribution or scale its precision holds) or the variant, then "
            "calibrate again")
    return Finding("nonfinite", case, variant, f"[{case}.budget.{variant}.*]", text)


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
    """The table's record (numcheck.numerics.calibration_record) names pool members or
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
