"""Machine noise: the reference timed against itself (A/A), once per process and device.

The first timed check of a process on a device also times its reference against itself with
the same timer and stopping rule (:func:`machine_noise`), once. Its interval should contain
1; :func:`noise_warning` says so in the messages and the summary when it does not (the
machine is noisy or the timer biased), but it never changes a verdict. The reference's own
item of every case is an A/A pair too, so the report shows the noise floor per case.
"""

from __future__ import annotations

import os
from typing import Any

from numcheck.perf.sequential import StoppingRule, run
from numcheck.perf.timing import TimerRequest, TimingConfig, make_pair_timer

#: A/A noise beyond which messages and the summary warn: the interval misses 1 by more
#: than this fraction, or is wider than ``NOISE_WIDTH`` of its median.
NOISE_OFFSET, NOISE_WIDTH = 0.01, 0.05

_NOISE: dict[str, dict[str, Any]] = {}


def reset_machine_noise() -> None:
    """Forget the cached A/A measurements (a new run in the same process measures anew)."""
    _NOISE.clear()


def machine_noise(
    device: str, reference: Any, config: TimingConfig, rule: StoppingRule, case: str,
    reference_name: str,
) -> dict[str, Any]:
    """This process's A/A measurement on ``device``: taken at its first timed check, cached.

    ``reference`` timed against itself with ``config``'s timer and an ungated stopping
    rule capped at 1 s, plus the GPU's clocks (:mod:`numcheck.perf.gpuclocks`).
    """
    if device in _NOISE:
        return _NOISE[device]
    timer = make_pair_timer(
        TimerRequest(reference, reference, device, config, reference_name, reference_name)
    )
    aa_rule = StoppingRule(confidence=rule.confidence, first_look=rule.first_look,
                           max_looks=rule.max_looks, max_time_s=min(1.0, rule.max_time_s),
                           target_rel_width=0.01)
    outcome = run(timer.draw, timer.elapsed, aa_rule, None)
    est = outcome.estimate
    clocks = None
    if device == "cuda":
        from numcheck.perf.gpuclocks import gpu_clocks

        clocks = gpu_clocks()
    _NOISE[device] = {
        "aa_speedup": est.median, "aa_ci_low": est.low, "aa_ci_high": est.high,
        "aa_pairs": est.rounds, "timer": timer.timer, "case": case, "pid": os.getpid(),
        "clocks": clocks,
    }
    return _NOISE[device]


def noise_warning(noise: dict[str, Any] | None) -> str:
    """A sentence when the A/A measurement is far from 1 or too wide, else ``""``."""
    if not noise:
        return ""
    low, high, mid = noise["aa_ci_low"], noise["aa_ci_high"], noise["aa_speedup"]
    words = []
    if low > 1 + NOISE_OFFSET or high < 1 - NOISE_OFFSET:
        words.append(f"the reference timed against itself gave {mid:.3f}x [{low:.3f}, "
                     f"{high:.3f}], not 1")
    elif mid > 0 and (high - low) / mid > NOISE_WIDTH:
        words.append(f"the reference timed against itself gave an interval "
                     f"[{low:.3f}, {high:.3f}] wider than {NOISE_WIDTH:.0%}")
    for row in noise.get("clocks") or []:
        if row.get("throttled"):
            words.append(f"cuda:{row['index']} was throttled "
                         f"({', '.join(row['throttle_reasons'])})")
    if not words:
        return ""
    return ("machine noise: " + "; ".join(words) +
            " (the verdict stands; re-run on a quiet machine to trust the figure)")
