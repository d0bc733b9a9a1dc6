"""A user's own op with FP8 and FP4 variants, written through numcheck's public API as
docs/extending.md (sections 6 and 10) teaches it: issue 44's first hour.

The op is an MLP's up-projection, ``h = silu(x Wg^T) * (x Wu^T)``: two GEMMs and an epilogue,
declared with its ``gemm_site``. Its variants quantize as DeepSeek V3 does (x in 1x128
groups, W in 128x128 blocks, e4m3, float32 scales; the weights once, at load time) or as
NVFP4, multiply with their own kernel (a block-scaled GEMM summed in float32, as a CPU or
CUDA-core kernel does), and record what they multiplied with ``numcheck.fp8.record_gemm`` on
``numcheck.fp8.as_quantized`` views of their own float8 tensors. Each has a twin that scales its
output by :data:`BUG_SCALE` (a bug of the size FP8's quantization error hides); the honest
FP8 variant's output is scaled by the factor in the environment variable :data:`DRIFT_ENV`
when set (a small kernel change between two runs, for drift).

Registered by tests through a conftest (:func:`register`); nothing registers on import.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

import numcheck
from numcheck.fp8 import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    FP32_ACCUMULATION,
    NVFP4,
    GemmQuant,
    OperandScheme,
)

OP = "mlp_up"
#: The planted bug: every output 2% high.
BUG_SCALE = 1.02
#: A kernel change the golden cannot see (0.5%), that drift against a baseline must.
DRIFT_SCALE = 1.005
#: Set to a factor, it scales the honest FP8 variant's output (the next run's kernel).
DRIFT_ENV = "NUMCHECK_TEST_FP8_SCALE"
#: DeepSeek V3's operand schemes, products summed in float32, a float32 result.
FP8 = GemmQuant(a=DEEPSEEK_ACT, b=DEEPSEEK_WEIGHT, accumulation=FP32_ACCUMULATION,
                out_dtype="fp32")
#: NVFP4 operands (emulated: no FP4 tensor cores on Hopper), float32 sums and result.
FP4 = GemmQuant(a=NVFP4, b=NVFP4, accumulation=FP32_ACCUMULATION, out_dtype="fp32")


def mlp_inputs(params: numcheck.Params, seed: int) -> numcheck.Inputs:
    """x [tokens, hidden] and the two weights [intermediate, hidden], bf16, seeded on the CPU."""
    t, h, i = params["tokens"], params["hidden"], params["intermediate"]
    x = numcheck.normal(numcheck.rng(seed, "x"), (t, h)).to(torch.bfloat16)
    wg = numcheck.normal(numcheck.rng(seed, "wg"), (i, h), std=h**-0.5).to(torch.bfloat16)
    wu = numcheck.normal(numcheck.rng(seed, "wu"), (i, h), std=h**-0.5).to(torch.bfloat16)
    return {"x": x, "wg": wg, "wu": wu}


def mlp_site(inputs: numcheck.Inputs, params: numcheck.Params,
             gemm: numcheck.Gemm) -> numcheck.Outputs:
    """The op with its two GEMMs left open (gate first, then up), the epilogue in fp32."""
    x = inputs["x"].float()
    g = gemm(x, inputs["wg"].float().t())
    u = gemm(x, inputs["wu"].float().t())
    return {"h": torch.nn.functional.silu(g) * u}


def mlp_fp32(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
    """Reference: the site with an IEEE fp32 GEMM."""
    with numcheck.matmul_precision(tf32=False):
        return mlp_site(inputs, params, torch.matmul)


# -- the user's quantizer and kernel (what "my_lib" stands for in docs/extending.md) --------


def my_quantize(t: torch.Tensor, scheme: OperandScheme) -> tuple[torch.Tensor, ...]:
    """An e4m3 quantizer of the user's own: float8 elements and float32 scales (``amax /
    448`` per block), for 1x128 groups or 128x128 blocks; NVFP4 through numcheck's."""
    if scheme.element != "e4m3fn":
        q = numcheck.fp8.quantize(t, scheme)
        assert q.global_scale is not None
        return q.values, q.scales, q.global_scale
    rows, k = t.shape
    br, bk = scheme.granularity.block_shape((rows, k))
    x = t.float()
    pad = torch.zeros(-(-rows // br) * br, -(-k // bk) * bk)
    pad[:rows, :k] = x
    blocks = pad.view(pad.shape[0] // br, br, pad.shape[1] // bk, bk)
    scales = (blocks.abs().amax(dim=(1, 3)).clamp(min=1e-4) / 448.0).float()
    full = scales.repeat_interleave(br, 0).repeat_interleave(bk, 1)[:rows, :k]
    return (x / full).clamp(-448, 448).to(torch.float8_e4m3fn), scales


def my_gemm(qa: tuple[torch.Tensor, ...], qb: tuple[torch.Tensor, ...],
            scheme_a: OperandScheme, scheme_b: OperandScheme) -> torch.Tensor:
    """The user's kernel: each operand's elements times their block scales, multiplied and
    summed in float32 (a CPU or CUDA-core kernel), ``a @ b^T`` in float32."""
    def full(q: tuple[torch.Tensor, ...], scheme: OperandScheme) -> torch.Tensor:
        values, scales = q[0].float(), q[1].float()
        br, bk = scheme.granularity.block_shape(tuple(values.shape))
        grid = scales[:, None, :, None].expand(-1, br, -1, bk)  # one pass over the scales
        s = grid.reshape(scales.shape[0] * br, scales.shape[1] * bk)
        out = values * s[: values.shape[0], : values.shape[1]]
        return out * q[2].float() if len(q) > 2 else out

    return full(qa, scheme_a) @ full(qb, scheme_b).T


def variant(name: str, quant: GemmQuant, scale: float = 1.0) -> numcheck.Variant:
    """A variant of ``quant``: weights quantized at load time, x per call, the user's
    kernel, both GEMMs recorded as docs/extending.md section 10 writes it; every output
    times ``scale`` (1: the honest variant)."""
    sa, sb = quant.a, quant.b
    assert isinstance(sa, OperandScheme) and isinstance(sb, OperandScheme)

    def prepare(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Inputs:
        out = {}
        for w in ("wg", "wu"):
            for i, part in enumerate(my_quantize(inputs[w], sb)):
                out[f"{w}_{i}"] = part
        return out

    def wrap(q: tuple[torch.Tensor, ...], scheme: OperandScheme) -> numcheck.fp8.Quantized:
        return numcheck.fp8.as_quantized(q[0], q[1], scheme, q[2] if len(q) > 2 else None)

    def fn(inputs: numcheck.Inputs, params: numcheck.Params) -> numcheck.Outputs:
        xq = my_quantize(inputs["x"], sa)
        ys = []
        for w in ("wg", "wu"):
            wq = tuple(inputs[k] for k in sorted(inputs) if k.startswith(f"{w}_"))
            y = my_gemm(xq, wq, sa, sb)
            numcheck.fp8.record_gemm(wrap(xq, sa), wrap(wq, sb), y)  # a no-op outside a check
            ys.append(y)
        h = torch.nn.functional.silu(ys[0]) * ys[1]
        return {"h": h * scale if scale != 1.0 else h}

    fn.__name__ = fn.__qualname__ = name
    return numcheck.Variant(name, fn, quant.precision, prepare=prepare, quant=quant,
                            doc=f"{name}: {quant.label}, output x {scale}")


MLP_UP = numcheck.OpSpec(
    name=OP,
    version=1,
    reference="fp32",
    variants={"fp32": numcheck.Variant("fp32", mlp_fp32, "fp32")},
    make_inputs=mlp_inputs,
    outputs=("h",),
    params={
        "tokens": numcheck.ParamSpec(int, 8, "rows of x", min=1),
        "hidden": numcheck.ParamSpec(int, 256, "K of both GEMMs", min=1),
        "intermediate": numcheck.ParamSpec(int, 128, "N of both GEMMs", min=1),
    },
    doc="an MLP up-projection silu(x Wg^T) * (x Wu^T) (issue 44's user op)",
    gemm_site=mlp_site,
)

#: Every variant the tests register: name -> (scheme, output scale).
VARIANTS: dict[str, tuple[GemmQuant, float]] = {
    "fp8": (FP8, 1.0), "fp8_bug": (FP8, BUG_SCALE),
    "nvfp4": (FP4, 1.0), "nvfp4_bug": (FP4, BUG_SCALE),
}


def register(registry: Any, members: Callable[[str, list[str]], Any] | None = None) -> None:
    """Register the op and its variants, then its honest FP8 and FP4 members (as the docs'
    hook does: ``numcheck.add_gemm_members``)."""
    registry.register(MLP_UP)
    for name, (quant, scale) in VARIANTS.items():
        drift = float(os.environ.get(DRIFT_ENV, "1")) if name == "fp8" else 1.0
        registry.add_variant(OP, variant(name, quant, scale * drift))
    (members or numcheck.add_gemm_members)(OP, ["e4m3", "e2m1"])
