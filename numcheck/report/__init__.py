"""What a run leaves behind: records, terminal tables, markdown, and drift against a baseline.

- :mod:`~numcheck.report.records`: one record per check and the JSON report (docs/report.md);
- :mod:`~numcheck.report.render`: failure messages and the end-of-run tables;
- :mod:`~numcheck.report.markdown`: the markdown summary (CI step summaries);
- :mod:`~numcheck.report.drift`: this run against a baseline report, and
  :mod:`~numcheck.report.drift_result`: the comparison as data a report keeps;
- :mod:`~numcheck.report.environment`: the machine and versions a report was made on;
- :mod:`~numcheck.report.skips`: perf-only skips counted in one summary line;
- :mod:`~numcheck.report.htmlpage`: the self-contained HTML page, with plots drawn by
  :mod:`~numcheck.report.svgplots` (matplotlib, the ``html`` extra).
"""
