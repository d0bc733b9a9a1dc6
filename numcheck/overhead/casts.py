"""The cast ledger: every dtype conversion and copy a variant asks for, at the aten level.

A bf16 GEMM got 2x faster and the op barely moved, because a ``.to(bf16)`` of a large
tensor that had been bf16 all along added as much copy time as the GEMM saved
(docs/ops.md). Numbers cannot show that: bf16 -> fp32 -> bf16 is exact. The ledger
does, on any device, by watching the aten calls a variant makes (a ``TorchDispatchMode``)::

    with CastLedger() as ledger:
        variant(inputs, params)
    ledger.entries       # one per conversion or copy, with the user's source line
    ledger.round_trips   # A -> B -> A while the A original was still alive

What counts (every entry is a separate pass over memory):

- **cast**: an aten call whose output dtype differs from its input's: ``aten._to_copy``
  (``.to(dtype)``, ``.float()``, ``.type()``, ``.type_as()``) and ``aten.copy_`` from a
  tensor of another dtype (``out[...] = t``, ``out.copy_(t)``).
- **copy**: the same calls without a dtype change (``.to(copy=True)``, a device or layout
  change, ``copy_``), and ``aten.clone`` (``.clone()``, ``.contiguous()`` of a strided view).
- **no-op conversion**: a ``_to_copy`` that changed nothing (same dtype, device and strides):
  bytes moved for nothing. (``.to(dtype)`` to the dtype a tensor already has returns the
  tensor itself and costs nothing, so it never reaches aten and is not one.)
- **round trip**, found two ways:

  - *by path*: a cast to dtype A of a value that an earlier cast made from an A tensor,
    while that A tensor is still alive (so a view of it could have been used), and neither
    was written in between. Identity is tracked through storages, so views and copies of
    the intermediate still count.
  - *by value*: a cast to a floating dtype A whose result is bit-identical to a live A
    tensor the variant already had, whatever exact ops sat in between (``x.float() * 1.0``
    then ``.to(bf16)``). A round trip by value leaves dtype A through a cast, so the
    candidates are the variant's inputs (when the ledger is given them) and the source of
    every cast, of at least :data:`VALUE_MIN_BYTES`, remembered weakly and keyed by
    (dtype, numel); a cast's result is compared with those of its key only: a few sampled
    elements first, then exact equality. Constant results (all sampled elements equal:
    zeros, ones) are not compared: equal by construction, not a trip. Not seen: a value
    that left dtype A only through type promotion inside an op (``x * fp32_tensor``) and
    was no input.

Not recorded either: conversions made by Triton's interpreter (``TRITON_INTERPRET=1``) to
move a kernel's arguments between host and "device" memory: a compiled kernel does not
make them, so counting them on the CPU would budget an artefact.

Not recorded: views (``view``, ``view(dtype)`` bit reinterpretation, ``view_as_real``,
``transpose``, ``flatten`` of a contiguous tensor) move no bytes; type promotion inside an
op (``bf16_tensor * fp32_tensor``) is fused into that op's kernel, with no extra pass.
"""

from __future__ import annotations

import linecache
import os
import sys
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Self

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode

import numcheck

_aten = torch.ops.aten
#: aten overload packets the ledger records (see the module docstring for why these).
WATCHED = (_aten._to_copy, _aten.copy_, _aten.clone)

#: Short dtype names for messages (``bf16 -> fp32``); anything else keeps torch's name.
SHORT_DTYPES = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.float64: "fp64",
    torch.float8_e4m3fn: "e4m3",
    torch.float8_e5m2: "e5m2",
}

# Frames from these files are machinery, not the user's code: the first frame outside
# them is the line that asked for the conversion.
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_THIS_FILE = __file__
#: Files whose conversions emulate a device and are not recorded (see the module docstring).
EMULATION_FILES = (os.path.join("triton", "runtime", "interpreter.py"),)

#: Smallest cast result (bytes) compared by value: a round trip of less moves nothing
#: worth a message, and tiny tensors (scalars, [3] scales) are equal by coincidence.
VALUE_MIN_BYTES = 4096
#: Elements sampled before an exact comparison (evenly spaced in row-major order).
VALUE_SAMPLES = 64


