"""Test-only variants with planted bugs: the gate must catch every one of them.

Registered by the tests (and by throwaway conftest files under pytester), never shipped.
"""

from __future__ import annotations

import time

import torch

from numcheck.ops import indexer, mhc
from numcheck.ops.registry import Inputs, Outputs, Params, Variant, add_variant, get_op
from numcheck.topk import select_topk


def indexer_no_kv_scale(inputs: Inputs, p: Params) -> Outputs:
    """Drops the per-token kv scale (multiplies by 1)."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.float32)
    return indexer._outputs(torch.bmm(q, kt), inputs, torch.ones_like(k_scale), p)


def indexer_mask_off_by_one(inputs: Inputs, p: Params) -> Outputs:
    """Lets every row see one token past its context length."""
    shifted = dict(inputs, context_lens=inputs["context_lens"] + 1)
    return indexer.fp32(shifted, p)


def indexer_far_flips(inputs: Inputs, p: Params) -> Outputs:
    """Correct logits, but each row swaps its k-th token for its lowest-scoring valid token."""
    out = indexer.fp32(inputs, p)
    logits, topk = out["logits"], out["topk"].clone()
    for r in range(topk.shape[0]):
        valid = int((topk[r] >= 0).sum())
        finite = torch.isfinite(logits[r])
        if valid == 0 or int(finite.sum()) <= valid:
            continue
        lowest = torch.where(finite, logits[r], torch.inf).argmin()
        topk[r, valid - 1] = lowest.to(topk.dtype)
    return {"logits": logits, "topk": topk}


def indexer_near_flips(inputs: Inputs, p: Params) -> Outputs:
    """Correct logits, but each row picks its (k+1)-th token instead of its k-th: a near-tie."""
    out = indexer.fp32(inputs, p)
    logits = out["logits"]
    wider = select_topk(logits, p["index_topk"] + 1)
    topk = out["topk"].clone()
    for r in range(topk.shape[0]):
        valid = int((topk[r] >= 0).sum())
        if valid and int(wider[r, valid]) >= 0:
            topk[r, valid - 1] = wider[r, valid]
    return {"logits": logits, "topk": topk}


def mhc_y_scaled(inputs: Inputs, p: Params) -> Outputs:
    """y off by 1%: a wrong scale on the output."""
    out = mhc.fp32(inputs, p)
    out["y"] = (out["y"].float() * 1.01).to(torch.bfloat16)
    return out


def mhc_slowed(inputs: Inputs, p: Params) -> Outputs:
    """Right numbers, deliberately slow: the reference four times over, then a stall
    (on the device timeline on CUDA, where a host sleep would not show in event times)."""
    for _ in range(3):
        mhc.fp32(inputs, p)
    out = mhc.fp32(inputs, p)
    if inputs["x"].is_cuda:
        torch.cuda._sleep(20_000_000)
    else:
        time.sleep(0.03)
    return out


def indexer_wrong_shape(inputs: Inputs, p: Params) -> Outputs:
    out = indexer.fp32(inputs, p)
    out["logits"] = out["logits"][:, :-1]
    return out


def indexer_raises(inputs: Inputs, p: Params) -> Outputs:
    raise RuntimeError("planted failure inside the variant")


PLANTED = {
    "indexer": {
        "no_kv_scale": (indexer_no_kv_scale, "fp32"),
        "mask_off_by_one": (indexer_mask_off_by_one, "fp32"),
        "far_flips": (indexer_far_flips, "fp32"),
        "near_flips": (indexer_near_flips, "fp32"),
        "wrong_shape": (indexer_wrong_shape, "fp32"),
        "raises": (indexer_raises, "fp32"),
    },
    "mhc_pre": {"y_scaled": (mhc_y_scaled, "fp32"), "slowed": (mhc_slowed, "fp32")},
}


def register_all() -> None:
    """Add every planted variant to its op (inside ``registry.isolated()`` in tests)."""
    for op, variants in PLANTED.items():
        for name, (fn, precision) in variants.items():
            if name in get_op(op).variants:  # a conftest imported twice in one process
                continue
            add_variant(op, Variant(name, fn, precision, doc=fn.__doc__ or ""))
