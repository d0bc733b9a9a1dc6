"""The machine-readable result of a run: one plain record per (case, variant, device).

Everything a reader of a run needs (the terminal summary, ``--numcheck-report`` JSON, the
markdown summary, baseline drift, the junitxml properties) is built from the same
:class:`Record` values, so they always agree. A record is a dataclass of plain values
(str, int, float, None, lists and dicts of them): it crosses from a pytest-xdist worker to the
controller unchanged, and ``record_to_dict`` / ``record_from_dict`` round-trip it exactly.

The JSON layout is versioned by :data:`SCHEMA_VERSION` and documented in docs/report.md.
Nothing here imports pytest or torch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numcheck._version import __version__
from numcheck.disk.atomic import atomic_write
from numcheck.errors import NumcheckError
from numcheck.numerics.budget_origin import NotMeasured, origin_to_dict
from numcheck.numerics.metric_names import (
    ERROR_METRICS,
    KEY_METRICS,
    MAX_FLIPS,
    SIM_METRICS,
    TOPK_COUNTS,
    TOPK_LIMITS,
)
from numcheck.report.drift_result import Drift

if TYPE_CHECKING:
    from numcheck.check.result import CheckResult

#: Bump on any change a reader of old reports would trip on (renamed or retyped fields).
#: Adding an optional field does not bump it: readers ignore fields they do not know.
SCHEMA_VERSION = 1

#: Record statuses. ``error``: no verdict (golden missing/stale/corrupt, variant raised,
#: the check crashed); ``error_kind`` says which.
STATUSES = ("pass", "fail", "xfail", "skip", "error")

class ReportError(NumcheckError):
    """A report file that cannot be read: names the file, the problem and the fix."""

    def __init__(self, path: Path | str, problem: str, fix: str) -> None:
        super().__init__(None, problem, fix, path=path)


@dataclass
class Record:
    """The verdict of one (case, variant, device) check, as plain data.

    ``metrics`` holds, per output, the worst value over seeds of every error metric (max for
    errors); ``topk`` the worst top-k statistics (min for recalls, sums for flip counts);
    ``per_seed`` the same per seed. ``closest`` is, for a failure, the worst violation and,
    for a pass, the gated metric nearest its budget: ``{output, metric, value, limit}``.

    ``timing`` and ``casts`` are None when not measured. When measured, ``timing`` carries at
    least ``{"speedup": float, "ci_low": float, "ci_high": float}`` (variant vs reference,
    with a confidence interval) and ``casts`` a summary of cast/copy overhead per call;
    ``prepared`` the variant's one-time preparation, apart from it; docs/report.md lists
    their fields. ``worker`` and ``device_index`` say where the check ran (a
    pytest-xdist worker id and the CUDA device index); they are not part of the verdict.
    """

    id: str
    nodeid: str
    op: str
    case: str
    variant: str
    device: str
    status: str
    reason: str = ""
    error_kind: str | None = None
    precision: str | None = None
    source: str | None = None
    seeds: list[int] = field(default_factory=list)
    budget: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    topk: dict[str, Any] | None = None
    per_seed: list[dict[str, Any]] = field(default_factory=list)
    violations: list[dict[str, Any]] = field(default_factory=list)
    closest: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    casts: dict[str, Any] | None = None
    device_name: str | None = None
    device_index: int | None = None
    worker: str | None = None
    #: Compact plot data for the HTML report (numcheck.check.plotdata; docs/report.md), or None.
    plots: dict[str, Any] | None = None
    #: What a reader of the row must know beyond the verdict (e.g. tf32 = fp32 on the CPU).
    note: str | None = None
    #: For a failure: where the error of each failing output sits (numcheck/localize/failure.py).
    localization: list[dict[str, Any]] | None = None
    #: Seconds of the check's first call of its variant (compile and warm-up, timed apart
    #: and never by the perf gate: numcheck/check/firstcall.py); None when it made none.
    first_call_s: float | None = None
    #: The variant's one-time preparation (numcheck/prepare.py): what it made and its own
    #: cast ledger, apart from the per-call ``casts``; None for a variant without one.
    prepared: dict[str, Any] | None = None
    #: Where each value of ``budget`` is set, laid out as ``budget`` (output or ``topk`` ->
    #: key -> origin as JSON data, numcheck/numerics/budget_origin.py), and the limits the
    #: check did not hold because nothing measured them (kind ``unmeasured``, with why);
    #: empty without a verdict.
    budget_origin: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: What the determinism and batch-invariance gates measured (numcheck/invariance/limits.py:
    #: the outputs compared, the runs and the requests alone, and their differences); None
    #: when neither ran.
    invariance: dict[str, Any] | None = None
    #: The op's outputs the variant does not compute (``Variant.produces``): not checked,
    #: shown as not produced; empty for a variant that computes them all.
    not_produced: list[str] = field(default_factory=list)
    #: For a point of a shape sweep: ``{case, point, values, index, count}`` (the sweep
    #: case, the point's label and values: numcheck/caseparts/sweep.py); None otherwise.
    #: The summaries fold a sweep's points into one row (numcheck/report/sweep_rows.py).
    sweep: dict[str, Any] | None = None
    #: A low-precision variant's second reference (numcheck/check/against_sim.py): its
    #: declared scheme, where the simulated reference's operands came from, the worst GEMM
    #: element over its bound (``sim_ratio``, at most 1) and where, the operands' findings;
    #: None for a variant without a declared quantization. Each output's metrics against
    #: the simulated reference are in ``metrics`` (``sim_rel_fro``, ``sim_calc_diff``).
    quant: dict[str, Any] | None = None
    #: For a perf-only check skipped here: what it lacks, ``{"needs": "CUDA"}`` or
    #: ``{"runs_with": "--numcheck-perf"}`` (the summaries count these: report/skips.py).
    perf_only: dict[str, str] | None = None

    @property
    def passed(self) -> bool:
        """True for a pass, a skip and a known-bad variant caught as expected (xfail):
        none of them blocks a merge."""
        return self.status in ("pass", "xfail", "skip")

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What identifies a check across runs: (op, case, variant, device)."""
        return (self.op, self.case, self.variant, self.device)

    def key_metric(self, name: str) -> float | None:
        """A :data:`KEY_METRICS` value: of the first output for errors, of the top-k else."""
        if name.startswith(("recall", "tie_recall")):
            return None if self.topk is None else self.topk.get(name)
        first = next(iter(self.metrics.values()), None)
        return None if first is None else first.get(name)

    @property
    def verdict(self) -> str:
        """The verdict column: PASS, FAIL, SKIP, or the error kind in capitals."""
        if self.status == "error":
            return (self.error_kind or "error").upper()
        return self.status.upper()


