"""Evidence for the speedup gate (GPU): fresh runs, thresholds, an independent timer, -n 4.

Subcommands (``python -m benchmarks.speed.speed_gate ...`` from the repo root; the regression
run's ``independent``, ``speed-evidence`` and ``speed-xdist`` steps string them together):

    runs DIR --runs K [-n N] [--device cuda] [--slowed-min X]
        K fresh pytest processes of the perf suite (cases/perf.toml plus the evidence-only
        case with the ~5%-slowed variant, benchmarks/speed/slowed_variant.py), each writing
        DIR/<tag>-<i>.json (--numcheck-report) and .txt; one line per run: wall time,
        failed checks, slowed caught, round trip caught.
    table DIR [--tag run]
        per check over the runs: median speedup, min..max of the medians, the widest
        interval, timer, pairs, decision time, verdicts (for setting thresholds).
    independent REPORT.json [--json OUT]
        every gated check of a report timed again by an independent graph-replay timer
        (triton.testing.do_bench_cudagraph, or torch.cuda.CUDAGraph + events when triton is
        missing): ratio to numcheck's speedup (target: within 2%); then by a burst timer of
        alternating ~1 ms samples (numcheck's duty cycle, not its code); the SM clock and its
        event reasons sampled during the sustained timings (benchmarks/speed/clock_watch.py).
    xdist SERIAL.json PARALLEL.json
        -n N against serial: same verdicts, speedup intervals overlapping, lock waits.

``--tiny`` (CPU dry run of the plumbing): a tiny mHC case on the CPU instead of the suite.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.speed.clock_watch import ClockWatch

ROOT = Path(__file__).resolve().parents[2]

SLOWED_CASE = """
[perf-mhc-v4pro-t4k-slowed]
op = "mhc_pre"
description = "evidence only: bf16 and bf16 slowed by ~5% (benchmarks/speed/slowed_variant.py)"
preset = "{preset}"
shape = {{ tokens = {tokens} }}
devices = ["{device}"]
perf_only = true
variants = ["bf16", "bf16_slowed"]
expect.bf16_slowed = {{ fails = ["perf.speedup_min"], reason = "slowed by ~5% on purpose" }}
[perf-mhc-v4pro-t4k-slowed.perf]
{perf}
[perf-mhc-v4pro-t4k-slowed.perf.bf16]
speedup_min = {{ {device} = {threshold} }}
[perf-mhc-v4pro-t4k-slowed.perf.bf16_slowed]
speedup_min = {{ {device} = {threshold} }}
"""

SLOWED_ID = "perf-mhc-v4pro-t4k-slowed"
ROUNDTRIP = ("perf-mhc-v4pro-t4k-prefill", "bf16_roundtrip")


TINY_LINEAR = """
[tiny-linear-fp8]
op = "linear"
description = "plumbing: a low-precision variant with a prepared weight"
shape = {{ tokens = 8, in_features = 256, out_features = 128 }}
devices = ["{device}"]
perf_only = true
variants = ["fp8_block"]
perf = {{ max_time_s = 0.3 }}
"""


def cases_dir(work: Path, *, device: str, slowed_min: float, tiny: bool) -> Path:
    """A cases folder for one run: the shipped perf suite plus the slowed-variant case."""
    cases = work / "cases"
    if cases.exists():
        shutil.rmtree(cases)
    cases.mkdir(parents=True)
    if tiny:  # CPU dry run: one tiny case only, capped short
        text = SLOWED_CASE.format(preset="v4pro", tokens=8, device=device,
                                  threshold=slowed_min, perf="max_time_s = 0.3")
        text = text.replace('preset = "v4pro"\n', "").replace(
            "shape = { tokens = 8 }", "shape = { tokens = 8, hidden = 64 }")
        # and a variant that quantizes its weight at load time (the timer must prepare it)
        text += TINY_LINEAR.format(device=device)
    else:
        shutil.copy(ROOT / "cases" / "perf.toml", cases / "perf.toml")
        text = SLOWED_CASE.format(preset="v4pro", tokens=4096, device=device,
                                  threshold=slowed_min, perf="")
    (cases / "slowed.toml").write_text(text)
    return cases


def pytest_command(cases: Path, report: Path, *, device: str, workers: int) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "--numcheck", "--numcheck-perf",
           "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"),
           "--numcheck-device", device, "-p", "no:cacheprovider", "-p",
           "benchmarks.speed.slowed_variant", "-o", f"numcheck_cases={cases}", "-rxXs",
           "--numcheck-report", str(report), str(cases)]
    if workers:
        cmd[3:3] = ["-n", str(workers)]
    return cmd


def counts(report: dict[str, Any]) -> dict[str, Any]:
    """Failed checks, and whether the slowed variant and the round trip were caught."""
    recs = report["records"]
    failed = [r["id"] for r in recs if r["status"] in ("fail", "error")]

    def status(case: str, variant: str) -> str | None:
        return next((r["status"] for r in recs if r["case"] == case and r["variant"] == variant),
                    None)

    bf16_ok = status(SLOWED_ID, "bf16") == "pass"
    return {
        "failed": failed,
        "slowed_caught": status(SLOWED_ID, "bf16_slowed") == "xfail" and bf16_ok,
        "bf16_at_slowed_threshold": status(SLOWED_ID, "bf16"),
        "roundtrip": status(*ROUNDTRIP),
    }


def cmd_runs(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    cases = cases_dir(work, device=args.device, slowed_min=args.slowed_min, tiny=args.tiny)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}")
    start_all = time.monotonic()
    lines = []
    for i in range(1, args.runs + 1):
        longest = max((x["wall_s"] for x in lines), default=0.0)
        if args.budget_s and time.monotonic() - start_all + longest > args.budget_s:
            print(f"{args.tag}-{i}: not started: it would not end within the budget of "
                  f"{args.budget_s:g} s")
            break
        report = out / f"{args.tag}-{i}.json"
        cmd = pytest_command(cases, report, device=args.device, workers=args.workers)
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              check=False)
        wall = time.monotonic() - t0
        (out / f"{args.tag}-{i}.txt").write_text(proc.stdout + proc.stderr)
        if not report.exists():
            print(f"{args.tag}-{i}: rc={proc.returncode} {wall:.0f} s, no report; tail:\n"
                  + "\n".join((proc.stdout + proc.stderr).splitlines()[-15:]))
            continue
        c = counts(json.loads(report.read_text()))
        line = (f"{args.tag}-{i}: rc={proc.returncode} wall {wall:5.1f} s  failed checks "
                f"{len(c['failed'])}  slowed caught {'yes' if c['slowed_caught'] else 'NO'} "
                f"(bf16 at its threshold: {c['bf16_at_slowed_threshold']})  round trip "
                f"{c['roundtrip']}")
        if c["failed"]:
            line += "\n    failed: " + ", ".join(c["failed"])
        print(line, flush=True)
        lines.append({"run": i, "rc": proc.returncode, "wall_s": wall, **c})
    (out / f"{args.tag}-runs.json").write_text(json.dumps(lines, indent=1))
    if lines:
        n = len(lines)
        print(f"{args.tag}: {n} runs; runs with 0 failed checks: "
              f"{sum(not x['failed'] for x in lines)}/{n}; slowed caught "
              f"{sum(x['slowed_caught'] for x in lines)}/{n}; round trip caught "
              f"{sum(x['roundtrip'] == 'xfail' for x in lines)}/{n}; wall "
              f"{min(x['wall_s'] for x in lines):.0f}-{max(x['wall_s'] for x in lines):.0f} s")
    return 0


def load_reports(directory: Path, tag: str) -> list[dict[str, Any]]:
    paths = sorted(directory.glob(f"{tag}-*.json"), key=lambda p: p.stat().st_mtime)
    return [json.loads(p.read_text()) for p in paths if not p.name.endswith("-runs.json")]


def cmd_table(args: argparse.Namespace) -> int:
    reports = load_reports(Path(args.dir), args.tag)
    by: dict[str, list[dict[str, Any]]] = {}
    for rep in reports:
        for r in rep["records"]:
            if r.get("timing"):
                by.setdefault(r["id"], []).append(r)
    print(f"{len(reports)} runs. Per check: median of the runs' speedups, their min..max, "
          "the widest interval, timer, pairs x calls, decision time, verdicts")
    head = (f"{'check':58} {'median':>7} {'min..max':>13} {'widest CI':>17} {'timer':>17} "
            f"{'pairs':>8} {'time':>6}  min   verdicts")
    print(head)
    for cid, recs in by.items():
        t = [r["timing"] for r in recs]
        s = [x["speedup"] for x in t]
        widest = max(t, key=lambda x: x["ci_high"] - x["ci_low"])
        verdicts = ",".join(sorted({r["status"] for r in recs}))
        gate = t[0].get("speedup_min")
        print(f"{cid[:58]:58} {statistics.median(s):7.3f} {min(s):6.3f}..{max(s):6.3f} "
              f"[{widest['ci_low']:6.3f},{widest['ci_high']:6.3f}] {t[0].get('timer')!s:>17} "
              f"{int(statistics.median(x['rounds'] for x in t)):>4}x{t[0].get('calls_per_sample')!s:<3} "
              f"{statistics.median(x.get('timing_s') or 0 for x in t):5.2f}s "
              f"{'-' if gate is None else f'{gate:g}':>5} {verdicts}")
    return 0


def _bench(fn: Any) -> float:
    """Median ms of ``fn`` under graph replay, independently of numcheck's timer."""
    import torch

    try:
        from triton.testing import do_bench_cudagraph

        return float(do_bench_cudagraph(fn, rep=200, return_mode="median"))
    except ImportError:
        pass
    graph = _graph(fn, 10)
    times = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 10)
    return statistics.median(times)


