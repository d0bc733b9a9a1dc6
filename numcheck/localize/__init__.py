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
``k`` groups carry at least :data:`~numcheck.localize.spread.MIN_SHARE` of the error at a
lift of at least :data:`~numcheck.localize.spread.MIN_LIFT`; otherwise the error is spread
out and the message says "no concentration". docs/reliability.md ("Localization") shows why
the thresholds separate honest bf16 rounding from planted bugs.

Before that, cheap **structural transforms** are tried: the output equal to the golden scaled
by one factor, shifted by one along an axis, with two axes transposed, or with the slices
along an axis permuted. One fits when it leaves at most
:data:`~numcheck.localize.transforms.TRANSFORM_FIT` of the error.

All of it runs only on a failed check; ``NUMCHECK_LOCALIZE=0`` in the environment switches
it off. The room:

- :mod:`~numcheck.localize.failure`: the whole localization of a failed check
  (:func:`~numcheck.localize.failure.localize_failure`) and its message lines;
- :mod:`~numcheck.localize.grids`: the measured weights of one output (error, mismatches,
  flips);
- :mod:`~numcheck.localize.spread`: concentration along a grouping, and its thresholds;
- :mod:`~numcheck.localize.transforms`: the structural transforms;
- :mod:`~numcheck.localize.findings`: what a localization says, as plain data (no torch).
"""
