"""Write calibrated values into case files in place, keeping comments and layout.

Case files are written by hand and carry the reasons for their numbers in comments, so a
tool that rewrites them must leave everything but the values it sets alone. tomlkit parses
TOML into a document that remembers comments, spacing and order; only keys whose value
changes are touched (a changed value keeps its line's comment, at the same column), and
missing tables are added after their case's other tables.

tomlkit is an optional dependency (the ``calibrate`` extra): only writing needs it, and
the gate itself only reads case files (with the standard library's tomllib).
"""

from __future__ import annotations

import re
import textwrap
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from numcheck.disk.atomic import atomic_write
from numcheck.numerics.budget_origin import Given, Inherited, Lent, Origin, root
from numcheck.numerics.budgets import BUDGET_LIKE
from numcheck.numerics.calibration_record import PROVENANCE as RECORDS
from numcheck.numerics.calibration_record import CalibrationRecord

#: How to install what writing needs.
INSTALL_HINT = "pip install tomlkit (or the calibrate extra: pip install 'numcheck[calibrate]')"
#: The header comment line naming a command that set values in the file (see
#: :func:`with_provenance`); a longer entry continues on lines starting ``#   ``.
PROVENANCE = "# set by: "
_CONTINUED = "#   "


class CaseWriteError(Exception):
    """A case file the writer cannot update (unreadable, or a value it would break)."""


@dataclass(frozen=True)
class Edit:
    """Set (or, with ``value=None``, remove) ``key`` of the table at ``table``.

    ``table`` is the dotted path of keys from the top (``("tiny", "budget", "bf16",
    "logits")``); ``sub`` names an entry inside an inline-table value (``speedup_min =
    { cuda = 1.1 }``: ``key="speedup_min", sub="cuda"``).
    """

    table: tuple[str, ...]
    key: str
    value: float | None
    sub: str | None = None
    #: The comment the changed line gets instead of the one it had; "" drops the line's
    #: comment (it described the old value); None keeps it.
    comment: str | None = None
    #: Where the key's value comes from now, as the loaded budget records it
    #: (numcheck.numerics.budget_origin): a key lent by ``budget_like`` or inherited from
    #: the storage class's table belongs to that table, and is not written here. None: a
    #: value with no budget origin (a speed threshold), written as told.
    origin: Origin | None = None

    @property
    def where(self) -> str:
        return ".".join((*self.table, self.key, *((self.sub,) if self.sub else ())))


@dataclass(frozen=True)
class Change:
    """One value the writer changed (``old``/``new`` None: absent before / removed)."""

    where: str
    old: float | None
    new: float | None
    note: str = ""

    def describe(self) -> str:
        def show(v: float | None) -> str:
            return "(none)" if v is None else format_number(v)
        if self.old is None and self.new is None and self.note:
            return f"{self.where}: {self.note}"  # a whole table left alone, and why
        text = f"{self.where}: {show(self.old)} -> {show(self.new)}"
        return f"{text} ({self.note})" if self.note else text


def have_tomlkit() -> bool:
    try:
        import tomlkit  # noqa: F401
    except ImportError:
        return False
    return True


def format_number(value: float) -> str:
    """A budget value as TOML: ``0.0041``, ``4.1e-06``, ``1``."""
    return f"{value:.4g}"


