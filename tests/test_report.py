"""numcheck.report.records, render.summary_table and numcheck.report.markdown, without pytest plugins."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from numcheck.cases import load_case_file
from numcheck.check.against_golden import run_numerics
from numcheck.check.make_golden import write_golden
from numcheck.check.result import CheckResult
from numcheck.check.run import CaseInputs
from numcheck.goldens.case_golden import load_for_case
from numcheck.numerics.verdict import Violation
from numcheck.ops.registry import get_op
from numcheck.report.environment import environment
from numcheck.report.markdown import headline, to_markdown
from numcheck.report.records import (
    SCHEMA_VERSION,
    Record,
    Report,
    ReportError,
    junit_properties,
    load_report,
    order_records,
    record_from_dict,
    record_from_nodeid,
    record_from_result,
    record_to_dict,
    record_without_verdict,
    write_json,
)
from numcheck.report.render import summary_table

CASE = """
[tiny]
op = "indexer"
shape = { batch = 2, heads = 4, head_dim = 32, max_context = 256, index_topk = 32 }
variants = ["bf16", "tf32"]

[tiny.budget.bf16.logits]
rel_fro = 1e-9
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CheckResult]:
    """bf16 fails a planted-tight rel_fro budget; tf32 passes."""
    root = tmp_path_factory.mktemp("report")
    (root / "indexer.toml").write_text(CASE)
    case = load_case_file(root / "indexer.toml")[0]
    op = get_op("indexer")
    inputs = CaseInputs(op, case)
    path = root / "tiny.safetensors"
    write_golden(path, op, case, "cpu", inputs)
    golden = load_for_case(path, op, case, fingerprint=inputs.fingerprint, regen_hint="regen")
    return {v: run_numerics(op, case, v, "cpu", golden, inputs)
            for v in ("tf32", "bf16")}


def test_record_of_a_pass_and_a_fail(results: dict[str, CheckResult]) -> None:
    ok = record_from_result(results["tf32"], nodeid="cases/indexer.toml::tiny::tf32[cpu]")
    assert (ok.status, ok.reason, ok.verdict, ok.precision) == ("pass", "", "PASS", "tf32")
    assert ok.key == ("indexer", "tiny", "tf32", "cpu")
    assert ok.metrics["logits"]["rel_fro"] == results["tf32"].metric("logits", "rel_fro")
    assert ok.topk is not None and ok.topk["recall_min"] == 1.0
    assert ok.closest is not None and ok.closest["output"] == "logits"
    assert ok.timing is None and ok.casts is None

    bad = record_from_result(results["bf16"])
    worst = results["bf16"].worst()
    assert worst is not None
    assert bad.status == "fail" and bad.reason == worst.describe()
    assert bad.closest is not None and bad.closest["metric"] == worst.metric
    assert bad.budget["logits"]["rel_fro"] == 1e-9


def test_timing_and_casts_sections_come_from_the_result(results: dict[str, CheckResult]) -> None:
    """The record's sections are made at the edge, from the typed parts the gates left."""

    @dataclass
    class Perf:
        device_class: str = "cpu"

        def violations(self) -> list[Violation]:
            return []

        def record_section(self) -> dict[str, float]:
            return {"speedup": 1.5, "ci_low": 1.4, "ci_high": 1.6}

    @dataclass
    class Overhead:
        def as_dict(self) -> dict[str, int]:
            return {"copies": 2, "bytes": 1024}

    result = replace(results["tf32"], perf=Perf(), overhead=Overhead(), numerics_lock_wait_s=0.5)
    rec = record_from_result(result)
    assert rec.timing == {"speedup": 1.5, "ci_low": 1.4, "ci_high": 1.6,
                          "numerics_lock_wait_s": 0.5}
    assert rec.casts == {"copies": 2, "bytes": 1024}
    header, rows = summary_table([rec])
    assert "speedup" in header and rows[0][header.index("speedup")] == "1.50x [1.40, 1.60]"
    assert ("numcheck_speedup", "1.5") in junit_properties(rec)


def test_dict_round_trip_keeps_non_finite_floats(results: dict[str, CheckResult]) -> None:
    rec = record_from_result(results["bf16"])
    rec.metrics["logits"]["max_rel"] = math.inf
    rec.metrics["logits"]["ulp_max"] = math.nan
    data = record_to_dict(rec)
    text = json.dumps(data, allow_nan=False)  # strict JSON: no NaN / Infinity literals
    back = record_from_dict(json.loads(text))
    assert back.metrics["logits"]["max_rel"] == math.inf
    assert math.isnan(back.metrics["logits"]["ulp_max"])
    back.metrics["logits"]["ulp_max"] = rec.metrics["logits"]["ulp_max"] = 0.0
    assert back == rec
    # A case called "inf" stays a name.
    named = replace(rec, case="inf")
    assert record_from_dict(record_to_dict(named)).case == "inf"


