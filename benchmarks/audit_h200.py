"""Cast ledger and kernel audit of every variant at production-ish shapes, on a GPU.

The evidence behind docs/evidence/2026-11-29-h200-gate-and-perf/: where each variant's time
goes, by kernel class, with the bf16 copy kernel of mHC ``bf16_roundtrip`` and the CUDA-core
GEMM of the fp32 indexer reference named. No goldens: only the ledger, the profiler and CUDA-event timings.

    python benchmarks/audit_h200.py --out "$OUT"        # on a CUDA machine

Writes ``audit-cuda.json`` (everything) and ``audit-cuda.txt`` (the ledgers and kernel
tables) under ``--out`` and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from numcheck.inputs import to_device
from numcheck.ops.registry import get_op
from numcheck.overhead.gate import audit_variant, default_overhead, overhead_violations
from numcheck.overhead.kernels import COPY, CUDA_CORE_GEMM, TENSOR_CORE_GEMM

#: (op, preset, shape): the production shapes of docs/ops.md's story.
SHAPES: list[tuple[str, str, dict[str, Any]]] = [
    ("mhc_pre", "v4pro", {"tokens": 4096}),  # hc_fn [24, 28672]
    ("indexer", "v4flash", {"batch": 64, "max_context": 8192, "min_context": 8192}),
]


def median_ms(fn: Any, repeats: int) -> float:
    """Median of ``repeats`` CUDA-event timings of ``fn()``, after warm-up."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def audit_shape(op_name: str, preset: str, shape: Mapping[str, Any], iterations: int,
                repeats: int) -> list[dict[str, Any]]:
    op = get_op(op_name)
    params = op.resolve_params(preset, shape)
    inputs = to_device(op.make_inputs(params, 0), "cuda")
    rows = []
    for name, variant in op.variants.items():
        if "cuda" not in variant.devices:
            continue
        try:
            report = audit_variant(variant.fn, inputs, params, kernels=True,
                                   iterations=iterations)
            ms = median_ms(lambda v=variant: v.fn(dict(inputs), params), repeats)
        except Exception as exc:  # noqa: BLE001 - one broken variant must not cost the whole device run
            print(f"{op_name} :: {name}: {type(exc).__name__}: {exc}", flush=True)
            continue
        budget = default_overhead(variant.precision)
        violations = overhead_violations(report, budget, {"casts", "kernels"})
        audit = report.kernels
        assert audit is not None
        slow = audit.of_class(CUDA_CORE_GEMM)
        copies = audit.of_class(COPY)
        rows.append({
            "op": op_name, "preset": preset, "shape": dict(shape), "variant": name,
            "precision": variant.precision, "median_ms": ms,
            "gemm_tc_us": audit.time(TENSOR_CORE_GEMM), "gemm_cc_us": audit.time(CUDA_CORE_GEMM),
            "copy_us": audit.time(COPY), "copy_share": audit.share(COPY),
            "kernel_total_us": audit.total_us,
            "cuda_core_gemm_kernel": slow[0].name if slow else None,
            "top_copy_kernel": copies[0].name if copies else None,
            "violations": [v.describe() for v in violations],
            "report": report.as_dict(),
            "lines": [f"{op_name} {preset} {dict(shape)} :: {name} ({variant.precision})",
                      f"  median {ms:.3f} ms (CUDA events, {repeats} calls)",
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
        lines.append(
            f"{r['op']:<8} {r['variant']:<15} {r['median_ms']:>7.3f} {r['gemm_tc_us']:>10.1f} "
            f"{r['gemm_cc_us']:>10.1f} {r['copy_us']:>8.1f} {100 * r['copy_share']:>5.0f}% "
            f"{rep['cast_bytes'] / 1e6:>9.1f} {len(rep['round_trips']):>3}  {note[:70]}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/audit")))
    parser.add_argument("--iterations", type=int, default=10, help="profiled calls per variant")
    parser.add_argument("--repeats", type=int, default=50, help="CUDA-event timings per variant")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("audit_h200: no CUDA device; this script measures GPU kernels", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name()
    rows: list[dict[str, Any]] = []
    for op_name, preset, shape in SHAPES:
        rows += audit_shape(op_name, preset, shape, args.iterations, args.repeats)
        torch.cuda.empty_cache()
    meta = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda}
    (args.out / "audit-cuda.json").write_text(json.dumps(
        {"meta": meta, "rows": [{k: v for k, v in r.items() if k != "lines"} for r in rows]},
        indent=1))
    table = short_table(rows)
    text = [f"{device}, torch {torch.__version__}, CUDA {torch.version.cuda}", ""]
    text += [line for r in rows for line in r["lines"]] + table
    (args.out / "audit-cuda.txt").write_text("\n".join(text) + "\n")
    print(f"\n== kernel audit, {device}, torch {torch.__version__} (us per call; tc/cc: "
          "tensor-core/CUDA-core GEMM; casts MB: bytes moved by casts and copies; "
          "rt: round trips)")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
