"""How fast this machine's CPU is running right now: a fixed pure-Python workload, in CPU
seconds (process time, so waiting for the CPU does not count, but a slower one does).

    python -m benchmarks.cost.machine_speed [--repeats 3]

The README quotes it beside the test command's wall time: on a shared VM the same workload
takes a third longer at some minutes than at others, which is most of the spread between
runs of the same tree. Run it before and after a timed run. Needs nothing beyond Python.
"""

from __future__ import annotations

import argparse
import hashlib
import time


def workload() -> float:
    """CPU seconds for 300k chained sha256 digests and a 3M-term sum of squares."""
    start = time.process_time()
    h = b"x"
    for _ in range(300_000):
        h = hashlib.sha256(h).digest()
    sum(i * i for i in range(3_000_000))
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    times = [workload() for _ in range(args.repeats)]
    print("machine speed: " + ", ".join(f"{t:.3f}" for t in times) + " CPU s (lower is faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
