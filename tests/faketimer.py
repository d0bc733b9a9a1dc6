"""A fake pair timer: synthetic samples and a fake clock, so no test depends on how fast
the machine is. Speedups are set per variant name; the samples are seeded."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from numcheck.perf.timing import TimerRequest


class FakePairTimer:
    """Reference ``base_s`` per call with lognormal ``noise``; the variant ``speedup`` times
    faster. The clock is the sum of the sampled times (as on a device)."""

    def __init__(self, speedup: float, *, base_s: float = 1e-3, noise: float = 0.01,
                 seed: int = 0, calls: list[str] | None = None, name: str = "fake") -> None:
        self.timer = name
        self.notes: list[str] = ["fake timer (tests)"]
        self.calls_per_sample = 1
        self._speedup = speedup
        self._base = base_s
        self._noise = noise
        self._gen = np.random.default_rng(seed)
        self._spent = 0.0
        self.calls = calls

    def draw(self, n: int) -> tuple[list[float], list[float]]:
        ref = self._base * np.exp(self._noise * self._gen.standard_normal(n))
        var = self._base / self._speedup * np.exp(self._noise * self._gen.standard_normal(n))
        self._spent += float(ref.sum() + var.sum())
        if self.calls is not None:
            self.calls.append(f"draw {n}")
        return ref.tolist(), var.tolist()

    def elapsed(self) -> float:
        return self._spent


def factory(speedups: Mapping[str, float], *, noise: float = 0.01,
            log: list[tuple[str, str, str]] | None = None):  # type: ignore[no-untyped-def]
    """A timer factory for :func:`numcheck.perf.timing.override`: the variant's speedup by name
    (1.0 for the reference against itself)."""

    def make(request: TimerRequest) -> FakePairTimer:
        if log is not None:
            log.append((request.reference_name, request.variant_name, request.device))
        speedup = 1.0 if request.variant_name == request.reference_name else speedups[
            request.variant_name]
        return FakePairTimer(speedup, noise=noise, seed=len(log) if log is not None else 0)

    return make
