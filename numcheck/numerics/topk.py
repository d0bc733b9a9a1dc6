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

from numcheck.numerics.metric_names import MAX_FLIPS

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
    max_flips: int = MAX_FLIPS,
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
    rows, length = _check_args(golden_idx, variant_idx, golden_scores, band, band_kind, max_flips)
    in_g = _membership(golden_idx, length, "golden_idx")
    in_v = _membership(variant_idx, length, "variant_idx")
    scores = golden_scores.detach().to("cpu")
    g_count = in_g.sum(dim=1)
    kth = _kth_scores(golden_idx, scores, g_count)
    flips = _classify_flips(in_g, in_v, scores, kth, _tie_tolerance(scores, kth, band, band_kind))

    g_np = g_count.numpy().astype(np.float64)
    safe_g = np.where(g_np > 0, g_np, 1.0)
    both_count = (in_g & in_v).sum(dim=1)
    recall = np.where(g_np > 0, both_count.numpy() / safe_g, 1.0)
    credited = both_count + torch.minimum(*flips.explained_per_row(rows))
    tie_recall = np.where(g_np > 0, credited.numpy() / safe_g, 1.0)
    recall_mean, recall_min, worst_row = _mean_min_argmin(recall)
    tie_mean, tie_min, tie_worst = _mean_min_argmin(tie_recall)

    return TopkReport(
        rows=rows,
        k=tuple(int(c) for c in g_count.tolist()),
        recall=tuple(float(x) for x in recall),
        recall_mean=recall_mean,
        recall_min=recall_min,
        worst_row=worst_row,
        rows_with_flips=int((in_g ^ in_v).any(dim=1).sum()),
        tie_recall=tuple(float(x) for x in tie_recall),
        tie_recall_mean=tie_mean,
        tie_recall_min=tie_min,
        tie_worst_row=tie_worst,
        n_flips=int(flips.rows.numel()),
        n_unexplained=int((~flips.explained).sum()),
        unexplained=flips.worst_unexplained(max_flips),
        band=float(band),
        band_kind=band_kind,
    )


def _check_args(
    golden_idx: torch.Tensor,
    variant_idx: torch.Tensor,
    golden_scores: torch.Tensor,
    band: float,
    band_kind: str,
    max_flips: int,
) -> tuple[int, int]:
    """Refuse bad arguments to :func:`topk_agreement`; the (rows, length) of the scores."""
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
    return rows, length


def _kth_scores(golden_idx: torch.Tensor, scores: torch.Tensor, g_count: torch.Tensor) -> torch.Tensor:
    """Per row, the lowest golden score over G (float64; NaN for a row that selected nothing).

    Gathered through the (small) golden index tensor so the full ``[R, L]`` score matrix is
    never converted to float64.
    """
    rows = scores.shape[0]
    g_idx = golden_idx.detach().to("cpu", torch.int64)
    if g_idx.numel() == 0:
        return torch.full((rows,), math.nan, dtype=torch.float64)
    g_scores = torch.gather(scores, 1, g_idx.clamp(min=0)).to(torch.float64)
    kth = torch.where(g_idx >= 0, g_scores, math.inf).amin(dim=1)
    return torch.where(g_count > 0, kth, math.nan)


def _tie_tolerance(scores: torch.Tensor, kth: torch.Tensor, band: float, band_kind: str) -> torch.Tensor:
    """Per row, how far from the k-th score a flip may be and still count as a near-tie
    (:func:`row_tolerance`). An empty score matrix has no row maximum; nothing can flip there,
    so the band is taken relative to |kth| instead."""
    if band_kind == "rel" and not scores.shape[1]:
        return band * kth.abs()
    return row_tolerance(scores, band, band_kind)


@dataclass(frozen=True)
class _Flips:
    """Every flipped token (in G xor V), in row-major order, with its golden score and margin."""

    rows: torch.Tensor
    tokens: torch.Tensor
    out: torch.Tensor  # True: golden-selected token the variant dropped; False: swapped in
    score: torch.Tensor
    kth: torch.Tensor
    margin: torch.Tensor
    explained: torch.Tensor

    def explained_per_row(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row: explained flips out of the selection, and explained flips into it."""
        out = torch.zeros(rows, dtype=torch.int64)
        into = torch.zeros(rows, dtype=torch.int64)
        out.index_add_(0, self.rows[self.explained & self.out], _ones(self.explained & self.out))
        into.index_add_(0, self.rows[self.explained & ~self.out], _ones(self.explained & ~self.out))
        return out, into

    def worst_unexplained(self, max_flips: int) -> tuple[Flip, ...]:
        """At most ``max_flips`` unexplained flips, farthest from the k-th score first."""
        sel = torch.nonzero(~self.explained).reshape(-1).numpy()
        abs_margin = self.margin.abs().numpy()[sel]
        # A NaN margin (row where the golden selected nothing) has no distance to the
        # boundary: rank it with the worst. A stable sort keeps (row, token) order on ties.
        abs_margin = np.where(np.isnan(abs_margin), np.inf, abs_margin)
        order = sel[np.argsort(-abs_margin, kind="stable")][:max_flips]
        return tuple(
            Flip(
                row=int(self.rows[i]),
                token=int(self.tokens[i]),
                direction="out" if bool(self.out[i]) else "in",
                golden_score=float(self.score[i]),
                kth_score=float(self.kth[i]),
                margin=float(self.margin[i]),
                explained=False,
            )
            for i in order.tolist()
        )


def _classify_flips(
    in_g: torch.Tensor, in_v: torch.Tensor, scores: torch.Tensor, kth: torch.Tensor,
    tol: torch.Tensor,
) -> _Flips:
    """The flips, each explained iff its golden score and ``kth`` are finite and within ``tol``."""
    flip_rows, flip_tokens = torch.nonzero(in_g ^ in_v, as_tuple=True)  # row-major order
    flip_score = scores[flip_rows, flip_tokens].to(torch.float64)
    flip_kth = kth[flip_rows]
    margin = flip_score - flip_kth
    explained = (
        torch.isfinite(flip_score) & torch.isfinite(flip_kth) & (margin.abs() <= tol[flip_rows])
    )
    return _Flips(flip_rows, flip_tokens, in_g[flip_rows, flip_tokens], flip_score, flip_kth,
                  margin, explained)


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
