"""The GPU regression run: everything a change to numcheck must pass on a GPU, in one command.

    python3 benchmarks/gpu_regression.py --out DIR [--steps env,install,gate,perf,unit,independent]
        [--perf-runs 3] [--budget-s 520] [--workers 8] [--tolerance 0.03]

Run from the repository root on a CUDA machine (about 6-7 minutes on one H200). Named steps,
each in a fresh process, each writing its log and report under DIR:

- ``env``: date, GPU and driver, torch / CUDA / triton versions, the commit (``$COMMIT``
  when the tree is a copy without .git).
- ``install``: ``pip install -e .`` as the README says; offline (a GPU machine that reaches no
  index) it falls back to ``pip install --no-deps --no-build-isolation -e .`` and says so.
- ``gate``: ``pytest --numcheck --numcheck-device cuda`` over the shipped cases (report,
  markdown): it must pass.
- ``perf``: the perf suite (``cases/perf.toml`` with ``--numcheck-perf``) ``--perf-runs`` times,
  each in a fresh process: 0 failed checks in each.
- ``unit``: numcheck's own tests with ``-n --workers`` on the GPU: 0 failed.
- ``independent``: every gated speedup of the last perf run timed again by an independent
  graph-replay timer (``benchmarks/speed_gate.py independent``: triton's
  ``do_bench_cudagraph``): check, numcheck's speedup, the independent one, the difference.
  Off when a difference exceeds ``--tolerance`` (3%: the two timers replay differently,
  numcheck interleaves reference and variant in batches, do_bench_cudagraph replays each
  alone; the shipped checks measured within 2.2% of each other, docs/perf/).

Prints the independent table, then one short table of the steps last; exits 1 when any step
is off or did not run within ``--budget-s``. DIR gets every log and report, packed as
``regression.tgz`` after each step (a run killed at its limit keeps what it finished) plus
``summary.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("env", "install", "gate", "perf", "unit", "independent")
PY = sys.executable


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str


class Run:
    """One regression run: where it writes, how long it may take, what each step found."""

    def __init__(self, out: Path, work: Path, budget_s: float) -> None:
        self.out, self.work = out, work
        self.budget_s = budget_s
        self.start = time.monotonic()
        self.steps: list[Step] = []
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        # This tree's code wins over any other numcheck installed on the machine.
        self.env["PYTHONPATH"] = f"{ROOT}:{os.environ.get('PYTHONPATH', '')}".rstrip(":")

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.start)

    def sh(self, name: str, cmd: list[str], limit: float) -> tuple[int, str, float]:
        """Run ``cmd`` in the repo root, its output in WORK/name.txt; (rc, output, seconds)."""
        t0 = time.monotonic()
        log = self.work / f"{name}.txt"
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=self.env, capture_output=True, text=True,
                                  timeout=max(limit, 1), check=False)
            rc, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = 124
            text = ((exc.stdout or b"").decode() if isinstance(exc.stdout, bytes)
                    else exc.stdout or "") + f"\n[killed after {limit:.0f} s]"
        log.write_text(f"$ {shlex.join(cmd)}\n{text}")
        return rc, text, time.monotonic() - t0

    def record(self, name: str, ok: bool, seconds: float, detail: str) -> None:
        self.steps.append(Step(name, ok, seconds, detail))
        print(f"[{name}] {'ok' if ok else 'OFF'} {seconds:.0f} s: {detail}", flush=True)
        self.pack()

    def pack(self) -> None:
        with tarfile.open(self.out / "regression.tgz", "w:gz") as tar:
            tar.add(self.work, arcname=self.work.name)


def step_env(run: Run) -> None:
    t0 = time.monotonic()
    lines = [f"date: {datetime.now(UTC).isoformat(timespec='seconds')}",
             f"command: {shlex.join([Path(PY).name, *sys.argv])}"]
    commit = os.environ.get("COMMIT") or _git("rev-parse", "HEAD")
    lines.append(f"commit: {commit or 'unknown (set COMMIT)'}")
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,"
                              "clocks.max.sm", "--format=csv,noheader"], capture_output=True,
                             text=True, check=False)
        gpu, smi_ok = smi.stdout.strip() or "nvidia-smi: no GPU", smi.returncode == 0
    except OSError:
        gpu, smi_ok = "nvidia-smi: not found", False
    lines.append(f"gpu: {gpu}")
    versions = subprocess.run(
        [PY, "-c", "import sys, torch; print('python', sys.version.split()[0], 'torch', "
         "torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available() and "
         "torch.cuda.get_device_name());\ntry:\n import triton; print('triton', "
         "triton.__version__)\nexcept ImportError:\n print('triton none')"],
        capture_output=True, text=True, check=False)
    lines += versions.stdout.strip().splitlines() or [versions.stderr.strip()]
    (run.work / "env.txt").write_text("\n".join(lines) + "\n")
    ok = "gpu False" not in versions.stdout and smi_ok
    short = gpu.split(",")[0]
    torch_line = next((ln for ln in lines if ln.startswith("python")), "")
    triton_line = next((ln for ln in lines if ln.startswith("triton")), "")
    ver = re.search(r"torch (\S+)", torch_line)
    run.record("env", ok, time.monotonic() - t0,
               f"{short}, torch {ver.group(1) if ver else '?'}, {triton_line}, "
               f"commit {(commit or '?')[:10]}")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=False).stdout.strip()
    except OSError:
        return ""


def step_install(run: Run) -> None:
    # The README's command first; pip gives up on an unreachable index at once.
    rc, _, s1 = run.sh("install", [PY, "-m", "pip", "install", "-q", "--retries", "0",
                                   "--timeout", "5", "-e", "."], min(run.left(), 240))
    if rc == 0:
        run.record("install", True, s1, "pip install -e . (as the README says)")
        return
    rc, _, s2 = run.sh("install-offline", [PY, "-m", "pip", "install", "-q", "--no-deps",
                                           "--no-build-isolation", "-e", "."],
                       min(run.left(), 240))
    run.record("install", rc == 0, s1 + s2,
               "pip install -e . failed (offline: no package index); installed with "
               f"pip install --no-deps --no-build-isolation -e . (rc {rc})")


def _statuses(report: Path) -> Counter[str]:
    return Counter(r["status"] for r in json.loads(report.read_text())["records"])


def _counts(c: Counter[str]) -> str:
    order = ("pass", "fail", "error", "xfail", "skip")
    return ", ".join(f"{c[s]} {s}" for s in order if c[s]) or "no checks"


def step_gate(run: Run) -> None:
    report = run.work / "gate.json"
    rc, text, s = run.sh("gate", [PY, "-m", "pytest", "--numcheck", "--numcheck-device", "cuda",
                                  "-p", "no:cacheprovider", "-q", "--numcheck-report",
                                  str(report), "--numcheck-markdown",
                                  str(run.work / "gate.md")], run.left())
    if not report.exists():
        run.record("gate", False, s, f"rc {rc}, no report: {_tail(text)}")
        return
    c = _statuses(report)
    run.record("gate", rc == 0 and not c["fail"] and not c["error"], s,
               f"rc {rc}: {sum(c.values())} checks: {_counts(c)}")


def step_perf(run: Run, runs: int) -> list[Path]:
    reports: list[Path] = []
    longest = 0.0
    for i in range(1, runs + 1):
        name = f"perf-{i}"
        if run.left() < longest + 30:
            run.record(name, False, 0, f"not started: {run.left():.0f} s left in the budget")
            continue
        report = run.work / f"{name}.json"
        rc, text, s = run.sh(name, [PY, "-m", "pytest", "--numcheck", "--numcheck-perf",
                                    "--numcheck-device", "cuda", "-p", "no:cacheprovider", "-q",
                                    "-rxXs", "--numcheck-report", str(report),
                                    "cases/perf.toml"], run.left())
        longest = max(longest, s)
        if not report.exists():
            run.record(name, False, s, f"rc {rc}, no report: {_tail(text)}")
            continue
        c = _statuses(report)
        failed = [r["id"] for r in json.loads(report.read_text())["records"]
                  if r["status"] in ("fail", "error")]
        detail = f"rc {rc}: {sum(c.values())} checks: {_counts(c)}"
        if failed:
            detail += "; failed: " + ", ".join(failed)
        run.record(name, rc == 0 and not failed, s, detail)
        reports.append(report)
    return reports


def step_unit(run: Run, workers: int) -> None:
    rc, text, s = run.sh("unit", [PY, "-m", "pytest", "-q", "-n", str(workers), "-p",
                                  "no:cacheprovider"], run.left())
    last = next((ln for ln in reversed(text.splitlines())
                 if re.search(r"\d+ (passed|failed)", ln)), _tail(text))
    failed = re.findall(r"^FAILED (\S+)", text, flags=re.M)
    detail = last.strip("= ")
    if failed:
        detail += "; " + ", ".join(failed[:4])
    run.record("unit", rc == 0, s, detail)


def step_independent(run: Run, report: Path | None, tolerance: float) -> None:
    if report is None:
        run.record("independent", False, 0, "no perf report to re-time")
        return
    out = run.work / "independent.json"
    rc, text, s = run.sh("independent", [PY, "benchmarks/speed_gate.py", "independent",
                                         str(report), "--json", str(out)], run.left())
    if rc != 0 or not out.exists():
        run.record("independent", False, s, f"rc {rc}: {_tail(text)}")
        return
    rows = json.loads(out.read_text())
    print(independent_table(rows, tolerance))
    off = [r for r in rows if not abs(r["diff"]) <= tolerance]
    within2 = sum(abs(r["diff"]) <= 0.02 for r in rows)
    largest = max(rows, key=lambda r: abs(r["diff"]), default=None)
    detail = f"{within2}/{len(rows)} gated speedups within 2%"
    if largest is not None:
        detail += f", largest {largest['diff']:+.1%} ({largest['id']})"
    if off:
        detail += f"; over {tolerance:.0%}: " + ", ".join(r["id"] for r in off)
    run.record("independent", bool(rows) and not off, s, detail)


def independent_table(rows: list[dict[str, Any]], tolerance: float) -> str:
    """check | numcheck's speedup [interval] | independent | difference."""
    width = max((len(r["id"]) for r in rows), default=5)
    lines = [f"{'check':<{width}}  {'numcheck':>26}  {'independent':>11}  {'diff':>7}"]
    for r in rows:
        flag = "" if abs(r["diff"]) <= tolerance else f"  over {tolerance:.0%}"
        interval = f"{r['numcheck']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]"
        lines.append(f"{r['id']:<{width}}  {interval:>26}  {r['independent']:>11.3f}  "
                     f"{r['diff']:>+7.1%}{flag}")
    return "\n".join(lines)


