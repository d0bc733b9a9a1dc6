"""Hands the crashing kernels to numcheck. Runs only under ``pytest --numcheck``."""

from __future__ import annotations

import numcheck


def pytest_numcheck_register(registry: numcheck.Registrar) -> None:
    from crashing_kernels import numcheck_ops  # imported here: plain `pytest` stays torch-free

    numcheck_ops.register(registry)
