"""Shards of one run merged into one report: the records a single run gives.

A suite split over CI jobs or runners (a test splitter, a matrix of jobs; docs/report.md
says how) leaves one report per shard. :func:`merge_reports` makes the report of the whole
run, so its gate, summary, comparison with main and history are the single run's:

- **records**: every shard's, in the order of the files given and, within each, in its own
  order (shards of a splitter that keeps the collection order, given in group order, give
  the collection order). A check is known by its node id and by (op, case, variant,
  device). Two shards holding the same check with the same result (a shard uploaded twice)
  keep one record; with different results it is an error naming both files;
- **gate**: the merged ``exitstatus`` is what one pytest run would have ended with: an
  interrupted, crashed or misused shard (2, 3, 4) wins, then a failure (1); a shard that
  collected nothing (5) counts only when every shard did;
- **environment**: what all shards agree on, ``device_names`` united, ``workers`` added up,
  and under ``shards`` each file with what its own environment said differently (argv,
  platform...);
- ``created`` is the last shard's (the run ended when its last shard did); regenerated
  goldens are united.

Refused, each with one message naming both files: reports of different schema versions, of
different device classes or commits (those are runs to compare with ``python -m numcheck
matrix`` or ``compare``, not shards), and shards carrying a drift comparison (a shard's drift
sees only its own checks and lists the others as removed: compare the merged report).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from numcheck.history.devclass import report_class
from numcheck.report.records import (
    Record,
    Report,
    ReportError,
    check_version_of,
    read_document,
    record_to_dict,
    report_from_document,
)

#: Record fields that say where a check ran and how long its first call took, not what it
#: found (they differ between a serial run and an xdist run of the same checks, and from one
#: run to the next; docs/report.md).
WHERE_FIELDS = ("worker", "device_index", "first_call_s")
#: pytest exit statuses, most telling first when shards disagree: interrupted, internal
#: error, usage error, then tests failed.
_SEVERITY = (2, 3, 4, 1)
_NO_TESTS = 5


def _pair(a: Path, b: Path) -> str:
    return f"{a} and {b}"


def merge_reports(paths: Sequence[Path | str]) -> Report:
    """The report of the run whose shards wrote ``paths`` (see the module docstring).

    Raises:
        ReportError: an unreadable or non-numcheck file, or shards that are not of one run.
    """
    files = [Path(p) for p in paths]
    docs = [read_document(p, check_version=False) for p in files]
    for (pa, da), (pb, db) in pairwise(zip(files, docs, strict=True)):
        if da.get("schema_version") != db.get("schema_version"):
            raise ReportError(
                _pair(pa, pb), f"schema versions {da.get('schema_version')!r} and "
                f"{db.get('schema_version')!r} differ",
                "shards of one run are written by one numcheck version: rerun the shards "
                "from one checkout")
    check_version_of(files[0], docs[0])
    reports = [report_from_document(p, d) for p, d in zip(files, docs, strict=True)]
    _check_one_run(files, reports)
    records = _merge_records(files, reports)
    return Report(
        records=records,
        environment=_merge_environment(files, reports),
        created=max((r.created for r in reports), default=""),
        exitstatus=merged_exitstatus([r.exitstatus for r in reports]),
        goldens_regenerated=_merge_goldens(reports),
        drift=None,
    )


def _check_one_run(files: Sequence[Path], reports: Sequence[Report]) -> None:
    for path, report in zip(files, reports, strict=True):
        if report.drift is not None:
            raise ReportError(
                path, "a shard compared with a baseline (--numcheck-baseline): its drift "
                "sees only the shard's checks", "run the shards without --numcheck-baseline "
                "and compare the merged report: python -m numcheck compare BASE.json MERGED.json")
    first_path, first = files[0], reports[0]
    first_class = report_class(first)
    first_commit = first.environment.get("git_commit")
    for path, report in zip(files[1:], reports[1:], strict=True):
        cls = report_class(report)
        if cls != first_class:
            raise ReportError(
                _pair(first_path, path), f"ran on different device classes ({first_class} "
                f"and {cls}): not shards of one run", "merge the shards of each device class "
                "separately and compare the classes with python -m numcheck matrix")
        commit = report.environment.get("git_commit")
        if first_commit and commit and commit != first_commit:
            raise ReportError(
                _pair(first_path, path), f"ran at different commits ({first_commit} and "
                f"{commit}): not shards of one run", "run every shard on the same checkout")


def result_fields(record: Record) -> dict[str, Any]:
    """A record as JSON without where it ran: what two shards must agree on."""
    return {k: v for k, v in record_to_dict(record).items() if k not in WHERE_FIELDS}


#: Fields named first when two records of one check differ: the verdict before the rest.
_TELLING = ("status", "error_kind", "reason", "metrics", "topk", "timing")


def _first_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    for key in [*_TELLING, *a, *(k for k in b if k not in a)]:
        if a.get(key) != b.get(key):
            av, bv = str(a.get(key)), str(b.get(key))
            short = 60
            return (f"{key}: {av[:short]}{'...' if len(av) > short else ''} vs "
                    f"{bv[:short]}{'...' if len(bv) > short else ''}")
    return ""


def _identities(record: Record) -> list[tuple[str, ...]]:
    """What names a check: its node id, and (op, case, variant, device) when the op is known
    (a crash record knows only its node id); either one shared means the same check."""
    ids: list[tuple[str, ...]] = [("nodeid", record.nodeid or record.id)]
    if record.op:
        ids.append(record.key)
    return ids


def _merge_records(files: Sequence[Path], reports: Sequence[Report]) -> list[Record]:
    seen: dict[tuple[str, ...], tuple[Path, Record]] = {}
    out: list[Record] = []
    for path, report in zip(files, reports, strict=True):
        for record in report.records:
            ids = _identities(record)
            found = next((seen[i] for i in ids if i in seen), None)
            if found is None:
                seen.update({i: (path, record) for i in ids})
                out.append(record)
                continue
            other_path, other = found
            a, b = result_fields(other), result_fields(record)
            if a != b:
                raise ReportError(
                    _pair(other_path, path), f"both hold the check {record.id} with different "
                    f"results ({_first_difference(a, b)})",
                    "each check must run in one shard only: split the suite with one "
                    "splitter (docs/report.md, 'Sharding a suite') and merge that run's shards")
    return out


def merged_exitstatus(statuses: Sequence[int | None]) -> int | None:
    """The exit status one pytest run of every shard's checks would have ended with."""
    known = [s for s in statuses if s is not None]
    if not known:
        return None
    for status in _SEVERITY:
        if status in known:
            return status
    if all(s == _NO_TESTS for s in known):
        return _NO_TESTS
    others = [s for s in known if s not in (0, _NO_TESTS)]
    return max(others) if others else 0


