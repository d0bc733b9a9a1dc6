"""The overhead gate: what a variant spends on casts, copies and the wrong kernels.

- :mod:`~numcheck.overhead.casts`: the cast ledger (dtype conversions, copies and data
  movement, any device);
- :mod:`~numcheck.overhead.movement`: which aten ops move data (the ledger's classification);
- :mod:`~numcheck.overhead.units`: bytes as text (torch-free, for the reports too);
- :mod:`~numcheck.overhead.kernels`: the kernel audit (GPU kernels by class, CUDA only);
- :mod:`~numcheck.overhead.limits`: the ``casts`` and ``kernels`` gates and their case-file
  limits: a call audited, and its report held to a budget.

The audit of one check (a variant's preparation made first, the op's reference measured
where its passes set a limit) is :mod:`numcheck.check.overhead`, in the room above.
"""
