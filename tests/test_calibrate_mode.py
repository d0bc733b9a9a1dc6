"""``pytest --numcheck --numcheck-calibrate``: measure, suggest, pool, write; speed proposals.

Through pytester, with a user op registered by a conftest hook (tests/calibration_op.py),
the way a user's own kernels arrive.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import tomllib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.caseproject import NO_CACHE, case_project

needs_tomlkit = pytest.mark.skipif(
    importlib.util.find_spec("tomlkit") is None,
    reason="tomlkit (the calibrate extra) writes case files: pip install 'numcheck[calibrate]'")

CONFTEST = """
def pytest_numcheck_register(registry):
    from tests import calibration_op
    calibration_op.register(registry)
"""

CASE = """\
# Our dot kernels. Budgets are set by hand here; calibration rewrites the values only.

[small]
op = "dot"
description = "8 x 64 @ 64 x 4"
shape = { n = 8, k = 64 }   # tiny on purpose
seeds = [0, 1]
variants = ["bf16", "bf16_splitk", "off"]
expect.off = { fails = ["y.rel_fro", "y.frac_outside"], reason = "planted: 1% too large" }

[small.budget.bf16.y]
rel_fro = 1e-2                      # a first guess
calc_diff = 1e-4                    # also a guess
[small.budget.off.y]
rel_fro = 5e-3                      # the bug must fail this

[other]
op = "dot"
shape = { n = 4 }
variants = ["bf16"]

