"""One calibration check measured: a :class:`MeasureRequest` in, its payloads out.

``pytest --numcheck --numcheck-calibrate`` sends each selected check as a measure request
through the executor its gating checks go through (:mod:`numcheck.execute.executor`), in the
pytest process or its worker alike, which answers with :func:`measure_check`. No pytest here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from numcheck.calibrate import References, calibration_seeds, measure_variant
from numcheck.calibrate.payloads import CheckRef, NumericsPayload, Payload, SpeedPayload, SpeedRun
from numcheck.devices import run_class

if TYPE_CHECKING:
    from numcheck.cases import Case
    from numcheck.check.run import CaseInputs
    from numcheck.numerics.calibration_record import CalibrationRecord
    from numcheck.ops.registry import OpSpec
    from numcheck.perf.sections import DeviceSections


@dataclass(frozen=True)
class Measuring:
    """What every check of a calibration run measures, from its options: ``fresh`` seeds
    from ``first_seed`` on (None: no numerics), ``speed_runs`` timing runs (None: none), the
    pools and their removed members (``-V``), whether the tables are set from this run alone
    (``renew``), and whether the run named its seeds (else a record's are reused)."""

    fresh: int | None
    first_seed: int
    pools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    removed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    speed_runs: int | None = None
    renew: bool = False
    fresh_given: bool = False
    first_seed_given: bool = False


@dataclass(frozen=True)
class MeasureRequest:
    """One calibration check to measure, as plain data (what a worker process is sent)."""

    case: Case
    variant: str
    #: The check as its payloads name it (its device among it).
    check: CheckRef
    how: Measuring
    #: The case's variants with a check of their own in the run: a pool member among them
    #: is measured there, not by this check.
    checked: frozenset[str] = frozenset()

    @property
    def device(self) -> str:
        return self.check.device


def measure_check(request: MeasureRequest, op: OpSpec, *, references: References,
            inputs: Callable[[OpSpec, Case], CaseInputs], sections: DeviceSections | None,
            progress: Callable[[str], None] | None = None) -> list[Payload]:
    """Measure one (case, variant, device) check: its numerics (and its pool members the run
    selected no check of), and its timing runs. ``references`` are the case's goldens made
    on the spot, ``inputs`` gives the run's inputs of a case, ``sections`` its device locks;
    ``progress`` prints a line per variant measured once the check runs long."""
    case, variant, how = request.case, request.variant, request.how
    payloads: list[Payload] = []
    if how.fresh is not None and not case.perf_only:
        payloads += _numerics(request, op, references, progress)
    if how.speed_runs is not None and variant != op.reference:
        payloads.append(_speed(request, op, inputs, sections))
    return payloads


def _numerics(request: MeasureRequest, op: OpSpec, refs: References,
              progress: Callable[[str], None] | None = None) -> list[Payload]:
    from numcheck.numerics.budget_origin import lender_of, origins_to_dict

    case, variant, check, how = request.case, request.variant, request.check, request.how
    device = check.device
    budget = case.budgets[variant]
    # Whose tables the variant reads, as its budget's record says (budget_like): a
    # borrower has no tables, so no calibration record, of its own.
    lender = lender_of(budget.origins)
    # The table's calibration record: the next run measures the same pool on the same
    # seeds unless told otherwise (docs/budgets.md, "Calibration remembers").
    record = case.provenance.get(variant) if lender is None else None
    reused = None if how.renew else record
    fresh, first = how.fresh or 0, how.first_seed
    if reused is not None and not how.fresh_given:
        fresh = reused.fresh_seeds
    if reused is not None and not how.first_seed_given:
        first = reused.first_fresh_seed
    if case.inputs.file is not None:
        fresh = 0  # recorded inputs: the file's calls are all there is
    pool, pool_from = _pool(how, variant, reused)
    removed = next((how.removed.get(name, ()) for name, members in how.pools.items()
                    if variant in members), ())
    seeds = calibration_seeds(case, fresh, first)
    topk = op.topk.indices if op.topk is not None else None
    gated = {name: tuple(sorted(ob.limits)) for name, ob in budget.outputs.items()}
    limits: dict[str, dict[str, float]] = {
        name: dict(ob.limits) for name, ob in budget.outputs.items()}
    if budget.topk is not None and topk is not None:
        gated[topk] = tuple(sorted(budget.topk.limits))
        limits[topk] = {**budget.topk.limits, f"tie_band_{budget.topk.tie_band_kind}":
                        budget.topk.tie_band}
    expect = case.expect.get(variant)
    missing = [m for m in pool if m not in op.variants]
    # Pool members without a check selected in this run are measured here, with this
    # variant's budget (a member the case runs but -k or a node id left out included);
    # their payloads say what the case says of the variant, and carry only a table.
    members = [m for m in pool if m not in (variant, op.reference, *request.checked)
               and m not in missing and device in op.variants[m].devices]
    said = Progressed(f"{check.op}::{check.case}::{variant}[{device}]", 1 + len(members),
                      len(seeds), progress)
    own = NumericsPayload(
        check=check, variant=variant, own_check=True, seeds=tuple(seeds), fresh=fresh,
        first_seed=first, k=int(case.params.get("index_topk", 0) or 0), topk_output=topk,
        gated=gated, reference=op.reference, reference_device=refs.device,
        budget_like=lender,
        precision=op.variants[variant].precision,
        output_precision=dict(op.output_precision),
        # where each key of the budget is set: which table a suggestion belongs to
        origins=origins_to_dict(budget.origins),
        expect=tuple(expect.fails) if expect else (), pool=tuple(pool),
        pool_from=pool_from, pool_missing=tuple(missing), pool_removed=removed,
        limits=limits, record=record, sims=_sims(op, variant),
        table=measure_variant(op, case, variant, device, seeds, refs))
    said.done(variant)
    out: list[Payload] = [own]
    for member in members:
        table = measure_variant(op, case, member, device, seeds, refs, budget=budget)
        said.done(member)
        # A member the case holds to another's budgets stays a borrower, pooled or not.
        member_lender = (lender_of(case.budgets[member].origins)
                         if member in case.budgets else None)
        out.append(replace(own, variant=member, own_check=False, expect=(), pool=(),
                           budget_like=member_lender,
                           pool_from=None, pool_missing=(), pool_removed=(), limits={},
                           record=None, sims=_sims(op, member), table=table))
    return out


def _pool(how: Measuring, variant: str,
          record: CalibrationRecord | None) -> tuple[list[str], str | None]:
    """The variants budgeted with ``variant`` (itself first), and where that came from:
    a --numcheck-calibrate-pool naming it, else its calibration record's pool."""
    for members in how.pools.values():
        if variant in members:
            return [variant, *(m for m in members if m != variant)], "option"
    if record is not None and len(record.pool) > 1:
        return [variant, *(m for m in record.pool if m != variant)], "record"
    return [variant], None


def _speed(request: MeasureRequest, op: OpSpec, inputs: Callable[[OpSpec, Case], CaseInputs],
           sections: DeviceSections | None) -> SpeedPayload:
    from numcheck.check.perf import measure_perf
    from numcheck.prepare import Preparations

    case, variant, device = request.case, request.variant, request.device
    cpu_inputs, _ = inputs(op, case).get(case.seeds[0])
    # One-time preparations are made once for the K runs, as for one check.
    preparer = Preparations().at(case.seeds[0])
    points: list[SpeedRun] = []
    for _ in range(request.how.speed_runs or 0):
        # The same call as a gated timing, K times, holding the device alone; only the point
        # speedups and their intervals are kept (``estimate``; ``speedup`` in timing layers
        # that name it so).
        with sections.hold(exclusive=True) if sections else contextlib.nullcontext():
            result = measure_perf(op, case, variant, device, cpu_inputs, preparer=preparer)
        est = getattr(result, "estimate", None) or result.speedup
        points.append(SpeedRun(est.median, est.low, est.high))
    expect = case.expect.get(variant)
    cls = run_class(device)
    return SpeedPayload(
        check=request.check, variant=variant, runs=tuple(points),
        expected_fail=bool(expect and "perf.speedup_min" in expect.fails),
        current=case.perf[variant].threshold(cls, device) if variant in case.perf else None,
        device_class=cls)


#: Seconds a calibration check runs before it says how far it got (then a line per
#: variant measured): one of an FP8 family's seven members over 22 seeds can take minutes.
PROGRESS_AFTER_S = 10.0


class Progressed:
    """The progress lines of one calibration check: once it has run
    :data:`PROGRESS_AFTER_S`, a line per variant measured (what, how many of how many,
    the time so far), so that a long calibration never looks hung."""

    def __init__(self, check: str, total: int, seeds: int,
                 progress: Callable[[str], None] | None) -> None:
        self.check, self.total, self.seeds, self.progress = check, total, seeds, progress
        self.count, self.start, self.clock = 0, time.perf_counter(), time.perf_counter

    def done(self, variant: str) -> None:
        self.count += 1
        spent = self.clock() - self.start
        if self.progress is not None and spent >= PROGRESS_AFTER_S:
            self.progress(f"numcheck calibrate: {self.check}: measured {variant} "
                          f"({self.count} of {self.total} variants, {self.seeds} seeds each) "
                          f"in {spent:.0f} s so far")


def _sims(op: OpSpec, variant: str) -> tuple[str, dict[str, float]] | None:
    """The simulated reference's default row of the variant's declared sums (the class
    bound of its ``sim_*`` measurements), or None."""
    from numcheck.numerics.budgets import sim_default_row

    quant = op.variants[variant].quant
    found = sim_default_row(quant.accumulation) if quant is not None else None
    return None if found is None else (found[0], dict(found[1]))
