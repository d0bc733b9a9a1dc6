"""Keep a value of a numcheck option from moving pytest's rootdir.

pytest picks the rootdir and the config file (``determine_setup``) before it loads any
installed plugin, so at that moment ``--numcheck-report`` is an unknown option and the
``/tmp/r.json`` after it reads as a test path. pytest ignores a path that does not exist, so
the first ``pytest --numcheck --numcheck-report /tmp/r.json`` works; once the file exists,
the second run roots at ``/tmp``, misses the project's config file and finds no cases
folder. (``--numcheck-report=/tmp/r.json`` never had the problem: the value is part of the
unknown option.) Every numcheck option that takes a value is affected the same way.

The repair runs first in ``pytest_load_initial_conftests``, after the plugins are loaded and
before any conftest, the cases folder or an ini value is read: it asks pytest's own
``determine_setup`` again with the free arguments pytest now parses correctly, and when the
answer differs it installs that rootdir and config file (and their ``addopts`` and
``confcutdir``), as pytest would have done had it known the option. This touches pytest's
private ``Config`` attributes, checked by name: on a pytest whose layout differs, the run
stops with a usage error that says to write ``--option=value`` instead, never with a
wrong rootdir.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest


def value_options(parser: pytest.Parser, group: str) -> list[str]:
    """The long names of the options in ``group`` that take a value (``--numcheck-report``)."""
    names = []
    for option in parser.getgroup(group).options:
        attrs = option.attrs()
        takes_value = attrs.get("action", "store") in ("store", "append")
        if takes_value and attrs.get("nargs") in (None, 1, "?"):
            names += [n for n in option.names() if n.startswith("--")]
    return names


def space_separated_values(args: Sequence[str], options: Sequence[str]) -> list[str]:
    """Values given as ``--option VALUE`` (not ``--option=VALUE``) for any of ``options``."""
    found = []
    for i, arg in enumerate(args[:-1]):
        if arg == "--":
            break
        if arg in options:
            found.append(str(args[i + 1]))
    return found


def repair(config: pytest.Config, args: list[str], options: Sequence[str]) -> str:
    """Re-determine the rootdir without the option values pytest took for paths.

    Returns '' when nothing needed repair, else a line saying what moved. Raises
    :class:`pytest.UsageError` when a repair is needed but this pytest's ``Config`` does not
    have the attributes it sets.
    """
    values = space_separated_values(args, options)
    if not values:
        return ""
    from _pytest.config.findpaths import determine_setup

    ns = config.known_args_namespace
    rootpath, inipath, inicfg, *rest = determine_setup(
        inifile=ns.inifilename,
        override_ini=getattr(ns, "override_ini", None),
        args=list(ns.file_or_dir),
        rootdir_cmd_arg=ns.rootdir or None,
        invocation_dir=config.invocation_params.dir,
    )
    if (rootpath, inipath) == (config.rootpath, config.inipath):
        return ""
    needed = ("_rootpath", "_inipath", "_inicache", "_parser")
    ini_attr = "_inicfg" if hasattr(config, "_inicfg") else "inicfg"
    if not all(hasattr(config, a) for a in (*needed, ini_attr)):
        shown = " ".join(values)
        raise pytest.UsageError(
            f"numcheck: pytest took the option value(s) {shown} for test paths, which moves "
            f"its rootdir to {config.rootpath}, and this pytest ({pytest.__version__}) cannot "
            "be corrected from a plugin. Fix: write the option with '=', e.g. "
            f"--numcheck-report={values[0]}"
        )
    moved = f"rootdir {config.rootpath} -> {rootpath}"
    config._rootpath = rootpath
    config._inipath = inipath
    setattr(config, ini_attr, inicfg)
    if rest and hasattr(config, "_ignored_config_files"):
        config._ignored_config_files = rest[0]
    config._inicache.clear()
    config._parser.extra_info["rootdir"] = str(rootpath)
    config._parser.extra_info["inifile"] = str(inipath)
    _apply_addopts(config, args)
    user = config._parser.parse_known_args(list(args), namespace=copy.copy(config.option))
    if getattr(user, "confcutdir", None) is None:
        # As pytest sets it when the user gave none: the config file's folder, or the rootdir.
        config.known_args_namespace.confcutdir = str(inipath.parent if inipath else rootpath)
    return moved


def _apply_addopts(config: Any, args: list[str]) -> None:
    """The addopts of the config file found now (the misread run never saw them)."""
    addopts = config.getini("addopts")
    if not addopts:
        return
    args[:] = list(addopts) + args
    config.known_args_namespace = config._parser.parse_known_args(
        args, namespace=copy.copy(config.option)
    )
