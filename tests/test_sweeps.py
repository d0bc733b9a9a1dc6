"""Shape sweeps as case-file data: points, ids, labels, validation (numcheck/caseparts/sweep.py),
and one summary row per sweep (numcheck/report/sweep_rows.py). The plugin's behaviour with a
sweep (ids, -k, regeneration, missing goldens, folded summary) is tests/test_sweep_plugin.py;
the shipped sweeps catching planted tile bugs, tests/test_sweep_catch.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from numcheck.caseparts.sweep import MAX_POINTS, SweepPoint
from numcheck.report.records import Record
from numcheck.report.sweep_rows import fold_overhead_rows, fold_sweeps
from tests.test_cases import check, error, load

ROOT = Path(__file__).resolve().parent.parent


def test_a_list_sweep_makes_one_case_per_point_with_the_points_value(tmp_path: Path) -> None:
    cases = load(tmp_path, """
        [tile]
        op = "tiny"
        shape = { batch = 1 }
        sweep.length = [65, 63, 64]
        seeds = [3]

        [plain]
        op = "tiny"
    """)
    assert [c.id for c in cases] == ["tile@length63", "tile@length64", "tile@length65", "plain"]
    assert [c.params["length"] for c in cases[:3]] == [63, 64, 65]
    assert all(c.params["batch"] == 1 and c.seeds == (3,) for c in cases[:3])
    assert [c.table for c in cases] == ["tile", "tile", "tile", "plain"]
    point = cases[1].sweep
    assert point is not None and (point.case, point.label, point.index, point.count) == (
        "tile", "length64", 1, 3)
    assert cases[3].sweep is None
    # Every point shares the case's budgets.
    assert cases[0].budgets == cases[2].budgets


def test_around_tiles_adds_offsets_then_the_extra_values_sorted_once(tmp_path: Path) -> None:
    cases = load(tmp_path, """
        [tile]
        op = "tiny"
        sweep.length = { around = [64, 128], offsets = [-1, 0, 1], also = [1, 129, 257] }
    """)
    assert [c.params["length"] for c in cases] == [1, 63, 64, 65, 127, 128, 129, 257]
    assert len(load(tmp_path, """
        [tile]
        op = "tiny"
        sweep.length = { around = [16] }
    """)) == 3  # offsets default to -1, 0, 1


def test_several_axes_make_every_combination_in_file_order(tmp_path: Path) -> None:
    cases = load(tmp_path, """
        [grid]
        op = "tiny"
        sweep.batch = [1, 2]
        sweep.length = [8, 9]
        sweep.causal = [false, true]
    """)
    assert len(cases) == 8
    assert cases[0].id == "grid@batch1-length8-causalfalse"
    assert cases[-1].sweep == SweepPoint("grid", {"batch": 2, "length": 9, "causal": True}, 7, 8)


@pytest.mark.parametrize(("sweep", "key", "fragment"), [
    ('sweep.nope = [1]', "sweep.nope", "unknown shape parameter 'nope'"),
    ('sweep = [1, 2]', "sweep", "expected a table of swept parameters"),
    ('sweep.length = []', "sweep.length", "has no value"),
    ('sweep.length = [8, "9"]', "sweep.length", "got string '9'"),
    ('sweep.length = [8, true]', "sweep.length", "got boolean True"),
    ('sweep.scale = { around = [2] }', "sweep.scale", "only integer parameters"),
    ('sweep.length = { offsets = [1] }', "sweep.length", "needs around = [...]"),
    ('sweep.length = { around = [0] }', "sweep.length.around", "positive integers"),
    ('sweep.length = { around = [64], step = 2 }', "sweep.length.step", "unknown key 'step'"),
    ('sweep.length = 64', "sweep.length", "expected an array of values or a table"),
])
def test_a_bad_sweep_names_the_key_and_the_fix(tmp_path: Path, sweep: str, key: str,
                                               fragment: str) -> None:
    err = error(tmp_path, f'[s]\nop = "tiny"\n{sweep}\n')
    check(err, case="s", key=key, fragment=fragment)


def test_a_swept_parameter_set_in_shape_too_is_refused(tmp_path: Path) -> None:
    err = error(tmp_path, '[s]\nop = "tiny"\nshape = { length = 8 }\nsweep.length = [8, 9]\n')
    check(err, case="s", key="sweep.length", fragment="also set in shape")


def test_a_point_that_breaks_a_rule_between_parameters_names_the_point(tmp_path: Path) -> None:
    """The indexer needs next_n <= max_context: a sweep of max_context from 1 with next_n 2
    has an impossible point, named with its values and the way out."""
    from numcheck.cases import CaseFileError, load_case_file

    path = tmp_path / "ix.toml"
    path.write_text('[mtp]\nop = "indexer"\nshape = { next_n = 2 }\n'
                    'sweep.max_context = [1, 2, 64]\n')
    with pytest.raises(CaseFileError) as info:
        load_case_file(path)
    check(info.value, case="mtp", key="shape.next_n", fragment="at the point max_context = 1 "
          "(max_context1): next_n 2 > max_context 1")
    assert "sweep case of its own" in info.value.fix


def test_a_value_out_of_the_parameters_range_is_refused(tmp_path: Path) -> None:
    from numcheck.cases import CaseFileError, load_case_file

    path = tmp_path / "ix.toml"
    path.write_text('[s]\nop = "indexer"\nsweep.max_context = { around = [1] }\n')
    with pytest.raises(CaseFileError) as info:
        load_case_file(path)
    check(info.value, case="s", key="sweep.max_context", fragment="0 is out of range")


def test_a_sweep_has_a_bounded_number_of_points(tmp_path: Path) -> None:
    values = list(range(1, MAX_POINTS + 2))
    err = error(tmp_path, f'[s]\nop = "tiny"\nsweep.length = {values}\n')
    check(err, case="s", key="sweep", fragment=f"makes {MAX_POINTS + 1} points")


def test_the_shipped_sweeps_cover_the_tiles_the_issue_names() -> None:
    """Around the 64-token page and the fused kernel's 128-token CUDA tile: 1, tile - 1,
    tile, tile + 1, two tiles + 1, ragged last pages; next_n 1 and 2; mHC around its CUDA
    blocks with 1 and odd token counts."""
    from numcheck.cases import load_case_file

    cases = load_case_file(ROOT / "cases" / "sweeps.toml")
    by = {}
    for c in cases:
        by.setdefault(c.table, []).append(c)
    decode = {c.params["max_context"] for c in by["indexer-decode-l"]}
    assert {63, 64, 65, 127, 128, 129, 257} <= decode
    assert 1 in {c.params["max_context"] for c in by["indexer-short"]}
    assert any(length % 64 not in (0, 1, 63) for length in decode)  # a ragged page mid-way
    assert {c.params["next_n"] for c in by["indexer-decode-l"]} == {1}
    assert {c.params["next_n"] for c in by["indexer-mtp2-l"]} == {2}
    assert {64, 65, 128, 129, 257} <= {c.params["max_context"] for c in by["indexer-mtp2-l"]}
    tokens = {c.params["tokens"] for c in by["mhc-tokens"]}
    assert {1, 15, 16, 17, 31, 32, 33, 63, 64, 65} <= tokens and any(t % 2 for t in tokens)
    assert all(c.devices == ("cuda",) for c in by["mhc-tokens-v4flash"])


# -- one summary row per sweep -------------------------------------------------------------


def _record(point: str, status: str, value: float, *, variant: str = "bf16") -> Record:
    return Record(
        id=f"indexer::s@{point}::{variant}[cpu]", nodeid="", op="indexer", case=f"s@{point}",
        variant=variant, device="cpu", status=status,
        reason="" if status == "pass" else f"logits.rel_fro = {value} > budget 0.004",
        metrics={"logits": {"rel_fro": value}}, topk={"recall_min": 1.0 - value},
        closest={"output": "logits", "metric": "rel_fro", "value": value, "limit": 0.004},
        sweep={"case": "s", "point": point},
    )


def test_a_sweep_folds_into_one_row_naming_its_failing_points() -> None:
    plain = Record(id="indexer::c::bf16[cpu]", nodeid="", op="indexer", case="c",
                   variant="bf16", device="cpu", status="pass")
    records = [_record("L63", "pass", 0.001), plain, _record("L65", "fail", 0.5),
               _record("L64", "pass", 0.003), _record("L129", "fail", 0.2),
               _record("L63", "pass", 0.0, variant="tf32")]
    folded = fold_sweeps(records)
    assert [r.case for r in folded] == ["s", "c", "s"]
    row = folded[0]
    assert row.status == "fail" and row.variant == "bf16"
    assert row.note == "2 of 4 points: L65, L129"
    assert row.reason.startswith("at L65: ")
    assert row.closest is not None and row.closest["output"] == "L65: logits"
    assert row.metrics["logits"]["rel_fro"] == 0.5  # the worst over the points
    assert row.topk == {"recall_min": 0.5}
    assert folded[2].status == "pass" and folded[2].note == "1 points"


def test_a_passing_sweep_row_shows_the_point_nearest_its_budget() -> None:
    row = fold_sweeps([_record("L1", "pass", 0.001), _record("L2", "pass", 0.003)])[0]
    assert row.status == "pass" and row.note == "2 points"
    assert row.closest is not None and row.closest["output"] == "L2: logits"


def test_the_summary_table_shows_the_folded_row() -> None:
    from numcheck.report.render import summary_table

    _, rows = summary_table([_record("L63", "pass", 0.001), _record("L65", "fail", 0.5)])
    assert len(rows) == 1
    assert rows[0][0] == "indexer::s"
    assert rows[0][-1] == "FAIL (1 of 2 points: L65)"


def test_the_casts_table_keeps_a_sweeps_worst_point() -> None:
    row = ["indexer::s@L{}", "bf16", "cpu", "6", "6", "1 kB", "{}", "{}", "-", "-"]
    rows = [[c.format(n) if "{}" in c else c for c in row[:6]] + [r, t, "-", "-"]
            for n, r, t in ((1, "9.1", "0"), (2, "12.5", "0"), (3, "3.0", "1"))]
    rows.append(["indexer::c", "bf16", "cpu", "1", "1", "1 kB", "2.0", "0", "-", "-"])
    points = [("s", "L1"), ("s", "L2"), ("s", "L3"), None]
    folded = fold_overhead_rows(rows, points)
    assert [r[0] for r in folded] == ["indexer::s (worst of 3 points: L3)", "indexer::c"]
