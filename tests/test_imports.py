"""The package's import graph: no cycles among numcheck's modules, and every module imports
on its own (first, in a fresh interpreter), so no module works only because another was
imported before it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from fresh import FreshPython

from numcheck.ops.fused import KERNEL_MODULES

PACKAGE = Path(__file__).resolve().parent.parent / "numcheck"


def module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str, known: set[str]) -> set[str]:
    """The numcheck modules ``module`` imports, at module level or inside functions; imports
    for type checkers only (``if TYPE_CHECKING:``) run never and are left out."""
    path = PACKAGE.parent / Path(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name in known)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for alias in child.names:
                    full = f"{child.module}.{alias.name}"
                    found.add(full if full in known else child.module)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {m for m in found if m in known and m != module}


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


def test_no_import_cycles_among_numcheck_modules() -> None:
    names = module_names()
    known = set(names)
    graph = {name: imports_of(name, known) for name in names}
    assert graph["numcheck.plugin.session"]  # the walk sees imports at all
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


#: The Triton kernels themselves; everything else must import without triton.
TRITON_KERNELS = (*KERNEL_MODULES.values(), "numcheck.ops.triton_gemm")

# In one fresh interpreter, each module is imported first: every numcheck module is dropped
# from sys.modules before it (torch stays loaded: importing it again per module would cost
# seconds each). The others are imported with triton blocked, as on an install without it;
# then the kernels, with triton as installed (where it is not, their ImportError is fine).
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

sys.modules["triton"] = None  # `import triton` raises ImportError, as without the package
for name in others:
    fresh(name, triton_optional=False)
del sys.modules["triton"]
for name in kernels:
    fresh(name, triton_optional=True)
print(json.dumps(failures))
"""


@pytest.mark.slow  # a fresh interpreter (tests/fresh.py)
def test_every_module_imports_first_on_its_own_and_only_the_kernels_need_triton(
    fresh_python: FreshPython,
) -> None:
    others = [n for n in module_names() if n not in (*TRITON_KERNELS, "numcheck.__main__")]
    done = fresh_python.run(FRESH_IMPORTS, [json.dumps(others), json.dumps(TRITON_KERNELS)],
                            cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}
