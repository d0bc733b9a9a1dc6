"""numcheck's one error shape: what is wrong, how to fix it, and where, on the one line a
user reads (``<file>: case '<id>': key '<key>': <problem>. Fix: <fix>``, with the parts
an error has), and every numcheck error survives pickling whole: checks run in a worker
process, and pytest-xdist ships errors between processes. No numcheck imports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def reduce_whole(exc: BaseException) -> tuple[Any, ...]:
    """An exception's ``__reduce__`` that rebuilds it from its message and fields as they
    are, without calling its ``__init__`` again (whose arguments are not its message)."""
    return (_rebuilt, (type(exc), exc.args), exc.__dict__)


def _rebuilt(cls: type[BaseException], args: tuple[Any, ...]) -> BaseException:
    exc = cls.__new__(cls)
    exc.args = args
    return exc


class NumcheckError(ValueError):
    """A problem a user can fix: ``problem`` says what is wrong, ``fix`` how to repair it,
    and ``key`` (dotted), ``path`` and ``case`` where, those it has."""

    __reduce__ = reduce_whole

    def __init__(self, key: str | None, problem: str, fix: str, *,
                 path: Path | str | None = None, case: str | None = None) -> None:
        where = [str(path)] if path is not None else []
        where += [f"case '{case}'"] if case is not None else []
        where += [f"key '{key}'"] if key is not None else []
        super().__init__(": ".join([*where, f"{problem}. Fix: {fix}"]))
        self.key, self.problem, self.fix, self.case = key, problem, fix, case
        self.path = None if path is None else Path(path)
