"""What the cast ledger costs: a variant's call time bare, under the ledger without and with
round trips by value (docs/overhead.md).

    python -m benchmarks.cost.ledger_cost [--repeats 15] [--cpu-time] [--out DIR]
    python -m benchmarks.cost.ledger_cost --per-call [--repeats 15]

For a few shipped (case, variant) pairs, on the CPU: the median wall time of the variant
alone, under ``CastLedger(by_value=False)`` (storage-path round trips only) and under
``CastLedger()`` (also by value: round trips and copies), both given the variant's inputs
as :func:`numcheck.overhead.limits.audit_variant` does, interleaved so machine load hits all
three alike. Prints one row per pair, then the ratios. ``--cpu-time``: process CPU time on
one thread (steadier on a shared machine).

``--per-call``: what the ledger adds to one aten call, apart from any variant: a loop of
small aten calls (views, a cast, pointwise math, softmax on a [64, 64] fp32 tensor), CPU
time on one thread, bare and under ``CastLedger()`` twice, interleaved: given an input of
another dtype and size (no result can be a copy of it: the common case), and given the
[64, 64] fp32 tensor as its input (every fp32 result is compared with it by value, the most
the copy-by-value check can cost). Prints microseconds per aten call each way. Only
``CastLedger`` is used, so it also runs against an older tree:
``PYTHONPATH=<that tree> python benchmarks/cost/ledger_cost.py --per-call`` (as a script: ``-m``
would put this tree first).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


#: Rounds of :func:`small_calls` per timed sample (300 rounds of 12 aten calls each).
ROUNDS = 300


def small_calls(x: torch.Tensor, rounds: int = ROUNDS) -> None:
    """``rounds`` x 12 small aten calls: views, casts, pointwise math, a softmax."""
    for _ in range(rounds):
        y = x.view(-1).view(64, 64).t()  # view, view, transpose
        z = y.to(torch.bfloat16)  # _to_copy
        s = (z.float() * 2 + 1).relu()  # _to_copy, mul, add, relu
        torch.softmax(s, -1).sum(0).unsqueeze(0).add_(1)  # _softmax, sum, unsqueeze, add_


class _Count(TorchDispatchMode):
    """Counts the aten calls made under it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # as the ledger's mode: no torch._dynamo import
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def per_call(repeats: int) -> int:
    """Microseconds the ledger adds to one aten call (CPU time, one thread)."""
    torch.set_num_threads(1)
    x = torch.randn(64, 64)
    with torch.no_grad(), _Count() as count:
        small_calls(x)
    other = torch.randn(8, 8).to(torch.bfloat16)  # no result has its dtype and size
    run: dict[str, Callable[[], None]] = {
        "bare": lambda: small_calls(x),
        "no match": lambda: _under_ledger(x, other),
        "every match": lambda: _under_ledger(x, x),
    }
    times: dict[str, list[float]] = {k: [] for k in run}
    with torch.no_grad():
        small_calls(x)  # warm up
        for _ in range(repeats):
            for mode, fn in run.items():
                start = time.process_time()
                fn()
                times[mode].append(time.process_time() - start)
    us = {k: 1e6 * statistics.median(v) / count.calls for k, v in times.items()}
    print(f"{count.calls} aten calls per sample; median CPU time of {repeats} samples, one "
          f"thread, torch {torch.__version__}")
    print(f"us per aten call: bare {us['bare']:.1f}; under the ledger {us['no match']:.1f} "
          f"(+{us['no match'] - us['bare']:.1f}) with an input no result matches, "
          f"{us['every match']:.1f} (+{us['every match'] - us['bare']:.1f}) with one every "
          "fp32 result matches in dtype and size")
    return 0


def _under_ledger(x: torch.Tensor, given: torch.Tensor) -> None:
    with CastLedger(inputs={"input": given}):
        small_calls(x)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--per-call", action="store_true",
                        help="what the ledger adds to one aten call, in a loop of small calls")
    parser.add_argument("--cpu-time", action="store_true",
                        help="process CPU time on one thread instead of wall time: steadier "
                        "on a loaded machine (waiting for a core is not counted)")
    parser.add_argument("--out", default=os.environ.get("OUT", ""))
    args = parser.parse_args(argv)
    if args.per_call:
        return per_call(args.repeats)
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
