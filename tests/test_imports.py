"""The package's import graph and layout: the rules docs/architecture.md names.

- **No import cycles** among numcheck's modules, counting every import: at module level,
  inside functions, and those for type checkers only (``if TYPE_CHECKING:``). A cycle behind
  ``TYPE_CHECKING`` runs never, but it still says two rooms need each other; the result of a
  check, for one, sits below every room that fills it.
- **Rooms import downward only**: a room is a subpackage or a top-level module; counting the
  same imports, no two rooms import each other and no rooms form a cycle, and
  docs/architecture.md's floor table puts every room on a floor above every room it
  imports, so the page cannot drift from the code.
- **Every module imports first on its own** (in a fresh interpreter), so no module works
  only because another was imported before it; **only the Triton kernel modules need
  triton**; **nothing registers on import** (the registry stays empty until its first
  lookup).
- **Only plugin/ imports pytest** (pytest-benchmark's session included), so the core runs
  from scripts and benchmarks.
- **One facade, and its FP8 / FP4 part**: ``numcheck/__init__.py`` is the public API and,
  with ``numcheck/fp8/`` (the FP8 / FP4 names: 27 names of one feature kept apart so that
  they do not crowd the top level, issue 47), the only package that re-exports names; each
  loads them lazily and names each one in ``_EXPORTS``, ``__all__`` and its
  ``TYPE_CHECKING`` block alike, so the import graph above sees every module it loads. A
  room's ``__init__`` defines its own names or none, and re-exports nothing.
- **At most 12 modules at numcheck's top level**: the rest live in rooms.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

from numcheck.ops.fused import KERNEL_MODULES
from tests.fresh import FreshPython
from tests.importgraph import (
    PACKAGE,
    import_graph,
    importable_up_front,
    module_names,
    needing,
    parsed,
    room_arrows,
    room_graph,
    source_of,
    triton_importers,
)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := dfs(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


@pytest.mark.parametrize(("files", "cycle", "breaker"), [
    pytest.param({  # the kind issue 27 found: a result type imported for annotations only
        "__init__.py": "",
        "result.py": "from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from pkg.check import Settled\n",
        "check.py": "from pkg.result import CheckResult\n",
    }, ["pkg.check", "pkg.result", "pkg.check"], "result.py", id="type-checking"),
    pytest.param({  # inside a function, relative, through a package's facade
        "__init__.py": "",
        "rooms/__init__.py": "from typing import TYPE_CHECKING\n"
                             "if TYPE_CHECKING:\n    from .low import thing\n",
        "rooms/low.py": "def f():\n    from ..top import g\n",
        "top.py": "import pkg.rooms\n",
    }, ["pkg.rooms", "pkg.rooms.low", "pkg.top", "pkg.rooms"], "rooms/low.py",
        id="function-relative-facade"),
])
def test_a_planted_cycle_is_caught(tmp_path: Path, files: dict[str, str], cycle: list[str],
                                   breaker: str) -> None:
    assert find_cycle(import_graph(_package(tmp_path / "planted", files))) == cycle
    # The same package with one edge of the cycle taken out passes.
    fixed = _package(tmp_path / "fixed", {**files, breaker: ""})
    assert find_cycle(import_graph(fixed)) is None


def test_no_import_cycles_among_numcheck_modules_type_checking_included() -> None:
    graph = import_graph()
    assert graph["numcheck.plugin.session"]  # the walk sees imports at all
    # ... including those under TYPE_CHECKING: calibrate names CaseGolden for annotations only.
    assert "numcheck.goldens.case_golden" in graph["numcheck.calibrate"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def mutual_pairs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every pair of nodes that import each other, each pair once."""
    return sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, ()))


