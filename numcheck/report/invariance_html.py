"""A check's determinism and batch invariance as HTML, from the record's ``invariance``.

Built from the record alone (docs/report.md), so a saved JSON report draws the same: the
outputs compared, the runs and whether they were bitwise equal, the requests computed alone
and whether their outputs were their rows of the batch's, with the differences kept. Plain
HTML: nothing to fetch, no script.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from numcheck.invariance.table import INVARIANCE_HEADER, batch_cell, determinism_cell
from numcheck.report.htmltext import escape as _e
from numcheck.report.htmltext import table as _table


def invariance_html(invariance: Mapping[str, Any] | None) -> str:
    """The ``determinism and batch invariance`` part of one check ("" when neither ran)."""
    if not invariance:
        return ""
    parts = [f"<h4>determinism and batch invariance (seed {_e(invariance.get('seed'))}, "
             f"outputs compared: {_e(', '.join(invariance.get('compared', [])))})</h4>"]
    rows = []
    det = invariance.get("determinism")
    if det is not None:
        rows.append(["determinism", _e(f"{det.get('runs')} runs on the same inputs"),
                     _e(determinism_cell(det))])
        rows += [["", _e(f"run {d.get('run')}"), _e("; ".join(o.get("text", "")
                                                              for o in d.get("outputs", [])))]
                 for d in det.get("differences", [])]
    bat = invariance.get("batch_invariance")
    if bat is not None:
        rows.append(["batch invariance",
                     _e(f"requests {', '.join(str(r) for r in bat.get('requests', []))} alone, "
                        f"against the batch of {bat.get('batch')}"), _e(batch_cell(bat))])
        rows += [["", _e(f"request {d.get('request')}"),
                  _e("; ".join(o.get("text", "") for o in d.get("outputs", [])))]
                 for d in bat.get("differences", [])]
    parts.append(_table(["gate", "what", "bitwise equal"], rows))
    return "".join(parts)


def invariance_summary_html(rows: Iterable[list[str]]) -> str:
    """The run's table of every check the two gates ran on ("" when none)."""
    rows = [[_e(c) for c in row] for row in rows]
    if not rows:
        return ""
    return "<h2>Determinism and batch invariance</h2>" + _table(INVARIANCE_HEADER, rows)
