"""Where each key of a TOML document is set: the line numbers the standard library drops.

``tomllib`` gives values, not positions, and a message that says where a budget is set must
name the case file's line. :func:`key_lines` reads the text once, when the file is loaded,
and maps every key path to the 1-based line that sets it: a table header
(``[c.budget.bf16.y]`` -> ``("c", "budget", "bf16", "y")``), a key under it, a dotted key
(``budget.bf16.y.rel_fro = ...``, which also names its implicit tables), and a key inside an
inline table (``y = { rel_fro = 1e-3 }``: ``y`` and ``y.rel_fro``, both on that line).

It is a reader of positions, not a parser: the text is assumed to be valid TOML (the caller
loads it with ``tomllib`` first, which reports any error), and keys inside arrays of tables
or of inline tables have no path and are left out (an array of tables takes the line of its
first header). A table first named implicitly (``[a.b]`` names ``a``) takes the line of its
own header when it has one. Nothing here imports numcheck.
"""

from __future__ import annotations

import re

#: A key path (``("c", "budget", "bf16", "y", "rel_fro")``) -> the line that sets it.
KeyLines = dict[tuple[str, ...], int]

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR = re.compile(r"[^,\]}#\r\n]*")
#: What skip_blank steps over: spaces and tabs; with newlines, line breaks and comments too.
_BLANK = {False: re.compile(r"[ \t]*"), True: re.compile(r"(?:[ \t\r\n]|#[^\n]*)*")}
#: A run of a string's characters that needs no look: no quote, no backslash in a basic string.
_PLAIN = {'"': re.compile(r'[^"\\]+'), "'": re.compile(r"[^']+")}
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\",
            "e": "\x1b"}


class _Reader:
    """A cursor over the text that counts lines."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.line = 1

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def advance(self, n: int = 1) -> None:
        chunk = self.text[self.pos:self.pos + n]
        self.line += chunk.count("\n")
        self.pos += len(chunk)

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip_blank(self, *, newlines: bool) -> None:
        """Spaces and tabs; with ``newlines``, also line breaks and comments."""
        self.advance(_BLANK[newlines].match(self.text, self.pos).end() - self.pos)

    def skip_line(self) -> None:
        """To the start of the next line."""
        end = self.text.find("\n", self.pos)
        self.advance((len(self.text) if end < 0 else end + 1) - self.pos)


def key_lines(text: str) -> KeyLines:
    """Every key path of the TOML ``text`` and the 1-based line that sets it (see the module
    docstring)."""
    r = _Reader(text)
    explicit: KeyLines = {}
    implicit: KeyLines = {}
    table: tuple[str, ...] | None = ()  # None: under an array of tables (no paths)
    while True:
        r.skip_blank(newlines=True)
        if r.at_end():
            break
        line = r.line  # a header or a key sits on one line
        if r.peek() == "[":
            array = r.peek(2) == "[["
            r.advance(2 if array else 1)
            path = _key(r)
            r.skip_blank(newlines=False)
            r.advance(2 if array else 1)
            r.skip_line()
            if path is None:
                table = None
                continue
            for i in range(1, len(path)):
                implicit.setdefault(path[:i], line)
            explicit.setdefault(path, line)  # an array of tables: its first header
            table = None if array else path
            continue
        path = _key(r)
        r.skip_blank(newlines=False)
        if path is None or r.peek() != "=":
            r.skip_line()  # not a key (invalid TOML is the loader's to report)
            continue
        r.advance()
        if table is None:
            _value(r, None, explicit)
            continue
        full = table + path
        for i in range(len(table) + 1, len(full)):
            implicit.setdefault(full[:i], line)
        explicit.setdefault(full, line)
        _value(r, full, explicit)
    return {**implicit, **explicit}


def _key(r: _Reader) -> tuple[str, ...] | None:
    """A dotted key (bare or quoted parts, spaces around the dots), or None."""
    parts: list[str] = []
    while True:
        r.skip_blank(newlines=False)
        part = _key_part(r)
        if part is None:
            return None
        parts.append(part)
        r.skip_blank(newlines=False)
        if r.peek() != ".":
            return tuple(parts)
        r.advance()


def _key_part(r: _Reader) -> str | None:
    c = r.peek()
    if c in ('"', "'"):
        return _string(r)
    found = _BARE.match(r.text, r.pos)
    if found is None:
        return None
    r.advance(found.end() - r.pos)
    return found.group()


def _string(r: _Reader) -> str:
    """A string of any of the four kinds, its value decoded (escapes of basic strings)."""
    quote = r.peek()
    multi = r.peek(3) == quote * 3
    delimiter = quote * 3 if multi else quote
    r.advance(len(delimiter))
    out: list[str] = []
    while not r.at_end():
        if r.text.startswith(delimiter, r.pos):
            # A multi-line string may end in up to two more quotes than its delimiter.
            extra = 0
            while multi and extra < 2 and r.text.startswith(delimiter + quote * (extra + 1),
                                                           r.pos):
                extra += 1
            out.append(quote * extra)
            r.advance(len(delimiter) + extra)
            return "".join(out)
        c = r.peek()
        if c == "\\" and quote == '"':
            out.append(_escape(r, multi))
            continue
        # a run up to the next quote or backslash at once, else this one character
        run = _PLAIN[quote].match(r.text, r.pos)
        out.append(run.group() if run else c)
        r.advance(len(out[-1]))
    return "".join(out)


def _escape(r: _Reader, multi: bool) -> str:
    r.advance()  # the backslash
    c = r.peek()
    if c in _ESCAPES:
        r.advance()
        return _ESCAPES[c]
    if c in ("u", "U"):
        width = 4 if c == "u" else 8
        digits = r.text[r.pos + 1:r.pos + 1 + width]
        r.advance(1 + width)
        try:
            return chr(int(digits, 16))
        except ValueError:
            return ""
    if multi:  # a line-ending backslash: the break and the blanks after it are dropped
        r.skip_blank(newlines=False)
        while r.peek() in ("\r", "\n") and not r.at_end():
            r.advance()
            r.skip_blank(newlines=False)
        return ""
    return ""


def _value(r: _Reader, path: tuple[str, ...] | None, lines: KeyLines) -> None:
    """Step over one value; the keys of an inline table are recorded under ``path`` (None
    inside an array, where keys have no path)."""
    r.skip_blank(newlines=False)
    c = r.peek()
    if c in ('"', "'"):
        _string(r)
    elif c == "{":
        r.advance()
        while True:
            r.skip_blank(newlines=True)  # TOML 1.1 lets an inline table span lines
            if r.at_end():
                return
            if r.peek() == "}":
                r.advance()
                return
            if r.peek() == ",":
                r.advance()
                continue
            key = _key(r)
            r.skip_blank(newlines=False)
            if key is None or r.peek() != "=":
                r.skip_line()
                return
            r.advance()
            inner = None if path is None else path + key
            if inner is not None:
                for i in range(len(path or ()) + 1, len(inner)):
                    lines.setdefault(inner[:i], r.line)
                lines.setdefault(inner, r.line)
            _value(r, inner, lines)
    elif c == "[":
        r.advance()
        while True:
            r.skip_blank(newlines=True)
            if r.at_end():
                return
            if r.peek() == "]":
                r.advance()
                return
            if r.peek() == ",":
                r.advance()
                continue
            _value(r, None, lines)
    else:  # a number, boolean or date: up to what ends a value
        found = _SCALAR.match(r.text, r.pos)
        r.advance(found.end() - r.pos if found else 0)
