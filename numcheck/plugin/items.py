"""What a ``--numcheck`` run collects: a case file, its cases, and one item per check.

A ``cases/*.toml`` file (:class:`CaseFile`) yields one collector per case (:class:`CaseNode`),
which yields an item for the op's reference and one per variant on the run's device
(:class:`CheckItem`). An item runs its check through the session's executor
(:meth:`numcheck.plugin.session.NumcheckSession.execute`, the seam of
:mod:`numcheck.execute.executor`), keeps its record, and turns the result into a pytest outcome
with one message layout: a pass, a :class:`NumcheckFailure` whose message is the whole
report, an xfail for a known-bad variant caught as its case expects, or the error that left
no verdict (a golden refused, a variant that raised, a timer that cannot time).
"""

from __future__ import annotations

import functools
import itertools
import shlex
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from numcheck.calibrate.measuring import MeasureRequest
from numcheck.calibrate.payloads import CheckRef
from numcheck.cases import Case, CaseFileError, load_case_file
from numcheck.check import cannot_run
from numcheck.check.result import CheckResult, Settled, display_id
from numcheck.execute.aborted import CheckAborted
from numcheck.execute.executor import CheckRequest, Request
from numcheck.goldens.files import GoldenError
from numcheck.honest.gemm_family import complete_members
from numcheck.ops.registry import get_op
from numcheck.ops.spec import VariantError
from numcheck.overhead.limits import OVERHEAD_GATES
from numcheck.perf.timing import TimingError
from numcheck.plugin import options
from numcheck.plugin.calibration import CalibrationMode
from numcheck.plugin.session import NumcheckSession
from numcheck.report.records import (
    Record,
    junit_properties,
    record_from_result,
    record_without_verdict,
)
from numcheck.report.render import Commands, failure_message, footer
from numcheck.report.skips import perf_only_skip

#: The errors that leave a check without a verdict: reported as errors, with the case.
NO_VERDICT = (GoldenError, VariantError, TimingError)


class NumcheckFailure(Exception):
    """A check that ran and missed its budget; the message is the whole report."""


def session_of(config: pytest.Config) -> NumcheckSession:
    """The run's session (``--numcheck`` is on whenever a case is collected)."""
    return config.stash[NumcheckSession.KEY]


