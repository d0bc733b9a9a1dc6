"""The shipped case files (``cases/``), loaded once per test process.

Loading ``cases/`` reads, parses and validates every case file (about 0.1 s of CPU), and some
thirty test modules and helpers take the shipped cases as their data, most of them at
collection, in each pytest-xdist worker. A :class:`~numcheck.cases.Case` is frozen and its
mappings are read-only, so one load serves them all. A test whose subject is loading itself
(tests/test_cases.py, tests/test_measurable_limits.py) calls ``load_cases``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from numcheck.cases import Case, load_cases

ROOT = Path(__file__).resolve().parent.parent


@cache
def shipped_cases() -> tuple[Case, ...]:
    """Every case of the repository's ``cases/`` folder, in ``load_cases``'s order."""
    return tuple(load_cases(ROOT / "cases"))
