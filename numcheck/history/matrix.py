"""The device matrix: one row per check (op, case, variant), one column per device class.

Answers "does the variant that passes on the H200 pass on the B200?". Each column is the
newest run (by commit date, :mod:`numcheck.history.runs`) holding records of that class;
each cell its verdict, how much of the budget the closest metric uses, calc_diff and the
speedup with its interval. A check whose verdict is not the same on every device class it
ran on (skips aside: a CUDA-only variant skips on the CPU by design) is flagged, and flagged
rows come first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from numcheck.history.devclass import sort_classes
from numcheck.history.runs import Run
from numcheck.history.series import CheckKey, check_key, check_label
from numcheck.report.htmlpage import bar, budget_ratio, is_lower_bound, page_start
from numcheck.report.htmltext import escape as _e
from numcheck.report.markdown import md_table
from numcheck.report.records import Record
from numcheck.report.render import speedup_cell


@dataclass
class MatrixRow:
    """One check: its record in each device class's column (missing: not in that run)."""

    key: CheckKey
    cells: dict[str, Record] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return check_label(self.key)

    @property
    def verdicts(self) -> dict[str, str]:
        """Per device class, the verdict of the checks that ran (skips left out)."""
        return {c: r.verdict for c, r in self.cells.items() if r.status != "skip"}

    @property
    def differs(self) -> bool:
        """The check ran on two classes or more and their verdicts are not all the same."""
        return len(set(self.verdicts.values())) > 1


@dataclass
class Matrix:
    """The columns (device classes, each with the run it shows) and the rows."""

    classes: list[str]
    sources: dict[str, Run]
    rows: list[MatrixRow]

    @property
    def differing(self) -> list[MatrixRow]:
        return [r for r in self.rows if r.differs]


def build_matrix(runs: Sequence[Run]) -> Matrix:
    """The matrix of the newest run of each device class among ``runs`` (oldest first)."""
    sources: dict[str, Run] = {}
    cells: dict[str, dict[CheckKey, Record]] = {}
    for run in reversed(runs):  # newest first: the first run seen of a class is its column
        by_class: dict[str, dict[CheckKey, Record]] = {}
        for cls, record in run.record_classes():
            by_class.setdefault(cls, {})[check_key(record)] = record
        for cls, records in by_class.items():
            if cls not in sources:
                sources[cls], cells[cls] = run, records
    classes = sort_classes(sources)
    order: dict[CheckKey, MatrixRow] = {}
    # Rows in the order of the checks in the columns' runs, first column first.
    for cls in classes:
        for key, record in cells[cls].items():
            order.setdefault(key, MatrixRow(key)).cells[cls] = record
    rows = list(order.values())
    rows.sort(key=lambda r: not r.differs)  # stable: flagged first, otherwise in order
    return Matrix(classes, {c: sources[c] for c in classes}, rows)


def closest_ratio(record: Record) -> float | None:
    """How much of its budget the record's closest metric uses (1.0: at the budget)."""
    c = record.closest
    if not c:
        return None
    value, limit = c.get("value"), c.get("limit")
    if not isinstance(value, (int, float)) or not isinstance(limit, (int, float)):
        return None
    return budget_ratio(str(c.get("metric")), float(value), float(limit))


#: From this share of the budget on, a cell says how many times the budget, not a percent
#: (``FAIL 2868x``, not ``FAIL 286814%``).
TIMES_FROM = 10.0


