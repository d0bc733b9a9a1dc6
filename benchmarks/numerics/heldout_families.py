"""Honest variants on seeds no budget was set from: the checked variants and the honest
families of the selected cases (sweep points included), each on fresh seeds against a
reference made on the spot (numcheck.selftest), held to the case's budgets.

Calibration sets a case's budgets from its seeds and fresh ones (1000 on); this asks
whether they hold elsewhere. Every check is the numerics alone (the cast ledger is not about
seeds). The honest family of a class (tests/honest.py's members and numcheck's GEMM members,
benchmarks/honest_members.py) is held to the budget of the case's variant named like the
class (bf16, tf32). Prints one line per failure and a count per case (the JSON: passed/run
per case and variant, and every failure); exits 1 on a failure::

    python -m benchmarks.numerics.heldout_families cases/sweeps.toml \\
        --seeds 10 --first-seed 5000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="case files")
    ap.add_argument("--select", default="", help="only cases whose id contains this")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=5000)
    ap.add_argument("--no-family", action="store_true", help="the checked variants only")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    import torch

    from benchmarks.honest_members import _honest, register_all
    from numcheck.cases import load_case_file
    from numcheck.ops.registry import get_op
    from numcheck.selftest import family_outcomes, fresh_seed_outcomes

    register_all()
    honest = _honest()
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    rows: list[dict[str, object]] = []
    failures = 0
    started = time.time()
    for path in args.files:
        for case in load_case_file(path):
            if args.select not in case.id or "cpu" not in case.devices or case.perf_only:
                continue
            op = get_op(case.op)
            here = [v for v in case.variants if "cpu" in op.variants[v].devices]
            outcomes = [(o, "variant") for o in
                        fresh_seed_outcomes(case, here, seeds, gates=())]
            if not args.no_family:
                for precision in ("bf16", "tf32"):
                    if precision in case.variants:
                        members = [m for m in honest.family(case.op, precision)
                                   if m != precision]
                        outcomes += [(o, f"{precision} family") for o in family_outcomes(
                            case, precision, members, seeds)]
            bad = [o for o, _ in outcomes if not o.passed]
            failures += len(bad)
            for o in bad:
                print(f"FAIL {case.op}::{case.id} {o.variant} seed {o.seed}: {o.reason}",
                      flush=True)
            print(f"{case.op}::{case.id}: {len(outcomes) - len(bad)}/{len(outcomes)} pass",
                  flush=True)
            rows += [{"case": case.id, "op": case.op, "variant": o.variant, "role": role,
                      "seed": o.seed, "passed": o.passed, "reason": o.reason}
                     for o, role in outcomes]
    print(f"{len(rows) - failures}/{len(rows)} checks pass on seeds {seeds[0]}..{seeds[-1]} "
          f"({time.time() - started:.0f} s)")
    if args.json:
        counts: dict[str, dict[str, list[int]]] = {}
        for row in rows:
            cell = counts.setdefault(f"{row['op']}::{row['case']}", {}).setdefault(
                str(row["variant"]), [0, 0])
            cell[0] += bool(row["passed"])
            cell[1] += 1
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "torch": torch.__version__, "seeds": seeds, "files": [str(f) for f in args.files],
            "passed_of": counts, "failures": [r for r in rows if not r["passed"]]},
            separators=(",", ":")))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
