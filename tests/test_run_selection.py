"""What a run selects: option values never move the rootdir; a run that checks nothing fails."""

from __future__ import annotations

import json

import pytest

from numcheck.plugin.rootdir_repair import space_separated_values
from tests.caseproject import make_project, write_goldens


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_path_options_with_a_space_work_on_every_run(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, where: str
) -> None:
    make_project(pytester)
    write_goldens(pytester)
    folder = (tmp_path_factory.mktemp("elsewhere") if where == "outside"
              else pytester.path / "reports")
    folder.mkdir(exist_ok=True)
    report, markdown = folder / "r.json", folder / "r.md"
    base = folder / "base.json"
    assert pytester.runpytest("--numcheck", f"--numcheck-report={base}").ret == 0
    for _ in range(2):  # the second run finds the files: pytest must not take them for paths
        result = pytester.runpytest(
            "--numcheck", "--numcheck-report", str(report), "--numcheck-markdown",
            str(markdown), "--numcheck-baseline", str(base), "-p", "no:cacheprovider")
        assert result.ret == 0, result.stdout.str()
        result.assert_outcomes(passed=2)
        assert json.loads(report.read_text())["gate"] == "pass"
        assert markdown.read_text().startswith("## ")


def test_space_separated_values() -> None:
    opts = ["--numcheck-report", "--numcheck-markdown"]
    assert space_separated_values(
        ["--numcheck-report", "/tmp/r.json", "--numcheck-markdown=/tmp/m.md", "-q"], opts
    ) == ["/tmp/r.json"]
    assert space_separated_values(["--", "--numcheck-report", "x"], opts) == []


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["tests"], "the arguments tests hold no case file under the cases folder *"),
        (["empty"], "the arguments empty hold no case file under the cases folder *"),
        (["-k", "nothing-matches"], "-k deselected every case"),
    ],
)
def test_a_run_that_selects_no_case_is_an_error(
    pytester: pytest.Pytester, args: list[str], why: str
) -> None:
    make_project(pytester)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (pytester.path / "empty").mkdir()
    report = pytester.path / "r.json"
    result = pytester.runpytest("--numcheck", *args, f"--numcheck-report={report}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([(f"ERROR: numcheck: --numcheck selected no case ({why}; "
                                 "command line: *--numcheck*). Fix: name case files or node "
                                 "ids under *cases (e.g. pytest --numcheck cases), loosen the "
                                 "selection, or run the tests without --numcheck")])
    data = json.loads(report.read_text())  # the report agrees: fail, and the same exit status
    assert (data["gate"], data["exitstatus"], data["records"]) == ("fail", 4, [])


def test_a_report_that_fails_never_comes_with_exit_0(pytester: pytest.Pytester) -> None:
    # Every check skipped by a hook that turns failures into passes would be exit 0 with
    # gate fail; the plugin makes the exit status agree with the report.
    make_project(pytester, variants='"bf16"')
    write_goldens(pytester)
    pytester.makeconftest(
        "import pytest\n"
        "@pytest.hookimpl(wrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    report = yield\n"
        "    report.outcome = 'passed'\n"
        "    return report\n")
    (pytester.path / "cases" / "indexer.toml").write_text(
        (pytester.path / "cases" / "indexer.toml").read_text()
        + "[tiny.budget.bf16.logits]\nrel_fro = 0\n")
    report = pytester.path / "r.json"
    result = pytester.runpytest("--numcheck", f"--numcheck-report={report}")
    data = json.loads(report.read_text())
    assert (data["gate"], result.ret, data["exitstatus"]) == ("fail", 1, 1)
    result.stdout.fnmatch_lines([("numcheck: the gate failed although no test failed: a check "
                                 "did not pass; exit status 1")])


def test_narrowed_run_against_a_baseline_does_not_count_removals(
    pytester: pytest.Pytester,
) -> None:
    make_project(pytester, variants='"bf16", "tf32"')
    write_goldens(pytester)
    base = pytester.path / "base.json"
    assert pytester.runpytest("--numcheck", f"--numcheck-report={base}").ret == 0
    result = pytester.runpytest("--numcheck", f"--numcheck-baseline={base}", "-k", "tf32")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*drift vs *base.json: PASS (0 regression(s);*2 removed)*"])
    base_data = json.loads(base.read_text())
    base_data["records"].append(dict(base_data["records"][0], id="indexer::gone::bf16[cpu]",
                                     case="gone", nodeid="cases/indexer.toml::gone::bf16[cpu]"))
    base.write_text(json.dumps(base_data))
    result = pytester.runpytest("--numcheck", f"--numcheck-baseline={base}")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*indexer::gone::bf16[[]cpu[]]*removed*not in the new run*"])


def test_empty_folder_has_no_numcheck_message_without_the_flag(pytester: pytest.Pytester,
                                                               ) -> None:
    (pytester.path / "empty").mkdir()
    assert pytester.runpytest("empty").ret == pytest.ExitCode.NO_TESTS_COLLECTED




def test_every_numcheck_option_that_takes_a_value_is_protected(
    pytestconfig: pytest.Config,
) -> None:
    from numcheck.plugin.rootdir_repair import value_options

    names = set(value_options(pytestconfig._parser, "numcheck"))
    assert {"--numcheck-report", "--numcheck-markdown", "--numcheck-baseline",
            "--numcheck-device", "--numcheck-calibrate-json", "--numcheck-calibrate-with",
            "--numcheck-calibrate"} <= names
    assert "--numcheck" not in names and "--numcheck-regen" not in names  # flags take none
