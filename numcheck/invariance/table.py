"""The end-of-run determinism and batch-invariance table, from report records (no torch).

One row per check either gate ran on: how many runs were compared and whether they were
bitwise equal; which requests were computed alone, in what batch, and whether their outputs
were their rows of the batch's. Built from the records' ``invariance`` sections, so a run
with xdist workers, a saved report and the markdown summary show the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from numcheck.devices import ONBOARD

INVARIANCE_HEADER = ["case", "variant", "device", "outputs compared", "runs", "deterministic",
                     "requests alone (batch)", "batch-invariant"]


def _first_text(section: Mapping[str, Any]) -> str:
    """The first difference the section keeps, as text."""
    first = (section.get("differences") or [{}])[0]
    outputs = first.get("outputs") or [{}]
    return str(outputs[0].get("text", ""))


def _ungated(section: Mapping[str, Any], cell: str) -> str:
    """A cell of a gate that measured and reported on a class its key does not name."""
    return cell if section.get("gated", True) else f"{cell} (not gated on this GPU model)"


def determinism_cell(section: Mapping[str, Any] | None) -> str:
    """``yes``, ``NO: 2 of 2 runs differ: logits: ...`` or ``-`` (not run)."""
    if section is None:
        return "-"
    differing = int(section.get("runs_differing", 0))
    if not differing:
        return _ungated(section, "yes")
    return _ungated(section, f"NO: {differing} of {int(section.get('runs', 2)) - 1} later "
                    f"runs differ; {_first_text(section)}")


def batch_cell(section: Mapping[str, Any] | None) -> str:
    """``yes``, ``NO: 1 request(s) differ; request 0: logits: ...`` or ``-`` (not run)."""
    if section is None:
        return "-"
    differing = int(section.get("requests_differing", 0))
    if not differing:
        return _ungated(section, "yes")
    first = (section.get("differences") or [{}])[0].get("request")
    return _ungated(section, f"NO: {differing} request(s) differ; request {first}: "
                    f"{_first_text(section)}")


def unset_lines(records: Iterable[Any]) -> list[str]:
    """One line per device class whose checks' determinism or batch invariance was measured
    and reported but not gated (their keys name no such GPU model), with the command that
    measures it and names the class."""
    counts: dict[str, int] = {}
    for rec in records:
        inv = getattr(rec, "invariance", None) or {}
        if any(isinstance(v, Mapping) and v.get("gated") is False for v in inv.values()):
            cls = str(inv.get("device_class", "?"))
            counts[cls] = counts.get(cls, 0) + 1
    return [f"numcheck invariance: the deterministic / batch_invariant keys of {n} check(s) "
            f"name no {cls}: measured and reported, not gated. Measure {cls}'s and name it: "
            f"{ONBOARD} --only invariance" for cls, n in sorted(counts.items())]


def invariance_rows(records: Iterable[Any]) -> list[list[str]]:
    """One row per record with an ``invariance`` section; the points of a shape sweep (a
    record's ``sweep``) folded into one row per sweep, variant and device, naming the
    points that failed."""
    rows: list[list[str]] = []
    sweeps: dict[tuple[str, str, str, str], list[Any]] = {}
    for rec in records:
        inv = getattr(rec, "invariance", None)
        if not inv:
            continue
        sweep = getattr(rec, "sweep", None)
        if sweep:
            key = (rec.op, str(sweep.get("case", rec.case)), rec.variant, rec.device)
            if key not in sweeps:
                sweeps[key] = []
                rows.append([])  # filled once every point is in
            sweeps[key].append((len(rows) - 1, rec))
            continue
        rows.append(_row(f"{rec.op}::{rec.case}", rec, inv))
    for (op, case, _, _), points in sweeps.items():
        index = points[0][0]
        rows[index] = _folded(f"{op}::{case}", [rec for _, rec in points])
    return rows


def _row(name: str, rec: Any, inv: Mapping[str, Any]) -> list[str]:
    det, bat = inv.get("determinism"), inv.get("batch_invariance")
    alone = ("-" if bat is None else
             f"{', '.join(str(r) for r in bat.get('requests', []))} ({bat.get('batch')})")
    return [name, rec.variant, rec.device, ", ".join(inv.get("compared", [])),
            "-" if det is None else str(det.get("runs")), determinism_cell(det), alone,
            batch_cell(bat)]


def _folded(name: str, points: list[Any]) -> list[str]:
    """A sweep's points as one row: ``yes`` where every point held, else the failing points
    and the first one's difference."""
    first = points[0]

    def cell(gate: str, count: str, text: Any) -> str:
        ran = [p for p in points if p.invariance.get(gate) is not None]
        if not ran:
            return "-"
        bad = [p for p in ran if p.invariance[gate].get(count)]
        if not bad:
            return "yes"
        labels = ", ".join(str((p.sweep or {}).get("point", p.case)) for p in bad[:4])
        more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
        return f"NO at {len(bad)} of {len(ran)} points ({labels}{more}); " + text(
            bad[0].invariance[gate])[4:]

    det = first.invariance.get("determinism")
    return [f"{name} ({len(points)} points)", first.variant, first.device,
            ", ".join(first.invariance.get("compared", [])),
            "-" if det is None else str(det.get("runs")),
            cell("determinism", "runs_differing", determinism_cell),
            "first, middle, last of each" if any(
                p.invariance.get("batch_invariance") for p in points) else "-",
            cell("batch_invariance", "requests_differing", batch_cell)]
