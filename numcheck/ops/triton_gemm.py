"""A small Triton GEMM with the library's defaults: what a user's first Triton kernel does.

``acc += tl.dot(a_block, b_block)`` over K blocks, an fp32 accumulator, the result stored in
fp32. ``tl.dot`` is called as users call it: on fp32 operands without ``input_precision``
(Triton's default: TF32, which reads an operand by truncation on NVIDIA GPUs), on bf16
operands, or with ``input_precision="ieee"`` for fp32. Sizes and strides are runtime
arguments, so one compile serves every shape of a run (a kernel that takes them as
constants compiles anew for each shape, tens of seconds each).

numcheck.honest.gemm_impls offers it as the ``triton_*`` members of the tf32, bf16 and fp32
honest families, on CUDA. Under Triton's interpreter (a CPU) it runs too, for tests of its
indexing: the interpreter computes ``tl.dot`` in IEEE fp32 whatever the input precision,
and reads bf16 as raw integers, so there bf16 operands are widened to fp32 first (exact).
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
MODES = ("tf32", "bf16", "fp32")
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
    default), ``"bf16"`` (operands rounded to bf16 by torch) or ``"fp32"`` (``ieee``).

    Operands are 2-D, or 3-D and more with equal leading (batch) dimensions. ValueError for
    other shapes or an unknown mode.
    """
    if mode not in MODES:
        raise ValueError(f"triton_matmul: mode must be one of {MODES}, got {mode!r}")
    if a.dim() < 2 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2] \
            or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"triton_matmul: operands {list(a.shape)} and {list(b.shape)}: need "
                         "[..., M, K] and [..., K, N] with equal leading dimensions")
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
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
