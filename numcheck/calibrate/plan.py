"""From a calibration run's measurements to budget tables, the edits that write them, the
records that say what set them, and the reasons not to write (pure: no torch, no pytest).

``pytest --numcheck --numcheck-calibrate`` (:mod:`numcheck.plugin.calibration`) measures one
(case, variant, device) check per item and ships what it measured (a
:class:`~numcheck.calibrate.payloads.NumericsPayload`) to the controller, which calls
:func:`plan_numerics` once with all of them:

- each variant's tables pool the worst of its pool (``--numcheck-calibrate-pool``, or the
  pool its calibration record names), of the variants that borrow its budgets
  (``budget_like``) and of earlier runs on other devices (``--numcheck-calibrate-with``),
  turned into budgets by the headroom rule (:mod:`numcheck.calibrate.headroom`);
- :mod:`numcheck.calibrate.guard` says what must not be written (a variant that looks like a
  bug, a bit-exact floor, less evidence than the table's record, a mixed table);
- a :class:`numcheck.numerics.calibration_record.CalibrationRecord` per written variant says
  what set its tables, for the case file.

Which table a suggestion belongs to is the budget's origin record's to say (a payload's
``origins``, :mod:`numcheck.numerics.budget_origin`): a key the variant's own table sets or
that a default fills is written there; a borrower's (``budget_like``) belongs to its lender's
tables; a key a coarse output inherits (mHC's bf16 ``y`` of a tf32 variant) belongs to the
storage class's table, and is not written into the finer variant's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from numcheck.calibrate import (
    LOWER_IS_WORSE,
    MEASURED_BY,
    Worst,
    WorstTable,
    guard,
    pool,
    suggest_values,
)
from numcheck.calibrate.casewriter import Edit, format_number
from numcheck.calibrate.headroom import FLOORS
from numcheck.calibrate.payloads import NumericsPayload, Payload
from numcheck.honest import MEMBER_PREFIX
from numcheck.numerics.budget_origin import Given, Inherited, origins_from_dict, root
from numcheck.numerics.calibration_record import CalibrationRecord
from numcheck.numerics.metric_names import ERROR_METRICS, SIM_METRICS, TOPK_LIMITS

#: Width of ``key = value`` before the comment in printed tables.
COLUMN = 28
#: The comment a value the headroom rule's floor set gets in the case file.
FLOOR_NOTE = "0 on every seed: the headroom rule's floor"
#: Keys a mixed table is judged on: the gated limits (bands and counts are settings).
_MIXED_KEYS = frozenset((*ERROR_METRICS, *TOPK_LIMITS))


@dataclass
class NumericsPlan:
    """What :func:`plan_numerics` decided: the printed lines, the edits per case file, the
    records per (case file, case, variant), and every finding against writing."""

    lines: list[str]
    edits: dict[str, list[Edit]] = field(default_factory=dict)
    records: dict[str, dict[tuple[str, str], CalibrationRecord]] = field(default_factory=dict)
    findings: list[guard.Finding] = field(default_factory=list)


P = TypeVar("P", bound=Payload)


@dataclass
class Group(Generic[P]):
    """The payloads of one case file's case, in order."""

    source: str
    path: str
    case: str
    payloads: list[P]


def groups(payloads: Sequence[P]) -> Iterator[Group[P]]:
    """The payloads by (case file, case), in order of first appearance."""
    found: dict[tuple[str, str], Group[P]] = {}
    for p in payloads:
        ref = p.check
        group = found.setdefault((ref.path, ref.case), Group(ref.source, ref.path, ref.case, []))
        group.payloads.append(p)
    return iter(found.values())


def own_keys(payload: NumericsPayload) -> dict[str, list[str]]:
    """Per output, the keys the variant's own table sets in the case file."""
    return {output: [k for k, o in keys.items() if isinstance(o, Given)]
            for output, keys in origins_from_dict(payload.origins).items()}


def inherited_keys(payload: NumericsPayload) -> dict[str, dict[str, Inherited]]:
    """Per output, the keys the variant takes from the storage class's table."""
    found = {output: {k: o for k, o in keys.items() if isinstance(o, Inherited)}
             for output, keys in origins_from_dict(payload.origins).items()}
    return {output: keys for output, keys in found.items() if keys}


