"""Writing calibrated values into case files: only the values change."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

pytest.importorskip("tomlkit", reason="tomlkit (the calibrate extra) writes case files")

from numcheck.calibrate.casewriter import (
    CaseWriteError,
    Edit,
    apply_edits,
    with_provenance,
    write_edits,
)
from numcheck.cases import Case, load_case_file
from numcheck.numerics.budget_origin import Lent

CASE = """\
# A header comment that must survive.

[tiny]
op = "indexer"
shape = { batch = 2, max_context = 256 }   # kept as written
seeds = [0, 1]

[tiny.budget.bf16.logits]
rel_fro = 4e-3                      # measured 1.98e-3
calc_diff = 4e-6                    # measured 1.96e-6
[tiny.budget.bf16.topk]
recall_min = 0.98
tie_band_abs = 0.5                  # in score units

[tiny.perf.bf16]
speedup_min = { H200 = 1.1, cpu = 0.9 }   # run D

[next]
op = "indexer"
"""

LOGITS = ("tiny", "budget", "bf16", "logits")


def test_only_changed_values_are_touched() -> None:
    out, changes, skipped = apply_edits(CASE, [
        Edit(LOGITS, "rel_fro", 0.0041),
        Edit(LOGITS, "calc_diff", 4e-6),  # equal: untouched, even written as 4e-06
    ])
    assert out == CASE.replace("rel_fro = 4e-3                      # measured 1.98e-3",
                               "rel_fro = 0.0041                    # measured 1.98e-3")
    assert [c.describe() for c in changes] == ["tiny.budget.bf16.logits.rel_fro: 0.004 -> 0.0041"]
    assert skipped == []


def test_an_edit_with_a_comment_replaces_the_lines_comment() -> None:
    out, changes, _ = apply_edits(CASE, [
        Edit(LOGITS, "rel_fro", 0.0041, comment="2x the worst; was 0.004"),
        Edit(LOGITS, "frac_outside", 0.001, comment="new"),
        Edit(LOGITS, "calc_diff", 4e-6, comment="equal: untouched"),
    ])
    assert "rel_fro = 0.0041  # 2x the worst; was 0.004\n" in out
    assert "frac_outside = 0.001  # new\n" in out
    assert "calc_diff = 4e-6                    # measured 1.96e-6\n" in out
    assert [c.where.rsplit(".", 1)[1] for c in changes] == ["rel_fro", "frac_outside"]


def test_new_keys_and_tables_land_in_their_case() -> None:
    out, changes, _ = apply_edits(CASE, [
        Edit(LOGITS, "frac_outside", 0.0),
        Edit(("tiny", "budget", "tf32", "logits"), "rel_fro", 2.2e-7),
    ])
    assert "calc_diff = 4e-6                    # measured 1.96e-6\nfrac_outside = 0\n" in out
    # After the case's other budget tables, before its perf table and the next case.
    assert ("tie_band_abs = 0.5                  # in score units\n\n"
            "[tiny.budget.tf32.logits]\nrel_fro = 2.2e-07\n\n[tiny.perf.bf16]\n") in out
    assert tomllib.loads(out)["tiny"]["budget"]["tf32"]["logits"] == {"rel_fro": 2.2e-7}
    assert out.startswith("# A header comment that must survive.\n\n[tiny]\n")
    assert len(changes) == 2


def test_inline_speedup_entries() -> None:
    perf = ("tiny", "perf", "bf16")
    out, _, _ = apply_edits(CASE, [Edit(perf, "speedup_min", 1.14, sub="H200")])
    assert "speedup_min = { H200 = 1.14, cpu = 0.9 }   # run D\n" in out
    out, changes, _ = apply_edits(CASE, [Edit(perf, "speedup_min", None, sub="cpu")])
    assert "speedup_min = { H200 = 1.1 }   # run D\n" in out
    assert changes[0].describe() == "tiny.perf.bf16.speedup_min.cpu: 0.9 -> (none)"
    out, _, _ = apply_edits(CASE, [Edit(perf, "speedup_min", None, sub="cpu"),
                                   Edit(perf, "speedup_min", None, sub="H200")])
    assert "speedup_min" not in out
    out, _, _ = apply_edits(CASE, [Edit(("next", "perf", "tf32"), "speedup_min", 1.2, sub="H100")])
    assert tomllib.loads(out)["next"]["perf"]["tf32"] == {"speedup_min": {"H100": 1.2}}


def test_tie_band_rel_is_not_added_next_to_an_abs_band() -> None:
    out, changes, skipped = apply_edits(CASE, [Edit(("tiny", "budget", "bf16", "topk"),
                                                    "tie_band_rel", 0.004)])
    assert out == CASE and changes == []
    assert skipped[0].describe() == ("tiny.budget.bf16.topk.tie_band_rel: (none) -> 0.004 "
                                     "(the table uses tie_band_abs)")


def test_write_in_place(tmp_path: Path) -> None:
    path = tmp_path / "indexer.toml"
    path.write_text(CASE)
    changes, _ = write_edits(path, [Edit(LOGITS, "rel_fro", 4e-3)])
    assert changes == [] and path.read_text() == CASE
    write_edits(path, [Edit(LOGITS, "rel_fro", 5e-3)])
    assert "rel_fro = 0.005                     # measured 1.98e-3" in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["indexer.toml"]  # no temporary left


def test_broken_file_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[tiny\nop = 1\n")
    with pytest.raises(CaseWriteError, match=r"bad.toml: not valid TOML"):
        write_edits(path, [Edit(LOGITS, "rel_fro", 1e-3)])
    assert path.read_text() == "[tiny\nop = 1\n"


def test_an_empty_comment_drops_the_lines_comment() -> None:
    out, _, _ = apply_edits(CASE, [Edit(LOGITS, "rel_fro", 0.0041, comment="")])
    assert "\nrel_fro = 0.0041\ncalc_diff" in out


BORROWED = CASE.replace("[tiny.perf.bf16]", '[tiny.budget.tf32]\nbudget_like = "bf16"\n\n'
                        "[tiny.perf.bf16]")


def _loaded(tmp_path: Path, text: str, name: str = "indexer.toml") -> Case:
    path = tmp_path / name
    path.write_text(text)
    (case, *_) = load_case_file(path)
    return case


def test_a_borrowed_budget_is_not_written_as_copies(tmp_path: Path) -> None:
    """tf32 takes bf16's tables (budget_like), as its loaded budget's origins say: its edits
    are skipped, once per variant, with where to write instead; bf16's own edit lands."""
    budgets = _loaded(tmp_path, BORROWED).budgets
    tf32 = ("tiny", "budget", "tf32", "logits")
    out, changes, skipped = apply_edits(BORROWED, [
        Edit(tf32, "rel_fro", 1e-6, origin=budgets["tf32"].origin("logits", "rel_fro")),
        Edit(tf32, "calc_diff", 1e-12, origin=budgets["tf32"].origin("logits", "calc_diff")),
        Edit(LOGITS, "rel_fro", 0.005, origin=budgets["bf16"].origin("logits", "rel_fro"))])
    assert isinstance(budgets["tf32"].origin("logits", "rel_fro"), Lent)
    assert [c.describe() for c in skipped] == [
        ("tiny.budget.tf32: takes bf16's budgets (budget_like = \"bf16\"): not written as "
         "copies; set [tiny.budget.bf16] to change both")]
    assert [c.where for c in changes] == ["tiny.budget.bf16.logits.rel_fro"]
    assert tomllib.loads(out)["tiny"]["budget"]["tf32"] == {"budget_like": "bf16"}


