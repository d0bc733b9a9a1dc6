"""A variant's declared quantization (numcheck.fp8.GemmQuant), its scheme's honest family, the
emulated member that records its operands, and numcheck.fp8.record_gemm."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import numcheck
from numcheck.fp8 import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    FAST_ACCUMULATION,
    FP8_ROW,
    NVFP4,
    PROMOTED_128,
    AsStored,
    GemmQuant,
)
from numcheck.precision.quant_declare import DeclaredGemm, scheme_family
from numcheck.precision.quant_record import is_recording, recording

BLOCK = GemmQuant(DEEPSEEK_ACT, DEEPSEEK_WEIGHT, PROMOTED_128, "bf16")


def test_a_declaration_names_its_class_and_refuses_what_no_kernel_does() -> None:
    assert BLOCK.precision == "e4m3" and BLOCK.out == torch.bfloat16
    assert BLOCK.label == ("a e4m3fn/1x128/fp32 x b e4m3fn/128x128/fp32, promoted128, "
                           "bf16 out")
    assert GemmQuant(NVFP4, NVFP4).precision == "e2m1"
    assert GemmQuant(AsStored(), AsStored()).schemes[0].granularity == numcheck.fp8.PER_TENSOR
    # Scales that change along K force a promotion at every block: "none" cannot be.
    with pytest.raises(ValueError, match="leave the tensor core at every scale block"):
        GemmQuant(DEEPSEEK_ACT, DEEPSEEK_WEIGHT, FAST_ACCUMULATION)
    with pytest.raises(ValueError, match="out_dtype"):
        GemmQuant(FP8_ROW, FP8_ROW, out_dtype="fp8")
    with pytest.raises(TypeError, match="OperandScheme or AsStored"):
        GemmQuant("e4m3", FP8_ROW)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown element format"):
        AsStored("e3m4")


def test_a_scheme_family_is_its_operand_schemes_every_accumulation_and_output() -> None:
    labels = {m.label: m for m in scheme_family(BLOCK)}
    # The shipped rows of DeepSeek's recipe (numcheck.precision.quant_members), nothing else.
    assert set(labels) == {"e4m3_block_fp32_bf16out", "e4m3_block_fp32_fp32out",
                           "e4m3_block_fp32_fp32acc"}
    assert all(m.quant.schemes == BLOCK.schemes for m in labels.values())
    # ue8m0 scales are another scheme, with a family of their own.
    ue8m0 = replace(BLOCK, a=replace(DEEPSEEK_ACT, scale="ue8m0"),
                    b=replace(DEEPSEEK_WEIGHT, scale="ue8m0"))
    assert {m.label for m in scheme_family(ue8m0)} == {"e4m3_block_ue8m0_bf16out",
                                                       "e4m3_block_ue8m0_fp32out"}
    # A scheme the tables do not know gets every honest model, its own included; the
    # envelope is its bf16 results of the declared and the unpromoted sums.
    stored = GemmQuant(AsStored(), AsStored(), PROMOTED_128, "fp32")
    family = {m.label: m for m in scheme_family(stored)}
    assert set(family) == {f"e4m3_stored_{acc}_{out}out" for acc in ("promoted", "fast",
                                                                      "fp32acc")
                           for out in ("fp32", "bf16")}
    assert {k for k, m in family.items() if m.envelope} == {"e4m3_stored_promoted_bf16out",
                                                            "e4m3_stored_fast_bf16out"}


def test_the_emulated_member_is_numchecks_model_and_records_what_it_multiplied() -> None:
    g = torch.Generator().manual_seed(0)
    a, w = torch.randn(2, 8, 300, generator=g), torch.randn(2, 200, 300, generator=g)
    gemm = DeclaredGemm(BLOCK)
    assert not is_recording()
    with recording() as rec:
        assert is_recording()
        y = gemm(a, w.transpose(1, 2))
    (call,) = rec.calls
    assert call.batch == 2 and call.y is y and y.shape == (2, 8, 200)
    for i in range(2):
        qa = numcheck.fp8.quantize(a[i], DEEPSEEK_ACT)
        qb = numcheck.fp8.quantize(w[i], DEEPSEEK_WEIGHT)
        assert torch.equal(call.a[i].values, qa.values) and torch.equal(call.b[i].scales,
                                                                         qb.scales)
        assert torch.equal(y[i], numcheck.fp8.emulated_gemm(qa, qb, PROMOTED_128, torch.bfloat16))
        cmp = numcheck.fp8.compare_to_simulated(y[i], call.a[i], call.b[i], PROMOTED_128,
                                            torch.bfloat16)
        assert cmp.passed


def test_record_gemm_keeps_nothing_outside_a_check_and_says_what_it_needs() -> None:
    q = numcheck.fp8.quantize(torch.randn(4, 128), DEEPSEEK_ACT)
    numcheck.fp8.record_gemm(q, q)  # nobody listens: nothing happens
    with recording() as rec:
        numcheck.fp8.record_gemm([q, q], [q, q], torch.zeros(2, 4, 4))
        with pytest.raises(TypeError, match="numcheck.fp8.as_quantized"):
            numcheck.fp8.record_gemm(q.values, q)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="one of each per matrix"):
            numcheck.fp8.record_gemm([q, q], [q])
    assert len(rec.calls) == 1 and rec.calls[0].batch == 2
