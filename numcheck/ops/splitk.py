"""Split-K GEMMs with partial results in the operands' dtype.

A split-K kernel cuts the reduction dimension K into slices, runs one GEMM per slice and adds
the partial results. When each partial is written in bf16 (the GEMM's output dtype), the
result carries one bf16 rounding per slice instead of one in all: an honest implementation
of a bf16 op whose worst element error can be twice that of a single bf16 GEMM. Two such
GEMMs are in every bf16 rounding envelope (numcheck.honest.gemm_impls), so a variant's
``max_err_ratio`` is measured against the worst of these honest choices.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import torch


def split_k_matmul(
    a: torch.Tensor, b: torch.Tensor, parts: int, *, tree: bool,
    partial: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``a @ b`` as ``parts`` GEMMs over slices of K (a's last dim, b's second to last), each
    result in the operands' dtype (or, with ``partial``, passed through it: the format each
    partial is written in), added in fp32 left to right or as a pairwise tree. Returns fp32."""
    k = a.shape[-1]
    if not 1 <= parts <= k:
        raise ValueError(f"split_k_matmul: {parts} parts for K = {k}; need 1 <= parts <= K")
    bounds = [round(i * k / parts) for i in range(parts + 1)]
    write = partial or (lambda t: t)
    partials = [
        write((a[..., lo:hi] @ b[..., lo:hi, :]).float()) for lo, hi in pairwise(bounds)
    ]
    if not tree:
        return sum(partials[1:], partials[0])
    while len(partials) > 1:
        paired = [x + y for x, y in zip(partials[0::2], partials[1::2])]
        partials = paired + ([partials[-1]] if len(partials) % 2 else [])
    return partials[0]
