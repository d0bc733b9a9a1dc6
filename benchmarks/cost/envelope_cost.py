"""CPU cost of the rounding envelope: one check with and without the envelope's members.

    python -m benchmarks.cost.envelope_cost [--reps 4]

Times ``numcheck.check.against_golden.run_numerics`` of the shipped ``bf16`` and ``tf32`` variants
on one fresh seed, once with the op as shipped (rounding reference plus the members derived from
its GEMM site, numcheck.honest.gemm_family) and once with the reference alone (no
``gemm_site``, no alternatives), alternating, each rep on fresh ``CaseInputs`` (the envelope is
made once per seed and kept there: a rep that reused them would time nothing), the inputs made
before the clock starts. Prints the median CPU time of each (docs/budgets.md, "The rounding
envelope").
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

from numcheck.cases import load_cases
from numcheck.check.against_golden import run_numerics
from numcheck.check.run import CaseInputs
from numcheck.ops.registry import get_op
from numcheck.selftest import fresh_golden

ROOT = Path(__file__).resolve().parents[2]

CASES = ("mhc_pre::v4pro-t32", "mhc_pre::v4flash-t64", "indexer::v4flash-b4-l2k",
         "indexer::v4flash-b2-l1k-contiguous")
SEED = 4000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4)
    args = ap.parse_args(argv)
    cases = {f"{c.op}::{c.id}": c for c in load_cases(ROOT / "cases") if not c.perf_only}
    for key in CASES:
        case = replace(cases[key], seeds=(SEED,))
        op = get_op(case.op)
        golden, _ = fresh_golden(op, case)
        ops = {"envelope": op,
               "reference alone": replace(op, rounding_alternatives={}, gemm_site=None)}
        for variant in ("bf16", "tf32"):
            times: dict[str, list[float]] = {label: [] for label in ops}
            for _ in range(args.reps):
                for label, o in ops.items():
                    inputs = CaseInputs(o, case)
                    inputs.get(SEED)
                    t0 = time.process_time()
                    run_numerics(o, case, variant, "cpu", golden, inputs)
                    times[label].append(time.process_time() - t0)
            env, single = (statistics.median(times[k]) for k in ops)
            spread = {k: f"{min(v):.3f}-{max(v):.3f}" for k, v in times.items()}
            print(f"{key} {variant}: check CPU s, median of {args.reps}: envelope {env:.3f} "
                  f"({spread['envelope']}), reference alone {single:.3f} "
                  f"({spread['reference alone']}), +{env - single:.3f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