@dataclass(frozen=True)
class RunInfo:
    """What the records and the header say about the run: its command, date, torch."""

    command: str = ""
    date: str = ""
    torch: str = ""
    fresh: int = 0
    first_seed: int = 0


def plan_numerics(
    payloads: Sequence[NumericsPayload], run: RunInfo, *,
    earlier: Sequence[NumericsPayload] | None = None,
    accepted: Sequence[str] = (),
) -> NumericsPlan:
    """The budget tables of this run's numerics payloads, their edits, records and findings.

    ``earlier``: numerics payloads of earlier runs (``--numcheck-calibrate-with``); a
    variant's budget then covers its worst on every device. ``accepted``: variants whose
    bug-sized measurements are pooled anyway (their findings are kept, the caller decides).
    The values the case file itself sets, and which table each suggestion belongs to, come
    from each payload's origin record (its ``origins``), never from the file's text.
    """
    if not payloads:
        return NumericsPlan(["numcheck calibrate: no numerics check ran"])
    first = payloads[0]
    span = (f" ({run.first_seed}..{run.first_seed + run.fresh - 1})" if run.fresh else "")
    plan = NumericsPlan([
        (f"# seeds: each case's own + {run.fresh} fresh{span}; reference: {first.reference} "
         f"recomputed on {first.reference_device} (no golden read)"),
        ("# policy (docs/budgets.md, the headroom rule): errors 2x the worst, max_err_ratio "
         "1.25x, rounded up to 2 digits; recall floors 2x the worst miss; tie bands 2x the "
         "widest near-tie"),
    ])
    before: dict[tuple[str, str, str], list[NumericsPayload]] = {}
    for p in earlier or []:
        before.setdefault((p.check.source, p.check.case, p.variant), []).append(p)
    source = None
    for group in groups(payloads):
        if group.source != source:
            source = group.source
            plan.lines += ["", f"# {source}"]
        _plan_group(plan, group, before, run, tuple(accepted))
    return plan


def _plan_group(plan: NumericsPlan, group: Group[NumericsPayload],
                before: dict[tuple[str, str, str], list[NumericsPayload]], run: RunInfo,
                accepted: tuple[str, ...]) -> None:
    lines = plan.lines
    measured: dict[str, list[NumericsPayload]] = {}
    for p in group.payloads:
        measured.setdefault(p.variant, []).append(p)
    for variant, found in list(measured.items()):
        found += before.get((group.source, group.case, variant), [])
    # A variant that takes another's budgets (budget_like) is held to that one table: its
    # measurements must fit inside it (never widen it), and it is never written as copies.
    borrowers: dict[str, list[str]] = {}
    for p in group.payloads:
        if p.budget_like and not known_bad(p):  # selected, or only pooled: a borrower
            borrowers.setdefault(p.budget_like, []).append(p.variant)
    planned: set[str] = set()
    for p in group.payloads:
        if not p.own_check or p.variant in planned:
            continue  # a sweep's other points: pooled into its first point's plan
        variant = p.variant
        planned.add(variant)
        bad = known_bad(p)
        if bad:
            lines.append(f"# {group.case}: {variant} is known-bad (expect: "
                         f"{', '.join(bad)}): not budgeted")
            continue
        lender = p.budget_like
        if lender:
            held = ("its measurements must fit inside that table" if lender in measured
                    else f"select {lender} too to budget both: nothing suggested")
            lines.append(f"# {group.case}: {variant} takes {lender}'s budgets "
                         f"(budget_like): {held}")
            continue
        # A borrower named in its lender's pool is still a borrower: held to the table,
        # never setting it (its measurements are judged below: they must fit inside).
        lending = borrowers.get(variant, [])
        members = [m for m in pool_of(p, measured) if m not in lending]
        own = [q for m in members for q in measured[m] if informative(q)]
        if not own:
            lines.append(f"# {group.case}: {variant} is the reference, computed on "
                         f"{p.check.device} like the one it is compared with: nothing to "
                         "budget (run on the GPU to budget its drift there)")
            continue
        lent = list(dict.fromkeys(lending))
        lent_parts = [q for b in lent for q in measured[b] if informative(q)]
        _plan_variant(plan, group, p, members, own, lent_parts, run, accepted)


