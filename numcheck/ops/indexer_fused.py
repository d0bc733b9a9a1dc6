"""Indexer ``fused``: one Triton kernel from the paged e4m3 cache to fp32 logits.

One program per (request, BLOCK_L tokens) reads its keys and their fp32 scales straight from
the block-split pages (no gathered copy, no upcast copy, no ``[B, H, L]`` intermediate), puts
all ``next_n * H`` query rows of the request against them in one tensor-core product with
fp32 accumulation, then applies relu, the head weights, the head sum, the kv scale and the
-inf mask in registers and writes ``[B * next_n, L]`` fp32 logits. Both MTP rows share one
read of the keys. Tiles wholly past a request's context write -inf and read nothing. Top-k is
``torch.topk`` through :func:`numcheck.numerics.topk.select_topk`.

Operands (``operand=``): ``"bf16"`` (default on CUDA: e4m3 -> bf16 is exact, bf16 MMA with
fp32 accumulate), ``"fp8"`` (e4m3 straight into an fp8 MMA; Hopper's fp8 accumulator keeps
fewer bits, see docs/fused.md), ``"fp32"`` (TF32 MMA on CUDA: exact for e4m3). On the CPU
the kernel runs under Triton's interpreter with the operands upcast to fp32 (exact).

Needs triton: import it only when :data:`triton_support.TRITON_MISSING` is empty (the probe
there must run first: it decides whether the kernels are compiled or interpreted).
"""

from __future__ import annotations

import math

import torch

# ruff: noqa: I001 -- this import must come first: the probe in it decides, before triton
# is imported, whether the kernels run compiled or under the interpreter.
from numcheck.ops.triton_support import GPU_LAUNCH, INTERPRETED

import triton
import triton.language as tl

from numcheck.ops.spec import Inputs, Outputs, Params
from numcheck.numerics.topk import select_topk

OPERANDS = ("bf16", "fp8", "fp32")
_OPERAND_CODE = {"fp32": 0, "bf16": 1, "fp8": 2}


