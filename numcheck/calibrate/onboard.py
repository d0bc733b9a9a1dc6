"""``python -m numcheck onboard``: a GPU model numcheck has no values for, made green in one
command (docs/speed.md, "Your runner is not an H200").

    python -m numcheck onboard [--out DIR] [--only speed,invariance,numerics]
        [--speed-runs 3] [--seeds 2] [--first-seed 9500] [-k CASES] [--perf TARGET ...]
        [--device cuda] [--cases cases] [--dry-run] [--class]

On the machine's GPU (its class: :func:`numcheck.devices.device_class`, ``H100``...), in
three parts, each written as soon as it finishes so a run stopped at a time limit keeps them:

- ``speed``: every timed check of the perf case files (those with a perf-only case or a
  ``speedup_min``; ``--perf`` names others) timed ``--speed-runs`` times in one pytest process
  (``--numcheck-calibrate-speed``), and the class's ``speedup_min`` written beside the other
  classes' by :func:`numcheck.perf.thresholds.propose_speedup_min`'s rule; each line's
  comment gains this class's runs;
- ``invariance``: each ``deterministic`` / ``batch_invariant`` key that holds variants on
  this device kind but does not name the class: every variant it holds measured here
  (:func:`numcheck.check.invariance.measure_invariance`; a sweep at each of its points), and
  the class added to the key's ``devices`` only where every one was bitwise deterministic /
  batch-invariant (otherwise the key is left alone and the run says which variant differed);
- ``numerics``: every FP8 / FP4 variant's honest family (itself and its scheme's honest GEMMs
  that run here) on ``--seeds`` held-out seeds from ``--first-seed``, each against a fresh
  CPU reference, held to the shipped budgets. It changes no budget: where an honest member
  fails one on this GPU model, the run says which and how to measure the family with the
  governed calibration (``--numcheck-calibrate``, whose refusals decide whether the family
  alone supports a looser one), and exits 1.

Every value written carries its provenance: a ``# set by: numcheck onboard <class>: ...``
header line (the command, the date, the device's name, torch) in each file it changed, and
``onboard-<class>.json`` (every measurement). ``--out`` gets ``onboard-<class>.patch`` (the
case files' changes as a unified diff: ``git apply`` it elsewhere), the JSON and the log,
after each part. ``--dry-run`` leaves the case files as they were (the patch only).
Exit: 0 when every part ran and nothing was refused, 1 otherwise, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, TextIO

from numcheck.devices import DEVICE_NAME_ENV, device_name, gpu_models, run_class

PARTS = ("speed", "invariance", "numerics")
#: The invariance keys and the gate each measures.
KEYS = {"deterministic": "determinism", "batch_invariant": "batch"}


@dataclass
class Onboarding:
    """One onboarding run: where it reads and writes, what it found, and its log."""

    root: Path
    cases_dir: Path
    out: Path
    device: str
    cls: str
    name: str
    command: str
    log: TextIO
    originals: dict[Path, str] = field(default_factory=dict)
    found: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def stamp(self) -> str:
        """``2026-12-06, NVIDIA H100 80GB HBM3 (class H100), cuda, torch 2.11.0+cu130``."""
        import torch

        return (f"{date.today().isoformat()}, {self.name} (class {self.cls}), {self.device}, "
                f"torch {torch.__version__}")

    @property
    def provenance(self) -> tuple[str, str]:
        """The ``# set by:`` entry of a file this run changed: one per class, so another
        class's onboarding keeps its own line."""
        return f"numcheck onboard {self.cls}: {self.command}", self.stamp

    def say(self, line: str) -> None:
        """A progress line, on the terminal and in the log, at once."""
        stamp = f"[onboard {time.monotonic() - self.started:5.0f} s] {line}"
        print(stamp, flush=True)
        self.log.write(stamp + "\n")
        self.log.flush()

    def save(self) -> None:
        """The patch and the JSON as they stand (after each part: a kill keeps them)."""
        diff: list[str] = []
        for path, before in sorted(self.originals.items()):
            after = path.read_text()
            if after != before:
                rel = path.resolve().relative_to(self.root.resolve()).as_posix()
                diff += difflib.unified_diff(before.splitlines(keepends=True),
                                             after.splitlines(keepends=True),
                                             f"a/{rel}", f"b/{rel}")
        (self.out / f"onboard-{self.cls}.patch").write_text("".join(diff))
        (self.out / f"onboard-{self.cls}.json").write_text(
            json.dumps({"class": self.cls, "device_name": self.name, "device": self.device,
                        "stamp": self.stamp, "command": self.command,
                        "commit": os.environ.get("COMMIT", ""), **self.found},
                       indent=1, default=str) + "\n")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m numcheck onboard",
                                 description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("numcheck-onboard"),
                    help="folder for the patch, the JSON and the log (default %(default)s)")
    ap.add_argument("--only", default=",".join(PARTS),
                    help=f"comma-separated parts among {', '.join(PARTS)} (default: all)")
    ap.add_argument("--device", default=None, help="cuda (default where torch sees a GPU) or "
                    "cpu")
    ap.add_argument("--cases", type=Path, default=Path("cases"),
                    help="the case folder, relative to the current folder (default %(default)s)")
    ap.add_argument("--perf", nargs="+", default=None, metavar="TARGET",
                    help="speed: the case files or node ids to time (default: the case files "
                    "with a perf-only case or a speedup_min)")
    ap.add_argument("--speed-runs", type=int, default=3,
                    help="speed: timings of each check (default %(default)s; 5 or more where "
                    "device time allows)")
    ap.add_argument("--margin", type=float, default=0.05,
                    help="speed: the threshold's margin below the slowest run (default "
                    "%(default)s)")
    ap.add_argument("--seeds", type=int, default=2,
                    help="numerics: held-out seeds per case (default %(default)s)")
    ap.add_argument("--first-seed", type=int, default=9500,
                    help="numerics: the first held-out seed (default %(default)s)")
    ap.add_argument("-k", dest="select", default="",
                    help="invariance and numerics: only cases whose id contains one of these "
                    "comma-separated substrings")
    ap.add_argument("--dry-run", action="store_true",
                    help="leave the case files as they were: the patch and the JSON only")
    ap.add_argument("--class", dest="show_class", action="store_true",
                    help="print this machine's device class and exit")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    import torch

    ap = _parser()
    args = ap.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda") or (device == "cuda" and not torch.cuda.is_available()):
        ap.error(f"--device {device}: torch sees no such device; use cuda on a GPU machine")
    cls, name = run_class(device), device_name(device)
    if args.show_class:
        print(cls)
        return 0
    parts = [p for p in args.only.split(",") if p]
    if not parts or set(parts) - set(PARTS):
        ap.error(f"--only {args.only}: name parts among {', '.join(PARTS)}")
    if cls != "cpu" and cls not in gpu_models():
        ap.error(f"this GPU's class {cls!r} (from {name!r}) is no GPU model numcheck knows: "
                 "values keyed by it would not load. Fix: add it to the ini key "
                 "numcheck_gpu_models, then run again")
    from numcheck.calibrate.casewriter import INSTALL_HINT, have_tomlkit

    if not have_tomlkit():
        ap.error(f"writing case files needs tomlkit; fix: {INSTALL_HINT}")
    root = Path.cwd()
    cases_dir = (root / args.cases).resolve()
    if not cases_dir.is_dir():
        ap.error(f"--cases {args.cases}: no such folder (run from the project's root)")
    args.out.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "-m", "numcheck", "onboard",
                          *(argv if argv is not None else sys.argv[1:])])
    with (args.out / f"onboard-{cls}.txt").open("w") as log:
        run = Onboarding(root, cases_dir, args.out.resolve(), device, cls, name, command, log)
        run.originals = {p: p.read_text() for p in sorted(cases_dir.glob("*.toml"))}
        named = f" (named by {DEVICE_NAME_ENV})" if os.environ.get(DEVICE_NAME_ENV) else ""
        run.say(f"onboarding {name}{named}: class {cls}, device {device}; parts "
                f"{', '.join(parts)}; writing {'nothing (dry run)' if args.dry_run else 'the case files'}"
                f" and {run.out}/onboard-{cls}.patch")
        steps: dict[str, Callable[[Onboarding, argparse.Namespace], bool]] = {
            "speed": speed, "invariance": invariance, "numerics": numerics}
        ok = True
        try:
            for part in parts:
                run.say(f"{part}: started")
                done = steps[part](run, args)
                ok = ok and done
                _check_loads(run)
                run.save()
                run.say(f"{part}: {'done' if done else 'OFF'}; patch and JSON written")
        finally:
            if args.dry_run:
                for path, text in run.originals.items():
                    path.write_text(text)
        run.say(f"{'all parts ok' if ok else 'some part is OFF'}: apply the values elsewhere "
                f"with git apply {run.out}/onboard-{cls}.patch")
    return 0 if ok else 1


