"""Ordinary tests of our kernel, with ad-hoc goldens from the numcheck_golden fixture.

``pytest`` checks them; ``pytest --numcheck-regen`` (re)writes their goldens under
checks/goldens/_tests/ from the FP32 reference functions.
"""

from __future__ import annotations

import torch
from my_kernels.paged_indexer import paged_mqa_logits

import numcheck

PARAMS = {"batch": 2, "next_n": 1, "heads": 8, "head_dim": 32, "block_size": 64,
          "max_context": 256, "min_context": 0, "index_topk": 32, "shuffle_pages": True,
          "near_ties": 0.0}


def make_inputs() -> dict[str, torch.Tensor]:
    # numcheck's own indexer inputs: the public paged layout, seeded, the same everywhere.
    return numcheck.get_op("indexer").make_inputs(PARAMS, 0)


def logits(inputs: dict[str, torch.Tensor], score_dtype: torch.dtype) -> torch.Tensor:
    with numcheck.matmul_precision(tf32=False):  # an fp32 reference must not use TF32
        return paged_mqa_logits(inputs["q"], inputs["kv_cache"], inputs["weights"],
                                inputs["context_lens"], inputs["block_table"],
                                PARAMS["max_context"], score_dtype=score_dtype)


def test_bf16_logits_and_selection(numcheck_golden: numcheck.GoldenCheck) -> None:
    inputs = make_inputs()
    ours = logits(inputs, torch.bfloat16)
    numcheck_golden.check(ours, reference_fn=lambda: logits(inputs, torch.float32),
                          budget={"rel_fro": 4e-3, "calc_diff": 4e-6}, precision="bf16",
                          name="logits", inputs=inputs)
    numcheck_golden.check_topk(numcheck.select_topk(ours, PARAMS["index_topk"]),
                               reference_fn=lambda: logits(inputs, torch.float32),
                               budget={"tie_recall_min": 1.0, "tie_band_rel": 2.5e-3},
                               name="topk", inputs=inputs)
