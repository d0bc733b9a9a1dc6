"""Issue 44: FP8 budgets that cannot be talked into passing a bug, and an FP8 first hour that
follows the docs to green, through the public API in a user project (tests/fp8_mlp.py: an
MLP up-projection of the user's own, with an honest FP8 and an honest NVFP4 variant, and
each one's twin whose output is 2% high).

- listed without tables, the bugs fail (the simulated reference's default rows) and the
  honest variants pass, on fresh seeds, with the 2% bug localized as a scale;
- the refusal's sequence (the gate fails, its printed calibrate command is run as printed,
  the honest family's tables are written, the old suggestion of pooling the bug is run with
  --numcheck-calibrate-write) leaves every bug failing and the case file as it was;
- a kernel change of 0.5% is a regression for ``python -m numcheck compare``;
- a declared accumulation no row was measured for needs tables, and says the command.
"""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest

from numcheck.__main__ import main as numcheck_main
from tests import fp8_mlp
from tests.caseproject import NO_CACHE, case_project
from tests.test_calibrate_mode import needs_tomlkit

CONFTEST = """
def pytest_numcheck_register(registry):
    from tests import fp8_mlp
    fp8_mlp.register(registry)
"""

#: Fresh seeds: no test or calibration of the shipped cases uses them.
FRESH = [9401, 9402, 9403]


def project(pytester: pytest.Pytester, case: str) -> Path:
    """A user project: the op's conftest, one case file, its goldens made."""
    path = case_project(pytester, {"mlp.toml": case}, conftest=CONFTEST,
                        addopts=NO_CACHE) / "mlp.toml"
    made = pytester.runpytest("--numcheck", "--numcheck-regen", "-k", "fp32")
    assert (pytester.path / "goldens" / "mlp_up").is_dir(), made.stdout.str()
    return path


def case(variants: list[str], seeds: list[int], tables: str = "") -> str:
    listed = ", ".join(f'"{v}"' for v in variants)
    return (f'[small]\nop = "mlp_up"\nshape = {{ tokens = 8, hidden = 256, intermediate = 128 }}\n'
            f"seeds = {seeds}\nvariants = [{listed}]\n{tables}")


def test_listed_without_tables_the_bugs_fail_and_the_honest_variants_pass(
        pytester: pytest.Pytester) -> None:
    """No table: every sim_* key comes from the simulated reference's row of the declared
    sums (float32 here), where a 2% output scale (sim_rel_fro 0.02) is past the row (0.016)
    and an honest kernel sits at 1e-7; the failure says where the row is, and localizes the
    bug as a scale against the simulated reference (the golden shows no concentration)."""
    project(pytester, case(["fp8", "fp8_bug", "nvfp4", "nvfp4_bug"], FRESH))
    result = pytester.runpytest("--numcheck")
    result.assert_outcomes(passed=3, failed=2)
    for bug in ("fp8_bug", "nvfp4_bug"):
        result.stdout.fnmatch_lines([
            f"numcheck FAIL mlp_up::small::{bug}[[]cpu[]]",
            "  worst: h.sim_* > budget * (seed *)",
            ("  where: h (against the simulated reference): a global scale: output = 1.02 x "
             "simulated (rel error 0.02, * after dividing it out)"),
            ("  budget:      sim_*: the simulated reference's default for float32 sums (*) from "
             "numcheck/numerics/budgets.py (no key in cases/mlp.toml:1 [[]small[]]; set "
             f"[[]small.budget.{bug}.h[]] sim_* to override)"),
        ])
    assert "FAIL mlp_up::small::fp8[" not in result.stdout.str()
    assert "FAIL mlp_up::small::nvfp4[" not in result.stdout.str()


def _printed_calibrate(out: str) -> list[str]:
    """The calibrate command a failure's next step prints, as argv (after 'pytest')."""
    line = next(ln for ln in out.splitlines() if "my budget is too tight" in ln)
    command = line.split(" not this variant alone: ", 1)[1]
    assert command.startswith("pytest --numcheck --numcheck-calibrate "), command
    return shlex.split(command)[1:]


