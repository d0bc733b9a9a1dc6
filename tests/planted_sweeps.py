"""Test-only indexer variants wrong only at shapes the fixed shipped cases never have.

Kernels break one past a tile and on a ragged last page; the shipped sweeps
(cases/sweeps.toml) look there, the fixed cases (random context lengths at a few
thousand tokens) almost never do. Both bugs sit in the bf16 path and are held to bf16's
budgets; tests/test_sweep_catch.py shows each caught by the sweeps, at the points where it
sits, and missed by every fixed shipped case. Registered by the tests, never shipped.
"""

from __future__ import annotations

import torch

from numcheck.numerics.topk import select_topk
from numcheck.ops import indexer
from numcheck.ops.registry import Inputs, Outputs, Params

#: The fused kernel's tile on CUDA (numcheck/ops/indexer_fused.py: block_l 128).
TILE = 128


def _unmasked_bf16(inputs: Inputs, p: Params) -> torch.Tensor:
    """The bf16 path's logits ``[B, next_n, L]`` before any mask."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    b, n, h = inputs["q"].shape[:3]
    length = kt.shape[-1]
    s = torch.bmm(q, kt).float().relu().view(b, n, h, length)
    return (s * inputs["weights"].view(b, n, h, 1)).sum(dim=2) * k_scale.view(b, 1, length)


def indexer_tile_count_off_by_one(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path of a kernel that walks a request's context in 128-token tiles and counts
    them as cdiv(L - 1, 128), the tile of the last index rather than of the length: when the
    last tile holds one token (L = 128 k + 1) that token is never computed and keeps the
    -inf the output was filled with."""
    out = indexer.bf16(inputs, p)
    logits = out["logits"].clone()
    n = p["next_n"]
    for b, length in enumerate(inputs["context_lens"].tolist()):
        covered = -(-(length - 1) // TILE) * TILE
        if covered < length:
            logits[b * n:(b + 1) * n, covered:length] = float("-inf")
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


def indexer_page_full_off_by_one(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path of a page-walking kernel whose test for a full page is off by one
    (``valid >= page - 1``): a last page holding page - 1 tokens takes the full-page path,
    which masks by the request's length only, not by each MTP row's own limit, so with
    next_n > 1 the earlier rows see tokens past their limit on that page."""
    raw = _unmasked_bf16(inputs, p)
    b, n, length = raw.shape
    page = p["block_size"]
    lens = inputs["context_lens"].long()
    t = torch.arange(length).view(1, 1, -1)
    mask = indexer.valid_mask(inputs["context_lens"], n, length)
    last_page = (lens - 1) // page * page
    fast = (lens % page == page - 1).view(-1, 1, 1) & (t >= last_page.view(-1, 1, 1))
    mask = torch.where(fast, t < lens.view(-1, 1, 1), mask)
    logits = raw.masked_fill(~mask, float("-inf")).view(b * n, length)
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


#: name -> (function, the shipped variant whose budget it is held to).
SWEEP_PLANTED = {
    "tile_count_off_by_one": (indexer_tile_count_off_by_one, "bf16"),
    "page_full_off_by_one": (indexer_page_full_off_by_one, "bf16"),
}

#: SWEEP_PLANTED as a variant table (tests/variant_tables.py): name -> (function, class).
SWEEP_PLANTED_TABLE = {name: (fn, "bf16") for name, (fn, _) in SWEEP_PLANTED.items()}
