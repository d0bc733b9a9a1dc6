"""Golden files: the FP32 reference outputs of one case, with metadata that pins how they were made.

A golden lives at ``<root>/<op>/<case_id>.safetensors``. It holds the reference outputs for every
seed of the case and a safetensors ``__metadata__`` dict (``str -> str``; non-string values are
JSON-encoded) with the fields in :data:`REQUIRED_META`. How outputs are stored in it (whole, or
sampled when large) is :mod:`numcheck.goldens.packing`; whether a golden still fits its case is
:mod:`numcheck.goldens.freshness`.

Nothing here imports pytest: the plugin turns the :class:`GoldenError` family into test outcomes
(the pytest-regressions habit: a missing golden fails and says how to create it, a mismatch never
writes anything).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import safetensors.torch
import torch

from numcheck.disk.atomic import atomic_write, remove_leftovers
from numcheck.disk.locking import exclusive
from numcheck.errors import reduce_whole
from numcheck.precision import dtype_name

__all__ = [
    "FORMAT_VERSION",
    "REQUIRED_META",
    "Golden",
    "GoldenCorrupt",
    "GoldenError",
    "GoldenFormatError",
    "GoldenMissing",
    "GoldenStale",
    "content_hash",
    "golden_path",
    "input_fingerprint",
    "load_golden",
    "save_golden",
    "write_if_changed",
]

#: Version of the on-disk layout written by :func:`save_golden`; newer files are refused.
FORMAT_VERSION = 1
#: Metadata fields every golden must carry.
REQUIRED_META = (
    "format_version",
    "op",
    "case",
    "op_version",
    "fingerprint",
    "content_hash",
    "torch_version",
    "device",
    "created",
    "seeds",
    "shapes",
    "dtypes",
)

SHORT = 12  # hex digits of a hash shown in messages


# --------------------------------------------------------------------------------------------
# errors


class GoldenError(Exception):
    """Base of every golden problem; ``str(err)`` names the file, the case and the fix."""

    __reduce__ = reduce_whole  # an isolated run's worker sends it back

    def __init__(self, message: str, *, path: Path | None, case: str) -> None:
        super().__init__(message)
        self.path = path
        self.case = case


class GoldenMissing(GoldenError):
    """No golden file exists for the case."""


class GoldenCorrupt(GoldenError):
    """The file cannot be read as a golden, or its bytes do not match its content hash."""


class GoldenStale(GoldenError):
    """The golden was made from other inputs, another op version or other seeds."""


class GoldenFormatError(GoldenError):
    """The file is readable but does not have the layout or fields this numcheck expects."""


def golden_at(path: Path | None, case: str) -> str:
    """``golden <path> for case <case>``: how every golden message names its file."""
    if path is None:
        return f"golden for case {case}" if case else "golden"
    return f"golden {path} for case {case}" if case else f"golden {path}"


def regen_text(regen_hint: str) -> str:
    """``regenerate it with: <command>``, or ``regenerate it`` without one."""
    return f"regenerate it with: {regen_hint}" if regen_hint else "regenerate it"


# --------------------------------------------------------------------------------------------
# paths and hashes


def golden_path(root: Path, op: str, case_id: str) -> Path:
    """Return ``<root>/<op>/<case_id>.safetensors``.

    ``op`` and ``case_id`` must each be a single plain path component, so that a case id can never
    write outside ``root``.
    """
    for what, name in (("op", op), ("case id", case_id)):
        if (
            not name
            or name in (".", "..")
            or name.startswith(".")
            or any(c in name for c in ("/", "\\", "\0"))
        ):
            raise ValueError(f"{what} {name!r} cannot be used as a golden file name component")
    return Path(root) / op / f"{case_id}.safetensors"


def _update_with_tensor(h: Any, name: str, t: torch.Tensor) -> None:
    # Length-prefixed fields so that no two different (name, dtype, shape, bytes) tuples can
    # produce the same byte stream.
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    nbytes = flat.numel() * flat.element_size()
    head = f"tensor\0{len(name)}\0{name}\0{dtype_name(t.dtype)}\0{list(t.shape)}\0{nbytes}\0"
    h.update(head.encode())
    if flat.numel():
        # A uint8 view reads the raw bytes of any dtype (float8_e4m3fn, bf16, int32, bool).
        h.update(flat.view(torch.uint8).numpy().tobytes())


def input_fingerprint(inputs: Mapping[str, torch.Tensor]) -> str:
    """Return a sha256 hex digest over the inputs' sorted names, dtypes, shapes and raw bytes.

    Two input sets have the same fingerprint exactly when they are bit-identical, whatever their
    device; it is what pins a golden to the inputs it was made from.
    """
    h = hashlib.sha256(b"numcheck-inputs/v1\0")
    for name in sorted(inputs):
        _update_with_tensor(h, name, inputs[name])
    return h.hexdigest()


def content_hash(tensors: Mapping[str, torch.Tensor], meta: Mapping[str, str]) -> str:
    """Return a sha256 hex digest over the tensors and the encoded metadata of a golden.

    Covers the sorted tensor names, dtypes, shapes and bytes, and every ``meta`` item except
    ``"content_hash"`` itself. ``meta`` is the encoded (``str -> str``) form stored in the file.
    """
    h = hashlib.sha256(b"numcheck-golden/v1\0")
    for name in sorted(tensors):
        _update_with_tensor(h, name, tensors[name])
    for key in sorted(meta):
        if key == "content_hash":
            continue
        value = meta[key]
        if not isinstance(value, str):
            raise TypeError(f"content_hash needs encoded str metadata; {key!r} is {type(value)}")
        h.update(f"meta\0{len(key)}\0{key}\0{len(value)}\0{value}\0".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# metadata encoding


def _encode(value: Any) -> str:
    # Strings are stored raw so the header stays readable, unless they would read back as JSON
    # (e.g. "123", "true"): those are JSON-quoted, which makes decoding exact.
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            return value
        return json.dumps(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _decode(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _canonical(data: bytes) -> bytes:
    # safetensors writes __metadata__ from a hash map, in a different order on every call;
    # re-emit the header with sorted keys so that equal content gives equal bytes (clean diffs,
    # no churn on regen). Data offsets are relative to the end of the header, so they stay valid.
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # keep the data region 8-byte aligned, as safetensors does
    return len(text).to_bytes(8, "little") + text + data[8 + n :]


def _read_meta(data: bytes) -> dict[str, str]:
    """Return the raw ``__metadata__`` of safetensors bytes; ValueError if the header is bad."""
    if len(data) < 8:
        raise ValueError(f"file is {len(data)} bytes, shorter than the 8-byte header length")
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        raise ValueError(f"header length {n} runs past the end of the file ({len(data)} bytes)")
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if meta is None and isinstance(header, dict):
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError("the header's __metadata__ is not a JSON object of strings")
    return meta


# --------------------------------------------------------------------------------------------
# save and load


@dataclass(frozen=True)
class Golden:
    """A loaded, verified golden: its tensors (CPU) and its decoded metadata."""

    path: Path
    tensors: Mapping[str, torch.Tensor]
    meta: Mapping[str, Any]


def save_golden(path: Path, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> None:
    """Write a golden atomically.

    Fills ``format_version``, ``shapes`` and ``dtypes`` (of the stored tensors) and
    ``content_hash``; fills ``created`` (UTC, ISO 8601) and ``torch_version`` only when the caller
    did not. Every other field of :data:`REQUIRED_META` must be in ``meta`` (ValueError if not).
    Equal content gives byte-identical files.

    The bytes go to a temporary file in the same folder, which is flushed, fsynced and moved over
    ``path`` with ``os.replace``; then the folder is fsynced. A reader therefore sees either the
    old golden or the new one, never half a file, and no temporary file is left behind on error.
    The write holds the golden's cross-process lock (:mod:`numcheck.disk.locking`), so concurrent
    writers of one golden take turns; under it, temporary files left by a writer that was
    killed mid-write are removed.
    """
    path = Path(path)
    cpu: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise ValueError(f"invalid golden tensor name {name!r}")
        # clone: safetensors refuses tensors that share storage (e.g. two views of one output)
        cpu[name] = t.detach().to("cpu").contiguous().clone()

    full: dict[str, Any] = dict(meta)
    full.pop("content_hash", None)
    full["format_version"] = FORMAT_VERSION
    full.setdefault("created", datetime.now(UTC).isoformat(timespec="seconds"))
    full.setdefault("torch_version", torch.__version__)
    full["shapes"] = {name: list(t.shape) for name, t in sorted(cpu.items())}
    full["dtypes"] = {name: dtype_name(t.dtype) for name, t in sorted(cpu.items())}
    missing = [k for k in REQUIRED_META if k != "content_hash" and k not in full]
    if missing:
        raise ValueError(f"cannot save golden {path}: metadata lacks {', '.join(missing)}")
    encoded = {str(k): _encode(v) for k, v in full.items()}
    encoded["content_hash"] = content_hash(cpu, encoded)
    data = _canonical(safetensors.torch.save(cpu, metadata=encoded))
    with exclusive(path):
        remove_leftovers(path)
        atomic_write(path, data)


def write_if_changed(
    path: Path, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any], *, case: str
) -> bool:
    """Save a golden unless an equal one is stored; True when it wrote.

    Equal means the same tensors bit for bit (names, dtypes, shapes, values) and the same
    ``fingerprint`` and ``op_version`` in ``meta``, so re-running the regen flag on an
    unchanged case never churns the repository. A stored file that cannot be read (missing,
    corrupt, another format) is replaced. The compare and the write happen under the
    golden's lock: another process regenerating the same golden (pytest-xdist workers)
    waits, then finds the file equal and leaves it alone.
    """
    with exclusive(path):
        try:
            old = load_golden(path, case=case, regen_hint="")
        except GoldenError:
            old = None
        if old is not None and _equal_golden(old, tensors, meta):
            return False
        save_golden(path, tensors, meta)
    return True


def _equal_golden(old: Golden, tensors: Mapping[str, torch.Tensor],
                  meta: Mapping[str, Any]) -> bool:
    if any(old.meta.get(key) != meta.get(key) for key in ("fingerprint", "op_version")):
        return False
    return set(old.tensors) == set(tensors) and all(
        old.tensors[k].dtype == t.dtype
        and old.tensors[k].shape == t.shape
        and torch.equal(old.tensors[k], t.detach().cpu())
        for k, t in tensors.items()
    )


def load_golden(path: Path, *, case: str, regen_hint: str) -> Golden:
    """Read and verify the golden at ``path``; never modifies the file.

    Raises :class:`GoldenMissing` if there is no file, :class:`GoldenCorrupt` if it is unreadable,
    truncated, not safetensors or fails its content hash, and :class:`GoldenFormatError` if
    required metadata is missing or it was written by a newer format. NaN and Inf in stored
    tensors are legitimate reference values and are not rejected. ``case`` and ``regen_hint``
    (the command that regenerates this golden) go into the messages.
    """
    path = Path(path)
    where = golden_at(path, case)

    def corrupt(why: str) -> GoldenCorrupt:
        return GoldenCorrupt(
            f"{where} is corrupt: {why}\n"
            f"Fix: restore it from version control (git checkout -- {path}) "
            f"or {regen_text(regen_hint)}",
            path=path,
            case=case,
        )

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise GoldenMissing(
            f"no golden at {path} for case {case}\n"
            + (f"Fix: create it with: {regen_hint}" if regen_hint else "Fix: create it"),
            path=path,
            case=case,
        ) from None
    except OSError as e:
        raise corrupt(f"cannot read it ({e.strerror or e})") from e

    try:
        raw_meta = _read_meta(data)
        tensors = safetensors.torch.load(data)
    except Exception as e:  # safetensors raises its own error type, json/unicode raise others
        raise corrupt(f"not a readable safetensors file ({e})") from e

    meta = _checked_meta(raw_meta, path, case, regen_hint)
    expected = raw_meta["content_hash"]
    actual = content_hash(tensors, raw_meta)
    if actual != expected:
        raise corrupt(
            f"content hash {actual[:SHORT]} does not match the stored {expected[:SHORT]} "
            "(the file was changed after it was written)"
        )
    return Golden(path=path, tensors=MappingProxyType(tensors), meta=MappingProxyType(meta))


def _checked_meta(raw_meta: Mapping[str, str], path: Path, case: str,
                  regen_hint: str) -> dict[str, Any]:
    """The decoded metadata of a golden, after its required keys and format version."""
    where = golden_at(path, case)
    fix_regen = f"Fix: {regen_text(regen_hint)}"
    missing = [k for k in REQUIRED_META if k not in raw_meta]
    if missing:
        raise GoldenFormatError(
            f"{where} lacks required metadata: {', '.join(missing)}\n{fix_regen}",
            path=path,
            case=case,
        )
    meta = {k: _decode(v) for k, v in raw_meta.items()}
    version = meta["format_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise GoldenFormatError(
            f"{where} has an invalid format_version {raw_meta['format_version']!r}\n{fix_regen}",
            path=path,
            case=case,
        )
    if version > FORMAT_VERSION:
        raise GoldenFormatError(
            f"{where} has format_version {version}; this numcheck reads up to {FORMAT_VERSION}\n"
            f"Fix: upgrade numcheck, or {regen_text(regen_hint)}",
            path=path,
            case=case,
        )
    return meta
