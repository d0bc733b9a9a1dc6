"""Planted counter-examples of the determinism and batch-invariance gates (test-only).

Each computes its op in fp32 within the fp32 budgets, so the numerics pass it, and breaks
one of the two properties the way GPU kernels do:

- **nondeterministic reductions.** A GPU kernel whose thread blocks ``atomicAdd`` partial
  sums into one output adds them in whatever order the blocks finish, which changes from
  call to call, and fp32 addition is not associative. A CPU has no such race, so it is
  emulated honestly: the partial sums are added in the order of a random permutation
  drawn afresh on every call from the operating system's entropy (``os.urandom``), not
  from any seed a test could fix. Two calls agree bit for bit only when their
  permutations add up to the same bits: for 8 partials, about one pair in 40320 has the
  same order.
- **split-K chosen by the batch size.** A GEMM library picks more K-splits when the batch
  is too small to fill the GPU; a request alone then sums its products in another order
  than inside the batch. Planted as a heuristic on the batch size: one split for a full
  batch (the reference's order, so the numerics see the reference's bits), several alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import torch

from numcheck.ops import indexer, mhc
from numcheck.ops.registry import Inputs, Outputs, Params
from numcheck.ops.splitk import split_k_matmul
from numcheck.precision import matmul_precision

#: Partial sums an emulated atomic reduction adds (one per "thread block").
ATOMIC_PARTS = 8


def _call_permutation(n: int) -> torch.Tensor:
    """A permutation of ``range(n)`` drawn afresh on every call, from the OS's entropy."""
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
    return torch.randperm(n, generator=gen)


def _atomic_sum(partials: list[torch.Tensor]) -> torch.Tensor:
    """Partials added into a zeroed accumulator in this call's random order (atomicAdd)."""
    acc = torch.zeros_like(partials[0])
    for i in _call_permutation(len(partials)).tolist():
        acc = acc + partials[i]
    return acc


#: The orders of :func:`mhc_atomic3_bf16`'s three partials, one per distinct result: a
#: sum is commutative, so the 3! orders give the three sums (a + b) + c, (a + c) + b and
#: (b + c) + a. A test sets ``ORDERS`` to an iterator of indices into this tuple to choose
#: each call's; None: each call draws one, equally likely, from the OS's entropy.
THREE_ORDERS = ((0, 1, 2), (0, 2, 1), (1, 2, 0))
ORDERS: Iterator[int] | None = None


def mhc_atomic3_bf16(inputs: Inputs, p: Params) -> Outputs:
    """mHC's bf16 projection split over K into three bf16 partials, added in bf16 in an
    order that changes on every call (three thread blocks' atomicAdd): a call gives one of
    three results, each a third of the time."""
    x = inputs["x"].flatten(1)
    w = inputs["hc_fn"].to(torch.bfloat16).T
    k = x.shape[1]
    bounds = [round(i * k / 3) for i in range(4)]
    parts = [x[:, lo:hi] @ w[lo:hi] for lo, hi in zip(bounds, bounds[1:], strict=False)]
    pick = (next(ORDERS) if ORDERS is not None
            else int.from_bytes(os.urandom(1), "little") % len(THREE_ORDERS))
    first, second, third = (parts[i] for i in THREE_ORDERS[pick])
    m = ((first + second) + third).float() * mhc._rms_inv(x.float(), mhc.norm_eps(p))
    return mhc._epilogue(m, x.float(), inputs, p)


def mhc_atomic_splitk(inputs: Inputs, p: Params) -> Outputs:
    """The fp32 projection split over K into 8 slices, whose fp32 partial products are added
    in an order that changes on every call (an emulated atomicAdd split-K)."""
    with matmul_precision(tf32=False):
        xf = inputs["x"].flatten(1).float()
        w = inputs["hc_fn"].T
        k = xf.shape[1]
        bounds = [round(i * k / ATOMIC_PARTS) for i in range(ATOMIC_PARTS + 1)]
        partials = [xf[:, lo:hi] @ w[lo:hi] for lo, hi in zip(bounds, bounds[1:], strict=False)]
        m = _atomic_sum(partials) * mhc._rms_inv(xf, mhc.norm_eps(p))
        return mhc._epilogue(m, xf, inputs, p)


