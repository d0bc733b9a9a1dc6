"""``python -m numcheck``: work with report files outside pytest.

    python -m numcheck compare BASE.json NEW.json   # baseline drift; exit 1 on a regression
    python -m numcheck summary REPORT.json          # the summary table (and markdown) again
    python -m numcheck html REPORT.json OUT.html    # the self-contained HTML report
    python -m numcheck merge A.json B.json -o RUN.json   # shards of one run -> its report
    python -m numcheck matrix REPORTS...            # one column per device class
    python -m numcheck history REPORTS_OR_DIR... --html OUT.html   # across commits
    python -m numcheck onboard [--out DIR] ...      # a new GPU model's values, written
                                                    # (numcheck/calibrate/onboard.py; docs/speed.md)

Exit codes (documented in docs/ci.md, "Drift against a baseline"):
    0  no regression (compare, history) / the report's gate passed (summary, html, merge) /
       matrix always
    1  at least one regression (compare; history: the newest run of a device class against
       the one before it) / the report's gate failed (summary, html, merge)
    2  usage error or unreadable input (a missing file, not a numcheck report, another
       schema version); the message names the file and the fix
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from numcheck.report.drift import DRIFT_HEADER, compare_reports, drift_headline, drift_rows
from numcheck.report.drift_result import Rules
from numcheck.report.markdown import drift_markdown, headline, to_markdown
from numcheck.report.records import ReportError, load_report
from numcheck.report.render import summary_table, table
from numcheck.report.step_summary import append_step_summary

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m numcheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="compare a report with a baseline report; "
                       "exit 1 on a regression")
    c.add_argument("base", type=Path, help="baseline report (e.g. main's --numcheck-report)")
    c.add_argument("new", type=Path, help="the report to gate")
    _rule_options(c)
    c.add_argument("--markdown", type=Path, metavar="PATH",
                   help="also write the drift as markdown to PATH")
    s = sub.add_parser("summary", help="print a report's summary table; exit 1 if its gate failed")
    s.add_argument("report", type=Path)
    s.add_argument("--markdown", type=Path, metavar="PATH",
                   help="also write the markdown summary to PATH")
    h = sub.add_parser("html", help="write a report's self-contained HTML page "
                       "(plots need the html extra); exit 1 if its gate failed")
    h.add_argument("report", type=Path)
    h.add_argument("out", type=Path, help="the HTML file to write")
    h.add_argument("--no-plots", action="store_true", help="tables only, even with matplotlib")
    _history_parsers(sub)
    sub.add_parser("onboard", add_help=False, help="measure this GPU model's speed thresholds, "
                   "determinism and batch invariance, check its FP8 / FP4 families, write the "
                   "values into the case files (python -m numcheck onboard --help)")
    return p


def _rule_options(c: argparse.ArgumentParser) -> None:
    """The drift rules (compare, history): defaults from :class:`Rules`."""
    d = Rules()
    c.add_argument("--calc-diff-factor", type=float, default=d.calc_diff_factor,
                   help="regression when calc_diff grows more than this many times "
                   "(default %(default)s)")
    c.add_argument("--calc-diff-floor", type=float, default=d.calc_diff_floor,
                   help="calc_diff below this counts as zero (default %(default)s)")
    c.add_argument("--recall-drop", type=float, default=d.recall_drop,
                   help="regression when recall_min or tie_recall_min drops by more than this "
                   "(default %(default)s: any drop)")
    c.add_argument("--speedup-drop", type=float, default=d.speedup_drop,
                   help="regression when the speedup falls by more than this fraction with "
                   "confidence; needs timing with CIs in both reports (default %(default)s)")
    c.add_argument("--same-device-factor", type=float, default=d.same_device_factor,
                   help="regression when calc_diff grows more than this many times between "
                   "records of the same device name (default %(default)s)")
    c.add_argument("--sim-same-device-factor", type=float, default=d.sim_same_device_factor,
                   help="regression when a quantized check's sim_rel_fro grows more than this "
                   "many times (sim_calc_diff: its square) on the same device name (default "
                   "%(default)s)")
    c.add_argument("--sim-factor", type=float, default=d.sim_factor,
                   help="the same across device names (default %(default)s)")
    c.add_argument("--sim-floor", type=float, default=d.sim_floor,
                   help="sim_rel_fro below this counts as zero (default %(default)s)")
    c.add_argument("--sim-ratio-factor", type=float, default=d.sim_ratio_factor,
                   help="regression when quant.sim_ratio (the worst GEMM result over its "
                   "bound) grows more than this many times (default %(default)s)")
    c.add_argument("--sim-ratio-floor", type=float, default=d.sim_ratio_floor,
                   help="quant.sim_ratio below this counts as it (default %(default)s)")
    c.add_argument("--allow-removed", action="store_true",
                   help="a check of the baseline missing from the new run is listed, not a "
                   "regression (default: it fails the comparison)")


def _history_parsers(sub: Any) -> None:
    """merge, matrix and history (numcheck/history/commands.py runs them)."""
    m = sub.add_parser("merge", help="merge the reports of one run's shards into the report "
                       "a single run gives; exit 1 if the merged gate failed")
    m.add_argument("reports", type=Path, nargs="+", metavar="SHARD.json")
    m.add_argument("-o", "--out", type=Path, required=True, metavar="RUN.json",
                   help="the merged report to write")
    m.add_argument("--markdown", type=Path, metavar="PATH",
                   help="also write the merged run's markdown summary to PATH")
    for name, helptext in (
            ("matrix", ("one row per check, one column per device class (the newest run of "
                        "each); checks whose verdict differs across devices first")),
            ("history", ("each check across commits, per device class; exit 1 if the newest "
                         "run of a device class regressed against the one before it"))):
        q = sub.add_parser(name, help=helptext)
        q.add_argument("reports", type=Path, nargs="+", metavar="REPORT_OR_DIR",
                       help="report files, or folders searched for *.json reports (e.g. "
                       ".numcheck/history, where --numcheck-save keeps runs)")
        q.add_argument("--markdown", type=Path, metavar="PATH", help="also write markdown")
        q.add_argument("--html", type=Path, metavar="PATH",
                       help="also write a self-contained HTML page")
        q.add_argument("--repo", type=Path, metavar="DIR", default=Path.cwd(),
                       help="git checkout in which to look up the dates of commits that "
                       "older reports name without a date (default: the current folder)")
        q.add_argument("--jobs", type=int, metavar="N", default=None,
                       help="worker processes for reading reports and drawing plots "
                       "(default: the usable cores, at most 8)")
        if name == "history":
            q.add_argument("--no-plots", action="store_true",
                           help="tables only, even with matplotlib")
            _rule_options(q)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["onboard"]:  # its own options; it needs torch, the others do not
        from numcheck.calibrate.onboard import main as onboard

        return onboard(given[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        rules = (Rules(**{f.name: float(getattr(args, f.name)) for f in fields(Rules)})
                 if args.command in ("compare", "history") else None)
    except ValueError as exc:  # a rule value out of range
        parser.error(str(exc))
    try:
        if args.command == "compare":
            assert rules is not None
            return _compare(args, rules)
        if args.command == "html":
            return _html(args)
        if args.command in ("merge", "matrix", "history"):
            from numcheck.history import commands

            if args.command == "history":
                assert rules is not None
                return commands.history(args, rules)
            return int(getattr(commands, args.command)(args))
        return _summary(args)
    except BrokenPipeError:
        # `python -m numcheck compare a b | head`: the reader left; end quietly, keep the code.
        _silence_stdout()
        return getattr(args, "exit_code", EXIT_OK)
    except ReportError as exc:
        print(f"numcheck {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _compare(args: argparse.Namespace, rules: Rules) -> int:
    base, new = load_report(args.base), load_report(args.new)
    drift = compare_reports(base, new, rules, baseline=str(args.base))
    args.exit_code = EXIT_REGRESSION if drift.regressions else EXIT_OK
    text = "\n".join(drift_markdown(drift)) + "\n"
    if args.markdown is not None:
        args.markdown.write_text(text)
    append_step_summary(text)
    print(drift_headline(drift))
    rows = drift_rows(drift)
    if rows:
        for line in table(DRIFT_HEADER, rows):
            print(line)
    for r in drift.regressions:
        print(f"REGRESSION {r}")
    sys.stdout.flush()  # a closed pipe shows here, inside main's handler
    return int(args.exit_code)


def _summary(args: argparse.Namespace) -> int:
    report = load_report(args.report)
    args.exit_code = EXIT_OK if report.passed else EXIT_REGRESSION
    if args.markdown is not None:
        args.markdown.write_text(to_markdown(report))
    print(headline(report))
    header, rows = summary_table(report.records)
    for line in table(header, rows):
        print(line)
    sys.stdout.flush()
    return int(args.exit_code)


def _silence_stdout() -> None:
    # Python flushes stdout again at exit; point it at /dev/null so that flush cannot raise.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _html(args: argparse.Namespace) -> int:
    from numcheck.report.htmlpage import write_html

    report = load_report(args.report)
    write_html(args.out, report, plots=False if args.no_plots else None)
    print(f"numcheck html written: {args.out} ({headline(report)})")
    return EXIT_OK if report.passed else EXIT_REGRESSION


if __name__ == "__main__":
    sys.exit(main())