def apply_edits(
    text: str, edits: Sequence[Edit], provenance: tuple[str, str] | None = None,
    records: Mapping[tuple[str, str], CalibrationRecord] | None = None,
) -> tuple[str, list[Change], list[Change]]:
    """Apply ``edits`` to a case file's text: ``(new text, changes, skipped)``.

    Pure (text in, text out). An edit whose value equals the file's is no change. A
    ``tie_band_rel`` edit on a table that uses ``tie_band_abs`` is skipped (a budget takes
    one of the two), and so is a value the file does not hold as a number. An edit whose
    ``origin`` says the key belongs to another table is skipped: a variant whose budget is
    borrowed (``budget_like``; one entry per variant), or a key a coarse output inherits.
    ``provenance`` (command, when): named in the header when anything changed.
    ``records``: (case, variant) -> the calibration record written as
    ``[<case>.provenance.<variant>]`` (numcheck.numerics.calibration_record), replacing the
    one there, when a value of that variant changed or the record names other evidence
    (its command, date and torch version alone are not news).
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise CaseWriteError(f"not valid TOML: {exc}") from exc
    changes: list[Change] = []
    skipped: list[Change] = []
    created: list[Any] = []
    borrowers: set[str] = set()
    for edit in edits:
        if isinstance(edit.origin, Lent):
            lender = edit.origin.lender
            where = ".".join(edit.table[:3])
            if where not in borrowers:
                borrowers.add(where)
                skipped.append(Change(where, None, None, (
                    f"takes {lender}'s budgets ({BUDGET_LIKE} = \"{lender}\"): not written "
                    f"as copies; set [{edit.table[0]}.budget.{lender}] to change both")))
            continue
        if isinstance(edit.origin, Inherited):
            held = root(edit.origin)
            where = held.table if isinstance(held, Given) else edit.origin.variant
            skipped.append(Change(edit.where, None, edit.value, (
                f"{edit.origin.output} is stored in {edit.origin.storage}: held to [{where}] "
                f"{edit.key}; set it there to change it")))
            continue
        table = _table(doc, edit.table, create=edit.value is not None, created=created)
        if table is None:
            continue
        if edit.key == "tie_band_rel" and "tie_band_abs" in table:
            skipped.append(Change(edit.where, None, edit.value, "the table uses tie_band_abs"))
            continue
        holder, key = table, edit.key
        if edit.sub is not None:
            if key not in table:
                if edit.value is not None:
                    table[key] = tomlkit.parse(
                        f"x = {{ {edit.sub} = {format_number(edit.value)} }}")["x"]
                    _sub_line(table, key, new_entry=False, comment=edit.comment)
                    changes.append(Change(edit.where, None, edit.value))
                continue
            holder, key = table[key], edit.sub
            if not isinstance(holder, dict):
                skipped.append(Change(edit.where, None, edit.value, "not a table"))
                continue
        old = _number(holder.get(key))
        if key in holder and old is None:
            skipped.append(Change(edit.where, None, edit.value, "the file's value is not a number"))
            continue
        # Compared as written: 0.006800000000000001 is the 0.0068 the file already holds.
        if (old is None) == (edit.value is None) and (
                old is None or float(format_number(old)) == float(format_number(edit.value or 0))):
            continue
        if edit.value is None:
            del holder[key]
            if edit.sub is not None:
                _tidy_inline(table, edit.key)
        else:
            _set(holder, key, edit.value, edit.comment)
            if edit.sub is not None:
                _sub_line(table, edit.key, new_entry=old is None, comment=edit.comment)
        changes.append(Change(edit.where, old, edit.value))
    for (case, variant), record in (records or {}).items():
        note = _set_record(doc, case, variant, record, changes, created)
        if note is not None:
            changes.append(note)
    for table in created:
        # A blank line after a new table, before whatever follows, like the others.
        last = next(reversed(table.value.body), (None, None))[1]
        if last is not None and hasattr(last, "trivia"):
            last.trivia.trail = "\n\n"
    out = tomlkit.dumps(doc)
    if created and "\n\n\n" not in text:
        # tomlkit separates consecutive new tables itself: keep single blank lines.
        out = re.sub(r"\n{3,}", "\n\n", out)
    if created and not text.endswith("\n\n"):
        out = out.rstrip("\n") + "\n"
    if changes and provenance is not None:
        out = with_provenance(out, *provenance)
    tomllib.loads(out)  # never write what the gate could not read back
    return out, changes, skipped


def write_edits(
    path: Path, edits: Sequence[Edit], provenance: tuple[str, str] | None = None,
    records: Mapping[tuple[str, str], CalibrationRecord] | None = None,
) -> tuple[list[Change], list[Change]]:
    """Apply ``edits`` to the case file at ``path`` in place: ``(changes, skipped)``.

    The file is replaced atomically (a temporary file renamed over it), and only when
    something changed; ``provenance`` and ``records`` as for :func:`apply_edits`.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise CaseWriteError(f"{path}: cannot read it ({exc})") from exc
    try:
        new, changes, skipped = apply_edits(text, edits, provenance, records)
    except CaseWriteError as exc:
        raise CaseWriteError(f"{path}: {exc}") from exc
    if changes:
        atomic_write(path, new.encode(), mode=path.stat().st_mode & 0o777)
    return changes, skipped


