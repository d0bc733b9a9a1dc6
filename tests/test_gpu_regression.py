"""benchmarks/gpu_regression.py's plumbing on the CPU: its tables, and that anything off (or
not run) makes it exit 1. The GPU steps themselves run on the GPU machine only."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import gpu_regression as reg


def test_the_independent_table_flags_a_difference_over_the_tolerance() -> None:
    rows = [{"id": "indexer::p::bf16[cuda]", "numcheck": 1.115, "ci": [1.101, 1.128],
             "independent": 1.12, "diff": 1.12 / 1.115 - 1, "speedup_min": 1.06},
            {"id": "mhc_pre::p::fused[cuda]", "numcheck": 6.8, "ci": [6.7, 6.9],
             "independent": 7.61, "diff": 7.61 / 6.8 - 1, "speedup_min": 6.28},
            {"id": "mhc_pre::p::tf32[cuda]", "numcheck": 1.10, "ci": [1.09, 1.11],
             "independent": 1.05, "diff": 1.05 / 1.10 - 1, "speedup_min": 1.0}]
    lines = reg.independent_table(rows, 0.03).splitlines()
    assert "+0.4%" in lines[1] and lines[1].endswith("-")  # no burst figure, no clock, no flag
    assert "+11.9%" in lines[2] and lines[2].endswith("numcheck lower by over 3%")
    assert "-4.5%" in lines[3] and lines[3].endswith("OFF")  # numcheck's the higher one


def test_the_independent_timer_is_off_when_the_verdicts_disagree() -> None:
    row = {"numcheck": 1.07, "independent": 1.045, "diff": 1.045 / 1.07 - 1}
    assert reg.judge({**row, "speedup_min": 1.05}, 0.03) == "off"  # 1.07 passes, 1.045 not
    assert reg.judge({**row, "speedup_min": 1.0}, 0.03) == "ok"
    assert reg.judge({"numcheck": 6.7, "independent": 7.9, "diff": 7.9 / 6.7 - 1,
                      "speedup_min": 6.28}, 0.03) == "conservative"


def _clock(mhz: float, *reasons: str) -> dict[str, object]:
    return {"median_mhz": mhz, "min_mhz": mhz, "reasons": list(reasons),
            "throttled": "sw_power_cap" in reasons}


def test_a_sustained_figure_below_numcheck_is_excused_only_by_a_lowered_clock() -> None:
    # the H100's bf16 prefill GEMM: 15.94x in numcheck's ~1 ms samples, 14.07x sustained
    row = {"id": "linear::p::bf16[cuda]", "numcheck": 15.94, "ci": [15.83, 16.05],
           "independent": 14.07, "diff": 14.07 / 15.94 - 1, "speedup_min": 15.1,
           "burst": 15.9, "burst_diff": 15.9 / 15.94 - 1,
           "clock_ref": _clock(1980), "clock_var": _clock(1755, "sw_power_cap")}
    assert reg.judge(row, 0.03) == "throttled"
    assert "sustained load lowers" in reg.independent_table([row], 0.03)
    # every part of the explanation is needed
    assert reg.judge({**row, "clock_var": _clock(1755)}, 0.03) == "off"  # no reason given
    assert reg.judge({**row, "clock_var": _clock(1980, "sw_power_cap")}, 0.03) == "off"
    assert reg.judge({**row, "clock_var": None}, 0.03) == "off"  # no NVML
    assert reg.judge({k: v for k, v in row.items() if k not in ("burst", "burst_diff")},
                     0.03) == "off"  # an old report without the burst timer
    # the burst timer disagreeing is off whatever the clock says: a bias in numcheck's timer
    assert reg.judge({**row, "burst": 15.0, "burst_diff": 15.0 / 15.94 - 1}, 0.03) == "off"
    assert reg.judge({**row, "speedup_min": 15.92, "burst": 15.91,
                      "burst_diff": 15.91 / 15.94 - 1}, 0.03) == "off"  # other side


def test_the_summary_says_pass_only_when_every_step_is_ok() -> None:
    ok = [reg.Step("gate", True, 70, "93 checks"), reg.Step("unit", True, 90, "1047 passed")]
    assert reg.summary_table(ok, 160).splitlines()[-1] == "GPU regression run: PASS (160 s)"
    off = [*ok, reg.Step("perf-2", False, 41, "failed: x")]
    table = reg.summary_table(off, 201).splitlines()
    assert table[-2].startswith("perf-2") and "OFF" in table[-2]
    assert table[-1] == "GPU regression run: FAIL (201 s)"


def test_a_run_with_a_report_is_judged_by_its_records(tmp_path: Path) -> None:
    """The gate, each perf run and every optional pytest step: ok only with exit code 0 and
    no failed or erroring record; the failed ones named."""
    from tests.fleet import rec, write_run

    report = write_run(tmp_path / "r.json", [rec("bf16"), rec("tf32", status="fail"),
                                             rec("fused", status="skip"),
                                             rec("mine", status="xfail")])
    assert reg.report_verdict(report, 1, "") == (
        False, "rc 1: 4 checks: 1 pass, 1 fail, 1 xfail, 1 skip; failed: indexer::tiny::tf32[cpu]")
    ok = write_run(tmp_path / "ok.json", [rec("bf16"), rec("fused", status="skip")])
    assert reg.report_verdict(ok, 0, "") == (True, "rc 0: 2 checks: 1 pass, 1 skip")
    assert reg.report_verdict(ok, 2, "") == (False, "rc 2: 2 checks: 1 pass, 1 skip")
    assert reg.report_verdict(tmp_path / "none.json", 4, "a\nERROR: usage") == (
        False, "rc 4, no report: a | ERROR: usage")


def test_the_independent_step_judges_each_speedup_against_its_checks_threshold(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The independent timer's rows carry no threshold: the step takes each check's
    speedup_min from the perf report, so a timer that puts the speedup on the other side of
    it turns the step off although the two differ by under the tolerance."""
    import json

    from tests.fleet import rec, timing, write_run

    perf = write_run(tmp_path / "perf-3.json", [
        rec("bf16", device="cuda", timing=timing(1.07, speedup_min=1.05)),
        rec("tf32", device="cuda", timing=timing(1.07, speedup_min=1.0))])
    ids = ["indexer::tiny::bf16[cuda]", "indexer::tiny::tf32[cuda]"]

    def fake_sh(self: object, name: str, cmd: list[str], limit: float,
                **_: object) -> tuple[int, str, float]:
        assert cmd[1:5] == ["-m", "benchmarks.speed.speed_gate", "independent", str(perf)]
        Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps([
            {"id": i, "numcheck": 1.07, "ci": [1.06, 1.08], "independent": 1.045,
             "diff": 1.045 / 1.07 - 1} for i in ids]))
        return 0, "", 0.0
    monkeypatch.setattr(reg.Run, "sh", fake_sh)
    (tmp_path / "work").mkdir()
    run = reg.Run(tmp_path, tmp_path / "work", 100)
    reg.step_independent(run, perf, 0.03)
    (step,) = run.steps
    assert not step.ok
    assert step.detail == ("0/2 gated speedups within 2%, largest -2.3% "
                           "(indexer::tiny::bf16[cuda]); OFF: indexer::tiny::bf16[cuda]")


