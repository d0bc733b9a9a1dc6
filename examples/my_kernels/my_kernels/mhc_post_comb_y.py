"""An mHC-pre kernel that computes part of the op: it returns post, comb and y.

Kernels of published libraries often do: the mixes and the pre weights live only inside the
kernel (pre is used for y and dropped). numcheck's ``mhc_pre`` op names five outputs; this
one is registered with ``produces=("post", "comb", "y")`` (numcheck_ops.py) and checked on
those three. Its GEMM is a bf16 ``torch.mm``, with the RMS statistics in fp32.
"""

from __future__ import annotations

import torch


def mhc_post_comb_y(
    x: torch.Tensor, hc_fn: torch.Tensor, hc_scale: torch.Tensor, hc_base: torch.Tensor,
    *, iters: int, norm_eps: float, hc_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(post [T, n], comb [T, n, n], y [T, C])`` of mHC pre from bf16 ``x [T, n, C]``."""
    t, n, c = x.shape
    xf = x.float()  # one fp32 copy of x, for the RMS statistics and y
    rms = torch.rsqrt(xf.view(t, n * c).square().mean(dim=-1, keepdim=True) + norm_eps)
    mixes = torch.mm(x.view(t, n * c), hc_fn.to(torch.bfloat16).t()).float() * rms
    pre = torch.sigmoid(mixes[:, :n] * hc_scale[0] + hc_base[:n]) + hc_eps
    post = 2 * torch.sigmoid(mixes[:, n : 2 * n] * hc_scale[1] + hc_base[n : 2 * n])
    logits = (mixes[:, 2 * n :] * hc_scale[2] + hc_base[2 * n :]).view(t, n, n)
    comb = torch.softmax(logits, dim=-1) + hc_eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + hc_eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + hc_eps)
    y = (pre.unsqueeze(-1) * xf).sum(dim=1).to(torch.bfloat16)
    return post, comb, y
