"""Two-sided calibration: the honest family's worst error per shipped case, and budgets from it.

    python -m benchmarks.numerics.honest_calibration [--seeds 40] [--first-seed 4000] [--device cpu]
        [-k CASE_SUBSTRING] [--ops mhc_pre indexer] [--json out.json]
    python -m benchmarks.numerics.honest_calibration --suggest A.json [B.json ...]
    python -m benchmarks.numerics.honest_calibration --apply A.json [B.json ...] \
        --note "60 CPU seeds"

(the calibration files behind the shipped budgets are under docs/evidence/; cases/*.toml's
headers name the --apply commands that wrote them)

Measures every honest family of tests/honest.py (each shipped op at bf16 and tf32: the
shipped variant of that class plus the test-only alternatives) on every shipped case, over the
case's own seeds plus ``--seeds`` fresh ones, each against a fresh CPU reference, the way the
gate measures (numcheck.calibrate.honest). The families hold the members derived from each
op's GEMM site (numcheck.honest.gemm_family: TF32 rounded or truncated, bf16 out or fp32 out,
one pass, K-blocks, split-K; with ``--device cuda`` also cuBLAS and a Triton tl.dot kernel).
The FP8 / FP4 variants (those that declare ``Variant.quant``) have their schemes' families,
measured the same way by benchmarks/numerics/fp8_families.py (docs/fp8.md); this script leaves them
out and says so.
``--suggest`` prints the budget tables (docs/budgets.md has the policy); ``--apply`` writes
them into cases/*.toml: bf16 and tf32 ``max_err_ratio`` set to 1.25x the worst pooled over
the op's cases (raised or lowered: it is relative to the rounding envelope, the same on
every case; not on bf16-stored outputs, whose whole-ulp ratios are set by hand), top-k
``recall_min`` lowered to numcheck.calibrate's floor for the family's worst miss, every
other family value only raised (tomlkit, the calibrate extra). Where the values come from is
said once per case file: ``--apply`` names its command in the header (``# set by: ...``) and
prints each change with its old value and why; a variant that takes another's budgets
(``budget_like``) is covered by its lender's tables. Seeds 4000+ are the calibration seeds;
the held-out checks (benchmarks/reliability/reliability_report.py,
``python -m numcheck.heldout``) use
5000+ and later ranges (docs/reliability.md lists which).
"""


from __future__ import annotations

import argparse
import datetime
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from numcheck.calibrate import guard, suggest_values
from numcheck.calibrate.casewriter import Edit, write_edits
from numcheck.calibrate.heldout import outside_as_judged
from numcheck.calibrate.honest import (
    GATED,
    budget_from,
    family_findings,
    measure_family,
    merge_worst,
    suggest,
)
from numcheck.cases import load_cases
from numcheck.numerics.budget_origin import lender_of
from numcheck.ops.registry import get_op

ROOT = Path(__file__).resolve().parents[2]

