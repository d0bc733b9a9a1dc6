"""python -m numcheck merge: the shards of one run become the report a single run gives."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from numcheck.__main__ import main
from numcheck.history.merge import merge_reports, merged_exitstatus, result_fields
from numcheck.report.records import Report, ReportError, load_report, write_json
from tests.fleet import GPU_REPORT, rec, write_run

SHA = "ab" * 20


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    # The commands append to $GITHUB_STEP_SUMMARY when set: not to a CI job's own summary.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def _shards(tmp_path: Path, *, failed: bool = False) -> tuple[list[Path], list]:
    """A run of four checks, split in two shards as a splitter would."""
    checks = [rec("fp32"), rec("bf16"), rec("tf32", status="fail" if failed else "pass"),
              rec("fused", status="skip")]
    a = write_run(tmp_path / "a.json", [replace(r, worker="gw0") for r in checks[:2]],
                  commit=SHA, argv=["--splits", "2", "--group", "1"], workers=1,
                  created="2026-12-01T10:00:00+00:00")
    b = write_run(tmp_path / "b.json", checks[2:], commit=SHA, exitstatus=1 if failed else 0,
                  argv=["--splits", "2", "--group", "2"], workers=0,
                  created="2026-12-01T10:05:00+00:00")
    return [a, b], checks


def test_shards_merge_into_the_single_runs_records(tmp_path: Path) -> None:
    paths, checks = _shards(tmp_path)
    merged = merge_reports(paths)
    assert [result_fields(r) for r in merged.records] == [result_fields(r) for r in checks]
    assert merged.passed and merged.exitstatus == 0
    assert merged.created == "2026-12-01T10:05:00+00:00"
    env = merged.environment
    assert env["git_commit"] == SHA and env["device_names"] == ["cpu"] and env["workers"] == 1
    assert env["argv"] is None  # the shards disagree: each says its own under shards
    assert [s["argv"] for s in env["shards"]] == [["--splits", "2", "--group", "1"],
                                                  ["--splits", "2", "--group", "2"]]
    assert [s["records"] for s in env["shards"]] == [2, 2]


def test_a_failed_shard_fails_the_merged_gate(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    paths, _ = _shards(tmp_path, failed=True)
    assert main(["merge", *map(str, paths), "-o", str(tmp_path / "run.json"),
                 "--markdown", str(tmp_path / "run.md")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("numcheck merge: 2 shard(s), 4 records -> ")
    assert "(numcheck: FAIL (1 failed, 2 passed, 1 skipped))" in out
    run = load_report(tmp_path / "run.json")
    assert not run.passed and run.exitstatus == 1
    assert (tmp_path / "run.md").read_text().startswith("## numcheck: FAIL")
    paths, _ = _shards(tmp_path / "ok")
    assert main(["merge", *map(str, paths), "-o", str(tmp_path / "ok.json")]) == 0


@pytest.mark.parametrize(("statuses", "merged"), [
    ([0, 0], 0), ([0, 1], 1), ([1, 2], 2), ([5, 0], 0), ([5, 5], 5), ([None, 0], 0),
    ([None, None], None), ([4, 1], 4), ([0, 3], 3),
])
def test_merged_exit_status_is_what_one_run_would_end_with(statuses: list, merged: int) -> None:
    assert merged_exitstatus(statuses) == merged


def test_the_same_check_twice_with_the_same_result_is_kept_once(tmp_path: Path) -> None:
    paths, checks = _shards(tmp_path)
    merged = merge_reports([*paths, paths[1]])  # a shard uploaded twice
    assert len(merged.records) == len(checks)


def _error(paths: list[Path]) -> str:
    with pytest.raises(ReportError) as info:
        merge_reports(paths)
    return str(info.value)


def test_two_shards_claiming_one_check_is_an_error_naming_both(tmp_path: Path) -> None:
    paths, checks = _shards(tmp_path)
    other = write_run(tmp_path / "c.json", [replace(checks[1], status="fail")], commit=SHA)
    message = _error([*paths, other])
    assert message.startswith(f"{paths[0]} and {other}: both hold the check "
                              "indexer::tiny::bf16[cpu] with different results (status: pass vs "
                              "fail")
    assert "Fix: each check must run in one shard only" in message
    # Known by (op, case, variant, device) too: the same check under another node id.
    moved = write_run(tmp_path / "d.json", [replace(checks[1], nodeid="elsewhere",
                                                    metrics={"logits": {"calc_diff": 1.0}})],
                      commit=SHA)
    assert "both hold the check indexer::tiny::bf16[cpu]" in _error([*paths, moved])


def test_reports_that_are_not_shards_of_one_run(tmp_path: Path) -> None:
    paths, _ = _shards(tmp_path)
    version = tmp_path / "v2.json"
    version.write_text(json.dumps({**json.loads(paths[1].read_text()), "schema_version": 2}))
    assert _error([paths[0], version]).startswith(
        f"{paths[0]} and {version}: schema versions 1 and 2 differ")
    gpu = write_run(tmp_path / "gpu.json", [rec("x", device="cuda", device_name="NVIDIA H200")],
                    commit=SHA, device="cuda")
    assert _error([paths[0], gpu]).startswith(
        f"{paths[0]} and {gpu}: ran on different device classes (cpu and H200)")
    later = write_run(tmp_path / "later.json", [rec("x")], commit="cd" * 20)
    assert "ran at different commits" in _error([paths[0], later])
    drifted = tmp_path / "drift.json"
    report = load_report(paths[1])
    from numcheck.report.drift import compare_reports

    write_json(drifted, replace(report, drift=compare_reports(report, report)))
    assert _error([paths[0], drifted]).startswith(
        f"{drifted}: a shard compared with a baseline (--numcheck-baseline)")


def test_merge_bad_inputs_exit_2_with_one_line(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    paths, checks = _shards(tmp_path)
    other = tmp_path / "other.json"
    other.write_text('{"benchmarks": []}')
    conflict = write_run(tmp_path / "c.json", [replace(checks[0], status="fail")], commit=SHA)
    for bad, message in ((tmp_path / "missing.json", "missing.json: no such report file"),
                         (other, "other.json: not a numcheck report"),
                         (conflict, "both hold the check indexer::tiny::fp32[cpu]")):
        assert main(["merge", str(paths[0]), str(bad), "-o", str(tmp_path / "o.json")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and message in err, err
        assert err.startswith("numcheck merge: ")
    assert not (tmp_path / "o.json").exists()


def test_a_real_gpu_report_split_and_merged_is_the_same_report(tmp_path: Path) -> None:
    report = load_report(GPU_REPORT)
    half = len(report.records) // 2
    for name, records in (("1", report.records[:half]), ("2", report.records[half:])):
        write_json(tmp_path / f"{name}.json", replace(report, records=records))
    merged = merge_reports([tmp_path / "1.json", tmp_path / "2.json"])
    assert merged.records == report.records
    assert merged.passed == report.passed and merged.exitstatus == report.exitstatus
    assert Report(merged.records).counts() == report.counts()
