"""Small reports for the tests of numcheck/history: records and runs written as a real run
writes them (numcheck.report.records.write_json)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from numcheck.report.records import Record, Report, write_json

GPU_REPORT = (Path(__file__).resolve().parent.parent / "docs" / "evidence"
              / "2026-11-29-h200-gate-and-perf" / "gate-cuda-report.json")


def rec(variant: str = "bf16", *, case: str = "tiny", op: str = "indexer",
        calc_diff: float = 1e-6, recall: float | None = 0.998, status: str = "pass",
        timing: dict[str, Any] | None = None, device: str = "cpu",
        device_name: str | None = "cpu", closest: float | None = 0.5,
        calc_budget: float | None = 1e-5) -> Record:
    """One check's record; ``closest``: how much of its rel_fro budget it uses."""
    return Record(
        id=f"{op}::{case}::{variant}[{device}]",
        nodeid=f"cases/{op}.toml::{case}::{variant}[{device}]",
        op=op, case=case, variant=variant, device=device, status=status,
        reason="" if status in ("pass", "skip") else "logits.rel_fro = 1 > budget 0.1",
        metrics={} if status == "skip" else {"logits": {"calc_diff": calc_diff, "rel_fro": 1e-3}},
        topk=None if recall is None or status == "skip" else
        {"recall_min": recall, "tie_recall_min": 1.0},
        budget={} if calc_budget is None else {
            "logits": {"calc_diff": calc_budget, "rel_fro": 2e-3}, "topk": {"recall_min": 0.99}},
        closest=None if closest is None or status == "skip" else
        {"output": "logits", "metric": "rel_fro", "value": closest * 2e-3, "limit": 2e-3},
        timing=timing, device_name=None if status == "skip" else device_name,
    )


def timing(speedup: float, half_width: float = 0.01, speedup_min: float | None = 1.05
           ) -> dict[str, Any]:
    return {"speedup": speedup, "ci_low": speedup - half_width,
            "ci_high": speedup + half_width, "speedup_min": speedup_min}


def write_run(path: Path, records: list[Record], *, commit: str | None = None,
              date: str | None = None, created: str = "2026-12-01T00:00:00+00:00",
              device: str = "cpu", device_names: list[str] | None = None,
              exitstatus: int | None = 0, **env: Any) -> Path:
    """A report as a run at ``commit`` (committed at ``date``) writes it."""
    environment = {"device": device, "device_names": device_names or sorted(
        {r.device_name for r in records if r.device_name}), "git_commit": commit,
        "git_commit_date": date, **env}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, Report(records, environment, created=created, exitstatus=exitstatus))
    return path


def quiet_history(tmp_path: Path, flat: int) -> Path:
    """Six CPU runs: ``flat`` checks whose figures never move (an expected failure among
    them), one whose calc_diff leaves 0 at the fourth run."""
    folder = tmp_path / "quiet"
    for i in range(6):
        records = [rec("tf32", calc_diff=0.0 if i < 3 else 3e-8, recall=None)]
        records += [rec(f"v{j}", calc_diff=1e-6 * (j + 1)) for j in range(flat - 1)]
        records.append(replace(rec("roundtrip", status="xfail"), closest={
            "output": "casts", "metric": "round_trips", "value": 1, "limit": 0}))
        write_run(folder / "cpu" / f"{i}.json", records, commit=str(i + 1) * 40,
                  date=f"2026-01-0{i + 1}T00:00:00+00:00")
    return folder
