"""What a ``--numcheck`` run prints on the terminal: progress lines while a check runs, and
the end-of-run summary (the checks' table, first calls, perf, casts and copies, explain,
goldens written, drift, files written) and the stale goldens.

The tables themselves are made by the rooms that know them (:mod:`numcheck.report.render`,
:mod:`numcheck.perf.table`, :mod:`numcheck.overhead.limits`, :mod:`numcheck.report.drift`);
this module lays them out on pytest's terminal in the run's order.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from numcheck.cases import CaseFileError
from numcheck.check.firstcall import first_call_lines
from numcheck.check.result import CheckResult
from numcheck.goldens.stale import find_stale, prune
from numcheck.invariance.table import INVARIANCE_HEADER, invariance_rows
from numcheck.invariance.table import unset_lines as unset_lines_of_invariance
from numcheck.overhead.limits import OVERHEAD_HEADER, OverheadReport, overhead_row
from numcheck.perf.sections import lock_wait_lines
from numcheck.perf.table import PERF_HEADER, noise_lines, perf_rows, unset_lines
from numcheck.plugin import options
from numcheck.prepare import PREPARED_COLUMN
from numcheck.report.drift import DRIFT_HEADER, drift_headline, drift_rows
from numcheck.report.drift_result import Drift
from numcheck.report.records import Record
from numcheck.report.render import summary_table, table
from numcheck.report.skips import collapse as collapse_skips
from numcheck.report.sweep_rows import fold_overhead_rows


class Progress:
    """Prints a line while a check runs (a long first call): through the terminal with
    output capturing suspended, so it shows at once; an xdist worker, which has no terminal
    of its own, writes it to its stderr, which is the controller's."""

    def __init__(self, config: pytest.Config, *, is_worker: bool) -> None:
        self.config = config
        self.is_worker = is_worker

    def __call__(self, line: str) -> None:
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


class OverheadTable:
    """The casts-and-copies rows of the checks this process ran (and, in explain mode,
    their whole reports), in the order they ran."""

    def __init__(self, *, explain: bool) -> None:
        self.explain = explain
        self.rows: list[list[str]] = []
        #: Per row: the sweep case and point of its check (folded in the summary).
        self.points: list[tuple[str, str] | None] = []
        self.explained: list[tuple[str, OverheadReport]] = []

    def add(self, result: CheckResult) -> None:
        overhead = result.overhead
        if overhead is None:
            return
        prepared = overhead.prepared
        case = result.case
        self.rows.append([
            *overhead_row(f"{case.op}::{case.id}", result.variant, result.device, overhead),
            "-" if prepared is None else prepared.cell(),
        ])
        sweep = case.sweep
        self.points.append(None if sweep is None else (sweep.case, sweep.label))
        if self.explain:
            self.explained.append((result.id, overhead))

    def lines(self) -> list[str]:
        """The table; its last column, a variant's one-time preparation, only when a
        checked variant has one. A sweep's points: its worst point's row."""
        folded = fold_overhead_rows(self.rows, self.points)
        header, rows = OVERHEAD_HEADER, [r[:-1] for r in folded]
        if any(r[-1] != "-" for r in folded):
            header, rows = [*OVERHEAD_HEADER, PREPARED_COLUMN], folded
        return table(header, rows)


def write_summary(
    tr: Any,
    *,
    device: str,
    records: Sequence[Record],
    first_call_note_s: float,
    workers: int,
    overhead: OverheadTable,
    goldens_written: Mapping[str, bool],
    golden_notes: Mapping[str, str],
    drift: Drift | None,
    written: Sequence[tuple[str, Path]],
    saved: str | None,
) -> None:
    """The end-of-run summary; ``records`` in collection order, ``written`` the report
    files (what, where), ``saved`` where the run was kept."""
    def write(lines: Iterable[str]) -> None:
        for line in lines:
            tr.write_line(line)

    tr.write_sep("=", f"numcheck summary ({device}, torch {torch.__version__})")
    shown, collapsed = collapse_skips(records)
    header, rows = summary_table(shown)
    write([*(table(header, rows) if rows else []), *collapsed,
           *first_call_lines(records, first_call_note_s)])
    rows = perf_rows(records)
    if rows:
        tr.write_sep("-", "numcheck perf (median device time per call; speedup = "
                     "median of paired reference/variant ratios, stopped when decided)")
        write([*table(PERF_HEADER, rows), *noise_lines(records), *unset_lines(records)])
    write(lock_wait_lines(records, workers))
    rows = invariance_rows(records)
    if rows:
        tr.write_sep("-", "numcheck determinism and batch invariance (bitwise; the case's "
                     "deterministic and batch_invariant keys)")
        write([*table(INVARIANCE_HEADER, rows), *unset_lines_of_invariance(records)])
    if overhead.rows:
        tr.write_sep("-", "numcheck casts and copies (cast ledger per check; "
                     "docs/usage.md explains the columns)")
        write(overhead.lines())
    if overhead.explain:
        tr.write_sep("=", "numcheck explain: cast ledger and kernels (not gated)")
        for check_id, report in overhead.explained:
            write([check_id, *report.lines()])
    write(f"golden {golden_notes.get(path) or ('rewritten' if rewritten else 'unchanged')}: "
          f"{path}" for path, rewritten in sorted(goldens_written.items()))
    if drift is not None:
        tr.write_sep("-", drift_headline(drift))
        write(table(DRIFT_HEADER, drift_rows(drift)))
    write(f"numcheck {what} written: {out}" for what, out in written)
    if saved is not None:
        tr.write_line(f"numcheck run saved: {saved}")


def write_stale(tr: Any, *, cases_dir: Path, goldens_dir: Path, narrowed_by: str,
                delete: bool, rel: Callable[[Path], str]) -> None:
    """Goldens no case uses: listed at the end of a whole run, deleted on --numcheck-prune."""
    if narrowed_by:
        tr.write_line(f"numcheck: stale goldens not checked (the run is narrowed by "
                      f"{narrowed_by}); plain `pytest {options.OPTION}` checks them")
        return
    try:
        found = find_stale(cases_dir, goldens_dir)
    except CaseFileError as exc:
        tr.write_line(f"numcheck: stale goldens not checked: a case file does not load "
                      f"({exc.path})")
        return
    if not found:
        return
    if delete:
        for path in prune(found):
            tr.write_line(f"numcheck: deleted stale golden {rel(path)}")
        return
    tr.write_sep("-", f"numcheck: {len(found)} stale golden(s): no case uses them")
    for path in found:
        tr.write_line(f"  {rel(path)}")
    tr.write_line(f"Fix: delete them with pytest {options.OPTION} {options.PRUNE_OPTION}, "
                  "or restore the case that used them")
