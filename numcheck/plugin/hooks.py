"""Hooks numcheck adds to pytest (declared by :func:`numcheck.plugin.pytest_addhooks`).

Implement them in a ``conftest.py`` at your rootdir (or in a pytest plugin). Nothing here
imports torch: the registry type is named for annotations only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from numcheck.ops.registry import Registrar


@pytest.hookspec(historic=True)
def pytest_numcheck_register(registry: Registrar) -> None:
    """Register your own ops and variants with numcheck.

    Called once per run when ``--numcheck`` is on, after the built-in ops and the
    ``numcheck.ops`` entry points of installed packages are registered, and before any case
    file is collected (a conftest.py loaded later, e.g. in the cases folder, is called when
    it loads). Use ``registry.register(OpSpec(...))`` for a new op and
    ``registry.add_variant("indexer", Variant(...))`` for a new variant of an existing one;
    a clash names both registrations. Without ``--numcheck`` it is never called, so plain
    ``pytest`` never imports your kernels or torch for numcheck's sake.
    """