def _merge_environment(files: Sequence[Path], reports: Sequence[Report]) -> dict[str, Any]:
    envs = [r.environment for r in reports]
    keys: list[str] = []
    for env in envs:
        keys += [k for k in env if k not in keys]
    out: dict[str, Any] = {}
    differing: list[str] = []
    for key in keys:
        values = [env.get(key) for env in envs]
        if all(v == values[0] for v in values):
            out[key] = values[0]
        elif key == "device_names":
            out[key] = sorted({n for v in values for n in (v or [])})
        elif key == "workers":
            out[key] = sum(int(v or 0) for v in values)
        elif key == "lock_wait_s":
            out[key] = sum(float(v or 0.0) for v in values)
        elif key == "perf_noise":
            out[key] = [entry for v in values for entry in (v or [])]
        else:
            out[key] = None
            differing.append(key)
    out["shards"] = [
        {"file": str(path), "created": report.created, "exitstatus": report.exitstatus,
         "records": len(report.records), **{k: report.environment.get(k) for k in differing}}
        for path, report in zip(files, reports, strict=True)
    ]
    return out


def _merge_goldens(reports: Sequence[Report]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for report in reports:
        for path, written in report.goldens_regenerated.items():
            out[path] = out.get(path, False) or bool(written)
    return dict(sorted(out.items()))
