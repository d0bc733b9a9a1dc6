"""The numcheck run: collection of case files into test items, and the end-of-run summary.

Registered as a plugin by :mod:`numcheck.plugin` only when ``--numcheck`` is given. It
holds the run's state (device, folders, loaded goldens, results) and turns the pure
modules' exceptions into pytest outcomes with one message layout.
"""

from __future__ import annotations

import contextlib
import itertools
import shlex
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from numcheck.cases import Case, CaseFileError, CaseIds, load_case_file
from numcheck.check import cannot_run, run_check
from numcheck.check.extras import annotate, keep_failed
from numcheck.check.firstcall import first_call_lines
from numcheck.check.make_golden import regenerate
from numcheck.check.perf import PerfResult
from numcheck.check.result import CheckResult, Settled, display_id
from numcheck.check.run import CaseInputs
from numcheck.devices import device_name
from numcheck.goldens.case_golden import CaseGolden, load_for_case
from numcheck.goldens.files import GoldenError, golden_path
from numcheck.goldens.obtained import DEFAULT_FOLDER as DEFAULT_OBTAINED
from numcheck.goldens.stale import find_stale, prune
from numcheck.history.store import save_folder, save_report
from numcheck.ops.registry import OpSpec, get_op
from numcheck.ops.spec import VariantError
from numcheck.overhead.gate import (
    OVERHEAD_GATES,
    OVERHEAD_HEADER,
    OverheadReport,
    default_gates,
    overhead_row,
)
from numcheck.perf.sections import DeviceSections, lock_wait_lines
from numcheck.perf.table import PERF_HEADER, noise_lines, perf_rows
from numcheck.perf.timing import TimingError
from numcheck.plugin import options
from numcheck.plugin.calibration import CalibrationMode
from numcheck.plugin.workers import is_worker, pin_worker_gpu, worker_count, worker_id
from numcheck.prepare import PREPARED_COLUMN
from numcheck.report.drift import compare, drift_headline, drift_rows
from numcheck.report.drift_result import Drift, Rules
from numcheck.report.environment import environment
from numcheck.report.markdown import to_markdown
from numcheck.report.records import (
    Record,
    Report,
    ReportError,
    junit_properties,
    load_report,
    now,
    order_records,
    record_from_dict,
    record_from_nodeid,
    record_from_result,
    record_to_dict,
    record_without_verdict,
    write_json,
)
from numcheck.report.render import Commands, failure_message, footer, summary_table, table
from numcheck.report.skips import collapse as collapse_skips
from numcheck.report.skips import perf_only_reason
from numcheck.report.step_summary import append_step_summary
from numcheck.report.sweep_rows import fold_overhead_rows

#: ``report.user_properties`` names on which a worker ships its record and its golden
#: rewrites to the controller (pytest-xdist serialises user_properties with every report).
RECORD_PROPERTY = "numcheck_record"
GOLDENS_PROPERTY = "numcheck_goldens"
GOLDEN_NOTES_PROPERTY = "numcheck_golden_notes"


class NumcheckFailure(Exception):
    """A check that ran and missed its budget; the message is the whole report."""



def resolve_device(requested: str) -> str:
    """``auto`` -> cuda when torch sees a GPU, else cpu; ``cuda`` without one is an error."""
    has_cuda = torch.cuda.is_available()
    if requested == "auto":
        return "cuda" if has_cuda else "cpu"
    if requested == "cuda" and not has_cuda:
        build = torch.version.cuda or "cpu-only"
        raise pytest.UsageError(
            f"{options.DEVICE_OPTION} cuda: torch {torch.__version__} (CUDA build: {build}) "
            f"sees no CUDA device. Fix: run on a GPU machine, or use "
            f"{options.DEVICE_OPTION} auto to fall back to the CPU"
        )
    return requested