def _plan_variant(plan: NumericsPlan, group: Group[NumericsPayload], p: NumericsPayload,
                  members: list[str], own: list[NumericsPayload], lent: list[NumericsPayload],
                  run: RunInfo, accepted: tuple[str, ...]) -> None:
    case, variant, lines = group.case, p.variant, plan.lines
    precision = p.precision
    coarse = p.output_precision
    everything = own + lent
    devices = {q.check.device for q in everything}
    # A sweep's points pool as one case: each point's measurements keep its label.
    labels = [label(q, devices) + (f" @{q.check.point}" if q.check.point else "")
              for q in everything]
    tables = [{o: {m: replace(w, variant=lab) for m, w in row.items()}
               for o, row in q.table.items()} for q, lab in zip(everything, labels, strict=True)]
    own_tables = tables[:len(own)]
    if precision:
        plan.findings += guard.suspects(
            case, variant, precision, coarse,
            {lab: t for lab, t in zip(labels, tables, strict=True)},
            lender={label(q, devices): variant for q in lent},
            sims={lab: q.sims for q, lab in zip(everything, labels, strict=True)},
            # the scheme's honest members measured here: numcheck's own (gemm_*)
            honest=pool(t for q, t in zip(everything, tables, strict=True)
                        if q.variant.startswith(MEMBER_PREFIX)))
    cells_own = _cells(p, pool(own_tables))
    for q, lab, t in zip(lent, labels[len(own):], tables[len(own):], strict=True):
        with_it = _cells(p, pool([*own_tables, t]))
        widened = _widened(cells_own, with_it)
        if widened:
            plan.findings.append(guard.borrower_widens(
                case, lab, variant, widened, precision or "its class"))
    # A borrower that widens the table without being accepted is left out of what would be
    # written (nothing is written while its finding stands).
    keep = [i < len(own) or everything[i].variant in accepted
            or not _widened(cells_own, _cells(p, pool([*own_tables, tables[i]])))
            for i in range(len(everything))]
    table = pool(t for t, k in zip(tables, keep, strict=True) if k)
    cells = _cells(p, table)
    kept = [q for q, k in zip(everything, keep, strict=True) if k]
    kept_labels = list(dict.fromkeys(label(q, devices) for q in kept))
    shown = kept_labels if len(kept_labels) > 1 else []
    points = list(dict.fromkeys(q.check.point for q in kept if q.check.point))
    bad = _nonfinite(table)
    if bad:
        plan.findings.append(guard.nonfinite(case, variant, p.check.source, bad))
    exact = _exact(table)
    if exact:
        lines.append(f"# {case}: {variant} equals the reference bit for bit on "
                     f"{', '.join(sorted(devices))}: these are floors; measure the devices it is "
                     f"gated on too (--numcheck-calibrate-with), or its class's honest members")
        tighter = _tighter_than(cells, p.limits)
        if tighter:
            plan.findings.append(guard.floor_tightening(
                case, variant, ", ".join(sorted(devices)), precision or "its class", tighter))
    if (p.fresh, p.first_seed) != (run.fresh, run.first_seed):
        lines.append(f"# {case}: {variant} measured on the seeds its record names: "
                     f"{_seeds_text(p)}")
    if p.pool_from == "record":
        lines.append(f"# {case}: {variant}'s pool from its calibration record: "
                     f"{', '.join(p.pool)}")
    found = origins_from_dict(p.origins)
    over = f" over {len(points)} sweep points" if points else ""
    for output, row in table.items():
        header = f"[{case}.budget.{variant}.{output}]"
        if cells[output]:
            lines.append(header if not (shown or over) else
                         f"{header}  # pooled: worst of {', '.join(shown or kept_labels)}{over}")
        for key, value in cells[output].items():
            worst = row.get(MEASURED_BY.get(key, key))
            lines.append(cell(key, value, worst_text(key, worst, bool(shown or over))))
            # A floor set for an exact family says so in the file: no measurement set it.
            at_floor = worst is not None and worst.value == 0 and key in FLOORS
            plan.edits.setdefault(group.path, []).append(
                Edit((case, "budget", variant, output), key, value,
                     comment=FLOOR_NOTE if at_floor else None,
                     origin=found.get(output, {}).get(key)))
        lines += _inherited_note(case, variant, output, p, table)
    floored = bool(plan.findings) and plan.findings[-1].kind == "floor" and \
        plan.findings[-1].variant == variant and plan.findings[-1].case == case
    _judge_against_file(plan, group, p, cells, devices, members, floored=floored)
    record = CalibrationRecord(
        command=run.command, date=run.date, torch=run.torch,
        pool=tuple(dict.fromkeys(q.variant for q in own)),
        devices=tuple(sorted(devices)), seeds=tuple(_case_seeds(p)),
        fresh_seeds=p.fresh, first_fresh_seed=p.first_seed)
    plan.records.setdefault(group.path, {})[(case, variant)] = record


