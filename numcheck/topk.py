"""Tie-aware agreement of a variant's top-k selection with the golden one.

For a sparse-attention indexer elementwise closeness is not the point: *which tokens are
selected* is. A reduced-precision score path will swap tokens whose golden scores sit right
at the k-th score (near-ties; bf16 epilogues make ties more frequent), and that is benign. A
swap of a token far from the k-th score is a bug. :func:`topk_agreement` separates the two
using the golden scores of every token, and reports each unexplained swap with its margin.

Selections are ``[R, K]`` integer tensors padded with ``-1``; every ``-1`` (not only a
trailing one) means "no token". Each row is treated as a *set*: a token listed twice counts
once, so duplicates can neither inflate recall nor hide a missing token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

#: Names :meth:`TopkReport.value` understands, for budgets.
TOPK_METRIC_NAMES: tuple[str, ...] = (
    "recall_min",
    "recall_mean",
    "tie_recall_min",
    "tie_recall_mean",
)
BAND_KINDS: tuple[str, ...] = ("rel", "abs")


@dataclass(frozen=True)
class Flip:
    """One token on which the golden and variant selections of a row disagree."""

    row: int
    token: int
    #: ``"out"``: the golden selected it and the variant did not; ``"in"``: the reverse.
    direction: str
    #: Golden score of this token (-inf for a masked position).
    golden_score: float
    #: Golden k-th score of the row: the lowest golden score among golden-selected tokens
    #: (NaN when the golden selected nothing).
    kth_score: float
    #: ``golden_score - kth_score``: how far the token sits from the selection boundary.
    margin: float
    #: True when the swap is a near-tie: finite score within the band around ``kth_score``.
    explained: bool


@dataclass(frozen=True)
class TopkReport:
    """Top-k agreement of a variant with the golden over ``rows`` rows.

    With ``rows == 0`` every recall is 1.0 (nothing disagrees) and the worst rows are -1.
    """

    rows: int
    #: Number of valid (distinct, non ``-1``) golden tokens per row.
    k: tuple[int, ...]
    #: Per row ``|G & V| / |G|`` (1.0 when ``|G| == 0``).
    recall: tuple[float, ...]
    recall_mean: float
    recall_min: float
    #: First row with the lowest recall.
    worst_row: int
    #: Rows where the golden and variant sets differ at all.
    rows_with_flips: int
    #: Per row ``(|G & V| + min(#explained out, #explained in)) / |G|``.
    tie_recall: tuple[float, ...]
    tie_recall_mean: float
    tie_recall_min: float
    tie_worst_row: int
    #: Tokens in the symmetric difference of G and V, over all rows (exact, not capped).
    n_flips: int
    #: Flips, either direction, that are not explained by the tie band (exact, not capped).
    n_unexplained: int
    #: The worst unexplained flips, by ``|margin|`` descending, at most ``max_flips`` of them.
    unexplained: tuple[Flip, ...]
    band: float
    band_kind: str

    def value(self, name: str) -> float:
        """The metric called ``name`` in a budget (one of :data:`TOPK_METRIC_NAMES`).

        Raises:
            KeyError: ``name`` is not a top-k metric name.
        """
        if name not in TOPK_METRIC_NAMES:
            names = ", ".join(TOPK_METRIC_NAMES)
            raise KeyError(f"unknown top-k metric {name!r}; expected one of {names}")
        return float(getattr(self, name))


def select_topk(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the ``k`` largest scores along the last dim, ``-1`` padded, as int32.

    Uses ``torch.topk`` (sorted, largest first) with ``min(k, L)``; a selected position whose
    score is -inf (masked) becomes ``-1``, and the result is right-padded with ``-1`` up to
    ``k`` when ``L < k``. Which of several exactly tied tokens is kept is torch's choice; that
    is what :func:`topk_agreement` is tolerant of.

    Args:
        scores: ``[..., L]`` float tensor (typically ``[R, L]``), any device.
        k: number of tokens to select, ``>= 0``.

    Returns:
        ``[..., k]`` int32 tensor on the device of ``scores``.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if scores.dim() == 0:
        raise ValueError("scores must have at least one dimension")
    length = scores.shape[-1]
    k_eff = min(k, length)
    values, indices = torch.topk(scores, k_eff, dim=-1, largest=True, sorted=True)
    selected = torch.where(torch.isneginf(values), -1, indices).to(torch.int32)
    if k_eff < k:
        pad = selected.new_full((*selected.shape[:-1], k - k_eff), -1)
        selected = torch.cat([selected, pad], dim=-1)
    return selected


def _membership(idx: torch.Tensor, length: int, name: str) -> torch.Tensor:
    """``[R, L]`` bool: token t is in row r's set. ``-1`` entries are ignored."""
    if idx.dtype.is_floating_point or idx.dtype == torch.bool or idx.dtype.is_complex:
        raise TypeError(f"{name} must be an integer tensor, got {idx.dtype}")
    idx = idx.detach().to("cpu", torch.int64)
    bad = (idx < -1) | (idx >= length)
    if bool(bad.any()):
        r, c = (int(v) for v in torch.nonzero(bad)[0])
        raise ValueError(
            f"{name}[{r}, {c}] = {int(idx[r, c])} is out of range for {length} tokens "
            "(valid: -1 for padding, or 0..L-1)"
        )
    # Column ``length`` is a sink for the -1 padding, dropped afterwards.
    sink = torch.where(idx < 0, length, idx)
    member = torch.zeros(idx.shape[0], length + 1, dtype=torch.bool)
    member.scatter_(1, sink, True)
    return member[:, :length]


