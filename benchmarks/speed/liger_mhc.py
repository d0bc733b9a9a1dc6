"""What liger-kernel's mHC kernels cost per call in examples/liger_mhc, on the CPU (Triton's
interpreter) or on CUDA: the first call (on a GPU, the kernels compile for the shape) and
the median of the next ones, per variant and case shape. Preparations are made first and
not timed, as the gate does.

    pip install liger-kernel        # once; the example's variants need it
    export PYTHONPATH=examples/liger_mhc                     # the example's package, liger_mhc
    python -m benchmarks.speed.liger_mhc                     # CPU, under the interpreter
    OUT=/some/dir python -m benchmarks.speed.liger_mhc --device cuda --repeats 20

Shapes: the example's t8-c512 (8 tokens, C = 512) and numcheck's v4flash-t64 (64 tokens,
C = 4096). Writes $OUT/liger_mhc.json when OUT is set; prints a table last. On CUDA each
(shape, path) pair compiles its three kernels once: allow minutes for the first calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

SHAPES = {"t8-c512": (None, {"tokens": 8, "hidden": 512}),
          "v4flash-t64": ("v4flash", {"tokens": 64})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    import torch
    from liger_mhc import numcheck_ops

    import numcheck
    from numcheck.check.firstcall import FirstCallWatch, device_sync

    devices, why = numcheck_ops.where_it_runs()
    if args.device not in devices:
        print(f"liger_mhc: cannot run on {args.device} here: {why}")
        return 1
    op = numcheck.get_op("mhc_pre")
    sync = device_sync(args.device) or (lambda: None)

    rows = []
    for shape in args.shapes.split(","):
        preset, given = SHAPES[shape]
        params = op.resolve_params(preset, given)
        inputs = {k: v.to(args.device) for k, v in op.make_inputs(params, 0).items()}
        for name, prepare in (("liger_bf16", numcheck_ops.prepare_bf16),
                              ("liger_tf32", numcheck_ops.prepare_fp32)):
            call_inputs = {**inputs, **prepare(inputs, params)}
            sync()
            # Timed as the gate times a check's first call (waited for on the device).
            with FirstCallWatch(f"{shape}::{name}", None, sync=sync) as watch:
                numcheck_ops.liger_mhc_pre(call_inputs, params)
            first = watch.seconds
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                numcheck_ops.liger_mhc_pre(call_inputs, params)
                sync()
                times.append(time.perf_counter() - start)
            rows.append({"shape": shape, "variant": name, "device": args.device,
                         "first_call_s": first, "median_s": statistics.median(times),
                         "min_s": min(times), "max_s": max(times), "repeats": args.repeats,
                         "interpreted": numcheck_ops.interpreted()})
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "liger_mhc.json").write_text(json.dumps(
            {"torch": torch.__version__, "rows": rows}, indent=1) + "\n")
    print(f"{'shape':<12} {'variant':<11} {'device':<6} {'first call':>11} {'median':>10} "
          f"{'min':>10} {'max':>10}")
    for r in rows:
        print(f"{r['shape']:<12} {r['variant']:<11} {r['device']:<6} "
              f"{r['first_call_s']:>10.3f}s {r['median_s']:>9.4f}s {r['min_s']:>9.4f}s "
              f"{r['max_s']:>9.4f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
