"""Measure before budgeting: the error of every variant over many seeds, and budgets from it.

This package is the room of measuring budgets. This module is calibration itself; beside it:

- :mod:`numcheck.calibrate.heldout`: measured worst values against the case files' budgets
  (``python -m numcheck.heldout``);
- :mod:`numcheck.calibrate.honest`: two-sided calibration over an honest family of variants;
- :mod:`numcheck.calibrate.casewriter`: calibrated values written into case files in place;
- :mod:`numcheck.calibrate.onboard`: ``python -m numcheck onboard``, a GPU model's speed
  thresholds, determinism and batch invariance measured and written, its FP8 / FP4 families
  checked on held-out seeds.

Two front ends share calibration:

- ``pytest --numcheck --numcheck-calibrate[=N]`` (:mod:`numcheck.plugin.calibration`): the
  selected checks, with the ops that conftest hooks and entry points register, print (and
  with ``--numcheck-calibrate-write`` write) budget tables;
- ``python -m numcheck.calibrate`` (:func:`main`): the built-in ops over a cases folder,
  with a JSON file of every number (how docs/evidence/2026-11-29-*/calibration-*.json were made).

The measurement: each seed is one check of the variant (:func:`numcheck.check.run_check`,
numerics only, as the gate measures it) against a golden made on the spot from the op's
reference on the CPU (where the shipped goldens are made; the device of the run when the
reference cannot run on the CPU); every metric's worst value over the seeds is kept with the
seed that gave it. The golden is made on the spot rather than read from the goldens folder,
for the case's own seeds too: calibration then needs no golden (a new case is calibrated
before its goldens exist), and every seed, shipped or fresh, is measured the same way.

The policy (:func:`suggest_values`, docs/budgets.md) is pure: worst values in, budget
values out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from numcheck.calibrate.headroom import DEFAULT_HEADROOM, FLOORS, budget_value, round_up
from numcheck.devices import device_name
from numcheck.numerics.metric_names import ERROR_METRICS, SIM_METRICS, TOPK_LIMITS

if TYPE_CHECKING:
    from numcheck.cases import Case
    from numcheck.check.against_sim import SimReport
    from numcheck.check.result import SeedResult
    from numcheck.check.run import CaseInputs
    from numcheck.goldens.case_golden import CaseGolden
    from numcheck.numerics.budgets import VariantBudget
    from numcheck.ops.registry import OpSpec

# The headroom rule (numcheck.calibrate.headroom, docs/budgets.md): error budgets are 2x the
# worst measurement, max_err_ratio 1.25x (a bug at 2x the honest worst must fail), recall
# floors allow twice the worst miss (and at least two flips per row), tie bands are twice
# the widest band any flip needed; floors keep a budget measured at 0 from demanding
# bit-exactness.
#: Error metrics budgeted for every output (more when a case's budget gates more).
GATED = ("rel_fro", "calc_diff", "frac_outside")
#: Metrics where a lower value is worse (top-k agreement); every other one is an error.
LOWER_IS_WORSE = frozenset(TOPK_LIMITS)
#: Metrics added up over seeds rather than kept at their worst.
SUMMED = frozenset({"flips"})
#: The measured metric behind each budget key, where the names differ.
MEASURED_BY = {"tie_band_rel": "band_rel_needed"}
#: Where the fresh seeds start by default (the case's own seeds are small numbers).
FIRST_FRESH_SEED = 1000

#: One seed's measurements of one output: metric -> value.
Row = dict[str, float]


@dataclass(frozen=True)
class Worst:
    """The worst value of one metric, the seed that gave it, and the variant that ran."""

    value: float
    seed: int
    variant: str


#: Worst values of one variant (or a pool of variants): output -> metric -> Worst.
WorstTable = dict[str, dict[str, Worst]]


def is_worse(metric: str, new: float, old: float) -> bool:
    """Whether ``new`` is a worse measurement of ``metric`` than ``old``."""
    if math.isnan(new):
        return not math.isnan(old)
    return new < old if metric in LOWER_IS_WORSE else new > old


def fold(table: WorstTable, rows: Mapping[str, Row], *, seed: int, variant: str) -> None:
    """Fold one seed's rows (output -> metric -> value) into ``table``, keeping the worst."""
    for output, row in rows.items():
        kept = table.setdefault(output, {})
        for metric, value in row.items():
            old = kept.get(metric)
            if metric in SUMMED:
                total = value + (old.value if old is not None else 0.0)
                kept[metric] = Worst(total, seed, variant)
            elif old is None or is_worse(metric, value, old.value):
                kept[metric] = Worst(value, seed, variant)


