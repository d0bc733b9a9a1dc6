"""Test-only variants with planted bugs: the gate must catch every one of them.

Registered by the tests (and by throwaway conftest files under pytester), never shipped.
"""

from __future__ import annotations

import time

import torch

from numcheck.numerics.topk import select_topk
from numcheck.ops import indexer, mhc
from numcheck.ops.registry import Inputs, Outputs, Params
from numcheck.precision import matmul_precision
from tests.variant_tables import register_table


def indexer_no_kv_scale(inputs: Inputs, p: Params) -> Outputs:
    """Drops the per-token kv scale (multiplies by 1)."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.float32)
    return indexer._outputs(torch.bmm(q, kt), inputs, torch.ones_like(k_scale), p)


def indexer_mask_off_by_one(inputs: Inputs, p: Params) -> Outputs:
    """Lets every row see one token past its context length."""
    shifted = dict(inputs, context_lens=inputs["context_lens"] + 1)
    return indexer.fp32(shifted, p)


def indexer_far_flips(inputs: Inputs, p: Params) -> Outputs:
    """Correct logits, but each row swaps its k-th token for its lowest-scoring valid token."""
    out = indexer.fp32(inputs, p)
    logits, topk = out["logits"], out["topk"].clone()
    for r in range(topk.shape[0]):
        valid = int((topk[r] >= 0).sum())
        finite = torch.isfinite(logits[r])
        if valid == 0 or int(finite.sum()) <= valid:
            continue
        lowest = torch.where(finite, logits[r], torch.inf).argmin()
        topk[r, valid - 1] = lowest.to(topk.dtype)
    return {"logits": logits, "topk": topk}


def indexer_near_flips(inputs: Inputs, p: Params) -> Outputs:
    """Correct logits, but each row picks its (k+1)-th token instead of its k-th: a near-tie."""
    out = indexer.fp32(inputs, p)
    logits = out["logits"]
    wider = select_topk(logits, p["index_topk"] + 1)
    topk = out["topk"].clone()
    for r in range(topk.shape[0]):
        valid = int((topk[r] >= 0).sum())
        if valid and int(wider[r, valid]) >= 0:
            topk[r, valid - 1] = wider[r, valid]
    return {"logits": logits, "topk": topk}


def mhc_y_scaled(inputs: Inputs, p: Params) -> Outputs:
    """y off by 1%: a wrong scale on the output."""
    out = mhc.fp32(inputs, p)
    out["y"] = (out["y"].float() * 1.01).to(torch.bfloat16)
    return out


def mhc_y_seed_dependent(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with a bug whose symptom depends on the inputs, so on the seed: where x's
    first element is positive, y comes out 3% too large (an error of every element: rel_fro,
    calc_diff, frac_outside, max_err_ratio); elsewhere one element of y near 0 is 0.1 off,
    ten bands of the bf16 row (one element: max_band_ratio, max_err_ratio). An expectation
    listing the metrics one seed trips misses the others' (tests/test_expect.py)."""
    out = mhc.bf16(inputs, p)
    y = out["y"].float()
    if float(inputs["x"].flatten()[0]) > 0:
        y = y * 1.03
    else:
        flat = y.flatten().clone()
        flat[flat.abs().argmin()] += 0.1
        y = flat.view_as(y)
    out["y"] = y.to(torch.bfloat16)
    return out


def mhc_slowed(inputs: Inputs, p: Params) -> Outputs:
    """Right numbers, deliberately slow: the reference four times over, then a stall
    (on the device timeline on CUDA, where a host sleep would not show in event times)."""
    # x upcast once and reused: slow in time, not in casts (the casts gate allows one pass).
    upcast = dict(inputs, x=inputs["x"].float())
    for _ in range(3):
        mhc.fp32(upcast, p)
    out = mhc.fp32(upcast, p)
    if inputs["x"].is_cuda:
        torch.cuda._sleep(20_000_000)
    else:
        time.sleep(0.03)
    return out


