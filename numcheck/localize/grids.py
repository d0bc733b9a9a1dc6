"""What localization measures on one output: a grid of weights at the compared positions.

The weight of an element is its error in units of the output's own budget band
(:func:`error_grid`), a NaN/inf mismatch with the golden (:func:`error_grid` when the
patterns differ, :func:`nonfinite_grid` for a sampled golden's unsampled positions), or an
unexplained top-k flip on the grid of the scores it ranks (:func:`flip_grid`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Grid", "Inputs", "Params", "error_grid", "flat_pair", "flip_grid", "nonfinite_grid",
           "ravel", "unravel"]

Inputs = Mapping[str, torch.Tensor]
Params = Mapping[str, Any]


@dataclass
class Grid:
    """One output's measured weights at the compared positions."""

    name: str
    shape: tuple[int, ...]
    positions: np.ndarray  # flat positions measured
    weight: np.ndarray  # error / event weight at each position
    counted: np.ndarray  # bool: position belongs to the population
    measure: str
    events: int
    abs_err: np.ndarray | None = None
    band: np.ndarray | None = None
    #: Error measure: the elements outside the band (what the shuffle test counts).
    outside: np.ndarray | None = None


def classes(x: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +inf, 3 -inf."""
    c = torch.zeros(x.shape, dtype=torch.int8)
    c[torch.isnan(x)] = 1
    c[torch.isposinf(x)] = 2
    c[torch.isneginf(x)] = 3
    return c


def flat_pair(
    actual: torch.Tensor, expected: torch.Tensor, positions: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    full = actual.detach().to("cpu", torch.float64).reshape(-1)
    e = expected.detach().to("cpu", torch.float64).reshape(-1)
    if positions is None:
        pos = torch.arange(full.numel())
        return full, full, e, pos.numpy()
    pos = positions.to(torch.int64)
    return full, full[pos], e, pos.numpy()


def error_grid(
    name: str, actual: torch.Tensor, expected: torch.Tensor, positions: torch.Tensor | None,
    *, atol: float, rtol: float,
) -> Grid:
    """Weights of one output: its non-finite mismatches if any, else its error in bands."""
    _, a, e, pos = flat_pair(actual, expected, positions)
    mismatch = classes(a) != classes(e)
    finite = torch.isfinite(a) & torch.isfinite(e)
    shape = tuple(actual.shape)
    if bool(mismatch.any()):
        m = mismatch.numpy()
        return Grid(name, shape, pos, m.astype(np.float64), (finite | mismatch).numpy(),
                     "mismatches", int(m.sum()))
    err = torch.where(finite, (a - e).abs(), torch.zeros_like(a))
    band = atol + rtol * e.abs()
    band = torch.where(finite & (band > 0), band, torch.ones_like(band))
    if atol <= 0 and rtol <= 0:
        weight = err.square()
    else:
        weight = (err / band).square()
    raw_band = atol + rtol * e.abs()
    return Grid(name, shape, pos, weight.numpy(), finite.numpy(), "error",
                 int(finite.sum()), err.numpy(), raw_band.numpy(),
                 (finite & (err > raw_band)).numpy())


def flip_grid(
    name: str, scores: torch.Tensor, flips: Sequence[tuple[int, int]], n_flips: int
) -> Grid:
    """Unexplained flips ``(row, token)`` placed on the ``[R, L]`` grid of golden scores."""
    e = scores.detach().to("cpu", torch.float64)
    shape = tuple(e.shape)
    weight = torch.zeros(shape, dtype=torch.float64)
    if flips:
        at = torch.tensor(list(flips), dtype=torch.int64)
        weight.index_put_((at[:, 0], at[:, 1]), torch.ones(len(at), dtype=torch.float64),
                          accumulate=True)
    counted = torch.isfinite(e) | (weight > 0)
    return Grid(name, shape, np.arange(e.numel()), weight.reshape(-1).numpy(),
                 counted.reshape(-1).numpy(), "flips", n_flips)


def nonfinite_grid(
    name: str, actual: torch.Tensor, golden_counts: Sequence[int]
) -> Grid | None:
    """A sampled golden and non-finite values outside its sample: the output's own NaN /
    +inf / -inf of each kind the golden has none of (its summary statistics say so)."""
    a = actual.detach().to("cpu", torch.float64).reshape(-1)
    kinds = (torch.isnan(a), torch.isposinf(a), torch.isneginf(a))
    bad = torch.zeros_like(a, dtype=torch.bool)
    for kind, golden in zip(kinds, golden_counts, strict=True):
        if golden == 0:
            bad |= kind
    if not bool(bad.any()):
        return None
    counted = torch.isfinite(a) | bad
    return Grid(name, tuple(actual.shape), np.arange(a.numel()), bad.numpy().astype(np.float64),
                 counted.numpy(), "mismatches", int(bad.sum()))


def unravel(pos: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    coords = torch.empty(len(pos), len(shape), dtype=torch.int64)
    rest = pos.clone()
    for d in range(len(shape) - 1, -1, -1):
        coords[:, d] = rest % shape[d]
        rest = rest // shape[d]
    return coords


def ravel(coords: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    flat = torch.zeros(len(coords), dtype=torch.int64)
    for d, size in enumerate(shape):
        flat = flat * size + coords[:, d]
    return flat
