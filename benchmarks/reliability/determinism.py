"""Is every variant bit-identical run to run on one device?

    python -m benchmarks.reliability.determinism [--device cuda] [--runs 20] [-k CASE] \
        [--json out.json]

For every shipped case (its first seed) and every variant that runs on ``--device``, runs the
variant ``--runs`` times on the same inputs and compares each output's raw bytes with the
first run's. Prints a table, last, with the number of runs that differed and the largest
absolute difference seen. Exact ties in the indexer's top-k may legally come back in another
order or pick another tied token; those are counted separately ("topk sets differ").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from numcheck.cases import load_cases
from numcheck.inputs import to_device
from numcheck.ops.registry import get_op
from numcheck.prepare import prepare

ROOT = Path(__file__).resolve().parents[2]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).cpu()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("-k", dest="select", default="", help="only cases whose id contains this")
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    for case in load_cases(ROOT / "cases"):
        if case.perf_only or args.select not in case.id:  # perf-only: timing cases
            continue
        op = get_op(case.op)
        given = to_device(op.make_inputs(case.params, case.seeds[0]), args.device)
        for name in (op.reference, *case.variants):
            variant = op.variants[name]
            if variant.why_not(args.device):  # another device, or a library missing
                continue
            # Its one-time preparation (weights quantized at load time), as the gate makes it.
            prepared = prepare(variant, given, case.params, args.device)
            inputs = given if prepared is None else prepared.call_inputs(given)
            first = {k: v.clone() for k, v in variant.fn(inputs, case.params).items()}
            _sync(args.device)
            differ, set_differ, max_abs = 0, 0, 0.0
            for _ in range(args.runs - 1):
                out = variant.fn(inputs, case.params)
                _sync(args.device)
                changed = False
                for k, t in out.items():
                    if torch.equal(_bits(t), _bits(first[k])):
                        continue
                    changed = True
                    if op.topk is not None and k == op.topk.indices:
                        a, b = t.sort(dim=-1).values, first[k].sort(dim=-1).values
                        set_differ += int(not torch.equal(a, b))
                        continue
                    d = (t.double() - first[k].double()).abs()
                    d = d[torch.isfinite(d)]
                    max_abs = max(max_abs, float(d.max()) if d.numel() else float("nan"))
                differ += changed
            rows.append({"case": f"{case.op}::{case.id}", "variant": name, "device": args.device,
                         "runs": args.runs, "runs_differing": differ,
                         "topk_sets_differ": set_differ, "max_abs_diff": max_abs})
    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
           "threads": torch.get_num_threads()}
    if args.json:
        args.json.write_text(json.dumps({"env": env, "rows": rows}, indent=1) + "\n")
    print(f"torch {env['torch']} cuda {env['cuda']} on {env['gpu']}, {args.runs} runs each")
    print(f"{'case':36} {'variant':15} {'runs differing':>15} {'topk sets differ':>17} "
          f"{'max |diff|':>11}")
    for r in rows:
        print(f"{r['case']:36} {r['variant']:15} {r['runs_differing']:>15} "
              f"{r['topk_sets_differ']:>17} {r['max_abs_diff']:>11.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
