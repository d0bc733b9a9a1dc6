"""Case files: load and validate ``cases/*.toml`` into :class:`Case` objects.

One top-level table per case id::

    [v4flash-b4-l2k]
    op = "indexer"
    preset = "v4flash"
    shape = { batch = 4, max_context = 2048 }
    seeds = [0, 1]
    variants = ["bf16", "tf32"]

    [v4flash-b4-l2k.budget.bf16.logits]
    calc_diff = 1e-5

    [v4flash-b4-l2k.budget.bf16_roundtrip]
    budget_like = "bf16"      # read as if bf16's budget tables were written here

Every mistake is a :class:`CaseFileError` naming the file, the case, the dotted key and the
fix, because a case file is written by hand and read by a merge gate. Budgets left out are
completed from :data:`numcheck.numerics.budgets.DEFAULT_BUDGETS`. Nothing here imports pytest.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from numcheck.caseparts.inputs import (
    INPUTS_KEY,
    InputsError,
    InputSpec,
    defaults_left,
    parse_inputs,
)
from numcheck.caseparts.sweep import SWEEP_KEY, SweepError, SweepPoint, expand
from numcheck.cases.budget_tables import parse_budgets, require_checked
from numcheck.devices import class_key_problem, class_kind
from numcheck.distributions import INPUTS_PARAM
from numcheck.errors import NumcheckError
from numcheck.gates import (
    BATCH_INVARIANCE_GATE,
    DETERMINISM_GATE,
    GATES,
    KERNELS_GATE,
    OUTPUT_METRICS,
    QUANT_GATE,
    TOPK_METRICS,
)
from numcheck.honest.gemm_family import missing_envelope, yardstick
from numcheck.invariance.limits import (
    BATCH_INVARIANT_KEY,
    DETERMINISTIC_KEY,
    InvarianceError,
    InvarianceSpec,
    parse_spec,
)
from numcheck.numerics.budgets import BudgetError, VariantBudget, describe
from numcheck.numerics.calibration_record import PROVENANCE, CalibrationRecord, parse_record
from numcheck.numerics.metric_names import NONFINITE_METRICS
from numcheck.ops import registry
from numcheck.ops.param_checks import check_params
from numcheck.ops.registry import OpSpec
from numcheck.overhead.limits import (
    KERNEL_LIMITS,
    OVERHEAD_KEYS,
    OverheadBudget,
    OverheadError,
    complete_overhead,
)
from numcheck.perf.limits import EVERY_CLASS, PERF_BOUNDS, PERF_OPTIONS, PerfSpec
from numcheck.toml_lines import key_lines

#: Keys a case table accepts.
CASE_KEYS = (
    "op", "description", "preset", "shape", "seeds", "devices", "variants", "budget", "expect",
    "perf", "perf_only",
    "overhead", PROVENANCE, SWEEP_KEY, INPUTS_KEY, DETERMINISTIC_KEY, BATCH_INVARIANT_KEY,
)
#: A case id becomes a file name and a test id, so it is kept to this alphabet.
CASE_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]*")
#: The ini key naming the case folder (read by the plugin; named here for error messages).
CASES_INI_KEY = "numcheck_cases"

OpLookup = Callable[[str], OpSpec]


class CaseFileError(NumcheckError):
    """A case file that cannot be used.

    The message reads ``<file>: case '<id>': key '<dotted.key>': <problem>. Fix: <fix>``;
    the case and key parts are left out when the error is about the whole file.
    """

    path: Path

    def __init__(self, path: Path, problem: str, fix: str, *, case: str | None = None,
                 key: str | None = None) -> None:
        super().__init__(key, problem, fix, path=path, case=case)


@dataclass(frozen=True)
class Case:
    """One validated case: an op, its resolved shape, seeds, devices, variants and budgets.

    ``params`` is the op's defaults, then the preset, then ``shape`` (the later wins).
    ``variants`` are the non-reference variants to check, in the op's variant order.
    ``budgets`` holds a complete budget for each of them and for the op's reference, with
    the origin of every key (:attr:`VariantBudget.origins`: given at a line of ``source``,
    inherited, lent, or a default). Treat the mappings as read-only.
    """

    id: str
    op: str
    preset: str | None
    params: Mapping[str, Any]
    seeds: tuple[int, ...]
    devices: tuple[str, ...]
    variants: tuple[str, ...]
    budgets: Mapping[str, VariantBudget]
    source: Path
    description: str = ""
    expect: Mapping[str, Expectation] = field(default_factory=dict)
    #: Timing options and speedup thresholds per variant (reference included), used
    #: with --numcheck-perf; every running variant has one.
    perf: Mapping[str, PerfSpec] = field(default_factory=dict)
    #: A production-shape timing case: no golden, no numerics; runs only with
    #: --numcheck-perf (its numerics are checked by the CPU-sized cases of the same op).
    perf_only: bool = False
    #: Cast/copy and kernel limits per variant (``[<case>.overhead.<variant>]``), complete
    #: for every variant the case runs; see :mod:`numcheck.overhead.limits`.
    overhead: Mapping[str, OverheadBudget] = field(default_factory=dict)
    #: How calibration set each variant's budget tables (``[<case>.provenance.<variant>]``,
    #: written by --numcheck-calibrate-write, read by the next calibration; never gated).
    provenance: Mapping[str, CalibrationRecord] = field(default_factory=dict)
    #: Where each key of the case is set in ``source``: its path below the case's table
    #: (``("overhead", "fp32", "max_cast_bytes_ratio")``; ``()``: the case's own table) ->
    #: 1-based line, read from the file's text when it is loaded (numcheck.toml_lines).
    lines: Mapping[tuple[str, ...], int] = field(default_factory=dict)
    #: ``deterministic``: the variants (and devices) whose runs on one seed's inputs must be
    #: bitwise equal; None: off (numcheck.invariance).
    deterministic: InvarianceSpec | None = None
    #: ``batch_invariant``: the variants (and devices) whose requests computed alone must be
    #: bitwise their rows of the batch's outputs; None: off.
    batch_invariant: InvarianceSpec | None = None
    #: A point of a shape sweep (numcheck.caseparts.sweep): the sweep case it belongs to and
    #: its values. ``id`` is then the point's (``<sweep case>@<label>``), ``params`` hold
    #: its values; None for a case that sweeps nothing.
    sweep: SweepPoint | None = None
    #: What the inputs are: the op's default draw, another distribution, or a recorded
    #: file (numcheck.caseparts.inputs).
    inputs: InputSpec = field(default_factory=InputSpec)

    @property
    def table(self) -> str:
        """The case's table in its file: its id, or a sweep point's sweep case."""
        return self.id if self.sweep is None else self.sweep.case


@dataclass(frozen=True)
class Expectation:
    """A known-bad variant: what kind of failure is expected of it, and why.

    A case file names it in any of three ways, alone or together
    (``expect.<variant> = { ..., reason = "..." }``):

    - ``outputs = ["y"]``: any violation on those outputs, whichever metric and seed;
    - ``gates = ["casts"]``: any violation of those gates (the perf gate's
      ``speedup_undecided`` excepted: noise never catches a known-bad variant);
    - ``metrics = ["casts.round_trips"]`` (``fails``, the older name): those
      ``<gate or output>.<metric>`` keys.

    ``fails`` holds every key the expectation covers: the metrics named, and each metric of
    an output or gate named whole (what a metrics-only expectation lists). While one of its
    gates or outputs is checked, the check is a strict expected failure: xfailed when each
    of them catches the variant and nothing outside the expectation fails; otherwise a
    failure whose message shows the expectation and what it left out
    (:func:`numcheck.check.settle_expected`).
    """

    fails: tuple[str, ...]
    reason: str
    outputs: tuple[str, ...] = ()
    gates: tuple[str, ...] = ()
    #: The sweep points it holds at (``points = ["tokens7", ...]``: their labels); None: every
    #: point, or a case that sweeps nothing. At the other points the variant is an ordinary
    #: check (a batch-dependent kernel is invariant with one token: expected to fail at the
    #: others only).
    points: tuple[str, ...] | None = None

    def covers(self, key: str) -> bool:
        """Whether a violation ``<gate or output>.<metric>`` is one this expectation expects."""
        return key in self.fails or key.partition(".")[0] in self.outputs

    @property
    def metrics(self) -> tuple[str, ...]:
        """The keys named one by one (those of an output or gate named whole left out)."""
        whole = {*self.outputs, *self.gates}
        return tuple(k for k in self.fails if k.partition(".")[0] not in whole)

    def targets(self) -> dict[str, tuple[str, ...] | None]:
        """What must catch the variant: each output or gate named whole (None: any of its
        violations), and each gate or output of the metrics named one by one (those
        metrics)."""
        out: dict[str, tuple[str, ...] | None] = {name: None for name in self.outputs}
        for gate in self.gates:
            out[gate] = tuple(k.partition(".")[2] for k in self.fails
                              if k.partition(".")[0] == gate)
        for key in self.metrics:
            gate, _, metric = key.partition(".")
            out[gate] = (*(out.get(gate) or ()), metric)
        return out

    def describe(self) -> str:
        """``outputs y; gates casts; metrics perf.speedup_min``: the expectation as written."""
        parts = [(name, values) for name, values in (
            ("outputs", self.outputs), ("gates", self.gates), ("metrics", self.metrics))
            if values]
        text = "; ".join(f"{name} {', '.join(values)}" for name, values in parts)
        return text if self.points is None else f"{text}; at points {', '.join(self.points)}"


def load_cases(folder: Path, *, lookup: OpLookup = registry.get_op) -> list[Case]:
    """Every case of every ``*.toml`` file directly in ``folder``, files in sorted order.

    A folder that does not exist, or two cases of the same op and id in different files,
    raise :class:`CaseFileError`. ``lookup`` maps an op name to its spec (KeyError if unknown).
    """
    if not folder.is_dir():
        problem = "is not a folder" if folder.exists() else "the case folder does not exist"
        raise CaseFileError(
            folder,
            problem,
            f"create it and add case files (*.toml), or set the {CASES_INI_KEY} ini key "
            "to the folder that holds them",
        )
    cases: list[Case] = []
    ids = CaseIds()
    for path in sorted(folder.glob("*.toml")):
        if not path.is_file():
            continue
        for case in load_case_file(path, lookup=lookup):
            ids.claim(case)
            cases.append(case)
    return cases


class CaseIds:
    """Case ids seen so far: unique per op across all files, since they name the golden."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, str], Path] = {}

    def claim(self, case: Case) -> None:
        """Note ``case``; a second case of the same op and id in another file is an error."""
        first = self._first.setdefault((case.op, case.id), case.source)
        if first != case.source:
            raise CaseFileError(
                case.source,
                f"op '{case.op}' already has a case '{case.id}' in {first}",
                "rename one of them: the id names the golden file and the test",
                case=case.id,
            )


