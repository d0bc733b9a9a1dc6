"""The speedup gate: per-variant timing options and thresholds from case files, and violations.

A case's ``perf`` table sets timing options for all its variants, and ``perf.<variant>``
tables override them and set the gate::

    [mhc-prod.perf]
    rounds = 40                          # options for every variant of the case
    [mhc-prod.perf.bf16]
    speedup_min = { cuda = 1.1 }         # per device class; a class left out is not gated

A variant passes only when the lower bound of its speedup interval clears the threshold;
an interval too wide or straddling the threshold is ``undecided`` and fails with a message
saying so (:mod:`numcheck.perf.speedup`). The gate registers itself on import, so case files can
name ``perf.speedup_min`` in ``expect`` tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from numcheck.gates import PERF_GATE
from numcheck.perf.speedup import FAIL, UNDECIDED, Decision, SpeedupEstimate
from numcheck.verdict import Violation

GATE = PERF_GATE

#: Options a ``perf`` table accepts (besides per-variant tables), with their types.
PERF_OPTIONS: dict[str, type] = {
    "speedup_min": dict,
    "confidence": float,
    "rounds": int,
    "warmup": int,
    "max_rel_width": float,
    "cold_l2": bool,
    "cuda_graph": bool,
}


@dataclass(frozen=True)
class PerfSpec:
    """How one variant of one case is timed, and the thresholds it must clear.

    ``speedup_min`` maps a device class (``cpu``, ``cuda``) to the minimum speedup over the
    reference; ``max_rel_width`` is the widest interval (as a fraction of the median) that
    still decides.
    """

    speedup_min: Mapping[str, float] = field(default_factory=dict)
    confidence: float = 0.95
    rounds: int = 30
    warmup: int = 3
    max_rel_width: float = 0.10
    cold_l2: bool = False
    cuda_graph: bool = False

    def threshold(self, device: str) -> float | None:
        return self.speedup_min.get(device)


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
