"""The file of recorded inputs: an op's inputs for a few calls, in one safetensors file.

Layout: tensors ``c<call>/<input>`` (``c0/x``, ``c0/hc_fn``, ``c1/x``, ...), every call with
the same input names, and ``__metadata__`` with :data:`FORMAT` under ``format``, the op's
name, the number of calls and where they were recorded. The file is part of the repository
next to its case file, so its size is bounded: :data:`MAX_BYTES` for the whole file,
:data:`MAX_CALLS` calls. Both the recorder and the reader enforce them with an error that
says what to record instead. Nothing here imports pytest or any other numcheck room.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import safetensors.torch
import torch

from numcheck.errors import NumcheckError

__all__ = ["FORMAT", "MAX_BYTES", "MAX_CALLS", "Recorded", "RecordedError", "call_key",
           "read_recorded", "save_recorded", "tensor_bytes"]

#: ``format`` of the metadata of a recorded-inputs file (bumped on a layout change).
FORMAT = "numcheck-inputs/1"
#: The largest recorded-inputs file numcheck writes or reads: it lives in the repository.
MAX_BYTES = 64 * 1024 * 1024
#: The most calls one file holds (each is a seed of its case).
MAX_CALLS = 16
_KEY = re.compile(r"c(\d+)/(.+)")


class RecordedError(NumcheckError):
    """A recorded-inputs file that cannot be written or read: the problem and the fix."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(None, problem, fix)


@dataclass(frozen=True)
class Recorded:
    """A file of recorded inputs, read and checked: ``calls[i]`` maps input names to CPU
    tensors; ``sha256`` is the file's content hash (what pins its case's golden)."""

    path: Path
    op: str
    calls: tuple[Mapping[str, torch.Tensor], ...]
    sha256: str
    meta: Mapping[str, str]


def call_key(call: int, name: str) -> str:
    """``c<call>/<name>``: where one input of one call is stored."""
    return f"c{call}/{name}"


def tensor_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def save_recorded(path: Path, op: str, calls: Sequence[Mapping[str, torch.Tensor]], *,
                  source: str = "", max_bytes: int = MAX_BYTES) -> int:
    """Write ``calls`` (each: input name -> tensor) for op ``op``; returns the bytes written.

    Refuses (RecordedError, nothing written) no call, more than :data:`MAX_CALLS` calls,
    calls with different input names, a non-tensor, or a file over ``max_bytes``."""
    if not calls:
        raise RecordedError(f"no call of op '{op}' was recorded",
                            "run the model inside the with block, and check that the hooked "
                            "module or the capture call is on its path")
    if len(calls) > MAX_CALLS:
        raise RecordedError(f"{len(calls)} calls, more than {MAX_CALLS}",
                            f"record at most {MAX_CALLS} calls (calls=...)")
    names = sorted(calls[0])
    tensors: dict[str, torch.Tensor] = {}
    for i, call in enumerate(calls):
        if sorted(call) != names:
            raise RecordedError(f"call {i} has inputs {sorted(call)}, call 0 has {names}",
                                "capture the same inputs on every call")
        for name, t in call.items():
            if not isinstance(t, torch.Tensor):
                raise RecordedError(f"input '{name}' of call {i} is {type(t).__name__}, not a "
                                    "tensor", "hand the recorder tensors by name")
            tensors[call_key(i, name)] = t.detach().to("cpu").contiguous().clone()
    size = tensor_bytes(tensors)
    if size > max_bytes:
        raise RecordedError(
            f"the recorded inputs take {size / 2**20:.1f} MiB, over the limit of "
            f"{max_bytes / 2**20:.0f} MiB for a file kept in the repository",
            "record fewer calls, a smaller batch or fewer tokens (slice the inputs in the "
            "inputs function), or keep the case on generated inputs")
    meta = {"format": FORMAT, "op": op, "calls": str(len(calls)), "source": source}
    data = safetensors.torch.save(tensors, metadata=meta)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return len(data)


def read_recorded(path: Path, *, max_bytes: int = MAX_BYTES) -> Recorded:
    """Read and check a recorded-inputs file (never fetched: a local path only)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise RecordedError(f"no recorded-inputs file at {path}",
                            "record it with numcheck.record_inputs (docs/extending.md, "
                            "\"Real inputs\"), or correct inputs.file") from None
    if size > max_bytes:
        raise RecordedError(f"the file is {size / 2**20:.1f} MiB, over the limit of "
                            f"{max_bytes / 2**20:.0f} MiB for recorded inputs",
                            "record fewer calls, a smaller batch or fewer tokens")
    data = path.read_bytes()
    try:
        tensors = safetensors.torch.load(data)
        meta = _metadata(data)
    except Exception as exc:  # noqa: BLE001 - safetensors and json raise their own types
        raise RecordedError(f"not a readable safetensors file ({exc})",
                            "record it again with numcheck.record_inputs") from None
    if meta.get("format") != FORMAT:
        raise RecordedError(f"not a numcheck recorded-inputs file (format "
                            f"{meta.get('format')!r}, expected {FORMAT!r})",
                            "record it with numcheck.record_inputs")
    calls: dict[int, dict[str, torch.Tensor]] = {}
    for key, t in tensors.items():
        found = _KEY.fullmatch(key)
        if found is None:
            raise RecordedError(f"tensor {key!r} is not named c<call>/<input>",
                                "record it again with numcheck.record_inputs")
        calls.setdefault(int(found[1]), {})[found[2]] = t
    count = len(calls)
    if sorted(calls) != list(range(count)) or str(count) != meta.get("calls"):
        raise RecordedError(f"its calls {sorted(calls)} do not match its metadata's "
                            f"{meta.get('calls')!r}", "record it again")
    if count > MAX_CALLS:
        raise RecordedError(f"{count} calls, more than {MAX_CALLS}", "record fewer calls")
    names = sorted(calls[0])
    for i in range(count):
        if sorted(calls[i]) != names:
            raise RecordedError(f"call {i} has inputs {sorted(calls[i])}, call 0 has {names}",
                                "record it again")
    return Recorded(path, str(meta.get("op", "")),
                    tuple(MappingProxyType(calls[i]) for i in range(count)),
                    hashlib.sha256(data).hexdigest(), MappingProxyType(meta))


def _metadata(data: bytes) -> dict[str, Any]:
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise TypeError("__metadata__ is not an object")
    return meta