[exact]
op = "dot"
variants = ["tf32"]
"""


def project(pytester: pytest.Pytester, case: str = CASE) -> Path:
    return case_project(pytester, {"dot.toml": case}, conftest=CONFTEST,
                        addopts=NO_CACHE) / "dot.toml"


def test_user_op_is_calibrated_without_goldens(pytester: pytest.Pytester) -> None:
    from tests import calibration_op as cal

    project(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-calibrate=2", "-k", "small")
    # Measuring is not gating: the planted bug is over its budget, yet nothing fails, and
    # no golden exists.
    result.assert_outcomes(passed=4)
    assert not (pytester.path / "goldens").exists()
    result.stdout.fnmatch_lines([
        "*= numcheck calibrate: suggested budgets (cpu, torch *) =*",
        ("# seeds: each case's own + 2 fresh (1000..1001); reference: fp32 recomputed on cpu "
        "(no golden read)"),
        ("# policy (docs/budgets.md, the headroom rule): errors 2x the worst, max_err_ratio "
         "1.25x, rounded up to 2 digits; recall floors 2x the worst miss; tie bands 2x the "
         "widest near-tie"),
        "",
        "# cases/dot.toml",
        ("# small: fp32 is the reference, computed on cpu like the one it is compared with: "
        "nothing to budget (run on the GPU to budget its drift there)"),
        "[[]small.budget.bf16.y[]]",
        "rel_fro = *# worst * (seed *)",
        "calc_diff = *# worst * (seed *)",
        "frac_outside = *# worst * (seed *)",
        "[[]small.budget.bf16_splitk.y[]]",
        "rel_fro = *",
        "calc_diff = *",
        "frac_outside = *",
        "# small: off is known-bad (expect: y.rel_fro, y.frac_outside): not budgeted",
        ("numcheck calibrate: nothing written; --numcheck-calibrate-write writes these values "
        "into the case files"),
    ])
    assert "[other." not in result.stdout.str()  # -k deselected it
    # The printed worst is the largest rel_fro over seeds 0, 1, 1000, 1001, at its seed.
    params = {"n": 8, "k": 64}
    errors = {s: cal.rel_fro(cal.dot_bf16(cal.dot_inputs(params, s), params)["y"],
                             cal.dot_fp32(cal.dot_inputs(params, s), params)["y"])
              for s in (0, 1, 1000, 1001)}
    seed = max(errors, key=errors.__getitem__)
    line = next(ln for ln in result.stdout.lines if ln.startswith("rel_fro = "))
    assert line.endswith(f"# worst {errors[seed]:.3g} (seed {seed})")


def test_pool_budgets_honest_variants_as_one(pytester: pytest.Pytester) -> None:
    project(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-calibrate=3", "-k", "small",
                                "--numcheck-calibrate-pool", "bf16=bf16,bf16_splitk")
    result.assert_outcomes(passed=4)
    out = result.stdout.lines
    tables = {}
    for i, ln in enumerate(out):
        if ln.startswith("[small.budget."):
            tables[ln.split()[0]] = {
                row.split(" = ")[0]: row.split(" = ")[1].split()[0] for row in out[i + 1:i + 4]}
    assert "[small.budget.bf16.y]  # pooled: worst of bf16, bf16_splitk" in out
    assert "[small.budget.bf16_splitk.y]  # pooled: worst of bf16_splitk, bf16" in out
    # One budget for both: the worst of the two (split-K rounds twice: it is the wider).
    assert tables["[small.budget.bf16.y]"] == tables["[small.budget.bf16_splitk.y]"]
    assert any("(bf16_splitk, seed" in ln for ln in out if ln.startswith("rel_fro"))


def test_pool_member_the_case_does_not_run_is_measured(pytester: pytest.Pytester) -> None:
    project(pytester)
    alone = pytester.runpytest("--numcheck", "--numcheck-calibrate=3", "-k", "other")
    pooled = pytester.runpytest("--numcheck", "--numcheck-calibrate=3", "-k", "other",
                                "--numcheck-calibrate-pool", "bf16=bf16_splitk")

    def rel_fro(result: Any) -> float:
        line = next(ln for ln in result.stdout.lines if ln.startswith("rel_fro = "))
        return float(line.split()[2])

    assert "[other.budget.bf16.y]  # pooled: worst of bf16, bf16_splitk" in pooled.stdout.lines
    assert rel_fro(pooled) > rel_fro(alone)  # split-K's second rounding widens the budget
    bad = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "other",
                             "--numcheck-calibrate-pool", "bf16=bf16_nope")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines([("ERROR: --numcheck-calibrate-pool bf16: op 'dot' has no variant "
                               "'bf16_nope' (its variants: fp32, bf16, bf16_splitk, off, tf32). Fix: "
                               "register it (pytest_numcheck_register) or drop it from the pool")])
    assert "suggested budgets" not in bad.stdout.str()


@needs_tomlkit
def test_write_round_trips_comments(pytester: pytest.Pytester) -> None:
    path = project(pytester)
    before = path.read_text()
    # The hand-set guesses carry no record of what set them: a write that would tighten
    # them is refused, and nothing is written.
    refused = pytester.runpytest("--numcheck", "--numcheck-calibrate=2",
                                 "--numcheck-calibrate-write")
    assert refused.ret == pytest.ExitCode.TESTS_FAILED
    refused.stdout.fnmatch_lines([
        "numcheck calibrate: refused to write; nothing written (exit status 1):",
        ("  - bf16 on small: its tables carry no calibration record (set by hand, or by a tool "
         "the file's header names), and this run would tighten y.rel_fro 0.01 -> *"),
        "    (--numcheck-calibrate-renew sets tables from this run alone)",
    ])
    assert path.read_text() == before
    # (the exact case's floors are refused whatever: the test after next)
    result = pytester.runpytest("--numcheck", "--numcheck-calibrate=2", "-k", "not exact",
                                "--numcheck-calibrate-write", "--numcheck-calibrate-renew")
    result.assert_outcomes(passed=6)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["numcheck calibrate: cases/dot.toml: * value(s) changed",
                                 "  small.budget.bf16.y.rel_fro: 0.01 -> *"])
    after = path.read_text()
    # The run names itself once, in the header, not on the lines it changed.
    (entry,) = provenance(after)
    assert entry.startswith("pytest --numcheck --numcheck-calibrate=2 -k 'not exact' "
                            "--numcheck-calibrate-write --numcheck-calibrate-renew"), entry
    assert entry.endswith(", cpu, torch " + torch_version() + ")"), entry
    assert after.splitlines()[1].startswith("# set by: pytest --numcheck")
    # Every line of the file is still there, in order, comments included: a changed line
    # differs only in its value (its comment stays, at the same column); added lines are
    # budget tables and their keys, and the calibration records (checked below).
    after_lines = [ln for ln in without_records(after).splitlines()
                   if not ln.startswith(("# set by: ", "#   "))]
    ops = difflib.SequenceMatcher(a=before.splitlines(), b=after_lines).get_opcodes()
    old_lines, new_lines = before.splitlines(), after_lines
    replaced = 0
    for tag, i1, i2, j1, j2 in ops:
        assert tag != "delete", old_lines[i1:i2]
        if tag == "equal":
            continue
        olds, news = old_lines[i1:i2], new_lines[j1:j2]
        assert len(olds) <= len(news), (olds, news)
        for old, new in zip(olds, news):
            key, rest = old.split(" = ", 1)
            assert new.startswith(f"{key} = ") and key in ("rel_fro", "calc_diff")
            assert new.index("#") == old.index("#")
            assert new.split("#", 1)[1] == rest.split("#", 1)[1]
            replaced += 1
        for added in news[len(olds):]:
            # (the element-level keys are gated by the defaults row, so they are written too)
            assert added == "" or added.startswith("[") or added.split(" = ")[0] in (
                "rel_fro", "calc_diff", "frac_outside", "max_err_ratio", "max_band_ratio"), added
    assert replaced == 2  # bf16's hand-set rel_fro and calc_diff
    assert "[small.budget.off.y]\nrel_fro = 5e-3                      # the bug must fail this" \
        in after  # the known-bad variant's budget is left alone
    assert "[small.budget.bf16_splitk.y]" in after and "[other.budget.bf16.y]" in after
    data = tomllib.loads(after)
    assert data["small"]["description"] == "8 x 64 @ 64 x 4"
    assert data["small"]["expect"]["off"]["reason"] == "planted: 1% too large"
    # What set each written variant's tables is recorded beside them, for the next run.
    record = data["small"]["provenance"]["bf16"]
    assert record["pool"] == ["bf16"] and record["devices"] == ["cpu"]
    assert (record["seeds"], record["fresh_seeds"], record["first_fresh_seed"]) == ([0, 1], 2,
                                                                                    1000)
    assert record["command"].startswith("pytest --numcheck --numcheck-calibrate=2 ")
    assert "off" not in data["small"]["provenance"]  # known-bad: not budgeted, not recorded
    # A hand-set guess tightened by the measurement is flagged; a new key is not.
    result.stdout.fnmatch_lines([("  small.budget.bf16.y.calc_diff: 0.0001 -> *e-05  (tighter "
                                 "than before)"),
                                 "  small.budget.bf16.y.frac_outside: (none) -> *[0-9]",
                                 ("  small.provenance.bf16: recorded: pool bf16; devices "
                                  "cpu; seeds 0, 1 + 2 fresh (1000..1001)")])
    # The written budgets hold on the case's seeds (the gate), and writing again (the
    # record's pool, seeds and devices: the same evidence) changes nothing.
    pytester.runpytest("--numcheck", "--numcheck-regen").assert_outcomes(passed=7, xfailed=1)
    pytester.runpytest("--numcheck").assert_outcomes(passed=7, xfailed=1)
    again = pytester.runpytest("--numcheck", "--numcheck-calibrate=2", "-k", "not exact",
                               "--numcheck-calibrate-write")
    assert again.ret == pytest.ExitCode.OK
    again.stdout.fnmatch_lines(["numcheck calibrate: cases/dot.toml: 0 value(s) changed"])
    assert path.read_text() == after


def without_records(text: str) -> str:
    """A case file's text without its ``[<case>.provenance.<variant>]`` tables."""
    kept: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("["):
            inside = ".provenance." in line.split("]")[0]
        if not inside:
            kept.append(line)
    return "\n".join(kept).rstrip("\n") + "\n"


