"""``python -m numcheck.heldout FILE...``: the held-out check, under its documented name.

The check lives with the other tools that measure budgets, in :mod:`numcheck.calibrate.heldout`;
this module only keeps the command's name.
"""

from __future__ import annotations

from numcheck.calibrate.heldout import main

if __name__ == "__main__":
    raise SystemExit(main())
