"""A check's record travels on its test report, from the process that ran it to the one that
reports: the controller under pytest-xdist, the same process in a serial run.

pytest-xdist serialises ``report.user_properties`` with every report, so a worker appends
the check's record (as a plain dict) to the one report of the phase that made it, with what
its golden regenerations did under ``--numcheck-regen``; the controller (or a serial run)
reads them back into its :class:`RecordBook` in :meth:`RecordBook.collect`. A check that
died without a record (a crash, or its worker went down) still gets one, as an error.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from numcheck.report.records import (
    Record,
    record_from_dict,
    record_from_nodeid,
    record_to_dict,
)

#: ``report.user_properties`` names on which a worker ships its record and its golden
#: rewrites to the controller (pytest-xdist serialises user_properties with every report).
RECORD_PROPERTY = "numcheck_record"
GOLDENS_PROPERTY = "numcheck_goldens"
GOLDEN_NOTES_PROPERTY = "numcheck_golden_notes"


def ship(report: pytest.TestReport, record: Record, *,
         regen: tuple[Mapping[str, bool], Mapping[str, str]] | None = None) -> None:
    """Put ``record`` on ``report`` (and with ``regen``, the golden files rewritten and what
    each regeneration did, by path relative to the rootdir)."""
    # Only on this phase's report (a copy of item.user_properties), so junitxml, which
    # writes the teardown report's properties, never sees the whole record.
    report.user_properties.append((RECORD_PROPERTY, record_to_dict(record)))
    if regen is not None:
        rewrites, notes = regen
        report.user_properties.append((GOLDENS_PROPERTY, dict(rewrites)))
        report.user_properties.append((GOLDEN_NOTES_PROPERTY, dict(notes)))


class RecordBook:
    """The records the run collected, by node id, and the goldens its workers rewrote."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        #: Collection order of the node ids (the report and the summary keep it).
        self.order: list[str] = []
        #: Golden path (relative to the rootdir) -> whether any worker rewrote it.
        self.goldens_written: dict[str, bool] = {}
        #: Golden path -> what its regeneration did, in the summary's words.
        self.golden_notes: dict[str, str] = {}

    def collect(self, report: pytest.TestReport) -> None:
        """Read what a test report ships: its record, and its golden rewrites."""
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
        if report.failed and report.nodeid not in self.records and ours(report):
            # A check that died without a record (a crash, or its xdist worker went down):
            # the report must still show it as an error, not silently drop it.
            reason = str(getattr(report.longrepr, "reprcrash", None) or report.longrepr or "")
            worker = getattr(getattr(report, "node", None), "gateway", None)
            self.records[report.nodeid] = record_from_nodeid(
                report.nodeid, reason.splitlines()[-1] if reason else "crashed",
                worker=getattr(worker, "id", None),
            )


def ours(report: pytest.TestReport) -> bool:
    """Whether a test report is of a numcheck check (by marker, or by its case file)."""
    return "numcheck" in report.keywords or report.nodeid.split("::")[0].endswith(".toml")