def provenance(text: str) -> list[str]:
    """The ``# set by:`` entries of a case file's header, continuation lines joined."""
    entries: list[str] = []
    for line in text.splitlines():
        if line.startswith("# set by: "):
            entries.append(line[len("# set by: "):])
        elif line.startswith("#   ") and entries:
            entries[-1] += " " + line[4:].strip()
        elif not line.startswith("#"):
            break
    return entries


def torch_version() -> str:
    import torch

    return torch.__version__


@needs_tomlkit
def test_a_borrower_never_widens_its_lender_whatever_pool_names_it(
        pytester: pytest.Pytester) -> None:
    """bf16_splitk takes bf16's budgets (budget_like): it is held to bf16's tables, never
    sets them. A write where its measurements would widen them is refused, and so is one
    whose pool names it (issue 44: the pool the old refusal suggested wrote a bug in); the
    one way to write anyway is the recorded override, --numcheck-calibrate-accept."""
    path = project(pytester, CASE.replace(
        '[small.budget.off.y]', '[small.budget.bf16_splitk]\nbudget_like = "bf16"\n'
        '[small.budget.off.y]'))
    before = path.read_text()
    refused = pytester.runpytest("--numcheck", "--numcheck-calibrate=2", "-k", "small",
                                 "--numcheck-calibrate-write", "--numcheck-calibrate-renew")
    assert refused.ret == pytest.ExitCode.TESTS_FAILED
    refused.stdout.fnmatch_lines([
        ("# small: bf16_splitk takes bf16's budgets (budget_like): its measurements must fit "
         "inside that table"),
        "numcheck calibrate: refused to write; nothing written (exit status 1):",
        ("  - bf16_splitk (bf16, takes bf16's budgets) on small: it would widen bf16's table "
         "(y.rel_fro * -> *"),
        ("      it would widen bf16's table: y.rel_fro * -> *. A variant that borrows a budget "
         "is held to it and never sets it, whatever pool names it: fix it; if it is an honest "
         "bf16 implementation that rounds elsewhere, give it tables of its own (remove "
         "budget_like) and calibrate them on its class's honest family"),
    ])
    assert "--numcheck-calibrate-pool bf16=bf16,bf16_splitk" not in refused.stdout.str()
    assert path.read_text() == before
    pooled = pytester.runpytest("--numcheck", "--numcheck-calibrate=2", "-k", "small",
                                "--numcheck-calibrate-pool", "bf16=bf16,bf16_splitk",
                                "--numcheck-calibrate-write", "--numcheck-calibrate-renew")
    assert pooled.ret == pytest.ExitCode.TESTS_FAILED
    pooled.stdout.fnmatch_lines([
        "numcheck calibrate: refused to write; nothing written (exit status 1):",
        "  - bf16_splitk (bf16, takes bf16's budgets) on small: it would widen bf16's table *",
    ])
    assert path.read_text() == before
    result = pytester.runpytest("--numcheck", "--numcheck-calibrate=2", "-k", "small",
                                "--numcheck-calibrate-pool", "bf16=bf16,bf16_splitk",
                                "--numcheck-calibrate-write", "--numcheck-calibrate-renew",
                                "--numcheck-calibrate-accept", "bf16_splitk")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([
        "[[]small.budget.bf16.y[]]  # pooled: worst of bf16, bf16_splitk",
        "rel_fro = *",
        ("# small: bf16_splitk takes bf16's budgets (budget_like): its measurements must fit "
         "inside that table"),
        "numcheck calibrate: cases/dot.toml: * value(s) changed",
    ])
    assert "[[]small.budget.bf16_splitk.y[]]" not in result.stdout.str()
    data = tomllib.loads(path.read_text())
    assert data["small"]["budget"]["bf16_splitk"] == {"budget_like": "bf16"}
    record = data["small"]["provenance"]["bf16"]
    assert record["pool"] == ["bf16"]  # accepted by name, never a member
    assert any(a.startswith("bf16_splitk (--numcheck-calibrate-accept): widens bf16's table")
               for a in record["accepted"]), record["accepted"]
    # Alone (not pooled), bf16's suggestion would be narrower: split-K rounds twice.
    alone = pytester.runpytest("--numcheck", "--numcheck-calibrate=2", "-k",
                               "small and bf16 and not splitk", "--numcheck-calibrate-renew")
    wrote = data["small"]["budget"]["bf16"]["y"]["rel_fro"]
    line = next(ln for ln in alone.stdout.lines if ln.startswith("rel_fro = "))
    assert float(line.split("=")[1].split("#")[0]) < wrote
    # The lender not selected: nothing is suggested for the borrower, and it says why.
    only = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "small and splitk")
    only.stdout.fnmatch_lines([("# small: bf16_splitk takes bf16's budgets (budget_like): "
                                "select bf16 too to budget both: nothing suggested")])