def _judge_against_file(plan: NumericsPlan, group: Group[NumericsPayload], p: NumericsPayload,
                        cells: dict[str, dict[str, float]], devices: set[str],
                        members: Sequence[str], *, floored: bool = False) -> None:
    """The findings that depend on what the case file holds: its record, the values it sets
    itself, and the keys a written table would keep. ``floored``: the variant's tables are
    refused as floors already (the tightening need not be said twice). What the file sets
    is the payload's origin record's to say (the keys given in the variant's own table, at
    the values its budget holds)."""
    case, variant = group.case, p.variant
    limits = p.limits
    tables = {output: {k: limits.get(output, {}).get(k) for k in keys}
              for output, keys in own_keys(p).items() if keys}
    record = p.record
    if record is not None:
        # A pool given on the command line is the run told otherwise; devices never are.
        told = p.pool_from == "option"
        gap = guard.record_gaps(case, variant, record, record.pool if told else members,
                                devices, list(p.pool_missing))
        if gap is not None:
            plan.findings.append(gap)
        dropped = guard.dropped_members(case, variant, record, p.pool or (variant,),
                                        p.pool_removed) if told else None
        if dropped is not None:
            plan.findings.append(dropped)
    else:
        given = {o: {k: v for k, v in t.items() if k in cells.get(o, {})}
                 for o, t in tables.items()}
        tighter = _tighter_than(cells, given)
        if tighter and not floored:
            plan.findings.append(guard.unrecorded_tightening(case, variant, tighter))
    kept: dict[str, list[str]] = {}
    for output, written in cells.items():
        table = tables.get(output)
        if table is None or not written:
            continue
        left = [k for k in table if k in _MIXED_KEYS and k not in written]
        if left:
            kept[output] = left
    if kept:
        plan.findings.append(guard.mixed_keys(case, variant, kept))


def _cells(p: NumericsPayload, table: WorstTable, *, inherited: bool = False,
           ) -> dict[str, dict[str, float]]:
    """The suggested values of each output, those of keys the variant inherits left out
    (they belong to the storage class's table), or only those with ``inherited``."""
    taken = inherited_keys(p)
    out = {}
    for output, row in table.items():
        values = suggest_values({m: w.value for m, w in row.items()},
                                topk=output == p.topk_output, k=p.k,
                                gated=p.gated.get(output, ()))
        out[output] = {k: v for k, v in values.items()
                       if (k in taken.get(output, {})) == inherited}
    return out


def _inherited_note(case: str, variant: str, output: str, p: NumericsPayload,
                    table: WorstTable) -> list[str]:
    """The keys ``output`` inherits, said and never written: they are the storage class's
    table's (docs/budgets.md, "Outputs stored in a coarser dtype"), set by calibrating that
    class's family; and where this run alone would suggest more than that table holds."""
    taken = inherited_keys(p).get(output, {})
    if not taken:
        return []
    first = next(iter(taken.values()))
    at = root(first)
    where = at.table if isinstance(at, Given) else f"{case}.budget.{first.variant}.{output}"
    suggested = _cells(p, {output: table[output]}, inherited=True)[output]
    limits = p.limits.get(output, {})
    past = [f"{k} {format_number(v)} (the table: {format_number(limits[k])})"
            for k, v in suggested.items() if k in limits and _wider(k, v, limits[k])]
    text = (f"# {case}: {variant}'s {output} takes {', '.join(taken)} from [{where}] "
            f"({output} is stored in {first.storage}): not written here; calibrate "
            f"{first.variant}'s family to change them")
    if past:
        text += f". This run alone would suggest more: {', '.join(past)}"
    return [text]


