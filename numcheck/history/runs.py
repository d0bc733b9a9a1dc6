"""Many reports read at once, each as a :class:`Run`, ordered by its commit's date.

Tables and plots across runs need a few numbers per check (verdict, closest to budget,
calc_diff, recall, speedup and its interval), not the per-seed metrics, plot data and cast
ledgers a record also carries (most of a report's bytes on a GPU). :func:`lean_record`
keeps what the matrix, the series and the drift rules read; reading and trimming happens in
worker processes (:mod:`numcheck.history.pool`), so 500 reports of 100 checks read in a few
seconds.

**A run's date.** A report made by this numcheck carries its commit's committer date
(``environment.git_commit_date``). For an older report that names only its commit, the date
is looked up with ``git log`` in ``repo`` (the checkout the reports came from) when given;
a report with neither falls back to when it was made (``created``). :attr:`Run.date_source`
says which, and the history page shows it.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from numcheck.history.devclass import classes_of, environment_class, record_class
from numcheck.history.pool import collector_paused, parallel_map
from numcheck.history.store import find_reports
from numcheck.report.records import (
    Record,
    Report,
    ReportError,
    check_version_of,
    is_report_document,
    read_document,
)

#: Record fields a run keeps as they are.
_KEPT = ("id", "nodeid", "op", "case", "variant", "device", "status", "error_kind", "note",
         "precision", "device_name", "closest")
#: Of each output's metrics, of the top-k statistics, of the timing: what is kept.
_METRICS = ("calc_diff", "rel_fro")
_TOPK = ("recall_min", "recall_mean", "tie_recall_min", "tie_recall_mean")
_TIMING = ("speedup", "ci_low", "ci_high", "speedup_min", "gate", "stopped", "timer")
#: A reason is kept to its first line, at most this long (tables show no more).
_REASON_CHARS = 300


@dataclass
class Run:
    """One report, trimmed: where it came from, when, on what, and its lean records."""

    path: Path
    created: str
    #: ``environment.git_commit`` (``-dirty`` when tracked files had changed), or None.
    commit: str | None
    #: ISO 8601: the commit's date, else ``created``.
    date: str
    #: ``report`` (the report carries it), ``git log`` (looked up in the repo) or
    #: ``created`` (no commit date known: when the report was made).
    date_source: str
    #: The device classes of its records (:mod:`numcheck.history.devclass`).
    classes: list[str]
    records: list[Record]
    environment: dict[str, Any] = field(default_factory=dict)
    exitstatus: int | None = None
    gate: str = ""

    @property
    def device_class(self) -> str:
        """The run's class: its one class, or its classes joined by ``+``."""
        return "+".join(self.classes)

    @property
    def commit_label(self) -> str:
        """The commit's first 10 hex digits (``-dirty`` kept), or ``no commit``."""
        if not self.commit:
            return "no commit"
        sha = self.commit.removesuffix("-dirty")
        return sha[:10] + ("-dirty" if self.commit.endswith("-dirty") else "")

    def as_report(self) -> Report:
        """The run as a report of its lean records: everything
        :func:`numcheck.report.drift.compare_reports` reads of a report (the records' verdicts and
        headline numbers, the exit status), without reading the file again."""
        return Report(self.records, self.environment, created=self.created,
                      exitstatus=self.exitstatus)

    def record_classes(self) -> list[tuple[str, Record]]:
        """``(device class, record)`` for each record."""
        fallback = environment_class(self.environment)
        return [(record_class(r, fallback), r) for r in self.records]


_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _num(value: Any) -> Any:
    """A number as the report writes it: non-finite floats are the strings nan, inf, -inf."""
    return _NONFINITE.get(value, value) if isinstance(value, str) else value


