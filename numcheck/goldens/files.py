"""Golden files: the FP32 reference outputs of one case, with metadata that pins how they were made.

A golden lives at ``<root>/<op>/<case_id>.safetensors``. It holds the reference outputs for every
seed of the case and a safetensors ``__metadata__`` dict (``str -> str``; non-string values are
JSON-encoded) with the fields in :data:`REQUIRED_META`.

Large outputs are not stored whole: :func:`pack_output` keeps a deterministic, evenly spread sample
of :data:`SAMPLE_SIZE` flat positions plus :func:`summary_stats` of the whole tensor, so a golden
for an indexer with 64 x 8192 logits stays small enough to review and commit.

Nothing here imports pytest: the plugin turns the :class:`GoldenError` family into test outcomes
(the pytest-regressions habit: a missing golden fails and says how to create it, a mismatch never
writes anything).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

import numpy as np
import safetensors.torch
import torch

from numcheck.goldens.atomic import atomic_write, remove_leftovers
from numcheck.goldens.locking import exclusive

__all__ = [
    "FORMAT_VERSION",
    "FULL_LIMIT",
    "REQUIRED_META",
    "SAMPLE_SIZE",
    "Golden",
    "GoldenCorrupt",
    "GoldenError",
    "GoldenFormatError",
    "GoldenMissing",
    "GoldenNote",
    "GoldenStale",
    "StoredPair",
    "check_fresh",
    "content_hash",
    "golden_path",
    "input_fingerprint",
    "load_golden",
    "output_keys",
    "pack_output",
    "save_golden",
    "summary_stats",
    "unpack_pair",
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
#: Outputs with at most this many elements are stored whole.
FULL_LIMIT = 262_144
#: Larger outputs: this many sampled flat positions, plus summary statistics.
SAMPLE_SIZE = 65_536

#: Suffixes of the tensors that stand for one sampled output ``key``.
IDX_SUFFIX = ".idx"
VAL_SUFFIX = ".val"
STATS_SUFFIX = ".stats"
#: The logical shape of a sampled output (int64 [ndim]); without it a shape mismatch with the
#: same numel (e.g. [64, 8192] vs [8192, 64]) would go unnoticed.
SHAPE_SUFFIX = ".shape"
_SAMPLED_SUFFIXES = (IDX_SUFFIX, VAL_SUFFIX, STATS_SUFFIX, SHAPE_SUFFIX)

#: Order of the entries of :func:`summary_stats`.
STATS_FIELDS = ("numel", "sum", "sum_sq", "min", "max", "n_nan", "n_posinf", "n_neginf")

_SHORT = 12  # hex digits of a hash shown in messages


# --------------------------------------------------------------------------------------------
# errors


class GoldenError(Exception):
    """Base of every golden problem; ``str(err)`` names the file, the case and the fix."""

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


def _where(path: Path | None, case: str) -> str:
    if path is None:
        return f"golden for case {case}" if case else "golden"
    return f"golden {path} for case {case}" if case else f"golden {path}"


def _regen(regen_hint: str) -> str:
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


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``: how goldens name dtypes in their metadata."""
    return str(dtype).removeprefix("torch.")


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
# packing outputs


def summary_stats(t: torch.Tensor) -> torch.Tensor:
    """Return float64 ``[8]``: numel, sum, sum of squares, min, max over the finite values,
    then the counts of NaN, +Inf and -Inf (see :data:`STATS_FIELDS`).

    min and max are NaN when there is no finite value. Complex tensors count their real and
    imaginary parts as separate values.
    """
    x = t.detach()
    if x.is_complex():
        x = torch.view_as_real(x)
    x = x.reshape(-1).to(torch.float64)
    finite = torch.isfinite(x)
    f = x[finite]
    nan = float("nan")
    values = [
        float(t.numel()),
        float(f.sum()) if f.numel() else 0.0,
        float((f * f).sum()) if f.numel() else 0.0,
        float(f.min()) if f.numel() else nan,
        float(f.max()) if f.numel() else nan,
        float(torch.isnan(x).sum()),
        float((x == float("inf")).sum()),
        float((x == float("-inf")).sum()),
    ]
    return torch.tensor(values, dtype=torch.float64)


