"""Each check across commits: its series per device class, where it moved, and the newest
run of each device class against the run before it.

**Commit axis.** Runs are ordered by their commit's date (:mod:`numcheck.history.runs`);
each distinct commit gets one position on the axis (runs without a commit get one each), so
the lines of several device classes share it. A check's series in a device class is its
record in each run of that class, in order.

**Moves.** Each record is compared with the same check's record in the run of that class
before it, by the rules of ``python -m numcheck compare`` (:mod:`numcheck.report.drift`,
the same :class:`~numcheck.report.drift_result.Rules`): calc_diff growth beyond the factor (the
tight one when both ran on one device name), a recall drop, a speedup fall the intervals
make certain, or a verdict that stopped passing. Each pair where a rule fires (or its
reverse: an improvement) is a :class:`Move`; the first one of a check is what the page
marks with its commit id. A check that keeps failing with the same verdict moves only when
its metrics do: "still failing" is not news at every commit.

**The gate.** For every device class with two runs or more, the newest run is compared with
the one before it, whole reports, exactly as ``python -m numcheck compare PREVIOUS NEWEST``
would (on the runs' lean records, which keep everything compare_reports reads): any regression
makes ``history`` exit 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import NamedTuple

from numcheck.history.devclass import sort_classes
from numcheck.history.pool import collector_paused
from numcheck.history.runs import Run
from numcheck.report.drift import compare_records, compare_reports
from numcheck.report.drift_result import Drift, Rules
from numcheck.report.records import Record

#: A check across runs: (op, case, variant). The device is the line, not the check.
CheckKey = tuple[str, str, str]


def check_key(record: Record) -> CheckKey:
    """(op, case, variant) of a record."""
    return (record.op, record.case, record.variant)


def check_label(key: CheckKey) -> str:
    """``op::case::variant`` (``case::variant`` for a crash record, which has no op)."""
    return "::".join(part for part in key if part) if key[0] else f"{key[1]}::{key[2]}"


class Point(NamedTuple):
    """One run's record of a check: ``x`` on the commit axis, ``run`` its index."""

    x: int
    run: int
    record: Record


@dataclass(frozen=True)
class Move:
    """A check that moved beyond the drift rules between two runs of one device class."""

    key: CheckKey
    device_class: str
    x: int
    run: int
    previous_run: int
    #: ``regression`` or ``improved`` (as in ``compare``'s drift table).
    status: str
    reasons: tuple[str, ...]


@dataclass
class Series:
    """One check: its points per device class and its moves, in commit order."""

    key: CheckKey
    lines: dict[str, list[Point]] = field(default_factory=dict)
    moves: list[Move] = field(default_factory=list)

    @property
    def label(self) -> str:
        return check_label(self.key)

    def first_moves(self) -> dict[str, Move]:
        """The first move in each device class that has one."""
        out: dict[str, Move] = {}
        for m in self.moves:
            out.setdefault(m.device_class, m)
        return out


@dataclass(frozen=True)
class ClassGate:
    """A device class's newest run against the run before it (None: only one run)."""

    device_class: str
    newest: int
    previous: int | None
    drift: Drift | None


@dataclass
class History:
    """Everything the history table, markdown and page show."""

    runs: list[Run]
    #: Per run, its position on the commit axis.
    xs: list[int]
    #: Per position on the commit axis, the run that labels it (its first run).
    ticks: list[int]
    classes: list[str]
    series: list[Series]
    gates: list[ClassGate]
    rules: Rules

    @property
    def moved(self) -> list[Series]:
        """The checks with at least one move, in the order of their first move."""
        moved = [s for s in self.series if s.moves]
        return sorted(moved, key=lambda s: (min(m.x for m in s.moves), s.label))

    @property
    def regressions(self) -> list[str]:
        """The newest-vs-previous regressions, ``"[class] id: why"``."""
        return [f"[{g.device_class}] {line}" for g in self.gates if g.drift is not None
                for line in g.drift.regressions]

    @property
    def passed(self) -> bool:
        return not self.regressions


def commit_axis(runs: Sequence[Run]) -> tuple[list[int], list[int]]:
    """Per run its position on the axis, and per position the run that labels it."""
    where: dict[str, int] = {}
    xs: list[int] = []
    ticks: list[int] = []
    for i, run in enumerate(runs):
        commit = run.commit or f"run:{run.path}"
        if commit not in where:
            where[commit] = len(ticks)
            ticks.append(i)
        xs.append(where[commit])
    return xs, ticks


def build_series(runs: Sequence[Run], xs: Sequence[int], rules: Rules) -> list[Series]:
    """Every check's series and moves (see the module docstring). Checks keep the order in
    which they first appear (oldest run first)."""
    found: dict[CheckKey, Series] = {}
    for i, run in enumerate(runs):
        for cls, record in run.record_classes():
            key = check_key(record)
            series = found.setdefault(key, Series(key))
            line = series.lines.setdefault(cls, [])
            if line and line[-1].run == i:
                line[-1] = Point(xs[i], i, record)  # one record per check and run
            else:
                line.append(Point(xs[i], i, record))
    for series in found.values():
        for cls, points in series.lines.items():
            for prev, cur in pairwise(points):
                move = _move(series.key, cls, prev, cur, rules)
                if move is not None:
                    series.moves.append(move)
        series.moves.sort(key=lambda m: (m.run, m.device_class))
    return list(found.values())


def _move(key: CheckKey, cls: str, prev: Point, cur: Point, rules: Rules) -> Move | None:
    base, new = prev.record, cur.record
    if not new.passed and new.verdict == base.verdict:
        # Still failing the same way: only its metrics can move.
        base, new = replace(base, status="pass"), replace(new, status="pass")
    row = compare_records(base, new, rules)
    if row.status not in ("regression", "improved"):
        return None
    return Move(key, cls, cur.x, cur.run, prev.run, row.status, tuple(row.reasons))


def build_gates(runs: Sequence[Run], rules: Rules) -> list[ClassGate]:
    """Per device class of whole runs: the newest run against the one before it."""
    by_class: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        by_class.setdefault(run.device_class, []).append(i)
    gates = []
    for cls in sort_classes(by_class):
        idx = by_class[cls]
        if len(idx) < 2:
            gates.append(ClassGate(cls, idx[-1], None, None))
            continue
        prev, new = runs[idx[-2]], runs[idx[-1]]
        drift = compare_reports(prev.as_report(), new.as_report(), rules, baseline=str(prev.path))
        gates.append(ClassGate(cls, idx[-1], idx[-2], drift))
    return gates


def build_history(runs: Sequence[Run], rules: Rules | None = None) -> History:
    """The history of ``runs`` (oldest first, as :func:`numcheck.history.runs.load_runs`
    orders them)."""
    rules = rules or Rules()
    runs = list(runs)
    xs, ticks = commit_axis(runs)
    with collector_paused():
        series = build_series(runs, xs, rules)
    classes = sort_classes({c for s in series for c in s.lines} or
                           {c for r in runs for c in r.classes})
    return History(runs, xs, ticks, classes, series, build_gates(runs, rules), rules)