def _mean_min_argmin(values: np.ndarray) -> tuple[float, float, int]:
    if values.size == 0:
        return 1.0, 1.0, -1
    worst = int(np.argmin(values))  # first occurrence
    return float(values.mean()), float(values[worst]), worst


def topk_agreement(
    golden_idx: torch.Tensor,
    variant_idx: torch.Tensor,
    golden_scores: torch.Tensor,
    *,
    band: float,
    band_kind: str = "rel",
    max_flips: int = 20,
) -> TopkReport:
    """Compare a variant's top-k selection with the golden one, forgiving near-ties only.

    Per row, with G the golden set and V the variant set (``-1`` ignored, duplicates
    collapsed), ``kth`` is the lowest golden score over G. A flipped token (in G\\V or V\\G)
    is *explained* iff its golden score and ``kth`` are finite and
    ``|golden_score - kth| <= tol``, with ``tol = band`` (``"abs"``) or ``band * scale``
    (``"rel"``). A masked token (golden score -inf) swapped in is therefore never explained.
    ``tie_recall`` credits a swap only when both sides are explained:
    ``(|G & V| + min(#explained out, #explained in)) / |G|``.

    Args:
        golden_idx: ``[R, Kg]`` int, the golden selection, ``-1`` padded.
        variant_idx: ``[R, Kv]`` int, the variant's selection, ``-1`` padded (usually
            ``Kv == Kg``; only the row counts must match).
        golden_scores: ``[R, L]`` float, golden score of every token, -inf where masked.
        band: width of the tie band, ``>= 0``.
        band_kind: ``"rel"`` (relative to the row's scale: its largest finite
            ``|golden score|``) or ``"abs"`` (in score units).
        max_flips: cap on the number of unexplained flips listed; counts stay exact.

    Raises:
        ValueError: bad shapes, an index outside ``[-1, L)``, a negative band or cap, or an
            unknown ``band_kind``.
        TypeError: an index tensor is not integer.
    """
    if band_kind not in BAND_KINDS:
        raise ValueError(f"band_kind must be one of {BAND_KINDS}, got {band_kind!r}")
    if not band >= 0.0:  # also rejects NaN
        raise ValueError(f"band must be >= 0, got {band}")
    if max_flips < 0:
        raise ValueError(f"max_flips must be >= 0, got {max_flips}")
    named = {"golden_idx": golden_idx, "variant_idx": variant_idx, "golden_scores": golden_scores}
    for name, t in named.items():
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    rows, length = golden_scores.shape
    if golden_idx.shape[0] != rows or variant_idx.shape[0] != rows:
        raise ValueError(
            f"row counts differ: golden_idx {tuple(golden_idx.shape)}, variant_idx "
            f"{tuple(variant_idx.shape)}, golden_scores {tuple(golden_scores.shape)}"
        )

    in_g = _membership(golden_idx, length, "golden_idx")
    in_v = _membership(variant_idx, length, "variant_idx")
    scores = golden_scores.detach().to("cpu")

    g_count = in_g.sum(dim=1)
    both_count = (in_g & in_v).sum(dim=1)

    # kth: lowest golden score over G, gathered from the (small) golden index tensor so the
    # full [R, L] score matrix is never converted to float64.
    g_idx = golden_idx.detach().to("cpu", torch.int64)
    g_valid = g_idx >= 0
    g_scores = torch.gather(scores, 1, g_idx.clamp(min=0)).to(torch.float64)
    if g_idx.numel() == 0:
        kth = torch.full((rows,), math.nan, dtype=torch.float64)
    else:
        kth = torch.where(g_valid, g_scores, math.inf).amin(dim=1)
        kth = torch.where(g_count > 0, kth, math.nan)
    # An empty score matrix has no row maximum; nothing can flip there anyway.
    empty = band_kind == "rel" and not length
    tol = band * kth.abs() if empty else row_tolerance(scores, band, band_kind)

    flipped = in_g ^ in_v
    flip_rows, flip_tokens = torch.nonzero(flipped, as_tuple=True)  # row-major order
    flip_out = in_g[flip_rows, flip_tokens]
    flip_score = scores[flip_rows, flip_tokens].to(torch.float64)
    flip_kth = kth[flip_rows]
    margin = flip_score - flip_kth
    explained = (
        torch.isfinite(flip_score) & torch.isfinite(flip_kth) & (margin.abs() <= tol[flip_rows])
    )

    explained_out = torch.zeros(rows, dtype=torch.int64)
    explained_in = torch.zeros(rows, dtype=torch.int64)
    explained_out.index_add_(0, flip_rows[explained & flip_out], _ones(explained & flip_out))
    explained_in.index_add_(0, flip_rows[explained & ~flip_out], _ones(explained & ~flip_out))

    g_np = g_count.numpy().astype(np.float64)
    safe_g = np.where(g_np > 0, g_np, 1.0)
    recall = np.where(g_np > 0, both_count.numpy() / safe_g, 1.0)
    credited = both_count + torch.minimum(explained_out, explained_in)
    tie_recall = np.where(g_np > 0, credited.numpy() / safe_g, 1.0)

    recall_mean, recall_min, worst_row = _mean_min_argmin(recall)
    tie_mean, tie_min, tie_worst = _mean_min_argmin(tie_recall)

    unexplained = ~explained
    n_unexplained = int(unexplained.sum())
    sel = torch.nonzero(unexplained).reshape(-1).numpy()
    abs_margin = margin.abs().numpy()[sel]
    # A NaN margin (row where the golden selected nothing) has no distance to the boundary:
    # rank it with the worst. Stable sort keeps (row, token) order among equal margins.
    abs_margin = np.where(np.isnan(abs_margin), np.inf, abs_margin)
    order = sel[np.argsort(-abs_margin, kind="stable")][:max_flips]
    reported = tuple(
        Flip(
            row=int(flip_rows[i]),
            token=int(flip_tokens[i]),
            direction="out" if bool(flip_out[i]) else "in",
            golden_score=float(flip_score[i]),
            kth_score=float(flip_kth[i]),
            margin=float(margin[i]),
            explained=False,
        )
        for i in order.tolist()
    )

    return TopkReport(
        rows=rows,
        k=tuple(int(c) for c in g_count.tolist()),
        recall=tuple(float(x) for x in recall),
        recall_mean=recall_mean,
        recall_min=recall_min,
        worst_row=worst_row,
        rows_with_flips=int(flipped.any(dim=1).sum()),
        tie_recall=tuple(float(x) for x in tie_recall),
        tie_recall_mean=tie_mean,
        tie_recall_min=tie_min,
        tie_worst_row=tie_worst,
        n_flips=int(flip_rows.numel()),
        n_unexplained=n_unexplained,
        unexplained=reported,
        band=float(band),
        band_kind=band_kind,
    )


def row_tolerance(golden_scores: torch.Tensor, band: float, band_kind: str) -> torch.Tensor:
    """Per row, the half-width of the tie band around the k-th score (float64).

    ``"abs"``: ``band`` itself. ``"rel"``: ``band`` times the row's score scale, its
    largest finite ``|golden score|``, not ``|kth|``: with signed head weights the k-th score
    can sit near zero, where a band relative to it would shrink to nothing while the
    rounding error does not.
    """
    rows = golden_scores.shape[0]
    if band_kind == "abs":
        return torch.full((rows,), float(band), dtype=torch.float64)
    scores = golden_scores.detach().to("cpu")
    finite = torch.isfinite(scores)
    scale = torch.where(finite, scores.abs(), 0).amax(dim=1)
    return band * scale.to(torch.float64)


def _ones(mask: torch.Tensor) -> torch.Tensor:
    return torch.ones(int(mask.sum()), dtype=torch.int64)