def pool(tables: Iterable[WorstTable]) -> WorstTable:
    """The worst of several variants' tables, metric by metric: a budget for all of them."""
    pooled: WorstTable = {}
    for table in tables:
        for output, row in table.items():
            kept = pooled.setdefault(output, {})
            for metric, worst in row.items():
                old = kept.get(metric)
                if metric in SUMMED and old is not None:
                    kept[metric] = replace(old, value=old.value + worst.value)
                elif old is None or is_worse(metric, worst.value, old.value):
                    kept[metric] = worst
    return pooled


def calibration_seeds(case: Case, fresh: int, first_seed: int = FIRST_FRESH_SEED) -> tuple[int, ...]:
    """The case's own seeds, then ``fresh`` new ones from ``first_seed`` on (no repeats).
    A case on recorded inputs has its file's calls only (its seeds name them)."""
    if case.inputs.file is not None:
        return tuple(case.seeds)
    return tuple(dict.fromkeys([*case.seeds, *range(first_seed, first_seed + fresh)]))


# -- measuring (torch; no pytest) ----------------------------------------------------------


def reference_device(op: OpSpec, device: str) -> str:
    """Where the calibration reference runs: the CPU, where the shipped goldens are made,
    unless the op's reference cannot run there."""
    return "cpu" if "cpu" in op.variants[op.reference].devices else device


class References:
    """Goldens of one case made on the spot, one per seed, shared by the case's variants
    (the checks of one case run back to back)."""

    def __init__(self, op: OpSpec, case: Case, device: str) -> None:
        self.op = op
        self.case = case
        self.device = reference_device(op, device)
        self._made: dict[int, tuple[CaseGolden, CaseInputs]] = {}

    def get(self, seed: int) -> tuple[CaseGolden, CaseInputs]:
        """``(golden, inputs)`` of the one-seed case of ``seed``."""
        if seed not in self._made:
            from numcheck.check.make_golden import fresh_golden

            self._made[seed] = fresh_golden(self.op, replace(self.case, seeds=(seed,)),
                                            self.device)
        return self._made[seed]


def seed_rows(op: OpSpec, golden: CaseGolden, measured: SeedResult) -> dict[str, Row]:
    """Every output's measurements of one checked seed: its error metrics (as the gate
    computed them), and for a top-k output the agreement and the tie band its flips needed."""
    rows: dict[str, Row] = {}
    for output, m in measured.metrics.items():
        row = {metric: m.value(metric) for metric in (*ERROR_METRICS, *SIM_METRICS)
               if m.measured(metric)}
        row["nonfinite_mismatch"] = float(m.nonfinite.mask_mismatch + m.nonfinite.nan_mismatch)
        row.update(m.outside_counts())
        row.update(quant_row(measured.quant))
        rows[output] = row
    if op.topk is not None and measured.topk is not None:
        rows[op.topk.indices] = topk_row(golden, measured, op.topk.indices, op.topk.scores)
    return rows


