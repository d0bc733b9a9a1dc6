"""CPU cost of the rounding envelope: one bf16 check with and without the rounding alternatives.

    python benchmarks/envelope_cost.py [--reps 4]

Times ``numcheck.numerics.check`` of the shipped ``bf16`` variant on one fresh seed, once with
the op as shipped (rounding reference plus alternatives) and once with its alternatives
removed, alternating, and prints the median CPU time of each (docs/budgets.md, "The
rounding envelope").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from numcheck.cases import load_cases
from numcheck.numerics import check
from numcheck.ops.registry import get_op
from numcheck.selftest import fresh_golden

CASES = ("mhc_pre::v4pro-t32", "mhc_pre::v4flash-t64", "indexer::v4flash-b4-l2k")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4)
    args = ap.parse_args(argv)
    cases = {f"{c.op}::{c.id}": c for c in load_cases(ROOT / "cases") if not c.perf_only}
    for key in CASES:
        case = replace(cases[key], seeds=(4000,))
        op = get_op(case.op)
        golden, inputs = fresh_golden(op, case)
        ops = {"envelope": op, "single reference": replace(op, rounding_alternatives={})}
        times: dict[str, list[float]] = {label: [] for label in ops}
        for _ in range(args.reps):
            for label, o in ops.items():
                t0 = time.process_time()
                check(o, case, "bf16", "cpu", golden, inputs, regen_hint="")
                times[label].append(time.process_time() - t0)
        env, single = (statistics.median(times[k]) for k in ops)
        spread = {k: f"{min(v):.3f}-{max(v):.3f}" for k, v in times.items()}
        print(f"{key}: bf16 check CPU s, median of {args.reps}: envelope {env:.3f} "
              f"({spread['envelope']}), single reference {single:.3f} "
              f"({spread['single reference']}), ratio {env / single:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
