"""The determinism and batch-invariance gates: their case-file keys, what they measured,
their violations.

A case turns them on (off by default)::

    deterministic = true                      # every variant it runs, on its devices
    batch_invariant = ["bf16", "fused"]       # these variants
    batch_invariant = { variants = ["bf16"], devices = ["cpu", "H200"], requests = [0, 3] }
    deterministic = { runs = 5, devices = ["cpu", "H100", "H200"] }

Whether a GPU kernel is deterministic or batch-invariant depends on the kernel the library
picks, and cuBLAS picks per GPU model, so a gate holds a check on the device classes the key
names (``cpu``, ``H200``; :func:`numcheck.devices.device_class`). On a GPU model it does not
name, the gate still measures and reports, and never fails: the record says so and names the
command that measures it. ``cuda`` in ``devices`` means every GPU model, only beside
``every_class = true`` (measured to hold on every one); the short forms (``true``, a list)
take the case's devices, so on a GPU they measure and report until a model is named.

:func:`parse_spec` reads either key into an :class:`InvarianceSpec` (a bad value is an
:class:`InvarianceError` with the key, the problem and the fix, which the case loader words
as a case-file error). :mod:`numcheck.check.invariance` runs the variant and fills an
:class:`InvarianceReport`; :meth:`InvarianceReport.violations` gives the gates' verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from numcheck.devices import ONBOARD, class_key_problem, class_kind
from numcheck.errors import NumcheckError
from numcheck.gates import BATCH_INVARIANCE_GATE, DETERMINISM_GATE
from numcheck.numerics.verdict import Violation

if TYPE_CHECKING:
    from numcheck.invariance.bitwise import Difference

#: The case keys that turn the gates on.
DETERMINISTIC_KEY = DETERMINISM_GATE.case_key
BATCH_INVARIANT_KEY = BATCH_INVARIANCE_GATE.case_key

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
#: The key of an invariance table whose ``cuda`` device holds on every GPU model.
EVERY_CLASS = "every_class"
#: The command that measures both gates on this machine's GPU model and names it in the keys.
INVARIANCE_CALIBRATION = f"{ONBOARD} --only invariance"


class InvarianceError(NumcheckError):
    """A value of ``deterministic`` or ``batch_invariant`` that cannot be used: the dotted
    ``key`` below the case, the ``problem`` and the ``fix``."""


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
    #: ``cuda`` in ``devices`` holds on every GPU model (measured to, the case file says).
    every_class: bool = False

    def holds(self, variant: str, device: str) -> bool:
        """Whether the gate measures ``variant`` on ``device`` (a kind: ``cpu``, ``cuda``):
        it names the variant, and the kind or a class of that kind."""
        return variant in self.variants and device in {class_kind(d) for d in self.devices}

    def gates_on(self, cls: str, device: str) -> bool:
        """Whether what the gate measures on class ``cls`` of kind ``device`` fails the check:
        the class is named, or the kind is, with ``every_class``."""
        return cls in self.devices or (self.every_class and device in self.devices)

    def unset(self, cls: str, key: str) -> str:
        """Why the gate of case key ``key`` measures and reports on ``cls`` without failing."""
        named = [d for d in self.devices if d != "cuda"]
        return (f"{key} names no {cls} ({', '.join(named) or 'no GPU model'} only): measured "
                f"and reported, not gated; measure {cls}'s: {INVARIANCE_CALIBRATION}")


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
               f'["{running[-1]}"], devices = ["{"cpu" if "cpu" in devices else "H200"}"] }}')
    if isinstance(raw, bool):
        return InvarianceSpec(tuple(running), tuple(devices)) if raw else None
    if isinstance(raw, list):
        raw = {"variants": raw}
    if not isinstance(raw, Mapping):
        raise InvarianceError(key, f"expected true, false, a list of variants or a table, got "
                              f"{type(raw).__name__}", f"write {example}")
    allowed = ("variants", "devices", EVERY_CLASS, *_OPTIONS[key])
    for name in raw:
        if name not in allowed:
            raise InvarianceError(f"{key}.{name}", f"unknown key '{name}'",
                                  f"use keys among: {', '.join(allowed)}")
    variants = _names(f"{key}.variants", raw.get("variants", True), running, "variant",
                      "the variants this case runs")
    every = raw.get(EVERY_CLASS, False)
    if not isinstance(every, bool):
        raise InvarianceError(f"{key}.{EVERY_CLASS}", f"expected true or false, got {every!r}",
                              f'write {EVERY_CLASS} = true beside devices = ["cuda"] (it holds '
                              "on every GPU model), or leave it out")
    chosen = _devices(key, raw.get("devices", True), devices, every)
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
    return InvarianceSpec(variants, chosen, runs=runs, requests=requests, every_class=every)


def _devices(key: str, value: Any, devices: Sequence[str], every: bool) -> tuple[str, ...]:
    """A table's ``devices``: the case's devices (true), or a list of device classes (``cpu``,
    GPU models) and kinds of the case's devices; ``cuda`` named only with ``every_class``."""
    if value is True:
        if every and "cuda" not in devices:
            raise InvarianceError(f"{key}.{EVERY_CLASS}", "every_class = true names the GPU "
                                  "value, and the case does not run on cuda",
                                  "remove every_class")
        return tuple(devices)
    where = f"{key}.devices"
    fix = (f'write devices = ["cpu", "H200"]: device classes (cpu, GPU models) of the case\'s '
           f"devices ({', '.join(devices)})")
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise InvarianceError(where, f"expected true or a non-empty list of device classes, "
                              f"got {value!r}", fix)
    if len(set(value)) != len(value):
        raise InvarianceError(where, "a name is listed twice", "list each once")
    for name in value:
        problem = None if name == "cuda" and every else class_key_problem(name)
        if problem is not None:
            raise InvarianceError(where, problem[0], problem[1])
        if class_kind(name) not in devices:
            raise InvarianceError(where, f"'{name}' runs as {class_kind(name)}, which is not "
                                  f"one of the case's devices ({', '.join(devices)})", fix)
    if every and "cuda" not in value:
        raise InvarianceError(f"{key}.{EVERY_CLASS}", "every_class = true names the GPU value, "
                              "and devices has no cuda", 'add "cuda" to devices, or remove '
                              "every_class")
    return tuple(value)


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
    #: Gates that measured and reported, not failing: their key names no ``device_class``.
    ungated: dict[str, str] = field(default_factory=dict)
    device_class: str | None = None

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
        for gate, why in self.ungated.items():
            out[gate].update(gated=False, why=why)
        if self.device_class is not None:
            out["device_class"] = self.device_class
        return out
