"""Where a run of numcheck's own tests spends its time: a pytest plugin that writes, for each
process of the run (pytest-xdist's controller and workers), when it started, finished
collecting, and began and ended each test, with that process's CPU seconds and those of the
children it waited for; and a summary of what it wrote.

    rm -rf /tmp/prof
    NUMCHECK_SUITE_PROFILE=/tmp/prof pytest -q -n 2 -m "not slow" -p benchmarks.cost.suite_profile
    python -m benchmarks.cost.suite_profile /tmp/prof [--top 25]

CPU seconds are the process's own (user + system, ``resource.getrusage``), so a test that
waits for a subprocess, a lock or a sleep shows wall time without CPU; a test's children are
counted once they have been waited for. docs/testing.md ("Where the test command's time
goes") quotes it. Without NUMCHECK_SUITE_PROFILE the plugin does nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections import Counter
from pathlib import Path
from typing import Any

#: The folder the plugin writes one ``<pid>.jsonl`` into per process.
ENV = "NUMCHECK_SUITE_PROFILE"


def _event(kind: str, **fields: Any) -> None:
    folder = os.environ.get(ENV)
    if not folder:
        return
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    line = {"event": kind, "t": time.time(), "cpu": own.ru_utime + own.ru_stime,
            "children": children.ru_utime + children.ru_stime, **fields}
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / f"{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(line) + "\n")


def pytest_configure(config: Any) -> None:
    _event("start", worker=getattr(config, "workerinput", {}).get("workerid", "controller"))


def pytest_collection_finish(session: Any) -> None:
    _event("collected", tests=len(session.items))


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _event("test", nodeid=nodeid)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    _event("done", nodeid=nodeid)


def pytest_unconfigure(config: Any) -> None:
    _event("end")


def summary(folder: Path, top: int = 25) -> list[str]:
    """The summary's lines: each process's start-up, tests, children and idle end, then the
    test files and the tests that took the most CPU (their own and their children's)."""
    lines, tests = [], []
    for path in sorted(folder.glob("*.jsonl")):
        events = [json.loads(line) for line in path.read_text().splitlines()]
        first, last = events[0], events[-1]
        collected = next((e for e in events if e["event"] == "collected"), None)
        started = {}
        for e in events:
            if e["event"] == "test":
                started = e
            elif e["event"] == "done" and first["worker"] != "controller":
                tests.append((e["nodeid"], e["t"] - started["t"],
                              e["cpu"] - started["cpu"] + e["children"] - started["children"]))
        lines.append(
            f"{first['worker']}: {last['t'] - first['t']:.1f} s wall, {last['cpu']:.1f} s CPU"
            f" (+{last['children']:.1f} s in children)"
            + (f"; collected {collected['tests']} tests at {collected['cpu']:.1f} s CPU"
               if collected else ""))
    files: Counter[str] = Counter()
    for nodeid, _, cpu in tests:
        files[nodeid.split("::")[0]] += cpu
    lines.append(f"tests: {len(tests)}, {sum(c for _, _, c in tests):.1f} s CPU; by file:")
    lines += [f"  {cpu:6.2f} s  {name}" for name, cpu in files.most_common(top)]
    lines.append("by test:")
    lines += [f"  {cpu:6.2f} s CPU {wall:6.2f} s wall  {nodeid}"
              for nodeid, wall, cpu in sorted(tests, key=lambda t: -t[2])[:top]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    print("\n".join(summary(args.folder, args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
