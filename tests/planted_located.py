"""Planted bugs whose place in the op's structure is known: the localization must name it.

Each is a copy of a shipped variant with one mistake that sits somewhere a kernel engineer
would look: the tail page, one MTP row, a few tokens, an output written one row off, a
transposed or permuted write, a global scale. :data:`EXPECTED` pairs every planted bug used
to measure localization (these and those of ``planted.py``) with the place its failure
message must name first; ``benchmarks/reliability/localize_report.py`` measures how often it does.

Registered by tests and the benchmark only, never shipped.
"""

from __future__ import annotations

import torch

from numcheck.numerics.topk import select_topk
from numcheck.ops import indexer, mhc
from numcheck.ops.registry import Inputs, Outputs, Params
from tests.variant_tables import register_table


def _with_logits(logits: torch.Tensor, p: Params) -> Outputs:
    return {"logits": logits, "topk": select_topk(logits, p["index_topk"])}


def indexer_tail_page_scales(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path whose tail handling reads the kv scales of each request's last, partial
    page one token late (the scale of token t + 1 for token t)."""
    q, kt, k_scale = indexer._operands(inputs, p, torch.bfloat16)
    bs = p["block_size"]
    scale = k_scale.clone()
    for b, ctx in enumerate(inputs["context_lens"].tolist()):
        if ctx % bs:
            start = (ctx - 1) // bs * bs
            scale[b, start:ctx - 1] = k_scale[b, start + 1:ctx]
    return indexer._outputs(torch.bmm(q, kt), inputs, scale, p)


def indexer_mtp_row1_weights(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path where MTP row 1 of every request uses row 0's head weights (a stride bug)."""
    n = p["next_n"]
    w = inputs["weights"].clone().view(-1, n, inputs["weights"].shape[-1])
    if n > 1:
        w[:, 1] = w[:, 0]
    return indexer.bf16(dict(inputs, weights=w.view_as(inputs["weights"]).contiguous()), p)


def indexer_logits_shifted(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that writes each logit one token late (output[t + 1] = logit[t])."""
    logits = indexer.bf16(inputs, p)["logits"]
    shifted = torch.full_like(logits, float("-inf"))
    shifted[:, 1:] = logits[:, :-1]
    return _with_logits(shifted, p)


def indexer_rows_permuted(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that writes the requests' rows in reverse batch order."""
    logits = indexer.bf16(inputs, p)["logits"]
    return _with_logits(logits.flip(0).contiguous(), p)


def indexer_logits_scaled(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path with the logits 2% too large (a folded scale applied twice, in part)."""
    logits = indexer.bf16(inputs, p)["logits"] * 1.02
    return _with_logits(logits, p)


#: Tokens whose Sinkhorn the planted bug stops after one iteration: every 16th from 5.
FEW_TOKENS_STEP = 16


def mhc_comb_few_tokens(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path whose Sinkhorn stops after one iteration for every 16th token (from 5)."""
    out = mhc.bf16(inputs, p)
    short = mhc.bf16(inputs, dict(p, sinkhorn_iters=1))["comb"]
    comb = out["comb"].clone()
    picked = torch.arange(5, comb.shape[0], FEW_TOKENS_STEP)
    comb[picked] = short[picked]
    return {**out, "comb": comb}


def mhc_y_rows_shifted(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that writes y one token late (y[t + 1] = y[t]; token 0 left zero)."""
    out = mhc.bf16(inputs, p)
    y = torch.zeros_like(out["y"])
    y[1:] = out["y"][:-1]
    return {**out, "y": y}


def mhc_comb_transposed(inputs: Inputs, p: Params) -> Outputs:
    """bf16 path that stores each token's comb matrix transposed."""
    out = mhc.bf16(inputs, p)
    return {**out, "comb": out["comb"].transpose(1, 2).contiguous()}


LOCATED = {
    "indexer": {
        "tail_page_scales": indexer_tail_page_scales,
        "mtp_row1_weights": indexer_mtp_row1_weights,
        "logits_shifted": indexer_logits_shifted,
        "rows_permuted": indexer_rows_permuted,
        "logits_scaled": indexer_logits_scaled,
    },
    "mhc_pre": {
        "comb_few_tokens": mhc_comb_few_tokens,
        "y_rows_shifted": mhc_y_rows_shifted,
        "comb_transposed": mhc_comb_transposed,
    },
}

#: (op, planted variant, held to) -> a regular expression the first localization line of its
#: failure must match (``re.search``): the place, in the words of the message. Bugs that sit
#: everywhere expect "no concentration". ``far_flips`` is left out: its flips sit at each row's
#: k-th and lowest-scoring tokens, a place in the scores, not in the op's structure.
EXPECTED: dict[tuple[str, str, str], str] = {
    # planted_located.py
    ("indexer", "tail_page_scales", "bf16"): r"^logits: .*the last, partial page of each request",
    ("indexer", "mtp_row1_weights", "bf16"): r"^logits: only MTP row 1 of each request is wrong",
    ("indexer", "logits_shifted", "bf16"): r"^logits: matches the golden shifted by one token",
    ("indexer", "rows_permuted", "bf16"): r"^logits: its rows are permuted",
    ("indexer", "logits_scaled", "bf16"): r"^logits: a global scale",
    ("mhc_pre", "comb_few_tokens", "bf16"): r"^comb: .*(\b\d+ of \d+ tokens\b|in token 5\b)",
    ("mhc_pre", "y_rows_shifted", "bf16"): r"^y: matches the golden shifted by one token",
    ("mhc_pre", "comb_transposed", "bf16"): r"^comb: .*comb row and comb column axes transposed",
    # planted.py
    ("indexer", "mask_off_by_one", "bf16"):
        r"^logits: .*the first masked position after each row's last valid token",
    ("indexer", "page_dropped", "bf16"): r"^logits: .*\brequest 0\b",
    ("indexer", "nan_one_row", "bf16"): r"^logits: 1 NaN/inf mismatch, at index \(0, ",
    ("indexer", "inf_one_row", "bf16"): r"^logits: 1 NaN/inf mismatch, at index \(0, ",
    ("indexer", "no_kv_scale", "bf16"): r"no concentration",
    ("indexer", "heads_before_relu", "bf16"): r"no concentration",
    ("indexer", "transposed_weights", "bf16"): r"no concentration",
    ("mhc_pre", "y_scaled", "bf16"): r"^y: a global scale",
    ("mhc_pre", "nan_one_row", "bf16"): r"^y: 1 NaN/inf mismatch, at index \(\d+, \d+\)$",
    ("mhc_pre", "bf16_accumulation", "bf16"): r"no concentration",
    # Errors of about 0.03 on a few tokens: localized along tokens.
    ("mhc_pre", "sinkhorn_cut", "bf16"): r"^comb: .*\b\d+ of \d+ tokens\b",
    # eps matters where a token's RMS is small: a few tokens.
    ("mhc_pre", "rms_eps_x1000", "tf32"): r"^mixes: .*\b\d+ of \d+ tokens\b",
}


def register_all() -> None:
    """Add every located bug to its op (inside ``registry.isolated()`` in tests)."""
    register_table({op: {name: (fn, "bf16") for name, fn in variants.items()}
                    for op, variants in LOCATED.items()})