"""What a ``--numcheck`` run collects: the cases folder by default, and what narrows it.

With no path arguments the cases folder is the suite (it must exist and hold a case file).
A run narrowed by ``-k``, ``-m``, node ids or paths leaves cases out on purpose: stale
goldens are then not judged, ``--numcheck-prune`` is refused, and a baseline's checks
missing from the run are not removals. A run that selects no case at all is a usage error
that says what was given and the fix.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from numcheck.plugin import options


def collect_cases_folder(config: pytest.Config, cases_dir: Path) -> None:
    """``pytest --numcheck`` with no paths: the cases folder is the suite."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        require_cases_dir(cases_dir)
        config.args[:] = [str(cases_dir)]


def require_cases_dir(cases_dir: Path) -> None:
    """A UsageError unless ``cases_dir`` is a folder holding a ``*.toml`` case file."""
    if not cases_dir.is_dir():
        raise pytest.UsageError(
            f"numcheck: no cases folder at {cases_dir}. Fix: create it with a "
            f"case file (see README 'Writing a case'), or point the {options.CASES_INI} "
            "ini key at yours"
        )
    if not any(cases_dir.glob("*.toml")):
        raise pytest.UsageError(
            f"numcheck: the cases folder {cases_dir} holds no *.toml case file. "
            "Fix: add one (see README 'Writing a case'), or point the "
            f"{options.CASES_INI} ini key at the folder that has them"
        )


def narrowing(config: pytest.Config, cases_dir: Path) -> str:
    """What keeps this run from covering the whole cases folder ('' when nothing does)."""
    for dest, label in (("keyword", "-k"), ("markexpr", "-m"), ("deselect", "--deselect"),
                        ("lf", "--lf"), ("stepwise", "--sw"), ("ignore", "--ignore"),
                        ("ignore_glob", "--ignore-glob")):
        if config.getoption(dest, None):
            return label
    for arg in config.args:
        if "::" in arg:
            return "node ids"
        path = (config.invocation_params.dir / arg).resolve()
        if not cases_dir.is_relative_to(path):
            return "path arguments"
    return ""


def nothing_selected(config: pytest.Config, cases_dir: Path) -> str:
    """The usage error of a ``--numcheck`` run that selects no case: what was given, the fix."""
    narrowed = narrowing(config, cases_dir)
    if narrowed in ("-k", "-m", "--deselect", "--lf", "--sw"):
        why = f"{narrowed} deselected every case"
    elif config.args_source == pytest.Config.ArgsSource.ARGS:
        why = (f"the arguments {' '.join(shlex.quote(a) for a in config.args)} hold no case "
               f"file under the cases folder {cases_dir}")
    else:
        why = f"the cases folder {cases_dir} yields no check"
    return (f"numcheck: {options.OPTION} selected no case ({why}; command line: "
            f"{' '.join(shlex.quote(a) for a in config.invocation_params.args) or '(none)'}). "
            f"Fix: name case files or node ids under {cases_dir} (e.g. pytest {options.OPTION} "
            f"{cases_dir.name}), loosen the selection, or run the tests without {options.OPTION}")