def _sample_indices(key: str, numel: int, k: int) -> torch.Tensor:
    """Sorted, distinct flat positions: one uniformly drawn position in each of ``k`` equal strata.

    Stratified rather than uniform so that every region of the output is covered in proportion
    (the indexer's -inf mask is one contiguous tail per row). The random offsets come from
    SHAKE-256 of the key and numel, not from a torch generator or Python's ``hash()``, so the
    positions are the same on every run, platform and torch version.
    """
    bounds = torch.div(torch.arange(k + 1, dtype=torch.int64) * numel, k, rounding_mode="floor")
    width = bounds[1:] - bounds[:-1]  # >= 1 because k <= numel
    seed = f"numcheck-sample/v1\0{key}\0{numel}".encode()
    raw = np.frombuffer(hashlib.shake_256(seed).digest(8 * k), dtype="<u8")
    offsets = raw % width.numpy().astype(np.uint64)
    return bounds[:-1] + torch.from_numpy(offsets.astype(np.int64))


def pack_output(key: str, t: torch.Tensor, *, full: bool | None = None) -> dict[str, torch.Tensor]:
    """Return the tensors that store output ``key`` in a golden.

    Whole (``numel <= FULL_LIMIT``, or ``full=True``): ``{key: t}`` on CPU, contiguous.
    Sampled (otherwise): ``key.idx`` (int64 sorted flat positions, a function of ``key`` and
    ``numel`` only), ``key.val`` (the values there, original dtype), ``key.stats``
    (:func:`summary_stats` of the whole output) and ``key.shape`` (int64 logical shape).
    """
    t = t.detach()
    if full is None:
        full = t.numel() <= FULL_LIMIT
    if full:
        return {key: t.to("cpu").contiguous()}
    numel = t.numel()
    idx = _sample_indices(key, numel, min(SAMPLE_SIZE, numel))
    val = t.reshape(-1)[idx.to(t.device)].to("cpu").contiguous()
    return {
        key + IDX_SUFFIX: idx,
        key + VAL_SUFFIX: val,
        key + STATS_SUFFIX: summary_stats(t),
        key + SHAPE_SUFFIX: torch.tensor(list(t.shape), dtype=torch.int64),
    }


def output_keys(stored: Mapping[str, torch.Tensor]) -> list[str]:
    """Return the sorted logical output names in ``stored`` (sampled outputs count once)."""
    keys: set[str] = set()
    for name in stored:
        if name.endswith(IDX_SUFFIX) and name[: -len(IDX_SUFFIX)] + VAL_SUFFIX in stored:
            keys.add(name[: -len(IDX_SUFFIX)])
    for name in stored:
        base = next((name[: -len(s)] for s in _SAMPLED_SUFFIXES if name.endswith(s)), None)
        if base is None or base not in keys:
            keys.add(name)
    return sorted(keys)


@dataclass(frozen=True)
class StoredPair:
    """A variant's output aligned with the stored reference, ready for a metric.

    ``actual`` and ``expected`` have the same shape and are on CPU (both are 1-D when the golden
    holds a sample). ``stats_*`` are :func:`summary_stats` of the whole outputs when sampled,
    ``None`` otherwise.
    """

    actual: torch.Tensor
    expected: torch.Tensor
    sampled: bool
    stats_expected: torch.Tensor | None
    stats_actual: torch.Tensor | None