def test_a_step_that_cannot_run_makes_the_run_fail(tmp_path: Path) -> None:
    assert reg.main(["--out", str(tmp_path), "--steps", "independent"]) == 1
    summary = (tmp_path / "summary.txt").read_text()
    assert "independent  OFF" in summary and "no perf report to re-time" in summary
    assert (tmp_path / "regression.tgz").exists()


def test_unknown_steps_are_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        reg.main(["--out", str(tmp_path), "--steps", "gate,coffee"])
    assert exc.value.code == 2


# --- the optional steps (the evidence runs the lettered scripts made) ------------------------

def _opts(*argv: str) -> object:
    return reg.build_parser().parse_args(["--device", "cpu", *argv])


def test_the_default_run_is_the_six_steps_and_nothing_more() -> None:
    assert reg.STEPS == ("env", "install", "gate", "perf", "unit", "independent")
    assert reg.build_parser().parse_args([]).steps == ",".join(reg.STEPS)
    assert not set(reg.EXTRA_NAMES) & set(reg.STEPS)
    assert len(set(reg.EXTRA_NAMES)) == len(reg.EXTRAS)


def test_every_optional_step_runs_something_that_exists(tmp_path: Path) -> None:
    import importlib.util

    opts = _opts()
    for extra in reg.EXTRAS:
        cmd = extra.command(opts, tmp_path)
        assert cmd[0] == sys.executable, extra.name
        if cmd[1] == "-m":
            assert importlib.util.find_spec(cmd[2]) is not None or cmd[2] == "pip", extra.name
        else:
            assert (reg.ROOT / cmd[1]).is_file(), (extra.name, cmd[1])
        assert (reg.ROOT / extra.cwd).is_dir() and extra.limit_s <= 545, extra.name
        # --device reaches every step that takes one (cpu here: the plumbing on a CPU)
        assert "cuda" not in cmd, (extra.name, cmd)
        assert extra.name in reg.list_steps()


