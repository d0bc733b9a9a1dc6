"""Fidelity of numcheck's speedup figure against independent timers.

For production shapes, the variant-over-reference speedup is measured

- by numcheck (interleaved CUDA events, median of paired ratios), ``--repeats`` times, each
  a fresh timing run in this process: the spread across repeats is the figure's stability;
- by ``triton.testing.do_bench`` (median, its own warm-up, L2 flush between calls);
- by the sum of CUDA kernel times from ``torch.profiler`` (launch gaps excluded).

and the differences are reported. Targets: within 5% of the independent timers; spread
across 5 repeats under 3%. Usage (GPU machine, repo root)::

    python -m benchmarks.speed.fidelity --repeats 5 --json $OUT/fidelity.json
    python -m benchmarks.speed.fidelity --device cpu --tiny --repeats 2 --json OUT.json  # plumbing

On the CPU (``--device cpu``; ``--tiny``: small shapes, the CPU plumbing test of
tests/test_benchmark_plumbing.py) there is no do_bench and no kernel time: numcheck's figure
alone, the other columns "-".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from typing import Any

import torch

from numcheck.devices import device_name
from numcheck.inputs import to_device
from numcheck.ops.registry import get_op
from numcheck.perf.speedup import speedup_interval
from numcheck.perf.timing import TimingConfig, time_interleaved

#: (label, op, preset, shape, variant): the production shapes and the seed's mHC shape.
SHAPES = [
    ("indexer v4flash B=64 L=8192 decode", "indexer", "v4flash",
     {"batch": 64, "max_context": 8192}, "bf16"),
    ("indexer v4flash B=64 L=8192 decode", "indexer", "v4flash",
     {"batch": 64, "max_context": 8192}, "tf32"),
    ("mhc_pre v4pro T=4096 hc_fn [24, 28672]", "mhc_pre", "v4pro", {"tokens": 4096}, "bf16"),
    ("mhc_pre v4pro T=4096 hc_fn [24, 28672]", "mhc_pre", "v4pro", {"tokens": 4096},
     "bf16_roundtrip"),
]

#: The same checks at small shapes (--tiny).
TINY_SHAPES = [
    ("indexer B=2 L=256", "indexer", "v4flash",
     {"batch": 2, "max_context": 256, "heads": 8, "head_dim": 32, "index_topk": 16}, "bf16"),
    ("mhc_pre T=8 C=64", "mhc_pre", "v4pro", {"tokens": 8, "hidden": 64}, "bf16"),
]

Fn = Callable[[], object]


def kernel_seconds(fn: Fn, calls: int = 20) -> float | None:
    """Mean per call of the summed device-side event times (kernels, memcpy) in torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
        total_us = sum(
            e.time_range.elapsed_us() for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
        )
    except Exception as exc:  # noqa: BLE001 (report, keep the other timers)
        print(f"fidelity: torch.profiler failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    return total_us / calls / 1e6 if total_us > 0 else None


def do_bench_seconds(fn: Fn) -> float | None:
    try:
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=25, rep=200, return_mode="median")) / 1e3
    except Exception as exc:  # noqa: BLE001 (no triton, or one without this GPU)
        print(f"fidelity: do_bench unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def measure(label: str, op_name: str, preset: str, shape: dict[str, Any], variant: str,
            repeats: int, rounds: int, device: str = "cuda") -> dict[str, Any]:
    op = get_op(op_name)
    params = op.resolve_params(preset, shape)
    inputs = to_device(op.make_inputs(params, 0), device)
    ref_fn = op.variants[op.reference].fn
    var_fn = op.variants[variant].fn

    def ref() -> object:
        return ref_fn(inputs, params)

    def var() -> object:
        return var_fn(inputs, params)

    speedups, lows, highs = [], [], []
    for i in range(repeats):
        times = time_interleaved(ref, var, device, TimingConfig(rounds=rounds, warmup=3))
        est = speedup_interval(times.reference, times.variant, seed=i)
        speedups.append(est.median)
        lows.append(est.low)
        highs.append(est.high)
    nc = statistics.median(speedups)
    spread = (max(speedups) - min(speedups)) / nc
    gpu = device == "cuda"  # do_bench and the profiler's kernel times are the GPU's
    bench_ref, bench_var = (do_bench_seconds(ref), do_bench_seconds(var)) if gpu else (None,
                                                                                         None)
    do_bench = bench_ref / bench_var if bench_ref and bench_var else None
    prof_ref, prof_var = (kernel_seconds(ref), kernel_seconds(var)) if gpu else (None, None)
    prof = prof_ref / prof_var if prof_ref and prof_var else None
    return {
        "shape": label, "variant": variant, "reference": op.reference,
        "numcheck_speedups": speedups, "numcheck_lows": lows, "numcheck_highs": highs,
        "numcheck_speedup": nc, "spread_across_repeats": spread,
        "do_bench_ref_s": bench_ref, "do_bench_var_s": bench_var, "do_bench_speedup": do_bench,
        "diff_vs_do_bench": None if do_bench is None else nc / do_bench - 1,
        "profiler_speedup": prof, "diff_vs_profiler": None if prof is None else nc / prof - 1,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        choices=("cpu", "cuda"))
    parser.add_argument("--tiny", action="store_true", help="small shapes: the CPU plumbing test")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("fidelity: --device cuda, and torch sees no CUDA device", file=sys.stderr)
        return 2
    rows = [measure(*s, repeats=args.repeats, rounds=args.rounds, device=args.device)
            for s in (TINY_SHAPES if args.tiny else SHAPES)]
    name = device_name(args.device, cpu_model=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"torch": torch.__version__, "cuda": torch.version.cuda,
                       "device": name, "repeats": args.repeats,
                       "rounds": args.rounds, "results": rows}, handle, indent=2)

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:+.1%}"

    print(f"fidelity ({name}, torch {torch.__version__}, "
          f"{args.repeats} repeats x {args.rounds} rounds); targets: |diff| <= 5%, spread < 3%")
    print("| shape | variant | numcheck speedup (5 runs) | spread | do_bench | diff | "
          "profiler kernels | diff |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        runs = " ".join(f"{s:.3f}" for s in r["numcheck_speedups"])
        db = _fmt(r["do_bench_speedup"])
        print(f"| {r['shape']} | {r['variant']} | {r['numcheck_speedup']:.3f} ({runs}) | "
              f"{r['spread_across_repeats']:.1%} | {db} | {pct(r['diff_vs_do_bench'])} | "
              f"{_fmt(r['profiler_speedup'])} | {pct(r['diff_vs_profiler'])} |")
    return 0


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


if __name__ == "__main__":
    sys.exit(main())
