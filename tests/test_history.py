"""numcheck/history: device classes, kept runs, reading many reports, series and moves, the
newest-vs-previous gate, the device matrix, the page, and the commands' exit codes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from numcheck.__main__ import main
from numcheck.history import devclass, store
from numcheck.history.matrix import build_matrix, cell_text, to_html, to_markdown
from numcheck.history.page import render_history
from numcheck.history.runs import _parse, lean_record, load_runs
from numcheck.history.series import build_history
from numcheck.history.summary import text_lines
from numcheck.history.summary import to_markdown as history_markdown
from numcheck.report.drift import compare_records, compare_reports
from numcheck.report.drift_result import Rules
from numcheck.report.records import (
    Report,
    ReportError,
    load_report,
    record_to_dict,
    write_json,
)
from numcheck.report.render import speedup_cell
from tests.fleet import GPU_REPORT, quiet_history, rec, timing, write_run
from tests.test_html_report import external_references

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    # The commands append to $GITHUB_STEP_SUMMARY when set: not to a CI job's own summary.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


# -- device classes ----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "cls"), [
    ("cpu", "cpu"),
    ("cuda", "cuda"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100"),
    ("NVIDIA H100 NVL", "H100"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("Tesla V100-SXM2-16GB", "V100"),
    ("NVIDIA GeForce RTX 4090", "RTX-4090"),
    ("NVIDIA RTX A6000", "RTX-A6000"),
    ("NVIDIA L40S", "L40S"),
    ("AMD Instinct MI300X", "MI300X"),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "H100-MIG"),
    ("", "unknown"),
    (None, "unknown"),
    ("weird/../name", "weird-..-name"),
])
def test_device_class_of_a_gpu_name(name: str | None, cls: str) -> None:
    assert devclass.device_class(name) == cls


def test_device_classes_are_folder_names() -> None:
    for name in ("NVIDIA H100 80GB HBM3", "../../etc", "a b/c\\d", "..", "NVIDIA"):
        cls = devclass.device_class(name)
        assert "/" not in cls and "\\" not in cls and not cls.startswith(".") and cls


def test_report_class_from_records_and_environment() -> None:
    skip = rec("bf16_fp32out", status="skip", device="cuda")
    gpu = Report([rec(device="cuda", device_name="NVIDIA H200"), skip],
                 {"device": "cuda", "device_names": ["NVIDIA H200"]})
    assert devclass.report_class(gpu) == "H200"
    # A skipped check carries no device name: it takes the report's class.
    assert devclass.record_class(skip, devclass.environment_class(gpu.environment)) == "H200"
    mixed = Report([rec(device="cuda", device_name="NVIDIA H100 PCIe"),
                    rec("tf32", device="cuda", device_name="NVIDIA A100-SXM4-80GB")],
                   {"device": "cuda", "device_names": ["NVIDIA A100-SXM4-80GB",
                                                       "NVIDIA H100 PCIe"]})
    assert devclass.report_class(mixed) == "A100+H100"
    assert devclass.report_class(Report([], {"device": "cpu"})) == "cpu"
    assert devclass.report_class(load_report(GPU_REPORT)) == "H200"


# -- kept runs (--numcheck-save) ---------------------------------------------------------


def test_saved_name_and_folder(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    report = Report([rec()], {"device": "cpu", "git_commit": sha + "-dirty"},
                    created="2026-12-02T10:15:00+00:00")
    assert store.saved_name(report) == "0123456789ab-dirty-20261202T101500Z.json"
    report.environment["git_commit"] = None
    assert store.saved_name(report) == "nocommit-20261202T101500Z.json"
    root = tmp_path / "project"
    assert store.save_folder(root, save=False, save_dir=None) is None
    assert store.save_folder(root, save=True, save_dir=None) == (
        root / ".numcheck" / "history", True)
    assert store.save_folder(root, save=False, save_dir=tmp_path / "d") == (tmp_path / "d", False)


def test_save_report_never_overwrites_and_ignores_its_folder(tmp_path: Path) -> None:
    report = Report([rec(device="cuda", device_name="NVIDIA H200")], {"device": "cuda"},
                    created="2026-12-02T10:15:00+00:00", exitstatus=0)
    folder = tmp_path / ".numcheck" / "history"
    first = store.save_report(folder, report, mark_ignored=True)
    second = store.save_report(folder, report, mark_ignored=True)
    assert first == folder / "H200" / "nocommit-20261202T101500Z.json"
    assert second == folder / "H200" / "nocommit-20261202T101500Z-2.json"
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    assert load_report(second).records == report.records
    other = tmp_path / "artifacts"
    store.save_report(other, report)
    assert not (other / ".gitignore").exists()  # the user's folder: left as it is


def test_find_reports(tmp_path: Path) -> None:
    a = write_run(tmp_path / "h" / "cpu" / "a.json", [rec()])
    b = write_run(tmp_path / "h" / "H200" / "b.json", [rec()])
    assert store.find_reports([tmp_path / "h", a]) == [(b, False), (a, True)]  # a once
    with pytest.raises(ReportError, match="nope: no such report file or folder"):
        store.find_reports([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="empty: a folder with no \\*.json report in it"):
        store.find_reports([tmp_path / "empty"])


# -- reading many reports ----------------------------------------------------------------


def test_lean_records_drift_as_the_full_ones() -> None:
    """What runs keep of a record is enough for the rules of compare_reports: the same verdicts and
    reasons on a real GPU report against a worse copy of itself."""
    data = json.loads(GPU_REPORT.read_text())
    full = load_report(GPU_REPORT)
    worse = [replace(r, metrics={o: {**m, "calc_diff": m["calc_diff"] * 3}
                                 for o, m in r.metrics.items()},
                     topk=None if r.topk is None else {**r.topk, "recall_min": 0.5})
             for r in full.records]
    lean = [lean_record(r) for r in data["records"]]
    lean_worse = [lean_record(record_to_dict(r)) for r in worse]
    rules = Rules()
    for f, fw, le, lw in zip(full.records, worse, lean, lean_worse, strict=True):
        expect = compare_records(f, fw, rules)
        got = compare_records(le, lw, rules)
        assert (got.status, got.reasons) == (expect.status, expect.reasons)
        assert le.key == f.key and le.verdict == f.verdict and le.closest == f.closest
        assert le.key_metric("calc_diff") == f.key_metric("calc_diff")
    assert any(compare_records(f, w, rules).status == "regression"
               for f, w in zip(full.records, worse, strict=True))


def test_parse_drops_only_what_runs_never_read(tmp_path: Path) -> None:
    text = GPU_REPORT.read_bytes()
    whole, cut = json.loads(text), _parse(text)
    assert len(json.dumps(cut)) < len(json.dumps(whole)) / 2
    dropped = {"per_seed", "casts", "plots", "localization", "violations"}
    for a, b in zip(cut["records"], whole["records"], strict=True):
        assert {k: v for k, v in a.items() if k not in dropped} == \
            {k: v for k, v in b.items() if k not in dropped}
    assert {k: v for k, v in cut.items() if k != "records"} == \
        {k: v for k, v in whole.items() if k != "records"}
    compact = json.dumps(whole).encode()  # another tool's layout: parsed whole
    assert _parse(compact) == whole


def test_the_gate_on_real_reports_is_compare_of_the_whole_files(tmp_path: Path) -> None:
    """The newest-vs-previous gate compares the runs' lean records: on a real GPU report and
    a worse copy of it (checks failing, one gone) the drift compare gives for the files."""
    full = load_report(GPU_REPORT)
    worse = replace(full, records=[replace(r, status="fail") if r.variant == "bf16" else r
                                   for r in full.records[1:]],
                    environment={**full.environment, "git_commit": "f" * 40,
                                 "git_commit_date": "2030-01-01T00:00:00+00:00"})
    write_json(tmp_path / "worse.json", worse)
    (gate,) = build_history(load_runs([GPU_REPORT, tmp_path / "worse.json"], jobs=1).runs).gates
    expect = compare_reports(full, load_report(tmp_path / "worse.json"), baseline=str(GPU_REPORT))
    assert gate.drift == expect
    assert expect.regressions  # and there is something to see


def test_runs_are_ordered_by_commit_date_then_git_then_creation(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "a"], check=True,
                   env={"GIT_COMMITTER_DATE": "2026-01-05T00:00:00+00:00", "PATH": "/usr/bin:/bin"})
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                         check=True).stdout.strip()
    h = tmp_path / "h"
    write_run(h / "1.json", [rec()], commit="c" * 40, date="2026-01-10T00:00:00+00:00")
    write_run(h / "2.json", [rec()], commit=sha, created="2026-02-01T00:00:00+00:00")
    write_run(h / "3.json", [rec()], created="2026-01-01T00:00:00+00:00")
    (h / "bench.json").write_text('{"benchmarks": []}')  # another tool's JSON in the folder
    loaded = load_runs([h], repo=repo, jobs=1)
    assert [r.path.name for r in loaded.runs] == ["3.json", "2.json", "1.json"]
    assert [r.date_source for r in loaded.runs] == ["created", "git log", "report"]
    assert loaded.runs[1].date == "2026-01-05T00:00:00+00:00"
    assert loaded.skipped == [h / "bench.json"]
    # Without the repository the commit's date is not known: creation time.
    assert load_runs([h / "2.json"], repo=None, jobs=1).runs[0].date_source == "created"


# -- series, moves and the newest-vs-previous gate ----------------------------------------


def _history_folder(tmp_path: Path) -> Path:
    """Five commits on the CPU and three on an H200: the bf16 check's calc_diff grows 1.6x
    on the CPU at commit 3 (and stays), the failing check keeps failing, the H200's speedup
    drops for certain at its last run."""
    h = tmp_path / "h"
    for i in range(5):
        sha = str(i + 1) * 40
        date = f"2026-01-0{i + 1}T00:00:00+00:00"
        cpu = [rec(calc_diff=1.6e-6 if i >= 2 else 1e-6),
               rec("tf32", calc_diff=0.0, recall=None),
               rec("bad", status="fail", calc_diff=1e-3)]
        write_run(h / "cpu" / f"{i}.json", cpu, commit=sha, date=date)
        if i >= 2:
            gpu = [rec(device="cuda", device_name="NVIDIA H200",
                       timing=timing(1.3 if i < 4 else 1.1))]
            write_run(h / "H200" / f"{i}.json", gpu, commit=sha, date=date, device="cuda")
    return h


def test_series_marks_the_first_move_and_the_gate_compares_the_newest_runs(
        tmp_path: Path) -> None:
    h = build_history(load_runs([_history_folder(tmp_path)], jobs=1).runs, Rules())
    assert h.classes == ["cpu", "H200"]
    assert len(h.ticks) == 5 and h.xs == [0, 1, 2, 2, 3, 3, 4, 4]
    moved = {s.label: s for s in h.moved}
    assert set(moved) == {"indexer::tiny::bf16"}
    first = moved["indexer::tiny::bf16"].first_moves()
    assert first["cpu"].x == 2 and first["cpu"].status == "regression"
    assert "logits.calc_diff 1e-06 -> 1.6e-06" in first["cpu"].reasons[0]
    assert first["H200"].x == 4 and first["H200"].reasons[0].startswith("speedup 1.3x -> 1.1x")
    # The check that fails at every commit is not a move at every commit.
    bad = next(s for s in h.series if s.key[2] == "bad")
    assert bad.moves == []
    # Newest vs previous: the CPU's last two runs agree; the H200's speedup fell.
    gates = {g.device_class: g for g in h.gates}
    assert gates["cpu"].drift is not None
    assert [r for r in gates["cpu"].drift.regressions] == [
        "indexer::tiny::bad[cpu]: verdict FAIL (was FAIL)"]
    assert any(line.startswith("[H200] indexer::tiny::bf16[cuda]: speedup")
               for line in h.regressions)
    assert not h.passed
    lines = text_lines(h)
    assert lines[0].startswith("numcheck history: 8 run(s) (2026-01-01 .. 2026-01-05), 2 "
                               "device class(es) (cpu, H200), 3 checks; 1 moved; newest vs "
                               "previous: FAIL")
    assert "REGRESSION [H200] indexer::tiny::bf16[cuda]: speedup 1.3x -> 1.1x" in \
        "\n".join(lines)
    md = history_markdown(h)
    assert "### Checks that moved beyond the drift rules" in md and "| indexer::tiny::bf16 |" in md


def test_gate_is_exactly_compare_of_the_two_newest_reports(tmp_path: Path) -> None:
    folder = _history_folder(tmp_path)
    h = build_history(load_runs([folder], jobs=1).runs, Rules(calc_diff_factor=3))
    gate = next(g for g in h.gates if g.device_class == "cpu")
    assert gate.drift == compare_reports(
        load_report(folder / "cpu" / "3.json"), load_report(folder / "cpu" / "4.json"),
        Rules(calc_diff_factor=3), baseline=str(folder / "cpu/3.json"))


def test_one_run_per_class_has_no_gate(tmp_path: Path) -> None:
    write_run(tmp_path / "a.json", [rec()], commit="a" * 40, date="2026-01-01T00:00:00+00:00")
    h = build_history(load_runs([tmp_path], jobs=1).runs)
    assert h.passed and h.gates[0].previous is None and h.moved == []
    assert "only one run" in "\n".join(text_lines(h))


# -- the device matrix -------------------------------------------------------------------


def test_matrix_flags_verdicts_that_differ_across_devices(tmp_path: Path) -> None:
    write_run(tmp_path / "cpu-old.json", [rec("bf16", status="fail")], commit="1" * 40,
              date="2026-01-01T00:00:00+00:00")
    write_run(tmp_path / "cpu.json", [rec("bf16"), rec("tf32"), rec("fused")], commit="2" * 40,
              date="2026-01-02T00:00:00+00:00")
    gpu = [rec("bf16", device="cuda", device_name="NVIDIA B200", timing=timing(1.2)),
           rec("tf32", device="cuda", device_name="NVIDIA B200", status="fail"),
           rec("fused", device="cuda", status="skip")]
    write_run(tmp_path / "b200.json", gpu, commit="2" * 40, date="2026-01-02T00:00:00+00:00",
              device="cuda", device_names=["NVIDIA B200"])
    m = build_matrix(load_runs([tmp_path], jobs=1).runs)
    assert m.classes == ["cpu", "B200"]
    assert m.sources["cpu"].path.name == "cpu.json"  # the newest CPU run, not cpu-old
    assert [r.label for r in m.rows] == ["indexer::tiny::tf32", "indexer::tiny::bf16",
                                        "indexer::tiny::fused"]
    assert [r.differs for r in m.rows] == [True, False, False]  # a skip is not a verdict
    assert cell_text(m.rows[1].cells["B200"]) == "PASS 50% 1.00e-06 1.20x [1.19, 1.21]"
    assert cell_text(m.rows[2].cells["B200"]) == "SKIP" and cell_text(None) == "-"
    md = to_markdown(m)
    assert md.startswith("## numcheck matrix: 3 checks on 2 device class(es) (cpu, B200); 1 "
                         "verdict(s) differ across devices")
    assert "| indexer::tiny::tf32 | yes | PASS 50% 1.00e-06 | FAIL 50% 1.00e-06 |" in md
    page = to_html(m)
    assert external_references(page) == [] and "Content-Security-Policy" in page
    assert page.count('class="differs"') == 1


def test_matrix_shows_a_speedup_as_the_summary_table_does(tmp_path: Path) -> None:
    """An ungated speedup whose interval never got narrow is 'too noisy', never a bare
    number (docs/speed.md), in the matrix as in the run's own summary table: the runs' lean
    records keep what that rule reads."""
    noisy = {**timing(1.05, 0.1, None), "gate": "not gated", "stopped": "time cap"}
    write_run(tmp_path / "cpu.json", [rec("bf16", timing=timing(1.2)),
                                      rec("tf32", timing=noisy)], commit="2" * 40,
              date="2026-01-02T00:00:00+00:00")
    m = build_matrix(load_runs([tmp_path], jobs=1).runs)
    cells = {r.key[2]: r.cells["cpu"] for r in m.rows}
    assert cell_text(cells["bf16"]) == "PASS 50% 1.00e-06 1.20x [1.19, 1.21]"
    assert cell_text(cells["tf32"]) == "PASS 50% 1.00e-06 too noisy [0.95, 1.15]"
    assert cell_text(cells["tf32"]).split(" ", 3)[-1] == speedup_cell(cells["tf32"])
    assert "<br>too noisy [0.95, 1.15]</td>" in to_html(m)


def test_an_expected_failure_reads_as_caught_not_as_a_share_of_its_budget(
        tmp_path: Path) -> None:
    """Issue 33: a known-bad variant's cell read ``XFAIL 286814%``. It shows the violation
    that still catches it; a failure far past its budget reads as a multiple of it."""
    xfail = replace(rec("bf16_roundtrip", op="mhc_pre", status="xfail"), closest={
        "output": "casts", "metric": "cast_bytes_ratio", "value": 2868.14, "limit": 1.0})
    fail = replace(rec("bf16", closest=2868.14), status="fail")
    lost = replace(rec("tf32", status="xfail"), closest={
        "output": "topk", "metric": "tie_recall_min", "value": 0.9688, "limit": 1.0})
    write_run(tmp_path / "cpu.json", [xfail, fail, lost], commit="2" * 40,
              date="2026-01-02T00:00:00+00:00")
    cells = {r.key[2]: r.cells["cpu"] for r in build_matrix(load_runs([tmp_path], jobs=1).runs)
             .rows}
    assert cell_text(cells["bf16_roundtrip"]) == \
        "XFAIL (caught: casts.cast_bytes_ratio 2.87e+03 > 1) 1.00e-06"
    assert cell_text(cells["tf32"]) == "XFAIL (caught: topk.tie_recall_min 0.969 < 1) 1.00e-06"
    assert cell_text(cells["bf16"]) == "FAIL 2,868x 1.00e-06"
    page = to_html(build_matrix(load_runs([tmp_path], jobs=1).runs))
    assert "%" not in page.split("casts.cast_bytes_ratio")[0].rsplit("<td>", 1)[1]
    assert "caught: casts.cast_bytes_ratio 2.87e+03 &gt; 1" in page


# -- the page ----------------------------------------------------------------------------


@pytest.mark.parametrize("plots", [False, True])
def test_history_page_is_self_contained_and_marks_moves(tmp_path: Path, plots: bool) -> None:
    if plots:
        pytest.importorskip("matplotlib", reason="the html extra (matplotlib) is not installed")
    h = build_history(load_runs([_history_folder(tmp_path)], jobs=1).runs)
    page = render_history(h, plots=plots, jobs=1)
    assert external_references(page) == [] and "Content-Security-Policy" in page
    assert "Checks that moved beyond the drift rules" in page
    assert "3333333333" in page  # the first move's commit
    # A figure for the check that moved; the two whose figures held still (a calc_diff of 0
    # and a failure, the same in every run) are a row each of the last table.
    assert page.count("<img ") == (1 if plots else 0)
    assert page.count('<tr id="check-') == 2 and "Checks that held still" in page
    for series in h.series:
        assert series.label in page


def test_plots_mark_the_commit_and_do_not_depend_on_what_was_drawn_before(
        tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the html extra (matplotlib) is not installed")
    from numcheck.history.page import colors, plot_data
    from numcheck.history.svgseries import draw_check

    h = build_history(load_runs([_history_folder(tmp_path)], jobs=1).runs)
    palette = colors(h)
    moved = plot_data(h, h.moved[0], palette)
    other = plot_data(h, next(s for s in h.series if not s.moves), palette)
    assert [p.title.split(" ")[0].rstrip(",") for p in moved.panels] == [
        "calc_diff", "closest", "recall_min", "speedup"]
    assert moved.marks == [(2, "3333333", "cpu"), (4, "5555555", "H200")]
    assert [p.budget for p in moved.panels if p.title == "calc_diff"] == [
        [(float(x), 1e-5) for x in range(5)]]
    first = draw_check(moved)
    draw_check(other)
    assert draw_check(moved) == first
    assert "3333333" in first and "5555555" in first and "speedup_min" in first


def test_checks_that_held_still_are_rows_and_figures_span_the_page(tmp_path: Path) -> None:
    """Issue 33: a figure took a quarter of the page width, and each check with flat lines
    (14 of them: 5,000 px) or an expected failure took a full panel."""
    pytest.importorskip("matplotlib", reason="the html extra (matplotlib) is not installed")
    from numcheck.history.svgseries import FIG_WIDTH

    h = build_history(load_runs([quiet_history(tmp_path, 14)], jobs=1).runs)
    page = render_history(h, plots=True, jobs=1)
    # One figure: the check that moved. The 14 others are one row each.
    assert page.count("<img ") == 1
    quiet = page.split("<h2>Checks that held still</h2>")[1]
    assert quiet.count('<tr id="check-') == 14
    assert "indexer::tiny::v12" in quiet and "indexer::tiny::tf32" not in quiet
    assert "XFAIL (caught: casts.round_trips 1 &gt; 0)" in quiet
    # What held still in the moved check is a line of text, not a panel.
    assert '<p class="still">held still in every run: budget used 50%</p>' in page
    # The figure is drawn page-wide whatever its panel count, and the page shows it so.
    svg = base64.b64decode(page.split('src="data:image/svg+xml;base64,')[1].split('"')[0])
    assert f'width="{FIG_WIDTH * 72:g}pt"'.encode() in svg
    assert ".plots img{width:100%;height:auto}" in page


def test_a_move_from_zero_is_drawn_from_a_floor_not_as_a_lone_dot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the html extra (matplotlib) is not installed")
    from numcheck.history import svgseries
    from numcheck.history.page import colors, plot_data, split_still

    h = build_history(load_runs([quiet_history(tmp_path, 2)], jobs=1).runs)
    moved = next(s for s in h.series if s.key[2] == "tf32")
    plot, still = split_still(plot_data(h, moved, colors(h)))
    assert [p.short for p in plot.panels] == ["calc_diff"]
    assert [p.short for p in still] == ["budget used"]
    svg = svgseries.draw_check(plot)
    assert "0, drawn at 1e-09" in svg and "left out" not in svg
    _, (ax,) = svgseries._FIGURES[1]
    line = ax.lines[0].get_xydata().tolist()  # the check's line, from the first run on
    assert line[0] == [0.0, 1e-9] and line[-1] == [5.0, 3e-8]
    # An expected failure's share of its budget is not drawn: it misses it by design.
    xfail = next(s for s in h.series if s.key[2] == "roundtrip")
    assert "budget used" not in [p.short for p in plot_data(h, xfail, colors(h)).panels]


def test_thinning_keeps_the_envelope() -> None:
    from numcheck.history.svgseries import MAX_POINTS, envelope, flatten, thin

    flat = [(float(x), 1.0) for x in range(500)]
    assert flatten(flat) == [(0.0, 1.0), (499.0, 1.0)]
    step = [(float(x), 1.0 if x < 300 else 2.0) for x in range(500)]
    assert flatten(step) == [(0.0, 1.0), (299.0, 1.0), (300.0, 2.0), (499.0, 2.0)]
    noisy = [(float(x), float((x * 7919) % 101)) for x in range(1000)]
    thinned = thin(noisy, 1000)
    assert len(thinned) <= 2 * 80 and len(noisy) > MAX_POINTS
    assert min(y for _, y in thinned) == 0.0 and max(y for _, y in thinned) == 100.0
    band = [(float(x), -float(x % 13), float(x % 17)) for x in range(1000)]
    env = envelope(band, 1000)
    assert min(b[1] for b in env) == -12.0 and max(b[2] for b in env) == 16.0


# -- the commands ------------------------------------------------------------------------


def test_history_and_matrix_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _history_folder(tmp_path)
    step = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    out = tmp_path / "out"
    code = main(["history", str(folder), "--html", str(out / "h.html"), "--markdown",
                 str(tmp_path / "h.md"), "--no-plots", "--jobs", "1"])
    assert code == 1  # the H200's newest run lost speed against the one before it
    text = capsys.readouterr().out
    assert "REGRESSION [H200] indexer::tiny::bf16[cuda]: speedup" in text
    assert "numcheck history html written:" in text and (out / "h.html").exists()
    # Only the CPU runs: its newest run keeps failing one check, as compare would say.
    assert main(["history", str(folder / "cpu"), "--jobs", "1"]) == 1
    assert main(["history", str(folder / "cpu"), "--jobs", "1", "--speedup-drop", "0"]) == 1
    assert main(["history", str(folder / "H200" / "2.json"), str(folder / "H200" / "3.json"),
                 "--jobs", "1"]) == 0
    assert main(["matrix", str(folder), "--jobs", "1", "--markdown", str(tmp_path / "m.md"),
                 "--html", str(tmp_path / "m.html")]) == 0
    text = capsys.readouterr().out
    assert "numcheck matrix: 3 checks on 2 device class(es) (cpu, H200)" in text
    summary = step.read_text()
    assert summary.count("## numcheck history: ") == 4
    assert summary.count("## numcheck matrix: ") == 1


@pytest.mark.parametrize("command", ["history", "matrix"])
def test_bad_inputs_give_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             command: str) -> None:
    good = write_run(tmp_path / "good.json", [rec()])
    other = tmp_path / "other.json"
    other.write_text('{"benchmarks": []}')
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**json.loads(good.read_text()), "schema_version": 99}))
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": "numcheck-report", ')
    cases = [
        (tmp_path / "missing.json", "missing.json: no such report file or folder"),
        (other, "other.json: not a numcheck report"),
        (old, "old.json: schema version 99; this numcheck"),
        (broken, "broken.json: not readable as JSON"),
    ]
    for path, message in cases:
        assert main([command, str(good), str(path), "--jobs", "1"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and message in err, err
        assert err.startswith(f"numcheck {command}: ")


# -- --numcheck-save through pytest ------------------------------------------------------


def test_save_keeps_the_run_in_the_history_folder(pytester: pytest.Pytester) -> None:
    from tests.caseproject import make_project, write_goldens

    make_project(pytester)
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-save")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["numcheck run saved: .numcheck/history/cpu/nocommit-*.json"])
    folder = pytester.path / ".numcheck" / "history"
    (saved,) = (folder / "cpu").glob("*.json")
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    report = load_report(saved)
    assert report.passed and len(report.records) == 2
    assert "git_commit_date" in report.environment  # null outside git
    result = pytester.runpytest("--numcheck", "--numcheck-save-dir", "runs")
    result.stdout.fnmatch_lines(["numcheck run saved: runs/cpu/nocommit-*.json"])
    assert not (pytester.path / "runs" / ".gitignore").exists()
    assert len(list((pytester.path / "runs" / "cpu").glob("*.json"))) == 1
    result = pytester.runpytest("--numcheck-save")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--numcheck-save only works together with --numcheck*"])


def test_the_commands_need_no_torch(tmp_path: Path) -> None:
    """merge, matrix and history read reports only: a CPU runner without torch runs them."""
    import sys

    folder = _history_folder(tmp_path)
    code = (
        "import sys\nfrom numcheck.__main__ import main\n"
        f"main(['merge', {str(folder / 'cpu' / '0.json')!r}, '-o', {str(tmp_path / 'm.json')!r}])\n"
        f"main(['matrix', {str(folder)!r}, '--jobs', '1'])\n"
        f"main(['history', {str(folder)!r}, '--jobs', '1', '--no-plots', '--html', "
        f"{str(tmp_path / 'h.html')!r}])\n"
        "print('torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "h.html").exists() and (tmp_path / "m.json").exists()