def indexer_atomic_heads(inputs: Inputs, p: Params) -> Outputs:
    """fp32 scores; each head's weighted relu scores added into the logits in an order that
    changes on every call (a kernel with one block per head group, atomicAdd into logits)."""
    with matmul_precision(tf32=False):
        q, kt, k_scale = indexer._operands(inputs, p, torch.float32)
        b, n, h = inputs["q"].shape[:3]
        scores = torch.bmm(q, kt).relu().view(b, n, h, -1)
        weighted = scores * inputs["weights"].view(b, n, h, 1)
        groups = [weighted[:, :, g::ATOMIC_PARTS].sum(dim=2) for g in range(min(h, ATOMIC_PARTS))]
        logits = _atomic_sum(groups) * k_scale.view(b, 1, -1)
        valid = indexer.valid_mask(inputs["context_lens"], n, logits.shape[-1])
        logits = logits.masked_fill(~valid, float("-inf")).view(b * n, -1)
        return {"logits": logits, "topk": indexer.select_topk(logits, p["index_topk"])}


def _splits_for(batch: int) -> int:
    """The planted heuristic: a batch of 4 or more fills the machine (one split); a smaller
    one gets 4 K-splits to keep it busy."""
    return 1 if batch >= 4 else 4


def mhc_splitk_by_batch(inputs: Inputs, p: Params) -> Outputs:
    """fp32 projection with split-K chosen by the token count (fp32 partials, summed in
    order): the reference's bits in a batch of 4+ tokens, another order alone."""
    with matmul_precision(tf32=False):
        xf = inputs["x"].flatten(1).float()
        parts = _splits_for(xf.shape[0])
        m = split_k_matmul(xf, inputs["hc_fn"].T, parts, tree=False) if parts > 1 else (
            xf @ inputs["hc_fn"].T)
        m = m * mhc._rms_inv(xf, mhc.norm_eps(p))
        return mhc._epilogue(m, xf, inputs, p)


def indexer_splitk_by_batch(inputs: Inputs, p: Params) -> Outputs:
    """fp32 scores; the reduction over heads split in parts chosen by the number of requests
    (each part summed, then the parts added in order): torch's order in a batch of 4+, four
    parts alone. (A split of the score GEMM's K would rarely show: products of e4m3 values
    are exact in fp32, and so are many of their short sums.)"""
    with matmul_precision(tf32=False):
        q, kt, k_scale = indexer._operands(inputs, p, torch.float32)
        b, n, h = inputs["q"].shape[:3]
        parts = _splits_for(b)
        if parts == 1:
            return indexer._outputs(torch.bmm(q, kt), inputs, k_scale, p)
        weighted = torch.bmm(q, kt).relu().view(b, n, h, -1) * inputs["weights"].view(b, n, h, 1)
        bounds = [round(i * h / parts) for i in range(parts + 1)]
        logits = weighted[:, :, bounds[0]:bounds[1]].sum(dim=2)
        for lo, hi in zip(bounds[1:], bounds[2:], strict=False):
            logits = logits + weighted[:, :, lo:hi].sum(dim=2)
        logits = logits * k_scale.view(b, 1, -1)
        valid = indexer.valid_mask(inputs["context_lens"], n, logits.shape[-1])
        logits = logits.masked_fill(~valid, float("-inf")).view(b * n, -1)
        return {"logits": logits, "topk": indexer.select_topk(logits, p["index_topk"])}


#: op -> name -> (function, precision class, the gate that catches it).
PLANTED = {
    "mhc_pre": {
        "atomic_splitk": (mhc_atomic_splitk, "fp32", "determinism"),
        "atomic3_bf16": (mhc_atomic3_bf16, "bf16", "determinism"),
        "splitk_by_batch": (mhc_splitk_by_batch, "fp32", "batch_invariance"),
    },
    "indexer": {
        "atomic_heads": (indexer_atomic_heads, "fp32", "determinism"),
        "splitk_by_batch": (indexer_splitk_by_batch, "fp32", "batch_invariance"),
    },
}
