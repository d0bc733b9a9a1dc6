"""The speedup gate's stopping rule: sample in batches, look, stop as soon as it is decided.

A fixed number of rounds is either too few (a noisy op straddles its threshold: "too noisy
to decide") or too many (a clear 1.2x waits for rounds it does not need). Instead the paired
samples are drawn in looks of growing size (``first_look``, then doubling), and after each
look the speedup interval is computed:

- gated (a threshold): stop with ``pass`` when the interval lies wholly at or above the
  threshold, ``fail`` when it lies wholly below;
- ungated: stop when the interval is narrower than ``target_rel_width`` of the median;
- otherwise draw the next look, unless the next one would pass the time cap
  (``max_time_s``) or the look budget (``max_looks``): then the check ends ``undecided``,
  a failure for a gated check, "too noisy on this machine" for an ungated one.

**Repeated looks.** Looking at a 95% interval after every batch and stopping when it
clears the threshold would be wrong far more often than 5% of the time: each look is
another chance for noise to push the interval over. The rule spends the error rate over the
looks it may take (Bonferroni): with an overall ``confidence`` c and at most ``max_looks``
looks K, every look uses a two-sided interval at ``1 - (1 - c) / K``. By the union bound,
the chance that *any* look's interval misses the true median speedup is at most ``1 - c``,
so a wrong pass (or a wrong fail) happens with probability at most ``(1 - c) / 2`` each,
however the looks turn out. Bonferroni over a handful of looks is simple and needs no
assumption about how the looks are spaced (the time cap may end a check early, which only
makes it more conservative); its price is a slightly wider interval per look
(99.4% instead of 95% for K = 8), which doubling look sizes repay quickly.

**The interval.** The speedup is the median of the paired ratios ``ref_i / var_i``. Its
interval is the distribution-free order-statistic interval of a median: with ``n`` ratios
sorted, ``[r_(l), r_(n+1-l)]`` covers the true median with probability at least
``1 - 2 P(Binomial(n, 1/2) < l)``, for any continuous distribution of ratios. It is exact
(no resampling, so it is cheap at every look and valid far out in the tails that 99.4%
needs) and needs only that pairs are independent draws; drift common to both members of a
pair cancels in the ratio. With too few samples for the asked confidence (fewer than 9 at
99.4%) there is no interval yet, and the rule keeps sampling.

Pure: numpy, and the binomial ranks in exact integer arithmetic (no scipy, nothing rounded);
the clock and the sampler are passed in, so the rule is tested on synthetic samples and a
fake clock (``docs/speed.md`` has the simulation table).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from numcheck.perf.speedup import FAIL, NOT_GATED, PASS, UNDECIDED, Decision, SpeedupEstimate

#: The reason of a check no threshold gates on this device class.
UNGATED = "no speedup_min for this device class: reported, not gated"
#: Why a sequential measurement stopped.
DECIDED, NARROW, TIME_CAP, LOOK_CAP = "decided", "narrow enough", "time cap", "look cap"


@dataclass(frozen=True)
class StoppingRule:
    """When a speedup measurement stops; every field is a ``[case.perf]`` option.

    ``confidence`` holds over all looks together (see the module docstring);
    ``first_look`` pairs come before the first look and each later look doubles the
    count; ``min_time_s`` of timing must pass before a look counts; ``max_time_s`` caps
    one check's timing; ``target_rel_width`` ends an ungated check whose interval is that
    narrow (as a fraction of the median).
    """

    confidence: float = 0.95
    first_look: int = 20
    max_looks: int = 8
    min_time_s: float = 0.0
    max_time_s: float = 5.0
    target_rel_width: float = 0.04

    @property
    def look_confidence(self) -> float:
        """The two-sided confidence of each look: ``1 - (1 - confidence) / max_looks``."""
        return 1.0 - (1.0 - self.confidence) / self.max_looks


def median_interval(ratios: Sequence[float] | np.ndarray, confidence: float) -> SpeedupEstimate:
    """Median of ``ratios`` with its distribution-free order-statistic interval.

    With too few ratios for ``confidence`` the interval is ``[0, inf]`` (no information yet).
    """
    data = np.sort(np.asarray(ratios, dtype=np.float64))
    n = int(data.size)
    if n == 0:
        raise ValueError("median_interval: no samples")
    median = float(np.median(data))
    low_rank = _low_rank(n, round(1.0 - confidence, 12))
    if low_rank < 1:
        return SpeedupEstimate(median, 0.0, math.inf, confidence, n)
    return SpeedupEstimate(median, float(data[low_rank - 1]), float(data[n - low_rank]),
                           confidence, n)


def min_pairs(confidence: float) -> int:
    """The fewest samples whose order-statistic interval reaches ``confidence``
    (``[min, max]`` covers the median with probability ``1 - 2 / 2**n``)."""
    n = 1
    while 2.0 * 0.5**n > 1.0 - confidence:
        n += 1
    return n


@functools.lru_cache(maxsize=4096)
def _low_rank(n: int, alpha: float) -> int:
    """The largest rank l with P(B <= l - 1) <= alpha / 2, B ~ Binomial(n, 1/2) (0: none).

    Exact: the binomial counts are integers and ``alpha`` is compared as the exact value of
    its float, so no rounding can move a rank."""
    limit = Fraction(alpha) / 2 * 2**n  # P(B <= k) <= alpha / 2  <=>  sum C(n, i) <= limit
    count, below = 1, 0  # C(n, k), and sum of C(n, i) for i < k
    for k in range(n + 1):
        below += count
        if below > limit:  # P(B <= k) > alpha / 2: l = k is the last with P(B <= l - 1) within
            return k
        count = count * (n - k) // (k + 1)
    return n + 1


@dataclass
class Outcome:
    """A finished sequential measurement: the samples, the last interval and why it stopped."""

    reference: list[float]
    variant: list[float]
    estimate: SpeedupEstimate
    decision: Decision
    looks: int
    stopped: str
    elapsed_s: float
    rule: StoppingRule
    history: list[tuple[int, float, float]] = field(default_factory=list)


def interim(estimate: SpeedupEstimate, threshold: float | None, rule: StoppingRule) -> str | None:
    """The verdict a look can stop on: PASS / FAIL (gated), NOT_GATED (ungated and narrow
    enough), or None: keep sampling."""
    if threshold is None:
        return NOT_GATED if estimate.rel_width <= rule.target_rel_width else None
    if estimate.low >= threshold:
        return PASS
    if estimate.high < threshold:
        return FAIL
    return None


def run(
    draw: Callable[[int], tuple[Sequence[float], Sequence[float]]],
    clock: Callable[[], float],
    rule: StoppingRule,
    threshold: float | None,
) -> Outcome:
    """Draw paired samples with ``draw(n)`` until ``rule`` stops, and decide.

    ``draw(n)`` returns ``n`` more (reference, variant) seconds; ``clock()`` the seconds of
    timing spent so far (a real timer's wall clock, or a fake one in tests).
    """
    ref: list[float] = []
    var: list[float] = []
    looks = 0
    history: list[tuple[int, float, float]] = []
    fewest = min_pairs(rule.look_confidence)
    target = max(rule.first_look, fewest)
    while True:
        # Draw the look in chunks, so a slow op cannot run far past the cap inside one look.
        chunk = max(1, (target - len(ref)) // 4)
        while len(ref) < target:
            r, v = draw(min(chunk, target - len(ref)))
            ref.extend(r)
            var.extend(v)
            if clock() > rule.max_time_s and len(ref) >= fewest:
                break
        elapsed = clock()
        nxt = 2 * len(ref)
        # The next look would end past the cap: this look is the last one.
        last = elapsed / len(ref) * nxt > rule.max_time_s
        if elapsed >= rule.min_time_s or last:
            looks += 1
            estimate = median_interval(_ratios(ref, var), rule.look_confidence)
            history.append((len(ref), estimate.low, estimate.high))
            stopped = None
            if interim(estimate, threshold, rule) is not None:
                stopped = DECIDED if threshold is not None else NARROW
            elif last:
                stopped = TIME_CAP
            elif looks >= rule.max_looks:
                stopped = LOOK_CAP
            if stopped is not None:
                decision = final_decision(estimate, threshold, rule, stopped, len(ref), elapsed)
                return Outcome(ref, var, estimate, decision, looks, stopped, elapsed, rule,
                               history)
        target = nxt


def _ratios(ref: Sequence[float], var: Sequence[float]) -> np.ndarray:
    from numcheck.perf.speedup import paired_ratios

    return paired_ratios(ref, var)


def final_decision(
    estimate: SpeedupEstimate,
    threshold: float | None,
    rule: StoppingRule,
    stopped: str,
    samples: int,
    elapsed_s: float,
) -> Decision:
    """The gate's verdict once sampling stopped, with the sentence a user reads."""
    ci = f"[{estimate.low:.3f}, {estimate.high:.3f}]"
    where = (f"{samples} pairs in {elapsed_s:.2f} s; {estimate.confidence:.2%} per look, "
             f"{rule.confidence:.0%} over <= {rule.max_looks} looks")
    verdict = interim(estimate, threshold, rule)
    if threshold is None:
        if verdict == NOT_GATED:
            return Decision(NOT_GATED, None, f"{UNGATED} ({where})")
        width = f"{estimate.rel_width:.1%}" if math.isfinite(estimate.rel_width) else "unbounded"
        return Decision(
            NOT_GATED, None,
            f"too noisy on this machine: interval {ci} is {width} of the median "
            f"wide (target {rule.target_rel_width:.0%}) at the {_cap(stopped, rule)}; "
            f"reported, not gated ({where})",
        )
    if verdict == PASS:
        return Decision(PASS, threshold,
                        f"lower bound {estimate.low:.3f} >= {threshold:g} ({where})")
    if verdict == FAIL:
        return Decision(FAIL, threshold,
                        f"slower than required: even the upper bound {estimate.high:.3f} is "
                        f"below {threshold:g} ({where})")
    return Decision(
        UNDECIDED, threshold,
        f"undecided at the {_cap(stopped, rule)}: the interval {ci} still contains the "
        f"threshold {threshold:g} ({where}). Fix: raise max_time_s (or max_looks) in the "
        f"case's [perf] table, time with CUDA-graph replay (cuda_graph = true) and quiet "
        f"the machine, or move speedup_min away from the measured {estimate.median:.3f}x "
        f"(set it from several runs: the interval says where the speedup lies)",
    )


def _cap(stopped: str, rule: StoppingRule) -> str:
    if stopped == LOOK_CAP:
        return f"look cap (max_looks = {rule.max_looks})"
    return f"time cap (max_time_s = {rule.max_time_s:g})"


# -- simulation: error rates of the rule on synthetic samples ------------------------------


@dataclass(frozen=True)
class SimResult:
    """How often the rule decided each way over ``trials`` synthetic measurements."""

    true_speedup: float
    threshold: float | None
    noise: float
    trials: int
    passed: int
    failed: int
    undecided: int
    mean_pairs: float

    def rate(self, verdict: str) -> float:
        count = {PASS: self.passed, FAIL: self.failed, UNDECIDED: self.undecided}[verdict]
        return count / self.trials


class _Synthetic:
    """One synthetic measurement's sampler and fake clock (see :func:`simulate`)."""

    def __init__(self, gen: np.random.Generator, speedup: float, noise: float,
                 heavy_tail: float, sample_s: float) -> None:
        self.gen, self.speedup, self.noise = gen, speedup, noise
        self.heavy_tail, self.sample_s = heavy_tail, sample_s
        self.count = 0
        self.spent = 0.0

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        i = np.arange(self.count, self.count + n)
        self.count += n
        drift = self.sample_s * (1 + 0.2 * np.sin(i / 17.0))
        ref = drift * np.exp(self.noise * self.gen.standard_normal(n))
        var = drift / self.speedup * np.exp(self.noise * self.gen.standard_normal(n))
        for arr in (ref, var):
            hit = self.gen.random(n) < self.heavy_tail
            arr[hit] *= self.gen.uniform(2, 5, int(hit.sum()))
        self.spent += float(ref.sum() + var.sum())
        return ref, var

    def clock(self) -> float:
        return self.spent


def simulate(
    true_speedup: float,
    threshold: float | None,
    *,
    noise: float,
    trials: int,
    rule: StoppingRule,
    seed: int = 0,
    heavy_tail: float = 0.0,
    sample_s: float = 1e-3,
) -> SimResult:
    """Run the rule ``trials`` times on synthetic paired samples.

    The reference takes ``sample_s`` per sample under a slow drift common to both members
    of a pair; each member gets its own lognormal noise of ``noise`` (relative), and with
    probability ``heavy_tail`` a sample is hit by a 2-5x outlier (a preemption, a clock
    dip). The fake clock advances by the sampled times, so the time cap acts as on a device.
    """
    gen = np.random.default_rng(seed)
    passed = failed = undecided = 0
    pairs = 0
    for _ in range(trials):
        source = _Synthetic(gen, true_speedup, noise, heavy_tail, sample_s)
        out = run(source.draw, source.clock, rule, threshold)
        pairs += len(out.reference)
        if out.decision.verdict == PASS:
            passed += 1
        elif out.decision.verdict == FAIL:
            failed += 1
        elif out.decision.verdict == UNDECIDED:
            undecided += 1
    return SimResult(true_speedup, threshold, noise, trials, passed, failed, undecided,
                     pairs / trials)
