"""The human summary of a run as GitHub-flavoured markdown (``--numcheck-markdown``).

Layout: a pass/fail headline; the failing checks with their reasons; then one table per op,
failing rows first, with the same cells as the terminal summary (both come from
:func:`numcheck.report.render.summary_table`); then the drift against a baseline when there is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from numcheck.invariance.table import INVARIANCE_HEADER, invariance_rows
from numcheck.report.drift import DRIFT_HEADER, drift_rows
from numcheck.report.drift_result import Drift
from numcheck.report.records import Record, Report
from numcheck.report.render import summary_table
from numcheck.report.skips import collapse as collapse_skips

#: Failing checks listed with their reasons before the tables.
MAX_FAILURES = 30


def headline(report: Report) -> str:
    """``numcheck: PASS (12 passed, 2 skipped)`` or ``numcheck: FAIL (...)``."""
    c = report.counts()
    parts = [f"{c[s]} {w}" for s, w in
             (("fail", "failed"), ("error", "error" if c["error"] == 1 else "errors"),
              ("pass", "passed"), ("xfail", "xfailed"), ("skip", "skipped"))
             if c[s]]
    if report.drift is not None and report.drift.regressions:
        parts.insert(0, f"{len(report.drift.regressions)} drift regression(s) vs baseline")
    if not report.records:
        parts.append("no checks ran")
    explained = report.exitstatus == 1 and (c["fail"] or c["error"])
    if report.exitstatus not in (None, 0) and not explained:
        parts.append(f"pytest exit status {report.exitstatus}")
    return f"numcheck: {'PASS' if report.passed else 'FAIL'} ({', '.join(parts)})"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip()


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table; cells escaped for ``|`` and newlines."""
    lines = ["| " + " | ".join(_escape(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_escape(str(c)) for c in row) + " |" for row in rows]
    return lines


def to_markdown(report: Report) -> str:
    """The whole summary of a report."""
    lines = [f"## {headline(report)}", ""]
    env = report.environment
    where = ", ".join(
        str(x) for x in (
            env.get("device"),
            env.get("device") != "cpu" and ", ".join(env.get("device_names") or []),
            env.get("torch") and f"torch {env['torch']}",
            env.get("cuda") and f"CUDA {env['cuda']}",
            env.get("git_commit") and f"commit {str(env['git_commit'])[:12]}",
        ) if x
    )
    if where:
        lines += [f"Run on {where}.", ""]
    failing = [r for r in report.records if not r.passed]
    if failing:
        lines += ["### Failing checks", ""]
        for r in failing[:MAX_FAILURES]:
            lines.append(f"- **{r.verdict}** `{r.id}`: {_escape(r.reason) or 'no reason given'}")
        if len(failing) > MAX_FAILURES:
            lines.append(f"- ... and {len(failing) - MAX_FAILURES} more")
        lines.append("")
    shown, collapsed = collapse_skips(report.records)
    for op, records in _by_op(shown):
        header, rows = summary_table(records)
        lines += [f"### {op or 'unknown op'}", "", *md_table(header, rows), ""]
    lines += [*(f"- {line}" for line in collapsed), ""] if collapsed else []
    invariance = invariance_rows(report.records)
    if invariance:
        lines += ["### Determinism and batch invariance", "",
                  *md_table(INVARIANCE_HEADER, invariance), ""]
    if report.drift is not None:
        lines += drift_markdown(report.drift)
    return "\n".join(lines).rstrip() + "\n"


def drift_markdown(drift: Drift) -> list[str]:
    """The drift section: regressions first, then the other changes."""
    regressions = drift.regressions
    title = f"### Drift vs baseline {drift.baseline}".rstrip()
    lines = [title, ""]
    rows = drift_rows(drift)
    if not rows:
        return [*lines, "No matching checks in the baseline.", ""]
    verdict = f"{len(regressions)} regression(s)" if regressions else "no regression"
    rules = ", ".join(f"{k} {v}" for k, v in asdict(drift.rules).items())
    lines += [f"{verdict}; rules: {rules}.", ""]
    return [*lines, *md_table(DRIFT_HEADER, rows), ""]


def _by_op(records: Sequence[Record]) -> list[tuple[str, list[Record]]]:
    groups: dict[str, list[Record]] = {}
    for r in records:
        groups.setdefault(r.op, []).append(r)
    return list(groups.items())
