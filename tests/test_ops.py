"""The two ops: inputs as specified, and references checked against naive float64 math."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from numcheck.goldens.files import input_fingerprint
from numcheck.inputs import AMAX_FLOOR, E4M3_MAX, quantize_e4m3
from numcheck.ops import indexer, mhc
from numcheck.ops.registry import get_op
from numcheck.precision import matmul_precision
from numcheck.prepare import with_preparation

SMALL = {"batch": 3, "next_n": 1, "heads": 4, "head_dim": 16, "block_size": 64,
         "max_context": 200, "min_context": 0, "index_topk": 32, "shuffle_pages": True,
         "near_ties": 0.0}


def params(**kw: object) -> dict[str, object]:
    return {**SMALL, **kw}


# --- inputs -----------------------------------------------------------------------------


def test_inputs_are_deterministic_per_seed() -> None:
    a = indexer.make_inputs(params(), 7)
    b = indexer.make_inputs(params(), 7)
    c = indexer.make_inputs(params(), 8)
    assert input_fingerprint(a) == input_fingerprint(b) != input_fingerprint(c)


def test_quantize_e4m3_scale_is_amax_over_448_with_floor() -> None:
    x = torch.tensor([[1.0, -3.0, 0.5], [0.0, 0.0, 0.0]])
    q, scale = quantize_e4m3(x)
    assert q.dtype == torch.float8_e4m3fn
    assert scale.tolist() == pytest.approx([3.0 / E4M3_MAX, AMAX_FLOOR / E4M3_MAX])
    assert q.float()[0, 1] == -E4M3_MAX
    assert torch.allclose(q.float()[0] * scale[0], x[0], rtol=2**-3)


def test_paged_layout_round_trips_the_logical_keys() -> None:
    p = params()
    inputs = indexer.make_inputs(p, 0)
    cache, table, lens = inputs["kv_cache"], inputs["block_table"], inputs["context_lens"]
    bs, d = 64, 16
    assert cache.dtype == torch.uint8 and tuple(cache.shape[1:]) == (bs, 1, d + 4)
    # Not the identity: pages are shuffled, and requests have different lengths.
    used = [int(x) for b in range(3) for x in table[b, : math.ceil(int(lens[b]) / bs)]]
    assert used != sorted(used) and len(set(used)) == len(used)
    assert len(set(lens.tolist())) > 1 and int(lens.max()) == 200
    # Decode one token by hand from the block-split bytes and compare with paged_keys.
    k, s = indexer.paged_keys(inputs, 200)
    b, t = 1, 70
    page, slot = int(table[b, t // bs]), t % bs
    flat = cache.view(cache.shape[0], -1)[page]
    key = flat[slot * d:(slot + 1) * d].view(torch.float8_e4m3fn).float()
    scale = flat[bs * d + 4 * slot: bs * d + 4 * slot + 4].view(torch.float32)
    assert torch.equal(k[b, t].float(), key) and float(s[b, t]) == float(scale)


def test_weights_fold_head_and_dim_scaling() -> None:
    p = params()
    w = indexer.make_inputs(p, 0)["weights"]
    # |w| ~ |N(0,1)| * H^-0.5 * D^-0.5 * q_scale, q_scale = amax/448 ~ 3/448.
    assert w.shape == (3, 4) and 1e-5 < float(w.abs().median()) < 1e-2


def test_near_ties_plant_equal_and_nearly_equal_logits() -> None:
    p = params(near_ties=0.25, batch=1, min_context=200)
    out = indexer.fp32(indexer.make_inputs(p, 0), p)["logits"][0]
    values = out[torch.isfinite(out)]
    rel_gaps = (values.unsqueeze(0) - values.unsqueeze(1)).abs() / values.abs().max()
    off_diag = rel_gaps + torch.eye(len(values)) * 9
    assert int((off_diag == 0).sum()) >= 2  # exact ties
    assert int(((off_diag > 0) & (off_diag < 2**-9)).sum()) >= 2  # below bf16 resolution


def test_mhc_inputs_follow_the_model() -> None:
    p = {"tokens": 16, "hc_mult": 4, "hidden": 256, "sinkhorn_iters": 20, "eps": 1e-6}
    inputs = mhc.make_inputs(p, 0)
    assert inputs["x"].dtype == torch.bfloat16 and inputs["x"].shape == (16, 4, 256)
    assert inputs["hc_fn"].shape == (24, 1024)
    assert float(inputs["hc_fn"].std()) == pytest.approx(1024**-0.5, rel=0.05)


# --- references against naive float64 math ----------------------------------------------


def naive_indexer(inputs: dict[str, torch.Tensor], p: dict[str, object]) -> np.ndarray:
    q = inputs["q"].double().numpy()
    b_, n, h, _d = q.shape
    big = int(p["max_context"])  # type: ignore[call-overload]
    k, s = indexer.paged_keys(inputs, big)
    k, s = k.double().numpy(), s.double().numpy()
    w = inputs["weights"].double().numpy().reshape(b_, n, h)
    out = np.full((b_ * n, big), -np.inf)
    for b in range(b_):
        for j in range(n):
            valid = int(inputs["context_lens"][b]) - n + j + 1
            for t in range(valid):
                score = sum(w[b, j, hh] * max(float(q[b, j, hh] @ k[b, t]), 0.0) for hh in range(h))
                out[b * n + j, t] = s[b, t] * score
    return out


@pytest.mark.parametrize("next_n", [1, 2])
def test_indexer_reference_matches_naive_math(next_n: int) -> None:
    p = params(next_n=next_n, batch=2, max_context=130)
    inputs = indexer.make_inputs(p, 1)
    got = indexer.fp32(inputs, p)
    want = naive_indexer(inputs, p)
    logits = got["logits"].double().numpy()
    assert np.array_equal(np.isneginf(logits), np.isneginf(want))
    finite = np.isfinite(want)
    assert np.allclose(logits[finite], want[finite], rtol=1e-5, atol=1e-6)
    # Top-k: the k largest of each row, -1 beyond the valid length.
    for r in range(want.shape[0]):
        valid = int(finite[r].sum())
        sel = got["topk"][r].tolist()
        assert sel.count(-1) == max(32 - valid, 0)
        kth = np.sort(want[r][finite[r]])[::-1][min(32, valid) - 1]
        assert all(want[r, t] >= kth - 1e-6 for t in sel if t >= 0)


def naive_mhc(inputs: dict[str, torch.Tensor], p: dict[str, object]) -> dict[str, np.ndarray]:
    n, eps, iters = 4, 1e-6, int(p["sinkhorn_iters"])  # type: ignore[call-overload]
    xf = inputs["x"].double().numpy().reshape(inputs["x"].shape[0], -1)
    fn = inputs["hc_fn"].double().numpy()
    sc, base = inputs["hc_scale"].double().numpy(), inputs["hc_base"].double().numpy()
    r = 1.0 / np.sqrt((xf**2).mean(-1, keepdims=True) + eps)
    m = (xf @ fn.T) * r
    sig = lambda z: 1 / (1 + np.exp(-z))
    pre = sig(m[:, :n] * sc[0] + base[:n]) + eps
    post = 2 * sig(m[:, n:2 * n] * sc[1] + base[n:2 * n])
    z = (m[:, 2 * n:] * sc[2] + base[2 * n:]).reshape(-1, n, n)
    comb = np.exp(z - z.max(-1, keepdims=True))
    comb = comb / comb.sum(-1, keepdims=True) + eps
    comb = comb / (comb.sum(-2, keepdims=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdims=True) + eps)
        comb = comb / (comb.sum(-2, keepdims=True) + eps)
    y = (pre[:, :, None] * xf.reshape(-1, n, xf.shape[1] // n)).sum(1)
    return {"mixes": m, "pre": pre, "post": post, "comb": comb, "y": y}


def test_mhc_reference_matches_naive_math() -> None:
    p = {"tokens": 8, "hc_mult": 4, "hidden": 128, "sinkhorn_iters": 20, "eps": 1e-6}
    inputs = mhc.make_inputs(p, 2)
    got = mhc.fp32(inputs, p)
    want = naive_mhc(inputs, p)
    for name in ("mixes", "pre", "post", "comb"):
        assert np.allclose(got[name].double().numpy(), want[name], rtol=1e-5, atol=1e-6), name
    # y is rounded to bf16 at the end: within one bf16 rounding of the float64 value.
    y = got["y"].double().numpy()
    assert np.all(np.abs(y - want["y"]) <= 2**-8 * np.abs(want["y"]) + 1e-6)
    # Sinkhorn converges to a doubly stochastic matrix.
    assert np.allclose(want["comb"].sum(-1), 1, atol=1e-3)


def test_bf16_roundtrip_equals_bf16_bit_for_bit() -> None:
    p = {"tokens": 8, "hc_mult": 4, "hidden": 128, "sinkhorn_iters": 20, "eps": 1e-6}
    inputs = mhc.make_inputs(p, 0)
    a, b = mhc.bf16(inputs, p), mhc.bf16_roundtrip(inputs, p)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_every_variant_returns_the_op_outputs() -> None:
    for name, module, p in (("indexer", indexer, params()),
                            ("mhc_pre", mhc, {"tokens": 4, "hc_mult": 4, "hidden": 64,
                                              "sinkhorn_iters": 3, "eps": 1e-6})):
        op = get_op(name)
        inputs = module.make_inputs(p, 0)
        for variant in op.variants.values():
            if "cpu" not in variant.devices:
                continue
            out = with_preparation(variant)(inputs, p)
            assert set(out) == set(op.outputs), (name, variant.name)


# --- TF32 switching ------------------------------------------------------------------------


def test_reference_forces_tf32_off_and_restores() -> None:
    seen: list[str] = []
    original = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        with matmul_precision(tf32=False):
            seen.append(torch.get_float32_matmul_precision())
        seen.append(torch.get_float32_matmul_precision())
        with pytest.raises(RuntimeError), matmul_precision(tf32=True):
            seen.append(torch.get_float32_matmul_precision())
            raise RuntimeError("boom")
        seen.append(torch.get_float32_matmul_precision())
        p = params()
        indexer.fp32(indexer.make_inputs(p, 0), p)
        seen.append(torch.get_float32_matmul_precision())
    finally:
        torch.set_float32_matmul_precision(original)
    assert seen == ["highest", "high", "high", "high", "high"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="TF32 numerics need a CUDA device")
def test_tf32_changes_cuda_matmul_and_reference_does_not() -> None:
    a = torch.randn(256, 1024, device="cuda")
    b = torch.randn(1024, 256, device="cuda")
    exact = (a.double() @ b.double()).float()
    with matmul_precision(tf32=True):
        fast = a @ b
    with matmul_precision(tf32=False):
        ieee = a @ b
    err = lambda x: float((x - exact).norm() / exact.norm())
    assert err(ieee) < 1e-6 < err(fast)
