"""Cast/copy bytes, input passes (and, on CUDA, copy share) of every shipped variant and case.

Bytes moved depend on the shape only, except the indexer's KV pages: a request's context
length decides how many pages exist, and the variants copy the cache's key bytes and scales
once. ``--full-context`` puts every request at ``max_context`` (the most pages any seed can
have), which bounds every seed of the case from above.

The measurement behind the ``max_cast_bytes_ratio`` and ``max_input_copies`` limits in
cases/*.toml, and behind :data:`numcheck.overhead.limits.DEFAULT_CAST_BYTES_RATIO`
(docs/overhead.md)::

    python -m benchmarks.overhead.cast_ratios --full-context [--device cuda] [--out DIR]
    python -m benchmarks.overhead.cast_ratios --perf --device cuda --full-context
    python -m benchmarks.overhead.cast_ratios --perf --device meta --full-context

``--perf`` measures the perf-only cases (cases/perf.toml, production shapes) instead of
the CPU-sized ones. ``--device meta`` runs the variants on meta tensors: shapes only, so
bytes and passes exactly as on a GPU at no compute cost (inputs are still made on the CPU:
about a minute for the largest perf case), but no copy share, no by-value matches, and no
Triton variant.

Prints one row per (case, variant): the ledger's bytes over the op's minimum bytes, the
input read most (passes, and one pass as a share of the minimum bytes), and on CUDA the
cast/copy kernels' share of GPU time (five profiled calls); then the limits a case file
would take: ``max_cast_bytes_ratio`` 2% over the measured worst (floor 0.05) and, per
input, ``max_input_copies = { kv_cache = 2 }`` where an input that is not metadata-sized is
read more than once. ``$OUT`` (or --out) gets the same rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

from numcheck.cases import load_cases
from numcheck.inputs import to_device
from numcheck.ops.registry import get_op
from numcheck.overhead.kernels import COPY
from numcheck.overhead.limits import (
    DEFAULT_INPUT_COPIES,
    METADATA_SHARE,
    audit_variant,
    whole_passes,
)
from numcheck.prepare import prepare

#: The case files' policy: 2% over the measured worst, at least this much.
HEADROOM = 1.02
FLOOR = 0.05


def suggested_ratio(measured: float) -> float:
    """The ``max_cast_bytes_ratio`` a case file takes: 2% over, rounded up, floor 0.05."""
    return max(FLOOR, math.ceil(measured * HEADROOM * 100) / 100)


def suggested_input_limits(reads: dict[str, Any]) -> str:
    """``{ kv_cache = 2 }`` for the meaningful inputs read more than the default allows."""
    # The passes rounded up to a whole pass: a variant's structure (two passes over the
    # cache) is an exact bound that a short-context seed reaches (1.97 at full context,
    # 2.00 at the case's own seeds).
    over = {name: whole_passes(r["passes"]) for name, r in reads.items()
            if r["share"] >= METADATA_SHARE and r["passes"] > DEFAULT_INPUT_COPIES}
    if not over:
        return ""
    return "{ " + ", ".join(f"{name} = {limit:g}" for name, limit in sorted(over.items())) + " }"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu, cuda, or meta (shapes only: bytes and passes)")
    parser.add_argument("--cases", default="cases")
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    parser.add_argument("--skip", default="", help="comma-separated variants to leave out")
    parser.add_argument("--only", default="", help="comma-separated case ids to measure")
    parser.add_argument("--seeds", type=int, default=0,
                        help="also seeds 1000..1000+N-1 beyond the case's first (worst kept)")
    parser.add_argument("--full-context", action="store_true",
                        help="indexer: every request at max_context (the most KV pages)")
    parser.add_argument("--perf", action="store_true",
                        help="the perf-only cases (production shapes) instead of the others")
    parser.add_argument("--shares", action="store_true",
                        help="also print one pass over each input as a share of the op's "
                        "minimum bytes (what METADATA_SHARE is set against)")
    args = parser.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    only = {s for s in args.only.split(",") if s}
    meta = args.device == "meta"
    rows: list[dict[str, Any]] = []
    input_shares: dict[str, dict[str, float]] = {}
    for case in load_cases(Path(args.cases)):
        if case.perf_only != args.perf or (only and case.id not in only):
            continue
        if not meta and args.device not in case.devices:
            continue
        op = get_op(case.op)
        seeds = [case.seeds[0], *range(1000, 1000 + args.seeds)]
        params = dict(case.params)
        if args.full_context and "min_context" in params:
            params["min_context"] = params["max_context"]
        declared = op.min_bytes(params) if op.min_bytes is not None else None
        inputs_by_seed = {seed: to_device(dict(op.make_inputs(params, seed)), args.device)
                          for seed in seeds}
        if declared:
            input_shares[f"{case.op}::{case.id}"] = {
                name: t.numel() * t.element_size() / declared
                for name, t in inputs_by_seed[seeds[0]].items()}
        for name in dict.fromkeys((op.reference, *case.variants)):
            variant = op.variants[name]
            if name in skip or (not meta and args.device not in variant.devices):
                continue
            ratios, shares, passes = [], [], []
            try:
                for seed in seeds:
                    # A variant's one-time preparation (load time) is made first, as the
                    # gate makes it, and kept out of the per-call ledger.
                    prepared = (None if variant.prepare is None else
                                prepare(variant, inputs_by_seed[seed], params, args.device))
                    report = audit_variant(
                        variant.fn, inputs_by_seed[seed], params, min_bytes=declared,
                        kernels=args.device == "cuda" and seed == seeds[0], prepared=prepared)
                    ratios.append(report.cast_bytes_ratio)
                    passes.append(report.input_reads())
                    if report.kernels is not None:
                        shares.append(report.kernels.share(COPY))
            except Exception as error:  # a variant that cannot run here (Triton on meta)
                if not meta:
                    raise
                print(f"{case.op}::{case.id} {name}: skipped on meta ({type(error).__name__})",
                      file=sys.stderr)
                continue
            # Per input: the most passes over the seeds; the gate looks at meaningful ones.
            worst: dict[str, Any] = {}
            for reads in passes:
                for r in reads:
                    if r.name not in worst or r.passes > worst[r.name].passes:
                        worst[r.name] = r
            meaningful = [r for r in worst.values() if r.share >= METADATA_SHARE]
            top = max(meaningful, key=lambda r: r.passes, default=None)
            rows.append({
                "case": f"{case.op}::{case.id}", "variant": name,
                "precision": variant.precision, "device": args.device,
                "ratio": max(ratios), "ratio_min": min(ratios), "seeds": seeds,
                "copy_share": max(shares) if shares else None,
                "entries": len(report.ledger.entries),
                "input_copies": top.passes if top else 0.0,
                "input_most_read": top.name if top else "",
                "input_reads": {r.name: {"passes": r.passes, "share": r.share}
                                for r in worst.values()},
                "suggest_max_cast_bytes_ratio": suggested_ratio(max(ratios)),
            })
            rows[-1]["suggest_max_input_copies"] = suggested_input_limits(rows[-1]["input_reads"])
            print(f"{rows[-1]['case']:<44} {name:<15} {max(ratios):7.3f} "
                  f"{rows[-1]['input_most_read']} {rows[-1]['input_copies']:.3f}",
                  file=sys.stderr, flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        tag = f"{args.device}{'-perf' if args.perf else ''}"
        (Path(args.out) / f"cast_ratios-{tag}.json").write_text(json.dumps(rows, indent=1))
    print(f"{'case':<44} {'variant':<15} {'prec':<5} {'x min (lo)':>10} {'x min (hi)':>10} "
          f"{'copy share':>10}  {'most-read input (passes, share of min bytes)':<40}  "
          "case-file limits")
    for r in rows:
        share = "-" if r["copy_share"] is None else f"{r['copy_share']:.3f}"
        top = r["input_most_read"]
        read = (f"{top} {r['input_copies']:.3f} ({100 * r['input_reads'][top]['share']:.3g}%)"
                if top else "-")
        limits = f"max_cast_bytes_ratio = {r['suggest_max_cast_bytes_ratio']:.2f}"
        if r["suggest_max_input_copies"]:
            limits += f", max_input_copies = {r['suggest_max_input_copies']}"
        print(f"{r['case']:<44} {r['variant']:<15} {r['precision']:<5} {r['ratio_min']:>10.3f} "
              f"{r['ratio']:>10.3f} {share:>10}  {read:<40}  {limits}")
    if args.shares:
        print("one pass over each input, % of the op's minimum bytes (first seed)")
        for case_name, by_input in input_shares.items():
            row = "  ".join(f"{name} {100 * share:.3g}%" for name, share in
                            sorted(by_input.items(), key=lambda kv: -kv[1]))
            print(f"{case_name:<44} {row}")
    print(f"seeds: each case's first, then 1000..{999 + args.seeds}" if args.seeds else
          "seeds: each case's first")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