MHC = """\
[t]
op = "mhc_pre"
preset = "v4pro"
shape = { tokens = 4 }
variants = ["bf16", "tf32"]

[t.budget.bf16.y]
rel_fro = 0.004
[t.budget.tf32.y]
max_err_ratio = 5
"""


def test_a_key_a_coarse_output_inherits_is_not_written_into_the_finer_table(
        tmp_path: Path) -> None:
    """tf32's y takes rel_fro from bf16's y (y is stored in bf16): an edit of it is skipped,
    naming the table that holds it; a key of tf32's own y table, and a default, are
    written."""
    budget = _loaded(tmp_path, MHC, "mhc.toml").budgets["tf32"]
    y = ("t", "budget", "tf32", "y")
    out, changes, skipped = apply_edits(MHC, [
        Edit(y, key, value, origin=budget.origin("y", key))
        for key, value in (("rel_fro", 1e-4), ("max_err_ratio", 4.0), ("calc_diff", 1e-8))])
    assert [c.describe() for c in skipped] == [
        ("t.budget.tf32.y.rel_fro: (none) -> 0.0001 (y is stored in bf16: held to "
         "[t.budget.bf16.y] rel_fro; set it there to change it)")]
    assert [c.where for c in changes] == ["t.budget.tf32.y.max_err_ratio",
                                          "t.budget.tf32.y.calc_diff"]
    assert tomllib.loads(out)["t"]["budget"]["tf32"]["y"] == {"max_err_ratio": 4,
                                                             "calc_diff": 1e-8}