# What a low-precision check's rules measured, kept beside each output's metrics so that
# calibration can refuse a member that breaks them (numcheck.calibrate.guard): its worst
# GEMM result over the bound an honest kernel stays within (``quant.sim_ratio``, at most 1)
# and its operands' findings against the declared scheme (``quant.operands``, none).
def quant_row(quant: SimReport | None) -> Row:
    """The rules' measurements of one seed's second reference (empty without one)."""
    if quant is None:
        return {}
    row = {"operand_findings": float(quant.n_findings)}
    if quant.sim_ratio is not None:
        row["sim_ratio"] = quant.sim_ratio
    return row


def topk_row(golden: CaseGolden, measured: SeedResult, idx: str, scores: str) -> Row:
    """Top-k agreement of one seed, and ``band_rel_needed``: the smallest relative tie band
    that explains every flip (max |margin| / the row's largest finite |golden score|, what a
    ``rel`` tie band is relative to)."""
    import torch

    from numcheck.numerics.topk import topk_agreement

    rep = measured.topk
    assert rep is not None and measured.outputs is not None
    row = {metric: rep.value(metric) for metric in TOPK_LIMITS}
    golden_idx = golden.output(measured.seed, idx).values
    golden_scores = golden.output(measured.seed, scores).values
    g = golden_scores.double()
    scale = torch.where(torch.isfinite(g), g.abs(), 0).amax(dim=1)
    zero = topk_agreement(golden_idx, measured.outputs[idx], golden_scores, band=0.0,
                          band_kind="rel", max_flips=10**9)
    row["band_rel_needed"] = max(
        (abs(f.margin) / float(scale[f.row]) if math.isfinite(f.margin) else math.inf
         for f in zero.unexplained), default=0.0)
    row["flips"] = float(zero.n_flips)
    return row


def measure_variant(
    op: OpSpec,
    case: Case,
    variant: str,
    device: str,
    seeds: Sequence[int],
    references: References,
    *,
    budget: VariantBudget | None = None,
) -> WorstTable:
    """Worst metric values of one variant over ``seeds``, each with its seed.

    Each seed is one check (:func:`numcheck.check.run_check`, numerics only) against the
    golden made on the spot, exactly as the gate measures it. ``budget`` gives the
    ``atol``/``rtol`` band of ``frac_outside`` and the tie band of the recall figures; by
    default the case's budget of the variant (a pooled variant the case does not run is
    measured with the budget of the variant it is pooled into).
    """
    from numcheck.check import run_check

    budgets = case.budgets if budget is None else {**case.budgets, variant: budget}
    table: WorstTable = {}
    for seed in seeds:
        golden, inputs = references.get(seed)
        one = replace(case, seeds=(seed,), budgets=budgets)
        result = run_check(op, one, variant, device, inputs, golden, max_flips=10**9,
                           keep_outputs=True)
        (measured,) = result.seeds
        fold(table, seed_rows(op, golden, measured), seed=seed, variant=variant)
    return table


def measure(
    case: Case, device: str, extra_seeds: int, first_seed: int = FIRST_FRESH_SEED
) -> dict[str, dict[str, float]]:
    """Worst metric values over seeds, per ``variant/output`` (the JSON file's layout)."""
    from numcheck.ops.registry import get_op

    op = get_op(case.op)
    seeds = calibration_seeds(case, extra_seeds, first_seed)
    refs = References(op, case, device)
    worst: dict[str, dict[str, float]] = {}
    for name in (op.reference, *case.variants):
        if device not in op.variants[name].devices:
            continue
        table = measure_variant(op, case, name, device, seeds, refs)
        for output, row in table.items():
            worst[f"{name}/{output}"] = {metric: w.value for metric, w in row.items()}
    return worst


# -- the policy (pure) --------------------------------------------------------------------


#: Two significant digits, rounded up (kept under its old name).
_round_up = round_up


