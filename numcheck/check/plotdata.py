"""Compact plot data of one check, kept in its report record (``plots``).

The HTML report (:mod:`numcheck.report.htmlpage`) draws a check's error distribution and
its top-k flips from the record alone, so a saved ``--numcheck-report`` file can be turned into
HTML later without the tensors. What is stored must therefore be small and complete:

- ``errors``: per output, counts of ``|actual - golden|`` in log-spaced bins (four per
  decade on one fixed grid, so seeds add up bin by bin), the exact zeros and the non-finite
  positions apart, plus the 10/50/90th percentiles of ``|golden|`` and the unit roundoff
  behind the honest-rounding reference (``u * |golden|``: what rounding the result once to
  the variant's precision would cost).
- ``flips``: per top-k output, every flipped token's ``(golden score - k-th score)`` in
  units of its row's tie band, counted in fixed symmetric bins by direction. A count in
  ``|m| <= 1`` is a near-tie the gate forgives; beyond it, a flip precision cannot explain.

A record's ``plots`` is a few hundred numbers whatever the output size. Layout:
docs/report.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from numcheck.numerics.topk import row_tolerance, topk_agreement
from numcheck.precision import UNIT_ROUNDOFF, PureCache, rounding_unit, tensor_digest

if TYPE_CHECKING:
    from numcheck.goldens.case_golden import CaseGolden

#: Bins per decade of |error|; bin k holds errors in [10**(k/B), 10**((k+1)/B)).
BINS_PER_DECADE = 4

#: Edges of |margin| / tie band for the flip bins (the last bin is open-ended).
FLIP_EDGES: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0)
#: |golden|'s quantiles by the stored output's digest: sorted once, not once per variant.
_GOLDEN_QUANTILES = PureCache(64)


def unit_roundoff(precision: str | None, dtype: torch.dtype) -> float:
    """The coarser of the precision class's and the output dtype's unit roundoff
    (:func:`numcheck.precision.rounding_unit`); an unknown class counts the dtype alone.

    A bf16 variant with an fp32 output still rounded its products to bf16; an fp32 variant
    with a bf16 output rounded its result to bf16: either way the coarser one is honest.
    """
    if precision in UNIT_ROUNDOFF:
        return rounding_unit(precision, dtype)
    return torch.finfo(dtype).eps / 2 if dtype.is_floating_point else 0.0


@dataclass
class ErrorHistogram:
    """``errors`` of one output (module docstring): ``counts[i]`` errors in bin ``k0 + i``."""

    n: int
    zeros: int
    nonfinite: int
    k0: int
    counts: list[int]
    per_decade: int
    golden_abs: list[float]
    unit_roundoff: float
    sampled: bool


@dataclass
class FlipHistogram:
    """``flips`` of a top-k output (module docstring): per direction (``out``, ``in``,
    ``out_neg``, ``in_neg``) the count in each bin of ``edges``."""

    edges: list[float]
    counts: dict[str, list[int]]
    masked: int
    n_flips: int
    band: float
    band_kind: str


@dataclass
class Plots:
    """A check's plot data: per output its error histogram, per top-k output its flips."""

    errors: dict[str, ErrorHistogram]
    flips: dict[str, FlipHistogram] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The record's ``plots`` section (docs/report.md): a flip histogram's counts by
        direction beside its edges; no ``flips`` without a top-k output."""
        out: dict[str, Any] = {"errors": {name: asdict(h) for name, h in self.errors.items()}}
        if self.flips:
            out["flips"] = {name: {**{k: v for k, v in asdict(f).items() if k != "counts"},
                                   **f.counts} for name, f in self.flips.items()}
        return out


def error_histogram(
    actual: torch.Tensor, expected: torch.Tensor, *, roundoff: float, sampled: bool = False
) -> ErrorHistogram:
    """Log-binned ``|actual - expected|`` of one output of one seed (both any float dtype)."""
    a = actual.detach().to("cpu", torch.float64).reshape(-1)
    e = expected.detach().to("cpu", torch.float64).reshape(-1)
    finite = torch.isfinite(a) & torch.isfinite(e)
    err = (a[finite] - e[finite]).abs()
    positive = err[err > 0]
    k0, counts = 0, []
    if positive.numel():
        k = torch.floor(torch.log10(positive) * BINS_PER_DECADE).to(torch.int64)
        k0 = int(k.min())
        counts = [int(c) for c in torch.bincount(k - k0).tolist()]
    key = tensor_digest(expected) if bool(finite.all()) else None  # all of it: same per variant
    q: Any = _GOLDEN_QUANTILES.get(key) or _quantiles(e[finite].abs())
    _GOLDEN_QUANTILES.put(key, q)
    return ErrorHistogram(int(a.numel()), int((err == 0).sum()), int((~finite).sum()), k0,
                          counts, BINS_PER_DECADE, list(q), roundoff, sampled)


def _quantiles(values: torch.Tensor) -> list[float]:
    if values.numel() == 0:
        return [0.0, 0.0, 0.0]
    # float64 quantile on at most ~1M values: a strided subsample keeps it cheap and fixed.
    step = max(1, values.numel() // 1_000_000)
    q = torch.quantile(values[::step], torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64))
    return [float(x) for x in q.tolist()]


def merge_histograms(hists: Sequence[ErrorHistogram]) -> ErrorHistogram | None:
    """Add the seeds' histograms of one output bin by bin (same grid); None for none."""
    if not hists:
        return None
    filled = [h for h in hists if h.counts]
    k0 = min((h.k0 for h in filled), default=0)
    counts = [0] * (max((h.k0 + len(h.counts) for h in filled), default=0) - k0)
    for h in filled:
        for i, c in enumerate(h.counts):
            counts[h.k0 - k0 + i] += c
    # Percentiles of |golden| do not add up; the widest range over seeds is the honest one.
    golden_abs = [min(h.golden_abs[0] for h in hists),
                  sorted(h.golden_abs[1] for h in hists)[len(hists) // 2],
                  max(h.golden_abs[2] for h in hists)]
    return replace(hists[0], n=sum(h.n for h in hists), zeros=sum(h.zeros for h in hists),
                   nonfinite=sum(h.nonfinite for h in hists), k0=k0, counts=counts,
                   golden_abs=golden_abs, sampled=any(h.sampled for h in hists))


def flip_histogram(
    golden_idx: torch.Tensor,
    variant_idx: torch.Tensor,
    golden_scores: torch.Tensor,
    *,
    band: float,
    band_kind: str,
) -> FlipHistogram:
    """Every flipped token's distance to its row's k-th golden score, in tie bands.

    Uses :func:`numcheck.numerics.topk.topk_agreement` with a zero band, which lists every flip not
    exactly at the k-th score (with its margin) and counts the rest; the row's band width
    comes from :func:`numcheck.numerics.topk.row_tolerance`, the same one the gate uses.
    """
    scores = golden_scores.detach().to("cpu")
    report = topk_agreement(golden_idx, variant_idx, scores, band=0.0, band_kind="abs",
                            max_flips=golden_idx.numel() + variant_idx.numel())
    tol = row_tolerance(scores, band, band_kind)
    counts = {key: [0] * len(FLIP_EDGES) for key in ("out", "in", "out_neg", "in_neg")}
    # A flip exactly at the k-th score: "out" by convention (its direction is not kept).
    counts["out"][0] += report.n_flips - report.n_unexplained  # margin exactly 0
    masked = 0
    for f in report.unexplained:
        if not math.isfinite(f.margin):
            masked += 1
            continue
        width = float(tol[f.row])
        m = abs(f.margin) / width if width > 0 else math.inf
        i = max(j for j, edge in enumerate(FLIP_EDGES) if m >= edge)
        counts[f.direction + ("_neg" if f.margin < 0 else "")][i] += 1
    return FlipHistogram(list(FLIP_EDGES), counts, masked, report.n_flips, band, band_kind)


def merge_flips(flips: Sequence[FlipHistogram]) -> FlipHistogram | None:
    """Add the seeds' flip histograms (same edges); None for none."""
    if not flips:
        return None
    return replace(flips[0], counts={key: [sum(f.counts[key][i] for f in flips)
                                           for i in range(len(FLIP_EDGES))]
                                     for key in flips[0].counts},
                   masked=sum(f.masked for f in flips), n_flips=sum(f.n_flips for f in flips))


def check_plots(
    op: Any, precision: str | None, seeds: Sequence[Any], golden: CaseGolden
) -> Plots | None:
    """The plot data of a check, from the outputs each seed kept.

    ``seeds`` are the runner's seed results (with ``outputs``); ``golden`` the case's golden
    as validated for the check (:class:`numcheck.goldens.case_golden.CaseGolden`). None when
    no seed kept its outputs (e.g. a perf-only check).
    """
    errors: dict[str, list[ErrorHistogram]] = {}
    flips: list[FlipHistogram] = []
    for s in seeds:
        outputs = getattr(s, "outputs", None)
        if not outputs:
            continue
        for name, t in outputs.items():
            if (op.topk is not None and name == op.topk.indices) or not t.dtype.is_floating_point:
                continue  # a selection, or integer outputs: no error histogram
            pair = golden.output(s.seed, name).pair(t)
            errors.setdefault(name, []).append(error_histogram(
                pair.actual, pair.expected, roundoff=unit_roundoff(precision, t.dtype),
                sampled=pair.sampled))
        if op.topk is not None and s.topk is not None and op.topk.indices in outputs:
            flips.append(flip_histogram(
                golden.output(s.seed, op.topk.indices).values,
                outputs[op.topk.indices].detach().cpu(),
                golden.output(s.seed, op.topk.scores).values,
                band=s.topk.band, band_kind=s.topk.band_kind,
            ))
    merged = {name: m for name, h in errors.items() if (m := merge_histograms(h)) is not None}
    flip = merge_flips(flips)
    if not errors and flip is None:
        return None
    return Plots(merged, {} if flip is None else {op.topk.indices: flip})
