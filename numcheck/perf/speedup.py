"""Statistics of paired timings: medians, spread, the speedup and its confidence interval.

Pure functions over samples in seconds (numpy and scipy only, no torch, no clock), so the
statistics are tested on synthetic samples rather than on wall clocks.

The reference and the variant are timed interleaved (A B B A ...), so round ``i`` gives one
*pair* measured under the same machine state; the speedup samples are the paired ratios
``ref_i / var_i`` and the figure is their median, with a seeded bootstrap interval
(``scipy.stats.bootstrap``). Drift common to both members of a pair cancels in the ratio.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Verdicts of a speedup gate. "undecided" is never a pass: too noisy to decide.
PASS, FAIL, UNDECIDED, NOT_GATED = "pass", "fail", "undecided", "not gated"


@dataclass(frozen=True)
class Summary:
    """Robust summary of one timing series, in seconds."""

    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def rel_iqr(self) -> float:
        """IQR as a fraction of the median: the spread the report shows."""
        return self.iqr / self.median if self.median > 0 else math.inf


def summarize(samples: Sequence[float]) -> Summary:
    """Median, quartiles and range of a non-empty series."""
    data = np.asarray(samples, dtype=np.float64)
    if data.size == 0:
        raise ValueError("summarize: no samples")
    q1, med, q3 = np.percentile(data, [25, 50, 75])
    return Summary(int(data.size), float(med), float(q1), float(q3), float(data.min()),
                   float(data.max()))


@dataclass(frozen=True)
class SpeedupEstimate:
    """The speedup (median of paired ratios ref/var) and its confidence interval: the
    order-statistic interval the gate uses (numcheck.perf.sequential.median_interval), or
    the seeded bootstrap of :func:`speedup_interval`."""

    median: float
    low: float
    high: float
    confidence: float
    rounds: int

    @property
    def rel_width(self) -> float:
        """Interval width as a fraction of the median (how noisy the figure is)."""
        return (self.high - self.low) / self.median if self.median > 0 else math.inf

    def describe(self) -> str:
        """``1.22x [1.19, 1.25] (99.38% CI, 30 pairs)``."""
        return (f"{self.median:.3f}x [{self.low:.3f}, {self.high:.3f}] "
                f"({100 * self.confidence:.4g}% CI, {self.rounds} pairs)")


def paired_ratios(reference: Sequence[float], variant: Sequence[float]) -> np.ndarray:
    """``ref_i / var_i`` for each round; both series must have the same positive length."""
    ref = np.asarray(reference, dtype=np.float64)
    var = np.asarray(variant, dtype=np.float64)
    if ref.shape != var.shape or ref.ndim != 1 or ref.size == 0:
        raise ValueError(
            f"paired_ratios: need two equal-length non-empty series, got {ref.shape} and "
            f"{var.shape}"
        )
    if (var <= 0).any() or (ref <= 0).any():
        raise ValueError("paired_ratios: every time must be > 0 (a timer below its resolution?)")
    return ref / var


def speedup_interval(
    reference: Sequence[float],
    variant: Sequence[float],
    *,
    confidence: float = 0.95,
    seed: int = 0,
    n_resamples: int = 2000,
) -> SpeedupEstimate:
    """Median of the paired ratios with a seeded percentile-bootstrap interval.

    Percentile rather than BCa: BCa's jackknife degenerates (NaN bounds) on medians of
    samples with many equal values, which quantized timers produce. The seed makes the
    interval, and so the gate's verdict, reproducible from the stored samples.
    """
    from scipy import stats  # scipy is only needed when timing is on

    ratios = paired_ratios(reference, variant)
    median = float(np.median(ratios))
    if ratios.size < 3 or np.ptp(ratios) == 0:
        return SpeedupEstimate(median, float(ratios.min()), float(ratios.max()), confidence,
                               int(ratios.size))
    result = stats.bootstrap(
        (ratios,), np.median, confidence_level=confidence, method="percentile",
        n_resamples=n_resamples, rng=np.random.default_rng(seed), vectorized=True,
    )
    ci = result.confidence_interval
    return SpeedupEstimate(median, float(ci.low), float(ci.high), confidence, int(ratios.size))


@dataclass(frozen=True)
class Decision:
    """A speedup gate's verdict and the sentence that explains it."""

    verdict: str
    threshold: float | None
    reason: str

    @property
    def passed(self) -> bool:
        return self.verdict in (PASS, NOT_GATED)