# -- building records ------------------------------------------------------------------


def record_from_result(
    result: CheckResult,
    *,
    nodeid: str = "",
    source: str | None = None,
    device_name: str | None = None,
    device_index: int | None = None,
    worker: str | None = None,
) -> Record:
    """The record of a check that produced a verdict: the one place a result's typed parts
    (its speed gate, ledger, plot data, preparation, invariance, second reference) become
    the record's plain sections."""
    case, variant = result.case, result.variant
    budget = case.budgets[variant]
    per_seed = [{"seed": s.seed,
                 "metrics": {name: _plain(m) for name, m in s.metrics.items()},
                 "topk": None if s.topk is None else _topk_dict(s.topk),
                 "violations": len(s.violations)} for s in result.seeds]
    metrics: dict[str, dict[str, float]] = {}
    for name in budget.outputs:
        worst = {m: result.metric(name, m) for m in (*ERROR_METRICS, *SIM_METRICS)}
        metrics[name] = {m: v for m, v in worst.items() if v is not None}
    metrics = {k: v for k, v in metrics.items() if v}
    top = result.worst()
    closest = _violation_dict(top) if top is not None else _headroom(budget, metrics)
    perf, quant = result.perf, result.quant_summary()
    return Record(
        id=result.id, nodeid=nodeid, op=case.op, case=case.id, variant=variant,
        device=result.device, status="pass" if result.passed else "fail",
        reason="" if top is None else top.describe(), precision=_precision(case.op, variant),
        source=source, seeds=list(case.seeds), budget=_budget_dict(budget, result.ungated),
        metrics=metrics, topk=_worst_topk([s.topk for s in result.seeds if s.topk is not None]),
        per_seed=per_seed, violations=[_violation_dict(v) for v in result.violations],
        closest=closest, note=_note(result.note, result.ungated), device_name=device_name,
        device_index=device_index, worker=worker, first_call_s=result.first_call_s,
        localization=[loc.as_dict() for loc in result.localization] or None,
        budget_origin=_budget_origin(budget, result.ungated),
        not_produced=list(result.not_produced),
        sweep=None if case.sweep is None else case.sweep.as_dict(),
        # The typed parts the gates left, as the record's plain sections: made here, once.
        timing=None if perf is None else _plain(
            {**perf.record_section(), "numerics_lock_wait_s": result.numerics_lock_wait_s}),
        casts=None if result.overhead is None else _plain(result.overhead.as_dict()),
        plots=None if result.plots is None else _plain(result.plots.as_dict()),
        prepared=None if result.prepared is None else _plain(result.prepared.as_dict()),
        invariance=None if result.invariance is None else _plain(result.invariance.as_dict()),
        quant=None if quant is None else _plain(
            {k: v for k, v in vars(quant).items() if k not in ("outputs", "violations")}),
    )


