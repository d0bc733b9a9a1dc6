"""Safe writes to disk, for every room that writes a file a reader may see mid-run.

- :mod:`~numcheck.disk.atomic`: a file replaced whole or not at all (goldens, the JSON
  report, case files written by calibration);
- :mod:`~numcheck.disk.locking`: a lock across processes for one file, so concurrent
  writers of a golden take turns.

The ground floor: nothing here imports numcheck, torch or pytest.
"""
