"""What every HTML part of the report and of the history writes with: a value as escaped text,
and a table whose cells are HTML already."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any


def escape(value: Any) -> str:
    """Any value as HTML text, quotes escaped too (safe inside an attribute)."""
    return html.escape(str(value), quote=True)


def table(header: Sequence[str], rows: Sequence[Sequence[str]],
          row_class: Sequence[str] | None = None) -> str:
    """Cells are HTML already (callers escape); the header is text. ``row_class``: a class per
    row (none where empty)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_class[i]}"' if row_class and row_class[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
