"""``python -m numcheck``: work with report files outside pytest.

    python -m numcheck compare BASE.json NEW.json   # baseline drift; exit 1 on a regression
    python -m numcheck summary REPORT.json          # the summary table (and markdown) again
    python -m numcheck html REPORT.json OUT.html    # the self-contained HTML report

Exit codes (documented in the README, "Gating merges in CI"):
    0  no regression (compare) / the report's gate passed (summary)
    1  at least one regression (compare) / the report's gate failed (summary)
    2  usage error or unreadable input (a missing file, not a numcheck report, another
       schema version); the message names the file and the fix
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from numcheck.report.drift import DRIFT_HEADER, Rules, compare, drift_headline, drift_rows
from numcheck.report.markdown import drift_markdown, headline, to_markdown
from numcheck.report.records import ReportError, load_report
from numcheck.report.render import summary_table, table

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m numcheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="compare a report with a baseline report; "
                       "exit 1 on a regression")
    c.add_argument("base", type=Path, help="baseline report (e.g. main's --numcheck-report)")
    c.add_argument("new", type=Path, help="the report to gate")
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
    c.add_argument("--allow-removed", action="store_true",
                   help="a check of the baseline missing from the new run is listed, not a "
                   "regression (default: it fails the comparison)")
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
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "compare":
            return _compare(args)
        if args.command == "html":
            return _html(args)
        return _summary(args)
    except BrokenPipeError:
        # `python -m numcheck compare a b | head`: the reader left; end quietly, keep the code.
        _silence_stdout()
        return getattr(args, "exit_code", EXIT_OK)
    except ReportError as exc:
        print(f"numcheck {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # a rule value out of range
        parser.error(str(exc))
        return EXIT_USAGE  # not reached: parser.error exits with 2


def _compare(args: argparse.Namespace) -> int:
    rules = Rules(args.calc_diff_factor, args.calc_diff_floor, args.recall_drop,
                  args.speedup_drop, args.same_device_factor, float(args.allow_removed))
    base, new = load_report(args.base), load_report(args.new)
    drift = compare(base, new, rules, baseline=str(args.base))
    args.exit_code = EXIT_REGRESSION if drift["regressions"] else EXIT_OK
    text = "\n".join(drift_markdown(drift)) + "\n"
    if args.markdown is not None:
        args.markdown.write_text(text)
    _step_summary(text)
    print(drift_headline(drift))
    rows = drift_rows(drift)
    if rows:
        for line in table(DRIFT_HEADER, rows):
            print(line)
    for r in drift["regressions"]:
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


def _step_summary(text: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
