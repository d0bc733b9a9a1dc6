"""How long one small FP8 case takes to calibrate, as a user runs it (issue 44).

A user project is made in a temporary folder: tests/fp8_mlp.py's op (an MLP up-projection
``silu(x Wg^T) * (x Wu^T)``, two GEMMs) with its honest DeepSeek-style FP8 variant and the
variant 2% high that borrows its tables, a case of the shape asked for, its golden. The gate
is run once; the calibrate command its failure prints (the FP8 scheme's honest family, the
lender and the borrower, 20 fresh seeds) is then run as printed, ``--runs`` times, each in a
fresh process. Printed: each run's wall and CPU seconds, their min / median / max, and the
load average before and after (other processes share the machine's cores: say so)::

    python -m benchmarks.cost.fp8_calibration_time --runs 3
    python -m benchmarks.cost.fp8_calibration_time --runs 3 --shape 16,1024,512
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
def pytest_numcheck_register(registry):
    from tests import fp8_mlp
    fp8_mlp.register(registry)
"""


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pytest(folder: Path, args: list[str]) -> tuple[subprocess.CompletedProcess[str], float,
                                                    float]:
    """``pytest args`` in ``folder``: the run, its wall and its CPU seconds (children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=folder, text=True,
                         capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return run, wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shape", default="8,256,128", help="tokens,hidden,intermediate")
    args = parser.parse_args(argv)
    tokens, hidden, inter = (int(v) for v in args.shape.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "cases").mkdir()
        (folder / "pytest.ini").write_text(  # the root on sys.path: tests.fp8_mlp
            f"[pytest]\npythonpath = {shlex.quote(str(ROOT))}\n"
            "addopts = --numcheck-device cpu -p no:cacheprovider\n")
        (folder / "conftest.py").write_text(CONFTEST)
        (folder / "cases" / "mlp.toml").write_text(
            f'[small]\nop = "mlp_up"\nshape = {{ tokens = {tokens}, hidden = {hidden}, '
            f'intermediate = {inter} }}\nseeds = [0, 1]\nvariants = ["fp8", "fp8_bug"]\n\n'
            '[small.budget.fp8_bug]\nbudget_like = "fp8"\n')
        made, _, _ = pytest(folder, ["--numcheck", "--numcheck-regen", "-k", "fp32", "-q"])
        if made.returncode != 0:
            print(made.stdout[-2000:], file=sys.stderr)
            return 2
        gate, _, _ = pytest(folder, ["--numcheck", "-k", "fp8_bug", "-q"])
        line = next((ln for ln in gate.stdout.splitlines() if "my budget is too tight" in ln),
                    None)
        if line is None:
            print("the bug did not fail: no calibrate command printed", file=sys.stderr)
            return 2
        command = line.split(" not this variant alone: ", 1)[1]
        print(f"# case: mlp_up, tokens {tokens}, hidden {hidden}, intermediate {inter}")
        print(f"# command (as printed): {command}")
        walls, cpus = [], []
        for i in range(args.runs):
            at = load()
            run, wall, cpu = pytest(folder, shlex.split(command)[1:])
            if "numcheck calibrate: suggested budgets" not in run.stdout:
                print(run.stdout[-3000:], file=sys.stderr)
                return 2
            walls.append(wall)
            cpus.append(cpu)
            print(f"run {i + 1}: {wall:.1f} s wall, {cpu:.1f} s CPU; load {at} -> {load()}",
                  flush=True)
    print(f"wall min / median / max: {min(walls):.1f} / {statistics.median(walls):.1f} / "
          f"{max(walls):.1f} s; CPU {min(cpus):.1f} / {statistics.median(cpus):.1f} / "
          f"{max(cpus):.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
