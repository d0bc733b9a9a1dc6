"""Where a failed check's error sits, in the op's own structure.

A failure message that says ``logits.rel_fro 0.14 > budget 0.004`` leaves the engineer to
bisect by hand: which request, which page, which MTP row, which tokens. numcheck knows each
output's structure (:mod:`numcheck.ops.structure`), so on a failed check it measures how the error
is spread over every grouping and names the groups that carry it.

What is measured, per element of the failing output (only where golden and output are both
finite, unless the failure is about the non-finite pattern itself):

- **error**: ``(|out - golden| / (atol + rtol |golden|))^2``: the squared error in units of
  the output's own budget band, so honest rounding, which grows with ``|golden|``, weighs
  about the same everywhere and large values do not pass for a localization;
- **mismatches**: positions whose NaN / +inf / -inf pattern differs from the golden's (a mask
  off by one, an overflow), one count each;
- **flips**: unexplained top-k flips, placed on the grid of the scores they rank.

Concentration along one grouping: sort its groups by error density (error / elements), take
the ``k`` densest groups where ``error share - element share`` peaks (the Lorenz curve's
largest gap: the Hoover index, a Gini-like measure), and compare the density inside those
``k`` groups with the density outside (the *lift*). A grouping is **concentrated** when the
``k`` groups carry at least :data:`MIN_SHARE` of the error at a lift of at least
:data:`MIN_LIFT`; otherwise the error is spread out and the message says "no concentration".
docs/reliability.md ("Localization") shows why the thresholds separate honest bf16 rounding
from planted bugs.

Before that, cheap **structural transforms** are tried: the output equal to the golden scaled
by one factor, shifted by one along an axis, with two axes transposed, or with the slices
along an axis permuted. One fits when it leaves at most :data:`TRANSFORM_FIT` of the error.

All of it runs only on a failed check; ``NUMCHECK_LOCALIZE=0`` in the environment switches
it off. The room:

- :mod:`~numcheck.localize.failure`: the whole localization of a failed check
  (:func:`localize_failure`) and its message lines;
- :mod:`~numcheck.localize.grids`: the measured weights of one output (error, mismatches,
  flips);
- :mod:`~numcheck.localize.spread`: concentration along a grouping, and its thresholds;
- :mod:`~numcheck.localize.transforms`: the structural transforms;
- :mod:`~numcheck.localize.findings`: what a localization says, as plain data (no torch).

The names below were this package's as one module; they load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from numcheck._lazy import lazy_exports as _lazy_exports

#: Name -> the module that defines it (loaded on first use).
_EXPORTS = {
    "ENV": "numcheck.localize.failure",
    "enabled": "numcheck.localize.failure",
    "failed": "numcheck.localize.failure",
    "localize_failure": "numcheck.localize.failure",
    "localize_grid": "numcheck.localize.failure",
    "localize_output": "numcheck.localize.failure",
    "Concentration": "numcheck.localize.findings",
    "Localization": "numcheck.localize.findings",
    "Transform": "numcheck.localize.findings",
    "error_grid": "numcheck.localize.grids",
    "flip_grid": "numcheck.localize.grids",
    "nonfinite_grid": "numcheck.localize.grids",
    "MAX_ELEMENT_SHARE": "numcheck.localize.spread",
    "MIN_EVENTS": "numcheck.localize.spread",
    "MIN_EXCESS": "numcheck.localize.spread",
    "MIN_LIFT": "numcheck.localize.spread",
    "MIN_SHARE": "numcheck.localize.spread",
    "concentration": "numcheck.localize.spread",
    "TRANSFORM_FIT": "numcheck.localize.transforms",
    "TRANSFORM_LEFT": "numcheck.localize.transforms",
    "find_transform": "numcheck.localize.transforms",
}

__all__ = [
    "Concentration",
    "ENV",
    "Localization",
    "MAX_ELEMENT_SHARE",
    "MIN_EVENTS",
    "MIN_EXCESS",
    "MIN_LIFT",
    "MIN_SHARE",
    "TRANSFORM_FIT",
    "TRANSFORM_LEFT",
    "Transform",
    "concentration",
    "enabled",
    "error_grid",
    "failed",
    "find_transform",
    "flip_grid",
    "localize_failure",
    "localize_grid",
    "localize_output",
    "nonfinite_grid",
]  # the names of _EXPORTS (tests/test_imports.py keeps them in step)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads lazily
    from numcheck.localize.failure import (
        ENV,
        enabled,
        failed,
        localize_failure,
        localize_grid,
        localize_output,
    )
    from numcheck.localize.findings import Concentration, Localization, Transform
    from numcheck.localize.grids import error_grid, flip_grid, nonfinite_grid
    from numcheck.localize.spread import (
        MAX_ELEMENT_SHARE,
        MIN_EVENTS,
        MIN_EXCESS,
        MIN_LIFT,
        MIN_SHARE,
        concentration,
    )
    from numcheck.localize.transforms import TRANSFORM_FIT, TRANSFORM_LEFT, find_transform


__getattr__, __dir__ = _lazy_exports(__name__, globals(), _EXPORTS)
