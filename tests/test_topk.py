"""numcheck.numerics.topk on hand-built rows whose answers are worked out in each test."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import torch

from numcheck.numerics.topk import TOPK_METRIC_NAMES, Flip, TopkReport, select_topk, topk_agreement

INF = math.inf
# Scores used by most single-row tests: golden top-3 is tokens 0, 1, 2 and kth = 4.
SCORES = [8.0, 6.0, 4.0, 3.75, 1.0]


def idx(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int32)


def sc(rows: Any) -> torch.Tensor:  # nested lists of int/float
    return torch.tensor(rows, dtype=torch.float32)


def agree(
    golden: list[list[int]],
    variant: list[list[int]],
    scores: Any,
    *,
    band: float = 0.5,
    band_kind: str = "abs",
    max_flips: int = 20,
) -> TopkReport:
    return topk_agreement(
        idx(golden), idx(variant), sc(scores), band=band, band_kind=band_kind, max_flips=max_flips
    )


# --- agreement ----------------------------------------------------------------------------


def test_identical_selection_order_does_not_matter() -> None:
    r = agree([[0, 1, 2]], [[2, 0, 1]], [SCORES])
    assert r.rows == 1
    assert r.k == (3,)
    assert r.recall == (1.0,) and r.tie_recall == (1.0,)
    assert (r.recall_mean, r.recall_min, r.worst_row) == (1.0, 1.0, 0)
    assert (r.tie_recall_mean, r.tie_recall_min, r.tie_worst_row) == (1.0, 1.0, 0)
    assert (r.n_flips, r.n_unexplained, r.rows_with_flips) == (0, 0, 0)
    assert r.unexplained == ()
    assert (r.band, r.band_kind) == (0.5, "abs")


def test_near_tie_swap_inside_band_is_benign() -> None:
    # Token 2 (score 4 = kth, margin 0) out, token 3 (3.75, margin -0.25) in; band 0.5.
    r = agree([[0, 1, 2]], [[0, 1, 3]], [SCORES])
    assert r.recall == (pytest.approx(2 / 3),)
    assert r.tie_recall == (1.0,)
    assert (r.n_flips, r.n_unexplained, r.rows_with_flips) == (2, 0, 1)
    assert r.unexplained == ()


def test_far_swap_in_is_unexplained_with_its_numbers() -> None:
    # Token 4 (score 1) comes in: margin 1 - 4 = -3, far outside the 0.5 band. Token 2 goes
    # out at margin 0 (explained), but a one-sided explanation earns no tie credit.
    r = agree([[0, 1, 2]], [[0, 1, 4]], [SCORES])
    assert r.recall == (pytest.approx(2 / 3),)
    assert r.tie_recall == (pytest.approx(2 / 3),)  # (2 + min(1, 0)) / 3
    assert (r.n_flips, r.n_unexplained) == (2, 1)
    assert r.unexplained == (
        Flip(
            row=0,
            token=4,
            direction="in",
            golden_score=1.0,
            kth_score=4.0,
            margin=-3.0,
            explained=False,
        ),
    )


def test_far_swap_out_is_unexplained_with_its_numbers() -> None:
    # Token 0 (the best, score 8) dropped: margin 8 - 4 = +4. Token 3 in is a near-tie.
    r = agree([[0, 1, 2]], [[1, 2, 3]], [SCORES])
    assert r.tie_recall == (pytest.approx(2 / 3),)  # (2 + min(0, 1)) / 3
    assert r.n_unexplained == 1
    (flip,) = r.unexplained
    assert (flip.row, flip.token, flip.direction) == (0, 0, "out")
    assert (flip.golden_score, flip.kth_score, flip.margin) == (8.0, 4.0, 4.0)
    assert flip.explained is False


# --- bands --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "band, band_kind, explained",
    [
        (0.25, "abs", True),  # |margin| = 0.25 <= 0.25: the edge is inside
        (0.2, "abs", False),
        (0.03125, "rel", True),  # tol = 0.03125 * 8 (row's largest |score|) = 0.25
        (0.025, "rel", False),  # tol = 0.2
        (0.25, "rel", True),  # tol = 2.0
    ],
)
def test_rel_and_abs_bands(band: float, band_kind: str, explained: bool) -> None:
    r = agree([[0, 1, 2]], [[0, 1, 3]], [SCORES], band=band, band_kind=band_kind)
    assert r.n_unexplained == (0 if explained else 1)
    assert r.tie_recall == ((1.0,) if explained else (pytest.approx(2 / 3),))
    assert (r.band, r.band_kind) == (band, band_kind)


def test_rel_band_uses_magnitude_of_negative_scores() -> None:
    # Largest |score| is |-8| = 8: rel 0.03125 gives tol 0.25 (not -0.25); token 3 at -4.25
    # is 0.25 from kth = -4.
    r = agree([[0, 1, 2]], [[0, 1, 3]], [[-1, -2, -4, -4.25, -8]], band=0.03125, band_kind="rel")
    assert r.n_unexplained == 0
    assert r.tie_recall == (1.0,)


def test_rel_band_is_relative_to_row_scale_not_to_kth() -> None:
    # kth = 0.001 is near zero; the swap to -0.05 is a near-tie at the row's scale (10):
    # tol = 0.01 * 10 = 0.1 explains it, where a band relative to |kth| would be 1e-5.
    r = agree([[0, 1, 2]], [[0, 1, 3]], [[4, 2, 0.001, -0.05, -10]], band=0.01, band_kind="rel")
    assert r.n_unexplained == 0
    r = agree([[0, 1, 2]], [[0, 1, 3]], [[4, 2, 0.001, -0.5, -10]], band=0.01, band_kind="rel")
    assert r.n_unexplained == 1  # token 3 (margin -0.501) is not; token 2 (the kth) is
    assert r.unexplained[0].token == 3


@pytest.mark.parametrize("band_kind", ["abs", "rel"])
def test_exact_ties_with_zero_band(band_kind: str) -> None:
    # Tokens 2 and 3 both score exactly kth = 4: either choice is right.
    r = agree([[0, 1, 2]], [[0, 1, 3]], [[8, 6, 4, 4, 1]], band=0.0, band_kind=band_kind)
    assert r.recall == (pytest.approx(2 / 3),)
    assert r.tie_recall == (1.0,)
    assert r.n_unexplained == 0


def test_zero_band_does_not_explain_a_near_tie() -> None:
    r = agree([[0, 1, 2]], [[0, 1, 3]], [SCORES], band=0.0)
    assert r.n_unexplained == 1
    assert r.unexplained[0].token == 3


def test_tie_credit_is_min_of_explained_out_and_in() -> None:
    # Five tied tokens at kth = 4, golden took 2, 3, 4; variant took 5, 6 instead of 3, 4 and
    # also dropped 2 for 7 (score 0, far): explained out {2, 3, 4} = 3, explained in {5, 6} = 2.
    scores = [[9, 8, 4, 4, 4, 4, 4, 0]]
    r = agree([[0, 1, 2, 3, 4]], [[0, 1, 5, 6, 7]], scores)
    assert r.recall == (pytest.approx(2 / 5),)
    assert r.tie_recall == (pytest.approx((2 + 2) / 5),)
    assert (r.n_flips, r.n_unexplained) == (6, 1)
    assert r.unexplained[0].token == 7


# --- padding, masking, duplicates ---------------------------------------------------------


def test_neg_inf_tail_and_k_larger_than_valid_length() -> None:
    scores = sc([[5, 3, 1, -INF, -INF, -INF]])
    golden = select_topk(scores, 4)
    assert golden.tolist() == [[0, 1, 2, -1]]
    r = topk_agreement(golden, idx([[1, 0, 2, -1]]), scores, band=0.0)
    assert r.k == (3,)
    assert r.recall == (1.0,)
    assert r.n_flips == 0


def test_all_masked_row_is_empty_and_perfect() -> None:
    scores = sc([[-INF, -INF, -INF], [3, 2, 1]])
    golden = select_topk(scores, 2)
    assert golden.tolist() == [[-1, -1], [0, 1]]
    r = topk_agreement(golden, golden.clone(), scores, band=0.0)
    assert r.k == (0, 2)
    assert r.recall == (1.0, 1.0) and r.tie_recall == (1.0, 1.0)
    assert r.n_flips == 0


def test_duplicate_variant_indices_count_once() -> None:
    # Variant lists token 2 twice and misses token 1: a set {0, 2}, recall 2/3, not 3/3.
    r = agree([[0, 1, 2]], [[0, 2, 2]], [SCORES])
    assert r.recall == (pytest.approx(2 / 3),)
    assert r.n_flips == 1
    (flip,) = r.unexplained  # token 1 out, margin 6 - 4 = 2
    assert (flip.token, flip.direction, flip.margin) == (1, "out", 2.0)


def test_padding_anywhere_is_ignored_and_widths_may_differ() -> None:
    r = agree([[0, -1, 1, 2]], [[-1, 2, 1, 0, -1]], [SCORES])
    assert r.k == (3,)
    assert r.recall == (1.0,)


def test_variant_selecting_a_masked_token_extra() -> None:
    # |V| = 4 > |G| = 3: every golden token is there (recall 1) but token 3 is masked.
    scores = [[5, 3, 1, -INF, -INF]]
    r = agree([[0, 1, 2, -1]], [[0, 1, 2, 3]], scores, band=INF)
    assert r.recall == (1.0,) and r.tie_recall == (1.0,)
    assert (r.n_flips, r.n_unexplained, r.rows_with_flips) == (1, 1, 1)
    (flip,) = r.unexplained
    assert (flip.token, flip.direction) == (3, "in")
    assert (flip.golden_score, flip.kth_score, flip.margin) == (-INF, 1.0, -INF)


def test_variant_swapping_in_a_masked_token_is_never_explained() -> None:
    # Even an infinite band does not explain a -inf token; token 2 out (margin 0) is.
    scores = [[5, 3, 1, -INF, -INF]]
    r = agree([[0, 1, 2, -1]], [[0, 1, 3, -1]], scores, band=INF)
    assert r.recall == (pytest.approx(2 / 3),)
    assert r.tie_recall == (pytest.approx(2 / 3),)
    assert r.n_unexplained == 1
    assert r.unexplained[0].token == 3


def test_variant_selecting_when_golden_selected_nothing() -> None:
    r = agree([[-1, -1]], [[0, -1]], [[-INF, -INF]])
    assert r.k == (0,)
    assert r.recall == (1.0,)  # |G| = 0
    assert r.n_unexplained == 1
    (flip,) = r.unexplained
    assert flip.golden_score == -INF
    assert math.isnan(flip.kth_score) and math.isnan(flip.margin)


def test_variant_selecting_fewer_tokens() -> None:
    r = agree([[0, 1, 2]], [[0, 1, -1]], [SCORES])
    assert r.recall == (pytest.approx(2 / 3),)
    assert r.tie_recall == (pytest.approx(2 / 3),)  # an out with no in earns nothing
    assert r.n_unexplained == 0  # token 2 sits at kth: explained, yet uncredited


# --- several rows -------------------------------------------------------------------------


def test_worst_rows_for_recall_and_tie_recall() -> None:
    scores = [
        [8, 6, 4, 3.75, 1, 0],  # row 0: identical
        [8, 6, 4, 3.75, 1, 0],  # row 1: token 2 -> 4 (far): recall 2/3, tie 2/3
        [8, 4, 4, 4, 4, 1],  # row 2: tokens 1, 2 -> 3, 4 (all tied): recall 1/3, tie 1
        [8, 6, 4, 3.75, 1, 0],  # row 3: like row 1
    ]
    golden = [[0, 1, 2]] * 4
    variant = [[0, 1, 2], [0, 1, 4], [0, 3, 4], [0, 1, 5]]
    r = agree(golden, variant, scores)
    assert r.recall == pytest.approx((1, 2 / 3, 1 / 3, 2 / 3))
    assert r.tie_recall == pytest.approx((1, 2 / 3, 1, 2 / 3))
    assert (r.recall_min, r.worst_row) == (pytest.approx(1 / 3), 2)
    assert r.recall_mean == pytest.approx((1 + 2 / 3 + 1 / 3 + 2 / 3) / 4)
    assert (r.tie_recall_min, r.tie_worst_row) == (pytest.approx(2 / 3), 1)  # first of 1, 3
    assert r.tie_recall_mean == pytest.approx((1 + 2 / 3 + 1 + 2 / 3) / 4)
    assert r.rows_with_flips == 3
    assert (r.n_flips, r.n_unexplained) == (8, 2)
    # Row 3's token 5 (margin -4) is worse than row 1's token 4 (margin -3).
    assert [(f.row, f.token, f.margin) for f in r.unexplained] == [(3, 5, -4.0), (1, 4, -3.0)]
    assert r.value("recall_min") == r.recall_min
    assert r.value("tie_recall_mean") == r.tie_recall_mean


def test_report_cap_keeps_worst_flips_and_exact_counts() -> None:
    # Row r swaps token 2 (at kth 8) for token 3 at margin -(r + 1): 30 unexplained flips.
    rows = 30
    scores = [[10, 9, 8, 8 - (r + 1)] for r in range(rows)]
    golden = [[0, 1, 2]] * rows
    variant = [[0, 1, 3]] * rows
    r = agree(golden, variant, scores, max_flips=5)
    assert (r.n_flips, r.n_unexplained, r.rows_with_flips) == (60, 30, 30)
    assert len(r.unexplained) == 5
    assert [f.row for f in r.unexplained] == [29, 28, 27, 26, 25]
    assert [f.margin for f in r.unexplained] == [-30.0, -29.0, -28.0, -27.0, -26.0]
    assert all(not f.explained for f in r.unexplained)
    r0 = agree(golden, variant, scores, max_flips=0)
    assert (r0.unexplained, r0.n_unexplained) == ((), 30)


def test_equal_margins_keep_row_then_token_order_and_nan_margin_ranks_worst() -> None:
    scores = [[8, 6, 4, 3, 2], [8, 6, 4, 3, 2], [-INF, -INF, -INF, -INF, -INF]]
    golden = [[0, 1, 2], [0, 1, 2], [-1, -1, -1]]
    variant = [[0, 3, 4], [0, 3, 4], [0, -1, -1]]
    r = agree(golden, variant, scores, band=0.0)
    got = [(f.row, f.token) for f in r.unexplained]
    # Row 2 has no kth (NaN margin): first. Then |margin| 2 (token 1 out, token 4 in) before
    # 1 (token 3 in), rows in order within each.
    assert got == [(2, 0), (0, 1), (0, 4), (1, 1), (1, 4), (0, 3), (1, 3)]


def test_zero_rows() -> None:
    r = topk_agreement(
        torch.empty(0, 4, dtype=torch.int64),
        torch.empty(0, 4, dtype=torch.int64),
        torch.empty(0, 16),
        band=0.1,
    )
    assert (r.rows, r.k, r.recall, r.tie_recall) == (0, (), (), ())
    assert (r.recall_mean, r.recall_min, r.worst_row) == (1.0, 1.0, -1)
    assert (r.tie_recall_mean, r.tie_recall_min, r.tie_worst_row) == (1.0, 1.0, -1)
    assert (r.n_flips, r.n_unexplained, r.unexplained) == (0, 0, ())


def test_zero_width_selection() -> None:
    r = topk_agreement(
        torch.empty(2, 0, dtype=torch.int64),
        torch.empty(2, 0, dtype=torch.int64),
        sc([[1, 2], [3, 4]]),
        band=0.1,
    )
    assert r.k == (0, 0) and r.recall == (1.0, 1.0)


def test_bf16_scores_and_int64_indices() -> None:
    r = topk_agreement(
        torch.tensor([[0, 1, 2]]),
        torch.tensor([[0, 1, 3]]),
        sc([SCORES]).bfloat16(),
        band=0.25,
        band_kind="abs",
    )
    assert r.n_unexplained == 0 and r.tie_recall == (1.0,)


# --- value / validation -------------------------------------------------------------------


def test_value_names() -> None:
    r = agree([[0, 1, 2]], [[0, 1, 4]], [SCORES])
    assert TOPK_METRIC_NAMES == ("recall_min", "recall_mean", "tie_recall_min", "tie_recall_mean")
    for name in TOPK_METRIC_NAMES:
        assert r.value(name) == getattr(r, name)
    with pytest.raises(KeyError, match="n_flips"):
        r.value("n_flips")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"band_kind": "ulp"}, "band_kind"),
        ({"band": -0.1}, "band must be >= 0"),
        ({"band": math.nan}, "band must be >= 0"),
        ({"max_flips": -1}, "max_flips"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"band": 0.1, "band_kind": "rel", "max_flips": 20, **kwargs}
    with pytest.raises(ValueError, match=match):
        topk_agreement(idx([[0]]), idx([[0]]), sc([[1.0]]), **args)  # type: ignore[arg-type]


def test_bad_tensors() -> None:
    s = sc([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"variant_idx\[0, 1\] = 3 is out of range for 3"):
        topk_agreement(idx([[0, 1]]), idx([[0, 3]]), s, band=0.1)
    with pytest.raises(ValueError, match=r"golden_idx\[0, 0\] = -2"):
        topk_agreement(idx([[-2, 1]]), idx([[0, 1]]), s, band=0.1)
    with pytest.raises(TypeError, match="integer"):
        topk_agreement(torch.tensor([[0.0, 1.0]]), idx([[0, 1]]), s, band=0.1)
    with pytest.raises(ValueError, match="row counts"):
        topk_agreement(idx([[0, 1], [0, 1]]), idx([[0, 1]]), s, band=0.1)
    with pytest.raises(ValueError, match="2-D"):
        topk_agreement(idx([[0, 1]]), torch.tensor([0, 1]), s, band=0.1)


# --- select_topk --------------------------------------------------------------------------


def test_select_topk_marks_neg_inf_and_pads() -> None:
    scores = sc([[3, 1, 2], [1, -INF, -INF]])
    got = select_topk(scores, 2)
    assert got.dtype == torch.int32
    assert got.tolist() == [[0, 2], [0, -1]]
    assert select_topk(scores, 5).tolist() == [[0, 2, 1, -1, -1], [0, -1, -1, -1, -1]]
    assert select_topk(scores, 0).shape == (2, 0)
    assert select_topk(sc([[1.0, 5.0]]).squeeze(0), 1).tolist() == [1]
    with pytest.raises(ValueError, match="k must be >= 0"):
        select_topk(scores, -1)


def test_select_topk_feeds_topk_agreement() -> None:
    # A generator, not torch.manual_seed: on torch 2.11 manual_seed imports torch._dynamo,
    # which re-registered an inductor test library under pytest's rewriting (H200 run).
    scores = torch.randn(8, 64, generator=torch.Generator().manual_seed(0))
    scores[:, 40:] = -INF
    g = select_topk(scores, 48)  # more than the 40 valid tokens
    assert (g[:, 40:] == -1).all()
    r = topk_agreement(g, select_topk(scores.clone(), 48), scores, band=0.0)
    assert r.recall_min == 1.0 and r.k == (40,) * 8


# --- cross-check against a plain-Python restatement of the definitions -----------------------


def _reference(
    golden: list[list[int]],
    variant: list[list[int]],
    scores: list[list[float]],
    band: float,
    band_kind: str,
) -> tuple[list[float], list[float], int, int]:
    recall, tie, n_flips, n_unexp = [], [], 0, 0
    for g_row, v_row, s in zip(golden, variant, scores):
        g = {t for t in g_row if t >= 0}
        v = {t for t in v_row if t >= 0}
        kth = min(s[t] for t in g) if g else math.nan
        scale = max((abs(x) for x in s if math.isfinite(x)), default=0.0)
        tol = band if band_kind == "abs" else band * scale
        near = {t for t in range(len(s)) if math.isfinite(s[t]) and abs(s[t] - kth) <= tol}
        out = [t in near for t in g - v]
        into = [t in near for t in v - g]
        n_flips += len(out) + len(into)
        n_unexp += out.count(False) + into.count(False)
        recall.append(len(g & v) / len(g) if g else 1.0)
        tie.append((len(g & v) + min(sum(out), sum(into))) / len(g) if g else 1.0)
    return recall, tie, n_flips, n_unexp


@pytest.mark.parametrize("band_kind", ["abs", "rel"])
def test_random_rows_match_plain_python_definitions(band_kind: str) -> None:
    rng = random.Random(1234)
    rows, length, k = 24, 40, 12
    # Scores on a coarse grid make exact ties and near-ties common.
    scores = [[rng.randrange(-8, 8) / 4 for _ in range(length)] for _ in range(rows)]
    for row in scores:
        for t in rng.sample(range(length), rng.randrange(0, 35)):
            row[t] = -INF
    s = sc(scores)
    golden = select_topk(s, k)
    noisy = s + 0.3 * torch.randn(rows, length, generator=torch.Generator().manual_seed(5))
    variant = select_topk(noisy, k)
    variant[::5, 0] = variant[::5, 1]  # some duplicates
    band = 0.25 if band_kind == "abs" else 0.2
    r = topk_agreement(golden, variant, s, band=band, band_kind=band_kind, max_flips=1000)
    recall, tie, n_flips, n_unexp = _reference(
        golden.tolist(), variant.tolist(), scores, band, band_kind
    )
    assert r.recall == pytest.approx(tuple(recall))
    assert r.tie_recall == pytest.approx(tuple(tie))
    assert (r.n_flips, r.n_unexplained, len(r.unexplained)) == (n_flips, n_unexp, n_unexp)
    assert 0 < n_unexp < n_flips  # the case exercises both kinds of flip
    margins = [abs(f.margin) for f in r.unexplained]
    assert margins == sorted(margins, reverse=True)