def test_outside_a_cases_folder_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest("--numcheck", "--numcheck-calibrate")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([("ERROR: numcheck: no cases folder at */cases. Fix: create it "
                                 "with a case file (see README 'Writing a case'), or point the "
                                 "numcheck_cases ini key at yours")])


@pytest.mark.parametrize(("args", "message"), [
    (["--numcheck-calibrate"], "ERROR: --numcheck-calibrate only works together with --numcheck"),
    (["--numcheck", "--numcheck-calibrate-write"],
     ("ERROR: --numcheck-calibrate-write only works together with --numcheck-calibrate (or "
     "--numcheck-calibrate-speed=K)")),
    (["--numcheck", "--numcheck-calibrate-speed=3"],
     "ERROR: --numcheck-calibrate-speed times the perf checks: add --numcheck-perf"),
    (["--numcheck", "--numcheck-calibrate", "--numcheck-regen"],
     ("ERROR: calibration measures and gates nothing: run --numcheck-regen on its own, without "
     "the calibration options")),
    (["--numcheck", "--numcheck-calibrate", "--numcheck-calibrate-pool", "bf16"],
     ("ERROR: --numcheck-calibrate-pool 'bf16': expected NAME=V1,V2,... Fix: e.g. "
     "--numcheck-calibrate-pool bf16=bf16,bf16_splitk,bf16_rev")),
    (["--numcheck", "--numcheck-calibrate", "cases/dot.toml"],
     ("*--numcheck-calibrate: expected the number of fresh seeds, got 'cases/dot.toml'. Fix: "
     "write --numcheck-calibrate=N with '=' (or put paths before the option)*")),
])
def test_usage_errors(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    project(pytester)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


# -- speed: K runs of synthetic speedups (no timing here) ---------------------------------

CALLS: dict[str, int] = {}
SPEEDS = {"bf16": [1.22, 1.20, 1.25], "bf16_splitk": [1.01, 0.99, 1.03], "off": [1.0, 1.02, 0.98]}

SPEED_CASE = """\
[small]
op = "dot"
variants = ["bf16", "bf16_splitk", "off"]
expect.off = { fails = ["perf.speedup_min"], reason = "planted: the slow one" }

[small.perf.bf16_splitk]
speedup_min = { cpu = 1.1, H200 = 1.2 }   # from an old run
"""


def fake_measure_perf(op: Any, case: Any, variant: str, device: str, inputs: Any,
                      **_: Any) -> Any:
    """numcheck.check.perf.measure_perf's interface: the next of the variant's SPEEDS."""
    calls = CALLS.setdefault(variant, 0)
    CALLS[variant] = calls + 1
    s = SPEEDS[variant][calls]
    return SimpleNamespace(estimate=SimpleNamespace(median=s, low=s - 0.02, high=s + 0.02))


@needs_tomlkit
def test_speed_proposals_printed_and_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Through sys.modules: an earlier in-process run may have left the package attribute
    # pointing at a module object that pytester has since dropped from sys.modules.
    perfrun = importlib.import_module("numcheck.check.perf")
    CALLS.clear()
    monkeypatch.setattr(perfrun, "measure_perf", fake_measure_perf)
    path = project(pytester, SPEED_CASE)
    result = pytester.runpytest("--numcheck", "--numcheck-perf", "--numcheck-calibrate-speed=3",
                                "--numcheck-calibrate-write")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([
        "*= numcheck calibrate: suggested speedup_min (cpu, 3 runs each) =*",
        ("# rule: lower speedup of the runs (the 10% quantile; the slowest run below 10 runs) x "
        "(1 - 0.05), rounded down to 3 digits; not gated within 5% of 1; known-bad variants "
        "(expect perf.speedup_min) keep failing"),
        "",
        "# cases/dot.toml",
        "[[]small.perf.bf16[]]",
        ("speedup_min = { cpu = 1.14 }    # lower speedup 1.200 x 0.95; runs 1.220 1.200 1.250; "
        "lowest bound 1.180"),
        ("# [[]small.perf.bf16_splitk[]] not gated: lower speedup 0.990 is within 5% of 1; runs "
        "1.010 0.990 1.030; lowest bound 0.970"),
        "[[]small.perf.off[]]",
        ("speedup_min = { cpu = 1.08 }    # known-bad: above its runs (1.020 x 1.05), so it keeps "
        "failing; runs 1.000 1.020 0.980; lowest bound 0.960"),
        "numcheck calibrate: cases/dot.toml: 3 value(s) changed",
    ])
    after = path.read_text()
    assert "speedup_min = { H200 = 1.2 }   # from an old run" in after  # cpu entry removed
    data = tomllib.loads(after)
    assert data["small"]["perf"]["bf16"]["speedup_min"] == {"cpu": 1.14}
    assert data["small"]["perf"]["off"]["speedup_min"] == {"cpu": 1.08}
    from numcheck.cases import load_case_file
    from numcheck.ops import registry
    from tests import calibration_op

    with registry.isolated():
        registry.register(calibration_op.DOT)
        (case,) = load_case_file(path)
    assert case.perf["bf16"].threshold("cpu", "cpu") == 1.14


def test_write_without_tomlkit_says_how_to_install(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    casewriter = importlib.import_module("numcheck.calibrate.casewriter")
    monkeypatch.setattr(casewriter, "have_tomlkit", lambda: False)
    project(pytester)
    result = pytester.runpytest("--numcheck", "--numcheck-calibrate", "--numcheck-calibrate-write")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        ("ERROR: --numcheck-calibrate-write edits case files with tomlkit, which is not "
        "installed. Fix: pip install tomlkit (or the calibrate extra: pip install "
        "'numcheck[calibrate]')")])


