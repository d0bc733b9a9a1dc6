"""One device class's ``speedup_min`` from every perf run recorded for it, lowered only.

A threshold set from one machine's runs (``numcheck onboard``, ``--numcheck-calibrate-speed``)
knows that machine's spread, not the next one's: two cards of one class differ by a few
percent in the same ratio. This script pools the point speedups of every recorded run of
the class (the perf table each run printed, as the GPU runner keeps it in ``perf-N.txt``),
applies the rule of docs/speed.md, "Setting thresholds" (numcheck.perf.thresholds: the
lower 10% quantile x 0.95, rounded down), and proposes a threshold only where that is below
the one the case file holds: more machines can only widen the spread a threshold must
clear, so a pooled figure never raises one (a faster card is no evidence about a slower
one). Usage::

    python -m benchmarks.speed.pooled_thresholds --class H100 \\
        $(find docs/evidence -path '*h100*' -name 'perf-*.txt') [--write]

``--write`` lowers them in the case files (needs tomlkit), each line saying from what and
on how many runs.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from collections import defaultdict
from pathlib import Path

from numcheck.cases import load_cases
from numcheck.perf.thresholds import propose_speedup_min

#: A row of the end-of-run perf table (numcheck.perf.table) for a gated check:
#: case, variant, device, timer, median, IQR, reference median, speedup [low, high], ...,
#: and the gate column ``pass (min X)`` / ``fail (min X)`` / ``undecided (min X)``.
_ROW = re.compile(r"^(?P<case>\S+::\S+)\s+(?P<variant>\S+)\s+cuda\s+\S+\s+\S+ m?s\s+\S+\s+"
                  r"\S+ m?s\s+(?P<speedup>[\d.]+) \[[\d.]+, [\d.]+\]\s.*\(min [\d.]+\)\s*$")


def pooled_speedups(paths: list[Path]) -> dict[tuple[str, str], list[float]]:
    """(op::case, variant) -> the point speedup of each run that gated it."""
    runs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for path in paths:
        for line in path.read_text().splitlines():
            m = _ROW.match(line)
            if m:
                runs[(m["case"], m["variant"])].append(float(m["speedup"]))
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", type=Path, help="perf-N.txt files of one device class")
    ap.add_argument("--class", dest="device_class", required=True, help="H100, H200...")
    ap.add_argument("--cases", type=Path, default=Path("cases"))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    runs = pooled_speedups(args.logs)
    cases = {f"{c.op}::{c.id}": c for c in load_cases(args.cases)}
    edits: dict[Path, list] = defaultdict(list)
    print(f"{len(args.logs)} runs of class {args.device_class}")
    print("| check | runs | slowest | now | pooled rule | lowered |")
    print("|---|---|---|---|---|---|")
    for (case_id, variant), speedups in sorted(runs.items()):
        case = cases.get(case_id)
        spec = case.perf.get(variant) if case is not None else None
        now = spec.speedup_min.get(args.device_class) if spec is not None else None
        expect = case.expect.get(variant) if case is not None else None
        if now is None or (expect is not None and "perf.speedup_min" in expect.fails):
            continue  # ungated here, or known-bad: its threshold must keep failing it
        proposal = propose_speedup_min(speedups).threshold
        lower = proposal is not None and proposal < now
        print(f"| {case_id}::{variant} | {len(speedups)} | {min(speedups):.3f} | {now:g} | "
              f"{proposal if proposal is None else f'{proposal:g}'} | {'yes' if lower else ''} |")
        if lower:
            edits[case.source].append((case.table, variant, proposal, now, len(speedups)))
    if args.write and edits:
        _write(edits, args.device_class, len(args.logs))
    return 0


def _write(edits: dict[Path, list], device_class: str, n_logs: int) -> None:
    import tomlkit

    from numcheck.calibrate.casewriter import Edit, write_edits

    command = " ".join(["python", "-m", "benchmarks.speed.pooled_thresholds",
                        "--class", device_class, f"<{n_logs} perf-N.txt of docs/evidence>",
                        "--write"])
    for path, rows in edits.items():
        doc = tomlkit.parse(Path(path).read_text())
        file_edits = []
        for table, variant, new, old, n in rows:
            item = doc[table]["perf"][variant].item("speedup_min")
            said = item.trivia.comment.lstrip("# ").strip()
            why = (f"{device_class} lowered from {old:g}: the rule over {n} recorded runs "
                   f"(benchmarks/speed/pooled_thresholds.py)")
            # The class's own part of the line's comment described the old value.
            rest = re.sub(rf"\s*;?\s*{device_class} \([^)]*\): runs [\d. ]+", "", said).strip()
            file_edits.append(Edit((table, "perf", variant), "speedup_min", new,
                                   sub=device_class, comment=f"{rest}; {why}" if rest else why))
        changes, skipped = write_edits(Path(path), file_edits,
                                       (command, datetime.date.today().isoformat()))
        for change in [*changes, *skipped]:
            print(f"{path}: {change.describe()}")


if __name__ == "__main__":
    sys.exit(main())
