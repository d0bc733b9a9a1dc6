"""The speedup gate: per-variant timing options and thresholds from case files, and violations.

A case's ``perf`` table sets timing options for all its variants, and ``perf.<variant>``
tables override them and set the gate::

    [mhc-prod.perf]
    max_time_s = 8                       # options for every variant of the case
    [mhc-prod.perf.bf16]
    speedup_min = { H200 = 1.1, H100 = 1.05 }   # per device class: cpu or a GPU model

A threshold is a fact about the GPU model it was measured on, so it is keyed by the model's
class (:func:`numcheck.devices.device_class`). A class with no value is timed and reported,
never gated by another class's figure: the record says so, and names the command that
measures one (:data:`SPEED_CALIBRATION`). The device kind ``cuda`` is a fallback for every GPU
model only where the table says it was measured to hold on every one
(``speedup_min = { cuda = 1.0, every_class = true }``).

Samples are drawn until the stopping rule (:mod:`numcheck.perf.sequential`) decides: a pass
when the whole speedup interval clears the threshold, a fail when it lies wholly below; an
interval that still straddles the threshold at the time cap is ``undecided`` and fails with
a message naming the cap, the interval and what to change. The gate registers itself on import, so case files can
name ``perf.speedup_min`` in ``expect`` tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numcheck.devices import ONBOARD
from numcheck.numerics.verdict import Violation
from numcheck.perf.sequential import StoppingRule
from numcheck.perf.speedup import FAIL, UNDECIDED, Decision, SpeedupEstimate

#: The key of a ``speedup_min`` table that makes its ``cuda`` value hold on every GPU model.
EVERY_CLASS = "every_class"
#: The command that measures speed thresholds for this machine's GPU model (every perf case
#: at once; docs/speed.md, "Your runner is not an H200").
SPEED_CALIBRATION = f"{ONBOARD} --only speed"

#: Options a ``perf`` table accepts (besides per-variant tables), with their types.
PERF_OPTIONS: dict[str, type] = {
    "speedup_min": dict,
    "confidence": float,
    "rounds": int,
    "warmup": int,
    "max_rel_width": float,
    "cold_l2": bool,
    "cuda_graph": bool,
    "min_time_s": float,
    "max_time_s": float,
    "max_looks": int,
    "target_sample_ms": float,
}

#: Accepted ranges of the numeric options (the case loader names the key when one is out).
PERF_BOUNDS: dict[str, tuple[float, float]] = {
    "confidence": (0.5, 0.999), "rounds": (3, 100_000), "warmup": (0, 10_000),
    "max_rel_width": (1e-6, 10.0), "min_time_s": (0.0, 3600.0), "max_time_s": (0.01, 3600.0),
    "max_looks": (1, 64), "target_sample_ms": (0.0, 1000.0),
}


@dataclass(frozen=True)
class PerfSpec:
    """How one variant of one case is timed, and the thresholds it must clear.

    ``speedup_min`` maps a device class (``cpu``, a GPU model such as ``H200``) to the
    minimum speedup over the reference; ``every_class``: its ``cuda`` value, when it has one,
    holds on every GPU model without a value of its own. The stopping rule (:class:`numcheck.perf.sequential.StoppingRule`): ``rounds``
    pairs before the first look, then doubling, at most ``max_looks`` looks, at least
    ``min_time_s`` and at most ``max_time_s`` of timing; ``confidence`` over all looks;
    ``max_rel_width``: an ungated figure stops once its interval is this narrow (as a
    fraction of the median). ``cuda_graph`` (default on): time CUDA-graph replays, falling
    back to eager launches when capture fails; ``cuda_graph = false`` times eagerly.
    ``target_sample_ms``: one sample is a batch of back-to-back calls this long.
    """

    speedup_min: Mapping[str, float] = field(default_factory=dict)
    every_class: bool = False
    confidence: float = 0.95
    rounds: int = 20
    warmup: int = 3
    max_rel_width: float = 0.04
    cold_l2: bool = False
    cuda_graph: bool = True
    min_time_s: float = 0.0
    max_time_s: float = 5.0
    max_looks: int = 8
    target_sample_ms: float = 1.0

    def threshold(self, cls: str, kind: str) -> float | None:
        """The threshold on device class ``cls`` (``cpu``, ``H100``) of kind ``kind``
        (``cpu``, ``cuda``): the class's own, else the kind's where it holds on every class,
        else None (not gated)."""
        if cls in self.speedup_min:
            return self.speedup_min[cls]
        if self.every_class:
            return self.speedup_min.get(kind.partition(":")[0])
        return None

    def unset(self, cls: str, kind: str) -> str:
        """Why class ``cls`` is not gated where other classes are (the classes that have a
        threshold and the command that measures one for ``cls``), or "" when it is gated or
        no class is."""
        if not self.speedup_min or self.threshold(cls, kind) is not None:
            return ""
        have = ", ".join(f"{c} {v:g}" for c, v in sorted(self.speedup_min.items()))
        return (f"no speedup_min for {cls} (this case has {have}): reported, not gated; "
                f"measure {cls}'s: {SPEED_CALIBRATION}")

    def rule(self) -> StoppingRule:
        """The stopping rule these options describe."""
        return StoppingRule(
            confidence=self.confidence, first_look=self.rounds, max_looks=self.max_looks,
            min_time_s=self.min_time_s, max_time_s=self.max_time_s,
            target_rel_width=self.max_rel_width,
        )


def violations(
    estimate: SpeedupEstimate, decision: Decision, detail: str = ""
) -> list[Violation]:
    """The gate's violations for one decided estimate (none for pass and not gated)."""
    if decision.verdict not in (FAIL, UNDECIDED):
        return []
    assert decision.threshold is not None
    metric = "speedup_min" if decision.verdict == FAIL else "speedup_undecided"
    text = f"speedup {estimate.describe()}: {decision.reason}"
    return [
        Violation(
            "perf", metric, estimate.low, decision.threshold, upper=False, kind="speedup",
            detail=f"{text}; {detail}" if detail else text,
        )
    ]
