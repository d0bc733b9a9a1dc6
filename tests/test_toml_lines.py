"""Where each key of a TOML file is set: the line finder the case loader runs once per file."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from numcheck.toml_lines import key_lines

ROOT = Path(__file__).resolve().parent.parent

TOML = """\
# a comment
[a]
op = "indexer"
budget.bf16.logits.rel_fro = 1e-3

[b]
op = "indexer"
[b.budget.bf16]
logits = { calc_diff = 1e-5, rel_fro = 2e-3 }
topk.recall_min = 0.99

[b.budget.tf32.logits]
rel_fro = 1e-6   # trailing comment
"c.d" = 1

["v4.0"]
op = "indexer"
[ "v4.0".budget.bf16.logits ]
max_abs = 0.5
"""


@pytest.mark.parametrize(
    ("key", "line"),
    [
        (("a",), 2),
        (("a", "budget", "bf16", "logits", "rel_fro"), 4),
        (("a", "budget", "bf16"), 4),  # named by the dotted key
        (("b",), 6),
        (("b", "budget", "bf16"), 8),
        (("b", "budget", "bf16", "logits"), 9),
        (("b", "budget", "bf16", "logits", "calc_diff"), 9),
        (("b", "budget", "bf16", "logits", "rel_fro"), 9),
        (("b", "budget", "bf16", "topk", "recall_min"), 10),
        (("b", "budget", "tf32", "logits"), 12),
        (("b", "budget", "tf32", "logits", "rel_fro"), 13),
        (("b", "budget", "tf32", "logits", "c.d"), 14),
        (("v4.0", "budget", "bf16", "logits", "max_abs"), 19),
    ],
)
def test_each_way_of_writing_a_key_has_its_line(key: tuple[str, ...], line: int) -> None:
    assert key_lines(TOML)[key] == line


def test_a_key_nobody_wrote_has_no_line() -> None:
    lines = key_lines(TOML)
    assert ("b", "budget", "bf16", "logits", "max_abs") not in lines
    assert ("a", "budget", "tf32", "logits", "rel_fro") not in lines


def test_strings_and_arrays_that_look_like_keys_are_values() -> None:
    """``=``, brackets, quotes and ``#`` inside strings and multi-line arrays are not keys
    or headers, and the lines after them still count right."""
    text = (
        '[c]\n'                                              # 1
        'reason = "a [fake.header] and x = 1 # not a comment"\n'
        "literal = 'C:\\path = [x]'\n"
        'long = """\n'                                       # 4
        '[not.a.table]\n'
        'y = 2 \\"""\n'
        '"""\n'                                              # 7
        "raw = '''\n"
        "z = 3'''\n"                                         # 9
        'accepted = [\n'                                     # 10
        '  "one = 1",  # a comment with = and [\n'
        '  { w = 1 },\n'
        ']\n'
        'after = 4\n'                                        # 14
        'escaped = "a \\" b = [c]"\n'
        'date = 1979-05-27 07:32:00Z\n'                      # 16
        '[c.deep]\n'                                         # 17
        'inline = { a = { b = 1 }, "q.r" = 2 }\n'           # 18
    )
    lines = key_lines(text)
    assert tomllib.loads(text)["c"]["after"] == 4
    assert lines[("c", "reason")] == 2 and lines[("c", "literal")] == 3
    assert lines[("c", "long")] == 4 and lines[("c", "raw")] == 8
    assert lines[("c", "accepted")] == 10 and lines[("c", "after")] == 14
    assert lines[("c", "escaped")] == 15 and lines[("c", "date")] == 16
    assert lines[("c", "deep")] == 17
    assert lines[("c", "deep", "inline", "a", "b")] == 18
    assert lines[("c", "deep", "inline", "q.r")] == 18
    assert not any(k[:2] in (("not",), ("not", "a")) or k[-1] in ("y", "z", "w")
                   for k in lines)


def test_keys_under_an_array_of_tables_have_no_path() -> None:
    text = '[[runs]]\nname = "a"\n[[runs]]\nname = "b"\n[after]\nx = 1\n'
    assert key_lines(text) == {("runs",): 1, ("after",): 5, ("after", "x"): 6}


def test_a_table_named_before_its_header_takes_its_headers_line() -> None:
    text = '[c.budget.bf16]\nx = 1\n[c]\nop = "o"\n'
    lines = key_lines(text)
    assert lines[("c",)] == 3 and lines[("c", "budget")] == 1


def _paths(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, value in data.items():
        yield (*prefix, key)
        if isinstance(value, Mapping):
            yield from _paths(value, (*prefix, key))


SHIPPED = sorted(p for p in [*ROOT.glob("cases/*.toml"), *ROOT.glob("examples/**/*.toml"),
                             ROOT / "pyproject.toml"])


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_key_of_the_shipped_toml_files_is_on_the_line_found(path: Path) -> None:
    """Every key tomllib reads has a line, the line names the key, and nothing else is
    found (the case files, the examples' case files, pyproject.toml)."""
    text = path.read_text()
    lines = key_lines(text)
    rows = text.splitlines()
    paths = set(_paths(tomllib.loads(text)))
    assert paths <= set(lines)
    assert set(lines) <= paths
    for key in paths:
        assert key[-1] in rows[lines[key] - 1], (key, lines[key])