def test_runs_on_other_devices_pool_into_one_budget(pytester: pytest.Pytester) -> None:
    import json

    project(pytester)
    first = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "other",
                               "--numcheck-calibrate-json", "out/cpu.json")
    first.stdout.fnmatch_lines([("numcheck calibrate: measurements saved to */out/cpu.json "
                                "(pool them into another run with --numcheck-calibrate-with PATH)")])
    data = json.loads((pytester.path / "out" / "cpu.json").read_text())
    assert {(p["variant"], p["device"]) for p in data["payloads"]} == {("fp32", "cpu"),
                                                                      ("bf16", "cpu")}
    # Stand-in for the same run on a GPU: its bf16 error 3x the CPU's, and its reference
    # differs from the CPU reference (what a GPU's fp32 does).
    for p in data["payloads"]:
        p["device"] = "cuda"
        for worst in p["table"]["y"].values():
            worst[0] = 3 * worst[0] if p["variant"] == "bf16" else 1e-6
    (pytester.path / "out" / "cuda.json").write_text(json.dumps(data))
    cpu_rel = next(float(ln.split()[2]) for ln in first.stdout.lines if ln.startswith("rel_fro"))
    both = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "other",
                              "--numcheck-calibrate-with", "out/cuda.json")
    both.stdout.fnmatch_lines([
        "[[]other.budget.fp32.y[]]",  # the reference, budgeted from its GPU drift only
        "rel_fro = 2e-06             # worst 1e-06 (seed 0)",
        "[[]other.budget.bf16.y[]]  # pooled: worst of bf16 cpu, bf16 cuda",
        "rel_fro = * (bf16 cuda, seed *)",
    ])
    pooled_rel = next(float(ln.split()[2]) for ln in both.stdout.lines
                      if ln.startswith("rel_fro") and "bf16 cuda" in ln)
    assert pooled_rel == pytest.approx(3 * cpu_rel, rel=0.1)
    (pytester.path / "out" / "bad.json").write_text("{}")
    bad = pytester.runpytest("--numcheck", "--numcheck-calibrate", "--numcheck-calibrate-with",
                             "out/bad.json")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines([("ERROR: --numcheck-calibrate-with */out/bad.json: not a numcheck "
                              "calibration file (format 1). Fix: pass a file written by "
                              "--numcheck-calibrate-json *")])


