"""Sparse-attention indexer: paged FP8 MQA logits + top-k (DeepSeek V3.2 / V4).

The KV cache uses the public block-split layout: uint8 ``[num_blocks, block_size, 1, D + 4]``
where, inside one block, the ``block_size * D`` fp8 e4m3 bytes of its tokens come first and
their ``block_size`` fp32 scales follow. Math (docs/ops.md):

    logit[b, t] = s_t * sum_h w[b, h] * relu(q[b, h] . k[t])   for t < valid length
    logit[b, t] = -inf                                          otherwise
    selected[b] = topk(logit[b], k = min(index_topk, valid length))   (-1 padded)

with ``next_n > 1`` row ``j`` of request ``b`` seeing ``context_len[b] - next_n + j + 1`` tokens.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from numcheck.distributions import DISTRIBUTIONS, activations, input_distribution
from numcheck.inputs import E4M3_MAX, SCALE_FORMATS, normal, quantize_e4m3, rng
from numcheck.numerics.topk import select_topk
from numcheck.ops.batch import Batch, BatchAxis
from numcheck.ops.spec import (
    Gemm,
    Inputs,
    OpSpec,
    Outputs,
    ParamProblem,
    Params,
    ParamSpec,
    TopkSpec,
    Variant,
)
from numcheck.ops.structure import Grouping, Structure
from numcheck.precision import matmul_precision

PARAMS = {
    "batch": ParamSpec(int, 4, "requests in the batch", min=1),
    "next_n": ParamSpec(int, 1, "query tokens per request (1 = decode, 2 = MTP)", min=1),
    "heads": ParamSpec(int, 64, "indexer heads H", min=1),
    "head_dim": ParamSpec(int, 128, "indexer head dim D", min=1),
    "block_size": ParamSpec(int, 64, "tokens per KV page", min=1),
    "max_context": ParamSpec(int, 2048, "longest context in the batch", min=1),
    "min_context": ParamSpec(int, 0, "shortest context (0: max_context // 4)", min=0),
    "short_context": ParamSpec(
        int, 0, "the first request's context (0: drawn like the others); set, another request "
        "spans max_context, so the first request's rows end before the batch's width", min=0),
    "index_topk": ParamSpec(int, 512, "tokens selected per query row", min=1),
    "shuffle_pages": ParamSpec(bool, True, "block tables are a random permutation of pages"),
    "near_ties": ParamSpec(
        float, 0.0, "fraction of tokens made exact or near copies of another token (adversarial ties)",
        min=0.0, max=0.5,
    ),
    "scale_fmt": ParamSpec(
        str, "amax448",
        "KV scale format: amax448 (amax / 448) or ue8m0 (power of two, V3.2's inference config)",
        choices=SCALE_FORMATS,
    ),
}


def check_params(p: Params) -> list[ParamProblem]:
    """Rules between parameters: the context range is not empty and holds next_n tokens."""
    problems = []
    big, small = p["max_context"], p["min_context"]
    if small > big:
        problems.append(ParamProblem(
            "min_context", f"min_context {small} > max_context {big}",
            f"set min_context <= {big} (0 means max_context // 4), or raise max_context"))
    if p["next_n"] > big:
        problems.append(ParamProblem(
            "next_n", f"next_n {p['next_n']} > max_context {big}: a request's query rows "
            "need that many tokens", f"set next_n <= {big}, or raise max_context"))
    short = p.get("short_context", 0)
    if short and not p["next_n"] <= short <= big:
        problems.append(ParamProblem(
            "short_context", f"short_context {short} is outside next_n {p['next_n']} .. "
            f"max_context {big}", f"set short_context between {p['next_n']} and {big}"))
    if short and p["batch"] < 2:
        problems.append(ParamProblem(
            "batch", f"short_context {short} needs another request to span max_context {big}, "
            "and the batch holds one", "set batch >= 2, or short_context = 0"))
    return problems


PRESETS = {
    "v32": {"heads": 64, "head_dim": 128, "index_topk": 2048},
    "v4flash": {"heads": 64, "head_dim": 128, "index_topk": 512},
    "v4pro": {"heads": 64, "head_dim": 128, "index_topk": 1024},
}


def make_inputs(p: Params, seed: int) -> Inputs:
    """Inputs for one case and seed, on the CPU."""
    b, n, h, d, bs, big = (
        p["batch"], p["next_n"], p["heads"], p["head_dim"], p["block_size"], p["max_context"]
    )
    small = p["min_context"] or max(big // 4, 1)
    small = max(small, n)
    scale_fmt = p.get("scale_fmt", "amax448")  # parameters built by hand may omit it
    if scale_fmt not in SCALE_FORMATS:
        raise ValueError(
            f"indexer: scale_fmt must be one of {', '.join(SCALE_FORMATS)}, got {scale_fmt!r}"
        )
    if not 1 <= small <= big:
        raise ValueError(f"indexer: need next_n <= min_context <= max_context, got {small}, {big}")

    lens_rng = rng(seed, "context_lens")
    context_lens = np.asarray(lens_rng.integers(small, big, size=b, endpoint=True))
    longest = int(lens_rng.integers(0, b))
    short = p.get("short_context", 0)  # parameters built by hand may omit it
    if short:
        # The first request ends where the case says; another spans the batch's width, so
        # the first request's rows end before it (a mask applied late shows there).
        context_lens[0] = short
        longest = 1 + longest % (b - 1)
    context_lens[longest] = big  # the longest context is always present
    blocks = [math.ceil(int(c) / bs) for c in context_lens]
    max_blocks = math.ceil(big / bs)
    # One spare page per request, so a wrong page index reads real but foreign data.
    num_pages = sum(blocks) + b
    order = (
        rng(seed, "pages").permutation(num_pages)
        if p["shuffle_pages"]
        else np.arange(num_pages)
    )
    block_table = torch.zeros(b, max_blocks, dtype=torch.int32)
    cache = torch.zeros(num_pages, bs * (d + 4), dtype=torch.uint8)
    key_bytes = cache[:, : bs * d].view(num_pages, bs, d)
    scale_bytes = cache[:, bs * d :].view(num_pages, bs, 4)

    k_rng = rng(seed, "keys")
    tie_rng = rng(seed, "near_ties")
    distribution = input_distribution(p)
    next_page = 0
    for i in range(b):
        length = int(context_lens[i])
        if distribution == "normal":
            keys = normal(k_rng, (length, d))
            # Token magnitudes vary like real keys, so per-token scales matter.
            keys *= torch.from_numpy(np.exp(0.5 * k_rng.standard_normal((length, 1)))).float()
        else:
            keys = _drawn(k_rng, (length, d), distribution, keys=True)
        ties = _plan_near_ties(length, p["near_ties"], tie_rng)
        if scale_fmt == "amax448":
            _scale_copies(keys, ties)
            q8, scale = quantize_e4m3(keys)
        else:
            q8, scale = quantize_e4m3(keys, scale_fmt)
            _nudge_copies(q8, scale, ties)
        pages = torch.from_numpy(order[next_page : next_page + blocks[i]].astype(np.int64))
        next_page += blocks[i]
        block_table[i, : blocks[i]] = pages.to(torch.int32)
        padded = blocks[i] * bs
        q8_pad = torch.zeros(padded, d, dtype=torch.uint8)
        q8_pad[:length] = q8.view(torch.uint8)
        s_pad = torch.zeros(padded, dtype=torch.float32)
        s_pad[:length] = scale
        key_bytes[pages] = q8_pad.view(blocks[i], bs, d)
        scale_bytes[pages] = s_pad.view(torch.uint8).view(blocks[i], bs, 4)

    q_rng = rng(seed, "q")
    q_raw = (normal(q_rng, (b, n, h, d)) if distribution == "normal"
             else _drawn(q_rng, (b, n, h, d), distribution, keys=False))
    q8, q_scale = quantize_e4m3(q_raw)
    w_raw = normal(rng(seed, "weights"), (b * n, h))
    # Folded like the model: weights_proj(x) * H^-0.5 * q_scale * D^-0.5.
    weights = w_raw * (h**-0.5) * (d**-0.5) * q_scale.view(b * n, h)
    return {
        "q": q8,
        "kv_cache": cache.view(num_pages, bs, 1, d + 4),
        "weights": weights.contiguous(),
        "context_lens": torch.from_numpy(context_lens.astype(np.int32)),
        "block_table": block_table,
    }


#: ``near_max``: q and keys are drawn near 448 x this, so their e4m3 codes sit near e4m3's
#: largest (448) and their scales are this: the logits then lie beyond fp16's largest finite
#: value (65504) for all but a few tokens (their spread is about 8e4 x NEAR_MAX_SCALE^2), so
#: a kernel that keeps or sorts scores in fp16 loses their order at any top-k.
NEAR_MAX_SCALE = 16.0


def _drawn(gen: np.random.Generator, shape: tuple[int, ...], distribution: str, *,
           keys: bool) -> torch.Tensor:
    """Keys (``keys``) or queries (last axis: head_dim) of a distribution other than the
    default, as raw values that each row's own scale (amax / 448) turns into e4m3 codes.

    ``subnormal``: a row keeps one element at full scale (448), or the scale would lift its
    values out of the subnormal range; the rest are e4m3 subnormals. The query's full-scale
    element is its first, each key's another (drawn per key), so every product of a query
    and a key pairs a full-scale element with a subnormal one: the logits are made of
    subnormal products, and a path that flushes e4m3 subnormals loses them.
    ``near_max``: codes near 448 with scales of :data:`NEAR_MAX_SCALE` (logits past fp16)."""
    top = E4M3_MAX * NEAR_MAX_SCALE if distribution == "near_max" else E4M3_MAX
    x = activations(gen, shape, distribution, dtype=torch.float8_e4m3fn, largest=top)
    if distribution == "subnormal":
        rows = x.view(-1, shape[-1])
        cols = (torch.from_numpy(gen.integers(1, shape[-1], size=rows.shape[0]))
                if keys and shape[-1] > 1 else torch.zeros(rows.shape[0], dtype=torch.int64))
        at = torch.arange(rows.shape[0])
        rows[at, cols] = torch.where(rows[at, cols] < 0, -E4M3_MAX, E4M3_MAX)
    return x


#: Near-ties planted in one request: (source tokens, target tokens, relative offsets).
TiePlan = tuple[np.ndarray, np.ndarray, np.ndarray]


def _plan_near_ties(length: int, fraction: float, gen: np.random.Generator) -> TiePlan:
    """Which tokens become copies of which, and how far off: ``fraction`` of the tokens.

    Half the offsets are 0 (exact ties), the others uniform in |delta| <= 2^-9: below bf16's
    resolution, so bf16 rounding can reorder the pair.
    """
    count = min(round(fraction * length), length // 2)
    if count == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    picked = gen.permutation(length)[: 2 * count]
    sources, targets = picked[:count], picked[count:]
    delta = gen.uniform(-(2.0**-9), 2.0**-9, size=count)
    delta[gen.random(count) < 0.5] = 0.0
    return sources, targets, delta


def _scale_copies(keys: torch.Tensor, ties: TiePlan) -> None:
    """amax/448 scales: a copy scaled by ``1 + delta`` quantizes to the same fp8 bytes with a
    scale ``1 + delta`` larger, so its logit is exactly ``(1 + delta)`` times the source's."""
    sources, targets, delta = ties
    if len(sources) == 0:
        return
    factor = torch.from_numpy(1.0 + delta).float().unsqueeze(1)
    keys[torch.from_numpy(targets)] = keys[torch.from_numpy(sources)] * factor


