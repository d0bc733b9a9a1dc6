"""The GPU regression run: everything a change to numcheck must pass on a GPU, in one command.

    python3 benchmarks/gpu_regression.py --out DIR [--steps env,install,gate,perf,unit,independent]
        [--perf-runs 3] [--budget-s 520] [--workers 8] [--tolerance 0.03]

Run from the repository root on a CUDA machine (the default steps: 395-417 s on one H200
over the full runs in docs/evidence/2026-12-02-h200-regression). Named steps,
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
  graph-replay timer (``benchmarks/speed/speed_gate.py independent``: triton's
  ``do_bench_cudagraph``, ~2 s of sustained load per figure, and a burst timer alternating
  ~1 ms samples as numcheck does, written apart from numcheck's), with the SM clock sampled
  during each timing (NVML): check, numcheck's speedup, both independent ones, the
  differences. Off when numcheck's speedup exceeds either by more than ``--tolerance`` (3%),
  or they fall on opposite sides of the check's ``speedup_min``; a sustained figure below
  numcheck's is listed as ``throttled``, not off, only where the burst timer agrees with
  numcheck and the driver lowered the variant's clock for power or heat. A numcheck speedup
  lower by more than the tolerance is listed as conservative, not off: numcheck replays one
  call per graph replay, so a few-microsecond kernel carries each replay's launch cost that
  do_bench_cudagraph amortises (:func:`judge`).

Those six are the default. ``onboard`` (``python -m numcheck onboard``: this GPU model's
speed thresholds, determinism and batch invariance measured and written into the tree's case
files, its FP8 / FP4 families checked on held-out seeds; ``--onboard-runs``,
``--onboard-seeds``) runs right after ``install`` when named, so the steps after it hold
the machine to what it wrote; its patch (``onboard-<class>.patch``) applies the values
elsewhere. A GPU model with no thresholds yet, in about 5 minutes on one H100:

    --steps env,install,onboard                         then git apply the patch
    --steps env,install,gate,perf,independent           on the tree with it applied

The evidence runs behind the docs are optional steps too, named in
``--steps`` beside them (``python3 benchmarks/gpu_regression.py --list`` prints them); each
is one command with its own time limit, judged by what it wrote. They replace the lettered
scripts ``benchmarks/h200_run_a.sh`` ... ``h200_run_j.sh`` and their wrappers; the evidence
folders under docs/evidence/ name the steps that remake them. For example (each under 9
minutes on one H200):

    --steps env,install,honest,honest-heldout,catch     the honest families and held-out
                                                        seeds on CUDA, the planted bugs
    --steps env,install,calibrate,calibrate-heldout,false-fail,determinism
    --steps env,install,invariance                      determinism and batch invariance
    --steps env,install,gate,xdist,explain,audit,casts,casts-perf,html,example
    --steps env,install,bench,fidelity,fused            the perf cases timed, checked twice
    --steps env,install,speed-evidence,speed-xdist      the speed gate's fresh-run evidence
    --steps env,install,liger-install,liger,liger-times examples/liger_mhc on CUDA
    --steps env,install,isolation                      crash isolation: examples/crashing_kernels
                                                        serially, with -n 2 and under memcheck
    --steps env,install,fp8-real,fp8-families,fp8-catch,fp8-casts,fp8-casts-perf
                                                        FP8 and FP4: the real kernels'
                                                        verdicts, families, planted bugs

Prints the independent table (and an optional step's short table), then one short table of
the steps last; exits 1 when any step is off or did not run within ``--budget-s``. DIR gets
every log and report, packed as ``regression.tgz`` after each step (a run killed at its
limit keeps what it finished) plus ``summary.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("env", "install", "gate", "perf", "unit", "independent")
#: The order the steps run in (``onboard`` is never a default: it rewrites the case files).
ORDER = ("env", "install", "onboard", "gate", "perf", "unit", "independent")
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

    def sh(self, name: str, cmd: list[str], limit: float, *, cwd: Path = ROOT,
           env: dict[str, str] | None = None) -> tuple[int, str, float]:
        """Run ``cmd`` in the repo root (or ``cwd``), its output in WORK/name.txt; (rc,
        output, seconds). ``env``: variables added to the run's environment."""
        t0 = time.monotonic()
        log = self.work / f"{name}.txt"
        try:
            proc = subprocess.run(cmd, cwd=cwd, env={**self.env, **(env or {})},
                                  capture_output=True, text=True,
                                  timeout=max(limit, 1), check=False)
            rc, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            # What it printed before the kill, both streams (raw bytes, possibly cut
            # inside a character: decoded leniently).
            rc = 124
            text = "".join(part.decode(errors="replace") if isinstance(part, bytes)
                           else part or "" for part in (exc.stdout, exc.stderr))
            text += f"\n[killed after {limit:.0f} s]"
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


def _counts(c: Counter[str]) -> str:
    order = ("pass", "fail", "error", "xfail", "skip")
    return ", ".join(f"{c[s]} {s}" for s in order if c[s]) or "no checks"


def report_verdict(report: Path, rc: int, text: str) -> tuple[bool, str]:
    """A pytest run that wrote a JSON report: ok when it exited 0 and no record failed or
    erred; the detail counts the records by status and names the failed ones."""
    if not report.exists():
        return False, f"rc {rc}, no report: {_tail(text)}"
    records = json.loads(report.read_text())["records"]
    failed = [r["id"] for r in records if r["status"] in ("fail", "error")]
    detail = f"rc {rc}: {len(records)} checks: {_counts(Counter(r['status'] for r in records))}"
    if failed:
        detail += "; failed: " + ", ".join(failed)
    return rc == 0 and not failed, detail


