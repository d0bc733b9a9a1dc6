"""The run's checks in worker processes (``--numcheck-isolate=process``, the default): the
executor that does it (:class:`numcheck.execute.isolated.Isolated`) made from the run's
options, how many workers it runs, and what a worker needs to register the same variants as
this process.

A worker is a new Python process: it imports numcheck, then each module whose
``pytest_numcheck_register`` hook ran here (the conftest.py files, ``-p`` plugins) and calls
the hook, after installed packages' entry points, as this process did at configure time.
"""

from __future__ import annotations

import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest

from numcheck.execute.isolated import Isolated, Limits, WorkerProcess
from numcheck.execute.sanitizer import Sanitizer, find_executable
from numcheck.execute.worker import WorkerSetup
from numcheck.plugin import options
from numcheck.plugin.workers import is_worker, worker_count

#: The first worker, started before this process imported torch (:func:`start_early`).
FIRST = pytest.StashKey[Any]()


def setting(config: pytest.Config, option: str, ini: str, env: str,
            default: str) -> tuple[str, str]:
    """An option's value, else its ini key's, else the environment variable's, else
    ``default``; and where it came from, as an error names it."""
    value = config.getoption(option)
    if value is not None:
        return str(value).strip(), option
    value = str(config.getini(ini)).strip()
    if value:
        return value, f"ini key {ini} in {config.inipath or 'the ini file'}"
    return os.environ.get(env, "").strip() or default, f"${env}"


def start_early(config: pytest.Config) -> None:
    """Start the run's first worker now, before this process imports torch, so that the
    two import it at once (the run's executor takes it: :func:`isolated_executor`). Not
    where no worker is wanted: checks run here, in xdist's workers (on the controller),
    per check (--numcheck-sanitize), or not at all (--collect-only)."""
    isolate = setting(config, options.ISOLATE_OPTION, options.ISOLATE_INI,
                      options.ISOLATE_ENV, "process")[0]
    if isolate != "process" or config.option.collectonly \
            or config.getoption(options.SANITIZE_OPTION) is not None \
            or worker_count(config) and not is_worker(config):
        return
    proc = config.stash[FIRST] = WorkerProcess(Path(tempfile.mkdtemp(prefix="numcheck-workers-")))
    config.add_cleanup(proc.kill)  # (a usage error may end the run before it is taken)


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


def pool_size(requested: int | None, *, cores: int, device: str, timed: bool,
              xdist: bool) -> tuple[int, int | None]:
    """How many workers run the checks, and each one's torch intra-op threads (None:
    torch's default, as with one worker).

    ``requested`` (--numcheck-workers) wins; else one per core on the CPU, and one on a GPU,
    in a run that times (a timed section needs the device alone: with two workers the
    other's work would share it) and in a pytest-xdist worker (each is a process per core
    already). Several workers share the cores: ``cores // workers`` threads each, however
    few cases the run selects, so that a check computes alike in the gate and alone."""
    workers = requested or (1 if xdist or timed or device != "cpu" else cores)
    return workers, (max(1, cores // workers) if workers > 1 else None)


def isolated_executor(config: pytest.Config, session: Any,
                      sanitizer: Sanitizer | None) -> Isolated:
    """The run's :class:`Isolated` executor, with the worker :func:`start_early` started
    (else its first worker starts at the first check)."""
    run = session.run
    workers, threads = pool_size(
        run.workers, device=session.device.kind,
        cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")  # (Linux)
        else os.cpu_count() or 1,
        timed="perf" in run.active_gates, xdist=session.is_worker)

    def setup() -> WorkerSetup:
        return WorkerSetup(
            sys_path=list(sys.path), plugins=hook_modules(config),
            device=session.device.kind, device_index=session.device.index,
            goldens_dir=run.goldens_dir, regen=run.regen, gates=run.active_gates,
            explain=run.explain, sections_enabled=session.sections.enabled,
            first_call_note_s=run.first_call_note_s, obtained_dir=run.obtained_dir,
            root=Path(config.rootpath))

    first = config.stash.get(FIRST, None)
    # Each case's seconds in the last run, kept in pytest's cache (absent under
    # -p no:cacheprovider, and not kept by xdist's workers, which run one at a time).
    cache = None if session.is_worker or workers < 2 else getattr(config, "cache", None)
    key, root = f"numcheck/case-seconds/{session.device.kind}", f"{config.rootpath}{os.sep}"
    cost = _seconds(cache.get(key, {}), root) if cache is not None else {}
    isolated = Isolated(setup, cases=session.cases,
                        limits=Limits(run.timeout_s, run.timeout_first_call_s),
                        workers=workers, threads=threads, progress=session.progress,
                        sanitizer=sanitizer, cost=cost,
                        **({} if first is None else {"log_dir": first.log.parent}))
    if cache is not None:
        def keep() -> None:
            if isolated.seconds:
                cache.set(key, {k.removeprefix(root): round(v, 3)
                                for k, v in {**cost, **isolated.seconds}.items()})

        config.add_cleanup(keep)
    if first is not None:
        isolated.start(first)
    return isolated


def _seconds(kept: object, root: str) -> dict[str, float]:
    """The cache's case seconds (kept relative to the rootdir, so that a moved checkout
    keeps them), what is not a number left out (a hand-edited file)."""
    if not isinstance(kept, dict):
        return {}
    return {os.path.join(root, k): float(v) for k, v in kept.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0}
