"""Crash isolation, end to end: examples/crashing_kernels run serially, under ``-n 2`` and
under compute-sanitizer, each check's verdict against the one it must get.

    python3 -m benchmarks.reliability.isolation_runs --out DIR [--device cpu|cuda] \
        [--modes serial,xdist,memcheck]
        [--shipped] [--run-timeout-s 240]

Each mode is one ``pytest --numcheck --numcheck-device DEV --numcheck-report R.json`` in
examples/crashing_kernels (README.md there says what each variant does):

- ``serial``: every check of the example, one pytest process (its checks in a worker
  process, restarted after each crash: ``--numcheck-isolate=process``, the default);
- ``xdist``: the same with ``-n 2``;
- ``memcheck`` (CUDA only, where ``compute-sanitizer`` is on PATH or in /usr/local/cuda/bin):
  ``--numcheck-sanitize=memcheck`` on the ``oob_masked_read`` and ``honest_triton`` checks,
  with a time limit of 180 s per check (the sanitizer slows CUDA's start and every kernel);
  with ``--shipped`` also numcheck's own fused Triton mHC kernel,
  ``cases/mhc.toml::v4flash-t64::fused[cuda]``, from the repository root.

Every check's verdict is read from its record in the mode's JSON report: ``PASS``, ``FAIL``,
``XFAIL``, ``SKIP``, the error kind of an ``error`` record (``CRASH``, ``TIMEOUT``, ``OOM``,
``SANITIZER``; another kind reads ``ERROR:<kind>``), or ``MISSING`` when the report has no
record of it (a pytest process that died takes its report with it). Each error verdict must
also be announced by its message's first line, ``numcheck <KIND> <check id>``, in pytest's
output. Expected: the honest variants (``fp32``, ``honest``, ``honest_triton``) PASS in
every mode; ``exits``, ``segfault``, ``device_assert``, ``illegal_address`` CRASH; ``hangs``
TIMEOUT; ``oom`` OOM; ``oob_masked_read`` PASS (its outputs are exact) except under memcheck,
which flags its read past the end of x: SANITIZER. On the CPU the CUDA-only variants SKIP.

Prints the table (check x mode: verdict, expected, ok/OFF) and writes it with the runs' logs,
reports and ``isolation_runs.json`` into DIR. Exits 1 when any verdict differs from its
expectation, or a mode's pytest did not end within ``--run-timeout-s``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "crashing_kernels"
CASE_FILE = "checks/cases/row_scale.toml"
CASE = "r8-c64"
OP = "row_scale"
MODES = ("serial", "xdist", "memcheck")
#: The error kinds of a check that got no verdict because its worker process failed it.
ERROR_KINDS = ("CRASH", "TIMEOUT", "OOM", "SANITIZER")
#: Where the shipped fused kernel runs under memcheck with --shipped (from the repo root).
SHIPPED = ("cases/mhc.toml::v4flash-t64::fused", "mhc_pre::v4flash-t64::fused")
#: Per-check limits under the sanitizer: CUDA starts and every kernel runs many times slower.
SANITIZED_TIMEOUT_S = 180

#: Each variant's verdict per device where it runs in the plain modes (serial, -n 2).
PLAIN: dict[str, dict[str, str]] = {
    "fp32": {"cpu": "PASS", "cuda": "PASS"},
    "exits": {"cpu": "CRASH", "cuda": "CRASH"},
    "segfault": {"cpu": "CRASH", "cuda": "CRASH"},
    "hangs": {"cpu": "TIMEOUT", "cuda": "TIMEOUT"},
    "oom": {"cpu": "OOM", "cuda": "OOM"},
    "honest": {"cpu": "PASS", "cuda": "PASS"},
    "device_assert": {"cpu": "SKIP", "cuda": "CRASH"},
    "illegal_address": {"cpu": "SKIP", "cuda": "CRASH"},
    "honest_triton": {"cpu": "SKIP", "cuda": "PASS"},
    "oob_masked_read": {"cpu": "SKIP", "cuda": "PASS"},
}
#: Under --numcheck-sanitize=memcheck (CUDA): the checks it selects and their verdicts.
SANITIZED = {"honest_triton": "PASS", "oob_masked_read": "SANITIZER"}


@dataclass
class Mode:
    """One pytest run: its name, arguments, folder and the verdict each check must get."""

    name: str
    args: list[str]
    cwd: Path
    expected: dict[str, str]  # check id -> verdict


def check_id(variant: str, device: str) -> str:
    return f"{OP}::{CASE}::{variant}[{device}]"


def find_sanitizer() -> str | None:
    """compute-sanitizer on PATH, or CUDA's default install folder."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/compute-sanitizer")
    return str(default) if default.is_file() else None


