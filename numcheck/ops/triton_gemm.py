"""A small Triton GEMM with the library's defaults: what a user's first Triton kernel does.

``acc += tl.dot(a_block, b_block)`` over K blocks, an fp32 accumulator, the result stored in
fp32. ``tl.dot`` is called as users call it: on fp32 operands without ``input_precision``
(Triton's default: TF32, which reads an operand by truncation on NVIDIA GPUs), on bf16
operands, on e4m3 operands (Hopper's FP8 tensor cores; the accumulator is never promoted
out of them, the H200's "fast accumulation": docs/fp8.md), or with
``input_precision="ieee"`` for fp32. Sizes and strides are runtime
arguments, so one compile serves every shape of a run (a kernel that takes them as
constants compiles anew for each shape, tens of seconds each).

numcheck.honest.gemm_impls offers it as the ``triton_*`` members of the tf32, bf16 and fp32
honest families, on CUDA, and the e4m3 one to the FP8 families (numcheck.honest.quant_impls).
:func:`triton_block_fp8` is DeepSeek V3's block-scaled FP8 GEMM written the same way: per
128-wide block of K, ``tl.dot`` on e4m3 operands, then the block's activation and weight
scales applied to its result in the fp32 accumulator (a promotion every 128 of K).
It is the CUDA kernel of a shipped FP8 variant (numcheck.ops.fp8_gemm), so its launch asks
for FMA contraction as measured (triton_support.GPU_LAUNCH); :func:`triton_matmul` keeps
whatever the installed Triton does by default, as a user's first kernel would.

Under Triton's interpreter (a CPU) they run too, for tests of their indexing: the interpreter
computes ``tl.dot`` in IEEE fp32 whatever the input precision, and reads bf16 as raw
integers, so there bf16 operands are widened to fp32 first (exact).
This module and the fused kernels are the only ones that import triton
(numcheck.ops.triton_support decides where they run).
"""

from __future__ import annotations

import torch

# ruff: noqa: I001 -- this import must come first: the probe in it decides, before triton
# is imported, whether the kernels run compiled or under the interpreter.
from numcheck.ops import triton_support

import triton
import triton.language as tl

#: Modes of :func:`triton_matmul`: the operand dtype the kernel reads, and ``tl.dot``'s call.
MODES = ("tf32", "bf16", "fp32", "e4m3")
BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_ab, stride_am, stride_ak,
    stride_bb, stride_bk, stride_bn,
    stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    IEEE: tl.constexpr,  # input_precision="ieee"; else tl.dot's default
    EMULATE: tl.constexpr,  # interpreter: widen the operands to fp32 (exact)
    K_STEPS: tl.constexpr,  # interpreter only: the loop bound as a constant (below)
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_base = a_ptr + batch.to(tl.int64) * stride_ab
    b_base = b_ptr + batch.to(tl.int64) * stride_bb
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Triton's interpreter cannot loop over a runtime int under numpy >= 2.3; compiled, K
    # stays a runtime argument (one compile for every shape).
    if EMULATE:
        steps = K_STEPS
    else:
        steps = tl.cdiv(K, BLOCK_K)
    for step in range(steps):
        k = step * BLOCK_K + rk
        a = tl.load(a_base + rm[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_base + k[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        if EMULATE:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)  # the library's default input precision
    c = c_ptr + batch.to(tl.int64) * stride_cb + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def triton_matmul(a: torch.Tensor, b: torch.Tensor, mode: str) -> torch.Tensor:
    """``a @ b`` in float32 by the Triton kernel: ``mode`` ``"tf32"`` (fp32 operands, tl.dot's
    default), ``"bf16"`` (operands rounded to bf16 by torch), ``"fp32"`` (``ieee``) or
    ``"e4m3"`` (operands cast to float8_e4m3fn by torch: values e4m3 holds, unscaled).

    Operands are 2-D, or 3-D and more with equal leading (batch) dimensions. ValueError for
    other shapes or an unknown mode.
    """
    if mode not in MODES:
        raise ValueError(f"triton_matmul: mode must be one of {MODES}, got {mode!r}")
    if a.dim() < 2 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2] \
            or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"triton_matmul: operands {list(a.shape)} and {list(b.shape)}: need "
                         "[..., M, K] and [..., K, N] with equal leading dimensions")
    dtype = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}.get(mode, torch.float32)
    lead = a.shape[:-2]
    a3 = a.to(dtype).reshape(-1, *a.shape[-2:])
    b3 = b.to(dtype).reshape(-1, *b.shape[-2:])
    batches, m, k = a3.shape
    n = b3.shape[-1]
    c = torch.empty(batches, m, n, dtype=torch.float32, device=a.device)
    emulate = triton_support.INTERPRETED
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N), batches)
    _gemm_kernel[grid](
        a3, b3, c, m, n, k,
        a3.stride(0), a3.stride(1), a3.stride(2),
        b3.stride(0), b3.stride(1), b3.stride(2),
        c.stride(0), c.stride(1), c.stride(2),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=mode == "fp32",
        EMULATE=emulate, K_STEPS=triton.cdiv(k, BLOCK_K) if emulate else 1,
    )
    return c.reshape(*lead, m, n)


