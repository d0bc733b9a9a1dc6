"""Input distributions: what a case's inputs look like, as data an op's input maker reads.

Seeded normal inputs are where kernels rarely break. A case names its distribution
(``inputs.distribution = "llm"``; docs/cases.md), the loader puts it in the case's parameters
under :data:`INPUTS_PARAM` (so the golden's parameter record pins it: a golden made for
another distribution is stale), and the op's ``make_inputs(params, seed)`` reads it with
:func:`input_distribution` and draws its activations with :func:`activations`:

- ``normal``: what the op draws by default (today's inputs, byte for byte);
- ``llm``: LLM-like activations: a few outlier channels 50-100x the rest, and a per-token
  magnitude spread (log-normal, sigma 1);
- ``near_max``: every value near the largest the op can take (``largest``: the format's
  largest finite value, or less where the op's FP32 reference would overflow);
- ``zero_rows``: normal, with a quarter of the tokens exactly zero (every value of a token:
  the input a padding token gives);
- ``subnormal``: magnitudes in the subnormal range of the format the tensor is stored in;
- ``ties``: values on a coarse grid (multiples of 1/2), so that exact ties abound.

An op says which it draws (``OpSpec(distributions=...)``); a case naming another is refused
when it is read. Every draw comes from the seeded streams of :mod:`numcheck.inputs`, on the
CPU: the same bytes on every machine. Nothing here imports pytest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["DEFAULT", "DISTRIBUTIONS", "INPUTS_PARAM", "activations", "input_distribution",
           "outlier_channels"]

#: The distributions numcheck knows, the default first.
DISTRIBUTIONS = ("normal", "llm", "near_max", "zero_rows", "subnormal", "ties")
DEFAULT = "normal"
#: The key of a case's resolved parameters that holds its inputs' description, when they are
#: not the op's default draw: ``{"distribution": "llm"}``, or a recorded file's
#: ``{"file": ..., "sha256": ...}`` (numcheck.recorded). Absent for the default, so the goldens
#: of cases that name nothing keep their parameters.
INPUTS_PARAM = "inputs"

#: ``llm``: outlier channels are this many times the rest (uniform in the range), ...
OUTLIER_SCALE = (50.0, 100.0)
#: ... one per this many channels, at least two.
CHANNELS_PER_OUTLIER = 256
#: ``llm``: sigma of the per-token log-normal magnitude.
TOKEN_SPREAD = 1.0
#: ``zero_rows``: the share of rows set to zero (at least one).
ZERO_ROW_SHARE = 0.25
#: ``ties``: the grid step of the values.
TIE_STEP = 0.5
#: ``near_max``: magnitudes uniform in [NEAR_MAX_LOW, 1] x ``largest``.
NEAR_MAX_LOW = 0.5


def input_distribution(params: Mapping[str, Any]) -> str:
    """The distribution a case's parameters name (``normal`` when they name none)."""
    spec = params.get(INPUTS_PARAM)
    if isinstance(spec, Mapping):
        return str(spec.get("distribution", DEFAULT))
    return DEFAULT


def outlier_channels(gen: np.random.Generator, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """``llm``'s outlier channels of a ``channels``-wide activation and their factors."""
    count = min(channels, max(2, channels // CHANNELS_PER_OUTLIER))
    picked = gen.choice(channels, size=count, replace=False)
    return np.sort(picked), gen.uniform(*OUTLIER_SCALE, size=count)


def activations(
    gen: np.random.Generator, shape: tuple[int, ...], distribution: str, *,
    dtype: torch.dtype = torch.float32, largest: float | None = None,
    token_dims: int | None = None,
) -> torch.Tensor:
    """fp32 activations of ``shape`` (last axis: channels; every other: rows) drawn from
    ``distribution`` for a tensor stored as ``dtype``.

    ``largest`` bounds ``near_max`` (default: ``dtype``'s largest finite value); ``subnormal``
    draws magnitudes log-uniformly between ``dtype``'s smallest subnormal and its smallest
    normal (so they survive the cast to ``dtype``). ``token_dims``: how many leading axes
    index a token (default: every axis but the last); ``zero_rows`` zeroes whole tokens, so
    an op whose token holds several rows (mHC's ``n`` streams of ``[tokens, n, C]``) says
    ``token_dims=1`` and gets all-zero tokens, not zero streams beside live ones. Raises
    ValueError for an unknown name.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown input distribution {distribution!r}; known: "
                         f"{', '.join(DISTRIBUTIONS)}")
    size = math.prod(shape)
    if distribution == "near_max":
        top = float(torch.finfo(dtype).max) if largest is None else largest
        magnitude = gen.uniform(NEAR_MAX_LOW, 1.0, size=size) * top
        return _signed(gen, magnitude, shape)
    if distribution == "subnormal":
        info = torch.finfo(dtype)
        low, high = math.log2(info.smallest_normal * info.eps), math.log2(info.smallest_normal)
        magnitude = np.exp2(gen.uniform(low, high, size=size))
        return _signed(gen, magnitude, shape)
    x = gen.standard_normal(shape)
    if distribution == "llm":
        tokens = shape[:-1] + (1,)
        x = x * np.exp(TOKEN_SPREAD * gen.standard_normal(tokens))
        picked, factor = outlier_channels(gen, shape[-1])
        x[..., picked] *= factor
    elif distribution == "zero_rows":
        lead = len(shape) - 1 if token_dims is None else token_dims
        if not 0 < lead < len(shape):
            raise ValueError(f"token_dims must be 1..{len(shape) - 1} for shape {shape}, "
                             f"got {token_dims}")
        by_token = x.reshape(math.prod(shape[:lead]), -1)
        count = max(1, round(ZERO_ROW_SHARE * by_token.shape[0]))
        by_token[gen.choice(by_token.shape[0], size=count, replace=False)] = 0.0
    elif distribution == "ties":
        x = np.clip(np.round(x / TIE_STEP) * TIE_STEP, -4.0, 4.0)
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.float32)


def _signed(gen: np.random.Generator, magnitude: np.ndarray, shape: tuple[int, ...]) -> torch.Tensor:
    signs = np.where(gen.random(magnitude.shape) < 0.5, -1.0, 1.0)
    return torch.from_numpy((magnitude * signs).reshape(shape)).to(torch.float32)
