"""The stopping rule on synthetic samples and a fake clock: error rates, power, the cap."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from numcheck.perf.sequential import (
    DECIDED,
    LOOK_CAP,
    NARROW,
    TIME_CAP,
    StoppingRule,
    median_interval,
    min_pairs,
    run,
    simulate,
)
from numcheck.perf.speedup import FAIL, NOT_GATED, PASS, UNDECIDED

RULE = StoppingRule()  # the defaults the case files get


def test_each_look_spends_its_share_of_the_error_rate() -> None:
    assert RULE.look_confidence == pytest.approx(1 - 0.05 / 8)
    assert min_pairs(RULE.look_confidence) == 9  # [min, max] of 9 covers with 1 - 2/512
    assert min_pairs(0.95) == 6


def test_order_statistic_interval_has_its_coverage() -> None:
    # 200 seeded samples of size 50 from a skewed distribution with median 1: the 95%
    # interval misses the true median in at most ~5% (exact binomial bound; it is conservative).
    gen = np.random.default_rng(3)
    misses = 0
    for _ in range(200):
        x = np.exp(0.1 * gen.standard_normal(50)) ** 3  # lognormal: median exactly 1
        est = median_interval(x, 0.95)
        misses += not est.low <= 1.0 <= est.high
    assert misses / 200 <= 0.07
    small = median_interval([1.0, 2.0, 3.0], 0.99)
    assert (small.low, small.high) == (0.0, float("inf"))  # too few for 99%: no interval yet
    with pytest.raises(ValueError, match="no samples"):
        median_interval([], 0.95)


@pytest.mark.parametrize(("n", "confidence", "rank"), [
    (6, 0.95, 1), (20, 0.95, 6), (30, 0.95, 10), (50, 0.95, 18), (20, 0.99, 4),
])
def test_the_interval_takes_the_textbook_ranks(n: int, confidence: float, rank: int) -> None:
    # The distribution-free confidence interval of a median (sign-test tables): for n = 20 at
    # 95%, [x_(6), x_(15)].
    est = median_interval(np.arange(1.0, n + 1), confidence)
    assert (est.low, est.high) == (rank, n + 1 - rank)


@pytest.mark.parametrize("confidence", [0.8, 0.95, 1 - 0.05 / 8, 0.999])
def test_the_rank_is_the_exact_binomial_one(confidence: float) -> None:
    # l is the largest rank with P(B <= l - 1) <= alpha / 2, B ~ Binomial(n, 1/2), checked
    # here in exact fractions: the coverage the gate claims, with nothing rounded.
    alpha = Fraction(round(1 - confidence, 12))

    for n in (*range(1, 120), 160, 320, 640, 1280, 2560):  # and every look size of 20 * 2^k
        low = median_interval(np.arange(1.0, n + 1), confidence).low
        rank = 0 if low == 0.0 else int(low)
        below = sum(math.comb(n, i) for i in range(rank))  # 2^n P(B <= rank - 1)
        assert Fraction(below, 2**n) <= alpha / 2 < Fraction(below + math.comb(n, rank), 2**n)


def fake_draw(speedup: float, noise: float, seed: int = 0):  # type: ignore[no-untyped-def]
    gen = np.random.default_rng(seed)
    spent = [0.0]

    def draw(n: int) -> tuple[list[float], list[float]]:
        ref = 1e-3 * np.exp(noise * gen.standard_normal(n))
        var = 1e-3 / speedup * np.exp(noise * gen.standard_normal(n))
        spent[0] += float(ref.sum() + var.sum())
        return ref.tolist(), var.tolist()

    return draw, lambda: spent[0]


def test_a_clear_speedup_stops_at_the_first_look() -> None:
    draw, clock = fake_draw(1.3, 0.01)
    out = run(draw, clock, RULE, 1.1)
    assert (out.decision.verdict, out.stopped, out.looks) == (PASS, DECIDED, 1)
    assert len(out.reference) == len(out.variant) == 20
    assert "lower bound" in out.decision.reason and "20 pairs" in out.decision.reason


def test_a_close_call_takes_more_looks_and_still_decides() -> None:
    draw, clock = fake_draw(1.02, 0.03)
    out = run(draw, clock, RULE, 1.0)
    assert out.decision.verdict == PASS and out.looks > 1
    assert [n for n, _, _ in out.history] == [20 * 2**k for k in range(out.looks)]


def test_at_the_threshold_it_stops_at_the_cap_undecided_and_says_what_to_change() -> None:
    draw, clock = fake_draw(1.05, 0.03, seed=4)
    rule = StoppingRule(max_time_s=0.3)
    out = run(draw, clock, rule, 1.05)
    assert (out.decision.verdict, out.stopped) == (UNDECIDED, TIME_CAP)
    assert out.elapsed_s <= 0.3  # the look that would pass the cap is never drawn
    reason = out.decision.reason
    assert reason.startswith("undecided at the time cap (max_time_s = 0.3): the interval [")
    assert "still contains the threshold 1.05" in reason
    assert "raise max_time_s" in reason and "cuda_graph = true" in reason
    assert "move speedup_min away from the measured 1.0" in reason


def test_look_cap() -> None:
    draw, clock = fake_draw(1.0, 0.05, seed=1)
    out = run(draw, clock, StoppingRule(max_looks=2, max_time_s=100), 1.0)
    assert (out.decision.verdict, out.stopped, out.looks) == (UNDECIDED, LOOK_CAP, 2)
    assert "look cap (max_looks = 2)" in out.decision.reason


def test_min_time_keeps_sampling_without_spending_looks() -> None:
    draw, clock = fake_draw(1.3, 0.01)
    out = run(draw, clock, StoppingRule(min_time_s=0.2), 1.1)
    assert out.decision.verdict == PASS and out.looks == 1 and out.elapsed_s >= 0.2


def test_ungated_stops_when_narrow_or_says_too_noisy() -> None:
    draw, clock = fake_draw(1.2, 0.005)
    out = run(draw, clock, RULE, None)
    assert (out.decision.verdict, out.stopped) == (NOT_GATED, NARROW)
    assert "reported, not gated" in out.decision.reason
    draw, clock = fake_draw(1.2, 0.5)
    out = run(draw, clock, StoppingRule(max_time_s=0.1), None)
    assert (out.decision.verdict, out.stopped) == (NOT_GATED, TIME_CAP)
    assert out.decision.reason.startswith("too noisy on this machine: interval [")


def test_a_clear_slowdown_fails() -> None:
    draw, clock = fake_draw(0.9, 0.02)
    out = run(draw, clock, RULE, 1.0)
    assert out.decision.verdict == FAIL and "even the upper bound" in out.decision.reason


# The simulation behind docs/speed.md's table (benchmarks/speed/sequential_sim.py runs it with
# more trials). Seeded, so these are exact counts, and cheap: 200 trials each.


@pytest.mark.parametrize("heavy_tail", [0.0, 0.05])
def test_false_decision_rate_at_the_threshold_is_within_alpha(heavy_tail: float) -> None:
    # The true speedup equals the threshold: any pass or fail is a false decision.
    sim = simulate(1.05, 1.05, noise=0.03, trials=200, rule=StoppingRule(max_time_s=3),
                   seed=11, heavy_tail=heavy_tail)
    assert sim.rate(PASS) + sim.rate(FAIL) <= 0.05
    assert sim.rate(PASS) <= 0.035  # one side: (1 - c) / 2 = 2.5% nominal, plus sampling error


def test_a_correct_variant_just_above_its_threshold_is_never_failed() -> None:
    sim = simulate(1.10, 1.05, noise=0.03, trials=200, rule=RULE, seed=12, heavy_tail=0.02)
    assert sim.failed == 0 and sim.rate(PASS) >= 0.99


def test_power_a_five_percent_slowdown_is_caught() -> None:
    # A variant that should clear 1.10 but lost 5% (1.10 -> 1.045): failed nearly always.
    sim = simulate(1.10 * 0.95, 1.08, noise=0.03, trials=200, rule=RULE, seed=13,
                   heavy_tail=0.02)
    assert sim.passed == 0 and sim.rate(FAIL) >= 0.95
