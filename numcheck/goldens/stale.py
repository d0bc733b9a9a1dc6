"""Stale goldens: golden files that no case uses any more (a case renamed, moved or deleted).

They are harmless to the gate but mislead a reader of ``goldens/`` and cost review and
repository space, so the run reports them at the end; they are deleted only on request
(``--numcheck-prune``), and only they: a golden some case still names is never touched.

The cases are read from the case files themselves, not from what pytest collected, so the
answer is the same under pytest-xdist (whose controller process collects nothing). The
plugin asks only when the run covered the whole cases folder, so that "unused" never means
"not selected by -k". Nothing here imports pytest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from numcheck.cases import Case, load_case_file
from numcheck.disk.locking import exclusive
from numcheck.goldens.files import golden_path


def case_files(cases_dir: Path) -> list[Path]:
    """Every ``*.toml`` under ``cases_dir`` (as the plugin collects them), hidden folders aside."""
    return sorted(
        p for p in cases_dir.rglob("*.toml")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(cases_dir).parts)
    )


def used_goldens(cases: Iterable[Case], goldens_dir: Path) -> set[Path]:
    """The golden path of every case."""
    return {golden_path(goldens_dir, c.op, c.id).resolve() for c in cases}


def golden_files(goldens_dir: Path) -> list[Path]:
    """Every golden file: ``<goldens>/<op>/<case>.safetensors``, hidden files aside."""
    if not goldens_dir.is_dir():
        return []
    return sorted(
        p.resolve() for p in goldens_dir.glob("*/*.safetensors")
        if p.is_file() and not p.name.startswith(".") and not p.parent.name.startswith(".")
    )


def find_stale(cases_dir: Path, goldens_dir: Path) -> list[Path]:
    """Goldens under ``goldens_dir`` that no case in ``cases_dir`` names, sorted.

    Raises :class:`~numcheck.cases.CaseFileError` when a case file cannot be read: with a case
    unreadable, which goldens are used is unknown, and nothing may be called stale.
    """
    cases = [case for path in case_files(cases_dir) for case in load_case_file(path)]
    used = used_goldens(cases, goldens_dir)
    return [p for p in golden_files(goldens_dir) if p not in used]


def prune(stale: Iterable[Path]) -> list[Path]:
    """Delete the given goldens (each under its write lock); returns those deleted."""
    deleted = []
    for path in stale:
        with exclusive(path), contextlib.suppress(FileNotFoundError):
            path.unlink()
            deleted.append(path)
    return deleted
