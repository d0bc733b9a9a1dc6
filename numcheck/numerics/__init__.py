"""The measures: what judges a variant's outputs against the golden, knowing nothing of who asks.

Like torch's ``testing/_comparison.py``, this room is a library of pure measures that every
room above it uses, from the ops (top-k selection) to the case files (budgets) and the
reports (metric names); it imports only :mod:`numcheck.precision`.

- :mod:`~numcheck.numerics.metric_names`: every metric's name, shared by all rooms (no torch);
- :mod:`~numcheck.numerics.metrics`: elementwise error metrics (float64);
- :mod:`~numcheck.numerics.topk`: top-k selection and tie-aware top-k agreement;
- :mod:`~numcheck.numerics.budgets`: the budget model and the per-precision defaults (no
  torch); :mod:`~numcheck.numerics.calibration_record`: the calibration record beside a
  variant's tables;
- :mod:`~numcheck.numerics.verdict`: metrics against budgets, violations;
  :mod:`~numcheck.numerics.nonfinite`: why an inf/NaN pattern differs.

Running a variant and judging it over seeds against its case's golden is
:mod:`numcheck.check`, in the room above.
"""
