"""Test-only variants wrong only where an input distribution or a sweep looks (issue 48).

Each is a kernel author's bug that is right at the shipped fixed shapes on normal inputs:

- ``mhc_rms_no_eps``: mHC's bf16 path with the RMS statistic taken without its epsilon
  (``rsqrt(mean(x^2))``): a token of zeros (a padding token) gives 0 x inf = NaN;
- ``indexer_ftz``: the indexer's bf16 path on operands whose e4m3 subnormals were flushed to
  zero (a dequantization or a GEMM with FTZ/DAZ);
- ``indexer_fp16_topk``: the indexer's bf16 logits, their top-k selected on fp16 copies
  (scores past 65504 become inf and tie);
- ``indexer_row_end_late``: the indexer's bf16 path masking each row at the end of the page
  that holds its last valid token, not at the token: a row that ends before the batch's
  width shows the rest of that page (zero-padded keys: logits of 0 where -inf belongs).

Each is held to the budget of the shipped variant it is a twin of (bf16);
tests/test_coverage_catch.py shows each caught by the shipped case built to reach it and
that twin passing there. Registered by the tests, never shipped.
"""

from __future__ import annotations

import torch

from numcheck.numerics.topk import select_topk
from numcheck.ops import indexer, mhc
from numcheck.ops.registry import Inputs, Outputs, Params


def mhc_rms_no_eps(inputs: Inputs, p: Params) -> Outputs:
    """mHC's bf16 path with its RMS statistic rsqrt(mean(x^2)), without the epsilon."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    mm = x @ inputs["hc_fn"].to(torch.bfloat16).T
    m = mm.float() * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True))
    return mhc._epilogue(m, xf, inputs, p)


#: e4m3fn's exponent bits: a code with none set is zero or a subnormal.
_E4M3_EXPONENT = 0x78


def _flushed(codes: torch.Tensor) -> torch.Tensor:
    """e4m3 bytes with every subnormal code made +0 (sign kept off: FTZ gives +0 or -0 alike
    for a sum)."""
    return torch.where((codes & _E4M3_EXPONENT) == 0, torch.zeros_like(codes), codes)


def indexer_ftz(inputs: Inputs, p: Params) -> Outputs:
    """The indexer's bf16 path on q and keys with e4m3 subnormals flushed to zero."""
    cache = inputs["kv_cache"].clone()
    pages, bs, _, width = cache.shape
    d = width - 4
    flat = cache.view(pages, bs * width)
    flat[:, : bs * d] = _flushed(flat[:, : bs * d])
    q = _flushed(inputs["q"].view(torch.uint8)).view(torch.float8_e4m3fn)
    return indexer.bf16({**inputs, "q": q, "kv_cache": cache}, p)


def indexer_fp16_topk(inputs: Inputs, p: Params) -> Outputs:
    """The indexer's bf16 logits, selected on fp16 copies of them."""
    out = indexer.bf16(inputs, p)
    keys = out["logits"].to(torch.float16).float()
    return {"logits": out["logits"], "topk": select_topk(keys, p["index_topk"])}


def indexer_row_end_late(inputs: Inputs, p: Params) -> Outputs:
    """The indexer's bf16 path masking each row at the end of its last valid token's page."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    b, n, h = inputs["q"].shape[:3]
    length = kt.shape[-1]
    s = torch.bmm(q, kt).float().relu().view(b, n, h, length)
    raw = (s * inputs["weights"].view(b, n, h, 1)).sum(dim=2) * k_scale.view(b, 1, length)
    page = p["block_size"]
    limit = (inputs["context_lens"].long().view(-1, 1, 1) - n
             + torch.arange(n).view(1, -1, 1) + 1)
    late = -(-limit // page) * page  # rounded up to the page: the bug
    mask = torch.arange(length).view(1, 1, -1) < late
    logits = raw.masked_fill(~mask, float("-inf")).view(b * n, length)
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


#: op -> name -> (function, precision class): every bug here is a twin of the op's bf16.
COVERAGE_PLANTED = {
    "mhc_pre": {"mhc_rms_no_eps": (mhc_rms_no_eps, "bf16")},
    "indexer": {"indexer_ftz": (indexer_ftz, "bf16"),
                "indexer_fp16_topk": (indexer_fp16_topk, "bf16"),
                "indexer_row_end_late": (indexer_row_end_late, "bf16")},
}