def _nudge_copies(q8: torch.Tensor, scale: torch.Tensor, ties: TiePlan) -> None:
    """Power-of-two scales cannot absorb ``1 + delta`` (a scaled copy would re-round every
    fp8 byte: no longer a near-tie), so the copy is made after quantization: the same bytes
    and scale (delta = 0: an exact tie), or, for delta != 0, the same bytes but for the
    smallest non-zero element, moved one e4m3 step away from (delta > 0) or towards
    (delta < 0) zero. That moves each head's dot product by less than one e4m3 step of one
    small element: a tie below bf16's resolution, as in the amax/448 case."""
    sources, targets, delta = ties
    if len(sources) == 0:
        return
    src, dst = torch.from_numpy(sources), torch.from_numpy(targets)
    codes = q8.view(torch.uint8)
    codes[dst] = codes[src]
    scale[dst] = scale[src]
    for row, d in zip(targets.tolist(), delta.tolist(), strict=True):
        if d == 0.0:
            continue
        magnitude = (codes[row] & 0x7F).to(torch.int16)
        nonzero = magnitude > 0
        if not bool(nonzero.any()):
            continue
        col = int(torch.where(nonzero, magnitude, 0x7F).argmin())
        m = int(magnitude[col])
        # 0x7E is e4m3fn's largest finite magnitude (448); 0x7F is NaN.
        step = 1 if (d > 0 and m < 0x7E) or m == 1 else -1
        codes[row, col] = (int(codes[row, col]) & 0x80) | (m + step)