def with_provenance(text: str, command: str, when: str, *, width: int = 96) -> str:
    """``text`` with ``# set by: <command> (<when>)`` first among the ``# set by:`` lines of
    its header (the comment lines before the first table), wrapped at ``width``; an older
    entry of the same command is dropped, so each command is named once, newest first."""
    command, when = " ".join(command.split()), " ".join(when.split())
    lines = text.split("\n")
    header = 0
    while header < len(lines) and (not lines[header].strip()
                                   or lines[header].lstrip().startswith("#")):
        header += 1
    header = min(header, len(lines) - 1) if lines[-1] == "" else header
    kept: list[str] = []
    first: int | None = None
    i = 0
    while i < header:
        if not lines[i].startswith(PROVENANCE):
            kept.append(lines[i])
            i += 1
            continue
        entry = [lines[i][len(PROVENANCE):]]
        i += 1
        while i < header and lines[i].startswith(_CONTINUED):
            entry.append(lines[i][len(_CONTINUED):].strip())
            i += 1
        joined = " ".join(entry)
        if joined == command or joined.startswith(command + " ("):
            continue  # the same command, run again: replaced below
        if first is None:
            first = len(kept)
        kept.extend(_provenance_lines(joined, width))
    if first is None:  # after the header's comments, before the blank lines that end it
        first = len(kept)
        while first and not kept[first - 1].strip():
            first -= 1
    new = _provenance_lines(f"{command} ({when})", width)
    if not any(line.strip() for line in kept):
        new.append("")  # a file without a header comment: a blank line before the first table
    return "\n".join([*kept[:first], *new, *kept[first:], *lines[header:]])


def _provenance_lines(entry: str, width: int) -> list[str]:
    parts = textwrap.wrap(entry, width - len(PROVENANCE), break_long_words=False,
                          break_on_hyphens=False) or [""]
    return [PROVENANCE + parts[0], *(_CONTINUED + part for part in parts[1:])]


#: Record keys whose change alone is no reason to rewrite a record: the same evidence
#: measured again by another command line, on another day or torch build.
_NOT_NEWS = frozenset({"command", "date", "torch"})


def _set_record(doc: Any, case: str, variant: str, record: CalibrationRecord,
                changes: list[Change], created: list[Any]) -> Change | None:
    """Write ``record`` as ``[<case>.provenance.<variant>]`` when news: a value of the
    variant changed, or the evidence differs (pool, devices, seeds, what was accepted)."""
    import tomlkit

    prefix = f"{case}.budget.{variant}."
    old = doc.get(case, {}).get(RECORDS, {}).get(variant)
    new = record.as_table()
    same = isinstance(old, dict) and set(old) == set(new) and all(
        _plain(old.get(k)) == v for k, v in new.items() if k not in _NOT_NEWS)
    if same and not any(c.where.startswith(prefix) for c in changes):
        return None
    table = _table(doc, (case, RECORDS, variant), create=True, created=created)
    for key in list(table):
        del table[key]
    for key, value in new.items():
        if key == "accepted":  # one line per entry: each is a sentence
            value = tomlkit.array(value).multiline(True)
        table[key] = value
    if old is None:
        table.comment("what set these budget tables; read by the next calibration")
        table.trivia.comment_ws = "  "
    return Change(f"{case}.{RECORDS}.{variant}", None, None,
                  f"recorded: pool {', '.join(record.pool)}; devices "
                  f"{', '.join(record.devices)}; {record.seed_text()}"
                  + (f"; accepted past the honest limits: {len(record.accepted)}"
                     if record.accepted else ""))


