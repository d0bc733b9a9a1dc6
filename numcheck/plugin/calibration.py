"""The calibration mode of ``pytest --numcheck``: measure the selected checks, suggest
budgets and speed thresholds, and (on request) write them into the case files.

Registered as a plugin by :mod:`numcheck.plugin` when a calibration option is on. The
checks are collected and selected exactly as in a gating run (paths, ``-k``, the device,
ops from conftest hooks and entry points); each check then measures instead of gating
(:meth:`CalibrationMode.run`), so a variant over its current budget does not fail the run.
What a check measured travels on its test report (as the gate's records do, so pytest-xdist
works) and the controller prints the suggestions at the end:

- numerics (:mod:`numcheck.calibrate`): worst values over the case's seeds and N fresh ones,
  against the reference recomputed on the CPU, turned into budget tables by the headroom
  policy; pools budget several variants as one;
- speed (:mod:`numcheck.perf.thresholds`): K timing runs per check, turned into
  ``speedup_min`` proposals for this device class.

Writing goes through :mod:`numcheck.calibrate.casewriter`, which names this run's command once in each
written file's header (``# set by: pytest ... (<date>, <device>, torch <version>)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from numcheck.calibrate import (
    LOWER_IS_WORSE,
    MEASURED_BY,
    References,
    Worst,
    WorstTable,
    calibration_seeds,
    measure_variant,
    pool,
    suggest_values,
)
from numcheck.calibrate.casewriter import CaseWriteError, Change, Edit, format_number, write_edits
from numcheck.numerics.budgets import ERROR_METRICS
from numcheck.perf.thresholds import BAND, QUANTILE, propose_speedup_min
from numcheck.plugin.calibration_options import RUN_FORMAT, Settings
from numcheck.plugin.options import (
    CALIBRATE_POOL_OPTION,
    CALIBRATE_WITH_OPTION,
    CALIBRATE_WRITE_OPTION,
)

#: ``report.user_properties`` name of a check's measurements (a list of plain dicts).
PROPERTY = "numcheck_calibration"
#: Width of ``key = value`` before the comment in printed tables.
_COLUMN = 28


class CalibrationMode:
    """Run-wide calibration state: the per-case references, and what the checks measured."""

    KEY = pytest.StashKey["CalibrationMode"]()

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.payloads: list[dict[str, Any]] = []
        #: Collection order: the tables are printed in it, whatever order checks end in.
        self.order: list[str] = []
        self._refs: References | None = None
        #: Set at session finish when the selected checks all skipped (exit status 1).
        self.nothing_measured = False

    # -- one check ----------------------------------------------------------------------

    def run(self, item: Any, state: Any) -> None:
        """Measure one (case, variant, device) check and keep what it measured on the item."""
        from numcheck.ops.registry import get_op

        case, variant, device = item.case, item.variant, item.device
        op = get_op(case.op)
        common = {"op": case.op, "case": case.id, "source": item._source(),
                  "path": str(Path(item.path).resolve()), "device": device,
                  "nodeid": item.nodeid}
        payloads: list[dict[str, Any]] = []
        if self.settings.fresh is not None and not case.perf_only:
            payloads += self._numerics(op, case, variant, device, common)
        if self.settings.speed_runs is not None and variant != op.reference:
            payloads.append(self._speed(op, case, variant, device, state, common))
        item.numcheck_calibration = payloads

    def _references(self, op: Any, case: Any, device: str) -> References:
        # Checks of one case run back to back: keep only the current case's references.
        if self._refs is None or self._refs.case is not case:
            self._refs = References(op, case, device)
        return self._refs

    def _numerics(self, op: Any, case: Any, variant: str, device: str,
                  common: dict[str, Any]) -> list[dict[str, Any]]:
        seeds = calibration_seeds(case, self.settings.fresh or 0, self.settings.first_seed)
        refs = self._references(op, case, device)
        budget = case.budgets[variant]
        topk = op.topk.indices if op.topk is not None else None
        gated = {name: sorted(ob.limits) for name, ob in budget.outputs.items()}
        if budget.topk is not None and topk is not None:
            gated[topk] = sorted(budget.topk.limits)
        expect = case.expect.get(variant)
        base = {**common, "kind": "numerics", "seeds": list(seeds),
                "k": int(case.params.get("index_topk", 0) or 0), "topk_output": topk,
                "gated": gated, "reference": op.reference, "reference_device": refs.device,
                "budget_like": case.budget_like.get(variant)}
        out = [{**base, "variant": variant, "runs": True,
                "expect": list(expect.fails) if expect else [],
                "table": _table_out(measure_variant(op, case, variant, device, seeds, refs))}]
        # Pool members the case does not run are measured with this variant's budget.
        for member in self.settings.pools.get(variant, ()):
            if member == variant or member in case.variants or member == op.reference:
                continue
            if device not in op.variants[member].devices:
                continue
            table = measure_variant(op, case, member, device, seeds, refs, budget=budget)
            out.append({**base, "variant": member, "runs": False, "expect": [],
                        "table": _table_out(table)})
        return out

    def _speed(self, op: Any, case: Any, variant: str, device: str, state: Any,
               common: dict[str, Any]) -> dict[str, Any]:
        from numcheck.perf.measure import measure_perf
        from numcheck.prepare import Preparations

        cpu_inputs, _ = state.inputs_for(op, case).get(case.seeds[0])
        # One-time preparations are made once for the K runs, as for one check.
        preparer = Preparations().at(case.seeds[0])
        points: list[list[float]] = []
        for _ in range(self.settings.speed_runs or 0):
            # The same call as a gated timing, K times; only the point speedups and their
            # intervals are kept (``estimate``; ``speedup`` in timing layers that name it so).
            with state.sections.hold(exclusive=True):  # timing holds the device alone
                result = measure_perf(op, case, variant, device, cpu_inputs, preparer=preparer)
            est = getattr(result, "estimate", None) or result.speedup
            points.append([est.median, est.low, est.high])
        expect = case.expect.get(variant)
        return {**common, "kind": "speed", "variant": variant, "runs": points,
                "expected_fail": bool(expect and "perf.speedup_min" in expect.fails),
                "current": case.perf[variant].threshold(device) if variant in case.perf
                else None}

    # -- hooks: measurements travel on the reports to the controller ---------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.order:
            self.order = list(ids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """A pool naming a variant the op does not have is a usage error, before any run."""
        from numcheck.ops.registry import get_op

        self.order = [item.nodeid for item in session.items]
        for item in session.items:
            case = getattr(item, "case", None)
            members = self.settings.pools.get(getattr(item, "variant", ""), ())
            if case is None or not members:
                continue
            op = get_op(case.op)
            for member in members:
                if member not in op.variants:
                    raise pytest.UsageError(
                        f"{CALIBRATE_POOL_OPTION} {item.variant}: op {op.name!r} has no variant "
                        f"{member!r} (its variants: {', '.join(op.variants)}). Fix: register it "
                        "(pytest_numcheck_register) or drop it from the pool")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        report = yield
        payloads = getattr(item, "numcheck_calibration", None)
        if payloads and call.when == "call":
            report.user_properties.append((PROPERTY, payloads))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from numcheck.plugin.workers import is_worker

        if is_worker(self.config):
            return
        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, list):
                self.payloads.extend(value)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Exit 0 when the selected checks were measured: measuring is not gating, so a
        value over its current budget fails nothing. A real error keeps its own non-zero
        status (a variant that raised fails its item; a bad case file is a collection error;
        no check selected is a usage error); selected checks that all skipped measured
        nothing, which a calibration step in a script must not take for success."""
        from numcheck.plugin.workers import is_worker

        if is_worker(self.config) or self.config.option.collectonly:
            return
        if exitstatus == 0 and not self.payloads:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self.nothing_measured = True

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from numcheck.plugin.workers import is_worker

        if is_worker(self.config):
            return
        tr = terminalreporter
        if not self.payloads:
            status = "; exit status 1" if self.nothing_measured else ""
            tr.write_line("numcheck calibrate: no check measured anything (all skipped, "
                          f"deselected or failed){status}")
            return
        order = {nodeid: i for i, nodeid in enumerate(self._order())}
        payloads = sorted(self.payloads, key=lambda p: order.get(p["nodeid"], len(order)))
        edits: dict[str, list[Edit]] = {}
        numerics = [p for p in payloads if p["kind"] == "numerics"]
        earlier = [p for p in self.settings.earlier if p["kind"] == "numerics"]
        speed = combine_speed([p for p in payloads if p["kind"] == "speed"],
                              [p for p in self.settings.earlier if p["kind"] == "speed"])
        sections = []
        if self.settings.fresh is not None:
            sections.append((f"suggested budgets ({_device(numerics)}, torch {_torch()})",
                             numerics_section(numerics, self.settings, earlier)))
        if self.settings.speed_runs is not None:
            runs = self.settings.speed_runs
            sections.append((f"suggested speedup_min ({_device(speed)}, {runs} runs each)",
                             speed_section(speed, self.settings)))
        for title, (lines, found) in sections:
            tr.write_sep("=", f"numcheck calibrate: {title}")
            for line in lines:
                tr.write_line(line)
            _merge(edits, found)
        if self.settings.json_path is not None:
            save_run(self.settings.json_path, payloads)
            tr.write_line(f"numcheck calibrate: measurements saved to {self.settings.json_path} "
                          f"(pool them into another run with {CALIBRATE_WITH_OPTION} PATH)")
        if not self.settings.write:
            tr.write_line(f"numcheck calibrate: nothing written; {CALIBRATE_WRITE_OPTION} writes "
                          "these values into the case files")
            return
        if not edits:
            tr.write_line("numcheck calibrate: no value to write")
        provenance = (_command(self.config), _when(payloads))
        for path, file_edits in edits.items():
            shown = _rel(Path(path), self.config.rootpath)
            try:
                changes, skipped = write_edits(Path(path), file_edits, provenance)
            except CaseWriteError as exc:
                tr.write_line(f"numcheck calibrate: {exc}: nothing written to it")
                continue
            tr.write_line(f"numcheck calibrate: {shown}: {len(changes)} value(s) changed")
            for change in changes:
                tighter = "  (tighter than before)" if _tighter(
                    change) else ""
                tr.write_line(f"  {change.describe()}{tighter}")
            for skip in skipped:
                tr.write_line(f"  not written: {skip.describe()}")

    def _order(self) -> list[str]:
        return self.order


