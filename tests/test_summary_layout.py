"""The end-of-run summary: perf-only skips in one line, whole reasons, the tf32-on-CPU note,
the overhead table's title, xfailed in the markdown headline, and the numcheck_device ini key."""

from __future__ import annotations

import pytest

from numcheck.report.markdown import headline, to_markdown
from numcheck.report.records import Record, Report
from numcheck.report.render import summary_table
from numcheck.report.skips import collapse, perf_only_skip
from tests.caseproject import TINY_INDEXER, TINY_MHC, make_project, write_goldens


def _skip(case: str, variant: str, reason: str | tuple[str, dict[str, str]]) -> Record:
    text, perf_only = (reason, None) if isinstance(reason, str) else reason
    return Record(id=f"indexer::{case}::{variant}[cpu]", nodeid=f"n::{case}::{variant}",
                  op="indexer", case=case, variant=variant, device="cpu", status="skip",
                  reason=text, perf_only=perf_only)


def test_perf_only_skips_collapse_into_one_line_per_kind() -> None:
    """The summary counts perf-only skips by the fact their records carry, never by their
    reasons' words: a skip that only reads like one stays a row."""
    records = [
        *(_skip(c, v, perf_only_skip(c, ["cuda"], "cpu", "--numcheck-perf"))
          for c in ("p1", "p2") for v in ("fp32", "bf16", "tf32")),
        *(_skip("p3", v, perf_only_skip("p3", ["cpu"], "cpu", "--numcheck-perf"))
          for v in ("fp32", "bf16")),
        _skip("tiny", "fused", "variant 'fused': triton not installed (No module named 'triton')"),
        _skip("p4", "bf16", "perf-only case 'p4' needs CUDA (a reason alone)"),
    ]
    assert records[0].reason == ("perf-only case 'p1' needs CUDA (it only times the variants "
                                 "at a production shape; no golden)")
    kept, lines = collapse(records)
    assert [r.case for r in kept] == ["tiny", "p4"]
    assert lines == ["6 perf-only checks need CUDA (2 cases; skipped)",
                     "2 perf-only checks run only with --numcheck-perf (1 case; skipped)"]


def test_skip_reasons_appear_whole() -> None:
    reason = "variant 'fused': triton not installed (No module named 'triton'); pip install -e .[fused]"
    _, rows = summary_table([_skip("tiny", "fused", reason)])
    assert reason in rows[0]


def test_markdown_headline_counts_xfailed_and_lists_collapsed_skips() -> None:
    ok = Record(id="a", nodeid="a", op="mhc_pre", case="c", variant="bf16", device="cpu",
                status="pass")
    xfail = Record(id="b", nodeid="b", op="mhc_pre", case="c", variant="bf16_roundtrip",
                   device="cpu", status="xfail", reason="expected failure")
    perf = _skip("p1", "bf16", perf_only_skip("p1", ["cuda"], "cpu", "--numcheck-perf"))
    report = Report(records=[ok, xfail, perf], exitstatus=0)
    assert headline(report) == "numcheck: PASS (1 passed, 1 xfailed, 1 skipped)"
    text = to_markdown(report)
    assert "- 1 perf-only check needs CUDA (1 case; skipped)" in text
    assert "p1" not in text.split("- 1 perf-only")[0]  # no row of its own


def test_cpu_summary_layout(pytester: pytest.Pytester) -> None:
    make_project(pytester, mhc=True, planted=True)
    (pytester.path / "cases" / "mhc.toml").write_text(
        TINY_MHC.replace('"tf32"', '"tf32", "rms_eps_x1000"'))
    (pytester.path / "cases" / "perf.toml").write_text(
        '[perf-x]\nop = "mhc_pre"\nshape = { tokens = 8, hidden = 64 }\n'
        'devices = ["cuda"]\nperf_only = true\nvariants = ["bf16", "tf32"]\n')
    write_goldens(pytester)
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=5, skipped=3)
    result.stdout.fnmatch_lines([
        "indexer::tiny*tf32*cpu*PASS (tf32 = fp32 bit for bit on cpu)",
        "mhc_pre::tiny-mhc*tf32 *cpu*PASS (tf32 = fp32 bit for bit on cpu)",
        "3 perf-only checks need CUDA (1 case; skipped)",
        "*numcheck casts and copies (cast ledger per check; docs/usage.md explains the columns)*",
    ])
    out = result.stdout.str()
    # A tf32 variant that differs from fp32 on the CPU gets no note: its metrics speak.
    assert not any("rms_eps_x1000" in line and "bit for bit" in line for line in out.splitlines())
    assert "perf-x  " not in out  # no SKIP rows of its own


def _device_project(pytester: pytest.Pytester, ini: str) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    (pytester.path / "cases").mkdir()
    (pytester.path / "cases" / "indexer.toml").write_text(
        TINY_INDEXER.format(variants='"tf32"', next_n=1, extra=""))


def test_device_ini_key(pytester: pytest.Pytester) -> None:
    _device_project(pytester, "numcheck_device = cpu")
    result = pytester.runpytest("--numcheck", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["cases/indexer.toml::tiny::tf32[[]cpu[]]"])


def test_device_option_wins_over_the_ini_key(pytester: pytest.Pytester) -> None:
    _device_project(pytester, "numcheck_device = cuda")
    result = pytester.runpytest("--numcheck", "--numcheck-device", "cpu", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["cases/indexer.toml::tiny::tf32[[]cpu[]]"])


def test_bad_device_ini_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _device_project(pytester, "numcheck_device = gpu")
    result = pytester.runpytest("--numcheck")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [("*ini key numcheck_device = 'gpu' in *tox.ini: not a device. Fix: set it to one of "
          "auto, cpu, cuda")])
