"""Many runs at once: numcheck across commits, CI runners and GPU types.

A single report answers "did this run pass?"; this room answers questions about many:

- :mod:`~numcheck.history.devclass`: the device class of a record or report (``cpu``,
  ``H200``, ``B200``...), the unit that runs are grouped and compared by;
- :mod:`~numcheck.history.store`: ``--numcheck-save`` (a run's report kept under
  ``.numcheck/history/<device class>/``) and finding reports in folders;
- :mod:`~numcheck.history.merge`: the shards of one run (CI matrix jobs, split suites)
  merged into the report a single run gives;
- :mod:`~numcheck.history.runs`: many reports read quickly (in parallel,
  :mod:`~numcheck.history.pool`; only what the tables and plots need) and ordered by their
  commit's date;
- :mod:`~numcheck.history.matrix`: one row per check, one column per device class;
- :mod:`~numcheck.history.series`: each check's metrics across commits, the moves beyond
  the drift rules, and the newest run against the one before it;
- :mod:`~numcheck.history.summary`: the history as terminal lines and markdown;
  :mod:`~numcheck.history.page` and :mod:`~numcheck.history.svgseries`: as one
  self-contained HTML page with matplotlib SVG plots;
- :mod:`~numcheck.history.commands`: ``python -m numcheck merge | matrix | history``.

Pure: no pytest, no torch. It reads reports through :mod:`numcheck.report` and compares runs
with the rules of :mod:`numcheck.report.drift`.
"""