# -- from measurements to tables (pure) ----------------------------------------------------


def _table_out(table: WorstTable) -> dict[str, dict[str, list[Any]]]:
    return {o: {m: w.as_list() for m, w in row.items()} for o, row in table.items()}


def _table_in(data: dict[str, dict[str, list[Any]]]) -> WorstTable:
    return {o: {m: Worst.from_list(w) for m, w in row.items()} for o, row in data.items()}


@dataclass
class _Group:
    """The payloads of one case file's case, in order."""

    source: str
    path: str
    case: str
    payloads: list[dict[str, Any]]


def _groups(payloads: list[dict[str, Any]]) -> Iterator[_Group]:
    groups: dict[tuple[str, str], _Group] = {}
    for p in payloads:
        key = (p["path"], p["case"])
        if key not in groups:
            groups[key] = _Group(p["source"], p["path"], p["case"], [])
        groups[key].payloads.append(p)
    return iter(groups.values())


def numerics_section(
    payloads: list[dict[str, Any]], settings: Settings,
    earlier: list[dict[str, Any]] | None = None,
) -> tuple[list[str], dict[str, list[Edit]]]:
    """The printed budget tables and the edits that write them, per case file.

    ``earlier``: numerics payloads of earlier runs (``--numcheck-calibrate-with``, e.g. the
    same cases on a GPU); a variant's budget then covers its worst on every device.
    """
    if not payloads:
        return ["numcheck calibrate: no numerics check ran"], {}
    first = payloads[0]
    fresh = settings.fresh or 0
    span = f" ({settings.first_seed}..{settings.first_seed + fresh - 1})" if fresh else ""
    lines = [
        (f"# seeds: each case's own + {fresh} fresh{span}; reference: {first['reference']} "
         f"recomputed on {first['reference_device']} (no golden read)"),
        ("# policy (docs/budgets.md): errors 2x the worst, rounded up to 2 digits; recall "
         "floors 2x the worst miss; tie bands 2x the widest near-tie"),
    ]
    before: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for p in earlier or []:
        before.setdefault((p["source"], p["case"], p["variant"]), []).append(p)
    edits: dict[str, list[Edit]] = {}
    source = None
    for group in _groups(payloads):
        if group.source != source:
            source = group.source
            lines += ["", f"# {source}"]
        measured: dict[str, list[dict[str, Any]]] = {}
        for p in group.payloads:
            measured.setdefault(p["variant"], []).append(p)
        for variant, found in list(measured.items()):
            found += before.get((group.source, group.case, variant), [])
        # A variant that takes another's budgets (budget_like) shares that one table: its
        # measurements are pooled into the lender's suggestion, never written as copies.
        borrowers: dict[str, list[str]] = {}
        for p in group.payloads:
            if p["runs"] and p.get("budget_like") and not _known_bad(p):
                borrowers.setdefault(p["budget_like"], []).append(p["variant"])
        for p in group.payloads:
            if not p["runs"]:
                continue
            variant = p["variant"]
            known_bad = _known_bad(p)
            if known_bad:
                lines.append(f"# {group.case}: {variant} is known-bad (expect: "
                             f"{', '.join(known_bad)}): not budgeted")
                continue
            lender = p.get("budget_like")
            if lender:
                pooled = ("its measurements are pooled into that table" if lender in measured
                          else f"select {lender} too to budget both: nothing suggested")
                lines.append(f"# {group.case}: {variant} takes {lender}'s budgets "
                             f"(budget_like): {pooled}")
                continue
            members = _pool_of(variant, settings.pools, measured)
            members += [b for b in borrowers.get(variant, []) if b not in members]
            parts = [q for m in members for q in measured[m] if _informative(q)]
            if not parts:
                lines.append(f"# {group.case}: {variant} is the reference, computed on "
                             f"{p['device']} like the one it is compared with: nothing to "
                             "budget (run on the GPU to budget its drift there)")
                continue
            devices = {q["device"] for q in parts}
            labels = [_label(q, devices) for q in parts]
            table = pool(_relabel(_table_in(q["table"]), label)
                         for q, label in zip(parts, labels, strict=True))
            if len(devices) == 1 and _exact(table):
                lines.append(f"# {group.case}: {variant} equals the reference bit for bit on "
                             f"{p['device']}: these are floors; measure the devices it is gated "
                             f"on too ({CALIBRATE_WITH_OPTION})")
            for output, row in table.items():
                topk = output == p["topk_output"]
                cells = suggest_values({m: w.value for m, w in row.items()}, topk=topk,
                                       k=p["k"], gated=p["gated"].get(output, ()))
                header = f"[{group.case}.budget.{variant}.{output}]"
                lines.append(header if len(parts) == 1 else
                             f"{header}  # pooled: worst of {', '.join(labels)}")
                for key, value in cells.items():
                    worst = row.get(MEASURED_BY.get(key, key))
                    lines.append(_cell(key, value, _worst_text(key, worst, len(parts) > 1)))
                    edits.setdefault(group.path, []).append(
                        Edit((group.case, "budget", variant, output), key, value))
    return lines, edits