def default_device() -> str:
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def plan(device: str, modes: list[str], shipped: bool,
         sanitizer: str | None) -> tuple[list[Mode], list[str]]:
    """The modes to run on ``device`` and a note for each mode left out (and why)."""
    common = ["--numcheck", "--numcheck-device", device, "-p", "no:cacheprovider", "-q",
              "-rfEs"]
    plain = {check_id(v, device): by_device[device] for v, by_device in PLAIN.items()}
    out: list[Mode] = []
    notes: list[str] = []
    for name in modes:
        if name == "serial":
            out.append(Mode(name, common, EXAMPLE, plain))
        elif name == "xdist":
            out.append(Mode(name, [*common, "-n", "2"], EXAMPLE, plain))
        elif device != "cuda":
            notes.append(f"{name}: not run: compute-sanitizer checks CUDA kernels only "
                         f"(--device {device})")
        elif sanitizer is None:
            notes.append(f"{name}: not run: compute-sanitizer is neither on PATH nor in "
                         "/usr/local/cuda/bin (install the CUDA toolkit's sanitizer)")
        else:
            limits = ["--numcheck-sanitize=memcheck",
                      "--numcheck-timeout", str(SANITIZED_TIMEOUT_S),
                      "--numcheck-timeout-first-call", str(SANITIZED_TIMEOUT_S)]
            out.append(Mode(name, [*common, *limits,
                                   *(f"{CASE_FILE}::{CASE}::{v}[cuda]" for v in SANITIZED)],
                            EXAMPLE, {check_id(v, "cuda"): w for v, w in SANITIZED.items()}))
            if shipped:
                out.append(Mode(f"{name}-shipped", [*common, *limits, f"{SHIPPED[0]}[cuda]"],
                                ROOT, {f"{SHIPPED[1]}[cuda]": "PASS"}))
    return out, notes


def verdict(record: dict[str, Any]) -> str:
    """A report record's verdict, as the table shows it."""
    status = str(record.get("status", "")).lower()
    if status == "error":
        # Exactly the isolated run's kinds: "crash" (lower case) is pytest-xdist's record of a
        # worker that died with its checks, which isolation exists to prevent.
        kind = str(record.get("error_kind") or "")
        return kind if kind in ERROR_KINDS else f"ERROR:{kind or '?'}"
    return status.upper() or "?"


def announced(text: str, kind: str, cid: str) -> bool:
    """Whether pytest's output holds the failure message's first line for this check."""
    return f"numcheck {kind} {cid}" in text


def run_mode(mode: Mode, out: Path, timeout_s: float, env: dict[str, str]) -> dict[str, Any]:
    """Run one mode's pytest; its verdicts, each against its expectation."""
    report = out / f"{mode.name}.json"
    report.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "pytest", *mode.args, "--numcheck-report", str(report)]
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=mode.cwd, env=env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        rc, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        def _text(b: bytes | str | None) -> str:
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        rc, text = None, _text(exc.stdout) + _text(exc.stderr)
    wall = time.monotonic() - start
    (out / f"{mode.name}.log").write_text(f"$ (cd {mode.cwd}; {' '.join(argv)})\n{text}")
    records: dict[str, dict[str, Any]] = {}
    problem = ""
    if rc is None:
        problem = f"pytest did not end within {timeout_s:.0f} s"
    elif not report.is_file():
        problem = f"pytest (rc {rc}) wrote no report {report.name}: did it die?"
    else:
        try:
            records = {r["id"]: r for r in json.loads(report.read_text())["records"]}
        except (OSError, ValueError, KeyError) as exc:
            problem = f"cannot read {report}: {exc!r}"
    rows = []
    for cid, want in mode.expected.items():
        got = verdict(records[cid]) if cid in records else "MISSING"
        ok = got == want
        said = ""
        if ok and got in ERROR_KINDS and not announced(text, got, cid):
            ok, said = False, f"no line 'numcheck {got} {cid}' in pytest's output"
        rows.append({"check": cid, "mode": mode.name, "verdict": got, "expected": want,
                     "ok": ok, "reason": records.get(cid, {}).get("reason", ""),
                     "problem": said})
    # A check the report has and no expectation covers is a surprise too.
    for cid in sorted(set(records) - set(mode.expected)):
        rows.append({"check": cid, "mode": mode.name, "verdict": verdict(records[cid]),
                     "expected": "-", "ok": False, "reason": records[cid].get("reason", ""),
                     "problem": "not expected in this mode"})
    return {"mode": mode.name, "argv": argv, "cwd": str(mode.cwd), "rc": rc,
            "wall_s": round(wall, 1), "report": report.name if report.is_file() else None,
            "problem": problem, "rows": rows}


