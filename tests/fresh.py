"""Fresh Python interpreters for the tests that need one, without paying for torch each time.

Some tests ask what a fresh interpreter does: which modules an import pulls in, or how a run
goes without triton. Starting one costs seconds, most of it importing torch. So one
interpreter per test process imports torch, and nothing else, and runs each request in a
forked child: the child starts as a fresh interpreter that has just run ``import torch``
(the scripts of these tests import torch first anyway, or import numcheck, which does), with
its own environment, working directory, ``sys.argv`` and ``sys.path`` entries in front.
Without ``os.fork`` (Windows) each request is a new interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The forking interpreter: one JSON request per line on stdin, one JSON answer per line.
SERVER = r"""
import json, os, sys, time, traceback
import torch  # the one expensive import, shared by every request

loaded = [m for m in sys.modules if m.split(".")[0] in ("numcheck", "triton")]
assert not loaded, f"importing torch loaded {loaded}: a child would not start fresh"


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


for line in sys.stdin:
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
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
"""


class FreshPython:
    """Runs code as ``python -c CODE ARGV...`` would, in a fresh interpreter that has
    imported torch (a forked child of one started on first use)."""

    def __init__(self) -> None:
        self._server: subprocess.Popen[str] | None = None

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
            server = self._start()
            assert server.stdin is not None and server.stdout is not None
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            answer = server.stdout.readline()
            if not answer:
                self.close()
                raise RuntimeError("the fresh-interpreter server died (its stderr is above)")
            return subprocess.CompletedProcess(
                [sys.executable, "-c", code, *argv], json.loads(answer)["returncode"],
                out.read_text() if out.exists() else "", err.read_text() if err.exists() else "")

    def _start(self) -> subprocess.Popen[str]:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen([sys.executable, "-c", SERVER], text=True,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return self._server

    def close(self) -> None:
        if self._server is not None:
            # Killed, not asked to exit: it holds nothing (each request's child is waited
            # for), and an interpreter with torch loaded takes about a second to shut down,
            # at the end of the test process that started it.
            self._server.kill()
            self._server.wait()
            if self._server.stdin is not None:
                self._server.stdin.close()
            if self._server.stdout is not None:
                self._server.stdout.close()
            self._server = None
