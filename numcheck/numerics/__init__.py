"""The numerics of a check: a variant's outputs against the golden, and what judges them.

- :mod:`~numcheck.check.run`: a case's inputs (made once per seed, fingerprinted), a
  variant's call checked for what it returns, the rounding envelope of a precision class;
- :mod:`~numcheck.check.against_golden`: one check's numerics, seed by seed, against the
  golden validated for its case (:func:`check`);
- :mod:`~numcheck.numerics.metrics`: elementwise error metrics (float64);
  :mod:`~numcheck.numerics.topk`: tie-aware top-k agreement;
- :mod:`~numcheck.numerics.budgets`: the budget model and the per-precision defaults;
  :mod:`~numcheck.numerics.verdict`: metrics against budgets, violations;
  :mod:`~numcheck.numerics.nonfinite`: why an inf/NaN pattern differs;
- :mod:`~numcheck.numerics.metric_names`: every metric's name, shared by all rooms (no torch);
- :mod:`~numcheck.check.firstcall`: a variant's first call, timed apart;
- what a check keeps for its readers: :mod:`~numcheck.check.plotdata` (histograms),
  :mod:`~numcheck.check.cpu_tf32` (the tf32-on-CPU note), :mod:`~numcheck.check.extras`.

The names below are what this package held as one module, loaded on first use (importing
the package, or its torch-free :mod:`~numcheck.numerics.metric_names` and
:mod:`~numcheck.numerics.budgets`, never imports torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from numcheck._lazy import lazy_exports as _lazy_exports

#: Name -> the module that defines it (loaded on first use).
_EXPORTS = {
    "CaseInputs": "numcheck.check.run",
    "run_variant": "numcheck.check.run",
    "rounding_envelope_outputs": "numcheck.check.run",
    "check": "numcheck.check.against_golden",
    "seed_key": "numcheck.goldens.packing",
    "make_golden": "numcheck.check.make_golden",
    "fresh_golden": "numcheck.check.make_golden",
    "write_golden": "numcheck.check.make_golden",
    "regenerate": "numcheck.check.make_golden",
    "display_id": "numcheck.check.result",
    "SeedResult": "numcheck.check.result",
    "CheckResult": "numcheck.check.result",
    "VariantError": "numcheck.ops.spec",
}

__all__ = [
    "CaseInputs",
    "CheckResult",
    "SeedResult",
    "VariantError",
    "check",
    "display_id",
    "fresh_golden",
    "make_golden",
    "regenerate",
    "rounding_envelope_outputs",
    "run_variant",
    "seed_key",
    "write_golden",
]  # the names of _EXPORTS (tests/test_imports.py keeps them in step)

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads lazily
    from numcheck.check.make_golden import fresh_golden, make_golden, regenerate, write_golden
    from numcheck.goldens.packing import seed_key
    from numcheck.check.against_golden import check
    from numcheck.check.run import CaseInputs, rounding_envelope_outputs, run_variant
    from numcheck.ops.spec import VariantError
    from numcheck.check.result import CheckResult, SeedResult, display_id


__getattr__, __dir__ = _lazy_exports(__name__, globals(), _EXPORTS)