def _plain(value: Any) -> Any:
    """A tomlkit value as plain Python (arrays as lists)."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.unwrap() if hasattr(value, "unwrap") else value


def _table(doc: Any, keys: tuple[str, ...], *, create: bool, created: list[Any]) -> Any:
    """The (possibly new) table at ``keys``; None when absent and not created. New leaf
    tables are appended to ``created``."""
    import tomlkit

    node = doc
    for depth, key in enumerate(keys):
        if key not in node:
            if not create:
                return None
            leaf = depth == len(keys) - 1
            node[key] = tomlkit.table(is_super_table=not leaf)
            if leaf:
                created.append(node[key])
        node = node[key]
        if not isinstance(node, dict):
            raise CaseWriteError(f"'{'.'.join(keys[:depth + 1])}' is not a table")
    return node


def _number(item: Any) -> float | None:
    if isinstance(item, bool) or not isinstance(item, int | float):
        return None
    return float(item)


def _set(holder: Any, key: str, value: float, comment: str | None = None) -> None:
    """Set a number, keeping the old line's comment at the same column, or giving the line
    ``comment`` (two spaces after the value)."""
    import tomlkit

    new = tomlkit.parse(f"x = {format_number(value)}")["x"]
    old = holder.get(key)
    trivia = getattr(old, "trivia", None)
    inline = isinstance(holder, tomlkit.items.InlineTable)
    if comment is not None and not inline:
        if comment:
            new.comment(comment)
            new.trivia.comment_ws = "  "
        if trivia is not None:
            new.trivia.indent, new.trivia.trail = trivia.indent, trivia.trail
    elif trivia is not None and not inline:
        grow = len(format_number(value)) - len(old.as_string())
        new.trivia.indent = trivia.indent
        new.trivia.comment = trivia.comment
        new.trivia.trail = trivia.trail
        ws = trivia.comment_ws
        if trivia.comment:
            ws = ws[: max(1, len(ws) - grow)] if grow > 0 else ws + " " * -grow
        new.trivia.comment_ws = ws
    holder[key] = new
    if comment == "" and not inline:
        # tomlkit carries a replaced item's comment over to the new one: drop it here.
        holder[key].trivia.comment = ""
        holder[key].trivia.comment_ws = ""


def _sub_line(table: Any, key: str, *, new_entry: bool, comment: str | None) -> None:
    """The line of an inline table after one of its entries was set (``speedup_min = { H200
    = 1.53, H100 = 1.45 }``): spaced as written by hand when the entry is new, and with the
    line's ``comment`` when one is given (the entry itself holds none)."""
    if new_entry:
        _tidy_inline(table, key)
    if comment is not None:
        item = table[key]
        item.trivia.comment = f"# {comment}" if comment else ""
        item.trivia.comment_ws = (item.trivia.comment_ws or "  ") if comment else ""


def _tidy_inline(table: Any, key: str) -> None:
    """After removing an entry of an inline table: drop it when empty, else rewrite it as
    ``{ a = 1, b = 2 }`` (tomlkit leaves the removed entry's spacing behind)."""
    import tomlkit

    inline = table[key]
    if not inline:
        del table[key]
        return
    body = ", ".join(f"{k.as_string().strip()} = {v.as_string().strip()}"
                     for k, v in inline.value.body if k)
    new = tomlkit.parse(f"x = {{ {body} }}")["x"]
    new.trivia.comment_ws = inline.trivia.comment_ws
    new.trivia.comment = inline.trivia.comment
    new.trivia.trail = inline.trivia.trail
    table[key] = new
