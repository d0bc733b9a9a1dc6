"""The run's checks in a worker process (``--numcheck-isolate=process``, the default): the
executor that does it (:class:`numcheck.execute.isolated.Isolated`) made from the run's
options, and what the worker needs to register the same variants as this process.

A worker is a new Python process: it imports numcheck, then each module whose
``pytest_numcheck_register`` hook ran here (the conftest.py files, ``-p`` plugins) and calls
the hook, after installed packages' entry points, as this process did at configure time.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from numcheck.execute.isolated import Isolated, Limits
from numcheck.execute.sanitizer import Sanitizer, find_executable
from numcheck.execute.worker import WorkerSetup


def hook_modules(config: pytest.Config) -> list[tuple[str, str | None]]:
    """(name, file) of each module with a ``pytest_numcheck_register`` hook, in call order.

    A hook on an object that is not a module (a plugin instance) cannot be made again in
    another process: it is named, so that the worker's error says which."""
    found: list[tuple[str, str | None]] = []
    # pluggy lists hook implementations last-called first.
    for impl in reversed(config.pluginmanager.hook.pytest_numcheck_register.get_hookimpls()):
        plugin = impl.plugin
        if isinstance(plugin, types.ModuleType):
            found.append((plugin.__name__, getattr(plugin, "__file__", None)))
        else:
            found.append((f"<plugin object {type(plugin).__qualname__} from "
                          f"{type(plugin).__module__}>", None))
    return found


def sanitizer_for(tools: tuple[str, ...] | None, device: str
                  ) -> tuple[Sanitizer | None, str | None]:
    """The run's compute-sanitizer (None when not asked or cannot run), and why its checks
    skip when it cannot (None when they need not): found once per run."""
    if tools is None:
        return None, None
    if device != "cuda":
        return None, ("--numcheck-sanitize: compute-sanitizer checks CUDA kernels, and this "
                      "run is on the CPU (run it on a GPU with --numcheck-device cuda)")
    executable = find_executable()
    if executable is None:
        return None, ("--numcheck-sanitize: compute-sanitizer not found on PATH, in "
                      "$CUDA_HOME/bin or /usr/local/cuda/bin (it comes with the CUDA toolkit)")
    return Sanitizer(executable, tools), None


def isolated_executor(config: pytest.Config, session: Any,
                      sanitizer: Sanitizer | None) -> Isolated:
    """The run's :class:`Isolated` executor (its worker starts at the first check, or
    earlier with :meth:`Isolated.start`)."""
    run = session.run

    def setup() -> WorkerSetup:
        return WorkerSetup(
            sys_path=list(sys.path), plugins=hook_modules(config),
            device=session.device.kind, device_index=session.device.index,
            goldens_dir=run.goldens_dir, regen=run.regen, gates=run.active_gates,
            explain=run.explain, sections_enabled=session.sections.enabled,
            first_call_note_s=run.first_call_note_s, obtained_dir=run.obtained_dir,
            root=Path(config.rootpath))

    return Isolated(setup, cases=session.cases,
                    limits=Limits(run.timeout_s, run.timeout_first_call_s),
                    progress=session.progress, sanitizer=sanitizer)