class CaseFile(pytest.File):
    """A ``cases/*.toml`` file: one collector per case in it (a sweep's: one per point)."""

    def collect(self) -> Iterator[CaseNode | SweepNode]:
        state = session_of(self.config)
        # Registration is over: the members of schemes declared after add_gemm_members.
        complete_members()
        # Calibration may read a case whose inputs still lack their own tables: it sets them.
        cases = load_case_file(self.path, measuring=CalibrationMode.KEY in self.config.stash)
        for case in cases:
            state.case_ids.claim(case)
        for name, group in itertools.groupby(cases, key=lambda c: c.table):
            points = list(group)
            if points[0].sweep is None:
                yield CaseNode.from_parent(self, name=name, case=points[0])
            else:
                yield SweepNode.from_parent(self, name=name, points=points)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFileError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class SweepNode(pytest.Collector):
    """A shape sweep: one case node per point, named by the point's label (``-k`` selects
    it; the sweep's node id selects every point)."""

    def __init__(self, *, points: list[Case], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.points = points

    def collect(self) -> Iterator[CaseNode]:
        for case in self.points:
            assert case.sweep is not None
            yield CaseNode.from_parent(self, name=case.sweep.label, case=case)


class CaseNode(pytest.Collector):
    """One case: an item for the reference (drift) and one per variant, on the run's device."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def collect(self) -> Iterator[CheckItem]:
        device = session_of(self.config).device.kind
        op = get_op(self.case.op)
        item = MeasureItem if CalibrationMode.KEY in self.config.stash else CheckItem
        for variant in (op.reference, *self.case.variants):
            yield item.from_parent(self, name=f"{variant}[{device}]", variant=variant,
                                   device=device)


class CheckItem(pytest.Item):
    """One (case, variant, device) check."""

    def __init__(self, *, variant: str, device: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.variant = variant
        self.device = device
        assert isinstance(self.parent, CaseNode)
        self.case: Case = self.parent.case
        self.add_marker(pytest.mark.numcheck)
        #: The check's report record, once it has one; shipped once on a test report.
        self.record: Record | None = None
        self.record_shipped = False

    @property
    def display_id(self) -> str:
        return display_id(self.case, self.variant, self.device)

    @property
    def case_nodeid(self) -> str:
        """The node id of the item's case (``cases/x.toml::case``)."""
        assert self.parent is not None
        return self.parent.nodeid

    @property
    def regen_command(self) -> str:
        """The command that regenerates the case's golden."""
        return f"pytest {options.OPTION} {options.REGEN_OPTION} {shlex.quote(self.case_nodeid)}"

    def commands(self) -> Commands:
        from numcheck.calibrate.family import honest_family
        from numcheck.report.limit_text import calibrate_command

        dev = f" {options.DEVICE_OPTION} {self.device}"
        # A budget too tight is calibrated on the class's honest family, never on the
        # failing variant alone (which would budget a bug in).
        family = honest_family(get_op(self.case.op), self.case, self.variant, self.device)
        # A sweep's budgets are its case's, set over every point: calibrate the whole sweep.
        sweep = self.parent.parent if self.case.sweep is not None else None  # type: ignore[union-attr]
        return Commands(
            reproduce=f"pytest {options.OPTION}{dev} {shlex.quote(self.nodeid)}",
            regenerate=self.regen_command,
            calibrate=family.register_hint() + calibrate_command(
                self.case_nodeid if sweep is None else sweep.nodeid, self.device,
                pool=family.pool_option(),
                checks=[] if sweep is not None else
                [f"{self.case_nodeid}::{v}[{self.device}]" for v in family.select]),
            family=family.precision,
            speed=(f"pytest {options.OPTION} {options.PERF_OPTION}{dev} "
                   f"{options.CALIBRATE_SPEED_OPTION}=5 {shlex.quote(self.nodeid)}"),
        )

    @functools.cached_property
    def skip(self) -> tuple[str, dict[str, str] | None] | None:
        """Why the check does not run here, with its perf-only note; None: it runs."""
        gates = session_of(self.config).run.active_gates
        if self.case.perf_only and (self.device not in self.case.devices or "perf" not in gates):
            return perf_only_skip(self.case.id, self.case.devices, self.device,
                                  options.PERF_OPTION)
        reason = cannot_run(get_op(self.case.op), self.case, self.variant, self.device,
                            gates=gates, perf_switch=options.PERF_OPTION)
        reason = reason or session_of(self.config).sanitize_skip
        return None if reason is None else (reason, None)

    @functools.cached_property
    def request(self) -> Request:
        """What the item asks the run's executor (made once: the run dispatches it ahead)."""
        return CheckRequest(self.case, self.variant, self.device, regen_hint=self.regen_command)

    def setup(self) -> None:
        if self.skip is not None:
            reason, perf_only = self.skip
            self._set_record(status="skip", reason=reason, perf_only=perf_only)
            pytest.skip(reason)

    def runtest(self) -> None:
        state = session_of(self.config)
        commands = self.commands()
        try:
            result = state.execute(self.request)
        except NO_VERDICT as exc:
            self._set_record(status="error", reason=str(exc), error_kind=type(exc).__name__)
            raise
        except CheckAborted as exc:
            aborted = exc.aborted
            self._set_record(status="error", reason=f"{aborted.kind}: {aborted.error}",
                             error_kind=aborted.kind)
            raise
        assert isinstance(result, CheckResult)
        state.keep(self.name, self.nodeid, result)
        self._set_record(result=result)
        settled = result.settled
        if settled is not None and settled.xfail:
            reason = f"expected failure ({', '.join(settled.caught)}): {settled.reason}"
            assert self.record is not None
            self.record = replace(self.record, status="xfail", reason=reason)
            # Without the traceback pytest would render (and parse its source files for).
            raise pytest.xfail.Exception(reason, pytrace=False)
        if settled is not None and not settled.outside:
            # A known-bad variant that an expected gate or output no longer catches.
            message = self._xpass_message(settled, commands)
            assert self.record is not None
            self.record = replace(self.record, status="fail", reason=message.splitlines()[0])
            raise NumcheckFailure(message)
        if not result.passed:  # (a known-bad variant failing outside its expectation too)
            message = failure_message(result, commands, self._source())
            if result.obtained is not None:
                message += f"\n  obtained:    {state.rel(result.obtained)}"
            if result.overhead is not None and any(
                    v.output in OVERHEAD_GATES for v in result.violations):
                # The preparation's summary is already among the message's lines.
                message += "\n\n" + "\n".join(result.overhead.lines(prepared=False))
            raise NumcheckFailure(message)

    def _xpass_message(self, settled: Settled, commands: Commands) -> str:
        """A known-bad variant that an active gate expected to catch, and did not."""
        caught = (f"  caught as expected: {', '.join(settled.caught)}\n" if settled.caught
                  else "")
        return (
            f"numcheck XPASS(strict) {self.display_id}\n"
            f"  expected {', '.join(settled.missed)} to fail ({settled.reason}),\n"
            f"  but the variant passed it: the gate no longer catches this known-bad variant.\n"
            f"  expectation: {settled.expected}\n{caught}\n"
            f"  case:        {self._source()} [{self.case.id}]\n"
            f"  reproduce:   {commands.reproduce}"
        )

    def _set_record(self, result: CheckResult | None = None, **without_verdict: Any) -> None:
        """The check's record (from its result, or a skip/error), and its junitxml properties."""
        state = session_of(self.config)
        if result is not None:
            self.record = record_from_result(
                result, nodeid=self.nodeid, source=self._source(),
                device_name=state.device.name(), device_index=state.device.index,
                worker=state.worker,
            )
        else:
            self.record = record_without_verdict(
                id=self.display_id, nodeid=self.nodeid, op=self.case.op, case=self.case.id,
                variant=self.variant, device=self.device, source=self._source(),
                worker=state.worker, sweep=None if self.case.sweep is None
                else self.case.sweep.as_dict(), **without_verdict,
            )
        self.user_properties.extend(junit_properties(self.record))

    def _source(self) -> str:
        try:
            return str(self.path.relative_to(self.config.rootpath))
        except ValueError:
            return str(self.path)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        exc = excinfo.value
        if isinstance(exc, NumcheckFailure):
            return str(exc)
        if isinstance(exc, CheckAborted):
            where = ("case:", f"{self._source()} [{self.case.id}]")
            return "\n".join([str(exc), "", *footer(where, self.commands())[:2]])
        if isinstance(exc, NO_VERDICT):
            where = ("case:", f"{self._source()} [{self.case.id}]")
            return "\n".join([f"numcheck {type(exc).__name__} {self.display_id}", f"  {exc}", "",
                              *footer(where, self.commands(), regenerate_note=False)])
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.display_id


class MeasureItem(CheckItem):
    """One check of a calibration run (:mod:`numcheck.plugin.calibration`): measured, never
    gated. It sends a measure request through the run's executor, as a gating check sends
    its check request; what it measured (its payloads) travels on its call report."""

    @functools.cached_property
    def request(self) -> Request:
        mode = self.config.stash[CalibrationMode.KEY]
        checked = frozenset(mode.selected.get((self.case.source, self.case.id), ()))
        return MeasureRequest(self.case, self.variant, self.check_ref(),
                              mode.settings.measuring, checked=checked)

    def runtest(self) -> None:
        measured = session_of(self.config).execute(self.request)
        assert isinstance(measured, list)
        self.numcheck_calibration = measured

    def check_ref(self) -> CheckRef:
        """The check as a calibration payload names it."""
        # A sweep's points are budgeted as one case: its table (Case.table), every point.
        sweep = self.case.sweep
        return CheckRef(op=self.case.op, case=self.case.table, source=self._source(),
                        path=str(Path(self.path).resolve()), device=self.device,
                        nodeid=self.nodeid, point=None if sweep is None else sweep.label)