def suggest_values(
    row: Mapping[str, float], *, topk: bool, k: int = 0, gated: Iterable[str] = GATED
) -> dict[str, float]:
    """Budget values for one output from its worst measurements (docs/budgets.md).

    Error metrics (``gated``: the default ones plus any the case's budget gates): the
    headroom rule's factor times the worst (2x; 1.25x for ``max_err_ratio``), rounded up to
    two significant digits, at least the floor (:mod:`numcheck.calibrate.headroom`: every key
    of a defaults row has one, so an exact family still gets each limit). A metric measured
    0 with no floor (against the simulated reference) is left out (the case keeps what it
    has), and so is a metric the check did not measure (``max_err_ratio`` of an op without a
    rounding envelope). Top-k: ``recall_min`` allows
    twice the worst miss and at least two swaps per row of ``k``; the tie recalls stay 1
    (every flip must be a near-tie); ``tie_band_rel`` is twice the widest near-tie.
    """
    cells: dict[str, float] = {}
    if topk:
        for metric in ("recall_min", "recall_mean"):
            if metric == "recall_min" or metric in gated:
                miss = 1.0 - row.get(metric, 1.0)
                floor = 1.0 - DEFAULT_HEADROOM * miss
                if k:
                    floor = min(floor, 1.0 - 2.0 / k)
                cells[metric] = math.floor(floor * 1e4) / 1e4
        cells["tie_recall_min"] = 1.0
        if "tie_recall_mean" in gated:
            cells["tie_recall_mean"] = 1.0
        cells["tie_band_rel"] = budget_value("tie_band_rel", row.get("band_rel_needed", 0.0))
        return cells
    # The simulated reference's metrics, wherever the check measured them (a variant with a
    # declared quantization): its own budget, calibrated on the scheme's family.
    for metric in dict.fromkeys([*GATED, *gated, *(m for m in SIM_METRICS if m in row)]):
        if metric not in ERROR_METRICS and metric not in SIM_METRICS:
            continue
        if metric not in row:
            continue  # not measured for this check (max_err_ratio without an envelope)
        worst = row.get(metric, 0.0)
        if worst == 0.0 and metric not in FLOORS:
            continue  # a simulated reference's metric measured 0: no floor, no limit
        cells[metric] = budget_value(metric, worst)
    return cells


def _merged_rows(runs: Sequence[Mapping[str, Any]], case: Case) -> dict[str, dict[str, float]]:
    """``variant/output`` -> the worst of every metric over the runs (devices)."""
    key = f"{case.op}::{case.id}"
    rows: dict[str, dict[str, float]] = {}
    for run in runs:
        for vo, row in run["cases"].get(key, {}).items():
            merged = rows.setdefault(vo, {})
            for metric, value in row.items():
                if metric not in merged or is_worse(metric, value, merged[metric]):
                    merged[metric] = value
    return rows


def suggest(runs: Sequence[Mapping[str, Any]], cases: Sequence[Case]) -> str:
    """TOML budget tables for every case, from calibration runs on one or more devices.

    Which table a value belongs to is the case's budget record's to say
    (:attr:`numcheck.numerics.budgets.VariantBudget.origins`): a variant that takes another's
    budgets (``budget_like``) gets no table of its own: it is held to its lender's
    (:func:`suggestion_findings` says when it would not fit); a key a coarse output inherits
    (mHC's bf16 ``y`` of a tf32 variant) is the storage class's table's, and is left out.
    """
    from numcheck.numerics.budget_origin import Inherited, lender_of

    lines: list[str] = []
    for case in cases:
        rows = _merged_rows(runs, case)
        k = int(case.params.get("index_topk", 0) or 0)
        for vo, row in rows.items():
            variant, output = vo.split("/")
            budget = case.budgets.get(variant)
            lender = lender_of(budget.origins) if budget is not None else None
            if lender is not None:
                note = f"# {case.id}: {variant} takes {lender}'s budgets"
                if note not in lines:
                    lines.append(note)
                continue
            cells = suggest_values(row, topk="recall_min" in row, k=k)
            taken = {m: o for m in cells if budget is not None
                     and isinstance(o := budget.origin(output, m), Inherited)}
            lines.append(f"[{case.id}.budget.{variant}.{output}]")
            lines += [f"{m} = {v:.4g}" for m, v in cells.items() if m not in taken]
            if taken:
                first = next(iter(taken.values()))
                lines.append(f"# {', '.join(taken)}: {first.variant}'s table on {output} "
                             f"({output} is stored in {first.storage})")
        lines.append("")
    return "\n".join(lines)


