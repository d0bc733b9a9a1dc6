"""A failed check's localization as HTML: its message lines and one small heatmap per grouping.

Built from the record's ``localization`` field alone (docs/report.md), so a saved JSON report
draws the same. Each heatmap is a strip of cells, one per group (at most the 256 the record
keeps), shaded by the group's error density: its share of the error over its share of the
elements, on a square-root scale against the densest group. A hover title gives both shares.
Plain HTML with inline styles: nothing to fetch, no script, no plotting library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from numcheck.report.htmltext import escape as _e

#: Width of a strip in pixels; cells share it (at least 2 px each).
STRIP_PX = 480


def heatmap(grouping: Mapping[str, Any]) -> str:
    """One grouping's strip: a cell per group, darker where the error is denser."""
    labels: Sequence[int] = grouping.get("labels") or []
    errors: Sequence[float] = grouping.get("error_shares") or []
    elements: Sequence[float] = grouping.get("element_shares") or []
    if len(labels) < 2:
        return ""
    density = [e / n if n > 0 else 0.0 for e, n in zip(errors, elements, strict=False)]
    top = max(density, default=0.0)
    width = max(2, STRIP_PX // len(labels))
    name = str(grouping.get("grouping", ""))
    cells = []
    for label, err, elem, d in zip(labels, errors, elements, density, strict=False):
        level = math.sqrt(d / top) if top > 0 else 0.0
        color = f"rgb(255,{round(255 - 200 * level)},{round(255 - 230 * level)})"
        title = f"{name} {label}: {100 * err:.3g}% of the error, {100 * elem:.3g}% of the elements"
        cells.append(f'<span title="{_e(title)}" style="display:inline-block;width:{width}px;'
                     f'height:14px;background:{color}"></span>')
    share = grouping.get("error_share", 0.0)
    mark = " (concentrated)" if grouping.get("concentrated") else ""
    caption = (f"{_e(grouping.get('plural', name))}: {grouping.get('heavy')} of "
               f"{grouping.get('groups')} carry {100 * share:.3g}% of the error{mark}")
    kept = "" if len(labels) == grouping.get("groups") else f" (first {len(labels)} shown)"
    return (f'<div style="margin:.2em 0"><div>{caption}{_e(kept)}</div>'
            f'<div style="line-height:0;border:1px solid #ccc;display:inline-block">'
            f'{"".join(cells)}</div></div>')


def localization_html(localization: Sequence[Mapping[str, Any]] | None) -> str:
    """The ``where`` section of one check: lines, transform, a heatmap per grouping."""
    if not localization:
        return ""
    parts = ["<h4>where the error sits</h4>"]
    for loc in localization:
        lines = "".join(f"<li><code>{_e(line)}</code></li>" for line in loc.get("lines", []))
        parts.append(f"<ul>{lines}</ul>")
        maps = "".join(heatmap(g) for g in loc.get("groupings", []))
        if maps:
            parts.append(f"<details><summary>{_e(loc.get('output'))}: {_e(loc.get('measure'))} "
                         f"by grouping</summary>{maps}</details>")
    return "".join(parts)
