"""TF32 on the CPU: say that the check compared fp32 with fp32, not TF32 with fp32.

TF32 is a tensor-core format; CPU matmuls ignore the TF32 switch and stay IEEE fp32. A tf32
variant run on the CPU therefore computes exactly what the fp32 reference computes, and its
PASS says only that the code path is right, nothing about TF32 rounding. The row must say so.
The claim is checked, not assumed: the reference runs on the same inputs and every output is
compared bit for bit; only then is the note attached.

The variant keeps computing what torch computes on this machine: a shipped variant stands for
the user's code path as it runs, and swapping in an emulation on the CPU would check a path
nobody runs. TF32 rounding itself is not left untested on a CPU: the tf32 class's honest
family and the rounding envelope behind its ``max_err_ratio`` hold TF32 emulated bit for bit
(operands rounded to nearest and truncated, numcheck.honest.gemm_impls), so the tf32 budgets are
calibrated and a bug that rounds coarser than TF32 fails here too (docs/budgets.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from numcheck.check.run import run_variant
from numcheck.inputs import to_device

#: The note on a tf32 check whose outputs equal the reference's on the CPU.
NOTE = "tf32 = fp32 bit for bit on cpu"


def tf32_cpu_note(op: Any, case: Any, variant: str, device: str, inputs: Any,
                  seeds: Sequence[Any]) -> str | None:
    """:data:`NOTE` for a tf32 variant on the CPU whose every output of every seed equals
    the reference's bit for bit; None otherwise (another device or precision, or a
    difference, which the metrics then report as usual)."""
    if device != "cpu" or op.variants[variant].precision != "tf32" or variant == op.reference:
        return None
    reference = op.variants[op.reference]
    for s in seeds:
        if not s.outputs:
            return None
        cpu_inputs, _ = inputs.get(s.seed)
        ref = run_variant(reference, op, to_device(cpu_inputs, device), case, device)
        for name, t in s.outputs.items():
            r = ref[name]
            if t.dtype != r.dtype or t.shape != r.shape or not torch.equal(
                    t.nan_to_num(), r.nan_to_num()) or not torch.equal(t.isnan(), r.isnan()):
                return None
    return NOTE
