"""mHC pre ``fused``: one pass over bf16 x for the statistics and the projection, in Triton.

Three launches, none of which makes an fp32 copy of x:

1. ``_proj_kernel`` (the pass over x), split over ``n*C``: each program reads a
   ``[BLOCK_T, n*C / SPLIT]`` slab of x once, in bf16, and accumulates both the sum of
   squares and the ``[BLOCK_T, (2+n)*n]`` projection in fp32; it writes fp32 partials.
2. ``_epilogue_kernel`` (small): sums the partials, applies the RMS factor, and computes
   ``pre``, ``post`` and the Sinkhorn-normalised ``comb`` in registers.
3. ``_y_kernel``: ``y = sum_i pre_i * x_i``. ``pre`` needs the whole projection, so ``y``
   cannot come out of pass 1: x is read a second time (docs/fused.md counts both floors).

Projection operands (``mode=``) on CUDA: ``"bf16x2"`` (default: x in bf16, which is exact,
against hc_fn split into bf16 high and low halves, two bf16 MMAs with fp32 accumulation;
hc_fn keeps ~16 significant bits, finer than TF32's 11), ``"tf32"``, ``"bf16"`` (hc_fn
rounded to bf16 like the ``bf16`` variant), ``"ieee"`` (fp32 FMA). Under the interpreter
the MMA operands are upcast to fp32 (exact); see :mod:`numcheck.ops.triton_support`.
"""

from __future__ import annotations

import math

import torch

# ruff: noqa: I001 -- this import must come first: the probe in it decides, before triton
# is imported, whether the kernels run compiled or under the interpreter.
from numcheck.ops.triton_support import GPU_LAUNCH, INTERPRETED

import triton
import triton.language as tl

from numcheck.ops.mhc import hc_eps, norm_eps
from numcheck.ops.spec import Inputs, Outputs, Params

MODES = ("bf16x2", "tf32", "bf16", "ieee")
_MODE_CODE = {"ieee": 0, "tf32": 1, "bf16x2": 2, "bf16": 3}