#: The block of K :func:`triton_block_fp8` reads at once: DeepSeek V3's scale group.
FP8_GROUP = 128
BLOCK_FP8_M, BLOCK_FP8_N = 64, 64


@triton.jit
def _block_fp8_kernel(
    a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K,
    stride_am, stride_bn, stride_cm, stride_asm, stride_bsn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP: tl.constexpr,
    OUT_BF16: tl.constexpr,
    EMULATE: tl.constexpr,  # interpreter: widen the operands to fp32 (exact)
    K_STEPS: tl.constexpr,  # interpreter only: the loop bound as a constant
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, GROUP)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if EMULATE:
        steps = K_STEPS
    else:
        steps = tl.cdiv(K, GROUP)
    for step in range(steps):
        k = step * GROUP + rk
        a = tl.load(a_ptr + rm[:, None].to(tl.int64) * stride_am + k[None, :],
                    mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rn[None, :].to(tl.int64) * stride_bn + k[:, None],
                    mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        # One activation scale per row and 128 of K; one weight scale per 128 rows of the
        # weight (output columns) and 128 of K.
        a_s = tl.load(as_ptr + rm * stride_asm + step, mask=rm < M, other=0.0)
        b_s = tl.load(bs_ptr + (rn // GROUP) * stride_bsn + step, mask=rn < N, other=0.0)
        if EMULATE:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
    c = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if OUT_BF16:
        tl.store(c, acc.to(tl.bfloat16), mask=mask)
    else:
        tl.store(c, acc, mask=mask)


def triton_block_fp8(a: torch.Tensor, a_scales: torch.Tensor, b: torch.Tensor,
                     b_scales: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``a @ b^T`` of block-scaled e4m3 operands (DeepSeek V3's recipe): ``a`` ``[M, K]``
    float8_e4m3fn with one float32 scale per row and 128 of K (``a_scales`` ``[M,
    ceil(K / 128)]``), ``b`` ``[N, K]`` float8_e4m3fn with one per 128 x 128 block
    (``b_scales`` ``[ceil(N / 128), ceil(K / 128)]``). Each 128-wide block of K is one
    ``tl.dot`` whose result is scaled and added to the fp32 accumulator. Returns ``[M, N]``
    in ``out_dtype`` (float32 or bfloat16). Sizes are runtime arguments: one compile serves
    every shape."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"triton_block_fp8: operands {list(a.shape)} and {list(b.shape)}: "
                         "need [M, K] and [N, K]")
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"triton_block_fp8: out_dtype float32 or bfloat16, got {out_dtype}")
    m, k = a.shape
    n = b.shape[0]
    groups = triton.cdiv(k, FP8_GROUP)
    if tuple(a_scales.shape) != (m, groups) or tuple(b_scales.shape) != (
            triton.cdiv(n, FP8_GROUP), groups):
        raise ValueError(f"triton_block_fp8: scales {list(a_scales.shape)} and "
                         f"{list(b_scales.shape)} for operands {list(a.shape)} and "
                         f"{list(b.shape)}: need 1x128 and 128x128 grids")
    a8 = a.to(torch.float8_e4m3fn).contiguous()
    b8 = b.to(torch.float8_e4m3fn).contiguous()
    sa = a_scales.to(torch.float32).contiguous()
    sb = b_scales.to(torch.float32).contiguous()
    emulate = triton_support.INTERPRETED
    # The interpreter truncates fp32 to bf16 where the compiled kernel rounds to nearest
    # (measured with triton 3.9): under it, the kernel stores fp32 and torch rounds.
    store = torch.float32 if emulate else out_dtype
    c = torch.empty(m, n, dtype=store, device=a.device)
    grid = (triton.cdiv(m, BLOCK_FP8_M), triton.cdiv(n, BLOCK_FP8_N))
    _block_fp8_kernel[grid](
        a8, b8, c, sa, sb, m, n, k,
        a8.stride(0), b8.stride(0), c.stride(0), sa.stride(0), sb.stride(0),
        BLOCK_M=BLOCK_FP8_M, BLOCK_N=BLOCK_FP8_N, GROUP=FP8_GROUP,
        OUT_BF16=store == torch.bfloat16, EMULATE=emulate,
        K_STEPS=groups if emulate else 1, **({} if emulate else triton_support.GPU_LAUNCH),
    )
    return c.to(out_dtype)
