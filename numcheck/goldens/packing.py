"""How a golden stores each output: whole, or as a sample when it is large.

Large outputs are not stored whole: :func:`pack_output` keeps a deterministic, evenly spread sample
of :data:`SAMPLE_SIZE` flat positions plus :func:`summary_stats` of the whole tensor, so a golden
for an indexer with 64 x 8192 logits stays small enough to review and commit. One output of one
seed is stored under :func:`seed_key`; :func:`stored_output` reads it back as a
:class:`StoredOutput`, whose :meth:`~StoredOutput.pair` aligns a variant's output with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import NoReturn

import numpy as np
import torch

from numcheck.goldens.files import GoldenFormatError, golden_at, regen_text
from numcheck.precision import dtype_name

__all__ = [
    "FULL_LIMIT",
    "IDX_SUFFIX",
    "SAMPLE_SIZE",
    "SHAPE_SUFFIX",
    "STATS_FIELDS",
    "STATS_SUFFIX",
    "SWEEP_FULL_LIMIT",
    "SWEEP_SAMPLE_SIZE",
    "VAL_SUFFIX",
    "StoredOutput",
    "StoredPair",
    "output_keys",
    "pack_output",
    "seed_key",
    "stored_output",
    "summary_stats",
    "unpack_pair",
    "valid_positions",
]

#: Outputs with at most this many elements are stored whole.
FULL_LIMIT = 262_144
#: Larger outputs: this many sampled flat positions, plus summary statistics.
SAMPLE_SIZE = 65_536
#: A shape sweep's points (numcheck/caseparts/sweep.py) are many goldens of one case: each
#: stores whole only up to this many elements, and samples this many positions beyond, so
#: that a sweep adds kilobytes per point to the repository, not megabytes.
SWEEP_FULL_LIMIT = 16_384
SWEEP_SAMPLE_SIZE = 2_048

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
#: The non-finite kinds the summary statistics count (``n_<kind>``), in this order.
NONFINITE_KINDS = ("nan", "posinf", "neginf")
_NONFINITE_AT = tuple(STATS_FIELDS.index(f"n_{kind}") for kind in NONFINITE_KINDS)

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


def nonfinite_of(stats: torch.Tensor) -> tuple[int, ...]:
    """The NaN, +inf and -inf counts (:data:`NONFINITE_KINDS`) of a :func:`summary_stats`
    tensor: the one reader of where the statistics keep them."""
    return tuple(int(stats[i]) for i in _NONFINITE_AT)


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


def pack_output(key: str, t: torch.Tensor, *, full: bool | None = None,
                full_limit: int = FULL_LIMIT, sample: int = SAMPLE_SIZE,
                ) -> dict[str, torch.Tensor]:
    """Return the tensors that store output ``key`` in a golden.

    Whole (``numel <= full_limit``, or ``full=True``): ``{key: t}`` on CPU, contiguous.
    Sampled (otherwise): ``key.idx`` (int64 sorted flat positions, a function of ``key`` and
    ``numel`` only), ``key.val`` (the values there, original dtype), ``key.stats``
    (:func:`summary_stats` of the whole output) and ``key.shape`` (int64 logical shape).
    """
    t = t.detach()
    if full is None:
        full = t.numel() <= full_limit
    if full:
        return {key: t.to("cpu").contiguous()}
    numel = t.numel()
    idx = _sample_indices(key, numel, min(sample, numel))
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
    ``None`` otherwise; ``stats_actual`` is computed from ``whole_actual`` when first read
    (a pass over the whole output that only the sampled count check needs: the outputs of
    the rounding envelope are paired for their sampled values alone).
    """

    actual: torch.Tensor
    expected: torch.Tensor
    sampled: bool
    stats_expected: torch.Tensor | None
    #: The variant's whole output (CPU) when sampled, for :attr:`stats_actual`.
    whole_actual: torch.Tensor | None = field(default=None, repr=False)

    @cached_property
    def stats_actual(self) -> torch.Tensor | None:
        """:func:`summary_stats` of the variant's whole output when sampled, else None."""
        return None if self.whole_actual is None else summary_stats(self.whole_actual)


def seed_key(seed: int, output: str) -> str:
    """The golden tensor name of one output of one seed: ``s<seed>/<output>``."""
    return f"s{seed}/{output}"


