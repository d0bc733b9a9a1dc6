"""Recording an op's inputs from a running model: ``numcheck.record_inputs``.

Two ways to reach the op's call, both inside one ``with`` block that writes the file when
it ends (and writes nothing when the block raises)::

    # a module of the model: a forward pre-hook maps its call to the op's inputs
    with numcheck.record_inputs("mhc_pre", "checks/inputs/layer3.safetensors",
                                module=model.layers[3].hc_pre,
                                inputs=lambda m, args, kwargs: {"x": args[0], "hc_fn": m.hc_fn,
                                                                "hc_scale": m.hc_scale,
                                                                "hc_base": m.hc_base}):
        model(tokens)

    # a function of your own: one line in it, a no-op unless a recorder is listening
    numcheck.capture("mhc_pre", x=x, hc_fn=hc_fn, hc_scale=hc_scale, hc_base=hc_base)

The first ``calls`` calls are kept (each becomes a seed of the case that names the file),
copied to the CPU at once; later calls are ignored. Nothing here imports pytest or any
other numcheck room.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from numcheck.recorded.files import MAX_BYTES, MAX_CALLS, RecordedError, save_recorded

__all__ = ["Recorder", "capture", "record_inputs"]

#: The recorders listening now, per op name.
_LISTENING: dict[str, list[Recorder]] = {}

#: ``inputs(module, args, kwargs)`` -> the op's inputs by name, for a hooked module's call.
InputsOf = Callable[[Any, tuple[Any, ...], dict[str, Any]], Mapping[str, torch.Tensor]]


class Recorder:
    """What one ``record_inputs`` block has captured so far (``calls``: input dicts on the
    CPU); ``bytes_written`` once the block has written the file."""

    def __init__(self, op: str, path: Path, calls: int) -> None:
        self.op = op
        self.path = path
        self.wanted = calls
        self.calls: list[dict[str, torch.Tensor]] = []
        self.seen = 0
        self.bytes_written = 0

    def capture(self, inputs: Mapping[str, Any]) -> None:
        """Keep one call's inputs (a CPU copy of each tensor), up to the calls wanted."""
        self.seen += 1
        if len(self.calls) >= self.wanted:
            return
        kept = {}
        for name, t in inputs.items():
            if not isinstance(t, torch.Tensor):
                raise RecordedError(f"input '{name}' of op '{self.op}' is {type(t).__name__}, "
                                    "not a tensor", "hand the recorder tensors by name")
            kept[name] = t.detach().to("cpu", copy=True).contiguous()
        self.calls.append(kept)


@contextlib.contextmanager
def record_inputs(
    op: str, path: str | Path, *, module: torch.nn.Module | None = None,
    inputs: InputsOf | None = None, calls: int = 1, max_bytes: int = MAX_BYTES,
) -> Iterator[Recorder]:
    """Record op ``op``'s inputs while the block runs, into ``path`` (safetensors; the file
    a case names with ``inputs.file``).

    With ``module``, a forward pre-hook on it calls ``inputs(module, args, kwargs)`` on each
    of its calls to name the op's inputs; without, :func:`capture` calls for ``op`` inside
    the block are recorded. The first ``calls`` calls are kept (at most
    :data:`~numcheck.recorded.files.MAX_CALLS`); the file may hold ``max_bytes`` at most
    (:data:`~numcheck.recorded.files.MAX_BYTES`). The file is written when the block ends
    without an exception; nothing recorded is an error (RecordedError).
    """
    if not 1 <= calls <= MAX_CALLS:
        raise RecordedError(f"calls = {calls}", f"record 1 to {MAX_CALLS} calls")
    if (module is None) != (inputs is None):
        raise TypeError("record_inputs: give module and inputs together (a hooked module), "
                        "or neither (numcheck.capture calls)")
    recorder = Recorder(op, Path(path), calls)
    handle = None
    if module is not None:
        assert inputs is not None
        names = inputs

        def hook(mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            recorder.capture(names(mod, args, kwargs))

        handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    else:
        _LISTENING.setdefault(op, []).append(recorder)
    try:
        yield recorder
    finally:
        if handle is not None:
            handle.remove()
        else:
            _LISTENING[op].remove(recorder)
            if not _LISTENING[op]:
                del _LISTENING[op]
    where = type(module).__name__ if module is not None else "numcheck.capture"
    recorder.bytes_written = save_recorded(
        recorder.path, op, recorder.calls, max_bytes=max_bytes,
        source=f"{where}: first {len(recorder.calls)} of {recorder.seen} calls")


def capture(op: str, **inputs: torch.Tensor) -> None:
    """Hand one call's inputs of op ``op`` to the recorders listening (``record_inputs``
    blocks without a module); a no-op when none is."""
    for recorder in _LISTENING.get(op, ()):
        recorder.capture(inputs)
