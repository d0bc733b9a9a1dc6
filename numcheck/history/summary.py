"""The history in words: the terminal lines and the markdown of ``python -m numcheck
history`` (the HTML page is :mod:`numcheck.history.page`)."""

from __future__ import annotations

from numcheck.history.runs import Run
from numcheck.history.series import ClassGate, History, Move
from numcheck.report.markdown import md_table
from numcheck.report.render import table

MOVED_HEADER = ["check", "device", "first moved at", "change", "why", "moves"]
GATE_HEADER = ["device", "newest", "previous", "verdict", "regressions"]


def run_label(run: Run) -> str:
    """``abc1234567 (2026-12-01)``: the commit and the date the run is ordered by."""
    return f"{run.commit_label} ({run.date[:10] or '?'})"


def headline(history: History) -> str:
    """``history: 12 runs, 2 device classes (cpu, H200), 40 checks; 3 moved; newest vs
    previous: PASS (0 regression(s))``."""
    runs = history.runs
    span = f"{runs[0].date[:10]} .. {runs[-1].date[:10]}" if runs else "-"
    verdict = "PASS" if history.passed else "FAIL"
    return (f"history: {len(runs)} run(s) ({span}), {len(history.classes)} device class(es) "
            f"({', '.join(history.classes)}), {len(history.series)} checks; "
            f"{len(history.moved)} moved; newest vs previous: {verdict} "
            f"({len(history.regressions)} regression(s))")


def moved_rows(history: History) -> list[tuple[Move, list[str]]]:
    """One row per moved check and device class: its first move, and how many it made."""
    out = []
    for series in history.moved:
        counts: dict[str, int] = {}
        for m in series.moves:
            counts[m.device_class] = counts.get(m.device_class, 0) + 1
        for cls, m in series.first_moves().items():
            run = history.runs[m.run]
            out.append((m, [series.label, cls, run_label(run), m.status, "; ".join(m.reasons),
                            str(counts[cls])]))
    return out


def gate_row(history: History, gate: ClassGate) -> list[str]:
    """A device class's newest run against the run before it."""
    newest = run_label(history.runs[gate.newest])
    if gate.previous is None or gate.drift is None:
        return [gate.device_class, newest, "-", "only one run", ""]
    n = len(gate.drift.regressions)
    return [gate.device_class, newest, run_label(history.runs[gate.previous]),
            "FAIL" if n else "PASS", str(n)]


def text_lines(history: History) -> list[str]:
    """What ``history`` prints: headline, moved checks, the newest-vs-previous verdicts and
    one ``REGRESSION`` line per regression."""
    lines = [f"numcheck {headline(history)}"]
    rows = moved_rows(history)
    if rows:
        lines += ["", "checks that moved beyond the drift rules (first move per device):"]
        lines += table(MOVED_HEADER, [r for _, r in rows])
    lines += ["", "newest run of each device class against the one before it:"]
    lines += table(GATE_HEADER, [gate_row(history, g) for g in history.gates])
    lines += [f"REGRESSION {line}" for line in history.regressions]
    return lines


def to_markdown(history: History) -> str:
    """The same as :func:`text_lines`, as GitHub-flavoured markdown."""
    lines = [f"## numcheck {headline(history)}", ""]
    rows = moved_rows(history)
    if rows:
        lines += ["### Checks that moved beyond the drift rules", "",
                  *md_table(MOVED_HEADER, [r for _, r in rows]), ""]
    else:
        lines += ["No check moved beyond the drift rules.", ""]
    lines += ["### Newest run against the one before it", "",
              *md_table(GATE_HEADER, [gate_row(history, g) for g in history.gates]), ""]
    lines += [f"- REGRESSION {line}" for line in history.regressions]
    return "\n".join(lines).rstrip() + "\n"
