"""Print the perf figures of a ``--benchmark-json`` file written by ``pytest --numcheck-perf``.

One markdown row per (case, variant): median and IQR of the device time, the reference's
median, the speedup with its interval, achieved TFLOP/s and GB/s, % of the memory floor
and the gate's verdict; then the measured peaks and versions. Usage::

    python -m benchmarks.speed.perf_table $OUT/bench.json
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    with open(path) as handle:
        data = json.load(handle)
    rows = [b for b in data["benchmarks"] if b.get("extra_info", {}).get("numcheck")]
    if not rows:
        print(f"{path}: no numcheck perf entries")
        return 1
    first = rows[0]["extra_info"]
    print(f"device: {first['device_name']}; torch {first['torch']} (CUDA {first['cuda']}); "
          f"timer: {first['timer']}; confidence {first['confidence']:.0%}")
    peaks = first["peaks"]
    print(f"peaks (measured this run): copy {peaks['bandwidth_GBps']:.0f} GB/s, "
          f"{peaks['matmul_dtype']} matmul {peaks['matmul_TFLOPs']:.0f} TFLOP/s")
    print("| case | variant | median ms | IQR ms | ref median ms | speedup [CI] | TFLOP/s | "
          "GB/s | % floor | gate |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b in rows:
        e = b["extra_info"]
        gate = e["gate"] + (f" (min {e['speedup_min']:g})" if e["speedup_min"] else "")
        print(f"| {e['case']} | {e['variant']} | {e['median_s'] * 1e3:.4f} | "
              f"{e['iqr_s'] * 1e3:.4f} | {e['reference_median_s'] * 1e3:.4f} | "
              f"{e['speedup']:.3f} [{e['speedup_low']:.3f}, {e['speedup_high']:.3f}] | "
              f"{_num(e['tflops'], '.1f')} | {_num(e['gbps'], '.0f')} | "
              f"{_num(e['pct_of_floor'], '.1f')} | {gate} |")
    return 0


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
