"""Gates beyond the numerics: names a case file may cite in ``expect.<variant>.fails``.

The numerics gates are the op's own outputs (``logits.rel_fro``, ``topk.tie_recall_min``).
Other gates (speedup, cast overhead...) register here with the metrics they can fail on,
so case files are validated against them and the run knows whether each is active.
"""

from __future__ import annotations

from dataclasses import dataclass

from numcheck.budgets import ERROR_METRICS, TOPK_LIMITS

#: Violation metrics the numerics check may raise on an ordinary output, besides the
#: budgeted error metrics: the non-finite accounting and the sampled-output counts.
NONFINITE_METRICS = ("inf_mask", "nan", "nan_mask", "posinf_count", "neginf_count")
OUTPUT_METRICS = (*ERROR_METRICS, *NONFINITE_METRICS)
TOPK_METRICS = TOPK_LIMITS


@dataclass(frozen=True)
class Gate:
    """A named gate and the metrics it reports violations under (``<gate>.<metric>``)."""

    name: str
    metrics: tuple[str, ...]
    doc: str = ""


GATES: dict[str, Gate] = {}


def register_gate(gate: Gate) -> Gate:
    """Make a gate known to case-file validation; registering the same gate twice is a no-op."""
    existing = GATES.get(gate.name)
    if existing is not None and existing != gate:
        raise ValueError(f"numcheck: a different gate named {gate.name!r} is already registered")
    GATES[gate.name] = gate
    return gate
