"""speedup_min proposals from K runs' point speedups (synthetic samples, no clock)."""

from __future__ import annotations

import numpy as np
import pytest

from numcheck.perf.sequential import StoppingRule, interim
from numcheck.perf.speedup import PASS, SpeedupEstimate
from numcheck.perf.thresholds import propose_speedup_min, round_down, round_up


@pytest.mark.parametrize(("x", "down", "up"), [(1.0517, 1.05, 1.06), (11.14, 11.1, 11.2),
                                               (1.0, 1.0, 1.0), (0.9975, 0.997, 0.998)])
def test_rounding_to_three_digits(x: float, down: float, up: float) -> None:
    assert round_down(x) == pytest.approx(down) and round_up(x) == pytest.approx(up)


def test_threshold_is_the_slowest_run_less_the_margin() -> None:
    p = propose_speedup_min([1.22, 1.20, 1.25, 1.21, 1.23])
    assert p.threshold == pytest.approx(1.14)  # 1.20 x 0.95 = 1.140
    assert p.reason == "lower speedup 1.200 x 0.95"
    assert propose_speedup_min([1.20, 1.22], margin=0.10).threshold == pytest.approx(1.08)


def test_quantile_drops_one_outlier_of_twenty() -> None:
    runs = [1.30] * 19 + [0.9]  # one run hit by a noisy neighbour
    assert propose_speedup_min(runs).threshold == pytest.approx(1.23)  # 1.30 x 0.95 = 1.235
    # With under ten runs the lower quantile is the slowest run: the outlier decides.
    assert propose_speedup_min([1.30] * 4 + [0.9]).threshold is None


@pytest.mark.parametrize("runs", [[1.03, 1.04, 1.06], [0.98, 1.01, 1.02], [0.7, 0.72, 0.71]])
def test_no_gate_near_or_below_one(runs: list[float]) -> None:
    p = propose_speedup_min(runs)
    assert p.threshold is None and p.reason.startswith("not gated: lower speedup")


def test_known_bad_gets_a_threshold_it_fails() -> None:
    runs = [1.003, 1.002, 1.004]
    p = propose_speedup_min(runs, expected_fail=True)
    assert p.threshold == pytest.approx(1.06)  # 1.004 x 1.05 = 1.0542, rounded up
    assert all(s < p.threshold for s in runs)
    # A current threshold that every run misses by the margin is kept as it is...
    kept = propose_speedup_min(runs, expected_fail=True, current=1.1)
    assert (kept.threshold, kept.keep) == (1.1, True)
    # ...one it (nearly) passes is replaced by one it fails.
    raised = propose_speedup_min(runs, expected_fail=True, current=1.0)
    assert raised.threshold == pytest.approx(1.06) and not raised.keep


def test_proposals_pass_the_runs_they_came_from() -> None:
    # Each of K runs: a decided interval around its point; the proposal passes every one.
    rng = np.random.default_rng(0)
    for _ in range(200):
        true = rng.uniform(1.1, 3.0)
        points = true * (1 + rng.normal(0, 0.01, size=5))
        p = propose_speedup_min(points)
        assert p.threshold is not None
        for s in points:
            est = SpeedupEstimate(s, s * 0.97, s * 1.03, 0.95, 30)
            assert interim(est, p.threshold, StoppingRule()) == PASS


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [0.0, 1.0]])
def test_bad_samples_are_errors(bad: list[float]) -> None:
    with pytest.raises(ValueError, match="propose_speedup_min"):
        propose_speedup_min(bad)