def table(runs: list[dict[str, Any]]) -> str:
    """check x mode: verdict, expected, ok/OFF."""
    modes = [r["mode"] for r in runs]
    checks: list[str] = []
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        for row in run["rows"]:
            if row["check"] not in checks:
                checks.append(row["check"])
            cells[(row["check"], run["mode"])] = row
    width = max([len(c) for c in checks] + [5])
    cell_w = 28

    def cell(row: dict[str, Any] | None) -> str:
        if row is None:
            return "-"
        flag = "ok" if row["ok"] else "OFF"
        return f"{row['verdict']:<10} {row['expected']:<10} {flag}"

    lines = [f"{'check':<{width}}  " + "  ".join(f"{m + ': got, want':<{cell_w}}" for m in modes)]
    for c in checks:
        lines.append(f"{c:<{width}}  " + "  ".join(f"{cell(cells.get((c, m))):<{cell_w}}"
                                                   for m in modes))
    lines = [ln.rstrip() for ln in lines]
    for run in runs:
        rc = "timed out" if run["rc"] is None else f"rc {run['rc']}"
        lines.append(f"{run['mode']}: {rc}, {run['wall_s']:.1f} s"
                     + (f"; {run['problem']}" if run["problem"] else ""))
    for run in runs:
        for row in run["rows"]:
            if not row["ok"]:
                why = row["problem"] or f"want {row['expected']}"
                lines.append(f"OFF {run['mode']} {row['check']}: {row['verdict']} ({why})"
                             + (f": {row['reason'][:200]}" if row["reason"] else ""))
    return "\n".join(lines)


def write(out: Path, device: str, sanitizer: str | None, runs: list[dict[str, Any]],
          notes: list[str], *, complete: bool) -> bool:
    """The table and the JSON so far, into ``out``; whether every verdict is the expected
    one (false while modes are still to run)."""
    ok = complete and bool(runs) and all(r["rc"] is not None and row["ok"]
                                         for r in runs for row in r["rows"])
    state = ("PASS" if ok else "FAIL") if complete else "unfinished"
    text = table(runs) + "".join(f"\n{n}" for n in notes)
    text += f"\nisolation runs ({device}): {state}\n"
    (out / "isolation_runs.txt").write_text(text)
    (out / "isolation_runs.json").write_text(json.dumps(
        {"device": device, "sanitizer": sanitizer, "ok": ok, "complete": complete,
         "notes": notes, "runs": runs}, indent=1) + "\n")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the table, JSON, logs")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None,
                    help="default: cuda when torch sees a GPU, else cpu")
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated, of {', '.join(MODES)} (default: all; memcheck "
                    "runs on CUDA only)")
    ap.add_argument("--shipped", action="store_true",
                    help="under memcheck, also numcheck's fused mHC kernel (v4flash-t64)")
    ap.add_argument("--run-timeout-s", type=float, default=240.0,
                    help="the most one mode's pytest may take")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        ap.error(f"unknown mode(s) {', '.join(unknown)}: use some of {', '.join(MODES)}")
    device = args.device or default_device()
    sanitizer = find_sanitizer() if device == "cuda" else None
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("NUMCHECK_ISOLATE", None)  # the default, process isolation, is what is measured
    for key in [k for k in env if k.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))]:
        del env[key]  # started from a test under xdist: the runs are not its workers
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if sanitizer is not None:  # numcheck finds it on PATH
        env["PATH"] = os.pathsep.join((str(Path(sanitizer).parent), env.get("PATH", "")))
    modes_run, notes = plan(device, modes, args.shipped, sanitizer)
    runs: list[dict[str, Any]] = []
    ok = False
    for mode in modes_run:
        print(f"isolation_runs: {mode.name} ...", flush=True)
        runs.append(run_mode(mode, out, args.run_timeout_s, env))
        # Written after each mode: a run stopped at a time limit keeps what it finished.
        ok = write(out, device, sanitizer, runs, notes, complete=len(runs) == len(modes_run))
    if not runs:
        ok = write(out, device, sanitizer, runs, notes, complete=True)
    print((out / "isolation_runs.txt").read_text(), end="")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