def load_case_file(path: Path, *, lookup: OpLookup = registry.get_op,
                   measuring: bool = False) -> list[Case]:
    """The cases of one TOML file, in file order; any mistake raises :class:`CaseFileError`.

    ``lookup`` maps an op name to its spec and raises KeyError for an unknown name; tests pass
    a fake one so they do not depend on the real ops. ``measuring``: the case is read to be
    calibrated, not gated, so a case off the default inputs may still lack the tables it
    needs (numcheck.caseparts.inputs.defaults_left): calibration is what writes them.
    """
    try:
        with path.open("rb") as handle:
            text = handle.read().decode()
        data = tomllib.loads(text)
    except OSError as exc:
        raise CaseFileError(path, f"cannot read the file ({exc})", "check the path") from exc
    except tomllib.TOMLDecodeError as exc:
        raise CaseFileError(
            path, f"not valid TOML: {exc}", "correct the TOML syntax at the position shown"
        ) from exc
    if not data:
        raise CaseFileError(
            path,
            "the file holds no cases",
            'add a case table, e.g. [my-case] with op = "<op name>", or delete the file',
        )
    # Where each key is set, read once now: messages name a budget's line from the record
    # made here (VariantBudget.origins), never by reading the file again.
    lines = key_lines(text)
    return [point for case_id, body in data.items()
            for point in _case_points(_Where(path, case_id, lines), body, lookup, measuring)]