def test_the_environment_names_triton_and_its_fma_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    try:
        installed: str | None = metadata.version("triton")
    except metadata.PackageNotFoundError:
        installed = None
    monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION", raising=False)
    env = environment(torch_version="2.13", cuda_version=None, device="cpu",
                      device_names=[], rootdir=tmp_path)
    assert env["triton"] == installed and env["triton_default_fp_fusion"] is None
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "0")
    env = environment(torch_version="2.13", cuda_version=None, device="cpu",
                      device_names=[], rootdir=tmp_path)
    assert env["triton_default_fp_fusion"] == "0"


def test_write_and_load_report(tmp_path: Path, results: dict[str, CheckResult]) -> None:
    recs = [record_from_result(r) for r in results.values()]
    env = environment(torch_version="2.13", cuda_version=None, device="cpu",
                      device_names=["cpu"], rootdir=tmp_path)
    report = Report(recs, env, created="now", exitstatus=1)
    write_json(tmp_path / "r.json", report)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["gate"] == "fail"
    assert data["counts"] == {"pass": 1, "fail": 1, "xfail": 0, "skip": 0, "error": 0, "total": 2}
    assert data["environment"]["git_commit"] is None  # not a git checkout
    back = load_report(tmp_path / "r.json")
    assert back.records == recs and back.exitstatus == 1 and not back.passed
    assert list(tmp_path.iterdir()) == [tmp_path / "r.json"]  # no temp file left


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such report file. Fix: pass the path a run wrote with --numcheck-report"),
        ("{not json", "not readable as JSON"),
        ('{"records": []}', 'not a numcheck report (no "schema": "numcheck-report")'),
        ('{"schema": "numcheck-report", "schema_version": 99, "records": []}',
         "schema version 99; this numcheck 0.1.0 reads version 1. Fix: regenerate the report"),
        ('{"schema": "numcheck-report", "schema_version": 1}', "malformed records"),
    ],
)
def test_bad_report_files(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "base.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ReportError) as info:
        load_report(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)


def _rec(nodeid: str, status: str = "pass") -> Record:
    return Record(id=nodeid, nodeid=nodeid, op="op", case="c", variant=nodeid, device="cpu",
                  status=status)


def test_order_records_follows_collection() -> None:
    recs = [_rec("b"), _rec("zz"), _rec("a")]
    assert [r.nodeid for r in order_records(recs, ["a", "b"])] == ["a", "b", "zz"]


def test_record_without_verdict_and_from_nodeid() -> None:
    skip = record_without_verdict(id="indexer::t::bf16[cpu]", nodeid="n", op="indexer",
                                  case="t", variant="bf16", device="cpu", status="skip",
                                  reason="cuda only")
    assert skip.passed and skip.verdict == "SKIP" and skip.precision == "bf16"
    with pytest.raises(ValueError, match="a skip or an error"):
        record_without_verdict(id="x", nodeid="n", op="", case="t", variant="v", device="cpu",
                               status="pass", reason="")
    crash = record_from_nodeid("cases/indexer.toml::tiny::bf16[cuda]", "worker 'gw1' crashed")
    assert (crash.case, crash.variant, crash.device) == ("tiny", "bf16", "cuda")
    assert crash.status == "error" and crash.verdict == "CRASH" and not crash.passed


def test_junit_properties(results: dict[str, CheckResult]) -> None:
    props = dict(junit_properties(record_from_result(results["bf16"])))
    assert props["numcheck_verdict"] == "FAIL"
    assert props["numcheck_reason"].startswith("logits.rel_fro = ")
    assert float(props["numcheck_calc_diff"]) > 0
    assert float(props["numcheck_recall_min"]) <= 1


def test_markdown_headline_and_order(results: dict[str, CheckResult]) -> None:
    recs = [record_from_result(results["tf32"]), record_from_result(results["bf16"]),
            record_without_verdict(id="indexer::tiny::bf16_fp32out[cpu]", nodeid="x",
                                   op="indexer", case="tiny", variant="bf16_fp32out",
                                   device="cpu", status="skip", reason="cuda | only")]
    report = Report(recs, {"device": "cpu", "torch": "2.13"})
    assert headline(report) == "numcheck: FAIL (1 failed, 1 passed, 1 skipped)"
    md = to_markdown(report)
    assert "- **FAIL** `indexer::tiny::bf16[cpu]`: logits.rel_fro = " in md
    rows = [line for line in md.splitlines() if line.startswith("| indexer::")]
    assert [r.split(" | ")[1] for r in rows] == ["bf16", "tf32", "bf16_fp32out"]
    assert "cuda \\| only" in md  # cells escaped
    assert headline(Report([], {})) == "numcheck: FAIL (no checks ran)"
    assert headline(Report(recs[:1], {}, exitstatus=2)) == (
        "numcheck: FAIL (1 passed, pytest exit status 2)")
    assert headline(Report(recs[:1], {}, exitstatus=0)) == "numcheck: PASS (1 passed)"
