"""The end-of-run determinism and batch-invariance table, from report records (no torch).

One row per check either gate ran on: how many runs were compared and whether they were
bitwise equal; which requests were computed alone, in what batch, and whether their outputs
were their rows of the batch's. Built from the records' ``invariance`` sections, so a run
with xdist workers, a saved report and the markdown summary show the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

INVARIANCE_HEADER = ["case", "variant", "device", "outputs compared", "runs", "deterministic",
                     "requests alone (batch)", "batch-invariant"]


def _first_text(section: Mapping[str, Any]) -> str:
    """The first difference the section keeps, as text."""
    first = (section.get("differences") or [{}])[0]
    outputs = first.get("outputs") or [{}]
    return str(outputs[0].get("text", ""))


def determinism_cell(section: Mapping[str, Any] | None) -> str:
    """``yes``, ``NO: 2 of 2 runs differ: logits: ...`` or ``-`` (not run)."""
    if section is None:
        return "-"
    differing = int(section.get("runs_differing", 0))
    if not differing:
        return "yes"
    return (f"NO: {differing} of {int(section.get('runs', 2)) - 1} later runs differ; "
            f"{_first_text(section)}")


def batch_cell(section: Mapping[str, Any] | None) -> str:
    """``yes``, ``NO: 1 request(s) differ; request 0: logits: ...`` or ``-`` (not run)."""
    if section is None:
        return "-"
    differing = int(section.get("requests_differing", 0))
    if not differing:
        return "yes"
    first = (section.get("differences") or [{}])[0].get("request")
    return f"NO: {differing} request(s) differ; request {first}: {_first_text(section)}"


def invariance_rows(records: Iterable[Any]) -> list[list[str]]:
    """One row per record with an ``invariance`` section."""
    rows = []
    for rec in records:
        inv = getattr(rec, "invariance", None)
        if not inv:
            continue
        det, bat = inv.get("determinism"), inv.get("batch_invariance")
        alone = ("-" if bat is None else
                 f"{', '.join(str(r) for r in bat.get('requests', []))} ({bat.get('batch')})")
        rows.append([f"{rec.op}::{rec.case}", rec.variant, rec.device,
                     ", ".join(inv.get("compared", [])),
                     "-" if det is None else str(det.get("runs")), determinism_cell(det),
                     alone, batch_cell(bat)])
    return rows
