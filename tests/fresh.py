"""Fresh Python interpreters for the tests that need one, without paying for torch each time.

Some tests ask what a fresh interpreter does: which modules an import pulls in, or how a run
goes without triton. Starting one costs seconds, most of it importing torch. So one server
interpreter imports torch, and nothing else, and runs each request in a forked child: the
child starts as a fresh interpreter that has just run ``import torch`` (the scripts of these
tests import torch first anyway, or import numcheck, which does), with its own environment,
working directory, ``sys.argv`` and ``sys.path`` entries in front.

One server serves a whole test run: the processes of a run (pytest-xdist's workers) share a
*home* folder, and the first that needs the server starts it there, under a lock; the others
connect to its socket. Requests run side by side (a forked handler per connection), so two
workers never wait for each other. The server ends when its owner (the process that made the
home: pytest-xdist's controller, or the one test process) stops it, or dies.
Without ``os.fork`` (Windows) each request is a new interpreter. The tests that use it start
a torch interpreter all the same, so they are marked ``slow`` (pyproject.toml).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

#: The environment variable that hands a run's home folder to its worker processes.
HOME_ENV = "NUMCHECK_TESTS_FRESH_HOME"

#: The server: ``python -c SERVER SOCKET OWNER_PID PRELOAD``. It imports PRELOAD (a module
#: name, or "" for nothing), listens on SOCKET, and serves one JSON request per connection
#: with one JSON answer, until OWNER_PID is gone.
SERVER = r"""
import contextlib, json, os, socket, sys, time, traceback
sock_path, owner, preload = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if preload:
    __import__(preload)  # the one expensive import, shared by every request

loaded = [m for m in sys.modules if m.split(".")[0] in ("numcheck", "triton")]
assert not loaded, f"importing {preload} loaded {loaded}: a child would not start fresh"
os.environ["FRESH_SERVER_PID"] = str(os.getpid())