def step_gate(run: Run) -> None:
    report = run.work / "gate.json"
    rc, text, s = run.sh("gate", [PY, "-m", "pytest", "--numcheck", "--numcheck-device", "cuda",
                                  "-p", "no:cacheprovider", "-q", "--numcheck-report",
                                  str(report), "--numcheck-markdown",
                                  str(run.work / "gate.md")], run.left())
    ok, detail = report_verdict(report, rc, text)
    run.record("gate", ok, s, detail)


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
        ok, detail = report_verdict(report, rc, text)
        run.record(name, ok, s, detail)
        if report.exists():
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
    rc, text, s = run.sh("independent", _bench("speed.speed_gate", "independent", str(report),
                                                "--json", str(out)), run.left())
    if rc != 0 or not out.exists():
        run.record("independent", False, s, f"rc {rc}: {_tail(text)}")
        return
    rows = json.loads(out.read_text())
    thresholds = {r["id"]: (r.get("timing") or {}).get("speedup_min")
                  for r in json.loads(report.read_text())["records"]}
    for r in rows:
        r["speedup_min"] = thresholds.get(r["id"])
    print(independent_table(rows, tolerance))
    off = [r for r in rows if judge(r, tolerance) == "off"]
    lower = [r for r in rows if judge(r, tolerance) == "conservative"]
    throttled = [r for r in rows if judge(r, tolerance) == "throttled"]
    within2 = sum(abs(r["diff"]) <= 0.02 for r in rows)
    largest = max(rows, key=lambda r: abs(r["diff"]), default=None)
    detail = f"{within2}/{len(rows)} gated speedups within 2%"
    if largest is not None:
        detail += f", largest {largest['diff']:+.1%} ({largest['id']})"
    if lower:
        detail += (f"; numcheck lower by over {tolerance:.0%} (conservative, same verdict): "
                   + ", ".join(r["id"] for r in lower))
    if throttled:
        detail += ("; sustained load lowers the clock (burst timer agrees with numcheck): "
                   + ", ".join(f"{r['id']} {r['independent']:.3f} at "
                               f"{r['clock_var']['median_mhz']:.0f} MHz" for r in throttled))
    if off:
        detail += "; OFF: " + ", ".join(r["id"] for r in off)
    run.record("independent", bool(rows) and not off, s, detail)


def judge(row: dict[str, Any], tolerance: float) -> str:
    """``ok``; ``conservative`` (numcheck's speedup lower than the independent timer's by more
    than ``tolerance``, with the same verdict against the threshold); ``throttled`` (numcheck's
    speedup higher than the sustained timer's, explained by the clock: see
    :func:`power_explains`); or ``off``: numcheck's speedup higher by more than ``tolerance``
    than either timer's (the gate would pass what is not that fast), or on the other side of
    the check's ``speedup_min``.

    Two independent figures: ``independent`` is do_bench_cudagraph's, a graph of many calls
    replayed for ~2 s without a break (sustained load); ``burst`` alternates the two in ~1 ms
    samples, the duty cycle numcheck's timer keeps. The asymmetry is the timers': numcheck
    replays a graph of one call per replay, so a few-microsecond kernel carries each replay's
    launch cost that do_bench_cudagraph spreads over many calls. On a launch-bound op (mHC's
    fused kernel at 64 tokens, ~5 us a call) numcheck's speedup is therefore the lower one:
    conservative, and the threshold was set from it.
    """
    threshold = row.get("speedup_min")

    def other_side(x: float) -> bool:
        return threshold is not None and (row["numcheck"] >= threshold) != (x >= threshold)

    if "burst" in row and (row["burst_diff"] < -tolerance or other_side(row["burst"])):
        return "off"
    if row["diff"] < -tolerance or other_side(row["independent"]):
        return "throttled" if power_explains(row) else "off"
    if row["diff"] > tolerance:
        return "conservative"
    return "ok"


def power_explains(row: dict[str, Any]) -> bool:
    """Whether a sustained figure below numcheck's is the GPU lowering its clock: the burst
    timer (numcheck's duty cycle, written apart from it) agrees with numcheck, the driver gave a
    power or thermal reason during the variant's sustained timings, and the variant ran at a
    lower SM clock than the reference did. Without clock samples (no NVML) it never does."""
    ref, var = row.get("clock_ref"), row.get("clock_var")
    return bool("burst" in row and ref and var and var["throttled"]
                and var["median_mhz"] < ref["median_mhz"])


def independent_table(rows: list[dict[str, Any]], tolerance: float) -> str:
    """check | numcheck's speedup [interval] | sustained | diff | burst | diff | SM clocks
    (reference / variant, MHz, during the sustained timings) | flag."""
    width = max((len(r["id"]) for r in rows), default=5)
    lines = [f"{'check':<{width}}  {'numcheck':>26}  {'sustained':>9}  {'diff':>7}  "
             f"{'burst':>8}  {'diff':>7}  {'SM ref/var MHz':>14}"]
    flags = {"ok": "", "conservative": f"  numcheck lower by over {tolerance:.0%}",
             "throttled": "  sustained load lowers the variant's clock (burst agrees)",
             "off": "  OFF"}
    for r in rows:
        interval = f"{r['numcheck']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]"
        burst = (f"{r['burst']:>8.3f}  {r['burst_diff']:>+7.1%}" if "burst" in r
                 else f"{'-':>8}  {'-':>7}")
        ref, var = r.get("clock_ref"), r.get("clock_var")
        clocks = (f"{ref['median_mhz']:.0f}/{var['median_mhz']:.0f}" if ref and var else "-")
        if var and var["reasons"]:
            clocks += " " + ",".join(var["reasons"])
        lines.append(f"{r['id']:<{width}}  {interval:>26}  {r['independent']:>9.3f}  "
                     f"{r['diff']:>+7.1%}  {burst}  {clocks:>14}{flags[judge(r, tolerance)]}")
    return "\n".join(lines)


# -- optional steps: the evidence runs -------------------------------------------------------
#
# Each is one command (its argv built from the options and the work folder), a time limit,
# and a judge that reads what the command wrote. They run only when named in --steps.

Judge = Callable[["Run", "Extra", argparse.Namespace, int, str], tuple[bool, str]]


@dataclass(frozen=True)
class Extra:
    """An optional step: what it does, its time limit, its command and how it is judged."""

    name: str
    what: str
    limit_s: float
    command: Callable[[argparse.Namespace, Path], list[str]]
    judge: Judge
    #: where it runs, relative to the repository root
    cwd: str = ""
    #: it writes OUT=<work> (benchmarks that take their folder from the environment)
    out_env: bool = False
    #: a file of the tree the command rewrites (relative to the repository root): what it
    #: wrote is kept in the work folder, and the tree gets its own file back
    rewrites: str = ""


def _pytest(*args: str) -> list[str]:
    return [PY, "-m", "pytest", "-p", "no:cacheprovider", *args]


def _bench(module: str, *args: str) -> list[str]:
    """``python -m benchmarks.<module>`` (``<group>.<script>``), from the repository root."""
    return [PY, "-m", f"benchmarks.{module}", *args]


def _judge_rc(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
              text: str) -> tuple[bool, str]:
    """Ok when the command exits 0; its last summary line (pytest's, or the last line)."""
    last = next((ln for ln in reversed(text.splitlines())
                 if re.search(r"\d+ (passed|failed|error)", ln)), _tail(text, 1))
    return rc == 0, f"rc {rc}: {last.strip('= ')}"