def test_timing_runs_of_earlier_runs_combine() -> None:
    from numcheck.calibrate.payloads import CheckRef, SpeedPayload, SpeedRun
    from numcheck.calibrate.speed import combine_speed

    def run(device: str, runs: list[float], path: str = "/here/cases/dot.toml",
            case: str = "small") -> SpeedPayload:
        return SpeedPayload(check=CheckRef("dot", case, "cases/dot.toml", path, device, "n"),
                            variant="bf16", runs=tuple(SpeedRun(r, r, r) for r in runs),
                            expected_fail=False, current=None)

    here = run("cuda", [1.2, 1.3])
    out = combine_speed([here], [run("cuda", [1.1], "/elsewhere"), run("cpu", [0.9], "/elsewhere")])
    assert [[r.median for r in p.runs] for p in out] == [[1.2, 1.3, 1.1], [0.9]]
    assert [p.check.path for p in out] == ["/here/cases/dot.toml"] * 2  # written here
    assert [p.check.device for p in out] == ["cuda", "cpu"]
    assert here.runs == (SpeedRun(1.2, 1.2, 1.2), SpeedRun(1.3, 1.3, 1.3))  # input unchanged
    other_case = run("cuda", [1.0], case="big")
    assert len(combine_speed([here], [other_case])) == 1  # not selected in this run


