"""The shipped case files load to exactly the budgets in tests/data/shipped-budgets.json.

The snapshot was made from the case files before they took ``budget_like`` and lost their
per-line provenance comments: every (case, variant, output, key) the gate checks is the same
after that rewrite. A budget changed on purpose (a re-calibration) is written again with
``python -m tests.budget_snapshot --write`` and reviewed as a diff of that file.
"""

from __future__ import annotations

import json

from tests.budget_snapshot import (  # tests/budget_snapshot.py
    SNAPSHOT,
    differences,
    limits,
    misplaced,
    snapshot,
)
from tests.shipped import shipped_cases


def test_shipped_case_files_load_to_the_snapshot() -> None:
    diff = differences(snapshot(), json.loads(SNAPSHOT.read_text()))
    assert not diff, ("the loaded budgets differ from tests/data/shipped-budgets.json "
                      "(if on purpose: python -m tests.budget_snapshot --write):\n"
                      + "\n".join(diff[:20]))


def test_the_comparison_sees_a_changed_value() -> None:
    now = snapshot()
    stored = json.loads(json.dumps(now))
    entry = "mhc_pre::v4flash-t64 bf16_roundtrip mixes"
    stored[entry]["limits"]["rel_fro"] *= 1.01
    old, new = now[entry]["limits"]["rel_fro"], stored[entry]["limits"]["rel_fro"]
    assert differences(now, stored) == [
        f"{entry} limits.rel_fro: snapshot {new!r}, now {old!r}"]
    del stored[entry]
    assert f"{entry}: new" in differences(now, stored)


def test_every_limit_of_every_shipped_case_says_where_it_is_set() -> None:
    """Each key of each shipped case (budget keys, each GPU model's speedup_min, overhead
    limits, invariance keys) goes through numcheck.cases.limits.limit_origin, the one
    function every failure's ``budget:`` line comes from: a key it says is given sits on that
    line of the file with the loaded value, and a default is set by no key of the case."""
    walked, wrong = 0, []
    for case in shipped_cases():
        for variant, output, metric, cls in limits(case):
            walked += 1
            problem = misplaced(case, variant, output, metric, cls)
            if problem is not None:
                wrong.append(f"{case.id} {variant} {output}.{metric} [{cls}]: {problem}")
    assert walked > 5000 and not wrong, wrong[:20]


def test_the_walk_sees_a_wrong_line_and_a_wrong_value() -> None:
    """The walk's check fails an origin one line off (the docs' old ``cases/mhc.toml:112``
    for [v4flash-t64.budget.bf16.y] rel_fro) and a value the file does not hold."""
    from dataclasses import replace

    from numcheck.numerics.budget_origin import Given

    (case,) = [c for c in shipped_cases() if c.id == "v4flash-t64"]
    assert misplaced(case, "bf16", "y", "rel_fro", "cpu") is None
    given = case.budgets["bf16"].origins["y"]["rel_fro"]
    assert isinstance(given, Given) and given.line is not None
    for shifted, value in ((given.line - 1, 0.0069), (given.line, 0.007)):
        origins = {**case.budgets["bf16"].origins,
                   "y": {**case.budgets["bf16"].origins["y"], "rel_fro": Given(given.table,
                                                                                shifted)}}
        y = case.budgets["bf16"].outputs["y"]
        budget = replace(case.budgets["bf16"], origins=origins, outputs={
            **case.budgets["bf16"].outputs, "y": replace(y, limits={**y.limits,
                                                                    "rel_fro": value})})
        bad = replace(case, budgets={**case.budgets, "bf16": budget})
        assert misplaced(bad, "bf16", "y", "rel_fro", "cpu") is not None
