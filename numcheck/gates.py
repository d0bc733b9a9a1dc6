"""Gates beyond the numerics: names a case file may cite in ``expect.<variant>``.

The numerics gates are the op's own outputs (``logits.rel_fro``, ``topk.tie_recall_min``).
The other gates (speedup, cast overhead, determinism, batch invariance) are listed here with the metrics they can fail on,
so case files are validated against them and the run knows whether each is active. The
built-in ones are plain constants (importing a gate's module registers nothing); more can
be added with :func:`register_gate`, or for one block with :func:`gate_registered`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from numcheck.numerics.metric_names import (
    ERROR_METRICS,
    NONFINITE_METRICS,
    SIM_METRICS,
    TOPK_LIMITS,
)

OUTPUT_METRICS = (*ERROR_METRICS, *SIM_METRICS, *NONFINITE_METRICS)
TOPK_METRICS = TOPK_LIMITS


@dataclass(frozen=True)
class Gate:
    """A named gate and the metrics it reports violations under (``<gate>.<metric>``).

    ``inconclusive``: metrics among them that say the gate could not decide (noise), not
    that it caught anything: an expectation naming the gate whole never counts them as the
    expected failure (numcheck.cases.Expectation).
    """

    name: str
    metrics: tuple[str, ...]
    doc: str = ""
    inconclusive: tuple[str, ...] = ()
    #: (metric, case-file key) where the key that sets a metric's limit has another name:
    #: ``casts.input_copies`` is limited by ``max_input_copies`` (messages name the key).
    limit_keys: tuple[tuple[str, str], ...] = ()
    #: The case key that holds the gate's limits (``overhead``: ``[<case>.overhead.<variant>]``
    #: tables) or turns it on (``deterministic``); "" for a gate of rules only.
    case_key: str = ""

    def limit_key(self, metric: str) -> str:
        """The case-file key that sets ``metric``'s limit."""
        return dict(self.limit_keys).get(metric, metric)


#: ``speedup_min``: a decided miss (the whole interval below the threshold).
#: ``speedup_undecided``: too noisy to decide. Kept apart so a known-bad variant's strict
#: xfail (``expect ... gates = ["perf"]`` or ``metrics = ["perf.speedup_min"]``) is never
#: satisfied by noise.
PERF_GATE = Gate("perf", ("speedup_min", "speedup_undecided"),
                 doc="variant vs FP32 reference speedup, gated on the lower confidence bound",
                 inconclusive=("speedup_undecided",),
                 limit_keys=(("speedup_undecided", "speedup_min"),), case_key="perf")
CASTS_GATE = Gate(
    "casts", ("round_trips", "repeated_casts", "no_op_casts", "cast_bytes_ratio",
              "input_copies"),
    doc="dtype conversions and copies recorded at the aten level while the variant runs",
    limit_keys=(("cast_bytes_ratio", "max_cast_bytes_ratio"),
                ("input_copies", "max_input_copies")), case_key="overhead",
)
KERNELS_GATE = Gate(
    "kernels", ("cuda_core_gemm", "copy_share"),
    doc="GPU kernels of the variant by class (torch.profiler), CUDA only",
    limit_keys=(("copy_share", "max_copy_share"),), case_key="overhead",
)
#: A low-precision variant's GEMMs against the scheme it declares (numcheck.check.against_sim):
#: ``sim_ratio``, the worst element of a recorded GEMM result past the bound an honest kernel
#: of the declared accumulation stays within against its simulated reference (a rule: at
#: most 1, numcheck.precision.quant_bound); ``operands``, findings of its recorded operands
#: against the declared scheme (numcheck.precision.quant_validate); ``recorded``, GEMMs
#: recorded that the op's gemm_site does not make, or the other way round.
QUANT_GATE = Gate("quant", ("sim_ratio", "operands", "recorded"),
                  doc="a low-precision variant's GEMMs against its declared scheme: the "
                  "simulated reference's bound, and its quantized operands")
#: ``deterministic = true`` in a case: the variant run several times on the same inputs
#: gives bitwise-equal outputs (``runs_differing``: runs unlike the first).
DETERMINISM_GATE = Gate(
    "determinism", ("runs_differing",),
    doc="the variant run several times on one seed's inputs: bitwise-equal outputs",
    case_key="deterministic",
)
#: ``batch_invariant = true`` in a case: a request's outputs computed alone are bitwise its
#: rows of the whole batch's (``requests_differing``: requests whose rows differ).
BATCH_INVARIANCE_GATE = Gate(
    "batch_invariance", ("requests_differing",),
    doc="a request computed alone: bitwise its rows of the whole batch's outputs",
    case_key="batch_invariant",
)
BUILTIN_GATES = (PERF_GATE, CASTS_GATE, KERNELS_GATE, QUANT_GATE, DETERMINISM_GATE,
                 BATCH_INVARIANCE_GATE)
#: The gates a case key turns on (numcheck.invariance): bitwise, no budget to tune.
INVARIANCE_GATES = (DETERMINISM_GATE.name, BATCH_INVARIANCE_GATE.name)

#: Every known gate by name: the built-in ones, then any registered.
GATES: dict[str, Gate] = {gate.name: gate for gate in BUILTIN_GATES}


def register_gate(gate: Gate) -> Gate:
    """Make a gate known to case-file validation; registering the same gate twice is a no-op."""
    existing = GATES.get(gate.name)
    if existing is not None and existing != gate:
        raise ValueError(f"numcheck: a different gate named {gate.name!r} is already registered")
    GATES[gate.name] = gate
    return gate


@contextmanager
def gate_registered(gate: Gate) -> Iterator[Gate]:
    """Register ``gate`` for the block only (tests, throwaway gates); the known gates are
    restored on exit."""
    saved = dict(GATES)
    try:
        yield register_gate(gate)
    finally:
        GATES.clear()
        GATES.update(saved)