def suggestion_findings(runs: Sequence[Mapping[str, Any]], cases: Sequence[Case]) -> list[Any]:
    """Why :func:`suggest`'s tables must not be used as they are
    (:mod:`numcheck.calibrate.guard`): a variant whose measurements no honest implementation
    of its class produces, or a borrower that would not fit inside its lender's tables."""
    from numcheck.calibrate import guard
    from numcheck.numerics.budget_origin import lender_of
    from numcheck.numerics.budgets import sim_default_row
    from numcheck.ops.registry import get_op

    findings: list[guard.Finding] = []
    for case in cases:
        op = get_op(case.op)
        rows = _merged_rows(runs, case)
        k = int(case.params.get("index_topk", 0) or 0)
        by_variant: dict[str, dict[str, dict[str, float]]] = {}
        for vo, row in rows.items():
            variant, output = vo.split("/")
            by_variant.setdefault(variant, {})[output] = row
        for variant, table in by_variant.items():
            if variant == op.reference or variant not in op.variants:
                continue
            budget = case.budgets.get(variant)
            lender = lender_of(budget.origins) if budget is not None else None
            precision = op.variants[lender or variant].precision
            quant = op.variants[variant].quant
            findings += guard.suspects(case.id, lender or variant, precision,
                                       op.output_precision, {variant: table},
                                       lender={variant: lender} if lender else None,
                                       sims={variant: sim_default_row(quant.accumulation)
                                             if quant is not None else None})
            if lender and lender in by_variant:
                before = {o: suggest_values(r, topk="recall_min" in r, k=k)
                          for o, r in by_variant[lender].items()}
                widened = []
                for output, row in table.items():
                    mine = by_variant[lender].get(output)
                    if mine is None:
                        continue
                    both = dict(mine)
                    for metric, value in row.items():
                        if metric not in both or is_worse(metric, value, both[metric]):
                            both[metric] = value
                    after = suggest_values(both, topk="recall_min" in both, k=k)
                    # A budget that allows more: a lower recall floor, a higher limit.
                    widened += [(output, key, before[output][key], value)
                                for key, value in after.items() if key in before[output]
                                and is_worse(key, value, before[output][key])]
                if widened:
                    findings.append(guard.borrower_widens(
                        case.id, variant, lender, widened, precision))
    return findings


# -- python -m numcheck.calibrate ---------------------------------------------------------

#: Print --suggest's tables although the named variants look like bugs.
ACCEPT_OPTION = "--accept"


