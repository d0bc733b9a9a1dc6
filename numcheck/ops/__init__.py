"""Op families: what an op is (:mod:`~numcheck.ops.spec`, and how its outputs are organised:
:mod:`~numcheck.ops.structure`), one module per op (indexer, mhc), their fused Triton
variants, and the registry.

Importing this package imports nothing else, so an op module's import never loads the registry;
:mod:`numcheck.ops.builtin` lists the shipped ops and :mod:`numcheck.ops.registry` holds them.
"""
