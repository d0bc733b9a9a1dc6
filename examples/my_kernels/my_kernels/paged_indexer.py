"""Our serving stack's indexer: paged FP8 MQA logits, one page column at a time.

It reads the public paged layout directly: ``kv_cache`` is uint8
``[num_blocks, block_size, 1, D + 4]`` where, inside one block, the ``block_size * D`` fp8
e4m3 key bytes come first and the ``block_size`` fp32 scales follow. Instead of gathering
the whole context first, it walks the block table one page column at a time and runs the
score GEMM in ``score_dtype`` (bf16 in production; fp32 for a reference):

    logit[b, t] = s_t * sum_h w[b, h] * relu(q[b, h] . k[t])    for t < valid length
    logit[b, t] = -inf                                           otherwise
"""

from __future__ import annotations

import torch


def paged_mqa_logits(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    max_context: int,
    *,
    score_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """Logits ``[B * next_n, max_context]`` fp32; row ``j`` of request ``b`` sees
    ``context_lens[b] - next_n + j + 1`` tokens (MTP), the rest is ``-inf``."""
    b, n, h, d = q.shape
    pages, bs = kv_cache.shape[0], kv_cache.shape[1]
    flat = kv_cache.view(pages, bs * (d + 4))
    keys = flat[:, : bs * d].contiguous().view(torch.float8_e4m3fn).view(pages, bs, d)
    scales = flat[:, bs * d :].contiguous().view(torch.float32).view(pages, bs)
    qs = q.to(score_dtype).view(b, n * h, d)  # e4m3 -> bf16 is exact
    w = weights.view(b, n, h, 1)
    blocks = -(-max_context // bs)
    out = torch.empty(b, n, blocks * bs, dtype=torch.float32, device=q.device)
    for j in range(blocks):
        page = block_table[:, j].long()
        k = keys[page].to(score_dtype)  # [B, bs, D]
        scores = torch.bmm(qs, k.transpose(1, 2))  # [B, n*H, bs], rounded to score_dtype
        s = scores.float().relu().view(b, n, h, bs)
        out[:, :, j * bs : (j + 1) * bs] = (s * w).sum(dim=2) * scales[page].view(b, 1, bs)
    logits = out[:, :, :max_context]
    t = torch.arange(max_context, device=q.device).view(1, 1, -1)
    rows = torch.arange(n, device=q.device).view(1, -1, 1)
    limit = context_lens.long().view(-1, 1, 1) - n + rows + 1
    return logits.masked_fill(t >= limit, float("-inf")).reshape(b * n, max_context)
