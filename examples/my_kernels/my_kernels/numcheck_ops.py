"""How my_kernels plugs into numcheck: variants of the shipped ops, and ops of its own.

``register(registry)`` is called by the ``pytest_numcheck_register`` hook in conftest.py.
Shipped as an installed package, the same function would be a ``numcheck.ops`` entry point:

    [project.entry-points."numcheck.ops"]
    my_kernels = "my_kernels.numcheck_ops:register"
"""

from __future__ import annotations

import torch

import numcheck
from my_kernels.mhc_post_comb_y import mhc_post_comb_y
from my_kernels.paged_indexer import paged_mqa_logits
from my_kernels.rms_norm import rms_norm


def paged_bf16(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Our paged indexer (bf16 score GEMM, one page column at a time) + top-k."""
    logits = paged_mqa_logits(
        inputs["q"], inputs["kv_cache"], inputs["weights"], inputs["context_lens"],
        inputs["block_table"], params["max_context"],
    )
    return {"logits": logits, "topk": numcheck.select_topk(logits, params["index_topk"])}


#: Our RMSNorm kernel works on 128-channel tiles: a failure should name the tile it sits in.
TILE = 128


def channel_tile(
    inputs: numcheck.Inputs, params: numcheck.Params, shape: tuple[int, ...]
) -> torch.Tensor:
    """The kernel tile of each element of y ``[tokens, hidden]`` (broadcast over tokens)."""
    return (torch.arange(shape[1]) // TILE).view(1, -1)


Y_STRUCTURE = numcheck.Structure(
    axes=("token", "channel"),
    groupings=(
        numcheck.Grouping(
            "channel tile", channel_tile,
            describe=lambda inputs, params, t: f"channel tile {t} ({t * TILE}..{t * TILE + 127})",
        ),
    ),
)


def rms_norm_inputs(params: numcheck.Params, seed: int) -> numcheck.Inputs:
    """Seeded on the CPU with numcheck's streams: the same bytes on every machine."""
    tokens, hidden = params["tokens"], params["hidden"]
    x = numcheck.normal(numcheck.rng(seed, "x"), (tokens, hidden))
    gain = 1.0 + numcheck.normal(numcheck.rng(seed, "gain"), (hidden,), std=0.1)
    return {"x": x, "gain": gain}


def rms_norm_fp32(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Reference: everything in fp32."""
    return {"y": rms_norm(inputs["x"], inputs["gain"], params["eps"])}


def rms_norm_bf16(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """bf16 activations and gain; the output is cast back to fp32 like the reference's."""
    x, gain = inputs["x"].to(torch.bfloat16), inputs["gain"].to(torch.bfloat16)
    return {"y": rms_norm(x, gain, params["eps"]).float()}


RMS_NORM = numcheck.OpSpec(
    name="rms_norm",
    version=1,
    reference="fp32",
    variants={
        "fp32": numcheck.Variant("fp32", rms_norm_fp32, "fp32"),
        "bf16": numcheck.Variant("bf16", rms_norm_bf16, "bf16"),
    },
    make_inputs=rms_norm_inputs,
    outputs=("y",),
    params={
        "tokens": numcheck.ParamSpec(int, 16, "rows"),
        "hidden": numcheck.ParamSpec(int, 256, "normalized size"),
        "eps": numcheck.ParamSpec(float, 1e-6, "RMS epsilon"),
    },
    doc="RMSNorm with a gain (my_kernels)",
    structure={"y": Y_STRUCTURE},
)


def rms_linear_inputs(params: numcheck.Params, seed: int) -> numcheck.Inputs:
    """rms_norm's x and gain, and a projection weight ``[out, hidden]``."""
    inputs = rms_norm_inputs(params, seed)
    scale = params["hidden"] ** -0.5
    w = numcheck.normal(numcheck.rng(seed, "w"), (params["out"], params["hidden"]), std=scale)
    return {**inputs, "w": w}


def rms_linear_site(
    inputs: numcheck.Inputs, params: numcheck.Params, gemm: numcheck.Gemm
) -> numcheck.Outputs:
    """The op with its GEMM left open: RMSNorm in fp32, then ``gemm(h, w^T)``."""
    h = rms_norm(inputs["x"], inputs["gain"], params["eps"])
    return {"y": gemm(h, inputs["w"].t())}


def rms_linear_fp32(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Reference: the site with an IEEE fp32 GEMM (TF32 off)."""
    with numcheck.matmul_precision(tf32=False):
        return rms_linear_site(inputs, params, torch.matmul)


def rms_linear_bf16(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Our kernel: RMSNorm in fp32, the projection as a bf16 GEMM with a bf16 result."""
    h = rms_norm(inputs["x"], inputs["gain"], params["eps"])
    y = torch.nn.functional.linear(h.to(torch.bfloat16), inputs["w"].to(torch.bfloat16))
    return {"y": y.float()}


RMS_LINEAR = numcheck.OpSpec(
    name="rms_linear",
    version=1,
    reference="fp32",
    variants={
        "fp32": numcheck.Variant("fp32", rms_linear_fp32, "fp32"),
        "bf16": numcheck.Variant("bf16", rms_linear_bf16, "bf16"),
    },
    make_inputs=rms_linear_inputs,
    outputs=("y",),
    params={
        "tokens": numcheck.ParamSpec(int, 16, "rows"),
        "hidden": numcheck.ParamSpec(int, 256, "normalized size (the GEMM's K)"),
        "out": numcheck.ParamSpec(int, 128, "projected size"),
        "eps": numcheck.ParamSpec(float, 1e-6, "RMS epsilon"),
    },
    doc="RMSNorm then a linear projection (my_kernels)",
    gemm_site=rms_linear_site,
)


def post_comb_y(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Our mHC-pre kernel: it returns post, comb and y, and nothing else."""
    post, comb, y = mhc_post_comb_y(
        inputs["x"], inputs["hc_fn"], inputs["hc_scale"], inputs["hc_base"],
        iters=params["sinkhorn_iters"], norm_eps=params["norm_eps"], hc_eps=params["hc_eps"],
    )
    return {"post": post, "comb": comb, "y": y}


def register(registry: numcheck.Registrar) -> None:
    """Add our indexer and our mHC-pre kernel as variants of numcheck's ops; register ours."""
    registry.add_variant(
        "indexer", numcheck.Variant("paged_bf16", paged_bf16, "bf16", doc=paged_bf16.__doc__ or "")
    )
    registry.add_variant("mhc_pre", numcheck.Variant(
        "post_comb_y", post_comb_y, "bf16", produces=("post", "comb", "y"),
        doc=post_comb_y.__doc__ or "",
    ))
    registry.register(RMS_NORM)
    registry.register(RMS_LINEAR)
    # The op's honest bf16 family as variants gemm_<label>, for calibration to pool.
    numcheck.add_gemm_members("rms_linear", ["bf16"])
