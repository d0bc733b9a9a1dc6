"""numcheck's own tests, and the modules they share with benchmarks/: the honest families
(``tests.honest``), the planted bugs (``tests.planted``, ``tests.planted_*``,
``tests.quant_planted``), the FP8 kernels and quantizers (``tests.quant_kernels``), the
fresh-interpreter server (``tests.fresh``), report fleets (``tests.fleet``) and the
case-project helper. A package, imported from the repository root: pytest puts the root on
``sys.path`` (pyproject.toml's ``pythonpath``), and so does ``python -m`` run from it."""