def _judge_report(name: str) -> Judge:
    """A pytest run with a JSON report: rc 0 and no failed or erroring record."""
    def judge(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
              text: str) -> tuple[bool, str]:
        return report_verdict(run.work / name, rc, text)
    return judge


def _judge_written(name: str, then: Judge | None = None) -> Judge:
    """A measurement: rc 0 and its file written (``name`` may be a glob pattern under the
    work folder); ``then`` judges the file further."""
    def judge(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
              text: str) -> tuple[bool, str]:
        found = sorted(run.work.glob(name))
        if not found:
            return False, f"rc {rc}, {name} not written: {_tail(text)}"
        if then is not None:
            ok, detail = then(run, extra, opts, rc, text)
            return rc == 0 and ok, detail
        return rc == 0, f"rc {rc}: wrote {', '.join(str(f.relative_to(run.work)) for f in found)}"
    return judge


def _heldout(name: str) -> Judge:
    """Held-out measurements judged against the case files: ``python -m numcheck.heldout``
    lists every value over its budget and exits 1 if any."""
    def judge(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
              text: str) -> tuple[bool, str]:
        hrc, htext, _ = run.sh(f"{extra.name}-judged", [PY, "-m", "numcheck.heldout",
                                                       str(run.work / name)], 120)
        return hrc == 0, f"numcheck.heldout rc {hrc}: {_tail(htext, 1)}"
    return _judge_written(name, judge)


def _judge_false_failures(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                          text: str) -> tuple[bool, str]:
    rows = json.loads((run.work / "false-failures.json").read_text()).get("false_failures", [])
    shipped = [r for r in rows if not r["honest"]]
    honest = [r for r in rows if r["honest"]]
    bad = [r for r in rows if not r["passed"]]
    detail = (f"false failures: shipped {sum(not r['passed'] for r in shipped)} of "
              f"{len(shipped)}, honest families {sum(not r['passed'] for r in honest)} of "
              f"{len(honest)}")
    if bad:
        detail += "; " + ", ".join(f"{r['case']}::{r['variant']} seed {r['seed']}"
                                   for r in bad[:3])
    return bool(rows) and not bad, detail


def _judge_catch(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                 text: str) -> tuple[bool, str]:
    """Every planted bug whose own error is at least 2x the honest family's worst caught
    (docs/reliability.md's target); the others are reported."""
    data = json.loads((run.work / "catch.json").read_text())
    shipped, fresh = data.get("shipped_catch", []), data.get("fresh_catch", [])
    big = [r for r in fresh if r.get("own_error", 0) >= 2]
    missed = [r for r in big if not r["caught"]]
    detail = (f"shipped cases {sum(r['caught'] for r in shipped)}/{len(shipped)}, fresh seeds "
              f"{sum(r['caught'] for r in fresh)}/{len(fresh)}, own error >= 2x "
              f"{len(big) - len(missed)}/{len(big)}")
    if missed:
        detail += "; missed: " + ", ".join(f"{r['bug']} seed {r['seed']}" for r in missed[:3])
    return bool(shipped or fresh) and not missed, detail


def _judge_honest(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                  text: str) -> tuple[bool, str]:
    """The families' worst per (op, class, output), with the member behind it, printed."""
    print(honest_table(json.loads((run.work / "honest-calibration.json").read_text())))
    return True, f"rc {rc}: honest-calibration.json ({_tail(text, 1)})"


#: The shipped sweeps and distribution cases (``-k`` of benchmarks/numerics/many_seeds.py).
COVERAGE_CASES = ("indexer-short,indexer-decode-l,indexer-decode-rows,indexer-mtp2-l,mhc-tokens,"
                  "llm,subnormal,near-max,zero-rows")


def _judge_many_seeds(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                      text: str) -> tuple[bool, str]:
    """``many_seeds report`` over what the step wrote: ok when no shipped variant failed
    and no invariance key broke; the detail says how many seeds the points got."""
    rrc, table, _ = run.sh("many-seeds-report", _bench(
        "numerics.many_seeds", "report", str(run.work / "many-seeds.jsonl")), 120)
    print(table.strip())
    seeds = next((ln for ln in table.splitlines() if ln.startswith("# seeds")), "")
    return rrc == 0, f"report rc {rrc}: {_tail(table, 1)} ({seeds.lstrip('# ')})"


def _judge_invariance(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                      text: str) -> tuple[bool, str]:
    """The measured table printed (it is in the step's log too); ok when no key the case
    files turn on fails here (the script exits 1 then)."""
    data = json.loads((run.work / "invariance.json").read_text())
    print(invariance_table(data))
    rows = data.get("rows", [])
    det = sum(1 for r in rows if "error" not in r and not r["runs_differing"])
    bat = sum(1 for r in rows if "error" not in r and r.get("requests_differing") == 0)
    broken = [f"{r['case']}::{r['variant']}" for r in rows if r.get("broken")]
    return rc == 0, (f"rc {rc}: {len(rows)} checks, {det} deterministic, {bat} batch-invariant "
                     f"({data.get('env', {}).get('seconds')} s); keys on that fail here: "
                     f"{', '.join(broken) or 'none'}")


def invariance_table(data: dict[str, Any]) -> str:
    """One line per (case, variant): runs and requests that differed, the case keys."""
    lines = [f"{'case':44} {'variant':15} {'runs differing':>14} {'requests differing':>18}  "
             "keys (det, batch)"]
    for r in data.get("rows", []):
        if "error" in r:
            lines.append(f"{r['case']:44} {r['variant']:15} ERROR {r['error'][:80]}")
            continue
        runs = f"{r['runs_differing']}/{(r['runs'] or 1) - 1}"
        reqs = ("-" if r.get("requests") is None
                else f"{r['requests_differing']}/{len(r['requests'])}")
        lines.append(f"{r['case']:44} {r['variant']:15} {runs:>14} {reqs:>18}  "
                     f"{r['deterministic_key']}, {r['batch_invariant_key']}")
    return "\n".join(lines)


