"""The overhead gates: casts and copies (any device) and kernel classes (CUDA).

Two gates, listed in :mod:`numcheck.gates` so case files can cite them in
``expect.<variant>.fails``:

- ``casts``: from the cast ledger (:mod:`numcheck.overhead.casts`). ``round_trips`` (A -> B -> A
  while the A original was alive), ``repeated_casts`` (A -> B of a tensor already cast to B,
  that result still alive), ``no_op_casts`` (conversions that changed nothing),
  ``input_copies`` (passes casts, copies and data movement make over one input, when the
  passes beyond its limit are not metadata-sized: :data:`METADATA_SHARE`),
  ``cast_bytes_ratio`` (bytes moved by casts, copies and data movement over the op's
  minimum bytes). Active on every device by default.
- ``kernels``: from the kernel audit (:mod:`numcheck.overhead.kernels`). ``cuda_core_gemm`` (a
  GEMM on CUDA cores in a variant meant for tensor cores), ``copy_share`` (cast/copy
  kernels' share of the variant's GPU time). Active on CUDA by default.

Limits live in case files, per variant::

    [v4flash-t64.overhead.bf16]
    max_cast_bytes_ratio = 3.0   # default: DEFAULT_CAST_BYTES_RATIO of the precision class
    max_input_copies = 1.0       # or per input: { kv_cache = 2 }; an input not named may
                                 # also take as many passes as the op's reference makes
    round_trips = false          # allowed? default false for every variant
    repeated_casts = false       # allowed? default false for every variant
    no_op_casts = false          # allowed? default false
    cuda_core_gemm = false       # allowed? default false for bf16/tf32, true for fp32
    max_copy_share = 0.2         # default: DEFAULT_COPY_SHARE (CUDA only)

The op's **minimum bytes** are every input read once plus every output written once: the
traffic no implementation of the op can avoid (the roofline's HBM floor), as the op declares
it for the case's shape (``OpSpec.min_bytes``), else the bytes of that call's tensors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from numcheck.errors import NumcheckError
from numcheck.gates import CASTS_GATE, KERNELS_GATE
from numcheck.numerics.verdict import Violation
from numcheck.overhead.casts import CastLedger, ledger_table
from numcheck.overhead.kernels import COPY, CUDA_CORE_GEMM, KernelAudit, profile_kernels
from numcheck.overhead.units import megabytes
from numcheck.precision import TENSOR_CORE_PRECISIONS
from numcheck.recorded.files import tensor_bytes

OVERHEAD_GATES = (CASTS_GATE.name, KERNELS_GATE.name)


class PreparedCall(Protocol):
    """A variant's one-time preparation as the audit uses it (a
    :class:`numcheck.prepare.Prepared`, which sits above this room: it keeps its ledger with
    this room's :class:`~numcheck.overhead.casts.CastLedger`)."""

    def call_inputs(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...

    def lines(self, limit: int = 12) -> list[str]: ...

    def cell(self) -> str: ...


@dataclass(frozen=True)
class OverheadBudget:
    """What a variant may spend on casts and copies; ``None`` limits are not checked."""

    round_trips: bool = False
    no_op_casts: bool = False
    max_cast_bytes_ratio: float | None = None
    repeated_casts: bool = False
    cuda_core_gemm: bool = True
    max_copy_share: float | None = None
    max_input_copies: float | None = None
    #: Per-input limits that replace ``max_input_copies`` for the inputs they name
    #: (``max_input_copies = { kv_cache = 2 }`` in a case file), as (input, limit) pairs.
    max_input_copies_of: tuple[tuple[str, float], ...] = ()


#: Case-file keys of ``[<case>.overhead.<variant>]``: (type, meaning) for messages.
OVERHEAD_KEYS: dict[str, tuple[type, str]] = {
    "round_trips": (bool, "allow A -> B -> A conversions (default false)"),
    "repeated_casts": (bool, ("allow casting a tensor to a dtype it was already cast to, that "
                              "result still alive (default false)")),
    "no_op_casts": (bool, "allow conversions that change nothing (default false)"),
    "max_cast_bytes_ratio": (float, "bytes moved by casts and copies / the op's minimum bytes"),
    "cuda_core_gemm": (bool, "allow CUDA-core GEMM kernels (default: only for fp32 variants)"),
    "max_copy_share": (float, "cast/copy kernels' share of the GPU time, 0..1"),
    "max_input_copies": (float, ("full passes casts/copies make over any one input (default 1), "
                                 "or a table of them per input: { kv_cache = 2 }")),
}


#: Keys of ``OVERHEAD_KEYS`` that only the kernels gate reads (it audits CUDA kernels).
KERNEL_LIMITS = ("cuda_core_gemm", "max_copy_share")


class OverheadError(NumcheckError):
    """A bad ``overhead`` entry; ``key`` is relative to ``overhead.<variant>``."""


#: Default ``max_cast_bytes_ratio`` per precision class: a ceiling for a variant whose case
#: gives no limit (a user's variant, a planted one): the worst shipped variant of the class
#: on any CPU-sized shipped case, data movement (the indexer's page gather) included
#: (fp32/tf32: the fp32 indexer on v32-b2-l4k-ue8m0, 8.60; bf16: bf16_folded on
#: v4pro-b2-l4k-mtp2, 18.82; the indexer with every request at max_context, the most bytes
#: any seed moves: ``benchmarks/overhead/cast_ratios.py --full-context``, docs/overhead.md), times
#: 1.25, rounded up. The shipped cases set tight limits of their own (2% over their
#: measurement); an extra full copy of an input fails everywhere through
#: ``max_input_copies``. fp16 shares bf16's row (the same casts at the same widths); a class
#: not listed gets no limit rather than an unmeasured one.
DEFAULT_CAST_BYTES_RATIO: dict[str, float] = {
    "fp32": 10.8, "tf32": 10.8, "bf16": 23.6, "fp16": 23.6,
}
#: Default ``max_copy_share`` per precision class. Only the kernels gate reads it, and that
#: gate runs on CUDA only. Conservative: it fails a variant dominated by copies without
#: failing the shipped naive variants at production shapes (their measured shares, with the
#: GPU run behind them: docs/overhead.md, "Copy and cast budgets"). Tighten from
#: ``benchmarks/overhead/cast_ratios.py --device cuda``.
DEFAULT_COPY_SHARE: dict[str, float] = {"fp32": 0.75, "tf32": 0.75, "bf16": 0.75, "fp16": 0.75}


#: Default ``max_input_copies``: each input may be cast, copied or gathered once in full. A
#: second pass over an input is the extra ``.contiguous()``/``.clone()``/``torch.cat`` this
#: limit exists for; its bytes depend on the input's size, not on the case's shape, so the
#: limit holds on every seed. (The shipped indexer variants make two passes over the KV
#: cache, its key bytes made contiguous and then gathered by page: their cases say so.)
DEFAULT_INPUT_COPIES = 1.0
#: An extra read of an input counts against ``max_input_copies`` only when the bytes it
#: reads beyond the limit are at least this share of the op's minimum bytes. Below it a
#: copy is metadata-sized: listed in the ledger, never failed. Measured over the shipped
#: cases (docs/overhead.md): metadata inputs (block tables, context lengths, mHC's scale and
#: base) are at most 0.046% of the minimum bytes, and the smallest data input (the indexer's
#: q on v32-b2-l4k-ue8m0) 1.43%; an extra read+write of 0.5% costs at most 1% of a
#: bandwidth-bound op's floor, below what any timing gate resolves.
METADATA_SHARE = 0.005
#: Reads beyond an input's limit count only from half a pass up: ``input_copies`` is the
#: gate for extra copies of an input (the seed's second copy of x, a clone of the KV cache:
#: each a whole pass), and a variant that gathers through a page table re-reads part of a
#: pass as a matter of course (the pages of a short request's padding blocks, a tile's
#: halo): examples/my_kernels' page-at-a-time indexer reads its KV cache 2.10 times where
#: the reference's single gather counts 2.00. They read the same pages: the ledger charges
#: an entry at most what its source holds of the input, so one gather counts page 0 once
#: however many padding slots name it, while one gather per page column counts it in each.
#: That cap makes whole passes a bound that holds on every seed, whatever its context
#: lengths; the gate, not the ledger, tells a partial re-read from a copy. Half a pass
#: is far from both: the bytes of a partial re-read still count in ``cast_bytes_ratio``,
#: whose limits sit 2% over what each case measured.
HALF_PASS = 0.5


def whole_passes(passes: float) -> float:
    """``passes`` rounded up to whole passes: the limit that a variant's ops make an exact
    bound on every seed, since the ledger charges each entry at most what its source holds
    of the input (casts.py)."""
    return float(math.ceil(passes - 1e-9))


def default_overhead(precision: str) -> OverheadBudget:
    """Round trips and no-op conversions forbidden everywhere; CUDA-core GEMM only in fp32;
    the precision class's cast-bytes ceiling and (CUDA) copy share."""
    return OverheadBudget(
        cuda_core_gemm=precision not in TENSOR_CORE_PRECISIONS,
        max_cast_bytes_ratio=DEFAULT_CAST_BYTES_RATIO.get(precision),
        max_copy_share=DEFAULT_COPY_SHARE.get(precision),
        max_input_copies=DEFAULT_INPUT_COPIES,
    )


def complete_overhead(precision: str, given: Mapping[str, Any]) -> OverheadBudget:
    """The default budget of ``precision`` with the case file's values on top."""
    known = ", ".join(OVERHEAD_KEYS)
    values: dict[str, Any] = {}
    for key, value in given.items():
        if key not in OVERHEAD_KEYS:
            raise OverheadError(key, f"unknown overhead key '{key}'", f"use one of: {known}")
        kind, meaning = OVERHEAD_KEYS[key]
        if key == "max_input_copies" and isinstance(value, dict):
            values["max_input_copies_of"] = _per_input_limits(key, value, meaning)
            continue
        if kind is bool:
            if not isinstance(value, bool):
                raise OverheadError(key, f"expected true or false, got {value!r}",
                                    f"write {key} = false ({meaning})")
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise OverheadError(key, f"expected a number, got {value!r}",
                                    f"write {key} = 0.2 ({meaning})")
            value = float(value)
            bad = not math.isfinite(value) or value < 0 or (key == "max_copy_share" and value > 1)
            if bad:
                span = "between 0 and 1" if key == "max_copy_share" else "a finite number >= 0"
                raise OverheadError(key, f"{value!r} is out of range", f"use {span} ({meaning})")
        values[key] = value
    base = default_overhead(precision)
    return OverheadBudget(**{**base.__dict__, **values})


def _per_input_limits(
    key: str, table: Mapping[str, Any], meaning: str
) -> tuple[tuple[str, float], ...]:
    """``{ kv_cache = 2 }``: a limit (a finite number >= 0) for each named input."""
    limits = []
    for name, value in table.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise OverheadError(f"{key}.{name}", f"expected a number, got {value!r}",
                                f"write {key} = {{ {name} = 2 }} ({meaning})")
        if not math.isfinite(value) or value < 0:
            raise OverheadError(f"{key}.{name}", f"{value!r} is out of range",
                                f"use a finite number >= 0 ({meaning})")
        limits.append((str(name), float(value)))
    return tuple(limits)


def default_gates(device: str) -> set[str]:
    """Overhead gates a run measures unless told otherwise: casts always, kernels on CUDA."""
    return {CASTS_GATE.name, KERNELS_GATE.name} if device == "cuda" else {CASTS_GATE.name}


@dataclass(frozen=True)
class InputReads:
    """How often casts, copies and data movement read one input, and its weight."""

    name: str
    passes: float
    #: The input's bytes (one whole pass).
    size: int
    #: The op's minimum bytes.
    min_bytes: int

    @property
    def share(self) -> float:
        """One pass over the input as a share of the op's minimum bytes."""
        return self.size / self.min_bytes if self.min_bytes else math.inf

    def meaningful_over(self, limit: float) -> bool:
        """Whether the reads beyond ``limit`` passes are an extra copy's worth: at least
        :data:`HALF_PASS` of the input, and at least :data:`METADATA_SHARE` of the op's
        minimum bytes (else the input is metadata-sized: listed, not failed)."""
        over = self.passes - limit
        return over >= HALF_PASS - 1e-9 and over * self.share >= METADATA_SHARE

    def describe(self) -> str:
        """``kv_cache 2.00 (84.8%)``: passes, and one pass as a share of the minimum bytes."""
        note = "" if self.share >= METADATA_SHARE else ", metadata-sized"
        return f"{self.name} {self.passes:.2f} ({100 * self.share:.3g}%{note})"


@dataclass
class OverheadReport:
    """What one variant spent: its cast ledger, its minimum bytes, its kernels (CUDA)."""

    ledger: CastLedger
    min_bytes: int
    kernels: KernelAudit | None = None
    #: The variant's one-time preparation, with its own ledger: shown beside the per-call
    #: ledger ("prepared once: ..."), never gated (numcheck.prepare).
    prepared: PreparedCall | None = None
    #: Passes the op's reference makes over each input on the same inputs: the default
    #: limit of an input the budget does not name (:meth:`input_copies_limit`). Measured by
    #: :func:`numcheck.check.overhead.audit_overhead` only when a variant reads an input more
    #: than once.
    reference_passes: dict[str, float] | None = None
    #: Seconds the kernel audit waited for the device alone (None: no kernel audit).
    lock_wait_s: float | None = None

    @property
    def cast_bytes_ratio(self) -> float:
        return self.ledger.bytes_moved / self.min_bytes if self.min_bytes else math.inf

    def input_reads(self) -> list[InputReads]:
        """Every input casts, copies or data movement read, most passes first."""
        rows = [InputReads(name, passes, self.ledger.input_bytes(name), self.min_bytes)
                for name, passes in self.ledger.input_passes().items()]
        return sorted(rows, key=lambda r: (-r.passes, r.name))

    def input_copies_limit(self, budget: OverheadBudget, name: str) -> tuple[float | None, bool]:
        """The passes input ``name`` may take, and whether the op's reference set it.

        A limit the budget gives that input wins (``max_input_copies = { kv_cache = 2 }``).
        Otherwise ``max_input_copies`` (default 1), raised to the whole passes the op's
        reference makes over that input, where measured: what the op's inputs take is best
        known from its reference (the indexer's gathers its pages from a contiguous copy: 2).
        """
        named = dict(budget.max_input_copies_of)
        if name in named:
            return named[name], False
        base = budget.max_input_copies
        reference = (self.reference_passes or {}).get(name)
        if base is None or reference is None:
            return base, False
        whole = whole_passes(reference)
        return (whole, True) if whole > base else (base, False)

    def gated_input_copies(
        self, budget: OverheadBudget
    ) -> tuple[InputReads, float, bool] | None:
        """The input read most times over its limit whose reads beyond it are meaningful
        (at least :data:`METADATA_SHARE` of the op's minimum bytes), with that limit and
        whether the op's reference set it."""
        for reads in self.input_reads():  # most passes first
            limit, by_reference = self.input_copies_limit(budget, reads.name)
            if limit is not None and reads.passes > limit and reads.meaningful_over(limit):
                return reads, limit, by_reference
        return None

    def summary(self) -> str:
        """``5 entries (5 casts, 0 copies), 14.1 MB moved = 3.02x the op's minimum ...``."""
        led = self.ledger
        text = (f"{len(led.entries)} entries ({len(led.casts)} casts, {len(led.copies)} copies), "
                f"{megabytes(led.bytes_moved)} moved = {self.cast_bytes_ratio:.2f}x the op's "
                f"minimum {megabytes(self.min_bytes)}; round trips {len(led.round_trips)}, "
                f"repeated casts {len(led.repeated_casts)}, no-op conversions {len(led.no_ops)}")
        return text

    def lines(self, limit: int = 12, *, prepared: bool = True) -> list[str]:
        """The ledger, the one-time preparation's own (``prepared``: when there is one) and,
        on CUDA, the kernel table, for explain mode and failures."""
        out = [f"  cast ledger: {self.summary()}"]
        reads = self.input_reads()
        if reads:
            out.append("  input passes: " + ", ".join(r.describe() for r in reads))
        if self.ledger.entries:
            out += list(ledger_table(self.ledger, limit))
        if prepared and self.prepared is not None:
            out += self.prepared.lines(limit)
        if self.kernels is not None:
            out += [(f"  kernels ({self.kernels.iterations} calls profiled): "
                    f"{self.kernels.summary()}"), *self.kernels.table(limit)]
        return out

    def as_dict(self) -> dict[str, Any]:
        led = self.ledger
        return {
            "min_bytes": self.min_bytes,
            "cast_bytes": led.bytes_moved,
            "cast_bytes_ratio": self.cast_bytes_ratio,
            "casts": len(led.casts),
            "copies": len(led.copies),
            "round_trips": [led.describe_round_trip(e) for e in led.round_trips],
            "repeated_casts": [led.describe_repeated_cast(e) for e in led.repeated_casts],
            "no_op_casts": [e.describe() for e in led.no_ops],
            "input_passes": led.input_passes(),
            "input_reads": [
                {"input": r.name, "passes": r.passes, "bytes": r.size,
                 "share_of_min_bytes": r.share}
                for r in self.input_reads()
            ],
            "entries": [e.as_dict() for e in led.entries],
            "kernels": self.kernels.as_dict() if self.kernels is not None else None,
            **({} if self.lock_wait_s is None else {"lock_wait_s": self.lock_wait_s}),
        }


OVERHEAD_HEADER = [
    "case", "variant", "device", "casts", "copies", "moved", "x min bytes", "round trips",
    "GEMM kernels", "copy share",
]


def overhead_row(case: str, variant: str, device: str, report: OverheadReport) -> list[str]:
    """One summary row: what a check spent on casts and copies (and its GEMM class on CUDA)."""
    led, audit = report.ledger, report.kernels
    gemm, share = "-", "-"
    if audit is not None:
        kinds = [label for cls, label in (("tensor_core_gemm", "tensor cores"),
                                          (CUDA_CORE_GEMM, "CUDA cores")) if audit.time(cls) > 0]
        gemm = " + ".join(kinds) or "none"
        share = f"{100 * audit.share(COPY):.0f}%"
    return [case, variant, device, str(len(led.casts)), str(len(led.copies)),
            megabytes(led.bytes_moved), f"{report.cast_bytes_ratio:.2f}",
            str(len(led.round_trips)), gemm, share]


# Frames of the harness that calls a variant: skipped when finding the variant's own line.
_HARNESS = (__file__,)


def audit_variant(
    fn: Any, inputs: Mapping[str, torch.Tensor], params: Mapping[str, Any], *,
    kernels: bool = False, iterations: int = 5, min_bytes: float | None = None,
    by_value: bool = True, prepared: PreparedCall | None = None,
) -> OverheadReport:
    """Run ``fn(inputs, params)`` once under the cast ledger, and profile it on CUDA.

    ``inputs`` are already on the device. ``min_bytes`` is the op's declared minimum
    (:attr:`~numcheck.ops.registry.OpSpec.min_bytes`); without one, the inputs' bytes plus
    the outputs' bytes of that run. The declared one is a function of the shape alone, so
    the ratio does not move with a seed's data-dependent sizes (the indexer's context
    lengths decide how many KV pages exist, but its dense passes scale with max_context).

    ``prepared`` (a variant's one-time preparation, made before): ``fn`` is called, and
    profiled, on the inputs with the prepared tensors on top, which the ledger names as
    inputs (a per-call copy of a prepared weight is a copy of that input); the
    preparation's own ledger rides along in the report, apart.
    """
    call_inputs = dict(inputs) if prepared is None else prepared.call_inputs(dict(inputs))
    with torch.no_grad(), CastLedger(skip=_HARNESS, by_value=by_value,
                                     inputs=dict(call_inputs)) as ledger:
        out = fn(dict(call_inputs), params)
    if min_bytes is None:
        min_bytes = tensor_bytes(inputs) + tensor_bytes(out)
    min_bytes = int(min_bytes)
    audit = None
    if kernels:
        audit = profile_kernels(lambda: fn(dict(call_inputs), params), iterations=iterations,
                                skip=("numcheck/overhead/limits.py", "numcheck/overhead/kernels.py"))
    return OverheadReport(ledger, min_bytes, audit, prepared)


def overhead_violations(
    report: OverheadReport, budget: OverheadBudget, gates: set[str] | frozenset[str]
) -> list[Violation]:
    """The report held against the budget, for the gates in ``gates`` only."""
    found: list[Violation] = []
    led = report.ledger
    if CASTS_GATE.name in gates:
        if not budget.round_trips and led.round_trips:
            found.append(Violation(
                "casts", "round_trips", len(led.round_trips), 0,
                detail=led.describe_round_trip(led.round_trips[0]),
            ))
        if not budget.repeated_casts and led.repeated_casts:
            found.append(Violation(
                "casts", "repeated_casts", len(led.repeated_casts), 0,
                detail=led.describe_repeated_cast(led.repeated_casts[0]),
            ))
        if not budget.no_op_casts and led.no_ops:
            first = led.no_ops[0]
            found.append(Violation(
                "casts", "no_op_casts", len(led.no_ops), 0,
                detail=f"{first.describe()} changed nothing: drop it (or say copy=True is "
                "meant with no_op_casts = true)",
            ))
        over = report.gated_input_copies(budget)
        if over is not None:
            worst, input_limit, by_reference = over
            reads = [e for e in led.entries if e.input == worst.name]
            where = "; ".join(e.describe() for e in reads[:3])
            why = (f"; the op's reference reads it {input_limit:g} times" if by_reference
                   else "")
            found.append(Violation(
                "casts", "input_copies", worst.passes, input_limit,
                detail=f"input '{worst.name}' was read {worst.passes:.2f} times over by "
                f"casts/copies ({where}): convert or copy it once and reuse that (or a view "
                f"of it){why}",
            ))
        limit = budget.max_cast_bytes_ratio
        if limit is not None and report.cast_bytes_ratio > limit:
            big = led.largest()
            found.append(Violation(
                "casts", "cast_bytes_ratio", report.cast_bytes_ratio, limit,
                detail=f"{megabytes(led.bytes_moved)} moved by {len(led.entries)} casts/copies "
                f"vs the op's minimum {megabytes(report.min_bytes)}; largest: "
                f"{big.describe() if big else '-'}",
            ))
    audit = report.kernels
    if KERNELS_GATE.name in gates and audit is not None:
        slow = audit.of_class(CUDA_CORE_GEMM)
        if not budget.cuda_core_gemm and slow:
            k = slow[0]
            found.append(Violation(
                "kernels", "cuda_core_gemm", sum(r.calls for r in slow), 0,
                detail=f"{k.short_name} runs on CUDA cores, {k.time_us:.1f} us per call "
                f"({100 * audit.share(CUDA_CORE_GEMM):.0f}% of the op) at {k.where}",
            ))
        share = audit.share(COPY)
        if budget.max_copy_share is not None and share > budget.max_copy_share:
            k = audit.of_class(COPY)[0]
            big = led.largest()
            found.append(Violation(
                "kernels", "copy_share", share, budget.max_copy_share,
                detail=f"{audit.time(COPY):.1f} of {audit.total_us:.1f} us per call in cast/copy "
                f"kernels; top: {k.short_name} {k.time_us:.1f} us at {k.where}; largest "
                f"conversion: {big.describe() if big else '-'}",
            ))
    return found