def _percent(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    if math.isinf(ratio):
        return "over (inf)"
    return f"{ratio:,.0f}x" if ratio >= TIMES_FROM else f"{ratio:.0%}"


def caught_text(record: Record) -> str:
    """An expected failure's reading: the violation that still catches the known-bad
    variant, as value against limit (``caught: casts.round_trips 1 > 0``). A share of the
    budget means nothing there: the variant is expected to miss it, by any amount."""
    c = record.closest or {}
    metric, value, limit = c.get("metric"), c.get("value"), c.get("limit")
    if not metric or not isinstance(value, (int, float)) or not isinstance(limit, (int, float)):
        return "caught"
    sign = "<" if is_lower_bound(str(metric)) else ">"
    return f"caught: {c.get('output')}.{metric} {value:.3g} {sign} {limit:.3g}"


def cell_text(record: Record | None) -> str:
    """``PASS 48% 1.73e-06 1.12x [1.10, 1.14]``: verdict, share of the budget the closest
    metric uses, calc_diff, speedup (as the run's summary table gives it: an ungated figure
    that never got narrow is ``too noisy``). An expected failure gives the violation that
    catches it instead of the share (``XFAIL (caught: casts.round_trips 1 > 0) 2.94e-06``).
    ``-`` for a check the column's run does not have."""
    if record is None:
        return "-"
    if record.status == "skip":
        return "SKIP"
    calc = record.key_metric("calc_diff")
    share = (f"({caught_text(record)})" if record.status == "xfail"
             else _percent(closest_ratio(record)))
    parts = [record.verdict, share, "-" if calc is None else f"{calc:.2e}"]
    speed = speedup_cell(record)
    if speed != "-":
        parts.append(speed)
    return " ".join(parts)


def headline(matrix: Matrix) -> str:
    """``matrix: 40 checks on 2 device classes (cpu, H200); 1 verdict differs``."""
    n = len(matrix.differing)
    return (f"matrix: {len(matrix.rows)} checks on {len(matrix.classes)} device class(es) "
            f"({', '.join(matrix.classes)}); {n} verdict(s) differ across devices")


def source_lines(matrix: Matrix) -> list[str]:
    """Which run each column shows."""
    return [f"{cls}: {run.path} (commit {run.commit_label}, {run.date})"
            for cls, run in matrix.sources.items()]


def table_rows(matrix: Matrix) -> tuple[list[str], list[list[str]]]:
    """Header and rows for the text and markdown tables."""
    header = ["check", "differs", *matrix.classes]
    rows = [[r.label, "yes" if r.differs else "", *(cell_text(r.cells.get(c))
                                                      for c in matrix.classes)]
            for r in matrix.rows]
    return header, rows


CELL_HELP = ("cell: verdict, share of the budget the closest metric uses (an expected "
             "failure, XFAIL: the violation that still catches it), calc_diff, speedup "
             "[interval]")


def to_markdown(matrix: Matrix) -> str:
    """The matrix as GitHub-flavoured markdown."""
    header, rows = table_rows(matrix)
    lines = [f"## numcheck {headline(matrix)}", "", *(f"- {s}" for s in source_lines(matrix)),
             "", CELL_HELP + ".", "", *md_table(header, rows)]
    return "\n".join(lines) + "\n"


def _cell_html(record: Record | None) -> str:
    if record is None:
        return '<span class="v-SKIP">-</span>'
    v = record.verdict
    out = f'<span class="v-{_e(v)}">{_e(v)}</span>'
    if record.status == "skip":
        return f'{out}<br><span class="reason">{_e(record.reason)}</span>'
    ratio = closest_ratio(record)
    if record.status == "xfail":  # no budget bar: expected to miss it, by any amount
        out += f"<br>{_e(caught_text(record))}"
    elif ratio is not None:
        c = record.closest or {}
        out += f"<br>{bar(ratio)}{_e(_percent(ratio))} <code>{_e(c.get('metric'))}</code>"
    calc = record.key_metric("calc_diff")
    if calc is not None:
        out += f"<br>calc_diff {calc:.2e}"
    speed = speedup_cell(record)
    if speed != "-":
        out += f"<br>{_e(speed)}"
    return out


def to_html(matrix: Matrix) -> str:
    """One self-contained page (no request leaves it: the report's policy and styles)."""
    title = headline(matrix)
    sources = "".join(
        f"<tr><td>{_e(c)}</td><td><code>{_e(run.path)}</code></td>"
        f"<td><code>{_e(run.commit_label)}</code></td><td>{_e(run.date)}</td></tr>"
        for c, run in matrix.sources.items())
    head = "".join(f"<th>{_e(c)}</th>" for c in matrix.classes)
    body = []
    for row in matrix.rows:
        cls = ' class="differs"' if row.differs else ""
        flag = '<span class="v-FAIL">differs</span>' if row.differs else ""
        cells = "".join(f"<td>{_cell_html(row.cells.get(c))}</td>" for c in matrix.classes)
        body.append(f"<tr{cls}><td><code>{_e(row.label)}</code></td><td>{flag}</td>{cells}</tr>")
    return "\n".join([
        *page_start(f"numcheck {title}", "tr.differs td{background:#fff4e5}"),
        "<h1>numcheck device matrix</h1>",
        (f'<p class="headline {"gate-fail" if matrix.differing else "gate-pass"}">'
         f"{_e(title)}</p>"),
        "<h2>Columns</h2>",
        ("<table><thead><tr><th>device class</th><th>report</th><th>commit</th><th>date</th>"
         f"</tr></thead><tbody>{sources}</tbody></table>"),
        (f"<h2>Checks</h2><p>{_e(CELL_HELP)}; rows whose verdict differs across devices "
         "first.</p>"),
        (f"<table><thead><tr><th>check</th><th></th>{head}</tr></thead><tbody>"
         + "".join(body) + "</tbody></table>"),
        "</body></html>",
    ]) + "\n"