@triton.jit
def _indexer_logits_kernel(
    q_ptr,  # [B, NEXT_N * H, D] e4m3
    kv_ptr,  # the cache bytes (uint8; e4m3 keys)
    scale_ptr,  # the same bytes, viewed as fp32
    w_ptr,  # [B * NEXT_N, H] fp32
    lens_ptr,  # [B] int32
    table_ptr,  # [B, max_blocks] int32
    out_ptr,  # [B * NEXT_N, L] fp32
    length,  # L: logits per row
    max_blocks,
    H: tl.constexpr,
    D: tl.constexpr,
    NEXT_N: tl.constexpr,
    PAGE: tl.constexpr,  # tokens per page
    BLOCK_L: tl.constexpr,
    OPERAND: tl.constexpr,  # 0 fp32, 1 bf16, 2 fp8
    EMULATE: tl.constexpr,  # interpreter: upcast MMA operands to fp32 (exact)
):
    b = tl.program_id(0)
    start = tl.program_id(1) * BLOCK_L
    ctx = tl.load(lens_ptr + b)
    t = start + tl.arange(0, BLOCK_L)
    rows = tl.arange(0, NEXT_N)
    # Row j of request b sees ctx - NEXT_N + j + 1 tokens.
    limit = ctx - NEXT_N + 1 + rows
    out_offs = (b * NEXT_N + rows)[:, None] * length + t[None, :]
    in_row = t[None, :] < length
    if start >= ctx:
        # Past this request's context: only the mask to write, no keys to read.
        ninf = tl.full((NEXT_N, BLOCK_L), float("-inf"), tl.float32)
        tl.store(out_ptr + out_offs, ninf, mask=in_row)
    else:
        live = t < ctx
        page = tl.load(table_ptr + b * max_blocks + t // PAGE, mask=live, other=0).to(tl.int64)
        slot = t % PAGE
        page_base = page * (PAGE * (D + 4))  # bytes: PAGE * D key bytes, then PAGE fp32 scales
        d = tl.arange(0, D)
        # Loaded as bytes, then reinterpreted: a masked load's fill value is converted over
        # the whole tile, which the interpreter does slowly for float8.
        k = tl.load(
            kv_ptr + (page_base + slot * D)[:, None] + d[None, :], mask=live[:, None], other=0
        ).to(tl.float8e4nv, bitcast=True)  # [BLOCK_L, D] e4m3
        k_scale = tl.load(scale_ptr + (page_base + PAGE * D) // 4 + slot, mask=live, other=0.0)

        m = tl.arange(0, NEXT_N * H)
        q = tl.load(q_ptr + b * (NEXT_N * H * D) + m[:, None] * D + d[None, :])  # [NEXT_N*H, D]
        kt = tl.trans(k)
        if EMULATE:
            scores = tl.dot(q.to(tl.float32), kt.to(tl.float32))
        elif OPERAND == 1:
            scores = tl.dot(q.to(tl.bfloat16), kt.to(tl.bfloat16))
        elif OPERAND == 2:
            scores = tl.dot(q, kt)
        else:
            scores = tl.dot(q.to(tl.float32), kt.to(tl.float32), input_precision="tf32")
        # Epilogue in fp32 registers: relu, head weights, head sum, kv scale, mask.
        w = tl.load(w_ptr + b * (NEXT_N * H) + m)
        weighted = tl.maximum(scores, 0.0) * w[:, None]
        logits = tl.sum(tl.reshape(weighted, (NEXT_N, H, BLOCK_L)), axis=1) * k_scale[None, :]
        logits = tl.where(t[None, :] < limit[:, None], logits, float("-inf"))
        tl.store(out_ptr + out_offs, logits, mask=in_row)


def logits(
    inputs: Inputs, max_context: int, *, operand: str = "bf16", block_l: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """``[B * next_n, max_context]`` fp32 logits from the paged cache, in one kernel launch.

    ``operand`` picks the MMA operand type on CUDA (ignored on the CPU, where the
    interpreter multiplies exact fp32 upcasts); ``block_l``, ``num_warps`` tune the tile.
    """
    if operand not in OPERANDS:
        raise ValueError(f"operand must be one of {OPERANDS}, got {operand!r}")
    q, cache = inputs["q"], inputs["kv_cache"]
    table, lens = inputs["block_table"], inputs["context_lens"]
    b, n, h, d = q.shape
    page = cache.shape[1]
    if cache.shape[2] != 1 or cache.shape[3] != d + 4:
        raise ValueError(f"kv_cache must be [pages, {page}, 1, {d + 4}], got {list(cache.shape)}")
    if (page * (d + 4)) % 4:
        raise ValueError("a page's bytes must be a multiple of 4 (its fp32 scales are aligned)")
    device = q.device.type
    # The same bytes as e4m3 keys and as fp32 scales: no copy of the cache.
    kv8 = cache.view(torch.uint8).reshape(-1)
    scales = cache.view(torch.uint8).reshape(-1).view(torch.float32)
    out = torch.empty(b * n, max_context, dtype=torch.float32, device=q.device)
    if block_l is None:
        # The interpreter pays per program: few, wide tiles (same values, any tile size).
        block_l = 1024 if device != "cuda" else 128
    block_l = min(block_l, max(16, triton.next_power_of_2(max_context)))
    grid = (b, math.ceil(max_context / block_l))
    extra = {} if device != "cuda" else {"num_warps": num_warps or (8 if n * h >= 128 else 4),
                                         **GPU_LAUNCH}
    _indexer_logits_kernel[grid](
        q.contiguous(), kv8, scales, inputs["weights"].contiguous(), lens.contiguous(),
        table.contiguous(), out, max_context, table.shape[1],
        H=h, D=d, NEXT_N=n, PAGE=page, BLOCK_L=block_l,
        OPERAND=_OPERAND_CODE[operand], EMULATE=INTERPRETED,
        **extra,
    )
    return out


#: Query rows (next_n * heads) one program holds in its tile.
MAX_QUERY_ROWS = 256


def fused(inputs: Inputs, p: Params) -> Outputs:
    """One Triton kernel: paged e4m3 keys and scales -> fp32 logits; then torch.topk."""
    rows = p["next_n"] * p["heads"]
    if rows > MAX_QUERY_ROWS:
        # All next_n * H query rows live in one tile (decode and MTP); prefill needs a
        # kernel that tiles the query rows too, which this one does not.
        raise ValueError(
            f"indexer fused: next_n * heads = {rows} query rows exceed the kernel's "
            f"{MAX_QUERY_ROWS} (it serves decode and MTP, next_n 1 or 2); use another variant "
            "for prefill shapes"
        )
    out = logits(inputs, p["max_context"])
    return {"logits": out, "topk": select_topk(out, p["index_topk"])}
