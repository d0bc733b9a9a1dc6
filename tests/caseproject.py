"""A numcheck project in a pytester folder, written the one way the plugin's tests write it.

A test of the plugin runs pytest in a project of its own: case files under ``cases/``, an ini,
often a conftest that registers test-only variants, sometimes goldens. :func:`case_project`
writes the first three. Its ini puts the repository root on ``sys.path`` (pytest's
``pythonpath``), so a conftest imports the tests' shared modules as ``from tests import
planted`` whether pytest runs in the test's process, in a subprocess or in pytest-xdist's
workers; and it pins the device to the CPU, since these checks are about the plugin and must
read the same on a GPU runner. The tiny cases many tests share and the goldens a first
regeneration would write (:func:`write_goldens`) are here too.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: A project conftest that registers every planted bug of tests/planted.py.
PLANTED = "from tests import planted\nplanted.register_all()\n"
#: ``addopts`` for a project that leaves no .pytest_cache behind (it runs pytest many times).
NO_CACHE = "--numcheck-device cpu -p no:cacheprovider"
#: The ini line that puts the repository root on ``sys.path`` (the ini reads a path list as
#: shell words: quoted).
ROOT_ON_PATH = f"pythonpath = {shlex.quote(str(ROOT))}\n"

TINY_INDEXER = """
[tiny]
op = "indexer"
shape = {{ batch = 2, heads = 4, head_dim = 32, max_context = 256, index_topk = 32, next_n = {next_n} }}
seeds = [0]
variants = [{variants}]
{extra}
"""

TINY_MHC = """
[tiny-mhc]
op = "mhc_pre"
shape = { tokens = 8, hidden = 64 }
seeds = [0]
variants = ["tf32"]
"""


def project_ini(pytester: pytest.Pytester, addopts: str = "--numcheck-device cpu",
                ini: str = "") -> None:
    """The project's ini: the repository root on ``sys.path``, ``addopts``, then ``ini``'s
    lines (more keys of its ``[pytest]`` section)."""
    pytester.makeini(f"[pytest]\n{ROOT_ON_PATH}addopts = {addopts}\n{ini}")


def case_project(pytester: pytest.Pytester, cases: Mapping[str, str] | None = None, *,
                 conftest: str | None = None, addopts: str = "--numcheck-device cpu",
                 ini: str = "") -> Path:
    """Write a project into ``pytester``'s folder: ``cases/<name>`` for each of ``cases``
    (file name -> TOML), the ini (:func:`project_ini`) and, when given, ``conftest.py``.
    Returns the cases folder."""
    project_ini(pytester, addopts, ini)
    folder = pytester.path / "cases"
    folder.mkdir(exist_ok=True)
    for name, text in (cases or {}).items():
        (folder / name).write_text(text)
    if conftest is not None:
        pytester.makeconftest(conftest)
    return folder


def make_project(pytester: pytest.Pytester, *, variants: str = '"tf32"', next_n: int = 1,
                 extra: str = "", mhc: bool = False, planted: bool = False) -> None:
    """The tiny indexer case (its ``variants``, ``next_n`` and ``extra`` lines), the tiny mHC
    case with ``mhc``, every planted bug registered with ``planted``."""
    cases = {"indexer.toml": TINY_INDEXER.format(variants=variants, next_n=next_n, extra=extra)}
    if mhc:
        cases["mhc.toml"] = TINY_MHC
    case_project(pytester, cases, conftest=PLANTED if planted else None)


def golden(pytester: pytest.Pytester, case: str = "tiny", op: str = "indexer") -> Path:
    return pytester.path / "goldens" / op / f"{case}.safetensors"


def write_goldens(pytester: pytest.Pytester) -> None:
    """The goldens a first ``pytest --numcheck --numcheck-regen`` writes in such a project (on
    the CPU, planted variants at most: tests/planted*.py), without running that session: each
    case's golden, written by the call the plugin makes (numerics.write_golden). For tests
    whose subject is a later run; the regeneration runs themselves are tested in
    test_plugin.py (test_golden_workflow...) and test_regen.py."""
    from numcheck.cases import load_cases
    from numcheck.check.make_golden import write_golden
    from numcheck.check.run import CaseInputs
    from numcheck.goldens.files import golden_path
    from numcheck.ops import registry
    from tests import planted, planted_located

    with registry.isolated():  # case files may name planted variants; the runs add their own
        planted.register_all()
        planted_located.register_all()
        for case in load_cases(pytester.path / "cases"):
            if case.perf_only or "cpu" not in case.devices:
                continue
            op = registry.get_op(case.op)
            path = golden_path(pytester.path / "goldens", op.name, case.id)
            assert write_golden(path, op, case, "cpu", CaseInputs(op, case))
