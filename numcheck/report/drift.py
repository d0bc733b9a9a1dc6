"""Baseline drift: compare a run's records with a baseline report's (say, main's).

Checks are matched by (op, case, variant, device). For each pair the change in the headline
error metrics, top-k recall and speedup is reported, and :class:`Rules` decide what counts
as a regression:

- ``calc_diff`` of any output grew more than ``same_device_factor`` times (default 1.25x)
  when both records ran on the same device (same device name: the check is deterministic
  there, so growth is a real change), or more than ``calc_diff_factor`` times (default 2x)
  across device names (another GPU's kernels round differently), and is above
  ``calc_diff_floor`` (values below it count as zero: bit-exact paths stay quiet);
- for a variant with a declared quantization, its second reference: ``sim_rel_fro`` of any
  output grew more than ``sim_same_device_factor`` times on the same device (default 1.25x),
  ``sim_factor`` times across device names (4x, the headroom rule's), above ``sim_floor``
  (``sim_calc_diff`` by the squares of all three); the worst GEMM result over its bound
  (``quant.sim_ratio``) grew more than ``sim_ratio_factor`` times (2x) over at least
  ``sim_ratio_floor``. The golden's quantization error hides a kernel change of a few parts
  per thousand (an output 0.5% high moves an FP8 linear's ``calc_diff`` by 2%); the
  simulated reference shows it at once;
- ``recall_min`` or ``tie_recall_min`` dropped by more than ``recall_drop`` (default: any drop);
- the speedup fell more than ``speedup_drop`` (default 5%) *with confidence*: the new
  interval's upper end lies below ``(1 - speedup_drop)`` times the baseline's lower end.
  Applies only when both records carry timing with a confidence interval;
- the new record does not pass (fail or error), whatever the baseline said;
- a check of the baseline is missing from the new run (``removed``), unless removals are
  accepted (``allow_removed``: a case retired on purpose).

Improvements (the reverse of each rule) pass and are marked ``improved``. On the same device,
any other change of a headline metric is listed as ``changed`` (it passes, but a reviewer
sees it); ``same`` means no headline number moved by a unit of the last digit the table
prints (:data:`PRINTED`): figures that print alike are never listed as changed.
Pure: works on :class:`numcheck.report.records.Report` values; no pytest, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from numcheck.numerics.metric_names import KEY_METRICS, KEY_TOPK_METRICS
from numcheck.report.drift_result import STATUS_ORDER, Drift, DriftRow, Rules
from numcheck.report.records import Record, Report
from numcheck.report.render import number_cell

#: Columns of the drift table (text and markdown).
DRIFT_HEADER = ["check", "calc_diff (base -> new)", "rel_fro (base -> new)",
                "recall (base -> new)", "speedup (base -> new)", "drift", "why"]


def compare_reports(base: Report, new: Report, rules: Rules | None = None, *,
            baseline: str = "") -> Drift:
    """The drift of ``new`` against ``base``: one row per check, and the regressions."""
    rules = rules or Rules()
    old = {r.key: r for r in base.records}
    rows: list[DriftRow] = []
    seen = set()
    for rec in new.records:
        seen.add(rec.key)
        prev = old.get(rec.key)
        rows.append(_new_only(rec) if prev is None else _pair(prev, rec, rules))
    removed = [DriftRow(r.id, "removed", ["not in the new run"], _pairs(r, None))
               for r in base.records if r.key not in seen]
    rows += removed
    rows.sort(key=lambda r: STATUS_ORDER.index(r.status))
    regressions = [f"{r.id}: {'; '.join(r.reasons)}" for r in rows if r.status == "regression"]
    if not rules.allow_removed:
        regressions += [
            f"{r.id}: not in the new run (a check that disappears fails the comparison; if "
            "it was retired on purpose, accept removals: --allow-removed, or "
            "allow_removed=true in numcheck_drift_rules)" for r in removed
        ]
    if new.exitstatus not in (None, 0):
        regressions.append(f"run: pytest exit status {new.exitstatus} (the new run itself failed)")
    counts = {s: sum(r.status == s for r in rows) for s in STATUS_ORDER}
    return Drift(baseline, rules, rows, regressions, counts)


def compare_records(base: Record, new: Record, rules: Rules | None = None) -> DriftRow:
    """One check against its baseline record, by the rules :func:`compare` applies to each
    pair: status ``regression``, ``improved`` or ``same`` and the reasons, without the
    before/after numbers (``changed`` is not told apart from ``same``). numcheck/history
    compares each run of a check with the one before it this way, 50,000 times for a
    history of 500 runs."""
    worse, better, _ = _judge(base, new, rules or Rules())
    status = "regression" if worse else "improved" if better else "same"
    return DriftRow(new.id, status, worse or better)


def _new_only(rec: Record) -> DriftRow:
    if not rec.passed:
        return DriftRow(rec.id, "regression", [f"verdict {rec.verdict} (not in the baseline)"],
                        _pairs(None, rec))
    return DriftRow(rec.id, "new", ["not in the baseline"], _pairs(None, rec))


def _pairs(base: Record | None, new: Record | None) -> dict[str, list[float | None]]:
    def value(r: Record | None, name: str) -> float | None:
        if r is None:
            return None
        if name == "speedup":
            return (r.timing or {}).get("speedup")
        return r.key_metric(name)

    return {name: [value(base, name), value(new, name)]
            for name in (*KEY_METRICS, "speedup")}


def _pair(base: Record, new: Record, rules: Rules) -> DriftRow:
    worse, better, same_device = _judge(base, new, rules)
    status = "regression" if worse else "improved" if better else "same"
    pairs = _pairs(base, new)
    if status == "same" and same_device:
        moved = _moved(pairs)
        if moved:
            return DriftRow(new.id, "changed", moved, pairs)
    return DriftRow(new.id, status, worse or better, pairs)


def _judge(base: Record, new: Record, rules: Rules) -> tuple[list[str], list[str], bool]:
    """The rules on one pair: what got worse, what got better, and whether both records ran
    on the same device name."""
    worse: list[str] = []
    better: list[str] = []
    same_device = base.device_name == new.device_name
    if not new.passed:
        worse.append(f"verdict {new.verdict} (was {base.verdict})")
    elif not base.passed:
        better.append(f"verdict {new.verdict} (was {base.verdict})")
    # In the new record's order of outputs: the reasons read the same in every process (a set
    # of names iterates in an order that changes with Python's hash seed).
    for output in [o for o in new.metrics if o in base.metrics]:
        b = base.metrics[output].get("calc_diff")
        n = new.metrics[output].get("calc_diff")
        if b is None or n is None:
            continue
        factor = rules.same_device_factor if same_device else rules.calc_diff_factor
        where = "same device" if same_device else "another device"
        _growth(f"{output}.calc_diff", b, n, factor, rules.calc_diff_floor, f"on {where}",
                worse, better)
    _judge_sim(base, new, rules, same_device, worse, better)
    for name in KEY_TOPK_METRICS:
        b, n = base.key_metric(name), new.key_metric(name)
        if b is None or n is None:
            continue
        if n < b - rules.recall_drop:
            worse.append(f"topk.{name} {b:.4f} -> {n:.4f} (rule: drop > {rules.recall_drop:g})")
        elif n > b + rules.recall_drop:
            better.append(f"topk.{name} {b:.4f} -> {n:.4f}")
    bt, nt = _interval(base.timing), _interval(new.timing)
    if bt is not None and nt is not None:
        keep = 1.0 - rules.speedup_drop
        if nt[2] < keep * bt[1]:
            worse.append(
                f"speedup {bt[0]:.3g}x -> {nt[0]:.3g}x (new CI high {nt[2]:.3g} < "
                f"{keep:g} x baseline CI low {bt[1]:.3g})"
            )
        elif nt[1] * keep > bt[2]:
            better.append(f"speedup {bt[0]:.3g}x -> {nt[0]:.3g}x")
    return worse, better, same_device


def _judge_sim(base: Record, new: Record, rules: Rules, same_device: bool,
               worse: list[str], better: list[str]) -> None:
    """The second reference's rules (module docstring), on a pair of records that both
    measured it."""
    where = "same device" if same_device else "another device"
    factor = rules.sim_same_device_factor if same_device else rules.sim_factor
    for output in [o for o in new.metrics if o in base.metrics]:
        for key, power in (("sim_rel_fro", 1), ("sim_calc_diff", 2)):
            b, n = base.metrics[output].get(key), new.metrics[output].get(key)
            if b is not None and n is not None:
                _growth(f"{output}.{key}", b, n, factor**power, rules.sim_floor**power,
                        f"on {where}; the simulated reference", worse, better)
    b, n = ((r.quant or {}).get("sim_ratio") for r in (base, new))
    if b is not None and n is not None:
        _growth("quant.sim_ratio", b, n, rules.sim_ratio_factor, rules.sim_ratio_floor,
                "over its bound", worse, better)


def _growth(label: str, b: float, n: float, factor: float, floor: float, where: str,
            worse: list[str], better: list[str]) -> None:
    """One growth rule: worse when ``n`` passes ``factor`` times ``b`` (both counted as at
    least ``floor``, a value under it as zero), better the other way round."""
    if n > floor and n > factor * max(b, floor):
        grew = f"{n / b:.3g}x" if b > 0 else "from 0"
        worse.append(f"{label} {b:.3g} -> {n:.3g} (grew {grew}, rule: > {factor:.3g}x {where})")
    elif b > floor and b > factor * max(n, floor):
        better.append(f"{label} {b:.3g} -> {n:.3g}")


#: How the drift table prints each headline figure (3 significant digits for the error
#: metrics, 4 decimals for recalls). A figure has moved only when it changed by at least one
#: unit of the last digit printed here: a smaller move is rounding in the print (and, read
#: from the table, no move at all), so a ``changed`` row always shows two different figures.
PRINTED = {"calc_diff": ".2e", "rel_fro": ".2e", "recall_min": ".4f", "tie_recall_min": ".4f",
           "speedup": ".2f"}


def printed_unit(value: float, fmt: str) -> float:
    """One unit of the last digit ``fmt`` prints of ``value`` (``.2e`` of 1.234e-06: 1e-08;
    ``.4f``: 1e-04)."""
    digits = int(fmt[1:-1])
    if fmt.endswith("f"):
        return 10.0 ** -digits
    if value == 0 or not math.isfinite(value):
        return 0.0
    exponent = int(format(value, fmt).split("e")[1])  # as printed: 9.996e-07 is 1.00e-06
    return 10.0 ** (exponent - digits)


def moved_in_print(base: float, new: float, fmt: str) -> bool:
    """``new`` differs from ``base`` by at least one unit of the last printed digit (and
    so prints differently)."""
    if format(base, fmt) == format(new, fmt):
        return False
    unit = printed_unit(max(abs(base), abs(new)), fmt)
    return abs(new - base) >= unit * (1 - 1e-9)  # 1.23e-06 -> 1.24e-06 is one unit


def _moved(pairs: Mapping[str, Sequence[float | None]]) -> list[str]:
    """The headline metrics that moved in print, with the factor (no rule fired)."""
    out = []
    for name, (b, n) in pairs.items():
        if b is None or n is None or name == "speedup":
            continue  # timing moves run to run; its rule alone speaks for it
        if moved_in_print(b, n, PRINTED.get(name, ".2e")):
            ratio = f", {n / b:.3g}x" if b else ""
            out.append(f"{name} {b:.4g} -> {n:.4g}{ratio} (below every rule)")
    return out


def _interval(timing: Mapping[str, Any] | None) -> tuple[float, float, float] | None:
    """(speedup, ci_low, ci_high) when the timing section has all three numbers."""
    if not timing:
        return None
    try:
        s, lo, hi = (float(timing[k]) for k in ("speedup", "ci_low", "ci_high"))
    except (KeyError, TypeError, ValueError):
        return None
    return (s, lo, hi)


def _arrow(pair: Sequence[float | None], fmt: str) -> str:
    b, n = pair
    if b is None and n is None:
        return "-"
    return f"{number_cell(b, fmt)} -> {number_cell(n, fmt)}"


def drift_rows(drift: Drift) -> list[list[str]]:
    """Table rows (cells for :data:`DRIFT_HEADER`) of a drift."""
    out = []
    for row in drift.rows:
        p = row.pairs
        out.append([
            row.id,
            *(_arrow(p.get(name, [None, None]), PRINTED[name])
              for name in ("calc_diff", "rel_fro", "recall_min", "speedup")),
            row.status,
            "; ".join(row.reasons),
        ])
    return out


def drift_headline(drift: Drift) -> str:
    """``drift vs base.json: PASS (0 regression(s); 12 same, 1 changed, 1 improved, 2 new,
    0 removed)``."""
    c = drift.counts
    n = len(drift.regressions)
    verdict = "FAIL" if n else "PASS"
    rest = ", ".join(f"{c.get(s, 0)} {s}"
                     for s in ("same", "changed", "improved", "new", "removed"))
    return f"drift vs {drift.baseline or 'baseline'}: {verdict} ({n} regression(s); {rest})"
