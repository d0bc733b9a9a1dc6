"""A low-precision check's second reference: the simulated reference, and the operands.

A variant that computes its GEMM in FP8 or FP4 declares how (``Variant.quant``,
numcheck.precision.quant_declare) and is held to two references. The first is the FP32
golden, with budgets from its scheme's honest family: what the precision flip costs the op.
Quantization error is large there (FP8 e4m3: percents of an element), and a kernel bug hides
under it: a scale read from the wrong block, a scale grid read transposed, a promotion
skipped. The second reference takes the quantization out. For each seed this module:

1. **matches** each GEMM the variant recorded (numcheck.precision.quant_record) with the
   call the op's ``gemm_site`` makes on the same inputs, in order, and **checks each
   recorded operand** against the declared scheme and the operand the op hands its GEMM
   (numcheck.precision.quant_validate: layout, NaN, overflow, element format, scale format
   and value, rounding; an operand declared :class:`~numcheck.precision.quant_declare.AsStored`
   must be the op's own elements with a unit scale);
2. **recomputes the op** through its ``gemm_site``, each GEMM the exact product of the
   recorded operands, dequantized, in float64 (rounded once to float32 for the op's own
   epilogue): the **simulated reference**. Where the variant records nothing, numcheck's
   quantization of the op's operands by the declared scheme stands in, and the record says
   so. Each output's ``sim_rel_fro`` and ``sim_calc_diff`` against it are measured
   (numcheck.numerics.metrics.with_sim) and held to the budget the case gives them;
3. **bounds each recorded GEMM result** element by element: its distance to the product of
   its own operands over what an honest kernel of the declared accumulation and output may
   differ by (numcheck.precision.quant_bound): ``quant.sim_ratio``, a rule, at most 1. On a
   large GEMM the bound is taken on a sample of rows (:data:`BOUND_ROWS`) of a few matrices
   of the batch (:data:`BOUND_MATRICES`); the simulated outputs cover every element.

Violations of 1 and 3 are the ``quant`` gate's (numcheck.gates.QUANT_GATE).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from numcheck.numerics.verdict import Violation
from numcheck.ops.spec import Inputs, OpSpec, Outputs, Params
from numcheck.precision import one_thread
from numcheck.precision.quant_accumulate import simulated_reference
from numcheck.precision.quant_bound import compare_to_simulated
from numcheck.precision.quant_declare import AsStored, GemmQuant, Operand
from numcheck.precision.quant_formats import is_representable
from numcheck.precision.quant_record import RecordedGemm
from numcheck.precision.quant_scheme import Granularity
from numcheck.precision.quant_validate import validate
from numcheck.precision.quantize import Quantized

__all__ = ["BOUND_MATRICES", "BOUND_ROWS", "SimReport", "simulate", "take_rows"]

#: Rows of a GEMM result the bound is taken on (evenly spaced, first and last included):
#: the bound costs about twice numcheck's emulation of the GEMM itself.
BOUND_ROWS = 64
#: Matrices of a batched GEMM the bound is taken on (evenly spaced, first and last).
BOUND_MATRICES = 4
#: Operand findings described per check (the counts stay exact).
MAX_FINDINGS = 6


@dataclass
class SimReport:
    """What one seed's second reference measured (module docstring)."""

    #: The op's outputs recomputed on the operands (the simulated reference), by name.
    outputs: Outputs
    #: The declared quantization (GemmQuant.label).
    scheme: str
    #: "recorded" (the variant's own quantized operands) or "numcheck" (numcheck's
    #: quantization of the op's operands: the variant recorded none).
    operands: str
    #: GEMM calls the op's gemm_site makes, and how many the variant recorded.
    calls: int
    recorded: int
    #: The worst recorded GEMM element over its bound (None: no result recorded), and where.
    sim_ratio: float | None = None
    sim_ratio_at: str = ""
    #: Each operand finding, described (at most :data:`MAX_FINDINGS`), and their count.
    findings: list[str] = field(default_factory=list)
    n_findings: int = 0
    violations: list[Violation] = field(default_factory=list)