@needs_tomlkit
def test_a_variant_exact_on_this_device_never_tightens_its_class_to_the_floors(
        pytester: pytest.Pytester) -> None:
    """tf32 on a CPU computes IEEE fp32: it measures 0 and suggests the floors. Printing
    says so; writing them over the tf32 row in force is refused, with or without
    --numcheck-calibrate-renew (a run that cannot see TF32's rounding cannot budget it)."""
    path = project(pytester)
    before = path.read_text()
    result = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "exact")
    result.stdout.fnmatch_lines([
        ("# exact: tf32 equals the reference bit for bit on cpu: these are floors; measure the "
         "devices it is gated on too (--numcheck-calibrate-with), or its class's honest "
         "members"),
        "[[]exact.budget.tf32.y[]]",
        "rel_fro = 1e-07             # worst 0 on every seed",
    ])
    for renew in ([], ["--numcheck-calibrate-renew"]):
        write = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "exact",
                                   "--numcheck-calibrate-write", *renew)
        assert write.ret == pytest.ExitCode.TESTS_FAILED
        write.stdout.fnmatch_lines([
            "numcheck calibrate: refused to write; nothing written (exit status 1):",
            ("  - tf32 on exact: equals the reference bit for bit on cpu (every error measured "
             "0), so this run cannot see tf32's rounding; writing would tighten y.rel_fro "
             "0.002 -> 1e-07, y.calc_diff 1e-06 -> 1e-14* to the floors. Kept as they are. *"),
        ])
        assert path.read_text() == before


RAISING_CONFTEST = CONFTEST + """
from numcheck.ops.registry import Variant

def _boom(inputs, params):
    raise RuntimeError("kernel launch failed")

def pytest_numcheck_register(registry):
    from tests import calibration_op
    calibration_op.register(registry)
    registry.add_variant("dot", Variant("boom", _boom, "bf16"))
"""


def test_calibration_exit_status_is_0_when_it_measured_and_not_0_for_real_errors(
        pytester: pytest.Pytester) -> None:
    """A calibration step in a script: exit 0 when it measured what was selected (a variant
    over its current budget included); non-zero for a real error, each with its message."""
    project(pytester, CASE + '\n[gpu_only]\nop = "dot"\ndevices = ["cuda"]\nvariants = ["bf16"]\n'
            '\n[broken]\nop = "dot"\nvariants = ["boom"]\n')
    pytester.makeconftest(RAISING_CONFTEST)
    measured = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "small")
    assert measured.ret == pytest.ExitCode.OK
    assert "the gate failed" not in measured.stdout.str()
    # A variant that raised: its item fails, and so does the run.
    raised = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "broken")
    assert raised.ret == pytest.ExitCode.TESTS_FAILED
    raised.stdout.fnmatch_lines(["*variant 'boom' raised RuntimeError at *: kernel launch failed*"])
    # Selected checks that all skipped measured nothing.
    skipped = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "gpu_only")
    assert skipped.ret == pytest.ExitCode.TESTS_FAILED
    skipped.stdout.fnmatch_lines([
        "numcheck calibrate: no check measured anything (all skipped, deselected or failed); "
        "exit status 1"])
    # No check selected: a usage error, as in a gating run.
    none = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "no_such_case")
    assert none.ret == pytest.ExitCode.USAGE_ERROR
    # A bad case file: a collection error naming the file.
    (pytester.path / "cases" / "bad.toml").write_text('[x]\nop = "dot"\nshape = { n = "eight" }\n')
    bad = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "-k", "small")
    assert bad.ret == pytest.ExitCode.INTERRUPTED
    bad.stdout.fnmatch_lines(["*cases/bad.toml*"])


def test_a_long_calibration_check_says_how_far_it_got() -> None:
    """Issue 44: a family of seven over 22 seeds can take minutes; past PROGRESS_AFTER_S a
    check prints a line per variant measured (a fake clock: no test of the machine's
    speed), and nothing before."""
    from numcheck.calibrate import measuring as calibration

    lines: list[str] = []
    said = calibration.Progressed("mlp_up::small::fp8[cpu]", 3, 22, lines.append)
    now = iter([1.0, 30.0])
    said.start, said.clock = 0.0, lambda: next(now)
    said.done("fp8")
    said.done("gemm_e4m3_block_fp32_bf16out")
    assert lines == [("numcheck calibrate: mlp_up::small::fp8[cpu]: measured "
                      "gemm_e4m3_block_fp32_bf16out (2 of 3 variants, 22 seeds each) in 30 s "
                      "so far")]
    calibration.Progressed("x", 1, 1, None).done("x")  # no printer: nothing to say