def requested_device(config: pytest.Config) -> str:
    """The device asked for: ``--numcheck-device``, else the ``numcheck_device`` ini key."""
    given = config.getoption(options.DEVICE_OPTION)
    if given is not None:
        return str(given)
    value = str(config.getini(options.DEVICE_INI)).strip() or "auto"
    if value not in options.DEVICES:
        raise pytest.UsageError(
            f"ini key {options.DEVICE_INI} = {value!r} in {config.inipath or 'the ini file'}: "
            f"not a device. Fix: set it to one of {', '.join(options.DEVICES)}"
        )
    return value


def run_gates(device: str, *, perf: bool, explain: bool) -> set[str]:
    """The gates beyond the numerics that a run measures.

    The cast ledger always (and the kernel audit on CUDA) unless explain mode prints them
    instead; the speedup gate with --numcheck-perf. A timing run leaves the kernel audit
    off: it attaches CUPTI through torch.profiler, and launches stay slower after it
    (docs/overhead.md, "On a GPU", has the measurement).
    """
    gates = set() if explain else default_gates(device)
    if perf:
        gates.add("perf")
        gates.discard("kernels")
    return gates


class NumcheckSession:
    """Run-wide state and the hooks that need it."""

    KEY = pytest.StashKey["NumcheckSession"]()

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.device = resolve_device(requested_device(config))
        self.regen = bool(config.getoption(options.REGEN_OPTION))
        root = config.rootpath
        self.cases_dir = (root / config.getini(options.CASES_INI)).resolve()
        self.goldens_dir = (root / config.getini(options.GOLDENS_INI)).resolve()
        self.regenerated: dict[Path, bool] = {}
        #: What each regeneration did, in the summary's words (numcheck.goldens.regen.RegenOutcome).
        self.regen_notes: dict[Path, str] = {}
        self.gate_note = ""
        self.golden_notes: dict[str, str] = {}
        self.case_ids = CaseIds()
        self._goldens: dict[Path, CaseGolden | GoldenError] = {}
        self._inputs: tuple[Case, CaseInputs] | None = None
        self._init_worker(config)
        self._init_reporting(config)
        self._init_gates(config)
        self._init_selection(config)

    def _init_worker(self, config: pytest.Config) -> None:
        """Which xdist worker this is, and (on CUDA) the GPU it is pinned to."""
        self.worker = worker_id(config)
        self.is_worker = is_worker(config)
        self.device_index: int | None = None
        if self.device == "cuda":
            # Before any CUDA work of this process: each xdist worker gets its own GPU.
            self.device_index = pin_worker_gpu(config)
        self._device_name: str | None = None

    def _init_reporting(self, config: pytest.Config) -> None:
        """Records, report paths, the baseline and drift rules.

        Workers make records; the controller (or a serial run) collects them from the test
        reports and writes the report files.
        """
        self.records: dict[str, Record] = {}
        self.order: list[str] = []
        self.goldens_written: dict[str, bool] = {}
        self.drift: Drift | None = None
        self.report_path = self._path_option(options.REPORT_OPTION)
        self.markdown_path = self._path_option(options.MARKDOWN_OPTION)
        self.baseline_path = self._path_option(options.BASELINE_OPTION)
        self.html_path = self._path_option(options.HTML_OPTION)
        self.obtained_dir = (self._path_option(options.OBTAINED_OPTION)
                             or config.rootpath / DEFAULT_OBTAINED)
        #: --numcheck-save / --numcheck-save-dir: (folder, may mark it git-ignored), and
        #: where the run was kept.
        self.save_to = save_folder(config.rootpath,
                                   save=bool(config.getoption(options.SAVE_OPTION)),
                                   save_dir=self._path_option(options.SAVE_DIR_OPTION))
        self.saved: Path | None = None
        self.baseline: Report | None = None
        try:
            self.rules = Rules.from_pairs(config.getini(options.DRIFT_INI))
        except ValueError as exc:
            raise pytest.UsageError(f"{options.DRIFT_INI}: {exc}") from None
        if self.baseline_path is not None and not self.is_worker:
            try:
                self.baseline = load_report(self.baseline_path)
            except ReportError as exc:
                raise pytest.UsageError(f"{options.BASELINE_OPTION} {exc}") from None

    def _init_gates(self, config: pytest.Config) -> None:
        """The gates beyond the numerics this run measures, and the per-device locks."""
        self.perf_results: list[PerfResult] = []
        #: --numcheck-explain: overhead reports are printed, not gated.
        self.explain = bool(config.getoption(options.EXPLAIN_OPTION))
        #: Gates beyond the numerics that this run measures (e.g. "perf" with
        #: --numcheck-perf); an op's outputs are always active.
        self.active_gates: set[str] = run_gates(
            self.device, perf=bool(config.getoption(options.PERF_OPTION)), explain=self.explain
        )
        self.explained: list[tuple[str, OverheadReport]] = []
        #: Per-device locks: timed sections exclusive, numerics shared, so workers sharing a
        #: GPU never time each other's kernels.
        from numcheck.perf.noise import reset_machine_noise

        reset_machine_noise()
        self.sections = DeviceSections(
            self.device, enabled=self.device == "cuda" or "perf" in self.active_gates
        )
        self.overhead_rows: list[list[str]] = []
        #: Per overhead row: the sweep case and point of its check (folded in the summary).
        self.overhead_points: list[tuple[str, str] | None] = []
        #: A first call longer than this many seconds prints a progress line while it runs
        #: and is listed in the summary (numcheck.check.firstcall).
        raw = config.getini(options.FIRST_CALL_INI)
        try:
            self.first_call_note_s = float(raw)
            if not self.first_call_note_s >= 0:
                raise ValueError
        except ValueError:
            raise pytest.UsageError(
                f"{options.FIRST_CALL_INI} = {raw!r}: expected a number of seconds >= 0 "
                f"(e.g. {options.FIRST_CALL_INI} = 5)") from None

    def _init_selection(self, config: pytest.Config) -> None:
        """What the run collects: the cases folder when no path is given; prune's guard."""
        if config.args_source != pytest.Config.ArgsSource.ARGS:
            # `pytest --numcheck` with no paths: the cases folder is the suite.
            self._require_cases_dir()
            config.args[:] = [str(self.cases_dir)]
        self.prune = bool(config.getoption(options.PRUNE_OPTION))
        self.narrowed_by = narrowing(config, self.cases_dir)
        if self.prune and self.narrowed_by:
            raise pytest.UsageError(
                f"{options.PRUNE_OPTION} deletes goldens no case uses, so it needs the whole "
                f"cases folder, but the run is narrowed by {self.narrowed_by}. Fix: run "
                f"pytest {options.OPTION} {options.PRUNE_OPTION} without it"
            )

    def _path_option(self, name: str) -> Path | None:
        value = self.config.getoption(name)
        return None if not value else self.config.invocation_params.dir / value

    def device_name(self) -> str:
        """``cpu``, or the CUDA device's name (of this worker's GPU)."""
        if self._device_name is None:
            if self.device == "cuda":
                self.device_index = torch.cuda.current_device()
            self._device_name = device_name(self.device, index=self.device_index)
        return self._device_name

    def _require_cases_dir(self) -> None:
        if not self.cases_dir.is_dir():
            raise pytest.UsageError(
                f"numcheck: no cases folder at {self.cases_dir}. Fix: create it with a "
                f"case file (see README 'Writing a case'), or point the {options.CASES_INI} "
                "ini key at yours"
            )
        if not any(self.cases_dir.glob("*.toml")):
            raise pytest.UsageError(
                f"numcheck: the cases folder {self.cases_dir} holds no *.toml case file. "
                "Fix: add one (see README 'Writing a case'), or point the "
                f"{options.CASES_INI} ini key at the folder that has them"
            )

    # -- collection -------------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> Any:
        if file_path.suffix == ".toml" and file_path.resolve().is_relative_to(self.cases_dir):
            return CaseFile.from_parent(parent, path=file_path)
        return None

    # -- running ----------------------------------------------------------------------

    def inputs_for(self, op: OpSpec, case: Case) -> CaseInputs:
        # Items of one case run back to back; keep only the current case's inputs.
        if self._inputs is None or self._inputs[0] is not case:
            self._inputs = (case, CaseInputs(op, case))
        return self._inputs[1]

    def golden_for(self, op: OpSpec, case: Case, commands: Commands) -> CaseGolden:
        """The case's golden, read and validated for the case once (every item of the case
        shares it, or the error that refused it)."""
        path = golden_path(self.goldens_dir, op.name, case.id)
        if self.regen and path not in self.regenerated:
            try:
                outcome = regenerate(path, op, case, self.device, self.inputs_for(op, case))
            except GoldenError as exc:  # refused: nothing written, every item reports it
                self.regenerated[path] = False
                self.regen_notes[path] = "refused (the reference gave NaN/Inf: see the failures)"
                self._goldens[path] = exc
            else:
                self.regenerated[path] = outcome.written
                self.regen_notes[path] = outcome.note
                self._goldens.pop(path, None)
        if path not in self._goldens:
            try:
                self._goldens[path] = load_for_case(
                    path, op, case, fingerprint=self.inputs_for(op, case).fingerprint,
                    regen_hint=commands.regenerate)
            except GoldenError as exc:
                self._goldens[path] = exc
        loaded = self._goldens[path]
        if isinstance(loaded, GoldenError):
            raise loaded
        return loaded

    def progress(self, line: str) -> None:
        """Print a line while a check runs (a long first call): through the terminal with
        output capturing suspended, so it shows at once; an xdist worker, which has no
        terminal of its own, writes it to its stderr, which is the controller's."""
        capman = self.config.pluginmanager.getplugin("capturemanager")
        suspended = (capman.global_and_fixture_disabled() if capman is not None
                     else contextlib.nullcontext())
        with suspended:
            reporter = self.config.pluginmanager.getplugin("terminalreporter")
            if reporter is not None and not self.is_worker:
                reporter.ensure_newline()
                reporter.write_line(line)
            else:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()

    def keep(self, item: CheckItem, result: CheckResult) -> None:
        """What the end-of-run summary needs from one check: its timing (also recorded for
        pytest-benchmark) and its cast ledger."""
        perf, overhead = result.perf, result.overhead
        if perf is not None:
            from numcheck.plugin import benchrecord

            assert isinstance(perf, PerfResult)  # what run_check's speed gate leaves
            self.perf_results.append(perf)
            benchrecord.record(self.config, item.name, item.nodeid, perf)
        if overhead is not None:
            assert isinstance(overhead, OverheadReport)  # what run_check's audit leaves
            prepared = overhead.prepared
            self.overhead_rows.append([
                *overhead_row(f"{item.case.op}::{item.case.id}", item.variant, item.device,
                              overhead),
                "-" if prepared is None else prepared.cell(),
            ])
            sweep = item.case.sweep
            self.overhead_points.append(None if sweep is None else (sweep.case, sweep.label))
            if self.explain:
                self.explained.append((item.display_id, overhead))

    # -- reporting: records travel on the test reports ---------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        report = yield
        if isinstance(item, CheckItem) and item.record is not None and not item.record_shipped:
            # Only on this phase's report (a copy of item.user_properties), so junitxml, which
            # writes the teardown report's properties, never sees the whole record.
            report.user_properties.append((RECORD_PROPERTY, record_to_dict(item.record)))
            item.record_shipped = True
            if self.regen:
                report.user_properties.append((GOLDENS_PROPERTY, self._rewrites()))
                report.user_properties.append((GOLDEN_NOTES_PROPERTY, {
                    self._rel(p): note for p, note in self.regen_notes.items()}))
        return report

    def _rewrites(self) -> dict[str, bool]:
        return {self._rel(path): written for path, written in self.regenerated.items()}

    def _rel(self, path: Path) -> str:
        root = self.config.rootpath
        return str(path.relative_to(root) if path.is_relative_to(root) else path)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return  # the controller collects; xdist forwards this report to it
        notes: dict[str, str] = {}
        rewrites: dict[str, bool] = {}
        for name, value in report.user_properties:
            if name == RECORD_PROPERTY and isinstance(value, dict):
                self.records.setdefault(report.nodeid, record_from_dict(value))
            elif name == GOLDEN_NOTES_PROPERTY and isinstance(value, dict):
                notes = value
            elif name == GOLDENS_PROPERTY and isinstance(value, dict):
                rewrites = value
                for path, written in value.items():
                    self.goldens_written[path] = self.goldens_written.get(path, False) or written
        for path, note in notes.items():
            # Under xdist several workers regenerate one golden: the one that wrote says what.
            if rewrites.get(path) or path not in self.golden_notes:
                self.golden_notes[path] = note
        if report.failed and report.nodeid not in self.records and self._ours(report):
            # A check that died without a record (a crash, or its xdist worker went down):
            # the report must still show it as an error, not silently drop it.
            reason = str(getattr(report.longrepr, "reprcrash", None) or report.longrepr or "")
            worker = getattr(getattr(report, "node", None), "gateway", None)
            self.records[report.nodeid] = record_from_nodeid(
                report.nodeid, reason.splitlines()[-1] if reason else "crashed",
                worker=getattr(worker, "id", None),
            )

    @staticmethod
    def _ours(report: pytest.TestReport) -> bool:
        return "numcheck" in report.keywords or report.nodeid.split("::")[0].endswith(".toml")

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        if self.is_worker or "perf" not in self.active_gates and self.device != "cuda":
            return []
        return self.sections.header_lines(worker_count(config), perf="perf" in self.active_gates)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.order = [item.nodeid for item in session.items]
        # A collection error already stops the run with its own message (exit 2).
        if not self.is_worker and not session.testsfailed and not any(
                isinstance(i, CheckItem) for i in session.items):
            raise pytest.UsageError(nothing_selected(self.config, self.cases_dir))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # Every worker collects the same items in the same order; any one gives the order.
        if not self.order:
            self.order = list(ids)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        result = yield
        if self.baseline is not None and not self.is_worker:
            label = str(self.config.getoption(options.BASELINE_OPTION))
            # A narrowed run (-k, node ids) leaves checks out on purpose: not removals.
            rules = replace(self.rules, allow_removed=1.0) if self.narrowed_by else self.rules
            self.drift = compare(self.baseline, self.report(), rules, baseline=label)
            if self.drift.regressions:
                session.testsfailed += 1  # the gate fails: exit status 1
        return result

    def report(self, exitstatus: int | None = None) -> Report:
        """Everything collected so far, in collection order, without the run's environment:
        the gate's verdict and the drift comparison read records only, and the environment
        asks git (and nvidia-smi on CUDA), so only a report that is written gets it
        (:meth:`with_environment`)."""
        return Report(
            records=order_records(self.records.values(), self.order),
            created=now(),
            exitstatus=exitstatus,
            goldens_regenerated=dict(sorted(self.goldens_written.items())),
            drift=self.drift,
        )

    def with_environment(self, report: Report) -> Report:
        """``report`` with where the run happened (docs/report.md's environment fields)."""
        env = environment(
            torch_version=torch.__version__,
            cuda_version=torch.version.cuda,
            device=self.device,
            device_names=[r.device_name for r in report.records if r.device_name],
            rootdir=self.config.rootpath,
            workers=worker_count(self.config),
        )
        env.update(self.sections.environment(worker_count(self.config), report.records))
        return replace(report, environment=env)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker or self.config.option.collectonly:
            return
        if CalibrationMode.KEY in self.config.stash:
            return  # measuring, not gating: calibration decides its own exit status
        report = self.report(int(exitstatus))
        if exitstatus == 0 and not report.passed:
            # The gate and the exit status must agree: a report that says "fail" (no check
            # ran, under xdist too) never comes with exit 0.
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self.gate_note = ("numcheck: the gate failed although no test failed: "
                              + ("no numcheck check ran" if not report.records
                                 else "a check did not pass") + "; exit status 1")
            report = self.report(int(session.exitstatus))
        if (self.save_to is None and self.report_path is None and self.markdown_path is None
                and self.html_path is None):
            return
        report = self.with_environment(report)
        if self.save_to is not None:
            self.saved = save_report(self.save_to[0], report, mark_ignored=self.save_to[1])
        if self.report_path is not None:
            write_json(self.report_path, report)
        if self.html_path is not None:
            from numcheck.report.htmlpage import write_html

            write_html(self.html_path, report)
        if self.markdown_path is not None:
            text = to_markdown(report)
            self.markdown_path.parent.mkdir(parents=True, exist_ok=True)
            self.markdown_path.write_text(text)
            append_step_summary(text)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        if not self.is_worker and (self.records or self.goldens_written):
            self._summary(tr)
        if not self.is_worker:  # xdist workers: the controller reports
            self._report_stale(tr)
        if self.gate_note:
            tr.write_line(self.gate_note)

    def _summary(self, tr: Any) -> None:
        tr.write_sep("=", f"numcheck summary ({self.device}, torch {torch.__version__})")
        shown, collapsed = collapse_skips(order_records(self.records.values(), self.order))
        header, rows = summary_table(shown)
        for line in table(header, rows) if rows else []:
            tr.write_line(line)
        for line in collapsed:
            tr.write_line(line)
        records = order_records(self.records.values(), self.order)
        for line in first_call_lines(records, self.first_call_note_s):
            tr.write_line(line)
        rows = perf_rows(records)
        if rows:
            tr.write_sep("-", "numcheck perf (median device time per call; speedup = "
                         "median of paired reference/variant ratios, stopped when decided)")
            for line in table(PERF_HEADER, rows):
                tr.write_line(line)
            for line in noise_lines(records):
                tr.write_line(line)
        for line in lock_wait_lines(records, worker_count(self.config)):
            tr.write_line(line)
        if self.overhead_rows:
            tr.write_sep("-", "numcheck casts and copies (cast ledger per check; "
                         "docs/usage.md explains the columns)")
            # The last cell is a variant's one-time preparation: a column only when a
            # checked variant has one. A sweep's points: its worst point's row.
            folded = fold_overhead_rows(self.overhead_rows, self.overhead_points)
            header, rows = OVERHEAD_HEADER, [r[:-1] for r in folded]
            if any(r[-1] != "-" for r in folded):
                header, rows = [*OVERHEAD_HEADER, PREPARED_COLUMN], folded
            for line in table(header, rows):
                tr.write_line(line)
        if self.explain:
            tr.write_sep("=", "numcheck explain: cast ledger and kernels (not gated)")
            for check_id, report in self.explained:
                tr.write_line(check_id)
                for line in report.lines():
                    tr.write_line(line)
        for path, written in sorted(self.goldens_written.items()):
            note = self.golden_notes.get(path) or ("rewritten" if written else "unchanged")
            tr.write_line(f"golden {note}: {path}")
        if self.drift is not None:
            tr.write_sep("-", drift_headline(self.drift))
            from numcheck.report.drift import DRIFT_HEADER

            for line in table(DRIFT_HEADER, drift_rows(self.drift)):
                tr.write_line(line)
        for what, out in (("report", self.report_path), ("markdown", self.markdown_path),
                          ("html", self.html_path)):
            if out is not None:
                tr.write_line(f"numcheck {what} written: {out}")
        if self.saved is not None:
            tr.write_line(f"numcheck run saved: {self._rel(self.saved)}")

    def _report_stale(self, tr: Any) -> None:
        """Goldens no case uses: listed at the end of a whole run, deleted on --numcheck-prune."""
        if self.narrowed_by:
            tr.write_line(f"numcheck: stale goldens not checked (the run is narrowed by "
                          f"{self.narrowed_by}); plain `pytest {options.OPTION}` checks them")
            return
        try:
            found = find_stale(self.cases_dir, self.goldens_dir)
        except CaseFileError as exc:
            tr.write_line(f"numcheck: stale goldens not checked: a case file does not load "
                          f"({exc.path})")
            return
        if not found:
            return
        if self.prune:
            for path in prune(found):
                tr.write_line(f"numcheck: deleted stale golden {self._rel(path)}")
            return
        tr.write_sep("-", f"numcheck: {len(found)} stale golden(s): no case uses them")
        for path in found:
            tr.write_line(f"  {self._rel(path)}")
        tr.write_line(f"Fix: delete them with pytest {options.OPTION} {options.PRUNE_OPTION}, "
                      "or restore the case that used them")


