"""pytest-xdist workers: which GPU a worker uses, and who is the controller.

``pytest --numcheck -n N`` starts N worker processes named ``gw0``, ``gw1``, ...; worker
``gwK`` runs its checks on ``cuda:K % device_count``, so N workers spread over the visible
GPUs (N > device_count shares GPUs round-robin). The id in test names and records stays
``cuda``: a check's identity does not depend on which GPU ran it.

Workers ship their records to the controller on the test reports (see
:mod:`numcheck.plugin.shipping`); only the controller (or a run without xdist) writes reports.
Pure: nothing here imports torch or pytest.
"""

from __future__ import annotations

import os
import re
from typing import Any

_WORKER_ID = re.compile(r"gw(\d+)")


def worker_id(config: Any) -> str | None:
    """The xdist worker id (``gw3``) of this process, or None on the controller / serially."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return str(workerinput.get("workerid"))
    return None


def is_worker(config: Any) -> bool:
    """True inside a pytest-xdist worker process."""
    return getattr(config, "workerinput", None) is not None


def worker_count(config: Any) -> int:
    """Number of xdist workers of the run (0 without xdist)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return int(workerinput.get("workercount", 0))
    n = getattr(getattr(config, "option", None), "numprocesses", None)
    return int(n) if isinstance(n, int) else 0


def gpu_index(worker: str | None, device_count: int) -> int | None:
    """The CUDA device index a worker pins to: ``gwK`` -> ``K % device_count``.

    None when there is nothing to pin (no worker id, or no GPU). Raises ValueError for an
    id that is not ``gw<number>``, because guessing would put two workers on one GPU silently.
    """
    if worker is None or device_count <= 0:
        return None
    m = _WORKER_ID.fullmatch(worker)
    if m is None:
        raise ValueError(
            f"pytest-xdist worker id {worker!r} is not gw<number>; cannot pick its GPU. "
            "Fix: run with pytest-xdist's own -n N, or pin GPUs yourself with "
            "CUDA_VISIBLE_DEVICES"
        )
    return int(m.group(1)) % device_count


def pin_worker_gpu(config: Any) -> int | None:
    """In an xdist worker on a CUDA run: ``torch.cuda.set_device`` to the worker's GPU.

    Call before any CUDA work of the worker. Returns the index, or None when not pinned
    (controller, serial run, no GPU). ``NUMCHECK_NO_PIN=1`` leaves the current device alone,
    for set-ups that already give each worker its own ``CUDA_VISIBLE_DEVICES``.
    """
    wid = worker_id(config)
    if wid is None or os.environ.get("NUMCHECK_NO_PIN") == "1":
        return None
    import torch

    index = gpu_index(wid, torch.cuda.device_count())
    if index is not None:
        torch.cuda.set_device(index)
    return index

