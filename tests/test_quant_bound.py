"""The simulated reference's per-element bound: honest kernels stay under it, buggy ones go far past
(numcheck.precision.quant_bound).

Honest kernels: numcheck's emulation of each member's declared model and other honest ways to
compute the same model (tests/quant_kernels.py: a narrower MMA step, more kept bits, rounding
to nearest, more frequent promotion, split K, dequantize-and-multiply in float32). Buggy
kernels: each bug kind of issue 35 planted where a kernel makes it, on correct operands.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from numcheck.precision.quant_accumulate import FAST_ACCUMULATION, PROMOTED_128, Accumulation
from numcheck.precision.quant_bound import (
    SIGMAS,
    compare_to_simulated,
    half_ulp,
    sim_bound,
    sim_ratio,
)
from numcheck.precision.quant_members import QuantMember, quant_members
from numcheck.precision.quant_scheme import (
    DEEPSEEK_ACT,
    DEEPSEEK_WEIGHT,
    FP8_TENSOR,
    OperandScheme,
)
from numcheck.precision.quantize import quantize
from tests.quant_kernels import DATA, HONEST_KERNELS, KERNEL_BUGS, model, no_promotion, operand

#: The worst ratio an honest kernel may reach: the bound itself.
HONEST_LIMIT = 1.0
#: How far past the bound a scale, layout or decoding bug must land (measured: hundreds to
#: tens of thousands, docs/fp8.md), and a skipped promotion on a long positive K (measured ~50).
BUG_FLOOR = 50.0
NO_PROMOTION_FLOOR = 10.0

MEMBERS = {m.label: m for m in quant_members()}


def _honest_kernels(member: QuantMember) -> list[str]:
    return [name for name, (_, kinds) in HONEST_KERNELS.items()
            if member.recipe.accumulation.kind in kinds]


def _worst(member: QuantMember, kernel: str, m: int, n: int, k: int, kind: str,
           seed: int) -> float:
    r = member.recipe
    qa = quantize(operand(kind, m, k, seed), r.a)
    qb = quantize(operand(kind, n, k, seed + 1), r.b)
    y = HONEST_KERNELS[kernel][0](qa, qb, r.accumulation, r.out_dtype)
    return compare_to_simulated(y, qa, qb, r.accumulation, r.out_dtype).worst


#: A few members of every model and output for the fast tier; the slow tier runs them all.
FAST_MEMBERS = ("e4m3_tensor_promoted_fp32out", "e4m3_row_fast_fp32out",
                "e4m3_block_ue8m0_bf16out", "e4m3_block_fp32_fp32acc", "e5m2_tensor_fast_bf16out",
                "nvfp4_fp32out", "mxfp4_bf16out")
#: Tiny K, K a multiple of nothing, a long positive K.
FAST_SHAPES = ((2, 3, 1, "normal"), (5, 9, 300, "blocky"), (4, 6, 2048, "positive"))


@pytest.mark.parametrize("label", FAST_MEMBERS)
def test_honest_kernels_stay_under_the_bound(label: str) -> None:
    member = MEMBERS[label]
    for kernel in _honest_kernels(member):
        for m, n, k, kind in FAST_SHAPES:
            worst = _worst(member, kernel, m, n, k, kind, seed=k)
            assert worst <= HONEST_LIMIT, (kernel, m, n, k, kind, worst)


#: 5 shapes, 50 seeds, every member; each seed runs the model and one other honest kernel
#: (in turn), on one data kind (in turn).
SLOW_SHAPES = ((1, 7, 5), (3, 40, 128), (17, 33, 300), (8, 24, 1000), (4, 16, 2048))


@pytest.mark.slow  # 500 emulated GEMMs with their bounds per member
@pytest.mark.parametrize("label", list(MEMBERS))
def test_honest_kernels_stay_under_the_bound_over_50_seeds(label: str) -> None:
    member = MEMBERS[label]
    others = [k for k in _honest_kernels(member) if k != "model"]
    worst = 0.0
    for seed in range(50):
        kind = DATA[seed % len(DATA)]
        for m, n, k in SLOW_SHAPES:
            for kernel in ("model", others[seed % len(others)]):
                w = _worst(member, kernel, m, n, k, kind, seed=1000 * seed + k)
                assert w <= HONEST_LIMIT, (kernel, m, n, k, kind, seed, w)
                worst = max(worst, w)
    r = member.recipe
    if r.output != "fp32" or r.accumulation.tensor_core:  # (fp32 sums of FP4 can be exact)
        assert worst > 0.1  # the bound is not vacuous: honest errors come near it


def _bug_operands(scale: str, seed: int, k: int = 384, data: str = "blocky"):
    """Activations [8, k] in 1x128 groups, a weight [384, k] in 128x128 blocks whose
    magnitudes vary by block (so block scales differ), and the weight before it changed."""
    act, weight = replace(DEEPSEEK_ACT, scale=scale), replace(DEEPSEEK_WEIGHT, scale=scale)
    old = operand(data, 384, k, seed + 1)
    w = old * (1 + 0.25 * operand("normal", 384, k, seed + 2))
    return quantize(operand(data, 8, k, seed), act), quantize(w, weight), quantize(old, weight)


#: Kernel bugs on block-scaled operands; ``ue8m0_rounded_down`` is a kernel that turns
#: float32 scales into power-of-two ones (only a bug where the scales are float32).
SCALE_BUGS = [(bug, scale) for bug in KERNEL_BUGS if bug != "no_promotion"
              for scale in ("fp32", "ue8m0") if not (bug == "ue8m0_rounded_down"
                                                     and scale == "ue8m0")]


@pytest.mark.parametrize(("bug", "scale"), SCALE_BUGS, ids=[f"{b}-{s}" for b, s in SCALE_BUGS])
def test_each_kernel_bug_lands_far_past_the_bound(bug: str, scale: str) -> None:
    qa, qb, qold = _bug_operands(scale, seed=3)
    for out in (torch.float32, torch.bfloat16):
        y = KERNEL_BUGS[bug](qold)(qa, qb, PROMOTED_128, out)
        cmp = compare_to_simulated(y, qa, qb, PROMOTED_128, out)
        assert cmp.worst >= BUG_FLOOR and not cmp.passed, (bug, out, cmp.worst)
        honest = compare_to_simulated(model(qa, qb, PROMOTED_128, out), qa, qb, PROMOTED_128,
                                      out)
        assert honest.passed


@pytest.mark.parametrize("schemes", [(FP8_TENSOR, FP8_TENSOR), (DEEPSEEK_ACT, DEEPSEEK_WEIGHT)],
                         ids=["tensor", "block"])
def test_a_skipped_promotion_lands_past_the_bound_on_a_long_k(
        schemes: tuple[OperandScheme, OperandScheme]) -> None:
    qa = quantize(operand("positive", 4, 4096, 7), schemes[0])
    qb = quantize(operand("positive", 16, 4096, 8), schemes[1])
    y = no_promotion(qa, qb, PROMOTED_128, torch.float32)
    assert compare_to_simulated(y, qa, qb, PROMOTED_128).worst >= NO_PROMOTION_FLOOR
    # The same kernel declared as what it is passes.
    if schemes[0] is FP8_TENSOR:
        assert compare_to_simulated(y, qa, qb, FAST_ACCUMULATION).passed


@pytest.mark.slow  # 50 seeds of every kernel bug
def test_each_kernel_bug_lands_far_past_the_bound_over_50_seeds() -> None:
    for seed in range(50):
        scale = ("fp32", "ue8m0")[seed % 2]
        qa, qb, qold = _bug_operands(scale, seed=100 + seed, k=(384, 320)[seed % 2])
        for bug, s in SCALE_BUGS:
            if s != scale or (bug == "transposed_scales" and qb.scales.shape[0] != qb.scales.shape[1]):
                continue
            y = KERNEL_BUGS[bug](qold)(qa, qb, PROMOTED_128, torch.bfloat16)
            if torch.equal(y, model(qa, qb, PROMOTED_128, torch.bfloat16)):
                continue  # no effect on these inputs (power-of-two scales that coincide)
            worst = compare_to_simulated(y, qa, qb, PROMOTED_128, torch.bfloat16).worst
            assert worst >= BUG_FLOOR, (bug, scale, seed, worst)


def test_a_nan_anywhere_never_passes() -> None:
    qa, qb, _ = _bug_operands("fp32", seed=5)
    y = model(qa, qb, PROMOTED_128, torch.float32)
    y[0, 0] = float("nan")
    cmp = compare_to_simulated(y, qa, qb, PROMOTED_128)
    assert math.isinf(cmp.worst) and cmp.index == (0, 0) and not cmp.passed
    bad = replace(qa, values=qa.values.clone())
    bad.values[1, 1] = float("nan")  # an unclamped e4m3fn overflow in the operand itself
    cmp = compare_to_simulated(model(bad, qb, PROMOTED_128, torch.float32), bad, qb,
                               PROMOTED_128)
    assert math.isinf(cmp.worst) and not cmp.passed


def test_sim_ratio_and_half_ulp_semantics() -> None:
    y_sim = torch.tensor([1.0, 2.0, 0.0, 1.0, float("nan")], dtype=torch.float64)
    bound = torch.tensor([0.5, 0.0, 0.0, 1.0, 1.0], dtype=torch.float64)
    y = torch.tensor([1.25, 2.0, 0.0, float("inf"), 1.0])
    r = sim_ratio(y, y_sim, bound)
    assert r[:4].tolist() == [0.5, 0.0, 0.0, math.inf] and math.isnan(r[4])
    assert math.isinf(sim_ratio(torch.tensor([1.0]), torch.tensor([0.0], dtype=torch.float64),
                                torch.tensor([0.0], dtype=torch.float64))[0])
    v = torch.tensor([1.0, 1.99, 2.0, 0.0, 1e-40], dtype=torch.float64)
    assert half_ulp(v, torch.bfloat16).tolist() == [2.0**-8, 2.0**-8, 2.0**-7, 2.0**-134,
                                                    2.0**-134]
    assert half_ulp(v, torch.float32)[0] == 2.0**-24
    # Round to nearest never passes half an ulp: the output term alone is a hard bound.
    # (from float32, one rounding: torch takes float64 to bf16 through float32, two roundings)
    x = torch.randn(10000, generator=torch.Generator().manual_seed(0)).double()
    assert ((x.float().bfloat16().double() - x).abs() <= half_ulp(x, torch.bfloat16)).all()
    with pytest.raises(ValueError, match="not one of"):
        half_ulp(v, torch.int32)


def test_the_bound_is_made_of_its_declared_parts() -> None:
    qa = quantize(operand("normal", 4, 512, 9), FP8_TENSOR)
    qb = quantize(operand("normal", 5, 512, 10), FP8_TENSOR)
    fp32 = sim_bound(qa, qb, Accumulation("fp32"))
    promoted = sim_bound(qa, qb, PROMOTED_128)
    fast = sim_bound(qa, qb, FAST_ACCUMULATION)
    assert (fp32 < promoted).all() and (promoted.sum() < fast.sum())
    assert (sim_bound(qa, qb, PROMOTED_128, torch.bfloat16) > promoted).all()
    looser = sim_bound(qa, qb, PROMOTED_128, sigmas=2 * SIGMAS)
    assert (looser >= promoted).all()
