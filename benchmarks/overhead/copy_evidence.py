"""Planted copies made by data-movement ops, against every shipped case (docs/overhead.md).

    python -m benchmarks.overhead.copy_evidence [--out DIR]
    python -m benchmarks.overhead.copy_evidence --ratios

Each planted copy of tests/planted.py (``DATA_MOVEMENT_COPIES``: ``torch.cat`` of x's
streams, a flip flipped back, ``torch.where(isfinite(x), x, 0)``, an ``index_select`` of all
of hc_fn or of the KV cache, ``torch.cat`` of the cache's halves, a padded cache, a
``repeat`` of q) runs once under the cast ledger on the first seed of every shipped
CPU-sized case of its op, held to that case's ``bf16`` limits. Prints one row per (bug,
case): the verdict of ``casts.input_copies`` and its message, and, last, how many of the
rows failed that gate. ``$OUT`` (or --out) gets the rows as JSON.

``--ratios``: what one extra full copy does to ``cast_bytes_ratio`` instead: per shipped
case, the ``bf16`` variant's ratio and that of its planted extra copy (``kt_contiguous``: a
``.contiguous()`` of the indexer's K^T, a derived operand and no input; ``x_copy``: a second
copy of mHC's x), against the case's ``bf16`` limit.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from numcheck.cases import load_cases
from numcheck.ops.registry import get_op
from numcheck.overhead.limits import audit_variant, overhead_violations

ROOT = Path(__file__).resolve().parents[2]


def shipped_cases() -> Iterator[tuple[Any, Any, Any, int | None]]:
    """Each shipped case that runs on a CPU, with its op, its first seed's inputs and the
    op's declared minimum bytes (None where the op declares none)."""
    for case in load_cases(ROOT / "cases"):
        if case.perf_only:
            continue
        op = get_op(case.op)
        inputs = op.make_inputs(case.params, case.seeds[0])
        declared = op.min_bytes(case.params) if op.min_bytes is not None else None
        yield case, op, inputs, declared


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    parser.add_argument("--ratios", action="store_true",
                        help="the bytes ratio of bf16 and of its planted extra copy instead")
    args = parser.parse_args(argv)
    from tests import planted

    planted.register_all()
    if args.ratios:
        return ratios()
    rows = []
    for case, op, inputs, declared in shipped_cases():
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


#: Per op: the planted extra full copy whose bytes ``--ratios`` shows (tests/planted.py).
EXTRA_COPY = {"indexer": "kt_contiguous", "mhc_pre": "x_copy"}


def ratios() -> int:
    """``cast_bytes_ratio`` of bf16 and of its planted extra copy on each shipped case."""
    print(f"{'case':<38} {'extra copy':<14} {'bf16':>6} {'copy':>6} {'added':>6} {'limit':>6}  "
          "cast_bytes_ratio")
    missed = 0
    for case, op, inputs, declared in shipped_cases():
        bug = EXTRA_COPY[case.op]
        bf16, copy = (audit_variant(op.variants[v].fn, inputs, case.params,
                                    min_bytes=declared).cast_bytes_ratio for v in ("bf16", bug))
        limit = case.overhead["bf16"].max_cast_bytes_ratio
        failed = limit is not None and copy > limit
        missed += not failed
        print(f"{case.op + '::' + case.id:<38} {bug:<14} {bf16:>6.2f} {copy:>6.2f} "
              f"{copy - bf16:>+6.2f} {limit if limit is not None else '-':>6}  "
              f"{'FAIL' if failed else 'pass'}")
    print("bytes over the op's minimum, each case's first seed; limits: the case's bf16")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
