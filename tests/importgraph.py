"""numcheck's import graph, read from its source: for tests/test_imports.py's rules and for
tests/conftest.py, which must know which modules need triton without a list kept by hand.

``triton_importers`` is the one place that says which modules cannot be imported without
triton: those whose import-time code imports it, directly or through another such module.
conftest.py leaves exactly those to their first call (so a ``[test]`` install without the
``fused`` extra runs the suite), and tests/test_imports.py checks that they are the Triton
kernels and nothing else.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "numcheck"


def module_names(package: Path = PACKAGE) -> list[str]:
    """Every module of ``package`` (a folder) by dotted name; a package by its own name."""
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def source_of(module: str, package: Path = PACKAGE) -> Path:
    path = package.parent / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def parsed(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once per version of the file: the graph is read
    by every test process at start (tests/conftest.py) and by several rules of
    tests/test_imports.py; the trees are only walked, never changed."""
    return _parse(path, *_version(path))


def _version(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


@functools.cache
def _parse(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute module a ``from ... import`` names, relative imports resolved."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in node.handlers:
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(getattr(t, "id", None) in names for t in types):
            return True
    return False


def _run_at_import(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of ``body`` that importing the module executes: not a function's body, not
    ``if TYPE_CHECKING:``, not the body of a ``try`` that catches ImportError (an optional
    import)."""
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from stmt.decorator_list  # decorators run at import, the body does not
            continue
        if isinstance(stmt, ast.If) and getattr(stmt.test, "id", "") == "TYPE_CHECKING":
            yield from _run_at_import(stmt.orelse)
            continue
        if isinstance(stmt, ast.Try) and _catches_import_error(stmt):
            for part in (stmt.handlers, stmt.orelse, stmt.finalbody):
                yield from _run_at_import(part)  # type: ignore[arg-type]
            continue
        if isinstance(stmt, ast.ClassDef | ast.If | ast.For | ast.While | ast.With | ast.Try):
            yield stmt
            for field in ("body", "orelse", "finalbody", "handlers"):
                yield from _run_at_import(getattr(stmt, field, []))
            continue
        if isinstance(stmt, ast.ExceptHandler):
            yield from _run_at_import(stmt.body)
            continue
        yield from ast.walk(stmt)


def _imported(module: str, node: ast.AST, known: set[str], is_package: bool) -> set[str]:
    """What one import statement names: modules of ``known``, or the top-level name of an
    outside package (``triton``, ``torch``)."""
    found: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            found.add(alias.name if alias.name in known else alias.name.split(".")[0])
    elif isinstance(node, ast.ImportFrom):
        source = _absolute(module, node, is_package)
        if source not in known and source.split(".")[0] not in {m.split(".")[0] for m in known}:
            return {source.split(".")[0]}
        for alias in node.names:
            full = f"{source}.{alias.name}"
            found.add(full if full in known else source)
    return found


def imports_of(module: str, known: set[str], package: Path = PACKAGE, *,
               at_import: bool = False, outside: bool = False) -> set[str]:
    """The modules of ``known`` that ``module`` imports anywhere in its source: at module
    level, inside functions, and under ``if TYPE_CHECKING:`` alike; with ``at_import``, only
    those its import executes (see ``_run_at_import``). With ``outside``, the top-level
    names of the other packages it imports too."""
    path = source_of(module, package)
    tree = parsed(path)
    nodes = _run_at_import(tree.body) if at_import else ast.walk(tree)
    found: set[str] = set()
    for node in nodes:
        found |= _imported(module, node, known, path.name == "__init__.py")
    return {m for m in found if (m in known or outside) and m != module}


def _versions(package: Path) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
    """The package's modules and their files' versions: the key under which what is read
    from them is kept (the graph and the modules that need triton are read by every test
    process at start and by several rules of tests/test_imports.py)."""
    names = tuple(module_names(package))
    return names, tuple(_version(source_of(name, package)) for name in names)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports anywhere (:func:`imports_of`), read
    once per version of the package's files; a fresh copy for each caller."""
    return {name: set(found) for name, found in _graph(package, *_versions(package)).items()}


@functools.cache
def _graph(package: Path, names: tuple[str, ...], versions: tuple[tuple[int, int], ...]
           ) -> dict[str, frozenset[str]]:
    known = set(names)
    return {name: frozenset(imports_of(name, known, package)) for name in names}


def needing(outside: str, package: Path = PACKAGE) -> set[str]:
    """The modules of ``package`` that cannot be imported without the package ``outside``:
    their import imports it, directly, through another module of ``package`` that does, or
    through their own parent package's ``__init__``."""
    return set(_needing(outside, package, *_versions(package)))


@functools.cache
def _needing(outside: str, package: Path, names: tuple[str, ...],
             versions: tuple[tuple[int, int], ...]) -> frozenset[str]:
    known = set(names)
    deps = {n: imports_of(n, known, package, at_import=True, outside=True) for n in names}
    for name in names:  # importing a.b.c runs a/__init__ and a/b/__init__ first
        parts = name.split(".")
        deps[name] |= {".".join(parts[:i]) for i in range(1, len(parts))} & known
    need = {n for n, d in deps.items() if outside in d}
    while grown := {n for n, d in deps.items() if n not in need and d & need}:
        need |= grown
    return frozenset(need)


def triton_importers(package: Path = PACKAGE) -> set[str]:
    """The numcheck modules that need triton to be imported (the Triton kernels)."""
    return needing("triton", package)


def importable_up_front(package: Path = PACKAGE) -> list[str]:
    """The modules a test process imports once before its first test (tests/conftest.py):
    all but the entry points run as ``python -m`` (importing one runs its command) and those
    that need triton, left to their first call as in a real run (and absent without the
    ``fused`` extra)."""
    lazy = triton_importers(package)
    return [name for name in module_names(package)
            if name not in lazy and name.split(".")[-1] != "__main__"]


def room_of(module: str, package: Path = PACKAGE) -> str:
    """The room a module lives in, named as ``ls`` shows it: a subpackage (``check/``) or a
    top-level module (``cases.py``; the package's own ``__init__.py``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    if len(parts) > 2 or source_of(module, package).name == "__init__.py":
        return parts[1] + "/"
    return parts[1] + ".py"


def room_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Room -> the other rooms its modules import (every import, as :func:`import_graph`
    counts them: module level, inside functions, under ``TYPE_CHECKING``)."""
    rooms: dict[str, set[str]] = {}
    for module, imported in import_graph(package).items():
        room = room_of(module, package)
        rooms.setdefault(room, set()).update(
            other for other in (room_of(m, package) for m in imported) if other != room)
    return rooms


def room_arrows(package: Path = PACKAGE) -> dict[tuple[str, str], set[str]]:
    """(room, imported room) -> the module imports behind that arrow, ``a -> b``."""
    arrows: dict[tuple[str, str], set[str]] = {}
    for module, imported in import_graph(package).items():
        for other in imported:
            pair = (room_of(module, package), room_of(other, package))
            if pair[0] != pair[1]:
                arrows.setdefault(pair, set()).add(f"{module} -> {other}")
    return arrows
