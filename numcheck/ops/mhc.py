"""mHC pre (manifold-constrained hyper-connections), hc_mult n = 4 (DeepSeek V4).

    xf   = flatten(x) as fp32                          # [T, n*C]
    r    = rsqrt(mean(xf^2) + norm_eps)                # RMSNorm without gain, fp32
    m    = (xf @ hc_fn^T) * r                          # [T, (2+n)*n]: the GEMM that was flipped
    pre  = sigmoid(m[:, :n] * s0 + base[:n]) + hc_eps
    post = 2 * sigmoid(m[:, n:2n] * s1 + base[n:2n])
    comb = Sinkhorn(softmax_rows(m[:, 2n:] * s2 + base[2n:]) as [T, n, n] + hc_eps)
    y    = sum_i pre[:, i] * xf.view(T, n, C)[:, i]      # [T, C], back to bf16

Two epsilons, as DeepSeek V4 keeps them: ``norm_eps`` (the RMS norm) and ``hc_eps`` (the
sigmoid offset and every Sinkhorn division). Both are 1e-6 in the public config. The older
``eps`` sets both at once; ``norm_eps`` or ``hc_eps`` given in the same case wins over it.
"""

from __future__ import annotations

import numpy as np
import torch

from numcheck.distributions import DISTRIBUTIONS, activations, input_distribution
from numcheck.inputs import normal, rng
from numcheck.ops.batch import Batch
from numcheck.ops.spec import (
    Gemm,
    Inputs,
    OpSpec,
    Outputs,
    ParamProblem,
    Params,
    ParamSpec,
    Variant,
)
from numcheck.ops.structure import Grouping, Structure
from numcheck.precision import matmul_precision

PARAMS = {
    "tokens": ParamSpec(int, 64, "tokens T", min=1),
    "hc_mult": ParamSpec(int, 4, "hyper-connection streams n", min=1),
    "hidden": ParamSpec(int, 4096, "hidden size C", min=1),
    "sinkhorn_iters": ParamSpec(int, 20, "Sinkhorn iterations", min=1),
    # > 0: it keeps rsqrt and the Sinkhorn divisions finite; 1 is already far beyond any model.
    "eps": ParamSpec(float, 1e-6, "sets norm_eps and hc_eps together (either given itself wins)",
                     gt=0.0, max=1.0),
    "norm_eps": ParamSpec(float, 1e-6, "RMS norm epsilon (default: eps)", gt=0.0, max=1.0),
    "hc_eps": ParamSpec(float, 1e-6, "sigmoid and Sinkhorn epsilon (default: eps)",
                        gt=0.0, max=1.0),
}

#: ``norm_eps`` and ``hc_eps`` take ``eps``'s value unless a case (or preset) gives them.
FOLLOWS = {"norm_eps": "eps", "hc_eps": "eps"}


def norm_eps(p: Params) -> float:
    """The RMS epsilon (``eps`` for parameters built by hand without ``norm_eps``)."""
    return float(p.get("norm_eps", p["eps"]))


def hc_eps(p: Params) -> float:
    """The sigmoid/Sinkhorn epsilon (``eps`` for parameters built by hand without ``hc_eps``)."""
    return float(p.get("hc_eps", p["eps"]))

PRESETS = {
    "v4flash": {"hidden": 4096, "hc_mult": 4},
    "v4pro": {"hidden": 7168, "hc_mult": 4},
}


def largest_x(p: Params) -> float:
    """The largest |x| whose fp32 sum of squares over one token (n*C values) stays finite,
    with a factor 2 to spare: ``near_max`` inputs sit just below it (beyond it the FP32
    reference's RMS statistics overflow, so no implementation is honest)."""
    k = p["hc_mult"] * p["hidden"]
    return float(np.sqrt(np.finfo(np.float32).max / k)) / 2


