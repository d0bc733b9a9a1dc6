"""``python -m numcheck merge | matrix | history``: what each command does with its parsed
arguments (the parser is numcheck/__main__.py's). Each returns the exit code; bad input
raises :class:`numcheck.report.records.ReportError`, which the command line prints as one
line and exits 2 on."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from numcheck.report.drift_result import Rules
from numcheck.report.htmlpage import write_page
from numcheck.report.markdown import headline as report_headline
from numcheck.report.markdown import to_markdown as report_markdown
from numcheck.report.records import write_json
from numcheck.report.render import table
from numcheck.report.step_summary import append_step_summary

EXIT_OK, EXIT_FAIL = 0, 1


def merge(args: argparse.Namespace) -> int:
    """Merge shard reports into one; exit 1 when the merged run's gate failed (as the single
    run would have)."""
    from numcheck.history.merge import merge_reports

    report = merge_reports(args.reports)
    write_json(args.out, report)
    if args.markdown is not None:
        text = report_markdown(report)
        args.markdown.write_text(text)
        append_step_summary(text)
    print(f"numcheck merge: {len(args.reports)} shard(s), {len(report.records)} records -> "
          f"{args.out} ({report_headline(report)})")
    return EXIT_OK if report.passed else EXIT_FAIL


def _skipped_note(skipped: list[Path]) -> None:
    if skipped:
        names = ", ".join(str(p) for p in skipped[:3]) + (" ..." if len(skipped) > 3 else "")
        print(f"note: skipped {len(skipped)} JSON file(s) that are not numcheck reports: "
              f"{names}", file=sys.stderr)


def matrix(args: argparse.Namespace) -> int:
    """Print the device matrix (and write it as markdown / HTML; the markdown also goes to
    ``$GITHUB_STEP_SUMMARY`` when set, as compare's does); exit 0 (it informs: each run's
    gate is its own)."""
    from numcheck.history import matrix as mx
    from numcheck.history.runs import load_runs

    loaded = load_runs(args.reports, repo=args.repo, jobs=args.jobs)
    _skipped_note(loaded.skipped)
    m = mx.build_matrix(loaded.runs)
    text = mx.to_markdown(m)
    if args.markdown is not None:
        args.markdown.write_text(text)
    append_step_summary(text)
    if args.html is not None:
        write_page(args.html, mx.to_html(m))
    print(f"numcheck {mx.headline(m)}")
    for line in mx.source_lines(m):
        print(f"  {line}")
    print(f"  ({mx.CELL_HELP})")
    header, rows = mx.table_rows(m)
    for line in table(header, rows):
        print(line)
    for path, what in ((args.markdown, "markdown"), (args.html, "html")):
        if path is not None:
            print(f"numcheck matrix {what} written: {path}")
    sys.stdout.flush()
    return EXIT_OK


def history(args: argparse.Namespace, rules: Rules) -> int:
    """Print the history summary (and write the page / markdown; the markdown also goes to
    ``$GITHUB_STEP_SUMMARY`` when set); exit 1 when the newest run of a device class
    regressed against the run before it."""
    from numcheck.history.page import write_history
    from numcheck.history.runs import load_runs
    from numcheck.history.series import build_history
    from numcheck.history.summary import text_lines, to_markdown

    loaded = load_runs(args.reports, repo=args.repo, jobs=args.jobs)
    _skipped_note(loaded.skipped)
    h = build_history(loaded.runs, rules)
    args.exit_code = EXIT_OK if h.passed else EXIT_FAIL
    text = to_markdown(h)
    if args.markdown is not None:
        args.markdown.write_text(text)
    append_step_summary(text)
    if args.html is not None:
        write_history(args.html, h, plots=False if args.no_plots else None, jobs=args.jobs)
    for line in text_lines(h):
        print(line)
    for path, what in ((args.markdown, "markdown"), (args.html, "html")):
        if path is not None:
            print(f"numcheck history {what} written: {path}")
    sys.stdout.flush()
    return int(args.exit_code)
