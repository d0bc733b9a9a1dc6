"""Calibrate budgets for one implementation scheme (a variant) and check them on held-out seeds.

    python -m benchmarks.numerics.calibrate_scheme --variants bf16_folded [-k CASE] \\
        [--seeds 24 --first-seed 1000] [--holdout 10 --holdout-first 2000] [--out DIR]

For every case of the variant's op (``-k``: ids containing this), it measures the variant
over the case's seeds plus ``--seeds`` fresh ones (``numcheck.calibrate.measure``), prints
budget tables by the project's headroom policy (``numcheck.calibrate.suggest``: twice the
worst; docs/budgets.md), then checks those budgets on ``--holdout`` other seeds that the
calibration never saw, each against its own fresh reference. Prints the tables, then one
line per case: held-out seeds passed / run, and the worst held-out failure if any.
"""

from __future__ import annotations

import argparse
import json
import os
import tomllib
from dataclasses import replace
from pathlib import Path

from numcheck.calibrate import measure, suggest
from numcheck.cases import Case, load_cases
from numcheck.numerics.budgets import complete_budget
from numcheck.ops.registry import get_op
from numcheck.selftest import fresh_seed_outcomes


def _with_budgets(case: Case, variant: str, toml_text: str) -> Case:
    """``case`` holding ``variant`` to the suggested tables (the same completion as a case file)."""
    op = get_op(case.op)
    tables = tomllib.loads(toml_text).get(case.id, {}).get("budget", {}).get(variant, {})
    budget = complete_budget(
        op.variants[variant].precision, tables, outputs=op.outputs,
        topk_output=op.topk.indices if op.topk else None,
        output_precision=op.output_precision,
    )
    return replace(case, variants=(variant,), budgets={**case.budgets, variant: budget})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", required=True, help="comma-separated variant names")
    parser.add_argument("-k", dest="select", default="")
    parser.add_argument("--cases", type=Path, default=Path("cases"))
    parser.add_argument("--seeds", type=int, default=24)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--holdout", type=int, default=10)
    parser.add_argument("--holdout-first", type=int, default=2000)
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    args = parser.parse_args(argv)
    wanted = args.variants.split(",")
    cases = [c for c in load_cases(args.cases)
             if args.select in c.id and not c.perf_only and set(wanted) & set(c.variants)]
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for case in cases:
        only = replace(case, variants=tuple(v for v in case.variants if v in wanted))
        worst = measure(only, "cpu", args.seeds, args.first_seed)
        runs[f"{case.op}::{case.id}"] = {k: v for k, v in worst.items()
                                         if k.split("/")[0] in wanted}
    tables = suggest([{"cases": runs}], cases)
    print(tables)
    holdout = list(range(args.holdout_first, args.holdout_first + args.holdout))
    lines = []
    for case in cases:
        for variant in wanted:
            if variant not in case.variants:
                continue
            held = _with_budgets(case, variant, tables)
            outcomes = fresh_seed_outcomes(held, [variant], holdout)
            passed = sum(o.passed for o in outcomes)
            bad = next((o for o in outcomes if not o.passed), None)
            lines.append(f"{case.op}::{case.id} {variant}: held-out seeds "
                         f"{holdout[0]}..{holdout[-1]} passed {passed}/{len(outcomes)}"
                         + (f"; first failure seed {bad.seed}: {bad.reason}" if bad else ""))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "calibrate_scheme.json").write_text(json.dumps(
            {"calibration_seeds": f"case seeds + {args.first_seed}..{args.first_seed + args.seeds - 1}",
             "holdout_seeds": holdout, "worst": runs, "tables": tables, "holdout": lines},
            indent=1))
    print(f"calibration seeds: each case's own + {args.first_seed}..{args.first_seed + args.seeds - 1}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