def _case_points(where: _Where, body: Any, lookup: OpLookup, measuring: bool) -> list[Case]:
    """The case of one table; a sweep's points (one case each) for a table with ``sweep``."""
    case = _parse_case(where, body, lookup, measuring=measuring)
    if not isinstance(body, dict) or SWEEP_KEY not in body:
        return [case]
    return _sweep_points(where, body, lookup(case.op), case.preset, case)


@dataclass(frozen=True)
class _Where:
    """The file and case being parsed, to raise errors that name both; ``lines``: where
    each key of the file is set (key path -> line)."""

    path: Path
    case: str
    lines: Mapping[tuple[str, ...], int] = field(default_factory=dict)

    def error(self, key: str | None, problem: str, fix: str) -> CaseFileError:
        return CaseFileError(self.path, problem, fix, case=self.case, key=key)

    def case_lines(self) -> dict[tuple[str, ...], int]:
        """Every key of the case and its line, by the path below the case's table."""
        return {key[1:]: line for key, line in self.lines.items() if key[0] == self.case}


def _parse_case(where: _Where, body: Any, lookup: OpLookup, *,
                measuring: bool = False) -> Case:
    case_id = where.case
    if not CASE_ID_PATTERN.fullmatch(case_id):
        suggestion = re.sub(r"[^a-z0-9._-]+", "-", case_id.lower()).lstrip("._-") or "my-case"
        raise where.error(
            None,
            "the case id must match [a-z0-9][a-z0-9._-]* (it becomes a file name and a test id)",
            f"rename the table, e.g. [{suggestion}]",
        )
    if not isinstance(body, dict):
        raise where.error(
            None,
            f"a top-level value must be a case table, got {describe(body)}",
            f'write the case as a table: [{case_id}] followed by op = "<op name>" and its keys',
        )
    op = _parse_op(where, body, lookup)
    for key in body:
        if key not in CASE_KEYS:
            raise where.error(key, f"unknown case key '{key}'", _unknown_key_fix(key, op))
    description = body.get("description", "")
    if not isinstance(description, str):
        raise where.error(
            "description",
            f"expected a string, got {describe(description)}",
            'write description = "..."',
        )
    preset = _parse_preset(where, body, op)
    params = _parse_params(where, body, op, preset)
    seeds = _parse_seeds(where, body)
    devices = _parse_devices(where, body)
    variants = _parse_variants(where, body, op)
    perf_only = body.get("perf_only", False)
    if not isinstance(perf_only, bool):
        raise where.error("perf_only", f"expected true or false, got {describe(perf_only)}",
                          "write perf_only = true (a timing-only case without a golden)")
    if perf_only and body.get("budget"):
        raise where.error(
            "budget", "a perf-only case has no golden and runs no numerics, so its budget "
            "tables would gate nothing",
            "remove them (a CPU-sized case of the op gates its numerics), or remove "
            "perf_only = true and make the case's golden")
    runs_on, lines = _runs_on(op, variants, devices), where.case_lines()
    try:
        budgets = parse_budgets(case_id, where.path, lines, body, op, variants, runs_on,
                                measuring=measuring)
        deterministic, batch_invariant = (
            _parse_invariance(where, body, op, key, variants, devices, params, perf_only)
            for key in (DETERMINISTIC_KEY, BATCH_INVARIANT_KEY))
        expect = _parse_expect(where, body, op, variants, budgets, runs_on, perf_only,
                               {DETERMINISM_GATE.name: deterministic,
                                BATCH_INVARIANCE_GATE.name: batch_invariant})
    except BudgetError as exc:
        raise where.error(exc.key, exc.problem, exc.fix) from None
    perf = _parse_perf(where, body, op, variants, runs_on)
    overhead = _parse_overhead(where, body, op, variants, runs_on)
    provenance = _parse_provenance(where, body, op)
    inputs = _parse_inputs(where, body, op, seeds, params)
    left = defaults_left(inputs, variants, budgets, case=case_id)
    if left is not None and not measuring:
        raise where.error(left.key, left.problem, left.fix)
    return Case(
        id=case_id,
        op=op.name,
        preset=preset,
        params=params,
        seeds=seeds,
        devices=devices,
        variants=variants,
        budgets=budgets,
        source=where.path,
        description=description,
        expect=expect,
        perf=perf,
        perf_only=perf_only,
        overhead=overhead,
        provenance=provenance,
        lines=lines,
        inputs=inputs,
        deterministic=deterministic,
        batch_invariant=batch_invariant,
    )