def _known_bad(payload: dict[str, Any]) -> list[str]:
    """The expected failures of a known-bad variant that name one of its outputs."""
    return [f for f in payload["expect"] if f.partition(".")[0] in payload["table"]]


def _exact(table: WorstTable) -> bool:
    """Every error metric 0 on every seed (tf32 on a CPU, which computes it in IEEE fp32)."""
    values = [w.value for row in table.values() for m, w in row.items() if m in ERROR_METRICS]
    return bool(values) and not any(values)


def _informative(payload: dict[str, Any]) -> bool:
    """False for the reference compared with itself on the device it was computed on."""
    return not (payload["variant"] == payload["reference"]
                and payload["reference_device"] == payload["device"])


def _label(payload: dict[str, Any], devices: set[str]) -> str:
    return payload["variant"] if len(devices) == 1 else f"{payload['variant']} {payload['device']}"


def _relabel(table: WorstTable, label: str) -> WorstTable:
    return {o: {m: replace(w, variant=label) for m, w in row.items()} for o, row in table.items()}


def _pool_of(variant: str, pools: dict[str, tuple[str, ...]],
             tables: dict[str, Any]) -> list[str]:
    """The measured variants budgeted together with ``variant`` (itself first)."""
    for members in pools.values():
        if variant in members:
            return [variant, *(m for m in members if m != variant and m in tables)]
    return [variant]


