"""Cast ledger and kernel audit of every variant at production-ish shapes, on a GPU.

The evidence behind docs/evidence/2026-11-29-h200-gate-and-perf/: where each variant's time
goes, by kernel class, with the bf16 copy kernel of mHC ``bf16_roundtrip`` and the CUDA-core
GEMM of the fp32 indexer reference named. No goldens: only the ledger, the profiler and
device timings.

    python -m benchmarks.overhead.kernel_audit --out "$OUT"                   # on a CUDA machine
    python -m benchmarks.overhead.kernel_audit --device cpu --tiny --out DIR  # the plumbing (CPU)

Writes ``audit-<device>.json`` (everything) and ``audit-<device>.txt`` (the ledgers and kernel
tables) under ``--out`` and prints a short table last. On the CPU there are no kernels to
audit: the cast ledger and perf_counter timings only. ``--tiny``: small shapes (the CPU
plumbing test, tests/test_benchmark_plumbing.py). Exits 1 when a variant's audit erred.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from numcheck.devices import device_name
from numcheck.inputs import to_device
from numcheck.ops.registry import get_op
from numcheck.overhead.kernels import COPY, CUDA_CORE_GEMM, TENSOR_CORE_GEMM
from numcheck.overhead.limits import audit_variant, default_overhead, overhead_violations
from numcheck.prepare import prepare

#: (op, preset, shape): the production shapes of docs/ops.md's story.
SHAPES: list[tuple[str, str, dict[str, Any]]] = [
    ("mhc_pre", "v4pro", {"tokens": 4096}),  # hc_fn [24, 28672]
    ("indexer", "v4flash", {"batch": 64, "max_context": 8192, "min_context": 8192}),
]


#: The same ops at small shapes (--tiny).
TINY_SHAPES: list[tuple[str, str, dict[str, Any]]] = [
    ("mhc_pre", "v4pro", {"tokens": 8, "hidden": 64}),
    ("indexer", "v4flash", {"batch": 2, "max_context": 256, "min_context": 256, "heads": 8,
                            "head_dim": 32, "index_topk": 16}),
]


def median_ms(fn: Any, repeats: int, device: str = "cuda") -> float:
    """Median of ``repeats`` CUDA-event timings of ``fn()`` (perf_counter on the CPU), after
    warm-up."""
    for _ in range(3):
        fn()
    if device != "cuda":
        return statistics.median(_seconds(fn) * 1e3 for _ in range(repeats))
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _seconds(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def audit_shape(op_name: str, preset: str, shape: Mapping[str, Any], iterations: int,
                repeats: int, device: str = "cuda",
                errors: list[str] | None = None) -> list[dict[str, Any]]:
    op = get_op(op_name)
    params = op.resolve_params(preset, shape)
    inputs = to_device(op.make_inputs(params, 0), device)
    kernels = device == "cuda"
    rows = []
    for name, variant in op.variants.items():
        if variant.why_not(device):  # CUDA-only, or an optional library missing
            continue
        try:
            # A variant's one-time preparation (its weights quantized at load time), as the
            # gate makes it: only the call is audited and timed.
            prepared = prepare(variant, inputs, params, device)
            call = inputs if prepared is None else prepared.call_inputs(inputs)
            report = audit_variant(variant.fn, call, params, kernels=kernels,
                                   iterations=iterations)
            ms = median_ms(lambda v=variant, c=call: v.fn(dict(c), params), repeats, device)
        except Exception as exc:  # noqa: BLE001 - one broken variant must not cost the whole device run
            print(f"{op_name} :: {name}: {type(exc).__name__}: {exc}", flush=True)
            if errors is not None:
                errors.append(f"{op_name}::{name}: {type(exc).__name__}: {exc}")
            continue
        budget = default_overhead(variant.precision)
        violations = overhead_violations(report, budget,
                                         {"casts", "kernels"} if kernels else {"casts"})
        audit = report.kernels
        slow = audit.of_class(CUDA_CORE_GEMM) if audit is not None else []
        copies = audit.of_class(COPY) if audit is not None else []

        kernel_times = {} if audit is None else {
            "gemm_tc_us": audit.time(TENSOR_CORE_GEMM), "gemm_cc_us": audit.time(CUDA_CORE_GEMM),
            "copy_us": audit.time(COPY), "copy_share": audit.share(COPY),
            "kernel_total_us": audit.total_us}
        rows.append({
            "op": op_name, "preset": preset, "shape": dict(shape), "variant": name,
            "precision": variant.precision, "median_ms": ms,
            **{k: kernel_times.get(k) for k in ("gemm_tc_us", "gemm_cc_us", "copy_us",
                                                "copy_share", "kernel_total_us")},
            "cuda_core_gemm_kernel": slow[0].name if slow else None,
            "top_copy_kernel": copies[0].name if copies else None,
            "violations": [v.describe() for v in violations],
            "report": report.as_dict(),
            "lines": [f"{op_name} {preset} {dict(shape)} :: {name} ({variant.precision})",
                      f"  median {ms:.3f} ms ({'CUDA events' if kernels else 'perf_counter'}, "
                      f"{repeats} calls)",
                      *report.lines(limit=15),
                      *(f"  default gates: {v.describe()}" for v in violations), ""],
        })
        print("\n".join(rows[-1]["lines"]), flush=True)
    return rows


def short_table(rows: list[dict[str, Any]]) -> list[str]:
    header = (f"{'op':<8} {'variant':<15} {'ms':>7} {'GEMM tc us':>10} {'GEMM cc us':>10} "
              f"{'copy us':>8} {'copy %':>6} {'casts MB':>9} {'rt':>3}  CUDA-core GEMM / top copy")
    lines = [header, "-" * len(header)]
    for r in rows:
        rep = r["report"]
        note = r["cuda_core_gemm_kernel"] or r["top_copy_kernel"] or "-"
        def num(v: float | None, width: int, scale: float = 1.0, fmt: str = ".1f") -> str:
            return f"{'-':>{width}}" if v is None else f"{v * scale:>{width}{fmt}}"

        lines.append(
            f"{r['op']:<8} {r['variant']:<15} {r['median_ms']:>7.3f} {num(r['gemm_tc_us'], 10)} "
            f"{num(r['gemm_cc_us'], 10)} {num(r['copy_us'], 8)} "
            f"{num(r['copy_share'], 5, 100, '.0f')}% "
            f"{rep['cast_bytes'] / 1e6:>9.1f} {len(rep['round_trips']):>3}  {note[:70]}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/audit")))
    parser.add_argument("--iterations", type=int, default=10, help="profiled calls per variant")
    parser.add_argument("--repeats", type=int, default=50, help="timings per variant")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        choices=("cpu", "cuda"))
    parser.add_argument("--tiny", action="store_true", help="small shapes: the CPU plumbing test")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("kernel_audit: --device cuda, and torch sees no CUDA device", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    device = device_name(args.device, cpu_model=True)
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for op_name, preset, shape in TINY_SHAPES if args.tiny else SHAPES:
        rows += audit_shape(op_name, preset, shape, args.iterations, args.repeats, args.device,
                            errors)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    meta = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
            "tiny": args.tiny, "errors": errors}
    (args.out / f"audit-{args.device}.json").write_text(json.dumps(
        {"meta": meta, "rows": [{k: v for k, v in r.items() if k != "lines"} for r in rows]},
        indent=1))
    table = short_table(rows)
    text = [f"{device}, torch {torch.__version__}, CUDA {torch.version.cuda}", ""]
    text += [line for r in rows for line in r["lines"]] + table
    (args.out / f"audit-{args.device}.txt").write_text("\n".join(text) + "\n")
    print(f"\n== kernel audit, {device}, torch {torch.__version__} (us per call; tc/cc: "
          "tensor-core/CUDA-core GEMM; casts MB: bytes moved by casts and copies; "
          "rt: round trips)")
    print("\n".join(table))
    for e in errors:
        print(f"ERROR {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
