"""The pytest hooks of a ``--numcheck`` run, each handing its work to the session.

Registered by :mod:`numcheck.plugin` (as ``numcheck-session``) only when ``--numcheck`` is
given, beside the :class:`~numcheck.plugin.session.NumcheckSession` it serves: collection of
the case files, the records shipped on the test reports and collected on the controller,
the collection order, the checks dispatched to the workers before the run loop and the
baseline comparison after it, the report files at session finish, and the terminal summary. The calibration mode has hooks of its own
(:mod:`numcheck.plugin.calibration`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from numcheck.plugin.calibration import CalibrationMode
from numcheck.plugin.items import CaseFile, CheckItem
from numcheck.plugin.selection import nothing_selected
from numcheck.plugin.session import NumcheckSession
from numcheck.plugin.shipping import ship


class RunHooks:
    """The hooks of a gating (or calibrating) run over the case files."""

    def __init__(self, session: NumcheckSession) -> None:
        self.session = session

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        if file_path.suffix == ".toml" and file_path.resolve().is_relative_to(
                self.session.run.cases_dir):
            return CaseFile.from_parent(parent, path=file_path)
        return None

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return self.session.header_lines()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        state = self.session
        state.book.order = [item.nodeid for item in session.items]
        # A collection error already stops the run with its own message (exit 2).
        if not state.is_worker and not session.testsfailed and not any(
                isinstance(i, CheckItem) for i in session.items):
            raise pytest.UsageError(nothing_selected(state.config, state.run.cases_dir))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # Every worker collects the same items in the same order; any one gives the order.
        if not self.session.book.order:
            self.session.book.order = list(ids)

    # -- records travel on the test reports ------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        report = yield
        if isinstance(item, CheckItem) and item.record is not None and not item.record_shipped:
            ship(report, item.record, regen=self.session.regen_shipment())
            item.record_shipped = True
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.session.is_worker:
            return  # the controller collects; xdist forwards this report to it
        self.session.book.collect(report)

    # -- the end of the run ----------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        # The selected checks (after -k, deselection, --lf), dispatched before the first
        # runs: the workers run them while each item waits for its own.
        option = session.config.option
        if not option.collectonly and not (session.testsfailed
                                           and not option.continue_on_collection_errors):
            self.session.dispatch([item.request for item in session.items
                                   if isinstance(item, CheckItem) and item.skip is None])
        result = yield
        if self.session.compare_baseline():
            session.testsfailed += 1  # the gate fails: exit status 1
        return result

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = self.session.config
        if self.session.is_worker or config.option.collectonly:
            return
        if CalibrationMode.KEY in config.stash:
            return  # measuring, not gating: calibration decides its own exit status
        self.session.finish(session, exitstatus)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.session.terminal_summary(terminalreporter)