def _worst_text(key: str, worst: Worst | None, pooled: bool) -> str:
    if worst is None:
        return ""
    what = "widest near-tie" if key == "tie_band_rel" else "worst"
    if worst.value == (1.0 if key in LOWER_IS_WORSE else 0.0):
        return f"{what} {worst.value:g} on every seed"
    where = f"{worst.variant}, seed {worst.seed}" if pooled else f"seed {worst.seed}"
    return f"{what} {worst.value:.3g} ({where})"


def _cell(key: str, value: float, comment: str) -> str:
    text = f"{key} = {format_number(value)}"
    return f"{text:<{_COLUMN}}# {comment}" if comment else text


def speed_section(
    payloads: list[dict[str, Any]], settings: Settings
) -> tuple[list[str], dict[str, list[Edit]]]:
    """The printed ``speedup_min`` proposals and the edits that write them."""
    if not payloads:
        return ["numcheck calibrate: no timed check ran (the reference is not gated)"], {}
    margin = settings.margin
    lines = [(f"# rule: lower speedup of the runs (the {QUANTILE:.0%} quantile; the slowest "
             f"run below 10 runs) x (1 - {margin:g}), rounded down to 3 digits; not gated "
             f"within {BAND:.0%} of 1; known-bad variants (expect perf.speedup_min) keep failing")]
    edits: dict[str, list[Edit]] = {}
    source = None
    for group in _groups(payloads):
        if group.source != source:
            source = group.source
            lines += ["", f"# {source}"]
        for p in group.payloads:
            device, variant = p["device"], p["variant"]
            speedups = [run[0] for run in p["runs"]]
            proposal = propose_speedup_min(speedups, margin=margin,
                                           expected_fail=p["expected_fail"],
                                           current=p["current"])
            runs = " ".join(f"{s:.3f}" for s in speedups)
            lowest = min(run[1] for run in p["runs"])
            evidence = f"runs {runs}; lowest bound {lowest:.3f}"
            header = f"[{group.case}.perf.{variant}]"
            table = (group.case, "perf", variant)
            if proposal.threshold is None:
                lines.append(f"# {header} {proposal.reason}; {evidence}")
                if p["current"] is not None:
                    edits.setdefault(group.path, []).append(
                        Edit(table, "speedup_min", None, sub=device))
                continue
            lines.append(header)
            value = f"speedup_min = {{ {device} = {format_number(proposal.threshold)} }}"
            lines.append(f"{value:<{_COLUMN + 4}}# {proposal.reason}; {evidence}")
            if not proposal.keep:
                edits.setdefault(group.path, []).append(
                    Edit(table, "speedup_min", proposal.threshold, sub=device))
    return lines, edits


