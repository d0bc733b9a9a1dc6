"""From a calibration run's timing runs to ``speedup_min`` proposals and the edits that write
them (pure: no torch, no pytest).

``pytest --numcheck --numcheck-perf --numcheck-calibrate-speed=K`` times each selected check
K times (:mod:`numcheck.plugin.calibration`); each check's runs arrive as a
:class:`~numcheck.calibrate.payloads.SpeedPayload`. Earlier runs' payloads
(``--numcheck-calibrate-with``) add runs on the same device class (``cpu`` or a GPU model:
a threshold is keyed by the model it was measured on), or a proposal of their own on another (:func:`combine_speed`); :func:`speed_section` turns them into the printed
proposals by :func:`numcheck.perf.thresholds.propose_speedup_min`'s rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from numcheck.calibrate.casewriter import Edit, format_number
from numcheck.calibrate.payloads import SpeedPayload
from numcheck.calibrate.plan import COLUMN, groups
from numcheck.perf.thresholds import BAND, QUANTILE, propose_speedup_min


def speed_section(
    payloads: Sequence[SpeedPayload], *, margin: float
) -> tuple[list[str], dict[str, list[Edit]]]:
    """The printed ``speedup_min`` proposals and the edits that write them."""
    if not payloads:
        return ["numcheck calibrate: no timed check ran (the reference is not gated)"], {}
    lines = [(f"# rule: lower speedup of the runs (the {QUANTILE:.0%} quantile; the slowest "
             f"run below 10 runs) x (1 - {margin:g}), rounded down to 3 digits; not gated "
             f"within {BAND:.0%} of 1; known-bad variants (expect perf.speedup_min) keep failing")]
    edits: dict[str, list[Edit]] = {}
    source = None
    for group in groups(payloads):
        if group.source != source:
            source = group.source
            lines += ["", f"# {source}"]
        for p in group.payloads:
            device, variant = p.on, p.variant
            speedups = [run.median for run in p.runs]
            proposal = propose_speedup_min(speedups, margin=margin,
                                           expected_fail=p.expected_fail, current=p.current)
            runs = " ".join(f"{s:.3f}" for s in speedups)
            lowest = min(run.low for run in p.runs)
            evidence = f"runs {runs}; lowest bound {lowest:.3f}"
            header = f"[{group.case}.perf.{variant}]"
            table = (group.case, "perf", variant)
            if proposal.threshold is None:
                lines.append(f"# {header} {proposal.reason}; {evidence}")
                if p.current is not None:
                    edits.setdefault(group.path, []).append(
                        Edit(table, "speedup_min", None, sub=device))
                continue
            lines.append(header)
            value = f"speedup_min = {{ {device} = {format_number(proposal.threshold)} }}"
            lines.append(f"{value:<{COLUMN + 4}}# {proposal.reason}; {evidence}")
            if not proposal.keep:
                edits.setdefault(group.path, []).append(
                    Edit(table, "speedup_min", proposal.threshold, sub=device))
    return lines, edits


def combine_speed(
    payloads: Sequence[SpeedPayload], earlier: Sequence[SpeedPayload]
) -> list[SpeedPayload]:
    """This run's timing payloads with earlier runs' of the same checks: runs on the same
    device class add up (more evidence for one threshold); another device class gets its
    own proposal, written into this run's case file."""
    out = list(payloads)
    same = {(p.check.source, p.check.case, p.variant, p.on): i
            for i, p in enumerate(out)}
    paths = {(p.check.source, p.check.case, p.variant): p for p in out}
    for p in earlier:
        key = (p.check.source, p.check.case, p.variant)
        if key not in paths:
            continue  # not selected in this run
        both = (*key, p.on)
        if both in same:
            i = same[both]
            out[i] = replace(out[i], runs=(*out[i].runs, *p.runs))
        else:
            here = paths[key].check
            same[both] = len(out)
            out.append(replace(p, check=replace(p.check, path=here.path, nodeid=here.nodeid)))
    return out
