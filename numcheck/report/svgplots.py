"""The HTML report's plots, drawn with matplotlib as static SVG (the ``html`` extra).

Why matplotlib: it is the most widely kept Python plotting library, it writes SVG with no
JavaScript and no fonts or scripts to fetch, so a plot is a few kilobytes of vector text
that renders offline in any browser and in CI artifacts; plotly would inline ~3.5 MB of
JavaScript per report. Only the object API is used (``Figure``, never ``pyplot``): no global
state, no display backend, safe inside a pytest run.

Every function takes the compact data a report record carries (:mod:`numcheck.check.plotdata`)
and returns an SVG document as text. Nothing here reads tensors.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

#: Colours: the variant's errors, the budget, the honest-rounding reference, the tie band.
ERROR, BUDGET, HONEST, TIE, OUT_OF_BAND = "#4c72b0", "#c44e52", "#55a868", "#dddddd", "#c44e52"


def available() -> bool:
    """True when matplotlib can be imported (the ``html`` extra is installed)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(width: float = 6.0, height: float = 2.4) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.2, top=0.88)
    return fig


def _log_x(ax: Any) -> None:
    """A log x axis labelled ``1e-05`` style: mathtext labels cost most of a plot's time."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10, numticks=8))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:.0e}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def svg_text(fig: Any) -> str:
    """A figure as an SVG document (the history page's plots are written the same way)."""
    import matplotlib

    buf = io.StringIO()
    # Text stays text (no glyph outlines: smaller files), and a fixed hash salt and no
    # date make the same data give the same bytes.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "numcheck"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def error_histogram(
    hist: Mapping[str, Any], budget: Mapping[str, Any] | None, *, output: str,
    honest: float | None = None,
) -> str:
    """``|error|`` counts on a log axis, with the budget band and honest rounding marked.

    The band of ``frac_outside`` is ``atol + rtol * |golden|`` and honest rounding is
    ``u * |golden|``; both depend on the element, so each is shaded over the 10th-90th
    percentile of ``|golden|`` with a line at the median. A ``max_abs`` budget is a line.
    ``honest`` (an absolute error figure a record may carry) replaces ``u * |golden|``.
    """
    fig = _figure()
    ax = fig.add_subplot()
    per = int(hist["per_decade"])
    k0, counts = int(hist["k0"]), list(hist["counts"])
    if counts:
        edges = [10 ** ((k0 + i) / per) for i in range(len(counts) + 1)]
        ax.stairs(counts, edges, fill=True, color=ERROR, alpha=0.8, label="|variant - golden|")
        _log_x(ax)
    g10, g50, g90 = (float(x) for x in hist.get("golden_abs", (0.0, 0.0, 0.0)))
    if honest is not None:
        ax.axvline(honest, color=HONEST, lw=1.5, ls="--", label="honest rounding")
    else:
        u = float(hist.get("unit_roundoff") or 0.0)
        if u > 0 and g90 > 0:
            ax.axvspan(max(u * g10, u * g90 * 1e-3), u * g90, color=HONEST, alpha=0.18, lw=0)
            ax.axvline(u * g50 if g50 > 0 else u * g90, color=HONEST, lw=1.5, ls="--",
                       label=f"honest rounding u·|golden| (u = 2^{round(math.log2(u))})")
    if budget:
        atol, rtol = float(budget.get("atol") or 0.0), float(budget.get("rtol") or 0.0)
        if atol > 0 or rtol > 0:
            lo, mid, hi = (atol + rtol * g for g in (g10, g50, g90))
            ax.axvspan(lo, hi, color=BUDGET, alpha=0.12, lw=0)
            ax.axvline(mid, color=BUDGET, lw=1.5,
                       label=f"budget band atol + rtol·|golden| ({atol:g} + {rtol:g}·|g|)")
        max_abs = budget.get("max_abs")
        if isinstance(max_abs, (int, float)) and math.isfinite(max_abs) and max_abs > 0:
            ax.axvline(float(max_abs), color=BUDGET, lw=1.5, ls=":", label=f"max_abs {max_abs:g}")
    extra = []
    if hist.get("zeros"):
        extra.append(f"{hist['zeros']} exact")
    if hist.get("nonfinite"):
        extra.append(f"{hist['nonfinite']} non-finite (masked)")
    sampled = " (sampled positions)" if hist.get("sampled") else ""
    ax.set_title(f"{output}: |error| of {hist['n']} elements{sampled}"
                 + (f"; {', '.join(extra)} not shown" if extra else ""), fontsize=9)
    ax.set_xlabel("|variant - golden|", fontsize=8)
    ax.set_ylabel("elements", fontsize=8)
    ax.tick_params(labelsize=7)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", frameon=False)
    return svg_text(fig)