def _parse_invariance(
    where: _Where, body: Mapping[str, Any], op: OpSpec, key: str, variants: tuple[str, ...],
    devices: tuple[str, ...], params: Mapping[str, Any], perf_only: bool,
) -> InvarianceSpec | None:
    """``deterministic`` or ``batch_invariant`` (numcheck.invariance.limits): off by default.

    Asking it of a perf-only case (no numerics run there), or batch invariance of an op that
    does not say what a request is, or of a request past the case's batch, is an error."""
    if key not in body:
        return None
    try:
        spec = parse_spec(key, body[key], running=(op.reference, *variants), devices=devices)
    except InvarianceError as exc:
        raise where.error(exc.key, exc.problem, exc.fix) from None
    if spec is None:
        return None
    if perf_only:
        raise where.error(key, "a perf-only case runs no numerics, and the gate runs with them",
                          "set it in a CPU-sized case of the op, or remove the key")
    if key == BATCH_INVARIANT_KEY:
        if op.batch is None:
            raise where.error(
                key, f"op '{op.name}' does not say what a request of its batch is, so a "
                "request cannot be computed alone", "declare OpSpec(batch=numcheck.Batch(...)) "
                "on the op (docs/extending.md, \"What a request is\"), or remove the key")
        _check_requests(where, op, spec, params)
    return spec


def _check_requests(where: _Where, op: OpSpec, spec: InvarianceSpec | None,
                    params: Mapping[str, Any], point: str = "") -> None:
    """Every request ``batch_invariant.requests`` names is in the batch (where the op names
    the parameter holding its size; elsewhere the check says so when it runs)."""
    size = op.batch.size_param if op.batch is not None else None
    if spec is None or spec.requests is None or size is None:
        return
    past = [r for r in spec.requests if r >= int(params[size])]
    if past:
        at = f" at sweep point {point}" if point else ""
        raise where.error(f"{BATCH_INVARIANT_KEY}.requests", f"request {past[0]} is not in the "
                          f"case's batch of {params[size]} ({size}){at}",
                          f"name requests from 0 to {int(params[size]) - 1}")


def _parse_inputs(where: _Where, body: Mapping[str, Any], op: OpSpec, seeds: tuple[int, ...],
                  params: dict[str, Any]) -> InputSpec:
    """The case's ``inputs`` (numcheck.caseparts.inputs); what it names joins the params."""
    try:
        spec = parse_inputs(body.get(INPUTS_KEY), op, folder=where.path.parent, seeds=seeds,
                            params=params)
    except InputsError as exc:
        raise where.error(exc.key, exc.problem, exc.fix) from None
    if spec.param() is not None:
        params[INPUTS_PARAM] = spec.param()
    return spec


def _sweep_points(where: _Where, body: Mapping[str, Any], op: OpSpec, preset: str | None,
                  case: Case) -> list[Case]:
    """One case per point of the case's ``sweep`` (numcheck.caseparts.sweep)."""
    if case.inputs.file is not None:
        raise where.error(SWEEP_KEY, "a case on recorded inputs cannot sweep shapes: the "
                          "recorded tensors are its shape", "remove the sweep, or the file")
    try:
        shape = {name: case.params[name] for name in body.get("shape", {})}
        points = expand(op, case.id, body[SWEEP_KEY], preset=preset, shape=shape)
    except SweepError as exc:
        raise where.error(exc.key, exc.problem, exc.fix) from None
    extra = {} if case.inputs.param() is None else {INPUTS_PARAM: case.inputs.param()}
    for point, params in points:
        _check_requests(where, op, case.batch_invariant, params, point.id)
    labels = [point.label for point, _ in points]
    for variant, expected in case.expect.items():
        unknown = [p for p in expected.points or () if p not in labels]
        if unknown:
            raise where.error(f"expect.{variant}.points", f"'{unknown[0]}' is not a point of "
                              "the case's sweep", f"name points among: {', '.join(labels)}")
    return [replace(case, id=point.id, params={**params, **extra}, sweep=point,
                    expect={v: e for v, e in case.expect.items()
                            if e.points is None or point.label in e.points})
            for point, params in points]


def _parse_provenance(
    where: _Where, body: Mapping[str, Any], op: OpSpec
) -> dict[str, CalibrationRecord]:
    """The calibration records of the case's variants (numcheck.numerics.calibration_record)."""
    given = _table(where, body, PROVENANCE, f"[{where.case}.{PROVENANCE}.<variant>] tables")
    records: dict[str, CalibrationRecord] = {}
    for variant, raw in given.items():
        if variant not in op.variants:
            raise where.error(f"{PROVENANCE}.{variant}", f"unknown variant '{variant}' for op "
                              f"'{op.name}'", f"use one of: {', '.join(op.variants)}")
        try:
            records[variant] = parse_record(variant, raw)
        except BudgetError as exc:
            raise where.error(f"{PROVENANCE}.{exc.key}", exc.problem, exc.fix) from None
    return records


#: The keys of ``expect.<variant>``: what is expected (any of the first four; ``fails`` is
#: the older name of ``metrics``), why, and at which sweep points.
EXPECT_KEYS = ("outputs", "gates", "metrics", "fails", "reason", "points")