def _wider(key: str, new: float, old: float) -> bool:
    return new < old if key in LOWER_IS_WORSE else new > old


def _widened(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
             ) -> list[tuple[str, str, float, float]]:
    """(output, key, before, after) of every value ``after`` allows more than ``before``."""
    return [(o, k, before[o][k], v) for o, row in after.items() for k, v in row.items()
            if k in before.get(o, {}) and _wider(k, v, before[o][k])]


def _tighter_than(cells: dict[str, dict[str, float]], limits: Mapping[str, Mapping[str, Any]]
                  ) -> list[tuple[str, float, float]]:
    """(output.key, the limit, the suggestion) of every suggestion that demands more."""
    found = []
    for output, row in cells.items():
        for key, value in row.items():
            old = limits.get(output, {}).get(key)
            if isinstance(old, bool) or not isinstance(old, int | float):
                continue
            if float(format_number(value)) != float(format_number(old)) and _wider(
                    key, float(old), value):
                found.append((f"{output}.{key}", float(old), value))
    return found


def _case_seeds(p: NumericsPayload) -> list[int]:
    fresh, first = p.fresh, p.first_seed
    extra = set(range(first, first + fresh))
    return [s for s in p.seeds if s not in extra]


def _seeds_text(p: NumericsPayload) -> str:
    fresh, first = p.fresh, p.first_seed
    own = ", ".join(str(s) for s in _case_seeds(p))
    return f"{own} + {fresh} fresh ({first}..{first + fresh - 1})" if fresh else own


def known_bad(payload: NumericsPayload) -> list[str]:
    """The expected failures of a known-bad variant that name one of its outputs."""
    return [f for f in payload.expect if f.partition(".")[0] in payload.table]


def _nonfinite(table: WorstTable) -> list[tuple[str, str, float, int | None]]:
    """(output, metric, value, seed) of every gated measurement that is NaN or infinite."""
    return [(o, m, w.value, w.seed) for o, row in table.items() for m, w in row.items()
            if m in _MIXED_KEYS or m in SIM_METRICS
            if not math.isfinite(w.value)]


def _exact(table: WorstTable) -> bool:
    """Every error metric 0 on every seed (tf32 on a CPU, which computes it in IEEE fp32)."""
    values = [w.value for row in table.values() for m, w in row.items() if m in ERROR_METRICS]
    return bool(values) and not any(values)


def informative(payload: NumericsPayload) -> bool:
    """False for the reference compared with itself on the device it was computed on."""
    return not (payload.variant == payload.reference
                and payload.reference_device == payload.check.device)


def label(payload: Payload, devices: set[str]) -> str:
    return payload.variant if len(devices) == 1 else f"{payload.variant} {payload.check.device}"


def pool_of(payload: NumericsPayload, measured: Mapping[str, Any]) -> list[str]:
    """The measured variants budgeted together with the payload's variant (itself first):
    its pool (the option's, or its record's), as far as this run measured it."""
    variant = payload.variant
    members = payload.pool or (variant,)
    return [variant, *(m for m in members if m != variant and m in measured)]


def worst_text(key: str, worst: Worst | None, pooled: bool) -> str:
    if worst is None:
        return ""
    what = "widest near-tie" if key == "tie_band_rel" else "worst"
    if worst.value == (1.0 if key in LOWER_IS_WORSE else 0.0):
        return f"{what} {worst.value:g} on every seed"
    where = f"{worst.variant}, seed {worst.seed}" if pooled else f"seed {worst.seed}"
    return f"{what} {worst.value:.3g} ({where})"


def cell(key: str, value: float, comment: str) -> str:
    text = f"{key} = {format_number(value)}"
    return f"{text:<{COLUMN}}# {comment}" if comment else text
