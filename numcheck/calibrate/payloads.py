"""What one calibration check measured (a *payload*), typed, and its plain-data form.

``pytest --numcheck --numcheck-calibrate`` measures each selected (case, variant, device)
check in the process that runs it (:mod:`numcheck.plugin.calibration`) and concludes on the
controller (:mod:`numcheck.calibrate.plan`, :mod:`numcheck.calibrate.speed`). In between a
payload crosses process boundaries twice: on the test report to the pytest-xdist controller
(``report.user_properties``, which xdist serialises), and through a
``--numcheck-calibrate-json`` file into a later run (``--numcheck-calibrate-with``). It is a
:class:`NumericsPayload` or a :class:`SpeedPayload` everywhere in the code, and plain JSON
values (:func:`payload_to_data`, :func:`payload_from_data`) only on those two crossings; the
plain form is the file format, unchanged (:data:`RUN_FORMAT`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from numcheck.calibrate import Worst, WorstTable
from numcheck.numerics.budgets import BudgetError
from numcheck.numerics.calibration_record import CalibrationRecord, parse_record

#: The format tag of a --numcheck-calibrate-json file.
RUN_FORMAT = 1


@dataclass(frozen=True)
class CheckRef:
    """The check that measured a payload: its op and case, its case file (as shown, and its
    absolute path, which edits are written to), its device and its pytest node id; for a
    point of a shape sweep, ``case`` is the sweep's (its budget tables are one) and ``point``
    the point's label."""

    op: str
    case: str
    source: str
    path: str
    device: str
    nodeid: str
    point: str | None = None


@dataclass(frozen=True, kw_only=True)
class NumericsPayload:
    """A variant's worst values over the calibration seeds, and what its case says of it.

    ``own_check`` is True for the selected check's own variant; False for a pool member the
    run selected no check of, measured by this check with this check's budget.
    """

    kind: Literal["numerics"] = field(default="numerics", init=False)
    check: CheckRef
    variant: str
    own_check: bool
    #: Every seed measured: the case's own, then ``fresh`` more from ``first_seed`` on.
    seeds: tuple[int, ...]
    fresh: int
    first_seed: int
    #: The op's top-k width (0 without a top-k output) and the top-k output's name.
    k: int
    topk_output: str | None
    #: Output -> the budget keys the variant's budget gates.
    gated: Mapping[str, tuple[str, ...]]
    reference: str
    #: Where the reference the variant was compared with ran.
    reference_device: str
    #: The variant whose budgets this one takes (``budget_like``), if any.
    budget_like: str | None
    precision: str
    output_precision: Mapping[str, str]
    #: A known-bad variant's expected failures (``expect``), as violation keys.
    expect: tuple[str, ...]
    table: WorstTable
    #: A variant with a declared quantization: the simulated reference's default row of its
    #: sums (numcheck.numerics.budgets.sim_default_row: its name, its limits), the class
    #: bound its ``sim_*`` measurements are judged against; None otherwise, or where its
    #: sums have none.
    sims: tuple[str, Mapping[str, float]] | None = None
    # What only a selected check's own payload carries (``own_check``):
    #: The variants budgeted as one with it (itself first), and where that came from
    #: ("option", "record", or None for itself alone); members the op lacks.
    pool: tuple[str, ...] = ()
    pool_from: str | None = None
    pool_missing: tuple[str, ...] = ()
    #: Members of the table's recorded pool the run's ``--numcheck-calibrate-pool`` names as
    #: removed (``-member``): a pool that leaves a recorded member out says so.
    pool_removed: tuple[str, ...] = ()
    #: The budget in force: output -> key -> limit (the top-k tie band as ``tie_band_<kind>``).
    limits: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: The calibration record of the variant's tables in the case file, if any.
    record: CalibrationRecord | None = None
    #: Where each key of the variant's budget is set, in the plain form of
    #: :func:`numcheck.numerics.budget_origin.origins_to_dict` (output -> key -> origin):
    #: which table a suggestion belongs to (:mod:`numcheck.calibrate.plan`).
    origins: Mapping[str, Any] = field(default_factory=dict)


class SpeedRun(NamedTuple):
    """One timing run's point speedup and its interval."""

    median: float
    low: float
    high: float


@dataclass(frozen=True, kw_only=True)
class SpeedPayload:
    """A variant's timing runs against its reference, for a ``speedup_min`` proposal."""

    kind: Literal["speed"] = field(default="speed", init=False)
    check: CheckRef
    variant: str
    runs: tuple[SpeedRun, ...]
    #: A known-bad variant expected to fail the speed gate (it keeps failing).
    expected_fail: bool
    #: The case file's ``speedup_min`` on this device's class, if it sets one.
    current: float | None
    #: The class of the device the runs were timed on (``cpu``, ``H100``): the key of the
    #: threshold they propose.
    device_class: str = ""

    @property
    def on(self) -> str:
        """The device class the runs came from (the check's device kind in older files)."""
        return self.device_class or self.check.device


Payload = NumericsPayload | SpeedPayload


