"""Where a run happened: versions, devices, driver and commit, for the report's header.

Each probe is best effort: a missing ``nvidia-smi`` or ``git`` gives None, never an error.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from numcheck._version import __version__


def environment(
    *,
    torch_version: str | None,
    cuda_version: str | None,
    device: str,
    device_names: Sequence[str],
    rootdir: Path | None,
    workers: int = 0,
) -> dict[str, Any]:
    """Where a run happened. The driver comes from ``nvidia-smi`` and the commit from
    ``git``, each only when the tool is there (None otherwise). ``git_commit_date`` is the
    commit's committer date (ISO 8601): ``python -m numcheck history`` orders runs by it.
    ``triton`` is the installed version (None without it; read from its metadata, not
    imported), ``triton_default_fp_fusion`` the variable that sets whether Triton kernels
    that do not say contract multiply-adds to FMAs (None: unset, Triton's own default)."""
    commit, commit_date = _git_head(rootdir) if rootdir is not None else (None, None)
    return {
        "numcheck": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch_version,
        "cuda": cuda_version,
        "triton": _version("triton"),
        "triton_default_fp_fusion": os.environ.get("TRITON_DEFAULT_FP_FUSION"),
        "device": device,
        "device_names": sorted(set(device_names)),
        "driver": _driver() if device == "cuda" else None,
        "git_commit": commit,
        "git_commit_date": commit_date,
        "workers": workers,
        "argv": list(sys.argv[1:]),
    }


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _run(argv: Sequence[str], cwd: Path | None = None) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=10,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _driver() -> str | None:
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return None if out is None else out.splitlines()[0].strip()


def _git_head(rootdir: Path) -> tuple[str | None, str | None]:
    """HEAD's commit (``-dirty`` when tracked files changed) and its committer date, the
    date of when the commit was made where it now sits (a rebase or a merge updates it; the
    author date would keep a rebased commit in its old place). One ``git log`` for both."""
    head = _run(["git", "log", "-1", "--format=%H %cI", "HEAD"], cwd=rootdir)
    if head is None:
        return None, None
    commit, _, date = head.partition(" ")
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=rootdir)
    return commit + ("-dirty" if dirty else ""), date or None
