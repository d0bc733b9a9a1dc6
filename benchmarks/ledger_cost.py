"""What the cast ledger costs: a variant's call time bare, under the ledger without and with
round trips by value (docs/overhead.md).

    PYTHONPATH=. python benchmarks/ledger_cost.py [--repeats 15] [--out DIR]

For a few shipped (case, variant) pairs, on the CPU: the median wall time of the variant
alone, under ``CastLedger(by_value=False)`` (storage-path round trips only) and under
``CastLedger()`` (also by value: round trips and copies), both given the variant's inputs
as :func:`numcheck.overhead.gate.audit_variant` does, interleaved so machine load hits all
three alike. Prints one row per pair, then the ratios. ``--cpu-time``: process CPU time on
one thread (steadier on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from numcheck.cases import load_cases
from numcheck.ops.registry import get_op
from numcheck.overhead.casts import CastLedger

PAIRS = (
    ("mhc_pre", "v4flash-t64", "bf16"),
    ("mhc_pre", "v4flash-t64", "bf16_roundtrip"),
    ("mhc_pre", "v4pro-t512-sampled", "bf16"),
    ("indexer", "v4flash-b4-l2k", "bf16"),
    ("indexer", "v4pro-b2-l4k-mtp2", "fp32"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--cpu-time", action="store_true",
                        help="process CPU time on one thread instead of wall time: steadier "
                        "on a loaded machine (waiting for a core is not counted)")
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    args = parser.parse_args(argv)
    clock = time.perf_counter
    if args.cpu_time:
        torch.set_num_threads(1)
        clock = time.process_time
    cases = {(c.op, c.id): c for c in load_cases(Path("cases"))}
    rows = []
    for op_name, case_id, variant in PAIRS:
        case = cases[(op_name, case_id)]
        op = get_op(op_name)
        fn = op.variants[variant].fn
        inputs = op.make_inputs(case.params, case.seeds[0])
        fn(dict(inputs), case.params)  # warm up
        times: dict[str, list[float]] = {"bare": [], "path": [], "value": []}
        for _ in range(args.repeats):
            for mode in times:
                start = clock()
                with torch.no_grad():
                    if mode == "bare":
                        fn(dict(inputs), case.params)
                    else:
                        with CastLedger(by_value=mode == "value", inputs=dict(inputs)):
                            fn(dict(inputs), case.params)
                times[mode].append(clock() - start)
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append({"case": f"{op_name}::{case_id}", "variant": variant,
                     **{f"{k}_ms": 1e3 * v for k, v in med.items()},
                     "path_over_bare": med["path"] / med["bare"],
                     "value_over_bare": med["value"] / med["bare"],
                     "value_over_path": med["value"] / med["path"]})
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "ledger_cost.json").write_text(json.dumps(rows, indent=1))
    print(f"{'case':<30} {'variant':<15} {'bare ms':>8} {'ledger ms':>10} {'+value ms':>10} "
          f"{'ledger/bare':>11} {'+value/bare':>11} {'+value/ledger':>13}")
    for r in rows:
        print(f"{r['case']:<30} {r['variant']:<15} {r['bare_ms']:>8.2f} {r['path_ms']:>10.2f} "
              f"{r['value_ms']:>10.2f} {r['path_over_bare']:>11.2f} {r['value_over_bare']:>11.2f} "
              f"{r['value_over_path']:>13.2f}")
    what = "CPU time" if args.cpu_time else "wall time"
    print(f"median {what} of {args.repeats} interleaved calls each; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
