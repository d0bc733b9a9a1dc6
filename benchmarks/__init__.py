"""Scripts that need a GPU or are too slow for CI, grouped by purpose (README.md). Run from
the repository root as modules, ``python -m benchmarks.<group>.<script>``, so that they import
numcheck from this tree and the tests' shared modules as ``tests.<name>``."""