def check_inputs(inputs: Inputs, p: Params) -> list[ParamProblem]:
    """Recorded inputs against the case's shape: q is [batch, next_n, heads, head_dim], the
    cache's pages hold block_size tokens of head_dim + 4 bytes, context lengths fit
    max_context, the block table covers them."""
    q, cache, lens = inputs["q"], inputs["kv_cache"], inputs["context_lens"]
    if q.dim() != 4 or cache.dim() != 4:
        return [ParamProblem("batch", f"q {list(q.shape)} and kv_cache {list(cache.shape)} are "
                             "not [batch, next_n, heads, head_dim] and [pages, block_size, 1, "
                             "head_dim + 4]", "record them in the public layout")]
    names = ("batch", "next_n", "heads", "head_dim")
    problems = [ParamProblem(name, f"q is {list(q.shape)}: {got} for {name}, the case says "
                             f"{p[name]}", f"set shape.{name} = {got}")
                for name, got in zip(names, q.shape, strict=True) if p[name] != got]
    if cache.shape[1] != p["block_size"]:
        problems.append(ParamProblem("block_size", f"kv_cache pages hold {cache.shape[1]} "
                                     f"tokens, the case says {p['block_size']}",
                                     f"set shape.block_size = {cache.shape[1]}"))
    longest = int(lens.max()) if lens.numel() else 0
    if longest > p["max_context"] or int(lens.min()) < p["next_n"]:
        problems.append(ParamProblem("max_context", f"context lengths {lens.tolist()} do not "
                                     f"fit next_n {p['next_n']}..max_context {p['max_context']}",
                                     f"set shape.max_context = {longest}"))
    blocks = math.ceil(p["max_context"] / cache.shape[1])
    table = inputs["block_table"]
    if table.dim() != 2 or table.shape[1] < blocks:
        problems.append(ParamProblem("max_context", f"block_table {list(table.shape)} covers "
                                     f"fewer than the {blocks} pages of max_context "
                                     f"{p['max_context']}", "record the whole block table"))
    return problems


