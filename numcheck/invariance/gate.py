"""The determinism and batch-invariance gates: their case-file keys, what they measured,
their violations.

A case turns them on (off by default)::

    deterministic = true                      # every variant it runs, on its devices
    batch_invariant = ["bf16", "fused"]       # these variants
    batch_invariant = { variants = ["bf16"], devices = ["cpu"], requests = [0, 3] }
    deterministic = { runs = 5 }

:func:`parse_spec` reads either key into an :class:`InvarianceSpec` (a bad value is an
:class:`InvarianceError` with the key, the problem and the fix, which the case loader words
as a case-file error). :mod:`numcheck.check.invariance` runs the variant and fills an
:class:`InvarianceReport`; :meth:`InvarianceReport.violations` gives the gates' verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from numcheck.gates import BATCH_INVARIANCE_GATE, DETERMINISM_GATE
from numcheck.numerics.verdict import Violation

if TYPE_CHECKING:
    from numcheck.invariance.bitwise import Difference

#: Case keys, and the gate each turns on.
DETERMINISTIC_KEY = "deterministic"
BATCH_INVARIANT_KEY = "batch_invariant"
GATE_OF_KEY = {DETERMINISTIC_KEY: DETERMINISM_GATE.name,
               BATCH_INVARIANT_KEY: BATCH_INVARIANCE_GATE.name}
INVARIANCE_GATES = (DETERMINISM_GATE.name, BATCH_INVARIANCE_GATE.name)

#: Calls of a variant on one seed's inputs the determinism gate makes and compares (each
#: later one with the first). A reduction whose order is random on each call (float
#: atomics) is missed only when every call gives the same bits: with three partials, whose
#: three orders of summation give three results (a + b = b + a, so 3! orders give 3), each
#: 1/3 likely, k calls all agree with chance 3 x (1/3)^k = 3^(1 - k): 1 in 9 for 3 calls,
#: 1 in 243 for 6, so 6 catch it with 99.6% (docs/cases.md has the general case). Each call
#: costs one run of the variant (under Triton's interpreter on the CPU, up to seconds): a
#: case that wants more says ``runs = N``.
DEFAULT_RUNS = 6
MAX_RUNS = 100
#: Table keys of each case key (beside ``variants`` and ``devices``).
_OPTIONS = {DETERMINISTIC_KEY: ("runs",), BATCH_INVARIANT_KEY: ("requests",)}
#: Reports of the differences of this many runs or requests are kept in the record.
MAX_SHOWN = 4


class InvarianceError(ValueError):
    """A value of ``deterministic`` or ``batch_invariant`` that cannot be used: the dotted
    ``key`` below the case, the ``problem`` and the ``fix``."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        super().__init__(f"{key}: {problem}. Fix: {fix}")
        self.key, self.problem, self.fix = key, problem, fix


@dataclass(frozen=True)
class InvarianceSpec:
    """Which variants of a case a gate holds, on which devices, and how.

    ``runs``: calls the determinism gate compares. ``requests``: the requests the
    batch-invariance gate computes alone (indices into the case's batch); None: the first,
    the middle and the last (:func:`default_requests`).
    """

    variants: tuple[str, ...]
    devices: tuple[str, ...]
    runs: int = DEFAULT_RUNS
    requests: tuple[int, ...] | None = None

    def holds(self, variant: str, device: str) -> bool:
        """Whether the gate holds ``variant`` on ``device``."""
        return variant in self.variants and device in self.devices


