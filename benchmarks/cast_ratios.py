"""Cast/copy bytes (and, on CUDA, copy share) of every shipped variant on every shipped case.

Bytes moved depend on the shape only, except the indexer's KV pages: a request's context
length decides how many pages exist, and the variants copy the cache's key bytes and scales
once. ``--full-context`` puts every request at ``max_context`` (the most pages any seed can
have), which bounds every seed of the case from above.

The measurement behind the ``max_cast_bytes_ratio`` and ``max_copy_share`` limits in
cases/*.toml and in :func:`numcheck.overhead.gate.default_overhead` (docs/overhead.md)::

    PYTHONPATH=. python benchmarks/cast_ratios.py [--device cuda] [--out DIR]

Prints one row per (case, variant): the ledger's bytes over the op's minimum bytes, and on
CUDA the cast/copy kernels' share of GPU time (five profiled calls). ``$OUT`` (or --out)
gets the same rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

from numcheck.cases import load_cases
from numcheck.inputs import to_device
from numcheck.ops.registry import get_op
from numcheck.overhead.gate import audit_variant
from numcheck.overhead.kernels import COPY


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--cases", default="cases")
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    parser.add_argument("--skip", default="", help="comma-separated variants to leave out")
    parser.add_argument("--seeds", type=int, default=0,
                        help="also seeds 1000..1000+N-1 beyond the case's first (worst kept)")
    parser.add_argument("--full-context", action="store_true",
                        help="indexer: every request at max_context (the most KV pages)")
    args = parser.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    rows = []
    for case in load_cases(Path(args.cases)):
        if case.perf_only or args.device not in case.devices:
            continue
        op = get_op(case.op)
        seeds = [case.seeds[0], *range(1000, 1000 + args.seeds)]
        params = dict(case.params)
        if args.full_context and "min_context" in params:
            params["min_context"] = params["max_context"]
        for name in (op.reference, *case.variants):
            variant = op.variants[name]
            if name in skip or args.device not in variant.devices:
                continue
            ratios, shares, passes = [], [], []
            for seed in seeds:
                inputs = to_device(dict(op.make_inputs(params, seed)), args.device)
                declared = op.min_bytes(params) if op.min_bytes is not None else None
                report = audit_variant(variant.fn, inputs, params, min_bytes=declared,
                                       kernels=args.device == "cuda" and seed == seeds[0])
                ratios.append(report.cast_bytes_ratio)
                passes.append(report.input_copies)
                if report.kernels is not None:
                    shares.append(report.kernels.share(COPY))
            share = max(shares) if shares else None
            rows.append({"case": f"{case.op}::{case.id}", "variant": name,
                         "precision": variant.precision, "device": args.device,
                         "ratio": max(ratios), "ratio_min": min(ratios), "seeds": seeds,
                         "copy_share": share, "entries": len(report.ledger.entries),
                         "input_copies": max(p for _, p in passes),
                         "input_most_read": max(passes, key=lambda x: x[1])[0]})
            print(f"{rows[-1]['case']:<38} {name:<15} {max(ratios):6.3f} "
                  f"{'-' if share is None else f'{share:.3f}'}", file=sys.stderr, flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"cast_ratios-{args.device}.json").write_text(json.dumps(rows, indent=1))
    print(f"{'case':<38} {'variant':<15} {'prec':<5} {'x min (lo)':>10} {'x min (hi)':>10} "
          f"{'copy share':>10} {'input passes':>12}")
    for r in rows:
        share = "-" if r["copy_share"] is None else f"{r['copy_share']:.3f}"
        print(f"{r['case']:<38} {r['variant']:<15} {r['precision']:<5} {r['ratio_min']:>10.3f} "
              f"{r['ratio']:>10.3f} {share:>10} {r['input_copies']:>5.2f} {r['input_most_read']}")
    print(f"seeds: each case's first, then 1000..{999 + args.seeds}" if args.seeds else
          "seeds: each case's first")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
