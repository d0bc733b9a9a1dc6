"""The overhead gate: what a variant spends on casts, copies and the wrong kernels.

- :mod:`~numcheck.overhead.casts`: the cast ledger (dtype conversions and copies, any device);
- :mod:`~numcheck.overhead.kernels`: the kernel audit (GPU kernels by class, CUDA only);
- :mod:`~numcheck.overhead.gate`: the ``casts`` and ``kernels`` gates and their case-file limits.
"""
