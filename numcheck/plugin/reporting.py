"""What a ``--numcheck`` run leaves besides its terminal: the report built from the records,
the baseline comparison (drift), and the files asked for (JSON, HTML, markdown, the kept run).

The report's content is :mod:`numcheck.report`'s (records, markdown, HTML, drift) and
:mod:`numcheck.history.store`'s (the kept run); this module builds it from the run's
:class:`~numcheck.plugin.shipping.RecordBook` and writes what the options name. The run's
environment asks git (and nvidia-smi on CUDA), so only a report that is written gets it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from numcheck.history.store import save_report
from numcheck.perf.sections import DeviceSections
from numcheck.plugin.runconfig import RunConfig
from numcheck.plugin.shipping import RecordBook
from numcheck.plugin.workers import worker_count
from numcheck.report.drift import compare_reports
from numcheck.report.drift_result import Drift
from numcheck.report.environment import environment
from numcheck.report.markdown import to_markdown
from numcheck.report.records import Report, now, order_records, write_json
from numcheck.report.step_summary import append_step_summary


def build_report(book: RecordBook, *, exitstatus: int | None = None,
                 drift: Drift | None = None) -> Report:
    """Everything collected so far, in collection order, without the run's environment:
    the gate's verdict and the drift comparison read records only."""
    return Report(
        records=order_records(book.records.values(), book.order),
        created=now(),
        exitstatus=exitstatus,
        goldens_regenerated=dict(sorted(book.goldens_written.items())),
        drift=drift,
    )


def with_environment(report: Report, config: pytest.Config, *, device: str,
                     sections: DeviceSections) -> Report:
    """``report`` with where the run happened (docs/report.md's environment fields)."""
    workers = worker_count(config)
    env = environment(
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        device=device,
        device_names=[r.device_name for r in report.records if r.device_name],
        rootdir=config.rootpath,
        workers=workers,
    )
    env.update(sections.environment(workers, report.records))
    return replace(report, environment=env)


def drift_against_baseline(run: RunConfig, report: Report, *, label: str) -> Drift | None:
    """The run compared with its baseline (None without one). A narrowed run (-k, node ids)
    leaves checks out on purpose: not removals."""
    if run.baseline is None:
        return None
    rules = replace(run.rules, allow_removed=1.0) if run.narrowed_by else run.rules
    return compare_reports(run.baseline, report, rules, baseline=label)


def write_files(run: RunConfig, report: Report) -> Path | None:
    """Write the files the options ask for; returns where the run was kept, if it was."""
    saved = None
    if run.save_to is not None:
        saved = save_report(run.save_to[0], report, mark_ignored=run.save_to[1])
    if run.report_path is not None:
        write_json(run.report_path, report)
    if run.html_path is not None:
        from numcheck.report.htmlpage import write_html

        write_html(run.html_path, report)
    if run.markdown_path is not None:
        text = to_markdown(report)
        run.markdown_path.parent.mkdir(parents=True, exist_ok=True)
        run.markdown_path.write_text(text)
        append_step_summary(text)
    return saved


def files_written(run: RunConfig) -> list[tuple[str, Path]]:
    """The report files the run writes, as the summary names them."""
    return [(what, out) for what, out in (("report", run.report_path),
                                           ("markdown", run.markdown_path),
                                           ("html", run.html_path)) if out is not None]
