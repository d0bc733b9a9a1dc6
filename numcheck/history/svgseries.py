"""The history page's plots: one check's metrics across commits, as matplotlib SVG.

One figure per check, one panel per metric (calc_diff, closest to budget, recall_min,
speedup with its interval), one line per device class, the budget or threshold as a dashed
red line, and the first commit where the check moved in each class marked with its id.
:func:`draw_check` takes plain data (:class:`Panel`, :class:`CheckPlot`), so the page can
draw many checks in worker processes.

Size and time matter at 500 runs (:mod:`numcheck.history.pool`, benchmarks/cost/history_scale.py):
a stretch of equal values is drawn from its two ends (same picture, a few points instead of
hundreds: numerics on one device are deterministic, so most series are flat), and a long
noisy series keeps, per bucket of the axis, its lowest and highest point (the envelope a
line at this width shows), its interval band the bucket's widest extent. Each worker process
keeps one figure per panel count and clears it between checks: building a figure's axes
costs as much as drawing them. Written as :mod:`numcheck.report.svgplots` writes its plots
(:func:`~numcheck.report.svgplots.svg_text`): the object API only, text kept as text, no
date in the file.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from numcheck.report.svgplots import svg_text

#: Line colours of the device classes, in class order; red is kept for budgets.
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
           "#ccb974", "#64b5cd")
BUDGET = "#c44e52"
#: Above this many points a series is thinned to its lowest and highest point per bucket
#: of the axis; a panel is 230 (four panels) to 950 points wide (one).
MAX_POINTS = 200
BUCKETS = 80
#: Closest-to-budget ratios above this are drawn at it (an infinite ratio: NaN output).
RATIO_CAP = 2.0
#: A figure's width in inches (about 1300 px at 96 dpi): the page's width, for any number of
#: panels.
FIG_WIDTH = 13.5

XY = tuple[float, float]


@dataclass
class Panel:
    """One metric of a check: a line per device class, optional interval bands (speedup),
    the budget as a series of (x, limit), and the y scale."""

    title: str
    lines: dict[str, list[XY]] = field(default_factory=dict)
    bands: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)
    budget: list[XY] = field(default_factory=list)
    budget_label: str = "budget"
    log: bool = False
    #: A horizontal reference line (1.0: the budget of a ratio, no gain for a speedup).
    reference: float | None = None
    reference_label: str = ""
    #: The metric's name in one line of text ("calc_diff", "budget used").
    short: str = ""
    #: How a value of it reads in text.
    fmt: str = ".3g"


@dataclass
class CheckPlot:
    """Everything one check's figure shows."""

    label: str
    panels: list[Panel]
    colors: dict[str, str]
    #: Commit axis: its length and the (x, label) ticks to print.
    n_x: int
    ticks: list[tuple[int, str]]
    #: First moves: (x, commit label, device class).
    marks: list[tuple[int, str, str]] = field(default_factory=list)


def _same(values: Sequence[float]) -> bool:
    """All equal (NaNs equal to each other)."""
    return len({"nan" if math.isnan(v) else v for v in values}) <= 1


def held_still(panel: Panel) -> bool:
    """Nothing in the panel moves from run to run: each device class's line keeps one value,
    its interval band one extent, the budget one limit. A figure of it would be flat lines
    (a row of text says as much in a fraction of the height)."""
    if not all(_same([y for _, y in points]) for points in panel.lines.values()):
        return False
    if not all(_same([lo for _, lo, _ in band]) and _same([hi for _, _, hi in band])
               for band in panel.bands.values()):
        return False
    return _same([y for _, y in panel.budget])


def still_text(panel: Panel) -> str:
    """A panel that held still, as text: ``calc_diff 1.73e-06`` (one value for every device
    class), or ``calc_diff 1.73e-06 (H200), 2.1e-06 (B200)``."""
    values = {cls: points[0][1] for cls, points in panel.lines.items() if points}
    name = panel.short or panel.title
    if _same(list(values.values())):
        return f"{name} {format(next(iter(values.values())), panel.fmt)}"
    return f"{name} " + ", ".join(f"{format(v, panel.fmt)} ({cls})" for cls, v in values.items())


def preload() -> None:
    """Import what drawing needs, so worker processes forked afterwards have it."""
    for name in ("matplotlib.figure", "matplotlib.ticker", "matplotlib.backends.backend_svg"):
        importlib.import_module(name)


