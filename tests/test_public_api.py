"""The public API in numcheck/__init__.py: small, lazy, documented; the tutorial stays true."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import numcheck

ROOT = Path(__file__).parent.parent


def test_import_numcheck_does_not_import_torch() -> None:
    code = "import numcheck, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_public_name_resolves_and_is_documented() -> None:
    assert set(numcheck.__all__) == {"__version__", *numcheck._EXPORTS}
    assert set(numcheck.fp8.__all__) == set(numcheck.fp8._EXPORTS)
    for facade in (numcheck, numcheck.fp8):
        for name in facade._EXPORTS:
            value = getattr(facade, name)
            if inspect.isfunction(value) or inspect.isclass(value):
                assert inspect.getdoc(value), f"{facade.__name__}.{name} has no docstring"
        assert set(facade.__all__) <= set(dir(facade))


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        numcheck.no_such_name  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'no_such_name'" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_the_tutorial_quotes_the_example_project_verbatim() -> None:
    # docs/extending.md shows the files of examples/my_kernels, which CI runs: every code
    # block tagged with a file must appear in that file unchanged.
    doc = (ROOT / "docs" / "extending.md").read_text()
    blocks = re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", doc, flags=re.DOTALL)
    assert len(blocks) >= 4
    for path, block in blocks:
        text = (ROOT / path).read_text()
        assert block in text, f"docs/extending.md's block from {path} no longer matches the file"


def _api_table(heading: str = "## The public API") -> set[str]:
    """The names a table of docs/extending.md's "The public API" lists: the top level's, or
    the one under ``heading`` (its ``numcheck.fp8`` subsection)."""
    doc = (ROOT / "docs" / "extending.md").read_text()
    section = doc.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`(\w+)`", row)}


def test_the_public_api_table_lists_every_public_name() -> None:
    assert _api_table() == set(numcheck.__all__) - {"__version__"}
    assert _api_table("### `numcheck.fp8`: FP8 and FP4") == set(numcheck.fp8.__all__)


#: ``from numcheck... import ...`` lines of the user guides' code blocks.
IMPORT_LINE = re.compile(r"^\s*from (numcheck[\w.]*) import ([\w, ]+)$", re.MULTILINE)


def test_what_the_guides_import_from_numcheck_is_there() -> None:
    """A name a guide tells users to import resolves where the guide says, and a name the
    guides import from elsewhere than the facades is a module (``from numcheck.ops import
    registry``), not a re-export: the public API is ``numcheck`` and its FP8 / FP4 part,
    ``numcheck.fp8``."""
    found = 0
    for page in ("usage.md", "extending.md", "budgets.md", "cases.md", "fused.md", "fp8.md"):
        for module, names in IMPORT_LINE.findall((ROOT / "docs" / page).read_text()):
            package = importlib.import_module(module)
            for name in (n.strip() for n in names.split(",")):
                found += 1
                value = getattr(package, name)  # AttributeError: the guide is stale
                if module not in ("numcheck", "numcheck.fp8"):
                    assert inspect.ismodule(value), f"docs/{page}: import {name} from numcheck"
    assert found >= 2
