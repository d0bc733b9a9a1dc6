"""Bytes as the cast ledger and the reports write them. Torch-free: the HTML report, which
must not import torch, formats the ledger's bytes with it too."""

from __future__ import annotations


def megabytes(n: float) -> str:
    """``6.29 MB`` (decimal megabytes, as memory bandwidth is quoted)."""
    if n < 1e4:
        return f"{n:.0f} B"
    if n < 1e6:
        return f"{n / 1e3:.1f} kB"
    return f"{n / 1e6:.2f} MB"