def flatten(points: Sequence[XY]) -> list[XY]:
    """Drop the inner points of each stretch of equal values: a line through the rest is
    the same picture."""
    out: list[XY] = []
    for i, p in enumerate(points):
        if 0 < i < len(points) - 1 and points[i - 1][1] == p[1] == points[i + 1][1]:
            continue
        out.append(p)
    return out


def thin(points: Sequence[XY], n_x: int) -> list[XY]:
    """At most about ``2 * BUCKETS`` points: per bucket of the x range, the lowest and the
    highest point in x order (the envelope a line of this width shows of a noisy series)."""
    if len(points) <= MAX_POINTS:
        return list(points)
    width = max(n_x, 1) / BUCKETS
    buckets: dict[int, list[XY]] = {}
    for p in points:
        buckets.setdefault(int(p[0] / width), []).append(p)
    out: list[XY] = []
    for _, group in sorted(buckets.items()):
        low = min(group, key=lambda p: p[1])
        high = max(group, key=lambda p: p[1])
        out += sorted({low, high})
    return out


def envelope(band: Sequence[tuple[float, float, float]], n_x: int
             ) -> list[tuple[float, float, float]]:
    """An interval band, thinned like :func:`thin`: per bucket, the lowest low and the
    highest high at the bucket's mean x (never narrower than the intervals it covers)."""
    if len(band) <= MAX_POINTS:
        return list(band)
    width = max(n_x, 1) / BUCKETS
    buckets: dict[int, list[tuple[float, float, float]]] = {}
    for b in band:
        buckets.setdefault(int(b[0] / width), []).append(b)
    return [(sum(b[0] for b in g) / len(g), min(b[1] for b in g), max(b[2] for b in g))
            for _, g in sorted(buckets.items())]


def _finite(points: Sequence[XY], log: bool) -> tuple[list[XY], int]:
    """The drawable points, and how many zeros a log axis had to leave out."""
    keep = [p for p in points if math.isfinite(p[1])]
    if not log:
        return keep, 0
    positive = [p for p in keep if p[1] > 0]
    return positive, len(keep) - len(positive)


def zero_floor(panel: Panel) -> float | None:
    """Where a log axis draws a zero: a decade below the smallest positive value the panel
    shows (its lines and budget), so that a move from 0 is a step up from the floor, not a
    lone dot; None when nothing in it is positive."""
    values = [y for points in (*panel.lines.values(), panel.budget) for _, y in points
              if math.isfinite(y) and y > 0]
    if not values:
        return None
    return 10.0 ** (math.floor(math.log10(min(values))) - 1)


def _on_floor(points: Sequence[XY], floor: float) -> tuple[list[XY], list[XY]]:
    """A log panel's line with its zeros (and non-positive values) at ``floor``, and those
    points alone (drawn with their own marker)."""
    line = [(x, y if y > 0 else floor) for x, y in points if math.isfinite(y)]
    return line, [(x, floor) for x, y in points if math.isfinite(y) and y <= 0]


#: Per panel count, the figure this process draws with (and clears between checks).
_FIGURES: dict[int, tuple[Any, list[Any]]] = {}


def _axes(n: int) -> tuple[Any, list[Any]]:
    """A figure with ``n`` empty panels side by side, made once per process and count."""
    if n not in _FIGURES:
        from matplotlib.figure import Figure

        # As wide as the page (the page draws it at 100% of its width) whatever the panel
        # count: a single panel is a wide strip, not a quarter of the page.
        fig = Figure(figsize=(FIG_WIDTH, 2.3))
        fig.subplots_adjust(left=0.045, right=0.995, bottom=0.27, top=0.86, wspace=0.18)
        _FIGURES[n] = (fig, list(fig.subplots(1, n, squeeze=False)[0]))
    fig, axes = _FIGURES[n]
    for ax in axes:
        for artist in [*ax.lines, *ax.collections, *ax.texts]:
            artist.remove()
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        ax.set_yscale("linear")
        ax.relim()
        ax.set_autoscaley_on(True)
    return fig, axes


