"""tests/fresh.py, the fresh-interpreter server the import and packaging tests run in: one
server per run, shared by the run's processes, requests side by side, gone with its owner.

These servers preload nothing (the real one preloads torch): what is tested is the sharing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fresh import FreshPython, make_home, stop

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the server forks (POSIX only)")


@pytest.fixture
def home() -> Iterator[Path]:
    made = make_home()
    yield made
    stop(made)


def _gone(pid: int, within: float = 20.0) -> bool:
    """Whether process ``pid`` ends (or is a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            status = Path(f"/proc/{pid}/stat")
            if status.exists() and status.read_text().split(") ")[-1].startswith("Z"):
                return True
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


#: A request that meets another: it leaves its flag, then waits for the other's. Served one
#: at a time, the first would wait out its 20 s and fail.
MEET = """
import os, sys, time
from pathlib import Path
mine, other = Path(sys.argv[1]), Path(sys.argv[2])
mine.touch()
deadline = time.monotonic() + 20
while not other.exists():
    if time.monotonic() > deadline:
        sys.exit("the other request never ran alongside this one")
    time.sleep(0.01)
print(os.environ["FRESH_SERVER_PID"])
"""

#: A client process, as a pytest-xdist worker is: its own FreshPython on the run's home.
CLIENT = """
import sys
from tests.fresh import FreshPython
home, code, *argv = sys.argv[1:]
done = FreshPython(home, preload="").run(code, argv)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"""


def test_the_processes_of_a_run_share_one_server_and_run_side_by_side(
    home: Path, tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    clients = [
        subprocess.Popen([sys.executable, "-c", CLIENT, str(home), MEET, str(x), str(y)],
                         cwd=TESTS.parent,  # python -c imports from its folder: tests.fresh
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for x, y in ((a, b), (b, a))
    ]
    results = [c.communicate(timeout=60) for c in clients]
    assert [c.returncode for c in clients] == [0, 0], results
    pids = {out.strip() for out, _ in results}
    assert pids == {str(FreshPython(home, preload="").server_pid())}  # one server


def test_a_child_runs_the_code_as_python_c_would(home: Path, tmp_path: Path) -> None:
    fresh = FreshPython(home, preload="")
    code = ("import os, sys; print(sys.argv[1:], os.environ.get('X'), os.getcwd(), "
            "sys.path[0]); print('to stderr', file=sys.stderr); sys.exit(3)")
    done = fresh.run(code, ["a", "b c"], env={"X": "set"}, cwd=tmp_path, path=[TESTS])
    assert done.returncode == 3
    assert done.stdout.strip() == f"['a', 'b c'] set {tmp_path} {TESTS}"
    assert done.stderr.strip() == "to stderr"
    assert fresh.run("raise ValueError('boom')").returncode == 1
    assert fresh.run("import time; time.sleep(60)", timeout=0.5).returncode == -signal.SIGKILL


def test_a_server_that_died_is_started_again(home: Path) -> None:
    fresh = FreshPython(home, preload="")
    assert fresh.run("pass").returncode == 0
    first = fresh.server_pid()
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert _gone(first)
    assert fresh.run("pass").returncode == 0
    assert fresh.server_pid() not in (None, first)


def test_the_server_ends_with_its_owner() -> None:
    # The owner makes the home and starts the server, then exits without stopping it.
    code = ("from tests.fresh import FreshPython, make_home\n"
            "home = make_home(); FreshPython(home, preload='').run('pass'); print(home)")
    owner = subprocess.run([sys.executable, "-c", code], cwd=TESTS.parent, capture_output=True,
                           text=True, check=True, timeout=60)
    home = Path(owner.stdout.strip())
    try:
        server = FreshPython(home, preload="").server_pid()
        assert server is not None
        assert _gone(server)
        assert not (home / "server.sock").exists()
    finally:
        stop(home)


def test_a_home_of_its_own_is_stopped_by_close() -> None:
    fresh = FreshPython(preload="")
    assert fresh.run("pass").returncode == 0
    server = fresh.server_pid()
    assert server is not None
    fresh.close()
    assert _gone(server)
    assert not fresh.home.exists()