def test_rooms_import_downward_only() -> None:
    rooms = room_graph()
    assert len(rooms) > 10 and rooms["check/"]  # the walk sees rooms and their arrows
    arrows = room_arrows()
    pairs = mutual_pairs(rooms)
    assert pairs == [], "rooms that import each other: " + "; ".join(
        f"{a} <-> {b} ({min(arrows[a, b])}; {min(arrows[b, a])})" for a, b in pairs)
    cycle = find_cycle(rooms)
    assert cycle is None, "room cycle: " + " -> ".join(
        f"{a} [{min(arrows[a, b])}]" for a, b in zip(cycle or [], (cycle or [])[1:]))


#: A small package of three rooms on three floors: ``top.py`` over ``high/`` over ``low/``.
ROOMS = {
    "__init__.py": "",
    "low/__init__.py": "",
    "low/a.py": "def f():\n    return 1\n",
    "high/__init__.py": "",
    "high/b.py": "from pkg.low.a import f\n",
    "top.py": "import pkg.high.b\n",
}


@pytest.mark.parametrize(("planted", "pair", "cycle"), [
    pytest.param({"low/a.py": "def f():\n    from pkg.high.b import g\n"},
                 [("high/", "low/")], ["high/", "low/", "high/"], id="inside-a-function"),
    pytest.param({"low/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from ..top import T\n"},
                 [], ["high/", "low/", "top.py", "high/"], id="type-checking-three-rooms"),
    pytest.param({"low/__init__.py": "from pkg import top\n"},
                 [], ["high/", "low/", "top.py", "high/"], id="a-room-init"),
])
def test_a_planted_back_arrow_is_caught(tmp_path: Path, planted: dict[str, str],
                                        pair: list[tuple[str, str]], cycle: list[str]) -> None:
    clean = _package(tmp_path / "clean", ROOMS)
    rooms = room_graph(clean)
    assert rooms == {"__init__.py": set(), "low/": set(), "high/": {"low/"},
                     "top.py": {"high/"}}
    assert mutual_pairs(rooms) == [] and find_cycle(rooms) is None
    # One import from a lower room back up: a pair of rooms, or a cycle of three.
    back = room_graph(_package(tmp_path / "planted", {**ROOMS, **planted}))
    assert mutual_pairs(back) == pair
    assert find_cycle(back) == cycle


#: docs/architecture.md: its floor table, and its ``ls numcheck/`` in floor order.
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def floor_table(text: str) -> dict[str, int]:
    """Room -> floor, from the table of the page's "## Floors" section, whose first two
    columns are the floor and its rooms (each in backticks: ``check/``, ``cases.py``)."""
    section = re.split(r"^## Floors$", text, maxsplit=1, flags=re.MULTILINE)[1]
    section = section.split("\n## ", 1)[0]
    floors: dict[str, int] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].isdigit():
            continue
        for room in re.findall(r"`([^`]+)`", cells[1]):
            assert room not in floors, f"{room} is on two floors"
            floors[room] = int(cells[0])
    return floors


