"""history and matrix at scale: 500 reports of 100 checks each (issue 28, "Scale").

    python -m benchmarks.cost.history_scale [--kind worst|gate|perf] [--reports 500]
        [--checks 100] [--out DIR [--reuse]] [--repeat N] [--phases]

Writes a history folder of synthetic but full-size reports, then times, as a user would run
them (a fresh ``python -m numcheck`` each):

    python -m numcheck history DIR --html DIR/history.html --markdown DIR/history.md
    python -m numcheck matrix DIR --html DIR/matrix.html --markdown DIR/matrix.md

and prints, last, the wall and CPU seconds (the command and its worker processes), the
pages' sizes and the machine with its load average: on a shared machine the wall time
follows the load, the CPU time much less. The target: both under 10 s on 2 cores, the
history page under 10 MB.

The reports are copies of real records (templates() says which for each ``--kind``; the
default ``worst`` is heavier than any real run: 1.8 MB a report, 0.9 GB in all). Across
them: two device classes (H200, B200), 250 commits a day apart each run on both; numerics
constant from run to run (they are deterministic on one device) except 5 checks whose
calc_diff steps up 1.6x at one commit (in perf-only checks, which have no numerics, the
speedup drops 10% instead): moves the page must mark (the history's exit code is 0 unless a
step falls on the newest commit); speedups noisy by 1% (a new interval every run). The
folder is kept only with ``--out``; ``--reuse`` times the reports already there.

``--phases`` then shows where history's time goes, each phase run in this process (reading,
the series and moves, the page with its figures), as CPU seconds of the worker processes
and of this one, and the cut parse of numcheck's report reader against parsing whole files
(on the first 40 reports, scaled to all of them).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GATE = ROOT / "docs/evidence/2026-11-29-h200-gate-and-perf/gate-cuda-report.json"
TIMED = ROOT / "docs/evidence/2026-12-01-h200-speed-gate/calibration/calib-1.json"
CLASSES = ("NVIDIA H200", "NVIDIA B200")
STEPPED = 5  # checks whose calc_diff steps up once


def templates(kind: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The report document and the records to copy, for each kind of run:

    - ``gate``: the GPU gate (no --numcheck-perf): the H200 gate report's checks that ran,
      with their per-seed metrics, plot data and kernel-audit cast ledgers (17 kB a record),
      no timing;
    - ``perf``: a --numcheck-perf run: the H200 speed-gate report's records (timing, no
      kernel audit: 4.6 kB a record);
    - ``worst``: the gate's records with the perf run's timing added: both heavy parts at
      once, which no real run has (a timing run leaves the kernel audit off). An upper bound.
    """
    gate = json.loads(GATE.read_text())
    timed_doc = json.loads(TIMED.read_text())
    timed = [r for r in timed_doc["records"] if r.get("timing")]
    ran = [r for r in gate["records"] if r["status"] in ("pass", "xfail", "fail")]
    if kind == "perf":
        return timed_doc, copy.deepcopy(timed)
    if kind == "gate":
        return gate, copy.deepcopy(ran)
    out = []
    for i, r in enumerate(ran):
        r = copy.deepcopy(r)
        r["timing"] = copy.deepcopy(timed[i % len(timed)]["timing"])
        out.append(r)
    return gate, out


