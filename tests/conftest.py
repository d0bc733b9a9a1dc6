from __future__ import annotations

from collections.abc import Iterator

import pytest

from numcheck.ops import registry


@pytest.fixture(autouse=True)
def _isolated_registry() -> Iterator[None]:
    # pytester runs in-process: a conftest that registers a test-only variant must not
    # leak it into the next test.
    with registry.isolated():
        yield