def default_requests(batch: int) -> tuple[int, ...]:
    """The first request, the middle one and the last: where a tile, a page or a split
    boundary around the batch would show."""
    return tuple(sorted({0, batch // 2, batch - 1}))


def parse_spec(key: str, raw: Any, *, running: Sequence[str],
               devices: Sequence[str]) -> InvarianceSpec | None:
    """``deterministic`` or ``batch_invariant`` as a case file gives it: ``true`` (every
    variant the case runs, on its devices), ``false`` (off: None), a list of variants, or a
    table of ``variants`` (``true`` or a list), ``devices`` and ``runs`` (deterministic) or
    ``requests`` (batch_invariant)."""
    example = (f'{key} = true, {key} = ["{running[-1]}"], or {key} = {{ variants = '
               f'["{running[-1]}"], devices = ["{devices[0]}"] }}')
    if isinstance(raw, bool):
        return InvarianceSpec(tuple(running), tuple(devices)) if raw else None
    if isinstance(raw, list):
        raw = {"variants": raw}
    if not isinstance(raw, Mapping):
        raise InvarianceError(key, f"expected true, false, a list of variants or a table, got "
                              f"{type(raw).__name__}", f"write {example}")
    allowed = ("variants", "devices", *_OPTIONS[key])
    for name in raw:
        if name not in allowed:
            raise InvarianceError(f"{key}.{name}", f"unknown key '{name}'",
                                  f"use keys among: {', '.join(allowed)}")
    variants = _names(f"{key}.variants", raw.get("variants", True), running, "variant",
                      "the variants this case runs")
    chosen = _names(f"{key}.devices", raw.get("devices", True), devices, "device",
                    "the case's devices")
    runs = raw.get("runs", DEFAULT_RUNS)
    if isinstance(runs, bool) or not isinstance(runs, int) or not 2 <= runs <= MAX_RUNS:
        raise InvarianceError(f"{key}.runs", f"expected an integer from 2 to {MAX_RUNS}, got "
                              f"{runs!r}", f"write runs = {DEFAULT_RUNS} (calls compared: the "
                              "first with each later one)")
    requests = raw.get("requests")
    if requests is not None:
        if (not isinstance(requests, list) or not requests
                or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in requests)
                or len(set(requests)) != len(requests)):
            raise InvarianceError(f"{key}.requests", f"expected a non-empty list of distinct "
                                  f"request indices >= 0, got {requests!r}",
                                  "write requests = [0, 3] (each computed alone), or leave it "
                                  "out for the first, middle and last request")
        requests = tuple(requests)
    return InvarianceSpec(variants, chosen, runs=runs, requests=requests)


def _names(key: str, value: Any, known: Sequence[str], what: str, where: str) -> tuple[str, ...]:
    if value is True:
        return tuple(known)
    fix = f"write {key.rpartition('.')[2]} = [\"{known[-1]}\"] or true, with {what}s among: " \
          f"{', '.join(known)}"
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise InvarianceError(key, f"expected true or a non-empty list of {what} names, got "
                              f"{value!r}", fix)
    for name in value:
        if name not in known:
            raise InvarianceError(key, f"'{name}' is not one of {where}", fix)
    if len(set(value)) != len(value):
        raise InvarianceError(key, "a name is listed twice", "list each once")
    return tuple(name for name in known if name in value)


@dataclass
class InvarianceReport:
    """What the two gates measured for one check (either may not have run: None).

    ``runs``: the determinism gate's calls, and per later call that differed from the
    first, its differences (run number from 1). ``batch`` / ``requests``: the batch size
    and the requests computed alone, and per request whose outputs differed from its rows
    of the batch's, the differences. ``compared``: the outputs compared (those the variant
    produces). ``seed``: the case seed whose inputs were used.
    """

    seed: int
    compared: tuple[str, ...]
    runs: int | None = None
    run_differences: list[tuple[int, list[Difference]]] = field(default_factory=list)
    batch: int | None = None
    requests: tuple[int, ...] = ()
    request_differences: list[tuple[int, list[Difference]]] = field(default_factory=list)

    def violations(self) -> list[Violation]:
        """The gates' violations: one per gate that saw a difference."""
        found = []
        if self.runs is not None and self.run_differences:
            n = len(self.run_differences)
            shown = "; ".join(f"run {run} of {self.runs} differs from run 1: "
                              + ", ".join(d.describe() for d in diffs)
                              for run, diffs in self.run_differences[:MAX_SHOWN])
            found.append(Violation(
                DETERMINISM_GATE.name, "runs_differing", n, 0, seed=self.seed,
                detail=f"{shown}. The variant is not deterministic: the same inputs give "
                "other bits (a reduction whose order changes from call to call: atomics, "
                "split-K chosen by occupancy); fix the kernel, or drop the variant from the "
                "case's deterministic key if it is not meant to be"))
        if self.batch is not None and self.request_differences:
            n = len(self.request_differences)
            shown = "; ".join(f"request {r} alone differs from its rows in the batch of "
                              f"{self.batch}: " + ", ".join(d.describe() for d in diffs)
                              for r, diffs in self.request_differences[:MAX_SHOWN])
            found.append(Violation(
                BATCH_INVARIANCE_GATE.name, "requests_differing", n, 0, seed=self.seed,
                detail=f"{shown}. The variant is not batch-invariant: a request's outputs "
                "depend on the batch around it (a split, a tile or a kernel chosen by the "
                "batch size); fix the kernel, or drop the variant from the case's "
                "batch_invariant key if it is not meant to be"))
        return found

    def as_dict(self) -> dict[str, Any]:
        """The record's ``invariance`` section (docs/report.md)."""
        out: dict[str, Any] = {"seed": self.seed, "compared": list(self.compared)}
        if self.runs is not None:
            out[DETERMINISM_GATE.name] = {
                "runs": self.runs, "runs_differing": len(self.run_differences),
                "differences": [{"run": run, "outputs": [d.as_dict() for d in diffs]}
                                for run, diffs in self.run_differences[:MAX_SHOWN]]}
        if self.batch is not None:
            out[BATCH_INVARIANCE_GATE.name] = {
                "batch": self.batch, "requests": list(self.requests),
                "requests_differing": len(self.request_differences),
                "differences": [{"request": r, "outputs": [d.as_dict() for d in diffs]}
                                for r, diffs in self.request_differences[:MAX_SHOWN]]}
        return out
