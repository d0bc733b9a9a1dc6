"""Messages for non-finite mismatches: overflow (with the dtype), the masking contract, and
NaN shown as nan in the summary columns."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from numcheck.numerics.nonfinite import explain, masked_zero_message, overflow_message
from numcheck.numerics.verdict import Violation
from tests.test_bad_inputs import _variant_fails, tiny_golden  # noqa: F401  (a fixture)

NAN_DETAIL = "1 NaN in the output, 0 in the golden"


def test_fp16_overflow_says_overflow_and_names_the_dtype() -> None:
    expected = torch.tensor([1.0, 70000.0, -3.0, 66000.0])
    actual = expected.to(torch.float16)  # 70000 and 66000 are beyond fp16: inf
    assert overflow_message(actual, expected, (torch.float16,)) == (
        "overflow? 2 non-finite where the golden is finite, up to |7e+04|: near fp16's range "
        "(fp16 max 65504)"
    )
    v = Violation("y", "inf_mask", 2, 0, detail="the +/-inf pattern must match")
    text = explain(v, actual, expected, precision="fp16").detail
    assert text.startswith("overflow? 2 non-finite") and text.endswith("must match")


def test_nan_from_an_overflowed_intermediate_names_the_compute_dtype() -> None:
    # The output is fp32, but the variant computes in bf16/fp16: inf - inf = NaN upstream.
    expected = torch.tensor([1.0, 5.0e4, 2.0])
    actual = torch.tensor([1.0, math.nan, 2.0])
    v = Violation("y", "nan", 1, 0, detail=NAN_DETAIL)
    assert "fp16 max 65504" in explain(v, actual, expected, precision="fp16").detail
    # Far from every candidate range: no guess, the plain message stays.
    assert explain(v, actual, expected, precision="bf16").detail == NAN_DETAIL


def test_no_overflow_guess_where_the_golden_is_small_or_not_finite() -> None:
    expected = torch.tensor([1.0, -math.inf, 3.0])
    actual = torch.tensor([math.inf, math.inf, 3.0])
    assert overflow_message(actual, expected, (torch.float16,)) is None
    other = Violation("y", "rel_fro", 1.0, 0.1)
    assert explain(other, actual, expected, precision="fp16") is other


def test_zero_at_masked_positions_names_the_contract() -> None:
    expected = torch.tensor([[1.0, -math.inf, -math.inf], [2.0, 3.0, -math.inf]])
    actual = torch.where(torch.isneginf(expected), 0.0, expected)
    v = Violation("logits", "inf_mask", 3, 0, detail="the +/-inf pattern must match")
    assert explain(v, actual, expected).detail == (
        f"{masked_zero_message(3)}; the +/-inf pattern must match"
    )
    assert masked_zero_message(3) == (
        "3 invalid positions hold 0.0 instead of -inf: the op's contract is -inf at masked "
        "positions; mask before returning, e.g. logits.masked_fill(~valid, float('-inf')) "
        "(see docs/extending.md, 'Masked positions')"
    )


def test_variant_returning_zero_at_invalid_positions_fails_with_the_contract(
    pytester: pytest.Pytester, tiny_golden: Path
) -> None:
    _variant_fails(pytester, tiny_golden, "zero_masked").stdout.fnmatch_lines([
        "numcheck FAIL indexer::tiny::zero_masked[[]cpu[]]",
        ("*logits.inf_mask = * > budget 0 *(seed 0): * invalid positions hold 0.0 instead of "
         "-inf: the op's contract is -inf at masked positions; mask before returning, e.g. "
         "logits.masked_fill(~valid, float('-inf')) (see docs/extending.md, 'Masked "
         "positions'); the +/-inf pattern*"),
    ])


def test_nan_output_shows_nan_in_the_summary_columns(
    pytester: pytest.Pytester, tiny_golden: Path
) -> None:
    result = _variant_fails(pytester, tiny_golden, "nan_one_row")
    result.stdout.fnmatch_lines(["indexer::tiny  nan_one_row  cpu  *  nan  *nan  *FAIL"])