def narrowing(config: pytest.Config, cases_dir: Path) -> str:
    """What keeps this run from covering the whole cases folder ('' when nothing does)."""
    for dest, label in (("keyword", "-k"), ("markexpr", "-m"), ("deselect", "--deselect"),
                        ("lf", "--lf"), ("stepwise", "--sw"), ("ignore", "--ignore"),
                        ("ignore_glob", "--ignore-glob")):
        if config.getoption(dest, None):
            return label
    for arg in config.args:
        if "::" in arg:
            return "node ids"
        path = (config.invocation_params.dir / arg).resolve()
        if not cases_dir.is_relative_to(path):
            return "path arguments"
    return ""


def nothing_selected(config: pytest.Config, cases_dir: Path) -> str:
    """The usage error of a ``--numcheck`` run that selects no case: what was given, the fix."""
    narrowed = narrowing(config, cases_dir)
    if narrowed in ("-k", "-m", "--deselect", "--lf", "--sw"):
        why = f"{narrowed} deselected every case"
    elif config.args_source == pytest.Config.ArgsSource.ARGS:
        why = (f"the arguments {' '.join(shlex.quote(a) for a in config.args)} hold no case "
               f"file under the cases folder {cases_dir}")
    else:
        why = f"the cases folder {cases_dir} yields no check"
    return (f"numcheck: {options.OPTION} selected no case ({why}; command line: "
            f"{' '.join(shlex.quote(a) for a in config.invocation_params.args) or '(none)'}). "
            f"Fix: name case files or node ids under {cases_dir} (e.g. pytest {options.OPTION} "
            f"{cases_dir.name}), loosen the selection, or run the tests without {options.OPTION}")