def dtype_name(dtype: torch.dtype) -> str:
    """``bf16``, ``fp32``, ``e4m3``... or torch's own name (``int32``)."""
    return SHORT_DTYPES.get(dtype, str(dtype).removeprefix("torch."))


def megabytes(n: float) -> str:
    """``6.29 MB`` (decimal megabytes, as memory bandwidth is quoted)."""
    if n < 1e4:
        return f"{n:.0f} B"
    if n < 1e6:
        return f"{n / 1e3:.1f} kB"
    return f"{n / 1e6:.2f} MB"


@dataclass(frozen=True)
class Where:
    """The source line that asked for a conversion: ``numcheck/ops/mhc.py:98``."""

    file: str
    line: int
    function: str = ""
    code: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


UNKNOWN = Where("<unknown>", 0)


def user_frame(skip: Sequence[str] = ()) -> Where:
    """The innermost Python frame outside torch, this module and ``skip`` (file names)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_TORCH_DIR) or name == _THIS_FILE or name in skip):
            code = linecache.getline(name, frame.f_lineno).strip()
            return Where(_relative(name), frame.f_lineno, frame.f_code.co_name, code)
        frame = frame.f_back
    return UNKNOWN


# numcheck's own files are named from the package root (numcheck/ops/mhc.py) wherever
# the run starts; other files relative to the working directory when under it.
_PACKAGE_PARENT = Path(numcheck.__file__).resolve().parent.parent


def _relative(path: str) -> str:
    resolved = Path(path).resolve()
    for base in (Path.cwd(), _PACKAGE_PARENT):
        if resolved.is_relative_to(base):
            return str(resolved.relative_to(base))
    return path


@dataclass(frozen=True)
class Seen:
    """A tensor the variant had: an input (``input`` names it), or the source of a cast
    (``where`` is the line of that cast: where the variant left that dtype)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    where: Where | None
    input: str | None = None
    #: "converted" (the source of a cast at ``where``) or "made" (a cast's result there).
    role: str = "converted"

    def describe(self) -> str:
        """``the bf16 [32, 16384] tensor (input 'x') converted at numcheck/ops/mhc.py:97``."""
        what = f" (input '{self.input}')" if self.input else ""
        text = f"the {dtype_name(self.dtype)} {list(self.shape)} tensor{what}"
        return text + (f" {self.role} at {self.where}" if self.where else "")


@dataclass(frozen=True)
class LedgerEntry:
    """One conversion or copy: what, how big, and who asked for it.

    ``round_trip_of`` is the index of the earlier cast this one undoes; ``same_value_as``
    the live tensor whose exact value it reproduced (a round trip found by value);
    ``no_op`` marks a conversion that changed nothing.
    """

    index: int
    kind: str  # "cast" or "copy"
    op: str
    src_dtype: torch.dtype
    dst_dtype: torch.dtype
    shape: tuple[int, ...]
    bytes_read: int
    bytes_written: int
    where: Where
    no_op: bool = False
    round_trip_of: int | None = None
    same_value_as: Seen | None = None
    #: The variant's input this entry read from (by storage: views count), if any.
    input: str | None = None

    @property
    def is_round_trip(self) -> bool:
        return self.round_trip_of is not None or self.same_value_as is not None

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def conversion(self) -> str:
        """``bf16 -> fp32`` (or ``fp32 copy``)."""
        if self.src_dtype == self.dst_dtype:
            return f"{dtype_name(self.src_dtype)} copy"
        return f"{dtype_name(self.src_dtype)} -> {dtype_name(self.dst_dtype)}"

    def describe(self) -> str:
        """``bf16 -> fp32 of [64, 16384] at numcheck/ops/mhc.py:97 (6.29 MB)``."""
        return (f"{self.conversion} of {list(self.shape)} at {self.where} "
                f"({megabytes(self.bytes_moved)})")


@dataclass(frozen=True)
class _Origin:
    """What a storage produced by a cast came from (to recognise the cast that undoes it)."""

    entry: int
    dtype: torch.dtype
    source: StorageWeakRef
    version: int


