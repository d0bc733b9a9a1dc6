"""Test-only honest variants: other legitimate ways to implement each shipped op at a precision.

The other half of the self-test (tests/planted.py holds the bugs). Each variant here uses the
same precision as a shipped variant but makes different, legitimate choices a real kernel
makes: the order of a sum (heads reversed, a pairwise tree, split-K), where the rounding to
the low precision happens (GEMM output in bf16 or fp32 accumulate kept, partial sums of a
split-K GEMM written in bf16), and tiling (a page at a time against the whole context). A
budget must pass every one of them on every seed: a budget that fails an honest variant
would teach its user to loosen budgets until bugs pass.

Not in the family: a bf16 indexer that folds the fp8 K scale into K before the GEMM (a bf16
rounding of the scaled keys). That is another implementation scheme with a wider error, and
ships as its own variant with its own budgets (docs/budgets.md, "Honest families").

Beside these, each family holds the members numcheck derives from the op's GEMM site
(numcheck.honest.gemm_family: the same op with each honest GEMM of the class, as users implement
it: TF32 with operands rounded to nearest or truncated, bf16 writing bf16 or fp32, the fp32
accumulation in one pass, in K-blocks or split-K; on CUDA cuBLAS and a Triton tl.dot kernel).
Those are the product's; :func:`family` lists them and :func:`register_all` registers them.

Registered by tests and benchmarks only, never shipped.
"""

from __future__ import annotations

import torch

from numcheck.honest.gemm_family import add_gemm_members, member_name, members
from numcheck.numerics.topk import select_topk
from numcheck.ops import indexer, mhc
from numcheck.ops.registry import Inputs, Outputs, Params, get_op
from numcheck.ops.splitk import split_k_matmul
from numcheck.precision import matmul_precision
from tests.variant_tables import register_table

# --- indexer ------------------------------------------------------------------------------


def _indexer_logits(
    scores: torch.Tensor, inputs: Inputs, k_scale: torch.Tensor, head_order: str
) -> torch.Tensor:
    """The fp32 epilogue with the head sum in another order: ``reversed`` or ``tree``."""
    b, n, h = inputs["q"].shape[:3]
    length = scores.shape[-1]
    s = scores.float().relu().view(b, n, h, length)
    weighted = s * inputs["weights"].view(b, n, h, 1)
    if head_order == "reversed":
        acc = weighted.new_zeros(b, n, length)
        for i in reversed(range(h)):
            acc = acc + weighted[:, :, i]
    elif head_order == "tree":
        while weighted.shape[2] > 1:
            if weighted.shape[2] % 2:
                weighted = torch.cat([weighted, torch.zeros_like(weighted[:, :, :1])], dim=2)
            weighted = weighted[:, :, 0::2] + weighted[:, :, 1::2]
        acc = weighted[:, :, 0]
    else:
        raise ValueError(head_order)
    logits = acc * k_scale.view(b, 1, length)
    mask = indexer.valid_mask(inputs["context_lens"], n, length)
    return logits.masked_fill(~mask, float("-inf")).view(b * n, length)


def _indexer_outputs(logits: torch.Tensor, p: Params) -> Outputs:
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


def indexer_heads_reversed(inputs: Inputs, p: Params) -> Outputs:
    """bf16 scores (as shipped); the weighted heads summed last to first in fp32."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    return _indexer_outputs(_indexer_logits(torch.bmm(q, kt), inputs, k_scale, "reversed"), p)


def indexer_heads_tree(inputs: Inputs, p: Params) -> Outputs:
    """bf16 scores; the weighted heads summed as a pairwise tree (a warp reduction)."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    return _indexer_outputs(_indexer_logits(torch.bmm(q, kt), inputs, k_scale, "tree"), p)


def indexer_split_d(inputs: Inputs, p: Params, parts: int, *, tree: bool) -> Outputs:
    """The bf16 path with torch's bf16 GEMM split over ``parts`` slices of the head dim, each
    slice's scores written in bf16 and added in fp32 (split_k_matmul)."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    return indexer._outputs(split_k_matmul(q, kt, parts, tree=tree), inputs, k_scale, p)


def indexer_split_d2(inputs: Inputs, p: Params) -> Outputs:
    """Split-K over the head dim: two bf16 GEMMs over D/2, their bf16 scores added in fp32
    (torch's bf16 GEMM, split as the envelope's emulated gemm_bf16_out_split2 is)."""
    return indexer_split_d(inputs, p, 2, tree=False)


def indexer_split_d3(inputs: Inputs, p: Params) -> Outputs:
    """Split-K over three uneven slices of the head dim (bf16 partials), left to right:
    outside the op's rounding envelope (halves and quarters). Not eight slices: a 16-wide
    slice per bf16 partial is close to keeping the GEMM's running sum in bf16, a bug."""
    return indexer_split_d(inputs, p, 3, tree=False)


