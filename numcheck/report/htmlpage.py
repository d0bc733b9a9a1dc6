"""The run as one self-contained HTML page (``--numcheck-html``, ``python -m numcheck html``).

Engineers judging a precision change would rather look at error distributions, flip margins
and speedup intervals than read a wide text table. The page holds:

- a run header: gate, device, versions, commit, and whatever else the report's environment
  carries (machine noise, clocks, GPU sharing), shown as it is;
- one table of every check, each with a value/budget bar for its closest metric;
- per check: every budgeted metric with its bar, an ``|error|`` histogram per output with
  the budget band and the honest-rounding reference, the top-k flips against the tie band,
  the speedup interval against its threshold with the timer used, the per-call casts and
  a variant's one-time preparation apart from them, and the baseline drift.

Everything is built from a :class:`~numcheck.report.records.Report` alone (records carry their plot
data, :mod:`numcheck.check.plotdata`), so a saved JSON report gives the same page. The file
references nothing outside itself: no scripts, fonts, stylesheets or images to fetch; plots
are inline SVG (``data:`` URIs, so their internal ids cannot collide). Plots need the
``html`` extra (matplotlib, :mod:`numcheck.report.svgplots`); without it the page says so
and still has every table. Nothing here imports torch.
"""

from __future__ import annotations

import base64
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from numcheck.invariance.table import invariance_rows
from numcheck.report import svgplots
from numcheck.report.htmltext import escape as _e
from numcheck.report.invariance_html import invariance_html, invariance_summary_html
from numcheck.report.localize_html import localization_html
from numcheck.report.markdown import headline
from numcheck.report.prepared_html import prepared_html
from numcheck.report.quant_html import quant_html
from numcheck.report.records import Record, Report
from numcheck.report.render import failing_first

#: The page's content security policy: no scripts, and nothing loaded from anywhere but
#: itself (inline styles, data: images). A browser refuses and logs any other request.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

#: Install hint shown where a plot would be.
EXTRA_HINT = "plots need the html extra: pip install 'numcheck[html]' (matplotlib)"

#: Budget keys that are settings, not metric limits.
_SETTINGS = frozenset({"atol", "rtol", "allow_nan", "tie_band", "tie_band_kind"})

#: Environment keys shown first in the run header, in this order, with their labels.
_HEADER_KEYS = (
    ("device", "device"), ("device_names", "GPU"), ("torch", "torch"), ("cuda", "CUDA"),
    ("triton", "triton"), ("driver", "driver"), ("numcheck", "numcheck"), ("python", "python"),
    ("platform", "platform"), ("git_commit", "commit"), ("git_commit_date", "commit date"),
    ("workers", "xdist workers"),
    ("argv", "arguments"),
)

