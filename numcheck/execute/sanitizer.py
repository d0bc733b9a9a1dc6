"""Checks run under NVIDIA's compute-sanitizer: memory errors that leave the numbers right.

A kernel that reads past its input and masks the value away returns the right outputs, so
no comparison with a golden can see it; compute-sanitizer's ``memcheck`` sees the read.
``--numcheck-sanitize[=memcheck,racecheck,initcheck,synccheck]`` runs each selected check in
a worker process of its own under the tool (:mod:`numcheck.execute.isolated`), once per tool,
with PyTorch's caching allocator off (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: every tensor is
its own allocation, so a read one element past a tensor's end is outside any allocation
rather than inside a pooled block). The tool writes its report to a log file per run; the
errors in it (:func:`parse_errors`) fail the check, the first few shown with the kernel and
the access.

Pure apart from finding the executable: the log's parser is tested on recorded logs.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
DEFAULT_TOOLS = ("memcheck",)
#: Errors of one run the failure shows (the log keeps the rest).
SHOWN = 5

#: Lines of a report that are not an error record.
_NOT_ERRORS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "LEAK SUMMARY", "RACECHECK SUMMARY",
               "Target application returned", "This can happen", "No ", "Saved host")
_MARK = "========="
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def parse_tools(value: str | None) -> tuple[str, ...]:
    """``memcheck,racecheck`` -> the tools in order; ``None`` or "" -> memcheck.

    Raises ValueError naming the tools numcheck knows for an unknown one."""
    if not value:
        return DEFAULT_TOOLS
    tools = tuple(t.strip() for t in value.split(",") if t.strip())
    unknown = [t for t in tools if t not in TOOLS]
    if unknown or not tools:
        raise ValueError(f"--numcheck-sanitize={value}: unknown tool(s) {unknown}; "
                         f"known: {', '.join(TOOLS)}")
    return tools


def find_executable() -> str | None:
    """compute-sanitizer on PATH, under $CUDA_HOME/bin or /usr/local/cuda/bin; else None."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            path = Path(root) / "bin" / "compute-sanitizer"
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return None


@dataclass(frozen=True)
class Sanitizer:
    """The tools a run asked for and the executable that runs them."""

    executable: str
    tools: tuple[str, ...] = DEFAULT_TOOLS
    shown: int = SHOWN
    #: Bytes of padding after each allocation under memcheck (where the tool has the option).
    padding: int = 512
    env: dict[str, str] = field(default_factory=lambda: {
        "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})

    def command(self, tool: str, log: Path) -> list[str]:
        """The prefix that runs a worker under ``tool``, its report into ``log``."""
        cmd = [self.executable, "--tool", tool, "--log-file", str(log),
               "--print-limit", "100", "--target-processes", "all"]
        if tool == "memcheck":
            cmd += ["--leak-check", "no"]
            if self.padding and supports(self.executable, "--padding"):
                # A buffer after every allocation: a read just past a tensor's end lands in
                # it (reported) instead of in the next allocation (not an error).
                cmd += ["--padding", str(self.padding)]
        return cmd

    def errors(self, tool: str, log: Path) -> list[str]:
        """The errors of one run's log, as ``tool: error (kernel)`` lines."""
        try:
            text = log.read_text(errors="replace")
        except OSError:
            return [f"{tool}: no report was written ({log})"]
        return [f"{tool}: {e}" for e in parse_errors(text)]


@functools.cache
def supports(executable: str, option: str) -> bool:
    """Whether ``executable --help`` lists ``option`` (asked once per run)."""
    try:
        out = subprocess.run([executable, "--help"], capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return option in out.stdout + out.stderr


def parse_errors(text: str) -> list[str]:
    """The errors of a compute-sanitizer report, each on one line with where it happened::

        Invalid __global__ read of size 4 bytes at oob_read_kernel+0x1b0 by thread
        (127,0,0) in block (0,0,0): Address 0x7f... is out of bounds

    A record starts at a line ``========= <text>`` and goes on with lines indented under
    it (``=========     at ...``, ``by thread ...``, ``Address ...``); an empty list when the
    tool found nothing. A report whose summary counts errors that this parser found no
    record of still gives one line, so that an error is never lost."""
    errors: list[str] = []
    open_record = False
    for raw in text.splitlines():
        if not raw.startswith(_MARK):
            continue
        body = raw[len(_MARK):]
        line = body.strip()
        if not line:
            open_record = False
            continue
        if not body.startswith("  "):  # a head line: a new record, or the report's own
            open_record = not line.startswith(_NOT_ERRORS)
            if open_record:
                errors.append(line.rstrip("."))
            continue
        if not open_record:
            continue
        if line.startswith("at ") and " at " not in errors[-1]:
            errors[-1] += " " + line.split(" in /")[0]
        elif line.startswith("by thread"):
            errors[-1] += " " + line
        elif line.startswith("Address"):
            errors[-1] += ": " + line
    counted = sum(int(m.group(1)) for m in _SUMMARY.finditer(text))
    if counted and not errors:
        errors = [f"{counted} error(s) in the report (see the log)"]
    return errors
