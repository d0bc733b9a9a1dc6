"""Stored goldens: the FP32 reference outputs of each case, how they are read, checked and stored.

- :mod:`~numcheck.goldens.files`: the file (path, content hash, metadata, save and load) and
  the :class:`~numcheck.goldens.files.GoldenError` family;
- :mod:`~numcheck.goldens.packing`: how an output is stored (whole, or sampled when large)
  and aligned with a variant's output (:func:`~numcheck.goldens.packing.unpack_pair`);
- :mod:`~numcheck.goldens.freshness`: whether a golden still fits its case (inputs, op
  version, seeds, parameters);
- :mod:`~numcheck.goldens.case_golden`: a golden read and validated once for its case, the
  object the numerics of a check read;
- :mod:`~numcheck.goldens.regen`: storing a regenerated golden (NaN/Inf refused, stable bytes
  within the reference's :mod:`~numcheck.goldens.reproducibility`);
- :mod:`~numcheck.goldens.stale`: golden files no case uses; :mod:`~numcheck.goldens.obtained`:
  a failed variant's outputs, kept beside the golden.

Writes go through :mod:`numcheck.disk` (atomic files, the golden's lock). A golden is made
by running the op's reference, which is code that runs a check:
:mod:`numcheck.check.make_golden`. The names users read goldens with are in the public API
(``from numcheck import unpack_pair``).
"""
