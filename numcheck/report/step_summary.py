"""GitHub Actions' job summary: markdown appended to the file ``$GITHUB_STEP_SUMMARY`` names.

Both the pytest run (``--numcheck-markdown``) and ``python -m numcheck compare`` add their
markdown there, so a CI job shows the gate's table on its summary page without any setup.
Outside Actions the variable is unset and nothing happens.
"""

from __future__ import annotations

import os

#: The environment variable GitHub Actions sets to the job summary's file.
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def append_step_summary(text: str) -> bool:
    """Append ``text`` (and a newline) to the job summary; False when not running in Actions."""
    path = os.environ.get(STEP_SUMMARY_ENV)
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as f:
        f.write(text + "\n")
    return True