def draw_check(plot: CheckPlot) -> str:
    """The check's figure as an SVG document (the same bytes whatever was drawn before)."""
    from matplotlib.ticker import (
        FixedLocator,
        FuncFormatter,
        LogLocator,
        MaxNLocator,
        NullFormatter,
        NullLocator,
    )

    fig, axes = _axes(len(plot.panels))
    tick_x = [x for x, _ in plot.ticks]
    tick_labels = dict(plot.ticks)
    for i, (ax, panel) in enumerate(zip(axes, plot.panels, strict=True)):
        zeros = 0
        has_zero = any(y <= 0 for points in panel.lines.values() for _, y in points
                       if math.isfinite(y))
        floor = zero_floor(panel) if panel.log and has_zero else None
        for cls, points in panel.lines.items():
            on_floor: list[XY] = []
            if floor is not None:
                pts, on_floor = _on_floor(points, floor)
            else:
                pts, dropped = _finite(points, panel.log)
                zeros += dropped
            pts = thin(flatten(pts), plot.n_x)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=plot.colors[cls],
                        lw=1.2, marker="o" if len(pts) < 30 else None, ms=2.5, label=cls)
            if on_floor:  # a zero: an open triangle on the floor, the line stepping up from it
                zeros_at = thin(flatten(on_floor), plot.n_x)
                ax.plot([p[0] for p in zeros_at], [p[1] for p in zeros_at], ls="none",
                        marker="v", ms=4, mfc="none", color=plot.colors[cls])
        for cls, band in panel.bands.items():
            rows = envelope([b for b in band if math.isfinite(b[1]) and math.isfinite(b[2])],
                            plot.n_x)
            if rows:
                ax.fill_between([b[0] for b in rows], [b[1] for b in rows],
                                [b[2] for b in rows], color=plot.colors[cls], alpha=0.18,
                                lw=0)
        budget, _ = _finite(panel.budget, panel.log)
        budget = flatten(budget)
        if budget:
            # Steps over each commit's width, so a budget seen at one commit is a line too.
            xs = [budget[0][0] - 0.4] + [p[0] for p in budget[1:]] + [budget[-1][0] + 0.4]
            ys = [p[1] for p in budget] + [budget[-1][1]]
            ax.plot(xs, ys, color=BUDGET, lw=1, ls="--", drawstyle="steps-post")
        if panel.reference is not None:
            ax.axhline(panel.reference, color=BUDGET if panel.reference_label == "budget"
                       else "#888888", lw=1, ls=":")
        for x, label, cls in plot.marks:
            ax.axvline(x, color=plot.colors.get(cls, "#333333"), lw=1, ls="--", alpha=0.8)
            if i == 0:
                ax.annotate(label, (x, 1.0), xycoords=("data", "axes fraction"),
                            xytext=(2, -2), textcoords="offset points", fontsize=6,
                            va="top", rotation=90, color=plot.colors.get(cls, "#333333"))
        notes = [f"dashed: {panel.budget_label}"] if budget else []
        if panel.reference is not None:
            notes.append(f"dotted: {panel.reference:g}")
        if floor is not None:
            notes.append(f"\u25bd: 0, drawn at {floor:.0e}")
        if zeros:
            notes.append(f"{zeros} zero(s) left out")
        title = panel.title + (f" ({', '.join(notes)})" if notes else "")
        ax.text(0.0, 1.03, title, transform=ax.transAxes, fontsize=7)
        ax.set_xlim(-0.5, max(plot.n_x - 0.5, 0.5))
        ax.xaxis.set_major_locator(FixedLocator(tick_x))
        # Commit ids under the first panel only: the panels share the axis, and tick labels
        # are most of a figure's drawing time.
        ax.xaxis.set_major_formatter(FuncFormatter(
            lambda x, _, labels=tick_labels: labels.get(round(x), "")) if i == 0
            else NullFormatter())
        if panel.log:
            ax.set_yscale("log")
            ax.yaxis.set_minor_locator(NullLocator())
            shown = [y for points in (*panel.lines.values(), panel.budget) for _, y in points
                     if math.isfinite(y) and y > 0] + ([floor] if floor is not None else [])
            if shown and max(shown) < 10 * min(shown):
                # Within one decade, decades alone would leave the axis without a label.
                ax.yaxis.set_major_locator(MaxNLocator(3))
                ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:.2g}"))
            else:
                ax.yaxis.set_major_locator(LogLocator(base=10, numticks=4))
                ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:.0e}"))
        else:
            ax.yaxis.set_major_locator(MaxNLocator(4))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:.4g}"))
        ax.autoscale_view(scalex=False)
        ax.tick_params(axis="x", labelsize=6, rotation=35)
        ax.tick_params(axis="y", labelsize=6.5)
    if len(plot.colors) > 1:  # which line is which device class; budgets say so in titles
        handles, labels = axes[0].get_legend_handles_labels()
        if handles:
            axes[0].legend(handles, labels, fontsize=6, loc="lower left", frameon=False,
                           ncols=min(len(labels), 4))
    return svg_text(fig)
