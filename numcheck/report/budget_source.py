"""Where a budget comes from, and what to do when a check misses it.

A budget miss has three usual causes, each with its own next step: the change under test is
wrong (fix the variant), the budget is too tight for a correct variant (calibrate the honest
family of its class, never the variant alone), or the reference itself changed (regenerate
the golden). When it is not clear which, the variant is the suspect. The failure message names the budget's
location so the reader can tell which: the case file and line of the key
(``cases/indexer.toml:24``), or, for a value nobody wrote, the defaults row it comes from
(``default for bf16 from numcheck/numerics/budgets.py``). A variant whose table says ``budget_like =
"bf16"`` is held to bf16's tables: the location is then bf16's key, and the message names the
``budget_like`` line too, since that is where the two are tied.

tomllib keeps no line numbers, so :func:`locate_key` reads the case file's lines itself: it
follows table headers and dotted keys (``[c.budget.bf16.logits]`` then ``calc_diff = ...``,
``[c.budget.bf16]`` then ``logits = { calc_diff = ... }``, ``budget.bf16.logits.calc_diff``
under ``[c]``). Nothing here imports torch or pytest.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from numcheck.numerics.budgets import BUDGET_LIKE

#: Where the per-precision default budgets live, as the message names it.
DEFAULTS_SOURCE = "numcheck/numerics/budgets.py"

_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
_KEY = re.compile(r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')"
                  r"(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=\s*(.*)$")


def _split_key(dotted: str) -> list[str]:
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)", dotted)
    return [a or b or c for a, b, c in parts]


def locate_key(path: Path, key: Sequence[str]) -> int | None:
    """The 1-based line of the TOML file that sets ``key`` (a path of names), or None.

    A key set inside an inline table (``logits = { calc_diff = 1e-5 }``) is found on the
    line of that table.
    """
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    target = list(key)
    table: list[str] = []
    for number, line in enumerate(lines, start=1):
        header = _HEADER.match(line)
        if header:
            table = _split_key(header.group(1))
            continue
        found = _KEY.match(line)
        if not found:
            continue
        full = table + _split_key(found.group(1))
        if full == target:
            return number
        rest = target[len(full):]
        if (full == target[: len(full)] and found.group(2).lstrip().startswith("{") and rest
                and re.search(rf"(^|[{{,\s.]){re.escape(rest[-1])}\s*=", found.group(2))):
            return number
    return None


def locate_table(path: Path, case: str) -> int | None:
    """The line of the case's own table header ``[<case>]``."""
    return locate_key_header(path, [case])


def locate_key_header(path: Path, key: Sequence[str]) -> int | None:
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for number, line in enumerate(lines, start=1):
        header = _HEADER.match(line)
        if header and _split_key(header.group(1)) == list(key):
            return number
    return None


def budget_location(
    source: Path,
    shown_source: str,
    case: str,
    variant: str,
    output: str,
    metric: str,
    *,
    precision: str,
    value: float,
    lender: str | None = None,
) -> str:
    """``cases/indexer.toml:24 ([tiny.budget.bf16.logits] calc_diff = 3.8e-06)``, or
    ``calc_diff = 0.0001: default for bf16 from numcheck/numerics/budgets.py (no key in
    cases/indexer.toml:12 [tiny])`` when the case file does not set it. For a variant that
    borrows its budgets (``lender``: the loaded case's ``budget_like`` of the variant), the
    lender's key, and the ``budget_like`` line."""
    tables = lender or variant
    tied = ""
    if lender is not None:
        tie = locate_key(source, [case, "budget", variant, BUDGET_LIKE])
        tied = (f"{variant} takes {lender}'s budgets: {BUDGET_LIKE} at {shown_source}"
                + ("" if tie is None else f":{tie}"))
    line = locate_key(source, [case, "budget", tables, output, metric])
    if line is not None:
        where = f"{shown_source}:{line} ([{case}.budget.{tables}.{output}] {metric} = {value:g})"
        return f"{where[:-1]}; {tied})" if tied else where
    table = locate_table(source, case)
    at = f"{shown_source}:{table}" if table is not None else shown_source
    return (f"{metric} = {value:g}: default for {precision} from {DEFAULTS_SOURCE} ("
            f"{tied + '; ' if tied else ''}no key in {at} [{case}]; set "
            f"[{case}.budget.{tables}.{output}] {metric} to override)")


def calibrate_command(case_nodeid: str, device: str, *, pool: str = "",
                      checks: Sequence[str] = ()) -> str:
    """The command that measures a case's variants over fresh seeds and suggests budgets;
    ``pool``: a ``--numcheck-calibrate-pool`` option naming the honest family to measure;
    ``checks``: the node ids to run instead of the whole case (the family's checks)."""
    targets = " ".join(shlex.quote(c) for c in checks) or shlex.quote(case_nodeid)
    command = f"pytest --numcheck --numcheck-calibrate --numcheck-device {device} {targets}"
    return f"{command} {pool}" if pool else command


def next_steps(calibrate: str, regenerate: str, *, family: str = "") -> list[str]:
    """The causes of a budget miss and the step for each. ``calibrate`` measures the
    honest family of the variant's class (``family``: the class, for the wording), never
    the failing variant alone: a calibration of a wrong variant budgets the bug in."""
    who = f"the honest {family} family" if family else "the honest family of its class"
    return [
        "  next step:   my change is wrong -> fix the variant, then run 'reproduce'",
        (f"               my budget is too tight (a correct variant) -> calibrate {who}, not "
         f"this variant alone: {calibrate}"),
        ("               (the family: the op's reference implementation of the class, your "
         "other honest ones, the GEMMs numcheck.add_gemm_members registers; "
         "--numcheck-calibrate-write sets its tables, a variant outside it takes them with "
         "budget_like; docs/budgets.md, \"A budget for a new kernel\")"),
        ("               not sure it is correct -> this variant is the suspect: change no "
         "budget; 'reproduce' with --numcheck-explain shows where it strays, and a calibration "
         "that pools it refuses to write past its class's honest limits"),
        f"               the reference changed -> {regenerate}",
    ]


def budget_precision(output: str, precision: str, output_precision: Mapping[str, str]) -> str:
    """The defaults row an output's budget comes from (the coarser for a coarse output)."""
    from numcheck.numerics.budgets import coarser

    return coarser(precision, output_precision[output]) if output in output_precision else \
        precision