def take_rows(q: Quantized, rows: torch.Tensor) -> Quantized:
    """The rows ``rows`` of an operand as one of their own: the same elements and the same
    scale per element, the scale grid repeated per row (a block of rows cannot be cut)."""
    g = q.scheme.granularity
    br = g.block_shape(q.shape)[0]
    per_row = q.scales.to(torch.float32).repeat_interleave(br, dim=0)[: q.shape[0]]
    scheme = replace(q.scheme, granularity=Granularity(1, g.cols))
    idx = rows.to(q.values.device)
    return Quantized(q.values[idx], per_row[idx.to(per_row.device)].contiguous(), scheme,
                     q.global_scale)


def _spread(n: int, k: int) -> list[int]:
    """``k`` evenly spread indices of ``range(n)``, first and last included (all when
    ``n <= k``)."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _check_stored(q: Quantized, operand: AsStored, source: torch.Tensor) -> list[str]:
    """An operand the op holds in a narrow format must be used as it is."""
    found = []
    values = q.values.to(torch.float32)
    if tuple(values.shape) != tuple(source.shape):
        return [f"layout: elements of shape {list(values.shape)} where the op's operand is "
                f"{list(source.shape)}"]
    s = q.scales.to(torch.float32)
    first = float(s.reshape(-1)[0])
    if s.numel() != 1 or first != 1.0:
        found.append(f"scale_value: a stored {operand.element} operand is read with one unit "
                     f"scale, got scales of shape {list(s.shape)} (first {first:g})")
    differ = values != source.to(torch.float32)
    if bool(differ.any()):
        i = tuple(int(v) for v in differ.nonzero()[0])
        found.append(f"rounding: {int(differ.sum())} of {values.numel()} elements differ from "
                     f"the op's own (first at {i}: {float(values[i])!r} against "
                     f"{float(source[i])!r}): a stored operand must be multiplied as it is")
    bad = ~is_representable(values, operand.format)
    if bool(bad.any()):
        found.append(f"element_format: {int(bad.sum())} elements are not {operand.element} "
                     "values")
    return found


def _check_operand(q: Quantized, operand: Operand, source: torch.Tensor) -> list[str]:
    if isinstance(operand, AsStored):
        return _check_stored(q, operand, source)
    return [f.describe() for f in validate(q, operand, source).findings]


def _usable(q: Quantized, operand: Operand, shape: tuple[int, int]) -> bool:
    """A recorded operand the simulated reference can multiply (the declared grid)."""
    scheme = operand.scheme if isinstance(operand, AsStored) else operand
    return q.shape == shape and tuple(q.scales.shape) == scheme.scale_shape(shape)


@dataclass
class _Site:
    """One run of the op's gemm_site: each call's operands, matched with the recording."""

    quant: GemmQuant
    recorded: Sequence[RecordedGemm]
    sources: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    used: list[tuple[list[Quantized], list[Quantized]]] = field(default_factory=list)
    substituted: int = 0

    def gemm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        i = len(self.sources)
        self.sources.append((a, b))
        fa, fb = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
        rec = self.recorded[i] if i < len(self.recorded) else None
        qas: list[Quantized] = []
        qbs: list[Quantized] = []
        outs = []
        for j, (x, w) in enumerate(zip(fa, fb, strict=True)):
            wt = w.transpose(-1, -2)
            shapes = ((int(x.shape[0]), int(x.shape[1])), (int(wt.shape[0]), int(wt.shape[1])))
            if rec is not None and rec.batch == len(fa) and _usable(
                    rec.a[j], self.quant.a, shapes[0]) and _usable(rec.b[j], self.quant.b,
                                                                   shapes[1]):
                qa, qb = rec.a[j], rec.b[j]
            else:
                qa, qb = self.quant.operands(x, wt)
                self.substituted += 1
            qas.append(qa)
            qbs.append(qb)
            outs.append(simulated_reference(qa, qb))
        self.used.append((qas, qbs))
        y = torch.stack(outs).reshape(*a.shape[:-2], *outs[0].shape)
        return y.to(torch.float32)


@one_thread()
def simulate(op: OpSpec, quant: GemmQuant, inputs: Inputs, params: Params,
             recorded: Sequence[RecordedGemm], *, seed: int | None = None) -> SimReport:
    """The second reference of one seed (module docstring): ``inputs`` are the op's inputs
    on the device the variant ran on, ``recorded`` what it recorded in that call."""
    site = op.gemm_site
    if site is None:  # registration refuses a declared quantization without one
        raise ValueError(f"op {op.name!r} declares no gemm_site: no simulated reference")
    run = _Site(quant, recorded)
    outputs = site(inputs, params, run.gemm)
    report = SimReport(outputs=dict(outputs), scheme=quant.label,
                       operands="recorded" if recorded else "numcheck",
                       calls=len(run.sources), recorded=len(recorded))
    if recorded and len(recorded) != len(run.sources):
        report.violations.append(Violation(
            "quant", "recorded", abs(len(recorded) - len(run.sources)), 0, seed=seed,
            detail=f"the variant recorded {len(recorded)} GEMM(s), the op's gemm_site makes "
            f"{len(run.sources)}: record each GEMM once, in the site's order "
            "(numcheck.fp8.record_gemm)"))
    _check_operands(report, run, quant, recorded, seed)
    _bound(report, run, quant, recorded, seed)
    return report


def _check_operands(report: SimReport, run: _Site, quant: GemmQuant,
                    recorded: Sequence[RecordedGemm], seed: int | None) -> None:
    findings: list[str] = []
    for i, (rec, (a, b)) in enumerate(zip(recorded, run.sources, strict=False)):
        fa, fb = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
        if rec.batch != len(fa):
            findings.append(f"GEMM {i}: {rec.batch} matrices recorded, the op's GEMM has "
                            f"{len(fa)}")
            continue
        for j in range(rec.batch):
            for side, q, operand, src in (("a", rec.a[j], quant.a, fa[j]),
                                          ("b", rec.b[j], quant.b, fb[j].transpose(-1, -2))):
                for text in _check_operand(q, operand, src.to(q.values.device)):
                    where = f"GEMM {i}" + (f", matrix {j}" if rec.batch > 1 else "")
                    findings.append(f"{where}, operand {side} ({operand.label}): {text}")
    report.n_findings = len(findings)
    report.findings = findings[:MAX_FINDINGS]
    if findings:
        report.violations.append(Violation(
            "quant", "operands", len(findings), 0, seed=seed,
            detail=findings[0] + (f" (and {len(findings) - 1} more)" if len(findings) > 1
                                  else "")))


def _bound(report: SimReport, run: _Site, quant: GemmQuant, recorded: Sequence[RecordedGemm],
           seed: int | None) -> None:
    worst, at = -math.inf, ""
    for i, rec in enumerate(recorded):
        if rec.y is None or i >= len(run.used):
            continue
        qas, qbs = run.used[i]
        ys = rec.y.reshape(-1, *rec.y.shape[-2:])
        if ys.shape[0] != len(qas):
            continue  # a batch of another size: the operands finding says so
        for j in _spread(len(qas), BOUND_MATRICES):
            qa, qb, y = qas[j], qbs[j], ys[j]
            if tuple(y.shape) != (qa.shape[0], qb.shape[0]):
                report.violations.append(Violation(
                    "quant", "sim_ratio", math.inf, 1.0, seed=seed,
                    detail=f"GEMM {i}: a result of shape {list(y.shape)} for operands "
                    f"{list(qa.shape)} x {list(qb.shape)}^T"))
                continue
            rows = torch.tensor(_spread(qa.shape[0], BOUND_ROWS))
            cmp = compare_to_simulated(y[rows.to(y.device)], take_rows(qa, rows), qb,
                                       quant.accumulation, quant.out)
            if cmp.worst > worst:
                r, c = cmp.index
                worst = cmp.worst
                at = (f"GEMM {i}" + (f", matrix {j}" if len(qas) > 1 else "")
                      + f", element ({int(rows[r])}, {c})")
    if worst == -math.inf:
        return
    report.sim_ratio, report.sim_ratio_at = worst, at
    if not worst <= 1.0:
        report.violations.append(Violation(
            "quant", "sim_ratio", worst, 1.0, seed=seed,
            detail=f"at {at}: the GEMM result lies {worst:.3g}x past the bound an honest "
            f"kernel of {quant.accumulation.label} sums and a {quant.out_dtype} result stays "
            "within, against the exact product of its own operands"))
