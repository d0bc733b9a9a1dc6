"""Skips that read as one line: perf-only checks on a machine that cannot time them.

A perf-only case (no golden; it only times the variants at a production shape) skips on
the CPU, or without ``--numcheck-perf``, for every variant: six such cases give ~30 identical
SKIP rows that bury the checks that ran. Each such skip's record carries why as a fact
(``Record.perf_only``: the devices it needs, or the option it runs with), so the summary
counts them instead (``31 perf-only checks need CUDA (6 cases; skipped)`` for the shipped
cases). The report keeps every record.
"""

from __future__ import annotations

from collections.abc import Sequence

from numcheck.report.records import Record

#: What a perf-only skip lacks here -> how the summary says it, of one check and of several.
_VERBS = {"needs": ("needs", "need"), "runs_with": ("runs only with", "run only with")}


def perf_only_skip(case_id: str, devices: Sequence[str], device: str,
                   perf_flag: str) -> tuple[str, dict[str, str]]:
    """The skip reason of a perf-only check that cannot run here, and the fact the summary
    counts it by (the record's ``perf_only``: ``{"needs": "CUDA"}`` or ``{"runs_with":
    "--numcheck-perf"}``; see :func:`collapse`)."""
    why = "it only times the variants at a production shape; no golden"
    if device not in devices:
        needs = "/".join(d.upper() for d in devices)
        return f"perf-only case {case_id!r} needs {needs} ({why})", {"needs": needs}
    return (f"perf-only case {case_id!r} runs only with {perf_flag} ({why})",
            {"runs_with": perf_flag})


def collapse(records: Sequence[Record]) -> tuple[list[Record], list[str]]:
    """The records to show as rows, and one line per kind of perf-only skip."""
    kept: list[Record] = []
    groups: dict[tuple[str, str], tuple[int, set[str]]] = {}
    for r in records:
        if r.status != "skip" or not r.perf_only:
            kept.append(r)
            continue
        kind = next(iter(r.perf_only.items()))
        n, cases = groups.get(kind, (0, set()))
        groups[kind] = (n + 1, cases | {r.case})
    return kept, [f"{n} perf-only check{'s' if n != 1 else ''} {_VERBS[kind][n != 1]} {what} "
                  f"({len(cases)} case{'s' if len(cases) != 1 else ''}; skipped)"
                  for (kind, what), (n, cases) in groups.items()]
