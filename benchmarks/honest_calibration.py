"""Two-sided calibration: the honest family's worst error per shipped case, and budgets from it.

    python benchmarks/honest_calibration.py [--seeds 40] [--first-seed 4000] [--device cpu]
        [-k CASE_SUBSTRING] [--json docs/honest-calibration-cpu.json]
    python benchmarks/honest_calibration.py --suggest docs/honest-calibration-cpu.json

Measures every honest family of tests/honest.py (each shipped op at bf16 and tf32: the
shipped variant of that class plus the test-only alternatives) on every shipped case, over the
case's own seeds plus ``--seeds`` fresh ones, each against a fresh CPU reference, the way the
gate measures (numcheck.honest). ``--suggest`` prints the budget tables (docs/budgets.md has
the policy). Seeds 4000+ are the calibration seeds; the held-out check
(benchmarks/reliability_report.py) uses 5000+.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import torch

from numcheck.cases import load_cases
from numcheck.honest import measure_family, suggest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--first-seed", type=int, default=4000)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("-k", dest="select", default="", help="only cases whose id contains this")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--suggest", type=Path, nargs="+", metavar="JSON")
    ap.add_argument("--table", type=Path, nargs="+", metavar="JSON",
                    help="measure nothing: print the markdown table of docs/budgets.md")
    args = ap.parse_args(argv)
    cases = [c for c in load_cases(ROOT / "cases") if not c.perf_only and args.select in c.id]
    if args.table:
        print_table(args.table, cases)
        return 0
    if args.suggest:
        merged: dict[str, Any] = {}
        for path in args.suggest:
            for key, fams in json.loads(path.read_text())["cases"].items():
                for prec, res in fams.items():
                    into = merged.setdefault(key, {}).setdefault(prec, {"worst": {}})
                    for output, row in res["worst"].items():
                        tgt = into["worst"].setdefault(output, {})
                        for m, v in row.items():
                            low = m in ("recall_min", "tie_recall_min")
                            tgt[m] = (min if low else max)(tgt.get(m, v), v)
        print(suggest(merged, cases))
        return 0

    import honest

    honest.register_all()
    report: dict[str, Any] = {"meta": {"torch": torch.__version__, "device": args.device,
                                       "threads": torch.get_num_threads(),
                                       "fresh_seeds": [args.first_seed, args.first_seed
                                                       + args.seeds - 1]},
                              "cases": {}}
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
