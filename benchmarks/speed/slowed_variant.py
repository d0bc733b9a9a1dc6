"""A test-only mHC variant about 5% slower than ``bf16``, for the speed gate's evidence.

Loaded as a pytest plugin (``-p benchmarks.speed.slowed_variant``, repo root on PYTHONPATH), never
shipped: it registers ``bf16_slowed`` on ``mhc_pre`` through numcheck's registration hook.

How it is slowed, realistically: the shipped ``bf16`` variant plus one extra elementwise
pass over the input, a defensive ``clone()`` of the first rows of x (the kind of copy a
"make it contiguous / don't alias the caller's buffer" change adds). Its size is set once
per shape on the first call on CUDA, from the device itself: the bf16 op and a full copy of
x are timed (CUDA events, median of 7 after warm-up), and the copy covers the fraction of
rows that costs 5% of the bf16 op (clamped to [1%, 100%] of x). On the CPU the fraction is
5% of the rows (the CPU runs only test the plumbing). The outputs are bf16's, bit for bit.
"""

from __future__ import annotations

from typing import Any

import torch

from numcheck.ops import mhc
from numcheck.ops.registry import Variant

#: The slowdown aimed at, as a fraction of the bf16 op's time.
TARGET = 0.05
#: Rows copied, per (device, x shape): set on the first call.
ROWS: dict[tuple[str, tuple[int, ...]], int] = {}


def _median_ms(fn: Any, reps: int = 7) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[reps // 2]


def rows_for(inputs: Any, p: Any) -> int:
    """Rows of x whose copy costs ``TARGET`` of the bf16 op on this device and shape."""
    x = inputs["x"]
    key = (x.device.type, tuple(x.shape))
    if key not in ROWS:
        tokens = x.shape[0]
        if x.is_cuda and not torch.cuda.is_current_stream_capturing():
            op_ms = _median_ms(lambda: mhc.bf16(inputs, p))
            copy_ms = _median_ms(lambda: x.clone())
            fraction = min(1.0, max(0.01, TARGET * op_ms / copy_ms))
        else:
            fraction = TARGET
        ROWS[key] = max(1, round(fraction * tokens))
    return ROWS[key]


def bf16_slowed(inputs: Any, p: Any) -> Any:
    """bf16 plus a defensive clone() of the first rows of x sized to cost ~5% of the op."""
    rows = rows_for(inputs, p)
    out = mhc.bf16(inputs, p)
    inputs["x"][:rows].clone()  # the extra pass: read and write those rows once more
    return out


def pytest_numcheck_register(registry: Any) -> None:
    if "bf16_slowed" not in registry.get_op("mhc_pre").variants:
        registry.add_variant("mhc_pre", Variant("bf16_slowed", bf16_slowed, "bf16",
                                                doc=bf16_slowed.__doc__ or ""))
