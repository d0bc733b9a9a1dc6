from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import pytest

import numcheck
from numcheck.ops import registry

# Import every numcheck module once, up front, in the test process. pytester's in-process
# runs (runpytest) drop from sys.modules whatever was first imported during the run, so a
# module that only a --numcheck run imports (numcheck.plugin.session and most of the
# package) would otherwise be imported, and its assertions rewritten, again on every one of
# several hundred runs: about half of the suite's CPU time. The package keeps no per-run
# state in its modules (what it does keep, a new session resets: reset_machine_noise), and
# tests that inject through a module (timing.override) already share the test process's.
# The Triton kernel modules are left to their first call, as in a real run.
_LAZY = {"numcheck.__main__", "numcheck.ops.indexer_fused", "numcheck.ops.mhc_fused"}
for _module in pkgutil.walk_packages(numcheck.__path__, "numcheck."):
    if _module.name not in _LAZY:
        importlib.import_module(_module.name)


@pytest.fixture(autouse=True)
def _isolated_registry() -> Iterator[None]:
    # pytester runs in-process: a conftest that registers a test-only variant must not
    # leak it into the next test.
    with registry.isolated():
        yield