def _tighter(change: Change) -> bool:
    """A written value that demands more than the file did (a lower error budget, a higher
    recall floor or speed threshold)."""
    if change.old is None or change.new is None:
        return False
    parts = change.where.split(".")
    raises = parts[-1] in LOWER_IS_WORSE or "speedup_min" in parts
    return change.new > change.old if raises else change.new < change.old


def combine_speed(
    payloads: list[dict[str, Any]], earlier: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """This run's timing payloads with earlier runs' of the same checks: runs on the same
    device class add up (more evidence for one threshold); another device class gets its
    own proposal, written into this run's case file."""
    out = [dict(p, runs=list(p["runs"])) for p in payloads]
    same = {(p["source"], p["case"], p["variant"], p["device"]): p for p in out}
    paths = {(p["source"], p["case"], p["variant"]): p for p in out}
    for p in earlier:
        key = (p["source"], p["case"], p["variant"])
        if key not in paths:
            continue  # not selected in this run
        if (*key, p["device"]) in same:
            same[(*key, p["device"])]["runs"] += p["runs"]
        else:
            here = paths[key]
            adopted = dict(p, path=here["path"], nodeid=here["nodeid"], runs=list(p["runs"]))
            same[(*key, p["device"])] = adopted
            out.append(adopted)
    return out


def save_run(path: Path, payloads: list[dict[str, Any]]) -> None:
    """This run's measurements as JSON, for ``--numcheck-calibrate-with`` elsewhere."""
    import json

    import torch

    data = {"numcheck_calibration": RUN_FORMAT, "torch": torch.__version__,
            "devices": sorted({p["device"] for p in payloads}), "payloads": payloads}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def _merge(into: dict[str, list[Edit]], more: dict[str, list[Edit]]) -> None:
    for path, found in more.items():
        into.setdefault(path, []).extend(found)


def _command(config: pytest.Config) -> str:
    """This run's command line, as the case file's header names it."""
    import shlex

    return "pytest " + shlex.join(config.invocation_params.args)


def _when(payloads: list[dict[str, Any]]) -> str:
    """``2026-12-03, cpu, torch 2.13.0+cpu``: the date, the devices measured, torch."""
    from datetime import date

    devices = ", ".join(sorted({p["device"] for p in payloads})) or "-"
    return f"{date.today().isoformat()}, {devices}, torch {_torch()}"


def _device(payloads: list[dict[str, Any]]) -> str:
    return payloads[0]["device"] if payloads else "-"


def _torch() -> str:
    import torch

    return torch.__version__


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