def test_the_writer_names_its_command_once_in_the_header() -> None:
    out, _, _ = apply_edits(CASE, [Edit(LOGITS, "rel_fro", 0.005)],
                            provenance=("python tool.py --apply a.json", "2026-12-03"))
    assert out.startswith("# A header comment that must survive.\n"
                          "# set by: python tool.py --apply a.json (2026-12-03)\n\n[tiny]\n")
    # Another command goes first; the same command again replaces its own line.
    out, _, _ = apply_edits(out, [Edit(LOGITS, "rel_fro", 0.006)],
                            provenance=("pytest --numcheck --numcheck-calibrate-write",
                                        "2026-12-04, cpu, torch 2.13.0+cpu"))
    out, _, _ = apply_edits(out, [Edit(LOGITS, "rel_fro", 0.007)],
                            provenance=("python tool.py --apply a.json", "2026-12-05"))
    assert out.startswith(
        "# A header comment that must survive.\n"
        "# set by: python tool.py --apply a.json (2026-12-05)\n"
        "# set by: pytest --numcheck --numcheck-calibrate-write (2026-12-04, cpu, torch "
        "2.13.0+cpu)\n\n[tiny]\n")
    # Nothing changed: the header is left alone.
    same, changes, _ = apply_edits(out, [Edit(LOGITS, "rel_fro", 0.007)],
                                   provenance=("other", "now"))
    assert same == out and changes == []


def test_a_long_command_wraps_and_is_still_recognised() -> None:
    command = "python tool.py --apply " + " ".join(f"docs/evidence/run-{i}/x.json"
                                                   for i in range(6))
    out = with_provenance("[a]\nx = 1\n", command, "one")
    assert out.splitlines()[1].startswith("#   ") and all(
        len(line) <= 96 for line in out.splitlines())
    again = with_provenance(out, command, "two")
    assert again.count("# set by:") == 1 and again.rstrip().endswith("x = 1")
    assert "(two)" in again and "(one)" not in again
    assert tomllib.loads(again) == {"a": {"x": 1}}


def test_an_entry_of_an_inline_table_is_spaced_by_hand_and_its_line_commented() -> None:
    """Another device class's threshold beside the first (onboarding a GPU model): the new
    entry spaced as written by hand, the line's comment the one given; a new table too."""
    perf = ("tiny", "perf", "bf16")
    out, _, _ = apply_edits(CASE, [Edit(perf, "speedup_min", 1.05, sub="H100",
                                        comment="run D; H100: runs 1.11 1.12")])
    assert "speedup_min = { H200 = 1.1, cpu = 0.9, H100 = 1.05 }   # run D; H100: runs 1.11 " \
           "1.12\n" in out
    out, _, _ = apply_edits(CASE, [Edit(("next", "perf", "tf32"), "speedup_min", 1.2, sub="H100",
                                        comment="H100: runs 1.3")])
    assert "speedup_min = { H100 = 1.2 }  # H100: runs 1.3\n" in out
