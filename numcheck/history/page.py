"""The history as one self-contained HTML page (``python -m numcheck history --html``).

Top: the headline, the checks that moved beyond the drift rules (first move per device
class, with its commit), the newest run of each device class against the one before it,
and every run read. Then one section per check, moved checks first: its moves, and a figure
with its calc_diff, closest-to-budget ratio, recall and speedup (with its interval) across
commits, one line per device class, budgets dashed red, first moves marked with their
commit (:mod:`numcheck.history.svgseries`).

Like the run report (:mod:`numcheck.report.htmlpage`): its content security policy and
styles, plots as inline ``data:`` SVG, nothing fetched. Plots need matplotlib (the ``html``
extra); without it the page has every table.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from numcheck.history.matrix import cell_text, closest_ratio
from numcheck.history.pool import collector_paused, parallel_map
from numcheck.history.series import History, Series
from numcheck.history.summary import GATE_HEADER, MOVED_HEADER, gate_row, headline, moved_rows
from numcheck.history.svgseries import (
    PALETTE,
    RATIO_CAP,
    CheckPlot,
    Panel,
    draw_check,
    held_still,
    preload,
    still_text,
)
from numcheck.report.htmlpage import EXTRA_HINT, anchor, page_start, svg_img, write_page
from numcheck.report.htmltext import escape as _e
from numcheck.report.htmltext import table as _table
from numcheck.report.svgplots import available

#: Commit ids printed under each plot's x axis, at most.
MAX_TICKS = 5
#: Regressions listed in full; the rest folded (a removed case file lists every check).
MAX_REGRESSIONS = 10

_EXTRA_CSS = """
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin:0 4px 0 10px;
vertical-align:middle}
tr.regression td{background:#fdecea}tr.improved td{background:#e6f4ea}
.plots img{width:100%;height:auto}
.still{color:#555;margin:.2em 0}
"""


def colors(history: History) -> dict[str, str]:
    """A colour per device class, the same on every plot of the page."""
    return {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(history.classes)}


def tick_label(history: History, x: int) -> str:
    run = history.runs[history.ticks[x]]
    return run.commit_label[:7] if run.commit else run.date[:10]


def plot_data(history: History, series: Series, palette: dict[str, str]) -> CheckPlot:
    """The plain data of one check's figure."""
    calc = Panel("calc_diff", log=True, budget_label="budget", short="calc_diff")
    ratio = Panel("closest to budget: value/budget", reference=1.0, reference_label="budget",
                  short="budget used", fmt=".0%")
    recall = Panel("recall_min", budget_label="budget", short="recall_min", fmt=".4f")
    speed = Panel("speedup [interval]", budget_label="speedup_min", reference=1.0,
                  reference_label="no gain", short="speedup", fmt=".2f")
    budgets: dict[str, dict[int, float]] = {"calc": {}, "recall": {}, "speed": {}}
    for cls, points in series.lines.items():
        for p in points:
            r, x = p.record, float(p.x)
            if r.status == "skip":
                continue
            value = r.key_metric("calc_diff")
            if value is not None:
                calc.lines.setdefault(cls, []).append((x, value))
            first = next(iter(r.metrics), None)
            limit = (r.budget.get(first) or {}).get("calc_diff") if first else None
            if isinstance(limit, (int, float)):
                budgets["calc"][p.x] = float(limit)
            # An expected failure misses its budget by design, by any amount: its share of
            # it is no reading (the latest table says what still catches it).
            used = closest_ratio(r) if r.status != "xfail" else None
            if used is not None:
                ratio.lines.setdefault(cls, []).append((x, min(used, RATIO_CAP)))
            recall_min = r.key_metric("recall_min")
            if recall_min is not None:
                recall.lines.setdefault(cls, []).append((x, recall_min))
            limit = (r.budget.get("topk") or {}).get("recall_min")
            if isinstance(limit, (int, float)):
                budgets["recall"][p.x] = float(limit)
            t = r.timing or {}
            if isinstance(t.get("speedup"), (int, float)):
                speed.lines.setdefault(cls, []).append((x, float(t["speedup"])))
                lo, hi = t.get("ci_low"), t.get("ci_high")
                if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
                    speed.bands.setdefault(cls, []).append((x, float(lo), float(hi)))
                if isinstance(t.get("speedup_min"), (int, float)):
                    budgets["speed"][p.x] = float(t["speedup_min"])
    for panel, name in ((calc, "calc"), (recall, "recall"), (speed, "speed")):
        panel.budget = [(float(x), v) for x, v in sorted(budgets[name].items())]
    panels = [p for p in (calc, ratio, recall, speed) if p.lines]
    n_x = len(history.ticks)
    step = max(1, -(-n_x // MAX_TICKS))
    ticks = [(x, tick_label(history, x)) for x in range(0, n_x, step)]
    marks = [(m.x, tick_label(history, m.x), m.device_class)
             for m in series.first_moves().values()]
    drawn = {c for p in panels for c in p.lines}
    return CheckPlot(series.label, panels, {c: palette[c] for c in palette if c in drawn},
                     n_x, ticks, marks)


def _moves_table(history: History, series: Series) -> str:
    rows, classes = [], []
    for m in series.moves:
        run, prev = history.runs[m.run], history.runs[m.previous_run]
        moved_at = f"<code>{_e(run.commit_label)}</code> ({_e(run.date[:10])})"
        rows.append([_e(m.device_class), moved_at, f"<code>{_e(prev.commit_label)}</code>",
                     _e(m.status), _e("; ".join(m.reasons))])
        classes.append(m.status)
    return _table(["device", "moved at", "previous run", "change", "why"], rows, classes)


def _latest_table(series: Series) -> str:
    """The newest value of each metric per device class."""
    rows = [[_e(cls), _e(cell_text(points[-1].record))] for cls, points in
            series.lines.items() if points]
    return _table(["device", "newest run: verdict, budget used, calc_diff, speedup"], rows)


def render_history(history: History, *, plots: bool | None = None,
                   jobs: int | None = None) -> str:
    """The whole page. ``plots=None`` draws plots when matplotlib is installed; ``jobs``
    worker processes draw them (:func:`numcheck.history.pool.parallel_map`)."""
    if plots is None:
        plots = available()
    title = headline(history)
    palette = colors(history)
    ordered = history.moved + [s for s in history.series if not s.moves]
    anchors = {s.key: anchor(i) for i, s in enumerate(ordered)}  # a check's section
    with collector_paused():
        data = [split_still(plot_data(history, s, palette)) for s in ordered]
    # Checks with nothing to plot (every figure held still, or skipped in every run) and no
    # move: one row each in a table, not a panel of flat lines each.
    quiet = [i for i, s in enumerate(ordered) if not s.moves and not data[i][0].panels]
    svgs: dict[int, str] = {}
    if plots:
        preload()
        todo = [(i, moving) for i, (moving, _) in enumerate(data) if moving.panels]
        drawn = parallel_map(draw_check, [d for _, d in todo], jobs=jobs, min_items=24)
        svgs = {i: svg for (i, _), svg in zip(todo, drawn, strict=True)}
    rules = ", ".join(f"{k} {v:g}" for k, v in asdict(history.rules).items())
    legend = "".join(f'<span class="swatch" style="background:{c}"></span>{_e(cls)}'
                     for cls, c in palette.items())
    out = [
        *page_start(f"numcheck {title}", _EXTRA_CSS),
        "<h1>numcheck history</h1>",
        f'<p class="headline {"gate-pass" if history.passed else "gate-fail"}">{_e(title)}</p>',
        f"<p>device classes: {legend}</p>",
        f"<p>drift rules: {_e(rules)}</p>",
    ]
    if not plots:
        out.append(f'<p class="hint">{_e(EXTRA_HINT)}; this page has the tables only.</p>')
    moved = moved_rows(history)
    out.append("<h2>Checks that moved beyond the drift rules</h2>")
    if moved:
        rows = []
        for move, cells in moved:
            link = f'<a href="#{anchors[move.key]}"><code>{_e(cells[0])}</code></a>'
            rows.append([link, *(_e(c) for c in cells[1:])])
        out.append(_table(MOVED_HEADER, rows, [m.status for m, _ in moved]))
    else:
        out.append("<p>None: every check stayed within the drift rules from run to run.</p>")
    out.append("<h2>Newest run of each device class against the one before it</h2>")
    gate_rows = [[_e(c) for c in gate_row(history, g)] for g in history.gates]
    out.append(_table(GATE_HEADER, gate_rows))
    if history.regressions:
        items = [f'<li class="v-FAIL">REGRESSION {_e(r)}</li>' for r in history.regressions]
        out.append("<ul>" + "".join(items[:MAX_REGRESSIONS]) + "</ul>")
        if len(items) > MAX_REGRESSIONS:
            out.append(f"<details><summary>{len(items) - MAX_REGRESSIONS} more regression(s)"
                       f"</summary><ul>{''.join(items[MAX_REGRESSIONS:])}</ul></details>")
    out.append(_runs_section(history))
    out.append("<h2>Each check</h2>")
    out.append(f"<p>Checks that moved first. Per check, across commits (oldest left, ordered "
               f"by commit date; one line per device class): calc_diff of its first output "
               f"(a zero drawn as an open triangle a decade below the smallest value); how "
               f"much of its budget the closest metric uses (1 is the budget; a failure "
               f"beyond {RATIO_CAP:g}x, or NaN, is drawn at {RATIO_CAP:g}; an expected "
               f"failure is left out: it misses its budget by design); the worst row's "
               f"top-k recall (top-k ops); the speedup with its confidence interval (timed "
               f"runs). A figure that held still from run to run is a line of text, and a "
               f"check with nothing else to show is one row of the table at the end. Dashed "
               f"vertical lines: the first commit where the check moved beyond the drift "
               f"rules in that device class, labelled with its id.</p>")
    for i, series in enumerate(ordered):
        if i in quiet:
            continue
        moving, still = data[i]
        out.append(f'<section class="check" id="{anchor(i)}"><h3><code>{_e(series.label)}'
                   "</code></h3>")
        if series.moves:
            out.append(_moves_table(history, series))
        out.append(_latest_table(series))
        if i in svgs:
            out.append(f'<div class="plots">{svg_img(svgs[i], series.label + " across commits")}'
                       "</div>")
        elif plots and not still:
            out.append('<p class="hint">nothing to draw: no run measured this check '
                       "(skipped, or an error before any metric)</p>")
        if still:
            out.append(f'<p class="still">held still in every run: '
                       f"{_e('; '.join(still_text(p) for p in still))}</p>")
        out.append("</section>")
    if quiet:
        out.append(_quiet_table(history, ordered, quiet))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def split_still(plot: CheckPlot) -> tuple[CheckPlot, list[Panel]]:
    """The check's figure with only the panels that move, and the panels that held still
    (:func:`~numcheck.history.svgseries.held_still`), which the page gives as text."""
    still = [p for p in plot.panels if held_still(p)]
    moving = [p for p in plot.panels if not held_still(p)]
    drawn = {c for p in moving for c in p.lines}
    return replace(plot, panels=moving,
                   colors={c: v for c, v in plot.colors.items() if c in drawn}), still


def _quiet_table(history: History, ordered: list[Series], quiet: list[int]) -> str:
    """The checks with nothing to plot, one row each: the newest reading per device class
    (the same in every run, or a skip)."""
    head = "".join(f"<th>{_e(c)}</th>" for c in history.classes)
    body = []
    for i in quiet:
        series = ordered[i]
        cells = []
        for cls in history.classes:
            points = series.lines.get(cls) or []
            cells.append("<td>-</td>" if not points else
                         f"<td>{_e(cell_text(points[-1].record))}</td>")
        runs = sum(len(points) for points in series.lines.values())
        body.append(f'<tr id="{anchor(i)}"><td><code>{_e(series.label)}</code></td>'
                    f'<td class="num">{runs}</td>{"".join(cells)}</tr>')
    return (f"<h2>Checks that held still</h2><p>{len(quiet)} check(s) whose every figure was "
            "the same in each run (or that no run measured): nothing to plot. Per device "
            "class, the newest run's verdict, budget used, calc_diff and speedup.</p>"
            f"<table><thead><tr><th>check</th><th>runs</th>{head}</tr></thead><tbody>"
            + "".join(body) + "</tbody></table>")


def _runs_section(history: History) -> str:
    rows = []
    for i, run in enumerate(history.runs):
        gate = (f'<span class="v-{"PASS" if run.gate == "pass" else "FAIL"}">'
                f"{_e(run.gate or '-')}</span>")
        rows.append([str(i + 1), _e(run.date), _e(run.date_source),
                     f"<code>{_e(run.commit_label)}</code>", _e(run.device_class), gate,
                     str(len(run.records)), f"<code>{_e(run.path)}</code>"])
    body = _table(["#", "date", "date from", "commit", "device", "gate", "checks", "report"],
                  rows)
    return (f"<h2>Runs</h2><details><summary>{len(history.runs)} run(s), oldest first "
            f"(ordered by their commit's date; 'date from' says where it came from)</summary>"
            f"{body}</details>")


def write_history(path: Path | str, history: History, *, plots: bool | None = None,
                  jobs: int | None = None) -> None:
    """Write the page (:func:`numcheck.report.htmlpage.write_page`)."""
    write_page(path, render_history(history, plots=plots, jobs=jobs))
