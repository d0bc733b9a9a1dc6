"""Statistics of the speedup gate, on synthetic timing samples (no clocks)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from numcheck.numerics.verdict import Violation, worst
from numcheck.perf.limits import violations
from numcheck.perf.speedup import (
    FAIL,
    NOT_GATED,
    PASS,
    UNDECIDED,
    Decision,
    SpeedupEstimate,
    paired_ratios,
    speedup_interval,
    summarize,
)


def synthetic(ratio: float, noise: float, rounds: int, seed: int = 0) -> tuple[list[float], list[float]]:
    """Reference ~1 ms with common drift; the variant ``ratio`` times faster, own noise."""
    gen = np.random.default_rng(seed)
    drift = 1e-3 * (1 + 0.3 * np.sin(np.arange(rounds) / 3))  # cancels in the paired ratio
    ref = drift * np.exp(noise * gen.standard_normal(rounds))
    var = drift / ratio * np.exp(noise * gen.standard_normal(rounds))
    return ref.tolist(), var.tolist()


def test_summarize_gives_median_and_iqr() -> None:
    s = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.n, s.median, s.q1, s.q3, s.min, s.max) == (5, 3.0, 2.0, 4.0, 1.0, 5.0)
    assert s.iqr == 2.0 and s.rel_iqr == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="no samples"):
        summarize([])


def test_paired_ratios_rejects_unpaired_or_zero_times() -> None:
    assert paired_ratios([2.0, 3.0], [1.0, 1.5]).tolist() == [2.0, 2.0]
    with pytest.raises(ValueError, match="equal-length"):
        paired_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="> 0"):
        paired_ratios([1.0], [0.0])


def test_interval_covers_the_true_speedup_and_is_reproducible() -> None:
    ref, var = synthetic(1.25, noise=0.03, rounds=40)
    est = speedup_interval(ref, var, confidence=0.95, seed=7)
    assert est.low < 1.25 < est.high
    assert est.low <= est.median <= est.high
    assert est.rel_width < 0.05
    assert speedup_interval(ref, var, confidence=0.95, seed=7) == est


def test_drift_common_to_a_pair_cancels() -> None:
    # Times drift by 30% over the run; the paired ratio stays exact.
    ref, var = synthetic(2.0, noise=0.0, rounds=20)
    est = speedup_interval(ref, var)
    assert est.median == pytest.approx(2.0) and est.low == pytest.approx(2.0)
    assert est.high == pytest.approx(2.0)


def test_higher_confidence_widens_the_interval() -> None:
    ref, var = synthetic(1.2, noise=0.05, rounds=30)
    narrow = speedup_interval(ref, var, confidence=0.8)
    wide = speedup_interval(ref, var, confidence=0.99)
    assert wide.high - wide.low > narrow.high - narrow.low


def est(median: float, low: float, high: float) -> SpeedupEstimate:
    return SpeedupEstimate(median, low, high, 0.95, 30)


def test_undecided_is_never_a_pass_and_has_its_own_metric() -> None:
    e = est(1.12, 1.08, 1.16)
    (v,) = violations(e, Decision(UNDECIDED, 1.1, "undecided at the time cap"))
    assert v.key == "perf.speedup_undecided"
    e = est(1.0, 0.98, 1.02)
    (v,) = violations(e, Decision(FAIL, 1.1, "slower"), "reference median 1 ms")
    assert v.key == "perf.speedup_min" and v.value == 0.98 and v.limit == 1.1
    assert v.describe().startswith(
        "perf.speedup_min = 0.98 < budget 1.1: speedup 1.000x [0.980, 1.020] (95% CI, 30 pairs)"
    )
    assert v.describe().endswith("; reference median 1 ms")
    assert violations(e, Decision(PASS, 1.1, "ok")) == []
    assert violations(e, Decision(NOT_GATED, None, "reported")) == []


def test_noise_warning_only_when_the_aa_figure_is_far_from_one() -> None:
    from numcheck.perf.noise import noise_warning

    quiet = {"aa_speedup": 1.0, "aa_ci_low": 0.998, "aa_ci_high": 1.003, "clocks": None}
    assert noise_warning(quiet) == "" and noise_warning(None) == ""
    biased = dict(quiet, aa_speedup=1.04, aa_ci_low=1.03, aa_ci_high=1.05)
    assert "gave 1.040x [1.030, 1.050], not 1" in noise_warning(biased)
    wide = dict(quiet, aa_ci_low=0.9, aa_ci_high=1.1)
    assert "wider than 5%" in noise_warning(wide)
    hot = dict(quiet, clocks=[{"index": 0, "throttled": True,
                               "throttle_reasons": ["sw_thermal_slowdown"]}])
    assert "cuda:0 was throttled (sw_thermal_slowdown)" in noise_warning(hot)
    assert "the verdict stands" in noise_warning(hot)


def test_speedup_severity_is_threshold_over_bound() -> None:
    slow = Violation("perf", "speedup_min", 0.5, 1.1, upper=False, kind="speedup")
    recall = Violation("topk", "recall_min", 0.99, 0.995, upper=False)
    assert slow.severity == pytest.approx(2.2)
    assert recall.severity == pytest.approx(2.0)
    assert worst([recall, slow]) is slow
    assert Violation("perf", "speedup_min", 0.0, 1.1, upper=False, kind="speedup").severity == (
        math.inf
    )
