"""Text for people: the failure message of one check and the end-of-run summary table.

One layout for every failure (after torch's ``_make_mismatch_msg``): verdict;
worst metric against its budget; the other violations; unexplained top-k flips as a
capped table; the case; the commands to reproduce and to regenerate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from numcheck.gates import GATES, INVARIANCE_GATES
from numcheck.numerics.metric_names import MAX_FLIPS, SIM_METRICS
from numcheck.report.records import Record
from numcheck.report.sweep_rows import fold_sweeps

if TYPE_CHECKING:  # annotations only: `python -m numcheck` reads reports without torch
    from numcheck.check.against_sim import SimReport
    from numcheck.check.result import CheckResult, Settled
    from numcheck.localize.findings import Localization
    from numcheck.numerics.metrics import ErrorMetrics
    from numcheck.numerics.topk import TopkReport
    from numcheck.numerics.verdict import Violation

@dataclass(frozen=True)
class Commands:
    """How to reproduce one check and how to regenerate its case's golden."""

    reproduce: str
    regenerate: str
    #: Measures the honest family of the variant's class over fresh seeds (for a budget too
    #: tight); optional. ``family``: that class, for the wording.
    calibrate: str = ""
    family: str = ""
    #: Measures this check's speed threshold for the run's GPU model over several runs (a
    #: speed gate's miss); optional.
    speed: str = ""


#: "also:" lines shown after the worst violation.
MAX_OTHER_VIOLATIONS = 8


#: Localization lines shown right after "worst:" (where the error sits).
MAX_WHERE_LINES = 2


def failure_message(result: CheckResult, commands: Commands, source: str) -> str:
    """The message of a failed case check."""
    top = result.worst()
    metrics = None if top is None else _metrics_of(result, top.output, top.seed)
    detail = failure_detail(result.localization, None if top is None else top.output, metrics)
    # What the variant did once, at load time: part of what was checked, not of a call.
    notes = [] if result.prepared is None else [f"  {result.prepared.summary()}"]
    # A limit of the budget nothing measured here is no part of the verdict: said so.
    notes += [f"  not measured here: {key} ({why})" for key, why in result.ungated.items()]
    quant = result.quant_summary()
    if quant is not None:
        budget = result.case.budgets.get(result.variant)
        limits = {} if budget is None else {n: dict(ob.limits)
                                             for n, ob in budget.outputs.items()}
        worst = {n: {m: v for m in ("rel_fro", "calc_diff", *SIM_METRICS)
                     if (v := result.metric(n, m)) is not None}
                 for n in limits}
        notes += reference_lines(quant, worst, limits)
    title = f"numcheck FAIL {result.id}"
    settled = result.settled
    if settled is not None and not settled.xfail:  # a known-bad variant, not as expected
        title += (": known-bad, and it fails outside its expectation" if settled.outside
                  else ": known-bad, and its expectation is not met")
        notes += expectation_lines(settled)
    invariance = top is not None and top.output in INVARIANCE_GATES
    speed = top is not None and top.output == "perf"
    cls = (result.perf.device_class if result.perf is not None else "") or result.device
    message = verdict_message(
        title, result.violations, worst_detail=detail,
        topk=result.worst_topk(), where=("case:", f"{source} [{result.case.id}]"),
        commands=replace(commands, calibrate="") if invariance or speed else commands,
        budget=_budget_line(result, top, source, cls), notes=notes,
    )
    if invariance:
        assert top is not None
        message += "\n" + "\n".join(invariance_steps(
            top.output, result.variant, source, result.case.table,
            reference=result.variant not in result.case.variants))
    if speed:
        message += "\n" + "\n".join(speed_steps(cls, commands.speed))
    return message


def speed_steps(device_class: str, speed: str) -> list[str]:
    """The next steps of a speed gate's miss: no numerics budget to calibrate; the variant
    got slower, or this GPU model's threshold is not what its runs support (measured from
    several runs on this model: ``speed``), or the machine is noisy."""
    measure = (f"{speed} (review the proposal, then add --numcheck-calibrate-write)"
               if speed else "--numcheck-calibrate-speed=5 on this check")
    return [
        "  next step:   my change made it slower -> fix the variant, then run 'reproduce' "
        "with --numcheck-perf",
        f"               the threshold is not right for this GPU model ({device_class}) -> "
        f"measure {device_class}'s from several runs, never from this one: {measure}; every "
        "perf case at once: python -m numcheck onboard --only speed (docs/speed.md, "
        "\"Setting thresholds\")",
        "               the machine is noisy or shared -> read the machine noise line under "
        "the perf table, and rerun on a quiet GPU (docs/speed.md, \"Machine noise\")",
    ]