def indexer_fp32_accumulate(inputs: Inputs, p: Params) -> Outputs:
    """bf16 operands (exact for e4m3), fp32 accumulation kept: no rounding of the scores."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    with matmul_precision(tf32=False):
        scores = torch.bmm(q.float(), kt.float())
    return indexer._outputs(scores, inputs, k_scale, p)


def indexer_weighted_bf16(inputs: Inputs, p: Params) -> Outputs:
    """The rounding moved into the epilogue: fp32 scores, each head's ``w * relu(s)``
    rounded to bf16 before the fp32 head sum (a bf16 epilogue)."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    with matmul_precision(tf32=False):
        scores = torch.bmm(q.float(), kt.float())
    b, n, h = inputs["q"].shape[:3]
    length = scores.shape[-1]
    s = scores.relu().view(b, n, h, length)
    weighted = (s * inputs["weights"].view(b, n, h, 1)).to(torch.bfloat16).float()
    logits = weighted.sum(dim=2) * k_scale.view(b, 1, length)
    mask = indexer.valid_mask(inputs["context_lens"], n, length)
    logits = logits.masked_fill(~mask, float("-inf")).view(b * n, length)
    return _indexer_outputs(logits, p)


def _paged(inputs: Inputs, p: Params, dtype: torch.dtype) -> Outputs:
    """Page-at-a-time tiling: one GEMM per KV page, read through the block table."""
    b, n, h, d = inputs["q"].shape
    cache, table = inputs["kv_cache"], inputs["block_table"]
    pages, bs = cache.shape[0], cache.shape[1]
    flat = cache.view(pages, bs * (d + 4))
    keys = flat[:, : bs * d].contiguous().view(torch.float8_e4m3fn).view(pages, bs, d)
    scales = flat[:, bs * d :].contiguous().view(torch.float32).view(pages, bs)
    length = p["max_context"]
    q = inputs["q"].to(dtype).view(b, n * h, d)
    parts, k_scale = [], []
    for j in range((length + bs - 1) // bs):
        page = table[:, j].long()
        parts.append(torch.bmm(q, keys[page].to(dtype).transpose(1, 2)))
        k_scale.append(scales[page])
    scores = torch.cat(parts, dim=-1)[..., :length]
    return indexer._outputs(scores, inputs, torch.cat(k_scale, dim=-1)[:, :length], p)


def indexer_page_at_a_time(inputs: Inputs, p: Params) -> Outputs:
    """bf16 scores computed one KV page at a time (a paged kernel's tiling)."""
    return _paged(inputs, p, torch.bfloat16)


def indexer_tf32_heads_reversed(inputs: Inputs, p: Params) -> Outputs:
    """The TF32 path with the weighted heads summed last to first."""
    with matmul_precision(tf32=True):
        q, kt, k_scale = indexer._operands(inputs, p, torch.float32)
        scores = torch.bmm(q, kt)
    return _indexer_outputs(_indexer_logits(scores, inputs, k_scale, "reversed"), p)


def indexer_tf32_page_at_a_time(inputs: Inputs, p: Params) -> Outputs:
    """The TF32 path computed one KV page at a time."""
    with matmul_precision(tf32=True):
        return _paged(inputs, p, torch.float32)


# --- mHC pre ------------------------------------------------------------------------------


def mhc_split_k(inputs: Inputs, p: Params, parts: int, *, tree: bool) -> Outputs:
    """The bf16 path with torch's bf16 GEMM split over ``parts`` slices of K, each slice's
    result written in bf16 and added in fp32 (split_k_matmul)."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    mm = split_k_matmul(x, inputs["hc_fn"].to(torch.bfloat16).T, parts, tree=tree)
    return mhc._epilogue(mm * mhc._rms_inv(xf, mhc.norm_eps(p)), xf, inputs, p)


def mhc_split_k2(inputs: Inputs, p: Params) -> Outputs:
    """Split-K: two bf16 GEMMs over the halves of K, bf16 partials added in fp32 (torch's
    bf16 GEMM, split as the envelope's emulated gemm_bf16_out_split2 is)."""
    return mhc_split_k(inputs, p, 2, tree=False)


def mhc_split_k4_tree(inputs: Inputs, p: Params) -> Outputs:
    """Split-K over four K slices, bf16 partials added as a pairwise tree (torch's bf16
    GEMM, split as the envelope's emulated gemm_bf16_out_split4_tree is)."""
    return mhc_split_k(inputs, p, 4, tree=True)


def mhc_split_k3(inputs: Inputs, p: Params) -> Outputs:
    """Split-K over three uneven K slices (bf16 partials), added left to right: outside the
    op's rounding envelope (halves and quarters), so it tests the budget's headroom."""
    return mhc_split_k(inputs, p, 3, tree=False)


def mhc_split_k8_tree(inputs: Inputs, p: Params) -> Outputs:
    """Split-K over eight K slices (bf16 partials), a pairwise tree: more roundings than any
    member of the op's rounding envelope."""
    return mhc_split_k(inputs, p, 8, tree=True)


def mhc_fp32_accumulate(inputs: Inputs, p: Params) -> Outputs:
    """bf16 operands, fp32 accumulation kept (no rounding of the GEMM output)."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    with matmul_precision(tf32=False):
        mm = xf @ inputs["hc_fn"].to(torch.bfloat16).float().T
    return mhc._epilogue(mm * mhc._rms_inv(xf, mhc.norm_eps(p)), xf, inputs, p)


def mhc_streams_reversed(inputs: Inputs, p: Params) -> Outputs:
    """bf16 GEMM as shipped; y's sum over the n streams taken last to first."""
    out = mhc.bf16(inputs, p)
    n = p["hc_mult"]
    xf = inputs["x"].float()
    acc = torch.zeros_like(xf[:, 0])
    for i in reversed(range(n)):
        acc = acc + out["pre"][:, i : i + 1] * xf[:, i]
    return {**out, "y": acc.to(torch.bfloat16)}


def mhc_tf32_split_k2(inputs: Inputs, p: Params) -> Outputs:
    """The TF32 path with the projection split in two K halves summed in fp32."""
    with matmul_precision(tf32=True):
        xf = inputs["x"].flatten(1).float()
        mm = split_k_matmul(xf, inputs["hc_fn"].T, 2, tree=False)
        return mhc._epilogue(mm * mhc._rms_inv(xf, mhc.norm_eps(p)), xf, inputs, p)


#: op -> variant -> (function, precision class). The shipped variant of that precision is
#: itself a member of the family (listed in FAMILIES).
HONEST = {
    "indexer": {
        "honest_heads_reversed": (indexer_heads_reversed, "bf16"),
        "honest_heads_tree": (indexer_heads_tree, "bf16"),
        # torch's bf16 GEMM split as the envelope's split members are: on the CPU they have
        # matched those emulations (max_err_ratio <= 1); on CUDA they round as cuBLAS does.
        "honest_split_d": (indexer_split_d2, "bf16"),
        "honest_split_d3": (indexer_split_d3, "bf16"),
        "honest_fp32_accumulate": (indexer_fp32_accumulate, "bf16"),
        "honest_weighted_bf16": (indexer_weighted_bf16, "bf16"),
        "honest_page_at_a_time": (indexer_page_at_a_time, "bf16"),
        "honest_tf32_heads_reversed": (indexer_tf32_heads_reversed, "tf32"),
        "honest_tf32_page_at_a_time": (indexer_tf32_page_at_a_time, "tf32"),
    },
    "mhc_pre": {
        "honest_split_k2": (mhc_split_k2, "bf16"),  # split as envelope members, as above
        "honest_split_k4_tree": (mhc_split_k4_tree, "bf16"),
        "honest_split_k3": (mhc_split_k3, "bf16"),
        "honest_split_k8_tree": (mhc_split_k8_tree, "bf16"),
        "honest_fp32_accumulate": (mhc_fp32_accumulate, "bf16"),
        "honest_streams_reversed": (mhc_streams_reversed, "bf16"),
        "honest_tf32_split_k2": (mhc_tf32_split_k2, "tf32"),
    },
}


def family(op: str, precision: str) -> list[str]:
    """Every honest variant of ``op`` at ``precision``: the shipped one, the test-only ones
    and the members numcheck derives from the op's GEMM site (``gemm_<label>``: TF32 rounded
    and truncated, bf16 writing bf16 or fp32, one pass, K-blocks, split-K, and on CUDA
    cuBLAS and a Triton tl.dot kernel; numcheck.honest.gemm_impls).

    The shipped variant named like the class (``bf16``, ``tf32``) is the family's head; its
    case budget is what every member is held to. Members that cannot run on a device are
    skipped there by whoever runs the family.
    """
    return [precision] + [
        name for name, (_, prec) in HONEST.get(op, {}).items() if prec == precision
    ] + [member_name(g) for g in members(get_op(op), precision)]


#: (op, precision class) pairs with an honest family: each shipped op at each precision
#: class it ships a plain variant of.
FAMILIES = [(op, prec) for op in HONEST for prec in ("bf16", "tf32")]


def register_all() -> None:
    """Add every honest variant to its op, the derived GEMM members included (inside
    ``registry.isolated()`` in tests)."""
    register_table(HONEST)
    for op in HONEST:
        add_gemm_members(op, ("bf16", "tf32"))