def payload_to_data(payload: Payload) -> dict[str, Any]:
    """A payload as plain JSON values, in the file format's key order."""
    ref = payload.check
    out: dict[str, Any] = {"op": ref.op, "case": ref.case, "source": ref.source,
                           "path": ref.path, "device": ref.device, "nodeid": ref.nodeid,
                           "kind": payload.kind}
    if ref.point is not None:
        out["point"] = ref.point
    if isinstance(payload, SpeedPayload):
        return {**out, "variant": payload.variant, "runs": [list(r) for r in payload.runs],
                "expected_fail": payload.expected_fail, "current": payload.current,
                **({"device_class": payload.device_class} if payload.device_class else {})}
    p = payload
    out |= {"seeds": list(p.seeds), "fresh": p.fresh, "first_seed": p.first_seed, "k": p.k,
            "topk_output": p.topk_output,
            "gated": {name: list(keys) for name, keys in p.gated.items()},
            "reference": p.reference, "reference_device": p.reference_device,
            "budget_like": p.budget_like, "precision": p.precision,
            "output_precision": dict(p.output_precision),
            "origins": dict(p.origins),
            "variant": p.variant, "runs": p.own_check, "expect": list(p.expect)}
    if p.sims is not None:
        out["sims"] = {"name": p.sims[0], "row": dict(p.sims[1])}
    if p.own_check:
        out |= {"pool": list(p.pool), "pool_from": p.pool_from,
                "pool_missing": list(p.pool_missing),
                "limits": {name: dict(keys) for name, keys in p.limits.items()},
                "record": p.record.as_table() if p.record is not None else None}
        if p.pool_removed:  # keys added later are written only where they say something
            out["pool_removed"] = list(p.pool_removed)
    # The worst table as JSON-able [value, seed, variant] lists.
    out["table"] = {o: {m: [w.value, w.seed, w.variant] for m, w in row.items()}
                    for o, row in p.table.items()}
    return out


def payload_from_data(data: Mapping[str, Any]) -> Payload:
    """A payload from its plain form; ValueError when it is not one.

    Keys that older files may lack are optional, with the values that mean "not said".
    """
    try:
        point = data.get("point")
        ref = CheckRef(*(str(data[k]) for k in ("op", "case", "source", "path", "device",
                                                 "nodeid")),
                       point=None if point is None else str(point))
        kind = data["kind"]
        if kind == "speed":
            current = data.get("current")
            return SpeedPayload(
                check=ref, variant=str(data["variant"]),
                runs=tuple(SpeedRun(*(float(x) for x in r)) for r in data["runs"]),
                expected_fail=bool(data["expected_fail"]),
                current=None if current is None else float(current),
                device_class=str(data.get("device_class") or ""))
        if kind != "numerics":
            raise ValueError(f"kind {kind!r}: neither 'numerics' nor 'speed'")
        variant = str(data["variant"])
        record = None
        if data.get("record"):
            try:
                record = parse_record(variant, data["record"])
            except BudgetError:
                record = None  # the case file's loader reports a broken record
        sims = data.get("sims")
        return NumericsPayload(
            check=ref, variant=variant, own_check=bool(data["runs"]),
            seeds=tuple(int(s) for s in data.get("seeds", ())),
            fresh=int(data.get("fresh") or 0), first_seed=int(data.get("first_seed") or 0),
            k=int(data["k"]), topk_output=data["topk_output"],
            gated={str(o): tuple(keys) for o, keys in data["gated"].items()},
            reference=str(data["reference"]), reference_device=str(data["reference_device"]),
            budget_like=data.get("budget_like"), precision=str(data.get("precision") or ""),
            output_precision=dict(data.get("output_precision") or {}),
            origins=dict(data.get("origins") or {}),
            expect=tuple(data["expect"]),
            table={o: {m: Worst(float(w[0]), int(w[1]), str(w[2])) for m, w in row.items()}
                   for o, row in data["table"].items()},
            pool=tuple(data.get("pool") or ()), pool_from=data.get("pool_from"),
            pool_missing=tuple(data.get("pool_missing") or ()),
            pool_removed=tuple(data.get("pool_removed") or ()),
            sims=None if not sims else (str(sims["name"]),
                                        {str(k): float(v) for k, v in sims["row"].items()}),
            limits={str(o): dict(keys) for o, keys in (data.get("limits") or {}).items()},
            record=record)
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"not a calibration payload ({type(exc).__name__}: {exc})") from None


def save_run(path: Path, payloads: Sequence[Payload], *, torch_version: str) -> None:
    """This run's measurements as JSON, for ``--numcheck-calibrate-with`` elsewhere."""
    data = {"numcheck_calibration": RUN_FORMAT, "torch": torch_version,
            "devices": sorted({p.check.device for p in payloads}),
            "payloads": [payload_to_data(p) for p in payloads]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def read_run(path: Path) -> list[Payload]:
    """The measurements of a ``--numcheck-calibrate-json`` file.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not JSON, or not a calibration file of :data:`RUN_FORMAT`.
    """
    data = json.loads(path.read_text())
    ok = isinstance(data, dict) and data.get("numcheck_calibration") == RUN_FORMAT
    payloads = data.get("payloads") if ok else None
    if not isinstance(payloads, list) or not all(isinstance(p, dict) for p in payloads):
        raise ValueError(f"not a numcheck calibration file (format {RUN_FORMAT})")
    return [payload_from_data(p) for p in payloads]
