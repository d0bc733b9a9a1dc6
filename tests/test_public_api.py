"""The public API in numcheck/__init__.py: small, lazy, documented; the tutorial stays true."""

from __future__ import annotations

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
    for name in numcheck._EXPORTS:
        value = getattr(numcheck, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert inspect.getdoc(value), f"numcheck.{name} has no docstring"
    assert set(numcheck.__all__) <= set(dir(numcheck))


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