def make_inputs(p: Params, seed: int) -> Inputs:
    """Inputs for one case and seed, on the CPU. The case's input distribution
    (numcheck.distributions) shapes x, the activations; the weights stay normal."""
    t, n, c = p["tokens"], p["hc_mult"], p["hidden"]
    mixes = (2 + n) * n
    x_rng = rng(seed, "x")
    distribution = input_distribution(p)
    if distribution == "normal":
        x = normal(x_rng, (t, n, c))
        # Hidden states: per-token magnitudes vary and a few channels carry outliers.
        x *= torch.from_numpy(np.exp(0.5 * x_rng.standard_normal((t, 1, 1)))).float()
        outliers = torch.from_numpy(x_rng.choice(c, size=max(c // 512, 1), replace=False))
        x[:, :, outliers] *= 20.0
    else:
        # A token is its n streams: zero_rows zeroes whole tokens (a padding token), where
        # an RMS over the token without its epsilon divides by zero.
        x = activations(x_rng, (t, n, c), distribution, dtype=torch.bfloat16,
                        largest=largest_x(p), token_dims=1)
    hc_rng = rng(seed, "hc")
    return {
        "x": x.to(torch.bfloat16),
        "hc_fn": normal(hc_rng, (mixes, n * c), std=(n * c) ** -0.5),
        "hc_scale": torch.from_numpy(hc_rng.uniform(0.5, 2.0, size=3)).float(),
        "hc_base": normal(hc_rng, (mixes,), std=0.5),
    }


def check_inputs(inputs: Inputs, p: Params) -> list[ParamProblem]:
    """Recorded inputs against the case's shape: x is [tokens, hc_mult, hidden], the weights
    fit it."""
    x = inputs["x"]
    if x.dim() != 3:
        return [ParamProblem("tokens", f"x has shape {list(x.shape)}, not [tokens, hc_mult, "
                             "hidden]", "record x as [tokens, hc_mult, hidden]")]
    problems = [ParamProblem(name, f"x is {list(x.shape)}: {got} for {name}, the case says "
                             f"{p[name]}", f"set shape.{name} = {got}")
                for name, got in zip(("tokens", "hc_mult", "hidden"), x.shape, strict=True)
                if p[name] != got]
    _, n, c = x.shape
    mixes = (2 + n) * n
    want = {"hc_fn": [mixes, n * c], "hc_scale": [3], "hc_base": [mixes]}
    problems += [ParamProblem("hc_mult", f"{name} has shape {list(inputs[name].shape)}; "
                              f"with x {list(x.shape)} it must be {shape}",
                              f"record {name} as {shape}")
                 for name, shape in want.items() if list(inputs[name].shape) != shape]
    return problems


def _epilogue(m: torch.Tensor, xf: torch.Tensor, inputs: Inputs, p: Params) -> Outputs:
    """Sigmoids, Sinkhorn and y from the fp32 mixes ``m`` [T, (2+n)*n]."""
    n, eps = p["hc_mult"], hc_eps(p)
    t = m.shape[0]
    scale, base = inputs["hc_scale"], inputs["hc_base"]
    pre = torch.sigmoid(m[:, :n] * scale[0] + base[:n]) + eps
    post = 2 * torch.sigmoid(m[:, n : 2 * n] * scale[1] + base[n : 2 * n])
    logits = (m[:, 2 * n :] * scale[2] + base[2 * n :]).view(t, n, n)
    comb = torch.softmax(logits, dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(p["sinkhorn_iters"] - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    y = (pre.unsqueeze(-1) * xf.view(t, n, -1)).sum(dim=1).to(torch.bfloat16)
    return {"mixes": m, "pre": pre, "post": post, "comb": comb, "y": y}


def _rms_inv(xf: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + eps)


def fp32(inputs: Inputs, p: Params) -> Outputs:
    """Reference: fp32 copy of x, fp32 GEMM with TF32 forced off."""
    with matmul_precision(tf32=False):
        xf = inputs["x"].flatten(1).float()
        m = (xf @ inputs["hc_fn"].T) * _rms_inv(xf, norm_eps(p))
        return _epilogue(m, xf, inputs, p)


def bf16(inputs: Inputs, p: Params) -> Outputs:
    """The fix: GEMM on a bf16 view of x with bf16 hc_fn; RMS statistics stay fp32."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    mm = x @ inputs["hc_fn"].to(torch.bfloat16).T
    m = mm.float() * _rms_inv(xf, norm_eps(p))
    return _epilogue(m, xf, inputs, p)


def bf16_roundtrip(inputs: Inputs, p: Params) -> Outputs:
    """The seed's regression: upcast x for RMSNorm, then ``.to(bf16)`` the fp32 copy.

    Numerically equal to ``bf16`` (bf16 -> fp32 -> bf16 is exact) and slower: kept on
    purpose as the known-bad variant the cast ledger and the speedup gate must catch.
    """
    xf = inputs["x"].flatten(1).float()
    x_flat = xf.to(torch.bfloat16)
    mm = x_flat @ inputs["hc_fn"].to(torch.bfloat16).T
    m = mm.float() * _rms_inv(xf, norm_eps(p))
    return _epilogue(m, xf, inputs, p)


def tf32(inputs: Inputs, p: Params) -> Outputs:
    """The fp32 path with TF32 matmul allowed (what DeepSeek's prenorm GEMM uses)."""
    with matmul_precision(tf32=True):
        xf = inputs["x"].flatten(1).float()
        m = (xf @ inputs["hc_fn"].T) * _rms_inv(xf, norm_eps(p))
        return _epilogue(m, xf, inputs, p)


def gemm_site(inputs: Inputs, p: Params, gemm: Gemm) -> Outputs:
    """The op with its projection done by ``gemm``: x (bf16, exact in every GEMM class but
    the fp8 ones) and hc_fn^T (fp32, which the GEMM rounds to its class), the RMS statistics
    in fp32, then the epilogue every shipped variant has (numcheck.honest.gemm_family)."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    m = gemm(x, inputs["hc_fn"].T) * _rms_inv(xf, norm_eps(p))
    return _epilogue(m, xf, inputs, p)


def flops(p: Params) -> float:
    """The projection GEMM: 2 * T * (2+n)*n * n*C (the epilogue is negligible)."""
    t, n, c = p["tokens"], p["hc_mult"], p["hidden"]
    return 2.0 * t * (2 + n) * n * n * c


def min_bytes(p: Params) -> float:
    """x (bf16) and hc_fn (fp32) read once; mixes, pre, post, comb (fp32) and y (bf16) written."""
    t, n, c = p["tokens"], p["hc_mult"], p["hidden"]
    mixes = (2 + n) * n
    read = t * n * c * 2 + mixes * n * c * 4
    written = t * (mixes + n + n + n * n) * 4 + t * c * 2
    return float(read + written)


# -- structure: the groupings a kernel engineer thinks in (numcheck.localize.failure) -------------
#: The parts of the mixes' columns: pre [:n], post [n:2n], comb [2n:].
MIX_PARTS = ("pre", "post", "comb")


def _mix_part_labels(inputs: Inputs, p: Params, shape: tuple[int, ...]) -> torch.Tensor:
    n = p["hc_mult"]
    col = torch.arange(shape[1])
    return torch.where(col < n, 0, torch.where(col < 2 * n, 1, 2)).view(1, -1)


STRUCTURE = {
    "mixes": Structure(
        axes=("token", "mix column"),
        groupings=(Grouping("part of the mixes", _mix_part_labels, plural="parts of the mixes",
                            describe=lambda i, p, k: f"the {MIX_PARTS[k]} part of the mixes"),),
    ),
    "pre": Structure(axes=("token", "stream")),
    "post": Structure(axes=("token", "stream")),
    "comb": Structure(axes=("token", "comb row", "comb column")),
    "y": Structure(axes=("token", "channel")),
}


#: A request is a token row (decode: one token per request): its x row against the shared
#: hc_fn, scale and base; every output's row of that token.
BATCH = Batch(inputs={"x": 0}, outputs={name: 0 for name in ("mixes", "pre", "post", "comb", "y")},
              size_param="tokens")

OP = OpSpec(
    name="mhc_pre",
    version=1,
    reference="fp32",
    variants={
        "fp32": Variant("fp32", fp32, "fp32", doc=fp32.__doc__ or ""),
        "bf16": Variant("bf16", bf16, "bf16", doc=bf16.__doc__ or ""),
        "bf16_roundtrip": Variant(
            "bf16_roundtrip", bf16_roundtrip, "bf16", doc=bf16_roundtrip.__doc__ or ""
        ),
        "tf32": Variant("tf32", tf32, "tf32", doc=tf32.__doc__ or ""),
    },
    make_inputs=make_inputs,
    outputs=("mixes", "pre", "post", "comb", "y"),
    params=PARAMS,
    presets=PRESETS,
    output_precision={"y": "bf16"},
    follows=FOLLOWS,
    doc=__doc__ or "",
    flops=flops,
    min_bytes=min_bytes,
    rounding_reference={"bf16": "bf16", "tf32": "tf32"},
    # The projection's place: numcheck derives the honest members of each precision class
    # (TF32 rounded and truncated, bf16 split-K with bf16 partials...) and the rounding
    # envelope of max_err_ratio from it (docs/budgets.md).
    gemm_site=gemm_site,
    structure=STRUCTURE,
    batch=BATCH,
    distributions=DISTRIBUTIONS,
    check_inputs=check_inputs,
)