def _merged(windows: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Two timings' clock windows as one: the lower median and minimum, every reason."""
    got = [w for w in windows if w]
    if not got:
        return None
    return {"median_mhz": min(w["median_mhz"] for w in got),
            "min_mhz": min(w["min_mhz"] for w in got),
            "reasons": sorted({x for w in got for x in w["reasons"]}),
            "throttled": any(w["throttled"] for w in got)}


def _graph(fn: Any, calls: int) -> Any:
    """A CUDA graph of ``calls`` back-to-back calls of ``fn`` (warmed up on a side stream)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def _burst(ref: Any, var: Any, ref_ms: float, var_ms: float, *, sample_ms: float = 1.0,
           pairs: int = 30) -> float:
    """The speedup in short alternating samples (about ``sample_ms`` each, ABBA order), the
    duty cycle numcheck's own timer keeps: median of the pairs' ratios. Written apart from
    numcheck's timer, so it checks that timer's code and not the regime it times in."""
    import torch

    graphs, calls = [], []
    for fn, ms in ((ref, ref_ms), (var, var_ms)):
        calls.append(max(1, round(sample_ms / max(ms, 1e-6))))
        graphs.append(_graph(fn, calls[-1]))
    ratios = []
    for i in range(pairs):
        got = [0.0, 0.0]
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graphs[k].replay()
            b.record()
            b.synchronize()
            got[k] = a.elapsed_time(b) / calls[k]
        ratios.append(got[0] / got[1])
    return statistics.median(ratios)


def _prepared(variant: Any, inputs: dict[str, Any], params: Any,
              device: str) -> dict[str, Any]:
    """The inputs a variant is called with: what its preparation made (a quantized weight,
    made once at load time, as the gate does: numcheck.prepare) added to the case's."""
    from numcheck.prepare import prepare

    made = prepare(variant, inputs, params, device)
    return inputs if made is None else {**inputs, **made.tensors}


def cmd_independent(args: argparse.Namespace) -> int:
    import torch

    from numcheck.cases import load_case_file
    from numcheck.check.run import CaseInputs
    from numcheck.inputs import to_device
    from numcheck.ops.registry import get_op, load_entry_points

    load_entry_points()
    from benchmarks.speed import slowed_variant
    from numcheck.ops import registry

    slowed_variant.pytest_numcheck_register(registry.Registrar("speed_gate.py"))
    report = json.loads(Path(args.report).read_text())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sources: dict[Path, Any] = {}
    cached: tuple[Any, Any] | None = None
    rows = []
    # The SM clock sampled during the timings (no thread without NVML: on the CPU).
    with ClockWatch(torch.cuda.current_device() if device == "cuda" else 0) as watch:
        for r in report["records"]:
            t = r.get("timing") or {}
            if (t.get("speedup_min") is None and not args.all) or args.k not in r["id"]:
                continue
            src = ROOT / r["source"] if r.get("source") else None
            if src is None or not src.exists():  # a run's cases folder outside the repo
                src = Path(args.cases) / Path(r.get("source") or "").name
            if src not in sources:
                sources[src] = {c.id: c for c in load_case_file(src)}
            case = sources[src][r["case"]]
            op = get_op(case.op)
            if cached is None or cached[0] is not case:  # records of one case come together
                cached = None
                if device == "cuda":
                    torch.cuda.empty_cache()
                cpu_inputs, _ = CaseInputs(op, case).get(case.seeds[0])
                cached = (case, to_device(cpu_inputs, device))
            inputs = cached[1]
            ref_v, var_v = op.variants[op.reference], op.variants[r["variant"]]
            ref, var = (functools.partial(v.fn, _prepared(v, inputs, case.params, device),
                                          case.params) for v in (ref_v, var_v))
            extra: dict[str, Any] = {}
            if device == "cuda":
                ms, clocks = [], {"ref": [], "var": []}
                for who, fn in (("ref", ref), ("var", var), ("ref", ref), ("var", var)):
                    t0 = watch.now()
                    ms.append(_bench(fn))
                    clocks[who].append(watch.window(t0, watch.now()))
                a1, b1, a2, b2 = ms
                ratio = statistics.median([a1 / b1, a2 / b2, a1 / b2, a2 / b1])
                burst = _burst(ref, var, statistics.median([a1, a2]), statistics.median([b1, b2]))
                extra = {"burst": burst, "burst_diff": burst / t["speedup"] - 1,
                         "clock_ref": _merged(clocks["ref"]), "clock_var": _merged(clocks["var"])}
            else:  # CPU dry run: plumbing only (each called once, as the timer would)
                ref(), var()
                ratio = float("nan")
            rows.append({"id": r["id"], "numcheck": t["speedup"], "ci": [t["ci_low"], t["ci_high"]],
                         "independent": ratio, "diff": ratio / t["speedup"] - 1, **extra})
            del inputs, ref, var
            clock = ""
            if extra.get("clock_ref") and extra.get("clock_var"):
                clock = (f"  SM {extra['clock_ref']['median_mhz']:.0f}/"
                         f"{extra['clock_var']['median_mhz']:.0f} MHz "
                         f"{','.join(extra['clock_var']['reasons']) or '-'}")
            burst_text = f"  burst {extra['burst']:.3f}" if extra else ""
            print(f"{r['id'][:64]:64} numcheck {t['speedup']:.3f} [{t['ci_low']:.3f}, "
                  f"{t['ci_high']:.3f}]  independent {ratio:.3f}  diff {rows[-1]['diff']:+.1%}"
                  f"{burst_text}{clock}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    within = [abs(x["diff"]) <= 0.02 for x in rows if x["independent"] == x["independent"]]
    print(f"independent graph-replay timer: {sum(within)}/{len(within)} gated checks within 2% "
          f"of numcheck's speedup")
    return 0


def cmd_xdist(args: argparse.Namespace) -> int:
    serial = {r["id"]: r for r in json.loads(Path(args.serial).read_text())["records"]}
    par_rep = json.loads(Path(args.parallel).read_text())
    par = {r["id"]: r for r in par_rep["records"]}
    agree = overlap = timed = 0
    for cid, s in serial.items():
        p = par.get(cid)
        if p is None:
            print(f"{cid}: missing in the parallel run")
            continue
        agree += s["status"] == p["status"]
        st, pt = s.get("timing"), p.get("timing")
        if st and pt:
            timed += 1
            ok = st["ci_low"] <= pt["ci_high"] and pt["ci_low"] <= st["ci_high"]
            overlap += ok
            if not ok or s["status"] != p["status"]:
                print(f"{cid[:60]:60} serial {s['status']} {st['speedup']:.3f} "
                      f"[{st['ci_low']:.3f}, {st['ci_high']:.3f}]  -n: {p['status']} "
                      f"{pt['speedup']:.3f} [{pt['ci_low']:.3f}, {pt['ci_high']:.3f}] "
                      f"worker {p.get('worker')}")
    env = par_rep["environment"]
    waits = [((r.get("timing") or {}).get("lock_wait_s") or 0.0) for r in par.values()]
    print(f"-n {env.get('workers')}: gpu_sharing {env.get('gpu_sharing')}, total lock wait "
          f"{env.get('lock_wait_s', 0):.1f} s (timed sections: max {max(waits, default=0):.2f} s)")
    print(f"-n vs serial: same verdict {agree}/{len(serial)}; speedup intervals overlap "
          f"{overlap}/{timed}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("runs")
    r.add_argument("dir")
    r.add_argument("--runs", type=int, default=3)
    r.add_argument("--tag", default="run")
    r.add_argument("-n", "--workers", type=int, default=0)
    r.add_argument("--device", default="cuda")
    r.add_argument("--slowed-min", type=float, default=1.08)
    r.add_argument("--budget-s", type=float, default=0.0,
                   help="start no new run after this many seconds (0: no limit)")
    r.add_argument("--tiny", action="store_true")
    t = sub.add_parser("table")
    t.add_argument("dir")
    t.add_argument("--tag", default="run")
    i = sub.add_parser("independent")
    i.add_argument("report")
    i.add_argument("--json")
    i.add_argument("--cases", default=str(ROOT / "cases"))
    i.add_argument("--all", action="store_true", help="ungated checks too")
    i.add_argument("-k", default="", help="only the checks whose id contains this")
    x = sub.add_parser("xdist")
    x.add_argument("serial")
    x.add_argument("parallel")
    args = ap.parse_args(argv)
    return {"runs": cmd_runs, "table": cmd_table, "independent": cmd_independent,
            "xdist": cmd_xdist}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