def _check_loads(run: Onboarding) -> None:
    """The case files still load (never leave the gate a file it cannot read): a part that
    broke one puts every file back and stops the run."""
    from numcheck.cases import CaseFileError, load_cases

    try:
        load_cases(run.cases_dir)
    except CaseFileError as exc:
        for path, text in run.originals.items():
            path.write_text(text)
        raise SystemExit(f"numcheck onboard: the case files no longer load ({exc}); every "
                         "file was put back") from None


def _selected(case_id: str, select: str) -> bool:
    return not select or any(part in case_id for part in select.split(","))


# -- speed ------------------------------------------------------------------------------


def speed(run: Onboarding, args: argparse.Namespace) -> bool:
    """Time every perf check ``--speed-runs`` times and write this class's thresholds."""
    from numcheck.calibrate.casewriter import write_edits
    from numcheck.calibrate.payloads import SpeedPayload, read_run
    from numcheck.calibrate.speed import speed_section

    targets = args.perf or _perf_files(run.cases_dir)
    if not targets:
        run.say("speed: no case file has a perf-only case or a speedup_min: nothing to time")
        return True
    runs_file = run.out / f"speed-{run.cls}.json"
    runs_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--numcheck",
           "--numcheck-perf", "--numcheck-device", run.device,
           f"--numcheck-calibrate-speed={args.speed_runs}", "--numcheck-calibrate-json",
           str(runs_file), *map(str, targets)]
    run.say(f"speed: {shlex.join(cmd)}")
    rc = _stream(run, cmd)
    if not runs_file.exists():
        run.say(f"speed: OFF: the timing run wrote no measurements (pytest exit {rc})")
        return False
    payloads = [p for p in read_run(runs_file) if isinstance(p, SpeedPayload)]
    lines, edits = speed_section(payloads, margin=args.margin)
    for line in lines:
        run.say(f"speed: {line}")
    runs = {(p.check.case, p.variant): " ".join(f"{r.median:.3f}" for r in p.runs)
            for p in payloads}
    written = []
    for path, file_edits in edits.items():
        comments = _line_comments(Path(path))
        file_edits = [replace(e, comment=_merged(comments.get((e.table, e.key), ""), run.cls,
                                                 runs.get((e.table[0], e.table[2]), "")))
                      if e.value is not None else e for e in file_edits]
        changes, _ = write_edits(Path(path), file_edits, run.provenance)
        written += [c.describe() for c in changes]
    for text in written:
        run.say(f"speed: written {text}")
    run.found["speed"] = {"runs": args.speed_runs, "margin": args.margin, "pytest_exit": rc,
                          "proposals": lines, "written": written,
                          "measurements": runs_file.name}
    return rc == 0