@pytest.mark.slow
@needs_tomlkit
@pytest.mark.parametrize("honest", ["fp8", "nvfp4"])
def test_the_refusals_suggestion_cannot_write_a_bug_in(pytester: pytest.Pytester,
                                                       honest: str) -> None:
    """Issue 44's sequence, as a user following the messages would run it."""
    bug = f"{honest}_bug"
    path = project(pytester, case([honest, bug], [0, 1],
                                  f'\n[small.budget.{bug}]\nbudget_like = "{honest}"\n'))
    # 1. The bug fails; its next step names the family of its lender's scheme.
    gate = pytester.runpytest("--numcheck", "-k", bug)
    gate.assert_outcomes(failed=1)
    printed = _printed_calibrate(gate.stdout.str())
    assert f"{honest}={honest},gemm_" in " ".join(printed) and f",{bug}" not in printed[-1]
    # 2. The printed command runs as printed (every member it pools is registered): a
    #    print-only calibration, which refuses the bug by name and suggests no pool of it.
    before = path.read_bytes()
    measured = pytester.runpytest(*printed)
    assert measured.ret == pytest.ExitCode.TESTS_FAILED, measured.stdout.str()
    measured.stdout.fnmatch_lines([
        ("numcheck calibrate: --numcheck-calibrate-write would refuse these tables (exit "
        "status 1: a selected variant looks like a bug):"),
        (f"  - {bug} (*, takes {honest}'s budgets) on small: h.sim_rel_fro 0.02 past the "
        "float32 sums row 0.016"),
    ])
    assert f"--numcheck-calibrate-pool {honest}={honest},{bug}" not in measured.stdout.str()
    assert path.read_bytes() == before
    # 3. The honest family's tables, written by the same command without the bug: the
    #    record keeps the family's pool.
    family = [a for a in printed if f"::{bug}[" not in a]
    wrote = pytester.runpytest(*family, "--numcheck-calibrate-write")
    assert wrote.ret == pytest.ExitCode.OK, wrote.stdout.str()
    record = tomllib.loads(path.read_text())["small"]["provenance"][honest]
    assert len(record["pool"]) > 2 and record["pool"][0] == honest
    tables = path.read_bytes()
    # 4. The bug still fails against the family's tables; the honest variant passes.
    pytester.runpytest("--numcheck").assert_outcomes(passed=2, failed=1)
    # 5. The old refusal's suggestion, with a write: the bug pooled into its lender's table.
    #    Refused: a borrower never widens its lender whatever pool names it, the pool drops
    #    the recorded family without a word, and the bug is past its sums' row.
    talked = pytester.runpytest("--numcheck", "--numcheck-calibrate", "-k", "small",
                                "--numcheck-calibrate-pool", f"{honest}={honest},{bug}",
                                "--numcheck-calibrate-write")
    assert talked.ret == pytest.ExitCode.TESTS_FAILED
    talked.stdout.fnmatch_lines([
        "numcheck calibrate: refused to write; nothing written (exit status 1):",
        f"  - {bug} (*, takes {honest}'s budgets) on small: h.sim_rel_fro 0.02 past the *",
        f"      it would widen {honest}'s table: *whatever pool names it*",
        (f"  - {honest} on small: its tables were set by the pool {honest}, gemm_*; this run's "
        "pool leaves out gemm_* without a word*"),
    ])
    assert path.read_bytes() == tables
    # 6. And the bug keeps failing.
    again = pytester.runpytest("--numcheck", "-k", bug)
    again.assert_outcomes(failed=1)


def test_a_half_percent_kernel_drift_is_a_regression_for_compare(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The same FP8 variant, its kernel's output 0.5% higher in the next run: the golden's
    quantization error hides it (calc_diff moves a few percent, below every rule), the
    simulated reference shows it (sim_rel_fro 1e-7 -> 5e-3)."""
    project(pytester, case(["fp8"], [0, 1]))
    base, new = pytester.path / "base.json", pytester.path / "new.json"
    pytester.runpytest("--numcheck", "--numcheck-report", str(base)).assert_outcomes(passed=2)
    monkeypatch.setenv(fp8_mlp.DRIFT_ENV, str(fp8_mlp.DRIFT_SCALE))
    pytester.runpytest("--numcheck", "--numcheck-report", str(new)).assert_outcomes(passed=2)
    capsys.readouterr()
    assert numcheck_main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr().out
    assert "mlp_up::small::fp8[cpu]" in out and "h.sim_rel_fro " in out, out
    assert "the simulated reference" in out
    records = {r["variant"]: r for r in json.loads(new.read_text())["records"]}
    assert records["fp8"]["metrics"]["h"]["sim_rel_fro"] > 4e-3
    # The honest run against itself: no regression.
    assert numcheck_main(["compare", str(base), str(base)]) == 0


def test_sums_no_row_was_measured_for_need_tables_and_say_the_command(
        pytester: pytest.Pytester) -> None:
    """A declared accumulation less accurate than any honest member measured (promoted every
    256 of K): no default row, so a case without its sim_* tables does not load, naming the
    calibrate command; calibration reads it (it sets them)."""
    case_project(pytester, {"mlp.toml": case(["fp8_rare"], [0])}, addopts=NO_CACHE,
                 conftest=CONFTEST + """
    import numcheck
    from dataclasses import replace
    quant = replace(fp8_mlp.FP8, accumulation=numcheck.fp8.Accumulation("promoted", 256))
    registry.add_variant(fp8_mlp.OP, fp8_mlp.variant("fp8_rare", quant))
""")
    refused = pytester.runpytest("--numcheck", "--collect-only")
    refused.stdout.fnmatch_lines([
        ("*cases/mlp.toml: case 'small': key 'budget.fp8_rare.h.sim_rel_fro': variant "
         "'fp8_rare' declares promoted256 sums, for which numcheck measured no default of the "
         "simulated reference, and the case sets no sim_rel_fro, sim_calc_diff on 'h': its "
         "second reference would go unbudgeted. Fix: calibrate its scheme's honest family and "
         "write the tables (*): pytest --numcheck --numcheck-calibrate --numcheck-device cpu "
         "'cases/mlp.toml::small::fp8_rare[[]cpu[]]' --numcheck-calibrate-pool "
         "fp8_rare=fp8_rare,gemm_e4m3_block_fp32_* --numcheck-calibrate-write"),
    ])
    measuring = pytester.runpytest("--numcheck", "--numcheck-calibrate=1", "--collect-only")
    assert measuring.ret == pytest.ExitCode.OK, measuring.stdout.str()
