"""Writing calibrated values into case files: only the values change."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

pytest.importorskip("tomlkit", reason="tomlkit (the calibrate extra) writes case files")

from numcheck.calibrate.casewriter import CaseWriteError, Edit, apply_edits, write_edits

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
speedup_min = { cuda = 1.1, cpu = 0.9 }   # run D

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
    out, _, _ = apply_edits(CASE, [Edit(perf, "speedup_min", 1.14, sub="cuda")])
    assert "speedup_min = { cuda = 1.14, cpu = 0.9 }   # run D\n" in out
    out, changes, _ = apply_edits(CASE, [Edit(perf, "speedup_min", None, sub="cpu")])
    assert "speedup_min = { cuda = 1.1 }   # run D\n" in out
    assert changes[0].describe() == "tiny.perf.bf16.speedup_min.cpu: 0.9 -> (none)"
    out, _, _ = apply_edits(CASE, [Edit(perf, "speedup_min", None, sub="cpu"),
                                   Edit(perf, "speedup_min", None, sub="cuda")])
    assert "speedup_min" not in out
    out, _, _ = apply_edits(CASE, [Edit(("next", "perf", "tf32"), "speedup_min", 1.2, sub="cuda")])
    assert tomllib.loads(out)["next"]["perf"]["tf32"] == {"speedup_min": {"cuda": 1.2}}


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
