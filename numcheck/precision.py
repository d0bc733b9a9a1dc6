"""Matmul precision switches that always restore what the surrounding process had."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def matmul_precision(*, tf32: bool) -> Iterator[None]:
    """Allow (``tf32=True``) or forbid TF32 for fp32 matmuls inside the block.

    The FP32 references run under ``tf32=False`` so a caller who enabled TF32 globally
    cannot leak it into a golden. Uses ``torch.set_float32_matmul_precision``, which
    drives cuBLAS (and oneDNN where it has TF32) on every torch >= 2.4, and restores the
    previous setting even when the body raises. On a CPU without TF32 hardware the
    matmul stays IEEE fp32.
    """
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)
