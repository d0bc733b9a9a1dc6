"""Planted copies made by data-movement ops, against every shipped case (docs/overhead.md).

    PYTHONPATH=. python benchmarks/copy_evidence.py [--out DIR]

Each planted copy of tests/planted.py (``DATA_MOVEMENT_COPIES``: ``torch.cat`` of x's
streams, a flip flipped back, ``torch.where(isfinite(x), x, 0)``, an ``index_select`` of all
of hc_fn or of the KV cache, ``torch.cat`` of the cache's halves, a padded cache, a
``repeat`` of q) runs once under the cast ledger on the first seed of every shipped
CPU-sized case of its op, held to that case's ``bf16`` limits. Prints one row per (bug,
case): the verdict of ``casts.input_copies`` and its message, and, last, how many of the
rows failed that gate. ``$OUT`` (or --out) gets the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from numcheck.cases import load_cases
from numcheck.ops.registry import get_op
from numcheck.overhead.gate import audit_variant, overhead_violations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    args = parser.parse_args(argv)
    import planted

    planted.register_all()
    rows = []
    for case in load_cases(ROOT / "cases"):
        if case.perf_only:
            continue
        op = get_op(case.op)
        inputs = op.make_inputs(case.params, case.seeds[0])
        declared = op.min_bytes(case.params) if op.min_bytes is not None else None
        for bug, name in planted.DATA_MOVEMENT_COPIES[case.op].items():
            report = audit_variant(op.variants[bug].fn, inputs, case.params, min_bytes=declared)
            found = [v for v in overhead_violations(report, case.overhead["bf16"], {"casts"})
                     if v.key == "casts.input_copies"]
            rows.append({"bug": f"{case.op}::{bug}", "input": name,
                         "case": f"{case.op}::{case.id}", "failed": bool(found),
                         "message": found[0].describe() if found else ""})
            print(f"{rows[-1]['bug']:<26} {rows[-1]['case']:<38} "
                  f"{'FAIL' if found else 'pass'}  {rows[-1]['message']}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "copy_evidence.json").write_text(json.dumps(rows, indent=1))
    failed = sum(r["failed"] for r in rows)
    print(f"casts.input_copies failed {failed} of {len(rows)} (planted copy, shipped case) pairs")
    return 0 if failed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