@triton.jit
def _bf16_rtne(v):
    """fp32 -> bf16, round to nearest even, by integer arithmetic on the bits.

    The GPU's own conversion does the same; written out because Triton 3.6's interpreter
    truncates fp32 -> bf16 by default and its round-to-nearest mode mishandles mantissa
    carries, so only this form computes the same bf16 values on both (finite inputs).
    """
    bits = v.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _bf16_to_f32(v):
    """bf16 (or its int16 bits) -> fp32, exact, by moving the bits.

    The GPU converts the same way; the interpreter's generic float converter is ~50x
    slower, and x is handled as int16 bits for the same reason (a masked load's fill value
    is converted to the element type over the whole tile). Keeps CPU gate runs short.
    """
    return (v.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _proj_kernel(
    x_ptr,  # [T, K] int16: the bits of bf16 x (flattened; K = n * C)
    w_ptr,  # [NMIX, K] fp32 (hc_fn)
    part_ptr,  # [SPLIT, T, NMIX_PAD] fp32 partial projections
    sq_ptr,  # [SPLIT, T] fp32 partial sums of squares
    T,
    K,
    K_PER_SPLIT: tl.constexpr,  # a multiple of BLOCK_K (constexpr: see SPLIT below)
    NMIX: tl.constexpr,
    NMIX_PAD: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    MODE: tl.constexpr,  # 0 ieee, 1 tf32, 2 bf16x2, 3 bf16
    EMULATE: tl.constexpr,  # interpreter: upcast MMA operands to fp32 (exact)
):
    pid_t = tl.program_id(0)
    split = tl.program_id(1)
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    mix = tl.arange(0, NMIX_PAD)
    t_ok = t < T
    acc = tl.zeros((BLOCK_T, NMIX_PAD), tl.float32)
    sq = tl.zeros((BLOCK_T,), tl.float32)
    k_begin = split * K_PER_SPLIT
    for k0 in range(0, K_PER_SPLIT, BLOCK_K):
        k = k_begin + k0 + tl.arange(0, BLOCK_K)
        k_ok = k < K
        xb = tl.load(
            x_ptr + t.to(tl.int64)[:, None] * K + k[None, :],
            mask=t_ok[:, None] & k_ok[None, :], other=0,
        )  # [BLOCK_T, BLOCK_K] bf16 bits, read once
        x = xb.to(tl.bfloat16, bitcast=True)
        xf = _bf16_to_f32(xb)
        sq += tl.sum(xf * xf, axis=1)
        w = tl.load(
            w_ptr + mix[None, :] * K + k[:, None],
            mask=(mix[None, :] < NMIX) & k_ok[:, None], other=0.0,
        )  # [BLOCK_K, NMIX_PAD] fp32 (hc_fn^T), small and L2-resident
        if MODE == 0:
            acc += tl.dot(xf, w, input_precision="ieee")
        elif MODE == 1:
            acc += tl.dot(xf, w, input_precision="tf32")
        else:
            w_hi = _bf16_rtne(w)
            if EMULATE:
                acc += tl.dot(xf, _bf16_to_f32(w_hi))
            else:
                acc += tl.dot(x, w_hi)
            if MODE == 2:
                w_lo = _bf16_rtne(w - _bf16_to_f32(w_hi))
                if EMULATE:
                    acc += tl.dot(xf, _bf16_to_f32(w_lo))
                else:
                    acc += tl.dot(x, w_lo)
    row = split * T + t
    tl.store(part_ptr + row[:, None] * NMIX_PAD + mix[None, :], acc, mask=t_ok[:, None])
    tl.store(sq_ptr + row, sq, mask=t_ok)


@triton.jit
def _epilogue_kernel(
    part_ptr, sq_ptr, scale_ptr, base_ptr,
    mix_ptr,  # [T, NMIX] fp32 out
    pre_ptr, post_ptr,  # [T, N] fp32 out
    comb_ptr,  # [T, N, N] fp32 out
    T, inv_k, norm_eps, eps,
    # Loop bounds are constexpr: Triton 3.6's interpreter cannot loop over a runtime int
    # under numpy >= 2.3 (int() of a 1-element array), and these are fixed per shape.
    SPLIT: tl.constexpr,
    N: tl.constexpr,
    NMIX_PAD: tl.constexpr,
    ITERS: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    NMIX: tl.constexpr = (2 + N) * N
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = t < T
    c = tl.arange(0, N)
    ij = tl.arange(0, N)[:, None] * N + tl.arange(0, N)[None, :]  # [N, N]
    m_pre = tl.zeros((BLOCK_T, N), tl.float32)
    m_post = tl.zeros((BLOCK_T, N), tl.float32)
    m_comb = tl.zeros((BLOCK_T, N, N), tl.float32)
    sq = tl.zeros((BLOCK_T,), tl.float32)
    ok2 = t_ok[:, None]
    ok3 = t_ok[:, None, None]
    for s in range(SPLIT):
        row = (s * T + t) * NMIX_PAD
        m_pre += tl.load(part_ptr + row[:, None] + c[None, :], mask=ok2, other=0.0)
        m_post += tl.load(part_ptr + row[:, None] + N + c[None, :], mask=ok2, other=0.0)
        m_comb += tl.load(part_ptr + row[:, None, None] + 2 * N + ij[None, :, :], mask=ok3,
                          other=0.0)
        sq += tl.load(sq_ptr + s * T + t, mask=t_ok, other=0.0)
    r = 1.0 / tl.sqrt_rn(sq * inv_k + norm_eps)  # RMS factor, fp32
    m_pre = m_pre * r[:, None]
    m_post = m_post * r[:, None]
    m_comb = m_comb * r[:, None, None]
    out = t[:, None] * NMIX
    tl.store(mix_ptr + out + c[None, :], m_pre, mask=ok2)
    tl.store(mix_ptr + out + N + c[None, :], m_post, mask=ok2)
    tl.store(mix_ptr + out[:, :, None] + 2 * N + ij[None, :, :], m_comb, mask=ok3)

    s0 = tl.load(scale_ptr)
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)
    pre = tl.sigmoid(m_pre * s0 + tl.load(base_ptr + c)[None, :]) + eps
    post = 2.0 * tl.sigmoid(m_post * s1 + tl.load(base_ptr + N + c)[None, :])
    logits = m_comb * s2 + tl.load(base_ptr + 2 * N + ij)[None, :, :]
    logits = logits - tl.max(logits, axis=2)[:, :, None]
    e = tl.exp(logits)
    comb = e / tl.sum(e, axis=2)[:, :, None] + eps
    comb = comb / (tl.sum(comb, axis=1)[:, None, :] + eps)
    for _ in range(ITERS - 1):
        comb = comb / (tl.sum(comb, axis=2)[:, :, None] + eps)
        comb = comb / (tl.sum(comb, axis=1)[:, None, :] + eps)
    tl.store(pre_ptr + t[:, None] * N + c[None, :], pre, mask=ok2)
    tl.store(post_ptr + t[:, None] * N + c[None, :], post, mask=ok2)
    tl.store(comb_ptr + t[:, None, None] * (N * N) + ij[None, :, :], comb, mask=ok3)


@triton.jit
def _y_kernel(
    x_ptr,  # [T, N, C] int16: the bits of bf16 x
    pre_ptr,  # [T, N] fp32
    y_ptr,  # [T, C] bf16 out
    T, C,
    N: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    col = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (t < T)[:, None] & (col < C)[None, :]
    t64 = t.to(tl.int64)
    y = tl.zeros((BLOCK_T, BLOCK_C), tl.float32)
    for i in range(N):
        p = tl.load(pre_ptr + t * N + i, mask=t < T, other=0.0)
        xi = tl.load(x_ptr + (t64 * N + i)[:, None] * C + col[None, :], mask=ok, other=0)
        y += p[:, None] * _bf16_to_f32(xi)
    tl.store(y_ptr + t64[:, None] * C + col[None, :], _bf16_rtne(y), mask=ok)


def _tiles(device: str, t: int, k: int) -> tuple[int, int, int]:
    """(BLOCK_T, BLOCK_K, SPLIT) for the pass over x."""
    if device != "cuda":
        # The interpreter pays per program and per loop step: few, large tiles.
        return min(512, max(16, triton.next_power_of_2(t))), 2048, 1
    block_t, block_k = 64, 128
    t_blocks = math.ceil(t / block_t)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    # Enough programs for ~4 per SM, each still streaming a long run of x.
    split = max(1, min(math.ceil(4 * sms / t_blocks), k // (8 * block_k)))
    return block_t, block_k, split


def mhc_pre(
    inputs: Inputs, p: Params, *, mode: str = "bf16x2", split: int | None = None
) -> Outputs:
    """All five outputs of mHC pre from the fused kernels (``mode``: see the module doc)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    x, hc_fn = inputs["x"], inputs["hc_fn"]
    t, n, c = x.shape
    if n & (n - 1):
        raise ValueError(f"fused mHC pre needs hc_mult a power of two, got {n}")
    k = n * c
    nmix = (2 + n) * n
    nmix_pad = max(16, triton.next_power_of_2(nmix))
    device = x.device.type
    block_t, block_k, auto_split = _tiles(device, t, k)
    split = split or auto_split
    k_per_split = math.ceil(math.ceil(k / split) / block_k) * block_k
    split = math.ceil(k / k_per_split)
    dev = x.device
    x_bits = x.contiguous().view(torch.int16)
    part = torch.empty(split, t, nmix_pad, dtype=torch.float32, device=dev)
    sq = torch.empty(split, t, dtype=torch.float32, device=dev)
    gpu = {"num_warps": 4, **GPU_LAUNCH} if device == "cuda" else {}
    _proj_kernel[(math.ceil(t / block_t), split)](
        x_bits, hc_fn.contiguous(), part, sq, t, k, K_PER_SPLIT=k_per_split,
        NMIX=nmix, NMIX_PAD=nmix_pad, BLOCK_T=block_t, BLOCK_K=block_k,
        MODE=_MODE_CODE[mode], EMULATE=INTERPRETED, **gpu,
    )
    mixes = torch.empty(t, nmix, dtype=torch.float32, device=dev)
    pre = torch.empty(t, n, dtype=torch.float32, device=dev)
    post = torch.empty(t, n, dtype=torch.float32, device=dev)
    comb = torch.empty(t, n, n, dtype=torch.float32, device=dev)
    block_e = 32 if device == "cuda" else min(256, max(16, triton.next_power_of_2(t)))
    _epilogue_kernel[(math.ceil(t / block_e),)](
        part, sq, inputs["hc_scale"].contiguous(), inputs["hc_base"].contiguous(),
        mixes, pre, post, comb, t, 1.0 / k, norm_eps(p), hc_eps(p),
        SPLIT=split, N=n, NMIX_PAD=nmix_pad, ITERS=int(p["sinkhorn_iters"]), BLOCK_T=block_e, **gpu,
    )
    y = torch.empty(t, c, dtype=torch.bfloat16, device=dev)
    if device == "cuda":
        block_yt, block_c = 16, 256
    else:  # the interpreter: few, large programs
        block_c = min(8192, triton.next_power_of_2(c))
        block_yt = min(2**20 // block_c, triton.next_power_of_2(t))  # Triton's tile limit
    _y_kernel[(math.ceil(t / block_yt), math.ceil(c / block_c))](
        x_bits, pre, y, t, c, N=n, BLOCK_T=block_yt, BLOCK_C=block_c, **gpu,
    )
    return {"mixes": mixes, "pre": pre, "post": post, "comb": comb, "y": y}


def fused(inputs: Inputs, p: Params) -> Outputs:
    """One pass over bf16 x (statistics + projection, split over n*C), a Triton epilogue, y."""
    return mhc_pre(inputs, p)