#: Classes whose ``max_err_ratio`` --apply sets from the family (both have a rounding
#: envelope: the rounding reference and the members derived from the GEMM site).
ENVELOPE_CLASSES = ("bf16", "tf32")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--first-seed", type=int, default=4000)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("-k", dest="select", default="", help="only cases whose id contains this")
    ap.add_argument("--ops", nargs="+", default=None, metavar="OP",
                    help="only these ops' cases, in this order (a run stopped at a time "
                    "limit keeps the first ones)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--suggest", type=Path, nargs="+", metavar="JSON")
    ap.add_argument("--apply", type=Path, nargs="+", metavar="JSON",
                    help="write the budgets into cases/*.toml (bf16 and tf32 max_err_ratio "
                    "pooled per op)")
    ap.add_argument("--accept", action="append", default=[], metavar="M1,M2,...",
                    help="with --suggest/--apply: go on although these members look like bugs "
                    "(past their class's honest limits; docs/budgets.md, \"What calibration "
                    "refuses\"); --apply's header line names the option")
    ap.add_argument("--note", default="the calibration seeds",
                    help="with --apply: what the seeds were, for the comments")
    ap.add_argument("--table", type=Path, nargs="+", metavar="JSON",
                    help="measure nothing: print the markdown table of docs/budgets.md")
    args = ap.parse_args(argv)
    # A sweep's points share one table: pytest --numcheck --numcheck-calibrate pools them.
    cases = [c for c in load_cases(ROOT / "cases") if not c.perf_only and args.select in c.id
             and c.sweep is None and c.inputs.file is None]
    if args.ops:
        cases = sorted((c for c in cases if c.op in args.ops), key=lambda c: args.ops.index(c.op))
    if args.table:
        print_table(args.table, cases)
        return 0
    accepted = [m.strip() for value in args.accept for m in value.split(",") if m.strip()]
    if args.suggest or args.apply:
        merged = merge(args.suggest or args.apply)
        stands = guard.blocking(family_findings(merged, cases), accepted, renew=False)
        if stands:
            print("honest_calibration: refused: a family member looks like a bug, not an honest "
                  "implementation of its class (docs/budgets.md, \"What calibration refuses\");"
                  " nothing printed or written:", file=sys.stderr)
            for f in stands:
                print("\n".join([f"  - {f.head}", *(f"      {d}" for d in f.details)]),
                      file=sys.stderr)
            print("  Fix: take the member out of the family (tests/honest.py) and fix it; "
                  "--accept NAME goes on anyway", file=sys.stderr)
            return 1
    if args.suggest:
        print(suggest(merged, cases))
        return 0
    if args.apply:
        command = shlex.join(["python", "-m", "benchmarks.numerics.honest_calibration",
                              "--apply", *(_shown(p) for p in args.apply), "--note", args.note,
                              *(f"--accept={m}" for m in accepted)])
        for change in apply(merged, cases, args.note, command=command):
            print(change)
        return 0

    from tests import honest

    honest.register_all()
    report: dict[str, Any] = {"meta": {"torch": torch.__version__, "device": args.device,
                                       "threads": torch.get_num_threads(),
                                       "fresh_seeds": [args.first_seed, args.first_seed
                                                       + args.seeds - 1]},
                              "cases": {}}
    quant = sorted({f"{c.op}::{v}" for c in cases for v in c.variants
                    if getattr(get_op(c.op).variants.get(v), "quant", None) is not None})
    if quant:
        print(f"honest_calibration: the FP8 / FP4 variants ({', '.join(quant)}) are "
              "calibrated on their schemes' families: benchmarks/numerics/fp8_families.py",
              file=sys.stderr)
    for case in cases:
        seeds = list(case.seeds) + list(range(args.first_seed, args.first_seed + args.seeds))
        for op_name, precision in honest.FAMILIES:
            if op_name != case.op or precision not in case.variants:
                continue
            members = honest.family(op_name, precision)
            t0 = time.perf_counter()
            res = measure_family(case, precision, members, seeds, device=args.device)
            res["seeds"] = seeds
            res["members"] = members
            res["wall_s"] = round(time.perf_counter() - t0, 1)
            report["cases"].setdefault(f"{case.op}::{case.id}", {})[precision] = res
            for output, row in res["worst"].items():
                cells = "  ".join(f"{k}={v:.3g}" for k, v in row.items()
                                  if k in ("rel_fro", "calc_diff", "frac_outside",
                                           "max_err_ratio", "max_band_ratio", "recall_min",
                                           "tie_recall_min"))
                print(f"{case.op}::{case.id} {precision} {output:7s} {cells}", flush=True)
            for err in res["errors"]:
                print("  ERROR", err)
            if args.json:  # write as we go: a long run keeps what it measured
                args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def merge(paths: list[Path]) -> dict[str, Any]:
    """The worst of every metric over several calibration files (lowest for recalls), for
    the family and for each member."""
    merged: dict[str, Any] = {}
    for path in paths:
        for key, fams in json.loads(path.read_text())["cases"].items():
            for prec, res in fams.items():
                into = merged.setdefault(key, {}).setdefault(prec, {"worst": {},
                                                                    "by_variant": {}})
                for output, row in res["worst"].items():
                    merge_worst(into["worst"].setdefault(output, {}), row)
                for member, outputs in res.get("by_variant", {}).items():
                    mine = into["by_variant"].setdefault(member, {})
                    for output, row in outputs.items():
                        merge_worst(mine.setdefault(output, {}), row)
    return merged