def floor_problems(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
    """What the table gets wrong: a room on no floor, a room the code does not have, an
    import that does not go to a strictly lower floor."""
    problems = [f"{room}: on no floor" for room in sorted(set(graph) - set(floors))]
    problems += [f"{room}: no such room" for room in sorted(set(floors) - set(graph))]
    for room in sorted(set(graph) & set(floors)):
        for other in sorted(graph[room] & set(floors)):
            if floors[other] >= floors[room]:
                problems.append(f"{room} (floor {floors[room]}) imports {other} "
                                f"(floor {floors[other]})")
    return problems


def test_the_floor_table_puts_every_room_above_what_it_imports() -> None:
    floors = floor_table(ARCHITECTURE.read_text())
    assert len(floors) > 10
    assert floor_problems(room_graph(), floors) == []


def test_the_floor_check_catches_a_room_on_the_wrong_floor() -> None:
    table = ("## Floors\n\n| floor | rooms | what |\n|---|---|---|\n"
             "| 2 | `high/`, `top.py` | above |\n| 1 | `low/`, `gone.py` | ground |\n")
    floors = floor_table(table)
    assert floors == {"high/": 2, "top.py": 2, "low/": 1, "gone.py": 1}
    graph = {"low/": set(), "high/": {"low/"}, "top.py": {"high/"}, "new/": set()}
    assert floor_problems(graph, floors) == [
        "new/: on no floor", "gone.py: no such room", "top.py (floor 2) imports high/ (floor 2)"]


def test_ls_in_the_docs_lists_the_package_floor_by_floor() -> None:
    """The page's ``ls numcheck/`` names every file and room of the package, top floor
    first, so reading it shows the order the imports go in."""
    text = ARCHITECTURE.read_text()
    listing = text.split("```\nnumcheck/\n", 1)[1].split("```", 1)[0]
    shown = [line.split()[0] for line in listing.splitlines() if line.strip()]
    present = sorted(p.name + ("/" if p.is_dir() else "") for p in PACKAGE.iterdir()
                     if p.name != "__pycache__")
    assert sorted(shown) == present
    floors = floor_table(text)
    order = [floors[name] for name in shown if name in floors]
    assert order == sorted(order, reverse=True), "ls numcheck/ is not in floor order"


#: Where pytest may be imported: the plugin.
PYTEST_ALLOWED = "numcheck.plugin"


def pytest_importers(package: Path = PACKAGE) -> list[str]:
    """Modules outside plugin/ that import pytest (or pytest-benchmark) anywhere."""
    allowed = PYTEST_ALLOWED.replace("numcheck", package.name, 1)
    offenders = []
    for name in module_names(package):
        if name == allowed or name.startswith(allowed + "."):
            continue
        for node in ast.walk(parsed(source_of(name, package))):
            imported = ([a.name for a in node.names] if isinstance(node, ast.Import)
                        else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(m.split(".")[0] in ("pytest", "_pytest", "pytest_benchmark")
                   for m in imported):
                offenders.append(name)
    return offenders


#: Calls that register an op or a variant; no module makes one when it is imported.
REGISTERING = {"register", "add_variant", "add_gemm_members"}


def registering_at_import(package: Path = PACKAGE) -> list[str]:
    """``module:line`` of every module-level statement (outside a function or class) that
    calls a registering function."""
    found = []
    for name in module_names(package):
        for stmt in parsed(source_of(name, package)).body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call):
                    fn = node.func
                    called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                    if called in REGISTERING:
                        found.append(f"{name}:{node.lineno}")
    return found


def test_only_the_plugin_imports_pytest() -> None:
    assert pytest_importers() == []


def test_no_module_registers_at_import() -> None:
    """Statically; the fresh-interpreter test below checks the registry itself."""
    assert registering_at_import() == []


def test_the_static_rules_catch_planted_offenders(tmp_path: Path) -> None:
    package = _package(tmp_path, {
        "__init__.py": "",
        "plugin/__init__.py": "import pytest\n",  # allowed
        "core.py": "def helper():\n    import _pytest.fixtures\n",
        "bench.py": "from pytest_benchmark.stats import Metadata\n",  # pytest's plugin too
        "ops/mine.py": "import pkg\nif True:\n    pkg.registry.add_variant('op', None)\n"
                       "def later():\n    pkg.registry.register(None)\n",  # in a function
    })
    assert pytest_importers(package) == ["pkg.bench", "pkg.core"]
    assert registering_at_import(package) == ["pkg.ops.mine:3"]


#: The packages that re-export names lazily (PEP 562 ``__getattr__``): the public API, and
#: its FP8 / FP4 part.
FACADES = ("numcheck", "numcheck.fp8")


def _type_checking_names(module: str) -> dict[str, str]:
    """Name -> module of every ``from M import name`` under the facade's TYPE_CHECKING."""
    names: dict[str, str] = {}
    for node in parsed(source_of(module)).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom):
                    names.update({a.asname or a.name: sub.module or "" for a in sub.names})
    return names


