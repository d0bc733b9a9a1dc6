"""Shipped checks on many fresh seeds, point by point: what the budgets and invariance lists
of the sweeps, the input distributions and the invariance cases must hold, measured.

    python -m benchmarks.numerics.many_seeds run --out FILE.jsonl [--cases cases] [-k SUBSTR,...]
        [--seeds 50] [--first-seed 20000] [--invariance-only SUBSTR,...]
    python -m benchmarks.numerics.many_seeds budgets FILE.jsonl [...] [-k SUBSTR,...]
    python -m benchmarks.numerics.many_seeds report FILE.jsonl [...] [-k SUBSTR,...]

``run``: for every selected case with numerics that runs on the CPU (every point of a
sweep), on every seed: a fresh CPU reference, then each variant the case checks (the
reference included) held to the case's budgets as the gate holds it (the numerics), and the
determinism and batch-invariance gates as ``pytest --numcheck`` runs them
(numcheck.check.invariance), here for every variant whatever the case's keys say, so the
record shows which variants could be listed. Cases matched by ``--invariance-only`` (the
fixed cases, whose numerics budgets are measured elsewhere) run the invariance gates alone.
One JSON line per (case point, seed), appended as soon as it is measured: the run is
resumable (a line already in ``--out`` for the same case parameters is not measured again),
so it can run under ``nohup`` and be restarted at will.

``budgets``: per case, variant and output, each budgeted key's worst over every point and
seed of the files, the point and seed behind it, and the value the headroom rule ships
(numcheck.calibrate.suggest_values: 2x the worst, 1.25x for max_err_ratio, the top-k floors),
never lower than the case file's: the lines marked ``(raise)`` are the keys whose worst
needs more than the case file holds; ``--write`` raises them there, each with a comment.

``report``: per case, the checks that failed on these seeds with the case files' budgets
at the time of the run (an honest variant must never fail), and per variant whether it was
deterministic and batch-invariant on every seed and point, against what the keys claim.
Exits 1 when a check of a shipped (not known-bad) variant failed, or a key claims a property
some seed broke.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: The invariance gates' names (numcheck.gates), as the records keep them.
DETERMINISM, BATCH = "determinism", "batch_invariance"


def _selected(case_id: str, select: str) -> bool:
    """``-k``: the ``op::id`` contains one of the comma-separated parts, or ends with one
    written with a trailing ``$`` (``mhc-tokens@tokens1$``: that point, not tokens129)."""
    return not select or any(
        (case_id.endswith(part[:-1]) if part.endswith("$") else part in case_id)
        for part in select.split(",") if part)


def _fingerprint(case: Any) -> str:
    """What makes a case's inputs and reference: a line measured for other parameters (a
    case changed since) is measured again."""
    return json.dumps({k: case.params[k] for k in sorted(case.params)}, sort_keys=True,
                      default=str)


def _done(path: Path) -> set[tuple[str, str, int, str]]:
    found: set[tuple[str, str, int, str]] = set()
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a stopped run: measured again
        found.add((row["case"], row["params"], row["seed"], row.get("device", "cpu")))
    return found


def _probe(case: Any, op: Any, runs: int | None, determinism: bool, device: str) -> Any:
    """The case with both invariance gates on for every variant it runs (the reference
    included), on ``device``: what the gates would say if the keys listed them all
    (``determinism`` False: that gate off)."""
    from numcheck.invariance.limits import DEFAULT_RUNS, InvarianceSpec

    names = (op.reference, *case.variants)
    det = case.deterministic
    count = runs or (det.runs if det is not None else DEFAULT_RUNS)
    bat = case.batch_invariant
    return replace(
        case,
        deterministic=InvarianceSpec(names, (device,), runs=count) if determinism else None,
        batch_invariant=(InvarianceSpec(names, (device,),
                                        requests=bat.requests if bat is not None else None)
                         if op.batch is not None else None))


def _claims(spec: Any, variant: str, device: str) -> bool:
    return spec is not None and spec.holds(variant, device)


def measure(case: Any, seed: int, *, numerics: bool, runs: int | None,
            determinism: bool = True, device: str = "cpu",
            invariance: bool = True) -> dict[str, Any]:
    """One case point on one seed: every variant's numerics on ``device`` against a fresh
    CPU reference (rows and violations) and its invariance there, as one JSON-able row."""
    from numcheck.calibrate import seed_rows
    from numcheck.check import run_check
    from numcheck.check.make_golden import fresh_golden
    from numcheck.gates import BATCH_INVARIANCE_GATE, DETERMINISM_GATE
    from numcheck.ops.registry import get_op
    from numcheck.ops.spec import VariantError

    op = get_op(case.op)
    one = replace(case, seeds=(seed,))
    probe = _probe(one, op, runs, determinism, device)
    t0 = time.monotonic()
    golden, inputs = fresh_golden(op, one, "cpu")
    gates = {DETERMINISM_GATE.name, BATCH_INVARIANCE_GATE.name} if invariance else set()
    out: dict[str, Any] = {}
    for name in (op.reference, *case.variants):
        if device not in op.variants[name].devices:
            continue
        cell: dict[str, Any] = {
            "expected": name in case.expect,
            "claims": {DETERMINISM: _claims(case.deterministic, name, device),
                       BATCH: _claims(case.batch_invariant, name, device)}}
        try:
            result = run_check(op, probe, name, device, inputs, golden, gates=gates,
                               max_flips=10**9, keep_outputs=numerics)
        except VariantError as exc:
            cell["error"] = str(exc).splitlines()[0]
            out[name] = cell
            continue
        violations = [v for v in result.violations if v.output not in (DETERMINISM, BATCH)]
        cell["violations"] = [v.describe() for v in violations[:4]]
        if result.settled is not None:
            cell["xfail"] = result.settled.xfail
        if numerics:
            (sr,) = result.seeds
            cell["rows"] = seed_rows(op, golden, sr)
        inv = result.invariance
        if inv is not None:
            for gate, of, found in ((DETERMINISM, inv.runs, inv.run_differences),
                                    (BATCH, inv.batch and len(inv.requests),
                                     inv.request_differences)):
                if of is None:
                    continue  # the gate did not run
                first = found[0][1][0].describe() if found and found[0][1] else ""
                cell[gate] = {"differing": len(found), "of": of, "first": first}
        out[name] = cell
    point = case.sweep.label if case.sweep is not None else ""
    return {"case": f"{case.op}::{case.table}", "point": point, "id": case.id,
            "params": _fingerprint(case), "seed": seed, "numerics": numerics, "device": device,
            "seconds": round(time.monotonic() - t0, 2), "variants": out}


def run(args: argparse.Namespace) -> int:
    import torch

    from numcheck.cases import load_cases
    from numcheck.ops.registry import get_op

    cases = [c for c in load_cases(args.cases) if not c.perf_only and args.device in c.devices
             and ((args.select and _selected(f"{c.op}::{c.id}", args.select))
                  or (args.invariance_only
                      and _selected(f"{c.op}::{c.id}", args.invariance_only)))]
    done = _done(args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(f"# {len(cases)} case points x {len(seeds)} seeds; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {len(done)} lines already in {args.out}",
          flush=True)
    started = time.monotonic()
    # Seeds outermost: a run stopped early has every case point on its first seeds.
    for seed in seeds:
        for case in cases:
            key = f"{case.op}::{case.table}"
            if (key, _fingerprint(case), seed, args.device) in done:
                continue
            # -k: numerics and invariance; matched by --invariance-only alone: invariance.
            numerics = bool(args.select) and _selected(f"{case.op}::{case.id}", args.select)
            if not numerics and case.deterministic is None and case.batch_invariant is None:
                continue
            if not numerics and get_op(case.op).batch is None and case.deterministic is None:
                continue
            determinism = seed - args.first_seed < args.determinism_seeds
            if args.stop_after_s and time.monotonic() - started > args.stop_after_s:
                print(f"# stopped after {args.stop_after_s} s (--stop-after-s): run again to "
                      "go on", flush=True)
                return 0
            row = measure(case, seed, numerics=numerics, runs=args.runs,
                          determinism=determinism, device=args.device,
                          invariance=not args.no_invariance)
            row["date"] = datetime.date.today().isoformat()
            with args.out.open("a") as handle:
                handle.write(json.dumps(row, separators=(",", ":")) + "\n")
            bad = [f"{v}: {c['violations'][0] if c.get('violations') else c.get('error')}"
                   for v, c in row["variants"].items()
                   if (c.get("violations") or c.get("error")) and not c["expected"]]
            print(f"{case.op}::{case.id} seed {seed}: {row['seconds']} s"
                  + (f"; FAIL {'; '.join(bad)}" if bad else ""), flush=True)
    print(f"# done in {time.monotonic() - started:.0f} s", flush=True)
    return 0


def lines(paths: list[Path], select: str) -> Iterator[dict[str, Any]]:
    """The rows of the files (a ``.gz`` one read as gzip: how the evidence keeps them)."""
    for path in paths:
        body = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else (
            path.read_text())
        for text in body.splitlines():
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                continue
            if _selected(row["case"], select):
                yield row


def _current(paths: list[Path], select: str, cases_dir: Path) -> Iterator[tuple[Any, dict]]:
    """Each line with the case point it measured, as the case files hold it now (lines of a
    case whose parameters changed since are left out)."""
    from numcheck.cases import load_cases

    now = {(f"{c.op}::{c.table}", c.id): c for c in load_cases(cases_dir)}
    for row in lines(paths, select):
        case = now.get((row["case"], row["id"]))
        if case is not None and _fingerprint(case) == row["params"]:
            yield case, row


def budgets(args: argparse.Namespace) -> int:
    from numcheck.calibrate import LOWER_IS_WORSE, is_worse, suggest_values
    from numcheck.calibrate.casewriter import Edit, write_edits
    from numcheck.calibrate.headroom import budget_value, headroom
    from numcheck.numerics.budget_origin import lender_of
    from numcheck.ops.registry import get_op

    worst: dict[tuple[str, str, str], dict[str, tuple[float, str, int]]] = {}
    counts: dict[tuple[str, str], int] = {}
    edits: dict[Path, list[Any]] = {}
    held: dict[str, Any] = {}
    for case, row in _current(args.files, args.select, args.cases):
        if not row["numerics"]:
            continue
        held[row["case"]] = case
        for variant, cell in row["variants"].items():
            if cell.get("expected") or "rows" not in cell:
                continue
            counts[(row["case"], variant)] = counts.get((row["case"], variant), 0) + 1
            for output, values in cell["rows"].items():
                into = worst.setdefault((row["case"], variant, output), {})
                for metric, value in values.items():
                    old = into.get(metric)
                    if old is None or is_worse(metric, value, old[0]):
                        into[metric] = (value, row["point"], row["seed"])
    out = [("| case | variant | output | key | shipped | worst (point, seed) | checks | rule | "
            "ship |"), "|---|---|---|---|---|---|---|---|---|"]
    for (key, variant, output), row in sorted(worst.items()):
        case = held[key]
        op = get_op(case.op)
        budget = case.budgets[variant]
        if variant == op.reference or lender_of(budget.origins) is not None:
            continue  # the reference's own drift; a borrower is held to its lender's table
        topk = op.topk is not None and output == op.topk.indices
        if topk:
            if budget.topk is None:
                continue
            limits = dict(budget.topk.limits)
            if budget.topk.tie_band_kind == "rel":
                limits["tie_band_rel"] = budget.topk.tie_band
        elif output in budget.outputs:
            limits = dict(budget.outputs[output].limits)
        else:
            continue
        values = {m: v[0] for m, v in row.items()}
        rule = suggest_values(values, topk=topk, k=int(case.params.get("index_topk", 0) or 0),
                              gated=tuple(limits))
        for metric, suggested in rule.items():
            shipped = limits.get(metric)
            if shipped is None or metric.startswith("tie_recall"):
                continue  # tie recalls stay 1: a flip is explained by the tie band, raised
            measured = "band_rel_needed" if metric == "tie_band_rel" else metric
            value, point, seed = row.get(measured, (float("nan"), "", 0))
            lower = metric in LOWER_IS_WORSE
            # Raised where the measurement itself needs it (the headroom times the worst, or
            # twice the worst miss), not where a floor of the rule would: a floor sets a key
            # a calibration leaves unset, and the case's own value is no such key.
            needed = (1.0 - headroom(metric) * (1.0 - value) if lower
                      else headroom(metric) * value)
            raise_it = (needed < shipped - 1e-12 if lower
                        else needed > shipped * (1 + 1e-9))
            if raise_it and not lower:
                suggested = max(suggested, budget_value(metric, value))
            if raise_it:
                edits.setdefault(case.source, []).append(Edit(
                    (case.table, "budget", variant, output), metric, suggested,
                    comment=(f"raised from {shipped:g}: the headroom rule on {value:.3g} "
                             f"({point + ', ' if point else ''}seed {seed}) of "
                             f"{counts[(key, variant)]} checks, benchmarks/numerics/many_seeds.py"),
                    origin=budget.origin(output, metric)))
            if args.all or raise_it:
                ship = suggested if raise_it else shipped
                out.append(f"| {key} | {variant} | {output} | {metric} | {shipped:g} | "
                           f"{value:.3g} ({point or '-'}, {seed}) | "
                           f"{counts[(key, variant)]} | {suggested:g} | {ship:g}"
                           f"{' (raise)' if raise_it else ''} |")
    print("\n".join(out))
    if args.write:
        command = " ".join(["python", "-m", "benchmarks.numerics.many_seeds", *sys.argv[1:]])
        for path, file_edits in edits.items():
            changes, skipped = write_edits(Path(path), file_edits,
                                           (command, datetime.date.today().isoformat()))
            for change in [*changes, *skipped]:
                print(f"{path}: {change.describe()}")
    return 0


def report(args: argparse.Namespace) -> int:
    checks: dict[tuple[str, str], list[int]] = {}
    failures: list[str] = []
    inv: dict[tuple[str, str, str], dict[str, Any]] = {}
    seeds: set[int] = set()
    for case, row in _current(args.files, args.select, args.cases):
        seeds.add(row["seed"])
        where = f"{row['case']}{'@' + row['point'] if row['point'] else ''} seed {row['seed']}"
        for variant, cell in row["variants"].items():
            if row["numerics"]:
                tally = checks.setdefault((row["case"], variant), [0, 0, 0])
                tally[1] += 1
                bad = bool(cell.get("violations") or cell.get("error"))
                if cell.get("expected"):
                    tally[2] += 1
                elif bad:
                    failures.append(f"FAIL {where} {variant}: "
                                    f"{(cell.get('violations') or [cell.get('error')])[0]}")
                else:
                    tally[0] += 1
            for gate in (DETERMINISM, BATCH):
                got = cell.get(gate)
                if got is None:
                    continue
                state = inv.setdefault((row["case"], variant, gate), {
                    "claimed": cell["claims"][gate], "seen": 0, "broke": 0, "first": ""})
                state["seen"] += 1
                if got["differing"]:
                    state["broke"] += 1
                    state["first"] = state["first"] or f"{where}: {got['first']}"
    print(f"# seeds {min(seeds, default=0)}..{max(seeds, default=0)} ({len(seeds)})")
    print("| case | variant | checks passed | known-bad |")
    print("|---|---|---|---|")
    for (key, variant), (ok, n, expected) in sorted(checks.items()):
        print(f"| {key} | {variant} | {ok}/{n - expected} | {expected or ''} |")
    print()
    print("| case | variant | gate | key claims it | seeds x points that broke it | first |")
    print("|---|---|---|---|---|---|")
    broken = []
    for (key, variant, gate), s in sorted(inv.items()):
        print(f"| {key} | {variant} | {gate} | {'yes' if s['claimed'] else 'no'} | "
              f"{s['broke']}/{s['seen']} | {s['first'][:90]} |")
        if s["claimed"] and s["broke"]:
            broken.append(f"{key} {variant} {gate}: {s['first']}")
    print()
    for line in failures:
        print(line)
    for line in broken:
        print(f"KEY BROKEN {line}")
    total = sum(n - e for _, n, e in checks.values())
    print(f"# {total - len(failures)}/{total} honest checks pass; {len(broken)} invariance "
          "claims broken")
    return 1 if failures or broken else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--cases", type=Path, default=ROOT / "cases")
    r.add_argument("-k", dest="select", default="", help="cases whose op::id contains any of "
                   "these (comma-separated): numerics and invariance")
    r.add_argument("--invariance-only", default="", help="cases whose op::id contains any of "
                   "these: the invariance gates alone")
    r.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    r.add_argument("--stop-after-s", type=float, default=0,
                   help="start no case point after this many seconds (0: no limit)")
    r.add_argument("--seeds", type=int, default=50)
    r.add_argument("--first-seed", type=int, default=20000)
    r.add_argument("--runs", type=int, default=None,
                   help="determinism calls (default: the case's, else the gate's default)")
    r.add_argument("--no-invariance", action="store_true",
                   help="the numerics alone (a point's tail over many seeds, cheaply)")
    r.add_argument("--determinism-seeds", type=int, default=10**9,
                   help="the determinism gate on the first N seeds only (it repeats calls on "
                        "one input; batch invariance runs on every seed)")
    for name in ("budgets", "report"):
        s = sub.add_parser(name)
        s.add_argument("files", nargs="+", type=Path)
        s.add_argument("-k", dest="select", default="")
        s.add_argument("--cases", type=Path, default=ROOT / "cases")
        if name == "budgets":
            s.add_argument("--all", action="store_true", help="every key, not only raises")
            s.add_argument("--write", action="store_true",
                           help="raise the keys marked (raise) in the case files, each with "
                                "a comment saying from what and why (needs tomlkit)")
    args = ap.parse_args(argv)
    return {"run": run, "budgets": budgets, "report": report}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
