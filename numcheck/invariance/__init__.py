"""Determinism and batch invariance: the measures of two gates a case turns on.

``deterministic = true``: the variant run several times on the same inputs gives bitwise
equal outputs (on CUDA, atomics-based reductions and split-K chosen by occupancy break it).
``batch_invariant = true``: a request's outputs computed alone are bitwise its rows of the
whole batch's outputs (split-K or tiles chosen by the batch size break it; the property a
deterministic serving engine needs). What a request is, the op says
(:class:`numcheck.ops.batch.Batch`).

- :mod:`~numcheck.invariance.bitwise`: two runs' outputs compared bit for bit, top-k
  selections as tokens and as order;
- :mod:`~numcheck.invariance.limits`: the case-file keys (:class:`InvarianceSpec`), what the
  gates measured (:class:`InvarianceReport`) and their violations;
- :mod:`~numcheck.invariance.table`: the end-of-run table, from report records (no torch).

The check that runs the variant for them is :mod:`numcheck.check.invariance`.
"""
