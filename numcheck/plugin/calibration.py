"""The calibration mode of ``pytest --numcheck``: measure the selected checks, suggest
budgets and speed thresholds, and (on request) write them into the case files.

Registered as a plugin by :mod:`numcheck.plugin` when a calibration option is on. The
checks are collected and selected exactly as in a gating run (paths, ``-k``, the device,
ops from conftest hooks and entry points); each check then measures instead of gating
(:meth:`CalibrationMode.measure`), so a variant over its current budget does not fail the
run. What a check measured (typed payloads, :mod:`numcheck.calibrate.payloads`) travels on
its test report as plain data (as the gate's records do, so pytest-xdist works) and the
controller prints the suggestions at the end:

- numerics (:mod:`numcheck.calibrate`): worst values over the case's seeds and N fresh ones,
  against the reference recomputed on the CPU, turned into budget tables by the headroom
  policy; pools budget several variants as one;
- speed (:mod:`numcheck.calibrate.speed`, :mod:`numcheck.perf.thresholds`): K timing runs
  per check, turned into ``speedup_min`` proposals for this device class.

Writing goes through :mod:`numcheck.calibrate.casewriter`, which names this run's command once in each
written file's header (``# set by: pytest ... (<date>, <device>, torch <version>)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from numcheck.calibrate import LOWER_IS_WORSE, References, calibration_seeds, measure_variant
from numcheck.calibrate.casewriter import CaseWriteError, Change, Edit, write_edits
from numcheck.calibrate.guard import SUSPECT, Finding, accepted_notes, blocking
from numcheck.calibrate.payloads import (
    CheckRef,
    NumericsPayload,
    Payload,
    SpeedPayload,
    SpeedRun,
    payload_from_data,
    payload_to_data,
    save_run,
)
from numcheck.calibrate.plan import RunInfo, plan_numerics
from numcheck.calibrate.speed import combine_speed, speed_section
from numcheck.devices import run_class
from numcheck.plugin.calibration_options import Settings
from numcheck.plugin.options import (
    CALIBRATE_ACCEPT_OPTION,
    CALIBRATE_POOL_OPTION,
    CALIBRATE_RENEW_OPTION,
    CALIBRATE_WITH_OPTION,
    CALIBRATE_WRITE_OPTION,
)

if TYPE_CHECKING:
    from numcheck.cases import Case
    from numcheck.check.run import CaseInputs
    from numcheck.numerics.budget_provenance import CalibrationRecord
    from numcheck.ops.registry import OpSpec
    from numcheck.perf.sections import DeviceSections

#: ``report.user_properties`` name of a check's measurements (their plain form, a list of
#: dicts: :func:`numcheck.calibrate.payloads.payload_to_data`).
PROPERTY = "numcheck_calibration"


class CalibrationMode:
    """Run-wide calibration state: the per-case references, and what the checks measured."""

    KEY = pytest.StashKey["CalibrationMode"]()

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.payloads: list[Payload] = []
        #: Collection order: the tables are printed in it, whatever order checks end in.
        self.order: list[str] = []
        self._refs: References | None = None
        #: Set at session finish when the selected checks all skipped (exit status 1).
        self.nothing_measured = False
        #: What the terminal summary prints (a line starting with NUL is a separator title).
        self.summary: list[str] = []
        #: (case file, case, variant) of every selected check: a pool member with a check of
        #: its own is measured there, any other here.
        self.selected: set[tuple[Path, str, str]] = set()

    def portable(self) -> CalibrationMode:
        """A copy that measures as this one does, without the run's state (its config,
        what was measured so far): what a worker process is sent."""
        copy = object.__new__(CalibrationMode)
        copy.__dict__.update(self.__dict__)
        copy.config = None  # type: ignore[assignment]
        copy.payloads, copy.summary, copy._refs = [], [], None
        return copy

    # -- one check ----------------------------------------------------------------------

    def measure(self, case: Case, variant: str, check: CheckRef, *,
                inputs: Callable[[OpSpec, Case], CaseInputs],
                sections: DeviceSections,
                progress: Callable[[str], None] | None = None) -> list[Payload]:
        """Measure one (case, variant, device) check (``check`` names it): its numerics
        (and its pool members the run selected no check of), and its timing runs.
        ``inputs`` gives the run's inputs of a case; ``sections`` its device locks;
        ``progress`` prints a line per variant measured once the check runs long."""
        from numcheck.ops.registry import get_op

        op = get_op(case.op)
        payloads: list[Payload] = []
        if self.settings.fresh is not None and not case.perf_only:
            payloads += self._numerics(op, case, variant, check, progress)
        if self.settings.speed_runs is not None and variant != op.reference:
            payloads.append(self._speed(op, case, variant, check, inputs, sections))
        return payloads

    def _references(self, op: OpSpec, case: Case, device: str) -> References:
        # Checks of one case run back to back: keep only the current case's references.
        if self._refs is None or self._refs.case is not case:
            self._refs = References(op, case, device)
        return self._refs

    def _numerics(self, op: OpSpec, case: Case, variant: str, check: CheckRef,
                  progress: Callable[[str], None] | None = None) -> list[Payload]:
        from numcheck.numerics.budget_origin import lender_of, origins_to_dict

        settings = self.settings
        device = check.device
        budget = case.budgets[variant]
        # Whose tables the variant reads, as its budget's record says (budget_like): a
        # borrower has no tables, so no calibration record, of its own.
        lender = lender_of(budget.origins)
        # The table's calibration record: the next run measures the same pool on the same
        # seeds unless told otherwise (docs/budgets.md, "Calibration remembers").
        record = case.provenance.get(variant) if lender is None else None
        reused = None if settings.renew else record
        fresh, first = settings.fresh or 0, settings.first_seed
        if reused is not None and not settings.fresh_given:
            fresh = reused.fresh_seeds
        if reused is not None and not settings.first_seed_given:
            first = reused.first_fresh_seed
        if case.inputs.file is not None:
            fresh = 0  # recorded inputs: the file's calls are all there is
        pool, pool_from = self._pool(variant, reused)
        removed = next((self.settings.removed.get(name, ()) for name, members
                        in self.settings.pools.items() if variant in members), ())
        seeds = calibration_seeds(case, fresh, first)
        refs = self._references(op, case, device)
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
        todo = [variant, *(m for m in pool if m not in (variant, op.reference)
                           and (case.source, case.id, m) not in self.selected
                           and m not in missing and device in op.variants[m].devices)]
        said = Progressed(f"{check.op}::{check.case}::{variant}[{device}]", len(todo),
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
        # Pool members without a check selected in this run are measured here, with this
        # variant's budget (a member the case runs but -k or a node id left out included);
        # their payloads say what the case says of the variant, and carry only a table.
        for member in pool:
            if member in (variant, op.reference) or (case.source, case.id,
                                                     member) in self.selected:
                continue
            if member in missing or device not in op.variants[member].devices:
                continue
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

    def _pool(self, variant: str,
              record: CalibrationRecord | None) -> tuple[list[str], str | None]:
        """The variants budgeted with ``variant`` (itself first), and where that came from:
        a --numcheck-calibrate-pool naming it, else its calibration record's pool."""
        for members in self.settings.pools.values():
            if variant in members:
                return [variant, *(m for m in members if m != variant)], "option"
        if record is not None and len(record.pool) > 1:
            return [variant, *(m for m in record.pool if m != variant)], "record"
        return [variant], None

    def _speed(self, op: OpSpec, case: Case, variant: str, check: CheckRef,
               inputs: Callable[[OpSpec, Case], CaseInputs],
               sections: DeviceSections) -> SpeedPayload:
        from numcheck.check.perf import measure_perf
        from numcheck.prepare import Preparations

        device = check.device
        cpu_inputs, _ = inputs(op, case).get(case.seeds[0])
        # One-time preparations are made once for the K runs, as for one check.
        preparer = Preparations().at(case.seeds[0])
        points: list[SpeedRun] = []
        for _ in range(self.settings.speed_runs or 0):
            # The same call as a gated timing, K times; only the point speedups and their
            # intervals are kept (``estimate``; ``speedup`` in timing layers that name it so).
            with sections.hold(exclusive=True):  # timing holds the device alone
                result = measure_perf(op, case, variant, device, cpu_inputs, preparer=preparer)
            est = getattr(result, "estimate", None) or result.speedup
            points.append(SpeedRun(est.median, est.low, est.high))
        expect = case.expect.get(variant)
        cls = run_class(device)
        return SpeedPayload(
            check=check, variant=variant, runs=tuple(points),
            expected_fail=bool(expect and "perf.speedup_min" in expect.fails),
            current=case.perf[variant].threshold(cls, device) if variant in case.perf else None,
            device_class=cls)

    # -- hooks: measurements travel on the reports to the controller ---------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.order:
            self.order = list(ids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """A pool naming a variant the op does not have is a usage error, before any run."""
        from numcheck.ops.registry import get_op

        self.order = [item.nodeid for item in session.items]
        self.selected = {(item.case.source, item.case.id, getattr(item, "variant", ""))
                         for item in session.items if hasattr(item, "case")}
        for item in session.items:
            case = getattr(item, "case", None)
            variant = getattr(item, "variant", "")
            members = self.settings.pools.get(variant, ())
            if case is None or not members:
                continue
            op = get_op(case.op)
            for member in members:
                if member not in op.variants:
                    raise pytest.UsageError(
                        f"{CALIBRATE_POOL_OPTION} {variant}: op {op.name!r} has no variant "
                        f"{member!r} (its variants: {', '.join(op.variants)}). Fix: register it "
                        "(pytest_numcheck_register) or drop it from the pool")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        report = yield
        payloads = getattr(item, "numcheck_calibration", None)
        if payloads and call.when == "call":
            report.user_properties.append((PROPERTY, [payload_to_data(p) for p in payloads]))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from numcheck.plugin.workers import is_worker

        if is_worker(self.config):
            return
        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, list):
                self.payloads.extend(payload_from_data(p) for p in value)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Suggest, and on request write; the exit status says whether that went through.

        Exit 0 when the selected checks were measured: measuring is not gating, so a value
        over its current budget fails nothing. Exit 1 when a selected variant looks like a
        bug (its measurements would make a budget no honest implementation of its class
        needs) and no --numcheck-calibrate-accept names it, or when a write is refused
        (numcheck.calibrate.guard): then nothing is written. A real error keeps its own
        non-zero status (a variant that raised fails its item; a bad case file is a
        collection error; no check selected is a usage error); selected checks that all
        skipped measured nothing, which a calibration step in a script must not take for
        success."""
        from numcheck.plugin.workers import is_worker

        if is_worker(self.config) or self.config.option.collectonly:
            return
        if exitstatus == 0 and not self.payloads:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self.nothing_measured = True
            return
        if self.payloads:
            self.summary, refused = self._conclude()
            if refused and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from numcheck.plugin.workers import is_worker

        if is_worker(self.config):
            return
        tr = terminalreporter
        if not self.payloads:
            status = "; exit status 1" if self.nothing_measured else ""
            tr.write_line("numcheck calibrate: no check measured anything (all skipped, "
                          f"deselected or failed){status}")
            return
        for line in self.summary:
            if line.startswith("\0"):
                tr.write_sep("=", line[1:])
            else:
                tr.write_line(line)

    def _conclude(self) -> tuple[list[str], bool]:
        """The lines the terminal summary prints, and whether the run refused anything
        (numerics plan, speed proposals, findings, writes)."""
        settings = self.settings
        order = {nodeid: i for i, nodeid in enumerate(self._order())}
        payloads = sorted(self.payloads, key=lambda p: order.get(p.check.nodeid, len(order)))
        out: list[str] = []
        edits: dict[str, list[Edit]] = {}
        numerics = [p for p in payloads if isinstance(p, NumericsPayload)]
        earlier = [p for p in settings.earlier if isinstance(p, NumericsPayload)]
        speed = combine_speed([p for p in payloads if isinstance(p, SpeedPayload)],
                              [p for p in settings.earlier if isinstance(p, SpeedPayload)])
        from datetime import date

        run = RunInfo(_command(self.config), date.today().isoformat(), _torch(),
                      settings.fresh or 0, settings.first_seed, CALIBRATE_ACCEPT_OPTION)
        plan = plan_numerics(numerics, run, earlier=earlier, accepted=settings.accepted)
        sections = []
        if settings.fresh is not None:
            sections.append((f"suggested budgets ({_device(numerics)}, torch {_torch()})",
                             (plan.lines, plan.edits)))
        if settings.speed_runs is not None:
            runs = settings.speed_runs
            on = speed[0].on if speed else "-"
            sections.append((f"suggested speedup_min ({on}, {runs} runs each)",
                             speed_section(speed, margin=settings.margin)))
        for title, (lines, found) in sections:
            out.append(f"\0numcheck calibrate: {title}")
            out += lines
            _merge(edits, found)
        if settings.json_path is not None:
            save_run(settings.json_path, payloads, torch_version=_torch())
            out.append(f"numcheck calibrate: measurements saved to {settings.json_path} "
                       f"(pool them into another run with {CALIBRATE_WITH_OPTION} PATH)")
        stands = blocking(plan.findings, settings.accepted, settings.renew)
        # A bug-sized measurement, or one no budget can be made of (NaN): exit 1 even when
        # only printing, so that a script never takes the tables for a budget.
        suspects = [f for f in stands if f.kind in SUSPECT or f.kind == "nonfinite"]
        out += refusal_lines(stands, write=settings.write)
        notes = accepted_notes(plan.findings, settings.accepted, CALIBRATE_ACCEPT_OPTION)
        for (case, variant), texts in notes.items():
            out.append(f"numcheck calibrate: {case}: {variant}'s tables take measurements "
                       f"accepted past the honest limits ({CALIBRATE_ACCEPT_OPTION}); the "
                       "record keeps why:")
            out += [f"  {t}" for t in texts]
        if not settings.write:
            out.append(f"numcheck calibrate: nothing written; {CALIBRATE_WRITE_OPTION} writes "
                       "these values into the case files")
            return out, bool(suspects)
        if stands:
            return out, True
        if not edits:
            out.append("numcheck calibrate: no value to write")
        provenance = (run.command, _when(payloads))
        for path, file_edits in edits.items():
            shown = _rel(Path(path), self.config.rootpath)
            records = {key: replace(rec, accepted=tuple(notes.get(key, ())))
                       for key, rec in plan.records.get(path, {}).items()}
            try:
                changes, skipped = write_edits(Path(path), file_edits, provenance, records)
            except CaseWriteError as exc:
                out.append(f"numcheck calibrate: {exc}: nothing written to it")
                continue
            values = [c for c in changes if c.old is not None or c.new is not None]
            out.append(f"numcheck calibrate: {shown}: {len(values)} value(s) changed")
            for change in changes:
                tighter = "  (tighter than before)" if _tighter(change) else ""
                out.append(f"  {change.describe()}{tighter}")
            for skip in skipped:
                out.append(f"  not written: {skip.describe()}")
        return out, False

    def _order(self) -> list[str]:
        return self.order


#: Seconds a calibration check runs before it says how far it got (then a line per
#: variant measured): one of an FP8 family's seven members over 22 seeds can take minutes.
PROGRESS_AFTER_S = 10.0


class Progressed:
    """The progress lines of one calibration check: once it has run
    :data:`PROGRESS_AFTER_S`, a line per variant measured (what, how many of how many,
    the time so far), so that a long calibration never looks hung."""

    def __init__(self, check: str, total: int, seeds: int,
                 progress: Callable[[str], None] | None) -> None:
        import time

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


def _tighter(change: Change) -> bool:
    """A written value that demands more than the file did (a lower error budget, a higher
    recall floor or speed threshold)."""
    if change.old is None or change.new is None:
        return False
    parts = change.where.split(".")
    raises = parts[-1] in LOWER_IS_WORSE or "speedup_min" in parts
    return change.new > change.old if raises else change.new < change.old


def refusal_lines(findings: list[Finding], *, write: bool) -> list[str]:
    """The findings that stand, as the terminal summary says them: what was (or would be)
    refused and the way out of each kind."""
    if not findings:
        return []
    suspects = [f for f in findings if f.kind in SUSPECT]
    others = [f for f in findings if f.kind not in SUSPECT]
    lines = [("numcheck calibrate: refused to write; nothing written (exit status 1):" if write
              else f"numcheck calibrate: {CALIBRATE_WRITE_OPTION} would refuse these tables"
              + (" (exit status 1: a selected variant looks like a bug):" if suspects else
                 " (exit status 1: a measurement is not finite):"
                 if any(f.kind == "nonfinite" for f in findings) else ":"))]
    if suspects:
        lines.append("  a selected variant looks like a bug, not an honest implementation of "
                     "its class (docs/budgets.md, \"What calibration refuses\"):")
        heads: dict[tuple[str, str], list[str]] = {}
        for f in suspects:  # one entry per variant and case: its worst element, then why
            entry = heads.setdefault((f.case, f.variant), [f"  - {f.head}"])
            entry += [f"      {d}" for d in f.details]
        for entry in heads.values():
            lines += entry
        names = ",".join(dict.fromkeys(f.variant.split()[0] for f in suspects))
        lines.append("    Fix: a variant past its class's honest limits is the suspect: keep its "
                     "budget and fix it (run 'reproduce' with --numcheck-explain to see where "
                     "it strays); budgets come from the class's honest implementations. If it "
                     "is honest and rounds where the class's envelope does not (a scheme of "
                     f"its own), write anyway with {CALIBRATE_ACCEPT_OPTION} {names}: the case "
                     "file records it")
    for f in others:
        first, *rest = f.text.split("\n")
        lines.append(f"  - {first}")
        lines += [f"      {r}" for r in rest]
    if any(f.kind in ("record", "unrecorded") for f in others):
        lines.append(f"    ({CALIBRATE_RENEW_OPTION} sets tables from this run alone)")
    return lines


def _merge(into: dict[str, list[Edit]], more: dict[str, list[Edit]]) -> None:
    for path, found in more.items():
        into.setdefault(path, []).extend(found)


def _command(config: pytest.Config) -> str:
    """This run's command line, as the case file's header names it."""
    import shlex

    return "pytest " + shlex.join(config.invocation_params.args)


def _when(payloads: Sequence[Payload]) -> str:
    """``2026-12-03, cpu, torch 2.13.0+cpu``: the date, the devices measured, torch."""
    from datetime import date

    devices = ", ".join(sorted({p.check.device for p in payloads})) or "-"
    return f"{date.today().isoformat()}, {devices}, torch {_torch()}"


def _device(payloads: Sequence[Payload]) -> str:
    return payloads[0].check.device if payloads else "-"


def _torch() -> str:
    import torch

    return torch.__version__


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