def record_without_verdict(
    *, id: str, nodeid: str, op: str, case: str, variant: str, device: str, status: str,
    reason: str, error_kind: str | None = None, source: str | None = None,
    worker: str | None = None, sweep: dict[str, Any] | None = None,
    perf_only: dict[str, str] | None = None,
) -> Record:
    """The record of a check that was skipped or could not produce a verdict."""
    if status not in ("skip", "error"):
        raise ValueError(f"status {status!r}: a record without a verdict is a skip or an error")
    return Record(
        id=id, nodeid=nodeid, op=op, case=case, variant=variant, device=device,
        status=status, reason=reason, error_kind=error_kind,
        precision=_precision(op, variant) if op else None, source=source, worker=worker,
        sweep=sweep, perf_only=perf_only,
    )


def record_from_nodeid(nodeid: str, reason: str, *, worker: str | None = None) -> Record:
    """An error record for a check known only by its node id (it crashed, or its worker did).

    ``cases/indexer.toml::tiny::bf16[cpu]`` -> case ``tiny``, variant ``bf16``, device ``cpu``;
    a sweep's point ``cases/indexer.toml::sweep-l::max_context65::bf16[cpu]`` -> case
    ``sweep-l@max_context65``. The op is not in a node id, so it is left empty.
    """
    parts = nodeid.split("::")
    case = "@".join(parts[1:-1]) if len(parts) > 2 else ""
    variant, _, device = parts[-1].partition("[") if len(parts) > 2 else ("", "", "")
    sweep = {"case": parts[1], "point": parts[2]} if len(parts) == 4 else None
    return Record(
        id=nodeid, nodeid=nodeid, op="", case=case, variant=variant, device=device.rstrip("]"),
        status="error", reason=reason, error_kind="crash", worker=worker, sweep=sweep,
    )


def _precision(op: str, variant: str) -> str | None:
    from numcheck.ops.registry import get_op  # registry imports torch; records need not

    try:
        return get_op(op).variants[variant].precision
    except KeyError:
        return None


