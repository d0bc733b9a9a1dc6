"""Every aten op the shipped variants call, and how the cast ledger classifies it.

    python -m benchmarks.overhead.aten_ops [--device cpu] [--out DIR]

Runs every shipped variant (reference included) on the first seed of every shipped case
of the device under a logging ``TorchDispatchMode``, and prints one row per aten overload:
its class in :func:`numcheck.overhead.movement.classify` (view, convert, move, compute,
unknown) and the (op, variant) pairs that call it; last, the count per class. The table
behind "What this does to the shipped variants" in docs/overhead.md.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import numcheck.ops.fused  # noqa: F401  (registers the fused variants)
from numcheck.cases import load_cases
from numcheck.inputs import to_device
from numcheck.ops.registry import get_op
from numcheck.overhead.movement import classify


class _Log(TorchDispatchMode):
    """Runs every aten call unchanged and remembers its overload."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[Any] = set()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # as the ledger's mode: no torch._dynamo import
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        self.seen.add(func)
        return func(*args, **(kwargs or {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cases", default="cases")
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    args = parser.parse_args(argv)
    callers: dict[Any, set[str]] = defaultdict(set)
    for case in load_cases(Path(args.cases)):
        if case.perf_only or args.device not in case.devices:
            continue
        op = get_op(case.op)
        inputs = to_device(dict(op.make_inputs(case.params, case.seeds[0])), args.device)
        for name in dict.fromkeys((op.reference, *case.variants)):
            if args.device not in op.variants[name].devices:
                continue
            with torch.no_grad(), _Log() as log:
                op.variants[name].fn(dict(inputs), case.params)
            for func in log.seen:
                callers[func].add(f"{case.op}:{name}")
    rows = sorted(({"op": str(func).removeprefix("aten."), "class": classify(func).kind,
                    "called_by": sorted(who)} for func, who in callers.items()),
                  key=lambda r: (r["class"], r["op"]))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"aten_ops-{args.device}.json").write_text(json.dumps(rows, indent=1))
    print(f"{'aten op':<42} {'class':<8} called by")
    for r in rows:
        print(f"{r['op']:<42} {r['class']:<8} {', '.join(r['called_by'])}")
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[r["class"]] += 1
    by_class = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"{len(rows)} aten overloads: {by_class}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