def _family(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "float"
    return "int"


def unpack_pair(
    key: str,
    actual: torch.Tensor,
    stored: Mapping[str, torch.Tensor],
    *,
    path: Path | None = None,
    case: str = "",
    regen_hint: str = "",
) -> StoredPair:
    """Align the variant's full output ``actual`` with what the golden stores for ``key``.

    A whole stored output is returned as is; a sampled one is compared at its stored positions.
    Raises :class:`GoldenFormatError` when the golden has no such output, or when its shape, numel
    or dtype family (float, int, bool, complex) does not fit ``actual``. ``path``, ``case`` and
    ``regen_hint`` only serve the error message.
    """
    act = actual.detach().to("cpu")
    misfit = partial(_misfit, key, act, path, case, regen_hint)
    if key in stored:
        exp = stored[key]
        if tuple(exp.shape) != tuple(act.shape):
            misfit(exp.shape, exp.dtype, "shape differs")
        if _family(exp.dtype) != _family(act.dtype):
            misfit(exp.shape, exp.dtype, "dtype family differs")
        return StoredPair(act, exp, False, None, None)
    if key + IDX_SUFFIX not in stored or key + VAL_SUFFIX not in stored:
        raise GoldenFormatError(
            f"{_where(path, case)} has no output {key!r} (it has: "
            f"{', '.join(output_keys(stored)) or 'nothing'})\n"
            f"Fix: if the op's outputs changed on purpose, {_regen(regen_hint)}",
            path=path,
            case=case,
        )
    return _sampled_pair(key, act, stored, misfit)


def _misfit(key: str, act: torch.Tensor, path: Path | None, case: str, regen_hint: str,
            stored_shape: Sequence[int] | str, stored_dtype: torch.dtype, why: str) -> NoReturn:
    raise GoldenFormatError(
        f"{_where(path, case)}: output {key!r} does not fit the variant's output ({why}): "
        f"stored shape {_shape_str(stored_shape)} {dtype_name(stored_dtype)} vs actual "
        f"shape {_shape_str(act.shape)} {dtype_name(act.dtype)}\n"
        f"Fix: if the op's outputs changed on purpose, {_regen(regen_hint)}",
        path=path,
        case=case,
    )


def _sampled_pair(key: str, act: torch.Tensor, stored: Mapping[str, torch.Tensor],
                  misfit: Callable[[Sequence[int] | str, torch.dtype, str], NoReturn]) -> StoredPair:
    """A sampled output: ``act`` at the stored positions, with both sides' summary stats."""
    idx, val = stored[key + IDX_SUFFIX], stored[key + VAL_SUFFIX]
    stats = stored.get(key + STATS_SUFFIX)
    shape_t = stored.get(key + SHAPE_SUFFIX)
    numel = act.numel()
    if shape_t is not None:
        stored_shape: Sequence[int] | str = [int(s) for s in shape_t.tolist()]
        if tuple(stored_shape) != tuple(act.shape):
            misfit(stored_shape, val.dtype, "shape differs")
    elif stats is not None and stats.numel() == len(STATS_FIELDS):
        stored_numel = int(stats[0])
        stored_shape = f"(sampled, numel {stored_numel})"
        if stored_numel != numel:
            misfit(stored_shape, val.dtype, "numel differs")
    else:
        stored_shape = "(sampled, numel unknown)"
    if _family(val.dtype) != _family(act.dtype):
        misfit(stored_shape, val.dtype, "dtype family differs")
    if (
        idx.dtype != torch.int64
        or idx.dim() != 1
        or tuple(val.shape) != tuple(idx.shape)
        or (idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= numel))
    ):
        misfit(stored_shape, val.dtype, "stored sample positions are invalid for this numel")
    return StoredPair(
        actual=act.reshape(-1)[idx],
        expected=val,
        sampled=True,
        stats_expected=stats,
        stats_actual=summary_stats(act),
    )


def _shape_str(shape: Sequence[int] | str) -> str:
    if isinstance(shape, str):
        return shape
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


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
    The write holds the golden's cross-process lock (:mod:`numcheck.goldens.locking`), so concurrent
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


def _equal_golden(old: Golden, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> bool:
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
    where = _where(path, case)

    def corrupt(why: str) -> GoldenCorrupt:
        return GoldenCorrupt(
            f"{where} is corrupt: {why}\n"
            f"Fix: restore it from version control (git checkout -- {path}) "
            f"or {_regen(regen_hint)}",
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
            f"content hash {actual[:_SHORT]} does not match the stored {expected[:_SHORT]} "
            "(the file was changed after it was written)"
        )
    return Golden(path=path, tensors=MappingProxyType(tensors), meta=MappingProxyType(meta))


def _checked_meta(raw_meta: Mapping[str, str], path: Path, case: str,
                  regen_hint: str) -> dict[str, Any]:
    """The decoded metadata of a golden, after its required keys and format version."""
    where = _where(path, case)
    fix_regen = f"Fix: {_regen(regen_hint)}"
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
            f"Fix: upgrade numcheck, or {_regen(regen_hint)}",
            path=path,
            case=case,
        )
    return meta


def _fmt_seeds(seeds: Sequence[int]) -> str:
    shown = ", ".join(str(s) for s in seeds[:8])
    more = f", ... ({len(seeds)} seeds)" if len(seeds) > 8 else ""
    return f"[{shown}{more}]"