def _numbers(section: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    return {k: _num(section[k]) for k in keys if k in section}


def lean_record(raw: Mapping[str, Any]) -> Record:
    """The part of a record's JSON that runs are compared and drawn by, as a Record.

    Keeps what :func:`numcheck.report.drift.compare_reports` reads (verdict, every output's
    calc_diff, the top-k recalls, the speedup and its interval, the device name), the
    closest-to-budget entry, and the budgets drawn as lines (the first output's calc_diff,
    the top-k recall_min). Built directly rather than through ``record_from_dict``: at 50,000
    records a run the general decoder's walk over every section costs seconds.
    """
    kept = {k: raw[k] for k in _KEPT if k in raw}
    metrics = {o: _numbers(v, _METRICS) for o, v in (raw.get("metrics") or {}).items()
               if isinstance(v, Mapping)}
    topk, timing, closest = raw.get("topk"), raw.get("timing"), raw.get("closest")
    budget = raw.get("budget") or {}
    lines: dict[str, Any] = {}
    first = next(iter(metrics), None)
    if first is not None and isinstance(budget.get(first), Mapping) and \
            "calc_diff" in budget[first]:
        lines[first] = {"calc_diff": _num(budget[first]["calc_diff"])}
    if isinstance(budget.get("topk"), Mapping) and "recall_min" in budget["topk"]:
        lines["topk"] = {"recall_min": _num(budget["topk"]["recall_min"])}
    if isinstance(closest, Mapping):
        kept["closest"] = {**closest, **_numbers(closest, ("value", "limit"))}
    return Record(
        **kept,
        reason=str(raw.get("reason") or "").split("\n", 1)[0][:_REASON_CHARS],
        metrics=metrics,
        topk=_numbers(topk, _TOPK) if isinstance(topk, Mapping) else None,
        timing=_numbers(timing, _TIMING) if isinstance(timing, Mapping) else None,
        budget=lines,
    )


#: A record section the runs never read, as numcheck's writer lays it out: indent 1, so a
#: record's keys start 3 spaces in and what is nested inside them deeper (json.dumps with
#: indent=1, numcheck.report.records.write_json).
_SKIPPED = re.compile(rb'\n   "(per_seed|casts|plots|localization|violations)": ([\[{])\n')


def _parse(data: bytes) -> Any:
    """The document, with the record sections runs never read (per-seed metrics, cast
    ledgers, plot data, localization, violations: 80% of a GPU report's bytes) replaced by
    null before parsing when the file has numcheck's own layout, which halves the time.

    The section's end is the next line holding only its closing bracket 3 spaces in: nothing
    nested sits that shallow, and JSON strings hold no raw newline. Any other layout (a
    report rewritten by another tool) is parsed whole, as is a file the cut would not leave
    valid. Bytes, not text: only what is kept gets decoded.
    """
    parts: list[bytes] = []
    pos = 0
    for m in _SKIPPED.finditer(data):
        if m.start() < pos:
            continue
        closer = b"]" if m.group(2) == b"[" else b"}"
        end = data.find(b"\n   " + closer, m.end() - 1)
        if end < 0:
            return json.loads(data)
        parts += [data[pos:m.start()], b'\n   "' + m.group(1) + b'": null']
        pos = end + 5
    if not parts:
        return json.loads(data)
    parts.append(data[pos:])
    try:
        return json.loads(b"".join(parts))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return json.loads(data)


def _read(item: tuple[str, bool]) -> dict[str, Any]:
    """One report file, trimmed (runs in a worker process, whose ReportError the pool
    raises here)."""
    with collector_paused():
        return _read_file(item)


#: What the fast read gives for a file it cannot parse (``None`` is a JSON document).
_UNREADABLE = object()


def _read_file(item: tuple[str, bool]) -> dict[str, Any]:
    name, named = item
    path = Path(name)
    try:
        data = _parse(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        data = _UNREADABLE
    if not is_report_document(data):
        if data is not _UNREADABLE and not named:  # found in a folder: another tool's JSON
            return {"skipped": name}
        # The report reader's own words for what is wrong (missing, not JSON, not ours).
        data = read_document(path, check_version=False)
    try:
        check_version_of(path, data)
        records = [lean_record(r) for r in data["records"]]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ReportError(path, f"malformed records ({exc})",
                          "pass a file written by --numcheck-report") from None
    env = dict(data.get("environment") or {})
    env.pop("perf_noise", None)  # per-process timing noise: large, and not drawn here
    return {"run": Run(
        path=path,
        created=str(data.get("created") or ""),
        commit=env.get("git_commit") or None,
        date=str(env.get("git_commit_date") or ""),
        date_source="report" if env.get("git_commit_date") else "",
        classes=classes_of(records, env),
        records=records,
        environment=env,
        exitstatus=data.get("exitstatus"),
        gate=str(data.get("gate") or ""),
    )}


@dataclass
class Loaded:
    """What :func:`load_runs` read: the runs, oldest first, and the files it skipped."""

    runs: list[Run]
    skipped: list[Path]


def load_runs(sources: Iterable[Path | str], *, repo: Path | None = None,
              jobs: int | None = None) -> Loaded:
    """Read every report in ``sources`` (files, or folders searched for ``*.json``) and
    order them by date (see the module docstring), then by creation time.

    Raises:
        ReportError: a missing path, a named file that is not a numcheck report, a report
            of another schema version or with malformed records, or no report at all.
    """
    files = find_reports(sources)
    with collector_paused():
        results = parallel_map(_read, [(str(p), named) for p, named in files], jobs=jobs)
    runs: list[Run] = []
    skipped: list[Path] = []
    for result in results:
        if "skipped" in result:
            skipped.append(Path(result["skipped"]))
        else:
            runs.append(result["run"])
    if not runs:
        where = ", ".join(str(s) for s in sources)
        raise ReportError(where, "no numcheck report found",
                          "pass report files or the folder --numcheck-save wrote")
    fill_dates(runs, repo)
    runs.sort(key=lambda r: (_when(r.date), _when(r.created), str(r.path)))
    return Loaded(runs, skipped)


def _when(iso: str) -> datetime:
    """An ISO 8601 time as an aware UTC datetime; the earliest time when unreadable."""
    try:
        when = datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        return datetime.min.replace(tzinfo=UTC)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def fill_dates(runs: Sequence[Run], repo: Path | None) -> None:
    """Give every run a date: its report's commit date, else the commit's date in ``repo``
    (one ``git log`` for all of them), else its creation time."""
    missing = {r.commit.removesuffix("-dirty") for r in runs if not r.date and r.commit}
    found = commit_dates(missing, repo) if missing and repo is not None else {}
    for run in runs:
        if run.date:
            continue
        sha = (run.commit or "").removesuffix("-dirty")
        if sha in found:
            run.date, run.date_source = found[sha], "git log"
        else:
            run.date, run.date_source = run.created, "created"


def commit_dates(commits: Iterable[str], repo: Path) -> dict[str, str]:
    """``{sha: committer date}`` of the commits ``repo``'s git knows (others are left out;
    no git, or not a repository: empty)."""
    shas = sorted(c for c in commits if c and all(ch in "0123456789abcdef" for ch in c))
    if not shas:
        return {}
    try:
        out = subprocess.run(
            ["git", "log", "--no-walk", "--ignore-missing", "--format=%H %cI", *shas],
            cwd=repo, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if out.returncode != 0:
        return {}
    dates = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    # Reports may hold abbreviated ids; git prints full ones.
    return {sha: dates[full] for sha in shas for full in dates if full.startswith(sha)}
