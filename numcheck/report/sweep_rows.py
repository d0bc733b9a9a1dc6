"""A shape sweep as one row: the summaries fold a sweep's points, listing those that fail.

A sweep (numcheck/caseparts/sweep.py) makes one check per point and variant: ten context
lengths times five variants would bury every other row of the summary. The records keep
every point (the JSON report, drift and history compare them one by one); the tables show
one row per sweep, variant and device (:func:`fold_sweeps`, called by
:func:`numcheck.report.render.summary_table`, so the terminal and markdown summaries agree),
and the casts table the sweep's worst point (:func:`fold_overhead_rows`). A failing row
names its failing points; the failure messages above the summary name each one in full.
Nothing here imports torch or pytest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from numcheck.report.records import Record

__all__ = ["MAX_LISTED", "fold_overhead_rows", "fold_sweeps"]

#: Failing points named in a folded row; more are counted.
MAX_LISTED = 6
#: How bad each status is, for the folded row's (the worst of its points).
_SEVERITY = {"error": 4, "fail": 3, "pass": 2, "xfail": 1, "skip": 0}


def fold_sweeps(records: Sequence[Record]) -> list[Record]:
    """``records`` with the points of each (op, sweep, variant, device) folded into one
    record, where the first of them was; every other record as it is."""
    order: list[Record | tuple[str, str, str, str]] = []
    groups: dict[tuple[str, str, str, str], list[Record]] = {}
    for r in records:
        if not r.sweep:
            order.append(r)
            continue
        key = (r.op, str(r.sweep.get("case", r.case)), r.variant, r.device)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(r)
    return [fold(groups[x]) if isinstance(x, tuple) else x for x in order]


def _point(r: Record) -> str:
    return str((r.sweep or {}).get("point", r.case))


def fold(points: Sequence[Record]) -> Record:
    """One record standing for a sweep's ``points`` (of one variant and device): the worst
    status; for a failure, the failing points in ``note`` and the first one's worst
    violation; for a pass, the metric closest to its budget over every point; the worst
    value of each metric over the points."""
    first = points[0]
    sweep = str((first.sweep or {}).get("case", first.case))
    worst = max(points, key=lambda r: _SEVERITY.get(r.status, 0))
    failing = [r for r in points if not r.passed]
    n = len(points)
    if failing:
        shown = ", ".join(_point(r) for r in failing[:MAX_LISTED])
        more = f" and {len(failing) - MAX_LISTED} more" if len(failing) > MAX_LISTED else ""
        note = f"{len(failing)} of {n} points: {shown}{more}"
        lead = failing[0]
        closest = _at(lead.closest, lead)
        reason = f"at {_point(lead)}: {lead.reason}"
    else:
        ran = [r for r in points if r.status != "skip"]
        note = f"{len(ran)} of {n} points" if ran and len(ran) < n else f"{n} points"
        nearest = max(ran, key=_headroom_used, default=None)
        closest = None if nearest is None else _at(nearest.closest, nearest)
        reason = first.reason if not ran else ""
    return replace(
        first, id=f"{first.op}::{sweep}::{first.variant}[{first.device}]", case=sweep,
        status=worst.status, error_kind=worst.error_kind, reason=reason, closest=closest,
        metrics=_worst_metrics(points), topk=_worst_topk(points),
        note="; ".join(x for x in (note, first.note) if x),
    )


def _at(closest: dict[str, Any] | None, r: Record) -> dict[str, Any] | None:
    """A point's closest-to-budget entry, its output named with the point."""
    if closest is None:
        return None
    return {**closest, "output": f"{_point(r)}: {closest['output']}"}


def _headroom_used(r: Record) -> float:
    c = r.closest
    if not c or not c.get("limit"):
        return -math.inf
    value, limit = float(c["value"]), float(c["limit"])
    # A floor (recall) is nearer the closer the value falls to it from above.
    return limit / value if c["metric"].startswith(("recall", "tie_recall")) and value else \
        value / limit


def _worst_metrics(points: Sequence[Record]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for r in points:
        for output, metrics in r.metrics.items():
            row = out.setdefault(output, {})
            for name, value in metrics.items():
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    row[name] = max(row.get(name, value), value)
    return out


def _worst_topk(points: Sequence[Record]) -> dict[str, Any] | None:
    found = [r.topk for r in points if r.topk]
    if not found:
        return None
    out: dict[str, Any] = {}
    for topk in found:
        for name, value in topk.items():
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            pick = min if name.startswith(("recall", "tie_recall")) else max
            out[name] = pick(out[name], value) if name in out else value
    return out


def fold_overhead_rows(
    rows: Sequence[Sequence[str]], points: Sequence[tuple[str, str] | None],
) -> list[list[str]]:
    """The casts table's rows with each sweep's points (``points[i]``: the sweep case and
    point of row i, or None) folded into its worst point's row (the most round trips, then
    the largest bytes moved over the op's minimum), named ``<op>::<sweep> (worst of N
    points: <point>)``. Row cells: case, variant, device, casts, copies, moved, x min
    bytes, round trips, ... (numcheck.overhead.limits.OVERHEAD_HEADER)."""
    order: list[list[str] | tuple[str, str, str]] = []
    groups: dict[tuple[str, str, str], list[tuple[list[str], str]]] = {}
    for row, point in zip(rows, points, strict=True):
        if point is None:
            order.append(list(row))
            continue
        op = row[0].split("::", 1)[0]
        key = (f"{op}::{point[0]}", row[1], row[2])
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((list(row), point[1]))
    out = []
    for item in order:
        if isinstance(item, list):
            out.append(item)
            continue
        members = groups[item]
        row, label = max(members, key=lambda m: (_number(m[0][7]), _number(m[0][6])))
        out.append([f"{item[0]} (worst of {len(members)} points: {label})", *row[1:]])
    return out


def _number(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return -math.inf