def _perf_files(cases_dir: Path) -> list[Path]:
    """The case files that hold a perf-only case or a ``speedup_min``."""
    import tomllib

    def timed(body: Any) -> bool:
        perf = body.get("perf", {}) if isinstance(body, dict) else {}
        return bool(isinstance(body, dict) and body.get("perf_only")) or "speedup_min" in perf \
            or any(isinstance(t, dict) and "speedup_min" in t for t in perf.values())

    return [path for path in sorted(cases_dir.glob("*.toml"))
            if any(timed(body) for body in tomllib.loads(path.read_text()).values())]


def _stream(run: Onboarding, cmd: list[str]) -> int:
    """Run ``cmd`` in the project's root, its output into the log line by line."""
    proc = subprocess.Popen(cmd, cwd=run.root, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        run.log.write(line)
        if line.startswith(("numcheck calibrate", "FAILED", "ERROR")):
            print(f"  {line.rstrip()}", flush=True)
    return proc.wait()


def _line_comments(path: Path) -> dict[tuple[tuple[str, ...], str], str]:
    """``(table, key) -> comment`` of every ``speedup_min`` line of a case file."""
    import tomlkit

    doc = tomlkit.parse(path.read_text())
    out: dict[tuple[tuple[str, ...], str], str] = {}
    for case_id, body in doc.items():
        for variant, table in (body.get("perf") or {}).items() if hasattr(body, "get") else ():
            if hasattr(table, "get") and "speedup_min" in table:
                comment = table["speedup_min"].trivia.comment
                out[((case_id, "perf", variant), "speedup_min")] = comment.lstrip("# ")
    return out


def _merged(comment: str, cls: str, runs: str) -> str:
    """A threshold line's comment with this class's runs (the other classes' kept)."""
    mine = f"{cls} (onboard {date.today().isoformat()}): runs {runs}"
    kept = [part for part in comment.split("; ") if part and not part.startswith(f"{cls} (")]
    return "; ".join([*kept, mine])


# -- invariance -------------------------------------------------------------------------


def invariance(run: Onboarding, args: argparse.Namespace) -> bool:
    """Measure every key that does not name this class; name it where all variants held."""
    from numcheck.cases import load_cases
    from numcheck.check.invariance import measure_invariance
    from numcheck.check.run import CaseInputs
    from numcheck.ops.registry import get_op

    if run.cls == "cpu":
        run.say("invariance: the CPU is its own class, named by the case files' short forms")
        return True
    keys: dict[tuple[Path, str, str], dict[str, Any]] = {}
    for case in load_cases(run.cases_dir):
        if case.perf_only or run.device not in case.devices or not _selected(case.id,
                                                                              args.select):
            continue
        op = get_op(case.op)
        cpu_inputs, _ = CaseInputs(op, case).get(case.seeds[0])
        for key, gate in KEYS.items():
            spec = getattr(case, key)
            if spec is None or spec.gates_on(run.cls, run.device):
                continue
            entry = keys.setdefault((case.source, case.table, key), {
                "case": case.table, "key": key, "held": True, "rows": [],
                "devices": list(case.devices)})
            for variant in spec.variants:
                if not spec.holds(variant, run.device):
                    continue
                why = op.variants[variant].why_not(run.device)
                if why:
                    entry["held"] = False
                    entry["rows"].append({"point": case.id, "variant": variant,
                                          "not measured": why})
                    continue
                report = measure_invariance(op, case, variant, run.device, cpu_inputs,
                                            determinism=gate == "determinism",
                                            batch=gate == "batch")
                differing = (len(report.run_differences) if gate == "determinism"
                             else len(report.request_differences))
                entry["held"] = entry["held"] and not differing
                entry["rows"].append({"point": case.id, "variant": variant,
                                      "differing": differing})
                if differing:
                    run.say(f"invariance: {case.id}::{variant}: {key} does not hold on "
                            f"{run.cls}: {report.violations()[0].describe()}")
    named = []
    for (path, table, key), entry in keys.items():
        if entry["held"] and entry["rows"]:
            _name_class(path, table, key, run.cls, entry["devices"], run.provenance)
            named.append(f"{path.name} [{table}] {key}")
    run.say(f"invariance: {len(keys)} key(s) measured on {run.cls}; named in "
            f"{len(named)}, left alone in {len(keys) - len(named)} (a variant differed or "
            "could not run here)")
    run.found["invariance"] = {"keys": [{"file": p.name, **e} for (p, _, _), e in keys.items()],
                               "named": named}
    return True


def _name_class(path: Path, table: str, key: str, cls: str, case_devices: Sequence[str],
                provenance: tuple[str, str]) -> None:
    """Add ``cls`` to the ``devices`` of the case's ``key`` (a short form becomes the table
    form, naming the CPU where the case runs there)."""
    import tomlkit

    from numcheck.calibrate.casewriter import with_provenance

    doc = tomlkit.parse(path.read_text())
    body = doc[table]
    value = body[key]
    if not hasattr(value, "get"):  # true, or a list of variants
        form = tomlkit.inline_table()
        if isinstance(value, list):
            form["variants"] = list(value)
        value = form
    if "devices" not in value:
        value["devices"] = [d for d in case_devices if d == "cpu"]
    if cls not in value["devices"]:
        value["devices"].append(cls)
    body[key] = value
    path.write_text(with_provenance(tomlkit.dumps(doc), *provenance))


# -- numerics ---------------------------------------------------------------------------


def numerics(run: Onboarding, args: argparse.Namespace) -> bool:
    """Every FP8 / FP4 family on held-out seeds, held to the shipped budgets; no budget
    changed, and a failure of an honest member refused with its way out."""
    from numcheck.calibrate.family import honest_family
    from numcheck.cases import load_cases
    from numcheck.honest.gemm_family import member_name, member_variants, members
    from numcheck.ops import registry
    from numcheck.ops.registry import add_variant, get_op
    from numcheck.report.limit_text import calibrate_command
    from numcheck.selftest import family_outcomes

    seeds = [args.first_seed + i for i in range(args.seeds)]
    checks, failed, skipped = 0, [], {}
    with registry.isolated():
        cases = [c for c in load_cases(run.cases_dir) if not c.perf_only
                 and run.device in c.devices and _selected(c.id, args.select)
                 and any(get_op(c.op).variants[v].quant is not None for v in c.variants)]
        for op_name in sorted({c.op for c in cases}):
            for v in member_variants(get_op(op_name), ("e4m3", "e5m2", "e2m1")):
                if v.name not in get_op(op_name).variants:
                    add_variant(op_name, v, origin="numcheck onboard")
        for case in cases:
            op = get_op(case.op)
            for head in case.variants:
                variant = op.variants[head]
                if variant.quant is None or head in case.expect:
                    continue  # a known-bad variant's family fails with it, as expected
                why = variant.why_not(run.device)
                if why:
                    skipped[f"{case.op}::{case.id}::{head}"] = why
                    continue
                names = [head, *(member_name(g) for g in members(op, variant.precision,
                                                                  variant.quant)
                                 if run.device in g.devices and not g.unavailable)]
                outcomes = family_outcomes(case, head, names, seeds, device=run.device)
                checks += len(outcomes)
                bad = [o for o in outcomes if not o.passed]
                for o in bad:
                    family = honest_family(op, case, head, run.device)
                    failed.append({
                        "case": f"{case.op}::{case.id}", "budget_of": head,
                        "member": o.variant, "seed": o.seed, "reason": o.reason,
                        "calibrate": calibrate_command(
                            f"{case.source.name}::{case.id}", run.device,
                            pool=family.pool_option())})
                run.say(f"numerics: {case.op}::{case.id} {head}: {len(names)} members x "
                        f"{len(seeds)} seeds, {len(bad)} failed")
    for name, why in skipped.items():
        run.say(f"numerics: skipped {name}: {why}")
    run.found["numerics"] = {"seeds": seeds, "checks": checks, "failed": failed,
                             "skipped": skipped, "budgets_changed": 0}
    if not failed:
        run.say(f"numerics: {checks} honest checks on seeds {seeds[0]}..{seeds[-1]}, none "
                f"failed: the shipped budgets hold on {run.cls}; no budget changed")
        return True
    run.say(f"numerics: REFUSED: {len(failed)} honest check(s) fail the shipped budgets on "
            f"{run.cls}. onboard changes no numerics budget: a budget is loosened only by "
            "the governed calibration of the whole honest family, whose refusals decide "
            "(docs/budgets.md). For each:")
    for f in failed:
        run.say(f"  {f['case']} {f['member']} (held to {f['budget_of']}'s budget) seed "
                f"{f['seed']}: {f['reason']}")
        run.say(f"    measure the family: {f['calibrate']}")
    return False
