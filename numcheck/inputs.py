"""Deterministic, realistic inputs: seeded on the CPU, identical on every machine.

Every random draw comes from numpy's PCG64 seeded with the case seed, on the CPU, so
the same (case, seed) gives the same bytes everywhere; the runner moves the tensors to
the device afterwards. Goldens pin these bytes with a fingerprint (``goldens.py``).
"""

from __future__ import annotations

import numpy as np
import torch

#: Largest finite float8 e4m3fn value; per-token scales are amax / E4M3_MAX.
E4M3_MAX = 448.0
#: Floor on amax so an all-zero token never yields a zero (or denormal) scale.
AMAX_FLOOR = 1e-4


def rng(seed: int, stream: str) -> np.random.Generator:
    """A generator for one named stream of one seed.

    Separate streams keep inputs stable when a parameter that only affects another
    tensor changes (adding heads must not reshuffle the KV cache).
    """
    key = [seed] + [ord(c) for c in stream]
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))


def normal(gen: np.random.Generator, shape: tuple[int, ...], std: float = 1.0) -> torch.Tensor:
    """fp32 normal samples, drawn in float64 by numpy and rounded once."""
    return torch.from_numpy(gen.standard_normal(shape) * std).to(torch.float32)


#: Per-token scale formats of an e4m3 KV cache: ``amax448`` (scale = amax / 448) and
#: ``ue8m0`` (a power of two, 2^ceil(log2(amax / 448)), as DeepSeek V3.2's inference config
#: quantizes the indexer's KV cache: the scale fits in an 8-bit exponent).
SCALE_FORMATS = ("amax448", "ue8m0")


def quantize_e4m3(
    x: torch.Tensor, scale_fmt: str = "amax448"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row (last dim) e4m3 quantization with scale = max(amax, 1e-4) / 448, or that
    rounded up to a power of two (``scale_fmt = "ue8m0"``; |x| / scale still <= 448).

    Returns ``(q, scale)`` with ``q`` float8_e4m3fn of x's shape and ``scale`` fp32 of
    shape ``x.shape[:-1]``; ``q.float() * scale`` approximates ``x``.
    """
    if scale_fmt not in SCALE_FORMATS:
        raise ValueError(f"scale_fmt must be one of {', '.join(SCALE_FORMATS)}, got {scale_fmt!r}")
    amax = x.abs().amax(dim=-1).clamp_min(AMAX_FLOOR)
    scale = (amax / E4M3_MAX).to(torch.float32)
    if scale_fmt == "ue8m0":
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    scaled = (x / scale.unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX)
    return scaled.to(torch.float8_e4m3fn), scale


def to_device(inputs: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    """Move every input to ``device`` (a no-op on the CPU)."""
    return {name: t.to(device) for name, t in inputs.items()}
