"""Kept runs: ``--numcheck-save`` writes a run's report into a history folder, and the
commands that read many reports find them there.

Layout (like pytest-benchmark's ``--benchmark-autosave`` storage, one folder per machine
kind)::

    .numcheck/history/<device class>/<commit>-<time>.json

``<device class>`` is :func:`numcheck.history.devclass.report_class` (``cpu``, ``H200``);
``<commit>`` the first 12 hex digits of the run's git commit (``-dirty`` when tracked files
had changed; ``nocommit`` outside git); ``<time>`` when the report was made, UTC,
``20261202T101500Z``. A second run in the same second gets ``-2``, ``-3``... The default
folder sits under the rootdir and holds a ``.gitignore`` of ``*`` (written when numcheck
creates it), so kept runs never end up in a commit; a folder given with
``--numcheck-save-dir`` is the user's, left as it is (a CI artifact folder, say).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from numcheck.history.devclass import report_class
from numcheck.report.records import Report, ReportError, write_json

#: The history folder under the rootdir when ``--numcheck-save-dir`` is not given.
DEFAULT_FOLDER = Path(".numcheck") / "history"
_IGNORE = "# numcheck's kept runs (--numcheck-save): never committed\n*\n"


def save_folder(rootdir: Path, *, save: bool, save_dir: Path | None) -> tuple[Path, bool] | None:
    """Where this run's report is kept, and whether numcheck may mark the folder ignored:
    ``save_dir`` when given (``--numcheck-save-dir`` implies saving), else the default
    folder under ``rootdir`` with ``save``, else None (nothing kept)."""
    if save_dir is not None:
        return save_dir, False
    if save:
        return rootdir / DEFAULT_FOLDER, True
    return None


def saved_name(report: Report) -> str:
    """``<commit>-<time>.json`` (see the module docstring)."""
    commit = str(report.environment.get("git_commit") or "")
    sha, dirty = commit.removesuffix("-dirty"), commit.endswith("-dirty")
    label = (re.sub(r"[^0-9A-Za-z]", "", sha)[:12] or "nocommit") + ("-dirty" if dirty else "")
    return f"{label}-{_stamp(report.created)}.json"


def _stamp(created: str) -> str:
    try:
        when = datetime.fromisoformat(created)
    except ValueError:
        when = datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def save_report(folder: Path, report: Report, *, mark_ignored: bool = False) -> Path:
    """Write ``report`` under ``folder/<device class>/`` and return its path.

    With ``mark_ignored``, a folder numcheck creates gets a ``.gitignore`` of ``*``. The
    file name is claimed first (created exclusively), so two runs finishing in the same
    second never overwrite each other; the report is then written atomically over it.
    """
    if mark_ignored and not folder.exists():
        folder.mkdir(parents=True)
        (folder / ".gitignore").write_text(_IGNORE)
    target = folder / report_class(report)
    target.mkdir(parents=True, exist_ok=True)
    stem = saved_name(report).removesuffix(".json")
    for n in range(1, 1000):
        path = target / (f"{stem}.json" if n == 1 else f"{stem}-{n}.json")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        write_json(path, report)
        return path
    raise OSError(f"{target}: 999 runs named {stem}-*.json already; clear the folder")


def find_reports(sources: Iterable[Path | str]) -> list[tuple[Path, bool]]:
    """Every report file a command was given: ``(path, named)``.

    A file is taken as it is (``named``: it must be a numcheck report); a folder gives its
    ``*.json`` files, recursively, in name order (``named`` false: other JSON files there,
    a pytest-benchmark file say, are skipped with a note by the reader). A file given twice
    (by name and in its folder) is read once, as named.

    Raises:
        ReportError: a path that does not exist, or a folder with no JSON file in it.
    """
    found: dict[Path, tuple[Path, bool]] = {}  # by resolved path: each file read once

    def add(path: Path, named: bool) -> None:
        key = path.resolve()
        first, was_named = found.get(key, (path, False))
        found[key] = (first, was_named or named)

    for source in sources:
        path = Path(source)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*.json") if p.is_file())
            if not files:
                raise ReportError(path, "a folder with no *.json report in it",
                                  "pass the folder --numcheck-save wrote "
                                  "(.numcheck/history) or report files")
            for p in files:
                add(p, False)
        elif path.exists():
            add(path, True)
        else:
            raise ReportError(path, "no such report file or folder",
                              "pass report files (--numcheck-report, --numcheck-save) or a "
                              "folder of them")
    return list(found.values())