def invariance_steps(gate: str, variant: str, source: str, case: str, *,
                     reference: bool = False) -> list[str]:
    """The next steps of a determinism or batch-invariance failure: no budget to tune, the
    kernel is wrong or the case asks too much of it (``reference``: the op's reference, which
    ``true`` lists with the rest)."""
    key = GATES[gate].case_key
    fix = ("a reduction order fixed for every call: no float atomics, no split chosen by "
           "occupancy" if gate == "determinism" else
           "a split, tile and kernel that depend on the shape of a request, not on the batch")
    steps = [
        f"  next step:   the kernel is meant to be {key.replace('_', '-')} -> fix it ({fix}), "
        "then run 'reproduce'",
        f"               it is not meant to be -> drop '{variant}' from {key} in {source} "
        f"[{case}] (docs/cases.md, \"Determinism and batch invariance\")",
    ]
    if reference:
        steps.append(
            f"               '{variant}' is the op's reference, which '{key} = true' holds "
            "too: torch's own GEMMs need not have this property (on a CPU they sum a row "
            "otherwise alone than in a batch); list the variants meant to have it instead")
    return steps


def _against(metrics: Mapping[str, float], limits: Mapping[str, float], name: str,
             key: str) -> str:
    value = metrics.get(key)
    if value is None:
        return ""
    limit = limits.get(key)
    return f"{name}.{key} {value:.3g}" + ("" if limit is None else f" (budget {limit:.3g})")


