"""The guides' example messages, rendered from the shipped case files so they cannot drift.

A guide marks a block it quotes from a message with the block's name on the line before its
fence::

    <!-- numcheck message: mhc-tf32-y -->
    ```
      budget:      cases/mhc.toml:122 (...)
    ```

and :data:`MESSAGES` renders each name now: the failure message of a shipped case's check
(numcheck.report.render.failure_message, the one the gate prints) on a planted miss, the
lines the guide quotes. tests/test_doc_messages.py compares every marked block with its
rendering, so a case file whose lines move, or a message whose wording changes, fails until
the guides follow:

    python -m tests.doc_messages            # compare; exit 1 and list what differs
    python -m tests.doc_messages --write    # rewrite the marked blocks
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
#: The guides that may hold marked blocks.
GUIDES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_BLOCK = re.compile(r"(<!-- numcheck message: (?P<name>[a-z0-9-]+) -->\n```\n)(?P<body>.*?)(```)",
                    re.DOTALL)


def _budget_line(case_id: str, variant: str, output: str, metric: str, value: float,
                 limit: float, *, device_class: str = "cpu") -> str:
    """The ``budget:`` line of the failure message of a shipped case's check that misses
    ``<output>.<metric>`` (``value`` against ``limit``) on a device of ``device_class``."""
    from numcheck.check.result import CheckResult
    from numcheck.numerics.verdict import Violation
    from numcheck.report.render import Commands, failure_message
    from tests.shipped import shipped_cases

    (case,) = [c for c in shipped_cases() if c.id == case_id]
    miss = Violation(output, metric, value, limit, seed=0, upper=metric != "speedup_min")
    result = CheckResult(case, variant, "cpu" if device_class == "cpu" else "cuda",
                         seeds=[], violations=[miss])
    result.perf = SimpleNamespace(device_class=device_class)  # type: ignore[assignment]
    source = str(case.source.relative_to(ROOT))
    message = failure_message(result, Commands("reproduce", "regenerate"), source)
    return next(line for line in message.splitlines() if line.startswith("  budget:"))


#: Each marked block's name -> what it holds now.
MESSAGES: dict[str, Callable[[], str]] = {
    # mHC's y is stored in bf16: tf32 is held to the case's bf16 budget on it
    # (docs/budgets.md, "Outputs stored in a coarser dtype"; docs/architecture.md).
    "mhc-tf32-y": lambda: _budget_line("v4flash-t64", "tf32", "y", "rel_fro", 0.02, 0.0069),
    # A speed threshold, held on the GPU model it was measured on (docs/speed.md).
    "perf-h200": lambda: _budget_line("perf-indexer-v4flash-b64-l8k-decode", "bf16", "perf",
                                      "speedup_min", 1.01, 1.06, device_class="H200"),
}


def blocks(text: str) -> list[tuple[str, str]]:
    """Every marked block of a guide's text: (name, what it holds)."""
    return [(m["name"], m["body"]) for m in _BLOCK.finditer(text)]


def rendered(text: str) -> str:
    """The guide's text with every marked block holding what its name renders now."""
    return _BLOCK.sub(lambda m: m[1] + MESSAGES[m["name"]]() + "\n" + m[4], text)


def differences() -> list[str]:
    """Every marked block that differs from its rendering, or names no message, one line each."""
    out = []
    for guide in GUIDES:
        for name, body in blocks(guide.read_text()):
            where = f"{guide.relative_to(ROOT)}: {name}"
            if name not in MESSAGES:
                out.append(f"{where}: no such message (known: {', '.join(MESSAGES)})")
            elif body != MESSAGES[name]() + "\n":
                out.append(f"{where}: the guide has {body.rstrip()!r}, "
                           f"now {MESSAGES[name]()!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the guides' marked blocks")
    args = ap.parse_args(argv)
    if args.write:
        for guide in GUIDES:
            text = guide.read_text()
            if blocks(text) and rendered(text) != text:
                guide.write_text(rendered(text))
                print(f"wrote {guide.relative_to(ROOT)}")
        return 0
    diff = differences()
    print("\n".join(diff) or "every marked block is what numcheck prints")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