def indexer_page_dropped(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path whose block table lost one page of request 0: later pages shift up by one."""
    table = inputs["block_table"].clone()
    table[0, 1:-1] = inputs["block_table"][0, 2:]
    return indexer.bf16(dict(inputs, block_table=table), p)


def indexer_heads_before_relu(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that sums the weighted heads first and applies relu to the sum."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    b, n, h = inputs["q"].shape[:3]
    length = kt.shape[-1]
    s = torch.bmm(q, kt).float().view(b, n, h, length)
    logits = (s * inputs["weights"].view(b, n, h, 1)).sum(dim=2).relu()
    logits = logits * k_scale.view(b, 1, length)
    mask = indexer.valid_mask(inputs["context_lens"], n, length)
    logits = logits.masked_fill(~mask, float("-inf")).view(b * n, length)
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


def indexer_transposed_weights(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that reads the [B*next_n, H] head weights in transposed memory order."""
    w = inputs["weights"]
    wrong = w.t().contiguous().view(w.shape)
    return indexer.bf16(dict(inputs, weights=wrong), p)


def indexer_nan_one_row(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with one NaN logit in row 0 (a valid, unselected position)."""
    out = indexer.bf16(inputs, p)
    logits = out["logits"].clone()
    finite = torch.isfinite(logits[0]).nonzero().flatten()
    logits[0, finite[-1]] = float("nan")
    return {"logits": logits, "topk": out["topk"]}


#: K-tile of the emulated bf16 accumulation: each tile's product is exact-ish (fp32 inside
#: the MMA), the running sum over tiles is rounded to bf16, as in a kernel with a bf16 C.
ACC_TILE = 64


def mhc_bf16_accumulation(inputs: Inputs, p: Params) -> Outputs:
    """bf16 GEMM whose running sum over K tiles is kept in bf16 instead of fp32."""
    x = inputs["x"].flatten(1)
    w = inputs["hc_fn"].to(torch.bfloat16)
    # Every tile's bf16 product in one batched GEMM ([tiles, T, 64] @ [tiles, 64, 24]; zero
    # padding of a last partial tile adds exact zeros), then the running sum in bf16. The
    # same numbers as one small GEMM per tile, which on the CPU takes seconds per call.
    tokens, k = x.shape
    pad = -k % ACC_TILE
    xt = torch.nn.functional.pad(x, (0, pad)).view(tokens, -1, ACC_TILE).transpose(0, 1)
    wt = torch.nn.functional.pad(w, (0, pad)).view(w.shape[0], -1, ACC_TILE).permute(1, 2, 0)
    acc = x.new_zeros(tokens, w.shape[0], dtype=torch.bfloat16)
    for tile in torch.bmm(xt.contiguous(), wt.contiguous()):
        acc = acc + tile
    xf = x.float()
    m = acc.float() * mhc._rms_inv(xf, mhc.norm_eps(p))
    return mhc._epilogue(m, xf, inputs, p)


def mhc_rms_eps_x1000(inputs: Inputs, p: Params) -> Outputs:
    """TF32 path with the RMSNorm epsilon 1000 times too large (1e-3 instead of 1e-6)."""
    with matmul_precision(tf32=True):
        xf = inputs["x"].flatten(1).float()
        m = (xf @ inputs["hc_fn"].T) * mhc._rms_inv(xf, mhc.norm_eps(p) * 1000)
        return mhc._epilogue(m, xf, inputs, p)


#: Sinkhorn iterations left by the planted cut (the op runs 20).
CUT_ITERS = 3


def mhc_sinkhorn_cut(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that runs 3 Sinkhorn iterations instead of 20."""
    return mhc.bf16(inputs, dict(p, sinkhorn_iters=min(CUT_ITERS, p["sinkhorn_iters"])))


def mhc_roundtrip_cast(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with a redundant bf16 -> fp32 -> bf16 round trip of x: numerically exact."""
    return mhc.bf16_roundtrip(inputs, p)


def mhc_roundtrip_by_value(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path whose GEMM operand is x upcast, multiplied by 1.0, and cast back: a round
    trip through an exact op, invisible to storage tracking, caught by value."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    x_again = (xf * 1.0).to(torch.bfloat16)
    mm = x_again @ inputs["hc_fn"].to(torch.bfloat16).T
    return mhc._epilogue(mm.float() * mhc._rms_inv(xf, mhc.norm_eps(p)), xf, inputs, p)


def mhc_x_copy(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with one extra full copy of x (the largest input): ``.clone()``."""
    return mhc.bf16(dict(inputs, x=inputs["x"].clone()), p)


def indexer_kv_cache_copy(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with one extra full copy of the KV cache (the largest input): ``.clone()``."""
    return indexer.bf16(dict(inputs, kv_cache=inputs["kv_cache"].clone()), p)


def mhc_x_cat_streams(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that rebuilds x from its n streams with ``torch.cat``: a full copy of x,
    bit for bit the same (a data-movement copy: no ``.clone()`` in sight)."""
    x = inputs["x"]
    rebuilt = torch.cat([x[:, i] for i in range(x.shape[1])], dim=-1)  # the copy
    return mhc.bf16(dict(inputs, x=rebuilt.view(x.shape)), p)


def mhc_x_flip_twice(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that reverses the stream order of x and reverses it back: two flips, x
    unchanged, one extra full pass over it (and a second over the first flip)."""
    return mhc.bf16(dict(inputs, x=inputs["x"].flip(1).flip(1)), p)  # the copy


def mhc_x_where_finite(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that "sanitises" x with ``torch.where(isfinite(x), x, 0)``: x has no
    non-finite element, so the result is a full copy of x."""
    x = inputs["x"]
    return mhc.bf16(dict(inputs, x=torch.where(torch.isfinite(x), x, 0)), p)  # the copy


def mhc_hc_fn_gather(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that gathers every row of hc_fn (``index_select`` of all rows) before its
    cast: a full copy of the weight on every call."""
    w = inputs["hc_fn"]
    rows = torch.arange(w.shape[0], device=w.device)
    return mhc.bf16(dict(inputs, hc_fn=w.index_select(0, rows)), p)  # the copy


def indexer_kv_cache_gather(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that gathers every page of the KV cache (``index_select`` of all pages):
    a full extra copy of the cache, bit for bit the same."""
    cache = inputs["kv_cache"]
    pages = torch.arange(cache.shape[0], device=cache.device)
    return indexer.bf16(dict(inputs, kv_cache=cache.index_select(0, pages)), p)  # the copy


def indexer_kv_cache_cat(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that reassembles the KV cache from two halves with ``torch.cat``."""
    cache = inputs["kv_cache"]
    return indexer.bf16(dict(inputs, kv_cache=torch.cat(cache.chunk(2))), p)  # the copy


def indexer_kv_cache_pad(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that pads the KV cache with one zero page (to a tile multiple, say) and
    hands on a slice without it: the slice is a view, the pad a full copy of the cache."""
    cache = inputs["kv_cache"]
    padded = torch.nn.functional.pad(cache, (0, 0, 0, 0, 0, 0, 0, 1))  # the copy
    return indexer.bf16(dict(inputs, kv_cache=padded[: cache.shape[0]]), p)


def indexer_q_repeat(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that expands q for MTP rows with ``repeat`` (once: no expansion at all), a
    full extra copy of q before its cast."""
    return indexer.bf16(dict(inputs, q=inputs["q"].repeat(1, 1, 1, 1)), p)  # the copy


def indexer_kt_contiguous(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that makes K^T contiguous before the GEMM: one extra copy of the operand."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    return indexer._outputs(torch.bmm(q, kt.contiguous()), inputs, k_scale, p)


def mhc_nan_one_row(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with one NaN in the last row of y (outside a sampled golden's positions)."""
    out = mhc.bf16(inputs, p)
    y = out["y"].clone()
    y[-1, -1] = float("nan")
    return {**out, "y": y}


def mhc_sinkhorn_early(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path whose Sinkhorn stops after 5 of 20 iterations: converged rows barely move,
    slow rows (a few tokens) keep errors of 1e-2 and more: a concentrated error."""
    return mhc.bf16(inputs, dict(p, sinkhorn_iters=min(EARLY_ITERS, p["sinkhorn_iters"])))


#: Sinkhorn iterations left by the early stop.
EARLY_ITERS = 5


def mhc_sinkhorn_row_last(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path whose Sinkhorn normalises in the other order (columns then rows, ending on
    rows). Sinkhorn scaling of a positive matrix has one fixed point, so converged tokens
    agree to fp32 rounding; a token still converging after 20 iterations does not."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    m = (x @ inputs["hc_fn"].to(torch.bfloat16).T).float() * mhc._rms_inv(xf, p["eps"])
    out = mhc._epilogue(m, xf, inputs, p)
    n, eps = p["hc_mult"], p["eps"]
    t = m.shape[0]
    scale, base = inputs["hc_scale"], inputs["hc_base"]
    logits = (m[:, 2 * n :] * scale[2] + base[2 * n :]).view(t, n, n)
    comb = torch.softmax(logits, dim=-1) + eps
    for _ in range(p["sinkhorn_iters"]):
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
    return {**out, "comb": comb}


def mhc_token_rms_swapped(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path where the last two tokens take each other's RMS statistic (a tile-edge
    indexing slip): every output of two tokens is off, the rest exact."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    r = mhc._rms_inv(xf, p["eps"]).clone()
    r[[-1, -2]] = r[[-2, -1]]
    m = (x @ inputs["hc_fn"].to(torch.bfloat16).T).float() * r
    return mhc._epilogue(m, xf, inputs, p)


#: How far beyond the honest bf16 worst error the single wrong element is put.
ONE_ELEMENT_FACTOR = 8.0


def _worst_bf16_error(ref: torch.Tensor, honest: torch.Tensor) -> float:
    finite = torch.isfinite(ref) & torch.isfinite(honest)
    return float((honest.double() - ref.double()).abs()[finite].max())


def mhc_one_element_8x(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with one element of mixes off by 8x the bf16 path's own worst error on the
    same inputs (a single wrong element a frac_outside allowance would let through)."""
    out = mhc.bf16(inputs, p)
    worst = _worst_bf16_error(mhc.fp32(inputs, p)["mixes"], out["mixes"])
    mixes = out["mixes"].clone()
    mixes[0, 0] += ONE_ELEMENT_FACTOR * worst
    return {**out, "mixes": mixes}


def indexer_one_element_8x(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with one valid, unselected logit off by 8x the bf16 path's own worst logit
    error on the same inputs; the selection is left as the bf16 path made it."""
    out = indexer.bf16(inputs, p)
    worst = _worst_bf16_error(indexer.fp32(inputs, p)["logits"], out["logits"])
    logits = out["logits"].clone()
    row = logits[0]
    finite = torch.isfinite(row).nonzero().flatten()
    lowest = finite[row[finite].argmin()]
    logits[0, lowest] -= ONE_ELEMENT_FACTOR * worst
    return {"logits": logits, "topk": out["topk"]}


def indexer_page_scale_slip(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path reading the kv scales of request 0's second page one token off (a few
    wrong tokens: 64 logits scaled by their neighbour's scale)."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    bs = inputs["kv_cache"].shape[1]
    k_scale = k_scale.clone()
    k_scale[0, bs : 2 * bs] = torch.roll(k_scale[0, bs : 2 * bs], 1)
    return indexer._outputs(torch.bmm(q, kt), inputs, k_scale, p)


def mhc_extra_bf16_rounding(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that rounds the mixes to bf16 once more after the RMS scale: one more
    bf16 rounding, as large as bf16's own error (no budget can see it)."""
    x = inputs["x"].flatten(1)
    xf = x.float()
    m = (x @ inputs["hc_fn"].to(torch.bfloat16).T).float() * mhc._rms_inv(xf, p["eps"])
    return mhc._epilogue(m.to(torch.bfloat16).float(), xf, inputs, p)


def indexer_extra_bf16_rounding(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that rounds each weighted head score to bf16 once more: one more bf16
    rounding on top of the scores' own (no budget can see it)."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    b, n, h = inputs["q"].shape[:3]
    scores = torch.bmm(q, kt).float()
    length = scores.shape[-1]
    s = scores.relu().view(b, n, h, length)
    weighted = (s * inputs["weights"].view(b, n, h, 1)).to(torch.bfloat16).float()
    logits = weighted.sum(dim=2) * k_scale.view(b, 1, length)
    mask = indexer.valid_mask(inputs["context_lens"], n, length)
    logits = logits.masked_fill(~mask, float("-inf")).view(b * n, length)
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


def indexer_wrong_shape(inputs: Inputs, p: Params) -> Outputs:
    out = indexer.fp32(inputs, p)
    out["logits"] = out["logits"][:, :-1]
    return out


def indexer_wrong_dtype(inputs: Inputs, p: Params) -> Outputs:
    out = indexer.fp32(inputs, p)
    out["logits"] = out["logits"].double()
    return out


def indexer_wrong_device(inputs: Inputs, p: Params) -> Outputs:
    """Outputs on the 'meta' device: the wrong device, even on a CPU-only machine."""
    out = indexer.fp32(inputs, p)
    return {k: torch.empty_like(v, device="meta") for k, v in out.items()}


def indexer_inf_one_row(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with one +inf logit in row 0 (a valid position)."""
    out = indexer.bf16(inputs, p)
    logits = out["logits"].clone()
    finite = torch.isfinite(logits[0]).nonzero().flatten()
    logits[0, finite[-1]] = float("inf")
    return {"logits": logits, "topk": out["topk"]}


def indexer_zero_masked(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that returns 0.0 (not -inf) at invalid positions, as some serving fallbacks
    do before masking again inside their top-k: breaks the op's masking contract."""
    out = indexer.bf16(inputs, p)
    logits = out["logits"]
    return {"logits": torch.where(torch.isneginf(logits), 0.0, logits), "topk": out["topk"]}


def indexer_raises(inputs: Inputs, p: Params) -> Outputs:
    raise RuntimeError("planted failure inside the variant")


PLANTED = {
    "indexer": {
        "no_kv_scale": (indexer_no_kv_scale, "fp32"),
        "mask_off_by_one": (indexer_mask_off_by_one, "fp32"),
        "far_flips": (indexer_far_flips, "fp32"),
        "near_flips": (indexer_near_flips, "fp32"),
        "page_dropped": (indexer_page_dropped, "bf16"),
        "heads_before_relu": (indexer_heads_before_relu, "bf16"),
        "transposed_weights": (indexer_transposed_weights, "bf16"),
        "nan_one_row": (indexer_nan_one_row, "bf16"),
        "inf_one_row": (indexer_inf_one_row, "bf16"),
        "wrong_shape": (indexer_wrong_shape, "fp32"),
        "wrong_dtype": (indexer_wrong_dtype, "fp32"),
        "wrong_device": (indexer_wrong_device, "fp32"),
        "raises": (indexer_raises, "fp32"),
        "one_element_8x": (indexer_one_element_8x, "bf16"),
        "page_scale_slip": (indexer_page_scale_slip, "bf16"),
        "extra_bf16_rounding": (indexer_extra_bf16_rounding, "bf16"),
        "kv_cache_copy": (indexer_kv_cache_copy, "bf16"),
        "zero_masked": (indexer_zero_masked, "bf16"),
        "kt_contiguous": (indexer_kt_contiguous, "bf16"),
        "kv_cache_gather": (indexer_kv_cache_gather, "bf16"),
        "kv_cache_cat": (indexer_kv_cache_cat, "bf16"),
        "kv_cache_pad": (indexer_kv_cache_pad, "bf16"),
        "q_repeat": (indexer_q_repeat, "bf16"),
    },
    "mhc_pre": {
        "y_scaled": (mhc_y_scaled, "fp32"),
        "y_seed_dependent": (mhc_y_seed_dependent, "bf16"),
        "slowed": (mhc_slowed, "fp32"),
        "bf16_accumulation": (mhc_bf16_accumulation, "bf16"),
        "rms_eps_x1000": (mhc_rms_eps_x1000, "tf32"),
        "sinkhorn_cut": (mhc_sinkhorn_cut, "bf16"),
        "roundtrip_cast": (mhc_roundtrip_cast, "bf16"),
        "nan_one_row": (mhc_nan_one_row, "bf16"),
        "sinkhorn_early": (mhc_sinkhorn_early, "bf16"),
        "sinkhorn_row_last": (mhc_sinkhorn_row_last, "bf16"),
        "token_rms_swapped": (mhc_token_rms_swapped, "bf16"),
        "one_element_8x": (mhc_one_element_8x, "bf16"),
        "extra_bf16_rounding": (mhc_extra_bf16_rounding, "bf16"),
        "roundtrip_by_value": (mhc_roundtrip_by_value, "bf16"),
        "x_copy": (mhc_x_copy, "bf16"),
        "x_cat_streams": (mhc_x_cat_streams, "bf16"),
        "x_flip_twice": (mhc_x_flip_twice, "bf16"),
        "x_where_finite": (mhc_x_where_finite, "bf16"),
        "hc_fn_gather": (mhc_hc_fn_gather, "bf16"),
    },
}

#: Planted copies made by data-movement ops (no ``.clone()``): each is a full extra pass
#: over the input named, with outputs bit for bit those of the bf16 path, and must fail
#: ``casts.input_copies`` on every shipped case of its op (tests/test_copy_budgets.py).
DATA_MOVEMENT_COPIES = {
    "mhc_pre": {"x_cat_streams": "x", "x_flip_twice": "x", "x_where_finite": "x",
                "hc_fn_gather": "hc_fn"},
    "indexer": {"kv_cache_gather": "kv_cache", "kv_cache_cat": "kv_cache",
                "kv_cache_pad": "kv_cache", "q_repeat": "q"},
}

#: Planted variants that are not bugs: the gate must let them pass.
BENIGN = {("indexer", "near_flips")}

#: The bugs of the self-test, with the shipped variant whose
#: budget each is held to: the loosest budget a real variant of that kind would get (bf16),
#: except where the bug lives in the fp32 / TF32 path (docs/reliability.md says why).
SELF_TEST = [
    ("indexer", "no_kv_scale", "bf16"),  # wrong kv scale
    ("mhc_pre", "bf16_accumulation", "bf16"),
    ("indexer", "mask_off_by_one", "bf16"),
    ("indexer", "page_dropped", "bf16"),
    ("indexer", "heads_before_relu", "bf16"),
    ("indexer", "transposed_weights", "bf16"),
    ("mhc_pre", "rms_eps_x1000", "tf32"),
    ("mhc_pre", "sinkhorn_cut", "bf16"),
    ("indexer", "nan_one_row", "bf16"),
    ("mhc_pre", "roundtrip_cast", "bf16"),  # exact: only the cast ledger sees it
    # Earlier planted bugs, kept in the self-test.
    ("indexer", "far_flips", "bf16"),
    ("mhc_pre", "y_scaled", "bf16"),
    ("mhc_pre", "nan_one_row", "bf16"),
    ("indexer", "inf_one_row", "bf16"),
    ("indexer", "wrong_shape", "bf16"),
    ("indexer", "wrong_dtype", "bf16"),
    ("indexer", "wrong_device", "bf16"),
    ("indexer", "raises", "bf16"),
    # Concentrated errors and single wrong elements (element-level budgets).
    ("mhc_pre", "sinkhorn_early", "bf16"),
    ("mhc_pre", "token_rms_swapped", "bf16"),
    ("mhc_pre", "one_element_8x", "bf16"),
    ("indexer", "one_element_8x", "bf16"),
    ("indexer", "page_scale_slip", "bf16"),
    # One more bf16 rounding: as large as bf16's own error, no budget can see it.
    ("mhc_pre", "extra_bf16_rounding", "bf16"),
    ("indexer", "extra_bf16_rounding", "bf16"),
    # The Sinkhorn order swapped: visible only on tokens that have not converged in 20 steps.
    ("mhc_pre", "sinkhorn_row_last", "bf16"),
    # Exact, so only the cast ledger sees them: an extra full copy of the largest input, and
    # a round trip through an exact op (docs/overhead.md).
    ("indexer", "zero_masked", "bf16"),
    ("indexer", "kv_cache_copy", "bf16"),
    ("indexer", "kt_contiguous", "bf16"),
    ("mhc_pre", "x_copy", "bf16"),
    ("mhc_pre", "roundtrip_by_value", "bf16"),
]

#: The kind of each planted bug: docs/reliability.md gives the catch rate per kind.
KINDS = {
    "no_kv_scale": "wrong scale",
    "y_scaled": "wrong scale",
    "rms_eps_x1000": "wrong constant",
    "bf16_accumulation": "accumulation precision",
    "mask_off_by_one": "mask",
    "inf_one_row": "non-finite",
    "nan_one_row": "non-finite",
    "page_dropped": "indexing",
    "transposed_weights": "indexing",
    "heads_before_relu": "order of operations",
    "far_flips": "selection",
    "sinkhorn_cut": "iteration stopped early",
    "sinkhorn_early": "concentrated (few tokens)",
    "token_rms_swapped": "concentrated (few tokens)",
    "page_scale_slip": "concentrated (few tokens)",
    "one_element_8x": "single wrong element",
    "extra_bf16_rounding": "one more rounding",
    "sinkhorn_row_last": "concentrated (few tokens)",
    "roundtrip_cast": "cast (not numeric)",
    "roundtrip_by_value": "cast (not numeric)",
    "x_copy": "copy (not numeric)",
    "kv_cache_copy": "copy (not numeric)",
    "kt_contiguous": "copy (not numeric)",
    "x_cat_streams": "copy (not numeric)",
    "x_flip_twice": "copy (not numeric)",
    "x_where_finite": "copy (not numeric)",
    "hc_fn_gather": "copy (not numeric)",
    "kv_cache_gather": "copy (not numeric)",
    "kv_cache_cat": "copy (not numeric)",
    "kv_cache_pad": "copy (not numeric)",
    "q_repeat": "copy (not numeric)",
    "zero_masked": "masking contract",
    "wrong_shape": "contract",
    "wrong_dtype": "contract",
    "wrong_device": "contract",
    "raises": "contract",
}

#: Planted bugs whose error is as large as an honest variant's on the same inputs: no
#: numerics budget can fail them without failing an honest variant (docs/reliability.md).
INDISTINGUISHABLE = {
    ("mhc_pre", "extra_bf16_rounding"): "one more bf16 rounding of the mixes",
    ("indexer", "extra_bf16_rounding"): "one more bf16 rounding of each weighted score",
}

#: Planted bugs whose error depends on the inputs: large on some seeds, within rounding on
#: others. The self-test does not demand them caught on every case; docs/reliability.md
#: gives their catch rate and own error.
SEED_DEPENDENT = {
    ("mhc_pre", "sinkhorn_row_last"): "Sinkhorn scaling has one fixed point: only tokens "
    "that have not converged in 20 iterations show the order",
}

#: Planted bugs no numerics budget can see, with the gate that catches them instead.
NOT_NUMERIC = {
    ("mhc_pre", "roundtrip_cast"): "caught by the cast ledger",
    ("mhc_pre", "roundtrip_by_value"): "caught by the cast ledger, by value",
    ("mhc_pre", "x_copy"): "caught by the cast ledger: a second pass over x (input_copies)",
    ("indexer", "kv_cache_copy"): "caught by the cast ledger: a second pass over the cache",
    ("indexer", "kt_contiguous"): "caught by the cast ledger's bytes (max_cast_bytes_ratio)",
}


def register_all() -> None:
    """Add every planted variant to its op (inside ``registry.isolated()`` in tests)."""
    register_table(PLANTED)

# --- tf32-class bugs (issue 29): each claims TF32 and rounds like something coarser ---------
# Held to the shipped tf32 budgets. The tf32 class's honest family and rounding envelope hold
# TF32 with operands rounded to nearest and truncated (numcheck.honest.gemm_impls), emulated
# bit for bit on the CPU, so these are caught on a CPU too.


def _tf32_split_k_bf16_partials() -> object:
    """A split-K GEMM with TF32 operands whose four partial results are written in bf16."""
    from numcheck.honest.gemm_impls import EmulatedGemm, Recipe

    return EmulatedGemm(Recipe("tf32_rn", "split_k", parts=4, partial="bf16"))


def indexer_tf32_in_bf16(inputs: Inputs, p: Params) -> Outputs:
    """Claims tf32, computes the bf16 path: per-head scores rounded to bf16."""
    return indexer.bf16(inputs, p)


def mhc_tf32_in_bf16(inputs: Inputs, p: Params) -> Outputs:
    """Claims tf32, computes the bf16 path: hc_fn rounded to bf16, the projection written in
    bf16."""
    return mhc.bf16(inputs, p)


def indexer_tf32_splitk_bf16(inputs: Inputs, p: Params) -> Outputs:
    """TF32 score GEMM split over four slices of the head dim, each partial score stored in
    bf16 before the fp32 sum."""
    return indexer.gemm_site(inputs, p, _tf32_split_k_bf16_partials())


def mhc_tf32_splitk_bf16(inputs: Inputs, p: Params) -> Outputs:
    """TF32 projection split over four slices of K, each partial stored in bf16 before the
    fp32 sum."""
    return mhc.gemm_site(inputs, p, _tf32_split_k_bf16_partials())


def indexer_tf32_heads_bf16(inputs: Inputs, p: Params) -> Outputs:
    """TF32 scores (exact here: e4m3 operands), but the weighted head sum kept in a bf16
    accumulator: each ``w * relu(s)`` and every running sum rounded to bf16."""
    with matmul_precision(tf32=True):
        q, kt, k_scale = indexer._operands(inputs, p, torch.float32)
        scores = torch.bmm(q, kt)
    b, n, h = inputs["q"].shape[:3]
    length = scores.shape[-1]
    weighted = (scores.relu().view(b, n, h, length)
                * inputs["weights"].view(b, n, h, 1)).to(torch.bfloat16)
    acc = weighted[:, :, 0]
    for i in range(1, h):
        acc = acc + weighted[:, :, i]  # bf16 + bf16 -> bf16: the running sum in bf16
    logits = acc.float() * k_scale.view(b, 1, length)
    mask = indexer.valid_mask(inputs["context_lens"], n, length)
    logits = logits.masked_fill(~mask, float("-inf")).view(b * n, length)
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


TF32_PLANTED = {
    "indexer": {
        "tf32_in_bf16": (indexer_tf32_in_bf16, "tf32"),
        "tf32_splitk_bf16": (indexer_tf32_splitk_bf16, "tf32"),
        "tf32_heads_bf16": (indexer_tf32_heads_bf16, "tf32"),
    },
    "mhc_pre": {
        "tf32_in_bf16": (mhc_tf32_in_bf16, "tf32"),
        "tf32_splitk_bf16": (mhc_tf32_splitk_bf16, "tf32"),
    },
}
for _op, _bugs in TF32_PLANTED.items():
    PLANTED[_op].update(_bugs)
SELF_TEST += [(op, name, "tf32") for op, bugs in TF32_PLANTED.items() for name in bugs]
KINDS.update({
    "tf32_in_bf16": "precision class (computes coarser)",
    "tf32_splitk_bf16": "precision class (computes coarser)",
    "tf32_heads_bf16": "precision class (computes coarser)",
})
