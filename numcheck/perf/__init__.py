"""The speed gate: time a variant against its reference and decide whether it is faster.

- :mod:`~numcheck.perf.timing`: interleaved device timers (CUDA events, CUDA-graph replay);
- :mod:`~numcheck.perf.speedup`: medians and the speedup interval, and the gate decision;
- :mod:`~numcheck.perf.gate`: the case-file ``perf`` options and the gate's violations;
- :mod:`~numcheck.perf.roofline`: achieved FLOP/s and bytes/s against the device's peaks;
- :mod:`~numcheck.perf.measure`: one timed (case, variant, device), end to end;
- :mod:`~numcheck.perf.benchrecord`: the pytest-benchmark entry of a timed check.
"""