def _print_suggestion(runs: Sequence[Mapping[str, Any]], cases: Sequence[Case],
                      accept: Sequence[str]) -> int:
    """``--suggest``: the tables, or (exit 1) why they must not be used."""
    from numcheck.calibrate import guard

    accepted = [v.strip() for value in accept for v in value.split(",") if v.strip()]
    findings = suggestion_findings(runs, cases)
    stands = guard.blocking(findings, accepted, renew=False)
    if stands:
        names = ",".join(dict.fromkeys(f.variant for f in stands))
        print("python -m numcheck.calibrate --suggest: refused: a variant looks like a bug, not "
              "an honest implementation of its class (docs/budgets.md, \"What calibration "
              "refuses\"); no table printed:", file=sys.stderr)
        for f in stands:
            print(f"  - {f.head}", file=sys.stderr)
            for detail in f.details:
                print(f"      {detail}", file=sys.stderr)
        print(f"  Fix: keep the budgets and fix the variant; if it is honest and rounds where "
              f"its class's envelope does not, print anyway with {ACCEPT_OPTION} {names} (and "
              "keep the lines it adds beside the tables you paste)", file=sys.stderr)
        return 1
    print(suggest(runs, cases))
    for (case, variant), notes in guard.accepted_notes(findings, accepted,
                                                       ACCEPT_OPTION).items():
        print(f"# [{case}.budget.{variant}.*] accepted past the honest limits:")
        print("\n".join(f"#   {note}" for note in notes))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: measure the built-in ops' cases, or print tables from JSON runs.

    For your own ops (conftest hook or entry point) use ``pytest --numcheck
    --numcheck-calibrate`` instead: it registers them the way the gate does.
    """
    import torch

    from numcheck.cases import CaseFileError, load_cases

    parser = argparse.ArgumentParser(
        prog="python -m numcheck.calibrate", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Your own ops: pytest --numcheck --numcheck-calibrate (docs/extending.md).")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seeds", type=int, default=20, help="fresh seeds beyond the case's")
    parser.add_argument("--first-seed", type=int, default=FIRST_FRESH_SEED,
                        help="the fresh seeds are first-seed, first-seed + 1, ...")
    parser.add_argument("--cases", type=Path, default=Path("cases"))
    parser.add_argument("-k", dest="select", default="", help="only cases whose id contains this")
    parser.add_argument("--json", type=Path, help="write every number here too")
    parser.add_argument("--suggest", type=Path, nargs="+", metavar="JSON",
                        help="measure nothing: print budget tables from these calibration files "
                        "(refused, exit 1, where a variant's measurements look like a bug's)")
    parser.add_argument("--accept", action="append", default=[], metavar="V1,V2,...",
                        help="with --suggest: print the tables although these variants look "
                        "like bugs (as pytest's --numcheck-calibrate-accept; repeatable)")
    args = parser.parse_args(argv)
    try:
        cases = load_cases(args.cases)
    except CaseFileError as exc:
        print(f"python -m numcheck.calibrate: {exc.path}: {exc.problem}. Fix: run it from the "
              "folder that holds cases/, or pass --cases DIR; for a project with its own ops "
              "and ini keys, run pytest --numcheck --numcheck-calibrate there"
              if exc.path == args.cases else f"python -m numcheck.calibrate: {exc}",
              file=sys.stderr)
        return 2
    # Perf-only cases (production shapes, no golden) carry no numerics budget. A sweep's
    # points share one table and recorded inputs have no fresh seeds: both are calibrated
    # by pytest --numcheck --numcheck-calibrate (docs/cases.md).
    selected = [c for c in cases if args.select in c.id and not c.perf_only
                and c.sweep is None and c.inputs.file is None]
    if args.suggest:
        try:
            runs = [json.loads(p.read_text()) for p in args.suggest]
        except (OSError, ValueError) as exc:
            print(f"python -m numcheck.calibrate: --suggest: cannot read a calibration file "
                  f"({exc}). Fix: pass files written by --json", file=sys.stderr)
            return 2
        return _print_suggestion(runs, selected, args.accept)
    everything: dict[str, Any] = {}
    for case in selected:
        worst = measure(case, args.device, args.seeds, args.first_seed)
        everything[f"{case.op}::{case.id}"] = worst
        for key, row in worst.items():
            cells = "  ".join(f"{k}={v:.3g}" for k, v in row.items() if v)
            print(f"{case.op}::{case.id}  {key:<24} {cells}", flush=True)
    if args.json:
        meta = {"device": args.device, "torch": torch.__version__, "extra_seeds": args.seeds,
                "first_seed": args.first_seed}
        if args.device == "cuda":
            meta["device_name"] = device_name(args.device)
        args.json.write_text(json.dumps({"meta": meta, "cases": everything}, indent=1))
    return 0