#: Shipped variants held to the bf16 family's budget (a known-bad variant whose numerics
#: equal bf16's: its budget must be bf16's so that only the cast ledger's verdict differs).
#: The shipped case files say so with ``budget_like = "bf16"``, so writing bf16's tables
#: covers them; a case file that still keeps copies has them written alike.
HELD_AS_BF16 = {"mhc_pre": ("bf16_roundtrip",)}


def _shown(path: Path) -> str:
    """A path as the case file's header names it: relative to the repository when inside."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def pool_key(case: Any, output: str) -> tuple[Any, ...]:
    """Cases whose bf16 ``max_err_ratio`` shares one budget: the ratio is scale-free, so one
    op's cases pool, except that power-of-two KV scales (ue8m0) make the scale multiply
    exact and move where the indexer's worst element comes from."""
    return (case.op, output, case.params.get("scale_fmt", ""))


def describe_pool(key: tuple[Any, ...]) -> str:
    op, _, scale_fmt = key
    return f"the {op} cases with {scale_fmt} scales" if scale_fmt else f"the {op} cases"


def apply(merged: dict[str, Any], cases: list[Any], note: str,
          command: str = "benchmarks/numerics/honest_calibration.py --apply") -> list[str]:
    """Write the family budgets into the case files (the policy in the module docstring),
    through numcheck.calibrate.casewriter. Where the values come from is said once per file, in its
    header (``# set by: <command> (<date>)``); a changed line loses its own comment, which
    described the old value. A variant that takes bf16's budgets (``budget_like``) is
    covered by bf16's tables and never written as copies."""
    pooled: dict[tuple[Any, ...], float] = {}  # (class, pool key) -> worst max_err_ratio
    for case in cases:
        for prec in ENVELOPE_CLASSES:
            fam = merged.get(f"{case.op}::{case.id}", {}).get(prec, {"worst": {}})
            for output, row in fam["worst"].items():
                if "max_err_ratio" in row:
                    key = (prec, *pool_key(case, output))
                    pooled[key] = max(pooled.get(key, 0.0), row["max_err_ratio"])
    edits: dict[Path, list[Edit]] = {}
    whys: dict[str, str] = {}  # what each value is, printed beside its change
    for case in cases:
        for prec, res in merged.get(f"{case.op}::{case.id}", {}).items():
            held = [v for v in HELD_AS_BF16.get(case.op, ()) if v in case.budgets
                    and lender_of(case.budgets[v].origins) != prec] if prec == "bf16" else []
            variants = (prec, *held)
            for output, worst in res["worst"].items():
                found = (_recall_floor(case, prec, worst, note) if "recall_min" in worst
                         else _family_values(case, prec, output, worst, pooled, note))
                for metric, value, old, why in found:
                    for variant in variants:
                        # where the key comes from now decides whether it is written
                        # there (numcheck.calibrate.casewriter: not into a borrower)
                        origin = case.budgets[variant].origin(output, metric) \
                            if variant in case.budgets else None
                        edits.setdefault(case.source, []).append(
                            Edit((case.id, "budget", variant, output), metric, value,
                                 comment="", origin=origin))
                        whys[f"{case.id}.budget.{variant}.{output}.{metric}"] = why
    changes: list[str] = []
    when = datetime.date.today().isoformat()
    for path, file_edits in edits.items():
        written, skipped = write_edits(path, file_edits, (command, when))
        changes += [f"{path.name} {change.describe()}: {whys[change.where]}"
                    for change in written]
        changes += [f"{path.name} not written: {change.describe()}" for change in skipped]
    return changes