def make_checks(records: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` distinct checks: the template records, cycled, under case ids of their own."""
    out = []
    for j in range(n):
        r = copy.deepcopy(records[j % len(records)])
        r["case"] = f"{r['case']}-k{j // len(records)}"
        r["id"] = f"{r['op']}::{r['case']}::{r['variant']}[cuda]"
        r["nodeid"] = f"cases/{r['op']}.toml::{r['case']}::{r['variant']}[cuda]"
        out.append(r)
    return out


def first_calc_diff(record: dict[str, Any]) -> float:
    outputs = list(record["metrics"].values())
    return float(outputs[0].get("calc_diff", 0.0)) if outputs else 0.0


def write_reports(folder: Path, n_reports: int, n_checks: int, kind: str,
                  seed: int = 0) -> None:
    gate, records = templates(kind)
    checks = make_checks(records, n_checks)
    rnd = random.Random(seed)
    commits = n_reports // len(CLASSES)
    # Checks whose calc_diff is above the drift rules' floor (1e-10): a step there is a move.
    # Perf-only checks have no numerics: there the speedup steps down 10% instead.
    movable = [j for j, r in enumerate(checks) if first_calc_diff(r) > 1e-9]
    by_speed = not movable
    movable = movable or [j for j, r in enumerate(checks) if r.get("timing")]
    step_at = {j: rnd.randrange(commits // 4, commits) for j in rnd.sample(movable, STEPPED)}
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for c in range(commits):
        sha = f"{rnd.getrandbits(160):040x}"
        when = start + timedelta(days=c)
        for name in CLASSES:
            doc = copy.deepcopy({k: v for k, v in gate.items() if k != "records"})
            env = doc["environment"]
            env.update(device_names=[name], git_commit=sha,
                       git_commit_date=when.isoformat(timespec="seconds"))
            doc["created"] = (when + timedelta(hours=1)).isoformat(timespec="seconds")
            doc["exitstatus"], doc["gate"] = 0, "pass"
            recs = []
            for j, base in enumerate(checks):
                r = dict(base)  # shallow: only the changed sections are copied
                r["device_name"] = name
                if r["status"] == "fail":
                    r["status"] = "pass"
                stepped = j in step_at and c >= step_at[j]
                if stepped and not by_speed:
                    r["metrics"] = {o: dict(m, calc_diff=m.get("calc_diff", 1e-6) * 1.6)
                                    for o, m in r["metrics"].items()}
                if r.get("timing"):
                    t = dict(r["timing"])
                    s = t["speedup"] * (1 + 0.01 * rnd.gauss(0, 1)) * (
                        0.9 if stepped and by_speed else 1.0)
                    t.update(speedup=s, ci_low=s * 0.995, ci_high=s * 1.005)
                    r["timing"] = t
                recs.append(r)
            doc["records"] = recs
            cls = name.split()[-1]
            path = folder / cls / f"{sha[:12]}-{when:%Y%m%dT%H%M%SZ}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=1) + "\n")


def timed(argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of the command and its worker processes, exit code."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = _cpu()[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "numcheck", *argv], env=env,
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    cpu = _cpu()[0] - before
    if proc.returncode not in (0, 1):
        sys.exit(f"numcheck {argv[0]} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, cpu, proc.returncode


def _cpu() -> tuple[float, float]:
    """CPU seconds so far: of the worker processes this one has waited for, and of this one."""
    kids, me = (resource.getrusage(who) for who in (resource.RUSAGE_CHILDREN,
                                                     resource.RUSAGE_SELF))
    return kids.ru_utime + kids.ru_stime, me.ru_utime + me.ru_stime


def phases(reports: Path, n_parse: int = 40) -> list[tuple[str, float, float]]:
    """``(phase, CPU s of workers, CPU s here)`` of ``history --html`` on ``reports``, each
    phase called as the command calls it; then the reader's cut parse against a whole one."""
    from numcheck.history.page import render_history
    from numcheck.history.runs import _parse, load_runs
    from numcheck.history.series import build_history
    from numcheck.history.store import find_reports

    rows = []
    state: dict[str, Any] = {}
    steps = (("reading", lambda: state.update(runs=load_runs([reports]).runs)),
             ("series and moves", lambda: state.update(h=build_history(state["runs"]))),
             ("page and figures", lambda: render_history(state["h"])))
    for name, step in steps:
        before = _cpu()
        step()
        after = _cpu()
        rows.append((name, after[0] - before[0], after[1] - before[1]))
    files = [p for p, _ in find_reports([reports])]
    sample = [p.read_bytes() for p in files[:n_parse]]
    scale = len(files) / max(len(sample), 1)
    for name, parse in (("parse, sections cut (all reports)", _parse),
                        ("parse, whole files (all reports)", json.loads)):
        t0 = time.process_time()
        for data in sample:
            parse(data)
        rows.append((name, 0.0, (time.process_time() - t0) * scale))
    return rows


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=500)
    ap.add_argument("--checks", type=int, default=100)
    ap.add_argument("--kind", choices=("worst", "gate", "perf"), default="worst",
                    help="what the reports hold (templates() says; default: worst)")
    ap.add_argument("--out", type=Path, help="keep the reports and pages here")
    ap.add_argument("--reuse", action="store_true",
                    help="time the reports already under --out (no writing)")
    ap.add_argument("--repeat", type=int, default=1, help="time each command this often")
    ap.add_argument("--phases", action="store_true",
                    help="then where history's time goes, phase by phase (in this process)")
    args = ap.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="numcheck-history-"))
    reports = folder / "history"
    t0 = time.perf_counter()
    if not (args.reuse and reports.is_dir()):
        write_reports(reports, args.reports, args.checks, args.kind)
    size = sum(p.stat().st_size for p in reports.rglob("*.json"))
    print(f"{args.reports} {args.kind} reports of {args.checks} checks ({size / 1e6:.0f} MB; "
          f"written in {time.perf_counter() - t0:.0f} s)")
    rows = []
    for _ in range(args.repeat):
        for name in ("history", "matrix"):
            page = folder / f"{name}.html"
            wall, cpu, code = timed([name, str(reports), "--html", str(page),
                                     "--markdown", str(folder / f"{name}.md")])
            rows.append((f"{name} --html --markdown", wall, cpu, page.stat().st_size, code))
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 0
    print(f"machine: {cores} cores, {cpu_model()}, Python {platform.python_version()}, "
          f"load average {os.getloadavg()[0]:.1f} (other processes share the cores)")
    print(f"{'command':<28} {'wall s':>7} {'CPU s':>7} {'page MB':>8} {'exit':>5}")
    for name, wall, cpu, page, code in rows:
        print(f"{name:<28} {wall:>7.2f} {cpu:>7.2f} {page / 1e6:>8.2f} {code:>5}")
    if args.phases:
        print(f"{'history --html, phase':<36} {'workers CPU s':>13} {'here CPU s':>10}")
        for name, workers, here in phases(reports):
            print(f"{name:<36} {workers:>13.2f} {here:>10.2f}")
    if args.out is None:
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