@dataclass
class CastLedger:
    """Records conversions and copies while active (a context manager around a variant).

    Args:
        skip: extra file names whose frames are machinery (e.g. a harness calling the
            variant), so the recorded line is the variant's own.
        by_value: also find round trips by value (the module docstring); off only to
            measure what that costs (docs/overhead.md).
        inputs: the variant's inputs by name: an entry reading one of their storages (or a
            view of it) names it, and :meth:`input_passes` counts how often each was read.
    """

    skip: tuple[str, ...] = ()
    by_value: bool = True
    inputs: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    _input_storages: dict[int, str] = field(default_factory=dict, repr=False)
    # Storages that are copies (same dtype) of an input: reading them reads that input again.
    _input_copies: dict[StorageWeakRef, tuple[StorageWeakRef, str]] = field(
        default_factory=dict, repr=False
    )
    entries: list[LedgerEntry] = field(default_factory=list)
    _origins: dict[StorageWeakRef, tuple[StorageWeakRef, _Origin]] = field(
        default_factory=dict, repr=False
    )
    _mode: TorchDispatchMode | None = field(default=None, repr=False)
    #: Exact comparisons run by the value check (only after a sampled match): a measure of
    #: its cost that does not depend on the machine's speed.
    value_comparisons: int = 0
    # (dtype, numel) -> {id(tensor): (weak reference, what it was)}: the tensors seen.
    _seen: dict[tuple[torch.dtype, int], dict[int, tuple[Any, Seen]]] = field(
        default_factory=dict, repr=False
    )

    def __enter__(self) -> Self:
        self._input_storages = {
            t.untyped_storage().data_ptr(): name for name, t in self.inputs.items()
            if isinstance(t, torch.Tensor) and t.numel() and t.device.type != "meta"
        }
        if self.by_value:
            for name, t in self.inputs.items():
                if isinstance(t, torch.Tensor):
                    self._see(t, None, name)
        self._mode = _LedgerMode(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._mode is not None
        self._mode.__exit__(*exc)
        self._mode = None
        self._origins.clear()  # drop the weak references; the entries stay
        self._seen.clear()
        self._input_copies.clear()

    # -- what the ledger says -----------------------------------------------------------

    @property
    def casts(self) -> list[LedgerEntry]:
        return [e for e in self.entries if e.kind == "cast"]

    @property
    def copies(self) -> list[LedgerEntry]:
        return [e for e in self.entries if e.kind == "copy"]

    @property
    def round_trips(self) -> list[LedgerEntry]:
        return [e for e in self.entries if e.is_round_trip]

    @property
    def no_ops(self) -> list[LedgerEntry]:
        return [e for e in self.entries if e.no_op]

    @property
    def bytes_moved(self) -> int:
        """Bytes read plus written by every entry: casts and copies are both pure traffic."""
        return sum(e.bytes_moved for e in self.entries)

    def input_passes(self) -> dict[str, float]:
        """How many times casts and copies read each input, in whole-input passes: bytes read
        from its storage, or from a copy of it, over its bytes (1.0: one full copy or cast of
        it; ``x.clone()`` then ``.float()`` of the clone is 2.0)."""
        read: dict[str, int] = {}
        for e in self.entries:
            if e.input is not None:
                read[e.input] = read.get(e.input, 0) + e.bytes_read
        return {
            name: n / max(1, self.inputs[name].numel() * self.inputs[name].element_size())
            for name, n in read.items()
        }

    def largest(self) -> LedgerEntry | None:
        return max(self.entries, key=lambda e: e.bytes_moved, default=None)

    def describe_round_trip(self, entry: LedgerEntry) -> str:
        """``bf16 -> fp32 -> bf16 of [64, 16384]: there at mhc.py:97, back at mhc.py:98 ...``."""
        assert entry.is_round_trip
        if entry.round_trip_of is None:
            seen = entry.same_value_as
            assert seen is not None
            return (
                f"{entry.conversion} of {list(entry.shape)} at {entry.where} gives back, bit "
                f"for bit, {seen.describe()}: a round trip by value, "
                f"{megabytes(entry.bytes_moved)} moved while that tensor was still alive: "
                "use it (or a view of it)"
            )
        first = self.entries[entry.round_trip_of]
        chain = (f"{dtype_name(first.src_dtype)} -> {dtype_name(first.dst_dtype)} -> "
                 f"{dtype_name(entry.dst_dtype)}")
        return (
            f"{chain} of {list(entry.shape)} at {entry.where} (back; there at {first.where}), "
            f"{megabytes(entry.bytes_moved)} moved while the "
            f"{dtype_name(entry.dst_dtype)} original was still alive: use it (or a view of it)"
        )

    # -- recording ----------------------------------------------------------------------

    def _record(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> None:
        where = user_frame(self.skip)
        if where.file.endswith(EMULATION_FILES):
            return
        packet = func.overloadpacket
        if packet is _aten.copy_:
            dst, src = args[0], args[1]
        else:
            src, dst = args[0], out
        if not (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)):
            return
        cast = src.dtype != dst.dtype
        no_op = (
            packet is _aten._to_copy
            and not cast
            and src.device == dst.device
            and src.stride() == dst.stride()
        )
        round_trip_of = self._undoes(src, dst) if cast else None
        same_value = None
        if cast and self.by_value:
            if round_trip_of is None:
                same_value = self._same_value(dst)
            # A round trip by value leaves dtype A through a cast: its source is the A value
            # a later cast may give back. Remembering cast sources (and the inputs) only
            # keeps the check off every other aten call.
            self._see(src, where, self._input_of(src))
        # copy_ broadcasts: it reads src once and writes every element of dst.
        entry = LedgerEntry(
            index=len(self.entries),
            kind="cast" if cast else "copy",
            op=str(packet).removeprefix("aten."),
            src_dtype=src.dtype,
            dst_dtype=dst.dtype,
            shape=tuple(dst.shape),
            bytes_read=src.numel() * src.element_size(),
            bytes_written=dst.numel() * dst.element_size(),
            where=where,
            no_op=no_op,
            round_trip_of=round_trip_of,
            same_value_as=same_value,
            input=self._input_of(src),
        )
        self.entries.append(entry)
        if cast and self.by_value:
            self._see(dst, where, None, "made")
        if entry.kind == "copy" and entry.input is not None:
            ref = StorageWeakRef(dst.untyped_storage())
            self._input_copies[ref] = (ref, entry.input)
        self._remember(entry, src, dst)

    def _input_of(self, t: torch.Tensor) -> str | None:
        """The input ``t`` holds (a view of it, or of a copy of it), if any."""
        name = self._input_storages.get(t.untyped_storage().data_ptr())
        if name is not None:
            return name
        key = StorageWeakRef(t.untyped_storage())
        found = self._input_copies.get(key)
        if found is None:
            return None
        if found[0].expired():
            del self._input_copies[key]
            return None
        return found[1]

    def _see(
        self, t: torch.Tensor, where: Where | None, name: str | None, role: str = "converted"
    ) -> None:
        """Remember ``t`` (weakly) as a value the variant had, for later casts to compare; a
        view's base too when it holds the same elements (``x.flatten(1)`` of a live ``x``)."""
        base = t._base
        if base is not None and base.numel() == t.numel() and base.dtype == t.dtype:
            self._see(base, where, name, role)
        if not t.is_floating_point() or t.device.type == "meta":
            return
        n = t.numel()
        if n * t.element_size() < VALUE_MIN_BYTES:
            return
        bucket = self._seen.setdefault((t.dtype, n), {})
        known = bucket.get(id(t))
        if known is not None and known[0]() is t and known[1].where is not None:
            return
        bucket[id(t)] = (weakref.ref(t), Seen(t.dtype, tuple(t.shape), where, name, role))

    def _same_value(self, dst: torch.Tensor) -> Seen | None:
        """A live tensor seen earlier, of dst's dtype, holding exactly dst's values."""
        if not dst.is_floating_point() or dst.numel() * dst.element_size() < VALUE_MIN_BYTES:
            return None
        bucket = self._seen.get((dst.dtype, dst.numel()))
        if not bucket:
            return None
        positions = torch.linspace(0, dst.numel() - 1, VALUE_SAMPLES, device=dst.device).long()
        mine = _sample(dst, positions)
        if bool((mine == mine[0]).all()):  # constant: equal by construction, not a trip
            return None
        storage = dst.untyped_storage().data_ptr()
        for key, (ref, seen) in list(bucket.items()):
            t = ref()
            if t is None:
                del bucket[key]
                continue
            if t.device != dst.device or t.untyped_storage().data_ptr() == storage:
                continue
            if not torch.equal(_sample(t, positions), mine):
                continue
            self.value_comparisons += 1
            if torch.equal(t.reshape(-1), dst.reshape(-1)):
                return seen
        return None

    def _lookup(self, t: torch.Tensor) -> _Origin | None:
        key = StorageWeakRef(t.untyped_storage())
        found = self._origins.get(key)
        if found is None:
            return None
        ref, origin = found
        if ref.expired():  # that storage died; this key is a new one at the same address
            del self._origins[key]
            return None
        return origin

    def _undoes(self, src: torch.Tensor, dst: torch.Tensor) -> int | None:
        origin = self._lookup(src)
        if origin is None or origin.dtype != dst.dtype or origin.source.expired():
            return None
        if src._version != origin.version:  # written since it was made: a new value
            return None
        return origin.entry

    def _remember(self, entry: LedgerEntry, src: torch.Tensor, dst: torch.Tensor) -> None:
        if entry.kind == "cast":
            origin = _Origin(entry.index, src.dtype, StorageWeakRef(src.untyped_storage()),
                             dst._version)
        else:  # a copy carries the origin of what it copied (x.float().clone().bfloat16())
            found = self._lookup(src)
            if found is None:
                return
            origin = _Origin(found.entry, found.dtype, found.source, dst._version)
        ref = StorageWeakRef(dst.untyped_storage())
        self._origins[ref] = (ref, origin)


class _LedgerMode(TorchDispatchMode):
    """Runs every aten call unchanged and tells the ledger about the watched ones."""

    def __init__(self, ledger: CastLedger) -> None:
        super().__init__()
        self.ledger = ledger

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo by default, whose
        # first call imports torch._dynamo: seconds per process, for a compiler the ledger
        # never runs. Variants under the ledger run eagerly. torch has no public switch for
        # this; TorchDispatchMode's own docstring gives overriding this classmethod as the
        # way to opt out, so it is the least fragile choice. test_casts.py fails if a torch
        # release stops honouring it (torch._dynamo would be imported again).
        return False

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.overloadpacket in WATCHED:
            self.ledger._record(func, args, kwargs, out)
        return out


def _sample(t: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The elements of ``t`` at row-major ``positions``, without copying ``t``."""
    if t.is_contiguous():
        return t.view(-1)[positions]
    return t[torch.unravel_index(positions, t.shape)]


def ledger_table(ledger: CastLedger, limit: int = 12) -> Iterator[str]:
    """The entries as an aligned table, largest first, capped at ``limit`` rows."""
    rows = sorted(ledger.entries, key=lambda e: -e.bytes_moved)[:limit]
    yield (f"    {'#':>3}  {'kind':<4}  {'conversion':<14}  {'shape':<16}  {'read':>9}  "
           f"{'written':>9}  where")
    for e in rows:
        flag = ""
        if e.round_trip_of is not None:
            flag = f"  ROUND TRIP of #{e.round_trip_of}"
        elif e.same_value_as is not None:
            flag = f"  ROUND TRIP (same value as {e.same_value_as.where})"
        elif e.no_op:
            flag = "  NO-OP"
        code = f"  {e.where.code}" if e.where.code else ""
        yield (f"    {e.index:>3}  {e.kind:<4}  {e.conversion:<14}  {list(e.shape)!s:<16}  "
               f"{megabytes(e.bytes_read):>9}  {megabytes(e.bytes_written):>9}  "
               f"{e.where}{code}{flag}")
    if len(ledger.entries) > len(rows):
        yield f"    ... {len(ledger.entries) - len(rows)} smaller entries"
