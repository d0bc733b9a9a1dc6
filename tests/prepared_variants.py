"""Test-only mhc_pre variants around a kernel that wants its weight transposed, in bf16.

The situation one-time preparation exists for (numcheck/prepare.py): the kernel
(``projection_kernel``) takes hc_fn as a contiguous bf16 ``[n*C, 24]``, not the op's fp32
``[24, n*C]``. ``glue_bf16`` puts it in that layout on every call, as a variant without
``prepare`` must; ``prepared_bf16`` does it once, in ``prepare``. Same numbers, different
bills. ``PREPARE_CALLS`` counts preparations, for tests that pin when they run.
"""

from __future__ import annotations

import torch

from numcheck.ops import mhc
from numcheck.ops.registry import Inputs, Outputs, Params, Variant

#: Preparations made by ``prepare_weight`` in this process, by the kind of run that asked.
PREPARE_CALLS: list[str] = []


def projection_kernel(inputs: Inputs, p: Params) -> Outputs:
    """The "kernel": bf16 GEMM against hc_fn given as a contiguous bf16 [n*C, 24]."""
    w = inputs["hc_fn"]
    if w.dtype != torch.bfloat16 or w.shape[0] != inputs["x"].flatten(1).shape[1]:
        raise ValueError(f"hc_fn must be bf16 [n*C, mixes], got {w.dtype} {list(w.shape)}")
    x = inputs["x"].flatten(1)
    xf = x.float()
    m = (x @ w).float() * mhc._rms_inv(xf, mhc.norm_eps(p))
    return mhc._epilogue(m, xf, inputs, p)


def prepare_weight(inputs: Inputs, p: Params) -> Inputs:
    """Load time: hc_fn in the kernel's layout and dtype."""
    PREPARE_CALLS.append("prepare")
    return {"hc_fn": inputs["hc_fn"].t().contiguous().to(torch.bfloat16)}


def glue_bf16(inputs: Inputs, p: Params) -> Outputs:
    """The same kernel with its weight layout made on every call (no ``prepare``)."""
    w = inputs["hc_fn"].t().contiguous().to(torch.bfloat16)
    return projection_kernel({**inputs, "hc_fn": w}, p)


def copies_prepared(inputs: Inputs, p: Params) -> Outputs:
    """A call that copies its prepared weight twice per call: still copies of 'hc_fn'."""
    w = inputs["hc_fn"].clone().clone()
    return projection_kernel({**inputs, "hc_fn": w}, p)


VARIANTS = {
    "glue_bf16": Variant("glue_bf16", glue_bf16, "bf16"),
    "prepared_bf16": Variant("prepared_bf16", projection_kernel, "bf16", prepare=prepare_weight),
    "copies_prepared": Variant("copies_prepared", copies_prepared, "bf16",
                               prepare=prepare_weight),
}


def register_all() -> None:
    """Add the variants to mhc_pre (inside ``registry.isolated()`` in tests)."""
    from numcheck.ops import registry

    for variant in VARIANTS.values():
        registry.set_variant("mhc_pre", variant)