@pytest.mark.parametrize("facade", FACADES)
def test_the_facade_names_what_it_loads_in_step(facade: str) -> None:
    package = importlib.import_module(facade)
    exports: dict[str, str] = package._EXPORTS
    assert set(package.__all__) - {"__version__"} == set(exports)
    assert _type_checking_names(facade) == exports  # what type checkers and the graph see
    for name, module in exports.items():
        assert getattr(package, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        package.no_such_name  # noqa: B018


def re_exporting_packages(package: Path = PACKAGE) -> list[str]:
    """The packages below ``package`` whose ``__init__`` re-exports names: a module-level
    ``__getattr__`` (PEP 562), an ``_EXPORTS`` table, or the lazy-export helper."""
    found = []
    for name in module_names(package):
        path = source_of(name, package)
        if name == package.name or path.name != "__init__.py":
            continue
        tree = parsed(path)
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assigned = {t.id for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    if isinstance(t, ast.Name)}
        lazy = any(isinstance(n, ast.ImportFrom) and (n.module or "").endswith("_lazy")
                   for n in ast.walk(tree))
        if "__getattr__" in defined or "_EXPORTS" in assigned or lazy:
            found.append(name)
    return found


def test_only_the_public_facades_re_export() -> None:
    """The public API is ``numcheck/__init__.py`` and its FP8 / FP4 part ``numcheck.fp8``; a
    room's ``__init__`` is its docstring or its own code (``numcheck.check``,
    ``numcheck.precision``), never a mirror of names defined elsewhere."""
    assert re_exporting_packages() == ["numcheck.fp8"]


def test_the_fp8_names_keep_their_old_spelling_unlisted() -> None:
    """docs/extending.md listed the FP8 / FP4 names at the top level: ``numcheck.<name>``
    still finds each (the same object), but the top level lists none of them (its
    ``__all__`` and ``_EXPORTS``, so its table in docs/extending.md neither)."""
    import numcheck
    import numcheck.fp8

    assert numcheck.fp8 is importlib.import_module("numcheck.fp8")
    for name in numcheck.fp8.__all__:
        assert name not in numcheck.__all__ and name not in numcheck._EXPORTS
        assert getattr(numcheck, name) is getattr(numcheck.fp8, name)


def test_a_planted_room_facade_is_caught(tmp_path: Path) -> None:
    package = _package(tmp_path, {
        "__init__.py": "from pkg._lazy import lazy_exports\n",  # the one facade: allowed
        "_lazy.py": "",
        "rooms/__init__.py": "_EXPORTS = {'f': 'pkg.rooms.low'}\n",
        "rooms/low.py": "def f():\n    pass\n",
        "other/__init__.py": "def __getattr__(name):\n    raise AttributeError(name)\n",
        "own/__init__.py": "def f():\n    return 1\n",  # a room's own code: fine
    })
    assert re_exporting_packages(package) == ["pkg.other", "pkg.rooms"]


def test_at_most_twelve_modules_at_the_top_level() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top


#: ``python -m NAME --help``, in a fresh interpreter (``runpy``, as ``-m`` runs it).
RUN_AS_MAIN = "import runpy, sys\nrunpy.run_module(sys.argv.pop(1), run_name='__main__', " \
              "alter_sys=True)\n"


@pytest.mark.slow  # a fresh interpreter (tests/fresh.py)
@pytest.mark.parametrize("command", ["numcheck", "numcheck.calibrate", "numcheck.heldout"])
def test_the_documented_commands_keep_their_names(fresh_python: FreshPython,
                                                  command: str) -> None:
    """``python -m numcheck.calibrate`` and ``python -m numcheck.heldout`` (README,
    docs/budgets.md) still run, wherever their code lives now."""
    done = fresh_python.run(RUN_AS_MAIN, [command, "--help"], cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {command} ")


#: The Triton kernels themselves; everything else must import without triton.
TRITON_KERNELS = (*KERNEL_MODULES.values(), "numcheck.ops.triton_gemm")


def test_the_modules_that_need_triton_are_the_kernels_and_the_suite_leaves_them_lazy() -> None:
    """tests/conftest.py imports every module up front except those the source says need
    triton (tests/importgraph.py), so a new Triton module cannot break a ``[test]`` install
    without triton; this says which they are, so a core module cannot start needing it."""
    need = triton_importers()
    assert need == set(TRITON_KERNELS), (
        f"modules that need triton to import: {sorted(need)}; the Triton kernels are "
        f"{sorted(TRITON_KERNELS)}. fix: import triton inside a function (numcheck runs "
        "without the fused extra), or, for a new kernel module, add it to TRITON_KERNELS and "
        "import it only where numcheck.ops.triton_support says triton is there"
    )
    assert not need & set(importable_up_front())


def test_what_needs_triton_is_read_from_the_source(tmp_path: Path) -> None:
    package = _package(tmp_path, {
        "__init__.py": "",
        "kernel.py": "import torch\nimport triton.language as tl\n",
        "user.py": "from pkg import kernel\n",  # through another module
        "user_of_user.py": "from .user import thing\n",  # two steps, relative
        "lazy.py": "def run():\n    from pkg.kernel import k\n",  # at its first call
        "optional.py": "try:\n    import triton\nexcept ImportError:\n    triton = None\n",
        "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from pkg import kernel\nelse:\n    import os\n",
        "cls.py": "class A:\n    from pkg.kernel import k\n",  # a class body runs
        "gpu/__init__.py": "from triton import jit\n",
        "gpu/child.py": "",  # its package's __init__ runs first
        "__main__.py": "",
    })
    assert needing("triton", package) == {
        "pkg.kernel", "pkg.user", "pkg.user_of_user", "pkg.cls", "pkg.gpu", "pkg.gpu.child"}
    assert importable_up_front(package) == ["pkg", "pkg.lazy", "pkg.optional", "pkg.typed"]

# In one fresh interpreter, each module is imported first: every numcheck module is dropped
# from sys.modules before it (torch stays loaded: importing it again per module would cost
# seconds each). The others are imported with triton blocked, as on an install without it;
# then the kernels, with triton as installed (where it is not, their ImportError is fine).
# After each import the op registry, if the import loaded it, must still be empty: nothing
# registers on import.
FRESH_IMPORTS = """
import importlib, importlib.machinery, json, sys

# Each module's code compiled once and kept (as a .pyc would be, where bytecode is written):
# every import still executes the module afresh.
_compiled = {}
_compile = importlib.machinery.SourceFileLoader.source_to_code

def _source_to_code(self, data, path, *, _optimize=-1):
    if (path, data) not in _compiled:
        _compiled[path, data] = _compile(self, data, path, _optimize=_optimize)
    return _compiled[path, data]

importlib.machinery.SourceFileLoader.source_to_code = _source_to_code
others, kernels = json.loads(sys.argv[1]), json.loads(sys.argv[2])
failures = {}

def fresh(name, triton_optional):
    for loaded in [m for m in sys.modules if m == "numcheck" or m.startswith("numcheck.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if not (triton_optional and (exc.name or "").split(".")[0] == "triton"):
            failures[name] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        failures[name] = f"{type(exc).__name__}: {exc}"
    registry = sys.modules.get("numcheck.ops.registry")
    if registry is not None and registry._REGISTRY is not None:
        failures[name] = f"importing it filled the op registry: {sorted(registry._REGISTRY)}"

sys.modules["triton"] = None  # `import triton` raises ImportError, as without the package
for name in others:
    fresh(name, triton_optional=False)
del sys.modules["triton"]
for name in kernels:
    fresh(name, triton_optional=True)
print(json.dumps(failures))
"""

#: Entry points run as ``python -m``: importing one runs its command.
COMMANDS = ("numcheck.__main__", "numcheck.calibrate.__main__")


@pytest.mark.slow  # a fresh interpreter (tests/fresh.py)
def test_every_module_imports_first_on_its_own_and_only_the_kernels_need_triton(
    fresh_python: FreshPython,
) -> None:
    others = [n for n in module_names() if n not in (*TRITON_KERNELS, *COMMANDS)]
    done = fresh_python.run(FRESH_IMPORTS, [json.dumps(others), json.dumps(TRITON_KERNELS)],
                            cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}