def flip_histogram(flips: Mapping[str, Any], *, output: str) -> str:
    """Flipped tokens by ``(golden score - k-th score) / tie band``, the band shaded.

    Bars left of zero are tokens the golden scored below its k-th score; bars inside the
    shaded band are near-ties the gate forgives.
    """
    edges: Sequence[float] = flips["edges"]
    labels, outs, ins, in_band = [], [], [], []
    n = len(edges)
    for i in reversed(range(n)):  # negative side, far to near
        hi = "inf" if i == n - 1 else f"{edges[i + 1]:g}"
        labels.append(f"-{hi}..-{edges[i]:g}" if edges[i] else f"-{hi}..0")
        outs.append(flips["out_neg"][i])
        ins.append(flips["in_neg"][i])
        in_band.append(edges[i] < 1.0)
    for i in range(n):
        hi = "inf" if i == n - 1 else f"{edges[i + 1]:g}"
        labels.append(f"{edges[i]:g}..{hi}")
        outs.append(flips["out"][i])
        ins.append(flips["in"][i])
        in_band.append(edges[i] < 1.0)
    fig = _figure(6.4, 2.6)
    ax = fig.add_subplot()
    x = list(range(len(labels)))
    band = [i for i, b in enumerate(in_band) if b]
    if band:
        ax.axvspan(min(band) - 0.5, max(band) + 0.5, color=TIE, lw=0, label="tie band")
    ax.bar(x, outs, color=ERROR, label="dropped (golden picked it)")
    ax.bar(x, ins, bottom=outs, color=OUT_OF_BAND, label="added (golden did not)")
    ax.set_xticks(x, labels, rotation=60, fontsize=6)
    ax.set_xlabel("(golden score - k-th score) / tie band", fontsize=8)
    ax.set_ylabel("tokens", fontsize=8)
    within = sum(o + i for o, i, b in zip(outs, ins, in_band, strict=True) if b)
    total = int(flips["n_flips"])
    masked = f", {flips['masked']} masked" if flips.get("masked") else ""
    band_text = (f"{flips['band']:g} of the row's max |score|" if flips["band_kind"] == "rel"
                 else f"{flips['band']:g}")
    ax.set_title(f"{output}: {total} flipped tokens, {within} within the tie band "
                 f"({band_text}){masked}", fontsize=9)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    return svg_text(fig)


def speedup_interval(timing: Mapping[str, Any]) -> str:
    """The speedup and its confidence interval against the threshold and 1.0."""
    fig = _figure(6.0, 1.3)
    ax = fig.add_subplot()
    s = float(timing["speedup"])
    lo, hi = timing.get("ci_low"), timing.get("ci_high")
    lo = s if lo is None else float(lo)
    hi = s if hi is None else float(hi)
    ax.errorbar([s], [0], xerr=[[s - lo], [hi - s]], fmt="o", color=ERROR, capsize=6,
                label=f"speedup {s:.3f}x [{lo:.3f}, {hi:.3f}]")
    ax.axvline(1.0, color="#888888", lw=1, ls=":", label="1.0 (no gain)")
    threshold = timing.get("speedup_min")
    if isinstance(threshold, (int, float)) and math.isfinite(threshold):
        ax.axvline(float(threshold), color=BUDGET, lw=1.5, label=f"speedup_min {threshold:g}")
    values = [v for v in (lo, hi, 1.0, threshold) if isinstance(v, (int, float))]
    span = max(values) - min(values) or 0.1
    ax.set_xlim(min(values) - 0.15 * span, max(values) + 0.15 * span)
    ax.set_yticks([])
    ax.set_xlabel(f"reference time / variant time (timer: {timing.get('timer', '?')})",
                  fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper left", frameon=False, ncols=3,
              bbox_to_anchor=(0, 1.35))
    return svg_text(fig)
