"""The honest emulated FP8 and FP4 GEMMs as rows of data (numcheck.precision.quant_members)."""

from __future__ import annotations

import pytest
import torch

from numcheck.honest.gemm_impls import GemmImpl
from numcheck.precision import PRECISIONS, TENSOR_CORE_PRECISIONS
from numcheck.precision.quant_accumulate import emulated_gemm
from numcheck.precision.quant_bound import compare_to_simulated
from numcheck.precision.quant_members import (
    QuantGemm,
    QuantMember,
    QuantRecipe,
    quant_members,
    quant_members_for,
)
from numcheck.precision.quant_scheme import FP8_ROW, FP8_TENSOR
from numcheck.precision.quantize import quantize
from tests.quant_kernels import operand

MEMBERS = quant_members()


def test_rows_are_well_formed_and_cover_every_scaled_class() -> None:
    labels = [m.label for m in MEMBERS]
    assert len(labels) == len(set(labels))
    for precision in ("e4m3", "e5m2", "e2m1"):
        rows = quant_members_for(precision)
        assert rows and any(m.envelope for m in rows), precision
        assert precision in PRECISIONS and precision in TENSOR_CORE_PRECISIONS
    # Hopper has no FP4 tensor cores: every e2m1 row is emulated with fp32 accumulation.
    assert all(m.recipe.accumulation.kind == "fp32" for m in quant_members_for("e2m1"))
    kinds = {(m.recipe.a.granularity.name, m.recipe.accumulation.label, m.recipe.output)
             for m in quant_members_for("e4m3")}
    assert {("tensor", "fast", "fp32"), ("row", "promoted128", "bf16"),
            ("1x128", "promoted128", "bf16")} <= kinds
    assert {m.recipe.a.scale for m in MEMBERS} == {"fp32", "ue8m0", "nvfp4", "mx"}
    with pytest.raises(ValueError, match="output must be one of"):
        QuantRecipe(FP8_TENSOR, FP8_TENSOR, output="fp8")


def test_a_row_is_a_gemm_impl_as_it_is() -> None:
    m = quant_members_for("e4m3")[0]
    impl = GemmImpl(m.label, m.precision, m.gemm, m.doc, envelope=m.envelope)
    a, b = operand("normal", 5, 256, 0), operand("normal", 256, 7, 1)
    y = impl.fn(a, b)
    assert y.shape == (5, 7) and y.dtype == torch.float32
    assert (y - a @ b).abs().max() < 0.1 * (a.abs() @ b.abs()).max()


@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: m.label)
def test_each_member_is_a_at_b_with_b_quantized_as_its_transpose(member: QuantMember) -> None:
    a, b = operand("blocky", 6, 300, 2), operand("blocky", 300, 9, 3)  # b is [K, N]
    product = member.gemm.product(a, b)
    r = member.recipe
    qa, qb = quantize(a, r.a), quantize(b.T, r.b)
    assert torch.equal(product.a.values, qa.values) and torch.equal(product.b.scales, qb.scales)
    assert torch.equal(product.y, emulated_gemm(qa, qb, r.accumulation, r.out_dtype))
    assert torch.equal(member.gemm(a, b), product.y)
    assert compare_to_simulated(product.y, qa, qb, r.accumulation, r.out_dtype).passed


def test_batched_operands_quantize_each_matrix_on_its_own() -> None:
    gemm = QuantGemm(QuantRecipe(FP8_ROW, FP8_ROW))
    a, b = operand("normal", 6, 64, 4).reshape(2, 3, 64), operand("normal", 128, 5, 5)
    b = b.reshape(2, 64, 5)
    y = gemm(a, b)
    assert y.shape == (2, 3, 5)
    assert torch.equal(y[1], gemm(a[1], b[1]))
    with pytest.raises(ValueError, match="equal leading"):
        gemm(a, b[:1])