def honest_table(data: dict[str, Any]) -> str:
    """Per op, class and output: the family's worst max_err_ratio and calc_diff over the
    cases and seeds of a calibration file, and the member behind each."""
    worst: dict[tuple[str, str, str, str], tuple[float, str]] = {}
    for key, families in data.get("cases", {}).items():
        op = key.split("::")[0]
        for prec, res in families.items():
            for member, outputs in res.get("by_variant", {}).items():
                for output, metrics in outputs.items():
                    for metric in ("max_err_ratio", "calc_diff"):
                        if metric in metrics and metrics[metric] > worst.get(
                                (op, prec, output, metric), (-1.0, ""))[0]:
                            worst[(op, prec, output, metric)] = (metrics[metric], member)
    lines = ["| op | class | output | worst max_err_ratio (member) | worst calc_diff (member) |",
             "|---|---|---|---|---|"]
    for op, prec, output in sorted({k[:3] for k in worst}):
        cells = [f"{v:.3g} ({m})" for v, m in (worst.get((op, prec, output, metric),
                                                         (float("nan"), "-"))
                                               for metric in ("max_err_ratio", "calc_diff"))]
        lines.append(f"| {op} | {prec} | {output} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def _judge_xdist(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                 text: str) -> tuple[bool, str]:
    """The gate with one xdist worker per GPU: it passes, and where the serial gate ran,
    the same records (but for where each ran) and no drift between the two."""
    ok, detail = _judge_report("gate-xdist.json")(run, extra, opts, rc, text)
    serial = run.work / "gate.json"
    if not ok or not serial.exists():
        return ok, detail + ("" if serial.exists() else "; no serial gate to compare with")

    xdist = run.work / "gate-xdist.json"
    # numcheck's own rule for "the same check with the same result": merge refuses (exit 2)
    # two reports that hold one check with different results, where and how long its first
    # call ran aside (numcheck.history.merge.WHERE_FIELDS), naming the first difference.
    # In the work folder: its message names the files by their short names.
    mrc, mtext, _ = run.sh("xdist-merge", [PY, "-m", "numcheck", "merge", serial.name,
                                           xdist.name, "-o", "gate-both.json"], 60,
                           cwd=run.work)
    same = mrc in (0, 1)  # 1: the merged gate failed, which the serial gate step reports
    crc, _, _ = run.sh("xdist-compare", [PY, "-m", "numcheck", "compare", str(serial),
                                         str(xdist)], 60)
    why = "" if same else f" ({_tail(mtext, 1)})"
    return same and crc == 0, f"{detail}; records as serial: {same}{why}; compare rc {crc}"


def _judge_html(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                text: str) -> tuple[bool, str]:
    page, report = run.work / "report.html", run.work / "html-report.json"
    if not page.exists() or not report.exists():
        return False, f"rc {rc}, no page or report: {_tail(text)}"
    records = json.loads(report.read_text())["records"]
    html = page.read_text()
    missing = [r["id"] for r in records if r["id"] not in html]
    return not missing, (f"rc {rc}: {len(records)} checks, page {len(html) / 1e6:.2f} MB, "
                         f"{html.count('<svg')} plots" + (f"; not on it: {missing[:3]}"
                                                          if missing else ""))


def _judge_isolation(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                     text: str) -> tuple[bool, str]:
    """benchmarks/reliability/isolation_runs.py: ok when it exits 0 (every check's verdict in
    every mode the expected one); its table printed, the verdicts that are off named."""
    path = run.work / "isolation" / "isolation_runs.json"
    if not path.is_file():
        return False, f"rc {rc}, isolation/isolation_runs.json not written: {_tail(text)}"
    data = json.loads(path.read_text())
    print((run.work / "isolation" / "isolation_runs.txt").read_text().strip())
    rows = [row for r in data["runs"] for row in r["rows"]]
    off = [f"{row['mode']} {row['check']}: {row['verdict']} (want {row['expected']})"
           for row in rows if not row["ok"]]
    modes = ", ".join(f"{r['mode']} {r['wall_s']:.0f}s" for r in data["runs"])
    detail = f"rc {rc}: {len(rows)} verdicts ({modes}), {len(off)} off"
    if off:
        detail += "; " + "; ".join(off[:3])
    if data.get("notes"):
        detail += "; " + "; ".join(data["notes"])
    return rc == 0 and not off, detail


def _judge_bench(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                 text: str) -> tuple[bool, str]:
    ok, detail = _judge_report("bench-report.json")(run, extra, opts, rc, text)
    if (run.work / "bench.json").exists():
        _, table, _ = run.sh("bench-table",
                             _bench("speed.perf_table", str(run.work / "bench.json")), 60)
        print(table.strip())
    return ok, detail


def _judge_speed_calibration(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                             text: str) -> tuple[bool, str]:
    proposals = text[text.find("numcheck calibrate: suggested speedup_min"):] \
        if "suggested speedup_min" in text else ""
    print(proposals.strip())
    return rc == 0 and bool(proposals), (f"rc {rc}: proposals in {extra.name}.txt and "
                                         "perf.toml (the case file with them written in)")


def _judge_speed_runs(tag: str) -> Judge:
    def judge(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
              text: str) -> tuple[bool, str]:
        runs_file = run.work / "speed" / f"{tag}-runs.json"
        lines = json.loads(runs_file.read_text()) if runs_file.exists() else []
        if not lines:
            return False, f"rc {rc}, no run finished: {_tail(text)}"
        n = len(lines)
        clean = sum(not x["failed"] for x in lines)
        slowed = sum(x["slowed_caught"] for x in lines)
        trip = sum(x["roundtrip"] == "xfail" for x in lines)
        detail = (f"{n} runs: 0 failed checks in {clean}/{n}, slowed variant caught "
                  f"{slowed}/{n}, round trip caught {trip}/{n}")
        if tag == "xdist":
            serial = next((p for p in (run.work / "speed" / "evidence-1.json",
                                       run.work / "perf-1.json") if p.exists()), None)
            if serial is None:
                return False, detail + "; no serial run to compare with (speed-evidence first)"
            _, table, _ = run.sh("speed-xdist-compare", _bench(
                "speed.speed_gate", "xdist", str(serial), str(run.work / "speed" / "xdist-1.json")),
                60)
            print(table.strip())
            detail += "; " + _tail(table, 1)
        else:
            _, table, _ = run.sh(f"{extra.name}-table", _bench(
                "speed.speed_gate", "table", str(run.work / "speed"), "--tag", tag), 60)
            print(table.strip())
        return clean == slowed == trip == n, detail
    return judge


def _seeds(opts: argparse.Namespace, held_out: bool = False) -> list[str]:
    if held_out:
        return ["--seeds", str(opts.heldout_seeds), "--first-seed", str(opts.heldout_first_seed)]
    return ["--seeds", str(opts.seeds)]


def _select(opts: argparse.Namespace) -> list[str]:
    return ["-k", opts.select] if opts.select else []


EXTRAS: tuple[Extra, ...] = (
    Extra("calibrate", "every variant on calibration seeds 1000.. (--seeds), each against a "
          "fresh CPU reference: python -m numcheck.calibrate", 150,
          lambda o, w: [PY, "-m", "numcheck.calibrate", "--device", o.device, *_seeds(o),
                        "--first-seed", "1000", "--json", str(w / "calibration.json")],
          _judge_written("calibration.json")),
    Extra("calibrate-heldout", "every variant on held-out seeds (--heldout-first-seed, "
          "--heldout-seeds), judged by python -m numcheck.heldout", 100,
          lambda o, w: [PY, "-m", "numcheck.calibrate", "--device", o.device,
                        *_seeds(o, held_out=True), "--json",
                        str(w / "calibration-heldout.json")],
          _heldout("calibration-heldout.json")),
    Extra("honest", "the honest families (tests/honest.py, the derived GEMM members, cuBLAS and "
          "Triton on CUDA) on calibration seeds 4000.. (--seeds; -k --select), mHC first", 270,
          lambda o, w: _bench("numerics.honest_calibration", "--device", o.device, "--ops",
                              "mhc_pre", "indexer", *_seeds(o), "--first-seed", "4000",
                              *_select(o), "--json", str(w / "honest-calibration.json")),
          _judge_written("honest-calibration.json", _judge_honest)),
    Extra("honest-heldout", "the honest families on held-out seeds, judged by python -m "
          "numcheck.heldout against the case files", 130,
          lambda o, w: _bench("numerics.honest_calibration", "--device", o.device, "--ops",
                              "mhc_pre", "indexer", *_seeds(o, held_out=True), *_select(o),
                              "--json", str(w / "honest-heldout.json")),
          _heldout("honest-heldout.json")),
    Extra("false-fail", "the two-sided self-test's false failures: shipped variants and honest "
          "families on held-out seeds, every case", 200,
          lambda o, w: _bench("reliability.reliability_report", "--device", o.device,
                              *_seeds(o, held_out=True), "--skip", "shipped", "fresh",
                              "--json", str(w / "false-failures.json")),
          _judge_written("false-failures.json", _judge_false_failures)),
    Extra("catch", "every planted bug on the shipped goldens and --catch-seeds fresh seeds, with "
          "its own error against its class's honest family", 100,
          lambda o, w: _bench("reliability.reliability_report", "--device", o.device, "--seeds",
                              str(o.catch_seeds), "--first-seed", str(o.heldout_first_seed),
                              "--skip", "false", "--json", str(w / "catch.json")),
          _judge_written("catch.json", _judge_catch)),
    Extra("determinism", "the FP32 reference and every variant run 10 times: bit-identical?",
          60, lambda o, w: _bench("reliability.determinism", "--device", o.device, "--runs", "10",
                                  "--json", str(w / "determinism.json")),
          _judge_written("determinism.json")),
    Extra("invariance", "determinism (10 runs) and batch invariance (every request alone, up "
          "to 64 a case) of the reference and every variant of every shipped case: the table, "
          "the keys it supports; off when a key the case files turn on fails "
          "(benchmarks/reliability/invariance.py)", 180,
          lambda o, w: _bench("reliability.invariance", "--device", o.device, "--runs", "10",
                              "--requests", "all", "--json", str(w / "invariance.json")),
          _judge_written("invariance.json", _judge_invariance)),
    Extra("many-seeds", "every sweep point and distribution case on --many-seeds fresh seeds "
          "from --many-first-seed, each variant on the GPU against a fresh CPU reference, with "
          "both invariance gates (benchmarks/numerics/many_seeds.py; it stops starting points at the "
          "step's limit and goes on from its file when run again; --select: other cases): "
          "off when a shipped variant fails or a case's invariance key does not hold", 540,
          lambda o, w: _bench("numerics.many_seeds", "run", "--device", o.device, "--out",
                              str(w / "many-seeds.jsonl"), "-k", o.select or COVERAGE_CASES,
                              "--seeds", str(o.many_seeds), "--first-seed",
                              str(o.many_first_seed), "--stop-after-s", "480"),
          _judge_written("many-seeds.jsonl", _judge_many_seeds)),
    Extra("xdist", "the gate with one pytest-xdist worker per GPU (at least 2), against the "
          "serial gate step's records and with python -m numcheck compare", 150,
          lambda o, w: _pytest("--numcheck", "--numcheck-device", o.device, "-q", "-n",
                               str(o.xdist_workers or _gpus()), "--numcheck-report",
                               str(w / "gate-xdist.json"), "--numcheck-markdown",
                               str(w / "gate-xdist.md"), "--junitxml", str(w / "junit.xml")),
          _judge_xdist),
    Extra("explain", "explain mode on two small cases: the cast ledger and kernel table", 60,
          lambda o, w: _pytest("--numcheck", "--numcheck-device", o.device, "--numcheck-explain",
                               "-q", "-k", "v4flash-t64 or v4flash-b2-l1k-contiguous"),
          _judge_rc),
    Extra("audit", "the kernel audit and cast ledger at production shapes "
          "(benchmarks/overhead/kernel_audit.py)", 120,
          lambda o, w: _bench("overhead.kernel_audit", "--device", o.device, "--out",
                              str(w / "audit")),
          _judge_written("audit/audit-*.json")),
    Extra("casts", "cast ratios, input passes and copy shares of the CPU-sized cases, every "
          "request at max_context (benchmarks/overhead/cast_ratios.py)", 90,
          lambda o, w: _bench("overhead.cast_ratios", "--device", o.device, "--full-context",
                              "--out", str(w / "casts")),
          _judge_written("casts/cast_ratios-*.json")),
    Extra("casts-perf", "the same for the perf cases at production shapes", 150,
          lambda o, w: _bench("overhead.cast_ratios", "--device", o.device, "--perf",
                              "--full-context", "--out", str(w / "casts-perf")),
          _judge_written("casts-perf/cast_ratios-*.json")),
    Extra("html", "the HTML report of a timed run of three cases, with plots and obtained files",
          120, lambda o, w: _pytest(
              "--numcheck", "--numcheck-device", o.device, "--numcheck-perf", "-q",
              "cases/indexer.toml::v4flash-b4-l2k", "cases/mhc.toml::v4pro-t32",
              "cases/perf.toml::perf-mhc-v4pro-t64-decode", "--numcheck-report",
              str(w / "html-report.json"), "--numcheck-html", str(w / "report.html"),
              "--numcheck-obtained", str(w / "obtained")),
          _judge_html),
    Extra("example", "examples/my_kernels' gate on CUDA (docs/extending.md's end state)", 60,
          lambda o, w: _pytest("--numcheck", "--numcheck-device", o.device, "-q"),
          _judge_rc, cwd="examples/my_kernels"),
    Extra("isolation", "crash isolation: examples/crashing_kernels' crashing, hanging, OOM and "
          "out-of-bounds variants serially, with -n 2 and (CUDA, compute-sanitizer found) "
          "under --numcheck-sanitize=memcheck, each check's verdict against the expected one "
          "(benchmarks/reliability/isolation_runs.py; on CUDA also the shipped fused mHC kernel "
          "under memcheck)", 300,
          lambda o, w: _bench("reliability.isolation_runs", "--device", o.device, "--out",
                              str(w / "isolation"), "--run-timeout-s", "150",
                              *(["--shipped"] if o.device == "cuda" else [])),
          _judge_isolation),
    Extra("bench", "the perf cases with pytest-benchmark's JSON and its table "
          "(benchmarks/speed/perf_table.py)", 250,
          lambda o, w: _pytest("--numcheck", "--numcheck-perf", "--numcheck-device", o.device,
                               "-rxXs", "cases/perf.toml", "--benchmark-json",
                               str(w / "bench.json"), "--numcheck-report",
                               str(w / "bench-report.json"),
                               "--benchmark-columns=median,iqr,min,max,rounds"),
          _judge_bench),
    Extra("fidelity", "numcheck's speedups against triton's do_bench and the profiler's kernel "
          "sums, 5 repeats (benchmarks/speed/fidelity.py)", 90,
          lambda o, w: _bench("speed.fidelity", "--repeats", "5", "--json",
                              str(w / "fidelity.json")),
          _judge_written("fidelity.json")),
    Extra("fused", "the fused Triton kernels at production shapes against the HBM floor "
          "(benchmarks/speed/fused_roofline.py)", 150,
          lambda o, w: _bench("speed.fused_roofline", "--device", o.device, "--budget-s", "110",
                              "--out", str(w)),
          _judge_written("fused_roofline.json")),
    Extra("folded", "bf16_folded against the rounding envelope on calibration seeds 4000.. "
          "(--seeds; benchmarks/numerics/folded_calibration.py)", 240,
          lambda o, w: _bench("numerics.folded_calibration", "4000", str(o.seeds),
                              str(w / "bf16-folded-calibration.json"), o.device),
          _judge_written("bf16-folded-calibration.json")),
    Extra("folded-heldout", "bf16_folded on held-out seeds, judged by python -m numcheck.heldout",
          120, lambda o, w: _bench("numerics.folded_calibration", str(o.heldout_first_seed),
                                   str(o.heldout_seeds), str(w / "bf16-folded-heldout.json"),
                                   o.device),
          _heldout("bf16-folded-heldout.json")),
    Extra("speed-calib", "speedup_min proposals from --speed-runs timings of every perf check "
          "(--numcheck-calibrate-speed), written into a copy of cases/perf.toml", 450,
          lambda o, w: _pytest("--numcheck", "--numcheck-perf", "--numcheck-device", o.device,
                               "-q", "cases/perf.toml",
                               f"--numcheck-calibrate-speed={o.speed_runs}",
                               "--numcheck-calibrate-json", str(w / "speed-runs.json"),
                               "--numcheck-calibrate-write"),
          _judge_speed_calibration, rewrites="cases/perf.toml"),
    Extra("speed-evidence", "--evidence-runs fresh runs of the perf suite with a ~5%-slowed "
          "variant (benchmarks/speed/slowed_variant.py): failed checks, slowed and round trip "
          "caught",
          545, lambda o, w: _bench("speed.speed_gate", "runs", str(w / "speed"), "--tag",
                                   "evidence", "--runs", str(o.evidence_runs), "--device",
                                   o.device, "--slowed-min", str(o.slowed_min), "--budget-s",
                                   "480"),
          _judge_speed_runs("evidence")),
    Extra("speed-xdist", "one run of that suite with -n 4 on one GPU, against a serial one "
          "(speed-evidence's first run): same verdicts, overlapping intervals, lock waits", 150,
          lambda o, w: _bench("speed.speed_gate", "runs", str(w / "speed"), "--tag", "xdist",
                              "--runs", "1", "-n", "4", "--device", o.device, "--slowed-min",
                              str(o.slowed_min)),
          _judge_speed_runs("xdist")),
    Extra("liger-install", "liger-kernel for examples/liger_mhc (--liger: a version or a "
          "carried wheel; pip install --no-deps)", 120,
          lambda o, w: [PY, "-m", "pip", "install", "-q", "--no-deps", o.liger], _judge_rc),
    Extra("liger", "examples/liger_mhc's gate on CUDA: liger-kernel's Triton mHC kernels, "
          "both cases, report and HTML page", 360,
          lambda o, w: _pytest("--numcheck", "--numcheck-device", o.device, "-rxs",
                               "--durations=12", "--numcheck-report", str(w / "liger.json"),
                               "--numcheck-html", str(w / "liger.html")),
          _judge_report("liger.json"), cwd="examples/liger_mhc"),
    Extra("liger-times", "liger-kernel's kernels per call, first call apart "
          "(benchmarks/speed/liger_mhc.py)", 100,
          lambda o, w: _bench("speed.liger_mhc", "--device", o.device, "--repeats", "20"),
          _judge_rc, cwd="examples/liger_mhc"),  # there: the example's package, liger_mhc
)



#: The case ids of cases/linear.toml and cases/fp8.toml, and the linear op's perf cases.
FP8_CASES = ("tiny-k384", "v3-q-a-decode-t8", "v3-o-decode-t8", "v3-expert-down-prefill-t64",
             "v3-q-a-prefill-t512", "v3-o-decode-t16", "fp8-v4flash-b2-l1k", "fp8-v4flash-t32")
FP8_PERF_CASES = ("perf-linear-v3-q-a-decode-t16", "perf-linear-v3-q-a-prefill-t4096",
                  "perf-linear-v3-o-decode-t64", "perf-linear-v3-expert-down-prefill-t2048")


def _fp8_seeds(opts: argparse.Namespace) -> list[str]:
    return ["--seeds", str(opts.fp8_seeds), "--first-seed", str(opts.fp8_first_seed)]


def _judge_fp8_families(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                        text: str) -> tuple[bool, str]:
    """The FP8 / FP4 families held to the shipped budgets on held-out seeds: every member
    passes (its GEMM results within their bound), or the step is off; the families' table
    and the budgets they suggest are printed (for cases whose CUDA budgets came from CPU
    proxies: cases/linear.toml says which)."""
    path = run.work / "fp8-families.json"
    data = json.loads(path.read_text())
    _, table, _ = run.sh("fp8-families-table",
                         _bench("numerics.fp8_families", "--table", str(path)), 60)
    _, suggested, _ = run.sh("fp8-families-suggest",
                             _bench("numerics.fp8_families", "--suggest", str(path)), 60)
    print(table.strip())
    print("suggested budgets (2x the families' worst on this device):")
    print(suggested.strip())
    heads = [r for fams in data["cases"].values() for r in fams.values()]
    checks = sum(r["checks"] for r in heads)
    # A known-bad variant's family (cases/fp8.toml's FP4 indexers, FP8 mHCs) fails with it.
    failed = [f"{f['member']} seed {f['seed']}" for r in heads if not r.get("expected")
              for f in r["failures"]]
    ratio = max((q["sim_ratio"] for r in heads for q in r["quant"].values()), default=0.0)
    errors = [e for r in heads for e in r["errors"]]
    detail = (f"rc {rc}: {len(data['cases'])} cases, {checks} checks, {len(failed)} failed, "
              f"worst GEMM bound ratio {ratio:.3g}, {len(errors)} errors")
    if failed:
        detail += "; failed: " + ", ".join(failed[:4])
    if errors:
        detail += "; " + errors[0][:120]
    return bool(checks) and not failed and not errors and ratio <= 1.0, detail


def _judge_fp8_catch(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                     text: str) -> tuple[bool, str]:
    """Every FP8 planted bug whose own error is at least 2x its family's worst caught, no
    honest member or alternative failed; the catch table printed."""
    data = json.loads((run.work / "fp8-catch.json").read_text())
    _, table, _ = run.sh("fp8-catch-table", _bench("reliability.fp8_catch", "--table",
                                                   str(run.work / "fp8-catch.json")), 60)
    print(table.strip())
    bugs, honest = data["bugs"], data["honest"]
    big = [r for r in bugs if r["own_error"] >= 2]
    missed = [r for r in big if not r["caught"]]
    failed = [r for r in honest if r["violations"]]
    detail = (f"rc {rc}: bugs caught {sum(r['caught'] for r in bugs)}/{len(bugs)}, own error "
              f">= 2x {len(big) - len(missed)}/{len(big)}; honest failed {len(failed)}/"
              f"{len(honest)}")
    if not data.get("meta", {}).get("finished"):
        detail += f"; stopped after {len({r.get('seed') for r in bugs})} seeds"
    return bool(bugs) and not missed and not failed, detail


EXTRAS += (
    Extra("fp8-real", "the FP8 / FP4 cases on CUDA (cases/linear.toml: DeepSeek V3's real "
          "projections at decode and prefill token counts, torchao's GEMM where installed; "
          "cases/fp8.toml) with both references in the report", 150,
          lambda o, w: _pytest("--numcheck", "--numcheck-device", o.device, "-q", "-rxXs",
                               "cases/linear.toml", "cases/fp8.toml", "--numcheck-report",
                               str(w / "fp8-real.json"), "--numcheck-markdown",
                               str(w / "fp8-real.md")),
          _judge_report("fp8-real.json")),
    Extra("fp8-families", "the FP8 / FP4 honest families (the shipped low-precision variants "
          "and their schemes' members: emulated, dequantized, and on CUDA _scaled_mm with fast "
          "accumulation on and off, Triton tl.dot on e4m3, the block-scaled Triton kernel, "
          "torchao where installed) on held-out seeds (--fp8-seeds from --fp8-first-seed), "
          "held to the shipped budgets; prints the budgets this device suggests", 360,
          lambda o, w: _bench("numerics.fp8_families", "--device", o.device, *_fp8_seeds(o),
                              *_select(o), "--json",
                              str(w / "fp8-families.json")),
          _judge_written("fp8-families.json", _judge_fp8_families)),
    Extra("fp8-catch", "the FP8 planted bugs (tests/quant_planted.py: issue 35's kinds) on "
          "--fp8-seeds fresh seeds, each bug's own error against its family's worst, with "
          "the honest members and alternatives on the same seeds (its JSON written after each "
          "seed)", 330,
          lambda o, w: _bench("reliability.fp8_catch", "--device", o.device, *_fp8_seeds(o),
                              "--json", str(w / "fp8-catch.json")),
          _judge_written("fp8-catch.json", _judge_fp8_catch)),
    Extra("fp8-casts", "cast bytes and input passes of the FP8 / FP4 cases on CUDA "
          "(benchmarks/overhead/cast_ratios.py): the limits cases/linear.toml and cases/fp8.toml "
          "set from the CPU's ledger, measured on the GPU's code path", 120,
          lambda o, w: _bench("overhead.cast_ratios", "--device", o.device, "--full-context",
                              "--only", ",".join(FP8_CASES), "--out", str(w / "fp8-casts")),
          _judge_written("fp8-casts/cast_ratios-*.json")),
    Extra("fp8-casts-perf", "the same for the linear op's perf cases at DeepSeek V3's real "
          "shapes", 120,
          lambda o, w: _bench("overhead.cast_ratios", "--device", o.device, "--perf",
                              "--full-context", "--only", ",".join(FP8_PERF_CASES), "--out",
                              str(w / "fp8-casts-perf")),
          _judge_written("fp8-casts-perf/cast_ratios-*.json")),
    Extra("fp8-accumulation", "cuBLAS's FP8 accumulation (torch._scaled_mm, fast accumulation "
          "on and off) and Triton's tl.dot on e4m3 against numcheck's model "
          "(benchmarks/numerics/fp8_accumulation.py, one seed)", 150,
          lambda o, w: _bench("numerics.fp8_accumulation", "--device", o.device, "--seeds", "1"),
          _judge_written("fp8_accumulation.json"), out_env=True),
)
EXTRA_NAMES = tuple(e.name for e in EXTRAS)


def _judge_onboard(run: Run, extra: Extra, opts: argparse.Namespace, rc: int,
                   text: str) -> tuple[bool, str]:
    """``python -m numcheck onboard``: ok when it exits 0 (every part ran, no budget
    refused); what it wrote, per part, from its JSON; the patch's name to apply elsewhere."""
    found = sorted(run.work.glob("onboard-*.json"))
    if not found:
        return False, f"rc {rc}, no onboard-<class>.json written: {_tail(text)}"
    data = json.loads(found[-1].read_text())
    speed, inv, num = (data.get(k) or {} for k in ("speed", "invariance", "numerics"))
    detail = (f"rc {rc}: class {data['class']} ({data['device_name']}): speed "
              f"{len(speed.get('written', []))} value(s) written; invariance named in "
              f"{len(inv.get('named', []))} key(s); numerics {num.get('checks', 0)} honest "
              f"checks, {len(num.get('failed', []))} failed, {num.get('budgets_changed', 0)} "
              f"budgets changed; apply: git apply {found[-1].with_suffix('.patch').name}")
    for line in speed.get("written", []):
        print(f"  speed: {line}")
    return rc == 0, detail


#: Onboarding this GPU model (numcheck/calibrate/onboard.py): run right after install, so the steps
#: after it in the same command (gate, perf) hold the machine to the values it wrote.
ONBOARD = Extra(
    "onboard", "python -m numcheck onboard: this GPU model's speed thresholds (--onboard-runs "
    "timings), determinism and batch invariance, and its FP8 / FP4 families on "
    "--onboard-seeds held-out seeds, written into the tree's case files; the patch, JSON and "
    "log in the work folder", 540,
    lambda o, w: [PY, "-m", "numcheck", "onboard", "--device", o.device, "--out", str(w),
                  "--speed-runs", str(o.onboard_runs), "--seeds", str(o.onboard_seeds),
                  *(["-k", o.select] if o.select else [])],
    _judge_onboard)


def _gpus() -> int:
    """One worker per GPU, at least two (one GPU: both pinned to it)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
        return max(2, len([ln for ln in out.stdout.splitlines() if ln.startswith("GPU")]))
    except OSError:
        return 2


def step_extra(run: Run, extra: Extra, opts: argparse.Namespace) -> None:
    """Run one optional step's command within its limit and the run's budget; judge it."""
    if run.left() < 30:
        run.record(extra.name, False, 0, f"not started: {run.left():.0f} s left in the budget")
        return
    rewritten = ROOT / extra.rewrites if extra.rewrites else None
    backup = rewritten.read_bytes() if rewritten is not None else b""
    try:
        rc, text, s = run.sh(extra.name, extra.command(opts, run.work),
                             min(extra.limit_s, run.left()), cwd=ROOT / extra.cwd,
                             env={"OUT": str(run.work)} if extra.out_env else None)
    finally:
        if rewritten is not None:
            shutil.copyfile(rewritten, run.work / rewritten.name)
            rewritten.write_bytes(backup)
    try:
        ok, detail = extra.judge(run, extra, opts, rc, text)
    except (OSError, ValueError, KeyError) as exc:  # a file half written at a time limit
        ok, detail = False, f"rc {rc}: cannot read what it wrote ({exc!r})"
    run.record(extra.name, ok, s, detail)


def list_steps() -> str:
    """The step names and what each does, defaults first."""
    lines = ["default steps (in this order): " + ", ".join(STEPS), "optional steps:"]
    lines += [f"  {e.name:<18} {e.what} (limit {e.limit_s:.0f} s)" for e in (ONBOARD, *EXTRAS)]
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
    ap = build_parser()
    args = ap.parse_args(argv)
    return run_steps(ap, args)


def build_parser() -> argparse.ArgumentParser:
    """The command line: the default run's options, then the optional steps'."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/numcheck-out")))
    ap.add_argument("--steps", default=",".join(STEPS),
                    help=f"comma-separated; they run in this order: {','.join(ORDER)}, then "
                    f"the optional steps in --list's order")
    ap.add_argument("--list", action="store_true", help="print the steps and exit")
    ap.add_argument("--perf-runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=520.0)
    ap.add_argument("--tolerance", type=float, default=0.03)
    extra = ap.add_argument_group("optional steps")
    extra.add_argument("--device", default="cuda",
                       help="where the optional steps run (cpu tries their plumbing)")
    extra.add_argument("--seeds", type=int, default=20, help="calibration seeds")
    extra.add_argument("--heldout-first-seed", type=int, default=11000,
                       help="first held-out seed (the catch's fresh seeds start there too)")
    extra.add_argument("--heldout-seeds", type=int, default=10)
    extra.add_argument("--catch-seeds", type=int, default=3)
    extra.add_argument("--many-seeds", type=int, default=50,
                       help="many-seeds: fresh seeds per sweep point and distribution case")
    extra.add_argument("--many-first-seed", type=int, default=30000)
    extra.add_argument("--select", default="",
                       help="-k for the honest-family steps: a case-id substring "
                       "(fp8-families: several, comma-separated)")
    extra.add_argument("--xdist-workers", type=int, default=0,
                       help="xdist step's workers (default: one per GPU, at least 2)")
    extra.add_argument("--speed-runs", type=int, default=5, help="speed-calib's timings")
    extra.add_argument("--evidence-runs", type=int, default=10, help="speed-evidence's runs")
    extra.add_argument("--slowed-min", type=float, default=1.08,
                       help="the slowed variant's threshold (bf16 passes it, slowed fails)")
    extra.add_argument("--liger", default="liger-kernel==0.8.5",
                       help="liger-install's requirement or wheel")
    extra.add_argument("--fp8-seeds", type=int, default=10,
                       help="held-out seeds of the fp8-families and fp8-catch steps")
    extra.add_argument("--fp8-first-seed", type=int, default=5000)
    extra.add_argument("--onboard-runs", type=int, default=3,
                       help="onboard's timings of each perf check")
    extra.add_argument("--onboard-seeds", type=int, default=2,
                       help="onboard's held-out seeds of the FP8 / FP4 families")
    return ap


def run_steps(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the steps ``args`` names; 0 when every one was ok."""
    if args.list:
        print(list_steps())
        return 0
    steps = [s for s in args.steps.split(",") if s]
    known = (*STEPS, ONBOARD.name, *EXTRA_NAMES)
    unknown = set(steps) - set(known)
    if unknown:
        ap.error(f"unknown steps {sorted(unknown)}; known: {', '.join(known)}")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "regression"
    work.mkdir(exist_ok=True)
    run = Run(args.out, work, args.budget_s)
    perf_reports: list[Path] = []
    for name in ORDER:
        if name not in steps:
            continue
        if name == "env":
            step_env(run)
        elif name == "install":
            step_install(run)
        elif name == ONBOARD.name:
            step_extra(run, ONBOARD, args)
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
    for spec in EXTRAS:
        if spec.name in steps:
            step_extra(run, spec, args)
    table = summary_table(run.steps, time.monotonic() - run.start)
    (work / "summary.txt").write_text(table + "\n")
    (args.out / "summary.txt").write_text(table + "\n")
    run.pack()
    print()
    print(table)
    return 0 if run.steps and all(s.ok for s in run.steps) else 1


if __name__ == "__main__":
    raise SystemExit(main())
