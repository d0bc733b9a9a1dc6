"""A check's one-time preparation as HTML: what it made, and its own cast ledger.

Built from the record's ``prepared`` field alone (docs/report.md), so a saved JSON report
draws the same. Shown apart from the per-call casts: the preparation runs once per seed at
"load time", is never timed, and its casts and copies are never gated (numcheck/prepare.py).
Plain HTML: nothing to fetch, no script.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from numcheck.overhead.units import megabytes
from numcheck.report.htmltext import escape as _e
from numcheck.report.htmltext import table as _table

#: Ledger entries of the preparation listed (largest first).
MAX_ENTRIES = 12


def _bytes(n: Any) -> str:
    """``6.29 MB``, as the cast ledger writes bytes; ``-`` when unknown."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        return "-"
    return megabytes(n)


def prepared_html(prepared: Mapping[str, Any] | None) -> str:
    """The ``prepared once`` section of one check ("" for a variant without a preparation)."""
    if not prepared:
        return ""
    parts = ["<h4>prepared once (load time: not per call, not timed, not gated)</h4>",
             f'<p class="reason">{_e(prepared.get("text", ""))}</p>']
    tensors = prepared.get("tensors") or {}
    rows = []
    for name, t in tensors.items():
        was = t.get("replaces")
        rows.append([f"<code>{_e(name)}</code>", _e(t.get("dtype")), _e(t.get("shape")),
                     _bytes(t.get("bytes")),
                     "new" if not was else f"replaces {_e(was.get('dtype'))} "
                     f"{_e(was.get('shape'))}"])
    if rows:
        parts.append(_table(["tensor", "dtype", "shape", "bytes", "input"], rows))
    entries = sorted(prepared.get("entries") or [],
                     key=lambda e: -(e.get("bytes_read", 0) + e.get("bytes_written", 0)))
    if entries:
        parts.append(_table(["kind", "conversion", "shape", "read", "written", "where"], [
            [_e(e.get("kind")), _e(e.get("conversion")), _e(e.get("shape")),
             _bytes(e.get("bytes_read")), _bytes(e.get("bytes_written")),
             f"<code>{_e(e.get('where'))}</code> {_e(e.get('code') or '')}"]
            for e in entries[:MAX_ENTRIES]]))
        if len(entries) > MAX_ENTRIES:
            parts.append(f"<p>... {len(entries) - MAX_ENTRIES} smaller entries</p>")
    return "".join(parts)