def _budget_dict(budget: Any, ungated: Mapping[str, str]) -> dict[str, Any]:
    """The limits the check held the variant to: those it measured (``ungated`` ones, which
    nothing measured on this device, are left out, and the note says why)."""
    out: dict[str, Any] = {}
    for name, ob in budget.outputs.items():
        limits = {m: v for m, v in ob.limits.items() if f"{name}.{m}" not in ungated}
        out[name] = {**limits, "atol": ob.atol, "rtol": ob.rtol, "allow_nan": ob.allow_nan}
    if budget.topk is not None:
        out["topk"] = {
            **budget.topk.limits,
            "tie_band": budget.topk.tie_band,
            "tie_band_kind": budget.topk.tie_band_kind,
        }
    return out


def _budget_origin(budget: Any, ungated: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Where each value of :func:`_budget_dict` is set, in its layout, with the limits left
    out of it as not measured: those nothing measured on this device (``ungated``) and those
    the budget has no limit for, since nothing can measure them wherever it is checked."""
    every: Mapping[str, Mapping[str, Any]] = getattr(budget, "origins", {})
    out: dict[str, dict[str, Any]] = {}
    for name, ob in budget.outputs.items():
        origins = every.get(name, {})
        keys = [*ob.limits, "atol", "rtol", "allow_nan"]
        row = {k: origin_to_dict(origins[k]) for k in keys if k in origins}
        row.update({k: origin_to_dict(o) for k, o in origins.items()
                    if isinstance(o, NotMeasured)})
        row.update({key.partition(".")[2]: origin_to_dict(NotMeasured(why))
                    for key, why in ungated.items() if key.partition(".")[0] == name})
        if row:
            out[name] = row
    if budget.topk is not None:
        topk: Mapping[str, Any] = next(
            (o for n, o in every.items() if n not in budget.outputs), {})
        tie = f"tie_band_{budget.topk.tie_band_kind}"
        row = {k: origin_to_dict(topk[k]) for k in budget.topk.limits if k in topk}
        if tie in topk:
            row["tie_band"] = origin_to_dict(topk[tie])
        if row:
            out["topk"] = row
    return out


def _note(note: str | None, ungated: Mapping[str, str]) -> str | None:
    """The row's note, with the limits nothing measured here and why."""
    notes = [note] if note else []
    notes += [f"{key} not measured here: {why}" for key, why in ungated.items()]
    return "; ".join(notes) or None


def _topk_dict(report: Any) -> dict[str, Any]:
    d = {
        name: getattr(report, name)
        for name in (*TOPK_COUNTS, *TOPK_LIMITS, "worst_row", "tie_worst_row", "band",
                     "band_kind")
    }
    d["unexplained"] = report.unexplained[:MAX_FLIPS]
    return _plain(d)


def _worst_topk(reports: Sequence[Any]) -> dict[str, Any] | None:
    """Over seeds: the lowest recalls, the summed flip counts, the worst seed's flips."""
    if not reports:
        return None
    dicts = [_topk_dict(r) for r in reports]
    worst = max(dicts, key=lambda d: (d["n_unexplained"], -d["recall_min"]))
    out = dict(worst)
    for name in TOPK_LIMITS:
        out[name] = min(d[name] for d in dicts)
    for name in TOPK_COUNTS:
        out[name] = sum(d[name] for d in dicts)
    return out


def _violation_dict(v: Any) -> dict[str, Any]:
    d = _plain(v)
    d["text"] = v.describe()
    return dict(d)


def _headroom(budget: Any, metrics: Mapping[str, Mapping[str, float]]) -> dict[str, Any] | None:
    """For a pass: the gated metric closest to its limit (largest value/limit)."""
    best: tuple[float, dict[str, Any]] | None = None
    for name, ob in budget.outputs.items():
        for metric, limit in ob.limits.items():
            value = metrics.get(name, {}).get(metric)
            if metric == "frac_outside":
                limit = ob.frac_outside_limit(int(metrics.get(name, {}).get("n_compared", 0)))
            if value is None or limit <= 0 or math.isnan(value):  # NaN: not measured
                continue
            ratio = value / limit
            if best is None or ratio > best[0]:
                best = (ratio, {"output": name, "metric": metric, "value": value, "limit": limit})
    return None if best is None else best[1]


def _plain(value: Any, *, strict: bool = False) -> Any:
    """Dataclasses to dicts, tuples to lists, numpy/torch scalars to Python numbers: what
    JSON and execnet carry; ``strict``: also NaN and infinities as the strings "nan", "inf"
    and "-inf" (strict JSON has none). One walk, leaves tested first (a record is shipped
    for every check)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, float):
        if strict and not math.isfinite(value):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return float(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, strict=strict) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, strict=strict) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), strict=strict) for f in fields(value)}
    if hasattr(value, "item"):  # numpy / torch scalar
        return _plain(value.item(), strict=strict)
    return value


def junit_properties(record: Record) -> list[tuple[str, str]]:
    """Key metrics as ``(name, value)`` pairs for ``item.user_properties`` (junitxml).

    Always ``numcheck_verdict``; the reason when there is one; the headline metrics and the
    speedup when measured. Values are text, as junitxml writes them.
    """
    props = [("numcheck_verdict", record.verdict)]
    if record.reason:
        props.append(("numcheck_reason", record.reason.splitlines()[0]))
    c = record.closest
    if c is not None:
        closest = f"{c['output']}.{c['metric']} {c['value']:.4g}/{c['limit']:.4g}"
        props.append(("numcheck_closest", closest))
    for name in KEY_METRICS:
        value = record.key_metric(name)
        if value is not None:
            props.append((f"numcheck_{name}", f"{value:.6g}"))
    if record.timing and record.timing.get("speedup") is not None:
        props.append(("numcheck_speedup", f"{record.timing['speedup']:.4g}"))
    return props


# -- dict form and JSON ----------------------------------------------------------------

_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _decode_floats(value: Any) -> Any:
    """The inverse of ``_plain(strict=True)``, for the numeric sections of a record."""
    if isinstance(value, str):
        return _NONFINITE.get(value, value)
    if isinstance(value, dict):
        return {k: v if k in _TEXT_KEYS else _decode_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode_floats(v) for v in value]
    return value


#: Record fields holding numbers, where "nan"/"inf"/"-inf" stand for floats; inside them,
#: the keys in _TEXT_KEYS hold text. Top-level fields (ids, names, reason) are never decoded.
_NUMERIC_FIELDS = ("budget", "metrics", "topk", "per_seed", "violations", "closest", "timing",
                   "casts", "plots", "prepared", "quant")
_TEXT_KEYS = frozenset({"band_kind", "tie_band_kind", "direction", "output", "metric", "detail",
                        "text", "scheme", "operands", "sim_ratio_at", "findings"})


def record_to_dict(record: Record) -> dict[str, Any]:
    """The JSON-ready dict of a record (non-finite floats as strings)."""
    return dict(_plain(record, strict=True))


def record_from_dict(data: Mapping[str, Any]) -> Record:
    """The inverse of :func:`record_to_dict`; unknown fields are ignored (newer writers)."""
    known = {f.name for f in fields(Record)}
    decoded = {
        k: _decode_floats(v) if k in _NUMERIC_FIELDS else v
        for k, v in data.items() if k in known
    }
    return Record(**decoded)


@dataclass
class Report:
    """A whole run: when, where, and every record; ``drift`` when a baseline was given."""

    records: list[Record]
    environment: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    exitstatus: int | None = None
    goldens_regenerated: dict[str, bool] = field(default_factory=dict)
    drift: Drift | None = None
    schema: int = SCHEMA_VERSION

    def counts(self) -> dict[str, int]:
        """How many records have each status, and the total."""
        out = {s: 0 for s in STATUSES}
        for r in self.records:
            out[r.status] = out.get(r.status, 0) + 1
        out["total"] = len(self.records)
        return out

    @property
    def passed(self) -> bool:
        """The merge gate: every record passed or skipped, pytest exited cleanly, no drift
        regression, and at least one check ran."""
        if self.exitstatus not in (None, 0):
            return False
        if self.drift is not None and not self.drift.passed:
            return False
        return bool(self.records) and all(r.passed for r in self.records)


def report_to_dict(report: Report) -> dict[str, Any]:
    """The JSON document of a report (see docs/report.md)."""
    return {
        "schema": "numcheck-report",
        "schema_version": report.schema,
        "created": report.created,
        "gate": "pass" if report.passed else "fail",
        "counts": report.counts(),
        "exitstatus": report.exitstatus,
        "environment": _plain(report.environment, strict=True),
        "goldens_regenerated": dict(report.goldens_regenerated),
        "drift": None if report.drift is None else _plain(report.drift.to_dict(), strict=True),
        "records": [record_to_dict(r) for r in report.records],
    }


def write_json(path: Path | str, report: Report) -> None:
    """Write the report as strict JSON, atomically
    (:func:`numcheck.disk.atomic.atomic_write`)."""
    text = json.dumps(report_to_dict(report), indent=1, allow_nan=False) + "\n"
    atomic_write(path, text.encode())


def load_report(path: Path | str) -> Report:
    """Read a report written by :func:`write_json`.

    Raises:
        ReportError: missing or unreadable file, not a numcheck report, or a schema version
            this numcheck does not read.
    """
    path = Path(path)
    return report_from_document(path, read_document(path))


def read_document(path: Path | str, *, check_version: bool = True) -> dict[str, Any]:
    """The JSON document of a report file, checked to be a numcheck report (and, with
    ``check_version``, of the schema version this numcheck reads).

    Raises:
        ReportError: missing or unreadable file, not JSON, not a numcheck report, or
            another schema version.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReportError(path, "no such report file",
                          "pass the path a run wrote with --numcheck-report") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(path, f"not readable as JSON ({exc})",
                          "pass a file written by --numcheck-report") from None
    if not is_report_document(data):
        raise ReportError(path, "not a numcheck report (no \"schema\": \"numcheck-report\")",
                          "pass a file written by --numcheck-report")
    if check_version:
        check_version_of(path, data)
    return dict(data)


def is_report_document(data: Any) -> bool:
    """Whether a parsed JSON document says it is a numcheck report (of any version)."""
    return isinstance(data, dict) and data.get("schema") == "numcheck-report"


def check_version_of(path: Path | str, data: Mapping[str, Any]) -> None:
    """Raise :class:`ReportError` unless the document has this numcheck's schema version."""
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ReportError(
            path, f"schema version {version!r}; this numcheck {__version__} reads version "
            f"{SCHEMA_VERSION}", "regenerate the report with this numcheck version "
            "(rerun the gate on the baseline commit)",
        )


def report_from_document(path: Path | str, data: Mapping[str, Any]) -> Report:
    """The :class:`Report` of a document :func:`read_document` returned (``path`` names it
    in errors)."""
    try:
        records = [record_from_dict(r) for r in data["records"]]
    except (KeyError, TypeError) as exc:
        raise ReportError(path, f"malformed records ({exc})",
                          "pass a file written by --numcheck-report") from None
    return Report(
        records=records,
        environment=dict(data.get("environment") or {}),
        created=str(data.get("created", "")),
        exitstatus=data.get("exitstatus"),
        goldens_regenerated=dict(data.get("goldens_regenerated") or {}),
        drift=Drift.from_dict(data["drift"]) if data.get("drift") else None,
        schema=data["schema_version"],
    )


def order_records(records: Iterable[Record], order: Sequence[str]) -> list[Record]:
    """Records in collection order (``order`` = node ids); unknown ones last, by id.

    Workers finish in any order; sorting by the collection order makes the report of
    ``-n N`` list its records exactly as a serial run does.
    """
    rank = {nodeid: i for i, nodeid in enumerate(order)}
    return sorted(records, key=lambda r: (rank.get(r.nodeid, len(rank)), r.nodeid, r.id))


def now() -> str:
    """UTC, ISO 8601, seconds."""
    return datetime.now(UTC).isoformat(timespec="seconds")