def reference_lines(quant: SimReport, metrics: Mapping[str, Mapping[str, float]],
                    limits: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The two references of a low-precision check (numcheck/check/against_sim.py), for
    the failure message: each output's error against the FP32 golden and against the
    simulated reference (with their limits), the GEMM results' bound and the operands.
    ``quant`` is the check's second reference over its seeds
    (:meth:`~numcheck.check.result.CheckResult.quant_summary`); ``metrics`` and ``limits``
    its worst metrics and budget limits per output."""
    golden, sim = [], []
    for name, ms in metrics.items():
        lim = limits.get(name, {})
        golden += [t for t in (_against(ms, lim, name, "rel_fro"),) if t]
        sim += [t for t in (_against(ms, lim, name, "sim_rel_fro"),
                            _against(ms, lim, name, "sim_calc_diff")) if t]
    lines = [f"  {'references:':<12} the variant declares {quant.scheme}",
             f"    golden (FP32, what the precision costs): {'; '.join(golden) or '-'}",
             (f"    simulated (the op on {_operands(quant)}, exact, float64): "
              f"{'; '.join(sim) or '-'}")]
    if quant.sim_ratio is not None:
        lines.append(f"    GEMM results against their own operands: {quant.sim_ratio:.3g} of "
                     f"the bound an honest kernel stays within (at most 1; worst at "
                     f"{quant.sim_ratio_at})")
    if quant.n_findings:
        lines.append(f"    operands against the declared scheme: {quant.n_findings} finding(s)")
        lines += [f"      {f}" for f in quant.findings[:3]]
    elif quant.operands == "recorded":
        lines.append("    operands against the declared scheme: they follow it")
    return lines


def _operands(quant: SimReport) -> str:
    if quant.operands == "recorded":
        return "the operands the variant's own quantizer produced, dequantized"
    return ("numcheck's quantization of the op's operands (the variant records none: "
            "numcheck.fp8.record_gemm)")


def simulated_cell(record: Record) -> str:
    """``7.8e-04, bound 0.87``: the first output's ``sim_rel_fro`` and the GEMM bound ratio
    of a low-precision check; ``-`` for any other."""
    q = record.quant
    if not q:
        return "-"
    first = next(iter(record.metrics.values()), {})
    parts = []
    if first.get("sim_rel_fro") is not None:
        parts.append(f"{first['sim_rel_fro']:.2e}")
    if q.get("sim_ratio") is not None:
        parts.append(f"bound {q['sim_ratio']:.2g}")
    if q.get("n_findings"):
        parts.append(f"{q['n_findings']} operand finding(s)")
    return ", ".join(parts) or "-"


def expectation_lines(settled: Settled) -> list[str]:
    """A known-bad variant's expectation and what it leaves out: the violations outside it
    (capped) and what it expected that caught nothing."""
    lines = [f"  expected:    {settled.expected} ({settled.reason})"]
    shown = settled.outside[:MAX_OTHER_VIOLATIONS]
    lines += [f"  {'outside it:' if i == 0 else '':<12} {v.describe()}"
              for i, v in enumerate(shown)]
    if len(settled.outside) > len(shown):
        lines.append(f"  {'':<12} ... and {len(settled.outside) - len(shown)} more")
    if settled.missed:
        lines.append(f"  not caught:  {', '.join(settled.missed)} (expected to fail, passed)")
    return lines


def _budget_line(result: CheckResult, top: Violation | None, source: str, cls: str) -> str:
    """Where the worst violation's limit is set on device class ``cls``, as
    :func:`numcheck.cases.limits.limit_origin` says (a budget's origin was decided when the
    case was loaded): the case file and line, or the default it comes from; "" for a rule
    no key sets."""
    from numcheck.cases.limits import limit_origin
    from numcheck.report.limit_text import origin_text

    limit = None if top is None else limit_origin(
        result.case, result.variant, top.output, top.metric, cls=cls)
    if top is None or limit is None:
        return ""
    return origin_text(limit.origin, case=result.case.table, variant=result.variant,
                       output=top.output, key=limit.key, value=limit.value, source=source,
                       case_line=result.case.lines.get(()))


def verdict_message(
    title: str,
    violations: Sequence[Violation],
    *,
    where: tuple[str, str],
    commands: Commands,
    worst_detail: Sequence[str] = (),
    topk: TopkReport | None = None,
    budget: str = "",
    notes: Sequence[str] = (),
) -> str:
    """The one failure layout (case checks and the numcheck_golden fixture alike): verdict;
    worst violation and its detail; the others, capped; unexplained top-k flips; where it
    comes from, where the worst limit is set (``budget``), the commands to reproduce and
    regenerate, and the next step for each cause of a miss. ``notes``: lines shown after
    the violations (a variant's one-time preparation)."""
    from numcheck.numerics.verdict import worst  # imports torch: not at module level (see above)

    top = worst(list(violations))
    lines = [title]
    if top is not None:
        lines.append(f"  worst: {top.describe()}")
        lines += worst_detail
    others = [v for v in violations if v is not top]
    lines += [f"  also:  {v.describe()}" for v in others[:MAX_OTHER_VIOLATIONS]]
    if len(others) > MAX_OTHER_VIOLATIONS:
        lines.append(f"  ... and {len(others) - MAX_OTHER_VIOLATIONS} more violations")
    lines += notes
    if topk is not None and topk.n_unexplained:
        lines += ["", *flip_table(topk)]
    tail = footer(where, commands)
    if budget:
        tail.insert(1, f"  {'budget:':<12} {budget}")
    if commands.calibrate:
        from numcheck.report.limit_text import next_steps

        tail += next_steps(commands.calibrate, commands.regenerate, family=commands.family)
    return "\n".join([*lines, "", *tail])


def footer(where: tuple[str, str], commands: Commands, *, regenerate_note: bool = True) -> list[str]:
    """``case:``/``golden:``, ``reproduce:`` and ``regenerate:`` lines of every message.

    The note on regenerating is left out where regenerating is the fix (a missing golden)."""
    note = "  (only if the reference itself changed)" if regenerate_note else ""
    return [
        f"  {where[0]:<12} {where[1]}",
        f"  reproduce:   {commands.reproduce}",
        f"  regenerate:  {commands.regenerate}{note}",
    ]


def failure_detail(
    localization: Sequence[Localization], output: str | None, metrics: ErrorMetrics | None,
) -> list[str]:
    """The lines under ``worst:`` of every failure message (a case check's and the
    numcheck_golden fixture's): where the error sits, then the worst output's mismatched
    elements and largest error."""
    lines = where_lines(localization)
    if output is not None and metrics is not None:
        lines += mismatch_lines(output, metrics)
    return lines


def where_lines(localization: Sequence[Localization]) -> list[str]:
    """``where:`` lines: where the error of the failing outputs sits, most telling first."""
    found = [line for loc in localization for line in loc.lines]
    return [f"  {'where:' if i == 0 else '':<6} {line}"
            for i, line in enumerate(found[:MAX_WHERE_LINES])]


def _metrics_of(result: CheckResult, output: str, seed: int | None) -> ErrorMetrics | None:
    """The metrics of ``output`` on ``seed`` (the first seed's when None)."""
    for s in result.seeds:
        m = s.metrics.get(output)
        if m is not None and (seed is None or s.seed == seed):
            return m
    return None


def mismatch_lines(output: str, m: ErrorMetrics) -> list[str]:
    """``Mismatched elements: k / n (p%)`` and the largest error, for the worst output."""
    share = 100.0 * m.n_outside / m.n_compared if m.n_compared else 0.0
    return [
        (f"  {output}: mismatched elements {m.n_outside} / {m.n_compared} ({share:.3g}%) "
        f"outside atol {m.atol:g} + rtol {m.rtol:g} * |golden|"),
        (f"  {output}: max abs error {m.max_abs:.4g} at index {m.max_abs_index}; "
        f"max rel error {m.max_rel:.4g} at index {m.max_rel_index}"),
    ]


def flip_table(report: TopkReport, limit: int = MAX_FLIPS) -> list[str]:
    """The unexplained top-k flips, worst first, capped at ``limit`` rows."""
    band = f"{report.band:g} {'of the row max |score|' if report.band_kind == 'rel' else 'absolute'}"
    lines = [
        (f"  unexplained top-k flips: {report.n_unexplained} "
        f"(in {report.rows_with_flips} of {report.rows} rows; tie band {band})"),
        (f"    {'row':>5} {'token':>7} {'dir':>4} {'golden score':>13} {'k-th score':>12} "
        f"{'margin':>11}"),
    ]
    shown = report.unexplained[:limit]
    for f in shown:
        lines.append(
            f"    {f.row:>5} {f.token:>7} {f.direction:>4} {f.golden_score:>13.6g} "
            f"{f.kth_score:>12.6g} {f.margin:>11.4g}"
        )
    if report.n_unexplained > len(shown):
        lines.append(f"    ... {report.n_unexplained - len(shown)} more")
    return lines


def number_cell(value: float | None, fmt: str = ".2e") -> str:
    """``value`` in ``fmt``, ``-`` when there is none."""
    return "-" if value is None else format(value, fmt)


def closest_cell(record: Record) -> str:
    """``output.metric value/budget`` of the record's worst violation or closest pass."""
    c = record.closest
    if c is None:
        if not record.reason:
            return "-"
        # Never cut: "triton not installed (No module named 'trit" hides the fix. A skip's
        # reason is short and shown whole; an error's first line names it (the message
        # above the summary has the rest).
        lines = record.reason.splitlines()
        return " ".join(record.reason.split()) if record.status == "skip" else lines[0]
    return f"{c['output']}.{c['metric']} {c['value']:.3g}/{c['limit']:.3g}"


def speedup_cell(record: Record) -> str:
    """``1.23x [1.20, 1.26]`` when the record carries timing, else ``-``."""
    t = record.timing
    if not t or t.get("speedup") is None:
        return "-"
    text = f"{t['speedup']:.2f}x"
    if t.get("gate") == "not gated" and t.get("stopped") in ("time cap", "look cap"):
        text = "too noisy"  # the interval never got narrow: no figure worth quoting
    if t.get("ci_low") is not None and t.get("ci_high") is not None:
        text += f" [{t['ci_low']:.2f}, {t['ci_high']:.2f}]"
    return text


def failing_first(records: Sequence[Record]) -> list[Record]:
    """Failures and errors first, then passes and skips; otherwise in the given order."""
    return sorted(records, key=lambda r: r.passed)


def summary_table(records: Sequence[Record]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the summary table: one row per record, failing first.

    The terminal summary and the markdown summary both print this table, so they agree.
    A speedup column appears when any record carries timing. A shape sweep's points are
    folded into one row per variant and device (numcheck.report.sweep_rows).
    """
    records = fold_sweeps(records)
    timed = any(r.timing for r in records)
    simulated = any(r.quant for r in records)
    header = list(SUMMARY_HEADER)
    if simulated:  # a low-precision check's second reference (numcheck/check/against_sim.py)
        header.insert(-1, SIMULATED_COLUMN)
    if timed:
        header.insert(-1, "speedup")
    rows = []
    for r in failing_first(records):
        row = [
            f"{r.op}::{r.case}" if r.op else r.case,
            r.variant,
            r.device,
            closest_cell(r),
            number_cell(r.key_metric("calc_diff")),
            number_cell(r.key_metric("rel_fro")),
            number_cell(r.key_metric("recall_min"), ".4f"),
            number_cell(r.key_metric("tie_recall_min"), ".4f"),
            verdict_cell(r),
        ]
        if simulated:
            row.insert(-1, simulated_cell(r))
        if timed:
            row.insert(-1, speedup_cell(r))
        rows.append(row)
    return header, rows


def verdict_cell(record: Record) -> str:
    """``PASS``, with what a reader of the row must know in brackets: the outputs a variant
    that computes part of the op does not produce, and the row's note."""
    notes = [f"not produced: {', '.join(record.not_produced)}"] if record.not_produced else []
    notes += [record.note] if record.note else []
    return f"{record.verdict} ({'; '.join(notes)})" if notes else record.verdict


#: The summary's column of the simulated reference, shown when a low-precision check ran.
SIMULATED_COLUMN = "simulated (sim_rel_fro, bound)"
SUMMARY_HEADER = [
    "case", "variant", "device", "closest to budget (value/budget)",
    "calc_diff", "rel_fro", "recall", "tie recall", "verdict",
]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A plain aligned text table."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=False)).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]
