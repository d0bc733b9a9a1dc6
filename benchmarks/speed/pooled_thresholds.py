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
from numcheck.devices import device_class
from numcheck.perf.thresholds import propose_speedup_min

#: A row of the end-of-run perf table (numcheck.perf.table) for a gated check:
#: case, variant, device, timer, median, IQR, reference median, speedup [low, high], ...,
#: and the gate column ``pass (min X)`` / ``fail (min X)`` / ``undecided (min X)``.
_ROW = re.compile(r"^(?P<case>\S+::\S+)\s+(?P<variant>\S+)\s+cuda\s+\S+\s+\S+ m?s\s+\S+\s+"
                  r"\S+ m?s\s+(?P<speedup>[\d.]+) \[[\d.]+, [\d.]+\]\s.*\(min [\d.]+\)\s*$")


def card_class(log: Path) -> str:
    """The device class of the card a perf log was made on, from the ``gpu:`` line of the
    runner's env.txt beside it (a table's rows do not say which card they are from)."""
    env = log.parent / "env.txt"
    gpu = next((line[4:].split(",")[0].strip() for line in
                (env.read_text().splitlines() if env.exists() else [])
                if line.startswith("gpu:")), None)
    if gpu is None:
        raise SystemExit(f"{log}: no env.txt with a 'gpu:' line beside it, so its card is "
                         f"unknown. Fix: keep the GPU runner's env.txt in the log's folder")
    return device_class(gpu)


def pooled_speedups(paths: list[Path], cls: str | None = None
                    ) -> dict[tuple[str, str], list[float]]:
    """(op::case, variant) -> the point speedup of each run that gated it; with ``cls``, a
    log made on a card of another class is an error."""
    runs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for path in paths:
        if cls is not None and (made_on := card_class(path)) != cls:
            raise SystemExit(f"{path}: made on a card of class {made_on}, not {cls}. Fix: "
                             f"give only the logs of {cls} runs")
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
    runs = pooled_speedups(args.logs, args.device_class)
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


def _write(edits: dict[Path, list], cls: str, n_logs: int) -> None:
    import tomlkit

    from numcheck.calibrate.casewriter import Edit, write_edits

    command = " ".join(["python", "-m", "benchmarks.speed.pooled_thresholds",
                        "--class", cls, f"<{n_logs} perf-N.txt of docs/evidence>",
                        "--write"])
    for path, rows in edits.items():
        doc = tomlkit.parse(Path(path).read_text())
        file_edits = []
        for table, variant, new, old, n in rows:
            item = doc[table]["perf"][variant].item("speedup_min")
            said = item.trivia.comment.lstrip("# ").strip()
            why = (f"{cls} lowered from {old:g}: the rule over {n} recorded runs "
                   f"(benchmarks/speed/pooled_thresholds.py)")
            # The class's own part of the line's comment described the old value.
            rest = re.sub(rf"\s*;?\s*{cls} \([^)]*\): runs [\d. ]+", "", said).strip()
            file_edits.append(Edit((table, "perf", variant), "speedup_min", new,
                                   sub=cls, comment=f"{rest}; {why}" if rest else why))
        changes, skipped = write_edits(Path(path), file_edits,
                                       (command, datetime.date.today().isoformat()))
        for change in [*changes, *skipped]:
            print(f"{path}: {change.describe()}")


if __name__ == "__main__":
    sys.exit(main())