#: (metric, new value, old value, why) of one budget value --apply changes.
Found = list[tuple[str, float, float | None, str]]


def _family_values(case: Any, prec: str, output: str, worst: dict[str, float],
                   pooled: dict[tuple[Any, ...], float], note: str) -> Found:
    """The element budgets of one output that move: bf16 and tf32 ``max_err_ratio`` to the
    pooled value (not on a bf16-stored output such as mHC y, whose whole-ulp ratios are set
    by hand), every other metric only upward."""
    budget = case.budgets[prec].outputs[output]
    current = budget.limits
    found: Found = []
    for metric in (m for m in GATED if m in worst):
        if metric == "max_err_ratio":
            if prec not in ENVELOPE_CLASSES or output in get_op(case.op).output_precision:
                continue
            key = pool_key(case, output)
            value = budget_from({metric: pooled[(prec, *key)]}, metric)
            why = (f"1.25x the family's worst against the rounding envelope, "
                   f"pooled over {describe_pool(key)}, {note} (docs/budgets.md)")
        else:
            judged = dict(worst)
            if metric == "frac_outside":
                frac = outside_as_judged(worst, budget)
                if frac is None:
                    continue  # max_outside already allows that many elements
                judged[metric] = frac  # beyond the rows max_outside_rows sets aside
            value = budget_from(judged, metric)
            if metric in current and value <= current[metric]:
                continue
            why = f"family worst x headroom over {note} (docs/budgets.md)"
        old = current.get(metric)
        if old is None or not math.isclose(old, value):
            found.append((metric, value, old, why))
    return found


def _recall_floor(case: Any, prec: str, worst: dict[str, float], note: str) -> Found:
    """``recall_min`` lowered to numcheck.calibrate's floor for the family's worst miss
    (twice the miss, at least two swaps per row of k) where the case holds it higher; the
    tie recalls stay 1."""
    k = int(case.params.get("index_topk", 0))
    floor = suggest_values(worst, topk=True, k=k)["recall_min"]
    old = case.budgets[prec].topk.limits.get("recall_min") if case.budgets[prec].topk else None
    if old is None or floor >= old:
        return []
    why = (f"the family's worst miss x 2 over {note}, at least 2 swaps per row of {k} "
           "(docs/budgets.md)")
    return [("recall_min", floor, old, why)]


def print_table(paths: list[Path], cases: list[Any]) -> None:
    """Worst of the honest family per case, class and output, the member behind the worst
    element ratio, and the budgets the case file now holds."""
    budgets = {f"{c.op}::{c.id}": c for c in cases}
    print("| case | class | output | seeds | worst max_err_ratio (member) | worst max_band_ratio "
          "| worst frac_outside | case budget: max_err_ratio, max_band_ratio, frac_outside |")
    print("|---|---|---|---|---|---|---|---|")
    for path in paths:
        for key, fams in json.loads(path.read_text())["cases"].items():
            if key not in budgets:
                continue
            for prec, res in fams.items():
                for output, row in res["worst"].items():
                    if "max_err_ratio" not in row:
                        continue
                    who = max(res["by_variant"], key=lambda v: res["by_variant"][v]
                              .get(output, {}).get("max_err_ratio", 0.0))
                    lim = budgets[key].budgets[prec].outputs[output].limits
                    cells = ", ".join(f"{lim[m]:.3g}" if m in lim else "-" for m in
                                      ("max_err_ratio", "max_band_ratio", "frac_outside"))
                    print(f"| {key} | {prec} | {output} | {len(res['seeds'])} | "
                          f"{row['max_err_ratio']:.3g} ({who}) | {row['max_band_ratio']:.3g} | "
                          f"{row['frac_outside']:.3g} | {cells} |")


if __name__ == "__main__":
    raise SystemExit(main())