def paged_keys(inputs: Inputs, max_context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather the fp8 keys ``[B, L, D]`` and their fp32 scales ``[B, L]`` through the block table."""
    cache, table = inputs["kv_cache"], inputs["block_table"]
    pages, bs = cache.shape[0], cache.shape[1]
    d = cache.shape[3] - 4
    flat = cache.view(pages, bs * (d + 4))
    keys = flat[:, : bs * d].contiguous().view(torch.float8_e4m3fn).view(pages, bs, d)
    scales = flat[:, bs * d :].contiguous().view(torch.float32).view(pages, bs)
    blocks = math.ceil(max_context / bs)
    used = table[:, :blocks].long()
    b = table.shape[0]
    k = keys[used].view(b, blocks * bs, d)[:, :max_context]
    s = scales[used].view(b, blocks * bs)[:, :max_context]
    return k, s


def valid_mask(context_lens: torch.Tensor, next_n: int, length: int) -> torch.Tensor:
    """``[B, next_n, L]`` bool: row j of request b sees ``context_len - next_n + j + 1`` tokens."""
    t = torch.arange(length, device=context_lens.device)
    j = torch.arange(next_n, device=context_lens.device)
    limit = context_lens.long().view(-1, 1, 1) - next_n + j.view(1, -1, 1) + 1
    return t.view(1, 1, -1) < limit


def logits_from_scores(
    scores: torch.Tensor, inputs: Inputs, k_scale: torch.Tensor | None, p: Params
) -> torch.Tensor:
    """fp32 epilogue: relu, head weights, head sum, kv scale and the -inf mask.

    ``scores`` is ``[B, next_n * H, L]`` (any float dtype); returns ``[B * next_n, L]`` fp32.
    ``k_scale`` None: the scale was folded into K before the GEMM.
    """
    b, n, h = inputs["q"].shape[:3]
    length = scores.shape[-1]
    s = scores.float().relu().view(b, n, h, length)
    logits = (s * inputs["weights"].view(b, n, h, 1)).sum(dim=2)
    if k_scale is not None:
        logits = logits * k_scale.view(b, 1, length)
    logits = logits.masked_fill(~valid_mask(inputs["context_lens"], n, length), float("-inf"))
    return logits.view(b * n, length)


def _outputs(
    scores: torch.Tensor, inputs: Inputs, k_scale: torch.Tensor | None, p: Params
) -> Outputs:
    logits = logits_from_scores(scores, inputs, k_scale, p)
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


def _operands(inputs: Inputs, p: Params, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, n, h, d = inputs["q"].shape
    k, k_scale = paged_keys(inputs, p["max_context"])
    q = inputs["q"].to(dtype).view(b, n * h, d)
    return q, k.to(dtype).transpose(1, 2), k_scale


def fp32(inputs: Inputs, p: Params) -> Outputs:
    """Reference: upcast e4m3 to fp32, IEEE fp32 bmm (TF32 forced off)."""
    with matmul_precision(tf32=False):
        q, kt, k_scale = _operands(inputs, p, torch.float32)
        return _outputs(torch.bmm(q, kt), inputs, k_scale, p)


def bf16(inputs: Inputs, p: Params) -> Outputs:
    """bf16 bmm with bf16 output (the public change): per-head scores rounded to bf16."""
    q, kt, k_scale = _operands(inputs, p, torch.bfloat16)
    return _outputs(torch.bmm(q, kt), inputs, k_scale, p)


def bf16_fp32out(inputs: Inputs, p: Params) -> Outputs:
    """bf16 operands (exact for e4m3), fp32 accumulation kept in the output; CUDA only."""
    q, kt, k_scale = _operands(inputs, p, torch.bfloat16)
    return _outputs(torch.bmm(q, kt, out_dtype=torch.float32), inputs, k_scale, p)


def bf16_folded(inputs: Inputs, p: Params) -> Outputs:
    """bf16 GEMM on K dequantized with its per-token scale folded in (K * s rounded to bf16),
    as DeepGEMM's simulated reference does; bf16 scores, no scale after the GEMM.

    Rounding K * s to bf16 adds an error the ``bf16`` variant (exact e4m3 operands, scale
    applied in fp32 after) does not have: this scheme has its own budgets (docs/budgets.md).
    """
    b, n, h, d = inputs["q"].shape
    k, k_scale = paged_keys(inputs, p["max_context"])
    folded = (k.float() * k_scale.unsqueeze(-1)).to(torch.bfloat16)
    q = inputs["q"].to(torch.bfloat16).view(b, n * h, d)
    return _outputs(torch.bmm(q, folded.transpose(1, 2)), inputs, None, p)


def tf32(inputs: Inputs, p: Params) -> Outputs:
    """The fp32 path with TF32 matmul allowed (e4m3 operands are exact in TF32)."""
    with matmul_precision(tf32=True):
        q, kt, k_scale = _operands(inputs, p, torch.float32)
        return _outputs(torch.bmm(q, kt), inputs, k_scale, p)


def gemm_site(inputs: Inputs, p: Params, gemm: Gemm) -> Outputs:
    """The op with its score GEMM done by ``gemm`` on q and the paged keys as stored, in e4m3
    (the GEMM reads them in its class's format, which holds every e4m3 value exactly), then
    the fp32 epilogue every shipped variant has (relu, head weights, head sum, kv scale,
    mask) and the top-k (numcheck.honest.gemm_family)."""
    b, n, h, d = inputs["q"].shape
    k, k_scale = paged_keys(inputs, p["max_context"])
    q = inputs["q"].view(b, n * h, d)
    return _outputs(gemm(q, k.transpose(1, 2)), inputs, k_scale, p)


def flops(p: Params) -> float:
    """The score bmm: 2 * B * next_n * H * D * L (L = max_context, the dense width)."""
    return 2.0 * p["batch"] * p["next_n"] * p["heads"] * p["head_dim"] * p["max_context"]


def min_bytes(p: Params) -> float:
    """fp8 keys and fp32 scales read once, q (fp8) and weights read, logits and top-k written."""
    b, n, h, d, length = p["batch"], p["next_n"], p["heads"], p["head_dim"], p["max_context"]
    keys = b * length * (d + 4)
    q_and_w = b * n * h * (d + 4)
    written = b * n * length * 4 + b * n * p["index_topk"] * 4
    return float(keys + q_and_w + written)


# -- structure: the groupings a kernel engineer thinks in (numcheck.localize.failure) -------------
# Logits are [B * next_n, L]: row r is MTP row r % next_n of request r // next_n; token t of
# request b lies in page block_table[b, t // block_size].


def _request_of_rows(p: Params, rows: int) -> torch.Tensor:
    return torch.arange(rows) // p["next_n"]


def _request_labels(inputs: Inputs, p: Params, shape: tuple[int, ...]) -> torch.Tensor:
    return _request_of_rows(p, shape[0]).view(-1, 1)


def _mtp_labels(inputs: Inputs, p: Params, shape: tuple[int, ...]) -> torch.Tensor:
    return (torch.arange(shape[0]) % p["next_n"]).view(-1, 1)


def _page_labels(inputs: Inputs, p: Params, shape: tuple[int, ...]) -> torch.Tensor:
    table = inputs["block_table"].cpu().long()
    block = (torch.arange(shape[1]) // p["block_size"]).clamp(max=table.shape[1] - 1)
    return table[_request_of_rows(p, shape[0])][:, block]


def _describe_page(inputs: Inputs, p: Params, page: int) -> str:
    where = torch.nonzero(inputs["block_table"].cpu() == page)
    if len(where) == 0:
        return f"page {page}"
    b, j = (int(x) for x in where[0])
    return f"page {page} (request {b}, block {j})"


def _position_labels(inputs: Inputs, p: Params, shape: tuple[int, ...]) -> torch.Tensor:
    return (torch.arange(shape[1]) % p["block_size"]).view(1, -1)


#: Page kinds: a full page that is not a request's last, the last page when partial / full.
PAGE_KINDS = ("a full page before a request's last", "the last, partial page of each request",
              "the last page of a request, when full")


def _page_kind_labels(inputs: Inputs, p: Params, shape: tuple[int, ...]) -> torch.Tensor:
    bs = p["block_size"]
    ctx = inputs["context_lens"].cpu().long()[_request_of_rows(p, shape[0])].view(-1, 1)
    block = (torch.arange(shape[1]) // bs).view(1, -1)
    last = (ctx - 1) // bs
    partial = (ctx % bs != 0).long()
    kind = torch.where(block == last, 2 - partial, torch.zeros_like(block))
    return torch.where(block > last, -1, kind)


#: Where a token sits against its row's valid length (a mask off by one shows here).
ROW_END_KINDS = ("a token before the last valid one", "the last valid token of each row",
                 "the first masked position after each row's last valid token",
                 "a masked position further out")


def _row_end_labels(inputs: Inputs, p: Params, shape: tuple[int, ...]) -> torch.Tensor:
    # ``[R, 1]``: how many tokens each row sees (``context_len - next_n + j + 1``).
    n = p["next_n"]
    ctx = inputs["context_lens"].cpu().long()[_request_of_rows(p, shape[0])]
    limit = (ctx - n + torch.arange(shape[0]) % n + 1).view(-1, 1)
    t = torch.arange(shape[1]).view(1, -1)
    return torch.where(t < limit - 1, 0, torch.where(t == limit - 1, 1,
                       torch.where(t == limit, 2, 3)))


LOGITS_STRUCTURE = Structure(
    axes=("row", "token"),
    groupings=(
        Grouping("request", _request_labels,
                 describe=lambda i, p, b: f"request {b}"),
        Grouping("MTP row", _mtp_labels,
                 describe=lambda i, p, j: f"MTP row {j} of each request"),
        Grouping("page", _page_labels, describe=_describe_page),
        Grouping("position within a page", _position_labels, plural="positions within a page",
                 describe=lambda i, p, k: f"position {k} within each page"),
        Grouping("page kind", _page_kind_labels,
                 describe=lambda i, p, k: PAGE_KINDS[k]),
        Grouping("place against the row end", _row_end_labels,
                 plural="places against the row end",
                 describe=lambda i, p, k: ROW_END_KINDS[k]),
    ),
)


#: A request is a batch index b: its q, weights rows (next_n), context length and block
#: table row, against the shared paged cache (the same pages, read through its own row of
#: the table); its logits and top-k are its next_n rows. Alone, the logits keep their
#: max_context columns, so the rows compare one to one.
BATCH = Batch(
    inputs={"q": 0, "weights": BatchAxis(0, per_request="next_n"), "context_lens": 0,
            "block_table": 0},
    outputs={"logits": BatchAxis(0, per_request="next_n"),
             "topk": BatchAxis(0, per_request="next_n")},
    size_param="batch",
)

OP = OpSpec(
    name="indexer",
    version=1,
    reference="fp32",
    variants={
        "fp32": Variant("fp32", fp32, "fp32", doc=fp32.__doc__ or ""),
        "bf16": Variant("bf16", bf16, "bf16", doc=bf16.__doc__ or ""),
        "bf16_fp32out": Variant(
            "bf16_fp32out", bf16_fp32out, "bf16", devices=("cuda",), doc=bf16_fp32out.__doc__ or ""
        ),
        "tf32": Variant("tf32", tf32, "tf32", doc=tf32.__doc__ or ""),
        "bf16_folded": Variant("bf16_folded", bf16_folded, "bf16", doc=bf16_folded.__doc__ or ""),
    },
    make_inputs=make_inputs,
    outputs=("logits", "topk"),
    params=PARAMS,
    presets=PRESETS,
    topk=TopkSpec(indices="topk", scores="logits"),
    doc=__doc__ or "",
    flops=flops,
    min_bytes=min_bytes,
    rounding_reference={"bf16": "bf16", "tf32": "tf32"},
    # The score GEMM's place: numcheck derives the honest members of each precision class
    # (TF32 rounded and truncated, bf16 split-K with bf16 partials...) and the rounding
    # envelope of max_err_ratio from it (docs/budgets.md).
    gemm_site=gemm_site,
    check_params=check_params,
    # Positions past a row's valid length are -inf by definition (the mask).
    nonfinite={"logits": ("-inf",)},
    structure={"logits": LOGITS_STRUCTURE},
    batch=BATCH,
    distributions=DISTRIBUTIONS,
    check_inputs=check_inputs,
)
