"""Skips that read as one line: perf-only checks on a machine that cannot time them.

A perf-only case (no golden; it only times the variants at a production shape) skips on
the CPU, or without ``--numcheck-perf``, for every variant: six such cases give ~30 identical
SKIP rows that bury the checks that ran. Their reasons follow one pattern, so the summary
can count them instead (``31 perf-only checks need CUDA (6 cases; skipped)`` for the shipped
cases). The report keeps every record.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from numcheck.report.records import Record

#: Also reads the older wording of saved reports ("... (no golden): runs with --numcheck-perf").
_PATTERN = re.compile(r"^perf-only case '(?P<case>[^']*)'(?: \(no golden\):)? "
                      r"(?P<what>needs \S+|runs (?:only )?with \S+)")


def perf_only_reason(case_id: str, devices: Sequence[str], device: str, perf_flag: str) -> str:
    """The skip reason of a perf-only check that cannot run here (see :func:`collapse`)."""
    why = "it only times the variants at a production shape; no golden"
    if device not in devices:
        return f"perf-only case {case_id!r} needs {'/'.join(d.upper() for d in devices)} ({why})"
    return f"perf-only case {case_id!r} runs only with {perf_flag} ({why})"


def collapse(records: Sequence[Record]) -> tuple[list[Record], list[str]]:
    """The records to show as rows, and one line per kind of perf-only skip."""
    kept: list[Record] = []
    groups: dict[str, tuple[int, set[str]]] = {}
    for r in records:
        m = _PATTERN.match(r.reason) if r.status == "skip" else None
        if m is None:
            kept.append(r)
            continue
        what = m["what"].replace("runs with", "runs only with")
        n, cases = groups.get(what, (0, set()))
        cases.add(m["case"])
        groups[what] = (n + 1, cases)
    lines = []
    for what, (n, cases) in groups.items():
        verb = what.replace("needs ", "need ", 1).replace("runs ", "run ", 1) if n != 1 else what
        lines.append(f"{n} perf-only check{'s' if n != 1 else ''} {verb} "
                     f"({len(cases)} case{'s' if len(cases) != 1 else ''}; skipped)")
    return kept, lines