class GoldenNote(UserWarning):
    """Something the user should know about a golden that still passes (e.g. an old golden
    without a parameter record, checked on its inputs alone: regenerate to pin parameters)."""


def check_fresh(
    golden: Golden,
    *,
    op_version: int,
    fingerprint: str,
    seeds: Sequence[int],
    regen_hint: str,
    case: str | None = None,
    op: str | None = None,
    params: Mapping[str, Any] | None = None,
    param_defaults: Mapping[str, Any] | None = None,
) -> None:
    """Raise :class:`GoldenStale` unless ``golden`` was made for this case and op, from these
    inputs, op version, seeds and parameters.

    The message lists each difference, old -> new (hashes shortened), and the regen command.
    A golden whose metadata names another case or op was copied or renamed: the message
    says which case it came from. Seeds are compared as a sorted list: their order does not
    change what is stored. ``params`` are the case's resolved parameters: every one the op
    declares must equal the golden's record, except one the record lacks that is at its
    ``param_defaults`` value (a parameter added to the op later, keeping the old behaviour).
    A golden with no parameter record at all is checked on the rest and a :class:`GoldenNote`
    warning suggests regenerating it.
    """
    meta = golden.meta
    stored_case = str(meta.get("case", ""))
    stored_op = str(meta.get("op", ""))
    diffs: list[str] = []
    want_case = stored_case if case is None else case
    want_op = stored_op if op is None else op
    if (want_case, want_op) != (stored_case, stored_op):
        diffs.append(
            f"it was made for case {stored_case!r} of op {stored_op!r}, not for case "
            f"{want_case!r} of op {want_op!r} (copied or renamed from "
            f"{stored_op}/{stored_case}.safetensors)"
        )
    old_version = meta.get("op_version")
    if old_version != op_version:
        diffs.append(f"op_version {old_version} -> {op_version}")
    if params is not None:
        diffs += _param_diffs(golden, params, param_defaults or {}, regen_hint)
    old_fp = str(meta.get("fingerprint", ""))
    if old_fp != fingerprint:
        diffs.append(
            f"input fingerprint {old_fp[:_SHORT] or '(none)'} -> {fingerprint[:_SHORT]} "
            "(the generated inputs changed)"
        )
    old_seeds = meta.get("seeds")
    new_seeds = sorted(int(s) for s in seeds)
    if not isinstance(old_seeds, list) or sorted(old_seeds) != new_seeds:
        old_shown = (
            _fmt_seeds(sorted(old_seeds)) if isinstance(old_seeds, list) else repr(old_seeds)
        )
        diffs.append(f"seeds {old_shown} -> {_fmt_seeds(new_seeds)}")
    if diffs:
        raise GoldenStale(
            f"{_where(golden.path, want_case)} is stale: {'; '.join(diffs)}\n"
            f"Fix: if the change is intended, {_regen(regen_hint)}",
            path=golden.path,
            case=want_case,
        )


def _same_param(old: Any, new: Any) -> bool:
    # JSON keeps int and float apart (20 vs 20.0 decode differently) and bool apart from int.
    if isinstance(old, bool) or isinstance(new, bool):
        return old is new
    if isinstance(old, int | float) and isinstance(new, int | float):
        return float(old) == float(new)
    return bool(old == new)


def _param_diffs(
    golden: Golden, params: Mapping[str, Any], defaults: Mapping[str, Any], regen_hint: str
) -> list[str]:
    record = golden.meta.get("params")
    if not isinstance(record, Mapping):
        import warnings

        warnings.warn(GoldenNote(
            f"{_where(golden.path, str(golden.meta.get('case', '')))} has no record of the "
            "parameters it was made with; it is checked on its input fingerprint alone, so a "
            "parameter that does not change the inputs (an iteration count, an epsilon) "
            f"goes unnoticed. Fix: {_regen(regen_hint)} (the new golden records them)"
        ), stacklevel=3)
        return []
    diffs = []
    for key in sorted(params):
        new = params[key]
        if key in record:
            if not _same_param(record[key], new):
                diffs.append(f"parameter {key} {record[key]!r} -> {new!r}")
        elif key not in defaults or not _same_param(defaults[key], new):
            diffs.append(f"parameter {key} (not recorded) -> {new!r}")
    return diffs
