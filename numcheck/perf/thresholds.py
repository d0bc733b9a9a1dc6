"""Speed thresholds from evidence: K runs' speedups in, a proposed ``speedup_min`` out.

``pytest --numcheck --numcheck-perf --numcheck-calibrate-speed=K`` times each selected
check K times (:mod:`numcheck.plugin.calibration`) and hands the K point speedups to
:func:`propose_speedup_min`. Pure: no clock, no torch, so the rule is tested on synthetic
samples.

The rule (docs/speed.md, "Setting thresholds"):

- an honest variant gets ``threshold = q_low x (1 - margin)``, rounded down to three
  significant digits, where ``q_low`` is the lower ``quantile`` of the K speedups (with
  K < 10 and the default 0.1, the slowest run). One run's figure is not evidence: the
  spread between runs is what a threshold must clear, and the margin leaves the gate's
  interval room to sit wholly above it;
- no gate where ``q_low`` is within ``band`` of 1 (or below): a gain that small is not
  told apart from run-to-run noise, so gating it makes a gate that is red at random;
- a known-bad variant (its case ``expect``\\s ``perf.speedup_min`` to fail) is never given
  a threshold it would pass: its current one is kept when every run misses it by the
  margin, else the proposal is the upper ``1 - quantile`` speedup x (1 + margin), rounded
  up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Defaults of the rule: 5% margin, no gate within 5% of 1, the 10th percentile.
MARGIN = 0.05
BAND = 0.05
QUANTILE = 0.1


@dataclass(frozen=True)
class SpeedProposal:
    """A proposed ``speedup_min`` (None: do not gate) and the one-line reason."""

    threshold: float | None
    reason: str
    #: The current threshold is kept as it is (a known-bad variant it still catches).
    keep: bool = False


def round_down(x: float, digits: int = 3) -> float:
    """Round down to ``digits`` significant digits (``1.0517 -> 1.05``, ``11.14 -> 11.1``)."""
    if x <= 0:
        return 0.0
    exp = math.floor(math.log10(x)) - (digits - 1)
    return math.floor(round(x / 10**exp, 6)) * 10**exp


def round_up(x: float, digits: int = 3) -> float:
    """Round up to ``digits`` significant digits (``1.0531 -> 1.06``, ``1.0 -> 1.0``)."""
    if x <= 0:
        return 0.0
    exp = math.floor(math.log10(x)) - (digits - 1)
    return math.ceil(round(x / 10**exp, 6)) * 10**exp


def propose_speedup_min(
    speedups: Sequence[float],
    *,
    margin: float = MARGIN,
    band: float = BAND,
    quantile: float = QUANTILE,
    expected_fail: bool = False,
    current: float | None = None,
) -> SpeedProposal:
    """The ``speedup_min`` that K runs' point speedups support (module docstring).

    ``expected_fail``: the variant is known-bad for the speed gate; ``current`` is the
    threshold the case file holds now for this device class.
    """
    data = np.asarray(list(speedups), dtype=np.float64)
    if data.size == 0:
        raise ValueError("propose_speedup_min: no speedups")
    if not np.isfinite(data).all() or (data <= 0).any():
        raise ValueError(f"propose_speedup_min: speedups must be finite and > 0, got {list(data)}")
    if not (0 <= margin < 1 and 0 <= band < 1 and 0 <= quantile <= 0.5):
        raise ValueError("propose_speedup_min: margin, band in [0, 1), quantile in [0, 0.5]")
    low = float(np.quantile(data, quantile, method="lower"))
    high = float(np.quantile(data, 1 - quantile, method="higher"))
    if expected_fail:
        needed = high * (1 + margin)
        if current is not None and current >= needed:
            return SpeedProposal(current, f"known-bad: every run misses {current:g} by the "
                                 f"margin ({high:.3f} x {1 + margin:g} <= {current:g}): kept",
                                 keep=True)
        return SpeedProposal(round_up(needed), f"known-bad: above its runs ({high:.3f} x "
                             f"{1 + margin:g}), so it keeps failing")
    if low < 1 + band:
        where = "below 1" if low < 1 - band else f"within {band:.0%} of 1"
        return SpeedProposal(None, f"not gated: lower speedup {low:.3f} is {where}")
    threshold = round_down(low * (1 - margin))
    return SpeedProposal(threshold, f"lower speedup {low:.3f} x {1 - margin:g}")
