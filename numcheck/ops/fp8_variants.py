"""The FP8 and FP4 variants of the indexer and mHC pre, declared and recorded.

- indexer ``fp8``: q and the keys stay e4m3 as the op holds them (q's scale is folded into
  the head weights, each key's scale is applied after the GEMM), multiplied on FP8 tensor
  cores with float32 accumulation (promoted every 128 of K: with head_dim 128, one MMA chain
  per score), as DeepGEMM's ``fp8_paged_mqa_logits`` does: ``torch._scaled_mm`` on CUDA,
  numcheck's bit-exact emulation on a CPU. The production path the bf16 fallbacks replace.
- indexer ``nvfp4_emu``, ``mxfp4_emu``: q and the keys requantized to FP4 along head_dim
  (NVFP4: an e4m3 scale per 16 and a float32 one per matrix; MXFP4: a power of two per 32),
  emulated (dequantized, float32 GEMM): Hopper has no FP4 tensor cores.
- mhc_pre ``fp8_block``, ``fp8_block_ue8m0``: the projection in DeepSeek V3's FP8 recipe, x
  per token in 1x128 groups along n*C, hc_fn in 128x128 blocks (quantized once, at load
  time), float32 or UE8M0 scales, promoted every 128 of K, float32 mixes; the RMS statistics
  and the epilogue as in every mHC variant. Its verdict is an honest one: docs/ops.md.

Each records the operands it multiplied (numcheck.precision.quant_record) for the second
reference.
"""

from __future__ import annotations

import torch

from numcheck.ops import indexer, mhc
from numcheck.ops.fp8_gemm import quant_gemm, quant_matmul
from numcheck.ops.linear import UE8M0_ACT, UE8M0_WEIGHT, prepare_weight, quantized_product
from numcheck.ops.spec import Inputs, Outputs, Params, PrepareFn, Variant, VariantFn
from numcheck.precision.quant_accumulate import FP32_ACCUMULATION, PROMOTED_128
from numcheck.precision.quant_declare import AsStored, GemmQuant, stored
from numcheck.precision.quant_record import is_recording, record_gemm
from numcheck.precision.quant_scheme import DEEPSEEK_ACT, DEEPSEEK_WEIGHT, MXFP4, NVFP4

#: The indexer's FP8 GEMM: e4m3 q and keys as stored, promoted every 128 of K, fp32 scores.
INDEXER_FP8 = GemmQuant(AsStored("e4m3fn"), AsStored("e4m3fn"), PROMOTED_128, "fp32")
INDEXER_FP4 = {
    "nvfp4_emu": GemmQuant(NVFP4, NVFP4, FP32_ACCUMULATION, "fp32"),
    "mxfp4_emu": GemmQuant(MXFP4, MXFP4, FP32_ACCUMULATION, "fp32"),
}
MHC_FP8 = {
    "fp8_block": GemmQuant(DEEPSEEK_ACT, DEEPSEEK_WEIGHT, PROMOTED_128, "fp32"),
    "fp8_block_ue8m0": GemmQuant(UE8M0_ACT, UE8M0_WEIGHT, PROMOTED_128, "fp32"),
}


