"""AMD's FP8 element formats (MI300: ``float8_e4m3fnuz``, ``float8_e5m2fnuz``) as data: numcheck
rounds to them bit for bit as torch's CPU cast does (no negative zero, largest 240 for
e4m3fnuz), and a variant declaring them is validated and simulated like an e4m3fn one, on the
CPU. docs/fp8.md, "GPUs we cannot borrow"."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from numcheck.cases import load_case_file
from numcheck.check import run_check
from numcheck.ops import registry
from numcheck.ops.linear import quantized_linear
from numcheck.ops.registry import Variant, add_variant, get_op
from numcheck.precision.quant_accumulate import FP32_ACCUMULATION
from numcheck.precision.quant_declare import GemmQuant
from numcheck.precision.quant_formats import element_format, is_representable, round_to_element
from numcheck.precision.quant_scheme import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    OperandScheme,
    blocks,
    groups,
)
from numcheck.precision.quant_validate import validate
from numcheck.precision.quantize import quantize
from numcheck.selftest import held_to, shipped_golden

ROOT = Path(__file__).resolve().parent.parent
FNUZ_ACT = OperandScheme("e4m3fnuz", groups(128), "fp32")
FNUZ_WEIGHT = OperandScheme("e4m3fnuz", blocks(128), "fp32")
FNUZ = GemmQuant(FNUZ_ACT, FNUZ_WEIGHT, FP32_ACCUMULATION, "bf16")


@pytest.mark.parametrize(("name", "largest", "tiny"), [
    ("e4m3fnuz", 240.0, 2.0**-7), ("e5m2fnuz", 57344.0, 2.0**-15)])
def test_the_formats_round_as_torchs_cast_with_no_negative_zero(
        name: str, largest: float, tiny: float) -> None:
    fmt = element_format(name)
    dtype = getattr(torch, fmt.torch_dtype)
    finfo = torch.finfo(dtype)
    assert (fmt.max_value, 2.0**fmt.min_exponent) == (finfo.max, finfo.tiny) == (largest, tiny)
    assert not fmt.negative_zero and not fmt.has_inf and fmt.has_nan
    g = torch.Generator().manual_seed(0)
    # Every binade of the format (subnormals included), both signs, ties included.
    exps = torch.randint(fmt.min_exponent - fmt.mantissa_bits - 2, fmt.max_exponent + 1,
                         (20000,), generator=g)
    x = (torch.rand(20000, generator=g) + 1) * 2.0**exps.double()
    x = torch.cat([x, -x]).float()
    x = x[x.abs() <= largest]
    mine = round_to_element(x, name, saturate=True)
    assert torch.equal(mine, x.to(dtype).float())
    # -0 and values that round to zero are +0: -0's bit pattern is the format's NaN.
    zero = round_to_element(torch.tensor([-0.0, -tiny / 32]), name, saturate=True)
    assert zero.tolist() == [0.0, 0.0] and not torch.signbit(zero).any()
    assert bool(is_representable(torch.tensor([largest, -tiny]), name).all())
    assert not bool(is_representable(torch.tensor([2 * largest]), name).any())


def test_e4m3fnuz_overflow_is_nan_unsaturated_and_its_largest_saturated() -> None:
    x = torch.tensor([247.0, 250.0, 1000.0])
    assert round_to_element(x, "e4m3fnuz", saturate=True).tolist() == [240.0, 240.0, 240.0]
    out = round_to_element(x, "e4m3fnuz", saturate=False)
    assert out[0] == 240.0 and out[1:].isnan().all()
    assert torch.equal(out.isnan(), x.to(torch.float8_e4m3fnuz).float().isnan())


def test_a_quantization_declared_fnuz_is_checked_against_fnuz_not_fn() -> None:
    """numcheck's quantizer fills fnuz's range (amax / 240); scales made for e4m3fn (amax /
    448, elements up to 448) under an fnuz declaration are flagged, and the hint names
    e4m3fn."""
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(1))
    q = quantize(x, FNUZ_ACT)
    assert q.values.abs().max() <= 240 and validate(q, FNUZ_ACT, x).ok
    wrong = quantize(x, DEEPSEEK_ACT)  # e4m3fn's: elements up to 448
    found = validate(replace(wrong, scheme=FNUZ_ACT), FNUZ_ACT, x)
    assert not found.ok
    assert "scales made for e4m3fn (largest value 448) where e4m3fnuz is declared" in str(
        found.describe())


@pytest.fixture
def fnuz_variants() -> Iterator[None]:
    with registry.isolated():
        fn, prepare = quantized_linear(FNUZ, "an MI300-style FP8 linear: e4m3fnuz operands")
        add_variant("linear", Variant("fp8_block_fnuz", fn, FNUZ.precision, prepare=prepare,
                                      quant=FNUZ))
        # A bug of the kind: quantized for e4m3fn (448), declared e4m3fnuz (240).
        fn, prepare = quantized_linear(GemmQuant(DEEPSEEK_ACT, DEEPSEEK_WEIGHT,
                                                 FP32_ACCUMULATION, "bf16"), "fn as fnuz")
        add_variant("linear", Variant("fn_declared_fnuz", fn, FNUZ.precision, prepare=prepare,
                                      quant=FNUZ))
        yield


@pytest.mark.parametrize(("name", "caught"), [("fp8_block_fnuz", False),
                                              ("fn_declared_fnuz", True)])
def test_a_variant_declaring_e4m3fnuz_is_validated_and_simulated_like_e4m3fn(
        fnuz_variants: None, name: str, caught: bool) -> None:
    """On the shipped tiny linear case's goldens, held to fp8_block's budgets: the fnuz
    variant passes both references (its operands validated against e4m3fnuz, its GEMM
    against the simulation on them); one that quantizes for e4m3fn and declares fnuz is
    caught by its operands."""
    (case,) = [c for c in load_case_file(ROOT / "cases" / "linear.toml") if c.id == "tiny-k384"]
    golden, inputs = shipped_golden(case, ROOT / "goldens")
    result = run_check(get_op("linear"), held_to(case, name, "fp8_block"), name, "cpu",
                       inputs, golden)
    keys = {v.key for v in result.violations}
    if caught:
        assert "quant.operands" in keys, keys
    else:
        assert keys == set(), [v.describe() for v in result.violations]
        quant = result.seeds[0].quant
        assert quant is not None and quant.sim_ratio is not None and quant.sim_ratio <= 1.0
