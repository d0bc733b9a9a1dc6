"""The state of a ``--numcheck`` run, kept in one object under a stash key.

:class:`NumcheckSession` is made at configure time by :mod:`numcheck.plugin` when
``--numcheck`` is given, stored in ``config.stash[NumcheckSession.KEY]``, and read by the
run's hooks (:mod:`numcheck.plugin.runhooks`) and its items (:mod:`numcheck.plugin.items`).
It holds the parts of the run, each from the module that does that job, and delegates:

- what the run was asked (:mod:`~numcheck.plugin.runconfig`) and its device
  (:mod:`~numcheck.plugin.device`);
- the case's inputs and golden, made once and regenerated under the regen flag
  (:class:`~numcheck.execute.case_cache.CaseCache`), and the executor the items run their
  checks through (:mod:`numcheck.execute.executor`: the seam process isolation replaces);
- the records shipped from the checks (:mod:`~numcheck.plugin.shipping`), the report, drift
  and files (:mod:`~numcheck.plugin.reporting`), the terminal's summary
  (:mod:`~numcheck.plugin.summary`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from numcheck.cases import CaseIds
from numcheck.check.perf import PerfResult
from numcheck.check.result import CheckResult
from numcheck.execute.case_cache import CaseCache
from numcheck.execute.executor import Answer, Executor, InProcess, Request, relative
from numcheck.execute.isolated import Isolated
from numcheck.perf.noise import reset_machine_noise
from numcheck.perf.sections import DeviceSections
from numcheck.plugin import benchrecord, options
from numcheck.plugin.device import RunDevice
from numcheck.plugin.reporting import (
    build_report,
    drift_against_baseline,
    files_written,
    with_environment,
    write_files,
)
from numcheck.plugin.runconfig import read_run_config
from numcheck.plugin.shipping import RecordBook
from numcheck.plugin.summary import OverheadTable, Progress, write_stale, write_summary
from numcheck.plugin.workers import is_worker, worker_count, worker_id
from numcheck.report.drift_result import Drift
from numcheck.report.records import Report, order_records


class NumcheckSession:
    """A ``--numcheck`` run's state, and what the hooks and items ask of it."""

    KEY = pytest.StashKey["NumcheckSession"]()

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        #: Which xdist worker this is (None on the controller or serially).
        self.worker = worker_id(config)
        self.is_worker = is_worker(config)
        self.device = RunDevice(config)
        self.run = read_run_config(config, self.device.kind, is_worker=self.is_worker)
        # Per-device locks: timed sections exclusive, numerics shared, so workers sharing a
        # GPU never time each other's kernels.
        reset_machine_noise()
        self.sections = DeviceSections(
            self.device.kind,
            enabled=self.device.kind == "cuda" or "perf" in self.run.active_gates)
        self.cases = CaseCache(self.run.goldens_dir, self.device.kind, regen=self.run.regen)
        self.progress = Progress(config, is_worker=self.is_worker)
        #: Where the items run their checks: worker processes (numcheck.execute.isolated),
        #: or this process (the seam, docs/architecture.md).
        self.executor: Executor
        self.isolated: Isolated | None = None
        #: Why every check skips under --numcheck-sanitize (on the CPU, no tool found).
        self.sanitize_skip: str | None = None
        if self.run.isolate == "process":
            from numcheck.plugin.isolation import isolated_executor, sanitizer_for

            sanitizer, self.sanitize_skip = sanitizer_for(self.run.sanitize, self.device.kind)
            self.executor = self.isolated = isolated_executor(config, self, sanitizer)
            config.add_cleanup(self.isolated.close)
        else:
            self.executor = InProcess(
                self.cases, gates=self.run.active_gates, explain=self.run.explain,
                sections=self.sections, progress=self.progress,
                first_call_note_s=self.run.first_call_note_s,
                obtained_dir=self.run.obtained_dir, root=config.rootpath)
        self.case_ids = CaseIds()
        self.book = RecordBook()
        self.overhead = OverheadTable(explain=self.run.explain)
        self.drift: Drift | None = None
        #: Where the run was kept (--numcheck-save), once it was.
        self.saved: Path | None = None
        #: Said last when the gate failed although no test did.
        self.gate_note = ""

    # -- the checks -----------------------------------------------------------------------

    def dispatch(self, requests: list[Request]) -> None:
        """Hand the run's checks to its workers up front, in the order the items will ask
        for them (they run as workers come free; each item then waits for its own). Not in
        an xdist worker: its items come one by one, and it runs them one by one."""
        if self.isolated is not None and not self.is_worker:
            self.isolated.dispatch(requests)

    def execute(self, request: Request) -> Answer:
        """Run one check, or a calibration's measure request, through the run's executor
        (the seam process isolation replaces)."""
        return self.executor(request)

    def keep(self, name: str, nodeid: str, result: CheckResult) -> None:
        """What the end-of-run summary needs from one check: its cast ledger, and its timing
        (recorded for pytest-benchmark under the item's ``name`` and ``nodeid``)."""
        perf = result.perf
        if perf is not None:
            assert isinstance(perf, PerfResult)  # what run_check's speed gate leaves
            benchrecord.record(self.config, name, nodeid, perf)
        self.overhead.add(result)

    def rel(self, path: Path) -> str:
        """``path`` relative to the rootdir, where it lies under it."""
        return relative(path, self.config.rootpath)

    def regen_shipment(self) -> tuple[Mapping[str, bool], Mapping[str, str]] | None:
        """Under the regen flag, the goldens this process regenerated (rewritten or not) and
        what each regeneration did, by relative path; None without the flag."""
        if not self.run.regen:
            return None
        return ({self.rel(p): written for p, written in self.cases.regenerated.items()},
                {self.rel(p): note for p, note in self.cases.regen_notes.items()})

    # -- the end of the run ---------------------------------------------------------------

    def report(self, exitstatus: int | None = None) -> Report:
        """Everything collected so far, in collection order, without the run's environment."""
        return build_report(self.book, exitstatus=exitstatus, drift=self.drift)

    def compare_baseline(self) -> bool:
        """Compare the run with its baseline (on the controller); whether it regressed."""
        if self.is_worker:
            return False
        label = str(self.config.getoption(options.BASELINE_OPTION))
        self.drift = drift_against_baseline(self.run, self.report(), label=label)
        return bool(self.drift is not None and self.drift.regressions)

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """The gate's verdict and the exit status made to agree; the report files written."""
        report = self.report(int(exitstatus))
        if exitstatus == 0 and not report.passed:
            # The gate and the exit status must agree: a report that says "fail" (no check
            # ran, under xdist too) never comes with exit 0.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self.gate_note = ("numcheck: the gate failed although no test failed: "
                              + ("no numcheck check ran" if not report.records
                                 else "a check did not pass") + "; exit status 1")
            report = self.report(int(session.exitstatus))
        if not self.run.writes_files:
            return
        report = with_environment(report, self.config, device=self.device.kind,
                                  sections=self.sections)
        self.saved = write_files(self.run, report)

    def terminal_summary(self, tr: Any) -> None:
        """The summary (on the controller, once a check made a record or a golden was
        rewritten), the stale goldens, and the gate's note."""
        if not self.is_worker and (self.book.records or self.book.goldens_written):
            write_summary(
                tr, device=self.device.kind,
                records=order_records(self.book.records.values(), self.book.order),
                first_call_note_s=self.run.first_call_note_s,
                workers=worker_count(self.config), overhead=self.overhead,
                goldens_written=self.book.goldens_written, golden_notes=self.book.golden_notes,
                drift=self.drift, written=files_written(self.run),
                saved=None if self.saved is None else self.rel(self.saved))
        if not self.is_worker:  # xdist workers: the controller reports
            write_stale(tr, cases_dir=self.run.cases_dir, goldens_dir=self.run.goldens_dir,
                        narrowed_by=self.run.narrowed_by, delete=self.run.prune, rel=self.rel)
        if self.gate_note:
            tr.write_line(self.gate_note)

    def header_lines(self) -> list[str]:
        """The report header's lines on the device locks (CUDA, or a timing run)."""
        gates = self.run.active_gates
        if self.is_worker or "perf" not in gates and self.device.kind != "cuda":
            return []
        return self.sections.header_lines(worker_count(self.config), perf="perf" in gates)