def indexer_fp8(inputs: Inputs, p: Params) -> Outputs:
    """e4m3 q and keys multiplied on FP8 tensor cores (``torch._scaled_mm`` per request on
    CUDA, unit scales; numcheck's emulation of the promoted accumulation on a CPU), fp32
    scores; each key's scale applied after, in the fp32 epilogue."""
    b, n, h, d = inputs["q"].shape
    length = p["max_context"]
    cuda = inputs["q"].device.type == "cuda"
    # cuBLAS's FP8 GEMM wants N divisible by 16: gather that many keys (the pages hold them)
    # and drop the extra scores.
    padded = -(-length // 16) * 16 if cuda else length
    k, k_scale = indexer.paged_keys(inputs, padded)
    q = inputs["q"].view(b, n * h, d)
    operand = INDEXER_FP8.a
    assert isinstance(operand, AsStored)
    qas = [stored(q[i], operand) for i in range(b)]
    qbs = [stored(k[i], operand) for i in range(b)]
    backend = "scaled_mm" if cuda else "emulated"
    if cuda:  # the e4m3 bytes themselves, no float32 copy, for the kernel
        qas = [type(qa)(q[i], qa.scales, qa.scheme) for i, qa in enumerate(qas)]
        qbs = [type(qb)(k[i], qb.scales, qb.scheme) for i, qb in enumerate(qbs)]
    scores = torch.stack([quant_gemm(qa, qb, INDEXER_FP8, backend, record=False)
                          for qa, qb in zip(qas, qbs, strict=True)])[..., :length]
    if is_recording():
        record_gemm([qa for qa in qas], [type(qb)(qb.values[:length], qb.scales, qb.scheme)
                                         for qb in qbs], scores)
    return indexer._outputs(scores, inputs, k_scale[:, :length], p)


def _indexer_fp4(quant: GemmQuant) -> VariantFn:
    def fn(inputs: Inputs, p: Params) -> Outputs:
        b, n, h, d = inputs["q"].shape
        k, k_scale = indexer.paged_keys(inputs, p["max_context"])
        q = inputs["q"].to(torch.float32).view(b, n * h, d)
        scores = quant_matmul(q, k.to(torch.float32).transpose(1, 2), quant, "dequantized")
        return indexer._outputs(scores, inputs, k_scale, p)

    return fn


def _mhc_fp8(quant: GemmQuant) -> tuple[VariantFn, PrepareFn]:
    """mHC's projection by the FP8 GEMM of numcheck.ops.linear, hc_fn its weight (quantized
    once); x widened to fp32 once, for the RMS statistics and the quantizer alike."""

    def fn(inputs: Inputs, p: Params) -> Outputs:
        xf = inputs["x"].flatten(1).float()
        m = quantized_product(quant, xf, inputs) * mhc._rms_inv(xf, mhc.norm_eps(p))
        return mhc._epilogue(m, xf, inputs, p)

    return fn, prepare_weight(quant, "hc_fn")


_DOCS = {
    "fp8": indexer_fp8.__doc__ or "",
    "nvfp4_emu": ("q and keys requantized to NVFP4 along head_dim (e2m1, e4m3 scale per 16, "
                  "fp32 scale per matrix), emulated: dequantized, fp32 GEMM, fp32 scores"),
    "mxfp4_emu": ("q and keys requantized to MXFP4 along head_dim (e2m1, power-of-two scale "
                  "per 32), emulated: dequantized, fp32 GEMM, fp32 scores"),
    "fp8_block": ("x per token in 1x128 groups, hc_fn in 128x128 blocks (quantized once), "
                  "float32 scales, FP8 GEMM promoted every 128, fp32 mixes"),
    "fp8_block_ue8m0": "as fp8_block with UE8M0 (power-of-two, rounded up) scales",
}


def variants() -> list[tuple[str, Variant]]:
    """``(op name, variant)`` of each FP8 and FP4 variant, for :mod:`numcheck.ops.builtin`."""
    out: list[tuple[str, Variant]] = [
        ("indexer", Variant("fp8", indexer_fp8, "e4m3", doc=_DOCS["fp8"], quant=INDEXER_FP8))]
    for name, quant in INDEXER_FP4.items():
        fn = _indexer_fp4(quant)
        fn.__name__ = fn.__qualname__ = f"indexer_{name}"
        out.append(("indexer", Variant(name, fn, "e2m1", doc=_DOCS[name], quant=quant)))
    for name, quant in MHC_FP8.items():
        fn, prepare = _mhc_fp8(quant)
        fn.__name__ = fn.__qualname__ = f"mhc_{name}"
        out.append(("mhc_pre", Variant(name, fn, "e4m3", doc=_DOCS[name],
                                       prepare=prepare, quant=quant)))
    return out