def _family(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "float"
    return "int"


@dataclass(frozen=True)
class StoredOutput:
    """One output as a golden stores it, read back: whole, or sampled.

    ``values`` is the whole output, or its values at ``positions`` (int64 flat positions,
    sorted) when sampled; ``stats`` is then :func:`summary_stats` of the whole output and
    ``shape`` its logical shape (None in a golden that does not store it). ``recorded_shape``
    and ``recorded_dtype`` are the reference output's shape and dtype as the golden's metadata
    records them (None where it records none: :mod:`numcheck.goldens.case_golden` fills them
    when it validates a golden for its case). ``path``, ``case`` and ``regen_hint`` only serve
    error messages.
    """

    key: str
    values: torch.Tensor
    positions: torch.Tensor | None = None
    stats: torch.Tensor | None = None
    shape: tuple[int, ...] | None = None
    recorded_shape: tuple[int, ...] | None = None
    recorded_dtype: str | None = None
    path: Path | None = None
    case: str = ""
    regen_hint: str = ""

    @property
    def sampled(self) -> bool:
        return self.positions is not None

    @property
    def nonfinite(self) -> tuple[int, ...] | None:
        """The whole output's NaN, +inf and -inf counts when sampled with its statistics
        (:func:`nonfinite_of`), else None."""
        return None if self.positions is None or self.stats is None else nonfinite_of(self.stats)

    @property
    def stored_shape(self) -> tuple[int, ...] | None:
        """The logical shape the golden holds: the whole tensor's, or the sampled output's
        when stored (None when it is not)."""
        return tuple(self.values.shape) if self.positions is None else self.shape

    def pair(self, actual: torch.Tensor) -> StoredPair:
        """Align the variant's full output ``actual`` with this stored output.

        A whole stored output is returned as is; a sampled one is compared at its stored
        positions. Raises :class:`GoldenFormatError` when its shape, numel or dtype family
        (float, int, bool, complex) does not fit ``actual``.
        """
        act = actual.detach().to("cpu")
        misfit = partial(_misfit, self.key, act, self.path, self.case, self.regen_hint)
        if self.positions is None:
            exp = self.values
            if tuple(exp.shape) != tuple(act.shape):
                misfit(exp.shape, exp.dtype, "shape differs")
            if _family(exp.dtype) != _family(act.dtype):
                misfit(exp.shape, exp.dtype, "dtype family differs")
            return StoredPair(act, exp, False, None, None)
        return _sampled_pair(self, act, misfit)


def stored_output(
    key: str,
    stored: Mapping[str, torch.Tensor],
    *,
    path: Path | None = None,
    case: str = "",
    regen_hint: str = "",
) -> StoredOutput:
    """What the golden tensors ``stored`` hold for output ``key``. Raises
    :class:`GoldenFormatError` when they hold no such output (whole, or its sample's positions
    and values). ``path``, ``case`` and ``regen_hint`` only serve error messages."""
    if key in stored:
        return StoredOutput(key, stored[key], path=path, case=case, regen_hint=regen_hint)
    if key + IDX_SUFFIX not in stored or key + VAL_SUFFIX not in stored:
        raise GoldenFormatError(
            f"{golden_at(path, case)} has no output {key!r} (it has: "
            f"{', '.join(output_keys(stored)) or 'nothing'})\n"
            f"Fix: if the op's outputs changed on purpose, {regen_text(regen_hint)}",
            path=path,
            case=case,
        )
    shape_t = stored.get(key + SHAPE_SUFFIX)
    shape = None if shape_t is None else tuple(int(s) for s in shape_t.reshape(-1).tolist())
    return StoredOutput(key, stored[key + VAL_SUFFIX], stored[key + IDX_SUFFIX],
                        stored.get(key + STATS_SUFFIX), shape, path=path, case=case,
                        regen_hint=regen_hint)


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
    ``regen_hint`` only serve the error message. (:func:`stored_output`, then
    :meth:`StoredOutput.pair`.)
    """
    return stored_output(key, stored, path=path, case=case, regen_hint=regen_hint).pair(actual)


def _misfit(key: str, act: torch.Tensor, path: Path | None, case: str, regen_hint: str,
            stored_shape: Sequence[int] | str, stored_dtype: torch.dtype, why: str) -> NoReturn:
    raise GoldenFormatError(
        f"{golden_at(path, case)}: output {key!r} does not fit the variant's output ({why}): "
        f"stored shape {_shape_str(stored_shape)} {dtype_name(stored_dtype)} vs actual "
        f"shape {_shape_str(act.shape)} {dtype_name(act.dtype)}\n"
        f"Fix: if the op's outputs changed on purpose, {regen_text(regen_hint)}",
        path=path,
        case=case,
    )


def _sampled_pair(
    out: StoredOutput, act: torch.Tensor,
    misfit: Callable[[Sequence[int] | str, torch.dtype, str], NoReturn],
) -> StoredPair:
    """A sampled output: ``act`` at the stored positions, with both sides' summary stats."""
    idx, val, stats = out.positions, out.values, out.stats
    assert idx is not None
    numel = act.numel()
    if out.shape is not None:
        stored_shape: Sequence[int] | str = list(out.shape)
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
    if not valid_positions(idx, val, numel):
        misfit(stored_shape, val.dtype, "stored sample positions are invalid for this numel")
    return StoredPair(
        actual=act.reshape(-1)[idx],
        expected=val,
        sampled=True,
        stats_expected=stats,
        whole_actual=act,
    )


def valid_positions(idx: torch.Tensor, val: torch.Tensor, numel: int) -> bool:
    """Whether ``idx`` can be a sample's positions in an output of ``numel`` elements, with
    ``val`` its values: int64, 1-D, one value each, every position in range."""
    return not (
        idx.dtype != torch.int64
        or idx.dim() != 1
        or tuple(val.shape) != tuple(idx.shape)
        or (idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= numel))
    )


def _shape_str(shape: Sequence[int] | str) -> str:
    if isinstance(shape, str):
        return shape
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"
