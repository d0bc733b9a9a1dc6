"""Input formats deployments use: UE8M0 KV scales, mHC's two epsilons, the folded-scale bf16
indexer. The near-tie generator must still make real near-ties under UE8M0."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from numcheck.inputs import quantize_e4m3, rng
from numcheck.ops import indexer, mhc
from numcheck.ops.registry import get_op

SMALL = {"batch": 2, "max_context": 1024, "heads": 16}


def test_ue8m0_scales_are_powers_of_two_that_keep_e4m3_in_range() -> None:
    x = torch.from_numpy(rng(0, "t").standard_normal((64, 128)) * 7.3).float()
    q8, scale = quantize_e4m3(x, "ue8m0")
    exponent = torch.log2(scale)
    assert torch.equal(exponent, exponent.round())  # 2^n exactly
    amax = x.abs().amax(dim=-1)
    assert bool((scale >= amax / 448).all()) and bool((scale < 2 * amax / 448).all())
    assert bool((q8.float().abs() <= 448).all())
    # The dequantized keys are as close as fp8 allows (one e4m3 step: 2^-3 relative, at most).
    err = (q8.float() * scale.unsqueeze(1) - x).abs()
    assert bool((err <= x.abs() * 2.0**-3 + scale.unsqueeze(1) * 2.0**-9).all())
    with pytest.raises(ValueError, match="scale_fmt must be one of amax448, ue8m0, got 'e8'"):
        quantize_e4m3(x, "e8")


def _scales(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    _, s = indexer.paged_keys(inputs, int(inputs["context_lens"].max()))
    return s


def test_scale_fmt_is_a_case_parameter_and_amax448_stays_the_default() -> None:
    op = get_op("indexer")
    assert op.params["scale_fmt"].default == "amax448"
    default = op.make_inputs(op.resolve_params("v4flash", SMALL), 0)
    explicit = op.make_inputs(op.resolve_params("v4flash", {**SMALL, "scale_fmt": "amax448"}), 0)
    assert all(torch.equal(default[k], explicit[k]) for k in default)  # old goldens stay valid
    ue = op.make_inputs(op.resolve_params("v4flash", {**SMALL, "scale_fmt": "ue8m0"}), 0)
    s = _scales(ue)
    valid = s > 0
    assert torch.equal(torch.log2(s[valid]), torch.log2(s[valid]).round())
    p = op.resolve_params("v4flash", {**SMALL, "scale_fmt": "fp32"})
    with pytest.raises(ValueError, match="indexer: scale_fmt must be one of amax448, ue8m0"):
        op.make_inputs(p, 0)


def _tie_pairs(fmt: str, seed: int) -> tuple[int, int, int]:
    """(planted pairs, pairs within 2^-9 relative of each other, exact ties) in the fp32 logits."""
    op = get_op("indexer")
    p = op.resolve_params("v4flash", {**SMALL, "near_ties": 0.25, "scale_fmt": fmt})
    inputs = op.make_inputs(p, seed)
    logits = indexer.fp32(inputs, p)["logits"].double()
    gen = rng(seed, "near_ties")  # the generator's own stream, replayed
    total = close = exact = 0
    for b, length in enumerate(inputs["context_lens"].tolist()):
        sources, targets, _ = indexer._plan_near_ties(length, 0.25, gen)
        a = logits[b, torch.from_numpy(sources)]
        t = logits[b, torch.from_numpy(targets)]
        rel = (t - a).abs() / a.abs().clamp_min(1e-30)
        total += len(sources)
        close += int((rel <= 2.0**-9).sum())
        exact += int((rel == 0).sum())
    return total, close, exact


@pytest.mark.parametrize("fmt", ["amax448", "ue8m0"])
def test_near_tie_generator_makes_real_near_ties(fmt: str) -> None:
    total, close, exact = _tie_pairs(fmt, 0)
    assert total > 300
    # Nearly every planted pair is within the bf16 tie band, about half exactly tied and the
    # rest near (not equal): ties a bf16 variant can reorder, not copies it cannot.
    assert close >= 0.95 * total, (close, total)
    assert 0.3 * total <= exact <= 0.7 * total
    assert close - exact >= 0.25 * total


def test_a_scaled_copy_is_no_near_tie_under_ue8m0() -> None:
    # Why the generator copies bytes under UE8M0: scaling a token by 1 + d before quantizing
    # with a power-of-two scale re-rounds its fp8 bytes, so the copy is no longer a near-tie.
    keys = torch.from_numpy(rng(1, "k").standard_normal((200, 128))).float()
    scaled = keys * (1 + 2.0**-10)
    for fmt, same in (("amax448", True), ("ue8m0", False)):
        a, _ = quantize_e4m3(keys, fmt)
        b, _ = quantize_e4m3(scaled, fmt)
        equal_rows = (a.view(torch.uint8) == b.view(torch.uint8)).all(dim=1).float().mean()
        assert (float(equal_rows) > 0.99) is same, (fmt, float(equal_rows))


def test_folded_variant_rounds_k_times_scale_and_equals_bf16_under_ue8m0() -> None:
    op = get_op("indexer")
    for fmt in ("amax448", "ue8m0"):
        p = op.resolve_params("v4flash", {**SMALL, "scale_fmt": fmt})
        inputs = op.make_inputs(p, 0)
        folded = indexer.bf16_folded(inputs, p)["logits"]
        plain = indexer.bf16(inputs, p)["logits"]
        assert torch.equal(torch.isneginf(folded), torch.isneginf(plain))
        # A power-of-two scale times an e4m3 value is exact in bf16: the schemes agree there.
        assert torch.equal(folded, plain) is (fmt == "ue8m0")


# -- mHC's two epsilons --------------------------------------------------------------------


def test_eps_sets_both_and_each_can_be_given_alone() -> None:
    op = get_op("mhc_pre")
    p = op.resolve_params(None, {})
    assert (p["eps"], p["norm_eps"], p["hc_eps"]) == (1e-6, 1e-6, 1e-6)
    p = op.resolve_params(None, {"eps": 1e-4})
    assert (p["norm_eps"], p["hc_eps"]) == (1e-4, 1e-4)  # older case files keep their meaning
    p = op.resolve_params(None, {"eps": 1e-4, "hc_eps": 1e-3})
    assert (p["norm_eps"], p["hc_eps"]) == (1e-4, 1e-3)
    p = op.resolve_params("v4flash", {"norm_eps": 1e-5})
    assert (p["norm_eps"], p["hc_eps"]) == (1e-5, 1e-6)
    # Parameters built by hand with only eps still work.
    assert mhc.norm_eps({"eps": 2e-6}) == 2e-6 and mhc.hc_eps({"eps": 2e-6}) == 2e-6


def test_each_epsilon_acts_only_where_it_belongs() -> None:
    op = get_op("mhc_pre")
    base = op.resolve_params(None, {"tokens": 8, "hidden": 128})
    inputs = op.make_inputs(base, 0)
    ref = mhc.fp32(inputs, base)
    big_norm = mhc.fp32(inputs, {**base, "norm_eps": 1e3})
    big_hc = mhc.fp32(inputs, {**base, "hc_eps": 1e-2})
    # norm_eps only enters r = rsqrt(mean(x^2) + norm_eps): it scales the mixes.
    assert not torch.equal(big_norm["mixes"], ref["mixes"])
    # hc_eps leaves the mixes alone and moves pre (its + eps) and comb (Sinkhorn).
    assert torch.equal(big_hc["mixes"], ref["mixes"]) and torch.equal(big_hc["post"], ref["post"])
    assert not torch.allclose(big_hc["pre"], ref["pre"], rtol=0, atol=1e-3)
    assert not torch.equal(big_hc["comb"], ref["comb"])
    assert math.isclose(float((big_hc["pre"] - ref["pre"]).mean()), 1e-2 - 1e-6, rel_tol=1e-3)


def test_shipped_two_eps_case_sets_them_apart() -> None:
    from pathlib import Path

    from numcheck.cases import load_case_file

    root = Path(__file__).resolve().parent.parent
    cases = {c.id: c for c in load_case_file(root / "cases" / "mhc.toml")}
    p = cases["v4flash-t32-two-eps"].params
    assert p["norm_eps"] != p["hc_eps"]
    assert np.isclose(p["norm_eps"], 1e-5) and np.isclose(p["hc_eps"], 1e-3)
