"""``python -m numcheck.calibrate``: see :func:`numcheck.calibrate.main`."""

from __future__ import annotations

from numcheck.calibrate import main

if __name__ == "__main__":
    raise SystemExit(main())