def child(req):
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    for key, value in req["env"].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    os.chdir(req["cwd"])
    sys.argv = ["-c", *req["argv"]]
    sys.path[:0] = req["path"]
    code = 0
    try:
        exec(compile(req["code"], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    return code


def handle(conn):
    # A handler process per connection: it forks the fresh child and waits for it, so that
    # requests from several test processes run side by side.
    with conn.makefile("r") as lines:
        line = lines.readline()
    if not line:  # a client checking that the server is up
        return
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child(req)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + req["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    answer = {"returncode": os.waitstatus_to_exitcode(status)}
    conn.sendall((json.dumps(answer) + "\n").encode())


def owner_alive():
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
bound = f"{sock_path}.{os.getpid()}"
listener.bind(bound)
listener.listen(16)
os.rename(bound, sock_path)  # the socket appears only when it accepts
listener.settimeout(0.5)
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:  # reap finished handlers
            pass
    except ChildProcessError:
        pass
    try:
        conn, _ = listener.accept()
    except TimeoutError:
        if not owner_alive():
            break
        continue
    conn.settimeout(None)
    if os.fork() == 0:
        listener.close()
        try:
            handle(conn)
        finally:
            os._exit(0)
    conn.close()
with contextlib.suppress(OSError):
    os.unlink(sock_path)
"""


def make_home() -> Path:
    """A new home folder for one test run's server, owned by this process: the server ends
    when this process stops it (:func:`stop`) or dies."""
    home = Path(tempfile.mkdtemp(prefix="numcheck-fresh-"))
    (home / "owner").write_text(str(os.getpid()))
    return home


def server_pid(home: Path) -> int | None:
    """The pid of the server of ``home``, once one was started."""
    try:
        return int((home / "server.pid").read_text())
    except (FileNotFoundError, ValueError):
        return None


def stop(home: Path) -> None:
    """Stop the server of ``home``, if one was started, and remove the folder."""
    pid = server_pid(home)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(home, ignore_errors=True)


class FreshPython:
    """Runs code as ``python -c CODE ARGV...`` would, in a fresh interpreter that has
    imported ``preload`` (a forked child of a server started on first use).

    ``home``: the folder a run's processes share the server through (:func:`make_home`,
    in the process that owns the run); without one, this object makes a home of its own,
    whose server :meth:`close` stops."""

    def __init__(self, home: Path | None = None, *, preload: str = "torch") -> None:
        self._own_home = home is None
        self.home = make_home() if home is None else Path(home)
        self.owner = int((self.home / "owner").read_text())
        self.preload = preload

    def run(
        self,
        code: str,
        argv: Sequence[str] = (),
        *,
        env: Mapping[str, str | None] | None = None,
        cwd: Path | str | None = None,
        path: Sequence[Path | str] = (),
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """``code`` with ``sys.argv[1:] = argv``; ``env``: variables to set (None: unset);
        ``path``: folders in front of ``sys.path`` (and of ``PYTHONPATH``, for its own
        children). Output is captured as text."""
        env = dict(env or {})
        if path:
            env["PYTHONPATH"] = os.pathsep.join(
                [*map(str, path), *filter(None, [os.environ.get("PYTHONPATH")])])
        cwd = str(cwd or os.getcwd())
        if not hasattr(os, "fork"):
            full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
            return subprocess.run([sys.executable, "-c", code, *argv], env=full, cwd=cwd,
                                  capture_output=True, text=True, timeout=timeout, check=False)
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request = {"code": code, "argv": list(argv), "env": env, "cwd": cwd,
                       "path": [str(p) for p in path], "timeout": timeout,
                       "stdout": str(out), "stderr": str(err)}
            with self._connect() as conn:
                conn.sendall((json.dumps(request) + "\n").encode())
                with conn.makefile("r") as lines:
                    answer = lines.readline()
            if not answer:
                raise RuntimeError(f"the fresh-interpreter server died: {self._log()}")
            return subprocess.CompletedProcess(
                [sys.executable, "-c", code, *argv], json.loads(answer)["returncode"],
                out.read_text() if out.exists() else "", err.read_text() if err.exists() else "")

    def server_pid(self) -> int | None:
        """The pid of the server of this home, once started."""
        return server_pid(self.home)

    @contextlib.contextmanager
    def _connect(self) -> Iterator[socket.socket]:
        sock_path = self.home / "server.sock"
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                conn.connect(str(sock_path))
            except (FileNotFoundError, ConnectionRefusedError):
                self._start(sock_path)
                conn.connect(str(sock_path))
            yield conn
        finally:
            conn.close()

    def _start(self, sock_path: Path) -> None:
        """Start the home's server unless another process did (under the home's lock)."""
        import fcntl

        with open(self.home / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                try:
                    probe.connect(str(sock_path))
                    return  # started by another process while this one waited
                except (FileNotFoundError, ConnectionRefusedError):
                    pass
            sock_path.unlink(missing_ok=True)  # left by a server that died
            with open(self.home / "server.log", "w") as log:
                server = subprocess.Popen(
                    [sys.executable, "-c", SERVER, str(sock_path), str(self.owner),
                     self.preload],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                    start_new_session=True)
            _STARTED.append(server)  # kept: never waited for, it outlives this call
            (self.home / "server.pid").write_text(str(server.pid))
            deadline = time.monotonic() + 120
            while not sock_path.exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    server.kill()
                    raise RuntimeError(f"the fresh-interpreter server did not start: "
                                       f"{self._log()}")
                time.sleep(0.01)

    def _log(self) -> str:
        log = self.home / "server.log"
        return log.read_text()[-2000:] if log.exists() else "(no log)"

    def close(self) -> None:
        """Stop the server, where this object owns it (a home shared by a run is stopped
        by the run's owner: :func:`stop`)."""
        if self._own_home:
            stop(self.home)


_STARTED: list[subprocess.Popen[bytes]] = []