def _parse_expect(
    where: _Where, body: Mapping[str, Any], op: OpSpec, variants: tuple[str, ...],
    budgets: Mapping[str, VariantBudget], runs_on: Mapping[str, tuple[str, ...]],
    perf_only: bool, invariance: Mapping[str, InvarianceSpec | None],
) -> dict[str, Expectation]:
    """``expect.<variant>`` tables. Whatever an expectation names must be able to fail the
    variant in this case (checked on a device that runs it, a limit of its budget or a rule,
    measured): an expected failure nothing can catch is an error, as a limit that gates
    nothing is."""
    example = 'expect.bf16_roundtrip = { gates = ["casts"], reason = "..." }'
    given = _table(where, body, "expect", example)
    topk_output = op.topk.indices if op.topk is not None else None
    known: dict[str, tuple[str, ...]] = {
        name: TOPK_METRICS if name == topk_output else OUTPUT_METRICS for name in op.outputs
    }
    known.update({name: gate.metrics for name, gate in GATES.items()})
    out: dict[str, Expectation] = {}
    for variant, spec in given.items():
        key = f"expect.{variant}"
        if variant not in variants:
            raise where.error(
                key,
                f"'{variant}' is not a variant this case runs",
                f"use one of: {', '.join(variants)}",
            )
        if not isinstance(spec, dict):
            raise where.error(key, f"expected a table, got {describe(spec)}", f"write {example}")
        unknown = [k for k in spec if k not in EXPECT_KEYS]
        named = [k for k in ("outputs", "gates", "metrics", "fails") if k in spec]
        if unknown or not named or "reason" not in spec:
            problem = (f"unknown key '{unknown[0]}'" if unknown else
                       "needs a reason and what is expected to fail (outputs, gates or metrics)")
            raise where.error(key, problem,
                              f"write {example}, or name outputs = [...] or metrics = "
                              f"[\"<gate or output>.<metric>\", ...]")
        if "metrics" in spec and "fails" in spec:
            raise where.error(f"{key}.fails", "fails is the older name of metrics: both given",
                              "keep one of them (metrics)")
        reason = spec["reason"]
        if not isinstance(reason, str) or not reason:
            raise where.error(f"{key}.reason", "expected a non-empty string", "say why it fails")
        lists = {k: _expect_list(where, f"{key}.{k}", spec[k], example) for k in named}
        outputs = lists.get("outputs", [])
        gates = lists.get("gates", [])
        metrics = lists.get("metrics", []) + lists.get("fails", [])
        for name in outputs:
            if name not in op.outputs:
                fix = (f"'{name}' is a gate: write gates = [\"{name}\"]" if name in GATES
                       else f"use outputs of op '{op.name}': {', '.join(op.outputs)}")
                raise where.error(f"{key}.outputs", f"unknown output '{name}'", fix)
            require_checked(f"{key}.outputs", op, variant, name)
        for name in gates:
            if name not in GATES:
                fix = (f"'{name}' is an output: write outputs = [\"{name}\"]"
                       if name in op.outputs else f"use gates among: {', '.join(sorted(GATES))}")
                raise where.error(f"{key}.gates", f"unknown gate '{name}'", fix)
        listed = "metrics" if "metrics" in spec else "fails"
        for item in metrics:
            gate, _, metric = item.partition(".")
            if gate not in known or metric not in known[gate]:
                names = ", ".join(f"{g}.<{'|'.join(m)}>" for g, m in sorted(known.items()))
                raise where.error(
                    f"{key}.{listed}",
                    f"unknown gate metric {item!r}",
                    f"name a '<gate>.<metric>' among: {names}",
                )
        points = None
        if "points" in spec:
            if SWEEP_KEY not in body:
                raise where.error(f"{key}.points", "the case sweeps nothing, and points names "
                                  "sweep points", "remove points (the expectation holds for "
                                  "the case), or sweep the case")
            points = tuple(dict.fromkeys(_expect_list(where, f"{key}.points", spec["points"],
                                                      'points = ["tokens7"]')))
        whole = [*outputs, *gates]
        covered = [f"{g}.{m}" for g in whole for m in known[g]
                   if g in op.outputs or m not in GATES[g].inconclusive]
        fails = tuple(dict.fromkeys([*covered, *metrics]))
        expectation = Expectation(fails, reason, tuple(dict.fromkeys(outputs)),
                                  tuple(dict.fromkeys(gates)), points)
        for item in metrics:
            if item.partition(".")[0] in op.outputs:
                require_checked(f"{key}.{listed}", op, variant, item.partition(".")[0])
        _check_expect_can_fail(where, key, op, variant, expectation, budgets[variant],
                               runs_on[variant], perf_only, invariance)
        out[variant] = expectation
    return out