#: The page's stylesheet (the history and matrix pages, numcheck/history, share it).
CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em;color:#222;
background:#fff}
h1{font-size:1.5em;margin:0 0 .3em}h2{font-size:1.2em;margin-top:1.6em}
h3{font-size:1.05em;margin:.2em 0}
table{border-collapse:collapse;margin:.4em 0}
td,th{border-bottom:1px solid #e3e3e3;padding:2px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.v-PASS,.v-XFAIL{color:#1a7f37;font-weight:600}.v-SKIP{color:#777}
.v-FAIL,.v-ERROR,.v-CRASH,.v-GOLDENMISSING,.v-GOLDENSTALE,.v-GOLDENCORRUPT,
.v-GOLDENFORMATERROR,.v-VARIANTERROR,.v-TIMINGERROR{color:#c62828;font-weight:700}
.headline{font-size:1.15em;font-weight:700;padding:.4em .6em;border-radius:4px;
display:inline-block}
.gate-pass{background:#e6f4ea;color:#1a7f37}.gate-fail{background:#fdecea;color:#c62828}
.bar{position:relative;display:inline-block;width:120px;height:10px;background:#eee;
border-radius:2px;vertical-align:middle;margin-right:6px}
.bar span{position:absolute;left:0;top:0;bottom:0;border-radius:2px}
.bar i{position:absolute;top:-2px;bottom:-2px;width:2px;background:#333}
.ok{background:#4caf50}.near{background:#f0a020}.over{background:#d32f2f}
section.check{border-top:2px solid #ddd;margin-top:1.2em;padding-top:.4em}
.note{color:#8a5a00}.reason{font-family:ui-monospace,monospace;white-space:pre-wrap}
.plots img{max-width:100%;display:block;margin:.3em 0}
.hint{color:#777;font-style:italic}
code{font-family:ui-monospace,monospace}
"""


def _num(value: Any, fmt: str = ".3g") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else _e(value)
    return format(value, fmt)


def is_lower_bound(metric: str) -> bool:
    """Top-k recalls must stay above their budget; every error metric below it."""
    return metric.startswith(("recall", "tie_recall"))


def budget_ratio(metric: str, value: float, limit: float) -> float:
    """How much of the budget a value uses: 1.0 is exactly at the limit, above 1 is over.

    Errors: ``value / limit``. Recalls: the share of the allowed loss used,
    ``(1 - value) / (1 - limit)`` (a limit of 1 allows no loss at all).
    """
    if is_lower_bound(metric):
        used, allowed = 1.0 - value, 1.0 - limit
    else:
        used, allowed = value, limit
    if math.isnan(used):
        return math.inf
    if allowed <= 0:
        return 0.0 if used <= 0 else math.inf
    return max(used / allowed, 0.0)


def bar(ratio: float) -> str:
    """A value/budget bar: the budget mark sits at two thirds of the width."""
    shown = 1.5 if not math.isfinite(ratio) else min(ratio, 1.5)
    cls = "over" if ratio > 1 else ("near" if ratio > 0.8 else "ok")
    title = "no budget used" if ratio == 0 else (
        "over budget" if not math.isfinite(ratio) else f"{ratio:.0%} of budget")
    return (f'<span class="bar" title="{title}"><span class="{cls}" '
            f'style="width:{100 * shown / 1.5:.1f}%"></span><i style="left:66.7%"></i></span>')


def _verdict(record: Record) -> str:
    v = record.verdict
    notes = [f"not produced: {', '.join(record.not_produced)}"] if record.not_produced else []
    notes += [record.note] if record.note else []
    note = f' <span class="note">({_e("; ".join(notes))})</span>' if notes else ""
    return f'<span class="v-{_e(v)}">{_e(v)}</span>{note}'


def _closest(record: Record) -> str:
    c = record.closest
    if c is None:
        return f'<span class="reason">{_e(record.reason)}</span>' if record.reason else "-"
    value, limit = c.get("value"), c.get("limit")
    if not isinstance(value, (int, float)) or not isinstance(limit, (int, float)):
        return _e(f"{c.get('output')}.{c.get('metric')}")
    ratio = budget_ratio(str(c.get("metric")), float(value), float(limit))
    return (f"{bar(ratio)}<code>{_e(c.get('output'))}.{_e(c.get('metric'))}</code> "
            f"{_num(value)} / {_num(limit)}")


def _speedup(record: Record) -> str:
    t = record.timing
    if not t or t.get("speedup") is None:
        return "-"
    text = f"{t['speedup']:.2f}x"
    if t.get("ci_low") is not None and t.get("ci_high") is not None:
        text += f" [{t['ci_low']:.2f}, {t['ci_high']:.2f}]"
    return _e(text)


def anchor(i: int) -> str:
    """The id of the page's section of check ``i``."""
    return f"check-{i}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """Cells are HTML already (callers escape)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _value_html(value: Any) -> str:
    """Any JSON value of the environment, readable: dicts as nested tables."""
    if isinstance(value, Mapping):
        if not value:
            return "-"
        return _table(["", ""], ([_e(k), _value_html(v)] for k, v in value.items()))
    if isinstance(value, list):
        if all(not isinstance(v, (Mapping, list)) for v in value):
            return _e(" ".join(str(v) for v in value)) or "-"
        return "<br>".join(_value_html(v) for v in value)
    if isinstance(value, float):
        return _num(value, ".4g")
    return "-" if value is None else _e(value)


def run_header(report: Report) -> str:
    """The run's gate, when and where it ran, and every other environment entry."""
    env = dict(report.environment)
    rows = [["created", _e(report.created or "-")]]
    for key, label in _HEADER_KEYS:
        if key in env:
            rows.append([_e(label), _value_html(env.pop(key))])
    # Whatever else the environment carries (machine noise, clocks, GPU sharing...), as is.
    rows += [[_e(k), _value_html(v)] for k, v in env.items()]
    return _table(["run", ""], rows, "env")


def _metric_rows(record: Record) -> list[list[str]]:
    """Every budgeted metric of the record: value, limit and a bar."""
    rows = []
    for output, limits in record.budget.items():
        if not isinstance(limits, Mapping):
            continue
        for metric, limit in limits.items():
            if metric in _SETTINGS or not isinstance(limit, (int, float)) or isinstance(
                    limit, bool):
                continue
            source = record.topk if output == "topk" or is_lower_bound(metric) else \
                record.metrics.get(output)
            value = None if source is None else source.get(metric)
            if not isinstance(value, (int, float)):
                rows.append([f"<code>{_e(output)}.{_e(metric)}</code>", "-", _num(limit), ""])
                continue
            ratio = budget_ratio(metric, float(value), float(limit))
            rows.append([f"<code>{_e(output)}.{_e(metric)}</code>",
                         _num(value, ".4g"), _num(limit, ".4g"), bar(ratio)])
    return rows


def svg_img(svg: str, alt: str) -> str:
    """An SVG document as an inline image (a ``data:`` URI: its ids cannot collide with
    another plot's, and nothing is fetched)."""
    data = base64.b64encode(svg.encode()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/svg+xml;base64,{data}">'


def _plots(record: Record, plots: bool) -> str:
    data = record.plots or {}
    parts = []
    errors = data.get("errors") or {}
    flips = data.get("flips") or {}
    timed = bool(record.timing and record.timing.get("speedup") is not None)
    if not (errors or flips or timed):
        return ""
    if not plots:
        return f'<p class="hint">{_e(EXTRA_HINT)}</p>'
    for output, hist in errors.items():
        if hist and not hist.get("counts"):
            parts.append(f"<p><code>{_e(output)}</code>: all {_e(hist.get('zeros', 0))} compared "
                         f"elements equal the golden exactly ({_e(hist.get('nonfinite', 0))} "
                         "non-finite, not compared).</p>")
        elif hist:
            budget = record.budget.get(output) if isinstance(record.budget, Mapping) else None
            parts.append(svg_img(svgplots.error_histogram(hist, budget, output=output),
                              f"{record.id} {output} error histogram"))
    for output, fl in flips.items():
        if fl and fl.get("n_flips"):
            parts.append(svg_img(svgplots.flip_histogram(fl, output=output),
                              f"{record.id} {output} flips"))
        elif fl:
            parts.append(f"<p>{_e(output)}: no flipped tokens.</p>")
    if timed:
        assert record.timing is not None
        parts.append(svg_img(svgplots.speedup_interval(record.timing), f"{record.id} speedup"))
    return '<div class="plots">' + "".join(parts) + "</div>"


def _timing(record: Record) -> str:
    t = record.timing
    if not t:
        return ""
    keys = ("speedup", "ci_low", "ci_high", "confidence", "speedup_min", "gate", "gate_reason",
            "timer", "rounds", "median_s", "reference_median_s")
    rows = [[_e(k), _value_html(t[k])] for k in keys if k in t]
    rows += [[_e(k), _value_html(v)] for k, v in t.items() if k not in keys]
    return "<h4>timing</h4>" + _table(["", ""], rows)


def _drift_cells(row: Mapping[str, Any]) -> list[str]:
    pairs = row.get("pairs") or {}
    cells = []
    for name in ("calc_diff", "rel_fro", "recall_min", "tie_recall_min", "speedup"):
        base, new = (list(pairs.get(name) or [None, None]) + [None, None])[:2]
        cells.append(f"{_num(base)} &rarr; {_num(new)}")
    return cells


DRIFT_COLUMNS = ["calc_diff", "rel_fro", "recall_min", "tie_recall_min", "speedup"]


def _drift_section(drift: Mapping[str, Any]) -> str:
    rows = drift.get("rows") or []
    regressions = drift.get("regressions") or []
    title = f"<h2>Drift vs baseline {_e(drift.get('baseline', ''))}</h2>"
    verdict = (f'<p class="v-FAIL">{len(regressions)} regression(s)</p>' if regressions
               else '<p class="v-PASS">no regression</p>')
    rules = ", ".join(f"{_e(k)} {_e(v)}" for k, v in (drift.get("rules") or {}).items())
    body = _table(["check", "status", *DRIFT_COLUMNS, "why"], (
        [_e(r.get("id")), _e(r.get("status")), *_drift_cells(r),
         _e("; ".join(r.get("reasons") or []))] for r in rows))
    return f"{title}{verdict}<p>rules: {rules}</p>{body}"


def _check_section(i: int, record: Record, plots: bool, drift_row: Mapping[str, Any] | None
                   ) -> str:
    parts = [f'<section class="check" id="{anchor(i)}">',
             f"<h3><code>{_e(record.id)}</code> {_verdict(record)}</h3>"]
    if record.source:
        parts.append(f"<p>case file <code>{_e(record.source)}</code>, seeds "
                     f"{_e(', '.join(str(s) for s in record.seeds))}, precision "
                     f"{_e(record.precision or '-')}, device {_e(record.device_name or record.device)}"
                     "</p>")
    if record.reason:
        parts.append(f'<p class="reason">{_e(record.reason)}</p>')
    if record.violations:
        items = "".join(f"<li><code>{_e(v.get('text', ''))}</code></li>"
                        for v in record.violations)
        parts.append(f"<ul>{items}</ul>")
    parts.append(localization_html(record.localization))
    rows = _metric_rows(record)
    if rows:
        parts.append(_table(["metric", "value", "budget", "value / budget"], rows))
    parts.append(_plots(record, plots))
    parts.append(_timing(record))
    if record.casts:
        c = record.casts
        parts.append(f"<p>casts and copies per call: {_e(c.get('casts', '-'))} casts, "
                     f"{_e(c.get('copies', '-'))} copies, {_num(c.get('cast_bytes_ratio'))}x the "
                     f"op's minimum bytes, round trips {len(c.get('round_trips') or [])}, "
                     f"repeated casts {len(c.get('repeated_casts') or [])}</p>")
        for kind in ("round_trips", "repeated_casts"):  # each names both of its sites
            parts += [f'<p class="reason">{_e(kind.replace("_", " ")[:-1])}: {_e(text)}</p>'
                      for text in c.get(kind) or []]
    parts.append(prepared_html(record.prepared))
    parts.append(invariance_html(record.invariance))
    parts.append(quant_html(record.quant, record.metrics, record.budget))
    if drift_row is not None:
        parts.append("<h4>drift vs baseline</h4>" + _table(
            ["status", *DRIFT_COLUMNS, "why"],
            [[_e(drift_row.get("status")), *_drift_cells(drift_row),
              _e("; ".join(drift_row.get("reasons") or []))]]))
    parts.append("</section>")
    return "".join(parts)


def render_html(report: Report, *, plots: bool | None = None) -> str:
    """The whole page. ``plots=None`` draws plots when matplotlib is installed."""
    if plots is None:
        plots = svgplots.available()
    title = headline(report)
    gate = "gate-pass" if report.passed else "gate-fail"
    records = failing_first(report.records)
    index = {id(r): i for i, r in enumerate(records)}
    drift = report.drift.to_dict() if report.drift is not None else {}
    drift_rows = {row.get("id"): row for row in drift.get("rows") or []}
    ran = [r for r in records if r.status != "skip"]
    skipped = [r for r in records if r.status == "skip"]
    out = [
        *page_start(title),
        "<h1>numcheck report</h1>",
        f'<p class="headline {gate}">{_e(title)}</p>',
    ]
    if not plots:
        out.append(f'<p class="hint">{_e(EXTRA_HINT)}; this page has the tables only.</p>')
    out += ["<h2>Run</h2>", run_header(report), "<h2>Checks</h2>"]
    timed = any(r.timing for r in ran)
    header = ["check", "verdict", "closest to budget (value / budget)", "calc_diff", "rel_fro",
              "recall", "tie recall"] + (["speedup"] if timed else [])
    rows = []
    for r in ran:
        row = [f'<a href="#{anchor(index[id(r)])}"><code>{_e(r.id)}</code></a>',
               _verdict(r), _closest(r), _num(r.key_metric("calc_diff"), ".2e"),
               _num(r.key_metric("rel_fro"), ".2e"), _num(r.key_metric("recall_min"), ".4f"),
               _num(r.key_metric("tie_recall_min"), ".4f")]
        if timed:
            row.append(_speedup(r))
        rows.append(row)
    out.append(_table(header, rows, "checks") if rows else "<p>No check ran.</p>")
    if skipped:
        out.append(f"<details><summary>{len(skipped)} skipped check(s), with the reasons"
                   "</summary>")
        out.append(_table(["check", "reason"], (
            [f"<code>{_e(r.id)}</code>", f'<span class="reason">{_e(r.reason)}</span>']
            for r in skipped)))
        out.append("</details>")
    out.append(invariance_summary_html(invariance_rows(ran)))
    if report.drift is not None:
        out.append(_drift_section(drift))
    if ran:
        out.append("<h2>Each check</h2>")
        out += [_check_section(index[id(r)], r, plots, drift_rows.get(r.id)) for r in ran]
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_html(path: Path | str, report: Report, *, plots: bool | None = None) -> None:
    """Write the page (:func:`write_page`)."""
    write_page(path, render_html(report, plots=plots))


def page_start(title: str, extra_css: str = "") -> list[str]:
    """The first lines of every numcheck page (this report, the device matrix, the
    history): the content security policy, the title, the styles and ``extra_css``."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No network, ever: the page may only use what it carries.
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{_e(title)}</title><style>{CSS}{extra_css}</style></head><body>",
    ]


def write_page(path: Path | str, text: str) -> None:
    """Write a page to a temporary file beside ``path``, then rename it over ``path``: a
    reader (a browser, a CI upload) never sees half a page."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