def summary_table(steps: list[Step], total_s: float) -> str:
    width = max(len(s.name) for s in steps)
    lines = [f"{'step':<{width}}  result  {'time':>5}  detail"]
    lines += [f"{s.name:<{width}}  {'ok' if s.ok else 'OFF':<6}  {s.seconds:>4.0f}s  {s.detail}"
              for s in steps]
    verdict = "PASS" if steps and all(s.ok for s in steps) else "FAIL"
    lines.append(f"GPU regression run: {verdict} ({total_s:.0f} s)")
    return "\n".join(lines)


def _tail(text: str, n: int = 3) -> str:
    return " | ".join(ln.strip() for ln in text.strip().splitlines()[-n:])[:300]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/numcheck-out")))
    ap.add_argument("--steps", default=",".join(STEPS),
                    help=f"comma-separated, in this order: {','.join(STEPS)}")
    ap.add_argument("--perf-runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=520.0)
    ap.add_argument("--tolerance", type=float, default=0.03)
    args = ap.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    unknown = set(steps) - set(STEPS)
    if unknown:
        ap.error(f"unknown steps {sorted(unknown)}; known: {', '.join(STEPS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "regression"
    work.mkdir(exist_ok=True)
    run = Run(args.out, work, args.budget_s)
    perf_reports: list[Path] = []
    for name in STEPS:
        if name not in steps:
            continue
        if name == "env":
            step_env(run)
        elif name == "install":
            step_install(run)
        elif name == "gate":
            step_gate(run)
        elif name == "perf":
            perf_reports = step_perf(run, args.perf_runs)
        elif name == "unit":
            step_unit(run, args.workers)
        elif name == "independent":
            last = perf_reports[-1] if perf_reports else None
            if last is None and (work / f"perf-{args.perf_runs}.json").exists():
                last = work / f"perf-{args.perf_runs}.json"
            step_independent(run, last, args.tolerance)
    table = summary_table(run.steps, time.monotonic() - run.start)
    (work / "summary.txt").write_text(table + "\n")
    (args.out / "summary.txt").write_text(table + "\n")
    run.pack()
    print()
    print(table)
    return 0 if run.steps and all(s.ok for s in run.steps) else 1


if __name__ == "__main__":
    raise SystemExit(main())
