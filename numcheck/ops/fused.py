"""The fused Triton variants of the shipped ops, offered whether or not triton is installed.

Each op gains a variant ``fused`` (:mod:`numcheck.ops.indexer_fused`,
:mod:`numcheck.ops.mhc_fused`). The kernel modules are imported on the first call, so
loading the ops stays light. Without triton the variant is still registered, with no device
and the reason, so case files that budget it keep loading and its items skip with
"triton not installed". Where it runs (CUDA compiled, or the CPU under Triton's
interpreter) is decided once per process by :mod:`numcheck.ops.triton_support`.
"""

from __future__ import annotations

import importlib

from numcheck.ops import triton_support
from numcheck.ops.spec import Inputs, Outputs, Params, Variant, VariantFn

INDEXER_DOC = (
    "One Triton kernel: paged e4m3 keys and scales read in place, fp32-accumulated MMA, "
    "relu, head weights, head sum, kv scale and -inf mask in registers; then torch.topk."
)
#: The Triton kernel modules, by op: the only numcheck modules that import triton.
KERNEL_MODULES = {"indexer": "numcheck.ops.indexer_fused", "mhc_pre": "numcheck.ops.mhc_fused"}
MHC_DOC = (
    "Triton: one pass over bf16 x for sum of squares and projection (split over n*C), "
    "then the sigmoid/Sinkhorn epilogue and y; no fp32 copy of x."
)


def _lazy(module: str) -> VariantFn:
    """The ``fused`` function of ``module``, imported on the first call."""

    def call(inputs: Inputs, params: Params) -> Outputs:
        fn: VariantFn = importlib.import_module(module).fused
        return fn(inputs, params)

    call.__name__ = call.__qualname__ = f"{module}.fused"
    return call


def variants() -> list[tuple[str, Variant]]:
    """``(op name, variant)`` of each fused variant, for :mod:`numcheck.ops.builtin`."""
    reason = triton_support.unavailable_reason()
    devices = triton_support.DEVICES
    # Indexer: products of e4m3 values are exact and accumulate in fp32, so the logits are
    # fp32-accurate up to summation order: the fp32 budget row.
    indexer = Variant(
        "fused", _lazy(KERNEL_MODULES["indexer"]), "fp32", devices=devices,
        doc=INDEXER_DOC, unavailable=reason,
    )
    # mHC: hc_fn enters the MMA as two bf16 halves (~16 bits), finer than TF32: the tf32 row.
    mhc = Variant(
        "fused", _lazy(KERNEL_MODULES["mhc_pre"]), "tf32", devices=devices,
        doc=MHC_DOC, unavailable=reason,
    )
    return [("indexer", indexer), ("mhc_pre", mhc)]