def _expect_list(where: _Where, key: str, value: Any, example: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise where.error(key, "expected a non-empty list", f"write {example}")
    for item in value:
        if not isinstance(item, str):
            raise where.error(key, f"expected strings, got {describe(item)}", f"write {example}")
    return value


def _check_expect_can_fail(
    where: _Where, key: str, op: OpSpec, variant: str, expected: Expectation,
    budget: VariantBudget, devices: tuple[str, ...], perf_only: bool,
    invariance: Mapping[str, InvarianceSpec | None],
) -> None:
    """Every output, gate and metric an expectation names can fail the variant here."""
    topk_output = op.topk.indices if op.topk is not None else None
    for gate, spec in invariance.items():
        if gate not in expected.targets():
            continue
        case_key = GATES[gate].case_key
        if spec is None or not any(spec.holds(variant, d) for d in devices):
            raise where.error(
                key, f"it expects the {gate} gate to fail, which holds '{variant}' only where "
                f"the case's {case_key} key names it, and it does not here", f"add '{variant}' "
                f"to {case_key} (on a device it runs on), or expect another gate")
    if op.variants[variant].produces is not None and "perf" in expected.targets():
        raise where.error(
            key, f"it expects the perf gate to fail, which never times '{variant}': it computes "
            "part of the op, and a speedup against the whole reference is not like for like",
            "expect another gate")
    for target, metrics in expected.targets().items():
        if target in op.outputs and perf_only:
            raise where.error(
                key, f"it expects output '{target}' to fail, but a perf-only case runs no "
                "numerics", "expect gates of this case (perf, casts), or move the expectation "
                "to a case with a golden")
        if target == QUANT_GATE.name and op.variants[variant].quant is None:
            raise where.error(
                key, f"it expects the quant gate to fail, which checks a variant's declared "
                f"quantization, and '{variant}' declares none", "declare the variant's "
                "quantization (Variant(quant=GemmQuant(...))), or expect another gate")
        if target == KERNELS_GATE.name and "cuda" not in devices:
            raise where.error(
                key, f"it expects the kernels gate to fail, which audits CUDA kernels only, and "
                f"'{variant}' is never checked on CUDA in this case", 'add "cuda" to the '
                "case's devices, or expect another gate")
        if target not in op.outputs or metrics is None:
            continue
        if target == topk_output:
            limits = budget.topk.limits if budget.topk is not None else {}
        else:
            limits = budget.outputs[target].limits
        for metric in metrics:
            if metric in NONFINITE_METRICS or metric in limits:
                continue
            missing = None
            if target != topk_output:
                spec = op.variants[variant]
                cls = yardstick(op, spec.precision, target)
                missing = missing_envelope(op, cls, devices, installed=False,
                                           quant=spec.quant if cls == spec.precision else None)
            if missing is not None and metric == "max_err_ratio":
                raise where.error(
                    key, f"it expects {target}.{metric} to fail, which cannot be measured "
                    f"here: {missing.problem}",
                    f'expect outputs = ["{target}"] (any of its violations); {missing.fix}')
            raise where.error(
                key, f"it expects {target}.{metric} to fail, which is no limit of "
                f"'{variant}''s budget on '{target}', so it can never fail",
                f'expect outputs = ["{target}"] (any of its violations), or set a {metric} '
                f"limit in [{where.case}.budget.{variant}.{target}]")


def _table(where: _Where, body: Mapping[str, Any], key: str, example: str) -> dict[str, Any]:
    """The case's sub-table ``key`` (empty when absent); any other value is an error."""
    given = body.get(key, {})
    if not isinstance(given, dict):
        raise where.error(key, f"expected a table, got {describe(given)}", f"write {example}")
    return given


def _parse_perf(
    where: _Where, body: Mapping[str, Any], op: OpSpec, variants: tuple[str, ...],
    runs_on: Mapping[str, tuple[str, ...]],
) -> dict[str, PerfSpec]:
    """``perf`` options shared by the case's variants, then ``perf.<variant>`` tables.

    A ``speedup_min`` for a device class no check of it runs on would gate nothing: an
    error (per variant; a shared one when it holds for no variant there)."""
    example = f"[{where.case}.perf.<variant>] with speedup_min = {{ H200 = 1.1 }}"
    given = _table(where, body, "perf", example)
    running = (op.reference, *variants)
    shared = {k: v for k, v in given.items() if k in PERF_OPTIONS}
    for name, table in given.items():
        if name in PERF_OPTIONS:
            continue
        key = f"perf.{name}"
        if name not in running:
            known = ", ".join(sorted(PERF_OPTIONS))
            raise where.error(
                key, f"'{name}' is neither a perf option nor a variant this case runs",
                f"use options among: {known}; or a variant table among: {', '.join(running)}",
            )
        if not isinstance(table, dict):
            raise where.error(key, f"expected a table, got {describe(table)}", f"write {example}")
    out: dict[str, PerfSpec] = {}
    for variant in running:
        options = dict(shared)
        if variant == op.reference or op.variants[variant].produces is not None:
            # The shared threshold gates the variants the perf gate times: never the
            # reference, nor a variant that computes part of the op (not timed).
            options.pop("speedup_min", None)
        if op.variants[variant].produces is not None and "speedup_min" in given.get(variant, {}):
            raise where.error(
                f"perf.{variant}.speedup_min", f"'{variant}' computes part of the op "
                f"({', '.join(op.produced(variant))}), and the perf gate never times it "
                "against the whole reference (not like for like), so this would gate nothing",
                "remove the key (its outputs are still checked), or time the part against "
                "a reference of that part: an op of its own (docs/extending.md)")
        options.update(given.get(variant, {}))
        out[variant] = _perf_spec(where, variant, options, op.reference)
    for variant, spec in out.items():
        own = "speedup_min" in given.get(variant, {})
        for cls in spec.speedup_min:
            device = class_kind(cls)
            if device in runs_on[variant] or (
                    not own and any(device in runs_on[v] for v in variants)):
                continue
            key = f"perf.{variant}.speedup_min.{cls}" if own else f"perf.speedup_min.{cls}"
            whose = f"variant '{variant}' is" if own else "the case's variants are"
            raise where.error(
                key, f"{whose} never checked on {device} in this case (devices: "
                f"{', '.join(runs_on[variant]) or 'none'}), so this threshold would gate nothing",
                f"add \"{device}\" to the case's devices, or remove the key")
    return out


def _class_values(where: _Where, key: str, table: Mapping[str, Any]
                  ) -> tuple[dict[str, float], bool]:
    """A table of numbers keyed by device class (``{ H200 = 1.53, H100 = 1.45 }``) and its
    ``every_class`` flag: every key ``cpu`` or a GPU model numcheck knows, every value a
    number > 0; the kind ``cuda`` only beside ``every_class = true`` (measured to hold on
    every GPU model). Anything else is an error naming the key and the fix."""
    every = table.get(EVERY_CLASS, False)
    if not isinstance(every, bool):
        raise where.error(f"{key}.{EVERY_CLASS}", f"expected true or false, got {describe(every)}",
                          f"write {EVERY_CLASS} = true (the cuda value holds on every GPU "
                          "model), or leave it out")
    out: dict[str, float] = {}
    for cls, value in table.items():
        if cls == EVERY_CLASS:
            continue
        problem = None if every and cls == "cuda" else class_key_problem(cls)
        if problem is not None:
            raise where.error(f"{key}.{cls}", problem[0], problem[1])
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise where.error(f"{key}.{cls}", f"expected a number > 0, got {describe(value)}",
                              f"write {key.rpartition('.')[2]} = {{ {cls} = 1.1 }}")
        out[cls] = float(value)
    if every and "cuda" not in out:
        raise where.error(f"{key}.{EVERY_CLASS}", "every_class = true names the value that "
                          "holds on every GPU model, and this table has no cuda value",
                          "add cuda = <value> beside it, or remove every_class")
    return out, every


def _perf_spec(where: _Where, variant: str, options: dict[str, Any], reference: str) -> PerfSpec:
    values: dict[str, Any] = {}
    for name, value in options.items():
        key = f"perf.{variant}.{name}"
        expected = PERF_OPTIONS.get(name)
        if expected is None:
            raise where.error(key, f"unknown perf option '{name}'",
                              f"use one of: {', '.join(sorted(PERF_OPTIONS))}")
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if (isinstance(value, bool) and expected is not bool) or not isinstance(value, expected):
            fix = ("write speedup_min = { H200 = 1.1 } (device class -> minimum speedup)"
                   if name == "speedup_min" else f"write {name} = <{_type_word(expected)}>")
            raise where.error(key, f"expected {_type_word(expected)}, got {describe(value)}", fix)
        values[name] = value
    if "speedup_min" in values:
        if variant == reference:
            raise where.error(f"perf.{variant}.speedup_min",
                              f"'{variant}' is the reference: its speedup over itself is 1",
                              "gate the variants instead: [<case>.perf.<variant>]")
        values["speedup_min"], values["every_class"] = _class_values(
            where, f"perf.{variant}.speedup_min", values["speedup_min"])
    for name, (low, high) in PERF_BOUNDS.items():
        if name in values and not low <= values[name] <= high:
            raise where.error(f"perf.{variant}.{name}", f"{values[name]} is out of range",
                              f"use a value in [{low:g}, {high:g}]")
    return PerfSpec(**values)


def _parse_overhead(
    where: _Where, body: Mapping[str, Any], op: OpSpec, variants: tuple[str, ...],
    runs_on: Mapping[str, tuple[str, ...]],
) -> dict[str, OverheadBudget]:
    """``[<case>.overhead.<variant>]`` tables, completed from the variant's precision.

    A limit of the kernels gate (CUDA only) for a variant the case never checks on CUDA
    would gate nothing: an error."""
    example = f"[{where.case}.overhead.<variant>] with keys among: {', '.join(OVERHEAD_KEYS)}"
    given = _table(where, body, "overhead", example)
    running = (op.reference, *variants)
    for name, table in given.items():
        key = f"overhead.{name}"
        if name not in running:
            raise where.error(key, f"'{name}' is not a variant this case runs",
                              f"use one of: {', '.join(running)}")
        if not isinstance(table, dict):
            raise where.error(key, f"expected a table, got {describe(table)}", f"write {example}")
        for limit in table:
            if limit in KERNEL_LIMITS and "cuda" not in runs_on[name]:
                raise where.error(
                    f"{key}.{limit}", f"'{limit}' is a limit of the kernels gate, which audits "
                    f"CUDA kernels only, and '{name}' is never checked on CUDA in this case "
                    f"(devices: {', '.join(runs_on[name]) or 'none'}), so it would gate nothing",
                    'add "cuda" to the case\'s devices, or remove the key')
    out: dict[str, OverheadBudget] = {}
    for name in running:
        try:
            out[name] = complete_overhead(op.variants[name].precision, given.get(name, {}))
        except OverheadError as exc:
            raise where.error(f"overhead.{name}.{exc.key}", exc.problem, exc.fix) from None
    return out


def _parse_op(where: _Where, body: Mapping[str, Any], lookup: OpLookup) -> OpSpec:
    if "op" not in body:
        raise where.error("op", "the case names no op", 'add op = "<op name>" to the case table')
    name = body["op"]
    if not isinstance(name, str):
        raise where.error(
            "op", f"expected a string, got {describe(name)}", 'write op = "<op name>"'
        )
    try:
        return lookup(name)
    except KeyError as exc:
        detail = exc.args[0] if exc.args and isinstance(exc.args[0], str) else ""
        problem = detail if detail.startswith("unknown op") else f"unknown op '{name}'"
        raise where.error("op", problem, "use the name of a registered op") from None


def _parse_preset(where: _Where, body: Mapping[str, Any], op: OpSpec) -> str | None:
    preset = body.get("preset")
    if preset is None:
        return None
    known = ", ".join(op.presets) or "none"
    if not isinstance(preset, str):
        raise where.error(
            "preset",
            f"expected a string, got {describe(preset)}",
            f'write preset = "<name>" with one of: {known}',
        )
    if preset not in op.presets:
        fix = (
            f"use one of: {known}"
            if op.presets
            else "remove the key: this op has no presets; set values in shape"
        )
        raise where.error("preset", f"unknown preset '{preset}' for op '{op.name}'", fix)
    return preset


def _parse_params(
    where: _Where, body: Mapping[str, Any], op: OpSpec, preset: str | None
) -> dict[str, Any]:
    shape = body.get("shape", {})
    if not isinstance(shape, dict):
        raise where.error(
            "shape",
            f"expected a table, got {describe(shape)}",
            "write shape = { name = value, ... }",
        )
    known = ", ".join(op.params) or "none"
    overrides: dict[str, Any] = {}
    for name, value in shape.items():
        key = f"shape.{name}"
        if name not in op.params:
            raise where.error(
                key, f"unknown shape parameter '{name}' for op '{op.name}'", f"use one of: {known}"
            )
        spec = op.params[name]
        expected = spec.type
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        # bool is a subclass of int in Python, but `batch = true` is a mistake, not 1.
        if (isinstance(value, bool) and expected is not bool) or not isinstance(value, expected):
            raise where.error(
                key,
                f"expected {_type_word(expected)}, got {describe(value)}",
                f"write e.g. {name} = {_toml_literal(spec.default)}",
            )
        overrides[name] = value
    params = op.resolve_params(preset, overrides)
    for problem in check_params(op, params):
        source = "" if problem.key in shape or preset is None else f" (from preset '{preset}')"
        raise where.error(f"shape.{problem.key}", problem.problem + source, problem.fix)
    return params


def _parse_seeds(where: _Where, body: Mapping[str, Any]) -> tuple[int, ...]:
    seeds = body.get("seeds", [0])
    fix = "write seeds = [0, 1]: a non-empty array of distinct integers >= 0"
    if not isinstance(seeds, list):
        raise where.error("seeds", f"expected an array of integers, got {describe(seeds)}", fix)
    if not seeds:
        raise where.error("seeds", "the array is empty, so the case would never run", fix)
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise where.error("seeds", f"expected integers, got {describe(seed)}", fix)
        if seed < 0:
            raise where.error("seeds", f"seed {seed} is negative", fix)
    duplicates = sorted({seed for seed in seeds if seeds.count(seed) > 1})
    if duplicates:
        raise where.error(
            "seeds", f"seed {duplicates[0]} is listed more than once", "list each seed once"
        )
    return tuple(seeds)


def _parse_devices(where: _Where, body: Mapping[str, Any]) -> tuple[str, ...]:
    devices = body.get("devices", list(registry.DEVICES))
    known = ", ".join(registry.DEVICES)
    fix = f'write devices = ["cpu"], a non-empty array of distinct names among: {known}'
    names = _string_list(where, "devices", devices, fix)
    for name in names:
        if name not in registry.DEVICES:
            raise where.error("devices", f"unknown device '{name}'", f"use one of: {known}")
    # Kept in registry order so test ids do not depend on how the file lists them.
    return tuple(name for name in registry.DEVICES if name in names)


def _parse_variants(where: _Where, body: Mapping[str, Any], op: OpSpec) -> tuple[str, ...]:
    """The variants the case checks: those it lists, or, when it lists none, every variant
    but the reference and the low-precision ones (those that declare their quantization:
    their budgets belong to their scheme and are measured for a case, so a case names them;
    every variant when the op has no other)."""
    checked = [name for name in op.variants if name != op.reference]
    if "variants" not in body:
        plain = [name for name in checked if op.variants[name].quant is None]
        return tuple(plain or checked)
    known = ", ".join(checked) or "none"
    fix = f'write variants = ["{checked[0] if checked else "..."}"], using names among: {known}'
    names = _string_list(where, "variants", body["variants"], fix)
    for name in names:
        if name == op.reference:
            raise where.error(
                "variants",
                f"'{name}' is the reference of op '{op.name}'; it always runs to make the golden",
                f"list only variants to check: {known}",
            )
        if name not in op.variants:
            raise where.error(
                "variants", f"unknown variant '{name}' for op '{op.name}'", f"use one of: {known}"
            )
    return tuple(name for name in checked if name in names)


def _runs_on(op: OpSpec, variants: tuple[str, ...],
             devices: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The devices each running variant (the reference too) may be checked on in this case:
    the case's devices it is declared to run on, or all of them for a variant whose devices
    depend on the install (its ``unavailable`` says why: a Triton variant runs on the CPU or
    on CUDA depending on the process). Where a limit can be measured is decided on these,
    so a case file means the same in every install."""
    out = {}
    for name in (op.reference, *variants):
        spec = op.variants[name]
        out[name] = tuple(d for d in devices if d in spec.devices or spec.unavailable)
    return out


def _string_list(where: _Where, key: str, value: Any, fix: str) -> list[str]:
    if not isinstance(value, list):
        raise where.error(key, f"expected an array of strings, got {describe(value)}", fix)
    if not value:
        raise where.error(key, "the array is empty, so the case would never run", fix)
    for item in value:
        if not isinstance(item, str):
            raise where.error(key, f"expected strings, got {describe(item)}", fix)
    for item in value:
        if value.count(item) > 1:
            raise where.error(key, f"'{item}' is listed more than once", "list each name once")
    return value


def _unknown_key_fix(key: str, op: OpSpec) -> str:
    allowed = f"case keys are: {', '.join(CASE_KEYS)}"
    if key in op.params:
        return f"shape parameters go in shape = {{ {key} = ... }}; {allowed}"
    if key in op.variants or key in op.outputs:
        return f"budgets go in [<case>.budget.<variant>.<output>] tables; {allowed}"
    return f"remove or rename it; {allowed}"


def _type_word(expected: type) -> str:
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
             dict: "a table"}
    return words.get(expected, f"a {expected.__name__}")


def _toml_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else "-inf" if value < 0 else "nan"
    return repr(value)