class CaseFile(pytest.File):
    """A ``cases/*.toml`` file: one collector per case in it (a sweep's: one per point)."""

    def collect(self) -> Iterator[CaseNode | SweepNode]:
        state = self.config.stash[NumcheckSession.KEY]
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
        state = self.config.stash[NumcheckSession.KEY]
        op = get_op(self.case.op)
        for variant in (op.reference, *self.case.variants):
            yield CheckItem.from_parent(
                self, name=f"{variant}[{state.device}]", variant=variant, device=state.device
            )


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

    def commands(self) -> Commands:
        from numcheck.calibrate.family import honest_family
        from numcheck.report.budget_source import calibrate_command

        dev = f" {options.DEVICE_OPTION} {self.device}"
        # A budget too tight is calibrated on the class's honest family, never on the
        # failing variant alone (which would budget a bug in).
        family = honest_family(get_op(self.case.op), self.case, self.variant, self.device)
        case_node = self.parent.nodeid  # type: ignore[union-attr]
        # A sweep's budgets are its case's, set over every point: calibrate the whole sweep.
        sweep = self.parent.parent if self.case.sweep is not None else None  # type: ignore[union-attr]
        return Commands(
            reproduce=f"pytest {options.OPTION}{dev} {shlex.quote(self.nodeid)}",
            regenerate=f"pytest {options.OPTION} {options.REGEN_OPTION} "
            f"{shlex.quote(case_node)}",
            calibrate=calibrate_command(
                case_node if sweep is None else sweep.nodeid, self.device,
                pool=family.pool_option(),
                checks=[] if sweep is not None else
                [f"{case_node}::{v}[{self.device}]" for v in family.select]),
            family=family.precision,
        )

    def setup(self) -> None:
        gates = self.config.stash[NumcheckSession.KEY].active_gates
        if self.case.perf_only and (self.device not in self.case.devices or "perf" not in gates):
            reason = perf_only_reason(self.case.id, self.case.devices, self.device,
                                      options.PERF_OPTION)
        else:
            reason = cannot_run(get_op(self.case.op), self.case, self.variant, self.device,
                                gates=gates, perf_switch=options.PERF_OPTION)
        if reason is not None:
            self._set_record(status="skip", reason=reason)
            pytest.skip(reason)

    def runtest(self) -> None:
        state = self.config.stash[NumcheckSession.KEY]
        if CalibrationMode.KEY in self.config.stash:  # measure and suggest, never gate
            self.config.stash[CalibrationMode.KEY].run(self, state)
            return
        op = get_op(self.case.op)
        commands = self.commands()
        try:
            golden = None if self.case.perf_only else state.golden_for(op, self.case, commands)
            result = run_check(
                op, self.case, self.variant, self.device, state.inputs_for(op, self.case),
                golden, gates=state.active_gates, explain=state.explain,
                sections=state.sections, keep_outputs=True,
                progress=state.progress, first_call_note_s=state.first_call_note_s,
            )
            if golden is not None:
                annotate(result, op, golden, state.inputs_for(op, self.case))
        except (GoldenError, VariantError, TimingError) as exc:
            self._set_record(status="error", reason=str(exc), error_kind=type(exc).__name__)
            raise
        state.keep(self, result)
        self._set_record(result=result)
        settled = result.settled
        if settled is not None and settled.xfail:
            reason = f"expected failure ({', '.join(settled.caught)}): {settled.reason}"
            assert self.record is not None
            self.record = replace(self.record, status="xfail", reason=reason)
            pytest.xfail(reason)
        if settled is not None and not settled.outside:
            # A known-bad variant that an expected gate or output no longer catches.
            message = self._xpass_message(settled, commands)
            assert self.record is not None
            self.record = replace(self.record, status="fail", reason=message.splitlines()[0])
            raise NumcheckFailure(message)
        if not result.passed:  # (a known-bad variant failing outside its expectation too)
            message = failure_message(result, commands, self._source())
            kept = keep_failed(state.obtained_dir, result, state.inputs_for(op, self.case),
                               golden=self._rel_golden(state, op))
            if kept is not None:
                message += f"\n  obtained:    {state._rel(kept)}"
            overhead = result.overhead
            if isinstance(overhead, OverheadReport) and any(
                    v.output in OVERHEAD_GATES for v in result.violations):
                # The preparation's summary is already among the message's lines.
                message += "\n\n" + "\n".join(overhead.lines(prepared=False))
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
        state = self.config.stash[NumcheckSession.KEY]
        if result is not None:
            self.record = record_from_result(
                result, nodeid=self.nodeid, source=self._source(),
                device_name=state.device_name(), device_index=state.device_index,
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

    def _rel_golden(self, state: NumcheckSession, op: OpSpec) -> str:
        return state._rel(golden_path(state.goldens_dir, op.name, self.case.id))

    def _source(self) -> str:
        try:
            return str(self.path.relative_to(self.config.rootpath))
        except ValueError:
            return str(self.path)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        exc = excinfo.value
        if isinstance(exc, NumcheckFailure):
            return str(exc)
        if isinstance(exc, (GoldenError, VariantError, TimingError)):
            where = ("case:", f"{self._source()} [{self.case.id}]")
            return "\n".join([f"numcheck {type(exc).__name__} {self.display_id}", f"  {exc}", "",
                              *footer(where, self.commands(), regenerate_note=False)])
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.display_id
