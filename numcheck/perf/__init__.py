"""The speed gate: time a variant against its reference and decide whether it is faster.

- :mod:`~numcheck.perf.timing`: interleaved device timers (CUDA events, CUDA-graph replay);
- :mod:`~numcheck.perf.speedup`: medians and the speedup interval, and the gate decision;
- :mod:`~numcheck.perf.limits`: the case-file ``perf`` options and the gate's violations;
- :mod:`~numcheck.perf.roofline`: achieved FLOP/s and bytes/s against the device's peaks;
- :mod:`~numcheck.perf.noise`: the machine's noise, the reference timed against itself;
- :mod:`~numcheck.perf.table`: the end-of-run speed table, from the report records.

One timed check, end to end, is :mod:`numcheck.check.perf`, in the room above that runs
checks; its pytest-benchmark entry is written by :mod:`numcheck.plugin.benchrecord`.
"""
