"""Block-scaled linear ``y = x W^T``: DeepSeek V3 / V4's FP8 projections, and their FP4 forms.

    x  [tokens, in_features]        bf16 hidden states (one row per token)
    W  [out_features, in_features]  bf16 weight, as nn.Linear stores it
    y  [tokens, out_features]       bf16

DeepSeek V3's FP8 recipe (the technical report, section 3.3): the activation quantized per
token in 1x128 groups along K, the weight in 128x128 blocks, float32 scales (V3.1 / V4:
UE8M0, powers of two), e4m3 elements; the FP8 GEMM on Hopper's tensor cores with its partial
sums promoted to float32 every 128 of K; a bf16 result. Variants (docs/ops.md):

- ``fp32``: the reference, ``x.float() @ W.float().T`` with TF32 off, rounded to bf16;
- ``bf16``: torch's bf16 matmul (fp32 accumulation, bf16 result);
- ``fp8_block``, ``fp8_block_ue8m0``: the recipe with float32 and with UE8M0 scales (on
  CUDA DeepSeek's kernel structure in Triton, numcheck.ops.triton_gemm.triton_block_fp8; on a
  CPU numcheck's bit-exact emulation of it);
- ``fp8_row``, ``fp8_row_fast``: one scale per token and per output channel,
  ``torch._scaled_mm`` on CUDA, promoted (``use_fast_accum=False``) and never promoted
  (``use_fast_accum=True``: a block scale changes every 128 of K, which forces a promotion,
  so the unpromoted form is the per-row one);
- ``nvfp4_emu``, ``mxfp4_emu``: NVFP4 and MXFP4 operands, emulated (Hopper has no FP4
  tensor cores): dequantized and multiplied in float32;
- ``fp8_block_torchao`` (CUDA, ``pip install 'numcheck[fp8]'``): torchao's block-scaled FP8
  GEMM with torchao's own quantizers.

Every low-precision variant quantizes the weight once, at load time (``Variant.prepare``),
and the activation on every call, and records its operands (numcheck.precision.quant_record).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from numcheck.distributions import DISTRIBUTIONS, activations, input_distribution
from numcheck.inputs import normal, rng
from numcheck.ops.fp8_gemm import (
    FP8_DTYPES,
    quant_gemm,
    quantize_fp8,
    torchao_block,
    torchao_placement,
)
from numcheck.ops.batch import Batch
from numcheck.ops.spec import (
    Gemm,
    Inputs,
    OpSpec,
    Outputs,
    Params,
    ParamSpec,
    PrepareFn,
    Variant,
    VariantFn,
)
from numcheck.ops.structure import Grouping, Structure
from numcheck.precision import matmul_precision
from numcheck.precision.quant_accumulate import (
    FAST_ACCUMULATION,
    FP32_ACCUMULATION,
    PROMOTED_128,
)
from numcheck.precision.quant_declare import GemmQuant
from numcheck.precision.quant_scheme import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    FP8_ROW,
    MXFP4,
    NVFP4,
    OperandScheme,
)
from numcheck.precision.quantize import Quantized, quantize

PARAMS = {
    "tokens": ParamSpec(int, 16, "tokens M (decode: a few per request; prefill: thousands)",
                        min=1),
    "in_features": ParamSpec(int, 7168, "K, the dimension summed over", min=1),
    "out_features": ParamSpec(int, 1536, "N, the output features", min=1),
}

#: Real projections of DeepSeek V3 (its config.json keys): K and N of the weight.
PRESETS = {
    # q_a_proj: hidden_size 7168 -> q_lora_rank 1536
    "v3-q-a": {"in_features": 7168, "out_features": 1536},
    # an expert's down_proj: moe_intermediate_size 2048 -> hidden_size 7168
    "v3-expert-down": {"in_features": 2048, "out_features": 7168},
    # o_proj: num_attention_heads 128 * v_head_dim 128 -> hidden_size 7168
    "v3-o": {"in_features": 16384, "out_features": 7168},
}

#: Weight blocks whose magnitudes differ (as trained weights' do), so block scales matter.
BLOCK = 128


def make_inputs(p: Params, seed: int) -> Inputs:
    """Inputs for one case and seed, on the CPU: hidden states whose per-token magnitudes
    vary with a few outlier channels (or drawn from the case's input distribution,
    numcheck.distributions), and a weight of std K^-1/2 whose 128x128 blocks vary in
    magnitude (the same for every distribution)."""
    m, k, n = p["tokens"], p["in_features"], p["out_features"]
    w_rng = rng(seed, "w")
    w = normal(w_rng, (n, k), std=k ** -0.5)
    rows, cols = -(-n // BLOCK), -(-k // BLOCK)
    blocks = torch.from_numpy(np.exp(0.5 * w_rng.standard_normal((rows, cols)))).float()
    w *= blocks.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]
    w = w.to(torch.bfloat16)
    x_rng = rng(seed, "x")
    distribution = input_distribution(p)
    if distribution == "normal":
        x = normal(x_rng, (m, k))
        x *= torch.from_numpy(np.exp(0.5 * x_rng.standard_normal((m, 1)))).float()
        outliers = torch.from_numpy(x_rng.choice(k, size=max(k // 512, 1), replace=False))
        x[:, outliers] *= 20.0
    else:
        x = activations(x_rng, (m, k), distribution, dtype=torch.bfloat16,
                        largest=largest_x(w))
    return {"x": x.to(torch.bfloat16), "w": w}


def largest_x(w: torch.Tensor) -> float:
    """The largest |x| for which no sum of y = x W^T can overflow float32, with a factor 2
    to spare (K * |x| * max |W| at most half of float32's largest): ``near_max`` inputs sit
    just below it (beyond it the FP32 reference overflows, so no implementation is
    honest)."""
    k = w.shape[-1]
    return float(torch.finfo(torch.float32).max) / (2.0 * k * float(w.float().abs().max()))


def fp32(inputs: Inputs, p: Params) -> Outputs:
    """Reference: fp32 copies of x and W, fp32 GEMM with TF32 forced off, bf16 result."""
    with matmul_precision(tf32=False):
        y = inputs["x"].float() @ inputs["w"].float().T
    return {"y": y.to(torch.bfloat16)}


def bf16(inputs: Inputs, p: Params) -> Outputs:
    """torch's bf16 matmul: bf16 operands, fp32 accumulation, bf16 result."""
    return {"y": inputs["x"] @ inputs["w"].T}


def gemm_site(inputs: Inputs, p: Params, gemm: Gemm) -> Outputs:
    """The op with its GEMM done by ``gemm`` on x and W^T as the op holds them (bf16), the
    result rounded to bf16 (numcheck.honest.gemm_family)."""
    return {"y": gemm(inputs["x"], inputs["w"].T).to(torch.bfloat16)}


def _weight_scheme(quant: GemmQuant) -> OperandScheme:
    b = quant.b
    assert isinstance(b, OperandScheme)
    return b


def _cuda_backend(quant: GemmQuant) -> str:
    """The kernel a declared GEMM runs on CUDA: Triton's block-scaled FP8 GEMM, cuBLAS's
    ``_scaled_mm``, or (FP4) dequantized float32 GEMMs; numcheck's emulation where the kernel
    is not there (no compiled Triton)."""
    if quant.precision == "e2m1":
        return "dequantized"
    if quant.schemes[0].granularity == DEEPSEEK_ACT.granularity:
        from numcheck.ops import triton_support

        return "triton_block" if "cuda" in triton_support.DEVICES else "emulated"
    return "scaled_mm"


def _quantize(x: torch.Tensor, scheme: OperandScheme) -> Quantized:
    """An operand quantized as the variant's kernel takes it: FP8 by the sync-free quantizer
    (elements in their float8 dtype; a CUDA graph can hold it), FP4 by numcheck's."""
    if scheme.format.name in FP8_DTYPES:
        return quantize_fp8(x, scheme)
    return quantize(x, scheme)


def quantized_product(quant: GemmQuant, x: torch.Tensor, inputs: Inputs) -> torch.Tensor:
    """``x @ W^T`` in ``quant.out_dtype``: ``x`` ``[M, K]`` quantized now, the weight as
    prepared at load time (``w_q``, ``w_s``, ``w_g`` in ``inputs``: :func:`prepare_weight`),
    by the device's kernel (numcheck's emulation on a CPU; FP4 dequantized everywhere),
    recorded (numcheck.ops.fp8_gemm.quant_gemm)."""
    assert isinstance(quant.a, OperandScheme)
    qa = _quantize(x, quant.a)
    qb = Quantized(inputs["w_q"], inputs["w_s"], _weight_scheme(quant), inputs.get("w_g"))
    if x.device.type == "cuda":
        backend = _cuda_backend(quant)
    else:
        backend = "emulated" if quant.precision in ("e4m3", "e5m2") else "dequantized"
    return quant_gemm(qa, qb, quant, backend)


def prepare_weight(quant: GemmQuant, weight: str = "w") -> PrepareFn:
    """A variant's one-time preparation: input ``weight`` quantized by ``quant.b``, its
    elements (in their float8 dtype where torch has one: what a serving engine keeps), scales
    and NVFP4's global scale, as ``w_q``, ``w_s``, ``w_g``."""
    scheme = _weight_scheme(quant)

    def prepare(inputs: Inputs, p: Params) -> Inputs:
        q = _quantize(inputs[weight], scheme)
        out = {"w_q": q.values, "w_s": q.scales}
        if q.global_scale is not None:
            out["w_g"] = q.global_scale
        return out

    prepare.__name__ = prepare.__qualname__ = "prepare_weight"
    return prepare


def quantized_linear(quant: GemmQuant, doc: str) -> tuple[VariantFn, PrepareFn]:
    """A linear variant of ``quant`` and its preparation (:func:`quantized_product`)."""

    def fn(inputs: Inputs, p: Params) -> Outputs:
        return {"y": quantized_product(quant, inputs["x"], inputs).to(torch.bfloat16)}

    fn.__doc__ = doc
    return fn, prepare_weight(quant)


def torchao(inputs: Inputs, p: Params) -> Outputs:
    """torchao's block-scaled FP8 GEMM (``torchao.kernel.blockwise_quantization``: DeepSeek V3's
    inference kernel) with torchao's own 1x128 and 128x128 quantizers, bf16 result; CUDA."""
    y, _, _ = torchao_block(inputs["x"], inputs["w"])
    return {"y": y}


UE8M0_ACT = replace(DEEPSEEK_ACT, scale="ue8m0")
UE8M0_WEIGHT = replace(DEEPSEEK_WEIGHT, scale="ue8m0")

#: The declared quantization of each low-precision variant.
QUANTS: dict[str, GemmQuant] = {
    "fp8_block": GemmQuant(DEEPSEEK_ACT, DEEPSEEK_WEIGHT, PROMOTED_128, "bf16"),
    "fp8_block_ue8m0": GemmQuant(UE8M0_ACT, UE8M0_WEIGHT, PROMOTED_128, "bf16"),
    "fp8_row": GemmQuant(FP8_ROW, FP8_ROW, PROMOTED_128, "bf16"),
    "fp8_row_fast": GemmQuant(FP8_ROW, FP8_ROW, FAST_ACCUMULATION, "bf16"),
    "nvfp4_emu": GemmQuant(NVFP4, NVFP4, FP32_ACCUMULATION, "bf16"),
    "mxfp4_emu": GemmQuant(MXFP4, MXFP4, FP32_ACCUMULATION, "bf16"),
}
_DOCS = {
    "fp8_block": ("DeepSeek V3's FP8 linear: x per token in 1x128 groups, W in 128x128 blocks, "
                  "float32 scales, promoted every 128 of K, bf16 result"),
    "fp8_block_ue8m0": ("DeepSeek V3.1 / V4's FP8 linear: as fp8_block with UE8M0 "
                        "(power-of-two, rounded up) scales"),
    "fp8_row": ("x per token and W per output channel, float32 scales, torch._scaled_mm "
                "with use_fast_accum=False (promoted), bf16 result"),
    "fp8_row_fast": ("as fp8_row with use_fast_accum=True: the whole K in the tensor "
                     "core's accumulator, never promoted"),
    "nvfp4_emu": ("NVFP4 x and W (e2m1, an e4m3 scale per 16 of K, a float32 scale per "
                  "tensor), emulated: dequantized, float32 GEMM, bf16 result"),
    "mxfp4_emu": ("MXFP4 x and W (e2m1, a power-of-two scale per 32 of K), emulated: "
                  "dequantized, float32 GEMM, bf16 result"),
}


def _variant(name: str) -> Variant:
    quant = QUANTS[name]
    fn, prepare = quantized_linear(quant, _DOCS[name])
    fn.__name__ = fn.__qualname__ = name
    return Variant(name, fn, quant.precision, doc=_DOCS[name], prepare=prepare, quant=quant)


def flops(p: Params) -> float:
    """2 * M * N * K."""
    return 2.0 * p["tokens"] * p["out_features"] * p["in_features"]


def min_bytes(p: Params) -> float:
    """x and W (bf16) read once, y (bf16) written."""
    m, k, n = p["tokens"], p["in_features"], p["out_features"]
    return float(2 * (m * k + n * k + m * n))


def _weight_block_labels(inputs: Inputs, p: Params, shape: tuple[int, ...]) -> torch.Tensor:
    return (torch.arange(shape[1]) // BLOCK).view(1, -1)


STRUCTURE = {
    "y": Structure(
        axes=("token", "output feature"),
        groupings=(Grouping("block of 128 output features", _weight_block_labels,
                            plural="blocks of 128 output features",
                            describe=lambda i, p, j: f"output features {j * BLOCK}.."
                            f"{(j + 1) * BLOCK - 1} (weight block row {j})"),),
    ),
}

def torchao_variant() -> Variant:
    """``fp8_block_torchao`` as this install can run it: on CUDA with torchao; without it, on
    no device, skipped everywhere with torchao's install command."""
    devices, why = torchao_placement()
    return Variant("fp8_block_torchao", torchao, "e4m3", devices=devices,
                   doc=torchao.__doc__ or "", unavailable=why, quant=QUANTS["fp8_block"])


OP = OpSpec(
    name="linear",
    version=1,
    reference="fp32",
    variants={
        "fp32": Variant("fp32", fp32, "fp32", doc=fp32.__doc__ or ""),
        "bf16": Variant("bf16", bf16, "bf16", doc=bf16.__doc__ or ""),
        **{name: _variant(name) for name in QUANTS},
        "fp8_block_torchao": torchao_variant(),
    },
    make_inputs=make_inputs,
    distributions=DISTRIBUTIONS,
    outputs=("y",),
    params=PARAMS,
    presets=PRESETS,
    # y is bf16 for every variant: the fp32 reference's on a GPU differs from the CPU
    # golden by whole bf16 steps where its fp32 sums round across a bf16 boundary.
    output_precision={"y": "bf16"},
    doc=__doc__ or "",
    flops=flops,
    min_bytes=min_bytes,
    rounding_reference={"bf16": "bf16"},
    gemm_site=gemm_site,
    structure=STRUCTURE,
    # A request is a token row: its x row against the shared weight, its row of y.
    batch=Batch(inputs={"x": 0}, outputs={"y": 0}, size_param="tokens"),
)
