"""The shipped case files load to exactly the budgets in tests/data/shipped-budgets.json.

The snapshot was made from the case files before they took ``budget_like`` and lost their
per-line provenance comments: every (case, variant, output, key) the gate checks is the same
after that rewrite. A budget changed on purpose (a re-calibration) is written again with
``python -m tests.budget_snapshot --write`` and reviewed as a diff of that file.
"""

from __future__ import annotations

import json

from tests.budget_snapshot import SNAPSHOT, differences, snapshot  # tests/budget_snapshot.py


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
