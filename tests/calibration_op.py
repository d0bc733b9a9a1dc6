"""A tiny user op for the calibration tests: y = a @ b, with honest bf16 variants that
round differently (one GEMM, split-K halves) and a known-bad one (1% off)."""

from __future__ import annotations

import torch

import numcheck
from numcheck.ops.registry import OpSpec, ParamSpec, Variant


def dot_inputs(params: numcheck.Params, seed: int) -> numcheck.Inputs:
    n, k = params["n"], params["k"]
    return {"a": numcheck.normal(numcheck.rng(seed, "a"), (n, k)),
            "b": numcheck.normal(numcheck.rng(seed, "b"), (k, 4))}


def dot_fp32(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    return {"y": inputs["a"] @ inputs["b"]}


def dot_bf16(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """One bf16 GEMM, rounded to bf16 once."""
    return {"y": (inputs["a"].bfloat16() @ inputs["b"].bfloat16()).float()}


def dot_bf16_splitk(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Split-K: each half's bf16 result summed in fp32 (a second rounding: honest, wider)."""
    a, b = inputs["a"].bfloat16(), inputs["b"].bfloat16()
    h = a.shape[1] // 2
    return {"y": (a[:, :h] @ b[:h]).float() + (a[:, h:] @ b[h:]).float()}


def dot_off(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """A bug: 1% too large."""
    return {"y": dot_bf16(inputs, params)["y"] * 1.01}


def dot_tf32(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    with numcheck.matmul_precision(tf32=True):
        return {"y": inputs["a"] @ inputs["b"]}


DOT = OpSpec(
    name="dot",
    version=1,
    reference="fp32",
    variants={
        "fp32": Variant("fp32", dot_fp32, "fp32"),
        "bf16": Variant("bf16", dot_bf16, "bf16"),
        "bf16_splitk": Variant("bf16_splitk", dot_bf16_splitk, "bf16"),
        "off": Variant("off", dot_off, "bf16"),
        # TF32 matmul is a GPU feature: on a CPU this is the reference, bit for bit.
        "tf32": Variant("tf32", dot_tf32, "tf32"),
    },
    make_inputs=dot_inputs,
    outputs=("y",),
    params={"n": ParamSpec(int, 8, "rows"), "k": ParamSpec(int, 64, "reduction")},
)


def register(registry: numcheck.Registrar) -> None:
    registry.register(DOT)


def rel_fro(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Relative Frobenius error in float64, computed independently of numcheck.numerics.metrics."""
    a, e = actual.double(), expected.double()
    return float(torch.linalg.norm(a - e) / torch.linalg.norm(e))


def mhc_y_off(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """A bug in a shipped op: mHC's bf16 path with y 2% too large (the issue's scenario)."""
    from numcheck.ops import mhc

    out = mhc.bf16(inputs, params)
    out["y"] = (out["y"].float() * 1.02).to(torch.bfloat16)
    return out


def register_y_off(registry: numcheck.Registrar) -> None:
    """Add the bug to the shipped mHC op, as a user's conftest hook adds a variant."""
    registry.add_variant("mhc_pre", numcheck.Variant("y_off", mhc_y_off, "bf16"))