def _fake(extra: str, script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``extra``'s command replaced by a Python one-liner run in the work folder's place."""
    spec = next(e for e in reg.EXTRAS if e.name == extra)
    fake = replace(spec, command=lambda o, w: [sys.executable, "-c",
                                                               script.replace("W", repr(str(w)))])
    monkeypatch.setattr(reg, "EXTRAS", tuple(fake if e.name == extra else e
                                             for e in reg.EXTRAS))


def test_a_false_failure_turns_the_step_off(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"case": "mhc_pre::t", "variant": "bf16", "seed": 11000, "passed": True,
             "honest": False},
            {"case": "mhc_pre::t", "variant": "honest_split_k2", "seed": 11003, "passed": False,
             "honest": True}]
    _fake("false-fail", "import json, pathlib; pathlib.Path(W, 'false-failures.json')"
          f".write_text(json.dumps({{'false_failures': {rows!r}}}))", monkeypatch)
    assert reg.main(["--out", str(tmp_path), "--steps", "false-fail", "--device", "cpu"]) == 1
    line = " ".join((tmp_path / "summary.txt").read_text().splitlines()[1].split())
    assert line == ("false-fail OFF 0s false failures: shipped 0 of 1, honest families 1 of 1; "
                    "mhc_pre::t::honest_split_k2 seed 11003")


def test_the_catch_step_wants_every_bug_of_twice_the_honest_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(fresh: list[dict[str, object]]) -> str:
        data = {"shipped_catch": [{"caught": True}], "fresh_catch": fresh}
        _fake("catch", f"import json, pathlib; pathlib.Path(W, 'catch.json')"
              f".write_text(json.dumps({data!r}))", monkeypatch)
        reg.main(["--out", str(tmp_path), "--steps", "catch", "--device", "cpu"])
        return " ".join((tmp_path / "summary.txt").read_text().splitlines()[1].split())
    small_miss = {"bug": "mhc_pre::sinkhorn_row_last", "seed": 11001, "caught": False,
                  "own_error": 0.9}
    caught = {"bug": "indexer::no_kv_scale", "seed": 11000, "caught": True, "own_error": 40.0}
    assert run([small_miss, caught]).startswith(
        "catch ok 0s shipped cases 1/1, fresh seeds 1/2, own error >= 2x 1/1")
    big_miss = {**small_miss, "own_error": 2.5}
    assert run([big_miss, caught]).endswith(
        "own error >= 2x 1/2; missed: mhc_pre::sinkhorn_row_last seed 11001")


def test_the_speed_evidence_step_wants_every_run_clean_and_both_slowdowns_caught(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fresh run of the perf suite: no failed check, the ~5%-slowed variant caught (its
    xfail, with bf16 passing the same threshold) and the round trip caught; one run short of
    any turns the step off."""
    def run(lines: list[dict[str, object]]) -> str:
        _fake("speed-evidence", "import json, pathlib; d = pathlib.Path(W, 'speed'); "
              f"d.mkdir(exist_ok=True); (d / 'evidence-runs.json').write_text(json.dumps("
              f"{lines!r}))", monkeypatch)
        reg.main(["--out", str(tmp_path), "--steps", "speed-evidence", "--device", "cpu"])
        return " ".join((tmp_path / "summary.txt").read_text().splitlines()[1].split())
    clean = {"failed": [], "slowed_caught": True, "roundtrip": "xfail"}
    assert run([clean, clean]) == ("speed-evidence ok 0s 2 runs: 0 failed checks in 2/2, "
                                   "slowed variant caught 2/2, round trip caught 2/2")
    for off, counts in (
            ({"slowed_caught": False}, "2/2, slowed variant caught 1/2, round trip caught 2/2"),
            ({"roundtrip": "pass"}, "2/2, slowed variant caught 2/2, round trip caught 1/2"),
            ({"failed": ["mhc_pre::p::fused[cuda]"]},
             "1/2, slowed variant caught 2/2, round trip caught 2/2")):
        assert run([clean, {**clean, **off}]) == (
            f"speed-evidence OFF 0s 2 runs: 0 failed checks in {counts}")
    assert run([]).startswith("speed-evidence OFF 0s rc 0, no run finished")


def test_the_html_step_wants_every_check_on_the_page(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fleet import rec, write_run

    report = write_run(tmp_path / "r.json", [rec("bf16"), rec("tf32")])

    def run(page: str) -> str:
        _fake("html", f"import shutil, pathlib; shutil.copy({str(report)!r}, "
              f"W + '/html-report.json'); pathlib.Path(W, 'report.html').write_text({page!r})",
              monkeypatch)
        reg.main(["--out", str(tmp_path / "out"), "--steps", "html", "--device", "cpu"])
        return " ".join((tmp_path / "out" / "summary.txt").read_text().splitlines()[1].split())
    both = "<svg>indexer::tiny::bf16[cpu]</svg> indexer::tiny::tf32[cpu]"
    assert run(both) == "html ok 0s rc 0: 2 checks, page 0.00 MB, 1 plots"
    assert run("<svg>indexer::tiny::bf16[cpu]</svg>") == (
        "html OFF 0s rc 0: 2 checks, page 0.00 MB, 1 plots; not on it: "
        "['indexer::tiny::tf32[cpu]']")


def test_a_step_killed_at_its_limit_is_off_and_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake("fidelity", "import sys, time; print('timing', flush=True); sys.stdout.buffer.write("
          "'µs'.encode()[:1]); sys.stdout.flush(); print('fidelity: do_bench unavailable', "
          "file=sys.stderr, flush=True); time.sleep(30)", monkeypatch)
    spec = next(e for e in reg.EXTRAS if e.name == "fidelity")
    monkeypatch.setattr(reg, "EXTRAS", tuple(
        replace(e, limit_s=1) if e.name == "fidelity" else e
        for e in reg.EXTRAS))
    assert spec.limit_s > 1
    assert reg.main(["--out", str(tmp_path), "--steps", "fidelity", "--device", "cpu"]) == 1
    assert "fidelity  OFF" in (tmp_path / "summary.txt").read_text()
    log = (tmp_path / "regression" / "fidelity.txt").read_text()
    assert "[killed after 1 s]" in log
    # What it printed before the kill stays in its log: both streams, even a character cut
    # in two by the kill.
    assert "timing\n\ufffd" in log and "fidelity: do_bench unavailable" in log


def test_speed_calib_keeps_the_written_file_and_restores_the_trees(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    (tree / "cases").mkdir(parents=True)
    (tree / "cases" / "perf.toml").write_text("[a]\nop = 'x'\n")
    monkeypatch.setattr(reg, "ROOT", tree)
    _fake("speed-calib", "import pathlib; p = pathlib.Path('cases/perf.toml'); "
          "p.write_text(p.read_text() + 'speedup_min = 1\\n'); "
          "print('numcheck calibrate: suggested speedup_min (cuda, 5 runs each)')", monkeypatch)
    out = tmp_path / "out"
    assert reg.main(["--out", str(out), "--steps", "speed-calib", "--device", "cpu"]) == 0
    assert (tree / "cases" / "perf.toml").read_text() == "[a]\nop = 'x'\n"
    assert (out / "regression" / "perf.toml").read_text().endswith("speedup_min = 1\n")


def test_the_xdist_step_compares_results_not_where_or_how_long_a_check_ran(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Serial and xdist records differ in worker, device index and first-call seconds (every
    check's, from one run to the next): the same results. A metric that differs is not."""
    from tests.fleet import rec, write_run

    serial = [replace(rec(v, device="cuda", device_name="NVIDIA H200"), first_call_s=0.5)
              for v in ("bf16", "tf32")]
    where = [replace(r, worker=f"gw{i}", device_index=i, first_call_s=0.05 * (i + 1))
             for i, r in enumerate(serial)]
    work = tmp_path / "out" / "regression"
    commit = {"commit": "a" * 40, "device": "cuda"}
    write_run(work / "gate.json", serial, **commit)

    def run(records: list[object]) -> str:
        write_run(tmp_path / "xdist.json", records, **commit)
        _fake("xdist", f"import shutil; shutil.copy({str(tmp_path / 'xdist.json')!r}, "
              "W + '/gate-xdist.json')", monkeypatch)
        reg.main(["--out", str(tmp_path / "out"), "--steps", "xdist", "--device", "cpu"])
        return " ".join((tmp_path / "out" / "summary.txt").read_text().splitlines()[1].split())

    assert run(where) == ("xdist ok 0s rc 0: 2 checks: 2 pass; records as serial: True; "
                          "compare rc 0")
    worse = [where[0], replace(where[1], metrics={"logits": {"calc_diff": 2e-6,
                                                             "rel_fro": 1e-3}})]
    line = run(worse)
    assert line.startswith("xdist OFF 0s rc 0: 2 checks: 2 pass; records as serial: False "
                           "(numcheck merge: gate.json and gate-xdist.json: both hold the check "
                           "indexer::tiny::tf32[cuda] with different results (metrics: ")
    assert line.endswith("compare rc 1")  # calc_diff 2x on the same device: drift too


def test_the_honest_table_names_the_worst_member() -> None:
    data = {"cases": {"mhc_pre::a": {"tf32": {"by_variant": {
        "tf32": {"mixes": {"max_err_ratio": 1.0, "calc_diff": 2e-8}},
        "gemm_triton_tf32": {"mixes": {"max_err_ratio": 1.19, "calc_diff": 1.2e-7}}}}}}}
    assert reg.honest_table(data).splitlines()[-1] == (
        "| mhc_pre | tf32 | mixes | 1.19 (gemm_triton_tf32) | 1.2e-07 (gemm_triton_tf32) |")


@pytest.mark.slow
def test_an_optional_step_runs_for_real_on_the_cpu(tmp_path: Path) -> None:
    """The casts step (benchmarks/overhead/cast_ratios.py) end to end, with --device cpu."""
    assert reg.main(["--out", str(tmp_path), "--steps", "casts", "--device", "cpu"]) == 0
    assert "casts  ok" in (tmp_path / "summary.txt").read_text()
    assert (tmp_path / "regression" / "casts" / "cast_ratios-cpu.json").exists()


def _quiet_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The judges' table and suggestion sub-commands answered without running them."""
    real = reg.Run.sh

    def sh(self: reg.Run, name: str, cmd: list[str], limit: float,
           **kw: object) -> tuple[int, str, float]:
        if name.startswith(("fp8-families-", "fp8-catch-")):
            return 0, f"{name} printed\n", 0.0
        return real(self, name, cmd, limit, **kw)

    monkeypatch.setattr(reg.Run, "sh", sh)


def _family(failures: list[dict[str, object]], *, expected: bool = False,
            ratio: float = 0.9) -> dict[str, object]:
    return {"members": ["fp8_block", "gemm_e4m3_block_fp32_bf16out"], "worst": {},
            "by_variant": {}, "worst_by": {}, "checks": 20, "errors": [],
            "quant": {"fp8_block": {"sim_ratio": ratio, "n_findings": 0}},
            "failures": failures, "expected": expected}


def test_the_fp8_families_step_is_off_on_a_false_failure_or_a_bound_passed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every honest member of a shipped scheme passes its variant's budget and stays within
    its GEMM bound; a known-bad variant's family fails with it and counts for nothing."""
    _quiet_tables(monkeypatch)

    def run(heads: dict[str, object]) -> str:
        data = {"cases": {"linear::tiny-k384": heads}}
        _fake("fp8-families", f"import json, pathlib; pathlib.Path(W, 'fp8-families.json')"
              f".write_text(json.dumps({data!r}))", monkeypatch)
        reg.main(["--out", str(tmp_path), "--steps", "fp8-families", "--device", "cpu"])
        return " ".join((tmp_path / "summary.txt").read_text().splitlines()[1].split())

    fail = {"member": "gemm_e4m3_block_fp32_fp32out", "seed": 5003, "violations": ["y"]}
    known_bad = _family([fail], expected=True)
    assert run({"fp8_block": _family([]), "nvfp4_emu": known_bad}).startswith(
        "fp8-families ok 0s rc 0: 1 cases, 40 checks, 0 failed, worst GEMM bound ratio 0.9")
    assert run({"fp8_block": _family([fail])}).endswith(
        "1 failed, worst GEMM bound ratio 0.9, 0 errors; failed: "
        "gemm_e4m3_block_fp32_fp32out seed 5003")
    assert run({"fp8_block": _family([], ratio=1.3)}).startswith("fp8-families OFF")


def test_the_fp8_catch_step_wants_every_big_bug_and_no_honest_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _quiet_tables(monkeypatch)

    def run(bugs: list[dict[str, object]], honest: list[dict[str, object]],
            finished: bool = True) -> str:
        data = {"bugs": bugs, "honest": honest, "meta": {"finished": finished}}
        _fake("fp8-catch", f"import json, pathlib; pathlib.Path(W, 'fp8-catch.json')"
              f".write_text(json.dumps({data!r}))", monkeypatch)
        reg.main(["--out", str(tmp_path), "--steps", "fp8-catch", "--device", "cpu"])
        return " ".join((tmp_path / "summary.txt").read_text().splitlines()[1].split())

    small = {"bug": "bug_per_tensor_quantizer", "own_error": 1.1, "caught": False}
    big = {"bug": "bug_shifted_scales", "own_error": 90.0, "caught": True}
    honest = {"member": "fp8_block", "violations": []}
    assert run([small, big], [honest]) == ("fp8-catch ok 0s rc 0: bugs caught 1/2, own error "
                                           ">= 2x 1/1; honest failed 0/1")
    assert run([{**big, "caught": False}], [honest]).startswith("fp8-catch OFF")
    assert run([big], [{**honest, "violations": ["y.rel_fro"]}]).startswith("fp8-catch OFF")
    # Stopped at its limit: what it finished is judged, and the detail says it stopped.
    assert run([{**big, "seed": 5000}], [honest], finished=False).endswith(
        "honest failed 0/1; stopped after 1 seeds")


@pytest.mark.slow
def test_the_fp8_steps_run_for_real_on_the_cpu(tmp_path: Path) -> None:
    """fp8-families (one case, one seed) and fp8-catch (one seed) end to end, --device cpu."""
    assert reg.main(["--out", str(tmp_path), "--steps", "fp8-families,fp8-catch", "--device",
                     "cpu", "--fp8-seeds", "1", "--select", "tiny-k384"]) == 0
    work = tmp_path / "regression"
    assert (work / "fp8-families.json").exists() and (work / "fp8-catch.json").exists()
    summary = (tmp_path / "summary.txt").read_text()
    assert "fp8-families  ok" in summary and "fp8-catch     ok" in summary


def test_the_onboard_step_runs_after_install_and_reports_what_it_wrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--steps env,install,onboard,gate``: onboarding runs before the gate (which then
    holds the machine to what it wrote), with the step's knobs; the detail says what each
    part wrote and the patch to apply."""
    import json

    order: list[str] = []

    def fake_sh(self: object, name: str, cmd: list[str], limit: float,
                **_: object) -> tuple[int, str, float]:
        order.append(name)
        if name == "onboard":
            assert cmd[1:4] == ["-m", "numcheck", "onboard"]
            assert cmd[cmd.index("--speed-runs") + 1] == "4" and "--seeds" in cmd
            out = Path(cmd[cmd.index("--out") + 1])
            (out / "onboard-H100.json").write_text(json.dumps({
                "class": "H100", "device_name": "NVIDIA H100 80GB HBM3",
                "speed": {"written": ["perf-x.perf.bf16.speedup_min.H100: (none) -> 1.4"]},
                "invariance": {"named": ["indexer.toml [a] deterministic"]},
                "numerics": {"checks": 12, "failed": [], "budgets_changed": 0}}))
            (out / "onboard-H100.patch").write_text("")
        return 0, "", 1.0

    monkeypatch.setattr(reg.Run, "sh", fake_sh)
    monkeypatch.setattr(reg, "step_gate", lambda run: order.append("gate"))
    assert reg.main(["--out", str(tmp_path), "--steps", "gate,onboard",
                     "--onboard-runs", "4", "--device", "cpu"]) == 0
    assert order == ["onboard", "gate"]
    summary = (tmp_path / "summary.txt").read_text()
    assert ("onboard  ok         1s  rc 0: class H100 (NVIDIA H100 80GB HBM3): speed 1 "
            "value(s) written; invariance named in 1 key(s); numerics 12 honest checks, 0 "
            "failed, 0 budgets changed; apply: git apply onboard-H100.patch") in summary
